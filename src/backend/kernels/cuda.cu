/*
 * cuda.cu -- spillway's built-in kernels for the CUDA backend (cuda.c).
 *
 * One CUDA C program, embedded in the library at build time
 * (scripts/embed.py) and compiled by NVRTC at first use for the device's
 * architecture (cuda_nvrtc.c), with --fmad=false: a*x + y rounds twice, as
 * on the host.  It also compiles on its own: nvcc --ptx --fmad=false
 * -arch=compute_80 cuda.cu (the build does so where it finds nvcc).
 *
 * Kernels are extern "C" so that their entry names are plain; cuda.c's
 * tables list those names and each kernel's parameter sizes, and the
 * cuda_nvrtc_ptx test checks the tables against the compiled PTX.  Every
 * kernel runs with SW_THREADS threads per block, which must equal
 * CUDA__THREADS in cuda.c: the sums' order depends on it.
 *
 * Every dtype, with the simulated device's arithmetic bit for bit
 * (src/backend/sim_kernels.c states it once):
 *  - Integers use unsigned types of their width, computed in at least
 *    unsigned int (wrapping arithmetic, the same bits for signed and
 *    unsigned dtypes, which share kernels).
 *  - float16 and bfloat16 are stored as unsigned short and converted by
 *    the bit manipulations below (those of src/backend/elements.h): loaded
 *    to float exactly, computed in float, rounded to nearest even back.
 *    cuda_fp16.h is not used: NVRTC (13.0, checked) finds it only given
 *    -I to a toolkit's include directory, which a machine with just the
 *    driver and libnvrtc lacks, and __float2half_rn is no builtin.
 *    alpha arrives as a float that is already a float16/bfloat16 value.
 *  - Complex numbers are float2 / double2 (x = re, y = im), alpha two
 *    parameters ar, ai, each operation rounded:
 *        SCALE  re = ar*xr - ai*xi            im = ar*xi + ai*xr
 *        AXPY   re = (ar*xr - ai*xi) + yr     im = (ar*xi + ai*xr) + yi
 *  - NVRTC's defaults keep denormals (--ftz=false) and IEEE division and
 *    square root; NaN results may carry another payload than the host's.
 *
 * The helpers section is plain C as well: the CPU stand-in for the driver
 * (tests/cuda/fake_libcuda.c) compiles it with SW_HELPERS_ONLY defined and
 * SW_DEV as `static inline`, so that what it emulates converts float16 and
 * bfloat16 with this very code.
 */
typedef unsigned char sw_u8;
typedef unsigned short sw_u16;
typedef unsigned int sw_u32;
typedef unsigned long long sw_u64;
#define SW_THREADS 256

#ifndef SW_DEV
#define SW_DEV __device__ __forceinline__
#endif

/* ------------------------------------------------------------------------
 * Helpers: float16 and bfloat16 <-> float, by bits
 * ---------------------------------------------------------------------- */

SW_DEV float sw_f16_to_f32(sw_u16 h)
{
    sw_u32 sign = (sw_u32)(h & 0x8000u) << 16;
    sw_u32 e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    sw_u32 u;
    if (e == 0x1fu) {
        u = sign | 0x7f800000u | (m << 13);
    } else if (e != 0) {
        u = sign | ((e + 112u) << 23) | (m << 13);
    } else if (m == 0) {
        u = sign;
    } else { /* subnormal: m * 2^-24, a normal float */
        sw_u32 x = 113u;
        while (!(m & 0x400u)) {
            m <<= 1;
            x--;
        }
        u = sign | (x << 23) | ((m & 0x3ffu) << 13);
    }
    return __uint_as_float(u);
}

SW_DEV sw_u16 sw_f32_to_f16(float f)
{
    sw_u32 u = __float_as_uint(f);
    sw_u32 sign = (u >> 16) & 0x8000u;
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) /* NaN: quiet, the payload's top bits */
        return (sw_u16)(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
    if (u >= 0x47800000u) /* 2^16 and up: infinity */
        return (sw_u16)(sign | 0x7c00u);
    if (u < 0x38800000u) { /* a subnormal of 2^-24 units, or zero */
        sw_u32 e = u >> 23;
        if (e < 102u)
            return (sw_u16)sign;
        sw_u32 m = (u & 0x7fffffu) | 0x800000u;
        sw_u32 shift = 126u - e;
        sw_u32 r = m >> shift, rem = m & ((1u << shift) - 1u);
        sw_u32 tie = 1u << (shift - 1u);
        if (rem > tie || (rem == tie && (r & 1u)))
            r++;
        return (sw_u16)(sign | r);
    }
    sw_u32 r = (u >> 13) - (112u << 10), rem = u & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u)))
        r++;
    return (sw_u16)(sign | r);
}

SW_DEV float sw_bf16_to_f32(sw_u16 b)
{
    return __uint_as_float((sw_u32)b << 16);
}

SW_DEV sw_u16 sw_f32_to_bf16(float f)
{
    sw_u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet */
        return (sw_u16)((u >> 16) | 0x40u);
    return (sw_u16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

#ifndef SW_HELPERS_ONLY

/* ------------------------------------------------------------------------
 * Element-wise kernels
 * ---------------------------------------------------------------------- */

/* Grid-stride loop: any grid covers any n. */
#define SW_LOOP(i, n)                                              \
    for (sw_u64 i = (sw_u64)blockIdx.x * blockDim.x + threadIdx.x;  \
         i < (n); i += (sw_u64)gridDim.x * blockDim.x)

/* FILL and COPY by element size (16-byte elements: FILL as two u64
 * halves, COPY as twice as many u64). */
#define SW_FILL_COPY(S, T)                                         \
extern "C" __global__ void sw_fill_##S(T *out, T alpha, sw_u64 n) \
{ SW_LOOP(i, n) out[i] = alpha; }                                  \
extern "C" __global__ void sw_copy_##S(T *out, const T *a,        \
                                       sw_u64 n)                   \
{ SW_LOOP(i, n) out[i] = a[i]; }
SW_FILL_COPY(u8, sw_u8)
SW_FILL_COPY(u16, sw_u16)
SW_FILL_COPY(u32, sw_u32)
SW_FILL_COPY(u64, sw_u64)
extern "C" __global__ void sw_fill_u128(ulonglong2 *out, sw_u64 lo,
                                        sw_u64 hi, sw_u64 n)
{ SW_LOOP(i, n) out[i] = make_ulonglong2(lo, hi); }

/* No __restrict__: out may be an input (in-place operations).  T is
 * stored, C computed in, A the type of alpha; LD and ST convert. */
#define SW_SAME(x) (x)
#define SW_ARITH(S, T, C, A, LD, ST)                               \
extern "C" __global__ void sw_add_##S(T *out, const T *a,         \
                                      const T *b, sw_u64 n)        \
{ SW_LOOP(i, n) out[i] = (T)ST((C)LD(a[i]) + (C)LD(b[i])); }       \
extern "C" __global__ void sw_scale_##S(T *out, const T *a,       \
                                        A alpha, sw_u64 n)         \
{ SW_LOOP(i, n) out[i] = (T)ST((C)alpha * (C)LD(a[i])); }          \
extern "C" __global__ void sw_axpy_##S(T *out, const T *a,        \
                                       A alpha, sw_u64 n)          \
{ SW_LOOP(i, n) out[i] = (T)ST((C)alpha * (C)LD(a[i]) +            \
                               (C)LD(out[i])); }

SW_ARITH(u8, sw_u8, sw_u32, sw_u8, SW_SAME, SW_SAME)
SW_ARITH(u16, sw_u16, sw_u32, sw_u16, SW_SAME, SW_SAME)
SW_ARITH(u32, sw_u32, sw_u32, sw_u32, SW_SAME, SW_SAME)
SW_ARITH(u64, sw_u64, sw_u64, sw_u64, SW_SAME, SW_SAME)
SW_ARITH(f32, float, float, float, SW_SAME, SW_SAME)
SW_ARITH(f64, double, double, double, SW_SAME, SW_SAME)
SW_ARITH(f16, sw_u16, float, float, sw_f16_to_f32, sw_f32_to_f16)
SW_ARITH(bf16, sw_u16, float, float, sw_bf16_to_f32, sw_f32_to_bf16)

/* Complex: V a float2 or double2, R its part type. */
#define SW_COMPLEX(S, V, R)                                        \
extern "C" __global__ void sw_add_##S(V *out, const V *a,         \
                                      const V *b, sw_u64 n)        \
{                                                                  \
    SW_LOOP(i, n) {                                                \
        V x = a[i], y = b[i], r;                                   \
        r.x = x.x + y.x;                                           \
        r.y = x.y + y.y;                                           \
        out[i] = r;                                                \
    }                                                              \
}                                                                  \
extern "C" __global__ void sw_scale_##S(V *out, const V *a, R ar, \
                                        R ai, sw_u64 n)            \
{                                                                  \
    SW_LOOP(i, n) {                                                \
        V x = a[i], r;                                             \
        r.x = ar * x.x - ai * x.y;                                 \
        r.y = ar * x.y + ai * x.x;                                 \
        out[i] = r;                                                \
    }                                                              \
}                                                                  \
extern "C" __global__ void sw_axpy_##S(V *out, const V *a, R ar,  \
                                       R ai, sw_u64 n)             \
{                                                                  \
    SW_LOOP(i, n) {                                                \
        V x = a[i], y = out[i], r;                                 \
        r.x = (ar * x.x - ai * x.y) + y.x;                         \
        r.y = (ar * x.y + ai * x.x) + y.y;                         \
        out[i] = r;                                                \
    }                                                              \
}
SW_COMPLEX(c64, float2, float)
SW_COMPLEX(c128, double2, double)

/* ------------------------------------------------------------------------
 * Sums
 * ---------------------------------------------------------------------- */

/* A complex accumulator: two float64 sums. */
struct sw_c128 {
    double re, im;
};
__device__ __forceinline__ sw_c128 operator+(sw_c128 x, sw_c128 y)
{
    sw_c128 r;
    r.re = x.re + y.re;
    r.im = x.im + y.im;
    return r;
}

/* A block's sum in a fixed order: a tree over SW_THREADS slots. */
template <typename A>
__device__ A sw_block_sum(A v)
{
    __shared__ A sh[SW_THREADS];
    unsigned t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (unsigned s = SW_THREADS / 2; s > 0; s >>= 1) {
        if (t < s)
            sh[t] = sh[t] + sh[t + s];
        __syncthreads();
    }
    return sh[0];
}

/* Pass 1: block b's partial sum to partials[b].  Thread t of block b
 * adds elements t + b*SW_THREADS + k*gridDim.x*SW_THREADS in order,
 * starting from zero.  Float types accumulate in float64 (elements
 * converted exactly), integers wrap in 64 bits (signed ones
 * sign-extended), bool counts nonzero bytes, complex types add their
 * parts in two float64 sums. */
#define SW_SUM(S, T, A, ZERO, CONV)                                \
extern "C" __global__ void sw_sum_##S(const T *a, sw_u64 n,       \
                                      A *partials)                 \
{                                                                  \
    A acc = ZERO;                                                  \
    SW_LOOP(i, n) acc = acc + CONV(a[i]);                          \
    A total = sw_block_sum<A>(acc);                                \
    if (threadIdx.x == 0)                                          \
        partials[blockIdx.x] = total;                              \
}

#define SW_SEXT(x) ((sw_u64)(long long)(x))
#define SW_ZEXT(x) ((sw_u64)(x))
#define SW_NONZERO(x) ((sw_u64)((x) != 0))
#define SW_F16D(x) ((double)sw_f16_to_f32(x))
#define SW_BF16D(x) ((double)sw_bf16_to_f32(x))
#define SW_D(x) ((double)(x))
SW_SUM(i8, signed char, sw_u64, 0ull, SW_SEXT)
SW_SUM(i16, short, sw_u64, 0ull, SW_SEXT)
SW_SUM(i32, int, sw_u64, 0ull, SW_SEXT)
SW_SUM(u8, sw_u8, sw_u64, 0ull, SW_ZEXT)
SW_SUM(u16, sw_u16, sw_u64, 0ull, SW_ZEXT)
SW_SUM(u32, sw_u32, sw_u64, 0ull, SW_ZEXT)
SW_SUM(u64, sw_u64, sw_u64, 0ull, SW_ZEXT)
SW_SUM(b8, sw_u8, sw_u64, 0ull, SW_NONZERO)
SW_SUM(f16, sw_u16, double, 0.0, SW_F16D)
SW_SUM(bf16, sw_u16, double, 0.0, SW_BF16D)
SW_SUM(f32, float, double, 0.0, SW_D)
SW_SUM(f64, double, double, 0.0, SW_D)

__device__ __forceinline__ sw_c128 sw_c128_of(double re, double im)
{
    sw_c128 r;
    r.re = re;
    r.im = im;
    return r;
}
#define SW_CD(v) sw_c128_of((double)(v).x, (double)(v).y)
SW_SUM(c64, float2, sw_c128, sw_c128_of(0.0, 0.0), SW_CD)
SW_SUM(c128, double2, sw_c128, sw_c128_of(0.0, 0.0), SW_CD)

/* The 8-byte result, wherever out points (a raw launch may give an
 * address that is not 8-byte aligned). */
__device__ void sw_store8(unsigned char *out, sw_u64 bits)
{
    if (((sw_u64)out & 7) == 0) {
        *(sw_u64 *)out = bits;
    } else {
        for (int k = 0; k < 8; k++)
            out[k] = (unsigned char)(bits >> (8 * k));
    }
}

/* Pass 2, one block: the sum of count <= SW_THREADS partials. */
extern "C" __global__ void sw_sum_final_f64(const double *partials,
                                            sw_u32 count,
                                            unsigned char *out)
{
    double v = threadIdx.x < count ? partials[threadIdx.x] : 0.0;
    double total = sw_block_sum<double>(v);
    if (threadIdx.x == 0)
        sw_store8(out, (sw_u64)__double_as_longlong(total));
}

extern "C" __global__ void sw_sum_final_i64(const sw_u64 *partials,
                                            sw_u32 count,
                                            unsigned char *out)
{
    sw_u64 v = threadIdx.x < count ? partials[threadIdx.x] : 0ull;
    sw_u64 total = sw_block_sum<sw_u64>(v);
    if (threadIdx.x == 0)
        sw_store8(out, total);
}

/* A complex128 result: 16 bytes, re then im. */
extern "C" __global__ void sw_sum_final_c128(const sw_c128 *partials,
                                             sw_u32 count,
                                             unsigned char *out)
{
    sw_c128 v = threadIdx.x < count ? partials[threadIdx.x]
                                    : sw_c128_of(0.0, 0.0);
    sw_c128 total = sw_block_sum<sw_c128>(v);
    if (threadIdx.x == 0) {
        sw_store8(out, (sw_u64)__double_as_longlong(total.re));
        sw_store8(out + 8, (sw_u64)__double_as_longlong(total.im));
    }
}

/* ------------------------------------------------------------------------
 * Bytes
 * ---------------------------------------------------------------------- */

/* A pattern of 1, 2, 4, 8 or 16 bytes at any alignment: byte i of the
 * range is byte (i mod psize) of the pattern, lo's bytes then hi's
 * (little-endian). */
extern "C" __global__ void sw_fill_bytes(unsigned char *dst, sw_u64 n,
                                         sw_u64 lo, sw_u64 hi,
                                         sw_u32 psize)
{
    SW_LOOP(i, n) {
        sw_u32 k = (sw_u32)(i % psize);
        dst[i] = (unsigned char)(k < 8 ? lo >> (8 * k) : hi >> (8 * (k - 8)));
    }
}

#endif /* SW_HELPERS_ONLY */
