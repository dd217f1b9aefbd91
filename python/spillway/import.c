/*
 * import.c -- spillway.from_dlpack(obj, device=None, copy=None): an Array
 * from any DLPack producer (an object with __dlpack__, or a capsule), and
 * the producers of memory imported without a copy (sw_py_extmem).
 *
 * Zero-copy only where the producer's memory truly is the target device's
 * own:
 *  - another spillway Array on that device: a new Array on the same buffer
 *    (not external: it spills with the buffer, as any view);
 *  - on CUDA and HIP, a kDLCUDA / kDLROCM tensor of the same device (the
 *    library and the frameworks share the device's primary context; Level
 *    Zero has no such shared context: a kDLOneAPI pointer of another
 *    context is copied unless it is one of this device's exports);
 *  - elsewhere, memory inside one of this device's live DLPack exports
 *    (dlpack.c keeps the list): a NumPy array made by numpy.from_dlpack(a)
 *    on the simulated device, handed back.  Any other host pointer is not
 *    the simulated device's memory (an arena of its own), and a cl_mem of
 *    another context is not usable on OpenCL: those are copied.
 * A zero-copy import wraps the memory as external (sw_buffer_wrap: never
 * spilled, never freed by spillway) and keeps the producer's tensor until
 * the last Array, view or export using it is gone and the device has
 * finished the work queued on it; then the producer's deleter runs.
 *
 * Everything else is copied: from host-readable memory (kDLCPU and the
 * pinned or managed kinds) by a host write, from the target device's own
 * kind of memory device to device, and from a device spillway does not
 * manage by asking the producer for a host copy first (dl_device=(1, 0),
 * copy=True; DLPack 1.0), which a producer may refuse: BufferError.
 *
 * The capsule is only taken (renamed "used_...") once everything about it
 * has been checked, so a refused import leaves it to its producer.
 */
#include "array.h"
#include "dlpack.h"
#include "dtype.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * The producer of imported memory
 * ---------------------------------------------------------------------- */

static void managed_delete(void *managed, int versioned)
{
    if (versioned) {
        DLManagedTensorVersioned *m = managed;
        if (m->deleter != NULL)
            m->deleter(m);
    } else {
        DLManagedTensor *m = managed;
        if (m->deleter != NULL)
            m->deleter(m);
    }
}

void sw_py_extmem_ref(sw_py_extmem *x)
{
    atomic_fetch_add(&x->refs, 1);
}

/* The buffer wrapping the memory is already released in the library, but
 * work queued on it may still run: the device finishes it (without the
 * GIL, no device lock held) before the producer may reuse the memory.
 * The deleter is the producer's: DLPack lets it run on any thread, and
 * those that touch Python objects take the GIL themselves. */
void sw_py_extmem_unref(sw_py_extmem *x)
{
    if (x == NULL || atomic_fetch_sub(&x->refs, 1) != 1)
        return;
    sw_device *dev = x->dev;
    if (sw_py_holds_gil())
        NOGIL((void)sw_device_synchronize(dev));
    else
        (void)sw_device_synchronize(dev);
    managed_delete(x->managed, x->versioned);
    free(x);
}

/* ------------------------------------------------------------------------
 * The producer's tensor
 * ---------------------------------------------------------------------- */

typedef struct {
    PyObject *capsule; /* ours (a reference) */
    void *managed;
    int versioned;
    DLTensor *t;
    int read_only;
    sw_dtype dtype;
    int ndim;
    Py_ssize_t shape[SW_PY_MAXDIMS];
    size_t nelem, nbytes;
    int contiguous;
} dl_in;

static int host_readable(int type)
{
    return type == kDLCPU || type == kDLCUDAHost || type == kDLROCMHost ||
           type == kDLCUDAManaged;
}

/* Read and check the capsule without taking it. */
static int dl_in_read(PyObject *cap, dl_in *in)
{
    if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        DLManagedTensorVersioned *m =
            PyCapsule_GetPointer(cap, "dltensor_versioned");
        if (m == NULL)
            return -1;
        if (m->version.major > DLPACK_MAJOR_VERSION) {
            PyErr_Format(PyExc_BufferError,
                         "the producer's DLPack %u.%u is newer than "
                         "spillway's %d.%d",
                         m->version.major, m->version.minor,
                         DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION);
            return -1;
        }
        in->managed = m;
        in->versioned = 1;
        in->t = &m->dl_tensor;
        in->read_only = (m->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
    } else if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
        if (m == NULL)
            return -1;
        in->managed = m;
        in->versioned = 0;
        in->t = &m->dl_tensor;
        in->read_only = 0;
    } else if (PyCapsule_IsValid(cap, "used_dltensor") ||
               PyCapsule_IsValid(cap, "used_dltensor_versioned")) {
        PyErr_SetString(PyExc_BufferError,
                        "this DLPack capsule was already consumed (a "
                        "capsule hands its tensor over once)");
        return -1;
    } else {
        PyErr_Format(PyExc_TypeError,
                     "from_dlpack() needs an object with __dlpack__ or a "
                     "DLPack capsule, not %.100s",
                     Py_TYPE(cap)->tp_name);
        return -1;
    }
    DLTensor *t = in->t;
    if (sw_py_dtype_from_dl(t->dtype.code, t->dtype.bits, t->dtype.lanes,
                            &in->dtype) < 0)
        return -1;
    if (t->ndim < 0 || t->ndim > SW_PY_MAXDIMS) {
        PyErr_Format(PyExc_ValueError,
                     "a DLPack tensor of %d dimensions: at most %d are "
                     "allowed",
                     (int)t->ndim, SW_PY_MAXDIMS);
        return -1;
    }
    in->ndim = t->ndim;
    for (int i = 0; i < in->ndim; i++) {
        if (t->shape[i] < 0 || t->shape[i] > PY_SSIZE_T_MAX) {
            PyErr_SetString(PyExc_ValueError,
                            "a DLPack tensor with a negative dimension");
            return -1;
        }
        in->shape[i] = (Py_ssize_t)t->shape[i];
    }
    if (sw_py_shape_sizes(in->shape, in->ndim, sw_py_dtypes[in->dtype].size,
                          NULL, &in->nelem, &in->nbytes) < 0)
        return -1;
    in->contiguous = 1;
    if (t->strides != NULL) {
        int64_t expect = 1;
        for (int i = in->ndim - 1; i >= 0; i--) {
            if (t->shape[i] == 1)
                continue;
            if (t->strides[i] != expect)
                in->contiguous = 0;
            expect *= t->shape[i];
        }
    }
    if (in->nelem == 0)
        in->contiguous = 1;
    if (in->nbytes > 0 && t->data == NULL) {
        PyErr_SetString(PyExc_BufferError,
                        "a DLPack tensor with data but a NULL pointer");
        return -1;
    }
    return 0;
}

/* Take the tensor: from now on its deleter is ours to call. */
static void dl_in_take(dl_in *in)
{
    (void)PyCapsule_SetName(in->capsule, in->versioned
                                             ? "used_dltensor_versioned"
                                             : "used_dltensor");
}

/* Gather a strided host tensor into dst, in C order. */
static void gather(const DLTensor *t, const dl_in *in, unsigned char *dst)
{
    size_t itemsize = sw_py_dtypes[in->dtype].size;
    const unsigned char *p =
        (const unsigned char *)t->data + t->byte_offset;
    int64_t idx[SW_PY_MAXDIMS] = {0};
    for (size_t k = 0; k < in->nelem; k++) {
        memcpy(dst + k * itemsize, p, itemsize);
        for (int i = in->ndim - 1; i >= 0; i--) {
            p += t->strides[i] * (int64_t)itemsize;
            if (++idx[i] < t->shape[i])
                break;
            p -= t->strides[i] * (int64_t)itemsize * t->shape[i];
            idx[i] = 0;
        }
    }
}

/* A copy of a host-readable tensor on d. */
static PyObject *copy_from_host(sw_py_state *st, DeviceObject *d, dl_in *in,
                                const char *tag)
{
    const DLTensor *t = in->t;
    if (in->contiguous || in->nbytes == 0) {
        const void *src =
            in->nbytes ? (const char *)t->data + t->byte_offset : NULL;
        return sw_py_array_from_host(st, d, in->dtype, in->ndim, in->shape,
                                     in->nelem, src, tag);
    }
    unsigned char *tmp = PyMem_RawMalloc(in->nbytes);
    if (tmp == NULL)
        return PyErr_NoMemory();
    gather(t, in, tmp);
    PyObject *r = sw_py_array_from_host(st, d, in->dtype, in->ndim, in->shape,
                                        in->nelem, tmp, tag);
    PyMem_RawFree(tmp);
    return r;
}

/* A device-to-device copy of memory of d (mem, in->nbytes): through a
 * temporary external buffer, then waited for, since the producer may
 * reuse the memory once its deleter has run. */
static PyObject *copy_on_device(sw_py_state *st, DeviceObject *d, dl_in *in,
                                sw_devmem mem, const char *tag)
{
    PyObject *r = sw_py_array_alloc(st, d, in->dtype, in->ndim, in->shape,
                                    in->nelem, tag);
    if (r == NULL || in->nbytes == 0)
        return r;
    sw_buffer *dst = ((ArrayObject *)r)->buf, *src = NULL;
    sw_device *dev = d->dev;
    size_t n = in->nbytes;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sw_buffer_wrap(dev, mem, n, "dlpack import", &src);
    if (rc == SW_OK)
        rc = sw_buffer_copy(dst, 0, src, 0, n);
    (void)sw_buffer_free(src);
    if (rc == SW_OK)
        rc = sw_device_synchronize(dev);
    Py_END_ALLOW_THREADS
    if (rc != SW_OK) {
        sw_py_raise(st, rc);
        Py_CLEAR(r);
    }
    return r;
}

/* The producer's memory itself, as an external buffer; the producer's
 * tensor goes with it (its deleter runs on failure). */
static PyObject *wrap_zero_copy(sw_py_state *st, DeviceObject *d, dl_in *in,
                                sw_devmem mem, const char *tag)
{
    sw_py_extmem *x = malloc(sizeof *x);
    if (x == NULL) {
        managed_delete(in->managed, in->versioned);
        return PyErr_NoMemory();
    }
    atomic_init(&x->refs, 1);
    x->managed = in->managed;
    x->versioned = in->versioned;
    sw_buffer *buf = NULL;
    /* A user of d while the wrap is made: the Array counts as one after. */
    sw_device *dev = sw_py_device_try_use(d);
    x->dev = dev;
    int rc = SW_PY_CLOSED;
    if (dev != NULL) {
        NOGIL(rc = sw_buffer_wrap(dev, mem, in->nbytes,
                                  tag ? tag : "dlpack import", &buf));
        sw_py_device_unuse(d);
    }
    if (rc != SW_OK) {
        sw_py_raise(st, rc);
        sw_py_extmem_unref(x);
        return NULL;
    }
    PyObject *r = sw_py_array_wrap(st, d, buf, in->dtype, in->ndim, in->shape,
                                   in->nelem);
    if (r == NULL) {
        sw_py_extmem_unref(x);
        return NULL;
    }
    ((ArrayObject *)r)->ext = x;
    return r;
}

/* ------------------------------------------------------------------------
 * Asking the producer
 * ---------------------------------------------------------------------- */

/* obj.__dlpack__(...), DLPack 1.0 first (max_version, dl_device, copy),
 * then the older form for producers that do not know those keywords.
 * host_copy asks for a host copy (the producer is on a device spillway
 * cannot read). */
static PyObject *ask_producer(PyObject *obj, PyObject *stream, int host_copy,
                              int copy)
{
    PyObject *meth = PyObject_GetAttrString(obj, "__dlpack__");
    if (meth == NULL)
        return NULL;
    PyObject *kw = PyDict_New();
    PyObject *args = PyTuple_New(0);
    PyObject *r = NULL;
    if (kw == NULL || args == NULL)
        goto done;
    PyObject *mv = Py_BuildValue("(ii)", DLPACK_MAJOR_VERSION,
                                 DLPACK_MINOR_VERSION);
    int bad = mv == NULL || PyDict_SetItemString(kw, "max_version", mv) < 0;
    Py_XDECREF(mv);
    if (!bad && !sw_py_absent(stream))
        bad = PyDict_SetItemString(kw, "stream", stream) < 0;
    if (!bad && host_copy) {
        PyObject *cpu = Py_BuildValue("(ii)", kDLCPU, 0);
        bad = cpu == NULL || PyDict_SetItemString(kw, "dl_device", cpu) < 0 ||
              PyDict_SetItemString(kw, "copy", Py_True) < 0;
        Py_XDECREF(cpu);
    } else if (!bad && copy == 0) {
        bad = PyDict_SetItemString(kw, "copy", Py_False) < 0;
    }
    if (bad)
        goto done;
    r = PyObject_Call(meth, args, kw);
    if (r == NULL && PyErr_ExceptionMatches(PyExc_TypeError) && !host_copy) {
        /* A producer from before DLPack 1.0's keywords. */
        PyErr_Clear();
        PyDict_Clear(kw);
        if (!sw_py_absent(stream) &&
            PyDict_SetItemString(kw, "stream", stream) < 0)
            goto done;
        r = PyObject_Call(meth, args, kw);
    }
done:
    Py_XDECREF(kw);
    Py_XDECREF(args);
    Py_DECREF(meth);
    return r;
}

/* Replace the pending exception by BufferError(msg), chained to it. */
static void buffer_error_from(PyObject *msg)
{
    PyObject *t, *v, *tb, *t2, *v2, *tb2;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (tb != NULL && v != NULL)
        PyException_SetTraceback(v, tb);
    PyErr_SetObject(PyExc_BufferError, msg);
    PyErr_Fetch(&t2, &v2, &tb2);
    PyErr_NormalizeException(&t2, &v2, &tb2);
    if (v2 != NULL && v != NULL)
        PyException_SetCause(v2, Py_NewRef(v));
    Py_XDECREF(t);
    Py_XDECREF(v);
    Py_XDECREF(tb);
    PyErr_Restore(t2, v2, tb2);
}

/* The producer's DLPack device, or (-1, 0) when it does not say. */
static int producer_device(PyObject *obj, int *type, int *id)
{
    *type = -1;
    *id = 0;
    PyObject *r = PyObject_CallMethod(obj, "__dlpack_device__", NULL);
    if (r == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear();
        return 0;
    }
    int ok = PyTuple_Check(r) && PyArg_ParseTuple(r, "ii", type, id);
    Py_DECREF(r);
    if (!ok) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError,
                        "__dlpack_device__() must return a (device_type, "
                        "device_id) tuple of integers");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * from_dlpack
 * ---------------------------------------------------------------------- */

/* Another spillway Array: its buffer again on its own device, else a copy
 * through host memory. */
static PyObject *from_array(sw_py_state *st, ArrayObject *a, DeviceObject *d,
                            int copy, const char *tag)
{
    if (sw_py_array_check_device(a) < 0)
        return NULL;
    if (d == a->device) {
        if (copy == 1)
            return sw_py_array_copy_impl(st, a, NULL, tag);
        int rc;
        NOGIL(rc = sw_buffer_retain(a->buf));
        if (rc != SW_OK)
            return sw_py_raise(st, rc);
        return sw_py_array_wrap_view(st, a, a->buf, SW_PY_NDIM(a), a->shape,
                                     a->nelem);
    }
    if (copy == 0) {
        PyErr_Format(PyExc_BufferError,
                     "from_dlpack(copy=False): the array is on %U, not %U; "
                     "moving it is a copy",
                     a->device->name, d->name);
        return NULL;
    }
    void *tmp = sw_py_array_read_all(st, a);
    if (tmp == NULL)
        return NULL;
    PyObject *r = sw_py_array_from_host(st, d, a->dtype, SW_PY_NDIM(a),
                                        a->shape, a->nelem, tmp, tag);
    PyMem_RawFree(tmp);
    return r;
}

/* The device a producer's data goes to when device= is None: a spillway
 * device of the producer's kind and number when there is one (CUDA, HIP,
 * Level Zero, OpenCL), else the default device.  New reference. */
static DeviceObject *default_target(sw_py_state *st, int type, int id)
{
    const char *kind = type == kDLCUDA     ? "cuda"
                       : type == kDLROCM   ? "hip"
                       : type == kDLOneAPI ? "ze"
                       : type == kDLOpenCL ? "opencl"
                                           : NULL;
    if (kind != NULL) {
        PyObject *spec = PyUnicode_FromFormat("%s:%d", kind, id);
        if (spec == NULL)
            return NULL;
        DeviceObject *d = sw_py_device_lookup(st, spec);
        Py_DECREF(spec);
        if (d != NULL)
            return d;
        if (!PyErr_ExceptionMatches(PyExc_ValueError))
            return NULL;
        PyErr_Clear(); /* no such device here */
    }
    return sw_py_device_lookup(st, NULL);
}

/* What to do with a checked tensor on d: its result, or NULL. */
static PyObject *import_tensor(sw_py_state *st, DeviceObject *d, dl_in *in,
                               int copy, const char *tag, int *retry)
{
    if (in->nbytes == 0) { /* nothing to share or copy, wherever it is */
        dl_in_take(in);
        managed_delete(in->managed, in->versioned);
        return sw_py_array_alloc(st, d, in->dtype, in->ndim, in->shape,
                                 in->nelem, tag);
    }
    int dtype_ = 0, did = 0;
    sw_py_dl_device_of(d, &dtype_, &did);
    const DLTensor *t = in->t;
    int mine = (int)t->device.device_type == dtype_ &&
               t->device.device_id == did && dtype_ != kDLExtDev;
    sw_devmem mem = {0, 0};
    int usable = 0; /* the target device's own memory */
    if (mine && in->contiguous) {
        if (dtype_ == kDLCUDA || dtype_ == kDLROCM) {
            /* A device address in the device's primary context, which
             * every library in the process shares: wrapped as it is. */
            mem.base = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
            usable = 1;
        } else {
            usable = sw_py_export_find(d, (uintptr_t)t->data, t->byte_offset,
                                       in->nbytes, &mem);
        }
    }
    int readable = host_readable((int)t->device.device_type);
    if (usable && copy != 1 && !in->read_only) {
        dl_in_take(in);
        return wrap_zero_copy(st, d, in, mem, tag);
    }
    if (copy == 0) {
        PyErr_Format(PyExc_BufferError,
                     "from_dlpack(copy=False): the producer's memory (DLPack "
                     "device (%d, %d)%s) is not %U's own memory%s; importing "
                     "it is a copy",
                     (int)t->device.device_type, (int)t->device.device_id,
                     in->read_only ? ", read-only" : "", d->name,
                     in->contiguous ? "" : " or is not contiguous");
        return NULL;
    }
    if (!readable && !usable) {
        if (mine || !in->contiguous) {
            /* Memory of the target's kind but not this device's (a cl_mem
             * of another context), or strided: a host copy then. */
            *retry = 1;
            return NULL;
        }
        PyErr_Format(PyExc_BufferError,
                     "the producer gave memory on DLPack device (%d, %d), "
                     "which spillway does not manage, and no host copy",
                     (int)t->device.device_type, (int)t->device.device_id);
        return NULL;
    }
    dl_in_take(in);
    PyObject *r = readable ? copy_from_host(st, d, in, tag)
                           : copy_on_device(st, d, in, mem, tag);
    managed_delete(in->managed, in->versioned);
    return r;
}

PyObject *sw_py_from_dlpack(sw_py_state *st, PyObject *obj, PyObject *device,
                            int copy, const char *tag)
{
    if (Py_IS_TYPE(obj, st->array_type)) {
        ArrayObject *a = (ArrayObject *)obj;
        DeviceObject *d = sw_py_absent(device)
                              ? (DeviceObject *)Py_NewRef(a->device)
                              : sw_py_resolve_device(st, device);
        if (d == NULL)
            return NULL;
        PyObject *r = from_array(st, a, d, copy, tag);
        Py_DECREF(d);
        return r;
    }
    int is_capsule = PyCapsule_CheckExact(obj);
    int ptype = -1, pid = 0;
    if (is_capsule) {
        /* A capsule says where its tensor is (and whether it is usable at
         * all) before anything is chosen. */
        dl_in peek;
        memset(&peek, 0, sizeof peek);
        int rc;
        Py_BEGIN_CRITICAL_SECTION(obj); /* not consumed meanwhile */
        rc = dl_in_read(obj, &peek);
        if (rc == 0) {
            ptype = (int)peek.t->device.device_type;
            pid = (int)peek.t->device.device_id;
        }
        Py_END_CRITICAL_SECTION();
        if (rc < 0)
            return NULL;
    } else if (!PyObject_HasAttrString(obj, "__dlpack__")) {
        PyErr_Format(PyExc_TypeError,
                     "from_dlpack() needs an object with __dlpack__ (a "
                     "DLPack producer) or a DLPack capsule, not %.100s",
                     Py_TYPE(obj)->tp_name);
        return NULL;
    } else if (producer_device(obj, &ptype, &pid) < 0) {
        return NULL;
    }
    DeviceObject *d = sw_py_absent(device) ? default_target(st, ptype, pid)
                                           : sw_py_resolve_device(st, device);
    if (d == NULL)
        return NULL;
    int dtype_ = 0, did = 0;
    sw_py_dl_device_of(d, &dtype_, &did);
    int mine = ptype == dtype_ && pid == did;
    /* A producer on a device spillway cannot read directly is asked for a
     * host copy; on CUDA the consumer stream is the legacy default one. */
    int host_copy = !is_capsule && ptype >= 0 && !host_readable(ptype) &&
                    !mine;
    PyObject *stream = mine && ptype == kDLCUDA ? PyLong_FromLong(1)
                                                : Py_NewRef(Py_None);
    PyObject *r = NULL;
    for (int attempt = 0; attempt < 2 && stream != NULL; attempt++) {
        if (host_copy && copy == 0) {
            PyErr_Format(PyExc_BufferError,
                         "from_dlpack(copy=False): the producer is on DLPack "
                         "device (%d, %d), not %U: moving it is a copy",
                         ptype, pid, d->name);
            break;
        }
        PyObject *cap = is_capsule ? Py_NewRef(obj)
                                   : ask_producer(obj, host_copy ? Py_None
                                                                 : stream,
                                                  host_copy, copy);
        if (cap == NULL) {
            if (host_copy) {
                PyObject *msg = PyUnicode_FromFormat(
                    "the producer is on DLPack device (%d, %d), which "
                    "spillway does not manage, and gave no host copy "
                    "(dl_device=(1, 0), copy=True)",
                    ptype, pid);
                if (msg != NULL) {
                    buffer_error_from(msg);
                    Py_DECREF(msg);
                }
            }
            break;
        }
        dl_in in;
        memset(&in, 0, sizeof in);
        in.capsule = cap;
        int retry = 0;
        /* Read and taken as one step: a capsule passed to two threads'
         * from_dlpack at once is consumed by one, and the other reads
         * "already consumed", never a tensor the first has deleted.  (The
         * section may pause once the tensor is taken: the copies run
         * with the thread state released.) */
        Py_BEGIN_CRITICAL_SECTION(cap);
        if (dl_in_read(cap, &in) == 0)
            r = import_tensor(st, d, &in, copy, tag, &retry);
        Py_END_CRITICAL_SECTION();
        /* Untaken, its destructor hands the tensor back to its producer;
         * taken, it does nothing (the tensor is ours, or deleted). */
        Py_DECREF(cap);
        if (r != NULL || !retry || is_capsule || host_copy) {
            if (retry && r == NULL)
                PyErr_Format(PyExc_BufferError,
                             "the DLPack tensor on %U is neither memory "
                             "spillway can use there nor copyable%s",
                             d->name, is_capsule ? " (pass the producer, "
                                                   "not a capsule, for a "
                                                   "host copy)"
                                                 : "");
            break;
        }
        host_copy = 1;
    }
    Py_XDECREF(stream);
    Py_DECREF(d);
    return r;
}

static PyObject *mod_from_dlpack(PyObject *m, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"x", "device", "copy", "tag"};
    PyObject *v[4];
    if (sw_py_parse_args("from_dlpack", args, nargs, kwnames, names, 4, 1, 1,
                         v) < 0)
        return NULL;
    sw_py_state *st = sw_py_module_state(m);
    int copy = -1;
    const char *tag;
    if (!sw_py_absent(v[2]) && (copy = PyObject_IsTrue(v[2])) < 0)
        return NULL;
    if (sw_py_parse_tag(v[3], &tag) < 0)
        return NULL;
    return sw_py_from_dlpack(st, v[0], v[1], copy, tag);
}

static PyMethodDef import_methods[] = {
    FASTKW("from_dlpack", mod_from_dlpack,
           "from_dlpack(x, /, *, device=None, copy=None, tag=None)\n--\n\n"
           "An Array from a DLPack producer (an object with __dlpack__, or a "
           "capsule).  Without a copy where the memory is the device's own "
           "(another spillway Array there, a CUDA tensor of the same "
           "device, an export of this device handed back): it is then "
           "external memory, never spilled, and the producer is kept until "
           "nothing uses it.  Otherwise a copy.  copy=True always copies; "
           "copy=False refuses (BufferError) when a copy would be needed.  "
           "device=None: the producer's device when spillway has it, else "
           "the default device."),
    {NULL, NULL, 0, NULL},
};

int sw_py_import_setup(PyObject *m, sw_py_state *st)
{
    (void)st;
    return PyModule_AddFunctions(m, import_methods);
}
