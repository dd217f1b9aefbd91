/*
 * ops_kernel.c -- the sw_op_* kernels on float32, float64, int32 and int64,
 * on the default queue or a queue of the engine's, and the shadow's copy
 * of the built-in kernels.
 *
 * The shadow computes what the header says each kernel computes, element
 * by element in the element's own precision: integers in unsigned types of
 * their width (arithmetic wraps); floats as one IEEE operation each, with
 * alpha rounded to the element type first and no contraction (a*x + y
 * rounds twice: every backend builds its kernels that way -- OpenCL
 * FP_CONTRACT OFF, NVRTC --fmad=false, the sim in C without FMA).  So
 * fill, copy, add, scale and axpy results are compared exactly, but for
 * NaNs: IEEE 754 leaves the payload of a NaN result open, so where both
 * the shadow and the device hold a NaN the device's bits are adopted
 * (counted as "NaN results adopted").
 *
 * Sums reduce in a fixed order that is the backend's own (sequential on
 * the sim, a tree on OpenCL and CUDA): integer sums are exact in any
 * order and compared exactly; float sums are compared exactly on the sim
 * (whose order the shadow uses) and elsewhere within the error bound of
 * any summation order, n * eps * sum|x|, then adopted.
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
 * The shadow's kernels
 * ---------------------------------------------------------------------- */

#define EW(T, ALPHA)                                                          \
    for (size_t i = 0; i < n; i++) {                                          \
        T x, y = 0, o;                                                        \
        memcpy(&x, a + i * sizeof(T), sizeof(T));                             \
        if (k == SW_KERNEL_ADD)                                               \
            memcpy(&y, b + i * sizeof(T), sizeof(T));                         \
        memcpy(&o, out + i * sizeof(T), sizeof(T));                           \
        T al = (ALPHA);                                                       \
        if (k == SW_KERNEL_ADD) {                                             \
            o = x + y;                                                        \
        } else if (k == SW_KERNEL_SCALE) {                                    \
            o = al * x;                                                       \
        } else {                                                              \
            T t = al * x;                                                     \
            o = t + o;                                                        \
        }                                                                     \
        memcpy(out + i * sizeof(T), &o, sizeof(T));                           \
    }

static void scalar_bytes(sw_dtype d, sw_scalar v, unsigned char *p)
{
    switch (d) {
    case SW_FLOAT32: {
        float f = (float)v.f;
        memcpy(p, &f, 4);
        break;
    }
    case SW_FLOAT64: memcpy(p, &v.f, 8); break;
    case SW_INT32: {
        uint32_t u = (uint32_t)(uint64_t)v.i;
        memcpy(p, &u, 4);
        break;
    }
    default: memcpy(p, &v.i, 8); break;
    }
}

void fz_apply_kernel(sw_kernel k, sw_dtype d, size_t n, unsigned char *out,
                     const unsigned char *a, const unsigned char *b,
                     sw_scalar alpha)
{
    size_t es = sw_dtype_size(d);
    switch (k) {
    case SW_KERNEL_FILL: {
        unsigned char p[8];
        scalar_bytes(d, alpha, p);
        for (size_t i = 0; i < n; i++)
            memcpy(out + i * es, p, es);
        return;
    }
    case SW_KERNEL_COPY:
        memmove(out, a, n * es);
        return;
    case SW_KERNEL_SUM:
        return; /* fz_check_sum */
    default:
        break;
    }
    switch (d) {
    case SW_FLOAT32: EW(float, (float)alpha.f) break;
    case SW_FLOAT64: EW(double, alpha.f) break;
    case SW_INT32: EW(uint32_t, (uint32_t)(uint64_t)alpha.i) break;
    default: EW(uint64_t, (uint64_t)alpha.i) break;
    }
}

/* Compares a device sum (8 bytes, as the kernel stores them) with the
 * shadow's; rewrites got with the bits to keep.  Returns 0, or -1 after a
 * report. */
int fz_check_sum(fz_engine *e, sw_dtype d, const unsigned char *a, size_t n,
                 int devi, unsigned char got[8])
{
    size_t es = sw_dtype_size(d);
    if (d == SW_INT32 || d == SW_INT64) {
        uint64_t sum = 0;
        for (size_t i = 0; i < n; i++) {
            if (d == SW_INT32) {
                int32_t v;
                memcpy(&v, a + i * es, 4);
                sum += (uint64_t)(int64_t)v;
            } else {
                uint64_t v;
                memcpy(&v, a + i * es, 8);
                sum += v;
            }
        }
        uint64_t g;
        memcpy(&g, got, 8);
        if (g != sum) {
            fz_fail(e->w, e, "integer sum of %zu elements: device %" PRIu64
                    ", shadow %" PRIu64, n, g, sum);
            return -1;
        }
        return 0;
    }
    double seq = 0.0, mag = 0.0;
    bool any_nan = false;
    for (size_t i = 0; i < n; i++) {
        double x;
        if (d == SW_FLOAT32) {
            float f;
            memcpy(&f, a + i * es, 4);
            x = (double)f;
        } else {
            memcpy(&x, a + i * es, 8);
        }
        any_nan |= isnan(x);
        seq += x;
        mag += fabs(x);
    }
    double g;
    memcpy(&g, got, 8);
    if (any_nan || isnan(seq)) {
        if (!isnan(g) && !isinf(mag)) {
            fz_fail(e->w, e, "float sum of %zu elements with a NaN: device "
                    "%a", n, g);
            return -1;
        }
    } else if (e->w->is_sim[devi]) {
        if (memcmp(&g, &seq, 8) != 0) {
            fz_fail(e->w, e, "float sum on the sim (sequential): device %a,"
                    " shadow %a", g, seq);
            return -1;
        }
    } else if (isfinite(mag)) {
        double eps = d == SW_FLOAT32 ? 0x1p-23 : 0x1p-52;
        double bound = ((double)n + 2.0) * eps * mag + 0x1p-1070;
        if (!(fabs(g - seq) <= bound)) {
            fz_fail(e->w, e, "float sum of %zu elements: device %a, "
                    "sequential %a, beyond any order's error %a", n, g, seq,
                    bound);
            return -1;
        }
    }
    if (memcmp(&g, &seq, 8) != 0)
        atomic_fetch_add(&e->w->stats.sum_adopted, 1);
    return 0;
}

/* ------------------------------------------------------------------------
 * Ops
 * ---------------------------------------------------------------------- */

static sw_scalar draw_alpha(fz_src *s, sw_dtype d)
{
    sw_scalar v;
    uint8_t k = fz_u8(s);
    if (d == SW_FLOAT32 || d == SW_FLOAT64) {
        static const double vals[] = {0.0, 1.0, -1.0, 0.5, 2.0, 3.0,
                                      -0.0, 1e-3, 1e30, NAN, INFINITY, 1e-40,
                                      0.1, -7.25, 1e300, 65504.0};
        v.f = k < 200 ? vals[k % 16] : (double)(int32_t)fz_u32(s) / 7.0;
    } else {
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
    sw_dtype d = (sw_dtype)fz_below(s, 4);
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
    sw_scalar alpha = draw_alpha(s, d);
    int q = fz_u8(s) < 96 ? fz_pick_queue(e, s, devi) : -1;
    bool bad = n > 0 && k != SW_KERNEL_FILL &&
               (misaligned(e, oi, es) || misaligned(e, ai, es) ||
                (bi >= 0 && misaligned(e, bi, es)));
    int slots[3] = {oi, ai, bi};
    int nslots = bi >= 0 ? 3 : ai >= 0 ? 2 : 1;
    fz_snapshot snap;
    if (bad)
        fz_snapshot_take(e, &snap);
    fz_expect ex = bad ? FZ_ERR : fz_expect_for(e, slots, nslots);
    fz_note(e, "%s %s n=%zu out %d a %d b %d%s%s", sw_kernel_name(k),
            sw_dtype_name(d), n, oi, ai, bi, q >= 0 ? " on a queue" : "",
            bad ? " (misaligned)" : "");
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
    if (!fz_result(e, sw_kernel_name(k), rc, ex, SW_ERR_INVALID_ARG,
                   bad ? &snap : NULL))
        return true;
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
    sw_dtype d = (sw_dtype)fz_below(s, 4);
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
    out.i = 0x5A5A;
    e->may_spill = true; /* with no scratch memory, a temporary buffer */
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
        if (out.i != 0)
            fz_fail(e->w, e, "a failed sw_op_sum left *out set");
        return true;
    }
    fz_order_after(e, devi, -1, slots, 1);
    unsigned char got[8];
    memcpy(got, &out, 8);
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
