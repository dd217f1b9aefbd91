/*
 * pressure.c -- the pressure callback: Python's garbage collector under
 * memory pressure.
 *
 * When an allocation fails on a device (before anything is spilled), the
 * callback registered on every device this module opens runs gc.collect()
 * -- a full collection, even while gc.disable() is in effect -- and tells
 * the allocator to retry when device memory was freed.
 *
 * Locks: device lock -> GIL, never both.  The callback is entered with the
 * device lock held (the sw_pressure it receives), on whatever thread
 * allocates: a Python thread that released the GIL around the allocation,
 * a queue worker or a C thread that never had it.  It releases the device
 * lock before it takes the GIL (PyGILState_Ensure), runs the collector,
 * releases the GIL and only then re-takes the device lock.  So no thread
 * ever holds both, and no thread waits for the GIL while holding a lock
 * that a GIL holder may want: the collection itself frees arrays, which
 * takes the same device lock.
 *
 * Rate limit, process-wide (there is one collector; sw_py_process.gc):
 *  - a full collection that frees no device memory starts a back-off: until
 *    max(gc_min_interval, GC_BACKOFF_FACTOR x its duration) has passed, the
 *    callback runs a young collection (gc.collect(1)) instead, which finds
 *    the garbage made since then before the allocator spills it;
 *  - a full collection that frees device memory ends the back-off;
 *  - one collection at a time: a callback that had to wait (for the GIL,
 *    or without one for collect_mu) while another collection ran does not
 *    collect again, it just lets the allocation retry;
 *  - the allocator runs the callbacks at most once per allocation.
 * And no DeviceMemoryError without a full collection: the allocator calls
 * the callbacks once more as the last step of a ladder that is about to
 * fail (sw_pressure_last_chance), whoever allocates -- this module, a
 * framework through the allocator plug-ins, a C thread -- on every
 * backend; that call collects in full unless the ladder's first one did,
 * or a full collection completed since it began, and that one freed
 * nothing (memory it freed that the allocation still could not get went to
 * other threads, which may have left more garbage since).  A workload that spills
 * on every step thus runs young collections only while a back-off lasts,
 * and each DeviceMemoryError costs one full collection.  (The module's own
 * calls also keep their older net, NOGIL_ALLOC's retry with force_full,
 * which the last chance leaves with nothing to do.)
 */

#include "device.h"
#include "testing_api.h"

#include <time.h>

#define GC_BACKOFF_FACTOR 10

/* One callback collects at a time.  On GIL builds the GIL is that lock
 * (and this one costs nothing); without the GIL, threads attach at once, so
 * callbacks queue here, after they attached (PyMutex_Lock detaches while
 * it waits: a stop-the-world pause never waits for a thread blocked on
 * it), and the one that comes second sees the first's collection in the
 * sequence numbers.  A thread inside a collection never takes it (see
 * collector below). */
static sw_py_mutex collect_mu;

/* Collections that this module did not start.  CPython's gc.collect()
 * returns at once, collecting nothing, while another collection runs --
 * the interpreter's automatic one, a user's gc.collect(), or another
 * thread's that released the GIL in a finalizer (GIL builds too).  So the
 * module follows every collection through gc.callbacks (gc_phase, added at
 * import): which thread collects now, how many have ended, and whether
 * this thread's own call started one.  A callback that finds another
 * thread collecting waits (its thread state released) for that collection
 * to end, then collects itself; one whose own thread is collecting (an
 * allocation in a finalizer) cannot, and does not wait. */
static _Atomic unsigned long collector;  /* thread ident, 0: none */
static _Atomic uint64_t gc_ended;
static _Atomic int phase_hook;           /* gc_phase is in gc.callbacks */
static _Thread_local int started_here;

/* How long a callback waits for collections it did not start. */
#define GC_BUSY_WAIT_NS INT64_C(5000000000)

static PyObject *gc_phase(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *phase = PyTuple_Size(args) > 0 ? PyTuple_GetItem(args, 0)
                                             : NULL;
    if (phase == NULL)
        return NULL;
    if (PyUnicode_Check(phase) &&
        PyUnicode_CompareWithASCIIString(phase, "start") == 0) {
        atomic_store(&collector, PyThread_get_thread_ident());
        started_here = 1;
    } else {
        atomic_store(&collector, 0);
        atomic_fetch_add(&gc_ended, 1);
    }
    Py_RETURN_NONE;
}

static PyMethodDef gc_phase_def = {
    "_spillway_gc_phase", gc_phase, METH_VARARGS,
    "spillway's record of collections (which thread collects, how many "
    "ended): its pressure callback waits for a collection another thread "
    "runs instead of taking gc.collect()'s no-op for one."};

/* This thread is inside a collection (a finalizer's allocation). */
static int collecting_here(void)
{
    return atomic_load(&phase_hook) &&
           atomic_load(&collector) == PyThread_get_thread_ident();
}

/* Set on this thread while sw_py_gc_retry_full's retry runs: its ladder's
 * callback collects in full, back-off or not. */
static _Thread_local int force_full;
/* Callbacks on this thread that ran a young collection instead of a full
 * one (or found one running): only their ladders want the retry. */
static _Thread_local uint64_t young_here;
/* This thread's last first call of a ladder (not its last chance): the
 * full collections completed when it began, and whether it chose a full
 * one itself.  The allocator never runs the callbacks of a ladder inside
 * another's on one thread (an allocation inside a callback runs none), so
 * a last chance reads its own ladder's first call here. */
static _Thread_local uint64_t first_full_seq;
static _Thread_local int first_was_full;

/* How run_collect went. */
enum { COLLECT_RAN, COLLECT_SHARED, COLLECT_NONE };

/* gc.collect(generation) -- which (unlike PyGC_Collect) also runs while
 * gc.disable() is in effect; generation -1 for a full collection.  With the
 * GIL; any exception it raises is reported as unraisable, and an exception
 * already set is preserved.
 *
 * COLLECT_RAN when this call collected.  When another thread's collection
 * was running (gc.collect() then does nothing), it waits for that one to
 * end, the thread state released, and tries again: COLLECT_SHARED when
 * what ended was a callback's collection of the kind *seqp counts (begun
 * after seq0: it serves this allocation) and own is 0, COLLECT_NONE when
 * none could run within GC_BUSY_WAIT_NS.  An allocation's last chance
 * (own) runs one of its own, right before its last try: another thread's
 * collection, however recent, freed memory that other threads could take
 * before this one's turn.  Without the gc.callbacks record (removed by
 * someone) a call is taken for a collection, as before. */
static int run_collect(int generation, _Atomic uint64_t *seqp, uint64_t seq0,
                       int own)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    int how = COLLECT_NONE;
    PyObject *gc = PyImport_ImportModule("gc");
    int64_t until = sw_py_now_ns() + GC_BUSY_WAIT_NS;
    while (gc != NULL) {
        uint64_t ended0 = atomic_load(&gc_ended);
        started_here = 0;
        PyObject *r = generation < 0
                          ? PyObject_CallMethod(gc, "collect", NULL)
                          : PyObject_CallMethod(gc, "collect", "i",
                                                generation);
        if (r == NULL)
            PyErr_WriteUnraisable(NULL);
        if (started_here || r == NULL || !atomic_load(&phase_hook) ||
            (atomic_load(&collector) == 0 &&
             atomic_load(&gc_ended) == ended0)) {
            /* Ran (or failed, or cannot be told apart from running). */
            how = COLLECT_RAN;
#ifdef Py_GIL_DISABLED
            /* Garbage found: objects outside the collector's view (a
             * DLPack capsule, a NumPy view -- what holds a lease) that it
             * held and another thread made are not freed by this thread's
             * last reference: that thread is asked to, when it next runs
             * (biased reference counting), and a thread blocked on this
             * allocation may not run.  The next collection frees them,
             * whatever those threads do. */
            Py_ssize_t found = r != NULL ? PyLong_AsSsize_t(r) : 0;
            if (found > 0 && started_here) {
                Py_DECREF(r);
                r = PyObject_CallMethod(gc, "collect", "i", generation < 0
                                                                ? 2
                                                                : generation);
                if (r == NULL)
                    PyErr_WriteUnraisable(NULL);
            }
            PyErr_Clear();
#endif
            Py_XDECREF(r);
            break;
        }
        Py_DECREF(r);
        /* Another thread collects: wait for it to end. */
        atomic_fetch_add(&sw_py_process.gc.busy_retries, 1);
        int late = 0;
        Py_BEGIN_ALLOW_THREADS
        while (atomic_load(&gc_ended) == ended0 &&
               atomic_load(&collector) != 0) {
            if (sw_py_now_ns() > until) {
                late = 1;
                break;
            }
            struct timespec pause = {0, 100000}; /* 0.1 ms */
            nanosleep(&pause, NULL);
        }
        Py_END_ALLOW_THREADS
        if (!own && atomic_load(seqp) != seq0) {
            how = COLLECT_SHARED;
            break;
        }
        if (late || sw_py_now_ns() > until)
            break;
    }
    Py_XDECREF(gc);
    PyErr_Restore(type, value, tb);
    return how;
}

/* The callback (sw_pressure_fn), registered by device.c with the Device's
 * context as user.  The contract, in order:
 *  1. entered with the device lock held, maybe without a Python thread
 *     state: read only atomics and ctx until the lock is released;
 *  2. release the device lock (sw_pressure_unlock) BEFORE asking for the
 *     GIL: a thread holding the GIL may be waiting for this very lock (to
 *     free an array, to allocate), and would never give the GIL back;
 *  3. with the GIL and no device lock: collect (finalizers may free device
 *     memory, re-entering the library on this thread; that takes the lock
 *     itself);
 *  4. release the GIL BEFORE re-taking the device lock (sw_pressure_relock),
 *     and return with the lock held, as entered.
 * Never take the GIL while the interpreter finalizes: it would never come.
 *
 * Outside a back-off it collects in full; inside one, only the young
 * generations (gc.collect(1): the cycles made since the fruitless full
 * collection live there, and collecting generation 1, not only 0, keeps
 * promoting survivors to the oldest generation, which cpython#122567 shows
 * gc.collect(0) alone would starve).  On free-threaded builds, whose
 * collector has no generations, inside one it collects nothing: the
 * allocation spills, or its last chance collects in full. */
int sw_py_gc_on_pressure(sw_device *dev, sw_pressure *p, size_t bytes,
                         void *user)
{
    (void)bytes;
    sw_py_devctx *ctx = user;
    /* Entered with the device lock held: the Device cannot have removed
     * this callback yet, so ctx is alive; hold it across the unlock. */
    if (!atomic_load(&ctx->alive))
        return 0;
    int young, last = sw_pressure_last_chance(p);
    if (last) {
        /* The allocation fails for good unless this frees something: a
         * full collection, back-off or not -- unless this ladder's first
         * call ran one, or one completed since it began (by any thread),
         * and it freed nothing: it found whatever a second would.  One
         * that freed memory the allocation still could not get means other
         * threads took it, and may have left garbage since: collect
         * again. */
        if ((first_was_full ||
             atomic_load(&sw_py_process.gc.full_seq) != first_full_seq) &&
            !atomic_load(&sw_py_process.gc.last_full_freed))
            return 0;
        young = 0;
        atomic_fetch_add(&sw_py_process.gc.last_chance, 1);
    } else {
        int64_t quiet = atomic_load(&sw_py_process.gc.quiet_until_ns);
        young = !force_full && quiet != 0 && sw_py_now_ns() < quiet;
        first_full_seq = atomic_load(&sw_py_process.gc.full_seq);
        first_was_full = !young;
        if (young) {
            atomic_fetch_add(&sw_py_process.gc.skipped_backoff, 1);
            young_here++;
        }
    }
#ifdef Py_GIL_DISABLED
    /* The free-threaded collector has no generations: gc.collect(1)
     * walks the whole heap, as a full collection does.  So in a back-off
     * the first call collects nothing (the allocator spills); the last
     * chance still collects in full before any DeviceMemoryError. */
    if (young)
        return 0;
#endif
    /* A full collection completed meanwhile serves this allocation too; a
     * young one only a young one. */
    _Atomic uint64_t *seqp =
        young ? &sw_py_process.gc.seq : &sw_py_process.gc.full_seq;
    uint64_t seq0 = atomic_load(seqp);
    sw_py_ctx_ref(ctx);

    /* The device lock goes first: never hold it while taking the GIL. */
    sw_pressure_unlock(p);

    sw_memory_info before, after;
    int have_before = sw_memory_info_get(dev, &before) == SW_OK;
    int ran = 0, released_here = 0;
    if (sw_py_gil_enter()) {
        PyGILState_STATE g = PyGILState_Ensure();
        /* Inside a collection on this thread (a finalizer allocating):
         * no collection can run here, and none is waited for. */
        int nested = collecting_here();
        if (!nested)
            SW_PY_LOCK(&collect_mu);
        if (nested || !atomic_load(&ctx->alive) || sw_py_finalizing()) {
            /* nothing to run */
        } else if (!last && atomic_load(seqp) != seq0) {
            /* Another thread collected while this one waited. */
            atomic_fetch_add(&sw_py_process.gc.skipped_shared, 1);
        } else {
            uint64_t r0 = sw_py_thread.released;
            int64_t t0 = sw_py_now_ns();
            int how = run_collect(young ? 1 : -1, seqp, seq0, last);
            int64_t t1 = sw_py_now_ns();
            released_here = sw_py_thread.released != r0;
            if (how == COLLECT_SHARED) {
                atomic_fetch_add(&sw_py_process.gc.skipped_shared, 1);
            } else if (how == COLLECT_RAN) {
                if (young) {
                    /* Says nothing of what a full one would find: the
                     * back-off stands. */
                    atomic_fetch_add(&sw_py_process.gc.young, 1);
                } else if (released_here) {
                    atomic_store(&sw_py_process.gc.quiet_until_ns, 0);
                    atomic_fetch_add(&sw_py_process.gc.fruitful, 1);
                } else {
                    int64_t wait = GC_BACKOFF_FACTOR * (t1 - t0);
                    int64_t min =
                        atomic_load(&sw_py_process.gc.min_interval_ns);
                    atomic_store(&sw_py_process.gc.quiet_until_ns,
                                 t1 + (wait > min ? wait : min));
                }
                if (!young) {
                    /* Before the sequence moves: a callback that sees the
                     * new full_seq (its last chance) reads this one's. */
                    atomic_store(&sw_py_process.gc.last_full_freed,
                                 released_here);
                    atomic_fetch_add(&sw_py_process.gc.full_seq, 1);
                }
                atomic_fetch_add(&sw_py_process.gc.seq, 1);
                ran = 1;
            }
        }
        if (!nested)
            SW_PY_UNLOCK(&collect_mu);
        PyGILState_Release(g);
        sw_py_gil_leave();
    }
    /* Freed by this collection, or by anyone meanwhile: worth a retry. */
    int freed = released_here;
    if (have_before && sw_memory_info_get(dev, &after) == SW_OK &&
        after.frees != before.frees)
        freed = 1;
    if (ran && !young && freed)
        atomic_store(&sw_py_process.gc.last_full_freed, 1);

    sw_pressure_relock(p);
    if (ran)
        sw_pressure_note_gc(p);
    sw_py_ctx_unref(ctx);
    return freed;
}

/* ------------------------------------------------------------------------
 * The last chance: no DeviceMemoryError without a full collection
 *
 * The allocator runs the callbacks once per allocation, before it spills,
 * and a callback cannot tell whether spilling will then succeed.  So a
 * callback in the back-off collects only the young generations, and a call
 * from this module that can allocate, should it still fail with SW_ERR_OOM
 * after its ladder settled for a young collection, no full one having
 * completed since it began, is made once more (a failed call changed
 * nothing) with force_full set: that retry's ladder collects in full,
 * through the same callback and locks.  A call whose ladder never reached
 * the callback (a request over the whole budget) is not retried.
 * ---------------------------------------------------------------------- */

sw_py_gc_mark_t sw_py_gc_mark(void)
{
    sw_py_gc_mark_t m = {atomic_load(&sw_py_process.gc.full_seq),
                         young_here};
    return m;
}

int sw_py_gc_retry_full(int rc, sw_py_gc_mark_t mark)
{
    if (rc != SW_ERR_OOM || force_full)
        return 0;
    if (young_here == mark.young)
        return 0; /* its ladder never settled for a young collection (a
                   * request over the whole budget fails before any) */
    if (atomic_load(&sw_py_process.gc.full_seq) != mark.full)
        return 0; /* a full collection already ran since the call began */
    if (!Py_IsInitialized() || sw_py_finalizing())
        return 0;
    atomic_fetch_add(&sw_py_process.gc.last_chance, 1);
    return 1;
}

void sw_py_gc_force_full(int on)
{
    force_full = on;
}

/* ------------------------------------------------------------------------
 * For the tests (testapi.c lends these to spillway._spillway_testing)
 * ---------------------------------------------------------------------- */

void sw_py_gc_stats_get(sw_py_gc_stats *out)
{
    int64_t q = atomic_load(&sw_py_process.gc.quiet_until_ns);
    int64_t now = sw_py_now_ns();
    out->collections = atomic_load(&sw_py_process.gc.seq);
    out->full = atomic_load(&sw_py_process.gc.full_seq);
    out->young = atomic_load(&sw_py_process.gc.young);
    out->last_chance = atomic_load(&sw_py_process.gc.last_chance);
    out->fruitful = atomic_load(&sw_py_process.gc.fruitful);
    out->skipped_backoff = atomic_load(&sw_py_process.gc.skipped_backoff);
    out->skipped_shared = atomic_load(&sw_py_process.gc.skipped_shared);
    out->busy_retries = atomic_load(&sw_py_process.gc.busy_retries);
    out->backoff_left_ns = q > now ? q - now : 0;
}

int64_t sw_py_gc_min_interval(int64_t ns)
{
    if (ns < 0)
        return atomic_load(&sw_py_process.gc.min_interval_ns);
    return atomic_exchange(&sw_py_process.gc.min_interval_ns, ns);
}

void sw_py_gc_backoff_reset(void)
{
    atomic_store(&sw_py_process.gc.quiet_until_ns, 0);
}

/* gc_phase into gc.callbacks, once per process (the module is imported
 * once; it never goes while the interpreter runs). */
static int add_phase_hook(void)
{
    if (atomic_load(&phase_hook))
        return 0;
    PyObject *gc = PyImport_ImportModule("gc");
    PyObject *cbs = gc ? PyObject_GetAttrString(gc, "callbacks") : NULL;
    PyObject *fn = cbs ? PyCFunction_New(&gc_phase_def, NULL) : NULL;
    int rc = fn != NULL && PyList_Check(cbs) ? PyList_Append(cbs, fn) : -1;
    if (rc == 0)
        atomic_store(&phase_hook, 1);
    else if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ImportError, "gc.callbacks is not a list");
    Py_XDECREF(fn);
    Py_XDECREF(cbs);
    Py_XDECREF(gc);
    return rc;
}

int sw_py_pressure_setup(PyObject *m, sw_py_state *st)
{
    (void)st;
    if (add_phase_hook() < 0)
        return -1;
    return PyModule_AddIntConstant(m, "GC_BACKOFF_FACTOR", GC_BACKOFF_FACTOR);
}
