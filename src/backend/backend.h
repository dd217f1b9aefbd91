/*
 * backend.h -- the contract every backend implements, stated once.
 *
 * A backend is one `static const sw__backend_ops` table (sim.c, opencl.c,
 * cuda.c), registered in src/core/device.c.  It is mechanism only: policy
 * (accounting, caching, budgets, spilling, fault injection) lives in the
 * core, which reaches a backend solely through the thin wrappers in
 * src/core/bops.c.  New members are only ever appended, and `version` says
 * which exist.
 *
 * Rules:
 *  - Every operation returns SW_OK or a negative SW_ERR_* code; on failure it
 *    also sets the detail message with sw__errorf() (the one hook into the
 *    core a backend may use) and leaves its out-parameters untouched.
 *  - The core calls every operation on a device with that device's mutex
 *    held, except event_wait/event_query/event_release and synchronize,
 *    which it calls without the lock (they can block).  A backend therefore
 *    needs no locking of its own for its device state, except for state it
 *    shares with threads of its own (the simulated device's worker) or with
 *    the wait operations.
 *  - Queues are in order.  Operations that take a queue are enqueued on it
 *    and may complete later; host memory passed to them must stay valid
 *    until an event recorded after them has completed.
 *  - A backend never calls back into the core (no locks, no buffers): the
 *    only core functions it may call are sw__errorf, the host allocator
 *    below (sw__malloc and friends) and the pure helpers of the public
 *    header (sw_dtype_size, sw_dtype_name, sw_kernel_name, sw_parse_size,
 *    sw_format_bytes).
 *  - The core validates every argument it passes (kernel, dtype, element
 *    count, operand alignment, ranges), once for every backend.
 */
#ifndef SW_BACKEND_H
#define SW_BACKEND_H

#include "spillway.h"

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define SW__BACKEND_VERSION 5

typedef struct sw__bdev sw__bdev;     /* a backend's open device */
typedef struct sw__bqueue sw__bqueue; /* an in-order queue on it */
typedef struct sw__bevent sw__bevent; /* a point in a queue */

/* What open() reports about a device. */
typedef struct sw__device_props {
    char description[160];
    uint64_t total;     /* capacity in bytes; 0 if unknown */
    uint64_t max_alloc; /* largest single allocation; 0 = total */
    /* Nonzero when device addresses are host addresses (the simulated
     * device; a CPU OpenCL device whose buffers can be mapped). */
    int host_addressable;
    /* Bit d: the built-in kernels support sw_dtype d.  0 means the four of
     * contract version 1 (float32, float64, int32, int64); the core never
     * launches a dtype that is not here. */
    uint32_t dtypes;
    /* When dtypes lacks some, why (one line, e.g. "no cl_khr_fp64"). */
    char dtypes_why[96];
    /* Nonzero when the device's memory is the host's (the host backend,
     * unified memory): there is nothing to spill to, so the core never
     * spills -- a budget that would be passed is an OOM after the pressure
     * callbacks -- and `spilled` stays 0. */
    int no_spill;
    /* Nonzero when a sw_devmem base is a handle, not an address (OpenCL's
     * cl_mem): the core then checks operand alignment on the offset
     * alone. */
    int opaque_base;
} sw__device_props;

typedef struct sw__backend_ops {
    int version; /* SW__BACKEND_VERSION when written */
    const char *name; /* spec prefix: "sim", "opencl", "cuda" */

    /* Devices this backend offers now.  When none are available (no driver,
     * no platform) *count = 0 and why (why_len bytes) says why in one line.
     * pre: count, why non-NULL. */
    int (*device_count)(int *count, char *why, size_t why_len);

    /* Open device index (0 <= index < count).  props is filled in. */
    int (*open)(int index, sw__bdev **out, sw__device_props *props);
    /* pre: no live allocations, no queues but the default; waits for the
     * device to finish its work, then releases everything. */
    void (*close)(sw__bdev *dev);

    /* pre: size > 0 and a multiple of SW_ALLOC_GRANULARITY.  The memory is
     * usable by work queued on any queue of the device after this returns.
     * SW_ERR_OOM when the device cannot provide it now. */
    int (*alloc)(sw__bdev *dev, size_t size, uintptr_t *mem);
    /* Stream-ordered free: mem returns to the device after all work queued
     * on q before this call has completed.  Never waits.  pre: mem came from
     * alloc and size is the size it was allocated with. */
    int (*free)(sw__bdev *dev, sw__bqueue *q, uintptr_t mem, size_t size);
    /* Driver's view of memory. *free_known = 0 when it cannot tell. */
    int (*mem_info)(sw__bdev *dev, uint64_t *free, uint64_t *total,
                    int *free_known);

    /* The device's in-order default queue, created by open. */
    sw__bqueue *(*default_queue)(sw__bdev *dev);
    int (*queue_create)(sw__bdev *dev, sw__bqueue **out);
    /* Waits for the queue's work, then destroys it. */
    void (*queue_destroy)(sw__bqueue *q);

    /* Enqueued transfers.  Offsets are byte offsets into the allocation
     * mem; pre: ranges lie inside their allocations, n > 0. */
    int (*write)(sw__bqueue *q, uintptr_t dst, size_t dst_off,
                 const void *src, size_t n);
    int (*read)(sw__bqueue *q, void *dst, uintptr_t src, size_t src_off,
                size_t n);
    int (*copy)(sw__bqueue *q, uintptr_t dst, size_t dst_off, uintptr_t src,
                size_t src_off, size_t n);
    /* pre: pattern_size in {1,2,4,8}, n a multiple of it. */
    int (*fill)(sw__bqueue *q, uintptr_t dst, size_t dst_off, size_t n,
                const void *pattern, size_t pattern_size);
    /* A built-in kernel; args validated by the core (kernel, a dtype of
     * props.dtypes, n > 0 and its byte count, typed operands aligned to
     * their elements, operand ranges inside the buffers the core knows
     * of).  A backend checks only what it alone can know, such as an
     * operand lying inside what its runtime allocated. */
    int (*launch)(sw__bqueue *q, const sw_kernel_args *args);

    /* An event completes when all work enqueued on q before it has. */
    int (*event_record)(sw__bqueue *q, sw__bevent **out);
    /* Without the device lock.  *done = 1 when complete.  An error that
     * surfaced in the work before the event is returned here. */
    int (*event_query)(sw__bevent *ev, int *done);
    /* Without the device lock.  Blocks until complete; returns the first
     * error of the work before it, as event_query. */
    int (*event_wait)(sw__bevent *ev);
    void (*event_release)(sw__bevent *ev);
    /* Without the device lock: wait for all work on q.  Must not allocate
     * host memory: it is the core's way to wait when no event can be had
     * (a copy into host memory must have ended before that memory is
     * reused). */
    int (*synchronize)(sw__bqueue *q);

    /* Version 2. */
    /* Work enqueued on q after this call waits for ev (recorded on another
     * queue of the same device).  Never blocks the caller; ev may be
     * released right after.  NULL in a version-1 table: the core then
     * waits on the host instead. */
    int (*wait_event)(sw__bqueue *q, sw__bevent *ev);

    /* Version 3.  Each may be NULL: the core then does without it. */
    /* A second in-order queue of the device for copies between host and
     * device memory (spills and restores), created by open and destroyed
     * by close (no reservation of device memory, unlike queue_create), so
     * that copies run beside kernels: a second CUDA stream, a second
     * OpenCL queue, a copy worker on the simulated device.  NULL: copies go
     * on the default queue. */
    sw__bqueue *(*copy_queue)(sw__bdev *dev);
    /* Nonzero when nothing is queued on q or running there now (never
     * blocks): a small host transfer may then be done inline.  With the
     * device lock held. */
    int (*queue_idle)(sw__bqueue *q);
    /* Host memory for the staging pool that spills copy into, page-locked
     * where the backend can so that copies run at full rate and
     * asynchronously (cuMemHostAlloc).  With the device lock held; NULL
     * members: the core's own host allocator. */
    int (*host_alloc)(sw__bdev *dev, size_t size, void **out);
    void (*host_free)(sw__bdev *dev, void *p, size_t size);

    /* Version 4.  May be NULL: the core then times copies on the host,
     * from their enqueue to when it sees them done. */
    /* Seconds of device time from `from` to `to`, two complete events of
     * one queue, `from` recorded first (cuEventElapsedTime): what the work
     * between them took, without the time spent waiting before it.
     * SW_ERR_UNSUPPORTED when the backend cannot tell for these two.
     * Without the device lock, as event_query. */
    int (*event_elapsed)(sw__bevent *from, sw__bevent *to, double *seconds);

    /* Version 5: the runtime's own handles, for work spillway does not
     * see (sw_queue_native, sw_queue_wrap_native, sw_device_native_context).
     * Each may be NULL: the core then answers SW_ERR_UNSUPPORTED. */
    /* q's stream as the runtime knows it (CUstream, cl_command_queue). */
    int (*queue_native)(sw__bqueue *q, uintptr_t *handle);
    /* A queue over a stream the caller owns, checked to be one of this
     * device (and context), in order, and alive where the runtime can
     * tell (SW_ERR_INVALID_ARG, saying why, otherwise; handle is never 0).
     * queue_destroy of it waits for its work and lets go of what it
     * holds, never destroying the stream itself. */
    int (*queue_wrap)(sw__bdev *dev, uintptr_t handle, sw__bqueue **out);
    /* The context the device's memory and queues live in (cl_context,
     * CUcontext). */
    int (*native_context)(sw__bdev *dev, uintptr_t *context);
} sw__backend_ops;

/* The backends this build has (NULL-free list in src/core/device.c). */
extern const sw__backend_ops sw__sim_backend;
#ifdef SW_HAVE_OPENCL
extern const sw__backend_ops sw__opencl_backend; /* opencl.c */
#endif
extern const sw__backend_ops sw__cuda_backend; /* cuda.c: always built */
extern const sw__backend_ops sw__hip_backend;  /* hip.c: always built */
extern const sw__backend_ops sw__ze_backend;   /* ze.c: always built */
extern const sw__backend_ops sw__host_backend; /* host.c: always built */

/* Host memory for the library's own use, core and backends alike: every
 * host allocation goes through these (never malloc directly), the one place
 * where SW_FAULT_HOST_ALLOC fails the nth one.  Semantics as the C
 * library's; sw__aligned_alloc as posix_memalign (0 or ENOMEM/EINVAL). */
void *sw__malloc(size_t n);
void *sw__calloc(size_t count, size_t size);
void *sw__realloc(void *p, size_t n);
int sw__aligned_alloc(void **out, size_t align, size_t n);
void sw__free(void *p);
/* pthread_create(t, NULL, fn, arg) for the library's own threads, failed
 * (EAGAIN) by the same fault. */
int sw__thread_create(pthread_t *t, void *(*fn)(void *), void *arg);

/* Set the calling thread's detail message; returns code, so that
 * `return sw__errorf(SW_ERR_OOM, "...", ...);` reads naturally. */
int sw__errorf(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif /* SW_BACKEND_H */
