/*
 * fake_libnvrtc.c -- a strict stand-in for NVRTC (libnvrtc.so) on the CPU,
 * so that the CUDA backend's kernel path (loading NVRTC, compiling the
 * built-in kernels, loading the image, looking up and launching every
 * kernel) runs through the stand-in for the driver (fake_libcuda.c) on a
 * machine with no CUDA toolkit, or one without NVRTC:
 *
 *   SPILLWAY_CUDA_LIBRARY=BUILD/tests/c/libcuda_fake.so \
 *   SPILLWAY_NVRTC_LIBRARY=BUILD/tests/c/libnvrtc_fake.so \
 *   SW_TEST_DEVICE=cuda:0 BUILD/tests/c/test_spillway
 *
 * It is NOT a compiler and makes no code a GPU could run.  It reads the
 * program as far as its kernels' declarations (fake_nvrtc_read.c: comments
 * and line continuations, #define with function-like macros expanded, ##
 * pasting included, as the built-in kernels are declared through macros
 * such as sw_add_##S; #ifdef / #ifndef / #if 0 / #if 1 / #else / #endif;
 * typedefs; every `extern "C" __global__ void NAME(PARAMETERS)`), and
 * writes PTX-shaped text: .version, .target sm_NN, .address_size 64, and
 * one `.visible .entry NAME(` per kernel with a `.param .uN` or `.fN` per
 * parameter (pointers .u64), as nvcc and NVRTC write them, and empty
 * bodies; for an sm_NN target also a "CUBIN": a small ELF64 image for
 * EM_CUDA whose string table holds the entry names.  The stand-in for the
 * driver accepts both (cuModuleLoadData) and finds the entries by name
 * (cuModuleGetFunction); it emulates the kernels themselves.  What real
 * NVRTC makes of kernels/cuda.cu is checked by test-cuda-nvrtc.c's cuda_nvrtc_*
 * tests where libnvrtc is installed, and nvcc's PTX by cuda_nvcc_ptx.
 *
 * What it checks, failing the call as NVRTC would, with the reason in the
 * program log ("NAME(LINE): error: ..."): the options are exactly what the
 * backend must give (--gpu-architecture=compute_NN or sm_NN of an
 * architecture it lists, and --fmad=false: without it a*x + y would be
 * fused into an FMA; anything else NVRTC_ERROR_INVALID_OPTION); "#error"
 * and "#include" (it has no headers; NVRTC finds the toolkit's only given
 * -I) fail the compile; so do a macro given the wrong number of arguments,
 * a kernel declared twice, and a parameter of a type whose size it does
 * not know (the C scalar types and typedefs of them, and pointers).
 * Programs are live: a destroyed or unknown one aborts, loudly.  What it
 * does not check: anything inside a kernel's body, #if expressions other
 * than 0 and 1 (refused), and C++ beyond the declarations.
 *
 * Environment: FAKE_NVRTC_ARCHS, a comma-separated list of the
 * architectures it says it supports (default NVRTC 13.0's: 75 80 86 87 89
 * 90 100 103 110 120 121), or "none": nvrtcGetNumSupportedArchs fails, as
 * for an NVRTC that cannot list them.  fake_nvrtc_stats() (not an NVRTC
 * entry point) reports what the tests check: that this library compiled
 * the kernels, and for which target.
 */
#include "backend/cuda_api.h"
#include "fake_nvrtc.h"
#include "fake_nvrtc_read.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))

/* Every entry point, declared with cuda_api.h's parameter lists. */
#define FAKE_DECL(kind, ret, name, params) API ret name params;
SWCU_NVRTC_FUNCS(FAKE_DECL)
#undef FAKE_DECL

/* nvrtcResult's values (nvrtc.h). */
enum {
    NV_SUCCESS = 0,
    NV_OUT_OF_MEMORY = 1,
    NV_INVALID_INPUT = 3,
    NV_INVALID_OPTION = 5,
    NV_COMPILATION = 6,
    NV_INTERNAL_ERROR = 11,
};

#define LIVE 0x4e565254u /* "NVRT" */
#define LOG_MAX FAKE_NVRTC_LOG_MAX

/* ------------------------------------------------------------------------
 * Programs
 * ---------------------------------------------------------------------- */

struct _nvrtcProgram {
    unsigned magic;
    char *src;
    char name[128];
    char *ptx;            /* after a successful compile */
    size_t ptx_size;      /* with its NUL, as nvrtcGetPTXSize says */
    unsigned char *cubin; /* for an sm_NN target only */
    size_t cubin_size;
    char log[LOG_MAX];
    struct _nvrtcProgram *next; /* every program ever made, never freed */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct _nvrtcProgram *programs;

/* What the tests read (fake_nvrtc_stats); under mu. */
static fake_nvrtc_stats_t stats;

API void fake_nvrtc_stats(fake_nvrtc_stats_t *out);
void fake_nvrtc_stats(fake_nvrtc_stats_t *out)
{
    pthread_mutex_lock(&mu);
    *out = stats;
    pthread_mutex_unlock(&mu);
}

static void die(const char *what, const char *call)
{
    fprintf(stderr, "fake nvrtc: %s: %s\n", call, what);
    abort();
}

/* Programs are never freed, so a stale handle is detected, not read after
 * free. */
static struct _nvrtcProgram *live(swnv_program p, const char *call)
{
    pthread_mutex_lock(&mu);
    struct _nvrtcProgram *q = programs;
    while (q != NULL && q != p)
        q = q->next;
    pthread_mutex_unlock(&mu);
    if (q == NULL)
        die("not a program nvrtcCreateProgram made", call);
    if (q->magic != LIVE)
        die("program used after nvrtcDestroyProgram", call);
    return q;
}

/* ------------------------------------------------------------------------
 * Architectures
 * ---------------------------------------------------------------------- */

static const int default_archs[] = {75, 80, 86, 87, 89, 90,
                                    100, 103, 110, 120, 121};
#define NDEFAULT (int)(sizeof default_archs / sizeof default_archs[0])

/* The listed architectures (FAKE_NVRTC_ARCHS or the default); -1 for
 * "none". */
static int archs_listed(int *out, int max)
{
    const char *env = getenv("FAKE_NVRTC_ARCHS");
    if (env == NULL || env[0] == '\0') {
        memcpy(out, default_archs, sizeof default_archs);
        return NDEFAULT;
    }
    if (strcmp(env, "none") == 0)
        return -1;
    int n = 0;
    for (const char *p = env; *p != '\0' && n < max;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 10 || v > 999)
            die("FAKE_NVRTC_ARCHS is not a list like 75,80,90", "getenv");
        out[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* Whether NVRTC compiles for arch: a listed one (the default list when
 * the list is "none": it still compiles, it just cannot say). */
static int arch_known(int arch)
{
    int a[64];
    int n = archs_listed(a, 64);
    if (n < 0) {
        memcpy(a, default_archs, sizeof default_archs);
        n = NDEFAULT;
    }
    for (int i = 0; i < n; i++)
        if (a[i] == arch)
            return 1;
    return 0;
}

/* ------------------------------------------------------------------------
 * Writing the images
 * ---------------------------------------------------------------------- */

static char *write_ptx(const fake_kernel *kernels, int nkernels,
                       const char *file, int arch, size_t *size)
{
    size_t cap = 1024;
    for (int k = 0; k < nkernels; k++)
        cap += 64 + 2 * strlen(kernels[k].name) +
               (size_t)kernels[k].nparams * (40 + strlen(kernels[k].name));
    char *out = malloc(cap);
    if (out == NULL)
        return NULL;
    size_t o = (size_t)snprintf(out, cap,
        "//\n" FAKE_NVRTC_BANNER "\n"
        "// (tests/cuda/fake_libnvrtc.c) from %s for compute_%d:\n"
        "// the entries' names and parameters only, no code a GPU runs.\n"
        "//\n\n"
        ".version 9.0\n.target sm_%d\n.address_size 64\n",
        file, arch, arch);
    for (int k = 0; k < nkernels; k++) {
        const fake_kernel *kn = &kernels[k];
        o += (size_t)snprintf(out + o, cap - o,
                              "\n\t// .globl\t%s\n.visible .entry %s(\n",
                              kn->name, kn->name);
        for (int p = 0; p < kn->nparams; p++)
            o += (size_t)snprintf(out + o, cap - o,
                                  "\t.param .%s %s_param_%d%s\n",
                                  kn->ptype[p], kn->name, p,
                                  p + 1 < kn->nparams ? "," : "");
        o += (size_t)snprintf(out + o, cap - o, ")\n{\n\tret;\n}\n");
    }
    *size = o + 1; /* NVRTC counts the NUL */
    return out;
}

static void put16(unsigned char *p, unsigned v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* A well-formed ELF64 for EM_CUDA (190) with two sections, the null one
 * and a string table (also the section-name table) holding ".shstrtab", a
 * note of what made it, and the entry names.  e_flags holds the
 * architecture as a plain number (not the real encoding). */
static unsigned char *write_cubin(const fake_kernel *kernels, int nkernels,
                                  int arch, size_t *size)
{
    static const char note[] = "spillway fake NVRTC: not GPU code";
    size_t strs = 1 + sizeof ".shstrtab" + sizeof note;
    for (int k = 0; k < nkernels; k++)
        strs += strlen(kernels[k].name) + 1;
    size_t shoff = (64 + strs + 7) & ~(size_t)7;
    size_t total = shoff + 2 * 64;
    unsigned char *im = calloc(1, total);
    if (im == NULL)
        return NULL;
    memcpy(im, "\177ELF", 4);
    im[4] = 2;    /* ELFCLASS64 */
    im[5] = 1;    /* little-endian */
    im[6] = 1;    /* EV_CURRENT */
    im[7] = 0x33; /* ELFOSABI_CUDA */
    put16(im + 16, 2);   /* ET_EXEC */
    put16(im + 18, 190); /* EM_CUDA */
    put32(im + 20, 1);
    put64(im + 0x28, shoff);
    put32(im + 0x30, (uint32_t)arch);
    put16(im + 0x34, 64); /* e_ehsize */
    put16(im + 0x36, 56); /* e_phentsize */
    put16(im + 0x3A, 64); /* e_shentsize */
    put16(im + 0x3C, 2);  /* e_shnum */
    put16(im + 0x3E, 1);  /* e_shstrndx */
    char *s = (char *)im + 64 + 1;
    memcpy(s, ".shstrtab", sizeof ".shstrtab");
    s += sizeof ".shstrtab";
    memcpy(s, note, sizeof note);
    s += sizeof note;
    for (int k = 0; k < nkernels; k++) {
        size_t l = strlen(kernels[k].name) + 1;
        memcpy(s, kernels[k].name, l);
        s += l;
    }
    unsigned char *sh = im + shoff + 64; /* section 1 */
    put32(sh, 1);       /* sh_name: ".shstrtab" */
    put32(sh + 4, 3);   /* SHT_STRTAB */
    put64(sh + 24, 64); /* sh_offset */
    put64(sh + 32, strs);
    put64(sh + 48, 1);  /* sh_addralign */
    *size = total;
    return im;
}

/* ------------------------------------------------------------------------
 * The entry points
 * ---------------------------------------------------------------------- */

const char *nvrtcGetErrorString(swnv_result r)
{
    static const char *const names[] = {
        "NVRTC_SUCCESS",
        "NVRTC_ERROR_OUT_OF_MEMORY",
        "NVRTC_ERROR_PROGRAM_CREATION_FAILURE",
        "NVRTC_ERROR_INVALID_INPUT",
        "NVRTC_ERROR_INVALID_PROGRAM",
        "NVRTC_ERROR_INVALID_OPTION",
        "NVRTC_ERROR_COMPILATION",
        "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE",
        "NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION",
        "NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
        "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID",
        "NVRTC_ERROR_INTERNAL_ERROR",
    };
    return r < sizeof names / sizeof names[0] ? names[r]
                                              : "NVRTC_ERROR unknown";
}

swnv_result nvrtcVersion(int *major, int *minor)
{
    if (major == NULL || minor == NULL)
        return NV_INVALID_INPUT;
    *major = 13; /* the stand-in for the driver says 13.0 too */
    *minor = 0;
    return NV_SUCCESS;
}

swnv_result nvrtcGetNumSupportedArchs(int *count)
{
    int a[64];
    int n = archs_listed(a, 64);
    if (count == NULL)
        return NV_INVALID_INPUT;
    if (n < 0)
        return NV_INTERNAL_ERROR;
    *count = n;
    return NV_SUCCESS;
}

swnv_result nvrtcGetSupportedArchs(int *archs)
{
    int a[64];
    int n = archs_listed(a, 64);
    if (archs == NULL)
        return NV_INVALID_INPUT;
    if (n < 0)
        return NV_INTERNAL_ERROR;
    memcpy(archs, a, (size_t)n * sizeof *a);
    return NV_SUCCESS;
}

swnv_result nvrtcCreateProgram(swnv_program *prog, const char *src,
                               const char *name, int num_headers,
                               const char *const *headers,
                               const char *const *include_names)
{
    (void)headers;
    (void)include_names;
    if (prog == NULL || src == NULL)
        return NV_INVALID_INPUT;
    if (num_headers != 0)
        die("headers given (the backend gives none)", "nvrtcCreateProgram");
    struct _nvrtcProgram *p = calloc(1, sizeof *p);
    if (p == NULL || (p->src = strdup(src)) == NULL) {
        free(p);
        return NV_OUT_OF_MEMORY;
    }
    snprintf(p->name, sizeof p->name, "%s",
             name != NULL ? name : "default_program");
    p->magic = LIVE;
    pthread_mutex_lock(&mu);
    p->next = programs;
    programs = p;
    stats.live++;
    pthread_mutex_unlock(&mu);
    *prog = p;
    return NV_SUCCESS;
}

swnv_result nvrtcDestroyProgram(swnv_program *prog)
{
    if (prog == NULL)
        return NV_INVALID_INPUT;
    struct _nvrtcProgram *p = live(*prog, "nvrtcDestroyProgram");
    p->magic = 0;
    free(p->src);
    free(p->ptx);
    free(p->cubin);
    p->src = p->ptx = NULL;
    p->cubin = NULL;
    *prog = NULL;
    pthread_mutex_lock(&mu);
    stats.live--;
    pthread_mutex_unlock(&mu);
    return NV_SUCCESS;
}

/* The options: returns the architecture (cubin set for sm_NN), or -1 with
 * the reason in log. */
static int parse_options(int n, const char *const *opts, int *cubin,
                         char *log)
{
    int arch = -1, fmad_off = 0;
    for (int i = 0; i < n; i++) {
        const char *o = opts[i], *v = NULL;
        if (o == NULL) {
            snprintf(log, LOG_MAX, "nvrtc: error: option %d is NULL\n", i);
            return -1;
        }
        if (strncmp(o, "--gpu-architecture=", 19) == 0)
            v = o + 19;
        else if (strncmp(o, "-arch=", 6) == 0)
            v = o + 6;
        if (v != NULL) {
            int sm = strncmp(v, "sm_", 3) == 0;
            char *end = NULL;
            long a = (sm || strncmp(v, "compute_", 8) == 0)
                         ? strtol(v + (sm ? 3 : 8), &end, 10)
                         : -1;
            if (a < 0 || end == NULL || *end != '\0' || !arch_known((int)a)) {
                snprintf(log, LOG_MAX, "nvrtc: error: invalid value for "
                         "--gpu-architecture (-arch): %s\n", v);
                return -1;
            }
            arch = (int)a;
            *cubin = sm;
        } else if (strcmp(o, "--fmad=false") == 0 ||
                   strcmp(o, "-fmad=false") == 0) {
            fmad_off = 1;
        } else {
            snprintf(log, LOG_MAX, "nvrtc: error: unrecognized option %s "
                     "(the stand-in takes only --gpu-architecture= and "
                     "--fmad=false)\n", o);
            return -1;
        }
    }
    if (arch < 0) {
        snprintf(log, LOG_MAX, "nvrtc: error: no --gpu-architecture (the "
                 "stand-in compiles only for a named architecture)\n");
        return -1;
    }
    if (!fmad_off) {
        snprintf(log, LOG_MAX, "nvrtc: error: --fmad=false missing: a*x + y "
                 "would be fused into an FMA\n");
        return -1;
    }
    return arch;
}

swnv_result nvrtcCompileProgram(swnv_program prog, int num_options,
                                const char *const *options)
{
    struct _nvrtcProgram *p = live(prog, "nvrtcCompileProgram");
    p->log[0] = '\0';
    free(p->ptx);
    free(p->cubin);
    p->ptx = NULL;
    p->cubin = NULL;
    p->ptx_size = p->cubin_size = 0;
    int cubin = 0;
    int arch = parse_options(num_options, options, &cubin, p->log);
    if (arch < 0) {
        pthread_mutex_lock(&mu);
        stats.failures++;
        pthread_mutex_unlock(&mu);
        return NV_INVALID_OPTION;
    }

    fake_kernel *kernels = NULL;
    int nkernels = 0;
    swnv_result r = NV_SUCCESS;
    int rc = fake_nvrtc_read(p->src, p->name, &kernels, &nkernels, p->log);
    if (rc != 0) {
        r = rc == -1 ? NV_COMPILATION : NV_OUT_OF_MEMORY;
    } else {
        p->ptx = write_ptx(kernels, nkernels, p->name, arch, &p->ptx_size);
        if (p->ptx != NULL && cubin)
            p->cubin = write_cubin(kernels, nkernels, arch, &p->cubin_size);
        if (p->ptx == NULL || (cubin && p->cubin == NULL))
            r = NV_OUT_OF_MEMORY;
    }
    free(kernels);
    pthread_mutex_lock(&mu);
    if (r == NV_SUCCESS) {
        stats.compiles++;
        stats.last_arch = arch;
        stats.last_cubin = cubin;
        stats.last_kernels = nkernels;
    } else {
        stats.failures++;
    }
    pthread_mutex_unlock(&mu);
    return r;
}

swnv_result nvrtcGetProgramLogSize(swnv_program prog, size_t *size)
{
    struct _nvrtcProgram *p = live(prog, "nvrtcGetProgramLogSize");
    *size = strlen(p->log) + 1;
    return NV_SUCCESS;
}

swnv_result nvrtcGetProgramLog(swnv_program prog, char *log)
{
    struct _nvrtcProgram *p = live(prog, "nvrtcGetProgramLog");
    memcpy(log, p->log, strlen(p->log) + 1);
    return NV_SUCCESS;
}

swnv_result nvrtcGetPTXSize(swnv_program prog, size_t *size)
{
    struct _nvrtcProgram *p = live(prog, "nvrtcGetPTXSize");
    if (p->ptx == NULL)
        die("no PTX: the program was not compiled", "nvrtcGetPTXSize");
    *size = p->ptx_size;
    return NV_SUCCESS;
}

swnv_result nvrtcGetPTX(swnv_program prog, char *ptx)
{
    struct _nvrtcProgram *p = live(prog, "nvrtcGetPTX");
    if (p->ptx == NULL)
        die("no PTX: the program was not compiled", "nvrtcGetPTX");
    memcpy(ptx, p->ptx, p->ptx_size);
    return NV_SUCCESS;
}

/* As NVRTC: a compile for a virtual architecture (compute_NN) has a CUBIN
 * of size 0. */
swnv_result nvrtcGetCUBINSize(swnv_program prog, size_t *size)
{
    struct _nvrtcProgram *p = live(prog, "nvrtcGetCUBINSize");
    if (p->ptx == NULL)
        die("no CUBIN: the program was not compiled", "nvrtcGetCUBINSize");
    *size = p->cubin_size;
    return NV_SUCCESS;
}

swnv_result nvrtcGetCUBIN(swnv_program prog, char *cubin)
{
    struct _nvrtcProgram *p = live(prog, "nvrtcGetCUBIN");
    if (p->ptx == NULL)
        die("no CUBIN: the program was not compiled", "nvrtcGetCUBIN");
    if (p->cubin != NULL)
        memcpy(cubin, p->cubin, p->cubin_size);
    return NV_SUCCESS;
}
