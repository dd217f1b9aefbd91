/*
 * demo_workload.h -- the workload of `spillway demo`: a pipeline whose live
 * set outgrows a memory budget while each step fits.
 *
 * It is shaped like a network's forward pass that keeps every activation
 * for the backward pass.  x[0] comes from the host; forward step k makes
 *
 *     x[k] = c_k * x[k-1] + (1 - c_k) * x[k-2] + x[0]     (x[-1] is x[0])
 *
 * with sw_op_scale, sw_op_axpy and sw_op_add, and keeps it.  The backward
 * pass then walks k = N-1 down to 0:
 *
 *     acc += a_k * x[k];  checkpoint sum(acc)
 *
 * with sw_op_axpy and sw_op_sum, prefetching x[k-1] (sw_buffer_prefetch)
 * before step k's work, so that the next restore's copy overlaps it, and
 * advising x[k] cold once consumed (sw_buffer_advise): it is not needed
 * again until the final check, and is evicted before the arrays still to
 * come (in LRU order the next step's array and x[0] went first).  The
 * live set grows to N + 1 arrays while
 * a step uses at most four of them (and one operation at most two), so
 * under a budget of a quarter of the live set the early arrays are spilled
 * during the forward pass and restored, last out first in, by the backward
 * pass.  Runs that do the same operations in the same order must give
 * bit-identical arrays and checkpoints, whatever their budgets.
 *
 * It uses the public API only and prints nothing, so that benchmarks can
 * run it too.  A function that fails returns the library's code, with the
 * call that failed written in p->failed and the library's detail in
 * sw_last_error() (until the next spillway call); running out of host
 * memory is SW_ERR_HOST_OOM, with no detail.
 */
#ifndef SPILLWAY_TOOLS_DEMO_WORKLOAD_H
#define SPILLWAY_TOOLS_DEMO_WORKLOAD_H

#include "spillway.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most arrays one forward step uses: x[k], x[k-1], x[k-2], x[0]. */
enum { DEMO_STEP_ARRAYS = 4 };

/* Arrays are 4 MiB (a default run moves a few hundred MiB in well under a
 * second), smaller when the device cannot hold the live set of N + 1 of
 * them, but not below 64 KiB, where fixed costs would hide the copies. */
#define DEMO_ARRAY_BYTES_MAX ((size_t)4 << 20)
#define DEMO_ARRAY_BYTES_MIN ((size_t)64 << 10)

typedef struct demo_pipeline {
    sw_device *dev;
    size_t steps;     /* N: forward steps, so arrays x[0..N) */
    size_t n;         /* float32 elements per array */
    size_t bytes;     /* bytes per array */
    sw_buffer **x;    /* x[0..N): every one lives until the run ends */
    sw_buffer *acc;   /* the backward pass's accumulator */
    float *host;      /* one array's worth: x[0]'s data, then read-backs */
    bool prefetch;    /* the backward pass prefetches its next array */
    bool advise;      /* ... and advises each array cold once consumed */
    char failed[160]; /* after a failure: the call that failed */
} demo_pipeline;

/* What one run did: set by demo_run_pipeline, budget by the caller. */
typedef struct demo_run {
    uint64_t budget; /* 0: none */
    uint64_t host_budget; /* 0: none (sw_set_host_budget) */
    uint64_t peak, spills, restores, out_bytes, in_bytes;
    double out_s, in_s, wall_s; /* wall_s: the passes only */
    /* The disk tier, passes and read-back (the host budget's traffic). */
    uint64_t disk_out_bytes, disk_in_bytes;
    double disk_out_s, disk_in_s;
    uint64_t *hash;     /* N + 1: FNV-1a of x[0..N), then of acc */
    uint64_t *sum_bits; /* N: bits of the checkpoint taken after x[k] */
} demo_run;

/* Called after each of the 2N steps of a run (a progress line). */
typedef void (*demo_step_fn)(void *ctx);

/* Bytes per array: the largest multiple of 64 KiB up to 4 MiB such that
 * N + 1 arrays fit in 7/8 of what the device has free (the rest is room
 * for fragmentation); 0 when even 64 KiB arrays do not fit. */
size_t demo_array_bytes(const sw_memory_info *mi, size_t steps);

/* A pipeline of steps arrays of bytes each on dev (no device memory yet);
 * 0 or SW_ERR_HOST_OOM.  demo_pipeline_destroy it either way. */
int demo_pipeline_init(demo_pipeline *p, sw_device *dev, size_t steps,
                       size_t bytes);
/* Free its arrays and host memory; the device stays open. */
void demo_pipeline_destroy(demo_pipeline *p);

/* A run's hash arrays for p; 0 or SW_ERR_HOST_OOM.  demo_run_destroy it
 * either way. */
int demo_run_init(demo_run *r, const demo_pipeline *p, uint64_t budget);
void demo_run_destroy(demo_run *r);

/* The live set: N + 1 arrays. */
uint64_t demo_live_bytes(const demo_pipeline *p);

/* A quarter of the live set, in whole arrays, but never below one step's
 * arrays (a step that does not fit would spill and restore its own
 * operands at every operation). */
uint64_t demo_default_budget(const demo_pipeline *p);

/* Allocate and fill the whole live set once, then give it back, so that
 * the first touch of device memory is charged to no run (see the .c). */
int demo_warm_up(demo_pipeline *p);
/* Before each timed run: as many arrays as fit in budget (0: all) are
 * allocated, filled and freed into the cache, so that every run starts
 * with the device memory it can hold already obtained and touched (on
 * PoCL a buffer's host memory is faulted in at first use, and given back
 * when the cache is emptied: the unbudgeted run, which alone needs the
 * whole live set, paid 2 GiB of page faults each time, and at 512 steps
 * came out slower than the budgeted one). */
int demo_prewarm(demo_pipeline *p, uint64_t budget);

/* One run under r->budget: both passes (on_step, when not NULL, after each
 * step), then every output hashed.  The arrays stay allocated, for the
 * caller to look at or demo_free_arrays. */
int demo_run_pipeline(demo_pipeline *p, demo_run *r, demo_step_fn on_step,
                      void *ctx);

/* Free x[] and acc (those allocated). */
void demo_free_arrays(demo_pipeline *p);

/* A plain pwrite and pread of `total` bytes in `chunk`-byte pieces to a
 * file in the spill directory (as the disk tier's, unlinked at once),
 * from and into `nbuf` buffers in turn, touched before (the disk tier's
 * host blocks are a pool of as many: one hot buffer would measure the
 * CPU's cache, not the file): the bandwidths the disk tier is measured
 * against, in bytes per second; 0 where the file cannot be had. */
void demo_plain_disk(size_t chunk, uint64_t total, size_t nbuf,
                     double *wbps, double *rbps);

#endif /* SPILLWAY_TOOLS_DEMO_WORKLOAD_H */
