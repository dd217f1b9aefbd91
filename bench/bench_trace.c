/*
 * bench_trace.c -- what recording the memory history costs, as ratios of
 * the same loops with it on and off, measured in the same run (the
 * machines are shared and noisy; ratios travel, times do not).
 *
 *   cached alloc+free   sw_buffer_alloc + sw_buffer_free of 4 KiB, every
 *                       allocation a cache hit (4 events per pair when on)
 *   warm launch         sw_launch_begin + sw_launch_end of 4 resident
 *                       arguments (records nothing either way)
 *
 * Off, each recording site is one predictable branch, so the "off" figures
 * are the library's ordinary ones (compare bench_spill's warm launch).
 * Each figure is the best of 7 rounds, off and on interleaved.
 *
 * Usage: bench_trace [--quick]
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double alloc_free_ns(sw_device *dev, long iters)
{
    double t0 = now();
    for (long i = 0; i < iters; i++) {
        sw_buffer *b;
        CHECK(sw_buffer_alloc(dev, 4096, "bench", &b));
        CHECK(sw_buffer_free(b));
    }
    return (now() - t0) * 1e9 / (double)iters;
}

static double launch_ns(sw_device *dev, sw_buffer **bufs, int n, long iters)
{
    sw_devmem ptrs[8];
    double t0 = now();
    for (long i = 0; i < iters; i++) {
        CHECK(sw_launch_begin(dev, bufs, (size_t)n, ptrs));
        CHECK(sw_launch_end(dev, bufs, (size_t)n));
    }
    return (now() - t0) * 1e9 / (double)iters;
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    long iters = quick ? 20000 : 400000;
    sw_device *dev;
    CHECK(sw_device_open(NULL, &dev));
    printf("spillway bench_trace on %s (%s)\n\n", sw_device_name(dev),
           sw_device_description(dev));
    sw_buffer *warm;
    CHECK(sw_buffer_alloc(dev, 4096, "warm", &warm));
    CHECK(sw_buffer_free(warm)); /* the cache holds one block */
    sw_buffer *bufs[4];
    for (int i = 0; i < 4; i++)
        CHECK(sw_buffer_alloc(dev, 4096, "arg", &bufs[i]));
    /* A ring large enough not to wrap on every round. */
    sw_trace_options o = {.capacity = 1 << 16};
    double best[2][2] = {{1e30, 1e30}, {1e30, 1e30}}; /* [on][which] */
    for (int round = 0; round < 7; round++) {
        for (int on = 0; on < 2; on++) {
            if (on)
                CHECK(sw_trace_start(dev, &o));
            double a = alloc_free_ns(dev, iters);
            double l = launch_ns(dev, bufs, 4, iters);
            if (on)
                CHECK(sw_trace_stop(dev));
            if (a < best[on][0])
                best[on][0] = a;
            if (l < best[on][1])
                best[on][1] = l;
        }
    }
    printf("%-28s %10s %10s %8s\n", "operation (best of 7)", "off", "on",
           "on/off");
    const char *names[2] = {"cached alloc+free (4 KiB)",
                            "warm launch, 4 arguments"};
    for (int w = 0; w < 2; w++)
        printf("%-28s %7.1f ns %7.1f ns %7.2fx\n", names[w], best[0][w],
               best[1][w], best[1][w] / best[0][w]);
    printf("(on: 4 events per alloc+free pair; a launch records none)\n");
    for (int i = 0; i < 4; i++)
        CHECK(sw_buffer_free(bufs[i]));
    CHECK(sw_device_close(dev));
    return 0;
}
