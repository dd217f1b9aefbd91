/*
 * ops_queue.c -- queues (created, retained, released with work on them,
 * released from inside their own host tasks), events, host tasks that
 * drop buffer and queue references on the queue's runner thread ("a free
 * can come from anywhere"), and order records.
 *
 * What a host task drops is still the engine's until the task is known to
 * have run (fz_poll_tasks), so that the model never depends on timing: a
 * buffer handed to a task is retained first, and the engine waits for the
 * task before it frees its own last reference.
 */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void task_fn(void *arg)
{
    fz_task *t = arg;
    /* Any spillway call is allowed here, releasing the queue included.
     * Failures are judged by the engine, which sees the flag. */
    int rc = SW_OK;
    if (t->drop != NULL)
        rc = sw_buffer_free(t->drop);
    if (rc == SW_OK && t->drop_q != NULL)
        rc = sw_queue_release(t->drop_q);
    atomic_store(&t->ran, rc == SW_OK ? 1 : 2);
}

static int free_queue(fz_engine *e, int d)
{
    for (int q = 0; q < FZ_NQUEUE; q++)
        if (!e->queue[d][q].live)
            return q;
    return -1;
}

static int free_event(fz_engine *e)
{
    for (int v = 0; v < FZ_NEVENT; v++)
        if (!e->event[v].live)
            return v;
    return -1;
}

static int live_event(fz_engine *e, fz_src *s)
{
    int start = (int)fz_below(s, FZ_NEVENT);
    for (int k = 0; k < FZ_NEVENT; k++)
        if (e->event[(start + k) % FZ_NEVENT].live)
            return (start + k) % FZ_NEVENT;
    return -1;
}

static int new_event(fz_engine *e, int v, sw_event *ev)
{
    fz_event *f = &e->event[v];
    memset(f, 0, sizeof *f);
    f->live = true;
    f->ev = ev;
    f->refs = 1;
    return v;
}

static bool op_create(fz_engine *e, fz_src *s)
{
    int d = fz_pick_dev(e, s);
    int q = free_queue(e, d);
    if (q < 0)
        return false;
    fz_note(e, "queue_create on %s", e->w->spec[d]);
    sw_queue *h = (sw_queue *)(uintptr_t)0xA5A5;
    int rc = sw_queue_create(e->w->dev[d], &h);
    /* A queue has device memory of its own (the sim reserves some):
     * creating one may run out. */
    if (!fz_result(e, "sw_queue_create", rc, FZ_OK_OR_RES, 0, NULL)) {
        if (h != NULL)
            fz_fail(e->w, e, "a failed sw_queue_create left *out set");
        return true;
    }
    fz_queue *f = &e->queue[d][q];
    memset(f, 0, sizeof *f);
    f->live = true;
    f->q = h;
    f->devi = d;
    f->refs = 1;
    sw_device *dev = NULL;
    rc = sw_queue_device(h, &dev);
    if (rc != SW_OK || dev != e->w->dev[d])
        fz_fail(e->w, e, "sw_queue_device: %s", fz_err(rc));
    return true;
}

static bool pick(fz_engine *e, fz_src *s, int *d, int *q)
{
    *d = fz_pick_dev(e, s);
    *q = fz_pick_queue(e, s, *d);
    return *q >= 0 && e->queue[*d][*q].refs > 0;
}

static bool op_release(fz_engine *e, fz_src *s)
{
    int d, q;
    if (!pick(e, s, &d, &q))
        return false;
    fz_queue *f = &e->queue[d][q];
    fz_note(e, "queue_release (refs %d, tasks %d)", f->refs, f->task_refs);
    fz_order_release(e, d, q);
    int rc = sw_queue_release(f->q);
    fz_result(e, "sw_queue_release", rc, FZ_OK, 0, NULL);
    if (--f->refs == 0 && f->task_refs == 0) {
        f->live = false;
        fz_remember_dead(e, 2, f->q);
    }
    return true;
}

static bool op_retain(fz_engine *e, fz_src *s)
{
    int d, q;
    if (!pick(e, s, &d, &q) || e->queue[d][q].refs >= 3)
        return false;
    fz_note(e, "queue_retain");
    int rc = sw_queue_retain(e->queue[d][q].q);
    fz_result(e, "sw_queue_retain", rc, FZ_OK, 0, NULL);
    e->queue[d][q].refs++;
    return true;
}

static bool op_sync(fz_engine *e, fz_src *s)
{
    int d, q;
    if (!pick(e, s, &d, &q))
        return false;
    fz_note(e, "queue_synchronize");
    int rc = sw_queue_synchronize(e->queue[d][q].q);
    fz_result(e, "sw_queue_synchronize", rc, FZ_OK, 0, NULL);
    return true;
}

static bool op_record(fz_engine *e, fz_src *s)
{
    int d, q, v = free_event(e);
    if (v < 0 || !pick(e, s, &d, &q))
        return false;
    fz_note(e, "queue_record_event");
    sw_event *ev = (sw_event *)(uintptr_t)0xA5A5;
    int rc = sw_queue_record_event(e->queue[d][q].q, &ev);
    if (!fz_result(e, "sw_queue_record_event", rc, FZ_OK, 0, NULL)) {
        if (ev != NULL)
            fz_fail(e->w, e, "a failed record_event left *out set");
        return true;
    }
    new_event(e, v, ev);
    return true;
}

static bool op_host_task(fz_engine *e, fz_src *s)
{
    int d, q, t = -1;
    for (int k = 0; k < FZ_NTASK && t < 0; k++)
        if (e->task[k] == NULL)
            t = k;
    if (t < 0 || !pick(e, s, &d, &q))
        return false;
    fz_queue *fq = &e->queue[d][q];
    uint8_t k = fz_u8(s);
    int v = k & 1 ? free_event(e) : -1;
    fz_task *tk = calloc(1, sizeof *tk);
    tk->devi = d;
    /* Hand the task a buffer reference to drop. */
    int i = k & 2 ? fz_pick_buf(e, s, false) : -1;
    if (i >= 0 && e->buf[i].refs + e->buf[i].task_refs < 6) {
        int rc = sw_buffer_retain(e->buf[i].h);
        fz_result(e, "sw_buffer_retain (for a task)", rc, FZ_OK, 0, NULL);
        if (rc == SW_OK) {
            tk->drop = e->buf[i].h;
            tk->drop_slot = i;
        }
    }
    /* ... and the queue's own reference (the task may drop its queue's
     * last one: "fn may call any spillway function, including releasing
     * q"). */
    if (k & 4) {
        int rc = sw_queue_retain(fq->q);
        fz_result(e, "sw_queue_retain (for a task)", rc, FZ_OK, 0, NULL);
        if (rc == SW_OK) {
            tk->drop_q = fq->q;
            tk->drop_qi = q;
        }
    }
    fz_note(e, "host_task on a queue of %s%s%s%s", e->w->spec[d],
            tk->drop ? ", drops a buffer reference" : "",
            tk->drop_q ? ", drops a queue reference" : "",
            v >= 0 ? ", with an event" : "");
    sw_event *ev = (sw_event *)(uintptr_t)0xA5A5;
    int rc = sw_queue_host_task(fq->q, task_fn, tk, v >= 0 ? &ev : NULL);
    if (!fz_result(e, "sw_queue_host_task", rc, FZ_OK, 0, NULL)) {
        if (v >= 0 && ev != NULL)
            fz_fail(e->w, e, "a failed host_task left *out set");
        /* What we retained for it is still ours. */
        if (tk->drop != NULL)
            e->buf[i].refs++;
        if (tk->drop_q != NULL)
            fq->refs++;
        free(tk);
        return true;
    }
    if (tk->drop != NULL)
        e->buf[i].task_refs++;
    if (tk->drop_q != NULL)
        fq->task_refs++;
    e->task[t] = tk;
    if (v >= 0)
        e->event[new_event(e, v, ev)].shared = true;
    return true;
}

static bool op_event(fz_engine *e, fz_src *s, unsigned k)
{
    int v = live_event(e, s);
    if (v < 0)
        return false;
    fz_event *f = &e->event[v];
    int rc, done = 7;
    switch (k) {
    case 6:
        fz_note(e, "event_query %d", v);
        rc = sw_event_query(f->ev, &done);
        fz_result(e, "sw_event_query", rc, FZ_OK, 0, NULL);
        if (done != 0 && done != 1)
            fz_fail(e->w, e, "sw_event_query: done = %d", done);
        if (f->waited && !done)
            fz_fail(e->w, e, "an event waited for is not done");
        break;
    case 7:
        fz_note(e, "event_wait %d", v);
        rc = sw_event_wait(f->ev);
        fz_result(e, "sw_event_wait", rc, FZ_OK, 0, NULL);
        f->waited = true;
        rc = sw_event_query(f->ev, &done);
        if (rc != SW_OK || done != 1)
            fz_fail(e->w, e, "an event just waited for: query %s done %d",
                    fz_err(rc), done);
        break;
    case 8:
        if (f->refs >= 3)
            return false;
        fz_note(e, "event_retain %d", v);
        rc = sw_event_retain(f->ev);
        fz_result(e, "sw_event_retain", rc, FZ_OK, 0, NULL);
        f->refs++;
        break;
    default:
        fz_note(e, "event_release %d", v);
        rc = sw_event_release(f->ev);
        fz_result(e, "sw_event_release", rc, FZ_OK, 0, NULL);
        if (--f->refs == 0) {
            f->live = false;
            if (!f->shared)
                fz_remember_dead(e, 3, f->ev);
        }
        break;
    }
    return true;
}

static sw_order *order_of(fz_engine *e, fz_src *s, int *o)
{
    *o = (int)fz_below(s, FZ_NORDER);
    if (e->order[*o] == NULL) {
        int rc = sw_order_create(&e->order[*o]);
        if (!fz_result(e, "sw_order_create", rc, FZ_OK, 0, NULL))
            return NULL;
        e->order_added[*o] = 0;
    }
    return e->order[*o];
}

static void check_counts(fz_engine *e, sw_order *ord, int o)
{
    size_t sub = 99, host = 99;
    int rc = sw_order_counts(ord, &sub, &host);
    if (rc != SW_OK || sub + host > (size_t)e->order_added[o])
        fz_fail(e->w, e, "sw_order_counts: %s %zu + %zu of %d added",
                fz_err(rc), sub, host, e->order_added[o]);
    for (int k = 0; k < 2; k++) {
        size_t n = k ? host : sub;
        for (size_t i = 0; i < n; i++) {
            sw_event *ev = sw_order_event(ord, k, i);
            int done = 0;
            if (ev == NULL || sw_event_query(ev, &done) != SW_OK)
                fz_fail(e->w, e, "sw_order_event(%d, %zu) of %zu", k, i, n);
        }
        if (sw_order_event(ord, k, n) != NULL)
            fz_fail(e->w, e, "sw_order_event past the end is not NULL");
    }
    int idle = 7;
    rc = sw_order_idle(ord, &idle);
    if (rc != SW_OK || (idle != 0 && idle != 1))
        fz_fail(e->w, e, "sw_order_idle: %s %d", fz_err(rc), idle);
}

static bool op_order(fz_engine *e, fz_src *s, unsigned k)
{
    int o;
    switch (k) {
    case 10: { /* add an event */
        int v = live_event(e, s);
        if (v < 0)
            return false;
        sw_order *ord = order_of(e, s, &o);
        if (ord == NULL)
            return true;
        int host = fz_u8(s) & 1;
        fz_note(e, "order_add event %d to order %d (%s)", v, o,
                host ? "host task" : "submitted");
        int rc = sw_order_add(ord, e->event[v].ev, host);
        if (fz_result(e, "sw_order_add", rc, FZ_OK, 0, NULL)) {
            e->order_added[o]++;
            e->event[v].shared = true;
        }
        return true;
    }
    case 11: { /* counts, events, idle */
        sw_order *ord = order_of(e, s, &o);
        if (ord == NULL)
            return true;
        fz_note(e, "order_counts of order %d", o);
        check_counts(e, ord, o);
        return true;
    }
    case 12: { /* wait */
        sw_order *ord = order_of(e, s, &o);
        if (ord == NULL)
            return true;
        fz_note(e, "order_wait of order %d", o);
        int rc = sw_order_wait(ord);
        fz_result(e, "sw_order_wait", rc, FZ_OK, 0, NULL);
        size_t sub = 9, host = 9;
        int idle = 0;
        if (sw_order_counts(ord, &sub, &host) != SW_OK || sub || host ||
            sw_order_idle(ord, &idle) != SW_OK || !idle)
            fz_fail(e->w, e, "an order record just waited for is not empty "
                    "and idle: %zu %zu %d", sub, host, idle);
        e->order_added[o] = 0;
        return true;
    }
    default: { /* destroy (NULL too) */
        o = (int)fz_below(s, FZ_NORDER);
        fz_note(e, "order_destroy %d", o);
        sw_order_destroy(e->order[o]);
        e->order[o] = NULL;
        return true;
    }
    }
}

bool fz_op_queue(fz_engine *e, fz_src *s, unsigned k)
{
    switch (k) {
    case 0: return op_create(e, s);
    case 1: return op_release(e, s);
    case 2: return op_retain(e, s);
    case 3: return op_sync(e, s);
    case 4: return op_record(e, s);
    case 5: return op_host_task(e, s);
    case 6: case 7: case 8: case 9: return op_event(e, s, k);
    default: return op_order(e, s, k);
    }
}
