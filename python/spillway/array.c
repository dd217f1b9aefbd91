/*
 * array.c -- Array: an array in device memory, a handle on an sw_buffer
 * (a base, a view, or a retained reference shared with other Arrays), its
 * attributes, host reads into NumPy and fill(), and the type's spec, which
 * lists the slots and methods of the other files: views and elements
 * (view.c), DLPack export (dlpack.c), operators and sum/copy/astype
 * (operators.c), pickling and copy.copy (pickle.c).
 */
#include "array.h"
#include "core/beside.h"
#include "dtype.h"

#include <string.h>
#include <structmember.h>

/* What of the caller's the new Array takes over (each a count the Array
 * would otherwise make and the caller drop: atomic writes to the Device's
 * shared fields, which threads using one Device would all contend for). */
enum {
    TAKE_USE = 1, /* the count of d's users (sw_py_device_try_use) */
    TAKE_REF = 2  /* a reference to d (also dropped on failure) */
};

/* An Array for buf on d (buf's reference taken: freed on failure). */
static PyObject *wrap(sw_py_state *st, DeviceObject *d, sw_buffer *buf,
                      sw_dtype dt, int ndim, const Py_ssize_t *shape,
                      size_t nelem, int take)
{
    ArrayObject *a =
        sw_py_state_alive(st)
            ? PyObject_GC_NewVar(ArrayObject, st->array_type, ndim)
            : NULL;
    if (a == NULL) {
        NOGIL((void)sw_buffer_free(buf));
        if (take & TAKE_USE)
            sw_py_device_unuse(d);
        if (take & TAKE_REF)
            Py_DECREF(d);
        return NULL;
    }
    a->buf = buf;
    a->device = take & TAKE_REF ? d : (DeviceObject *)Py_NewRef(d);
    a->ext = NULL;
    a->weakreflist = NULL;
    a->nelem = nelem;
    a->nbytes = nelem * sw_py_dtypes[dt].size;
    a->dtype = dt;
    if (ndim > 0)
        memcpy(a->shape, shape, (size_t)ndim * sizeof(Py_ssize_t));
    if (!(take & TAKE_USE))
        sw_py_device_use(d);
    PyObject_GC_Track(a);
    /* The test suite's list of new Arrays (testapi.c), swapped by another
     * thread at any time: a reference of ours while appending.  Only while
     * tracking is on (the flag alone, otherwise: a module-wide lock taken
     * by every Array made in every thread would be what they share). */
    PyObject *track = NULL;
    if (atomic_load_explicit(&st->tracking, memory_order_relaxed)) {
        SW_PY_LOCK(&st->mu);
        track = Py_XNewRef(st->track);
        SW_PY_UNLOCK(&st->mu);
    }
    if (track != NULL) {
        PyObject *wr = PyWeakref_NewRef((PyObject *)a, NULL);
        int bad = wr == NULL || PyList_Append(track, wr) < 0;
        Py_XDECREF(wr);
        Py_DECREF(track);
        if (bad) {
            Py_DECREF(a);
            return NULL;
        }
    }
    return (PyObject *)a;
}

PyObject *sw_py_array_wrap(sw_py_state *st, DeviceObject *d, sw_buffer *buf,
                           sw_dtype dt, int ndim, const Py_ssize_t *shape,
                           size_t nelem)
{
    return wrap(st, d, buf, dt, ndim, shape, nelem, 0);
}

PyObject *sw_py_array_wrap_view(sw_py_state *st, ArrayObject *src,
                                sw_buffer *buf, int ndim,
                                const Py_ssize_t *shape, size_t nelem)
{
    PyObject *r = sw_py_array_wrap(st, src->device, buf, src->dtype, ndim,
                                   shape, nelem);
    if (r != NULL && src->ext != NULL) {
        sw_py_extmem_ref(src->ext);
        ((ArrayObject *)r)->ext = src->ext;
    }
    return r;
}

int sw_py_array_check_device(ArrayObject *a)
{
    if (a->device->closed) {
        PyErr_Format(PyExc_ValueError,
                     "this array's device %U is closed: the array can no "
                     "longer be used",
                     a->device->name);
        return -1;
    }
    return 0;
}

int sw_py_sync_if_exported(sw_py_state *st, DeviceObject *d)
{
    if (d->ctx == NULL || atomic_load(&d->ctx->exports) == 0)
        return 0;
    sw_device *dev = d->dev;
    int rc;
    NOGIL(rc = sw_device_synchronize(dev));
    if (rc != SW_OK) {
        sw_py_raise(st, rc);
        return -1;
    }
    return 0;
}

/* nops > 0: the result of a launch on ops[0..nops) (buffers of d),
 * allocated beside them (core/beside.h). */
static PyObject *array_alloc(sw_py_state *st, DeviceObject *d,
                             sw_dtype dt, int ndim, const Py_ssize_t *shape,
                             size_t nelem, const char *tag, int take,
                             sw_buffer *const *ops, size_t nops)
{
    sw_buffer *buf = NULL;
    size_t nbytes = nelem * sw_py_dtypes[dt].size;
    int rc;
    /* Counted as a user: a close() meanwhile waits for this call; the
     * count becomes the Array's. */
    sw_device *dev = sw_py_device_try_use(d);
    if (dev == NULL) {
        sw_py_raise(st, SW_PY_CLOSED);
    } else {
        NOGIL_ALLOC(rc, nops > 0 ? sw__buffer_alloc_beside(dev, nbytes, tag,
                                                           ops, nops, &buf)
                                 : sw_buffer_alloc(dev, nbytes, tag, &buf));
        if (rc == SW_OK)
            return wrap(st, d, buf, dt, ndim, shape, nelem, take | TAKE_USE);
        sw_py_raise(st, rc);
        sw_py_device_unuse(d);
    }
    if (take & TAKE_REF)
        Py_DECREF(d);
    return NULL;
}

PyObject *sw_py_array_alloc(sw_py_state *st, DeviceObject *d, sw_dtype dt,
                            int ndim, const Py_ssize_t *shape, size_t nelem,
                            const char *tag)
{
    return array_alloc(st, d, dt, ndim, shape, nelem, tag, 0, NULL, 0);
}

PyObject *sw_py_array_alloc_ref(sw_py_state *st, DeviceObject *d,
                                sw_dtype dt, int ndim,
                                const Py_ssize_t *shape, size_t nelem,
                                const char *tag)
{
    return array_alloc(st, d, dt, ndim, shape, nelem, tag, TAKE_REF, NULL,
                       0);
}

ArrayObject *sw_py_result_like(sw_py_state *st, ArrayObject *a,
                               ArrayObject *b, const char *tag)
{
    sw_buffer *ops[2] = {a->buf, b != NULL ? b->buf : NULL};
    return (ArrayObject *)array_alloc(st, a->device, a->dtype, SW_PY_NDIM(a),
                                      a->shape, a->nelem, tag, 0, ops,
                                      b != NULL ? 2 : 1);
}

PyObject *sw_py_array_from_host(sw_py_state *st, DeviceObject *d,
                                sw_dtype dt, int ndim,
                                const Py_ssize_t *shape, size_t nelem,
                                const void *bytes, const char *tag)
{
    PyObject *r = sw_py_array_alloc(st, d, dt, ndim, shape, nelem, tag);
    size_t nbytes = nelem * sw_py_dtypes[dt].size;
    if (r != NULL && nbytes > 0) {
        sw_buffer *buf = ((ArrayObject *)r)->buf;
        int rc;
        NOGIL(rc = sw_buffer_write(buf, 0, bytes, nbytes));
        if (rc != SW_OK) {
            sw_py_raise(st, rc);
            Py_CLEAR(r);
        }
    }
    return r;
}

void *sw_py_array_read_all(sw_py_state *st, ArrayObject *a)
{
    void *tmp = PyMem_RawMalloc(a->nbytes ? a->nbytes : 1);
    if (tmp == NULL)
        return PyErr_NoMemory();
    int rc = SW_OK;
    if (a->nbytes > 0)
        NOGIL(rc = sw_buffer_read(a->buf, 0, tmp, a->nbytes));
    if (rc != SW_OK) {
        PyMem_RawFree(tmp);
        sw_py_raise(st, rc);
        return NULL;
    }
    return tmp;
}

PyObject *sw_py_np_empty(sw_py_state *st, sw_dtype dt, int ndim,
                         const Py_ssize_t *shape, int raw)
{
    PyObject *np = sw_py_numpy(st);
    if (np == NULL)
        return NULL;
    PyObject *dto;
    if (dt == SW_BFLOAT16 && raw) {
        dto = PyUnicode_FromString("uint16");
    } else {
        dto = Py_XNewRef(sw_py_np_dtype(st, dt));
    }
    PyObject *shp = dto ? sw_py_shape_tuple(shape, ndim) : NULL;
    PyObject *out = shp ? PyObject_CallMethod(np, "empty", "OO", shp, dto)
                        : NULL;
    Py_XDECREF(shp);
    Py_XDECREF(dto);
    return out;
}

static int Array_traverse(ArrayObject *a, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(a));
    Py_VISIT(a->device);
    return 0;
}

/* No tp_clear: an Array refers to nothing that could refer back to it (its
 * Device holds no arrays), so it is never what keeps a cycle alive, and
 * keeping its device until deallocation keeps every Array usable until
 * then.  Order: untrack; weak references first, so that no thread can
 * reach the object while the GIL is released to free its buffer; the
 * buffer; the device; the memory; the type. */
static void Array_dealloc(ArrayObject *a)
{
    PyTypeObject *tp = Py_TYPE(a);
    PyObject_GC_UnTrack(a);
    if (a->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)a);
    sw_buffer *buf = a->buf;
    a->buf = NULL;
    if (buf != NULL) {
        int rc;
        NOGIL(rc = sw_buffer_free(buf));
        if (rc == SW_OK)
            sw_py_thread.released++;
    }
    /* The producer of imported memory goes after the handle: the wrapping
     * buffer is released first (sw_py_extmem_unref waits for the work
     * queued on it before the producer's deleter runs). */
    sw_py_extmem *ext = a->ext;
    a->ext = NULL;
    sw_py_extmem_unref(ext);
    DeviceObject *d = a->device;
    a->device = NULL;
    if (d != NULL) {
        sw_py_device_unuse(d);
        Py_DECREF(d);
    }
    tp->tp_free((PyObject *)a);
    Py_DECREF(tp);
}

static PyObject *Array_repr(ArrayObject *a)
{
    PyObject *shape = sw_py_shape_tuple(a->shape, SW_PY_NDIM(a));
    if (shape == NULL)
        return NULL;
    PyObject *r = PyUnicode_FromFormat(
        "spillway.Array(shape=%R, dtype=%s, device=%R%s)", shape,
        sw_py_dtypes[a->dtype].name, a->device->name,
        a->device->closed ? ", device closed" : "");
    Py_DECREF(shape);
    return r;
}

static PyObject *Array_get_shape(ArrayObject *a, void *c)
{
    return sw_py_shape_tuple(a->shape, SW_PY_NDIM(a));
}

static PyObject *Array_get_ndim(ArrayObject *a, void *c)
{
    return PyLong_FromLong(SW_PY_NDIM(a));
}

static PyObject *Array_get_size(ArrayObject *a, void *c)
{
    return PyLong_FromSize_t(a->nelem);
}

static PyObject *Array_get_nbytes(ArrayObject *a, void *c)
{
    return PyLong_FromSize_t(a->nbytes);
}

static PyObject *Array_get_itemsize(ArrayObject *a, void *c)
{
    return PyLong_FromSize_t(sw_py_dtypes[a->dtype].size);
}

static PyObject *Array_get_dtype(ArrayObject *a, void *c)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(a));
    if (st == NULL)
        return NULL;
    return sw_py_dtype_obj(st, a->dtype);
}

static PyObject *Array_get_device(ArrayObject *a, void *c)
{
    return Py_NewRef(a->device);
}

static PyObject *Array_get_is_spilled(ArrayObject *a, void *c)
{
    if (sw_py_array_check_device(a) < 0)
        return NULL;
    sw_buffer_state state = SW_RESIDENT;
    int rc;
    NOGIL(rc = sw_buffer_state_get(a->buf, &state));
    if (rc != SW_OK) {
        sw_py_state *st = sw_py_type_state(Py_TYPE(a));
        return st ? sw_py_raise(st, rc) : NULL;
    }
    return PyBool_FromLong(state == SW_SPILLED);
}

static PyObject *Array_get_tag(ArrayObject *a, void *c)
{
    if (sw_py_array_check_device(a) < 0)
        return NULL;
    char tag[SW_TAG_MAX + 1];
    int rc;
    NOGIL(rc = sw_buffer_tag(a->buf, tag, sizeof tag));
    if (rc != SW_OK) {
        sw_py_state *st = sw_py_type_state(Py_TYPE(a));
        return st ? sw_py_raise(st, rc) : NULL;
    }
    if (tag[0] == '\0')
        Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(tag, (Py_ssize_t)strlen(tag), "replace");
}

/* Copy the array into a new NumPy array.  bfloat16 needs ml_dtypes (NumPy
 * has no such type): without it, a TypeError says what else to do. */
static PyObject *Array_numpy(ArrayObject *a, PyObject *unused)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(a));
    if (st == NULL || sw_py_array_check_device(a) < 0)
        return NULL;
    PyObject *bf16 = NULL;
    if (a->dtype == SW_BFLOAT16 &&
        (bf16 = sw_py_np_dtype(st, SW_BFLOAT16)) == NULL)
        return NULL;
    PyObject *out = sw_py_np_empty(st, a->dtype, SW_PY_NDIM(a), a->shape, 1);
    if (out == NULL)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(out, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) <
        0) {
        Py_DECREF(out);
        return NULL;
    }
    int rc = SW_OK;
    if (a->nbytes > 0)
        NOGIL(rc = sw_buffer_read(a->buf, 0, view.buf, a->nbytes));
    PyBuffer_Release(&view);
    if (rc != SW_OK) {
        sw_py_raise(st, rc);
        Py_DECREF(out);
        return NULL;
    }
    if (bf16 != NULL) {
        PyObject *v = PyObject_CallMethod(out, "view", "O", bf16);
        Py_DECREF(out);
        out = v;
    }
    return out;
}

/* __array__(dtype=None, copy=None): NumPy's np.asarray(a) gets a copy. */
static PyObject *Array_array(ArrayObject *a, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"dtype", "copy"};
    PyObject *v[2];
    if (sw_py_parse_args("__array__", args, nargs, kwnames, names, 2, 2, 0,
                         v) < 0)
        return NULL;
    if (v[1] != NULL && v[1] != Py_None) {
        int copy = PyObject_IsTrue(v[1]);
        if (copy < 0)
            return NULL;
        if (!copy) {
            PyErr_SetString(PyExc_ValueError,
                            "a spillway.Array lives in device memory: a "
                            "NumPy array of it is always a copy (use "
                            "numpy.from_dlpack for a view)");
            return NULL;
        }
    }
    PyObject *out = Array_numpy(a, NULL);
    if (out == NULL || sw_py_absent(v[0]))
        return out;
    PyObject *r = PyObject_CallMethod(out, "astype", "O", v[0]);
    Py_DECREF(out);
    return r;
}

/* fill(value, *, queue=None): every element = value, on the device. */
static PyObject *Array_fill(ArrayObject *a, PyObject *const *args,
                            Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"value", "queue"};
    PyObject *v[2];
    if (sw_py_parse_args("fill", args, nargs, kwnames, names, 2, 1, 1, v) < 0)
        return NULL;
    sw_py_state *st = sw_py_type_state(Py_TYPE(a));
    if (st == NULL || sw_py_array_check_device(a) < 0)
        return NULL;
    QueueObject *q;
    sw_scalar s;
    if (sw_py_queue_arg(st, v[1], a->device, "fill", &q) < 0 ||
        sw_py_scalar_from_py(v[0], a->dtype, &s, "fill value") < 0 ||
        sw_py_fill(st, a, s, q) < 0 ||
        sw_py_sync_if_exported(st, a->device) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* prefetch(*, queue=None): sw_buffer_prefetch, the restore started early
 * (no-op when resident). */
static PyObject *Array_prefetch(ArrayObject *a, PyObject *const *args,
                                Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"queue"};
    PyObject *v[1];
    if (sw_py_parse_args("prefetch", args, nargs, kwnames, names, 1, 0, 0,
                         v) < 0)
        return NULL;
    sw_py_state *st = sw_py_type_state(Py_TYPE(a));
    if (st == NULL || sw_py_array_check_device(a) < 0)
        return NULL;
    QueueObject *q;
    if (sw_py_queue_arg(st, v[0], a->device, "prefetch", &q) < 0)
        return NULL;
    /* Making room may spill, under pressure run the collector. */
    int rc;
    NOGIL_ALLOC(rc, sw_buffer_prefetch(a->buf, q != NULL ? q->q : NULL));
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    Py_RETURN_NONE;
}

/* advise(how): sw_buffer_advise; how "cold" or "normal". */
static PyObject *Array_advise(ArrayObject *a, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"how"};
    PyObject *v[1];
    if (sw_py_parse_args("advise", args, nargs, kwnames, names, 1, 1, 1, v) <
        0)
        return NULL;
    sw_py_state *st = sw_py_type_state(Py_TYPE(a));
    if (st == NULL || sw_py_array_check_device(a) < 0)
        return NULL;
    sw_advice how;
    if (!PyUnicode_Check(v[0])) { /* None, 1, b"cold": the wrong type */
        PyErr_Format(PyExc_TypeError, "advise: how is a str, \"cold\" or "
                     "\"normal\", not %.100s", Py_TYPE(v[0])->tp_name);
        return NULL;
    }
    if (PyUnicode_CompareWithASCIIString(v[0], "cold") == 0) {
        how = SW_ADVISE_COLD;
    } else if (PyUnicode_CompareWithASCIIString(v[0], "normal") == 0) {
        how = SW_ADVISE_NORMAL;
    } else {
        PyErr_Format(PyExc_ValueError, "advise: how must be \"cold\" or "
                     "\"normal\", not %R", v[0]);
        return NULL;
    }
    int rc;
    NOGIL(rc = sw_buffer_advise(a->buf, how));
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    Py_RETURN_NONE;
}

static PyMethodDef Array_methods[] = {
    {"advise", (PyCFunction)(void (*)(void))Array_advise,
     METH_FASTCALL | METH_KEYWORDS,
     "advise(how)\n--\n\nTell spillway when the array is needed next: "
     "\"cold\" -- not soon (an activation the backward pass has consumed): "
     "under pressure it is evicted before every array that is not cold, "
     "however recently used (a written one after the cold clean copies: "
     "arrays restored once and only read since), until its next use; "
     "\"normal\" -- back "
     "in the ordinary order, least recently used first.  Nothing moves "
     "now."},
    {"prefetch", (PyCFunction)(void (*)(void))Array_prefetch,
     METH_FASTCALL | METH_KEYWORDS,
     "prefetch(*, queue=None)\n--\n\nStart bringing a spilled array back "
     "to the device without waiting: the copy runs on the device's copy "
     "queue beside the work already queued, and the next operation on "
     "this array (and everything later on queue, when given) waits for it "
     "on the device.  Call it a step ahead of the work that needs the "
     "array (the next layer's weights, the next block of a pipeline).  A "
     "no-op for a resident array; may spill others to make room."},
    {"numpy", (PyCFunction)(void (*)(void))Array_numpy, METH_NOARGS,
     "numpy()\n--\n\nA NumPy copy of the array (a host read: a spilled "
     "array is read from its host copy and stays spilled)."},
    {"fill", (PyCFunction)(void (*)(void))Array_fill,
     METH_FASTCALL | METH_KEYWORDS,
     "fill(value, *, queue=None)\n--\n\nSet every element to value, on the "
     "device (on queue, when given).  Works for every dtype: the fill "
     "kernel where the device computes with it, else a byte-pattern fill "
     "on the device's default queue."},
    {"sum", (PyCFunction)(void (*)(void))sw_py_array_sum_method,
     METH_FASTCALL | METH_KEYWORDS,
     "sum(axis=None, dtype=None, out=None, keepdims=False)\n--\n\n"
     "spillway.sum(a): the sum of all the elements, reduced on the device "
     "(numpy.sum(a) calls it; the keywords are taken at their defaults "
     "only)."},
    {"copy", (PyCFunction)(void (*)(void))sw_py_array_copy,
     METH_FASTCALL | METH_KEYWORDS,
     "copy(*, queue=None)\n--\n\nA new Array with the same contents on the "
     "same device: copied device to device (every dtype), or from the host "
     "copy when this array is spilled (it stays spilled)."},
    {"astype", (PyCFunction)(void (*)(void))sw_py_array_astype,
     METH_FASTCALL | METH_KEYWORDS,
     "astype(dtype, copy=True)\n--\n\nA new Array of dtype on the same "
     "device, converted on the host as NumPy converts (bfloat16 through "
     "float32); the same dtype is a device copy (or self with copy=False)."},
    {"__reduce_ex__", (PyCFunction)(void (*)(void))sw_py_array_reduce_ex,
     METH_O, NULL},
    {"__copy__", (PyCFunction)(void (*)(void))sw_py_array_copy_dunder,
     METH_NOARGS, NULL},
    {"__deepcopy__", (PyCFunction)(void (*)(void))sw_py_array_deepcopy,
     METH_O, NULL},
    {"reshape", (PyCFunction)(void (*)(void))sw_py_array_reshape,
     METH_VARARGS,
     "reshape(*shape)\n--\n\nA view with another shape on the same buffer "
     "(one dimension may be -1)."},
    {"__array__", (PyCFunction)(void (*)(void))Array_array,
     METH_FASTCALL | METH_KEYWORDS,
     "__array__(dtype=None, copy=None)\n--\n\nA NumPy copy."},
    {"__dlpack__", (PyCFunction)(void (*)(void))sw_py_array_dlpack,
     METH_FASTCALL | METH_KEYWORDS,
     "__dlpack__(stream=None, *, max_version=None, dl_device=None, "
     "copy=None)\n--\n\n"
     "Export through DLPack.  On a host-addressable device the consumer "
     "gets the array's memory under an exposure lease: the buffer does "
     "not spill while the consumer lives.  copy=True exports a host copy."},
    {"__dlpack_device__",
     (PyCFunction)(void (*)(void))sw_py_array_dlpack_device, METH_NOARGS,
     "__dlpack_device__()\n--\n\n(device_type, device_id) as DLPack names "
     "it: (1, 0), the CPU, for the simulated device."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Array_getset[] = {
    {"shape", (getter)Array_get_shape, NULL, "The shape, a tuple.", NULL},
    {"ndim", (getter)Array_get_ndim, NULL, "Number of dimensions.", NULL},
    {"size", (getter)Array_get_size, NULL, "Number of elements.", NULL},
    {"nbytes", (getter)Array_get_nbytes, NULL,
     "Bytes of data (in_use counts them rounded up to 512).", NULL},
    {"itemsize", (getter)Array_get_itemsize, NULL, "Bytes per element.",
     NULL},
    {"dtype", (getter)Array_get_dtype, NULL, "The element type, a "
     "numpy.dtype.", NULL},
    {"device", (getter)Array_get_device, NULL, "The Device it lives on.",
     NULL},
    {"is_spilled", (getter)Array_get_is_spilled, NULL,
     "True while the buffer is held in host memory only.", NULL},
    {"T", (getter)sw_py_array_get_T, NULL,
     "The array with its axes reversed: a view when at most one dimension "
     "is longer than 1 (the layout is the same), else a copy made through "
     "host memory (spillway arrays are contiguous).", NULL},
    {"tag", (getter)Array_get_tag, NULL,
     "The allocation's tag (its origin, named in out-of-memory reports), "
     "or None.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef Array_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(ArrayObject, weakreflist),
     READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Array_slots[] = {
    {Py_tp_doc, "An array in device memory managed by spillway (made by "
                "empty, zeros, asarray and the operations).  a[i] reads one "
                "element on the host; views (reshape, a[i] of a "
                "multi-dimensional array, a[i:j]) share the buffer."},
    {Py_tp_dealloc, Array_dealloc},
    {Py_tp_traverse, Array_traverse},
    {Py_tp_repr, Array_repr},
    {Py_tp_methods, Array_methods},
    {Py_tp_getset, Array_getset},
    {Py_tp_members, Array_members},
    {Py_mp_length, sw_py_array_length},
    {Py_mp_subscript, sw_py_array_subscript},
    {Py_mp_ass_subscript, sw_py_array_ass_subscript},
    {Py_sq_length, sw_py_array_length},
    {Py_sq_item, sw_py_array_item},
    {Py_tp_iter, sw_py_array_iter},
    {Py_tp_richcompare, sw_py_array_richcompare},
    {Py_nb_add, sw_py_array_add},
    {Py_nb_subtract, sw_py_array_sub},
    {Py_nb_multiply, sw_py_array_mul},
    {Py_nb_inplace_add, sw_py_array_iadd},
    {Py_nb_inplace_subtract, sw_py_array_isub},
    {Py_nb_inplace_multiply, sw_py_array_imul},
    {Py_nb_negative, sw_py_array_neg},
    {0, NULL},
};

PyType_Spec sw_py_array_spec = {
    .name = "spillway.Array",
    .basicsize = sizeof(ArrayObject),
    .itemsize = sizeof(Py_ssize_t),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Array_slots,
};

int sw_py_array_setup(PyObject *m, sw_py_state *st)
{
    st->array_type = sw_py_add_type(m, &sw_py_array_spec);
    if (st->array_type == NULL)
        return -1;
    /* NumPy hands a binary operation with a spillway Array back to it
     * (and np.add(x, a) refuses) instead of converting the Array on the
     * host behind the user's back: __array_ufunc__ = None.  Set in the
     * type's dict before anyone can look it up. */
    PyObject *dict = st->array_type->tp_dict;
    if (PyDict_SetItemString(dict, "__array_ufunc__", Py_None) < 0)
        return -1;
    PyType_Modified(st->array_type);
    return 0;
}
