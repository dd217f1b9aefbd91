/*
 * elements.c -- the shadow's arithmetic on every element type: what the
 * header says each built-in kernel computes, element by element, written
 * from the header's rules and not from the library's code (so that a
 * backend that rounds differently is caught).
 *
 *  - Integers (signed and unsigned, 1 to 8 bytes) compute modulo 2^width:
 *    the shadow adds and multiplies in uint64_t and keeps the low bytes.
 *  - float32 and float64: one IEEE operation each, never fused (the build
 *    passes -ffp-contract=off; AXPY rounds twice).
 *  - float16 and bfloat16 widen to float32 exactly, compute in float32,
 *    and round back to nearest, ties to even; a value at or past the
 *    overflow threshold becomes an infinity.  Alpha and fill values round
 *    ONCE from the float64 scalar to the element type.  The rounding here
 *    is the textbook one (scale by the quantum, nearbyint), not the bit
 *    manipulations of the library's own conversions.
 *  - Complex: re/im pairs, alpha * x = (ar*xr - ai*xi, ar*xi + ai*xr),
 *    each operation rounded in the precision of the parts.
 *  - bool: fill (1 for any nonzero value), copy and sum (a count of
 *    nonzero bytes) only; arithmetic is SW_ERR_DTYPE.
 *  - Sums: float kinds in a float64, complex in two, signed integers
 *    sign-extended into a wrapping 64-bit sum, unsigned zero-extended.
 *    The simulated device adds in order from element 0 (compared
 *    exactly); other backends in a tree of their own (compared within
 *    any order's error bound, n * eps * sum|x|).
 *
 * IEEE 754 leaves a NaN result's payload open: where the shadow and the
 * device both hold a NaN the device's bits are adopted (check.c).
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
 * float16 and bfloat16
 * ---------------------------------------------------------------------- */

/* x rounded to p significant bits, with exponents below emin kept at
 * emin's quantum (subnormals), to nearest even; |result| >= overflow is
 * an infinity.  Zeros keep their sign; NaN and infinities pass. */
static double round_p(double x, int p, int emin, double overflow)
{
    if (isnan(x) || isinf(x) || x == 0.0)
        return x;
    int k;
    (void)frexp(x, &k); /* |x| = m * 2^k, m in [0.5, 1) */
    int e = k - 1;
    if (e < emin)
        e = emin;
    double q = ldexp(1.0, e - (p - 1));
    double r = nearbyint(x / q) * q; /* x / q: a power of 2, exact */
    if (fabs(r) >= overflow)
        r = copysign(INFINITY, x);
    return r;
}

float fz_f16_to_float(uint16_t h)
{
    double sign = (h & 0x8000u) ? -1.0 : 1.0;
    unsigned e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f)
        return m ? (float)NAN * (float)sign : (float)(sign * INFINITY);
    if (e == 0)
        return (float)(sign * ldexp((double)m, -24));
    return (float)(sign * ldexp((double)(m | 0x400u), (int)e - 25));
}

/* The float16 of x, rounded once. */
uint16_t fz_f16_from_double(double x)
{
    double r = round_p(x, 11, -14, 65536.0);
    uint16_t sign = signbit(r) ? 0x8000u : 0;
    if (isnan(r))
        return (uint16_t)(sign | 0x7e00u);
    double a = fabs(r);
    if (isinf(a))
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x1p-14) /* subnormal or zero: exact multiples of 2^-24 */
        return (uint16_t)(sign | (uint16_t)(a * 0x1p24));
    int k;
    double m = frexp(a, &k); /* a = (2m) * 2^(k-1) */
    unsigned mant = (unsigned)((2.0 * m - 1.0) * 1024.0);
    return (uint16_t)(sign | (unsigned)(k - 1 + 15) << 10 | mant);
}

float fz_bf16_to_float(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t fz_bf16_from_double(double x)
{
    double r = round_p(x, 8, -126, 0x1p128);
    if (isnan(r))
        return signbit(r) ? 0xffc0u : 0x7fc0u;
    float f = (float)r; /* exact: r has 8 significant bits */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

/* ------------------------------------------------------------------------
 * Scalars as elements, NaN parts
 * ---------------------------------------------------------------------- */

size_t fz_element_bytes(sw_dtype d, sw_scalar v, unsigned char out[16])
{
    size_t es = sw_dtype_size(d);
    switch (d) {
    case SW_FLOAT32: {
        float f = (float)v.f;
        memcpy(out, &f, 4);
        break;
    }
    case SW_FLOAT64: memcpy(out, &v.f, 8); break;
    case SW_FLOAT16: {
        uint16_t h = fz_f16_from_double(v.f);
        memcpy(out, &h, 2);
        break;
    }
    case SW_BFLOAT16: {
        uint16_t h = fz_bf16_from_double(v.f);
        memcpy(out, &h, 2);
        break;
    }
    case SW_BOOL: out[0] = v.i != 0; break;
    case SW_COMPLEX64: {
        float c[2] = {(float)v.c.re, (float)v.c.im};
        memcpy(out, c, 8);
        break;
    }
    case SW_COMPLEX128: {
        double c[2] = {v.c.re, v.c.im};
        memcpy(out, c, 16);
        break;
    }
    default: /* integers: the low bytes (little-endian) */
        memcpy(out, &v.u, es);
        break;
    }
    return es;
}

size_t fz_float_part(sw_dtype d)
{
    switch (d) {
    case SW_FLOAT16:
    case SW_BFLOAT16: return 2;
    case SW_FLOAT32:
    case SW_COMPLEX64: return 4;
    case SW_FLOAT64:
    case SW_COMPLEX128: return 8;
    default: return 0;
    }
}

bool fz_part_is_nan(sw_dtype d, const unsigned char *p)
{
    uint16_t h;
    switch (fz_float_part(d)) {
    case 2:
        memcpy(&h, p, 2);
        if (d == SW_FLOAT16)
            return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
        return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0;
    case 4: {
        float f;
        memcpy(&f, p, 4);
        return isnan(f);
    }
    case 8: {
        double x;
        memcpy(&x, p, 8);
        return isnan(x);
    }
    default: return false;
    }
}

/* ------------------------------------------------------------------------
 * Element-wise kernels
 * ---------------------------------------------------------------------- */

/* T computed in T (float, double): one rounding per operation. */
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

/* Complex with parts of R. */
#define EW_COMPLEX(R)                                                         \
    for (size_t i = 0; i < n; i++) {                                          \
        R x[2], y[2] = {0, 0}, o[2];                                          \
        memcpy(x, a + i * 2 * sizeof(R), sizeof x);                           \
        if (k == SW_KERNEL_ADD)                                               \
            memcpy(y, b + i * 2 * sizeof(R), sizeof y);                       \
        memcpy(o, out + i * 2 * sizeof(R), sizeof o);                         \
        R ar = al[0], ai = al[1];                                             \
        if (k == SW_KERNEL_ADD) {                                             \
            o[0] = x[0] + y[0];                                               \
            o[1] = x[1] + y[1];                                               \
        } else {                                                              \
            R p1 = ar * x[0], p2 = ai * x[1], p3 = ar * x[1],                 \
              p4 = ai * x[0];                                                 \
            R re = p1 - p2, im = p3 + p4;                                     \
            if (k == SW_KERNEL_AXPY) {                                        \
                re = re + o[0];                                               \
                im = im + o[1];                                               \
            }                                                                 \
            o[0] = re;                                                        \
            o[1] = im;                                                        \
        }                                                                     \
        memcpy(out + i * 2 * sizeof(R), o, sizeof o);                         \
    }

/* float16 / bfloat16: widen, compute in float, round back once. */
static void ew_half(sw_kernel k, bool bf, size_t n, unsigned char *out,
                    const unsigned char *a, const unsigned char *b,
                    uint16_t alpha_h)
{
    float al = bf ? fz_bf16_to_float(alpha_h) : fz_f16_to_float(alpha_h);
    for (size_t i = 0; i < n; i++) {
        uint16_t xh, yh = 0, oh;
        memcpy(&xh, a + i * 2, 2);
        if (k == SW_KERNEL_ADD)
            memcpy(&yh, b + i * 2, 2);
        memcpy(&oh, out + i * 2, 2);
        float x = bf ? fz_bf16_to_float(xh) : fz_f16_to_float(xh);
        float y = bf ? fz_bf16_to_float(yh) : fz_f16_to_float(yh);
        float o = bf ? fz_bf16_to_float(oh) : fz_f16_to_float(oh);
        float r;
        if (k == SW_KERNEL_ADD) {
            r = x + y;
        } else if (k == SW_KERNEL_SCALE) {
            r = al * x;
        } else {
            float t = al * x;
            r = t + o;
        }
        oh = bf ? fz_bf16_from_double(r) : fz_f16_from_double(r);
        memcpy(out + i * 2, &oh, 2);
    }
}

void fz_apply_kernel(sw_kernel k, sw_dtype d, size_t n, unsigned char *out,
                     const unsigned char *a, const unsigned char *b,
                     sw_scalar alpha)
{
    size_t es = sw_dtype_size(d);
    unsigned char p[16];
    fz_element_bytes(d, alpha, p);
    switch (k) {
    case SW_KERNEL_FILL:
        for (size_t i = 0; i < n; i++)
            memcpy(out + i * es, p, es);
        return;
    case SW_KERNEL_COPY:
        memmove(out, a, n * es);
        return;
    case SW_KERNEL_SUM:
        return; /* fz_check_sum */
    default:
        break;
    }
    switch (d) {
    case SW_BOOL: return; /* SW_ERR_DTYPE */
    case SW_FLOAT32: EW(float, (float)alpha.f) return;
    case SW_FLOAT64: EW(double, alpha.f) return;
    case SW_FLOAT16:
    case SW_BFLOAT16: {
        uint16_t h;
        memcpy(&h, p, 2);
        ew_half(k, d == SW_BFLOAT16, n, out, a, b, h);
        return;
    }
    case SW_COMPLEX64: {
        float al[2];
        memcpy(al, p, 8);
        EW_COMPLEX(float)
        return;
    }
    case SW_COMPLEX128: {
        double al[2];
        memcpy(al, p, 16);
        EW_COMPLEX(double)
        return;
    }
    default:
        break;
    }
    /* Integers of es bytes, modulo 2^(8 es). */
    uint64_t al = 0;
    memcpy(&al, p, es);
    for (size_t i = 0; i < n; i++) {
        uint64_t x = 0, y = 0, o = 0;
        memcpy(&x, a + i * es, es);
        if (k == SW_KERNEL_ADD)
            memcpy(&y, b + i * es, es);
        memcpy(&o, out + i * es, es);
        if (k == SW_KERNEL_ADD)
            o = x + y;
        else if (k == SW_KERNEL_SCALE)
            o = al * x;
        else
            o = al * x + o;
        memcpy(out + i * es, &o, es);
    }
}

/* ------------------------------------------------------------------------
 * Sums
 * ---------------------------------------------------------------------- */

/* Element i's part `part` (0 re, 1 im) of a float-kind dtype, exactly. */
static double part_value(sw_dtype d, const unsigned char *a, size_t i,
                         int part)
{
    size_t ps = fz_float_part(d);
    size_t es = sw_dtype_size(d);
    const unsigned char *p = a + i * es + (size_t)part * ps;
    uint16_t h;
    float f;
    double x;
    switch (d) {
    case SW_FLOAT16: memcpy(&h, p, 2); return fz_f16_to_float(h);
    case SW_BFLOAT16: memcpy(&h, p, 2); return fz_bf16_to_float(h);
    case SW_FLOAT32:
    case SW_COMPLEX64: memcpy(&f, p, 4); return f;
    default: memcpy(&x, p, 8); return x;
    }
}

/* One float sum (part `part` of every element) against the device's
 * float64 at g; 0 or -1 after a report. */
static int check_float_sum(fz_engine *e, sw_dtype d, const unsigned char *a,
                           size_t n, int devi, int part,
                           unsigned char g_bytes[8])
{
    double seq = 0.0, mag = 0.0;
    bool any_nan = false;
    for (size_t i = 0; i < n; i++) {
        double x = part_value(d, a, i, part);
        any_nan |= isnan(x);
        seq += x;
        mag += fabs(x);
    }
    double g;
    memcpy(&g, g_bytes, 8);
    const char *pn = part ? " (imaginary parts)" : "";
    if (any_nan || isnan(seq)) {
        if (!isnan(g) && !isinf(mag)) {
            fz_fail(e->w, e, "%s sum%s of %zu elements with a NaN: device "
                    "%a", sw_dtype_name(d), pn, n, g);
            return -1;
        }
    } else if (e->w->is_sim[devi]) {
        if (memcmp(&g, &seq, 8) != 0) {
            fz_fail(e->w, e, "%s sum%s on the sim (sequential): device %a,"
                    " shadow %a", sw_dtype_name(d), pn, g, seq);
            return -1;
        }
    } else if (isfinite(mag)) {
        /* A tree may add in the element's precision or in float32: the
         * coarser of the two bounds. */
        double eps = fz_float_part(d) == 8 ? 0x1p-52 : 0x1p-23;
        double bound = ((double)n + 2.0) * eps * mag + 0x1p-1070;
        if (!(fabs(g - seq) <= bound)) {
            fz_fail(e->w, e, "%s sum%s of %zu elements: device %a, "
                    "sequential %a, beyond any order's error %a",
                    sw_dtype_name(d), pn, n, g, seq, bound);
            return -1;
        }
    }
    if (memcmp(&g, &seq, 8) != 0)
        atomic_fetch_add(&e->w->stats.sum_adopted, 1);
    return 0;
}

int fz_check_sum(fz_engine *e, sw_dtype d, const unsigned char *a, size_t n,
                 int devi, unsigned char got[16])
{
    size_t es = sw_dtype_size(d);
    sw_dtype_kind kind = SW_KIND_INT;
    (void)sw_dtype_kind_get(d, &kind);
    if (kind == SW_KIND_FLOAT)
        return check_float_sum(e, d, a, n, devi, 0, got);
    if (kind == SW_KIND_COMPLEX)
        return check_float_sum(e, d, a, n, devi, 0, got) ||
               check_float_sum(e, d, a, n, devi, 1, got + 8) ? -1 : 0;
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t v = 0;
        memcpy(&v, a + i * es, es);
        if (kind == SW_KIND_BOOL)
            v = v != 0;
        else if (kind == SW_KIND_INT && es < 8 && (v >> (es * 8 - 1) & 1u))
            v |= ~UINT64_C(0) << (es * 8); /* sign-extend */
        sum += v;
    }
    uint64_t g;
    memcpy(&g, got, 8);
    if (g != sum) {
        fz_fail(e->w, e, "%s sum of %zu elements: device %" PRIu64
                ", shadow %" PRIu64, sw_dtype_name(d), n, g, sum);
        return -1;
    }
    return 0;
}
