/*
 * create.c -- new arrays: empty, zeros, asarray (copies from NumPy arrays,
 * buffer-protocol objects, nested sequences and other devices).
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

static PyObject *make_array(PyObject *m, const char *fname,
                            PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames, int zero)
{
    static const char *const names[] = {"shape", "dtype", "device", "tag",
                                        "queue"};
    PyObject *v[5];
    if (sw_py_parse_args(fname, args, nargs, kwnames, names, 5, 4, 1, v) < 0)
        return NULL;
    sw_py_state *st = sw_py_module_state(m);
    Py_ssize_t shape[SW_PY_MAXDIMS];
    int ndim = 0;
    sw_dtype dt;
    size_t nelem, nbytes;
    const char *tag;
    if (sw_py_parse_shape(v[0], shape, &ndim) < 0 ||
        sw_py_parse_dtype(st, v[1], &dt) < 0 ||
        sw_py_shape_sizes(shape, ndim, sw_py_dtypes[dt].size, v[0], &nelem,
                          &nbytes) < 0 ||
        sw_py_parse_tag(v[3], &tag) < 0)
        return NULL;
    QueueObject *q;
    if (sw_py_queue_arg(st, v[4], NULL, fname, &q) < 0)
        return NULL;
    DeviceObject *d = device_of_args(st, v[2], q, fname);
    if (d == NULL)
        return NULL;
    PyObject *r = sw_py_array_alloc(st, d, dt, ndim, shape, nelem, tag);
    if (r != NULL && zero && nelem > 0) {
        sw_py_op op = {.kind = SW_PY_OP_FILL, .out = ((ArrayObject *)r)->buf,
                      .s = {.i = 0}, .dtype = dt, .n = nelem};
        if (sw_py_do_op(st, q, &op, &r, 1) < 0 ||
            sw_py_sync_if_exported(st, d) < 0)
            Py_CLEAR(r);
    }
    Py_DECREF(d);
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

/* Copy an Array to another device through host memory. */
static PyObject *array_to_device(sw_py_state *st, ArrayObject *src,
                                 DeviceObject *d, const char *tag)
{
    void *tmp = PyMem_RawMalloc(src->nbytes ? src->nbytes : 1);
    if (tmp == NULL)
        return PyErr_NoMemory();
    int rc = SW_OK;
    if (src->nbytes > 0)
        NOGIL(rc = sw_buffer_read(src->buf, 0, tmp, src->nbytes));
    PyObject *r = NULL;
    if (rc != SW_OK) {
        sw_py_raise(st, rc);
    } else {
        r = sw_py_array_alloc(st, d, src->dtype, SW_PY_NDIM(src), src->shape,
                              src->nelem, tag);
        if (r != NULL && src->nbytes > 0) {
            sw_buffer *buf = ((ArrayObject *)r)->buf;
            NOGIL(rc = sw_buffer_write(buf, 0, tmp, src->nbytes));
            if (rc != SW_OK) {
                sw_py_raise(st, rc);
                Py_CLEAR(r);
            }
        }
    }
    PyMem_RawFree(tmp);
    return r;
}

/* An Array holding a copy of a buffer-protocol object's data. */
static PyObject *array_from_buffer(sw_py_state *st, PyObject *obj,
                                   DeviceObject *d, const char *tag)
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

static PyObject *mod_asarray(PyObject *m, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"obj", "device", "tag", "queue"};
    PyObject *v[4];
    if (sw_py_parse_args("asarray", args, nargs, kwnames, names, 4, 2, 1,
                         v) < 0)
        return NULL;
    sw_py_state *st = sw_py_module_state(m);
    const char *tag;
    QueueObject *q;
    if (sw_py_parse_tag(v[2], &tag) < 0 ||
        sw_py_queue_arg(st, v[3], NULL, "asarray", &q) < 0)
        return NULL;
    /* Host-to-device copies are complete when they return (sw_buffer_write):
     * queue= only chooses the device; there is no work to record. */
    PyObject *obj = v[0];
    if (Py_IS_TYPE(obj, st->array_type)) {
        ArrayObject *a = (ArrayObject *)obj;
        if (sw_py_array_check_device(a) < 0)
            return NULL;
        if (sw_py_absent(v[1]) && q == NULL)
            return Py_NewRef(obj);
        DeviceObject *d = device_of_args(st, v[1], q, "asarray");
        if (d == NULL)
            return NULL;
        PyObject *r = d == a->device ? Py_NewRef(obj)
                                     : array_to_device(st, a, d, tag);
        Py_DECREF(d);
        return r;
    }
    DeviceObject *d = device_of_args(st, v[1], q, "asarray");
    if (d == NULL)
        return NULL;
    PyObject *r;
    if (PyObject_CheckBuffer(obj)) {
        r = array_from_buffer(st, obj, d, tag);
    } else {
        /* Lists, scalars and other array-likes go through NumPy. */
        PyObject *np = sw_py_numpy(st);
        PyObject *arr =
            np ? PyObject_CallMethod(np, "ascontiguousarray", "O", obj)
               : NULL;
        r = arr ? array_from_buffer(st, arr, d, tag) : NULL;
        Py_XDECREF(arr);
    }
    Py_DECREF(d);
    return r;
}

static PyMethodDef create_methods[] = {
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
           "asarray(obj, device=None, *, tag=None, queue=None)\n--\n\n"
           "An Array with a copy of obj's data: a NumPy array, any object "
           "with the buffer protocol, or a nested sequence (through NumPy). "
           "An Array on the requested device is returned as is; on another "
           "device it is copied.  queue= chooses the device (the copy is "
           "complete when asarray returns)."),
    {NULL, NULL, 0, NULL},
};

int sw_py_create_setup(PyObject *m, sw_py_state *st)
{
    (void)st;
    return PyModule_AddFunctions(m, create_methods);
}
