/*
 * demo_workload.c -- the pipeline of `spillway demo` (see demo_workload.h):
 * its arrays, the forward and backward steps, one measured run, the hashes
 * of its outputs; and the plain file I/O its disk tier is measured
 * against.  Public API only, no printing.
 */
/* clock_gettime is POSIX, not C11. */
#define _POSIX_C_SOURCE 200809L

#include "demo_workload.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------
 * Failures: the caller prints them, so note what failed and pass the code
 * on
 * ---------------------------------------------------------------------- */

/* Note what failed in p->failed; returns err.  Formatting only, no library
 * call, so sw_last_error() still holds the failed call's detail. */
static int demo_failed(demo_pipeline *p, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int demo_failed(demo_pipeline *p, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->failed, sizeof p->failed, fmt, ap);
    va_end(ap);
    return err;
}

/* Call a library function; on failure note the call and return its code
 * from the enclosing function. */
#define DEMO_TRY_OR_RETURN(p, call)                                           \
    do {                                                                      \
        int demo_err_ = (call);                                               \
        if (demo_err_ != SW_OK)                                               \
            return demo_failed((p), demo_err_, "%s", #call);                  \
    } while (0)

/* A failed operation of a step. */
static int op_failed(demo_pipeline *p, const char *pass, size_t k,
                     const char *what, int err)
{
    return demo_failed(p, err, "%s step for x[%zu]: %s", pass, k, what);
}

/* ------------------------------------------------------------------------
 * Setup
 * ---------------------------------------------------------------------- */

size_t demo_array_bytes(const sw_memory_info *mi, size_t steps)
{
    uint64_t avail =
        mi->device_free_known ? mi->device_free : mi->device_total;
    if (avail == 0)
        return DEMO_ARRAY_BYTES_MAX; /* the driver does not say: try */
    uint64_t s = (avail - avail / 8) / (steps + 1);
    if (s > DEMO_ARRAY_BYTES_MAX)
        s = DEMO_ARRAY_BYTES_MAX;
    s -= s % DEMO_ARRAY_BYTES_MIN;
    return s < DEMO_ARRAY_BYTES_MIN ? 0 : (size_t)s;
}

int demo_pipeline_init(demo_pipeline *p, sw_device *dev, size_t steps,
                       size_t bytes)
{
    memset(p, 0, sizeof *p);
    p->dev = dev;
    p->steps = steps;
    p->bytes = bytes;
    p->n = bytes / sizeof(float);
    p->prefetch = true;
    p->advise = true;
    p->x = calloc(steps, sizeof *p->x);
    p->host = malloc(bytes);
    if (p->x == NULL || p->host == NULL)
        return demo_failed(p, SW_ERR_HOST_OOM,
                           "host memory for %zu arrays' handles", steps);
    return 0;
}

void demo_free_arrays(demo_pipeline *p)
{
    for (size_t k = 0; p->x != NULL && k < p->steps; k++) {
        if (p->x[k] != NULL)
            sw_buffer_free(p->x[k]);
        p->x[k] = NULL;
    }
    if (p->acc != NULL)
        sw_buffer_free(p->acc);
    p->acc = NULL;
}

void demo_pipeline_destroy(demo_pipeline *p)
{
    demo_free_arrays(p);
    free(p->x);
    free(p->host);
    p->x = NULL;
    p->host = NULL;
}

int demo_run_init(demo_run *r, const demo_pipeline *p, uint64_t budget)
{
    memset(r, 0, sizeof *r);
    r->budget = budget;
    r->hash = calloc(p->steps + 1, sizeof *r->hash);
    r->sum_bits = calloc(p->steps, sizeof *r->sum_bits);
    return r->hash != NULL && r->sum_bits != NULL ? 0 : SW_ERR_HOST_OOM;
}

void demo_run_destroy(demo_run *r)
{
    free(r->hash);
    free(r->sum_bits);
    r->hash = NULL;
    r->sum_bits = NULL;
}

uint64_t demo_live_bytes(const demo_pipeline *p)
{
    return (uint64_t)(p->steps + 1) * p->bytes;
}

uint64_t demo_default_budget(const demo_pipeline *p)
{
    uint64_t quarter = demo_live_bytes(p) / 4;
    uint64_t step = DEMO_STEP_ARRAYS * p->bytes;
    quarter -= quarter % p->bytes;
    return quarter < step ? step : quarter;
}

/* ------------------------------------------------------------------------
 * The steps
 * ---------------------------------------------------------------------- */

/* Mixing weight of x[k-1] in forward step k: dyadic values in [1/4, 3/4],
 * so x[k-1] and x[k-2] mix convexly and the arrays grow only linearly
 * (through + x[0]), however many steps. */
static double mix(size_t k) { return 0.25 + 0.125 * (double)(k % 5); }

/* Weight of x[k] in the backward pass. */
static double weight(size_t k) { return 1.0 / (double)(1 + k % 3); }

/* x[0]: varied float32 values in [-4, 4), the same in every run. */
static float pattern(size_t i)
{
    uint32_t h = (uint32_t)i * 2654435761u;
    return (float)((int32_t)(h >> 16) - 32768) / 8192.0f;
}

static int alloc_array(demo_pipeline *p, const char *tag, sw_buffer **out)
{
    int err = sw_buffer_alloc(p->dev, p->bytes, tag, out);
    if (err != SW_OK) {
        char size[32];
        return demo_failed(p, err, "sw_buffer_alloc('%s', %s)", tag,
                           sw_format_bytes(p->bytes, size, sizeof size));
    }
    return 0;
}

static int forward_first(demo_pipeline *p)
{
    int err = alloc_array(p, "demo/x[0]", &p->x[0]);
    if (err != SW_OK)
        return err;
    for (size_t i = 0; i < p->n; i++)
        p->host[i] = pattern(i);
    err = sw_buffer_write(p->x[0], 0, p->host, p->bytes);
    return err == SW_OK ? 0
                        : op_failed(p, "forward", 0, "sw_buffer_write", err);
}

static int forward_step(demo_pipeline *p, size_t k)
{
    char tag[32];
    snprintf(tag, sizeof tag, "demo/x[%zu]", k);
    int err = alloc_array(p, tag, &p->x[k]);
    if (err != SW_OK)
        return err;
    sw_buffer *x = p->x[k], *x1 = p->x[k - 1], *x2 = p->x[k >= 2 ? k - 2 : 0];
    sw_scalar c = {.f = mix(k)}, rest = {.f = 1.0 - mix(k)};
    if ((err = sw_op_scale(x, x1, c, SW_FLOAT32, p->n)) != SW_OK)
        return op_failed(p, "forward", k, "sw_op_scale(x[k] = c * x[k-1])",
                         err);
    if ((err = sw_op_axpy(rest, x2, x, SW_FLOAT32, p->n)) != SW_OK)
        return op_failed(p, "forward", k,
                         "sw_op_axpy(x[k] += (1 - c) * x[k-2])", err);
    if ((err = sw_op_add(x, x, p->x[0], SW_FLOAT32, p->n)) != SW_OK)
        return op_failed(p, "forward", k, "sw_op_add(x[k] += x[0])", err);
    return 0;
}

/* acc += a_k * x[k], then the checkpoint sum(acc), kept as its bits. */
static int backward_step(demo_pipeline *p, size_t k, uint64_t *sum_bits)
{
    sw_scalar a = {.f = weight(k)}, sum;
    int err;
    /* The next step's array, brought back while this step computes (a
     * no-op when it is resident). */
    if (p->prefetch && k > 0 &&
        (err = sw_buffer_prefetch(p->x[k - 1], NULL)) != SW_OK)
        return op_failed(p, "backward", k, "sw_buffer_prefetch(x[k-1])",
                         err);
    if ((err = sw_op_axpy(a, p->x[k], p->acc, SW_FLOAT32, p->n)) != SW_OK)
        return op_failed(p, "backward", k, "sw_op_axpy(acc += a * x[k])",
                         err);
    if ((err = sw_op_sum(p->acc, SW_FLOAT32, p->n, &sum)) != SW_OK)
        return op_failed(p, "backward", k, "sw_op_sum(acc)", err);
    /* x[k] is consumed: not needed again until the final check. */
    if (p->advise && (err = sw_buffer_advise(p->x[k], SW_ADVISE_COLD)) !=
                         SW_OK)
        return op_failed(p, "backward", k, "sw_buffer_advise(x[k], cold)",
                         err);
    memcpy(&sum_bits[k], &sum.f, sizeof sum_bits[k]);
    return 0;
}

static void stepped(demo_step_fn on_step, void *ctx)
{
    if (on_step != NULL)
        on_step(ctx);
}

static int run_passes(demo_pipeline *p, uint64_t *sum_bits,
                      demo_step_fn on_step, void *ctx)
{
    int err = forward_first(p);
    if (err != SW_OK)
        return err;
    stepped(on_step, ctx);
    for (size_t k = 1; k < p->steps; k++) {
        if ((err = forward_step(p, k)) != SW_OK)
            return err;
        stepped(on_step, ctx);
    }
    if ((err = alloc_array(p, "demo/acc", &p->acc)) != SW_OK)
        return err;
    sw_scalar zero = {.f = 0.0};
    DEMO_TRY_OR_RETURN(p, sw_op_fill(p->acc, SW_FLOAT32, p->n, zero));
    for (size_t k = p->steps; k-- > 0;) {
        if ((err = backward_step(p, k, sum_bits)) != SW_OK)
            return err;
        stepped(on_step, ctx);
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * One run
 * ---------------------------------------------------------------------- */

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* FNV-1a, 64 bits: enough to tell two runs' arrays apart. */
static uint64_t fnv1a(const void *data, size_t n)
{
    const unsigned char *b = data;
    uint64_t h = UINT64_C(14695981039346656037);
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= UINT64_C(1099511628211);
    }
    return h;
}

/* Host reads of spilled arrays use their host copies: no device memory. */
static int hash_outputs(demo_pipeline *p, demo_run *r)
{
    for (size_t k = 0; k <= p->steps; k++) {
        sw_buffer *b = k < p->steps ? p->x[k] : p->acc;
        DEMO_TRY_OR_RETURN(p, sw_buffer_read(b, 0, p->host, p->bytes));
        r->hash[k] = fnv1a(p->host, p->bytes);
    }
    return 0;
}

static void note_delta(demo_run *r, const sw_memory_info *a,
                       const sw_memory_info *b)
{
    r->peak = b->peak;
    r->spills = b->spills - a->spills;
    r->restores = b->restores - a->restores;
    r->out_bytes = b->spilled_bytes_total - a->spilled_bytes_total;
    r->in_bytes = b->restored_bytes_total - a->restored_bytes_total;
    r->out_s = b->spill_seconds - a->spill_seconds;
    r->in_s = b->restore_seconds - a->restore_seconds;
}

static void note_disk(demo_run *r, const sw_memory_info *a,
                      const sw_memory_info *b)
{
    r->disk_out_bytes = b->disk_write_bytes - a->disk_write_bytes;
    r->disk_in_bytes = b->disk_read_bytes - a->disk_read_bytes;
    r->disk_out_s = b->disk_write_seconds - a->disk_write_seconds;
    r->disk_in_s = b->disk_read_seconds - a->disk_read_seconds;
}

int demo_run_pipeline(demo_pipeline *p, demo_run *r, demo_step_fn on_step,
                      void *ctx)
{
    sw_memory_info before, after, hashed;
    DEMO_TRY_OR_RETURN(p, sw_set_memory_budget(p->dev, r->budget));
    DEMO_TRY_OR_RETURN(p, sw_set_host_budget(p->dev, r->host_budget));
    DEMO_TRY_OR_RETURN(p, sw_reset_peak(p->dev));
    DEMO_TRY_OR_RETURN(p, sw_memory_info_get(p->dev, &before));
    double t0 = now_seconds();
    int err = run_passes(p, r->sum_bits, on_step, ctx);
    if (err != SW_OK)
        return err;
    /* The wall time covers the passes and the work they queued, not the
     * hashing below. */
    DEMO_TRY_OR_RETURN(p, sw_device_synchronize(p->dev));
    r->wall_s = now_seconds() - t0;
    DEMO_TRY_OR_RETURN(p, sw_memory_info_get(p->dev, &after));
    note_delta(r, &before, &after);
    err = hash_outputs(p, r);
    DEMO_TRY_OR_RETURN(p, sw_memory_info_get(p->dev, &hashed));
    note_disk(r, &before, &hashed);
    DEMO_TRY_OR_RETURN(p, sw_set_host_budget(p->dev, 0));
    return err;
}

/* Allocate and fill arrays up to `budget` bytes (0: the whole live set),
 * then free them: the cache keeps them, their memory touched. */
int demo_prewarm(demo_pipeline *p, uint64_t budget)
{
    sw_scalar zero = {.f = 0.0};
    size_t n = p->steps + 1;
    if (budget != 0 && budget / p->bytes < n)
        n = (size_t)(budget / p->bytes);
    for (size_t k = 0; k < n; k++) {
        sw_buffer **b = k < p->steps ? &p->x[k] : &p->acc;
        int err = alloc_array(p, "demo/warm-up", b);
        if (err != SW_OK)
            return err;
        DEMO_TRY_OR_RETURN(p, sw_op_fill(*b, SW_FLOAT32, p->n, zero));
    }
    demo_free_arrays(p);
    DEMO_TRY_OR_RETURN(p, sw_device_synchronize(p->dev));
    return 0;
}

/* The first touch of device memory (page faults in the simulated device's
 * arena, lazy mappings in drivers) would otherwise be charged to the first
 * run alone and understate the slowdown of a run under a budget. */
int demo_warm_up(demo_pipeline *p)
{
    int err = demo_prewarm(p, 0);
    if (err != SW_OK)
        return err;
    DEMO_TRY_OR_RETURN(p, sw_empty_cache(p->dev));
    DEMO_TRY_OR_RETURN(p, sw_device_synchronize(p->dev));
    return 0;
}

/* ------------------------------------------------------------------------
 * The disk tier's yardstick
 * ---------------------------------------------------------------------- */

void demo_plain_disk(size_t chunk, uint64_t total, size_t nbuf,
                       double *wbps, double *rbps)
{
    *wbps = *rbps = 0;
    const char *dir = getenv("SPILLWAY_SPILL_DIR");
    if (dir == NULL || dir[0] == '\0')
        dir = getenv("TMPDIR");
    if (dir == NULL || dir[0] == '\0')
        dir = "/tmp";
    char path[4096];
    snprintf(path, sizeof path, "%s/spillway-demo-XXXXXX", dir);
    int fd = mkstemp(path);
    if (nbuf < 2)
        nbuf = 2;
    if (nbuf > 64)
        nbuf = 64;
    char *buf = malloc(chunk * nbuf);
    if (fd < 0 || buf == NULL) {
        if (fd >= 0)
            close(fd);
        free(buf);
        return;
    }
    unlink(path);
    memset(buf, 0x5A, chunk * nbuf);
    size_t n = (size_t)((total + chunk - 1) / chunk);
    bool ok = true;
    double t0 = now_seconds();
    for (size_t i = 0; i < n && ok; i++)
        ok = pwrite(fd, buf + (i % nbuf) * chunk, chunk,
                    (off_t)(i * chunk)) == (ssize_t)chunk;
    double t1 = now_seconds();
    for (size_t i = 0; i < n && ok; i++)
        ok = pread(fd, buf + (i % nbuf) * chunk, chunk,
                   (off_t)(i * chunk)) == (ssize_t)chunk;
    double t2 = now_seconds();
    close(fd);
    free(buf);
    if (ok && t1 > t0 && t2 > t1) {
        *wbps = (double)n * (double)chunk / (t1 - t0);
        *rbps = (double)n * (double)chunk / (t2 - t1);
    }
}
