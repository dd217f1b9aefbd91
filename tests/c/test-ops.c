/*
 * test-ops.c -- the built-in kernels through sw_op_* and through raw
 * launches, for the four element types of contract version 1, checked
 * against references computed here (integer arithmetic wraps; float inputs
 * are chosen so that every result is exact, whatever the order or fusion
 * of the device's arithmetic).  Every other dtype: test-dtypes.c.
 */
#include "test.h"
#include "tests.h"

#include <math.h>

static const sw_dtype all_dtypes[] = {SW_FLOAT32, SW_FLOAT64, SW_INT32,
                                      SW_INT64};
static const char *dtype_name(sw_dtype dt)
{
    const char *name = sw_dtype_name(dt);
    return name ? name : "?";
}
static int is_float(sw_dtype dt)
{
    return dt == SW_FLOAT32 || dt == SW_FLOAT64;
}

/* Element i of a host array as a scalar (.f or .i by dtype). */
static sw_scalar get_elem(sw_dtype dt, const void *arr, size_t i)
{
    sw_scalar s;
    s.i = 0;
    switch (dt) {
    case SW_FLOAT32: s.f = ((const float *)arr)[i]; break;
    case SW_FLOAT64: s.f = ((const double *)arr)[i]; break;
    case SW_INT32: s.i = ((const int32_t *)arr)[i]; break;
    case SW_INT64: s.i = ((const int64_t *)arr)[i]; break;
    default: FAIL("test-ops.c covers the first four dtypes only"); /* and
                  * test-dtypes.c all of them */
    }
    return s;
}

static void set_elem(sw_dtype dt, void *arr, size_t i, sw_scalar s)
{
    switch (dt) {
    case SW_FLOAT32: ((float *)arr)[i] = (float)s.f; break;
    case SW_FLOAT64: ((double *)arr)[i] = s.f; break;
    case SW_INT32: ((int32_t *)arr)[i] = (int32_t)(uint32_t)s.i; break;
    case SW_INT64: ((int64_t *)arr)[i] = s.i; break;
    default: FAIL("test-ops.c covers the first four dtypes only");
    }
}

/* Inputs: small multiples of 1/4 for floats (every sum and product below is
 * exact), the full range for integers (so that arithmetic wraps). */
static void make_input(sw_dtype dt, void *arr, size_t n, uint64_t seed)
{
    uint64_t st = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        sw_scalar s;
        uint64_t r = test_rand(&st);
        if (is_float(dt))
            s.f = ((double)(r % 41) - 20.0) * 0.25;
        else
            s.i = (int64_t)r;
        set_elem(dt, arr, i, s);
    }
}

/* Wrapping integer arithmetic in the dtype's width. */
static int64_t wrap(sw_dtype dt, uint64_t v)
{
    return dt == SW_INT32 ? (int64_t)(int32_t)(uint32_t)v : (int64_t)v;
}

/* out[i] = kernel(a[i], b[i], out[i]) on the host, in the dtype's
 * arithmetic. */
static void reference(sw_kernel k, sw_dtype dt, size_t n, const void *a,
                      const void *b, void *out, sw_scalar alpha)
{
    for (size_t i = 0; i < n; i++) {
        sw_scalar x = a ? get_elem(dt, a, i) : alpha;
        sw_scalar y = b ? get_elem(dt, b, i) : alpha;
        sw_scalar o = get_elem(dt, out, i);
        sw_scalar r;
        if (dt == SW_FLOAT32) {
            float fx = (float)x.f, fy = (float)y.f, fo = (float)o.f;
            float fa = (float)alpha.f;
            switch (k) {
            case SW_KERNEL_FILL: r.f = fa; break;
            case SW_KERNEL_COPY: r.f = fx; break;
            case SW_KERNEL_ADD: r.f = fx + fy; break;
            case SW_KERNEL_SCALE: r.f = fa * fx; break;
            case SW_KERNEL_AXPY: r.f = fa * fx + fo; break;
            default: FAIL("no reference for kernel %d", (int)k);
            }
        } else if (dt == SW_FLOAT64) {
            switch (k) {
            case SW_KERNEL_FILL: r.f = alpha.f; break;
            case SW_KERNEL_COPY: r.f = x.f; break;
            case SW_KERNEL_ADD: r.f = x.f + y.f; break;
            case SW_KERNEL_SCALE: r.f = alpha.f * x.f; break;
            case SW_KERNEL_AXPY: r.f = alpha.f * x.f + o.f; break;
            default: FAIL("no reference for kernel %d", (int)k);
            }
        } else {
            uint64_t ux = (uint64_t)x.i, uy = (uint64_t)y.i;
            uint64_t uo = (uint64_t)o.i, ua = (uint64_t)alpha.i;
            switch (k) {
            case SW_KERNEL_FILL: r.i = wrap(dt, ua); break;
            case SW_KERNEL_COPY: r.i = wrap(dt, ux); break;
            case SW_KERNEL_ADD: r.i = wrap(dt, ux + uy); break;
            case SW_KERNEL_SCALE: r.i = wrap(dt, ua * ux); break;
            case SW_KERNEL_AXPY: r.i = wrap(dt, ua * ux + uo); break;
            default: FAIL("no reference for kernel %d", (int)k);
            }
        }
        set_elem(dt, out, i, r);
    }
}

/* Sum in the kernel's accumulator: float64 for float dtypes, wrapping int64
 * for integer ones. */
static sw_scalar reference_sum(sw_dtype dt, const void *a, size_t n)
{
    sw_scalar s;
    memset(&s, 0, sizeof s); /* the whole union, as the library returns */
    if (is_float(dt)) {
        double acc = 0;
        for (size_t i = 0; i < n; i++)
            acc += get_elem(dt, a, i).f;
        s.f = acc;
    } else {
        uint64_t acc = 0;
        for (size_t i = 0; i < n; i++)
            acc += (uint64_t)get_elem(dt, a, i).i;
        s.i = (int64_t)acc;
    }
    return s;
}

/* Compare n elements; report the first difference with both values. */
static void expect_elems(sw_dtype dt, const void *got, const void *want,
                         size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        sw_scalar g = get_elem(dt, got, i), w = get_elem(dt, want, i);
        if (is_float(dt) ? !(g.f == w.f) : g.i != w.i) {
            if (is_float(dt))
                FAIL("%s %s: element %zu of %zu is %.17g, expected %.17g",
                     dtype_name(dt), what, i, n, g.f, w.f);
            FAIL("%s %s: element %zu of %zu is %" PRId64 ", expected %" PRId64,
                 dtype_name(dt), what, i, n, g.i, w.i);
        }
    }
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    ASSERT_NOT_NULL(p);
    return p;
}

/* A device buffer holding n elements of host data, plus `slack` bytes of a
 * known pattern after them. */
static sw_buffer *upload(sw_device *dev, sw_dtype dt, const void *host,
                         size_t n, size_t slack, const char *tag)
{
    size_t esz = sw_dtype_size(dt);
    sw_buffer *b = test_alloc(dev, n * esz + slack, tag);
    test_write_pattern(b, 0xAA);
    if (n > 0)
        ASSERT_OK(sw_buffer_write(b, 0, host, n * esz));
    return b;
}

/* Read n elements back and check the slack after them is untouched. */
static void download(sw_buffer *b, sw_dtype dt, void *host, size_t n,
                     size_t slack)
{
    size_t esz = sw_dtype_size(dt);
    if (n > 0)
        ASSERT_OK(sw_buffer_read(b, 0, host, n * esz));
    if (slack > 0) {
        unsigned char *tail = xmalloc(slack);
        unsigned char *model = xmalloc(n * esz + slack);
        test_pattern(model, n * esz + slack, 0xAA);
        ASSERT_OK(sw_buffer_read(b, n * esz, tail, slack));
        ASSERT_MEM_EQ(tail, model + n * esz, slack);
        free(tail);
        free(model);
    }
}

static sw_scalar alpha_for(sw_dtype dt, int which)
{
    sw_scalar s;
    if (is_float(dt))
        s.f = which == 0 ? 1.5 : -0.75;
    else
        s.i = which == 0 ? -3 : (int64_t)0x7654321012345677ll;
    return s;
}

static const size_t op_sizes[] = {1, 3, 1000, 4097, 65536 + 5};
#define NSIZES (sizeof op_sizes / sizeof op_sizes[0])
#define SLACK 40

TEST(ops_fill)
{
    sw_device *dev = test_device();
    for (size_t d = 0; d < 4; d++) {
        sw_dtype dt = all_dtypes[d];
        size_t esz = sw_dtype_size(dt);
        for (size_t s = 0; s < NSIZES; s++) {
            size_t n = op_sizes[s];
            void *host = xmalloc(n * esz), *want = xmalloc(n * esz);
            make_input(dt, host, n, 7 * s + d);
            sw_buffer *out = upload(dev, dt, host, n, SLACK, "fill-out");
            sw_scalar v;
            if (is_float(dt))
                v.f = -2.5;
            else
                v.i = dt == SW_INT32 ? -123456 : INT64_MIN + 5;
            ASSERT_OK(sw_op_fill(out, dt, n, v));
            reference(SW_KERNEL_FILL, dt, n, NULL, NULL, want, v);
            download(out, dt, host, n, SLACK);
            expect_elems(dt, host, want, n, "fill");
            ASSERT_OK(sw_buffer_free(out));
            free(host);
            free(want);
        }
    }
}

TEST(ops_add)
{
    sw_device *dev = test_device();
    for (size_t d = 0; d < 4; d++) {
        sw_dtype dt = all_dtypes[d];
        size_t esz = sw_dtype_size(dt);
        for (size_t s = 0; s < NSIZES; s++) {
            size_t n = op_sizes[s];
            void *a = xmalloc(n * esz), *b = xmalloc(n * esz);
            void *want = xmalloc(n * esz), *got = xmalloc(n * esz);
            make_input(dt, a, n, 100 + s);
            make_input(dt, b, n, 200 + s);
            make_input(dt, want, n, 300 + s);
            sw_buffer *ba = upload(dev, dt, a, n, SLACK, "a");
            sw_buffer *bb = upload(dev, dt, b, n, SLACK, "b");
            sw_buffer *bo = upload(dev, dt, want, n, SLACK, "out");
            ASSERT_OK(sw_op_add(bo, ba, bb, dt, n));
            reference(SW_KERNEL_ADD, dt, n, a, b, want, alpha_for(dt, 0));
            download(bo, dt, got, n, SLACK);
            expect_elems(dt, got, want, n, "add");
            /* The inputs are unchanged. */
            download(ba, dt, got, n, SLACK);
            expect_elems(dt, got, a, n, "add input a");
            download(bb, dt, got, n, SLACK);
            expect_elems(dt, got, b, n, "add input b");
            ASSERT_OK(sw_buffer_free(ba));
            ASSERT_OK(sw_buffer_free(bb));
            ASSERT_OK(sw_buffer_free(bo));
            free(a);
            free(b);
            free(want);
            free(got);
        }
    }
}

TEST(ops_scale)
{
    sw_device *dev = test_device();
    for (size_t d = 0; d < 4; d++) {
        sw_dtype dt = all_dtypes[d];
        size_t esz = sw_dtype_size(dt);
        for (int w = 0; w < 2; w++) {
            for (size_t s = 0; s < NSIZES; s += 2) {
                size_t n = op_sizes[s];
                void *a = xmalloc(n * esz), *want = xmalloc(n * esz);
                void *got = xmalloc(n * esz);
                make_input(dt, a, n, 400 + s);
                make_input(dt, want, n, 500 + s);
                sw_buffer *ba = upload(dev, dt, a, n, SLACK, "a");
                sw_buffer *bo = upload(dev, dt, want, n, SLACK, "out");
                sw_scalar alpha = alpha_for(dt, w);
                ASSERT_OK(sw_op_scale(bo, ba, alpha, dt, n));
                reference(SW_KERNEL_SCALE, dt, n, a, NULL, want, alpha);
                download(bo, dt, got, n, SLACK);
                expect_elems(dt, got, want, n, "scale");
                download(ba, dt, got, n, SLACK);
                expect_elems(dt, got, a, n, "scale input");
                ASSERT_OK(sw_buffer_free(ba));
                ASSERT_OK(sw_buffer_free(bo));
                free(a);
                free(want);
                free(got);
            }
        }
    }
}

TEST(ops_axpy)
{
    sw_device *dev = test_device();
    for (size_t d = 0; d < 4; d++) {
        sw_dtype dt = all_dtypes[d];
        size_t esz = sw_dtype_size(dt);
        for (int w = 0; w < 2; w++) {
            for (size_t s = 0; s < NSIZES; s++) {
                size_t n = op_sizes[s];
                void *x = xmalloc(n * esz), *y = xmalloc(n * esz);
                void *got = xmalloc(n * esz);
                make_input(dt, x, n, 600 + s);
                make_input(dt, y, n, 700 + s);
                sw_buffer *bx = upload(dev, dt, x, n, SLACK, "x");
                sw_buffer *by = upload(dev, dt, y, n, SLACK, "y");
                sw_scalar alpha = alpha_for(dt, w);
                ASSERT_OK(sw_op_axpy(alpha, bx, by, dt, n));
                /* Twice: y <- alpha x + (alpha x + y). */
                ASSERT_OK(sw_op_axpy(alpha, bx, by, dt, n));
                reference(SW_KERNEL_AXPY, dt, n, x, NULL, y, alpha);
                reference(SW_KERNEL_AXPY, dt, n, x, NULL, y, alpha);
                download(by, dt, got, n, SLACK);
                expect_elems(dt, got, y, n, "axpy");
                download(bx, dt, got, n, SLACK);
                expect_elems(dt, got, x, n, "axpy input");
                ASSERT_OK(sw_buffer_free(bx));
                ASSERT_OK(sw_buffer_free(by));
                free(x);
                free(y);
                free(got);
            }
        }
    }
}

TEST(ops_sum)
{
    sw_device *dev = test_device();
    for (size_t d = 0; d < 4; d++) {
        sw_dtype dt = all_dtypes[d];
        size_t esz = sw_dtype_size(dt);
        for (size_t s = 0; s < NSIZES; s++) {
            size_t n = op_sizes[s];
            void *a = xmalloc(n * esz);
            make_input(dt, a, n, 800 + s);
            sw_buffer *ba = upload(dev, dt, a, n, SLACK, "a");
            sw_scalar got = {.i = 0}, again = {.i = 0};
            ASSERT_OK(sw_op_sum(ba, dt, n, &got));
            ASSERT_OK(sw_op_sum(ba, dt, n, &again));
            sw_scalar want = reference_sum(dt, a, n);
            if (is_float(dt)) {
                if (!(got.f == want.f))
                    FAIL("%s sum of %zu: %.17g, expected %.17g",
                         dtype_name(dt), n, got.f, want.f);
            } else if (got.i != want.i) {
                FAIL("%s sum of %zu: %" PRId64 ", expected %" PRId64,
                     dtype_name(dt), n, got.i, want.i);
            }
            ASSERT_EQ(memcmp(&got, &again, sizeof got), 0);
            download(ba, dt, a, n, SLACK); /* the input is untouched */
            ASSERT_OK(sw_buffer_free(ba));
            free(a);
        }
    }

    /* float32 accumulates in float64: 1e8 + 1000 ones is exact there, and
     * would stay 1e8 in float32. */
    enum { M = 1001 };
    float f[M];
    f[0] = 1e8f;
    for (int i = 1; i < M; i++)
        f[i] = 1.0f;
    sw_buffer *bf = upload(dev, SW_FLOAT32, f, M, 0, "f32");
    sw_scalar r = {.i = 0};
    ASSERT_OK(sw_op_sum(bf, SW_FLOAT32, M, &r));
    ASSERT_DBL_EQ(r.f, 1e8 + 1000.0);
    ASSERT_OK(sw_buffer_free(bf));

    /* int32 accumulates in int64: no wrap at 32 bits. */
    int32_t big[1000];
    for (int i = 0; i < 1000; i++)
        big[i] = INT32_MAX;
    sw_buffer *bi = upload(dev, SW_INT32, big, 1000, 0, "i32");
    ASSERT_OK(sw_op_sum(bi, SW_INT32, 1000, &r));
    ASSERT_EQ(r.i, 1000LL * INT32_MAX);
    for (int i = 0; i < 1000; i++)
        big[i] = INT32_MIN;
    ASSERT_OK(sw_buffer_write(bi, 0, big, sizeof big));
    ASSERT_OK(sw_op_sum(bi, SW_INT32, 1000, &r));
    ASSERT_EQ(r.i, 1000LL * INT32_MIN);
    ASSERT_OK(sw_buffer_free(bi));

    /* Arbitrary float64 data: reproducible to the bit, and close to the
     * exact sum. */
    enum { K = 100000 };
    double *dv = xmalloc(K * sizeof(double));
    uint64_t st = 12345;
    for (int i = 0; i < K; i++)
        dv[i] = (double)(test_rand(&st) >> 11) / 9007199254740992.0 - 0.5;
    sw_buffer *bd = upload(dev, SW_FLOAT64, dv, K, 0, "f64");
    sw_scalar r1, r2;
    ASSERT_OK(sw_op_sum(bd, SW_FLOAT64, K, &r1));
    ASSERT_OK(sw_op_sum(bd, SW_FLOAT64, K, &r2));
    ASSERT_EQ(memcmp(&r1, &r2, sizeof r1), 0);
    long double exact = 0;
    for (int i = 0; i < K; i++)
        exact += dv[i];
    ASSERT_TRUE(fabs(r1.f - (double)exact) < 1e-9);
    ASSERT_OK(sw_buffer_free(bd));
    free(dv);
}

TEST(ops_buffer_fill_copy_dtypes)
{
    /* sw_buffer_fill with one element of each dtype as the pattern, and
     * sw_buffer_copy of element ranges, seen by the kernels. */
    sw_device *dev = test_device();
    enum { N = 1000 };
    for (size_t d = 0; d < 4; d++) {
        sw_dtype dt = all_dtypes[d];
        size_t esz = sw_dtype_size(dt);
        sw_scalar v;
        v.i = 0;
        if (is_float(dt))
            v.f = -0.375;
        else
            v.i = dt == SW_INT32 ? -77777 : (int64_t)0x123456789abcll;
        unsigned char pat[8];
        set_elem(dt, pat, 0, v);
        sw_buffer *a = test_alloc(dev, N * esz, "a");
        sw_buffer *b = test_alloc(dev, N * esz, "b");
        ASSERT_OK(sw_buffer_fill(a, 0, N * esz, pat, esz));
        sw_scalar zero;
        zero.i = 0;
        ASSERT_OK(sw_op_fill(b, dt, N, zero));
        /* b[100..400) = a[0..300) */
        ASSERT_OK(sw_buffer_copy(b, 100 * esz, a, 0, 300 * esz));
        sw_scalar sum;
        ASSERT_OK(sw_op_sum(b, dt, N, &sum));
        if (is_float(dt))
            ASSERT_DBL_EQ(sum.f, 300 * v.f);
        else
            ASSERT_EQ(sum.i, 300 * v.i);
        void *host = xmalloc(N * esz), *want = xmalloc(N * esz);
        for (size_t i = 0; i < N; i++)
            set_elem(dt, want, i, (i >= 100 && i < 400) ? v : zero);
        download(b, dt, host, N, 0);
        expect_elems(dt, host, want, N, "fill + copy");
        ASSERT_OK(sw_buffer_free(a));
        ASSERT_OK(sw_buffer_free(b));
        free(host);
        free(want);
    }
}

TEST(ops_integer_wrap)
{
    sw_device *dev = test_device();
    /* int32 */
    int32_t a32[4] = {INT32_MAX, INT32_MIN, INT32_MAX, -1};
    int32_t b32[4] = {1, -1, INT32_MAX, INT32_MIN};
    int32_t o32[4];
    sw_buffer *A = upload(dev, SW_INT32, a32, 4, 0, "a32");
    sw_buffer *B = upload(dev, SW_INT32, b32, 4, 0, "b32");
    sw_buffer *O = test_alloc(dev, sizeof o32, "o32");
    ASSERT_OK(sw_op_add(O, A, B, SW_INT32, 4));
    ASSERT_OK(sw_buffer_read(O, 0, o32, sizeof o32));
    ASSERT_EQ(o32[0], INT32_MIN);
    ASSERT_EQ(o32[1], INT32_MAX);
    ASSERT_EQ(o32[2], -2);
    ASSERT_EQ(o32[3], INT32_MAX);
    sw_scalar two = {.i = 2};
    ASSERT_OK(sw_op_scale(O, A, two, SW_INT32, 4));
    ASSERT_OK(sw_buffer_read(O, 0, o32, sizeof o32));
    ASSERT_EQ(o32[0], -2);
    ASSERT_EQ(o32[1], 0);
    ASSERT_EQ(o32[2], -2);
    ASSERT_EQ(o32[3], -2);
    /* y = 2 * a + b */
    ASSERT_OK(sw_op_axpy(two, A, B, SW_INT32, 4));
    ASSERT_OK(sw_buffer_read(B, 0, o32, sizeof o32));
    ASSERT_EQ(o32[0], -1);
    ASSERT_EQ(o32[1], -1);
    ASSERT_EQ(o32[2], INT32_MAX - 2);
    ASSERT_EQ(o32[3], INT32_MAX - 1);
    sw_scalar r;
    int32_t s32[2] = {INT32_MAX, 1};
    ASSERT_OK(sw_buffer_write(A, 0, s32, sizeof s32));
    ASSERT_OK(sw_op_sum(A, SW_INT32, 2, &r));
    ASSERT_EQ(r.i, (int64_t)INT32_MAX + 1);
    ASSERT_OK(sw_buffer_free(A));
    ASSERT_OK(sw_buffer_free(B));
    ASSERT_OK(sw_buffer_free(O));

    /* int64 */
    int64_t a64[3] = {INT64_MAX, INT64_MIN, INT64_MIN};
    int64_t b64[3] = {1, -1, INT64_MIN};
    int64_t o64[3];
    A = upload(dev, SW_INT64, a64, 3, 0, "a64");
    B = upload(dev, SW_INT64, b64, 3, 0, "b64");
    O = test_alloc(dev, sizeof o64, "o64");
    ASSERT_OK(sw_op_add(O, A, B, SW_INT64, 3));
    ASSERT_OK(sw_buffer_read(O, 0, o64, sizeof o64));
    ASSERT_EQ(o64[0], INT64_MIN);
    ASSERT_EQ(o64[1], INT64_MAX);
    ASSERT_EQ(o64[2], 0);
    sw_scalar m1 = {.i = -1};
    ASSERT_OK(sw_op_scale(O, A, m1, SW_INT64, 3));
    ASSERT_OK(sw_buffer_read(O, 0, o64, sizeof o64));
    ASSERT_EQ(o64[0], -INT64_MAX);
    ASSERT_EQ(o64[1], INT64_MIN);
    ASSERT_EQ(o64[2], INT64_MIN);
    ASSERT_OK(sw_op_sum(A, SW_INT64, 1, &r));
    ASSERT_EQ(r.i, INT64_MAX);
    int64_t s64[2] = {INT64_MAX, 1};
    ASSERT_OK(sw_buffer_write(A, 0, s64, sizeof s64));
    ASSERT_OK(sw_op_sum(A, SW_INT64, 2, &r));
    ASSERT_EQ(r.i, INT64_MIN);
    ASSERT_OK(sw_buffer_free(A));
    ASSERT_OK(sw_buffer_free(B));
    ASSERT_OK(sw_buffer_free(O));
}

/* Read the whole base and compare with a host model of it. */
static void expect_base(sw_buffer *base, const void *model, size_t bytes,
                        sw_dtype dt, const char *what)
{
    void *got = xmalloc(bytes);
    ASSERT_OK(sw_buffer_read(base, 0, got, bytes));
    expect_elems(dt, got, model, bytes / sw_dtype_size(dt), what);
    free(got);
}

TEST(ops_on_views)
{
    sw_device *dev = test_device();
    enum { TOTAL = 300, N = 200 };
    for (size_t d = 0; d < 4; d++) {
        sw_dtype dt = all_dtypes[d];
        size_t esz = sw_dtype_size(dt);
        size_t bytes = TOTAL * esz;
        void *ma = xmalloc(bytes), *mb = xmalloc(bytes), *mo = xmalloc(bytes);
        make_input(dt, ma, TOTAL, 1);
        make_input(dt, mb, TOTAL, 2);
        make_input(dt, mo, TOTAL, 3);
        sw_buffer *A = upload(dev, dt, ma, TOTAL, 0, "A");
        sw_buffer *B = upload(dev, dt, mb, TOTAL, 0, "B");
        sw_buffer *O = upload(dev, dt, mo, TOTAL, 0, "O");
        /* Views at different element offsets, none 512-aligned. */
        sw_buffer *va, *vb, *vo;
        ASSERT_OK(sw_buffer_view(A, 3 * esz, N * esz, &va));
        ASSERT_OK(sw_buffer_view(B, 17 * esz, N * esz, &vb));
        ASSERT_OK(sw_buffer_view(O, 50 * esz, N * esz, &vo));
        char *pa = (char *)ma + 3 * esz, *pb = (char *)mb + 17 * esz;
        char *po = (char *)mo + 50 * esz;

        ASSERT_OK(sw_op_add(vo, va, vb, dt, N));
        reference(SW_KERNEL_ADD, dt, N, pa, pb, po, alpha_for(dt, 0));
        expect_base(O, mo, bytes, dt, "add on views");

        sw_scalar alpha = alpha_for(dt, 1);
        ASSERT_OK(sw_op_scale(vo, vb, alpha, dt, N));
        reference(SW_KERNEL_SCALE, dt, N, pb, NULL, po, alpha);
        expect_base(O, mo, bytes, dt, "scale on views");

        ASSERT_OK(sw_op_axpy(alpha, va, vo, dt, N));
        reference(SW_KERNEL_AXPY, dt, N, pa, NULL, po, alpha);
        expect_base(O, mo, bytes, dt, "axpy on views");

        /* A view of a view, shorter than n of the outer one. */
        sw_buffer *vvo;
        ASSERT_OK(sw_buffer_view(vo, 10 * esz, 20 * esz, &vvo));
        sw_scalar v;
        if (is_float(dt))
            v.f = 0.5;
        else
            v.i = 77;
        ASSERT_OK(sw_op_fill(vvo, dt, 20, v));
        reference(SW_KERNEL_FILL, dt, 20, NULL, NULL, po + 10 * esz, v);
        expect_base(O, mo, bytes, dt, "fill on a view of a view");

        sw_scalar sum;
        ASSERT_OK(sw_op_sum(va, dt, N, &sum));
        sw_scalar want = reference_sum(dt, pa, N);
        ASSERT_EQ(memcmp(&sum, &want, sizeof sum), 0);
        /* The inputs' bases are unchanged. */
        expect_base(A, ma, bytes, dt, "input A");
        expect_base(B, mb, bytes, dt, "input B");

        ASSERT_OK(sw_buffer_free(vvo));
        ASSERT_OK(sw_buffer_free(va));
        ASSERT_OK(sw_buffer_free(vb));
        ASSERT_OK(sw_buffer_free(vo));
        ASSERT_OK(sw_buffer_free(A));
        ASSERT_OK(sw_buffer_free(B));
        ASSERT_OK(sw_buffer_free(O));
        free(ma);
        free(mb);
        free(mo);
    }
}

TEST(ops_zero_elements)
{
    sw_device *dev = test_device();
    sw_buffer *a = test_alloc(dev, 64, "a");
    sw_buffer *z = test_alloc(dev, 0, "empty");
    test_write_pattern(a, 9);
    for (size_t d = 0; d < 4; d++) {
        sw_dtype dt = all_dtypes[d];
        sw_scalar one;
        one.i = 0;
        if (is_float(dt))
            one.f = 1.0;
        else
            one.i = 1;
        ASSERT_OK(sw_op_fill(a, dt, 0, one));
        ASSERT_OK(sw_op_add(a, a, a, dt, 0));
        ASSERT_OK(sw_op_scale(a, a, one, dt, 0));
        ASSERT_OK(sw_op_axpy(one, a, a, dt, 0));
        ASSERT_OK(sw_op_fill(z, dt, 0, one));
        sw_scalar s = {.i = 77};
        ASSERT_OK(sw_op_sum(a, dt, 0, &s));
        if (is_float(dt))
            ASSERT_DBL_EQ(s.f, 0.0);
        else
            ASSERT_EQ(s.i, 0);
        s.i = 77;
        ASSERT_OK(sw_op_sum(z, dt, 0, &s));
        ASSERT_EQ(s.i, 0); /* 0.0 and 0 share the bits */
    }
    test_expect_pattern(a, 9);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(z));
}

TEST(ops_bad_dtype)
{
    sw_device *dev = test_device();
    sw_buffer *a = test_alloc(dev, 64, "a");
    sw_buffer *b = test_alloc(dev, 64, "b");
    test_write_pattern(a, 1);
    test_write_pattern(b, 2);
    sw_dtype bad[] = {(sw_dtype)SW_DTYPE_COUNT, (sw_dtype)-1, (sw_dtype)99};
    for (size_t k = 0; k < 3; k++) {
        sw_dtype dt = bad[k];
        sw_scalar one = {.i = 1};
        ASSERT_ERR(sw_op_fill(a, dt, 4, one), SW_ERR_DTYPE);
        ASSERT_ERR(sw_op_add(a, a, b, dt, 4), SW_ERR_DTYPE);
        ASSERT_ERR(sw_op_scale(a, b, one, dt, 4), SW_ERR_DTYPE);
        ASSERT_ERR(sw_op_axpy(one, b, a, dt, 4), SW_ERR_DTYPE);
        sw_scalar s = {.i = 77};
        ASSERT_ERR(sw_op_sum(a, dt, 4, &s), SW_ERR_DTYPE);
        ASSERT_EQ(s.i, 0);
    }
    ASSERT_OK(sw_device_synchronize(dev));
    test_expect_pattern(a, 1);
    test_expect_pattern(b, 2);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
}

TEST(ops_too_small)
{
    sw_device *dev = test_device();
    sw_buffer *big = test_alloc(dev, 4096, "big");
    sw_buffer *small = test_alloc(dev, 40, "small");
    test_write_pattern(big, 1);
    test_write_pattern(small, 2);
    sw_scalar one = {.f = 1.0}, s = {.i = 77};

    /* Exactly enough is fine: 10 float32, 5 float64. */
    ASSERT_OK(sw_op_add(big, small, small, SW_FLOAT32, 10));
    ASSERT_OK(sw_op_sum(small, SW_FLOAT64, 5, &s));
    test_write_pattern(big, 1);

    /* One element more, in each operand position. */
    ASSERT_ERR(sw_op_fill(small, SW_FLOAT32, 11, one), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_op_add(small, big, big, SW_FLOAT32, 11),
               SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_op_add(big, small, big, SW_FLOAT32, 11),
               SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_op_add(big, big, small, SW_FLOAT32, 11),
               SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_op_scale(big, small, one, SW_FLOAT64, 6),
               SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_op_axpy(one, big, small, SW_INT64, 6), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_op_axpy(one, small, big, SW_INT32, 11),
               SW_ERR_OUT_OF_RANGE);
    s.i = 77;
    ASSERT_ERR(sw_op_sum(small, SW_INT32, 11, &s), SW_ERR_OUT_OF_RANGE);
    ASSERT_EQ(s.i, 0);

    /* n * element size wraps around to a small number: refused (as out of
     * range, or as too large: the header leaves the name open), never
     * run. */
    size_t wrap32 = SIZE_MAX / 4 + 2; /* * 4 == 4 (mod 2^64) */
    size_t wrap64 = SIZE_MAX / 8 + 2; /* * 8 == 8 (mod 2^64) */
    ASSERT_ERR2(sw_op_fill(small, SW_FLOAT32, wrap32, one),
                SW_ERR_OUT_OF_RANGE, SW_ERR_TOO_LARGE);
    ASSERT_ERR2(sw_op_add(big, big, big, SW_INT32, wrap32),
                SW_ERR_OUT_OF_RANGE, SW_ERR_TOO_LARGE);
    ASSERT_ERR2(sw_op_axpy(one, big, big, SW_INT64, wrap64),
                SW_ERR_OUT_OF_RANGE, SW_ERR_TOO_LARGE);
    s.i = 77;
    ASSERT_ERR2(sw_op_sum(big, SW_FLOAT64, wrap64, &s), SW_ERR_OUT_OF_RANGE,
                SW_ERR_TOO_LARGE);
    ASSERT_EQ(s.i, 0);
    ASSERT_ERR2(sw_op_fill(big, SW_INT64, SIZE_MAX, one), SW_ERR_OUT_OF_RANGE,
                SW_ERR_TOO_LARGE);

    /* A view bounds the op even where its base has room. */
    sw_buffer *v = NULL;
    ASSERT_OK(sw_buffer_view(big, 100, 20, &v));
    ASSERT_ERR(sw_op_fill(v, SW_FLOAT32, 6, one), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_op_scale(big, v, one, SW_FLOAT32, 6), SW_ERR_OUT_OF_RANGE);
    ASSERT_OK(sw_buffer_free(v));

    ASSERT_OK(sw_device_synchronize(dev));
    test_expect_pattern(big, 1);
    test_expect_pattern(small, 2);
    ASSERT_OK(sw_buffer_free(big));
    ASSERT_OK(sw_buffer_free(small));
}

TEST(ops_in_place)
{
    sw_device *dev = test_device();
    for (size_t d = 0; d < 4; d++) {
        sw_dtype dt = all_dtypes[d];
        size_t esz = sw_dtype_size(dt);
        enum { N = 777 };
        void *m = xmalloc(N * esz), *got = xmalloc(N * esz);
        make_input(dt, m, N, 42 + d);
        sw_buffer *x = upload(dev, dt, m, N, 0, "x");
        /* x = x + x */
        ASSERT_OK(sw_op_add(x, x, x, dt, N));
        void *copy = xmalloc(N * esz);
        memcpy(copy, m, N * esz);
        reference(SW_KERNEL_ADD, dt, N, copy, copy, m, alpha_for(dt, 0));
        download(x, dt, got, N, 0);
        expect_elems(dt, got, m, N, "add in place");
        /* x = alpha x */
        sw_scalar alpha = alpha_for(dt, 1);
        ASSERT_OK(sw_op_scale(x, x, alpha, dt, N));
        memcpy(copy, m, N * esz);
        reference(SW_KERNEL_SCALE, dt, N, copy, NULL, m, alpha);
        download(x, dt, got, N, 0);
        expect_elems(dt, got, m, N, "scale in place");
        /* x = alpha x + x */
        ASSERT_OK(sw_op_axpy(alpha, x, x, dt, N));
        memcpy(copy, m, N * esz);
        reference(SW_KERNEL_AXPY, dt, N, copy, NULL, m, alpha);
        download(x, dt, got, N, 0);
        expect_elems(dt, got, m, N, "axpy in place");
        ASSERT_OK(sw_buffer_free(x));
        free(m);
        free(got);
        free(copy);
    }
}

TEST(ops_mixed_devices)
{
    test_require_sim();
    setenv("SPILLWAY_SIM_DEVICES", "2", 1);
    sw_device *d0 = test_open("sim:0");
    sw_device *d1 = test_open("sim:1");
    sw_buffer *a0 = test_alloc(d0, 400, "a0");
    sw_buffer *b0 = test_alloc(d0, 400, "b0");
    sw_buffer *c1 = test_alloc(d1, 400, "c1");
    test_write_pattern(a0, 1);
    test_write_pattern(b0, 2);
    test_write_pattern(c1, 3);
    sw_scalar one = {.f = 1.0};

    ASSERT_ERR(sw_op_add(a0, b0, c1, SW_FLOAT32, 100), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_op_add(c1, a0, b0, SW_FLOAT32, 100), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_op_add(a0, c1, b0, SW_FLOAT32, 100), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_op_scale(a0, c1, one, SW_FLOAT32, 100), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_op_axpy(one, c1, a0, SW_FLOAT32, 100), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_op_axpy(one, a0, c1, SW_FLOAT32, 100), SW_ERR_INVALID_ARG);
    sw_buffer *arr[2] = {a0, c1};
    sw_devmem ptrs[2];
    ASSERT_ERR(sw_launch_begin(d0, arr, 2, ptrs), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_launch_begin(d1, arr, 1, ptrs), SW_ERR_INVALID_ARG);

    /* A copy between devices either works or is refused; never half. */
    int rc = sw_buffer_copy(c1, 0, a0, 0, 400);
    if (rc == SW_OK) {
        unsigned char want[400], got[400];
        test_pattern(want, sizeof want, 1);
        ASSERT_OK(sw_buffer_read(c1, 0, got, sizeof got));
        ASSERT_MEM_EQ(got, want, sizeof want);
        test_write_pattern(c1, 3);
    } else {
        ASSERT_EQ(rc, SW_ERR_INVALID_ARG);
    }

    ASSERT_OK(sw_device_synchronize(d0));
    ASSERT_OK(sw_device_synchronize(d1));
    test_expect_pattern(a0, 1);
    test_expect_pattern(b0, 2);
    test_expect_pattern(c1, 3);
    /* Same-device operations still work on both. */
    ASSERT_OK(sw_op_fill(c1, SW_FLOAT32, 100, one));
    ASSERT_OK(sw_op_add(a0, a0, b0, SW_FLOAT32, 100));
    float f[100];
    ASSERT_OK(sw_buffer_read(c1, 0, f, sizeof f));
    for (int i = 0; i < 100; i++)
        ASSERT_DBL_EQ(f[i], 1.0);
    ASSERT_OK(sw_buffer_free(a0));
    ASSERT_OK(sw_buffer_free(b0));
    ASSERT_OK(sw_buffer_free(c1));
}

/* ------------------------------------------------------------------------
 * Raw launches
 * ---------------------------------------------------------------------- */

TEST(launch_raw_kernels)
{
    sw_device *dev = test_device();
    enum { N = 1000 };
    for (size_t d = 0; d < 4; d++) {
        sw_dtype dt = all_dtypes[d];
        size_t esz = sw_dtype_size(dt);
        void *ma = xmalloc(N * esz), *mb = xmalloc(N * esz);
        void *mo = xmalloc(N * esz), *got = xmalloc(N * esz);
        make_input(dt, ma, N, 11);
        make_input(dt, mb, N, 12);
        make_input(dt, mo, N, 13);
        sw_buffer *A = upload(dev, dt, ma, N, 0, "A");
        sw_buffer *B = upload(dev, dt, mb, N, 0, "B");
        sw_buffer *O = upload(dev, dt, mo, N, 0, "O");
        sw_buffer *S = test_alloc(dev, 8, "sum");
        sw_buffer *bufs[4] = {O, A, B, S};
        sw_devmem p[4];
        ASSERT_OK(sw_launch_begin(dev, bufs, 4, p));

        sw_kernel_args args;
        memset(&args, 0, sizeof args);
        args.dtype = dt;
        args.n = N;
        args.out = p[0];
        args.a = p[1];
        args.b = p[2];
        args.alpha = alpha_for(dt, 1);
        /* A sequence of kernels on the queue, in order. */
        args.kernel = SW_KERNEL_ADD;
        ASSERT_OK(sw_launch_kernel(dev, &args));
        reference(SW_KERNEL_ADD, dt, N, ma, mb, mo, args.alpha);
        args.kernel = SW_KERNEL_AXPY;
        ASSERT_OK(sw_launch_kernel(dev, &args));
        reference(SW_KERNEL_AXPY, dt, N, ma, NULL, mo, args.alpha);
        /* Raw offsets: the second half of O gets a scaled copy of B. */
        args.kernel = SW_KERNEL_SCALE;
        args.n = N / 2;
        args.out.offset += (N / 2) * esz;
        args.a = p[2];
        ASSERT_OK(sw_launch_kernel(dev, &args));
        reference(SW_KERNEL_SCALE, dt, N / 2, mb, NULL,
                  (char *)mo + (N / 2) * esz, args.alpha);
        /* COPY the first 10 of A over A[100..110). */
        args.kernel = SW_KERNEL_COPY;
        args.n = 10;
        args.out = p[1];
        args.out.offset += 100 * esz;
        args.a = p[1];
        ASSERT_OK(sw_launch_kernel(dev, &args));
        memcpy((char *)ma + 100 * esz, ma, 10 * esz);
        /* FILL B[990..1000). */
        args.kernel = SW_KERNEL_FILL;
        args.n = 10;
        args.out = p[2];
        args.out.offset += 990 * esz;
        ASSERT_OK(sw_launch_kernel(dev, &args));
        reference(SW_KERNEL_FILL, dt, 10, NULL, NULL,
                  (char *)mb + 990 * esz, args.alpha);
        /* SUM of A into S. */
        args.kernel = SW_KERNEL_SUM;
        args.n = N;
        args.out = p[3];
        args.a = p[1];
        ASSERT_OK(sw_launch_kernel(dev, &args));
        ASSERT_OK(sw_launch_end(dev, bufs, 4));

        download(O, dt, got, N, 0);
        expect_elems(dt, got, mo, N, "raw add/axpy/scale");
        download(A, dt, got, N, 0);
        expect_elems(dt, got, ma, N, "raw copy");
        download(B, dt, got, N, 0);
        expect_elems(dt, got, mb, N, "raw fill");
        sw_scalar sum;
        ASSERT_OK(sw_buffer_read(S, 0, &sum, 8));
        sw_scalar want = reference_sum(dt, ma, N);
        ASSERT_EQ(memcmp(&sum, &want, 8), 0);

        ASSERT_OK(sw_buffer_free(A));
        ASSERT_OK(sw_buffer_free(B));
        ASSERT_OK(sw_buffer_free(O));
        ASSERT_OK(sw_buffer_free(S));
        free(ma);
        free(mb);
        free(mo);
        free(got);
    }

    /* Views and duplicates in one launch. */
    sw_buffer *base = test_alloc(dev, 4096, "base");
    sw_buffer *v = NULL;
    ASSERT_OK(sw_buffer_view(base, 1024, 1024, &v));
    sw_buffer *bufs[3] = {v, base, v};
    sw_devmem p[3];
    ASSERT_OK(sw_launch_begin(dev, bufs, 3, p));
    ASSERT_UEQ(p[0].base, p[1].base);
    ASSERT_UEQ(p[0].offset, p[1].offset + 1024);
    ASSERT_UEQ(p[2].base, p[0].base);
    ASSERT_UEQ(p[2].offset, p[0].offset);
    sw_kernel_args args;
    memset(&args, 0, sizeof args);
    args.kernel = SW_KERNEL_FILL;
    args.dtype = SW_INT32;
    args.n = 256;
    args.out = p[0];
    args.alpha.i = 0x01020304;
    ASSERT_OK(sw_launch_kernel(dev, &args));
    ASSERT_OK(sw_launch_end(dev, bufs, 3));
    int32_t host[1024];
    ASSERT_OK(sw_buffer_read(base, 0, host, sizeof host));
    for (int i = 256; i < 512; i++)
        ASSERT_EQ(host[i], 0x01020304);
    ASSERT_OK(sw_buffer_free(v));
    ASSERT_OK(sw_buffer_free(base));
}

TEST(launch_bad_args)
{
    sw_device *dev = test_device();
    sw_buffer *a = test_alloc(dev, 400, "a");
    test_write_pattern(a, 5);
    sw_buffer *bufs[1] = {a};
    sw_devmem p[1];
    ASSERT_OK(sw_launch_begin(dev, bufs, 1, p));
    sw_kernel_args args;
    memset(&args, 0, sizeof args);
    args.kernel = SW_KERNEL_FILL;
    args.dtype = SW_FLOAT32;
    args.n = 100;
    args.out = p[0];
    args.a = p[0];
    args.b = p[0];
    args.alpha.f = 1.0;

    args.kernel = (sw_kernel)99;
    ASSERT_ERR(sw_launch_kernel(dev, &args), SW_ERR_INVALID_ARG);
    args.kernel = (sw_kernel)-1;
    ASSERT_ERR(sw_launch_kernel(dev, &args), SW_ERR_INVALID_ARG);
    args.kernel = SW_KERNEL_ADD;
    args.dtype = (sw_dtype)SW_DTYPE_COUNT;
    ASSERT_ERR(sw_launch_kernel(dev, &args), SW_ERR_DTYPE);
    args.dtype = (sw_dtype)-7;
    ASSERT_ERR(sw_launch_kernel(dev, &args), SW_ERR_DTYPE);

    /* launch_end with buffers of another kind of call. */
    ASSERT_ERR(sw_launch_end(dev, NULL, 1), SW_ERR_INVALID_ARG);
    ASSERT_OK(sw_launch_end(dev, bufs, 1));
    ASSERT_OK(sw_device_synchronize(dev));
    test_expect_pattern(a, 5);
    ASSERT_OK(sw_buffer_free(a));
}

/* bool holds truth values: fill, copy and sum only; the refusal says so
 * and changes nothing. */
TEST(ops_bool_arithmetic_refused)
{
    sw_device *dev = test_device();
    sw_buffer *a = test_alloc(dev, 64, "bools");
    test_write_pattern(a, 7);
    sw_scalar one = {.i = 1};
    ASSERT_ERR(sw_op_add(a, a, a, SW_BOOL, 64), SW_ERR_DTYPE);
    ASSERT_STR_CONTAINS(sw_last_error(), "bool");
    ASSERT_ERR(sw_op_scale(a, a, one, SW_BOOL, 64), SW_ERR_DTYPE);
    ASSERT_ERR(sw_op_axpy(one, a, a, SW_BOOL, 64), SW_ERR_DTYPE);
    sw_kernel_args args;
    memset(&args, 0, sizeof args);
    args.kernel = SW_KERNEL_ADD;
    args.dtype = SW_BOOL;
    args.n = 4;
    ASSERT_ERR(sw_launch_kernel(dev, &args), SW_ERR_DTYPE);
    test_expect_pattern(a, 7);
    ASSERT_OK(sw_buffer_free(a));
}

/* Every device says which dtypes its kernels support; one it does not is
 * refused naming the device, before anything is queued. */
TEST(ops_dtype_support_mask)
{
    sw_device *dev = test_device();
    uint32_t mask = 0;
    ASSERT_OK(sw_device_dtypes(dev, &mask));
    ASSERT_TRUE(mask & (1u << SW_FLOAT32));
    ASSERT_TRUE(mask & (1u << SW_INT32));
    ASSERT_ERR(sw_device_dtypes(dev, NULL), SW_ERR_INVALID_ARG);
    sw_buffer *a = test_alloc(dev, 256, "typed");
    test_write_pattern(a, 8);
    for (int d = 0; d < SW_DTYPE_COUNT; d++) {
        if (mask & (1u << d) || d == SW_BOOL)
            continue;
        ASSERT_ERR(sw_op_add(a, a, a, (sw_dtype)d, 4), SW_ERR_DTYPE);
        ASSERT_STR_CONTAINS(sw_last_error(), sw_device_name(dev));
        ASSERT_STR_CONTAINS(sw_last_error(), sw_dtype_name((sw_dtype)d));
    }
    test_expect_pattern(a, 8);
    ASSERT_OK(sw_buffer_free(a));
}

/* sw_launch_end trusts nothing the matching begin saw: a second end, an
 * array changed in between, or an end from another array of the same
 * handles are all checked. */
/* The pins of dev's live buffer tagged `tag` (-1: none such). */
static int pins_of(sw_device *dev, const char *tag)
{
    sw_buffer_info bi[8];
    size_t count = 0;
    ASSERT_OK(sw_memory_snapshot(dev, bi, 8, &count));
    for (size_t i = 0; i < count && i < 8; i++)
        if (strcmp(bi[i].tag, tag) == 0)
            return (int)bi[i].pins;
    return -1;
}

/* sw_launch_begin remembers the handles it last decoded on this thread
 * and only rechecks their generations when they come again: a handle
 * freed since (its slot then reused) or a device changed must still fail,
 * pinning nothing. */
TEST(launch_begin_rechecks_repeated_handles)
{
    sw_device *dev = test_device();
    sw_buffer *a = test_alloc(dev, 4096, "a");
    sw_buffer *b = test_alloc(dev, 4096, "b");
    sw_buffer *args[2] = {a, b};
    sw_devmem p[2];
    for (int i = 0; i < 3; i++) {
        ASSERT_OK(sw_launch_begin(dev, args, 2, p));
        ASSERT_EQ(pins_of(dev, "a"), 1);
        ASSERT_OK(sw_launch_end(dev, args, 2));
    }
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_ERR(sw_launch_begin(dev, args, 2, p), SW_ERR_INVALID_HANDLE);
    ASSERT_UEQ(p[0].base, 0);
    ASSERT_EQ(pins_of(dev, "a"), 0);
    /* b's slot reused: the stale handle still fails. */
    sw_buffer *c = test_alloc(dev, 4096, "c");
    sw_buffer *fresh[2] = {a, c};
    ASSERT_OK(sw_launch_begin(dev, fresh, 2, p));
    ASSERT_OK(sw_launch_end(dev, fresh, 2));
    ASSERT_ERR(sw_launch_begin(dev, args, 2, p), SW_ERR_INVALID_HANDLE);
    ASSERT_EQ(pins_of(dev, "a"), 0);
    /* The same handles on another device: foreign there. */
    sw_device *other;
    if (test_is_sim()) {
        setenv("SPILLWAY_SIM_DEVICES", "2", 1);
        other = test_open("sim:1");
    } else {
        other = test_open("sim:0");
    }
    ASSERT_OK(sw_launch_begin(dev, fresh, 2, p));
    ASSERT_OK(sw_launch_end(dev, fresh, 2));
    ASSERT_ERR(sw_launch_begin(other, fresh, 2, p), SW_ERR_INVALID_ARG);
    ASSERT_EQ(pins_of(dev, "a"), 0);
    ASSERT_OK(sw_launch_begin(dev, fresh, 2, p));
    ASSERT_EQ(pins_of(dev, "c"), 1);
    ASSERT_OK(sw_launch_end(dev, fresh, 2));
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(c));
}

TEST(launch_end_rechecks)
{
    sw_device *dev = test_device();
    sw_buffer *a = test_alloc(dev, 4096, "a");
    sw_buffer *b = test_alloc(dev, 4096, "b");
    sw_buffer *args[2] = {a, b};
    sw_devmem p[2];
    ASSERT_OK(sw_launch_begin(dev, args, 2, p));
    ASSERT_OK(sw_launch_end(dev, args, 2));
    ASSERT_ERR(sw_launch_end(dev, args, 2), SW_ERR_INVALID_ARG);
    /* The array changed between begin and end: b was never pinned. */
    sw_buffer *one[2] = {a, a};
    ASSERT_OK(sw_launch_begin(dev, one, 2, p));
    one[1] = b;
    ASSERT_ERR(sw_launch_end(dev, one, 2), SW_ERR_INVALID_ARG);
    one[1] = a;
    ASSERT_OK(sw_launch_end(dev, one, 2));
    /* Another array with the same handles. */
    ASSERT_OK(sw_launch_begin(dev, args, 2, p));
    sw_buffer *copy[2] = {a, b};
    ASSERT_OK(sw_launch_end(dev, copy, 2));
    ASSERT_ERR(sw_launch_end(dev, args, 2), SW_ERR_INVALID_ARG);
    if (!test_can_spill()) { /* host:0: pins are all that is left to see */
        sw_buffer_info bi[2];
        size_t count = 0;
        ASSERT_OK(sw_memory_snapshot(dev, bi, 2, &count));
        ASSERT_EQ(count, 2);
        ASSERT_EQ(bi[0].pins + bi[1].pins, 0);
        ASSERT_OK(sw_buffer_free(a));
        ASSERT_OK(sw_buffer_free(b));
        return;
    }
    /* Nothing stays pinned: both can spill. */
    ASSERT_OK(sw_set_memory_budget(dev, 4096));
    sw_buffer *c = test_alloc(dev, 4096, "c");
    sw_buffer_state st;
    ASSERT_OK(sw_buffer_state_get(a, &st));
    ASSERT_EQ(st, SW_SPILLED);
    ASSERT_OK(sw_buffer_state_get(b, &st));
    ASSERT_EQ(st, SW_SPILLED);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_buffer_free(c));
}
