/*
 * test-cuda.c -- the CUDA backend.
 *
 * Most of it runs without a GPU, and is what CI runs: the built-in kernels
 * compiled by NVRTC to PTX and to CUBINs (where libnvrtc is installed), the
 * backend's declarations of the driver API checked against the toolkit's
 * cuda.h (tests/cuda/sigcheck.c, where cuda.h was found at build time),
 * the loader with no driver, with a missing library and with the toolkit's
 * stub libcuda, and the mapping of CUDA errors.  The cuda_gpu_* tests need
 * a CUDA device and skip, saying why, without one; the whole suite also
 * runs against a GPU with SW_TEST_DEVICE=cuda:0.
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

#ifdef SW_HAVE_CUDA_H
#include "../cuda/sigcheck.h"
#endif

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

/* SKIP unless libnvrtc can be loaded. */
static void require_nvrtc(int *major, int *minor)
{
    char why[512];
    if (sw__cuda_nvrtc_load(why, sizeof why, major, minor) != SW_OK)
        SKIP("no NVRTC: %s", why);
}

/* SKIP unless a CUDA device is usable. */
static void require_gpu(void)
{
    int n = 0;
    char why[256] = "";
    ASSERT_OK(sw__cuda_device_count(&n, why, sizeof why));
    if (n == 0)
        SKIP("no CUDA device: %s", why);
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
 * The built-in kernels and NVRTC (no GPU needed)
 * ---------------------------------------------------------------------- */

TEST(cuda_kernel_source)
{
    const char *src = sw__cuda_kernel_source();
    ASSERT_NOT_NULL(src);
    ASSERT_UGT(strlen(src), 1000);
    size_t n = 0;
    const char *const *names = sw__cuda_kernel_names(&n);
    /* FILL by 5 element sizes, COPY by 4, ADD/SCALE/AXPY on 10
     * arithmetic types, SUM on 14 element types, 3 final passes, the
     * byte fill. */
    ASSERT_UEQ(n, 5 + 4 + 3 * 10 + 14 + 3 + 1);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0)
                FAIL("kernel name %s twice in the table", names[i]);
    /* Every kernel x dtype launches a kernel of that operation (bool:
     * FILL, COPY and SUM only). */
    for (int k = 0; k <= SW_KERNEL_SUM; k++) {
        for (int d = 0; d < SW_DTYPE_COUNT; d++) {
            int idx = sw__cuda_kernel_for(k, d);
            int none = d == SW_BOOL && k != SW_KERNEL_FILL &&
                       k != SW_KERNEL_COPY && k != SW_KERNEL_SUM;
            if (none) {
                ASSERT_EQ(idx, -1);
                continue;
            }
            ASSERT_TRUE(idx >= 0 && (size_t)idx < n);
            char want[32];
            snprintf(want, sizeof want, "sw_%s_", sw_kernel_name(k));
            if (strncmp(names[idx], want, strlen(want)) != 0)
                FAIL("%s %s launches %s", sw_kernel_name(k),
                     sw_dtype_name(d), names[idx]);
        }
    }
    ASSERT_EQ(sw__cuda_kernel_for(SW_KERNEL_ADD, SW_DTYPE_COUNT), -1);
    /* Signed and unsigned integers of a width share their arithmetic;
     * not their sums (sign- against zero-extension). */
    ASSERT_EQ(sw__cuda_kernel_for(SW_KERNEL_AXPY, SW_INT8),
              sw__cuda_kernel_for(SW_KERNEL_AXPY, SW_UINT8));
    ASSERT_NE(sw__cuda_kernel_for(SW_KERNEL_SUM, SW_INT16),
              sw__cuda_kernel_for(SW_KERNEL_SUM, SW_UINT16));
    /* Entry names come from macros in the source, or are spelled out:
     * the stem (sw_add_##S) or the name itself is there. */
    for (size_t i = 0; i < n; i++) {
        const char *stem = names[i] + 3; /* past "sw_" */
        char want[48], macro[48];
        snprintf(want, sizeof want, "%s(", names[i]);
        snprintf(macro, sizeof macro, "sw_%.*s_##S",
                 (int)(strchr(stem, '_') - stem), stem);
        if (strstr(src, want) == NULL && strstr(src, macro) == NULL)
            FAIL("neither %s nor %s in the kernel source", want, macro);
    }
    /* Integer kernels wrap: they are instantiated on unsigned types. */
    ASSERT_STR_CONTAINS(src, "SW_ARITH(u32, sw_u32, sw_u32,");
    ASSERT_STR_CONTAINS(src, "SW_ARITH(u8, sw_u8, sw_u32,");
    /* The helpers the stand-in driver compiles as C are there. */
    ASSERT_STR_CONTAINS(src, "SW_HELPERS_ONLY");
    ASSERT_STR_CONTAINS(src, "SW_DEV sw_u16 sw_f32_to_f16(float f)");
}

/* The .param list of entry name in ptx, as sizes in bytes; returns the
 * count, or -1 when the entry is not there. */
static int ptx_params(const char *ptx, const char *name, unsigned char *size,
                      int max)
{
    char head[64];
    snprintf(head, sizeof head, ".entry %s(", name);
    const char *p = strstr(ptx, head);
    if (p == NULL)
        return -1;
    const char *end = strchr(p, ')');
    int n = 0;
    for (p += strlen(head); p != NULL && p < end; p++) {
        p = strstr(p, ".param .");
        if (p == NULL || p > end)
            break;
        p += 8; /* the type: u64, b64, f32, u32, ... */
        int bits = atoi(p + 1);
        if (n == max)
            return max + 1;
        size[n++] = (unsigned char)(bits / 8);
    }
    return n;
}

/* Each entry of the kernel table appears in image as ".entry NAME(" (PTX)
 * or as a symbol string (CUBIN). */
static void expect_entries(const char *image, size_t size, int ptx,
                           const char *what)
{
    size_t n = 0;
    const char *const *names = sw__cuda_kernel_names(&n);
    for (size_t i = 0; i < n; i++) {
        char want[64];
        snprintf(want, sizeof want, ptx ? ".entry %s(" : "%s", names[i]);
        if (memmem(image, size, want, strlen(want)) == NULL)
            FAIL("%s has no %s'%s'", what, ptx ? "" : "symbol ", want);
    }
}

TEST(cuda_nvrtc_ptx)
{
    int major = 0, minor = 0;
    require_nvrtc(&major, &minor);
    ASSERT_GT(major, 0);
    static const int ccs[][2] = {{8, 0}, {9, 0}};
    for (size_t c = 0; c < 2; c++) {
        char *ptx = NULL;
        size_t size = 0;
        char log[4096];
        int rc = sw__cuda_compile(ccs[c][0], ccs[c][1], 0, &ptx, &size, log,
                                  sizeof log);
        if (rc != SW_OK)
            FAIL("NVRTC %d.%d, compute_%d%d: %s -> %s\nlog: %s", major, minor,
                 ccs[c][0], ccs[c][1], sw_err_name(rc), sw_last_error(), log);
        ASSERT_NOT_NULL(ptx);
        ASSERT_UGT(size, 0);
        ASSERT_UEQ(strlen(ptx) + 1, size); /* PTX is text with its NUL */
        char target[32];
        snprintf(target, sizeof target, ".target sm_%d%d", ccs[c][0],
                 ccs[c][1]);
        ASSERT_STR_CONTAINS(ptx, target);
        ASSERT_STR_CONTAINS(ptx, ".version ");
        ASSERT_STR_CONTAINS(ptx, ".address_size 64");
        char what[64];
        snprintf(what, sizeof what, "PTX for compute_%d%d", ccs[c][0],
                 ccs[c][1]);
        expect_entries(ptx, size, 1, what);
        /* Each kernel's parameters are what the backend passes it. */
        size_t nk = 0;
        const char *const *names = sw__cuda_kernel_names(&nk);
        for (size_t k = 0; k < nk; k++) {
            size_t nhost = 0;
            const unsigned char *host = sw__cuda_kernel_params(k, &nhost);
            unsigned char dev[8] = {0};
            int ndev = ptx_params(ptx, names[k], dev, 8);
            ASSERT_NOT_NULL(host);
            if (ndev != (int)nhost || memcmp(dev, host, nhost) != 0)
                FAIL("%s: %s takes %d parameters (%d, %d, %d, %d, %d "
                     "bytes) in the PTX; the backend passes %zu (%d, %d, "
                     "%d, %d, %d)",
                     what, names[k], ndev, dev[0], dev[1], dev[2], dev[3],
                     dev[4], nhost, host[0], host[1], nhost > 2 ? host[2] : 0,
                     nhost > 3 ? host[3] : 0, nhost > 4 ? host[4] : 0);
        }
        size_t past = 0;
        ASSERT_NULL(sw__cuda_kernel_params(nk, &past));
        /* --fmad=false: a*x + y rounds twice, as the host's reference
         * does, so AXPY results are the same bits. */
        if (strstr(ptx, "fma.rn.f32") != NULL ||
            strstr(ptx, "fma.rn.f64") != NULL)
            FAIL("%s contracts a multiply-add into an FMA", what);
        ASSERT_STR_CONTAINS(ptx, "mul.rn.f32");
        ASSERT_STR_CONTAINS(ptx, "add.rn.f32");
        /* The sums reduce through shared memory with barriers. */
        ASSERT_STR_CONTAINS(ptx, ".shared");
        ASSERT_STR_CONTAINS(ptx, "bar.sync");
        free(ptx);
    }
}

TEST(cuda_nvrtc_cubin)
{
    int major = 0, minor = 0;
    require_nvrtc(&major, &minor);
    static const int ccs[][2] = {{8, 0}, {9, 0}};
    for (size_t c = 0; c < 2; c++) {
        char *bin = NULL;
        size_t size = 0;
        int rc = sw__cuda_compile(ccs[c][0], ccs[c][1], 1, &bin, &size, NULL,
                                  0);
        if (rc == SW_ERR_UNSUPPORTED)
            SKIP("%s", sw_last_error()); /* an NVRTC without CUBINs */
        if (rc != SW_OK)
            FAIL("CUBIN sm_%d%d: %s -> %s", ccs[c][0], ccs[c][1],
                 sw_err_name(rc), sw_last_error());
        ASSERT_UGT(size, 64);
        /* An ELF image for the CUDA machine (EM_CUDA = 190). */
        ASSERT_EQ(memcmp(bin, "\177ELF", 4), 0);
        ASSERT_EQ((unsigned char)bin[4], 2); /* ELFCLASS64 */
        unsigned machine = (unsigned char)bin[18] |
                           (unsigned)(unsigned char)bin[19] << 8;
        ASSERT_EQ(machine, 190);
        char what[64];
        snprintf(what, sizeof what, "CUBIN for sm_%d%d", ccs[c][0],
                 ccs[c][1]);
        expect_entries(bin, size, 0, what);
        free(bin);
    }
}

TEST(cuda_nvrtc_errors)
{
    require_nvrtc(NULL, NULL);
    char *image = (char *)(uintptr_t)1;
    size_t size = 99;
    char log[4096];
    const char *bad = "extern \"C\" __global__ void k(float *x)\n"
                      "{ x[0] = undeclared_name; }\n";
    ASSERT_ERR(sw__cuda_compile_source(bad, 9, 0, 0, &image, &size, log,
                                       sizeof log),
               SW_ERR_DEVICE);
    ASSERT_NULL(image);
    ASSERT_UEQ(size, 0);
    ASSERT_STR_CONTAINS(sw_last_error(), "NVRTC");
    ASSERT_STR_CONTAINS(sw_last_error(), "compute_90");
    ASSERT_STR_CONTAINS(log, "undeclared_name");
    ASSERT_STR_ICONTAINS(log, "error");
    /* Bad arguments are refused before NVRTC sees them. */
    ASSERT_ERR(sw__cuda_compile_source("", 9, 0, 0, &image, &size, NULL, 0),
               SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw__cuda_compile_source(bad, 0, 0, 0, &image, &size, NULL, 0),
               SW_ERR_INVALID_ARG);
    /* A good program still compiles afterwards. */
    const char *good = "extern \"C\" __global__ void k(float *x)\n"
                       "{ x[threadIdx.x] = 1.0f; }\n";
    ASSERT_OK(sw__cuda_compile_source(good, 9, 0, 0, &image, &size, NULL, 0));
    ASSERT_NOT_NULL(strstr(image, ".entry k("));
    free(image);
}

TEST(cuda_nvrtc_missing)
{
    /* An NVRTC that cannot be loaded: kernels cannot be compiled, and the
     * message says why (a launch on a GPU reports the same). */
    setenv("SPILLWAY_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so.99", 1);
    char why[512] = "";
    ASSERT_EQ(sw__cuda_nvrtc_load(why, sizeof why, NULL, NULL),
              SW_ERR_UNSUPPORTED);
    ASSERT_STR_CONTAINS(why, "SPILLWAY_NVRTC_LIBRARY");
    ASSERT_STR_CONTAINS(why, "/nonexistent/libnvrtc.so.99");
    char *image = NULL;
    size_t size = 0;
    ASSERT_ERR(sw__cuda_compile(9, 0, 0, &image, &size, NULL, 0),
               SW_ERR_UNSUPPORTED);
    ASSERT_NULL(image);
    ASSERT_STR_CONTAINS(sw_last_error(), "cannot compile");
}

TEST(cuda_pick_arch)
{
    static const int archs[] = {75, 80, 86, 87, 89, 90, 100, 120};
    int n = (int)(sizeof archs / sizeof archs[0]), arch = 0, cubin = -1;
    /* Known: the device's own CUBIN. */
    ASSERT_EQ(sw__cuda_pick_arch(90, archs, n, &arch, &cubin), 0);
    ASSERT_EQ(arch, 90);
    ASSERT_EQ(cubin, 1);
    ASSERT_EQ(sw__cuda_pick_arch(75, archs, n, &arch, &cubin), 0);
    ASSERT_EQ(arch, 75);
    ASSERT_EQ(cubin, 1);
    /* Newer than NVRTC knows: PTX of the newest below, JIT-compiled. */
    ASSERT_EQ(sw__cuda_pick_arch(121, archs, n, &arch, &cubin), 0);
    ASSERT_EQ(arch, 120);
    ASSERT_EQ(cubin, 0);
    ASSERT_EQ(sw__cuda_pick_arch(91, archs, n, &arch, &cubin), 0);
    ASSERT_EQ(arch, 90);
    ASSERT_EQ(cubin, 0);
    /* Older than NVRTC supports: nothing runs there. */
    ASSERT_EQ(sw__cuda_pick_arch(70, archs, n, &arch, &cubin), -1);
    /* An NVRTC that cannot list: the device's own, as PTX. */
    ASSERT_EQ(sw__cuda_pick_arch(86, NULL, 0, &arch, &cubin), 0);
    ASSERT_EQ(arch, 86);
    ASSERT_EQ(cubin, 0);
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
 * ---------------------------------------------------------------------- */

static void use_fake_driver(void)
{
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
    ASSERT_OK(sw__cuda_pool_usage(0, &reserved, &used));
    ASSERT_UEQ(reserved, used);
    ASSERT_ULT(used, 64 * 1024); /* scratch and partial sums only */
    ASSERT_NULL(sw__cuda_thread_context());
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
