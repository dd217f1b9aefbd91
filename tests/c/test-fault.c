/*
 * test-fault.c -- fault injection (in the core, so on every backend): fail
 * the Nth backend allocation or copy, for N = 1, 2, ... until a run of a
 * fixed sequence no longer reaches the fault; each run must handle its
 * failure, end consistent and leak nothing.  And persistent faults.
 */
#include "test.h"
#include "tests.h"

#define MAX_RUNS 64

TEST(fault_bad_args)
{
    sw_device *dev = test_device();
    ASSERT_ERR(sw_inject_fault(dev, (sw_fault_op)4, 1, 0), SW_ERR_INVALID_ARG);
    /* Only host-allocation faults exist without a device. */
    ASSERT_ERR(sw_inject_fault(NULL, SW_FAULT_ALLOC, 1, 0),
               SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_inject_fault(NULL, SW_FAULT_COPY, 1, 0),
               SW_ERR_INVALID_ARG);
    ASSERT_OK(sw_inject_fault(NULL, SW_FAULT_HOST_ALLOC, 0, 0));
    ASSERT_ERR(sw_inject_fault(dev, (sw_fault_op)-1, 1, 0),
               SW_ERR_INVALID_ARG);
    /* Disarming what is not armed is fine. */
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_ALLOC, 0, 0));
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_COPY, 0, 1));
    /* Armed and disarmed before it fires: no effect. */
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_ALLOC, 1, 1));
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_ALLOC, 0, 0));
    sw_buffer *b = test_alloc(dev, 1000, "after-disarm");
    test_write_pattern(b, 1);
    test_expect_pattern(b, 1);
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_UEQ(test_info(dev).ooms, 0);
}

/* ------------------------------------------------------------------------
 * Allocation faults on a countdown
 * ---------------------------------------------------------------------- */

typedef struct {
    sw_device *dev;
    sw_buffer *held[8];
    int nheld;
    uint64_t ok_allocs; /* successful sw_buffer_alloc calls */
    int failed;         /* a step failed (and the run stopped there) */
    int failed_in_alloc;
    const char *where;
} alloc_run;

static void run_release_all(alloc_run *r)
{
    for (int i = 0; i < r->nheld; i++)
        if (r->held[i] != NULL)
            ASSERT_OK(sw_buffer_free(r->held[i]));
    r->nheld = 0;
}

/* An allocation that hits the backend (the cache is emptied first).
 * Returns NULL after handling a failure. */
static sw_buffer *run_alloc(alloc_run *r, size_t size, const char *tag)
{
    ASSERT_OK(sw_empty_cache(r->dev));
    sw_memory_info before = test_info(r->dev);
    sw_buffer *b = (sw_buffer *)(uintptr_t)1;
    int rc = sw_buffer_alloc(r->dev, size, tag, &b);
    if (rc == SW_OK) {
        ASSERT_NOT_NULL(b);
        r->held[r->nheld++] = b;
        r->ok_allocs++;
        return b;
    }
    /* The fault surfaces as a clean OOM: a message, no buffer, nothing
     * lost (the ladder may have spilled what it holds to host memory on the
     * way: in_use + spilled is what it holds). */
    if (rc != SW_ERR_OOM)
        FAIL("alloc(%zu) under an allocation fault -> %s: %s", size,
             sw_err_name(rc), sw_last_error());
    ASSERT_TRUE(sw_last_error()[0] != '\0');
    ASSERT_MSG_BYTES(sw_last_error(), size);
    ASSERT_NULL(b);
    sw_memory_info after = test_info(r->dev);
    ASSERT_UEQ(after.in_use + after.spilled, before.in_use + before.spilled);
    ASSERT_UEQ(after.allocs, before.allocs);
    ASSERT_UEQ(after.ooms, before.ooms + 1);
    r->failed = 1;
    r->failed_in_alloc = 1;
    r->where = tag;
    return NULL;
}

/* Any other step: must succeed or fail with OOM (an op that needs device
 * memory of its own). */
static int run_step(alloc_run *r, int rc, const char *what)
{
    if (rc == SW_OK)
        return 1;
    if (rc != SW_ERR_OOM)
        FAIL("%s under an allocation fault -> %s: %s", what, sw_err_name(rc),
             sw_last_error());
    ASSERT_TRUE(sw_last_error()[0] != '\0');
    r->failed = 1;
    r->where = what;
    return 0;
}

static void expect_floats(sw_buffer *b, size_t n, float want)
{
    float *h = malloc(n * sizeof(float));
    ASSERT_NOT_NULL(h);
    ASSERT_OK(sw_buffer_read(b, 0, h, n * sizeof(float)));
    for (size_t i = 0; i < n; i++)
        if (h[i] != want)
            FAIL("element %zu is %g, expected %g", i, (double)h[i],
                 (double)want);
    free(h);
}

/* The fixed sequence: five backend allocations, with work in between. */
static void alloc_sequence(alloc_run *r)
{
    enum { N = 2048 };
    sw_buffer *a = run_alloc(r, 4096, "seq-a");
    if (!a)
        return;
    test_write_pattern(a, 1);
    sw_buffer *b = run_alloc(r, 8192, "seq-b");
    if (!b)
        return;
    sw_scalar one = {.f = 1.0};
    if (!run_step(r, sw_op_fill(b, SW_FLOAT32, N, one), "fill"))
        return;
    sw_buffer *c = run_alloc(r, 100000, "seq-c");
    if (!c)
        return;
    if (!run_step(r, sw_op_add(c, b, b, SW_FLOAT32, N), "add"))
        return;
    sw_buffer *d = run_alloc(r, 16384, "seq-d");
    if (!d)
        return;
    if (!run_step(r, sw_buffer_copy(d, 0, b, 0, N * sizeof(float)), "copy"))
        return;
    sw_scalar s = {.i = 0};
    if (!run_step(r, sw_op_sum(c, SW_FLOAT32, N, &s), "sum"))
        return;
    ASSERT_DBL_EQ(s.f, 2.0 * N);
    sw_buffer *e = run_alloc(r, 512, "seq-e");
    if (!e)
        return;
    /* Everything done so far is intact. */
    test_expect_pattern(a, 1);
    expect_floats(b, N, 1.0f);
    expect_floats(c, N, 2.0f);
    expect_floats(d, N, 1.0f);
}

static const char *const seq_tags[5] = {"seq-a", "seq-b", "seq-c", "seq-d",
                                        "seq-e"};

/* Runs the sequence under a fault at the Nth backend allocation for N = 1,
 * 2, ... until a run does not reach it.  Returns how many runs it fired in;
 * seen[k] counts the runs that failed at allocation seq_tags[k]. */
static int alloc_countdown(sw_device *dev, int persistent, int seen[5])
{
    sw_memory_info base = test_info_synced(dev);
    int fired_runs = 0, clean_run = 0;
    for (uint64_t nth = 1; nth <= MAX_RUNS; nth++) {
        sw_memory_info start = test_info_synced(dev);
        ASSERT_OK(sw_inject_fault(dev, SW_FAULT_ALLOC, nth, persistent));
        alloc_run r;
        memset(&r, 0, sizeof r);
        r.dev = dev;
        alloc_sequence(&r);
        ASSERT_OK(sw_inject_fault(dev, SW_FAULT_ALLOC, 0, 0));
        run_release_all(&r);

        /* Consistent afterwards: nothing in use, every successful
         * allocation freed once, the cache gives everything back. */
        ASSERT_OK(sw_empty_cache(dev));
        sw_memory_info end = test_info_synced(dev);
        ASSERT_UEQ(end.in_use, 0);
        ASSERT_UEQ(end.cached, 0);
        ASSERT_UEQ(end.allocs - start.allocs, r.ok_allocs);
        ASSERT_UEQ(end.frees - start.frees, r.ok_allocs);
        ASSERT_UEQ(end.ooms - start.ooms, r.failed_in_alloc ? 1 : 0);
        /* Everything went back to the device, but for the scratch block
         * the first sum reserves. */
        if (test_is_sim()) {
            ASSERT_ULE(end.device_free, base.device_free);
            ASSERT_UGE(end.device_free + SW_ALLOC_GRANULARITY,
                       base.device_free);
        }
        /* A fault absorbed by the allocation ladder's retry shows as a
         * retry; one that is not shows as a failed step. */
        int fired = r.failed || end.alloc_retries > start.alloc_retries;
        if (!fired) {
            ASSERT_FALSE(r.failed);
            ASSERT_UEQ(r.ok_allocs, 5);
            clean_run = 1;
            break;
        }
        fired_runs++;
        if (persistent && !r.failed)
            FAIL("run %d: a persistent fault fired but no step failed",
                 (int)nth);
        for (int k = 0; k < 5; k++)
            if (r.failed_in_alloc && strcmp(r.where, seq_tags[k]) == 0)
                seen[k]++;
    }
    ASSERT_TRUE(clean_run);
    return fired_runs;
}

TEST(fault_alloc_countdown)
{
    sw_device *dev = test_device();
    int seen[5] = {0};
    /* Transient: the allocation ladder may absorb the one failure with a
     * retry (counted in alloc_retries) or report it; either way each of the
     * five allocations meets the fault once. */
    int fired = alloc_countdown(dev, 0, seen);
    ASSERT_GE(fired, 5);
    /* Persistent from the Nth on: no retry helps, so the sequence sees
     * SW_ERR_OOM at each of its five allocations in turn and cleans up. */
    memset(seen, 0, sizeof seen);
    fired = alloc_countdown(dev, 1, seen);
    ASSERT_GE(fired, 5);
    for (int k = 0; k < 5; k++)
        if (seen[k] == 0)
            FAIL("no run failed at allocation %s (%d runs fired)",
                 seq_tags[k], fired);
    /* And the device works normally after all that. */
    sw_buffer *b = test_alloc(dev, 1 << 20, "after-faults");
    test_write_pattern(b, 77);
    test_expect_pattern(b, 77);
    ASSERT_OK(sw_buffer_free(b));
}

/* ------------------------------------------------------------------------
 * Copy faults on a countdown
 * ---------------------------------------------------------------------- */

typedef struct {
    sw_device *dev;
    int failed;
    const char *where;
} copy_run;

enum { CSZ = 4096 };

/* On a failure: SW_ERR_DEVICE with a message, then (disarmed) the device
 * buffer still holds exactly `model`. */
static int copy_step(copy_run *r, int rc, const char *what, sw_buffer *buf,
                     const unsigned char *model)
{
    if (rc == SW_OK)
        return 1;
    if (rc != SW_ERR_DEVICE)
        FAIL("%s under a copy fault -> %s: %s", what, sw_err_name(rc),
             sw_last_error());
    ASSERT_TRUE(sw_last_error()[0] != '\0');
    ASSERT_OK(sw_inject_fault(r->dev, SW_FAULT_COPY, 0, 0));
    unsigned char got[CSZ];
    ASSERT_OK(sw_buffer_read(buf, 0, got, CSZ));
    ASSERT_MEM_EQ(got, model, CSZ);
    r->failed = 1;
    r->where = what;
    return 0;
}

static int copy_read(copy_run *r, sw_buffer *buf, size_t off, void *dst,
                     size_t n, const unsigned char *model)
{
    memset(dst, 0xEE, n);
    int rc = sw_buffer_read(buf, off, dst, n);
    if (rc == SW_OK) {
        ASSERT_MEM_EQ(dst, model + off, n);
        return 1;
    }
    if (rc != SW_ERR_DEVICE)
        FAIL("read under a copy fault -> %s: %s", sw_err_name(rc),
             sw_last_error());
    /* A failed read wrote nothing to the destination. */
    for (size_t i = 0; i < n; i++)
        ASSERT_EQ(((unsigned char *)dst)[i], 0xEE);
    return copy_step(r, rc, "read", buf, model);
}

static int copy_write(copy_run *r, sw_buffer *buf, size_t off,
                      const void *src, size_t n, unsigned char *model)
{
    int rc = sw_buffer_write(buf, off, src, n);
    if (rc == SW_OK) {
        memcpy(model + off, src, n);
        return 1;
    }
    return copy_step(r, rc, "write", buf, model);
}

TEST(fault_copy_countdown)
{
    sw_device *dev = test_device();
    sw_buffer *a = test_alloc(dev, CSZ, "a");
    sw_buffer *b = test_alloc(dev, CSZ, "b");
    int fired_runs = 0, clean_run = 0;
    for (uint64_t nth = 1; nth <= MAX_RUNS; nth++) {
        static unsigned char ma[CSZ], mb[CSZ], src[CSZ], got[CSZ];
        /* Known contents, set up without a fault armed. */
        test_pattern(ma, CSZ, (uint32_t)nth);
        test_pattern(mb, CSZ, (uint32_t)nth + 1000);
        ASSERT_OK(sw_buffer_write(a, 0, ma, CSZ));
        ASSERT_OK(sw_buffer_write(b, 0, mb, CSZ));

        copy_run r = {dev, 0, NULL};
        ASSERT_OK(sw_inject_fault(dev, SW_FAULT_COPY, nth, 0));
        do {
            test_pattern(src, CSZ, 5000 + (uint32_t)nth);
            if (!copy_write(&r, a, 0, src, CSZ, ma))
                break;
            if (!copy_read(&r, a, 0, got, CSZ, ma))
                break;
            test_pattern(src, 100, 6000);
            if (!copy_write(&r, b, 1000, src, 100, mb))
                break;
            /* A device-to-device copy: fails cleanly or works. */
            int rc = sw_buffer_copy(b, 0, a, 1024, 512);
            if (rc == SW_OK) {
                memcpy(mb, ma + 1024, 512);
            } else if (!copy_step(&r, rc, "device copy", b, mb)) {
                break;
            }
            if (!copy_read(&r, b, 0, got, CSZ, mb))
                break;
            test_pattern(src, 50, 7000);
            if (!copy_write(&r, a, 100, src, 50, ma))
                break;
            if (!copy_read(&r, a, 64, got, 200, ma))
                break;
            if (!copy_read(&r, a, 0, got, CSZ, ma))
                break;
        } while (0);
        ASSERT_OK(sw_inject_fault(dev, SW_FAULT_COPY, 0, 0));
        /* Whatever happened, the buffers hold what the model says. */
        ASSERT_OK(sw_buffer_read(a, 0, got, CSZ));
        ASSERT_MEM_EQ(got, ma, CSZ);
        ASSERT_OK(sw_buffer_read(b, 0, got, CSZ));
        ASSERT_MEM_EQ(got, mb, CSZ);
        if (!r.failed) {
            clean_run = 1;
            break;
        }
        fired_runs++;
    }
    ASSERT_TRUE(clean_run);
    /* Each of the three writes and four reads failed once (the device
     * copy may count too). */
    ASSERT_GE(fired_runs, 7);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
}

/* ------------------------------------------------------------------------
 * Persistent faults
 * ---------------------------------------------------------------------- */

TEST(fault_alloc_persistent)
{
    sw_device *dev = test_device();
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_ALLOC, 3, 1));
    sw_buffer *a = test_alloc(dev, 1000, "first");
    sw_buffer *b = test_alloc(dev, 2000, "second");
    test_write_pattern(a, 1);
    test_pin(a); /* nothing to spill: the failure must surface as is */
    test_pin(b);
    sw_memory_info before = test_info(dev);
    /* The third backend allocation and every later one fail, whatever the
     * ladder retries. */
    for (int i = 0; i < 4; i++) {
        sw_buffer *out = (sw_buffer *)(uintptr_t)1;
        ASSERT_ERR(sw_buffer_alloc(dev, 3000 + 1000 * (size_t)i, "failing",
                                   &out),
                   SW_ERR_OOM);
        ASSERT_NULL(out);
        ASSERT_MSG_BYTES(sw_last_error(), 3000 + 1000 * (size_t)i);
    }
    sw_memory_info after = test_info(dev);
    ASSERT_UEQ(after.in_use, before.in_use);
    ASSERT_UEQ(after.allocs, before.allocs);
    ASSERT_UEQ(after.ooms, before.ooms + 4);
    /* Live buffers are unaffected. */
    test_expect_pattern(a, 1);
    test_unpin(a);
    test_unpin(b);

    /* Disarmed: allocations work again. */
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_ALLOC, 0, 0));
    sw_buffer *c = test_alloc(dev, 3000, "works-again");
    test_write_pattern(c, 3);
    test_expect_pattern(c, 3);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_buffer_free(c));

    /* From the first call on. */
    ASSERT_OK(sw_empty_cache(dev));
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_ALLOC, 1, 1));
    sw_buffer *out = NULL;
    ASSERT_ERR(sw_buffer_alloc(dev, 4096, "nope", &out), SW_ERR_OOM);
    ASSERT_ERR(sw_buffer_alloc(dev, 4096, "nope", &out), SW_ERR_OOM);
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_ALLOC, 0, 0));
    out = test_alloc(dev, 4096, "yes");
    ASSERT_OK(sw_buffer_free(out));
}

TEST(fault_copy_persistent)
{
    sw_device *dev = test_device();
    sw_buffer *a = test_alloc(dev, 1024, "a");
    unsigned char first[1024], second[1024], got[1024];
    test_pattern(first, sizeof first, 1);
    test_pattern(second, sizeof second, 2);

    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_COPY, 2, 1));
    ASSERT_OK(sw_buffer_write(a, 0, first, sizeof first)); /* the 1st */
    for (int i = 0; i < 3; i++) {
        memset(got, 0xEE, sizeof got);
        ASSERT_ERR(sw_buffer_read(a, 0, got, sizeof got), SW_ERR_DEVICE);
        for (size_t k = 0; k < sizeof got; k++)
            ASSERT_EQ(got[k], 0xEE);
        ASSERT_ERR(sw_buffer_write(a, 0, second, sizeof second),
                   SW_ERR_DEVICE);
    }
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_COPY, 0, 0));
    /* The failed writes wrote nothing. */
    ASSERT_OK(sw_buffer_read(a, 0, got, sizeof got));
    ASSERT_MEM_EQ(got, first, sizeof got);
    ASSERT_OK(sw_buffer_write(a, 0, second, sizeof second));
    ASSERT_OK(sw_buffer_read(a, 0, got, sizeof got));
    ASSERT_MEM_EQ(got, second, sizeof got);
    /* A copy fault is not an allocation failure. */
    ASSERT_UEQ(test_info(dev).ooms, 0);
    ASSERT_OK(sw_buffer_free(a));
}

TEST(fault_cache_hit_skips_backend)
{
    sw_device *dev = test_device();
    sw_buffer *a = test_alloc(dev, 65536, "cached-soon");
    sw_devmem ma;
    ASSERT_OK(sw_buffer_device_ptr(a, &ma));
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_device_synchronize(dev));

    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_ALLOC, 1, 1));
    /* Served from the cache: the backend is not asked, so no fault. */
    sw_buffer *b = test_alloc(dev, 65536, "from-cache");
    sw_devmem mb;
    ASSERT_OK(sw_buffer_device_ptr(b, &mb));
    ASSERT_UEQ(mb.base, ma.base);
    /* A size the cache does not have goes to the backend, and fails. */
    sw_buffer *out = NULL;
    ASSERT_ERR(sw_buffer_alloc(dev, 131072, "from-backend", &out),
               SW_ERR_OOM);
    ASSERT_NULL(out);
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_ALLOC, 0, 0));
    test_write_pattern(b, 4);
    test_expect_pattern(b, 4);
    ASSERT_OK(sw_buffer_free(b));
}
