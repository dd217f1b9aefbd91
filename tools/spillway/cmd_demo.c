/*
 * cmd_demo.c -- spillway demo, the main job: the pipeline of
 * demo_workload.h run on one device without a budget and then with one a
 * quarter of its live set (or --budget), with a progress line, a table of
 * both runs (peak, spills, restores, bytes and time each way, slowdown),
 * the cost of the budget against the copies it needed, and checks: the
 * budgeted run kept to its budget by spilling, every output of the runs is
 * bit-identical, nothing is left on the device.
 *
 * The cost is a ratio, measured in the same process (these machines are
 * shared and noisy): the budgeted run's time over the unbudgeted run's
 * plus the time memcpy takes for the bytes moved.  1.0 means spilling
 * costs exactly its copies; below 1.0, copies were hidden behind compute.
 * Each run is repeated (--repeat; by default 3 times, and up to 9 while
 * all of them have taken less than a second), alternating, each repeat
 * under its run's budgets (the host budget too), and the fastest is kept,
 * so that both are warmed the same way; before each, the device memory it
 * can hold (the live set, or its budget) is allocated, touched and left
 * in the cache (demo_prewarm), so that neither pays for first touches the
 * other does not.  memcpy's speed is the best of passes spread over the
 * runs (memcpy_meter).  --sweep prints it for several lengths and budgets
 * in one table; --json prints the figures as one JSON object (each
 * repeat's too); --trace DIR records each run's memory history there (and
 * draws it, when the Python package and matplotlib are at hand).
 */
/* clock_gettime, fork and waitpid are POSIX, not C11. */
#define _POSIX_C_SOURCE 200809L

#include "commands.h"
#include "demo_workload.h"
#include "progress.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

/* The demo's own options, beyond --device, --budget and --steps. */
typedef struct {
    bool sweep, json, no_prefetch, no_advise;
    /* --host-budget: bytes, or (host_quarter) a quarter of what run 2
     * spills at its end, live - budget */
    uint64_t host_budget;
    bool host_quarter;
    unsigned long repeat;
    bool auto_repeat; /* no --repeat: more for short runs (run_pair) */
    const char *trace_dir;
} demo_opts;

/* When printing JSON, nothing else goes to stdout. */
static bool quiet;

/* Each repeat of each run of the last run_pair, for --json: what it ran
 * under and what it did (the figures printed are the fastest repeat's). */
typedef struct {
    double wall_s;
    uint64_t host_budget, moved, disk_out, disk_in;
} demo_rep;
#define DEMO_REPS_MAX 100 /* --repeat's bound, over DEMO_AUTO_REPEAT_MAX */
static demo_rep reps[2][DEMO_REPS_MAX];
static size_t nreps[2];

/* ------------------------------------------------------------------------
 * Setup and plan
 * ---------------------------------------------------------------------- */

/* Size the arrays to the device, make the pipeline and both runs' records,
 * and print the header; 0 or 1 after a message. */
static int demo_setup(sw_device *dev, size_t steps, uint64_t budget_opt,
                      demo_pipeline *p, demo_run r[2])
{
    sw_memory_info mi;
    TRY_OR_RETURN(sw_memory_info_get(dev, &mi));
    size_t bytes = demo_array_bytes(&mi, steps);
    if (bytes == 0) {
        fprintf(stderr, "%s: demo: %s has %s free, too little for %zu "
                "arrays of at least %s without a budget; give fewer --steps "
                "or use a larger device\n",
                cli_progname, sw_device_name(dev), cli_bytes(mi.device_free),
                steps + 1, cli_bytes(DEMO_ARRAY_BYTES_MIN));
        return 1;
    }
    /* Each is destroyed by cmd_demo, whatever happens. */
    bool ok = demo_pipeline_init(p, dev, steps, bytes) == SW_OK;
    ok = demo_run_init(&r[0], p, 0) == SW_OK && ok;
    ok = demo_run_init(&r[1], p, 0) == SW_OK && ok;
    CHECK_OR_RETURN(ok, "out of host memory for %zu arrays' hashes",
                    steps + 1);
    r[1].budget = budget_opt ? budget_opt : demo_default_budget(p);
    if (quiet)
        return 0;
    printf("spillway %s demo on %s: %s\n", CLI_VERSION, sw_device_name(dev),
           sw_device_description(dev));
    printf("device total %s, free %s\n",
           mi.device_total ? cli_bytes(mi.device_total) : "unknown",
           mi.device_free_known ? cli_bytes(mi.device_free) : "unknown");
    return 0;
}

/* ------------------------------------------------------------------------
 * The baseline: what copying the bytes would cost anyway
 * ---------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* memcpy's speed for the copies a spill or restore makes, in bytes per
 * second: one array's size at a time, from a block just written into one
 * not touched for a while (a ring of pre-faulted blocks, at least 64 MiB in
 * all, so the destination is out of the caches as a host pool entry or an
 * array's device memory is).  Not a ping-pong between two blocks: at the
 * demo's sizes both would stay in the last-level cache, a speed no spill
 * sees; nor blocks of 16 MiB or more, which understated it (the spill
 * figures came out above 1.5x).  The best pass counts: 3 passes at the
 * start, and one more before each pair of runs (run_pair), so that one
 * slow moment of this shared machine does not make the copies look
 * cheap (measured once, it moved from 6.6 to 10.6 GB/s between demos). */
typedef struct {
    char **blk;
    size_t ring, bytes;
    double best;
} memcpy_meter;

static void meter_pass(memcpy_meter *m)
{
    if (m->blk == NULL)
        return;
    double t0 = now_s();
    for (size_t i = 0; i + 1 < m->ring; i++)
        memcpy(m->blk[i + 1], m->blk[i], m->bytes);
    double dt = now_s() - t0;
    double rate = dt > 0 ? (double)(m->ring - 1) * (double)m->bytes / dt
                         : 0;
    volatile char sink = m->blk[m->ring - 1][m->bytes / 2];
    (void)sink;
    if (rate > m->best)
        m->best = rate;
}

static void meter_destroy(memcpy_meter *m)
{
    for (size_t i = 0; m->blk != NULL && i < m->ring; i++)
        free(m->blk[i]);
    free(m->blk);
    m->blk = NULL;
}

/* The ring and its first 3 passes; best stays 0 without host memory (the
 * ratio then counts no copy time). */
static void meter_init(memcpy_meter *m, size_t bytes)
{
    memset(m, 0, sizeof *m);
    if (bytes == 0)
        return;
    m->bytes = bytes;
    m->ring = ((size_t)64 << 20) / bytes;
    if (m->ring < 4)
        m->ring = 4;
    m->blk = calloc(m->ring, sizeof *m->blk);
    for (size_t i = 0; m->blk != NULL && i < m->ring; i++) {
        m->blk[i] = malloc(bytes);
        if (m->blk[i] == NULL) {
            meter_destroy(m);
            return;
        }
        memset(m->blk[i], (int)i, bytes);
    }
    for (int pass = 0; pass < 3; pass++)
        meter_pass(m);
}

/* The budgeted run's time over the unbudgeted one's plus its copies at
 * memcpy speed. */
static double cost_ratio(const demo_run *plain, const demo_run *budgeted,
                         double rate)
{
    double copies = rate > 0 ? (double)(budgeted->out_bytes +
                                        budgeted->in_bytes) / rate
                             : 0;
    return budgeted->wall_s / (plain->wall_s + copies);
}

/* The least a run under `budget` can move: what of the live set does not
 * fit goes out once and comes back once, 2 x (live - budget); 0 when all
 * of it fits (or there is no budget). */
static uint64_t moved_floor(const demo_pipeline *p, uint64_t budget)
{
    uint64_t live = demo_live_bytes(p);
    return budget != 0 && live > budget ? 2 * (live - budget) : 0;
}

/* A run's bytes moved (out and in) over that floor: 1.0 moves no byte
 * twice; 0 when there is no floor. */
static double moved_over_floor(const demo_pipeline *p, const demo_run *r)
{
    uint64_t floor = moved_floor(p, r->budget);
    return floor ? (double)(r->out_bytes + r->in_bytes) / (double)floor : 0;
}

static void print_plan(const demo_pipeline *p, uint64_t budget)
{
    if (quiet)
        return;
    uint64_t live = demo_live_bytes(p), step = DEMO_STEP_ARRAYS * p->bytes;
    printf("\npipeline of %zu steps: %zu forward steps x[k] = c*x[k-1] + "
           "(1-c)*x[k-2] + x[0],\nkeeping every x[k] (like activations kept"
           " for a backward pass), then %zu\nbackward steps acc += a*x[k] "
           "from k = %zu down to 0, each with a checkpoint\nsum(acc).\n",
           2 * p->steps, p->steps, p->steps, p->steps - 1);
    printf("arrays: %zu of %s (%zu float32 each), a live set of %s;\n"
           "one step uses at most %d of them (%s)\n",
           p->steps + 1, cli_bytes(p->bytes), p->n, cli_bytes(live),
           DEMO_STEP_ARRAYS, cli_bytes(step));
    printf("budget of run 2: %s; the live set is %.1fx the budget\n",
           cli_bytes(budget), (double)live / (double)budget);
    if (live < 4 * budget)
        printf("note: the live set is less than 4x the budget (give more "
               "--steps or a smaller --budget)\n");
    if (budget < 2 * p->bytes)
        printf("note: the budget is below what one operation needs (2 "
               "arrays, %s):\nexpect run 2 to be refused\n",
               cli_bytes(2 * p->bytes));
    else if (budget < step)
        printf("note: the budget is below one step's %s: steps will spill "
               "and restore their own operands\n",
               cli_bytes(step));
}

/* ------------------------------------------------------------------------
 * The table of the runs
 * ---------------------------------------------------------------------- */

/* "0.123 s", in a ring of static buffers like cli_bytes. */
static const char *seconds(double s)
{
    static char ring[8][24];
    static unsigned next;
    char *buf = ring[next++ % 8];
    snprintf(buf, sizeof ring[0], "%.3f s", s);
    return buf;
}

/* One row per run.  steps counts forward and backward steps, as the
 * progress line does. */
static void print_table(const demo_pipeline *p, const demo_run r[2])
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
               i + 1, r[i].budget ? cli_bytes(r[i].budget) : "none",
               2 * p->steps, cli_bytes(r[i].peak), r[i].spills, r[i].restores,
               cli_bytes(r[i].out_bytes), cli_bytes(r[i].in_bytes),
               seconds(r[i].out_s), seconds(r[i].in_s), seconds(r[i].wall_s),
               slow);
    }
}

/* ------------------------------------------------------------------------
 * Checks: the budget, the runs compared, nothing left
 * ---------------------------------------------------------------------- */

/* The budgeted run kept to its budget, and (when the live set exceeds it)
 * had to spill and restore to do so. */
static int check_budget_run(const demo_pipeline *p, const demo_run *r)
{
    CHECK_OR_RETURN(r->peak <= r->budget,
                    "run 2: peak in use %s passed the budget %s",
                    cli_bytes(r->peak), cli_bytes(r->budget));
    if (demo_live_bytes(p) > r->budget)
        CHECK_OR_RETURN(r->spills > 0 && r->restores > 0,
                        "run 2: a live set of %s under a budget of %s, yet "
                        "%" PRIu64 " spills and %" PRIu64 " restores",
                        cli_bytes(demo_live_bytes(p)), cli_bytes(r->budget),
                        r->spills, r->restores);
    if (quiet)
        return 0;
    printf("\nrun 2: peak in use %s <= budget %s;\nmoved %s out and %s back "
           "in\n",
           cli_bytes(r->peak), cli_bytes(r->budget), cli_bytes(r->out_bytes),
           cli_bytes(r->in_bytes));
    if (moved_floor(p, r->budget) != 0)
        printf("bytes moved over their floor, 2 x (live set - budget) = %s: "
               "%.2f (1.00: no byte moved twice)\n",
               cli_bytes(moved_floor(p, r->budget)),
               moved_over_floor(p, r));
    if (demo_live_bytes(p) <= r->budget)
        printf("note: the budget holds the whole live set: nothing had to "
               "be spilled\n");
    return 0;
}

static int compare_runs(const demo_pipeline *p, const demo_run *a,
                        const demo_run *b)
{
    for (size_t k = 0; k <= p->steps; k++) {
        char name[32];
        if (k < p->steps)
            snprintf(name, sizeof name, "x[%zu]", k);
        else
            snprintf(name, sizeof name, "acc");
        CHECK_OR_RETURN(a->hash[k] == b->hash[k],
                        "bit-identical: no: %s differs (FNV-1a %016" PRIx64
                        " in run 1, %016" PRIx64 " in run 2)",
                        name, a->hash[k], b->hash[k]);
    }
    for (size_t k = p->steps; k-- > 0;) {
        double x, y;
        memcpy(&x, &a->sum_bits[k], sizeof x);
        memcpy(&y, &b->sum_bits[k], sizeof y);
        CHECK_OR_RETURN(a->sum_bits[k] == b->sum_bits[k],
                        "bit-identical: no: the checkpoint after x[%zu] "
                        "differs (%.17g in run 1, %.17g in run 2)",
                        k, x, y);
    }
    return 0;
}

/* Everything freed, the cache emptied: nothing may be left anywhere. */
static int check_clean(sw_device *dev)
{
    sw_memory_info mi;
    TRY_OR_RETURN(sw_empty_cache(dev));
    TRY_OR_RETURN(sw_memory_info_get(dev, &mi));
    CHECK_OR_RETURN(mi.in_use == 0 && mi.spilled == 0 && mi.cached == 0,
                    "after freeing everything: in use %s, spilled %s, "
                    "cached %s",
                    cli_bytes(mi.in_use), cli_bytes(mi.spilled),
                    cli_bytes(mi.cached));
    if (!quiet)
        printf("after freeing: in use 0 B, spilled 0 B, cached 0 B\n");
    return 0;
}

/* ------------------------------------------------------------------------
 * Memory histories (--trace DIR)
 * ---------------------------------------------------------------------- */

/* Draw path's picture with the Python package's plotter (spillway plot),
 * quietly; a note when it cannot be drawn. */
static void draw(const char *path)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return;
    exe[n] = '\0';
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", 1);
        if (devnull >= 0) {
            dup2(devnull, 1);
            dup2(devnull, 2);
        }
        execl(exe, exe, "plot", path, (char *)NULL);
        _exit(127);
    }
    int status = 1;
    if (pid > 0)
        waitpid(pid, &status, 0);
    if (!quiet && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
        printf("note: no picture of %s (spillway plot needs python3 with "
               "spillway and matplotlib)\n", path);
}

static int trace_begin(const demo_opts *d, sw_device *dev)
{
    if (d->trace_dir == NULL)
        return 0;
    sw_trace_options o = {.capacity = (size_t)1 << 20};
    TRY_OR_RETURN(sw_trace_start(dev, &o));
    return 0;
}

static int trace_end(const demo_opts *d, sw_device *dev, int run)
{
    if (d->trace_dir == NULL)
        return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/run%d.json", d->trace_dir, run);
    TRY_OR_RETURN(sw_trace_stop(dev));
    TRY_OR_RETURN(sw_trace_dump(dev, path, "chrome"));
    if (!quiet)
        printf("memory history of run %d: %s\n", run, path);
    draw(path);
    return 0;
}

/* ------------------------------------------------------------------------
 * The runs
 * ---------------------------------------------------------------------- */

static void on_step(void *pg) { progress_step(pg); }

/* A failure of the workload, reported with the call it noted. */
static int workload_failed(const demo_pipeline *p, int err)
{
    cli_report(p->failed, err);
    return 1;
}

/* One run of the pipeline under r->budget into r (its fastest over the
 * repeats is kept by the caller), arrays freed after. */
static int one_run(demo_pipeline *p, demo_run *r, int run, bool show)
{
    progress pg;
    int err = demo_prewarm(p, r->budget);
    if (err != SW_OK)
        return workload_failed(p, err); /* cmd_demo frees the arrays */
    if (show)
        progress_begin(&pg, p->dev, run, 2 * p->steps);
    err = demo_run_pipeline(p, r, show ? on_step : NULL, &pg);
    if (err != SW_OK)
        return workload_failed(p, err); /* cmd_demo frees the arrays */
    if (show)
        progress_end_line();
    demo_free_arrays(p);
    /* Give everything back and let the device finish freeing it, so that
     * the next run starts from the same empty device. */
    TRY_OR_RETURN(sw_empty_cache(p->dev));
    TRY_OR_RETURN(sw_device_synchronize(p->dev));
    return 0;
}

#define DEMO_AUTO_REPEAT_MAX 9
#define DEMO_AUTO_REPEAT_S 1.0

/* Both runs, each repeated; r[i] keeps the fastest of its repeats, and
 * every repeat must match the first run bit for bit. */
static int run_pair(demo_pipeline *p, demo_run r[2], const demo_opts *d,
                    memcpy_meter *m, bool show)
{
    demo_run t;
    if (demo_run_init(&t, p, 0) != SW_OK) {
        cli_mismatch("out of host memory for a run's hashes");
        return 1;
    }
    int rc = 0;
    nreps[0] = nreps[1] = 0;
    /* Without --repeat: 3 pairs, and more (at most DEMO_AUTO_REPEAT_MAX)
     * until the pairs have taken DEMO_AUTO_REPEAT_S: a 32-step run takes
     * ~0.1 s here, and the fastest of 3 such runs still moved by 0.15 in
     * ratio from one demo to the next on this shared machine. */
    double spent = 0;
    for (unsigned long rep = 0;
         rc == 0 && (rep < d->repeat ||
                     (d->auto_repeat && rep < DEMO_AUTO_REPEAT_MAX &&
                      spent < DEMO_AUTO_REPEAT_S));
         rep++) {
        meter_pass(m);
        for (int i = 0; rc == 0 && i < 2; i++) {
            bool first = rep == 0;
            demo_run *dst = first ? &r[i] : &t;
            /* Every repeat under the run's budgets, the host's too. */
            dst->budget = r[i].budget;
            dst->host_budget = r[i].host_budget;
            if (show && first)
                printf(i == 0 ? "\nrun 1: no budget, on a device that holds "
                                "the live set\n"
                              : "run 2: budget %s\n",
                       cli_bytes(r[1].budget));
            rc = (first && trace_begin(d, p->dev)) ||
                 one_run(p, dst, i + 1, show && first) ||
                 (first && trace_end(d, p->dev, i + 1));
            if (rc == 0)
                spent += dst->wall_s;
            if (rc == 0 && nreps[i] < DEMO_REPS_MAX)
                reps[i][nreps[i]++] = (demo_rep){
                    dst->wall_s, dst->host_budget,
                    dst->out_bytes + dst->in_bytes, dst->disk_out_bytes,
                    dst->disk_in_bytes};
            if (rc == 0 && !first) {
                rc = compare_runs(p, &r[0], &t);
                if (t.wall_s < r[i].wall_s) { /* keep the fastest */
                    uint64_t *h = r[i].hash, *sb = r[i].sum_bits;
                    r[i] = t;
                    t.hash = h;
                    t.sum_bits = sb;
                }
            }
        }
    }
    demo_run_destroy(&t);
    if (rc == 0)
        rc = compare_runs(p, &r[0], &r[1]);
    return rc;
}

static void print_cost(const demo_run r[2], double rate)
{
    double copies = rate > 0 ? (double)(r[1].out_bytes + r[1].in_bytes) /
                                   rate
                             : 0;
    printf("cost of the budget: %.3f s against %.3f s + %.3f s of copies "
           "(%s moved at memcpy's\n%.2f GB/s in this process): ratio %.2f "
           "(1.0: spilling costs exactly its copies;\nbelow 1.0: copies "
           "hidden behind compute)\n",
           r[1].wall_s, r[0].wall_s, copies,
           cli_bytes(r[1].out_bytes + r[1].in_bytes), rate / 1e9,
           cost_ratio(&r[0], &r[1], rate));
}

static void print_json(const demo_pipeline *p, const demo_run r[2],
                       double rate, double wbps, double rbps)
{
    printf("{\"device\":\"%s\",\"steps\":%zu,\"array_bytes\":%zu,"
           "\"live_bytes\":%" PRIu64 ",\"memcpy_bytes_per_s\":%.0f,"
           "\"runs\":[",
           sw_device_name(p->dev), p->steps, p->bytes, demo_live_bytes(p),
           rate);
    for (int i = 0; i < 2; i++) {
        printf("%s{\"budget\":%" PRIu64 ",\"wall_s\":%.6f,\"peak\":%" PRIu64
               ",\"spills\":%" PRIu64 ",\"restores\":%" PRIu64
               ",\"out_bytes\":%" PRIu64 ",\"in_bytes\":%" PRIu64
               ",\"out_s\":%.6f,\"in_s\":%.6f,\"host_budget\":%" PRIu64
               ",\"disk_out_bytes\":%" PRIu64 ",\"disk_in_bytes\":%" PRIu64
               ",\"disk_out_s\":%.6f,\"disk_in_s\":%.6f,\"repeats\":[",
               i ? "," : "", r[i].budget, r[i].wall_s, r[i].peak, r[i].spills,
               r[i].restores, r[i].out_bytes, r[i].in_bytes, r[i].out_s,
               r[i].in_s, r[i].host_budget, r[i].disk_out_bytes,
               r[i].disk_in_bytes, r[i].disk_out_s, r[i].disk_in_s);
        for (size_t k = 0; k < nreps[i]; k++)
            printf("%s{\"wall_s\":%.6f,\"host_budget\":%" PRIu64
                   ",\"moved_bytes\":%" PRIu64 ",\"disk_out_bytes\":%" PRIu64
                   ",\"disk_in_bytes\":%" PRIu64 "}",
                   k ? "," : "", reps[i][k].wall_s, reps[i][k].host_budget,
                   reps[i][k].moved, reps[i][k].disk_out,
                   reps[i][k].disk_in);
        printf("]}");
    }
    printf("],\"slowdown\":%.4f,\"ratio\":%.4f,\"moved_bytes\":%" PRIu64
           ",\"floor_bytes\":%" PRIu64 ",\"moved_over_floor\":%.4f,"
           "\"plain_disk_write_bytes_per_s\":%.0f,"
           "\"plain_disk_read_bytes_per_s\":%.0f,\"bit_identical\":true}\n",
           r[0].wall_s > 0 ? r[1].wall_s / r[0].wall_s : 1.0,
           cost_ratio(&r[0], &r[1], rate), r[1].out_bytes + r[1].in_bytes,
           moved_floor(p, r[1].budget), moved_over_floor(p, &r[1]), wbps,
           rbps);
}

/* Run 2's disk traffic against a plain pwrite/pread of the same sizes. */
static void print_disk(const demo_pipeline *p, const demo_run *r,
                       double wbps, double rbps)
{
    double w = r->disk_out_s > 0 ? (double)r->disk_out_bytes / r->disk_out_s
                                 : 0;
    double rd = r->disk_in_s > 0 ? (double)r->disk_in_bytes / r->disk_in_s
                                 : 0;
    printf("disk (host budget %s): wrote %s in %.3f s (%.2f GB/s), read %s "
           "in %.3f s (%.2f GB/s);\nplain pwrite/pread of %s pieces to the "
           "same directory: %.2f / %.2f GB/s; the disk tier's share of "
           "them: %.2f / %.2f\n",
           cli_bytes(r->host_budget), cli_bytes(r->disk_out_bytes),
           r->disk_out_s, w / 1e9, cli_bytes(r->disk_in_bytes), r->disk_in_s,
           rd / 1e9, cli_bytes(p->bytes), wbps / 1e9, rbps / 1e9,
           wbps > 0 ? w / wbps : 0.0, rbps > 0 ? rd / rbps : 0.0);
}

static int demo_runs(demo_pipeline *p, demo_run r[2], const demo_opts *d)
{
    if (d->host_quarter) {
        uint64_t live = demo_live_bytes(p);
        r[1].host_budget = live > r[1].budget ? (live - r[1].budget) / 4
                                               : p->bytes;
    } else {
        r[1].host_budget = d->host_budget;
    }
    print_plan(p, r[1].budget);
    if (r[1].host_budget != 0 && !quiet)
        printf("host budget of run 2: %s (past it, spilled arrays go to "
               "disk)\n", cli_bytes(r[1].host_budget));
    memcpy_meter m;
    meter_init(&m, p->bytes);
    int err = demo_warm_up(p);
    if (err != SW_OK) {
        meter_destroy(&m);
        return workload_failed(p, err);
    }
    /* The plain pwrite/pread the disk tier is measured against, before
     * and after the runs (the faster of each: a machine's page cache and
     * dirty-page throttling favour neither side then). */
    double wbps = 0, rbps = 0, w2 = 0, r2 = 0;
    uint64_t disk_total = demo_live_bytes(p) > r[1].budget
                              ? demo_live_bytes(p) - r[1].budget
                              : p->bytes;
    size_t nbuf = (size_t)(r[1].host_budget / p->bytes);
    if (r[1].host_budget != 0)
        demo_plain_disk(p->bytes, disk_total, nbuf, &wbps, &rbps);
    int rc = run_pair(p, r, d, &m, !quiet);
    double rate = m.best;
    meter_destroy(&m);
    if (rc)
        return 1;
    if (r[1].host_budget != 0) {
        demo_plain_disk(p->bytes, r[1].disk_out_bytes > 0 ? r[1].disk_out_bytes
                                                     : disk_total,
                   nbuf, &w2, &r2);
        wbps = w2 > wbps ? w2 : wbps;
        rbps = r2 > rbps ? r2 : rbps;
    }
    if (quiet) {
        if (check_budget_run(p, &r[1]))
            return 1;
        print_json(p, r, rate, wbps, rbps);
        return check_clean(p->dev);
    }
    if (r[0].spills > 0)
        printf("note: run 1 spilled: the device could not hold the live "
               "set\n");
    print_table(p, r);
    if (check_budget_run(p, &r[1]))
        return 1;
    print_cost(r, rate);
    if (r[1].host_budget != 0)
        print_disk(p, &r[1], wbps, rbps);
    printf("bit-identical: yes (%zu arrays, %zu sums)%s\n", p->steps + 1,
           p->steps, d->repeat > 1 ? " in every repeat" : "");
    return check_clean(p->dev);
}

/* ------------------------------------------------------------------------
 * --sweep: lengths x budgets in one table
 * ---------------------------------------------------------------------- */

static int sweep(sw_device *dev, const demo_opts *d)
{
    static const size_t steps[] = {32, 128, 512};
    static const unsigned fractions[] = {2, 4, 8}; /* live / budget */
    if (!quiet)
        printf("spillway %s demo --sweep on %s: %s\n\n%6s %10s %10s %7s "
               "%8s %10s %6s %9s %9s %9s %6s\n",
               CLI_VERSION, sw_device_name(dev), sw_device_description(dev),
               "steps", "live", "budget", "spills", "restores", "moved",
               "/floor", "no budget", "budget", "copies", "ratio");
    else
        printf("{\"device\":\"%s\",\"sweep\":[", sw_device_name(dev));
    bool firstrow = true;
    for (size_t si = 0; si < sizeof steps / sizeof steps[0]; si++) {
        sw_memory_info mi;
        TRY_OR_RETURN(sw_memory_info_get(dev, &mi));
        size_t bytes = demo_array_bytes(&mi, steps[si]);
        if (bytes == 0)
            continue; /* the device is too small for this length */
        demo_pipeline p;
        demo_run r[2];
        memset(r, 0, sizeof r);
        int rc = demo_pipeline_init(&p, dev, steps[si], bytes) != SW_OK ||
                 demo_run_init(&r[0], &p, 0) != SW_OK ||
                 demo_run_init(&r[1], &p, 0) != SW_OK;
        p.prefetch = !d->no_prefetch;
        p.advise = !d->no_advise;
        memcpy_meter m;
        meter_init(&m, bytes);
        if (rc == 0 && demo_warm_up(&p) != SW_OK)
            rc = workload_failed(&p, SW_ERR_DEVICE);
        for (size_t fi = 0; rc == 0 && fi < 3; fi++) {
            uint64_t budget = demo_live_bytes(&p) / fractions[fi];
            budget -= budget % bytes;
            if (budget < DEMO_STEP_ARRAYS * bytes)
                continue;
            r[1].budget = budget;
            bool was_quiet = quiet;
            quiet = true; /* the table says it all */
            rc = run_pair(&p, r, d, &m, false) ||
                 check_budget_run(&p, &r[1]);
            quiet = was_quiet;
            if (rc)
                break;
            double rate = m.best;
            double copies = rate > 0 ? (double)(r[1].out_bytes +
                                                r[1].in_bytes) / rate
                                     : 0;
            if (quiet)
                printf("%s{\"steps\":%zu,\"live_bytes\":%" PRIu64
                       ",\"budget\":%" PRIu64 ",\"spills\":%" PRIu64
                       ",\"restores\":%" PRIu64 ",\"moved_bytes\":%" PRIu64
                       ",\"plain_s\":%.6f,\"budget_s\":%.6f,"
                       "\"copies_s\":%.6f,\"ratio\":%.4f,"
                       "\"floor_bytes\":%" PRIu64 ",\"moved_over_floor\":"
                       "%.4f}",
                       firstrow ? "" : ",", steps[si], demo_live_bytes(&p),
                       budget, r[1].spills, r[1].restores,
                       r[1].out_bytes + r[1].in_bytes, r[0].wall_s,
                       r[1].wall_s, copies, cost_ratio(&r[0], &r[1], rate),
                       moved_floor(&p, budget), moved_over_floor(&p, &r[1]));
            else
                printf("%6zu %10s %10s %7" PRIu64 " %8" PRIu64
                       " %10s %6.2f %8.3fs %8.3fs %8.3fs %6.2f\n",
                       steps[si], cli_bytes(demo_live_bytes(&p)),
                       cli_bytes(budget), r[1].spills, r[1].restores,
                       cli_bytes(r[1].out_bytes + r[1].in_bytes),
                       moved_over_floor(&p, &r[1]), r[0].wall_s,
                       r[1].wall_s, copies, cost_ratio(&r[0], &r[1], rate));
            firstrow = false;
        }
        meter_destroy(&m);
        demo_pipeline_destroy(&p);
        demo_run_destroy(&r[0]);
        demo_run_destroy(&r[1]);
        if (rc)
            return 1;
    }
    if (quiet)
        printf("]}\n");
    else
        printf("\n/floor: the bytes moved (out and in) over the least any "
               "run under that budget\nmoves, 2 x (live - budget).  ratio: "
               "the budgeted run's time over the\nunbudgeted one's plus the "
               "bytes moved at memcpy speed (measured in this\nprocess); "
               "every run bit-identical to its unbudgeted twin.\n");
    return check_clean(dev);
}

/* ------------------------------------------------------------------------
 * The command
 * ---------------------------------------------------------------------- */

/* Take the demo's own options out of argv (the rest go to
 * cli_parse_options); 0, or 2 after a usage error. */
static int demo_own_options(const cli_command *self, int *argc, char **argv,
                            demo_opts *d)
{
    int w = 0;
    for (int i = 0; i < *argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--sweep") == 0) {
            d->sweep = true;
        } else if (strcmp(a, "--json") == 0) {
            d->json = true;
        } else if (strcmp(a, "--no-prefetch") == 0) {
            d->no_prefetch = true;
        } else if (strcmp(a, "--no-advise") == 0) {
            d->no_advise = true;
        } else if (strcmp(a, "--host-budget") == 0) {
            if (i + 1 >= *argc)
                return cli_usage_error(self, "%s needs a value", a);
            const char *v = argv[++i];
            if (strcmp(v, "quarter") == 0)
                d->host_quarter = true;
            else if (sw_parse_size(v, &d->host_budget) != SW_OK ||
                     d->host_budget == 0)
                return cli_usage_error(self, "--host-budget: '%s' is "
                                       "neither a size nor 'quarter'", v);
        } else if (strcmp(a, "--repeat") == 0 || strcmp(a, "--trace") == 0) {
            if (i + 1 >= *argc)
                return cli_usage_error(self, "%s needs a value", a);
            const char *v = argv[++i];
            if (a[2] == 't') {
                d->trace_dir = v;
            } else {
                char *end;
                unsigned long n = strtoul(v, &end, 10);
                if (*end != '\0' || v[0] == '-' || n < 1 || n > 100)
                    return cli_usage_error(self, "--repeat: '%s' is not a "
                                           "number from 1 to 100", v);
                d->repeat = n;
                d->auto_repeat = false;
            }
        } else {
            argv[w++] = argv[i];
        }
    }
    *argc = w;
    if (d->sweep && d->trace_dir != NULL)
        return cli_usage_error(self, "--trace records one demo, not a "
                               "--sweep");
    if (d->sweep && (d->host_budget != 0 || d->host_quarter))
        return cli_usage_error(self, "--host-budget is for one demo, not a "
                               "--sweep");
    /* Made here, before either run, so that a bad path is a usage error
     * and not a failure after the first run's minutes. */
    if (d->trace_dir != NULL && mkdir(d->trace_dir, 0777) != 0 &&
        errno != EEXIST) {
        fprintf(stderr, "spillway demo: --trace: cannot make '%s': %s\n",
                d->trace_dir, strerror(errno));
        return 2;
    }
    return 0;
}

int cmd_demo(const cli_command *self, int argc, char **argv)
{
    demo_opts d = {.repeat = 3, .auto_repeat = true};
    int rc = demo_own_options(self, &argc, argv, &d);
    if (rc != 0)
        return rc;
    cli_options o = {.count = DEMO_STEPS_DEFAULT};
    rc = cli_parse_options(self, argc, argv, "--steps", DEMO_STEPS_MIN,
                           DEMO_STEPS_MAX, &o);
    if (rc != 0 || o.help)
        return rc;
    quiet = d.json;
    sw_device *dev;
    if (cli_open_device(o.spec, &dev))
        return 1;
    demo_pipeline p;
    demo_run r[2];
    memset(&p, 0, sizeof p);
    memset(r, 0, sizeof r);
    if (d.sweep) {
        rc = sweep(dev, &d);
    } else {
        rc = demo_setup(dev, o.count, o.budget, &p, r);
        p.prefetch = !d.no_prefetch;
        p.advise = !d.no_advise;
        rc = rc || demo_runs(&p, r, &d);
    }

    /* Whatever happened, free what is still held so the device closes. */
    demo_pipeline_destroy(&p);
    for (int i = 0; i < 2; i++)
        demo_run_destroy(&r[i]);
    sw_set_memory_budget(dev, 0);
    int err = sw_device_close(dev);
    if (err != SW_OK) {
        cli_report("sw_device_close", err);
        rc = 1;
    }
    if (rc == 0 && !quiet)
        printf("\ndemo finished: %s closed, every output bit-identical\n",
               sw_device_name(dev));
    fflush(stdout);
    return rc;
}
