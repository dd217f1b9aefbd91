/*
 * spillway.h -- the whole public C API of libspillway.
 *
 * spillway manages accelerator memory for the runtimes above it: per-device
 * accounting, a caching allocator, budgets, spilling of buffers to host
 * memory (cold ones first, then least recently used: the spilling order,
 * at sw_set_memory_budget), memory-pressure callbacks, and queues with their
 * events and order records.  If a function does not appear in this file it
 * is not part of the published API.
 *
 * Conventions (they hold for every function below unless it says otherwise):
 *  - Functions return int: SW_OK (0) on success or a negative SW_ERR_* code.
 *    A failing call also sets a per-thread detail message, read with
 *    sw_last_error().  A failed call moves no ownership and loses no data,
 *    and what else it may have changed depends on why it failed:
 *     - refused for its arguments (SW_ERR_INVALID_ARG, _INVALID_HANDLE,
 *       _OUT_OF_RANGE, _DTYPE, _TOO_LARGE, _BUSY, _NO_DEVICE,
 *       _UNSUPPORTED), or with SW_ERR_OOM because the budget cannot hold
 *       the request even once everything that can move has moved (the
 *       message says "nothing was moved"; a launch whose arguments cannot
 *       fit together, or whose spilled arguments cannot all come back
 *       beside what cannot move, likewise, before the first comes back):
 *       it changed nothing -- no buffer moved, the cache and the host pool
 *       are as they were -- but for what the pressure callbacks, which run
 *       before such a refusal, did themselves;
 *     - SW_ERR_OOM after the allocation ladder, SW_ERR_HOST_OOM,
 *       SW_ERR_DEVICE: the buffers the call was given hold their data and
 *       are where they were, except that one it brought back before
 *       another could not come back stays resident (a later argument is
 *       never spilled to make room for an earlier one; should the budget
 *       refuse the later one, its message says "nothing was moved for it,
 *       but the N earlier arguments this call brought back stay
 *       resident"), and it keeps no
 *       device memory it took for the one that failed (a block goes back
 *       to the cache it came from, or to the device).  What it
 *       did to make room may stay done: other buffers spilled (intact;
 *       each comes back at its next device use), cached blocks given back
 *       to the device, the pressure callbacks run.
 *    Counters count what happened (ooms, alloc_retries, gc_runs, restores
 *    and restored_bytes_total);
 *    peak may have risen.
 *  - Results come back through trailing out-parameters, which are set to
 *    NULL/0 when the call fails.
 *  - Handles are opaque.  Destroying or closing NULL is a harmless no-op.
 *    A freed or foreign handle passed to any function is reported as
 *    SW_ERR_INVALID_HANDLE, never taken for another handle: buffer, lease,
 *    queue, event and peak-scope handles carry a generation count that
 *    every use checks against their slot's (a stale handle could match
 *    again only after 2^31 reuses of its one slot), and a handle of one
 *    type passed as another, or any other value, is refused without being
 *    dereferenced.  Device handles stay valid for the life of the process.
 *  - Every function is thread-safe.  Each device has one mutex; no call ever
 *    holds two device locks at once.
 */
#ifndef SPILLWAY_H
#define SPILLWAY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(SW_BUILDING_LIBRARY) && defined(__GNUC__)
#define SW_API __attribute__((visibility("default")))
#else
#define SW_API
#endif

#define SW_VERSION_MAJOR 0
#define SW_VERSION_MINOR 1
#define SW_VERSION_PATCH 0

/* ------------------------------------------------------------------------
 * Errors
 * ---------------------------------------------------------------------- */

/* One table generates the codes, sw_err_name() and sw_strerror(). */
#define SW_ERRNO_MAP(X)                                                       \
    X(INVALID_ARG, -1, "invalid argument")                                   \
    X(INVALID_HANDLE, -2, "invalid, freed or foreign handle")                \
    X(OOM, -3, "out of device memory")                                       \
    X(HOST_OOM, -4, "out of host memory")                                    \
    X(NO_DEVICE, -5, "no such device")                                       \
    X(OUT_OF_RANGE, -6, "byte range outside the buffer")                     \
    X(TOO_LARGE, -7, "size too large")                                       \
    X(BUSY, -8, "resource busy")                                             \
    X(DEVICE, -9, "device or driver error")                                  \
    X(UNSUPPORTED, -10, "not supported by this device")                      \
    X(DTYPE, -11, "unsupported element type")

typedef enum sw_error {
    SW_OK = 0,
#define SW__ERR_ENUM(name, code, msg) SW_ERR_##name = code,
    SW_ERRNO_MAP(SW__ERR_ENUM)
#undef SW__ERR_ENUM
} sw_error;

/* "SW_ERR_OOM" etc.; "SW_ERR_UNKNOWN" for a code not in the table. */
SW_API const char *sw_err_name(int err);
/* A short static description of the code. */
SW_API const char *sw_strerror(int err);
/* The detail of the last failing call on this thread ("" if none yet).  The
 * pointer stays valid until the next spillway call on this thread. */
SW_API const char *sw_last_error(void);

/* ------------------------------------------------------------------------
 * Sizes, as people write them
 * ---------------------------------------------------------------------- */

/* Parse a byte count with an optional binary unit: "1048576", "512K",
 * "512M", "512MiB", "64mb", "1.5G", "2 GiB" (K, M, G, T, P are powers of
 * 1024), exactly: it must come to a whole number of bytes ("0.5K" is 512;
 * "0.5", "1.5" and "0.3K" are refused, never rounded to 0, 1 or 307).
 * Signs, empty strings, unknown units, fractions of a byte and values past
 * 2^64 - 1 are SW_ERR_INVALID_ARG with a message that quotes the input.  The CLI, the Python module and the SPILLWAY_*
 * settings all read sizes through this one function. */
SW_API int sw_parse_size(const char *s, uint64_t *out);

/* n bytes in human units ("512 B", "1.50 MiB"; two decimals, binary units)
 * written into buf (len bytes; 16 is always enough).  Returns buf. */
SW_API const char *sw_format_bytes(uint64_t n, char *buf, size_t len);

/* ------------------------------------------------------------------------
 * Element types and built-in kernels
 * ---------------------------------------------------------------------- */

/* Element types: every fixed-size NumPy type in native byte order, and
 * bfloat16.  Values are only ever appended. */
typedef enum sw_dtype {
    SW_FLOAT32 = 0,
    SW_FLOAT64 = 1,
    SW_INT32 = 2,
    SW_INT64 = 3,
    SW_BOOL = 4, /* one byte, 0 or 1 */
    SW_INT8 = 5,
    SW_INT16 = 6,
    SW_UINT8 = 7,
    SW_UINT16 = 8,
    SW_UINT32 = 9,
    SW_UINT64 = 10,
    SW_FLOAT16 = 11,  /* IEEE binary16; kernels compute in float32 */
    SW_BFLOAT16 = 12, /* the top half of a float32; computed in float32 */
    SW_COMPLEX64 = 13,  /* two float32: real, imaginary */
    SW_COMPLEX128 = 14, /* two float64 */
} sw_dtype;
#define SW_DTYPE_COUNT 15

/* Size in bytes of one element, or 0 for an unknown dtype. */
SW_API size_t sw_dtype_size(sw_dtype dtype);
/* NumPy's name ("float32", "bool", "bfloat16", ...); NULL for an unknown
 * dtype. */
SW_API const char *sw_dtype_name(sw_dtype dtype);
/* The dtype of that name, or SW_ERR_DTYPE. */
SW_API int sw_dtype_from_name(const char *name, sw_dtype *out);

/* The kind of a dtype, which says which member of sw_scalar carries its
 * values (fill values, alpha, sums). */
typedef enum sw_dtype_kind {
    SW_KIND_BOOL = 0,    /* .i: 0 or 1 */
    SW_KIND_INT = 1,     /* .i (signed integers) */
    SW_KIND_UINT = 2,    /* .u (unsigned integers) */
    SW_KIND_FLOAT = 3,   /* .f (float16, bfloat16, float32, float64) */
    SW_KIND_COMPLEX = 4, /* .c */
} sw_dtype_kind;
/* The kind of dtype; SW_ERR_DTYPE for an unknown one. */
SW_API int sw_dtype_kind_get(sw_dtype dtype, sw_dtype_kind *kind);

/* A scalar argument or result, read by the dtype's kind. */
typedef union sw_scalar {
    double f;
    int64_t i;
    uint64_t u;
    struct {
        double re, im;
    } c;
} sw_scalar;

/* ------------------------------------------------------------------------
 * Devices
 * ---------------------------------------------------------------------- */

typedef struct sw_device sw_device;

/* Number of devices across every backend present ("sim:0", "opencl:0", ...).
 * Backends that are absent (no driver, no platform) contribute none. */
SW_API int sw_device_count(size_t *count);

/* Spec string ("sim:0") of the index-th device, written NUL-terminated into
 * buf of len bytes.  SW_ERR_NO_DEVICE past the end; SW_ERR_INVALID_ARG if buf
 * is too small. */
SW_API int sw_device_spec_at(size_t index, char *buf, size_t len);

/* The backends of this process, present or not: the library's own
 * ("sim", "opencl", "cuda", "hip", "ze", "host"), then those registered at
 * run time -- a vendor's device joins through the backend contract,
 * <spillway/backend.h> (sw_backend_register, SPILLWAY_BACKENDS), with no
 * fork -- then the SPILLWAY_BACKENDS entries that could not be loaded. */
SW_API size_t sw_backend_count(void);
/* Backend i: its name (static), how many devices it offers now, and when
 * it offers none, why, in one line ("libcuda.so.1 not found: no NVIDIA
 * driver"), written into why (why_len bytes; may be NULL).  A backend
 * whose configuration is malformed returns that error here, and so does a
 * SPILLWAY_BACKENDS entry that did not load (SW_ERR_INVALID_ARG, its file
 * name as name and the reason in why). */
SW_API int sw_backend_info(size_t i, const char **name, int *devices,
                           char *why, size_t why_len);

/* Open a device by spec ("sim:0", "opencl:1", "cuda:0"; a bare backend
 * name such as "sim" means its device 0).  NULL or "" opens
 * the default: $SPILLWAY_DEVICE if set, else "sim:0".  Opening is
 * reference-counted: every successful open must be paired with a close, and
 * the same spec always yields the same handle.  Device handles stay valid for
 * the life of the process. */
SW_API int sw_device_open(const char *spec, sw_device **out);

/* Drop one reference.  Dropping the last one while buffers are still live
 * fails with SW_ERR_BUSY and keeps the reference (so a leak is an error, not
 * a crash); otherwise the last close releases the device's resources. */
SW_API int sw_device_close(sw_device *dev);

/* The device's spec ("sim:0"), valid for the life of the process. */
SW_API const char *sw_device_name(const sw_device *dev);

/* A human-readable description of the hardware or runtime behind it. */
SW_API const char *sw_device_description(const sw_device *dev);

/* *yes = 1 when the device's memory is addressable from the host, so that
 * base + offset of a sw_devmem is a host pointer (the simulated device);
 * 0 otherwise (OpenCL's cl_mem handles, CUDA device memory). */
SW_API int sw_device_host_addressable(sw_device *dev, int *yes);

/* The dtypes the device's kernels support: bit d of *mask is set when
 * dtype d is (e.g. an OpenCL device without cl_khr_fp64 lacks float64 and
 * complex128).  Every dtype can be stored, read and written on every
 * device; only kernels need support. */
SW_API int sw_device_dtypes(sw_device *dev, uint32_t *mask);

/* Wait until all work queued on the device, on every queue, has completed
 * (prefetches reading from the spill file in the background included).
 * The device lock is not held while waiting. */
SW_API int sw_device_synchronize(sw_device *dev);

/* ------------------------------------------------------------------------
 * Accounting
 * ---------------------------------------------------------------------- */

typedef struct sw_memory_info {
    /* Bytes of device memory held by live buffers (sizes rounded up to the
     * allocation granularity, SW_ALLOC_GRANULARITY). */
    uint64_t in_use;
    uint64_t peak;   /* highest in_use since open or sw_reset_peak */
    uint64_t cached; /* freed blocks kept for reuse */
    uint64_t spilled; /* bytes of live buffers held in host memory */
    uint64_t device_free;  /* what the driver says is free; 0 if unknown */
    uint64_t device_total; /* the device's capacity; 0 if unknown */
    int device_free_known; /* 0 when the driver cannot tell device_free */
    uint64_t budget;       /* 0: none */
    /* Counters since the device was opened. */
    uint64_t allocs, frees, spills, restores;
    uint64_t spilled_bytes_total, restored_bytes_total;
    /* Time the copies out and in took: the device's own time where the
     * backend times them (sim, OpenCL's copy queue, CUDA's copy stream);
     * elsewhere from enqueue until the core noticed them done, counted
     * once where batches overlapped (so never more than the time passed,
     * though it includes a batch's wait behind earlier work). */
    double spill_seconds, restore_seconds;
    uint64_t alloc_retries; /* allocation attempts repeated after a failure */
    uint64_t ooms;          /* requests for device memory that failed for
                             * good: allocations (SW_ERR_OOM, a size too
                             * large for the device: SW_ERR_TOO_LARGE, a
                             * driver error) and restores */
    uint64_t gc_runs;       /* collections run by pressure callbacks */
    /* Appended in 0.2. */
    uint64_t peak_reserved; /* highest in_use + cached since open or
                             * sw_reset_peak (PyTorch's max reserved) */
    uint64_t live_buffers;  /* live base buffers, spilled ones included */
    uint64_t host_pool;       /* idle host memory kept for host copies */
    uint64_t host_pool_limit; /* its bound (sw_set_host_pool_limit) */
    /* Appended in 0.3: clean copies.  A restored buffer keeps the host
     * copy it came from until something writes its device memory; while
     * it does, evicting it copies nothing (`spilled_bytes_total` counts
     * bytes actually copied out).  host_copies is the bytes of resident
     * buffers that have such a duplicate on the host (rounded, as in_use;
     * they count in in_use, not in `spilled`). */
    uint64_t host_copies;
    uint64_t clean_evictions; /* evictions that copied nothing (counted in
                               * `spills` too) */
    /* The disk tier (sw_set_host_budget): the host budget (0: none), the
     * bytes of spilled buffers whose only copy is in the spill file
     * (counted in `spilled` too, rounded), and the bytes written to and
     * read from that file with the seconds they took. */
    uint64_t host_budget;
    uint64_t spilled_disk;
    uint64_t disk_write_bytes, disk_read_bytes;
    double disk_write_seconds, disk_read_seconds;
} sw_memory_info;

/* Sizes are rounded up to a multiple of this (the unit of in_use).  A
 * spilled buffer counts in `spilled`, not in in_use. */
#define SW_ALLOC_GRANULARITY 512u

SW_API int sw_memory_info_get(sw_device *dev, sw_memory_info *out);

/* peak = in_use and peak_reserved = in_use + cached.  Open peak scopes are
 * not disturbed. */
SW_API int sw_reset_peak(sw_device *dev);

/* Zero the counters (allocs, frees, spills, restores, clean_evictions,
 * the byte and second totals, alloc_retries, ooms, gc_runs), as PyTorch's
 * reset_accumulated_memory_stats; in_use, cached, spilled and the peaks
 * are not counters and stay. */
SW_API int sw_reset_counters(sw_device *dev);

/* Peak scopes report the highest in_use between their begin and end.  They
 * nest (and may even end out of order, from different threads): neither an
 * inner scope nor sw_reset_peak disturbs an outer one.  The scope's peak
 * starts at in_use when it begins. */
typedef struct sw_peak_scope sw_peak_scope;
SW_API int sw_peak_scope_begin(sw_device *dev, sw_peak_scope **out);
/* The peak so far, without ending the scope. */
SW_API int sw_peak_scope_peak(sw_peak_scope *scope, uint64_t *peak);
/* End the scope, report its peak (peak may be NULL) and free it. */
SW_API int sw_peak_scope_end(sw_peak_scope *scope, uint64_t *peak);

/* The spilling order: whenever buffers must leave the device (a budget, a
 * failed allocation, a restore that needs room), victims go in this order,
 * skipping what cannot move (pinned, exposed, external buffers):
 *  1. cold buffers, however recently used: one advised SW_ADVISE_COLD
 *     (until its next use), and a clean copy -- restored once in its life,
 *     unwritten since -- that a launch (an op, a device copy,
 *     sw_launch_end) has used since its restore.  The clean ones go first,
 *     whatever their age (evicting one copies nothing), then the others;
 *     each group least recently used first;
 *  2. every other buffer, least recently used first, a clean one before a
 *     dirty one among buffers last used at the same clock value (the
 *     arguments of one launch).
 * A buffer restored to be read once -- what a backward pass leaves behind
 * -- is done with; in LRU order the older dirty buffers went instead, each
 * copied out once more.  A prefetched copy not yet used is not cold, and a
 * second restore puts a buffer back in LRU order for good, so a buffer
 * read every step costs at most one restore more than LRU (src/core/lru.c
 * has the figures).
 *
 * Bound the device memory spillway holds, in_use + cached, to bytes (0: no
 * budget).  An allocation (or a restore) that would pass it first trims the
 * cache, oldest blocks first, then spills buffers to host memory, in the
 * spilling order, until it fits; it fails with SW_ERR_OOM only when what
 * cannot move (pinned, exposed, external buffers) leaves no room.  A budget
 * below what is already held takes effect at once: the cache is trimmed and
 * buffers are spilled, in that order, until in_use + cached fits, or
 * nothing more can move (what is pinned or leased stays; the next
 * allocation is then refused until room is made).  Should a spill fail on
 * the way (no host memory, a copy error), its buffers stay resident and
 * intact and the budget still stands: the call returns SW_OK. */
SW_API int sw_set_memory_budget(sw_device *dev, uint64_t bytes);
SW_API int sw_get_memory_budget(sw_device *dev, uint64_t *bytes);

/* Release every cached block back to the device.  The host staging pool
 * is kept (sw_release_host_pool). */
SW_API int sw_empty_cache(sw_device *dev);

/* The host staging pool: host memory that spills copy into, reused (fresh
 * memory costs a page fault per page; on CUDA it is page-locked so copies
 * run at full rate and asynchronously).  Only idle blocks count against
 * its bound, which is $SPILLWAY_HOST_POOL at open (a size such as "2G")
 * or 1 GiB; a block holding spilled data counts in `spilled`. */
SW_API int sw_set_host_pool_limit(sw_device *dev, uint64_t bytes);

/* New memory cleared on request.  With it on (1), every buffer
 * sw_buffer_alloc hands out -- fresh from the driver or reused from the
 * cache -- reads as zeros until written, on every backend: a fill is
 * queued on the device's default queue before the buffer's first use, in
 * stream order (work on another queue waits for it as for any earlier
 * work on the buffer), never a host wait.  Without it a block reused from
 * the cache holds its last owner's bytes, which the next owner can read:
 * turn it on where buffers cross trust boundaries, or for determinism.
 * Restores need no clearing (their copy writes every byte), and wrapped
 * memory (sw_buffer_wrap) is the caller's.  Off by default;
 * $SPILLWAY_CLEAR_NEW=1 (or 0; on/off, yes/no, true/false) sets it at
 * open.  on must be 0 or 1. */
SW_API int sw_set_clear_new(sw_device *dev, int on);
SW_API int sw_get_clear_new(sw_device *dev, int *on);

/* A bound on the host memory spillway holds for the device: spilled
 * copies, clean copies (host_copies) and the idle staging pool.  Past it
 * the host blocks of clean copies the file below already holds go first,
 * then the pool's idle blocks, then the least recently used spilled
 * copies and clean copies are written to a file under $SPILLWAY_SPILL_DIR
 * (default $TMPDIR, else /tmp; made when first needed and unlinked at
 * once) and read back when used: restored, or read from the host.  A
 * clean copy written there stays clean, resident: evicted, it is on disk
 * at once.  A copy read back keeps its place in the file until something
 * writes the buffer, and going back writes nothing.  Copies still in
 * flight, and pinned buffers, may hold it past the bound for a while.  A
 * write that fails (a full disk, an I/O error, a directory that is gone)
 * leaves the buffer where it was, intact (a clean copy's host block is
 * then dropped, as without the file), and the call that needed the room
 * fails with SW_ERR_HOST_OOM saying why unless dropping clean copies made
 * it.
 * 0 removes the bound.  At open: $SPILLWAY_HOST_BUDGET (bytes, a size
 * such as "8G", or a fraction of the machine's memory such as "0.25").
 * Setting it moves what must move now; a write that fails leaves its
 * buffer in host memory and the budget still stands (SW_OK). */
SW_API int sw_set_host_budget(sw_device *dev, uint64_t bytes);
SW_API int sw_get_host_budget(sw_device *dev, uint64_t *bytes);
/* Give every idle block of the pool back to the system, the clean copies
 * of resident buffers (host_copies: their next eviction copies again),
 * and the blocks of restores whose copies in are still in flight (a
 * prefetch's), once those end: the call waits for them, without the
 * device lock.  Blocks holding spilled data stay. */
SW_API int sw_release_host_pool(sw_device *dev);

/* ------------------------------------------------------------------------
 * Buffers
 * ---------------------------------------------------------------------- */

typedef struct sw_buffer sw_buffer;
typedef struct sw_queue sw_queue; /* see "Queues" below */

/* Device memory as a launch sees it: base is the backend's handle of the
 * whole allocation (a device address on the simulated device and CUDA, a
 * cl_mem on OpenCL) and offset the byte offset of the buffer inside it, so
 * that base + offset is the address where addresses exist.  A 0-byte buffer
 * has base 0. */
typedef struct sw_devmem {
    uintptr_t base;
    size_t offset;
} sw_devmem;

typedef enum sw_buffer_state {
    SW_RESIDENT = 0, /* in device memory */
    SW_SPILLED = 1,  /* only a host copy exists */
} sw_buffer_state;

/* Device memory each queue reserves on the simulated device. */
#define SW_SIM_QUEUE_RESERVE (1u << 20)

/* Maximum tag length kept (longer tags are truncated). */
#define SW_TAG_MAX 47

/* Allocate size bytes of device memory.  tag (may be NULL) names the origin
 * for attribution in error messages.  size 0 is valid: the buffer holds no
 * device memory and every access to it is of 0 bytes.  Sizes that cannot be
 * rounded to the granularity, or that exceed the device, fail with
 * SW_ERR_TOO_LARGE; SW_ERR_OOM when memory (or the budget) runs out, with a
 * message naming requested bytes, in_use, cached, budget, device free/total
 * and the five largest live buffers. */
SW_API int sw_buffer_alloc(sw_device *dev, size_t size, const char *tag,
                           sw_buffer **out);

/* A view of bytes [offset, offset + size) of buf.  The view holds a
 * reference to the base allocation, which stays alive (and counted in
 * in_use) until the base and all its views are freed.  A view of a view is a
 * view of the same base. */
SW_API int sw_buffer_view(sw_buffer *buf, size_t offset, size_t size,
                          sw_buffer **out);

/* Add a reference to the handle; each reference is dropped by one
 * sw_buffer_free. */
SW_API int sw_buffer_retain(sw_buffer *buf);

/* Drop one reference.  When the last reference to a handle goes, the handle
 * is dead (any later use, including a second free, is SW_ERR_INVALID_HANDLE)
 * and, once the base and its views are all dead, its device memory returns
 * to the cache in stream order: after all work already queued that uses it.
 * Never waits for the device.  NULL is a no-op. */
SW_API int sw_buffer_free(sw_buffer *buf);

SW_API int sw_buffer_size(sw_buffer *buf, size_t *size);
SW_API int sw_buffer_device(sw_buffer *buf, sw_device **dev);
SW_API int sw_buffer_state_get(sw_buffer *buf, sw_buffer_state *state);
/* Copies the tag (possibly "") into buf of len bytes, truncating. */
SW_API int sw_buffer_tag(sw_buffer *buf, char *out, size_t len);

/* What sw_memory_snapshot says about one live base buffer (views are
 * counted in their base). */
typedef struct sw_buffer_info {
    uint64_t id;         /* unique for the life of the process */
    uint64_t size;       /* bytes requested */
    uint64_t alloc_size; /* bytes held (rounded); 0 for external memory */
    sw_buffer_state state;
    int external;        /* wraps memory spillway does not own */
    int moving;          /* a spill or restore is copying it now */
    uint32_t pins;       /* launches and transfers holding it in place */
    uint32_t leases;     /* live exposure leases */
    uint32_t views;      /* live views */
    uint32_t handles;    /* references to the base handle itself; 0 when
                          * only views, pins or leases keep it */
    uint64_t last_use;   /* the device clock at its last use (the age in
                          * the spilling order: sw_set_memory_budget) */
    uint64_t queues;     /* bit k: queue id k used it since the default
                          * queue last waited for it (0: default only) */
    char tag[SW_TAG_MAX + 1];
    int on_disk;   /* spilled, its copy in the spill file (the disk tier,
                    * sw_set_host_budget) rather than in host memory */
    int host_copy; /* resident with a clean copy on the host: evicting it
                    * copies nothing (host_copies of sw_memory_info) */
} sw_buffer_info;

/* Every live base buffer of dev, most recently allocated first: up to cap
 * of them into out (which may be NULL when cap is 0), and their total
 * number in *count (so a caller can size out and ask again). */
SW_API int sw_memory_snapshot(sw_device *dev, sw_buffer_info *out,
                              size_t cap, size_t *count);

/* Host access to bytes [offset, offset + n).  Ordered after work already
 * queued on the device; they return once the copy is complete.  Small
 * transfers (at most 4 KiB) are done inline, without the queue, when the
 * device's memory is host memory and nothing is queued.  A range
 * past the end is SW_ERR_OUT_OF_RANGE.  A spilled buffer is read and
 * written in its host copy and stays spilled: only the device brings a
 * buffer back. */
SW_API int sw_buffer_read(sw_buffer *buf, size_t offset, void *dst, size_t n);
SW_API int sw_buffer_write(sw_buffer *buf, size_t offset, const void *src,
                           size_t n);

/* Device-to-device copy of n bytes, queued (asynchronous).  Spilled
 * operands are restored first. */
SW_API int sw_buffer_copy(sw_buffer *dst, size_t dst_offset, sw_buffer *src,
                          size_t src_offset, size_t n);

/* Fill bytes [offset, offset + n) with a repeated pattern of 1, 2, 4 or 8
 * bytes (n a multiple of pattern_size), queued on the device (a spilled
 * buffer is restored first). */
SW_API int sw_buffer_fill(sw_buffer *buf, size_t offset, size_t n,
                          const void *pattern, size_t pattern_size);

/* Start bringing a spilled buffer back to the device without waiting:
 * its copy is queued on the copy queue; work queued later that uses the
 * buffer, on any queue, runs after it, and so does all later work on q
 * (which may be NULL), while the default queue's other work does not wait
 * for it (the copy runs beside it).  Call it a
 * step ahead of the work that needs the buffer -- the next layer's
 * weights, the next block of a pipeline -- so that the copy overlaps the
 * work of this step.  A no-op for a resident buffer (beyond ordering q
 * after it).  May spill others to make room, as any restore.  A buffer in
 * the spill file (sw_set_host_budget) with q NULL, on a device whose
 * kernels do not run on the host's CPUs: the call returns once its read is
 * started; a prefetch thread reads it back and then queues its copy, and
 * a use, host access or free meanwhile waits for the read.  A read or copy
 * that fails there leaves the buffer where it was, intact, and its next
 * use meets the error.  $SPILLWAY_DISK_PREFETCH ("background", "inline")
 * overrides the choice. */
SW_API int sw_buffer_prefetch(sw_buffer *buf, sw_queue *q);

/* What the owner knows of a buffer's next use, as madvise() tells the
 * kernel.  SW_ADVISE_COLD: not soon (an activation the backward pass has
 * consumed, a block a pipeline is done with until its next round): under
 * pressure it is evicted before every buffer that is not cold, however
 * recently used -- a dirty one after the cold clean copies: the spilling
 * order, at sw_set_memory_budget -- until its next use, which makes it an
 * ordinary buffer again.  SW_ADVISE_NORMAL: back in the ordinary order at
 * once (a cold clean copy stays cold: that is not advice).  Nothing
 * moves now: a resident buffer stays resident, a spilled one spilled.  On
 * a view it applies to the whole base.  Another value is
 * SW_ERR_INVALID_ARG. */
typedef enum sw_advice {
    SW_ADVISE_NORMAL = 0,
    SW_ADVISE_COLD = 1,
} sw_advice;
SW_API int sw_buffer_advise(sw_buffer *buf, sw_advice advice);

/* The buffer's device memory, restoring it if spilled (and waiting for the
 * restore's copy: the pointer may be used outside spillway).  The memory may
 * move again at the next allocation that needs room: hold it across a
 * launch with sw_launch_begin, or for longer with sw_buffer_expose. */
SW_API int sw_buffer_device_ptr(sw_buffer *buf, sw_devmem *out);

/* Wrap device memory that spillway does not own (another allocator's,
 * an imported DLPack tensor's): mem must stay valid while the handle
 * lives.  An external buffer is never spilled, never freed by spillway
 * and not counted in in_use; views, transfers and launches work on it as
 * on any buffer. */
SW_API int sw_buffer_wrap(sw_device *dev, sw_devmem mem, size_t size,
                          const char *tag, sw_buffer **out);

/* Exposure leases.  Handing a buffer's device pointer to code spillway
 * does not see (DLPack export, a raw pointer kept past a launch) takes a
 * lease: the buffer is restored if spilled, and while any lease on it is
 * live it is never spilled and its memory stays allocated (even if every
 * handle is freed).  When the last lease is released it is spillable
 * again.  (cuDF's exposure is permanent; this one ends.) */
typedef struct sw_lease sw_lease;
SW_API int sw_buffer_expose(sw_buffer *buf, sw_devmem *ptr, sw_lease **out);
/* The same for a consumer that only reads the memory (a read-only DLPack
 * export): a clean copy (sw_memory_info.host_copies) stays clean.  Writing
 * through it is undefined: the next eviction may drop what was written. */
SW_API int sw_buffer_expose_read(sw_buffer *buf, sw_devmem *ptr,
                                 sw_lease **out);
/* Release a lease; NULL is a no-op, a second release SW_ERR_INVALID_HANDLE. */
SW_API int sw_lease_release(sw_lease *lease);

/* ------------------------------------------------------------------------
 * Launches
 * ---------------------------------------------------------------------- */

/* Prepare a launch that uses n buffers (all on dev): each is made resident
 * (restoring spilled ones, which may spill others but never an argument of
 * this launch) and pinned, and its device memory written to ptrs[i].
 * Pinned buffers stay where they are until sw_launch_end with the same
 * array.  Duplicates in the array are allowed.  If the arguments together
 * cannot fit on the device (or in the budget), SW_ERR_OOM says so with
 * their sizes before anything moves; so it does, after the pressure
 * callbacks, when the budget cannot hold the spilled ones back beside
 * what cannot move (pinned, leased).  The handles must stay live until
 * sw_launch_end. */
SW_API int sw_launch_begin(sw_device *dev, sw_buffer *const *bufs, size_t n,
                           sw_devmem *ptrs);
/* Unpin what sw_launch_begin pinned (the same bufs and n). */
SW_API int sw_launch_end(sw_device *dev, sw_buffer *const *bufs, size_t n);

/* Access modes of launch arguments.  A restored buffer keeps its host copy
 * while nothing writes it, so that evicting it again copies nothing; an
 * argument the kernel only reads (SW_ACCESS_READ) keeps that copy.  One the
 * kernel may write (SW_ACCESS_WRITE, and every argument of the forms
 * without modes) ends it.  Marking an argument the kernel writes as read
 * is undefined: its next eviction may drop what the kernel wrote. */
#define SW_ACCESS_WRITE 0u
#define SW_ACCESS_READ 1u
/* sw_launch_begin with a mode per argument (access[i] for bufs[i]; access
 * NULL: every argument written); end with sw_launch_end.  Another value
 * than the two above is SW_ERR_INVALID_ARG. */
SW_API int sw_launch_begin_access(sw_device *dev, sw_buffer *const *bufs,
                                  const unsigned char *access, size_t n,
                                  sw_devmem *ptrs);

typedef enum sw_kernel {
    SW_KERNEL_FILL = 0,  /* out[i] = alpha                   */
    SW_KERNEL_COPY = 1,  /* out[i] = a[i]                    */
    SW_KERNEL_ADD = 2,   /* out[i] = a[i] + b[i]             */
    SW_KERNEL_SCALE = 3, /* out[i] = alpha * a[i]            */
    SW_KERNEL_AXPY = 4,  /* out[i] = alpha * a[i] + out[i]   */
    SW_KERNEL_SUM = 5,   /* out[0] = sum of a[0..n) in a fixed order (so
                          * results are reproducible), into one 8-byte
                          * value read as a sw_scalar of the dtype's kind:
                          * float types into a float64 (.f), signed
                          * integers into an int64 and unsigned ones into
                          * a uint64 (wrapping), bool into a count (.i);
                          * complex types into a complex128 (16 bytes,
                          * .c) */
} sw_kernel;

/* "fill", "copy", "add", "scale", "axpy", "sum"; NULL for an unknown
 * kernel. */
SW_API const char *sw_kernel_name(sw_kernel kernel);

typedef struct sw_kernel_args {
    sw_kernel kernel;
    sw_dtype dtype;
    size_t n;        /* elements */
    sw_devmem out;   /* for SW_KERNEL_SUM: 8 bytes (16 for complex) */
    sw_devmem a, b;  /* unused operands are ignored */
    sw_scalar alpha; /* by the dtype's kind (.f, .i, .u or .c); converted
                      * once to the element type, rounding to nearest
                      * even (float16 0.1 is 0x2E66) */
} sw_kernel_args;

/* Queue a built-in kernel on device memory obtained from sw_launch_begin.
 * Typed operands (every operand but FILL's and COPY's, and SUM's out) must
 * be aligned to their element size: SW_ERR_INVALID_ARG otherwise, checked
 * here for every backend.  Integer arithmetic wraps; float16 and bfloat16
 * compute in float32 and round to nearest even; bool supports FILL, COPY
 * and SUM only.  A dtype the device cannot compute with (see
 * sw_device_dtypes) is SW_ERR_DTYPE naming the device.  The simulated device checks, when the kernel
 * runs, that every byte it touches lies inside a live allocation, and
 * aborts the process with a report otherwise. */
SW_API int sw_launch_kernel(sw_device *dev, const sw_kernel_args *args);

/* Buffer-level operations: launch_begin + kernel + launch_end.  n is the
 * element count; every buffer must hold n elements of dtype. */
SW_API int sw_op_fill(sw_buffer *out, sw_dtype dtype, size_t n,
                      sw_scalar value);
SW_API int sw_op_add(sw_buffer *out, sw_buffer *a, sw_buffer *b,
                     sw_dtype dtype, size_t n);
SW_API int sw_op_scale(sw_buffer *out, sw_buffer *a, sw_scalar alpha,
                       sw_dtype dtype, size_t n);
/* y <- alpha * x + y */
SW_API int sw_op_axpy(sw_scalar alpha, sw_buffer *x, sw_buffer *y,
                      sw_dtype dtype, size_t n);
/* Reduce on the device and wait for the result (.f for float dtypes, .i for
 * signed ones and bool, .u for unsigned, .c for complex).  The first sum on
 * a device reserves SW_ALLOC_GRANULARITY bytes of device memory for results (seen in device_free, not in
 * in_use) until the device is closed. */
SW_API int sw_op_sum(sw_buffer *a, sw_dtype dtype, size_t n, sw_scalar *out);

/* ------------------------------------------------------------------------
 * Queues, events, host tasks and order records
 *
 * A queue is an in-order stream of work on one device (a worker thread on
 * the simulated device, an OpenCL in-order command queue, a CUDA stream).
 * Every device has a default queue, which every call without a queue uses.
 * Work on different queues may run concurrently; spillway itself keeps
 * memory safe across queues (a buffer first used on a queue waits there
 * for the default queue's earlier work on it; a spill, free, host read or
 * write waits on the device for every queue that used the buffer; a pin
 * for your own kernels, sw_launch_begin_q, waits for every queue's work
 * on its buffers), but ordering the operations on two queues for your own
 * data is yours to state with events, as an order record does.
 * ---------------------------------------------------------------------- */

typedef struct sw_queue sw_queue;
typedef struct sw_event sw_event;

/* A new queue on dev, with one reference.  On the simulated device each
 * queue also reserves SW_SIM_QUEUE_RESERVE bytes of device memory (as
 * drivers do), so that leaked queues show in device_free.  When the
 * device is too full for a queue's own memory, room is made as for an
 * allocation: the cache and dead queues give theirs back, the pressure
 * callbacks run, buffers spill (in the spilling order); SW_ERR_OOM when
 * nothing more can move. */
SW_API int sw_queue_create(sw_device *dev, sw_queue **out);
SW_API int sw_queue_retain(sw_queue *q);
/* Drop one reference.  The last one never waits: the queue is destroyed
 * once its work is done (so it may be dropped from inside one of its own
 * host tasks).  NULL is a no-op. */
SW_API int sw_queue_release(sw_queue *q);
SW_API int sw_queue_device(sw_queue *q, sw_device **dev);
/* Wait for all work submitted to q so far (without the device lock). */
SW_API int sw_queue_synchronize(sw_queue *q);

/* An event that completes when all work submitted to q so far has. */
SW_API int sw_queue_record_event(sw_queue *q, sw_event **out);
/* Run fn(arg) off the caller's thread once the work submitted to q so far
 * has completed; *out (may be NULL) completes when fn has returned.  fn
 * may call any spillway function, including releasing q. */
SW_API int sw_queue_host_task(sw_queue *q, void (*fn)(void *arg), void *arg,
                              sw_event **out);
/* Never blocks: *done = 1 when complete.  An error of the work before
 * the event is returned (and *done = 1). */
SW_API int sw_event_query(sw_event *ev, int *done);
/* Blocks until complete, without any device lock. */
SW_API int sw_event_wait(sw_event *ev);
SW_API int sw_event_retain(sw_event *ev);
/* NULL is a no-op; a second release is SW_ERR_INVALID_HANDLE. */
SW_API int sw_event_release(sw_event *ev);

/* Queue-taking forms of the operations (the plain forms use the device's
 * default queue).  q must be on the buffers' device. */
SW_API int sw_launch_kernel_q(sw_queue *q, const sw_kernel_args *args);

/* Pins for work spillway does not see: your own kernels on your own
 * stream.  sw_launch_begin_q makes every buffer resident in one pass (as
 * sw_launch_begin: restoring may spill others, never an argument; a set
 * that cannot fit together is SW_ERR_OOM before anything moves), pins
 * them, writes their memory to ptrs[i], and orders q after the work
 * already queued on them, on any queue -- the default queue's, other
 * queues' operations and other pins' work alike -- so that nothing queued
 * before the pin lands over what you write (on the device: nothing waits
 * on the host).
 * Queue your work on q (or on its native stream, sw_queue_native), then
 * call sw_launch_end_q with the same q, bufs and n: the pins end in
 * stream order -- a later spill, free, reuse of the memory, host read or
 * host write of those buffers waits, on the device, for the work queued
 * on q before the end.
 *
 * q NULL means the host: sw_launch_begin_q then also waits (without the
 * device lock) until the work queued on the buffers so far, on any queue,
 * has completed, so that the memory can be read and written from the host
 * (the simulated and host devices) or from a stream you synchronize
 * yourself;
 * your work must be complete when you call sw_launch_end_q(NULL, ...).
 * Duplicates in bufs are pinned once per occurrence, and pins nest. */
SW_API int sw_launch_begin_q(sw_queue *q, sw_buffer *const *bufs, size_t n,
                             sw_devmem *ptrs);
/* sw_launch_begin_q with a mode per argument (see SW_ACCESS_READ); end
 * with sw_launch_end_q. */
SW_API int sw_launch_begin_q_access(sw_queue *q, sw_buffer *const *bufs,
                                    const unsigned char *access, size_t n,
                                    sw_devmem *ptrs);
SW_API int sw_launch_end_q(sw_queue *q, sw_buffer *const *bufs, size_t n);

/* The runtime's own handles.  sw_queue_native gives q's stream as the
 * backend's runtime knows it: a CUstream (cuda), hipStream_t (hip),
 * cl_command_queue (opencl), an immediate ze_command_list_handle_t (ze),
 * or the simulated or host device's own queue.  Valid while q lives; for
 * a queue spillway made, sw_queue_wrap_native refuses it meanwhile. */
SW_API int sw_queue_native(sw_queue *q, uintptr_t *handle);
/* Adopt a stream or command queue the caller owns as a spillway queue on
 * dev: work spillway queues there, and the pins of sw_launch_begin_q, are
 * ordered as on any queue.  spillway never destroys it (OpenCL: it holds
 * a reference, clRetainCommandQueue, released with the queue); keep it
 * alive until the queue's last sw_queue_release and the work queued
 * before it are done.
 *
 * SW_ERR_INVALID_ARG, *out NULL and nothing made, for:
 *  - 0 (the legacy default stream; CUDA's and HIP's 0x1 and 0x2 too);
 *  - anything spillway made, on any device, checked by spillway before a
 *    driver sees it: a live queue's handle from sw_queue_native (it is
 *    spillway's already: use that sw_queue, or sw_queue_retain it), the
 *    default and copy queues, and a device's context
 *    (sw_device_native_context) -- on its own device or another;
 *  - on the simulated and host devices, every handle (they have no
 *    runtime but spillway; a destroyed queue's is told too);
 *  - a stream of another device or context, an out-of-order OpenCL
 *    queue, and a destroyed stream, where the runtime can tell
 *    (cuStreamGetCtx, hipStreamGetDevice, zeCommandListGetContextHandle;
 *    the CPU stand-ins look every handle up);
 *  - on OpenCL, an integer with no memory behind it, or (on an ICD
 *    platform, cl_khr_icd: PoCL, every vendor's driver under the loader)
 *    memory that does not begin with the platform's dispatch table, both
 *    asked of the kernel without a load that could fault.
 * What cannot be checked: OpenCL gives no way to tell a released command
 * queue, or another object of the platform (a cl_mem, a program), from a
 * live queue without reading through it, as pyopencl's from_int_ptr does
 * not: the driver then does, and a stale handle is a use after free.  A
 * real CUDA, HIP or Level Zero driver may read through an arbitrary
 * integer too.  Pass only live queues of your own.  (A destroyed spillway
 * queue's handle is forgotten with it: its address may be a new stream of
 * yours by then.)
 * SW_ERR_UNSUPPORTED where the backend cannot adopt queues. */
SW_API int sw_queue_wrap_native(sw_device *dev, uintptr_t handle,
                                sw_queue **out);
/* The runtime context the device's memory and queues live in: a
 * cl_context (opencl), the CUcontext (cuda: the primary context), a
 * ze_context_handle_t (ze), the simulated or host device's own.
 * SW_ERR_UNSUPPORTED where the runtime has none (hip). */
SW_API int sw_device_native_context(sw_device *dev, uintptr_t *context);
SW_API int sw_buffer_copy_q(sw_queue *q, sw_buffer *dst, size_t dst_offset,
                            sw_buffer *src, size_t src_offset, size_t n);
SW_API int sw_op_fill_q(sw_queue *q, sw_buffer *out, sw_dtype dtype, size_t n,
                        sw_scalar value);
SW_API int sw_op_add_q(sw_queue *q, sw_buffer *out, sw_buffer *a,
                       sw_buffer *b, sw_dtype dtype, size_t n);
SW_API int sw_op_scale_q(sw_queue *q, sw_buffer *out, sw_buffer *a,
                         sw_scalar alpha, sw_dtype dtype, size_t n);
SW_API int sw_op_axpy_q(sw_queue *q, sw_scalar alpha, sw_buffer *x,
                        sw_buffer *y, sw_dtype dtype, size_t n);

/* An order record: the events of work submitted to one queue and of host
 * tasks, so that new work can be ordered after them and the host can wait
 * for them.  Completed events are pruned as new ones arrive.  Not
 * thread-safe: one owner (the Python layer keeps one per thread). */
typedef struct sw_order sw_order;
SW_API int sw_order_create(sw_order **out);
/* Waits for nothing; releases the events it holds.  NULL is a no-op. */
SW_API void sw_order_destroy(sw_order *o);
/* Record ev (retained) as submitted work or as a host task. */
SW_API int sw_order_add(sw_order *o, sw_event *ev, int host_task);
/* Counts after pruning completed events (never blocks). */
SW_API int sw_order_counts(sw_order *o, size_t *submitted,
                           size_t *host_tasks);
/* The i-th recorded event (borrowed; valid until the next call on o). */
SW_API sw_event *sw_order_event(sw_order *o, int host_task, size_t i);
/* *idle = 1 when every recorded event has completed (never blocks). */
SW_API int sw_order_idle(sw_order *o, int *idle);
/* Wait for every recorded event (no lock held), then forget them; the
 * first error among them is returned. */
SW_API int sw_order_wait(sw_order *o);

/* ------------------------------------------------------------------------
 * Memory pressure
 *
 * When an allocation fails on the device (or cannot meet the budget even
 * after spilling), spillway calls the device's pressure callbacks, then
 * retries.  A callback is called with the device lock HELD (the lock is
 * the sw_pressure it receives).  Lock order is device lock -> anything
 * else, never the reverse: a callback that needs anything that can block or
 * re-enter spillway (Python's GIL, sw_buffer_free, another allocation)
 * calls sw_pressure_unlock first and sw_pressure_relock before it returns.
 * Callbacks are not re-entered: an allocation made from inside a callback
 * does not run the callbacks again.
 *
 * An allocation (or restore) that is about to fail for good calls the
 * callbacks once more as its very last step, after everything else
 * (trimming, waiting, spilling) failed: sw_pressure_last_chance(p) is 1
 * in that call, 0 in the first.  So a callback may do the cheap thing at
 * the first call (a young collection while backing off) and the thorough
 * one at the last (the Python module's full collection); one with nothing
 * more to offer returns 0 at once.  A request larger than the whole budget
 * fails before any callback: nothing could help it.
 * ---------------------------------------------------------------------- */

typedef struct sw_pressure sw_pressure;

/* bytes: the request that failed.  Return nonzero if the callback may
 * have freed device memory (the allocation is then retried). */
typedef int (*sw_pressure_fn)(sw_device *dev, sw_pressure *p, size_t bytes,
                              void *user);

/* Register fn(user) on dev; *id identifies it for removal.  At most
 * SW_MAX_PRESSURE_CALLBACKS per device. */
#define SW_MAX_PRESSURE_CALLBACKS 16
SW_API int sw_add_pressure_callback(sw_device *dev, sw_pressure_fn fn,
                                    void *user, int *id);
/* Safe to call from inside a callback (with the lock released). */
SW_API int sw_remove_pressure_callback(sw_device *dev, int id);

/* Inside a callback: release and re-take the device lock. */
SW_API void sw_pressure_unlock(sw_pressure *p);
SW_API void sw_pressure_relock(sw_pressure *p);
/* Inside a callback, lock held: count one garbage-collector run in the
 * device's gc_runs. */
SW_API void sw_pressure_note_gc(sw_pressure *p);
/* Inside a callback: 1 when this call is the allocation's last chance
 * (see above), else 0. */
SW_API int sw_pressure_last_chance(const sw_pressure *p);

/* ------------------------------------------------------------------------
 * Memory history
 *
 * A bounded ring of memory events per device, off by default (then each
 * place that would record one costs a single predictable branch).  Every
 * event carries the device's totals after it, so the history replays
 * exactly: in_use, cached, spilled, host_copies and spilled_disk change
 * only through the events marked [in_use +] etc. below.  Names follow PyTorch's memory history
 * where one exists.  docs/memory-history.md documents the formats.
 * ---------------------------------------------------------------------- */

typedef enum sw_trace_kind {
    SW_TRACE_START = 0,       /* tracing began: the totals as they were */
    SW_TRACE_ALLOC = 1,       /* a buffer was allocated [in_use +size] */
    SW_TRACE_FREE = 2,        /* a base was released [in_use -size, or
                               * spilled -size when it was spilled] */
    SW_TRACE_CACHE_HIT = 3,   /* memory taken from the cache [cached -] */
    SW_TRACE_CACHE_PUT = 4,   /* memory kept in the cache [cached +] */
    SW_TRACE_CACHE_TRIM = 5,  /* cached memory given back [cached -] */
    SW_TRACE_SPILL_BEGIN = 6, /* a buffer's copy out was queued and its
                               * device memory given up [in_use -size,
                               * spilled +size]; nothing was copied with
                               * aux 2 (a restore undone), aux 3 (a
                               * clean copy evicted [host_copies -size])
                               * and aux 4 (a clean copy evicted to the
                               * spill file, which held its bytes
                               * [spilled_disk +size]) */
    SW_TRACE_SPILL_END = 7,   /* ...the copy completed; aux 1 if it failed
                               * on the device */
    SW_TRACE_RESTORE_BEGIN = 8, /* a copy in was queued [spilled -size,
                                 * in_use +size, host_copies +size: the
                                 * host copy stays, clean]; aux 1: a
                                 * prefetch */
    SW_TRACE_RESTORE_END = 9, /* ...completed; aux 1: failed */
    SW_TRACE_PREFETCH = 10,   /* a restore started ahead of use */
    SW_TRACE_BUDGET = 11,     /* the budget was set to aux */
    SW_TRACE_PRESSURE_BEGIN = 12, /* pressure callbacks start (size: the
                                   * request that failed) */
    SW_TRACE_PRESSURE_END = 13,   /* ...end; aux 1 if one freed memory */
    SW_TRACE_GC = 14,         /* a callback ran a garbage collection */
    SW_TRACE_OOM = 15,        /* an allocation failed for good (size:
                               * requested); the report is kept with it */
    SW_TRACE_LEASE = 16,      /* a lease was taken (aux: leases now) */
    SW_TRACE_LEASE_RELEASE = 17,
    SW_TRACE_QUEUE_CREATE = 18,  /* queue id in .queue */
    SW_TRACE_QUEUE_DESTROY = 19,
    SW_TRACE_HOST_COPY_DROP = 20, /* a clean copy's host block given up
                                   * [host_copies -size]: aux 0, its device
                                   * memory written; aux 1, host memory
                                   * was short, or the buffer is being
                                   * freed (its free follows) */
    SW_TRACE_DISK_WRITE = 21, /* a spilled buffer's host copy went to the
                               * spill file [spilled_disk +size]; aux 1:
                               * nothing written, the file held its bytes;
                               * aux 2: a clean copy's host block, the
                               * buffer still resident [host_copies -size,
                               * not spilled_disk] */
    SW_TRACE_DISK_READ = 22,  /* ...and came back to host memory
                               * [spilled_disk -size] */
    SW_TRACE_HOST_BUDGET = 23, /* the host budget was set to aux */
    SW_TRACE_DISK_DROP = 24,  /* a spilled buffer's copy in the spill file
                               * was given up: the buffer is being freed
                               * (its free follows) [spilled_disk -size] */
} sw_trace_kind;
#define SW_TRACE_KIND_COUNT 25

/* "alloc", "free", "cache_hit", ... ; NULL for an unknown kind. */
SW_API const char *sw_trace_kind_name(sw_trace_kind kind);

typedef struct sw_trace_event {
    uint64_t seq;     /* 0, 1, 2, ... since sw_trace_start (dropped
                       * events leave gaps) */
    uint64_t time_ns; /* CLOCK_MONOTONIC */
    uint32_t kind;    /* sw_trace_kind */
    uint32_t queue;   /* queue id; 0 for the default queue */
    uint64_t buffer;  /* the base buffer's id (sw_buffer_info.id), or 0 */
    uint64_t size;    /* bytes the event is about (rounded for memory) */
    uint64_t aux;     /* as the kind says */
    uint64_t in_use, cached, spilled, budget; /* totals after the event */
    char tag[SW_TAG_MAX + 1];
    uint64_t host_copies; /* total after the event (sw_memory_info's) */
    uint64_t spilled_disk; /* the same */
    /* When the work itself ran, on the same clock as time_ns: for
     * SPILL_END and RESTORE_END the copies' start and end on the device's
     * copy queue (timed by the device, on backends that time copies:
     * sim, OpenCL, CUDA); for DISK_WRITE and DISK_READ the file I/O's.
     * 0 when not known: a backend that cannot time copies, copies queued
     * before the history started, a failed copy, other kinds. */
    uint64_t dev_begin_ns, dev_end_ns;
} sw_trace_event;

typedef struct sw_trace_options {
    size_t capacity; /* events kept; 0: the default, 65536.  At most
                      * 2^24 (SW_ERR_TOO_LARGE above). */
} sw_trace_options;

/* Start recording on dev (opts may be NULL).  Starting again clears the
 * ring and applies the new options. */
SW_API int sw_trace_start(sw_device *dev, const sw_trace_options *opts);
/* Stop recording; the ring is kept for reading and dumping until the next
 * start.  SW_ERR_INVALID_ARG if tracing was never started. */
SW_API int sw_trace_stop(sw_device *dev);
/* Copy up to cap of the kept events, oldest first, into out; *count says
 * how many are kept and *dropped how many were overwritten since start
 * (each may be NULL). */
SW_API int sw_trace_read(sw_device *dev, sw_trace_event *out, size_t cap,
                         size_t *count, uint64_t *dropped);
/* The out-of-memory report of an SW_TRACE_OOM event (its aux), copied
 * into buf; "" when it is no longer kept (the last 16 are). */
SW_API int sw_trace_oom_report(sw_device *dev, uint64_t aux, char *buf,
                               size_t len);
/* Write the history to path: format "chrome" (the Chrome Trace Event
 * JSON format; Perfetto's UI and chrome://tracing open it) or
 * "snapshot" (every live buffer now, the totals, and the kept history).
 * May be called while recording and from any thread. */
SW_API int sw_trace_dump(sw_device *dev, const char *path,
                         const char *format);
/* Call fn(ev, user) for every event as it is recorded (while tracing is
 * started), to forward it to an embedding runtime's own profiler; NULL
 * removes it.  fn runs with the device lock held: it must not call
 * spillway, block, or take a lock that is held while calling spillway. */
typedef void (*sw_trace_fn)(const sw_trace_event *ev, void *user);
SW_API int sw_trace_set_callback(sw_device *dev, sw_trace_fn fn, void *user);

/* The id of the base buffer behind a handle, as in snapshots and traces. */
SW_API int sw_buffer_id(sw_buffer *buf, uint64_t *id);

/* ------------------------------------------------------------------------
 * Fault injection (every backend: done in the core's wrapper of each
 * backend operation)
 * ---------------------------------------------------------------------- */

typedef enum sw_fault_op {
    SW_FAULT_ALLOC = 0, /* backend allocations fail with SW_ERR_OOM     */
    SW_FAULT_COPY = 1,  /* backend copies (either direction, spills and
                         * restores too) fail with SW_ERR_DEVICE        */
    SW_FAULT_HOST_ALLOC = 2, /* the library's own host allocations (handles,
                         * queues, events, host copies of spilled buffers,
                         * a backend's bookkeeping) made by a thread while it
                         * holds dev's lock fail, and the call that made
                         * them reports SW_ERR_HOST_OOM.  With dev NULL: the
                         * calling thread's allocations made while it holds
                         * no device lock (opening devices, order records). */
    SW_FAULT_DISK = 3,  /* writes to and reads from the spill file fail as
                         * with EIO (sw_set_host_budget)                */
} sw_fault_op;

/* Make the nth (1-based) next call of op fail; with persistent != 0, that
 * call and every later one fail.  nth = 0 disarms.  dev may be NULL only
 * for SW_FAULT_HOST_ALLOC. */
SW_API int sw_inject_fault(sw_device *dev, sw_fault_op op, uint64_t nth,
                           int persistent);

#ifdef __cplusplus
}
#endif
#endif /* SPILLWAY_H */
