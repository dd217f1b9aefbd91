/*
 * bench_queue.c -- the small paths issue 14 found slow, each against a
 * baseline measured in the same run (the machines are shared and noisy:
 * ratios mean more than times).  Every figure is the best of several
 * repeats of a timed loop.
 *
 *   1. a queue made, used once (scale of 256 floats) and released, against
 *      the same operation on a queue that already exists (goal: the queue
 *      adds <= 10 us);
 *   2. the same cycle with 10^6 live buffers on the device, against none:
 *      a queue's death must not visit every live buffer (goal: the same
 *      cost, <= 50 us);
 *   3. a one-element host read (a[7]: 4 bytes of a resident buffer)
 *      against a 4-byte memcpy (goal: <= 1 us, inline when the queue is
 *      idle);
 *   4. the sum of 256 floats on the device, waited for (goal: <= 3 us),
 *      against the one-element read.
 *
 * Usage: bench_queue [--quick] [--device SPEC]   (default: sim:0)
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct ctx {
    sw_device *dev;
    sw_queue *q;
    sw_buffer *a, *out;
} ctx;

enum { N = 256 };

/* Seconds per iteration: the best of `repeat` loops of `iters`. */
static double best(void (*fn)(ctx *, long), ctx *c, long iters, int repeat)
{
    fn(c, iters / 10 + 1); /* warm */
    double b = 1e30;
    for (int r = 0; r < repeat; r++) {
        double t0 = now();
        fn(c, iters);
        double dt = (now() - t0) / (double)iters;
        if (dt < b)
            b = dt;
    }
    return b;
}

static void new_queue_op(ctx *c, long k)
{
    sw_scalar two = {.f = 2.0};
    for (long i = 0; i < k; i++) {
        sw_queue *q;
        CHECK(sw_queue_create(c->dev, &q));
        CHECK(sw_op_scale_q(q, c->out, c->a, two, SW_FLOAT32, N));
        CHECK(sw_queue_release(q));
    }
}

static void known_queue_op(ctx *c, long k)
{
    sw_scalar two = {.f = 2.0};
    for (long i = 0; i < k; i++)
        CHECK(sw_op_scale_q(c->q, c->out, c->a, two, SW_FLOAT32, N));
}

static void new_queue_only(ctx *c, long k)
{
    for (long i = 0; i < k; i++) {
        sw_queue *q;
        CHECK(sw_queue_create(c->dev, &q));
        CHECK(sw_queue_release(q));
    }
}

static volatile float sink;

static void read_one(ctx *c, long k)
{
    float x;
    for (long i = 0; i < k; i++) {
        CHECK(sw_buffer_read(c->a, 7 * sizeof(float), &x, sizeof x));
        sink = x;
    }
}

static void memcpy_one(ctx *c, long k)
{
    (void)c;
    static float src[N];
    float x;
    for (long i = 0; i < k; i++) {
        memcpy(&x, (const float *volatile)src + 7, sizeof x);
        sink = x;
    }
}

static void sum_small(ctx *c, long k)
{
    sw_scalar s;
    for (long i = 0; i < k; i++) {
        CHECK(sw_op_sum(c->a, SW_FLOAT32, N, &s));
        sink = (float)s.f;
    }
}

static void row(const char *what, double t, const char *base, double tb,
                double goal_us)
{
    printf("  %-44s %9.2f us   %-34s %9.3f us   x%-8.1f", what, t * 1e6, base,
           tb * 1e6, tb > 0 ? t / tb : 0.0);
    if (goal_us > 0)
        printf("  goal <= %g us: %s", goal_us, t * 1e6 <= goal_us ? "met"
                                                                 : "not met");
    printf("\n");
}

int main(int argc, char **argv)
{
    int quick = 0;
    const char *spec = "sim:0";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
            spec = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--quick] [--device SPEC]\n", argv[0]);
            return 2;
        }
    }
    long iters = quick ? 500 : 5000;
    int repeat = quick ? 3 : 7;
    size_t many = quick ? 100000 : 1000000;

    ctx c = {0};
    CHECK(sw_device_open(spec, &c.dev));
    CHECK(sw_queue_create(c.dev, &c.q));
    CHECK(sw_buffer_alloc(c.dev, N * sizeof(float), "a", &c.a));
    CHECK(sw_buffer_alloc(c.dev, N * sizeof(float), "out", &c.out));
    sw_scalar one = {.f = 1.0};
    CHECK(sw_op_fill(c.a, SW_FLOAT32, N, one));
    CHECK(sw_device_synchronize(c.dev));
    printf("bench_queue on %s (best of %d loops, per iteration)\n", spec,
           repeat);

    double t_new = best(new_queue_op, &c, iters, repeat);
    CHECK(sw_device_synchronize(c.dev));
    double t_known = best(known_queue_op, &c, iters, repeat);
    CHECK(sw_device_synchronize(c.dev));
    double t_only = best(new_queue_only, &c, iters, repeat);
    CHECK(sw_device_synchronize(c.dev));
    row("Queue() + first scale() + release", t_new, "scale() on a known queue",
        t_known, 0);
    printf("    the queue itself adds %.2f us (goal <= 10 us: %s)\n",
           (t_new - t_known) * 1e6,
           (t_new - t_known) * 1e6 <= 10 ? "met" : "not met");
    row("Queue() + release (no work)", t_only, "scale() on a known queue",
        t_known, 0);

    /* a[7] and sum(a), with the device idle between calls. */
    CHECK(sw_device_synchronize(c.dev));
    double t_read = best(read_one, &c, iters * 4, repeat);
    double t_memcpy = best(memcpy_one, &c, iters * 40, repeat);
    row("a[7] (4-byte host read, resident)", t_read, "memcpy of 4 bytes",
        t_memcpy, 1.0);
    double t_sum = best(sum_small, &c, iters, repeat);
    row("sum of 256 floats (waited for)", t_sum, "a[7]", t_read, 3.0);

    /* Queue cycles with many live buffers. */
    sw_buffer **bufs = malloc(many * sizeof *bufs);
    if (!bufs)
        return 1;
    double t0 = now();
    size_t live = 0;
    for (; live < many; live++)
        if (sw_buffer_alloc(c.dev, 512, NULL, &bufs[live]) != SW_OK)
            break; /* the device is full: measure with what fits */
    double t_alloc = now() - t0;
    CHECK(sw_device_synchronize(c.dev));
    long qiters = quick ? 200 : 1000;
    double t_many = best(new_queue_op, &c, qiters, repeat);
    double t_few_again = 0;
    for (size_t i = 0; i < live; i++)
        CHECK(sw_buffer_free(bufs[i]));
    CHECK(sw_empty_cache(c.dev));
    CHECK(sw_device_synchronize(c.dev));
    t_few_again = best(new_queue_op, &c, qiters, repeat);
    char what[80];
    snprintf(what, sizeof what, "queue cycle, %zu live buffers", live);
    row(what, t_many, "queue cycle, 2 live buffers", t_few_again, 50.0);
    printf("    (%zu buffers allocated in %.2f s)\n", live, t_alloc);
    free(bufs);

    CHECK(sw_buffer_free(c.a));
    CHECK(sw_buffer_free(c.out));
    CHECK(sw_queue_release(c.q));
    CHECK(sw_device_close(c.dev));
    return 0;
}
