/*
 * test-device.c -- the device registry: listing, opening (by spec, default,
 * $SPILLWAY_DEVICE), reference counting, closing with live buffers, and the
 * simulated device's environment ($SPILLWAY_SIM_MEMORY,
 * $SPILLWAY_SIM_DEVICES).
 *
 * The library reads the environment when the process first opens a device.
 * Each test runs in a fresh child of the runner (which never opens one), so
 * a test may set variables first thing; tests that need several values fork
 * one grandchild per value.
 */
#include "test.h"
#include "tests.h"

#include <sys/wait.h>
#include <unistd.h>

/* Does the device list contain spec? */
static int listed(const char *spec)
{
    size_t count = 0;
    ASSERT_OK(sw_device_count(&count));
    for (size_t i = 0; i < count; i++) {
        char buf[64];
        ASSERT_OK(sw_device_spec_at(i, buf, sizeof buf));
        if (strcmp(buf, spec) == 0)
            return 1;
    }
    return 0;
}

TEST(device_count_and_specs)
{
    size_t count = 0;
    ASSERT_OK(sw_device_count(&count));
    ASSERT_GE(count, 1); /* the simulated device is always there */
    int have_sim0 = 0;
    for (size_t i = 0; i < count; i++) {
        char buf[64];
        memset(buf, 'x', sizeof buf);
        ASSERT_OK(sw_device_spec_at(i, buf, sizeof buf));
        ASSERT_TRUE(memchr(buf, '\0', sizeof buf) != NULL);
        ASSERT_TRUE(strchr(buf, ':') != NULL);
        ASSERT_TRUE(buf[0] != ':');
        if (strcmp(buf, "sim:0") == 0)
            have_sim0 = 1;
        /* Listed specs are distinct. */
        for (size_t j = 0; j < i; j++) {
            char other[64];
            ASSERT_OK(sw_device_spec_at(j, other, sizeof other));
            ASSERT_TRUE(strcmp(buf, other) != 0);
        }
        /* A listed sim device opens, under its own name. */
        if (strncmp(buf, "sim:", 4) == 0) {
            sw_device *dev = test_open(buf);
            ASSERT_STR_EQ(sw_device_name(dev), buf);
        }
    }
    ASSERT_TRUE(have_sim0);

    /* Past the end: SW_ERR_NO_DEVICE, the buffer emptied. */
    char buf[16] = "untouched";
    ASSERT_ERR(sw_device_spec_at(count, buf, sizeof buf), SW_ERR_NO_DEVICE);
    ASSERT_STR_EQ(buf, "");
    ASSERT_ERR(sw_device_spec_at((size_t)-1, buf, sizeof buf),
               SW_ERR_NO_DEVICE);

    /* Too small a buffer: SW_ERR_INVALID_ARG ("sim:0" needs 6 bytes). */
    size_t sim0 = count;
    for (size_t i = 0; i < count; i++) {
        char tmp[64];
        ASSERT_OK(sw_device_spec_at(i, tmp, sizeof tmp));
        if (strcmp(tmp, "sim:0") == 0)
            sim0 = i;
    }
    ASSERT_LT(sim0, count);
    char small[6];
    memset(small, 'x', sizeof small);
    ASSERT_ERR(sw_device_spec_at(sim0, small, 5), SW_ERR_INVALID_ARG);
    ASSERT_OK(sw_device_spec_at(sim0, small, 6));
    ASSERT_STR_EQ(small, "sim:0");
    ASSERT_ERR(sw_device_spec_at(sim0, small, 0), SW_ERR_INVALID_ARG);
}

TEST(device_open_refcount)
{
    const char *spec = test_device_spec();

    /* The same spec yields the same handle, also after the last close
     * (handles live as long as the process). */
    sw_device *first = NULL;
    ASSERT_OK(sw_device_open(spec, &first));
    ASSERT_NOT_NULL(first);
    sw_memory_info fresh = test_info_synced(first);
    /* Leave something in the cache, and a budget. */
    sw_buffer *tmp = test_alloc(first, 1 << 20, "cached-at-close");
    ASSERT_OK(sw_buffer_free(tmp));
    ASSERT_OK(sw_set_memory_budget(first, 1 << 30));
    ASSERT_UEQ(test_info_synced(first).cached, 1 << 20);
    ASSERT_OK(sw_device_close(first));
    sw_device *again = NULL;
    ASSERT_OK(sw_device_open(spec, &again));
    ASSERT_PTR_EQ(again, first);
    /* The last close released everything: the reopened device starts
     * afresh, its cache given back to the device. */
    sw_memory_info re = test_info_synced(again);
    ASSERT_UEQ(re.in_use, 0);
    ASSERT_UEQ(re.cached, 0);
    ASSERT_UEQ(re.allocs, 0);
    ASSERT_UEQ(re.frees, 0);
    ASSERT_UEQ(re.peak, 0);
    ASSERT_UEQ(re.budget, 0);
    ASSERT_UEQ(re.device_total, fresh.device_total);
    if (test_is_sim())
        ASSERT_UEQ(re.device_free, fresh.device_free);
    /* Reopened after a full close, it works. */
    sw_buffer *b = test_alloc(again, 1000, "reopen");
    test_write_pattern(b, 9);
    test_expect_pattern(b, 9);
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_device_close(again));

    sw_device *d1 = test_device();
    sw_device *d2 = test_device();
    ASSERT_PTR_EQ(d1, d2);
    ASSERT_PTR_EQ(d1, first);

    /* Extra references come and go while a buffer is live. */
    sw_buffer *live = test_alloc(d1, 4096, "live");
    test_write_pattern(live, 21);
    for (int i = 0; i < 5; i++) {
        sw_device *d = NULL;
        ASSERT_OK(sw_device_open(spec, &d));
        ASSERT_PTR_EQ(d, d1);
        ASSERT_OK(sw_device_close(d));
    }
    test_expect_pattern(live, 21);
    ASSERT_OK(sw_buffer_free(live));
}

static int reopen_calls;
static int reopen_cb(sw_device *dev, sw_pressure *p, size_t bytes, void *user)
{
    (void)dev, (void)p, (void)bytes, (void)user;
    reopen_calls++;
    return 0;
}

/* Nothing of one opening outlives it: counters, budget, callbacks, an
 * armed fault, the memory history, the host pool.  (The device keeps
 * each opening's state in one block zeroed at the next opening; a field
 * once reset by hand and forgotten, the timeline's, let spills copy too
 * early after a reopening: spill_after_reopen_waits_for_queued_work.) */
TEST(device_reopen_forgets_the_last_opening)
{
    test_require_spill();
    const char *spec = test_device_spec();
    sw_device *dev = NULL;
    ASSERT_OK(sw_device_open(spec, &dev));
    int id = -1;
    ASSERT_OK(sw_add_pressure_callback(dev, reopen_cb, NULL, &id));
    ASSERT_OK(sw_set_memory_budget(dev, 2u << 20));
    sw_buffer *b[4];
    for (int i = 0; i < 4; i++) {
        b[i] = test_alloc(dev, 1u << 20, "first-opening");
        test_write_pattern(b[i], 30 + (uint32_t)i);
    }
    for (int i = 0; i < 4; i++) { /* device use: spilled ones come back */
        test_pin(b[i]);
        test_unpin(b[i]);
        test_expect_pattern(b[i], 30 + (uint32_t)i);
    }
    ASSERT_OK(sw_trace_start(dev, NULL));
    for (int i = 0; i < 4; i++)
        ASSERT_OK(sw_buffer_free(b[i]));
    sw_memory_info before = test_info_synced(dev);
    ASSERT_TRUE(before.spills > 0);
    ASSERT_TRUE(before.restores > 0);
    ASSERT_TRUE(before.host_pool > 0);
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_ALLOC, 1, 1));
    ASSERT_OK(sw_device_close(dev));

    sw_device *again = NULL;
    ASSERT_OK(sw_device_open(spec, &again));
    ASSERT_PTR_EQ(again, dev);
    sw_memory_info re = test_info_synced(again);
    ASSERT_UEQ(re.in_use, 0);
    ASSERT_UEQ(re.cached, 0);
    ASSERT_UEQ(re.spilled, 0);
    ASSERT_UEQ(re.budget, 0);
    ASSERT_UEQ(re.allocs, 0);
    ASSERT_UEQ(re.frees, 0);
    ASSERT_UEQ(re.spills, 0);
    ASSERT_UEQ(re.restores, 0);
    ASSERT_UEQ(re.spilled_bytes_total, 0);
    ASSERT_UEQ(re.restored_bytes_total, 0);
    ASSERT_TRUE(re.spill_seconds == 0 && re.restore_seconds == 0);
    ASSERT_UEQ(re.alloc_retries, 0);
    ASSERT_UEQ(re.ooms, 0);
    ASSERT_UEQ(re.gc_runs, 0);
    ASSERT_UEQ(re.peak, 0);
    ASSERT_UEQ(re.peak_reserved, 0);
    ASSERT_UEQ(re.live_buffers, 0);
    ASSERT_UEQ(re.host_pool, 0);
    /* No history is being recorded: never started in this opening. */
    ASSERT_ERR(sw_trace_stop(again), SW_ERR_INVALID_ARG);
    /* The persistent fault is gone: allocations succeed. */
    sw_buffer *c = test_alloc(again, 1u << 20, "second-opening");
    test_write_pattern(c, 40);
    /* The callback is gone: an allocation that fails once (injected)
     * goes down the ladder without calling it, and succeeds on retry. */
    ASSERT_OK(sw_inject_fault(again, SW_FAULT_ALLOC, 1, 0));
    sw_buffer *d = test_alloc(again, 1u << 20, "after-fault");
    ASSERT_UEQ(reopen_calls, 0);
    ASSERT_TRUE(test_info(again).alloc_retries > 0);
    test_expect_pattern(c, 40);
    ASSERT_OK(sw_buffer_free(c));
    ASSERT_OK(sw_buffer_free(d));
    ASSERT_ERR(sw_remove_pressure_callback(again, id), SW_ERR_INVALID_ARG);
    ASSERT_OK(sw_device_close(again));
}

TEST(device_open_default)
{
    test_require_sim();
    unsetenv("SPILLWAY_DEVICE");
    unsetenv("SPILLWAY_SIM_DEVICES");
    sw_device *sim0 = test_open("sim:0");
    sw_device *dflt = test_open(NULL);
    ASSERT_PTR_EQ(dflt, sim0);
    ASSERT_STR_EQ(sw_device_name(dflt), "sim:0");
    sw_device *empty = test_open("");
    ASSERT_PTR_EQ(empty, sim0);
}

static int open_default_fails(void *arg)
{
    (void)arg;
    setenv("SPILLWAY_DEVICE", "bogus:3", 1);
    sw_device *dev = (sw_device *)(uintptr_t)1;
    int rc = sw_device_open(NULL, &dev);
    if (rc != SW_ERR_NO_DEVICE) {
        fprintf(stderr, "open(NULL) with SPILLWAY_DEVICE=bogus:3 -> %s: %s\n",
                sw_err_name(rc), sw_last_error());
        return 1;
    }
    if (dev != NULL) {
        fprintf(stderr, "out-parameter not NULL after failure\n");
        return 2;
    }
    if (strstr(sw_last_error(), "bogus") == NULL) {
        fprintf(stderr, "message does not name the spec: %s\n",
                sw_last_error());
        return 3;
    }
    return 0;
}

TEST(device_open_default_env)
{
    test_require_sim();
    /* With a bad $SPILLWAY_DEVICE the default open fails, naming it. */
    char err[2048];
    int st = test_fork_run(open_default_fails, NULL, err, sizeof err);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        FAIL("child (SPILLWAY_DEVICE=bogus:3) status %#x: %s", st, err);

    setenv("SPILLWAY_SIM_DEVICES", "2", 1);
    setenv("SPILLWAY_DEVICE", "sim:1", 1);
    sw_device *dflt = test_open(NULL);
    ASSERT_STR_EQ(sw_device_name(dflt), "sim:1");
    sw_device *sim1 = test_open("sim:1");
    ASSERT_PTR_EQ(dflt, sim1);
    sw_device *sim0 = test_open("sim:0");
    ASSERT_PTR_NE(sim0, sim1);
}

TEST(device_bad_specs)
{
    /* Well-formed specs of devices that do not exist. */
    const char *absent[] = {"bogus:0", "sim:99", "nosuchbackend:1"};
    for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++) {
        sw_device *dev = (sw_device *)(uintptr_t)1;
        ASSERT_ERR(sw_device_open(absent[i], &dev), SW_ERR_NO_DEVICE);
        ASSERT_NULL(dev);
        ASSERT_STR_CONTAINS(sw_last_error(), absent[i]);
    }
    /* Malformed specs: either code is a fair answer, but an answer. */
    const char *malformed[] = {"sim:-1",  "sim:",    "sim:0x", "sim:0.0",
                               ":0",      "sim:0:0", " sim:0", "sim:1a",
                               "sim:0 ",  "sim::0",  ":",      "sim:+0",
                               "sim:99999999999999999999999"};
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        sw_device *dev = (sw_device *)(uintptr_t)1;
        int rc = sw_device_open(malformed[i], &dev);
        if (rc != SW_ERR_INVALID_ARG && rc != SW_ERR_NO_DEVICE)
            FAIL("sw_device_open(\"%s\") -> %s (%d), expected "
                 "SW_ERR_INVALID_ARG or SW_ERR_NO_DEVICE: %s",
                 malformed[i], sw_err_name(rc), rc, sw_last_error());
        ASSERT_NULL(dev);
        ASSERT_TRUE(sw_last_error()[0] != '\0');
    }
    /* The registry still works. */
    sw_device *dev = test_open("sim:0");
    ASSERT_STR_EQ(sw_device_name(dev), "sim:0");
}

TEST(device_close_busy)
{
    sw_device *dev = test_device();
    sw_buffer *b = test_alloc(dev, 1000, "keeps-device-busy");
    test_write_pattern(b, 4);

    /* Not the last reference: closing it is fine. */
    sw_device *extra = NULL;
    ASSERT_OK(sw_device_open(test_device_spec(), &extra));
    ASSERT_OK(sw_device_close(extra));

    /* The last reference with a live buffer: BUSY, and the reference is
     * kept (so BUSY again). */
    ASSERT_ERR(sw_device_close(dev), SW_ERR_BUSY);
    ASSERT_ERR(sw_device_close(dev), SW_ERR_BUSY);

    /* The device still works. */
    test_expect_pattern(b, 4);
    sw_buffer *c = test_alloc(dev, 2048, "after-busy");
    test_write_pattern(c, 5);
    test_expect_pattern(c, 5);
    sw_memory_info info = test_info(dev);
    ASSERT_UEQ(info.in_use, 1024 + 2048);
    ASSERT_OK(sw_buffer_free(c));
    ASSERT_OK(sw_buffer_free(b));
    /* The runner closes the reference: it must now succeed. */
}

TEST(device_closed_handle)
{
    const char *spec = test_device_spec();
    sw_device *dev = NULL;
    ASSERT_OK(sw_device_open(spec, &dev));
    ASSERT_OK(sw_device_close(dev));
    /* Every open was matched: the handle is closed.  Using it, or closing
     * it once more, is refused and does not drive the count negative. */
    ASSERT_ERR(sw_device_close(dev), SW_ERR_INVALID_HANDLE);
    sw_memory_info info;
    ASSERT_ERR(sw_memory_info_get(dev, &info), SW_ERR_INVALID_HANDLE);
    sw_buffer *b = (sw_buffer *)(uintptr_t)1;
    ASSERT_ERR(sw_buffer_alloc(dev, 64, "closed", &b), SW_ERR_INVALID_HANDLE);
    ASSERT_NULL(b);
    ASSERT_ERR(sw_device_synchronize(dev), SW_ERR_INVALID_HANDLE);

    /* Reopened, it holds exactly one reference again: closing it with a
     * live buffer is BUSY. */
    sw_device *again = test_device();
    ASSERT_PTR_EQ(again, dev);
    b = test_alloc(again, 64, "live");
    ASSERT_ERR(sw_device_close(again), SW_ERR_BUSY);
    ASSERT_OK(sw_buffer_free(b));
}

TEST(device_name_description)
{
    sw_device *dev = test_device();
    ASSERT_STR_EQ(sw_device_name(dev), test_device_spec());
    const char *desc = sw_device_description(dev);
    ASSERT_NOT_NULL(desc);
    ASSERT_TRUE(desc[0] != '\0');
    sw_buffer *b = test_alloc(dev, 16, NULL);
    sw_device *owner = NULL;
    ASSERT_OK(sw_buffer_device(b, &owner));
    ASSERT_PTR_EQ(owner, dev);
    ASSERT_OK(sw_buffer_free(b));
}

/* ------------------------------------------------------------------------
 * $SPILLWAY_SIM_MEMORY and $SPILLWAY_SIM_DEVICES
 * ---------------------------------------------------------------------- */

typedef struct {
    const char *value;
    uint64_t expect;
    int fill; /* also allocate all of it (small sizes only: cheap) */
} sim_memory_case;

static int check_sim_memory(void *arg)
{
    const sim_memory_case *c = arg;
    setenv("SPILLWAY_SIM_MEMORY", c->value, 1);
    unsetenv("SPILLWAY_SIM_DEVICES");
    sw_device *dev = NULL;
    int rc = sw_device_open("sim:0", &dev);
    if (rc != SW_OK) {
        fprintf(stderr, "SPILLWAY_SIM_MEMORY=%s: open -> %s: %s\n",
                c->value, sw_err_name(rc), sw_last_error());
        return 1;
    }
    sw_memory_info info;
    rc = sw_memory_info_get(dev, &info);
    if (rc != SW_OK) {
        fprintf(stderr, "memory_info -> %s\n", sw_err_name(rc));
        return 1;
    }
    if (info.device_total != c->expect) {
        fprintf(stderr,
                "SPILLWAY_SIM_MEMORY=%s: device_total %" PRIu64
                ", expected %" PRIu64 "\n",
                c->value, info.device_total, c->expect);
        return 1;
    }
    /* A fresh device is free but for what the library keeps for itself
     * (at most TEST_SIM_RESERVED bytes). */
    if (!info.device_free_known || info.device_free > c->expect ||
        info.device_free + TEST_SIM_RESERVED < c->expect) {
        fprintf(stderr,
                "SPILLWAY_SIM_MEMORY=%s: fresh device_free %" PRIu64
                " (known %d), expected %" PRIu64 "\n",
                c->value, info.device_free, info.device_free_known,
                c->expect);
        return 1;
    }
    if (!c->fill)
        return sw_device_close(dev) == SW_OK ? 0 : 1;
    /* All that is free can be allocated at once; one granule more cannot. */
    sw_buffer *b = NULL;
    rc = sw_buffer_alloc(dev, (size_t)info.device_free, "all", &b);
    if (rc != SW_OK) {
        fprintf(stderr, "alloc of all %" PRIu64 " free bytes -> %s: %s\n",
                info.device_free, sw_err_name(rc), sw_last_error());
        return 1;
    }
    test_pin(b); /* so that room cannot be made by spilling it */
    sw_buffer *more = NULL;
    rc = sw_buffer_alloc(dev, 512, "more", &more);
    if (rc != SW_ERR_OOM) {
        fprintf(stderr, "alloc on a full device -> %s, expected OOM\n",
                sw_err_name(rc));
        return 1;
    }
    test_unpin(b);
    if (sw_buffer_free(b) != SW_OK || sw_device_close(dev) != SW_OK) {
        fprintf(stderr, "free/close failed: %s\n", sw_last_error());
        return 1;
    }
    return 0;
}

TEST(sim_memory_env)
{
    test_require_sim();
    static const sim_memory_case cases[] = {
        {"64M", 64ull << 20, 1},
        {"512M", 512ull << 20, 0},
        {"2G", 2ull << 30, 0},
        {"65536K", 64ull << 20, 0},
        {"33554432", 32ull << 20, 1},
        {"1G", 1ull << 30, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[2048];
        int st = test_fork_run(check_sim_memory, (void *)&cases[i], err,
                               sizeof err);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            FAIL("SPILLWAY_SIM_MEMORY=%s: child status %#x: %s",
                 cases[i].value, st, err);
    }
}

static int check_sim_memory_malformed(void *arg)
{
    const char *value = arg;
    setenv("SPILLWAY_SIM_MEMORY", value, 1);
    unsetenv("SPILLWAY_SIM_DEVICES");
    sw_device *dev = (sw_device *)(uintptr_t)1;
    int rc = sw_device_open("sim:0", &dev);
    if (rc == SW_OK) {
        fprintf(stderr, "SPILLWAY_SIM_MEMORY=%s: open succeeded\n", value);
        return 1;
    }
    if (dev != NULL) {
        fprintf(stderr, "out-parameter not NULL after failure\n");
        return 1;
    }
    const char *msg = sw_last_error();
    if (strstr(msg, "SPILLWAY_SIM_MEMORY") == NULL ||
        strstr(msg, value) == NULL) {
        fprintf(stderr,
                "SPILLWAY_SIM_MEMORY=%s -> %s, but the message does not "
                "name the variable and its value: \"%s\"\n",
                value, sw_err_name(rc), msg);
        return 1;
    }
    return 0;
}

TEST(sim_memory_env_malformed)
{
    test_require_sim();
    static const char *values[] = {"64X", "abc", "-64M", "12M3", "M",
                                   "64MM", "99999999999999999999G",
                                   "0x40M"};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        char err[2048];
        int st = test_fork_run(check_sim_memory_malformed,
                               (void *)values[i], err, sizeof err);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            FAIL("SPILLWAY_SIM_MEMORY=%s: child status %#x: %s", values[i],
                 st, err);
    }
}

static int check_sim_devices_malformed(void *arg)
{
    const char *value = arg;
    setenv("SPILLWAY_SIM_DEVICES", value, 1);
    unsetenv("SPILLWAY_SIM_MEMORY");
    sw_device *dev = (sw_device *)(uintptr_t)1;
    int rc = sw_device_open("sim:0", &dev);
    if (rc == SW_OK) {
        fprintf(stderr, "SPILLWAY_SIM_DEVICES=%s: open succeeded\n", value);
        return 1;
    }
    if (dev != NULL) {
        fprintf(stderr, "out-parameter not NULL after failure\n");
        return 1;
    }
    if (strstr(sw_last_error(), "SPILLWAY_SIM_DEVICES") == NULL) {
        fprintf(stderr, "SPILLWAY_SIM_DEVICES=%s -> %s: \"%s\" does not "
                "name the variable\n", value, sw_err_name(rc),
                sw_last_error());
        return 1;
    }
    return 0;
}

TEST(sim_devices_env_malformed)
{
    test_require_sim();
    static const char *values[] = {"x", "-1", "2x", "1.5", "99999999999999"};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        char err[2048];
        int st = test_fork_run(check_sim_devices_malformed,
                               (void *)values[i], err, sizeof err);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            FAIL("SPILLWAY_SIM_DEVICES=%s: child status %#x: %s", values[i],
                 st, err);
    }
}

TEST(sim_devices_env)
{
    test_require_sim();
    setenv("SPILLWAY_SIM_DEVICES", "3", 1);
    ASSERT_TRUE(listed("sim:0"));
    ASSERT_TRUE(listed("sim:1"));
    ASSERT_TRUE(listed("sim:2"));
    ASSERT_FALSE(listed("sim:3"));
    sw_device *devs[3];
    for (int i = 0; i < 3; i++) {
        char spec[16];
        snprintf(spec, sizeof spec, "sim:%d", i);
        devs[i] = test_open(spec);
        ASSERT_STR_EQ(sw_device_name(devs[i]), spec);
        for (int j = 0; j < i; j++)
            ASSERT_PTR_NE(devs[i], devs[j]);
    }
    sw_device *none = (sw_device *)(uintptr_t)1;
    ASSERT_ERR(sw_device_open("sim:3", &none), SW_ERR_NO_DEVICE);
    ASSERT_NULL(none);
}

TEST(sim_devices_separate_accounting)
{
    test_require_sim();
    setenv("SPILLWAY_SIM_DEVICES", "2", 1);
    sw_device *d0 = test_open("sim:0");
    sw_device *d1 = test_open("sim:1");
    ASSERT_PTR_NE(d0, d1);
    sw_memory_info i0 = test_info_synced(d0);
    sw_memory_info i1 = test_info_synced(d1);

    sw_buffer *b1 = test_alloc(d1, 100000, "on-sim1");
    sw_buffer *b0 = test_alloc(d0, 1000, "on-sim0");
    test_write_pattern(b1, 1);
    test_write_pattern(b0, 0);
    sw_device *owner = NULL;
    ASSERT_OK(sw_buffer_device(b1, &owner));
    ASSERT_PTR_EQ(owner, d1);

    sw_memory_info j0 = test_info_synced(d0);
    sw_memory_info j1 = test_info_synced(d1);
    ASSERT_UEQ(j0.in_use, i0.in_use + 1024);
    ASSERT_UEQ(j1.in_use, i1.in_use + test_round(100000));
    ASSERT_UEQ(j0.allocs, i0.allocs + 1);
    ASSERT_UEQ(j1.allocs, i1.allocs + 1);
    ASSERT_UEQ(j0.device_free, i0.device_free - 1024);
    ASSERT_UEQ(j1.device_free, i1.device_free - test_round(100000));
    test_expect_pattern(b1, 1);
    test_expect_pattern(b0, 0);

    /* The budget is per device too. */
    ASSERT_OK(sw_set_memory_budget(d1, 1 << 20));
    uint64_t b = 7;
    ASSERT_OK(sw_get_memory_budget(d0, &b));
    ASSERT_UEQ(b, 0);
    ASSERT_OK(sw_set_memory_budget(d1, 0));

    ASSERT_OK(sw_buffer_free(b1));
    ASSERT_OK(sw_buffer_free(b0));
}

TEST(backend_info)
{
    size_t nb = sw_backend_count();
    ASSERT_UGE(nb, 1);
    int saw_sim = 0, total = 0;
    for (size_t i = 0; i < nb; i++) {
        const char *name = NULL;
        int n = -1;
        char why[256];
        ASSERT_OK(sw_backend_info(i, &name, &n, why, sizeof why));
        ASSERT_NOT_NULL(name);
        ASSERT_GE(n, 0);
        /* A backend without devices says why; one with devices does not. */
        if (n == 0)
            ASSERT_TRUE(why[0] != '\0');
        else
            ASSERT_STR_EQ(why, "");
        saw_sim |= strcmp(name, "sim") == 0 && n >= 1;
        total += n;
    }
    ASSERT_TRUE(saw_sim);
    size_t count = 0;
    ASSERT_OK(sw_device_count(&count));
    ASSERT_UEQ(count, (size_t)total);
    const char *name = "x";
    int n = 5;
    ASSERT_ERR(sw_backend_info(nb, &name, &n, NULL, 0), SW_ERR_INVALID_ARG);
    ASSERT_NULL(name);
    ASSERT_EQ(n, 0);
}
