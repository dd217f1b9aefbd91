/*
 * view.c -- views and elements of an Array: reshape, basic indexing (a[i],
 * a[i:j], a[:, 1], a[..., 0], a[None]), a[i, j] = v, iteration over the
 * first axis, a.T.  A view is a new Array on the same buffer (a retained
 * handle, or an sw_buffer_view of the base), so that spilling the base is
 * seen through every view; an element is read or written on the host.
 *
 * Arrays are contiguous, and so are views: an index whose result is a
 * contiguous block of the array (rows, a column of an (n, 1) matrix, any
 * result with at most one dimension longer than 1 and step 1 along it...)
 * is a view; one whose result is strided (a[::2], a[:, 1] of an (n, m)
 * matrix) is a TypeError that says how to take it on the host instead.
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
    PyObject *seq = sw_py_as_tuple(spec, "reshape() takes integers or a "
                                         "sequence of integers");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
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
        PyObject *item = PyTuple_GET_ITEM(seq, i);
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
    /* The product above saturates, and a zero dimension hides an overflow
     * of the others: (2**62, 2**62, 0) must be refused as at creation. */
    size_t nelem, nbytes;
    PyObject *want = sw_py_shape_tuple(shape, (int)n);
    if (want == NULL)
        return NULL;
    int bad = sw_py_shape_sizes(shape, (int)n, sw_py_dtypes[a->dtype].size,
                                want, &nelem, &nbytes) < 0;
    Py_DECREF(want);
    if (bad)
        return NULL;
    int rc;
    NOGIL(rc = sw_buffer_retain(a->buf));
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    return sw_py_array_wrap_view(st, a, a->buf, (int)n, shape, a->nelem);
}

Py_ssize_t sw_py_array_length(ArrayObject *a)
{
    if (SW_PY_NDIM(a) == 0) {
        PyErr_SetString(PyExc_TypeError, "len() of a 0-d array");
        return -1;
    }
    return a->shape[0];
}

/* ------------------------------------------------------------------------
 * Basic indexing: integers, slices, Ellipsis and None (newaxis)
 * ---------------------------------------------------------------------- */

typedef struct {
    int element;     /* every dimension indexed by an integer */
    size_t offset;   /* elements from the start of a */
    int ndim;        /* of the result */
    Py_ssize_t shape[SW_PY_MAXDIMS];
    Py_ssize_t strides[SW_PY_MAXDIMS]; /* elements; for the contiguity test */
    size_t nelem;
    int stepped;     /* a slice of step other than 1 */
} sw_py_index;

static int index_kind_error(PyObject *k)
{
    PyErr_Format(PyExc_TypeError,
                 "only integers, slices (':'), Ellipsis ('...') and None "
                 "are valid indices, not %.100s (spillway has no advanced "
                 "indexing)",
                 Py_TYPE(k)->tp_name);
    return -1;
}

/* A bool is an int to PyIndex_Check, and was read as row 0 or 1; to NumPy
 * it is a mask (a[True] adds an axis, a[False] selects nothing), which is
 * advanced indexing: refused as such. */
static int index_bool_error(PyObject *k)
{
    PyErr_Format(PyExc_TypeError,
                 "a bool (%R) is not a valid index: NumPy reads it as a "
                 "mask, which is advanced indexing, and spillway has none "
                 "(use an integer, a slice, '...' or None)",
                 k);
    return -1;
}

/* key -> the result's place in a: its offset, shape and strides. */
static int index_parse(ArrayObject *a, PyObject *key, sw_py_index *ix)
{
    int ndim = SW_PY_NDIM(a);
    PyObject *single[1] = {key};
    PyObject *const *items = single;
    Py_ssize_t n = 1;
    if (PyTuple_Check(key)) {
        items = &PyTuple_GET_ITEM(key, 0);
        n = PyTuple_GET_SIZE(key);
    }
    int consuming = 0, ellipsis = -1, slices = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = items[i];
        if (k == Py_Ellipsis) {
            if (ellipsis >= 0) {
                PyErr_SetString(PyExc_IndexError,
                                "an index can only have a single ellipsis "
                                "('...')");
                return -1;
            }
            ellipsis = (int)i;
        } else if (k == Py_None) {
            continue;
        } else if (PySlice_Check(k)) {
            consuming++;
            slices++;
        } else if (PyBool_Check(k)) {
            return index_bool_error(k);
        } else if (PyIndex_Check(k) && !PyFloat_Check(k) &&
                   !PySequence_Check(k)) { /* a NumPy array has __index__ */
            consuming++;
        } else {
            return index_kind_error(k);
        }
    }
    if (consuming > ndim) {
        PyErr_Format(PyExc_IndexError,
                     "too many indices for array: array is %d-dimensional, "
                     "but %d were indexed",
                     ndim, consuming);
        return -1;
    }
    Py_ssize_t stride[SW_PY_MAXDIMS];
    Py_ssize_t st = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        stride[d] = st;
        st *= a->shape[d] > 0 ? a->shape[d] : 1;
    }
    ix->element = ellipsis < 0 && slices == 0 && consuming == ndim;
    ix->offset = 0;
    ix->ndim = 0;
    ix->nelem = 1;
    ix->stepped = 0;
    int d = 0;
    for (Py_ssize_t i = 0; i <= n; i++) {
        PyObject *k = i < n ? items[i] : Py_Ellipsis; /* the rest: full */
        if (k == Py_Ellipsis) {
            int upto = i < n ? ndim - (consuming - d) : ndim;
            if (i == n && ellipsis >= 0)
                upto = d; /* already expanded */
            for (; d < upto; d++) {
                if (ix->ndim == SW_PY_MAXDIMS)
                    goto too_many;
                ix->shape[ix->ndim] = a->shape[d];
                ix->strides[ix->ndim++] = stride[d];
            }
            continue;
        }
        if (k == Py_None) {
            ix->element = 0;
            if (ix->ndim == SW_PY_MAXDIMS)
                goto too_many;
            ix->shape[ix->ndim] = 1;
            ix->strides[ix->ndim++] = 0;
            continue;
        }
        Py_ssize_t dim = a->shape[d];
        if (PySlice_Check(k)) {
            Py_ssize_t start, stop, step;
            if (PySlice_Unpack(k, &start, &stop, &step) < 0)
                return -1;
            Py_ssize_t len = PySlice_AdjustIndices(dim, &start, &stop, step);
            if (ix->ndim == SW_PY_MAXDIMS)
                goto too_many;
            if (len > 0)
                ix->offset += (size_t)start * (size_t)stride[d];
            ix->stepped |= step != 1 && len > 1;
            ix->shape[ix->ndim] = len;
            ix->strides[ix->ndim++] = step * stride[d];
        } else {
            Py_ssize_t v = PyNumber_AsSsize_t(k, PyExc_IndexError);
            if (v == -1 && PyErr_Occurred())
                return -1;
            Py_ssize_t kk = v < 0 ? v + dim : v;
            if (kk < 0 || kk >= dim) {
                PyErr_Format(PyExc_IndexError,
                             "index %zd is out of bounds for axis %d with "
                             "size %zd",
                             v, d, dim);
                return -1;
            }
            ix->offset += (size_t)kk * (size_t)stride[d];
        }
        d++;
    }
    for (int i = 0; i < ix->ndim; i++)
        ix->nelem *= (size_t)ix->shape[i];
    return 0;
too_many:
    PyErr_Format(PyExc_IndexError, "at most %d dimensions are allowed",
                 SW_PY_MAXDIMS);
    return -1;
}

/* An index as written: "::2, 1", "..., 0". */
static PyObject *key_str(PyObject *key)
{
    PyObject *items = PyTuple_Check(key) ? Py_NewRef(key)
                                         : PyTuple_Pack(1, key);
    PyObject *parts = items ? PyList_New(0) : NULL;
    for (Py_ssize_t i = 0; parts != NULL && i < PyTuple_GET_SIZE(items);
         i++) {
        PyObject *k = PyTuple_GET_ITEM(items, i), *p;
        if (k == Py_Ellipsis) {
            p = PyUnicode_FromString("...");
        } else if (PySlice_Check(k)) {
            PySliceObject *sl = (PySliceObject *)k;
            PyObject *f[3] = {sl->start, sl->stop, sl->step};
            PyObject *txt[3];
            for (int j = 0; j < 3; j++)
                txt[j] = f[j] == Py_None ? PyUnicode_FromString("")
                                         : PyObject_Repr(f[j]);
            p = (txt[0] && txt[1] && txt[2])
                    ? (sl->step == Py_None
                           ? PyUnicode_FromFormat("%U:%U", txt[0], txt[1])
                           : PyUnicode_FromFormat("%U:%U:%U", txt[0], txt[1],
                                                  txt[2]))
                    : NULL;
            for (int j = 0; j < 3; j++)
                Py_XDECREF(txt[j]);
        } else {
            p = PyObject_Repr(k);
        }
        if (p == NULL || PyList_Append(parts, p) < 0)
            Py_CLEAR(parts);
        Py_XDECREF(p);
    }
    Py_XDECREF(items);
    if (parts == NULL)
        return NULL;
    PyObject *sep = PyUnicode_FromString(", ");
    PyObject *r = sep ? PyUnicode_Join(sep, parts) : NULL;
    Py_XDECREF(sep);
    Py_DECREF(parts);
    return r;
}

/* Whether the result is one block of memory: along the dimensions longer
 * than 1, each stride is the size of what follows it. */
static int index_contiguous(const sw_py_index *ix)
{
    if (ix->nelem == 0)
        return 1;
    Py_ssize_t expect = 1;
    for (int i = ix->ndim - 1; i >= 0; i--) {
        if (ix->shape[i] == 1)
            continue;
        if (ix->strides[i] != expect)
            return 0;
        expect *= ix->shape[i];
    }
    return 1;
}

/* A view of elements [off, off + nelem) with the given shape. */
static PyObject *array_view(sw_py_state *st, ArrayObject *a, size_t elem_off,
                            int ndim, const Py_ssize_t *shape, size_t nelem)
{
    sw_buffer *v = NULL;
    size_t itemsize = sw_py_dtypes[a->dtype].size;
    if (nelem == 0)
        elem_off = 0; /* nothing to address: the start is as good */
    int rc;
    NOGIL(rc = sw_buffer_view(a->buf, elem_off * itemsize, nelem * itemsize,
                              &v));
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    return sw_py_array_wrap_view(st, a, v, ndim, shape, nelem);
}

static PyObject *read_element(sw_py_state *st, ArrayObject *a, size_t off)
{
    unsigned char elem[16];
    size_t itemsize = sw_py_dtypes[a->dtype].size;
    int rc;
    NOGIL(rc = sw_buffer_read(a->buf, off * itemsize, elem, itemsize));
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    return sw_py_scalar_to_py(elem, a->dtype);
}

PyObject *sw_py_array_subscript(ArrayObject *a, PyObject *key)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(a));
    if (st == NULL || sw_py_array_check_device(a) < 0)
        return NULL;
    sw_py_index ix;
    if (index_parse(a, key, &ix) < 0)
        return NULL;
    if (ix.element)
        return read_element(st, a, ix.offset);
    if (!index_contiguous(&ix)) {
        PyObject *shape = sw_py_shape_tuple(a->shape, SW_PY_NDIM(a));
        PyObject *k = shape ? key_str(key) : NULL;
        if (k != NULL)
            PyErr_Format(PyExc_TypeError,
                         "a[%U] of an array of shape %R is not contiguous%s: "
                         "spillway arrays and their views are contiguous "
                         "(slices of step 1 and integers on the leading "
                         "axes make views); take it on the host instead: "
                         "sw.asarray(a.numpy()[%U])",
                         k, shape,
                         ix.stepped ? " (a slice of step other than 1)" : "",
                         k);
        Py_XDECREF(shape);
        Py_XDECREF(k);
        return NULL;
    }
    return array_view(st, a, ix.offset, ix.ndim, ix.shape, ix.nelem);
}

PyObject *sw_py_array_item(ArrayObject *a, Py_ssize_t i)
{
    PyObject *k = PyLong_FromSsize_t(i);
    if (k == NULL)
        return NULL;
    PyObject *r = sw_py_array_subscript(a, k);
    Py_DECREF(k);
    return r;
}

/* Iteration over the first axis, as NumPy's: elements of a 1-d array,
 * views of rows otherwise. */
PyObject *sw_py_array_iter(ArrayObject *a)
{
    if (SW_PY_NDIM(a) == 0) {
        PyErr_SetString(PyExc_TypeError, "iteration over a 0-d array");
        return NULL;
    }
    if (sw_py_array_check_device(a) < 0)
        return NULL;
    return PySeqIter_New((PyObject *)a);
}

/* a[i, ...] = value for one element, on the host (a spilled array is
 * written in its host copy and stays spilled). */
int sw_py_array_ass_subscript(ArrayObject *a, PyObject *key, PyObject *value)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(a));
    if (st == NULL || sw_py_array_check_device(a) < 0)
        return -1;
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "array elements cannot be deleted");
        return -1;
    }
    sw_py_index ix;
    if (index_parse(a, key, &ix) < 0)
        return -1;
    if (!ix.element && ix.nelem != 1) {
        PyErr_SetString(PyExc_TypeError,
                        "only single elements can be assigned (index every "
                        "dimension); use fill() on a view for more");
        return -1;
    }
    sw_scalar v;
    if (sw_py_scalar_from_py(value, a->dtype, &v, "value") < 0)
        return -1;
    unsigned char elem[16];
    sw_py_scalar_store(elem, a->dtype, v);
    int rc;
    size_t itemsize = sw_py_dtypes[a->dtype].size;
    NOGIL(rc = sw_buffer_write(a->buf, ix.offset * itemsize, elem, itemsize));
    if (rc != SW_OK) {
        sw_py_raise(st, rc);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * a.T
 * ---------------------------------------------------------------------- */

/* dst = src with its axes reversed (itemsize bytes per element). */
static void transpose_bytes(const unsigned char *src, unsigned char *dst,
                            int ndim, const Py_ssize_t *shape, size_t nelem,
                            size_t itemsize)
{
    /* dst's strides, in elements, for each axis of src. */
    size_t dstride[SW_PY_MAXDIMS];
    size_t acc = 1;
    for (int i = 0; i < ndim; i++) { /* dst's last axis is src's first */
        dstride[i] = acc;
        acc *= (size_t)shape[i];
    }
    Py_ssize_t idx[SW_PY_MAXDIMS] = {0};
    size_t doff = 0;
    for (size_t k = 0; k < nelem; k++) {
        memcpy(dst + doff * itemsize, src + k * itemsize, itemsize);
        for (int i = ndim - 1; i >= 0; i--) { /* src's index, C order */
            doff += dstride[i];
            if (++idx[i] < shape[i])
                break;
            doff -= dstride[i] * (size_t)shape[i];
            idx[i] = 0;
        }
    }
}

PyObject *sw_py_array_get_T(ArrayObject *a, void *c)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(a));
    if (st == NULL || sw_py_array_check_device(a) < 0)
        return NULL;
    int ndim = SW_PY_NDIM(a), longer = 0;
    Py_ssize_t shape[SW_PY_MAXDIMS];
    for (int i = 0; i < ndim; i++) {
        shape[i] = a->shape[ndim - 1 - i];
        longer += a->shape[i] > 1;
    }
    if (longer <= 1) { /* the same bytes in the same order */
        int rc;
        NOGIL(rc = sw_buffer_retain(a->buf));
        if (rc != SW_OK)
            return sw_py_raise(st, rc);
        return sw_py_array_wrap_view(st, a, a->buf, ndim, shape, a->nelem);
    }
    /* A copy, as for any shape with two axes longer than 1, empty or not:
     * what a.T is should not depend on the size (nothing to move here). */
    if (a->nelem == 0)
        return sw_py_array_alloc(st, a->device, a->dtype, ndim, shape, 0,
                                 "T");
    unsigned char *src = sw_py_array_read_all(st, a);
    if (src == NULL)
        return NULL;
    unsigned char *dst = PyMem_RawMalloc(a->nbytes);
    PyObject *r = NULL;
    if (dst == NULL) {
        PyErr_NoMemory();
    } else {
        transpose_bytes(src, dst, ndim, a->shape, a->nelem,
                        sw_py_dtypes[a->dtype].size);
        r = sw_py_array_from_host(st, a->device, a->dtype, ndim, shape,
                                  a->nelem, dst, "T");
    }
    PyMem_RawFree(src);
    PyMem_RawFree(dst);
    return r;
}
