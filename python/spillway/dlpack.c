/*
 * dlpack.c -- DLPack export: Array.__dlpack__ and __dlpack_device__.
 *
 * On a device whose memory the host can address (the simulated device),
 * __dlpack__ hands out the array's memory itself, under an exposure lease
 * (sw_buffer_expose): while the consumer (e.g. the NumPy array made by
 * numpy.from_dlpack) lives, the buffer is never spilled and its memory
 * stays allocated even if the Array goes; the consumer's deleter releases
 * the lease, after which the buffer is spillable again.  The deleter may
 * run on any thread, with or without the GIL: it touches no Python object
 * (the device's context is reference-counted and outlives the Device).
 * With copy=True, or to the CPU from a device the host cannot address,
 * the export is a host copy instead.
 *
 * __dlpack__ runs in five steps, each its own function: parse the
 * arguments, plan (zero-copy, a host copy, or why neither), acquire the
 * memory (the lease, or the copy), fill in the tensor, and wrap it in the
 * capsule that hands it over.
 */
#include "array.h"
#include "dlpack.h"
#include "dtype.h"

#include <stdlib.h>
#include <string.h>

typedef struct export_ctx {
    union {
        DLManagedTensor legacy;
        DLManagedTensorVersioned v1;
    } mt;
    sw_lease *lease;   /* zero-copy exports */
    void *host;        /* copies */
    sw_py_devctx *ctx; /* zero-copy exports: counts in ctx->exports */
    int64_t dims[2 * SW_PY_MAXDIMS]; /* shape, then strides */
} export_ctx;

/* Whether this thread holds the GIL (PyGILState_Check answers 1 whenever
 * subinterpreters exist, which would be fatal here). */
static int holds_gil(void)
{
    if (!Py_IsInitialized())
        return 0;
    PyThreadState *mine = PyGILState_GetThisThreadState();
#if PY_VERSION_HEX >= 0x030D0000
    PyThreadState *cur = PyThreadState_GetUnchecked();
#else
    PyThreadState *cur = _PyThreadState_UncheckedGet();
#endif
    return mine != NULL && mine == cur;
}

static void export_free(export_ctx *e)
{
    if (e->lease != NULL) {
        sw_lease *l = e->lease;
        int rc;
        e->lease = NULL;
        if (holds_gil())
            NOGIL(rc = sw_lease_release(l));
        else
            rc = sw_lease_release(l);
        if (rc == SW_OK)
            sw_py_thread.released++;
    }
    free(e->host);
    if (e->ctx != NULL) {
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
 * only then can NumPy import an export.  A quick query of the core, which
 * takes the device lock briefly and never waits for the device. */
static int host_addressable(DeviceObject *d)
{
    int yes = 0;
    if (d->dev == NULL || sw_device_host_addressable(d->dev, &yes) != SW_OK)
        return 0;
    return yes;
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
    } else if (strncmp(name, "opencl:", 7) == 0) {
        dev.device_type = kDLOpenCL;
        dev.device_id = idx;
    } else {
        dev.device_id = idx;
    }
    return dev;
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
    int versioned;   /* max_version >= (1, 0): DLManagedTensorVersioned */
    int copy;        /* -1 (None): copy only if needed; 0 never; 1 always */
    DLDevice own;    /* the array's device, as DLPack names it */
    DLDevice target; /* dl_device=, else own */
} dl_request;

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
    if (!sw_py_absent(v[0])) {
        PyErr_SetString(PyExc_BufferError,
                        "spillway exports host-addressable memory as a CPU "
                        "tensor: stream must be None");
        return -1;
    }
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
    return 0;
}

/* 2. Plan: *do_copy is 0 for the array's own memory, 1 for a host copy;
 * -1 with BufferError when the request can be met by neither. */
static int dl_plan(ArrayObject *a, const dl_request *req, int *do_copy)
{
    int addressable = host_addressable(a->device);
    int same = req->target.device_type == req->own.device_type &&
               req->target.device_id == req->own.device_id;
    int to_cpu = req->target.device_type == kDLCPU &&
                 req->target.device_id == 0;
    if (same && addressable) {
        *do_copy = req->copy == 1;
    } else if (to_cpu && req->copy != 0) {
        *do_copy = 1;
    } else {
        PyErr_Format(PyExc_BufferError,
                     "cannot export an array on %U to DLPack device (%d, %d)"
                     "%s: spillway exports host-addressable memory, or a "
                     "host copy (copy=True, dl_device=(1, 0))",
                     a->device->name, (int)req->target.device_type,
                     (int)req->target.device_id,
                     req->copy == 0 ? " without a copy" : "");
        return -1;
    }
    return 0;
}

/* 3. Acquire the memory, in a new export that owns it: a host copy, or the
 * array's memory under a lease (the buffer is restored if spilled and
 * stays put), taken first, then the queued work on it waited for.  *data:
 * the tensor's data.  NULL with an exception set. */
static export_ctx *dl_acquire(sw_py_state *st, ArrayObject *a, int do_copy,
                              void **data)
{
    export_ctx *e = calloc(1, sizeof *e);
    if (e == NULL)
        return (export_ctx *)PyErr_NoMemory();
    int rc = SW_OK;
    if (do_copy) {
        e->host = malloc(a->nbytes ? a->nbytes : 1);
        if (e->host == NULL) {
            free(e);
            return (export_ctx *)PyErr_NoMemory();
        }
        if (a->nbytes > 0)
            NOGIL(rc = sw_buffer_read(a->buf, 0, e->host, a->nbytes));
        *data = e->host;
    } else {
        sw_devmem mem = {0, 0};
        sw_lease *lease = NULL;
        sw_device *dev = a->device->dev;
        Py_BEGIN_ALLOW_THREADS
        rc = sw_buffer_expose(a->buf, &mem, &lease);
        if (rc == SW_OK) {
            rc = sw_device_synchronize(dev);
            if (rc != SW_OK) {
                /* A successful release leaves the synchronize's message. */
                (void)sw_lease_release(lease);
                lease = NULL;
            }
        }
        Py_END_ALLOW_THREADS
        e->lease = lease;
        *data = (void *)(mem.base + mem.offset);
    }
    if (rc != SW_OK) {
        sw_py_raise(st, rc);
        export_free(e);
        return NULL;
    }
    if (!do_copy) {
        e->ctx = a->device->ctx;
        sw_py_ctx_ref(e->ctx);
        atomic_fetch_add(&e->ctx->exports, 1);
    }
    return e;
}

/* 4. Fill in the tensor: C-contiguous, shape and strides kept in e. */
static void dl_fill(ArrayObject *a, export_ctx *e, int versioned, void *data,
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
    t->data = data;
    t->device = device;
    t->ndim = ndim;
    t->dtype.code = sw_py_dtypes[a->dtype].dl_code;
    t->dtype.bits = (uint8_t)(8 * sw_py_dtypes[a->dtype].size);
    t->dtype.lanes = 1;
    t->shape = shape;
    t->strides = strides;
    t->byte_offset = 0;
}

/* 5. The capsule that hands e over (it deletes an export nobody took);
 * on failure e is freed. */
static PyObject *dl_capsule(export_ctx *e, int versioned, int do_copy)
{
    PyObject *cap;
    if (versioned) {
        e->mt.v1.version.major = DLPACK_MAJOR_VERSION;
        e->mt.v1.version.minor = DLPACK_MINOR_VERSION;
        e->mt.v1.manager_ctx = e;
        e->mt.v1.deleter = dl_delete_v1;
        e->mt.v1.flags = do_copy ? DLPACK_FLAG_BITMASK_IS_COPIED : 0;
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
    int do_copy;
    void *data = NULL;
    if (st == NULL || dl_parse(a, args, nargs, kwnames, &req) < 0 ||
        dl_plan(a, &req, &do_copy) < 0)
        return NULL;
    export_ctx *e = dl_acquire(st, a, do_copy, &data);
    if (e == NULL)
        return NULL;
    dl_fill(a, e, req.versioned, data,
            do_copy ? (DLDevice){kDLCPU, 0} : req.own);
    return dl_capsule(e, req.versioned, do_copy);
}
