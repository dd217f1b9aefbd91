/*
 * _spillway.c -- spillway's CPython extension module.
 *
 * The Python API of DESIGN.md ("Python API"), written against the public C
 * API only (include/spillway.h).  Shape of the module, after CPython's
 * Modules/xxlimited.c and Modules/_queuemodule.c:
 *
 *  - multi-phase initialisation; everything static except PyInit__spillway;
 *  - module state holds the types, the exceptions and the open devices;
 *  - heap types from PyType_Spec, GC-tracked where they hold references,
 *    with weak-reference support on Array, Device, Queue and
 *    SequentialOrderManager;
 *  - every failing path returns NULL or -1 with an exception set.
 *
 * Queues, events, host tasks and the per-thread order-manager map held by
 * weak reference: see "Queues, events, host tasks and order managers".
 *
 * Locks.  The one lock order is device lock -> GIL, never GIL -> device
 * lock while both are held.  Every spillway call takes its device's lock, so
 * this module calls none of them with the GIL held: each is wrapped in
 * Py_BEGIN_ALLOW_THREADS / Py_END_ALLOW_THREADS (the NOGIL macro), even the
 * cheap ones, and even in deallocators.  The pressure callback registered
 * on every device this module opens is entered with the device lock held;
 * it releases that lock before it takes the GIL (PyGILState_Ensure), runs
 * the collector, releases the GIL and only then re-takes the device lock.
 * So no thread ever holds both, and a thread that never had the GIL (a
 * queue worker, another C thread) always makes progress.
 *
 * The garbage collector under memory pressure.  When an allocation fails on
 * a device (before anything is spilled), the callback runs gc.collect() --
 * a full collection, even while gc.disable() is in effect -- and tells the
 * allocator to retry when device memory was freed.  It is rate-limited
 * (see "The pressure callback" below): a collection that frees no device
 * memory starts a back-off of max(50 ms, 10 x its own duration) during
 * which the callback returns at once; only one collection runs at a time,
 * and a thread whose allocation failed while another was collecting does
 * not collect again.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "spillway.h"
#include "dlpack.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

PyMODINIT_FUNC PyInit__spillway(void);

/* Run a statement with the GIL released. */
#define NOGIL(stmt)                                                           \
    do {                                                                      \
        Py_BEGIN_ALLOW_THREADS stmt;                                          \
        Py_END_ALLOW_THREADS                                                  \
    } while (0)

/* Most dimensions an Array may have (NumPy allows 64). */
#define SW_PY_MAXDIMS 32

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ------------------------------------------------------------------------
 * Element types
 * ---------------------------------------------------------------------- */

typedef struct {
    const char *name;
    const char *np_str; /* NumPy's dtype.str on a little-endian host, less
                         * the byte-order character */
    size_t size;
    int is_float;
    uint8_t dl_code;
} dtype_info;

/* Indexed by sw_dtype. */
static const dtype_info dtypes[4] = {
    [SW_FLOAT32] = {"float32", "f4", 4, 1, kDLFloat},
    [SW_FLOAT64] = {"float64", "f8", 8, 1, kDLFloat},
    [SW_INT32] = {"int32", "i4", 4, 0, kDLInt},
    [SW_INT64] = {"int64", "i8", 8, 0, kDLInt},
};

#define DTYPE_HELP "spillway arrays hold float32, float64, int32 or int64"

/* ------------------------------------------------------------------------
 * Per-device context shared with the pressure callback and DLPack exports
 *
 * Those run without the GIL and may outlive the Device object, so what
 * they need lives in a small reference-counted block: the Device holds one
 * reference; a running callback and every live DLPack export hold one each.
 * ---------------------------------------------------------------------- */

typedef struct devctx {
    atomic_int refs;
    atomic_int alive;    /* 0 once the Device is closed: stop collecting */
    atomic_long exports; /* live zero-copy DLPack exports of its memory */
} devctx;

static devctx *ctx_new(void)
{
    devctx *c = malloc(sizeof *c);
    if (c != NULL) {
        atomic_init(&c->refs, 1);
        atomic_init(&c->alive, 1);
        atomic_init(&c->exports, 0);
    }
    return c;
}

static void ctx_ref(devctx *c) { atomic_fetch_add(&c->refs, 1); }

static void ctx_unref(devctx *c)
{
    if (c != NULL && atomic_fetch_sub(&c->refs, 1) == 1)
        free(c);
}

/* Device buffers released by this thread (Array deallocation, DLPack
 * deleters): the pressure callback compares it across its collection to
 * see whether that collection freed device memory. */
static _Thread_local uint64_t tl_released;

/* ------------------------------------------------------------------------
 * Module state and objects
 * ---------------------------------------------------------------------- */

typedef struct {
    PyTypeObject *device_type;
    PyTypeObject *array_type;
    PyTypeObject *peak_type;
    PyTypeObject *cthread_type;
    PyTypeObject *meminfo_type;
    PyTypeObject *queue_type;
    PyTypeObject *event_type;
    PyTypeObject *manager_type;
    PyTypeObject *map_type;   /* one thread's order managers */
    PyTypeObject *entry_type; /* one key of it */
    PyTypeObject *omap_type;
    PyObject *order_manager;  /* the OrderManagerMap singleton */
    PyObject *DeviceMemoryError;
    PyObject *DeviceError;
    PyObject *devices;        /* dict: "sim:0" -> Device (open ones) */
    PyObject *default_device; /* Device for device=None, or NULL */
    PyObject *numpy;          /* imported on first need */
    PyObject *np_dtypes[4];   /* numpy.dtype objects, on first need */
    PyObject *track;          /* list of weakrefs to new Arrays, or NULL */
} sw_state;

typedef struct {
    PyObject_HEAD
    sw_device *dev; /* our sw_device_open reference; NULL once closed */
    devctx *ctx;
    int cb_id;      /* pressure callback slot; -1 when none */
    int closed;     /* close() was called */
    /* Arrays, open peak scopes, helper threads and calls in progress on
     * it: the device is really closed when close() was called and this
     * drops to 0. */
    Py_ssize_t users;
    PyObject *name;        /* str "sim:0" */
    PyObject *description; /* str */
    PyObject *weakreflist;
} DeviceObject;

typedef struct {
    PyObject_VAR_HEAD     /* ob_size: the number of dimensions */
    sw_buffer *buf;       /* our handle (a base, a view, or a retained
                           * reference shared with other Arrays) */
    DeviceObject *device; /* strong */
    PyObject *weakreflist;
    size_t nelem;
    size_t nbytes;
    sw_dtype dtype;
    Py_ssize_t shape[];
} ArrayObject;

#define ARRAY_NDIM(a) ((int)Py_SIZE(a))

typedef struct {
    PyObject_HEAD
    DeviceObject *device;
    sw_peak_scope *scope; /* while entered */
    int stage;            /* 0 created, 1 entered, 2 exited */
    uint64_t peak;        /* after exit */
} PeakObject;

static sw_state *module_state(PyObject *m)
{
    return (sw_state *)PyModule_GetState(m);
}

/* State of one of this module's types (NULL with an exception set when the
 * module is gone). */
static sw_state *type_state(PyTypeObject *tp)
{
    return (sw_state *)PyType_GetModuleState(tp);
}

/* At interpreter shutdown the module state is cleared while objects that
 * refer to it (through their types) may still run code. */
static int state_alive(sw_state *st)
{
    if (st != NULL && st->devices != NULL)
        return 1;
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError,
                        "spillway's module state is gone (the interpreter "
                        "is shutting down)");
    return 0;
}

/* ------------------------------------------------------------------------
 * Errors
 * ---------------------------------------------------------------------- */

/* Raise the exception for library error rc with the detail message. */
static PyObject *raise_sw_detail(sw_state *st, int rc, const char *detail)
{
    PyObject *exc;
    switch (rc) {
    case SW_ERR_OOM:
    case SW_ERR_TOO_LARGE:
        exc = st->DeviceMemoryError;
        break;
    case SW_ERR_HOST_OOM:
        exc = PyExc_MemoryError;
        break;
    case SW_ERR_INVALID_ARG:
    case SW_ERR_NO_DEVICE:
        exc = PyExc_ValueError;
        break;
    case SW_ERR_OUT_OF_RANGE:
        exc = PyExc_IndexError;
        break;
    case SW_ERR_DTYPE:
        exc = PyExc_TypeError;
        break;
    case SW_ERR_UNSUPPORTED:
        exc = PyExc_NotImplementedError;
        break;
    default: /* SW_ERR_DEVICE, SW_ERR_BUSY, SW_ERR_INVALID_HANDLE */
        exc = st->DeviceError;
        break;
    }
    if (exc == NULL) /* module state cleared at shutdown */
        exc = rc == SW_ERR_OOM || rc == SW_ERR_TOO_LARGE ? PyExc_MemoryError
                                                         : PyExc_RuntimeError;
    if (detail != NULL && detail[0] != '\0')
        PyErr_SetString(exc, detail);
    else
        PyErr_Format(exc, "%s (%s)", sw_strerror(rc), sw_err_name(rc));
    return NULL;
}

/* Raise the exception for library error rc, carrying the thread's detail
 * message (read at once: the next failing call replaces it). */
static PyObject *raise_sw(sw_state *st, int rc)
{
    return raise_sw_detail(st, rc, sw_last_error());
}

/* ------------------------------------------------------------------------
 * Argument parsing for METH_FASTCALL | METH_KEYWORDS
 *
 * names[0..nnames): the parameters; the first npos may be passed by
 * position, the first nreq are required.  out[i] is NULL when absent.
 * ---------------------------------------------------------------------- */

static int parse_args(const char *fname, PyObject *const *args,
                      Py_ssize_t nargs, PyObject *kwnames,
                      const char *const *names, int nnames, int npos,
                      int nreq, PyObject **out)
{
    for (int i = 0; i < nnames; i++)
        out[i] = NULL;
    if (nargs > npos) {
        PyErr_Format(PyExc_TypeError,
                     "%s() takes at most %d positional argument%s (%zd "
                     "given)",
                     fname, npos, npos == 1 ? "" : "s", nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        out[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int found = -1;
        for (int i = 0; i < nnames; i++) {
            if (PyUnicode_CompareWithASCIIString(key, names[i]) == 0) {
                found = i;
                break;
            }
        }
        if (found < 0) {
            PyErr_Format(PyExc_TypeError,
                         "%s() got an unexpected keyword argument '%U'",
                         fname, key);
            return -1;
        }
        if (out[found] != NULL) {
            PyErr_Format(PyExc_TypeError,
                         "%s() got multiple values for argument '%s'", fname,
                         names[found]);
            return -1;
        }
        out[found] = args[nargs + k];
    }
    for (int i = 0; i < nreq; i++) {
        if (out[i] == NULL) {
            PyErr_Format(PyExc_TypeError,
                         "%s() missing required argument '%s'", fname,
                         names[i]);
            return -1;
        }
    }
    return 0;
}

/* NULL or None. */
static int absent(PyObject *o) { return o == NULL || o == Py_None; }

/* ------------------------------------------------------------------------
 * NumPy (imported on first need: only numpy(), dtype objects and
 * conversions of non-buffer objects use it)
 * ---------------------------------------------------------------------- */

static PyObject *get_numpy(sw_state *st)
{
    if (st->numpy == NULL)
        st->numpy = PyImport_ImportModule("numpy");
    return st->numpy;
}

/* The numpy.dtype object for dt (borrowed). */
static PyObject *np_dtype(sw_state *st, sw_dtype dt)
{
    if (st->np_dtypes[dt] == NULL) {
        PyObject *np = get_numpy(st);
        if (np == NULL)
            return NULL;
        st->np_dtypes[dt] =
            PyObject_CallMethod(np, "dtype", "s", dtypes[dt].name);
    }
    return st->np_dtypes[dt];
}

static PyObject *unsupported_dtype(PyObject *obj)
{
    PyErr_Format(PyExc_TypeError, "unsupported dtype %R: " DTYPE_HELP, obj);
    return NULL;
}

/* dtype argument: None (float32), a name ("float32", "f4", ...), a
 * numpy.dtype or anything numpy.dtype() accepts (np.float64, float, ...).
 * Only native byte order. */
static int parse_dtype(sw_state *st, PyObject *obj, sw_dtype *out)
{
    if (absent(obj)) {
        *out = SW_FLOAT32;
        return 0;
    }
    for (int i = 0; i < 4; i++) {
        if (obj == st->np_dtypes[i]) {
            *out = (sw_dtype)i;
            return 0;
        }
    }
    if (PyUnicode_Check(obj)) {
        const char *s = PyUnicode_AsUTF8(obj);
        if (s == NULL)
            return -1;
        for (int i = 0; i < 4; i++) {
            if (strcmp(s, dtypes[i].name) == 0 ||
                strcmp(s, dtypes[i].np_str) == 0) {
                *out = (sw_dtype)i;
                return 0;
            }
        }
    }
    /* Whatever NumPy calls one of ours. */
    PyObject *np = get_numpy(st);
    if (np == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_ImportError))
            return -1;
        PyErr_Clear();
        unsupported_dtype(obj);
        return -1;
    }
    PyObject *d = PyObject_CallMethod(np, "dtype", "O", obj);
    if (d == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError) &&
            !PyErr_ExceptionMatches(PyExc_ValueError))
            return -1;
        PyErr_Clear();
        unsupported_dtype(obj);
        return -1;
    }
    PyObject *str = PyObject_GetAttrString(d, "str");
    Py_DECREF(d);
    if (str == NULL)
        return -1;
    const char *s = PyUnicode_AsUTF8(str);
    int rc = -1;
    if (s != NULL) {
        char native = PY_LITTLE_ENDIAN ? '<' : '>';
        for (int i = 0; i < 4; i++) {
            if (s[0] == native && strcmp(s + 1, dtypes[i].np_str) == 0) {
                *out = (sw_dtype)i;
                rc = 0;
                break;
            }
        }
        if (rc != 0)
            unsupported_dtype(obj);
    }
    Py_DECREF(str);
    return rc;
}

/* The element type of a buffer (PEP 3118 format), native order only. */
static int dtype_from_format(const char *fmt, Py_ssize_t itemsize,
                             sw_dtype *out)
{
    const char *f = fmt ? fmt : "B";
    char order = '@';
    if (*f == '@' || *f == '=' || *f == '<' || *f == '>' || *f == '!')
        order = *f++;
    int foreign = PY_LITTLE_ENDIAN ? (order == '>' || order == '!')
                                   : (order == '<');
    int ok = !foreign && f[0] != '\0' && f[1] == '\0';
    if (ok) {
        switch (f[0]) {
        case 'f':
            ok = itemsize == 4;
            *out = SW_FLOAT32;
            break;
        case 'd':
            ok = itemsize == 8;
            *out = SW_FLOAT64;
            break;
        case 'b': case 'h': case 'i': case 'l': case 'q': case 'n':
            ok = itemsize == 4 || itemsize == 8;
            *out = itemsize == 4 ? SW_INT32 : SW_INT64;
            break;
        default:
            ok = 0;
        }
    }
    if (!ok) {
        PyErr_Format(PyExc_TypeError,
                     "unsupported element type (buffer format '%s', %zd "
                     "byte%s per item%s): " DTYPE_HELP,
                     fmt ? fmt : "B", itemsize, itemsize == 1 ? "" : "s",
                     foreign ? ", non-native byte order" : "");
        return -1;
    }
    return 0;
}

/* A Python number as an element of dt.  Integer arrays take integers only
 * (in range); float arrays take any real number. */
static int scalar_from_py(PyObject *obj, sw_dtype dt, sw_scalar *out,
                          const char *what)
{
    if (dtypes[dt].is_float) {
        double v = PyFloat_AsDouble(obj);
        if (v == -1.0 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError,
                             "%s must be a real number for a %s array, not "
                             "%.100s",
                             what, dtypes[dt].name, Py_TYPE(obj)->tp_name);
            }
            return -1;
        }
        out->f = v;
        return 0;
    }
    if (PyFloat_Check(obj) || !PyIndex_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "%s must be an integer for a %s array, not %.100s", what,
                     dtypes[dt].name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    PyObject *idx = PyNumber_Index(obj);
    if (idx == NULL)
        return -1;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(idx, &overflow);
    Py_DECREF(idx);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow != 0 ||
        (dt == SW_INT32 && (v < INT32_MIN || v > INT32_MAX))) {
        PyErr_Format(PyExc_OverflowError, "%s %R is out of range for %s",
                     what, obj, dtypes[dt].name);
        return -1;
    }
    out->i = v;
    return 0;
}

/* One element read from memory as a Python number. */
static PyObject *scalar_to_py(const void *p, sw_dtype dt)
{
    switch (dt) {
    case SW_FLOAT32: {
        float f;
        memcpy(&f, p, sizeof f);
        return PyFloat_FromDouble((double)f);
    }
    case SW_FLOAT64: {
        double d;
        memcpy(&d, p, sizeof d);
        return PyFloat_FromDouble(d);
    }
    case SW_INT32: {
        int32_t i;
        memcpy(&i, p, sizeof i);
        return PyLong_FromLong((long)i);
    }
    case SW_INT64: {
        int64_t i;
        memcpy(&i, p, sizeof i);
        return PyLong_FromLongLong((long long)i);
    }
    }
    PyErr_SetString(PyExc_SystemError, "bad dtype");
    return NULL;
}

/* An element value as the bytes the array stores. */
static void scalar_store(void *p, sw_dtype dt, sw_scalar v)
{
    switch (dt) {
    case SW_FLOAT32: {
        float f = (float)v.f;
        memcpy(p, &f, sizeof f);
        break;
    }
    case SW_FLOAT64:
        memcpy(p, &v.f, sizeof v.f);
        break;
    case SW_INT32: {
        int32_t i = (int32_t)v.i;
        memcpy(p, &i, sizeof i);
        break;
    }
    case SW_INT64: {
        int64_t i = (int64_t)v.i;
        memcpy(p, &i, sizeof i);
        break;
    }
    }
}

/* ------------------------------------------------------------------------
 * Shapes
 * ---------------------------------------------------------------------- */

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
 * ValueError otherwise. */
static int shape_sizes(const Py_ssize_t *shape, int ndim, size_t itemsize,
                       PyObject *whole, size_t *nelem, size_t *nbytes)
{
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        size_t d = (size_t)shape[i];
        if (d != 0 && n > (size_t)PY_SSIZE_T_MAX / d) {
            n = SIZE_MAX;
            break;
        }
        n *= d;
    }
    if (n == SIZE_MAX || n > (size_t)PY_SSIZE_T_MAX / itemsize) {
        /* A zero dimension later on makes it empty after all. */
        for (int i = 0; i < ndim; i++) {
            if (shape[i] == 0) {
                *nelem = 0;
                *nbytes = 0;
                return 0;
            }
        }
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
    *nelem = n;
    *nbytes = n * itemsize;
    return 0;
}

/* shape: an integer or a sequence of integers. */
static int parse_shape(PyObject *obj, Py_ssize_t *shape, int *ndim)
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
    PyObject *seq = PySequence_Fast(obj, "shape must be a sequence");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > SW_PY_MAXDIMS) {
        PyErr_Format(PyExc_ValueError,
                     "shape %R has %zd dimensions; at most %d are allowed",
                     obj, n, SW_PY_MAXDIMS);
        Py_DECREF(seq);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (parse_dim(PySequence_Fast_GET_ITEM(seq, i), obj, &shape[i]) < 0) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    *ndim = (int)n;
    return 0;
}

static PyObject *shape_tuple(const Py_ssize_t *shape, int ndim)
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

/* ------------------------------------------------------------------------
 * The pressure callback: Python's garbage collector under memory pressure
 *
 * Rate limit, process-wide (there is one collector):
 *  - a collection that frees no device memory starts a back-off: until
 *    max(gc_min_interval, GC_BACKOFF_FACTOR x its duration) has passed, the
 *    callback returns 0 at once (the allocator goes on to wait, empty the
 *    cache and spill, or fails);
 *  - a collection that frees device memory ends the back-off;
 *  - one collection at a time: a callback that had to wait for the GIL
 *    while another collection ran does not collect again, it just lets
 *    the allocation retry;
 *  - the allocator runs the callbacks at most once per allocation.
 * So a program that is simply out of memory spends at most about a tenth
 * of its time in fruitless collections, and a workload that spills on
 * every step does not collect on every step.
 * ---------------------------------------------------------------------- */

#define GC_BACKOFF_FACTOR 10
static _Atomic int64_t gc_min_interval_ns = 50 * 1000 * 1000;
static _Atomic int64_t gc_quiet_until_ns;  /* 0: no back-off */
static _Atomic uint64_t gc_seq;            /* collections completed */
static _Atomic uint64_t gc_skipped_backoff;
static _Atomic uint64_t gc_skipped_shared;
static _Atomic uint64_t gc_fruitful;

static int py_finalizing(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* gc.collect(), which (unlike PyGC_Collect) also runs while gc.disable()
 * is in effect.  With the GIL; any exception it raises is reported as
 * unraisable, and an exception already set is preserved. */
static void run_collect(void)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *gc = PyImport_ImportModule("gc");
    PyObject *r = NULL;
    if (gc != NULL) {
        r = PyObject_CallMethod(gc, "collect", NULL);
        Py_DECREF(gc);
    }
    if (r == NULL)
        PyErr_WriteUnraisable(NULL);
    Py_XDECREF(r);
    PyErr_Restore(type, value, tb);
}

static int gc_on_pressure(sw_device *dev, sw_pressure *p, size_t bytes,
                          void *user)
{
    (void)bytes;
    devctx *ctx = user;
    /* Entered with the device lock held: the Device cannot have removed
     * this callback yet, so ctx is alive; hold it across the unlock. */
    if (!atomic_load(&ctx->alive))
        return 0;
    int64_t quiet = atomic_load(&gc_quiet_until_ns);
    if (quiet != 0 && now_ns() < quiet) {
        atomic_fetch_add(&gc_skipped_backoff, 1);
        return 0;
    }
    uint64_t seq0 = atomic_load(&gc_seq);
    ctx_ref(ctx);

    /* The device lock goes first: never hold it while taking the GIL. */
    sw_pressure_unlock(p);

    sw_memory_info before, after;
    int have_before = sw_memory_info_get(dev, &before) == SW_OK;
    int ran = 0, released_here = 0;
    if (Py_IsInitialized() && !py_finalizing()) {
        PyGILState_STATE g = PyGILState_Ensure();
        if (atomic_load(&ctx->alive) && !py_finalizing()) {
            if (atomic_load(&gc_seq) != seq0) {
                /* Another thread collected while this one waited. */
                atomic_fetch_add(&gc_skipped_shared, 1);
            } else {
                uint64_t r0 = tl_released;
                int64_t t0 = now_ns();
                run_collect();
                int64_t t1 = now_ns();
                released_here = tl_released != r0;
                if (released_here) {
                    atomic_store(&gc_quiet_until_ns, 0);
                    atomic_fetch_add(&gc_fruitful, 1);
                } else {
                    int64_t wait = GC_BACKOFF_FACTOR * (t1 - t0);
                    int64_t min = atomic_load(&gc_min_interval_ns);
                    atomic_store(&gc_quiet_until_ns,
                                 t1 + (wait > min ? wait : min));
                }
                atomic_fetch_add(&gc_seq, 1);
                ran = 1;
            }
        }
        PyGILState_Release(g);
    }
    /* Freed by this collection, or by anyone meanwhile: worth a retry. */
    int freed = released_here;
    if (have_before && sw_memory_info_get(dev, &after) == SW_OK &&
        after.frees != before.frees)
        freed = 1;

    sw_pressure_relock(p);
    if (ran)
        sw_pressure_note_gc(p);
    ctx_unref(ctx);
    return freed;
}

/* ------------------------------------------------------------------------
 * Device
 * ---------------------------------------------------------------------- */

/* Stop collecting for this device and unregister the callback. */
static void device_detach(DeviceObject *d)
{
    if (d->ctx != NULL)
        atomic_store(&d->ctx->alive, 0);
    if (d->cb_id >= 0 && d->dev != NULL) {
        sw_device *dev = d->dev;
        int id = d->cb_id;
        d->cb_id = -1;
        NOGIL((void)sw_remove_pressure_callback(dev, id));
    }
}

/* Drop our reference to the device.  A close that fails with SW_ERR_BUSY
 * (a DLPack consumer still holds memory of it) leaves the device open for
 * the rest of the process, which is harmless. */
static void device_shutdown(DeviceObject *d)
{
    device_detach(d);
    sw_device *dev = d->dev;
    d->dev = NULL;
    if (dev != NULL)
        NOGIL((void)sw_device_close(dev));
}

static void device_use(DeviceObject *d) { d->users++; }

static void device_unuse(DeviceObject *d)
{
    if (--d->users == 0 && d->closed)
        device_shutdown(d);
}

static int device_check_open(DeviceObject *d)
{
    if (d->closed) {
        PyErr_Format(PyExc_ValueError, "device %U is closed", d->name);
        return -1;
    }
    return 0;
}

/* A Device for a freshly opened dev (whose reference it takes), entered
 * in the module's table, with the pressure callback registered. */
static DeviceObject *device_create(sw_state *st, sw_device *dev,
                                   PyObject *name)
{
    DeviceObject *d = PyObject_GC_New(DeviceObject, st->device_type);
    if (d == NULL) {
        NOGIL((void)sw_device_close(dev));
        return NULL;
    }
    d->dev = dev;
    d->ctx = NULL;
    d->cb_id = -1;
    d->closed = 0;
    d->users = 0;
    d->name = Py_NewRef(name);
    d->description = NULL;
    d->weakreflist = NULL;
    PyObject_GC_Track(d);
    d->ctx = ctx_new();
    d->description = PyUnicode_FromString(sw_device_description(dev));
    if (d->ctx == NULL || d->description == NULL ||
        PyDict_SetItem(st->devices, name, (PyObject *)d) < 0) {
        if (d->ctx == NULL)
            PyErr_NoMemory();
        Py_DECREF(d);
        return NULL;
    }
    int rc, id = -1;
    NOGIL(rc = sw_add_pressure_callback(dev, gc_on_pressure, d->ctx, &id));
    if (rc != SW_OK) {
        /* Usable, but without the collector under pressure. */
        if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                             "spillway: %U: no pressure callback (%s); "
                             "arrays held only by reference cycles will "
                             "not be collected when memory runs short",
                             name, sw_last_error()) < 0) {
            (void)PyDict_DelItem(st->devices, name);
            Py_DECREF(d);
            return NULL;
        }
    } else {
        d->cb_id = id;
    }
    return d;
}

/* The Device for spec (a str), or the default device when spec is NULL.
 * New reference. */
static DeviceObject *device_lookup(sw_state *st, PyObject *spec)
{
    if (!state_alive(st))
        return NULL;
    if (spec == NULL && st->default_device != NULL)
        return (DeviceObject *)Py_NewRef(st->default_device);
    if (spec != NULL) {
        PyObject *d = PyDict_GetItemWithError(st->devices, spec);
        if (d != NULL)
            return (DeviceObject *)Py_NewRef(d);
        if (PyErr_Occurred())
            return NULL;
    }
    const char *cspec = NULL;
    if (spec != NULL && (cspec = PyUnicode_AsUTF8(spec)) == NULL)
        return NULL;
    sw_device *dev = NULL;
    int rc;
    NOGIL(rc = sw_device_open(cspec, &dev));
    if (rc != SW_OK)
        return (DeviceObject *)raise_sw(st, rc);
    if (!state_alive(st)) { /* cleared while the GIL was released */
        NOGIL((void)sw_device_close(dev));
        return NULL;
    }
    PyObject *name = PyUnicode_FromString(sw_device_name(dev));
    if (name == NULL) {
        NOGIL((void)sw_device_close(dev));
        return NULL;
    }
    DeviceObject *d = NULL;
    PyObject *have = PyDict_GetItemWithError(st->devices, name);
    if (have != NULL) {
        /* Opened under another spelling ("sim"), or by a racing thread. */
        NOGIL((void)sw_device_close(dev));
        d = (DeviceObject *)Py_NewRef(have);
    } else if (!PyErr_Occurred()) {
        d = device_create(st, dev, name);
    } else {
        NOGIL((void)sw_device_close(dev));
    }
    Py_DECREF(name);
    if (d != NULL && spec == NULL && st->default_device == NULL)
        st->default_device = Py_NewRef(d);
    return d;
}

/* A device= argument: a Device, a spec string or None.  New reference. */
static DeviceObject *resolve_device(sw_state *st, PyObject *obj)
{
    if (absent(obj))
        return device_lookup(st, NULL);
    if (Py_IS_TYPE(obj, st->device_type)) {
        if (device_check_open((DeviceObject *)obj) < 0)
            return NULL;
        return (DeviceObject *)Py_NewRef(obj);
    }
    if (PyUnicode_Check(obj))
        return device_lookup(st, obj);
    PyErr_Format(PyExc_TypeError,
                 "device must be a spillway.Device, a device spec such as "
                 "'sim:0', or None, not %.100s",
                 Py_TYPE(obj)->tp_name);
    return NULL;
}

static PyObject *Device_new(PyTypeObject *type, PyObject *args,
                            PyObject *kwds)
{
    static char *kwlist[] = {"spec", NULL};
    PyObject *spec = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:Device", kwlist, &spec))
        return NULL;
    sw_state *st = type_state(type);
    if (st == NULL)
        return NULL;
    if (!absent(spec) && !PyUnicode_Check(spec)) {
        PyErr_Format(PyExc_TypeError,
                     "Device() takes a spec string such as 'sim:0' or None, "
                     "not %.100s",
                     Py_TYPE(spec)->tp_name);
        return NULL;
    }
    return (PyObject *)device_lookup(st, absent(spec) ? NULL : spec);
}

static int Device_traverse(DeviceObject *d, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(d));
    return 0;
}

static void Device_dealloc(DeviceObject *d)
{
    PyTypeObject *tp = Py_TYPE(d);
    PyObject_GC_UnTrack(d);
    if (d->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)d);
    device_shutdown(d);
    ctx_unref(d->ctx);
    d->ctx = NULL;
    Py_CLEAR(d->name);
    Py_CLEAR(d->description);
    tp->tp_free((PyObject *)d);
    Py_DECREF(tp);
}

static PyObject *Device_repr(DeviceObject *d)
{
    return PyUnicode_FromFormat("Device(%R%s)", d->name,
                                d->closed ? ", closed" : "");
}

static PyObject *Device_str(DeviceObject *d) { return Py_NewRef(d->name); }

static Py_hash_t Device_hash(DeviceObject *d)
{
    return PyObject_Hash(d->name);
}

/* Devices compare by name, and equal their spec string. */
static PyObject *Device_richcompare(DeviceObject *d, PyObject *other, int op)
{
    if (op != Py_EQ && op != Py_NE)
        Py_RETURN_NOTIMPLEMENTED;
    PyObject *oname;
    if (Py_IS_TYPE(other, Py_TYPE(d)))
        oname = ((DeviceObject *)other)->name;
    else if (PyUnicode_Check(other))
        oname = other;
    else
        Py_RETURN_NOTIMPLEMENTED;
    return PyObject_RichCompare(d->name, oname, op);
}

static PyObject *Device_close(DeviceObject *d, PyObject *unused)
{
    if (d->closed)
        Py_RETURN_NONE;
    sw_state *st = type_state(Py_TYPE(d));
    if (st == NULL)
        return NULL;
    d->closed = 1;
    Py_INCREF(d); /* the table may hold the last reference */
    if (st->default_device == (PyObject *)d)
        Py_CLEAR(st->default_device);
    PyObject *cur = st->devices == NULL
                        ? NULL
                        : PyDict_GetItemWithError(st->devices, d->name);
    if (cur == (PyObject *)d)
        (void)PyDict_DelItem(st->devices, d->name);
    PyErr_Clear(); /* a failed lookup changes nothing: it closes anyway */
    device_detach(d);
    if (d->users == 0)
        device_shutdown(d);
    Py_DECREF(d);
    Py_RETURN_NONE;
}

static PyObject *Device_get_closed(DeviceObject *d, void *c)
{
    return PyBool_FromLong(d->closed);
}

static PyMethodDef Device_methods[] = {
    {"close", (PyCFunction)(void (*)(void))Device_close, METH_NOARGS,
     "close()\n--\n\n"
     "Close this device in this module: arrays still on it raise ValueError "
     "on any use, and the device itself is closed once the last of them is "
     "gone.  The next use of its spec opens it again (re-reading "
     "SPILLWAY_SIM_MEMORY if it was closed for good)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Device_members[] = {
    {"name", T_OBJECT, offsetof(DeviceObject, name), READONLY,
     "The device's spec, e.g. 'sim:0'."},
    {"description", T_OBJECT, offsetof(DeviceObject, description), READONLY,
     "What the backend says the device is."},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(DeviceObject, weakreflist),
     READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Device_getset[] = {
    {"closed", (getter)Device_get_closed, NULL,
     "True after close().", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Device_slots[] = {
    {Py_tp_doc, "Device(spec=None)\n--\n\n"
                "A device spillway manages, by spec ('sim:0', 'opencl:0', "
                "'cuda:0'; None: the default device, $SPILLWAY_DEVICE or "
                "sim:0).  There is one Device object per open device: "
                "Device('sim:0') returns it.  Devices compare equal to "
                "their spec string."},
    {Py_tp_new, Device_new},
    {Py_tp_dealloc, Device_dealloc},
    {Py_tp_traverse, Device_traverse},
    {Py_tp_repr, Device_repr},
    {Py_tp_str, Device_str},
    {Py_tp_hash, Device_hash},
    {Py_tp_richcompare, Device_richcompare},
    {Py_tp_methods, Device_methods},
    {Py_tp_members, Device_members},
    {Py_tp_getset, Device_getset},
    {0, NULL},
};

static PyType_Spec Device_spec = {
    .name = "spillway.Device",
    .basicsize = sizeof(DeviceObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Device_slots,
};

/* ------------------------------------------------------------------------
 * Queues, events, host tasks and order managers
 *
 * Queue wraps an sw_queue with a reference of its own; Queue(q) wraps the
 * same sw_queue, and queues compare and hash by that pointer.  Event wraps
 * an sw_event.  A SequentialOrderManager keeps, in an sw_order, the events
 * of the work submitted to one queue and of host tasks, and holds its own
 * reference to the sw_queue -- never the Queue object it was looked up by.
 *
 * spillway.order_manager maps queues to managers per thread (a MapObject
 * kept in the thread state's dict) and holds each key by weak reference:
 *  - the weak reference's callback (the EntryObject itself) only marks the
 *    entry dead and links it on the map's dead list.  It never waits and
 *    never allocates: the last reference to a queue is often dropped
 *    inside one of the queue's own host tasks, on its runner thread;
 *  - the owning thread drops a dead entry at a later lookup, once the
 *    manager's events have all completed (sw_order_idle: queries, never a
 *    wait) and nothing but the map refers to the manager;
 *  - until then a lookup of an equal queue (the same sw_queue, found by
 *    pointer) takes the entry over with a new weak reference, so new work
 *    is still ordered after the old manager's events.
 * Only the owning thread changes its map's table; a callback, which may
 * run on any thread (always with the GIL), only sets flags and links.
 *
 * Dependencies.  Work on one queue runs in order, so a manager's events of
 * its own queue need no further ordering.  Events of other queues (added
 * with add_event or add_event_pair) are kept apart as well ("foreign"), and
 * new work waits for them on the host, without the GIL, before it is
 * submitted (the C API has no queue-waits-for-event call).  As in dpctl,
 * new work depends on submitted events only; host-task events are kept so
 * that wait() covers them and the objects they hold stay alive.
 *
 * Host tasks.  q.host_task(fn) runs fn with the GIL, taken with
 * PyGILState_Ensure on the queue's runner thread (which holds no spillway
 * lock then).  The host task that keeps an operation's Arrays alive until
 * its work has completed needs no GIL: it hands its references to a
 * release list and completes, so that a manager is idle as soon as its
 * device work is done, whatever the GIL's scheduling (a runner waiting
 * for the GIL would keep its queue, and its device memory, alive).  The
 * list is drained, with the GIL, at the next queue call of any thread, by
 * a pending call scheduled on the main thread (Py_AddPendingCall), and
 * after every wait.  Python host tasks are counted; an atexit handler
 * waits for them and drains the list before the interpreter finalizes,
 * when a thread asking for the GIL would never get it.
 * ---------------------------------------------------------------------- */

/* A failure of this module's own (not the library's): no host memory. */
#define SWPY_NOMEM (-1000000)

static PyObject *raise_rc(sw_state *st, int rc)
{
    if (rc == SWPY_NOMEM)
        return PyErr_NoMemory();
    return raise_sw(st, rc);
}

/* Python host tasks queued and not yet finished, process-wide. */
static pthread_mutex_t pytasks_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pytasks_cv = PTHREAD_COND_INITIALIZER;
static long pytasks_pending;

static void pytasks_begin(void)
{
    pthread_mutex_lock(&pytasks_mu);
    pytasks_pending++;
    pthread_mutex_unlock(&pytasks_mu);
}

static void pytasks_end(void)
{
    pthread_mutex_lock(&pytasks_mu);
    if (--pytasks_pending == 0)
        pthread_cond_broadcast(&pytasks_cv);
    pthread_mutex_unlock(&pytasks_mu);
}

/* The queue whose Python host task this thread is running, or NULL. */
static _Thread_local sw_queue *tl_task_queue;

/* Live objects, for the test suite's leak checks (changed with the GIL). */
static Py_ssize_t live_queues, live_managers, live_events;

/* Objects hash by a pointer, as CPython's _Py_HashPointer does. */
static Py_hash_t hash_pointer(const void *p)
{
    size_t y = (size_t)p;
    y = (y >> 4) | (y << (8 * sizeof(void *) - 4));
    Py_hash_t h = (Py_hash_t)y;
    return h == -1 ? -2 : h;
}

typedef struct {
    PyObject_HEAD
    sw_queue *q;          /* our reference */
    DeviceObject *device; /* strong, and counted in its users */
    PyObject *weakreflist;
} QueueObject;

typedef struct {
    PyObject_HEAD
    sw_event *ev;     /* our reference */
    sw_queue *origin; /* where it was recorded, as an identity only (no
                       * reference); NULL when unknown */
    int host_task;
} EventObject;

typedef struct {
    PyObject_HEAD
    sw_queue *q;          /* the manager's own reference */
    DeviceObject *device; /* strong, counted in its users */
    sw_order *order;      /* every event recorded */
    sw_order *foreign;    /* the submitted ones not of q; NULL until one */
    sw_order *own;        /* the host-task ones of q; NULL until one */
    /* Guards order, foreign and own.  Taken only with the GIL released,
     * and never held while waiting or while taking the GIL. */
    pthread_mutex_t mu;
    PyObject *weakreflist;
} ManagerObject;

typedef struct MapObject MapObject;

/* One key of a thread's map; also the callback of the key's weak
 * reference. */
typedef struct EntryObject {
    PyObject_HEAD
    sw_queue *key;         /* == mgr->q */
    ManagerObject *mgr;    /* strong */
    PyObject *wr;          /* weak reference to the key Queue (callback:
                            * this entry), strong */
    MapObject *map;        /* borrowed; NULL once taken out of it */
    struct EntryObject *dead_next;
    unsigned char dead;    /* the key Queue is gone */
    unsigned char on_list; /* linked on map->dead */
    unsigned char idle;    /* scratch for map_prune */
} EntryObject;

/* One thread's map: an open-addressing table of entries by sw_queue
 * pointer (linear probing, backward-shift deletion), owning a reference to
 * each entry, and the list of entries whose key died. */
struct MapObject {
    PyObject_HEAD
    EntryObject **slots;
    size_t cap; /* 0 or a power of two */
    size_t n;
    EntryObject *dead; /* no references of its own: every entry on it is
                        * in the table */
};

/* spillway.order_manager. */
typedef struct {
    PyObject_HEAD
} OMapObject;

/* A Python host task: calls fn with the GIL; or, with no fn, keeps objs
 * alive until it runs and then hands them to the release list. */
typedef struct pytask {
    PyObject *fn;
    sw_queue *q; /* the queue it runs on, as an identity */
    struct pytask *next; /* on the release list */
    int nobjs;
    PyObject *objs[4];
} pytask;

static pytask *pytask_new(PyObject *fn, PyObject *const *objs, int nobjs,
                          sw_queue *q)
{
    pytask *t = PyMem_RawCalloc(1, sizeof *t);
    if (t == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    t->fn = Py_XNewRef(fn);
    t->q = q;
    t->nobjs = nobjs;
    for (int i = 0; i < nobjs; i++)
        t->objs[i] = Py_NewRef(objs[i]);
    return t;
}

/* With the GIL: drop the references and free the task. */
static void pytask_free(pytask *t)
{
    Py_CLEAR(t->fn);
    for (int i = 0; i < t->nobjs; i++)
        Py_CLEAR(t->objs[i]);
    PyMem_RawFree(t);
}

/* References handed over by finished keep-alive tasks. */
static pthread_mutex_t release_mu = PTHREAD_MUTEX_INITIALIZER;
static pytask *release_head; /* guarded by release_mu */
static atomic_int release_nonempty;
static atomic_int release_scheduled;

/* With the GIL: drop the references on the release list. */
static void drain_releases(void)
{
    while (atomic_load(&release_nonempty)) {
        pthread_mutex_lock(&release_mu);
        pytask *list = release_head;
        release_head = NULL;
        atomic_store(&release_nonempty, 0);
        pthread_mutex_unlock(&release_mu);
        while (list != NULL) {
            pytask *t = list;
            list = t->next;
            pytask_free(t); /* may free Arrays: device frees, no waits */
        }
    }
}

/* A pending call: the main thread, with the GIL, between bytecodes. */
static int drain_pending_call(void *arg)
{
    (void)arg;
    atomic_store(&release_scheduled, 0);
    drain_releases();
    return 0;
}

/* Without the GIL: put t on the release list and make sure a drain comes
 * soon.  Py_AddPendingCall may be called from any thread without the GIL;
 * when its queue is full, the next queue call drains the list anyway. */
static void release_later(pytask *t)
{
    pthread_mutex_lock(&release_mu);
    t->next = release_head;
    release_head = t;
    atomic_store(&release_nonempty, 1);
    pthread_mutex_unlock(&release_mu);
    if (!atomic_exchange(&release_scheduled, 1) &&
        Py_AddPendingCall(drain_pending_call, NULL) < 0)
        atomic_store(&release_scheduled, 0);
}

/* On the queue's runner thread, without the GIL and without any spillway
 * lock.  While the interpreter finalizes, the GIL cannot be had: the task's
 * references are left (the atexit handler waits for tasks, so that this
 * happens only to tasks queued during finalization). */
static void pytask_run(void *arg)
{
    pytask *t = arg;
    if (t->fn == NULL && Py_IsInitialized() && !py_finalizing()) {
        release_later(t); /* the work before it is complete */
    } else if (Py_IsInitialized() && !py_finalizing()) {
        PyGILState_STATE g = PyGILState_Ensure();
        sw_queue *outer = tl_task_queue;
        tl_task_queue = t->q;
        if (t->fn != NULL) {
            PyObject *r = PyObject_CallNoArgs(t->fn);
            if (r == NULL)
                PyErr_WriteUnraisable(t->fn);
            Py_XDECREF(r);
        }
        pytask_free(t);
        tl_task_queue = outer;
        PyGILState_Release(g);
    } else {
        PyMem_RawFree(t); /* its references are left: no GIL to be had */
    }
    pytasks_end();
}

static void noop_task(void *arg) { (void)arg; }

/* Without the GIL: queue t on q; t belongs to the task once this
 * succeeds. */
static int pytask_submit(sw_queue *q, pytask *t, sw_event **ev)
{
    pytasks_begin();
    int rc = sw_queue_host_task(q, pytask_run, t, ev);
    if (rc != SW_OK)
        pytasks_end();
    return rc;
}

/* --- Event ------------------------------------------------------------- */

/* An Event taking the reference ev (released on failure). */
static PyObject *event_wrap(sw_state *st, sw_event *ev, sw_queue *origin,
                            int host_task)
{
    EventObject *e = state_alive(st)
                         ? PyObject_New(EventObject, st->event_type)
                         : NULL;
    if (e == NULL) {
        NOGIL((void)sw_event_release(ev));
        return NULL;
    }
    e->ev = ev;
    e->origin = origin;
    e->host_task = host_task;
    live_events++;
    return (PyObject *)e;
}

static void Event_dealloc(EventObject *e)
{
    PyTypeObject *tp = Py_TYPE(e);
    sw_event *ev = e->ev;
    e->ev = NULL;
    if (ev != NULL)
        NOGIL((void)sw_event_release(ev));
    live_events--;
    tp->tp_free((PyObject *)e);
    Py_DECREF(tp);
}

static PyObject *Event_query(EventObject *e, PyObject *unused)
{
    int done = 0, rc;
    NOGIL(rc = sw_event_query(e->ev, &done));
    if (rc != SW_OK) {
        sw_state *st = type_state(Py_TYPE(e));
        return st ? raise_sw(st, rc) : NULL;
    }
    return PyBool_FromLong(done);
}

static PyObject *Event_wait(EventObject *e, PyObject *unused)
{
    int rc;
    NOGIL(rc = sw_event_wait(e->ev));
    if (rc != SW_OK) {
        sw_state *st = type_state(Py_TYPE(e));
        return st ? raise_sw(st, rc) : NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Event_repr(EventObject *e)
{
    int done = 0, rc;
    NOGIL(rc = sw_event_query(e->ev, &done));
    return PyUnicode_FromFormat("<spillway.Event%s, %s>",
                                e->host_task ? " of a host task" : "",
                                rc != SW_OK ? "failed"
                                : done      ? "complete"
                                            : "pending");
}

static PyObject *Event_get_is_host_task(EventObject *e, void *c)
{
    return PyBool_FromLong(e->host_task);
}

static PyMethodDef Event_methods[] = {
    {"query", (PyCFunction)(void (*)(void))Event_query, METH_NOARGS,
     "query()\n--\n\nTrue once the event has completed; never blocks.  "
     "Raises DeviceError if the work before it failed."},
    {"wait", (PyCFunction)(void (*)(void))Event_wait, METH_NOARGS,
     "wait()\n--\n\nBlock until the event has completed (the GIL is "
     "released meanwhile).  Raises DeviceError if the work before it "
     "failed."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Event_getset[] = {
    {"is_host_task", (getter)Event_get_is_host_task, NULL,
     "True for the event of a host task (it completes when the task's "
     "function has returned).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Event_slots[] = {
    {Py_tp_doc, "An event on a queue (Queue.record_event(), "
                "Queue.host_task()): it completes when the work submitted "
                "before it has.  query() never blocks; wait() releases the "
                "GIL."},
    {Py_tp_dealloc, Event_dealloc},
    {Py_tp_repr, Event_repr},
    {Py_tp_methods, Event_methods},
    {Py_tp_getset, Event_getset},
    {0, NULL},
};

static PyType_Spec Event_spec = {
    .name = "spillway.Event",
    .basicsize = sizeof(EventObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Event_slots,
};

/* --- Queue ------------------------------------------------------------- */

static int relieve_dead_managers(sw_state *st);

/* A Queue on d taking the reference q (released on failure). */
static PyObject *queue_wrap(sw_state *st, DeviceObject *d, sw_queue *q)
{
    QueueObject *o = state_alive(st)
                         ? PyObject_GC_New(QueueObject, st->queue_type)
                         : NULL;
    if (o == NULL) {
        NOGIL((void)sw_queue_release(q));
        return NULL;
    }
    o->q = q;
    o->device = (DeviceObject *)Py_NewRef(d);
    o->weakreflist = NULL;
    device_use(d);
    live_queues++;
    PyObject_GC_Track(o);
    return (PyObject *)o;
}

static int queue_check_open(QueueObject *q)
{
    if (q->device->closed) {
        PyErr_Format(PyExc_ValueError,
                     "this queue's device %U is closed: the queue can no "
                     "longer be used",
                     q->device->name);
        return -1;
    }
    return 0;
}

static PyObject *Queue_new(PyTypeObject *type, PyObject *args,
                           PyObject *kwds)
{
    static char *kwlist[] = {"device", NULL};
    PyObject *arg = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:Queue", kwlist, &arg))
        return NULL;
    sw_state *st = type_state(type);
    if (st == NULL || !state_alive(st))
        return NULL;
    drain_releases();
    int rc;
    if (Py_IS_TYPE(arg, st->queue_type)) {
        /* Another wrapper of the same queue. */
        QueueObject *other = (QueueObject *)arg;
        if (queue_check_open(other) < 0)
            return NULL;
        sw_queue *q = other->q;
        NOGIL(rc = sw_queue_retain(q));
        if (rc != SW_OK)
            return raise_sw(st, rc);
        return queue_wrap(st, other->device, q);
    }
    if (!absent(arg) && !PyUnicode_Check(arg) &&
        !Py_IS_TYPE(arg, st->device_type)) {
        PyErr_Format(PyExc_TypeError,
                     "Queue() takes a spillway.Device, a device spec such as "
                     "'sim:0', another Queue or None, not %.100s",
                     Py_TYPE(arg)->tp_name);
        return NULL;
    }
    DeviceObject *d = resolve_device(st, arg);
    if (d == NULL)
        return NULL;
    sw_device *dev = d->dev;
    sw_queue *q = NULL;
    device_use(d);
    NOGIL(rc = sw_queue_create(dev, &q));
    if (rc == SW_ERR_OOM) {
        /* Device memory is short, and this thread's managers of dead
         * queues may be what holds it (a queue lives while its manager
         * does, and each reserves memory).  Wait for their work, drop
         * them, try once more. */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", sw_last_error());
        int relieved = relieve_dead_managers(st);
        if (relieved < 0) {
            device_unuse(d);
            Py_DECREF(d);
            return NULL;
        }
        if (relieved > 0)
            NOGIL(rc = sw_queue_create(dev, &q));
        if (rc != SW_OK) {
            device_unuse(d);
            Py_DECREF(d);
            return raise_sw_detail(st, rc, relieved ? sw_last_error() : msg);
        }
    }
    device_unuse(d);
    PyObject *r = rc == SW_OK ? queue_wrap(st, d, q) : raise_sw(st, rc);
    Py_DECREF(d);
    return r;
}

static int Queue_traverse(QueueObject *q, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(q));
    Py_VISIT(q->device);
    return 0;
}

/* Weak references first: their callbacks (an order manager map's among
 * them) see the queue gone before its handle is released. */
static void Queue_dealloc(QueueObject *q)
{
    PyTypeObject *tp = Py_TYPE(q);
    PyObject_GC_UnTrack(q);
    if (q->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)q);
    sw_queue *h = q->q;
    q->q = NULL;
    if (h != NULL)
        NOGIL((void)sw_queue_release(h)); /* never waits */
    DeviceObject *d = q->device;
    q->device = NULL;
    if (d != NULL) {
        device_unuse(d);
        Py_DECREF(d);
    }
    live_queues--;
    tp->tp_free((PyObject *)q);
    Py_DECREF(tp);
}

static PyObject *Queue_repr(QueueObject *q)
{
    return PyUnicode_FromFormat("<spillway.Queue %p on %U%s>", (void *)q->q,
                                q->device->name,
                                q->device->closed ? " (closed)" : "");
}

static Py_hash_t Queue_hash(QueueObject *q) { return hash_pointer(q->q); }

/* Equal: the same underlying sw_queue. */
static PyObject *Queue_richcompare(QueueObject *q, PyObject *other, int op)
{
    if ((op != Py_EQ && op != Py_NE) || !Py_IS_TYPE(other, Py_TYPE(q)))
        Py_RETURN_NOTIMPLEMENTED;
    int eq = q->q == ((QueueObject *)other)->q;
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

static PyObject *Queue_get_device(QueueObject *q, void *c)
{
    return Py_NewRef(q->device);
}

static PyObject *Queue_record_event(QueueObject *q, PyObject *unused)
{
    sw_state *st = type_state(Py_TYPE(q));
    if (st == NULL || queue_check_open(q) < 0)
        return NULL;
    sw_queue *h = q->q;
    sw_event *ev = NULL;
    int rc;
    NOGIL(rc = sw_queue_record_event(h, &ev));
    if (rc != SW_OK)
        return raise_sw(st, rc);
    return event_wrap(st, ev, h, 0);
}

static PyObject *Queue_host_task(QueueObject *q, PyObject *fn)
{
    sw_state *st = type_state(Py_TYPE(q));
    if (st == NULL || queue_check_open(q) < 0)
        return NULL;
    if (!PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError,
                     "host_task() takes a callable, not %.100s",
                     Py_TYPE(fn)->tp_name);
        return NULL;
    }
    sw_queue *h = q->q;
    pytask *t = pytask_new(fn, NULL, 0, h);
    if (t == NULL)
        return NULL;
    sw_event *ev = NULL;
    int rc;
    NOGIL(rc = pytask_submit(h, t, &ev));
    if (rc != SW_OK) {
        pytask_free(t);
        return raise_sw(st, rc);
    }
    return event_wrap(st, ev, h, 1);
}

/* Wait for the work and the host tasks submitted so far: a task that does
 * nothing, queued last, completes after both (the runner runs a queue's
 * tasks in order).  From inside one of this queue's own host tasks only
 * the device work is waited for: the tasks would wait for themselves. */
static PyObject *Queue_synchronize(QueueObject *q, PyObject *unused)
{
    sw_state *st = type_state(Py_TYPE(q));
    if (st == NULL || queue_check_open(q) < 0)
        return NULL;
    sw_queue *h = q->q;
    int rc;
    if (tl_task_queue == h) {
        NOGIL(rc = sw_queue_synchronize(h));
    } else {
        Py_BEGIN_ALLOW_THREADS
        sw_event *ev = NULL;
        rc = sw_queue_host_task(h, noop_task, NULL, &ev);
        if (rc == SW_OK) {
            rc = sw_event_wait(ev);
            (void)sw_event_release(ev);
        }
        Py_END_ALLOW_THREADS
    }
    if (rc != SW_OK)
        return raise_sw(st, rc);
    Py_RETURN_NONE;
}

static PyMethodDef Queue_methods[] = {
    {"record_event", (PyCFunction)(void (*)(void))Queue_record_event,
     METH_NOARGS,
     "record_event()\n--\n\nAn Event that completes when all work submitted "
     "to this queue so far has."},
    {"host_task", (PyCFunction)(void (*)(void))Queue_host_task, METH_O,
     "host_task(fn)\n--\n\nRun fn() off the caller's thread once the work "
     "submitted to this queue so far has completed; returns its Event "
     "(complete when fn has returned).  fn runs with the GIL (taken on the "
     "queue's host-task thread); an exception it raises is reported through "
     "sys.unraisablehook."},
    {"synchronize", (PyCFunction)(void (*)(void))Queue_synchronize,
     METH_NOARGS,
     "synchronize()\n--\n\nWait for the work and the host tasks submitted "
     "to this queue so far (the GIL is released meanwhile)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Queue_getset[] = {
    {"device", (getter)Queue_get_device, NULL, "The Device it runs on.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef Queue_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(QueueObject, weakreflist),
     READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Queue_slots[] = {
    {Py_tp_doc, "Queue(device=None)\n--\n\n"
                "An in-order stream of work on a device (a new one), or "
                "Queue(q): another wrapper of the same queue as q, equal to "
                "it with the same hash.  Operations take queue=; their "
                "events are recorded in spillway.order_manager[queue]."},
    {Py_tp_new, Queue_new},
    {Py_tp_dealloc, Queue_dealloc},
    {Py_tp_traverse, Queue_traverse},
    {Py_tp_repr, Queue_repr},
    {Py_tp_hash, Queue_hash},
    {Py_tp_richcompare, Queue_richcompare},
    {Py_tp_methods, Queue_methods},
    {Py_tp_getset, Queue_getset},
    {Py_tp_members, Queue_members},
    {0, NULL},
};

static PyType_Spec Queue_spec = {
    .name = "spillway.Queue",
    .basicsize = sizeof(QueueObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Queue_slots,
};

/* --- SequentialOrderManager -------------------------------------------- */

/* A manager of queue q (a reference of its own) on d, with no events. */
static ManagerObject *manager_new(sw_state *st, sw_queue *q, DeviceObject *d)
{
    ManagerObject *m = state_alive(st) ? PyObject_GC_New(ManagerObject,
                                                         st->manager_type)
                                       : NULL;
    if (m == NULL)
        return NULL;
    m->q = NULL;
    m->device = NULL;
    m->order = NULL;
    m->foreign = NULL;
    m->own = NULL;
    m->weakreflist = NULL;
    pthread_mutex_init(&m->mu, NULL);
    live_managers++;
    PyObject_GC_Track(m);
    sw_order *o = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sw_queue_retain(q);
    if (rc == SW_OK && (rc = sw_order_create(&o)) != SW_OK)
        (void)sw_queue_release(q);
    Py_END_ALLOW_THREADS
    if (rc != SW_OK) {
        raise_sw(st, rc);
        Py_DECREF(m);
        return NULL;
    }
    m->q = q;
    m->order = o;
    m->device = (DeviceObject *)Py_NewRef(d);
    device_use(d);
    return m;
}

static int Manager_traverse(ManagerObject *m, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(m));
    Py_VISIT(m->device);
    return 0;
}

/* Waits for nothing: the events are released, the queue handle too (its
 * work goes on; the queue is destroyed once it is done). */
static void Manager_dealloc(ManagerObject *m)
{
    PyTypeObject *tp = Py_TYPE(m);
    PyObject_GC_UnTrack(m);
    if (m->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)m);
    sw_order *o = m->order, *f = m->foreign, *own = m->own;
    sw_queue *q = m->q;
    m->order = m->foreign = m->own = NULL;
    m->q = NULL;
    if (o != NULL || f != NULL || own != NULL || q != NULL) {
        Py_BEGIN_ALLOW_THREADS
        sw_order_destroy(o);
        sw_order_destroy(f);
        sw_order_destroy(own);
        (void)sw_queue_release(q);
        Py_END_ALLOW_THREADS
    }
    pthread_mutex_destroy(&m->mu);
    DeviceObject *d = m->device;
    m->device = NULL;
    if (d != NULL) {
        device_unuse(d);
        Py_DECREF(d);
    }
    live_managers--;
    tp->tp_free((PyObject *)m);
    Py_DECREF(tp);
}

/* Without the GIL: whether every event of m has completed (never
 * blocks). */
static int manager_idle_nogil(ManagerObject *m)
{
    int idle = 0;
    pthread_mutex_lock(&m->mu);
    if (sw_order_idle(m->order, &idle) != SW_OK)
        idle = 0;
    pthread_mutex_unlock(&m->mu);
    return idle;
}

/* With m->mu held: record one event.  Submitted events not of m's queue
 * are also kept as foreign dependencies; host-task events of m's queue as
 * its own (see manager_wait_nogil). */
static int manager_add_locked(ManagerObject *m, sw_event *ev, int host_task,
                              int of_q)
{
    int rc = sw_order_add(m->order, ev, host_task);
    if (rc != SW_OK || host_task != of_q)
        return rc;
    sw_order **sub = host_task ? &m->own : &m->foreign;
    if (*sub == NULL && (rc = sw_order_create(sub)) != SW_OK)
        return rc;
    return sw_order_add(*sub, ev, 0);
}

/* Without the GIL: record events (retained by the order). */
static int manager_add_nogil(ManagerObject *m, EventObject *const *evs,
                             size_t n, int host_task)
{
    int rc = SW_OK;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < n && rc == SW_OK; i++)
        rc = manager_add_locked(m, evs[i]->ev, host_task,
                                evs[i]->origin == m->q);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* With m->mu held: whether ev is in sub (a pointer search; sub is small:
 * it holds pending events only). */
static int order_has(sw_order *sub, sw_event *ev)
{
    sw_event *e;
    for (size_t j = 0; sub != NULL && (e = sw_order_event(sub, 0, j)); j++)
        if (e == ev)
            return 1;
    return 0;
}

/* Without the GIL: wait (on the host) for the foreign dependencies of new
 * work.  Events are retained under the lock and waited for without it. */
static int manager_wait_foreign_nogil(ManagerObject *m)
{
    sw_event *stack[8], **evs = stack;
    size_t n = 0, nh = 0;
    int rc = SW_OK;
    pthread_mutex_lock(&m->mu);
    if (m->foreign != NULL &&
        (rc = sw_order_counts(m->foreign, &n, &nh)) == SW_OK && n > 0) {
        if (n > 8 && (evs = malloc(n * sizeof *evs)) == NULL) {
            rc = SWPY_NOMEM;
            n = 0;
        }
        for (size_t i = 0; i < n; i++) {
            evs[i] = sw_order_event(m->foreign, 0, i);
            (void)sw_event_retain(evs[i]);
        }
    }
    pthread_mutex_unlock(&m->mu);
    for (size_t i = 0; i < n; i++) {
        int r = sw_event_wait(evs[i]);
        if (rc == SW_OK)
            rc = r;
        (void)sw_event_release(evs[i]);
    }
    if (evs != stack)
        free(evs);
    return rc;
}

/* Without the GIL: wait for every event recorded so far, then forget them.
 * The records are swapped for empty ones under the lock and waited for
 * without it, so that a host task may use the manager meanwhile.
 *
 * in_task: the caller is one of the queue's own host tasks.  The queue's
 * host tasks run one at a time, in order, so those it recorded are either
 * complete or queued behind the caller, unable to run until it returns:
 * waiting for them would never end.  Everything else is waited for then,
 * and nothing is forgotten (completed events are pruned as usual). */
static int manager_wait_nogil(ManagerObject *m, int in_task)
{
    if (in_task) {
        sw_event **evs = NULL;
        size_t n = 0, cap = 0;
        int rc = SW_OK;
        pthread_mutex_lock(&m->mu);
        size_t counts[2] = {0, 0};
        (void)sw_order_counts(m->order, &counts[0], &counts[1]);
        cap = counts[0] + counts[1];
        if (cap > 0 && (evs = malloc(cap * sizeof *evs)) == NULL)
            rc = SWPY_NOMEM;
        for (int k = 0; k < 2 && evs != NULL; k++) {
            for (size_t i = 0; i < counts[k]; i++) {
                sw_event *ev = sw_order_event(m->order, k, i);
                if (k == 1 && order_has(m->own, ev))
                    continue;
                (void)sw_event_retain(ev);
                evs[n++] = ev;
            }
        }
        pthread_mutex_unlock(&m->mu);
        for (size_t i = 0; i < n; i++) {
            int r = sw_event_wait(evs[i]);
            if (rc == SW_OK)
                rc = r;
            (void)sw_event_release(evs[i]);
        }
        free(evs);
        return rc;
    }
    sw_order *fresh = NULL;
    int rc = sw_order_create(&fresh);
    if (rc != SW_OK)
        return rc;
    pthread_mutex_lock(&m->mu);
    sw_order *old = m->order, *oldf = m->foreign, *oldown = m->own;
    m->order = fresh;
    m->foreign = m->own = NULL;
    pthread_mutex_unlock(&m->mu);
    rc = sw_order_wait(old);
    sw_order_destroy(old);
    sw_order_destroy(oldf);
    sw_order_destroy(oldown);
    return rc;
}

/* Event (or sequence of Events) argument -> a new array of borrowed
 * EventObject pointers (kept alive by *seq), *n of them. */
static int events_arg(sw_state *st, PyObject *obj, const char *fname,
                      const char *what, PyObject **seq, EventObject ***out,
                      Py_ssize_t *n)
{
    *seq = NULL;
    *out = NULL;
    *n = 0;
    if (Py_IS_TYPE(obj, st->event_type)) {
        *seq = PyTuple_Pack(1, obj);
    } else if (PyList_Check(obj) || PyTuple_Check(obj) ||
               (PySequence_Check(obj) && !PyUnicode_Check(obj) &&
                !PyBytes_Check(obj))) {
        *seq = PySequence_Fast(obj, "");
    } else {
        PyErr_Format(PyExc_TypeError,
                     "%s(): %s must be a spillway.Event or a sequence of "
                     "them, not %.100s",
                     fname, what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (*seq == NULL)
        return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(*seq);
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(*seq, i);
        if (!Py_IS_TYPE(item, st->event_type)) {
            PyErr_Format(PyExc_TypeError,
                         "%s(): %s must be spillway.Events, not %.100s",
                         fname, what, Py_TYPE(item)->tp_name);
            Py_CLEAR(*seq);
            return -1;
        }
    }
    *out = (EventObject **)PySequence_Fast_ITEMS(*seq);
    *n = len;
    return 0;
}

static PyObject *Manager_add_event_pair(ManagerObject *m, PyObject *args)
{
    PyObject *hobj, *cobj;
    if (!PyArg_ParseTuple(args, "OO:add_event_pair", &hobj, &cobj))
        return NULL;
    sw_state *st = type_state(Py_TYPE(m));
    if (st == NULL)
        return NULL;
    PyObject *hseq, *cseq;
    EventObject **h, **c;
    Py_ssize_t nh, nc;
    if (events_arg(st, hobj, "add_event_pair", "host_task_events", &hseq, &h,
                   &nh) < 0)
        return NULL;
    if (events_arg(st, cobj, "add_event_pair", "computation_events", &cseq,
                   &c, &nc) < 0) {
        Py_DECREF(hseq);
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = manager_add_nogil(m, h, (size_t)nh, 1);
    if (rc == SW_OK)
        rc = manager_add_nogil(m, c, (size_t)nc, 0);
    Py_END_ALLOW_THREADS
    Py_DECREF(hseq);
    Py_DECREF(cseq);
    if (rc != SW_OK)
        return raise_rc(st, rc);
    Py_RETURN_NONE;
}

static PyObject *Manager_add_event(ManagerObject *m, PyObject *ev)
{
    sw_state *st = type_state(Py_TYPE(m));
    if (st == NULL)
        return NULL;
    if (!Py_IS_TYPE(ev, st->event_type)) {
        PyErr_Format(PyExc_TypeError,
                     "add_event() takes a spillway.Event, not %.100s",
                     Py_TYPE(ev)->tp_name);
        return NULL;
    }
    EventObject *e = (EventObject *)ev;
    int rc;
    NOGIL(rc = manager_add_nogil(m, &e, 1, 0));
    if (rc != SW_OK)
        return raise_rc(st, rc);
    Py_RETURN_NONE;
}

static PyObject *Manager_wait(ManagerObject *m, PyObject *unused)
{
    int rc, in_task = tl_task_queue == m->q;
    NOGIL(rc = manager_wait_nogil(m, in_task));
    drain_releases(); /* what the finished work held goes now */
    if (rc != SW_OK) {
        sw_state *st = type_state(Py_TYPE(m));
        return st ? raise_rc(st, rc) : NULL;
    }
    Py_RETURN_NONE;
}

/* A new manager of the same queue with the same events, in no map. */
static PyObject *Manager_copy(ManagerObject *m, PyObject *unused)
{
    sw_state *st = type_state(Py_TYPE(m));
    if (st == NULL)
        return NULL;
    ManagerObject *c = manager_new(st, m->q, m->device);
    if (c == NULL)
        return NULL;
    int rc = SW_OK;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&m->mu);
    for (int k = 0; k < 2 && rc == SW_OK; k++) {
        sw_event *ev;
        for (size_t i = 0; rc == SW_OK &&
                           (ev = sw_order_event(m->order, k, i)) != NULL;
             i++)
            rc = manager_add_locked(c, ev, k,
                                    k ? order_has(m->own, ev)
                                      : !order_has(m->foreign, ev));
    }
    pthread_mutex_unlock(&m->mu);
    Py_END_ALLOW_THREADS
    if (rc != SW_OK) {
        Py_DECREF(c);
        return raise_sw(st, rc);
    }
    return (PyObject *)c;
}

/* The pending events of one kind, as new Event objects. */
static PyObject *manager_events(ManagerObject *m, int host_task)
{
    sw_state *st = type_state(Py_TYPE(m));
    if (st == NULL)
        return NULL;
    sw_event **evs = NULL;
    unsigned char *foreign = NULL; /* of another queue (or unknown) */
    size_t n = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&m->mu);
    size_t counts[2] = {0, 0};
    rc = sw_order_counts(m->order, &counts[0], &counts[1]);
    n = rc == SW_OK ? counts[host_task] : 0;
    if (n > 0 && ((evs = malloc(n * sizeof *evs)) == NULL ||
                  (foreign = calloc(n, 1)) == NULL)) {
        rc = SWPY_NOMEM;
        n = 0;
    }
    for (size_t i = 0; i < n; i++) {
        evs[i] = sw_order_event(m->order, host_task, i);
        (void)sw_event_retain(evs[i]);
        foreign[i] = (unsigned char)(host_task ? !order_has(m->own, evs[i])
                                               : order_has(m->foreign,
                                                           evs[i]));
    }
    pthread_mutex_unlock(&m->mu);
    Py_END_ALLOW_THREADS
    PyObject *list = rc == SW_OK ? PyList_New((Py_ssize_t)n) : NULL;
    size_t i = 0;
    for (; list != NULL && i < n; i++) {
        PyObject *e = event_wrap(st, evs[i], foreign[i] ? NULL : m->q,
                                 host_task);
        if (e == NULL) {
            Py_CLEAR(list);
            i++;
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, e);
    }
    for (; i < n; i++) /* not handed to an Event */
        NOGIL((void)sw_event_release(evs[i]));
    free(evs);
    free(foreign);
    if (rc != SW_OK)
        return raise_rc(st, rc);
    return list;
}

static PyObject *Manager_get_submitted_events(ManagerObject *m, void *c)
{
    return manager_events(m, 0);
}

static PyObject *Manager_get_host_task_events(ManagerObject *m, void *c)
{
    return manager_events(m, 1);
}

static PyObject *manager_count(ManagerObject *m, int host_task)
{
    size_t counts[2] = {0, 0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&m->mu);
    rc = sw_order_counts(m->order, &counts[0], &counts[1]);
    pthread_mutex_unlock(&m->mu);
    Py_END_ALLOW_THREADS
    if (rc != SW_OK) {
        sw_state *st = type_state(Py_TYPE(m));
        return st ? raise_sw(st, rc) : NULL;
    }
    return PyLong_FromSize_t(counts[host_task]);
}

static PyObject *Manager_get_num_submitted_events(ManagerObject *m, void *c)
{
    return manager_count(m, 0);
}

static PyObject *Manager_get_num_host_task_events(ManagerObject *m, void *c)
{
    return manager_count(m, 1);
}

static PyObject *Manager_repr(ManagerObject *m)
{
    size_t counts[2] = {0, 0};
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&m->mu);
    (void)sw_order_counts(m->order, &counts[0], &counts[1]);
    pthread_mutex_unlock(&m->mu);
    Py_END_ALLOW_THREADS
    return PyUnicode_FromFormat(
        "<spillway.SequentialOrderManager of queue %p on %U: %zu submitted, "
        "%zu host-task event(s) pending>",
        (void *)m->q, m->device->name, counts[0], counts[1]);
}

static PyMethodDef Manager_methods[] = {
    {"add_event_pair", (PyCFunction)(void (*)(void))Manager_add_event_pair,
     METH_VARARGS,
     "add_event_pair(host_task_events, computation_events)\n--\n\n"
     "Record host-task events and computation (submitted) events: each an "
     "Event or a sequence of Events.  New work on the queue is ordered "
     "after the computation events; wait() waits for both."},
    {"add_event", (PyCFunction)(void (*)(void))Manager_add_event, METH_O,
     "add_event(ev)\n--\n\nRecord a computation (submitted) event: new work "
     "on the queue is ordered after it (an event of another queue is waited "
     "for on the host, without the GIL, before the work is submitted)."},
    {"wait", (PyCFunction)(void (*)(void))Manager_wait, METH_NOARGS,
     "wait()\n--\n\nWait for every recorded event (releasing the GIL), then "
     "forget them."},
    {"__copy__", (PyCFunction)(void (*)(void))Manager_copy, METH_NOARGS,
     "__copy__()\n--\n\nA new manager of the same queue holding the same "
     "events (in no map)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Manager_getset[] = {
    {"submitted_events", (getter)Manager_get_submitted_events, NULL,
     "The computation events not yet complete, a list of Events.", NULL},
    {"host_task_events", (getter)Manager_get_host_task_events, NULL,
     "The host-task events not yet complete, a list of Events.", NULL},
    {"num_submitted_events", (getter)Manager_get_num_submitted_events, NULL,
     "How many computation events are not yet complete (completed ones are "
     "pruned; never blocks).", NULL},
    {"num_host_task_events", (getter)Manager_get_num_host_task_events, NULL,
     "How many host-task events are not yet complete.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef Manager_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(ManagerObject, weakreflist),
     READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Manager_slots[] = {
    {Py_tp_doc, "The record of one queue's submitted work and host tasks "
                "(spillway.order_manager[queue]): operations with queue= "
                "are ordered after its computation events and record "
                "theirs in it."},
    {Py_tp_dealloc, Manager_dealloc},
    {Py_tp_traverse, Manager_traverse},
    {Py_tp_repr, Manager_repr},
    {Py_tp_methods, Manager_methods},
    {Py_tp_getset, Manager_getset},
    {Py_tp_members, Manager_members},
    {0, NULL},
};

static PyType_Spec Manager_spec = {
    .name = "spillway.SequentialOrderManager",
    .basicsize = sizeof(ManagerObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Manager_slots,
};

/* --- The per-thread map ------------------------------------------------ */

/* The weak reference's callback: the key Queue is gone.  Any thread, with
 * the GIL; never waits, never allocates. */
static PyObject *Entry_call(EntryObject *e, PyObject *args, PyObject *kwds)
{
    e->dead = 1;
    MapObject *m = e->map;
    if (m != NULL && !e->on_list) {
        e->on_list = 1;
        e->dead_next = m->dead;
        m->dead = e;
    }
    Py_RETURN_NONE;
}

static int Entry_traverse(EntryObject *e, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(e));
    Py_VISIT(e->mgr);
    Py_VISIT(e->wr);
    return 0;
}

/* Only for an entry already out of its map (in a map it is reachable). */
static int Entry_clear(EntryObject *e)
{
    e->map = NULL;
    Py_CLEAR(e->wr);
    Py_CLEAR(e->mgr);
    return 0;
}

static void Entry_dealloc(EntryObject *e)
{
    PyTypeObject *tp = Py_TYPE(e);
    PyObject_GC_UnTrack(e);
    (void)Entry_clear(e);
    tp->tp_free((PyObject *)e);
    Py_DECREF(tp);
}

static PyType_Slot Entry_slots[] = {
    {Py_tp_doc, "An entry of spillway.order_manager (internal)."},
    {Py_tp_call, Entry_call},
    {Py_tp_dealloc, Entry_dealloc},
    {Py_tp_traverse, Entry_traverse},
    {Py_tp_clear, Entry_clear},
    {0, NULL},
};

static PyType_Spec Entry_spec = {
    .name = "spillway._OrderEntry",
    .basicsize = sizeof(EntryObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Entry_slots,
};

static size_t map_home(const MapObject *m, const sw_queue *k)
{
    uint64_t h = (uint64_t)(uintptr_t)k * UINT64_C(0x9E3779B97F4A7C15);
    return (size_t)(h >> 40) & (m->cap - 1);
}

static EntryObject *map_find(const MapObject *m, const sw_queue *k)
{
    if (m->cap == 0)
        return NULL;
    for (size_t i = map_home(m, k);; i = (i + 1) & (m->cap - 1)) {
        EntryObject *e = m->slots[i];
        if (e == NULL || e->key == k)
            return e;
    }
}

static void map_place(MapObject *m, EntryObject *e)
{
    size_t i = map_home(m, e->key);
    while (m->slots[i] != NULL)
        i = (i + 1) & (m->cap - 1);
    m->slots[i] = e;
}

/* Insert e (taking the caller's reference); -1 without an exception when
 * no memory.  No Python code runs here. */
static int map_insert(MapObject *m, EntryObject *e)
{
    if ((m->n + 1) * 2 > m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 8;
        EntryObject **old = m->slots;
        size_t oldcap = m->cap;
        EntryObject **slots = PyMem_Calloc(cap, sizeof *slots);
        if (slots == NULL)
            return -1;
        m->slots = slots;
        m->cap = cap;
        for (size_t i = 0; i < oldcap; i++)
            if (old[i] != NULL)
                map_place(m, old[i]);
        PyMem_Free(old);
    }
    map_place(m, e);
    m->n++;
    return 0;
}

/* Take e out of the table (the caller takes over the table's reference).
 * Backward-shift deletion keeps every probe chain unbroken. */
static void map_remove(MapObject *m, EntryObject *e)
{
    size_t mask = m->cap - 1, i = map_home(m, e->key);
    while (m->slots[i] != e)
        i = (i + 1) & mask;
    m->slots[i] = NULL;
    m->n--;
    for (size_t j = (i + 1) & mask; m->slots[j] != NULL; j = (j + 1) & mask) {
        EntryObject *x = m->slots[j];
        size_t home = map_home(m, x->key);
        /* x may move into the hole unless its home lies after the hole. */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            m->slots[i] = x;
            m->slots[j] = NULL;
            i = j;
        }
    }
}

/* Take every entry out of m and drop them, waiting for nothing.  First
 * detach them all (so that no callback links them any more, and no weak
 * reference calls back) without releasing the GIL; only then drop the
 * managers, whose deallocation releases it. */
static void map_drop_all(MapObject *m)
{
    EntryObject **slots = m->slots;
    size_t cap = m->cap;
    m->slots = NULL;
    m->cap = m->n = 0;
    m->dead = NULL;
    for (size_t i = 0; i < cap; i++) {
        EntryObject *e = slots[i];
        if (e == NULL)
            continue;
        e->map = NULL;
        e->on_list = 0;
        e->dead_next = NULL;
        Py_CLEAR(e->wr);
    }
    for (size_t i = 0; i < cap; i++)
        Py_XDECREF(slots[i]);
    PyMem_Free(slots);
}

/* Drop the entries whose key died, whose manager is idle and referred to
 * by nothing but the entry.  Never waits: idleness is a query of each
 * event.  Entries still busy stay on the dead list. */
static void map_prune(MapObject *m)
{
    EntryObject *list = m->dead;
    m->dead = NULL;
    int any = 0;
    for (EntryObject *e = list; e != NULL; e = e->dead_next) {
        e->idle = e->dead && Py_REFCNT(e->mgr) == 1;
        any |= e->idle;
    }
    if (any) {
        /* Only this thread changes the table and these entries' fields
         * but `dead` (which a callback can only set, for a re-keyed entry
         * whose new key died: it is kept then, and seen next time). */
        Py_BEGIN_ALLOW_THREADS
        for (EntryObject *e = list; e != NULL; e = e->dead_next)
            if (e->idle)
                e->idle = (unsigned char)manager_idle_nogil(e->mgr);
        Py_END_ALLOW_THREADS
    }
    EntryObject *drop = NULL;
    while (list != NULL) {
        EntryObject *e = list;
        list = e->dead_next;
        e->dead_next = NULL;
        if (!e->dead) { /* taken over by an equal queue meanwhile */
            e->on_list = 0;
        } else if (e->idle && Py_REFCNT(e->mgr) == 1) {
            map_remove(m, e);
            e->on_list = 0;
            e->map = NULL;
            e->dead_next = drop;
            drop = e;
        } else {
            e->dead_next = m->dead;
            m->dead = e;
        }
    }
    /* The table is consistent: now deallocation may run (and release the
     * GIL). */
    while (drop != NULL) {
        EntryObject *e = drop;
        drop = e->dead_next;
        e->dead_next = NULL;
        Py_CLEAR(e->wr);
        Py_DECREF(e);
    }
}

/* An entry out of any map, with its weak reference broken. */
static void entry_discard(EntryObject *e)
{
    e->map = NULL;
    Py_CLEAR(e->wr);
    Py_DECREF(e);
}

/* The manager of q in map m (a borrowed reference: the map holds it).
 * Allocations can run the garbage collector and so arbitrary code, which
 * could look up (or clear) this very map: the table is searched again
 * after each of them, and nothing found before is trusted. */
static ManagerObject *map_get(sw_state *st, MapObject *m, QueueObject *q)
{
    if (m->dead != NULL)
        map_prune(m);
    for (int tries = 0; tries < 100; tries++) {
        EntryObject *e = map_find(m, q->q);
        if (e != NULL && !e->dead)
            return e->mgr;
        if (e != NULL) {
            /* The key died; the manager stayed (work pending, or referred
             * to elsewhere): this equal queue takes it over. */
            Py_INCREF(e);
            PyObject *wr = PyWeakref_NewRef((PyObject *)q, (PyObject *)e);
            if (wr == NULL) {
                Py_DECREF(e);
                return NULL;
            }
            if (map_find(m, q->q) == e && e->dead) {
                PyObject *old = e->wr;
                e->wr = wr;
                e->dead = 0; /* stays linked until the next prune */
                Py_XDECREF(old);
                ManagerObject *mgr = e->mgr;
                Py_DECREF(e);
                return mgr;
            }
            Py_DECREF(wr);
            Py_DECREF(e);
            continue;
        }
        ManagerObject *mgr = manager_new(st, q->q, q->device);
        if (mgr == NULL)
            return NULL;
        EntryObject *ne = PyObject_GC_New(EntryObject, st->entry_type);
        if (ne == NULL) {
            Py_DECREF(mgr);
            return NULL;
        }
        ne->key = q->q;
        ne->mgr = mgr;
        ne->wr = NULL;
        ne->map = m;
        ne->dead_next = NULL;
        ne->dead = ne->on_list = ne->idle = 0;
        PyObject_GC_Track(ne);
        ne->wr = PyWeakref_NewRef((PyObject *)q, (PyObject *)ne);
        if (ne->wr == NULL) {
            entry_discard(ne);
            return NULL;
        }
        if (map_find(m, q->q) != NULL) {
            entry_discard(ne);
            continue;
        }
        if (map_insert(m, ne) < 0) {
            entry_discard(ne);
            PyErr_NoMemory();
            return NULL;
        }
        return mgr;
    }
    PyErr_SetString(PyExc_RuntimeError,
                    "spillway.order_manager: the map kept changing during a "
                    "lookup");
    return NULL;
}

static int Map_traverse(MapObject *m, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(m));
    for (size_t i = 0; i < m->cap; i++)
        Py_VISIT(m->slots[i]);
    return 0;
}

static int Map_clear(MapObject *m)
{
    map_drop_all(m);
    return 0;
}

/* At thread exit (the thread state's dict is cleared): the managers are
 * dropped without waiting. */
static void Map_dealloc(MapObject *m)
{
    PyTypeObject *tp = Py_TYPE(m);
    PyObject_GC_UnTrack(m);
    map_drop_all(m);
    tp->tp_free((PyObject *)m);
    Py_DECREF(tp);
}

static PyType_Slot Map_slots[] = {
    {Py_tp_doc, "One thread's order managers (internal)."},
    {Py_tp_dealloc, Map_dealloc},
    {Py_tp_traverse, Map_traverse},
    {Py_tp_clear, Map_clear},
    {0, NULL},
};

static PyType_Spec Map_spec = {
    .name = "spillway._OrderMap",
    .basicsize = sizeof(MapObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Map_slots,
};

/* This thread's map (borrowed: the thread state's dict holds it, under the
 * key `om`, spillway.order_manager itself).  NULL without an exception
 * when there is none and create is 0. */
static MapObject *thread_map(sw_state *st, PyObject *om, int create)
{
    PyObject *d = PyThreadState_GetDict();
    if (d == NULL) {
        if (create && !PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError,
                            "spillway.order_manager: this thread has no "
                            "thread state dictionary");
        return NULL;
    }
    PyObject *m = PyDict_GetItemWithError(d, om);
    if (m != NULL || PyErr_Occurred() || !create)
        return (MapObject *)m;
    MapObject *nm = PyObject_GC_New(MapObject, st->map_type);
    if (nm == NULL)
        return NULL;
    nm->slots = NULL;
    nm->cap = nm->n = 0;
    nm->dead = NULL;
    PyObject_GC_Track(nm);
    int r = PyDict_SetItem(d, om, (PyObject *)nm);
    Py_DECREF(nm);
    if (r < 0)
        return NULL;
    /* Borrowed from the dict (looked up again: a collection during
     * SetItem could have changed it). */
    m = PyDict_GetItemWithError(d, om);
    if (m == NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError,
                        "spillway.order_manager: this thread's map vanished");
    return (MapObject *)m;
}

/* The manager of queue q for this thread: a new reference. */
static ManagerObject *manager_of(sw_state *st, QueueObject *q)
{
    if (!state_alive(st))
        return NULL;
    drain_releases();
    MapObject *m = thread_map(st, st->order_manager, 1);
    if (m == NULL)
        return NULL;
    Py_INCREF(m);
    ManagerObject *mgr = map_get(st, m, q);
    Py_XINCREF(mgr);
    Py_DECREF(m);
    return mgr;
}

/* Under memory pressure (Queue() could not get device memory): wait,
 * without the GIL, for the work recorded by this thread's managers of dead
 * queues, then drop those that nothing else refers to.  Returns how many
 * were dropped, or -1 with an exception set.  Never called from a lookup
 * or a weak reference's callback, which must not wait. */
static int relieve_dead_managers(sw_state *st)
{
    if (!state_alive(st))
        return -1;
    MapObject *m = thread_map(st, st->order_manager, 0);
    if (m == NULL)
        return PyErr_Occurred() ? -1 : 0;
    Py_INCREF(m);
    size_t n = 0, before = m->n;
    ManagerObject **dead = m->cap ? PyMem_Calloc(m->cap, sizeof *dead)
                                  : NULL;
    if (m->cap && dead == NULL) {
        Py_DECREF(m);
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        EntryObject *e = m->slots[i];
        if (e != NULL && e->dead)
            dead[n++] = (ManagerObject *)Py_NewRef(e->mgr);
    }
    sw_queue *in_task = tl_task_queue;
    Py_BEGIN_ALLOW_THREADS
    for (size_t i = 0; i < n; i++)
        (void)manager_wait_nogil(dead[i], dead[i]->q == in_task);
    Py_END_ALLOW_THREADS
    for (size_t i = 0; i < n; i++)
        Py_DECREF(dead[i]);
    PyMem_Free(dead);
    drain_releases();
    if (m->dead != NULL)
        map_prune(m);
    size_t dropped = before > m->n ? before - m->n : 0;
    Py_DECREF(m);
    return (int)(dropped > INT_MAX ? INT_MAX : dropped);
}

/* --- spillway.order_manager -------------------------------------------- */

static PyObject *OMap_subscript(PyObject *self, PyObject *key)
{
    sw_state *st = type_state(Py_TYPE(self));
    if (st == NULL)
        return NULL;
    if (!Py_IS_TYPE(key, st->queue_type)) {
        PyErr_Format(PyExc_TypeError,
                     "spillway.order_manager keys are spillway.Queue "
                     "objects, not %.100s",
                     Py_TYPE(key)->tp_name);
        return NULL;
    }
    return (PyObject *)manager_of(st, (QueueObject *)key);
}

static Py_ssize_t OMap_length(PyObject *self)
{
    sw_state *st = type_state(Py_TYPE(self));
    if (st == NULL)
        return -1;
    MapObject *m = thread_map(st, self, 0);
    if (m == NULL)
        return PyErr_Occurred() ? -1 : 0;
    return (Py_ssize_t)m->n;
}

static int OMap_contains(PyObject *self, PyObject *key)
{
    sw_state *st = type_state(Py_TYPE(self));
    if (st == NULL)
        return -1;
    if (!Py_IS_TYPE(key, st->queue_type))
        return 0;
    MapObject *m = thread_map(st, self, 0);
    if (m == NULL)
        return PyErr_Occurred() ? -1 : 0;
    return map_find(m, ((QueueObject *)key)->q) != NULL;
}

/* Wait for every manager of this thread, then drop them all.  The entries
 * are taken out of the map first, so that the map is empty (and usable)
 * while this thread waits without the GIL. */
static PyObject *OMap_clear(PyObject *self, PyObject *unused)
{
    sw_state *st = type_state(Py_TYPE(self));
    if (st == NULL)
        return NULL;
    MapObject *m = thread_map(st, self, 0);
    if (m == NULL)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    EntryObject **slots = m->slots;
    size_t cap = m->cap;
    m->slots = NULL;
    m->cap = m->n = 0;
    m->dead = NULL;
    for (size_t i = 0; i < cap; i++) {
        EntryObject *e = slots[i];
        if (e != NULL) {
            e->map = NULL;
            e->on_list = 0;
            e->dead_next = NULL;
        }
    }
    int rc = SW_OK;
    sw_queue *in_task = tl_task_queue;
    Py_BEGIN_ALLOW_THREADS
    for (size_t i = 0; i < cap; i++) {
        if (slots[i] == NULL)
            continue;
        int r = manager_wait_nogil(slots[i]->mgr,
                                   slots[i]->mgr->q == in_task);
        if (rc == SW_OK)
            rc = r;
    }
    Py_END_ALLOW_THREADS
    for (size_t i = 0; i < cap; i++)
        if (slots[i] != NULL)
            Py_CLEAR(slots[i]->wr);
    for (size_t i = 0; i < cap; i++)
        Py_XDECREF(slots[i]);
    PyMem_Free(slots);
    drain_releases();
    if (rc != SW_OK)
        return raise_rc(st, rc);
    Py_RETURN_NONE;
}

static PyObject *OMap_repr(PyObject *self)
{
    Py_ssize_t n = OMap_length(self);
    if (n < 0)
        return NULL;
    return PyUnicode_FromFormat(
        "<spillway.order_manager: %zd manager(s) in this thread>", n);
}

static int OMap_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static void OMap_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyMethodDef OMap_methods[] = {
    {"clear", (PyCFunction)(void (*)(void))OMap_clear, METH_NOARGS,
     "clear()\n--\n\nWait for every order manager of this thread (releasing "
     "the GIL), then drop them all."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot OMap_slots[] = {
    {Py_tp_doc, "spillway.order_manager: order_manager[queue] is this "
                "thread's SequentialOrderManager of the queue.  The map is "
                "per thread and holds queues by weak reference: the manager "
                "of a queue that is gone is dropped at a later lookup once "
                "its work has completed; until then an equal queue gets it. "
                " len() counts this thread's managers."},
    {Py_tp_dealloc, OMap_dealloc},
    {Py_tp_traverse, OMap_traverse},
    {Py_tp_repr, OMap_repr},
    {Py_tp_methods, OMap_methods},
    {Py_mp_subscript, OMap_subscript},
    {Py_mp_length, OMap_length},
    {Py_sq_contains, OMap_contains},
    {0, NULL},
};

static PyType_Spec OMap_spec = {
    .name = "spillway.OrderManagerMap",
    .basicsize = sizeof(OMapObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = OMap_slots,
};

/* --- Operations on a queue --------------------------------------------- */

enum { OP_FILL, OP_ADD, OP_SCALE, OP_AXPY };

typedef struct {
    int kind;
    sw_buffer *out, *a, *b; /* AXPY: out is y, a is x */
    sw_scalar s;
    sw_dtype dtype;
    size_t n;
} op_desc;

/* Without the GIL.  q NULL: the device's default queue. */
static int op_submit(sw_queue *q, const op_desc *op)
{
    switch (op->kind) {
    case OP_FILL:
        return q ? sw_op_fill_q(q, op->out, op->dtype, op->n, op->s)
                 : sw_op_fill(op->out, op->dtype, op->n, op->s);
    case OP_ADD:
        return q ? sw_op_add_q(q, op->out, op->a, op->b, op->dtype, op->n)
                 : sw_op_add(op->out, op->a, op->b, op->dtype, op->n);
    case OP_SCALE:
        return q ? sw_op_scale_q(q, op->out, op->a, op->s, op->dtype, op->n)
                 : sw_op_scale(op->out, op->a, op->s, op->dtype, op->n);
    default:
        return q ? sw_op_axpy_q(q, op->s, op->a, op->out, op->dtype, op->n)
                 : sw_op_axpy(op->s, op->a, op->out, op->dtype, op->n);
    }
}

/* queue= argument: *out is NULL (absent or None: the default queue) or the
 * Queue, which must be on device d. */
static int queue_arg(sw_state *st, PyObject *o, DeviceObject *d,
                     const char *fname, QueueObject **out)
{
    *out = NULL;
    if (absent(o))
        return 0;
    if (!Py_IS_TYPE(o, st->queue_type)) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): queue must be a spillway.Queue or None, not "
                     "%.100s",
                     fname, Py_TYPE(o)->tp_name);
        return -1;
    }
    QueueObject *q = (QueueObject *)o;
    if (queue_check_open(q) < 0)
        return -1;
    if (d != NULL && q->device != d) {
        PyErr_Format(PyExc_ValueError,
                     "%s(): the queue is on %U and the arrays on %U", fname,
                     q->device->name, d->name);
        return -1;
    }
    *out = q;
    return 0;
}

/* Run op on queue (NULL: the device's default queue, the plain C call).
 * On a queue, as dpnp does with dpctl's order manager: the work is
 * submitted after the foreign events of this thread's manager of the
 * queue, its event is recorded there together with that of a host task
 * holding keep[0..nkeep) (the Arrays it uses) until the work has
 * completed.  -1 with an exception set on failure. */
static int do_op(sw_state *st, QueueObject *queue, const op_desc *op,
                  PyObject *const *keep, int nkeep)
{
    int rc;
    if (queue == NULL) {
        NOGIL(rc = op_submit(NULL, op));
        if (rc != SW_OK) {
            raise_sw(st, rc);
            return -1;
        }
        return 0;
    }
    ManagerObject *m = manager_of(st, queue);
    if (m == NULL)
        return -1;
    sw_queue *q = queue->q;
    pytask *t = pytask_new(NULL, keep, nkeep, q);
    if (t == NULL) {
        Py_DECREF(m);
        return -1;
    }
    int queued = 0;
    char msg[512] = "";
    Py_BEGIN_ALLOW_THREADS
    rc = manager_wait_foreign_nogil(m);
    if (rc == SW_OK)
        rc = op_submit(q, op);
    if (rc == SW_OK) {
        sw_event *ev = NULL, *ht = NULL;
        rc = sw_queue_record_event(q, &ev);
        if (rc == SW_OK && (rc = pytask_submit(q, t, &ht)) == SW_OK)
            queued = 1;
        if (rc == SW_OK) {
            pthread_mutex_lock(&m->mu);
            rc = manager_add_locked(m, ev, 0, 1);
            if (rc == SW_OK)
                rc = manager_add_locked(m, ht, 1, 1);
            pthread_mutex_unlock(&m->mu);
        }
        (void)sw_event_release(ev);
        (void)sw_event_release(ht);
        if (rc != SW_OK) {
            /* Submitted but not recorded (no host memory): finish the work
             * here, so that nothing is left unordered or unkept; the
             * failure's message is kept for the exception. */
            snprintf(msg, sizeof msg, "%s", sw_last_error());
            (void)sw_queue_synchronize(q);
        }
    }
    Py_END_ALLOW_THREADS
    if (!queued)
        pytask_free(t);
    Py_DECREF(m);
    if (rc != SW_OK) {
        if (msg[0] != '\0')
            raise_sw_detail(st, rc, msg);
        else
            raise_rc(st, rc);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * Array
 * ---------------------------------------------------------------------- */

/* The Array wrapping buf (whose reference it takes: freed on failure). */
static PyObject *array_wrap(sw_state *st, DeviceObject *d, sw_buffer *buf,
                            sw_dtype dt, int ndim, const Py_ssize_t *shape,
                            size_t nelem)
{
    ArrayObject *a = state_alive(st) ? PyObject_GC_NewVar(
                                           ArrayObject, st->array_type, ndim)
                                     : NULL;
    if (a == NULL) {
        NOGIL((void)sw_buffer_free(buf));
        return NULL;
    }
    a->buf = buf;
    a->device = (DeviceObject *)Py_NewRef(d);
    a->weakreflist = NULL;
    a->nelem = nelem;
    a->nbytes = nelem * dtypes[dt].size;
    a->dtype = dt;
    if (ndim > 0)
        memcpy(a->shape, shape, (size_t)ndim * sizeof(Py_ssize_t));
    device_use(d);
    PyObject_GC_Track(a);
    if (st->track != NULL) {
        PyObject *wr = PyWeakref_NewRef((PyObject *)a, NULL);
        if (wr == NULL || PyList_Append(st->track, wr) < 0) {
            Py_XDECREF(wr);
            Py_DECREF(a);
            return NULL;
        }
        Py_DECREF(wr);
    }
    return (PyObject *)a;
}

static int array_check_device(ArrayObject *a)
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

/* After an operation: while a DLPack export of the device's memory lives,
 * the host may be reading it, so operations complete before returning. */
static int sync_if_exported(sw_state *st, DeviceObject *d)
{
    if (d->ctx == NULL || atomic_load(&d->ctx->exports) == 0)
        return 0;
    sw_device *dev = d->dev;
    int rc;
    NOGIL(rc = sw_device_synchronize(dev));
    if (rc != SW_OK) {
        raise_sw(st, rc);
        return -1;
    }
    return 0;
}

/* Allocate an Array (the core of empty, zeros, asarray and the ops). */
static PyObject *array_alloc(sw_state *st, DeviceObject *d, sw_dtype dt,
                             int ndim, const Py_ssize_t *shape, size_t nelem,
                             const char *tag)
{
    sw_buffer *buf = NULL;
    sw_device *dev = d->dev;
    size_t nbytes = nelem * dtypes[dt].size;
    int rc;
    device_use(d); /* a close() meanwhile waits for this call */
    NOGIL(rc = sw_buffer_alloc(dev, nbytes, tag, &buf));
    PyObject *r = rc == SW_OK
                      ? array_wrap(st, d, buf, dt, ndim, shape, nelem)
                      : raise_sw(st, rc);
    device_unuse(d);
    return r;
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
            tl_released++;
    }
    DeviceObject *d = a->device;
    a->device = NULL;
    if (d != NULL) {
        device_unuse(d);
        Py_DECREF(d);
    }
    tp->tp_free((PyObject *)a);
    Py_DECREF(tp);
}

static PyObject *Array_repr(ArrayObject *a)
{
    PyObject *shape = shape_tuple(a->shape, ARRAY_NDIM(a));
    if (shape == NULL)
        return NULL;
    PyObject *r = PyUnicode_FromFormat(
        "spillway.Array(shape=%R, dtype=%s, device=%R%s)", shape,
        dtypes[a->dtype].name, a->device->name,
        a->device->closed ? ", device closed" : "");
    Py_DECREF(shape);
    return r;
}

static PyObject *Array_get_shape(ArrayObject *a, void *c)
{
    return shape_tuple(a->shape, ARRAY_NDIM(a));
}

static PyObject *Array_get_ndim(ArrayObject *a, void *c)
{
    return PyLong_FromLong(ARRAY_NDIM(a));
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
    return PyLong_FromSize_t(dtypes[a->dtype].size);
}

static PyObject *Array_get_dtype(ArrayObject *a, void *c)
{
    sw_state *st = type_state(Py_TYPE(a));
    if (st == NULL)
        return NULL;
    return Py_XNewRef(np_dtype(st, a->dtype));
}

static PyObject *Array_get_device(ArrayObject *a, void *c)
{
    return Py_NewRef(a->device);
}

static PyObject *Array_get_is_spilled(ArrayObject *a, void *c)
{
    if (array_check_device(a) < 0)
        return NULL;
    sw_buffer_state state = SW_RESIDENT;
    int rc;
    NOGIL(rc = sw_buffer_state_get(a->buf, &state));
    if (rc != SW_OK) {
        sw_state *st = type_state(Py_TYPE(a));
        return st ? raise_sw(st, rc) : NULL;
    }
    return PyBool_FromLong(state == SW_SPILLED);
}

static PyObject *Array_get_tag(ArrayObject *a, void *c)
{
    if (array_check_device(a) < 0)
        return NULL;
    char tag[SW_TAG_MAX + 1];
    int rc;
    NOGIL(rc = sw_buffer_tag(a->buf, tag, sizeof tag));
    if (rc != SW_OK) {
        sw_state *st = type_state(Py_TYPE(a));
        return st ? raise_sw(st, rc) : NULL;
    }
    if (tag[0] == '\0')
        Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(tag, (Py_ssize_t)strlen(tag), "replace");
}

/* Copy the array into a new NumPy array. */
static PyObject *Array_numpy(ArrayObject *a, PyObject *unused)
{
    sw_state *st = type_state(Py_TYPE(a));
    if (st == NULL || array_check_device(a) < 0)
        return NULL;
    PyObject *np = get_numpy(st);
    if (np == NULL)
        return NULL;
    PyObject *dt = np_dtype(st, a->dtype);
    if (dt == NULL)
        return NULL;
    PyObject *shape = shape_tuple(a->shape, ARRAY_NDIM(a));
    if (shape == NULL)
        return NULL;
    PyObject *out = PyObject_CallMethod(np, "empty", "OO", shape, dt);
    Py_DECREF(shape);
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
        raise_sw(st, rc);
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

/* __array__(dtype=None, copy=None): NumPy's np.asarray(a) gets a copy. */
static PyObject *Array_array(ArrayObject *a, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"dtype", "copy"};
    PyObject *v[2];
    if (parse_args("__array__", args, nargs, kwnames, names, 2, 2, 0, v) < 0)
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
    if (out == NULL || absent(v[0]))
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
    if (parse_args("fill", args, nargs, kwnames, names, 2, 1, 1, v) < 0)
        return NULL;
    sw_state *st = type_state(Py_TYPE(a));
    if (st == NULL || array_check_device(a) < 0)
        return NULL;
    QueueObject *q;
    sw_scalar s;
    if (queue_arg(st, v[1], a->device, "fill", &q) < 0 ||
        scalar_from_py(v[0], a->dtype, &s, "fill value") < 0)
        return NULL;
    op_desc op = {.kind = OP_FILL, .out = a->buf, .s = s, .dtype = a->dtype,
                  .n = a->nelem};
    PyObject *keep[1] = {(PyObject *)a};
    if (do_op(st, q, &op, keep, 1) < 0 ||
        sync_if_exported(st, a->device) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* reshape(*shape) or reshape(shape): an Array sharing this one's buffer
 * (one more reference to the same handle).  One dimension may be -1. */
static PyObject *Array_reshape(ArrayObject *a, PyObject *args)
{
    sw_state *st = type_state(Py_TYPE(a));
    if (st == NULL || array_check_device(a) < 0)
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
        PyObject *want = shape_tuple(shape, (int)n);
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
        return raise_sw(st, rc);
    return array_wrap(st, a->device, a->buf, a->dtype, (int)n, shape,
                      a->nelem);
}

static Py_ssize_t Array_length(ArrayObject *a)
{
    if (ARRAY_NDIM(a) == 0) {
        PyErr_SetString(PyExc_TypeError, "len() of a 0-d array");
        return -1;
    }
    return a->shape[0];
}

/* Element offsets: key -> (number of leading indices, byte offset).
 * Returns the count of indices consumed, or -1. */
static int index_offset(ArrayObject *a, PyObject *key, size_t *byte_off)
{
    int ndim = ARRAY_NDIM(a);
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
    *byte_off = off * dtypes[a->dtype].size;
    return nidx;
}

/* A view of elements [off, off + nelem) with the given shape. */
static PyObject *array_view(sw_state *st, ArrayObject *a, size_t byte_off,
                            int ndim, const Py_ssize_t *shape, size_t nelem)
{
    sw_buffer *v = NULL;
    int rc;
    NOGIL(rc = sw_buffer_view(a->buf, byte_off, nelem * dtypes[a->dtype].size,
                              &v));
    if (rc != SW_OK)
        return raise_sw(st, rc);
    return array_wrap(st, a->device, v, a->dtype, ndim, shape, nelem);
}

static PyObject *Array_subscript(ArrayObject *a, PyObject *key)
{
    sw_state *st = type_state(Py_TYPE(a));
    if (st == NULL || array_check_device(a) < 0)
        return NULL;
    int ndim = ARRAY_NDIM(a);
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
        return array_view(st, a, (size_t)start * row * dtypes[a->dtype].size,
                          ndim, shape, (size_t)len * row);
    }
    size_t off = 0;
    int nidx = index_offset(a, key, &off);
    if (nidx < 0)
        return NULL;
    if (nidx == ndim) {
        unsigned char elem[8];
        int rc;
        NOGIL(rc = sw_buffer_read(a->buf, off, elem, dtypes[a->dtype].size));
        if (rc != SW_OK)
            return raise_sw(st, rc);
        return scalar_to_py(elem, a->dtype);
    }
    size_t nelem = 1;
    for (int i = nidx; i < ndim; i++)
        nelem *= (size_t)a->shape[i];
    return array_view(st, a, off, ndim - nidx, a->shape + nidx, nelem);
}

/* a[i, ...] = value for one element. */
static int Array_ass_subscript(ArrayObject *a, PyObject *key, PyObject *value)
{
    sw_state *st = type_state(Py_TYPE(a));
    if (st == NULL || array_check_device(a) < 0)
        return -1;
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "array elements cannot be deleted");
        return -1;
    }
    size_t off = 0;
    int nidx = index_offset(a, key, &off);
    if (nidx < 0)
        return -1;
    if (nidx != ARRAY_NDIM(a)) {
        PyErr_SetString(PyExc_TypeError,
                        "only single elements can be assigned (index every "
                        "dimension); use fill() on a view for more");
        return -1;
    }
    sw_scalar v;
    if (scalar_from_py(value, a->dtype, &v, "value") < 0)
        return -1;
    unsigned char elem[8];
    scalar_store(elem, a->dtype, v);
    int rc;
    NOGIL(rc = sw_buffer_write(a->buf, off, elem, dtypes[a->dtype].size));
    if (rc != SW_OK) {
        raise_sw(st, rc);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * DLPack export
 *
 * On a device whose memory the host can address (the simulated device),
 * __dlpack__ hands out the array's memory itself, under an exposure lease
 * (sw_buffer_expose): while the consumer (e.g. the NumPy array made by
 * numpy.from_dlpack) lives, the buffer is never spilled and its memory
 * stays allocated even if the Array goes; the consumer's deleter releases
 * the lease, after which the buffer is spillable again.  The deleter may
 * run on any thread, with or without the GIL: it touches no Python object.
 * With copy=True, or to the CPU from a device the host cannot address,
 * the export is a host copy instead.
 * ---------------------------------------------------------------------- */

typedef struct export_ctx {
    union {
        DLManagedTensor legacy;
        DLManagedTensorVersioned v1;
    } mt;
    sw_lease *lease; /* zero-copy exports */
    void *host;      /* copies */
    devctx *ctx;     /* zero-copy exports: counts in ctx->exports */
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
            tl_released++;
    }
    free(e->host);
    if (e->ctx != NULL) {
        atomic_fetch_sub(&e->ctx->exports, 1);
        ctx_unref(e->ctx);
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

static PyObject *Array_dlpack_device(ArrayObject *a, PyObject *unused)
{
    DLDevice dev = dl_device_of(a->device);
    return Py_BuildValue("(ii)", (int)dev.device_type, (int)dev.device_id);
}

static PyObject *Array_dlpack(ArrayObject *a, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"stream", "max_version", "dl_device",
                                        "copy"};
    PyObject *v[4];
    if (parse_args("__dlpack__", args, nargs, kwnames, names, 4, 1, 0, v) < 0)
        return NULL;
    sw_state *st = type_state(Py_TYPE(a));
    if (st == NULL || array_check_device(a) < 0)
        return NULL;
    if (!absent(v[0])) {
        PyErr_SetString(PyExc_BufferError,
                        "spillway exports host-addressable memory as a CPU "
                        "tensor: stream must be None");
        return NULL;
    }
    int versioned = 0;
    if (!absent(v[1])) {
        long major = -1;
        if (PyTuple_Check(v[1]) && PyTuple_GET_SIZE(v[1]) == 2)
            major = PyLong_AsLong(PyTuple_GET_ITEM(v[1], 0));
        if (major == -1 && PyErr_Occurred())
            return NULL;
        if (major < 0) {
            PyErr_SetString(PyExc_TypeError,
                            "max_version must be a (major, minor) tuple");
            return NULL;
        }
        versioned = major >= 1;
    }
    int copy = -1; /* None: copy only if needed */
    if (!absent(v[3])) {
        copy = PyObject_IsTrue(v[3]);
        if (copy < 0)
            return NULL;
    }
    DLDevice own = dl_device_of(a->device);
    DLDevice target = own;
    if (!absent(v[2])) {
        int t = 0, id = 0;
        if (!PyTuple_Check(v[2]) ||
            !PyArg_ParseTuple(v[2], "ii", &t, &id)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "dl_device must be a (device_type, device_id) "
                         "tuple of integers, not %R",
                         v[2]);
            return NULL;
        }
        target.device_type = (DLDeviceType)t;
        target.device_id = id;
    }
    int addressable = host_addressable(a->device);
    int same = target.device_type == own.device_type &&
               target.device_id == own.device_id;
    int to_cpu = target.device_type == kDLCPU && target.device_id == 0;
    int do_copy;
    if (same && addressable) {
        do_copy = copy == 1;
    } else if (to_cpu && copy != 0) {
        do_copy = 1;
    } else {
        PyErr_Format(PyExc_BufferError,
                     "cannot export an array on %U to DLPack device (%d, %d)"
                     "%s: spillway exports host-addressable memory, or a "
                     "host copy (copy=True, dl_device=(1, 0))",
                     a->device->name, (int)target.device_type,
                     (int)target.device_id,
                     copy == 0 ? " without a copy" : "");
        return NULL;
    }

    int ndim = ARRAY_NDIM(a);
    export_ctx *e = calloc(1, sizeof *e);
    if (e == NULL)
        return PyErr_NoMemory();
    void *data = NULL;
    int rc = SW_OK;
    if (do_copy) {
        e->host = malloc(a->nbytes ? a->nbytes : 1);
        if (e->host == NULL) {
            free(e);
            return PyErr_NoMemory();
        }
        if (a->nbytes > 0)
            NOGIL(rc = sw_buffer_read(a->buf, 0, e->host, a->nbytes));
        data = e->host;
    } else {
        sw_devmem mem = {0, 0};
        sw_lease *lease = NULL;
        sw_device *dev = a->device->dev;
        /* The lease first (the buffer is restored if spilled and stays
         * put), then wait for queued work on it to finish. */
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
        data = (void *)(mem.base + mem.offset);
    }
    if (rc != SW_OK) {
        raise_sw(st, rc);
        export_free(e);
        return NULL;
    }
    if (!do_copy) {
        e->ctx = a->device->ctx;
        ctx_ref(e->ctx);
        atomic_fetch_add(&e->ctx->exports, 1);
    }

    DLTensor *t = versioned ? &e->mt.v1.dl_tensor : &e->mt.legacy.dl_tensor;
    int64_t *shape = e->dims, *strides = e->dims + SW_PY_MAXDIMS;
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        shape[i] = (int64_t)a->shape[i];
        strides[i] = stride;
        stride *= a->shape[i] > 0 ? (int64_t)a->shape[i] : 1;
    }
    t->data = data;
    t->device = do_copy ? (DLDevice){kDLCPU, 0} : own;
    t->ndim = ndim;
    t->dtype.code = dtypes[a->dtype].dl_code;
    t->dtype.bits = (uint8_t)(8 * dtypes[a->dtype].size);
    t->dtype.lanes = 1;
    t->shape = shape;
    t->strides = strides;
    t->byte_offset = 0;

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

static PyMethodDef Array_methods[] = {
    {"numpy", (PyCFunction)(void (*)(void))Array_numpy, METH_NOARGS,
     "numpy()\n--\n\nA NumPy copy of the array (a host read: a spilled "
     "array is read from its host copy and stays spilled)."},
    {"fill", (PyCFunction)(void (*)(void))Array_fill,
     METH_FASTCALL | METH_KEYWORDS,
     "fill(value, *, queue=None)\n--\n\nSet every element to value, on the "
     "device (on queue, when given)."},
    {"reshape", (PyCFunction)(void (*)(void))Array_reshape, METH_VARARGS,
     "reshape(*shape)\n--\n\nA view with another shape on the same buffer "
     "(one dimension may be -1)."},
    {"__array__", (PyCFunction)(void (*)(void))Array_array,
     METH_FASTCALL | METH_KEYWORDS,
     "__array__(dtype=None, copy=None)\n--\n\nA NumPy copy."},
    {"__dlpack__", (PyCFunction)(void (*)(void))Array_dlpack,
     METH_FASTCALL | METH_KEYWORDS,
     "__dlpack__(stream=None, *, max_version=None, dl_device=None, "
     "copy=None)\n--\n\n"
     "Export through DLPack.  On a host-addressable device the consumer "
     "gets the array's memory under an exposure lease: the buffer does "
     "not spill while the consumer lives.  copy=True exports a host copy."},
    {"__dlpack_device__", (PyCFunction)(void (*)(void))Array_dlpack_device, METH_NOARGS,
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
    {Py_mp_length, Array_length},
    {Py_mp_subscript, Array_subscript},
    {Py_mp_ass_subscript, Array_ass_subscript},
    {0, NULL},
};

static PyType_Spec Array_spec = {
    .name = "spillway.Array",
    .basicsize = sizeof(ArrayObject),
    .itemsize = sizeof(Py_ssize_t),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Array_slots,
};

/* ------------------------------------------------------------------------
 * memory_peak(): a context manager over a peak scope
 * ---------------------------------------------------------------------- */

static int Peak_traverse(PeakObject *p, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(p));
    Py_VISIT(p->device);
    return 0;
}

static void peak_end(PeakObject *p)
{
    if (p->stage == 1 && p->scope != NULL) {
        sw_peak_scope *s = p->scope;
        uint64_t peak = 0;
        int rc;
        p->scope = NULL;
        NOGIL(rc = sw_peak_scope_end(s, &peak));
        p->peak = rc == SW_OK ? peak : 0;
        p->stage = 2;
        device_unuse(p->device);
    }
}

static void Peak_dealloc(PeakObject *p)
{
    PyTypeObject *tp = Py_TYPE(p);
    PyObject_GC_UnTrack(p);
    if (p->device != NULL)
        peak_end(p);
    Py_CLEAR(p->device);
    tp->tp_free((PyObject *)p);
    Py_DECREF(tp);
}

static PyObject *Peak_enter(PeakObject *p, PyObject *unused)
{
    if (p->stage != 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "a memory_peak() scope can be entered only once");
        return NULL;
    }
    sw_state *st = type_state(Py_TYPE(p));
    if (st == NULL || device_check_open(p->device) < 0)
        return NULL;
    sw_peak_scope *s = NULL;
    sw_device *dev = p->device->dev;
    int rc;
    NOGIL(rc = sw_peak_scope_begin(dev, &s));
    if (rc != SW_OK)
        return raise_sw(st, rc);
    p->scope = s;
    p->stage = 1;
    device_use(p->device);
    return Py_NewRef(p);
}

static PyObject *Peak_exit(PeakObject *p, PyObject *args)
{
    peak_end(p);
    Py_RETURN_FALSE;
}

static PyObject *Peak_get_bytes(PeakObject *p, void *c)
{
    if (p->stage == 0)
        Py_RETURN_NONE;
    if (p->stage == 2)
        return PyLong_FromUnsignedLongLong(p->peak);
    sw_peak_scope *s = p->scope;
    uint64_t peak = 0;
    int rc;
    NOGIL(rc = sw_peak_scope_peak(s, &peak));
    if (rc != SW_OK) {
        sw_state *st = type_state(Py_TYPE(p));
        return st ? raise_sw(st, rc) : NULL;
    }
    return PyLong_FromUnsignedLongLong(peak);
}

static PyObject *Peak_get_device(PeakObject *p, void *c)
{
    return Py_NewRef(p->device);
}

static PyObject *Peak_repr(PeakObject *p)
{
    static const char *const stages[] = {"not entered", "open", "closed"};
    if (p->stage == 2)
        return PyUnicode_FromFormat("memory_peak(%R, bytes=%llu)",
                                    p->device->name,
                                    (unsigned long long)p->peak);
    return PyUnicode_FromFormat("memory_peak(%R, %s)", p->device->name,
                                stages[p->stage]);
}

static PyMethodDef Peak_methods[] = {
    {"__enter__", (PyCFunction)(void (*)(void))Peak_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))Peak_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Peak_getset[] = {
    {"bytes", (getter)Peak_get_bytes, NULL,
     "The peak of in_use inside the block: so far while it runs, final "
     "after it; None before it is entered.", NULL},
    {"device", (getter)Peak_get_device, NULL, "The device measured.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Peak_slots[] = {
    {Py_tp_doc, "The context manager returned by memory_peak()."},
    {Py_tp_dealloc, Peak_dealloc},
    {Py_tp_traverse, Peak_traverse},
    {Py_tp_repr, Peak_repr},
    {Py_tp_methods, Peak_methods},
    {Py_tp_getset, Peak_getset},
    {0, NULL},
};

static PyType_Spec Peak_spec = {
    .name = "spillway.PeakScope",
    .basicsize = sizeof(PeakObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Peak_slots,
};

/* ------------------------------------------------------------------------
 * MemoryInfo: a named record (structseq)
 * ---------------------------------------------------------------------- */

static PyStructSequence_Field meminfo_fields[] = {
    {"in_use", "bytes held by live arrays (sizes rounded up to 512)"},
    {"peak", "highest in_use since the device was opened or "
             "reset_peak_memory()"},
    {"cached", "bytes of freed blocks kept for reuse"},
    {"spilled", "bytes of live arrays held in host memory"},
    {"device_free", "what the driver says is free (None if it cannot tell)"},
    {"device_total", "the device's capacity (None if unknown)"},
    {"budget", "the memory budget in bytes, or None"},
    {"allocs", "allocations since the device was opened"},
    {"frees", "buffers released"},
    {"spills", "buffers spilled to host memory"},
    {"restores", "buffers brought back to the device"},
    {"spilled_bytes_total", "bytes spilled in all"},
    {"restored_bytes_total", "bytes restored in all"},
    {"spill_seconds", "time spent spilling"},
    {"restore_seconds", "time spent restoring"},
    {"alloc_retries", "allocation attempts repeated after a failure"},
    {"ooms", "allocations that failed for good"},
    {"gc_runs", "garbage collections run under memory pressure"},
    {NULL, NULL},
};

static PyStructSequence_Desc meminfo_desc = {
    "spillway.MemoryInfo",
    "Memory accounting of one device (spillway.memory_info()).",
    meminfo_fields,
    18,
};

static PyObject *meminfo_new(sw_state *st, const sw_memory_info *m)
{
    PyObject *r = PyStructSequence_New(st->meminfo_type);
    if (r == NULL)
        return NULL;
    PyObject *v[18];
    v[0] = PyLong_FromUnsignedLongLong(m->in_use);
    v[1] = PyLong_FromUnsignedLongLong(m->peak);
    v[2] = PyLong_FromUnsignedLongLong(m->cached);
    v[3] = PyLong_FromUnsignedLongLong(m->spilled);
    v[4] = m->device_free_known ? PyLong_FromUnsignedLongLong(m->device_free)
                                : Py_NewRef(Py_None);
    v[5] = m->device_total ? PyLong_FromUnsignedLongLong(m->device_total)
                           : Py_NewRef(Py_None);
    v[6] = m->budget ? PyLong_FromUnsignedLongLong(m->budget)
                     : Py_NewRef(Py_None);
    v[7] = PyLong_FromUnsignedLongLong(m->allocs);
    v[8] = PyLong_FromUnsignedLongLong(m->frees);
    v[9] = PyLong_FromUnsignedLongLong(m->spills);
    v[10] = PyLong_FromUnsignedLongLong(m->restores);
    v[11] = PyLong_FromUnsignedLongLong(m->spilled_bytes_total);
    v[12] = PyLong_FromUnsignedLongLong(m->restored_bytes_total);
    v[13] = PyFloat_FromDouble(m->spill_seconds);
    v[14] = PyFloat_FromDouble(m->restore_seconds);
    v[15] = PyLong_FromUnsignedLongLong(m->alloc_retries);
    v[16] = PyLong_FromUnsignedLongLong(m->ooms);
    v[17] = PyLong_FromUnsignedLongLong(m->gc_runs);
    int bad = 0;
    for (int i = 0; i < 18; i++) {
        if (v[i] == NULL)
            bad = 1;
        PyStructSequence_SetItem(r, i, v[i] ? v[i] : Py_NewRef(Py_None));
    }
    if (bad) {
        Py_DECREF(r);
        return NULL;
    }
    return r;
}

/* ------------------------------------------------------------------------
 * Module functions: devices and accounting
 * ---------------------------------------------------------------------- */

/* A device call with the GIL released, the device counted as in use
 * meanwhile (so that a close() from another thread waits for it). */
#define DEVICE_CALL(d, rc, call)                                              \
    do {                                                                      \
        sw_device *dev_ = (d)->dev;                                           \
        device_use(d);                                                        \
        (void)dev_;                                                           \
        NOGIL(rc = (call));                                                   \
        device_unuse(d);                                                      \
    } while (0)

static PyObject *mod_devices(PyObject *m, PyObject *unused)
{
    sw_state *st = module_state(m);
    size_t n = 0;
    int rc;
    NOGIL(rc = sw_device_count(&n));
    if (rc != SW_OK)
        return raise_sw(st, rc);
    PyObject *list = PyList_New(0);
    if (list == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        char spec[64];
        NOGIL(rc = sw_device_spec_at(i, spec, sizeof spec));
        if (rc == SW_ERR_NO_DEVICE)
            break; /* the count shrank meanwhile */
        if (rc != SW_OK) {
            Py_DECREF(list);
            return raise_sw(st, rc);
        }
        PyObject *s = PyUnicode_FromString(spec);
        DeviceObject *d = s ? device_lookup(st, s) : NULL;
        Py_XDECREF(s);
        if (d == NULL || PyList_Append(list, (PyObject *)d) < 0) {
            Py_XDECREF(d);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(d);
    }
    return list;
}

/* Parse a lone optional device= argument. */
static DeviceObject *device_arg(PyObject *m, const char *fname,
                                PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    static const char *const names[] = {"device"};
    PyObject *v[1];
    if (parse_args(fname, args, nargs, kwnames, names, 1, 1, 0, v) < 0)
        return NULL;
    return resolve_device(module_state(m), v[0]);
}

static PyObject *mod_memory_info(PyObject *m, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames)
{
    sw_state *st = module_state(m);
    DeviceObject *d = device_arg(m, "memory_info", args, nargs, kwnames);
    if (d == NULL)
        return NULL;
    sw_memory_info info;
    int rc;
    DEVICE_CALL(d, rc, sw_memory_info_get(dev_, &info));
    Py_DECREF(d);
    if (rc != SW_OK)
        return raise_sw(st, rc);
    return meminfo_new(st, &info);
}

static PyObject *mod_reset_peak_memory(PyObject *m, PyObject *const *args,
                                       Py_ssize_t nargs, PyObject *kwnames)
{
    sw_state *st = module_state(m);
    DeviceObject *d = device_arg(m, "reset_peak_memory", args, nargs,
                                 kwnames);
    if (d == NULL)
        return NULL;
    int rc;
    DEVICE_CALL(d, rc, sw_reset_peak(dev_));
    Py_DECREF(d);
    if (rc != SW_OK)
        return raise_sw(st, rc);
    Py_RETURN_NONE;
}

static PyObject *mod_empty_cache(PyObject *m, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames)
{
    sw_state *st = module_state(m);
    DeviceObject *d = device_arg(m, "empty_cache", args, nargs, kwnames);
    if (d == NULL)
        return NULL;
    int rc;
    DEVICE_CALL(d, rc, sw_empty_cache(dev_));
    Py_DECREF(d);
    if (rc != SW_OK)
        return raise_sw(st, rc);
    Py_RETURN_NONE;
}

static PyObject *mod_synchronize(PyObject *m, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames)
{
    sw_state *st = module_state(m);
    DeviceObject *d = device_arg(m, "synchronize", args, nargs, kwnames);
    if (d == NULL)
        return NULL;
    int rc;
    DEVICE_CALL(d, rc, sw_device_synchronize(dev_));
    Py_DECREF(d);
    if (rc != SW_OK)
        return raise_sw(st, rc);
    Py_RETURN_NONE;
}

static PyObject *mod_get_memory_budget(PyObject *m, PyObject *const *args,
                                       Py_ssize_t nargs, PyObject *kwnames)
{
    sw_state *st = module_state(m);
    DeviceObject *d = device_arg(m, "get_memory_budget", args, nargs,
                                 kwnames);
    if (d == NULL)
        return NULL;
    uint64_t bytes = 0;
    int rc;
    DEVICE_CALL(d, rc, sw_get_memory_budget(dev_, &bytes));
    Py_DECREF(d);
    if (rc != SW_OK)
        return raise_sw(st, rc);
    if (bytes == 0)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(bytes);
}

static PyObject *mod_set_memory_budget(PyObject *m, PyObject *const *args,
                                       Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"nbytes", "device"};
    PyObject *v[2];
    if (parse_args("set_memory_budget", args, nargs, kwnames, names, 2, 2, 1,
                   v) < 0)
        return NULL;
    sw_state *st = module_state(m);
    uint64_t bytes = 0;
    if (v[0] != Py_None) {
        if (PyFloat_Check(v[0]) || !PyIndex_Check(v[0])) {
            PyErr_Format(PyExc_TypeError,
                         "set_memory_budget() takes a number of bytes (an "
                         "integer) or None, not %.100s",
                         Py_TYPE(v[0])->tp_name);
            return NULL;
        }
        PyObject *idx = PyNumber_Index(v[0]);
        if (idx == NULL)
            return NULL;
        int overflow = 0;
        long long sv = PyLong_AsLongLongAndOverflow(idx, &overflow);
        if (overflow < 0 || (overflow == 0 && sv < 0)) {
            Py_DECREF(idx);
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError,
                             "a memory budget cannot be negative (%R "
                             "bytes); None removes the budget",
                             v[0]);
            return NULL;
        }
        bytes = PyLong_AsUnsignedLongLong(idx);
        Py_DECREF(idx);
        if (bytes == (uint64_t)-1 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_ValueError,
                             "memory budget %R is too large", v[0]);
            }
            return NULL;
        }
    }
    DeviceObject *d = resolve_device(st, v[1]);
    if (d == NULL)
        return NULL;
    int rc;
    DEVICE_CALL(d, rc, sw_set_memory_budget(dev_, bytes));
    Py_DECREF(d);
    if (rc != SW_OK)
        return raise_sw(st, rc);
    Py_RETURN_NONE;
}

static PyObject *mod_memory_peak(PyObject *m, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames)
{
    sw_state *st = module_state(m);
    DeviceObject *d = device_arg(m, "memory_peak", args, nargs, kwnames);
    if (d == NULL)
        return NULL;
    PeakObject *p = PyObject_GC_New(PeakObject, st->peak_type);
    if (p == NULL) {
        Py_DECREF(d);
        return NULL;
    }
    p->device = d; /* takes the reference */
    p->scope = NULL;
    p->stage = 0;
    p->peak = 0;
    PyObject_GC_Track(p);
    return (PyObject *)p;
}

/* ------------------------------------------------------------------------
 * Module functions: arrays
 * ---------------------------------------------------------------------- */

static int parse_tag(PyObject *obj, const char **tag)
{
    *tag = NULL;
    if (absent(obj))
        return 0;
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "tag must be a str or None, not %.100s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    *tag = PyUnicode_AsUTF8(obj);
    return *tag ? 0 : -1;
}

/* The device of a device= and a queue= argument (q may be NULL): a new
 * reference.  Both given: they must agree. */
static DeviceObject *device_of_args(sw_state *st, PyObject *device,
                                    QueueObject *q, const char *fname)
{
    if (q == NULL)
        return resolve_device(st, device);
    if (!absent(device)) {
        DeviceObject *d = resolve_device(st, device);
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
    if (parse_args(fname, args, nargs, kwnames, names, 5, 4, 1, v) < 0)
        return NULL;
    sw_state *st = module_state(m);
    Py_ssize_t shape[SW_PY_MAXDIMS];
    int ndim = 0;
    sw_dtype dt;
    size_t nelem, nbytes;
    const char *tag;
    if (parse_shape(v[0], shape, &ndim) < 0 || parse_dtype(st, v[1], &dt) < 0 ||
        shape_sizes(shape, ndim, dtypes[dt].size, v[0], &nelem, &nbytes) < 0 ||
        parse_tag(v[3], &tag) < 0)
        return NULL;
    QueueObject *q;
    if (queue_arg(st, v[4], NULL, fname, &q) < 0)
        return NULL;
    DeviceObject *d = device_of_args(st, v[2], q, fname);
    if (d == NULL)
        return NULL;
    PyObject *r = array_alloc(st, d, dt, ndim, shape, nelem, tag);
    if (r != NULL && zero && nelem > 0) {
        op_desc op = {.kind = OP_FILL, .out = ((ArrayObject *)r)->buf,
                      .s = {.i = 0}, .dtype = dt, .n = nelem};
        if (do_op(st, q, &op, &r, 1) < 0 || sync_if_exported(st, d) < 0)
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
static PyObject *array_to_device(sw_state *st, ArrayObject *src,
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
        raise_sw(st, rc);
    } else {
        r = array_alloc(st, d, src->dtype, ARRAY_NDIM(src), src->shape,
                        src->nelem, tag);
        if (r != NULL && src->nbytes > 0) {
            sw_buffer *buf = ((ArrayObject *)r)->buf;
            NOGIL(rc = sw_buffer_write(buf, 0, tmp, src->nbytes));
            if (rc != SW_OK) {
                raise_sw(st, rc);
                Py_CLEAR(r);
            }
        }
    }
    PyMem_RawFree(tmp);
    return r;
}

/* An Array holding a copy of a buffer-protocol object's data. */
static PyObject *array_from_buffer(sw_state *st, PyObject *obj,
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
    if (dtype_from_format(view.format, view.itemsize, &dt) < 0)
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
    if (shape_sizes(shape, ndim, dtypes[dt].size, NULL, &nelem, &nbytes) < 0)
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
    r = array_alloc(st, d, dt, ndim, shape, nelem, tag);
    if (r != NULL && nbytes > 0) {
        sw_buffer *buf = ((ArrayObject *)r)->buf;
        int rc;
        NOGIL(rc = sw_buffer_write(buf, 0, src, nbytes));
        if (rc != SW_OK) {
            raise_sw(st, rc);
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
    if (parse_args("asarray", args, nargs, kwnames, names, 4, 2, 1, v) < 0)
        return NULL;
    sw_state *st = module_state(m);
    const char *tag;
    QueueObject *q;
    if (parse_tag(v[2], &tag) < 0 ||
        queue_arg(st, v[3], NULL, "asarray", &q) < 0)
        return NULL;
    /* Host-to-device copies are complete when they return (sw_buffer_write):
     * queue= only chooses the device; there is no work to record. */
    PyObject *obj = v[0];
    if (Py_IS_TYPE(obj, st->array_type)) {
        ArrayObject *a = (ArrayObject *)obj;
        if (array_check_device(a) < 0)
            return NULL;
        if (absent(v[1]) && q == NULL)
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
        PyObject *np = get_numpy(st);
        PyObject *arr =
            np ? PyObject_CallMethod(np, "ascontiguousarray", "O", obj)
               : NULL;
        r = arr ? array_from_buffer(st, arr, d, tag) : NULL;
        Py_XDECREF(arr);
    }
    Py_DECREF(d);
    return r;
}

/* An argument that must be an Array of this module on an open device. */
static ArrayObject *array_arg(sw_state *st, PyObject *o, const char *fname,
                              const char *what)
{
    if (!Py_IS_TYPE(o, st->array_type)) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): %s must be a spillway.Array, not %.100s", fname,
                     what, Py_TYPE(o)->tp_name);
        return NULL;
    }
    ArrayObject *a = (ArrayObject *)o;
    return array_check_device(a) < 0 ? NULL : a;
}

/* b must match a: device, dtype, shape. */
static int check_match(ArrayObject *a, ArrayObject *b, const char *fname,
                       const char *an, const char *bn)
{
    if (a->device != b->device) {
        PyErr_Format(PyExc_ValueError,
                     "%s(): %s is on %U and %s on %U: operands must be on "
                     "the same device",
                     fname, an, a->device->name, bn, b->device->name);
        return -1;
    }
    if (a->dtype != b->dtype) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): %s is %s and %s is %s: operands must have the "
                     "same dtype",
                     fname, an, dtypes[a->dtype].name, bn,
                     dtypes[b->dtype].name);
        return -1;
    }
    int same = ARRAY_NDIM(a) == ARRAY_NDIM(b);
    for (int i = 0; same && i < ARRAY_NDIM(a); i++)
        same = a->shape[i] == b->shape[i];
    if (!same) {
        PyObject *sa = shape_tuple(a->shape, ARRAY_NDIM(a));
        PyObject *sb = shape_tuple(b->shape, ARRAY_NDIM(b));
        if (sa != NULL && sb != NULL)
            PyErr_Format(PyExc_ValueError,
                         "%s(): shapes %R (%s) and %R (%s) do not match",
                         fname, sa, an, sb, bn);
        Py_XDECREF(sa);
        Py_XDECREF(sb);
        return -1;
    }
    return 0;
}

/* out= argument: the given Array (checked against a) or a new one. */
static ArrayObject *out_arg(sw_state *st, PyObject *o, ArrayObject *a,
                            const char *fname)
{
    if (absent(o))
        return (ArrayObject *)array_alloc(st, a->device, a->dtype,
                                          ARRAY_NDIM(a), a->shape, a->nelem,
                                          fname);
    ArrayObject *out = array_arg(st, o, fname, "out");
    if (out == NULL || check_match(a, out, fname, "the input", "out") < 0)
        return NULL;
    return (ArrayObject *)Py_NewRef(out);
}

/* After do_op (its result r): out, or NULL with out released. */
static PyObject *op_done(sw_state *st, ArrayObject *out, int r)
{
    if (r < 0 || sync_if_exported(st, out->device) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return (PyObject *)out;
}

static PyObject *mod_add(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames)
{
    static const char *const names[] = {"a", "b", "out", "queue"};
    PyObject *v[4];
    if (parse_args("add", args, nargs, kwnames, names, 4, 3, 2, v) < 0)
        return NULL;
    sw_state *st = module_state(m);
    ArrayObject *a = array_arg(st, v[0], "add", "a");
    ArrayObject *b = a ? array_arg(st, v[1], "add", "b") : NULL;
    QueueObject *q;
    if (b == NULL || check_match(a, b, "add", "a", "b") < 0 ||
        queue_arg(st, v[3], a->device, "add", &q) < 0)
        return NULL;
    ArrayObject *out = out_arg(st, v[2], a, "add");
    if (out == NULL)
        return NULL;
    op_desc op = {.kind = OP_ADD, .out = out->buf, .a = a->buf, .b = b->buf,
                  .dtype = a->dtype, .n = a->nelem};
    PyObject *keep[3] = {(PyObject *)a, (PyObject *)b, (PyObject *)out};
    return op_done(st, out, do_op(st, q, &op, keep, 3));
}

static PyObject *mod_scale(PyObject *m, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"a", "s", "out", "queue"};
    PyObject *v[4];
    if (parse_args("scale", args, nargs, kwnames, names, 4, 3, 2, v) < 0)
        return NULL;
    sw_state *st = module_state(m);
    ArrayObject *a = array_arg(st, v[0], "scale", "a");
    sw_scalar s;
    QueueObject *q;
    if (a == NULL || scalar_from_py(v[1], a->dtype, &s, "scale factor") < 0 ||
        queue_arg(st, v[3], a->device, "scale", &q) < 0)
        return NULL;
    ArrayObject *out = out_arg(st, v[2], a, "scale");
    if (out == NULL)
        return NULL;
    op_desc op = {.kind = OP_SCALE, .out = out->buf, .a = a->buf, .s = s,
                  .dtype = a->dtype, .n = a->nelem};
    PyObject *keep[2] = {(PyObject *)a, (PyObject *)out};
    return op_done(st, out, do_op(st, q, &op, keep, 2));
}

static PyObject *mod_axpy(PyObject *m, PyObject *const *args,
                          Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"alpha", "x", "y", "queue"};
    PyObject *v[4];
    if (parse_args("axpy", args, nargs, kwnames, names, 4, 3, 3, v) < 0)
        return NULL;
    sw_state *st = module_state(m);
    ArrayObject *x = array_arg(st, v[1], "axpy", "x");
    ArrayObject *y = x ? array_arg(st, v[2], "axpy", "y") : NULL;
    if (y == NULL || check_match(x, y, "axpy", "x", "y") < 0)
        return NULL;
    sw_scalar alpha;
    QueueObject *q;
    if (scalar_from_py(v[0], x->dtype, &alpha, "alpha") < 0 ||
        queue_arg(st, v[3], x->device, "axpy", &q) < 0)
        return NULL;
    op_desc op = {.kind = OP_AXPY, .out = y->buf, .a = x->buf, .s = alpha,
                  .dtype = x->dtype, .n = x->nelem};
    PyObject *keep[2] = {(PyObject *)x, (PyObject *)y};
    return op_done(st, (ArrayObject *)Py_NewRef(y), do_op(st, q, &op, keep, 2));
}

static PyObject *mod_sum(PyObject *m, PyObject *arg)
{
    sw_state *st = module_state(m);
    ArrayObject *a = array_arg(st, arg, "sum", "a");
    if (a == NULL)
        return NULL;
    sw_scalar s = {.i = 0};
    int rc;
    NOGIL(rc = sw_op_sum(a->buf, a->dtype, a->nelem, &s));
    if (rc != SW_OK)
        return raise_sw(st, rc);
    if (dtypes[a->dtype].is_float)
        return PyFloat_FromDouble(s.f);
    return PyLong_FromLongLong((long long)s.i);
}

/* ------------------------------------------------------------------------
 * Test helpers (spillway._testing)
 * ---------------------------------------------------------------------- */

#define CT_MAX_HOLD 64

typedef struct {
    sw_device *dev;
    size_t nbytes;
    long count;
    int hold;
    char tag[SW_TAG_MAX + 1];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    int joined;
    long ok, oom, errors;
    char last_error[512];
} cthread_job;

typedef struct {
    PyObject_HEAD
    cthread_job *job;
    DeviceObject *device;
} CThreadObject;

/* A plain C thread: never touches Python (it has no thread state), so the
 * only way it meets the GIL is through the pressure callback. */
static void *cthread_main(void *arg)
{
    cthread_job *j = arg;
    sw_buffer *ring[CT_MAX_HOLD] = {0};
    int head = 0;
    for (long i = 0; i < j->count; i++) {
        sw_buffer *b = NULL;
        int rc = sw_buffer_alloc(j->dev, j->nbytes, j->tag, &b);
        if (rc == SW_OK) {
            uint64_t val = 0x5eed0000ull ^ (uint64_t)i, back = 0;
            size_t n = j->nbytes < 8 ? j->nbytes : 8;
            rc = n ? sw_buffer_write(b, 0, &val, n) : SW_OK;
            if (rc == SW_OK && n)
                rc = sw_buffer_read(b, 0, &back, n);
            if (rc != SW_OK || memcmp(&val, &back, n) != 0) {
                j->errors++;
                snprintf(j->last_error, sizeof j->last_error,
                         "read back: %s", rc ? sw_last_error() : "mismatch");
            } else {
                j->ok++;
            }
            if (j->hold == 0) {
                (void)sw_buffer_free(b);
            } else {
                (void)sw_buffer_free(ring[head]);
                ring[head] = b;
                head = (head + 1) % j->hold;
            }
        } else if (rc == SW_ERR_OOM) {
            j->oom++;
        } else {
            j->errors++;
            snprintf(j->last_error, sizeof j->last_error, "%s: %s",
                     sw_err_name(rc), sw_last_error());
        }
    }
    for (int i = 0; i < CT_MAX_HOLD; i++)
        (void)sw_buffer_free(ring[i]);
    pthread_mutex_lock(&j->mu);
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

static void cthread_job_free(cthread_job *j)
{
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

static PyObject *mod_start_c_thread(PyObject *m, PyObject *const *args,
                                    Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"device", "nbytes", "count", "hold",
                                        "tag"};
    PyObject *v[5];
    if (parse_args("start_c_thread_allocating", args, nargs, kwnames, names,
                   5, 5, 3, v) < 0)
        return NULL;
    sw_state *st = module_state(m);
    Py_ssize_t nbytes, count, hold = 0;
    const char *tag = "c-thread";
    if ((nbytes = PyNumber_AsSsize_t(v[1], PyExc_OverflowError)) == -1 &&
        PyErr_Occurred())
        return NULL;
    if ((count = PyNumber_AsSsize_t(v[2], PyExc_OverflowError)) == -1 &&
        PyErr_Occurred())
        return NULL;
    if (!absent(v[3]) &&
        (hold = PyNumber_AsSsize_t(v[3], PyExc_OverflowError)) == -1 &&
        PyErr_Occurred())
        return NULL;
    if (!absent(v[4]) && parse_tag(v[4], &tag) < 0)
        return NULL;
    if (nbytes < 0 || count < 0 || hold < 0 || hold > CT_MAX_HOLD) {
        PyErr_Format(PyExc_ValueError,
                     "nbytes and count must be >= 0 and hold in 0..%d",
                     CT_MAX_HOLD);
        return NULL;
    }
    DeviceObject *d = resolve_device(st, v[0]);
    if (d == NULL)
        return NULL;
    cthread_job *j = calloc(1, sizeof *j);
    if (j == NULL) {
        Py_DECREF(d);
        return PyErr_NoMemory();
    }
    j->dev = d->dev;
    j->nbytes = (size_t)nbytes;
    j->count = (long)count;
    j->hold = (int)hold;
    snprintf(j->tag, sizeof j->tag, "%s", tag);
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    CThreadObject *t = PyObject_GC_New(CThreadObject, st->cthread_type);
    if (t == NULL) {
        cthread_job_free(j);
        Py_DECREF(d);
        return NULL;
    }
    t->job = NULL;
    t->device = d;
    PyObject_GC_Track(t);
    int e = pthread_create(&j->thread, NULL, cthread_main, j);
    if (e != 0) {
        cthread_job_free(j);
        Py_DECREF(t);
        PyErr_Format(PyExc_RuntimeError, "pthread_create: %s", strerror(e));
        return NULL;
    }
    t->job = j;
    device_use(d);
    return (PyObject *)t;
}

/* Wait (without the GIL) up to timeout seconds (< 0: forever). */
static int cthread_wait(cthread_job *j, double timeout)
{
    int done;
    Py_BEGIN_ALLOW_THREADS
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    if (timeout >= 0) {
        double whole = (double)(time_t)timeout;
        until.tv_sec += (time_t)timeout;
        until.tv_nsec += (long)((timeout - whole) * 1e9);
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&j->mu);
    while (!j->done) {
        if (timeout < 0)
            pthread_cond_wait(&j->cv, &j->mu);
        else if (pthread_cond_timedwait(&j->cv, &j->mu, &until) == ETIMEDOUT)
            break;
    }
    done = j->done;
    pthread_mutex_unlock(&j->mu);
    if (done && !j->joined) {
        pthread_join(j->thread, NULL);
        j->joined = 1;
    }
    Py_END_ALLOW_THREADS
    return done;
}

static PyObject *CThread_join(CThreadObject *t, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"timeout"};
    PyObject *v[1];
    if (parse_args("join", args, nargs, kwnames, names, 1, 1, 0, v) < 0)
        return NULL;
    double timeout = -1;
    if (!absent(v[0])) {
        timeout = PyFloat_AsDouble(v[0]);
        if (timeout == -1 && PyErr_Occurred())
            return NULL;
        if (timeout < 0)
            timeout = 0;
    }
    cthread_job *j = t->job;
    if (!cthread_wait(j, timeout)) {
        PyErr_SetString(PyExc_TimeoutError,
                        "the C thread is still allocating");
        return NULL;
    }
    return Py_BuildValue("{s:l,s:l,s:l,s:s}", "ok", j->ok, "oom", j->oom,
                         "errors", j->errors, "last_error", j->last_error);
}

static int CThread_traverse(CThreadObject *t, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(t));
    Py_VISIT(t->device);
    return 0;
}

static void CThread_dealloc(CThreadObject *t)
{
    PyTypeObject *tp = Py_TYPE(t);
    PyObject_GC_UnTrack(t);
    if (t->job != NULL) {
        int done;
        pthread_mutex_lock(&t->job->mu);
        done = t->job->done;
        pthread_mutex_unlock(&t->job->mu);
        if (py_finalizing() && !done) {
            /* At exit the thread may be stuck for good: a thread that
             * asks for the GIL while the interpreter finalizes never gets
             * it.  Leave it (and its job) be; the process is ending. */
            pthread_detach(t->job->thread);
        } else {
            (void)cthread_wait(t->job, -1);
            cthread_job_free(t->job);
            device_unuse(t->device);
        }
        t->job = NULL;
    }
    Py_CLEAR(t->device);
    tp->tp_free((PyObject *)t);
    Py_DECREF(tp);
}

static PyMethodDef CThread_methods[] = {
    {"join", (PyCFunction)(void (*)(void))CThread_join,
     METH_FASTCALL | METH_KEYWORDS,
     "join(timeout=None)\n--\n\nWait for the thread; return its counts "
     "{'ok', 'oom', 'errors', 'last_error'}.  TimeoutError if it is still "
     "running after timeout seconds."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot CThread_slots[] = {
    {Py_tp_doc, "A C thread allocating on a device (testing only)."},
    {Py_tp_dealloc, CThread_dealloc},
    {Py_tp_traverse, CThread_traverse},
    {Py_tp_methods, CThread_methods},
    {0, NULL},
};

static PyType_Spec CThread_spec = {
    .name = "spillway._CThread",
    .basicsize = sizeof(CThreadObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = CThread_slots,
};

static PyObject *mod_inject_fault(PyObject *m, PyObject *const *args,
                                  Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"device", "op", "nth", "persistent"};
    PyObject *v[4];
    if (parse_args("inject_fault", args, nargs, kwnames, names, 4, 4, 3, v) <
        0)
        return NULL;
    sw_state *st = module_state(m);
    const char *op = PyUnicode_Check(v[1]) ? PyUnicode_AsUTF8(v[1]) : NULL;
    sw_fault_op fop;
    if (op != NULL && strcmp(op, "alloc") == 0) {
        fop = SW_FAULT_ALLOC;
    } else if (op != NULL && strcmp(op, "copy") == 0) {
        fop = SW_FAULT_COPY;
    } else {
        PyErr_SetString(PyExc_ValueError, "op must be 'alloc' or 'copy'");
        return NULL;
    }
    unsigned long long nth = PyLong_AsUnsignedLongLong(v[2]);
    int persistent = absent(v[3]) ? 0 : PyObject_IsTrue(v[3]);
    if ((nth == (unsigned long long)-1 && PyErr_Occurred()) || persistent < 0)
        return NULL;
    DeviceObject *d = resolve_device(st, v[0]);
    if (d == NULL)
        return NULL;
    int rc;
    DEVICE_CALL(d, rc, sw_inject_fault(dev_, fop, nth, persistent));
    Py_DECREF(d);
    if (rc != SW_OK)
        return raise_sw(st, rc);
    Py_RETURN_NONE;
}

static PyObject *mod_track_arrays(PyObject *m, PyObject *arg)
{
    sw_state *st = module_state(m);
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    PyObject *old = st->track;
    st->track = NULL;
    if (on && (st->track = PyList_New(0)) == NULL) {
        st->track = old;
        return NULL;
    }
    if (old == NULL)
        Py_RETURN_NONE;
    return old;
}

static PyObject *mod_gc_backoff(PyObject *m, PyObject *const *args,
                                Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"min_interval"};
    PyObject *v[1];
    if (parse_args("gc_backoff", args, nargs, kwnames, names, 1, 1, 0, v) < 0)
        return NULL;
    double old = (double)atomic_load(&gc_min_interval_ns) / 1e9;
    if (!absent(v[0])) {
        double s = PyFloat_AsDouble(v[0]);
        if (s == -1 && PyErr_Occurred())
            return NULL;
        if (!(s >= 0) || s > 3600) {
            PyErr_SetString(PyExc_ValueError,
                            "min_interval must be 0 to 3600 seconds");
            return NULL;
        }
        atomic_store(&gc_min_interval_ns, (int64_t)(s * 1e9));
    }
    return PyFloat_FromDouble(old);
}

static PyObject *mod_gc_backoff_reset(PyObject *m, PyObject *unused)
{
    atomic_store(&gc_quiet_until_ns, 0);
    Py_RETURN_NONE;
}

static PyObject *mod_gc_stats(PyObject *m, PyObject *unused)
{
    int64_t q = atomic_load(&gc_quiet_until_ns);
    int64_t now = now_ns();
    return Py_BuildValue(
        "{s:K,s:K,s:K,s:K,s:d}", "collections",
        (unsigned long long)atomic_load(&gc_seq), "fruitful",
        (unsigned long long)atomic_load(&gc_fruitful), "skipped_backoff",
        (unsigned long long)atomic_load(&gc_skipped_backoff),
        "skipped_shared", (unsigned long long)atomic_load(&gc_skipped_shared),
        "backoff_left", q > now ? (double)(q - now) / 1e9 : 0.0);
}

static PyObject *mod_open_devices(PyObject *m, PyObject *unused)
{
    return PyDict_Values(module_state(m)->devices);
}

/* Wait until no Python host task (queued by any thread) is pending, at
 * most timeout seconds (< 0: no limit).  1 when none is. */
static int wait_host_tasks(double timeout)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    if (timeout >= 0) {
        double whole = (double)(time_t)timeout;
        until.tv_sec += (time_t)timeout;
        until.tv_nsec += (long)((timeout - whole) * 1e9);
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    int none;
    pthread_mutex_lock(&pytasks_mu);
    while (pytasks_pending > 0) {
        if (timeout < 0) {
            pthread_cond_wait(&pytasks_cv, &pytasks_mu);
        } else {
            /* pytasks_cv uses the realtime clock: poll in short steps
             * against the monotonic deadline. */
            struct timespec now, step;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (now.tv_sec > until.tv_sec ||
                (now.tv_sec == until.tv_sec && now.tv_nsec >= until.tv_nsec))
                break;
            clock_gettime(CLOCK_REALTIME, &step);
            step.tv_nsec += 10 * 1000 * 1000;
            if (step.tv_nsec >= 1000000000L) {
                step.tv_sec++;
                step.tv_nsec -= 1000000000L;
            }
            (void)pthread_cond_timedwait(&pytasks_cv, &pytasks_mu, &step);
        }
    }
    none = pytasks_pending == 0;
    pthread_mutex_unlock(&pytasks_mu);
    return none;
}

static PyObject *mod_wait_host_tasks(PyObject *m, PyObject *const *args,
                                     Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"timeout"};
    PyObject *v[1];
    if (parse_args("wait_host_tasks", args, nargs, kwnames, names, 1, 1, 0,
                   v) < 0)
        return NULL;
    double timeout = -1;
    if (!absent(v[0])) {
        timeout = PyFloat_AsDouble(v[0]);
        if (timeout == -1 && PyErr_Occurred())
            return NULL;
        if (timeout < 0)
            timeout = 0;
    }
    if (tl_task_queue != NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "wait_host_tasks() inside a host task would wait "
                        "for itself");
        return NULL;
    }
    int none;
    NOGIL(none = wait_host_tasks(timeout));
    drain_releases();
    if (!none) {
        PyErr_SetString(PyExc_TimeoutError,
                        "Python host tasks are still pending");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *mod_object_counts(PyObject *m, PyObject *unused)
{
    long pending;
    pthread_mutex_lock(&pytasks_mu);
    pending = pytasks_pending;
    pthread_mutex_unlock(&pytasks_mu);
    return Py_BuildValue("{s:n,s:n,s:n,s:l}", "queues", live_queues,
                         "managers", live_managers, "events", live_events,
                         "host_tasks", pending);
}

/* Registered with atexit by __init__.py: wait for the Python host tasks
 * (once the interpreter finalizes they could never take the GIL), then
 * drop this thread's order managers without waiting, so that nothing of
 * this module is left in the thread state when the module goes. */
static PyObject *mod_atexit(PyObject *m, PyObject *unused)
{
    if (tl_task_queue == NULL)
        NOGIL((void)wait_host_tasks(-1));
    drain_releases();
    sw_state *st = module_state(m);
    PyObject *d = PyThreadState_GetDict();
    if (st->order_manager != NULL && d != NULL) {
        PyObject *map = PyDict_GetItemWithError(d, st->order_manager);
        if (map == NULL && PyErr_Occurred())
            return NULL;
        if (map != NULL && PyDict_DelItem(d, st->order_manager) < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------
 * The module
 * ---------------------------------------------------------------------- */

#define FASTKW(name, fn, doc)                                                 \
    {name, (PyCFunction)(void (*)(void))fn, METH_FASTCALL | METH_KEYWORDS, doc}

static PyMethodDef module_methods[] = {
    {"devices", (PyCFunction)(void (*)(void))mod_devices, METH_NOARGS,
     "devices()\n--\n\nEvery device of every backend present, as Device "
     "objects (opening each)."},
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
    FASTKW("add", mod_add,
           "add(a, b, out=None, *, queue=None)\n--\n\nout = a + b on the "
           "device (a new Array when out is None); returns out.  With queue, "
           "the work goes to that queue, ordered after the events in "
           "spillway.order_manager[queue], and records its own there."),
    FASTKW("scale", mod_scale,
           "scale(a, s, out=None, *, queue=None)\n--\n\nout = s * a on "
           "the device; returns out.  queue= as for add()."),
    FASTKW("axpy", mod_axpy,
           "axpy(alpha, x, y, *, queue=None)\n--\n\ny = alpha * x + y, in "
           "place on the device; returns y.  queue= as for add()."),
    {"sum", (PyCFunction)(void (*)(void))mod_sum, METH_O,
     "sum(a)\n--\n\nThe sum of a's elements, reduced on the device: a float "
     "for float arrays, an int for integer ones (wrapping at 64 bits)."},
    FASTKW("memory_info", mod_memory_info,
           "memory_info(device=None)\n--\n\nThe device's accounting, a "
           "MemoryInfo record."),
    FASTKW("reset_peak_memory", mod_reset_peak_memory,
           "reset_peak_memory(device=None)\n--\n\npeak = in_use (open "
           "memory_peak() scopes are not disturbed)."),
    FASTKW("memory_peak", mod_memory_peak,
           "memory_peak(device=None)\n--\n\nA context manager: "
           "`with memory_peak() as p: ...` then p.bytes is the peak of "
           "in_use inside the block.  Scopes nest; each reports its own."),
    FASTKW("set_memory_budget", mod_set_memory_budget,
           "set_memory_budget(nbytes, device=None)\n--\n\nBound in_use + "
           "cached to nbytes (None: no budget); beyond it least recently "
           "used arrays spill to host memory."),
    FASTKW("get_memory_budget", mod_get_memory_budget,
           "get_memory_budget(device=None)\n--\n\nThe budget in bytes, or "
           "None."),
    FASTKW("empty_cache", mod_empty_cache,
           "empty_cache(device=None)\n--\n\nReturn every cached block to "
           "the device."),
    FASTKW("synchronize", mod_synchronize,
           "synchronize(device=None)\n--\n\nWait for all work queued on the "
           "device."),
    FASTKW("_start_c_thread_allocating", mod_start_c_thread,
           "_start_c_thread_allocating(device, nbytes, count, hold=0, "
           "tag=None)\n--\n\nTesting: start a C thread (which never holds "
           "the GIL) that allocates count buffers of nbytes, keeping the "
           "last `hold` alive."),
    FASTKW("_inject_fault", mod_inject_fault,
           "_inject_fault(device, op, nth, persistent=False)\n--\n\n"
           "Testing: make the nth next backend 'alloc' or 'copy' fail."),
    {"_track_arrays", (PyCFunction)(void (*)(void))mod_track_arrays, METH_O,
     "_track_arrays(on)\n--\n\nTesting: start (True) or stop keeping weak "
     "references to every new Array; returns the previous list or None."},
    FASTKW("_gc_backoff", mod_gc_backoff,
           "_gc_backoff(min_interval=None)\n--\n\nThe pressure collector's "
           "minimum back-off in seconds (returns the old value)."),
    {"_gc_backoff_reset", (PyCFunction)(void (*)(void))mod_gc_backoff_reset, METH_NOARGS,
     "_gc_backoff_reset()\n--\n\nEnd a back-off now."},
    {"_gc_stats", (PyCFunction)(void (*)(void))mod_gc_stats, METH_NOARGS,
     "_gc_stats()\n--\n\nCounters of the pressure collector."},
    {"_open_devices", (PyCFunction)(void (*)(void))mod_open_devices, METH_NOARGS,
     "_open_devices()\n--\n\nThe Devices this module has open."},
    FASTKW("_wait_host_tasks", mod_wait_host_tasks,
           "_wait_host_tasks(timeout=None)\n--\n\nWait until no Python "
           "host task is pending (TimeoutError after timeout seconds)."),
    {"_object_counts", (PyCFunction)(void (*)(void))mod_object_counts,
     METH_NOARGS,
     "_object_counts()\n--\n\nTesting: live Queue, SequentialOrderManager "
     "and Event objects, and Python host tasks not yet finished."},
    {"_atexit", (PyCFunction)(void (*)(void))mod_atexit, METH_NOARGS,
     "_atexit()\n--\n\nRun at interpreter exit: wait for Python host "
     "tasks, drop this thread's order managers."},
    {NULL, NULL, 0, NULL},
};

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    sw_state *st = module_state(m);
    if (st == NULL)
        return 0;
    Py_VISIT(st->device_type);
    Py_VISIT(st->array_type);
    Py_VISIT(st->peak_type);
    Py_VISIT(st->cthread_type);
    Py_VISIT(st->meminfo_type);
    Py_VISIT(st->queue_type);
    Py_VISIT(st->event_type);
    Py_VISIT(st->manager_type);
    Py_VISIT(st->map_type);
    Py_VISIT(st->entry_type);
    Py_VISIT(st->omap_type);
    Py_VISIT(st->order_manager);
    Py_VISIT(st->DeviceMemoryError);
    Py_VISIT(st->DeviceError);
    Py_VISIT(st->devices);
    Py_VISIT(st->default_device);
    Py_VISIT(st->numpy);
    for (int i = 0; i < 4; i++)
        Py_VISIT(st->np_dtypes[i]);
    Py_VISIT(st->track);
    return 0;
}

static int module_clear(PyObject *m)
{
    sw_state *st = module_state(m);
    if (st == NULL)
        return 0;
    /* Devices first: an open device whose arrays are gone is closed now;
     * one with arrays left stays open until the last of them goes. */
    Py_CLEAR(st->default_device);
    Py_CLEAR(st->devices);
    Py_CLEAR(st->track);
    Py_CLEAR(st->numpy);
    for (int i = 0; i < 4; i++)
        Py_CLEAR(st->np_dtypes[i]);
    Py_CLEAR(st->device_type);
    Py_CLEAR(st->array_type);
    Py_CLEAR(st->peak_type);
    Py_CLEAR(st->cthread_type);
    Py_CLEAR(st->meminfo_type);
    Py_CLEAR(st->order_manager);
    Py_CLEAR(st->queue_type);
    Py_CLEAR(st->event_type);
    Py_CLEAR(st->manager_type);
    Py_CLEAR(st->map_type);
    Py_CLEAR(st->entry_type);
    Py_CLEAR(st->omap_type);
    Py_CLEAR(st->DeviceMemoryError);
    Py_CLEAR(st->DeviceError);
    return 0;
}

static void module_free(void *m) { (void)module_clear((PyObject *)m); }

static PyTypeObject *add_type(PyObject *m, PyType_Spec *spec)
{
    PyTypeObject *t = (PyTypeObject *)PyType_FromModuleAndSpec(m, spec, NULL);
    if (t == NULL)
        return NULL;
    if (PyModule_AddType(m, t) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    return t;
}

static int module_exec(PyObject *m)
{
    sw_state *st = module_state(m);
    if ((st->device_type = add_type(m, &Device_spec)) == NULL ||
        (st->array_type = add_type(m, &Array_spec)) == NULL ||
        (st->peak_type = add_type(m, &Peak_spec)) == NULL ||
        (st->cthread_type = add_type(m, &CThread_spec)) == NULL ||
        (st->queue_type = add_type(m, &Queue_spec)) == NULL ||
        (st->event_type = add_type(m, &Event_spec)) == NULL ||
        (st->manager_type = add_type(m, &Manager_spec)) == NULL ||
        (st->map_type = add_type(m, &Map_spec)) == NULL ||
        (st->entry_type = add_type(m, &Entry_spec)) == NULL ||
        (st->omap_type = add_type(m, &OMap_spec)) == NULL)
        return -1;
    OMapObject *om = PyObject_GC_New(OMapObject, st->omap_type);
    if (om == NULL)
        return -1;
    PyObject_GC_Track(om);
    st->order_manager = (PyObject *)om;
    if (PyModule_AddObjectRef(m, "order_manager", st->order_manager) < 0)
        return -1;
    st->meminfo_type = PyStructSequence_NewType(&meminfo_desc);
    if (st->meminfo_type == NULL || PyModule_AddType(m, st->meminfo_type) < 0)
        return -1;
    st->DeviceMemoryError = PyErr_NewExceptionWithDoc(
        "spillway.DeviceMemoryError",
        "Device memory ran out (or the budget would be passed) and nothing "
        "could make room: the message names the request, what is in use, "
        "cached and spilled, the budget, the device's free and total "
        "memory, and the largest live buffers with their tags.  A "
        "MemoryError.",
        PyExc_MemoryError, NULL);
    if (st->DeviceMemoryError == NULL ||
        PyModule_AddObjectRef(m, "DeviceMemoryError",
                              st->DeviceMemoryError) < 0)
        return -1;
    st->DeviceError = PyErr_NewExceptionWithDoc(
        "spillway.DeviceError",
        "The device or its driver failed (a copy, a launch).  A "
        "RuntimeError.",
        PyExc_RuntimeError, NULL);
    if (st->DeviceError == NULL ||
        PyModule_AddObjectRef(m, "DeviceError", st->DeviceError) < 0)
        return -1;
    if ((st->devices = PyDict_New()) == NULL)
        return -1;
    char version[32];
    snprintf(version, sizeof version, "%d.%d.%d", SW_VERSION_MAJOR,
             SW_VERSION_MINOR, SW_VERSION_PATCH);
    if (PyModule_AddStringConstant(m, "__version__", version) < 0 ||
        PyModule_AddIntConstant(m, "ALLOC_GRANULARITY",
                                SW_ALLOC_GRANULARITY) < 0 ||
        PyModule_AddIntConstant(m, "GC_BACKOFF_FACTOR", GC_BACKOFF_FACTOR) <
            0)
        return -1;
    return 0;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#if PY_VERSION_HEX >= 0x030C0000
    /* The pressure callback uses PyGILState_Ensure, which knows the main
     * interpreter only. */
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_USED},
#endif
    {0, NULL},
};

PyDoc_STRVAR(module_doc,
"spillway's C extension module; import spillway instead.\n"
"\n"
"Memory pressure runs the garbage collector: when an allocation fails on a\n"
"device, before anything is spilled, a callback registered on every\n"
"device this module opens runs gc.collect() (even under gc.disable()) and\n"
"retries when device memory was freed.  Rate limit: a collection that\n"
"freed no device memory starts a back-off of max(50 ms, 10 x its\n"
"duration) during which no collection runs for pressure; one that frees\n"
"memory ends it; one collection at a time, and a thread that waited while\n"
"another collected does not collect again.\n");

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "spillway._spillway",
    .m_doc = module_doc,
    .m_size = sizeof(sw_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__spillway(void)
{
    return PyModuleDef_Init(&module_def);
}
