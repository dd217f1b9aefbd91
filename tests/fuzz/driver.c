/*
 * driver.c -- set-up and reporting shared by the fuzz targets.
 */
#include "driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double t_start;
static const uint8_t *cur_data;
static size_t cur_size;

void fz_driver_input(const uint8_t *data, size_t size)
{
    cur_data = data;
    cur_size = size;
}

static void save_and_abort(fz_world *w)
{
    (void)w;
    if (cur_data != NULL) {
        uint64_t h = UINT64_C(1469598103934665603);
        for (size_t i = 0; i < cur_size; i++)
            h = (h ^ cur_data[i]) * UINT64_C(1099511628211);
        const char *dir = getenv("FUZZ_ARTIFACTS");
        char path[4096];
        snprintf(path, sizeof path, "%s/divergence-%016llx",
                 dir && *dir ? dir : ".", (unsigned long long)h);
        FILE *f = fopen(path, "wb");
        if (f != NULL) {
            fwrite(cur_data, 1, cur_size, f);
            fclose(f);
            fprintf(stderr, "fuzz: the input (%zu bytes) is in %s\n",
                    cur_size, path);
        }
    }
    fflush(stderr);
    abort();
}

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
    /* Load every backend's runtime now, before libFuzzer sets its signal
     * handlers: PoCL's LLVM installs its own (SIGABRT, SIGSEGV, ...) when
     * it is first asked for devices, which would otherwise happen in the
     * middle of an input (a misuse op opens "opencl:40") and take over
     * libFuzzer's crash handling: a divergence would abort without the
     * input being saved. */
    size_t ndev = 0;
    (void)sw_device_count(&ndev);
    int rc = fz_world_open(w, devs, threaded);
    if (rc != SW_OK) {
        fprintf(stderr, "fuzz: cannot open the devices '%s'\n", devs);
        exit(2);
    }
    w->on_fail = save_and_abort;
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
