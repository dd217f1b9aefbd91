/*
 * test-oom.c -- running out of device memory without a budget, the
 * allocation ladder, fragmentation, and sizes that can never fit.
 *
 * These run on a small simulated device (SPILLWAY_SIM_MEMORY=64M, set before
 * the process's first open), so filling it is cheap and exact.
 */
#include "test.h"
#include "tests.h"

#define MiB(n) ((uint64_t)(n) << 20)
#define MAX_BLOCKS 80

static sw_device *small_sim_device(void)
{
    test_require_sim();
    setenv("SPILLWAY_SIM_MEMORY", "64M", 1);
    sw_device *dev = test_device();
    sw_memory_info i = test_info(dev);
    ASSERT_UEQ(i.device_total, MiB(64));
    return dev;
}

/* Allocate 1 MiB blocks until the device says no; returns how many.  Each
 * is pinned, so that the allocation ladder cannot make room by spilling. */
static size_t fill_device(sw_device *dev, sw_buffer **blocks)
{
    size_t n = 0;
    for (;;) {
        ASSERT_LT(n, MAX_BLOCKS);
        char tag[32];
        snprintf(tag, sizeof tag, "fill-%zu", n);
        sw_buffer *b = (sw_buffer *)(uintptr_t)1;
        int rc = sw_buffer_alloc(dev, MiB(1), tag, &b);
        if (rc == SW_ERR_OOM) {
            ASSERT_NULL(b);
            return n;
        }
        ASSERT_OK(rc);
        test_pin(b);
        blocks[n++] = b;
    }
}

TEST(oom_fill_device)
{
    sw_device *dev = small_sim_device();
    sw_buffer *blocks[MAX_BLOCKS];
    size_t n = fill_device(dev, blocks);
    char msg[4096];
    snprintf(msg, sizeof msg, "%s", sw_last_error());
    /* The whole arena is usable (but for the library's reserve), and the
     * device really is full when it says so. */
    ASSERT_GE(n, 64 - (TEST_SIM_RESERVED + MiB(1) - 1) / MiB(1));
    ASSERT_LE(n, 64);
    sw_memory_info full = test_info_synced(dev);
    ASSERT_UEQ(full.in_use, MiB(n));
    ASSERT_ULT(full.device_free, MiB(1));
    ASSERT_UEQ(full.ooms, 1);
    ASSERT_UEQ(full.allocs, n);

    /* The message: what was asked, what is held, what the device has, and
     * the largest buffers by tag. */
    ASSERT_MSG_BYTES(msg, MiB(1));
    ASSERT_MSG_BYTES(msg, MiB(n));
    ASSERT_MSG_BYTES(msg, MiB(64));
    ASSERT_MSG_BYTES(msg, full.device_free);
    ASSERT_STR_ICONTAINS(msg, "free");
    ASSERT_STR_ICONTAINS(msg, "cached");
    ASSERT_STR_CONTAINS(msg, "fill-");
    ASSERT_STR_ICONTAINS(msg, "resident");

    /* Failing again (one granule more than is free) changes nothing but
     * the failure count. */
    size_t over = (size_t)full.device_free + 512;
    sw_buffer *out = (sw_buffer *)(uintptr_t)1;
    ASSERT_ERR(sw_buffer_alloc(dev, over, "one-granule-more", &out),
               SW_ERR_OOM);
    ASSERT_NULL(out);
    ASSERT_MSG_BYTES(sw_last_error(), over);
    sw_memory_info again = test_info_synced(dev);
    ASSERT_UEQ(again.in_use, full.in_use);
    ASSERT_UEQ(again.cached, full.cached);
    ASSERT_UEQ(again.allocs, full.allocs);
    ASSERT_UEQ(again.peak, full.peak);
    ASSERT_UEQ(again.ooms, full.ooms + 1);

    /* Every block is intact (the failed calls wrote nothing). */
    for (size_t i = 0; i < n; i += 9)
        test_write_pattern(blocks[i], (uint32_t)i);
    for (size_t i = 0; i < n; i += 9)
        test_expect_pattern(blocks[i], (uint32_t)i);

    /* A free makes the next allocation succeed. */
    test_unpin_free(blocks[10]);
    blocks[10] = test_alloc(dev, MiB(1), "refill");
    test_pin(blocks[10]);
    test_write_pattern(blocks[10], 99);
    test_expect_pattern(blocks[10], 99);
    for (size_t i = 0; i < n; i++)
        test_unpin_free(blocks[i]);
}

TEST(oom_ladder_empties_cache)
{
    sw_device *dev = small_sim_device();
    uint64_t free0 = test_info_synced(dev).device_free;
    /* 32 MiB cached, ~32 MiB free: a 48 MiB block fits only once the cache
     * is given back to the device. */
    sw_buffer *blocks[32];
    for (int i = 0; i < 32; i++)
        blocks[i] = test_alloc(dev, MiB(1), "soon-cached");
    for (int i = 0; i < 32; i++)
        ASSERT_OK(sw_buffer_free(blocks[i]));
    sw_memory_info i0 = test_info_synced(dev);
    ASSERT_UEQ(i0.cached, MiB(32));
    ASSERT_UEQ(i0.device_free, free0 - MiB(32));

    sw_buffer *big = test_alloc(dev, MiB(48), "big");
    sw_memory_info i1 = test_info_synced(dev);
    ASSERT_UEQ(i1.in_use, MiB(48));
    ASSERT_UEQ(i1.cached, 0);
    ASSERT_UEQ(i1.device_free, free0 - MiB(48));
    ASSERT_UEQ(i1.ooms, 0);
    ASSERT_UGE(i1.alloc_retries, 1);
    test_write_pattern(big, 48);
    test_expect_pattern(big, 48);
    ASSERT_OK(sw_buffer_free(big));
}

/* Sort buffers by device address. */
static int by_address(const void *x, const void *y)
{
    sw_devmem a, b;
    ASSERT_OK(sw_buffer_device_ptr(*(sw_buffer *const *)x, &a));
    ASSERT_OK(sw_buffer_device_ptr(*(sw_buffer *const *)y, &b));
    uintptr_t pa = a.base + a.offset, pb = b.base + b.offset;
    return pa < pb ? -1 : pa > pb;
}

TEST(oom_fragmentation)
{
    sw_device *dev = small_sim_device();
    sw_buffer *blocks[MAX_BLOCKS];
    size_t n = fill_device(dev, blocks);
    ASSERT_GE(n, 32);
    /* Free every other block in address order: half the device is free, in
     * holes of 1 MiB. */
    qsort(blocks, n, sizeof blocks[0], by_address);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % 2 == 1) {
            test_unpin_free(blocks[i]);
        } else {
            test_write_pattern(blocks[i], (uint32_t)i);
            blocks[kept++] = blocks[i];
        }
    }
    sw_memory_info before = test_info_synced(dev);
    ASSERT_UEQ(before.cached, MiB(n / 2));

    /* 2 MiB fits in no hole, whatever the ladder does. */
    sw_buffer *out = (sw_buffer *)(uintptr_t)1;
    ASSERT_ERR(sw_buffer_alloc(dev, MiB(2), "needs-two", &out), SW_ERR_OOM);
    ASSERT_NULL(out);
    char msg[4096];
    snprintf(msg, sizeof msg, "%s", sw_last_error());
    sw_memory_info after = test_info_synced(dev);
    ASSERT_UEQ(after.in_use, before.in_use);
    ASSERT_UEQ(after.allocs, before.allocs);
    ASSERT_UEQ(after.ooms, before.ooms + 1);
    /* The ladder emptied the cache on its way: the memory is the device's,
     * and the message says how much the device has free. */
    ASSERT_UEQ(after.cached, 0);
    ASSERT_UGE(after.device_free, MiB(n / 2));
    ASSERT_STR_ICONTAINS(msg, "free");
    ASSERT_MSG_BYTES(msg, MiB(2));
    ASSERT_MSG_BYTES(msg, after.device_free);

    /* 1 MiB still fits in a hole. */
    sw_buffer *one = test_alloc(dev, MiB(1), "fits-a-hole");
    ASSERT_OK(sw_buffer_free(one));
    for (size_t i = 0; i < kept; i++) {
        test_expect_pattern(blocks[i], (uint32_t)(2 * i));
        test_unpin_free(blocks[i]);
    }
    /* Whole again, the device has room for 2 MiB. */
    sw_buffer *two = test_alloc(dev, MiB(2), "whole-again");
    ASSERT_OK(sw_buffer_free(two));
}

TEST(alloc_too_large)
{
    sw_device *dev = test_device();
    sw_buffer *keep = test_alloc(dev, 4096, "keep");
    test_write_pattern(keep, 1);
    sw_memory_info before = test_info_synced(dev);

    /* Sizes that cannot even be rounded to the granularity, or that no
     * device has. */
    const size_t sizes[] = {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 510,
                            SIZE_MAX / 2 + 1, (size_t)1 << 62};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        sw_buffer *out = (sw_buffer *)(uintptr_t)1;
        ASSERT_ERR(sw_buffer_alloc(dev, sizes[i], "huge", &out),
                   SW_ERR_TOO_LARGE);
        ASSERT_NULL(out);
    }
    /* More than the device's capacity. */
    if (before.device_total != 0) {
        sw_buffer *out = (sw_buffer *)(uintptr_t)1;
        ASSERT_ERR(sw_buffer_alloc(dev, (size_t)before.device_total + 1,
                                   "over-capacity", &out),
                   SW_ERR_TOO_LARGE);
        ASSERT_NULL(out);
        ASSERT_ERR(sw_buffer_alloc(dev, (size_t)before.device_total * 2,
                                   "over-capacity", &out),
                   SW_ERR_TOO_LARGE);
        ASSERT_NULL(out);
    }
    sw_memory_info after = test_info_synced(dev);
    ASSERT_UEQ(after.in_use, before.in_use);
    ASSERT_UEQ(after.cached, before.cached);
    ASSERT_UEQ(after.allocs, before.allocs);
    ASSERT_UEQ(after.peak, before.peak);
    if (test_is_sim()) /* on a GPU the driver's figure moves by itself */
        ASSERT_UEQ(after.device_free, before.device_free);
    test_expect_pattern(keep, 1);
    ASSERT_OK(sw_buffer_free(keep));
}

TEST(oom_not_too_large)
{
    sw_device *dev = small_sim_device();
    /* All that is free at once fits; then nothing more does. */
    uint64_t free0 = test_info_synced(dev).device_free;
    sw_buffer *all = test_alloc(dev, free0, "everything");
    test_pin(all);
    sw_buffer *out = (sw_buffer *)(uintptr_t)1;
    ASSERT_ERR(sw_buffer_alloc(dev, 512, "nothing-left", &out), SW_ERR_OOM);
    ASSERT_NULL(out);
    test_unpin_free(all);
    ASSERT_OK(sw_empty_cache(dev));

    /* Larger than what is free, not than the device: OOM. */
    sw_buffer *half = test_alloc(dev, MiB(32), "half");
    test_pin(half);
    ASSERT_ERR(sw_buffer_alloc(dev, MiB(48), "more-than-free", &out),
               SW_ERR_OOM);
    ASSERT_NULL(out);
    ASSERT_MSG_BYTES(sw_last_error(), MiB(48));
    /* Larger than the device: TOO_LARGE, whatever is free. */
    ASSERT_ERR(sw_buffer_alloc(dev, MiB(64) + 512, "more-than-device", &out),
               SW_ERR_TOO_LARGE);
    ASSERT_NULL(out);
    test_unpin_free(half);
    ASSERT_ERR(sw_buffer_alloc(dev, MiB(64) + 1, "more-than-device", &out),
               SW_ERR_TOO_LARGE);
    ASSERT_NULL(out);
    sw_memory_info i = test_info_synced(dev);
    ASSERT_UEQ(i.in_use, 0);
    ASSERT_UEQ(i.allocs, 2);
}
