/*
 * sim_kernels.c -- the simulated device's built-in kernels, run on the
 * host by a queue's worker once sim.c has proven every operand lies inside
 * a live allocation.  Every dtype, every kernel.
 *
 * The divisions of this file, in order:
 *   - Element-wise kernels: integers, float32 and float64, float16 and
 *     bfloat16, complex64 and complex128.
 *   - Sums.
 *   - Byte fills.
 *   - The dispatcher, sw__sim_kernel_run.
 *
 * These are the reference the other backends' kernels follow bit for bit
 * (kernels/opencl.cl, kernels/cuda.cu; docs/opencl.md, docs/cuda.md):
 *  - Integers compute in unsigned types of their width (at least unsigned
 *    int), so arithmetic wraps without undefined behaviour; signed and
 *    unsigned dtypes of one width share a kernel (the same bits).
 *  - float16 and bfloat16 load to float32 (exact), compute in float32 and
 *    round to nearest even back (elements.h: the conversions and their
 *    rules for NaN, infinities and subnormals).  AXPY rounds to float32
 *    twice (alpha * x, then + y) and to the element type once.
 *  - alpha and fill values become one element of the dtype first, rounding
 *    once (elements.h): float16 alpha 0.1 is the float16 nearest 0.1.
 *  - Complex, with alpha = ar + i ai and x = xr + i xi, in the precision of
 *    the parts, each operation rounded, no fused multiply-add:
 *        SCALE  re = ar*xr - ai*xi            im = ar*xi + ai*xr
 *        AXPY   re = (ar*xr - ai*xi) + yr     im = (ar*xi + ai*xr) + yi
 *        ADD    re = xr + yr                  im = xi + yi
 *    (no special cases for infinities and NaNs, unlike C99's Annex G).
 *  - SUM is sequential here, element 0 first, from 0: float types in a
 *    float64 (elements converted exactly), complex types in two (the real
 *    and imaginary parts, each in that order), signed integers
 *    sign-extended into a wrapping int64, unsigned ones into a wrapping
 *    uint64, bool a count of nonzero bytes.  Other backends add in their
 *    own fixed orders (trees): the same integers, float results within
 *    rounding of each other.
 *
 * The build compiles C11 without fast-math, so floating-point expressions
 * are evaluated as written (GCC contracts to FMA only in GNU C modes).
 */
#include "backend.h"
#include "elements.h"
#include "sim_internal.h"

#include <stdint.h>
#include <string.h>

/* GCC's -O2 cost model vectorizes no loop whose trip count is unknown;
 * these loops are the device's arithmetic and worth it. */
#if defined(__GNUC__) && !defined(__clang__)
#define SIM__VECTORIZE __attribute__((optimize("vect-cost-model=dynamic")))
#else
#define SIM__VECTORIZE
#endif

/* ------------------------------------------------------------------------
 * Element-wise kernels.  Each exists twice: restrict-qualified
 * (vectorizable) for operands that do not overlap the output, and plain
 * for in-place use (out == a), where element i only depends on element i
 * (every input of it is read before it is written), so both give the same
 * results.
 * ---------------------------------------------------------------------- */

/* Storage type T, computed in C: elements load as C, the result converts
 * back to T (for integers narrower than C, the low bits: wrap-around). */
#define SIM__EW(NAME, T, C, Q)                                                \
    SIM__VECTORIZE static void NAME(sw_kernel k, void *Q out_,                \
                                    const void *Q a_, const void *Q b_,       \
                                    const unsigned char *alpha_, size_t n)    \
    {                                                                         \
        T *out = out_;                                                        \
        const T *a = a_;                                                      \
        const T *b = b_;                                                      \
        T alpha_t;                                                            \
        memcpy(&alpha_t, alpha_, sizeof alpha_t);                             \
        C alpha = (C)alpha_t;                                                 \
        switch (k) {                                                          \
        case SW_KERNEL_ADD:                                                   \
            for (size_t i = 0; i < n; i++)                                    \
                out[i] = (T)((C)a[i] + (C)b[i]);                              \
            break;                                                            \
        case SW_KERNEL_SCALE:                                                 \
            for (size_t i = 0; i < n; i++)                                    \
                out[i] = (T)(alpha * (C)a[i]);                                \
            break;                                                            \
        case SW_KERNEL_AXPY:                                                  \
            for (size_t i = 0; i < n; i++)                                    \
                out[i] = (T)(alpha * (C)a[i] + (C)out[i]);                    \
            break;                                                            \
        default:                                                              \
            break;                                                            \
        }                                                                     \
    }

SIM__EW(sim__ew_u8, uint8_t, unsigned, restrict)
SIM__EW(sim__ew_u8_alias, uint8_t, unsigned, )
SIM__EW(sim__ew_u16, uint16_t, unsigned, restrict)
SIM__EW(sim__ew_u16_alias, uint16_t, unsigned, )
SIM__EW(sim__ew_u32, uint32_t, uint32_t, restrict)
SIM__EW(sim__ew_u32_alias, uint32_t, uint32_t, )
SIM__EW(sim__ew_u64, uint64_t, uint64_t, restrict)
SIM__EW(sim__ew_u64_alias, uint64_t, uint64_t, )
SIM__EW(sim__ew_f32, float, float, restrict)
SIM__EW(sim__ew_f32_alias, float, float, )
SIM__EW(sim__ew_f64, double, double, restrict)
SIM__EW(sim__ew_f64_alias, double, double, )

/* float16 and bfloat16: LD widens an element to float32, ST rounds one
 * back; alpha is one element (already rounded to the type). */
#define SIM__EW_HALF(NAME, LD, ST, Q)                                         \
    SIM__VECTORIZE static void NAME(sw_kernel k, void *Q out_,                \
                                    const void *Q a_, const void *Q b_,       \
                                    const unsigned char *alpha_, size_t n)    \
    {                                                                         \
        uint16_t *out = out_;                                                 \
        const uint16_t *a = a_;                                               \
        const uint16_t *b = b_;                                               \
        uint16_t alpha_h;                                                     \
        memcpy(&alpha_h, alpha_, 2);                                          \
        float alpha = LD(alpha_h);                                            \
        switch (k) {                                                          \
        case SW_KERNEL_ADD:                                                   \
            for (size_t i = 0; i < n; i++)                                    \
                out[i] = ST(LD(a[i]) + LD(b[i]));                             \
            break;                                                            \
        case SW_KERNEL_SCALE:                                                 \
            for (size_t i = 0; i < n; i++)                                    \
                out[i] = ST(alpha * LD(a[i]));                                \
            break;                                                            \
        case SW_KERNEL_AXPY:                                                  \
            for (size_t i = 0; i < n; i++)                                    \
                out[i] = ST(alpha * LD(a[i]) + LD(out[i]));                   \
            break;                                                            \
        default:                                                              \
            break;                                                            \
        }                                                                     \
    }

SIM__EW_HALF(sim__ew_f16, sw__f16_to_f32, sw__f32_to_f16, restrict)
SIM__EW_HALF(sim__ew_f16_alias, sw__f16_to_f32, sw__f32_to_f16, )
SIM__EW_HALF(sim__ew_bf16, sw__bf16_to_f32, sw__f32_to_bf16, restrict)
SIM__EW_HALF(sim__ew_bf16_alias, sw__bf16_to_f32, sw__f32_to_bf16, )

/* Complex numbers as (re, im) pairs of R, the formulas of the file
 * comment; both parts of element i are read before either is written. */
#define SIM__EW_COMPLEX(NAME, R, Q)                                           \
    SIM__VECTORIZE static void NAME(sw_kernel k, void *Q out_,                \
                                    const void *Q a_, const void *Q b_,       \
                                    const unsigned char *alpha_, size_t n)    \
    {                                                                         \
        R *out = out_;                                                        \
        const R *a = a_;                                                      \
        const R *b = b_;                                                      \
        R al[2];                                                              \
        memcpy(al, alpha_, sizeof al);                                        \
        R ar = al[0], ai = al[1];                                             \
        switch (k) {                                                          \
        case SW_KERNEL_ADD:                                                   \
            for (size_t i = 0; i < n; i++) {                                  \
                R re = a[2 * i] + b[2 * i];                                   \
                R im = a[2 * i + 1] + b[2 * i + 1];                           \
                out[2 * i] = re;                                              \
                out[2 * i + 1] = im;                                          \
            }                                                                 \
            break;                                                            \
        case SW_KERNEL_SCALE:                                                 \
            for (size_t i = 0; i < n; i++) {                                  \
                R xr = a[2 * i], xi = a[2 * i + 1];                           \
                R re = ar * xr - ai * xi;                                     \
                R im = ar * xi + ai * xr;                                     \
                out[2 * i] = re;                                              \
                out[2 * i + 1] = im;                                          \
            }                                                                 \
            break;                                                            \
        case SW_KERNEL_AXPY:                                                  \
            for (size_t i = 0; i < n; i++) {                                  \
                R xr = a[2 * i], xi = a[2 * i + 1];                           \
                R yr = out[2 * i], yi = out[2 * i + 1];                       \
                R re = (ar * xr - ai * xi) + yr;                              \
                R im = (ar * xi + ai * xr) + yi;                              \
                out[2 * i] = re;                                              \
                out[2 * i + 1] = im;                                          \
            }                                                                 \
            break;                                                            \
        default:                                                              \
            break;                                                            \
        }                                                                     \
    }

SIM__EW_COMPLEX(sim__ew_c64, float, restrict)
SIM__EW_COMPLEX(sim__ew_c64_alias, float, )
SIM__EW_COMPLEX(sim__ew_c128, double, restrict)
SIM__EW_COMPLEX(sim__ew_c128_alias, double, )

typedef void (*sim__ew_fn)(sw_kernel, void *, const void *, const void *,
                           const unsigned char *, size_t);

/* Per dtype: the plain and the in-place variant (NULL for bool, which has
 * no arithmetic: the core refuses it). */
static const struct {
    sim__ew_fn plain, alias;
} sim__ew[SW_DTYPE_COUNT] = {
    [SW_FLOAT32] = {sim__ew_f32, sim__ew_f32_alias},
    [SW_FLOAT64] = {sim__ew_f64, sim__ew_f64_alias},
    [SW_INT32] = {sim__ew_u32, sim__ew_u32_alias},
    [SW_INT64] = {sim__ew_u64, sim__ew_u64_alias},
    [SW_INT8] = {sim__ew_u8, sim__ew_u8_alias},
    [SW_INT16] = {sim__ew_u16, sim__ew_u16_alias},
    [SW_UINT8] = {sim__ew_u8, sim__ew_u8_alias},
    [SW_UINT16] = {sim__ew_u16, sim__ew_u16_alias},
    [SW_UINT32] = {sim__ew_u32, sim__ew_u32_alias},
    [SW_UINT64] = {sim__ew_u64, sim__ew_u64_alias},
    [SW_FLOAT16] = {sim__ew_f16, sim__ew_f16_alias},
    [SW_BFLOAT16] = {sim__ew_bf16, sim__ew_bf16_alias},
    [SW_COMPLEX64] = {sim__ew_c64, sim__ew_c64_alias},
    [SW_COMPLEX128] = {sim__ew_c128, sim__ew_c128_alias},
};

/* ------------------------------------------------------------------------
 * Sums: sequential, one fixed order, so results are reproducible.  The
 * result is stored byte-wise (out need not be aligned).
 * ---------------------------------------------------------------------- */

/* Integers: each element widened by CONV to 64 bits, added wrapping. */
#define SIM__SUM_INT(NAME, T, CONV)                                           \
    static void NAME(const void *a_, size_t n, unsigned char *out)           \
    {                                                                         \
        const T *a = a_;                                                      \
        uint64_t s = 0;                                                       \
        for (size_t i = 0; i < n; i++)                                        \
            s += CONV(a[i]);                                                  \
        memcpy(out, &s, 8);                                                   \
    }
#define SIM__SEXT(x) ((uint64_t)(int64_t)(x))
#define SIM__ZEXT(x) ((uint64_t)(x))
#define SIM__NONZERO(x) ((uint64_t)((x) != 0))
SIM__SUM_INT(sim__sum_i8, int8_t, SIM__SEXT)
SIM__SUM_INT(sim__sum_i16, int16_t, SIM__SEXT)
SIM__SUM_INT(sim__sum_i32, int32_t, SIM__SEXT)
SIM__SUM_INT(sim__sum_u8, uint8_t, SIM__ZEXT)
SIM__SUM_INT(sim__sum_u16, uint16_t, SIM__ZEXT)
SIM__SUM_INT(sim__sum_u32, uint32_t, SIM__ZEXT)
SIM__SUM_INT(sim__sum_u64, uint64_t, SIM__ZEXT)
SIM__SUM_INT(sim__sum_bool, uint8_t, SIM__NONZERO)

/* Float types: each element converted exactly to a double, added in
 * order. */
#define SIM__SUM_FLOAT(NAME, T, CONV)                                         \
    static void NAME(const void *a_, size_t n, unsigned char *out)           \
    {                                                                         \
        const T *a = a_;                                                      \
        double s = 0.0;                                                       \
        for (size_t i = 0; i < n; i++)                                        \
            s += (double)CONV(a[i]);                                          \
        memcpy(out, &s, 8);                                                   \
    }
#define SIM__SAME(x) (x)
SIM__SUM_FLOAT(sim__sum_f16, uint16_t, sw__f16_to_f32)
SIM__SUM_FLOAT(sim__sum_bf16, uint16_t, sw__bf16_to_f32)
SIM__SUM_FLOAT(sim__sum_f32, float, SIM__SAME)
SIM__SUM_FLOAT(sim__sum_f64, double, SIM__SAME)

/* Complex: the real and the imaginary parts, each as a float sum, into a
 * complex128 (16 bytes: re, then im). */
#define SIM__SUM_COMPLEX(NAME, R)                                             \
    static void NAME(const void *a_, size_t n, unsigned char *out)           \
    {                                                                         \
        const R *a = a_;                                                      \
        double s[2] = {0.0, 0.0};                                             \
        for (size_t i = 0; i < n; i++) {                                      \
            s[0] += (double)a[2 * i];                                         \
            s[1] += (double)a[2 * i + 1];                                     \
        }                                                                     \
        memcpy(out, s, 16);                                                   \
    }
SIM__SUM_COMPLEX(sim__sum_c64, float)
SIM__SUM_COMPLEX(sim__sum_c128, double)

typedef void (*sim__sum_fn)(const void *, size_t, unsigned char *);

static const sim__sum_fn sim__sum[SW_DTYPE_COUNT] = {
    [SW_FLOAT32] = sim__sum_f32,   [SW_FLOAT64] = sim__sum_f64,
    [SW_INT32] = sim__sum_i32,     [SW_INT64] = sim__sum_u64,
    [SW_BOOL] = sim__sum_bool,     [SW_INT8] = sim__sum_i8,
    [SW_INT16] = sim__sum_i16,     [SW_UINT8] = sim__sum_u8,
    [SW_UINT16] = sim__sum_u16,    [SW_UINT32] = sim__sum_u32,
    [SW_UINT64] = sim__sum_u64,    [SW_FLOAT16] = sim__sum_f16,
    [SW_BFLOAT16] = sim__sum_bf16, [SW_COMPLEX64] = sim__sum_c64,
    [SW_COMPLEX128] = sim__sum_c128,
};

/* ------------------------------------------------------------------------
 * Byte fills
 * ---------------------------------------------------------------------- */

/* Repeat a psize-byte pattern over n bytes (n a multiple of psize) by
 * doubling what is already written, in chunks small enough that the source
 * stays in cache. */
void sw__sim_fill_bytes(unsigned char *dst, size_t n,
                        const unsigned char *pat, size_t psize)
{
    int uniform = 1;
    for (size_t i = 1; i < psize; i++)
        uniform &= pat[i] == pat[0];
    if (uniform) {
        memset(dst, pat[0], n);
        return;
    }
    memcpy(dst, pat, psize < n ? psize : n);
    size_t done = psize;
    while (done < n) {
        size_t chunk = done < 65536 ? done : 65536;
        if (chunk > n - done)
            chunk = n - done;
        memcpy(dst + done, dst, chunk);
        done += chunk;
    }
}

/* ------------------------------------------------------------------------
 * The dispatcher
 * ---------------------------------------------------------------------- */

static int sim__overlaps(uintptr_t x, uintptr_t y, size_t len)
{
    return x < y + len && y < x + len;
}

void sw__sim_kernel_run(const sw_kernel_args *k)
{
    size_t es = sw_dtype_size(k->dtype);
    size_t bytes = k->n * es;
    uintptr_t out = k->out.base + k->out.offset;
    uintptr_t a = k->a.base + k->a.offset;
    uintptr_t b = k->b.base + k->b.offset;
    void *po = (void *)out;
    const void *pa = (const void *)a, *pb = (const void *)b;
    unsigned char alpha[16];
    sw__element_bytes(k->dtype, k->alpha, alpha);
    switch (k->kernel) {
    case SW_KERNEL_FILL:
        sw__sim_fill_bytes(po, bytes, alpha, es);
        return;
    case SW_KERNEL_COPY:
        memmove(po, pa, bytes);
        return;
    case SW_KERNEL_SUM:
        sim__sum[k->dtype](pa, k->n, po);
        return;
    default:
        break;
    }
    /* ADD, SCALE, AXPY (never bool: the core refuses it). */
    if (sim__ew[k->dtype].plain == NULL)
        return;
    int alias = sim__overlaps(out, a, bytes) ||
                (k->kernel == SW_KERNEL_ADD && sim__overlaps(out, b, bytes));
    (alias ? sim__ew[k->dtype].alias : sim__ew[k->dtype].plain)(
        k->kernel, po, pa, pb, alpha, k->n);
}
