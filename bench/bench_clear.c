/*
 * bench_clear.c -- what clearing new memory costs (sw_set_clear_new):
 * allocation + first use (an op that writes the whole buffer) + free, in
 * a loop that reuses cached blocks, with the setting off and on, as the
 * ratio on / off measured in the same run: rounds alternate, the best
 * (min) and the median of 5 ratios each.  A fill of zeros is queued before
 * each first use, so the ratio is about (fill + write) / write for large
 * buffers, and the allocation's own cost for small ones.
 *
 * Usage: bench_clear [--quick] [--device SPEC]   (default sim:0)
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Seconds for n rounds of alloc + fill + free of size bytes. */
static double round_trip(sw_device *dev, size_t size, long n)
{
    sw_scalar one = {.f = 1.0};
    CHECK(sw_device_synchronize(dev));
    double t0 = now();
    for (long i = 0; i < n; i++) {
        sw_buffer *b;
        CHECK(sw_buffer_alloc(dev, size, "clear", &b));
        CHECK(sw_op_fill(b, SW_FLOAT32, size / 4, one));
        CHECK(sw_buffer_free(b));
    }
    CHECK(sw_device_synchronize(dev));
    return now() - t0;
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
            fprintf(stderr, "usage: bench_clear [--quick] [--device SPEC]\n");
            return 2;
        }
    }
    sw_device *dev;
    CHECK(sw_device_open(spec, &dev));
    static const size_t sizes[] = {4u << 10, 256u << 10, 4u << 20};
    const double bytes_per_round = quick ? 64e6 : 256e6;
    printf("bench_clear: %s, alloc + first use (a fill of the whole buffer) "
           "+ free, clear_new on / off, 5 alternating rounds\n",
           sw_device_name(dev));
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t size = sizes[k];
        long n = (long)(bytes_per_round / (double)size);
        if (n > (quick ? 20000 : 100000))
            n = quick ? 20000 : 100000;
        double ratio[5], off_best = 1e30, on_best = 1e30;
        (void)round_trip(dev, size, n / 10 + 1); /* warm the cache */
        for (int r = 0; r < 5; r++) {
            CHECK(sw_set_clear_new(dev, 0));
            double off = round_trip(dev, size, n);
            CHECK(sw_set_clear_new(dev, 1));
            double on = round_trip(dev, size, n);
            ratio[r] = on / off;
            off_best = off < off_best ? off : off_best;
            on_best = on < on_best ? on : on_best;
        }
        CHECK(sw_set_clear_new(dev, 0));
        qsort(ratio, 5, sizeof *ratio, cmp);
        printf("  %8zu bytes: off %8.2f us, on %8.2f us a buffer: "
               "x%.2f min, x%.2f median\n", size, off_best / n * 1e6,
               on_best / n * 1e6, ratio[0], ratio[2]);
    }
    sw_memory_info m;
    CHECK(sw_memory_info_get(dev, &m));
    if (m.in_use != 0) {
        fprintf(stderr, "bench_clear: %llu bytes left in use\n",
                (unsigned long long)m.in_use);
        return 1;
    }
    CHECK(sw_device_close(dev));
    return 0;
}
