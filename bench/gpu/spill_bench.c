/*
 * spill_bench.c -- spillway on a real device, through the public API only:
 *
 *  1. spill and restore bandwidth: 8 buffers of 64 MiB under a budget of
 *     3 of them, touched round-robin from the device three times over, so
 *     that every touch restores one buffer and spills another; then every
 *     buffer is read back and compared with what was written (bit for bit);
 *  2. allocation latency: a 1 MiB alloc + free pair served by spillway's
 *     cache, and one that reaches the backend (the cache emptied each
 *     time: on CUDA a pool allocation and a stream-ordered free);
 *  3. a small kernel's enqueue cost (sw_op_add of 2^20 float32).
 *
 *   spill_bench [SPEC]          (default cuda:0)
 *
 * Built by meson (bench/gpu/meson.build) as BUILDDIR/bench/gpu/spill_bench.
 *
 * Prints "RESULT name=value" lines for bench/gpu/check.sh and exits 1 on
 * any failure, with the library's message.
 */
#include "spillway.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MIB ((size_t)1 << 20)
#define NBUF 8
#define BUF_BYTES (64 * MIB)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define CHECK(call)                                                           \
    do {                                                                      \
        int rc_ = (call);                                                     \
        if (rc_ != SW_OK) {                                                   \
            fprintf(stderr, "spill_bench: %s -> %s: %s\n", #call,             \
                    sw_err_name(rc_), sw_last_error());                       \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

/* Deterministic contents: word i of buffer k. */
static void pattern(uint64_t *w, size_t words, unsigned k)
{
    uint64_t x = 0x9E3779B97F4A7C15ull * (k + 1);
    for (size_t i = 0; i < words; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w[i] = x;
    }
}

static sw_memory_info info(sw_device *dev)
{
    sw_memory_info m;
    CHECK(sw_memory_info_get(dev, &m));
    return m;
}

int main(int argc, char **argv)
{
    const char *spec = argc > 1 ? argv[1] : "cuda:0";
    sw_device *dev = NULL;
    CHECK(sw_device_open(spec, &dev));
    printf("%s: %s\n", sw_device_name(dev), sw_device_description(dev));

    /* ---- 1. spill and restore ------------------------------------------ */
    size_t words = BUF_BYTES / 8;
    uint64_t *host = malloc(BUF_BYTES), *back = malloc(BUF_BYTES);
    if (host == NULL || back == NULL) {
        fprintf(stderr, "spill_bench: no host memory\n");
        return 1;
    }
    sw_buffer *b[NBUF];
    for (unsigned k = 0; k < NBUF; k++) {
        CHECK(sw_buffer_alloc(dev, BUF_BYTES, "bench", &b[k]));
        pattern(host, words, k);
        CHECK(sw_buffer_write(b[k], 0, host, BUF_BYTES));
    }
    CHECK(sw_device_synchronize(dev));
    sw_memory_info m0 = info(dev);
    CHECK(sw_set_memory_budget(dev, 3 * BUF_BYTES));
    /* One more allocation makes the budget bite: the least recently used
     * buffers spill until it fits. */
    sw_buffer *trigger = NULL;
    CHECK(sw_buffer_alloc(dev, BUF_BYTES, "trigger", &trigger));
    CHECK(sw_buffer_free(trigger));
    double t0 = now();
    for (int round = 0; round < 3; round++) {
        for (unsigned k = 0; k < NBUF; k++) {
            sw_devmem p;
            CHECK(sw_buffer_device_ptr(b[k], &p)); /* restores it */
        }
    }
    CHECK(sw_device_synchronize(dev));
    double wall = now() - t0;
    sw_memory_info m1 = info(dev);
    int same = 1;
    for (unsigned k = 0; k < NBUF; k++) {
        pattern(host, words, k);
        CHECK(sw_buffer_read(b[k], 0, back, BUF_BYTES));
        same &= memcmp(host, back, BUF_BYTES) == 0;
    }
    uint64_t out = m1.spilled_bytes_total - m0.spilled_bytes_total;
    uint64_t in = m1.restored_bytes_total - m0.restored_bytes_total;
    double out_s = m1.spill_seconds - m0.spill_seconds;
    double in_s = m1.restore_seconds - m0.restore_seconds;
    printf("spilled %llu MiB in %llu spills (%.3f s), restored %llu MiB in "
           "%llu restores (%.3f s), %.3f s wall; contents %s\n",
           (unsigned long long)(out / MIB),
           (unsigned long long)(m1.spills - m0.spills), out_s,
           (unsigned long long)(in / MIB),
           (unsigned long long)(m1.restores - m0.restores), in_s, wall,
           same ? "identical" : "DIFFER");
    printf("RESULT spills=%llu\n", (unsigned long long)(m1.spills - m0.spills));
    printf("RESULT restores=%llu\n",
           (unsigned long long)(m1.restores - m0.restores));
    printf("RESULT spill_gbs=%.2f\n", out_s > 0 ? (double)out / out_s / 1e9
                                                : 0.0);
    printf("RESULT restore_gbs=%.2f\n", in_s > 0 ? (double)in / in_s / 1e9
                                                 : 0.0);
    printf("RESULT spill_contents=%s\n", same ? "identical" : "DIFFER");
    for (unsigned k = 0; k < NBUF; k++)
        CHECK(sw_buffer_free(b[k]));
    CHECK(sw_set_memory_budget(dev, 0));
    CHECK(sw_empty_cache(dev));

    /* ---- 2. allocation latency ----------------------------------------- */
    sw_buffer *x = NULL;
    CHECK(sw_buffer_alloc(dev, MIB, "warm", &x));
    CHECK(sw_buffer_free(x));
    const int n_cached = 200000;
    t0 = now();
    for (int i = 0; i < n_cached; i++) {
        CHECK(sw_buffer_alloc(dev, MIB, "cached", &x));
        CHECK(sw_buffer_free(x));
    }
    double cached_ns = (now() - t0) / n_cached * 1e9;
    const int n_backend = 2000;
    t0 = now();
    for (int i = 0; i < n_backend; i++) {
        CHECK(sw_buffer_alloc(dev, MIB, "backend", &x));
        CHECK(sw_buffer_free(x));
        CHECK(sw_empty_cache(dev));
    }
    double backend_ns = (now() - t0) / n_backend * 1e9;
    CHECK(sw_device_synchronize(dev));
    printf("RESULT sw_cached_alloc_free_ns=%.0f\n", cached_ns);
    printf("RESULT sw_backend_alloc_free_ns=%.0f\n", backend_ns);

    /* ---- 3. a small kernel ---------------------------------------------- */
    const size_t nf = (size_t)1 << 20;
    sw_buffer *a = NULL, *c = NULL;
    CHECK(sw_buffer_alloc(dev, nf * 4, "a", &a));
    CHECK(sw_buffer_alloc(dev, nf * 4, "c", &c));
    sw_scalar one = {.f = 1.0};
    CHECK(sw_op_fill(a, SW_FLOAT32, nf, one));
    CHECK(sw_op_fill(c, SW_FLOAT32, nf, one));
    CHECK(sw_op_add(c, c, a, SW_FLOAT32, nf)); /* compiles the kernels */
    CHECK(sw_device_synchronize(dev));
    const int n_ops = 2000;
    t0 = now();
    for (int i = 0; i < n_ops; i++)
        CHECK(sw_op_add(c, c, a, SW_FLOAT32, nf));
    double enq = now() - t0;
    CHECK(sw_device_synchronize(dev));
    double all = now() - t0;
    sw_scalar sum;
    CHECK(sw_op_sum(c, SW_FLOAT32, nf, &sum));
    double want = (double)nf * (double)(n_ops + 2);
    printf("RESULT sw_op_add_enqueue_us=%.2f\n", enq / n_ops * 1e6);
    printf("RESULT sw_op_add_total_us=%.2f\n", all / n_ops * 1e6);
    printf("RESULT sw_op_add_result=%s\n", sum.f == want ? "exact" : "WRONG");
    CHECK(sw_buffer_free(a));
    CHECK(sw_buffer_free(c));
    free(host);
    free(back);
    CHECK(sw_device_close(dev));
    return same && sum.f == want ? 0 : 1;
}
