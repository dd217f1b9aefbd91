/*
 * queue.c -- queues, events, and the ordering that keeps memory safe
 * across queues (host tasks: hosttask.c; order records: order.c).
 *
 * Memory safety across queues.  Work on one queue is ordered; work on two
 * queues is not, yet both may touch one buffer, and freed memory is reused.
 * Each base buffer keeps `qmask`, the queues other than the default that
 * used it since the default queue last waited for them:
 *  - the first use of a buffer on queue q (bit clear) makes q wait, on the
 *    device, for the default queue's work so far (which covers writes,
 *    fills, restores and earlier users of the memory), and sets the bit;
 *  - anything the default queue does to a buffer with bits set (a host
 *    transfer, a spill, the free that hands its memory to the cache) first
 *    makes the default queue wait for those queues, and clears the bits.
 * Neither blocks the caller: they are device-side waits.
 */
#include "core/internal.h"
#include "core/trypin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------
 * Events
 *
 * Event structs come from the handle pool (handle.c): a released event's
 * handle is detected, never read after free or taken for another.  The
 * mutex and condition of a host task's completion are set up once per
 * slot and kept across reuse.
 * ---------------------------------------------------------------------- */

static void event_slot_init(void *obj)
{
    sw__event *e = obj;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
}

sw__pool sw__event_pool =
    SW__POOL_INIT(SW__H_EVENT, sw__event, offsetof(sw__event, refs),
                  event_slot_init);

sw__event *sw__event_new(const sw__backend_ops *ops, sw__bevent *bev)
{
    sw__event *e = sw__pool_get(&sw__event_pool);
    if (e == NULL)
        return NULL;
    e->ops = ops;
    e->bev = bev;
    e->done = false;
    e->rc = SW_OK;
    atomic_store_explicit(&e->handles, 1, memory_order_relaxed);
    atomic_store_explicit(&e->refs, 1, memory_order_release);
    return e;
}

sw_event *sw__event_handle(const sw__event *e)
{
    return (sw_event *)sw__handle_of(&sw__event_pool, e);
}

void sw__event_unref(sw__event *e)
{
    if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1)
        return;
    sw__handle_kill(e);
    if (e->bev != NULL)
        sw__b_event_release(e->ops, e->bev);
    e->bev = NULL;
    sw__pool_put(&sw__event_pool, e);
}

void sw__event_hold_handle(sw__event *e)
{
    atomic_fetch_add_explicit(&e->handles, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
}

void sw__event_drop_handle(sw__event *e)
{
    if (atomic_fetch_sub_explicit(&e->handles, 1, memory_order_acq_rel) == 1)
        sw__handle_kill(e);
    sw__event_unref(e);
}

/* The event a handle names.  References are atomic, so a release on
 * another thread can race with this: as with any handle, using one while
 * another thread releases it is the caller's error; the generation check
 * still catches every release that happened before. */
int sw__event_check(const sw_event *h, sw__event **out)
{
    *out = NULL;
    if (h == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "event is NULL");
    sw__event *e = sw__handle_lookup(&sw__event_pool, h);
    if (e == NULL)
        return sw__errorf(SW_ERR_INVALID_HANDLE, "event %p was released or "
                          "is not a spillway event", (const void *)h);
    *out = e;
    return SW_OK;
}

void sw__event_complete(sw__event *e, int rc)
{
    pthread_mutex_lock(&e->mu);
    e->done = true;
    e->rc = rc;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

int sw__event_query(sw__event *ev, int *done)
{
    if (ev->bev != NULL) {
        int rc = sw__b_event_query(ev->ops, ev->bev, done);
        if (rc != SW_OK)
            *done = 1;
        return rc;
    }
    pthread_mutex_lock(&ev->mu);
    *done = ev->done;
    int rc = ev->done ? ev->rc : SW_OK;
    pthread_mutex_unlock(&ev->mu);
    return rc;
}

int sw__event_wait(sw__event *ev)
{
    if (ev->bev != NULL)
        return sw__b_event_wait(ev->ops, ev->bev);
    pthread_mutex_lock(&ev->mu);
    while (!ev->done)
        pthread_cond_wait(&ev->cv, &ev->mu);
    int rc = ev->rc;
    pthread_mutex_unlock(&ev->mu);
    return rc;
}

SW_API int sw_event_query(sw_event *h, int *done)
{
    if (done == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "done is NULL");
    *done = 0;
    sw__event *ev;
    int rc = sw__event_check(h, &ev);
    return rc != SW_OK ? rc : sw__event_query(ev, done);
}

SW_API int sw_event_wait(sw_event *h)
{
    sw__event *ev;
    int rc = sw__event_check(h, &ev);
    return rc != SW_OK ? rc : sw__event_wait(ev);
}

SW_API int sw_event_retain(sw_event *h)
{
    sw__event *ev;
    int rc = sw__event_check(h, &ev);
    if (rc == SW_OK)
        sw__event_hold_handle(ev);
    return rc;
}

SW_API int sw_event_release(sw_event *h)
{
    if (h == NULL)
        return SW_OK;
    sw__event *ev;
    int rc = sw__event_check(h, &ev);
    if (rc == SW_OK)
        sw__event_drop_handle(ev);
    return rc;
}

/* ------------------------------------------------------------------------
 * Queue handles
 *
 * Queue structs come from the handle pool too.  A queue's handle dies
 * when its last reference is released (it is then `dying`: destroyed once
 * idle), so a released queue is reported at once.
 * ---------------------------------------------------------------------- */

sw__pool sw__queue_pool =
    SW__POOL_INIT(SW__H_QUEUE, sw__queue, sizeof(sw__slot), NULL);

static int dead_queue(const sw_queue *h)
{
    return sw__errorf(SW_ERR_INVALID_HANDLE, "queue %p was released or is "
                      "not a spillway queue", (const void *)h);
}

int sw__queue_enter(const sw_queue *h, sw__queue **out)
{
    *out = NULL;
    if (h == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "queue is NULL");
    for (;;) {
        sw__queue *q = sw__handle_lookup(&sw__queue_pool, h);
        sw_device *dev = q ? atomic_load_explicit(&q->h.dev,
                                                  memory_order_acquire)
                           : NULL;
        if (!sw__device_valid(dev))
            return dead_queue(h);
        int rc = sw__device_enter(dev);
        if (rc != SW_OK)
            return rc;
        if (sw__handle_matches(&q->h, h) &&
            atomic_load_explicit(&q->h.dev, memory_order_relaxed) == dev) {
            *out = q;
            return SW_OK;
        }
        sw__unlock(dev); /* released meanwhile: the lookup says so */
    }
}

int sw__queue_try_enter(const sw_queue *h, sw__queue **out)
{
    *out = NULL;
    sw__queue *q = h != NULL ? sw__handle_lookup(&sw__queue_pool, h) : NULL;
    sw_device *dev = q ? atomic_load_explicit(&q->h.dev, memory_order_acquire)
                       : NULL;
    if (!sw__device_valid(dev) || !sw__trylock(dev))
        return SW__AGAIN;
    if (dev->b == NULL || !sw__handle_matches(&q->h, h) ||
        atomic_load_explicit(&q->h.dev, memory_order_relaxed) != dev) {
        sw__unlock(dev);
        return SW__AGAIN;
    }
    *out = q;
    return SW_OK;
}

int sw__queue_check_locked(sw_device *dev, const sw_queue *h,
                           sw__queue **out)
{
    sw__assert_locked(dev);
    *out = NULL;
    if (h == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "queue is NULL");
    sw__queue *q = sw__handle_lookup(&sw__queue_pool, h);
    if (q == NULL)
        return dead_queue(h);
    sw_device *other = atomic_load_explicit(&q->h.dev, memory_order_relaxed);
    if (other != dev) {
        if (!sw__device_valid(other))
            return dead_queue(h);
        return sw__errorf(SW_ERR_INVALID_ARG, "the queue is on %s, the "
                          "buffers on %s", sw_device_name(other), dev->name);
    }
    if (!sw__handle_matches(&q->h, h))
        return dead_queue(h);
    *out = q;
    return SW_OK;
}

static int take_qid_locked(sw_device *dev)
{
    for (int k = 1; k < SW__QID_SHARED; k++) {
        if (!(dev->qids & (UINT64_C(1) << k))) {
            dev->qids |= UINT64_C(1) << k;
            return k;
        }
    }
    return SW__QID_SHARED;
}

/* A loop that creates queues faster than their work runs would keep every
 * dead one alive, with its driver resources (about half a MiB each on PoCL:
 * a loaded machine grew by 130 MiB over 10,000 queues).  Past
 * SW__DYING_MAX dead queues the creator waits for some to finish, as a
 * producer waits on a full queue.  The wait polls and is bounded (a second
 * in all), never a blocking wait on one queue: a dead queue's host task
 * may be waiting for something the creating thread holds. */
#define SW__DYING_MAX 32

static void wait_for_dying_locked(sw_device *dev)
{
    long ns = 20 * 1000;
    for (long waited = 0; dev->dying_queues > SW__DYING_MAX &&
                          waited < 1000L * 1000 * 1000;
         waited += ns) {
        dev->waiting++;
        sw__unlock(dev);
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
        sw__lock(dev);
        dev->waiting--;
        sw__reap_queues_locked(dev, false);
        if (ns < 2 * 1000 * 1000)
            ns *= 2;
    }
}

sw_queue *sw__queue_install_locked(sw_device *dev, sw__queue *q)
{
    atomic_store_explicit(&q->h.dev, dev, memory_order_release);
    q->dev = dev;
    q->refs = 1;
    q->id = take_qid_locked(dev);
    pthread_mutex_init(&q->tlock, NULL);
    pthread_cond_init(&q->tcv, NULL);
    q->next = dev->queues;
    if (dev->queues)
        dev->queues->prev = q;
    dev->queues = q;
    dev->live_queues++;
    SW__TRACE(dev, SW_TRACE_QUEUE_CREATE, NULL, 0, (uint32_t)q->id, 0);
    return (sw_queue *)sw__handle_of(&sw__queue_pool, q);
}

/* A queue's own device memory, still short after the cache and the dead
 * queues gave theirs back: made the way an allocation makes room -- the
 * pressure callbacks (a collector frees garbage holding the device), then
 * spills of the least recently used buffers -- in growing steps, since
 * what the backend needs is its own business (the sim reserves 1 MiB; an
 * OpenCL queue, its sum partials).  Each step's spilled memory goes back
 * to the device before the retry (spills land in the cache; frees are
 * stream-ordered).  SW_ERR_OOM when nothing more moves. */
static int make_room_for_queue_locked(sw_device *dev, sw__queue *q)
{
    int rc = SW_ERR_OOM;
    char why[512];
    snprintf(why, sizeof why, "%s", sw_last_error());
    uint64_t need = (uint64_t)1 << 20;
    bool last = false;
    while (rc == SW_ERR_OOM && need <= ((uint64_t)1 << 32)) {
        bool freed = sw__run_callbacks_locked(dev, (size_t)need, last);
        uint64_t got = 0;
        int src = sw__spill_locked(dev, need, &got);
        if (src != SW_OK && got == 0)
            return src; /* a spill failed: its buffers stay, intact */
        if (!freed && got == 0) {
            /* The callbacks once more, told it is the last chance (a
             * collector that backed off then runs its full collection,
             * as sw__obtain_locked's last step does); after that, nothing
             * more can move. */
            if (last)
                break;
            last = true;
            continue;
        }
        sw__cache_drain_locked(dev);
        if ((src = sw__wait_idle_locked(dev)) != SW_OK)
            return src;
        rc = sw__b_queue_create(dev, &q->bq);
        need <<= 1;
    }
    if (rc == SW_ERR_OOM)
        sw__errorf(SW_ERR_OOM, "%s (the pressure callbacks ran and nothing "
                   "more could spill)", why);
    return rc;
}

SW_API int sw_queue_create(sw_device *dev, sw_queue **out)
{
    if (out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    sw__queue *q = sw__pool_get(&sw__queue_pool);
    if (q == NULL) {
        sw__unlock(dev);
        return sw__errorf(SW_ERR_HOST_OOM, "no host memory for a queue");
    }
    /* Dead queues are destroyed here, so a loop that creates queues keeps
     * only those with work still running.  A pass asks each dying queue
     * whether it is idle (two locks each), so it runs once there have
     * been as many creations since the last as that pass left busy (with
     * one or none, at every creation): queues made in a loop, each
     * waiting for the last one's work, keep a chain of busy ones, and a
     * pass per creation made Queue() O(chain).  At most SW__DYING_MAX
     * wait all the same (below). */
    if (dev->dying_queues > 0 &&
        (++dev->reap_since >= dev->reap_busy ||
         dev->dying_queues > SW__DYING_MAX))
        sw__reap_queues_locked(dev, false);
    wait_for_dying_locked(dev);
    rc = sw__b_queue_create(dev, &q->bq);
    if (rc == SW_ERR_OOM) {
        /* A queue's own device memory (the sim's reservation, a driver's
         * command buffers) may be held by our cache, or by dead queues
         * whose host tasks have yet to run (a Python host task waits for
         * the GIL).  Give the cache back, let deferred frees complete,
         * then give dead queues up to a second to finish, retrying. */
        sw__cache_drain_locked(dev);
        rc = sw__wait_idle_locked(dev);
        if (rc == SW_OK)
            rc = sw__b_queue_create(dev, &q->bq);
        for (int i = 0; rc == SW_ERR_OOM && i < 200; i++) {
            bool any = false;
            for (sw__queue *o = dev->queues; o && !any; o = o->next)
                any = o->dying;
            if (!any)
                break;
            dev->waiting++;
            sw__unlock(dev);
            struct timespec ts = {0, 5 * 1000 * 1000};
            nanosleep(&ts, NULL);
            sw__lock(dev);
            dev->waiting--;
            sw__reap_queues_locked(dev, false);
            rc = sw__b_queue_create(dev, &q->bq);
        }
    }
    if (rc == SW_ERR_OOM)
        rc = make_room_for_queue_locked(dev, q);
    if (rc != SW_OK) {
        sw__unlock(dev);
        sw__pool_put(&sw__queue_pool, q);
        return rc;
    }
    *out = sw__queue_install_locked(dev, q);
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_queue_retain(sw_queue *h)
{
    sw__queue *q;
    int rc = sw__queue_enter(h, &q);
    if (rc != SW_OK)
        return rc;
    if (q->refs == UINT32_MAX)
        rc = sw__errorf(SW_ERR_TOO_LARGE, "too many references to one "
                        "queue");
    else
        q->refs++;
    sw__unlock(q->dev);
    return rc;
}

SW_API int sw_queue_release(sw_queue *h)
{
    if (h == NULL)
        return SW_OK;
    sw__queue *q;
    int rc = sw__queue_enter(h, &q);
    if (rc != SW_OK)
        return rc;
    sw_device *dev = q->dev;
    if (--q->refs == 0) {
        /* Never wait here: the last reference is often dropped inside
         * one of the queue's own host tasks.  The handle dies now; the
         * queue is destroyed once idle (sw__reap_queues_locked). */
        sw__handle_kill(q);
        q->dying = true;
        dev->live_queues--;
        dev->dying_queues++;
    }
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_queue_device(sw_queue *h, sw_device **dev)
{
    if (dev == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "dev is NULL");
    *dev = NULL;
    sw__queue *q;
    int rc = sw__queue_enter(h, &q);
    if (rc != SW_OK)
        return rc;
    *dev = q->dev;
    sw__unlock(q->dev);
    return SW_OK;
}

static int record_event_locked(sw__queue *q, sw__event **out)
{
    sw_device *dev = q->dev;
    sw__bevent *bev = NULL;
    int rc = sw__b_event_record_q(dev, q->bq, &bev);
    if (rc != SW_OK)
        return rc;
    *out = sw__event_new(dev->ops, bev);
    if (*out == NULL) {
        sw__b_event_release(dev->ops, bev);
        return sw__errorf(SW_ERR_HOST_OOM, "no host memory for an event");
    }
    return SW_OK;
}

SW_API int sw_queue_record_event(sw_queue *h, sw_event **out)
{
    if (out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    sw__queue *q;
    int rc = sw__queue_enter(h, &q);
    if (rc != SW_OK)
        return rc;
    sw__event *ev = NULL;
    rc = record_event_locked(q, &ev);
    if (rc == SW_OK)
        *out = sw__event_handle(ev);
    sw__unlock(q->dev);
    return rc;
}

SW_API int sw_queue_synchronize(sw_queue *h)
{
    sw__queue *q;
    int rc = sw__queue_enter(h, &q);
    if (rc != SW_OK)
        return rc;
    sw__event *ev = NULL;
    rc = record_event_locked(q, &ev);
    sw__unlock(q->dev);
    if (rc != SW_OK)
        return rc;
    rc = sw__event_wait(ev);
    sw__event_unref(ev);
    return rc;
}

/* ------------------------------------------------------------------------
 * Destroying dead queues
 * ---------------------------------------------------------------------- */

static bool queue_idle(sw__queue *q)
{
    pthread_mutex_lock(&q->tlock);
    bool idle = q->tpending == 0 && !q->scheduled;
    pthread_mutex_unlock(&q->tlock);
    if (!idle || sw__in_own_task(q))
        return false;
    /* Asked of the backend where it can say: recording an event on a busy
     * queue queues a marker there, once per dead queue per reaping pass. */
    int b = sw__b_queue_idle_or(q->dev, q->bq, -1);
    if (b >= 0)
        return b != 0;
    sw__bevent *ev = NULL;
    int done = 0;
    if (sw__b_event_record_q(q->dev, q->bq, &ev) != SW_OK)
        return false;
    (void)sw__b_event_query(q->dev->ops, ev, &done);
    sw__b_event_release(q->dev->ops, ev);
    return done != 0;
}

/* Clears a dead queue's bit from the buffers it used, so that a new queue
 * given the same id is not taken for one that already waited.  The queue
 * kept a list of them (sw__order_use_locked), so this costs what the queue
 * did, not what the device holds: with a million live buffers a queue's
 * death used to walk them all under the lock.  Without that list (no host
 * memory to grow it), or for the id shared by queues past the 62nd, every
 * live buffer is visited, as before. */
static void forget_bit(sw__buf *b, uint64_t bit)
{
    b->qmask &= ~bit;
    b->qsynced &= ~bit;
    b->qpinmask &= ~bit;
    b->qlisted &= ~bit;
}

static void forget_qid_locked(sw_device *dev, sw__queue *dead)
{
    int id = dead->id;
    uint64_t bit = UINT64_C(1) << id;
    if (id == SW__QID_SHARED || dead->used_all) {
        if (id == SW__QID_SHARED)
            for (sw__queue *q = dev->queues; q; q = q->next)
                if (q->id == SW__QID_SHARED)
                    return; /* still stands for a live queue */
        for (sw__buf *b = dev->live; b; b = b->live_next)
            forget_bit(b, bit);
        for (sw__buf *b = dev->parked; b; b = b->live_next)
            forget_bit(b, bit);
    } else {
        for (size_t i = 0; i < dead->nused; i++) {
            sw__buf *b = dead->used[i].b;
            /* Type-stable slots: a freed one is harmless to write, and a
             * reused one has another id. */
            if (b->id == dead->used[i].id)
                forget_bit(b, bit);
        }
    }
    dev->qids &= ~bit;
}

void sw__reap_queues_locked(sw_device *dev, bool wait)
{
    sw__assert_locked(dev);
    sw__queue *dead = NULL;
    for (sw__queue *q = dev->queues, *next; q; q = next) {
        next = q->next;
        if (!q->dying)
            continue;
        if (wait && !sw__in_own_task(q) && !queue_idle(q)) {
            /* Only for close: no one else can use the device now.  (Not
             * from the queue's own host task: it would wait for itself.) */
            dev->waiting++;
            sw__unlock(dev);
            (void)sw__b_synchronize(dev->ops, q->bq);
            pthread_mutex_lock(&q->tlock);
            while (q->tpending > 0 || q->scheduled)
                pthread_cond_wait(&q->tcv, &q->tlock);
            pthread_mutex_unlock(&q->tlock);
            sw__lock(dev);
            dev->waiting--;
        }
        if (!queue_idle(q))
            continue;
        if (q->prev)
            q->prev->next = q->next;
        else
            dev->queues = q->next;
        if (q->next)
            q->next->prev = q->prev;
        q->next = dead;
        dead = q;
        dev->dying_queues--;
    }
    dev->reap_since = 0;
    dev->reap_busy = dev->dying_queues;
    /* Their tasks have run and no runner holds them (queue_idle), and
     * their backend queues are idle: destroyed under the lock, since that
     * changes the backend's device state other threads read under it. */
    for (sw__queue *q = dead, *next; q; q = next) {
        next = q->next;
        forget_qid_locked(dev, q);
        SW__TRACE(dev, SW_TRACE_QUEUE_DESTROY, NULL, 0, (uint32_t)q->id, 0);
        /* Its handle may name another stream soon (native.c). */
        sw__native_forget(&q->native);
        sw__b_queue_destroy(dev, q->bq);
        pthread_mutex_destroy(&q->tlock);
        pthread_cond_destroy(&q->tcv);
        sw__free(q->used);
        sw__pool_put(&sw__queue_pool, q);
    }
}

/* ------------------------------------------------------------------------
 * Ordering across queues
 * ---------------------------------------------------------------------- */

int sw__order_use_locked(sw_device *dev, sw__buf *base, sw__queue *q)
{
    sw__assert_locked(dev);
    if (base->qmask & SW__QMASK_RESTORE) {
        /* A prefetch's copy in (spill.c): the default queue waits for it
         * now, before this use, and any other queue after that. */
        int rc = sw__xfer_order_locked(dev, base);
        if (rc != SW_OK)
            return rc;
    }
    if (q == NULL) {
        if (base->qmask == 0) /* (qsynced is part of it) */
            return SW_OK;
        for (sw__queue *o = dev->queues; o; o = o->next) {
            if (!(base->qmask & (UINT64_C(1) << o->id)))
                continue;
            int rc = sw__b_queue_wait(dev, dev->q, o->bq);
            if (rc != SW_OK)
                return rc;
        }
        /* Every queue must wait for this use before its next; the
         * queues holding pins on it keep their marks (sw_launch_begin_q:
         * more of their work may come before the pins end, which the
         * default queue's later uses must wait for too). */
        base->qmask &= base->qpinmask;
        base->qsynced = 0;
        return SW_OK;
    }
    uint64_t bit = UINT64_C(1) << q->id;
    if (!(base->qsynced & bit)) {
        int rc = sw__b_queue_wait(dev, q->bq, dev->q);
        if (rc != SW_OK)
            return rc;
        /* (The id the queues past the 62nd share says nothing of one.) */
        if (q->id != SW__QID_SHARED)
            base->qsynced |= bit;
    }
    sw__queue_mark_used_locked(q, base);
    return SW_OK;
}

void sw__queue_mark_used_locked(sw__queue *q, sw__buf *base)
{
    uint64_t bit = UINT64_C(1) << q->id;
    base->qmask |= bit;
    if (base->qlisted & bit)
        return;
    base->qlisted |= bit;
    /* Remember it, for forget_qid_locked when q dies: once per buffer
     * (qlisted), however often its marks come and go. */
    if (!q->used_all && q->nused == q->capused) {
        size_t cap = q->capused ? 2 * q->capused : 16;
        sw__quse *v = sw__realloc(q->used, cap * sizeof *v);
        if (v == NULL) {
            q->used_all = true; /* its death visits every buffer instead */
        } else {
            q->used = v;
            q->capused = cap;
        }
    }
    if (!q->used_all)
        q->used[q->nused++] = (sw__quse){base, base->id};
}

