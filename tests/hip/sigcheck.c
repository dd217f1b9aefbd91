/*
 * sigcheck.c -- src/backend/hip_api.h against ROCm's hip_runtime_api.h and
 * hiprtc.h (Debian: libamdhip64-dev).
 *
 * The HIP backend declares the runtime API itself, so that building it
 * needs no ROCm headers, and resolves the symbols by name at run time;
 * nothing checks those declarations but this file.  It is built into the
 * C suite wherever the build finds hip/hip_runtime_api.h (SW_HAVE_HIP_H),
 * and requires at compile time:
 *  - every function-pointer type of hip_api.h to be compatible with the
 *    header's prototype (hipGetDeviceProperties and hipMemPoolCreate take
 *    our own struct types: their prototypes are checked in those terms
 *    after the layouts);
 *  - every constant to equal the header's enumerator or macro;
 *  - the handle types to be the header's, swhip_mempool_props to have
 *    hipMemPoolProps's layout, and the hipDeviceProp_t offsets the backend
 *    reads to be the struct's.
 * Drift is a build error; the hip_signatures test reports what was
 * checked.
 */
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>
#include <hip/hip_version.h>
#include <hip/hiprtc.h>

/* Newer than Debian's headers (ROCm 5.2; it came with 5.6): its prototype
 * as ROCm's hip_runtime_api.h states it, so that ours is still checked.
 * The backend resolves it at run time and does without it. */
#if HIP_VERSION < 50600000
hipError_t hipStreamGetDevice(hipStream_t stream, hipDevice_t *device);
#endif

#include "backend/hip_api.h"
#include "sigcheck.h"

#include <stddef.h>

#define SW_SAME(a, b) __builtin_types_compatible_p(a, b)

/* ------------------------------------------------------------------------
 * Types and layouts
 * ---------------------------------------------------------------------- */

_Static_assert(SW_SAME(swhip_error, hipError_t), "hipError_t");
_Static_assert(SW_SAME(swhip_device, hipDevice_t), "hipDevice_t");
_Static_assert(SW_SAME(swhip_deviceptr, hipDeviceptr_t), "hipDeviceptr_t");
_Static_assert(SW_SAME(swhip_stream, hipStream_t), "hipStream_t");
_Static_assert(SW_SAME(swhip_event, hipEvent_t), "hipEvent_t");
_Static_assert(SW_SAME(swhip_module, hipModule_t), "hipModule_t");
_Static_assert(SW_SAME(swhip_function, hipFunction_t), "hipFunction_t");
_Static_assert(SW_SAME(swhip_mempool, hipMemPool_t), "hipMemPool_t");
_Static_assert(SW_SAME(swhip_mempool_attr, hipMemPoolAttr), "hipMemPoolAttr");
_Static_assert(SW_SAME(swhiprtc_result, hiprtcResult), "hiprtcResult");
_Static_assert(SW_SAME(swhiprtc_program, hiprtcProgram), "hiprtcProgram");

#define SW_FIELD(ours, theirs)                                                \
    _Static_assert(offsetof(swhip_mempool_props, ours) ==                     \
                           offsetof(hipMemPoolProps, theirs) &&               \
                       sizeof(((swhip_mempool_props *)0)->ours) ==            \
                           sizeof(((hipMemPoolProps *)0)->theirs),            \
                   "hipMemPoolProps." #theirs)
_Static_assert(sizeof(swhip_mempool_props) == sizeof(hipMemPoolProps),
               "sizeof(hipMemPoolProps)");
SW_FIELD(alloc_type, allocType);
SW_FIELD(handle_types, handleTypes);
SW_FIELD(location, location);
SW_FIELD(location.type, location.type);
SW_FIELD(location.id, location.id);
SW_FIELD(win32_security_attributes, win32SecurityAttributes);

/* hipDeviceProp_t: the members read, where the backend reads them.  (In
 * ROCm 6 headers the struct of this name is the R0600 layout and the
 * public function maps to hipGetDevicePropertiesR0600; the backend
 * resolves the legacy export, whose layout is the ROCm 5 one checked
 * here: only build against ROCm 5 headers, as Debian's are.) */
#if HIP_VERSION_MAJOR < 6
_Static_assert(sizeof(hipDeviceProp_t) == SWHIP_PROPS_SIZE,
               "sizeof(hipDeviceProp_t)");
_Static_assert(SWHIP_PROPS_BUFFER >= 2 * SWHIP_PROPS_SIZE,
               "room for later members");
_Static_assert(offsetof(hipDeviceProp_t, name) == SWHIP_PROP_NAME &&
                   sizeof(((hipDeviceProp_t *)0)->name) == 256,
               "hipDeviceProp_t.name");
_Static_assert(offsetof(hipDeviceProp_t, totalGlobalMem) ==
                       SWHIP_PROP_TOTAL_MEM &&
                   sizeof(((hipDeviceProp_t *)0)->totalGlobalMem) ==
                       sizeof(size_t),
               "hipDeviceProp_t.totalGlobalMem");
_Static_assert(offsetof(hipDeviceProp_t, multiProcessorCount) ==
                       SWHIP_PROP_MP_COUNT &&
                   sizeof(((hipDeviceProp_t *)0)->multiProcessorCount) ==
                       sizeof(int),
               "hipDeviceProp_t.multiProcessorCount");
_Static_assert(offsetof(hipDeviceProp_t, gcnArchName) ==
                       SWHIP_PROP_GCN_ARCH_NAME &&
                   sizeof(((hipDeviceProp_t *)0)->gcnArchName) == 256,
               "hipDeviceProp_t.gcnArchName");
_Static_assert(SW_SAME(__typeof__(&hipGetDeviceProperties),
                       hipError_t (*)(hipDeviceProp_t *, int)),
               "hipGetDeviceProperties");
#define SW_PROPS_CHECKS 6
#else
#define SW_PROPS_CHECKS 0
#endif

/* ------------------------------------------------------------------------
 * Functions
 * ---------------------------------------------------------------------- */

#define SW_EXCEPT_hipGetDeviceProperties ,
#define SW_EXCEPT_hipMemPoolCreate ,
#define SW_SECOND(a, b, ...) b
#define SW_SECOND_(args) SW_SECOND args
#define SW_IS_EXCEPT_(x) SW_SECOND_((x 1, 0, ~))
#define SW_IS_EXCEPT(sym) SW_IS_EXCEPT_(SW_EXCEPT_##sym)

#define SW_CHECK_FN(kind, ret, name, params)                                  \
    _Static_assert(SW_IS_EXCEPT(name) ||                                      \
                       SW_SAME(swhip_##name##_fn, __typeof__(&name)),         \
                   "hip_api.h: " #name " does not match the HIP headers");
SWHIP_FUNCS(SW_CHECK_FN)
SWHIP_RTC_FUNCS(SW_CHECK_FN)

_Static_assert(SW_SAME(__typeof__(&hipMemPoolCreate),
                       hipError_t (*)(hipMemPool_t *,
                                      const hipMemPoolProps *)),
               "hipMemPoolCreate");
_Static_assert(SW_SAME(swhip_hipMemPoolCreate_fn,
                       swhip_error (*)(swhip_mempool *,
                                       const swhip_mempool_props *)),
               "swhip_hipMemPoolCreate_fn");
_Static_assert(SW_SAME(swhip_hipGetDeviceProperties_fn,
                       swhip_error (*)(void *, int)),
               "swhip_hipGetDeviceProperties_fn");

/* ------------------------------------------------------------------------
 * Constants
 * ---------------------------------------------------------------------- */

#define SW_CHECK_CONST(name, value)                                           \
    _Static_assert((long long)SWHIP_##name == (long long)(name) &&            \
                       (long long)(value) == (long long)(name),               \
                   "hip_api.h: " #name " is not the HIP headers'");
SWHIP_ERRORS(SW_CHECK_CONST)
SWHIP_CONSTANTS(SW_CHECK_CONST)

int sw_test_hip_sigcheck_count(void)
{
    int n = SW_PROPS_CHECKS + 11 + 7 + 3;
#define SW_COUNT(...) n++;
    SWHIP_FUNCS(SW_COUNT)
    SWHIP_RTC_FUNCS(SW_COUNT)
    SWHIP_ERRORS(SW_COUNT)
    SWHIP_CONSTANTS(SW_COUNT)
#undef SW_COUNT
    return n;
}

int sw_test_hip_sigcheck_version(void) { return HIP_VERSION; }
