/*
 * create.c -- new arrays: empty, zeros, full, ones, asarray (copies from
 * NumPy arrays, buffer-protocol objects, nested sequences, DLPack
 * producers and other devices), for every element type.
 */
#include "array.h"
#include "dtype.h"

#include <string.h>

/* The device of a device= and a queue= argument (q may be NULL): a new
 * reference.  Both given: they must agree. */
static DeviceObject *device_of_args(sw_py_state *st, PyObject *device,
                                    QueueObject *q, const char *fname)
{
    if (q == NULL)
        return sw_py_resolve_device(st, device);
    if (!sw_py_absent(device)) {
        DeviceObject *d = sw_py_resolve_device(st, device);
        if (d == NULL)
            return NULL;
        int same = d == q->device;
        if (!same)
            PyErr_Format(PyExc_ValueError,
                         "%s(): device %U is not the queue's device %U",
                         fname, d->name, q->device->name);
        Py_DECREF(d);
        if (!same)
            return NULL;
    }
    return (DeviceObject *)Py_NewRef(q->device);
}

/* empty / zeros / full / ones: what= 0 empty, 1 zeros, 2 ones, 3 full. */
static PyObject *make_array(PyObject *m, const char *fname,
                            PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames, int what)
{
    static const char *const names[] = {"shape", "fill_value", "dtype",
                                        "device", "tag", "queue"};
    static const char *const names_nf[] = {"shape", "dtype", "device", "tag",
                                           "queue"};
    PyObject *w[6];
    PyObject **v = w + 1; /* shape, dtype, device, tag, queue */
    int full = what == 3;
    if (full) {
        if (sw_py_parse_args(fname, args, nargs, kwnames, names, 6, 5, 2, w) <
            0)
            return NULL;
        PyObject *fv = w[1];
        w[1] = w[0];
        w[0] = fv; /* w[0]: fill value; v[0..4]: the rest */
    } else {
        w[0] = NULL;
        if (sw_py_parse_args(fname, args, nargs, kwnames, names_nf, 5, 4, 1,
                             v) < 0)
            return NULL;
    }
    sw_py_state *st = sw_py_module_state(m);
    Py_ssize_t shape[SW_PY_MAXDIMS];
    int ndim = 0;
    sw_dtype dt;
    size_t nelem, nbytes;
    const char *tag;
    if (sw_py_parse_shape(v[0], shape, &ndim) < 0)
        return NULL;
    if (full && sw_py_absent(v[1])) {
        /* full's dtype, when not given, follows the value: a NumPy
         * scalar's own; bool, int64 for int, and spillway's default
         * float32 (complex64) for float (complex), so that full() and
         * ones() agree. */
        PyObject *o = w[0], *odt = NULL;
        if (PyBool_Check(o))
            dt = SW_BOOL;
        else if (PyLong_Check(o))
            dt = SW_INT64;
        else if (!PyFloat_CheckExact(o) && !PyComplex_CheckExact(o) &&
                 (odt = PyObject_GetAttrString(o, "dtype")) != NULL) {
            int rc = sw_py_parse_dtype(st, odt, &dt);
            Py_DECREF(odt);
            if (rc < 0)
                return NULL;
        } else {
            PyErr_Clear();
            dt = PyComplex_Check(o) ? SW_COMPLEX64 : SW_FLOAT32;
        }
    } else if (sw_py_parse_dtype(st, v[1], &dt) < 0) {
        return NULL;
    }
    if (sw_py_shape_sizes(shape, ndim, sw_py_dtypes[dt].size, v[0], &nelem,
                          &nbytes) < 0 ||
        sw_py_parse_tag(v[3], &tag) < 0)
        return NULL;
    sw_scalar value;
    memset(&value, 0, sizeof value);
    if (full && sw_py_scalar_from_py(w[0], dt, &value, "fill value") < 0)
        return NULL;
    if (what == 2) {
        switch (sw_py_dtypes[dt].kind) {
        case SW_KIND_FLOAT: value.f = 1.0; break;
        case SW_KIND_COMPLEX: value.c.re = 1.0; break;
        default: value.i = 1; break;
        }
    }
    QueueObject *q;
    if (sw_py_queue_arg(st, v[4], NULL, fname, &q) < 0)
        return NULL;
    DeviceObject *d = device_of_args(st, v[2], q, fname);
    if (d == NULL)
        return NULL;
    /* d's reference becomes the Array's. */
    PyObject *r = sw_py_array_alloc_ref(st, d, dt, ndim, shape, nelem, tag);
    if (r != NULL && what != 0 &&
        (sw_py_fill(st, (ArrayObject *)r, value, q) < 0 ||
         sw_py_sync_if_exported(st, ((ArrayObject *)r)->device) < 0))
        Py_CLEAR(r);
    return r;
}

static PyObject *mod_empty(PyObject *m, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames)
{
    return make_array(m, "empty", args, nargs, kwnames, 0);
}

static PyObject *mod_zeros(PyObject *m, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames)
{
    return make_array(m, "zeros", args, nargs, kwnames, 1);
}

static PyObject *mod_ones(PyObject *m, PyObject *const *args,
                          Py_ssize_t nargs, PyObject *kwnames)
{
    return make_array(m, "ones", args, nargs, kwnames, 2);
}

static PyObject *mod_full(PyObject *m, PyObject *const *args,
                          Py_ssize_t nargs, PyObject *kwnames)
{
    return make_array(m, "full", args, nargs, kwnames, 3);
}

/* Copy an Array to another device through host memory. */
static PyObject *array_to_device(sw_py_state *st, ArrayObject *src,
                                 DeviceObject *d, const char *tag)
{
    void *tmp = sw_py_array_read_all(st, src);
    if (tmp == NULL)
        return NULL;
    PyObject *r = sw_py_array_from_host(st, d, src->dtype, SW_PY_NDIM(src),
                                        src->shape, src->nelem, tmp, tag);
    PyMem_RawFree(tmp);
    return r;
}

/* An Array holding a copy of a buffer-protocol object's data; as dtype
 * `as` when it is not -1 (bfloat16 read as uint16). */
static PyObject *array_from_buffer(sw_py_state *st, PyObject *obj,
                                   DeviceObject *d, const char *tag, int as)
{
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_RECORDS_RO) < 0)
        return NULL;
    PyObject *r = NULL;
    void *tmp = NULL;
    sw_dtype dt;
    Py_ssize_t shape[SW_PY_MAXDIMS];
    int ndim = view.ndim;
    size_t nelem, nbytes;
    if (sw_py_dtype_from_format(view.format, view.itemsize, &dt) < 0)
        goto done;
    if (as >= 0)
        dt = (sw_dtype)as;
    if (ndim > SW_PY_MAXDIMS) {
        PyErr_Format(PyExc_ValueError,
                     "%d dimensions: at most %d are allowed", ndim,
                     SW_PY_MAXDIMS);
        goto done;
    }
    if (view.shape == NULL && ndim != 0) {
        ndim = 1;
        shape[0] = view.len / view.itemsize;
    } else if (ndim > 0) {
        memcpy(shape, view.shape, (size_t)ndim * sizeof(Py_ssize_t));
    }
    if (sw_py_shape_sizes(shape, ndim, sw_py_dtypes[dt].size, NULL, &nelem,
                          &nbytes) < 0)
        goto done;
    const void *src = view.buf;
    if (nbytes > 0 && !PyBuffer_IsContiguous(&view, 'C')) {
        tmp = PyMem_RawMalloc(nbytes);
        if (tmp == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        if (PyBuffer_ToContiguous(tmp, &view, (Py_ssize_t)nbytes, 'C') < 0)
            goto done;
        src = tmp;
    }
    r = sw_py_array_alloc(st, d, dt, ndim, shape, nelem, tag);
    if (r != NULL && nbytes > 0) {
        sw_buffer *buf = ((ArrayObject *)r)->buf;
        int rc;
        NOGIL(rc = sw_buffer_write(buf, 0, src, nbytes));
        if (rc != SW_OK) {
            sw_py_raise(st, rc);
            Py_CLEAR(r);
        }
    }
done:
    PyMem_RawFree(tmp);
    PyBuffer_Release(&view);
    return r;
}

/* Through NumPy: lists, scalars, array-likes, and every conversion to a
 * dtype=.  NumPy has no bfloat16 of its own: ml_dtypes' arrays are read as
 * their 16-bit patterns, and conversions to bfloat16 go through float32. */
static PyObject *asarray_numpy(sw_py_state *st, PyObject *obj,
                               DeviceObject *d, const char *tag, int has_dt,
                               sw_dtype dt)
{
    PyObject *np = sw_py_numpy(st);
    if (np == NULL)
        return NULL;
    PyObject *arr;
    if (has_dt && dt != SW_BFLOAT16) {
        PyObject *npdt = sw_py_np_dtype(st, dt);
        arr = npdt ? PyObject_CallMethod(np, "asarray", "OO", obj, npdt)
                   : NULL;
    } else {
        arr = PyObject_CallMethod(np, "asarray", "O", obj);
    }
    if (arr == NULL)
        return NULL;
    /* The array's dtype first: NumPy exports no buffer for some (datetime,
     * ml_dtypes' bfloat16), and the error should name the dtype. */
    PyObject *adt = PyObject_GetAttrString(arr, "dtype");
    sw_dtype src;
    PyObject *r = NULL;
    if (adt == NULL || sw_py_parse_dtype(st, adt, &src) < 0) {
        /* an error is set */
    } else if (src == SW_BFLOAT16) {
        PyObject *raw = PyObject_CallMethod(arr, "view", "s", "uint16");
        r = raw ? array_from_buffer(st, raw, d, tag, SW_BFLOAT16) : NULL;
        Py_XDECREF(raw);
    } else if (has_dt && dt == SW_BFLOAT16) {
        PyObject *f = PyObject_CallMethod(np, "ascontiguousarray", "Os", arr,
                                          "float32");
        Py_buffer view;
        if (f != NULL && PyObject_GetBuffer(f, &view, PyBUF_ND) == 0) {
            size_t nelem = (size_t)(view.len / 4);
            uint16_t *bits = PyMem_RawMalloc(nelem ? 2 * nelem : 1);
            Py_ssize_t shape[SW_PY_MAXDIMS];
            int ndim = view.ndim;
            if (ndim > SW_PY_MAXDIMS) {
                PyErr_Format(PyExc_ValueError,
                             "%d dimensions: at most %d are allowed", ndim,
                             SW_PY_MAXDIMS);
            } else if (bits == NULL) {
                PyErr_NoMemory();
            } else {
                for (int i = 0; i < ndim; i++)
                    shape[i] = view.shape[i];
                sw_py_bf16_from_f32(view.buf, bits, nelem);
                r = sw_py_array_from_host(st, d, SW_BFLOAT16, ndim, shape,
                                          nelem, bits, tag);
            }
            PyMem_RawFree(bits);
            PyBuffer_Release(&view);
        }
        Py_XDECREF(f);
    } else {
        r = array_from_buffer(st, arr, d, tag, (int)src);
    }
    Py_XDECREF(adt);
    Py_DECREF(arr);
    return r;
}

/* A DLPack producer spillway reads only through DLPack: no buffer
 * protocol (NumPy arrays and memoryviews have one), but __dlpack__ (a
 * PyTorch tensor, a CuPy array). */
static int dlpack_only(PyObject *obj)
{
    return !PyObject_CheckBuffer(obj) &&
           PyObject_HasAttrString(obj, "__dlpack__") &&
           PyObject_HasAttrString(obj, "__dlpack_device__");
}

static PyObject *mod_asarray(PyObject *m, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"obj", "device", "tag", "queue",
                                        "dtype"};
    PyObject *v[5];
    if (sw_py_parse_args("asarray", args, nargs, kwnames, names, 5, 2, 1,
                         v) < 0)
        return NULL;
    sw_py_state *st = sw_py_module_state(m);
    const char *tag;
    QueueObject *q;
    sw_dtype dt = SW_FLOAT32;
    int has_dt = !sw_py_absent(v[4]);
    if (sw_py_parse_tag(v[2], &tag) < 0 ||
        sw_py_queue_arg(st, v[3], NULL, "asarray", &q) < 0 ||
        (has_dt && sw_py_parse_dtype(st, v[4], &dt) < 0))
        return NULL;
    /* Host-to-device copies are complete when they return (sw_buffer_write):
     * queue= only chooses the device; there is no work to record. */
    PyObject *obj = v[0];
    if (Py_IS_TYPE(obj, st->array_type)) {
        ArrayObject *a = (ArrayObject *)obj;
        if (sw_py_array_check_device(a) < 0)
            return NULL;
        int same_dt = !has_dt || dt == a->dtype;
        if (sw_py_absent(v[1]) && q == NULL && same_dt)
            return Py_NewRef(obj);
        DeviceObject *d = sw_py_absent(v[1]) && q == NULL
                              ? (DeviceObject *)Py_NewRef(a->device)
                              : device_of_args(st, v[1], q, "asarray");
        if (d == NULL)
            return NULL;
        PyObject *r = !same_dt         ? sw_py_astype(st, a, dt, d, tag)
                      : d == a->device ? Py_NewRef(obj)
                                       : array_to_device(st, a, d, tag);
        Py_DECREF(d);
        return r;
    }
    DeviceObject *d = device_of_args(st, v[1], q, "asarray");
    if (d == NULL)
        return NULL;
    PyObject *r;
    if (dlpack_only(obj)) {
        r = sw_py_from_dlpack(st, obj, (PyObject *)d, 1, tag);
        if (r != NULL && has_dt && ((ArrayObject *)r)->dtype != dt) {
            PyObject *c = sw_py_astype(st, (ArrayObject *)r, dt, d, tag);
            Py_SETREF(r, c);
        }
    } else if (!has_dt && PyObject_CheckBuffer(obj) &&
               !PyObject_HasAttrString(obj, "__array_interface__")) {
        /* Plain buffers (array.array, memoryview, bytes) need no NumPy. */
        r = array_from_buffer(st, obj, d, tag, -1);
    } else {
        r = asarray_numpy(st, obj, d, tag, has_dt, dt);
    }
    Py_DECREF(d);
    return r;
}

static PyMethodDef create_methods[] = {
    FASTKW("full", mod_full,
           "full(shape, fill_value, dtype=None, device=None, tag=None, *, "
           "queue=None)\n--\n\n"
           "A new Array with every element fill_value (filled on the "
           "device).  dtype=None follows the value: a NumPy scalar's dtype, "
           "bool, int64 for an int, float32 for a float, complex64 for a "
           "complex."),
    FASTKW("ones", mod_ones,
           "ones(shape, dtype='float32', device=None, tag=None, *, "
           "queue=None)\n--\n\nA new Array of ones (filled on the device)."),
    FASTKW("empty", mod_empty,
           "empty(shape, dtype='float32', device=None, tag=None, *, "
           "queue=None)\n--\n\n"
           "A new uninitialised Array (on the queue's device when queue is "
           "given).  tag names its origin in out-of-memory reports."),
    FASTKW("zeros", mod_zeros,
           "zeros(shape, dtype='float32', device=None, tag=None, *, "
           "queue=None)\n--\n\n"
           "A new Array of zeros (filled on the device; on queue, recorded "
           "in its order manager, when given)."),
    FASTKW("asarray", mod_asarray,
           "asarray(obj, device=None, *, tag=None, queue=None, dtype=None)"
           "\n--\n\n"
           "An Array with a copy of obj's data: a NumPy array, any object "
           "with the buffer protocol, a DLPack producer (a PyTorch tensor), "
           "a nested sequence or a scalar (through NumPy).  dtype= converts "
           "on the host, as NumPy does.  An Array on the requested device "
           "(of the requested dtype) is returned as is; on another device "
           "it is copied.  queue= chooses the device (the copy is complete "
           "when asarray returns)."),
    {NULL, NULL, 0, NULL},
};

int sw_py_create_setup(PyObject *m, sw_py_state *st)
{
    (void)st;
    return PyModule_AddFunctions(m, create_methods);
}
