/*
 * test-budget.c -- sw_set_memory_budget: in_use + cached may not pass it; an
 * allocation that would first trims the cache, then fails with SW_ERR_OOM
 * and a message that says why.
 */
#include "test.h"
#include "tests.h"

#define KiB(n) ((uint64_t)(n) << 10)

TEST(budget_get_set)
{
    sw_device *dev = test_device();
    uint64_t b = 77;
    ASSERT_OK(sw_get_memory_budget(dev, &b));
    ASSERT_UEQ(b, 0);
    ASSERT_OK(sw_set_memory_budget(dev, 1 << 20));
    ASSERT_OK(sw_get_memory_budget(dev, &b));
    ASSERT_UEQ(b, 1 << 20);
    ASSERT_UEQ(test_info(dev).budget, 1 << 20);
    /* Not a multiple of the granularity: kept as given. */
    ASSERT_OK(sw_set_memory_budget(dev, 1000001));
    ASSERT_OK(sw_get_memory_budget(dev, &b));
    ASSERT_UEQ(b, 1000001);
    ASSERT_OK(sw_set_memory_budget(dev, UINT64_MAX));
    ASSERT_OK(sw_get_memory_budget(dev, &b));
    ASSERT_UEQ(b, UINT64_MAX);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    ASSERT_OK(sw_get_memory_budget(dev, &b));
    ASSERT_UEQ(b, 0);
    ASSERT_UEQ(test_info(dev).budget, 0);
    /* With a huge budget allocations work as without one. */
    ASSERT_OK(sw_set_memory_budget(dev, UINT64_MAX));
    sw_buffer *a = test_alloc(dev, KiB(64), "under-huge-budget");
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_set_memory_budget(dev, 0));
}

TEST(budget_trims_cache)
{
    sw_device *dev = test_device();
    int sim = test_is_sim();
    sw_memory_info i0 = test_info_synced(dev);
    ASSERT_OK(sw_set_memory_budget(dev, KiB(512)));

    sw_buffer *a = test_alloc(dev, KiB(256), "a");
    sw_buffer *b = test_alloc(dev, KiB(128), "b");
    test_write_pattern(a, 1);
    ASSERT_OK(sw_buffer_free(b));
    sw_memory_info i1 = test_info_synced(dev);
    ASSERT_UEQ(i1.in_use, KiB(256));
    ASSERT_UEQ(i1.cached, KiB(128));

    /* 256K in use + 128K cached + 256K > 512K: the cache goes first, and
     * then it fits exactly. */
    sw_buffer *c = test_alloc(dev, KiB(256), "c");
    sw_memory_info i2 = test_info_synced(dev);
    ASSERT_UEQ(i2.in_use, KiB(512));
    ASSERT_UEQ(i2.cached, 0);
    ASSERT_UEQ(i2.ooms, 0);
    ASSERT_ULE(i2.in_use + i2.cached, KiB(512));
    if (sim) /* the trimmed block went back to the device */
        ASSERT_UEQ(i2.device_free, i0.device_free - KiB(512));
    test_write_pattern(c, 2);
    test_expect_pattern(a, 1);
    test_expect_pattern(c, 2);

    /* Within a (raised) budget the cache is kept. */
    ASSERT_OK(sw_buffer_free(c));
    ASSERT_OK(sw_set_memory_budget(dev, KiB(1024)));
    sw_buffer *d = test_alloc(dev, KiB(64), "d");
    sw_memory_info i3 = test_info_synced(dev);
    ASSERT_UEQ(i3.in_use, KiB(320));
    ASSERT_UEQ(i3.cached, KiB(256));
    ASSERT_OK(sw_buffer_free(d));
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_set_memory_budget(dev, 0));
}

TEST(budget_trims_oldest_first)
{
    sw_device *dev = test_device();
    ASSERT_OK(sw_set_memory_budget(dev, KiB(1024)));
    sw_buffer *x = test_alloc(dev, KiB(256), "x");
    sw_buffer *y = test_alloc(dev, KiB(128), "y");
    sw_devmem my;
    ASSERT_OK(sw_buffer_device_ptr(y, &my));
    ASSERT_OK(sw_buffer_free(x)); /* cached first: the oldest */
    ASSERT_OK(sw_buffer_free(y));
    ASSERT_UEQ(test_info_synced(dev).cached, KiB(384));

    /* 384K cached + 768K > 1024K: trimming x's block alone makes room, and
     * it is the oldest; y's stays cached. */
    sw_buffer *z = test_alloc(dev, KiB(768), "z");
    sw_memory_info i = test_info_synced(dev);
    ASSERT_UEQ(i.in_use, KiB(768));
    ASSERT_UEQ(i.cached, KiB(128));
    sw_buffer *y2 = test_alloc(dev, KiB(128), "y2");
    sw_devmem my2;
    ASSERT_OK(sw_buffer_device_ptr(y2, &my2));
    ASSERT_UEQ(my2.base, my.base);
    ASSERT_UEQ(test_info(dev).cached, 0);
    ASSERT_OK(sw_buffer_free(y2));
    ASSERT_OK(sw_buffer_free(z));
    ASSERT_OK(sw_set_memory_budget(dev, 0));
}

TEST(budget_oom_message)
{
    sw_device *dev = test_device();
    ASSERT_OK(sw_set_memory_budget(dev, KiB(1024)));
    /* Seven live buffers of distinct sizes, 7 + 8 + ... + 13 = 70 KiB... */
    sw_buffer *small[7];
    for (int i = 0; i < 7; i++) {
        char tag[32];
        snprintf(tag, sizeof tag, "tensor-%c", 'A' + i);
        small[i] = test_alloc(dev, KiB(7 + i), tag);
    }
    /* ...and a big one: in_use 70K + 900K = 970K. */
    sw_buffer *big = test_alloc(dev, KiB(900), "the-big-one");
    /* Pinned: nothing can be moved out of the way. */
    for (int i = 0; i < 7; i++)
        test_pin(small[i]);
    test_pin(big);
    sw_memory_info before = test_info_synced(dev);
    ASSERT_UEQ(before.in_use, KiB(970));

    sw_buffer *out = (sw_buffer *)(uintptr_t)1;
    ASSERT_ERR(sw_buffer_alloc(dev, KiB(100), "wanted", &out), SW_ERR_OOM);
    ASSERT_NULL(out);
    char msg[4096];
    snprintf(msg, sizeof msg, "%s", sw_last_error());

    /* Requested bytes, in_use, cached, budget, device free/total. */
    ASSERT_MSG_BYTES(msg, KiB(100));
    ASSERT_MSG_BYTES(msg, KiB(970));
    ASSERT_MSG_BYTES(msg, KiB(1024));
    ASSERT_STR_ICONTAINS(msg, "budget");
    ASSERT_STR_ICONTAINS(msg, "cached");
    ASSERT_STR_ICONTAINS(msg, "free");
    if (before.device_total != 0)
        ASSERT_MSG_BYTES(msg, before.device_total);
    if (before.device_free_known)
        ASSERT_MSG_BYTES(msg, before.device_free);
    /* The five largest live buffers, with tags and states; not the two
     * smallest. */
    ASSERT_STR_CONTAINS(msg, "the-big-one");
    ASSERT_STR_CONTAINS(msg, "tensor-G");
    ASSERT_STR_CONTAINS(msg, "tensor-F");
    ASSERT_STR_CONTAINS(msg, "tensor-E");
    ASSERT_STR_CONTAINS(msg, "tensor-D");
    if (strstr(msg, "tensor-C") != NULL || strstr(msg, "tensor-B") != NULL ||
        strstr(msg, "tensor-A") != NULL)
        FAIL("the message lists more than the five largest buffers: %s",
             msg);
    ASSERT_STR_ICONTAINS(msg, "resident");
    ASSERT_MSG_BYTES(msg, KiB(900));

    /* Nothing changed but the count of failures. */
    sw_memory_info after = test_info_synced(dev);
    ASSERT_UEQ(after.in_use, before.in_use);
    ASSERT_UEQ(after.cached, before.cached);
    ASSERT_UEQ(after.allocs, before.allocs);
    ASSERT_UEQ(after.peak, before.peak);
    ASSERT_UEQ(after.ooms, before.ooms + 1);

    /* Freeing makes room. */
    test_unpin_free(big);
    sw_buffer *fits = test_alloc(dev, KiB(100), "fits-now");
    test_write_pattern(fits, 3);
    test_expect_pattern(fits, 3);
    ASSERT_OK(sw_buffer_free(fits));
    for (int i = 0; i < 7; i++)
        test_unpin_free(small[i]);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
}

TEST(budget_below_one_alloc)
{
    sw_device *dev = test_device();
    ASSERT_OK(sw_set_memory_budget(dev, KiB(64)));
    sw_buffer *keep = test_alloc(dev, KiB(16), "keep");
    test_write_pattern(keep, 6);
    test_pin(keep);
    sw_memory_info before = test_info_synced(dev);

    /* More than the whole budget, far less than the device: OOM, not
     * TOO_LARGE, and nothing changes. */
    sw_buffer *out = (sw_buffer *)(uintptr_t)1;
    ASSERT_ERR(sw_buffer_alloc(dev, KiB(128), "too-big-for-budget", &out),
               SW_ERR_OOM);
    ASSERT_NULL(out);
    const char *msg = sw_last_error();
    ASSERT_MSG_BYTES(msg, KiB(128));
    ASSERT_MSG_BYTES(msg, KiB(64));
    ASSERT_STR_ICONTAINS(msg, "budget");
    ASSERT_STR_CONTAINS(msg, "keep");

    sw_memory_info after = test_info_synced(dev);
    ASSERT_UEQ(after.in_use, before.in_use);
    ASSERT_UEQ(after.cached, before.cached);
    ASSERT_UEQ(after.allocs, before.allocs);
    ASSERT_UEQ(after.frees, before.frees);
    ASSERT_UEQ(after.peak, before.peak);
    ASSERT_UEQ(after.ooms, before.ooms + 1);
    ASSERT_UEQ(after.device_free, before.device_free);

    /* Exactly up to the budget is fine: 16K + 48K = 64K. */
    sw_buffer *rest = test_alloc(dev, KiB(48), "rest");
    test_pin(rest);
    ASSERT_UEQ(test_info(dev).in_use, KiB(64));
    /* One granule more is not. */
    ASSERT_ERR(sw_buffer_alloc(dev, 1, "one-more", &out), SW_ERR_OOM);
    ASSERT_NULL(out);
    test_expect_pattern(keep, 6);
    test_unpin_free(rest);
    test_unpin_free(keep);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
}

TEST(budget_below_held)
{
    sw_device *dev = test_device();
    sw_buffer *a = test_alloc(dev, KiB(256), "held");
    test_write_pattern(a, 4);
    /* A budget below what is held is accepted even when nothing can move
     * (the held buffer pinned, so that it cannot be spilled)... */
    test_pin(a);
    ASSERT_OK(sw_set_memory_budget(dev, KiB(128)));
    uint64_t b = 0;
    ASSERT_OK(sw_get_memory_budget(dev, &b));
    ASSERT_UEQ(b, KiB(128));
    /* ...existing buffers keep working... */
    test_expect_pattern(a, 4);
    /* ...and the next allocation that needs room fails. */
    sw_buffer *out = NULL;
    ASSERT_ERR(sw_buffer_alloc(dev, 1024, "no-room", &out), SW_ERR_OOM);
    ASSERT_NULL(out);
    ASSERT_UEQ(test_info(dev).in_use, KiB(256));

    /* Freeing is always possible; the block is cached (over budget). */
    test_unpin_free(a);
    sw_memory_info i = test_info_synced(dev);
    ASSERT_UEQ(i.in_use, 0);
    ASSERT_UEQ(i.cached, KiB(256));
    /* The next allocation trims the cache and then fits. */
    sw_buffer *c = test_alloc(dev, KiB(64), "fits-after-trim");
    i = test_info_synced(dev);
    ASSERT_UEQ(i.in_use, KiB(64));
    ASSERT_UEQ(i.cached, 0);
    test_write_pattern(c, 5);
    test_expect_pattern(c, 5);
    ASSERT_OK(sw_buffer_free(c));
    ASSERT_OK(sw_set_memory_budget(dev, 0));
}

TEST(budget_zero_is_none)
{
    sw_device *dev = test_device();
    ASSERT_OK(sw_set_memory_budget(dev, KiB(64)));
    sw_buffer *out = NULL;
    ASSERT_ERR(sw_buffer_alloc(dev, KiB(128), "over", &out), SW_ERR_OOM);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    ASSERT_UEQ(test_info(dev).budget, 0);
    sw_buffer *a = test_alloc(dev, KiB(128), "no-budget");
    sw_buffer *b = test_alloc(dev, KiB(1024), "no-budget-2");
    ASSERT_UEQ(test_info(dev).in_use, KiB(1152));
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
    /* Without a budget freed blocks stay cached. */
    ASSERT_UEQ(test_info_synced(dev).cached, KiB(1152));
}

/* A budget below what is held spills at once, least recently used first,
 * down to the budget (the cache first), and loses nothing. */
TEST(budget_below_held_spills_at_once)
{
    test_require_spill();
    sw_device *dev = test_device();
    sw_buffer *old = test_alloc(dev, KiB(256), "oldest");
    sw_buffer *mid = test_alloc(dev, KiB(64), "middle");
    sw_buffer *cached = test_alloc(dev, KiB(32), "to the cache");
    sw_buffer *recent = test_alloc(dev, KiB(64), "recent");
    test_write_pattern(old, 1);
    test_write_pattern(mid, 2);
    test_write_pattern(recent, 3);
    ASSERT_OK(sw_buffer_free(cached));
    sw_memory_info before = test_info_synced(dev);
    ASSERT_UEQ(before.in_use, KiB(384));
    ASSERT_UEQ(before.cached, KiB(32));

    ASSERT_OK(sw_set_memory_budget(dev, KiB(160)));
    sw_memory_info after = test_info_synced(dev);
    ASSERT_ULE(after.in_use + after.cached, KiB(160));
    ASSERT_UEQ(after.cached, 0);
    /* The oldest went (256 KiB), the rest fit. */
    sw_buffer_state st;
    ASSERT_OK(sw_buffer_state_get(old, &st));
    ASSERT_EQ(st, SW_SPILLED);
    ASSERT_OK(sw_buffer_state_get(mid, &st));
    ASSERT_EQ(st, SW_RESIDENT);
    ASSERT_UEQ(after.spilled, KiB(256));
    ASSERT_UEQ(after.spills, before.spills + 1);

    /* Lower again: the least recently used of the rest goes next. */
    ASSERT_OK(sw_set_memory_budget(dev, KiB(64)));
    ASSERT_OK(sw_buffer_state_get(mid, &st));
    ASSERT_EQ(st, SW_SPILLED);
    ASSERT_OK(sw_buffer_state_get(recent, &st));
    ASSERT_EQ(st, SW_RESIDENT);
    test_expect_pattern(old, 1);
    test_expect_pattern(mid, 2);
    test_expect_pattern(recent, 3);

    /* Raising it moves nothing back: only the device brings buffers in. */
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    ASSERT_OK(sw_buffer_state_get(old, &st));
    ASSERT_EQ(st, SW_SPILLED);
    ASSERT_OK(sw_buffer_free(recent));
    ASSERT_OK(sw_buffer_free(mid));
    ASSERT_OK(sw_buffer_free(old));
}

TEST(peak_reserved_and_counters)
{
    sw_device *dev = test_device();
    ASSERT_OK(sw_reset_peak(dev));
    sw_memory_info i0 = test_info_synced(dev);
    sw_buffer *a = test_alloc(dev, KiB(64), "a");
    sw_buffer *b = test_alloc(dev, KiB(32), "b");
    ASSERT_OK(sw_buffer_free(b)); /* cached: reserved stays 96 KiB */
    sw_memory_info i1 = test_info_synced(dev);
    ASSERT_UEQ(i1.peak_reserved, i0.in_use + i0.cached + KiB(96));
    ASSERT_UEQ(i1.live_buffers, i0.live_buffers + 1);
    ASSERT_OK(sw_empty_cache(dev));
    ASSERT_UEQ(test_info(dev).peak_reserved, i1.peak_reserved);
    ASSERT_OK(sw_reset_peak(dev));
    sw_memory_info i2 = test_info(dev);
    ASSERT_UEQ(i2.peak_reserved, i2.in_use + i2.cached);
    ASSERT_UEQ(i2.peak, i2.in_use);

    /* Counters go to zero; the figures that are not counters stay. */
    ASSERT_UGT(i2.allocs, 0);
    ASSERT_OK(sw_reset_counters(dev));
    sw_memory_info i3 = test_info(dev);
    ASSERT_UEQ(i3.allocs, 0);
    ASSERT_UEQ(i3.frees, 0);
    ASSERT_UEQ(i3.ooms, 0);
    ASSERT_UEQ(i3.spills, 0);
    ASSERT_UEQ(i3.in_use, i2.in_use);
    ASSERT_UEQ(i3.peak, i2.peak);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_UEQ(test_info(dev).frees, 1);
    ASSERT_ERR(sw_reset_counters(NULL), SW_ERR_INVALID_ARG);
}

/* The out-of-memory report says, for each large buffer that could not
 * move, why: pinned, exported (with its lease count), external. */
TEST(oom_report_says_why_not_moved)
{
    sw_device *dev = test_device();
    sw_buffer *pinned = test_alloc(dev, KiB(200), "pinned-one");
    sw_buffer *leased = test_alloc(dev, KiB(150), "leased-one");
    sw_buffer *free_one = test_alloc(dev, KiB(100), "movable-one");
    test_pin(pinned);
    sw_devmem ptr;
    sw_lease *l1 = NULL, *l2 = NULL;
    ASSERT_OK(sw_buffer_expose(leased, &ptr, &l1));
    ASSERT_OK(sw_buffer_expose(leased, &ptr, &l2));
    sw_buffer *wrapped = NULL;
    ASSERT_OK(sw_buffer_wrap(dev, ptr, KiB(120), "wrapped-one", &wrapped));
    ASSERT_OK(sw_set_memory_budget(dev, KiB(460)));
    sw_buffer *out = NULL;
    ASSERT_ERR(sw_buffer_alloc(dev, KiB(300), "too-much", &out), SW_ERR_OOM);
    char msg[4096];
    snprintf(msg, sizeof msg, "%s", sw_last_error());
    ASSERT_STR_CONTAINS(msg, "'pinned-one' RESIDENT, pinned by a launch");
    ASSERT_STR_CONTAINS(msg, "'leased-one' RESIDENT, exported (2 leases)");
    ASSERT_STR_CONTAINS(msg, "'wrapped-one' external");
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    ASSERT_OK(sw_buffer_free(wrapped));
    ASSERT_OK(sw_lease_release(l2));
    ASSERT_OK(sw_lease_release(l1));
    test_unpin_free(pinned);
    ASSERT_OK(sw_buffer_free(leased));
    ASSERT_OK(sw_buffer_free(free_one));
}

TEST(memory_snapshot)
{
    sw_device *dev = test_device();
    size_t n = 99;
    ASSERT_OK(sw_memory_snapshot(dev, NULL, 0, &n));
    size_t base = n;
    sw_buffer *a = test_alloc(dev, 1000, "snap-a");
    sw_buffer *b = test_alloc(dev, KiB(8), "snap-b");
    sw_buffer *v = NULL;
    ASSERT_OK(sw_buffer_view(b, 0, 16, &v));
    test_pin(a);
    sw_devmem ptr;
    sw_lease *l = NULL;
    ASSERT_OK(sw_buffer_expose(b, &ptr, &l));
    ASSERT_OK(sw_buffer_free(b)); /* the view and lease keep it */

    sw_buffer_info info[8];
    ASSERT_OK(sw_memory_snapshot(dev, info, 8, &n));
    ASSERT_EQ(n, base + 2);
    /* Most recent first. */
    ASSERT_STR_EQ(info[0].tag, "snap-b");
    ASSERT_STR_EQ(info[1].tag, "snap-a");
    ASSERT_UEQ(info[1].size, 1000);
    ASSERT_UEQ(info[1].alloc_size, 1024);
    ASSERT_EQ(info[1].pins, 1);
    ASSERT_EQ(info[1].handles, 1);
    ASSERT_EQ(info[0].leases, 1);
    ASSERT_EQ(info[0].views, 1);
    ASSERT_EQ(info[0].handles, 0);
    ASSERT_EQ(info[0].state, SW_RESIDENT);
    ASSERT_TRUE(info[0].id != info[1].id);
    ASSERT_UGT(info[0].last_use, 0);
    /* Fewer slots than buffers: the count is still the total. */
    ASSERT_OK(sw_memory_snapshot(dev, info, 1, &n));
    ASSERT_EQ(n, base + 2);
    ASSERT_ERR(sw_memory_snapshot(dev, NULL, 1, &n), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_memory_snapshot(dev, info, 1, NULL), SW_ERR_INVALID_ARG);

    ASSERT_OK(sw_lease_release(l));
    ASSERT_OK(sw_buffer_free(v));
    test_unpin_free(a);
    ASSERT_OK(sw_memory_snapshot(dev, NULL, 0, &n));
    ASSERT_EQ(n, base);
}
