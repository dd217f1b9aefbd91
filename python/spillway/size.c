/*
 * size.c -- every size argument of the Python API, read one way
 * (DESIGN.md, "One meaning per size argument"):
 *
 *   - an int (or another integer type: a NumPy integer) is bytes;
 *   - a str is a size as people write it ("512M", "1.5GiB", "4096"), read
 *     by the library's sw_parse_size, the one string parser: whole bytes;
 *   - a real number that is not of an integer type (float, a NumPy float,
 *     Fraction, Decimal) in (0, 1] is a fraction: of the device's memory
 *     for a device budget, of the machine's for a host budget; a fraction
 *     that rounds below one byte is one byte, never "no budget";
 *   - None is no budget, where the argument is a budget;
 *   - a bool (Python's or NumPy's) and anything else are TypeError.
 *
 * Before, each setter had its own reading: set_host_budget took a NumPy
 * float, a Fraction or a Decimal for a fraction of the *device*, NumPy's
 * True for the device's whole size, and a fraction rounding to 0 bytes for
 * no budget at all; the Dask plugin refused what the setters took.
 */
#include "device.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------
 * What kind of size an object is
 * ---------------------------------------------------------------------- */

enum size_form { FORM_NONE, FORM_BYTES, FORM_STRING, FORM_FRACTION };

/* Whether obj is an instance of module.name, without importing module: an
 * object of a class registered there exists only once it was imported.
 * 1, 0, or -1 with an exception set. */
static int instance_of(PyObject *obj, const char *module, const char *name)
{
    PyObject *key = PyUnicode_FromString(module);
    if (key == NULL)
        return -1;
    PyObject *mod = PyImport_GetModule(key);
    Py_DECREF(key);
    if (mod == NULL)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *cls = PyObject_GetAttrString(mod, name);
    Py_DECREF(mod);
    if (cls == NULL)
        return -1;
    int r = PyObject_IsInstance(obj, cls);
    Py_DECREF(cls);
    return r;
}

static const char *kinds_of(sw_py_size_of of)
{
    switch (of) {
    case SW_PY_SIZE_DEVICE:
        return "bytes (an int), a size ('512M'), a fraction of the device's "
               "memory (0.5) or None";
    case SW_PY_SIZE_HOST:
        return "bytes (an int), a size ('8G'), a fraction of the machine's "
               "memory (0.25) or None";
    case SW_PY_SIZE_BYTES:
    default:
        return "bytes (an int) or a size ('512M')";
    }
}

static int wrong_type(PyObject *obj, const char *what, sw_py_size_of of)
{
    PyErr_Format(PyExc_TypeError, "%s takes %s, not %s%.100s", what,
                 kinds_of(of), PyBool_Check(obj) ? "a " : "",
                 PyBool_Check(obj) ? "bool" : Py_TYPE(obj)->tp_name);
    return -1;
}

/* The form of obj, or -1 with TypeError.  Bools first: Python's is an int
 * and NumPy's has a float value (1.0, the whole device); neither is a
 * size.  NumPy's bool is neither an Integral nor a Real, so it falls
 * through to TypeError. */
static int size_form(PyObject *obj, const char *what, sw_py_size_of of)
{
    if (obj == Py_None)
        return of == SW_PY_SIZE_BYTES ? wrong_type(obj, what, of) : FORM_NONE;
    if (PyBool_Check(obj))
        return wrong_type(obj, what, of);
    if (PyLong_Check(obj))
        return FORM_BYTES;
    if (PyUnicode_Check(obj))
        return FORM_STRING;
    int fraction = PyFloat_Check(obj);
    if (!fraction) {
        int r = instance_of(obj, "numbers", "Integral");
        if (r < 0)
            return -1;
        if (r > 0 && PyIndex_Check(obj))
            return FORM_BYTES;
        /* Decimal is no numbers.Real (it does not mix with floats), but
         * it is a real number all the same. */
        if ((r = instance_of(obj, "numbers", "Real")) == 0)
            r = instance_of(obj, "decimal", "Decimal");
        if (r < 0)
            return -1;
        fraction = r;
    }
    if (!fraction || of == SW_PY_SIZE_BYTES)
        return wrong_type(obj, what, of);
    return FORM_FRACTION;
}

/* ------------------------------------------------------------------------
 * Each form's value
 * ---------------------------------------------------------------------- */

static int bytes_of_int(PyObject *obj, const char *what, sw_py_size_of of,
                        uint64_t *out)
{
    PyObject *idx = PyNumber_Index(obj);
    if (idx == NULL)
        return -1;
    int overflow = 0;
    long long sv = PyLong_AsLongLongAndOverflow(idx, &overflow);
    if (overflow < 0 || (overflow == 0 && sv < 0)) {
        Py_DECREF(idx);
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError,
                         "%s: a size cannot be negative (%R bytes)%s", what,
                         obj,
                         of == SW_PY_SIZE_BYTES
                             ? ""
                             : "; None removes the budget");
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(idx);
    Py_DECREF(idx);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s: %R bytes is too large",
                         what, obj);
        }
        return -1;
    }
    *out = v;
    return 0;
}

static int bytes_of_string(sw_py_state *st, PyObject *obj, uint64_t *out)
{
    const char *s = sw_py_utf8(obj, "a size");
    if (s == NULL)
        return -1;
    int rc;
    NOGIL(rc = sw_parse_size(s, out));
    if (rc != SW_OK) {
        sw_py_raise(st, rc);
        return -1;
    }
    return 0;
}

static int not_a_fraction(PyObject *obj, const char *what, sw_py_size_of of)
{
    PyErr_Format(PyExc_ValueError,
                 "%s: a fraction of the %s memory is in (0, 1], not %R "
                 "(give bytes as an int, or a size such as '%s')",
                 what, of == SW_PY_SIZE_HOST ? "machine's" : "device's", obj,
                 of == SW_PY_SIZE_HOST ? "8G" : "512M");
    return -1;
}

/* The fraction obj stands for, checked to lie in (0, 1] by obj's own
 * comparisons (exact for a Fraction or a Decimal, where the double may
 * round onto 0 or 1). */
static int fraction_of(PyObject *obj, const char *what, sw_py_size_of of,
                       double *f)
{
    *f = PyFloat_AsDouble(obj);
    if (*f == -1.0 && PyErr_Occurred()) {
        /* A huge Fraction, a signalling NaN: outside (0, 1] all the same */
        if (!PyErr_ExceptionMatches(PyExc_ValueError) &&
            !PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
        return not_a_fraction(obj, what, of);
    }
    if (isnan(*f))
        return not_a_fraction(obj, what, of);
    if (PyFloat_Check(obj))
        return *f > 0.0 && *f <= 1.0 ? 0 : not_a_fraction(obj, what, of);
    PyObject *zero = PyLong_FromLong(0), *one = PyLong_FromLong(1);
    int above = -1, within = -1;
    if (zero != NULL && one != NULL &&
        (above = PyObject_RichCompareBool(obj, zero, Py_GT)) > 0)
        within = PyObject_RichCompareBool(obj, one, Py_LE);
    Py_XDECREF(zero);
    Py_XDECREF(one);
    if (above < 0 || (above > 0 && within < 0))
        return -1;
    return above && within ? 0 : not_a_fraction(obj, what, of);
}

/* The memory a fraction is of: the device's (as its driver states it) or
 * the machine's. */
static int whole_of(sw_py_state *st, const char *what, sw_py_size_of of,
                    DeviceObject *d, uint64_t *whole)
{
    if (of == SW_PY_SIZE_HOST) {
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages <= 0 || page <= 0) {
            PyErr_Format(PyExc_ValueError,
                         "%s: this system does not say how much memory the "
                         "machine has: give bytes",
                         what);
            return -1;
        }
        *whole = (uint64_t)pages * (uint64_t)page;
        return 0;
    }
    sw_memory_info info;
    int rc;
    SW_PY_DEVICE_CALL(d, rc, sw_memory_info_get(dev_, &info));
    if (rc != SW_OK) {
        sw_py_raise(st, rc);
        return -1;
    }
    if (info.device_total == 0) {
        PyErr_Format(PyExc_ValueError,
                     "%s: %U does not say how much memory it has: give "
                     "bytes",
                     what, d->name);
        return -1;
    }
    *whole = info.device_total;
    return 0;
}

/* ------------------------------------------------------------------------
 * The parser, and its check for arguments kept for later (Dask's plugin)
 * ---------------------------------------------------------------------- */

int sw_py_parse_size(sw_py_state *st, PyObject *obj, const char *what,
                     sw_py_size_of of, DeviceObject *d, uint64_t *out)
{
    *out = 0;
    double f;
    uint64_t whole;
    switch (size_form(obj, what, of)) {
    case FORM_NONE:
        return 0;
    case FORM_BYTES:
        return bytes_of_int(obj, what, of, out);
    case FORM_STRING:
        return bytes_of_string(st, obj, out);
    case FORM_FRACTION:
        if (fraction_of(obj, what, of, &f) < 0 ||
            whole_of(st, what, of, d, &whole) < 0)
            return -1;
        double b = floor(f * (double)whole);
        /* 0 would mean no budget; rounding never passes the whole */
        *out = b < 1.0 ? 1 : b >= (double)whole ? whole : (uint64_t)b;
        return 0;
    default:
        return -1;
    }
}

/* _check_size_type(value, what, of): TypeError (the message naming what)
 * unless value is of a form a size argument of that kind takes; its value
 * is read where it is used.  of: "device", "host" or "bytes". */
static PyObject *mod_check_size_type(PyObject *m, PyObject *const *args,
                                     Py_ssize_t nargs, PyObject *kwnames)
{
    (void)m;
    static const char *const names[] = {"value", "what", "of"};
    PyObject *v[3];
    if (sw_py_parse_args("_check_size_type", args, nargs, kwnames, names, 3,
                         3, 3, v) < 0)
        return NULL;
    if (!PyUnicode_Check(v[1]) || !PyUnicode_Check(v[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "_check_size_type: what and of are str");
        return NULL;
    }
    const char *what = PyUnicode_AsUTF8(v[1]), *ofs = PyUnicode_AsUTF8(v[2]);
    if (what == NULL || ofs == NULL)
        return NULL;
    sw_py_size_of of;
    if (strcmp(ofs, "device") == 0) {
        of = SW_PY_SIZE_DEVICE;
    } else if (strcmp(ofs, "host") == 0) {
        of = SW_PY_SIZE_HOST;
    } else if (strcmp(ofs, "bytes") == 0) {
        of = SW_PY_SIZE_BYTES;
    } else {
        PyErr_Format(PyExc_ValueError, "_check_size_type: of is 'device', "
                     "'host' or 'bytes', not %R", v[2]);
        return NULL;
    }
    if (size_form(v[0], what, of) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef size_methods[] = {
    FASTKW("_check_size_type", mod_check_size_type,
           "_check_size_type(value, what, of)\n--\n\nTypeError, naming "
           "what, unless value is of a form a size argument takes: of "
           "'device' (a device budget), 'host' (a host budget) or 'bytes'."),
    {NULL, NULL, 0, NULL},
};

int sw_py_size_setup(PyObject *m, sw_py_state *st)
{
    (void)st;
    return PyModule_AddFunctions(m, size_methods);
}
