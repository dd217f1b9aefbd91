/*
 * test-ze.c -- the Level Zero backend (docs/level-zero.md).
 *
 * None of it needs an Intel GPU: the loader missing, wrong, or present
 * without a GPU driver (Debian's libze1), the error mapping, the
 * declarations against the loader's headers (tests/ze/sigcheck.c, where
 * found at build time), the SPIR-V the build made from opencl.cl, and the
 * backend end to end through the CPU stand-in (tests/ze/).  The whole
 * suite also runs on ze:0 through it (make's c-ze-fake), and on a GPU with
 * SW_TEST_DEVICE=ze:0 (bench/ze/check.sh).
 */
#include "test.h"
#include "tests.h"

#include "backend/ze_api.h"
#include "backend/ze_internal.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#ifdef SW_HAVE_ZE_H
#include "../ze/sigcheck.h"
#endif

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

static void use_fake(void) { setenv("SPILLWAY_ZE_LIBRARY", SW_FAKE_LIBZE, 1); }

static void require_spirv(void)
{
    size_t n = 0;
    const char *why = NULL;
    if (sw__ze_spirv(1, &n, &why) == NULL)
        SKIP("%s", why);
}

static void expect_no_devices(const char *reason)
{
    int n = -1;
    char why[320] = "";
    ASSERT_OK(sw__ze_device_count(&n, why, sizeof why));
    ASSERT_EQ(n, 0);
    ASSERT_STR_CONTAINS(why, reason);
    ASSERT_TRUE(strchr(why, '\n') == NULL);
    int seen = 0;
    for (size_t i = 0; i < sw_backend_count(); i++) {
        const char *name = NULL;
        int devs = -1;
        char bwhy[256];
        ASSERT_OK(sw_backend_info(i, &name, &devs, bwhy, sizeof bwhy));
        if (strcmp(name, "ze") == 0) {
            seen = 1;
            ASSERT_EQ(devs, 0);
            ASSERT_STR_CONTAINS(bwhy, reason);
        }
    }
    ASSERT_TRUE(seen);
    sw_device *dev = (sw_device *)(uintptr_t)1;
    ASSERT_ERR(sw_device_open("ze:0", &dev), SW_ERR_NO_DEVICE);
    ASSERT_NULL(dev);
    ASSERT_STR_CONTAINS(sw_last_error(), "ze:0");
    ASSERT_STR_CONTAINS(sw_last_error(), reason);
}

static int spirv_has_cap(const unsigned char *spv, size_t size, uint32_t cap)
{
    for (size_t i = 5; i < size / 4;) {
        uint32_t w, arg = 0;
        memcpy(&w, spv + 4 * i, 4);
        if ((w & 0xffff) == 17 && (w >> 16) == 2 && i + 1 < size / 4) {
            memcpy(&arg, spv + 4 * (i + 1), 4);
            if (arg == cap)
                return 1;
        }
        i += (w >> 16) ? (w >> 16) : 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * Without a GPU
 * ---------------------------------------------------------------------- */

/* The two modules the build made from opencl.cl: SPIR-V, the Float64
 * capability in one only, every entry the backend launches in each (the
 * fp64 ones in the fp64 module only). */
TEST(ze_spirv_modules)
{
    require_spirv();
    size_t nk = 0;
    const int *fp64 = NULL;
    const char *const *names = sw__ze_kernel_names(&nk, &fp64);
    ASSERT_UEQ(nk, 24);
    for (int with = 0; with < 2; with++) {
        size_t size = 0;
        const unsigned char *spv = sw__ze_spirv(with, &size, NULL);
        ASSERT_NOT_NULL(spv);
        ASSERT_UGT(size, 1000);
        uint32_t magic = 0, version = 0;
        memcpy(&magic, spv, 4);
        memcpy(&version, spv + 4, 4);
        ASSERT_EQ(magic, 0x07230203);
        ASSERT_EQ(version, 0x00010000); /* SPIR-V 1.0: every driver's */
        ASSERT_EQ(spirv_has_cap(spv, size, 10), with); /* Float64 */
        for (size_t k = 0; k < nk; k++) {
            size_t len = strlen(names[k]) + 1;
            int found = 0;
            for (size_t at = 0; !found && at + len <= size; at++)
                found = memcmp(spv + at, names[k], len) == 0;
            if (found != (with || !fp64[k]))
                FAIL("%s is %sin the %s module", names[k],
                     found ? "" : "not ", with ? "fp64" : "no-fp64");
        }
    }
}

TEST(ze_library_missing)
{
    setenv("SPILLWAY_ZE_LIBRARY", "/nonexistent/libze_loader.so.1", 1);
    expect_no_devices("/nonexistent/libze_loader.so.1 not found "
                      "(SPILLWAY_ZE_LIBRARY)");
    ASSERT_NOT_NULL(test_open("sim:0"));
}

TEST(ze_library_wrong)
{
    setenv("SPILLWAY_ZE_LIBRARY", SW_FAKE_LIBCUDA, 1);
    expect_no_devices("lacks zeInit: not a Level Zero loader");
}

TEST(ze_no_gpu)
{
    unsetenv("SPILLWAY_ZE_LIBRARY");
    int n = -1;
    char why[320] = "";
    ASSERT_OK(sw__ze_device_count(&n, why, sizeof why));
    if (n > 0)
        SKIP("this machine has %d Level Zero GPU%s", n, n == 1 ? "" : "s");
    ASSERT_TRUE(strchr(why, '\n') == NULL);
    expect_no_devices(strstr(why, "not found") ? "libze_loader.so.1 not "
                                                 "found: no Level Zero "
                                                 "loader"
                                               : "ze");
}

TEST(ze_no_driver)
{
    setenv("FAKE_ZE_NO_DRIVER", "1", 1);
    use_fake();
    expect_no_devices("zeInit failed: ZE_RESULT_ERROR_UNINITIALIZED (no "
                      "Level Zero GPU driver");
}

TEST(ze_error_mapping)
{
    ASSERT_EQ(sw__ze_error_code(0), SW_OK);
    ASSERT_EQ(sw__ze_error_code(0x70000003), SW_ERR_OOM);
    ASSERT_EQ(sw__ze_error_code(0x70000002), SW_ERR_HOST_OOM);
    ASSERT_EQ(sw__ze_error_code(0x78000003), SW_ERR_UNSUPPORTED);
    ASSERT_EQ(sw__ze_error_code(0x70000001), SW_ERR_DEVICE);
    ASSERT_EQ(sw__ze_error_code(0x12345), SW_ERR_DEVICE);
    ASSERT_STR_EQ(sw__ze_result_name(0x70000003),
                  "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY");
    ASSERT_STR_EQ(sw__ze_result_name(1), "ZE_RESULT_NOT_READY");
    ASSERT_NULL(sw__ze_result_name(0x12345));
}

TEST(ze_signatures)
{
#ifdef SW_HAVE_ZE_H
    ASSERT_GT(sw_test_ze_sigcheck_count(), 100);
#else
    SKIP("no Level Zero headers (level_zero/ze_api.h, libze-dev) at build "
         "time: ze_api.h was not checked");
#endif
}

/* ------------------------------------------------------------------------
 * End to end through the stand-in
 * ---------------------------------------------------------------------- */

static void host_task(void *arg) { atomic_store((atomic_int *)arg, 1); }

/* Kernels of every dtype the device declares, against the host. */
static void check_kernels(sw_device *dev)
{
    enum { N = 3000 };
    uint32_t mask = 0;
    ASSERT_OK(sw_device_dtypes(dev, &mask));
    static const sw_dtype dts[] = {SW_FLOAT32, SW_FLOAT64, SW_INT32,
                                   SW_INT64};
    for (size_t d = 0; d < 4; d++) {
        sw_dtype dt = dts[d];
        if (!(mask & (1u << dt)))
            continue;
        int fl = dt == SW_FLOAT32 || dt == SW_FLOAT64;
        size_t es = sw_dtype_size(dt);
        sw_buffer *a = test_alloc(dev, N * es, "a");
        sw_buffer *o = test_alloc(dev, N * es, "o");
        static unsigned char ha[N * 8], got[N * 8], want[N * 8];
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
        if (fl)
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
        sw_scalar s, s2;
        ASSERT_OK(sw_op_sum(a, dt, N, &s));
        ASSERT_OK(sw_op_sum(a, dt, N, &s2));
        ASSERT_EQ(memcmp(&s, &s2, sizeof s), 0);
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
        if (fl)
            ASSERT_DBL_EQ(s.f, fs);
        else
            ASSERT_EQ(s.i, (int64_t)is);
        ASSERT_OK(sw_buffer_free(a));
        ASSERT_OK(sw_buffer_free(o));
    }
}

TEST(ze_fake_loader)
{
    require_spirv();
    use_fake();
    sw_device *dev = test_open("ze:0");
    const char *desc = sw_device_description(dev);
    ASSERT_STR_CONTAINS(desc, "Fake Intel GPU");
    ASSERT_STR_CONTAINS(desc, "fp64");
    ASSERT_STR_CONTAINS(desc, "free memory from Sysman");
    ASSERT_EQ(sw__ze_sysman(0), 1);
    uint32_t mask = 0;
    ASSERT_OK(sw_device_dtypes(dev, &mask));
    ASSERT_UEQ(mask, (1u << SW_FLOAT32) | (1u << SW_FLOAT64) |
                         (1u << SW_INT32) | (1u << SW_INT64));
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
    ASSERT_OK(sw_op_sum(x, SW_INT32, 1024, &s)); /* the default queue */
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
    sw_memory_info mi = test_info_synced(dev);
    ASSERT_UGT(mi.spills, 0);
    ASSERT_UGT(mi.restores, 0);
    for (int i = 0; i < NB; i++) {
        test_expect_pattern(bs[i], 100 + (uint32_t)i);
        ASSERT_OK(sw_buffer_free(bs[i]));
    }
    ASSERT_OK(sw_set_memory_budget(dev, 0));

    /* device_free is Sysman's (the device's module, not the system's),
     * and a free's memory comes back once its queue's work is done. */
    ASSERT_OK(sw_empty_cache(dev));
    sw_memory_info before = test_info_synced(dev);
    ASSERT_EQ(before.device_free_known, 1);
    ASSERT_UEQ(before.device_total, (uint64_t)2 << 30);
    ASSERT_ULT(before.device_free, before.device_total);
    sw_buffer *big = test_alloc(dev, 8 << 20, "big");
    ASSERT_OK(sw_buffer_fill(big, 0, 8 << 20, "\1\2", 2));
    sw_memory_info during = test_info_synced(dev);
    ASSERT_UEQ(during.device_free + (8 << 20), before.device_free);
    ASSERT_OK(sw_buffer_free(big));
    ASSERT_OK(sw_empty_cache(dev));
    sw_memory_info after = test_info_synced(dev);
    ASSERT_UEQ(after.device_free, before.device_free);
}

/* No fp64: float64 is not a kernel dtype (saying why), and float32 sums
 * accumulate in float-float pairs. */
TEST(ze_fake_no_fp64)
{
    require_spirv();
    setenv("FAKE_ZE_NO_FP64", "1", 1);
    use_fake();
    sw_device *dev = test_open("ze:0");
    ASSERT_STR_CONTAINS(sw_device_description(dev), "no fp64");
    uint32_t mask = 0;
    ASSERT_OK(sw_device_dtypes(dev, &mask));
    ASSERT_UEQ(mask, (1u << SW_FLOAT32) | (1u << SW_INT32) |
                         (1u << SW_INT64));
    check_kernels(dev);
    sw_buffer *a = test_alloc(dev, 800, "a");
    ASSERT_ERR(sw_op_add(a, a, a, SW_FLOAT64, 100), SW_ERR_DTYPE);
    ASSERT_STR_CONTAINS(sw_last_error(), "no fp64");
    /* A sum that float32 alone would get wrong: 2^24 + 1 + 1 ... */
    enum { N = 4097 };
    static float v[N];
    v[0] = 16777216.0f;
    for (int i = 1; i < N; i++)
        v[i] = 1.0f;
    sw_buffer *f = test_alloc(dev, sizeof v, "f");
    ASSERT_OK(sw_buffer_write(f, 0, v, sizeof v));
    sw_scalar s;
    ASSERT_OK(sw_op_sum(f, SW_FLOAT32, N, &s));
    ASSERT_DBL_EQ(s.f, 16777216.0 + (N - 1));
    ASSERT_OK(sw_buffer_free(f));
    ASSERT_OK(sw_buffer_free(a));
}

TEST(ze_fake_no_sysman)
{
    setenv("FAKE_ZE_NO_SYSMAN", "1", 1);
    use_fake();
    sw_device *dev = test_open("ze:0");
    ASSERT_STR_CONTAINS(sw_device_description(dev),
                        "free memory unknown (no Sysman)");
    ASSERT_EQ(sw__ze_sysman(0), 0);
    sw_memory_info mi = test_info(dev);
    ASSERT_EQ(mi.device_free_known, 0);
    ASSERT_UEQ(mi.device_free, 0);
    ASSERT_UEQ(mi.device_total, (uint64_t)2 << 30);
    /* The OOM report says so rather than make a figure up. */
    sw_buffer *b = NULL;
    test_pin(b = test_alloc(dev, 4096, "pinned"));
    ASSERT_OK(sw_set_memory_budget(dev, 4096));
    sw_buffer *c = NULL;
    ASSERT_ERR(sw_buffer_alloc(dev, 4096, "c", &c), SW_ERR_OOM);
    ASSERT_STR_CONTAINS(sw_last_error(), "device free unknown");
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    test_unpin_free(b);
}

/* A loader before 1.5 (no zesInit): Sysman through the core handle, as
 * under ZES_ENABLE_SYSMAN=1. */
TEST(ze_fake_legacy_sysman)
{
    setenv("FAKE_ZE_LEGACY_SYSMAN", "1", 1);
    use_fake();
    sw_device *dev = test_open("ze:0");
    ASSERT_EQ(sw__ze_sysman(0), 1);
    sw_memory_info mi = test_info(dev);
    ASSERT_EQ(mi.device_free_known, 1);
    ASSERT_ULE(mi.device_free, mi.device_total);
}

/* Without kernels (a build without SPIR-V, or SPILLWAY_ZE_KERNELS=0):
 * no dtype is a kernel dtype, launches say why, and memory, copies,
 * fills and spilling all work. */
TEST(ze_fake_no_kernels)
{
    setenv("SPILLWAY_ZE_KERNELS", "0", 1);
    use_fake();
    sw_device *dev = test_open("ze:0");
    ASSERT_STR_CONTAINS(sw_device_description(dev), "no kernels");
    uint32_t mask = 0;
    ASSERT_OK(sw_device_dtypes(dev, &mask));
    ASSERT_EQ(mask, 0); /* nothing, not even the backend's marker bit */
    sw_buffer *a = test_alloc(dev, 4096, "a");
    ASSERT_ERR2(sw_op_fill(a, SW_INT32, 16, (sw_scalar){.i = 1}),
                SW_ERR_DTYPE, SW_ERR_UNSUPPORTED);
    ASSERT_STR_CONTAINS(sw_last_error(), "no kernels");
    ASSERT_OK(sw_buffer_fill(a, 0, 4096, "\7\7\7\7", 4));
    unsigned char got[4096], want[4096];
    memset(want, 7, sizeof want);
    ASSERT_OK(sw_buffer_read(a, 0, got, sizeof got));
    ASSERT_MEM_EQ(got, want, sizeof got);
    test_write_pattern(a, 5);
    sw_buffer *b = test_alloc(dev, 4096, "b");
    ASSERT_OK(sw_buffer_copy(b, 0, a, 0, 4096));
    test_expect_pattern(b, 5);
    /* Under a budget of one buffer, each use moves the other out. */
    ASSERT_OK(sw_set_memory_budget(dev, 4096));
    sw_devmem p;
    ASSERT_OK(sw_buffer_device_ptr(a, &p));
    ASSERT_OK(sw_buffer_device_ptr(b, &p));
    sw_memory_info mi = test_info(dev);
    ASSERT_UGT(mi.spills, 0);
    ASSERT_UGT(mi.restores, 0);
    test_expect_pattern(a, 5);
    test_expect_pattern(b, 5);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
}

TEST(ze_fake_oom)
{
    setenv("FAKE_ZE_MEMORY", "67108864", 1);
    use_fake();
    sw_device *dev = test_open("ze:0");
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
}

/* Fills with patterns larger than the device fills (the byte kernel), at
 * odd offsets, and a raw COPY between overlapping ranges. */
TEST(ze_fake_unusual_paths)
{
    require_spirv();
    setenv("FAKE_ZE_MAX_FILL", "4", 1);
    use_fake();
    sw_device *dev = test_open("ze:0");
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
    a.out.offset += 40;
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

/* ------------------------------------------------------------------------
 * The stand-in's own checks: each misuse ends the process loudly
 * ---------------------------------------------------------------------- */

typedef struct fake_ze {
    swze_loader_api api;
    swze_driver drv;
    swze_device dev;
    swze_context ctx;
} fake_ze;

#define Z(call)                                                               \
    do {                                                                      \
        if ((call) != 0)                                                      \
            return 10;                                                        \
    } while (0)

static int fz_load(fake_ze *f)
{
    void *lib = dlopen(SW_FAKE_LIBZE, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        return -1;
#define FZ_RESOLVE(kind, name, params)                                        \
    {                                                                         \
        void *p = dlsym(lib, #name);                                          \
        memcpy(&f->api.name, &p, sizeof p);                                   \
    }
    SWZE_FUNCS(FZ_RESOLVE)
#undef FZ_RESOLVE
    uint32_t n = 1;
    swze_context_desc cd = {SWZE_ZE_STRUCTURE_TYPE_CONTEXT_DESC, NULL, 0};
    if (f->api.zeInit(1) || f->api.zeDriverGet(&n, &f->drv) ||
        f->api.zeDeviceGet(f->drv, &n, &f->dev) ||
        f->api.zeContextCreate(f->drv, &cd, &f->ctx))
        return -1;
    return 0;
}

static swze_cmdlist fz_list(fake_ze *f)
{
    swze_command_queue_desc qd = {SWZE_ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC,
                                  NULL, 1, 0, 0, 2, 0};
    swze_cmdlist l = NULL;
    return f->api.zeCommandListCreateImmediate(f->ctx, f->dev, &qd, &l) == 0
               ? l
               : NULL;
}

static void *fz_alloc(fake_ze *f, size_t n)
{
    swze_device_mem_alloc_desc ad = {
        SWZE_ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, NULL, 0, 0};
    void *p = NULL;
    return f->api.zeMemAllocDevice(f->ctx, &ad, n, 256, f->dev, &p) == 0 ? p
                                                                         : NULL;
}

static swze_event fz_event(fake_ze *f, uint32_t i)
{
    static swze_event_pool pool;
    swze_event_pool_desc pd = {SWZE_ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, NULL,
                               1, 8};
    if (pool == NULL &&
        f->api.zeEventPoolCreate(f->ctx, &pd, 1, &f->dev, &pool) != 0)
        return NULL;
    swze_event_desc ed = {SWZE_ZE_STRUCTURE_TYPE_EVENT_DESC, NULL, i, 4, 4};
    swze_event e = NULL;
    return f->api.zeEventCreate(pool, &ed, &e) == 0 ? e : NULL;
}

static int misuse_freed_memory(void *arg)
{
    (void)arg;
    fake_ze f;
    Z(fz_load(&f));
    swze_cmdlist l = fz_list(&f);
    void *p = fz_alloc(&f, 4096);
    Z(l == NULL || p == NULL);
    Z(f.api.zeMemFree(f.ctx, p));
    char host[16] = {0};
    (void)f.api.zeCommandListAppendMemoryCopy(l, p, host, 16, NULL, 0, NULL);
    return 0;
}

static int misuse_free_early(void *arg)
{
    int ordered = arg != NULL;
    fake_ze f;
    Z(fz_load(&f));
    swze_cmdlist l = fz_list(&f);
    void *p = fz_alloc(&f, 4096);
    swze_event e = fz_event(&f, 0);
    Z(l == NULL || p == NULL || e == NULL);
    char host[16] = {0};
    Z(f.api.zeCommandListAppendMemoryCopy(l, p, host, 16, NULL, 0, NULL));
    Z(f.api.zeCommandListAppendBarrier(l, e, 0, NULL));
    if (ordered)
        Z(f.api.zeEventHostSynchronize(e, UINT64_MAX));
    Z(f.api.zeMemFree(f.ctx, p)); /* early unless the host waited */
    return 0;
}

static int misuse_no_barrier(void *arg)
{
    (void)arg;
    fake_ze f;
    Z(fz_load(&f));
    swze_cmdlist l = fz_list(&f);
    void *p = fz_alloc(&f, 4096);
    Z(l == NULL || p == NULL);
    char host[16] = {0};
    Z(f.api.zeCommandListAppendMemoryCopy(l, p, host, 16, NULL, 0, NULL));
    (void)f.api.zeCommandListAppendMemoryCopy(l, host, p, 16, NULL, 0, NULL);
    return 0;
}

static int misuse_wait_unsignaled(void *arg)
{
    (void)arg;
    fake_ze f;
    Z(fz_load(&f));
    swze_cmdlist l = fz_list(&f);
    swze_event e = fz_event(&f, 0);
    Z(l == NULL || e == NULL);
    (void)f.api.zeCommandListAppendBarrier(l, NULL, 1, &e);
    return 0;
}

static int misuse_reset_while_waited(void *arg)
{
    (void)arg;
    fake_ze f;
    Z(fz_load(&f));
    swze_cmdlist a = fz_list(&f), b = fz_list(&f);
    swze_event e = fz_event(&f, 0);
    Z(a == NULL || b == NULL || e == NULL);
    Z(f.api.zeCommandListAppendBarrier(b, e, 0, NULL));
    Z(f.api.zeCommandListAppendBarrier(a, NULL, 1, &e));
    /* a's wait may not have run: the host has seen nothing of a. */
    (void)f.api.zeEventHostReset(e);
    return 0;
}

static int misuse_list_after_destroy(void *arg)
{
    (void)arg;
    fake_ze f;
    Z(fz_load(&f));
    swze_cmdlist l = fz_list(&f);
    Z(l == NULL);
    Z(f.api.zeCommandListDestroy(l));
    (void)f.api.zeCommandListAppendBarrier(l, NULL, 0, NULL);
    return 0;
}

static int misuse_context_leak(void *arg)
{
    (void)arg;
    fake_ze f;
    Z(fz_load(&f));
    Z(fz_alloc(&f, 4096) == NULL);
    (void)f.api.zeContextDestroy(f.ctx);
    return 0;
}

static void expect_abort(int (*fn)(void *), void *arg, const char *msg)
{
    char err[2048];
    int st = test_fork_run(fn, arg, err, sizeof err);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT)
        FAIL("the stand-in did not abort on a misuse (status 0x%x, want "
             "\"%s\"): %s", st, msg, err);
    ASSERT_STR_CONTAINS(err, "fake libze_loader: ");
    ASSERT_STR_CONTAINS(err, msg);
}

TEST(ze_standin_checks)
{
    expect_abort(misuse_freed_memory, NULL, "inside a live allocation");
    expect_abort(misuse_free_early, NULL, "a stream-ordered free used early");
    expect_abort(misuse_no_barrier, NULL, "no barrier between them");
    expect_abort(misuse_wait_unsignaled, NULL, "waited for before it was "
                                               "recorded");
    expect_abort(misuse_reset_while_waited, NULL,
                 "reset while a barrier of command list");
    expect_abort(misuse_list_after_destroy, NULL,
                 "used after it was destroyed");
    expect_abort(misuse_context_leak, NULL, "1 allocations");
    char err[2048];
    int st = test_fork_run(misuse_free_early, (void *)1, err, sizeof err);
    if (st != 0)
        FAIL("ordered work refused (status 0x%x): %s", st, err);
}

/* On an Intel GPU (skips without one). */
TEST(ze_gpu_device)
{
    unsetenv("SPILLWAY_ZE_LIBRARY");
    int n = 0;
    char why[320] = "";
    ASSERT_OK(sw__ze_device_count(&n, why, sizeof why));
    if (n == 0)
        SKIP("no Level Zero device: %s", why);
    sw_device *dev = test_open("ze:0");
    ASSERT_STR_CONTAINS(sw_device_description(dev), "Level Zero");
    sw_memory_info mi = test_info(dev);
    ASSERT_UGT(mi.device_total, 0);
    if (mi.device_free_known)
        ASSERT_ULE(mi.device_free, mi.device_total);
    check_kernels(dev);
}
