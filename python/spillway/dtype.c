/*
 * dtype.c -- element types: their names, NumPy's dtype objects, buffer
 * formats, and single elements as Python numbers.
 */
#include "dtype.h"
#include "dlpack.h"

#include <string.h>

/* Indexed by sw_dtype. */
const sw_py_dtype_info sw_py_dtypes[4] = {
    [SW_FLOAT32] = {"float32", "f4", 4, 1, kDLFloat},
    [SW_FLOAT64] = {"float64", "f8", 8, 1, kDLFloat},
    [SW_INT32] = {"int32", "i4", 4, 0, kDLInt},
    [SW_INT64] = {"int64", "i8", 8, 0, kDLInt},
};

/* ------------------------------------------------------------------------
 * NumPy (imported on first need: only numpy(), dtype objects and
 * conversions of non-buffer objects use it)
 * ---------------------------------------------------------------------- */

PyObject *sw_py_numpy(sw_py_state *st)
{
    if (st->numpy == NULL)
        st->numpy = PyImport_ImportModule("numpy");
    return st->numpy;
}

/* The numpy.dtype object for dt (borrowed). */
PyObject *sw_py_np_dtype(sw_py_state *st, sw_dtype dt)
{
    if (st->np_dtypes[dt] == NULL) {
        PyObject *np = sw_py_numpy(st);
        if (np == NULL)
            return NULL;
        st->np_dtypes[dt] =
            PyObject_CallMethod(np, "dtype", "s", sw_py_dtypes[dt].name);
    }
    return st->np_dtypes[dt];
}

static PyObject *unsupported_dtype(PyObject *obj)
{
    PyErr_Format(PyExc_TypeError, "unsupported dtype %R: " SW_PY_DTYPE_HELP,
                 obj);
    return NULL;
}

/* dtype argument: None (float32), a name ("float32", "f4", ...), a
 * numpy.dtype or anything numpy.dtype() accepts (np.float64, float, ...).
 * Only native byte order. */
int sw_py_parse_dtype(sw_py_state *st, PyObject *obj, sw_dtype *out)
{
    if (sw_py_absent(obj)) {
        *out = SW_FLOAT32;
        return 0;
    }
    for (int i = 0; i < 4; i++) {
        if (obj == st->np_dtypes[i]) {
            *out = (sw_dtype)i;
            return 0;
        }
    }
    if (PyUnicode_Check(obj)) {
        const char *s = PyUnicode_AsUTF8(obj);
        if (s == NULL)
            return -1;
        for (int i = 0; i < 4; i++) {
            if (strcmp(s, sw_py_dtypes[i].name) == 0 ||
                strcmp(s, sw_py_dtypes[i].np_str) == 0) {
                *out = (sw_dtype)i;
                return 0;
            }
        }
    }
    /* Whatever NumPy calls one of ours. */
    PyObject *np = sw_py_numpy(st);
    if (np == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_ImportError))
            return -1;
        PyErr_Clear();
        unsupported_dtype(obj);
        return -1;
    }
    PyObject *d = PyObject_CallMethod(np, "dtype", "O", obj);
    if (d == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError) &&
            !PyErr_ExceptionMatches(PyExc_ValueError))
            return -1;
        PyErr_Clear();
        unsupported_dtype(obj);
        return -1;
    }
    PyObject *str = PyObject_GetAttrString(d, "str");
    Py_DECREF(d);
    if (str == NULL)
        return -1;
    const char *s = PyUnicode_AsUTF8(str);
    int rc = -1;
    if (s != NULL) {
        char native = PY_LITTLE_ENDIAN ? '<' : '>';
        for (int i = 0; i < 4; i++) {
            if (s[0] == native && strcmp(s + 1, sw_py_dtypes[i].np_str) == 0) {
                *out = (sw_dtype)i;
                rc = 0;
                break;
            }
        }
        if (rc != 0)
            unsupported_dtype(obj);
    }
    Py_DECREF(str);
    return rc;
}

/* The element type of a buffer (PEP 3118 format), native order only. */
int sw_py_dtype_from_format(const char *fmt, Py_ssize_t itemsize,
                            sw_dtype *out)
{
    const char *f = fmt ? fmt : "B";
    char order = '@';
    if (*f == '@' || *f == '=' || *f == '<' || *f == '>' || *f == '!')
        order = *f++;
    int foreign = PY_LITTLE_ENDIAN ? (order == '>' || order == '!')
                                   : (order == '<');
    int ok = !foreign && f[0] != '\0' && f[1] == '\0';
    if (ok) {
        switch (f[0]) {
        case 'f':
            ok = itemsize == 4;
            *out = SW_FLOAT32;
            break;
        case 'd':
            ok = itemsize == 8;
            *out = SW_FLOAT64;
            break;
        case 'b': case 'h': case 'i': case 'l': case 'q': case 'n':
            ok = itemsize == 4 || itemsize == 8;
            *out = itemsize == 4 ? SW_INT32 : SW_INT64;
            break;
        default:
            ok = 0;
        }
    }
    if (!ok) {
        PyErr_Format(PyExc_TypeError,
                     "unsupported element type (buffer format '%s', %zd "
                     "byte%s per item%s): " SW_PY_DTYPE_HELP,
                     fmt ? fmt : "B", itemsize, itemsize == 1 ? "" : "s",
                     foreign ? ", non-native byte order" : "");
        return -1;
    }
    return 0;
}

/* A Python number as an element of dt.  Integer arrays take integers only
 * (in range); float arrays take any real number. */
int sw_py_scalar_from_py(PyObject *obj, sw_dtype dt, sw_scalar *out,
                         const char *what)
{
    if (sw_py_dtypes[dt].is_float) {
        double v = PyFloat_AsDouble(obj);
        if (v == -1.0 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError,
                             "%s must be a real number for a %s array, not "
                             "%.100s",
                             what, sw_py_dtypes[dt].name,
                             Py_TYPE(obj)->tp_name);
            }
            return -1;
        }
        out->f = v;
        return 0;
    }
    if (PyFloat_Check(obj) || !PyIndex_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "%s must be an integer for a %s array, not %.100s", what,
                     sw_py_dtypes[dt].name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    PyObject *idx = PyNumber_Index(obj);
    if (idx == NULL)
        return -1;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(idx, &overflow);
    Py_DECREF(idx);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow != 0 ||
        (dt == SW_INT32 && (v < INT32_MIN || v > INT32_MAX))) {
        PyErr_Format(PyExc_OverflowError, "%s %R is out of range for %s",
                     what, obj, sw_py_dtypes[dt].name);
        return -1;
    }
    out->i = v;
    return 0;
}

/* One element read from memory as a Python number. */
PyObject *sw_py_scalar_to_py(const void *p, sw_dtype dt)
{
    switch (dt) {
    case SW_FLOAT32: {
        float f;
        memcpy(&f, p, sizeof f);
        return PyFloat_FromDouble((double)f);
    }
    case SW_FLOAT64: {
        double d;
        memcpy(&d, p, sizeof d);
        return PyFloat_FromDouble(d);
    }
    case SW_INT32: {
        int32_t i;
        memcpy(&i, p, sizeof i);
        return PyLong_FromLong((long)i);
    }
    case SW_INT64: {
        int64_t i;
        memcpy(&i, p, sizeof i);
        return PyLong_FromLongLong((long long)i);
    }
    }
    PyErr_SetString(PyExc_SystemError, "bad dtype");
    return NULL;
}

/* An element value as the bytes the array stores. */
void sw_py_scalar_store(void *p, sw_dtype dt, sw_scalar v)
{
    switch (dt) {
    case SW_FLOAT32: {
        float f = (float)v.f;
        memcpy(p, &f, sizeof f);
        break;
    }
    case SW_FLOAT64:
        memcpy(p, &v.f, sizeof v.f);
        break;
    case SW_INT32: {
        int32_t i = (int32_t)v.i;
        memcpy(p, &i, sizeof i);
        break;
    }
    case SW_INT64: {
        int64_t i = (int64_t)v.i;
        memcpy(p, &i, sizeof i);
        break;
    }
    }
}
