/*
 * bench_lock.c -- what one device's lock costs threads: small buffers
 * allocated and released (sw_buffer_alloc + sw_buffer_free of 1 KiB) from
 * 1 thread, from 2 threads on one device, and from 2 threads on two
 * devices (sim:0 and sim:1, each its own lock), as ratios to 1 thread in
 * the same run.
 *
 * Two threads on two devices share nothing of spillway's but the handle
 * pool (per-thread batches): their ratio is what the machine allows.  Two
 * on one device take its one mutex (DESIGN.md: one mutex per device
 * protects its state) for every call, and hand the lock and the device's
 * state back and forth between their cores: the gap between the two
 * ratios is that hand-over.  bench_threads.py shows the same from Python.
 *
 * Usage: bench_lock [--quick]
 */
#include "bench.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    sw_device *dev;
    long n;
    pthread_barrier_t *start;
    double t0, t1;
} worker;

static void *work(void *p)
{
    worker *w = p;
    pthread_barrier_wait(w->start);
    w->t0 = now();
    for (long i = 0; i < w->n; i++) {
        sw_buffer *b;
        CHECK(sw_buffer_alloc(w->dev, 1024, "lock", &b));
        CHECK(sw_buffer_free(b));
    }
    w->t1 = now();
    return NULL;
}

/* Calls per second of all threads together, from the first start to the
 * last end: the best of 5 runs. */
static double run(sw_device *const *devs, int threads, long n)
{
    double best = 0;
    for (int r = 0; r < 5; r++) {
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, (unsigned)threads);
        worker w[2];
        pthread_t t[2];
        for (int i = 0; i < threads; i++) {
            w[i] = (worker){devs[i], n, &start, 0, 0};
            if (pthread_create(&t[i], NULL, work, &w[i]) != 0) {
                perror("pthread_create");
                exit(1);
            }
        }
        double t0 = 0, t1 = 0;
        for (int i = 0; i < threads; i++) {
            pthread_join(t[i], NULL);
            if (i == 0 || w[i].t0 < t0)
                t0 = w[i].t0;
            if (w[i].t1 > t1)
                t1 = w[i].t1;
        }
        pthread_barrier_destroy(&start);
        double rate = (double)threads * (double)n / (t1 - t0);
        if (rate > best)
            best = rate;
    }
    return best;
}

int main(int argc, char **argv)
{
    long n = argc > 1 && strcmp(argv[1], "--quick") == 0 ? 100000 : 1000000;
    /* Two simulated devices, before the backend first counts them. */
    setenv("SPILLWAY_SIM_DEVICES", "2", 1);
    sw_device *d0, *d1;
    CHECK(sw_device_open("sim:0", &d0));
    CHECK(sw_device_open("sim:1", &d1));
    sw_device *one[2] = {d0, d0}, *two[2] = {d0, d1};
    (void)run(one, 1, n / 10); /* warm: the pool, the caches */
    double r1 = run(one, 1, n);
    double same = run(one, 2, n);
    double apart = run(two, 2, n);
    printf("bench_lock: 1 KiB sw_buffer_alloc + sw_buffer_free, %ld per "
           "thread, best of 5\n", n);
    printf("  1 thread                 %8.2f M/s\n", r1 / 1e6);
    printf("  2 threads, one device    %8.2f M/s   x%.2f of 1 thread\n",
           same / 1e6, same / r1);
    printf("  2 threads, two devices   %8.2f M/s   x%.2f of 1 thread\n",
           apart / 1e6, apart / r1);
    sw_memory_info m;
    CHECK(sw_memory_info_get(d0, &m));
    if (m.in_use != 0) {
        fprintf(stderr, "bench_lock: %llu bytes left in use\n",
                (unsigned long long)m.in_use);
        return 1;
    }
    CHECK(sw_device_close(d0));
    CHECK(sw_device_close(d1));
    return 0;
}
