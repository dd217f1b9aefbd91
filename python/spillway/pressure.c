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
 */

#include "device.h"
#include "testing_api.h"

#define GC_BACKOFF_FACTOR 10

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
 * Never take the GIL while the interpreter finalizes: it would never come. */
int sw_py_gc_on_pressure(sw_device *dev, sw_pressure *p, size_t bytes,
                         void *user)
{
    (void)bytes;
    sw_py_devctx *ctx = user;
    /* Entered with the device lock held: the Device cannot have removed
     * this callback yet, so ctx is alive; hold it across the unlock. */
    if (!atomic_load(&ctx->alive))
        return 0;
    int64_t quiet = atomic_load(&sw_py_process.gc.quiet_until_ns);
    if (quiet != 0 && sw_py_now_ns() < quiet) {
        atomic_fetch_add(&sw_py_process.gc.skipped_backoff, 1);
        return 0;
    }
    uint64_t seq0 = atomic_load(&sw_py_process.gc.seq);
    sw_py_ctx_ref(ctx);

    /* The device lock goes first: never hold it while taking the GIL. */
    sw_pressure_unlock(p);

    sw_memory_info before, after;
    int have_before = sw_memory_info_get(dev, &before) == SW_OK;
    int ran = 0, released_here = 0;
    if (Py_IsInitialized() && !sw_py_finalizing()) {
        PyGILState_STATE g = PyGILState_Ensure();
        if (atomic_load(&ctx->alive) && !sw_py_finalizing()) {
            if (atomic_load(&sw_py_process.gc.seq) != seq0) {
                /* Another thread collected while this one waited. */
                atomic_fetch_add(&sw_py_process.gc.skipped_shared, 1);
            } else {
                uint64_t r0 = sw_py_thread.released;
                int64_t t0 = sw_py_now_ns();
                run_collect();
                int64_t t1 = sw_py_now_ns();
                released_here = sw_py_thread.released != r0;
                if (released_here) {
                    atomic_store(&sw_py_process.gc.quiet_until_ns, 0);
                    atomic_fetch_add(&sw_py_process.gc.fruitful, 1);
                } else {
                    int64_t wait = GC_BACKOFF_FACTOR * (t1 - t0);
                    int64_t min =
                        atomic_load(&sw_py_process.gc.min_interval_ns);
                    atomic_store(&sw_py_process.gc.quiet_until_ns,
                                 t1 + (wait > min ? wait : min));
                }
                atomic_fetch_add(&sw_py_process.gc.seq, 1);
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
    sw_py_ctx_unref(ctx);
    return freed;
}

/* ------------------------------------------------------------------------
 * For the tests (testapi.c lends these to spillway._spillway_testing)
 * ---------------------------------------------------------------------- */

void sw_py_gc_stats_get(sw_py_gc_stats *out)
{
    int64_t q = atomic_load(&sw_py_process.gc.quiet_until_ns);
    int64_t now = sw_py_now_ns();
    out->collections = atomic_load(&sw_py_process.gc.seq);
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
