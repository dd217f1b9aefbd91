/*
 * test-native.c -- bringing your own kernels and streams (issue 25): pins
 * on a queue that end in stream order (sw_launch_begin_q/_end_q), the
 * host's pin (q NULL), and the runtime's own handles: a queue's native
 * stream, adopting a stream the caller owns, the device's context.  Each
 * runs on every backend (SW_TEST_DEVICE); the adoption of a stream made
 * with the runtime's own API runs where that runtime is (OpenCL, and the
 * CUDA and HIP drivers or their stand-ins).
 */
#include "test.h"
#include "tests.h"

#include "core/native.h" /* sw__queue_wrap_native_or_own */

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>

#ifdef SW_HAVE_OPENCL
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#endif

#define MiB(n) ((size_t)(n) << 20)

static sw_buffer_state state_of(sw_buffer *b)
{
    sw_buffer_state st;
    ASSERT_OK(sw_buffer_state_get(b, &st));
    return st;
}

static int native_supported(sw_device *dev)
{
    uintptr_t ctx = 0;
    int rc = sw_device_native_context(dev, &ctx);
    if (rc == SW_ERR_UNSUPPORTED)
        return 0;
    ASSERT_OK(rc);
    ASSERT_TRUE(ctx != 0);
    return 1;
}

/* int32 elements i * 3 + seed, and what scale by 2 makes of them. */
static void fill_ints(int32_t *v, size_t n, int32_t seed)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (int32_t)((uint32_t)i * 3u + (uint32_t)seed);
}

/* A pin on a queue ends in stream order: work queued on q inside the pin
 * (a raw launch on the pinned memory, the way a runtime's own kernel is
 * queued), then the end, then at once a budget that spills the buffer:
 * the copy out waits for q's work, so the host copy holds its result.
 * Repeated, with large buffers, so that the kernel is still running when
 * the spill comes. */
TEST(native_pin_on_queue_orders_later_spill)
{
    test_require_spill();
    sw_device *dev = test_device();
    const size_t n = MiB(16) / 4;
    int32_t *want = malloc(n * 4), *got = malloc(n * 4);
    ASSERT_NOT_NULL(want);
    ASSERT_NOT_NULL(got);
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    for (int round = 0; round < 4; round++) {
        sw_buffer *a = test_alloc(dev, n * 4, "a");
        fill_ints(want, n, round);
        ASSERT_OK(sw_buffer_write(a, 0, want, n * 4));
        sw_devmem p;
        ASSERT_OK(sw_launch_begin_q(q, &a, 1, &p));
        ASSERT_UEQ(test_pins_of(dev, a), 1);
        sw_kernel_args k = {.kernel = SW_KERNEL_SCALE, .dtype = SW_INT32,
                            .n = n, .out = p, .a = p, .alpha = {.i = 2}};
        ASSERT_OK(sw_launch_kernel_q(q, &k));
        ASSERT_OK(sw_launch_end_q(q, &a, 1));
        ASSERT_UEQ(test_pins_of(dev, a), 0);
        sw_memory_info m = test_info(dev);
        ASSERT_OK(sw_set_memory_budget(dev, m.in_use - test_round(n * 4) +
                                                SW_ALLOC_GRANULARITY));
        ASSERT_EQ(state_of(a), SW_SPILLED);
        ASSERT_OK(sw_set_memory_budget(dev, 0));
        ASSERT_OK(sw_buffer_read(a, 0, got, n * 4));
        for (size_t i = 0; i < n; i++)
            if (got[i] != (int32_t)((uint32_t)want[i] * 2u))
                FAIL("round %d element %zu: %d, expected %d (the spill "
                     "copied before the queue's work)", round, i, got[i],
                     (int32_t)((uint32_t)want[i] * 2u));
        ASSERT_OK(sw_buffer_free(a));
    }
    ASSERT_OK(sw_queue_release(q));
    free(want);
    free(got);
}

/* Inside the pin, host reads wait for the queue's work too, every time:
 * the first read's wait does not end the queue's claim (more of its work
 * may come before the end, as here).  Before, it did: the second read ran
 * at once, beside the queue's kernel. */
TEST(native_pin_reads_inside_wait_for_the_queue)
{
    sw_device *dev = test_device();
    const size_t n = MiB(16) / 4;
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    for (int round = 0; round < 3; round++) {
        sw_buffer *a = test_alloc(dev, n * 4, "a");
        sw_devmem p;
        ASSERT_OK(sw_launch_begin_q(q, &a, 1, &p));
        sw_kernel_args f = {.kernel = SW_KERNEL_FILL, .dtype = SW_INT32,
                            .n = n, .out = p, .alpha = {.i = 1}};
        ASSERT_OK(sw_launch_kernel_q(q, &f));
        int32_t x = 0;
        ASSERT_OK(sw_buffer_read(a, 4 * (n - 1), &x, 4));
        ASSERT_EQ(x, 1);
        sw_kernel_args k = {.kernel = SW_KERNEL_SCALE, .dtype = SW_INT32,
                            .n = n, .out = p, .a = p, .alpha = {.i = 3}};
        for (int i = 0; i < 4; i++)
            ASSERT_OK(sw_launch_kernel_q(q, &k));
        ASSERT_OK(sw_buffer_read(a, 4 * (n - 1), &x, 4));
        ASSERT_EQ(x, 81);
        ASSERT_OK(sw_launch_end_q(q, &a, 1));
        ASSERT_OK(sw_buffer_free(a));
    }
    ASSERT_OK(sw_queue_release(q));
}

/* The same for a free: memory freed right after the end goes to the next
 * allocation, whose writes must come after q's kernel. */
TEST(native_pin_on_queue_orders_reuse)
{
    sw_device *dev = test_device();
    const size_t n = MiB(8) / 4;
    int32_t *want = malloc(n * 4), *got = malloc(n * 4);
    ASSERT_NOT_NULL(want);
    ASSERT_NOT_NULL(got);
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    sw_buffer *keep = test_alloc(dev, n * 4, "keep");
    sw_scalar zero = {.i = 0};
    ASSERT_OK(sw_op_fill(keep, SW_INT32, n, zero));
    for (int round = 0; round < 4; round++) {
        sw_buffer *a = test_alloc(dev, n * 4, "a");
        sw_buffer *args[2] = {a, keep};
        sw_devmem p[2];
        ASSERT_OK(sw_launch_begin_q(q, args, 2, p));
        /* keep <- 1 * a + keep, a being garbage or earlier values: then a
         * is filled on q and copied into keep. */
        sw_kernel_args f = {.kernel = SW_KERNEL_FILL, .dtype = SW_INT32,
                            .n = n, .out = p[0], .alpha = {.i = round + 1}};
        ASSERT_OK(sw_launch_kernel_q(q, &f));
        sw_kernel_args c = {.kernel = SW_KERNEL_COPY, .dtype = SW_INT32,
                            .n = n, .out = p[1], .a = p[0]};
        ASSERT_OK(sw_launch_kernel_q(q, &c));
        ASSERT_OK(sw_launch_end_q(q, args, 2));
        ASSERT_OK(sw_buffer_free(a));
        /* The freed block, reused at once and written on the default
         * queue: after q's copy out of it. */
        sw_buffer *b = test_alloc(dev, n * 4, "b");
        sw_scalar v = {.i = -7};
        ASSERT_OK(sw_op_fill(b, SW_INT32, n, v));
        ASSERT_OK(sw_buffer_read(keep, 0, got, n * 4));
        for (size_t i = 0; i < n; i++)
            if (got[i] != round + 1)
                FAIL("round %d element %zu: %d, expected %d", round, i,
                     got[i], round + 1);
        ASSERT_OK(sw_buffer_free(b));
    }
    ASSERT_OK(sw_buffer_free(keep));
    ASSERT_OK(sw_queue_release(q));
    free(want);
    free(got);
}

/* The host's pin (q NULL) waits for the work queued on its buffers, on the
 * default queue and on other queues: on a device whose memory the host
 * can address, the bytes are there at once. */
TEST(native_pin_host_waits_for_queued_work)
{
    sw_device *dev = test_device();
    int addressable = 0;
    ASSERT_OK(sw_device_host_addressable(dev, &addressable));
    const size_t n = MiB(8) / 4;
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    for (int round = 0; round < 4; round++) {
        sw_buffer *a = test_alloc(dev, n * 4, "a");
        sw_buffer *b = test_alloc(dev, n * 4, "b");
        sw_scalar va = {.i = 11 + round}, vb = {.i = 22 + round};
        ASSERT_OK(sw_op_fill(a, SW_INT32, n, va));
        ASSERT_OK(sw_op_fill_q(q, b, SW_INT32, n, vb));
        sw_buffer *args[2] = {a, b};
        sw_devmem p[2];
        ASSERT_OK(sw_launch_begin_q(NULL, args, 2, p));
        if (addressable) {
            const int32_t *x = (const int32_t *)(p[0].base + p[0].offset);
            const int32_t *y = (const int32_t *)(p[1].base + p[1].offset);
            for (size_t i = 0; i < n; i += 997) {
                ASSERT_EQ(x[i], 11 + round);
                ASSERT_EQ(y[i], 22 + round);
            }
            /* The host writes through the pointer; the device sees it. */
            ((int32_t *)(p[0].base + p[0].offset))[5] = -5;
        }
        ASSERT_OK(sw_launch_end_q(NULL, args, 2));
        if (addressable) {
            int32_t v = 0;
            ASSERT_OK(sw_buffer_read(a, 5 * 4, &v, 4));
            ASSERT_EQ(v, -5);
        }
        ASSERT_OK(sw_buffer_free(a));
        ASSERT_OK(sw_buffer_free(b));
    }
    ASSERT_OK(sw_queue_release(q));
}

/* A spilled argument comes back for the pin (the host's: its copy in is
 * waited for), and what the device held comes back with it. */
TEST(native_pin_restores)
{
    test_require_spill();
    sw_device *dev = test_device();
    int addressable = 0;
    ASSERT_OK(sw_device_host_addressable(dev, &addressable));
    sw_buffer *a = test_alloc(dev, MiB(4), "a");
    test_write_pattern(a, 61);
    sw_buffer *b = test_alloc(dev, MiB(4), "b");
    test_write_pattern(b, 62);
    ASSERT_OK(sw_set_memory_budget(dev, MiB(4)));
    ASSERT_EQ(state_of(a), SW_SPILLED);
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    sw_devmem p;
    ASSERT_OK(sw_launch_begin_q(q, &a, 1, &p)); /* b goes out for it */
    ASSERT_EQ(state_of(a), SW_RESIDENT);
    ASSERT_EQ(state_of(b), SW_SPILLED);
    ASSERT_OK(sw_launch_end_q(q, &a, 1));
    ASSERT_OK(sw_launch_begin_q(NULL, &b, 1, &p));
    ASSERT_EQ(state_of(b), SW_RESIDENT);
    if (addressable)
        ASSERT_UEQ(test_pattern_check((const void *)(p.base + p.offset),
                                      MiB(4), 62),
                   (size_t)-1);
    ASSERT_OK(sw_launch_end_q(NULL, &b, 1));
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    test_expect_pattern(a, 61);
    test_expect_pattern(b, 62);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_queue_release(q));
}

/* The same buffer twice in a set is pinned twice (and unpinned twice);
 * pins nest; a view pins its base. */
TEST(native_pin_nested_and_duplicates)
{
    sw_device *dev = test_device();
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    sw_buffer *a = test_alloc(dev, 4096, "a");
    sw_buffer *v = NULL;
    ASSERT_OK(sw_buffer_view(a, 1024, 1024, &v));
    sw_buffer *set[3] = {a, a, v};
    sw_devmem p[3];
    ASSERT_OK(sw_launch_begin_q(q, set, 3, p));
    ASSERT_UEQ(test_pins_of(dev, a), 3);
    ASSERT_TRUE(p[0].base == p[1].base && p[0].base == p[2].base);
    ASSERT_UEQ(p[2].offset, p[0].offset + 1024);
    sw_devmem p2;
    ASSERT_OK(sw_launch_begin_q(NULL, &a, 1, &p2));
    ASSERT_UEQ(test_pins_of(dev, a), 4);
    ASSERT_OK(sw_launch_begin_q(q, &v, 1, &p2));
    ASSERT_UEQ(test_pins_of(dev, a), 5);
    ASSERT_OK(sw_launch_end_q(q, &v, 1));
    ASSERT_OK(sw_launch_end_q(NULL, &a, 1));
    ASSERT_OK(sw_launch_end_q(q, set, 3));
    ASSERT_UEQ(test_pins_of(dev, a), 0);
    /* An end with nothing to end changes nothing. */
    ASSERT_ERR(sw_launch_end_q(q, &a, 1), SW_ERR_INVALID_ARG);
    ASSERT_UEQ(test_pins_of(dev, a), 0);
    ASSERT_OK(sw_buffer_free(v));
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_queue_release(q));
}

/* Pins hold while the budget is lowered under them and the cache is
 * emptied: the pinned buffers stay where they are, the others go. */
TEST(native_pins_never_move)
{
    test_require_spill();
    sw_device *dev = test_device();
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    sw_buffer *a = test_alloc(dev, MiB(1), "a"), *b = test_alloc(dev, MiB(1), "b");
    sw_buffer *other = test_alloc(dev, MiB(1), "other");
    test_write_pattern(a, 71);
    test_write_pattern(b, 72);
    test_write_pattern(other, 73);
    sw_buffer *set[2] = {a, b};
    sw_devmem p[2], again[2];
    ASSERT_OK(sw_launch_begin_q(q, set, 2, p));
    ASSERT_OK(sw_set_memory_budget(dev, SW_ALLOC_GRANULARITY));
    ASSERT_OK(sw_empty_cache(dev));
    ASSERT_EQ(state_of(a), SW_RESIDENT);
    ASSERT_EQ(state_of(b), SW_RESIDENT);
    ASSERT_EQ(state_of(other), SW_SPILLED);
    /* A second pin of the same set gives the same memory. */
    ASSERT_OK(sw_launch_begin_q(q, set, 2, again));
    ASSERT_TRUE(again[0].base == p[0].base && again[1].base == p[1].base);
    ASSERT_OK(sw_launch_end_q(q, set, 2));
    ASSERT_OK(sw_launch_end_q(q, set, 2));
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    test_expect_pattern(a, 71);
    test_expect_pattern(b, 72);
    test_expect_pattern(other, 73);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_buffer_free(other));
    ASSERT_OK(sw_queue_release(q));
}

/* Bad input: each a clear error that pins and moves nothing. */
TEST(native_pin_bad_input)
{
    sw_device *dev = test_device();
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    sw_buffer *a = test_alloc(dev, 4096, "a");
    sw_buffer *dead = test_alloc(dev, 4096, "dead");
    ASSERT_OK(sw_buffer_free(dead));
    sw_devmem p[2] = {{1, 1}, {1, 1}};
    sw_buffer *set[2] = {a, dead};
    ASSERT_ERR(sw_launch_begin_q(q, set, 2, p), SW_ERR_INVALID_HANDLE);
    ASSERT_TRUE(p[0].base == 0 && p[1].base == 0); /* cleared */
    ASSERT_UEQ(test_pins_of(dev, a), 0);
    ASSERT_ERR(sw_launch_begin_q(NULL, set, 2, p), SW_ERR_INVALID_HANDLE);
    ASSERT_UEQ(test_pins_of(dev, a), 0);
    ASSERT_ERR(sw_launch_begin_q(q, NULL, 1, p), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_launch_begin_q(q, set, 1, NULL), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_launch_end_q(q, NULL, 1), SW_ERR_INVALID_ARG);
    ASSERT_OK(sw_launch_begin_q(q, set, 0, NULL)); /* nothing to pin */
    ASSERT_OK(sw_launch_end_q(q, set, 0));
    /* A released queue. */
    sw_queue *gone = NULL;
    ASSERT_OK(sw_queue_create(dev, &gone));
    ASSERT_OK(sw_queue_release(gone));
    ASSERT_ERR(sw_launch_begin_q(gone, &a, 1, p), SW_ERR_INVALID_HANDLE);
    ASSERT_UEQ(test_pins_of(dev, a), 0);
    /* A buffer of another device, or a queue of another. */
    const char *other_spec =
        strncmp(test_device_spec(), "host:", 5) == 0 ? "sim:0" : "host:0";
    sw_device *other = NULL;
    if (sw_device_open(other_spec, &other) == SW_OK) {
        sw_buffer *x = NULL;
        ASSERT_OK(sw_buffer_alloc(other, 4096, "x", &x));
        sw_buffer *mixed[2] = {a, x};
        int rc = sw_launch_begin_q(q, mixed, 2, p);
        if (rc != SW_ERR_INVALID_ARG && rc != SW_ERR_INVALID_HANDLE)
            FAIL("a buffer of %s with a queue of %s: %s", other_spec,
                 test_device_spec(), sw_err_name(rc));
        ASSERT_UEQ(test_pins_of(dev, a), 0);
        rc = sw_launch_begin_q(NULL, mixed, 2, p);
        if (rc != SW_ERR_INVALID_ARG && rc != SW_ERR_INVALID_HANDLE)
            FAIL("a host pin across devices: %s", sw_err_name(rc));
        ASSERT_UEQ(test_pins_of(dev, a), 0);
        sw_queue *oq = NULL;
        ASSERT_OK(sw_queue_create(other, &oq));
        ASSERT_ERR(sw_launch_begin_q(oq, &a, 1, p), SW_ERR_INVALID_ARG);
        ASSERT_STR_CONTAINS(sw_last_error(), "not on");
        ASSERT_UEQ(test_pins_of(dev, a), 0);
        ASSERT_OK(sw_queue_release(oq));
        ASSERT_OK(sw_buffer_free(x));
        ASSERT_OK(sw_device_close(other));
    }
    /* An end on another queue than the begin's still ends the pin it
     * names (pins are counts): but an end of what was never pinned is
     * refused and unpins nothing. */
    ASSERT_OK(sw_launch_begin_q(q, &a, 1, p));
    sw_buffer *twice[2] = {a, a};
    ASSERT_ERR(sw_launch_end_q(q, twice, 2), SW_ERR_INVALID_ARG);
    ASSERT_UEQ(test_pins_of(dev, a), 1);
    ASSERT_OK(sw_launch_end_q(q, &a, 1));
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_queue_release(q));
}

/* A set that cannot fit the budget together is refused before anything
 * moves, naming it. */
TEST(native_pin_set_too_large)
{
    test_require_spill();
    sw_device *dev = test_device();
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    sw_buffer *a = test_alloc(dev, MiB(1), "a"), *b = test_alloc(dev, MiB(1), "b");
    test_write_pattern(a, 81);
    test_write_pattern(b, 82);
    ASSERT_OK(sw_set_memory_budget(dev, MiB(1)));
    sw_memory_info before = test_info(dev);
    sw_buffer *set[2] = {a, b};
    sw_devmem p[2];
    ASSERT_ERR(sw_launch_begin_q(q, set, 2, p), SW_ERR_OOM);
    ASSERT_STR_CONTAINS(sw_last_error(), "nothing was moved");
    sw_memory_info m = test_info(dev);
    ASSERT_UEQ(m.in_use, before.in_use);
    ASSERT_UEQ(m.spilled, before.spilled);
    ASSERT_UEQ(m.cached, before.cached);
    ASSERT_UEQ(test_pins_of(dev, a), 0);
    ASSERT_UEQ(test_pins_of(dev, b), 0);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    test_expect_pattern(a, 81);
    test_expect_pattern(b, 82);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_queue_release(q));
}

/* ------------------------------------------------------------------------
 * Native handles
 * ---------------------------------------------------------------------- */

/* What spillway made is spillway's, never adopted: a queue's stream
 * (sw_queue_native) and the device's context are refused, saying to use
 * the queue itself, and the queue and the default queue are untouched.
 * (host:0's context is its default queue's address: adopting it, then
 * releasing the adoption, destroyed the default queue and aborted.) */
TEST(native_own_handles_refused)
{
    sw_device *dev = test_device();
    sw_queue *q = NULL, *q2 = (sw_queue *)(uintptr_t)0x1234;
    ASSERT_OK(sw_queue_create(dev, &q));
    uintptr_t h = 0, ctx = 0;
    int rc = sw_queue_native(q, &h);
    if (rc == SW_ERR_UNSUPPORTED) {
        ASSERT_OK(sw_queue_release(q));
        SKIP("%s has no native handles", test_device_spec());
    }
    ASSERT_OK(rc);
    ASSERT_TRUE(h != 0);
    ASSERT_ERR(sw_queue_wrap_native(dev, h, &q2), SW_ERR_INVALID_ARG);
    ASSERT_NULL(q2);
    ASSERT_STR_CONTAINS(sw_last_error(), "use that queue itself");
    rc = sw_device_native_context(dev, &ctx);
    if (rc != SW_ERR_UNSUPPORTED) {
        ASSERT_OK(rc);
        q2 = (sw_queue *)(uintptr_t)0x1234;
        ASSERT_ERR(sw_queue_wrap_native(dev, ctx, &q2), SW_ERR_INVALID_ARG);
        ASSERT_NULL(q2);
        ASSERT_STR_CONTAINS(sw_last_error(), "native context");
    }
    /* The queue and the default queue still work (fills and copies: no
     * kernel compiler needed). */
    const size_t n = 4096;
    sw_buffer *a = test_alloc(dev, n * 4, "a");
    sw_buffer *b = test_alloc(dev, n * 4, "b");
    sw_scalar one = {.i = 1}, two = {.i = 2};
    ASSERT_OK(sw_op_fill_q(q, a, SW_INT32, n, one));
    ASSERT_OK(sw_queue_synchronize(q));
    ASSERT_OK(sw_op_fill(b, SW_INT32, n, two));
    ASSERT_OK(sw_buffer_copy(a, 0, b, 0, 4 * 100));
    int32_t x = 0, y = 0;
    ASSERT_OK(sw_buffer_read(a, 4 * 99, &x, 4));
    ASSERT_OK(sw_buffer_read(a, 4 * 100, &y, 4));
    ASSERT_EQ(x, 2);
    ASSERT_EQ(y, 1);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_queue_release(q));
}

/* A DLPack consumer's stream that is spillway's own queue's (the Python
 * module's export): the internal form gives that queue, retained, where
 * the public one refuses; anything else it treats as the public one. */
TEST(native_own_stream_gives_its_queue)
{
    sw_device *dev = test_device();
    sw_queue *q = NULL, *same = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    uintptr_t h = 0;
    if (sw_queue_native(q, &h) == SW_ERR_UNSUPPORTED) {
        ASSERT_OK(sw_queue_release(q));
        SKIP("%s has no native handles", test_device_spec());
    }
    ASSERT_OK(sw__queue_wrap_native_or_own(dev, h, &same));
    ASSERT_PTR_EQ(same, q);
    ASSERT_OK(sw_queue_release(same)); /* its own reference */
    sw_scalar one = {.i = 1};
    sw_buffer *a = test_alloc(dev, 4096, "a");
    ASSERT_OK(sw_op_fill_q(q, a, SW_INT32, 1024, one));
    ASSERT_OK(sw_queue_synchronize(q));
    ASSERT_OK(sw_buffer_free(a));
    sw_queue *none = (sw_queue *)(uintptr_t)0x1234;
    ASSERT_ERR(sw__queue_wrap_native_or_own(dev, 0, &none),
               SW_ERR_INVALID_ARG);
    ASSERT_NULL(none);
    uintptr_t ctx = 0;
    if (sw_device_native_context(dev, &ctx) == SW_OK)
        ASSERT_ERR(sw__queue_wrap_native_or_own(dev, ctx, &none),
                   SW_ERR_INVALID_ARG);
    ASSERT_OK(sw_queue_release(q));
}

/* Whether arbitrary integers are safe to pass on this device: those
 * backends that look a handle up before anything reads through it (the
 * stand-in drivers, not a real CUDA, HIP or Level Zero driver) and OpenCL
 * (the kernel asked first, opencl.c). */
static int garbage_is_checked(void)
{
    const char *spec = test_device_spec();
    if (strncmp(spec, "cuda:", 5) == 0)
        return getenv("SPILLWAY_CUDA_LIBRARY") != NULL;
    if (strncmp(spec, "hip:", 4) == 0)
        return getenv("SPILLWAY_HIP_LIBRARY") != NULL;
    if (strncmp(spec, "ze:", 3) == 0)
        return getenv("SPILLWAY_ZE_LIBRARY") != NULL;
    return 1;
}

/* Handles that are not this device's streams are refused, and nothing is
 * made: another device's spillway queue and context (refused before any
 * driver reads them: OpenCL crashed on a simulated queue's address), and
 * integers that name nothing -- 1, an address with no memory, memory that
 * is no runtime's object. */
TEST(native_foreign_handles_refused)
{
    sw_device *dev = test_device();
    const char *other_spec =
        strncmp(test_device_spec(), "host:", 5) == 0 ? "sim:0" : "host:0";
    sw_device *other = NULL;
    ASSERT_OK(sw_device_open(other_spec, &other));
    sw_queue *oq = NULL, *q = (sw_queue *)(uintptr_t)0x1234;
    ASSERT_OK(sw_queue_create(other, &oq));
    uintptr_t oh = 0, oc = 0;
    ASSERT_OK(sw_queue_native(oq, &oh));
    ASSERT_OK(sw_device_native_context(other, &oc));
    ASSERT_ERR(sw_queue_wrap_native(dev, oh, &q), SW_ERR_INVALID_ARG);
    ASSERT_NULL(q);
    ASSERT_STR_CONTAINS(sw_last_error(), other_spec);
    ASSERT_STR_CONTAINS(sw_last_error(), "not of this device");
    ASSERT_ERR(sw_queue_wrap_native(dev, oc, &q), SW_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(sw_last_error(), "native context of");
    ASSERT_OK(sw_queue_release(oq));
    ASSERT_OK(sw_device_close(other));
    if (!garbage_is_checked())
        return;
    int rc = sw_queue_wrap_native(dev, 1, &q);
    if (rc == SW_ERR_UNSUPPORTED)
        return; /* no adoption on this device at all */
    ASSERT_EQ(rc, SW_ERR_INVALID_ARG);
    ASSERT_NULL(q);
    ASSERT_ERR(sw_queue_wrap_native(dev, 0x1000, &q), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_queue_wrap_native(dev, UINTPTR_MAX - 7, &q),
               SW_ERR_INVALID_ARG);
    static uint64_t zeros[16];
    ASSERT_ERR(sw_queue_wrap_native(dev, (uintptr_t)zeros, &q),
               SW_ERR_INVALID_ARG);
    uint64_t *heap = calloc(16, sizeof *heap);
    ASSERT_TRUE(heap != NULL);
    ASSERT_ERR(sw_queue_wrap_native(dev, (uintptr_t)heap, &q),
               SW_ERR_INVALID_ARG);
    ASSERT_NULL(q);
    free(heap);
}

/* Bad input for the native calls. */
TEST(native_handles_bad_input)
{
    sw_device *dev = test_device();
    uintptr_t h = 7;
    sw_queue *q = (sw_queue *)(uintptr_t)0x1234;
    ASSERT_ERR(sw_queue_wrap_native(dev, 0, &q), SW_ERR_INVALID_ARG);
    ASSERT_NULL(q);
    ASSERT_ERR(sw_queue_wrap_native(dev, 1, NULL), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_queue_native(NULL, &h), SW_ERR_INVALID_ARG);
    ASSERT_UEQ(h, 0);
    ASSERT_ERR(sw_device_native_context(dev, NULL), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_device_native_context(NULL, &h), SW_ERR_INVALID_ARG);
    sw_queue *gone = NULL;
    ASSERT_OK(sw_queue_create(dev, &gone));
    ASSERT_OK(sw_queue_release(gone));
    ASSERT_ERR(sw_queue_native(gone, &h), SW_ERR_INVALID_HANDLE);
    if (!native_supported(dev))
        return;
    /* A stream the runtime destroyed, where it can tell (OpenCL reads
     * through a released handle: not asked there). */
    if (strncmp(test_device_spec(), "opencl:", 7) != 0) {
        sw_queue *tmp = NULL;
        ASSERT_OK(sw_queue_create(dev, &tmp));
        uintptr_t th = 0;
        ASSERT_OK(sw_queue_native(tmp, &th));
        ASSERT_OK(sw_queue_release(tmp));
        /* A queue is destroyed once idle, at the next creation.  Its
         * address may be the new queue's: that is spillway's own, refused
         * as well. */
        sw_queue *next = NULL;
        ASSERT_OK(sw_device_synchronize(dev));
        ASSERT_OK(sw_queue_create(dev, &next));
        uintptr_t nh = 0;
        ASSERT_OK(sw_queue_native(next, &nh));
        sw_queue *adopted = (sw_queue *)(uintptr_t)0x1234;
        ASSERT_ERR(sw_queue_wrap_native(dev, th, &adopted),
                   SW_ERR_INVALID_ARG);
        ASSERT_NULL(adopted);
        ASSERT_STR_CONTAINS(sw_last_error(),
                            nh == th ? "use that queue itself" : "live");
        ASSERT_OK(sw_queue_release(next));
    }
}

/* ------------------------------------------------------------------------
 * Streams made with the runtime's own API
 * ---------------------------------------------------------------------- */

/* Work queued on an adopted stream, then a pin of a buffer on it: its
 * kernel runs there and a later spill waits for it. */
static void use_adopted(sw_device *dev, sw_queue *q)
{
    const size_t n = MiB(4) / 4;
    sw_buffer *a = test_alloc(dev, n * 4, "on-foreign");
    sw_scalar v = {.i = 9};
    ASSERT_OK(sw_op_fill_q(q, a, SW_INT32, n, v));
    sw_devmem p;
    ASSERT_OK(sw_launch_begin_q(q, &a, 1, &p));
    sw_kernel_args k = {.kernel = SW_KERNEL_SCALE, .dtype = SW_INT32,
                        .n = n, .out = p, .a = p, .alpha = {.i = 3}};
    ASSERT_OK(sw_launch_kernel_q(q, &k));
    ASSERT_OK(sw_launch_end_q(q, &a, 1));
    int32_t x = 0;
    ASSERT_OK(sw_buffer_read(a, 4 * (n - 1), &x, 4));
    ASSERT_EQ(x, 27);
    ASSERT_OK(sw_buffer_free(a));
}

TEST(native_opencl_adopts_a_command_queue)
{
#ifndef SW_HAVE_OPENCL
    SKIP("this build has no OpenCL backend");
#else
    if (strncmp(test_device_spec(), "opencl:", 7) != 0)
        SKIP("needs an OpenCL device");
    sw_device *dev = test_device();
    uintptr_t c = 0;
    ASSERT_OK(sw_device_native_context(dev, &c));
    cl_context ctx = (cl_context)c;
    cl_device_id did = NULL;
    ASSERT_EQ(clGetContextInfo(ctx, CL_CONTEXT_DEVICES, sizeof did, &did,
                               NULL),
              CL_SUCCESS);
    cl_int err = 0;
    cl_command_queue cq = clCreateCommandQueue(ctx, did, 0, &err);
    ASSERT_EQ(err, CL_SUCCESS);
    cl_uint refs0 = 0, refs = 0;
    ASSERT_EQ(clGetCommandQueueInfo(cq, CL_QUEUE_REFERENCE_COUNT,
                                    sizeof refs0, &refs0, NULL),
              CL_SUCCESS);
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_wrap_native(dev, (uintptr_t)cq, &q));
    ASSERT_EQ(clGetCommandQueueInfo(cq, CL_QUEUE_REFERENCE_COUNT,
                                    sizeof refs, &refs, NULL),
              CL_SUCCESS);
    ASSERT_GT(refs, refs0); /* spillway holds a reference of its own */
    use_adopted(dev, q);
    ASSERT_OK(sw_queue_release(q));
    ASSERT_OK(sw_device_synchronize(dev));
    /* Destroyed once seen idle, at a later creation (asked without
     * waiting: a marker on a queue others use): then spillway has let go
     * of its reference, and only of it. */
    for (int tries = 0; tries < 200; tries++) {
        sw_queue *reap = NULL;
        ASSERT_OK(sw_queue_create(dev, &reap));
        ASSERT_OK(sw_queue_release(reap));
        ASSERT_EQ(clGetCommandQueueInfo(cq, CL_QUEUE_REFERENCE_COUNT,
                                        sizeof refs, &refs, NULL),
                  CL_SUCCESS);
        if (refs == refs0)
            break;
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    ASSERT_EQ(refs, refs0);
    /* Out of order, and of another context: refused. */
    cl_command_queue ooo = clCreateCommandQueue(
        ctx, did, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
    if (err == CL_SUCCESS) {
        ASSERT_ERR(sw_queue_wrap_native(dev, (uintptr_t)ooo, &q),
                   SW_ERR_INVALID_ARG);
        ASSERT_STR_CONTAINS(sw_last_error(), "out of order");
        clReleaseCommandQueue(ooo);
    }
    cl_context other = clCreateContext(NULL, 1, &did, NULL, NULL, &err);
    ASSERT_EQ(err, CL_SUCCESS);
    cl_command_queue oq = clCreateCommandQueue(other, did, 0, &err);
    ASSERT_EQ(err, CL_SUCCESS);
    ASSERT_ERR(sw_queue_wrap_native(dev, (uintptr_t)oq, &q),
               SW_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(sw_last_error(), "another context");
    clReleaseCommandQueue(oq);
    clReleaseContext(other);
    clReleaseCommandQueue(cq);
#endif
}

/* A symbol of the library a backend loaded (already in the process). */
static void *loaded_symbol(const char *env, const char *dflt,
                           const char *name)
{
    const char *lib = getenv(env);
    if (lib == NULL || !*lib)
        lib = dflt;
    void *h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
    if (h == NULL)
        FAIL("%s is not loaded: %s", lib, dlerror());
    void *p = dlsym(h, name);
    dlclose(h);
    if (p == NULL)
        FAIL("%s lacks %s", lib, name);
    return p;
}

#define LOADED(env, dflt, var, name)                                          \
    do {                                                                      \
        void *p_ = loaded_symbol(env, dflt, name);                            \
        memcpy(&(var), &p_, sizeof p_);                                       \
    } while (0)

TEST(native_cuda_adopts_a_stream)
{
    if (strncmp(test_device_spec(), "cuda:", 5) != 0)
        SKIP("needs a CUDA device (or its stand-in)");
    sw_device *dev = test_device();
    uintptr_t c = 0;
    ASSERT_OK(sw_device_native_context(dev, &c));
    int (*push)(void *), (*pop)(void **), (*create)(void **, unsigned),
        (*destroy)(void *), (*sync)(void *);
    LOADED("SPILLWAY_CUDA_LIBRARY", "libcuda.so.1", push,
           "cuCtxPushCurrent_v2");
    LOADED("SPILLWAY_CUDA_LIBRARY", "libcuda.so.1", pop, "cuCtxPopCurrent_v2");
    LOADED("SPILLWAY_CUDA_LIBRARY", "libcuda.so.1", create, "cuStreamCreate");
    LOADED("SPILLWAY_CUDA_LIBRARY", "libcuda.so.1", destroy,
           "cuStreamDestroy_v2");
    LOADED("SPILLWAY_CUDA_LIBRARY", "libcuda.so.1", sync,
           "cuStreamSynchronize");
    void *stream = NULL, *popped = NULL;
    ASSERT_EQ(push((void *)c), 0);
    ASSERT_EQ(create(&stream, 1 /* CU_STREAM_NON_BLOCKING */), 0);
    ASSERT_EQ(pop(&popped), 0);
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_wrap_native(dev, (uintptr_t)stream, &q));
    use_adopted(dev, q);
    ASSERT_OK(sw_queue_release(q));
    ASSERT_OK(sw_device_synchronize(dev));
    ASSERT_ERR(sw_queue_wrap_native(dev, 0x1, &q), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_queue_wrap_native(dev, 0x2, &q), SW_ERR_INVALID_ARG);
    ASSERT_EQ(push((void *)c), 0);
    ASSERT_EQ(sync(stream), 0);
    ASSERT_EQ(destroy(stream), 0);
    ASSERT_EQ(pop(&popped), 0);
    /* Destroyed: the driver says so (the stand-in always; a driver where
     * it can tell). */
    if (getenv("SPILLWAY_CUDA_LIBRARY") != NULL)
        ASSERT_ERR(sw_queue_wrap_native(dev, (uintptr_t)stream, &q),
                   SW_ERR_INVALID_ARG);
}

TEST(native_hip_adopts_a_stream)
{
    if (strncmp(test_device_spec(), "hip:", 4) != 0)
        SKIP("needs a HIP device (or its stand-in)");
    sw_device *dev = test_device();
    int (*create)(void **, unsigned), (*destroy)(void *), (*sync)(void *);
    LOADED("SPILLWAY_HIP_LIBRARY", "libamdhip64.so", create,
           "hipStreamCreateWithFlags");
    LOADED("SPILLWAY_HIP_LIBRARY", "libamdhip64.so", destroy,
           "hipStreamDestroy");
    LOADED("SPILLWAY_HIP_LIBRARY", "libamdhip64.so", sync,
           "hipStreamSynchronize");
    uintptr_t c = 0;
    ASSERT_ERR(sw_device_native_context(dev, &c), SW_ERR_UNSUPPORTED);
    void *stream = NULL;
    ASSERT_EQ(create(&stream, 1 /* hipStreamNonBlocking */), 0);
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_wrap_native(dev, (uintptr_t)stream, &q));
    use_adopted(dev, q);
    ASSERT_OK(sw_queue_release(q));
    ASSERT_OK(sw_device_synchronize(dev));
    ASSERT_EQ(sync(stream), 0);
    ASSERT_EQ(destroy(stream), 0);
    if (getenv("SPILLWAY_HIP_LIBRARY") != NULL)
        ASSERT_ERR(sw_queue_wrap_native(dev, (uintptr_t)stream, &q),
                   SW_ERR_INVALID_ARG);
}

/* ------------------------------------------------------------------------
 * Threads
 * ---------------------------------------------------------------------- */

typedef struct {
    sw_device *dev;
    sw_buffer *shared; /* every thread pins it, reading */
    int index;
    atomic_int *failed;
} pin_worker;

/* Each thread: its own queue and buffers; pins of its buffers and the
 * shared one, its kernel between, on its queue or the host's; the budget
 * moves under them (the main thread); every result checked. */
static void *pin_thread(void *arg)
{
    pin_worker *w = arg;
    const size_t n = 16384;
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(w->dev, &q));
    sw_buffer *mine = test_alloc(w->dev, n * 4, "mine");
    int32_t *host = malloc(n * 4);
    ASSERT_NOT_NULL(host);
    for (int it = 0; it < 200; it++) {
        int32_t v = w->index * 1000 + it;
        sw_scalar s = {.i = v};
        ASSERT_OK(sw_op_fill(mine, SW_INT32, n, s));
        sw_buffer *set[2] = {mine, w->shared};
        sw_devmem p[2];
        int rc;
        sw_queue *on = (it & 1) ? q : NULL;
        while ((rc = sw_launch_begin_q(on, set, 2, p)) == SW_ERR_OOM)
            ; /* the budget: other threads' pins hold the rest */
        ASSERT_OK(rc);
        /* mine <- mine + shared (shared holds 1s): raw, on q; on the
         * host's pin, on the default queue then waited for. */
        sw_kernel_args k = {.kernel = SW_KERNEL_ADD, .dtype = SW_INT32,
                            .n = n, .out = p[0], .a = p[0], .b = p[1]};
        if (on != NULL) {
            ASSERT_OK(sw_launch_kernel_q(q, &k));
        } else {
            ASSERT_OK(sw_launch_kernel(w->dev, &k));
            ASSERT_OK(sw_device_synchronize(w->dev));
        }
        ASSERT_OK(sw_launch_end_q(on, set, 2));
        ASSERT_OK(sw_buffer_read(mine, 0, host, n * 4));
        for (size_t i = 0; i < n; i += 61)
            if (host[i] != v + 1) {
                atomic_store(w->failed, 1);
                FAIL("thread %d iteration %d element %zu: %d, expected %d",
                     w->index, it, i, host[i], v + 1);
            }
    }
    free(host);
    ASSERT_OK(sw_buffer_free(mine));
    ASSERT_OK(sw_queue_release(q));
    return NULL;
}

TEST(thread_native_pins)
{
    sw_device *dev = test_device();
    enum { NT = 4 };
    sw_buffer *shared = test_alloc(dev, 16384 * 4, "shared");
    sw_scalar one = {.i = 1};
    ASSERT_OK(sw_op_fill(shared, SW_INT32, 16384, one));
    pthread_t t[NT];
    pin_worker w[NT];
    atomic_int failed = 0;
    for (int i = 0; i < NT; i++) {
        w[i] = (pin_worker){dev, shared, i, &failed};
        ASSERT_EQ(pthread_create(&t[i], NULL, pin_thread, &w[i]), 0);
    }
    int can_spill = test_can_spill();
    for (int r = 0; r < 20 && can_spill; r++) {
        /* Room for two threads' pins at a time, and none. */
        ASSERT_OK(sw_set_memory_budget(dev, r % 3 == 2 ? 0 : 6 * 16384 * 4));
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < NT; i++)
        ASSERT_EQ(pthread_join(t[i], NULL), 0);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    ASSERT_EQ(atomic_load(&failed), 0);
    ASSERT_OK(sw_buffer_free(shared));
}
