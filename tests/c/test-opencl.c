/*
 * test-opencl.c -- what only the OpenCL backend has: the capacity it
 * enforces (CL_DEVICE_GLOBAL_MEM_SIZE or SPILLWAY_OPENCL_MEMORY), the
 * largest allocation (CL_DEVICE_MAX_MEM_ALLOC_SIZE), bit-identical results
 * with and without a budget or a small capacity, reproducible sums of every
 * shape, the float-float sums of devices without cl_khr_fp64, kernels at
 * offsets clEnqueueFillBuffer and typed kernels cannot take, OpenCL error
 * names in messages, and an absent platform.
 *
 * The whole generic suite runs against opencl:0 too (SW_TEST_DEVICE); these
 * tests skip unless the device under test is an OpenCL device, except
 * opencl_no_platform, which needs only the backend to be built.
 */
#include "test.h"
#include "tests.h"

#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef SW_HAVE_OPENCL
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#endif

#define MiB(n) ((uint64_t)(n) << 20)

static void require_opencl(void)
{
#ifndef SW_HAVE_OPENCL
    SKIP("this build has no OpenCL backend");
#else
    if (strncmp(test_device_spec(), "opencl:", 7) != 0)
        SKIP("needs an OpenCL device (SW_TEST_DEVICE=%s)",
             test_device_spec());
#endif
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        FAIL("out of host memory (%zu bytes)", n);
    return p;
}

/* Random float32 values with full mantissas, so that sums depend on the
 * order of the additions. */
static void random_floats(float *x, size_t n, uint64_t seed)
{
    uint64_t st = seed * 0x9E3779B97F4A7C15ull + 7;
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((double)(test_rand(&st) >> 11) / 9007199254740992.0 -
                       0.45) *
               (float)(1 + (i % 7));
}

static sw_buffer *upload(sw_device *dev, const void *src, size_t bytes,
                         const char *tag)
{
    sw_buffer *b = test_alloc(dev, bytes, tag);
    ASSERT_OK(sw_buffer_write(b, 0, src, bytes));
    return b;
}

/* ------------------------------------------------------------------------
 * The device and its memory
 * ---------------------------------------------------------------------- */

TEST(opencl_device_listed)
{
    require_opencl();
    unsetenv("SPILLWAY_OPENCL_MEMORY");
    sw_device *dev = test_device();
    size_t n = 0;
    ASSERT_OK(sw_device_count(&n));
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        char spec[32];
        ASSERT_OK(sw_device_spec_at(i, spec, sizeof spec));
        found |= strcmp(spec, test_device_spec()) == 0;
    }
    ASSERT_TRUE(found);
    ASSERT_STR_EQ(sw_device_name(dev), test_device_spec());
    const char *desc = sw_device_description(dev);
    ASSERT_STR_CONTAINS(desc, "capacity");
    sw_memory_info i = test_info_synced(dev);
    ASSERT_UGT(i.device_total, 0);
    ASSERT_EQ(i.device_total % SW_ALLOC_GRANULARITY, 0);
    /* Free memory is the driver's to say; without an answer it is unknown
     * and reported as 0, not invented from our own count. */
    if (!i.device_free_known)
        ASSERT_UEQ(i.device_free, 0);
    else
        ASSERT_ULE(i.device_free, i.device_total);
}

TEST(opencl_memory_env)
{
    require_opencl();
    /* A capacity below the device's. */
    setenv("SPILLWAY_OPENCL_MEMORY", "64M", 1);
    sw_device *dev = NULL;
    ASSERT_OK(sw_device_open(test_device_spec(), &dev));
    sw_memory_info i = test_info(dev);
    ASSERT_UEQ(i.device_total, MiB(64));
    ASSERT_STR_CONTAINS(sw_device_description(dev), "SPILLWAY_OPENCL_MEMORY");
    ASSERT_OK(sw_device_close(dev));

    /* Above what the device reports: capped at that. */
    setenv("SPILLWAY_OPENCL_MEMORY", "1024T", 1);
    ASSERT_OK(sw_device_open(test_device_spec(), &dev));
    uint64_t reported = test_info(dev).device_total;
    ASSERT_ULT(reported, (uint64_t)1 << 50);
    ASSERT_OK(sw_device_close(dev));
    unsetenv("SPILLWAY_OPENCL_MEMORY");
    ASSERT_OK(sw_device_open(test_device_spec(), &dev));
    ASSERT_UEQ(test_info(dev).device_total, reported);
    ASSERT_OK(sw_device_close(dev));

    /* Malformed or too small: the open fails and names the variable. */
    const char *bad[] = {"lots", "-5M", "12Q", "1K", "0"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        setenv("SPILLWAY_OPENCL_MEMORY", bad[k], 1);
        sw_device *none = (sw_device *)(uintptr_t)1;
        ASSERT_ERR(sw_device_open(test_device_spec(), &none),
                   SW_ERR_INVALID_ARG);
        ASSERT_NULL(none);
        ASSERT_STR_CONTAINS(sw_last_error(), "SPILLWAY_OPENCL_MEMORY");
    }
    unsetenv("SPILLWAY_OPENCL_MEMORY");
}

/* Allocate pinned 1 MiB blocks until the device says no. */
static size_t fill_pinned(sw_device *dev, sw_buffer **blocks, size_t max)
{
    size_t n = 0;
    for (;;) {
        ASSERT_LT(n, max);
        sw_buffer *b = NULL;
        int rc = sw_buffer_alloc(dev, MiB(1), "block", &b);
        if (rc == SW_ERR_OOM)
            return n;
        ASSERT_OK(rc);
        test_pin(b);
        blocks[n++] = b;
    }
}

TEST(opencl_capacity_enforced)
{
    require_opencl();
    setenv("SPILLWAY_OPENCL_MEMORY", "32M", 1);
    sw_device *dev = test_device();
    ASSERT_UEQ(test_info(dev).device_total, MiB(32));

    /* Nothing can move: the 33rd MiB (less the backend's few KiB of sum
     * partials) is refused, whatever the runtime would allow. */
    sw_buffer *blocks[64];
    size_t n = fill_pinned(dev, blocks, 64);
    char msg[4096];
    snprintf(msg, sizeof msg, "%s", sw_last_error());
    ASSERT_GE(n, 30);
    ASSERT_LE(n, 31);
    ASSERT_STR_ICONTAINS(msg, "capacity");
    ASSERT_MSG_BYTES(msg, MiB(1));
    ASSERT_MSG_BYTES(msg, MiB(32));
    sw_memory_info full = test_info_synced(dev);
    ASSERT_UEQ(full.in_use, MiB(n));
    ASSERT_UEQ(full.ooms, 1);
    /* The blocks hold data and are intact. */
    for (size_t i = 0; i < n; i += 5)
        test_write_pattern(blocks[i], (uint32_t)i);
    for (size_t i = 0; i < n; i += 5)
        test_expect_pattern(blocks[i], (uint32_t)i);
    /* A free makes room again (stream-ordered, through the ladder). */
    test_unpin_free(blocks[3]);
    ASSERT_OK(sw_empty_cache(dev));
    blocks[3] = test_alloc(dev, MiB(1), "again");
    test_pin(blocks[3]);
    for (size_t i = 0; i < n; i++)
        test_unpin_free(blocks[i]);
    ASSERT_OK(sw_empty_cache(dev));

    /* Unpinned, three times the capacity fits: the ladder spills rather
     * than letting the device grow, and every byte comes back. */
    enum { M = 96 };
    sw_buffer *many[M];
    for (size_t i = 0; i < M; i++) {
        many[i] = test_alloc(dev, MiB(1), "many");
        test_write_pattern(many[i], (uint32_t)(1000 + i));
        sw_memory_info now = test_info(dev);
        ASSERT_ULE(now.in_use + now.cached, MiB(32));
    }
    sw_memory_info after = test_info_synced(dev);
    ASSERT_UGE(after.spills, M - 31);
    ASSERT_UEQ(after.in_use + after.spilled, MiB(M));
    ASSERT_UEQ(after.ooms, full.ooms); /* no new failure */
    /* Use them on the device (restoring each), then read them back. */
    for (size_t i = 0; i < M; i++) {
        sw_scalar one = {.i = 1};
        sw_buffer *v = NULL;
        ASSERT_OK(sw_buffer_view(many[i], 0, 4096, &v));
        ASSERT_OK(sw_op_axpy(one, v, v, SW_INT32, 1024)); /* doubles */
        ASSERT_OK(sw_buffer_free(v));
    }
    for (size_t i = 0; i < M; i++) {
        unsigned char *got = xmalloc(MiB(1));
        unsigned char *want = xmalloc(MiB(1));
        test_pattern(want, MiB(1), (uint32_t)(1000 + i));
        for (size_t w = 0; w < 1024; w++) {
            uint32_t x;
            memcpy(&x, want + 4 * w, 4);
            x *= 2;
            memcpy(want + 4 * w, &x, 4);
        }
        ASSERT_OK(sw_buffer_read(many[i], 0, got, MiB(1)));
        ASSERT_MEM_EQ(got, want, MiB(1));
        free(got);
        free(want);
        ASSERT_OK(sw_buffer_free(many[i]));
    }
    unsetenv("SPILLWAY_OPENCL_MEMORY");
}

#ifdef SW_HAVE_OPENCL
/* The cl_device_id behind opencl:index, found the way the backend lists
 * devices (platform order, then device order; OpenCL 1.2+, available,
 * with a compiler). */
static cl_device_id find_cl_device(int index)
{
    cl_platform_id plats[16];
    cl_uint np = 0;
    if (clGetPlatformIDs(16, plats, &np) != CL_SUCCESS)
        return NULL;
    int seen = 0;
    for (cl_uint p = 0; p < np && p < 16; p++) {
        cl_device_id devs[64];
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 64, devs, &nd) !=
            CL_SUCCESS)
            continue;
        for (cl_uint i = 0; i < nd && i < 64; i++) {
            char ver[128] = "";
            int major = 0, minor = 0;
            cl_bool avail = CL_FALSE, comp = CL_FALSE;
            clGetDeviceInfo(devs[i], CL_DEVICE_VERSION, sizeof ver - 1, ver,
                            NULL);
            clGetDeviceInfo(devs[i], CL_DEVICE_AVAILABLE, sizeof avail,
                            &avail, NULL);
            clGetDeviceInfo(devs[i], CL_DEVICE_COMPILER_AVAILABLE,
                            sizeof comp, &comp, NULL);
            if (sscanf(ver, "OpenCL %d.%d", &major, &minor) != 2 ||
                major * 100 + minor * 10 < 120 || !avail || !comp)
                continue;
            if (seen++ == index)
                return devs[i];
        }
    }
    return NULL;
}
#endif

TEST(opencl_max_alloc)
{
    require_opencl();
#ifdef SW_HAVE_OPENCL
    unsetenv("SPILLWAY_OPENCL_MEMORY");
    sw_device *dev = test_device();
    cl_device_id d = find_cl_device(atoi(test_device_spec() + 7));
    ASSERT_NOT_NULL(d);
    char name[96] = "";
    clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
    name[40] = '\0';
    ASSERT_STR_CONTAINS(sw_device_description(dev), name);
    cl_ulong maxalloc = 0, gmem = 0;
    ASSERT_EQ(clGetDeviceInfo(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE,
                              sizeof maxalloc, &maxalloc, NULL),
              CL_SUCCESS);
    ASSERT_EQ(clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof gmem,
                              &gmem, NULL),
              CL_SUCCESS);
    sw_memory_info i = test_info(dev);
    ASSERT_UEQ(i.device_total, gmem - gmem % SW_ALLOC_GRANULARITY);
    if (maxalloc >= i.device_total)
        SKIP("CL_DEVICE_MAX_MEM_ALLOC_SIZE (%llu) is not below the "
             "capacity",
             (unsigned long long)maxalloc);
    /* One granule past the largest allocation: refused before anything is
     * asked of the device, saying what the limit is. */
    size_t over = (size_t)(maxalloc - maxalloc % SW_ALLOC_GRANULARITY) +
                  SW_ALLOC_GRANULARITY;
    sw_buffer *out = (sw_buffer *)(uintptr_t)1;
    ASSERT_ERR(sw_buffer_alloc(dev, over, "too-big", &out), SW_ERR_TOO_LARGE);
    ASSERT_NULL(out);
    const char *msg = sw_last_error();
    ASSERT_MSG_BYTES(msg, over);
    ASSERT_MSG_BYTES(msg, maxalloc - maxalloc % SW_ALLOC_GRANULARITY);
    ASSERT_STR_ICONTAINS(msg, "largest allocation");
    sw_memory_info after = test_info(dev);
    ASSERT_UEQ(after.in_use, 0);
    ASSERT_UEQ(after.allocs, 0);
    /* Exactly the limit is allowed (and used: its last element). */
    size_t edge = (size_t)(maxalloc - maxalloc % SW_ALLOC_GRANULARITY);
    sw_buffer *big = test_alloc(dev, edge, "at-the-limit");
    int64_t v = 0x0123456789abcdefll, got = 0;
    ASSERT_OK(sw_buffer_write(big, edge - 8, &v, 8));
    ASSERT_OK(sw_buffer_read(big, edge - 8, &got, 8));
    ASSERT_EQ(got, v);
    ASSERT_OK(sw_buffer_free(big));
    ASSERT_OK(sw_empty_cache(dev));
#endif
}

/* ------------------------------------------------------------------------
 * Same bits with and without a budget or a small capacity
 * ---------------------------------------------------------------------- */

enum { PIPE_BUFS = 12, PIPE_N = 1 << 18, PIPE_STEPS = 40 };

/* Element-wise ops and sums over 12 buffers of 1 MiB (float32), results
 * into bytes (all buffers, end state) and sums (one per step). */
static void pipeline(sw_device *dev, uint64_t budget, unsigned char *bytes,
                     double *sums, sw_memory_info *stats)
{
    ASSERT_OK(sw_set_memory_budget(dev, budget));
    size_t nb = PIPE_N * sizeof(float);
    float *host = xmalloc(nb);
    sw_buffer *b[PIPE_BUFS];
    for (int i = 0; i < PIPE_BUFS; i++) {
        random_floats(host, PIPE_N, 100 + (uint64_t)i);
        b[i] = upload(dev, host, nb, "pipe");
    }
    for (int s = 0; s < PIPE_STEPS; s++) {
        sw_buffer *o = b[(s * 5) % PIPE_BUFS];
        sw_buffer *x = b[(s * 3 + 1) % PIPE_BUFS];
        sw_buffer *y = b[(s * 7 + 2) % PIPE_BUFS];
        sw_scalar alpha = {.f = 0.5 + 0.01 * s};
        switch (s % 3) {
        case 0: ASSERT_OK(sw_op_add(o, x, y, SW_FLOAT32, PIPE_N)); break;
        case 1: ASSERT_OK(sw_op_scale(o, x, alpha, SW_FLOAT32, PIPE_N)); break;
        default: ASSERT_OK(sw_op_axpy(alpha, x, o, SW_FLOAT32, PIPE_N)); break;
        }
        sw_scalar r;
        ASSERT_OK(sw_op_sum(o, SW_FLOAT32, PIPE_N, &r));
        sums[s] = r.f;
    }
    for (int i = 0; i < PIPE_BUFS; i++) {
        ASSERT_OK(sw_buffer_read(b[i], 0, bytes + (size_t)i * nb, nb));
        ASSERT_OK(sw_buffer_free(b[i]));
    }
    *stats = test_info_synced(dev);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    ASSERT_OK(sw_empty_cache(dev));
    free(host);
}

TEST(opencl_budget_same_bits)
{
    require_opencl();
    unsetenv("SPILLWAY_OPENCL_MEMORY");
    size_t total = (size_t)PIPE_BUFS * PIPE_N * sizeof(float);
    unsigned char *r0 = xmalloc(total), *r1 = xmalloc(total),
                  *r2 = xmalloc(total);
    double s0[PIPE_STEPS], s1[PIPE_STEPS], s2[PIPE_STEPS];
    sw_memory_info i0, i1, i2;

    sw_device *dev = test_device();
    pipeline(dev, 0, r0, s0, &i0);
    ASSERT_UEQ(i0.spills, 0);
    /* A budget of 4 MiB: three operands fit, twelve buffers do not. */
    pipeline(dev, MiB(4), r1, s1, &i1);
    ASSERT_UGT(i1.spills, 0);
    ASSERT_UGT(i1.restores, 0);
    ASSERT_MEM_EQ(r0, r1, total);
    ASSERT_MEM_EQ(s0, s1, sizeof s0);

    /* No budget but a 4 MiB device: the capacity makes the backend refuse
     * allocations, and the ladder spills. */
    setenv("SPILLWAY_OPENCL_MEMORY", "4M", 1);
    sw_device *small = NULL;
    ASSERT_OK(sw_device_close(dev)); /* test_device's reference... */
    ASSERT_OK(sw_device_open(test_device_spec(), &small));
    ASSERT_PTR_EQ(small, dev); /* ...reopened with the new capacity */
    ASSERT_UEQ(test_info(small).device_total, MiB(4));
    pipeline(small, 0, r2, s2, &i2);
    ASSERT_UGT(i2.spills, 0);
    ASSERT_UEQ(i2.ooms, 0);
    ASSERT_MEM_EQ(r0, r2, total);
    ASSERT_MEM_EQ(s0, s2, sizeof s0);
    /* The runner closes test_device's reference: this one stands for it. */
    unsetenv("SPILLWAY_OPENCL_MEMORY");
    free(r0);
    free(r1);
    free(r2);
}

/* ------------------------------------------------------------------------
 * Sums
 * ---------------------------------------------------------------------- */

static long double exact_sum(const float *x, size_t n, long double *abs_sum)
{
    long double s = 0, a = 0;
    for (size_t i = 0; i < n; i++) {
        s += x[i];
        a += fabsl((long double)x[i]);
    }
    *abs_sum = a;
    return s;
}

/* Sizes around the shape's edges: one work-group, the group cap (1024
 * groups of at most 256), several tiles per group. */
static const size_t sum_sizes[] = {1,      2,      255,    256,     257,
                                   1023,   65536,  65537,  262143,  262144,
                                   262145, 524289, 999983, 3000001};

static void check_sums(sw_device *dev, double rel_tol)
{
    for (size_t k = 0; k < sizeof sum_sizes / sizeof sum_sizes[0]; k++) {
        size_t n = sum_sizes[k];
        float *x = xmalloc(n * sizeof *x);
        random_floats(x, n, 7 + k);
        sw_buffer *b = upload(dev, x, n * sizeof *x, "sum");
        sw_scalar r1, r2;
        ASSERT_OK(sw_op_sum(b, SW_FLOAT32, n, &r1));
        ASSERT_OK(sw_op_sum(b, SW_FLOAT32, n, &r2));
        if (memcmp(&r1, &r2, sizeof r1) != 0)
            FAIL("n=%zu: two sums differ: %.17g vs %.17g", n, r1.f, r2.f);
        long double abs_sum;
        long double ex = exact_sum(x, n, &abs_sum);
        double err = fabs((double)((long double)r1.f - ex));
        if (err > rel_tol * (double)abs_sum + 1e-30)
            FAIL("n=%zu: sum %.17g, exact %.17Lg: error %g > %g x %Lg", n,
                 r1.f, ex, err, rel_tol, abs_sum);
        /* Spilled and restored: the same bits. */
        ASSERT_OK(sw_set_memory_budget(dev, SW_ALLOC_GRANULARITY));
        sw_buffer *other = test_alloc(dev, 512, "evict");
        sw_buffer_state st;
        ASSERT_OK(sw_buffer_state_get(b, &st));
        ASSERT_EQ(st, SW_SPILLED);
        ASSERT_OK(sw_buffer_free(other));
        ASSERT_OK(sw_set_memory_budget(dev, 0));
        ASSERT_OK(sw_op_sum(b, SW_FLOAT32, n, &r2));
        ASSERT_EQ(memcmp(&r1, &r2, sizeof r1), 0);
        ASSERT_OK(sw_buffer_free(b));
        free(x);
    }
}

TEST(opencl_sum_shapes)
{
    require_opencl();
    unsetenv("SPILLWAY_OPENCL_FP64");
    sw_device *dev = test_device();
    check_sums(dev, 1e-12);
    /* int64 and int32 wrap exactly, at any size. */
    size_t n = 300007;
    int64_t *v = xmalloc(n * sizeof *v);
    uint64_t st = 99, want = 0;
    for (size_t i = 0; i < n; i++) {
        v[i] = (int64_t)test_rand(&st);
        want += (uint64_t)v[i];
    }
    sw_buffer *b = upload(dev, v, n * sizeof *v, "i64");
    sw_scalar r;
    ASSERT_OK(sw_op_sum(b, SW_INT64, n, &r));
    ASSERT_UEQ((uint64_t)r.i, want);
    /* The same memory as int32: sign-extended into int64. */
    const int32_t *w = (const int32_t *)v;
    uint64_t want32 = 0;
    for (size_t i = 0; i < 2 * n; i++)
        want32 += (uint64_t)(int64_t)w[i];
    ASSERT_OK(sw_op_sum(b, SW_INT32, 2 * n, &r));
    ASSERT_UEQ((uint64_t)r.i, want32);
    ASSERT_OK(sw_buffer_free(b));
    free(v);
}

/* Without cl_khr_fp64 (forced here): float64 kernels are refused with a
 * clear reason, and float32 sums still accumulate beyond float32's
 * precision (float-float pairs, converted to the nearest double). */
TEST(opencl_fp64_off)
{
    require_opencl();
    setenv("SPILLWAY_OPENCL_FP64", "0", 1);
    sw_device *dev = test_device();
    ASSERT_STR_CONTAINS(sw_device_description(dev), "no fp64");
    sw_buffer *d = test_alloc(dev, 800, "f64");
    double ones[100];
    for (int i = 0; i < 100; i++)
        ones[i] = 1.0;
    ASSERT_OK(sw_buffer_write(d, 0, ones, sizeof ones)); /* bytes: fine */
    sw_scalar two = {.f = 2.0}, r;
    ASSERT_ERR(sw_op_scale(d, d, two, SW_FLOAT64, 100), SW_ERR_DTYPE);
    ASSERT_STR_CONTAINS(sw_last_error(), "cl_khr_fp64");
    ASSERT_STR_CONTAINS(sw_last_error(), "SPILLWAY_OPENCL_FP64");
    ASSERT_ERR(sw_op_add(d, d, d, SW_FLOAT64, 100), SW_ERR_DTYPE);
    ASSERT_ERR(sw_op_axpy(two, d, d, SW_FLOAT64, 100), SW_ERR_DTYPE);
    ASSERT_ERR(sw_op_fill(d, SW_FLOAT64, 100, two), SW_ERR_DTYPE);
    ASSERT_ERR(sw_op_sum(d, SW_FLOAT64, 100, &r), SW_ERR_DTYPE);
    ASSERT_OK(sw_buffer_free(d));

    /* 1e8 + 1000 ones: exact in a double, 1e8 in float32. */
    enum { M = 1001 };
    float f[M];
    f[0] = 1e8f;
    for (int i = 1; i < M; i++)
        f[i] = 1.0f;
    sw_buffer *bf = upload(dev, f, sizeof f, "f32");
    ASSERT_OK(sw_op_sum(bf, SW_FLOAT32, M, &r));
    ASSERT_DBL_EQ(r.f, 1e8 + 1000.0);
    /* Zeros, tiny terms, infinities and NaN come through. */
    float g[4] = {-0.0f, -0.0f, -0.0f, -0.0f};
    ASSERT_OK(sw_buffer_write(bf, 0, g, sizeof g));
    ASSERT_OK(sw_op_sum(bf, SW_FLOAT32, 1, &r));
    ASSERT_DBL_EQ(r.f, 0.0);
    ASSERT_FALSE(signbit(r.f)); /* 0.0 + -0.0, as on the simulated device */
    g[0] = -3.25f;
    g[1] = 1e-30f;
    g[2] = 1.5f;
    ASSERT_OK(sw_buffer_write(bf, 0, g, sizeof g));
    ASSERT_OK(sw_op_sum(bf, SW_FLOAT32, 3, &r));
    ASSERT_DBL_EQ(r.f, (double)-3.25f + (double)1e-30f + (double)1.5f);
    g[1] = INFINITY;
    ASSERT_OK(sw_buffer_write(bf, 0, g, sizeof g));
    ASSERT_OK(sw_op_sum(bf, SW_FLOAT32, 3, &r));
    ASSERT_TRUE(isinf(r.f) && r.f > 0);
    g[2] = NAN;
    ASSERT_OK(sw_buffer_write(bf, 0, g, sizeof g));
    ASSERT_OK(sw_op_sum(bf, SW_FLOAT32, 3, &r));
    ASSERT_TRUE(isnan(r.f));
    ASSERT_OK(sw_buffer_free(bf));

    /* Random data: reproducible, and within float-float accuracy. */
    check_sums(dev, 1e-9);
    unsetenv("SPILLWAY_OPENCL_FP64");
}

/* ------------------------------------------------------------------------
 * Offsets typed kernels and clEnqueueFillBuffer cannot take
 * ---------------------------------------------------------------------- */

TEST(opencl_unaligned_kernels)
{
    require_opencl();
    sw_device *dev = test_device();
    enum { SZ = 4096 };
    unsigned char model[SZ], got[SZ];
    test_pattern(model, SZ, 3);
    sw_buffer *b = upload(dev, model, SZ, "bytes");

    /* sw_buffer_fill with an offset that is no multiple of the pattern. */
    const unsigned char pat[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    size_t psizes[3] = {2, 4, 8};
    for (int k = 0; k < 3; k++) {
        size_t off = 3 + 100 * (size_t)k, n = psizes[k] * 37;
        ASSERT_OK(sw_buffer_fill(b, off, n, pat, psizes[k]));
        for (size_t i = 0; i < n; i++)
            model[off + i] = pat[i % psizes[k]];
    }
    ASSERT_OK(sw_buffer_read(b, 0, got, SZ));
    ASSERT_MEM_EQ(got, model, SZ);

    sw_buffer *bufs[1] = {b};
    sw_devmem p[1];
    ASSERT_OK(sw_launch_begin(dev, bufs, 1, p));
    sw_kernel_args a;
    memset(&a, 0, sizeof a);
    /* FILL of int32 at byte offset 1001. */
    a.kernel = SW_KERNEL_FILL;
    a.dtype = SW_INT32;
    a.n = 50;
    a.out = p[0];
    a.out.offset += 1001;
    a.alpha.i = -2;
    ASSERT_OK(sw_launch_kernel(dev, &a));
    int32_t m2 = -2;
    for (size_t i = 0; i < 50; i++)
        memcpy(model + 1001 + 4 * i, &m2, 4);
    /* COPY of int64 between unaligned ranges, then overlapping forward and
     * backward (a memmove). */
    a.kernel = SW_KERNEL_COPY;
    a.dtype = SW_INT64;
    a.n = 20;
    a.out = p[0];
    a.out.offset += 2003;
    a.a = p[0];
    a.a.offset += 5;
    ASSERT_OK(sw_launch_kernel(dev, &a));
    memmove(model + 2003, model + 5, 160);
    a.out.offset = p[0].offset + 3000;
    a.a.offset = p[0].offset + 3013;
    ASSERT_OK(sw_launch_kernel(dev, &a));
    memmove(model + 3000, model + 3013, 160);
    a.out.offset = p[0].offset + 3513;
    a.a.offset = p[0].offset + 3500;
    ASSERT_OK(sw_launch_kernel(dev, &a));
    memmove(model + 3513, model + 3500, 160);
    /* A typed kernel at an unaligned offset is refused, saying why. */
    a.kernel = SW_KERNEL_ADD;
    a.dtype = SW_FLOAT32;
    a.n = 4;
    a.out.offset = p[0].offset + 2;
    a.a = p[0];
    a.b = p[0];
    ASSERT_ERR(sw_launch_kernel(dev, &a), SW_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(sw_last_error(), "aligned");
    /* SUM into an unaligned result slot. */
    int32_t small[4] = {5, -7, 11, 1000};
    memcpy(model + 64, small, sizeof small);
    ASSERT_OK(sw_buffer_write(b, 64, small, sizeof small));
    a.kernel = SW_KERNEL_SUM;
    a.dtype = SW_INT32;
    a.n = 4;
    a.a = p[0];
    a.a.offset += 64;
    a.out = p[0];
    a.out.offset += 3901;
    ASSERT_OK(sw_launch_kernel(dev, &a));
    int64_t s = 1009;
    memcpy(model + 3901, &s, 8);
    ASSERT_OK(sw_launch_end(dev, bufs, 1));

    ASSERT_OK(sw_buffer_read(b, 0, got, SZ));
    ASSERT_MEM_EQ(got, model, SZ);
    ASSERT_OK(sw_buffer_free(b));
}

/* ------------------------------------------------------------------------
 * Errors name the OpenCL call and code
 * ---------------------------------------------------------------------- */

TEST(opencl_error_names)
{
    require_opencl();
    sw_device *dev = test_device();
    sw_buffer *real = test_alloc(dev, 4096, "real");
    sw_devmem m;
    ASSERT_OK(sw_buffer_device_ptr(real, &m));
    /* Wrapped with a size the cl_mem does not have: the backend's checks
     * and the runtime's own refuse what lies past its 4096 bytes. */
    sw_buffer *w = NULL;
    ASSERT_OK(sw_buffer_wrap(dev, m, 65536, "liar", &w));
    unsigned char buf[512];
    int rc = sw_buffer_read(w, 32768, buf, sizeof buf);
    ASSERT_NE(rc, SW_OK);
    ASSERT_STR_CONTAINS(sw_last_error(), "clEnqueueReadBuffer");
    ASSERT_STR_CONTAINS(sw_last_error(), "CL_INVALID_VALUE");
    ASSERT_STR_CONTAINS(sw_last_error(), test_device_spec());
    sw_scalar one = {.f = 1.0};
    ASSERT_ERR(sw_op_fill(w, SW_FLOAT32, 16384, one), SW_ERR_OUT_OF_RANGE);
    ASSERT_STR_CONTAINS(sw_last_error(), "4096");
    /* Inside its real size, it works. */
    ASSERT_OK(sw_op_fill(w, SW_FLOAT32, 1024, one));
    float f[1024];
    ASSERT_OK(sw_buffer_read(real, 0, f, sizeof f));
    for (int i = 0; i < 1024; i++)
        ASSERT_DBL_EQ(f[i], 1.0);
    ASSERT_OK(sw_buffer_free(w));
    ASSERT_OK(sw_buffer_free(real));
}

/* ------------------------------------------------------------------------
 * No platform: no devices, a reason, and nothing fails
 * ---------------------------------------------------------------------- */

TEST(opencl_no_platform)
{
#ifndef SW_HAVE_OPENCL
    SKIP("this build has no OpenCL backend");
#else
    /* An empty vendors directory: the ICD loader finds no platform.  This
     * process has not touched OpenCL yet (each test runs in its own). */
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/sw-no-icd-%d", (int)getpid());
    mkdir(dir, 0700);
    setenv("OCL_ICD_VENDORS", dir, 1);
    setenv("OCL_ICD_FILENAMES", "", 1);
    size_t n = 0;
    ASSERT_OK(sw_device_count(&n));
    rmdir(dir);
    for (size_t i = 0; i < n; i++) {
        char spec[32];
        ASSERT_OK(sw_device_spec_at(i, spec, sizeof spec));
        if (strncmp(spec, "opencl:", 7) == 0)
            SKIP("the ICD loader still finds a platform with "
                 "OCL_ICD_VENDORS set (not ocl-icd?)");
    }
    sw_device *dev = (sw_device *)(uintptr_t)1;
    ASSERT_ERR(sw_device_open("opencl:0", &dev), SW_ERR_NO_DEVICE);
    ASSERT_NULL(dev);
    ASSERT_STR_CONTAINS(sw_last_error(), "no OpenCL platform");
    ASSERT_STR_CONTAINS(sw_last_error(), "clGetPlatformIDs");
    /* The other backends are unaffected. */
    sw_device *sim = test_open("sim:0");
    sw_buffer *b = test_alloc(sim, 100, "still-here");
    ASSERT_OK(sw_buffer_free(b));
#endif
}
