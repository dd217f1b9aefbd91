/*
 * model.h -- the model-based fuzzer's engine: a shadow of everything the
 * public API promises, driven by a stream of bytes.
 *
 * One *engine* runs on one thread over its own objects: handles (buffers,
 * views, wrapped buffers), the allocations behind them (with a shadow copy
 * of their bytes), leases, launch records, queues, events, host tasks,
 * order records, peak scopes, pressure callbacks.  Each step decodes one
 * public-API operation from the byte source, runs it, applies what it
 * must have done to the shadow, and checks (check.c):
 *  - the bytes of every live handle against the shadow;
 *  - the accounting of every device against the model (the invariants are
 *    derived and stated in check.c);
 *  - that a failed call changed nothing and set its out-parameters to
 *    NULL/0, and that its code is the one the header names.
 *
 * A *world* is what engines share: the devices, the pressure callbacks and
 * their victims, the shared read-only buffers of the threaded variant, and
 * the statistics.  The fuzzer (fuzz_main.c) runs one engine per input, the
 * threaded fuzzer (fuzz_threads.c) and the soak (tests/soak/) several at
 * once, each checked on its own and the device as a whole at quiescent
 * points.
 *
 * Nothing here reaches inside the library: only include/spillway.h.
 */
#ifndef SW_FUZZ_MODEL_H
#define SW_FUZZ_MODEL_H

#include "spillway.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------
 * Known divergences.  Each names a behaviour of the library that the
 * fuzzer found to differ from include/spillway.h; set to 1, the fuzzer
 * tolerates it (and counts it), so that the suites stay green until the
 * library is fixed.  docs/testing.md lists them.
 * ---------------------------------------------------------------------- */

/* (None at present.  Fixed: FZ_KNOWN_OUTPARAMS_ON_NULL_ARG, out-parameters
 * of a call refused for a NULL argument left as they were; now the test
 * null_argument_clears_outparams in tests/c.) */

/* ------------------------------------------------------------------------
 * Limits of one engine
 * ---------------------------------------------------------------------- */

#define FZ_MAX_DEV 2      /* devices an engine uses */
#define FZ_NBUF 14        /* handles */
#define FZ_NALLOC 24      /* allocations (they outlive handles) */
#define FZ_NLEASE 6
#define FZ_NLAUNCH 3      /* outstanding sw_launch_begin records */
#define FZ_LAUNCH_ARGS 4
#define FZ_NQUEUE 4       /* per device: several using the same buffers */
#define FZ_NEVENT 8
#define FZ_NTASK 8        /* host tasks not yet known complete */
#define FZ_NORDER 2
#define FZ_NSCOPE 4
#define FZ_NDEAD 8        /* recently dead handles, for misuse */
#define FZ_MAX_STEPS 512  /* per input */
#define FZ_MAX_BUF (256u * 1024u) /* largest buffer the engine makes */
#define FZ_TRACE_RING 48
#define FZ_NCALLBACK 2    /* per device, registered by the engines */
#define FZ_NVICTIM 8      /* per callback */
#define FZ_NSHARED 3      /* shared read-only buffers (threaded) */

/* ------------------------------------------------------------------------
 * The byte source: an input (ends) or a PRNG stream (never ends)
 * ---------------------------------------------------------------------- */

typedef struct fz_src {
    const uint8_t *data;
    size_t len, pos;
    uint64_t rng; /* prng mode when data == NULL */
    bool done;    /* input mode: ran out */
} fz_src;

void fz_src_input(fz_src *s, const uint8_t *data, size_t len);
void fz_src_prng(fz_src *s, uint64_t seed);
uint8_t fz_u8(fz_src *s);
uint32_t fz_u32(fz_src *s);
uint64_t fz_u64(fz_src *s);
/* Uniform-ish in [0, n); 0 when n == 0. */
size_t fz_below(fz_src *s, size_t n);
uint64_t fz_splitmix(uint64_t *state);

/* ------------------------------------------------------------------------
 * The world
 * ---------------------------------------------------------------------- */

typedef struct fz_world fz_world;
typedef struct fz_engine fz_engine;

/* A donated handle: ownership moved to a pressure callback, which frees
 * it when it runs.  The callback logs each free. */
typedef struct fz_victim {
    sw_buffer *h;
    fz_engine *owner; /* to log the free to */
    int slot;         /* the owner's handle slot */
} fz_victim;

typedef enum fz_cb_mode {
    FZ_CB_FREE_ONE = 0, /* free one victim, note a GC run, return 1 */
    FZ_CB_FREE_ALL,     /* free every victim */
    FZ_CB_NOTHING,      /* free nothing, return 0 */
    FZ_CB_NESTED,       /* allocate and free inside, then free one */
    FZ_CB_SELF_REMOVE,  /* free one and remove itself */
    FZ_CB_NMODES
} fz_cb_mode;

typedef struct fz_callback {
    fz_world *w;
    int devi;
    int id; /* -1: not registered (under mu) */
    fz_cb_mode mode;
    fz_engine *owner; /* the engine that registered it */
    pthread_mutex_t mu; /* a leaf: never held across a spillway call */
    fz_victim victims[FZ_NVICTIM];
    int nvictims;
    /* The log, read by the engines between steps (under mu): victims
     * freed (single engine), and monotone counts. */
    fz_victim freed[FZ_NVICTIM];
    int nfreed;
    uint64_t calls, gc_notes, nested_ok, nested_fail;
} fz_callback;

typedef struct fz_shared {
    sw_buffer *h;
    int devi;
    size_t size;
    unsigned char *bytes;
} fz_shared;

typedef struct fz_stats {
    atomic_uint_fast64_t inputs, steps, checks, ops_ok, ops_failed;
    atomic_uint_fast64_t skipped; /* decoded steps with nothing to do */
    atomic_uint_fast64_t errors[16]; /* by -code */
    atomic_uint_fast64_t nan_adopted, sum_adopted, parked_resolved;
    atomic_uint_fast64_t spills_seen, restores_seen, faults_armed;
    atomic_uint_fast64_t cb_calls, misuse;
    atomic_uint_fast64_t known[4]; /* tolerated known divergences */
    atomic_uint_fast64_t peak; /* highest in_use seen */
    atomic_uint_fast64_t cleared; /* new buffers found cleared */
} fz_stats;

struct fz_world {
    int ndev;
    sw_device *dev[FZ_MAX_DEV];
    char spec[FZ_MAX_DEV][32];
    bool is_sim[FZ_MAX_DEV];
    /* The host backend (docs/host.md): accounting only, never spills; a
     * budget below what is held stays unmet, allocations past it fail. */
    bool no_spill[FZ_MAX_DEV];
    bool host_addressable[FZ_MAX_DEV];
    bool threaded; /* several engines at once: per-engine checks only */
    bool faults;   /* engines may inject device faults */
    /* Device faults are armed from outside the engines at any time (the
     * soak's --faults): any call may fail for want of memory, and the
     * model's own reads and waits retry until the fault is gone. */
    bool outside_faults;
    /* sw_set_clear_new, for the whole input (fz_world_clear_new): every
     * new buffer of the device must read as zeros. */
    bool clear_new[FZ_MAX_DEV];
    fz_callback cb[FZ_MAX_DEV][FZ_NCALLBACK];
    fz_shared shared[FZ_NSHARED];
    int nshared;
    fz_stats stats;
    /* What a divergence does after its report (default: abort()). */
    void (*on_fail)(fz_world *w);
    atomic_int failed;
    pthread_mutex_t report_mu;
    int verbose; /* FUZZ_TRACE: print every step */
};

/* Open the devices named (comma-separated specs), register the engine's
 * callbacks' storage; 0 or an SW_ERR code with a message on stderr. */
int fz_world_open(fz_world *w, const char *specs, bool threaded);
/* Every callback removed, every victim freed, budgets and faults reset,
 * new memory no longer cleared. */
void fz_world_reset(fz_world *w);
/* Turn sw_set_clear_new on for some devices, for this input, as a hash of
 * its bytes says (a quarter of the inputs per device): the inputs' own
 * bytes keep their meaning, and a replay does the same. */
void fz_world_clear_new(fz_world *w, const uint8_t *data, size_t size);
/* Free the victims no callback has freed (threaded: their donors have
 * forgotten them); the callbacks stay. */
void fz_world_drain_victims(fz_world *w);
/* Check every device is empty, then close (and, with reopen, open again):
 * a device that cannot close (SW_ERR_BUSY) leaked something. */
void fz_world_close(fz_world *w, bool reopen);
/* Shared read-only buffers for the threaded variant. */
void fz_world_make_shared(fz_world *w, fz_src *src);
void fz_world_free_shared(fz_world *w);
/* Print the statistics; `what` names the run. */
void fz_world_print_stats(fz_world *w, const char *what, double seconds);

/* A divergence: print it (with the engine's recent steps) and stop. */
void fz_fail(fz_world *w, fz_engine *e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ------------------------------------------------------------------------
 * The engine's objects
 * ---------------------------------------------------------------------- */

/* An allocation: a base buffer (owned, or external for sw_buffer_wrap),
 * alive until its handle, views, pins and leases are all gone. */
typedef struct fz_alloc {
    bool live;
    int devi;
    bool external;
    int ext_of;     /* external: the allocation whose memory it wraps */
    size_t ext_off; /* ... from this byte of it */
    int ext_lease;  /* ... through this lease (which must outlive it) */
    size_t size, rounded;
    unsigned char *shadow; /* owned only */
    bool base_handle; /* its own handle is live */
    int views;        /* live view handles */
    int pins;         /* launch-record pins */
    int leases;
    int state;        /* SW_RESIDENT / SW_SPILLED at the last check */
    bool readonly;    /* a shared buffer's view (threaded) */
    int shared;       /* index into world->shared, or -1 */
    uint64_t id;      /* sw_buffer_id: its entry in sw_memory_snapshot */
} fz_alloc;

/* A handle the engine holds. */
typedef struct fz_buf {
    bool live;
    sw_buffer *h;
    int alloc;
    size_t off, size; /* window in the allocation's bytes */
    bool view;
    int refs;       /* references the engine holds */
    int task_refs;  /* references handed to host tasks, not yet dropped */
    int launch_uses;/* launch records that name it */
    bool donated;   /* handed to a pressure callback */
    fz_callback *donated_to;
    char tag[SW_TAG_MAX + 1];
} fz_buf;

typedef struct fz_lease {
    bool live;
    sw_lease *l;
    int alloc;
    sw_devmem mem;
    int buf_off; /* the exposed handle's offset in the allocation */
    int wraps;   /* live wrapped allocations over it */
} fz_lease;

typedef struct fz_launch {
    bool live;
    int devi;
    /* How it was pinned: FZ_PIN_DEFAULT (sw_launch_begin), FZ_PIN_HOST
     * (sw_launch_begin_q(NULL)), or a queue index (sw_launch_begin_q on
     * it, whose handle qh the launch holds a reference of its own to). */
    int mode;
    sw_queue *qh;
    int begin_step;
    int n;
    int slot[FZ_LAUNCH_ARGS];
    sw_buffer *h[FZ_LAUNCH_ARGS];
    sw_devmem ptr[FZ_LAUNCH_ARGS];
    /* Pinned with access modes (sw_launch_begin_access, _q_access): a
     * kernel writes only an argument marked SW_ACCESS_WRITE, so that a
     * write the core takes for a read would show as a lost write (a clean
     * copy evicted over it) at the next check. */
    bool has_access;
    unsigned char access[FZ_LAUNCH_ARGS];
} fz_launch;

typedef struct fz_queue {
    bool live;       /* the engine holds a reference */
    sw_queue *q;
    int devi;
    int refs;        /* the engine's */
    int task_refs;   /* handed to host tasks */
} fz_queue;

typedef struct fz_event {
    bool live;
    sw_event *ev;
    int refs;
    bool waited; /* known complete */
    bool shared; /* an order record or a host task holds a reference too:
                  * its handle may outlive ours */
} fz_event;

typedef struct fz_task {
    atomic_int ran;
    sw_buffer *drop;  /* a reference the task frees */
    int drop_slot;
    sw_queue *drop_q; /* a queue reference the task releases */
    int drop_qi;
    int devi;
} fz_task;

typedef struct fz_scope {
    bool live;
    sw_peak_scope *s;
    int devi;
    uint64_t begin_in_use;
    uint64_t min_peak;   /* the largest in_use it must have seen */
    uint64_t last_peak;  /* what it said last (never decreases) */
    bool reset_since;    /* sw_reset_peak since it began */
    uint64_t seq;        /* begin order */
} fz_scope;

/* What the engine expects of a device's accounting. */
typedef struct fz_devmodel {
    uint64_t budget;
    bool budget_enforced; /* an obtain has run under this budget */
    uint64_t restores_at_budget;
    uint64_t allocs, frees;  /* expected counter values */
    uint64_t gc_runs;
    bool counters_known;     /* single engine: exact counters */
    sw_memory_info last;     /* at the last check */
    bool have_last;
    bool peak_reset;         /* sw_reset_peak since the last check */
    bool counters_reset;     /* sw_reset_counters since the last check */
    uint32_t dtypes;         /* sw_device_dtypes */
    uint64_t peak_floor;     /* peak may not drop below this */
} fz_devmodel;

/* What a step expects of its call's result. */
typedef enum fz_expect {
    FZ_OK,         /* must succeed */
    FZ_OK_OR_RES,  /* may fail for want of memory: OOM, HOST_OOM, DEVICE */
    FZ_ERR,        /* must fail with `code`, changing nothing at all */
} fz_expect;

/* What the devices and the engine's allocations were at one moment. */
typedef struct fz_snapshot {
    sw_memory_info info[FZ_MAX_DEV];
    int state[FZ_NALLOC];
} fz_snapshot;

struct fz_engine {
    fz_world *w;
    int index; /* thread number */
    fz_src *src;
    fz_buf buf[FZ_NBUF];
    fz_alloc alloc[FZ_NALLOC];
    fz_lease lease[FZ_NLEASE];
    fz_launch launch[FZ_NLAUNCH];
    fz_queue queue[FZ_MAX_DEV][FZ_NQUEUE];
    fz_event event[FZ_NEVENT];
    fz_task *task[FZ_NTASK];
    sw_order *order[FZ_NORDER];
    int order_added[FZ_NORDER];
    fz_scope scope[FZ_NSCOPE];
    fz_devmodel dm[FZ_MAX_DEV];
    /* Recently dead handles of each kind (misuse: use after free). */
    sw_buffer *dead_buf[FZ_NDEAD];
    sw_lease *dead_lease[FZ_NDEAD];
    sw_queue *dead_queue[FZ_NDEAD];
    sw_event *dead_event[FZ_NDEAD];
    sw_peak_scope *dead_scope[FZ_NDEAD];
    unsigned dead_n[5];
    /* A slot (plus one) and a device (plus one) the next fz_pick_buf and
     * fz_pick_dev take when they can: a compound step aims its second
     * call at its first's buffer.  0: none. */
    int prefer_buf1, prefer_dev1;
    /* 1 + the allocation a prefetch from the disk tier is reading back in
     * the background (ops_lease.c) while the step's second call runs: it
     * may come back meanwhile, by the prefetch's doing (0: none). */
    int bg_prefetch_alloc1;
    /* A fault armed for the next step only. */
    bool fault_armed;
    int fault_dev; /* -1: the thread's no-device fault */
    sw_fault_op fault_op;
    /* The step being run, for reports. */
    int step;
    char what[192];
    char ring[FZ_TRACE_RING][224];
    unsigned ring_n;
    unsigned char *tmp; /* FZ_MAX_BUF scratch */
    uint64_t tag_counter;
    uint64_t scope_seq;
    /* Burst: steps left whose check skips the byte reads (which wait for
     * every queue), so that work stays in flight across steps; and, per
     * allocation, the queue (devi * FZ_NQUEUE + q + 1) that last used it
     * in the burst, so that the model orders its own data across queues
     * as the header asks of a caller. */
    int burst_left;
    uint8_t lastq[FZ_NALLOC];
    bool in_flight; /* the last check was light: work may be running */
    /* This step: the allocations it used on the device (bit a), and
     * whether it may have spilled (it obtained device memory: an
     * allocation, or a restore of a spilled operand).  Only the device
     * brings a buffer back, and a budget is enforced lazily: a buffer
     * spills only when memory is obtained. */
    uint32_t dev_used;
    bool may_spill;
    /* Single engine, no outside faults: the devices and allocations just
     * before the step's first call, and the pressure callbacks' calls
     * then.  A resource failure (OOM, HOST_OOM, DEVICE) is judged against
     * it (fz_result); valid until a call succeeds or fails on the way,
     * either of which may have moved buffers. */
    fz_snapshot step_before;
    bool step_before_valid;
    uint64_t step_before_cb_calls;
    /* Callback logs already applied (single engine). */
    uint64_t cb_seen_gc[FZ_MAX_DEV][FZ_NCALLBACK];
    uint64_t cb_seen_nested[FZ_MAX_DEV][FZ_NCALLBACK];
};

/* ------------------------------------------------------------------------
 * Engine API (model.c, ops*.c)
 * ---------------------------------------------------------------------- */

void fz_engine_init(fz_engine *e, fz_world *w, int index);
/* Decode and run one step from src, then check.  false when src ran out
 * (input mode) or FZ_MAX_STEPS was reached (max_steps > 0). */
bool fz_engine_step(fz_engine *e, fz_src *src);
/* Wait for host tasks, end launches, release and free everything, and
 * check the engine's objects are all gone. */
void fz_engine_cleanup(fz_engine *e);
void fz_engine_destroy(fz_engine *e);
/* Take back the engine's donated handles that no callback freed (the
 * world frees them): after this the engine's model is exact again. */
void fz_engine_reclaim_victims(fz_engine *e);
/* Bytes the engine's live allocations hold on devi: resident, spilled. */
void fz_engine_footprint(fz_engine *e, int devi, uint64_t *resident,
                         uint64_t *spilled, bool query_states);

/* ------------------------------------------------------------------------
 * Internal to the engine (shared between its files)
 * ---------------------------------------------------------------------- */

/* Step log (the ring printed with a divergence). */
void fz_note(fz_engine *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Add to this step's note (the slot a new object got, say). */
void fz_note_more(fz_engine *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Model objects. */
int fz_pick_buf(fz_engine *e, fz_src *s, bool writable);
int fz_pick_buf_dev(fz_engine *e, fz_src *s, int devi, bool writable);
int fz_free_buf_slot(fz_engine *e);
int fz_free_alloc_slot(fz_engine *e);
int fz_new_alloc(fz_engine *e, int devi, size_t size, bool external);
int fz_new_buf(fz_engine *e, sw_buffer *h, int alloc, size_t off,
               size_t size, bool view, const char *tag);
/* The engine drops one reference to handle slot i (the library did). */
void fz_model_free(fz_engine *e, int i);
/* An allocation may have lost its last holder: release it in the model. */
void fz_model_maybe_release(fz_engine *e, int a);
/* Pointer to byte `off` of allocation a's shadow (follows wraps). */
unsigned char *fz_bytes(fz_engine *e, int a, size_t off);
/* The owned allocation and offset byte `off` of a lives in. */
int fz_root(fz_engine *e, int a, size_t off, size_t *root_off);
/* Do [a1+o1, +n1) and [a2+o2, +n2) share a byte of memory? */
bool fz_overlap(fz_engine *e, int a1, size_t o1, size_t n1, int a2,
                size_t o2, size_t n2);
/* The byte offset of a handle's window from its device allocation's start
 * (what alignment is checked against). */
size_t fz_devoff(fz_engine *e, int a, size_t off);
/* Memory reached through more than one base: a wrapped (external)
 * allocation, or an owned one that has wraps. */
bool fz_aliased(fz_engine *e, int a);
/* After work on queue q (q >= 0) of devi that used these handles: the
 * core orders a queue's work on a base against later uses of that base,
 * but it cannot know that a wrapped buffer and the allocation it wraps
 * are the same memory; ordering across such aliases is the caller's (the
 * header: "ordering between queues for your own data is yours"), so the
 * model waits for q. */
void fz_queue_done(fz_engine *e, int devi, int q, const int *slots, int n);
void fz_remember_dead(fz_engine *e, int kind, void *h);
/* Disarm the step's fault (the model's own calls must not meet it). */
void fz_disarm(fz_engine *e);
/* sw_queue_synchronize for the model's own ordering (disarms a fault that
 * makes it fail, and waits again). */
int fz_sync_queue(fz_engine *e, sw_queue *q);
/* The same for sw_device_synchronize and sw_buffer_read. */
int fz_sync_device(fz_engine *e, sw_device *dev);
int fz_read(fz_engine *e, sw_buffer *h, size_t off, void *dst, size_t n);
void *fz_pick_dead(fz_engine *e, fz_src *s, int kind);
int fz_pick_dev(fz_engine *e, fz_src *s);
int fz_pick_queue(fz_engine *e, fz_src *s, int devi);
void fz_wait_task(fz_engine *e, int t);
void fz_wait_tasks_of_buf(fz_engine *e, int i);
void fz_poll_tasks(fz_engine *e);
void fz_process_callbacks(fz_engine *e);

/* Checks (check.c). */
void fz_snapshot_take(fz_engine *e, fz_snapshot *s);
/* Judge a call's result against what the step expected; on an expected
 * failure, check it changed nothing (strict for argument errors).  Returns
 * true when the call succeeded. */
bool fz_result(fz_engine *e, const char *call, int rc, fz_expect ex,
               int code, const fz_snapshot *before);
/* Everything after a step. */
void fz_check_all(fz_engine *e);
/* The same without reading the bytes back (in a burst). */
void fz_check_light(fz_engine *e);
/* Before work on queue q (-1: the default queue) of devi that uses these
 * handles: wait for another queue that used them in this burst (reading
 * or writing: one of them may write), as a caller must. */
void fz_order_before(fz_engine *e, int devi, int q, const int *slots, int n);
/* The same before a pin on queue q (sw_launch_begin_q), which the core
 * orders after every queue's work on its buffers: only what it cannot
 * see (aliased memory, raw launches) is waited for. */
void fz_order_before_pin(fz_engine *e, int devi, int q, const int *slots,
                         int n);
#define FZ_PIN_DEFAULT (-1)
#define FZ_PIN_HOST (-2)
/* End a launch record's pins as it was begun (step.c's cleanup too). */
int fz_launch_end(fz_engine *e, fz_launch *ln);
/* q for fz_order_before of a raw launch (any queue): wait for every other
 * queue that used them. */
#define FZ_RAW_LAUNCH (-2)
/* lastq of memory a raw launch on the default queue used: the core does
 * not know (it orders buffers, and a raw launch takes device memory), so
 * a queue that used the buffer before would not wait for it. */
#define FZ_LASTQ_RAW 255
/* After it: remember which queue used them.  Only for work that did
 * something: a call with nothing to do (0 bytes or elements) queues
 * nothing and orders nothing, so another queue's work on the buffers is
 * still unordered (found by the soak: a 0-byte copy on the default queue
 * made the model forget a queue's scale, and a raw launch raced it). */
void fz_order_after(fz_engine *e, int devi, int q, const int *slots, int n);
/* Before releasing queue q: its work on our buffers must be waited for
 * (nothing else would order it). */
void fz_order_release(fz_engine *e, int devi, int q);
/* Read a handle's window and compare it with the shadow. */
void fz_check_bytes(fz_engine *e, int i);
/* Read back float elements after a kernel: where both the shadow and the
 * device hold a NaN, take the device's bits (IEEE 754 leaves the payload
 * of a NaN result open). */
void fz_adopt_nans(fz_engine *e, int i, size_t off, size_t n, sw_dtype d);
/* Expected devices of buffers: every operand's state after a launch. */
void fz_expect_resident(fz_engine *e, int i, const char *why);
/* Record that an allocation or restore just succeeded on devi (the budget
 * is enforced from then on). */
void fz_note_obtain(fz_engine *e, int devi);
int fz_query_state(fz_engine *e, int a);

/* Op families (ops_*.c): each returns false when it had nothing to do. */
bool fz_op_buffer(fz_engine *e, fz_src *s, unsigned k);
bool fz_op_kernel(fz_engine *e, fz_src *s, unsigned k);
bool fz_op_lease(fz_engine *e, fz_src *s, unsigned k);
bool fz_op_launch(fz_engine *e, fz_src *s, unsigned k);
bool fz_op_account(fz_engine *e, fz_src *s, unsigned k);
bool fz_op_queue(fz_engine *e, fz_src *s, unsigned k);
bool fz_op_pressure(fz_engine *e, fz_src *s, unsigned k);
bool fz_op_fault(fz_engine *e, fz_src *s, unsigned k);
bool fz_op_misuse(fz_engine *e, fz_src *s, unsigned k);

/* FZ_OK when every handle's allocation is resident (nothing to restore),
 * else FZ_OK_OR_RES (ops_buffer.c). */
fz_expect fz_expect_for(fz_engine *e, const int *slots, int n);

/* A devmem the library gave for handle i is the allocation's memory at
 * the handle's offset (and, with bytes, on a host-addressable device,
 * holds the shadow's bytes: after sw_buffer_device_ptr and
 * sw_buffer_expose, which wait for a restore's copy; sw_launch_begin
 * does not, its launches being queued behind it) (ops_lease.c). */
void fz_check_devmem(fz_engine *e, int i, sw_devmem m, const char *what,
                     bool bytes);
/* The shadow's element arithmetic on every dtype (elements.c): the
 * built-in kernels, a scalar as one element, float16/bfloat16, NaN parts,
 * and the check of a sum (8 bytes, 16 for complex; rewritten with the
 * bits to keep). */
void fz_apply_kernel(sw_kernel k, sw_dtype d, size_t n, unsigned char *out,
                     const unsigned char *a, const unsigned char *b,
                     sw_scalar alpha);
int fz_check_sum(fz_engine *e, sw_dtype d, const unsigned char *a, size_t n,
                 int devi, unsigned char got[16]);
size_t fz_element_bytes(sw_dtype d, sw_scalar v, unsigned char out[16]);
float fz_f16_to_float(uint16_t h);
uint16_t fz_f16_from_double(double x);
float fz_bf16_to_float(uint16_t b);
uint16_t fz_bf16_from_double(double x);
/* Bytes of one float part of dtype d (a complex's half; 0: no floats). */
size_t fz_float_part(sw_dtype d);
bool fz_part_is_nan(sw_dtype d, const unsigned char *p);
/* Any of the SW_DTYPE_COUNT dtypes, and a scalar of its kind (ops_kernel.c). */
sw_dtype fz_draw_dtype(fz_src *s);
sw_scalar fz_draw_scalar(fz_src *s, sw_dtype d);

/* A known divergence (index k of FZ_KNOWN_*): tolerated and counted when
 * its switch is 1, reported when 0. */
void fz_known(fz_engine *e, int k, int tolerated, const char *what);

/* Sizes and values the ops draw. */
size_t fz_draw_size(fz_src *s);
void fz_draw_bytes(fz_src *s, unsigned char *dst, size_t n, sw_dtype hint);
const char *fz_err(int rc);

#endif /* SW_FUZZ_MODEL_H */
