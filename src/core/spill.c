/*
 * spill.c -- spilling: choosing victims (from lru.c's heap), and the
 * copies of buffers to host memory and back, in stream order.
 *
 * Copies in stream order.  Neither a spill nor a restore drains the device
 * or waits on the host.  A spill queues its device->host copies on the
 * copy queue (backend.h: copy_queue; the default queue where there is
 * none) behind the work already queued that may use the buffers (the copy
 * queue waits, on the device, for the default queue, which waits for the
 * other queues that used them), then makes the default queue wait, on the
 * device, for the copies: the device memory goes to the cache at once, and
 * any work that reuses it, queued later, runs after the copies.  A restore
 * queues its host->device copy the same way before the launch that needs
 * it.  Each batch of copies is an xfer: one event, shared by the buffers
 * it moves.  The host copy of a buffer whose spill is in flight is not
 * readable yet: host reads and writes of it wait for the xfer (without the
 * lock); a host block a restore copies from goes back to the pool only
 * once its xfer is done.  Completed xfers are noticed lazily (event
 * queries never block), at the next spill, restore, host access,
 * synchronize or memory query.
 */
#include "core/internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------
 * Buffers in motion
 *
 * `moving` marks a base whose restore is obtaining memory (which may
 * release the lock: pressure callbacks, waits): anyone else who needs it
 * waits on dev->moved, so two threads never restore one buffer at once.
 * ---------------------------------------------------------------------- */

void sw__cond_wait_locked(sw_device *dev)
{
    sw__assert_locked(dev);
    dev->waiting++;
    atomic_store_explicit(&dev->owned, 0, memory_order_relaxed);
    sw__tl_dev = NULL;
    pthread_cond_wait(&dev->moved, &dev->lock);
    sw__tl_dev = dev;
    atomic_store_explicit(&dev->owner, pthread_self(), memory_order_relaxed);
    atomic_store_explicit(&dev->owned, 1, memory_order_relaxed);
    dev->waiting--;
}

void sw__wait_stable_locked(sw_device *dev, sw__buf *base)
{
    sw__assert_locked(dev);
    while (base->moving)
        sw__cond_wait_locked(dev);
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------------
 * Xfers: batches of copies in flight
 * ---------------------------------------------------------------------- */

/* The queue copies go on. */
static sw__bqueue *copy_queue(sw_device *dev)
{
    return dev->copyq != NULL ? dev->copyq : dev->q;
}

/* An xfer for what was just queued on the copy queue, and the default
 * queue made to wait for it (unless `defer`: a prefetch, whose buffer's
 * next use makes it wait); NULL (with the message set) when no event can
 * be had, after waiting for the copy queue instead. */
static sw__xfer *xfer_record_locked(sw_device *dev, int kind, double t0,
                                    sw__bevent *start, bool defer, int *rc)
{
    *rc = SW_OK;
    sw__xfer *x = sw__calloc(1, sizeof *x);
    sw__bevent *ev = NULL;
    if (x != NULL)
        *rc = sw__b_event_record_q(dev, copy_queue(dev), &ev);
    if (x != NULL && *rc == SW_OK && dev->copyq != NULL && !defer)
        *rc = sw__b_wait_event(dev, dev->q, ev);
    if (x == NULL || *rc != SW_OK) {
        /* No event (no host memory): wait for the copies on the host,
         * without the lock; they are then done, and ordered before
         * anything queued later.  A copy error surfaces here. */
        if (ev != NULL)
            sw__b_event_release(dev->ops, ev);
        if (start != NULL)
            sw__b_event_release(dev->ops, start);
        sw__free(x);
        const sw__backend_ops *ops = dev->ops;
        sw__bqueue *q = copy_queue(dev);
        dev->waiting++;
        sw__unlock(dev);
        *rc = sw__b_synchronize(ops, q);
        sw__lock(dev);
        dev->waiting--;
        return NULL;
    }
    x->ev = ev;
    x->kind = kind;
    x->t0 = t0;
    x->epoch = dev->counters_epoch;
    x->start = start;
    /* Timed from the history's anchor, if one was recorded before start
     * on this queue. */
    x->anchor_gen = start != NULL && dev->trace.anchor != NULL
                        ? dev->trace.anchor_gen
                        : 0;
    return x;
}

/* Attach base to x (counted), on the device's list of buffers with a copy
 * in flight. */
static void xfer_attach_locked(sw_device *dev, sw__buf *base, sw__xfer *x)
{
    assert(base->xfer == NULL);
    base->xfer = x;
    x->refs++;
    base->xnext = dev->xfers;
    base->xprev = NULL;
    if (dev->xfers)
        dev->xfers->xprev = base;
    dev->xfers = base;
}

static void xfer_unref_locked(sw_device *dev, sw__xfer *x)
{
    if (--x->refs > 0)
        return;
    if (x->ends != NULL)
        sw__trace_xfer_ends_locked(dev, x);
    if (x->ev != NULL)
        sw__b_event_release(dev->ops, x->ev);
    if (x->start != NULL)
        sw__b_event_release(dev->ops, x->start);
    sw__free(x);
}

/* Nonzero once x's copies are done (querying, never waiting). */
static bool xfer_done_locked(sw_device *dev, sw__xfer *x)
{
    if (x->done)
        return true;
    int done = 0;
    int rc = sw__b_event_query(dev->ops, x->ev, &done);
    if (!done && rc == SW_OK)
        return false;
    x->done = true;
    x->rc = rc;
    /* The device's time for the copies where it can say.  Else the time
     * since their enqueue not already counted: batches on the in-order
     * copy queue run one after another, but a batch is noticed done only
     * when someone looks, often long after, and many at once.  Summed
     * whole, their enqueue-to-noticed times overlapped (46 s of spill
     * time in a 0.9 s demo run); counted as a union they are the time
     * copies were in flight, never more than the time that passed (still
     * counting a batch's wait behind earlier work, and the delay before
     * its end was noticed). */
    double dt = 0;
    if (x->start == NULL || rc != SW_OK ||
        sw__b_event_elapsed(dev->ops, x->start, x->ev, &dt) != SW_OK) {
        double now = now_seconds();
        double from = x->t0 > dev->xfer_host_until ? x->t0
                                                   : dev->xfer_host_until;
        dt = now > from ? now - from : 0;
        if (now > dev->xfer_host_until)
            dev->xfer_host_until = now;
    }
    if (x->epoch != dev->counters_epoch)
        dt = 0; /* queued before sw_reset_counters: its count went too */
    if (x->kind == SW__XFER_SPILL)
        dev->spill_seconds += dt;
    else
        dev->restore_seconds += dt;
    return true;
}

/* Take base off its xfer (and the device's list), keeping its host block:
 * a later copy of the same buffer on the (in-order) copy queue supersedes
 * it. */
static sw__xfer *xfer_detach_locked(sw_device *dev, sw__buf *base)
{
    sw__xfer *x = base->xfer;
    if (base->xprev)
        base->xprev->xnext = base->xnext;
    else
        dev->xfers = base->xnext;
    if (base->xnext)
        base->xnext->xprev = base->xprev;
    base->xnext = base->xprev = NULL;
    base->xfer = NULL;
    return x;
}

/* base's copy is done: detach it, and give a restore's host block back
 * (or a freed base's, releasing the base). */
static void xfer_finish_locked(sw_device *dev, sw__buf *base)
{
    sw__xfer *x = xfer_detach_locked(dev, base);
    int kind = x->kind, rc = x->rc;
    uint64_t d0 = 0, d1 = 0;
    if (dev->tracing)
        sw__trace_xfer_times_locked(dev, x, &d0, &d1);
    xfer_unref_locked(dev, x);
    if (rc != SW_OK && kind == SW__XFER_SPILL && base->state == SW_SPILLED)
        base->lost = true; /* the copy failed on the device: see above */
    if (kind == SW__XFER_RESTORE && rc == SW_OK)
        base->qmask &= ~SW__QMASK_RESTORE; /* landed: nothing to wait for */
    if (base->state == SW_RESIDENT && base->host != NULL &&
        !base->hold_host && !base->clean) {
        /* A restore's source, written since (a clean copy keeps it). */
        sw__host_put_locked(dev, base->host, base->host_size,
                            base->host_pinned);
        base->host = NULL;
    }
    if (dev->tracing)
        sw__trace_emit_timed(dev, kind == SW__XFER_SPILL
                                      ? SW_TRACE_SPILL_END
                                      : SW_TRACE_RESTORE_END,
                             base, base->alloc_size, rc != SW_OK, d0, d1);
    if (base->released) /* freed while its copy ran */
        sw__buf_slot_free_locked(dev, base);
}

/* base's copy is superseded by a later one on the in-order copy queue,
 * which owns base from now on.  When base was the xfer's last buffer, its
 * copies have not been seen to end and the device times them
 * (event_elapsed), the xfer waits among the orphans for its time to be
 * counted: dropped, its seconds were lost (a restore re-spilled before
 * anyone looked undercounted restore_seconds, and the demo's restore
 * bandwidth came out at 10x memcpy's at 512 steps).  Timed on the host,
 * an orphan's "enqueue to noticed" would count the time it waited to be
 * noticed, many times its copies' (overlapping orphans summed to more
 * than the run's wall time on the CUDA stand-in): dropped, as before. */
static void xfer_supersede_locked(sw_device *dev, sw__buf *base)
{
    sw__xfer *x = xfer_detach_locked(dev, base);
    if (dev->tracing) /* its copy still ends in the history */
        sw__trace_xfer_note_end_locked(dev, x, base);
    if (x->refs == 1 && x->start != NULL && !xfer_done_locked(dev, x)) {
        x->onext = dev->xfer_orphans;
        dev->xfer_orphans = x;
        return;
    }
    xfer_unref_locked(dev, x);
}

/* Count the orphans that are done and let them go; with `all` (the device
 * closing, every copy waited for), the rest too. */
static void orphans_poll_locked(sw_device *dev, bool all)
{
    for (sw__xfer **pp = &dev->xfer_orphans, *x; (x = *pp) != NULL;) {
        if (xfer_done_locked(dev, x) || all) {
            *pp = x->onext;
            xfer_unref_locked(dev, x);
        } else {
            pp = &x->onext;
        }
    }
}

void sw__xfer_poll_locked(sw_device *dev)
{
    sw__assert_locked(dev);
    for (sw__buf *b = dev->xfers, *next; b != NULL; b = next) {
        next = b->xnext;
        if (xfer_done_locked(dev, b->xfer))
            xfer_finish_locked(dev, b);
    }
    if (dev->xfer_orphans != NULL)
        orphans_poll_locked(dev, false);
}

static void tl_close_locked(sw_device *dev);

void sw__xfer_close_locked(sw_device *dev)
{
    sw__assert_locked(dev);
    while (dev->xfers != NULL)
        (void)sw__xfer_wait_locked(dev, dev->xfers);
    /* Each orphan's copies came before a later xfer's on the in-order
     * copy queue, all of which are done now. */
    orphans_poll_locked(dev, true);
    tl_close_locked(dev);
}

int sw__xfer_wait_locked(sw_device *dev, sw__buf *base)
{
    sw__assert_locked(dev);
    while (base->xfer != NULL) {
        sw__xfer *x = base->xfer;
        if (!xfer_done_locked(dev, x)) {
            /* Wait without the lock; x and base stay (pinned by the
             * caller, and x by its reference). */
            x->refs++;
            const sw__backend_ops *ops = dev->ops;
            dev->waiting++;
            sw__unlock(dev);
            int rc = sw__b_event_wait(ops, x->ev);
            sw__lock(dev);
            dev->waiting--;
            (void)rc; /* recorded by the query below */
            (void)xfer_done_locked(dev, x);
            bool still = base->xfer == x;
            xfer_unref_locked(dev, x);
            if (!still)
                continue; /* finished by another thread meanwhile */
        }
        xfer_finish_locked(dev, base);
    }
    if (base->lost)
        return sw__errorf(SW_ERR_DEVICE, "%s: the data of buffer '%s' was "
                          "lost: its copy to host memory failed on the "
                          "device after its device memory was reused",
                          dev->name, base->tag);
    return SW_OK;
}

void sw__xfer_settle_locked(sw_device *dev, sw__buf *base)
{
    sw__assert_locked(dev);
    sw__xfer *x = base->xfer;
    if (x == NULL)
        return;
    if (!xfer_done_locked(dev, x)) {
        /* The xfer is held, not the base: base may be one freed while its
         * copy ran (released), which the poll below lets go for good --
         * pinned and unpinned around the wait it was released twice. */
        x->refs++;
        const sw__backend_ops *ops = dev->ops;
        dev->waiting++;
        sw__unlock(dev);
        (void)sw__b_event_wait(ops, x->ev);
        sw__lock(dev);
        dev->waiting--;
        (void)xfer_done_locked(dev, x);
        xfer_unref_locked(dev, x);
    }
    sw__xfer_poll_locked(dev);
}

int sw__xfer_order_locked(sw_device *dev, sw__buf *base)
{
    sw__assert_locked(dev);
    sw__xfer *x = base->xfer;
    if (x != NULL && x->kind == SW__XFER_RESTORE && !xfer_done_locked(dev, x)) {
        int rc = sw__b_wait_event(dev, dev->q, x->ev);
        if (rc != SW_OK)
            return rc;
    }
    base->qmask &= ~SW__QMASK_RESTORE;
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * The default queue's timeline
 *
 * A spill's copy out must follow the default queue's work on its buffer.
 * Making the copy queue wait for everything queued there serialized the
 * copies with compute: a pipeline's forward step allocates, the copy of
 * an array last used steps ago waited for the step before's kernels, and
 * the step's kernels waited for the copy.  So events ("marks") are
 * recorded on the default queue as spills go, each with dev->clock then.
 * A use sets its buffer's last_use when unpinned, after its work was
 * queued, so a mark with clock >= last_use was recorded after that work:
 * the copy waits for the oldest such mark, usually complete already.
 * ---------------------------------------------------------------------- */

static struct sw__tlmark *tl_at(sw_device *dev, unsigned i)
{
    return &dev->tl[(dev->tl_first + i) % SW__TL_MAX];
}

static void tl_pop_locked(sw_device *dev)
{
    sw__b_event_release(dev->ops, tl_at(dev, 0)->ev);
    dev->tl_first = (dev->tl_first + 1) % SW__TL_MAX;
    dev->tl_len--;
}

/* Forget the marks that completed (the queue is in order: the oldest
 * first), noting how far the default queue has run. */
static void tl_poll_locked(sw_device *dev)
{
    while (dev->tl_len > 0) {
        struct sw__tlmark *m = tl_at(dev, 0);
        int done = 0;
        if (sw__b_event_query(dev->ops, m->ev, &done) != SW_OK || !done)
            return;
        if (m->clock > dev->tl_done)
            dev->tl_done = m->clock;
        tl_pop_locked(dev);
    }
}

/* A mark now, after everything queued on the default queue; with no host
 * memory for it, none (the caller then waits for the whole queue). */
static struct sw__tlmark *tl_mark_locked(sw_device *dev)
{
    if (dev->tl_len > 0 && tl_at(dev, dev->tl_len - 1)->clock == dev->clock)
        return tl_at(dev, dev->tl_len - 1);
    sw__bevent *ev = NULL;
    if (sw__b_event_record_q(dev, dev->q, &ev) != SW_OK)
        return NULL;
    if (dev->tl_len == SW__TL_MAX)
        tl_pop_locked(dev); /* waits on a later mark are longer, not wrong */
    struct sw__tlmark *m = tl_at(dev, dev->tl_len++);
    m->ev = ev;
    m->clock = dev->clock;
    return m;
}

/* Order the copy queue after the default queue's work on a buffer whose
 * last use was queued by `tick` (its last_use), on the device, never
 * waiting on the host.  Fails only when no wait can be queued. */
static int cq_after_locked(sw_device *dev, uint64_t tick)
{
    if (dev->copyq == NULL || tick <= dev->cq_after)
        return SW_OK;
    tl_poll_locked(dev);
    if (tick <= dev->tl_done) {
        dev->cq_after = dev->tl_done; /* complete: before anything */
        return SW_OK;
    }
    struct sw__tlmark *m = NULL;
    for (unsigned i = 0; i < dev->tl_len && m == NULL; i++)
        if (tl_at(dev, i)->clock >= tick)
            m = tl_at(dev, i);
    if (m == NULL && (m = tl_mark_locked(dev)) == NULL) {
        int rc = sw__b_queue_wait(dev, dev->copyq, dev->q);
        if (rc == SW_OK)
            dev->cq_after = dev->clock;
        return rc;
    }
    int rc = sw__b_wait_event(dev, dev->copyq, m->ev);
    if (rc == SW_OK)
        dev->cq_after = m->clock;
    return rc;
}

static void tl_close_locked(sw_device *dev)
{
    while (dev->tl_len > 0)
        tl_pop_locked(dev);
}

/* ------------------------------------------------------------------------
 * Spilling
 * ---------------------------------------------------------------------- */

/* Whether the copy queue already follows the default queue's work of
 * uses queued by `tick`. */
static bool cq_covers_locked(sw_device *dev, uint64_t tick)
{
    if (dev->copyq == NULL || tick <= dev->cq_after)
        return true;
    tl_poll_locked(dev);
    return tick <= dev->tl_done;
}

/* One batch of sw__spill_locked: victims whose copies need no wait, or
 * one wait before the first.  *more: it stopped at a victim that needs a
 * wait, to leave it to the next batch. */
static int spill_batch_locked(sw_device *dev, uint64_t need,
                              uint64_t *spilled, bool *more)
{
    sw__assert_locked(dev);
    *spilled = 0;
    if (dev->heap_len == 0)
        return SW_OK;
    if (dev->xfers != NULL || dev->xfer_orphans != NULL)
        sw__xfer_poll_locked(dev);
    sw__buf *victims = NULL, *skipped = NULL, *b;
    uint64_t total = 0;
    int rc = SW_OK;
    double t0 = now_seconds();
    sw__bqueue *cq = copy_queue(dev);
    sw__bevent *start = NULL; /* before the first copy, after the wait */
    if (dev->tracing) /* before anything is queued: cq may be idle */
        sw__trace_anchor_locked(dev, cq);

    /* Choose victims, least recently used first, and queue their copies
     * out behind the work that may use them. */
    while (total < need && (b = sw__lru_pop_locked(dev)) != NULL) {
        if (b->pins > 0 || b->moving) {
            b->tmp_next = skipped;
            skipped = b;
            continue;
        }
        /* Other queues' work on it first (device-side, never blocks):
         * the default queue waits for it, and the copy for that wait. */
        if (b->qmask != 0) {
            if ((rc = sw__order_use_locked(dev, b, NULL)) != SW_OK) {
                b->tmp_next = skipped;
                skipped = b;
                break;
            }
            b->last_use = ++dev->clock;
        }
        /* A clean copy goes without copying: its host block already
         * holds its data.  Its memory goes to the cache like any
         * victim's, reused in stream order after the work queued on it
         * (other queues' included: ordered above). */
        if (b->clean) {
            sw__evict_clean_locked(dev, b);
            *spilled += b->alloc_size;
            total += b->alloc_size;
            continue;
        }
        /* A victim behind a wait ends the batch: the batch's readers
         * wait for its one event, which would then come after the wait
         * (a spilled array idle for steps waited for the step before's
         * kernels). */
        if (victims != NULL && !cq_covers_locked(dev, b->last_use)) {
            b->tmp_next = skipped;
            skipped = b;
            *more = true;
            break;
        }
        /* The default queue's work on it, and nothing later (the
         * timeline above).  A copy queue wait made at an earlier victim
         * may not cover this one: a copy or kernel on a queue, then a
         * budget spilling its output after another victim, and the host
         * copy missed the result (found by the soak, test
         * queue_spill_later_victim_waits_for_queue). */
        if ((rc = cq_after_locked(dev, b->last_use)) != SW_OK) {
            b->tmp_next = skipped;
            skipped = b;
            break;
        }
        /* A restore's host block still in flight is reused in place: the
         * copy queue is in order, so the copy out follows the copy in. */
        void *host = b->host;
        size_t hsize = b->host_size;
        bool pinned = b->host_pinned;
        bool fresh = host == NULL;
        if (fresh)
            host = sw__host_get_locked(dev, b->size, &hsize, &pinned);
        /* Short of host memory: the clean copies are the first to go --
         * into the pool, where a block of the size is taken again with no
         * allocation; failing that, the pool to the system and a fresh
         * one. */
        if (host == NULL && dev->host_copies > 0 &&
            sw__clean_drop_locked(dev, b->alloc_size, false, false) > 0) {
            host = sw__host_get_locked(dev, b->size, &hsize, &pinned);
            if (host == NULL) {
                sw__host_pool_drain_locked(dev);
                host = sw__host_get_locked(dev, b->size, &hsize, &pinned);
            }
        }
        if (host == NULL) {
            b->tmp_next = skipped;
            skipped = b;
            rc = sw__errorf(SW_ERR_HOST_OOM, "%s: no host memory to spill "
                            "%zu bytes", dev->name, b->size);
            break;
        }
        if (victims == NULL && start == NULL)
            start = sw__b_timing_start(dev, cq);
        rc = b->size ? sw__b_read_q(dev, cq, host, b->mem, 0, b->size)
                     : SW_OK;
        if (rc != SW_OK) {
            /* Refused at once: it stays resident, intact. */
            if (fresh)
                sw__host_put_locked(dev, host, hsize, pinned);
            b->tmp_next = skipped;
            skipped = b;
            break;
        }
        b->host = host;
        b->host_size = hsize;
        b->host_pinned = pinned;
        /* Its restore's copy in is before this copy out on the copy
         * queue: its end is this spill's concern from now on, and the
         * host block stays (it is the copy out's target).  Taken off now,
         * before xfer_record_locked may let the lock go: a poll finding
         * the restore done meanwhile gave the block back to the pool
         * under the copy out, and the buffer ended spilled without a host
         * copy (test thread_spill_of_restoring_buffer). */
        if (b->xfer != NULL)
            xfer_supersede_locked(dev, b);
        /* Moving until its batch ends: xfer_record_locked may wait for
         * the copies without the lock, and meanwhile another thread must
         * not write it (into device memory about to be given up), free it
         * or move it (sw__wait_stable_locked; a free is deferred). */
        b->moving = true;
        b->tmp_next = victims;
        victims = b;
        total += b->alloc_size;
    }
    while ((b = skipped) != NULL) {
        skipped = b->tmp_next;
        sw__lru_insert_locked(dev, b);
    }
    if (victims == NULL) {
        if (start != NULL)
            sw__b_event_release(dev->ops, start);
        return *spilled > 0 ? SW_OK : rc;
    }

    /* A mark for later spills' victims, used by then (best effort). */
    if (dev->copyq != NULL)
        (void)tl_mark_locked(dev);

    /* One event for the batch; the default queue waits for it, so the
     * memory can go to the cache now. */
    int wrc = SW_OK;
    sw__xfer *x = xfer_record_locked(dev, SW__XFER_SPILL, t0, start, false,
                                     &wrc);
    sw__buf *done = NULL;
    while ((b = victims) != NULL) {
        victims = b->tmp_next;
        b->moving = false;
        b->tmp_next = done;
        done = b;
        if (x == NULL && wrc != SW_OK) {
            /* The copies were waited for and one failed: the buffers stay
             * resident and intact (their memory was never given up). */
            sw__host_put_locked(dev, b->host, b->host_size, b->host_pinned);
            b->host = NULL;
            sw__lru_insert_locked(dev, b);
            continue;
        }
        /* The buffer leaves in_use before its block enters the cache:
         * max_reserved (the highest in_use + cached) must never count the
         * block twice.  The trace follows the same order. */
        uintptr_t mem = b->mem;
        b->mem = 0;
        b->state = SW_SPILLED;
        dev->in_use -= b->alloc_size;
        dev->spilled += b->alloc_size;
        dev->spills++;
        dev->spilled_bytes_total += b->size;
        *spilled += b->alloc_size;
        SW__TRACE(dev, SW_TRACE_SPILL_BEGIN, b, b->alloc_size, 0, 0);
        sw__cache_put_locked(dev, mem, b->alloc_size);
        if (x != NULL)
            xfer_attach_locked(dev, b, x);
        else
            SW__TRACE(dev, SW_TRACE_SPILL_END, b, b->alloc_size, 0, 0);
    }
    /* Waiters for the moves, and frees deferred by them. */
    pthread_cond_broadcast(&dev->moved);
    while ((b = done) != NULL) {
        done = b->tmp_next;
        sw__maybe_release_locked(dev, b);
    }
    if (x == NULL && wrc != SW_OK)
        return wrc;
    return rc == SW_OK || *spilled > 0 ? SW_OK : rc;
}

int sw__spill_locked(sw_device *dev, uint64_t need, uint64_t *spilled)
{
    uint64_t total = 0;
    int rc;
    bool more;
    /* Under a host budget, room for the copies first (disk.c): a write to
     * disk that fails fails the spill, its buffers resident and intact. */
    if (dev->host_budget != 0 &&
        (rc = sw__host_room_locked(dev, need, true)) != SW_OK) {
        *spilled = 0;
        return rc;
    }
    do {
        uint64_t got = 0;
        more = false;
        rc = spill_batch_locked(dev, need - total, &got, &more);
        total += got;
    } while (rc == SW_OK && more && total < need);
    /* What landed already goes to disk now if the budget is passed; what
     * is still in flight, at the next spill. */
    if (dev->host_budget != 0 && total > 0)
        (void)sw__host_room_locked(dev, 0, false);
    *spilled = total;
    return rc == SW_OK || total > 0 ? SW_OK : rc;
}

/* ------------------------------------------------------------------------
 * Restoring
 * ---------------------------------------------------------------------- */

/* Device memory taken for a restore that did not happen (or was undone)
 * goes back where it came from: to the cache, or to the backend (in stream
 * order, as the cache's blocks are handed out), so that a failed call keeps
 * neither more cached memory nor more device memory than before.  Only if
 * the backend cannot take it now does it stay cached. */
static void give_back_locked(sw_device *dev, uintptr_t mem, size_t size,
                             bool from_cache)
{
    if (from_cache || sw__b_free(dev, mem, size) != SW_OK)
        sw__cache_put_locked(dev, mem, size);
}

int sw__restore_locked(sw_device *dev, sw__buf *base, sw__queue *q,
                       bool prefetch, uint32_t hold)
{
    sw__assert_locked(dev);
    sw__wait_stable_locked(dev, base);
    if (base->state == SW_RESIDENT)
        return SW_OK;
    if (base->lost)
        return sw__xfer_wait_locked(dev, base);
    base->moving = true;
    base->pins++; /* alive, and never a victim of its own allocation */
    if (base->on_disk) {
        /* From the spill file into a host block first (disk.c); on failure
         * it stays on disk, intact. */
        int rc = sw__disk_read_locked(dev, base);
        if (rc != SW_OK) {
            base->moving = false;
            pthread_cond_broadcast(&dev->moved);
            sw__unpin_locked(dev, base);
            return rc;
        }
    }
    if (prefetch)
        SW__TRACE(dev, SW_TRACE_PREFETCH, base, base->alloc_size,
                  q ? (uint32_t)q->id : 0, 0);
    uintptr_t mem = 0;
    bool from_cache = false;
    int rc = sw__obtain_locked(dev, base->size, base->alloc_size, base->tag,
                               &mem, &from_cache);
    if (rc != SW_OK && !sw__tl_background) {
        /* A request for device memory that failed for good, as an
         * allocation's does. */
        dev->ooms++;
        if (rc == SW_ERR_OOM && dev->tracing)
            sw__trace_oom(dev, base->size, base->tag, sw_last_error());
    }
    double t0 = now_seconds();
    sw__bqueue *cq = copy_queue(dev);
    if (dev->tracing)
        sw__trace_anchor_locked(dev, cq);
    /* The new memory's earlier users are ordered on the default queue (the
     * cache's rule): the copy in waits for them there. */
    if (rc == SW_OK && dev->copyq != NULL &&
        (rc = sw__b_queue_wait(dev, cq, dev->q)) == SW_OK)
        dev->cq_after = dev->clock;
    sw__bevent *start = NULL;
    bool defer = false;
    if (rc == SW_OK && base->size > 0) {
        start = sw__b_timing_start(dev, cq);
        rc = sw__b_write_q(dev, cq, mem, 0, base->host, base->size);
    }
    sw__xfer *x = NULL;
    if (rc != SW_OK && start != NULL) {
        sw__b_event_release(dev->ops, start);
        start = NULL;
    }
    if (rc == SW_OK) {
        /* A prefetch's copy overlaps the work queued before its buffer's
         * next use: the default queue waits for it at that use
         * (SW__QMASK_RESTORE), not now (the demo's backward pass had each
         * step's kernels wait for the next step's array).  With a queue
         * given, that queue waits for it now, and the default queue too,
         * so that a failure below can give the memory back. */
        defer = prefetch && q == NULL && dev->copyq != NULL;
        x = xfer_record_locked(dev, SW__XFER_RESTORE, t0, start, defer, &rc);
        /* A queue other than the default waits for the copy itself. */
        if (x != NULL && q != NULL && rc == SW_OK)
            rc = sw__b_wait_event(dev, q->bq, x->ev);
    }
    if (rc != SW_OK) {
        /* The host copy is kept: nothing is lost.  A copy in already
         * queued (only q's wait for it failed) still reads it: it must end
         * before the buffer's record of it goes, or a free of the buffer
         * could give the host block back under the copy.  Waited for
         * without the lock (which takes the event), the buffer moving
         * meanwhile; its memory was never the buffer's, and the default
         * queue waits for the copy before the cache hands it out again
         * (test inflight_prefetch_queue_wait_fails). */
        if (x != NULL) {
            sw__bevent *ev = x->ev;
            x->ev = NULL;
            (void)sw__wait_event_locked(dev, ev);
            x->refs = 1;
            xfer_unref_locked(dev, x);
        }
        if (mem != 0)
            give_back_locked(dev, mem, base->alloc_size, from_cache);
    } else {
        /* A spill still in flight is before this copy on the copy queue:
         * its end is this xfer's concern now. */
        if (base->xfer != NULL)
            xfer_supersede_locked(dev, base);
        base->mem = mem;
        base->state = SW_RESIDENT;
        dev->spilled -= base->alloc_size;
        sw__note_in_use_locked(dev, base->alloc_size);
        dev->restores++;
        dev->restored_bytes_total += base->size;
        base->last_use = ++dev->clock;
        /* Clean (below), before its key is taken. */
        base->clean = true;
        base->clean_uses = 0;
        base->nrestores += base->nrestores != 255;
        if (base->exposed == 0)
            sw__lru_insert_locked(dev, base);
        /* Clean: the host copy it came from stays, the same bytes, until
         * something writes the buffer (sw__dirty_locked), and evicting it
         * meanwhile copies nothing.  Held as well: the call that restored
         * it may undo the restore, whatever it wrote. */
        dev->host_copies += base->alloc_size;
        SW__TRACE(dev, SW_TRACE_RESTORE_BEGIN, base, base->alloc_size,
                  q ? (uint32_t)q->id : 0, prefetch);
        base->hold_host = hold != 0;
        base->hold_token = hold;
        base->mem_from_cache = from_cache;
        if (x != NULL) {
            xfer_attach_locked(dev, base, x);
            if (defer)
                base->qmask |= SW__QMASK_RESTORE;
        } else {
            SW__TRACE(dev, SW_TRACE_RESTORE_END, base, base->alloc_size, 0,
                      0);
        }
    }
    base->moving = false;
    pthread_cond_broadcast(&dev->moved);
    sw__unpin_locked(dev, base);
    return rc;
}

void sw__unrestore_locked(sw_device *dev, sw__buf *base)
{
    sw__assert_locked(dev);
    assert(base->hold_host && base->pins > 0);
    /* Its copy in ends first: the host block it reads is the buffer's
     * copy again, which a free could give back under it. */
    (void)sw__xfer_wait_locked(dev, base);
    /* Used by another call meanwhile (the wait let the lock go): what it
     * wrote stays, and so does the restore. */
    if (!base->hold_host)
        return;
    assert(base->state == SW_RESIDENT && base->host != NULL);
    base->hold_host = false;
    if (base->clean) {
        base->clean = false;
        dev->host_copies -= base->alloc_size;
    }
    sw__lru_remove_locked(dev, base);
    uintptr_t mem = base->mem;
    base->mem = 0;
    base->state = SW_SPILLED;
    base->qmask &= ~SW__QMASK_RESTORE;
    dev->in_use -= base->alloc_size;
    dev->spilled += base->alloc_size;
    /* In the history as a spill that copied nothing (aux 2). */
    SW__TRACE(dev, SW_TRACE_SPILL_BEGIN, base, base->alloc_size, 0, 2);
    SW__TRACE(dev, SW_TRACE_SPILL_END, base, base->alloc_size, 0, 2);
    give_back_locked(dev, mem, base->alloc_size, base->mem_from_cache);
}

void sw__hold_end_locked(sw_device *dev, sw__buf *base)
{
    sw__assert_locked(dev);
    if (!base->hold_host)
        return;
    base->hold_host = false;
    /* A clean copy keeps its block; with its copy in still in flight, its
     * end gives the block back. */
    if (!base->clean && base->xfer == NULL && base->state == SW_RESIDENT &&
        base->host != NULL) {
        sw__host_put_locked(dev, base->host, base->host_size,
                            base->host_pinned);
        base->host = NULL;
    }
}

int sw__make_resident_locked(sw_device *dev, sw__buf *base)
{
    return sw__restore_locked(dev, base, NULL, false, 0);
}
