/*
 * sim.c -- the simulated device: the default backend, no hardware needed.
 *
 * The divisions of this file, in order:
 *   - Types: commands, events, queues, devices.
 *   - Checking commands: every operand inside a live allocation (the proof
 *     itself is sim_arena.c's), or a report and abort().
 *   - Kernels: their operands proven live, then run (the kernels
 *     themselves, every dtype, are sim_kernels.c's).
 *   - Events.
 *   - Queues: their FIFOs, the pool of worker threads that runs them,
 *     enqueueing, queue lifetime.
 *   - fork(): draining and re-arming the workers around a fork.
 *   - Configuration from the environment.
 *   - Operations (the ops table's functions): devices and memory; queues
 *     and work; events and waiting.
 *   - The ops table.
 *
 * A device is one fixed-size arena of host memory (mmap'd, MAP_NORESERVE,
 * so an unused arena costs address space only) carved by a real allocator
 * (sim_arena.c), so that fragmentation, out-of-memory and device_free
 * behave as on a GPU.  Device addresses are host addresses.  Each queue is
 * a FIFO of commands run by a pool of worker threads shared by all queues
 * (one worker per queue at a time, so in order); all device work,
 * transfers included, runs there, so it is as asynchronous as on real
 * hardware and ordering bugs show up.  (The one shortcut: small work -- a
 * free, a kernel or a transfer of at most 4 KiB -- on a queue with nothing
 * pending runs at once on the caller, which stream order allows;
 * SPILLWAY_SIM_INLINE=0 turns it off for all but frees.)
 * Besides the default queue each device has a copy queue (contract v3),
 * so that spills and restores run beside kernels; SPILLWAY_SIM_COPY_QUEUE=0
 * turns it off.
 *
 * The sim doubles as a checker: before a command touches device memory the
 * worker proves that every byte range lies inside one live block, and
 * otherwise reports what the command, operand and range were and what is
 * there, then aborts.  Freed memory is poisoned with 0xDB.
 *
 * Configuration: SPILLWAY_SIM_MEMORY (capacity per device, default 1G) and
 * SPILLWAY_SIM_DEVICES (count, default 1, at most 64).
 *
 * SPILLWAY_SIM_JITTER=N (microseconds, default 0) makes a worker pause a
 * random 0..N us before each command it runs, and small work is then
 * never inline: a test harness's way to shake out orderings that the
 * host's usual timing never produces (a copy running late, an event
 * completing after the host moved on).
 *
 * Threads and locks.  The core calls us with its device mutex held, except
 * for the wait operations.  Our own locks are leaves, never nested in each
 * other except in the fork handlers (registry -> queues -> arenas):
 *  - arena.mu: the block list and both trees; held only for tree work,
 *    never while waiting or while touching block contents;
 *  - queue.mu: the command FIFO, the submitted/completed counters and
 *    `scheduled`; sim__pool.mu nests inside it (scheduling a queue);
 *  - sim__pool.mu: the pool's ready list and worker counts;
 *  - event.mu: one event's state;
 *  - sim__registry_mu: the lists of open devices and their queues, which
 *    only the fork handlers walk.
 */
#include "backend.h"
#include "elements.h"
#include "sim_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SIM__MAX_DEVICES 64
#define SIM__DEFAULT_MEMORY (UINT64_C(1) << 30)
#define SIM__MIN_MEMORY (UINT64_C(1) << 20)
#define SIM__MAX_MEMORY (UINT64_C(1) << 40)
/* Frees of blocks below SIM__LAZY_FREE_MAX are cheap: on an idle queue
 * they run at once on the caller, and queued behind other work they do not
 * wake a sleeping worker (a futex wake and a context switch cost ten times
 * the free itself); the next other command, a waiter or the
 * SIM__LAZY_FREES-th pending free does.  Bigger ones always go through the
 * worker (poisoning them is real work) and wake it at once, so that their
 * memory comes back soon. */
#define SIM__LAZY_FREES 64
#define SIM__LAZY_FREE_MAX ((size_t)1 << 20)
/* Device work on at most this many bytes (each operand of a kernel, a
 * transfer) runs at once on the caller when its
 * queue is idle, as the small frees do: handing it to a worker and waiting
 * for it is two cross-thread wake-ups (~10 us, sum(a)'s whole cost)
 * against well under 1 us of work, and stream order already holds
 * (nothing is pending before it, and only the caller, under the core's
 * lock, can queue more).  SPILLWAY_SIM_INLINE=0 sends everything through
 * the workers: the sim then shows ordering bugs on small arrays too. */
#define SIM__INLINE_MAX ((size_t)4096)

/* ------------------------------------------------------------------------
 * Types
 * ---------------------------------------------------------------------- */

typedef enum sim__cmd_kind {
    SIM__CMD_WRITE,
    SIM__CMD_READ,
    SIM__CMD_COPY,
    SIM__CMD_FILL,
    SIM__CMD_KERNEL,
    SIM__CMD_FREE,
    SIM__CMD_MARKER,
    SIM__CMD_WAIT,
} sim__cmd_kind;

/* Every command but a free (the block's own link) and a marker (the
 * event's). */
typedef struct sim__cmd {
    sim__link link; /* link.kind: a sim__cmd_kind */
    union {
        struct {
            uintptr_t dst;
            const void *src;
            size_t n;
        } write;
        struct {
            void *dst;
            uintptr_t src;
            size_t n;
        } read;
        struct {
            uintptr_t dst, src;
            size_t n;
        } copy;
        struct {
            uintptr_t dst;
            size_t n, psize;
            unsigned char pattern[8];
        } fill;
        sw_kernel_args kernel;
        sw__bevent *wait; /* an event of another queue (a reference) */
    } u;
} sim__cmd;

static sim__cmd *sim__cmd_of(sim__link *l)
{
    return (sim__cmd *)(void *)((char *)l - offsetof(sim__cmd, link));
}

struct sw__bevent {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    int refs; /* the holder's, plus the marker's until it has run */
    sim__link marker; /* queued on a busy queue: completes the event */
    /* Queues stalled on this event by a WAIT command (linked through their
     * rnext): the event's completion hands them back to the pool. */
    sw__bqueue *parked;
    double t; /* CLOCK_MONOTONIC seconds when it completed (event_elapsed) */
};

static sw__bevent *sim__event_of(sim__link *l)
{
    return (sw__bevent *)(void *)((char *)l - offsetof(sw__bevent, marker));
}

struct sw__bqueue {
    sw__bdev *dev;
    unsigned id;
    pthread_mutex_t mu;
    pthread_cond_t done_cv; /* waiters: completed advanced, or unscheduled */
    sim__link *head, *tail;
    uint64_t submitted, completed;
    int waiters;
    int lazy; /* frees queued since the queue was last scheduled */
    /* Owned by the pool: on its ready list, being run by a worker, or
     * parked on an event.  Only the owner takes commands off the FIFO, so
     * a queue's commands never run on two workers at once. */
    int scheduled;
    sw__bqueue *rnext; /* pool's ready list (pool mutex) or an event's
                        * parked list (event mutex) */
    uintptr_t reserve; /* SW_SIM_QUEUE_RESERVE bytes (not the default's) */
    sw__bqueue *next; /* in dev->queues, under sim__registry_mu */
};

struct sw__bdev {
    int index;
    unsigned next_queue_id;
    sim__arena arena;
    sw__bqueue *default_q;
    sw__bqueue *copy_q; /* spills and restores (contract v3 copy_queue) */
    sw__bqueue *queues; /* all of them, default included; registry mutex */
    sw__bdev *next;     /* in sim__devices, under sim__registry_mu */
    size_t inline_max;  /* SIM__INLINE_MAX, or 0: SPILLWAY_SIM_INLINE=0 */
    unsigned jitter_us; /* SPILLWAY_SIM_JITTER */
};

/* ------------------------------------------------------------------------
 * Checking commands
 * ---------------------------------------------------------------------- */

static void sim__cmd_describe(const sim__cmd *c, char *buf, size_t len)
{
    switch ((sim__cmd_kind)c->link.kind) {
    case SIM__CMD_WRITE:
        snprintf(buf, len, "write of %zu bytes from host %p", c->u.write.n,
                 c->u.write.src);
        break;
    case SIM__CMD_READ:
        snprintf(buf, len, "read of %zu bytes to host %p", c->u.read.n,
                 c->u.read.dst);
        break;
    case SIM__CMD_COPY:
        snprintf(buf, len, "copy of %zu bytes", c->u.copy.n);
        break;
    case SIM__CMD_FILL:
        snprintf(buf, len, "fill of %zu bytes with a %zu-byte pattern",
                 c->u.fill.n, c->u.fill.psize);
        break;
    case SIM__CMD_KERNEL:
        snprintf(buf, len, "kernel %s %s n=%zu",
                 sw_kernel_name(c->u.kernel.kernel),
                 sw_dtype_name(c->u.kernel.dtype), c->u.kernel.n);
        break;
    default:
        snprintf(buf, len, "command");
        break;
    }
}

/* Every operand of a command inside a live allocation, or a report and
 * abort(): what the command, operand and range were and what is there. */
static void sim__check(sw__bqueue *q, const sim__cmd *c, const sim__range *r,
                       int count)
{
    char there[320];
    int i = sw__sim_arena_check(&q->dev->arena, r, count, there,
                                sizeof there);
    if (i < 0)
        return;
    char what[160];
    sim__cmd_describe(c, what, sizeof what);
    fprintf(stderr,
            "spillway sim:%d: FATAL: %s: operand %s [0x%" PRIxPTR
            "+%zu) is not inside a live allocation (%s)\n",
            q->dev->index, what, r[i].name, r[i].p, r[i].len, there);
    fflush(stderr);
    abort();
}

/* ------------------------------------------------------------------------
 * Kernels: the operands proven live here, the arithmetic in
 * sim_kernels.c.
 * ---------------------------------------------------------------------- */

static void sim__run_kernel(sw__bqueue *q, const sim__cmd *c)
{
    const sw_kernel_args *k = &c->u.kernel;
    size_t bytes = k->n * sw_dtype_size(k->dtype);
    uintptr_t out = k->out.base + k->out.offset;
    uintptr_t a = k->a.base + k->a.offset;
    uintptr_t b = k->b.base + k->b.offset;
    sim__range r[3] = {{"out", out, bytes}, {"a", a, bytes}, {"b", b, bytes}};
    int operands = 2;
    switch (k->kernel) {
    case SW_KERNEL_FILL:
        operands = 1;
        break;
    case SW_KERNEL_ADD:
        operands = 3;
        break;
    case SW_KERNEL_SUM:
        /* A complex128 for complex dtypes, else 8 bytes. */
        r[0].len = k->dtype == SW_COMPLEX64 || k->dtype == SW_COMPLEX128
                       ? 16
                       : 8;
        break;
    default:
        break;
    }
    sim__check(q, c, r, operands);
    sw__sim_kernel_run(k);
}

/* ------------------------------------------------------------------------
 * Events
 * ---------------------------------------------------------------------- */

static void sim__event_unref(sw__bevent *ev)
{
    pthread_mutex_lock(&ev->mu);
    int last = --ev->refs == 0;
    pthread_mutex_unlock(&ev->mu);
    if (last) {
        pthread_cond_destroy(&ev->cv);
        pthread_mutex_destroy(&ev->mu);
        sw__free(ev);
    }
}

static void sim__pool_ready(sw__bqueue *q);

/* Done, waking host waiters and handing the queues parked on it back to
 * the pool; then the marker's reference goes. */
static double sim__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sim__event_complete(sw__bevent *ev)
{
    double t = sim__now();
    pthread_mutex_lock(&ev->mu);
    ev->t = t;
    ev->done = 1;
    pthread_cond_broadcast(&ev->cv);
    sw__bqueue *parked = ev->parked;
    ev->parked = NULL;
    pthread_mutex_unlock(&ev->mu);
    while (parked) {
        sw__bqueue *q = parked;
        parked = q->rnext; /* read first: the pool relinks q */
        sim__pool_ready(q);
    }
    sim__event_unref(ev);
}

static int sim__event_done(sw__bevent *ev)
{
    pthread_mutex_lock(&ev->mu);
    int done = ev->done;
    pthread_mutex_unlock(&ev->mu);
    return done;
}

/* ------------------------------------------------------------------------
 * Queues: a FIFO of commands each, run by a pool of worker threads shared
 * by every queue of every device.
 *
 * A thread per queue cost ~50 us to start and join, which was most of a
 * new queue's first operation.  Now a queue with work is `scheduled`: on
 * the pool's ready list, being run by one worker (which takes its whole
 * FIFO at a time, so a queue's commands stay in order and never run on
 * two workers), or parked on another queue's event.  Workers never block
 * on anything but the pool: a WAIT command whose event is not complete
 * puts the rest of its batch back and parks the queue on the event, whose
 * completion hands it back to the pool.  So any number of workers makes
 * progress, and the pool grows (up to SIM__MAX_WORKERS) only when every
 * worker is busy, so that queues run side by side as a GPU's streams do
 * (the copy queue beside the default queue).  Workers are started on
 * demand, once per process, and then live as long as it.
 * ---------------------------------------------------------------------- */

#define SIM__MAX_WORKERS 8

static struct {
    pthread_mutex_t mu; /* a leaf, but taken under a queue's mu */
    pthread_cond_t cv;  /* workers: the ready list has a queue */
    sw__bqueue *head, *tail;
    int ready; /* queues on the list */
    int idle;  /* workers waiting on cv */
    int total; /* workers started */
} sim__pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL,
               NULL, 0, 0, 0};

static void *sim__worker(void *arg);

/* pre: sim__pool.mu held.  0, or an errno. */
static int sim__spawn_locked(void)
{
    pthread_t t;
    int e = sw__thread_create(&t, sim__worker, NULL);
    if (e != 0)
        return e;
    char name[16];
    snprintf(name, sizeof name, "sw-sim-w%d", sim__pool.total);
    pthread_setname_np(t, name);
    pthread_detach(t);
    sim__pool.total++;
    return 0;
}

/* A worker exists, so that a queue scheduled now will run: SW_OK, or
 * SW_ERR_HOST_OOM (saying why) when none does and none can be started. */
static int sim__pool_ensure(sw__bqueue *q)
{
    pthread_mutex_lock(&sim__pool.mu);
    int e = sim__pool.total > 0 ? 0 : sim__spawn_locked();
    pthread_mutex_unlock(&sim__pool.mu);
    if (e != 0)
        return sw__errorf(SW_ERR_HOST_OOM,
                          "sim:%d: cannot start a queue worker: %s",
                          q->dev->index, strerror(e));
    return SW_OK;
}

/* Whether any worker was started (in this process). */
static int sim__pool_started(void)
{
    pthread_mutex_lock(&sim__pool.mu);
    int started = sim__pool.total > 0;
    pthread_mutex_unlock(&sim__pool.mu);
    return started;
}

/* Put a scheduled queue on the ready list: an idle worker takes it, else
 * a new one while there is room (best effort: a busy worker takes it once
 * done, as workers never block). */
static void sim__pool_ready(sw__bqueue *q)
{
    pthread_mutex_lock(&sim__pool.mu);
    q->rnext = NULL;
    if (sim__pool.tail)
        sim__pool.tail->rnext = q;
    else
        sim__pool.head = q;
    sim__pool.tail = q;
    sim__pool.ready++;
    if (sim__pool.idle >= sim__pool.ready)
        pthread_cond_signal(&sim__pool.cv);
    else if (sim__pool.total >= SIM__MAX_WORKERS ||
             sim__spawn_locked() != 0)
        pthread_cond_signal(&sim__pool.cv);
    pthread_mutex_unlock(&sim__pool.mu);
}

/* pre: q->mu held.  Nothing queued, nothing running (pending lazy frees
 * are queued). */
static int sim__idle_locked(const sw__bqueue *q)
{
    return !q->head && q->completed == q->submitted;
}

/* pre: q->mu held.  Hand q to the pool if it has commands and is not
 * the pool's already. */
static void sim__kick_locked(sw__bqueue *q)
{
    if (q->head && !q->scheduled) {
        q->scheduled = 1;
        q->lazy = 0;
        sim__pool_ready(q);
    }
}

static void sim__execute(sw__bqueue *q, sim__link *l)
{
    if (l->kind == SIM__CMD_FREE) {
        sw__sim_arena_retire(&q->dev->arena, sw__sim_link_block(l));
        return;
    }
    if (l->kind == SIM__CMD_MARKER) {
        sim__event_complete(sim__event_of(l));
        return;
    }
    sim__cmd *c = sim__cmd_of(l);
    switch ((sim__cmd_kind)l->kind) {
    case SIM__CMD_WRITE: {
        sim__range r = {"dst", c->u.write.dst, c->u.write.n};
        sim__check(q, c, &r, 1);
        memmove((void *)c->u.write.dst, c->u.write.src, c->u.write.n);
        break;
    }
    case SIM__CMD_READ: {
        sim__range r = {"src", c->u.read.src, c->u.read.n};
        sim__check(q, c, &r, 1);
        memmove(c->u.read.dst, (const void *)c->u.read.src, c->u.read.n);
        break;
    }
    case SIM__CMD_COPY: {
        sim__range r[2] = {{"dst", c->u.copy.dst, c->u.copy.n},
                           {"src", c->u.copy.src, c->u.copy.n}};
        sim__check(q, c, r, 2);
        memmove((void *)c->u.copy.dst, (const void *)c->u.copy.src,
                c->u.copy.n);
        break;
    }
    case SIM__CMD_FILL: {
        sim__range r = {"dst", c->u.fill.dst, c->u.fill.n};
        sim__check(q, c, &r, 1);
        sw__sim_fill_bytes((unsigned char *)c->u.fill.dst, c->u.fill.n,
                           c->u.fill.pattern, c->u.fill.psize);
        break;
    }
    case SIM__CMD_KERNEL:
        sim__run_kernel(q, c);
        break;
    case SIM__CMD_FREE: /* above */
        break;
    case SIM__CMD_MARKER: /* above */
        break;
    case SIM__CMD_WAIT:
        /* Another queue's event, complete by now (sim__run parks the
         * queue until it is, as a GPU stream waiting on an event stalls
         * without holding up the others). */
        sim__event_unref(c->u.wait);
        break;
    }
}

/* A WAIT command l of q's batch [l..tail] found its event pending: put
 * the batch back at the front of the FIFO (crediting the ran commands
 * before it), then park q on the event.  1: parked, q is the event's now
 * and not touched again here; 0: the event completed meanwhile, and q is
 * still ours to run. */
static int sim__park(sw__bqueue *q, sim__link *l, sim__link *tail,
                     uint64_t ran)
{
    sw__bevent *ev = sim__cmd_of(l)->u.wait;
    pthread_mutex_lock(&q->mu);
    tail->next = q->head;
    if (!q->head)
        q->tail = tail;
    q->head = l;
    q->completed += ran;
    if (q->waiters && ran)
        pthread_cond_broadcast(&q->done_cv);
    pthread_mutex_unlock(&q->mu);
    pthread_mutex_lock(&ev->mu);
    int parked = !ev->done;
    if (parked) {
        q->rnext = ev->parked;
        ev->parked = q;
    }
    pthread_mutex_unlock(&ev->mu);
    return parked;
}

/* SPILLWAY_SIM_JITTER: a pause of 0..max_us, from a per-thread xorshift
 * (seeded by the thread's stack address: runs differ, as timing does). */
static void sim__jitter(unsigned max_us)
{
    static _Thread_local uint64_t x;
    if (x == 0)
        x = (uint64_t)(uintptr_t)&x * 0x9E3779B97F4A7C15ull | 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    unsigned us = (unsigned)(x % ((uint64_t)max_us + 1));
    if (us == 0) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, (long)us * 1000};
    nanosleep(&ts, NULL);
}

/* Run q's commands until its FIFO is empty (it is then unscheduled and not
 * touched again: it may be destroyed at once) or it parks on an event.
 * Takes the whole FIFO at once, so the queue lock is taken twice per batch
 * rather than per command. */
static void sim__run(sw__bqueue *q)
{
    pthread_mutex_lock(&q->mu);
    for (;;) {
        sim__link *batch = q->head, *tail = q->tail;
        if (!batch) {
            q->scheduled = 0;
            if (q->waiters)
                pthread_cond_broadcast(&q->done_cv);
            pthread_mutex_unlock(&q->mu);
            return;
        }
        q->head = q->tail = NULL;
        q->lazy = 0;
        pthread_mutex_unlock(&q->mu);
        uint64_t ran = 0;
        while (batch) {
            sim__link *l = batch;
            if (q->dev->jitter_us > 0)
                sim__jitter(q->dev->jitter_us);
            if (l->kind == SIM__CMD_WAIT &&
                !sim__event_done(sim__cmd_of(l)->u.wait)) {
                if (sim__park(q, l, tail, ran))
                    return;
                ran = 0;
                break; /* completed meanwhile: take the FIFO again */
            }
            batch = l->next;
            if (l->kind == SIM__CMD_MARKER) {
                /* The work before an event counts as completed before the
                 * event does, so that whoever waited for it finds the queue
                 * idle (and, say, frees at once) when nothing followed.
                 * The link is the event's: not touched once it completes. */
                pthread_mutex_lock(&q->mu);
                q->completed += ran + 1;
                if (q->waiters)
                    pthread_cond_broadcast(&q->done_cv);
                pthread_mutex_unlock(&q->mu);
                ran = 0;
                sim__execute(q, l);
                continue;
            }
            /* Read first: a free's link is its block's, which the free
             * may merge away. */
            int own = l->kind == SIM__CMD_FREE;
            sim__execute(q, l);
            if (!own)
                sw__free(sim__cmd_of(l));
            ran++;
        }
        pthread_mutex_lock(&q->mu);
        q->completed += ran;
        if (q->waiters && ran)
            pthread_cond_broadcast(&q->done_cv);
    }
}

static void *sim__worker(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&sim__pool.mu);
    for (;;) {
        while (!sim__pool.head) {
            sim__pool.idle++;
            pthread_cond_wait(&sim__pool.cv, &sim__pool.mu);
            sim__pool.idle--;
        }
        sw__bqueue *q = sim__pool.head;
        sim__pool.head = q->rnext;
        if (!sim__pool.head)
            sim__pool.tail = NULL;
        sim__pool.ready--;
        pthread_mutex_unlock(&sim__pool.mu);
        sim__run(q);
        pthread_mutex_lock(&sim__pool.mu);
    }
    return NULL;
}

/* Append l to q's FIFO; never frees it.  A lazy one (a small free) does
 * not schedule the queue until SIM__LAZY_FREES of them have piled up. */
static int sim__push(sw__bqueue *q, sim__link *l, int lazy)
{
    l->next = NULL;
    pthread_mutex_lock(&q->mu);
    int kick = !lazy || ++q->lazy >= SIM__LAZY_FREES;
    /* Workers start when work first arrives (again in a forked child,
     * which has none): a process that never queues work costs no
     * thread.  The one failure an enqueue can have after its command. */
    if (!q->scheduled) {
        int rc = sim__pool_ensure(q);
        if (rc != SW_OK) {
            if (lazy)
                q->lazy--;
            pthread_mutex_unlock(&q->mu);
            return rc;
        }
    }
    if (q->tail)
        q->tail->next = l;
    else
        q->head = l;
    q->tail = l;
    q->submitted++;
    if (kick)
        sim__kick_locked(q);
    pthread_mutex_unlock(&q->mu);
    return SW_OK;
}

/* A command's enqueue: c is the queue's (freed by the worker), or freed
 * here when it cannot be queued. */
static int sim__enqueue(sw__bqueue *q, sim__cmd *c, int lazy)
{
    int rc = sim__push(q, &c->link, lazy);
    if (rc != SW_OK)
        sw__free(c);
    return rc;
}

static sim__cmd *sim__cmd_new(sw__bqueue *q, sim__cmd_kind kind)
{
    sim__cmd *c = sw__malloc(sizeof *c);
    if (!c) {
        sw__errorf(SW_ERR_HOST_OOM, "sim:%d: out of host memory for a command",
                   q->dev->index);
        return NULL;
    }
    c->link.kind = kind;
    return c;
}

static pthread_mutex_t sim__registry_mu = PTHREAD_MUTEX_INITIALIZER;
static sw__bdev *sim__devices;

static int sim__queue_new(sw__bdev *dev, sw__bqueue **out)
{
    sw__bqueue *q = sw__calloc(1, sizeof *q);
    if (!q)
        return sw__errorf(SW_ERR_HOST_OOM, "sim:%d: out of host memory",
                          dev->index);
    q->dev = dev;
    q->id = dev->next_queue_id++;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->done_cv, NULL);
    pthread_mutex_lock(&sim__registry_mu);
    q->next = dev->queues;
    dev->queues = q;
    pthread_mutex_unlock(&sim__registry_mu);
    *out = q;
    return SW_OK;
}

/* pre: q->mu held.  Wait until every command submitted so far has run
 * (lazy frees included); with unscheduled, until no worker holds q. */
static void sim__drain_locked(sw__bqueue *q, int unscheduled)
{
    uint64_t target = q->submitted;
    sim__kick_locked(q); /* lazy frees */
    while (q->completed < target || (unscheduled && q->scheduled)) {
        q->waiters++;
        pthread_cond_wait(&q->done_cv, &q->mu);
        q->waiters--;
    }
}

/* Drain, wait for the pool to let go of it, free.  (The last worker to
 * hold q released its mutex in the same critical section that cleared
 * scheduled, and never touches q after.) */
static void sim__queue_free(sw__bqueue *q)
{
    pthread_mutex_lock(&q->mu);
    sim__drain_locked(q, 1);
    pthread_mutex_unlock(&q->mu);

    pthread_mutex_lock(&sim__registry_mu);
    sw__bqueue **pp = &q->dev->queues;
    while (*pp != q)
        pp = &(*pp)->next;
    *pp = q->next;
    pthread_mutex_unlock(&sim__registry_mu);

    pthread_cond_destroy(&q->done_cv);
    pthread_mutex_destroy(&q->mu);
    sw__free(q);
}

/* ------------------------------------------------------------------------
 * fork().  Worker threads do not survive into a child, and a lock held by
 * one would stay held there.  So fork first drains every queue and takes
 * every sim lock, the pool's last; the child starts with an empty pool
 * (the next enqueue starts a worker), its queues unscheduled, and both
 * sides release the locks.  A child that execs at once pays only the
 * drain.  Events recorded before the fork are all complete by then, so
 * their condvars are never signalled again.
 * ---------------------------------------------------------------------- */

static void sim__fork_prepare(void)
{
    pthread_mutex_lock(&sim__registry_mu);
    for (sw__bdev *d = sim__devices; d; d = d->next) {
        for (sw__bqueue *q = d->queues; q; q = q->next) {
            pthread_mutex_lock(&q->mu);
            sim__drain_locked(q, 0);
        }
    }
    for (sw__bdev *d = sim__devices; d; d = d->next)
        pthread_mutex_lock(&d->arena.mu);
    pthread_mutex_lock(&sim__pool.mu);
}

static void sim__fork_release(int child)
{
    if (child) {
        pthread_mutex_init(&sim__pool.mu, NULL);
        pthread_cond_init(&sim__pool.cv, NULL);
        sim__pool.head = sim__pool.tail = NULL;
        sim__pool.ready = sim__pool.idle = sim__pool.total = 0;
    } else {
        pthread_mutex_unlock(&sim__pool.mu);
    }
    for (sw__bdev *d = sim__devices; d; d = d->next)
        pthread_mutex_unlock(&d->arena.mu);
    for (sw__bdev *d = sim__devices; d; d = d->next) {
        for (sw__bqueue *q = d->queues; q; q = q->next) {
            if (child) {
                /* The copied condvar still counts the parent's sleepers,
                 * whom a signal would wait for forever: start afresh.
                 * Drained, so no command is left for a worker; one that
                 * had yet to clear `scheduled` is the parent's. */
                pthread_cond_init(&q->done_cv, NULL);
                q->scheduled = 0;
                q->waiters = 0;
            }
            pthread_mutex_unlock(&q->mu);
        }
    }
    pthread_mutex_unlock(&sim__registry_mu);
}

static void sim__fork_parent(void) { sim__fork_release(0); }
static void sim__fork_child(void) { sim__fork_release(1); }

static pthread_once_t sim__atfork_once = PTHREAD_ONCE_INIT;

static void sim__atfork_register(void)
{
    pthread_atfork(sim__fork_prepare, sim__fork_parent, sim__fork_child);
}

/* ------------------------------------------------------------------------
 * Configuration from the environment
 * ---------------------------------------------------------------------- */

static int sim__config(uint64_t *capacity, int *ndev)
{
    uint64_t cap = SIM__DEFAULT_MEMORY;
    const char *s = getenv("SPILLWAY_SIM_MEMORY");
    if (s && *s) {
        if (sw_parse_size(s, &cap) != 0)
            return sw__errorf(SW_ERR_INVALID_ARG,
                              "SPILLWAY_SIM_MEMORY='%.100s' is not a size "
                              "(expected bytes with an optional K, M, G or T "
                              "suffix, e.g. 512M or 2G)",
                              s);
        if (cap < SIM__MIN_MEMORY || cap > SIM__MAX_MEMORY ||
            cap > SIZE_MAX)
            return sw__errorf(SW_ERR_INVALID_ARG,
                              "SPILLWAY_SIM_MEMORY='%.100s' (%" PRIu64
                              " bytes) is outside the simulated device's "
                              "range of 1M to 1T",
                              s, cap);
    }
    /* Whole granules only, so that blocks tile the arena exactly. */
    cap -= cap % SW_ALLOC_GRANULARITY;

    int n = 1;
    s = getenv("SPILLWAY_SIM_DEVICES");
    if (s && *s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (*s < '0' || *s > '9' || *end != '\0' || errno != 0 || v < 0 ||
            v > SIM__MAX_DEVICES)
            return sw__errorf(SW_ERR_INVALID_ARG,
                              "SPILLWAY_SIM_DEVICES='%.100s' is not a device "
                              "count (expected an integer from 0 to %d)",
                              s, SIM__MAX_DEVICES);
        n = (int)v;
    }
    *capacity = cap;
    *ndev = n;
    return SW_OK;
}

/* SPILLWAY_SIM_COPY_QUEUE=0: no copy queue (spills and restores then go
 * on the default queue, as before contract version 3), so that a run can
 * measure what the copy queue buys. */
static int sim__env_copy_queue(void)
{
    const char *s = getenv("SPILLWAY_SIM_COPY_QUEUE");
    return !(s && strcmp(s, "0") == 0);
}

/* SPILLWAY_SIM_INLINE=0: no small work inline (SIM__INLINE_MAX). */
static size_t sim__env_inline_max(void)
{
    const char *s = getenv("SPILLWAY_SIM_INLINE");
    return s && strcmp(s, "0") == 0 ? 0 : SIM__INLINE_MAX;
}

/* SPILLWAY_SIM_JITTER=N: pause 0..N us before each command (at most a
 * second; anything else is 0). */
static unsigned sim__env_jitter(void)
{
    const char *s = getenv("SPILLWAY_SIM_JITTER");
    if (s == NULL || *s == '\0')
        return 0;
    char *end = NULL;
    unsigned long v = strtoul(s, &end, 10);
    return *end == '\0' && v <= 1000000 ? (unsigned)v : 0;
}

/* ------------------------------------------------------------------------
 * Operations: devices and memory
 * ---------------------------------------------------------------------- */

static int sim_device_count(int *count, char *why, size_t why_len)
{
    uint64_t cap = 0;
    int n = 0;
    int rc = sim__config(&cap, &n);
    if (rc != SW_OK)
        return rc;
    if (why_len > 0)
        snprintf(why, why_len, "%s",
                 n == 0 ? "SPILLWAY_SIM_DEVICES=0 turns the simulated "
                          "device off"
                        : "");
    *count = n;
    return SW_OK;
}

static void sim_close(sw__bdev *dev);

static int sim_open(int index, sw__bdev **out, sw__device_props *props)
{
    uint64_t cap = 0;
    int n = 0;
    int rc = sim__config(&cap, &n);
    if (rc != SW_OK)
        return rc;
    if (index < 0 || index >= n)
        return sw__errorf(SW_ERR_NO_DEVICE,
                          "sim:%d: no such device (SPILLWAY_SIM_DEVICES "
                          "gives %d)",
                          index, n);
    pthread_once(&sim__atfork_once, sim__atfork_register);

    sw__bdev *dev = sw__calloc(1, sizeof *dev);
    if (!dev)
        return sw__errorf(SW_ERR_HOST_OOM, "sim:%d: out of host memory",
                          index);
    dev->index = index;
    dev->inline_max = sim__env_inline_max();
    dev->jitter_us = sim__env_jitter();
    if (dev->jitter_us > 0)
        dev->inline_max = 0; /* everything through the shaken workers */
    rc = sw__sim_arena_init(&dev->arena, index, (size_t)cap);
    if (rc != SW_OK) {
        sw__free(dev);
        return rc;
    }
    pthread_mutex_lock(&sim__registry_mu);
    dev->next = sim__devices;
    sim__devices = dev;
    pthread_mutex_unlock(&sim__registry_mu);
    rc = sim__queue_new(dev, &dev->default_q);
    if (rc == SW_OK && sim__env_copy_queue())
        rc = sim__queue_new(dev, &dev->copy_q);
    if (rc != SW_OK) {
        sim_close(dev);
        return rc;
    }

    char size[32];
    sw_format_bytes(cap, size, sizeof size);
    memset(props, 0, sizeof *props);
    snprintf(props->description, sizeof props->description,
             "simulated device, %s arena", size);
    props->total = cap;
    props->max_alloc = cap;
    props->host_addressable = 1;
    props->host_compute = 1; /* its workers are host threads */
    props->dtypes = SW__ALL_DTYPES; /* sim_kernels.c covers them all */
    *out = dev;
    return SW_OK;
}

static void sim_close(sw__bdev *dev)
{
    if (!dev)
        return;
    for (;;) {
        pthread_mutex_lock(&sim__registry_mu);
        sw__bqueue *q = dev->queues;
        pthread_mutex_unlock(&sim__registry_mu);
        if (!q)
            break;
        sim__queue_free(q);
    }
    pthread_mutex_lock(&sim__registry_mu);
    sw__bdev **pp = &sim__devices;
    while (*pp != dev)
        pp = &(*pp)->next;
    *pp = dev->next;
    pthread_mutex_unlock(&sim__registry_mu);
    sw__sim_arena_destroy(&dev->arena);
    sw__free(dev);
}

static int sim_alloc(sw__bdev *dev, size_t size, uintptr_t *mem)
{
    return sw__sim_arena_alloc(&dev->arena, size, mem);
}

/* The block is checked now, so a double free or a wrong size is an error
 * at the call rather than a corrupt arena later.  When q has nothing
 * pending, stream order already holds and a small block is released at
 * once on this thread: the common alloc/free churn then never involves the
 * worker (handing a block to it costs more than releasing it).  Otherwise
 * the block goes to the worker, which releases it once the queue's earlier
 * work has run. */
static int sim_free(sw__bdev *dev, sw__bqueue *q, uintptr_t mem, size_t size)
{
    if (!q)
        q = dev->default_q;
    /* Only the caller enqueues (under the core's lock), so an idle queue
     * stays idle until we return.  Without a worker in the process (none
     * started yet, or a forked child) a block of any size is released at
     * once: starting a worker for a free could fail. */
    pthread_mutex_lock(&q->mu);
    int now = sim__idle_locked(q) &&
              (size < SIM__LAZY_FREE_MAX || !sim__pool_started());
    pthread_mutex_unlock(&q->mu);
    sim__block *b = NULL;
    int rc = sw__sim_arena_free(&dev->arena, mem, size, now, &b);
    if (rc != SW_OK || now)
        return rc;
    /* Queued through the block's own link: no host memory, so the free
     * cannot fail for want of it. */
    sim__link *l = sw__sim_block_link(b);
    l->kind = SIM__CMD_FREE;
    rc = sim__push(q, l, size < SIM__LAZY_FREE_MAX);
    if (rc != SW_OK)
        sw__sim_arena_undoom(&dev->arena, b);
    return rc;
}

static int sim_mem_info(sw__bdev *dev, uint64_t *free_bytes, uint64_t *total,
                        int *free_known)
{
    *free_bytes = sw__sim_arena_free_bytes(&dev->arena);
    *total = dev->arena.capacity;
    *free_known = 1;
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * Operations: queues and work.  Each enqueue only records the command; the
 * worker validates and runs it.
 * ---------------------------------------------------------------------- */

static sw__bqueue *sim_default_queue(sw__bdev *dev) { return dev->default_q; }

/* Each extra queue reserves device memory, as a driver's command lists
 * and event pools do (some ~15 MB a queue), so that leaked queues show in
 * device_free.  The default queue's is part of opening the device. */
static int sim_queue_create(sw__bdev *dev, sw__bqueue **out)
{
    uintptr_t reserve = 0;
    int rc = sw__sim_arena_alloc(&dev->arena, SW_SIM_QUEUE_RESERVE,
                                 &reserve);
    if (rc != SW_OK)
        return rc;
    rc = sim__queue_new(dev, out);
    if (rc != SW_OK) {
        sw__sim_arena_unreserve(&dev->arena, reserve);
        return rc;
    }
    (*out)->reserve = reserve;
    return SW_OK;
}

/* The default queue lives until close, and so does the copy queue. */
static void sim_queue_destroy(sw__bqueue *q)
{
    if (!q || q == q->dev->default_q || q == q->dev->copy_q)
        return;
    sw__bdev *dev = q->dev;
    uintptr_t reserve = q->reserve;
    sim__queue_free(q);
    if (reserve)
        sw__sim_arena_unreserve(&dev->arena, reserve);
}

/* A sim queue's native handle is its address (the test of a runtime
 * working beside spillway reads it). */
static int sim_queue_native(sw__bqueue *q, uintptr_t *handle)
{
    *handle = (uintptr_t)q;
    return SW_OK;
}

/* The simulated device has no runtime but spillway: every queue on it is
 * spillway's own, which the core never adopts.  The handle is looked up
 * in the device's list, never dereferenced, to say which it is. */
static int sim_queue_wrap(sw__bdev *dev, uintptr_t handle, sw__bqueue **out)
{
    (void)out;
    sw__bqueue *found = NULL;
    pthread_mutex_lock(&sim__registry_mu);
    for (sw__bqueue *q = dev->queues; q && !found; q = q->next)
        if ((uintptr_t)q == handle)
            found = q;
    pthread_mutex_unlock(&sim__registry_mu);
    if (found == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "sim:%d: %#jx is not a live "
                          "queue of this device", dev->index,
                          (uintmax_t)handle);
    return sw__errorf(SW_ERR_INVALID_ARG, "sim:%d: %#jx is spillway's own "
                      "%s: use that queue itself (the simulated device has "
                      "no stream of another runtime to adopt)", dev->index,
                      (uintmax_t)handle,
                      found == dev->default_q ? "default queue"
                      : found == dev->copy_q  ? "copy queue"
                                              : "queue");
}

static int sim_native_context(sw__bdev *dev, uintptr_t *context)
{
    *context = (uintptr_t)dev;
    return SW_OK;
}

/* The copy queue: made by open, without a reservation (it is the
 * device's, as the default queue is), freed by close. */
static sw__bqueue *sim_copy_queue(sw__bdev *dev) { return dev->copy_q; }

/* Nothing queued, nothing running: only the caller enqueues (under the
 * core's lock), so it stays so until the caller queues more.  Pending
 * lazy frees count as work. */
static int sim_queue_idle(sw__bqueue *q)
{
    pthread_mutex_lock(&q->mu);
    int idle = sim__idle_locked(q);
    pthread_mutex_unlock(&q->mu);
    return idle;
}

/* q waits for ev: nothing to do if it is complete already. */
static int sim_wait_event(sw__bqueue *q, sw__bevent *ev)
{
    pthread_mutex_lock(&ev->mu);
    int done = ev->done;
    if (!done)
        ev->refs++;
    pthread_mutex_unlock(&ev->mu);
    if (done)
        return SW_OK;
    sim__cmd *c = sim__cmd_new(q, SIM__CMD_WAIT);
    int rc = c ? SW_OK : SW_ERR_HOST_OOM;
    if (c) {
        c->u.wait = ev;
        rc = sim__enqueue(q, c, 0);
    }
    if (rc != SW_OK)
        sim__event_unref(ev);
    return rc;
}

/* Whether work on `bytes` runs now, on the caller (SIM__INLINE_MAX). */
static int sim__inline(sw__bqueue *q, size_t bytes)
{
    if (bytes > q->dev->inline_max)
        return 0;
    pthread_mutex_lock(&q->mu);
    int idle = sim__idle_locked(q);
    pthread_mutex_unlock(&q->mu);
    return idle;
}

/* c, built on the caller's stack, run now (checked as a worker would). */
static int sim__run_inline(sw__bqueue *q, sim__cmd *c, sim__cmd_kind kind)
{
    c->link.kind = kind;
    c->link.next = NULL;
    sim__execute(q, &c->link);
    return SW_OK;
}

static int sim_write(sw__bqueue *q, uintptr_t dst, size_t dst_off,
                     const void *src, size_t n)
{
    if (sim__inline(q, n)) {
        sim__cmd c;
        c.u.write.dst = dst + dst_off;
        c.u.write.src = src;
        c.u.write.n = n;
        return sim__run_inline(q, &c, SIM__CMD_WRITE);
    }
    sim__cmd *c = sim__cmd_new(q, SIM__CMD_WRITE);
    if (!c)
        return SW_ERR_HOST_OOM;
    c->u.write.dst = dst + dst_off;
    c->u.write.src = src;
    c->u.write.n = n;
    return sim__enqueue(q, c, 0);
}

static int sim_read(sw__bqueue *q, void *dst, uintptr_t src, size_t src_off,
                    size_t n)
{
    if (sim__inline(q, n)) {
        sim__cmd c;
        c.u.read.dst = dst;
        c.u.read.src = src + src_off;
        c.u.read.n = n;
        return sim__run_inline(q, &c, SIM__CMD_READ);
    }
    sim__cmd *c = sim__cmd_new(q, SIM__CMD_READ);
    if (!c)
        return SW_ERR_HOST_OOM;
    c->u.read.dst = dst;
    c->u.read.src = src + src_off;
    c->u.read.n = n;
    return sim__enqueue(q, c, 0);
}

static int sim_copy(sw__bqueue *q, uintptr_t dst, size_t dst_off,
                    uintptr_t src, size_t src_off, size_t n)
{
    if (sim__inline(q, n)) {
        sim__cmd c;
        c.u.copy.dst = dst + dst_off;
        c.u.copy.src = src + src_off;
        c.u.copy.n = n;
        return sim__run_inline(q, &c, SIM__CMD_COPY);
    }
    sim__cmd *c = sim__cmd_new(q, SIM__CMD_COPY);
    if (!c)
        return SW_ERR_HOST_OOM;
    c->u.copy.dst = dst + dst_off;
    c->u.copy.src = src + src_off;
    c->u.copy.n = n;
    return sim__enqueue(q, c, 0);
}

static int sim_fill(sw__bqueue *q, uintptr_t dst, size_t dst_off, size_t n,
                    const void *pattern, size_t pattern_size)
{
    if (sim__inline(q, n)) {
        sim__cmd c;
        c.u.fill.dst = dst + dst_off;
        c.u.fill.n = n;
        c.u.fill.psize = pattern_size;
        memcpy(c.u.fill.pattern, pattern, pattern_size);
        return sim__run_inline(q, &c, SIM__CMD_FILL);
    }
    sim__cmd *c = sim__cmd_new(q, SIM__CMD_FILL);
    if (!c)
        return SW_ERR_HOST_OOM;
    c->u.fill.dst = dst + dst_off;
    c->u.fill.n = n;
    c->u.fill.psize = pattern_size;
    memcpy(c->u.fill.pattern, pattern, pattern_size);
    return sim__enqueue(q, c, 0);
}

/* The core has checked the kernel, the dtype (any: props.dtypes has them
 * all), the count and the operands' alignment; the ranges are proven live
 * when the kernel runs. */
static int sim_launch(sw__bqueue *q, const sw_kernel_args *args)
{
    if (sim__inline(q, args->n * sw_dtype_size(args->dtype))) {
        sim__cmd c;
        c.u.kernel = *args;
        return sim__run_inline(q, &c, SIM__CMD_KERNEL);
    }
    sim__cmd *c = sim__cmd_new(q, SIM__CMD_KERNEL);
    if (!c)
        return SW_ERR_HOST_OOM;
    c->u.kernel = *args;
    return sim__enqueue(q, c, 0);
}

/* ------------------------------------------------------------------------
 * Operations: events and waiting.  The sim's work cannot fail once queued
 * (what could go wrong is refused at enqueue or aborts), so waits only
 * ever report SW_OK.
 * ---------------------------------------------------------------------- */

static int sim_synchronize(sw__bqueue *q);

static int sim_event_record(sw__bqueue *q, sw__bevent **out)
{
    sw__bevent *ev = sw__malloc(sizeof *ev);
    if (!ev)
        return sw__errorf(SW_ERR_HOST_OOM,
                          "sim:%d: out of host memory for an event",
                          q->dev->index);
    pthread_mutex_init(&ev->mu, NULL);
    pthread_cond_init(&ev->cv, NULL);
    ev->parked = NULL;

    /* An idle queue needs no marker: the event is complete already (and
     * stays so: only our caller enqueues).  A busy one has a worker, so
     * the marker (the event's own link) is queued without fail. */
    pthread_mutex_lock(&q->mu);
    int idle = sim__idle_locked(q);
    pthread_mutex_unlock(&q->mu);
    ev->done = idle;
    ev->t = idle ? sim__now() : 0;
    ev->refs = idle ? 1 : 2;
    if (!idle) {
        ev->marker.kind = SIM__CMD_MARKER;
        int rc = sim__push(q, &ev->marker, 0);
        if (rc != SW_OK) {
            pthread_cond_destroy(&ev->cv);
            pthread_mutex_destroy(&ev->mu);
            sw__free(ev);
            return rc;
        }
    }
    *out = ev;
    return SW_OK;
}

static int sim_event_query(sw__bevent *ev, int *done)
{
    pthread_mutex_lock(&ev->mu);
    *done = ev->done;
    pthread_mutex_unlock(&ev->mu);
    return SW_OK;
}

static int sim_event_wait(sw__bevent *ev)
{
    pthread_mutex_lock(&ev->mu);
    while (!ev->done)
        pthread_cond_wait(&ev->cv, &ev->mu);
    pthread_mutex_unlock(&ev->mu);
    return SW_OK;
}

/* The completion times' difference: the work between the two ran on the
 * queue's worker in that time (in order, so none of it before `from`). */
static int sim_event_elapsed(sw__bevent *from, sw__bevent *to,
                             double *seconds)
{
    pthread_mutex_lock(&from->mu);
    int done = from->done;
    double t0 = from->t;
    pthread_mutex_unlock(&from->mu);
    pthread_mutex_lock(&to->mu);
    done = done && to->done;
    double t1 = to->t;
    pthread_mutex_unlock(&to->mu);
    if (!done)
        return sw__errorf(SW_ERR_INVALID_ARG, "sim: elapsed time of an "
                          "event not yet complete");
    *seconds = t1 > t0 ? t1 - t0 : 0;
    return SW_OK;
}

static void sim_event_release(sw__bevent *ev)
{
    if (ev)
        sim__event_unref(ev);
}

static int sim_synchronize(sw__bqueue *q)
{
    pthread_mutex_lock(&q->mu);
    sim__drain_locked(q, 0);
    pthread_mutex_unlock(&q->mu);
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * The ops table
 * ---------------------------------------------------------------------- */

const sw__backend_ops sw__sim_backend = {
    .version = SW__BACKEND_VERSION,
    .name = "sim",
    .device_count = sim_device_count,
    .open = sim_open,
    .close = sim_close,
    .alloc = sim_alloc,
    .free = sim_free,
    .mem_info = sim_mem_info,
    .default_queue = sim_default_queue,
    .queue_create = sim_queue_create,
    .queue_destroy = sim_queue_destroy,
    .write = sim_write,
    .read = sim_read,
    .copy = sim_copy,
    .fill = sim_fill,
    .launch = sim_launch,
    .event_record = sim_event_record,
    .event_query = sim_event_query,
    .event_wait = sim_event_wait,
    .event_release = sim_event_release,
    .synchronize = sim_synchronize,
    .wait_event = sim_wait_event,
    .copy_queue = sim_copy_queue,
    .queue_idle = sim_queue_idle,
    .event_elapsed = sim_event_elapsed,
    .queue_native = sim_queue_native,
    .queue_wrap = sim_queue_wrap,
    .native_context = sim_native_context,
};
