/*
 * ops_buffer.c -- buffers: allocation, free, retain, views, host reads and
 * writes at random offsets, device copies, pattern fills, accessors; and
 * the sizes and bytes the fuzzer draws.
 */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * What the ops draw
 * ---------------------------------------------------------------------- */

size_t fz_draw_size(fz_src *s)
{
    static const size_t small[] = {0,   1,   3,    4,    8,    12,   16,
                                   24,  64,  100,  511,  512,  513,  1000,
                                   1024, 4096};
    static const size_t big[] = {4100, 8192, 16384, 65536, 131072, 200000,
                                 FZ_MAX_BUF};
    uint8_t k = fz_u8(s);
    if (k < 200)
        return small[k % 16];
    if (k < 240)
        return big[k % 7];
    return 1 + fz_below(s, 70000);
}

/* Values worth having in float buffers: zeros of both signs, infinities,
 * NaNs with payloads, subnormals, extremes, small integers. */
static double special(uint64_t r)
{
    switch (r % 12) {
    case 0: return 0.0;
    case 1: return -0.0;
    case 2: return INFINITY;
    case 3: return -INFINITY;
    case 4: return NAN;
    case 5: return 1e-310;    /* float64 subnormal */
    case 6: return 1.4e-45;   /* float32's smallest subnormal */
    case 7: return 3.4e38;
    case 8: return 1.0 / 3.0;
    case 9: return -1e-40;
    case 10: return 16777217.0; /* not a float32 */
    default: return (double)(int)(r % 201) - 100.0;
    }
}

void fz_draw_bytes(fz_src *s, unsigned char *dst, size_t n, sw_dtype hint)
{
    uint8_t kind = fz_u8(s) % 7;
    uint64_t r = fz_u32(s) | UINT64_C(1) << 40;
    size_t k = 0;
    switch (kind) {
    case 0: /* random bits */
        for (; k + 8 <= n; k += 8) {
            uint64_t v = fz_splitmix(&r);
            memcpy(dst + k, &v, 8);
        }
        break;
    case 1: /* one byte */
        memset(dst, (int)(r & 0xff), n);
        return;
    case 2: /* small int32 */
        for (; k + 4 <= n; k += 4) {
            int32_t v = (int32_t)(fz_splitmix(&r) % 201) - 100;
            memcpy(dst + k, &v, 4);
        }
        break;
    case 3: /* small integers as float32 */
        for (; k + 4 <= n; k += 4) {
            float v = (float)((int)(fz_splitmix(&r) % 201) - 100);
            memcpy(dst + k, &v, 4);
        }
        break;
    case 4: /* small integers as float64 */
        for (; k + 8 <= n; k += 8) {
            double v = (double)((int)(fz_splitmix(&r) % 201) - 100);
            memcpy(dst + k, &v, 8);
        }
        break;
    default: /* specials, in the hinted width */
        if (hint == SW_FLOAT64 || hint == SW_INT64 || kind == 6) {
            for (; k + 8 <= n; k += 8) {
                double v = special(fz_splitmix(&r));
                memcpy(dst + k, &v, 8);
            }
        } else {
            for (; k + 4 <= n; k += 4) {
                float v = (float)special(fz_splitmix(&r));
                memcpy(dst + k, &v, 4);
            }
        }
        break;
    }
    for (; k < n; k++)
        dst[k] = (unsigned char)fz_splitmix(&r);
}

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

/* Whether every allocation behind these handles is resident now (as of
 * the last check: nothing has moved since in this step). */
static bool all_resident(fz_engine *e, const int *slots, int n)
{
    for (int k = 0; k < n; k++) {
        size_t ro;
        int r = fz_root(e, e->buf[slots[k]].alloc, 0, &ro);
        if (e->alloc[e->buf[slots[k]].alloc].state != SW_RESIDENT ||
            e->alloc[r].state != SW_RESIDENT)
            return false;
    }
    return true;
}

fz_expect fz_expect_for(fz_engine *e, const int *slots, int n)
{
    /* The step uses these on the device: it may bring them back, and
     * making room for them may spill others. */
    for (int k = 0; k < n; k++) {
        size_t ro;
        int a = e->buf[slots[k]].alloc;
        e->dev_used |= UINT32_C(1) << a;
        e->dev_used |= UINT32_C(1) << fz_root(e, a, 0, &ro);
    }
    bool resident = all_resident(e, slots, n);
    if (!resident)
        e->may_spill = true;
    /* Spilled operands are restored, which may fail for want of memory;
     * in the threaded variant another engine may spill ours at any
     * time. */
    return resident && !e->w->threaded ? FZ_OK : FZ_OK_OR_RES;
}

static int state_of_slot(fz_engine *e, int i)
{
    return e->w->threaded ? -1 : fz_query_state(e, e->buf[i].alloc);
}

/* ------------------------------------------------------------------------
 * Ops
 * ---------------------------------------------------------------------- */

/* Whether an allocation of size bytes on d must succeed (one engine, no
 * fault): "it fails with SW_ERR_OOM only when what cannot move (pinned,
 * exposed, external buffers) leaves no room".  What cannot move is the
 * pinned and leased allocations (every live one on a device that never
 * spills); everything else can be spilled and the cache trimmed.  The device itself must be far from full too (queues
 * reserve memory on the sim, and the arena fragments), so this is only
 * asserted when the budget (or, without one, what cannot move) is at
 * most half of it after room for two queues. */
static bool must_fit(fz_engine *e, int d, size_t size)
{
    uint64_t rounded = (size + SW_ALLOC_GRANULARITY - 1) /
                       SW_ALLOC_GRANULARITY * SW_ALLOC_GRANULARITY;
    uint64_t fixed = 0;
    for (int a = 0; a < FZ_NALLOC; a++) {
        fz_alloc *al = &e->alloc[a];
        if (al->live && !al->external && al->shared < 0 && al->devi == d &&
            (al->pins > 0 || al->leases > 0 || e->w->no_spill[d]))
            fixed += al->rounded;
    }
    uint64_t budget = e->dm[d].budget;
    uint64_t total = e->dm[d].last.device_total;
    uint64_t reserve = 2u * SW_SIM_QUEUE_RESERVE + (1u << 20);
    if (total == 0 || fixed + rounded > (budget ? budget : UINT64_MAX))
        return false;
    uint64_t held = budget ? budget : fixed + rounded;
    return held <= UINT64_MAX / 4 && held + rounded + reserve <= total / 2;
}

static bool op_alloc(fz_engine *e, fz_src *s)
{
    int d = fz_pick_dev(e, s);
    size_t size = fz_draw_size(s);
    if (fz_free_buf_slot(e) < 0 || fz_free_alloc_slot(e) < 0)
        return false;
    char tag[80];
    uint8_t t = fz_u8(s);
    const char *tagp = tag;
    if (t < 16)
        tagp = NULL;
    else if (t < 32)
        snprintf(tag, sizeof tag, "%s", "a-tag-longer-than-forty-seven-"
                 "characters-which-is-truncated");
    else
        snprintf(tag, sizeof tag, "e%d-%llu", e->index,
                 (unsigned long long)++e->tag_counter);
    fz_note(e, "alloc %zu on %s tag %s", size, e->w->spec[d],
            tagp ? tagp : "(null)");
    sw_buffer *h = (sw_buffer *)(uintptr_t)0xA5A5;
    e->may_spill = size > 0;
    int rc = sw_buffer_alloc(e->w->dev[d], size, tagp, &h);
    if (!fz_result(e, "sw_buffer_alloc", rc,
                   size > 0 || e->w->threaded ? FZ_OK_OR_RES : FZ_OK, 0,
                   NULL)) {
        if (h != NULL)
            fz_fail(e->w, e, "a failed sw_buffer_alloc left *out set");
        if (rc == SW_ERR_OOM && !e->fault_armed && !e->w->threaded &&
            must_fit(e, d, size))
            fz_fail(e->w, e, "sw_buffer_alloc(%zu) ran out of memory, but "
                    "what cannot move leaves room for it (budget %llu)",
                    size, (unsigned long long)e->dm[d].budget);
        return true;
    }
    if (e->dm[d].counters_known)
        e->dm[d].allocs++;
    if (size > 0)
        fz_note_obtain(e, d);
    int a = fz_new_alloc(e, d, size, false);
    int i = fz_new_buf(e, h, a, 0, size, false, tagp);
    fz_note_more(e, " -> handle %d, allocation %d", i, a);
    /* Accessors agree with the model. */
    size_t sz = 1;
    sw_device *dev = NULL;
    char got[64];
    if (sw_buffer_size(h, &sz) != SW_OK || sz != size ||
        sw_buffer_device(h, &dev) != SW_OK || dev != e->w->dev[d] ||
        sw_buffer_tag(h, got, sizeof got) != SW_OK ||
        strcmp(got, e->buf[i].tag) != 0)
        fz_fail(e->w, e, "a new buffer's size/device/tag: %zu '%s' (want "
                "%zu '%s')", sz, got, size, e->buf[i].tag);
    /* New memory cleared (sw_set_clear_new for this input): it reads as
     * zeros, whatever the block held before and whichever queue used it
     * last. */
    if (size > 0 && e->w->clear_new[d]) {
        unsigned char *z = malloc(size);
        if (z == NULL)
            fz_fail(e->w, e, "no host memory to check a new buffer");
        if (fz_read(e, h, 0, z, size) == SW_OK) {
            size_t k = 0;
            while (k < size && z[k] == 0)
                k++;
            if (k < size)
                fz_fail(e->w, e, "new buffer %d (%zu bytes) on %s with "
                        "clear_new: byte %zu is %u, not 0", i, size,
                        e->w->spec[d], k, z[k]);
            atomic_fetch_add(&e->w->stats.cleared, 1);
        }
        free(z);
    }
    /* New memory holds anything: write it all, so that a late write by
     * earlier work on recycled memory would show. */
    if (size > 0) {
        fz_draw_bytes(s, e->alloc[a].shadow, size, (sw_dtype)(size % 4));
        rc = sw_buffer_write(h, 0, e->alloc[a].shadow, size);
        if (!fz_result(e, "sw_buffer_write (new buffer)", rc,
                       e->w->threaded ? FZ_OK_OR_RES : FZ_OK, 0, NULL)) {
            /* Under a fault: whatever it holds is what it holds. */
            if (fz_read(e, h, 0, e->alloc[a].shadow, size) != SW_OK)
                fz_fail(e->w, e, "reading a new buffer back");
        }
    }
    return true;
}

static bool op_free(fz_engine *e, fz_src *s)
{
    int start = (int)fz_below(s, FZ_NBUF);
    int i = -1;
    if (e->prefer_buf1 > 0) /* its slot first (a compound step) */
        start = e->prefer_buf1 - 1;
    e->prefer_buf1 = 0;
    for (int k = 0; k < FZ_NBUF && i < 0; k++) {
        int j = (start + k) % FZ_NBUF;
        fz_buf *b = &e->buf[j];
        if (b->live && !b->donated && (b->launch_uses == 0 || b->refs > 1))
            i = j;
    }
    if (i < 0)
        return false;
    fz_wait_tasks_of_buf(e, i);
    fz_buf *b = &e->buf[i];
    if (!b->live || (b->launch_uses > 0 && b->refs <= 1))
        return true; /* a task dropped it */
    fz_note(e, "free handle %d (refs %d, %s, allocation %d)", i, b->refs,
            b->view ? "view" : "base", b->alloc);
    int rc = sw_buffer_free(b->h);
    fz_result(e, "sw_buffer_free", rc, FZ_OK, 0, NULL);
    fz_model_free(e, i);
    return true;
}

static bool op_retain(fz_engine *e, fz_src *s)
{
    int i = fz_pick_buf(e, s, false);
    if (i < 0 || e->buf[i].refs >= 4)
        return false;
    fz_note(e, "retain handle %d", i);
    int rc = sw_buffer_retain(e->buf[i].h);
    fz_result(e, "sw_buffer_retain", rc, FZ_OK, 0, NULL);
    e->buf[i].refs++;
    return true;
}

static bool op_view(fz_engine *e, fz_src *s)
{
    int i = fz_pick_buf(e, s, false);
    if (i < 0 || fz_free_buf_slot(e) < 0)
        return false;
    fz_buf *b = &e->buf[i];
    size_t off = fz_below(s, b->size + 1);
    size_t len = fz_below(s, b->size - off + 1);
    if (fz_u8(s) < 64) /* aligned views are the useful ones for kernels */
        off &= ~(size_t)7, len = (b->size - off) & ~(size_t)7;
    fz_note(e, "view of handle %d at %zu+%zu", i, off, len);
    sw_buffer *h = (sw_buffer *)(uintptr_t)0xA5A5;
    int rc = sw_buffer_view(b->h, off, len, &h);
    if (!fz_result(e, "sw_buffer_view", rc, FZ_OK, 0, NULL)) {
        if (h != NULL)
            fz_fail(e->w, e, "a failed sw_buffer_view left *out set");
        return true;
    }
    int v = fz_new_buf(e, h, b->alloc, b->off + off, len, true, b->tag);
    fz_note_more(e, " -> handle %d", v);
    size_t sz = 1;
    if (sw_buffer_size(h, &sz) != SW_OK || sz != len)
        fz_fail(e->w, e, "a view's size is %zu, not %zu", sz, len);
    (void)v;
    return true;
}

static bool op_write(fz_engine *e, fz_src *s)
{
    int i = fz_pick_buf(e, s, true);
    if (i < 0)
        return false;
    fz_buf *b = &e->buf[i];
    size_t off = fz_below(s, b->size + 1);
    size_t n = fz_below(s, b->size - off + 1);
    fz_draw_bytes(s, e->tmp, n, (sw_dtype)fz_below(s, 4));
    int before = state_of_slot(e, i);
    fz_note(e, "write handle %d [%zu, +%zu) (state %d)", i, off, n, before);
    /* The core orders a host transfer after every queue's work on the
     * same base, not on another base over the same memory (a wrap and the
     * allocation under it): that is the caller's.  (Missing, a queue's
     * axpy on an allocation overwrote a host write through a wrap made
     * over it -- found by the fuzzer.) */
    fz_order_before(e, e->alloc[b->alloc].devi, -1, &i, 1);
    int rc = sw_buffer_write(b->h, off, e->tmp, n);
    if (!fz_result(e, "sw_buffer_write", rc, FZ_OK, 0, NULL))
        return true;
    memcpy(fz_bytes(e, b->alloc, b->off + off), e->tmp, n);
    if (n > 0) /* (nothing done: nothing ordered) */
        fz_order_after(e, e->alloc[b->alloc].devi, -1, &i, 1);
    if (before >= 0 && state_of_slot(e, i) != before &&
        e->bg_prefetch_alloc1 != b->alloc + 1)
        fz_fail(e->w, e, "a host write moved the buffer (state %d -> %d)",
                before, state_of_slot(e, i));
    return true;
}

static bool op_read(fz_engine *e, fz_src *s)
{
    int i = fz_pick_buf(e, s, false);
    if (i < 0)
        return false;
    fz_buf *b = &e->buf[i];
    size_t off = fz_below(s, b->size + 1);
    size_t n = fz_below(s, b->size - off + 1);
    int before = state_of_slot(e, i);
    fz_note(e, "read handle %d [%zu, +%zu) (state %d)", i, off, n, before);
    fz_order_before(e, e->alloc[b->alloc].devi, -1, &i, 1); /* (as a write) */
    int rc = sw_buffer_read(b->h, off, e->tmp, n);
    if (!fz_result(e, "sw_buffer_read", rc, FZ_OK, 0, NULL))
        return true;
    if (n > 0 && memcmp(e->tmp, fz_bytes(e, b->alloc, b->off + off), n))
        fz_fail(e->w, e, "a read of handle %d [%zu, +%zu) differs from "
                "the shadow", i, off, n);
    if (before >= 0 && state_of_slot(e, i) != before &&
        e->bg_prefetch_alloc1 != b->alloc + 1)
        fz_fail(e->w, e, "a host read moved the buffer (state %d -> %d)",
                before, state_of_slot(e, i));
    return true;
}

static bool op_copy(fz_engine *e, fz_src *s)
{
    int di = fz_pick_buf(e, s, true);
    if (di < 0)
        return false;
    fz_buf *db = &e->buf[di];
    int devi = e->alloc[db->alloc].devi;
    int si = fz_pick_buf_dev(e, s, devi, false);
    if (si < 0)
        return false;
    fz_buf *sb = &e->buf[si];
    size_t doff = fz_below(s, db->size + 1);
    size_t soff = fz_below(s, sb->size + 1);
    size_t max = db->size - doff < sb->size - soff ? db->size - doff
                                                   : sb->size - soff;
    size_t n = fz_below(s, max + 1);
    int q = fz_u8(s) < 96 ? fz_pick_queue(e, s, devi) : -1;
    bool overlap = fz_overlap(e, db->alloc, db->off + doff, n, sb->alloc,
                              sb->off + soff, n);
    if (overlap && db->alloc != sb->alloc)
        return false; /* aliasing through a wrap: undefined, not ours */
    int slots[2] = {di, si};
    fz_expect ex = overlap ? FZ_ERR : fz_expect_for(e, slots, 2);
    fz_snapshot snap;
    if (overlap)
        fz_snapshot_take(e, &snap);
    fz_note(e, "copy %zu bytes handle %d+%zu <- handle %d+%zu%s%s", n, di,
            doff, si, soff, q >= 0 ? " on a queue" : "",
            overlap ? " (overlapping)" : "");
    if (!overlap)
        fz_order_before(e, devi, q, slots, 2);
    int rc = q >= 0 ? sw_buffer_copy_q(e->queue[devi][q].q, db->h, doff,
                                       sb->h, soff, n)
                    : sw_buffer_copy(db->h, doff, sb->h, soff, n);
    fz_process_callbacks(e); /* a restore may have run them */
    if (!fz_result(e, "sw_buffer_copy", rc, ex, SW_ERR_INVALID_ARG,
                   overlap ? &snap : NULL))
        return true;
    /* A copy of nothing queues nothing and orders nothing: another
     * queue's work on these buffers is still in flight. */
    if (n > 0)
        fz_order_after(e, devi, q, slots, 2);
    fz_queue_done(e, devi, q, slots, 2);
    memmove(fz_bytes(e, db->alloc, db->off + doff),
            fz_bytes(e, sb->alloc, sb->off + soff), n);
    if (n > 0) {
        fz_expect_resident(e, di, "a copy");
        fz_expect_resident(e, si, "a copy");
    }
    return true;
}

static bool op_fill(fz_engine *e, fz_src *s)
{
    int i = fz_pick_buf(e, s, true);
    if (i < 0)
        return false;
    fz_buf *b = &e->buf[i];
    static const size_t psizes[] = {1, 2, 4, 8};
    size_t ps = psizes[fz_below(s, 4)];
    size_t off = fz_below(s, b->size + 1);
    size_t n = fz_below(s, (b->size - off) / ps + 1) * ps;
    unsigned char pat[8];
    for (int k = 0; k < 8; k++)
        pat[k] = fz_u8(s);
    int slots[1] = {i};
    fz_note(e, "fill handle %d [%zu, +%zu) with a %zu-byte pattern", i, off,
            n, ps);
    fz_order_before(e, e->alloc[b->alloc].devi, -1, slots, 1);
    int rc = sw_buffer_fill(b->h, off, n, pat, ps);
    fz_process_callbacks(e); /* a restore may have run them */
    if (!fz_result(e, "sw_buffer_fill", rc, fz_expect_for(e, slots, 1), 0,
                   NULL))
        return true;
    unsigned char *dst = fz_bytes(e, b->alloc, b->off + off);
    for (size_t k = 0; k < n; k++)
        dst[k] = pat[k % ps];
    if (n > 0)
        fz_order_after(e, e->alloc[b->alloc].devi, -1, &i, 1);
    if (n > 0)
        fz_expect_resident(e, i, "a fill");
    return true;
}

static bool op_info(fz_engine *e, fz_src *s)
{
    int i = fz_pick_buf(e, s, false);
    if (i < 0)
        return false;
    fz_buf *b = &e->buf[i];
    fz_note(e, "accessors of handle %d", i);
    size_t sz = 1;
    sw_device *dev = NULL;
    sw_buffer_state st = (sw_buffer_state)9;
    char tag[SW_TAG_MAX + 8];
    int rc = sw_buffer_size(b->h, &sz);
    if (rc != SW_OK || sz != b->size)
        fz_fail(e->w, e, "sw_buffer_size: %s %zu, want %zu", fz_err(rc), sz,
                b->size);
    rc = sw_buffer_device(b->h, &dev);
    if (rc != SW_OK || dev != e->w->dev[e->alloc[b->alloc].devi])
        fz_fail(e->w, e, "sw_buffer_device: %s", fz_err(rc));
    rc = sw_buffer_state_get(b->h, &st);
    if (rc != SW_OK || (st != SW_RESIDENT && st != SW_SPILLED))
        fz_fail(e->w, e, "sw_buffer_state_get: %s %d", fz_err(rc), (int)st);
    /* Truncation to a short buffer. */
    size_t len = 1 + fz_below(s, sizeof tag - 1);
    rc = sw_buffer_tag(b->h, tag, len);
    if (rc != SW_OK || strncmp(tag, b->tag, len - 1) != 0 ||
        strlen(tag) > len - 1)
        fz_fail(e->w, e, "sw_buffer_tag(len %zu): %s '%s', want '%s'", len,
                fz_err(rc), tag, b->tag);
    return true;
}

/* A view of a shared read-only buffer (threaded variant). */
static bool op_view_shared(fz_engine *e, fz_src *s)
{
    if (e->w->nshared == 0 || fz_free_buf_slot(e) < 0 ||
        fz_free_alloc_slot(e) < 0)
        return false;
    int k = (int)fz_below(s, (size_t)e->w->nshared);
    fz_shared *sh = &e->w->shared[k];
    size_t off = fz_below(s, sh->size + 1) & ~(size_t)7;
    size_t len = (sh->size - off) & ~(size_t)7;
    fz_note(e, "view of shared buffer %d at %zu+%zu", k, off, len);
    sw_buffer *h = NULL;
    int rc = sw_buffer_view(sh->h, off, len, &h);
    if (!fz_result(e, "sw_buffer_view (shared)", rc, FZ_OK, 0, NULL))
        return true;
    int a = fz_new_alloc(e, sh->devi, sh->size, false);
    fz_alloc *al = &e->alloc[a];
    al->shared = k;
    al->readonly = true;
    al->rounded = 0;
    int i = fz_new_buf(e, h, a, off, len, true, "shared");
    fz_note_more(e, " -> handle %d", i);
    return true;
}

bool fz_op_buffer(fz_engine *e, fz_src *s, unsigned k)
{
    switch (k) {
    case 0: return op_alloc(e, s);
    case 1: return op_free(e, s);
    case 2: return op_retain(e, s);
    case 3:
        if (e->w->nshared > 0 && fz_u8(s) < 64)
            return op_view_shared(e, s);
        return op_view(e, s);
    case 4: return op_write(e, s);
    case 5: return op_read(e, s);
    case 6: return op_copy(e, s);
    case 7: return op_fill(e, s);
    default: return op_info(e, s);
    }
}
