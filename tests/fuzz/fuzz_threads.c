/*
 * fuzz_threads.c -- the threaded variant: the first byte of an input picks
 * 2 to 4 threads, the next ones the contents of three shared read-only
 * buffers, and the rest is split into one byte stream per thread.  Each
 * thread runs its own engine on its own objects (and views of the shared
 * buffers, which it only reads and uses as kernel inputs), checked on its
 * own after every step.  Pressure callbacks free victims donated by any
 * thread.  Once all have cleaned up, the device as a whole must hold
 * exactly the shared buffers, and be empty once they are freed.
 *
 * No device faults here (they are the device's, so every thread's calls
 * would fail): only each thread's own no-device host-allocation fault.
 * Built with ThreadSanitizer in CI.
 */
#include "driver.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_THREADS 4

static fz_world world;

fz_world *fz_driver_world(void) { return &world; }
const char *fz_driver_name(void) { return "spillway-threads"; }

typedef struct {
    fz_engine *e;
    fz_src src;
} thread_arg;

static void *run(void *p)
{
    thread_arg *t = p;
    while (fz_engine_step(t->e, &t->src))
        ;
    fz_engine_cleanup(t->e);
    return NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fz_driver_open(&world, true);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_driver_input(data, size);
    if (size < 8)
        return 0;
    int n = 2 + data[0] % (MAX_THREADS - 1);
    fz_src hdr;
    fz_src_input(&hdr, data + 1, 7);
    fz_world_make_shared(&world, &hdr);
    fz_world_clear_new(&world, data, size);
    data += 8;
    size -= 8;
    fz_engine *eng = calloc((size_t)n, sizeof *eng);
    thread_arg args[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    size_t chunk = size / (size_t)n;
    for (int t = 0; t < n; t++) {
        fz_engine_init(&eng[t], &world, t);
        args[t].e = &eng[t];
        size_t len = t == n - 1 ? size - chunk * (size_t)t : chunk;
        fz_src_input(&args[t].src, data + chunk * (size_t)t, len);
        if (pthread_create(&th[t], NULL, run, &args[t]) != 0) {
            fprintf(stderr, "fuzz: cannot start a thread\n");
            abort();
        }
    }
    for (int t = 0; t < n; t++)
        pthread_join(th[t], NULL);
    /* Quiescent: the victims no callback freed go, then only the shared
     * buffers remain. */
    fz_world_reset(&world);
    for (int d = 0; d < world.ndev; d++) {
        uint64_t want = 0;
        for (int k = 0; k < world.nshared; k++)
            if (world.shared[k].devi == d)
                want += (world.shared[k].size + SW_ALLOC_GRANULARITY - 1) /
                        SW_ALLOC_GRANULARITY * SW_ALLOC_GRANULARITY;
        sw_memory_info m;
        if (sw_device_synchronize(world.dev[d]) != SW_OK ||
            sw_memory_info_get(world.dev[d], &m) != SW_OK)
            fz_fail(&world, NULL, "%s after the threads", world.spec[d]);
        if (m.in_use + m.spilled != want)
            fz_fail(&world, NULL, "%s after the threads: in_use %" PRIu64
                    " + spilled %" PRIu64 ", but only the shared buffers' %"
                    PRIu64 " are live", world.spec[d], m.in_use, m.spilled,
                    want);
        if (m.peak < m.in_use)
            fz_fail(&world, NULL, "%s: peak < in_use", world.spec[d]);
        /* The device's own counts since it was opened for this input (a
         * thread's sw_reset_counters makes them fewer): the engines do
         * not count spills when other threads move their buffers. */
        atomic_fetch_add(&world.stats.spills_seen, m.spills);
        atomic_fetch_add(&world.stats.restores_seen, m.restores);
    }
    fz_world_free_shared(&world);
    for (int t = 0; t < n; t++)
        fz_engine_destroy(&eng[t]);
    free(eng);
    atomic_fetch_add(&world.stats.inputs, 1);
    fz_world_close(&world, true);
    return 0;
}
