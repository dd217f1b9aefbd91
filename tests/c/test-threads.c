/*
 * test-threads.c -- concurrency (run under ThreadSanitizer by the Makefile:
 * `test_spillway thread`).  Every thread checks the data it reads; a failed
 * assertion in any thread ends the test process with its report.
 */
#include "test.h"
#include "tests.h"

#include <pthread.h>

/* Fewer iterations under the sanitizers keep each test to a few seconds. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SLOW_BUILD 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define SLOW_BUILD 1
#endif
#endif
#ifndef SLOW_BUILD
#define SLOW_BUILD 0
#endif
#define ITERS(fast, slow) (SLOW_BUILD ? (slow) : (fast))

static void start_threads(pthread_t *t, int n, void *(*fn)(void *),
                          void *args, size_t arg_size)
{
    for (int i = 0; i < n; i++)
        ASSERT_EQ(pthread_create(&t[i], NULL, fn,
                                 (char *)args + (size_t)i * arg_size),
                  0);
}

static void join_threads(pthread_t *t, int n)
{
    for (int i = 0; i < n; i++)
        ASSERT_EQ(pthread_join(t[i], NULL), 0);
}

/* ------------------------------------------------------------------------
 * Allocation, host I/O and ops from many threads
 * ---------------------------------------------------------------------- */

typedef struct {
    sw_device *dev;
    int id;
    int iters;
    uint64_t allocs; /* successful allocations made by this thread */
} worker_arg;

#define RING 4

static void *alloc_rw_worker(void *p)
{
    worker_arg *w = p;
    uint64_t rng = 0x1234567ull * (uint64_t)(w->id + 1);
    sw_buffer *ring[RING] = {0};
    uint32_t seeds[RING] = {0};
    char tag[32];
    snprintf(tag, sizeof tag, "thread-%d", w->id);
    for (int it = 0; it < w->iters; it++) {
        int slot = it % RING;
        if (ring[slot] != NULL) {
            test_expect_pattern(ring[slot], seeds[slot]);
            ASSERT_OK(sw_buffer_free(ring[slot]));
        }
        size_t size = (size_t)(test_rand(&rng) % 65536);
        if (it % 17 == 0)
            size = 0;
        ring[slot] = test_alloc(w->dev, size, tag);
        w->allocs++;
        /* Each thread its own patterns. */
        seeds[slot] = ((uint32_t)w->id << 20) ^ (uint32_t)it;
        test_write_pattern(ring[slot], seeds[slot]);
        /* Re-read a random live buffer, sometimes through a view. */
        int other = (int)(test_rand(&rng) % RING);
        if (ring[other] != NULL) {
            size_t osize = 0;
            ASSERT_OK(sw_buffer_size(ring[other], &osize));
            if (osize > 16 && it % 3 == 0) {
                size_t off = (size_t)(test_rand(&rng) % (osize - 8));
                size_t len = osize - off;
                sw_buffer *v = NULL;
                ASSERT_OK(sw_buffer_view(ring[other], off, len, &v));
                unsigned char *got = malloc(len);
                unsigned char *want = malloc(osize);
                ASSERT_NOT_NULL(got);
                ASSERT_NOT_NULL(want);
                ASSERT_OK(sw_buffer_read(v, 0, got, len));
                test_pattern(want, osize, seeds[other]);
                ASSERT_MEM_EQ(got, want + off, len);
                free(got);
                free(want);
                ASSERT_OK(sw_buffer_free(v));
            } else {
                test_expect_pattern(ring[other], seeds[other]);
            }
        }
    }
    for (int s = 0; s < RING; s++) {
        if (ring[s] != NULL) {
            test_expect_pattern(ring[s], seeds[s]);
            ASSERT_OK(sw_buffer_free(ring[s]));
        }
    }
    return NULL;
}

static void expect_float_buffer(sw_buffer *b, size_t n, float want,
                                const char *what, int id)
{
    float *h = malloc(n * sizeof(float));
    ASSERT_NOT_NULL(h);
    ASSERT_OK(sw_buffer_read(b, 0, h, n * sizeof(float)));
    for (size_t i = 0; i < n; i++)
        if (h[i] != want)
            FAIL("thread %d, %s: element %zu is %g, expected %g", id, what, i,
                 (double)h[i], (double)want);
    free(h);
}

/* Own buffers; fill, add, axpy, sum; every result checked. */
static void *ops_worker(void *p)
{
    worker_arg *w = p;
    const size_t n = 4096 + (size_t)w->id * 17;
    sw_buffer *x = test_alloc(w->dev, n * sizeof(float), "ops-x");
    sw_buffer *y = test_alloc(w->dev, n * sizeof(float), "ops-y");
    sw_buffer *out = test_alloc(w->dev, n * sizeof(float), "ops-out");
    w->allocs += 3;
    for (int it = 0; it < w->iters; it++) {
        float fx = (float)(it % 64 + w->id), fy = (float)(2 * (it % 32));
        sw_scalar sx = {.f = fx}, sy = {.f = fy};
        ASSERT_OK(sw_op_fill(x, SW_FLOAT32, n, sx));
        ASSERT_OK(sw_op_fill(y, SW_FLOAT32, n, sy));
        ASSERT_OK(sw_op_add(out, x, y, SW_FLOAT32, n));
        /* y <- 0.5 x + y */
        sw_scalar half = {.f = 0.5};
        ASSERT_OK(sw_op_axpy(half, x, y, SW_FLOAT32, n));
        sw_scalar sum;
        ASSERT_OK(sw_op_sum(out, SW_FLOAT32, n, &sum));
        if (sum.f != (double)(fx + fy) * (double)n)
            FAIL("thread %d iteration %d: sum %.17g, expected %.17g", w->id,
                 it, sum.f, (double)(fx + fy) * (double)n);
        if (it % 8 == 0) {
            expect_float_buffer(out, n, fx + fy, "add", w->id);
            expect_float_buffer(y, n, 0.5f * fx + fy, "axpy", w->id);
        }
    }
    ASSERT_OK(sw_buffer_free(x));
    ASSERT_OK(sw_buffer_free(y));
    ASSERT_OK(sw_buffer_free(out));
    return NULL;
}

TEST(thread_alloc_free_rw)
{
    sw_device *dev = test_device();
    enum { NW = 8, NO = 2 };
    pthread_t tw[NW], to[NO];
    worker_arg wa[NW], oa[NO];
    for (int i = 0; i < NW; i++)
        wa[i] = (worker_arg){dev, i, ITERS(300, 100), 0};
    for (int i = 0; i < NO; i++)
        oa[i] = (worker_arg){dev, 100 + i, ITERS(100, 30), 0};
    start_threads(tw, NW, alloc_rw_worker, wa, sizeof wa[0]);
    start_threads(to, NO, ops_worker, oa, sizeof oa[0]);
    join_threads(tw, NW);
    join_threads(to, NO);

    uint64_t total = 0;
    for (int i = 0; i < NW; i++)
        total += wa[i].allocs;
    for (int i = 0; i < NO; i++)
        total += oa[i].allocs;
    sw_memory_info info = test_info_synced(dev);
    ASSERT_UEQ(info.in_use, 0);
    ASSERT_UEQ(info.allocs, info.frees);
    /* Every allocation counted once (0-byte ones may or may not be). */
    ASSERT_ULE(info.allocs, total);
    ASSERT_UGE(info.allocs, total - (uint64_t)NW * (ITERS(300, 100) / 17 + 1));
    ASSERT_UGT(info.peak, 0);
}

/* Allocate and free random sizes, with a short write/read each. */
static void *churn_worker(void *p)
{
    worker_arg *w = p;
    uint64_t rng = 977ull * (uint64_t)(w->id + 3);
    for (int it = 0; it < w->iters; it++) {
        size_t size = 1 + (size_t)(test_rand(&rng) % (256 * 1024));
        sw_buffer *b = test_alloc(w->dev, size, "churn");
        w->allocs++;
        uint64_t v = test_rand(&rng);
        ASSERT_OK(sw_buffer_write(b, size >= 8 ? size - 8 : 0, &v,
                                  size >= 8 ? 8 : size));
        uint64_t back = 0;
        ASSERT_OK(sw_buffer_read(b, size >= 8 ? size - 8 : 0, &back,
                                 size >= 8 ? 8 : size));
        ASSERT_EQ(memcmp(&back, &v, size >= 8 ? 8 : size), 0);
        ASSERT_OK(sw_buffer_free(b));
        if (it % 25 == 0)
            ASSERT_OK(sw_empty_cache(w->dev));
    }
    return NULL;
}

typedef struct {
    sw_device *dev;
    volatile int *stop;
    int rounds;
} watcher_arg;

/* Reads the accounting while others work: it is always self-consistent. */
static void *watcher(void *p)
{
    watcher_arg *w = p;
    while (!__atomic_load_n(w->stop, __ATOMIC_ACQUIRE)) {
        sw_memory_info i = test_info(w->dev);
        ASSERT_ULE(i.in_use, i.peak);
        ASSERT_ULE(i.frees, i.allocs);
        if (w->rounds % 10 == 0)
            ASSERT_OK(sw_reset_peak(w->dev));
        w->rounds++;
    }
    return NULL;
}

TEST(thread_ops)
{
    sw_device *dev = test_device();
    enum { NO = 4, NC = 2 };
    pthread_t to[NO], tc[NC], tw;
    worker_arg oa[NO], ca[NC];
    for (int i = 0; i < NO; i++)
        oa[i] = (worker_arg){dev, i, ITERS(150, 40), 0};
    for (int i = 0; i < NC; i++)
        ca[i] = (worker_arg){dev, 10 + i, ITERS(300, 80), 0};
    volatile int stop = 0;
    watcher_arg wa = {dev, &stop, 0};
    ASSERT_EQ(pthread_create(&tw, NULL, watcher, &wa), 0);
    start_threads(to, NO, ops_worker, oa, sizeof oa[0]);
    start_threads(tc, NC, churn_worker, ca, sizeof ca[0]);
    join_threads(to, NO);
    join_threads(tc, NC);
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    ASSERT_EQ(pthread_join(tw, NULL), 0);
    ASSERT_GT(wa.rounds, 0);

    uint64_t total = 0;
    for (int i = 0; i < NO; i++)
        total += oa[i].allocs;
    for (int i = 0; i < NC; i++)
        total += ca[i].allocs;
    sw_memory_info info = test_info_synced(dev);
    ASSERT_UEQ(info.in_use, 0);
    ASSERT_UEQ(info.allocs, total);
    ASSERT_UEQ(info.frees, total);
}

/* ------------------------------------------------------------------------
 * A budget under contention
 * ---------------------------------------------------------------------- */

typedef struct {
    sw_device *dev;
    int id;
    int iters;
    uint64_t budget;
    int ooms;
    int oks;
} budget_arg;

static void *budget_worker(void *p)
{
    budget_arg *w = p;
    uint64_t rng = 31ull * (uint64_t)(w->id + 1);
    sw_buffer *held[3] = {0};
    uint32_t seeds[3] = {0};
    for (int it = 0; it < w->iters; it++) {
        int slot = it % 3;
        if (held[slot] != NULL) {
            test_expect_pattern(held[slot], seeds[slot]);
            ASSERT_OK(sw_buffer_free(held[slot]));
            held[slot] = NULL;
        }
        size_t size = (size_t)(64 + test_rand(&rng) % 448) * 1024;
        sw_buffer *b = (sw_buffer *)(uintptr_t)1;
        int rc = sw_buffer_alloc(w->dev, size, "budgeted", &b);
        if (rc == SW_ERR_OOM) {
            ASSERT_NULL(b);
            ASSERT_STR_ICONTAINS(sw_last_error(), "budget");
            w->ooms++;
        } else {
            ASSERT_OK(rc);
            held[slot] = b;
            seeds[slot] = (uint32_t)(w->id * 100000 + it);
            test_write_pattern(b, seeds[slot]);
            w->oks++;
        }
        sw_memory_info i = test_info(w->dev);
        if (i.in_use + i.cached > w->budget)
            FAIL("in_use %" PRIu64 " + cached %" PRIu64 " > budget %" PRIu64,
                 i.in_use, i.cached, w->budget);
    }
    for (int s = 0; s < 3; s++)
        if (held[s] != NULL) {
            test_expect_pattern(held[s], seeds[s]);
            ASSERT_OK(sw_buffer_free(held[s]));
        }
    return NULL;
}

TEST(thread_budget)
{
    sw_device *dev = test_device();
    const uint64_t budget = 1ull << 20;
    ASSERT_OK(sw_set_memory_budget(dev, budget));
    enum { NT = 6 };
    pthread_t t[NT];
    budget_arg a[NT];
    for (int i = 0; i < NT; i++)
        a[i] = (budget_arg){dev, i, ITERS(200, 60), budget, 0, 0};
    start_threads(t, NT, budget_worker, a, sizeof a[0]);
    join_threads(t, NT);
    int ooms = 0, oks = 0;
    for (int i = 0; i < NT; i++) {
        ooms += a[i].ooms;
        oks += a[i].oks;
    }
    /* Even one thread holding three buffers of ~288 KiB on average passes
     * 1 MiB now and then: the budget must have bitten (an allocation failed,
     * or, where spilling makes room, a buffer was spilled), and some
     * allocations worked. */
    sw_memory_info info = test_info_synced(dev);
    ASSERT_TRUE(ooms > 0 || info.spills > 0);
    ASSERT_GT(oks, 0);
    ASSERT_UEQ(info.in_use, 0);
    ASSERT_UEQ(info.ooms, (uint64_t)ooms);
    ASSERT_UEQ(info.allocs, (uint64_t)oks);
    ASSERT_ULE(info.peak, budget);
    ASSERT_ULE(info.cached, budget);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
}

/* ------------------------------------------------------------------------
 * Peak scopes across threads
 * ---------------------------------------------------------------------- */

enum { PEAK_THREADS = 8 };

typedef struct {
    sw_device *dev;
    int id;
    pthread_barrier_t *barrier;
    sw_peak_scope **scopes; /* one per thread, ended by the next thread */
    uint64_t ended_peak;
} peak_arg;

static void *peak_worker(void *p)
{
    peak_arg *w = p;
    ASSERT_OK(sw_peak_scope_begin(w->dev, &w->scopes[w->id]));
    sw_buffer *b = test_alloc(w->dev, 64 * 1024, "peak");
    pthread_barrier_wait(w->barrier); /* all 8 buffers live here */
    ASSERT_OK(sw_buffer_free(b));
    pthread_barrier_wait(w->barrier);
    /* End the scope another thread began. */
    int other = (w->id + 1) % PEAK_THREADS;
    ASSERT_OK(sw_peak_scope_end(w->scopes[other], &w->ended_peak));
    return NULL;
}

TEST(thread_peak_scopes)
{
    sw_device *dev = test_device();
    sw_peak_scope *outer = NULL;
    ASSERT_OK(sw_peak_scope_begin(dev, &outer));
    pthread_barrier_t barrier;
    ASSERT_EQ(pthread_barrier_init(&barrier, NULL, PEAK_THREADS), 0);
    sw_peak_scope *scopes[PEAK_THREADS] = {0};
    pthread_t t[PEAK_THREADS];
    peak_arg a[PEAK_THREADS];
    for (int i = 0; i < PEAK_THREADS; i++)
        a[i] = (peak_arg){dev, i, &barrier, scopes, 0};
    start_threads(t, PEAK_THREADS, peak_worker, a, sizeof a[0]);
    join_threads(t, PEAK_THREADS);
    pthread_barrier_destroy(&barrier);
    /* Every scope was open while all eight buffers were live. */
    for (int i = 0; i < PEAK_THREADS; i++)
        ASSERT_UEQ(a[i].ended_peak, PEAK_THREADS * 64 * 1024);
    uint64_t p = 0;
    ASSERT_OK(sw_peak_scope_end(outer, &p));
    ASSERT_UEQ(p, PEAK_THREADS * 64 * 1024);
    ASSERT_UEQ(test_info(dev).peak, PEAK_THREADS * 64 * 1024);
}

/* ------------------------------------------------------------------------
 * Opening and closing from many threads; sharing one buffer
 * ---------------------------------------------------------------------- */

typedef struct {
    sw_device *expect;
    int iters;
} open_arg;

static void *open_close_worker(void *p)
{
    open_arg *w = p;
    for (int i = 0; i < w->iters; i++) {
        sw_device *d = NULL;
        ASSERT_OK(sw_device_open(test_device_spec(), &d));
        ASSERT_PTR_EQ(d, w->expect);
        sw_memory_info info;
        ASSERT_OK(sw_memory_info_get(d, &info));
        ASSERT_UGE(info.in_use, 4096);
        ASSERT_OK(sw_device_close(d));
    }
    return NULL;
}

TEST(thread_open_close)
{
    sw_device *dev = test_device();
    sw_buffer *keep = test_alloc(dev, 4096, "keep");
    test_write_pattern(keep, 12);
    enum { NT = 8 };
    pthread_t t[NT];
    open_arg a[NT];
    for (int i = 0; i < NT; i++)
        a[i] = (open_arg){dev, ITERS(500, 100)};
    start_threads(t, NT, open_close_worker, a, sizeof a[0]);
    join_threads(t, NT);
    test_expect_pattern(keep, 12);
    ASSERT_OK(sw_buffer_free(keep));
}

typedef struct {
    sw_buffer *shared;
    const unsigned char *model;
    size_t size;
    int id;
    int iters;
} share_arg;

static void *share_worker(void *p)
{
    share_arg *w = p;
    uint64_t rng = 7ull * (uint64_t)(w->id + 1);
    unsigned char *got = malloc(w->size);
    ASSERT_NOT_NULL(got);
    for (int i = 0; i < w->iters; i++) {
        size_t off = (size_t)(test_rand(&rng) % w->size);
        size_t len = (size_t)(test_rand(&rng) % (w->size - off + 1));
        sw_buffer *v = NULL;
        ASSERT_OK(sw_buffer_view(w->shared, off, len, &v));
        ASSERT_OK(sw_buffer_read(v, 0, got, len));
        ASSERT_MEM_EQ(got, w->model + off, len);
        ASSERT_OK(sw_buffer_retain(v));
        ASSERT_OK(sw_buffer_free(v));
        ASSERT_OK(sw_buffer_free(v));
    }
    free(got);
    /* Drop the reference the main thread took for this thread. */
    ASSERT_OK(sw_buffer_free(w->shared));
    return NULL;
}

TEST(thread_shared_buffer_refs)
{
    sw_device *dev = test_device();
    enum { NT = 8, SIZE = 65536 };
    sw_buffer *shared = test_alloc(dev, SIZE, "shared");
    static unsigned char model[SIZE];
    test_pattern(model, SIZE, 2024);
    ASSERT_OK(sw_buffer_write(shared, 0, model, SIZE));
    for (int i = 0; i < NT; i++)
        ASSERT_OK(sw_buffer_retain(shared));
    pthread_t t[NT];
    share_arg a[NT];
    for (int i = 0; i < NT; i++)
        a[i] = (share_arg){shared, model, SIZE, i, ITERS(300, 100)};
    start_threads(t, NT, share_worker, a, sizeof a[0]);
    join_threads(t, NT);
    /* Still alive: the main thread's reference. */
    sw_memory_info info = test_info(dev);
    ASSERT_UEQ(info.in_use, SIZE);
    ASSERT_UEQ(info.frees, 0);
    test_expect_pattern(shared, 2024);
    ASSERT_OK(sw_buffer_free(shared));
    ASSERT_ERR(sw_buffer_free(shared), SW_ERR_INVALID_HANDLE);
    info = test_info(dev);
    ASSERT_UEQ(info.in_use, 0);
    ASSERT_UEQ(info.frees, 1);
}
