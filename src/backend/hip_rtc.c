/*
 * hip_rtc.c -- the HIP backend's kernel compiler: hipRTC loaded at run
 * time (nothing ROCm is needed to build this file), the built-in kernels'
 * source compiled for a device's architecture, and the compiled code
 * objects, kept once per architecture per process.
 *
 * The source is the CUDA backend's (src/backend/kernels/cuda.cu, embedded
 * at build time; sw__cuda_kernel_source()): hipRTC compiles CUDA-style C++,
 * and one file means HIP gets every kernel the CUDA backend gets.  Options:
 * the device's gcnArchName ("--gpu-architecture=gfx90a:sramecc+:xnack-")
 * and -ffp-contract=off (a*x + y rounds twice, as on the host and as
 * NVRTC's --fmad=false makes it for CUDA).
 *
 * hip.c loads the code objects into each device (hipModuleLoadData) and
 * launches them; the tests compile through sw__hip_* of hip_internal.h
 * without a GPU.
 *
 * Threads: the loader runs once (pthread_once); the image cache has a leaf
 * mutex, held while compiling so that two devices of one architecture do
 * not compile the same thing twice.
 */
#include "backend.h"
#include "cuda_internal.h" /* sw__cuda_kernel_source */
#include "hip_api.h"
#include "hip_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HIP__MAX_IMAGES 16

/* ------------------------------------------------------------------------
 * hipRTC: loaded once per process, at the first compile
 * ---------------------------------------------------------------------- */

typedef struct hip__rtc_lib {
    void *lib;
    swhip_rtc api;
    int major, minor;
    char path[256];
    char why[512];
} hip__rtc_lib;

static hip__rtc_lib hip__rtc;
static pthread_once_t hip__rtc_once = PTHREAD_ONCE_INIT;

#define RTC(fn) (hip__rtc.api.fn)

/* 1 when name loaded with every required entry point. */
static int hip__rtc_try(const char *name)
{
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        return 0;
    swhip_rtc api;
    memset(&api, 0, sizeof api);
    int ok = 1;
#define HIP__RTC_RESOLVE(kind, ret, fname, params)                            \
    {                                                                         \
        void *p = dlsym(lib, #fname);                                         \
        if (p == NULL && (kind) == 1)                                         \
            ok = 0;                                                           \
        memcpy(&api.fname, &p, sizeof p);                                     \
    }
    SWHIP_RTC_FUNCS(HIP__RTC_RESOLVE)
#undef HIP__RTC_RESOLVE
    if (!ok) {
        dlclose(lib);
        return 0;
    }
    hip__rtc.lib = lib;
    hip__rtc.api = api;
    snprintf(hip__rtc.path, sizeof hip__rtc.path, "%s", name);
    if (api.hiprtcVersion == NULL ||
        api.hiprtcVersion(&hip__rtc.major, &hip__rtc.minor) != 0)
        hip__rtc.major = hip__rtc.minor = 0;
    return 1;
}

static void hip__rtc_load(void)
{
    const char *env = getenv("SPILLWAY_HIPRTC_LIBRARY");
    if (env != NULL && env[0] != '\0') {
        dlerror();
        if (hip__rtc_try(env))
            return;
        const char *e = dlerror();
        snprintf(hip__rtc.why, sizeof hip__rtc.why, "SPILLWAY_HIPRTC_LIBRARY"
                 "=%.200s cannot be loaded: %.200s", env,
                 e ? e : "a required hiprtc entry point is missing");
        return;
    }
    static const char *const names[] = {"libhiprtc.so", "libhiprtc.so.6",
                                        "libhiprtc.so.5"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (hip__rtc_try(names[i]))
            return;
    /* ROCm up to 5.2 has hipRTC inside the runtime. */
    const char *rt = sw__hip_runtime_path();
    if (rt[0] != '\0' && hip__rtc_try(rt))
        return;
    if (hip__rtc_try("/opt/rocm/lib/libhiprtc.so"))
        return;
    snprintf(hip__rtc.why, sizeof hip__rtc.why, "hipRTC not found (tried "
             "libhiprtc.so, .so.6, .so.5, the HIP runtime%s%s%s and "
             "/opt/rocm/lib): install ROCm's hipRTC or set "
             "SPILLWAY_HIPRTC_LIBRARY", rt[0] ? " (" : "", rt,
             rt[0] ? ")" : "");
}

int sw__hip_rtc_load(char *why, size_t why_len, int *major, int *minor)
{
    pthread_once(&hip__rtc_once, hip__rtc_load);
    if (major)
        *major = hip__rtc.major;
    if (minor)
        *minor = hip__rtc.minor;
    if (why != NULL && why_len > 0)
        snprintf(why, why_len, "%s", hip__rtc.lib ? "" : hip__rtc.why);
    return hip__rtc.lib != NULL ? SW_OK : SW_ERR_UNSUPPORTED;
}

const char *sw__hip_rtc_path(void)
{
    pthread_once(&hip__rtc_once, hip__rtc_load);
    return hip__rtc.path;
}

/* ------------------------------------------------------------------------
 * Compiling
 * ---------------------------------------------------------------------- */

int sw__hip_compile_options(const char *arch, const char **opts, char *buf,
                            size_t len)
{
    int n = 0;
    if (arch != NULL && arch[0] != '\0') {
        snprintf(buf, len, "--gpu-architecture=%s", arch);
        opts[n++] = buf;
    }
    opts[n++] = "-ffp-contract=off";
    opts[n++] = "-O3";
    return n;
}

static const char *hip__rtc_err(swhiprtc_result r)
{
    const char *s = RTC(hiprtcGetErrorString)(r);
    return s != NULL ? s : "unknown hipRTC error";
}

int sw__hip_compile_source(const char *src, const char *arch, char **image,
                           size_t *size, char *log, size_t log_len)
{
    *image = NULL;
    *size = 0;
    if (log != NULL && log_len > 0)
        log[0] = '\0';
    char why[512];
    if (sw__hip_rtc_load(why, sizeof why, NULL, NULL) != SW_OK)
        return sw__errorf(SW_ERR_UNSUPPORTED, "cannot compile HIP kernels: "
                          "%s", why);
    if (src == NULL || src[0] == '\0')
        return sw__errorf(SW_ERR_INVALID_ARG, "no HIP source to compile");

    char archopt[320];
    const char *opts[4];
    int nopts = sw__hip_compile_options(arch, opts, archopt, sizeof archopt);
    swhiprtc_program prog = NULL;
    swhiprtc_result r = RTC(hiprtcCreateProgram)(&prog, src,
                                                 "spillway_kernels.hip", 0,
                                                 NULL, NULL);
    if (r != SWHIP_HIPRTC_SUCCESS)
        return sw__errorf(r == SWHIP_HIPRTC_ERROR_OUT_OF_MEMORY
                              ? SW_ERR_HOST_OOM
                              : SW_ERR_DEVICE,
                          "hiprtcCreateProgram failed: %s", hip__rtc_err(r));
    r = RTC(hiprtcCompileProgram)(prog, nopts, opts);

    size_t lsize = 0;
    char *full = NULL;
    if (RTC(hiprtcGetProgramLogSize)(prog, &lsize) == SWHIP_HIPRTC_SUCCESS &&
        lsize > 1 && (full = sw__malloc(lsize + 1)) != NULL) {
        if (RTC(hiprtcGetProgramLog)(prog, full) != SWHIP_HIPRTC_SUCCESS)
            full[0] = '\0';
        full[lsize] = '\0';
    }
    if (full != NULL && log != NULL && log_len > 0)
        snprintf(log, log_len, "%s", full);

    int rc = SW_OK;
    if (r != SWHIP_HIPRTC_SUCCESS) {
        char first[200] = "";
        if (full != NULL) {
            size_t k = strcspn(full, "\n");
            if (k >= sizeof first)
                k = sizeof first - 1;
            memcpy(first, full, k);
            first[k] = '\0';
        }
        rc = sw__errorf(SW_ERR_DEVICE, "hipRTC (%s): compiling for %s "
                        "failed: %s%s%s", hip__rtc.path,
                        arch && arch[0] ? arch : "the current device",
                        hip__rtc_err(r), first[0] ? ": " : "", first);
    } else {
        size_t n = 0;
        r = RTC(hiprtcGetCodeSize)(prog, &n);
        char *out = r == SWHIP_HIPRTC_SUCCESS && n > 0 ? sw__malloc(n) : NULL;
        if (out == NULL) {
            rc = r != SWHIP_HIPRTC_SUCCESS || n == 0
                     ? sw__errorf(SW_ERR_DEVICE, "hipRTC: getting the code "
                                  "size failed: %s", hip__rtc_err(r))
                     : sw__errorf(SW_ERR_HOST_OOM, "no host memory for %zu "
                                  "bytes of compiled kernels", n);
        } else if ((r = RTC(hiprtcGetCode)(prog, out)) !=
                   SWHIP_HIPRTC_SUCCESS) {
            sw__free(out);
            rc = sw__errorf(SW_ERR_DEVICE, "hipRTC: getting the code "
                            "failed: %s", hip__rtc_err(r));
        } else {
            *image = out;
            *size = n;
        }
    }
    sw__free(full);
    (void)RTC(hiprtcDestroyProgram)(&prog);
    return rc;
}

/* Code objects, once per architecture per process. */
typedef struct hip__image {
    char arch[256];
    char *data;
    size_t size;
} hip__image;

static pthread_mutex_t hip__images_mu = PTHREAD_MUTEX_INITIALIZER;
static hip__image hip__images[HIP__MAX_IMAGES];
static int hip__nimages;

int sw__hip_image_get(const char *arch, const char **image, size_t *size)
{
    if (arch == NULL)
        arch = "";
    pthread_mutex_lock(&hip__images_mu);
    for (int i = 0; i < hip__nimages; i++) {
        if (strcmp(hip__images[i].arch, arch) == 0) {
            *image = hip__images[i].data;
            *size = hip__images[i].size;
            pthread_mutex_unlock(&hip__images_mu);
            return SW_OK;
        }
    }
    char *data = NULL;
    size_t n = 0;
    int rc = sw__hip_compile_source(sw__cuda_kernel_source(), arch, &data, &n,
                                    NULL, 0);
    if (rc == SW_OK) {
        if (hip__nimages == HIP__MAX_IMAGES) {
            sw__free(data);
            rc = sw__errorf(SW_ERR_HOST_OOM, "too many kinds of AMD GPU in "
                            "one process");
        } else {
            hip__image *im = &hip__images[hip__nimages++];
            snprintf(im->arch, sizeof im->arch, "%s", arch);
            im->data = data;
            im->size = n;
            *image = data;
            *size = n;
        }
    }
    pthread_mutex_unlock(&hip__images_mu);
    return rc;
}
