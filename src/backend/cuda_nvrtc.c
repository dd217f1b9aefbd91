/*
 * cuda_nvrtc.c -- the CUDA backend's kernel compiler: NVRTC loaded at run
 * time (like the driver, nothing CUDA is needed to build this file), the
 * built-in kernels' source (src/backend/kernels/cuda.cu, embedded at build
 * time) compiled for a device's architecture, and the compiled images,
 * kept once per (architecture, format) per process.
 *
 * cuda.c loads the images into each device (cuModuleLoadData) and looks
 * up and launches the kernels; the tests (tests/c/test-cuda-nvrtc.c)
 * compile through the sw__cuda_* entry points of cuda_internal.h without a
 * GPU, with a real NVRTC or the CPU stand-in (tests/cuda/fake_libnvrtc.c,
 * which every suite on the stand-in for the driver loads through
 * SPILLWAY_NVRTC_LIBRARY).
 *
 * Threads: the loader runs once (pthread_once); the image cache has a leaf
 * mutex, held while compiling so that two devices of one kind do not
 * compile the same thing twice.  The rest is reentrant.
 */
#include "backend.h"
#include "cuda_api.h"
#include "cuda_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA__MAX_IMAGES 16 /* compiled (arch, format) pairs kept */

/* ------------------------------------------------------------------------
 * The built-in kernels' source
 * ---------------------------------------------------------------------- */

#include "backend/kernels/cuda_cu.h"

const char *sw__cuda_kernel_source(void) { return sw__cuda_kernels_cu; }

/* ------------------------------------------------------------------------
 * NVRTC: loaded once per process, on first compile
 * ---------------------------------------------------------------------- */

typedef struct cuda__nvrtc_lib {
    void *lib;
    swcu_nvrtc api;
    int major, minor;
    char path[256];
    char why[512];
} cuda__nvrtc_lib;

static cuda__nvrtc_lib cuda__nv;
static pthread_once_t cuda__nv_once = PTHREAD_ONCE_INIT;

#define NV(fn) (cuda__nv.api.fn)

/* Returns 1 when name loaded with every required entry point. */
static int cuda__nv_try(const char *name)
{
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        return 0;
    swcu_nvrtc api;
    memset(&api, 0, sizeof api);
    int ok = 1;
#define CUDA__NV_RESOLVE(kind, ret, fname, params)                            \
    if ((kind) != 2) {                                                        \
        void *p = dlsym(lib, #fname);                                         \
        if (p == NULL && (kind) == 1)                                         \
            ok = 0;                                                           \
        memcpy(&api.fname, &p, sizeof p);                                     \
    }
    SWCU_NVRTC_FUNCS(CUDA__NV_RESOLVE)
#undef CUDA__NV_RESOLVE
    if (!ok) {
        dlclose(lib);
        return 0;
    }
    cuda__nv.lib = lib;
    cuda__nv.api = api;
    snprintf(cuda__nv.path, sizeof cuda__nv.path, "%s", name);
    if (api.nvrtcVersion(&cuda__nv.major, &cuda__nv.minor) != 0)
        cuda__nv.major = cuda__nv.minor = 0;
    return 1;
}

static void cuda__nv_load(void)
{
    /* The driver first: an NVRTC of the driver's major version produces
     * code the driver can load, so it is tried first. */
    int driver = sw__cuda_driver_version();
    char names[16][300];
    int n = 0;
    const char *env = getenv("SPILLWAY_NVRTC_LIBRARY");
    if (env != NULL && env[0] != '\0') {
        dlerror();
        if (cuda__nv_try(env))
            return;
        const char *e = dlerror();
        snprintf(cuda__nv.why, sizeof cuda__nv.why, "SPILLWAY_NVRTC_LIBRARY"
                 "=%.200s cannot be loaded: %.200s", env,
                 e ? e : "a required entry point is missing");
        return;
    }
    if (driver >= 11000)
        snprintf(names[n++], sizeof names[0], "libnvrtc.so.%d",
                 driver / 1000);
    static const char *const sonames[] = {"libnvrtc.so.13", "libnvrtc.so.12",
                                          "libnvrtc.so.11.2", "libnvrtc.so"};
    for (size_t i = 0; i < sizeof sonames / sizeof sonames[0]; i++)
        snprintf(names[n++], sizeof names[0], "%s", sonames[i]);
    const char *homes[3] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"),
                            "/usr/local/cuda"};
    for (int i = 0; i < 3 && n + 2 <= 16; i++) {
        if (homes[i] == NULL || homes[i][0] == '\0' || strlen(homes[i]) > 200)
            continue;
        snprintf(names[n++], sizeof names[0], "%s/lib64/libnvrtc.so",
                 homes[i]);
        snprintf(names[n++], sizeof names[0], "%s/lib/libnvrtc.so", homes[i]);
    }
    for (int i = 0; i < n; i++)
        if (cuda__nv_try(names[i]))
            return;
    snprintf(cuda__nv.why, sizeof cuda__nv.why, "libnvrtc not found (tried "
             "libnvrtc.so.13, .so.12, .so.11.2, .so and under $CUDA_HOME, "
             "$CUDA_PATH, /usr/local/cuda): install the CUDA toolkit's "
             "NVRTC or set SPILLWAY_NVRTC_LIBRARY");
}

int sw__cuda_nvrtc_load(char *why, size_t why_len, int *major, int *minor)
{
    pthread_once(&cuda__nv_once, cuda__nv_load);
    if (major)
        *major = cuda__nv.major;
    if (minor)
        *minor = cuda__nv.minor;
    if (cuda__nv.lib == NULL) {
        if (why != NULL && why_len > 0)
            snprintf(why, why_len, "%s", cuda__nv.why);
        return SW_ERR_UNSUPPORTED;
    }
    if (why != NULL && why_len > 0)
        snprintf(why, why_len, "%s", "");
    return SW_OK;
}

const char *sw__cuda_nvrtc_path(void)
{
    pthread_once(&cuda__nv_once, cuda__nv_load);
    return cuda__nv.path;
}

int sw__cuda_nvrtc_archs(int *archs, int max)
{
    pthread_once(&cuda__nv_once, cuda__nv_load);
    int n = 0;
    if (cuda__nv.lib == NULL || NV(nvrtcGetNumSupportedArchs) == NULL ||
        NV(nvrtcGetSupportedArchs) == NULL ||
        NV(nvrtcGetNumSupportedArchs)(&n) != SWCU_NVRTC_SUCCESS || n <= 0 ||
        n > max || NV(nvrtcGetSupportedArchs)(archs) != SWCU_NVRTC_SUCCESS)
        return 0;
    return n;
}

/* ------------------------------------------------------------------------
 * Compiling with NVRTC
 * ---------------------------------------------------------------------- */

int sw__cuda_pick_arch(int devarch, const int *archs, int n, int *arch,
                       int *cubin)
{
    if (n <= 0) {
        /* An NVRTC that cannot list its targets: ask for the device's own
         * architecture as PTX, and let the compile say if it cannot. */
        *arch = devarch;
        *cubin = 0;
        return 0;
    }
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (archs[i] == devarch) {
            *arch = devarch;
            *cubin = 1;
            return 0;
        }
        if (archs[i] < devarch && archs[i] > best)
            best = archs[i];
    }
    if (best < 0)
        return -1;
    *arch = best; /* PTX of an older architecture runs on newer devices */
    *cubin = 0;
    return 0;
}

/* The first line of a compile log, for a one-line message. */
static void cuda__first_line(const char *log, char *out, size_t len)
{
    size_t n = strcspn(log, "\n");
    if (n >= len)
        n = len - 1;
    memcpy(out, log, n);
    out[n] = '\0';
}

int sw__cuda_compile_source(const char *src, int major, int minor, int cubin,
                            char **image, size_t *size, char *log,
                            size_t log_len)
{
    *image = NULL;
    *size = 0;
    if (log != NULL && log_len > 0)
        log[0] = '\0';
    char why[512];
    if (sw__cuda_nvrtc_load(why, sizeof why, NULL, NULL) != SW_OK)
        return sw__errorf(SW_ERR_UNSUPPORTED, "cannot compile CUDA kernels: "
                          "%s", why);
    if (src == NULL || src[0] == '\0')
        return sw__errorf(SW_ERR_INVALID_ARG, "no CUDA source to compile");
    if (major < 1 || major > 99 || minor < 0 || minor > 9)
        return sw__errorf(SW_ERR_INVALID_ARG, "compute capability %d.%d is "
                          "not one", major, minor);
    if (cubin && (NV(nvrtcGetCUBINSize) == NULL || NV(nvrtcGetCUBIN) == NULL))
        return sw__errorf(SW_ERR_UNSUPPORTED, "NVRTC %d.%d (%s) cannot "
                          "produce CUBINs", cuda__nv.major, cuda__nv.minor,
                          cuda__nv.path);

    char arch[48];
    snprintf(arch, sizeof arch, "--gpu-architecture=%s_%d%d",
             cubin ? "sm" : "compute", major, minor);
    const char *opts[] = {arch, "--fmad=false"};
    swnv_program prog = NULL;
    swnv_result r = NV(nvrtcCreateProgram)(&prog, src, "spillway_kernels.cu",
                                           0, NULL, NULL);
    if (r != SWCU_NVRTC_SUCCESS)
        return sw__errorf(r == 1 ? SW_ERR_HOST_OOM : SW_ERR_DEVICE,
                          "nvrtcCreateProgram failed: %s",
                          NV(nvrtcGetErrorString)(r));
    r = NV(nvrtcCompileProgram)(prog, 2, opts);

    /* The log, on failure and success alike (warnings). */
    size_t lsize = 0;
    char *full = NULL;
    if (NV(nvrtcGetProgramLogSize)(prog, &lsize) == SWCU_NVRTC_SUCCESS &&
        lsize > 1 && (full = sw__malloc(lsize)) != NULL &&
        NV(nvrtcGetProgramLog)(prog, full) != SWCU_NVRTC_SUCCESS)
        full[0] = '\0';
    if (full != NULL && log != NULL && log_len > 0)
        snprintf(log, log_len, "%s", full);

    int rc = SW_OK;
    if (r != SWCU_NVRTC_SUCCESS) {
        char first[200] = "";
        if (full != NULL)
            cuda__first_line(full, first, sizeof first);
        rc = sw__errorf(SW_ERR_DEVICE, "NVRTC %d.%d: compiling for %s "
                        "--fmad=false failed: %s%s%s", cuda__nv.major,
                        cuda__nv.minor, arch + 2,
                        NV(nvrtcGetErrorString)(r), first[0] ? ": " : "",
                        first);
    } else {
        size_t n = 0;
        r = cubin ? NV(nvrtcGetCUBINSize)(prog, &n)
                  : NV(nvrtcGetPTXSize)(prog, &n);
        char *out =
            r == SWCU_NVRTC_SUCCESS && n > 0 ? sw__malloc(n + 1) : NULL;
        if (out == NULL) {
            rc = r != SWCU_NVRTC_SUCCESS
                     ? sw__errorf(SW_ERR_DEVICE, "NVRTC: getting the %s "
                                  "size failed: %s", cubin ? "CUBIN" : "PTX",
                                  NV(nvrtcGetErrorString)(r))
                     : sw__errorf(SW_ERR_HOST_OOM, "no host memory for "
                                  "%zu bytes of compiled kernels", n);
        } else {
            r = cubin ? NV(nvrtcGetCUBIN)(prog, out)
                      : NV(nvrtcGetPTX)(prog, out);
            if (r != SWCU_NVRTC_SUCCESS) {
                sw__free(out);
                rc = sw__errorf(SW_ERR_DEVICE, "NVRTC: getting the %s "
                                "failed: %s", cubin ? "CUBIN" : "PTX",
                                NV(nvrtcGetErrorString)(r));
            } else {
                out[n] = '\0'; /* PTX's own NUL is inside n already */
                *image = out;
                *size = n;
            }
        }
    }
    sw__free(full);
    (void)NV(nvrtcDestroyProgram)(&prog);
    return rc;
}

int sw__cuda_compile(int major, int minor, int cubin, char **image,
                     size_t *size, char *log, size_t log_len)
{
    const char *src = sw__cuda_kernel_source();
    return sw__cuda_compile_source(src, major, minor, cubin, image, size,
                                   log, log_len);
}

/* Compiled images, once per (architecture, format) per process: several
 * devices of one kind share them.  The mutex is a leaf, held while
 * compiling so that two devices do not compile the same thing. */
typedef struct cuda__image {
    int arch, cubin;
    char *data;
    size_t size;
} cuda__image;

static pthread_mutex_t cuda__images_mu = PTHREAD_MUTEX_INITIALIZER;
static cuda__image cuda__images[CUDA__MAX_IMAGES];
static int cuda__nimages;

int sw__cuda_image_get(int arch, int cubin, const char **image)
{
    pthread_mutex_lock(&cuda__images_mu);
    for (int i = 0; i < cuda__nimages; i++) {
        if (cuda__images[i].arch == arch && cuda__images[i].cubin == cubin) {
            *image = cuda__images[i].data;
            pthread_mutex_unlock(&cuda__images_mu);
            return SW_OK;
        }
    }
    char *data = NULL;
    size_t size = 0;
    int rc = sw__cuda_compile(arch / 10, arch % 10, cubin, &data, &size, NULL,
                              0);
    if (rc == SW_OK) {
        if (cuda__nimages == CUDA__MAX_IMAGES) {
            sw__free(data);
            rc = sw__errorf(SW_ERR_HOST_OOM, "too many kinds of CUDA device "
                            "in one process");
        } else {
            cuda__image *im = &cuda__images[cuda__nimages++];
            im->arch = arch;
            im->cubin = cubin;
            im->data = data;
            im->size = size;
            *image = im->data;
        }
    }
    pthread_mutex_unlock(&cuda__images_mu);
    return rc;
}

