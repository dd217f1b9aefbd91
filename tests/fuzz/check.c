/*
 * check.c -- what the fuzzer checks after every step, and why each
 * invariant holds (derived from include/spillway.h and DESIGN.md).
 *
 * Bytes.  Every live handle's window is read back (sw_buffer_read, which
 * never moves a buffer) and compared with the shadow: the bytes the model
 * computed from every write, fill, copy and kernel, the kernels applied
 * to the shadow in the same precision (see ops_kernel.c).
 *
 * Placement.  A host read never moves a buffer ("host reads and writes of
 * a spilled buffer use its host copy and leave it spilled", and nothing
 * else happens in a read), so each allocation's state is the same before
 * and after the reads; an allocation that is pinned (sw_launch_begin) or
 * leased (sw_buffer_expose) is resident; a wrapped one always is.
 *
 * Accounting, per device, with one engine (the device is the fuzzer's):
 *  - in_use  == sum of rounded sizes of live resident owned allocations
 *    (views and wrapped buffers count nothing: "a view holds a reference
 *    to the base allocation, which stays ... counted in in_use"; "an
 *    external buffer is ... not counted in in_use");
 *  - spilled == sum of rounded sizes of live spilled owned allocations
 *    (0, and no spills ever, on a device that never spills: host:0);
 *  - allocs, frees, gc_runs == the model's counts (a free counts when an
 *    owned allocation is released, however that happens);
 *  - peak >= in_use, and peak never drops except through sw_reset_peak;
 *  - every counter is monotone; spills and restores grew at least by the
 *    state changes seen; device_total never changes;
 *  - the budget: sw_set_memory_budget bounds in_use + cached; "a budget
 *    below what is already held takes effect at once: the cache is
 *    trimmed and least-recently-used buffers are spilled until in_use +
 *    cached fits, or nothing more can move (what is pinned or leased
 *    stays; the next allocation is then refused until room is made)".
 *    in_use + cached grows only when device memory is obtained for an
 *    allocation or a restore (a free or a spill moves bytes from in_use to
 *    cached; a trim or empty_cache lowers it; a wrapped buffer counts
 *    nothing), and obtaining checks the budget first.  So, for a budget
 *    B > 0: once in_use + cached <= B has been seen, or once an allocation
 *    or restore has succeeded under B, it stays <= B until the budget
 *    changes; and right after the budget is set, it either fits or the
 *    cache is empty and everything resident is pinned or leased (checked
 *    in ops_account.c).  Pinned or leased buffers make allocations fail,
 *    not pass.
 *  - peak_reserved >= in_use + cached and never drops but through
 *    sw_reset_peak; live_buffers is the number of live bases (owned and
 *    wrapped); host_pool <= host_pool_limit; after sw_reset_counters every
 *    counter is 0 and nothing else moved.
 *  - sw_memory_snapshot agrees with the model on every live base: one
 *    entry each (matched by sw_buffer_id), with its size and rounded size,
 *    state, kind (owned or external), pins, leases, views and handles.
 *  - only the device brings a buffer back (a buffer that came back was
 *    used on the device in the step), and buffers spill only in steps
 *    that obtain device memory or set a budget.
 *  - a failed call changed nothing: the shadow is not touched on failure,
 *    so the byte and accounting checks above cover it; for the argument
 *    errors (INVALID_ARG, INVALID_HANDLE, OUT_OF_RANGE, DTYPE, TOO_LARGE,
 *    BUSY, NO_DEVICE) every memory_info field (but device_free, which the
 *    driver reports, and host_pool and the seconds of spills and restores,
 *    which copies completing in the background update) and every
 *    allocation's state must be exactly as
 *    before the call.  OOM, HOST_OOM and DEVICE may have moved buffers on
 *    the way (spills, restores of earlier operands, trims) but nothing
 *    else, and only ooms/alloc_retries/gc_runs/spill and restore counters
 *    may have grown.
 * Peak scopes: a scope's peak is at least every in_use seen while it was
 * open, never decreases, is at most the device's peak while no reset
 * happened, and an older open scope's peak is at least a newer one's.
 *
 * With several engines on one device (threaded) each engine checks its
 * own bytes and placement, that in_use + spilled covers its own
 * allocations, peak >= in_use and monotone counters; the exact sums are
 * checked at quiescent points by the driver (fz_engine_footprint).
 */
#include "model.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * States
 * ---------------------------------------------------------------------- */

/* A live handle of allocation a, or -1. */
static int handle_of(fz_engine *e, int a)
{
    for (int i = 0; i < FZ_NBUF; i++) {
        fz_buf *b = &e->buf[i];
        if (b->live && b->alloc == a && (!b->donated || !e->w->threaded))
            return i;
    }
    return -1;
}

int fz_query_state(fz_engine *e, int a)
{
    int i = handle_of(e, a);
    if (i < 0)
        return -1;
    sw_buffer_state st = (sw_buffer_state)77;
    int rc = sw_buffer_state_get(e->buf[i].h, &st);
    if (rc != SW_OK || (st != SW_RESIDENT && st != SW_SPILLED))
        fz_fail(e->w, e, "sw_buffer_state_get of handle %d: %s, state %d",
                i, fz_err(rc), (int)st);
    return (int)st;
}

void fz_snapshot_take(fz_engine *e, fz_snapshot *s)
{
    memset(s, 0, sizeof *s);
    if (e->w->threaded)
        return; /* other engines change both at any time */
    for (int d = 0; d < e->w->ndev; d++)
        if (sw_memory_info_get(e->w->dev[d], &s->info[d]) != SW_OK)
            fz_fail(e->w, e, "memory_info of %s", e->w->spec[d]);
    for (int a = 0; a < FZ_NALLOC; a++)
        s->state[a] = e->alloc[a].live ? fz_query_state(e, a) : -1;
}

/* ------------------------------------------------------------------------
 * Results
 * ---------------------------------------------------------------------- */

static bool resource_error(int rc)
{
    return rc == SW_ERR_OOM || rc == SW_ERR_HOST_OOM || rc == SW_ERR_DEVICE;
}

static void compare_info(fz_engine *e, const char *call, int rc, int d,
                         const sw_memory_info *a, const sw_memory_info *b)
{
    /* A request for memory that failed for good counts in ooms, as
     * PyTorch's num_ooms does (a size past the device's largest allocation
     * too): the one thing such a failure changes. */
    uint64_t ooms = a->ooms;
    if ((rc == SW_ERR_TOO_LARGE || resource_error(rc)) && b->ooms == ooms + 1)
        ooms++;
#define SAME(f)                                                               \
    if (a->f != b->f)                                                         \
        fz_fail(e->w, e, "%s failed and yet changed %s." #f ": %" PRIu64      \
                " -> %" PRIu64, call, e->w->spec[d], (uint64_t)a->f,          \
                (uint64_t)b->f);
    SAME(in_use) SAME(peak) SAME(cached) SAME(spilled) SAME(device_total)
    SAME(budget) SAME(allocs) SAME(frees) SAME(spills) SAME(restores)
    SAME(spilled_bytes_total) SAME(restored_bytes_total)
    SAME(alloc_retries) SAME(gc_runs)
    if (ooms != b->ooms)
        fz_fail(e->w, e, "%s failed and yet changed %s.ooms: %" PRIu64
                " -> %" PRIu64, call, e->w->spec[d], a->ooms, b->ooms);
    /* (Not host_pool: a copy that completes hands its host block back
     * whenever the device is next entered, as device_free moves.  A copy
     * out's failure, noticed then too, would put its buffer back: only
     * under a device error, never injected ones, which fail at once.) */
    SAME(peak_reserved) SAME(live_buffers) SAME(host_pool_limit)
#undef SAME
    /* (Nor spill_seconds and restore_seconds: a copy's time is counted
     * when its completion is noticed, at any later entry.) */
}

/* A live handle of allocation a that no pressure callback may have freed
 * (not donated), or -1. */
static int own_handle_of(fz_engine *e, int a)
{
    for (int i = 0; i < FZ_NBUF; i++) {
        fz_buf *b = &e->buf[i];
        if (b->live && b->alloc == a && !b->donated)
            return i;
    }
    return -1;
}

/* A call failed on the way (OOM after the ladder, HOST_OOM, DEVICE), or
 * was refused by the budget with "nothing was moved".  The header's
 * contract for each, checked against the devices and allocations just
 * before the step's first call:
 *  - "nothing was moved": when no pressure callback ran (one frees and
 *    allocates as it likes, and its allocations may spill), no allocation
 *    changed state and nothing moved in the accounting: in_use, cached,
 *    spilled and the movement counters are as they were;
 *  - otherwise the buffers the call was given are where they were, except
 *    that one it brought back before another could not come back stays
 *    resident: an operand resident before is resident now (a later
 *    argument is never spilled to make room for an earlier one);
 *  - it keeps no device memory it took for the one that failed: in_use +
 *    cached grew at most by the operands it brought back (their blocks),
 *    when no callback ran (a callback may allocate and free, filling the
 *    cache).  Other buffers it spilled to make room count nothing there.
 * Spilled buffers that are not operands stay spilled: fz_check_all's "only
 * the device brings a buffer back". */
static void check_resource_failure(fz_engine *e, const char *call, int rc,
                                   const char *msg)
{
    const fz_snapshot *b = &e->step_before;
    bool callbacks =
        atomic_load(&e->w->stats.cb_calls) != e->step_before_cb_calls;
    /* ("nothing was moved for it, but the earlier arguments this call
     * brought back stay resident": the second kind.) */
    bool nothing_moved = strstr(msg, "nothing was moved") != NULL &&
                         strstr(msg, "nothing was moved for it") == NULL;
    uint64_t back[FZ_MAX_DEV] = {0};
    for (int a = 0; a < FZ_NALLOC; a++) {
        fz_alloc *al = &e->alloc[a];
        int i = al->live && b->state[a] >= 0 ? own_handle_of(e, a) : -1;
        if (i < 0)
            continue;
        sw_buffer_state st = (sw_buffer_state)77;
        if (sw_buffer_state_get(e->buf[i].h, &st) != SW_OK)
            fz_fail(e->w, e, "sw_buffer_state_get of handle %d after %s "
                    "failed: %s", i, call, sw_last_error());
        bool operand = (e->dev_used & (UINT32_C(1) << a)) != 0;
        if (nothing_moved && !callbacks && (int)st != b->state[a])
            fz_fail(e->w, e, "%s failed with %s saying \"nothing was "
                    "moved\", and yet allocation %d went from state %d to "
                    "%d", call, fz_err(rc), a, b->state[a], (int)st);
        if (operand && b->state[a] == SW_RESIDENT && st != SW_RESIDENT)
            fz_fail(e->w, e, "%s failed with %s and yet spilled its own "
                    "operand, allocation %d, resident before the call",
                    call, fz_err(rc), a);
        if (operand && b->state[a] == SW_SPILLED && st == SW_RESIDENT &&
            !al->external)
            back[al->devi] += al->rounded;
    }
    if (callbacks)
        return;
    for (int d = 0; d < e->w->ndev; d++) {
        sw_memory_info m;
        if (sw_memory_info_get(e->w->dev[d], &m) != SW_OK)
            fz_fail(e->w, e, "memory_info of %s", e->w->spec[d]);
        const sw_memory_info *p = &b->info[d];
        if (m.in_use + m.cached > p->in_use + p->cached + back[d])
            fz_fail(e->w, e, "%s failed with %s and yet kept device memory "
                    "on %s: in_use + cached %" PRIu64 " -> %" PRIu64
                    " (operands brought back: %" PRIu64 " bytes)", call,
                    fz_err(rc), e->w->spec[d], p->in_use + p->cached,
                    m.in_use + m.cached, back[d]);
        if (!nothing_moved)
            continue;
#define SAME(f)                                                               \
    if (m.f != p->f)                                                          \
        fz_fail(e->w, e, "%s failed saying \"nothing was moved\", and yet "  \
                "changed %s." #f ": %" PRIu64 " -> %" PRIu64, call,           \
                e->w->spec[d], (uint64_t)p->f, (uint64_t)m.f);
        SAME(in_use) SAME(cached) SAME(spilled) SAME(spills) SAME(restores)
        SAME(spilled_bytes_total) SAME(restored_bytes_total) SAME(allocs)
        SAME(frees) SAME(live_buffers) SAME(clean_evictions)
        /* Clean copies may be given up on the way (a host budget making
         * room): host memory let go, nothing of the data moved. */
        if (m.host_copies > p->host_copies)
            fz_fail(e->w, e, "%s failed saying \"nothing was moved\", and "
                    "yet host_copies grew on %s: %" PRIu64 " -> %" PRIu64,
                    call, e->w->spec[d], (uint64_t)p->host_copies,
                    (uint64_t)m.host_copies);
#undef SAME
    }
}

bool fz_result(fz_engine *e, const char *call, int rc, fz_expect ex,
               int code, const fz_snapshot *before)
{
    fz_stats *st = &e->w->stats;
    if (rc == SW_OK) {
        if (ex == FZ_ERR)
            fz_fail(e->w, e, "%s succeeded; expected SW_ERR_%s", call,
                    fz_err(code));
        e->step_before_valid = false; /* it may have moved buffers */
        atomic_fetch_add(&st->ops_ok, 1);
        return true;
    }
    if (rc < 0 && rc >= -15)
        atomic_fetch_add(&st->errors[-rc], 1);
    const char *msg = sw_last_error();
    if (msg == NULL || msg[0] == '\0')
        fz_fail(e->w, e, "%s failed with %s and left no message", call,
                fz_err(rc));
    if (strcmp(sw_err_name(rc), "SW_ERR_UNKNOWN") == 0)
        fz_fail(e->w, e, "%s returned %d, not a code of the table", call,
                rc);
    bool res_ok = resource_error(rc) && (ex == FZ_OK_OR_RES ||
                                         e->fault_armed ||
                                         e->w->outside_faults);
    switch (ex) {
    case FZ_OK:
    case FZ_OK_OR_RES:
        if (!res_ok)
            fz_fail(e->w, e, "%s failed: %s: %s", call, fz_err(rc), msg);
        if (e->step_before_valid)
            check_resource_failure(e, call, rc, msg);
        e->step_before_valid = false; /* it may have moved others */
        break;
    case FZ_ERR:
        if (rc != code && !(resource_error(rc) && e->w->outside_faults))
            fz_fail(e->w, e, "%s: expected SW_ERR_%s, got %s: %s", call,
                    fz_err(code), fz_err(rc), msg);
        if (before != NULL && !e->w->threaded) {
            fz_snapshot now;
            fz_snapshot_take(e, &now);
            for (int d = 0; d < e->w->ndev; d++)
                compare_info(e, call, rc, d, &before->info[d], &now.info[d]);
            for (int a = 0; a < FZ_NALLOC; a++)
                if (before->state[a] != now.state[a])
                    fz_fail(e->w, e, "%s failed and yet moved allocation "
                            "%d (state %d -> %d)", call, a,
                            before->state[a], now.state[a]);
        }
        break;
    }
    atomic_fetch_add(&st->ops_failed, 1);
    return false;
}

/* ------------------------------------------------------------------------
 * Bytes
 * ---------------------------------------------------------------------- */

void fz_check_bytes(fz_engine *e, int i)
{
    fz_buf *b = &e->buf[i];
    int rc = fz_read(e, b->h, 0, e->tmp, b->size);
    if (rc != SW_OK)
        fz_fail(e->w, e, "check: reading handle %d (%zu bytes): %s: %s", i,
                b->size, fz_err(rc), sw_last_error());
    const unsigned char *want = fz_bytes(e, b->alloc, b->off);
    if (b->size > 0 && memcmp(e->tmp, want, b->size) != 0) {
        size_t k = 0;
        while (e->tmp[k] == want[k])
            k++;
        size_t last = b->size;
        while (e->tmp[last - 1] == want[last - 1])
            last--;
        fz_alloc *al = &e->alloc[b->alloc];
        unsigned char got = e->tmp[k];
        /* Tell a read that raced the device's work from lost data: wait
         * for every queue of the device and read again. */
        const char *again = "";
        if (fz_sync_device(e, e->w->dev[al->devi]) == SW_OK &&
            fz_read(e, b->h, 0, e->tmp, b->size) == SW_OK)
            again = memcmp(e->tmp, want, b->size) == 0
                        ? "; read again after sw_device_synchronize, they "
                          "match (the first read raced queued work)"
                        : "; read again after sw_device_synchronize, they "
                          "still differ";
        /* The library's id of its base, as in a trace's events. */
        uint64_t id = 0;
        (void)sw_buffer_id(b->h, &id);
        fz_fail(e->w, e, "check: handle %d (allocation %d%s, window %zu+%zu"
                " of %zu, state %d, buffer id %llu) differs from the shadow "
                "in bytes [%zu, %zu): byte %zu is 0x%02x, expected 0x%02x%s",
                i, b->alloc, al->external ? ", external" : "", b->off,
                b->size, al->size, al->state, (unsigned long long)id, k,
                last, k, got, want[k], again);
    }
}

void fz_adopt_nans(fz_engine *e, int i, size_t off, size_t n, sw_dtype d)
{
    size_t ps = fz_float_part(d);
    if (ps == 0)
        return;
    size_t bytes = n * sw_dtype_size(d);
    fz_buf *b = &e->buf[i];
    unsigned char *want = fz_bytes(e, b->alloc, b->off + off);
    bool any = false;
    for (size_t k = 0; k < bytes && !any; k += ps)
        any = fz_part_is_nan(d, want + k);
    if (!any)
        return;
    int rc = fz_read(e, b->h, off, e->tmp, bytes);
    if (rc != SW_OK)
        fz_fail(e->w, e, "reading back NaN results: %s", fz_err(rc));
    for (size_t k = 0; k < bytes; k += ps) {
        unsigned char *w = want + k, *g = e->tmp + k;
        if (memcmp(w, g, ps) != 0 && fz_part_is_nan(d, w) &&
            fz_part_is_nan(d, g)) {
            memcpy(w, g, ps);
            atomic_fetch_add(&e->w->stats.nan_adopted, 1);
        }
    }
}

void fz_expect_resident(fz_engine *e, int i, const char *why)
{
    if (e->w->threaded)
        return;
    int st = fz_query_state(e, e->buf[i].alloc);
    if (st != SW_RESIDENT)
        fz_fail(e->w, e, "handle %d is not resident right after %s", i,
                why);
}

void fz_note_obtain(fz_engine *e, int devi)
{
    e->dm[devi].budget_enforced = true;
}

/* ------------------------------------------------------------------------
 * Accounting
 * ---------------------------------------------------------------------- */

void fz_engine_footprint(fz_engine *e, int devi, uint64_t *resident,
                         uint64_t *spilled, bool query_states)
{
    *resident = *spilled = 0;
    for (int a = 0; a < FZ_NALLOC; a++) {
        fz_alloc *al = &e->alloc[a];
        if (!al->live || al->external || al->shared >= 0 ||
            al->devi != devi)
            continue;
        int st = query_states ? fz_query_state(e, a) : al->state;
        if (st < 0)
            st = SW_RESIDENT; /* pinned or leased: resident */
        if (st == SW_SPILLED)
            *spilled += al->rounded;
        else
            *resident += al->rounded;
    }
}

static void monotone(fz_engine *e, int d, const sw_memory_info *o,
                     const sw_memory_info *m)
{
#define MONO(f)                                                               \
    if (m->f < o->f)                                                          \
        fz_fail(e->w, e, "%s." #f " went down: %" PRIu64 " -> %" PRIu64,     \
                e->w->spec[d], (uint64_t)o->f, (uint64_t)m->f);
    if (!e->dm[d].counters_reset) {
        MONO(allocs) MONO(frees) MONO(spills) MONO(restores)
        MONO(spilled_bytes_total) MONO(restored_bytes_total)
        MONO(clean_evictions)
        MONO(alloc_retries) MONO(ooms) MONO(gc_runs)
        if (m->spill_seconds < o->spill_seconds ||
            m->restore_seconds < o->restore_seconds)
            fz_fail(e->w, e, "%s: spill/restore seconds went down",
                    e->w->spec[d]);
    }
#undef MONO
    if (m->device_total != o->device_total)
        fz_fail(e->w, e, "%s.device_total changed: %" PRIu64 " -> %" PRIu64,
                e->w->spec[d], o->device_total, m->device_total);
}

/* The library's own account of every live base (sw_memory_snapshot)
 * against the model's allocations of d: one entry each, with the same
 * size, rounded size, state, kind, pins, leases, views and handles. */
static void check_snapshot(fz_engine *e, int d, const int *state)
{
    enum { CAP = FZ_NALLOC + 8 };
    sw_buffer_info info[CAP];
    size_t count = 0;
    int rc = sw_memory_snapshot(e->w->dev[d], info, CAP, &count);
    if (rc != SW_OK)
        fz_fail(e->w, e, "sw_memory_snapshot(%s): %s", e->w->spec[d],
                fz_err(rc));
    size_t want = 0;
    for (int a = 0; a < FZ_NALLOC; a++) {
        fz_alloc *al = &e->alloc[a];
        if (!al->live || al->devi != d)
            continue;
        want++;
        const sw_buffer_info *bi = NULL;
        for (size_t k = 0; k < count && k < CAP && bi == NULL; k++)
            if (info[k].id == al->id)
                bi = &info[k];
        if (bi == NULL)
            fz_fail(e->w, e, "allocation %d (id %llu) is not in the "
                    "snapshot of %s", a, (unsigned long long)al->id,
                    e->w->spec[d]);
        /* References to the base handle: the engine's, and those handed
         * to host tasks that may or may not have dropped them yet. */
        uint32_t refs = 0, task = 0;
        for (int i = 0; i < FZ_NBUF; i++) {
            fz_buf *b = &e->buf[i];
            if (b->live && b->alloc == a && !b->view) {
                refs += (uint32_t)b->refs;
                task += (uint32_t)b->task_refs;
            }
        }
        if (bi->size != al->size || bi->alloc_size != al->rounded ||
            (bi->external != 0) != al->external ||
            (state[a] >= 0 && (int)bi->state != state[a]) ||
            bi->pins != (uint32_t)al->pins ||
            bi->leases != (uint32_t)al->leases ||
            bi->views != (uint32_t)al->views || bi->handles < refs ||
            bi->handles > refs + task)
            fz_fail(e->w, e, "the snapshot of allocation %d says size %llu "
                    "(%llu held), %s, state %d, pins %u, leases %u, views "
                    "%u, handles %u; the model: %zu (%zu), %s, %d, %d, %d, "
                    "%d, %u (+%u in tasks)", a,
                    (unsigned long long)bi->size,
                    (unsigned long long)bi->alloc_size,
                    bi->external ? "external" : "owned", (int)bi->state,
                    bi->pins, bi->leases, bi->views, bi->handles, al->size,
                    al->rounded, al->external ? "external" : "owned",
                    state[a], al->pins, al->leases, al->views, refs, task);
    }
    if (count != want)
        fz_fail(e->w, e, "%s: the snapshot lists %zu live buffers, the model "
                "%zu", e->w->spec[d], count, want);
}

/* Live bases of d in the model: owned and wrapped (external) ones. */
static uint64_t live_count(fz_engine *e, int d)
{
    uint64_t n = 0;
    for (int a = 0; a < FZ_NALLOC; a++)
        n += e->alloc[a].live && e->alloc[a].devi == d &&
             e->alloc[a].shared < 0;
    return n;
}

static void check_device(fz_engine *e, int d, uint64_t went_out,
                         uint64_t came_in, sw_memory_info *out)
{
    fz_world *w = e->w;
    fz_devmodel *dm = &e->dm[d];
    sw_memory_info m;
    int rc = sw_memory_info_get(w->dev[d], &m);
    if (rc != SW_OK)
        fz_fail(w, e, "sw_memory_info_get(%s): %s", w->spec[d], fz_err(rc));
    uint64_t res, sp;
    fz_engine_footprint(e, d, &res, &sp, false);
    if (!w->threaded) {
        if (m.in_use != res || m.spilled != sp || m.frees != dm->frees) {
            /* A freed base whose ordering after other queues could not be
             * had is parked (still in in_use) until the device is
             * synchronized: give it that chance once. */
            if (m.in_use > res && m.frees < dm->frees &&
                sw_device_synchronize(w->dev[d]) == SW_OK &&
                sw_memory_info_get(w->dev[d], &m) == SW_OK &&
                m.in_use == res && m.frees == dm->frees)
                atomic_fetch_add(&w->stats.parked_resolved, 1);
        }
        if (m.in_use != res || m.spilled != sp)
            fz_fail(w, e, "%s: in_use %" PRIu64 " spilled %" PRIu64
                    "; the model says %" PRIu64 " and %" PRIu64,
                    w->spec[d], m.in_use, m.spilled, res, sp);
        if (m.allocs != dm->allocs || m.frees != dm->frees)
            fz_fail(w, e, "%s: allocs %" PRIu64 " frees %" PRIu64
                    "; the model counted %" PRIu64 " and %" PRIu64,
                    w->spec[d], m.allocs, m.frees, dm->allocs, dm->frees);
        if (m.gc_runs != dm->gc_runs)
            fz_fail(w, e, "%s: gc_runs %" PRIu64 ", the callbacks noted %"
                    PRIu64, w->spec[d], m.gc_runs, dm->gc_runs);
        if (m.budget != dm->budget)
            fz_fail(w, e, "%s: budget %" PRIu64 ", set to %" PRIu64,
                    w->spec[d], m.budget, dm->budget);
        if (m.budget != 0) {
            if (m.in_use + m.cached <= m.budget ||
                m.restores > dm->restores_at_budget)
                dm->budget_enforced = true;
            if (dm->budget_enforced && m.in_use + m.cached > m.budget)
                fz_fail(w, e, "%s: in_use %" PRIu64 " + cached %" PRIu64
                        " passes the budget %" PRIu64 " after it was "
                        "enforced", w->spec[d], m.in_use, m.cached,
                        m.budget);
        }
        if (w->no_spill[d] && (m.spilled != 0 || m.spills != 0))
            fz_fail(w, e, "%s never spills, yet spilled %" PRIu64
                    " spills %" PRIu64, w->spec[d], m.spilled, m.spills);
        if (m.live_buffers != live_count(e, d))
            fz_fail(w, e, "%s: live_buffers %" PRIu64 ", the model has %"
                    PRIu64, w->spec[d], m.live_buffers, live_count(e, d));
        if (dm->have_last && !dm->counters_reset &&
            m.spills - dm->last.spills < went_out)
            fz_fail(w, e, "%s: %" PRIu64 " buffers were spilled but spills "
                    "grew by %" PRIu64, w->spec[d], went_out,
                    m.spills - dm->last.spills);
        if (dm->have_last && !dm->counters_reset &&
            m.restores - dm->last.restores < came_in)
            fz_fail(w, e, "%s: %" PRIu64 " buffers were restored but "
                    "restores grew by %" PRIu64, w->spec[d], came_in,
                    m.restores - dm->last.restores);
    } else if (m.in_use + m.spilled < res + sp) {
        fz_fail(w, e, "%s: in_use %" PRIu64 " + spilled %" PRIu64
                " is less than this engine's own %" PRIu64 " + %" PRIu64,
                w->spec[d], m.in_use, m.spilled, res, sp);
    }
    if (m.peak < m.in_use)
        fz_fail(w, e, "%s: peak %" PRIu64 " < in_use %" PRIu64, w->spec[d],
                m.peak, m.in_use);
    /* Clean copies are of resident buffers, and their evictions are
     * spills that copied nothing. */
    if (m.host_copies > m.in_use)
        fz_fail(w, e, "%s: host_copies %" PRIu64 " > in_use %" PRIu64,
                w->spec[d], m.host_copies, m.in_use);
    if (m.spilled_disk > m.spilled)
        fz_fail(w, e, "%s: spilled_disk %" PRIu64 " > spilled %" PRIu64,
                w->spec[d], m.spilled_disk, m.spilled);
    if (m.clean_evictions > m.spills)
        fz_fail(w, e, "%s: clean_evictions %" PRIu64 " > spills %" PRIu64,
                w->spec[d], m.clean_evictions, m.spills);
    /* peak_reserved: the highest in_use + cached since open or a reset. */
    if (m.peak_reserved < m.in_use + m.cached)
        fz_fail(w, e, "%s: peak_reserved %" PRIu64 " < in_use + cached %"
                PRIu64, w->spec[d], m.peak_reserved, m.in_use + m.cached);
    /* Only idle blocks of the host pool count against its bound. */
    if (m.host_pool > m.host_pool_limit)
        fz_fail(w, e, "%s: host_pool %" PRIu64 " > its limit %" PRIu64,
                w->spec[d], m.host_pool, m.host_pool_limit);
    if (dm->have_last) {
        monotone(e, d, &dm->last, &m);
        if (!dm->peak_reset && !w->threaded && m.peak < dm->last.peak)
            fz_fail(w, e, "%s: peak went down without a reset: %" PRIu64
                    " -> %" PRIu64, w->spec[d], dm->last.peak, m.peak);
        if (!dm->peak_reset && !w->threaded &&
            m.peak_reserved < dm->last.peak_reserved)
            fz_fail(w, e, "%s: peak_reserved went down without a reset",
                    w->spec[d]);
        if (!w->threaded) { /* (the soak reports the device's own) */
            atomic_fetch_add(&w->stats.spills_seen,
                             m.spills - dm->last.spills);
            atomic_fetch_add(&w->stats.restores_seen,
                             m.restores - dm->last.restores);
        }
    }
    if (m.device_free_known && m.device_free > m.device_total)
        fz_fail(w, e, "%s: device_free %" PRIu64 " > device_total %" PRIu64,
                w->spec[d], m.device_free, m.device_total);
    uint64_t pk = atomic_load(&w->stats.peak);
    while (m.in_use > pk &&
           !atomic_compare_exchange_weak(&w->stats.peak, &pk, m.in_use))
        ;
    dm->last = m;
    dm->have_last = true;
    dm->peak_reset = false;
    dm->counters_reset = false;
    *out = m;
}

static void check_scopes(fz_engine *e, const sw_memory_info *m)
{
    fz_scope *order[FZ_NSCOPE];
    uint64_t peak[FZ_NSCOPE];
    int n = 0;
    for (int s = 0; s < FZ_NSCOPE; s++)
        if (e->scope[s].live)
            order[n++] = &e->scope[s];
    /* By begin order, oldest first. */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && order[j - 1]->seq > order[j]->seq; j--) {
            fz_scope *t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    /* Newest first: with other threads moving in_use between the calls,
     * an older scope asked later can only say more. */
    for (int i = n - 1; i >= 0; i--) {
        fz_scope *sc = order[i];
        uint64_t p = 0;
        int rc = sw_peak_scope_peak(sc->s, &p);
        if (rc != SW_OK)
            fz_fail(e->w, e, "sw_peak_scope_peak: %s", fz_err(rc));
        const sw_memory_info *dm = &m[sc->devi];
        if (dm->in_use > sc->min_peak)
            sc->min_peak = dm->in_use;
        if (p < sc->min_peak || p < sc->last_peak)
            fz_fail(e->w, e, "peak scope %d says %" PRIu64 ", but in_use "
                    "reached %" PRIu64 " in it and it said %" PRIu64
                    " before", (int)(sc - e->scope), p, sc->min_peak,
                    sc->last_peak);
        if (!e->w->threaded && !sc->reset_since && p > dm->peak)
            fz_fail(e->w, e, "peak scope %d says %" PRIu64 ", more than "
                    "the device's peak %" PRIu64 " (no reset since it "
                    "began)", (int)(sc - e->scope), p, dm->peak);
        sc->last_peak = p;
        peak[i] = p;
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (order[i]->devi == order[j]->devi && peak[i] < peak[j])
                fz_fail(e->w, e, "an older peak scope says %" PRIu64
                        ", a newer one %" PRIu64, peak[i], peak[j]);
}

/* ------------------------------------------------------------------------
 * After every step
 * ---------------------------------------------------------------------- */

static void check(fz_engine *e, bool bytes);

void fz_check_all(fz_engine *e)
{
    check(e, true);
    /* Every queue's work on every live buffer has been waited for by the
     * reads. */
    memset(e->lastq, 0, sizeof e->lastq);
    e->in_flight = false;
}

void fz_check_light(fz_engine *e)
{
    check(e, false);
    e->in_flight = true;
}

static void check(fz_engine *e, bool bytes)
{
    fz_world *w = e->w;
    atomic_fetch_add(&w->stats.checks, 1);
    fz_poll_tasks(e);
    fz_process_callbacks(e);
    int s1[FZ_NALLOC];
    uint64_t went_out[FZ_MAX_DEV] = {0}, came_in[FZ_MAX_DEV] = {0};
    for (int a = 0; a < FZ_NALLOC; a++) {
        fz_alloc *al = &e->alloc[a];
        s1[a] = al->live ? fz_query_state(e, a) : -1;
        if (!al->live || s1[a] < 0)
            continue;
        if (al->external && s1[a] != SW_RESIDENT)
            fz_fail(w, e, "wrapped allocation %d is not resident", a);
        if ((al->pins > 0 || al->leases > 0) && s1[a] != SW_RESIDENT)
            fz_fail(w, e, "allocation %d is spilled with %d pins and %d "
                    "leases", a, al->pins, al->leases);
    }
    /* A read orders itself after queued work on its own base only: work
     * on a queue through the other base of aliased memory (a wrap, or the
     * allocation it wraps) is the caller's to wait for before reading
     * (found by the soak: a wrap read while a queue still wrote the
     * allocation under it). */
    bool aliased = false;
    for (int i = 0; i < FZ_NBUF && bytes && !aliased; i++)
        aliased = e->buf[i].live && fz_aliased(e, e->buf[i].alloc);
    for (int d = 0; aliased && d < w->ndev; d++)
        if (fz_sync_device(e, w->dev[d]) != SW_OK)
            fz_fail(w, e, "sw_device_synchronize before reading aliased "
                    "memory failed");
    for (int i = 0; i < FZ_NBUF && bytes; i++)
        if (e->buf[i].live && (!e->buf[i].donated || !w->threaded))
            fz_check_bytes(e, i);
    for (int a = 0; a < FZ_NALLOC; a++) {
        fz_alloc *al = &e->alloc[a];
        if (!al->live || s1[a] < 0)
            continue;
        if (!w->threaded) {
            int s2 = fz_query_state(e, a);
            if (s2 != s1[a])
                fz_fail(w, e, "reading allocation %d moved it (%d -> %d)",
                        a, s1[a], s2);
            if (al->state == SW_RESIDENT && s2 == SW_SPILLED) {
                went_out[al->devi]++;
                if (!e->may_spill)
                    fz_fail(w, e, "allocation %d was spilled by a step "
                            "that obtained no device memory", a);
            }
            if (al->state == SW_SPILLED && s2 == SW_RESIDENT)
                came_in[al->devi]++;
        }
        /* Only the device brings a buffer back. */
        if (al->state == SW_SPILLED && s1[a] == SW_RESIDENT &&
            al->shared < 0 && !(e->dev_used & (UINT32_C(1) << a)))
            fz_fail(w, e, "allocation %d came back, but this step did not "
                    "use it on the device", a);
        al->state = s1[a];
    }
    sw_memory_info m[FZ_MAX_DEV];
    for (int d = 0; d < w->ndev; d++) {
        check_device(e, d, went_out[d], came_in[d], &m[d]);
        if (!w->threaded)
            check_snapshot(e, d, s1);
    }
    check_scopes(e, m);
}
