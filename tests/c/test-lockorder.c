/*
 * test-lockorder.c -- the lock contract between spillway and a runtime with
 * a global interpreter lock, in C, with a pthread mutex standing in for the
 * GIL.  Run under ThreadSanitizer with detect_deadlocks=1 (the c-tsan suite
 * runs every thread_* test), which reports any cycle in the lock-order
 * graph -- a potential deadlock -- even when the run happens not to
 * deadlock.
 *
 * The model follows python/spillway/_spillway.c exactly:
 *  - a "Python thread" holds the GIL while it runs and releases it around
 *    every spillway call (Py_BEGIN_ALLOW_THREADS);
 *  - "objects" left in reference cycles are garbage that only a collection
 *    frees; their finalizers free device buffers, releasing the GIL around
 *    each sw_buffer_free as Array deallocation does;
 *  - the pressure callback releases the device lock FIRST, then takes the
 *    GIL (PyGILState_Ensure: re-entrant on a thread that holds it),
 *    "collects", releases the GIL, re-takes the device lock and counts the
 *    collection;
 *  - a second callback, the probe, takes the GIL while the device lock is
 *    held and gives it back: the order DESIGN.md sanctions (device lock ->
 *    GIL).  It puts that edge in the lock-order graph whenever an
 *    allocation made without the GIL meets pressure (in every test here),
 *    so that the wrong order -- a spillway call made with the GIL held,
 *    GIL -> device lock -- anywhere closes a cycle that ThreadSanitizer
 *    reports.  (Checked by hand: dropping the GIL release around any one
 *    call of path 1 or path 3 below makes TSan report the inversion.)
 *
 * The three paths of the contract, one test each:
 *  1. Python threads that hold the GIL allocate under pressure;
 *  2. the callback path: the collection's finalizers free buffers and even
 *     allocate, re-entering spillway from inside the callback;
 *  3. a plain C thread that never held the GIL allocates under pressure
 *     while Python threads run pure Python and one waits for the device.
 *  4. Python threads pin the way sw.pinned does: the device lock only
 *     tried with the GIL held (trypin.h), the full pin with it released.
 * And a fifth shows the instrument works: introduce the wrong order (a
 * Python thread allocating while it holds the GIL) and ThreadSanitizer
 * reports the lock-order inversion.
 */
#include "test.h"
#include "tests.h"

#include "core/trypin.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif

#if UNDER_TSAN || defined(__SANITIZE_ADDRESS__)
#define LO_ITERS(fast, slow) (slow)
#else
#define LO_ITERS(fast, slow) (fast)
#endif

/* A small device, so that pressure comes quickly: 8 MiB, buffers of 1. */
#define LO_MEMORY "8M"
#define LO_BUF (1u << 20)

/* ------------------------------------------------------------------------
 * The model: a GIL, garbage, the collector callback and the probe
 * ---------------------------------------------------------------------- */

#define LO_MAX_GARBAGE 256

static pthread_mutex_t gil = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int holds_gil;

/* Under the GIL, like Python objects. */
static sw_buffer *garbage[LO_MAX_GARBAGE];
static size_t ngarbage;

static atomic_int collections;     /* collector runs */
static atomic_int finalized;       /* buffers freed by collections */
static atomic_int probes;          /* probe runs */
static atomic_int finalizer_allocs; /* allocations made by finalizers */
static int finalizers_allocate;    /* path 2: finalizers re-enter */
static sw_device *lo_dev;

/* PyGILState_Ensure / PyGILState_Release. */
static int gil_ensure(void)
{
    if (holds_gil)
        return 0;
    pthread_mutex_lock(&gil);
    holds_gil = 1;
    return 1;
}

static void gil_release(int taken)
{
    if (taken) {
        holds_gil = 0;
        pthread_mutex_unlock(&gil);
    }
}

/* Py_BEGIN_ALLOW_THREADS / Py_END_ALLOW_THREADS. */
static void allow_threads_begin(void)
{
    holds_gil = 0;
    pthread_mutex_unlock(&gil);
}

static void allow_threads_end(void)
{
    pthread_mutex_lock(&gil);
    holds_gil = 1;
}

/* Drop a buffer into a "reference cycle": only a collection frees it.
 * Called with the GIL. */
static void make_garbage(sw_buffer *b)
{
    if (ngarbage < LO_MAX_GARBAGE) {
        garbage[ngarbage++] = b;
    } else {
        allow_threads_begin();
        ASSERT_OK(sw_buffer_free(b));
        allow_threads_end();
    }
}

/* gc.collect() with the GIL held: run every finalizer.  Each frees its
 * buffer with the GIL released (Array_dealloc); on path 2 finalizers also
 * read the accounting and allocate and free a small buffer, re-entering
 * spillway from inside the callback. */
static int collect_locked(void)
{
    int freed = 0;
    while (ngarbage > 0) {
        sw_buffer *b = garbage[--ngarbage];
        allow_threads_begin();
        ASSERT_OK(sw_buffer_free(b));
        if (finalizers_allocate) {
            sw_memory_info info;
            ASSERT_OK(sw_memory_info_get(lo_dev, &info));
            sw_buffer *t = NULL;
            ASSERT_OK(sw_buffer_alloc(lo_dev, 4096, "finalizer", &t));
            ASSERT_OK(sw_buffer_free(t));
            atomic_fetch_add(&finalizer_allocs, 1);
        }
        allow_threads_end();
        freed++;
    }
    atomic_fetch_add(&finalized, freed);
    return freed;
}

/* The module's pressure callback (gc_on_pressure), in miniature. */
static int collector_callback(sw_device *dev, sw_pressure *p, size_t bytes,
                              void *user)
{
    (void)dev;
    (void)bytes;
    (void)user;
    sw_pressure_unlock(p); /* first: never hold it while taking the GIL */
    int taken = gil_ensure();
    int freed = collect_locked();
    atomic_fetch_add(&collections, 1);
    gil_release(taken);
    sw_pressure_relock(p);
    sw_pressure_note_gc(p);
    return freed > 0;
}

/* Takes the GIL with the device lock held: device lock -> GIL.  On a
 * thread that already holds the GIL it takes nothing (PyGILState_Ensure). */
static int probe_callback(sw_device *dev, sw_pressure *p, size_t bytes,
                          void *user)
{
    (void)dev;
    (void)p;
    (void)bytes;
    (void)user;
    int taken = gil_ensure();
    atomic_fetch_add(&probes, 1);
    gil_release(taken);
    return 0;
}

static sw_device *lo_setup(int ids[2])
{
    test_require_sim();
    setenv("SPILLWAY_SIM_MEMORY", LO_MEMORY, 1);
    sw_device *dev = test_open("sim:0");
    lo_dev = dev;
    ASSERT_OK(sw_add_pressure_callback(dev, probe_callback, NULL, &ids[0]));
    ASSERT_OK(sw_add_pressure_callback(dev, collector_callback, NULL,
                                       &ids[1]));
    return dev;
}

/* Free whatever garbage is left (a final collection) and unregister. */
static void lo_teardown(sw_device *dev, const int ids[2])
{
    int taken = gil_ensure();
    collect_locked();
    gil_release(taken);
    ASSERT_OK(sw_remove_pressure_callback(dev, ids[0]));
    ASSERT_OK(sw_remove_pressure_callback(dev, ids[1]));
}

/* n buffers of LO_BUF allocated by a "Python thread" and dropped into
 * cycles: only a collection frees them. */
static void fill_with_cycles(sw_device *dev, int n)
{
    int taken = gil_ensure();
    for (int i = 0; i < n; i++) {
        sw_buffer *b = NULL;
        allow_threads_begin();
        ASSERT_OK(sw_buffer_alloc(dev, LO_BUF, "cycle", &b));
        allow_threads_end();
        make_garbage(b);
    }
    gil_release(taken);
}

/* "Pure Python" for a little while (the GIL held). */
static uint64_t busy(uint64_t x, int n)
{
    for (int i = 0; i < n; i++)
        x = x * 6364136223846793005ull + 1442695040888963407ull;
    return x;
}

/* ------------------------------------------------------------------------
 * Path 1: Python threads that hold the GIL allocate under pressure
 * ---------------------------------------------------------------------- */

typedef struct {
    int id;
    int iters;
    int oks;
    uint64_t sink;
} py_arg;

/* A Python thread: holds the GIL except around spillway calls.  Keeps two
 * buffers; of those it drops, every other one goes into a cycle. */
static void *python_allocator(void *p)
{
    py_arg *a = p;
    sw_buffer *ring[2] = {0};
    pthread_mutex_lock(&gil);
    holds_gil = 1;
    for (int it = 0; it < a->iters; it++) {
        a->sink = busy(a->sink + (uint64_t)it, 200);
        sw_buffer *b = NULL;
        allow_threads_begin();
        int rc = sw_buffer_alloc(lo_dev, LO_BUF, "python", &b);
        uint32_t v = (uint32_t)(a->id * 1000 + it);
        if (rc == SW_OK)
            ASSERT_OK(sw_buffer_write(b, 0, &v, sizeof v));
        allow_threads_end();
        if (rc != SW_OK)
            FAIL("thread %d: %s: %s", a->id, sw_err_name(rc),
                 sw_last_error());
        a->oks++;
        int slot = it % 2;
        if (ring[slot] != NULL) {
            if (it % 4 < 2) {
                make_garbage(ring[slot]);
            } else {
                allow_threads_begin();
                ASSERT_OK(sw_buffer_free(ring[slot]));
                allow_threads_end();
            }
        }
        ring[slot] = b;
        if (it % 16 == 0) {
            allow_threads_begin();
            ASSERT_OK(sw_device_synchronize(lo_dev));
            allow_threads_end();
        }
    }
    allow_threads_begin(); /* and never back: the thread ends */
    for (int s = 0; s < 2; s++)
        ASSERT_OK(sw_buffer_free(ring[s]));
    return NULL;
}

TEST(thread_lockorder_python_threads)
{
    int ids[2];
    sw_device *dev = lo_setup(ids);
    enum { NT = 3 };
    pthread_t t[NT];
    py_arg args[NT];
    for (int i = 0; i < NT; i++) {
        args[i] = (py_arg){i, LO_ITERS(200, 60), 0, 0};
        ASSERT_EQ(pthread_create(&t[i], NULL, python_allocator, &args[i]),
                  0);
    }
    for (int i = 0; i < NT; i++)
        ASSERT_EQ(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < NT; i++)
        ASSERT_EQ(args[i].oks, args[i].iters);
    /* Pressure happened, and the collector ran and freed cycles. */
    sw_memory_info info = test_info_synced(dev);
    ASSERT_GT(atomic_load(&collections), 0);
    ASSERT_GT(atomic_load(&finalized), 0);
    ASSERT_UGT(info.gc_runs, 0);
    ASSERT_UEQ(info.gc_runs, (uint64_t)atomic_load(&collections));
    lo_teardown(dev, ids);
}

/* ------------------------------------------------------------------------
 * Path 2: the callback path
 * ---------------------------------------------------------------------- */

/* One allocation from a thread holding the GIL (released around the
 * call), with the device full of garbage: the collection frees enough, its
 * finalizers re-enter spillway (accounting, an allocation, frees), and
 * the allocation succeeds without spilling anything. */
static void *callback_path(void *p)
{
    int *ok = p;
    pthread_mutex_lock(&gil);
    holds_gil = 1;
    /* 6 MiB of garbage and 1 MiB live on an 8 MiB device. */
    sw_buffer *live = NULL;
    for (int i = 0; i < 6; i++) {
        sw_buffer *b = NULL;
        allow_threads_begin();
        ASSERT_OK(sw_buffer_alloc(lo_dev, LO_BUF, "cycle", &b));
        allow_threads_end();
        make_garbage(b);
    }
    allow_threads_begin();
    ASSERT_OK(sw_buffer_alloc(lo_dev, LO_BUF, "live", &live));
    sw_buffer *big = NULL;
    int rc = sw_buffer_alloc(lo_dev, 4 * LO_BUF, "big", &big);
    allow_threads_end();
    if (rc != SW_OK)
        FAIL("%s: %s", sw_err_name(rc), sw_last_error());
    allow_threads_begin();
    ASSERT_OK(sw_buffer_free(big));
    ASSERT_OK(sw_buffer_free(live));
    allow_threads_end();
    *ok = 1;
    holds_gil = 0;
    pthread_mutex_unlock(&gil);
    return NULL;
}

TEST(thread_lockorder_callback)
{
    int ids[2];
    sw_device *dev = lo_setup(ids);
    finalizers_allocate = 1;
    int ok = 0;
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, callback_path, &ok), 0);
    ASSERT_EQ(pthread_join(t, NULL), 0);
    ASSERT_EQ(ok, 1);
    sw_memory_info info = test_info_synced(dev);
    ASSERT_EQ(atomic_load(&collections), 1);
    ASSERT_EQ(atomic_load(&finalized), 6);
    ASSERT_EQ(atomic_load(&finalizer_allocs), 6);
    ASSERT_EQ(atomic_load(&probes), 1);
    ASSERT_UEQ(info.gc_runs, 1);
    ASSERT_UEQ(info.spills, 0); /* the collection made the room */
    lo_teardown(dev, ids);
}

/* ------------------------------------------------------------------------
 * Path 3: a plain C thread under pressure among Python threads
 * ---------------------------------------------------------------------- */

typedef struct {
    atomic_int *stop;
    uint64_t sink;
    atomic_int rounds; /* read by the C thread while it runs */
} spin_arg;

/* Pure Python: the GIL held, given up between "bytecode slices". */
static void *python_spinner(void *p)
{
    spin_arg *a = p;
    while (!atomic_load(a->stop)) {
        int taken = gil_ensure();
        a->sink = busy(a->sink, 2000);
        /* Some cycles, for the collector to find. */
        if (a->rounds % 8 == 0 && ngarbage < 4) {
            sw_buffer *b = NULL;
            allow_threads_begin();
            int rc = sw_buffer_alloc(lo_dev, LO_BUF, "spinner", &b);
            allow_threads_end();
            if (rc == SW_OK)
                make_garbage(b);
        }
        gil_release(taken);
        a->rounds++;
    }
    return NULL;
}

/* A Python thread that waits for the device, the GIL released. */
static void *python_syncer(void *p)
{
    spin_arg *a = p;
    while (!atomic_load(a->stop)) {
        int taken = gil_ensure();
        allow_threads_begin();
        ASSERT_OK(sw_device_synchronize(lo_dev));
        allow_threads_end();
        gil_release(taken);
        a->rounds++;
    }
    return NULL;
}

typedef struct {
    int iters;
    int oks;
    /* The others' rounds: the C thread goes on past iters until each has
     * done one (at most 20x iters).  On 2 cores the syncer could wait for
     * the GIL, held by two spinners, until the C thread was done, and
     * the test found it had never run (a clean CI run, once). */
    atomic_int *others[3];
} c_arg;

static bool others_ran(const c_arg *a)
{
    for (int i = 0; i < 3; i++)
        if (atomic_load(a->others[i]) == 0)
            return false;
    return true;
}

/* Never takes the GIL itself: only the callback does, on its behalf. */
static void *plain_c_thread(void *p)
{
    c_arg *a = p;
    sw_buffer *ring[3] = {0};
    for (int it = 0; it < a->iters ||
                     (!others_ran(a) && it < 20 * a->iters);
         it++) {
        sw_buffer *b = NULL;
        int rc = sw_buffer_alloc(lo_dev, LO_BUF, "c-thread", &b);
        if (rc != SW_OK)
            FAIL("C thread: %s: %s", sw_err_name(rc), sw_last_error());
        uint64_t v = (uint64_t)it, back = 0;
        ASSERT_OK(sw_buffer_write(b, 0, &v, sizeof v));
        ASSERT_OK(sw_buffer_read(b, 0, &back, sizeof back));
        ASSERT_UEQ(back, v);
        ASSERT_OK(sw_buffer_free(ring[it % 3]));
        ring[it % 3] = b;
        a->oks++;
    }
    for (int i = 0; i < 3; i++)
        ASSERT_OK(sw_buffer_free(ring[i]));
    return NULL;
}

TEST(thread_lockorder_c_thread)
{
    int ids[2];
    sw_device *dev = lo_setup(ids);
    atomic_int stop = 0;
    spin_arg spin[2] = {{&stop, 1, 0}, {&stop, 2, 0}};
    spin_arg syncer = {&stop, 0, 0};
    pthread_t ts[2], tsync, tc;
    /* Fill the device with cycles first, so the C thread's first
     * allocations meet pressure at once. */
    fill_with_cycles(dev, 6);
    for (int i = 0; i < 2; i++)
        ASSERT_EQ(pthread_create(&ts[i], NULL, python_spinner, &spin[i]), 0);
    ASSERT_EQ(pthread_create(&tsync, NULL, python_syncer, &syncer), 0);
    c_arg c = {LO_ITERS(300, 80), 0,
               {&spin[0].rounds, &spin[1].rounds, &syncer.rounds}};
    ASSERT_EQ(pthread_create(&tc, NULL, plain_c_thread, &c), 0);
    ASSERT_EQ(pthread_join(tc, NULL), 0);
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++)
        ASSERT_EQ(pthread_join(ts[i], NULL), 0);
    ASSERT_EQ(pthread_join(tsync, NULL), 0);
    ASSERT_TRUE(c.oks >= c.iters);
    ASSERT_GT(atomic_load(&spin[0].rounds) + atomic_load(&spin[1].rounds), 0);
    ASSERT_GT(atomic_load(&syncer.rounds), 0);
    sw_memory_info info = test_info_synced(dev);
    ASSERT_GT(atomic_load(&collections), 0);
    ASSERT_GT(atomic_load(&finalized), 0);
    ASSERT_UGT(info.gc_runs, 0);
    lo_teardown(dev, ids);
}

/* ------------------------------------------------------------------------
 * Path 4: pins tried with the GIL held (python/spillway/pinned.c)
 * ---------------------------------------------------------------------- */

/* A Python thread entering and leaving `sw.pinned(mine, ones, queue=q)`
 * blocks as the module does: the pin is first *tried* with the GIL held
 * (trypin.h: a try-lock of the device lock, bookkeeping only), and only
 * when that would wait is it made with the GIL released.  Between, its
 * "kernel" adds ones to mine on q; now and then it allocates under
 * pressure and drops garbage.  A try-lock never waits, so it adds no edge
 * GIL -> device lock: with the probe's device lock -> GIL edges, TSan
 * (detect_deadlocks=1) reports nothing here.  (Checked by hand: the
 * blocking sw_launch_begin_q in place of the try, under the GIL, is
 * reported as a lock-order inversion 3 runs in 3.) */
#define LO_PIN_N 4096 /* int32 elements of a pinner's buffers */

typedef struct {
    int id;
    int iters;
    sw_queue *q;       /* its own, and its buffers: made before the */
    sw_buffer *set[2]; /* device fills (mine, ones) */
    atomic_int *tried; /* pins and ends done with the GIL held */
    atomic_int *stop;  /* set when this thread is done (for the C thread) */
} pin_py_arg;

static void *python_pinner(void *p)
{
    pin_py_arg *a = p;
    const size_t n = LO_PIN_N;
    sw_queue *q = a->q;
    sw_buffer **set = a->set;
    pthread_mutex_lock(&gil);
    holds_gil = 1;
    for (int it = 0; it < a->iters; it++) {
        sw_devmem m[2];
        int rc = sw__launch_begin_q_try(q, set, NULL, 2, m);
        if (rc == SW_OK) {
            atomic_fetch_add(a->tried, 1);
        } else {
            allow_threads_begin();
            rc = sw_launch_begin_q(q, set, 2, m);
            allow_threads_end();
        }
        if (rc != SW_OK)
            FAIL("pinner %d: %s: %s", a->id, sw_err_name(rc),
                 sw_last_error());
        sw_kernel_args k = {.kernel = SW_KERNEL_ADD, .dtype = SW_INT32,
                            .n = n, .out = m[0], .a = m[0], .b = m[1]};
        allow_threads_begin();
        ASSERT_OK(sw_launch_kernel_q(q, &k));
        allow_threads_end();
        rc = sw__launch_end_q_try(q, set, 2);
        if (rc == SW_OK) {
            atomic_fetch_add(a->tried, 1);
        } else {
            allow_threads_begin();
            rc = sw_launch_end_q(q, set, 2);
            allow_threads_end();
        }
        ASSERT_OK(rc);
        if (it % 8 == 7) { /* an allocation under pressure, then garbage */
            sw_buffer *b = NULL;
            allow_threads_begin();
            rc = sw_buffer_alloc(lo_dev, LO_BUF, "pinner", &b);
            allow_threads_end();
            if (rc == SW_OK)
                make_garbage(b);
        }
    }
    allow_threads_begin(); /* and never back: the thread ends */
    int32_t *got = malloc(n * 4);
    ASSERT_NOT_NULL(got);
    ASSERT_OK(sw_queue_synchronize(q));
    ASSERT_OK(sw_buffer_read(set[0], 0, got, n * 4));
    for (size_t i = 0; i < n; i += 97)
        if (got[i] != a->iters)
            FAIL("pinner %d element %zu: %d after %d adds", a->id, i, got[i],
                 a->iters);
    free(got);
    atomic_fetch_add(a->stop, 1);
    return NULL;
}

TEST(thread_lockorder_try_pins)
{
    int ids[2];
    sw_device *dev = lo_setup(ids);
    enum { NT = 2 };
    atomic_int tried = 0, done = 0;
    pin_py_arg pa[NT];
    for (int i = 0; i < NT; i++) {
        pa[i] = (pin_py_arg){i, LO_ITERS(400, 120), NULL, {0}, &tried,
                             &done};
        ASSERT_OK(sw_queue_create(dev, &pa[i].q));
        for (int k = 0; k < 2; k++) {
            pa[i].set[k] = test_alloc(dev, LO_PIN_N * 4, "pinned");
            sw_scalar v = {.i = k};
            ASSERT_OK(sw_op_fill(pa[i].set[k], SW_INT32, LO_PIN_N, v));
        }
    }
    fill_with_cycles(dev, 5); /* the device full of cycles */
    pthread_t tp[NT], tc;
    for (int i = 0; i < NT; i++)
        ASSERT_EQ(pthread_create(&tp[i], NULL, python_pinner, &pa[i]), 0);
    /* The C thread allocates under pressure (the probe: device lock ->
     * GIL) until a pinner is done. */
    atomic_int *none = &done;
    c_arg c = {LO_ITERS(100, 30), 0, {none, none, none}};
    ASSERT_EQ(pthread_create(&tc, NULL, plain_c_thread, &c), 0);
    for (int i = 0; i < NT; i++)
        ASSERT_EQ(pthread_join(tp[i], NULL), 0);
    ASSERT_EQ(pthread_join(tc, NULL), 0);
    ASSERT_GT(atomic_load(&probes), 0);  /* the edge device lock -> GIL */
    ASSERT_GT(atomic_load(&tried), 0);   /* pins made under the GIL */
    ASSERT_GT(atomic_load(&collections), 0);
    for (int i = 0; i < NT; i++) {
        ASSERT_OK(sw_buffer_free(pa[i].set[0]));
        ASSERT_OK(sw_buffer_free(pa[i].set[1]));
        ASSERT_OK(sw_queue_release(pa[i].q));
    }
    lo_teardown(dev, ids);
}

/* ------------------------------------------------------------------------
 * The instrument: the wrong order is reported
 * ---------------------------------------------------------------------- */

/* In a child: the probe records device lock -> GIL during one allocation
 * under pressure; then a "Python thread" allocates WITHOUT releasing the
 * GIL -- GIL -> device lock, the mistake the module must never make.
 * ThreadSanitizer reports the cycle and (halt_on_error=1) ends the child
 * with a non-zero status.  Returns 0 only if nothing was reported. */
static int wrong_order_child(void *arg)
{
    (void)arg;
    alarm(60); /* should the wrong order ever deadlock for real */
    sw_device *dev = NULL;
    if (sw_device_open("sim:0", &dev) != SW_OK)
        return 10;
    int id = -1;
    if (sw_add_pressure_callback(dev, probe_callback, NULL, &id) != SW_OK)
        return 11;
    sw_buffer *b[9] = {0};
    for (int i = 0; i < 9; i++) /* the ninth meets pressure */
        if (sw_buffer_alloc(dev, LO_BUF, "fill", &b[i]) != SW_OK)
            return 12;
    if (atomic_load(&probes) == 0)
        return 13;
    pthread_mutex_lock(&gil);
    sw_buffer *x = NULL;
    int rc = sw_buffer_alloc(dev, 4096, "under the GIL", &x);
    pthread_mutex_unlock(&gil);
    if (rc != SW_OK)
        return 14;
    sw_buffer_free(x);
    for (int i = 0; i < 9; i++)
        sw_buffer_free(b[i]);
    sw_remove_pressure_callback(dev, id);
    sw_device_close(dev);
    return 0; /* not reported */
}

TEST(thread_lockorder_reversal_reported)
{
    test_require_sim();
    if (!UNDER_TSAN)
        SKIP("shows what ThreadSanitizer reports: run in the c-tsan suite");
    const char *opts = getenv("TSAN_OPTIONS");
    if (opts == NULL || strstr(opts, "detect_deadlocks=1") == NULL)
        SKIP("TSAN_OPTIONS lacks detect_deadlocks=1");
    setenv("SPILLWAY_SIM_MEMORY", LO_MEMORY, 1);
    char err[16384];
    int st = test_fork_run(wrong_order_child, NULL, err, sizeof err);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        FAIL("the wrong lock order (GIL, then device lock) went unreported");
    if (WIFEXITED(st) && WEXITSTATUS(st) >= 10 && WEXITSTATUS(st) <= 14)
        FAIL("the child failed before the wrong order (status %d): %s",
             WEXITSTATUS(st), err);
    ASSERT_STR_CONTAINS(err, "lock-order-inversion");
}
