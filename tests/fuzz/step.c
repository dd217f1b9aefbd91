/*
 * step.c -- the step loop: the weighted table that maps an input byte to an
 * operation, running it (with a fault armed by the step before, if any)
 * and checking after it; and the cleanup at the end of an input.
 */
#include "model.h"

#include <inttypes.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * The step loop
 * ---------------------------------------------------------------------- */

typedef bool (*fz_family_fn)(fz_engine *, fz_src *, unsigned);

typedef struct {
    fz_family_fn fn;
    unsigned kind;
    unsigned weight;
} fz_opdef;

/* Kinds are each family's own numbering (see its switch). */
static const fz_opdef opdefs[] = {
    /* buffers: alloc, free, retain, view, write, read, copy, fill, info */
    {fz_op_buffer, 0, 16}, {fz_op_buffer, 1, 9}, {fz_op_buffer, 2, 2},
    {fz_op_buffer, 3, 6},  {fz_op_buffer, 4, 9}, {fz_op_buffer, 5, 4},
    {fz_op_buffer, 6, 7},  {fz_op_buffer, 7, 4}, {fz_op_buffer, 8, 2},
    /* kernels: fill, add, scale, axpy, sum */
    {fz_op_kernel, 0, 5}, {fz_op_kernel, 1, 7}, {fz_op_kernel, 2, 5},
    {fz_op_kernel, 3, 6}, {fz_op_kernel, 4, 4},
    /* leases: device_ptr, expose, release, wrap; and prefetch, and a
     * prefetch followed at once by a write, read, free or budget */
    {fz_op_lease, 0, 3}, {fz_op_lease, 1, 5}, {fz_op_lease, 2, 4},
    {fz_op_lease, 3, 4}, {fz_op_lease, 4, 4}, {fz_op_lease, 5, 4},
    /* launches: begin, raw kernel, end */
    {fz_op_launch, 0, 4}, {fz_op_launch, 1, 5}, {fz_op_launch, 2, 4},
    /* accounting: budget, empty cache, reset peak, scope begin/peak/end,
     * synchronize, open+close or budget get; a burst (steps checked
     * without reading bytes back, so that work stays in flight); counters
     * reset; the host staging pool; the memory history */
    {fz_op_account, 0, 10}, {fz_op_account, 1, 2}, {fz_op_account, 2, 2},
    {fz_op_account, 3, 2},  {fz_op_account, 4, 2}, {fz_op_account, 5, 2},
    {fz_op_account, 6, 2},  {fz_op_account, 7, 1}, {fz_op_account, 8, 4},
    {fz_op_account, 9, 1},  {fz_op_account, 10, 1}, {fz_op_account, 11, 2},
    /* queues: create, release, retain, sync, record, host task, event
     * query, wait, retain, release, order add, order counts/idle, order
     * wait, order create/destroy */
    {fz_op_queue, 0, 3}, {fz_op_queue, 1, 3}, {fz_op_queue, 2, 1},
    {fz_op_queue, 3, 2}, {fz_op_queue, 4, 3}, {fz_op_queue, 5, 4},
    {fz_op_queue, 6, 2}, {fz_op_queue, 7, 2}, {fz_op_queue, 8, 1},
    {fz_op_queue, 9, 2}, {fz_op_queue, 10, 2}, {fz_op_queue, 11, 1},
    {fz_op_queue, 12, 1}, {fz_op_queue, 13, 1},
    /* pressure: add, remove, donate, set mode */
    {fz_op_pressure, 0, 3}, {fz_op_pressure, 1, 1}, {fz_op_pressure, 2, 5},
    {fz_op_pressure, 3, 1},
    /* faults */
    {fz_op_fault, 0, 8},
    /* misuse: the family picks its own sub-kind */
    {fz_op_misuse, 0, 24},
};
#define NOPDEFS (sizeof opdefs / sizeof opdefs[0])

static fz_opdef optable[256];
static pthread_once_t optable_once = PTHREAD_ONCE_INIT;

static void build_optable(void)
{
    unsigned total = 0;
    for (size_t k = 0; k < NOPDEFS; k++)
        total += opdefs[k].weight;
    /* Byte b maps to the def whose cumulative weight covers b * total /
     * 256: every def gets at least one byte value. */
    size_t k = 0;
    unsigned cum = opdefs[0].weight;
    for (unsigned b = 0; b < 256; b++) {
        unsigned x = b * total / 256;
        while (x >= cum && k + 1 < NOPDEFS)
            cum += opdefs[++k].weight;
        optable[b] = opdefs[k];
    }
}

/* FUZZ_FAIL_AT_STEP=N: a divergence at step N of every input, to see
 * that a run that fails says so (and keeps the input). */
static int fail_at = 0x7fffffff;

static void build_optable_and_read_env(void)
{
    build_optable();
    const char *f = getenv("FUZZ_FAIL_AT_STEP");
    if (f != NULL && *f)
        fail_at = atoi(f);
}

bool fz_engine_step(fz_engine *e, fz_src *src)
{
    pthread_once(&optable_once, build_optable_and_read_env);
    if (e->step == fail_at)
        fz_fail(e->w, e, "FUZZ_FAIL_AT_STEP=%d: a divergence on purpose",
                fail_at);
    if (src->data != NULL && (src->done || e->step >= FZ_MAX_STEPS))
        return false;
    uint8_t op = fz_u8(src);
    if (src->done)
        return false;
    e->src = src;
    fz_opdef d = optable[op];
    e->what[0] = '\0';
    if (d.fn == fz_op_misuse)
        fz_disarm(e); /* misuse must fail for its own reason */
    bool arming = d.fn == fz_op_fault;
    e->dev_used = 0;
    e->may_spill = false;
    e->step_before_valid = !arming && !e->w->threaded &&
                           !e->w->outside_faults;
    if (e->step_before_valid) {
        fz_snapshot_take(e, &e->step_before);
        e->step_before_cb_calls = atomic_load(&e->w->stats.cb_calls);
    }
    bool did = d.fn(e, src, d.kind);
    e->step_before_valid = false;
    if (!arming)
        fz_disarm(e);
    e->step++;
    atomic_fetch_add(&e->w->stats.steps, 1);
    if (arming)
        return true; /* the next step runs under the fault */
    if (!did) {
        atomic_fetch_add(&e->w->stats.skipped, 1);
    } else if (e->burst_left > 0) {
        e->burst_left--;
        fz_check_light(e);
    } else {
        fz_check_all(e);
    }
    return true;
}

/* ------------------------------------------------------------------------
 * Cleanup: everything the engine holds goes, in an order the header
 * allows (wrapped buffers before the leases they wrap, launches ended
 * before their handles are freed), checked as it goes.
 * ---------------------------------------------------------------------- */

static void expect_ok(fz_engine *e, const char *what, int rc)
{
    if (rc != SW_OK)
        fz_fail(e->w, e, "cleanup: %s: %s", what, fz_err(rc));
}

void fz_engine_cleanup(fz_engine *e)
{
    fz_note(e, "cleanup");
    fz_disarm(e);
    e->burst_left = 0;
    fz_check_all(e); /* what a burst left in flight */
    for (int t = 0; t < FZ_NTASK; t++)
        fz_wait_task(e, t);
    fz_process_callbacks(e);
    fz_engine_reclaim_victims(e);
    /* Our callbacks go (victims other engines gave them stay for the
     * world to free). */
    for (int d = 0; d < e->w->ndev; d++) {
        for (int k = 0; k < FZ_NCALLBACK; k++) {
            fz_callback *cb = &e->w->cb[d][k];
            pthread_mutex_lock(&cb->mu);
            int id = cb->owner == e ? cb->id : -1;
            if (cb->owner == e) {
                cb->id = -1;
                cb->owner = NULL;
            }
            pthread_mutex_unlock(&cb->mu);
            if (id >= 0)
                expect_ok(e, "sw_remove_pressure_callback",
                          sw_remove_pressure_callback(e->w->dev[d], id));
        }
    }
    for (int l = 0; l < FZ_NLAUNCH; l++) {
        fz_launch *ln = &e->launch[l];
        if (!ln->live)
            continue;
        expect_ok(e, "sw_launch_end", fz_launch_end(e, ln));
        for (int k = 0; k < ln->n; k++) {
            e->buf[ln->slot[k]].launch_uses--;
            e->alloc[e->buf[ln->slot[k]].alloc].pins--;
        }
        ln->live = false;
        for (int k = 0; k < ln->n; k++)
            fz_model_maybe_release(e, e->buf[ln->slot[k]].alloc);
    }
    /* Wrapped (external) handles first: their leases must outlive them. */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < FZ_NBUF; i++) {
            fz_buf *b = &e->buf[i];
            if (!b->live || (pass == 0) != e->alloc[b->alloc].external)
                continue;
            while (b->live) {
                expect_ok(e, "sw_buffer_free", sw_buffer_free(b->h));
                fz_model_free(e, i);
            }
        }
    }
    for (int l = 0; l < FZ_NLEASE; l++) {
        fz_lease *ls = &e->lease[l];
        if (!ls->live)
            continue;
        expect_ok(e, "sw_lease_release", sw_lease_release(ls->l));
        ls->live = false;
        e->alloc[ls->alloc].leases--;
        fz_model_maybe_release(e, ls->alloc);
    }
    for (int a = 0; a < FZ_NALLOC; a++)
        if (e->alloc[a].live)
            fz_fail(e->w, e, "cleanup: allocation %d still live in the "
                    "model (handle %d views %d pins %d leases %d)", a,
                    e->alloc[a].base_handle, e->alloc[a].views,
                    e->alloc[a].pins, e->alloc[a].leases);
    for (int s = 0; s < FZ_NSCOPE; s++) {
        if (!e->scope[s].live)
            continue;
        uint64_t p = 0;
        expect_ok(e, "sw_peak_scope_end",
                  sw_peak_scope_end(e->scope[s].s, &p));
        e->scope[s].live = false;
    }
    for (int o = 0; o < FZ_NORDER; o++) {
        if (e->order[o] == NULL)
            continue;
        expect_ok(e, "sw_order_wait", sw_order_wait(e->order[o]));
        sw_order_destroy(e->order[o]);
        e->order[o] = NULL;
    }
    for (int v = 0; v < FZ_NEVENT; v++) {
        fz_event *ev = &e->event[v];
        while (ev->live) {
            expect_ok(e, "sw_event_release", sw_event_release(ev->ev));
            if (--ev->refs == 0)
                ev->live = false;
        }
    }
    for (int d = 0; d < e->w->ndev; d++) {
        for (int q = 0; q < FZ_NQUEUE; q++) {
            fz_queue *fq = &e->queue[d][q];
            while (fq->live && fq->refs > 0) {
                expect_ok(e, "sw_queue_release", sw_queue_release(fq->q));
                fq->refs--;
            }
            fq->live = false;
        }
    }
    fz_check_all(e);
}
