/*
 * bench_opencl.c -- the OpenCL backend, measured as ratios against
 * baselines taken in the same run (shared, noisy machines: absolute times
 * mean little, ratios do).
 *
 *   1. allocation + free through spillway (its cache: after the first
 *      round every allocation is a cache hit) against raw clCreateBuffer +
 *      clReleaseMemObject of the same sizes, in a context of our own on the
 *      same device; once bare, once with a first use of each buffer (a
 *      4-byte fill and a wait), which is when lazy runtimes such as PoCL
 *      really allocate;
 *   2. spill and restore bandwidth of large buffers under a budget, against
 *      memcpy between pre-faulted host buffers;
 *   3. the runtime's own transfer rates into and out of plain host memory
 *      (malloc'd and touched: what spillway's host pool holds) and into a
 *      mapped CL_MEM_ALLOC_HOST_PTR buffer (the host-visible staging
 *      OpenCL offers), in the raw context: whether a host_alloc op made of
 *      such buffers would copy faster (docs/opencl.md).
 *
 * Usage: bench_opencl [--quick] [--device opencl:N]
 * Without an OpenCL device it says so and exits 0.
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CL_CHECK(call)                                                        \
    do {                                                                      \
        cl_int e_ = (call);                                                   \
        if (e_ != CL_SUCCESS) {                                               \
            fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #call,   \
                    (int)e_);                                                 \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

static volatile uint64_t sink;

static sw_memory_info info(sw_device *dev)
{
    sw_memory_info m;
    CHECK(sw_memory_info_get(dev, &m));
    return m;
}

/* The cl_device_id behind opencl:index, listed as the backend lists them
 * (platform order, device order; OpenCL 1.2+, available, with a
 * compiler). */
static cl_device_id find_cl_device(int index, cl_platform_id *plat)
{
    cl_platform_id plats[16];
    cl_uint np = 0;
    if (clGetPlatformIDs(16, plats, &np) != CL_SUCCESS)
        return NULL;
    int seen = 0;
    for (cl_uint p = 0; p < np && p < 16; p++) {
        cl_device_id devs[64];
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 64, devs, &nd) !=
            CL_SUCCESS)
            continue;
        for (cl_uint i = 0; i < nd && i < 64; i++) {
            char ver[128] = "";
            int major = 0, minor = 0;
            cl_bool avail = CL_FALSE, comp = CL_FALSE;
            clGetDeviceInfo(devs[i], CL_DEVICE_VERSION, sizeof ver - 1, ver,
                            NULL);
            clGetDeviceInfo(devs[i], CL_DEVICE_AVAILABLE, sizeof avail,
                            &avail, NULL);
            clGetDeviceInfo(devs[i], CL_DEVICE_COMPILER_AVAILABLE,
                            sizeof comp, &comp, NULL);
            if (sscanf(ver, "OpenCL %d.%d", &major, &minor) != 2 ||
                major * 100 + minor * 10 < 120 || !avail || !comp)
                continue;
            if (seen++ == index) {
                *plat = plats[p];
                return devs[i];
            }
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------
 * 1. Allocation
 * ---------------------------------------------------------------------- */

typedef struct raw_cl {
    cl_context ctx;
    cl_command_queue q;
} raw_cl;

/* ns per create + release (use: plus a 4-byte fill and a wait). */
static double raw_ns(raw_cl *r, size_t size, long iters, int use)
{
    const uint32_t pat = 0x5a5a5a5a;
    double t0 = now();
    for (long i = 0; i < iters; i++) {
        cl_int err = CL_SUCCESS;
        cl_mem m = clCreateBuffer(r->ctx, CL_MEM_READ_WRITE, size, NULL, &err);
        if (!m || err != CL_SUCCESS) {
            fprintf(stderr, "clCreateBuffer(%zu) -> %d\n", size, (int)err);
            exit(1);
        }
        if (use) {
            CL_CHECK(clEnqueueFillBuffer(r->q, m, &pat, 4, 0, 4, 0, NULL,
                                         NULL));
            CL_CHECK(clFinish(r->q));
        }
        CL_CHECK(clReleaseMemObject(m));
    }
    if (!use)
        CL_CHECK(clFinish(r->q));
    return (now() - t0) / (double)iters * 1e9;
}

static double sw_ns(sw_device *dev, size_t size, long iters, int use)
{
    const uint32_t pat = 0x5a5a5a5a;
    double t0 = now();
    for (long i = 0; i < iters; i++) {
        sw_buffer *b;
        CHECK(sw_buffer_alloc(dev, size, "bench", &b));
        if (use) {
            CHECK(sw_buffer_fill(b, 0, 4, &pat, 4));
            CHECK(sw_device_synchronize(dev));
        }
        CHECK(sw_buffer_free(b));
    }
    return (now() - t0) / (double)iters * 1e9;
}

static double min_d(double a, double b) { return a < b ? a : b; }

static void bench_alloc(sw_device *dev, raw_cl *raw, int quick)
{
    static const size_t sizes[] = {512, 64 << 10, 1 << 20, 16 << 20,
                                   64 << 20};
    printf("allocation + free, ns per pair (spillway: cache hits after the "
           "first)\n");
    printf("  %-9s %12s %12s %7s   %12s %12s %7s\n", "size", "raw", "spillway",
           "ratio", "raw+use", "sw+use", "ratio");
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t s = sizes[k];
        long iters = quick ? 2000 : 20000;
        long uiters = quick ? 100 : 1000;
        (void)sw_ns(dev, s, 10, 1); /* warm the cache and the kernels */
        (void)raw_ns(raw, s, 10, 1);
        /* Best of three, alternating, so that a burst of noise (or the
         * runtime's threads still busy with earlier work) hits one round,
         * not one side. */
        double r = 1e30, w = 1e30, ru = 1e30, wu = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            r = min_d(r, raw_ns(raw, s, iters, 0));
            w = min_d(w, sw_ns(dev, s, iters, 0));
            ru = min_d(ru, raw_ns(raw, s, uiters, 1));
            wu = min_d(wu, sw_ns(dev, s, uiters, 1));
        }
        char label[32];
        if (s >= (1 << 20))
            snprintf(label, sizeof label, "%zu MiB", s >> 20);
        else if (s >= 1024)
            snprintf(label, sizeof label, "%zu KiB", s >> 10);
        else
            snprintf(label, sizeof label, "%zu B", s);
        printf("  %-9s %12.0f %12.0f %7.2f   %12.0f %12.0f %7.2f\n", label, r,
               w, w / r, ru, wu, wu / ru);
    }
    printf("  (ratio = spillway / raw; below 1 means spillway is faster)\n");
    CHECK(sw_empty_cache(dev));
}

/* ------------------------------------------------------------------------
 * 2. Spill and restore bandwidth
 * ---------------------------------------------------------------------- */

static double memcpy_gbps(size_t size, int reps)
{
    char *a = malloc(size), *b = malloc(size);
    if (!a || !b)
        exit(1);
    memset(a, 1, size);
    memset(b, 2, size);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        memcpy(b, a, size);
        double dt = now() - t0;
        sink += (uint64_t)b[size / 2];
        double g = (double)size / dt / 1e9;
        if (g > best)
            best = g;
    }
    free(a);
    free(b);
    return best;
}

static void bench_bandwidth(sw_device *dev, size_t size, int nbuf, int rounds)
{
    sw_buffer **bufs = calloc((size_t)nbuf, sizeof *bufs);
    char *pattern = malloc(size);
    if (!bufs || !pattern)
        exit(1);
    memset(pattern, 0x5a, size);
    /* Half fit: touching them in turn spills one and restores one. */
    CHECK(sw_set_memory_budget(dev, (uint64_t)size * (uint64_t)nbuf / 2));
    for (int i = 0; i < nbuf; i++) {
        CHECK(sw_buffer_alloc(dev, size, "bench", &bufs[i]));
        CHECK(sw_buffer_write(bufs[i], 0, pattern, size));
    }
    /* Round 0 apart: its spills copy into host memory the pool does not
     * have yet (the pool holds what restores gave back, and no restore has
     * run), so they pay its page faults; later rounds reuse it, as a
     * workload past its first steps does.  Each phase ends with a
     * synchronize, so that its copies' time is counted in it. */
    sw_memory_info m0 = info(dev), m1 = m0;
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < nbuf; i++) {
            sw_devmem p;
            CHECK(sw_buffer_device_ptr(bufs[i], &p));
        }
        if (r == 0) {
            CHECK(sw_device_synchronize(dev));
            m1 = info(dev);
        }
    }
    CHECK(sw_device_synchronize(dev));
    sw_memory_info m2 = info(dev);
    double spill0 = (double)(m1.spilled_bytes_total - m0.spilled_bytes_total) /
                    (m1.spill_seconds - m0.spill_seconds) / 1e9;
    double restore0 =
        (double)(m1.restored_bytes_total - m0.restored_bytes_total) /
        (m1.restore_seconds - m0.restore_seconds) / 1e9;
    double spill = (double)(m2.spilled_bytes_total - m1.spilled_bytes_total) /
                   (m2.spill_seconds - m1.spill_seconds) / 1e9;
    double restore =
        (double)(m2.restored_bytes_total - m1.restored_bytes_total) /
        (m2.restore_seconds - m1.restore_seconds) / 1e9;
    double base = memcpy_gbps(size, 5);
    printf("spill and restore (%zu MiB buffers, %llu spills, %llu "
           "restores after a first round)\n",
           size >> 20, (unsigned long long)(m2.spills - m1.spills),
           (unsigned long long)(m2.restores - m1.restores));
    printf("  %-24s %8.2f GB/s\n", "memcpy baseline", base);
    printf("  %-24s %8.2f GB/s   ratio %.2f\n", "spill (device->host)", spill,
           spill / base);
    printf("  %-24s %8.2f GB/s   ratio %.2f\n", "restore (host->device)",
           restore, restore / base);
    printf("  first round, host pool filling: spill %.2f, restore %.2f of "
           "memcpy\n", spill0 / base, restore0 / base);
    CHECK(sw_set_memory_budget(dev, 0));
    for (int i = 0; i < nbuf; i++)
        CHECK(sw_buffer_free(bufs[i]));
    CHECK(sw_empty_cache(dev));
    free(bufs);
    free(pattern);
}

/* ------------------------------------------------------------------------
 * 3. Staging: plain host memory against a mapped ALLOC_HOST_PTR buffer
 * ---------------------------------------------------------------------- */

/* Best of reps blocking transfers of n bytes between dev and host, GB/s
 * (to_host: clEnqueueReadBuffer, else clEnqueueWriteBuffer). */
static double xfer_gbps(raw_cl *r, cl_mem dev, void *host, size_t n,
                        int to_host, int reps)
{
    double best = 0;
    for (int i = -1; i < reps; i++) { /* -1: warm-up */
        double t0 = now();
        if (to_host)
            CL_CHECK(clEnqueueReadBuffer(r->q, dev, CL_TRUE, 0, n, host, 0,
                                         NULL, NULL));
        else
            CL_CHECK(clEnqueueWriteBuffer(r->q, dev, CL_TRUE, 0, n, host, 0,
                                          NULL, NULL));
        double g = (double)n / (now() - t0) / 1e9;
        if (i >= 0 && g > best)
            best = g;
    }
    return best;
}

static void bench_staging(raw_cl *r, size_t n, int reps)
{
    cl_int err = CL_SUCCESS;
    cl_mem dev = clCreateBuffer(r->ctx, CL_MEM_READ_WRITE, n, NULL, &err);
    CL_CHECK(err);
    const uint32_t pat = 0x5a5a5a5a;
    CL_CHECK(clEnqueueFillBuffer(r->q, dev, &pat, 4, 0, n, 0, NULL, NULL));
    CL_CHECK(clFinish(r->q));
    char *plain = malloc(n);
    if (!plain)
        exit(1);
    memset(plain, 1, n);
    cl_mem stage = clCreateBuffer(
        r->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, n, NULL, &err);
    CL_CHECK(err);
    char *mapped = clEnqueueMapBuffer(r->q, stage, CL_TRUE,
                                      CL_MAP_READ | CL_MAP_WRITE, 0, n, 0,
                                      NULL, NULL, &err);
    CL_CHECK(err);
    memset(mapped, 1, n);
    double pd = 0, ph = 0, sd = 0, sh = 0;
    for (int round = 0; round < 2; round++) { /* alternating, best of both */
        double v;
        if ((v = xfer_gbps(r, dev, plain, n, 1, reps)) > pd)
            pd = v;
        if ((v = xfer_gbps(r, dev, mapped, n, 1, reps)) > sd)
            sd = v;
        if ((v = xfer_gbps(r, dev, plain, n, 0, reps)) > ph)
            ph = v;
        if ((v = xfer_gbps(r, dev, mapped, n, 0, reps)) > sh)
            sh = v;
    }
    sink += (uint64_t)plain[n / 2] + (uint64_t)mapped[n / 2];
    double base = memcpy_gbps(n, 5);
    printf("staging (%zu MiB, the runtime's own blocking transfers, best of "
           "%d)\n", n >> 20, 2 * reps);
    printf("  %-34s %8.2f GB/s\n", "memcpy baseline", base);
    printf("  %-34s %8.2f GB/s   ratio %.2f\n",
           "device->host, plain host memory", pd, pd / base);
    printf("  %-34s %8.2f GB/s   ratio %.2f  (%.2f of plain)\n",
           "device->host, mapped ALLOC_HOST_PTR", sd, sd / base, sd / pd);
    printf("  %-34s %8.2f GB/s   ratio %.2f\n",
           "host->device, plain host memory", ph, ph / base);
    printf("  %-34s %8.2f GB/s   ratio %.2f  (%.2f of plain)\n",
           "host->device, mapped ALLOC_HOST_PTR", sh, sh / base, sh / ph);
    CL_CHECK(clEnqueueUnmapMemObject(r->q, stage, mapped, 0, NULL, NULL));
    CL_CHECK(clFinish(r->q));
    CL_CHECK(clReleaseMemObject(stage));
    CL_CHECK(clReleaseMemObject(dev));
    free(plain);
}

int main(int argc, char **argv)
{
    int quick = 0;
    const char *spec = "opencl:0";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
            spec = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--quick] [--device opencl:N]\n",
                    argv[0]);
            return 2;
        }
    }
    if (strncmp(spec, "opencl:", 7) != 0) {
        fprintf(stderr, "bench_opencl: %s is not an OpenCL device\n", spec);
        return 2;
    }
    sw_device *dev;
    int rc = sw_device_open(spec, &dev);
    if (rc == SW_ERR_NO_DEVICE) {
        printf("bench_opencl: skipped: %s\n", sw_last_error());
        return 0;
    }
    CHECK(rc);
    cl_platform_id plat = NULL;
    cl_device_id d = find_cl_device(atoi(spec + 7), &plat);
    if (!d) {
        fprintf(stderr, "bench_opencl: cannot find %s's cl_device_id\n",
                spec);
        return 1;
    }
    raw_cl raw;
    cl_int err = CL_SUCCESS;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                     (cl_context_properties)plat, 0};
    raw.ctx = clCreateContext(props, 1, &d, NULL, NULL, &err);
    CL_CHECK(err);
    raw.q = clCreateCommandQueue(raw.ctx, d, 0, &err);
    CL_CHECK(err);

    printf("spillway bench_opencl on %s (%s)%s\n\n", sw_device_name(dev),
           sw_device_description(dev), quick ? ", quick" : "");
    bench_alloc(dev, &raw, quick);
    printf("\n");
    bench_bandwidth(dev, quick ? (size_t)16 << 20 : (size_t)64 << 20, 8,
                    quick ? 2 : 4);
    printf("\n");
    bench_staging(&raw, quick ? (size_t)16 << 20 : (size_t)64 << 20,
                  quick ? 3 : 5);

    clReleaseCommandQueue(raw.q);
    clReleaseContext(raw.ctx);
    CHECK(sw_device_close(dev));
    return 0;
}
