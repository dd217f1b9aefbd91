/*
 * sigcheck.c -- src/backend/cuda_api.h against the toolkit's cuda.h and
 * nvrtc.h.
 *
 * The CUDA backend declares the driver API itself (so that building it
 * needs no CUDA headers) and resolves versioned symbols by name at run
 * time; nothing then checks those declarations but this file.  It is built
 * into the C suite wherever the build finds cuda.h (SW_HAVE_CUDA_H), and:
 *  - at compile time, requires every function-pointer type of cuda_api.h
 *    to be compatible with the toolkit's prototype of the symbol it names,
 *    every constant to equal the toolkit's enumerator or macro, the handle
 *    and enum types to be the toolkit's, and swcu_mempool_props to have
 *    CUmemPoolProps's layout: drift is a build error;
 *  - at run time (the cuda_signatures test), requires each symbol name
 *    (cuMemAlloc_v2) to be the one cuda.h maps the public name
 *    (cuMemAlloc) to, so that a new `#define cuX cuX_v3` is noticed.
 */
#include <cuda.h>
#if defined(__has_include)
#if __has_include(<nvrtc.h>)
#include <nvrtc.h>
#define SW_HAVE_NVRTC_H 1
#endif
#endif

#include "backend/cuda_api.h"
#include "sigcheck.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define SW_STR2(x) #x
#define SW_STR(x) SW_STR2(x)
#define SW_SAME(a, b) __builtin_types_compatible_p(a, b)

/* ------------------------------------------------------------------------
 * Types
 * ---------------------------------------------------------------------- */

_Static_assert(SW_SAME(swcu_result, CUresult), "CUresult");
_Static_assert(SW_SAME(swcu_device, CUdevice), "CUdevice");
_Static_assert(SW_SAME(swcu_deviceptr, CUdeviceptr), "CUdeviceptr");
_Static_assert(SW_SAME(swcu_context, CUcontext), "CUcontext");
_Static_assert(SW_SAME(swcu_module, CUmodule), "CUmodule");
_Static_assert(SW_SAME(swcu_function, CUfunction), "CUfunction");
_Static_assert(SW_SAME(swcu_stream, CUstream), "CUstream");
_Static_assert(SW_SAME(swcu_event, CUevent), "CUevent");
_Static_assert(SW_SAME(swcu_mempool, CUmemoryPool), "CUmemoryPool");
_Static_assert(SW_SAME(swcu_device_attribute, CUdevice_attribute),
               "CUdevice_attribute");
_Static_assert(SW_SAME(swcu_mempool_attribute, CUmemPool_attribute),
               "CUmemPool_attribute");
_Static_assert(SW_SAME(uint64_t, cuuint64_t), "cuuint64_t (pool attributes)");

/* CUmemPoolProps: same size, same place for what the backend sets. */
#define SW_FIELD(ours, theirs)                                                \
    _Static_assert(offsetof(swcu_mempool_props, ours) ==                      \
                           offsetof(CUmemPoolProps, theirs) &&                \
                       sizeof(((swcu_mempool_props *)0)->ours) ==             \
                           sizeof(((CUmemPoolProps *)0)->theirs),             \
                   "CUmemPoolProps." #theirs)
_Static_assert(sizeof(swcu_mempool_props) == sizeof(CUmemPoolProps),
               "sizeof(CUmemPoolProps)");
SW_FIELD(alloc_type, allocType);
SW_FIELD(handle_types, handleTypes);
SW_FIELD(location, location);
SW_FIELD(location.type, location.type);
SW_FIELD(location.id, location.id);
SW_FIELD(win32_security_attributes, win32SecurityAttributes);
#if CUDA_VERSION >= 13000
/* Members carved out of the reserved bytes by later toolkits. */
SW_FIELD(max_size, maxSize);
SW_FIELD(usage, usage);
SW_FIELD(reserved, reserved);
#endif

/* ------------------------------------------------------------------------
 * Functions.  cuMemPoolCreate takes the struct above, which is our own
 * type: its prototype is checked in terms of it, after the layout check.
 * ---------------------------------------------------------------------- */

#define SW_EXCEPT_cuMemPoolCreate ,
#define SW_SECOND(a, b, ...) b
#define SW_SECOND_(args) SW_SECOND args
#define SW_IS_EXCEPT_(x) SW_SECOND_((x 1, 0, ~))
#define SW_IS_EXCEPT(sym) SW_IS_EXCEPT_(SW_EXCEPT_##sym)

#define SW_CHECK_DRIVER(kind, pub, sym, params)                               \
    _Static_assert(SW_IS_EXCEPT(sym) ||                                       \
                       SW_SAME(swcu_##sym##_fn, __typeof__(&sym)),            \
                   "cuda_api.h: " #sym " does not match cuda.h");
SWCU_DRIVER_FUNCS(SW_CHECK_DRIVER)

_Static_assert(SW_SAME(__typeof__(&cuMemPoolCreate),
                       CUresult (*)(CUmemoryPool *, const CUmemPoolProps *)),
               "cuMemPoolCreate");
_Static_assert(SW_SAME(swcu_cuMemPoolCreate_fn,
                       swcu_result (*)(swcu_mempool *,
                                       const swcu_mempool_props *)),
               "swcu_cuMemPoolCreate_fn");

#ifdef SW_HAVE_NVRTC_H
_Static_assert(SW_SAME(swnv_result, nvrtcResult), "nvrtcResult");
_Static_assert(SW_SAME(swnv_program, nvrtcProgram), "nvrtcProgram");
#define SW_CHECK_NVRTC(kind, ret, name, params)                               \
    _Static_assert(SW_SAME(swcu_##name##_fn, __typeof__(&name)),              \
                   "cuda_api.h: " #name " does not match nvrtc.h");
SWCU_NVRTC_FUNCS(SW_CHECK_NVRTC)
#else
#define NVRTC_SUCCESS 0 /* checked where nvrtc.h is installed */
#endif

/* ------------------------------------------------------------------------
 * Constants
 * ---------------------------------------------------------------------- */

#define SW_CHECK_CONST(name, value)                                           \
    _Static_assert((long long)SWCU_##name == (long long)(name) &&             \
                       (long long)(value) == (long long)(name),               \
                   "cuda_api.h: " #name " is not cuda.h's");
SWCU_ERRORS(SW_CHECK_CONST)
SWCU_CONSTANTS(SW_CHECK_CONST)

/* ------------------------------------------------------------------------
 * Run time: symbol names
 * ---------------------------------------------------------------------- */

typedef struct sw_name_pair {
    const char *mapped; /* what cuda.h's macros make of the public name */
    const char *sym;    /* what the backend resolves */
} sw_name_pair;

static const sw_name_pair sw_names[] = {
#define SW_NAME_ENTRY(kind, pub, sym, params) {SW_STR(pub), #sym},
    SWCU_DRIVER_FUNCS(SW_NAME_ENTRY)
#undef SW_NAME_ENTRY
};

int sw_test_cuda_sigcheck(char *err, size_t len)
{
    int bad = 0;
    if (len > 0)
        err[0] = '\0';
    for (size_t i = 0; i < sizeof sw_names / sizeof sw_names[0]; i++) {
        if (strcmp(sw_names[i].mapped, sw_names[i].sym) == 0)
            continue;
        bad++;
        size_t used = strlen(err);
        if (used + 1 < len)
            snprintf(err + used, len - used, "%scuda.h maps to %s, the "
                     "backend resolves %s", used ? "; " : "",
                     sw_names[i].mapped, sw_names[i].sym);
    }
    return bad;
}

int sw_test_cuda_sigcheck_count(void)
{
    int n = (int)(sizeof sw_names / sizeof sw_names[0]);
#define SW_COUNT(...) n++;
#ifdef SW_HAVE_NVRTC_H
    SWCU_NVRTC_FUNCS(SW_COUNT)
#endif
    SWCU_ERRORS(SW_COUNT)
    SWCU_CONSTANTS(SW_COUNT)
#undef SW_COUNT
    return n;
}
