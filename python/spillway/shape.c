/*
 * shape.c -- shapes: parsed from Python, their sizes checked against
 * overflow, and back to tuples.
 */
#include "dtype.h"

/* One dimension: a non-negative integer that fits in Py_ssize_t. */
static int parse_dim(PyObject *item, PyObject *whole, Py_ssize_t *out)
{
    PyObject *idx = PyNumber_Index(item);
    if (idx == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "shape %R: dimensions must be integers, not %.100s",
                         whole, Py_TYPE(item)->tp_name);
        }
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(idx, &overflow);
    Py_DECREF(idx);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow > 0 || v > PY_SSIZE_T_MAX) {
        PyErr_Format(PyExc_ValueError,
                     "shape %R: dimension %R is too large", whole, item);
        return -1;
    }
    if (overflow < 0 || v < 0) {
        PyErr_Format(PyExc_ValueError,
                     "shape %R: negative dimensions are not allowed", whole);
        return -1;
    }
    *out = (Py_ssize_t)v;
    return 0;
}

/* nelem * itemsize without overflow, within Py_ssize_t; -1 with
 * ValueError otherwise. */
int sw_py_shape_sizes(const Py_ssize_t *shape, int ndim, size_t itemsize,
                      PyObject *whole, size_t *nelem, size_t *nbytes)
{
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        size_t d = (size_t)shape[i];
        if (d != 0 && n > (size_t)PY_SSIZE_T_MAX / d) {
            n = SIZE_MAX;
            break;
        }
        n *= d;
    }
    if (n == SIZE_MAX || n > (size_t)PY_SSIZE_T_MAX / itemsize) {
        /* A zero dimension later on makes it empty after all. */
        for (int i = 0; i < ndim; i++) {
            if (shape[i] == 0) {
                *nelem = 0;
                *nbytes = 0;
                return 0;
            }
        }
        if (whole != NULL)
            PyErr_Format(PyExc_ValueError,
                         "an array of shape %R is too big (its size "
                         "overflows)",
                         whole);
        else
            PyErr_SetString(PyExc_ValueError,
                            "array is too big (its size overflows)");
        return -1;
    }
    *nelem = n;
    *nbytes = n * itemsize;
    return 0;
}

/* shape: an integer or a sequence of integers. */
int sw_py_parse_shape(PyObject *obj, Py_ssize_t *shape, int *ndim)
{
    if (PyIndex_Check(obj)) {
        *ndim = 1;
        return parse_dim(obj, obj, &shape[0]);
    }
    if (!PyTuple_Check(obj) && !PyList_Check(obj) && !PySequence_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "shape must be an integer or a sequence of integers, "
                     "not %.100s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    PyObject *seq = PySequence_Fast(obj, "shape must be a sequence");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > SW_PY_MAXDIMS) {
        PyErr_Format(PyExc_ValueError,
                     "shape %R has %zd dimensions; at most %d are allowed",
                     obj, n, SW_PY_MAXDIMS);
        Py_DECREF(seq);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (parse_dim(PySequence_Fast_GET_ITEM(seq, i), obj, &shape[i]) < 0) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    *ndim = (int)n;
    return 0;
}

PyObject *sw_py_shape_tuple(const Py_ssize_t *shape, int ndim)
{
    PyObject *t = PyTuple_New(ndim);
    if (t == NULL)
        return NULL;
    for (int i = 0; i < ndim; i++) {
        PyObject *v = PyLong_FromSsize_t(shape[i]);
        if (v == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}
