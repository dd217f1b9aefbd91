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

    check(cu.cuMemFreeHost(pinned), "cuMemFreeHost");
    free(pageable);
    check(cu.cuMemFree_v2(d), "cuMemFree_v2");
    check(cu.cuStreamDestroy_v2(s), "cuStreamDestroy_v2");
    swcu_context popped;
    check(cu.cuCtxPopCurrent_v2(&popped), "cuCtxPopCurrent_v2");
    check(cu.cuDevicePrimaryCtxRelease_v2(dev), "cuDevicePrimaryCtxRelease_v2");
    return 0;
}
