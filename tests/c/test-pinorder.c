/*
 * test-pinorder.c -- a pin orders after every queue's work on its buffers
 * (issue 34, item 3; DESIGN.md, "Decisions of session 4"): the caller's
 * kernel inside sw_launch_begin_q(q, ...) never sees a write still queued
 * on another queue land over its own, whether the pin takes the general
 * path (a buffer q has not used) or the warm one (q pinned it before);
 * the host's pin waits for every queue's work; queues past the 62nd,
 * which share one id, are told apart.  Each runs on every backend.
 */
#include "test.h"
#include "tests.h"

#define MiB(n) ((size_t)(n) << 20)

/* Long work on o: four fills of `value`, so that it is likely still
 * running when the caller's kernel is queued on q.  (Fills: the CUDA
 * stand-in runs them without NVRTC.) */
static void busy_on(sw_queue *o, sw_buffer *a, size_t n, int32_t value)
{
    sw_scalar v = {.i = value};
    for (int i = 0; i < 4; i++)
        ASSERT_OK(sw_op_fill_q(o, a, SW_INT32, n, v));
}

/* The caller's kernel on q inside a pin of a: a fill of `value`. */
static void pinned_fill(sw_queue *q, sw_buffer *const *args, int32_t value,
                        size_t n)
{
    sw_devmem p;
    ASSERT_OK(sw_launch_begin_q(q, args, 1, &p));
    sw_kernel_args f = {.kernel = SW_KERNEL_FILL, .dtype = SW_INT32,
                        .n = n, .out = p, .alpha = {.i = value}};
    ASSERT_OK(sw_launch_kernel_q(q, &f));
    ASSERT_OK(sw_launch_end_q(q, args, 1));
}

static void expect_all(sw_buffer *a, size_t n, int32_t want, int32_t *got,
                       int round, const char *what)
{
    ASSERT_OK(sw_buffer_read(a, 0, got, n * 4));
    for (size_t i = 0; i < n; i++)
        if (got[i] != want)
            FAIL("%s, round %d element %zu: %d, expected %d (work "
                 "queued before it landed over it)", what,
                 round, i, got[i], want);
}

/* A buffer q has not used (the general path): another queue's work on it,
 * queued before the pin, comes first.  Then one q pinned before, with the
 * same array of handles (the warm path, which took another queue's mark
 * for no work to wait for), and q alone again (warm, nothing to wait
 * for). */
static void pin_after_other_queue(size_t n, int rounds)
{
    sw_device *dev = test_device();
    int32_t *got = malloc(n * 4);
    ASSERT_NOT_NULL(got);
    sw_queue *q = NULL, *o = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    ASSERT_OK(sw_queue_create(dev, &o));
    for (int round = 0; round < rounds; round++) {
        sw_buffer *a = test_alloc(dev, n * 4, "a");
        busy_on(o, a, n, 100 + round);
        pinned_fill(q, &a, -1 - round, n);
        expect_all(a, n, -1 - round, got, round, "general path");
        ASSERT_OK(sw_buffer_free(a));
    }
    sw_buffer *a = test_alloc(dev, n * 4, "a");
    sw_buffer *args[1] = {a};
    pinned_fill(q, args, 7, n);
    /* (o's operations after q's work are ours to order.) */
    ASSERT_OK(sw_queue_synchronize(q));
    for (int round = 0; round < rounds; round++) {
        busy_on(o, a, n, 100 + round);
        pinned_fill(q, args, -1 - round, n);
        pinned_fill(q, args, -11 - round, n);
        expect_all(a, n, -11 - round, got, round, "warm path");
    }
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_queue_release(o));
    ASSERT_OK(sw_queue_release(q));
    free(got);
}

TEST(pinorder_pin_waits_for_other_queues)
{
    pin_after_other_queue(MiB(16) / 4, 4);
}

/* The same under ThreadSanitizer (the c-tsan suite runs the thread_
 * tests): on the simulated device the two queues' work runs on two
 * workers, whose writes to one address were a race. */
TEST(thread_pinorder_queues_write_in_order)
{
    pin_after_other_queue(MiB(1) / 4, 2);
}

/* Another queue holding a pin of its own: q waits for what it queued so
 * far, every time (more of its work may come before its pin ends). */
TEST(pinorder_waits_for_a_queue_still_pinning)
{
    sw_device *dev = test_device();
    const size_t n = MiB(16) / 4;
    int32_t *got = malloc(n * 4);
    ASSERT_NOT_NULL(got);
    sw_queue *q = NULL, *o = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    ASSERT_OK(sw_queue_create(dev, &o));
    sw_buffer *a = test_alloc(dev, n * 4, "a");
    sw_buffer *b = test_alloc(dev, 4096, "b");
    sw_buffer *ob[2] = {a, b};
    sw_devmem op[2];
    ASSERT_OK(sw_launch_begin_q(o, ob, 2, op));
    for (int round = 0; round < 3; round++) {
        sw_kernel_args f = {.kernel = SW_KERNEL_FILL, .dtype = SW_INT32,
                            .n = n, .out = op[0], .alpha = {.i = 5}};
        for (int i = 0; i < 4; i++)
            ASSERT_OK(sw_launch_kernel_q(o, &f));
        sw_buffer *args[1] = {a};
        pinned_fill(q, args, -1 - round, n);
        ASSERT_OK(sw_queue_synchronize(q));
        expect_all(a, n, -1 - round, got, round, "a queue still pinning");
    }
    ASSERT_OK(sw_launch_end_q(o, ob, 2));
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_queue_release(o));
    ASSERT_OK(sw_queue_release(q));
    free(got);
}

/* The host's pin after q's pin that came after o's work: every queue's
 * work is done when it returns (the bytes are there at once where the
 * host can address them). */
TEST(pinorder_host_pin_waits_for_every_queue)
{
    sw_device *dev = test_device();
    int addressable = 0;
    ASSERT_OK(sw_device_host_addressable(dev, &addressable));
    const size_t n = MiB(16) / 4;
    sw_queue *q = NULL, *o = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    ASSERT_OK(sw_queue_create(dev, &o));
    for (int round = 0; round < 4; round++) {
        sw_buffer *a = test_alloc(dev, n * 4, "a");
        sw_buffer *b = test_alloc(dev, n * 4, "b");
        busy_on(o, a, n, 100 + round);
        pinned_fill(q, &a, -1 - round, n);
        busy_on(o, b, n, 1); /* b: o's alone */
        sw_buffer *args[2] = {a, b};
        sw_devmem p[2];
        ASSERT_OK(sw_launch_begin_q(NULL, args, 2, p));
        if (addressable) {
            const int32_t *x = (const int32_t *)(p[0].base + p[0].offset);
            const int32_t *y = (const int32_t *)(p[1].base + p[1].offset);
            for (size_t i = 0; i < n; i += 997) {
                ASSERT_EQ(x[i], -1 - round);
                ASSERT_EQ(y[i], 1);
            }
        }
        ASSERT_OK(sw_launch_end_q(NULL, args, 2));
        ASSERT_OK(sw_buffer_free(a));
        ASSERT_OK(sw_buffer_free(b));
    }
    ASSERT_OK(sw_queue_release(o));
    ASSERT_OK(sw_queue_release(q));
}

/* Queues past the 62nd share one id (src/core/internal.h,
 * SW__QID_SHARED): one of them having used or waited for a buffer says
 * nothing of another.  A pin on one after another's work waits for it
 * (the warm path took the shared mark for its own), and an operation on
 * one after the default queue's work waits for that (another's first use
 * had marked the buffer as waited for). */
TEST(pinorder_queues_sharing_an_id)
{
    sw_device *dev = test_device();
    const size_t n = MiB(16) / 4;
    int32_t *got = malloc(n * 4);
    ASSERT_NOT_NULL(got);
    enum { NQ = 64 };
    sw_queue *qs[NQ];
    for (int i = 0; i < NQ; i++)
        ASSERT_OK(sw_queue_create(dev, &qs[i]));
    sw_queue *o = qs[NQ - 2], *q = qs[NQ - 1]; /* both past the 62nd */
    sw_buffer *a = test_alloc(dev, n * 4, "a");
    sw_buffer *args[1] = {a};
    pinned_fill(q, args, 7, n);
    ASSERT_OK(sw_queue_synchronize(q));
    for (int round = 0; round < 3; round++) {
        busy_on(o, a, n, 100 + round);
        pinned_fill(q, args, -1 - round, n);
        expect_all(a, n, -1 - round, got, round, "a queue sharing the id");
    }
    /* The default queue's long work, then o's first use of the buffer
     * (its last element, through a view), then q's fill of the rest: o's
     * and q's work touch no common byte. */
    sw_buffer *last = NULL, *rest = NULL;
    ASSERT_OK(sw_buffer_view(a, 4 * (n - 1), 4, &last));
    ASSERT_OK(sw_buffer_view(a, 0, 4 * (n - 1), &rest));
    for (int round = 0; round < 3; round++) {
        sw_scalar v = {.i = 100 + round};
        for (int i = 0; i < 4; i++)
            ASSERT_OK(sw_op_fill(a, SW_INT32, n, v));
        sw_scalar w = {.i = -1 - round};
        ASSERT_OK(sw_op_fill_q(o, last, SW_INT32, 1, w));
        ASSERT_OK(sw_op_fill_q(q, rest, SW_INT32, n - 1, w));
        expect_all(a, n, -1 - round, got, round,
                   "the default queue's, before a queue sharing the id");
    }
    ASSERT_OK(sw_buffer_free(last));
    ASSERT_OK(sw_buffer_free(rest));
    ASSERT_OK(sw_buffer_free(a));
    for (int i = 0; i < NQ; i++)
        ASSERT_OK(sw_queue_release(qs[i]));
    free(got);
}
