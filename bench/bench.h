/*
 * bench.h -- what the C benchmarks share: a monotonic clock in seconds,
 * and CHECK, which ends the program when a library call fails, naming the
 * call, its error and the library's message.
 */
#ifndef SW_BENCH_H
#define SW_BENCH_H

#include "spillway.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define CHECK(call)                                                           \
    do {                                                                      \
        int rc_ = (call);                                                     \
        if (rc_ != SW_OK) {                                                   \
            fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__,      \
                    #call, sw_err_name(rc_), sw_last_error());                \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

#endif
