/*
 * model.c -- the engine's model: its objects (handles, allocations and the
 * shadow of their bytes, leases, queues, host tasks) and how they live and
 * die, aliasing through wrapped buffers, and the ordering the engine owes
 * its own data across queues.
 */
#include "model.h"

#include <inttypes.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------
 * Engines
 * ---------------------------------------------------------------------- */

void fz_engine_init(fz_engine *e, fz_world *w, int index)
{
    memset(e, 0, sizeof *e);
    e->w = w;
    e->index = index;
    e->fault_dev = -1;
    e->tmp = malloc(FZ_MAX_BUF + 64);
    for (int d = 0; d < w->ndev; d++) {
        fz_devmodel *dm = &e->dm[d];
        dm->counters_known = !w->threaded;
        sw_memory_info m;
        if (sw_memory_info_get(w->dev[d], &m) != SW_OK)
            fz_fail(w, e, "memory_info of %s at the start", w->spec[d]);
        dm->budget = m.budget;
        dm->budget_enforced = m.budget == 0 || m.in_use + m.cached <=
                                                   m.budget;
        dm->restores_at_budget = m.restores;
        dm->allocs = m.allocs;
        dm->frees = m.frees;
        dm->gc_runs = m.gc_runs;
        dm->last = m;
        dm->have_last = true;
        if (sw_device_dtypes(w->dev[d], &dm->dtypes) != SW_OK)
            fz_fail(w, e, "sw_device_dtypes(%s)", w->spec[d]);
        for (int k = 0; k < FZ_NCALLBACK; k++) {
            fz_callback *cb = &w->cb[d][k];
            pthread_mutex_lock(&cb->mu);
            e->cb_seen_gc[d][k] = cb->gc_notes;
            e->cb_seen_nested[d][k] = cb->nested_ok;
            pthread_mutex_unlock(&cb->mu);
        }
    }
}

void fz_engine_destroy(fz_engine *e)
{
    for (int a = 0; a < FZ_NALLOC; a++)
        free(e->alloc[a].shadow);
    free(e->tmp);
    memset(e, 0, sizeof *e);
}

/* ------------------------------------------------------------------------
 * Model objects
 * ---------------------------------------------------------------------- */

int fz_free_buf_slot(fz_engine *e)
{
    for (int i = 0; i < FZ_NBUF; i++)
        if (!e->buf[i].live)
            return i;
    return -1;
}

int fz_free_alloc_slot(fz_engine *e)
{
    for (int a = 0; a < FZ_NALLOC; a++)
        if (!e->alloc[a].live)
            return a;
    return -1;
}

int fz_new_alloc(fz_engine *e, int devi, size_t size, bool external)
{
    int a = fz_free_alloc_slot(e);
    if (a < 0)
        return -1;
    fz_alloc *al = &e->alloc[a];
    free(al->shadow);
    memset(al, 0, sizeof *al);
    al->live = true;
    al->devi = devi;
    al->external = external;
    al->ext_of = -1;
    al->ext_lease = -1;
    al->shared = -1;
    al->size = size;
    al->rounded = external ? 0 : (size + SW_ALLOC_GRANULARITY - 1) /
                                     SW_ALLOC_GRANULARITY *
                                     SW_ALLOC_GRANULARITY;
    al->state = SW_RESIDENT;
    if (!external)
        al->shadow = calloc(1, size ? size : 1);
    return a;
}

int fz_new_buf(fz_engine *e, sw_buffer *h, int a, size_t off, size_t size,
               bool view, const char *tag)
{
    if (!view) {
        uint64_t id = 0;
        if (sw_buffer_id(h, &id) != SW_OK || id == 0)
            fz_fail(e->w, e, "sw_buffer_id of a new buffer");
        e->alloc[a].id = id;
    }
    int i = fz_free_buf_slot(e);
    if (i < 0)
        return -1;
    fz_buf *b = &e->buf[i];
    memset(b, 0, sizeof *b);
    b->live = true;
    b->h = h;
    b->alloc = a;
    b->off = off;
    b->size = size;
    b->view = view;
    b->refs = 1;
    snprintf(b->tag, sizeof b->tag, "%s", tag ? tag : "");
    if (view)
        e->alloc[a].views++;
    else
        e->alloc[a].base_handle = true;
    return i;
}

void fz_remember_dead(fz_engine *e, int kind, void *h)
{
    /* A queue a launch record pinned for holds a reference of its own
     * (ops_launch.c): it dies with the record's end. */
    for (int l = 0; kind == 2 && l < FZ_NLAUNCH; l++)
        if (e->launch[l].live && e->launch[l].qh == h)
            return;
    unsigned k = e->dead_n[kind]++ % FZ_NDEAD;
    switch (kind) {
    case 0: e->dead_buf[k] = h; break;
    case 1: e->dead_lease[k] = h; break;
    case 2: e->dead_queue[k] = h; break;
    case 3: e->dead_event[k] = h; break;
    default: e->dead_scope[k] = h; break;
    }
}

void *fz_pick_dead(fz_engine *e, fz_src *s, int kind)
{
    unsigned n = e->dead_n[kind] < FZ_NDEAD ? e->dead_n[kind] : FZ_NDEAD;
    if (n == 0)
        return NULL;
    unsigned k = (unsigned)fz_below(s, n);
    switch (kind) {
    case 0: return e->dead_buf[k];
    case 1: return e->dead_lease[k];
    case 2: return e->dead_queue[k];
    case 3: return e->dead_event[k];
    default: return e->dead_scope[k];
    }
}

void fz_model_maybe_release(fz_engine *e, int a)
{
    fz_alloc *al = &e->alloc[a];
    if (!al->live || al->base_handle || al->views > 0 || al->pins > 0 ||
        al->leases > 0)
        return;
    al->live = false;
    if (!al->external && al->shared < 0)
        e->dm[al->devi].frees++;
    if (al->external && al->ext_lease >= 0)
        e->lease[al->ext_lease].wraps--;
    free(al->shadow);
    al->shadow = NULL;
}

void fz_model_free(fz_engine *e, int i)
{
    fz_buf *b = &e->buf[i];
    if (--b->refs > 0)
        return;
    b->live = false;
    fz_remember_dead(e, 0, b->h);
    fz_alloc *al = &e->alloc[b->alloc];
    if (b->view)
        al->views--;
    else
        al->base_handle = false;
    fz_model_maybe_release(e, b->alloc);
}

int fz_root(fz_engine *e, int a, size_t off, size_t *root_off)
{
    while (e->alloc[a].external && e->alloc[a].ext_of >= 0) {
        off += e->alloc[a].ext_off;
        a = e->alloc[a].ext_of;
    }
    *root_off = off;
    return a;
}

unsigned char *fz_bytes(fz_engine *e, int a, size_t off)
{
    size_t ro;
    int r = fz_root(e, a, off, &ro);
    if (e->alloc[r].shared >= 0)
        return e->w->shared[e->alloc[r].shared].bytes + ro;
    return e->alloc[r].shadow + ro;
}

bool fz_overlap(fz_engine *e, int a1, size_t o1, size_t n1, int a2,
                size_t o2, size_t n2)
{
    if (n1 == 0 || n2 == 0)
        return false;
    size_t r1, r2;
    int x = fz_root(e, a1, o1, &r1), y = fz_root(e, a2, o2, &r2);
    if (x != y)
        return false;
    return r1 < r2 + n2 && r2 < r1 + n1;
}

bool fz_aliased(fz_engine *e, int a)
{
    size_t ro;
    int r = fz_root(e, a, 0, &ro);
    if (r != a)
        return true;
    for (int x = 0; x < FZ_NALLOC; x++)
        if (e->alloc[x].live && e->alloc[x].external &&
            fz_root(e, x, 0, &ro) == r)
            return true;
    return false;
}

void fz_queue_done(fz_engine *e, int devi, int q, const int *slots, int n)
{
    if (q < 0)
        return;
    bool alias = false;
    for (int k = 0; k < n && !alias; k++)
        alias = slots[k] >= 0 && fz_aliased(e, e->buf[slots[k]].alloc);
    if (!alias)
        return;
    int rc = fz_sync_queue(e, e->queue[devi][q].q);
    if (rc != SW_OK)
        fz_fail(e->w, e, "sw_queue_synchronize after work on aliased "
                "memory: %s", fz_err(rc));
    fz_order_after(e, devi, -1, slots, n); /* nothing in flight now */
}

void fz_disarm(fz_engine *e)
{
    if (!e->fault_armed)
        return;
    (void)sw_inject_fault(e->fault_dev >= 0 ? e->w->dev[e->fault_dev] : NULL,
                          e->fault_op, 0, 0);
    e->fault_armed = false;
}

/* Whether a failure of the model's own call may pass: a resource error
 * under a fault armed from outside (which goes away by itself). */
static bool transient(fz_engine *e, int rc, int tries)
{
    if (!e->w->outside_faults || tries >= 20000 ||
        (rc != SW_ERR_OOM && rc != SW_ERR_HOST_OOM && rc != SW_ERR_DEVICE))
        return false;
    struct timespec ts = {0, 500 * 1000};
    nanosleep(&ts, NULL);
    return true;
}

int fz_sync_queue(fz_engine *e, sw_queue *q)
{
    int rc = sw_queue_synchronize(q);
    if (rc != SW_OK && e->fault_armed) {
        /* The fault hit the model's own wait: the wait is needed. */
        fz_disarm(e);
        rc = sw_queue_synchronize(q);
    }
    for (int k = 0; rc != SW_OK && transient(e, rc, k); k++)
        rc = sw_queue_synchronize(q);
    return rc;
}

int fz_sync_device(fz_engine *e, sw_device *dev)
{
    fz_disarm(e);
    int rc = sw_device_synchronize(dev);
    for (int k = 0; rc != SW_OK && transient(e, rc, k); k++)
        rc = sw_device_synchronize(dev);
    return rc;
}

int fz_read(fz_engine *e, sw_buffer *h, size_t off, void *dst, size_t n)
{
    fz_disarm(e);
    int rc = sw_buffer_read(h, off, dst, n);
    for (int k = 0; rc != SW_OK && transient(e, rc, k); k++)
        rc = sw_buffer_read(h, off, dst, n);
    return rc;
}

static int root_of(fz_engine *e, int slot)
{
    size_t ro;
    return fz_root(e, e->buf[slot].alloc, 0, &ro);
}

/* pin: before sw_launch_begin_q on queue q, which orders q after every
 * queue's work on the buffers by itself (DESIGN.md, session 4): the
 * model waits only where the core cannot see the order (aliases, raw
 * memory). */
static void order_before(fz_engine *e, int devi, int q, const int *slots,
                         int n, bool pin)
{
    int mine = q >= 0 ? devi * FZ_NQUEUE + q + 1 : 0;
    for (int k = 0; k < n; k++) {
        if (slots[k] < 0)
            continue;
        int r = root_of(e, slots[k]);
        int other = e->lastq[r];
        if (other == FZ_LASTQ_RAW) {
            if (q >= 0) {
                int rc = fz_sync_device(e, e->w->dev[devi]);
                if (rc != SW_OK)
                    fz_fail(e->w, e, "sw_device_synchronize: %s",
                            fz_err(rc));
                memset(e->lastq, 0, sizeof e->lastq);
            }
            continue;
        }
        /* The default queue waits for other queues' work on a buffer by
         * itself (queue.c), and so does a queue's pin, but only for work
         * on the same base: a queue's work through a wrapped buffer and
         * the allocation it wraps (or through the allocation before a
         * wrap over it was made) are two bases to the core, one memory.
         * One queue's operations do not wait for another's, and raw
         * device memory is not ordered at all. */
        if ((pin || (q < 0 && q != FZ_RAW_LAUNCH)) &&
            !fz_aliased(e, e->buf[slots[k]].alloc))
            continue;
        if (other == 0 || other == mine)
            continue;
        fz_queue *fq = &e->queue[(other - 1) / FZ_NQUEUE]
                                [(other - 1) % FZ_NQUEUE];
        /* A queue the engine let go of may still be held by a launch
         * pinned for it (its raw kernels ran there): waited for through
         * that launch's reference.  (Skipped, an op on another queue ran
         * beside a raw fill still queued there -- found by the fuzzer.) */
        sw_queue *held = fq->live && fq->refs > 0 ? fq->q : NULL;
        for (int l = 0; held == NULL && l < FZ_NLAUNCH; l++)
            if (e->launch[l].live && e->launch[l].qh != NULL &&
                e->launch[l].qh == fq->q)
                held = e->launch[l].qh;
        if (held != NULL) {
            int rc = fz_sync_queue(e, held);
            if (rc != SW_OK)
                fz_fail(e->w, e, "sw_queue_synchronize: %s", fz_err(rc));
        }
        for (int a = 0; a < FZ_NALLOC; a++)
            if (e->lastq[a] == other)
                e->lastq[a] = 0;
    }
}

void fz_order_before(fz_engine *e, int devi, int q, const int *slots, int n)
{
    order_before(e, devi, q, slots, n, false);
}

void fz_order_before_pin(fz_engine *e, int devi, int q, const int *slots,
                         int n)
{
    order_before(e, devi, q, slots, n, true);
}

void fz_order_after(fz_engine *e, int devi, int q, const int *slots, int n)
{
    for (int k = 0; k < n; k++)
        if (slots[k] >= 0)
            e->lastq[root_of(e, slots[k])] =
                (uint8_t)(q >= 0 ? devi * FZ_NQUEUE + q + 1 : 0);
}

void fz_order_release(fz_engine *e, int devi, int q)
{
    int mine = devi * FZ_NQUEUE + q + 1;
    bool used = false;
    for (int a = 0; a < FZ_NALLOC; a++)
        if (e->lastq[a] == mine) {
            used = true;
            e->lastq[a] = 0;
        }
    if (used) {
        int rc = fz_sync_queue(e, e->queue[devi][q].q);
        if (rc != SW_OK)
            fz_fail(e->w, e, "sw_queue_synchronize: %s", fz_err(rc));
    }
}

size_t fz_devoff(fz_engine *e, int a, size_t off)
{
    size_t ro;
    (void)fz_root(e, a, off, &ro);
    return ro;
}

/* A live, usable handle: not donated, and writable when asked. */
static bool usable(fz_engine *e, int i, int devi, bool writable)
{
    fz_buf *b = &e->buf[i];
    if (!b->live || b->donated)
        return false;
    if (devi >= 0 && e->alloc[b->alloc].devi != devi)
        return false;
    size_t ro;
    int r = fz_root(e, b->alloc, 0, &ro);
    if (writable && (e->alloc[b->alloc].readonly || e->alloc[r].readonly))
        return false;
    return true;
}

int fz_pick_buf_dev(fz_engine *e, fz_src *s, int devi, bool writable)
{
    int start = (int)fz_below(s, FZ_NBUF);
    int p = e->prefer_buf1 - 1;
    e->prefer_buf1 = 0;
    if (p >= 0 && usable(e, p, devi, writable))
        return p;
    for (int k = 0; k < FZ_NBUF; k++) {
        int i = (start + k) % FZ_NBUF;
        if (usable(e, i, devi, writable))
            return i;
    }
    return -1;
}

int fz_pick_buf(fz_engine *e, fz_src *s, bool writable)
{
    return fz_pick_buf_dev(e, s, -1, writable);
}

int fz_pick_dev(fz_engine *e, fz_src *s)
{
    int d = (int)fz_below(s, (size_t)e->w->ndev);
    int p = e->prefer_dev1 - 1;
    e->prefer_dev1 = 0;
    return p >= 0 ? p : d;
}

int fz_pick_queue(fz_engine *e, fz_src *s, int devi)
{
    int start = (int)fz_below(s, FZ_NQUEUE);
    for (int k = 0; k < FZ_NQUEUE; k++) {
        int q = (start + k) % FZ_NQUEUE;
        if (e->queue[devi][q].live && e->queue[devi][q].refs > 0)
            return q;
    }
    return -1;
}

/* ------------------------------------------------------------------------
 * Host tasks: what they drop is the model's once they have run
 * ---------------------------------------------------------------------- */

static void task_done(fz_engine *e, int t)
{
    fz_task *tk = e->task[t];
    if (atomic_load(&tk->ran) != 1)
        fz_fail(e->w, e, "a host task's sw_buffer_free or sw_queue_release "
                "failed");
    if (tk->drop != NULL) {
        fz_buf *b = &e->buf[tk->drop_slot];
        b->task_refs--;
        b->refs++; /* handed back so that fz_model_free drops it */
        fz_model_free(e, tk->drop_slot);
    }
    if (tk->drop_q != NULL) {
        fz_queue *q = &e->queue[tk->devi][tk->drop_qi];
        q->task_refs--;
        if (q->refs == 0 && q->task_refs == 0) {
            q->live = false;
            fz_remember_dead(e, 2, q->q);
        }
    }
    free(tk);
    e->task[t] = NULL;
}

void fz_wait_task(fz_engine *e, int t)
{
    if (e->task[t] == NULL)
        return;
    /* The task runs on its queue's runner once the queue's work is done;
     * nothing here holds a lock it could need. */
    while (!atomic_load(&e->task[t]->ran))
        sched_yield();
    task_done(e, t);
}

void fz_poll_tasks(fz_engine *e)
{
    for (int t = 0; t < FZ_NTASK; t++)
        if (e->task[t] != NULL && atomic_load(&e->task[t]->ran))
            task_done(e, t);
}

void fz_wait_tasks_of_buf(fz_engine *e, int i)
{
    for (int t = 0; t < FZ_NTASK; t++)
        if (e->task[t] != NULL && e->task[t]->drop != NULL &&
            e->task[t]->drop_slot == i)
            fz_wait_task(e, t);
}
