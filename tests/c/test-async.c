/*
 * test-async.c -- stream order: frees, cache reuse, host reads and writes
 * against queued work; and the simulated device's pointer validator, which
 * must abort the process on a kernel that touches memory outside any live
 * allocation (checked in a fork()ed child).
 */
#include "test.h"
#include "tests.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static float *read_floats(sw_buffer *b, size_t n)
{
    float *h = malloc(n * sizeof(float));
    ASSERT_NOT_NULL(h);
    ASSERT_OK(sw_buffer_read(b, 0, h, n * sizeof(float)));
    return h;
}

static void expect_all(const float *h, size_t n, float want, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (h[i] != want)
            FAIL("%s: element %zu of %zu is %.9g, expected %.9g", what, i, n,
                 (double)h[i], (double)want);
}

TEST(async_free_while_queued)
{
    if (test_is_sim())
        setenv("SPILLWAY_SIM_MEMORY", "1G", 1);
    sw_device *dev = test_device();
    const size_t n = (size_t)16 << 20; /* 16M floats, 64 MiB per buffer */
    const size_t bytes = n * sizeof(float);
    sw_buffer *a = test_alloc(dev, bytes, "a");
    sw_buffer *b = test_alloc(dev, bytes, "b");
    sw_buffer *out = test_alloc(dev, bytes, "out");
    sw_scalar va = {.f = 1.5}, vb = {.f = 2.25};

    /* Queue fills and a long add, then free the inputs at once: the add
     * must still see them. */
    ASSERT_OK(sw_op_fill(a, SW_FLOAT32, n, va));
    ASSERT_OK(sw_op_fill(b, SW_FLOAT32, n, vb));
    ASSERT_OK(sw_op_add(out, a, b, SW_FLOAT32, n));
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_UEQ(test_info(dev).in_use, bytes);

    /* New buffers of the same size take the freed blocks from the cache;
     * what is written to them is ordered after the add. */
    sw_buffer *a2 = test_alloc(dev, bytes, "a2");
    sw_buffer *b2 = test_alloc(dev, bytes, "b2");
    sw_scalar junk1 = {.f = 100.0}, junk2 = {.f = -7.0};
    ASSERT_OK(sw_op_fill(a2, SW_FLOAT32, n, junk1));
    ASSERT_OK(sw_op_fill(b2, SW_FLOAT32, n, junk2));

    float *h = read_floats(out, n);
    expect_all(h, n, 3.75f, "a + b with a and b freed while queued");
    free(h);
    h = read_floats(a2, n);
    expect_all(h, n, 100.0f, "reused block");
    free(h);
    ASSERT_OK(sw_buffer_free(a2));
    ASSERT_OK(sw_buffer_free(b2));
    ASSERT_OK(sw_buffer_free(out));
}

TEST(async_empty_cache_while_queued)
{
    if (test_is_sim())
        setenv("SPILLWAY_SIM_MEMORY", "1G", 1);
    sw_device *dev = test_device();
    const size_t n = (size_t)16 << 20;
    const size_t bytes = n * sizeof(float);
    sw_buffer *a = test_alloc(dev, bytes, "a");
    sw_buffer *b = test_alloc(dev, bytes, "b");
    sw_buffer *out = test_alloc(dev, bytes, "out");
    sw_scalar va = {.f = -1.25}, vb = {.f = 4.0};
    ASSERT_OK(sw_op_fill(a, SW_FLOAT32, n, va));
    ASSERT_OK(sw_op_fill(b, SW_FLOAT32, n, vb));
    ASSERT_OK(sw_op_add(out, a, b, SW_FLOAT32, n));
    /* Free the inputs and hand their blocks back to the device at once:
     * the device frees them in stream order, after the add. */
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_empty_cache(dev));
    ASSERT_UEQ(test_info(dev).cached, 0);
    /* New allocations may get the same device memory; their contents are
     * written after the add has read the old ones. */
    sw_buffer *c = test_alloc(dev, bytes, "c");
    sw_buffer *d = test_alloc(dev, bytes, "d");
    sw_scalar junk = {.f = 1e6};
    ASSERT_OK(sw_op_fill(c, SW_FLOAT32, n, junk));
    ASSERT_OK(sw_op_fill(d, SW_FLOAT32, n, junk));
    float *h = read_floats(out, n);
    expect_all(h, n, 2.75f, "a + b with a and b freed and released");
    free(h);
    ASSERT_OK(sw_buffer_free(c));
    ASSERT_OK(sw_buffer_free(d));
    ASSERT_OK(sw_buffer_free(out));
}

TEST(async_close_with_queued_work)
{
    if (test_is_sim())
        setenv("SPILLWAY_SIM_MEMORY", "1G", 1);
    const char *spec = test_device_spec();
    sw_device *dev = NULL;
    ASSERT_OK(sw_device_open(spec, &dev));
    sw_memory_info fresh = test_info_synced(dev);
    const size_t n = (size_t)16 << 20;
    sw_buffer *a = test_alloc(dev, n * sizeof(float), "a");
    sw_buffer *b = test_alloc(dev, n * sizeof(float), "b");
    sw_scalar v = {.f = 3.0};
    ASSERT_OK(sw_op_fill(a, SW_FLOAT32, n, v));
    ASSERT_OK(sw_op_scale(b, a, v, SW_FLOAT32, n));
    ASSERT_OK(sw_op_add(a, a, b, SW_FLOAT32, n));
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
    /* The last close with work still queued: it waits, then releases. */
    ASSERT_OK(sw_device_close(dev));
    sw_device *again = test_device();
    ASSERT_PTR_EQ(again, dev);
    sw_memory_info re = test_info_synced(again);
    ASSERT_UEQ(re.in_use, 0);
    ASSERT_UEQ(re.cached, 0);
    ASSERT_UEQ(re.allocs, 0);
    if (test_is_sim())
        ASSERT_UEQ(re.device_free, fresh.device_free);
    sw_buffer *c = test_alloc(again, 4096, "after-reopen");
    test_write_pattern(c, 3);
    test_expect_pattern(c, 3);
    ASSERT_OK(sw_buffer_free(c));
}

TEST(async_cache_reuse_in_order)
{
    sw_device *dev = test_device();
    enum { ROUNDS = 20 };
    const size_t n = (size_t)1 << 20; /* 4 MiB buffers */
    sw_buffer *outs[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        /* x takes last round's block from the cache each time. */
        sw_buffer *x = test_alloc(dev, n * sizeof(float), "x");
        outs[r] = test_alloc(dev, n * sizeof(float), "out");
        sw_scalar v = {.f = (double)r};
        ASSERT_OK(sw_op_fill(x, SW_FLOAT32, n, v));
        ASSERT_OK(sw_op_add(outs[r], x, x, SW_FLOAT32, n));
        ASSERT_OK(sw_buffer_free(x));
    }
    for (int r = 0; r < ROUNDS; r++) {
        float *h = read_floats(outs[r], n);
        char what[64];
        snprintf(what, sizeof what, "round %d", r);
        expect_all(h, n, 2.0f * (float)r, what);
        free(h);
        ASSERT_OK(sw_buffer_free(outs[r]));
    }
    sw_memory_info i = test_info_synced(dev);
    ASSERT_UEQ(i.in_use, 0);
    ASSERT_UEQ(i.allocs, 2 * ROUNDS);
}

TEST(async_read_waits_for_ops)
{
    sw_device *dev = test_device();
    const size_t n = (size_t)4 << 20;
    sw_buffer *a = test_alloc(dev, n * sizeof(float), "a");

    /* A read right after a queued fill sees the fill. */
    sw_scalar one = {.f = 1.0};
    ASSERT_OK(sw_op_fill(a, SW_FLOAT32, n, one));
    float tail[4];
    ASSERT_OK(sw_buffer_read(a, (n - 4) * sizeof(float), tail, sizeof tail));
    for (int i = 0; i < 4; i++)
        ASSERT_DBL_EQ(tail[i], 1.0);

    /* A host write after queued work lands after it: the fill does not
     * overwrite it. */
    sw_scalar two = {.f = 2.0};
    ASSERT_OK(sw_op_fill(a, SW_FLOAT32, n, two));
    const float five[4] = {5, 5, 5, 5};
    ASSERT_OK(sw_buffer_write(a, 0, five, sizeof five));
    /* And queued work after a write sees it. */
    sw_scalar three = {.f = 3.0};
    ASSERT_OK(sw_op_scale(a, a, three, SW_FLOAT32, n));
    sw_scalar sum;
    ASSERT_OK(sw_op_sum(a, SW_FLOAT32, n, &sum));
    ASSERT_DBL_EQ(sum.f, 4.0 * 15.0 + (double)(n - 4) * 6.0);
    float *h = read_floats(a, n);
    for (int i = 0; i < 4; i++)
        ASSERT_DBL_EQ(h[i], 15.0);
    expect_all(h + 4, n - 4, 6.0f, "scaled fill");
    free(h);

    /* A device copy queued after a fill copies the filled data. */
    sw_buffer *b = test_alloc(dev, n * sizeof(float), "b");
    sw_scalar seven = {.f = 7.0};
    ASSERT_OK(sw_op_fill(a, SW_FLOAT32, n, seven));
    ASSERT_OK(sw_buffer_copy(b, 0, a, 0, n * sizeof(float)));
    uint32_t pat = 0;
    ASSERT_OK(sw_buffer_fill(a, 0, n * sizeof(float), &pat, 4));
    h = read_floats(b, n);
    expect_all(h, n, 7.0f, "copy after fill");
    free(h);
    h = read_floats(a, n);
    expect_all(h, n, 0.0f, "fill after copy");
    free(h);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
}

/* ------------------------------------------------------------------------
 * The simulated device's validator (death tests)
 * ---------------------------------------------------------------------- */

static int stale_pointer_child(void *arg)
{
    (void)arg;
    sw_device *dev = NULL;
    if (sw_device_open(test_device_spec(), &dev) != SW_OK)
        return 10;
    sw_buffer *b = NULL;
    if (sw_buffer_alloc(dev, 4096, "soon-stale", &b) != SW_OK)
        return 11;
    sw_buffer *bufs[1] = {b};
    sw_devmem p;
    if (sw_launch_begin(dev, bufs, 1, &p) != SW_OK ||
        sw_launch_end(dev, bufs, 1) != SW_OK)
        return 12;
    /* Free it, give the block back to the device, wait: p is stale. */
    if (sw_buffer_free(b) != SW_OK || sw_empty_cache(dev) != SW_OK ||
        sw_device_synchronize(dev) != SW_OK)
        return 13;
    sw_kernel_args args;
    memset(&args, 0, sizeof args);
    args.kernel = SW_KERNEL_FILL;
    args.dtype = SW_FLOAT32;
    args.n = 16;
    args.out = p;
    args.alpha.f = 1.0;
    int rc = sw_launch_kernel(dev, &args);
    if (rc != SW_OK) {
        fprintf(stderr, "sw_launch_kernel refused it: %s: %s\n",
                sw_err_name(rc), sw_last_error());
        return 3;
    }
    sw_device_synchronize(dev);
    fprintf(stderr, "a kernel ran on a stale pointer and nothing stopped it\n");
    return 4;
}

static int out_of_bounds_child(void *arg)
{
    (void)arg;
    sw_device *dev = NULL;
    if (sw_device_open(test_device_spec(), &dev) != SW_OK)
        return 10;
    /* The only allocation: everything after it is free arena. */
    sw_buffer *b = NULL;
    if (sw_buffer_alloc(dev, 4096, "too-short", &b) != SW_OK)
        return 11;
    sw_buffer *bufs[1] = {b};
    sw_devmem p;
    if (sw_launch_begin(dev, bufs, 1, &p) != SW_OK)
        return 12;
    sw_kernel_args args;
    memset(&args, 0, sizeof args);
    args.kernel = SW_KERNEL_SCALE;
    args.dtype = SW_FLOAT32;
    args.n = 2048; /* 8 KiB through a 4 KiB buffer */
    args.out = p;
    args.a = p;
    args.alpha.f = 2.0;
    int rc = sw_launch_kernel(dev, &args);
    if (rc != SW_OK) {
        fprintf(stderr, "sw_launch_kernel refused it: %s: %s\n",
                sw_err_name(rc), sw_last_error());
        return 3;
    }
    sw_device_synchronize(dev);
    fprintf(stderr, "a kernel ran past its allocation and nothing stopped "
                    "it\n");
    return 4;
}

static void expect_validator_abort(int (*child)(void *), const char *what)
{
    char err[8192];
    int st = test_fork_run(child, NULL, err, sizeof err);
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT) {
        if (strstr(err, "not inside a live allocation") == NULL)
            FAIL("%s: aborted, but stderr does not say \"not inside a live "
                 "allocation\": %s",
                 what, err);
        return;
    }
    if (WIFSIGNALED(st))
        FAIL("%s: child died by signal %d (%s), expected SIGABRT; stderr: %s",
             what, WTERMSIG(st), strsignal(WTERMSIG(st)), err);
    FAIL("%s: child exited with status %d instead of aborting; stderr: %s",
         what, WEXITSTATUS(st), err);
}

TEST(sim_validator_catches_stale_pointer)
{
    test_require_sim();
    expect_validator_abort(stale_pointer_child, "stale pointer");
}

TEST(sim_validator_catches_out_of_bounds)
{
    test_require_sim();
    expect_validator_abort(out_of_bounds_child, "out-of-bounds kernel");
}
