/*
 * elements.h -- element values as every backend's kernels take them: the
 * host-side conversions of float16 and bfloat16, and a sw_scalar (a fill
 * value, an alpha) as the bytes of one element of a dtype.
 *
 * Header-only (static inline), for the simulated device's kernels
 * (sim_kernels.c) and the host side of opencl.c and cuda.c.  The device
 * sides (kernels/opencl.cl, kernels/cuda.cu) carry their own copies of the
 * float16/bfloat16 conversions, the same bit manipulations, so that every
 * backend rounds the same way; the test suite checks all of them against a
 * reference of its own (tests/c/test-dtypes.c).
 *
 * The rules, once (the kernels' header comments refer here):
 *  - float16 is IEEE binary16 (1 sign, 5 exponent, 10 fraction bits, with
 *    subnormals, infinities and NaNs); bfloat16 is the top 16 bits of a
 *    float32.  Both widen to float32 exactly, and a float32 narrows to
 *    either rounding to nearest, ties to even; a value past the largest
 *    finite one becomes an infinity; a NaN stays a NaN of the same sign,
 *    made quiet, with the top bits of its payload.
 *  - A scalar becomes an element by rounding ONCE: a float64 value goes to
 *    float16 or bfloat16 directly (0.1 -> float16 0x2E66), not through a
 *    float32 (which could round twice); to float32 by C's conversion.
 *    Integers take the value's low bits (wrap-around, two's complement);
 *    bool is 1 for any nonzero .i.  Complex dtypes take .c.re and .c.im,
 *    each rounded as the float dtype of their half.
 */
#ifndef SW_ELEMENTS_H
#define SW_ELEMENTS_H

#include "spillway.h"

#include <stdint.h>
#include <string.h>

static inline uint32_t sw__f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float sw__f32_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* float16 -> float32, exactly. */
static inline float sw__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t u;
    if (e == 0x1f) { /* infinity, NaN (payload kept) */
        u = sign | 0x7f800000u | (m << 13);
    } else if (e != 0) {
        u = sign | ((e + 112u) << 23) | (m << 13);
    } else if (m == 0) {
        u = sign;
    } else { /* subnormal: m * 2^-24, a normal float32 */
        uint32_t x = 113;
        while (!(m & 0x400u)) {
            m <<= 1;
            x--;
        }
        u = sign | (x << 23) | ((m & 0x3ffu) << 13);
    }
    return sw__f32_of_bits(u);
}

/* float32 -> float16, to nearest, ties to even. */
static inline uint16_t sw__f32_to_f16(float f)
{
    uint32_t u = sw__f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) /* NaN: quiet, the payload's top bits */
        return (uint16_t)(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
    if (u >= 0x47800000u) /* 2^16 and up (infinity too): infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (u < 0x38800000u) {
        /* Below 2^-14: a subnormal (or zero) of 2^-24 units. */
        uint32_t e = u >> 23;
        if (e < 102) /* below 2^-25, half the smallest: zero */
            return (uint16_t)sign;
        uint32_t m = (u & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u)))
            r++;
        return (uint16_t)(sign | r);
    }
    /* Normal: rebias the exponent, round away 13 fraction bits (a carry
     * may reach the exponent, or the infinity, as it should). */
    uint32_t r = (u >> 13) - (112u << 10), rem = u & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u)))
        r++;
    return (uint16_t)(sign | r);
}

/* bfloat16 -> float32, exactly. */
static inline float sw__bf16_to_f32(uint16_t b)
{
    return sw__f32_of_bits((uint32_t)b << 16);
}

/* float32 -> bfloat16, to nearest, ties to even. */
static inline uint16_t sw__f32_to_bf16(float f)
{
    uint32_t u = sw__f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet */
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* float64 -> float32 rounded to odd: toward zero, then the last bit set if
 * anything was lost.  Rounding that to a format of at most 22 significant
 * bits (float16's 11, bfloat16's 8) to nearest gives the float64's value
 * rounded to that format once. */
static inline float sw__f64_to_f32_odd(double d)
{
    float f = (float)d;
    if (d != d || (double)f == d)
        return f;
    uint32_t u = sw__f32_bits(f);
    if ((f > 0 && (double)f > d) || (f < 0 && (double)f < d))
        u--; /* rounded away from zero (to infinity, even): step back */
    return sw__f32_of_bits(u | 1u);
}

static inline uint16_t sw__f64_to_f16(double d)
{
    return sw__f32_to_f16(sw__f64_to_f32_odd(d));
}

static inline uint16_t sw__f64_to_bf16(double d)
{
    return sw__f32_to_bf16(sw__f64_to_f32_odd(d));
}

/* v as one element of dtype d: sw_dtype_size(d) bytes (at most 16) into
 * out, by the rules above; returns that size (0 for an unknown dtype). */
static inline size_t sw__element_bytes(sw_dtype d, sw_scalar v,
                                       unsigned char out[16])
{
    switch (d) {
    case SW_FLOAT32: {
        float f = (float)v.f;
        memcpy(out, &f, 4);
        return 4;
    }
    case SW_FLOAT64:
        memcpy(out, &v.f, 8);
        return 8;
    case SW_FLOAT16: {
        uint16_t h = sw__f64_to_f16(v.f);
        memcpy(out, &h, 2);
        return 2;
    }
    case SW_BFLOAT16: {
        uint16_t h = sw__f64_to_bf16(v.f);
        memcpy(out, &h, 2);
        return 2;
    }
    case SW_BOOL:
        out[0] = v.i != 0;
        return 1;
    case SW_INT8:
    case SW_UINT8:
        out[0] = (unsigned char)(d == SW_INT8 ? (uint64_t)v.i : v.u);
        return 1;
    case SW_INT16:
    case SW_UINT16: {
        uint16_t x = (uint16_t)(d == SW_INT16 ? (uint64_t)v.i : v.u);
        memcpy(out, &x, 2);
        return 2;
    }
    case SW_INT32:
    case SW_UINT32: {
        uint32_t x = (uint32_t)(d == SW_INT32 ? (uint64_t)v.i : v.u);
        memcpy(out, &x, 4);
        return 4;
    }
    case SW_INT64:
    case SW_UINT64: {
        uint64_t x = d == SW_INT64 ? (uint64_t)v.i : v.u;
        memcpy(out, &x, 8);
        return 8;
    }
    case SW_COMPLEX64: {
        float c[2] = {(float)v.c.re, (float)v.c.im};
        memcpy(out, c, 8);
        return 8;
    }
    case SW_COMPLEX128: {
        double c[2] = {v.c.re, v.c.im};
        memcpy(out, c, 16);
        return 16;
    }
    }
    return 0;
}

/* Every dtype: the mask of a backend whose kernels cover them all. */
#define SW__ALL_DTYPES ((uint32_t)((1u << SW_DTYPE_COUNT) - 1u))

#endif /* SW_ELEMENTS_H */
