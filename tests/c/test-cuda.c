/*
 * test-cuda.c -- the CUDA backend.
 *
 * Most of it runs without a GPU, and is what CI runs: the backend's
 * declarations of the driver API checked against the toolkit's cuda.h
 * (tests/cuda/sigcheck.c, where cuda.h was found at build time), the
 * loader with no driver, with a missing library and with the toolkit's
 * stub libcuda, the mapping of CUDA errors, and the backend through the
 * CPU stand-ins for the driver and NVRTC (tests/cuda/), whatever the
 * machine has.  The built-in kernels and their compilers are
 * test-cuda-nvrtc.c's.  The cuda_gpu_* tests need a CUDA device and skip,
 * saying why, without one; the whole suite also runs against a GPU with
 * SW_TEST_DEVICE=cuda:0.
 *
 * Each test runs in a fresh process, so setting SPILLWAY_CUDA_LIBRARY
 * before the first call decides what the loader sees.
 */
#include "test.h"
#include "tests.h"

#include "backend/cuda_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../cuda/fake_nvrtc.h"
#ifdef SW_HAVE_CUDA_H
#include "../cuda/sigcheck.h"
#endif

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

/* SKIP unless a CUDA device is usable. */
static void require_gpu(void)
{
    int n = 0;
    char why[256] = "";
    ASSERT_OK(sw__cuda_device_count(&n, why, sizeof why));
    if (n == 0)
        SKIP("no CUDA device: %s", why);
}

/* SKIP unless the built-in kernels can be had on cuda:0 (NVRTC present):
 * a driver-only machine runs everything else, fills included. */
static void require_kernels(void)
{
    char why[512];
    if (sw__cuda_nvrtc_load(why, sizeof why, NULL, NULL) != SW_OK)
        SKIP("no NVRTC, so no built-in kernels: %s", why);
}

/* Every "cuda:" spec the library lists. */
static size_t listed_cuda_devices(void)
{
    size_t count = 0, cuda = 0;
    ASSERT_OK(sw_device_count(&count));
    for (size_t i = 0; i < count; i++) {
        char spec[64];
        ASSERT_OK(sw_device_spec_at(i, spec, sizeof spec));
        cuda += strncmp(spec, "cuda:", 5) == 0;
    }
    return cuda;
}

/* The absent-device contract: no cuda devices listed, the reason given,
 * and opening cuda:0 says it. */
static void expect_no_devices(const char *reason)
{
    int n = -1;
    char why[256] = "";
    ASSERT_OK(sw__cuda_device_count(&n, why, sizeof why));
    ASSERT_EQ(n, 0);
    ASSERT_STR_CONTAINS(why, reason);
    ASSERT_TRUE(strchr(why, '\n') == NULL); /* one line */
    ASSERT_UEQ(listed_cuda_devices(), 0);
    sw_device *dev = (sw_device *)(uintptr_t)1;
    ASSERT_ERR(sw_device_open("cuda:0", &dev), SW_ERR_NO_DEVICE);
    ASSERT_NULL(dev);
    ASSERT_STR_CONTAINS(sw_last_error(), "cuda:0");
    ASSERT_STR_CONTAINS(sw_last_error(), reason);
    ASSERT_ERR(sw_device_open("cuda", &dev), SW_ERR_NO_DEVICE);
    ASSERT_ERR(sw_device_open("cuda:3", &dev), SW_ERR_NO_DEVICE);
}

static const char *stub_library(void)
{
    static char path[512];
    const char *homes[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"),
                           "/usr/local/cuda"};
    const char *subdirs[] = {"lib64/stubs", "lib/stubs",
                             "targets/x86_64-linux/lib/stubs",
                             "targets/sbsa-linux/lib/stubs"};
    for (size_t h = 0; h < 3; h++) {
        if (homes[h] == NULL || homes[h][0] == '\0')
            continue;
        for (size_t s = 0; s < 4; s++) {
            snprintf(path, sizeof path, "%s/%s/libcuda.so", homes[h],
                     subdirs[s]);
            if (access(path, R_OK) == 0)
                return path;
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------
 * The driver's declarations against cuda.h
 * ---------------------------------------------------------------------- */

TEST(cuda_signatures)
{
#ifdef SW_HAVE_CUDA_H
    /* The types, constants and struct layout were checked when
     * sigcheck.c compiled; this checks the symbol names. */
    char err[1024] = "";
    int bad = sw_test_cuda_sigcheck(err, sizeof err);
    if (bad != 0)
        FAIL("%d declaration%s of src/backend/cuda_api.h disagree%s with "
             "cuda.h: %s", bad, bad == 1 ? "" : "s", bad == 1 ? "s" : "",
             err);
    ASSERT_GT(sw_test_cuda_sigcheck_count(), 40);
#else
    SKIP("cuda.h was not found when this suite was built");
#endif
}

/* ------------------------------------------------------------------------
 * The loader without a driver
 * ---------------------------------------------------------------------- */

TEST(cuda_library_missing)
{
    /* Works on any machine, a GPU one included: the override names a
     * library that does not exist. */
    setenv("SPILLWAY_CUDA_LIBRARY", "/nonexistent/dir/libcuda.so.1", 1);
    expect_no_devices("/nonexistent/dir/libcuda.so.1 not found");
    char missing[512];
    ASSERT_EQ(sw__cuda_loader_missing(missing, sizeof missing), -1);
    ASSERT_NULL(sw__cuda_thread_context());
}

TEST(cuda_no_driver)
{
    unsetenv("SPILLWAY_CUDA_LIBRARY");
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h != NULL) {
        dlclose(h);
        SKIP("an NVIDIA driver (libcuda.so.1) is installed here");
    }
    expect_no_devices("libcuda.so.1 not found: no NVIDIA driver");
    /* The sim is unaffected. */
    sw_device *dev = test_open("sim:0");
    sw_buffer *b = test_alloc(dev, 4096, "still works");
    test_write_pattern(b, 3);
    test_expect_pattern(b, 3);
    ASSERT_OK(sw_buffer_free(b));
}

TEST(cuda_stub_driver)
{
    /* The toolkit's stub libcuda exports every entry point and fails
     * every call with CUDA_ERROR_STUB_LIBRARY: the loader resolves the
     * whole table against a real export list, then cuInit fails. */
    const char *stub = stub_library();
    if (stub == NULL)
        SKIP("no stub libcuda.so under $CUDA_HOME, $CUDA_PATH or "
             "/usr/local/cuda");
    setenv("SPILLWAY_CUDA_LIBRARY", stub, 1);
    expect_no_devices("cuInit failed: CUDA_ERROR_STUB_LIBRARY");
    char missing[512] = "?";
    ASSERT_EQ(sw__cuda_loader_missing(missing, sizeof missing), 0);
    if (missing[0] != '\0')
        FAIL("the stub library lacks optional entry points: %s", missing);
}

/* ------------------------------------------------------------------------
 * Errors
 * ---------------------------------------------------------------------- */

TEST(cuda_error_mapping)
{
    ASSERT_EQ(sw__cuda_error_code(0), SW_OK);
    ASSERT_EQ(sw__cuda_error_code(2), SW_ERR_OOM);
    ASSERT_EQ(sw__cuda_error_code(100), SW_ERR_NO_DEVICE);
    ASSERT_EQ(sw__cuda_error_code(101), SW_ERR_NO_DEVICE);
    ASSERT_EQ(sw__cuda_error_code(801), SW_ERR_UNSUPPORTED);
    ASSERT_EQ(sw__cuda_error_code(1), SW_ERR_DEVICE);
    ASSERT_EQ(sw__cuda_error_code(700), SW_ERR_DEVICE);
    ASSERT_EQ(sw__cuda_error_code(999), SW_ERR_DEVICE);
    ASSERT_EQ(sw__cuda_error_code(123456), SW_ERR_DEVICE);

    ASSERT_STR_EQ(sw__cuda_error_table_name(0), "CUDA_SUCCESS");
    ASSERT_STR_EQ(sw__cuda_error_table_name(2), "CUDA_ERROR_OUT_OF_MEMORY");
    ASSERT_STR_EQ(sw__cuda_error_table_name(34), "CUDA_ERROR_STUB_LIBRARY");
    ASSERT_STR_EQ(sw__cuda_error_table_name(100), "CUDA_ERROR_NO_DEVICE");
    ASSERT_STR_EQ(sw__cuda_error_table_name(600), "CUDA_ERROR_NOT_READY");
    ASSERT_STR_EQ(sw__cuda_error_table_name(700),
                  "CUDA_ERROR_ILLEGAL_ADDRESS");
    ASSERT_STR_EQ(sw__cuda_error_table_name(999), "CUDA_ERROR_UNKNOWN");
    ASSERT_NULL(sw__cuda_error_table_name(123456));

    /* A failed call's report: device, call, the code's name; and the
     * code that enters the allocation ladder. */
    ASSERT_EQ(sw__cuda_fail(0, 2, "cuMemAllocFromPoolAsync"), SW_ERR_OOM);
    const char *msg = sw_last_error();
    ASSERT_STR_CONTAINS(msg, "cuda:0: ");
    ASSERT_STR_CONTAINS(msg, "cuMemAllocFromPoolAsync");
    ASSERT_STR_CONTAINS(msg, "CUDA_ERROR_OUT_OF_MEMORY");
    ASSERT_EQ(sw__cuda_fail(3, 700, "cuEventSynchronize"), SW_ERR_DEVICE);
    ASSERT_STR_CONTAINS(sw_last_error(), "cuda:3: cuEventSynchronize");
    ASSERT_STR_CONTAINS(sw_last_error(), "CUDA_ERROR_ILLEGAL_ADDRESS");
    ASSERT_EQ(sw__cuda_fail(1, 123456, "cuLaunchKernel"), SW_ERR_DEVICE);
    ASSERT_STR_CONTAINS(sw_last_error(), "123456");
    /* Success is never reported as success by a failure path. */
    ASSERT_EQ(sw__cuda_fail(0, 0, "cuInit"), SW_ERR_DEVICE);
}

/* ------------------------------------------------------------------------
 * Through the fake driver (tests/cuda/fake_libcuda.c: the CPU stand-in for
 * libcuda.so.1 that checks how the backend uses the driver API; not a GPU)
 * and the fake NVRTC (tests/cuda/fake_libnvrtc.c), always together: what
 * these check does not depend on whether the machine has an NVRTC.
 * ---------------------------------------------------------------------- */

static void use_fake_driver(void)
{
    test_cuda_use_fake_nvrtc();
#ifdef SW_FAKE_LIBCUDA
    if (access(SW_FAKE_LIBCUDA, R_OK) != 0)
        SKIP("the fake driver %s was not built", SW_FAKE_LIBCUDA);
    setenv("SPILLWAY_CUDA_LIBRARY", SW_FAKE_LIBCUDA, 1);
    int n = 0;
    char why[256] = "";
    ASSERT_OK(sw__cuda_device_count(&n, why, sizeof why));
    if (n != 1)
        FAIL("the fake driver offers %d devices: %s", n, why);
#else
    SKIP("this build has no fake driver");
#endif
}

/* Every kernel on every dtype once, against the host's arithmetic. */
static void fake_kernels(sw_device *dev)
{
    enum { N = 3000 };
    static const sw_dtype dts[] = {SW_FLOAT32, SW_FLOAT64, SW_INT32,
                                   SW_INT64};
    for (size_t d = 0; d < 4; d++) {
        sw_dtype dt = dts[d];
        size_t es = sw_dtype_size(dt);
        int fl = dt == SW_FLOAT32 || dt == SW_FLOAT64;
        unsigned char ha[N * 8], hb[N * 8], want[N * 8], got[N * 8];
        uint64_t st = 77 + d;
        for (size_t i = 0; i < N; i++) {
            uint64_t r1 = test_rand(&st), r2 = test_rand(&st);
            if (dt == SW_FLOAT32) {
                float x = (float)((int)(r1 % 41) - 20) * 0.25f;
                float y = (float)((int)(r2 % 41) - 20) * 0.25f;
                memcpy(ha + i * 4, &x, 4);
                memcpy(hb + i * 4, &y, 4);
            } else if (dt == SW_FLOAT64) {
                double x = (double)((int)(r1 % 41) - 20) * 0.25;
                double y = (double)((int)(r2 % 41) - 20) * 0.25;
                memcpy(ha + i * 8, &x, 8);
                memcpy(hb + i * 8, &y, 8);
            } else {
                memcpy(ha + i * es, &r1, es); /* the low bytes */
                memcpy(hb + i * es, &r2, es);
            }
        }
        sw_buffer *a = test_alloc(dev, N * es, "a");
        sw_buffer *b = test_alloc(dev, N * es, "b");
        sw_buffer *o = test_alloc(dev, N * es, "o");
        ASSERT_OK(sw_buffer_write(a, 0, ha, N * es));
        ASSERT_OK(sw_buffer_write(b, 0, hb, N * es));
        sw_scalar alpha;
        if (fl)
            alpha.f = -1.75;
        else
            alpha.i = (int64_t)0x9E3779B97F4A7C15ull;

        /* o = a + b; o = alpha * a + o (AXPY); a scaled into b. */
        ASSERT_OK(sw_op_add(o, a, b, dt, N));
        ASSERT_OK(sw_op_axpy(alpha, a, o, dt, N));
        ASSERT_OK(sw_op_scale(b, a, alpha, dt, N));
        for (size_t i = 0; i < N; i++) {
            if (dt == SW_FLOAT32) {
                float x, y, al = (float)alpha.f;
                memcpy(&x, ha + i * 4, 4);
                memcpy(&y, hb + i * 4, 4);
                float r = al * x + (x + y), sc = al * x;
                memcpy(want + i * 4, &r, 4);
                memcpy(hb + i * 4, &sc, 4);
            } else if (dt == SW_FLOAT64) {
                double x, y;
                memcpy(&x, ha + i * 8, 8);
                memcpy(&y, hb + i * 8, 8);
                double r = alpha.f * x + (x + y), sc = alpha.f * x;
                memcpy(want + i * 8, &r, 8);
                memcpy(hb + i * 8, &sc, 8);
            } else {
                uint64_t x = 0, y = 0, al = (uint64_t)alpha.i;
                memcpy(&x, ha + i * es, es);
                memcpy(&y, hb + i * es, es);
                uint64_t r = al * x + (x + y), sc = al * x;
                memcpy(want + i * es, &r, es);
                memcpy(hb + i * es, &sc, es);
            }
        }
        ASSERT_OK(sw_buffer_read(o, 0, got, N * es));
        ASSERT_MEM_EQ(got, want, N * es);
        ASSERT_OK(sw_buffer_read(b, 0, got, N * es));
        ASSERT_MEM_EQ(got, hb, N * es);

        /* SUM of a: exact for these inputs, the same bits twice. */
        sw_scalar s1, s2;
        ASSERT_OK(sw_op_sum(a, dt, N, &s1));
        ASSERT_OK(sw_op_sum(a, dt, N, &s2));
        ASSERT_EQ(memcmp(&s1, &s2, sizeof s1), 0);
        double fs = 0;
        uint64_t is = 0;
        for (size_t i = 0; i < N; i++) {
            if (dt == SW_FLOAT32) {
                float x;
                memcpy(&x, ha + i * 4, 4);
                fs += x;
            } else if (dt == SW_FLOAT64) {
                double x;
                memcpy(&x, ha + i * 8, 8);
                fs += x;
            } else if (dt == SW_INT32) {
                int32_t x;
                memcpy(&x, ha + i * 4, 4);
                is += (uint64_t)(int64_t)x;
            } else {
                uint64_t x;
                memcpy(&x, ha + i * 8, 8);
                is += x;
            }
        }
        if (fl)
            ASSERT_DBL_EQ(s1.f, fs);
        else
            ASSERT_EQ(s1.i, (int64_t)is);

        /* FILL, then a raw COPY of a into o. */
        ASSERT_OK(sw_op_fill(o, dt, N, alpha));
        ASSERT_OK(sw_buffer_read(o, 0, got, N * es));
        unsigned char one[8];
        if (dt == SW_FLOAT32) {
            float f = (float)alpha.f;
            memcpy(one, &f, 4);
        } else {
            memcpy(one, fl ? (const void *)&alpha.f : (const void *)&alpha.i,
                   8);
        }
        for (size_t i = 0; i < N; i++)
            ASSERT_EQ(memcmp(got + i * es, one, es), 0);
        sw_buffer *bufs[2] = {o, a};
        sw_devmem p[2];
        ASSERT_OK(sw_launch_begin(dev, bufs, 2, p));
        sw_kernel_args k;
        memset(&k, 0, sizeof k);
        k.kernel = SW_KERNEL_COPY;
        k.dtype = dt;
        k.n = N;
        k.out = p[0];
        k.a = p[1];
        ASSERT_OK(sw_launch_kernel(dev, &k));
        ASSERT_OK(sw_launch_end(dev, bufs, 2));
        ASSERT_OK(sw_buffer_read(o, 0, got, N * es));
        ASSERT_MEM_EQ(got, ha, N * es);
        ASSERT_OK(sw_buffer_free(a));
        ASSERT_OK(sw_buffer_free(b));
        ASSERT_OK(sw_buffer_free(o));
    }
}

static void fake_host_task(void *arg)
{
    atomic_int *ran = arg;
    atomic_store(ran, 1);
}

TEST(cuda_fake_driver)
{
    use_fake_driver();
    sw_device *dev = test_open("cuda:0");
    ASSERT_STR_CONTAINS(sw_device_description(dev), "Fake CUDA device");
    ASSERT_STR_CONTAINS(sw_device_description(dev), "sm_90");
    ASSERT_STR_CONTAINS(sw_device_description(dev),
                        "stream-ordered memory pool");
    fake_kernels(dev);
    /* The kernels came from the stand-in for NVRTC, compiled once, to a
     * CUBIN for the device's own sm_90 (it lists 90, as NVRTC 13.0). */
    ASSERT_STR_EQ(sw__cuda_nvrtc_path(), SW_FAKE_LIBNVRTC);
    fake_nvrtc_stats_t nv = test_cuda_fake_nvrtc_stats();
    size_t nk = 0;
    (void)sw__cuda_kernel_names(&nk);
    ASSERT_EQ(nv.compiles, 1);
    ASSERT_EQ(nv.last_arch, 90);
    ASSERT_EQ(nv.last_cubin, 1);
    ASSERT_EQ(nv.last_kernels, (int)nk);
    ASSERT_EQ(nv.live, 0);

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
    ASSERT_OK(sw_queue_host_task(q, fake_host_task, &ran, &tev));
    ASSERT_OK(sw_event_wait(tev));
    ASSERT_EQ(atomic_load(&ran), 1);
    ASSERT_OK(sw_event_release(tev));
    sw_scalar s;
    ASSERT_OK(sw_op_sum(x, SW_INT32, 1024, &s));
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
    sw_buffer *trigger = test_alloc(dev, SZ, "trigger"); /* spills */
    ASSERT_OK(sw_buffer_free(trigger));
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < NB; i++) {
            sw_devmem p;
            ASSERT_OK(sw_buffer_device_ptr(bs[i], &p));
        }
    sw_memory_info mi = test_info_synced(dev);
    ASSERT_UGT(mi.spills, 0);
    ASSERT_UGT(mi.restores, 0);
    for (int i = 0; i < NB; i++) {
        test_expect_pattern(bs[i], 100 + (uint32_t)i);
        ASSERT_OK(sw_buffer_free(bs[i]));
    }
    ASSERT_OK(sw_set_memory_budget(dev, 0));

    /* The pool's figures are the backend's allocations. */
    uint64_t reserved = 0, used = 0;
    ASSERT_OK(sw_empty_cache(dev));
    ASSERT_OK(sw_device_synchronize(dev)); /* the frees are stream-ordered */
    ASSERT_OK(sw__cuda_pool_usage(0, &reserved, &used));
    ASSERT_UEQ(reserved, used);
    ASSERT_ULT(used, 64 * 1024); /* scratch and partial sums only */
    ASSERT_NULL(sw__cuda_thread_context());
}

TEST(cuda_fake_driver_ptx)
{
    /* An NVRTC that does not list the device's architecture: PTX of the
     * newest one below it, which the driver JIT-compiles; every kernel
     * still runs. */
    setenv("FAKE_NVRTC_ARCHS", "75,80,86", 1);
    use_fake_driver();
    sw_device *dev = test_open("cuda:0");
    fake_kernels(dev);
    fake_nvrtc_stats_t nv = test_cuda_fake_nvrtc_stats();
    ASSERT_EQ(nv.compiles, 1);
    ASSERT_EQ(nv.last_arch, 86);
    ASSERT_EQ(nv.last_cubin, 0);
}

TEST(cuda_fake_driver_no_pools)
{
    setenv("FAKE_CUDA_NO_POOLS", "1", 1);
    use_fake_driver();
    sw_device *dev = test_open("cuda:0");
    ASSERT_STR_CONTAINS(sw_device_description(dev),
                        "cuMemAlloc (no memory pools on this device)");
    fake_kernels(dev);
    ASSERT_OK(sw_empty_cache(dev));
    sw_memory_info before = test_info_synced(dev);
    sw_buffer *b = test_alloc(dev, 8 << 20, "big");
    ASSERT_OK(sw_buffer_fill(b, 0, 8 << 20, "\1\2", 2));
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_empty_cache(dev));
    /* The deferred cuMemFree has run by the next look at the device. */
    sw_memory_info after = test_info_synced(dev);
    ASSERT_UEQ(after.device_free, before.device_free);
}

TEST(cuda_fake_driver_oom)
{
    /* A 64 MiB device: CUDA_ERROR_OUT_OF_MEMORY enters the ladder, which
     * spills to make room. */
    setenv("FAKE_CUDA_MEMORY", "67108864", 1);
    use_fake_driver();
    sw_device *dev = test_open("cuda:0");
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
    /* More than the device: refused before the driver is asked. */
    sw_buffer *huge = NULL;
    ASSERT_ERR(sw_buffer_alloc(dev, (size_t)65 << 20, "huge", &huge),
               SW_ERR_TOO_LARGE);
}

/* The fake driver's own figures (fake_libcuda.c: fake_cuda_stats). */
typedef struct fake_stats {
    unsigned long long ops, not_ready, waits_blocked, pinned_allocs;
    long streams, events, pinned_live;
} fake_stats;

static void *fake_symbol(const char *name)
{
#ifdef SW_FAKE_LIBCUDA
    void *lib = dlopen(SW_FAKE_LIBCUDA, RTLD_NOW | RTLD_NOLOAD);
    if (lib == NULL)
        FAIL("the fake driver is not loaded: %s", dlerror());
    void *p = dlsym(lib, name);
    dlclose(lib);
    if (p == NULL)
        FAIL("the fake driver lacks %s", name);
    return p;
#else
    (void)name;
    SKIP("this build has no fake driver");
    return NULL;
#endif
}

static fake_stats fake_get_stats(void)
{
    void (*fn)(fake_stats *);
    void *p = fake_symbol("fake_cuda_stats");
    memcpy(&fn, &p, sizeof p);
    fake_stats st;
    fn(&st);
    return st;
}

/* Spill six buffers through a 2-buffer budget and back; every byte comes
 * back. */
static void fake_spill_round(sw_device *dev)
{
    enum { NB = 6, SZ = 1 << 20 };
    sw_buffer *bs[NB];
    for (int i = 0; i < NB; i++) {
        bs[i] = test_alloc(dev, SZ, "spill");
        test_write_pattern(bs[i], 300 + (uint32_t)i);
    }
    ASSERT_OK(sw_set_memory_budget(dev, 2 * SZ));
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < NB; i++) {
            sw_devmem p;
            ASSERT_OK(sw_buffer_device_ptr(bs[i], &p));
        }
    sw_memory_info mi = test_info_synced(dev);
    ASSERT_UGT(mi.spills, 0);
    ASSERT_UGT(mi.restores, 0);
    for (int i = 0; i < NB; i++) {
        test_expect_pattern(bs[i], 300 + (uint32_t)i);
        ASSERT_OK(sw_buffer_free(bs[i]));
    }
    ASSERT_OK(sw_set_memory_budget(dev, 0));
}

TEST(cuda_fake_async_copy_queue)
{
    /* Every queued operation takes 100 us: work is still running when the
     * backend and the core look, so the not-ready and cross-stream paths
     * run. */
    setenv("FAKE_CUDA_DELAY_US", "100", 1);
    use_fake_driver();
    sw_device *dev = test_open("cuda:0");
    ASSERT_STR_CONTAINS(sw_device_description(dev), "pinned staging");
    /* The default stream and the copy stream (contract v3). */
    ASSERT_EQ(fake_get_stats().streams, 2);
    fake_spill_round(dev);
    fake_kernels(dev);
    fake_stats st = fake_get_stats();
    ASSERT_UGT(st.ops, 0);
    ASSERT_UGT(st.not_ready, 0);     /* queries met work still running */
    ASSERT_UGT(st.waits_blocked, 0); /* streams held for one another */
    ASSERT_UGT(st.pinned_allocs, 0); /* the staging pool is page-locked */
    /* Given back when the pool is released. */
    ASSERT_OK(sw_release_host_pool(dev));
    ASSERT_EQ(fake_get_stats().pinned_live, 0);
}

TEST(cuda_fake_pageable_staging)
{
    setenv("SPILLWAY_CUDA_PINNED", "0", 1);
    setenv("FAKE_CUDA_DELAY_US", "50", 1);
    use_fake_driver();
    sw_device *dev = test_open("cuda:0");
    ASSERT_STR_CONTAINS(sw_device_description(dev), "pageable staging");
    fake_spill_round(dev);
    ASSERT_EQ(fake_get_stats().pinned_allocs, 0);
}

TEST(cuda_fake_no_nvrtc_fills)
{
    /* A driver-only machine: no kernels, but fills of every pattern work
     * (memsets, or a chunk doubled by device copies), and a launch says
     * why it cannot run. */
    setenv("FAKE_CUDA_DELAY_US", "20", 1);
    use_fake_driver();
    setenv("SPILLWAY_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so.99", 1);
    sw_device *dev = test_open("cuda:0");
    enum { N = 100000 };
    sw_buffer *b = test_alloc(dev, N * 8, "fills");
    sw_scalar one = {.f = 1.0};
    ASSERT_OK(sw_op_fill(b, SW_FLOAT64, N, one)); /* halves differ */
    double *d = malloc(N * 8);
    ASSERT_NOT_NULL(d);
    ASSERT_OK(sw_buffer_read(b, 0, d, N * 8));
    for (size_t i = 0; i < N; i++)
        if (d[i] != 1.0)
            FAIL("element %zu is %g after a FILL of 1.0", i, d[i]);
    unsigned char want[4096], got[4096];
    memset(want, 0, sizeof want);
    ASSERT_OK(sw_buffer_write(b, 0, want, sizeof want));
    static const unsigned char pat[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    static const size_t fills[][2] = {{2, 1}, {4, 202}, {8, 400}, {8, 1004}};
    for (size_t i = 0; i < sizeof fills / sizeof fills[0]; i++) {
        size_t psize = fills[i][0], off = fills[i][1], n = psize * 37;
        ASSERT_OK(sw_buffer_fill(b, off, n, pat, psize));
        for (size_t j = 0; j < n; j++)
            want[off + j] = pat[j % psize];
    }
    ASSERT_OK(sw_buffer_read(b, 0, got, sizeof got));
    ASSERT_MEM_EQ(got, want, sizeof want);
    ASSERT_ERR(sw_op_add(b, b, b, SW_FLOAT64, N), SW_ERR_UNSUPPORTED);
    ASSERT_STR_CONTAINS(sw_last_error(), "NVRTC");
    free(d);
    ASSERT_OK(sw_buffer_free(b));
}

TEST(cuda_fake_sticky_error)
{
    use_fake_driver();
    sw_device *dev = test_open("cuda:0");
    sw_buffer *a = test_alloc(dev, 4096, "a");
    ASSERT_OK(sw_op_fill(a, SW_INT32, 1024, (sw_scalar){.i = 3}));
    ASSERT_OK(sw_device_synchronize(dev));
    /* Earlier work faulted: the context is gone.  The first launch (which
     * loads the kernels) says so by name, not "cannot load the built-in
     * kernels", and nothing is held against the kernels. */
    void (*set_sticky)(unsigned);
    void *p = fake_symbol("fake_cuda_set_sticky");
    memcpy(&set_sticky, &p, sizeof p);
    set_sticky(700); /* CUDA_ERROR_ILLEGAL_ADDRESS */
    sw_scalar s;
    int rc = sw_op_sum(a, SW_INT32, 1024, &s);
    ASSERT_TRUE(rc != SW_OK);
    ASSERT_STR_CONTAINS(sw_last_error(), "CUDA_ERROR_ILLEGAL_ADDRESS");
    ASSERT_TRUE(strstr(sw_last_error(), "cannot load the built-in") == NULL);
    set_sticky(0); /* a fresh context, as after a restart */
    ASSERT_OK(sw_op_sum(a, SW_INT32, 1024, &s));
    ASSERT_EQ(s.i, 3 * 1024);
    ASSERT_OK(sw_buffer_free(a));
}

static int child_use_device(void *arg)
{
    sw_device *dev = arg;
    sw_buffer *b = NULL;
    int rc = sw_buffer_alloc(dev, 4096, "child", &b);
    if (rc == SW_OK)
        return 1;
    if (strstr(sw_last_error(), "fork()") == NULL)
        return 2;
    return 0;
}

TEST(cuda_fake_fork_child)
{
    /* A device opened before fork(): every call of the child fails with
     * the fork message (cuda__enter), not only listing and opening. */
    use_fake_driver();
    sw_device *dev = test_open("cuda:0");
    ASSERT_OK(sw_empty_cache(dev));
    char err[512] = "";
    int status = test_fork_run(child_use_device, dev, err, sizeof err);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        FAIL("a child using a device opened before fork(): status %d (%s)",
             status, err);
}

TEST(cuda_fake_foreign_stream)
{
    /* The allocator plug-ins' join with a framework's stream (here the
     * legacy stream 0), both ways, never blocking. */
    use_fake_driver();
    ASSERT_ERR(sw__cuda_stream_join(0, NULL, 1), SW_ERR_NO_DEVICE);
    sw_device *dev = test_open("cuda:0");
    sw_buffer *a = test_alloc(dev, 1 << 20, "a");
    ASSERT_OK(sw_buffer_fill(a, 0, 1 << 20, "\7", 1));
    ASSERT_OK(sw__cuda_stream_join(0, NULL, 1));
    ASSERT_OK(sw__cuda_stream_join(0, NULL, 0));
    ASSERT_ERR(sw__cuda_stream_join(5, NULL, 0), SW_ERR_NO_DEVICE);
    ASSERT_ERR(sw__cuda_stream_join(-1, NULL, 0), SW_ERR_INVALID_ARG);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_device_synchronize(dev));
}

/* ------------------------------------------------------------------------
 * On a GPU (each skips without one)
 * ---------------------------------------------------------------------- */

typedef struct ctx_probe {
    sw_device *dev;
    void *before, *after;
    int rc;
} ctx_probe;

static void *probe_thread(void *arg)
{
    ctx_probe *p = arg;
    p->before = sw__cuda_thread_context();
    sw_buffer *b = NULL;
    p->rc = sw_buffer_alloc(p->dev, 1 << 20, "probe", &b);
    if (p->rc == SW_OK) {
        sw_scalar one = {.f = 1.0}, sum = {.f = 0};
        p->rc = sw_op_fill(b, SW_FLOAT32, 1 << 18, one);
        if (p->rc == SW_OK)
            p->rc = sw_op_sum(b, SW_FLOAT32, 1 << 18, &sum);
        if (p->rc == SW_OK && sum.f != (double)(1 << 18))
            p->rc = SW_ERR_DEVICE;
        sw_buffer_free(b);
    }
    p->after = sw__cuda_thread_context();
    return NULL;
}

TEST(cuda_gpu_device)
{
    require_gpu();
    require_kernels();
    sw_device *dev = test_open("cuda:0");
    ASSERT_STR_EQ(sw_device_name(dev), "cuda:0");
    const char *desc = sw_device_description(dev);
    ASSERT_STR_CONTAINS(desc, "sm_");
    ASSERT_STR_CONTAINS(desc, "driver ");
    sw_memory_info mi = test_info(dev);
    ASSERT_EQ(mi.device_free_known, 1);
    ASSERT_UGT(mi.device_total, 0);
    ASSERT_ULE(mi.device_free, mi.device_total);
    ASSERT_UGE(listed_cuda_devices(), 1);

    /* From a thread with no context current: the work runs, and no
     * context is left current behind us. */
    ctx_probe p = {dev, NULL, NULL, SW_OK};
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, probe_thread, &p), 0);
    ASSERT_EQ(pthread_join(t, NULL), 0);
    ASSERT_NULL(p.before);
    if (p.rc != SW_OK)
        FAIL("work from a fresh thread: %s", sw_err_name(p.rc));
    ASSERT_NULL(p.after);
    /* Nor on this thread. */
    ASSERT_NULL(sw__cuda_thread_context());
}

TEST(cuda_gpu_pool_returns_memory)
{
    require_gpu();
    sw_device *dev = test_open("cuda:0");
    uint64_t reserved = 0, used = 0;
    int rc = sw__cuda_pool_usage(0, &reserved, &used);
    if (rc == SW_ERR_UNSUPPORTED)
        SKIP("%s", sw_last_error());
    ASSERT_OK(rc);
    const size_t big = (size_t)256 << 20;
    sw_buffer *b = test_alloc(dev, big, "big");
    ASSERT_OK(sw_buffer_fill(b, 0, big, "\x5a", 1));
    ASSERT_OK(sw_device_synchronize(dev));
    ASSERT_OK(sw__cuda_pool_usage(0, &reserved, &used));
    ASSERT_UGE(used, big);
    ASSERT_UGE(reserved, used);
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_empty_cache(dev));
    ASSERT_OK(sw_device_synchronize(dev));
    (void)test_info(dev); /* trims the pool */
    ASSERT_OK(sw__cuda_pool_usage(0, &reserved, &used));
    /* The pool keeps no cache of its own beyond its granularity. */
    ASSERT_ULT(used, big);
    ASSERT_ULT(reserved, used + ((uint64_t)64 << 20));
}

TEST(cuda_gpu_fallback_allocator)
{
    require_gpu();
    require_kernels();
    setenv("SPILLWAY_CUDA_POOL", "0", 1);
    sw_device *dev = test_open("cuda:0");
    ASSERT_STR_CONTAINS(sw_device_description(dev), "cuMemAlloc");
    uint64_t r = 0, u = 0;
    ASSERT_ERR(sw__cuda_pool_usage(0, &r, &u), SW_ERR_UNSUPPORTED);
    /* The kernels first (loading a module takes device memory too). */
    sw_buffer *w = test_alloc(dev, 4096, "warm-up");
    sw_scalar two = {.i = 2}, s0 = {.i = 0};
    ASSERT_OK(sw_op_fill(w, SW_INT32, 1024, two));
    ASSERT_OK(sw_op_sum(w, SW_INT32, 1024, &s0));
    ASSERT_EQ(s0.i, 2048);
    ASSERT_OK(sw_buffer_free(w));
    const size_t big = (size_t)256 << 20;
    sw_memory_info before = test_info_synced(dev);
    sw_buffer *b = test_alloc(dev, big, "big");
    ASSERT_OK(sw_op_fill(b, SW_INT32, big / 4, two));
    sw_scalar sum = {.i = 0};
    ASSERT_OK(sw_op_sum(b, SW_INT32, big / 4, &sum));
    ASSERT_EQ(sum.i, 2 * (int64_t)(big / 4));
    /* A free is deferred behind the work queued before it, and the
     * memory comes back by the next look at the device once done. */
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_empty_cache(dev));
    sw_memory_info after = test_info_synced(dev);
    ASSERT_UGT(after.device_free + ((uint64_t)64 << 20), before.device_free);
}

TEST(cuda_gpu_unusual_paths)
{
    require_gpu();
    require_kernels();
    sw_device *dev = test_open("cuda:0");
    /* Fills at odd offsets, with patterns that have no memset. */
    sw_buffer *b = test_alloc(dev, 4096, "fills");
    unsigned char host[4096], want[4096];
    memset(want, 0, sizeof want);
    ASSERT_OK(sw_buffer_write(b, 0, want, sizeof want));
    static const unsigned char pat[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    /* Pattern size and offset: the byte kernel (odd offsets), the 8-byte
     * kernel (aligned, halves differ), the driver's memsets (aligned). */
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

    /* Raw COPY between overlapping ranges of one allocation, and FILL at
     * an offset that breaks the element alignment. */
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
    a.out.offset += 100 * 4;
    a.a = p[0];
    ASSERT_OK(sw_launch_kernel(dev, &a));
    a.kernel = SW_KERNEL_FILL;
    a.n = 10;
    a.out = p[0];
    a.out.offset += 3002; /* not a multiple of 4 */
    a.alpha.i = 0x11223344;
    ASSERT_OK(sw_launch_kernel(dev, &a));
    ASSERT_OK(sw_launch_end(dev, bufs, 1));
    int32_t w[1024];
    memcpy(w, v, sizeof w);
    memmove(w + 100, v, 500 * 4);
    for (int i = 0; i < 10; i++) {
        int32_t x = 0x11223344;
        memcpy((char *)w + 3002 + 4 * i, &x, 4);
    }
    int32_t got[1024];
    ASSERT_OK(sw_buffer_read(b, 0, got, sizeof got));
    ASSERT_MEM_EQ(got, w, sizeof w);

    /* A misaligned typed operand is refused before it reaches the GPU (a
     * misaligned access would end the context). */
    ASSERT_OK(sw_launch_begin(dev, bufs, 1, p));
    a.kernel = SW_KERNEL_ADD;
    a.n = 4;
    a.out = p[0];
    a.a = p[0];
    a.b = p[0];
    a.a.offset += 2;
    ASSERT_ERR(sw_launch_kernel(dev, &a), SW_ERR_INVALID_ARG);
    ASSERT_OK(sw_launch_end(dev, bufs, 1));
    ASSERT_OK(sw_device_synchronize(dev));
    ASSERT_OK(sw_buffer_free(b));
}

static int child_open_cuda(void *arg)
{
    (void)arg;
    int n = -1;
    char why[256] = "";
    if (sw__cuda_device_count(&n, why, sizeof why) != SW_OK || n != 0)
        return 1;
    if (strstr(why, "fork") == NULL)
        return 2;
    sw_device *dev = NULL;
    return sw_device_open("cuda:0", &dev) == SW_ERR_NO_DEVICE ? 0 : 3;
}

TEST(cuda_gpu_fork_child)
{
    require_gpu(); /* initializes CUDA in this process */
    char err[512] = "";
    int status = test_fork_run(child_open_cuda, NULL, err, sizeof err);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        FAIL("a child forked after cuInit: status %d (%s)", status, err);
}
