/*
 * test-host.c -- the host backend (host:0): the process's own memory,
 * accounting only (docs/host.md).
 *
 * These tests open host:0 themselves, so they run in every suite; the
 * whole C suite also runs on it (make's c-host suites), where the tests
 * that need spilling skip themselves (test_require_spill).
 *
 * Each test runs in a fresh process, so SPILLWAY_HOST_MEMORY set before
 * the first open is what the backend reads.
 */
#include "test.h"
#include "tests.h"

#include "backend/backend.h" /* SW__BACKEND_VERSION: props.no_spill */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KiB(n) ((uint64_t)(n) << 10)
#define MiB(n) ((uint64_t)(n) << 20)

/* /proc/meminfo's value for key, in bytes; 0 when absent. */
static uint64_t meminfo(const char *key)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f == NULL)
        return 0;
    char line[256];
    uint64_t v = 0;
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            v = (uint64_t)strtoull(line + klen + 1, NULL, 10) * 1024u;
            break;
        }
    }
    fclose(f);
    return v;
}

/* ------------------------------------------------------------------------
 * Listing and properties
 * ---------------------------------------------------------------------- */

TEST(host_device_listed)
{
    size_t count = 0, found = 0;
    ASSERT_OK(sw_device_count(&count));
    for (size_t i = 0; i < count; i++) {
        char spec[64];
        ASSERT_OK(sw_device_spec_at(i, spec, sizeof spec));
        found += strcmp(spec, "host:0") == 0;
    }
    ASSERT_UEQ(found, 1);
    int seen = 0;
    for (size_t i = 0; i < sw_backend_count(); i++) {
        const char *name = NULL;
        int n = -1;
        char why[256];
        ASSERT_OK(sw_backend_info(i, &name, &n, why, sizeof why));
        if (strcmp(name, "host") == 0) {
            seen = 1;
            ASSERT_EQ(n, 1);
            ASSERT_STR_EQ(why, "");
        }
    }
    ASSERT_TRUE(seen);

    sw_device *dev = test_open("host:0");
    ASSERT_PTR_EQ(test_open("host"), dev);
#if SW__BACKEND_VERSION >= 3
    ASSERT_STR_CONTAINS(sw_device_description(dev), "never spills");
#else
    ASSERT_STR_CONTAINS(sw_device_description(dev), "still spills");
#endif
    int yes = 0;
    ASSERT_OK(sw_device_host_addressable(dev, &yes));
    ASSERT_EQ(yes, 1);
    sw_device *other = (sw_device *)(uintptr_t)1;
    ASSERT_ERR(sw_device_open("host:1", &other), SW_ERR_NO_DEVICE);
    ASSERT_NULL(other);
    ASSERT_STR_CONTAINS(sw_last_error(), "host:1");
}

/* Without SPILLWAY_HOST_MEMORY the capacity is the host's, device_free
 * is what the kernel says is available, never invented. */
TEST(host_memory_figures)
{
    unsetenv("SPILLWAY_HOST_MEMORY");
    uint64_t total = meminfo("MemTotal");
    if (total == 0)
        SKIP("no /proc/meminfo here");
    sw_device *dev = test_open("host:0");
    sw_memory_info i = test_info(dev);
    ASSERT_UGT(i.device_total, 0);
    ASSERT_ULE(i.device_total, total); /* a cgroup may lower it */
    ASSERT_EQ(i.device_free_known, 1);
    ASSERT_UGT(i.device_free, 0);
    ASSERT_ULE(i.device_free, i.device_total);
    /* More than the kernel has available, though less than the total, is
     * refused rather than left to the OOM killer: SW_ERR_OOM, with the
     * report. */
    if (i.device_total - i.device_free < MiB(64))
        SKIP("nearly all of this host's memory is available: nothing "
             "between available and total to ask for");
    uint64_t ask = i.device_free + (i.device_total - i.device_free) / 2;
    sw_buffer *b = NULL;
    ASSERT_ERR(sw_buffer_alloc(dev, (size_t)ask, "too-much", &b), SW_ERR_OOM);
    ASSERT_NULL(b);
    ASSERT_STR_CONTAINS(sw_last_error(), "too-much");
    ASSERT_STR_CONTAINS(sw_last_error(), "available");
    ASSERT_UEQ(test_info(dev).in_use, 0);
}

TEST(host_memory_env)
{
    setenv("SPILLWAY_HOST_MEMORY", "1M", 1);
    sw_device *dev = test_open("host:0");
    sw_memory_info i = test_info(dev);
    ASSERT_UEQ(i.device_total, MiB(1));
    ASSERT_EQ(i.device_free_known, 1);
    ASSERT_ULE(i.device_free, MiB(1));
    ASSERT_STR_CONTAINS(sw_device_description(dev), "SPILLWAY_HOST_MEMORY");

    /* The capacity is enforced, as a device's (a is pinned, so that
     * nothing could move to make room, whatever the core's policy). */
    sw_buffer *a = test_alloc(dev, KiB(768), "a");
    test_pin(a);
    ASSERT_ULE(test_info(dev).device_free, KiB(256));
    sw_buffer *b = NULL;
    ASSERT_ERR(sw_buffer_alloc(dev, KiB(512), "b", &b), SW_ERR_OOM);
    ASSERT_NULL(b);
    ASSERT_MSG_BYTES(sw_last_error(), KiB(512));
    ASSERT_STR_CONTAINS(sw_last_error(), "'a'"); /* the largest live one */
    test_unpin_free(a);
    b = test_alloc(dev, KiB(512), "b");
    ASSERT_OK(sw_buffer_free(b));
}

TEST(host_memory_env_malformed)
{
    setenv("SPILLWAY_HOST_MEMORY", "lots", 1);
    sw_device *dev = NULL;
    ASSERT_ERR(sw_device_open("host:0", &dev), SW_ERR_INVALID_ARG);
    ASSERT_NULL(dev);
    ASSERT_STR_CONTAINS(sw_last_error(), "SPILLWAY_HOST_MEMORY='lots'");
    /* The other backends are unaffected. */
    sw_device *sim = test_open("sim:0");
    ASSERT_NOT_NULL(sim);
}

/* ------------------------------------------------------------------------
 * Accounting only: never a spill
 * ---------------------------------------------------------------------- */

#if SW__BACKEND_VERSION >= 3
/* Counts calls; frees *victim (once) when set. */
typedef struct pressure_log {
    int calls;
    sw_buffer *victim;
} pressure_log;

static int on_pressure(sw_device *dev, sw_pressure *p, size_t bytes,
                       void *user)
{
    (void)dev;
    (void)bytes;
    pressure_log *log = user;
    log->calls++;
    if (log->victim == NULL)
        return 0;
    sw_pressure_unlock(p);
    ASSERT_OK(sw_buffer_free(log->victim));
    sw_pressure_relock(p);
    sw_pressure_note_gc(p);
    log->victim = NULL;
    return 1;
}

/* Over budget: the pressure callbacks run, then the allocation fails;
 * nothing is ever spilled, and the message says why. */
TEST(host_budget_is_oom_not_spill)
{
    setenv("SPILLWAY_HOST_MEMORY", "64M", 1);
    sw_device *dev = test_open("host:0");
    pressure_log log = {0, NULL};
    int id = -1;
    ASSERT_OK(sw_add_pressure_callback(dev, on_pressure, &log, &id));
    ASSERT_OK(sw_set_memory_budget(dev, KiB(256)));
    sw_buffer *a = test_alloc(dev, KiB(128), "a");
    sw_buffer *b = test_alloc(dev, KiB(128), "b");
    test_write_pattern(a, 1);
    sw_buffer *c = NULL;
    ASSERT_ERR(sw_buffer_alloc(dev, KiB(128), "c", &c), SW_ERR_OOM);
    ASSERT_NULL(c);
    ASSERT_GE(log.calls, 1);
    ASSERT_STR_CONTAINS(sw_last_error(), "does not spill");
    sw_memory_info i = test_info(dev);
    ASSERT_UEQ(i.spilled, 0);
    ASSERT_UEQ(i.spills, 0);
    ASSERT_UEQ(i.in_use, KiB(256));
    ASSERT_UEQ(i.ooms, 1);
    sw_buffer_state st;
    ASSERT_OK(sw_buffer_state_get(a, &st));
    ASSERT_EQ(st, SW_RESIDENT);
    test_expect_pattern(a, 1);

    /* A callback that frees makes room: the garbage collector under
     * pressure, as Python's. */
    log.victim = b;
    int before = log.calls;
    c = test_alloc(dev, KiB(128), "c");
    ASSERT_EQ(log.calls, before + 1);
    i = test_info(dev);
    ASSERT_UEQ(i.gc_runs, 1);
    ASSERT_UEQ(i.spilled, 0);

    /* A budget below what is held moves nothing; the next allocation is
     * refused until room is made. */
    ASSERT_OK(sw_set_memory_budget(dev, KiB(128)));
    i = test_info(dev);
    ASSERT_UEQ(i.in_use, KiB(256));
    ASSERT_UEQ(i.spilled, 0);
    sw_buffer *d = NULL;
    ASSERT_ERR(sw_buffer_alloc(dev, 512, "d", &d), SW_ERR_OOM);
    ASSERT_OK(sw_remove_pressure_callback(dev, id));
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(c));
    ASSERT_OK(sw_set_memory_budget(dev, 0));
}

/* Past the capacity (no budget): the ladder runs (callbacks, waiting,
 * the cache) and ends in the report, never a spill. */
TEST(host_capacity_is_oom_not_spill)
{
    setenv("SPILLWAY_HOST_MEMORY", "1M", 1);
    sw_device *dev = test_open("host:0");
    pressure_log log = {0, NULL};
    int id = -1;
    ASSERT_OK(sw_add_pressure_callback(dev, on_pressure, &log, &id));
    sw_buffer *a = test_alloc(dev, KiB(640), "big");
    sw_buffer *b = NULL;
    ASSERT_ERR(sw_buffer_alloc(dev, KiB(512), "b", &b), SW_ERR_OOM);
    ASSERT_EQ(log.calls, 2); /* the first call, and the last chance */
    ASSERT_STR_CONTAINS(sw_last_error(), "'big'");
    sw_memory_info i = test_info(dev);
    ASSERT_UEQ(i.spilled, 0);
    ASSERT_UEQ(i.spills, 0);
    ASSERT_OK(sw_remove_pressure_callback(dev, id));
    ASSERT_OK(sw_buffer_free(a));
}
#else
TEST(host_budget_is_oom_not_spill)
{
    SKIP("needs backend contract version 3 (props.no_spill, the core side "
         "of issue 17); this build has version %d", SW__BACKEND_VERSION);
}

TEST(host_capacity_is_oom_not_spill)
{
    SKIP("needs backend contract version 3 (props.no_spill, the core side "
         "of issue 17); this build has version %d", SW__BACKEND_VERSION);
}
#endif

/* ------------------------------------------------------------------------
 * Work: on the CPU, at once
 * ---------------------------------------------------------------------- */

/* Device addresses are host addresses, and every kernel's result is the
 * host's arithmetic. */
TEST(host_kernels_on_the_cpu)
{
    sw_device *dev = test_open("host:0");
    enum { N = 1001 };
    sw_buffer *x = test_alloc(dev, N * 8, "x");
    sw_buffer *y = test_alloc(dev, N * 8, "y");
    sw_buffer *o = test_alloc(dev, N * 8, "o");

    double xs[N], ys[N], os[N];
    int64_t xi[N], yi[N], oi[N];
    for (int i = 0; i < N; i++) {
        xs[i] = (i % 17) * 0.25 - 2;
        ys[i] = (i % 5) * 0.5;
        xi[i] = (int64_t)i * 0x100000001ll - 7;
        yi[i] = INT64_MAX - i;
    }
    sw_scalar alpha = {.f = 1.5};
    ASSERT_OK(sw_buffer_write(x, 0, xs, sizeof xs));
    ASSERT_OK(sw_buffer_write(y, 0, ys, sizeof ys));
    ASSERT_OK(sw_op_add(o, x, y, SW_FLOAT64, N));
    ASSERT_OK(sw_buffer_read(o, 0, os, sizeof os));
    for (int i = 0; i < N; i++)
        ASSERT_DBL_EQ(os[i], xs[i] + ys[i]);
    ASSERT_OK(sw_op_axpy(alpha, x, y, SW_FLOAT64, N));
    ASSERT_OK(sw_buffer_read(y, 0, os, sizeof os));
    for (int i = 0; i < N; i++)
        ASSERT_DBL_EQ(os[i], 1.5 * xs[i] + ys[i]);
    sw_scalar s;
    ASSERT_OK(sw_op_sum(x, SW_FLOAT64, N, &s));
    double want = 0;
    for (int i = 0; i < N; i++)
        want += xs[i];
    ASSERT_DBL_EQ(s.f, want);

    /* Integers wrap. */
    ASSERT_OK(sw_buffer_write(x, 0, xi, sizeof xi));
    ASSERT_OK(sw_buffer_write(y, 0, yi, sizeof yi));
    ASSERT_OK(sw_op_add(o, x, y, SW_INT64, N));
    ASSERT_OK(sw_buffer_read(o, 0, oi, sizeof oi));
    for (int i = 0; i < N; i++)
        ASSERT_EQ(oi[i], (int64_t)((uint64_t)xi[i] + (uint64_t)yi[i]));
    sw_scalar three = {.i = 3};
    ASSERT_OK(sw_op_scale(o, x, three, SW_INT32, 2 * N));
    int32_t o32[2 * N], x32[2 * N];
    memcpy(x32, xi, sizeof x32);
    ASSERT_OK(sw_buffer_read(o, 0, o32, sizeof o32));
    for (int i = 0; i < 2 * N; i++)
        ASSERT_EQ(o32[i], (int32_t)(3u * (uint32_t)x32[i]));
    ASSERT_OK(sw_op_sum(x, SW_INT32, 2 * N, &s));
    uint64_t wi = 0;
    for (int i = 0; i < 2 * N; i++)
        wi += (uint64_t)(int64_t)x32[i];
    ASSERT_EQ(s.i, (int64_t)wi);

    /* The device pointer is the host's. */
    sw_devmem m;
    sw_lease *lease = NULL;
    ASSERT_OK(sw_buffer_expose(x, &m, &lease));
    ASSERT_MEM_EQ((const void *)(m.base + m.offset), xi, sizeof xi);
    ASSERT_OK(sw_lease_release(lease));

    ASSERT_OK(sw_buffer_free(x));
    ASSERT_OK(sw_buffer_free(y));
    ASSERT_OK(sw_buffer_free(o));
}

/* Queues and events work as everywhere: work is done when enqueued, so
 * every event is complete at once, and host tasks run. */
static void count_task(void *arg) { (*(int *)arg)++; }

TEST(thread_host_queues_and_events)
{
    sw_device *dev = test_open("host:0");
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    sw_buffer *a = test_alloc(dev, 4096, "a");
    sw_scalar v = {.f = 2.0};
    ASSERT_OK(sw_op_fill_q(q, a, SW_FLOAT32, 1024, v));
    sw_event *ev = NULL;
    ASSERT_OK(sw_queue_record_event(q, &ev));
    int done = 0;
    ASSERT_OK(sw_event_query(ev, &done));
    ASSERT_EQ(done, 1);
    ASSERT_OK(sw_event_wait(ev));
    ASSERT_OK(sw_event_release(ev));
    int ran = 0;
    sw_event *task = NULL;
    ASSERT_OK(sw_queue_host_task(q, count_task, &ran, &task));
    ASSERT_OK(sw_event_wait(task));
    ASSERT_OK(sw_event_release(task));
    ASSERT_EQ(ran, 1);
    float f[1024];
    ASSERT_OK(sw_buffer_read(a, 0, f, sizeof f));
    for (int i = 0; i < 1024; i++)
        ASSERT_DBL_EQ(f[i], 2.0);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_queue_release(q));
}
