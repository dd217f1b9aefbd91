/*
 * test-hip.c -- the HIP backend (docs/hip.md).
 *
 * None of it needs an AMD GPU: the loader with a missing library and with
 * whatever ROCm runtime the machine has (Debian's libamdhip64 without a
 * GPU reports hipInit failing), the error mapping, the backend's
 * declarations against ROCm's headers (tests/hip/sigcheck.c, where they
 * were found at build time), the kernels it launches against cuda.cu's
 * table, cuda.cu compiled by a real hipRTC into an AMDGPU code object
 * (where hipRTC is installed: Debian's libamdhip64-5 has it), and the
 * backend end to end through the CPU stand-ins (tests/hip/).  The whole
 * suite also runs on hip:0 through the stand-ins (make's c-hip-fake), and
 * on a GPU with SW_TEST_DEVICE=hip:0 (bench/hip/check.sh).
 *
 * Each test runs in a fresh process, so the SPILLWAY_HIP_* variables set
 * before the first call decide what the loaders see.
 */
#include "test.h"
#include "tests.h"

#include "backend/backend.h" /* sw__free */
#include "backend/cuda_internal.h"
#include "backend/hip_api.h"
#include "backend/hip_internal.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#ifdef SW_HAVE_HIP_H
#include "../hip/sigcheck.h"
#endif

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

static void use_fakes(void)
{
    setenv("SPILLWAY_HIP_LIBRARY", SW_FAKE_LIBAMDHIP64, 1);
    setenv("SPILLWAY_HIPRTC_LIBRARY", SW_FAKE_LIBHIPRTC, 1);
}

static size_t listed_hip_devices(void)
{
    size_t count = 0, hip = 0;
    ASSERT_OK(sw_device_count(&count));
    for (size_t i = 0; i < count; i++) {
        char spec[64];
        ASSERT_OK(sw_device_spec_at(i, spec, sizeof spec));
        hip += strncmp(spec, "hip:", 4) == 0;
    }
    return hip;
}

/* No hip devices, the reason given in one line, and opening says it. */
static void expect_no_devices(const char *reason)
{
    int n = -1;
    char why[320] = "";
    ASSERT_OK(sw__hip_device_count(&n, why, sizeof why));
    ASSERT_EQ(n, 0);
    ASSERT_STR_CONTAINS(why, reason);
    ASSERT_TRUE(strchr(why, '\n') == NULL);
    ASSERT_UEQ(listed_hip_devices(), 0);
    int seen = 0;
    for (size_t i = 0; i < sw_backend_count(); i++) {
        const char *name = NULL;
        int devs = -1;
        char bwhy[256];
        ASSERT_OK(sw_backend_info(i, &name, &devs, bwhy, sizeof bwhy));
        if (strcmp(name, "hip") == 0) {
            seen = 1;
            ASSERT_EQ(devs, 0);
            ASSERT_STR_CONTAINS(bwhy, reason);
        }
    }
    ASSERT_TRUE(seen);
    sw_device *dev = (sw_device *)(uintptr_t)1;
    ASSERT_ERR(sw_device_open("hip:0", &dev), SW_ERR_NO_DEVICE);
    ASSERT_NULL(dev);
    ASSERT_STR_CONTAINS(sw_last_error(), "hip:0");
    ASSERT_STR_CONTAINS(sw_last_error(), reason);
}

/* ------------------------------------------------------------------------
 * Without a GPU
 * ---------------------------------------------------------------------- */

/* Every kernel HIP launches is one of cuda.cu's, with a parameter list
 * in the CUDA backend's table: one source, one declaration. */
TEST(hip_kernel_names)
{
    size_t n = 0, ncuda = 0;
    const char *const *names = sw__hip_kernel_names(&n);
    const char *const *cuda = sw__cuda_kernel_names(&ncuda);
    ASSERT_UEQ(n, 6 * 4 + 3);
    const char *src = sw__cuda_kernel_source();
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < ncuda && strcmp(cuda[j], names[i]) != 0)
            j++;
        if (j == ncuda)
            FAIL("HIP launches %s, which the CUDA kernels' table lacks",
                 names[i]);
        size_t np = 0;
        ASSERT_NOT_NULL(sw__cuda_kernel_params(j, &np));
        ASSERT_UGE(np, 3);
        /* The name's stem is in the source (names come from macros). */
        char stem[64];
        snprintf(stem, sizeof stem, "%s", names[i]);
        char *us = strrchr(stem, '_');
        if (i < 6 * 4 && us != NULL)
            us[1] = '\0';
        ASSERT_STR_CONTAINS(src, stem);
    }
}

TEST(hip_library_missing)
{
    setenv("SPILLWAY_HIP_LIBRARY", "/nonexistent/libamdhip64.so", 1);
    expect_no_devices("/nonexistent/libamdhip64.so not found "
                      "(SPILLWAY_HIP_LIBRARY)");
    /* The other backends are unaffected. */
    sw_device *sim = test_open("sim:0");
    ASSERT_NOT_NULL(sim);
}

/* Not a HIP runtime: a library without the entry points. */
TEST(hip_library_wrong)
{
    setenv("SPILLWAY_HIP_LIBRARY", SW_FAKE_LIBHIPRTC, 1);
    expect_no_devices("lacks hipInit: the ROCm runtime is too old");
}

/* Whatever this machine has: no runtime (the reason says so), a runtime
 * without a GPU (hipInit fails, and the reason names the code), or a GPU
 * (then the devices are listed). */
TEST(hip_no_gpu)
{
    unsetenv("SPILLWAY_HIP_LIBRARY");
    int n = -1;
    char why[320] = "";
    ASSERT_OK(sw__hip_device_count(&n, why, sizeof why));
    if (n > 0)
        SKIP("this machine has %d HIP device%s", n, n == 1 ? "" : "s");
    ASSERT_TRUE(strchr(why, '\n') == NULL);
    if (sw__hip_runtime_path()[0] == '\0')
        expect_no_devices("libamdhip64.so not found: no ROCm runtime");
    else
        expect_no_devices("hip"); /* "hipInit failed: hipError..." */
}

TEST(hip_error_mapping)
{
    ASSERT_EQ(sw__hip_error_code(0), SW_OK);
    ASSERT_EQ(sw__hip_error_code(2), SW_ERR_OOM);
    ASSERT_EQ(sw__hip_error_code(100), SW_ERR_NO_DEVICE);
    ASSERT_EQ(sw__hip_error_code(101), SW_ERR_NO_DEVICE);
    ASSERT_EQ(sw__hip_error_code(801), SW_ERR_UNSUPPORTED);
    ASSERT_EQ(sw__hip_error_code(700), SW_ERR_DEVICE);
    ASSERT_EQ(sw__hip_error_code(12345), SW_ERR_DEVICE);
    ASSERT_STR_EQ(sw__hip_error_table_name(2), "hipErrorOutOfMemory");
    ASSERT_STR_EQ(sw__hip_error_table_name(600), "hipErrorNotReady");
    ASSERT_NULL(sw__hip_error_table_name(12345));
    /* The message names the device, the call and the code. */
    setenv("SPILLWAY_HIP_LIBRARY", "/nonexistent/libamdhip64.so", 1);
    ASSERT_EQ(sw__hip_fail(3, 2, "hipMalloc"), SW_ERR_OOM);
    ASSERT_STR_CONTAINS(sw_last_error(), "hip:3: hipMalloc failed: "
                                         "hipErrorOutOfMemory");
    ASSERT_EQ(sw__hip_fail(0, 0, "hipFree"), SW_ERR_DEVICE);
    ASSERT_EQ(sw__hip_fail(0, 4242, "hipX"), SW_ERR_DEVICE);
    ASSERT_STR_CONTAINS(sw_last_error(), "HIP error 4242");
}

TEST(hip_signatures)
{
#ifdef SW_HAVE_HIP_H
    /* Everything is checked at compile time; this reports what was. */
    ASSERT_GT(sw_test_hip_sigcheck_count(), 60);
    ASSERT_GT(sw_test_hip_sigcheck_version(), 50000000);
#else
    SKIP("no HIP headers (hip/hip_runtime_api.h, libamdhip64-dev) at build "
         "time: hip_api.h was not checked");
#endif
}

/* cuda.cu compiled by a real hipRTC for an AMD architecture, without a
 * GPU: an AMDGPU ELF code object holding a kernel descriptor for every
 * entry the backend launches. */
TEST(hip_hiprtc_code_object)
{
    unsetenv("SPILLWAY_HIP_LIBRARY");
    unsetenv("SPILLWAY_HIPRTC_LIBRARY");
    char why[512];
    if (sw__hip_rtc_load(why, sizeof why, NULL, NULL) != SW_OK)
        SKIP("no hipRTC: %s", why);
    char *image = NULL;
    size_t size = 0;
    char log[4096];
    int rc = sw__hip_compile_source(sw__cuda_kernel_source(), "gfx90a",
                                    &image, &size, log, sizeof log);
    if (rc != SW_OK)
        FAIL("hipRTC (%s) on cuda.cu: %s; log: %s", sw__hip_rtc_path(),
             sw_last_error(), log);
    ASSERT_UGT(size, 1000);
    ASSERT_EQ(memcmp(image, "\177ELF", 4), 0);
    uint16_t machine = 0;
    memcpy(&machine, image + 18, 2);
    ASSERT_EQ(machine, 0xe0); /* EM_AMDGPU */
    size_t n = 0;
    const char *const *names = sw__hip_kernel_names(&n);
    for (size_t i = 0; i < n; i++) {
        char kd[64];
        snprintf(kd, sizeof kd, "%s.kd", names[i]);
        size_t len = strlen(kd) + 1; /* with its NUL: a whole symbol name */
        int found = 0;
        for (size_t at = 0; !found && at + len <= size; at++)
            found = memcmp(image + at, kd, len) == 0;
        if (!found)
            FAIL("no kernel descriptor %s in the code object", kd);
    }
    sw__free(image);
    /* The options: this architecture, no FMA contraction. */
    const char *opts[4];
    char buf[320];
    int no = sw__hip_compile_options("gfx90a", opts, buf, sizeof buf);
    int contract = 0;
    for (int i = 0; i < no; i++)
        contract |= strcmp(opts[i], "-ffp-contract=off") == 0;
    ASSERT_TRUE(contract);
    ASSERT_STR_EQ(opts[0], "--gpu-architecture=gfx90a");
}

/* A compile error: SW_ERR_DEVICE, the log's first line in the message and
 * all of it in the log (the stand-in's hipRTC). */
TEST(hip_hiprtc_errors)
{
    use_fakes();
    char log[1024];
    char *image = NULL;
    size_t size = 0;
    ASSERT_ERR(sw__hip_compile_source("extern \"C\" __global__ void k() {}\n"
                                      "#error spillway test\n",
                                      "gfx90a", &image, &size, log,
                                      sizeof log),
               SW_ERR_DEVICE);
    ASSERT_NULL(image);
    ASSERT_STR_CONTAINS(sw_last_error(), "compiling for gfx90a failed");
    ASSERT_STR_CONTAINS(sw_last_error(), "spillway test");
    ASSERT_STR_CONTAINS(log, "1 error generated");
    ASSERT_ERR(sw__hip_compile_source("", "gfx90a", &image, &size, NULL, 0),
               SW_ERR_INVALID_ARG);
}

/* No hipRTC: the device works (memory, copies, fills, spilling), and a
 * kernel launch says why it cannot run. */
TEST(hip_hiprtc_missing)
{
    use_fakes();
    setenv("SPILLWAY_HIPRTC_LIBRARY", "/nonexistent/libhiprtc.so", 1);
    char why[512];
    ASSERT_EQ(sw__hip_rtc_load(why, sizeof why, NULL, NULL),
              SW_ERR_UNSUPPORTED);
    ASSERT_STR_CONTAINS(why, "SPILLWAY_HIPRTC_LIBRARY=/nonexistent");
    sw_device *dev = test_open("hip:0");
    sw_buffer *a = test_alloc(dev, 4096, "a");
    test_write_pattern(a, 3);
    ASSERT_OK(sw_buffer_fill(a, 0, 4096, "\7", 1));
    ASSERT_ERR(sw_op_fill(a, SW_INT32, 16, (sw_scalar){.i = 1}),
               SW_ERR_UNSUPPORTED);
    ASSERT_STR_CONTAINS(sw_last_error(), "hipRTC");
    ASSERT_STR_CONTAINS(sw_last_error(), "hip:0");
    unsigned char b[4096], want[4096];
    memset(want, 7, sizeof want);
    ASSERT_OK(sw_buffer_read(a, 0, b, sizeof b));
    ASSERT_MEM_EQ(b, want, sizeof b);
    ASSERT_OK(sw_buffer_free(a));
}

/* ------------------------------------------------------------------------
 * End to end through the stand-ins
 * ---------------------------------------------------------------------- */

static void host_task(void *arg) { atomic_store((atomic_int *)arg, 1); }

/* A few kernels of every dtype against the host's arithmetic (the whole
 * ops suite runs on hip:0 in the c-hip-fake suites). */
static void check_kernels(sw_device *dev)
{
    enum { N = 1000 };
    static const sw_dtype dts[] = {SW_FLOAT32, SW_FLOAT64, SW_INT32,
                                   SW_INT64};
    for (size_t d = 0; d < 4; d++) {
        sw_dtype dt = dts[d];
        size_t es = sw_dtype_size(dt);
        sw_buffer *a = test_alloc(dev, N * es, "a");
        sw_buffer *o = test_alloc(dev, N * es, "o");
        unsigned char ha[N * 8], got[N * 8], want[N * 8];
        for (size_t i = 0; i < N; i++) {
            if (dt == SW_FLOAT32) {
                float f = (float)(i % 13) * 0.5f - 3;
                memcpy(ha + 4 * i, &f, 4);
            } else if (dt == SW_FLOAT64) {
                double f = (double)(i % 13) * 0.5 - 3;
                memcpy(ha + 8 * i, &f, 8);
            } else {
                uint64_t v = i * 0x9E3779B97F4A7C15ull;
                memcpy(ha + es * i, &v, es);
            }
        }
        ASSERT_OK(sw_buffer_write(a, 0, ha, N * es));
        sw_scalar alpha;
        if (dt == SW_FLOAT32 || dt == SW_FLOAT64)
            alpha.f = 1.5;
        else
            alpha.i = -3;
        ASSERT_OK(sw_op_add(o, a, a, dt, N));
        ASSERT_OK(sw_op_axpy(alpha, a, o, dt, N));
        for (size_t i = 0; i < N; i++) {
            if (dt == SW_FLOAT32) {
                float x;
                memcpy(&x, ha + 4 * i, 4);
                float t = (float)alpha.f * x, r = t + (x + x);
                memcpy(want + 4 * i, &r, 4);
            } else if (dt == SW_FLOAT64) {
                double x;
                memcpy(&x, ha + 8 * i, 8);
                double t = alpha.f * x, r = t + (x + x);
                memcpy(want + 8 * i, &r, 8);
            } else {
                uint64_t x = 0;
                memcpy(&x, ha + es * i, es);
                uint64_t r = (uint64_t)alpha.i * x + (x + x);
                memcpy(want + es * i, &r, es);
            }
        }
        ASSERT_OK(sw_buffer_read(o, 0, got, N * es));
        ASSERT_MEM_EQ(got, want, N * es);
        sw_scalar s;
        ASSERT_OK(sw_op_sum(a, dt, N, &s));
        double fs = 0;
        uint64_t is = 0;
        for (size_t i = 0; i < N; i++) {
            if (dt == SW_FLOAT32) {
                float x;
                memcpy(&x, ha + 4 * i, 4);
                fs += x;
            } else if (dt == SW_FLOAT64) {
                double x;
                memcpy(&x, ha + 8 * i, 8);
                fs += x;
            } else if (dt == SW_INT32) {
                int32_t x;
                memcpy(&x, ha + 4 * i, 4);
                is += (uint64_t)(int64_t)x;
            } else {
                uint64_t x;
                memcpy(&x, ha + 8 * i, 8);
                is += x;
            }
        }
        if (dt == SW_FLOAT32 || dt == SW_FLOAT64)
            ASSERT_DBL_EQ(s.f, fs);
        else
            ASSERT_EQ(s.i, (int64_t)is);
        ASSERT_OK(sw_buffer_free(a));
        ASSERT_OK(sw_buffer_free(o));
    }
}

TEST(hip_fake_runtime)
{
    use_fakes();
    sw_device *dev = test_open("hip:0");
    const char *desc = sw_device_description(dev);
    ASSERT_STR_CONTAINS(desc, "Fake AMD GPU");
    ASSERT_STR_CONTAINS(desc, "gfx90a:sramecc+:xnack-");
    ASSERT_STR_CONTAINS(desc, "4 CUs");
    ASSERT_STR_CONTAINS(desc, "HIP 6.0");
    ASSERT_STR_CONTAINS(desc, "stream-ordered memory pool");
    ASSERT_UEQ(listed_hip_devices(), 1);
    sw_memory_info mi = test_info(dev);
    ASSERT_EQ(mi.device_free_known, 1);
    ASSERT_UEQ(mi.device_total, (uint64_t)2 << 30);
    check_kernels(dev);

    /* Queues: work on one, an event, a host task, cross-queue order. */
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    sw_buffer *x = test_alloc(dev, 4096, "x");
    ASSERT_OK(sw_op_fill_q(q, x, SW_INT32, 1024, (sw_scalar){.i = 7}));
    sw_event *ev = NULL;
    ASSERT_OK(sw_queue_record_event(q, &ev));
    ASSERT_OK(sw_event_wait(ev));
    int done = 0;
    ASSERT_OK(sw_event_query(ev, &done));
    ASSERT_EQ(done, 1);
    ASSERT_OK(sw_event_release(ev));
    atomic_int ran = 0;
    sw_event *tev = NULL;
    ASSERT_OK(sw_queue_host_task(q, host_task, &ran, &tev));
    ASSERT_OK(sw_event_wait(tev));
    ASSERT_EQ(atomic_load(&ran), 1);
    ASSERT_OK(sw_event_release(tev));
    sw_scalar s;
    ASSERT_OK(sw_op_sum(x, SW_INT32, 1024, &s)); /* on the default queue */
    ASSERT_EQ(s.i, 7 * 1024);
    ASSERT_OK(sw_queue_release(q));
    ASSERT_OK(sw_buffer_free(x));

    /* Spilling under a budget: the data comes back bit for bit. */
    enum { NB = 6, SZ = 1 << 20 };
    sw_buffer *bs[NB];
    for (int i = 0; i < NB; i++) {
        bs[i] = test_alloc(dev, SZ, "spill");
        test_write_pattern(bs[i], 100 + (uint32_t)i);
    }
    ASSERT_OK(sw_set_memory_budget(dev, 2 * SZ));
    sw_buffer *trigger = test_alloc(dev, SZ, "trigger");
    ASSERT_OK(sw_buffer_free(trigger));
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < NB; i++) {
            sw_devmem p;
            ASSERT_OK(sw_buffer_device_ptr(bs[i], &p));
        }
    mi = test_info_synced(dev);
    ASSERT_UGT(mi.spills, 0);
    ASSERT_UGT(mi.restores, 0);
    for (int i = 0; i < NB; i++) {
        test_expect_pattern(bs[i], 100 + (uint32_t)i);
        ASSERT_OK(sw_buffer_free(bs[i]));
    }
    ASSERT_OK(sw_set_memory_budget(dev, 0));

    /* The pool's figures are the backend's allocations, and device_free
     * is the runtime's. */
    uint64_t reserved = 0, used = 0;
    ASSERT_OK(sw_empty_cache(dev));
    ASSERT_OK(sw__hip_pool_usage(0, &reserved, &used));
    ASSERT_UEQ(reserved, used);
    ASSERT_ULT(used, 64 * 1024); /* scratch and partial sums only */
    mi = test_info_synced(dev);
    ASSERT_UEQ(mi.device_free, mi.device_total - used);
}

TEST(hip_fake_runtime_no_pools)
{
    setenv("FAKE_HIP_NO_POOLS", "1", 1);
    use_fakes();
    sw_device *dev = test_open("hip:0");
    ASSERT_STR_CONTAINS(sw_device_description(dev),
                        "hipMalloc (hipMemPoolCreate failed: "
                        "hipErrorNotSupported)");
    uint64_t r = 0, u = 0;
    ASSERT_ERR(sw__hip_pool_usage(0, &r, &u), SW_ERR_UNSUPPORTED);
    check_kernels(dev);
    ASSERT_OK(sw_empty_cache(dev));
    sw_memory_info before = test_info_synced(dev);
    sw_buffer *b = test_alloc(dev, 8 << 20, "big");
    ASSERT_OK(sw_buffer_fill(b, 0, 8 << 20, "\1\2", 2));
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_empty_cache(dev));
    /* The deferred hipFree has run by the next look at the device. */
    sw_memory_info after = test_info_synced(dev);
    ASSERT_UEQ(after.device_free, before.device_free);
}

TEST(hip_fake_runtime_pool_off)
{
    setenv("SPILLWAY_HIP_POOL", "0", 1);
    use_fakes();
    sw_device *dev = test_open("hip:0");
    ASSERT_STR_CONTAINS(sw_device_description(dev),
                        "hipMalloc (SPILLWAY_HIP_POOL=0)");
    check_kernels(dev);
}

TEST(hip_fake_runtime_oom)
{
    /* A 64 MiB device: hipErrorOutOfMemory enters the ladder, which
     * spills to make room. */
    setenv("FAKE_HIP_MEMORY", "67108864", 1);
    use_fakes();
    sw_device *dev = test_open("hip:0");
    sw_buffer *bs[5];
    for (int i = 0; i < 5; i++) {
        bs[i] = test_alloc(dev, 16 << 20, "fill");
        test_write_pattern(bs[i], 200 + (uint32_t)i);
    }
    sw_memory_info mi = test_info(dev);
    ASSERT_UGT(mi.spills, 0);
    ASSERT_UGT(mi.alloc_retries, 0);
    for (int i = 0; i < 5; i++) {
        test_expect_pattern(bs[i], 200 + (uint32_t)i);
        ASSERT_OK(sw_buffer_free(bs[i]));
    }
    sw_buffer *huge = NULL;
    ASSERT_ERR(sw_buffer_alloc(dev, (size_t)65 << 20, "huge", &huge),
               SW_ERR_TOO_LARGE);
}

/* Fills with patterns that have no memset, at odd offsets, and a raw COPY
 * between overlapping ranges (through scratch memory). */
TEST(hip_fake_unusual_paths)
{
    use_fakes();
    sw_device *dev = test_open("hip:0");
    sw_buffer *b = test_alloc(dev, 4096, "fills");
    unsigned char host[4096], want[4096];
    memset(want, 0, sizeof want);
    ASSERT_OK(sw_buffer_write(b, 0, want, sizeof want));
    static const unsigned char pat[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    static const size_t fills[][2] = {{2, 1},    {4, 202},  {8, 400},
                                      {8, 1004}, {2, 2000}, {4, 2400}};
    for (size_t i = 0; i < sizeof fills / sizeof fills[0]; i++) {
        size_t psize = fills[i][0], off = fills[i][1], n = psize * 37;
        ASSERT_OK(sw_buffer_fill(b, off, n, pat, psize));
        for (size_t j = 0; j < n; j++)
            want[off + j] = pat[j % psize];
    }
    ASSERT_OK(sw_buffer_read(b, 0, host, sizeof host));
    ASSERT_MEM_EQ(host, want, sizeof want);

    int32_t v[1024];
    for (int i = 0; i < 1024; i++)
        v[i] = i;
    ASSERT_OK(sw_buffer_write(b, 0, v, sizeof v));
    sw_buffer *bufs[1] = {b};
    sw_devmem p[1];
    ASSERT_OK(sw_launch_begin(dev, bufs, 1, p));
    sw_kernel_args a;
    memset(&a, 0, sizeof a);
    a.kernel = SW_KERNEL_COPY;
    a.dtype = SW_INT32;
    a.n = 500;
    a.out = p[0];
    a.out.offset += 40; /* out overlaps a, 10 elements on */
    a.a = p[0];
    ASSERT_OK(sw_launch_kernel(dev, &a));
    ASSERT_OK(sw_launch_end(dev, bufs, 1));
    int32_t got[1024];
    ASSERT_OK(sw_buffer_read(b, 0, got, sizeof got));
    for (int i = 0; i < 1024; i++) {
        int32_t w = i >= 10 && i < 510 ? i - 10 : i;
        if (got[i] != w)
            FAIL("element %d is %d, want %d", i, got[i], w);
    }
    ASSERT_OK(sw_buffer_free(b));
}

/* On an AMD GPU (skips without one): the figures are the runtime's, and
 * a kernel runs. */
TEST(hip_gpu_device)
{
    unsetenv("SPILLWAY_HIP_LIBRARY");
    unsetenv("SPILLWAY_HIPRTC_LIBRARY");
    int n = 0;
    char why[320] = "";
    ASSERT_OK(sw__hip_device_count(&n, why, sizeof why));
    if (n == 0)
        SKIP("no HIP device: %s", why);
    sw_device *dev = test_open("hip:0");
    ASSERT_STR_CONTAINS(sw_device_description(dev), "gfx");
    sw_memory_info mi = test_info(dev);
    ASSERT_EQ(mi.device_free_known, 1);
    ASSERT_UGT(mi.device_total, 0);
    ASSERT_ULE(mi.device_free, mi.device_total);
    check_kernels(dev);
}

/* ------------------------------------------------------------------------
 * The stand-in's own checks: each misuse ends the process loudly
 * ---------------------------------------------------------------------- */

typedef struct fake_hip {
    swhip_runtime api;
} fake_hip;

static int fake_load(fake_hip *f)
{
    void *lib = dlopen(SW_FAKE_LIBAMDHIP64, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        return -1;
#define FAKE_RESOLVE(kind, ret, name, params)                                 \
    {                                                                         \
        void *p = dlsym(lib, #name);                                          \
        memcpy(&f->api.name, &p, sizeof p);                                   \
    }
    SWHIP_FUNCS(FAKE_RESOLVE)
#undef FAKE_RESOLVE
    return f->api.hipInit(0) == 0 ? 0 : -1;
}

#define H(call)                                                               \
    do {                                                                      \
        if ((call) != 0)                                                      \
            return 10;                                                        \
    } while (0)

static swhip_mempool fake_pool(fake_hip *f)
{
    swhip_mempool_props pp;
    memset(&pp, 0, sizeof pp);
    pp.alloc_type = SWHIP_hipMemAllocationTypePinned;
    pp.location.type = SWHIP_hipMemLocationTypeDevice;
    swhip_mempool pool = NULL;
    return f->api.hipMemPoolCreate(&pool, &pp) == 0 ? pool : NULL;
}

/* Each returns 0 when it got through (the stand-in missed the misuse). */
static int misuse_freed_memory(void *arg)
{
    (void)arg;
    fake_hip f;
    void *p = NULL;
    swhip_stream s = NULL;
    H(fake_load(&f));
    H(f.api.hipStreamCreateWithFlags(&s, SWHIP_hipStreamNonBlocking));
    H(f.api.hipMalloc(&p, 4096));
    H(f.api.hipStreamSynchronize(s));
    H(f.api.hipFree(p));
    (void)f.api.hipMemsetD8Async(p, 1, 16, s);
    return 0;
}

static int misuse_alloc_used_early(void *arg)
{
    (void)arg;
    fake_hip f;
    void *p = NULL;
    swhip_stream a = NULL, b = NULL;
    H(fake_load(&f));
    H(f.api.hipStreamCreateWithFlags(&a, SWHIP_hipStreamNonBlocking));
    H(f.api.hipStreamCreateWithFlags(&b, SWHIP_hipStreamNonBlocking));
    swhip_mempool pool = fake_pool(&f);
    H(pool == NULL);
    H(f.api.hipMallocFromPoolAsync(&p, 4096, pool, a));
    (void)f.api.hipMemsetD8Async(p, 1, 16, b); /* b never waited for a */
    return 0;
}

static int misuse_free_used_early(void *arg)
{
    int ordered = arg != NULL;
    fake_hip f;
    void *p = NULL;
    swhip_stream a = NULL, b = NULL;
    swhip_event e = NULL;
    H(fake_load(&f));
    H(f.api.hipStreamCreateWithFlags(&a, SWHIP_hipStreamNonBlocking));
    H(f.api.hipStreamCreateWithFlags(&b, SWHIP_hipStreamNonBlocking));
    H(f.api.hipEventCreateWithFlags(&e, SWHIP_hipEventDisableTiming));
    swhip_mempool pool = fake_pool(&f);
    H(pool == NULL);
    /* Allocated on a; b waits for that before using it. */
    H(f.api.hipMallocFromPoolAsync(&p, 4096, pool, a));
    H(f.api.hipEventRecord(e, a));
    H(f.api.hipStreamWaitEvent(b, e, 0));
    H(f.api.hipMemsetD8Async(p, 1, 16, b));
    if (ordered) {
        H(f.api.hipEventRecord(e, b));
        H(f.api.hipStreamWaitEvent(a, e, 0));
    }
    H(f.api.hipFreeAsync(p, a)); /* early unless a waited for b */
    if (!ordered)
        return 0;
    H(f.api.hipStreamSynchronize(a));
    H(f.api.hipStreamSynchronize(b));
    H(f.api.hipEventDestroy(e));
    H(f.api.hipMemPoolDestroy(pool));
    H(f.api.hipStreamDestroy(a));
    H(f.api.hipStreamDestroy(b));
    return 0;
}

static int misuse_event_before_record(void *arg)
{
    (void)arg;
    fake_hip f;
    swhip_stream s = NULL;
    swhip_event e = NULL;
    H(fake_load(&f));
    H(f.api.hipStreamCreateWithFlags(&s, SWHIP_hipStreamNonBlocking));
    H(f.api.hipEventCreateWithFlags(&e, SWHIP_hipEventDisableTiming));
    (void)f.api.hipStreamWaitEvent(s, e, 0);
    return 0;
}

static int misuse_stream_after_destroy(void *arg)
{
    (void)arg;
    fake_hip f;
    swhip_stream s = NULL;
    H(fake_load(&f));
    H(f.api.hipStreamCreateWithFlags(&s, SWHIP_hipStreamNonBlocking));
    H(f.api.hipStreamDestroy(s));
    (void)f.api.hipStreamSynchronize(s);
    return 0;
}

static int misuse_leak_at_exit(void *arg)
{
    (void)arg;
    fake_hip f;
    swhip_stream s = NULL;
    void *p = NULL;
    H(fake_load(&f));
    H(f.api.hipStreamCreateWithFlags(&s, SWHIP_hipStreamNonBlocking));
    H(f.api.hipMalloc(&p, 4096));
    H(f.api.hipStreamDestroy(s));
    exit(0); /* the stand-in's exit check sees the allocation */
}

static void expect_abort(int (*fn)(void *), void *arg, const char *msg)
{
    char err[2048];
    int st = test_fork_run(fn, arg, err, sizeof err);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT)
        FAIL("the stand-in did not abort on a misuse (status 0x%x, want "
             "\"%s\"): %s", st, msg, err);
    ASSERT_STR_CONTAINS(err, "fake libamdhip64: ");
    ASSERT_STR_CONTAINS(err, msg);
}

TEST(hip_standin_checks)
{
    expect_abort(misuse_freed_memory, NULL, "is not inside a live allocation");
    expect_abort(misuse_alloc_used_early, NULL,
                 "this stream does not wait for that allocation");
    expect_abort(misuse_free_used_early, NULL,
                 "a stream-ordered free used early");
    expect_abort(misuse_event_before_record, NULL,
                 "before it was ever recorded");
    expect_abort(misuse_stream_after_destroy, NULL,
                 "used after it was destroyed");
    expect_abort(misuse_leak_at_exit, NULL, "1 allocations");
    /* The same work, ordered as it must be, goes through. */
    char err[2048];
    int st = test_fork_run(misuse_free_used_early, (void *)1, err,
                           sizeof err);
    if (st != 0)
        FAIL("ordered work refused (status 0x%x): %s", st, err);
}
