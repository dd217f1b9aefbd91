/*
 * copy_rates.c -- the device's own host<->device copy rates, the baseline
 * for spillway's spill and restore bandwidth: pageable host memory (what
 * spillway's spills use today) and pinned host memory (cuMemHostAlloc: what
 * pinned staging would use).  Driver API only, loaded with dlopen through
 * the backend's declarations (src/backend/cuda_api.h), so it builds with
 * nothing CUDA installed; meson builds it (bench/gpu/meson.build) as
 * BUILDDIR/bench/gpu/copy_rates:
 *
 *   copy_rates [DEVICE_INDEX [MIB]]        (default 0 and 256)
 *
 * $SPILLWAY_CUDA_LIBRARY names the driver library, as for the backend.
 *
 * Prints "RESULT name=value" lines (GB/s = 1e9 bytes per second, best of 5
 * after a warm-up) that bench/gpu/check.sh reads, and exits 1 with a
 * message when something fails.
 *
 * It also says whether allocating and freeing page-locked memory waits for
 * the device (pinned_alloc_waits, pinned_free_waits: 1 when the busy
 * stream had finished by the time the call returned).  spillway's host
 * pool makes and frees such blocks with its device lock held
 * (src/core/hostpool.c); if the driver synchronizes there, every other
 * thread waits for the device's queued work too, and a pool over its bound
 * (a block freed on each restore) serializes copies with compute.
 */
#include "backend/cuda_api.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static swcu_driver cu;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void check(swcu_result r, const char *what)
{
    if (r == SWCU_CUDA_SUCCESS)
        return;
    const char *name = NULL;
    if (cu.cuGetErrorName == NULL || cu.cuGetErrorName(r, &name) != 0)
        name = NULL;
    fprintf(stderr, "copy_rates: %s failed: %s (%u)\n", what,
            name ? name : "CUDA error", r);
    exit(1);
}

enum { H2D, D2H };

/* Best of reps timed copies of n bytes in one direction, in GB/s. */
static double rate(int dir, void *host, swcu_deviceptr dev, size_t n,
                   swcu_stream s, int reps)
{
    double best = 0;
    for (int i = -1; i < reps; i++) { /* i = -1: warm-up */
        double t0 = now();
        check(dir == H2D ? cu.cuMemcpyHtoDAsync_v2(dev, host, n, s)
                         : cu.cuMemcpyDtoHAsync_v2(host, dev, n, s),
              dir == H2D ? "cuMemcpyHtoDAsync_v2" : "cuMemcpyDtoHAsync_v2");
        check(cu.cuStreamSynchronize(s), "cuStreamSynchronize");
        double gbs = (double)n / (now() - t0) / 1e9;
        if (i >= 0 && gbs > best)
            best = gbs;
    }
    return best;
}

/* Queue `count` memsets of the n bytes at d on s: a few tens of ms of
 * device work that needs nothing from the host. */
static void keep_busy(swcu_stream s, swcu_deviceptr d, size_t n, int count)
{
    for (int i = 0; i < count; i++)
        check(cu.cuMemsetD32Async(d, (unsigned)i, n / 4, s),
              "cuMemsetD32Async");
}

/* Milliseconds a cuMemHostAlloc (free: 0) or cuMemFreeHost (free: 1) of
 * bytes took, with s busy (busy: the memsets to queue first, else idle);
 * *waited: whether s had finished by the time it returned. */
static double pinned_call_ms(int free_it, size_t bytes, swcu_stream s,
                             swcu_deviceptr d, size_t n, int busy,
                             int *waited)
{
    void *p = NULL;
    if (free_it)
        check(cu.cuMemHostAlloc(&p, bytes, SWCU_CU_MEMHOSTALLOC_PORTABLE),
              "cuMemHostAlloc");
    keep_busy(s, d, n, busy);
    double t0 = now();
    if (free_it)
        check(cu.cuMemFreeHost(p), "cuMemFreeHost");
    else
        check(cu.cuMemHostAlloc(&p, bytes, SWCU_CU_MEMHOSTALLOC_PORTABLE),
              "cuMemHostAlloc");
    double ms = (now() - t0) * 1e3;
    swcu_result q = cu.cuStreamQuery(s);
    *waited = busy > 0 && q == SWCU_CUDA_SUCCESS;
    check(cu.cuStreamSynchronize(s), "cuStreamSynchronize");
    if (!free_it)
        check(cu.cuMemFreeHost(p), "cuMemFreeHost");
    return ms;
}

int main(int argc, char **argv)
{
    int index = argc > 1 ? atoi(argv[1]) : 0;
    size_t mib = argc > 2 ? (size_t)strtoul(argv[2], NULL, 10) : 256;
    size_t n = mib << 20;
    if (n == 0) {
        fprintf(stderr, "usage: copy_rates [DEVICE_INDEX [MIB]]\n");
        return 2;
    }
    /* As the backend does: $SPILLWAY_CUDA_LIBRARY names another driver
     * (check.sh's dry run points it at the fake one). */
    const char *path = getenv("SPILLWAY_CUDA_LIBRARY");
    if (path == NULL || path[0] == '\0')
        path = "libcuda.so.1";
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "copy_rates: %s\n", dlerror());
        return 1;
    }
#define RESOLVE(kind, pub, sym, params)                                       \
    {                                                                         \
        void *p = dlsym(lib, #sym);                                           \
        if (p == NULL && (kind) != 0) {                                       \
            fprintf(stderr, "copy_rates: libcuda.so.1 lacks %s\n", #sym);     \
            return 1;                                                         \
        }                                                                     \
        memcpy(&cu.sym, &p, sizeof p);                                        \
    }
    SWCU_DRIVER_FUNCS(RESOLVE)
#undef RESOLVE

    check(cu.cuInit(0), "cuInit");
    swcu_device dev;
    check(cu.cuDeviceGet(&dev, index), "cuDeviceGet");
    swcu_context ctx;
    check(cu.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cu.cuCtxPushCurrent_v2(ctx), "cuCtxPushCurrent_v2");
    char name[128] = "";
    check(cu.cuDeviceGetName(name, sizeof name, dev), "cuDeviceGetName");
    swcu_stream s;
    check(cu.cuStreamCreate(&s, SWCU_CU_STREAM_NON_BLOCKING),
          "cuStreamCreate");
    swcu_deviceptr d;
    check(cu.cuMemAlloc_v2(&d, n), "cuMemAlloc_v2");

    /* Pageable: malloc'd and touched first, as spillway's host copies are
     * (it keeps them for reuse, so page faults are not part of a spill). */
    void *pageable = malloc(n);
    if (pageable == NULL) {
        fprintf(stderr, "copy_rates: no host memory for %zu MiB\n", mib);
        return 1;
    }
    memset(pageable, 0x5a, n);
    void *pinned = NULL;
    check(cu.cuMemHostAlloc(&pinned, n, SWCU_CU_MEMHOSTALLOC_PORTABLE),
          "cuMemHostAlloc");
    memset(pinned, 0x5a, n);

    const int reps = 5;
    double ph = rate(H2D, pageable, d, n, s, reps);
    double pd = rate(D2H, pageable, d, n, s, reps);
    double nh = rate(H2D, pinned, d, n, s, reps);
    double nd = rate(D2H, pinned, d, n, s, reps);

    printf("device %d: %s, %zu MiB per copy, best of %d\n", index, name, mib,
           reps);
    printf("RESULT pageable_h2d_gbs=%.2f\n", ph);
    printf("RESULT pageable_d2h_gbs=%.2f\n", pd);
    printf("RESULT pinned_h2d_gbs=%.2f\n", nh);
    printf("RESULT pinned_d2h_gbs=%.2f\n", nd);

    /* Pinned allocation and free of 64 MiB with the device idle and with
     * ~busy_ms of memsets queued (calibrated: the memsets alone, timed). */
    int count = 1;
    double busy_ms = 0;
    for (;;) {
        double t0 = now();
        keep_busy(s, d, n, count);
        check(cu.cuStreamSynchronize(s), "cuStreamSynchronize");
        busy_ms = (now() - t0) * 1e3;
        if (busy_ms >= 50 || count >= 8192)
            break;
        count *= 2;
    }
    int w_idle, wa, wf;
    size_t blk = (size_t)64 << 20;
    double ai = pinned_call_ms(0, blk, s, d, n, 0, &w_idle);
    double ab = pinned_call_ms(0, blk, s, d, n, count, &wa);
    double fi = pinned_call_ms(1, blk, s, d, n, 0, &w_idle);
    double fb = pinned_call_ms(1, blk, s, d, n, count, &wf);
    printf("pinned 64 MiB with %.0f ms of device work queued before it:\n",
           busy_ms);
    printf("RESULT pinned_busy_ms=%.1f\n", busy_ms);
    printf("RESULT pinned_alloc_idle_ms=%.2f\n", ai);
    printf("RESULT pinned_alloc_busy_ms=%.2f\n", ab);
    printf("RESULT pinned_alloc_waits=%d\n", wa);
    printf("RESULT pinned_free_idle_ms=%.2f\n", fi);
    printf("RESULT pinned_free_busy_ms=%.2f\n", fb);
    printf("RESULT pinned_free_waits=%d\n", wf);

    check(cu.cuMemFreeHost(pinned), "cuMemFreeHost");
    free(pageable);
    check(cu.cuMemFree_v2(d), "cuMemFree_v2");
    check(cu.cuStreamDestroy_v2(s), "cuStreamDestroy_v2");
    swcu_context popped;
    check(cu.cuCtxPopCurrent_v2(&popped), "cuCtxPopCurrent_v2");
    check(cu.cuDevicePrimaryCtxRelease_v2(dev), "cuDevicePrimaryCtxRelease_v2");
    return 0;
}
