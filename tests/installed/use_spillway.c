/* use_spillway.c -- a C user's first program, built against an installed
 * libspillway with nothing but its pkg-config file:
 *
 *   cc use_spillway.c $(pkg-config --cflags --libs spillway) -o use_spillway
 *
 * (tests/installed/test_installed.py builds and runs it; README, "C").  On
 * sim:0 under a budget of a quarter of what it allocates: the buffers spill
 * to host memory as the later ones are made, and each one's data is checked
 * after, on the device (a sum, which brings it back) and from the host.
 * Exit status 0 and "ok" only when every check passed and the device ends
 * with nothing in use. */
#include <spillway.h>

#include <stdio.h>
#include <stdlib.h>

#define NBUF 8
#define ELEMS (256 * 1024) /* float32: 1 MiB a buffer */
#define BUDGET ((uint64_t)NBUF * ELEMS * 4 / 4)

static int failed(const char *what, int err)
{
    fprintf(stderr, "use_spillway: %s: %s (%s)\n", what, sw_err_name(err),
            sw_last_error());
    return 1;
}

int main(void)
{
    sw_device *dev = NULL;
    sw_buffer *bufs[NBUF] = {0};
    sw_memory_info info;
    int err;

    if ((err = sw_device_open("sim:0", &dev)) != 0)
        return failed("sw_device_open(sim:0)", err);
    if ((err = sw_set_memory_budget(dev, BUDGET)) != 0)
        return failed("sw_set_memory_budget", err);
    for (int i = 0; i < NBUF; i++) {
        sw_scalar v = {.f = i + 1.0};
        if ((err = sw_buffer_alloc(dev, ELEMS * 4, "use_spillway", &bufs[i])) ||
            (err = sw_op_fill(bufs[i], SW_FLOAT32, ELEMS, v)))
            return failed("alloc and fill", err);
    }
    if ((err = sw_memory_info_get(dev, &info)) != 0)
        return failed("sw_memory_info_get", err);
    if (info.spills == 0 || info.spilled == 0) {
        fprintf(stderr, "use_spillway: nothing spilled under the budget "
                "(spills %llu, spilled %llu)\n",
                (unsigned long long)info.spills,
                (unsigned long long)info.spilled);
        return 1;
    }
    for (int i = 0; i < NBUF; i++) {
        float first = 0, last = 0;
        sw_scalar sum;
        if ((err = sw_buffer_read(bufs[i], 0, &first, sizeof first)) ||
            (err = sw_buffer_read(bufs[i], (ELEMS - 1) * 4, &last,
                                  sizeof last)) ||
            (err = sw_op_sum(bufs[i], SW_FLOAT32, ELEMS, &sum)))
            return failed("read and sum", err);
        if (first != i + 1.0f || last != i + 1.0f ||
            sum.f != (double)ELEMS * (i + 1)) {
            fprintf(stderr, "use_spillway: buffer %d holds %g .. %g, sum %g\n",
                    i, first, last, sum.f);
            return 1;
        }
    }
    if ((err = sw_memory_info_get(dev, &info)) != 0)
        return failed("sw_memory_info_get", err);
    unsigned long long spills = info.spills, restores = info.restores;
    for (int i = 0; i < NBUF; i++)
        if ((err = sw_buffer_free(bufs[i])) != 0)
            return failed("sw_buffer_free", err);
    if ((err = sw_device_synchronize(dev)) ||
        (err = sw_memory_info_get(dev, &info)))
        return failed("synchronize", err);
    if (info.in_use || info.spilled) {
        fprintf(stderr, "use_spillway: in_use %llu, spilled %llu after the "
                "frees\n", (unsigned long long)info.in_use,
                (unsigned long long)info.spilled);
        return 1;
    }
    if ((err = sw_set_memory_budget(dev, 0)) || (err = sw_empty_cache(dev)) ||
        (err = sw_device_close(dev)))
        return failed("close", err);
    printf("ok: %d buffers of %d bytes under a budget of a quarter: "
           "%llu spills, %llu restores, data intact\n",
           NBUF, ELEMS * 4, spills, restores);
    return 0;
}
