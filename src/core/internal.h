/*
 * internal.h -- the core's shared structures.  `sw__` names are internal.
 *
 * Locking: every sw_device has one mutex (dev->lock) that protects all of
 * its state below and every buffer, lease, queue and scope that lives on
 * it.  A function whose name ends in _locked is called with that device
 * lock held, and every extern one asserts it; public entry points take it
 * once.  (A helper under another lock says so in its name instead:
 * open_registered, pool_grow.)  No code path holds two device locks, and
 * none waits on the device while holding one (bops.c asserts it for every
 * backend call that can block).  Other locks are leaves: the registry lock
 * (device open/close; taken before a device lock, never with one held),
 * each handle pool's lock, a queue's host-task lock, and a host task's
 * completion lock, each held only briefly and never across a call out.
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
#include <string.h>

#include "core/handle.h"

#define SW__DEVICE_MAGIC 0x53574456u /* "SWDV" */
#define SW__NOT_IN_HEAP SIZE_MAX
/* Marks kept on the default queue's timeline (spill.c). */
#define SW__TL_MAX 32

typedef struct sw__buf sw__buf;
typedef struct sw__queue sw__queue;
typedef struct sw__event sw__event;
typedef struct sw__scope sw__scope;
typedef struct sw__lease sw__lease;

struct sw__buf {
    /* The launch path's fields come first, in one cache line. */
    sw__slot h;     /* a live handle: the user holds it */
    uint32_t pins;  /* (base) launches and host transfers in progress */
    uint8_t state;  /* (base) sw_buffer_state */
    bool moving;    /* (base) a spill or restore is copying it */
    bool external;  /* (base) wraps memory we do not own: never moves */
    /* (base) Restored by a call that may still undo it (a launch's other
     * argument failing to come back): while set, the host copy is kept
     * though resident (spill.c, sw__unrestore_locked).  Any other use
     * ends it (sw__hold_end_locked): what it writes must not be undone. */
    bool hold_host;
    /* (base) A clean copy: resident, and its host block (`host`) or its
     * extent of the spill file (disk_kept) holds the same bytes as its
     * device memory -- restored, and nothing has written it since.
     * Evicting it copies nothing.  Every way of writing the device copy
     * ends it first (sw__dirty_locked): a launch argument not marked
     * SW_ACCESS_READ, an op's output, a host write, a write export.
     * Counted in dev->host_copies while it has the host block
     * (sw__host_clean). */
    bool clean;
    /* (base) Restores in its life, and launches that used it since the
     * last one (ops, copies, sw_launch_end: not a prefetch, a host read
     * or the restore itself), saturating: the spilling order of clean
     * copies (lru.c). */
    uint8_t nrestores, clean_uses;
    /* (base) sw_buffer_advise(SW_ADVISE_COLD): its last_use then; cold
     * (evicted first, lru.c) while no use came after (0: not advised). */
    uint64_t cold_at;
    sw__buf *base;  /* itself for a base buffer */
    size_t offset;  /* byte offset inside the base allocation */
    uintptr_t mem;  /* (base) backend allocation; 0 when spilled or empty */
    /* (base) LRU key: dev->clock at the last use, set when it is pinned
     * and again when unpinned (its work then queued: spill.c's timeline) */
    uint64_t last_use;
    uint32_t user_refs;
    size_t size;       /* bytes visible through this handle */

    /* Base-only fields (a view uses its base's). */
    uint32_t children; /* live views */
    uint32_t exposed;  /* live leases: unspillable while > 0 */
    void *host;        /* the host copy while SPILLED (or clean) */
    size_t alloc_size; /* size rounded to SW_ALLOC_GRANULARITY */
    uint64_t heap_key; /* last_use when last placed in the LRU heap */
    size_t heap_idx;   /* SW__NOT_IN_HEAP when not spillable now */
    sw__buf *tmp_next; /* victim lists while spilling */
    /* (base) Queues other than the default that used it since the default
     * queue last waited for them: bit k is queue id k (see sw__queue). */
    uint64_t qmask;
    /* (base) Queues that waited, on the device, for the default queue's
     * work on it (their first use: queue.c); cleared at the default
     * queue's next use, after which they must wait again.  A subset of
     * qmask's queues. */
    uint64_t qsynced;
    /* (base) Queues holding a pin on it (sw_launch_begin_q), qpins of
     * them in all: while any does, the default queue's uses wait for
     * those queues every time (more of their work may come before the
     * pins end) and leave their qmask bits set. */
    uint64_t qpinmask;
    uint32_t qpins;
    /* (base) Queues whose list of used buffers holds it (queue.c). */
    uint64_t qlisted;
    uint64_t id; /* (base) unique for the process: snapshots, traces */
    /* (base) Copies of its data in flight (spill.c): the batch, and the
     * device's list of bases with one.  The host block is host_size bytes
     * (the pool may give a larger one than size), page-locked when
     * host_pinned. */
    struct sw__xfer *xfer;
    sw__buf *xnext, *xprev;
    size_t host_size;
    bool host_pinned;
    bool released; /* freed while a copy was in flight: slot freed after */
    bool lost;     /* its copy to host failed on the device (spill.c) */
    /* (base) SPILLED with its only copy in the device's spill file, at
     * disk_off (disk.c): host is NULL then. */
    bool on_disk;
    /* (base) Not on_disk, yet its extent of the spill file at disk_off
     * still holds its bytes: read back from there and written by nothing
     * since -- spilled in host memory, or resident and clean.  Sent to
     * disk again it writes nothing, and a clean copy without its host
     * block goes straight back there when evicted (disk.c).  Any write
     * ends it (sw__dirty_locked). */
    bool disk_kept;
    uint64_t disk_off;
    /* (base) While hold_host: the call holding it, and where its device
     * memory goes back to if that call undoes the restore. */
    uint32_t hold_token;
    bool mem_from_cache;
    sw__buf *live_prev, *live_next; /* dev->live list of bases */
    char tag[SW_TAG_MAX + 1];
};

/* An exposure lease (sw_buffer_expose). */
struct sw__lease {
    sw__slot h;
    sw__buf *base;
};

/* The buffer a handle names, or NULL (no lock taken: see
 * sw__buffer_enter for the checked way in). */
static inline sw__buf *sw__buf_of(const sw_buffer *h)
{
    return (sw__buf *)sw__handle_lookup(&sw__buf_pool, h);
}

static inline sw_buffer *sw__buf_handle(const sw__buf *b)
{
    return (sw_buffer *)sw__handle_of(&sw__buf_pool, b);
}

/* tag (NULL: none) into dst[cap], truncated like snprintf without its
 * formatting: a buffer's on every allocation, an event's on every record,
 * both under the device lock. */
static inline void sw__copy_tag(char *dst, size_t cap, const char *tag)
{
    size_t n = tag != NULL ? strnlen(tag, cap - 1) : 0;
    memcpy(dst, tag != NULL ? tag : "", n);
    dst[n] = '\0';
}

/* A batch of copies between device and host memory in flight on the copy
 * queue (spill.c): one event, shared by the buffers it moves. */
enum { SW__XFER_SPILL = 0, SW__XFER_RESTORE = 1 };
typedef struct sw__xfer {
    sw__bevent *ev;
    uint32_t refs; /* buffers attached, and waiters */
    int kind;      /* SW__XFER_SPILL or SW__XFER_RESTORE */
    bool done;     /* observed complete */
    int rc;        /* the copies' result, once done */
    double t0;     /* when queued */
    /* Recorded on the copy queue just before the copies, where the backend
     * can time events (event_elapsed): their seconds are then the
     * device's, from start to ev.  NULL otherwise. */
    sw__bevent *start;
    uint32_t epoch; /* dev->counters_epoch when queued */
    uint32_t anchor_gen; /* the history's anchor when queued (0: none) */
    struct sw__xfer *onext; /* in dev->xfer_orphans */
    /* Buffers taken off it by a later copy (superseded) while the history
     * was on: their END events wait for these copies to be seen done. */
    struct sw__xfer_end *ends;
} sw__xfer;

typedef struct sw__xfer_end {
    uint64_t id, size;
    char tag[SW_TAG_MAX + 1];
    struct sw__xfer_end *next;
} sw__xfer_end;

/* The host staging pool (hostpool.c): idle host blocks for host copies. */
typedef struct sw__hblock {
    void *p;
    size_t size;
    bool pinned; /* from the backend's host_alloc */
    struct sw__hblock *next;
} sw__hblock;

typedef struct sw__hostpool {
    sw__hblock *head;
    uint64_t bytes; /* idle bytes held */
    uint64_t limit;
    size_t count;
} sw__hostpool;

#define SW__HOST_POOL_DEFAULT (UINT64_C(1) << 30)

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
    /* Records of blocks taken, kept for the next put (at most
     * SW__CACHE_SPARE): a free and an allocation from two threads would
     * otherwise each call malloc and free under the device lock, the
     * record made by one thread freed by the other (into its arena). */
    sw__cblock *spare;
    size_t nspare;
} sw__cache;

#define SW__CACHE_SPARE 64u

/* ------------------------------------------------------------------------
 * Devices
 * ---------------------------------------------------------------------- */

struct sw__scope {
    sw__slot h; /* h.dev: its device */
    uint64_t peak;
    sw__scope *prev, *next; /* open scopes, in the order opened */
};

typedef struct sw__fault {
    uint64_t countdown; /* calls left before the failing one; 0 = unarmed */
    bool persistent;
    bool failing; /* persistent and triggered: every call fails */
} sw__fault;

/* Scratch device memory for small results (sums), so that they neither
 * allocate nor disturb in_use and peak: SW_ALLOC_GRANULARITY bytes in
 * slots that hold a complex128 sum. */
#define SW__SCRATCH_SLOT 16u
#define SW__SCRATCH_SLOTS (SW_ALLOC_GRANULARITY / SW__SCRATCH_SLOT)

typedef struct sw__callback {
    sw_pressure_fn fn; /* NULL: free slot */
    void *user;
} sw__callback;

struct sw_pressure {
    sw_device *dev;
    bool locked;
    bool last; /* the ladder's last step (sw_pressure_last_chance) */
};

/* The memory history (trace.c). */
#define SW__TRACE_OOM_KEPT 16
typedef struct sw__trace {
    bool started;          /* sw_trace_start called; the ring is readable */
    sw_trace_event *ring;  /* cap events, seq % cap */
    size_t cap;
    uint64_t recorded;     /* events recorded since start */
    sw_trace_fn fn;        /* forwarding callback, or NULL */
    void *user;
    char *oom[SW__TRACE_OOM_KEPT]; /* reports of the last OOM events */
    uint64_t oom_next;
    /* Device time: an event recorded on the copy queue while it was idle,
     * so that it ran at anchor_ns on the host's clock; a copy's device
     * times are anchor_ns plus event_elapsed from it.  Recorded at the
     * first chance after sw_trace_start (sw__trace_anchor_locked); each
     * anchor has a generation, and xfers made under it keep it. */
    sw__bevent *anchor;
    uint64_t anchor_ns;
    uint32_t anchor_gen;
} sw__trace;

/* A native handle spillway made and handed out (sw_queue_native,
 * sw_device_native_context), kept in a registry of them (native.c) while
 * it lives, so that no device adopts it as a caller's stream.  Embedded in
 * its queue or device; under the registry's lock. */
typedef struct sw__native {
    struct sw__native *next;
    uintptr_t handle; /* 0: not kept */
    sw_device *dev;
    int qid; /* the queue's id; -1: the device's context */
} sw__native;

struct sw_device {
    _Atomic uint32_t magic;
    pthread_mutex_t lock;
    _Atomic(pthread_t) owner; /* for lock assertions */
    _Atomic int owned;

    const sw__backend_ops *ops;
    int index;
    char name[32];
    int refs; /* opens; under the registry lock */
    pthread_cond_t moved; /* a spill or restore finished */

    /* Everything from here to the end belongs to one opening:
     * sw_device_close gives back what it holds, and an opening zeroes it
     * whole (device.c, reset_state), so that no field outlives its
     * opening.  Reset one by one, a forgotten field did: the timeline's
     * cq_after, kept across a reopening that set the clock back to 0,
     * covered every later use, and spills copied before the work they
     * had to wait for.  A field that must outlive an opening goes above.
     */

    /* Set while open; NULL when closed. */
    sw__bdev *b;
    sw__bqueue *q; /* default queue */
    sw__device_props props;

    /* Accounting (names as in sw_memory_info). */
    uint64_t in_use, peak, cached, spilled, budget, peak_reserved;
    uint64_t host_copies; /* alloc sizes of the clean bases */
    /* The disk tier (disk.c): the host budget (0: none), the spill file
     * (0 until first needed) and its next offset, and the figures. */
    uint64_t host_budget;
    bool clear_new; /* sw_set_clear_new: new buffers read as zeros */
    int disk_fd;
    uint64_t disk_end;
    uint64_t spilled_disk; /* alloc sizes of the bases on disk */
    uint32_t bg_reads; /* reads of prefetches running in the background */
    uint64_t disk_write_bytes, disk_read_bytes;
    double disk_write_seconds, disk_read_seconds;
    uint64_t allocs, frees, spills, restores;
    uint64_t spilled_bytes_total, restored_bytes_total;
    double spill_seconds, restore_seconds;
    uint64_t alloc_retries, ooms, gc_runs;
    uint64_t clean_evictions;

    uint64_t clock; /* advanced on every use; buffers' LRU key */
    /* Calls that released the lock mid-way (waiting for the device, a
     * move, a pressure callback) and will take it again: close refuses
     * while there are any. */
    uint32_t waiting;
    uint32_t hold_seq; /* tokens of calls that hold restores (launch.c) */
    /* Spillable buffers: resident, owned, unexposed, nonempty. */
    sw__buf **heap;
    size_t heap_len, heap_cap;
    uint64_t heap_bytes; /* their alloc sizes: what could be spilled */
    /* The host staging pool (hostpool.c). */
    sw__hostpool hpool;
    /* The backend's copy queue, or NULL (copies go on q). */
    sw__bqueue *copyq;
    /* Bases with copies in flight (spill.c), linked through xnext. */
    sw__buf *xfers;
    /* Xfers whose every buffer moved again (a later copy on the in-order
     * copy queue superseded theirs) before their end was noticed: their
     * time still counts, once they complete (spill.c). */
    sw__xfer *xfer_orphans;
    /* Host-timed copies (no event_elapsed) are counted up to here. */
    double xfer_host_until;
    /* The default queue's timeline (spill.c): events recorded on it, oldest
     * first, each with dev->clock when it was recorded.  Uses of a buffer
     * are queued before its last_use is set at unpin, so a mark with clock
     * >= last_use follows them: a spill's copy waits for that mark, not
     * for everything queued on the default queue. */
    struct sw__tlmark {
        sw__bevent *ev;
        uint64_t clock;
    } tl[SW__TL_MAX];
    unsigned tl_first, tl_len;
    uint64_t tl_done;  /* uses with last_use <= this have completed */
    uint64_t cq_after; /* the copy queue waits for those <= this */
    sw__callback callbacks[SW_MAX_PRESSURE_CALLBACKS];
    /* Its native context once handed out (native.c). */
    sw__native context;
    sw__queue *queues; /* live and dying queues */
    size_t live_queues;
    size_t dying_queues; /* released, destroyed once idle */
    /* Queue creations since the last reaping pass, and the dying queues
     * that pass left (still busy): sw_queue_create reaps when the first
     * reaches the second (queue.c). */
    size_t reap_since, reap_busy;
    /* Bumped by sw_reset_counters: a copy queued before it adds no time
     * to the counters after it. */
    uint32_t counters_epoch;
    uint64_t qids; /* ids in use (bit k) */
    sw__buf *live; /* live base buffers */
    size_t live_count;
    /* Freed bases whose memory awaits ordering after other queues
     * (buffer.c, sw__unpark_locked), linked through live_next. */
    sw__buf *parked;
    size_t parked_count;
    sw__scope *scope_first, *scope_last;
    sw__cache cache;
    sw__fault fault[4]; /* by sw_fault_op */
    /* Recording the memory history: the one branch SW__TRACE costs. */
    bool tracing;
    sw__trace trace;

    uintptr_t scratch; /* SW_ALLOC_GRANULARITY bytes, or 0 */
    uint64_t scratch_used; /* bitmap of SW__SCRATCH_SLOTS */
};

/* ------------------------------------------------------------------------
 * Queues and events (queue.c)
 * ---------------------------------------------------------------------- */

/* Queues (queue.c); adopting native streams (native.c). */
/* A queue whose backend queue was just made (or adopted): an id, the
 * device's list, one reference; its handle. */
sw_queue *sw__queue_install_locked(sw_device *dev, sw__queue *q);
/* Keep (or forget) n: handle, a native handle spillway made, handed out
 * for dev (qid: a queue's id; -1: the device's context), so that
 * sw_queue_wrap_native refuses it on any device.  A leaf lock of its
 * own, taken under the device lock.  Forgetting one not kept is a no-op. */
void sw__native_keep(sw__native *n, sw_device *dev, uintptr_t handle,
                     int qid);
void sw__native_forget(sw__native *n);

/* Queue ids 1..62 are a queue's own; id 63 is shared by every queue
 * created while those are taken (and so stands for all of them). */
#define SW__QID_SHARED 63
/* qmask bit 0 (the default queue's id, never another queue's): a
 * prefetch's copy in is in flight and the default queue has not waited
 * for it yet.  Any use goes the general way (qmask != 0), where
 * sw__order_use_locked makes the queue wait for the copy first. */
#define SW__QMASK_RESTORE (UINT64_C(1) << 0)

typedef struct sw__task {
    struct sw__task *next;
    sw__bevent *after; /* the queue's work before the task */
    void (*fn)(void *);
    void *arg;
    sw__event *done; /* completed when fn returns */
} sw__task;

/* A buffer a queue used (sw__order_use_locked), by its base's id. */
typedef struct sw__quse {
    sw__buf *b;
    uint64_t id;
} sw__quse;

struct sw__queue {
    sw__slot h; /* h.dev: its device */
    sw_device *dev; /* = h.dev, read under the lock */
    sw__bqueue *bq;
    /* The buffers whose qmask bit it set: cleared when it dies. */
    sw__quse *used;
    size_t nused, capused;
    bool used_all; /* no memory for the list: clear every buffer's */
    uint32_t refs; /* under the device lock */
    int id;
    bool dying; /* last reference gone; destroyed once idle */
    /* Over a stream of the caller's (sw_queue_wrap_native), not one
     * spillway made. */
    bool adopted;
    /* Its native handle once sw_queue_native handed it out: in the
     * registry of spillway's own handles (native.c) if spillway made it. */
    sw__native native;
    sw__queue *prev, *next; /* dev->queues */
    /* Host tasks run in order, on the runner pool (hosttask.c).  `tlock`
     * is a leaf lock. */
    pthread_mutex_t tlock;
    pthread_cond_t tcv;
    sw__task *thead, *ttail;
    size_t tpending; /* queued or running */
    bool scheduled;  /* on the ready list or being run by a runner */
    sw__queue *rnext; /* the pool's ready list */
};

struct sw__event {
    sw__slot h;
    /* A host task's completion; initialised once per slot (kept across
     * reuse: the pool's `keep` ends here). */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* All references; the handle's (the user's retains and the order
     * records holding it) are also counted in `handles`, and the handle
     * dies when they are gone, though a host task still holding the event
     * keeps it: a second release of a pending task's event is refused. */
    _Atomic uint32_t refs;
    _Atomic uint32_t handles;
    const sw__backend_ops *ops;
    sw__bevent *bev; /* a backend event; NULL for a host task's */
    bool done;
    int rc;
};

/* Events (queue.c), for host tasks and order records. */
/* A new event with one reference, its handle's. */
sw__event *sw__event_new(const sw__backend_ops *ops, sw__bevent *bev);
sw_event *sw__event_handle(const sw__event *e);
/* Internal references (a host task's): no part of the handle's. */
void sw__event_unref(sw__event *e);
/* A reference of the handle's (a retain, an order record) taken and
 * dropped: the last one dropped kills the handle. */
void sw__event_hold_handle(sw__event *e);
void sw__event_drop_handle(sw__event *e);
int sw__event_check(const sw_event *h, sw__event **out);
void sw__event_complete(sw__event *e, int rc);
int sw__event_query(sw__event *ev, int *done);
int sw__event_wait(sw__event *ev);
/* Whether this thread is running one of q's host tasks (hosttask.c). */
bool sw__in_own_task(const sw__queue *q);

/* Make base usable by work on q (NULL: the default queue): orders q
 * after the default queue's earlier work on it, or the default queue
 * after other queues' work on it.  Never blocks. */
int sw__order_use_locked(sw_device *dev, sw__buf *base, sw__queue *q);
/* Record that q used base (its qmask bit, and q's list of them), without
 * ordering anything: a pin that q already waited for, ending. */
void sw__queue_mark_used_locked(sw__queue *q, sw__buf *base);
/* Validate q and take its device's lock (a dying queue is refused). */
int sw__queue_enter(const sw_queue *h, sw__queue **q);
/* Validate a queue handle as a live queue of dev, whose lock is held. */
int sw__queue_check_locked(sw_device *dev, const sw_queue *h,
                           sw__queue **q);
/* Destroy the dying queues whose work is done (drops and re-takes the
 * lock); with wait, wait for their work first. */
void sw__reap_queues_locked(sw_device *dev, bool wait);

/* The device whose lock this thread holds, or NULL (a thread never holds
 * two): host allocations are attributed to it for fault injection. */
extern _Thread_local sw_device *sw__tl_dev;

/* Lock helpers; the owner fields back sw__assert_locked. */
void sw__lock(sw_device *dev);
void sw__unlock(sw_device *dev);
bool sw__held(sw_device *dev);
#define sw__assert_locked(dev) assert(sw__held(dev))

/* Validate a device handle and take its lock; on failure returns the error
 * with the message set and the lock not held. */
int sw__device_enter(sw_device *dev);
/* Whether dev's kernels support dtype d (known to be valid). */
static inline bool sw__dtype_ok(const sw_device *dev, sw_dtype d)
{
    return (dev->props.dtypes >> (unsigned)d) & 1u;
}
/* SW_ERR_DTYPE: "opencl:0 cannot compute with float64: no cl_khr_fp64". */
int sw__dtype_unsupported(const sw_device *dev, sw_dtype d);
/* dev is one of the registry's devices (checked by address: nothing is
 * read through a foreign pointer). */
bool sw__device_valid(const sw_device *dev);
/* Validate a buffer handle, take its device's lock and return the device. */
int sw__buffer_enter(const sw_buffer *h, sw__buf **buf, sw_device **dev);
/* Validate a buffer while dev is already locked (multi-buffer calls). */
int sw__buffer_check_locked(sw_device *dev, const sw_buffer *h,
                            const char *what, sw__buf **buf);

/* ------------------------------------------------------------------------
 * Core services (device.c, buffer.c, stats.c)
 * ---------------------------------------------------------------------- */

/* in_use changed by +delta; keeps peak and scopes. */
void sw__note_in_use_locked(sw_device *dev, uint64_t delta);
/* in_use + cached may have grown: keeps peak_reserved. */
static inline void sw__note_reserved_locked(sw_device *dev)
{
    if (dev->in_use + dev->cached > dev->peak_reserved)
        dev->peak_reserved = dev->in_use + dev->cached;
}
/* Trim the cache and spill until in_use + cached fits the budget, or
 * nothing more can move (alloc.c). */
void sw__enforce_budget_locked(sw_device *dev);
/* Release every cached block to the backend. */
void sw__cache_drain_locked(sw_device *dev);
void sw__cache_init(sw__cache *c);
/* A new base's fields (not its handle or device). */
void sw__buf_init_base(sw__buf *b, size_t size, const char *tag);
/* Link a new base into dev->live (the buffers a close or report sees). */
void sw__live_link_locked(sw_device *dev, sw__buf *b);
/* Pins keep a base alive and in place; unpinning may release it. */
void sw__unpin_locked(sw_device *dev, sw__buf *base);
/* Unpin the arguments of one launch (bufs[i]->base each), as used at one
 * time: its work is queued. */
void sw__unpin_all_locked(sw_device *dev, sw__buf *const *bufs, size_t n);
/* Release a base nothing refers to any more (no handle, view, pin, lease
 * or move in progress); otherwise do nothing. */
void sw__maybe_release_locked(sw_device *dev, sw__buf *base);
/* Release parked bases that can now be ordered after other queues' work,
 * or all of them when every queue is known idle (queues_idle). */
void sw__unpark_locked(sw_device *dev, bool queues_idle);
void sw__cache_put_locked(sw_device *dev, uintptr_t mem, size_t size);
/* Take a cached block of exactly size bytes (the most recently freed). */
bool sw__cache_take_locked(sw_device *dev, size_t size, uintptr_t *mem);
/* Give the oldest cached block back to the backend.  pre: cache nonempty. */
void sw__cache_trim_oldest_locked(sw_device *dev);
/* The allocation ladder: device memory of size bytes (rounded, > 0);
 * request is the caller's size, for messages; *from_cache (may be NULL)
 * whether the block came from the cache.  May release the lock. */
int sw__obtain_locked(sw_device *dev, size_t request, size_t size,
                      const char *tag, uintptr_t *mem, bool *from_cache);
/* Whether size more bytes fit the budget once the cache is trimmed and
 * everything that can move now (unpinned, not moving) is spilled. */
bool sw__budget_room_locked(sw_device *dev, uint64_t size);
/* SW_ERR_OOM with the report of a request the budget refuses before
 * anything moves. */
int sw__budget_refusal_locked(sw_device *dev, size_t request, size_t size,
                              const char *tag);
/* Make n buffers resident and pin them for work on q (NULL: the default
 * queue) (launch.c); fills ptrs if not NULL.  On failure nothing stays
 * pinned. */
int sw__pin_all_locked(sw_device *dev, sw__queue *q, sw__buf *const *bufs,
                       size_t n, sw_devmem *ptrs);
/* The same with each argument's access mode (SW_ACCESS_READ or
 * SW_ACCESS_WRITE; access NULL: every one written).  A written argument's
 * clean copy ends once every argument is pinned. */
int sw__pin_all_access_locked(sw_device *dev, sw__queue *q,
                              sw__buf *const *bufs,
                              const unsigned char *access, size_t n,
                              sw_devmem *ptrs);
/* Whether the distinct bases of bufs plus `extra` bytes fit the device
 * (or its budget) together, and whether there is room for them now
 * (launch.c); each sets the message when not. */
int sw__check_fit_locked(sw_device *dev, sw__buf *const *bufs, size_t n,
                         uint64_t extra);
int sw__check_room_locked(sw_device *dev, sw__buf *const *bufs, size_t n,
                          uint64_t extra);
/* Run the pressure callbacks (last: as the ladder's last step); true if
 * one may have freed memory. */
bool sw__run_callbacks_locked(sw_device *dev, size_t bytes, bool last);
/* Set on spillway's own threads while they do a caller's work in the
 * background (disk.c's prefetch thread): no pressure callback runs there
 * (a program's callbacks run only on threads that call spillway), and a
 * restore that fails for want of memory is no OOM (its buffer's use will
 * try again, with the callbacks, and count it if it fails). */
extern _Thread_local bool sw__tl_background;

/* ------------------------------------------------------------------------
 * Spilling (spill.c)
 * ---------------------------------------------------------------------- */

/* Room in the heap for n buffers: an allocation reserves a place for
 * every live base (sw_buffer_alloc), so that no insertion needs host
 * memory.  A buffer left out of the heap for want of it stayed resident
 * and unspillable for good (found by the fuzzer: a budget never met after
 * an allocation under a host-allocation fault). */
int sw__lru_reserve_locked(sw_device *dev, size_t n);
/* Make base spillable (or not).  Insertion never fails: without host
 * memory to grow the heap, the buffer just stays unspillable. */
void sw__lru_insert_locked(sw_device *dev, sw__buf *b);
void sw__lru_remove_locked(sw_device *dev, sw__buf *b);
/* A buffer's place in the spilling order (lru.c): its last use, a clean
 * copy before a dirty one used at the same time. */
static inline uint64_t sw__lru_key(const sw__buf *b)
{
    bool cold = (b->clean && b->nrestores == 1 && b->clean_uses >= 1) ||
                (b->cold_at != 0 && b->last_use <= b->cold_at);
    /* Cold: clean ones first (free to evict), then by age; the rest by
     * age, clean first among equals. */
    if (cold)
        return ((uint64_t)!b->clean << 62) | b->last_use;
    return (UINT64_C(1) << 63) | (b->last_use * 2 + !b->clean);
}
/* base's key may have fallen (an advice): its place in the heap now. */
void sw__lru_refresh_locked(sw_device *dev, sw__buf *base);
/* A clean copy's use counted (lru.c): when it turns cold its key falls,
 * and its place in the heap is fixed at once. */
void sw__lru_clean_use_locked(sw_device *dev, sw__buf *base);
/* A launch's pin of base ends (a use). */
static inline void sw__note_use(sw_device *dev, sw__buf *base)
{
    if (__builtin_expect(base->clean, 0))
        sw__lru_clean_use_locked(dev, base);
}
/* The least recently used buffer, removed from the heap; NULL when it is
 * empty (stale keys are refreshed on the way). */
sw__buf *sw__lru_pop_locked(sw_device *dev);
/* Spill least-recently-used unpinned buffers until at least need bytes of
 * device memory went to the cache; *spilled says how much did.  SW_OK with
 * *spilled == 0 means nothing was left to spill.  A failed copy out leaves
 * its buffers resident and intact. */
int sw__spill_locked(sw_device *dev, uint64_t need, uint64_t *spilled);
/* Bring a spilled base back (may spill others, never base itself; may
 * release the lock).  The copy in is queued, not waited for: work on the
 * default queue (and on q, when not NULL) runs after it.  On failure the
 * host copy is kept. */
int sw__restore_locked(sw_device *dev, sw__buf *base, sw__queue *q,
                       bool prefetch, uint32_t hold);
/* Undo a restore made with hold by this call: the base is SPILLED again
 * with the host copy it kept, its device memory back where it came from
 * (in stream order), nothing copied.  May release the lock (waits for the
 * copy in, base pinned by the caller). */
void sw__unrestore_locked(sw_device *dev, sw__buf *base);
/* The hold on base ends (the call that restored it succeeded, or another
 * use came first): the host copy goes (now, or when its copy in is seen
 * done).  A no-op without a hold. */
void sw__hold_end_locked(sw_device *dev, sw__buf *base);
/* Evict a clean base (clean.c): its device memory to the cache, its host
 * block its only copy -- or, without one, its extent of the spill file
 * (then it is on_disk).  pre: unpinned, not moving, out of the heap. */
void sw__evict_clean_locked(sw_device *dev, sw__buf *b);
/* base's device copy (or, spilled, its host copy) may be written from now
 * on: a clean copy's host block goes (now, or when a copy still reading it
 * is done), and a kept extent of the spill file with it. */
void sw__dirty_slow_locked(sw_device *dev, sw__buf *base);
static inline void sw__dirty_locked(sw_device *dev, sw__buf *base)
{
    if (__builtin_expect(base->clean | base->disk_kept, 0))
        sw__dirty_slow_locked(dev, base);
}
/* A clean copy that holds its host block (counted in host_copies). */
static inline bool sw__host_clean(const sw__buf *b)
{
    return b->clean && b->host != NULL;
}
/* Give up the clean copies' host blocks until `need` bytes went (host
 * memory is short, or the host budget passed): first those whose bytes
 * the spill file holds too (they stay clean, copies there), then -- unless
 * file_only: the host budget writes those to the spill file instead
 * (disk.c) -- the rest, most recently used first.  Returns the bytes given
 * up.  The blocks go to the staging pool, and with drain the pool to the
 * system. */
uint64_t sw__clean_drop_locked(sw_device *dev, uint64_t need, bool drain,
                               bool file_only);
/* That for one clean copy (its host block, no copy in flight or hold). */
void sw__host_copy_drop_locked(sw_device *dev, sw__buf *b);
int sw__make_resident_locked(sw_device *dev, sw__buf *base);
/* Finish the xfers that are done (never blocks). */
void sw__xfer_poll_locked(sw_device *dev);
/* Every copy in flight waited for and counted: the device is closing. */
void sw__xfer_close_locked(sw_device *dev);
/* Wait (lock released) until base has no copy in flight; SW_ERR_DEVICE if
 * its data was lost by a copy that failed on the device. */
int sw__xfer_wait_locked(sw_device *dev, sw__buf *base);
/* Wait (lock released) until the copy base has in flight now is done,
 * and finish every done copy: base must not be used after (one freed
 * while its copy ran is let go here). */
void sw__xfer_settle_locked(sw_device *dev, sw__buf *base);
/* Make the default queue wait for base's copy in still in flight, if a
 * prefetch left that to its next use (SW__QMASK_RESTORE); clears it. */
int sw__xfer_order_locked(sw_device *dev, sw__buf *base);
/* The last of a release: host block back, slot freed (buffer.c). */
void sw__buf_slot_free_locked(sw_device *dev, sw__buf *base);
/* Wait (lock released) until no spill or restore is moving base. */
void sw__wait_stable_locked(sw_device *dev, sw__buf *base);
#include "core/hostpool.h"
#include "core/disk.h"

/* pthread_cond_wait on dev->moved, keeping the owner fields right. */
void sw__cond_wait_locked(sw_device *dev);
/* Wait for everything queued on the default queue, with the lock released
 * during the wait (re-taken before returning).  The work is done when this
 * returns even if no event could be had (then the whole queue is
 * synchronized); the result is the work's. */
int sw__wait_idle_locked(sw_device *dev);
/* Wait for an event with the lock released; releases the event. */
int sw__wait_event_locked(sw_device *dev, sw__bevent *ev);

/* ------------------------------------------------------------------------
 * Backend wrappers (bops.c): the only calls into a backend, and the one
 * place for lock assertions, statistics and fault injection.  The lock
 * rule of each is stated (and asserted) there: most expect dev's lock
 * held; event_wait, synchronize, open and close expect no device lock.
 * ---------------------------------------------------------------------- */

/* Counts one host allocation against SW_FAULT_HOST_ALLOC without making
 * it (a handle slot: see handle.c); true when it must fail. */
bool sw__host_fault(void);
/* SW_FAULT_HOST_ALLOC on a thread holding no device lock (dev NULL). */
void sw__arm_nodev_fault(uint64_t nth, bool persistent);

/* The table has every member the core needs (version >= 2). */
/* The backend's kind, as in specs ("sim", "cuda", ...). */
const char *sw__b_name(const sw__backend_ops *ops);
bool sw__b_usable(const sw__backend_ops *ops);
/* Whether the table can be a backend here (its version, name and required
 * ops); the message says why not. */
int sw__b_check_table(const sw__backend_ops *ops);
int sw__b_device_count(const sw__backend_ops *ops, int *count, char *why,
                       size_t why_len);
int sw__b_open(const sw__backend_ops *ops, int index, sw__bdev **out,
               sw__device_props *props);
void sw__b_close(const sw__backend_ops *ops, sw__bdev *b);
sw__bqueue *sw__b_default_queue(sw_device *dev);
int sw__b_mem_info(sw_device *dev, uint64_t *free, uint64_t *total,
                   int *known);
int sw__b_alloc(sw_device *dev, size_t size, uintptr_t *mem);
/* Stream-ordered on the default queue. */
int sw__b_free(sw_device *dev, uintptr_t mem, size_t size);
int sw__b_queue_create(sw_device *dev, sw__bqueue **out);
/* pre: the queue's work has completed. */
void sw__b_queue_destroy(sw_device *dev, sw__bqueue *q);
/* Transfers on the default queue; copies and fills also on any queue. */
int sw__b_write(sw_device *dev, uintptr_t dst, size_t off, const void *src,
                size_t n);
int sw__b_read(sw_device *dev, void *dst, uintptr_t src, size_t off,
               size_t n);
int sw__b_copy(sw_device *dev, uintptr_t dst, size_t doff, uintptr_t src,
               size_t soff, size_t n);
int sw__b_copy_q(sw_device *dev, sw__bqueue *q, uintptr_t dst, size_t doff,
                 uintptr_t src, size_t soff, size_t n);
int sw__b_fill(sw_device *dev, uintptr_t dst, size_t off, size_t n,
               const void *pattern, size_t psize);
int sw__b_fill_q(sw_device *dev, sw__bqueue *q, uintptr_t dst, size_t off,
                 size_t n, const void *pattern, size_t psize);
int sw__b_launch(sw_device *dev, sw__bqueue *q, const sw_kernel_args *args);
int sw__b_event_record(sw_device *dev, sw__bevent **ev);
int sw__b_event_record_q(sw_device *dev, sw__bqueue *q, sw__bevent **ev);
int sw__b_event_query(const sw__backend_ops *ops, sw__bevent *ev, int *done);
/* Device seconds between two complete events of a queue; SW_ERR_UNSUPPORTED
 * without the backend's event_elapsed. */
int sw__b_event_elapsed(const sw__backend_ops *ops, sw__bevent *from,
                        sw__bevent *to, double *seconds);
/* An event to time copies from (see sw__xfer.start): NULL when the
 * backend cannot time events, or no event can be had (nothing fails). */
sw__bevent *sw__b_timing_start(sw_device *dev, sw__bqueue *q);
int sw__b_event_wait(const sw__backend_ops *ops, sw__bevent *ev);
void sw__b_event_release(const sw__backend_ops *ops, sw__bevent *ev);
int sw__b_synchronize(const sw__backend_ops *ops, sw__bqueue *q);
/* q waits (on the device) for everything queued on `on` so far. */
int sw__b_queue_wait(sw_device *dev, sw__bqueue *q, sw__bqueue *on);
/* Version 3 (each does without when the backend has none). */
sw__bqueue *sw__b_copy_queue(sw_device *dev); /* NULL: none */
int sw__b_read_q(sw_device *dev, sw__bqueue *q, void *dst, uintptr_t src,
                 size_t off, size_t n);
int sw__b_write_q(sw_device *dev, sw__bqueue *q, uintptr_t dst, size_t off,
                  const void *src, size_t n);
/* q waits (on the device) for ev. */
int sw__b_wait_event(sw_device *dev, sw__bqueue *q, sw__bevent *ev);
/* 1 when nothing is queued on q; 0 when busy or the backend cannot say. */
int sw__b_queue_idle(sw_device *dev, sw__bqueue *q);
/* The same, but `unknown` when the backend has no queue_idle. */
int sw__b_queue_idle_or(sw_device *dev, sw__bqueue *q, int unknown);
/* Version 5: native handles; SW_ERR_UNSUPPORTED (with the message) when
 * the backend has none. */
int sw__b_queue_native(sw_device *dev, sw__bqueue *q, uintptr_t *handle);
int sw__b_queue_wrap(sw_device *dev, uintptr_t handle, sw__bqueue **out);
int sw__b_native_context(sw_device *dev, uintptr_t *context);
/* Page-locked host memory; SW_ERR_UNSUPPORTED when the backend has none. */
int sw__b_host_alloc(sw_device *dev, size_t size, void **out);
void sw__b_host_free(sw_device *dev, void *p, size_t size);

/* ------------------------------------------------------------------------
 * Memory history (trace.c)
 * ---------------------------------------------------------------------- */

void sw__trace_emit(sw_device *dev, sw_trace_kind kind, const sw__buf *b,
                    uint64_t size, uint32_t queue, uint64_t aux);
/* An event with the interval its work ran in (dev_begin_ns, dev_end_ns). */
void sw__trace_emit_timed(sw_device *dev, sw_trace_kind kind,
                          const sw__buf *b, uint64_t size, uint64_t aux,
                          uint64_t begin_ns, uint64_t end_ns);
/* While tracing, record the anchor of device time on q (the copy queue)
 * if there is none yet and q is idle now. */
void sw__trace_anchor_locked(sw_device *dev, sw__bqueue *q);
/* The device times of x's copies, when the anchor they were queued under
 * still stands and the backend can say; else both 0. */
void sw__trace_xfer_times_locked(sw_device *dev, const sw__xfer *x,
                                 uint64_t *begin_ns, uint64_t *end_ns);
/* A copy of base on x was superseded while the history was on: its END
 * waits for x to be seen done (sw__trace_xfer_ends_locked, when the last
 * reference to x goes); without host memory for the note it is left
 * out. */
void sw__trace_xfer_note_end_locked(sw_device *dev, sw__xfer *x,
                                    const sw__buf *base);
/* Those ENDs, with x's device times, if x was seen done and the history
 * is on; the notes go either way. */
void sw__trace_xfer_ends_locked(sw_device *dev, sw__xfer *x);
/* CLOCK_MONOTONIC in nanoseconds (the history's clock). */
uint64_t sw__now_ns(void);
/* An OOM event, keeping its report (the thread's message). */
void sw__trace_oom(sw_device *dev, uint64_t size, const char *tag,
                   const char *report);
/* Stop and forget everything (device close). */
void sw__trace_close_locked(sw_device *dev);

/* Record an event when the history is on: one predictable branch off. */
#define SW__TRACE(dev, kind, b, size, queue, aux)                             \
    do {                                                                      \
        if (__builtin_expect((dev)->tracing, 0))                              \
            sw__trace_emit((dev), (kind), (b), (size), (queue), (aux));       \
    } while (0)

/* SPILLWAY_STATS: start the exporter thread once (export.c). */
void sw__export_start(void);
/* The i-th device slot of the registry (open or not), NULL past the end. */
sw_device *sw__device_at(size_t i);

/* The snapshot and figures, lock held (stats.c). */
void sw__snapshot_locked(sw_device *dev, sw_buffer_info *out, size_t cap,
                         size_t *count);
void sw__memory_info_locked(sw_device *dev, sw_memory_info *out);

/* ------------------------------------------------------------------------
 * Messages
 * ---------------------------------------------------------------------- */

/* Append to the calling thread's message (after sw__errorf). */
void sw__error_append(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

#endif /* SW_CORE_INTERNAL_H */
