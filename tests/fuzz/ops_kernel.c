/*
 * ops_kernel.c -- the sw_op_* kernels on every dtype (bool's arithmetic is
 * SW_ERR_DTYPE), on the default queue or a queue of the engine's; the
 * shadow's arithmetic is elements.c's.
 *
 * Fill, copy, add, scale and axpy results are compared exactly, but for
 * NaNs (their payload is open: both NaN, the device's bits are adopted).
 * Sums: integers exactly, floats exactly on the sim (its order is the
 * shadow's) and elsewhere within any summation order's error bound.
 */
#include "model.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* ------------------------------------------------------------------------
 * Ops
 * ---------------------------------------------------------------------- */

sw_dtype fz_draw_dtype(fz_src *s)
{
    /* Half the draws on the four dtypes every backend has always had. */
    uint8_t k = fz_u8(s);
    return (sw_dtype)(k < 128 ? k % 4 : k % SW_DTYPE_COUNT);
}

static double draw_float(fz_src *s)
{
    static const double vals[] = {0.0, 1.0, -1.0, 0.5, 2.0, 3.0,
                                  -0.0, 1e-3, 1e30, NAN, INFINITY, 1e-40,
                                  0.1, -7.25, 1e300, 65504.0, 65520.0,
                                  1e-7, 6e-8, 3.0e38};
    uint8_t k = fz_u8(s);
    return k < 200 ? vals[k % 20] : (double)(int32_t)fz_u32(s) / 7.0;
}

sw_scalar fz_draw_scalar(fz_src *s, sw_dtype d)
{
    sw_scalar v;
    memset(&v, 0, sizeof v);
    sw_dtype_kind kind = SW_KIND_INT;
    (void)sw_dtype_kind_get(d, &kind);
    if (kind == SW_KIND_FLOAT) {
        v.f = draw_float(s);
    } else if (kind == SW_KIND_COMPLEX) {
        v.c.re = draw_float(s);
        v.c.im = draw_float(s);
    } else {
        uint8_t k = fz_u8(s);
        v.i = k < 128 ? (int64_t)(k % 9) - 4 : (int64_t)fz_u64(s);
    }
    return v;
}

/* Whether handles o and x, n bytes each from their starts, overlap other
 * than exactly (the one aliasing the kernels allow: out == a). */
static bool partial_overlap(fz_engine *e, int o, int x, size_t n)
{
    fz_buf *bo = &e->buf[o], *bx = &e->buf[x];
    if (!fz_overlap(e, bo->alloc, bo->off, n, bx->alloc, bx->off, n))
        return false;
    size_t r1, r2;
    int p = fz_root(e, bo->alloc, bo->off, &r1);
    int q = fz_root(e, bx->alloc, bx->off, &r2);
    return p != q || r1 != r2;
}

static bool misaligned(fz_engine *e, int i, size_t es)
{
    return fz_devoff(e, e->buf[i].alloc, e->buf[i].off) % es != 0;
}

static bool op_elementwise(fz_engine *e, fz_src *s, sw_kernel k)
{
    sw_dtype d = fz_draw_dtype(s);
    size_t es = sw_dtype_size(d);
    int oi = fz_pick_buf(e, s, true);
    if (oi < 0)
        return false;
    int devi = e->alloc[e->buf[oi].alloc].devi;
    if (!(e->dm[devi].dtypes >> d & 1u))
        return false; /* (the device cannot compute with it) */
    int ai = -1, bi = -1;
    if (k != SW_KERNEL_FILL) {
        ai = fz_u8(s) < 48 ? oi : fz_pick_buf_dev(e, s, devi, false);
        if (ai < 0)
            return false;
    }
    if (k == SW_KERNEL_ADD) {
        bi = fz_u8(s) < 32 ? ai : fz_pick_buf_dev(e, s, devi, false);
        if (bi < 0)
            return false;
    }
    size_t nmax = e->buf[oi].size / es;
    if (ai >= 0 && e->buf[ai].size / es < nmax)
        nmax = e->buf[ai].size / es;
    if (bi >= 0 && e->buf[bi].size / es < nmax)
        nmax = e->buf[bi].size / es;
    size_t n = fz_u8(s) < 128 ? nmax : fz_below(s, nmax + 1);
    if ((ai >= 0 && partial_overlap(e, oi, ai, n * es)) ||
        (bi >= 0 && partial_overlap(e, oi, bi, n * es)))
        return false; /* racy on a GPU: the header promises nothing */
    sw_scalar alpha = fz_draw_scalar(s, d);
    int q = fz_u8(s) < 96 ? fz_pick_queue(e, s, devi) : -1;
    /* bool has fill, copy and sum only: checked before the operands. */
    bool nodtype = d == SW_BOOL && k != SW_KERNEL_FILL;
    bool bad = nodtype ||
               (n > 0 && k != SW_KERNEL_FILL &&
                (misaligned(e, oi, es) || misaligned(e, ai, es) ||
                 (bi >= 0 && misaligned(e, bi, es))));
    int slots[3] = {oi, ai, bi};
    int nslots = bi >= 0 ? 3 : ai >= 0 ? 2 : 1;
    fz_snapshot snap;
    if (bad)
        fz_snapshot_take(e, &snap);
    fz_expect ex = bad ? FZ_ERR : fz_expect_for(e, slots, nslots);
    fz_note(e, "%s %s n=%zu out %d a %d b %d%s%s", sw_kernel_name(k),
            sw_dtype_name(d), n, oi, ai, bi, q >= 0 ? " on a queue" : "",
            nodtype ? " (not for bool)" : bad ? " (misaligned)" : "");
    if (!bad)
        fz_order_before(e, devi, q, slots, nslots);
    sw_queue *qh = q >= 0 ? e->queue[devi][q].q : NULL;
    sw_buffer *o = e->buf[oi].h, *a = ai >= 0 ? e->buf[ai].h : NULL,
              *b = bi >= 0 ? e->buf[bi].h : NULL;
    int rc;
    switch (k) {
    case SW_KERNEL_FILL:
        rc = qh ? sw_op_fill_q(qh, o, d, n, alpha) : sw_op_fill(o, d, n,
                                                                alpha);
        break;
    case SW_KERNEL_ADD:
        rc = qh ? sw_op_add_q(qh, o, a, b, d, n) : sw_op_add(o, a, b, d, n);
        break;
    case SW_KERNEL_SCALE:
        rc = qh ? sw_op_scale_q(qh, o, a, alpha, d, n)
                : sw_op_scale(o, a, alpha, d, n);
        break;
    default:
        rc = qh ? sw_op_axpy_q(qh, alpha, a, o, d, n)
                : sw_op_axpy(alpha, a, o, d, n);
        break;
    }
    /* A restore may have run them (a callback freeing a donated handle),
     * before fz_result looks at every allocation's state. */
    fz_process_callbacks(e);
    if (!fz_result(e, sw_kernel_name(k), rc, ex,
                   nodtype ? SW_ERR_DTYPE : SW_ERR_INVALID_ARG,
                   bad ? &snap : NULL))
        return true;
    if (n > 0) /* n == 0 queues and orders nothing */
        fz_order_after(e, devi, q, slots, nslots);
    fz_queue_done(e, devi, q, slots, nslots);
    fz_buf *bo = &e->buf[oi];
    fz_apply_kernel(k, d, n, fz_bytes(e, bo->alloc, bo->off),
                    ai >= 0 ? fz_bytes(e, e->buf[ai].alloc, e->buf[ai].off)
                            : NULL,
                    bi >= 0 ? fz_bytes(e, e->buf[bi].alloc, e->buf[bi].off)
                            : NULL,
                    alpha);
    fz_adopt_nans(e, oi, 0, n, d);
    if (n > 0)
        for (int j = 0; j < nslots; j++)
            fz_expect_resident(e, slots[j], sw_kernel_name(k));
    return true;
}

static bool op_sum(fz_engine *e, fz_src *s)
{
    sw_dtype d = fz_draw_dtype(s);
    size_t es = sw_dtype_size(d);
    int ai = fz_pick_buf(e, s, false);
    if (ai < 0)
        return false;
    fz_buf *b = &e->buf[ai];
    int devi = e->alloc[b->alloc].devi;
    if (!(e->dm[devi].dtypes >> d & 1u))
        return false;
    size_t nmax = b->size / es;
    size_t n = fz_u8(s) < 128 ? nmax : fz_below(s, nmax + 1);
    bool bad = n > 0 && misaligned(e, ai, es);
    fz_snapshot snap;
    if (bad)
        fz_snapshot_take(e, &snap);
    int slots[1] = {ai};
    fz_note(e, "sum %s n=%zu of handle %d%s", sw_dtype_name(d), n, ai,
            bad ? " (misaligned)" : "");
    sw_scalar out;
    memset(&out, 0x5A, sizeof out);
    e->may_spill = true; /* with no scratch memory, a temporary buffer */
    if (!bad)
        fz_order_before(e, devi, -1, slots, 1); /* aliased memory */
    int rc = sw_op_sum(b->h, d, n, &out);
    /* Every scratch slot busy (never, with one engine) or no scratch
     * memory to be had (an injected or real shortage at a device's first
     * sum): the result went through a temporary buffer, one allocation
     * and one free more. */
    fz_devmodel *dm = &e->dm[devi];
    fz_process_callbacks(e); /* a restore may have run them */
    if (dm->counters_known) {
        sw_memory_info m;
        if (sw_memory_info_get(e->w->dev[devi], &m) == SW_OK &&
            m.allocs == dm->allocs + 1 && m.frees == dm->frees + 1) {
            dm->allocs++;
            dm->frees++;
            fz_note_obtain(e, devi);
        }
    }
    if (!fz_result(e, "sw_op_sum", rc,
                   bad ? FZ_ERR : fz_expect_for(e, slots, 1),
                   SW_ERR_INVALID_ARG, bad ? &snap : NULL)) {
        static const sw_scalar zero;
        if (memcmp(&out, &zero, sizeof out) != 0)
            fz_fail(e->w, e, "a failed sw_op_sum left *out set");
        return true;
    }
    if (n > 0)
        fz_order_after(e, devi, -1, slots, 1);
    unsigned char got[16];
    memcpy(got, &out, 16);
    fz_check_sum(e, d, fz_bytes(e, b->alloc, b->off), n, devi, got);
    if (n > 0)
        fz_expect_resident(e, ai, "a sum");
    return true;
}

bool fz_op_kernel(fz_engine *e, fz_src *s, unsigned k)
{
    switch (k) {
    case 0: return op_elementwise(e, s, SW_KERNEL_FILL);
    case 1: return op_elementwise(e, s, SW_KERNEL_ADD);
    case 2: return op_elementwise(e, s, SW_KERNEL_SCALE);
    case 3: return op_elementwise(e, s, SW_KERNEL_AXPY);
    default: return op_sum(e, s);
    }
}
