/*
 * fake_libhiprtc.c -- a strict stand-in for hipRTC (libhiprtc.so), loaded
 * by the HIP backend through SPILLWAY_HIPRTC_LIBRARY in the c-hip-fake
 * suites.  It does not compile anything: a "code object" is the source
 * behind a magic line and the architecture asked for (fake_hip.h), which
 * the fake runtime (fake_libamdhip64.c) loads and whose kernels it
 * emulates by name.  Real hipRTC output is checked by test-hip.c's
 * hip_hiprtc_code_object wherever a real hipRTC is installed.
 *
 * What it checks, failing the call as hipRTC would, with the reason in
 * the program log: the options are exactly the ones a GPU needs
 * (--gpu-architecture=gfx..., -ffp-contract=off; -O3 allowed, anything
 * else HIPRTC_ERROR_INVALID_OPTION); the source declares extern "C"
 * kernels; "#error" in the source fails the compile with its line in the
 * log; programs are live (a destroyed or unknown one aborts, loudly).
 */
#include "backend/hip_api.h"
#include "fake_hip.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))

#define FAKE_DECL(kind, ret, name, params) API ret name params;
SWHIP_RTC_FUNCS(FAKE_DECL)
#undef FAKE_DECL

#define LIVE 0x50524f47u /* "PROG" */

struct _hiprtcProgram {
    unsigned magic;
    char *src;
    char *code;
    size_t code_size;
    char log[512];
    struct _hiprtcProgram *next; /* every program ever made, never freed */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct _hiprtcProgram *programs;

static void die(const char *what, const char *call)
{
    fprintf(stderr, "fake hiprtc: %s: %s\n", call, what);
    abort();
}

/* Programs are never freed, so a stale handle is detected, not read
 * after free. */
static struct _hiprtcProgram *live(swhiprtc_program p, const char *call)
{
    pthread_mutex_lock(&mu);
    struct _hiprtcProgram *q = programs;
    while (q != NULL && q != p)
        q = q->next;
    pthread_mutex_unlock(&mu);
    if (q == NULL)
        die("not a program hiprtcCreateProgram made", call);
    if (q->magic != LIVE)
        die("program used after hiprtcDestroyProgram", call);
    return q;
}

const char *hiprtcGetErrorString(swhiprtc_result r)
{
    switch (r) {
    case SWHIP_HIPRTC_SUCCESS: return "HIPRTC_SUCCESS";
    case SWHIP_HIPRTC_ERROR_OUT_OF_MEMORY: return "HIPRTC_ERROR_OUT_OF_MEMORY";
    case SWHIP_HIPRTC_ERROR_INVALID_OPTION: return "HIPRTC_ERROR_INVALID_OPTION";
    case SWHIP_HIPRTC_ERROR_COMPILATION: return "HIPRTC_ERROR_COMPILATION";
    default: return "HIPRTC_ERROR_INVALID_INPUT";
    }
}

swhiprtc_result hiprtcVersion(int *major, int *minor)
{
    *major = 6;
    *minor = 0;
    return SWHIP_HIPRTC_SUCCESS;
}

swhiprtc_result hiprtcCreateProgram(swhiprtc_program *prog, const char *src,
                                    const char *name, int num_headers,
                                    const char **headers,
                                    const char **include_names)
{
    (void)name;
    (void)headers;
    (void)include_names;
    if (prog == NULL || src == NULL || num_headers != 0)
        die("bad arguments", "hiprtcCreateProgram");
    struct _hiprtcProgram *p = calloc(1, sizeof *p);
    if (p == NULL || (p->src = strdup(src)) == NULL) {
        free(p);
        return SWHIP_HIPRTC_ERROR_OUT_OF_MEMORY;
    }
    p->magic = LIVE;
    pthread_mutex_lock(&mu);
    p->next = programs;
    programs = p;
    pthread_mutex_unlock(&mu);
    *prog = p;
    return SWHIP_HIPRTC_SUCCESS;
}

swhiprtc_result hiprtcDestroyProgram(swhiprtc_program *prog)
{
    struct _hiprtcProgram *p = live(*prog, "hiprtcDestroyProgram");
    p->magic = 0;
    free(p->src);
    free(p->code);
    p->src = p->code = NULL;
    *prog = NULL;
    return SWHIP_HIPRTC_SUCCESS;
}

swhiprtc_result hiprtcCompileProgram(swhiprtc_program prog, int num_options,
                                     const char **options)
{
    struct _hiprtcProgram *p = live(prog, "hiprtcCompileProgram");
    const char *arch = NULL;
    int contract_off = 0;
    p->log[0] = '\0';
    for (int i = 0; i < num_options; i++) {
        const char *o = options[i];
        if (strncmp(o, "--gpu-architecture=", 19) == 0) {
            arch = o + 19;
        } else if (strcmp(o, "-ffp-contract=off") == 0) {
            contract_off = 1;
        } else if (strcmp(o, "-O3") != 0) {
            snprintf(p->log, sizeof p->log, "error: unknown option '%s'", o);
            return SWHIP_HIPRTC_ERROR_INVALID_OPTION;
        }
    }
    if (arch == NULL || strncmp(arch, "gfx", 3) != 0) {
        snprintf(p->log, sizeof p->log, "error: no --gpu-architecture=gfx... "
                 "(the stand-in compiles only for a named device)");
        return SWHIP_HIPRTC_ERROR_INVALID_OPTION;
    }
    if (!contract_off) {
        snprintf(p->log, sizeof p->log, "error: -ffp-contract=off missing: "
                 "a*x + y would be fused into an FMA");
        return SWHIP_HIPRTC_ERROR_INVALID_OPTION;
    }
    const char *err = strstr(p->src, "#error");
    if (err != NULL) {
        size_t k = strcspn(err, "\n");
        snprintf(p->log, sizeof p->log, "spillway_kernels.hip: error: %.*s\n"
                 "1 error generated.", (int)(k < 300 ? k : 300), err);
        return SWHIP_HIPRTC_ERROR_COMPILATION;
    }
    if (strstr(p->src, "extern \"C\" __global__") == NULL) {
        snprintf(p->log, sizeof p->log, "warning: no extern \"C\" kernels");
    }
    size_t n = strlen(FAKE_HIP_MAGIC) + strlen(FAKE_HIP_ARCH_KEY) +
               strlen(arch) + 1 + strlen(p->src) + 1;
    free(p->code);
    p->code = malloc(n);
    if (p->code == NULL)
        return SWHIP_HIPRTC_ERROR_OUT_OF_MEMORY;
    snprintf(p->code, n, "%s%s%s\n%s", FAKE_HIP_MAGIC, FAKE_HIP_ARCH_KEY, arch,
             p->src);
    p->code_size = n;
    return SWHIP_HIPRTC_SUCCESS;
}

swhiprtc_result hiprtcGetProgramLogSize(swhiprtc_program prog, size_t *size)
{
    struct _hiprtcProgram *p = live(prog, "hiprtcGetProgramLogSize");
    *size = strlen(p->log) + 1;
    return SWHIP_HIPRTC_SUCCESS;
}

swhiprtc_result hiprtcGetProgramLog(swhiprtc_program prog, char *log)
{
    struct _hiprtcProgram *p = live(prog, "hiprtcGetProgramLog");
    memcpy(log, p->log, strlen(p->log) + 1);
    return SWHIP_HIPRTC_SUCCESS;
}

swhiprtc_result hiprtcGetCodeSize(swhiprtc_program prog, size_t *size)
{
    struct _hiprtcProgram *p = live(prog, "hiprtcGetCodeSize");
    if (p->code == NULL)
        die("no code: the program was not compiled", "hiprtcGetCodeSize");
    *size = p->code_size;
    return SWHIP_HIPRTC_SUCCESS;
}

swhiprtc_result hiprtcGetCode(swhiprtc_program prog, char *code)
{
    struct _hiprtcProgram *p = live(prog, "hiprtcGetCode");
    if (p->code == NULL)
        die("no code: the program was not compiled", "hiprtcGetCode");
    memcpy(code, p->code, p->code_size);
    return SWHIP_HIPRTC_SUCCESS;
}
