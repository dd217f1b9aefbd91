/*
 * util.c -- what every file of the module uses: library errors as Python
 * exceptions (and the exceptions themselves), argument parsing, the clock,
 * byte counts as people read them.
 */
#include "module.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

int64_t sw_py_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ------------------------------------------------------------------------
 * Errors
 * ---------------------------------------------------------------------- */

/* Library errors map to Python's exceptions by meaning (DESIGN.md,
 * "Errors"): never a crash, and the message is the library's detail. */
PyObject *sw_py_raise_detail(sw_py_state *st, int rc, const char *detail)
{
    if (rc == SW_PY_CLOSED) {
        PyErr_SetString(PyExc_ValueError,
                        "the device was closed (Device.close(), from "
                        "another thread) before this call could start");
        return NULL;
    }
    PyObject *exc;
    switch (rc) {
    case SW_ERR_OOM:
    case SW_ERR_TOO_LARGE:
        exc = st->DeviceMemoryError;
        break;
    case SW_ERR_HOST_OOM:
        exc = PyExc_MemoryError;
        break;
    case SW_ERR_INVALID_ARG:
    case SW_ERR_NO_DEVICE:
        exc = PyExc_ValueError;
        break;
    case SW_ERR_OUT_OF_RANGE:
        exc = PyExc_IndexError;
        break;
    case SW_ERR_DTYPE:
        exc = PyExc_TypeError;
        break;
    case SW_ERR_UNSUPPORTED:
        exc = PyExc_NotImplementedError;
        break;
    default: /* SW_ERR_DEVICE, SW_ERR_BUSY, SW_ERR_INVALID_HANDLE */
        exc = st->DeviceError;
        break;
    }
    if (exc == NULL) /* module state cleared at shutdown */
        exc = rc == SW_ERR_OOM || rc == SW_ERR_TOO_LARGE ? PyExc_MemoryError
                                                         : PyExc_RuntimeError;
    /* The memory history's allocation sites (history.py); the library's
     * message alone should that fail.  A reference of ours to the hook:
     * another thread may replace it meanwhile. */
    PyObject *hook = NULL;
    if (detail != NULL && detail[0] != '\0' && rc == SW_ERR_OOM) {
        SW_PY_LOCK(&st->mu);
        hook = Py_XNewRef(st->oom_hook);
        SW_PY_UNLOCK(&st->mu);
    }
    if (hook != NULL) {
        PyObject *msg = PyObject_CallFunction(hook, "s", detail);
        Py_DECREF(hook);
        if (msg != NULL && PyUnicode_Check(msg)) {
            PyErr_SetObject(exc, msg);
            Py_DECREF(msg);
            return NULL;
        }
        Py_XDECREF(msg);
        PyErr_Clear();
    }
    if (detail != NULL && detail[0] != '\0')
        PyErr_SetString(exc, detail);
    else
        PyErr_Format(exc, "%s (%s)", sw_strerror(rc), sw_err_name(rc));
    return NULL;
}

PyObject *sw_py_raise(sw_py_state *st, int rc)
{
    return sw_py_raise_detail(st, rc, sw_last_error());
}

PyObject *sw_py_raise_rc(sw_py_state *st, int rc)
{
    if (rc == SW_PY_NOMEM)
        return PyErr_NoMemory();
    return sw_py_raise(st, rc);
}

/* ------------------------------------------------------------------------
 * Argument parsing for METH_FASTCALL | METH_KEYWORDS
 *
 * names[0..nnames): the parameters; the first npos may be passed by
 * position, the first nreq are required.  out[i] is NULL when absent.
 * ---------------------------------------------------------------------- */

int sw_py_parse_args(const char *fname, PyObject *const *args,
                     Py_ssize_t nargs, PyObject *kwnames,
                     const char *const *names, int nnames, int npos,
                     int nreq, PyObject **out)
{
    for (int i = 0; i < nnames; i++)
        out[i] = NULL;
    if (nargs > npos) {
        PyErr_Format(PyExc_TypeError,
                     "%s() takes at most %d positional argument%s (%zd "
                     "given)",
                     fname, npos, npos == 1 ? "" : "s", nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        out[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int found = -1;
        for (int i = 0; i < nnames; i++) {
            if (PyUnicode_CompareWithASCIIString(key, names[i]) == 0) {
                found = i;
                break;
            }
        }
        if (found < 0) {
            PyErr_Format(PyExc_TypeError,
                         "%s() got an unexpected keyword argument '%U'",
                         fname, key);
            return -1;
        }
        if (out[found] != NULL) {
            PyErr_Format(PyExc_TypeError,
                         "%s() got multiple values for argument '%s'", fname,
                         names[found]);
            return -1;
        }
        out[found] = args[nargs + k];
    }
    for (int i = 0; i < nreq; i++) {
        if (out[i] == NULL) {
            PyErr_Format(PyExc_TypeError,
                         "%s() missing required argument '%s'", fname,
                         names[i]);
            return -1;
        }
    }
    return 0;
}

/* The library takes C strings, which end at the first NUL: "sim:0\0x"
 * would open sim:0, a budget of "512M\0junk" be 512 MiB, a tag "a\0b"
 * become "a".  PyUnicode_AsUTF8 hands such a string over silently; the
 * length it reports tells. */
const char *sw_py_utf8(PyObject *str, const char *what)
{
    Py_ssize_t len;
    const char *s = PyUnicode_AsUTF8AndSize(str, &len);
    if (s == NULL)
        return NULL;
    if (strlen(s) != (size_t)len) {
        PyErr_Format(PyExc_ValueError,
                     "%s must not contain a NUL character ('\\x00'): %R",
                     what, str);
        return NULL;
    }
    return s;
}

int sw_py_parse_tag(PyObject *obj, const char **tag)
{
    *tag = NULL;
    if (sw_py_absent(obj))
        return 0;
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "tag must be a str or None, not %.100s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    *tag = sw_py_utf8(obj, "a tag");
    return *tag ? 0 : -1;
}

/* PyGILState_Check answers 1 whenever subinterpreters exist, which would
 * be fatal here: compare this thread's own state with the current one. */
int sw_py_holds_gil(void)
{
    if (!Py_IsInitialized())
        return 0;
    PyThreadState *mine = PyGILState_GetThisThreadState();
#if PY_VERSION_HEX >= 0x030D0000
    PyThreadState *cur = PyThreadState_GetUnchecked();
#else
    PyThreadState *cur = _PyThreadState_UncheckedGet();
#endif
    return mine != NULL && mine == cur;
}

PyTypeObject *sw_py_add_type(PyObject *m, PyType_Spec *spec)
{
    PyTypeObject *t = (PyTypeObject *)PyType_FromModuleAndSpec(m, spec, NULL);
    if (t == NULL)
        return NULL;
    if (PyModule_AddType(m, t) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    return t;
}

/* ------------------------------------------------------------------------
 * Byte counts: the library's formatter, so that memory_summary() and the
 * library's own messages (out-of-memory reports) write sizes alike.
 * ---------------------------------------------------------------------- */

static PyObject *mod_format_bytes(PyObject *m, PyObject *arg)
{
    unsigned long long n = PyLong_AsUnsignedLongLong(arg);
    if (n == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    char buf[32];
    return PyUnicode_FromString(sw_format_bytes((uint64_t)n, buf, sizeof buf));
}

static PyMethodDef util_methods[] = {
    {"_format_bytes", (PyCFunction)(void (*)(void))mod_format_bytes, METH_O,
     "_format_bytes(n)\n--\n\nn bytes in binary units, as the library "
     "writes them: '512 B', '1.50 MiB'."},
    {NULL, NULL, 0, NULL},
};

/* The exceptions, and the functions above. */
int sw_py_util_setup(PyObject *m, sw_py_state *st)
{
    st->DeviceMemoryError = PyErr_NewExceptionWithDoc(
        "spillway.DeviceMemoryError",
        "Device memory ran out (or the budget would be passed) and nothing "
        "could make room: the message names the request, what is in use, "
        "cached and spilled, the budget, the device's free and total "
        "memory, and the largest live buffers with their tags.  A "
        "MemoryError.",
        PyExc_MemoryError, NULL);
    if (st->DeviceMemoryError == NULL ||
        PyModule_AddObjectRef(m, "DeviceMemoryError",
                              st->DeviceMemoryError) < 0)
        return -1;
    st->DeviceError = PyErr_NewExceptionWithDoc(
        "spillway.DeviceError",
        "The device or its driver failed (a copy, a launch).  A "
        "RuntimeError.",
        PyExc_RuntimeError, NULL);
    if (st->DeviceError == NULL ||
        PyModule_AddObjectRef(m, "DeviceError", st->DeviceError) < 0)
        return -1;
    return PyModule_AddFunctions(m, util_methods);
}
