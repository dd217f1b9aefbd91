/*
 * cuda_api.h -- the part of the CUDA driver API and of NVRTC that spillway
 * uses, declared here so that building spillway needs no CUDA headers (the
 * libraries are loaded at run time with dlopen; see cuda.c).
 *
 * Every name is prefixed (swcu_, SWCU_, swnv_) so that this header can be
 * included next to the toolkit's cuda.h and nvrtc.h: tests/cuda/sigcheck.c
 * does exactly that and checks, at compile time, every function-pointer
 * type below against the toolkit's prototype, every constant against its
 * enumerator and the one struct against its layout, and, when it runs, that
 * each versioned symbol name is the one cuda.h maps the public name to (as
 * `#define cuMemAlloc cuMemAlloc_v2`).  Signature drift therefore fails the
 * build or the test suite wherever the toolkit is installed.
 *
 * Rules for editing:
 *  - A function is one line of SWCU_DRIVER_FUNCS or SWCU_NVRTC_FUNCS; the
 *    symbol resolved is the versioned one cuda.h's macros select for the
 *    legacy default stream (no _ptsz/_ptds: spillway never uses stream 0).
 *  - Types are the ABI types cuda.h's resolve to: enums of non-negative
 *    values are `unsigned int` (what GCC and Clang make them), handles are
 *    pointers to the same struct tags cuda.h uses.
 *  - Only what the backend or bench/gpu/ uses is declared.
 */
#ifndef SW_CUDA_API_H
#define SW_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------
 * Types
 * ---------------------------------------------------------------------- */

typedef unsigned int swcu_result;           /* CUresult */
typedef int swcu_device;                    /* CUdevice */
#if defined(__LP64__) || defined(_WIN64)
typedef unsigned long long swcu_deviceptr;  /* CUdeviceptr */
#else
typedef unsigned int swcu_deviceptr;
#endif
typedef struct CUctx_st *swcu_context;      /* CUcontext */
typedef struct CUmod_st *swcu_module;       /* CUmodule */
typedef struct CUfunc_st *swcu_function;    /* CUfunction */
typedef struct CUstream_st *swcu_stream;    /* CUstream */
typedef struct CUevent_st *swcu_event;      /* CUevent */
typedef struct CUmemPoolHandle_st *swcu_mempool; /* CUmemoryPool */
typedef unsigned int swcu_device_attribute;  /* CUdevice_attribute */
typedef unsigned int swcu_mempool_attribute; /* CUmemPool_attribute */

/* CUmemPoolProps (CUmemPoolProps_v1).  Its size has been 88 bytes since
 * CUDA 11.2; later toolkits carved maxSize and usage out of the reserved
 * bytes, which must be zero, so zero-initializing and setting the first
 * three members is right for every driver.  sigcheck.c checks the size
 * and the offset and size of every member against cuda.h. */
typedef struct swcu_mempool_props {
    unsigned int alloc_type;   /* allocType: CUmemAllocationType */
    unsigned int handle_types; /* handleTypes: CUmemAllocationHandleType */
    struct {
        unsigned int type;     /* CUmemLocationType */
        int id;
    } location;                /* CUmemLocation */
    void *win32_security_attributes;
    size_t max_size;           /* maxSize (CUDA 12.2+; 0 = default) */
    unsigned short usage;      /* usage (CUDA 12.x+; 0) */
    unsigned char reserved[54];
} swcu_mempool_props;

typedef unsigned int swnv_result;              /* nvrtcResult */
typedef struct _nvrtcProgram *swnv_program;    /* nvrtcProgram */

/* ------------------------------------------------------------------------
 * Constants (the values are checked against cuda.h by sigcheck.c)
 * ---------------------------------------------------------------------- */

/* CUresult codes with their names, for messages when the driver cannot
 * name a code itself (no driver, the toolkit's stub library, or a code
 * returned before cuGetErrorName could be resolved).  Only codes that exist
 * since CUDA 11.2, so that the check passes against any toolkit since. */
#define SWCU_ERRORS(X)                                                        \
    X(CUDA_SUCCESS, 0)                                                        \
    X(CUDA_ERROR_INVALID_VALUE, 1)                                            \
    X(CUDA_ERROR_OUT_OF_MEMORY, 2)                                            \
    X(CUDA_ERROR_NOT_INITIALIZED, 3)                                          \
    X(CUDA_ERROR_DEINITIALIZED, 4)                                            \
    X(CUDA_ERROR_STUB_LIBRARY, 34)                                            \
    X(CUDA_ERROR_DEVICE_UNAVAILABLE, 46)                                      \
    X(CUDA_ERROR_NO_DEVICE, 100)                                              \
    X(CUDA_ERROR_INVALID_DEVICE, 101)                                         \
    X(CUDA_ERROR_DEVICE_NOT_LICENSED, 102)                                    \
    X(CUDA_ERROR_INVALID_IMAGE, 200)                                          \
    X(CUDA_ERROR_INVALID_CONTEXT, 201)                                        \
    X(CUDA_ERROR_NO_BINARY_FOR_GPU, 209)                                      \
    X(CUDA_ERROR_ECC_UNCORRECTABLE, 214)                                      \
    X(CUDA_ERROR_INVALID_PTX, 218)                                            \
    X(CUDA_ERROR_NVLINK_UNCORRECTABLE, 220)                                   \
    X(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, 221)                                 \
    X(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, 222)                                \
    X(CUDA_ERROR_JIT_COMPILATION_DISABLED, 223)                               \
    X(CUDA_ERROR_INVALID_SOURCE, 300)                                         \
    X(CUDA_ERROR_FILE_NOT_FOUND, 301)                                         \
    X(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, 302)                         \
    X(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, 303)                              \
    X(CUDA_ERROR_OPERATING_SYSTEM, 304)                                       \
    X(CUDA_ERROR_INVALID_HANDLE, 400)                                         \
    X(CUDA_ERROR_ILLEGAL_STATE, 401)                                          \
    X(CUDA_ERROR_NOT_FOUND, 500)                                              \
    X(CUDA_ERROR_NOT_READY, 600)                                              \
    X(CUDA_ERROR_ILLEGAL_ADDRESS, 700)                                        \
    X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, 701)                                \
    X(CUDA_ERROR_LAUNCH_TIMEOUT, 702)                                         \
    X(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, 708)                                 \
    X(CUDA_ERROR_CONTEXT_IS_DESTROYED, 709)                                   \
    X(CUDA_ERROR_ASSERT, 710)                                                 \
    X(CUDA_ERROR_HARDWARE_STACK_ERROR, 714)                                   \
    X(CUDA_ERROR_ILLEGAL_INSTRUCTION, 715)                                    \
    X(CUDA_ERROR_MISALIGNED_ADDRESS, 716)                                     \
    X(CUDA_ERROR_INVALID_ADDRESS_SPACE, 717)                                  \
    X(CUDA_ERROR_INVALID_PC, 718)                                             \
    X(CUDA_ERROR_LAUNCH_FAILED, 719)                                          \
    X(CUDA_ERROR_NOT_PERMITTED, 800)                                          \
    X(CUDA_ERROR_NOT_SUPPORTED, 801)                                          \
    X(CUDA_ERROR_SYSTEM_NOT_READY, 802)                                       \
    X(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, 803)                                 \
    X(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, 804)                         \
    X(CUDA_ERROR_TIMEOUT, 909)                                                \
    X(CUDA_ERROR_UNKNOWN, 999)

enum {
#define SWCU__ERROR_ENUM(name, value) SWCU_##name = value,
    SWCU_ERRORS(SWCU__ERROR_ENUM)
#undef SWCU__ERROR_ENUM
};

/* Other enumerators and flags: X(cuda.h name, value). */
#define SWCU_CONSTANTS(X)                                                     \
    X(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 16)                           \
    X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 75)                       \
    X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 76)                       \
    X(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 115)                        \
    X(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 4)                                   \
    X(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, 5)                                \
    X(CU_MEMPOOL_ATTR_USED_MEM_CURRENT, 7)                                    \
    X(CU_MEM_ALLOCATION_TYPE_PINNED, 1)                                       \
    X(CU_MEM_HANDLE_TYPE_NONE, 0)                                             \
    X(CU_MEM_LOCATION_TYPE_DEVICE, 1)                                         \
    X(CU_STREAM_NON_BLOCKING, 1)                                              \
    X(CU_EVENT_BLOCKING_SYNC, 1)                                              \
    X(CU_EVENT_DISABLE_TIMING, 2)                                             \
    X(CU_MEMHOSTALLOC_PORTABLE, 1)                                            \
    X(NVRTC_SUCCESS, 0)

enum {
#define SWCU__CONST_ENUM(name, value) SWCU_##name = value,
    SWCU_CONSTANTS(SWCU__CONST_ENUM)
#undef SWCU__CONST_ENUM
};

/* ------------------------------------------------------------------------
 * Driver functions: X(kind, public name, symbol, (parameters)), all
 * returning CUresult.  kind: 1 required by the backend (a driver without
 * it is unusable), 0 optional (the backend adapts: pools, names), 2 used
 * by bench/gpu/ only (the backend does not resolve it).
 * ---------------------------------------------------------------------- */

#define SWCU_DRIVER_FUNCS(X)                                                  \
    X(1, cuInit, cuInit, (unsigned int flags))                                \
    X(1, cuDriverGetVersion, cuDriverGetVersion, (int *version))              \
    X(1, cuDeviceGetCount, cuDeviceGetCount, (int *count))                    \
    X(1, cuDeviceGet, cuDeviceGet, (swcu_device *device, int ordinal))        \
    X(1, cuDeviceGetName, cuDeviceGetName,                                    \
      (char *name, int len, swcu_device dev))                                 \
    X(1, cuDeviceTotalMem, cuDeviceTotalMem_v2,                               \
      (size_t *bytes, swcu_device dev))                                       \
    X(1, cuDeviceGetAttribute, cuDeviceGetAttribute,                          \
      (int *value, swcu_device_attribute attrib, swcu_device dev))            \
    X(1, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain,                  \
      (swcu_context *pctx, swcu_device dev))                                  \
    X(1, cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2,             \
      (swcu_device dev))                                                      \
    X(1, cuCtxGetCurrent, cuCtxGetCurrent, (swcu_context *pctx))              \
    X(1, cuCtxPushCurrent, cuCtxPushCurrent_v2, (swcu_context ctx))           \
    X(1, cuCtxPopCurrent, cuCtxPopCurrent_v2, (swcu_context *pctx))           \
    X(1, cuMemGetInfo, cuMemGetInfo_v2, (size_t *free, size_t *total))        \
    X(1, cuMemAlloc, cuMemAlloc_v2, (swcu_deviceptr *dptr, size_t bytesize))  \
    X(1, cuMemFree, cuMemFree_v2, (swcu_deviceptr dptr))                      \
    X(1, cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2,                             \
      (swcu_deviceptr dst, const void *src, size_t bytes,                     \
       swcu_stream stream))                                                   \
    X(1, cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2,                             \
      (void *dst, swcu_deviceptr src, size_t bytes, swcu_stream stream))      \
    X(1, cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2,                             \
      (swcu_deviceptr dst, swcu_deviceptr src, size_t bytes,                  \
       swcu_stream stream))                                                   \
    X(1, cuMemsetD8Async, cuMemsetD8Async,                                    \
      (swcu_deviceptr dst, unsigned char value, size_t n,                     \
       swcu_stream stream))                                                   \
    X(1, cuMemsetD16Async, cuMemsetD16Async,                                  \
      (swcu_deviceptr dst, unsigned short value, size_t n,                    \
       swcu_stream stream))                                                   \
    X(1, cuMemsetD32Async, cuMemsetD32Async,                                  \
      (swcu_deviceptr dst, unsigned int value, size_t n,                      \
       swcu_stream stream))                                                   \
    X(1, cuStreamCreate, cuStreamCreate,                                      \
      (swcu_stream *stream, unsigned int flags))                              \
    X(1, cuStreamDestroy, cuStreamDestroy_v2, (swcu_stream stream))           \
    X(1, cuStreamSynchronize, cuStreamSynchronize, (swcu_stream stream))      \
    X(1, cuStreamQuery, cuStreamQuery, (swcu_stream stream))                  \
    X(0, cuStreamGetCtx, cuStreamGetCtx,                                      \
      (swcu_stream stream, swcu_context *pctx))                               \
    X(1, cuStreamWaitEvent, cuStreamWaitEvent,                                \
      (swcu_stream stream, swcu_event event, unsigned int flags))             \
    X(1, cuEventCreate, cuEventCreate,                                        \
      (swcu_event *event, unsigned int flags))                                \
    X(1, cuEventRecord, cuEventRecord,                                        \
      (swcu_event event, swcu_stream stream))                                 \
    X(1, cuEventQuery, cuEventQuery, (swcu_event event))                      \
    X(1, cuEventSynchronize, cuEventSynchronize, (swcu_event event))          \
    X(1, cuEventDestroy, cuEventDestroy_v2, (swcu_event event))               \
    X(0, cuEventElapsedTime, cuEventElapsedTime_v2,                           \
      (float *ms, swcu_event start, swcu_event end))                          \
    X(1, cuModuleLoadData, cuModuleLoadData,                                  \
      (swcu_module *module, const void *image))                               \
    X(1, cuModuleUnload, cuModuleUnload, (swcu_module module))                \
    X(1, cuModuleGetFunction, cuModuleGetFunction,                            \
      (swcu_function *function, swcu_module module, const char *name))        \
    X(1, cuLaunchKernel, cuLaunchKernel,                                      \
      (swcu_function f, unsigned int grid_x, unsigned int grid_y,             \
       unsigned int grid_z, unsigned int block_x, unsigned int block_y,       \
       unsigned int block_z, unsigned int shared_bytes, swcu_stream stream,   \
       void **params, void **extra))                                          \
    X(0, cuGetErrorName, cuGetErrorName,                                      \
      (swcu_result error, const char **name))                                 \
    X(0, cuGetErrorString, cuGetErrorString,                                  \
      (swcu_result error, const char **text))                                 \
    X(0, cuDeviceGetPCIBusId, cuDeviceGetPCIBusId,                            \
      (char *bus_id, int len, swcu_device dev))                               \
    X(0, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync,                    \
      (swcu_deviceptr *dptr, size_t bytesize, swcu_mempool pool,              \
       swcu_stream stream))                                                   \
    X(0, cuMemFreeAsync, cuMemFreeAsync,                                      \
      (swcu_deviceptr dptr, swcu_stream stream))                              \
    X(0, cuMemPoolCreate, cuMemPoolCreate,                                    \
      (swcu_mempool *pool, const swcu_mempool_props *props))                  \
    X(0, cuMemPoolDestroy, cuMemPoolDestroy, (swcu_mempool pool))             \
    X(0, cuMemPoolSetAttribute, cuMemPoolSetAttribute,                        \
      (swcu_mempool pool, swcu_mempool_attribute attr, void *value))          \
    X(0, cuMemPoolGetAttribute, cuMemPoolGetAttribute,                        \
      (swcu_mempool pool, swcu_mempool_attribute attr, void *value))          \
    X(0, cuMemPoolTrimTo, cuMemPoolTrimTo,                                    \
      (swcu_mempool pool, size_t min_bytes_to_keep))                          \
    X(0, cuMemHostAlloc, cuMemHostAlloc,                                      \
      (void **p, size_t bytesize, unsigned int flags))                        \
    X(0, cuMemFreeHost, cuMemFreeHost, (void *p))                             \
    X(2, cuMemcpyHtoD, cuMemcpyHtoD_v2,                                       \
      (swcu_deviceptr dst, const void *src, size_t bytes))

/* NVRTC: X(kind, return type, name, (parameters)).  kind as above. */
#define SWCU_NVRTC_FUNCS(X)                                                   \
    X(1, const char *, nvrtcGetErrorString, (swnv_result result))             \
    X(1, swnv_result, nvrtcVersion, (int *major, int *minor))                 \
    X(1, swnv_result, nvrtcCreateProgram,                                     \
      (swnv_program *prog, const char *src, const char *name,                 \
       int num_headers, const char *const *headers,                           \
       const char *const *include_names))                                     \
    X(1, swnv_result, nvrtcDestroyProgram, (swnv_program *prog))              \
    X(1, swnv_result, nvrtcCompileProgram,                                    \
      (swnv_program prog, int num_options, const char *const *options))       \
    X(1, swnv_result, nvrtcGetPTXSize, (swnv_program prog, size_t *size))     \
    X(1, swnv_result, nvrtcGetPTX, (swnv_program prog, char *ptx))            \
    X(1, swnv_result, nvrtcGetProgramLogSize,                                 \
      (swnv_program prog, size_t *size))                                      \
    X(1, swnv_result, nvrtcGetProgramLog, (swnv_program prog, char *log))     \
    X(0, swnv_result, nvrtcGetCUBINSize, (swnv_program prog, size_t *size))   \
    X(0, swnv_result, nvrtcGetCUBIN, (swnv_program prog, char *cubin))        \
    X(0, swnv_result, nvrtcGetNumSupportedArchs, (int *count))                \
    X(0, swnv_result, nvrtcGetSupportedArchs, (int *archs))

/* One function-pointer type per entry: swcu_<symbol>_fn. */
#define SWCU__DRIVER_TYPEDEF(kind, pub, sym, params)                          \
    typedef swcu_result(*swcu_##sym##_fn) params;
SWCU_DRIVER_FUNCS(SWCU__DRIVER_TYPEDEF)
#undef SWCU__DRIVER_TYPEDEF

#define SWCU__NVRTC_TYPEDEF(kind, ret, name, params)                          \
    typedef ret(*swcu_##name##_fn) params;
SWCU_NVRTC_FUNCS(SWCU__NVRTC_TYPEDEF)
#undef SWCU__NVRTC_TYPEDEF

/* The resolved entry points (NULL where an optional one is missing). */
typedef struct swcu_driver {
#define SWCU__DRIVER_MEMBER(kind, pub, sym, params) swcu_##sym##_fn sym;
    SWCU_DRIVER_FUNCS(SWCU__DRIVER_MEMBER)
#undef SWCU__DRIVER_MEMBER
} swcu_driver;

typedef struct swcu_nvrtc {
#define SWCU__NVRTC_MEMBER(kind, ret, name, params) swcu_##name##_fn name;
    SWCU_NVRTC_FUNCS(SWCU__NVRTC_MEMBER)
#undef SWCU__NVRTC_MEMBER
} swcu_nvrtc;

#endif /* SW_CUDA_API_H */
