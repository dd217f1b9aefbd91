/*
 * opencl.cl -- spillway's built-in kernels for the OpenCL backend
 * (opencl.c), OpenCL C 1.2.
 *
 * Embedded in the library at build time (scripts/embed.py) and built once
 * per device when it is opened, with -cl-std=CL1.2 -DSW_RED_L=<the
 * reduction work-group size, a power of two> and, on devices with
 * cl_khr_fp64 (unless SPILLWAY_OPENCL_FP64=0), -DSW_FP64=1.  opencl.c's
 * table lists the entry names it looks up; the file comment there gives
 * the order in which SUM adds, which the code below follows.
 *
 * Element-wise kernels take one element per work-item and buffer offsets
 * as arguments (OpenCL 1.2 has no pointer arithmetic on cl_mem, and
 * sub-buffers have alignment rules).  Integer kernels use unsigned types,
 * so arithmetic wraps.
 */
#pragma OPENCL FP_CONTRACT OFF
#ifdef SW_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

/* Element-wise kernels: one element per work-item, one signature for all of
 * them (unused operands are ignored).  Offsets are in elements.  No
 * restrict: o may be a (in-place), and element i only depends on element
 * i. */
#define SW_EW(NAME, T, EXPR)                                        \
__kernel void NAME(__global T *o, ulong oo, __global const T *a,    \
                   ulong ao, __global const T *b, ulong bo,         \
                   T alpha, ulong n)                                \
{                                                                   \
    ulong i = get_global_id(0);                                     \
    if (i < n)                                                      \
        o[oo + i] = EXPR;                                           \
}
#define SW_ARITH(S, T)                                              \
    SW_EW(sw_add_##S, T, a[ao + i] + b[bo + i])                     \
    SW_EW(sw_scale_##S, T, alpha * a[ao + i])                       \
    SW_EW(sw_axpy_##S, T, alpha * a[ao + i] + o[oo + i])
SW_EW(sw_fill_u32, uint, alpha)
SW_EW(sw_fill_u64, ulong, alpha)
SW_EW(sw_copy_u32, uint, a[ao + i])
SW_EW(sw_copy_u64, ulong, a[ao + i])
SW_ARITH(f32, float)
SW_ARITH(u32, uint)
SW_ARITH(u64, ulong)
#ifdef SW_FP64
SW_ARITH(f64, double)
#endif

/* Bytes: a pattern fill at any offset (pattern byte k is bits 8k..8k+7 of
 * pat), and an overlapping move, run by one work-item in the direction
 * that is safe. */
__kernel void sw_fill_bytes(__global uchar *o, ulong oo, ulong pat,
                            uint psize, ulong n)
{
    ulong i = get_global_id(0);
    if (i < n)
        o[oo + i] = (uchar)(pat >> (8 * (i % psize)));
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

/* Sums: see opencl.c's file comment for the order.  ACC is the
 * accumulator, CONV reads one element into it, ADD combines two
 * accumulators. */
#define SW_PLUS(x, y) ((x) + (y))
#define SW_SUM1(S, T, ACC, ZERO, CONV, ADD)                          \
__kernel void sw_sum1_##S(__global const T *a, ulong ao, ulong n,   \
                          ulong tiles, __global ACC *part)          \
{                                                                   \
    __local ACC s[SW_RED_L];                                        \
    uint j = (uint)get_local_id(0);                                 \
    ulong lo = (ulong)get_group_id(0) * tiles * SW_RED_L;           \
    ulong hi = min(lo + tiles * SW_RED_L, n);                       \
    ACC acc = ZERO;                                                 \
    for (ulong i = lo + j; i < hi; i += SW_RED_L)                   \
        acc = ADD(acc, CONV(a[ao + i]));                            \
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
#define SW_SUM2(S, ACC, ZERO, ADD, BITS)                            \
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
        sw_store8(out, oo, BITS(s[0]));                             \
}
#define SW_U64(x) ((ulong)(x))
#define SW_SEXT(x) ((ulong)(long)(x))
SW_SUM1(i32, int, ulong, 0, SW_SEXT, SW_PLUS)
SW_SUM1(i64, ulong, ulong, 0, SW_U64, SW_PLUS)
SW_SUM2(u, ulong, 0, SW_PLUS, SW_U64)

#ifdef SW_FP64
#define SW_F2D(x) ((double)(x))
SW_SUM1(f32, float, double, 0.0, SW_F2D, SW_PLUS)
SW_SUM1(f64, double, double, 0.0, SW_F2D, SW_PLUS)
SW_SUM2(d, double, 0.0, SW_PLUS, as_ulong)
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
#define SW_FF(x) ((float2)((x), 0.0f))
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
SW_SUM1(f32, float, float2, (float2)(0.0f, 0.0f), SW_FF, sw_ff_add)
SW_SUM2(d, float2, (float2)(0.0f, 0.0f), sw_ff_add, sw_ff_bits)
#endif
