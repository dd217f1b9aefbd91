/*
 * driver.c -- set-up and reporting shared by the fuzz targets.
 */
#include "driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double t_start;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void fz_driver_open(fz_world *w, bool threaded)
{
    /* Small devices: spilling and running out are the point. */
    setenv("SPILLWAY_SIM_MEMORY", "8M", 0);
    setenv("FAKE_CUDA_MEMORY", "8388608", 0);
    const char *devs = getenv("FUZZ_DEVICES");
    if (devs == NULL || devs[0] == '\0')
        devs = getenv("SW_TEST_DEVICE");
    if (devs == NULL || devs[0] == '\0')
        devs = "sim:0";
    if (strstr(devs, "sim:1") != NULL)
        setenv("SPILLWAY_SIM_DEVICES", "2", 0);
    int rc = fz_world_open(w, devs, threaded);
    if (rc != SW_OK) {
        fprintf(stderr, "fuzz: cannot open the devices '%s'\n", devs);
        exit(2);
    }
    fprintf(stderr, "fuzz: %s on", fz_driver_name());
    for (int d = 0; d < w->ndev; d++)
        fprintf(stderr, " %s", w->spec[d]);
    fprintf(stderr, "\n");
    t_start = now();
    atexit(fz_driver_report);
}

void fz_driver_report(void)
{
    fz_world *w = fz_driver_world();
    if (atomic_load(&w->failed))
        return;
    char what[64];
    snprintf(what, sizeof what, "fuzz %s", fz_driver_name());
    fz_world_print_stats(w, what, now() - t_start);
    /* Executions are what passed; the checks are counted above. */
    fprintf(stderr, "%s: %llu passed, 0 failed\n", what,
            (unsigned long long)atomic_load(&w->stats.inputs));
}
