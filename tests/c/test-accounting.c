/*
 * test-accounting.c -- in_use, cached, device_free, counters, peaks and peak
 * scopes.
 *
 * Every test runs in a fresh process, so a device starts with nothing in
 * use, nothing cached and its counters at zero.  in_use moves at once on
 * alloc and free; cached and device_free move in stream order, so they are
 * compared after sw_device_synchronize.
 */
#include "test.h"
#include "tests.h"

#define KiB(n) ((uint64_t)(n) << 10)

TEST(accounting_initial)
{
    sw_device *dev = test_device();
    sw_memory_info info = test_info(dev);
    ASSERT_UEQ(info.in_use, 0);
    ASSERT_UEQ(info.peak, 0);
    ASSERT_UEQ(info.cached, 0);
    ASSERT_UEQ(info.spilled, 0);
    ASSERT_UEQ(info.budget, 0);
    ASSERT_UEQ(info.allocs, 0);
    ASSERT_UEQ(info.frees, 0);
    ASSERT_UEQ(info.spills, 0);
    ASSERT_UEQ(info.restores, 0);
    ASSERT_UEQ(info.spilled_bytes_total, 0);
    ASSERT_UEQ(info.restored_bytes_total, 0);
    ASSERT_DBL_EQ(info.spill_seconds, 0.0);
    ASSERT_DBL_EQ(info.restore_seconds, 0.0);
    ASSERT_UEQ(info.alloc_retries, 0);
    ASSERT_UEQ(info.ooms, 0);
    ASSERT_UEQ(info.gc_runs, 0);
    if (info.device_free_known && info.device_total != 0)
        ASSERT_ULE(info.device_free, info.device_total);
    if (!info.device_free_known)
        ASSERT_UEQ(info.device_free, 0);
    if (test_is_sim()) {
        ASSERT_UGT(info.device_total, 0);
        ASSERT_EQ(info.device_free_known, 1);
        ASSERT_ULE(info.device_free, info.device_total);
        ASSERT_UGE(info.device_free + TEST_SIM_RESERVED, info.device_total);
    }
}

TEST(accounting_rounding)
{
    sw_device *dev = test_device();
    static const size_t sizes[] = {1,    511,  512,   513,   1000,
                                   4096, 4097, 65535, 100000, 3 * 512};
    enum { N = sizeof sizes / sizeof sizes[0] };
    sw_buffer *bufs[N];
    uint64_t expect = 0;
    for (size_t i = 0; i < N; i++) {
        bufs[i] = test_alloc(dev, sizes[i], "rounding");
        expect += test_round(sizes[i]);
        sw_memory_info info = test_info(dev);
        ASSERT_UEQ(info.in_use, expect);
        ASSERT_UEQ(info.peak, expect);
        ASSERT_UEQ(info.allocs, i + 1);
        /* The buffer's size is what was asked for, not the rounding. */
        size_t size = 0;
        ASSERT_OK(sw_buffer_size(bufs[i], &size));
        ASSERT_EQ(size, sizes[i]);
    }
    ASSERT_UEQ(expect, 512 + 512 + 512 + 1024 + 1024 + 4096 + 4608 + 65536 +
                           100352 + 1536);
    /* A byte of the rounding slack is not part of the buffer. */
    unsigned char c;
    ASSERT_ERR(sw_buffer_read(bufs[4], 1000, &c, 1), SW_ERR_OUT_OF_RANGE);
    for (size_t i = N; i-- > 0;) {
        ASSERT_OK(sw_buffer_free(bufs[i]));
        expect -= test_round(sizes[i]);
        ASSERT_UEQ(test_info(dev).in_use, expect);
    }
    sw_memory_info info = test_info(dev);
    ASSERT_UEQ(info.in_use, 0);
    ASSERT_UEQ(info.frees, N);
}

TEST(accounting_views)
{
    sw_device *dev = test_device();
    sw_buffer *base = test_alloc(dev, 4000, "base");
    sw_memory_info before = test_info(dev);
    ASSERT_UEQ(before.in_use, 4096);

    sw_buffer *v1, *v2, *v3, *v4;
    ASSERT_OK(sw_buffer_view(base, 100, 200, &v1));
    ASSERT_OK(sw_buffer_view(base, 0, 4000, &v2));
    ASSERT_OK(sw_buffer_view(v1, 10, 20, &v3));
    ASSERT_OK(sw_buffer_view(base, 4000, 0, &v4));
    sw_memory_info with = test_info(dev);
    /* A view adds nothing: no bytes, no allocation. */
    ASSERT_UEQ(with.in_use, before.in_use);
    ASSERT_UEQ(with.peak, before.peak);
    ASSERT_UEQ(with.allocs, before.allocs);

    ASSERT_OK(sw_buffer_free(v3));
    ASSERT_OK(sw_buffer_free(v1));
    ASSERT_OK(sw_buffer_free(v4));
    ASSERT_OK(sw_buffer_free(v2));
    ASSERT_UEQ(test_info(dev).in_use, 4096);
    ASSERT_OK(sw_buffer_free(base));
    sw_memory_info after = test_info_synced(dev);
    ASSERT_UEQ(after.in_use, 0);
    ASSERT_UEQ(after.cached, 4096);
}

TEST(accounting_base_freed_view_alive)
{
    sw_device *dev = test_device();
    sw_buffer *base = test_alloc(dev, 8192, "base-dies-first");
    test_write_pattern(base, 77);
    unsigned char expect[8192];
    test_pattern(expect, sizeof expect, 77);

    sw_buffer *view = NULL;
    ASSERT_OK(sw_buffer_view(base, 1024, 2048, &view));
    ASSERT_OK(sw_buffer_free(base));

    /* The base handle is dead, its memory is not. */
    size_t size = 1;
    ASSERT_ERR(sw_buffer_size(base, &size), SW_ERR_INVALID_HANDLE);
    sw_memory_info info = test_info_synced(dev);
    ASSERT_UEQ(info.in_use, 8192);
    ASSERT_UEQ(info.cached, 0);
    unsigned char got[2048];
    ASSERT_OK(sw_buffer_read(view, 0, got, sizeof got));
    ASSERT_MEM_EQ(got, expect + 1024, sizeof got);

    /* A view of the view outlives both. */
    sw_buffer *inner = NULL;
    ASSERT_OK(sw_buffer_view(view, 500, 100, &inner));
    ASSERT_OK(sw_buffer_free(view));
    ASSERT_UEQ(test_info(dev).in_use, 8192);
    unsigned char small[100];
    ASSERT_OK(sw_buffer_read(inner, 0, small, sizeof small));
    ASSERT_MEM_EQ(small, expect + 1524, sizeof small);
    /* And writing through it still lands in the (unnamed) base. */
    memset(small, 0x42, sizeof small);
    ASSERT_OK(sw_buffer_write(inner, 0, small, sizeof small));
    memset(small, 0, sizeof small);
    ASSERT_OK(sw_buffer_read(inner, 0, small, sizeof small));
    for (size_t i = 0; i < sizeof small; i++)
        ASSERT_EQ(small[i], 0x42);

    ASSERT_OK(sw_buffer_free(inner));
    info = test_info_synced(dev);
    ASSERT_UEQ(info.in_use, 0);
    ASSERT_UEQ(info.cached, 8192);
    ASSERT_UEQ(info.frees, 1);
}

TEST(accounting_cache_reuse)
{
    sw_device *dev = test_device();
    int sim = test_is_sim();
    sw_memory_info i0 = test_info_synced(dev);

    sw_buffer *a = test_alloc(dev, 3000, "first");
    sw_devmem ma;
    ASSERT_OK(sw_buffer_device_ptr(a, &ma));
    sw_memory_info i1 = test_info_synced(dev);
    ASSERT_UEQ(i1.in_use, 3072);
    ASSERT_UEQ(i1.cached, 0);
    if (sim)
        ASSERT_UEQ(i1.device_free, i0.device_free - 3072);

    /* Freeing moves the block from in_use to cached; the device keeps it. */
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_UEQ(test_info(dev).in_use, 0);
    sw_memory_info i2 = test_info_synced(dev);
    ASSERT_UEQ(i2.in_use, 0);
    ASSERT_UEQ(i2.cached, 3072);
    if (sim)
        ASSERT_UEQ(i2.device_free, i1.device_free);

    /* The same rounded size comes back from the cache: the same block. */
    sw_buffer *b = test_alloc(dev, 2600, "second");
    sw_devmem mb;
    ASSERT_OK(sw_buffer_device_ptr(b, &mb));
    ASSERT_UEQ(mb.base, ma.base);
    ASSERT_UEQ(mb.offset, ma.offset);
    sw_memory_info i3 = test_info_synced(dev);
    ASSERT_UEQ(i3.in_use, 3072);
    ASSERT_UEQ(i3.cached, 0);
    ASSERT_UEQ(i3.allocs, 2);
    ASSERT_UEQ(i3.frees, 1);
    if (sim)
        ASSERT_UEQ(i3.device_free, i1.device_free);
    /* The reused block is a working buffer of the new size. */
    test_write_pattern(b, 8);
    test_expect_pattern(b, 8);

    /* Another size does not take it. */
    ASSERT_OK(sw_buffer_free(b));
    sw_buffer *c = test_alloc(dev, 8192, "third");
    sw_memory_info i4 = test_info_synced(dev);
    ASSERT_UEQ(i4.in_use, 8192);
    ASSERT_UEQ(i4.cached, 3072);
    if (sim)
        ASSERT_UEQ(i4.device_free, i1.device_free - 8192);
    ASSERT_OK(sw_buffer_free(c));
    sw_memory_info i5 = test_info_synced(dev);
    ASSERT_UEQ(i5.cached, 3072 + 8192);
    ASSERT_UEQ(i5.frees, 3);
}

TEST(accounting_empty_cache)
{
    sw_device *dev = test_device();
    int sim = test_is_sim();
    sw_memory_info i0 = test_info_synced(dev);
    /* Nothing cached: a no-op. */
    ASSERT_OK(sw_empty_cache(dev));

    sw_buffer *a = test_alloc(dev, KiB(64), "a");
    sw_buffer *b = test_alloc(dev, KiB(128), "b");
    sw_buffer *keep = test_alloc(dev, KiB(4), "keep");
    test_write_pattern(keep, 12);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
    sw_memory_info i1 = test_info_synced(dev);
    ASSERT_UEQ(i1.cached, KiB(192));
    ASSERT_UEQ(i1.in_use, KiB(4));
    if (sim)
        ASSERT_UEQ(i1.device_free, i0.device_free - KiB(196));

    ASSERT_OK(sw_empty_cache(dev));
    ASSERT_UEQ(test_info(dev).cached, 0);
    sw_memory_info i2 = test_info_synced(dev);
    ASSERT_UEQ(i2.cached, 0);
    ASSERT_UEQ(i2.in_use, KiB(4));
    ASSERT_UEQ(i2.device_total, i0.device_total);
    if (sim)
        ASSERT_UEQ(i2.device_free, i0.device_free - KiB(4));
    /* A live buffer is untouched by emptying the cache. */
    test_expect_pattern(keep, 12);
    ASSERT_OK(sw_buffer_free(keep));
    ASSERT_OK(sw_empty_cache(dev));
    sw_memory_info i3 = test_info_synced(dev);
    ASSERT_UEQ(i3.cached, 0);
    if (sim)
        ASSERT_UEQ(i3.device_free, i0.device_free);
}

TEST(accounting_device_free)
{
    test_require_sim();
    sw_device *dev = test_device();
    sw_memory_info i0 = test_info_synced(dev);
    ASSERT_EQ(i0.device_free_known, 1);
    uint64_t total = i0.device_total;
    ASSERT_UGT(total, 0);

    sw_buffer *a = test_alloc(dev, 1000, "a");
    sw_memory_info i1 = test_info_synced(dev);
    ASSERT_UEQ(i1.device_free, i0.device_free - 1024);
    ASSERT_UEQ(i1.device_total, total);

    sw_buffer *b = test_alloc(dev, 1 << 20, "b");
    sw_memory_info i2 = test_info_synced(dev);
    ASSERT_UEQ(i2.device_free, i0.device_free - 1024 - (1 << 20));
    ASSERT_UEQ(i2.device_total, total);

    /* Freed into the cache: the device does not get it back... */
    ASSERT_OK(sw_buffer_free(b));
    sw_memory_info i3 = test_info_synced(dev);
    ASSERT_UEQ(i3.device_free, i2.device_free);
    /* ...until the cache is emptied. */
    ASSERT_OK(sw_empty_cache(dev));
    sw_memory_info i4 = test_info_synced(dev);
    ASSERT_UEQ(i4.device_free, i1.device_free);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_empty_cache(dev));
    sw_memory_info i5 = test_info_synced(dev);
    ASSERT_UEQ(i5.device_free, i0.device_free);
    ASSERT_UEQ(i5.device_total, total);
}

TEST(accounting_counters)
{
    sw_device *dev = test_device();
    sw_buffer *a = test_alloc(dev, 1000, "a");
    sw_buffer *b = test_alloc(dev, 2000, "b");
    sw_buffer *c = test_alloc(dev, 3000, "c");
    sw_memory_info i = test_info(dev);
    ASSERT_UEQ(i.allocs, 3);
    ASSERT_UEQ(i.frees, 0);
    ASSERT_OK(sw_buffer_free(b));
    i = test_info(dev);
    ASSERT_UEQ(i.allocs, 3);
    ASSERT_UEQ(i.frees, 1);
    /* A cache hit is still an allocation. */
    sw_buffer *d = test_alloc(dev, 2000, "d");
    /* Views, retains and the non-final free are not. */
    sw_buffer *v = NULL;
    ASSERT_OK(sw_buffer_view(a, 0, 10, &v));
    ASSERT_OK(sw_buffer_retain(c));
    ASSERT_OK(sw_buffer_free(c));
    ASSERT_OK(sw_buffer_free(v));
    i = test_info(dev);
    ASSERT_UEQ(i.allocs, 4);
    ASSERT_UEQ(i.frees, 1);
    ASSERT_UEQ(i.in_use, 1024 + 2048 + 3072);
    /* A failed allocation is neither. */
    sw_buffer *bad = NULL;
    ASSERT_ERR(sw_buffer_alloc(dev, SIZE_MAX, "bad", &bad), SW_ERR_TOO_LARGE);
    i = test_info(dev);
    ASSERT_UEQ(i.allocs, 4);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(c));
    ASSERT_OK(sw_buffer_free(d));
    i = test_info(dev);
    ASSERT_UEQ(i.allocs, 4);
    ASSERT_UEQ(i.frees, 4);
    ASSERT_UEQ(i.in_use, 0);
    /* Nothing spilled or failed along the way. */
    ASSERT_UEQ(i.spills, 0);
    ASSERT_UEQ(i.restores, 0);
}

/* ------------------------------------------------------------------------
 * Peaks
 * ---------------------------------------------------------------------- */

TEST(peak_and_reset)
{
    sw_device *dev = test_device();
    ASSERT_UEQ(test_info(dev).peak, 0);
    sw_buffer *a = test_alloc(dev, KiB(10), "a");
    ASSERT_UEQ(test_info(dev).peak, KiB(10));
    sw_buffer *b = test_alloc(dev, KiB(20), "b");
    ASSERT_UEQ(test_info(dev).peak, KiB(30));
    ASSERT_OK(sw_buffer_free(b));
    sw_memory_info i = test_info(dev);
    ASSERT_UEQ(i.in_use, KiB(10));
    ASSERT_UEQ(i.peak, KiB(30));

    ASSERT_OK(sw_reset_peak(dev));
    i = test_info(dev);
    ASSERT_UEQ(i.peak, KiB(10));
    /* A cache hit raises the peak as any allocation does. */
    b = test_alloc(dev, KiB(20), "b-again");
    ASSERT_UEQ(test_info(dev).peak, KiB(30));
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_buffer_free(a));
    i = test_info(dev);
    ASSERT_UEQ(i.peak, KiB(30));
    ASSERT_OK(sw_reset_peak(dev));
    ASSERT_UEQ(test_info(dev).peak, 0);
    /* Views do not move it. */
    a = test_alloc(dev, KiB(1), "a");
    sw_buffer *v = NULL;
    ASSERT_OK(sw_buffer_view(a, 0, 512, &v));
    ASSERT_UEQ(test_info(dev).peak, KiB(1));
    ASSERT_OK(sw_buffer_free(v));
    ASSERT_OK(sw_buffer_free(a));
}

static uint64_t scope_peek(sw_peak_scope *s)
{
    uint64_t p = 0;
    ASSERT_OK(sw_peak_scope_peak(s, &p));
    return p;
}

TEST(peak_scopes_nested)
{
    sw_device *dev = test_device();
    sw_peak_scope *outer = NULL, *inner = NULL, *inner2 = NULL, *deep = NULL;
    ASSERT_OK(sw_peak_scope_begin(dev, &outer));
    ASSERT_NOT_NULL(outer);
    ASSERT_UEQ(scope_peek(outer), 0);

    sw_buffer *a = test_alloc(dev, KiB(4), "a"); /* in_use 4K */
    ASSERT_OK(sw_peak_scope_begin(dev, &inner));
    ASSERT_UEQ(scope_peek(inner), KiB(4)); /* starts at in_use */
    sw_buffer *b = test_alloc(dev, KiB(8), "b"); /* 12K */
    ASSERT_OK(sw_peak_scope_begin(dev, &deep));
    ASSERT_UEQ(scope_peek(deep), KiB(12));
    ASSERT_OK(sw_buffer_free(b)); /* 4K */
    uint64_t p = 0;
    ASSERT_OK(sw_peak_scope_end(deep, &p));
    ASSERT_UEQ(p, KiB(12));
    ASSERT_UEQ(scope_peek(inner), KiB(12));

    /* A reset of the device's peak disturbs no scope. */
    ASSERT_OK(sw_reset_peak(dev));
    ASSERT_UEQ(test_info(dev).peak, KiB(4));
    ASSERT_UEQ(scope_peek(outer), KiB(12));
    ASSERT_UEQ(scope_peek(inner), KiB(12));

    sw_buffer *c = test_alloc(dev, KiB(2), "c"); /* 6K */
    ASSERT_OK(sw_peak_scope_end(inner, &p));
    ASSERT_UEQ(p, KiB(12));

    /* A later inner scope starts at the current in_use. */
    ASSERT_OK(sw_peak_scope_begin(dev, &inner2));
    ASSERT_OK(sw_buffer_free(c)); /* 4K */
    ASSERT_OK(sw_peak_scope_end(inner2, &p));
    ASSERT_UEQ(p, KiB(6));

    /* The outer scope saw everything; the device peak only since reset. */
    ASSERT_OK(sw_peak_scope_end(outer, &p));
    ASSERT_UEQ(p, KiB(12));
    ASSERT_UEQ(test_info(dev).peak, KiB(6));
    ASSERT_OK(sw_buffer_free(a));

    /* An inner scope that reaches higher raises the outer's peak too. */
    ASSERT_OK(sw_peak_scope_begin(dev, &outer));
    ASSERT_OK(sw_peak_scope_begin(dev, &inner));
    a = test_alloc(dev, KiB(40), "big");
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_peak_scope_end(inner, &p));
    ASSERT_UEQ(p, KiB(40));
    ASSERT_OK(sw_peak_scope_end(outer, NULL)); /* peak may be NULL */
}

TEST(peak_scopes_out_of_order)
{
    sw_device *dev = test_device();
    sw_peak_scope *s1 = NULL, *s2 = NULL, *s3 = NULL;
    uint64_t p = 0;
    ASSERT_OK(sw_peak_scope_begin(dev, &s1));
    sw_buffer *x = test_alloc(dev, KiB(1), "x"); /* 1K */
    ASSERT_OK(sw_peak_scope_begin(dev, &s2));
    sw_buffer *y = test_alloc(dev, KiB(2), "y"); /* 3K */
    /* The outer scope ends first. */
    ASSERT_OK(sw_peak_scope_end(s1, &p));
    ASSERT_UEQ(p, KiB(3));
    ASSERT_OK(sw_buffer_free(y)); /* 1K */
    sw_buffer *z = test_alloc(dev, KiB(5), "z"); /* 6K */
    ASSERT_OK(sw_peak_scope_begin(dev, &s3)); /* starts at 6K */
    ASSERT_OK(sw_buffer_free(z));
    ASSERT_OK(sw_buffer_free(x)); /* 0 */
    ASSERT_OK(sw_peak_scope_end(s2, &p));
    ASSERT_UEQ(p, KiB(6));
    ASSERT_OK(sw_peak_scope_end(s3, &p));
    ASSERT_UEQ(p, KiB(6));
    /* An ended scope is a dead handle. */
    ASSERT_ERR(sw_peak_scope_end(s3, &p), SW_ERR_INVALID_HANDLE);
    ASSERT_UEQ(p, 0);
    p = 5;
    ASSERT_ERR(sw_peak_scope_peak(s1, &p), SW_ERR_INVALID_HANDLE);
    ASSERT_UEQ(p, 0);
}

TEST(peak_scope_peek)
{
    sw_device *dev = test_device();
    sw_peak_scope *s = NULL;
    ASSERT_OK(sw_peak_scope_begin(dev, &s));
    sw_buffer *a = test_alloc(dev, KiB(16), "a");
    ASSERT_UEQ(scope_peek(s), KiB(16));
    ASSERT_UEQ(scope_peek(s), KiB(16)); /* peeking does not end it */
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_UEQ(scope_peek(s), KiB(16));
    sw_buffer *b = test_alloc(dev, KiB(32), "b");
    ASSERT_UEQ(scope_peek(s), KiB(32));
    ASSERT_OK(sw_buffer_free(b));
    uint64_t p = 0;
    ASSERT_OK(sw_peak_scope_end(s, &p));
    ASSERT_UEQ(p, KiB(32));
}

TEST(peak_scope_bad_args)
{
    sw_device *dev = test_device();
    sw_peak_scope *s = NULL;
    ASSERT_OK(sw_peak_scope_begin(dev, &s));
    uint64_t p = 9;
    ASSERT_ERR(sw_peak_scope_peak(s, NULL), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_peak_scope_peak(NULL, &p), SW_ERR_INVALID_ARG);
    ASSERT_UEQ(p, 0);
    /* Ending NULL is a destroy of NULL: harmless. */
    p = 9;
    int rc = sw_peak_scope_end(NULL, &p);
    ASSERT_TRUE(rc == SW_OK || rc == SW_ERR_INVALID_ARG);
    ASSERT_UEQ(p, 0);
    /* The live scope is unaffected. */
    sw_buffer *a = test_alloc(dev, 700, "a");
    ASSERT_UEQ(scope_peek(s), 1024);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_peak_scope_end(s, &p));
    ASSERT_UEQ(p, 1024);
}
