/*
 * opencl.c -- the OpenCL backend: any OpenCL 1.2+ platform (CI: PoCL).
 *
 * The divisions of this file, in order:
 *   - OpenCL error names, and the spillway codes they map to.
 *   - Kernels: the embedded source (src/backend/kernels/opencl.cl) and the
 *     table of its entry points.
 *   - Types: deferred frees, queues, devices, events.
 *   - The device list, taken once per process.
 *   - Small helpers.
 *   - Events and the deferred frees.
 *   - Launching kernels: arguments, element-wise launches, byte fills and
 *     moves.
 *   - Queues.
 *   - Configuration from the environment.
 *   - Building the kernels for a device.
 *   - Operations (the ops table's functions): devices and memory; queues
 *     and transfers; kernels; events and waiting.
 *   - The ops table.
 *
 * Devices.  Every available device of every platform whose OpenCL version is
 * 1.2 or newer and that has a compiler is listed, platform by platform in
 * the order clGetPlatformIDs gives them: opencl:0, opencl:1, ...  The list
 * is taken once per process.  With no platform (no ICD installed) the
 * backend offers no device and says why; nothing fails.
 *
 * One context and one in-order command queue per open device (the default
 * queue), a second one for spills and restores (the copy queue, contract
 * version 3; SPILLWAY_OPENCL_COPY_QUEUE=0 turns it off), plus one in-order
 * queue per queue_create; a queue waits for another queue's event with
 * clEnqueueBarrierWithWaitList (wait_event, contract version 2).
 * queue_idle asks the status of the queue's latest command's event.  The
 * copy queue profiles its commands (CL_QUEUE_PROFILING_ENABLE), so that
 * event_elapsed (contract version 4) gives a spill's or restore's own
 * device time: its events are markers, whose end is when the work queued
 * before them was done.  No host_alloc: on PoCL's CPU device CL_MEM_ALLOC_HOST_PTR is host memory
 * like any other (a transfer is one memcpy either way), and the core's
 * host pool already keeps its memory faulted in.  Allocations are cl_mem
 * buffers: the uintptr_t `mem` of the contract is the cl_mem handle and
 * offsets are byte offsets into it.  Transfers are enqueued non-blocking;
 * the core waits on an event afterwards, which keeps the host memory valid.
 *
 * Capacity.  PoCL does not enforce the global memory size it reports (6 GiB
 * allocated on a device reporting 3.5 GiB, until the kernel's OOM killer
 * ended the process), and drivers generally allocate lazily, so a
 * clCreateBuffer that succeeds proves little.  This backend therefore
 * counts the bytes it has allocated and treats CL_DEVICE_GLOBAL_MEM_SIZE
 * (or the smaller SPILLWAY_OPENCL_MEMORY) as a hard capacity: an allocation
 * that would pass it fails with SW_ERR_OOM, which is what sends the core
 * down its allocation ladder (cache, callbacks, spilling).  The largest
 * single allocation is CL_DEVICE_MAX_MEM_ALLOC_SIZE (props.max_alloc; the
 * core refuses bigger requests with SW_ERR_TOO_LARGE).  Allocation failures
 * of the runtime (CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_RESOURCES,
 * CL_OUT_OF_HOST_MEMORY) are SW_ERR_OOM too, at clCreateBuffer and when a
 * lazy allocation fails at the first enqueue that uses the buffer.
 * device_free is reported only where the driver says it (AMD's
 * cl_amd_device_attribute_query); otherwise it is unknown, not invented.
 *
 * Stream-ordered free: a deferred list per queue, reaped at later
 * operations.  free() does not release the cl_mem at once: it takes the
 * event of the queue's latest command (which, on an in-order queue,
 * completes after everything queued before it) and appends (mem, size,
 * event) to the queue's FIFO.  alloc, mem_info, free and queue teardown release the
 * entries whose event has completed, and only then subtract their bytes
 * from the allocated count.  (OpenCL itself would keep a released buffer
 * alive for the commands already queued on it; what the list adds is
 * accounting that follows the device: the bytes count until the device
 * is done with them.)  This was chosen over clSetEventCallback because a
 * callback runs on a runtime thread at a time of the runtime's choosing:
 * after the core's "wait for the device" step of the ladder the callback
 * may not have run yet, so the retried allocation would fail for nothing.
 * Reaping is deterministic: once a later event has been waited for, every
 * earlier one is complete and the next allocation sees the memory.  On an
 * idle queue (its latest command complete) a free releases at once.
 *
 * Events.  event_record hands out the latest command's event too (a
 * marker, clEnqueueMarkerWithWaitList, only on a queue that never had a
 * command): an enqueued marker per wait costs PoCL one more pass through
 * its scheduler threads, about 3 us of a 10 us host round trip.
 *
 * Kernels are OpenCL C (src/backend/kernels/opencl.cl, embedded at build
 * time), built once per device at open (PoCL also caches the binaries on
 * disk).  Element-wise kernels take one element per
 * work-item, with a fixed work-group size (PoCL compiles a specialisation
 * per local size, so letting the runtime choose would compile again for
 * many n) and buffer offsets as kernel arguments (OpenCL 1.2 has no
 * pointer arithmetic on cl_mem, and sub-buffers have alignment rules).
 * They cover every dtype, with the simulated device's arithmetic bit for
 * bit (opencl.cl's comment: integers wrap in unsigned types, float16 and
 * bfloat16 compute in float, complex by one stated formula).  float64 and
 * complex128 need cl_khr_fp64; without it they are left out of
 * props.dtypes (the core refuses them with SW_ERR_DTYPE), and float sums
 * accumulate in float-float pairs (see SUM below).
 *
 * SUM is a two-stage tree reduction of fixed shape, so a sum of the same n
 * elements on the same device always adds in the same order (with or
 * without a budget, spilled or not):
 *   L = the reduction work-group size (a power of two <= 256, fixed per
 *       device at open), G = min(1024, ceil(n / L)) work-groups,
 *       T = ceil(n / (G * L)) tiles per group;
 *   stage 1: group g owns elements [g*T*L, (g+1)*T*L) of the input; its
 *       work-item j adds elements g*T*L + j + k*L for k = 0, 1, ..., T-1
 *       in that order, starting from 0, into its accumulator; the group
 *       then combines its L accumulators pairwise: for s = L/2, L/4, ...,
 *       1, acc[j] += acc[j + s] for j < s; acc[0] is partial[g];
 *   stage 2: one group of L work-items does the same over partial[0..G):
 *       work-item j adds partial[j + k*L] for k = 0, 1, ..., then the
 *       same pairwise tree; the result is written to out.
 * Accumulators: double for the float dtypes (elements are converted
 * exactly), double2 for the complex ones (each part a float sum), uint64
 * for the integers (signed ones sign-extended) and bool (a count), so
 * integer sums wrap exactly as the simulated device's do.  Results are not
 * bit-equal to the simulated device's sequential sum (another order) but
 * are reproducible run to run.  Without cl_khr_fp64 float16, bfloat16,
 * float32 and complex64 sums use float-float (double-single) accumulators
 * in the same order, and the final pairs are converted to the nearest
 * double in integer arithmetic.
 *
 * Threads.  The core calls every operation with the device lock held,
 * except event_query/wait/release and synchronize, which touch only their
 * cl_event or cl_command_queue (OpenCL calls are thread-safe; the one
 * exception, clSetKernelArg on a shared cl_kernel, only ever happens under
 * the device lock).  So the backend has no locks of its own.  It registers
 * no callbacks with the runtime.
 *
 * Environment:
 *   SPILLWAY_OPENCL_MEMORY  capacity per device, e.g. 256M (at most what the
 *                           device reports; lets tests spill on a small
 *                           device)
 *   SPILLWAY_OPENCL_FP64=0  act as if no device had cl_khr_fp64 (to exercise
 *                           that path on devices that have it)
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include "backend.h"
#include "elements.h"

#include <assert.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OCL__MAX_DEVICES 64   /* listed, and looked at per platform */
#define OCL__MAX_PLATFORMS 32
#define OCL__MIN_MEMORY (UINT64_C(1) << 20)
/* Work-group sizes: at most this, a power of two. */
#define OCL__MAX_LOCAL 256u
/* Stage-1 work-groups of a sum, at most. */
#define OCL__SUM_GROUPS 1024u
/* Work-items per element-wise launch, at most (larger n is split into
 * several launches, so that 32-bit devices and size_t limits are safe). */
#define OCL__MAX_ITEMS ((size_t)1 << 30)

/* CL_DEVICE_GLOBAL_FREE_MEMORY_AMD (cl_amd_device_attribute_query). */
#define OCL__GLOBAL_FREE_MEMORY_AMD 0x4039

/* ------------------------------------------------------------------------
 * OpenCL error names
 * ---------------------------------------------------------------------- */

#define OCL__ERRORS(X)                                                        \
    X(CL_SUCCESS, 0)                                                          \
    X(CL_DEVICE_NOT_FOUND, -1)                                                \
    X(CL_DEVICE_NOT_AVAILABLE, -2)                                            \
    X(CL_COMPILER_NOT_AVAILABLE, -3)                                          \
    X(CL_MEM_OBJECT_ALLOCATION_FAILURE, -4)                                   \
    X(CL_OUT_OF_RESOURCES, -5)                                                \
    X(CL_OUT_OF_HOST_MEMORY, -6)                                              \
    X(CL_PROFILING_INFO_NOT_AVAILABLE, -7)                                    \
    X(CL_MEM_COPY_OVERLAP, -8)                                                \
    X(CL_IMAGE_FORMAT_MISMATCH, -9)                                           \
    X(CL_IMAGE_FORMAT_NOT_SUPPORTED, -10)                                     \
    X(CL_BUILD_PROGRAM_FAILURE, -11)                                          \
    X(CL_MAP_FAILURE, -12)                                                    \
    X(CL_MISALIGNED_SUB_BUFFER_OFFSET, -13)                                   \
    X(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST, -14)                      \
    X(CL_COMPILE_PROGRAM_FAILURE, -15)                                        \
    X(CL_LINKER_NOT_AVAILABLE, -16)                                           \
    X(CL_LINK_PROGRAM_FAILURE, -17)                                           \
    X(CL_DEVICE_PARTITION_FAILED, -18)                                        \
    X(CL_KERNEL_ARG_INFO_NOT_AVAILABLE, -19)                                  \
    X(CL_INVALID_VALUE, -30)                                                  \
    X(CL_INVALID_DEVICE_TYPE, -31)                                            \
    X(CL_INVALID_PLATFORM, -32)                                               \
    X(CL_INVALID_DEVICE, -33)                                                 \
    X(CL_INVALID_CONTEXT, -34)                                                \
    X(CL_INVALID_QUEUE_PROPERTIES, -35)                                       \
    X(CL_INVALID_COMMAND_QUEUE, -36)                                          \
    X(CL_INVALID_HOST_PTR, -37)                                               \
    X(CL_INVALID_MEM_OBJECT, -38)                                             \
    X(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR, -39)                                \
    X(CL_INVALID_IMAGE_SIZE, -40)                                             \
    X(CL_INVALID_SAMPLER, -41)                                                \
    X(CL_INVALID_BINARY, -42)                                                 \
    X(CL_INVALID_BUILD_OPTIONS, -43)                                          \
    X(CL_INVALID_PROGRAM, -44)                                                \
    X(CL_INVALID_PROGRAM_EXECUTABLE, -45)                                     \
    X(CL_INVALID_KERNEL_NAME, -46)                                            \
    X(CL_INVALID_KERNEL_DEFINITION, -47)                                      \
    X(CL_INVALID_KERNEL, -48)                                                 \
    X(CL_INVALID_ARG_INDEX, -49)                                              \
    X(CL_INVALID_ARG_VALUE, -50)                                              \
    X(CL_INVALID_ARG_SIZE, -51)                                               \
    X(CL_INVALID_KERNEL_ARGS, -52)                                            \
    X(CL_INVALID_WORK_DIMENSION, -53)                                         \
    X(CL_INVALID_WORK_GROUP_SIZE, -54)                                        \
    X(CL_INVALID_WORK_ITEM_SIZE, -55)                                         \
    X(CL_INVALID_GLOBAL_OFFSET, -56)                                          \
    X(CL_INVALID_EVENT_WAIT_LIST, -57)                                        \
    X(CL_INVALID_EVENT, -58)                                                  \
    X(CL_INVALID_OPERATION, -59)                                              \
    X(CL_INVALID_GL_OBJECT, -60)                                              \
    X(CL_INVALID_BUFFER_SIZE, -61)                                            \
    X(CL_INVALID_MIP_LEVEL, -62)                                              \
    X(CL_INVALID_GLOBAL_WORK_SIZE, -63)                                       \
    X(CL_INVALID_PROPERTY, -64)                                               \
    X(CL_INVALID_IMAGE_DESCRIPTOR, -65)                                       \
    X(CL_INVALID_COMPILER_OPTIONS, -66)                                       \
    X(CL_INVALID_LINKER_OPTIONS, -67)                                         \
    X(CL_INVALID_DEVICE_PARTITION_COUNT, -68)                                 \
    X(CL_INVALID_PIPE_SIZE, -69)                                              \
    X(CL_INVALID_DEVICE_QUEUE, -70)                                           \
    X(CL_INVALID_SPEC_ID, -71)                                                \
    X(CL_MAX_SIZE_RESTRICTION_EXCEEDED, -72)                                  \
    X(CL_PLATFORM_NOT_FOUND_KHR, -1001)                                       \
    X(CL_INVALID_COMMAND_BUFFER_KHR, -1138)

static const char *ocl__errname(cl_int err)
{
    switch (err) {
#define OCL__ERR_CASE(name, code)                                             \
    case code:                                                                \
        return #name;
        OCL__ERRORS(OCL__ERR_CASE)
#undef OCL__ERR_CASE
    }
    return "CL_UNKNOWN_ERROR";
}

/* The spillway code for an OpenCL error of a call that is not an
 * allocation.  Allocation failures that surface at first use are OOM. */
static int ocl__code(cl_int err)
{
    switch (err) {
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
    case CL_OUT_OF_RESOURCES:
        return SW_ERR_OOM;
    case CL_OUT_OF_HOST_MEMORY:
        return SW_ERR_HOST_OOM;
    default:
        return SW_ERR_DEVICE;
    }
}

/* "opencl:N: CALL failed: CL_NAME (code)[: detail]" with code. */
static int ocl__fail(int code, int index, const char *call, cl_int err,
                     const char *detail)
{
    return sw__errorf(code, "opencl:%d: %s failed: %s (%d)%s%s", index, call,
                      ocl__errname(err), (int)err, detail ? ": " : "",
                      detail ? detail : "");
}

static int ocl__fail_enqueue(int index, const char *call, cl_int err)
{
    int code = ocl__code(err);
    return ocl__fail(code, index, call, err,
                     code == SW_ERR_OOM ? "the device could not provide the "
                                          "memory (it allocates buffers at "
                                          "their first use)"
                                        : NULL);
}

/* ------------------------------------------------------------------------
 * Kernels: the OpenCL C source (src/backend/kernels/opencl.cl, embedded at
 * build time as sw__opencl_kernels_cl) and the table of kernel names
 * ---------------------------------------------------------------------- */

#include "backend/kernels/opencl_cl.h"

/* The entry points.  Element-wise kernels and the byte kernels first, the
 * sums last (ocl__build_all sizes work-groups by those two ranges).  The
 * arithmetic comes in groups of three, ADD, SCALE, AXPY, one group per
 * arithmetic type (ocl__arith). */
typedef enum ocl__kid {
    OCL__FILL_U8,
    OCL__FILL_U16,
    OCL__FILL_U32,
    OCL__FILL_U64,
    OCL__FILL_U128,
    OCL__COPY_U8,
    OCL__COPY_U16,
    OCL__COPY_U32,
    OCL__COPY_U64,
#define OCL__ARITH(T) OCL__ADD_##T, OCL__SCALE_##T, OCL__AXPY_##T
    OCL__ARITH(U8),
    OCL__ARITH(U16),
    OCL__ARITH(U32),
    OCL__ARITH(U64),
    OCL__ARITH(F16),
    OCL__ARITH(BF16),
    OCL__ARITH(F32),
    OCL__ARITH(F64),
    OCL__ARITH(C64),
    OCL__ARITH(C128),
#undef OCL__ARITH
    OCL__FILL_BYTES,
    OCL__MOVE_BYTES,
    OCL__SUM1_I8, /* the first sum kernel */
    OCL__SUM1_I16,
    OCL__SUM1_I32,
    OCL__SUM1_U8,
    OCL__SUM1_U16,
    OCL__SUM1_U32,
    OCL__SUM1_U64,
    OCL__SUM1_B8,
    OCL__SUM2_U,
    OCL__SUM1_F16,
    OCL__SUM1_BF16,
    OCL__SUM1_F32,
    OCL__SUM1_F64,
    OCL__SUM2_D,
    OCL__SUM1_C64,
    OCL__SUM1_C128,
    OCL__SUM2_C,
    OCL__NKERNELS
} ocl__kid;

/* fp64: built only on devices with cl_khr_fp64 (and not turned off). */
static const struct {
    const char *name;
    int fp64;
} ocl__kernels[OCL__NKERNELS] = {
    [OCL__FILL_U8] = {"sw_fill_u8", 0},
    [OCL__FILL_U16] = {"sw_fill_u16", 0},
    [OCL__FILL_U32] = {"sw_fill_u32", 0},
    [OCL__FILL_U64] = {"sw_fill_u64", 0},
    [OCL__FILL_U128] = {"sw_fill_u128", 0},
    [OCL__COPY_U8] = {"sw_copy_u8", 0},
    [OCL__COPY_U16] = {"sw_copy_u16", 0},
    [OCL__COPY_U32] = {"sw_copy_u32", 0},
    [OCL__COPY_U64] = {"sw_copy_u64", 0},
#define OCL__ARITH(T, S, F)                                                       [OCL__ADD_##T] = {"sw_add_" S, F}, [OCL__SCALE_##T] = {"sw_scale_" S, F},     [OCL__AXPY_##T] = {"sw_axpy_" S, F}
    OCL__ARITH(U8, "u8", 0),
    OCL__ARITH(U16, "u16", 0),
    OCL__ARITH(U32, "u32", 0),
    OCL__ARITH(U64, "u64", 0),
    OCL__ARITH(F16, "f16", 0),
    OCL__ARITH(BF16, "bf16", 0),
    OCL__ARITH(F32, "f32", 0),
    OCL__ARITH(F64, "f64", 1),
    OCL__ARITH(C64, "c64", 0),
    OCL__ARITH(C128, "c128", 1),
#undef OCL__ARITH
    [OCL__FILL_BYTES] = {"sw_fill_bytes", 0},
    [OCL__MOVE_BYTES] = {"sw_move_bytes", 0},
    [OCL__SUM1_I8] = {"sw_sum1_i8", 0},
    [OCL__SUM1_I16] = {"sw_sum1_i16", 0},
    [OCL__SUM1_I32] = {"sw_sum1_i32", 0},
    [OCL__SUM1_U8] = {"sw_sum1_u8", 0},
    [OCL__SUM1_U16] = {"sw_sum1_u16", 0},
    [OCL__SUM1_U32] = {"sw_sum1_u32", 0},
    [OCL__SUM1_U64] = {"sw_sum1_u64", 0},
    [OCL__SUM1_B8] = {"sw_sum1_b8", 0},
    [OCL__SUM2_U] = {"sw_sum2_u", 0},
    /* float-float accumulators without fp64: */
    [OCL__SUM1_F16] = {"sw_sum1_f16", 0},
    [OCL__SUM1_BF16] = {"sw_sum1_bf16", 0},
    [OCL__SUM1_F32] = {"sw_sum1_f32", 0},
    [OCL__SUM1_F64] = {"sw_sum1_f64", 1},
    [OCL__SUM2_D] = {"sw_sum2_d", 0},
    [OCL__SUM1_C64] = {"sw_sum1_c64", 0},
    [OCL__SUM1_C128] = {"sw_sum1_c128", 1},
    [OCL__SUM2_C] = {"sw_sum2_c", 0},
};

/* Per dtype: its ADD kernel (SCALE and AXPY follow it; -1 for bool, which
 * has no arithmetic), its two sum stages, and whether it needs fp64. */
static const struct {
    int add;
    ocl__kid sum1, sum2;
    int fp64;
} ocl__dtype[SW_DTYPE_COUNT] = {
    [SW_FLOAT32] = {OCL__ADD_F32, OCL__SUM1_F32, OCL__SUM2_D, 0},
    [SW_FLOAT64] = {OCL__ADD_F64, OCL__SUM1_F64, OCL__SUM2_D, 1},
    [SW_INT32] = {OCL__ADD_U32, OCL__SUM1_I32, OCL__SUM2_U, 0},
    [SW_INT64] = {OCL__ADD_U64, OCL__SUM1_U64, OCL__SUM2_U, 0},
    [SW_BOOL] = {-1, OCL__SUM1_B8, OCL__SUM2_U, 0},
    [SW_INT8] = {OCL__ADD_U8, OCL__SUM1_I8, OCL__SUM2_U, 0},
    [SW_INT16] = {OCL__ADD_U16, OCL__SUM1_I16, OCL__SUM2_U, 0},
    [SW_UINT8] = {OCL__ADD_U8, OCL__SUM1_U8, OCL__SUM2_U, 0},
    [SW_UINT16] = {OCL__ADD_U16, OCL__SUM1_U16, OCL__SUM2_U, 0},
    [SW_UINT32] = {OCL__ADD_U32, OCL__SUM1_U32, OCL__SUM2_U, 0},
    [SW_UINT64] = {OCL__ADD_U64, OCL__SUM1_U64, OCL__SUM2_U, 0},
    [SW_FLOAT16] = {OCL__ADD_F16, OCL__SUM1_F16, OCL__SUM2_D, 0},
    [SW_BFLOAT16] = {OCL__ADD_BF16, OCL__SUM1_BF16, OCL__SUM2_D, 0},
    [SW_COMPLEX64] = {OCL__ADD_C64, OCL__SUM1_C64, OCL__SUM2_C, 0},
    [SW_COMPLEX128] = {OCL__ADD_C128, OCL__SUM1_C128, OCL__SUM2_C, 1},
};

/* Bytes of one stage-1 partial sum, at most (a double2 or a float4). */
#define OCL__PARTIAL 16u

/* ------------------------------------------------------------------------
 * Types
 * ---------------------------------------------------------------------- */

/* A free waiting for the work queued before it. */
typedef struct ocl__dfree {
    struct ocl__dfree *next;
    cl_mem mem;
    size_t size;
    cl_event after; /* the queue's latest event then, retained */
} ocl__dfree;

struct sw__bqueue {
    sw__bdev *dev;
    cl_command_queue cq;
    /* The event of the latest command enqueued (retained), NULL before the
     * first: on an in-order queue it completes only once everything queued
     * so far has, so it stands for all of it.  unflushed: commands were
     * enqueued since the last clFlush. */
    cl_event last;
    int unflushed;
    cl_mem partials; /* a sum's stage-1 results: OCL__SUM_GROUPS x
                      * OCL__PARTIAL bytes */
    int profiled;    /* the copy queue: events are timed markers */
    /* Its cl_command_queue is known outside (queue_native handed it out,
     * or queue_wrap adopted it): commands spillway did not enqueue may be
     * on it, so `last` does not stand for everything queued there, and
     * events and idleness take a marker of their own. */
    int foreign;
    int adopted;     /* the caller's (queue_wrap), not made by spillway */
    int idle_marked; /* `last` is a marker queue_idle enqueued (foreign) */
    ocl__dfree *head, *tail; /* deferred frees, oldest first */
    sw__bqueue *next;        /* in dev->queues */
};

struct sw__bdev {
    int index;
    cl_device_id device;
    cl_context ctx;
    cl_program prog;
    cl_kernel k[OCL__NKERNELS];
    int fp64;
    int amd_free; /* cl_amd_device_attribute_query */
    size_t ew_local;  /* element-wise work-group size */
    size_t red_local; /* reduction work-group size (SW_RED_L) */
    uint64_t capacity;
    uint64_t allocated; /* bytes of live and not yet reaped cl_mems */
    sw__bqueue *default_q;
    sw__bqueue *copy_q; /* contract v3 copy_queue; NULL when turned off */
    sw__bqueue *queues; /* all, default and copy included */
    /* The first word of every object of an ICD platform (cl_khr_icd: its
     * dispatch table), read from the default queue; NULL elsewhere. */
    void *dispatch;
};

struct sw__bevent {
    cl_event ev;
    int index;
    int timed; /* a marker of a profiled queue (event_elapsed) */
};

/* ------------------------------------------------------------------------
 * The device list, taken once per process
 * ---------------------------------------------------------------------- */

typedef struct ocl__entry {
    cl_platform_id platform;
    cl_device_id device;
} ocl__entry;

static struct {
    int count;
    ocl__entry dev[OCL__MAX_DEVICES];
    char why[200];
} ocl__list;
static pthread_once_t ocl__list_once = PTHREAD_ONCE_INIT;

/* "OpenCL 3.0 PoCL ..." -> 300; 0 if unreadable. */
static int ocl__version(cl_device_id d)
{
    char buf[256] = "";
    if (clGetDeviceInfo(d, CL_DEVICE_VERSION, sizeof buf - 1, buf, NULL) !=
        CL_SUCCESS)
        return 0;
    int major = 0, minor = 0;
    if (sscanf(buf, "OpenCL %d.%d", &major, &minor) != 2)
        return 0;
    return major * 100 + minor * 10;
}

/* Arrays of fixed size, not host memory: the list is taken once per
 * process, so a failed allocation here would hide devices for its life. */
static void ocl__enumerate(void)
{
    cl_platform_id plats[OCL__MAX_PLATFORMS];
    cl_device_id devs[OCL__MAX_DEVICES];
    cl_uint np = 0;
    cl_int err = clGetPlatformIDs(0, NULL, &np);
    if (err != CL_SUCCESS || np == 0) {
        snprintf(ocl__list.why, sizeof ocl__list.why,
                 "no OpenCL platform (clGetPlatformIDs: %s); install an ICD "
                 "such as pocl-opencl-icd",
                 err != CL_SUCCESS ? ocl__errname(err) : "0 platforms");
        return;
    }
    if (np > OCL__MAX_PLATFORMS)
        np = OCL__MAX_PLATFORMS;
    err = clGetPlatformIDs(np, plats, NULL);
    int seen = 0, old = 0;
    for (cl_uint p = 0; err == CL_SUCCESS && p < np; p++) {
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) !=
                CL_SUCCESS ||
            nd == 0)
            continue;
        if (nd > OCL__MAX_DEVICES)
            nd = OCL__MAX_DEVICES;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, nd, devs, NULL) !=
            CL_SUCCESS)
            continue;
        for (cl_uint i = 0; i < nd; i++) {
            seen++;
            cl_bool avail = CL_FALSE, comp = CL_FALSE;
            clGetDeviceInfo(devs[i], CL_DEVICE_AVAILABLE, sizeof avail,
                            &avail, NULL);
            clGetDeviceInfo(devs[i], CL_DEVICE_COMPILER_AVAILABLE,
                            sizeof comp, &comp, NULL);
            if (ocl__version(devs[i]) < 120) {
                old++;
                continue;
            }
            if (!avail || !comp || ocl__list.count >= OCL__MAX_DEVICES)
                continue;
            ocl__list.dev[ocl__list.count].platform = plats[p];
            ocl__list.dev[ocl__list.count].device = devs[i];
            ocl__list.count++;
        }
    }
    if (ocl__list.count == 0)
        snprintf(ocl__list.why, sizeof ocl__list.why,
                 "%d OpenCL device%s found, none usable (%d older than "
                 "OpenCL 1.2; the others unavailable or without a compiler)",
                 seen, seen == 1 ? "" : "s", old);
}

/* ------------------------------------------------------------------------
 * Small helpers
 * ---------------------------------------------------------------------- */

static size_t ocl__pow2_floor(size_t x)
{
    size_t p = 1;
    while (p * 2 <= x && p * 2 != 0)
        p *= 2;
    return p;
}

static size_t ocl__round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

/* ------------------------------------------------------------------------
 * Events and the deferred frees
 * ---------------------------------------------------------------------- */

/* 1 when ev has completed (or failed: its commands are over either way),
 * 0 while pending. */
static int ocl__complete(cl_event ev)
{
    cl_int st = CL_QUEUED;
    if (clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st,
                       NULL) != CL_SUCCESS)
        return 0;
    return st == CL_COMPLETE || st < 0;
}

/* Every enqueue hands its event here: it becomes the queue's latest. */
static void ocl__track(sw__bqueue *q, cl_event ev)
{
    if (q->last)
        clReleaseEvent(q->last);
    q->last = ev;
    q->unflushed = 1;
    q->idle_marked = 0;
}

/* An event that completes once all work queued on q so far has: the
 * latest command's event (a marker, clEnqueueMarkerWithWaitList, only when
 * nothing was ever enqueued), flushed so that it makes progress without a
 * wait and may be waited for from another queue.  Reusing the latest
 * command's event instead of enqueuing a marker each time saves PoCL a
 * trip through its scheduler per host round trip (10 -> 7 us here).
 * *out holds a reference of its own. */
static int ocl__latest(sw__bqueue *q, cl_event *out)
{
    if (q->last == NULL) {
        cl_event m = NULL;
        cl_int err = clEnqueueMarkerWithWaitList(q->cq, 0, NULL, &m);
        if (err != CL_SUCCESS)
            return ocl__fail_enqueue(q->dev->index,
                                     "clEnqueueMarkerWithWaitList", err);
        ocl__track(q, m);
    }
    if (q->unflushed) {
        clFlush(q->cq);
        q->unflushed = 0;
    }
    clRetainEvent(q->last);
    *out = q->last;
    return SW_OK;
}

static void ocl__release_mem(sw__bdev *dev, cl_mem mem, size_t size)
{
    clReleaseMemObject(mem);
    dev->allocated -= size;
}

/* Release the deferred frees of q whose work is done (all of them with
 * force, after the queue was finished). */
static void ocl__reap(sw__bqueue *q, int force)
{
    while (q->head && (force || ocl__complete(q->head->after))) {
        ocl__dfree *f = q->head;
        q->head = f->next;
        if (!q->head)
            q->tail = NULL;
        ocl__release_mem(q->dev, f->mem, f->size);
        clReleaseEvent(f->after);
        sw__free(f);
    }
}

static void ocl__reap_all(sw__bdev *dev)
{
    for (sw__bqueue *q = dev->queues; q; q = q->next)
        ocl__reap(q, 0);
}

/* ------------------------------------------------------------------------
 * Launching kernels
 * ---------------------------------------------------------------------- */

typedef struct ocl__arg {
    size_t size;
    const void *value;
} ocl__arg;

static int ocl__launch_raw(sw__bqueue *q, ocl__kid kid, size_t global,
                           size_t local, const ocl__arg *args, int nargs)
{
    sw__bdev *dev = q->dev;
    cl_kernel k = dev->k[kid];
    for (int i = 0; i < nargs; i++) {
        cl_int err = clSetKernelArg(k, (cl_uint)i, args[i].size,
                                    args[i].value);
        if (err != CL_SUCCESS) {
            char what[96];
            snprintf(what, sizeof what, "argument %d of %s", i,
                     ocl__kernels[kid].name);
            return ocl__fail(SW_ERR_DEVICE, dev->index, "clSetKernelArg",
                             err, what);
        }
    }
    cl_event ev = NULL;
    cl_int err = clEnqueueNDRangeKernel(q->cq, k, 1, NULL, &global, &local, 0,
                                        NULL, &ev);
    if (err != CL_SUCCESS) {
        int code = ocl__code(err);
        char what[160];
        snprintf(what, sizeof what, "kernel %s, %zu work-items in groups of "
                 "%zu%s", ocl__kernels[kid].name, global, local,
                 code == SW_ERR_OOM ? "; the device could not provide the "
                                      "memory of its operands (it allocates "
                                      "buffers at their first use)"
                                    : "");
        return ocl__fail(code, dev->index, "clEnqueueNDRangeKernel", err,
                         what);
    }
    ocl__track(q, ev);
    return SW_OK;
}

/* An element-wise kernel over n elements, split into launches of at most
 * OCL__MAX_ITEMS work-items.  Offsets are in elements. */
static int ocl__launch_ew(sw__bqueue *q, ocl__kid kid, cl_mem o, size_t oo,
                          cl_mem a, size_t ao, cl_mem b, size_t bo,
                          const void *alpha, size_t alpha_size, size_t n)
{
    size_t local = q->dev->ew_local;
    for (size_t done = 0; done < n;) {
        size_t cnt = n - done < OCL__MAX_ITEMS ? n - done : OCL__MAX_ITEMS;
        cl_ulong uoo = oo + done, uao = ao + done, ubo = bo + done,
                 un = cnt;
        ocl__arg args[8] = {
            {sizeof o, &o},   {sizeof uoo, &uoo}, {sizeof a, &a},
            {sizeof uao, &uao}, {sizeof b, &b},   {sizeof ubo, &ubo},
            {alpha_size, alpha}, {sizeof un, &un},
        };
        int rc = ocl__launch_raw(q, kid, ocl__round_up(cnt, local), local,
                                 args, 8);
        if (rc != SW_OK)
            return rc;
        done += cnt;
    }
    return SW_OK;
}

/* Fill bytes [off, off + n) of mem with the pattern (1, 2, 4, 8 or 16
 * bytes) repeated. */
static int ocl__fill_any(sw__bqueue *q, cl_mem mem, size_t off, size_t n,
                         const unsigned char *pattern, size_t psize)
{
    if (off % psize == 0) {
        cl_event ev = NULL;
        cl_int err = clEnqueueFillBuffer(q->cq, mem, pattern, psize, off, n,
                                         0, NULL, &ev);
        if (err != CL_SUCCESS)
            return ocl__fail_enqueue(q->dev->index, "clEnqueueFillBuffer",
                                     err);
        ocl__track(q, ev);
        return SW_OK;
    }
    /* Not aligned to the pattern (clEnqueueFillBuffer requires it). */
    cl_ulong pat[2] = {0, 0}; /* bytes 0..7, 8..15 */
    for (size_t k = 0; k < psize; k++)
        pat[k / 8] |= (cl_ulong)pattern[k] << (8 * (k % 8));
    cl_uint ps = (cl_uint)psize;
    size_t local = q->dev->ew_local;
    for (size_t done = 0; done < n;) {
        size_t cnt = n - done < OCL__MAX_ITEMS ? n - done : OCL__MAX_ITEMS;
        /* The chunk starts a whole number of patterns in (OCL__MAX_ITEMS
         * is a multiple of 16), so i % psize stays in phase. */
        cl_ulong uoo = off + done, un = cnt;
        ocl__arg args[6] = {{sizeof mem, &mem},   {sizeof uoo, &uoo},
                            {sizeof pat[0], &pat[0]}, {sizeof pat[1], &pat[1]},
                            {sizeof ps, &ps},     {sizeof un, &un}};
        int rc = ocl__launch_raw(q, OCL__FILL_BYTES,
                                 ocl__round_up(cnt, local), local, args, 6);
        if (rc != SW_OK)
            return rc;
        done += cnt;
    }
    return SW_OK;
}

/* Copy n bytes; overlapping ranges of one buffer go through a serial
 * move (clEnqueueCopyBuffer refuses them). */
static int ocl__copy_any(sw__bqueue *q, cl_mem dst, size_t doff, cl_mem src,
                         size_t soff, size_t n)
{
    if (dst == src && doff == soff)
        return SW_OK;
    if (dst == src && doff < soff + n && soff < doff + n) {
        cl_ulong udo = doff, uso = soff, un = n;
        ocl__arg args[5] = {{sizeof dst, &dst}, {sizeof udo, &udo},
                            {sizeof src, &src}, {sizeof uso, &uso},
                            {sizeof un, &un}};
        return ocl__launch_raw(q, OCL__MOVE_BYTES, 1, 1, args, 5);
    }
    cl_event ev = NULL;
    cl_int err = clEnqueueCopyBuffer(q->cq, src, dst, soff, doff, n, 0, NULL,
                                     &ev);
    if (err != CL_SUCCESS)
        return ocl__fail_enqueue(q->dev->index, "clEnqueueCopyBuffer", err);
    ocl__track(q, ev);
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * Queues
 * ---------------------------------------------------------------------- */

/* A queue for kernels has sum partials; the copy queue (partials = 0)
 * runs transfers and barriers only, so it takes no device memory, and is
 * profiled (event_elapsed): profiling costs a timestamp per command, and
 * its commands are few and large. */
static int ocl__queue_new(sw__bdev *dev, int partials, cl_command_queue own,
                          sw__bqueue **out)
{
    sw__bqueue *q = sw__calloc(1, sizeof *q);
    if (!q)
        return sw__errorf(SW_ERR_HOST_OOM,
                          "opencl:%d: out of host memory for a queue",
                          dev->index);
    q->dev = dev;
    size_t psize = partials ? OCL__SUM_GROUPS * OCL__PARTIAL : 0;
    if (dev->capacity - dev->allocated < psize) {
        sw__free(q);
        return sw__errorf(SW_ERR_OOM,
                          "opencl:%d: no room for a queue's %zu bytes of sum "
                          "partials within the capacity",
                          dev->index, psize);
    }
    cl_int err = CL_SUCCESS;
    q->profiled = !partials;
    if (own != NULL) {
        /* Adopted (queue_wrap): a reference of ours, released with it. */
        err = clRetainCommandQueue(own);
        q->cq = err == CL_SUCCESS ? own : NULL;
    } else {
        q->cq = clCreateCommandQueue(dev->ctx, dev->device,
                                     q->profiled ? CL_QUEUE_PROFILING_ENABLE
                                                 : 0,
                                     &err);
    }
    if (own == NULL && q->profiled && (!q->cq || err != CL_SUCCESS)) {
        q->profiled = 0; /* the runtime cannot: untimed, as other queues */
        q->cq = clCreateCommandQueue(dev->ctx, dev->device, 0, &err);
    }
    if (!q->cq || err != CL_SUCCESS) {
        sw__free(q);
        return ocl__fail(ocl__code(err), dev->index,
                         own ? "clRetainCommandQueue" : "clCreateCommandQueue",
                         err, NULL);
    }
    if (psize > 0)
        q->partials = clCreateBuffer(dev->ctx, CL_MEM_READ_WRITE, psize,
                                     NULL, &err);
    if (psize > 0 && (!q->partials || err != CL_SUCCESS)) {
        clReleaseCommandQueue(q->cq);
        sw__free(q);
        return ocl__fail(SW_ERR_OOM, dev->index, "clCreateBuffer", err,
                         "the sum partials of a queue");
    }
    dev->allocated += psize;
    q->next = dev->queues;
    dev->queues = q;
    *out = q;
    return SW_OK;
}

/* Finish, release what waited for the queue, destroy. */
static void ocl__queue_free(sw__bqueue *q)
{
    sw__bdev *dev = q->dev;
    clFinish(q->cq);
    ocl__reap(q, 1);
    if (q->last)
        clReleaseEvent(q->last);
    if (q->partials)
        ocl__release_mem(dev, q->partials, OCL__SUM_GROUPS * OCL__PARTIAL);
    clReleaseCommandQueue(q->cq);
    sw__bqueue **pp = &dev->queues;
    while (*pp != q)
        pp = &(*pp)->next;
    *pp = q->next;
    sw__free(q);
}

/* ------------------------------------------------------------------------
 * Configuration
 * ---------------------------------------------------------------------- */

/* The capacity override, 0 when unset. */
static int ocl__env_memory(int index, uint64_t *out)
{
    *out = 0;
    const char *s = getenv("SPILLWAY_OPENCL_MEMORY");
    if (!s || !*s)
        return SW_OK;
    uint64_t v;
    if (sw_parse_size(s, &v) != 0)
        return sw__errorf(SW_ERR_INVALID_ARG,
                          "opencl:%d: SPILLWAY_OPENCL_MEMORY='%.100s' is not a "
                          "size (expected bytes with an optional K, M, G or T "
                          "suffix, e.g. 256M)",
                          index, s);
    if (v < OCL__MIN_MEMORY)
        return sw__errorf(SW_ERR_INVALID_ARG,
                          "opencl:%d: SPILLWAY_OPENCL_MEMORY='%.100s' (%" PRIu64
                          " bytes) is below the minimum of 1M",
                          index, s, v);
    *out = v;
    return SW_OK;
}

/* SPILLWAY_OPENCL_COPY_QUEUE=0: no copy queue (spills and restores go on
 * the default queue), to measure what it buys. */
static int ocl__env_copy_queue(void)
{
    const char *s = getenv("SPILLWAY_OPENCL_COPY_QUEUE");
    return !(s && strcmp(s, "0") == 0);
}

static int ocl__env_fp64_off(void)
{
    const char *s = getenv("SPILLWAY_OPENCL_FP64");
    return s && strcmp(s, "0") == 0;
}

/* ------------------------------------------------------------------------
 * Building the kernels
 * ---------------------------------------------------------------------- */

static int ocl__build(sw__bdev *dev, size_t red_local)
{
    char opts[160];
    snprintf(opts, sizeof opts, "-cl-std=CL1.2 -DSW_RED_L=%zu%s", red_local,
             dev->fp64 ? " -DSW_FP64=1" : "");
    cl_int err = CL_SUCCESS;
    const char *src = sw__opencl_kernels_cl;
    cl_program prog = clCreateProgramWithSource(dev->ctx, 1, &src, NULL,
                                                &err);
    if (!prog || err != CL_SUCCESS)
        return ocl__fail(ocl__code(err), dev->index,
                         "clCreateProgramWithSource", err, NULL);
    err = clBuildProgram(prog, 1, &dev->device, opts, NULL, NULL);
    if (err != CL_SUCCESS) {
        char log[1024] = "";
        clGetProgramBuildInfo(prog, dev->device, CL_PROGRAM_BUILD_LOG,
                              sizeof log - 1, log, NULL);
        log[sizeof log - 1] = '\0';
        for (char *p = log; *p; p++)
            if (*p == '\n')
                *p = ' ';
        clReleaseProgram(prog);
        char detail[1200];
        snprintf(detail, sizeof detail, "the built-in kernels (%s): %.900s",
                 opts, log);
        return ocl__fail(SW_ERR_DEVICE, dev->index, "clBuildProgram", err,
                         detail);
    }
    for (int i = 0; i < OCL__NKERNELS; i++) {
        if (ocl__kernels[i].fp64 && !dev->fp64)
            continue;
        dev->k[i] = clCreateKernel(prog, ocl__kernels[i].name, &err);
        if (!dev->k[i] || err != CL_SUCCESS) {
            for (int j = 0; j < i; j++)
                if (dev->k[j]) {
                    clReleaseKernel(dev->k[j]);
                    dev->k[j] = NULL;
                }
            dev->k[i] = NULL;
            clReleaseProgram(prog);
            return ocl__fail(SW_ERR_DEVICE, dev->index, "clCreateKernel",
                             err, ocl__kernels[i].name);
        }
    }
    dev->prog = prog;
    dev->red_local = red_local;
    return SW_OK;
}

static void ocl__unbuild(sw__bdev *dev)
{
    for (int i = 0; i < OCL__NKERNELS; i++)
        if (dev->k[i]) {
            clReleaseKernel(dev->k[i]);
            dev->k[i] = NULL;
        }
    if (dev->prog) {
        clReleaseProgram(dev->prog);
        dev->prog = NULL;
    }
}

/* The largest work-group any of the given kernels allows. */
static size_t ocl__kernels_wg(sw__bdev *dev, int first, int last)
{
    size_t lim = SIZE_MAX;
    for (int i = first; i <= last; i++) {
        size_t wg = 0;
        if (!dev->k[i])
            continue;
        if (clGetKernelWorkGroupInfo(dev->k[i], dev->device,
                                     CL_KERNEL_WORK_GROUP_SIZE, sizeof wg,
                                     &wg, NULL) == CL_SUCCESS &&
            wg > 0 && wg < lim)
            lim = wg;
    }
    return lim;
}

/* Build with the largest reduction work-group the device allows, then
 * pick the element-wise one; a kernel that allows less than was built for
 * (register pressure on a GPU) gets a rebuild with its limit. */
static int ocl__build_all(sw__bdev *dev)
{
    size_t maxwg = 1, items[3] = {1, 1, 1};
    cl_ulong lmem = 0;
    clGetDeviceInfo(dev->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof maxwg,
                    &maxwg, NULL);
    clGetDeviceInfo(dev->device, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof items,
                    items, NULL);
    clGetDeviceInfo(dev->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof lmem, &lmem,
                    NULL);
    size_t lim = OCL__MAX_LOCAL;
    if (maxwg < lim)
        lim = maxwg;
    if (items[0] < lim)
        lim = items[0];
    if (lmem / OCL__PARTIAL < lim) /* a sum's __local accumulators */
        lim = (size_t)(lmem / OCL__PARTIAL);
    if (lim < 1)
        lim = 1;
    size_t red = ocl__pow2_floor(lim);
    int rc = ocl__build(dev, red);
    if (rc != SW_OK)
        return rc;
    size_t red_ok = ocl__kernels_wg(dev, OCL__SUM1_I8, OCL__NKERNELS - 1);
    if (red_ok < red) {
        ocl__unbuild(dev);
        red = ocl__pow2_floor(red_ok);
        rc = ocl__build(dev, red);
        if (rc != SW_OK)
            return rc;
    }
    size_t ew = ocl__kernels_wg(dev, OCL__FILL_U8, OCL__FILL_BYTES);
    if (ew > lim)
        ew = lim;
    dev->ew_local = ocl__pow2_floor(ew);
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * Operations: devices and memory
 * ---------------------------------------------------------------------- */

static int ocl_device_count(int *count, char *why, size_t why_len)
{
    pthread_once(&ocl__list_once, ocl__enumerate);
    *count = ocl__list.count;
    if (why_len > 0)
        snprintf(why, why_len, "%s", ocl__list.why);
    return SW_OK;
}

static const char *ocl__type_name(cl_device_type t)
{
    if (t & CL_DEVICE_TYPE_GPU)
        return "GPU";
    if (t & CL_DEVICE_TYPE_CPU)
        return "CPU";
    if (t & CL_DEVICE_TYPE_ACCELERATOR)
        return "accelerator";
    return "device";
}

static void ocl__close_dev(sw__bdev *dev)
{
    while (dev->queues)
        ocl__queue_free(dev->queues);
    ocl__unbuild(dev);
    if (dev->ctx)
        clReleaseContext(dev->ctx);
    sw__free(dev);
}

/* Cut s to at most max bytes at a word boundary, marking the cut with
 * "...": a description is never cut mid-word. */
static void ocl__cut_words(char *s, size_t max)
{
    if (strlen(s) <= max)
        return;
    size_t end = max > 3 ? max - 3 : 0;
    while (end > 0 && s[end] != ' ')
        end--;
    while (end > 0 && (s[end - 1] == ' ' || s[end - 1] == ','))
        end--;
    memcpy(s + end, "...", 4);
}

/* Whether plat is reached through the ICD loader's contract (cl_khr_icd),
 * which makes every object begin with the platform's dispatch table. */
static int ocl__platform_is_icd(cl_platform_id plat)
{
    size_t len = 0;
    if (clGetPlatformInfo(plat, CL_PLATFORM_EXTENSIONS, 0, NULL, &len) !=
            CL_SUCCESS ||
        len == 0)
        return 0;
    char *ext = sw__calloc(1, len + 1);
    if (ext == NULL)
        return 0; /* the check it serves is left out, nothing fails */
    int icd = clGetPlatformInfo(plat, CL_PLATFORM_EXTENSIONS, len, ext,
                                NULL) == CL_SUCCESS &&
              strstr(ext, "cl_khr_icd") != NULL;
    sw__free(ext);
    return icd;
}

static int ocl_open(int index, sw__bdev **out, sw__device_props *props)
{
    pthread_once(&ocl__list_once, ocl__enumerate);
    if (index < 0 || index >= ocl__list.count)
        return sw__errorf(SW_ERR_NO_DEVICE,
                          "opencl:%d: no such device (%d OpenCL device%s)",
                          index, ocl__list.count,
                          ocl__list.count == 1 ? "" : "s");
    uint64_t override = 0;
    int rc = ocl__env_memory(index, &override);
    if (rc != SW_OK)
        return rc;

    sw__bdev *dev = sw__calloc(1, sizeof *dev);
    if (!dev)
        return sw__errorf(SW_ERR_HOST_OOM, "opencl:%d: out of host memory",
                          index);
    dev->index = index;
    dev->device = ocl__list.dev[index].device;
    cl_platform_id plat = ocl__list.dev[index].platform;

    cl_ulong gmem = 0, maxalloc = 0;
    cl_device_type type = 0;
    char name[96] = "", pname[64] = "";
    clGetDeviceInfo(dev->device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof gmem,
                    &gmem, NULL);
    clGetDeviceInfo(dev->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE,
                    sizeof maxalloc, &maxalloc, NULL);
    clGetDeviceInfo(dev->device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    clGetDeviceInfo(dev->device, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
    clGetPlatformInfo(plat, CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
    /* The extension string may be longer than ext: then the query fails,
     * so ask for its size first. */
    size_t extlen = 0;
    char *exts = NULL;
    if (clGetDeviceInfo(dev->device, CL_DEVICE_EXTENSIONS, 0, NULL,
                        &extlen) == CL_SUCCESS &&
        extlen > 0) {
        /* Without it the device would open without fp64: fail instead. */
        if ((exts = sw__calloc(1, extlen + 1)) == NULL) {
            sw__free(dev);
            return sw__errorf(SW_ERR_HOST_OOM, "opencl:%d: out of host "
                              "memory for the device's extension list",
                              index);
        }
        clGetDeviceInfo(dev->device, CL_DEVICE_EXTENSIONS, extlen, exts,
                        NULL);
    }
    int has_fp64 = exts && strstr(exts, "cl_khr_fp64") != NULL;
    dev->amd_free = exts &&
                    strstr(exts, "cl_amd_device_attribute_query") != NULL;
    sw__free(exts);
    dev->fp64 = has_fp64 && !ocl__env_fp64_off();

    if (gmem == 0) {
        sw__free(dev);
        return sw__errorf(SW_ERR_DEVICE,
                          "opencl:%d: %s reports no global memory "
                          "(CL_DEVICE_GLOBAL_MEM_SIZE is 0)",
                          index, name);
    }
    dev->capacity = gmem;
    if (override != 0 && override < dev->capacity)
        dev->capacity = override;
    dev->capacity -= dev->capacity % SW_ALLOC_GRANULARITY;

    cl_int err = CL_SUCCESS;
    cl_context_properties cprops[] = {CL_CONTEXT_PLATFORM,
                                      (cl_context_properties)plat, 0};
    dev->ctx = clCreateContext(cprops, 1, &dev->device, NULL, NULL, &err);
    if (!dev->ctx || err != CL_SUCCESS) {
        dev->ctx = NULL;
        ocl__close_dev(dev);
        return ocl__fail(ocl__code(err), index, "clCreateContext", err,
                         name);
    }
    rc = ocl__build_all(dev);
    if (rc == SW_OK)
        rc = ocl__queue_new(dev, 1, NULL, &dev->default_q);
    if (rc == SW_OK && ocl__env_copy_queue())
        rc = ocl__queue_new(dev, 0, NULL, &dev->copy_q);
    if (rc != SW_OK) {
        ocl__close_dev(dev);
        return rc;
    }
    if (ocl__platform_is_icd(plat))
        memcpy(&dev->dispatch, (void *)dev->default_q->cq,
               sizeof dev->dispatch);

    char cap[32], gm[32];
    sw_format_bytes(dev->capacity, cap, sizeof cap);
    sw_format_bytes(gmem, gm, sizeof gm);
    /* Composed at full length, then cut to the field. */
    char desc[512], nm[128], pn[96];
    snprintf(nm, sizeof nm, "%s", name);
    snprintf(pn, sizeof pn, "%s", pname);
    ocl__cut_words(nm, 60);
    ocl__cut_words(pn, 40);
    if (dev->capacity < gmem)
        snprintf(desc, sizeof desc,
                 "%s (%s, %s), capacity %s of %s "
                 "(SPILLWAY_OPENCL_MEMORY)%s",
                 nm, pn, ocl__type_name(type), cap, gm,
                 dev->fp64 ? "" : ", no fp64");
    else
        snprintf(desc, sizeof desc, "%s (%s, %s), capacity %s%s", nm, pn,
                 ocl__type_name(type), cap, dev->fp64 ? "" : ", no fp64");
    memset(props, 0, sizeof *props);
    ocl__cut_words(desc, sizeof props->description - 1);
    memcpy(props->description, desc, strlen(desc) + 1);
    props->total = dev->capacity;
    props->max_alloc = maxalloc != 0 && maxalloc < dev->capacity
                           ? maxalloc - maxalloc % SW_ALLOC_GRANULARITY
                           : dev->capacity;
    /* The contract's mem is a cl_mem, not an address: there is no host
     * address to give out through it (see docs/opencl.md). */
    props->host_addressable = 0;
    props->opaque_base = 1; /* cl_mem handles, not addresses */
    props->host_compute = (type & CL_DEVICE_TYPE_CPU) != 0; /* PoCL's */
    /* The kernels of opencl.cl: every dtype, float64 and complex128 only
     * with cl_khr_fp64 (the core refuses them otherwise, saying why). */
    props->dtypes = SW__ALL_DTYPES;
    if (!dev->fp64) {
        props->dtypes &= ~(1u << SW_FLOAT64 | 1u << SW_COMPLEX128);
        snprintf(props->dtypes_why, sizeof props->dtypes_why,
                 "no double precision (cl_khr_fp64)%s",
                 has_fp64 ? ", turned off by SPILLWAY_OPENCL_FP64=0" : "");
    }
    *out = dev;
    return SW_OK;
}

static void ocl_close(sw__bdev *dev)
{
    if (dev)
        ocl__close_dev(dev);
}

static int ocl_alloc(sw__bdev *dev, size_t size, uintptr_t *mem)
{
    ocl__reap_all(dev);
    if (size > dev->capacity - dev->allocated) {
        char a[32], c[32], s[32];
        sw_format_bytes(dev->allocated, a, sizeof a);
        sw_format_bytes(dev->capacity, c, sizeof c);
        sw_format_bytes(size, s, sizeof s);
        return sw__errorf(SW_ERR_OOM,
                          "opencl:%d: %s more would pass the device's "
                          "capacity of %s (%s, %" PRIu64 " bytes, are "
                          "allocated; spillway enforces the capacity itself, "
                          "as some runtimes, PoCL among them, let "
                          "allocations grow past the memory they report)",
                          dev->index, s, c, a, dev->allocated);
    }
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(dev->ctx, CL_MEM_READ_WRITE, size, NULL, &err);
    if (!m || err != CL_SUCCESS) {
        char what[64];
        snprintf(what, sizeof what, "%zu bytes", size);
        int code = err == CL_INVALID_BUFFER_SIZE ? SW_ERR_TOO_LARGE
                   : err == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
                           err == CL_OUT_OF_RESOURCES ||
                           err == CL_OUT_OF_HOST_MEMORY
                       ? SW_ERR_OOM
                       : SW_ERR_DEVICE;
        return ocl__fail(code, dev->index, "clCreateBuffer", err, what);
    }
    dev->allocated += size;
    *mem = (uintptr_t)m;
    return SW_OK;
}

static int ocl_free(sw__bdev *dev, sw__bqueue *q, uintptr_t mem, size_t size)
{
    if (!q)
        q = dev->default_q;
    cl_mem m = (cl_mem)mem;
    ocl__reap(q, 0);
    /* Idle queue (its latest command complete, no older frees waiting):
     * stream order already holds. */
    int idle = !q->head && (q->last == NULL || ocl__complete(q->last));
    if (idle) {
        ocl__release_mem(dev, m, size);
        return SW_OK;
    }
    ocl__dfree *f = sw__malloc(sizeof *f);
    cl_event after = NULL;
    if (!f || ocl__latest(q, &after) != SW_OK) {
        /* No way to wait: release now.  OpenCL keeps the buffer alive for
         * the commands already queued on it, so this is still safe; only
         * our count drops a little early. */
        sw__free(f);
        ocl__release_mem(dev, m, size);
        return SW_OK;
    }
    f->next = NULL;
    f->mem = m;
    f->size = size;
    f->after = after;
    if (q->tail)
        q->tail->next = f;
    else
        q->head = f;
    q->tail = f;
    return SW_OK;
}

static int ocl_mem_info(sw__bdev *dev, uint64_t *free_bytes, uint64_t *total,
                        int *free_known)
{
    ocl__reap_all(dev);
    *total = dev->capacity;
    *free_known = 0;
    *free_bytes = 0;
    if (dev->amd_free) {
        /* Free memory in KiB: total free, largest free block. */
        size_t kib[2] = {0, 0};
        if (clGetDeviceInfo(dev->device, OCL__GLOBAL_FREE_MEMORY_AMD,
                            sizeof kib, kib, NULL) == CL_SUCCESS) {
            uint64_t drv = (uint64_t)kib[0] * 1024;
            uint64_t ours = dev->capacity - dev->allocated;
            *free_bytes = drv < ours ? drv : ours;
            *free_known = 1;
        }
    }
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * Operations: queues and transfers
 * ---------------------------------------------------------------------- */

static sw__bqueue *ocl_default_queue(sw__bdev *dev) { return dev->default_q; }

static int ocl_queue_create(sw__bdev *dev, sw__bqueue **out)
{
    return ocl__queue_new(dev, 1, NULL, out);
}

static int ocl_queue_native(sw__bqueue *q, uintptr_t *handle)
{
    q->foreign = 1;
    *handle = (uintptr_t)q->cq;
    return SW_OK;
}

/* A command queue of the caller's, which must be of this context and
 * device, and in order (the contract's queues are).  OpenCL has no call
 * that tells a live queue from anything else without reading through the
 * handle (the ICD loader loads its dispatch table from it), so what can
 * be told is told first, with no load of ours or the driver's: spillway's
 * own queues by their handles; memory that is not there, asked of the
 * kernel (sw__mem_probe); on an ICD platform, memory that does not begin
 * with the platform's dispatch table, which every object of it does.
 * What passes is an object of the platform, or memory that looks like
 * one: a released queue, or another object (a cl_mem, a program), is
 * read as a queue by the driver -- the caller's to avoid, as with any
 * OpenCL call. */
static int ocl_queue_wrap(sw__bdev *dev, uintptr_t handle, sw__bqueue **out)
{
    for (sw__bqueue *o = dev->queues; o != NULL; o = o->next)
        if (!o->adopted && (uintptr_t)o->cq == handle)
            return sw__errorf(SW_ERR_INVALID_ARG, "opencl:%d: %#jx is "
                              "spillway's own %s: use that queue itself",
                              dev->index, (uintmax_t)handle,
                              o == dev->default_q ? "default queue"
                              : o == dev->copy_q  ? "copy queue"
                                                  : "command queue");
    void *first = NULL;
    int seen = sw__mem_probe(handle, &first, sizeof first);
    if (seen == 0 || (seen == 1 && dev->dispatch != NULL &&
                      first != dev->dispatch))
        return sw__errorf(SW_ERR_INVALID_ARG, "opencl:%d: %#jx is not an "
                          "OpenCL object of this platform (%s)", dev->index,
                          (uintmax_t)handle,
                          seen == 0 ? "no memory there"
                                    : "it does not begin with the "
                                      "platform's dispatch table");
    cl_command_queue cq = (cl_command_queue)handle;
    cl_context ctx = NULL;
    cl_device_id device = NULL;
    cl_command_queue_properties props = 0;
    cl_int err = clGetCommandQueueInfo(cq, CL_QUEUE_CONTEXT, sizeof ctx,
                                       &ctx, NULL);
    if (err == CL_SUCCESS)
        err = clGetCommandQueueInfo(cq, CL_QUEUE_DEVICE, sizeof device,
                                    &device, NULL);
    if (err == CL_SUCCESS)
        err = clGetCommandQueueInfo(cq, CL_QUEUE_PROPERTIES, sizeof props,
                                    &props, NULL);
    if (err != CL_SUCCESS)
        return ocl__fail(SW_ERR_INVALID_ARG, dev->index,
                         "clGetCommandQueueInfo", err,
                         "not a live command queue");
    if (ctx != dev->ctx || device != dev->device)
        return sw__errorf(SW_ERR_INVALID_ARG, "opencl:%d: command queue "
                          "%#jx is of %s, not of this device's context "
                          "(make it in Device.native_context: "
                          "pyopencl.Context.from_int_ptr)", dev->index,
                          (uintmax_t)handle,
                          ctx != dev->ctx ? "another context"
                                          : "another device");
    if (props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)
        return sw__errorf(SW_ERR_INVALID_ARG, "opencl:%d: command queue "
                          "%#jx runs out of order; spillway's queues are in "
                          "order", dev->index, (uintmax_t)handle);
    int rc = ocl__queue_new(dev, 1, cq, out);
    if (rc == SW_OK) {
        (*out)->foreign = 1;
        (*out)->adopted = 1;
    }
    return rc;
}

static int ocl_native_context(sw__bdev *dev, uintptr_t *context)
{
    *context = (uintptr_t)dev->ctx;
    return SW_OK;
}

/* The default and copy queues live until close. */
static void ocl_queue_destroy(sw__bqueue *q)
{
    if (q && q != q->dev->default_q && q != q->dev->copy_q)
        ocl__queue_free(q);
}

/* Contract v3: a second in-order command queue of the context, made by
 * open, for spills and restores, so that their transfers run beside the
 * default queue's kernels (each waits for the other through barriers on
 * events, wait_event). */
static sw__bqueue *ocl_copy_queue(sw__bdev *dev) { return dev->copy_q; }

/* Nothing pending: the latest command's event has completed (on an
 * in-order queue it completes last).  A status query, never a wait; the
 * queue is flushed first, so that "not yet" does not last for want of a
 * flush. */
static int ocl_queue_idle(sw__bqueue *q)
{
    if (q->foreign) {
        /* Others' commands too: a marker says, once flushed.  Never
         * waiting, a fresh marker is seldom complete at once: the next
         * ask finds the one this ask left, if nothing came after it. */
        if (q->idle_marked && ocl__complete(q->last))
            return 1;
        cl_event m = NULL;
        if (clEnqueueMarkerWithWaitList(q->cq, 0, NULL, &m) != CL_SUCCESS)
            return 0;
        ocl__track(q, m);
        q->idle_marked = 1;
        clFlush(q->cq);
        q->unflushed = 0;
        return ocl__complete(q->last);
    }
    if (q->last == NULL)
        return 1;
    if (q->unflushed) {
        clFlush(q->cq);
        q->unflushed = 0;
    }
    return ocl__complete(q->last);
}

static int ocl_write(sw__bqueue *q, uintptr_t dst, size_t dst_off,
                     const void *src, size_t n)
{
    cl_event ev = NULL;
    cl_int err = clEnqueueWriteBuffer(q->cq, (cl_mem)dst, CL_FALSE, dst_off,
                                      n, src, 0, NULL, &ev);
    if (err != CL_SUCCESS)
        return ocl__fail_enqueue(q->dev->index, "clEnqueueWriteBuffer", err);
    ocl__track(q, ev);
    return SW_OK;
}

static int ocl_read(sw__bqueue *q, void *dst, uintptr_t src, size_t src_off,
                    size_t n)
{
    cl_event ev = NULL;
    cl_int err = clEnqueueReadBuffer(q->cq, (cl_mem)src, CL_FALSE, src_off, n,
                                     dst, 0, NULL, &ev);
    if (err != CL_SUCCESS)
        return ocl__fail_enqueue(q->dev->index, "clEnqueueReadBuffer", err);
    ocl__track(q, ev);
    return SW_OK;
}

static int ocl_copy(sw__bqueue *q, uintptr_t dst, size_t dst_off,
                    uintptr_t src, size_t src_off, size_t n)
{
    return ocl__copy_any(q, (cl_mem)dst, dst_off, (cl_mem)src, src_off, n);
}

static int ocl_fill(sw__bqueue *q, uintptr_t dst, size_t dst_off, size_t n,
                    const void *pattern, size_t pattern_size)
{
    return ocl__fill_any(q, (cl_mem)dst, dst_off, n, pattern, pattern_size);
}

/* ------------------------------------------------------------------------
 * Operations: kernels
 * ---------------------------------------------------------------------- */

/* An operand must be a buffer of this context holding [off, off + len). */
static int ocl__check_operand(sw__bdev *dev, const char *kname,
                              const char *dname, const char *which,
                              const sw_devmem *m, size_t len)
{
    if (m->base == 0)
        return sw__errorf(SW_ERR_INVALID_ARG,
                          "opencl:%d: kernel %s %s: operand %s is a null "
                          "buffer",
                          dev->index, kname, dname, which);
    size_t size = 0;
    cl_int err = clGetMemObjectInfo((cl_mem)m->base, CL_MEM_SIZE, sizeof size,
                                    &size, NULL);
    if (err != CL_SUCCESS)
        return ocl__fail(SW_ERR_INVALID_ARG, dev->index, "clGetMemObjectInfo",
                         err, "a kernel operand is not an OpenCL buffer");
    if (m->offset > size || len > size - m->offset)
        return sw__errorf(SW_ERR_OUT_OF_RANGE,
                          "opencl:%d: kernel %s %s: operand %s [%zu+%zu) "
                          "lies outside its buffer of %zu bytes",
                          dev->index, kname, dname, which, m->offset, len,
                          size);
    return SW_OK;
}

static int ocl__sum(sw__bqueue *q, const sw_kernel_args *args)
{
    sw__bdev *dev = q->dev;
    if (!q->partials) /* the copy queue: the core never launches there */
        return sw__errorf(SW_ERR_INVALID_ARG,
                          "opencl:%d: a sum on the copy queue", dev->index);
    size_t L = dev->red_local;
    size_t n = args->n;
    size_t groups = (n + L - 1) / L;
    if (groups > OCL__SUM_GROUPS)
        groups = OCL__SUM_GROUPS;
    cl_ulong tiles = (n + groups * L - 1) / (groups * L);
    size_t es = sw_dtype_size(args->dtype);
    ocl__kid k1 = ocl__dtype[args->dtype].sum1;
    ocl__kid k2 = ocl__dtype[args->dtype].sum2;
    cl_mem a = (cl_mem)args->a.base, out = (cl_mem)args->out.base;
    cl_ulong ao = args->a.offset / es, un = n, ug = groups,
             oo = args->out.offset;
    ocl__arg s1[5] = {{sizeof a, &a},
                      {sizeof ao, &ao},
                      {sizeof un, &un},
                      {sizeof tiles, &tiles},
                      {sizeof q->partials, &q->partials}};
    int rc = ocl__launch_raw(q, k1, groups * L, L, s1, 5);
    if (rc != SW_OK)
        return rc;
    ocl__arg s2[4] = {{sizeof q->partials, &q->partials},
                      {sizeof ug, &ug},
                      {sizeof out, &out},
                      {sizeof oo, &oo}};
    return ocl__launch_raw(q, k2, L, L, s2, 4);
}

/* The core has checked the kernel, the dtype (one of props.dtypes: every
 * one, float64 and complex128 only with cl_khr_fp64), the count and the
 * typed operands' alignment (a cl_mem handle is a host pointer aligned to
 * at least 8 bytes, so its check of base + offset is one of the offset;
 * the kernels need no more than 8: 16-byte elements are read as pairs).
 * What only this backend can tell is checked here: each operand against
 * the buffer the runtime knows (a wrapped sw_devmem may claim more than
 * its cl_mem holds). */
static int ocl_launch(sw__bqueue *q, const sw_kernel_args *args)
{
    sw__bdev *dev = q->dev;
    const char *kname = sw_kernel_name(args->kernel);
    const char *dname = sw_dtype_name(args->dtype);
    assert((unsigned)args->dtype < SW_DTYPE_COUNT &&
           (!ocl__dtype[args->dtype].fp64 || dev->fp64));
    size_t es = sw_dtype_size(args->dtype);
    size_t bytes = args->n * es;

    /* Operands and their ranges; FILL and COPY at offsets that are not
     * whole elements go to the byte kernels. */
    const sw_devmem *ops[3] = {NULL, NULL, NULL};
    size_t lens[3] = {bytes, bytes, bytes};
    const char *names[3] = {"out", "a", "b"};
    int typed = 1;
    switch (args->kernel) {
    case SW_KERNEL_ADD:
        ops[2] = &args->b;
        /* fall through */
    case SW_KERNEL_SCALE:
    case SW_KERNEL_AXPY:
    case SW_KERNEL_COPY:
        ops[0] = &args->out;
        ops[1] = &args->a;
        break;
    case SW_KERNEL_FILL:
        ops[0] = &args->out;
        break;
    case SW_KERNEL_SUM:
        ops[0] = &args->out;
        lens[0] = args->dtype == SW_COMPLEX64 ||
                          args->dtype == SW_COMPLEX128
                      ? 16
                      : 8;
        ops[1] = &args->a;
        break;
    }
    for (int i = 0; i < 3; i++) {
        if (!ops[i])
            continue;
        int rc = ocl__check_operand(dev, kname, dname, names[i], ops[i],
                                    lens[i]);
        if (rc != SW_OK)
            return rc;
        if (ops[i]->offset % es == 0)
            continue;
        /* SUM's out is stored byte by byte; every other typed operand is
         * aligned (the core's check). */
        assert(args->kernel == SW_KERNEL_FILL ||
               args->kernel == SW_KERNEL_COPY ||
               (args->kernel == SW_KERNEL_SUM && i == 0));
        if (args->kernel != SW_KERNEL_SUM)
            typed = 0; /* FILL or COPY: the byte kernels */
    }

    cl_mem o = (cl_mem)args->out.base;
    cl_mem a = args->a.base ? (cl_mem)args->a.base : o;
    cl_mem b = args->b.base ? (cl_mem)args->b.base : o;
    /* alpha as one element (elements.h's rules), or for float16 and
     * bfloat16 that element's value as the float the kernels compute
     * with. */
    unsigned char alpha[16];
    sw__element_bytes(args->dtype, args->alpha, alpha);

    /* Fills and copies by element size: 1, 2, 4, 8, 16 bytes. */
    static const ocl__kid fills[5] = {OCL__FILL_U8, OCL__FILL_U16,
                                      OCL__FILL_U32, OCL__FILL_U64,
                                      OCL__FILL_U128};
    int lg = es == 1 ? 0 : es == 2 ? 1 : es == 4 ? 2 : es == 8 ? 3 : 4;
    switch (args->kernel) {
    case SW_KERNEL_FILL:
        if (!typed)
            return ocl__fill_any(q, o, args->out.offset, bytes, alpha, es);
        /* The 16-byte fill counts its offset in ulongs. */
        return ocl__launch_ew(q, fills[lg], o,
                              args->out.offset / (es == 16 ? 8 : es), o, 0,
                              o, 0, alpha, es, args->n);
    case SW_KERNEL_COPY: {
        int overlap = o == a && args->out.offset < args->a.offset + bytes &&
                      args->a.offset < args->out.offset + bytes;
        if (!typed || overlap)
            return ocl__copy_any(q, o, args->out.offset, a, args->a.offset,
                                 bytes);
        /* 16-byte elements copy as two ulongs. */
        size_t cs = es == 16 ? 8 : es;
        static const ocl__kid copies[4] = {OCL__COPY_U8, OCL__COPY_U16,
                                           OCL__COPY_U32, OCL__COPY_U64};
        return ocl__launch_ew(q, copies[lg < 3 ? lg : 3], o,
                              args->out.offset / cs, a, args->a.offset / cs,
                              o, 0, alpha, cs, bytes / cs);
    }
    case SW_KERNEL_SUM:
        return ocl__sum(q, args);
    default:
        break;
    }
    size_t alpha_size = es;
    if (args->dtype == SW_FLOAT16 || args->dtype == SW_BFLOAT16) {
        uint16_t h;
        memcpy(&h, alpha, 2);
        float f = args->dtype == SW_FLOAT16 ? sw__f16_to_f32(h)
                                            : sw__bf16_to_f32(h);
        memcpy(alpha, &f, 4);
        alpha_size = 4;
    }
    int add = ocl__dtype[args->dtype].add;
    assert(add >= 0); /* bool has no arithmetic: the core refuses it */
    int row = args->kernel == SW_KERNEL_ADD     ? 0
              : args->kernel == SW_KERNEL_SCALE ? 1
                                                : 2;
    /* Complex kernels count offsets in parts (float or double). */
    size_t unit = args->dtype == SW_COMPLEX64 || args->dtype == SW_COMPLEX128
                      ? es / 2
                      : es;
    return ocl__launch_ew(q, (ocl__kid)(add + row), o, args->out.offset / unit,
                          a, args->a.offset / unit, b, args->b.offset / unit,
                          alpha, alpha_size, args->n);
}

/* ------------------------------------------------------------------------
 * Operations: events and waiting
 * ---------------------------------------------------------------------- */

static int ocl_event_record(sw__bqueue *q, sw__bevent **out)
{
    sw__bevent *ev = sw__malloc(sizeof *ev);
    if (!ev)
        return sw__errorf(SW_ERR_HOST_OOM,
                          "opencl:%d: out of host memory for an event",
                          q->dev->index);
    /* On the profiled queue, a marker of its own: the latest command may
     * have ended long before (an idle queue), and its end would count the
     * idle time as the next copies'. */
    ev->timed = q->profiled;
    if (q->profiled || q->foreign) {
        cl_event m = NULL;
        cl_int err = clEnqueueMarkerWithWaitList(q->cq, 0, NULL, &m);
        if (err != CL_SUCCESS) {
            sw__free(ev);
            return ocl__fail_enqueue(q->dev->index,
                                     "clEnqueueMarkerWithWaitList", err);
        }
        ocl__track(q, m);
    }
    int rc = ocl__latest(q, &ev->ev);
    if (rc != SW_OK) {
        sw__free(ev);
        return rc;
    }
    ev->index = q->dev->index;
    *out = ev;
    return SW_OK;
}

/* The error of an event whose status is negative: the work before it
 * failed. */
static int ocl__status_error(const sw__bevent *ev, cl_int st)
{
    int code = ocl__code(st);
    return sw__errorf(code,
                      "opencl:%d: work queued before this point failed: "
                      "execution status %s (%d)%s",
                      ev->index, ocl__errname(st), (int)st,
                      code == SW_ERR_OOM ? " (the device could not provide "
                                           "memory at the buffer's first "
                                           "use)"
                                         : "");
}

static int ocl_event_query(sw__bevent *ev, int *done)
{
    cl_int st = CL_QUEUED;
    cl_int err = clGetEventInfo(ev->ev, CL_EVENT_COMMAND_EXECUTION_STATUS,
                                sizeof st, &st, NULL);
    if (err != CL_SUCCESS)
        return ocl__fail(SW_ERR_DEVICE, ev->index, "clGetEventInfo", err,
                         NULL);
    if (st < 0)
        return ocl__status_error(ev, st);
    *done = st == CL_COMPLETE;
    return SW_OK;
}

static int ocl_event_wait(sw__bevent *ev)
{
    cl_int err = clWaitForEvents(1, &ev->ev);
    cl_int st = CL_COMPLETE;
    clGetEventInfo(ev->ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st,
                   NULL);
    if (st < 0)
        return ocl__status_error(ev, st);
    if (err != CL_SUCCESS)
        return ocl__fail(ocl__code(err), ev->index, "clWaitForEvents", err,
                         NULL);
    return SW_OK;
}

/* Between the ends of two markers of the profiled queue (in order, so
 * what ran between them ran in that time).  Never blocks: both complete. */
static int ocl_event_elapsed(sw__bevent *from, sw__bevent *to,
                             double *seconds)
{
    if (!from->timed || !to->timed)
        return sw__errorf(SW_ERR_UNSUPPORTED, "opencl:%d: elapsed time "
                          "only between the copy queue's events",
                          to->index);
    cl_ulong t0 = 0, t1 = 0;
    cl_int err = clGetEventProfilingInfo(from->ev, CL_PROFILING_COMMAND_END,
                                         sizeof t0, &t0, NULL);
    if (err == CL_SUCCESS)
        err = clGetEventProfilingInfo(to->ev, CL_PROFILING_COMMAND_END,
                                      sizeof t1, &t1, NULL);
    if (err != CL_SUCCESS) /* not complete, or no timestamps after all */
        return ocl__fail(SW_ERR_UNSUPPORTED, to->index,
                         "clGetEventProfilingInfo", err, NULL);
    *seconds = t1 > t0 ? (double)(t1 - t0) * 1e-9 : 0;
    return SW_OK;
}

static void ocl_event_release(sw__bevent *ev)
{
    if (!ev)
        return;
    clReleaseEvent(ev->ev);
    sw__free(ev);
}

static int ocl_synchronize(sw__bqueue *q)
{
    cl_int err = clFinish(q->cq);
    if (err != CL_SUCCESS)
        return ocl__fail(ocl__code(err), q->dev->index, "clFinish", err,
                         NULL);
    return SW_OK;
}

/* Work enqueued on q from now on waits for ev, on the device.  The event's
 * queue was flushed when it was recorded (ocl__latest), as OpenCL requires
 * of an event waited for from another queue. */
static int ocl_wait_event(sw__bqueue *q, sw__bevent *ev)
{
    cl_event done = NULL;
    cl_int err = clEnqueueBarrierWithWaitList(q->cq, 1, &ev->ev, &done);
    if (err != CL_SUCCESS)
        return ocl__fail_enqueue(q->dev->index, "clEnqueueBarrierWithWaitList",
                                 err);
    ocl__track(q, done);
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * The ops table
 * ---------------------------------------------------------------------- */

const sw__backend_ops sw__opencl_backend = {
    .version = SW__BACKEND_VERSION,
    .name = "opencl",
    .device_count = ocl_device_count,
    .open = ocl_open,
    .close = ocl_close,
    .alloc = ocl_alloc,
    .free = ocl_free,
    .mem_info = ocl_mem_info,
    .default_queue = ocl_default_queue,
    .queue_create = ocl_queue_create,
    .queue_destroy = ocl_queue_destroy,
    .write = ocl_write,
    .read = ocl_read,
    .copy = ocl_copy,
    .fill = ocl_fill,
    .launch = ocl_launch,
    .event_record = ocl_event_record,
    .event_query = ocl_event_query,
    .event_wait = ocl_event_wait,
    .event_release = ocl_event_release,
    .synchronize = ocl_synchronize,
    .wait_event = ocl_wait_event,
    .copy_queue = ocl_copy_queue,
    .queue_idle = ocl_queue_idle,
    .event_elapsed = ocl_event_elapsed,
    .queue_native = ocl_queue_native,
    .queue_wrap = ocl_queue_wrap,
    .native_context = ocl_native_context,
};
