/*
 * spillway.c -- the command-line program: look at devices, walk through the
 * library on one.
 *
 *   spillway info                 every device, its memory in a table
 *   spillway devices              device specs, one per line (for scripts)
 *   spillway demo [options]       a step-by-step walk-through on a device
 *
 * It uses the public API only (spillway.h), as any caller would, so it is
 * also a small end-to-end check of the library: every result the demo shows
 * is verified, and any unexpected error ends it with the code's name and
 * the library's detail message (exit status 1).  Usage errors exit with 2.
 */
#include "spillway.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STR2(x) #x
#define STR(x) STR2(x)
#define SW_VERSION_STRING                                                     \
    STR(SW_VERSION_MAJOR) "." STR(SW_VERSION_MINOR) "." STR(SW_VERSION_PATCH)

#define KIB ((uint64_t)1024)
#define MIB (KIB * 1024)
#define GIB (MIB * 1024)

static const char *progname = "spillway";

/* ------------------------------------------------------------------------
 * Small helpers: sizes, usage, errors
 * ---------------------------------------------------------------------- */

/* A byte count in human units ("512 B", "4.00 MiB").  The result lives in
 * one of a ring of static buffers, so a few can appear in one printf. */
static const char *human(uint64_t bytes)
{
    static char ring[16][32];
    static unsigned next;
    char *buf = ring[next++ % 16];
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};

    if (bytes < KIB) {
        snprintf(buf, sizeof ring[0], "%" PRIu64 " B", bytes);
        return buf;
    }
    double v = (double)bytes / 1024.0;
    size_t u = 0;
    /* 1023.999 KiB prints as 1.00 MiB, not 1024.00 KiB. */
    while (v >= 1023.995 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, sizeof ring[0], "%.2f %s", v, units[u]);
    return buf;
}

/* Parse "4096", "512K", "512M", "1G", "2GiB", "64mb" (binary units) into
 * *out.  Returns 0, or -1 for anything else (including overflow). */
static int parse_size(const char *s, uint64_t *out)
{
    if (s == NULL || !isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE)
        return -1;
    uint64_t mult = 1;
    switch (toupper((unsigned char)*end)) {
    case '\0':
        break;
    case 'K': mult = KIB; end++; break;
    case 'M': mult = MIB; end++; break;
    case 'G': mult = GIB; end++; break;
    case 'T': mult = GIB * 1024; end++; break;
    case 'B':
        break;
    default:
        return -1;
    }
    /* Optional "iB" / "B" after a unit, "B" after a plain number. */
    if (mult > 1 && (end[0] == 'i' || end[0] == 'I') &&
        (end[1] == 'B' || end[1] == 'b'))
        end += 2;
    else if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0')
        return -1;
    if (v > UINT64_MAX / mult)
        return -1;
    *out = (uint64_t)v * mult;
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: %s COMMAND [OPTIONS]\n"
            "\n"
            "Accelerator memory manager: accounting, caching, budgets.\n"
            "\n"
            "commands:\n"
            "  info                  list every device with its memory\n"
            "  devices               print device specs, one per line\n"
            "  demo [OPTIONS]        walk through allocation, data, kernels,\n"
            "                        peak scopes, the cache and a budget\n"
            "      --device SPEC     device to use (default: $SPILLWAY_DEVICE"
            " or sim:0)\n"
            "      --budget SIZE     budget for the budget step (default:\n"
            "                        what is held then plus 1 MiB)\n"
            "      --steps N         rounds of the cache step (default 3)\n"
            "\n"
            "  -h, --help            show this help\n"
            "  -V, --version         show the version\n"
            "\n"
            "SIZE is a byte count with an optional K, M, G or T suffix (binary\n"
            "units: 512M = 512 MiB).  Environment: SPILLWAY_DEVICE (default\n"
            "device), SPILLWAY_SIM_MEMORY (simulated device size, e.g. 512M),\n"
            "SPILLWAY_SIM_DEVICES (number of simulated devices).\n",
            progname);
}

static int usage_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", progname);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n\n");
    usage(stderr);
    return 2;
}

/* Report a failed library call: what was called, the code's name and the
 * library's detail message.  The detail is copied first: it is only valid
 * until the next spillway call. */
static void report(const char *what, int err)
{
    char detail[4096];
    snprintf(detail, sizeof detail, "%s", sw_last_error());
    fprintf(stderr, "%s: %s failed: %s (%s)%s%s\n", progname, what,
            sw_err_name(err), sw_strerror(err), detail[0] ? ": " : "",
            detail);
}

/* A demo check that is not a library error (a wrong result). */
static void mismatch(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: check failed: ", progname);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* ------------------------------------------------------------------------
 * spillway devices / spillway info
 * ---------------------------------------------------------------------- */

static int list_specs(size_t *count)
{
    int err = sw_device_count(count);
    if (err != SW_OK) {
        report("sw_device_count", err);
        return 1;
    }
    return 0;
}

static int cmd_devices(void)
{
    size_t n;
    if (list_specs(&n))
        return 1;
    for (size_t i = 0; i < n; i++) {
        char spec[128];
        int err = sw_device_spec_at(i, spec, sizeof spec);
        if (err != SW_OK) {
            report("sw_device_spec_at", err);
            return 1;
        }
        printf("%s\n", spec);
    }
    return 0;
}

static int cmd_info(void)
{
    size_t n;
    if (list_specs(&n))
        return 1;
    printf("spillway %s: %zu device%s\n", SW_VERSION_STRING, n,
           n == 1 ? "" : "s");
    if (n == 0) {
        const char *why = sw_last_error();
        printf("no device can be listed: no backend found a device%s%s\n",
               why[0] ? ": " : "", why);
        return 1;
    }

    int status = 0;
    printf("\n%-12s %11s %11s %11s %11s %11s %11s  %s\n", "DEVICE", "TOTAL",
           "FREE", "IN USE", "CACHED", "PEAK", "BUDGET", "DESCRIPTION");
    for (size_t i = 0; i < n; i++) {
        char spec[128];
        int err = sw_device_spec_at(i, spec, sizeof spec);
        if (err != SW_OK) {
            report("sw_device_spec_at", err);
            status = 1;
            continue;
        }
        sw_device *dev;
        err = sw_device_open(spec, &dev);
        if (err != SW_OK) {
            char detail[512];
            snprintf(detail, sizeof detail, "%s", sw_last_error());
            printf("%-12s cannot open: %s%s%s\n", spec, sw_err_name(err),
                   detail[0] ? ": " : "", detail);
            status = 1;
            continue;
        }
        sw_memory_info mi;
        err = sw_memory_info_get(dev, &mi);
        if (err != SW_OK) {
            report("sw_memory_info_get", err);
            status = 1;
        } else {
            printf("%-12s %11s %11s %11s %11s %11s %11s  %s\n", spec,
                   mi.device_total ? human(mi.device_total) : "unknown",
                   mi.device_free_known ? human(mi.device_free) : "unknown",
                   human(mi.in_use), human(mi.cached), human(mi.peak),
                   mi.budget ? human(mi.budget) : "none",
                   sw_device_description(dev));
        }
        err = sw_device_close(dev);
        if (err != SW_OK) {
            report("sw_device_close", err);
            status = 1;
        }
    }
    return status;
}

/* ------------------------------------------------------------------------
 * spillway demo
 * ---------------------------------------------------------------------- */

/* Every buffer the demo holds, so that a failure anywhere can free them all
 * and close the device cleanly. */
enum { MAX_BUFS = 32 };

typedef struct demo {
    sw_device *dev;
    sw_buffer *bufs[MAX_BUFS];
    uint64_t budget_opt; /* --budget, 0: default */
    unsigned steps;      /* --steps */
    size_t n;            /* elements of the main float32 buffers */
    uint64_t total;      /* device capacity, 0 if unknown */
} demo;

/* Call a library function; on failure report it and fail the demo. */
#define TRY(call)                                                             \
    do {                                                                      \
        int try_err_ = (call);                                                \
        if (try_err_ != SW_OK) {                                              \
            report(#call, try_err_);                                          \
            return 1;                                                         \
        }                                                                     \
    } while (0)

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (!(cond)) {                                                        \
            mismatch(__VA_ARGS__);                                            \
            return 1;                                                         \
        }                                                                     \
    } while (0)

static int track(demo *d, sw_buffer *b)
{
    for (size_t i = 0; i < MAX_BUFS; i++) {
        if (d->bufs[i] == NULL) {
            d->bufs[i] = b;
            return 0;
        }
    }
    mismatch("demo holds too many buffers");
    sw_buffer_free(b);
    return 1;
}

static int release(demo *d, sw_buffer **b)
{
    for (size_t i = 0; i < MAX_BUFS; i++) {
        if (d->bufs[i] == *b)
            d->bufs[i] = NULL;
    }
    int err = sw_buffer_free(*b);
    *b = NULL;
    if (err != SW_OK) {
        report("sw_buffer_free", err);
        return 1;
    }
    return 0;
}

static int info(demo *d, sw_memory_info *mi)
{
    TRY(sw_memory_info_get(d->dev, mi));
    return 0;
}

/* One line: what happened, then in_use / peak / cached after it. */
static int show(demo *d, const char *fmt, ...)
{
    sw_memory_info mi;
    if (info(d, &mi))
        return 1;
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    printf("  %-44s in_use %10s  peak %10s  cached %10s\n", what,
           human(mi.in_use), human(mi.peak), human(mi.cached));
    return 0;
}

static int alloc(demo *d, size_t size, const char *tag, sw_buffer **out)
{
    int err = sw_buffer_alloc(d->dev, size, tag, out);
    if (err != SW_OK) {
        char what[96];
        snprintf(what, sizeof what, "sw_buffer_alloc(%s, %s)", tag,
                 human(size));
        report(what, err);
        return 1;
    }
    if (track(d, *out))
        return 1;
    return show(d, "alloc %-16s %10s", tag, human(size));
}

/* want bytes, or less on a small device (at most 1/32 of it), rounded to
 * the allocation granularity. */
static size_t fit(const demo *d, size_t want)
{
    if (d->total && want > d->total / 32)
        want = (size_t)(d->total / 32);
    want -= want % SW_ALLOC_GRANULARITY;
    return want ? want : SW_ALLOC_GRANULARITY;
}

static void step(int *k, const char *title)
{
    printf("\n[%d] %s\n", ++*k, title);
}

/* float32 test data whose sums and products are exact in float32 and
 * float64, so results can be compared exactly. */
static float xval(size_t i) { return (float)(i % 1000) * 0.25f; }
static float yval(size_t i) { return 1.0f + (float)(i % 7); }

static int step_data(demo *d, sw_buffer *x, sw_buffer *y)
{
    size_t n = d->n, bytes = n * sizeof(float);
    float *h = malloc(bytes), *back = malloc(bytes);
    if (h == NULL || back == NULL) {
        free(h);
        free(back);
        mismatch("out of host memory for %s", human(bytes));
        return 1;
    }
    int rc = 1, err;
    for (size_t i = 0; i < n; i++)
        h[i] = xval(i);
    if ((err = sw_buffer_write(x, 0, h, bytes)) != SW_OK) {
        report("sw_buffer_write(demo/x)", err);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        h[i] = yval(i);
    if ((err = sw_buffer_write(y, 0, h, bytes)) != SW_OK) {
        report("sw_buffer_write(demo/y)", err);
        goto out;
    }
    if ((err = sw_buffer_read(x, 0, back, bytes)) != SW_OK) {
        report("sw_buffer_read(demo/x)", err);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (back[i] != xval(i)) {
            mismatch("demo/x[%zu] reads back %g, wrote %g", i, back[i],
                     xval(i));
            goto out;
        }
    }
    printf("  wrote demo/x and demo/y (%zu float32 each), read demo/x back:"
           " identical\n",
           n);
    rc = 0;
out:
    free(h);
    free(back);
    return rc;
}

/* Read n float32 from b and compare with want(i); name for the message. */
static int expect_f32(sw_buffer *b, size_t n, const char *name,
                      double (*want)(size_t))
{
    float *h = malloc(n * sizeof(float));
    if (h == NULL) {
        mismatch("out of host memory");
        return 1;
    }
    int err = sw_buffer_read(b, 0, h, n * sizeof(float));
    if (err != SW_OK) {
        free(h);
        report("sw_buffer_read", err);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        if ((double)h[i] != want(i)) {
            mismatch("%s[%zu] = %g, expected %g", name, i, h[i], want(i));
            free(h);
            return 1;
        }
    }
    free(h);
    return 0;
}

static double want_add(size_t i) { return (double)(xval(i) + yval(i)); }
static double want_scale(size_t i) { return (double)(2.5f * xval(i)); }
static double want_axpy(size_t i)
{
    return (double)(0.5f * xval(i) + yval(i));
}

static int step_kernels(demo *d, sw_buffer *x, sw_buffer *y, sw_buffer *out)
{
    size_t n = d->n;
    sw_scalar s;

    TRY(sw_op_add(out, x, y, SW_FLOAT32, n));
    if (expect_f32(out, n, "add: out", want_add))
        return 1;
    printf("  add    out = x + y                      verified %zu"
           " elements\n",
           n);

    s.f = 2.5;
    TRY(sw_op_scale(out, x, s, SW_FLOAT32, n));
    if (expect_f32(out, n, "scale: out", want_scale))
        return 1;
    printf("  scale  out = 2.5 * x                    verified %zu"
           " elements\n",
           n);

    s.f = 0.5;
    TRY(sw_op_axpy(s, x, y, SW_FLOAT32, n));
    if (expect_f32(y, n, "axpy: y", want_axpy))
        return 1;
    printf("  axpy   y = 0.5 * x + y                  verified %zu"
           " elements\n",
           n);

    double want = 0;
    for (size_t i = 0; i < n; i++)
        want += (double)xval(i);
    sw_scalar sum;
    TRY(sw_op_sum(x, SW_FLOAT32, n, &sum));
    CHECK(sum.f == want, "sum(x) = %.17g, expected %.17g", sum.f, want);
    printf("  sum    sum(x) = %-22.10g verified on the host\n", sum.f);

    /* The same on integers, which wrap. */
    enum { NI = 4096 };
    int32_t a[NI], b[NI], c[NI];
    int64_t isum = 0;
    for (size_t i = 0; i < NI; i++) {
        a[i] = (int32_t)(uint32_t)(i * 2654435761u);
        b[i] = (int32_t)(uint32_t)(i * 40503u + 7u);
        isum += a[i];
    }
    sw_buffer *ia, *ib, *ic;
    if (alloc(d, sizeof a, "demo/int-a", &ia) ||
        alloc(d, sizeof b, "demo/int-b", &ib) ||
        alloc(d, sizeof c, "demo/int-c", &ic))
        return 1;
    TRY(sw_buffer_write(ia, 0, a, sizeof a));
    TRY(sw_buffer_write(ib, 0, b, sizeof b));
    TRY(sw_op_add(ic, ia, ib, SW_INT32, NI));
    TRY(sw_buffer_read(ic, 0, c, sizeof c));
    for (size_t i = 0; i < NI; i++) {
        int32_t w = (int32_t)((uint32_t)a[i] + (uint32_t)b[i]);
        CHECK(c[i] == w, "int32 add: c[%zu] = %" PRId32 ", expected %" PRId32,
              i, c[i], w);
    }
    TRY(sw_op_sum(ia, SW_INT32, NI, &sum));
    CHECK(sum.i == isum, "int32 sum = %" PRId64 ", expected %" PRId64, sum.i,
          isum);
    printf("  int32  add (wrapping) and sum = %" PRId64 "   verified\n",
           sum.i);
    if (release(d, &ia) || release(d, &ib) || release(d, &ic))
        return 1;
    return show(d, "freed the int32 buffers");
}

static int step_scopes(demo *d)
{
    sw_memory_info mi;
    if (info(d, &mi))
        return 1;
    uint64_t base = mi.in_use;
    size_t a_size = fit(d, 8 * MIB), b_size = 2 * a_size;

    sw_peak_scope *outer = NULL, *inner = NULL;
    uint64_t inner_peak = 0, outer_peak = 0;
    sw_buffer *ta = NULL, *tb = NULL;

    TRY(sw_peak_scope_begin(d->dev, &outer));
    printf("  outer scope begins at in_use %s\n", human(base));
    if (alloc(d, a_size, "demo/scope-a", &ta))
        return 1;
    TRY(sw_peak_scope_begin(d->dev, &inner));
    printf("  inner scope begins at in_use %s\n", human(base + a_size));
    if (alloc(d, b_size, "demo/scope-b", &tb) || release(d, &tb) ||
        show(d, "free demo/scope-b"))
        return 1;
    TRY(sw_peak_scope_end(inner, &inner_peak));
    printf("  inner scope ends: its peak %s\n", human(inner_peak));
    CHECK(inner_peak == base + a_size + b_size,
          "inner scope peak %s, expected %s", human(inner_peak),
          human(base + a_size + b_size));

    TRY(sw_reset_peak(d->dev));
    if (show(d, "sw_reset_peak (device peak = in_use)"))
        return 1;
    uint64_t so_far;
    TRY(sw_peak_scope_peak(outer, &so_far));
    printf("  outer scope so far: %s (the reset does not disturb it)\n",
           human(so_far));
    CHECK(so_far == inner_peak, "outer scope peak %s after reset, expected %s",
          human(so_far), human(inner_peak));

    if (release(d, &ta) || show(d, "free demo/scope-a"))
        return 1;
    TRY(sw_peak_scope_end(outer, &outer_peak));
    printf("  outer scope ends: its peak %s\n", human(outer_peak));
    CHECK(outer_peak == inner_peak, "outer scope peak %s, expected %s",
          human(outer_peak), human(inner_peak));
    return 0;
}

static int step_cache(demo *d)
{
    size_t sizes[] = {fit(d, 1 * MIB), fit(d, 3 * MIB + 512),
                      fit(d, 256 * KIB) / 2};
    size_t nsizes = sizeof sizes / sizeof sizes[0];
    sw_memory_info mi;

    for (unsigned round = 1; round <= d->steps; round++) {
        sw_buffer *t[3] = {NULL, NULL, NULL};
        if (info(d, &mi))
            return 1;
        uint64_t cached_before = mi.cached;
        for (size_t i = 0; i < nsizes; i++) {
            char tag[32];
            snprintf(tag, sizeof tag, "demo/round%u-%zu", round, i);
            if (alloc(d, sizes[i], tag, &t[i]))
                return 1;
        }
        if (info(d, &mi))
            return 1;
        if (round > 1) {
            printf("  round %u: cached %s -> %s: blocks reused from the"
                   " cache\n",
                   round, human(cached_before), human(mi.cached));
            CHECK(mi.cached < cached_before,
                  "round %u: the cache did not serve any allocation", round);
        }
        for (size_t i = 0; i < nsizes; i++) {
            if (release(d, &t[i]))
                return 1;
        }
        if (show(d, "round %u: freed its %zu buffers", round, nsizes))
            return 1;
        if (info(d, &mi))
            return 1;
        CHECK(mi.cached > 0, "nothing cached after freeing");
    }
    TRY(sw_empty_cache(d->dev));
    if (show(d, "sw_empty_cache"))
        return 1;
    if (info(d, &mi))
        return 1;
    CHECK(mi.cached == 0, "cached %s after sw_empty_cache", human(mi.cached));
    return 0;
}

static int step_budget(demo *d)
{
    sw_memory_info mi;
    if (info(d, &mi))
        return 1;
    uint64_t held = mi.in_use + mi.cached;
    uint64_t budget = d->budget_opt ? d->budget_opt : held + 1 * MIB;
    TRY(sw_set_memory_budget(d->dev, budget));
    printf("  budget set to %s (spillway holds %s)\n", human(budget),
           human(held));

    /* Something that fits, when anything does. */
    if (budget > held + 64 * KIB) {
        sw_buffer *fits;
        if (alloc(d, 64 * KIB, "demo/fits", &fits) || release(d, &fits))
            return 1;
    }

    /* Then more than the whole budget: no trimming of the cache (nor, once
     * buffers can be spilled, any spilling) can make room for it. */
    uint64_t want = budget + 1 * MIB;
    want -= want % SW_ALLOC_GRANULARITY;
    sw_buffer *big = NULL;
    int err = sw_buffer_alloc(d->dev, (size_t)want, "demo/too-big", &big);
    if (err == SW_OK) {
        track(d, big);
        mismatch("allocating %s under a budget of %s succeeded",
                 human(want), human(budget));
        return 1;
    }
    char detail[4096];
    snprintf(detail, sizeof detail, "%s", sw_last_error());
    printf("  alloc demo/too-big %s: refused, as it should be:\n"
           "    %s: %s\n",
           human(want), sw_err_name(err), detail);
    CHECK(err == SW_ERR_OOM || err == SW_ERR_TOO_LARGE,
          "refused with %s, expected SW_ERR_OOM", sw_err_name(err));
    CHECK(big == NULL, "failed allocation left its out-parameter set");

    TRY(sw_set_memory_budget(d->dev, 0));
    printf("  budget removed\n");
    return 0;
}

static int demo_run(demo *d)
{
    int k = 0;
    sw_memory_info mi;
    if (info(d, &mi))
        return 1;
    printf("spillway %s demo on %s: %s\n", SW_VERSION_STRING,
           sw_device_name(d->dev), sw_device_description(d->dev));
    printf("  device total %s, free %s\n",
           mi.device_total ? human(mi.device_total) : "unknown",
           mi.device_free_known ? human(mi.device_free) : "unknown");

    /* 1M float32 (4 MiB) per buffer, less on a small device. */
    d->total = mi.device_total;
    d->n = fit(d, 4 * MIB) / sizeof(float);
    size_t bytes = d->n * sizeof(float);

    step(&k, "allocate tagged buffers of various sizes");
    sw_buffer *x, *y, *out, *small, *empty;
    if (alloc(d, bytes, "demo/x", &x) || alloc(d, bytes, "demo/y", &y) ||
        alloc(d, bytes, "demo/out", &out) ||
        alloc(d, 100, "demo/small", &small) ||
        alloc(d, 0, "demo/empty", &empty))
        return 1;
    printf("  (sizes are rounded up to %u bytes: demo/small counts %u)\n",
           SW_ALLOC_GRANULARITY, SW_ALLOC_GRANULARITY);

    step(&k, "write and read data");
    if (step_data(d, x, y))
        return 1;

    step(&k, "built-in kernels, results checked on the host");
    if (step_kernels(d, x, y, out))
        return 1;

    step(&k, "nested peak scopes");
    if (step_scopes(d))
        return 1;

    step(&k, "the cache at work");
    if (release(d, &small) || show(d, "free demo/small") ||
        release(d, &empty) || show(d, "free demo/empty"))
        return 1;
    if (step_cache(d))
        return 1;

    step(&k, "a memory budget");
    if (step_budget(d))
        return 1;

    step(&k, "free everything");
    if (release(d, &x) || show(d, "free demo/x") || release(d, &y) ||
        show(d, "free demo/y") || release(d, &out) ||
        show(d, "free demo/out"))
        return 1;
    TRY(sw_empty_cache(d->dev));
    if (info(d, &mi))
        return 1;
    printf("  in_use %s, cached %s; %" PRIu64 " allocations, %" PRIu64
           " frees, %" PRIu64 " refused\n",
           human(mi.in_use), human(mi.cached), mi.allocs, mi.frees, mi.ooms);
    CHECK(mi.in_use == 0, "in_use is %s after freeing everything",
          human(mi.in_use));
    printf("\ndemo finished: every result verified, nothing left in use\n");
    return 0;
}

static int cmd_demo(int argc, char **argv)
{
    const char *spec = NULL;
    demo d;
    memset(&d, 0, sizeof d);
    d.steps = 3;

    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i], *val = NULL;
        const char *names[] = {"--device", "--budget", "--steps"};
        int which = -1;
        for (int j = 0; j < 3; j++) {
            size_t len = strlen(names[j]);
            if (strncmp(arg, names[j], len) == 0 &&
                (arg[len] == '\0' || arg[len] == '=')) {
                which = j;
                if (arg[len] == '=')
                    val = arg + len + 1;
                else if (i + 1 < argc)
                    val = argv[++i];
                else
                    return usage_error("%s needs a value", names[j]);
            }
        }
        if (which < 0) {
            if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
                usage(stdout);
                return 0;
            }
            return usage_error("demo: unknown option '%s'", arg);
        }
        if (which == 0) {
            spec = val;
        } else if (which == 1) {
            if (parse_size(val, &d.budget_opt) || d.budget_opt == 0)
                return usage_error("--budget: '%s' is not a size (e.g. "
                                   "4096, 64K, 512M, 1G)",
                                   val);
        } else {
            uint64_t steps;
            if (parse_size(val, &steps) || steps == 0 || steps > 1000)
                return usage_error("--steps: '%s' is not a number from 1 to "
                                   "1000",
                                   val);
            d.steps = (unsigned)steps;
        }
    }

    int err = sw_device_open(spec, &d.dev);
    if (err != SW_OK) {
        char what[160];
        if (spec)
            snprintf(what, sizeof what, "sw_device_open(\"%s\")", spec);
        else
            snprintf(what, sizeof what, "sw_device_open(default device)");
        report(what, err);
        return 1;
    }
    int rc = demo_run(&d);

    /* Whatever happened, free what is still held so the device closes. */
    for (size_t i = 0; i < MAX_BUFS; i++) {
        if (d.bufs[i] != NULL)
            sw_buffer_free(d.bufs[i]);
    }
    sw_set_memory_budget(d.dev, 0);
    err = sw_device_close(d.dev);
    if (err != SW_OK) {
        report("sw_device_close", err);
        rc = 1;
    }
    fflush(stdout);
    return rc;
}

/* ------------------------------------------------------------------------
 * main
 * ---------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines in order with stderr */
    if (argc < 2)
        return usage_error("no command given");
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 ||
        strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
        printf("spillway %s\n", SW_VERSION_STRING);
        return 0;
    }
    if (strcmp(cmd, "info") == 0 || strcmp(cmd, "devices") == 0) {
        if (argc > 2) {
            if (strcmp(argv[2], "-h") == 0 || strcmp(argv[2], "--help") == 0) {
                usage(stdout);
                return 0;
            }
            return usage_error("%s: unexpected argument '%s'", cmd, argv[2]);
        }
        return cmd[0] == 'i' ? cmd_info() : cmd_devices();
    }
    if (strcmp(cmd, "demo") == 0)
        return cmd_demo(argc - 2, argv + 2);
    return usage_error("unknown command '%s'", cmd);
}
