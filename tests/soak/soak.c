/*
 * soak.c -- spillway under sustained load, for as long as asked.
 *
 *   spillway-soak [--duration 10m] [--device sim:0] [--threads 4]
 *                 [--seed N] [--epoch SECONDS] [--faults 1]
 *                 [--trace EVENTS]
 *
 * (or $DURATION, $SOAK_DEVICE, $SOAK_THREADS, $SOAK_SEED, $SOAK_FAULTS;
 * `make soak`.)
 *
 * Worker threads each run the fuzzer's model engine (tests/fuzz/model.h)
 * on a never-ending random stream: allocating, freeing, writing and
 * reading with every byte checked against a shadow, launching kernels on
 * the default queue and on queues they create and release with work on
 * them, copies, views, leases and wrapped buffers, host tasks, order
 * records, peak scopes, pressure callbacks that free buffers other threads
 * donated, budgets of their own; each checks its own objects after every
 * step.  Three shared read-only buffers are read and used as kernel
 * inputs by all of them.  The main thread moves the budget every few
 * hundred milliseconds, so that buffers spill and come back all the time.
 *
 * With --faults 1 the main thread also arms device faults (allocation,
 * copy, host allocation; one-shot or persistent) for a few tens of
 * milliseconds at a time, while the workers run: any call may then fail
 * for want of memory, and must have changed nothing when it does (spills
 * and restores failing under other threads' feet included).
 *
 * Every epoch (default 2 s) the workers pause between steps and the main
 * thread checks the device as a whole: in_use and spilled are exactly the
 * sums of every worker's live allocations and the shared buffers, and
 * live_buffers their number, peak >= in_use, peak_reserved >= in_use +
 * cached, counters are monotone, and the next allocation respects the
 * budget.  At the end every worker frees everything and the device must
 * be empty and close cleanly.
 *
 * It prints operations, checks, spills, restores, peak memory and errors
 * by kind, and exits non-zero on any divergence or leak.  The last line is
 * "soak: N passed, 0 failed" (N epochs checked), as a test suite's is.
 */
#include "../fuzz/model.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORKERS 16

static fz_world world;
static fz_engine *engines;
static uint64_t seeds[MAX_WORKERS];
static int nworkers = 4;

static atomic_int stop_req, pause_req;
static pthread_mutex_t bar_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t bar_cv = PTHREAD_COND_INITIALIZER;
static int paused;
static unsigned long generation;

static double t0;
static unsigned long epochs_ok;
static uint64_t peak_seen;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* "600", "90s", "10m", "1.5h". */
static double parse_duration(const char *s)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || v < 0)
        return -1;
    switch (*end) {
    case '\0': case 's': break;
    case 'm': v *= 60; break;
    case 'h': v *= 3600; break;
    default: return -1;
    }
    return v;
}

static void print_summary(const char *how)
{
    sw_memory_info m;
    memset(&m, 0, sizeof m);
    if (world.dev[0] != NULL)
        (void)sw_memory_info_get(world.dev[0], &m);
    char b1[32], b2[32], b3[32];
    fprintf(stderr,
            "soak %s on %s, %d threads, %.1f s: %" PRIu64 " operations, %"
            PRIu64 " checks, %lu epochs\n", how, world.spec[0], nworkers,
            now() - t0, (uint64_t)world.stats.steps,
            (uint64_t)world.stats.checks, epochs_ok);
    fprintf(stderr, "soak: spills %" PRIu64 " (%s), restores %" PRIu64
            " (%s), peak memory %s\n", m.spills,
            sw_format_bytes(m.spilled_bytes_total, b1, sizeof b1),
            m.restores, sw_format_bytes(m.restored_bytes_total, b2,
                                        sizeof b2),
            sw_format_bytes(peak_seen > (uint64_t)world.stats.peak
                                ? peak_seen
                                : (uint64_t)world.stats.peak,
                            b3, sizeof b3));
    fz_world_print_stats(&world, "soak", now() - t0);
}

/* The device's recent history (sw_trace_*), recorded all along with
 * --trace EVENTS (default 262144, 0: none) and written on a divergence to
 * $SOAK_TRACE_DIR (default .) as soak-trace-N.json, Chrome's format: the
 * diverging buffer's spills, restores, frees and cache traffic, by the id
 * the divergence report names.  Written on a thread of its own: a
 * divergence reported with the device lock held (inside a pressure
 * callback) would block the dump, which is then given up after 10 s. */
static size_t trace_events = 262144;
static atomic_int dump_done;

static void *dump_traces(void *arg)
{
    fz_world *w = arg;
    const char *dir = getenv("SOAK_TRACE_DIR");
    for (int d = 0; d < w->ndev; d++) {
        char path[512];
        snprintf(path, sizeof path, "%s/soak-trace-%d.json",
                 dir && *dir ? dir : ".", d);
        if (w->dev[d] != NULL &&
            sw_trace_dump(w->dev[d], path, "chrome") == SW_OK)
            fprintf(stderr, "soak: %s's last %zu events: %s\n", w->spec[d],
                    trace_events, path);
    }
    atomic_store(&dump_done, 1);
    return NULL;
}

static void on_fail(fz_world *w)
{
    pthread_t t;
    if (trace_events > 0 && pthread_create(&t, NULL, dump_traces, w) == 0) {
        pthread_detach(t);
        for (int i = 0; i < 1000 && !atomic_load(&dump_done); i++)
            usleep(10000);
    }
    print_summary("FAILED");
    fprintf(stderr, "soak: %lu passed, 1 failed\n", epochs_ok);
    fflush(stderr);
    _exit(1);
}

/* ------------------------------------------------------------------------
 * Workers and the epoch barrier
 * ---------------------------------------------------------------------- */

static void *worker(void *arg)
{
    fz_engine *e = arg;
    fz_src src;
    fz_src_prng(&src, seeds[e->index]);
    while (!atomic_load(&stop_req)) {
        if (atomic_load(&pause_req)) {
            pthread_mutex_lock(&bar_mu);
            unsigned long g = generation;
            paused++;
            pthread_cond_broadcast(&bar_cv);
            while (g == generation)
                pthread_cond_wait(&bar_cv, &bar_mu);
            paused--;
            pthread_mutex_unlock(&bar_mu);
            continue;
        }
        fz_engine_step(e, &src);
    }
    fz_engine_cleanup(e);
    return NULL;
}

static void pause_all(void)
{
    atomic_store(&pause_req, 1);
    pthread_mutex_lock(&bar_mu);
    /* A step never takes a minute: a worker that does not come is stuck
     * (a deadlock, a lost wake-up). */
    struct timespec limit;
    clock_gettime(CLOCK_REALTIME, &limit);
    limit.tv_sec += 60;
    while (paused < nworkers) {
        if (pthread_cond_timedwait(&bar_cv, &bar_mu, &limit) != 0 &&
            paused < nworkers) {
            pthread_mutex_unlock(&bar_mu);
            fz_fail(&world, NULL, "soak: %d of %d workers did not finish "
                    "their step within a minute (stuck?)", nworkers - paused,
                    nworkers);
        }
    }
    pthread_mutex_unlock(&bar_mu);
}

static void resume_all(void)
{
    pthread_mutex_lock(&bar_mu);
    atomic_store(&pause_req, 0);
    generation++;
    pthread_cond_broadcast(&bar_cv);
    pthread_mutex_unlock(&bar_mu);
}

/* ------------------------------------------------------------------------
 * The device as a whole, with every worker paused between steps
 * ---------------------------------------------------------------------- */

static sw_memory_info last;
static bool have_last;

static void epoch_check(void)
{
    sw_device *dev = world.dev[0];
    /* Donated handles no callback freed: their donors forgot them. */
    fz_world_drain_victims(&world);
    if (sw_device_synchronize(dev) != SW_OK)
        fz_fail(&world, NULL, "soak: synchronize at an epoch");
    uint64_t res = 0, sp = 0, bases = (uint64_t)world.nshared;
    for (int t = 0; t < nworkers; t++) {
        uint64_t r, s;
        fz_engine_footprint(&engines[t], 0, &r, &s, true);
        res += r;
        sp += s;
        for (int a = 0; a < FZ_NALLOC; a++)
            bases += engines[t].alloc[a].live &&
                     engines[t].alloc[a].shared < 0;
    }
    for (int k = 0; k < world.nshared; k++) {
        sw_buffer_state st;
        if (sw_buffer_state_get(world.shared[k].h, &st) != SW_OK)
            fz_fail(&world, NULL, "soak: a shared buffer's state");
        uint64_t r = (world.shared[k].size + SW_ALLOC_GRANULARITY - 1) /
                     SW_ALLOC_GRANULARITY * SW_ALLOC_GRANULARITY;
        if (st == SW_SPILLED)
            sp += r;
        else
            res += r;
    }
    sw_memory_info m;
    if (sw_memory_info_get(dev, &m) != SW_OK)
        fz_fail(&world, NULL, "soak: memory_info");
    if (m.in_use != res || m.spilled != sp)
        fz_fail(&world, NULL, "soak: in_use %" PRIu64 " spilled %" PRIu64
                "; the workers and shared buffers hold %" PRIu64 " and %"
                PRIu64, m.in_use, m.spilled, res, sp);
    if (m.live_buffers != bases)
        fz_fail(&world, NULL, "soak: live_buffers %" PRIu64 ", the workers "
                "and shared buffers have %" PRIu64, m.live_buffers, bases);
    if (m.peak < m.in_use || m.peak_reserved < m.in_use + m.cached ||
        m.host_pool > m.host_pool_limit)
        fz_fail(&world, NULL, "soak: peak < in_use, peak_reserved < in_use "
                "+ cached, or host_pool > its limit");
    if (have_last && (m.allocs < last.allocs || m.frees < last.frees ||
                      m.spills < last.spills || m.restores < last.restores ||
                      m.ooms < last.ooms || m.gc_runs < last.gc_runs ||
                      m.alloc_retries < last.alloc_retries))
        fz_fail(&world, NULL, "soak: a counter went down");
    if (m.peak > peak_seen)
        peak_seen = m.peak;
    /* The next allocation makes room under the budget (or fails because
     * what cannot move leaves none). */
    if (m.budget != 0) {
        sw_buffer *b = NULL;
        int rc = sw_buffer_alloc(dev, SW_ALLOC_GRANULARITY, "epoch", &b);
        if (rc == SW_OK) {
            sw_memory_info m2;
            (void)sw_memory_info_get(dev, &m2);
            if (m2.in_use + m2.cached > m2.budget)
                fz_fail(&world, NULL, "soak: after an allocation, in_use %"
                        PRIu64 " + cached %" PRIu64 " > budget %" PRIu64,
                        m2.in_use, m2.cached, m2.budget);
            sw_buffer_free(b);
        } else if (rc != SW_ERR_OOM) {
            fz_fail(&world, NULL, "soak: an allocation at an epoch: %s",
                    fz_err(rc));
        }
    }
    last = m;
    have_last = true;
    epochs_ok++;
}

/* ------------------------------------------------------------------------
 * main
 * ---------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    const char *dur = getenv("DURATION");
    const char *spec = getenv("SOAK_DEVICE");
    const char *thr = getenv("SOAK_THREADS");
    const char *seed_s = getenv("SOAK_SEED");
    const char *faults_s = getenv("SOAK_FAULTS");
    double epoch = 2.0;
    static const char usage[] =
        "usage: %s [--duration 10m] [--device sim:0] [--threads 4] "
        "[--seed N] [--epoch S] [--faults 1] [--trace EVENTS]\n";
    /* Every option takes a value: a lone or unknown one is a usage error
     * (a lone --help used to start a 60 s soak). */
    for (int i = 1; i < argc; i += 2) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf(usage, argv[0]);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "soak: %s needs a value\n", argv[i]);
            fprintf(stderr, usage, argv[0]);
            return 2;
        }
        if (strcmp(argv[i], "--duration") == 0)
            dur = argv[i + 1];
        else if (strcmp(argv[i], "--device") == 0)
            spec = argv[i + 1];
        else if (strcmp(argv[i], "--threads") == 0)
            thr = argv[i + 1];
        else if (strcmp(argv[i], "--seed") == 0)
            seed_s = argv[i + 1];
        else if (strcmp(argv[i], "--epoch") == 0)
            epoch = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--faults") == 0)
            faults_s = argv[i + 1];
        else if (strcmp(argv[i], "--trace") == 0)
            trace_events = (size_t)strtoull(argv[i + 1], NULL, 10);
        else {
            fprintf(stderr, usage, argv[0]);
            return 2;
        }
    }
    double seconds = parse_duration(dur && *dur ? dur : "60");
    if (seconds < 0) {
        fprintf(stderr, "soak: bad duration '%s' (600, 90s, 10m, 1h)\n",
                dur);
        return 2;
    }
    if (thr != NULL && *thr)
        nworkers = atoi(thr);
    if (nworkers < 1 || nworkers > MAX_WORKERS) {
        fprintf(stderr, "soak: 1 to %d threads\n", MAX_WORKERS);
        return 2;
    }
    uint64_t seed = seed_s && *seed_s ? strtoull(seed_s, NULL, 0)
                                      : (uint64_t)time(NULL);
    if (epoch < 0.1)
        epoch = 0.1;
    /* Memory that runs short without a budget too. */
    setenv("SPILLWAY_SIM_MEMORY", "32M", 0);
    setenv("FAKE_CUDA_MEMORY", "33554432", 0);
    if (fz_world_open(&world, spec && *spec ? spec : "sim:0", true) !=
        SW_OK)
        return 2;
    world.on_fail = on_fail;
    for (int d = 0; d < world.ndev && trace_events > 0; d++) {
        sw_trace_options topt = {.capacity = trace_events};
        if (sw_trace_start(world.dev[d], &topt) != SW_OK) {
            fprintf(stderr, "soak: tracing %s: %s\n", world.spec[d],
                    sw_last_error());
            return 2;
        }
    }
    bool faults = faults_s != NULL && atoi(faults_s) != 0;
    world.outside_faults = faults;
    t0 = now();
    fprintf(stderr, "soak: %s, %d threads, %.0f s, seed %" PRIu64 "%s\n",
            world.spec[0], nworkers, seconds, seed,
            faults ? ", with injected faults" : "");

    fz_src hdr;
    fz_src_prng(&hdr, seed);
    fz_world_make_shared(&world, &hdr);
    engines = calloc((size_t)nworkers, sizeof *engines);
    pthread_t th[MAX_WORKERS];
    for (int t = 0; t < nworkers; t++) {
        fz_engine_init(&engines[t], &world, t);
        seeds[t] = seed * 1000003u + (uint64_t)t;
        if (pthread_create(&th[t], NULL, worker, &engines[t]) != 0) {
            fprintf(stderr, "soak: cannot start a thread\n");
            return 2;
        }
    }

    /* The budget moves; every epoch the device is checked as a whole. */
    uint64_t rng = seed ^ UINT64_C(0xB0D6E7);
    double next_epoch = now() + epoch, next_report = now() + 30;
    static const uint64_t budgets[] = {0, 256u << 10, 1u << 20, 2u << 20,
                                       4u << 20, 8u << 20, 0, 512u << 10};
    while (now() - t0 < seconds) {
        usleep(200 * 1000);
        uint64_t b = budgets[fz_splitmix(&rng) % 8];
        if (sw_set_memory_budget(world.dev[0], b) != SW_OK)
            fz_fail(&world, NULL, "soak: setting the budget");
        if (faults && fz_splitmix(&rng) % 2 == 0) {
            /* A fault for a moment, under the workers' feet. */
            sw_fault_op op = (sw_fault_op)(fz_splitmix(&rng) % 3);
            uint64_t nth = 1 + fz_splitmix(&rng) % 20;
            int persistent = (int)(fz_splitmix(&rng) % 2);
            if (sw_inject_fault(world.dev[0], op, nth, persistent) != SW_OK)
                fz_fail(&world, NULL, "soak: arming a fault");
            atomic_fetch_add(&world.stats.faults_armed, 1);
            usleep((useconds_t)(10000 + fz_splitmix(&rng) % 40000));
            (void)sw_inject_fault(world.dev[0], op, 0, 0);
        }
        if (now() >= next_epoch) {
            pause_all();
            epoch_check();
            resume_all();
            next_epoch = now() + epoch;
        }
        if (now() >= next_report) {
            fprintf(stderr, "soak: %.0f s, %" PRIu64 " operations, %lu "
                    "epochs\n", now() - t0, (uint64_t)world.stats.steps,
                    epochs_ok);
            next_report = now() + 30;
        }
    }
    pause_all();
    epoch_check();
    atomic_store(&stop_req, 1);
    resume_all();
    for (int t = 0; t < nworkers; t++)
        pthread_join(th[t], NULL);

    /* Everything freed: the device must be empty and close. */
    fz_world_reset(&world);
    fz_world_free_shared(&world);
    print_summary("done");
    for (int t = 0; t < nworkers; t++)
        fz_engine_destroy(&engines[t]);
    free(engines);
    fz_world_close(&world, false);
    fprintf(stderr, "soak: %lu passed, 0 failed\n", epochs_ok);
    return 0;
}
