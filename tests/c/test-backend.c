/*
 * test-backend.c -- the optional operations of backend contract version 3
 * (src/backend/backend.h), driven directly through the backend's ops table
 * on the device under test (sim or opencl; others skip), without the core:
 *
 *   - copy_queue: a second in-order queue whose copies run beside the
 *     default queue's kernels and still give the right data when each
 *     waits for the other's events (a restore's copy in before a kernel, a
 *     spill's copy out behind it while the next kernels run);
 *   - queue_idle: never says idle while a command is pending (a read on the
 *     copy queue that waits for the default queue's fill), always says so
 *     once the queue was synchronized, and (sim) an event recorded on an
 *     idle queue is complete;
 *   - event_elapsed (version 4, the sim): device time between two events,
 *     never the wait before them;
 *   - queues stalled on one another's events in a chain longer than the
 *     simulated device's worker pool (parked, then resumed in order);
 *   - all of it from several threads at once, each on a device of its own
 *     (thread_, so under ThreadSanitizer too: the sim's workers are one
 *     pool for every device).
 */
#include "test.h"
#include "tests.h"

#include "backend/backend.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The ops table and index of the device under test; skips for a backend
 * this file does not cover. */
static const sw__backend_ops *backend_under_test(int *index)
{
    const char *spec = test_device_spec();
    const char *colon = strchr(spec, ':');
    *index = colon ? atoi(colon + 1) : 0;
    if (strncmp(spec, "sim:", 4) == 0)
        return &sw__sim_backend;
#ifdef SW_HAVE_OPENCL
    if (strncmp(spec, "opencl:", 7) == 0)
        return &sw__opencl_backend;
#endif
    SKIP("the contract-v3 backend tests cover sim and opencl, not %s", spec);
}

typedef struct bdev {
    const sw__backend_ops *ops;
    sw__bdev *d;
    sw__bqueue *q, *cq;
} bdev;

/* Opens the device under test; "" on success, else why (test_fail cannot
 * be called from a helper thread's caller twice, so threads report). */
static const char *bdev_open(bdev *b)
{
    int index = 0;
    b->ops = backend_under_test(&index);
    if (b->ops->version < 3 || !b->ops->copy_queue || !b->ops->queue_idle)
        return "no copy_queue or queue_idle in the ops table";
    sw__device_props props;
    if (b->ops->open(index, &b->d, &props) != SW_OK)
        return sw_last_error();
    b->q = b->ops->default_queue(b->d);
    b->cq = b->ops->copy_queue(b->d);
    if (!b->cq || b->cq == b->q)
        return "the copy queue is missing or is the default queue";
    return "";
}

#define BCHECK(call)                                                          \
    do {                                                                      \
        int rc_ = (call);                                                     \
        if (rc_ != SW_OK) {                                                   \
            snprintf(why, why_len, "%s:%d: %s -> %s: %s", __FILE__, __LINE__, \
                     #call, sw_err_name(rc_), sw_last_error());               \
            return 0;                                                         \
        }                                                                     \
    } while (0)
#define BTRUE(cond)                                                           \
    do {                                                                      \
        if (!(cond)) {                                                        \
            snprintf(why, why_len, "%s:%d: %s is false", __FILE__, __LINE__,  \
                     #cond);                                                  \
            return 0;                                                         \
        }                                                                     \
    } while (0)

/* q waits (on the device) for everything queued on `on` so far. */
static int bwait(bdev *b, sw__bqueue *q, sw__bqueue *on)
{
    sw__bevent *ev = NULL;
    int rc = b->ops->event_record(on, &ev);
    if (rc == SW_OK) {
        rc = b->ops->wait_event(q, ev);
        b->ops->event_release(ev);
    }
    return rc;
}

static sw_kernel_args kargs(sw_kernel k, uintptr_t out, uintptr_t a,
                            size_t n, double alpha)
{
    sw_kernel_args ka;
    memset(&ka, 0, sizeof ka);
    ka.kernel = k;
    ka.dtype = SW_FLOAT32;
    ka.n = n;
    ka.out.base = out;
    ka.a.base = a;
    ka.alpha.f = alpha;
    return ka;
}

/* ------------------------------------------------------------------------
 * Copies beside kernels
 * ---------------------------------------------------------------------- */

/* Rounds of: copy in x (copy queue) -> y = 2x (default queue, after the
 * copy) -> copy out y (copy queue, after the kernel) while the default
 * queue keeps computing z from x; the copy out holds 2x.  1 or 0 (why). */
static int copy_rounds(bdev *b, int rounds, uint32_t seed, char *why,
                       size_t why_len)
{
    const sw__backend_ops *ops = b->ops;
    enum { N = 1 << 18 }; /* 1 MiB of float32 */
    size_t bytes = (size_t)N * 4;
    float *h = malloc(bytes), *got = malloc(bytes);
    BTRUE(h && got);
    uintptr_t x = 0, y = 0, z = 0;
    BCHECK(ops->alloc(b->d, bytes, &x));
    BCHECK(ops->alloc(b->d, bytes, &y));
    BCHECK(ops->alloc(b->d, bytes, &z));
    for (int r = 0; r < rounds; r++) {
        for (size_t i = 0; i < N; i++)
            h[i] = (float)((i * 7 + seed + (uint32_t)r) % 1000);
        memset(got, 0xEE, bytes);
        /* The copy in waits for the last round's kernels reading x. */
        BCHECK(bwait(b, b->cq, b->q));
        BCHECK(ops->write(b->cq, x, 0, h, bytes));
        BCHECK(bwait(b, b->q, b->cq));
        sw_kernel_args k = kargs(SW_KERNEL_SCALE, y, x, N, 2.0);
        BCHECK(ops->launch(b->q, &k));
        BCHECK(bwait(b, b->cq, b->q));
        BCHECK(ops->read(b->cq, got, y, 0, bytes));
        /* The default queue goes on meanwhile. */
        for (int j = 0; j < 4; j++) {
            k = kargs(SW_KERNEL_SCALE, z, x, N, 3.0 + j);
            BCHECK(ops->launch(b->q, &k));
        }
        sw__bevent *ev = NULL;
        BCHECK(ops->event_record(b->cq, &ev));
        int rc = ops->event_wait(ev);
        ops->event_release(ev);
        BCHECK(rc);
        for (size_t i = 0; i < N; i++)
            if (got[i] != 2.0f * h[i]) {
                snprintf(why, why_len,
                         "round %d: element %zu is %g, expected %g", r, i,
                         (double)got[i], 2.0 * h[i]);
                return 0;
            }
    }
    /* z holds 6x once the default queue is done. */
    BCHECK(ops->synchronize(b->q));
    BCHECK(ops->read(b->q, got, z, 0, bytes));
    BCHECK(ops->synchronize(b->q));
    for (size_t i = 0; i < N; i++)
        BTRUE(got[i] == 6.0f * h[i]);
    BCHECK(ops->free(b->d, b->q, x, bytes));
    BCHECK(ops->free(b->d, b->q, y, bytes));
    BCHECK(ops->free(b->d, b->q, z, bytes));
    BCHECK(ops->synchronize(b->q));
    BCHECK(ops->synchronize(b->cq));
    free(h);
    free(got);
    return 1;
}

TEST(backend_copy_queue_overlap)
{
    bdev b;
    const char *err = bdev_open(&b);
    if (err[0])
        FAIL("%s", err);
    char why[300];
    if (!copy_rounds(&b, 8, 1, why, sizeof why))
        FAIL("%s", why);
    b.ops->close(b.d);
}

/* ------------------------------------------------------------------------
 * queue_idle
 * ---------------------------------------------------------------------- */

static int idle_rounds(bdev *b, int rounds, char *why, size_t why_len)
{
    const sw__backend_ops *ops = b->ops;
    size_t big = (size_t)32 << 20;
    uintptr_t m = 0;
    BCHECK(ops->alloc(b->d, big, &m));
    BCHECK(ops->synchronize(b->q));
    for (int r = 0; r < rounds; r++) {
        BTRUE(ops->queue_idle(b->q));
        BTRUE(ops->queue_idle(b->cq));
        /* Idle: on the sim an event recorded now is complete at once (on
         * OpenCL a queue that never ran a command gets a marker). */
        sw__bevent *ev = NULL;
        int done = 0;
        BCHECK(ops->event_record(b->q, &ev));
        BCHECK(ops->event_query(ev, &done));
        ops->event_release(ev);
        BTRUE(done || ops != &sw__sim_backend);

        uint32_t pat = 0x01010101u * (uint32_t)(r + 1);
        BCHECK(ops->fill(b->q, m, 0, big, &pat, 4));
        BCHECK(ops->event_record(b->q, &ev));
        BCHECK(ops->wait_event(b->cq, ev));
        unsigned char host[256];
        memset(host, 0, sizeof host);
        BCHECK(ops->read(b->cq, host, m, big - sizeof host, sizeof host));
        /* The read cannot have run before the fill ended: idle first, then
         * the event, so that the check is race-free. */
        int idle = ops->queue_idle(b->cq);
        BCHECK(ops->event_query(ev, &done));
        BTRUE(!idle || done);
        ops->event_release(ev);
        BCHECK(ops->synchronize(b->cq));
        BTRUE(ops->queue_idle(b->cq));
        /* The copy queue waited for the default queue's only work. */
        BTRUE(ops->queue_idle(b->q));
        for (size_t i = 0; i < sizeof host; i++)
            BTRUE(host[i] == (unsigned char)(r + 1));
    }
    BCHECK(ops->free(b->d, b->q, m, big));
    BCHECK(ops->synchronize(b->q));
    return 1;
}

TEST(backend_queue_idle)
{
    bdev b;
    const char *err = bdev_open(&b);
    if (err[0])
        FAIL("%s", err);
    char why[300];
    if (!idle_rounds(&b, 6, why, sizeof why))
        FAIL("%s", why);
    b.ops->close(b.d);
}

/* ------------------------------------------------------------------------
 * event_elapsed (version 4, where the backend has it)
 * ---------------------------------------------------------------------- */

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

TEST(backend_event_elapsed)
{
    bdev b;
    const char *err = bdev_open(&b);
    if (err[0])
        FAIL("%s", err);
    const sw__backend_ops *ops = b.ops;
    if (ops->version < 4 || !ops->event_elapsed) {
        ops->close(b.d);
        SKIP("%s has no event_elapsed", ops->name);
    }
    size_t big = (size_t)64 << 20;
    uintptr_t m = 0;
    ASSERT_OK(ops->alloc(b.d, big, &m));
    ASSERT_OK(ops->synchronize(b.q));
    for (int r = 0; r < 3; r++) {
        /* The copy queue first waits for a long fill on the default
         * queue: the time between e0 (after the wait) and e1 is the
         * copy's alone, never the wait's. */
        uint32_t pat = 7;
        double t0 = wall();
        ASSERT_OK(ops->fill(b.q, m, 0, big, &pat, 4));
        ASSERT_OK(bwait(&b, b.cq, b.q));
        sw__bevent *e0 = NULL, *e1 = NULL, *e2 = NULL, *e3 = NULL;
        ASSERT_OK(ops->event_record(b.cq, &e0));
        static unsigned char host[1 << 20];
        ASSERT_OK(ops->read(b.cq, host, m, 0, sizeof host));
        ASSERT_OK(ops->event_record(b.cq, &e1));
        ASSERT_OK(ops->event_wait(e1));
        double wall_s = wall() - t0;
        int done = 0;
        ASSERT_OK(ops->event_query(e0, &done));
        ASSERT_TRUE(done);
        double copy_s = -1, none_s = -1, whole_s = -1;
        ASSERT_OK(ops->event_elapsed(e0, e1, &copy_s));
        ASSERT_TRUE(copy_s >= 0 && copy_s <= wall_s);
        /* Nothing between two events on an idle queue. */
        ASSERT_OK(ops->event_record(b.cq, &e2));
        ASSERT_OK(ops->event_record(b.cq, &e3));
        ASSERT_OK(ops->event_wait(e3));
        ASSERT_OK(ops->event_elapsed(e2, e3, &none_s));
        ASSERT_TRUE(none_s >= 0 && none_s <= wall() - t0);
        ASSERT_OK(ops->event_elapsed(e0, e3, &whole_s));
        ASSERT_TRUE(whole_s >= copy_s);
        ops->event_release(e0);
        ops->event_release(e1);
        ops->event_release(e2);
        ops->event_release(e3);
    }
    ASSERT_OK(ops->free(b.d, b.q, m, big));
    ASSERT_OK(ops->synchronize(b.q));
    ops->close(b.d);
}

/* ------------------------------------------------------------------------
 * A chain of queues stalled on one another
 * ---------------------------------------------------------------------- */

/* Q queues, each copying the next one's buffer into its own once that
 * queue's event completes; the last fills its buffer behind a long fill.
 * More queues than the sim's workers: each parks and resumes in turn. */
static int wait_chain(bdev *b, uint32_t seed, char *why, size_t why_len)
{
    const sw__backend_ops *ops = b->ops;
    enum { Q = 16 };
    size_t size = (size_t)64 << 10, big = (size_t)16 << 20;
    sw__bqueue *qs[Q];
    uintptr_t buf[Q], slow = 0;
    for (int i = 0; i < Q; i++) {
        BCHECK(ops->queue_create(b->d, &qs[i]));
        BCHECK(ops->alloc(b->d, size, &buf[i]));
    }
    BCHECK(ops->alloc(b->d, big, &slow));
    BCHECK(ops->synchronize(b->q));
    uint32_t zero = 0, pat = 0x5A000000u | (seed & 0xFFFFFF);
    BCHECK(ops->fill(qs[Q - 1], slow, 0, big, &zero, 4));
    BCHECK(ops->fill(qs[Q - 1], buf[Q - 1], 0, size, &pat, 4));
    sw__bevent *ev = NULL;
    BCHECK(ops->event_record(qs[Q - 1], &ev));
    for (int i = Q - 2; i >= 0; i--) {
        int rc = ops->wait_event(qs[i], ev);
        ops->event_release(ev);
        BCHECK(rc);
        BCHECK(ops->copy(qs[i], buf[i], 0, buf[i + 1], 0, size));
        BCHECK(ops->event_record(qs[i], &ev));
    }
    uint32_t *host = malloc(size);
    BTRUE(host);
    BCHECK(ops->wait_event(b->q, ev));
    ops->event_release(ev);
    BCHECK(ops->read(b->q, host, buf[0], 0, size));
    BCHECK(ops->synchronize(b->q));
    for (size_t i = 0; i < size / 4; i++)
        BTRUE(host[i] == pat);
    free(host);
    for (int i = 0; i < Q; i++) {
        BCHECK(ops->free(b->d, b->q, buf[i], size));
        ops->queue_destroy(qs[i]);
    }
    BCHECK(ops->free(b->d, b->q, slow, big));
    BCHECK(ops->synchronize(b->q));
    return 1;
}

TEST(backend_wait_chain)
{
    bdev b;
    const char *err = bdev_open(&b);
    if (err[0])
        FAIL("%s", err);
    char why[300];
    for (uint32_t r = 0; r < 3; r++)
        if (!wait_chain(&b, r, why, sizeof why))
            FAIL("%s", why);
    b.ops->close(b.d);
}

/* ------------------------------------------------------------------------
 * Threads, each on a device of its own
 * ---------------------------------------------------------------------- */

typedef struct bthread_arg {
    uint32_t seed;
    char why[300];
    int ok;
} bthread_arg;

static void *bthread(void *p)
{
    bthread_arg *a = p;
    bdev b;
    const char *err = bdev_open(&b);
    if (err[0]) {
        snprintf(a->why, sizeof a->why, "%s", err);
        return NULL;
    }
    a->ok = copy_rounds(&b, 3, a->seed, a->why, sizeof a->why) &&
            wait_chain(&b, a->seed, a->why, sizeof a->why) &&
            idle_rounds(&b, 2, a->why, sizeof a->why);
    b.ops->close(b.d);
    return NULL;
}

TEST(thread_backend_copy_queues)
{
    int index = 0;
    (void)backend_under_test(&index); /* skips before any thread starts */
    enum { T = 3 };
    pthread_t th[T];
    bthread_arg args[T];
    for (int i = 0; i < T; i++) {
        memset(&args[i], 0, sizeof args[i]);
        args[i].seed = (uint32_t)i * 11 + 1;
        ASSERT_EQ(pthread_create(&th[i], NULL, bthread, &args[i]), 0);
    }
    for (int i = 0; i < T; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < T; i++)
        if (!args[i].ok)
            FAIL("thread %d: %s", i, args[i].why);
}
