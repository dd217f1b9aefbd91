/*
 * bench_spill.c -- spilling, measured as ratios against baselines taken in
 * the same run (these machines are shared and noisy; absolute times mean
 * little, ratios do).
 *
 *   1. spill and restore bandwidth of large buffers, as a fraction of
 *      memcpy bandwidth between pre-faulted host buffers, and what one
 *      memcpy gets while another runs beside it (the ceiling for a copy
 *      overlapped with memory-bound work on a device that is the CPU);
 *   2. warm launch overhead per resident argument (sw_launch_begin/end),
 *      in ns, against an empty loop, and the queue-taking pin's
 *      (sw_launch_begin_q/_end_q) beside it;
 *   3. victim selection cost per spilled buffer with 10^5 and 10^6 live
 *      buffers (should grow no faster than log n).
 *
 * Usage: bench_spill [--quick]
 */
#include "bench.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static sw_memory_info info(sw_device *dev)
{
    sw_memory_info m;
    CHECK(sw_memory_info_get(dev, &m));
    return m;
}

/* Keeps the optimizer from deleting the baseline loops. */
static volatile uint64_t sink;

/* ------------------------------------------------------------------------
 * 1. Bandwidth
 * ---------------------------------------------------------------------- */

static double memcpy_gbps(size_t size, int reps)
{
    char *a = malloc(size), *b = malloc(size);
    if (!a || !b)
        exit(1);
    memset(a, 1, size);
    memset(b, 2, size);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        memcpy(b, a, size);
        double dt = now() - t0;
        sink += (uint64_t)b[size / 2];
        double g = (double)size / dt / 1e9;
        if (g > best)
            best = g;
    }
    free(a);
    free(b);
    return best;
}

/* One of two memcpy loops started together: its best rate while the other
 * runs. */
typedef struct {
    size_t size;
    int reps;
    atomic_int *ready;
    double best;
} pair_arg;

static void *pair_copier(void *p)
{
    pair_arg *a = p;
    char *x = malloc(a->size), *y = malloc(a->size);
    if (!x || !y)
        exit(1);
    memset(x, 1, a->size);
    memset(y, 2, a->size);
    atomic_fetch_add(a->ready, 1);
    while (atomic_load(a->ready) < 2)
        ;
    for (int r = 0; r < a->reps; r++) {
        double t0 = now();
        memcpy(y, x, a->size);
        double g = (double)a->size / (now() - t0) / 1e9;
        if (g > a->best)
            a->best = g;
    }
    sink += (uint64_t)y[a->size / 2];
    free(x);
    free(y);
    return NULL;
}

/* Per copy, the slower of two memcpys running at once (best of reps). */
static double memcpy_pair_gbps(size_t size, int reps)
{
    atomic_int ready = 0;
    pair_arg a[2] = {{size, reps, &ready, 0}, {size, reps, &ready, 0}};
    pthread_t th;
    if (pthread_create(&th, NULL, pair_copier, &a[1]) != 0)
        return 0;
    pair_copier(&a[0]);
    pthread_join(th, NULL);
    return a[0].best < a[1].best ? a[0].best : a[1].best;
}

static void bench_bandwidth(sw_device *dev, size_t size, int nbuf, int rounds)
{
    sw_buffer **bufs = calloc((size_t)nbuf, sizeof *bufs);
    char *pattern = malloc(size);
    memset(pattern, 0x5a, size);
    /* Half fit: allocating the second half spills the first, and touching
     * them in turn then spills one and restores one each time. */
    CHECK(sw_set_memory_budget(dev, (uint64_t)size * (uint64_t)nbuf / 2));
    for (int i = 0; i < nbuf; i++) {
        CHECK(sw_buffer_alloc(dev, size, "bench", &bufs[i]));
        CHECK(sw_buffer_write(bufs[i], 0, pattern, size));
    }
    /* Round 0 apart: its spills copy into host memory the pool does not
     * have yet (the pool holds what restores gave back, and no restore has
     * run), so they pay its page faults; later rounds reuse it, as a
     * workload past its first steps does.  Each phase ends with a
     * synchronize, so that its copies' time is counted in it. */
    sw_memory_info m0 = info(dev), m1 = m0;
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < nbuf; i++) {
            sw_devmem p;
            CHECK(sw_buffer_device_ptr(bufs[i], &p));
        }
        if (r == 0) {
            CHECK(sw_device_synchronize(dev));
            m1 = info(dev);
        }
    }
    CHECK(sw_device_synchronize(dev));
    sw_memory_info m2 = info(dev);
    double spill0 = (double)(m1.spilled_bytes_total - m0.spilled_bytes_total) /
                    (m1.spill_seconds - m0.spill_seconds) / 1e9;
    double restore0 =
        (double)(m1.restored_bytes_total - m0.restored_bytes_total) /
        (m1.restore_seconds - m0.restore_seconds) / 1e9;
    double spill = (double)(m2.spilled_bytes_total - m1.spilled_bytes_total) /
                   (m2.spill_seconds - m1.spill_seconds) / 1e9;
    double restore =
        (double)(m2.restored_bytes_total - m1.restored_bytes_total) /
        (m2.restore_seconds - m1.restore_seconds) / 1e9;
    double base = memcpy_gbps(size, 5);
    printf("bandwidth (%zu MiB buffers, %llu spills, %llu restores after a "
           "first round)\n",
           size >> 20, (unsigned long long)(m2.spills - m1.spills),
           (unsigned long long)(m2.restores - m1.restores));
    printf("  memcpy baseline        %8.2f GB/s\n", base);
    printf("  spill   (device->host) %8.2f GB/s   ratio %.2f  (goal >= 0.8)\n",
           spill, spill / base);
    printf("  restore (host->device) %8.2f GB/s   ratio %.2f  (goal >= 0.8)\n",
           restore, restore / base);
    printf("  first round, host pool filling: spill %.2f, restore %.2f of "
           "memcpy\n", spill0 / base, restore0 / base);
    double pair = memcpy_pair_gbps(size, 5);
    printf("  memcpy beside another  %8.2f GB/s   ratio %.2f  (the most a copy "
           "overlapped\n                                               with "
           "memory-bound work on the CPU can get)\n",
           pair, pair / base);
    CHECK(sw_set_memory_budget(dev, 0));
    for (int i = 0; i < nbuf; i++)
        CHECK(sw_buffer_free(bufs[i]));
    CHECK(sw_empty_cache(dev));
    free(bufs);
    free(pattern);
}

/* ------------------------------------------------------------------------
 * 2. Warm launch overhead
 * ---------------------------------------------------------------------- */

static double launch_ns(sw_device *dev, sw_buffer **bufs, size_t n, long iters)
{
    sw_devmem ptrs[16];
    double t0 = now();
    for (long i = 0; i < iters; i++) {
        CHECK(sw_launch_begin(dev, bufs, n, ptrs));
        sink += ptrs[0].base;
        CHECK(sw_launch_end(dev, bufs, n));
    }
    return (now() - t0) / (double)iters * 1e9;
}

/* The same, alternating between two sets of n handles: sw_launch_begin
 * then decodes every handle (its memo of the last launch's handles never
 * hits). */
static double launch_alt_ns(sw_device *dev, sw_buffer **set0,
                            sw_buffer **set1, size_t n, long iters)
{
    sw_devmem ptrs[16];
    double t0 = now();
    for (long i = 0; i < iters; i++) {
        sw_buffer **b = (i & 1) ? set1 : set0;
        CHECK(sw_launch_begin(dev, b, n, ptrs));
        sink += ptrs[0].base;
        CHECK(sw_launch_end(dev, b, n));
    }
    return (now() - t0) / (double)iters * 1e9;
}

/* The queue-taking pin (sw_launch_begin_q/_end_q) on q, the same way. */
static double launch_q_ns(sw_queue *q, sw_buffer **bufs, size_t n,
                          long iters)
{
    sw_devmem ptrs[16];
    double t0 = now();
    for (long i = 0; i < iters; i++) {
        CHECK(sw_launch_begin_q(q, bufs, n, ptrs));
        sink += ptrs[0].base;
        CHECK(sw_launch_end_q(q, bufs, n));
    }
    return (now() - t0) / (double)iters * 1e9;
}

static double launch_q_alt_ns(sw_queue *q, sw_buffer **set0,
                              sw_buffer **set1, size_t n, long iters)
{
    sw_devmem ptrs[16];
    double t0 = now();
    for (long i = 0; i < iters; i++) {
        sw_buffer **b = (i & 1) ? set1 : set0;
        CHECK(sw_launch_begin_q(q, b, n, ptrs));
        sink += ptrs[0].base;
        CHECK(sw_launch_end_q(q, b, n));
    }
    return (now() - t0) / (double)iters * 1e9;
}

static void bench_launch(sw_device *dev, long iters)
{
    enum { N = 16 };
    sw_buffer *bufs[N], *other[N];
    for (int i = 0; i < N; i++) {
        CHECK(sw_buffer_alloc(dev, 4096, "warm", &bufs[i]));
        CHECK(sw_buffer_alloc(dev, 4096, "warm", &other[i]));
    }
    double t0 = now();
    for (long i = 0; i < iters; i++)
        sink += (uint64_t)i;
    double empty = (now() - t0) / (double)iters * 1e9;
    (void)launch_ns(dev, bufs, N, iters / 10); /* warm up */
    /* The best of many short loops, the four interleaved: on a shared
     * (virtual) machine a loop that lost the CPU, or ran beside a noisy
     * neighbour, is not the launch's cost, and a few ns per argument is
     * lost in that noise unless each figure is the minimum of many. */
    sw_queue *q = NULL;
    CHECK(sw_queue_create(dev, &q));
    (void)launch_q_ns(q, bufs, N, iters / 10);
    (void)launch_q_ns(q, other, N, iters / 10);
    enum { REPS = 40 };
    double t1 = 1e30, tn = 1e30, a1 = 1e30, an = 1e30;
    double q1 = 1e30, qn = 1e30, qa1 = 1e30, qan = 1e30;
    for (int r = 0; r < REPS; r++) {
        t1 = fmin(t1, launch_ns(dev, bufs, 1, iters / REPS));
        tn = fmin(tn, launch_ns(dev, bufs, N, iters / REPS));
        a1 = fmin(a1, launch_alt_ns(dev, bufs, other, 1, iters / REPS));
        an = fmin(an, launch_alt_ns(dev, bufs, other, N, iters / REPS));
        q1 = fmin(q1, launch_q_ns(q, bufs, 1, iters / REPS));
        qn = fmin(qn, launch_q_ns(q, bufs, N, iters / REPS));
        qa1 = fmin(qa1, launch_q_alt_ns(q, bufs, other, 1, iters / REPS));
        qan = fmin(qan, launch_q_alt_ns(q, bufs, other, N, iters / REPS));
    }
    CHECK(sw_queue_release(q));
    double per_arg = (tn - t1) / (N - 1);
    printf("warm launch (begin+end, all arguments resident, %ld iterations)\n",
           iters);
    printf("  empty loop             %8.2f ns\n", empty);
    printf("  1 argument             %8.2f ns per launch\n", t1 - empty);
    printf("  %d arguments           %8.2f ns per launch\n", N, tn - empty);
    printf("  per extra argument     %8.2f ns  (goal <= 5 ns)\n", per_arg);
    printf("  the same, alternating two sets of handles (each decoded):\n");
    printf("  per extra argument     %8.2f ns\n", (an - a1) / (N - 1));
    double qper = (qn - q1) / (N - 1);
    printf("queue-taking pins (sw_launch_begin_q/_end_q on a queue):\n");
    printf("  1 argument             %8.2f ns per launch\n", q1 - empty);
    printf("  %d arguments           %8.2f ns per launch\n", N, qn - empty);
    printf("  per extra argument     %8.2f ns, %+.2f ns against "
           "sw_launch_begin (goal <= +5 ns)\n", qper, qper - per_arg);
    printf("  alternating two sets   %8.2f ns per extra argument, %+.2f ns "
           "against sw_launch_begin's\n", (qan - qa1) / (N - 1),
           (qan - qa1) / (N - 1) - (an - a1) / (N - 1));
    for (int i = 0; i < N; i++) {
        CHECK(sw_buffer_free(bufs[i]));
        CHECK(sw_buffer_free(other[i]));
    }
}

/* ------------------------------------------------------------------------
 * 3. Victim selection
 * ---------------------------------------------------------------------- */

/* Seconds per spilled buffer when `nspill` small buffers are spilled out
 * of n live ones, a tenth of which were touched in random order first (so
 * the LRU heap has stale keys to repair, as in real use). */
static double victim_cost(sw_device *dev, size_t n, size_t nspill)
{
    sw_buffer **bufs = malloc(n * sizeof *bufs);
    for (size_t i = 0; i < n; i++)
        CHECK(sw_buffer_alloc(dev, 512, NULL, &bufs[i]));
    srand(42);
    for (size_t i = 0; i < n / 10; i++) {
        sw_devmem p;
        CHECK(sw_buffer_device_ptr(bufs[(size_t)rand() % n], &p));
    }
    CHECK(sw_empty_cache(dev));
    sw_memory_info m = info(dev);
    CHECK(sw_set_memory_budget(dev, m.in_use));
    /* One allocation of nspill * 512 bytes spills nspill buffers.  The
     * copies' own time (spill_seconds) is taken out: what is left is
     * choosing victims and the bookkeeping around each. */
    sw_buffer *big;
    double t0 = now();
    CHECK(sw_buffer_alloc(dev, nspill * 512, "big", &big));
    sw_memory_info m1 = info(dev);
    double dt = now() - t0 - (m1.spill_seconds - m.spill_seconds);
    if (m1.spills - m.spills < nspill)
        fprintf(stderr, "warning: %llu spills, expected %zu\n",
                (unsigned long long)(m1.spills - m.spills), nspill);
    CHECK(sw_buffer_free(big));
    CHECK(sw_set_memory_budget(dev, 0));
    for (size_t i = 0; i < n; i++)
        CHECK(sw_buffer_free(bufs[i]));
    CHECK(sw_empty_cache(dev));
    free(bufs);
    return dt / (double)(m1.spills - m.spills);
}

static void bench_victims(sw_device *dev, size_t small, size_t large,
                          size_t nspill)
{
    double a = victim_cost(dev, small, nspill);
    double b = victim_cost(dev, large, nspill);
    printf("victim selection (%zu spills of 512-byte buffers in one batch, copy time excluded)\n",
           nspill);
    printf("  %8zu live buffers  %8.2f us per spilled buffer\n", small,
           a * 1e6);
    printf("  %8zu live buffers  %8.2f us per spilled buffer\n", large,
           b * 1e6);
    printf("  growth %.2fx for %.0fx more buffers  (log ratio %.2f; linear "
           "would be %.0fx)\n", b / a, (double)large / (double)small,
           __builtin_log((double)large) / __builtin_log((double)small),
           (double)large / (double)small);
    printf("\n");
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    /* Room for 10^6 small buffers and the bandwidth test's buffers. */
    setenv("SPILLWAY_SIM_MEMORY", "2G", 0);
    sw_device *dev;
    CHECK(sw_device_open(NULL, &dev));
    printf("spillway bench_spill on %s (%s)%s\n\n", sw_device_name(dev),
           sw_device_description(dev), quick ? ", quick" : "");
    bench_bandwidth(dev, quick ? (size_t)16 << 20 : (size_t)64 << 20, 8,
                    quick ? 2 : 4);
    printf("\n");
    bench_launch(dev, quick ? 200000 : 2000000);
    printf("\n");
    bench_victims(dev, quick ? 10000 : 100000, quick ? 100000 : 1000000,
                  1000);
    CHECK(sw_device_close(dev));
    return 0;
}
