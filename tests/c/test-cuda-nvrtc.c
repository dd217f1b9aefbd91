/*
 * test-cuda-nvrtc.c -- the CUDA backend's built-in kernels and their
 * compiler, NVRTC (src/backend/cuda_nvrtc.c, kernels/cuda.cu); no GPU
 * needed.
 *
 * Three compilers are met here.  A real NVRTC (libnvrtc, where installed:
 * the cuda_nvrtc_* tests, which skip, saying why, on a machine without
 * one or when $SPILLWAY_NVRTC_LIBRARY names the stand-in): PTX and CUBINs
 * with every entry, the parameters the backend passes, no FMA.  nvcc,
 * where the build found the toolkit (cuda_nvcc_ptx): the same checks on
 * the PTX it made of cuda.cu at build time, which needs no NVRTC.  And the
 * CPU stand-in for NVRTC (tests/cuda/fake_libnvrtc.c, the cuda_fake_nvrtc_*
 * tests), which every suite on the stand-in for the driver uses whatever
 * the machine has: its images, its checks and its errors.
 *
 * Each test runs in a fresh process, so setting SPILLWAY_NVRTC_LIBRARY
 * before the first compile decides what the loader sees.
 */
#include "test.h"
#include "tests.h"

#include "backend/cuda_api.h"
#include "backend/cuda_internal.h"

#include "../cuda/fake_nvrtc.h"

#include <dlfcn.h>
#include <unistd.h>

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

/* A symbol of the NVRTC library the backend loaded, or NULL. */
static void *loaded_nvrtc_symbol(const char *name)
{
    const char *path = sw__cuda_nvrtc_path();
    void *lib = path[0] ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    if (lib == NULL)
        return NULL;
    void *p = dlsym(lib, name);
    dlclose(lib);
    return p;
}

/* SKIP unless a real NVRTC is loaded: the stand-in makes no GPU code. */
static void require_real_nvrtc(int *major, int *minor)
{
    require_nvrtc(major, minor);
    if (loaded_nvrtc_symbol(FAKE_NVRTC_STATS) != NULL)
        SKIP("SPILLWAY_NVRTC_LIBRARY=%s is the CPU stand-in for NVRTC, "
             "which makes no GPU code: this checks a real NVRTC's (the c "
             "suite runs it wherever libnvrtc is installed)",
             sw__cuda_nvrtc_path());
}

void test_cuda_use_fake_nvrtc(void)
{
    if (SW_FAKE_LIBNVRTC[0] == '\0')
        SKIP("this build has no fake NVRTC");
    if (access(SW_FAKE_LIBNVRTC, R_OK) != 0)
        SKIP("the fake NVRTC %s was not built", SW_FAKE_LIBNVRTC);
    setenv("SPILLWAY_NVRTC_LIBRARY", SW_FAKE_LIBNVRTC, 1);
}

/* The stand-in, loaded: a FAIL if it does not load (it was built). */
static void load_fake_nvrtc(int *major, int *minor)
{
    test_cuda_use_fake_nvrtc();
    char why[512];
    if (sw__cuda_nvrtc_load(why, sizeof why, major, minor) != SW_OK)
        FAIL("the fake NVRTC %s does not load: %s", SW_FAKE_LIBNVRTC, why);
    ASSERT_STR_EQ(sw__cuda_nvrtc_path(), SW_FAKE_LIBNVRTC);
}

fake_nvrtc_stats_t test_cuda_fake_nvrtc_stats(void)
{
    fake_nvrtc_stats_t st;
    memset(&st, 0, sizeof st);
    void *lib = dlopen(SW_FAKE_LIBNVRTC, RTLD_NOW | RTLD_NOLOAD);
    if (lib == NULL)
        FAIL("the fake NVRTC is not loaded: %s", dlerror());
    void *p = dlsym(lib, FAKE_NVRTC_STATS);
    dlclose(lib);
    if (p == NULL)
        FAIL("the fake NVRTC lacks %s", FAKE_NVRTC_STATS);
    void (*fn)(fake_nvrtc_stats_t *);
    memcpy(&fn, &p, sizeof p);
    fn(&st);
    return st;
}

/* ------------------------------------------------------------------------
 * The kernel source
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

/* What every compiler must make of cuda.cu, as PTX for compute_<arch>:
 * the header, an entry per kernel of the backend's table, and each
 * kernel's parameters what the backend passes it. */
static void check_ptx_interface(const char *ptx, size_t size, int arch,
                                const char *what)
{
    char target[32];
    snprintf(target, sizeof target, ".target sm_%d", arch);
    ASSERT_STR_CONTAINS(ptx, target);
    ASSERT_STR_CONTAINS(ptx, ".version ");
    ASSERT_STR_CONTAINS(ptx, ".address_size 64");
    expect_entries(ptx, size, 1, what);
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
}

/* What a real compiler's code must be (nvcc's or NVRTC's). */
static void check_ptx_code(const char *ptx, const char *what)
{
    /* --fmad=false: a*x + y rounds twice, as the host's reference does,
     * so AXPY results are the same bits. */
    if (strstr(ptx, "fma.rn.f32") != NULL || strstr(ptx, "fma.rn.f64") != NULL)
        FAIL("%s contracts a multiply-add into an FMA", what);
    ASSERT_STR_CONTAINS(ptx, "mul.rn.f32");
    ASSERT_STR_CONTAINS(ptx, "add.rn.f32");
    /* The sums reduce through shared memory with barriers. */
    ASSERT_STR_CONTAINS(ptx, ".shared");
    ASSERT_STR_CONTAINS(ptx, "bar.sync");
}

/* A CUBIN for sm_<arch>: an ELF image for the CUDA machine with every
 * kernel's name. */
static void check_cubin(const char *bin, size_t size, const char *what)
{
    ASSERT_UGT(size, 64);
    ASSERT_EQ(memcmp(bin, "\177ELF", 4), 0);
    ASSERT_EQ((unsigned char)bin[4], 2); /* ELFCLASS64 */
    unsigned machine = (unsigned char)bin[18] |
                       (unsigned)(unsigned char)bin[19] << 8;
    ASSERT_EQ(machine, 190); /* EM_CUDA */
    expect_entries(bin, size, 0, what);
}

/* ------------------------------------------------------------------------
 * A real NVRTC (skipped without one)
 * ---------------------------------------------------------------------- */

TEST(cuda_nvrtc_ptx)
{
    int major = 0, minor = 0;
    require_real_nvrtc(&major, &minor);
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
        char what[64];
        snprintf(what, sizeof what, "PTX for compute_%d%d", ccs[c][0],
                 ccs[c][1]);
        check_ptx_interface(ptx, size, ccs[c][0] * 10 + ccs[c][1], what);
        check_ptx_code(ptx, what);
        free(ptx);
    }
}

TEST(cuda_nvrtc_cubin)
{
    int major = 0, minor = 0;
    require_real_nvrtc(&major, &minor);
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
        char what[64];
        snprintf(what, sizeof what, "CUBIN for sm_%d%d", ccs[c][0],
                 ccs[c][1]);
        check_cubin(bin, size, what);
        free(bin);
    }
}

TEST(cuda_nvrtc_errors)
{
    require_real_nvrtc(NULL, NULL);
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


/* ------------------------------------------------------------------------
 * nvcc's PTX, made at build time (src/backend/kernels/meson.build)
 * ---------------------------------------------------------------------- */

TEST(cuda_nvcc_ptx)
{
    /* The checks of cuda_nvrtc_ptx on what nvcc made of cuda.cu with the
     * backend's flags (--fmad=false, compute_80): a machine with the
     * toolkit's compiler and no NVRTC still checks the backend's kernel
     * tables against a real compiler. */
#ifdef SW_NVCC_PTX
    FILE *f = fopen(SW_NVCC_PTX, "rb");
    if (f == NULL)
        SKIP("%s was not built (ninja builds it by default)", SW_NVCC_PTX);
    ASSERT_EQ(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    ASSERT_GT(n, 1000);
    rewind(f);
    char *ptx = malloc((size_t)n + 1);
    ASSERT_NOT_NULL(ptx);
    ASSERT_UEQ(fread(ptx, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    ptx[n] = '\0';
    ASSERT_STR_CONTAINS(ptx, "NVVM"); /* nvcc's, not the stand-in's */
    check_ptx_interface(ptx, (size_t)n, 80, "nvcc's PTX for compute_80");
    check_ptx_code(ptx, "nvcc's PTX for compute_80");
    free(ptx);
#else
    SKIP("nvcc did not compile kernels/cuda.cu in this build (no CUDA "
         "toolkit found, -Dnvcc_check=disabled, or an nvcc that cannot "
         "compile here: meson's log says which)");
#endif
}

/* ------------------------------------------------------------------------
 * The CPU stand-in for NVRTC (tests/cuda/fake_libnvrtc.c)
 * ---------------------------------------------------------------------- */

TEST(cuda_fake_nvrtc_images)
{
    /* What the suites on the stand-in for the driver load: PTX with every
     * entry and its parameters (which the backend's tables must match, as
     * they match a real compiler's), a CUBIN for an sm_ target, and the
     * architectures a real NVRTC 13.0 lists. */
    int major = 0, minor = 0;
    load_fake_nvrtc(&major, &minor);
    ASSERT_EQ(major, 13);
    int archs[64];
    int na = sw__cuda_nvrtc_archs(archs, 64);
    ASSERT_GT(na, 5);
    int has90 = 0;
    for (int i = 0; i < na; i++)
        has90 |= archs[i] == 90;
    ASSERT_TRUE(has90);
    static const int ccs[][2] = {{8, 0}, {9, 0}};
    for (size_t c = 0; c < 2; c++) {
        char *ptx = NULL;
        size_t size = 0;
        char log[512];
        int rc = sw__cuda_compile(ccs[c][0], ccs[c][1], 0, &ptx, &size, log,
                                  sizeof log);
        if (rc != SW_OK)
            FAIL("compute_%d%d: %s -> %s\nlog: %s", ccs[c][0], ccs[c][1],
                 sw_err_name(rc), sw_last_error(), log);
        ASSERT_UEQ(strlen(ptx) + 1, size);
        ASSERT_STR_CONTAINS(ptx, FAKE_NVRTC_BANNER);
        ASSERT_STR_EQ(log, "");
        char what[64];
        snprintf(what, sizeof what, "the stand-in's PTX for compute_%d%d",
                 ccs[c][0], ccs[c][1]);
        check_ptx_interface(ptx, size, ccs[c][0] * 10 + ccs[c][1], what);
        free(ptx);
    }
    char *bin = NULL;
    size_t size = 0;
    ASSERT_OK(sw__cuda_compile(9, 0, 1, &bin, &size, NULL, 0));
    check_cubin(bin, size, "the stand-in's CUBIN for sm_90");
    free(bin);
    size_t nk = 0;
    (void)sw__cuda_kernel_names(&nk);
    fake_nvrtc_stats_t st = test_cuda_fake_nvrtc_stats();
    ASSERT_EQ(st.compiles, 3);
    ASSERT_EQ(st.failures, 0);
    ASSERT_EQ(st.live, 0); /* every program destroyed */
    ASSERT_EQ(st.last_arch, 90);
    ASSERT_EQ(st.last_cubin, 1);
    ASSERT_EQ(st.last_kernels, (int)nk);
}

/* Compile src for compute_90 through the backend: the code, and the
 * first line of the log in log. */
static int fake_compile(const char *src, char *log, size_t len)
{
    char *image = (char *)(uintptr_t)1;
    size_t size = 99;
    int rc = sw__cuda_compile_source(src, 9, 0, 0, &image, &size, log, len);
    if (rc != SW_OK) {
        ASSERT_NULL(image);
        ASSERT_UEQ(size, 0);
    } else {
        free(image);
    }
    return rc;
}

/* nvrtcCompileProgram with these options, called directly: the result,
 * and the log in log. */
static swnv_result fake_options(int n, const char *const *opts, char *log,
                                size_t len)
{
    void *lib = dlopen(SW_FAKE_LIBNVRTC, RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NOT_NULL(lib);
    swcu_nvrtcCreateProgram_fn create;
    swcu_nvrtcCompileProgram_fn compile;
    swcu_nvrtcGetProgramLogSize_fn logsize;
    swcu_nvrtcGetProgramLog_fn getlog;
    swcu_nvrtcDestroyProgram_fn destroy;
    void *p;
#define FAKE_SYM(var, name)                                                   \
    p = dlsym(lib, name);                                                     \
    ASSERT_NOT_NULL(p);                                                       \
    memcpy(&var, &p, sizeof p);
    FAKE_SYM(create, "nvrtcCreateProgram")
    FAKE_SYM(compile, "nvrtcCompileProgram")
    FAKE_SYM(logsize, "nvrtcGetProgramLogSize")
    FAKE_SYM(getlog, "nvrtcGetProgramLog")
    FAKE_SYM(destroy, "nvrtcDestroyProgram")
#undef FAKE_SYM
    dlclose(lib);
    swnv_program prog = NULL;
    ASSERT_EQ(create(&prog, "extern \"C\" __global__ void k(float *x) {}\n",
                     "opts.cu", 0, NULL, NULL),
              0);
    swnv_result r = compile(prog, n, opts);
    size_t ls = 0;
    ASSERT_EQ(logsize(prog, &ls), 0);
    ASSERT_ULE(ls, len);
    ASSERT_EQ(getlog(prog, log), 0);
    ASSERT_EQ(destroy(&prog), 0);
    ASSERT_NULL(prog);
    return r;
}

TEST(cuda_fake_nvrtc_errors)
{
    /* The stand-in fails what NVRTC would fail, or what it cannot read,
     * with the reason in the log and the backend's one-line message. */
    load_fake_nvrtc(NULL, NULL);
    char log[1024];
    static const struct {
        const char *src, *log;
    } bad[] = {
        {"#error the kernels need a newer toolkit\n",
         "(1): error: #error directive: the kernels need a newer toolkit"},
        {"\n#include <cuda_fp16.h>\n", "(2): error: cannot open source file"},
        {"typedef unsigned int u32;\n"
         "extern \"C\" __global__ void k(float2 v, u32 n) {}\n",
         "does not know the size of parameter type \"float2\" of k"},
        {"#define K(S, T) \\\n"
         "extern \"C\" __global__ void k_##S(T *out) {}\n"
         "K(f32)\n",
         "(3): error: macro \"K\" takes 2 arguments, given 1"},
        {"extern \"C\" __global__ void k(int n) {}\n"
         "/* a comment\n   over lines */\n"
         "extern \"C\" __global__ void k(int n) {}\n",
         "(4): error: function \"k\" has already been defined"},
        {"#if SW_FAST\n#endif\n", "evaluates only #if 0 and #if 1"},
        {"#ifdef X\n", "expected an #endif"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        log[0] = '\0';
        int rc = fake_compile(bad[i].src, log, sizeof log);
        if (rc != SW_ERR_DEVICE || strstr(log, bad[i].log) == NULL)
            FAIL("program %zu: %s, log \"%s\"; expected the log to say "
                 "\"%s\"", i, sw_err_name(rc), log, bad[i].log);
        ASSERT_STR_CONTAINS(sw_last_error(), "NVRTC 13.0");
        ASSERT_STR_CONTAINS(sw_last_error(), "compute_90");
        ASSERT_STR_CONTAINS(sw_last_error(), "NVRTC_ERROR_COMPILATION");
        ASSERT_STR_CONTAINS(log, "spillway_kernels.cu(");
    }

    /* The options: exactly an architecture it lists and --fmad=false. */
    const char *no_fmad[] = {"--gpu-architecture=compute_90"};
    ASSERT_EQ(fake_options(1, no_fmad, log, sizeof log), 5);
    ASSERT_STR_CONTAINS(log, "--fmad=false missing");
    const char *no_arch[] = {"--fmad=false"};
    ASSERT_EQ(fake_options(1, no_arch, log, sizeof log), 5);
    ASSERT_STR_CONTAINS(log, "no --gpu-architecture");
    const char *old[] = {"--gpu-architecture=sm_70", "--fmad=false"};
    ASSERT_EQ(fake_options(2, old, log, sizeof log), 5);
    ASSERT_STR_CONTAINS(log, "invalid value for --gpu-architecture");
    const char *extra[] = {"--gpu-architecture=compute_90", "--fmad=false",
                           "-lineinfo"};
    ASSERT_EQ(fake_options(3, extra, log, sizeof log), 5);
    ASSERT_STR_CONTAINS(log, "unrecognized option -lineinfo");
    const char *good[] = {"--fmad=false", "--gpu-architecture=sm_80"};
    ASSERT_EQ(fake_options(2, good, log, sizeof log), 0);
    ASSERT_STR_EQ(log, "");

    /* What it reads: macros (## pasted, nested, an argument itself a
     * macro's name), typedefs, conditionals, comments, continuations. */
    const char *src =
        "typedef unsigned long long u64; /* 8 bytes */\n"
        "typedef u64 size_type;\n"
        "#ifndef WIDE\n#define WIDE 0\n#else\n#error not this one\n#endif\n"
        "#if 0\n#error nor this\n#endif\n"
        "#define SAME(x) (x)\n"
        "#define OP(S, T, F) \\\n"
        "extern \"C\" __global__ void k_##S(T *out, const T *a, T alpha, \\\n"
        "                                   size_type n) \\\n"
        "{ out[0] = F(a[0]) * alpha; }\n"
        "#define BOTH(S1, S2) OP(S1, float, SAME) OP(S2, double, SAME)\n"
        "BOTH(f32, f64)\n"
        "// extern \"C\" __global__ void commented_out(int n) {}\n"
        "extern \"C\" __global__ void k_bytes(unsigned char *d, short s,\n"
        "                                     unsigned int) {}\n"
        "extern \"C\" __global__ void k_none(void) {}\n";
    char *ptx = NULL;
    size_t size = 0;
    ASSERT_OK(sw__cuda_compile_source(src, 9, 0, 0, &ptx, &size, log,
                                      sizeof log));
    static const struct {
        const char *name;
        int n;
        unsigned char bytes[4];
    } want[] = {
        {"k_f32", 4, {8, 8, 4, 8}},
        {"k_f64", 4, {8, 8, 8, 8}},
        {"k_bytes", 3, {8, 2, 4}},
        {"k_none", 0, {0}},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        unsigned char got[8] = {0};
        int n = ptx_params(ptx, want[i].name, got, 8);
        if (n != want[i].n || memcmp(got, want[i].bytes, (size_t)n) != 0)
            FAIL("%s: %d parameters (%d, %d, %d, %d bytes) in\n%s",
                 want[i].name, n, got[0], got[1], got[2], got[3], ptx);
    }
    ASSERT_STR_CONTAINS(ptx, ".param .f32 k_f32_param_2");
    ASSERT_STR_CONTAINS(ptx, ".param .f64 k_f64_param_2");
    ASSERT_NULL(strstr(ptx, "commented_out"));
    free(ptx);

    fake_nvrtc_stats_t st = test_cuda_fake_nvrtc_stats();
    ASSERT_EQ(st.failures, sizeof bad / sizeof bad[0] + 4);
    ASSERT_EQ(st.live, 0);
}

/* ------------------------------------------------------------------------
 * Architectures
 * ---------------------------------------------------------------------- */

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
