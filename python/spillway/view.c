/*
 * view.c -- views and elements of an Array: reshape, a[i], a[i:j],
 * a[i, j] = v.  A view is a new Array on the same buffer (a retained
 * handle, or an sw_buffer_view of the base), so that spilling the base is
 * seen through every view; an element is read or written on the host.
 */
#include "array.h"
#include "dtype.h"

#include <string.h>

/* reshape(*shape) or reshape(shape): an Array sharing this one's buffer
 * (one more reference to the same handle).  One dimension may be -1. */
PyObject *sw_py_array_reshape(ArrayObject *a, PyObject *args)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(a));
    if (st == NULL || sw_py_array_check_device(a) < 0)
        return NULL;
    PyObject *spec = args;
    if (PyTuple_GET_SIZE(args) == 1 &&
        !PyIndex_Check(PyTuple_GET_ITEM(args, 0)))
        spec = PyTuple_GET_ITEM(args, 0);
    PyObject *seq = PySequence_Fast(spec, "reshape() takes integers or a "
                                          "sequence of integers");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > SW_PY_MAXDIMS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "at most %d dimensions are allowed",
                     SW_PY_MAXDIMS);
        return NULL;
    }
    Py_ssize_t shape[SW_PY_MAXDIMS];
    int unknown = -1;
    size_t known = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        Py_ssize_t v;
        if (PyIndex_Check(item)) {
            v = PyNumber_AsSsize_t(item, PyExc_ValueError);
            if (v == -1 && PyErr_Occurred()) {
                Py_DECREF(seq);
                return NULL;
            }
        } else {
            Py_DECREF(seq);
            PyErr_Format(PyExc_TypeError,
                         "reshape(): dimensions must be integers, not %.100s",
                         Py_TYPE(item)->tp_name);
            return NULL;
        }
        if (v == -1 && unknown < 0) {
            unknown = (int)i;
        } else if (v < 0) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError,
                            "reshape(): negative dimensions are not allowed "
                            "(one may be -1, to be inferred)");
            return NULL;
        } else {
            if (v != 0 && known > SIZE_MAX / (size_t)v)
                known = SIZE_MAX;
            else
                known *= (size_t)v;
        }
        shape[i] = v;
    }
    Py_DECREF(seq);
    if (unknown >= 0) {
        if (known == 0 || a->nelem % known != 0) {
            PyErr_Format(PyExc_ValueError,
                         "cannot reshape an array of size %zu: the other "
                         "dimensions (product %zu) do not divide it",
                         a->nelem, known);
            return NULL;
        }
        shape[unknown] = (Py_ssize_t)(a->nelem / known);
        known = a->nelem;
    }
    if (known != a->nelem) {
        PyObject *want = sw_py_shape_tuple(shape, (int)n);
        if (want != NULL) {
            PyErr_Format(PyExc_ValueError,
                         "cannot reshape an array of size %zu into shape %R",
                         a->nelem, want);
            Py_DECREF(want);
        }
        return NULL;
    }
    int rc;
    NOGIL(rc = sw_buffer_retain(a->buf));
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    return sw_py_array_wrap(st, a->device, a->buf, a->dtype, (int)n, shape,
                            a->nelem);
}

Py_ssize_t sw_py_array_length(ArrayObject *a)
{
    if (SW_PY_NDIM(a) == 0) {
        PyErr_SetString(PyExc_TypeError, "len() of a 0-d array");
        return -1;
    }
    return a->shape[0];
}

/* Element offsets: key -> (number of leading indices, byte offset).
 * Returns the count of indices consumed, or -1. */
static int index_offset(ArrayObject *a, PyObject *key, size_t *byte_off)
{
    int ndim = SW_PY_NDIM(a);
    Py_ssize_t idx[SW_PY_MAXDIMS];
    int nidx;
    if (PyTuple_Check(key)) {
        Py_ssize_t n = PyTuple_GET_SIZE(key);
        if (n > ndim) {
            PyErr_Format(PyExc_IndexError,
                         "too many indices for array: array is "
                         "%d-dimensional, but %zd were indexed",
                         ndim, n);
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *k = PyTuple_GET_ITEM(key, i);
            if (!PyIndex_Check(k)) {
                PyErr_Format(PyExc_TypeError,
                             "array indices must be integers, not %.100s",
                             Py_TYPE(k)->tp_name);
                return -1;
            }
            idx[i] = PyNumber_AsSsize_t(k, PyExc_IndexError);
            if (idx[i] == -1 && PyErr_Occurred())
                return -1;
        }
        nidx = (int)n;
    } else {
        if (!PyIndex_Check(key)) {
            PyErr_Format(PyExc_TypeError,
                         "only integers, tuples of integers and slices of "
                         "step 1 are valid indices, not %.100s",
                         Py_TYPE(key)->tp_name);
            return -1;
        }
        if (ndim == 0) {
            PyErr_SetString(PyExc_IndexError,
                            "too many indices for array: array is "
                            "0-dimensional, but 1 was indexed");
            return -1;
        }
        idx[0] = PyNumber_AsSsize_t(key, PyExc_IndexError);
        if (idx[0] == -1 && PyErr_Occurred())
            return -1;
        nidx = 1;
    }
    size_t off = 0;
    size_t stride = a->nelem == 0 ? 0 : a->nelem;
    for (int i = 0; i < nidx; i++) {
        Py_ssize_t dim = a->shape[i];
        Py_ssize_t k = idx[i];
        if (k < 0)
            k += dim;
        if (k < 0 || k >= dim) {
            PyErr_Format(PyExc_IndexError,
                         "index %zd is out of bounds for axis %d with size "
                         "%zd",
                         idx[i], i, dim);
            return -1;
        }
        stride /= (size_t)dim; /* dim > 0 here */
        off += (size_t)k * stride;
    }
    *byte_off = off * sw_py_dtypes[a->dtype].size;
    return nidx;
}

/* A view of elements [off, off + nelem) with the given shape. */
static PyObject *array_view(sw_py_state *st, ArrayObject *a, size_t byte_off,
                            int ndim, const Py_ssize_t *shape, size_t nelem)
{
    sw_buffer *v = NULL;
    int rc;
    NOGIL(rc = sw_buffer_view(a->buf, byte_off,
                              nelem * sw_py_dtypes[a->dtype].size, &v));
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    return sw_py_array_wrap(st, a->device, v, a->dtype, ndim, shape, nelem);
}

PyObject *sw_py_array_subscript(ArrayObject *a, PyObject *key)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(a));
    if (st == NULL || sw_py_array_check_device(a) < 0)
        return NULL;
    int ndim = SW_PY_NDIM(a);
    if (PySlice_Check(key)) {
        if (ndim == 0) {
            PyErr_SetString(PyExc_IndexError,
                            "a 0-d array cannot be sliced");
            return NULL;
        }
        Py_ssize_t start, stop, step;
        if (PySlice_Unpack(key, &start, &stop, &step) < 0)
            return NULL;
        Py_ssize_t len = PySlice_AdjustIndices(a->shape[0], &start, &stop,
                                               step);
        if (step != 1) {
            PyErr_SetString(PyExc_TypeError,
                            "only slices of step 1 are supported (views "
                            "are contiguous)");
            return NULL;
        }
        Py_ssize_t shape[SW_PY_MAXDIMS];
        memcpy(shape, a->shape, (size_t)ndim * sizeof(Py_ssize_t));
        shape[0] = len;
        size_t row = a->shape[0] == 0 ? 0 : a->nelem / (size_t)a->shape[0];
        size_t itemsize = sw_py_dtypes[a->dtype].size;
        return array_view(st, a, (size_t)start * row * itemsize, ndim, shape,
                          (size_t)len * row);
    }
    size_t off = 0;
    int nidx = index_offset(a, key, &off);
    if (nidx < 0)
        return NULL;
    if (nidx == ndim) {
        unsigned char elem[8];
        int rc;
        size_t itemsize = sw_py_dtypes[a->dtype].size;
        NOGIL(rc = sw_buffer_read(a->buf, off, elem, itemsize));
        if (rc != SW_OK)
            return sw_py_raise(st, rc);
        return sw_py_scalar_to_py(elem, a->dtype);
    }
    size_t nelem = 1;
    for (int i = nidx; i < ndim; i++)
        nelem *= (size_t)a->shape[i];
    return array_view(st, a, off, ndim - nidx, a->shape + nidx, nelem);
}

/* a[i, ...] = value for one element. */
int sw_py_array_ass_subscript(ArrayObject *a, PyObject *key, PyObject *value)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(a));
    if (st == NULL || sw_py_array_check_device(a) < 0)
        return -1;
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "array elements cannot be deleted");
        return -1;
    }
    size_t off = 0;
    int nidx = index_offset(a, key, &off);
    if (nidx < 0)
        return -1;
    if (nidx != SW_PY_NDIM(a)) {
        PyErr_SetString(PyExc_TypeError,
                        "only single elements can be assigned (index every "
                        "dimension); use fill() on a view for more");
        return -1;
    }
    sw_scalar v;
    if (sw_py_scalar_from_py(value, a->dtype, &v, "value") < 0)
        return -1;
    unsigned char elem[8];
    sw_py_scalar_store(elem, a->dtype, v);
    int rc;
    size_t itemsize = sw_py_dtypes[a->dtype].size;
    NOGIL(rc = sw_buffer_write(a->buf, off, elem, itemsize));
    if (rc != SW_OK) {
        sw_py_raise(st, rc);
        return -1;
    }
    return 0;
}
