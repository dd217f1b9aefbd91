/*
 * fuzz_main.c -- the model-based fuzzer, one engine per input: every input
 * is a fresh sequence of operations on the devices of $FUZZ_DEVICES (one,
 * or two: then buffers and queues of one are passed to the other's calls
 * too), ending with everything freed, the devices checked empty, closed
 * (a refused close is a leak) and opened again.
 *
 * $FUZZ_REOPEN=N closes and reopens the devices every N inputs only
 * (default 1; opening an OpenCL device builds its programs).
 */
#include "driver.h"

#include <stdio.h>
#include <stdlib.h>

static fz_world world;
static fz_engine engine;
static unsigned reopen_every = 1;

fz_world *fz_driver_world(void) { return &world; }
const char *fz_driver_name(void) { return "spillway"; }

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *r = getenv("FUZZ_REOPEN");
    if (r != NULL && atoi(r) > 0)
        reopen_every = (unsigned)atoi(r);
    fz_driver_open(&world, false);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_driver_input(data, size);
    fz_world_clear_new(&world, data, size);
    fz_src src;
    fz_src_input(&src, data, size);
    fz_engine_init(&engine, &world, 0);
    while (fz_engine_step(&engine, &src))
        ;
    fz_engine_cleanup(&engine);
    fz_engine_destroy(&engine);
    fz_world_reset(&world);
    uint64_t n = atomic_fetch_add(&world.stats.inputs, 1) + 1;
    if (n % reopen_every == 0) {
        fz_world_close(&world, true);
    } else {
        for (int d = 0; d < world.ndev; d++) {
            sw_memory_info m;
            if (sw_device_synchronize(world.dev[d]) != SW_OK ||
                sw_memory_info_get(world.dev[d], &m) != SW_OK ||
                m.in_use != 0 || m.spilled != 0)
                fz_fail(&world, NULL, "%s is not empty after an input",
                        world.spec[d]);
        }
    }
    return 0;
}
