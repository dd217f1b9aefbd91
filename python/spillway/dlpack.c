/*
 * dlpack.c -- DLPack export: Array.__dlpack__ and __dlpack_device__.
 *
 * __dlpack__ hands out the array's memory itself, under an exposure lease
 * (sw_buffer_expose), on every device, as the DLPack device it is: the
 * simulated device's host-addressable memory as kDLCPU (NumPy imports
 * that, as is host:0's), CUDA memory as kDLCUDA, HIP memory as kDLROCM
 * and Level Zero memory as kDLOneAPI (device addresses: USM device
 * allocations on ze), OpenCL memory as kDLOpenCL (data is the cl_mem,
 * byte_offset the offset in it).  While the
 * consumer lives the buffer is never spilled and its memory stays
 * allocated even if the Array goes; the consumer's deleter releases the
 * lease, after which the buffer is spillable again.  The deleter may run
 * on any thread, with or without the GIL: it touches no Python object (the
 * device's context is reference-counted and outlives the Device).
 *
 * copy=True exports a copy instead: a host copy for a CPU consumer, a
 * device copy (under a lease of its own) for a consumer on the device;
 * dl_device=(1, 0) asks any device for a host copy.
 *
 * Live zero-copy exports are listed in the device's context (device.h),
 * so that import.c can recognise this device's own memory handed back.
 *
 * __dlpack__ runs in five steps, each its own function: parse the
 * arguments, plan (zero-copy, a copy, or why neither), acquire the memory
 * (the lease, or the copy), fill in the tensor, and wrap it in the capsule
 * that hands it over.
 */
#include "array.h"
#include "dlpack.h"
#include "dtype.h"

#include "core/native.h"

#include <stdlib.h>
#include <string.h>

typedef struct export_ctx {
    union {
        DLManagedTensor legacy;
        DLManagedTensorVersioned v1;
    } mt;
    sw_py_range range; /* device memory exports: in ctx->live */
    sw_lease *lease;   /* device memory exports */
    void *host;        /* host copies */
    sw_py_devctx *ctx; /* device memory exports */
    int counted;       /* the array's own memory: counts in ctx->exports */
    sw_py_extmem *ext; /* the array's memory was imported: its producer */
    int64_t dims[2 * SW_PY_MAXDIMS]; /* shape, then strides */
} export_ctx;

/* Any thread, with or without the GIL.  Off the list first, so that no
 * import takes the range for live once the lease is gone. */
static void export_free(export_ctx *e)
{
    if (e->ctx != NULL) {
        /* Linked or not, read under the lock: a neighbour's unlinking
         * writes this range's links. */
        pthread_mutex_lock(&e->ctx->mu);
        if (e->range.next != NULL) {
            e->range.prev->next = e->range.next;
            e->range.next->prev = e->range.prev;
        }
        pthread_mutex_unlock(&e->ctx->mu);
    }
    if (e->lease != NULL) {
        sw_lease *l = e->lease;
        int rc;
        e->lease = NULL;
        if (sw_py_holds_gil())
            NOGIL(rc = sw_lease_release(l));
        else
            rc = sw_lease_release(l);
        if (rc == SW_OK)
            sw_py_thread.released++;
    }
    free(e->host);
    sw_py_extmem_unref(e->ext);
    if (e->ctx != NULL) {
        if (e->counted)
            atomic_fetch_sub(&e->ctx->exports, 1);
        sw_py_ctx_unref(e->ctx);
    }
    free(e);
}

static void dl_delete_legacy(DLManagedTensor *m)
{
    export_free((export_ctx *)m->manager_ctx);
}

static void dl_delete_v1(DLManagedTensorVersioned *m)
{
    export_free((export_ctx *)m->manager_ctx);
}

/* Capsule destructors: a consumer that took the tensor renamed the
 * capsule and calls the deleter itself. */
static void capsule_legacy_dtor(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
        if (m != NULL && m->deleter != NULL)
            m->deleter(m);
    }
}

static void capsule_v1_dtor(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        DLManagedTensorVersioned *m =
            PyCapsule_GetPointer(cap, "dltensor_versioned");
        if (m != NULL && m->deleter != NULL)
            m->deleter(m);
    }
}

/* Whether the device's memory is a host address (the simulated device):
 * only then can NumPy import an export. */
static int host_addressable(DeviceObject *d)
{
    /* Asked at open (device.c), with the thread state released: asking
     * here, with it held, took the device lock while attached -- a
     * deadlock with a thread that holds the lock and waits for the
     * interpreter (the memory history's callback). */
    return d->host_addressable;
}

/* The DLPack device of a spillway device: host-addressable memory is
 * kDLCPU (NumPy imports only that). */
static DLDevice dl_device_of(DeviceObject *d)
{
    DLDevice dev = {kDLExtDev, 0};
    const char *name = PyUnicode_AsUTF8(d->name);
    if (name == NULL) {
        PyErr_Clear();
        return dev;
    }
    const char *colon = strchr(name, ':');
    int32_t idx = colon ? (int32_t)atoi(colon + 1) : 0;
    if (host_addressable(d)) {
        dev.device_type = kDLCPU;
        dev.device_id = 0;
    } else if (strncmp(name, "cuda:", 5) == 0) {
        dev.device_type = kDLCUDA;
        dev.device_id = idx;
    } else if (strncmp(name, "hip:", 4) == 0) {
        dev.device_type = kDLROCM;
        dev.device_id = idx;
    } else if (strncmp(name, "ze:", 3) == 0) {
        dev.device_type = kDLOneAPI;
        dev.device_id = idx;
    } else if (strncmp(name, "opencl:", 7) == 0) {
        dev.device_type = kDLOpenCL;
        dev.device_id = idx;
    } else {
        dev.device_id = idx;
    }
    return dev;
}

void sw_py_dl_device_of(DeviceObject *d, int *type, int *id)
{
    DLDevice dev = dl_device_of(d);
    *type = (int)dev.device_type;
    *id = (int)dev.device_id;
}

int sw_py_dl_linear(DeviceObject *d)
{
    DLDevice dev = dl_device_of(d);
    return dev.device_type == kDLCPU || dev.device_type == kDLCUDA ||
           dev.device_type == kDLROCM || dev.device_type == kDLOneAPI;
}

int sw_py_export_find(DeviceObject *d, uintptr_t data, uint64_t byte_offset,
                      size_t n, sw_devmem *mem)
{
    if (d->ctx == NULL)
        return 0;
    int linear = sw_py_dl_linear(d), found = 0;
    uintptr_t addr = data + (uintptr_t)byte_offset;
    pthread_mutex_lock(&d->ctx->mu);
    for (sw_py_range *r = d->ctx->live.next; r != &d->ctx->live;
         r = r->next) {
        if (linear) {
            uintptr_t lo = r->mem.base + r->mem.offset;
            found = addr >= lo && addr - lo <= r->size &&
                    n <= r->size - (addr - lo);
            mem->base = r->mem.base;
            mem->offset = addr - r->mem.base;
        } else {
            found = data == r->mem.base && byte_offset >= r->mem.offset &&
                    byte_offset - r->mem.offset <= r->size &&
                    n <= r->size - (byte_offset - r->mem.offset);
            mem->base = data;
            mem->offset = (size_t)byte_offset;
        }
        if (found)
            break;
    }
    pthread_mutex_unlock(&d->ctx->mu);
    return found;
}

PyObject *sw_py_array_dlpack_device(ArrayObject *a, PyObject *unused)
{
    DLDevice dev = dl_device_of(a->device);
    return Py_BuildValue("(ii)", (int)dev.device_type, (int)dev.device_id);
}

/* ------------------------------------------------------------------------
 * __dlpack__(stream=None, *, max_version=None, dl_device=None, copy=None)
 * ---------------------------------------------------------------------- */

/* What the consumer asked for. */
typedef struct {
    /* stream=: absent (None), or the consumer's stream (CUDA, HIP: its
     * handle; 1 and 2 the legacy and per-thread default streams; -1: no
     * synchronization wanted). */
    int has_stream;
    long long stream;
    int versioned;   /* max_version >= (1, 0): DLManagedTensorVersioned */
    int copy;        /* -1 (None): copy only if needed; 0 never; 1 always */
    DLDevice own;    /* the array's device, as DLPack names it */
    DLDevice target; /* dl_device=, else own */
} dl_request;

/* How: the array's own memory under a lease; a host copy; a device copy
 * under a lease of its own. */
enum { DL_OWN, DL_HOST, DL_DEVCOPY };

/* stream= as the protocol has it: None for CPU consumers; on CUDA an
 * integer, not 0 (ambiguous: the legacy or the per-thread default stream),
 * -1 for "no synchronization".  An export makes the data ready for the
 * consumer: a consumer stream of CUDA or HIP waits, on the device, for the
 * work queued on the buffer (order_stream_nogil); otherwise the device is
 * synchronized. */
static int dl_stream_ok(PyObject *stream, dl_request *req)
{
    req->has_stream = 0;
    req->stream = 0;
    if (sw_py_absent(stream))
        return 0;
    if (req->target.device_type == kDLCPU) {
        PyErr_SetString(PyExc_BufferError,
                        "a CPU consumer passes stream=None (DLPack has no "
                        "streams on the CPU)");
        return -1;
    }
    if (!PyLong_Check(stream)) {
        PyErr_Format(PyExc_TypeError,
                     "stream must be an integer or None, not %.100s",
                     Py_TYPE(stream)->tp_name);
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(stream, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (req->target.device_type == kDLCUDA && v == 0 && overflow == 0) {
        PyErr_SetString(PyExc_BufferError,
                        "stream=0 is ambiguous on CUDA (DLPack): pass 1 for "
                        "the legacy default stream, 2 for the per-thread "
                        "one, or the stream's handle");
        return -1;
    }
    if (overflow == 0) {
        req->has_stream = 1;
        req->stream = v;
    }
    return 0;
}

/* Whether the consumer's stream is one spillway can order after the
 * buffer's work on the device: a real stream of CUDA or HIP (not the
 * legacy or per-thread default, 1 and 2, which are no stream objects). */
static int dl_stream_orderable(const dl_request *req)
{
    return req->has_stream && req->stream > 2 &&
           (req->target.device_type == kDLCUDA ||
            req->target.device_type == kDLROCM);
}

/* The consumer's stream waits, on the device, for the work queued on buf
 * so far -- on the default queue and on the queues that used it -- instead
 * of the host waiting for the whole device: the stream adopted as a queue
 * (sw_queue_wrap_native; a stream of spillway's own, Queue.native, is that
 * queue), the default queue ordered after the others that used buf (a pin
 * on it), the stream after the default queue (a pin on the stream), both
 * pins ended at once (the lease keeps buf in place).  Without the GIL. */
static int order_stream_nogil(sw_device *dev, sw_buffer *buf,
                              long long stream)
{
    sw_queue *sq = NULL;
    int rc = sw__queue_wrap_native_or_own(dev, (uintptr_t)stream, &sq);
    if (rc != SW_OK)
        return rc;
    sw_devmem p;
    rc = sw_launch_begin(dev, &buf, 1, &p);
    if (rc == SW_OK) {
        rc = sw_launch_begin_q(sq, &buf, 1, &p);
        if (rc == SW_OK)
            rc = sw_launch_end_q(sq, &buf, 1);
        int end = sw_launch_end(dev, &buf, 1);
        if (rc == SW_OK)
            rc = end;
    }
    int rel = sw_queue_release(sq);
    return rc != SW_OK ? rc : rel;
}

/* 1. Parse: the arguments, checked. */
static int dl_parse(ArrayObject *a, PyObject *const *args, Py_ssize_t nargs,
                    PyObject *kwnames, dl_request *req)
{
    static const char *const names[] = {"stream", "max_version", "dl_device",
                                        "copy"};
    PyObject *v[4];
    if (sw_py_parse_args("__dlpack__", args, nargs, kwnames, names, 4, 1, 0,
                         v) < 0)
        return -1;
    if (sw_py_array_check_device(a) < 0)
        return -1;
    req->versioned = 0;
    if (!sw_py_absent(v[1])) {
        long major = -1;
        if (PyTuple_Check(v[1]) && PyTuple_GET_SIZE(v[1]) == 2)
            major = PyLong_AsLong(PyTuple_GET_ITEM(v[1], 0));
        if (major == -1 && PyErr_Occurred())
            return -1;
        if (major < 0) {
            PyErr_SetString(PyExc_TypeError,
                            "max_version must be a (major, minor) tuple");
            return -1;
        }
        req->versioned = major >= 1;
    }
    req->copy = -1;
    if (!sw_py_absent(v[3])) {
        req->copy = PyObject_IsTrue(v[3]);
        if (req->copy < 0)
            return -1;
    }
    req->own = dl_device_of(a->device);
    req->target = req->own;
    if (!sw_py_absent(v[2])) {
        int t = 0, id = 0;
        if (!PyTuple_Check(v[2]) ||
            !PyArg_ParseTuple(v[2], "ii", &t, &id)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "dl_device must be a (device_type, device_id) "
                         "tuple of integers, not %R",
                         v[2]);
            return -1;
        }
        req->target.device_type = (DLDeviceType)t;
        req->target.device_id = id;
    }
    return dl_stream_ok(v[0], req);
}

/* 2. Plan: DL_OWN, DL_HOST or DL_DEVCOPY; -1 with BufferError when the
 * request can be met by none. */
static int dl_plan(ArrayObject *a, const dl_request *req, int *how)
{
    int same = req->target.device_type == req->own.device_type &&
               req->target.device_id == req->own.device_id;
    int to_cpu = req->target.device_type == kDLCPU &&
                 req->target.device_id == 0;
    if (same && req->copy == 1) {
        *how = req->own.device_type == kDLCPU ? DL_HOST : DL_DEVCOPY;
    } else if (same && req->own.device_type != kDLExtDev) {
        *how = DL_OWN;
    } else if (to_cpu && req->copy != 0) {
        *how = DL_HOST;
    } else {
        PyErr_Format(PyExc_BufferError,
                     "cannot export an array on %U to DLPack device (%d, %d)"
                     "%s: spillway exports the device's own memory (DLPack "
                     "device (%d, %d)), or a host copy (copy=True, "
                     "dl_device=(1, 0))",
                     a->device->name, (int)req->target.device_type,
                     (int)req->target.device_id,
                     req->copy == 0 ? " without a copy" : "",
                     (int)req->own.device_type, (int)req->own.device_id);
        return -1;
    }
    return 0;
}

/* Lease buf's memory (restoring it if spilled), then make the queued work
 * on it ready for the consumer: its stream ordered after it on the device
 * where it can be, nothing for stream=-1, else the device synchronized;
 * without the GIL. */
static int lease_nogil(sw_buffer *buf, sw_device *dev, const dl_request *req,
                       sw_devmem *mem, sw_lease **lease)
{
    int rc = sw_buffer_expose(buf, mem, lease);
    if (rc == SW_OK) {
        if (req->has_stream && req->stream == -1 &&
            req->target.device_type != kDLCPU)
            rc = SW_OK; /* the consumer synchronizes itself */
        else if (dl_stream_orderable(req))
            rc = order_stream_nogil(dev, buf, req->stream);
        else
            rc = sw_device_synchronize(dev);
        if (rc != SW_OK) {
            /* A successful release leaves the synchronize's message. */
            (void)sw_lease_release(*lease);
            *lease = NULL;
        }
    }
    return rc;
}

/* A device copy of a, leased: the lease alone keeps its memory. */
static int devcopy_nogil(ArrayObject *a, sw_device *dev,
                         const dl_request *req, sw_devmem *mem,
                         sw_lease **lease)
{
    sw_buffer *c = NULL;
    int rc = sw_buffer_alloc(dev, a->nbytes, "dlpack copy", &c);
    if (rc == SW_OK && a->nbytes > 0)
        rc = sw_buffer_copy(c, 0, a->buf, 0, a->nbytes);
    if (rc == SW_OK)
        rc = lease_nogil(c, dev, req, mem, lease);
    /* The lease alone holds the memory now.  (A successful free leaves
     * the thread's message of a failure above in place.) */
    (void)sw_buffer_free(c);
    return rc;
}

/* 3. Acquire the memory, in a new export that owns it: a host copy, or
 * device memory under a lease (the buffer is restored if spilled and stays
 * put), taken first, then the queued work on it waited for.  NULL with an
 * exception set. */
static export_ctx *dl_acquire(sw_py_state *st, ArrayObject *a, int how,
                              const dl_request *req)
{
    export_ctx *e = calloc(1, sizeof *e);
    if (e == NULL)
        return (export_ctx *)PyErr_NoMemory();
    int rc = SW_OK;
    if (how == DL_HOST) {
        e->host = malloc(a->nbytes ? a->nbytes : 1);
        if (e->host == NULL) {
            free(e);
            return (export_ctx *)PyErr_NoMemory();
        }
        if (a->nbytes > 0)
            NOGIL(rc = sw_buffer_read(a->buf, 0, e->host, a->nbytes));
    } else {
        sw_devmem mem = {0, 0};
        sw_lease *lease = NULL;
        sw_device *dev = a->device->dev;
        if (how == DL_OWN)
            NOGIL_ALLOC(rc, lease_nogil(a->buf, dev, req, &mem, &lease));
        else
            NOGIL_ALLOC(rc, devcopy_nogil(a, dev, req, &mem, &lease));
        e->lease = lease;
        e->range.mem = mem;
        e->range.size = a->nbytes;
    }
    if (rc != SW_OK) {
        sw_py_raise(st, rc);
        export_free(e);
        return NULL;
    }
    if (how != DL_HOST) {
        sw_py_devctx *c = a->device->ctx;
        e->ctx = c;
        sw_py_ctx_ref(c);
        pthread_mutex_lock(&c->mu);
        e->range.next = c->live.next;
        e->range.prev = &c->live;
        c->live.next->prev = &e->range;
        c->live.next = &e->range;
        pthread_mutex_unlock(&c->mu);
        if (how == DL_OWN) {
            e->counted = 1;
            atomic_fetch_add(&c->exports, 1);
            if (a->ext != NULL) { /* imported memory: keep its producer */
                sw_py_extmem_ref(a->ext);
                e->ext = a->ext;
            }
        }
    }
    return e;
}

/* 4. Fill in the tensor: C-contiguous, shape and strides kept in e.  Linear
 * memory (host, CUDA) is an address; OpenCL's is the cl_mem and an offset
 * in it. */
static void dl_fill(ArrayObject *a, export_ctx *e, int versioned,
                    DLDevice device)
{
    DLTensor *t = versioned ? &e->mt.v1.dl_tensor : &e->mt.legacy.dl_tensor;
    int ndim = SW_PY_NDIM(a);
    int64_t *shape = e->dims, *strides = e->dims + SW_PY_MAXDIMS;
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        shape[i] = (int64_t)a->shape[i];
        strides[i] = stride;
        stride *= a->shape[i] > 0 ? (int64_t)a->shape[i] : 1;
    }
    if (e->host != NULL) {
        t->data = e->host;
        t->byte_offset = 0;
    } else if (device.device_type == kDLOpenCL) {
        t->data = (void *)e->range.mem.base;
        t->byte_offset = e->range.mem.offset;
    } else {
        t->data = (void *)(e->range.mem.base + e->range.mem.offset);
        t->byte_offset = 0;
    }
    t->device = device;
    t->ndim = ndim;
    t->dtype.code = sw_py_dtypes[a->dtype].dl_code;
    t->dtype.bits = (uint8_t)(8 * sw_py_dtypes[a->dtype].size);
    t->dtype.lanes = 1;
    t->shape = shape;
    t->strides = strides;
}

/* 5. The capsule that hands e over (it deletes an export nobody took);
 * on failure e is freed. */
static PyObject *dl_capsule(export_ctx *e, int versioned, int copied,
                            int readonly)
{
    PyObject *cap;
    if (versioned) {
        e->mt.v1.version.major = DLPACK_MAJOR_VERSION;
        e->mt.v1.version.minor = DLPACK_MINOR_VERSION;
        e->mt.v1.manager_ctx = e;
        e->mt.v1.deleter = dl_delete_v1;
        e->mt.v1.flags = (copied ? DLPACK_FLAG_BITMASK_IS_COPIED : 0) |
                         (readonly ? DLPACK_FLAG_BITMASK_READ_ONLY : 0);
        cap = PyCapsule_New(&e->mt.v1, "dltensor_versioned", capsule_v1_dtor);
    } else {
        e->mt.legacy.manager_ctx = e;
        e->mt.legacy.deleter = dl_delete_legacy;
        cap = PyCapsule_New(&e->mt.legacy, "dltensor", capsule_legacy_dtor);
    }
    if (cap == NULL)
        export_free(e);
    return cap;
}

PyObject *sw_py_array_dlpack(ArrayObject *a, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kwnames)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(a));
    dl_request req;
    int how;
    if (st == NULL || dl_parse(a, args, nargs, kwnames, &req) < 0 ||
        dl_plan(a, &req, &how) < 0)
        return NULL;
    export_ctx *e = dl_acquire(st, a, how, &req);
    if (e == NULL)
        return NULL;
    dl_fill(a, e, req.versioned,
            how == DL_HOST ? (DLDevice){kDLCPU, 0} : req.own);
    return dl_capsule(e, req.versioned, how != DL_OWN, 0);
}

/* A pinned view's export (pinned.c): its memory as it is, with nothing to
 * release (the block's pin holds it), on its own device only. */
PyObject *sw_py_dlpack_pinned(ArrayObject *a, sw_devmem mem, sw_queue *q,
                              int readonly, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(a));
    dl_request req;
    if (st == NULL || dl_parse(a, args, nargs, kwnames, &req) < 0)
        return NULL;
    if (req.copy == 1 || req.target.device_type != req.own.device_type ||
        req.target.device_id != req.own.device_id) {
        PyErr_Format(PyExc_BufferError,
                     "a pinned view exports the pinned memory itself, on "
                     "its device (DLPack device (%d, %d)): for a copy, or "
                     "another device, export the Array",
                     (int)req.own.device_type, (int)req.own.device_id);
        return NULL;
    }
    /* A consumer on another stream than the pin's queue: that queue's
     * work (yours, inside the block) is waited for first.  The host's pin
     * waited for everything already. */
    if (q != NULL && dl_stream_orderable(&req)) {
        uintptr_t h = 0;
        int rc;
        NOGIL(rc = sw_queue_native(q, &h));
        if (rc == SW_OK && (long long)h != req.stream)
            NOGIL(rc = sw_queue_synchronize(q));
        if (rc != SW_OK)
            return sw_py_raise(st, rc);
    }
    export_ctx *e = calloc(1, sizeof *e);
    if (e == NULL)
        return PyErr_NoMemory();
    e->range.mem = mem;
    e->range.size = a->nbytes;
    dl_fill(a, e, req.versioned, req.own);
    /* A view pinned for reading says so (DLPack 1.0's flag): its clean
     * copy stays clean on that promise. */
    return dl_capsule(e, req.versioned, 0, readonly);
}
