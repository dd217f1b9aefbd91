/*
 * pickle.c -- pickling an Array, and copy.copy / copy.deepcopy.
 *
 * An Array pickles as a call to spillway._spillway._rebuild_array with its
 * dtype's name, shape, device spec, tag and bytes.  The bytes are one host
 * copy, read straight into the object pickle writes: with protocol 5 a
 * PickleBuffer over a bytearray, so that a consumer taking buffers out of
 * band (buffer_callback) gets that memory itself, never a second copy;
 * below protocol 5, bytes.  A spilled array is read from its host copy and
 * stays spilled: pickling is a host read, not a device use.
 *
 * Unpickling allocates on the device of the pickled spec when the
 * receiving process has it (so a round trip in one process, or across
 * processes with the same devices, keeps the placement), else on the
 * receiving process's default device.  A dtype this build lacks, or a
 * newer format, is a clear error.
 *
 * copy.copy and copy.deepcopy copy on the device (Array.copy): there is
 * nothing to share and no need for the host.
 */
#include "array.h"
#include "dtype.h"

#include <string.h>
#include <sys/mman.h>

/* The format of the pickled arguments; a newer one is refused. */
#define SW_PY_PICKLE_FORMAT 1

/* A large host copy is written once, from start to end, right after it
 * was allocated: ask for huge pages first (as NumPy does for its arrays),
 * or faulting in 4 KiB pages costs more than the copy itself. */
static void advise_huge(void *p, size_t n)
{
#ifdef MADV_HUGEPAGE
    if (n < ((size_t)4 << 20))
        return;
    uintptr_t start = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
    uintptr_t end = (uintptr_t)p + n;
    if (end > start)
        (void)madvise((void *)start, end - start, MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}

PyObject *sw_py_array_reduce_ex(ArrayObject *a, PyObject *protocol)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(a));
    if (st == NULL || sw_py_array_check_device(a) < 0)
        return NULL;
    long proto = PyLong_AsLong(protocol);
    if (proto == -1 && PyErr_Occurred())
        return NULL;
    char tag[SW_TAG_MAX + 1];
    int rc;
    NOGIL(rc = sw_buffer_tag(a->buf, tag, sizeof tag));
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    Py_ssize_t n = (Py_ssize_t)a->nbytes;
    PyObject *raw = proto >= 5 ? PyByteArray_FromStringAndSize(NULL, n)
                               : PyBytes_FromStringAndSize(NULL, n);
    if (raw == NULL)
        return NULL;
    char *dst = proto >= 5 ? PyByteArray_AS_STRING(raw)
                           : PyBytes_AS_STRING(raw);
    advise_huge(dst, (size_t)n);
    if (n > 0)
        NOGIL(rc = sw_buffer_read(a->buf, 0, dst, (size_t)n));
    if (rc != SW_OK) {
        Py_DECREF(raw);
        return sw_py_raise(st, rc);
    }
    PyObject *data = raw;
    if (proto >= 5) {
        data = PyPickleBuffer_FromObject(raw);
        Py_DECREF(raw);
        if (data == NULL)
            return NULL;
    }
    PyObject *module = PyType_GetModule(Py_TYPE(a));
    PyObject *rebuild =
        module ? PyObject_GetAttrString(module, "_rebuild_array") : NULL;
    PyObject *shape = sw_py_shape_tuple(a->shape, SW_PY_NDIM(a));
    PyObject *r = NULL;
    if (rebuild != NULL && shape != NULL)
        r = Py_BuildValue("O(isOOsO)", rebuild, SW_PY_PICKLE_FORMAT,
                          sw_py_dtypes[a->dtype].name, shape,
                          a->device->name, tag[0] ? tag : NULL, data);
    Py_XDECREF(rebuild);
    Py_XDECREF(shape);
    Py_DECREF(data);
    return r;
}

PyObject *sw_py_array_copy_dunder(ArrayObject *a, PyObject *unused)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(a));
    return st ? sw_py_array_copy_impl(st, a, NULL, NULL) : NULL;
}

PyObject *sw_py_array_deepcopy(ArrayObject *a, PyObject *memo)
{
    (void)memo; /* an Array refers to no other Python object to share */
    return sw_py_array_copy_dunder(a, NULL);
}

/* The device to unpickle on: spec's when this process has it, else the
 * default device.  New reference.  A spec with a NUL is no spec any
 * spillway pickled (corrupt data, ValueError), not a device this process
 * lacks. */
static DeviceObject *unpickle_device(sw_py_state *st, PyObject *spec)
{
    if (PyUnicode_Check(spec)) {
        if (sw_py_utf8(spec, "the pickled device spec") == NULL)
            return NULL;
        DeviceObject *d = sw_py_device_lookup(st, spec);
        if (d != NULL || !PyErr_ExceptionMatches(PyExc_ValueError))
            return d;
        PyErr_Clear(); /* no such device here */
    }
    return sw_py_device_lookup(st, NULL);
}

/* _rebuild_array(format, dtype, shape, device, tag, data) */
static PyObject *mod_rebuild_array(PyObject *m, PyObject *args)
{
    int format;
    const char *dtname;
    PyObject *shape_obj, *spec, *tag_obj, *data;
    if (!PyArg_ParseTuple(args, "isOOOO:_rebuild_array", &format, &dtname,
                          &shape_obj, &spec, &tag_obj, &data))
        return NULL;
    if (format != SW_PY_PICKLE_FORMAT) {
        PyErr_Format(PyExc_ValueError,
                     "cannot unpickle a spillway array of pickle format %d: "
                     "this spillway reads format %d (pickled by a newer "
                     "spillway?)",
                     format, SW_PY_PICKLE_FORMAT);
        return NULL;
    }
    sw_py_state *st = sw_py_module_state(m);
    sw_dtype dt;
    if (sw_py_dtype_by_name(dtname, &dt) < 0) {
        PyErr_Format(PyExc_TypeError,
                     "cannot unpickle a spillway array of dtype '%s': this "
                     "build of spillway has no such element type (pickled "
                     "by a newer spillway?)",
                     dtname);
        return NULL;
    }
    Py_ssize_t shape[SW_PY_MAXDIMS];
    int ndim;
    size_t nelem, nbytes;
    const char *tag;
    if (sw_py_parse_shape(shape_obj, shape, &ndim) < 0 ||
        sw_py_shape_sizes(shape, ndim, sw_py_dtypes[dt].size, shape_obj,
                          &nelem, &nbytes) < 0 ||
        sw_py_parse_tag(tag_obj, &tag) < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    PyObject *r = NULL;
    if ((size_t)view.len != nbytes) {
        PyErr_Format(PyExc_ValueError,
                     "cannot unpickle a spillway array of shape %R and dtype "
                     "%s from %zd bytes (%zu expected): the data is "
                     "corrupt",
                     shape_obj, dtname, view.len, nbytes);
    } else {
        DeviceObject *d = unpickle_device(st, spec);
        if (d != NULL) {
            r = sw_py_array_from_host(st, d, dt, ndim, shape, nelem,
                                      view.buf, tag);
            Py_DECREF(d);
        }
    }
    PyBuffer_Release(&view);
    return r;
}

static PyMethodDef pickle_methods[] = {
    {"_rebuild_array", (PyCFunction)(void (*)(void))mod_rebuild_array,
     METH_VARARGS,
     "_rebuild_array(format, dtype, shape, device, tag, data)\n--\n\n"
     "Unpickle an Array: on `device` when this process has it, else on "
     "the default device."},
    {NULL, NULL, 0, NULL},
};

int sw_py_pickle_setup(PyObject *m, sw_py_state *st)
{
    (void)st;
    return PyModule_AddFunctions(m, pickle_methods);
}
