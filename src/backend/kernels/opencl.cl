/*
 * opencl.cl -- spillway's built-in kernels for the OpenCL backend
 * (opencl.c), OpenCL C 1.2.
 *
 * Embedded in the library at build time (scripts/embed.py) and built once
 * per device when it is opened, with -cl-std=CL1.2 -DSW_RED_L=<the
 * reduction work-group size, a power of two> and, on devices with
 * cl_khr_fp64 (unless SPILLWAY_OPENCL_FP64=0), -DSW_FP64=1; without it the
 * float64 and complex128 kernels are left out and the program still
 * builds.  opencl.c's table lists the entry names it looks up; the file
 * comment there gives the order in which SUM adds, which the code below
 * follows.
 *
 * Element-wise kernels take one element per work-item and buffer offsets
 * as arguments (OpenCL 1.2 has no pointer arithmetic on cl_mem, and
 * sub-buffers have alignment rules).  The arithmetic is the simulated
 * device's, bit for bit (src/backend/sim_kernels.c states it; FP_CONTRACT
 * is off, so nothing fuses into an fma):
 *  - Integers: unsigned types of their width, computed in at least uint,
 *    so arithmetic wraps; signed and unsigned dtypes share a kernel.
 *  - float16 and bfloat16 are stored as ushort and converted by the bit
 *    manipulations below (those of src/backend/elements.h), not by
 *    vload_half/vstore_half_rte: those exist without cl_khr_fp16, but
 *    leave what a NaN becomes to the implementation.  Loaded to float
 *    (exact), computed in float, rounded to nearest even back; alpha
 *    arrives as a float that is already a float16 or bfloat16 value.
 *  - Complex numbers are pairs of float or double (offsets count parts),
 *    alpha = ar + i ai a float2 or double2:
 *        SCALE  re = ar*xr - ai*xi            im = ar*xi + ai*xr
 *        AXPY   re = (ar*xr - ai*xi) + yr     im = (ar*xi + ai*xr) + yi
 * Results equal the simulated device's where the device computes IEEE
 * float with denormals (CL_FP_DENORM; PoCL does); a device that flushes
 * float denormals to zero differs there (bfloat16 subnormals included).
 */
#pragma OPENCL FP_CONTRACT OFF
#ifdef SW_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

/* ------------------------------------------------------------------------
 * float16 and bfloat16 <-> float, by bits
 * ---------------------------------------------------------------------- */

float sw_f16_to_f32(ushort h)
{
    uint sign = (uint)(h & 0x8000u) << 16;
    uint e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint u;
    if (e == 0x1fu) {
        u = sign | 0x7f800000u | (m << 13);
    } else if (e != 0) {
        u = sign | ((e + 112u) << 23) | (m << 13);
    } else if (m == 0) {
        u = sign;
    } else { /* subnormal: normalize (m < 2^10, so clz(m) >= 22) */
        uint sh = clz(m) - 21u;
        u = sign | ((113u - sh) << 23) | (((m << sh) & 0x3ffu) << 13);
    }
    return as_float(u);
}

ushort sw_f32_to_f16(float f)
{
    uint u = as_uint(f);
    uint sign = (u >> 16) & 0x8000u;
    u &= 0x7fffffffu;
    if (u > 0x7f800000u)
        return (ushort)(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
    if (u >= 0x47800000u)
        return (ushort)(sign | 0x7c00u);
    if (u < 0x38800000u) {
        uint e = u >> 23;
        if (e < 102u)
            return (ushort)sign;
        uint m = (u & 0x7fffffu) | 0x800000u;
        uint shift = 126u - e;
        uint r = m >> shift, rem = m & ((1u << shift) - 1u);
        uint tie = 1u << (shift - 1u);
        if (rem > tie || (rem == tie && (r & 1u)))
            r++;
        return (ushort)(sign | r);
    }
    uint r = (u >> 13) - (112u << 10), rem = u & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u)))
        r++;
    return (ushort)(sign | r);
}

float sw_bf16_to_f32(ushort b)
{
    return as_float((uint)b << 16);
}

ushort sw_f32_to_bf16(float f)
{
    uint u = as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (ushort)((u >> 16) | 0x40u);
    return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* ------------------------------------------------------------------------
 * Element-wise kernels: one element per work-item, one signature for all
 * of them (unused operands are ignored).  Offsets are in elements of T.
 * No restrict: o may be a (in-place), and element i only depends on
 * element i.
 * ---------------------------------------------------------------------- */

#define SW_EW(NAME, T, A, EXPR)                                     \
__kernel void NAME(__global T *o, ulong oo, __global const T *a,    \
                   ulong ao, __global const T *b, ulong bo,         \
                   A alpha, ulong n)                                \
{                                                                   \
    ulong i = get_global_id(0);                                     \
    if (i < n)                                                      \
        o[oo + i] = EXPR;                                           \
}

/* Fills and copies by element size. */
SW_EW(sw_fill_u8, uchar, uchar, alpha)
SW_EW(sw_fill_u16, ushort, ushort, alpha)
SW_EW(sw_fill_u32, uint, uint, alpha)
SW_EW(sw_fill_u64, ulong, ulong, alpha)
SW_EW(sw_copy_u8, uchar, uchar, a[ao + i])
SW_EW(sw_copy_u16, ushort, ushort, a[ao + i])
SW_EW(sw_copy_u32, uint, uint, a[ao + i])
SW_EW(sw_copy_u64, ulong, ulong, a[ao + i])
/* 16-byte elements as pairs of ulong (offsets in ulongs). */
__kernel void sw_fill_u128(__global ulong *o, ulong oo,
                           __global const ulong *a, ulong ao,
                           __global const ulong *b, ulong bo,
                           ulong2 alpha, ulong n)
{
    ulong i = get_global_id(0);
    if (i < n) {
        o[oo + 2 * i] = alpha.x;
        o[oo + 2 * i + 1] = alpha.y;
    }
}

/* Integers, computed in C (uint for the narrow ones: no promotion to a
 * signed int that could overflow), the result's low bits kept. */
#define SW_ARITH_INT(S, T, C)                                              \
    SW_EW(sw_add_##S, T, T, (T)((C)a[ao + i] + (C)b[bo + i]))              \
    SW_EW(sw_scale_##S, T, T, (T)((C)alpha * (C)a[ao + i]))                \
    SW_EW(sw_axpy_##S, T, T, (T)((C)alpha * (C)a[ao + i] + (C)o[oo + i]))
SW_ARITH_INT(u8, uchar, uint)
SW_ARITH_INT(u16, ushort, uint)
SW_ARITH_INT(u32, uint, uint)
SW_ARITH_INT(u64, ulong, ulong)

#define SW_ARITH(S, T)                                              \
    SW_EW(sw_add_##S, T, T, a[ao + i] + b[bo + i])                  \
    SW_EW(sw_scale_##S, T, T, alpha * a[ao + i])                    \
    SW_EW(sw_axpy_##S, T, T, alpha * a[ao + i] + o[oo + i])
SW_ARITH(f32, float)
#ifdef SW_FP64
SW_ARITH(f64, double)
#endif

/* float16 / bfloat16: LD to float, compute, ST back. */
#define SW_ARITH_HALF(S, LD, ST)                                           \
    SW_EW(sw_add_##S, ushort, float, ST(LD(a[ao + i]) + LD(b[bo + i])))    \
    SW_EW(sw_scale_##S, ushort, float, ST(alpha * LD(a[ao + i])))          \
    SW_EW(sw_axpy_##S, ushort, float,                                      \
          ST(alpha * LD(a[ao + i]) + LD(o[oo + i])))
SW_ARITH_HALF(f16, sw_f16_to_f32, sw_f32_to_f16)
SW_ARITH_HALF(bf16, sw_bf16_to_f32, sw_f32_to_bf16)

/* Complex: parts of R, offsets in parts, alpha an R2 (re, im).  Both parts
 * of element i are read before either is written. */
#define SW_ARITH_COMPLEX(S, R, R2)                                         \
__kernel void sw_add_##S(__global R *o, ulong oo, __global const R *a,     \
                         ulong ao, __global const R *b, ulong bo,          \
                         R2 alpha, ulong n)                                \
{                                                                          \
    ulong i = get_global_id(0);                                            \
    if (i < n) {                                                           \
        ulong io = oo + 2 * i, ia = ao + 2 * i, ib = bo + 2 * i;           \
        R re = a[ia] + b[ib];                                              \
        R im = a[ia + 1] + b[ib + 1];                                      \
        o[io] = re;                                                        \
        o[io + 1] = im;                                                    \
    }                                                                      \
}                                                                          \
__kernel void sw_scale_##S(__global R *o, ulong oo, __global const R *a,   \
                           ulong ao, __global const R *b, ulong bo,        \
                           R2 alpha, ulong n)                              \
{                                                                          \
    ulong i = get_global_id(0);                                            \
    if (i < n) {                                                           \
        ulong io = oo + 2 * i, ia = ao + 2 * i;                            \
        R xr = a[ia], xi = a[ia + 1];                                      \
        R re = alpha.x * xr - alpha.y * xi;                                \
        R im = alpha.x * xi + alpha.y * xr;                                \
        o[io] = re;                                                        \
        o[io + 1] = im;                                                    \
    }                                                                      \
}                                                                          \
__kernel void sw_axpy_##S(__global R *o, ulong oo, __global const R *a,    \
                          ulong ao, __global const R *b, ulong bo,         \
                          R2 alpha, ulong n)                               \
{                                                                          \
    ulong i = get_global_id(0);                                            \
    if (i < n) {                                                           \
        ulong io = oo + 2 * i, ia = ao + 2 * i;                            \
        R xr = a[ia], xi = a[ia + 1], yr = o[io], yi = o[io + 1];          \
        R re = (alpha.x * xr - alpha.y * xi) + yr;                         \
        R im = (alpha.x * xi + alpha.y * xr) + yi;                         \
        o[io] = re;                                                        \
        o[io + 1] = im;                                                    \
    }                                                                      \
}
SW_ARITH_COMPLEX(c64, float, float2)
#ifdef SW_FP64
SW_ARITH_COMPLEX(c128, double, double2)
#endif

/* ------------------------------------------------------------------------
 * Bytes: a pattern fill at any offset (pattern byte k is bits 8k..8k+7 of
 * lo for k < 8, of hi for k >= 8), and an overlapping move, run by one
 * work-item in the direction that is safe.
 * ---------------------------------------------------------------------- */

__kernel void sw_fill_bytes(__global uchar *o, ulong oo, ulong lo, ulong hi,
                            uint psize, ulong n)
{
    ulong i = get_global_id(0);
    if (i < n) {
        uint k = (uint)(i % psize);
        o[oo + i] = (uchar)(k < 8 ? lo >> (8 * k) : hi >> (8 * (k - 8)));
    }
}
__kernel void sw_move_bytes(__global uchar *o, ulong oo,
                            __global const uchar *a, ulong ao, ulong n)
{
    if (get_global_id(0) != 0)
        return;
    if (oo < ao) {
        for (ulong i = 0; i < n; i++)
            o[oo + i] = a[ao + i];
    } else {
        for (ulong i = n; i-- > 0;)
            o[oo + i] = a[ao + i];
    }
}

/* ------------------------------------------------------------------------
 * Sums: see opencl.c's file comment for the order.  ACC is the
 * accumulator, LOAD(a, k) reads element k into one, ADD combines two,
 * STORE writes the result at any byte offset.
 * ---------------------------------------------------------------------- */

/* 8 result bytes in the device's byte order at any byte offset. */
void sw_store8(__global uchar *out, ulong oo, ulong bits)
{
    for (int k = 0; k < 8; k++) {
#ifdef __ENDIAN_LITTLE__
        out[oo + k] = (uchar)(bits >> (8 * k));
#else
        out[oo + k] = (uchar)(bits >> (8 * (7 - k)));
#endif
    }
}

#define SW_PLUS(x, y) ((x) + (y))
#define SW_SUM1(S, T, ACC, ZERO, LOAD, ADD)                          \
__kernel void sw_sum1_##S(__global const T *a, ulong ao, ulong n,   \
                          ulong tiles, __global ACC *part)          \
{                                                                   \
    __local ACC s[SW_RED_L];                                        \
    uint j = (uint)get_local_id(0);                                 \
    ulong lo = (ulong)get_group_id(0) * tiles * SW_RED_L;           \
    ulong hi = min(lo + tiles * SW_RED_L, n);                       \
    ACC acc = ZERO;                                                 \
    for (ulong i = lo + j; i < hi; i += SW_RED_L)                   \
        acc = ADD(acc, LOAD(a, ao + i));                            \
    s[j] = acc;                                                     \
    barrier(CLK_LOCAL_MEM_FENCE);                                   \
    for (uint t = SW_RED_L / 2; t > 0; t >>= 1) {                   \
        if (j < t)                                                  \
            s[j] = ADD(s[j], s[j + t]);                             \
        barrier(CLK_LOCAL_MEM_FENCE);                               \
    }                                                               \
    if (j == 0)                                                     \
        part[get_group_id(0)] = s[0];                               \
}
#define SW_SUM2(S, ACC, ZERO, ADD, STORE)                           \
__kernel void sw_sum2_##S(__global const ACC *part, ulong groups,   \
                          __global uchar *out, ulong oo)            \
{                                                                   \
    __local ACC s[SW_RED_L];                                        \
    uint j = (uint)get_local_id(0);                                 \
    ACC acc = ZERO;                                                 \
    for (ulong i = j; i < groups; i += SW_RED_L)                    \
        acc = ADD(acc, part[i]);                                    \
    s[j] = acc;                                                     \
    barrier(CLK_LOCAL_MEM_FENCE);                                   \
    for (uint t = SW_RED_L / 2; t > 0; t >>= 1) {                   \
        if (j < t)                                                  \
            s[j] = ADD(s[j], s[j + t]);                             \
        barrier(CLK_LOCAL_MEM_FENCE);                               \
    }                                                               \
    if (j == 0)                                                     \
        STORE(out, oo, s[0]);                                       \
}

/* Integers: sign- or zero-extended into a wrapping 64-bit sum; bool
 * counts nonzero bytes. */
#define SW_SEXT(a, k) ((ulong)(long)(a)[k])
#define SW_ZEXT(a, k) ((ulong)(a)[k])
#define SW_NONZERO(a, k) ((ulong)((a)[k] != 0))
#define SW_STORE_U(out, oo, v) sw_store8(out, oo, v)
SW_SUM1(i8, char, ulong, 0, SW_SEXT, SW_PLUS)
SW_SUM1(i16, short, ulong, 0, SW_SEXT, SW_PLUS)
SW_SUM1(i32, int, ulong, 0, SW_SEXT, SW_PLUS)
SW_SUM1(u8, uchar, ulong, 0, SW_ZEXT, SW_PLUS)
SW_SUM1(u16, ushort, ulong, 0, SW_ZEXT, SW_PLUS)
SW_SUM1(u32, uint, ulong, 0, SW_ZEXT, SW_PLUS)
SW_SUM1(u64, ulong, ulong, 0, SW_ZEXT, SW_PLUS)
SW_SUM1(b8, uchar, ulong, 0, SW_NONZERO, SW_PLUS)
SW_SUM2(u, ulong, 0, SW_PLUS, SW_STORE_U)

#define SW_LD_F16(a, k) sw_f16_to_f32((a)[k])
#define SW_LD_BF16(a, k) sw_bf16_to_f32((a)[k])
#define SW_LD_F32(a, k) ((a)[k])

#ifdef SW_FP64
/* Float types into a double (elements converted exactly); complex types
 * into a double2 (re, im), each part as a float sum. */
#define SW_D(x) ((double)(x))
#define SW_F16_D(a, k) SW_D(SW_LD_F16(a, k))
#define SW_BF16_D(a, k) SW_D(SW_LD_BF16(a, k))
#define SW_F_D(a, k) SW_D((a)[k])
#define SW_C_D2(a, k) ((double2)((double)(a)[2 * (k)], (double)(a)[2 * (k) + 1]))
#define SW_STORE_D(out, oo, v) sw_store8(out, oo, as_ulong(v))
#define SW_STORE_D2(out, oo, v)                                     \
    (sw_store8(out, oo, as_ulong((v).x)),                           \
     sw_store8(out, (oo) + 8, as_ulong((v).y)))
SW_SUM1(f16, ushort, double, 0.0, SW_F16_D, SW_PLUS)
SW_SUM1(bf16, ushort, double, 0.0, SW_BF16_D, SW_PLUS)
SW_SUM1(f32, float, double, 0.0, SW_F_D, SW_PLUS)
SW_SUM1(f64, double, double, 0.0, SW_F_D, SW_PLUS)
SW_SUM2(d, double, 0.0, SW_PLUS, SW_STORE_D)
SW_SUM1(c64, float, double2, (double2)(0.0, 0.0), SW_C_D2, SW_PLUS)
SW_SUM1(c128, double, double2, (double2)(0.0, 0.0), SW_C_D2, SW_PLUS)
SW_SUM2(c, double2, (double2)(0.0, 0.0), SW_PLUS, SW_STORE_D2)
#else
/* float-float accumulators (hi, lo) with |lo| <= ulp(hi)/2: about 48 bits
 * of significand from float arithmetic alone (FP_CONTRACT is off, so the
 * error-free transformations are exact). */
float2 sw_ff_norm(float s, float e)
{
    float h = s + e;
    return (float2)(h, e - (h - s));
}
float2 sw_ff_add(float2 x, float2 y)
{
    float s = x.x + y.x;
    if (!isfinite(s)) /* inf or NaN: no low part to keep */
        return (float2)(s, 0.0f);
    float bb = s - x.x;
    float e = (x.x - (s - bb)) + (y.x - bb);
    return sw_ff_norm(s, e + (x.y + y.y));
}
/* Complex: two of them, (re.hi, re.lo, im.hi, im.lo). */
float4 sw_cff_add(float4 x, float4 y)
{
    float2 re = sw_ff_add(x.xy, y.xy), im = sw_ff_add(x.zw, y.zw);
    return (float4)(re, im);
}
/* The float's value as m * 2^e, m signed (0 for zeros). */
void sw_ff_split(float f, long *m, int *e)
{
    uint u = as_uint(f);
    uint ex = (u >> 23) & 0xffu;
    long fr = (long)(u & 0x7fffffu);
    if (ex == 0) {
        *e = -149;
    } else {
        fr |= 0x800000L;
        *e = (int)ex - 150;
    }
    *m = (u >> 31) ? -fr : fr;
}
/* hi + lo rounded to the nearest double (ties to even), as its bits. */
ulong sw_ff_bits(float2 v)
{
    uint uh = as_uint(v.x);
    if (((uh >> 23) & 0xffu) == 0xffu)
        return ((ulong)(uh >> 31) << 63) | 0x7ff0000000000000UL |
               ((ulong)(uh & 0x7fffffu) << 29);
    long mh, ml;
    int eh, el;
    sw_ff_split(v.x, &mh, &eh);
    sw_ff_split(v.y, &ml, &el);
    if (mh == 0 && ml == 0)
        return (ulong)(uh >> 31) << 63;
    if (mh == 0 || (ml != 0 && el > eh)) {
        long tm = mh; mh = ml; ml = tm;
        int te = eh; eh = el; el = te;
    }
    long t;
    int e;
    int d = ml == 0 ? 0 : eh - el;
    if (ml == 0) {
        t = mh;
        e = eh;
    } else if (d <= 37) {
        t = mh * (1L << d) + ml;
        e = el;
    } else {
        /* lo lies below the 61 bits kept: shift it down (rounding toward
         * minus infinity) and keep a sticky bit for what was lost. */
        int k = d - 37;
        long q;
        if (k > 40)
            q = ml < 0 ? -1 : 0;
        else if (ml >= 0)
            q = ml >> k;
        else
            q = -((-ml + (1L << k) - 1) >> k);
        int lost = k > 40 ? 1 : (ml - q * (1L << k)) != 0;
        t = (mh * (1L << 37) + q) * 2 + lost;
        e = el + k - 1;
    }
    if (t == 0)
        return 0;
    ulong sign = t < 0 ? (1UL << 63) : 0;
    ulong mag = t < 0 ? (ulong)(-t) : (ulong)t;
    int lz = (int)clz(mag);
    ulong norm = mag << lz;
    ulong m = norm >> 11;
    ulong rem = norm & 0x7ffUL;
    int x2 = e + 63 - lz;
    if (rem > 0x400UL || (rem == 0x400UL && (m & 1UL)))
        m++;
    if (m >> 53) {
        m >>= 1;
        x2++;
    }
    return sign | ((ulong)(x2 + 1023) << 52) | (m & 0xfffffffffffffUL);
}
#define SW_FF(x) ((float2)((x), 0.0f))
#define SW_F16_FF(a, k) SW_FF(SW_LD_F16(a, k))
#define SW_BF16_FF(a, k) SW_FF(SW_LD_BF16(a, k))
#define SW_F_FF(a, k) SW_FF((a)[k])
#define SW_C_FF(a, k) ((float4)((a)[2 * (k)], 0.0f, (a)[2 * (k) + 1], 0.0f))
#define SW_STORE_FF(out, oo, v) sw_store8(out, oo, sw_ff_bits(v))
#define SW_STORE_CFF(out, oo, v)                                    \
    (sw_store8(out, oo, sw_ff_bits((v).xy)),                        \
     sw_store8(out, (oo) + 8, sw_ff_bits((v).zw)))
SW_SUM1(f16, ushort, float2, (float2)(0.0f, 0.0f), SW_F16_FF, sw_ff_add)
SW_SUM1(bf16, ushort, float2, (float2)(0.0f, 0.0f), SW_BF16_FF, sw_ff_add)
SW_SUM1(f32, float, float2, (float2)(0.0f, 0.0f), SW_F_FF, sw_ff_add)
SW_SUM2(d, float2, (float2)(0.0f, 0.0f), sw_ff_add, SW_STORE_FF)
SW_SUM1(c64, float, float4, (float4)(0.0f), SW_C_FF, sw_cff_add)
SW_SUM2(c, float4, (float4)(0.0f), sw_cff_add, SW_STORE_CFF)
#endif
