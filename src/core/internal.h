/*
 * internal.h -- the core's shared structures.  `sw__` names are internal.
 *
 * Locking: every sw_device has one mutex (dev->lock) that protects all of
 * its state below and every buffer that lives on it.  Helpers whose name
 * ends in _locked expect it held (and assert it); public entry points take
 * it once.  No code path holds two device locks, and the lock is never held
 * while waiting for the device.  Two leaf locks sit under it: the global
 * registry lock (device open/close only, never taken with a device lock
 * held) and the buffer-slot lock (taken briefly inside a device lock).
 */
#ifndef SW_CORE_INTERNAL_H
#define SW_CORE_INTERNAL_H

#include "spillway.h"
#include "backend/backend.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------
 * Handles
 * ---------------------------------------------------------------------- */

/* Magic numbers make freed and foreign handles detectable.  Buffer structs
 * live in type-stable slots (never returned to malloc), so reading the magic
 * of a stale handle is always safe. */
#define SW__DEVICE_MAGIC 0x53574456u /* "SWDV" */
#define SW__BUF_LIVE 0x53574246u     /* a handle the user holds */
#define SW__BUF_ZOMBIE 0x5357425au   /* user let go; kept for views/pins */
#define SW__BUF_FREE 0x53574200u     /* slot on the free list */
#define SW__SCOPE_MAGIC 0x53575053u

struct sw_buffer {
    _Atomic uint32_t magic;
    _Atomic(sw_device *) dev;
    sw_buffer *base; /* itself for a base buffer */
    size_t offset;   /* byte offset inside the base allocation */
    size_t size;     /* bytes visible through this handle */
    uint32_t user_refs;

    /* Base-only fields (a view uses its base's). */
    uint32_t children; /* live views */
    uint32_t pins;     /* launches and host transfers in progress */
    sw_buffer_state state;
    uintptr_t mem;     /* backend allocation; 0 for a 0-byte buffer */
    size_t alloc_size; /* size rounded to SW_ALLOC_GRANULARITY */
    uint64_t last_use; /* LRU key: dev->clock at the last use */
    sw_buffer *live_prev, *live_next; /* dev->live list of bases */
    char tag[SW_TAG_MAX + 1];

    sw_buffer *slot_next; /* free-slot FIFO */
};

/* ------------------------------------------------------------------------
 * The cache: freed device blocks kept for reuse, exact rounded size.
 * ---------------------------------------------------------------------- */

typedef struct sw__cblock {
    uintptr_t mem;
    size_t size;
    struct sw__cblock *bnext, *bprev; /* same hash bucket */
    struct sw__cblock *onext, *oprev; /* age order, oldest at head */
} sw__cblock;

#define SW__CACHE_BUCKETS 1024u

typedef struct sw__cache {
    sw__cblock *bucket[SW__CACHE_BUCKETS];
    sw__cblock *oldest, *newest;
    size_t count;
} sw__cache;

/* ------------------------------------------------------------------------
 * Devices
 * ---------------------------------------------------------------------- */

struct sw_peak_scope {
    uint32_t magic;
    sw_device *dev;
    uint64_t peak;
    sw_peak_scope *prev, *next; /* open scopes, in the order opened */
};

typedef struct sw__fault {
    uint64_t countdown; /* calls left before the failing one; 0 = unarmed */
    bool persistent;
    bool failing; /* persistent and triggered: every call fails */
} sw__fault;

/* Scratch device memory for small results (sums), so that they neither
 * allocate nor disturb in_use and peak. */
#define SW__SCRATCH_SLOTS 64u

struct sw_device {
    uint32_t magic;
    pthread_mutex_t lock;
    _Atomic(pthread_t) owner; /* for lock assertions */
    _Atomic int owned;

    const sw__backend_ops *ops;
    int index;
    char name[32];
    int refs; /* opens; under the registry lock */

    /* Set while open; NULL when closed. */
    sw__bdev *b;
    sw__bqueue *q; /* default queue */
    sw__device_props props;

    /* Accounting (names as in sw_memory_info). */
    uint64_t in_use, peak, cached, spilled, budget;
    uint64_t allocs, frees, spills, restores;
    uint64_t spilled_bytes_total, restored_bytes_total;
    double spill_seconds, restore_seconds;
    uint64_t alloc_retries, ooms, gc_runs;

    uint64_t clock; /* advanced on every use; buffers' LRU key */
    sw_buffer *live; /* live base buffers */
    size_t live_count;
    sw_peak_scope *scope_first, *scope_last;
    sw__cache cache;
    sw__fault fault[2];

    uintptr_t scratch; /* SW_ALLOC_GRANULARITY bytes, or 0 */
    uint64_t scratch_used; /* bitmap of SW__SCRATCH_SLOTS */
};

/* Lock helpers; the owner fields back sw__assert_locked. */
void sw__lock(sw_device *dev);
void sw__unlock(sw_device *dev);
bool sw__held(sw_device *dev);
#define sw__assert_locked(dev) assert(sw__held(dev))

/* Validate a device handle and take its lock; on failure returns the error
 * with the message set and the lock not held. */
int sw__device_enter(sw_device *dev);
/* Validate a buffer handle, take its device's lock and return the device. */
int sw__buffer_enter(sw_buffer *buf, sw_device **dev);
/* Validate a buffer while dev is already locked (multi-buffer calls). */
int sw__buffer_check_locked(sw_device *dev, sw_buffer *buf,
                            const char *what);

/* ------------------------------------------------------------------------
 * Core services (device.c, buffer.c, stats.c)
 * ---------------------------------------------------------------------- */

/* in_use changed by +delta; keeps peak and scopes. */
void sw__note_in_use_locked(sw_device *dev, uint64_t delta);
/* Release every cached block to the backend. */
void sw__cache_drain_locked(sw_device *dev);
void sw__cache_init(sw__cache *c);
/* Pins keep a base alive and in place; unpinning may release it. */
void sw__unpin_locked(sw_device *dev, sw_buffer *base);
/* Wait for everything queued on the default queue, with the lock released
 * during the wait (re-taken before returning). */
int sw__wait_idle_locked(sw_device *dev);
/* Wait for an event with the lock released; releases the event. */
int sw__wait_event_locked(sw_device *dev, sw__bevent *ev);

/* ------------------------------------------------------------------------
 * Backend wrappers (bops.c): the one place for asserts, statistics and
 * fault injection.  Each expects the device lock held.
 * ---------------------------------------------------------------------- */

int sw__b_alloc(sw_device *dev, size_t size, uintptr_t *mem);
int sw__b_free(sw_device *dev, uintptr_t mem, size_t size);
int sw__b_write(sw_device *dev, uintptr_t dst, size_t off, const void *src,
                size_t n);
int sw__b_read(sw_device *dev, void *dst, uintptr_t src, size_t off,
               size_t n);
int sw__b_copy(sw_device *dev, uintptr_t dst, size_t doff, uintptr_t src,
               size_t soff, size_t n);
int sw__b_fill(sw_device *dev, uintptr_t dst, size_t off, size_t n,
               const void *pattern, size_t psize);
int sw__b_launch(sw_device *dev, const sw_kernel_args *args);
int sw__b_event_record(sw_device *dev, sw__bevent **ev);
int sw__b_mem_info(sw_device *dev, uint64_t *free, uint64_t *total,
                   int *known);

/* ------------------------------------------------------------------------
 * Messages
 * ---------------------------------------------------------------------- */

/* "1.50 MiB" into buf (at least 32 bytes). */
const char *sw__fmt_bytes(uint64_t n, char *buf, size_t len);
/* Append to the calling thread's message (after sw__errorf). */
void sw__error_append(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

#endif /* SW_CORE_INTERNAL_H */
