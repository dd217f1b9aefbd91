/*
 * ze_api.h -- the part of oneAPI Level Zero (core and Sysman) that spillway
 * uses, declared here so that building spillway needs no Level Zero
 * headers (the loader, libze_loader.so.1, is dlopen'ed at run time; see
 * ze.c).
 *
 * Every name is prefixed (swze_, SWZE_) so that this header can be included
 * next to level_zero/ze_api.h and zes_api.h: tests/ze/sigcheck.c does that
 * (against Debian's libze-dev) and checks, at compile time, every
 * function-pointer type against the header's prototype, every constant
 * against its enumerator and every struct below against the header's
 * layout, member by member.
 *
 * Rules for editing:
 *  - A function is one line of SWZE_FUNCS: X(kind, name, (parameters)), all
 *    returning ze_result_t; kind 1: required, 0: optional (the backend
 *    adapts), 3: optional and newer than the headers the build is checked
 *    against (Debian's are the 1.4 specification; zesInit and the Sysman
 *    enumeration around it came with 1.5, the command-list queries
 *    zeCommandListGetContextHandle and friends with 1.9), so not checked
 *    there.
 *  - Types are the ABI types: enums and flags are uint32_t, ze_bool_t is
 *    uint8_t, handles are pointers to the headers' struct tags.
 *  - Only what the backend uses is declared.
 */
#ifndef SW_ZE_API_H
#define SW_ZE_API_H

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------
 * Types
 * ---------------------------------------------------------------------- */

typedef uint32_t swze_result;                          /* ze_result_t */
typedef uint8_t swze_bool;                             /* ze_bool_t */
typedef struct _ze_driver_handle_t *swze_driver;       /* ze_driver_handle_t */
typedef struct _ze_device_handle_t *swze_device;       /* ze_device_handle_t */
typedef struct _ze_context_handle_t *swze_context;
typedef struct _ze_command_list_handle_t *swze_cmdlist;
typedef struct _ze_event_pool_handle_t *swze_event_pool;
typedef struct _ze_event_handle_t *swze_event;
typedef struct _ze_module_handle_t *swze_module;
typedef struct _ze_module_build_log_handle_t *swze_build_log;
typedef struct _ze_kernel_handle_t *swze_kernel;
typedef struct _zes_mem_handle_t *swzes_mem;           /* zes_mem_handle_t */

typedef struct swze_device_properties {    /* ze_device_properties_t */
    uint32_t stype;
    void *pNext;
    uint32_t type, vendor_id, device_id, flags, subdevice_id, core_clock_rate;
    uint64_t max_mem_alloc_size;
    uint32_t max_hardware_contexts, max_command_queue_priority;
    uint32_t num_threads_per_eu, physical_eu_simd_width, num_eus_per_subslice;
    uint32_t num_subslices_per_slice, num_slices;
    uint64_t timer_resolution;
    uint32_t timestamp_valid_bits, kernel_timestamp_valid_bits;
    uint8_t uuid[16];
    char name[256];
} swze_device_properties;

typedef struct swze_device_memory_properties { /* ze_device_memory_... */
    uint32_t stype;
    void *pNext;
    uint32_t flags, max_clock_rate, max_bus_width;
    uint64_t total_size;
    char name[256];
} swze_device_memory_properties;

typedef struct swze_device_module_properties { /* ze_device_module_... */
    uint32_t stype;
    void *pNext;
    uint32_t spirv_version_supported, flags;
    uint32_t fp16_flags, fp32_flags, fp64_flags;
    uint32_t max_argument_size, printf_buffer_size;
    uint8_t native_kernel_supported[16];
} swze_device_module_properties;

typedef struct swze_queue_group_properties { /* ze_command_queue_group_... */
    uint32_t stype;
    void *pNext;
    uint32_t flags;
    size_t max_memory_fill_pattern_size;
    uint32_t num_queues;
} swze_queue_group_properties;

typedef struct swze_context_desc {         /* ze_context_desc_t */
    uint32_t stype;
    const void *pNext;
    uint32_t flags;
} swze_context_desc;

typedef struct swze_device_mem_alloc_desc { /* ze_device_mem_alloc_desc_t */
    uint32_t stype;
    const void *pNext;
    uint32_t flags, ordinal;
} swze_device_mem_alloc_desc;

typedef struct swze_command_queue_desc {   /* ze_command_queue_desc_t */
    uint32_t stype;
    const void *pNext;
    uint32_t ordinal, index, flags, mode, priority;
} swze_command_queue_desc;

typedef struct swze_event_pool_desc {      /* ze_event_pool_desc_t */
    uint32_t stype;
    const void *pNext;
    uint32_t flags, count;
} swze_event_pool_desc;

typedef struct swze_event_desc {           /* ze_event_desc_t */
    uint32_t stype;
    const void *pNext;
    uint32_t index, signal, wait;
} swze_event_desc;

typedef struct swze_module_desc {          /* ze_module_desc_t */
    uint32_t stype;
    const void *pNext;
    uint32_t format;
    size_t input_size;
    const uint8_t *input;
    const char *build_flags;
    const void *constants; /* const ze_module_constants_t * */
} swze_module_desc;

typedef struct swze_kernel_desc {          /* ze_kernel_desc_t */
    uint32_t stype;
    const void *pNext;
    uint32_t flags;
    const char *name;
} swze_kernel_desc;

typedef struct swze_group_count {          /* ze_group_count_t */
    uint32_t x, y, z;
} swze_group_count;

typedef struct swzes_device_properties {   /* zes_device_properties_t */
    uint32_t stype;
    void *pNext;
    swze_device_properties core;
    uint32_t num_subdevices;
    char serial_number[64], board_number[64], brand_name[64];
    char model_name[64], vendor_name[64], driver_version[64];
} swzes_device_properties;

typedef struct swzes_mem_properties {      /* zes_mem_properties_t */
    uint32_t stype;
    void *pNext;
    uint32_t type;
    swze_bool on_subdevice;
    uint32_t subdevice_id, location;
    uint64_t physical_size;
    int32_t bus_width, num_channels;
} swzes_mem_properties;

typedef struct swzes_mem_state {           /* zes_mem_state_t */
    uint32_t stype;
    const void *pNext;
    uint32_t health;
    uint64_t free, size;
} swzes_mem_state;

/* ------------------------------------------------------------------------
 * Constants (checked against the headers by sigcheck.c)
 * ---------------------------------------------------------------------- */

#define SWZE_RESULTS(X)                                                       \
    X(ZE_RESULT_SUCCESS, 0)                                                   \
    X(ZE_RESULT_NOT_READY, 1)                                                 \
    X(ZE_RESULT_ERROR_DEVICE_LOST, 0x70000001)                                \
    X(ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY, 0x70000002)                         \
    X(ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY, 0x70000003)                       \
    X(ZE_RESULT_ERROR_MODULE_BUILD_FAILURE, 0x70000004)                       \
    X(ZE_RESULT_ERROR_MODULE_LINK_FAILURE, 0x70000005)                        \
    X(ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET, 0x70000006)                      \
    X(ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS, 0x70010000)                   \
    X(ZE_RESULT_ERROR_NOT_AVAILABLE, 0x70010001)                              \
    X(ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE, 0x70020000)                     \
    X(ZE_RESULT_ERROR_UNINITIALIZED, 0x78000001)                              \
    X(ZE_RESULT_ERROR_UNSUPPORTED_VERSION, 0x78000002)                        \
    X(ZE_RESULT_ERROR_UNSUPPORTED_FEATURE, 0x78000003)                        \
    X(ZE_RESULT_ERROR_INVALID_ARGUMENT, 0x78000004)                           \
    X(ZE_RESULT_ERROR_INVALID_NULL_HANDLE, 0x78000005)                        \
    X(ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE, 0x78000006)                       \
    X(ZE_RESULT_ERROR_INVALID_NULL_POINTER, 0x78000007)                       \
    X(ZE_RESULT_ERROR_INVALID_SIZE, 0x78000008)                               \
    X(ZE_RESULT_ERROR_UNSUPPORTED_SIZE, 0x78000009)                           \
    X(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT, 0x7800000a)                      \
    X(ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT, 0x7800000b)             \
    X(ZE_RESULT_ERROR_INVALID_ENUMERATION, 0x7800000c)                        \
    X(ZE_RESULT_ERROR_INVALID_KERNEL_NAME, 0x78000011)                        \
    X(ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION, 0x78000013)               \
    X(ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX, 0x78000015)              \
    X(ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE, 0x78000016)               \
    X(ZE_RESULT_ERROR_OVERLAPPING_REGIONS, 0x7800001a)                        \
    X(ZE_RESULT_ERROR_UNKNOWN, 0x7ffffffe)

enum {
#define SWZE__RESULT_ENUM(name, value) SWZE_##name = value,
    SWZE_RESULTS(SWZE__RESULT_ENUM)
#undef SWZE__RESULT_ENUM
};

#define SWZE_CONSTANTS(X)                                                     \
    X(ZE_INIT_FLAG_GPU_ONLY, 1)                                               \
    X(ZE_DEVICE_TYPE_GPU, 1)                                                  \
    X(ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES, 0x3)                               \
    X(ZE_STRUCTURE_TYPE_DEVICE_MODULE_PROPERTIES, 0x5)                        \
    X(ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES, 0x6)                  \
    X(ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES, 0x7)                        \
    X(ZE_STRUCTURE_TYPE_CONTEXT_DESC, 0xd)                                    \
    X(ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, 0xe)                              \
    X(ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, 0x10)                                \
    X(ZE_STRUCTURE_TYPE_EVENT_DESC, 0x11)                                     \
    X(ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, 0x15)                          \
    X(ZE_STRUCTURE_TYPE_MODULE_DESC, 0x1b)                                    \
    X(ZE_STRUCTURE_TYPE_KERNEL_DESC, 0x1d)                                    \
    X(ZE_DEVICE_MODULE_FLAG_FP64, 2)                                          \
    X(ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE, 1)                        \
    X(ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, 2)                                  \
    X(ZE_COMMAND_QUEUE_PRIORITY_NORMAL, 0)                                    \
    X(ZE_EVENT_POOL_FLAG_HOST_VISIBLE, 1)                                     \
    X(ZE_EVENT_SCOPE_FLAG_HOST, 4)                                            \
    X(ZE_MODULE_FORMAT_IL_SPIRV, 0)                                           \
    X(ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES, 0x1)                              \
    X(ZES_STRUCTURE_TYPE_MEM_PROPERTIES, 0xb)                                 \
    X(ZES_STRUCTURE_TYPE_MEM_STATE, 0x1e)                                     \
    X(ZES_MEM_LOC_DEVICE, 1)

enum {
#define SWZE__CONST_ENUM(name, value) SWZE_##name = value,
    SWZE_CONSTANTS(SWZE__CONST_ENUM)
#undef SWZE__CONST_ENUM
};

/* ------------------------------------------------------------------------
 * Functions: X(kind, name, (parameters)), all returning ze_result_t.
 * ---------------------------------------------------------------------- */

#define SWZE_FUNCS(X)                                                         \
    X(1, zeInit, (uint32_t flags))                                            \
    X(1, zeDriverGet, (uint32_t *count, swze_driver *drivers))                \
    X(1, zeDeviceGet,                                                         \
      (swze_driver driver, uint32_t *count, swze_device *devices))            \
    X(1, zeDeviceGetProperties,                                               \
      (swze_device device, swze_device_properties *props))                    \
    X(1, zeDeviceGetMemoryProperties,                                         \
      (swze_device device, uint32_t *count,                                   \
       swze_device_memory_properties *props))                                 \
    X(1, zeDeviceGetModuleProperties,                                         \
      (swze_device device, swze_device_module_properties *props))             \
    X(1, zeDeviceGetCommandQueueGroupProperties,                              \
      (swze_device device, uint32_t *count,                                   \
       swze_queue_group_properties *props))                                   \
    X(1, zeContextCreate,                                                     \
      (swze_driver driver, const swze_context_desc *desc,                     \
       swze_context *context))                                                \
    X(1, zeContextDestroy, (swze_context context))                            \
    X(1, zeMemAllocDevice,                                                    \
      (swze_context context, const swze_device_mem_alloc_desc *desc,          \
       size_t size, size_t alignment, swze_device device, void **ptr))        \
    X(1, zeMemFree, (swze_context context, void *ptr))                        \
    X(1, zeCommandListCreateImmediate,                                        \
      (swze_context context, swze_device device,                              \
       const swze_command_queue_desc *desc, swze_cmdlist *list))              \
    X(1, zeCommandListDestroy, (swze_cmdlist list))                           \
    X(3, zeCommandListGetContextHandle,                                       \
      (swze_cmdlist list, swze_context *context))                             \
    X(3, zeCommandListGetDeviceHandle,                                        \
      (swze_cmdlist list, swze_device *device))                               \
    X(3, zeCommandListIsImmediate,                                            \
      (swze_cmdlist list, uint8_t *immediate))                                \
    X(1, zeCommandListAppendBarrier,                                          \
      (swze_cmdlist list, swze_event signal, uint32_t nwait,                  \
       swze_event *waits))                                                    \
    X(1, zeCommandListAppendMemoryCopy,                                       \
      (swze_cmdlist list, void *dst, const void *src, size_t size,            \
       swze_event signal, uint32_t nwait, swze_event *waits))                 \
    X(1, zeCommandListAppendMemoryFill,                                       \
      (swze_cmdlist list, void *ptr, const void *pattern,                     \
       size_t pattern_size, size_t size, swze_event signal, uint32_t nwait,   \
       swze_event *waits))                                                    \
    X(1, zeCommandListAppendLaunchKernel,                                     \
      (swze_cmdlist list, swze_kernel kernel, const swze_group_count *groups, \
       swze_event signal, uint32_t nwait, swze_event *waits))                 \
    X(1, zeEventPoolCreate,                                                   \
      (swze_context context, const swze_event_pool_desc *desc,                \
       uint32_t ndevices, swze_device *devices, swze_event_pool *pool))       \
    X(1, zeEventPoolDestroy, (swze_event_pool pool))                          \
    X(1, zeEventCreate,                                                       \
      (swze_event_pool pool, const swze_event_desc *desc, swze_event *event)) \
    X(1, zeEventDestroy, (swze_event event))                                  \
    X(1, zeEventHostSynchronize, (swze_event event, uint64_t timeout))        \
    X(1, zeEventQueryStatus, (swze_event event))                              \
    X(1, zeEventHostReset, (swze_event event))                                \
    X(1, zeModuleCreate,                                                      \
      (swze_context context, swze_device device, const swze_module_desc *desc,\
       swze_module *module, swze_build_log *log))                             \
    X(1, zeModuleDestroy, (swze_module module))                               \
    X(1, zeModuleBuildLogGetString,                                           \
      (swze_build_log log, size_t *size, char *text))                         \
    X(1, zeModuleBuildLogDestroy, (swze_build_log log))                       \
    X(1, zeKernelCreate,                                                      \
      (swze_module module, const swze_kernel_desc *desc, swze_kernel *kernel))\
    X(1, zeKernelDestroy, (swze_kernel kernel))                               \
    X(1, zeKernelSetArgumentValue,                                            \
      (swze_kernel kernel, uint32_t index, size_t size, const void *value))   \
    X(1, zeKernelSetGroupSize,                                                \
      (swze_kernel kernel, uint32_t x, uint32_t y, uint32_t z))               \
    X(0, zesDeviceGetProperties,                                              \
      (swze_device device, swzes_device_properties *props))                   \
    X(0, zesDeviceEnumMemoryModules,                                          \
      (swze_device device, uint32_t *count, swzes_mem *mems))                 \
    X(0, zesMemoryGetProperties, (swzes_mem mem, swzes_mem_properties *props))\
    X(0, zesMemoryGetState, (swzes_mem mem, swzes_mem_state *state))          \
    X(3, zesInit, (uint32_t flags))                                           \
    X(3, zesDriverGet, (uint32_t *count, swze_driver *drivers))               \
    X(3, zesDeviceGet,                                                        \
      (swze_driver driver, uint32_t *count, swze_device *devices))

/* One function-pointer type per entry: swze_<name>_fn. */
#define SWZE__TYPEDEF(kind, name, params) typedef swze_result(*swze_##name##_fn) params;
SWZE_FUNCS(SWZE__TYPEDEF)
#undef SWZE__TYPEDEF

typedef struct swze_loader_api {
#define SWZE__MEMBER(kind, name, params) swze_##name##_fn name;
    SWZE_FUNCS(SWZE__MEMBER)
#undef SWZE__MEMBER
} swze_loader_api;

#endif /* SW_ZE_API_H */
