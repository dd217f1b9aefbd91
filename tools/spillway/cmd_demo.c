/*
 * cmd_demo.c -- spillway demo, the main job: the pipeline of
 * demo_workload.h run twice on one device, without a budget and then with
 * one a quarter of its live set (or --budget), with a progress line, a
 * table of both runs (peak, spills, restores, bytes and time each way,
 * slowdown), and checks: run 2 kept to its budget by spilling, every
 * output of the two runs is bit-identical, nothing is left on the device.
 */
#include "commands.h"
#include "demo_workload.h"
#include "progress.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

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
    printf("spillway %s demo on %s: %s\n", CLI_VERSION, sw_device_name(dev),
           sw_device_description(dev));
    printf("device total %s, free %s\n",
           mi.device_total ? cli_bytes(mi.device_total) : "unknown",
           mi.device_free_known ? cli_bytes(mi.device_free) : "unknown");
    return 0;
}

static void print_plan(const demo_pipeline *p, uint64_t budget)
{
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

/* "3.10 GiB/s", or "-" when nothing was timed. */
static const char *rate(uint64_t bytes, double s)
{
    static char ring[4][32];
    static unsigned next;
    char *buf = ring[next++ % 4];
    if (bytes == 0 || s <= 0)
        return "-";
    snprintf(buf, sizeof ring[0], "%.2f GiB/s",
             (double)bytes / (double)CLI_GIB / s);
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

/* Run 2 kept to its budget, and (when the live set exceeds it) had to
 * spill and restore to do so. */
static int check_budget_run(const demo_pipeline *p, const demo_run *r)
{
    CHECK_OR_RETURN(r->peak <= r->budget,
                    "run 2: peak in use %s passed the budget %s",
                    cli_bytes(r->peak), cli_bytes(r->budget));
    printf("\nrun 2: peak in use %s <= budget %s;\nmoved %s out (%s) and "
           "%s back in (%s)\n",
           cli_bytes(r->peak), cli_bytes(r->budget), cli_bytes(r->out_bytes),
           rate(r->out_bytes, r->out_s), cli_bytes(r->in_bytes),
           rate(r->in_bytes, r->in_s));
    if (demo_live_bytes(p) > r->budget)
        CHECK_OR_RETURN(r->spills > 0 && r->restores > 0,
                        "run 2: a live set of %s under a budget of %s, yet "
                        "%" PRIu64 " spills and %" PRIu64 " restores",
                        cli_bytes(demo_live_bytes(p)), cli_bytes(r->budget),
                        r->spills, r->restores);
    else
        printf("note: the budget holds the whole live set: nothing had to "
               "be spilled\n");
    return 0;
}

static int compare_runs(const demo_pipeline *p, const demo_run r[2])
{
    for (size_t k = 0; k <= p->steps; k++) {
        char name[32];
        if (k < p->steps)
            snprintf(name, sizeof name, "x[%zu]", k);
        else
            snprintf(name, sizeof name, "acc");
        CHECK_OR_RETURN(r[0].hash[k] == r[1].hash[k],
                        "bit-identical: no: %s differs (FNV-1a %016" PRIx64
                        " in run 1, %016" PRIx64 " in run 2)",
                        name, r[0].hash[k], r[1].hash[k]);
    }
    for (size_t k = p->steps; k-- > 0;) {
        double a, b;
        memcpy(&a, &r[0].sum_bits[k], sizeof a);
        memcpy(&b, &r[1].sum_bits[k], sizeof b);
        CHECK_OR_RETURN(r[0].sum_bits[k] == r[1].sum_bits[k],
                        "bit-identical: no: the checkpoint after x[%zu] "
                        "differs (%.17g in run 1, %.17g in run 2)",
                        k, a, b);
    }
    printf("bit-identical: yes (%zu arrays, %zu sums)\n", p->steps + 1,
           p->steps);
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
    printf("after freeing: in use 0 B, spilled 0 B, cached 0 B\n");
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

static int demo_runs(demo_pipeline *p, demo_run r[2])
{
    print_plan(p, r[1].budget);
    int err = demo_warm_up(p);
    if (err != SW_OK)
        return workload_failed(p, err);
    for (int i = 0; i < 2; i++) {
        if (i == 0)
            printf("\nrun 1: no budget, on a device that holds the live "
                   "set\n");
        else
            printf("run 2: budget %s\n", cli_bytes(r[1].budget));
        progress pg;
        progress_begin(&pg, p->dev, i + 1, 2 * p->steps);
        err = demo_run_pipeline(p, &r[i], on_step, &pg);
        if (err != SW_OK)
            return workload_failed(p, err); /* cmd_demo frees the arrays */
        progress_end_line();
        demo_free_arrays(p);
        /* Give everything back and let the device finish freeing it, so
         * that run 2 starts from the same empty device as run 1. */
        TRY_OR_RETURN(sw_empty_cache(p->dev));
        TRY_OR_RETURN(sw_device_synchronize(p->dev));
    }
    if (r[0].spills > 0)
        printf("note: run 1 spilled: the device could not hold the live "
               "set\n");
    print_table(p, r);
    if (check_budget_run(p, &r[1]) || compare_runs(p, r))
        return 1;
    return check_clean(p->dev);
}

int cmd_demo(const cli_command *self, int argc, char **argv)
{
    cli_options o = {.count = DEMO_STEPS_DEFAULT};
    int rc = cli_parse_options(self, argc, argv, "--steps", DEMO_STEPS_MIN,
                               DEMO_STEPS_MAX, &o);
    if (rc != 0 || o.help)
        return rc;
    sw_device *dev;
    if (cli_open_device(o.spec, &dev))
        return 1;
    demo_pipeline p;
    demo_run r[2];
    memset(&p, 0, sizeof p);
    memset(r, 0, sizeof r);
    rc = demo_setup(dev, o.count, o.budget, &p, r) || demo_runs(&p, r);

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
    if (rc == 0)
        printf("\ndemo finished: %s closed, every output bit-identical\n",
               sw_device_name(dev));
    fflush(stdout);
    return rc;
}
