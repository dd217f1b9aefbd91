/*
 * repro_outparams.c -- a reproducer of a divergence the fuzzer found
 * (FZ_KNOWN_OUTPARAMS_ON_NULL_ARG in model.h): include/spillway.h says
 * "results come back through trailing out-parameters, which are set to
 * NULL/0 when the call fails", but a call refused because one of its
 * pointer arguments is NULL returns before setting the others.
 *
 * Prints each case and exits 1 while any remains (0 once all are fixed,
 * when it belongs in tests/c as a test and the switch can go).
 */
#include "spillway.h"

#include <stdio.h>

static int bad;

static void expect(int cond, const char *what)
{
    printf("%s: %s\n", cond ? "ok  " : "FAIL", what);
    bad += !cond;
}

int main(void)
{
    sw_device *dev = NULL;
    sw_buffer *buf = NULL;
    if (sw_device_open("sim:0", &dev) != SW_OK ||
        sw_buffer_alloc(dev, 64, "repro", &buf) != SW_OK) {
        fprintf(stderr, "cannot open sim:0: %s\n", sw_last_error());
        return 2;
    }
    static int junk;

    sw_lease *lease = (sw_lease *)&junk; /* src/core/lease.c */
    int rc = sw_buffer_expose(buf, NULL, &lease);
    expect(rc == SW_ERR_INVALID_ARG && lease == NULL,
           "sw_buffer_expose(buf, NULL, &lease) sets lease = NULL");

    sw_devmem m = {3, 3};
    rc = sw_buffer_expose(buf, &m, NULL);
    expect(rc == SW_ERR_INVALID_ARG && m.base == 0 && m.offset == 0,
           "sw_buffer_expose(buf, &ptr, NULL) sets ptr = {0, 0}");

    sw_devmem p[1] = {{3, 3}}; /* src/core/launch.c */
    rc = sw_launch_begin(dev, NULL, 1, p);
    expect(rc == SW_ERR_INVALID_ARG && p[0].base == 0 && p[0].offset == 0,
           "sw_launch_begin(dev, NULL, 1, ptrs) sets ptrs[0] = {0, 0}");

    size_t sub = 5, host = 5; /* src/core/queue.c */
    rc = sw_order_counts(NULL, &sub, &host);
    expect(rc == SW_ERR_INVALID_ARG && sub == 0 && host == 0,
           "sw_order_counts(NULL, &sub, &host) sets both to 0");

    int idle = 5;
    rc = sw_order_idle(NULL, &idle);
    expect(rc == SW_ERR_INVALID_ARG && idle == 0,
           "sw_order_idle(NULL, &idle) sets idle = 0");

    sw_buffer_free(buf);
    sw_device_close(dev);
    printf("%d of 5 cases diverge\n", bad);
    return bad ? 1 : 0;
}
