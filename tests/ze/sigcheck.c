/*
 * sigcheck.c -- src/backend/ze_api.h against Level Zero's ze_api.h and
 * zes_api.h (Debian: libze-dev, the 1.4 specification).
 *
 * The Level Zero backend declares the API itself (so that building it
 * needs no Level Zero headers) and resolves the loader's symbols by name
 * at run time; nothing checks those declarations but this file.  It is
 * built into the C suite wherever the build finds level_zero/ze_api.h
 * (SW_HAVE_ZE_H), and requires at compile time every function-pointer type
 * of ze_api.h to be compatible with the header's prototype (in terms of
 * our structs, whose layouts are checked member by member first), every
 * constant to equal the header's, and the handle types to be the header's.
 * Entries newer than the headers (kind 3: zesInit, zesDriverGet,
 * zesDeviceGet, Level Zero 1.5) are not checked.  Drift is a build error.
 */
#include <level_zero/ze_api.h>
#include <level_zero/zes_api.h>

#include "backend/ze_api.h"
#include "sigcheck.h"

#include <stddef.h>

#define SW_SAME(a, b) __builtin_types_compatible_p(a, b)

_Static_assert(SW_SAME(swze_result, ze_result_t) ||
                   sizeof(swze_result) == sizeof(ze_result_t),
               "ze_result_t");
_Static_assert(SW_SAME(swze_bool, ze_bool_t), "ze_bool_t");
_Static_assert(SW_SAME(swze_driver, ze_driver_handle_t), "driver");
_Static_assert(SW_SAME(swze_device, ze_device_handle_t), "device");
_Static_assert(SW_SAME(swze_device, zes_device_handle_t), "zes device");
_Static_assert(SW_SAME(swze_context, ze_context_handle_t), "context");
_Static_assert(SW_SAME(swze_cmdlist, ze_command_list_handle_t), "list");
_Static_assert(SW_SAME(swze_event_pool, ze_event_pool_handle_t), "pool");
_Static_assert(SW_SAME(swze_event, ze_event_handle_t), "event");
_Static_assert(SW_SAME(swze_module, ze_module_handle_t), "module");
_Static_assert(SW_SAME(swze_build_log, ze_module_build_log_handle_t), "log");
_Static_assert(SW_SAME(swze_kernel, ze_kernel_handle_t), "kernel");
_Static_assert(SW_SAME(swzes_mem, zes_mem_handle_t), "zes mem");

/* Layouts: the same size, and each member at the same offset with the
 * same size. */
#define SW_SIZE(ours, theirs)                                                 \
    _Static_assert(sizeof(ours) == sizeof(theirs), "sizeof(" #theirs ")");
#define SW_FIELD(ours, of, theirs, tf)                                        \
    _Static_assert(offsetof(ours, of) == offsetof(theirs, tf) &&              \
                       sizeof(((ours *)0)->of) == sizeof(((theirs *)0)->tf),  \
                   #theirs "." #tf);

SW_SIZE(swze_device_properties, ze_device_properties_t)
SW_FIELD(swze_device_properties, stype, ze_device_properties_t, stype)
SW_FIELD(swze_device_properties, pNext, ze_device_properties_t, pNext)
SW_FIELD(swze_device_properties, type, ze_device_properties_t, type)
SW_FIELD(swze_device_properties, vendor_id, ze_device_properties_t, vendorId)
SW_FIELD(swze_device_properties, device_id, ze_device_properties_t, deviceId)
SW_FIELD(swze_device_properties, flags, ze_device_properties_t, flags)
SW_FIELD(swze_device_properties, subdevice_id, ze_device_properties_t, subdeviceId)
SW_FIELD(swze_device_properties, core_clock_rate, ze_device_properties_t, coreClockRate)
SW_FIELD(swze_device_properties, max_mem_alloc_size, ze_device_properties_t, maxMemAllocSize)
SW_FIELD(swze_device_properties, max_hardware_contexts, ze_device_properties_t, maxHardwareContexts)
SW_FIELD(swze_device_properties, max_command_queue_priority, ze_device_properties_t, maxCommandQueuePriority)
SW_FIELD(swze_device_properties, num_threads_per_eu, ze_device_properties_t, numThreadsPerEU)
SW_FIELD(swze_device_properties, physical_eu_simd_width, ze_device_properties_t, physicalEUSimdWidth)
SW_FIELD(swze_device_properties, num_eus_per_subslice, ze_device_properties_t, numEUsPerSubslice)
SW_FIELD(swze_device_properties, num_subslices_per_slice, ze_device_properties_t, numSubslicesPerSlice)
SW_FIELD(swze_device_properties, num_slices, ze_device_properties_t, numSlices)
SW_FIELD(swze_device_properties, timer_resolution, ze_device_properties_t, timerResolution)
SW_FIELD(swze_device_properties, timestamp_valid_bits, ze_device_properties_t, timestampValidBits)
SW_FIELD(swze_device_properties, kernel_timestamp_valid_bits, ze_device_properties_t, kernelTimestampValidBits)
SW_FIELD(swze_device_properties, uuid, ze_device_properties_t, uuid)
SW_FIELD(swze_device_properties, name, ze_device_properties_t, name)

SW_SIZE(swze_device_memory_properties, ze_device_memory_properties_t)
SW_FIELD(swze_device_memory_properties, flags, ze_device_memory_properties_t, flags)
SW_FIELD(swze_device_memory_properties, max_clock_rate, ze_device_memory_properties_t, maxClockRate)
SW_FIELD(swze_device_memory_properties, max_bus_width, ze_device_memory_properties_t, maxBusWidth)
SW_FIELD(swze_device_memory_properties, total_size, ze_device_memory_properties_t, totalSize)
SW_FIELD(swze_device_memory_properties, name, ze_device_memory_properties_t, name)

SW_SIZE(swze_device_module_properties, ze_device_module_properties_t)
SW_FIELD(swze_device_module_properties, spirv_version_supported, ze_device_module_properties_t, spirvVersionSupported)
SW_FIELD(swze_device_module_properties, flags, ze_device_module_properties_t, flags)
SW_FIELD(swze_device_module_properties, fp64_flags, ze_device_module_properties_t, fp64flags)
SW_FIELD(swze_device_module_properties, native_kernel_supported, ze_device_module_properties_t, nativeKernelSupported)

SW_SIZE(swze_queue_group_properties, ze_command_queue_group_properties_t)
SW_FIELD(swze_queue_group_properties, flags, ze_command_queue_group_properties_t, flags)
SW_FIELD(swze_queue_group_properties, max_memory_fill_pattern_size, ze_command_queue_group_properties_t, maxMemoryFillPatternSize)
SW_FIELD(swze_queue_group_properties, num_queues, ze_command_queue_group_properties_t, numQueues)

SW_SIZE(swze_context_desc, ze_context_desc_t)
SW_FIELD(swze_context_desc, flags, ze_context_desc_t, flags)
SW_SIZE(swze_device_mem_alloc_desc, ze_device_mem_alloc_desc_t)
SW_FIELD(swze_device_mem_alloc_desc, flags, ze_device_mem_alloc_desc_t, flags)
SW_FIELD(swze_device_mem_alloc_desc, ordinal, ze_device_mem_alloc_desc_t, ordinal)
SW_SIZE(swze_command_queue_desc, ze_command_queue_desc_t)
SW_FIELD(swze_command_queue_desc, ordinal, ze_command_queue_desc_t, ordinal)
SW_FIELD(swze_command_queue_desc, index, ze_command_queue_desc_t, index)
SW_FIELD(swze_command_queue_desc, flags, ze_command_queue_desc_t, flags)
SW_FIELD(swze_command_queue_desc, mode, ze_command_queue_desc_t, mode)
SW_FIELD(swze_command_queue_desc, priority, ze_command_queue_desc_t, priority)
SW_SIZE(swze_event_pool_desc, ze_event_pool_desc_t)
SW_FIELD(swze_event_pool_desc, flags, ze_event_pool_desc_t, flags)
SW_FIELD(swze_event_pool_desc, count, ze_event_pool_desc_t, count)
SW_SIZE(swze_event_desc, ze_event_desc_t)
SW_FIELD(swze_event_desc, index, ze_event_desc_t, index)
SW_FIELD(swze_event_desc, signal, ze_event_desc_t, signal)
SW_FIELD(swze_event_desc, wait, ze_event_desc_t, wait)
SW_SIZE(swze_module_desc, ze_module_desc_t)
SW_FIELD(swze_module_desc, format, ze_module_desc_t, format)
SW_FIELD(swze_module_desc, input_size, ze_module_desc_t, inputSize)
SW_FIELD(swze_module_desc, input, ze_module_desc_t, pInputModule)
SW_FIELD(swze_module_desc, build_flags, ze_module_desc_t, pBuildFlags)
SW_FIELD(swze_module_desc, constants, ze_module_desc_t, pConstants)
SW_SIZE(swze_kernel_desc, ze_kernel_desc_t)
SW_FIELD(swze_kernel_desc, flags, ze_kernel_desc_t, flags)
SW_FIELD(swze_kernel_desc, name, ze_kernel_desc_t, pKernelName)
SW_SIZE(swze_group_count, ze_group_count_t)
SW_FIELD(swze_group_count, x, ze_group_count_t, groupCountX)
SW_FIELD(swze_group_count, y, ze_group_count_t, groupCountY)
SW_FIELD(swze_group_count, z, ze_group_count_t, groupCountZ)

SW_SIZE(swzes_device_properties, zes_device_properties_t)
SW_FIELD(swzes_device_properties, core, zes_device_properties_t, core)
SW_FIELD(swzes_device_properties, num_subdevices, zes_device_properties_t, numSubdevices)
SW_FIELD(swzes_device_properties, driver_version, zes_device_properties_t, driverVersion)
SW_SIZE(swzes_mem_properties, zes_mem_properties_t)
SW_FIELD(swzes_mem_properties, type, zes_mem_properties_t, type)
SW_FIELD(swzes_mem_properties, on_subdevice, zes_mem_properties_t, onSubdevice)
SW_FIELD(swzes_mem_properties, subdevice_id, zes_mem_properties_t, subdeviceId)
SW_FIELD(swzes_mem_properties, location, zes_mem_properties_t, location)
SW_FIELD(swzes_mem_properties, physical_size, zes_mem_properties_t, physicalSize)
SW_FIELD(swzes_mem_properties, bus_width, zes_mem_properties_t, busWidth)
SW_FIELD(swzes_mem_properties, num_channels, zes_mem_properties_t, numChannels)
SW_SIZE(swzes_mem_state, zes_mem_state_t)
SW_FIELD(swzes_mem_state, health, zes_mem_state_t, health)
SW_FIELD(swzes_mem_state, free, zes_mem_state_t, free)
SW_FIELD(swzes_mem_state, size, zes_mem_state_t, size)

/* Functions: ze_api.h's parameter lists, expanded with the headers' struct
 * types put in for ours (whose layouts are checked above), must be the
 * headers' prototypes.  Handles are the same struct tags, and the headers'
 * enum and flag types are unsigned int, compatible with our uint32_t. */
#define swze_device_properties ze_device_properties_t
#define swze_device_memory_properties ze_device_memory_properties_t
#define swze_device_module_properties ze_device_module_properties_t
#define swze_queue_group_properties ze_command_queue_group_properties_t
#define swze_context_desc ze_context_desc_t
#define swze_device_mem_alloc_desc ze_device_mem_alloc_desc_t
#define swze_command_queue_desc ze_command_queue_desc_t
#define swze_event_pool_desc ze_event_pool_desc_t
#define swze_event_desc ze_event_desc_t
#define swze_module_desc ze_module_desc_t
#define swze_kernel_desc ze_kernel_desc_t
#define swze_group_count ze_group_count_t
#define swzes_device_properties zes_device_properties_t
#define swzes_mem_properties zes_mem_properties_t
#define swzes_mem_state zes_mem_state_t
#define SW_CHECK_1(name, params)                                              \
    _Static_assert(SW_SAME(__typeof__(&name), ze_result_t(*) params),         \
                   "ze_api.h: " #name " does not match the headers");
#define SW_CHECK_0 SW_CHECK_1
#define SW_CHECK_3(name, params) /* newer than the headers */
#define SW_CHECK_FN(kind, name, params) SW_CHECK_##kind(name, params)
SWZE_FUNCS(SW_CHECK_FN)

#define SW_CHECK_CONST(name, value)                                           \
    _Static_assert((long long)SWZE_##name == (long long)(name) &&             \
                       (long long)(value) == (long long)(name),               \
                   "ze_api.h: " #name " is not the headers'");
SWZE_RESULTS(SW_CHECK_CONST)
SWZE_CONSTANTS(SW_CHECK_CONST)

int sw_test_ze_sigcheck_count(void)
{
    int n = 0;
#define SW_COUNT(...) n++;
    SWZE_RESULTS(SW_COUNT)
    SWZE_CONSTANTS(SW_COUNT)
    SWZE_FUNCS(SW_COUNT)
#undef SW_COUNT
    return n + 13 /* handle types */ + 80 /* struct members and sizes */;
}
