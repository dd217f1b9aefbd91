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
 *  - one collection at a time: a callback that had to wait for the GIL
 *    while another collection ran does not collect again, it just lets
 *    the allocation retry;
 *  - the allocator runs the callbacks at most once per allocation.
 * And no DeviceMemoryError without a full collection: the allocator calls
 * the callbacks once more as the last step of a ladder that is about to
 * fail (sw_pressure_last_chance), whoever allocates -- this module, a
 * framework through the allocator plug-ins, a C thread -- on every
 * backend; that call collects in full unless the ladder's first one did,
 * or a full collection completed since it began.  A workload that spills
 * on every step thus runs young collections only while a back-off lasts,
 * and each DeviceMemoryError costs one full collection.  (The module's own
 * calls also keep their older net, NOGIL_ALLOC's retry with force_full,
 * which the last chance leaves with nothing to do.)
 */

#include "device.h"
#include "testing_api.h"

#define GC_BACKOFF_FACTOR 10

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

/* gc.collect(generation) -- which (unlike PyGC_Collect) also runs while
 * gc.disable() is in effect; generation -1 for a full collection.  With the
 * GIL; any exception it raises is reported as unraisable, and an exception
 * already set is preserved. */
static void run_collect(int generation)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *gc = PyImport_ImportModule("gc");
    PyObject *r = NULL;
    if (gc != NULL) {
        r = generation < 0 ? PyObject_CallMethod(gc, "collect", NULL)
                           : PyObject_CallMethod(gc, "collect", "i",
                                                 generation);
        Py_DECREF(gc);
    }
    if (r == NULL)
        PyErr_WriteUnraisable(NULL);
    Py_XDECREF(r);
    PyErr_Restore(type, value, tb);
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
 * gc.collect(0) alone would starve). */
int sw_py_gc_on_pressure(sw_device *dev, sw_pressure *p, size_t bytes,
                         void *user)
{
    (void)bytes;
    sw_py_devctx *ctx = user;
    /* Entered with the device lock held: the Device cannot have removed
     * this callback yet, so ctx is alive; hold it across the unlock. */
    if (!atomic_load(&ctx->alive))
        return 0;
    int young;
    if (sw_pressure_last_chance(p)) {
        /* The allocation fails for good unless this frees something: a
         * full collection, back-off or not -- unless this ladder's first
         * call ran one, or one completed since it began (by any thread):
         * it found whatever a second would. */
        if (first_was_full ||
            atomic_load(&sw_py_process.gc.full_seq) != first_full_seq)
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
        if (atomic_load(&ctx->alive) && !sw_py_finalizing()) {
            if (atomic_load(seqp) != seq0) {
                /* Another thread collected while this one waited. */
                atomic_fetch_add(&sw_py_process.gc.skipped_shared, 1);
            } else {
                uint64_t r0 = sw_py_thread.released;
                int64_t t0 = sw_py_now_ns();
                run_collect(young ? 1 : -1);
                int64_t t1 = sw_py_now_ns();
                released_here = sw_py_thread.released != r0;
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
                if (!young)
                    atomic_fetch_add(&sw_py_process.gc.full_seq, 1);
                atomic_fetch_add(&sw_py_process.gc.seq, 1);
                ran = 1;
            }
        }
        PyGILState_Release(g);
        sw_py_gil_leave();
    }
    /* Freed by this collection, or by anyone meanwhile: worth a retry. */
    int freed = released_here;
    if (have_before && sw_memory_info_get(dev, &after) == SW_OK &&
        after.frees != before.frees)
        freed = 1;

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

int sw_py_pressure_setup(PyObject *m, sw_py_state *st)
{
    (void)st;
    return PyModule_AddIntConstant(m, "GC_BACKOFF_FACTOR", GC_BACKOFF_FACTOR);
}
