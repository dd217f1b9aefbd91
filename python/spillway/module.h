/*
 * module.h -- the state of spillway's extension module (spillway._spillway)
 * and the map of its files.
 *
 * The Python API of DESIGN.md ("Python API"), written against the public C
 * API only (include/spillway.h).  Shape of the module, after CPython's
 * Modules/xxlimited.c, Modules/_queuemodule.c and, across files,
 * Modules/_sqlite/ and Modules/_io/:
 *
 *  - multi-phase initialisation; everything static or sw_py_-prefixed with
 *    hidden visibility, except PyInit__spillway;
 *  - one file per type or concern, each ending in a setup function that
 *    creates its heap types, stores them in the module state and adds its
 *    module-level functions; module.c's exec slot is the chain of those
 *    calls (the list at the end of this header is that map);
 *  - the module state holds the types, the exceptions, the open devices;
 *    what cannot be per module (touched without the GIL, from pending
 *    calls, or shared by every instance) is in sw_py_process, below;
 *  - heap types from PyType_Spec, GC-tracked where they hold references,
 *    with weak-reference support on Array, Device, Queue and
 *    SequentialOrderManager;
 *  - every failing path returns NULL or -1 with an exception set.
 *
 * Locks.  The one lock order is device lock -> GIL, never GIL -> device
 * lock while both are held.  Every spillway call takes its device's lock, so
 * this module calls none of them with the GIL held: each is wrapped in
 * Py_BEGIN_ALLOW_THREADS / Py_END_ALLOW_THREADS (the NOGIL macro), even the
 * cheap ones, and even in deallocators.  The pressure callback (pressure.c)
 * is entered with the device lock held and releases it before it takes the
 * GIL, so no thread ever holds both, and a thread that never had the GIL (a
 * queue worker, another C thread) always makes progress.
 *
 * The test-only entry points live in a separate module,
 * spillway._spillway_testing (_spillway_testing.c), which reaches this one
 * through the capsule spillway._spillway._testing_api (testing_api.h).
 */
#ifndef SPILLWAY_PY_MODULE_H
#define SPILLWAY_PY_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "spillway.h"
#include "testing_api.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

PyMODINIT_FUNC PyInit__spillway(void);

/* ------------------------------------------------------------------------
 * Free-threaded CPython (3.13t, Py_GIL_DISABLED)
 *
 * The module declares Py_MOD_GIL_NOT_USED: threads run it at once.  What
 * the GIL used to serialise is protected by, in order of preference:
 *  - immutability: an Array's, Queue's and Event's fields are set before
 *    the object is published and never change;
 *  - C11 atomics: counters (a Device's users, the live-object counts), the
 *    one-way flags (a Device's closed), a pin's or peak scope's stage
 *    (claimed with a compare-exchange before any library call);
 *  - per-object critical sections (Py_BEGIN_CRITICAL_SECTION: a dict or
 *    list being read item by item, a DLPack capsule consumed once), never
 *    held across a call that releases the thread state (NOGIL), which
 *    would end them;
 *  - the module's mutex (sw_py_state.mu) for the module state's few
 *    mutable fields, and leaf pthread mutexes where a library call must be
 *    made under the lock (taken only with the thread state released).
 * On GIL builds the critical sections and the module mutex cost nothing.
 * The one lock order stays device lock -> interpreter: every library call
 * is made with the thread state released (NOGIL), so no thread waits for
 * a device lock while attached, and a stop-the-world pause never waits
 * for one.
 * ---------------------------------------------------------------------- */

#if PY_VERSION_HEX < 0x030D0000
#define Py_BEGIN_CRITICAL_SECTION(op) {
#define Py_END_CRITICAL_SECTION() }
#endif

#ifdef Py_GIL_DISABLED
typedef PyMutex sw_py_mutex;
#define SW_PY_LOCK(m) PyMutex_Lock(m)
#define SW_PY_UNLOCK(m) PyMutex_Unlock(m)
#else
typedef char sw_py_mutex; /* the GIL serialises */
#define SW_PY_LOCK(m) ((void)(m))
#define SW_PY_UNLOCK(m) ((void)(m))
#endif

/* A new reference to d[key] (1), or 0 when absent, -1 with an exception:
 * no borrowed reference another thread's deletion could free. */
static inline int sw_py_dict_get_ref(PyObject *d, PyObject *key,
                                     PyObject **out)
{
#if PY_VERSION_HEX >= 0x030D0000
    return PyDict_GetItemRef(d, key, out);
#else
    PyObject *v = PyDict_GetItemWithError(d, key);
    *out = v ? Py_NewRef(v) : NULL;
    return v ? 1 : PyErr_Occurred() ? -1 : 0;
#endif
}

/* d.setdefault(key, value) as a new reference (the value that is there
 * afterwards: value, or what another thread put first); NULL with an
 * exception. */
static inline PyObject *sw_py_dict_setdefault_ref(PyObject *d, PyObject *key,
                                                  PyObject *value)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *r = NULL;
    return PyDict_SetDefaultRef(d, key, value, &r) < 0 ? NULL : r;
#else
    PyObject *r = PyDict_SetDefault(d, key, value);
    return r ? Py_NewRef(r) : NULL;
#endif
}

/* A tuple of obj's items (a new reference), or NULL with TypeError(msg)
 * when obj is not iterable.  In place of PySequence_Fast: a list's items
 * are borrowed from the list, which another thread (or an __index__
 * called while parsing them) may change under the reader; a tuple is
 * this caller's alone. */
static inline PyObject *sw_py_as_tuple(PyObject *obj, const char *msg)
{
    if (PyTuple_CheckExact(obj))
        return Py_NewRef(obj);
    PyObject *it = PyObject_GetIter(obj);
    if (it == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError))
            PyErr_SetString(PyExc_TypeError, msg);
        return NULL;
    }
    PyObject *t = PySequence_Tuple(it);
    Py_DECREF(it);
    return t;
}

/* Lazily filled module-state caches (the numpy module, numpy.dtype
 * objects): written once, never replaced until the module goes.  Two
 * threads may both compute a value; the first to publish wins and the
 * other's is dropped.  Loads are acquire so a published object's fields
 * are seen whole.  The returned reference is borrowed from the state. */
static inline PyObject *sw_py_cache_load(PyObject **slot)
{
    return __atomic_load_n(slot, __ATOMIC_ACQUIRE);
}

/* Publish v (a new reference, stolen) into an empty slot; the slot's
 * value afterwards (borrowed), v or another thread's. */
static inline PyObject *sw_py_cache_publish(PyObject **slot, PyObject *v)
{
    PyObject *expected = NULL;
    if (__atomic_compare_exchange_n(slot, &expected, v, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        return v;
    Py_DECREF(v);
    return expected;
}

/* Run a statement with the GIL released. */
#define NOGIL(stmt)                                                           \
    do {                                                                      \
        Py_BEGIN_ALLOW_THREADS stmt;                                          \
        Py_END_ALLOW_THREADS                                                  \
    } while (0)

/* A METH_FASTCALL | METH_KEYWORDS entry of a method table. */
#define FASTKW(name, fn, doc)                                                 \
    {name, (PyCFunction)(void (*)(void))fn, METH_FASTCALL | METH_KEYWORDS, doc}

/* Most dimensions an Array may have (NumPy allows 64). */
#define SW_PY_MAXDIMS 32

/* A failure of this module's own (not the library's): no host memory. */
#define SW_PY_NOMEM (-1000000)
/* ... and: the device was closed meanwhile (SW_PY_DEVICE_CALL). */
#define SW_PY_CLOSED (-1000001)

/* ------------------------------------------------------------------------
 * Module state
 * ---------------------------------------------------------------------- */

typedef struct {
    PyTypeObject *device_type;
    PyTypeObject *array_type;
    PyTypeObject *peak_type;
    PyTypeObject *meminfo_type;
    PyTypeObject *queue_type;
    PyTypeObject *event_type;
    PyTypeObject *manager_type;
    PyTypeObject *map_type;   /* one thread's order managers */
    PyTypeObject *entry_type; /* one key of it */
    PyTypeObject *omap_type;
    PyTypeObject *pinned_type;      /* spillway.pinned()'s context manager */
    PyTypeObject *pinned_view_type; /* one array's memory in its block */
    PyObject *order_manager;  /* the OrderManagerMap singleton */
    PyObject *DeviceMemoryError;
    PyObject *DeviceError;
    PyObject *devices;        /* dict: "sim:0" -> Device (open ones) */
    PyObject *default_device; /* Device for device=None, or NULL */
    PyObject *numpy;          /* imported on first need */
    /* numpy.dtype objects, on first need; bfloat16's is ml_dtypes' or
     * None when it is not importable. */
    PyObject *np_dtypes[SW_DTYPE_COUNT];
    PyObject *track;          /* list of weakrefs to new Arrays, or NULL */
    /* track != NULL, read without mu on every new Array: the common case
     * (no test tracking) then shares no lock between threads. */
    atomic_int tracking;
    /* history.py's hook that adds allocation sites to out-of-memory
     * messages while tracebacks are recorded, or NULL (history.c). */
    PyObject *oom_hook;
    /* Live Queue, SequentialOrderManager and Event objects, for the test
     * suite's leak checks (changed from any thread). */
    _Atomic Py_ssize_t live_queues, live_managers, live_events;
    /* Guards default_device, track and oom_hook (their reads take a
     * reference under it). */
    sw_py_mutex mu;
} sw_py_state;

static inline sw_py_state *sw_py_module_state(PyObject *m)
{
    return (sw_py_state *)PyModule_GetState(m);
}

/* State of one of this module's types (NULL with an exception set when the
 * module is gone). */
static inline sw_py_state *sw_py_type_state(PyTypeObject *tp)
{
    return (sw_py_state *)PyType_GetModuleState(tp);
}

/* The same from a deallocator, which must not touch the error indicator:
 * NULL when the type has lost its module (a heap type's tp_clear drops it,
 * in a collection at interpreter exit). */
static inline sw_py_state *sw_py_type_state_nothrow(PyTypeObject *tp)
{
    PyObject *m = ((PyHeapTypeObject *)tp)->ht_module;
    return m != NULL ? (sw_py_state *)PyModule_GetState(m) : NULL;
}

/* At interpreter shutdown the module state is cleared while objects that
 * refer to it (through their types) may still run code.  0 with an
 * exception set then. */
static inline int sw_py_state_alive(sw_py_state *st)
{
    if (st != NULL && st->devices != NULL)
        return 1;
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError,
                        "spillway's module state is gone (the interpreter "
                        "is shutting down)");
    return 0;
}

/* NULL or None. */
static inline int sw_py_absent(PyObject *o)
{
    return o == NULL || o == Py_None;
}

static inline int sw_py_finalizing(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* ------------------------------------------------------------------------
 * What is process-wide, and why it cannot be in the module state
 *
 * sw_py_process is the one mutable global of the module.  Each part is
 * reached where no module can be:
 *  - gc: the pressure callback's rate limit (pressure.c).  The callback
 *    runs on whatever thread allocates -- a queue worker, a C thread that
 *    never had the GIL -- with the device lock held and without the GIL,
 *    and reads the limit before it may take the GIL.  And the collector it
 *    limits is the interpreter's one, shared by every instance of this
 *    module (the module supports the main interpreter only).
 *  - tasks, release: Python host tasks (hosttask.c).  They are counted and
 *    finished on queue runner threads without the GIL, and the references
 *    they hand back are dropped by a pending call (Py_AddPendingCall, which
 *    carries no module).  An atexit handler must wait for the tasks of
 *    every instance before the interpreter finalizes.
 *  - gate: threads without a thread state that take the GIL (the pressure
 *    callback on a C thread, host tasks on runner threads).  Checking
 *    "not finalizing" and then calling PyGILState_Ensure races with
 *    Py_FinalizeEx tearing thread states down (CPython 3.11 aborts with
 *    "init_threadstate: thread state already initialized";
 *    cpython#124619): the atexit handler closes the gate, before
 *    finalization starts, and lets the threads already through it finish.
 * The thread-local sw_py_thread is per thread by nature: each thread's own
 * count of the device memory it released, and the queue whose host task it
 * is running.
 * ---------------------------------------------------------------------- */

typedef struct sw_py_pytask sw_py_pytask;

typedef struct {
    struct {
        _Atomic int64_t min_interval_ns;
        _Atomic int64_t quiet_until_ns; /* 0: no back-off */
        _Atomic uint64_t seq;           /* collections completed */
        _Atomic uint64_t full_seq;      /* ... of them full ones */
        _Atomic uint64_t young;         /* ... of them young ones */
        _Atomic uint64_t last_chance;   /* calls retried for a full one */
        _Atomic uint64_t skipped_backoff;
        _Atomic uint64_t skipped_shared;
        _Atomic uint64_t fruitful;
        /* gc.collect() calls that found another collection running
         * (free-threaded builds: run_collect tries again) */
        _Atomic uint64_t busy_retries;
        /* the last full collection by a pressure callback was followed
         * by device frees (its own, or anyone's meanwhile) */
        _Atomic int last_full_freed;
    } gc;
    struct { /* Python host tasks queued and not yet finished */
        pthread_mutex_t mu;
        pthread_cond_t cv;
        long pending;
    } tasks;
    struct { /* references handed over by finished keep-alive tasks */
        pthread_mutex_t mu;
        sw_py_pytask *head; /* guarded by mu */
        atomic_int nonempty;
        atomic_int scheduled;
    } release;
    struct {
        atomic_int closed;   /* set by the atexit handler, never cleared */
        atomic_int entering; /* threads through the gate, not yet out */
    } gate;
} sw_py_process_state;

extern sw_py_process_state sw_py_process;

/* Before PyGILState_Ensure on a thread that may have no thread state: 1
 * when it may go ahead (then sw_py_gil_leave() after PyGILState_Release),
 * 0 when the interpreter is shutting down.  Counting first and checking
 * after (both sequentially consistent) means the atexit handler, which
 * closes first and counts after, either sees this thread or is seen by
 * it. */
static inline int sw_py_gil_enter(void)
{
    atomic_fetch_add(&sw_py_process.gate.entering, 1);
    if (atomic_load(&sw_py_process.gate.closed) || !Py_IsInitialized() ||
        sw_py_finalizing()) {
        atomic_fetch_sub(&sw_py_process.gate.entering, 1);
        return 0;
    }
    return 1;
}

static inline void sw_py_gil_leave(void)
{
    atomic_fetch_sub(&sw_py_process.gate.entering, 1);
}

typedef struct {
    /* Device buffers released by this thread (Array deallocation, DLPack
     * deleters): the pressure callback compares it across its collection to
     * see whether that collection freed device memory. */
    uint64_t released;
    /* The queue whose Python host task this thread is running, or NULL. */
    sw_queue *task_queue;
} sw_py_thread_state;

extern _Thread_local sw_py_thread_state sw_py_thread;

/* ------------------------------------------------------------------------
 * util.c: errors to exceptions, argument parsing, the clock
 * ---------------------------------------------------------------------- */

int64_t sw_py_now_ns(void);

/* Raise the exception for library error rc with the detail message;
 * returns NULL. */
PyObject *sw_py_raise_detail(sw_py_state *st, int rc, const char *detail);
/* The same with the thread's detail message (read at once: the next failing
 * call replaces it). */
PyObject *sw_py_raise(sw_py_state *st, int rc);
/* sw_py_raise, or MemoryError for SW_PY_NOMEM. */
PyObject *sw_py_raise_rc(sw_py_state *st, int rc);

/* Arguments of a METH_FASTCALL | METH_KEYWORDS function: names[0..nnames)
 * are the parameters; the first npos may be passed by position, the first
 * nreq are required.  out[i] is NULL when absent. */
int sw_py_parse_args(const char *fname, PyObject *const *args,
                     Py_ssize_t nargs, PyObject *kwnames,
                     const char *const *names, int nnames, int npos,
                     int nreq, PyObject **out);

/* str's UTF-8, for a C string argument: ValueError naming what (a tag, a
 * device spec, ...) when it holds a NUL, which would end it early. */
const char *sw_py_utf8(PyObject *str, const char *what);

/* tag=: a str or None (*tag NULL). */
int sw_py_parse_tag(PyObject *obj, const char **tag);

/* Whether this thread holds the GIL (DLPack deleters run on any thread,
 * with or without it). */
int sw_py_holds_gil(void);

/* ------------------------------------------------------------------------
 * pressure.c: the collector under memory pressure, registered by device.c
 * on every device this module opens; its counters, for the tests.
 * ---------------------------------------------------------------------- */

int sw_py_gc_on_pressure(sw_device *dev, sw_pressure *p, size_t bytes,
                         void *user);
void sw_py_gc_stats_get(sw_py_gc_stats *out);
int64_t sw_py_gc_min_interval(int64_t ns);
void sw_py_gc_backoff_reset(void);

/* No DeviceMemoryError without a full collection.  With the GIL, around a
 * call that can allocate: mark = sw_py_gc_mark() before it; when
 * sw_py_gc_retry_full(rc, mark) says so afterwards, make the call once
 * more between sw_py_gc_force_full(1) and (0): when its ladder settled
 * for a young collection and no full one completed since it began.
 * NOGIL_ALLOC does that. */
typedef struct {
    uint64_t full;  /* full collections completed, process-wide */
    uint64_t young; /* young ones chosen by this thread's callbacks */
} sw_py_gc_mark_t;
sw_py_gc_mark_t sw_py_gc_mark(void);
int sw_py_gc_retry_full(int rc, sw_py_gc_mark_t mark);
void sw_py_gc_force_full(int on);

#define NOGIL_ALLOC(rc, call)                                                 \
    do {                                                                      \
        sw_py_gc_mark_t gc_mark_ = sw_py_gc_mark();                           \
        NOGIL((rc) = (call));                                                 \
        if (sw_py_gc_retry_full((rc), gc_mark_)) {                            \
            sw_py_gc_force_full(1);                                           \
            NOGIL((rc) = (call));                                             \
            sw_py_gc_force_full(0);                                           \
        }                                                                     \
    } while (0)

/* ------------------------------------------------------------------------
 * The map of the package
 *
 *   file          concern                                 header
 *   module.c      state, exec slot, sw_py_process, init   module.h
 *   util.c        errors -> exceptions, argument parsing  module.h
 *   dtype.c       element types: NumPy, buffers, DLPack   dtype.h
 *   shape.c       shapes                                  dtype.h
 *   device.c      Device, devices()                       device.h
 *   pressure.c    the collector under memory pressure     module.h
 *   array.c       Array                                   array.h
 *   view.c        reshape, a[i], a[i:j], a[i] = v         array.h
 *   dlpack.c      __dlpack__, __dlpack_device__           array.h
 *   import.c      from_dlpack, external memory            array.h
 *   create.c      empty, zeros, full, ones, asarray       array.h
 *   ops.c         add, scale, axpy, sum, work on queues   array.h
 *   operators.c   a + b, a * s, -a, a.sum(), a.copy(),    array.h
 *                 a.astype(), a.T, comparisons refused
 *   pickle.c      pickling and copy.copy of Arrays        array.h
 *   accounting.c  PeakScope, MemoryInfo, memory_info ...  device.h
 *   stats.c       memory_stats, mem_get_info,             device.h
 *                 memory_snapshot, the host's bounds
 *   size.c        every size argument, read one way       device.h
 *   hosttask.c    Python host tasks, the release list     queue.h
 *   queue.c       Queue, Event                            queue.h
 *   order.c       SequentialOrderManager                  queue.h
 *   ordermap.c    spillway.order_manager (per thread)     queue.h
 *   history.c     the memory history, tracebacks          array.h
 *   pinned.c      pinned(): your kernels on the memory    array.h
 *   testapi.c     the capsule lent to _spillway_testing   testing_api.h
 *
 * module.c's exec slot calls one setup function per file, in this order;
 * each creates the file's heap types from its PyType_Spec, stores them in
 * the module state, and adds its functions and constants to the module.
 * 0, or -1 with an exception set.
 * ---------------------------------------------------------------------- */

int sw_py_util_setup(PyObject *m, sw_py_state *st); /* the exceptions */
int sw_py_dtype_setup(PyObject *m, sw_py_state *st);
extern PyType_Spec sw_py_device_spec;
int sw_py_device_setup(PyObject *m, sw_py_state *st);
int sw_py_pressure_setup(PyObject *m, sw_py_state *st);
extern PyType_Spec sw_py_array_spec; /* with view.c's and dlpack.c's slots */
int sw_py_array_setup(PyObject *m, sw_py_state *st);
int sw_py_create_setup(PyObject *m, sw_py_state *st);
int sw_py_import_setup(PyObject *m, sw_py_state *st);
int sw_py_ops_setup(PyObject *m, sw_py_state *st);
int sw_py_operators_setup(PyObject *m, sw_py_state *st);
int sw_py_pickle_setup(PyObject *m, sw_py_state *st);
extern PyType_Spec sw_py_peak_spec;
int sw_py_accounting_setup(PyObject *m, sw_py_state *st);
int sw_py_stats_setup(PyObject *m, sw_py_state *st);
int sw_py_size_setup(PyObject *m, sw_py_state *st);
extern PyType_Spec sw_py_event_spec;
extern PyType_Spec sw_py_queue_spec;
int sw_py_queue_setup(PyObject *m, sw_py_state *st);
extern PyType_Spec sw_py_manager_spec;
int sw_py_order_setup(PyObject *m, sw_py_state *st);
extern PyType_Spec sw_py_entry_spec;
extern PyType_Spec sw_py_map_spec;
extern PyType_Spec sw_py_omap_spec;
int sw_py_ordermap_setup(PyObject *m, sw_py_state *st);
int sw_py_history_setup(PyObject *m, sw_py_state *st);
int sw_py_pinned_setup(PyObject *m, sw_py_state *st);
int sw_py_testapi_setup(PyObject *m, sw_py_state *st);
/* capi.c: the capsule spillway._spillway._c_api (c_api.h), and the module
 * entries it shares with the test module's capsule (testapi.c). */
int sw_py_capi_setup(PyObject *m, sw_py_state *st);
PyObject *sw_py_api_resolve_device(PyObject *module, PyObject *obj,
                                   sw_device **dev);
void sw_py_api_device_use(PyObject *device);
void sw_py_api_device_unuse(PyObject *device);
PyObject *sw_py_api_raise_error(PyObject *module, int rc);

/* A heap type of this module from spec, added to it (new reference). */
PyTypeObject *sw_py_add_type(PyObject *m, PyType_Spec *spec);

#endif /* SPILLWAY_PY_MODULE_H */
