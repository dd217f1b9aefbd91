/*
 * ops_account.c -- budgets (raised, lowered below what is held, removed),
 * emptying the cache, peaks and nested peak scopes, synchronizing, and
 * reference-counted opens of a device; the host staging pool and the
 * host budget (the disk tier).
 */
#include "model.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static sw_memory_info info(fz_engine *e, int d)
{
    sw_memory_info m;
    int rc = sw_memory_info_get(e->w->dev[d], &m);
    if (rc != SW_OK)
        fz_fail(e->w, e, "sw_memory_info_get(%s): %s", e->w->spec[d],
                fz_err(rc));
    return m;
}

static bool op_budget(fz_engine *e, fz_src *s)
{
    /* What the callbacks did in this step's earlier call (a prefetch's
     * ladder, before a budget in the same step) happened under the old
     * budget: an allocation of theirs must not count as obtained under
     * the new one. */
    fz_process_callbacks(e);
    int d = fz_pick_dev(e, s);
    sw_memory_info m = info(e, d);
    uint64_t held = m.in_use + m.cached, b;
    uint8_t k = fz_u8(s);
    switch (k % 8) {
    case 0: b = 0; break;
    case 1: b = held + SW_ALLOC_GRANULARITY * fz_below(s, 64); break;
    case 2: b = held / 2; break; /* below what is held: enforced lazily */
    case 3: b = SW_ALLOC_GRANULARITY * (1 + fz_below(s, 16)); break;
    case 4: b = (uint64_t)FZ_MAX_BUF * (1 + fz_below(s, 8)); break;
    case 5: b = UINT64_MAX; break;
    case 6: b = 1 + fz_below(s, 4096); break; /* not a granule multiple */
    default: b = m.in_use + SW_ALLOC_GRANULARITY; break;
    }
    fz_note(e, "budget %s = %" PRIu64 " (in_use %" PRIu64 " cached %"
            PRIu64 ")", e->w->spec[d], b, m.in_use, m.cached);
    /* "A budget below what is already held takes effect at once": the
     * cache is trimmed and buffers spilled until it fits, or nothing more
     * can move. */
    e->may_spill = true;
    int rc = sw_set_memory_budget(e->w->dev[d], b);
    fz_result(e, "sw_set_memory_budget", rc, FZ_OK, 0, NULL);
    fz_devmodel *dm = &e->dm[d];
    dm->budget = b;
    if (!e->w->threaded) {
        m = info(e, d);
        dm->budget_enforced = b == 0 || m.in_use + m.cached <= b;
        dm->restores_at_budget = m.restores;
        /* When it does not fit, only what cannot move is left: the cache
         * is empty and every resident allocation is pinned or leased
         * (unless a fault made a spill fail: "the budget still stands"). */
        if (!dm->budget_enforced && !e->fault_armed) {
            uint64_t fixed = 0;
            for (int a = 0; a < FZ_NALLOC; a++) {
                fz_alloc *al = &e->alloc[a];
                if (al->live && al->devi == d && !al->external &&
                    (al->pins > 0 || al->leases > 0 ||
                     e->w->no_spill[d]))
                    fixed += al->rounded;
            }
            if (m.cached != 0 || m.in_use != fixed)
                fz_fail(e->w, e, "budget %" PRIu64 " set and not met: "
                        "in_use %" PRIu64 " cached %" PRIu64 ", but only %"
                        PRIu64 " is pinned or leased (or, on a device that "
                        "never spills, live)", b, m.in_use,
                        m.cached, fixed);
        }
    }
    uint64_t got = 1;
    rc = sw_get_memory_budget(e->w->dev[d], &got);
    if (rc != SW_OK || (!e->w->threaded && got != b))
        fz_fail(e->w, e, "sw_get_memory_budget: %s %" PRIu64 ", set %" PRIu64,
                fz_err(rc), got, b);
    return true;
}

static bool op_empty_cache(fz_engine *e, fz_src *s)
{
    int d = fz_pick_dev(e, s);
    fz_note(e, "empty_cache %s", e->w->spec[d]);
    int rc = sw_empty_cache(e->w->dev[d]);
    fz_result(e, "sw_empty_cache", rc, FZ_OK, 0, NULL);
    if (!e->w->threaded && info(e, d).cached != 0)
        fz_fail(e->w, e, "cached is not 0 after sw_empty_cache");
    return true;
}

static bool op_reset_peak(fz_engine *e, fz_src *s)
{
    int d = fz_pick_dev(e, s);
    fz_note(e, "reset_peak %s", e->w->spec[d]);
    int rc = sw_reset_peak(e->w->dev[d]);
    fz_result(e, "sw_reset_peak", rc, FZ_OK, 0, NULL);
    e->dm[d].peak_reset = true;
    for (int k = 0; k < FZ_NSCOPE; k++)
        if (e->scope[k].live && e->scope[k].devi == d)
            e->scope[k].reset_since = true;
    if (!e->w->threaded) {
        sw_memory_info m = info(e, d);
        if (m.peak != m.in_use || m.peak_reserved != m.in_use + m.cached)
            fz_fail(e->w, e, "peak %" PRIu64 ", peak_reserved %" PRIu64
                    " after sw_reset_peak (in_use %" PRIu64 ", cached %"
                    PRIu64 ")", m.peak, m.peak_reserved, m.in_use,
                    m.cached);
    }
    return true;
}

/* Counters to zero (the peaks and what is held stay).  One engine only:
 * another's counts would go down under its feet. */
static bool op_reset_counters(fz_engine *e, fz_src *s)
{
    if (e->w->threaded)
        return false;
    int d = fz_pick_dev(e, s);
    fz_note(e, "reset_counters %s", e->w->spec[d]);
    sw_memory_info before = info(e, d);
    int rc = sw_reset_counters(e->w->dev[d]);
    fz_result(e, "sw_reset_counters", rc, FZ_OK, 0, NULL);
    sw_memory_info m = info(e, d);
    if (m.allocs || m.frees || m.spills || m.restores ||
        m.spilled_bytes_total || m.restored_bytes_total || m.alloc_retries ||
        m.ooms || m.gc_runs || m.spill_seconds != 0 ||
        m.restore_seconds != 0 || m.in_use != before.in_use ||
        m.cached != before.cached || m.spilled != before.spilled ||
        m.peak != before.peak || m.peak_reserved != before.peak_reserved)
        fz_fail(e->w, e, "after sw_reset_counters: allocs %" PRIu64
                " frees %" PRIu64 " ooms %" PRIu64 "; in_use, cached, "
                "spilled and the peaks must stay", m.allocs, m.frees,
                m.ooms);
    fz_devmodel *dm = &e->dm[d];
    dm->allocs = dm->frees = dm->gc_runs = 0;
    dm->restores_at_budget = 0;
    dm->counters_reset = true;
    return true;
}

/* The host staging pool: a bound, and giving it all back. */
static bool op_host_pool(fz_engine *e, fz_src *s)
{
    int d = fz_pick_dev(e, s);
    uint8_t how = fz_u8(s);
    if (how & 2) {
        /* A host budget: past it spilled copies go to the spill file, and
         * every byte must come back (the next full check reads them). */
        static const uint64_t budgets[] = {0, 1, 4096, 1u << 16, 1u << 20};
        uint64_t b = budgets[fz_below(s, 5)];
        fz_note(e, "host_budget %s = %" PRIu64, e->w->spec[d], b);
        e->may_spill = true;
        int rc = sw_set_host_budget(e->w->dev[d], b);
        fz_result(e, "sw_set_host_budget", rc, FZ_OK, 0, NULL);
        if (!e->w->threaded && info(e, d).host_budget != b)
            fz_fail(e->w, e, "host_budget is not %" PRIu64 " after setting "
                    "it", b);
        return true;
    }
    if (how & 1) {
        fz_note(e, "release_host_pool %s", e->w->spec[d]);
        int rc = sw_release_host_pool(e->w->dev[d]);
        fz_result(e, "sw_release_host_pool", rc, FZ_OK, 0, NULL);
        if (!e->w->threaded && info(e, d).host_pool != 0)
            fz_fail(e->w, e, "host_pool is not 0 after "
                    "sw_release_host_pool");
        return true;
    }
    static const uint64_t limits[] = {0, 4096, 1u << 16, 1u << 20, 1u << 30};
    uint64_t lim = limits[fz_below(s, 5)];
    fz_note(e, "host_pool_limit %s = %" PRIu64, e->w->spec[d], lim);
    int rc = sw_set_host_pool_limit(e->w->dev[d], lim);
    fz_result(e, "sw_set_host_pool_limit", rc, FZ_OK, 0, NULL);
    sw_memory_info m = info(e, d);
    if (!e->w->threaded && (m.host_pool_limit != lim || m.host_pool > lim))
        fz_fail(e->w, e, "host pool %" PRIu64 " of limit %" PRIu64
                " after setting it to %" PRIu64, m.host_pool,
                m.host_pool_limit, lim);
    return true;
}

static bool op_scope_begin(fz_engine *e, fz_src *s)
{
    int k = -1;
    for (int j = 0; j < FZ_NSCOPE && k < 0; j++)
        if (!e->scope[j].live)
            k = j;
    if (k < 0)
        return false;
    int d = fz_pick_dev(e, s);
    fz_note(e, "peak_scope_begin on %s", e->w->spec[d]);
    uint64_t in_use = info(e, d).in_use;
    sw_peak_scope *sc = (sw_peak_scope *)(uintptr_t)0xA5A5;
    int rc = sw_peak_scope_begin(e->w->dev[d], &sc);
    if (!fz_result(e, "sw_peak_scope_begin", rc, FZ_OK, 0, NULL)) {
        if (sc != NULL)
            fz_fail(e->w, e, "a failed sw_peak_scope_begin left *out set");
        return true;
    }
    fz_scope *f = &e->scope[k];
    memset(f, 0, sizeof *f);
    f->live = true;
    f->s = sc;
    f->devi = d;
    f->begin_in_use = in_use;
    f->min_peak = e->w->threaded ? 0 : in_use;
    f->seq = ++e->scope_seq;
    uint64_t p = 0;
    rc = sw_peak_scope_peak(sc, &p);
    /* "The scope's peak starts at in_use when it begins." */
    if (rc != SW_OK || (!e->w->threaded && p != in_use))
        fz_fail(e->w, e, "a new scope's peak: %s %" PRIu64 ", in_use %"
                PRIu64, fz_err(rc), p, in_use);
    f->last_peak = p;
    return true;
}

static int live_scope(fz_engine *e, fz_src *s)
{
    int start = (int)fz_below(s, FZ_NSCOPE);
    for (int j = 0; j < FZ_NSCOPE; j++)
        if (e->scope[(start + j) % FZ_NSCOPE].live)
            return (start + j) % FZ_NSCOPE;
    return -1;
}

static bool op_scope_peak(fz_engine *e, fz_src *s)
{
    int k = live_scope(e, s);
    if (k < 0)
        return false;
    fz_note(e, "peak_scope_peak %d", k);
    uint64_t p = 0;
    int rc = sw_peak_scope_peak(e->scope[k].s, &p);
    fz_result(e, "sw_peak_scope_peak", rc, FZ_OK, 0, NULL);
    return true; /* the check looks at its value */
}

static bool op_scope_end(fz_engine *e, fz_src *s)
{
    int k = live_scope(e, s);
    if (k < 0)
        return false;
    fz_scope *f = &e->scope[k];
    fz_note(e, "peak_scope_end %d", k);
    uint64_t in_use = info(e, f->devi).in_use;
    uint64_t p = 0;
    int rc = sw_peak_scope_end(f->s, fz_u8(s) < 32 ? NULL : &p);
    fz_result(e, "sw_peak_scope_end", rc, FZ_OK, 0, NULL);
    f->live = false;
    fz_remember_dead(e, 4, f->s);
    if (p != 0 && !e->w->threaded &&
        (p < f->last_peak || p < f->min_peak || p < in_use))
        fz_fail(e->w, e, "an ended scope says %" PRIu64 "; it said %" PRIu64
                " and in_use is %" PRIu64, p, f->last_peak, in_use);
    /* Its peak goes to the scopes that began before it. */
    for (int j = 0; j < FZ_NSCOPE; j++) {
        fz_scope *o = &e->scope[j];
        if (!o->live || o->devi != f->devi || o->seq > f->seq)
            continue;
        uint64_t q = 0;
        rc = sw_peak_scope_peak(o->s, &q);
        if (rc != SW_OK || q < p)
            fz_fail(e->w, e, "an outer scope says %" PRIu64 " after an inner"
                    " one ended at %" PRIu64, q, p);
        if (p > o->min_peak)
            o->min_peak = p;
    }
    return true;
}

static bool op_sync(fz_engine *e, fz_src *s)
{
    int d = fz_pick_dev(e, s);
    fz_note(e, "synchronize %s", e->w->spec[d]);
    int rc = sw_device_synchronize(e->w->dev[d]);
    fz_result(e, "sw_device_synchronize", rc, FZ_OK, 0, NULL);
    return true;
}

static bool op_open_close(fz_engine *e, fz_src *s)
{
    int d = fz_pick_dev(e, s);
    fz_note(e, "open + close %s", e->w->spec[d]);
    sw_device *dev = NULL;
    int rc = sw_device_open(e->w->spec[d], &dev);
    if (!fz_result(e, "sw_device_open", rc, FZ_OK, 0, NULL))
        return true;
    if (dev != e->w->dev[d])
        fz_fail(e->w, e, "opening %s again gave another handle",
                e->w->spec[d]);
    rc = sw_device_close(dev);
    fz_result(e, "sw_device_close (a second reference)", rc, FZ_OK, 0, NULL);
    const char *name = sw_device_name(dev);
    if (strcmp(name, e->w->spec[d]) != 0)
        fz_fail(e->w, e, "sw_device_name: %s", name);
    return true;
}

static bool op_budget_get(fz_engine *e, fz_src *s)
{
    int d = fz_pick_dev(e, s);
    fz_note(e, "get budget and memory info of %s", e->w->spec[d]);
    uint64_t b = 1;
    int rc = sw_get_memory_budget(e->w->dev[d], &b);
    if (rc != SW_OK || (!e->w->threaded && b != e->dm[d].budget))
        fz_fail(e->w, e, "sw_get_memory_budget: %s %" PRIu64, fz_err(rc), b);
    return true;
}

/* The memory history while everything else runs: started (small rings,
 * so that they wrap), stopped, read back and dumped, in any order.
 * Whether it was ever started on a device (which outlives inputs) is what
 * sw_trace_read says: a started ring holds its start event at least. */
static bool op_trace(fz_engine *e, fz_src *s)
{
    int d = fz_pick_dev(e, s);
    sw_device *dev = e->w->dev[d];
    static sw_trace_event ev[64]; /* read back only with one engine */
    sw_trace_event *out = e->w->threaded ? NULL : ev;
    size_t count = 0;
    uint64_t dropped = 0;
    int rc = sw_trace_read(dev, out, out ? 64 : 0, &count, &dropped);
    fz_result(e, "sw_trace_read", rc, FZ_OK, 0, NULL);
    /* Threaded: another engine may start it at any time. */
    bool started = count + dropped > 0 || e->w->threaded;
    for (size_t k = 0; out != NULL && k < count && k < 64; k++) {
        if (ev[k].seq != dropped + k || ev[k].kind >= SW_TRACE_KIND_COUNT ||
            sw_trace_kind_name((sw_trace_kind)ev[k].kind) == NULL ||
            (k > 0 && ev[k].time_ns < ev[k - 1].time_ns))
            fz_fail(e->w, e, "sw_trace_read(%s): event %zu of %zu (dropped "
                    "%" PRIu64 ") has seq %" PRIu64 " kind %u", e->w->spec[d],
                    k, count, dropped, ev[k].seq, ev[k].kind);
    }
    switch (fz_u8(s) % 4) {
    case 0: {
        static const size_t caps[] = {0, 1, 16, 256};
        sw_trace_options o = {.capacity = caps[fz_below(s, 4)]};
        fz_note(e, "trace_start %s capacity %zu", e->w->spec[d], o.capacity);
        rc = sw_trace_start(dev, &o);
        fz_result(e, "sw_trace_start", rc, FZ_OK, 0, NULL);
        break;
    }
    case 1:
        fz_note(e, "trace_stop %s", e->w->spec[d]);
        rc = sw_trace_stop(dev);
        if (!started)
            fz_result(e, "sw_trace_stop", rc, FZ_ERR, SW_ERR_INVALID_ARG,
                      NULL);
        else if (!(e->w->threaded && rc == SW_ERR_INVALID_ARG))
            fz_result(e, "sw_trace_stop", rc, FZ_OK, 0, NULL);
        break;
    default: {
        static const char *const formats[] = {"chrome", "snapshot", "bogus"};
        const char *f = formats[fz_below(s, 3)];
        const char *dir = getenv("TMPDIR");
        char path[256];
        snprintf(path, sizeof path, "%s/spillway-fuzz-trace-%d-%d.json",
                 dir && *dir ? dir : "/tmp", (int)getpid(), e->index);
        fz_note(e, "trace_dump %s as %s", e->w->spec[d], f);
        rc = sw_trace_dump(dev, path, f);
        if (f[0] == 'b' || !started) {
            fz_result(e, "sw_trace_dump", rc, FZ_ERR, SW_ERR_INVALID_ARG,
                      NULL);
        } else if (!(e->w->threaded && rc == SW_ERR_INVALID_ARG) &&
                   fz_result(e, "sw_trace_dump", rc, FZ_OK, 0, NULL) &&
                   access(path, R_OK) != 0) {
            fz_fail(e->w, e, "sw_trace_dump(%s) succeeded and wrote no %s",
                    e->w->spec[d], path);
        }
        unlink(path);
        break;
    }
    }
    return true;
}

bool fz_op_account(fz_engine *e, fz_src *s, unsigned k)
{
    switch (k) {
    case 0: return op_budget(e, s);
    case 1: return op_empty_cache(e, s);
    case 2: return op_reset_peak(e, s);
    case 3: return op_scope_begin(e, s);
    case 4: return op_scope_peak(e, s);
    case 5: return op_scope_end(e, s);
    case 6: return op_sync(e, s);
    case 8:
        e->burst_left = 2 + (int)fz_below(s, 8);
        fz_note(e, "burst of %d steps", e->burst_left);
        return false;
    case 9: return op_reset_counters(e, s);
    case 10: return op_host_pool(e, s);
    case 11: return op_trace(e, s);
    default:
        return fz_u8(s) < 128 ? op_open_close(e, s) : op_budget_get(e, s);
    }
}
