/*
 * spillway/backend.h -- the contract a backend implements: how a device
 * that spillway does not know joins it without a fork.
 *
 * A backend is one `const sw_backend_ops` table: mechanism only (memory,
 * queues, copies, the built-in kernels, events).  Policy is the core's:
 * once a backend is registered (sw_backend_register, or SPILLWAY_BACKENDS
 * naming a shared object that exports SW_BACKEND_ENTRY) its devices open
 * by spec, "name:N", and get everything spillway does for its own --
 * accounting (in_use, peak, cached, spilled, device_free/total, peak
 * scopes), the caching allocator, budgets, spilling of least-recently-used
 * buffers to host memory and their restore, the allocation ladder with
 * the pressure callbacks (the Python module's garbage collector, under the
 * lock-ordering contract), out-of-memory reports naming the largest
 * buffers, the memory history, queues with cross-queue ordering, pins for
 * the caller's own kernels, fault injection.  docs/backends.md walks
 * through writing one; examples/backend/ is one, built against the
 * installed headers only.
 *
 * Versions.  New members are only ever appended to the table, and
 * `version` says which exist: a table written for version v has every
 * member up to v's.  The core accepts SW_BACKEND_VERSION_MIN <= version <=
 * SW_BACKEND_VERSION (this header's), and does without the optional
 * members a table lacks or leaves NULL.
 *
 * Rules:
 *  - Every operation returns SW_OK or a negative SW_ERR_* code; on failure
 *    it also sets the detail message with sw_backend_errorf() and leaves
 *    its out-parameters untouched.
 *  - The core calls every operation on a device with that device's mutex
 *    held, except event_wait/event_query/event_release and synchronize,
 *    which it calls without the lock (they can block).  A backend
 *    therefore needs no locking of its own for its device state, except
 *    for state it shares with threads of its own (workers) or with the
 *    wait operations.
 *  - Queues are in order.  Operations that take a queue are enqueued on it
 *    and may complete later; host memory passed to them must stay valid
 *    until an event recorded after them has completed.
 *  - A backend never calls back into the core (no locks, no buffers, no
 *    spillway call that takes a device): the only functions it may call
 *    are those of this header (sw_backend_errorf, the host allocator) and
 *    the pure helpers of spillway.h (sw_dtype_size, sw_dtype_name,
 *    sw_kernel_name, sw_parse_size, sw_format_bytes).
 *  - The core validates every argument it passes (kernel, dtype, element
 *    count, operand alignment, ranges), once for every backend.
 *  - pre: lines state what the core guarantees before a call.
 */
#ifndef SPILLWAY_BACKEND_H
#define SPILLWAY_BACKEND_H

#include "spillway.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The contract this header describes, and the oldest the core accepts
 * (version 2 brought wait_event, which keeps two queues ordered on the
 * device). */
#define SW_BACKEND_VERSION 5
#define SW_BACKEND_VERSION_MIN 2

/* A backend's own structs, defined by the backend (`struct sw_bdev {...}`
 * in its source): the core only ever holds pointers to them. */
typedef struct sw_bdev sw_bdev;     /* an open device */
typedef struct sw_bqueue sw_bqueue; /* an in-order queue on it */
typedef struct sw_bevent sw_bevent; /* a point in a queue */

/* What open() reports about a device. */
typedef struct sw_device_props {
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
    /* Nonzero when the device's kernels run on the host's own CPUs (the
     * simulated device, a CPU OpenCL device, the host backend): work done
     * on the host in the background then takes CPU time from the kernels
     * it would overlap, so the core does not do it there (a prefetch's
     * read from the spill file stays the caller's).  0 (also what a
     * backend written before it reports): a GPU or other accelerator. */
    int host_compute;
} sw_device_props;

typedef struct sw_backend_ops {
    int version; /* SW_BACKEND_VERSION when written */
    const char *name; /* spec prefix: "sim", "opencl", "cuda" */

    /* Devices this backend offers now.  When none are available (no driver,
     * no platform) *count = 0 and why (why_len bytes) says why in one line.
     * pre: count, why non-NULL. */
    int (*device_count)(int *count, char *why, size_t why_len);

    /* Open device index (0 <= index < count).  props is filled in. */
    int (*open)(int index, sw_bdev **out, sw_device_props *props);
    /* pre: no live allocations, no queues but the default; waits for the
     * device to finish its work, then releases everything. */
    void (*close)(sw_bdev *dev);

    /* pre: size > 0 and a multiple of SW_ALLOC_GRANULARITY.  The memory is
     * usable by work queued on any queue of the device after this returns.
     * SW_ERR_OOM when the device cannot provide it now. */
    int (*alloc)(sw_bdev *dev, size_t size, uintptr_t *mem);
    /* Stream-ordered free: mem returns to the device after all work queued
     * on q before this call has completed.  Never waits.  pre: mem came from
     * alloc and size is the size it was allocated with. */
    int (*free)(sw_bdev *dev, sw_bqueue *q, uintptr_t mem, size_t size);
    /* Driver's view of memory. *free_known = 0 when it cannot tell. */
    int (*mem_info)(sw_bdev *dev, uint64_t *free, uint64_t *total,
                    int *free_known);

    /* The device's in-order default queue, created by open. */
    sw_bqueue *(*default_queue)(sw_bdev *dev);
    int (*queue_create)(sw_bdev *dev, sw_bqueue **out);
    /* Waits for the queue's work, then destroys it. */
    void (*queue_destroy)(sw_bqueue *q);

    /* Enqueued transfers.  Offsets are byte offsets into the allocation
     * mem; pre: ranges lie inside their allocations, n > 0. */
    int (*write)(sw_bqueue *q, uintptr_t dst, size_t dst_off,
                 const void *src, size_t n);
    int (*read)(sw_bqueue *q, void *dst, uintptr_t src, size_t src_off,
                size_t n);
    int (*copy)(sw_bqueue *q, uintptr_t dst, size_t dst_off, uintptr_t src,
                size_t src_off, size_t n);
    /* pre: pattern_size in {1,2,4,8}, n a multiple of it. */
    int (*fill)(sw_bqueue *q, uintptr_t dst, size_t dst_off, size_t n,
                const void *pattern, size_t pattern_size);
    /* A built-in kernel; args validated by the core (kernel, a dtype of
     * props.dtypes, n > 0 and its byte count, typed operands aligned to
     * their elements, operand ranges inside the buffers the core knows
     * of).  A backend checks only what it alone can know, such as an
     * operand lying inside what its runtime allocated. */
    int (*launch)(sw_bqueue *q, const sw_kernel_args *args);

    /* An event completes when all work enqueued on q before it has. */
    int (*event_record)(sw_bqueue *q, sw_bevent **out);
    /* Without the device lock.  *done = 1 when complete.  An error that
     * surfaced in the work before the event is returned here. */
    int (*event_query)(sw_bevent *ev, int *done);
    /* Without the device lock.  Blocks until complete; returns the first
     * error of the work before it, as event_query. */
    int (*event_wait)(sw_bevent *ev);
    void (*event_release)(sw_bevent *ev);
    /* Without the device lock: wait for all work on q.  Must not allocate
     * host memory: it is the core's way to wait when no event can be had
     * (a copy into host memory must have ended before that memory is
     * reused). */
    int (*synchronize)(sw_bqueue *q);

    /* Version 2. */
    /* Work enqueued on q after this call waits for ev (recorded on another
     * queue of the same device).  Never blocks the caller; ev may be
     * released right after.  NULL in a version-1 table: the core then
     * waits on the host instead. */
    int (*wait_event)(sw_bqueue *q, sw_bevent *ev);

    /* Version 3.  Each may be NULL: the core then does without it. */
    /* A second in-order queue of the device for copies between host and
     * device memory (spills and restores), created by open and destroyed
     * by close (no reservation of device memory, unlike queue_create), so
     * that copies run beside kernels: a second CUDA stream, a second
     * OpenCL queue, a copy worker on the simulated device.  NULL: copies go
     * on the default queue. */
    sw_bqueue *(*copy_queue)(sw_bdev *dev);
    /* Nonzero when nothing is queued on q or running there now (never
     * blocks): a small host transfer may then be done inline.  With the
     * device lock held. */
    int (*queue_idle)(sw_bqueue *q);
    /* Host memory for the staging pool that spills copy into, page-locked
     * where the backend can so that copies run at full rate and
     * asynchronously (cuMemHostAlloc).  With the device lock held; NULL
     * members: the core's own host allocator. */
    int (*host_alloc)(sw_bdev *dev, size_t size, void **out);
    void (*host_free)(sw_bdev *dev, void *p, size_t size);

    /* Version 4.  May be NULL: the core then times copies on the host,
     * from their enqueue to when it sees them done. */
    /* Seconds of device time from `from` to `to`, two complete events of
     * one queue, `from` recorded first (cuEventElapsedTime): what the work
     * between them took, without the time spent waiting before it.
     * SW_ERR_UNSUPPORTED when the backend cannot tell for these two.
     * Without the device lock, as event_query. */
    int (*event_elapsed)(sw_bevent *from, sw_bevent *to, double *seconds);

    /* Version 5: the runtime's own handles, for work spillway does not
     * see (sw_queue_native, sw_queue_wrap_native, sw_device_native_context).
     * Each may be NULL: the core then answers SW_ERR_UNSUPPORTED. */
    /* q's stream as the runtime knows it (CUstream, cl_command_queue). */
    int (*queue_native)(sw_bqueue *q, uintptr_t *handle);
    /* A queue over a stream the caller owns, checked to be one of this
     * device (and context), in order, and alive where the runtime can
     * tell (SW_ERR_INVALID_ARG, saying why, otherwise; handle is never 0).
     * Never one of the backend's own queues (the default, the copy queue,
     * one queue_create made): refuse those, saying to use the queue
     * itself.  pre: handle is no handle the core handed out
     * (queue_native, native_context, of any device); the core refuses
     * any queue of its own handed back, destroying nothing.  Read through
     * handle only where the runtime must: it may be any integer.
     * queue_destroy of it waits for its work and lets go of what it
     * holds, never destroying the stream itself. */
    int (*queue_wrap)(sw_bdev *dev, uintptr_t handle, sw_bqueue **out);
    /* The context the device's memory and queues live in (cl_context,
     * CUcontext). */
    int (*native_context)(sw_bdev *dev, uintptr_t *context);
} sw_backend_ops;

/* ------------------------------------------------------------------------
 * What a backend may call
 * ---------------------------------------------------------------------- */

/* Set the calling thread's detail message (sw_last_error()); returns
 * code, so that `return sw_backend_errorf(SW_ERR_OOM, "...", ...);` reads
 * naturally. */
SW_API int sw_backend_errorf(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Host memory for the backend's own bookkeeping, as the C library's
 * functions: through these (rather than malloc), SW_FAULT_HOST_ALLOC
 * fails the nth one, so the fault tests and the fuzzer reach the
 * backend's out-of-host-memory paths too. */
SW_API void *sw_backend_malloc(size_t n);
SW_API void *sw_backend_calloc(size_t count, size_t size);
SW_API void *sw_backend_realloc(void *p, size_t n);
SW_API void sw_backend_free(void *p);

/* ------------------------------------------------------------------------
 * Registering a backend
 * ---------------------------------------------------------------------- */

/* Make ops a backend of this process: its devices open as "name:N" and
 * are listed by sw_backend_info, sw_device_count and `spillway info`.
 * ops must stay valid for the life of the process.  SW_ERR_INVALID_ARG,
 * saying why, for a version outside [SW_BACKEND_VERSION_MIN,
 * SW_BACKEND_VERSION], a NULL required member (every member of version 2,
 * name to wait_event; the later ones may be NULL), a name that is empty,
 * longer than 23 characters or not [a-z0-9_], or a name already taken;
 * SW_ERR_BUSY when 16 backends are registered. */
SW_API int sw_backend_register(const sw_backend_ops *ops);

/* What the loading library lends a backend's shared object: the
 * functions above, as the copy of spillway that loads it has them.  (The
 * Python module links the library statically and exports none of its
 * symbols: a shared object that called sw_backend_errorf directly would
 * reach another copy, whose messages and faults no one sees.) */
typedef struct sw_backend_host {
    int version; /* SW_BACKEND_VERSION of the loading library */
    int (*errorf)(int code, const char *fmt, ...);
    void *(*malloc)(size_t n);
    void *(*calloc)(size_t count, size_t size);
    void *(*realloc)(void *p, size_t n);
    void (*free)(void *p);
    /* spillway.h's pure helpers. */
    int (*parse_size)(const char *s, uint64_t *out);
    const char *(*format_bytes)(uint64_t n, char *buf, size_t len);
    size_t (*dtype_size)(sw_dtype dtype);
    const char *(*dtype_name)(sw_dtype dtype);
    const char *(*kernel_name)(sw_kernel kernel);
} sw_backend_host;

/* The symbol a backend's shared object exports:
 *     const sw_backend_ops *sw_backend_entry(const sw_backend_host *host);
 * returning its table (host stays valid for the life of the process).
 * Such a backend calls spillway only through host, and so needs none of
 * its symbols at run time (link it with -Wl,--as-needed): it loads into
 * whatever holds the library, the shared library, a program linked with
 * the static one, or the Python module.
 * SPILLWAY_BACKENDS=path.so[:path.so...] loads and registers each the
 * first time the process lists or opens devices; a path that does not
 * load (or lacks the symbol, or whose table is refused) is listed by
 * sw_backend_info with the reason, and opens no device. */
#define SW_BACKEND_ENTRY "sw_backend_entry"
typedef const sw_backend_ops *(*sw_backend_entry_fn)(
    const sw_backend_host *host);

/* Load and register the backend of a shared object now, as
 * SPILLWAY_BACKENDS does: SW_ERR_INVALID_ARG with dlopen's or the table's
 * reason when it cannot. */
SW_API int sw_backend_load(const char *path);

#ifdef __cplusplus
}
#endif
#endif /* SPILLWAY_BACKEND_H */
