/*
 * cmd_tour.c -- spillway tour: a step-by-step walk through the library on
 * one device: tagged allocations, writing and reading data, the built-in
 * kernels (every result checked on the host), nested peak scopes, the
 * cache at work, a memory budget, and freeing everything.
 */
#include "commands.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every buffer the tour holds, so that a failure anywhere can free them all
 * and close the device cleanly. */
enum { MAX_BUFS = 32 };

typedef struct tour {
    sw_device *dev;
    sw_buffer *bufs[MAX_BUFS];
    uint64_t budget_opt; /* --budget, 0: default */
    unsigned rounds;     /* --rounds: rounds of the cache step */
    size_t n;            /* elements of the main float32 buffers */
    uint64_t total;      /* device capacity, 0 if unknown */
} tour;

static int track(tour *d, sw_buffer *b)
{
    for (size_t i = 0; i < MAX_BUFS; i++) {
        if (d->bufs[i] == NULL) {
            d->bufs[i] = b;
            return 0;
        }
    }
    cli_mismatch("tour holds too many buffers");
    sw_buffer_free(b);
    return 1;
}

static int release(tour *d, sw_buffer **b)
{
    for (size_t i = 0; i < MAX_BUFS; i++) {
        if (d->bufs[i] == *b)
            d->bufs[i] = NULL;
    }
    int err = sw_buffer_free(*b);
    *b = NULL;
    if (err != SW_OK) {
        cli_report("sw_buffer_free", err);
        return 1;
    }
    return 0;
}

static int info(tour *d, sw_memory_info *mi)
{
    TRY_OR_RETURN(sw_memory_info_get(d->dev, mi));
    return 0;
}

/* One line: what happened, then in_use / peak / cached after it. */
static int show(tour *d, const char *fmt, ...)
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
           cli_bytes(mi.in_use), cli_bytes(mi.peak), cli_bytes(mi.cached));
    return 0;
}

static int alloc(tour *d, size_t size, const char *tag, sw_buffer **out)
{
    int err = sw_buffer_alloc(d->dev, size, tag, out);
    if (err != SW_OK) {
        char what[96];
        snprintf(what, sizeof what, "sw_buffer_alloc(%s, %s)", tag,
                 cli_bytes(size));
        cli_report(what, err);
        return 1;
    }
    if (track(d, *out))
        return 1;
    return show(d, "alloc %-16s %10s", tag, cli_bytes(size));
}

/* want bytes, or less on a small device (at most 1/32 of it), rounded to
 * the allocation granularity. */
static size_t fit(const tour *d, size_t want)
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

static int step_data(tour *d, sw_buffer *x, sw_buffer *y)
{
    size_t n = d->n, bytes = n * sizeof(float);
    float *h = malloc(bytes), *back = malloc(bytes);
    if (h == NULL || back == NULL) {
        free(h);
        free(back);
        cli_mismatch("out of host memory for %s", cli_bytes(bytes));
        return 1;
    }
    int rc = 1, err;
    for (size_t i = 0; i < n; i++)
        h[i] = xval(i);
    if ((err = sw_buffer_write(x, 0, h, bytes)) != SW_OK) {
        cli_report("sw_buffer_write(tour/x)", err);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        h[i] = yval(i);
    if ((err = sw_buffer_write(y, 0, h, bytes)) != SW_OK) {
        cli_report("sw_buffer_write(tour/y)", err);
        goto out;
    }
    if ((err = sw_buffer_read(x, 0, back, bytes)) != SW_OK) {
        cli_report("sw_buffer_read(tour/x)", err);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (back[i] != xval(i)) {
            cli_mismatch("tour/x[%zu] reads back %g, wrote %g", i, back[i],
                         xval(i));
            goto out;
        }
    }
    printf("  wrote tour/x and tour/y (%zu float32 each), read tour/x back:"
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
        cli_mismatch("out of host memory");
        return 1;
    }
    int err = sw_buffer_read(b, 0, h, n * sizeof(float));
    if (err != SW_OK) {
        free(h);
        cli_report("sw_buffer_read", err);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        if ((double)h[i] != want(i)) {
            cli_mismatch("%s[%zu] = %g, expected %g", name, i, h[i], want(i));
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

static int step_kernels(tour *d, sw_buffer *x, sw_buffer *y, sw_buffer *out)
{
    size_t n = d->n;
    sw_scalar s;

    TRY_OR_RETURN(sw_op_add(out, x, y, SW_FLOAT32, n));
    if (expect_f32(out, n, "add: out", want_add))
        return 1;
    printf("  add    out = x + y                      verified %zu"
           " elements\n",
           n);

    s.f = 2.5;
    TRY_OR_RETURN(sw_op_scale(out, x, s, SW_FLOAT32, n));
    if (expect_f32(out, n, "scale: out", want_scale))
        return 1;
    printf("  scale  out = 2.5 * x                    verified %zu"
           " elements\n",
           n);

    s.f = 0.5;
    TRY_OR_RETURN(sw_op_axpy(s, x, y, SW_FLOAT32, n));
    if (expect_f32(y, n, "axpy: y", want_axpy))
        return 1;
    printf("  axpy   y = 0.5 * x + y                  verified %zu"
           " elements\n",
           n);

    double want = 0;
    for (size_t i = 0; i < n; i++)
        want += (double)xval(i);
    sw_scalar sum;
    TRY_OR_RETURN(sw_op_sum(x, SW_FLOAT32, n, &sum));
    CHECK_OR_RETURN(sum.f == want, "sum(x) = %.17g, expected %.17g", sum.f,
                    want);
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
    if (alloc(d, sizeof a, "tour/int-a", &ia) ||
        alloc(d, sizeof b, "tour/int-b", &ib) ||
        alloc(d, sizeof c, "tour/int-c", &ic))
        return 1;
    TRY_OR_RETURN(sw_buffer_write(ia, 0, a, sizeof a));
    TRY_OR_RETURN(sw_buffer_write(ib, 0, b, sizeof b));
    TRY_OR_RETURN(sw_op_add(ic, ia, ib, SW_INT32, NI));
    TRY_OR_RETURN(sw_buffer_read(ic, 0, c, sizeof c));
    for (size_t i = 0; i < NI; i++) {
        int32_t w = (int32_t)((uint32_t)a[i] + (uint32_t)b[i]);
        CHECK_OR_RETURN(c[i] == w,
                        "int32 add: c[%zu] = %" PRId32 ", expected %" PRId32,
                        i, c[i], w);
    }
    TRY_OR_RETURN(sw_op_sum(ia, SW_INT32, NI, &sum));
    CHECK_OR_RETURN(sum.i == isum,
                    "int32 sum = %" PRId64 ", expected %" PRId64, sum.i, isum);
    printf("  int32  add (wrapping) and sum = %" PRId64 "   verified\n",
           sum.i);
    if (release(d, &ia) || release(d, &ib) || release(d, &ic))
        return 1;
    return show(d, "freed the int32 buffers");
}

static int step_scopes(tour *d)
{
    sw_memory_info mi;
    if (info(d, &mi))
        return 1;
    uint64_t base = mi.in_use;
    size_t a_size = fit(d, 8 * CLI_MIB), b_size = 2 * a_size;

    sw_peak_scope *outer = NULL, *inner = NULL;
    uint64_t inner_peak = 0, outer_peak = 0;
    sw_buffer *ta = NULL, *tb = NULL;

    TRY_OR_RETURN(sw_peak_scope_begin(d->dev, &outer));
    printf("  outer scope begins at in_use %s\n", cli_bytes(base));
    if (alloc(d, a_size, "tour/scope-a", &ta))
        return 1;
    TRY_OR_RETURN(sw_peak_scope_begin(d->dev, &inner));
    printf("  inner scope begins at in_use %s\n", cli_bytes(base + a_size));
    if (alloc(d, b_size, "tour/scope-b", &tb) || release(d, &tb) ||
        show(d, "free tour/scope-b"))
        return 1;
    TRY_OR_RETURN(sw_peak_scope_end(inner, &inner_peak));
    printf("  inner scope ends: its peak %s\n", cli_bytes(inner_peak));
    CHECK_OR_RETURN(inner_peak == base + a_size + b_size,
                    "inner scope peak %s, expected %s", cli_bytes(inner_peak),
                    cli_bytes(base + a_size + b_size));

    TRY_OR_RETURN(sw_reset_peak(d->dev));
    if (show(d, "sw_reset_peak (device peak = in_use)"))
        return 1;
    uint64_t so_far;
    TRY_OR_RETURN(sw_peak_scope_peak(outer, &so_far));
    printf("  outer scope so far: %s (the reset does not disturb it)\n",
           cli_bytes(so_far));
    CHECK_OR_RETURN(so_far == inner_peak,
                    "outer scope peak %s after reset, expected %s",
                    cli_bytes(so_far), cli_bytes(inner_peak));

    if (release(d, &ta) || show(d, "free tour/scope-a"))
        return 1;
    TRY_OR_RETURN(sw_peak_scope_end(outer, &outer_peak));
    printf("  outer scope ends: its peak %s\n", cli_bytes(outer_peak));
    CHECK_OR_RETURN(outer_peak == inner_peak,
                    "outer scope peak %s, expected %s", cli_bytes(outer_peak),
                    cli_bytes(inner_peak));
    return 0;
}

static int step_cache(tour *d)
{
    size_t sizes[] = {fit(d, 1 * CLI_MIB), fit(d, 3 * CLI_MIB + 512),
                      fit(d, 256 * CLI_KIB) / 2};
    size_t nsizes = sizeof sizes / sizeof sizes[0];
    sw_memory_info mi;

    for (unsigned round = 1; round <= d->rounds; round++) {
        sw_buffer *t[3] = {NULL, NULL, NULL};
        if (info(d, &mi))
            return 1;
        uint64_t cached_before = mi.cached;
        for (size_t i = 0; i < nsizes; i++) {
            char tag[32];
            snprintf(tag, sizeof tag, "tour/round%u-%zu", round, i);
            if (alloc(d, sizes[i], tag, &t[i]))
                return 1;
        }
        if (info(d, &mi))
            return 1;
        if (round > 1) {
            printf("  round %u: cached %s -> %s: blocks reused from the"
                   " cache\n",
                   round, cli_bytes(cached_before), cli_bytes(mi.cached));
            CHECK_OR_RETURN(mi.cached < cached_before,
                            "round %u: the cache did not serve any allocation",
                            round);
        }
        for (size_t i = 0; i < nsizes; i++) {
            if (release(d, &t[i]))
                return 1;
        }
        if (show(d, "round %u: freed its %zu buffers", round, nsizes))
            return 1;
        if (info(d, &mi))
            return 1;
        CHECK_OR_RETURN(mi.cached > 0, "nothing cached after freeing");
    }
    TRY_OR_RETURN(sw_empty_cache(d->dev));
    if (show(d, "sw_empty_cache"))
        return 1;
    if (info(d, &mi))
        return 1;
    CHECK_OR_RETURN(mi.cached == 0, "cached %s after sw_empty_cache",
                    cli_bytes(mi.cached));
    return 0;
}

static int step_budget(tour *d)
{
    sw_memory_info mi;
    if (info(d, &mi))
        return 1;
    uint64_t held = mi.in_use + mi.cached;
    uint64_t budget = d->budget_opt ? d->budget_opt : held + 1 * CLI_MIB;
    TRY_OR_RETURN(sw_set_memory_budget(d->dev, budget));
    printf("  budget set to %s (spillway holds %s)\n", cli_bytes(budget),
           cli_bytes(held));

    /* Something that fits, when anything does. */
    if (budget > held + 64 * CLI_KIB) {
        sw_buffer *fits;
        if (alloc(d, 64 * CLI_KIB, "tour/fits", &fits) || release(d, &fits))
            return 1;
    }

    /* Then more than the whole budget: no trimming of the cache (nor, once
     * buffers can be spilled, any spilling) can make room for it. */
    uint64_t want = budget + 1 * CLI_MIB;
    want -= want % SW_ALLOC_GRANULARITY;
    sw_buffer *big = NULL;
    int err = sw_buffer_alloc(d->dev, (size_t)want, "tour/too-big", &big);
    if (err == SW_OK) {
        track(d, big);
        cli_mismatch("allocating %s under a budget of %s succeeded",
                     cli_bytes(want), cli_bytes(budget));
        return 1;
    }
    char detail[4096];
    snprintf(detail, sizeof detail, "%s", sw_last_error());
    printf("  alloc tour/too-big %s: refused, as it should be:\n"
           "    %s: %s\n",
           cli_bytes(want), sw_err_name(err), detail);
    CHECK_OR_RETURN(err == SW_ERR_OOM || err == SW_ERR_TOO_LARGE,
                    "refused with %s, expected SW_ERR_OOM", sw_err_name(err));
    CHECK_OR_RETURN(big == NULL,
                    "failed allocation left its out-parameter set");

    TRY_OR_RETURN(sw_set_memory_budget(d->dev, 0));
    printf("  budget removed\n");
    return 0;
}

static int tour_run(tour *d)
{
    int k = 0;
    sw_memory_info mi;
    if (info(d, &mi))
        return 1;
    printf("spillway %s tour on %s: %s\n", CLI_VERSION,
           sw_device_name(d->dev), sw_device_description(d->dev));
    printf("  device total %s, free %s\n",
           mi.device_total ? cli_bytes(mi.device_total) : "unknown",
           mi.device_free_known ? cli_bytes(mi.device_free) : "unknown");

    /* 1M float32 (4 MiB) per buffer, less on a small device. */
    d->total = mi.device_total;
    d->n = fit(d, 4 * CLI_MIB) / sizeof(float);
    size_t bytes = d->n * sizeof(float);

    step(&k, "allocate tagged buffers of various sizes");
    sw_buffer *x, *y, *out, *small, *empty;
    if (alloc(d, bytes, "tour/x", &x) || alloc(d, bytes, "tour/y", &y) ||
        alloc(d, bytes, "tour/out", &out) ||
        alloc(d, 100, "tour/small", &small) ||
        alloc(d, 0, "tour/empty", &empty))
        return 1;
    printf("  (sizes are rounded up to %u bytes: tour/small counts %u)\n",
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
    if (release(d, &small) || show(d, "free tour/small") ||
        release(d, &empty) || show(d, "free tour/empty"))
        return 1;
    if (step_cache(d))
        return 1;

    step(&k, "a memory budget");
    if (step_budget(d))
        return 1;

    step(&k, "free everything");
    if (release(d, &x) || show(d, "free tour/x") || release(d, &y) ||
        show(d, "free tour/y") || release(d, &out) ||
        show(d, "free tour/out"))
        return 1;
    TRY_OR_RETURN(sw_empty_cache(d->dev));
    if (info(d, &mi))
        return 1;
    printf("  in_use %s, cached %s; %" PRIu64 " allocations, %" PRIu64
           " frees, %" PRIu64 " refused\n",
           cli_bytes(mi.in_use), cli_bytes(mi.cached), mi.allocs, mi.frees,
           mi.ooms);
    CHECK_OR_RETURN(mi.in_use == 0, "in_use is %s after freeing everything",
                    cli_bytes(mi.in_use));
    printf("\ntour finished: every result verified, nothing left in use\n");
    return 0;
}

int cmd_tour(const cli_command *self, int argc, char **argv)
{
    cli_options o = {.count = TOUR_ROUNDS_DEFAULT};
    int rc = cli_parse_options(self, argc, argv, "--rounds", TOUR_ROUNDS_MIN,
                               TOUR_ROUNDS_MAX, &o);
    if (rc != 0 || o.help)
        return rc;
    tour d;
    memset(&d, 0, sizeof d);
    d.budget_opt = o.budget;
    d.rounds = (unsigned)o.count;
    if (cli_open_device(o.spec, &d.dev))
        return 1;
    rc = tour_run(&d);

    /* Whatever happened, free what is still held so the device closes. */
    for (size_t i = 0; i < MAX_BUFS; i++) {
        if (d.bufs[i] != NULL)
            sw_buffer_free(d.bufs[i]);
    }
    sw_set_memory_budget(d.dev, 0);
    int err = sw_device_close(d.dev);
    if (err != SW_OK) {
        cli_report("sw_device_close", err);
        rc = 1;
    }
    fflush(stdout);
    return rc;
}
