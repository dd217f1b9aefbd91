/*
 * queue.c -- queues, events, host tasks, order records, and the ordering
 * that keeps memory safe across queues.
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

static sw__event *event_new(const sw__backend_ops *ops, sw__bevent *bev)
{
    sw__event *e = sw__pool_get(&sw__event_pool);
    if (e == NULL)
        return NULL;
    e->ops = ops;
    e->bev = bev;
    e->done = false;
    e->rc = SW_OK;
    atomic_store_explicit(&e->refs, 1, memory_order_release);
    return e;
}

static sw_event *event_handle(const sw__event *e)
{
    return (sw_event *)sw__handle_of(&sw__event_pool, e);
}

static void event_unref(sw__event *e)
{
    if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1)
        return;
    sw__handle_kill(e);
    if (e->bev != NULL)
        sw__b_event_release(e->ops, e->bev);
    e->bev = NULL;
    sw__pool_put(&sw__event_pool, e);
}

/* The event a handle names.  References are atomic, so a release on
 * another thread can race with this: as with any handle, using one while
 * another thread releases it is the caller's error; the generation check
 * still catches every release that happened before. */
static int event_check(const sw_event *h, sw__event **out)
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

static void event_complete(sw__event *e, int rc)
{
    pthread_mutex_lock(&e->mu);
    e->done = true;
    e->rc = rc;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static int event_query(sw__event *ev, int *done)
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

static int event_wait(sw__event *ev)
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
    int rc = event_check(h, &ev);
    return rc != SW_OK ? rc : event_query(ev, done);
}

SW_API int sw_event_wait(sw_event *h)
{
    sw__event *ev;
    int rc = event_check(h, &ev);
    return rc != SW_OK ? rc : event_wait(ev);
}

SW_API int sw_event_retain(sw_event *h)
{
    sw__event *ev;
    int rc = event_check(h, &ev);
    if (rc == SW_OK)
        atomic_fetch_add_explicit(&ev->refs, 1, memory_order_relaxed);
    return rc;
}

SW_API int sw_event_release(sw_event *h)
{
    if (h == NULL)
        return SW_OK;
    sw__event *ev;
    int rc = event_check(h, &ev);
    if (rc == SW_OK)
        event_unref(ev);
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
     * only those with work still running. */
    sw__reap_queues_locked(dev, false);
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
    if (rc != SW_OK) {
        sw__unlock(dev);
        sw__pool_put(&sw__queue_pool, q);
        return rc;
    }
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
    *out = (sw_queue *)sw__handle_of(&sw__queue_pool, q);
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
    *out = event_new(dev->ops, bev);
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
        *out = event_handle(ev);
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
    rc = event_wait(ev);
    event_unref(ev);
    return rc;
}

/* ------------------------------------------------------------------------
 * Host tasks
 * ---------------------------------------------------------------------- */

static void *runner_main(void *arg)
{
    sw__queue *q = arg;
    const sw__backend_ops *ops = q->dev->ops;
    pthread_mutex_lock(&q->tlock);
    for (;;) {
        while (q->thead == NULL && !q->stop)
            pthread_cond_wait(&q->tcv, &q->tlock);
        sw__task *t = q->thead;
        if (t == NULL)
            break; /* stopping, nothing left */
        q->thead = t->next;
        if (q->thead == NULL)
            q->ttail = NULL;
        pthread_mutex_unlock(&q->tlock);

        /* No lock is held while waiting or running the task: fn may call
         * anything, including releasing this queue. */
        int rc = sw__b_event_wait(ops, t->after);
        sw__b_event_release(ops, t->after);
        t->fn(t->arg);
        event_complete(t->done, rc);
        event_unref(t->done);
        sw__free(t);

        pthread_mutex_lock(&q->tlock);
        q->tpending--;
        pthread_cond_broadcast(&q->tcv);
    }
    pthread_mutex_unlock(&q->tlock);
    return NULL;
}

SW_API int sw_queue_host_task(sw_queue *h, void (*fn)(void *arg), void *arg,
                              sw_event **out)
{
    if (out != NULL)
        *out = NULL;
    if (fn == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "fn is NULL");
    sw__queue *q;
    int rc = sw__queue_enter(h, &q);
    if (rc != SW_OK)
        return rc;
    sw_device *dev = q->dev;
    sw__task *t = sw__calloc(1, sizeof *t);
    if (t == NULL) {
        sw__unlock(dev);
        return sw__errorf(SW_ERR_HOST_OOM, "no host memory for a task");
    }
    t->fn = fn;
    t->arg = arg;
    t->done = event_new(dev->ops, NULL);
    if (t->done == NULL) {
        rc = sw__errorf(SW_ERR_HOST_OOM, "no host memory for an event");
        goto fail;
    }
    if (out != NULL)
        atomic_fetch_add_explicit(&t->done->refs, 1, memory_order_relaxed);
    rc = sw__b_event_record_q(dev, q->bq, &t->after);
    if (rc != SW_OK)
        goto fail;
    sw__event *done = t->done; /* t is the runner's once queued */
    pthread_mutex_lock(&q->tlock);
    if (!q->runner_started) {
        if (sw__thread_create(&q->runner, runner_main, q) != 0) {
            pthread_mutex_unlock(&q->tlock);
            sw__b_event_release(dev->ops, t->after);
            rc = sw__errorf(SW_ERR_HOST_OOM, "cannot start a host-task "
                            "thread");
            goto fail;
        }
        q->runner_started = true;
    }
    if (q->ttail)
        q->ttail->next = t;
    else
        q->thead = t;
    q->ttail = t;
    q->tpending++;
    pthread_cond_signal(&q->tcv);
    pthread_mutex_unlock(&q->tlock);
    if (out != NULL)
        *out = event_handle(done);
    sw__unlock(dev);
    return SW_OK;
fail:
    if (t->done != NULL) {
        if (out != NULL)
            event_unref(t->done);
        event_unref(t->done);
    }
    sw__unlock(dev);
    sw__free(t);
    return rc;
}

/* ------------------------------------------------------------------------
 * Destroying dead queues
 * ---------------------------------------------------------------------- */

static bool queue_idle(sw__queue *q)
{
    pthread_mutex_lock(&q->tlock);
    bool idle = q->tpending == 0;
    bool self = q->runner_started && pthread_equal(q->runner, pthread_self());
    pthread_mutex_unlock(&q->tlock);
    if (!idle || self)
        return false;
    sw__bevent *ev = NULL;
    int done = 0;
    if (sw__b_event_record_q(q->dev, q->bq, &ev) != SW_OK)
        return false;
    (void)sw__b_event_query(q->dev->ops, ev, &done);
    sw__b_event_release(q->dev->ops, ev);
    return done != 0;
}

/* Clears a dead queue's bit from every buffer, so that a new queue given
 * the same id is not taken for one that already waited. */
static void forget_qid_locked(sw_device *dev, int id)
{
    if (id == SW__QID_SHARED) {
        for (sw__queue *q = dev->queues; q; q = q->next)
            if (q->id == SW__QID_SHARED)
                return; /* still stands for a live queue */
    }
    uint64_t bit = UINT64_C(1) << id;
    for (sw__buf *b = dev->live; b; b = b->live_next)
        b->qmask &= ~bit;
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
        pthread_mutex_lock(&q->tlock);
        bool self = q->runner_started &&
                    pthread_equal(q->runner, pthread_self());
        pthread_mutex_unlock(&q->tlock);
        if (wait && !self && !queue_idle(q)) {
            /* Only for close: no one else can use the device now.  (Not
             * from the queue's own host task: it would wait for itself.) */
            dev->waiting++;
            sw__unlock(dev);
            (void)sw__b_synchronize(dev->ops, q->bq);
            pthread_mutex_lock(&q->tlock);
            while (q->tpending > 0)
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
    }
    for (sw__queue *q = dead; q; q = q->next)
        forget_qid_locked(dev, q->id);
    if (dead == NULL)
        return;
    /* Joining the runners can wait (a host task may still be returning):
     * not under the lock.  Their backend queues are idle (queue_idle), and
     * are destroyed under it afterwards, since destroying one changes the
     * backend's device state that other threads read under the lock. */
    dev->waiting++;
    sw__unlock(dev);
    for (sw__queue *q = dead; q; q = q->next) {
        pthread_mutex_lock(&q->tlock);
        q->stop = true;
        pthread_cond_broadcast(&q->tcv);
        pthread_mutex_unlock(&q->tlock);
        if (q->runner_started)
            pthread_join(q->runner, NULL);
    }
    sw__lock(dev);
    dev->waiting--;
    for (sw__queue *q = dead, *next; q; q = next) {
        next = q->next;
        SW__TRACE(dev, SW_TRACE_QUEUE_DESTROY, NULL, 0, (uint32_t)q->id, 0);
        sw__b_queue_destroy(dev, q->bq);
        pthread_mutex_destroy(&q->tlock);
        pthread_cond_destroy(&q->tcv);
        sw__pool_put(&sw__queue_pool, q);
    }
}

/* ------------------------------------------------------------------------
 * Ordering across queues
 * ---------------------------------------------------------------------- */

int sw__order_use_locked(sw_device *dev, sw__buf *base, sw__queue *q)
{
    sw__assert_locked(dev);
    if (q == NULL) {
        if (base->qmask == 0)
            return SW_OK;
        for (sw__queue *o = dev->queues; o; o = o->next) {
            if (!(base->qmask & (UINT64_C(1) << o->id)))
                continue;
            int rc = sw__b_queue_wait(dev, dev->q, o->bq);
            if (rc != SW_OK)
                return rc;
        }
        base->qmask = 0;
        return SW_OK;
    }
    uint64_t bit = UINT64_C(1) << q->id;
    if (base->qmask & bit)
        return SW_OK;
    int rc = sw__b_queue_wait(dev, q->bq, dev->q);
    if (rc == SW_OK)
        base->qmask |= bit;
    return rc;
}

/* ------------------------------------------------------------------------
 * Order records
 * ---------------------------------------------------------------------- */

struct sw_order {
    sw__event **ev[2]; /* submitted, host tasks */
    size_t n[2], cap[2];
};

SW_API int sw_order_create(sw_order **out)
{
    if (out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL");
    *out = sw__calloc(1, sizeof **out);
    return *out ? SW_OK
                : sw__errorf(SW_ERR_HOST_OOM, "no host memory for an order "
                             "record");
}

SW_API void sw_order_destroy(sw_order *o)
{
    if (o == NULL)
        return;
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < o->n[k]; i++)
            event_unref(o->ev[k][i]);
        sw__free(o->ev[k]);
    }
    sw__free(o);
}

/* Drops completed events (a query never blocks). */
static void prune(sw_order *o)
{
    for (int k = 0; k < 2; k++) {
        size_t w = 0;
        for (size_t i = 0; i < o->n[k]; i++) {
            int done = 0;
            (void)event_query(o->ev[k][i], &done);
            if (done)
                event_unref(o->ev[k][i]);
            else
                o->ev[k][w++] = o->ev[k][i];
        }
        o->n[k] = w;
    }
}

SW_API int sw_order_add(sw_order *o, sw_event *h, int host_task)
{
    if (o == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "order record is NULL");
    sw__event *ev;
    int rc = event_check(h, &ev);
    if (rc != SW_OK)
        return rc;
    int k = host_task ? 1 : 0;
    prune(o);
    if (o->n[k] == o->cap[k]) {
        size_t cap = o->cap[k] ? 2 * o->cap[k] : 8;
        sw__event **v = sw__realloc(o->ev[k], cap * sizeof *v);
        if (v == NULL)
            return sw__errorf(SW_ERR_HOST_OOM, "no host memory for an "
                              "order record");
        o->ev[k] = v;
        o->cap[k] = cap;
    }
    atomic_fetch_add_explicit(&ev->refs, 1, memory_order_relaxed);
    o->ev[k][o->n[k]++] = ev;
    return SW_OK;
}

SW_API int sw_order_counts(sw_order *o, size_t *submitted, size_t *host_tasks)
{
    if (o == NULL || submitted == NULL || host_tasks == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "NULL argument");
    prune(o);
    *submitted = o->n[0];
    *host_tasks = o->n[1];
    return SW_OK;
}

SW_API sw_event *sw_order_event(sw_order *o, int host_task, size_t i)
{
    int k = host_task ? 1 : 0;
    return o != NULL && i < o->n[k] ? event_handle(o->ev[k][i]) : NULL;
}

SW_API int sw_order_idle(sw_order *o, int *idle)
{
    if (o == NULL || idle == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "NULL argument");
    prune(o);
    *idle = o->n[0] == 0 && o->n[1] == 0;
    return SW_OK;
}

SW_API int sw_order_wait(sw_order *o)
{
    if (o == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "order record is NULL");
    int first = SW_OK;
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < o->n[k]; i++) {
            int rc = event_wait(o->ev[k][i]);
            if (first == SW_OK)
                first = rc;
            event_unref(o->ev[k][i]);
        }
        o->n[k] = 0;
    }
    return first;
}
