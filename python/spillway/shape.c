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
 * ValueError otherwise.  As NumPy does, the product of the non-zero
 * dimensions (times itemsize) must fit even when another dimension is 0:
 * an empty array of shape (2**62, 2**62, 0) is still too big to describe
 * (its strides overflow, and NumPy refuses it). */
int sw_py_shape_sizes(const Py_ssize_t *shape, int ndim, size_t itemsize,
                      PyObject *whole, size_t *nelem, size_t *nbytes)
{
    size_t n = 1; /* the product of the non-zero dimensions */
    int empty = 0, over = 0;
    for (int i = 0; i < ndim && !over; i++) {
        size_t d = (size_t)shape[i];
        if (d == 0)
            empty = 1;
        else if (n > (size_t)PY_SSIZE_T_MAX / d)
            over = 1;
        else
            n *= d;
    }
    if (over || n > (size_t)PY_SSIZE_T_MAX / itemsize) {
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
    *nelem = empty ? 0 : n;
    *nbytes = *nelem * itemsize;
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
    PyObject *seq = sw_py_as_tuple(obj, "shape must be a sequence");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    if (n > SW_PY_MAXDIMS) {
        PyErr_Format(PyExc_ValueError,
                     "shape %R has %zd dimensions; at most %d are allowed",
                     obj, n, SW_PY_MAXDIMS);
        Py_DECREF(seq);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (parse_dim(PyTuple_GET_ITEM(seq, i), obj, &shape[i]) < 0) {
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
