/*
 * hip_api.h -- the part of the HIP runtime API and of hipRTC that spillway
 * uses, declared here so that building spillway needs no ROCm headers (the
 * libraries are loaded at run time with dlopen; see hip.c, hip_rtc.c).
 *
 * Every name is prefixed (swhip_, SWHIP_) so that this header can be
 * included next to ROCm's hip_runtime_api.h and hiprtc.h:
 * tests/hip/sigcheck.c does exactly that (against Debian's libamdhip64-dev)
 * and checks, at compile time, every function-pointer type below against
 * the header's prototype, every constant against its enumerator, the pool
 * properties against hipMemPoolProps and the offsets read from
 * hipDeviceProp_t against the struct.  Drift fails the build wherever the
 * headers are installed.
 *
 * Rules for editing:
 *  - A function is one line of SWHIP_FUNCS or SWHIP_RTC_FUNCS:
 *    X(kind, return type, name, (parameters)); kind 1: required (a runtime
 *    without it is unusable), 0: optional (the backend adapts).
 *  - Types are the ABI types the headers resolve to: enums of non-negative
 *    values are `unsigned int`, handles are pointers to the same struct
 *    tags the headers use, hipDeviceptr_t is void *.
 *  - HIP's own symbols are unversioned (the runtime's ELF symbol versions,
 *    hip_4.2 and later, are what dlsym finds by default).
 *  - hipGetDeviceProperties is the legacy export, whose struct is the
 *    ROCm 5 layout (hipDeviceProp_tR0000 in ROCm 6, which maps the public
 *    name to hipGetDevicePropertiesR0600): the backend reads three members
 *    at the offsets below from a buffer larger than that struct.
 *  - Only what the backend uses is declared.
 */
#ifndef SW_HIP_API_H
#define SW_HIP_API_H

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------
 * Types
 * ---------------------------------------------------------------------- */

typedef unsigned int swhip_error;                /* hipError_t */
typedef int swhip_device;                        /* hipDevice_t */
typedef void *swhip_deviceptr;                   /* hipDeviceptr_t */
typedef struct ihipStream_t *swhip_stream;       /* hipStream_t */
typedef struct ihipEvent_t *swhip_event;         /* hipEvent_t */
typedef struct ihipModule_t *swhip_module;       /* hipModule_t */
typedef struct ihipModuleSymbol_t *swhip_function; /* hipFunction_t */
typedef struct ihipMemPoolHandle_t *swhip_mempool; /* hipMemPool_t */
typedef unsigned int swhip_mempool_attr;         /* hipMemPoolAttr */

/* hipMemPoolProps: 88 bytes, the same in ROCm 5 (reserved[64]) and 6
 * (maxSize, reserved[56]); zero-initialized, only the first three set. */
typedef struct swhip_mempool_props {
    unsigned int alloc_type;   /* allocType: hipMemAllocationType */
    unsigned int handle_types; /* handleTypes */
    struct {
        unsigned int type;     /* hipMemLocationType */
        int id;
    } location;                /* hipMemLocation */
    void *win32_security_attributes;
    unsigned char reserved[64];
} swhip_mempool_props;

/* What hipGetDeviceProperties fills: the ROCm 5 hipDeviceProp_t (792
 * bytes in 5.2; members only ever appended), read at these offsets from a
 * buffer of SWHIP_PROPS_BUFFER bytes.  sigcheck.c checks each against
 * offsetof(hipDeviceProp_t, ...) and the size against sizeof. */
#define SWHIP_PROPS_SIZE 792
#define SWHIP_PROPS_BUFFER 4096
#define SWHIP_PROP_NAME 0            /* char name[256] */
#define SWHIP_PROP_TOTAL_MEM 256     /* size_t totalGlobalMem */
#define SWHIP_PROP_MP_COUNT 336      /* int multiProcessorCount */
#define SWHIP_PROP_GCN_ARCH_NAME 396 /* char gcnArchName[256] */

typedef unsigned int swhiprtc_result;              /* hiprtcResult */
typedef struct _hiprtcProgram *swhiprtc_program;   /* hiprtcProgram */

/* ------------------------------------------------------------------------
 * Constants (checked against the headers by sigcheck.c)
 * ---------------------------------------------------------------------- */

/* hipError_t codes with their names, for messages when the runtime cannot
 * name one itself. */
#define SWHIP_ERRORS(X)                                                       \
    X(hipSuccess, 0)                                                          \
    X(hipErrorInvalidValue, 1)                                                \
    X(hipErrorOutOfMemory, 2)                                                 \
    X(hipErrorNotInitialized, 3)                                              \
    X(hipErrorDeinitialized, 4)                                               \
    X(hipErrorInvalidConfiguration, 9)                                        \
    X(hipErrorNoDevice, 100)                                                  \
    X(hipErrorInvalidDevice, 101)                                             \
    X(hipErrorInvalidImage, 200)                                              \
    X(hipErrorInvalidContext, 201)                                            \
    X(hipErrorNoBinaryForGpu, 209)                                            \
    X(hipErrorInvalidSource, 300)                                             \
    X(hipErrorFileNotFound, 301)                                              \
    X(hipErrorSharedObjectSymbolNotFound, 302)                                \
    X(hipErrorSharedObjectInitFailed, 303)                                    \
    X(hipErrorOperatingSystem, 304)                                           \
    X(hipErrorInvalidHandle, 400)                                             \
    X(hipErrorNotFound, 500)                                                  \
    X(hipErrorNotReady, 600)                                                  \
    X(hipErrorIllegalAddress, 700)                                            \
    X(hipErrorLaunchOutOfResources, 701)                                      \
    X(hipErrorLaunchTimeOut, 702)                                             \
    X(hipErrorLaunchFailure, 719)                                             \
    X(hipErrorNotSupported, 801)                                              \
    X(hipErrorUnknown, 999)

enum {
#define SWHIP__ERROR_ENUM(name, value) SWHIP_##name = value,
    SWHIP_ERRORS(SWHIP__ERROR_ENUM)
#undef SWHIP__ERROR_ENUM
};

/* Other enumerators and flags: X(header name, value). */
#define SWHIP_CONSTANTS(X)                                                    \
    X(hipMemPoolAttrReleaseThreshold, 4)                                      \
    X(hipMemPoolAttrReservedMemCurrent, 5)                                    \
    X(hipMemPoolAttrUsedMemCurrent, 7)                                        \
    X(hipMemAllocationTypePinned, 1)                                          \
    X(hipMemHandleTypeNone, 0)                                                \
    X(hipMemLocationTypeDevice, 1)                                            \
    X(hipStreamNonBlocking, 1)                                                \
    X(hipEventDisableTiming, 2)                                               \
    X(HIPRTC_SUCCESS, 0)                                                      \
    X(HIPRTC_ERROR_OUT_OF_MEMORY, 1)                                          \
    X(HIPRTC_ERROR_INVALID_OPTION, 5)                                         \
    X(HIPRTC_ERROR_COMPILATION, 6)

enum {
#define SWHIP__CONST_ENUM(name, value) SWHIP_##name = value,
    SWHIP_CONSTANTS(SWHIP__CONST_ENUM)
#undef SWHIP__CONST_ENUM
};

/* ------------------------------------------------------------------------
 * Runtime functions: X(kind, return type, name, (parameters)).
 * ---------------------------------------------------------------------- */

#define SWHIP_FUNCS(X)                                                        \
    X(1, swhip_error, hipInit, (unsigned int flags))                          \
    X(1, swhip_error, hipDriverGetVersion, (int *version))                    \
    X(1, swhip_error, hipGetDeviceCount, (int *count))                        \
    X(1, swhip_error, hipGetDevice, (int *device))                            \
    X(1, swhip_error, hipSetDevice, (int device))                             \
    X(1, swhip_error, hipDeviceGetName,                                       \
      (char *name, int len, swhip_device device))                             \
    X(1, swhip_error, hipDeviceTotalMem, (size_t *bytes, swhip_device device))\
    X(1, swhip_error, hipMemGetInfo, (size_t *free, size_t *total))           \
    X(1, swhip_error, hipMalloc, (void **ptr, size_t size))                   \
    X(1, swhip_error, hipFree, (void *ptr))                                   \
    X(1, swhip_error, hipMemcpyHtoDAsync,                                     \
      (swhip_deviceptr dst, void *src, size_t bytes, swhip_stream stream))    \
    X(1, swhip_error, hipMemcpyDtoHAsync,                                     \
      (void *dst, swhip_deviceptr src, size_t bytes, swhip_stream stream))    \
    X(1, swhip_error, hipMemcpyDtoDAsync,                                     \
      (swhip_deviceptr dst, swhip_deviceptr src, size_t bytes,                \
       swhip_stream stream))                                                  \
    X(1, swhip_error, hipMemsetD8Async,                                       \
      (swhip_deviceptr dst, unsigned char value, size_t count,                \
       swhip_stream stream))                                                  \
    X(1, swhip_error, hipMemsetD16Async,                                      \
      (swhip_deviceptr dst, unsigned short value, size_t count,               \
       swhip_stream stream))                                                  \
    X(1, swhip_error, hipMemsetD32Async,                                      \
      (swhip_deviceptr dst, int value, size_t count, swhip_stream stream))    \
    X(1, swhip_error, hipStreamCreateWithFlags,                               \
      (swhip_stream *stream, unsigned int flags))                             \
    X(1, swhip_error, hipStreamDestroy, (swhip_stream stream))                \
    X(1, swhip_error, hipStreamSynchronize, (swhip_stream stream))            \
    X(0, swhip_error, hipStreamGetDevice,                                     \
      (swhip_stream stream, swhip_device *device))                            \
    X(1, swhip_error, hipStreamWaitEvent,                                     \
      (swhip_stream stream, swhip_event event, unsigned int flags))           \
    X(1, swhip_error, hipEventCreateWithFlags,                                \
      (swhip_event *event, unsigned int flags))                               \
    X(1, swhip_error, hipEventRecord, (swhip_event event, swhip_stream stream))\
    X(1, swhip_error, hipEventQuery, (swhip_event event))                     \
    X(1, swhip_error, hipEventSynchronize, (swhip_event event))               \
    X(1, swhip_error, hipEventDestroy, (swhip_event event))                   \
    X(1, swhip_error, hipModuleLoadData,                                      \
      (swhip_module *module, const void *image))                              \
    X(1, swhip_error, hipModuleUnload, (swhip_module module))                 \
    X(1, swhip_error, hipModuleGetFunction,                                   \
      (swhip_function *function, swhip_module module, const char *name))      \
    X(1, swhip_error, hipModuleLaunchKernel,                                  \
      (swhip_function f, unsigned int grid_x, unsigned int grid_y,            \
       unsigned int grid_z, unsigned int block_x, unsigned int block_y,       \
       unsigned int block_z, unsigned int shared_bytes, swhip_stream stream,  \
       void **params, void **extra))                                          \
    X(0, const char *, hipGetErrorName, (swhip_error error))                  \
    X(0, const char *, hipGetErrorString, (swhip_error error))                \
    X(0, swhip_error, hipRuntimeGetVersion, (int *version))                   \
    X(0, swhip_error, hipGetDeviceProperties, (void *props, int device))      \
    X(0, swhip_error, hipMallocFromPoolAsync,                                 \
      (void **ptr, size_t size, swhip_mempool pool, swhip_stream stream))     \
    X(0, swhip_error, hipFreeAsync, (void *ptr, swhip_stream stream))         \
    X(0, swhip_error, hipMemPoolCreate,                                       \
      (swhip_mempool *pool, const swhip_mempool_props *props))                \
    X(0, swhip_error, hipMemPoolDestroy, (swhip_mempool pool))                \
    X(0, swhip_error, hipMemPoolSetAttribute,                                 \
      (swhip_mempool pool, swhip_mempool_attr attr, void *value))             \
    X(0, swhip_error, hipMemPoolGetAttribute,                                 \
      (swhip_mempool pool, swhip_mempool_attr attr, void *value))             \
    X(0, swhip_error, hipMemPoolTrimTo, (swhip_mempool pool, size_t keep))

/* hipRTC (libhiprtc, or the runtime itself before ROCm 5.3). */
#define SWHIP_RTC_FUNCS(X)                                                    \
    X(1, const char *, hiprtcGetErrorString, (swhiprtc_result result))        \
    X(1, swhiprtc_result, hiprtcCreateProgram,                                \
      (swhiprtc_program *prog, const char *src, const char *name,             \
       int num_headers, const char **headers, const char **include_names))    \
    X(1, swhiprtc_result, hiprtcDestroyProgram, (swhiprtc_program *prog))     \
    X(1, swhiprtc_result, hiprtcCompileProgram,                               \
      (swhiprtc_program prog, int num_options, const char **options))         \
    X(1, swhiprtc_result, hiprtcGetProgramLogSize,                            \
      (swhiprtc_program prog, size_t *size))                                  \
    X(1, swhiprtc_result, hiprtcGetProgramLog,                                \
      (swhiprtc_program prog, char *log))                                     \
    X(1, swhiprtc_result, hiprtcGetCodeSize,                                  \
      (swhiprtc_program prog, size_t *size))                                  \
    X(1, swhiprtc_result, hiprtcGetCode, (swhiprtc_program prog, char *code)) \
    X(0, swhiprtc_result, hiprtcVersion, (int *major, int *minor))

/* One function-pointer type per entry: swhip_<name>_fn. */
#define SWHIP__TYPEDEF(kind, ret, name, params) typedef ret(*swhip_##name##_fn) params;
SWHIP_FUNCS(SWHIP__TYPEDEF)
SWHIP_RTC_FUNCS(SWHIP__TYPEDEF)
#undef SWHIP__TYPEDEF

/* The resolved entry points (NULL where an optional one is missing). */
typedef struct swhip_runtime {
#define SWHIP__MEMBER(kind, ret, name, params) swhip_##name##_fn name;
    SWHIP_FUNCS(SWHIP__MEMBER)
#undef SWHIP__MEMBER
} swhip_runtime;

typedef struct swhip_rtc {
#define SWHIP__MEMBER(kind, ret, name, params) swhip_##name##_fn name;
    SWHIP_RTC_FUNCS(SWHIP__MEMBER)
#undef SWHIP__MEMBER
} swhip_rtc;

#endif /* SW_HIP_API_H */
