/*
 * test-dtypes.c -- the dtype x kernel matrix: every dtype the device under
 * test declares (sw_device_dtypes) through every built-in kernel, against
 * references computed here, on whatever device the suite runs (sim:0,
 * opencl:0, cuda:0 through the stand-in driver).
 *
 * The references are written independently of the library: float16 and
 * bfloat16 are decoded with ldexp and rounded with rint on doubles (not
 * the bit manipulations of src/backend/elements.h and the kernels), and
 * complex arithmetic follows the formula the kernels state:
 *     SCALE  re = ar*xr - ai*xi            im = ar*xi + ai*xr
 *     AXPY   re = (ar*xr - ai*xi) + yr     im = (ar*xi + ai*xr) + yi
 * each operation rounded in the parts' precision.
 *
 * What is asserted, on every backend alike:
 *  - element-wise results (FILL, COPY, ADD, SCALE, AXPY) are the
 *    reference's bits exactly -- so every backend gives the same bits --
 *    except that where the reference is a NaN any NaN passes (payloads
 *    differ between processors' arithmetic);
 *  - SUM of integers and bool is exact (wrapping); SUM of float and
 *    complex data whose every partial sum is exact (small multiples of
 *    powers of two) is the
 *    reference's bits whatever the order of the additions; with infinities
 *    and NaNs, the IEEE result.  Float sums of arbitrary data are only
 *    within rounding of each other across backends (each adds in its own
 *    fixed order); the simulated device adds sequentially, which
 *    dtypes_sum_order_sim checks bit for bit.
 * Inputs mix random values with the edges: NaN, infinities, -0.0,
 * subnormals, the largest finite values, integer limits (so arithmetic
 * wraps), bool bytes other than 0 and 1.  Sizes 0, 1, and counts that are
 * not multiples of any block or vector width; views at aligned offsets
 * work, typed operands at unaligned ones are refused by the core, FILL and
 * COPY at any offset write the right bytes.  Dtypes outside the mask are
 * SW_ERR_DTYPE naming the device.
 */
#include "test.h"
#include "tests.h"

#include <float.h>
#include <math.h>

#define SLACK 24
#define MAXES 16

static const size_t sizes[] = {0, 1, 2, 3, 5, 31, 255, 257, 1000, 4099};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    ASSERT_NOT_NULL(p);
    return p;
}

static sw_dtype_kind kind_of(sw_dtype dt)
{
    sw_dtype_kind k = SW_KIND_INT;
    ASSERT_OK(sw_dtype_kind_get(dt, &k));
    return k;
}

static uint32_t device_mask(sw_device *dev)
{
    uint32_t mask = 0;
    ASSERT_OK(sw_device_dtypes(dev, &mask));
    return mask;
}

/* ------------------------------------------------------------------------
 * Reference float16 / bfloat16, by arithmetic on doubles
 * ---------------------------------------------------------------------- */

typedef struct ref_fmt {
    int frac;    /* fraction bits */
    int bias;    /* exponent bias */
    int expmask; /* the all-ones exponent field */
} ref_fmt;
static const ref_fmt F16 = {10, 15, 31}, BF16 = {7, 127, 255};

static const ref_fmt *fmt_of(sw_dtype dt)
{
    return dt == SW_FLOAT16 ? &F16 : &BF16;
}

static double ref_decode(const ref_fmt *f, uint16_t h)
{
    int e = (h >> f->frac) & f->expmask;
    int m = h & ((1 << f->frac) - 1);
    double v;
    if (e == f->expmask)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp(m, 1 - f->bias - f->frac);
    else
        v = ldexp(m + (1 << f->frac), e - f->bias - f->frac);
    return (h & 0x8000) ? -v : v;
}

/* x rounded once to the format, to nearest, ties to even (rint in the
 * default rounding mode). */
static uint16_t ref_encode(const ref_fmt *f, double x)
{
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    uint16_t inf = (uint16_t)(f->expmask << f->frac);
    if (isnan(x))
        return (uint16_t)(sign | inf | (1 << (f->frac - 1)));
    double a = fabs(x);
    if (isinf(a))
        return sign | inf;
    int emin = 1 - f->bias;
    if (a < ldexp(1, emin)) /* subnormal units; 2^frac is the least normal */
        return (uint16_t)(sign | (uint16_t)rint(ldexp(a, f->frac - emin)));
    int k;
    frexp(a, &k);
    int e = k - 1; /* a in [2^e, 2^(e+1)) */
    double q = rint(ldexp(a, f->frac - e));
    if (q == ldexp(1, f->frac + 1)) {
        q /= 2;
        e++;
    }
    if (e + f->bias >= f->expmask)
        return sign | inf;
    return (uint16_t)(sign | ((e + f->bias) << f->frac) |
                      ((int)q - (1 << f->frac)));
}

static int half_is_nan(const ref_fmt *f, uint16_t h)
{
    return ((h >> f->frac) & f->expmask) == f->expmask &&
           (h & ((1 << f->frac) - 1)) != 0;
}

/* ------------------------------------------------------------------------
 * Elements as bytes
 * ---------------------------------------------------------------------- */

static uint64_t ld_u(const unsigned char *p, size_t es)
{
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64 = 0;
    switch (es) {
    case 1: memcpy(&u8, p, 1); return u8;
    case 2: memcpy(&u16, p, 2); return u16;
    case 4: memcpy(&u32, p, 4); return u32;
    default: memcpy(&u64, p, 8); return u64;
    }
}

static void st_u(unsigned char *p, size_t es, uint64_t v)
{
    uint8_t u8 = (uint8_t)v;
    uint16_t u16 = (uint16_t)v;
    uint32_t u32 = (uint32_t)v;
    switch (es) {
    case 1: memcpy(p, &u8, 1); break;
    case 2: memcpy(p, &u16, 2); break;
    case 4: memcpy(p, &u32, 4); break;
    default: memcpy(p, &v, 8); break;
    }
}

static float ld_f(const unsigned char *p)
{
    float f;
    memcpy(&f, p, 4);
    return f;
}

static double ld_d(const unsigned char *p)
{
    double d;
    memcpy(&d, p, 8);
    return d;
}

static void st_f(unsigned char *p, float f) { memcpy(p, &f, 4); }
static void st_d(unsigned char *p, double d) { memcpy(p, &d, 8); }

/* The scalar as one element, by the header's rules, written here. */
static void ref_element(sw_dtype dt, sw_scalar v, unsigned char *out)
{
    size_t es = sw_dtype_size(dt);
    switch (dt) {
    case SW_FLOAT32: st_f(out, (float)v.f); break;
    case SW_FLOAT64: st_d(out, v.f); break;
    case SW_FLOAT16:
    case SW_BFLOAT16: st_u(out, 2, ref_encode(fmt_of(dt), v.f)); break;
    case SW_COMPLEX64:
        st_f(out, (float)v.c.re);
        st_f(out + 4, (float)v.c.im);
        break;
    case SW_COMPLEX128:
        st_d(out, v.c.re);
        st_d(out + 8, v.c.im);
        break;
    case SW_BOOL: out[0] = v.i != 0; break;
    default:
        st_u(out, es, kind_of(dt) == SW_KIND_UINT ? v.u : (uint64_t)v.i);
        break;
    }
}

/* One element of kernel k: x from a, y from b (ADD) or out (AXPY). */
static void ref_elem(sw_kernel k, sw_dtype dt, const unsigned char *x,
                     const unsigned char *y, sw_scalar alpha,
                     unsigned char *res)
{
    size_t es = sw_dtype_size(dt);
    unsigned char al[MAXES];
    ref_element(dt, alpha, al);
    if (y == NULL) /* SCALE: no second operand */
        y = x;
    if (k == SW_KERNEL_FILL) {
        memcpy(res, al, es);
        return;
    }
    if (k == SW_KERNEL_COPY) {
        memcpy(res, x, es);
        return;
    }
    switch (dt) {
    case SW_FLOAT32: {
        float a = ld_f(al), fx = ld_f(x), fy = ld_f(y), p, r;
        if (k == SW_KERNEL_ADD) {
            r = fx + fy;
        } else if (k == SW_KERNEL_SCALE) {
            r = a * fx;
        } else {
            p = a * fx;
            r = p + fy;
        }
        st_f(res, r);
        return;
    }
    case SW_FLOAT64: {
        double a = ld_d(al), fx = ld_d(x), fy = ld_d(y), p, r;
        if (k == SW_KERNEL_ADD) {
            r = fx + fy;
        } else if (k == SW_KERNEL_SCALE) {
            r = a * fx;
        } else {
            p = a * fx;
            r = p + fy;
        }
        st_d(res, r);
        return;
    }
    case SW_FLOAT16:
    case SW_BFLOAT16: {
        const ref_fmt *f = fmt_of(dt);
        float a = (float)ref_decode(f, (uint16_t)ld_u(al, 2));
        float fx = (float)ref_decode(f, (uint16_t)ld_u(x, 2));
        float fy = (float)ref_decode(f, (uint16_t)ld_u(y, 2));
        float p, r;
        if (k == SW_KERNEL_ADD) {
            r = fx + fy;
        } else if (k == SW_KERNEL_SCALE) {
            r = a * fx;
        } else {
            p = a * fx;
            r = p + fy;
        }
        st_u(res, 2, ref_encode(f, r));
        return;
    }
    case SW_COMPLEX64: {
        float ar = ld_f(al), ai = ld_f(al + 4);
        float xr = ld_f(x), xi = ld_f(x + 4), yr = ld_f(y), yi = ld_f(y + 4);
        float re, im;
        if (k == SW_KERNEL_ADD) {
            re = xr + yr;
            im = xi + yi;
        } else {
            float p1 = ar * xr, p2 = ai * xi, p3 = ar * xi, p4 = ai * xr;
            re = p1 - p2;
            im = p3 + p4;
            if (k == SW_KERNEL_AXPY) {
                re = re + yr;
                im = im + yi;
            }
        }
        st_f(res, re);
        st_f(res + 4, im);
        return;
    }
    case SW_COMPLEX128: {
        double ar = ld_d(al), ai = ld_d(al + 8);
        double xr = ld_d(x), xi = ld_d(x + 8), yr = ld_d(y), yi = ld_d(y + 8);
        double re, im;
        if (k == SW_KERNEL_ADD) {
            re = xr + yr;
            im = xi + yi;
        } else {
            double p1 = ar * xr, p2 = ai * xi, p3 = ar * xi, p4 = ai * xr;
            re = p1 - p2;
            im = p3 + p4;
            if (k == SW_KERNEL_AXPY) {
                re = re + yr;
                im = im + yi;
            }
        }
        st_d(res, re);
        st_d(res + 8, im);
        return;
    }
    case SW_BOOL:
        FAIL("bool has no kernel %s", sw_kernel_name(k));
        return;
    default: { /* integers: wrapping, in the element's width */
        uint64_t a = ld_u(al, es), ux = ld_u(x, es), uy = ld_u(y, es), r;
        if (k == SW_KERNEL_ADD)
            r = ux + uy;
        else if (k == SW_KERNEL_SCALE)
            r = a * ux;
        else
            r = a * ux + uy;
        st_u(res, es, r);
        return;
    }
    }
}

/* Equal as the matrix means it: the same bytes, except that a NaN (per
 * float part) matches any NaN. */
static int elem_matches(sw_dtype dt, const unsigned char *got,
                        const unsigned char *want)
{
    size_t es = sw_dtype_size(dt);
    switch (dt) {
    case SW_FLOAT32:
    case SW_COMPLEX64:
        for (size_t p = 0; p < es; p += 4) {
            float w = ld_f(want + p), g = ld_f(got + p);
            if (isnan(w) ? !isnan(g) : memcmp(got + p, want + p, 4) != 0)
                return 0;
        }
        return 1;
    case SW_FLOAT64:
    case SW_COMPLEX128:
        for (size_t p = 0; p < es; p += 8) {
            double w = ld_d(want + p), g = ld_d(got + p);
            if (isnan(w) ? !isnan(g) : memcmp(got + p, want + p, 8) != 0)
                return 0;
        }
        return 1;
    case SW_FLOAT16:
    case SW_BFLOAT16: {
        uint16_t w = (uint16_t)ld_u(want, 2), g = (uint16_t)ld_u(got, 2);
        if (half_is_nan(fmt_of(dt), w))
            return half_is_nan(fmt_of(dt), g);
        return w == g;
    }
    default:
        return memcmp(got, want, es) == 0;
    }
}

static void hex(char *buf, size_t len, const unsigned char *p, size_t n)
{
    buf[0] = '\0';
    for (size_t i = 0; i < n && 2 * i + 3 <= len; i++)
        snprintf(buf + 2 * i, len - 2 * i, "%02x", p[n - 1 - i]);
}

static void expect_elems(sw_dtype dt, const char *what, size_t n,
                         const unsigned char *got, const unsigned char *want,
                         const unsigned char *in)
{
    size_t es = sw_dtype_size(dt);
    for (size_t i = 0; i < n; i++) {
        if (!elem_matches(dt, got + i * es, want + i * es)) {
            char g[40], w[40], x[40] = "";
            hex(g, sizeof g, got + i * es, es);
            hex(w, sizeof w, want + i * es, es);
            if (in)
                hex(x, sizeof x, in + i * es, es);
            FAIL("%s %s n=%zu: element %zu is 0x%s, expected 0x%s "
                 "(input 0x%s)",
                 sw_dtype_name(dt), what, n, i, g, w, x);
        }
    }
}

/* ------------------------------------------------------------------------
 * Inputs
 * ---------------------------------------------------------------------- */

/* A float32 or float64 value: mostly moderate with full mantissas, every
 * 8th an edge. */
static double gen_float(uint64_t *st, size_t i, int dbl)
{
    static const double edges32[] = {0.0, -0.0, INFINITY, -INFINITY, NAN,
                                     1e-45, -1.2e-40, FLT_MAX, -FLT_MIN,
                                     3.0e38, 1.0};
    static const double edges64[] = {0.0, -0.0, INFINITY, -INFINITY, NAN,
                                     5e-324, -2.5e-310, DBL_MAX, -DBL_MIN,
                                     1.5e308, 1.0};
    uint64_t r = test_rand(st);
    if (i % 8 == 7) {
        size_t k = (size_t)(r % 11);
        return dbl ? edges64[k] : edges32[k];
    }
    double m = (double)(int64_t)(r >> 11) / 4503599627370496.0; /* +-1 */
    return ldexp(m, (int)((r >> 3) % 40) - 20);
}

static uint16_t gen_half(uint64_t *st, size_t i, const ref_fmt *f)
{
    uint64_t r = test_rand(st);
    if (i % 2 == 0) /* any bit pattern: subnormals, NaNs, infinities */
        return (uint16_t)(r >> 20);
    return ref_encode(f, ldexp((double)(int64_t)(r >> 11) /
                                   4503599627370496.0,
                               (int)((r >> 3) % 12) - 6));
}

/* Integer edges of a width: 0, 1, -1, the least and the largest. */
static uint64_t int_edge(size_t es, uint64_t k)
{
    uint64_t top = UINT64_C(1) << (8 * es - 1);
    switch (k % 5) {
    case 0: return 0;
    case 1: return 1;
    case 2: return ~UINT64_C(0);
    case 3: return top;
    default: return top - 1;
    }
}

static void gen_elems(sw_dtype dt, unsigned char *out, size_t n,
                      uint64_t seed)
{
    uint64_t st = seed * 0x9E3779B97F4A7C15ull + 11;
    size_t es = sw_dtype_size(dt);
    for (size_t i = 0; i < n; i++) {
        unsigned char *p = out + i * es;
        uint64_t r = test_rand(&st);
        switch (dt) {
        case SW_BOOL: {
            static const unsigned char v[] = {0, 1, 0, 1, 2, 0x80, 0xff};
            p[0] = v[r % 7];
            break;
        }
        case SW_FLOAT32: st_f(p, (float)gen_float(&st, i, 0)); break;
        case SW_FLOAT64: st_d(p, gen_float(&st, i, 1)); break;
        case SW_COMPLEX64:
            st_f(p, (float)gen_float(&st, i, 0));
            st_f(p + 4, (float)gen_float(&st, i + (r & 1), 0));
            break;
        case SW_COMPLEX128:
            st_d(p, gen_float(&st, i, 1));
            st_d(p + 8, gen_float(&st, i + (r & 1), 1));
            break;
        case SW_FLOAT16:
        case SW_BFLOAT16: st_u(p, 2, gen_half(&st, i, fmt_of(dt))); break;
        default:
            st_u(p, es, i % 6 == 5 ? int_edge(es, r >> 8) : r);
            break;
        }
    }
}

/* alpha values per kind: which = 0, 1, 2. */
static sw_scalar alpha_for(sw_dtype dt, int which)
{
    sw_scalar s;
    memset(&s, 0, sizeof s);
    switch (kind_of(dt)) {
    case SW_KIND_INT: {
        static const int64_t v[] = {-3, (int64_t)0x7654321012345677ll,
                                    INT64_MIN + 5};
        s.i = v[which];
        break;
    }
    case SW_KIND_UINT: {
        static const uint64_t v[] = {3, 0xFEDCBA9876543211ull, 255};
        s.u = v[which];
        break;
    }
    case SW_KIND_FLOAT: {
        static const double v[] = {1.5, -0.1, 1e-3};
        s.f = v[which];
        break;
    }
    case SW_KIND_COMPLEX: {
        static const double re[] = {1.5, 0.1, -1e-3}, im[] = {-0.25, 0.3, 7};
        s.c.re = re[which];
        s.c.im = im[which];
        break;
    }
    case SW_KIND_BOOL:
        s.i = which == 0 ? 1 : which == 1 ? 0 : 42;
        break;
    }
    return s;
}

/* ------------------------------------------------------------------------
 * Running kernels
 * ---------------------------------------------------------------------- */

/* A raw launch of k on buffers (out required; a and b may be NULL) at
 * byte offsets inside them. */
static int launch_raw(sw_device *dev, sw_kernel k, sw_dtype dt, size_t n,
                      sw_buffer *out, size_t oo, sw_buffer *a, size_t ao,
                      sw_buffer *b, size_t bo, sw_scalar alpha)
{
    sw_buffer *bufs[3] = {out, a, b};
    size_t nb = b ? 3 : a ? 2 : 1;
    sw_devmem p[3];
    memset(p, 0, sizeof p);
    ASSERT_OK(sw_launch_begin(dev, bufs, nb, p));
    sw_kernel_args args;
    memset(&args, 0, sizeof args);
    args.kernel = k;
    args.dtype = dt;
    args.n = n;
    args.out = p[0];
    args.out.offset += oo;
    if (a) {
        args.a = p[1];
        args.a.offset += ao;
    }
    if (b) {
        args.b = p[2];
        args.b.offset += bo;
    }
    args.alpha = alpha;
    int rc = sw_launch_kernel(dev, &args);
    ASSERT_OK(sw_launch_end(dev, bufs, nb));
    return rc;
}

/* Run one element-wise kernel over views at byte offset off of buffers
 * holding the inputs, and compare everything: the results, the inputs,
 * and the bytes around the views. */
static void check_ew(sw_device *dev, sw_kernel k, sw_dtype dt, size_t n,
                     size_t off, sw_scalar alpha, uint64_t seed)
{
    size_t es = sw_dtype_size(dt);
    size_t bytes = n * es, total = off + bytes + SLACK;
    unsigned char *a = xmalloc(bytes), *b = xmalloc(bytes);
    unsigned char *o = xmalloc(bytes), *want = xmalloc(bytes);
    unsigned char *got = xmalloc(total), *model = xmalloc(total);
    gen_elems(dt, a, n, seed);
    gen_elems(dt, b, n, seed + 1);
    gen_elems(dt, o, n, seed + 2);
    for (size_t i = 0; i < n; i++)
        ref_elem(k, dt, a + i * es, (k == SW_KERNEL_ADD ? b : o) + i * es,
                 alpha, want + i * es);

    sw_buffer *bufs[3], *views[3];
    const unsigned char *init[3] = {o, a, b};
    for (int j = 0; j < 3; j++) {
        bufs[j] = test_alloc(dev, total, "dtypes");
        test_write_pattern(bufs[j], 40 + (uint32_t)j);
        if (bytes > 0)
            ASSERT_OK(sw_buffer_write(bufs[j], off, init[j], bytes));
        ASSERT_OK(sw_buffer_view(bufs[j], off, bytes, &views[j]));
    }
    switch (k) {
    case SW_KERNEL_FILL:
        ASSERT_OK(sw_op_fill(views[0], dt, n, alpha));
        break;
    case SW_KERNEL_COPY:
        ASSERT_OK(launch_raw(dev, k, dt, n, bufs[0], off, bufs[1], off, NULL,
                             0, alpha));
        break;
    case SW_KERNEL_ADD:
        ASSERT_OK(sw_op_add(views[0], views[1], views[2], dt, n));
        break;
    case SW_KERNEL_SCALE:
        ASSERT_OK(sw_op_scale(views[0], views[1], alpha, dt, n));
        break;
    case SW_KERNEL_AXPY:
        ASSERT_OK(sw_op_axpy(alpha, views[1], views[0], dt, n));
        break;
    default:
        FAIL("not element-wise: %d", (int)k);
    }
    char what[64];
    snprintf(what, sizeof what, "%s (view at %zu)", sw_kernel_name(k), off);
    for (int j = 0; j < 3; j++) {
        ASSERT_OK(sw_buffer_read(bufs[j], 0, got, total));
        test_pattern(model, total, 40 + (uint32_t)j);
        if (bytes > 0)
            memcpy(model + off, init[j], bytes);
        if (j == 0) {
            expect_elems(dt, what, n, got + off, want, a);
            memcpy(model + off, got + off, bytes); /* checked just now */
        }
        /* Around the view (and the inputs, whole): as written. */
        size_t diff = test_memdiff(got, model, total);
        if (diff != (size_t)-1)
            FAIL("%s %s n=%zu: byte %zu of operand %d changed",
                 sw_dtype_name(dt), what, n, diff, j);
    }
    for (int j = 0; j < 3; j++) {
        ASSERT_OK(sw_buffer_free(views[j]));
        ASSERT_OK(sw_buffer_free(bufs[j]));
    }
    free(a);
    free(b);
    free(o);
    free(want);
    free(got);
    free(model);
}

/* Every dtype of the device's mask through kernel k: every size, a view
 * at offset 0 and at an aligned offset, every alpha. */
static void matrix(sw_kernel k)
{
    sw_device *dev = test_device();
    uint32_t mask = device_mask(dev);
    int alphas = k == SW_KERNEL_SCALE || k == SW_KERNEL_AXPY ||
                         k == SW_KERNEL_FILL
                     ? 3
                     : 1;
    int ran = 0;
    for (int d = 0; d < SW_DTYPE_COUNT; d++) {
        sw_dtype dt = (sw_dtype)d;
        if (!(mask & (1u << d)))
            continue;
        if (dt == SW_BOOL && k != SW_KERNEL_FILL && k != SW_KERNEL_COPY)
            continue; /* refused: dtypes_bool */
        size_t es = sw_dtype_size(dt);
        for (size_t s = 0; s < NSIZES; s++)
            for (int w = 0; w < alphas; w++)
                check_ew(dev, k, dt, sizes[s], (s % 2) * 3 * es,
                         alpha_for(dt, w), 1000 * (uint64_t)d + 10 * s + w);
        ran++;
    }
    ASSERT_GE(ran, 3);
}

TEST(dtypes_fill) { matrix(SW_KERNEL_FILL); }
TEST(dtypes_copy) { matrix(SW_KERNEL_COPY); }
TEST(dtypes_add) { matrix(SW_KERNEL_ADD); }
TEST(dtypes_scale) { matrix(SW_KERNEL_SCALE); }
TEST(dtypes_axpy) { matrix(SW_KERNEL_AXPY); }

/* ------------------------------------------------------------------------
 * Sums
 * ---------------------------------------------------------------------- */

/* The reference sum, sequential from zero, as a sw_scalar. */
static sw_scalar ref_sum(sw_dtype dt, const unsigned char *a, size_t n)
{
    sw_scalar s;
    memset(&s, 0, sizeof s);
    size_t es = sw_dtype_size(dt);
    double acc = 0, im = 0;
    uint64_t u = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *p = a + i * es;
        switch (dt) {
        case SW_FLOAT32: acc += ld_f(p); break;
        case SW_FLOAT64: acc += ld_d(p); break;
        case SW_FLOAT16:
        case SW_BFLOAT16: acc += ref_decode(fmt_of(dt), (uint16_t)ld_u(p, 2)); break;
        case SW_COMPLEX64:
            acc += ld_f(p);
            im += ld_f(p + 4);
            break;
        case SW_COMPLEX128:
            acc += ld_d(p);
            im += ld_d(p + 8);
            break;
        case SW_BOOL: u += p[0] != 0; break;
        default: {
            uint64_t v = ld_u(p, es);
            if (kind_of(dt) == SW_KIND_INT && es < 8 &&
                (v >> (8 * es - 1)) & 1)
                v |= ~UINT64_C(0) << (8 * es); /* sign-extend */
            u += v;
            break;
        }
        }
    }
    switch (kind_of(dt)) {
    case SW_KIND_FLOAT: s.f = acc; break;
    case SW_KIND_COMPLEX:
        s.c.re = acc;
        s.c.im = im;
        break;
    default: s.u = u; break;
    }
    return s;
}

/* Sum data whose partial sums are exact in any order, in a float64 and
 * in the float-float pairs of OpenCL devices without cl_khr_fp64 (48
 * significant bits): multiples of 2^-10 below 2^21 (float16: of 2^-14
 * below 2^12), n below 2^13. */
static void gen_sum_data(sw_dtype dt, unsigned char *out, size_t n,
                         uint64_t seed)
{
    uint64_t st = seed * 0x9E3779B97F4A7C15ull + 5;
    size_t es = sw_dtype_size(dt);
    for (size_t i = 0; i < n; i++) {
        unsigned char *p = out + i * es;
        uint64_t r = test_rand(&st);
        double v = ldexp((double)((int64_t)(r % 4194305) - 2097152), -10);
        double w = ldexp((double)((int64_t)((r >> 24) % 4194305) - 2097152),
                         -10);
        switch (dt) {
        case SW_FLOAT32: st_f(p, (float)v); break;
        case SW_FLOAT64: st_d(p, v); break;
        case SW_COMPLEX64:
            st_f(p, (float)v);
            st_f(p + 4, (float)w);
            break;
        case SW_COMPLEX128:
            st_d(p, v);
            st_d(p + 8, w);
            break;
        case SW_FLOAT16: /* exponent fields 11..26: 2^-4 <= |x| < 2^12 */
            st_u(p, 2, (uint16_t)((r & 0x83ff) | (11 + (r >> 11) % 16) << 10));
            break;
        case SW_BFLOAT16: /* 8 significant bits at most */
            st_u(p, 2, ref_encode(&BF16, ldexp((double)((int)(r % 511) - 255),
                                               (int)((r >> 9) % 8) - 4)));
            break;
        default:
            gen_elems(dt, p, 1, r);
            break;
        }
    }
}

static void expect_sum(sw_dtype dt, size_t n, sw_scalar got, sw_scalar want,
                       const char *what)
{
    sw_dtype_kind kd = kind_of(dt);
    if (kd == SW_KIND_FLOAT) {
        if (isnan(want.f) ? !isnan(got.f)
                          : memcmp(&got.f, &want.f, 8) != 0)
            FAIL("%s sum %s n=%zu: %.17g, expected %.17g", sw_dtype_name(dt),
                 what, n, got.f, want.f);
    } else if (kd == SW_KIND_COMPLEX) {
        int ok_re = isnan(want.c.re) ? isnan(got.c.re)
                                     : memcmp(&got.c.re, &want.c.re, 8) == 0;
        int ok_im = isnan(want.c.im) ? isnan(got.c.im)
                                     : memcmp(&got.c.im, &want.c.im, 8) == 0;
        if (!ok_re || !ok_im)
            FAIL("%s sum %s n=%zu: (%.17g, %.17g), expected (%.17g, %.17g)",
                 sw_dtype_name(dt), what, n, got.c.re, got.c.im, want.c.re,
                 want.c.im);
    } else if (got.u != want.u) {
        FAIL("%s sum %s n=%zu: %" PRId64 " (0x%" PRIx64 "), expected %" PRId64
             " (0x%" PRIx64 ")",
             sw_dtype_name(dt), what, n, got.i, got.u, want.i, want.u);
    }
}

/* Every dtype, every size, at a view offset: the op and a raw launch
 * storing at an unaligned byte offset, both the reference's bits. */
TEST(dtypes_sum)
{
    sw_device *dev = test_device();
    uint32_t mask = device_mask(dev);
    for (int d = 0; d < SW_DTYPE_COUNT; d++) {
        sw_dtype dt = (sw_dtype)d;
        if (!(mask & (1u << d)))
            continue;
        size_t es = sw_dtype_size(dt);
        size_t rs = kind_of(dt) == SW_KIND_COMPLEX ? 16 : 8;
        for (size_t s = 0; s < NSIZES; s++) {
            size_t n = sizes[s], off = (s % 2) * es, bytes = n * es;
            unsigned char *a = xmalloc(bytes);
            gen_sum_data(dt, a, n, 77 * (uint64_t)d + s);
            sw_scalar want = ref_sum(dt, a, n);
            sw_buffer *b = test_alloc(dev, off + bytes + SLACK, "sum in");
            test_write_pattern(b, 9);
            if (bytes)
                ASSERT_OK(sw_buffer_write(b, off, a, bytes));
            sw_buffer *v = NULL;
            ASSERT_OK(sw_buffer_view(b, off, bytes, &v));
            sw_scalar got;
            memset(&got, 0x5a, sizeof got);
            ASSERT_OK(sw_op_sum(v, dt, n, &got));
            expect_sum(dt, n, got, want, "(op)");
            if (kind_of(dt) != SW_KIND_COMPLEX) /* the rest stays zero */
                ASSERT_EQ(got.c.im, 0.0);

            /* A raw launch, the result at byte 3 of a buffer. */
            sw_buffer *r = test_alloc(dev, 64, "sum out");
            test_write_pattern(r, 10);
            ASSERT_OK(launch_raw(dev, SW_KERNEL_SUM, dt, n, r, 3, b, off,
                                 NULL, 0, want));
            unsigned char raw[64], model[64];
            ASSERT_OK(sw_buffer_read(r, 0, raw, 64));
            test_pattern(model, 64, 10);
            ASSERT_EQ(test_memdiff(raw, model, 3), (size_t)-1);
            ASSERT_EQ(test_memdiff(raw + 3 + rs, model + 3 + rs, 61 - rs),
                      (size_t)-1);
            sw_scalar got2;
            memset(&got2, 0, sizeof got2);
            memcpy(&got2, raw + 3, rs);
            expect_sum(dt, n, got2, want, "(raw, unaligned out)");
            /* The input and what is around it: as written. */
            unsigned char *all = xmalloc(off + bytes + SLACK);
            unsigned char *mod = xmalloc(off + bytes + SLACK);
            ASSERT_OK(sw_buffer_read(b, 0, all, off + bytes + SLACK));
            test_pattern(mod, off + bytes + SLACK, 9);
            memcpy(mod + off, a, bytes);
            ASSERT_MEM_EQ(all, mod, off + bytes + SLACK);
            free(all);
            free(mod);
            ASSERT_OK(sw_buffer_free(r));
            ASSERT_OK(sw_buffer_free(v));
            ASSERT_OK(sw_buffer_free(b));
            free(a);
        }
    }
}

/* Sums of the edges: infinities and NaNs come through, -0.0 sums to +0.0
 * (sums start from +0.0), float16 subnormals add exactly, integer sums
 * wrap at 64 bits, bool counts every nonzero byte. */
TEST(dtypes_sum_edges)
{
    sw_device *dev = test_device();
    uint32_t mask = device_mask(dev);
    sw_buffer *b = test_alloc(dev, 4096, "edges");
    static const double cases[][4] = {
        {-0.0, -0.0, -0.0, -0.0}, {INFINITY, 1.0, -2.0, 3.0},
        {INFINITY, -INFINITY, 1.0, 1.0}, {1.0, NAN, 2.0, 3.0},
        {-INFINITY, 5.0, -INFINITY, 0.5},
    };
    for (int d = 0; d < SW_DTYPE_COUNT; d++) {
        sw_dtype dt = (sw_dtype)d;
        sw_dtype_kind kd = kind_of(dt);
        if (!(mask & (1u << d)) ||
            (kd != SW_KIND_FLOAT && kd != SW_KIND_COMPLEX))
            continue;
        size_t es = sw_dtype_size(dt);
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            unsigned char a[4 * MAXES];
            for (int i = 0; i < 4; i++) {
                sw_scalar v;
                v.c.re = cases[c][i];
                v.c.im = cases[(c + 1) % 5][3 - i];
                if (kd == SW_KIND_FLOAT)
                    v.f = cases[c][i];
                ref_element(dt, v, a + (size_t)i * es);
            }
            ASSERT_OK(sw_buffer_write(b, 0, a, 4 * es));
            sw_scalar got, want = ref_sum(dt, a, 4);
            ASSERT_OK(sw_op_sum(b, dt, 4, &got));
            expect_sum(dt, 4, got, want, "(edges)");
            if (c == 0) {
                ASSERT_FALSE(signbit(got.c.re));
                ASSERT_EQ(got.c.re, 0.0);
            }
        }
    }
    /* float16 subnormals: 1000 x 2^-24 and the largest subnormal. */
    if (mask & (1u << SW_FLOAT16)) {
        uint16_t h[1001];
        for (int i = 0; i < 1000; i++)
            h[i] = 0x0001;
        h[1000] = 0x83ff; /* -(1023 x 2^-24) */
        ASSERT_OK(sw_buffer_write(b, 0, h, sizeof h));
        sw_scalar got;
        ASSERT_OK(sw_op_sum(b, SW_FLOAT16, 1001, &got));
        ASSERT_DBL_EQ(got.f, ldexp(1000 - 1023, -24));
    }
    /* Wrap-around: int64 max + 1, uint64 max + 2, int8 -128 * 3. */
    if (mask & (1u << SW_INT64)) {
        int64_t v[2] = {INT64_MAX, 1};
        ASSERT_OK(sw_buffer_write(b, 0, v, sizeof v));
        sw_scalar got;
        ASSERT_OK(sw_op_sum(b, SW_INT64, 2, &got));
        ASSERT_EQ(got.i, INT64_MIN);
    }
    if (mask & (1u << SW_UINT64)) {
        uint64_t v[2] = {UINT64_MAX, 2};
        ASSERT_OK(sw_buffer_write(b, 0, v, sizeof v));
        sw_scalar got;
        ASSERT_OK(sw_op_sum(b, SW_UINT64, 2, &got));
        ASSERT_UEQ(got.u, 1);
    }
    if (mask & (1u << SW_INT8)) {
        int8_t v[3] = {-128, -128, -128};
        ASSERT_OK(sw_buffer_write(b, 0, v, sizeof v));
        sw_scalar got;
        ASSERT_OK(sw_op_sum(b, SW_INT8, 3, &got));
        ASSERT_EQ(got.i, -384); /* sign-extended, not wrapped at 8 bits */
        ASSERT_OK(sw_op_sum(b, SW_UINT8, 3, &got));
        ASSERT_UEQ(got.u, 384);
    }
    /* bool: bytes 0..255, counted as truth values. */
    if (mask & (1u << SW_BOOL)) {
        unsigned char bytes[256];
        for (int i = 0; i < 256; i++)
            bytes[i] = (unsigned char)i;
        ASSERT_OK(sw_buffer_write(b, 0, bytes, sizeof bytes));
        sw_scalar cnt;
        ASSERT_OK(sw_op_sum(b, SW_BOOL, 256, &cnt));
        ASSERT_EQ(cnt.i, 255);
        ASSERT_OK(sw_op_sum(b, SW_BOOL, 1, &cnt)); /* byte 0 alone */
        ASSERT_EQ(cnt.i, 0);
    }
    ASSERT_OK(sw_buffer_free(b));
}

/* The simulated device adds sequentially, element 0 first: random data
 * with full mantissas (where the order shows) gives exactly the
 * sequential float64 sum.  Other backends add in trees (docs/opencl.md,
 * docs/cuda.md): there the result is within rounding of it. */
TEST(dtypes_sum_order)
{
    sw_device *dev = test_device();
    uint32_t mask = device_mask(dev);
    size_t n = 100003;
    for (int d = 0; d < SW_DTYPE_COUNT; d++) {
        sw_dtype dt = (sw_dtype)d;
        sw_dtype_kind kd = kind_of(dt);
        if (!(mask & (1u << d)) ||
            (kd != SW_KIND_FLOAT && kd != SW_KIND_COMPLEX))
            continue;
        size_t es = sw_dtype_size(dt);
        unsigned char *a = xmalloc(n * es);
        uint64_t st = 3 + (uint64_t)d;
        for (size_t i = 0; i < n; i++) {
            double v = (double)(test_rand(&st) >> 11) / 9007199254740992.0 -
                       0.45;
            double w = (double)(test_rand(&st) >> 11) / 9007199254740992.0;
            sw_scalar x;
            x.c.re = v * (double)(1 + i % 7);
            x.c.im = -w;
            if (kd == SW_KIND_FLOAT)
                x.f = x.c.re;
            ref_element(dt, x, a + i * es);
        }
        sw_buffer *b = test_alloc(dev, n * es, "order");
        ASSERT_OK(sw_buffer_write(b, 0, a, n * es));
        sw_scalar got, again, want = ref_sum(dt, a, n);
        ASSERT_OK(sw_op_sum(b, dt, n, &got));
        ASSERT_OK(sw_op_sum(b, dt, n, &again));
        ASSERT_EQ(memcmp(&got, &again, sizeof got), 0); /* reproducible */
        if (test_is_sim()) {
            expect_sum(dt, n, got, want, "(sequential order)");
        } else {
            /* Within float-float accumulation of the reference. */
            double tol = 1e-9 * (double)n;
            ASSERT_TRUE(fabs(got.c.re - want.c.re) <= tol);
            if (kd == SW_KIND_COMPLEX)
                ASSERT_TRUE(fabs(got.c.im - want.c.im) <= tol);
        }
        ASSERT_OK(sw_buffer_free(b));
        free(a);
    }
}

/* ------------------------------------------------------------------------
 * float16 and bfloat16: rounding, exhaustively
 * ---------------------------------------------------------------------- */

static uint16_t fill_one(sw_device *dev, sw_buffer *b, sw_dtype dt, double v)
{
    sw_scalar s;
    memset(&s, 0, sizeof s);
    s.f = v;
    ASSERT_OK(sw_op_fill(b, dt, 1, s));
    uint16_t h = 0;
    ASSERT_OK(sw_buffer_read(b, 0, &h, 2));
    (void)dev;
    return h;
}

/* Fill values round once, from the float64, to nearest even. */
TEST(dtypes_half_fill_rounding)
{
    sw_device *dev = test_device();
    uint32_t mask = device_mask(dev);
    sw_buffer *b = test_alloc(dev, 64, "half");
    if (mask & (1u << SW_FLOAT16)) {
        static const struct {
            double v;
            uint16_t h;
        } t[] = {
            {0.1, 0x2e66},      {-0.0, 0x8000},   {1.0, 0x3c00},
            {65504.0, 0x7bff},  {65519.99, 0x7bff}, {65520.0, 0x7c00},
            {1e300, 0x7c00},    {-INFINITY, 0xfc00},
            {0x1p-24, 0x0001},  {0x1p-25, 0x0000}, /* tie: to even, 0 */
            {0x1.8p-24, 0x0002}, /* 1.5 units: tie, to even 2 */
            {0x1.0000000001p-25, 0x0001}, {0x1p-14, 0x0400},
            {0x1.ff8p-15, 0x03ff}, /* the largest subnormal */
            {0x1.ffcp-15, 0x0400}, /* tie: up, into the normals */
            {1.0 + 0x1p-11, 0x3c00},  /* tie, to even */
            {1.0 + 3 * 0x1p-11, 0x3c02}, /* tie, to even */
            /* Just above a tie: once from the float64 it rounds up; via
             * float32 (which loses the 2^-40) it would round to even. */
            {1.0 + 0x1p-11 + 0x1p-40, 0x3c01},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            uint16_t h = fill_one(dev, b, SW_FLOAT16, t[i].v);
            if (h != t[i].h)
                FAIL("float16 fill of %a: 0x%04x, expected 0x%04x", t[i].v,
                     h, t[i].h);
            ASSERT_EQ(h, ref_encode(&F16, t[i].v)); /* the reference agrees */
        }
        ASSERT_EQ(fill_one(dev, b, SW_FLOAT16, NAN) & 0x7e00, 0x7e00);
    }
    if (mask & (1u << SW_BFLOAT16)) {
        static const struct {
            double v;
            uint16_t h;
        } t[] = {
            {0.1, 0x3dcd},     {-0.0, 0x8000},     {1.0, 0x3f80},
            {3.0e38, 0x7f62},  {3.4e38, 0x7f80},   /* past the largest */
            {1.0 + 0x1p-8, 0x3f80},                /* tie, to even */
            {1.0 + 0x1p-8 + 0x1p-30, 0x3f81},      /* once, not twice */
            {0x1p-133, 0x0001}, {0x1p-134, 0x0000}, {0x1p-126, 0x0080},
            {-INFINITY, 0xff80},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            uint16_t h = fill_one(dev, b, SW_BFLOAT16, t[i].v);
            if (h != t[i].h)
                FAIL("bfloat16 fill of %a: 0x%04x, expected 0x%04x", t[i].v,
                     h, t[i].h);
            ASSERT_EQ(h, ref_encode(&BF16, t[i].v));
        }
        ASSERT_EQ(fill_one(dev, b, SW_BFLOAT16, NAN) & 0x7fc0, 0x7fc0);
    }
    ASSERT_OK(sw_buffer_free(b));
}

/* Every one of the 65536 bit patterns of float16 and of bfloat16 through
 * SCALE (by 1, then by 0.1 and by 3), ADD (to itself) and AXPY: every
 * conversion and rounding the kernels do, against the reference. */
TEST(dtypes_half_exhaustive)
{
    sw_device *dev = test_device();
    uint32_t mask = device_mask(dev);
    enum { N = 65536 };
    size_t bytes = 2 * N;
    uint16_t *x = xmalloc(bytes), *y = xmalloc(bytes);
    uint16_t *want = xmalloc(bytes), *got = xmalloc(bytes);
    for (size_t i = 0; i < N; i++) {
        x[i] = (uint16_t)i;
        y[i] = (uint16_t)(i * 40503u + 7u); /* another order */
    }
    sw_buffer *bx = test_alloc(dev, bytes, "x");
    sw_buffer *by = test_alloc(dev, bytes, "y");
    sw_buffer *bo = test_alloc(dev, bytes, "out");
    ASSERT_OK(sw_buffer_write(bx, 0, x, bytes));
    static const double alphas[] = {1.0, 0.1, 3.0, -65504.0};
    for (int d = SW_FLOAT16; d <= SW_BFLOAT16; d++) {
        sw_dtype dt = (sw_dtype)d;
        if (!(mask & (1u << d)))
            continue;
        for (size_t w = 0; w < 4; w++) {
            sw_scalar al = {.f = alphas[w]};
            ASSERT_OK(sw_op_scale(bo, bx, al, dt, N));
            ASSERT_OK(sw_buffer_read(bo, 0, got, bytes));
            for (size_t i = 0; i < N; i++)
                ref_elem(SW_KERNEL_SCALE, dt, (const unsigned char *)&x[i],
                         NULL, al, (unsigned char *)&want[i]);
            expect_elems(dt, "scale (every pattern)", N,
                         (const unsigned char *)got,
                         (const unsigned char *)want,
                         (const unsigned char *)x);
            ASSERT_OK(sw_buffer_write(by, 0, y, bytes));
            ASSERT_OK(sw_op_axpy(al, bx, by, dt, N));
            ASSERT_OK(sw_buffer_read(by, 0, got, bytes));
            for (size_t i = 0; i < N; i++)
                ref_elem(SW_KERNEL_AXPY, dt, (const unsigned char *)&x[i],
                         (const unsigned char *)&y[i], al,
                         (unsigned char *)&want[i]);
            expect_elems(dt, "axpy (every pattern)", N,
                         (const unsigned char *)got,
                         (const unsigned char *)want,
                         (const unsigned char *)x);
        }
        ASSERT_OK(sw_buffer_write(by, 0, y, bytes));
        ASSERT_OK(sw_op_add(bo, bx, by, dt, N));
        ASSERT_OK(sw_buffer_read(bo, 0, got, bytes));
        sw_scalar unused = {.f = 0.0};
        for (size_t i = 0; i < N; i++)
            ref_elem(SW_KERNEL_ADD, dt, (const unsigned char *)&x[i],
                     (const unsigned char *)&y[i], unused,
                     (unsigned char *)&want[i]);
        expect_elems(dt, "add (every pattern)", N,
                     (const unsigned char *)got, (const unsigned char *)want,
                     (const unsigned char *)x);
        /* By 1: every non-NaN value comes back as itself. */
        sw_scalar one = {.f = 1.0};
        ASSERT_OK(sw_op_scale(bo, bx, one, dt, N));
        ASSERT_OK(sw_buffer_read(bo, 0, got, bytes));
        for (size_t i = 0; i < N; i++)
            if (!half_is_nan(fmt_of(dt), x[i]) && got[i] != x[i])
                FAIL("%s: 1 * 0x%04zx is 0x%04x", sw_dtype_name(dt), i,
                     got[i]);
    }
    ASSERT_OK(sw_buffer_free(bx));
    ASSERT_OK(sw_buffer_free(by));
    ASSERT_OK(sw_buffer_free(bo));
    free(x);
    free(y);
    free(want);
    free(got);
}

/* ------------------------------------------------------------------------
 * The mask, bool, alignment, nothing at all
 * ---------------------------------------------------------------------- */

/* The device declares its dtypes: the simulated device and CUDA all of
 * them, OpenCL all but float64 and complex128 where it lacks
 * cl_khr_fp64 (those two go together).  Every dtype outside the mask is
 * refused by every kernel, naming the device and the dtype, and nothing
 * changes. */
TEST(dtypes_mask)
{
    sw_device *dev = test_device();
    uint32_t mask = device_mask(dev);
    uint32_t all = (1u << SW_DTYPE_COUNT) - 1;
    uint32_t fp64 = 1u << SW_FLOAT64 | 1u << SW_COMPLEX128;
    ASSERT_UEQ(mask & ~all, 0);
    if (test_is_sim() || strncmp(test_device_spec(), "cuda:", 5) == 0)
        ASSERT_UEQ(mask, all);
    if (strncmp(test_device_spec(), "opencl:", 7) == 0) {
        ASSERT_UEQ(mask | fp64, all);
        ASSERT_TRUE((mask & fp64) == 0 || (mask & fp64) == fp64);
    }
    sw_buffer *a = test_alloc(dev, 256, "typed");
    test_write_pattern(a, 8);
    int refused = 0;
    for (int d = 0; d < SW_DTYPE_COUNT; d++) {
        sw_dtype dt = (sw_dtype)d;
        if (mask & (1u << d))
            continue;
        refused++;
        sw_scalar one = alpha_for(dt, 0), s;
        int rcs[6];
        rcs[0] = sw_op_fill(a, dt, 4, one);
        rcs[1] = launch_raw(dev, SW_KERNEL_COPY, dt, 4, a, 64, a, 0, NULL, 0,
                            one);
        rcs[2] = sw_op_add(a, a, a, dt, 4);
        rcs[3] = sw_op_scale(a, a, one, dt, 4);
        rcs[4] = sw_op_axpy(one, a, a, dt, 4);
        rcs[5] = sw_op_sum(a, dt, 4, &s);
        for (int k = 0; k < 6; k++) {
            if (rcs[k] != SW_ERR_DTYPE)
                FAIL("%s %s outside the mask: %s, not SW_ERR_DTYPE",
                     sw_kernel_name((sw_kernel)k), sw_dtype_name(dt),
                     sw_err_name(rcs[k]));
        }
        ASSERT_ERR(sw_op_fill(a, dt, 0, one), SW_ERR_DTYPE); /* even n=0 */
        ASSERT_STR_CONTAINS(sw_last_error(), sw_device_name(dev));
        ASSERT_STR_CONTAINS(sw_last_error(), sw_dtype_name(dt));
    }
    ASSERT_OK(sw_device_synchronize(dev));
    test_expect_pattern(a, 8);
    ASSERT_OK(sw_buffer_free(a));
}

/* bool holds truth values: FILL writes 0 or 1 (any nonzero .i is 1),
 * COPY keeps the bytes as they are, arithmetic is refused. */
TEST(dtypes_bool)
{
    sw_device *dev = test_device();
    if (!(device_mask(dev) & (1u << SW_BOOL)))
        SKIP("%s has no bool kernels", sw_device_name(dev));
    sw_buffer *b = test_alloc(dev, 64, "bools");
    test_write_pattern(b, 4);
    static const int64_t vals[] = {0, 1, 2, -1, INT64_MIN, 256};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        sw_scalar v = {.i = vals[i]};
        ASSERT_OK(sw_op_fill(b, SW_BOOL, 33, v));
        unsigned char got[64], model[64];
        ASSERT_OK(sw_buffer_read(b, 0, got, 64));
        test_pattern(model, 64, 4);
        memset(model, vals[i] != 0, 33);
        ASSERT_MEM_EQ(got, model, 64);
    }
    sw_scalar one = {.i = 1};
    ASSERT_ERR(sw_op_add(b, b, b, SW_BOOL, 8), SW_ERR_DTYPE);
    ASSERT_ERR(sw_op_scale(b, b, one, SW_BOOL, 8), SW_ERR_DTYPE);
    ASSERT_ERR(sw_op_axpy(one, b, b, SW_BOOL, 8), SW_ERR_DTYPE);
    ASSERT_OK(sw_buffer_free(b));
}

/* Views at offsets that are not whole elements: the typed operands of
 * ADD, SCALE, AXPY and SUM are refused by the core (for every backend,
 * nothing queued); FILL and COPY work on bytes and write exactly the
 * elements' bytes at any offset, and SUM stores its result at any. */
TEST(dtypes_unaligned)
{
    sw_device *dev = test_device();
    uint32_t mask = device_mask(dev);
    enum { TOTAL = 1024 };
    unsigned char got[TOTAL], model[TOTAL];
    for (int d = 0; d < SW_DTYPE_COUNT; d++) {
        sw_dtype dt = (sw_dtype)d;
        if (!(mask & (1u << d)))
            continue;
        size_t es = sw_dtype_size(dt);
        sw_scalar al = alpha_for(dt, 1);
        for (size_t off = 1; off < es; off += (es > 4 ? 3 : 1)) {
            size_t n = 37, bytes = n * es;
            sw_buffer *b = test_alloc(dev, TOTAL, "unaligned");
            sw_buffer *c = test_alloc(dev, TOTAL, "unaligned 2");
            test_write_pattern(b, 21);
            test_write_pattern(c, 22);
            sw_buffer *v = NULL, *w = NULL;
            ASSERT_OK(sw_buffer_view(b, off, bytes, &v));
            ASSERT_OK(sw_buffer_view(c, 2 * off + 8, bytes, &w));
            sw_scalar s = {.i = 5};
            if (dt != SW_BOOL) {
                ASSERT_ERR(sw_op_add(v, w, w, dt, n), SW_ERR_INVALID_ARG);
                ASSERT_STR_CONTAINS(sw_last_error(), "aligned");
                ASSERT_ERR(sw_op_scale(w, v, al, dt, n), SW_ERR_INVALID_ARG);
                ASSERT_ERR(sw_op_axpy(al, w, v, dt, n), SW_ERR_INVALID_ARG);
                ASSERT_ERR(launch_raw(dev, SW_KERNEL_ADD, dt, n, b, 0, c, 0,
                                      b, off, al),
                           SW_ERR_INVALID_ARG);
            }
            ASSERT_ERR(sw_op_sum(v, dt, n, &s), SW_ERR_INVALID_ARG);
            ASSERT_UEQ(s.u, 0);
            ASSERT_OK(sw_device_synchronize(dev));
            test_expect_pattern(b, 21);

            /* FILL at the unaligned view. */
            ASSERT_OK(sw_op_fill(v, dt, n, al));
            test_pattern(model, TOTAL, 21);
            unsigned char one[MAXES];
            ref_element(dt, al, one);
            for (size_t i = 0; i < n; i++)
                memcpy(model + off + i * es, one, es);
            ASSERT_OK(sw_buffer_read(b, 0, got, TOTAL));
            ASSERT_MEM_EQ(got, model, TOTAL);

            /* COPY between unaligned offsets (raw), bytes as they are. */
            ASSERT_OK(launch_raw(dev, SW_KERNEL_COPY, dt, n, c, 2 * off + 8,
                                 b, off, NULL, 0, al));
            test_pattern(model, TOTAL, 22);
            for (size_t i = 0; i < n; i++)
                memcpy(model + 2 * off + 8 + i * es, one, es);
            ASSERT_OK(sw_buffer_read(c, 0, got, TOTAL));
            ASSERT_MEM_EQ(got, model, TOTAL);
            /* In place over itself: nothing changes. */
            ASSERT_OK(launch_raw(dev, SW_KERNEL_COPY, dt, n, c, 2 * off + 8,
                                 c, 2 * off + 8, NULL, 0, al));
            ASSERT_OK(sw_buffer_read(c, 0, got, TOTAL));
            ASSERT_MEM_EQ(got, model, TOTAL);
            /* Overlapping by part of an element: a move. */
            ASSERT_OK(launch_raw(dev, SW_KERNEL_COPY, dt, n, c, 2 * off + 9,
                                 c, 2 * off + 8, NULL, 0, al));
            memmove(model + 2 * off + 9, model + 2 * off + 8, bytes);
            ASSERT_OK(sw_buffer_read(c, 0, got, TOTAL));
            ASSERT_MEM_EQ(got, model, TOTAL);
            ASSERT_OK(sw_buffer_free(v));
            ASSERT_OK(sw_buffer_free(w));
            ASSERT_OK(sw_buffer_free(b));
            ASSERT_OK(sw_buffer_free(c));
        }
    }
}

/* n = 0: every kernel of every dtype is a no-op that succeeds; a SUM of
 * nothing is 0 (all of the scalar), and a raw SUM writes its zero (16
 * bytes for complex types) wherever out points. */
TEST(dtypes_zero_elements)
{
    sw_device *dev = test_device();
    uint32_t mask = device_mask(dev);
    sw_buffer *b = test_alloc(dev, 64, "zero");
    for (int d = 0; d < SW_DTYPE_COUNT; d++) {
        sw_dtype dt = (sw_dtype)d;
        if (!(mask & (1u << d)))
            continue;
        test_write_pattern(b, 31);
        sw_scalar al = alpha_for(dt, 0), s;
        memset(&s, 0x77, sizeof s);
        ASSERT_OK(sw_op_fill(b, dt, 0, al));
        ASSERT_OK(launch_raw(dev, SW_KERNEL_COPY, dt, 0, b, 8, b, 0, NULL, 0,
                             al));
        if (dt != SW_BOOL) {
            ASSERT_OK(sw_op_add(b, b, b, dt, 0));
            ASSERT_OK(sw_op_scale(b, b, al, dt, 0));
            ASSERT_OK(sw_op_axpy(al, b, b, dt, 0));
        }
        ASSERT_OK(sw_op_sum(b, dt, 0, &s));
        sw_scalar zero;
        memset(&zero, 0, sizeof zero);
        ASSERT_EQ(memcmp(&s, &zero, sizeof s), 0);
        ASSERT_OK(sw_device_synchronize(dev));
        test_expect_pattern(b, 31);
        size_t rs = kind_of(dt) == SW_KIND_COMPLEX ? 16 : 8;
        ASSERT_OK(launch_raw(dev, SW_KERNEL_SUM, dt, 0, b, 5, b, 0, NULL, 0,
                             al));
        unsigned char got[64], model[64];
        test_pattern(model, 64, 31);
        memset(model + 5, 0, rs);
        ASSERT_OK(sw_buffer_read(b, 0, got, 64));
        ASSERT_MEM_EQ(got, model, 64);
    }
    ASSERT_OK(sw_buffer_free(b));
}

/* An OpenCL device without cl_khr_fp64 (forced: SPILLWAY_OPENCL_FP64=0):
 * float64 and complex128 are refused, everything else runs, and the
 * float sums (float16, bfloat16, float32, complex64) accumulate in
 * float-float pairs in the same tree: the matrix's sums hold exactly as
 * with float64 accumulators. */
TEST(dtypes_opencl_no_fp64)
{
    if (strncmp(test_device_spec(), "opencl:", 7) != 0)
        SKIP("needs an OpenCL device (SW_TEST_DEVICE=%s)",
             test_device_spec());
    setenv("SPILLWAY_OPENCL_FP64", "0", 1);
    sw_device *dev = test_device();
    uint32_t all = (1u << SW_DTYPE_COUNT) - 1;
    ASSERT_UEQ(device_mask(dev),
               all & ~(1u << SW_FLOAT64 | 1u << SW_COMPLEX128));
    test_dtypes_mask();
    test_dtypes_sum();
    test_dtypes_sum_edges();
    test_dtypes_sum_order();
    test_dtypes_scale();
    test_dtypes_half_exhaustive();
    /* Beyond float32's precision: 2^24 + 1000 ones, in every float type
     * that can hold 2^24 (as bfloat16 0x4b80, float16 cannot). */
    enum { M = 1001 };
    sw_buffer *b = test_alloc(dev, M * 8, "ff");
    uint16_t h[M];
    h[0] = 0x4b80;
    for (int i = 1; i < M; i++)
        h[i] = 0x3f80;
    ASSERT_OK(sw_buffer_write(b, 0, h, sizeof h));
    sw_scalar r;
    ASSERT_OK(sw_op_sum(b, SW_BFLOAT16, M, &r));
    ASSERT_DBL_EQ(r.f, 16777216.0 + 1000.0);
    float c[2 * M];
    c[0] = 16777216.0f;
    c[1] = -16777216.0f;
    for (int i = 1; i < M; i++) {
        c[2 * i] = 1.0f;
        c[2 * i + 1] = -0.5f;
    }
    ASSERT_OK(sw_buffer_write(b, 0, c, sizeof c));
    ASSERT_OK(sw_op_sum(b, SW_COMPLEX64, M, &r));
    ASSERT_DBL_EQ(r.c.re, 16777216.0 + 1000.0);
    ASSERT_DBL_EQ(r.c.im, -16777216.0 - 500.0);
    /* float16: 65504 + 1000 subnormals of 2^-24. */
    h[0] = 0x7bff;
    for (int i = 1; i < M; i++)
        h[i] = 0x0001;
    ASSERT_OK(sw_buffer_write(b, 0, h, sizeof h));
    ASSERT_OK(sw_op_sum(b, SW_FLOAT16, M, &r));
    ASSERT_DBL_EQ(r.f, 65504.0 + ldexp(1000, -24));
    ASSERT_OK(sw_buffer_free(b));
    unsetenv("SPILLWAY_OPENCL_FP64");
}
