/*
 * driver.h -- what the fuzz targets share: their libFuzzer entry points
 * (fuzz_main.c, fuzz_threads.c) and the plain replayer (replay_main.c),
 * which runs the same entry points without libFuzzer.
 */
#ifndef SW_FUZZ_DRIVER_H
#define SW_FUZZ_DRIVER_H

#include "model.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The target's world and name, for the replayer's report. */
fz_world *fz_driver_world(void);
const char *fz_driver_name(void);

/* Environment defaults for a fuzz run (a small simulated device so that
 * memory runs short, two of them when asked for sim:1), then open the
 * world on $FUZZ_DEVICES (default $SW_TEST_DEVICE, else sim:0). */
void fz_driver_open(fz_world *w, bool threaded);
/* Print the run's statistics and its summary line (an atexit handler). */
void fz_driver_report(void);
/* The input being run, kept by the world's on_fail: a divergence writes it
 * to $FUZZ_ARTIFACTS (default .) as divergence-HASH before aborting, so
 * that it is kept whoever handles SIGABRT (PoCL's LLVM replaces
 * libFuzzer's signal handlers). */
void fz_driver_input(const uint8_t *data, size_t size);

#endif
