/*
 * test-spill.c -- spilling: LRU order, host access to spilled buffers,
 * launches and pins, leases and external memory, faults during spills and
 * restores, pressure callbacks, and a randomized model-based test.
 */
#include "test.h"
#include "tests.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define S (64u * 1024u) /* one buffer of the tests below */

static sw_buffer_state state_of(sw_buffer *b)
{
    sw_buffer_state st;
    ASSERT_OK(sw_buffer_state_get(b, &st));
    return st;
}

/* Bring a buffer back to the device, as a launch would. */
static void touch_device(sw_buffer *b)
{
    sw_devmem m;
    ASSERT_OK(sw_buffer_device_ptr(b, &m));
}

static sw_buffer *alloc_pattern(sw_device *dev, size_t size, uint32_t seed,
                                const char *tag)
{
    sw_buffer *b = test_alloc(dev, size, tag);
    test_write_pattern(b, seed);
    return b;
}

/* spill_seconds and restore_seconds are the copies' time: more than
 * nothing once copies ran, and never more than the wall time they ran in
 * (a backend that times them on the device, as the sim and OpenCL's
 * profiled copy queue do, reading its timestamps in the wrong unit would
 * be off by 10^3 or more). */
TEST(spill_seconds_within_wall_time)
{
    test_require_spill();
    enum { N = 8 };
    const size_t big = (size_t)1 << 20;
    sw_device *dev = test_device();
    ASSERT_OK(sw_reset_counters(dev));
    double t0 = test_now();
    ASSERT_OK(sw_set_memory_budget(dev, 4 * big));
    sw_buffer *b[N];
    for (int i = 0; i < N; i++)
        b[i] = alloc_pattern(dev, big, 700u + (uint32_t)i, "timed");
    for (int i = 0; i < N; i++)
        touch_device(b[i]); /* restores the spilled, spills others */
    for (int i = 0; i < N; i++)
        test_expect_pattern(b[i], 700u + (uint32_t)i);
    ASSERT_OK(sw_device_synchronize(dev));
    sw_memory_info m = test_info(dev); /* notices the copies' ends */
    double wall = test_now() - t0;
    ASSERT_UGT(m.spills, 0);
    ASSERT_UGT(m.restores, 0);
    ASSERT_TRUE(m.spill_seconds > 0 && m.spill_seconds <= wall);
    ASSERT_TRUE(m.restore_seconds > 0 && m.restore_seconds <= wall);
    for (int i = 0; i < N; i++)
        ASSERT_OK(sw_buffer_free(b[i]));
    ASSERT_OK(sw_set_memory_budget(dev, 0));
}

TEST(spill_lru_order)
{
    test_require_spill();
    sw_device *dev = test_device();
    ASSERT_OK(sw_set_memory_budget(dev, 4 * S));
    sw_buffer *b[6];
    for (int i = 0; i < 4; i++)
        b[i] = alloc_pattern(dev, S, 100u + (uint32_t)i, "lru");
    /* Touch the oldest: the next spill takes the second oldest. */
    touch_device(b[0]);
    b[4] = alloc_pattern(dev, S, 104, "lru");
    ASSERT_EQ(state_of(b[0]), SW_RESIDENT);
    ASSERT_EQ(state_of(b[1]), SW_SPILLED);
    ASSERT_EQ(state_of(b[2]), SW_RESIDENT);
    /* A host read is a use too. */
    char tmp[16];
    ASSERT_OK(sw_buffer_read(b[2], 0, tmp, sizeof tmp));
    b[5] = alloc_pattern(dev, S, 105, "lru");
    ASSERT_EQ(state_of(b[2]), SW_RESIDENT);
    ASSERT_EQ(state_of(b[3]), SW_SPILLED);
    sw_memory_info m = test_info(dev);
    ASSERT_UEQ(m.spills, 2);
    ASSERT_UEQ(m.spilled, 2 * S);
    ASSERT_UEQ(m.in_use, 4 * S);
    ASSERT_ULE(m.in_use + m.cached, 4 * S);
    for (int i = 0; i < 6; i++)
        test_expect_pattern(b[i], 100u + (uint32_t)i);
    for (int i = 0; i < 6; i++)
        ASSERT_OK(sw_buffer_free(b[i]));
    ASSERT_UEQ(test_info(dev).spilled, 0);
}

TEST(spill_host_access_stays_spilled)
{
    test_require_spill();
    sw_device *dev = test_device();
    ASSERT_OK(sw_set_memory_budget(dev, S));
    sw_buffer *a = alloc_pattern(dev, S, 1, "a");
    sw_buffer *b = alloc_pattern(dev, S, 2, "b"); /* spills a */
    ASSERT_EQ(state_of(a), SW_SPILLED);
    sw_memory_info before = test_info(dev);
    /* A host read of a spilled buffer uses the host copy. */
    test_expect_pattern(a, 1);
    ASSERT_EQ(state_of(a), SW_SPILLED);
    /* So does a write, and the write is seen after the restore. */
    unsigned char *data = malloc(S);
    test_pattern(data, S, 7);
    ASSERT_OK(sw_buffer_write(a, 0, data, S));
    ASSERT_EQ(state_of(a), SW_SPILLED);
    sw_memory_info mid = test_info(dev);
    ASSERT_UEQ(mid.restores, before.restores);
    ASSERT_UEQ(mid.spills, before.spills);
    touch_device(a); /* restores a, spills b */
    ASSERT_EQ(state_of(a), SW_RESIDENT);
    ASSERT_EQ(state_of(b), SW_SPILLED);
    sw_memory_info after = test_info(dev);
    ASSERT_UEQ(after.restores, before.restores + 1);
    ASSERT_UEQ(after.restored_bytes_total, before.restored_bytes_total + S);
    test_expect_pattern(a, 7);
    test_expect_pattern(b, 2);
    free(data);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
}

TEST(spill_views_see_base)
{
    test_require_spill();
    sw_device *dev = test_device();
    ASSERT_OK(sw_set_memory_budget(dev, 2 * S));
    sw_buffer *base = test_alloc(dev, 2 * S, "base");
    float *x = malloc(2 * S);
    for (size_t i = 0; i < 2 * S / 4; i++)
        x[i] = (float)i;
    ASSERT_OK(sw_buffer_write(base, 0, x, 2 * S));
    sw_buffer *view = NULL;
    ASSERT_OK(sw_buffer_view(base, S, S, &view));
    sw_buffer *other = test_alloc(dev, S, "other"); /* spills base */
    ASSERT_EQ(state_of(base), SW_SPILLED);
    ASSERT_EQ(state_of(view), SW_SPILLED);
    float got = 0;
    ASSERT_OK(sw_buffer_read(view, 4, &got, 4));
    ASSERT_TRUE(got == (float)(S / 4 + 1));
    ASSERT_OK(sw_buffer_free(other));
    /* An op on the view restores the base; the result lands in place. */
    sw_scalar two = {.f = 2.0};
    ASSERT_OK(sw_op_scale(view, view, two, SW_FLOAT32, S / 4));
    ASSERT_EQ(state_of(base), SW_RESIDENT);
    ASSERT_OK(sw_buffer_read(base, 0, x, 2 * S));
    for (size_t i = 0; i < 2 * S / 4; i++) {
        float want = i < S / 4 ? (float)i : 2.0f * (float)i;
        if (x[i] != want)
            FAIL("element %zu: %g, want %g", i, (double)x[i], (double)want);
    }
    free(x);
    ASSERT_OK(sw_buffer_free(view));
    ASSERT_OK(sw_buffer_free(base));
}

TEST(spill_pinned_never_moves)
{
    test_require_spill();
    sw_device *dev = test_device();
    ASSERT_OK(sw_set_memory_budget(dev, 2 * S));
    sw_buffer *a = alloc_pattern(dev, S, 11, "a"); /* the LRU buffer */
    sw_buffer *b = alloc_pattern(dev, S, 12, "b");
    sw_buffer *arr[1] = {a};
    sw_devmem pa;
    ASSERT_OK(sw_launch_begin(dev, arr, 1, &pa));
    /* Room for c must come from b: a is pinned although least recent.
     * Without pinning a would be spilled, and the kernel below would run
     * on freed memory (the simulated device would abort). */
    sw_buffer *c = alloc_pattern(dev, S, 13, "c");
    ASSERT_EQ(state_of(a), SW_RESIDENT);
    ASSERT_EQ(state_of(b), SW_SPILLED);
    sw_kernel_args k;
    memset(&k, 0, sizeof k);
    k.kernel = SW_KERNEL_SCALE;
    k.dtype = SW_INT32;
    k.n = S / 4;
    k.out = pa;
    k.a = pa;
    k.alpha.i = 1;
    ASSERT_OK(sw_launch_kernel(dev, &k));
    ASSERT_OK(sw_launch_end(dev, arr, 1));
    test_expect_pattern(a, 11);
    test_expect_pattern(b, 12);
    test_expect_pattern(c, 13);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_buffer_free(c));
}

TEST(spill_launch_restores_all)
{
    test_require_spill();
    sw_device *dev = test_device();
    ASSERT_OK(sw_set_memory_budget(dev, 3 * S));
    sw_buffer *x = test_alloc(dev, S, "x");
    sw_buffer *y = test_alloc(dev, S, "y");
    sw_scalar v = {.i = 5};
    ASSERT_OK(sw_op_fill(x, SW_INT32, S / 4, v));
    v.i = 7;
    ASSERT_OK(sw_op_fill(y, SW_INT32, S / 4, v));
    sw_buffer *z = test_alloc(dev, S, "z");
    sw_buffer *w = test_alloc(dev, S, "w"); /* spills x */
    sw_buffer *u = test_alloc(dev, S, "u"); /* spills y */
    ASSERT_EQ(state_of(x), SW_SPILLED);
    ASSERT_EQ(state_of(y), SW_SPILLED);
    /* out = x + y: both come back (spilling others), the kernel runs on
     * live memory and the result is right. */
    ASSERT_OK(sw_op_add(z, x, y, SW_INT32, S / 4));
    ASSERT_EQ(state_of(x), SW_RESIDENT);
    ASSERT_EQ(state_of(y), SW_RESIDENT);
    ASSERT_EQ(state_of(z), SW_RESIDENT);
    int32_t *out = malloc(S);
    ASSERT_OK(sw_buffer_read(z, 0, out, S));
    for (size_t i = 0; i < S / 4; i++)
        ASSERT_EQ(out[i], 12);
    free(out);
    sw_buffer *all[5] = {x, y, z, w, u};
    for (int i = 0; i < 5; i++)
        ASSERT_OK(sw_buffer_free(all[i]));
}

TEST(spill_launch_too_large)
{
    test_require_spill();
    sw_device *dev = test_device();
    ASSERT_OK(sw_set_memory_budget(dev, 2 * S));
    sw_buffer *a = alloc_pattern(dev, S, 21, "a");
    sw_buffer *b = alloc_pattern(dev, S, 22, "b");
    sw_buffer *c = alloc_pattern(dev, S, 23, "c"); /* spills a */
    sw_memory_info before = test_info(dev);
    sw_buffer *arr[3] = {a, b, c};
    sw_devmem p[3];
    ASSERT_ERR(sw_launch_begin(dev, arr, 3, p), SW_ERR_OOM);
    ASSERT_STR_CONTAINS(sw_last_error(), "together");
    ASSERT_STR_CONTAINS(sw_last_error(), "budget");
    ASSERT_MSG_BYTES(sw_last_error(), 3 * S);
    ASSERT_UEQ(p[0].base, 0);
    sw_memory_info after = test_info(dev);
    ASSERT_UEQ(after.spills, before.spills);
    ASSERT_UEQ(after.restores, before.restores);
    ASSERT_EQ(state_of(a), SW_SPILLED);
    /* Nothing is left pinned: freeing and reusing all works. */
    test_expect_pattern(a, 21);
    test_expect_pattern(b, 22);
    test_expect_pattern(c, 23);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_buffer_free(c));
}

/* Without a budget the device's capacity is the bound. */
static int launch_too_large_child(void *arg)
{
    (void)arg;
    sw_device *dev = NULL;
    if (sw_device_open("sim:0", &dev) != SW_OK)
        return 10;
    size_t sz = 24u << 20; /* three of these do not fit in 64 MiB */
    sw_buffer *b[3];
    for (int i = 0; i < 3; i++) {
        if (sw_buffer_alloc(dev, sz, "big", &b[i]) != SW_OK)
            return 11;
        uint8_t v = (uint8_t)(i + 1);
        if (sw_buffer_fill(b[i], 0, sz, &v, 1) != SW_OK)
            return 12;
    }
    sw_memory_info m0, m1;
    sw_memory_info_get(dev, &m0);
    sw_devmem p[3];
    if (sw_launch_begin(dev, b, 3, p) != SW_ERR_OOM)
        return 13;
    if (strstr(sw_last_error(), "capacity") == NULL ||
        strstr(sw_last_error(), "together") == NULL)
        return 14;
    sw_memory_info_get(dev, &m1);
    if (m1.spills != m0.spills || m1.restores != m0.restores)
        return 15; /* nothing moved for nothing */
    unsigned char c;
    for (int i = 0; i < 3; i++) {
        if (sw_buffer_read(b[i], sz - 1, &c, 1) != SW_OK || c != i + 1)
            return 16;
        sw_buffer_free(b[i]);
    }
    return sw_device_close(dev) == SW_OK ? 0 : 17;
}

TEST(spill_launch_too_large_for_device)
{
    test_require_sim();
    setenv("SPILLWAY_SIM_MEMORY", "64M", 1);
    char err[512];
    int st = test_fork_run(launch_too_large_child, NULL, err, sizeof err);
    if (st != 0)
        FAIL("child status 0x%x: %s", st, err);
}

TEST(spill_lease_and_external)
{
    test_require_spill();
    sw_device *dev = test_device();
    ASSERT_OK(sw_set_memory_budget(dev, 3 * S));
    sw_buffer *a = alloc_pattern(dev, S, 31, "leased");
    sw_devmem pa;
    sw_lease *lease = NULL;
    ASSERT_OK(sw_buffer_expose(a, &pa, &lease));
    ASSERT_NOT_NULL(lease);
    /* Wrap the leased memory: an external buffer over it. */
    sw_buffer *ext = NULL;
    ASSERT_OK(sw_buffer_wrap(dev, pa, S, "external", &ext));
    sw_memory_info m = test_info(dev);
    ASSERT_UEQ(m.in_use, S); /* the external buffer is not ours */
    sw_buffer *b = alloc_pattern(dev, S, 32, "b");
    sw_buffer *c = alloc_pattern(dev, S, 33, "c");
    sw_buffer *d = alloc_pattern(dev, S, 34, "d"); /* spills b, not a */
    ASSERT_EQ(state_of(a), SW_RESIDENT);
    ASSERT_EQ(state_of(ext), SW_RESIDENT);
    ASSERT_EQ(state_of(b), SW_SPILLED);
    /* With every other buffer pinned, only a could make room: it can't. */
    test_pin(c);
    test_pin(d);
    sw_buffer *e = NULL;
    ASSERT_ERR(sw_buffer_alloc(dev, S, "e", &e), SW_ERR_OOM);
    ASSERT_EQ(state_of(a), SW_RESIDENT);
    /* The external view of a's memory reads a's bytes. */
    test_expect_pattern(ext, 31);
    ASSERT_OK(sw_buffer_free(ext));
    /* Released, the lease no longer holds a in place. */
    ASSERT_OK(sw_lease_release(lease));
    ASSERT_ERR(sw_lease_release(lease), SW_ERR_INVALID_HANDLE);
    ASSERT_OK(sw_lease_release(NULL));
    e = alloc_pattern(dev, S, 35, "e");
    ASSERT_EQ(state_of(a), SW_SPILLED);
    test_unpin(c);
    test_unpin(d);
    test_expect_pattern(a, 31);
    sw_buffer *all[5] = {a, b, c, d, e};
    for (int i = 0; i < 5; i++)
        ASSERT_OK(sw_buffer_free(all[i]));
}

TEST(spill_lease_outlives_handle)
{
    sw_device *dev = test_device();
    sw_buffer *a = alloc_pattern(dev, S, 41, "a");
    sw_devmem pa;
    sw_lease *lease = NULL;
    ASSERT_OK(sw_buffer_expose(a, &pa, &lease));
    ASSERT_OK(sw_buffer_free(a));
    /* The memory stays allocated while the lease lives. */
    ASSERT_UEQ(test_info(dev).in_use, S);
    ASSERT_OK(sw_lease_release(lease));
    ASSERT_UEQ(test_info(dev).in_use, 0);
}

TEST(spill_budget_lowered)
{
    test_require_spill();
    sw_device *dev = test_device();
    sw_buffer *b[4];
    for (int i = 0; i < 4; i++)
        b[i] = alloc_pattern(dev, S, 50u + (uint32_t)i, "b");
    /* Lowering the budget below what is held spills at once, down to it
     * (the two least recently used)... */
    ASSERT_OK(sw_set_memory_budget(dev, 2 * S));
    sw_memory_info l = test_info(dev);
    ASSERT_UEQ(l.spills, 2);
    ASSERT_ULE(l.in_use + l.cached, 2 * S);
    /* ...and the next allocation makes room for itself. */
    sw_buffer *c = alloc_pattern(dev, S, 60, "c");
    sw_memory_info m = test_info(dev);
    ASSERT_UEQ(m.spills, 3);
    ASSERT_ULE(m.in_use + m.cached, 2 * S);
    for (int i = 0; i < 4; i++)
        test_expect_pattern(b[i], 50u + (uint32_t)i);
    test_expect_pattern(c, 60);
    /* Freeing spilled buffers drops their host copies. */
    for (int i = 0; i < 4; i++)
        ASSERT_OK(sw_buffer_free(b[i]));
    ASSERT_UEQ(test_info(dev).spilled, 0);
    ASSERT_OK(sw_buffer_free(c));
}

TEST(spill_budget_below_one_alloc)
{
    sw_device *dev = test_device();
    ASSERT_OK(sw_set_memory_budget(dev, 2 * S));
    sw_buffer *a = alloc_pattern(dev, S, 70, "a");
    sw_memory_info before = test_info(dev);
    sw_buffer *big = NULL;
    /* Larger than the whole budget: refused at once, nothing spilled. */
    ASSERT_ERR(sw_buffer_alloc(dev, 3 * S, "big", &big), SW_ERR_OOM);
    ASSERT_NULL(big);
    ASSERT_STR_CONTAINS(sw_last_error(), "budget");
    sw_memory_info after = test_info(dev);
    ASSERT_UEQ(after.spills, before.spills);
    ASSERT_EQ(state_of(a), SW_RESIDENT);
    ASSERT_OK(sw_buffer_free(a));
}

/* Without a budget, a full device spills least-recently-used buffers. */
static int full_device_child(void *arg)
{
    (void)arg;
    sw_device *dev = NULL;
    if (sw_device_open("sim:0", &dev) != SW_OK)
        return 10;
    enum { N = 16 };
    size_t sz = 4u << 20; /* 16 x 4 MiB fill a 64 MiB device */
    sw_buffer *b[N + 4];
    int n = 0;
    for (; n < N - 1; n++) {
        if (sw_buffer_alloc(dev, sz, "fill", &b[n]) != SW_OK)
            return 11;
        uint32_t v = (uint32_t)n * 7u + 1u;
        if (sw_buffer_fill(b[n], 0, sz, &v, 4) != SW_OK)
            return 12;
    }
    /* More than the device holds: each allocation spills the LRU. */
    for (int i = 0; i < 4; i++, n++) {
        if (sw_buffer_alloc(dev, sz, "more", &b[n]) != SW_OK)
            return 13;
        uint32_t v = (uint32_t)n * 7u + 1u;
        if (sw_buffer_fill(b[n], 0, sz, &v, 4) != SW_OK)
            return 14;
    }
    sw_memory_info m;
    sw_memory_info_get(dev, &m);
    if (m.spills == 0 || m.spilled == 0)
        return 15;
    /* Everything reads back, spilled or not, and comes back on use. */
    uint32_t *tmp = malloc(sz);
    for (int i = 0; i < n; i++) {
        sw_devmem p;
        if (sw_buffer_device_ptr(b[i], &p) != SW_OK)
            return 16;
        if (sw_buffer_read(b[i], 0, tmp, sz) != SW_OK)
            return 17;
        for (size_t j = 0; j < sz / 4; j++)
            if (tmp[j] != (uint32_t)i * 7u + 1u)
                return 18;
    }
    free(tmp);
    for (int i = 0; i < n; i++)
        sw_buffer_free(b[i]);
    return sw_device_close(dev) == SW_OK ? 0 : 19;
}

TEST(spill_full_device)
{
    test_require_sim();
    setenv("SPILLWAY_SIM_MEMORY", "64M", 1);
    char err[512];
    int st = test_fork_run(full_device_child, NULL, err, sizeof err);
    if (st != 0)
        FAIL("child status 0x%x: %s", st, err);
}

/* ------------------------------------------------------------------------
 * Faults
 * ---------------------------------------------------------------------- */

TEST(spill_fault_copy_out)
{
    test_require_spill();
    sw_device *dev = test_device();
    ASSERT_OK(sw_set_memory_budget(dev, 2 * S));
    sw_buffer *a = alloc_pattern(dev, S, 81, "a");
    sw_buffer *b = alloc_pattern(dev, S, 82, "b");
    sw_memory_info before = test_info(dev);
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_COPY, 1, 0));
    sw_buffer *c = NULL;
    ASSERT_ERR(sw_buffer_alloc(dev, S, "c", &c), SW_ERR_DEVICE);
    ASSERT_NULL(c);
    /* The failed copy out left a resident and intact. */
    ASSERT_EQ(state_of(a), SW_RESIDENT);
    sw_memory_info after = test_info(dev);
    ASSERT_UEQ(after.spills, before.spills);
    ASSERT_UEQ(after.in_use, before.in_use);
    ASSERT_UEQ(after.allocs, before.allocs);
    test_expect_pattern(a, 81);
    test_expect_pattern(b, 82);
    /* Disarmed (it was transient), the same allocation spills a. */
    c = alloc_pattern(dev, S, 83, "c");
    ASSERT_EQ(state_of(a), SW_SPILLED);
    test_expect_pattern(a, 81);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_buffer_free(c));
}

TEST(spill_fault_restore)
{
    test_require_spill();
    sw_device *dev = test_device();
    ASSERT_OK(sw_set_memory_budget(dev, 2 * S));
    sw_buffer *a = alloc_pattern(dev, S, 91, "a");
    sw_buffer *b = alloc_pattern(dev, S, 92, "b");
    sw_buffer *c = alloc_pattern(dev, S, 93, "c"); /* spills a */
    ASSERT_OK(sw_empty_cache(dev));
    ASSERT_OK(sw_buffer_free(c)); /* room in the budget, in the cache */
    ASSERT_OK(sw_empty_cache(dev));
    ASSERT_EQ(state_of(a), SW_SPILLED);
    /* The restore's allocation fails (b is pinned, so spilling cannot
     * find room either): the host copy is kept. */
    test_pin(b);
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_ALLOC, 1, 1));
    sw_devmem p;
    ASSERT_ERR(sw_buffer_device_ptr(a, &p), SW_ERR_OOM);
    ASSERT_EQ(state_of(a), SW_SPILLED);
    test_expect_pattern(a, 91);
    test_unpin(b);
    /* The restore's copy in fails: the host copy is kept. */
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_ALLOC, 0, 0));
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_COPY, 1, 0));
    ASSERT_ERR(sw_buffer_device_ptr(a, &p), SW_ERR_DEVICE);
    ASSERT_EQ(state_of(a), SW_SPILLED);
    test_expect_pattern(a, 91);
    sw_memory_info m = test_info(dev);
    ASSERT_UEQ(m.spilled, S);
    /* Then it works, with the data intact. */
    touch_device(a);
    ASSERT_EQ(state_of(a), SW_RESIDENT);
    test_expect_pattern(a, 91);
    test_expect_pattern(b, 92);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
}

/* For N = 1, 2, ...: fail the Nth allocation or copy inside a sequence that
 * spills and restores; every run ends consistent, with data intact, and
 * leak-free. */
static int spill_sequence(sw_device *dev, sw_buffer **b, int nb)
{
    for (int i = 0; i < nb; i++) {
        int rc = sw_buffer_alloc(dev, S, "seq", &b[i]);
        if (rc != SW_OK)
            return rc;
        uint8_t v = (uint8_t)(i + 1);
        rc = sw_buffer_fill(b[i], 0, S, &v, 1);
        if (rc != SW_OK)
            return rc;
    }
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < nb; i++) {
            sw_devmem p;
            int rc = sw_buffer_device_ptr(b[i], &p);
            if (rc != SW_OK)
                return rc;
        }
    return SW_OK;
}

TEST(spill_fault_nth)
{
    test_require_spill();
    sw_device *dev = test_device();
    for (int op = 0; op < 2; op++) {
        int clean = 0;
        for (uint64_t nth = 1; nth < 200 && !clean; nth++) {
            ASSERT_OK(sw_set_memory_budget(dev, 2 * S));
            ASSERT_OK(sw_empty_cache(dev));
            ASSERT_OK(sw_inject_fault(dev, (sw_fault_op)op, nth, 0));
            enum { NB = 4 };
            sw_buffer *b[NB] = {0};
            int rc = spill_sequence(dev, b, NB);
            ASSERT_OK(sw_inject_fault(dev, (sw_fault_op)op, 0, 0));
            if (rc == SW_OK)
                clean = 1;
            else if (rc != SW_ERR_OOM && rc != SW_ERR_DEVICE)
                FAIL("nth %llu: unexpected %s: %s", (unsigned long long)nth,
                     sw_err_name(rc), sw_last_error());
            /* Whatever exists holds its bytes. */
            unsigned char *tmp = malloc(S);
            for (int i = 0; i < NB; i++) {
                if (b[i] == NULL)
                    continue;
                size_t sz = 0;
                ASSERT_OK(sw_buffer_size(b[i], &sz));
                ASSERT_OK(sw_buffer_read(b[i], 0, tmp, S));
                /* A buffer whose fill failed holds anything; the others
                 * their value. */
                int filled = (i + 1 < NB && b[i + 1] != NULL) || clean;
                for (size_t j = 0; filled && j < S; j++)
                    if (tmp[j] != (unsigned char)(i + 1))
                        FAIL("nth %llu: buffer %d byte %zu = %u",
                             (unsigned long long)nth, i, j, tmp[j]);
                ASSERT_OK(sw_buffer_free(b[i]));
            }
            free(tmp);
            sw_memory_info m = test_info_synced(dev);
            ASSERT_UEQ(m.in_use, 0);
            ASSERT_UEQ(m.spilled, 0);
            ASSERT_OK(sw_set_memory_budget(dev, 0));
        }
        ASSERT_TRUE(clean);
    }
}

/* ------------------------------------------------------------------------
 * Pressure callbacks
 * ---------------------------------------------------------------------- */

typedef struct {
    sw_buffer *victim;
    int calls;
    int nested_rc;
    int last_calls; /* of them, the ladder's last chance */
} pressure_state;

static int free_victim(sw_device *dev, sw_pressure *p, size_t bytes,
                       void *user)
{
    pressure_state *st = user;
    st->calls++;
    st->last_calls += sw_pressure_last_chance(p);
    if (st->victim == NULL)
        return 0;
    /* Unpinning and freeing take the device lock: release ours first. */
    sw_pressure_unlock(p);
    sw_launch_end(dev, &st->victim, 1);
    sw_buffer_free(st->victim);
    st->victim = NULL;
    /* An allocation from inside does not run the callbacks again. */
    sw_buffer *tmp = NULL;
    st->nested_rc = sw_buffer_alloc(dev, bytes, "nested", &tmp);
    sw_buffer_free(tmp);
    sw_pressure_relock(p);
    sw_pressure_note_gc(p);
    return 1;
}

TEST(pressure_callback_frees)
{
    sw_device *dev = test_device();
    ASSERT_OK(sw_set_memory_budget(dev, 2 * S));
    sw_buffer *a = test_alloc(dev, S, "a");
    sw_buffer *b = test_alloc(dev, S, "b");
    test_pin(a); /* nothing can be spilled: only the callback helps */
    test_pin(b);
    pressure_state st = {.victim = NULL};
    int id = -1;
    ASSERT_OK(sw_add_pressure_callback(dev, free_victim, &st, &id));
    ASSERT_GE(id, 0);
    sw_buffer *c = NULL;
    /* The callback runs but frees nothing, then once more as the last
     * step before failing (told so): a clean OOM. */
    ASSERT_ERR(sw_buffer_alloc(dev, S, "c", &c), SW_ERR_OOM);
    ASSERT_EQ(st.calls, 2);
    ASSERT_EQ(st.last_calls, 1);
    /* Now it unpins and frees b, which nothing else could move. */
    st.victim = b;
    ASSERT_OK(sw_buffer_alloc(dev, S, "c", &c));
    ASSERT_EQ(st.calls, 3);
    ASSERT_EQ(st.last_calls, 1);
    ASSERT_NULL(st.victim);
    sw_memory_info m = test_info(dev);
    ASSERT_UEQ(m.gc_runs, 1);
    ASSERT_OK(sw_remove_pressure_callback(dev, id));
    ASSERT_ERR(sw_remove_pressure_callback(dev, id), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_add_pressure_callback(dev, NULL, NULL, &id),
               SW_ERR_INVALID_ARG);
    test_unpin_free(a);
    ASSERT_OK(sw_buffer_free(c));
}

/* ------------------------------------------------------------------------
 * A randomized model-based test: threads run random sequences of
 * alloc/free/write/read/launch/budget changes on one device with a small
 * budget, and every byte is checked against a shadow copy.
 * ---------------------------------------------------------------------- */

#define MODEL_SLOTS 12
#define MODEL_MAX (48u * 1024u)

typedef struct {
    sw_device *dev;
    uint64_t seed;
    int steps;
    int fails;
} model_arg;

static void *model_thread(void *p)
{
    model_arg *m = p;
    uint64_t rng = m->seed;
    sw_buffer *buf[MODEL_SLOTS] = {0};
    unsigned char *shadow[MODEL_SLOTS] = {0};
    size_t size[MODEL_SLOTS] = {0};
    unsigned char *tmp = malloc(MODEL_MAX);
    for (int step = 0; step < m->steps && !m->fails; step++) {
        int i = (int)(test_rand(&rng) % MODEL_SLOTS);
        unsigned op = (unsigned)(test_rand(&rng) % 8);
        if (buf[i] == NULL) {
            size_t n = 4 * (1 + test_rand(&rng) % (MODEL_MAX / 4));
            if (sw_buffer_alloc(m->dev, n, "model", &buf[i]) != SW_OK) {
                buf[i] = NULL; /* everything pinned by others: fine */
                continue;
            }
            size[i] = n;
            shadow[i] = malloc(n);
            for (size_t j = 0; j < n; j++)
                shadow[i][j] = (unsigned char)test_rand(&rng);
            if (sw_buffer_write(buf[i], 0, shadow[i], n) != SW_OK)
                m->fails++;
            continue;
        }
        switch (op) {
        case 0: /* free */
            if (sw_buffer_free(buf[i]) != SW_OK)
                m->fails++;
            free(shadow[i]);
            buf[i] = NULL;
            break;
        case 1: { /* partial write */
            size_t off = test_rand(&rng) % size[i];
            size_t n = 1 + test_rand(&rng) % (size[i] - off);
            for (size_t j = 0; j < n; j++)
                shadow[i][off + j] = (unsigned char)test_rand(&rng);
            if (sw_buffer_write(buf[i], off, shadow[i] + off, n) != SW_OK)
                m->fails++;
            break;
        }
        case 2:
        case 3: { /* scale by -1 (int32): a launch on the device */
            sw_scalar neg = {.i = -1};
            size_t n = size[i] / 4;
            if (sw_op_scale(buf[i], buf[i], neg, SW_INT32, n) != SW_OK) {
                if (sw_last_error()[0] == '\0')
                    m->fails++;
                break; /* OOM: all else pinned by other threads */
            }
            for (size_t j = 0; j < n; j++) {
                int32_t v;
                memcpy(&v, shadow[i] + 4 * j, 4);
                v = (int32_t)(0u - (uint32_t)v);
                memcpy(shadow[i] + 4 * j, &v, 4);
            }
            break;
        }
        case 4: { /* device-to-device copy into another live buffer */
            int k = (int)(test_rand(&rng) % MODEL_SLOTS);
            if (k == i || buf[k] == NULL)
                break;
            size_t n = size[i] < size[k] ? size[i] : size[k];
            if (sw_buffer_copy(buf[k], 0, buf[i], 0, n) != SW_OK)
                break; /* OOM while others hold pins: allowed */
            memcpy(shadow[k], shadow[i], n);
            break;
        }
        case 5: /* the budget moves (the device's, shared by all) */
            sw_set_memory_budget(m->dev,
                                 (uint64_t)(4 + test_rand(&rng) % 8) *
                                     MODEL_MAX);
            break;
        default: /* read and check */
            if (sw_buffer_read(buf[i], 0, tmp, size[i]) != SW_OK) {
                m->fails++;
                break;
            }
            if (memcmp(tmp, shadow[i], size[i]) != 0) {
                fprintf(stderr, "model: slot %d differs at byte %zu\n", i,
                        test_memdiff(tmp, shadow[i], size[i]));
                m->fails++;
            }
        }
    }
    for (int i = 0; i < MODEL_SLOTS; i++) {
        if (buf[i] == NULL)
            continue;
        if (sw_buffer_read(buf[i], 0, tmp, size[i]) != SW_OK ||
            memcmp(tmp, shadow[i], size[i]) != 0)
            m->fails++;
        sw_buffer_free(buf[i]);
        free(shadow[i]);
    }
    free(tmp);
    return NULL;
}

TEST(thread_spill_model)
{
    test_require_spill();
    sw_device *dev = test_device();
    ASSERT_OK(sw_set_memory_budget(dev, 8 * MODEL_MAX));
    enum { T = 4 };
    pthread_t th[T];
    model_arg args[T];
    for (int t = 0; t < T; t++) {
        args[t].dev = dev;
        args[t].seed = 0x9E3779B97F4A7C15ull * (uint64_t)(t + 1);
        args[t].steps = 3000;
        args[t].fails = 0;
        ASSERT_EQ(pthread_create(&th[t], NULL, model_thread, &args[t]), 0);
    }
    for (int t = 0; t < T; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < T; t++)
        ASSERT_EQ(args[t].fails, 0);
    sw_memory_info m = test_info(dev);
    ASSERT_UGT(m.spills, 0);
    ASSERT_UGT(m.restores, 0);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
}

/* ------------------------------------------------------------------------
 * A failed call with several buffers changes nothing (issue 11, items 1
 * and 2): every argument is checked before anything moves.
 * ---------------------------------------------------------------------- */

/* A device other than dev: sim:1 when dev is the simulated one. */
static sw_device *other_device(sw_device *dev)
{
    if (test_is_sim()) {
        setenv("SPILLWAY_SIM_DEVICES", "2", 1);
        return test_open("sim:1");
    }
    (void)dev;
    return test_open("sim:0");
}

static void expect_nothing_moved(const sw_memory_info *a,
                                 const sw_memory_info *b)
{
    ASSERT_UEQ(a->in_use, b->in_use);
    ASSERT_UEQ(a->spilled, b->spilled);
    ASSERT_UEQ(a->spills, b->spills);
    ASSERT_UEQ(a->restores, b->restores);
    ASSERT_UEQ(a->allocs, b->allocs);
    ASSERT_UEQ(a->ooms, b->ooms);
}

static void foreign_argument_case(uint64_t budget_after)
{
    sw_device *dev = test_device();
    sw_device *other = other_device(dev);
    sw_buffer *a = alloc_pattern(dev, 4096, 1, "a");
    ASSERT_OK(sw_set_memory_budget(dev, 4096));
    sw_buffer *b = alloc_pattern(dev, 4096, 2, "b"); /* spills a */
    ASSERT_EQ(state_of(a), SW_SPILLED);
    ASSERT_OK(sw_set_memory_budget(dev, budget_after));
    sw_buffer *f = test_alloc(other, 4096, "foreign");
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    sw_memory_info before = test_info(dev);

    sw_buffer *args[2] = {a, f};
    sw_devmem ptrs[2] = {{1, 1}, {1, 1}};
    ASSERT_ERR(sw_launch_begin(dev, args, 2, ptrs), SW_ERR_INVALID_ARG);
    ASSERT_NOT_NULL(strstr(sw_last_error(), "argument 1"));
    ASSERT_UEQ(ptrs[0].base, 0);
    sw_buffer *rev[2] = {f, a};
    ASSERT_ERR(sw_launch_begin(dev, rev, 2, ptrs), SW_ERR_INVALID_ARG);
    ASSERT_NOT_NULL(strstr(sw_last_error(), "argument 0"));
    sw_scalar two = {.f = 2.0};
    ASSERT_ERR(sw_op_add(b, a, f, SW_FLOAT32, 16), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_op_add(a, f, b, SW_FLOAT32, 16), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_op_scale(a, f, two, SW_FLOAT32, 16), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_op_axpy(two, f, a, SW_FLOAT32, 16), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_op_add_q(q, b, a, f, SW_FLOAT32, 16), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_op_scale_q(q, a, f, two, SW_FLOAT32, 16),
               SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_op_axpy_q(q, two, a, f, SW_FLOAT32, 16),
               SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_buffer_copy(a, 0, f, 0, 64), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_buffer_copy(f, 0, a, 0, 64), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_buffer_copy_q(q, a, 0, f, 0, 64), SW_ERR_INVALID_ARG);
    /* A queue of another device with this device's buffers. */
    sw_queue *oq = NULL;
    ASSERT_OK(sw_queue_create(other, &oq));
    ASSERT_ERR(sw_op_add_q(oq, b, a, b, SW_FLOAT32, 16), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_buffer_copy_q(oq, b, 0, a, 0, 64), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_op_fill_q(oq, a, SW_FLOAT32, 16, two), SW_ERR_INVALID_ARG);

    sw_memory_info after = test_info(dev);
    expect_nothing_moved(&before, &after);
    ASSERT_EQ(state_of(a), SW_SPILLED);

    ASSERT_OK(sw_queue_release(oq));
    ASSERT_OK(sw_queue_release(q));
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    test_expect_pattern(a, 1);
    test_expect_pattern(b, 2);
    ASSERT_OK(sw_buffer_free(f));
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_device_synchronize(dev));
    ASSERT_OK(sw_device_synchronize(other));
}

TEST(launch_foreign_arg_moves_nothing)
{
    test_require_spill();
    /* Room for everything: before, a was restored (spilling nothing else)
     * and only then was the foreign argument refused. */
    foreign_argument_case(1u << 20);
}

TEST(launch_foreign_arg_under_budget)
{
    test_require_spill();
    /* A tight budget: before, the foreign buffer was counted against this
     * device's budget and the call failed with SW_ERR_OOM. */
    foreign_argument_case(4096);
}

/* Queue destruction against memory queries (issue 11, item 3): destroying
 * a backend queue changed the backend's queue list with no lock held while
 * allocations and memory_info walked it under the lock. */
typedef struct {
    sw_device *dev;
    atomic_int stop;
    int fails;
} churn_arg;

static void *alloc_info_loop(void *p)
{
    churn_arg *c = p;
    while (!atomic_load(&c->stop)) {
        sw_buffer *b = NULL;
        sw_memory_info mi;
        if (sw_buffer_alloc(c->dev, 8192, "churn", &b) != SW_OK ||
            sw_memory_info_get(c->dev, &mi) != SW_OK ||
            sw_buffer_free(b) != SW_OK)
            c->fails++;
    }
    return NULL;
}

TEST(thread_queue_destroy_vs_memory_info)
{
    sw_device *dev = test_device();
    churn_arg c = {.dev = dev};
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, alloc_info_loop, &c), 0);
    sw_buffer *b = test_alloc(dev, 4096, "filled on queues");
    sw_scalar v = {.i = 0};
    for (int i = 0; i < 200; i++) {
        sw_queue *q = NULL;
        ASSERT_OK(sw_queue_create(dev, &q));
        v.i = i;
        ASSERT_OK(sw_op_fill_q(q, b, SW_INT32, 1024, v));
        ASSERT_OK(sw_queue_release(q));
        ASSERT_OK(sw_device_synchronize(dev));
    }
    atomic_store(&c.stop, 1);
    pthread_join(th, NULL);
    ASSERT_EQ(c.fails, 0);
    int32_t last[1024];
    ASSERT_OK(sw_buffer_read(b, 0, last, sizeof last));
    for (int i = 0; i < 1024; i++)
        ASSERT_EQ(last[i], 199);
    ASSERT_OK(sw_buffer_free(b));
}
