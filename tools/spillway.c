/*
 * spillway.c -- the command-line program: look at devices, run the main job
 * (a pipeline whose live arrays outgrow a memory budget), walk through the
 * library step by step.
 *
 *   spillway info                 every device, its memory in a table
 *   spillway devices              device specs, one per line (for scripts)
 *   spillway demo [options]       the pipeline, without and then with a
 *                                 budget: spills, restores, timings, and a
 *                                 bit-for-bit comparison of the outputs
 *   spillway tour [options]       a step-by-step walk-through on a device
 *
 * It uses the public API only (spillway.h), as any caller would, so it is
 * also a small end-to-end check of the library: every result the demo and
 * the tour show is verified, and any unexpected error ends them with the
 * code's name and the library's detail message (exit status 1).  Usage
 * errors exit with 2.
 */
/* isatty, fileno and clock_gettime are POSIX, not C11. */
#define _POSIX_C_SOURCE 200809L

#include "spillway.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STR2(x) #x
#define STR(x) STR2(x)
#define SW_VERSION_STRING                                                     \
    STR(SW_VERSION_MAJOR) "." STR(SW_VERSION_MINOR) "." STR(SW_VERSION_PATCH)

#define KIB ((uint64_t)1024)
#define MIB (KIB * 1024)
#define GIB (MIB * 1024)

static const char *progname = "spillway";

/* spillway demo --steps: at least 4, so that the recurrence has a past to
 * draw on; at most 4096, so that a run stays short on any device. */
enum { DEMO_STEPS_MIN = 4, DEMO_STEPS_MAX = 4096, DEMO_STEPS_DEFAULT = 32 };

/* Set while a progress bar line is on the terminal without its newline:
 * a message printed then must end that line first. */
static bool bar_open;

static void end_bar_line(void)
{
    if (bar_open) {
        fputc('\n', stdout);
        fflush(stdout);
        bar_open = false;
    }
}

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
            "Accelerator memory manager: accounting, caching, budgets,\n"
            "spilling to host memory.\n"
            "\n"
            "commands:\n"
            "  info                  list every device with its memory\n"
            "  devices               print device specs, one per line\n"
            "  demo [OPTIONS]        the main job: a pipeline whose live\n"
            "                        arrays grow to several times a budget\n"
            "                        while each step fits, run without and\n"
            "                        then with the budget; shows spills,\n"
            "                        restores, time and slowdown, and checks\n"
            "                        that every output is bit-identical\n"
            "      --device SPEC     device to use (default: $SPILLWAY_DEVICE"
            " or sim:0)\n"
            "      --budget SIZE     budget of the second run (default: a\n"
            "                        quarter of the live set, at least one\n"
            "                        step's arrays)\n"
            "      --steps N         forward steps, so arrays kept live,\n"
            "                        %d to %d (default %d); as many backward\n"
            "                        steps follow\n"
            "  tour [OPTIONS]        walk through allocation, data, kernels,\n"
            "                        peak scopes, the cache and a budget\n"
            "      --device SPEC     as above\n"
            "      --budget SIZE     budget for the budget step (default:\n"
            "                        what is held then plus 1 MiB)\n"
            "      --rounds N        rounds of the cache step (default 3)\n"
            "\n"
            "  -h, --help            show this help\n"
            "  -V, --version         show the version\n"
            "\n"
            "SIZE is a byte count with an optional K, M, G or T suffix (binary\n"
            "units: 512M = 512 MiB).  Environment: SPILLWAY_DEVICE (default\n"
            "device), SPILLWAY_SIM_MEMORY (simulated device size, e.g. 512M),\n"
            "SPILLWAY_SIM_DEVICES (number of simulated devices).\n",
            progname, DEMO_STEPS_MIN, DEMO_STEPS_MAX, DEMO_STEPS_DEFAULT);
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
    end_bar_line();
    fprintf(stderr, "%s: %s failed: %s (%s)%s%s\n", progname, what,
            sw_err_name(err), sw_strerror(err), detail[0] ? ": " : "",
            detail);
}

/* A check that is not a library error (a wrong result). */
static void mismatch(const char *fmt, ...)
{
    va_list ap;
    end_bar_line();
    fprintf(stderr, "%s: check failed: ", progname);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* Call a library function; on failure report it and fail the command. */
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

/* Options of demo and tour: --device SPEC, --budget SIZE and one count
 * (--steps for the demo, --rounds for the tour). */
typedef struct options {
    const char *spec;    /* NULL: the default device */
    uint64_t budget;     /* 0: the command's default */
    unsigned long count; /* preset to the default by the caller */
    bool help;           /* --help was given and printed */
} options;

/* A decimal count in [lo, hi]; 0 or -1. */
static int parse_count(const char *s, unsigned long lo, unsigned long hi,
                       unsigned long *out)
{
    if (s == NULL || !isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (errno == ERANGE || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* If arg is --name or --name=VALUE, the index of name, with *val set (the
 * next argument for the first form, consuming it); else -1.  -2 when the
 * value is missing. */
static int match_option(const char *const *names, int nnames, int argc,
                        char **argv, int *i, const char **val)
{
    const char *arg = argv[*i];
    for (int j = 0; j < nnames; j++) {
        size_t len = strlen(names[j]);
        if (strncmp(arg, names[j], len) != 0 ||
            (arg[len] != '\0' && arg[len] != '='))
            continue;
        if (arg[len] == '=')
            *val = arg + len + 1;
        else if (*i + 1 < argc)
            *val = argv[++*i];
        else
            return -2;
        return j;
    }
    return -1;
}

/* Returns 0 (o filled; o->help when help was printed) or 2 after a usage
 * message. */
static int parse_options(const char *cmd, int argc, char **argv,
                         const char *count_name, unsigned long count_lo,
                         unsigned long count_hi, options *o)
{
    const char *const names[] = {"--device", "--budget", count_name};
    for (int i = 0; i < argc; i++) {
        const char *val = NULL;
        int which = match_option(names, 3, argc, argv, &i, &val);
        if (which == -2)
            return usage_error("%s: %s needs a value", cmd, argv[i]);
        if (which == -1) {
            if (strcmp(argv[i], "-h") == 0 ||
                strcmp(argv[i], "--help") == 0) {
                usage(stdout);
                o->help = true;
                return 0;
            }
            return usage_error("%s: unknown option '%s'", cmd, argv[i]);
        }
        if (which == 0) {
            o->spec = val;
        } else if (which == 1) {
            if (parse_size(val, &o->budget) || o->budget == 0)
                return usage_error("%s: --budget: '%s' is not a size above "
                                   "0 (e.g. 4096, 64K, 512M, 1G)",
                                   cmd, val);
        } else if (parse_count(val, count_lo, count_hi, &o->count)) {
            return usage_error("%s: %s: '%s' is not a number from %lu to "
                               "%lu",
                               cmd, count_name, val, count_lo, count_hi);
        }
    }
    return 0;
}

/* Open spec (NULL: the default device); 0, or 1 after reporting. */
static int open_device(const char *spec, sw_device **dev)
{
    int err = sw_device_open(spec, dev);
    if (err == SW_OK)
        return 0;
    char what[160];
    if (spec)
        snprintf(what, sizeof what, "sw_device_open(\"%.100s\")", spec);
    else
        snprintf(what, sizeof what, "sw_device_open(default device)");
    report(what, err);
    return 1;
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
    /* Backends that offer no device say why, one line each. */
    for (size_t b = 0; b < sw_backend_count(); b++) {
        const char *name = NULL;
        int ndev = 0;
        char why[256];
        int err = sw_backend_info(b, &name, &ndev, why, sizeof why);
        if (err != SW_OK)
            printf("%s: %s\n", name ? name : "?", sw_last_error());
        else if (ndev == 0)
            printf("%s: no devices%s%s\n", name, why[0] ? ": " : "", why);
    }
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
 * spillway demo: a pipeline whose live set outgrows the budget
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
 * with sw_op_axpy and sw_op_sum.  The live set grows to N + 1 arrays while
 * a step uses at most four of them (and one operation at most two), so
 * under a budget of a quarter of the live set the early arrays are spilled
 * during the forward pass and restored, last out first in, by the backward
 * pass.  Both runs do the same operations in the same order, so every
 * array and every checkpoint must come out bit-identical.
 * ---------------------------------------------------------------------- */

/* The most arrays one forward step uses: x[k], x[k-1], x[k-2], x[0]. */
enum { STEP_ARRAYS = 4 };

/* Arrays are 4 MiB (a default run moves a few hundred MiB in well under a
 * second), smaller when the device cannot hold the live set of N + 1 of
 * them, but not below 64 KiB, where fixed costs would hide the copies. */
#define ARRAY_BYTES_MAX (4 * MIB)
#define ARRAY_BYTES_MIN (64 * KIB)

typedef struct pipeline {
    sw_device *dev;
    size_t steps;   /* N: forward steps, so arrays x[0..N) */
    size_t n;       /* float32 elements per array */
    size_t bytes;   /* bytes per array */
    sw_buffer **x;  /* x[0..N): every one lives until the run ends */
    sw_buffer *acc; /* the backward pass's accumulator */
    float *host;    /* one array's worth: x[0]'s data, then read-backs */
} pipeline;

typedef struct run_stats {
    uint64_t budget; /* 0: none */
    uint64_t peak, spills, restores, out_bytes, in_bytes;
    double out_s, in_s, wall_s;
    uint64_t *hash;     /* N + 1: FNV-1a of x[0..N), then of acc */
    uint64_t *sum_bits; /* N: bits of the checkpoint taken after x[k] */
} run_stats;

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t live_bytes(const pipeline *p)
{
    return (uint64_t)(p->steps + 1) * p->bytes;
}

/* ---- progress ---------------------------------------------------------- */

/* One line redrawn in place on a terminal; on anything else (a log, a
 * pipe) a plain line at each quarter, so logs stay readable. */
typedef struct progress {
    sw_device *dev;
    int run;
    size_t done, total;
    bool tty;
    double last_draw;
    size_t next_line; /* not a terminal: the count of the next line */
} progress;

enum { BAR_WIDTH = 20 };

static void progress_draw(progress *pg)
{
    sw_memory_info mi;
    char mem[80] = "";
    if (sw_memory_info_get(pg->dev, &mi) == SW_OK)
        snprintf(mem, sizeof mem, "in use %s  spilled %s", human(mi.in_use),
                 human(mi.spilled));
    if (!pg->tty) {
        printf("run %d: %zu/%zu steps  %s\n", pg->run, pg->done, pg->total,
               mem);
        return;
    }
    char bar[BAR_WIDTH + 1];
    size_t full = pg->done * BAR_WIDTH / pg->total;
    memset(bar, '#', full);
    memset(bar + full, '.', BAR_WIDTH - full);
    bar[BAR_WIDTH] = '\0';
    /* \033[K clears what a longer previous line left on the right. */
    printf("\rrun %d [%s] %zu/%zu steps  %s\033[K", pg->run, bar, pg->done,
           pg->total, mem);
    fflush(stdout);
    bar_open = true;
}

static void progress_begin(progress *pg, sw_device *dev, int run,
                           size_t total)
{
    const char *term = getenv("TERM");
    memset(pg, 0, sizeof *pg);
    pg->dev = dev;
    pg->run = run;
    pg->total = total;
    pg->tty = isatty(fileno(stdout)) && !(term && strcmp(term, "dumb") == 0);
    pg->next_line = (total + 3) / 4;
    if (pg->tty)
        progress_draw(pg);
}

static void progress_step(progress *pg)
{
    pg->done++;
    if (pg->tty) {
        /* At most 20 redraws a second: a terminal is slower than a step. */
        double t = now_seconds();
        if (pg->done < pg->total && t - pg->last_draw < 0.05)
            return;
        pg->last_draw = t;
        progress_draw(pg);
    } else if (pg->done >= pg->next_line || pg->done == pg->total) {
        progress_draw(pg);
        pg->next_line += (pg->total + 3) / 4;
    }
}

/* ---- the steps ---------------------------------------------------------- */

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

/* Report a failed operation of a step; returns 1. */
static int op_failed(const char *pass, size_t k, const char *what, int err)
{
    char where[160];
    snprintf(where, sizeof where, "%s step for x[%zu]: %s", pass, k, what);
    report(where, err);
    return 1;
}

static int alloc_array(pipeline *p, const char *tag, sw_buffer **out)
{
    int err = sw_buffer_alloc(p->dev, p->bytes, tag, out);
    if (err != SW_OK) {
        char what[96];
        snprintf(what, sizeof what, "sw_buffer_alloc('%s', %s)", tag,
                 human(p->bytes));
        report(what, err);
        return 1;
    }
    return 0;
}

static int forward_first(pipeline *p)
{
    if (alloc_array(p, "demo/x[0]", &p->x[0]))
        return 1;
    for (size_t i = 0; i < p->n; i++)
        p->host[i] = pattern(i);
    int err = sw_buffer_write(p->x[0], 0, p->host, p->bytes);
    return err == SW_OK ? 0 : op_failed("forward", 0, "sw_buffer_write", err);
}

static int forward_step(pipeline *p, size_t k)
{
    char tag[32];
    snprintf(tag, sizeof tag, "demo/x[%zu]", k);
    if (alloc_array(p, tag, &p->x[k]))
        return 1;
    sw_buffer *x = p->x[k], *x1 = p->x[k - 1], *x2 = p->x[k >= 2 ? k - 2 : 0];
    sw_scalar c = {.f = mix(k)}, rest = {.f = 1.0 - mix(k)};
    int err;
    if ((err = sw_op_scale(x, x1, c, SW_FLOAT32, p->n)) != SW_OK)
        return op_failed("forward", k, "sw_op_scale(x[k] = c * x[k-1])", err);
    if ((err = sw_op_axpy(rest, x2, x, SW_FLOAT32, p->n)) != SW_OK)
        return op_failed("forward", k,
                         "sw_op_axpy(x[k] += (1 - c) * x[k-2])", err);
    if ((err = sw_op_add(x, x, p->x[0], SW_FLOAT32, p->n)) != SW_OK)
        return op_failed("forward", k, "sw_op_add(x[k] += x[0])", err);
    return 0;
}

/* acc += a_k * x[k], then the checkpoint sum(acc), kept as its bits. */
static int backward_step(pipeline *p, size_t k, uint64_t *sum_bits)
{
    sw_scalar a = {.f = weight(k)}, sum;
    int err;
    if ((err = sw_op_axpy(a, p->x[k], p->acc, SW_FLOAT32, p->n)) != SW_OK)
        return op_failed("backward", k, "sw_op_axpy(acc += a * x[k])", err);
    if ((err = sw_op_sum(p->acc, SW_FLOAT32, p->n, &sum)) != SW_OK)
        return op_failed("backward", k, "sw_op_sum(acc)", err);
    memcpy(&sum_bits[k], &sum.f, sizeof sum_bits[k]);
    return 0;
}

static int run_passes(pipeline *p, progress *pg, uint64_t *sum_bits)
{
    if (forward_first(p))
        return 1;
    progress_step(pg);
    for (size_t k = 1; k < p->steps; k++) {
        if (forward_step(p, k))
            return 1;
        progress_step(pg);
    }
    if (alloc_array(p, "demo/acc", &p->acc))
        return 1;
    sw_scalar zero = {.f = 0.0};
    TRY(sw_op_fill(p->acc, SW_FLOAT32, p->n, zero));
    for (size_t k = p->steps; k-- > 0;) {
        if (backward_step(p, k, sum_bits))
            return 1;
        progress_step(pg);
    }
    return 0;
}

/* ---- one run ------------------------------------------------------------- */

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
static int hash_outputs(pipeline *p, run_stats *r)
{
    for (size_t k = 0; k <= p->steps; k++) {
        sw_buffer *b = k < p->steps ? p->x[k] : p->acc;
        TRY(sw_buffer_read(b, 0, p->host, p->bytes));
        r->hash[k] = fnv1a(p->host, p->bytes);
    }
    return 0;
}

static void free_arrays(pipeline *p)
{
    for (size_t k = 0; k < p->steps; k++) {
        if (p->x[k] != NULL)
            sw_buffer_free(p->x[k]);
        p->x[k] = NULL;
    }
    if (p->acc != NULL)
        sw_buffer_free(p->acc);
    p->acc = NULL;
}

static void note_delta(run_stats *r, const sw_memory_info *a,
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

/* Run both passes under r->budget, then read every output back.  The wall
 * time covers the passes only. */
static int run_pipeline(pipeline *p, int run, run_stats *r)
{
    sw_memory_info before, after;
    TRY(sw_set_memory_budget(p->dev, r->budget));
    TRY(sw_reset_peak(p->dev));
    TRY(sw_memory_info_get(p->dev, &before));
    progress pg;
    progress_begin(&pg, p->dev, run, 2 * p->steps);
    double t0 = now_seconds();
    if (run_passes(p, &pg, r->sum_bits))
        return 1;
    TRY(sw_device_synchronize(p->dev));
    r->wall_s = now_seconds() - t0;
    end_bar_line();
    TRY(sw_memory_info_get(p->dev, &after));
    note_delta(r, &before, &after);
    return hash_outputs(p, r);
}

/* ---- setup, report, checks ------------------------------------------------ */

/* Bytes per array: the largest multiple of 64 KiB up to 4 MiB such that
 * N + 1 arrays fit in 7/8 of what the device has free (the rest is room
 * for fragmentation); 0 when even 64 KiB arrays do not fit. */
static size_t array_bytes(const sw_memory_info *mi, size_t steps)
{
    uint64_t avail = mi->device_free_known ? mi->device_free : mi->device_total;
    if (avail == 0)
        return ARRAY_BYTES_MAX; /* the driver does not say: try */
    uint64_t s = (avail - avail / 8) / (steps + 1);
    if (s > ARRAY_BYTES_MAX)
        s = ARRAY_BYTES_MAX;
    s -= s % ARRAY_BYTES_MIN;
    return s < ARRAY_BYTES_MIN ? 0 : (size_t)s;
}

/* A quarter of the live set, in whole arrays, but never below one step's
 * arrays (a step that does not fit would spill and restore its own
 * operands at every operation). */
static uint64_t default_budget(const pipeline *p)
{
    uint64_t quarter = live_bytes(p) / 4, step = STEP_ARRAYS * p->bytes;
    quarter -= quarter % p->bytes;
    return quarter < step ? step : quarter;
}

static int demo_setup(pipeline *p, uint64_t budget_opt, run_stats r[2])
{
    sw_memory_info mi;
    TRY(sw_memory_info_get(p->dev, &mi));
    p->bytes = array_bytes(&mi, p->steps);
    if (p->bytes == 0) {
        fprintf(stderr, "%s: demo: %s has %s free, too little for %zu "
                "arrays of at least %s without a budget; give fewer --steps "
                "or use a larger device\n",
                progname, sw_device_name(p->dev), human(mi.device_free),
                p->steps + 1, human(ARRAY_BYTES_MIN));
        return 1;
    }
    p->n = p->bytes / sizeof(float);
    /* Freed by cmd_demo, whatever happens. */
    p->x = calloc(p->steps, sizeof *p->x);
    p->host = malloc(p->bytes);
    bool ok = p->x != NULL && p->host != NULL;
    for (int i = 0; i < 2; i++) {
        r[i].hash = calloc(p->steps + 1, sizeof *r[i].hash);
        r[i].sum_bits = calloc(p->steps, sizeof *r[i].sum_bits);
        ok = ok && r[i].hash != NULL && r[i].sum_bits != NULL;
    }
    CHECK(ok, "out of host memory for %zu arrays' hashes", p->steps + 1);
    r[0].budget = 0;
    r[1].budget = budget_opt ? budget_opt : default_budget(p);
    printf("spillway %s demo on %s: %s\n", SW_VERSION_STRING,
           sw_device_name(p->dev), sw_device_description(p->dev));
    printf("device total %s, free %s\n",
           mi.device_total ? human(mi.device_total) : "unknown",
           mi.device_free_known ? human(mi.device_free) : "unknown");
    return 0;
}

static void print_plan(const pipeline *p, uint64_t budget)
{
    uint64_t live = live_bytes(p), step = STEP_ARRAYS * p->bytes;
    printf("\npipeline of %zu steps: %zu forward steps x[k] = c*x[k-1] + "
           "(1-c)*x[k-2] + x[0],\nkeeping every x[k] (like activations kept"
           " for a backward pass), then %zu\nbackward steps acc += a*x[k] "
           "from k = %zu down to 0, each with a checkpoint\nsum(acc).\n",
           2 * p->steps, p->steps, p->steps, p->steps - 1);
    printf("arrays: %zu of %s (%zu float32 each), a live set of %s;\n"
           "one step uses at most %d of them (%s)\n",
           p->steps + 1, human(p->bytes), p->n, human(live), STEP_ARRAYS,
           human(step));
    printf("budget of run 2: %s; the live set is %.1fx the budget\n",
           human(budget), (double)live / (double)budget);
    if (live < 4 * budget)
        printf("note: the live set is less than 4x the budget (give more "
               "--steps or a smaller --budget)\n");
    if (budget < 2 * p->bytes)
        printf("note: the budget is below what one operation needs (2 "
               "arrays, %s):\nexpect run 2 to be refused\n",
               human(2 * p->bytes));
    else if (budget < step)
        printf("note: the budget is below one step's %s: steps will spill "
               "and restore their own operands\n",
               human(step));
}

static const char *seconds(double s)
{
    static char ring[8][24];
    static unsigned next;
    char *buf = ring[next++ % 8];
    snprintf(buf, sizeof ring[0], "%.3f s", s);
    return buf;
}

/* One row per run.  steps counts forward and backward steps, as the
 * progress bar does. */
static void print_table(const pipeline *p, const run_stats r[2])
{
    printf("\n%-3s %10s %5s %10s %6s %8s %10s %10s %8s %8s %8s %8s\n",
           "run", "budget", "steps", "peak", "spills", "restores",
           "moved out", "moved in", "time out", "time in", "wall",
           "slowdown");
    for (int i = 0; i < 2; i++) {
        char slow[32];
        snprintf(slow, sizeof slow, "%.2fx",
                 r[0].wall_s > 0 ? r[i].wall_s / r[0].wall_s : 1.0);
        printf("%-3d %10s %5zu %10s %6" PRIu64 " %8" PRIu64
               " %10s %10s %8s %8s %8s %8s\n",
               i + 1, r[i].budget ? human(r[i].budget) : "none",
               2 * p->steps, human(r[i].peak), r[i].spills, r[i].restores,
               human(r[i].out_bytes), human(r[i].in_bytes),
               seconds(r[i].out_s), seconds(r[i].in_s), seconds(r[i].wall_s),
               slow);
    }
}

/* "3.10 GiB/s", or "-" when nothing was timed. */
static const char *rate(uint64_t bytes, double s)
{
    static char ring[4][32];
    static unsigned next;
    char *buf = ring[next++ % 4];
    if (bytes == 0 || s <= 0)
        return "-";
    snprintf(buf, sizeof ring[0], "%.2f GiB/s",
             (double)bytes / (double)GIB / s);
    return buf;
}

/* Run 2 kept to its budget, and (when the live set exceeds it) had to
 * spill and restore to do so. */
static int check_budget_run(const pipeline *p, const run_stats *r)
{
    CHECK(r->peak <= r->budget, "run 2: peak in use %s passed the budget %s",
          human(r->peak), human(r->budget));
    printf("\nrun 2: peak in use %s <= budget %s;\nmoved %s out (%s) and "
           "%s back in (%s)\n",
           human(r->peak), human(r->budget), human(r->out_bytes),
           rate(r->out_bytes, r->out_s), human(r->in_bytes),
           rate(r->in_bytes, r->in_s));
    if (live_bytes(p) > r->budget)
        CHECK(r->spills > 0 && r->restores > 0,
              "run 2: a live set of %s under a budget of %s, yet %" PRIu64
              " spills and %" PRIu64 " restores",
              human(live_bytes(p)), human(r->budget), r->spills,
              r->restores);
    else
        printf("note: the budget holds the whole live set: nothing had to "
               "be spilled\n");
    return 0;
}

static int compare_runs(const pipeline *p, const run_stats r[2])
{
    for (size_t k = 0; k <= p->steps; k++) {
        char name[32];
        if (k < p->steps)
            snprintf(name, sizeof name, "x[%zu]", k);
        else
            snprintf(name, sizeof name, "acc");
        CHECK(r[0].hash[k] == r[1].hash[k],
              "bit-identical: no: %s differs (FNV-1a %016" PRIx64
              " in run 1, %016" PRIx64 " in run 2)",
              name, r[0].hash[k], r[1].hash[k]);
    }
    for (size_t k = p->steps; k-- > 0;) {
        double a, b;
        memcpy(&a, &r[0].sum_bits[k], sizeof a);
        memcpy(&b, &r[1].sum_bits[k], sizeof b);
        CHECK(r[0].sum_bits[k] == r[1].sum_bits[k],
              "bit-identical: no: the checkpoint after x[%zu] differs "
              "(%.17g in run 1, %.17g in run 2)",
              k, a, b);
    }
    printf("bit-identical: yes (%zu arrays, %zu sums)\n", p->steps + 1,
           p->steps);
    return 0;
}

/* Everything freed, the cache emptied: nothing may be left anywhere. */
static int check_clean(pipeline *p)
{
    sw_memory_info mi;
    TRY(sw_empty_cache(p->dev));
    TRY(sw_memory_info_get(p->dev, &mi));
    CHECK(mi.in_use == 0 && mi.spilled == 0 && mi.cached == 0,
          "after freeing everything: in use %s, spilled %s, cached %s",
          human(mi.in_use), human(mi.spilled), human(mi.cached));
    printf("after freeing: in use 0 B, spilled 0 B, cached 0 B\n");
    return 0;
}

/* Allocate and fill the whole live set once, untimed, then give it back:
 * the first touch of device memory (page faults in the simulated device's
 * arena, lazy mappings in drivers) would otherwise be charged to run 1
 * alone and understate the slowdown of run 2. */
static int warm_up(pipeline *p)
{
    sw_scalar zero = {.f = 0.0};
    for (size_t k = 0; k <= p->steps; k++) {
        sw_buffer **b = k < p->steps ? &p->x[k] : &p->acc;
        if (alloc_array(p, "demo/warm-up", b))
            return 1;
        TRY(sw_op_fill(*b, SW_FLOAT32, p->n, zero));
    }
    free_arrays(p);
    TRY(sw_empty_cache(p->dev));
    TRY(sw_device_synchronize(p->dev));
    return 0;
}

static int demo_runs(pipeline *p, run_stats r[2])
{
    print_plan(p, r[1].budget);
    if (warm_up(p))
        return 1;
    for (int i = 0; i < 2; i++) {
        if (i == 0)
            printf("\nrun 1: no budget, on a device that holds the live "
                   "set\n");
        else
            printf("run 2: budget %s\n", human(r[1].budget));
        int rc = run_pipeline(p, i + 1, &r[i]);
        free_arrays(p);
        if (rc)
            return 1;
        /* Give everything back and let the device finish freeing it, so
         * that run 2 starts from the same empty device as run 1. */
        TRY(sw_empty_cache(p->dev));
        TRY(sw_device_synchronize(p->dev));
    }
    if (r[0].spills > 0)
        printf("note: run 1 spilled: the device could not hold the live "
               "set\n");
    print_table(p, r);
    if (check_budget_run(p, &r[1]) || compare_runs(p, r))
        return 1;
    return check_clean(p);
}

static int cmd_demo(int argc, char **argv)
{
    options o = {.count = DEMO_STEPS_DEFAULT};
    int rc = parse_options("demo", argc, argv, "--steps", DEMO_STEPS_MIN,
                           DEMO_STEPS_MAX, &o);
    if (rc != 0 || o.help)
        return rc;
    pipeline p;
    memset(&p, 0, sizeof p);
    p.steps = o.count;
    run_stats r[2];
    memset(r, 0, sizeof r);
    if (open_device(o.spec, &p.dev))
        return 1;
    rc = demo_setup(&p, o.budget, r) || demo_runs(&p, r);

    /* Whatever happened, free what is still held so the device closes. */
    if (p.x != NULL)
        free_arrays(&p);
    sw_set_memory_budget(p.dev, 0);
    int err = sw_device_close(p.dev);
    if (err != SW_OK) {
        report("sw_device_close", err);
        rc = 1;
    }
    free(p.x);
    free(p.host);
    for (int i = 0; i < 2; i++) {
        free(r[i].hash);
        free(r[i].sum_bits);
    }
    if (rc == 0)
        printf("\ndemo finished: %s closed, every output bit-identical\n",
               sw_device_name(p.dev));
    fflush(stdout);
    return rc;
}

/* ------------------------------------------------------------------------
 * spillway tour
 * ---------------------------------------------------------------------- */

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
    mismatch("tour holds too many buffers");
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
        report("sw_buffer_free", err);
        return 1;
    }
    return 0;
}

static int info(tour *d, sw_memory_info *mi)
{
    TRY(sw_memory_info_get(d->dev, mi));
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
           human(mi.in_use), human(mi.peak), human(mi.cached));
    return 0;
}

static int alloc(tour *d, size_t size, const char *tag, sw_buffer **out)
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
        mismatch("out of host memory for %s", human(bytes));
        return 1;
    }
    int rc = 1, err;
    for (size_t i = 0; i < n; i++)
        h[i] = xval(i);
    if ((err = sw_buffer_write(x, 0, h, bytes)) != SW_OK) {
        report("sw_buffer_write(tour/x)", err);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        h[i] = yval(i);
    if ((err = sw_buffer_write(y, 0, h, bytes)) != SW_OK) {
        report("sw_buffer_write(tour/y)", err);
        goto out;
    }
    if ((err = sw_buffer_read(x, 0, back, bytes)) != SW_OK) {
        report("sw_buffer_read(tour/x)", err);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (back[i] != xval(i)) {
            mismatch("tour/x[%zu] reads back %g, wrote %g", i, back[i],
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

static int step_kernels(tour *d, sw_buffer *x, sw_buffer *y, sw_buffer *out)
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
    if (alloc(d, sizeof a, "tour/int-a", &ia) ||
        alloc(d, sizeof b, "tour/int-b", &ib) ||
        alloc(d, sizeof c, "tour/int-c", &ic))
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

static int step_scopes(tour *d)
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
    if (alloc(d, a_size, "tour/scope-a", &ta))
        return 1;
    TRY(sw_peak_scope_begin(d->dev, &inner));
    printf("  inner scope begins at in_use %s\n", human(base + a_size));
    if (alloc(d, b_size, "tour/scope-b", &tb) || release(d, &tb) ||
        show(d, "free tour/scope-b"))
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

    if (release(d, &ta) || show(d, "free tour/scope-a"))
        return 1;
    TRY(sw_peak_scope_end(outer, &outer_peak));
    printf("  outer scope ends: its peak %s\n", human(outer_peak));
    CHECK(outer_peak == inner_peak, "outer scope peak %s, expected %s",
          human(outer_peak), human(inner_peak));
    return 0;
}

static int step_cache(tour *d)
{
    size_t sizes[] = {fit(d, 1 * MIB), fit(d, 3 * MIB + 512),
                      fit(d, 256 * KIB) / 2};
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

static int step_budget(tour *d)
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
        if (alloc(d, 64 * KIB, "tour/fits", &fits) || release(d, &fits))
            return 1;
    }

    /* Then more than the whole budget: no trimming of the cache (nor, once
     * buffers can be spilled, any spilling) can make room for it. */
    uint64_t want = budget + 1 * MIB;
    want -= want % SW_ALLOC_GRANULARITY;
    sw_buffer *big = NULL;
    int err = sw_buffer_alloc(d->dev, (size_t)want, "tour/too-big", &big);
    if (err == SW_OK) {
        track(d, big);
        mismatch("allocating %s under a budget of %s succeeded",
                 human(want), human(budget));
        return 1;
    }
    char detail[4096];
    snprintf(detail, sizeof detail, "%s", sw_last_error());
    printf("  alloc tour/too-big %s: refused, as it should be:\n"
           "    %s: %s\n",
           human(want), sw_err_name(err), detail);
    CHECK(err == SW_ERR_OOM || err == SW_ERR_TOO_LARGE,
          "refused with %s, expected SW_ERR_OOM", sw_err_name(err));
    CHECK(big == NULL, "failed allocation left its out-parameter set");

    TRY(sw_set_memory_budget(d->dev, 0));
    printf("  budget removed\n");
    return 0;
}

static int tour_run(tour *d)
{
    int k = 0;
    sw_memory_info mi;
    if (info(d, &mi))
        return 1;
    printf("spillway %s tour on %s: %s\n", SW_VERSION_STRING,
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
    TRY(sw_empty_cache(d->dev));
    if (info(d, &mi))
        return 1;
    printf("  in_use %s, cached %s; %" PRIu64 " allocations, %" PRIu64
           " frees, %" PRIu64 " refused\n",
           human(mi.in_use), human(mi.cached), mi.allocs, mi.frees, mi.ooms);
    CHECK(mi.in_use == 0, "in_use is %s after freeing everything",
          human(mi.in_use));
    printf("\ntour finished: every result verified, nothing left in use\n");
    return 0;
}

static int cmd_tour(int argc, char **argv)
{
    options o = {.count = 3};
    int rc = parse_options("tour", argc, argv, "--rounds", 1, 1000, &o);
    if (rc != 0 || o.help)
        return rc;
    tour d;
    memset(&d, 0, sizeof d);
    d.budget_opt = o.budget;
    d.rounds = (unsigned)o.count;
    if (open_device(o.spec, &d.dev))
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
    if (strcmp(cmd, "tour") == 0)
        return cmd_tour(argc - 2, argv + 2);
    return usage_error("unknown command '%s'", cmd);
}
