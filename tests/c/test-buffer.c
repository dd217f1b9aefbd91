/*
 * test-buffer.c -- buffers: host reads and writes, ranges, 0-byte buffers,
 * freed handles, references, views, tags, device pointers, device copies
 * and fills.
 */
#include "test.h"
#include "tests.h"

static void expect_same_accounting(sw_device *dev, const sw_memory_info *a)
{
    sw_memory_info b = test_info(dev);
    ASSERT_UEQ(b.in_use, a->in_use);
    ASSERT_UEQ(b.allocs, a->allocs);
    ASSERT_UEQ(b.frees, a->frees);
    ASSERT_UEQ(b.peak, a->peak);
}

TEST(buffer_read_write)
{
    sw_device *dev = test_device();
    static const size_t sizes[] = {1, 7, 512, 1000, 65539, 1 << 20};
    enum { N = sizeof sizes / sizeof sizes[0] };
    sw_buffer *bufs[N];
    /* Write all, then read all: no buffer overlaps another. */
    for (size_t i = 0; i < N; i++) {
        bufs[i] = test_alloc(dev, sizes[i], "rw");
        test_write_pattern(bufs[i], (uint32_t)(100 + i));
    }
    for (size_t i = 0; i < N; i++)
        test_expect_pattern(bufs[i], (uint32_t)(100 + i));

    /* Partial writes land where they are aimed; partial reads read what is
     * there. */
    sw_buffer *b = bufs[3]; /* 1000 bytes */
    unsigned char model[1000], got[1000], patch[37];
    test_pattern(model, sizeof model, 103);
    test_pattern(patch, sizeof patch, 999);
    ASSERT_OK(sw_buffer_write(b, 501, patch, sizeof patch));
    memcpy(model + 501, patch, sizeof patch);
    ASSERT_OK(sw_buffer_write(b, 0, patch, 1));
    model[0] = patch[0];
    ASSERT_OK(sw_buffer_write(b, 999, patch + 5, 1));
    model[999] = patch[5];
    memset(got, 0, sizeof got);
    ASSERT_OK(sw_buffer_read(b, 0, got, sizeof got));
    ASSERT_MEM_EQ(got, model, sizeof model);
    memset(got, 0, sizeof got);
    ASSERT_OK(sw_buffer_read(b, 490, got, 60));
    ASSERT_MEM_EQ(got, model + 490, 60);
    ASSERT_OK(sw_buffer_read(b, 999, got, 1));
    ASSERT_EQ(got[0], model[999]);
    /* The neighbours did not change. */
    test_expect_pattern(bufs[2], 102);
    test_expect_pattern(bufs[4], 104);
    for (size_t i = 0; i < N; i++)
        ASSERT_OK(sw_buffer_free(bufs[i]));
}

TEST(buffer_zero_size)
{
    sw_device *dev = test_device();
    sw_memory_info before = test_info(dev);
    sw_buffer *z = test_alloc(dev, 0, "empty");
    sw_buffer *z2 = test_alloc(dev, 0, "empty-too");
    ASSERT_PTR_NE(z, z2);
    sw_memory_info with = test_info(dev);
    ASSERT_UEQ(with.in_use, before.in_use);
    ASSERT_UEQ(with.peak, before.peak);

    size_t size = 99;
    ASSERT_OK(sw_buffer_size(z, &size));
    ASSERT_EQ(size, 0);
    unsigned char c = 0x77;
    ASSERT_OK(sw_buffer_read(z, 0, &c, 0));
    ASSERT_OK(sw_buffer_write(z, 0, &c, 0));
    ASSERT_EQ(c, 0x77);
    ASSERT_ERR(sw_buffer_read(z, 0, &c, 1), SW_ERR_OUT_OF_RANGE);
    ASSERT_EQ(c, 0x77);
    ASSERT_ERR(sw_buffer_write(z, 0, &c, 1), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_buffer_read(z, 1, &c, 0), SW_ERR_OUT_OF_RANGE);

    sw_devmem mem = {77, 77};
    ASSERT_OK(sw_buffer_device_ptr(z, &mem));
    ASSERT_UEQ(mem.base, 0);
    sw_buffer_state st = SW_SPILLED;
    ASSERT_OK(sw_buffer_state_get(z, &st));
    ASSERT_EQ(st, SW_RESIDENT);

    sw_buffer *v = NULL, *bad = (sw_buffer *)(uintptr_t)1;
    ASSERT_OK(sw_buffer_view(z, 0, 0, &v));
    ASSERT_ERR(sw_buffer_view(z, 0, 1, &bad), SW_ERR_OUT_OF_RANGE);
    ASSERT_NULL(bad);
    ASSERT_OK(sw_buffer_size(v, &size));
    ASSERT_EQ(size, 0);
    ASSERT_OK(sw_buffer_free(v));
    uint32_t pat = 5;
    ASSERT_OK(sw_buffer_fill(z, 0, 0, &pat, 4));
    ASSERT_ERR(sw_buffer_fill(z, 0, 4, &pat, 4), SW_ERR_OUT_OF_RANGE);
    ASSERT_OK(sw_buffer_copy(z, 0, z2, 0, 0));

    /* A 0-byte launch gets base 0. */
    sw_buffer *arr[1] = {z};
    sw_devmem ptr = {77, 77};
    ASSERT_OK(sw_launch_begin(dev, arr, 1, &ptr));
    ASSERT_UEQ(ptr.base, 0);
    ASSERT_OK(sw_launch_end(dev, arr, 1));

    ASSERT_OK(sw_buffer_free(z));
    ASSERT_OK(sw_buffer_free(z2));
    ASSERT_ERR(sw_buffer_free(z), SW_ERR_INVALID_HANDLE);
    sw_memory_info after = test_info_synced(dev);
    ASSERT_UEQ(after.in_use, before.in_use);
    ASSERT_UEQ(after.cached, before.cached);
}

TEST(buffer_out_of_range)
{
    sw_device *dev = test_device();
    sw_buffer *b = test_alloc(dev, 1000, "range");
    test_write_pattern(b, 31);
    unsigned char buf[2000];
    memset(buf, 0xEE, sizeof buf);

    ASSERT_OK(sw_buffer_read(b, 0, buf, 1000));
    ASSERT_OK(sw_buffer_read(b, 1000, buf, 0)); /* empty range at the end */
    ASSERT_ERR(sw_buffer_read(b, 1, buf, 1000), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_buffer_read(b, 0, buf, 1001), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_buffer_read(b, 999, buf, 2), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_buffer_read(b, 1000, buf, 1), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_buffer_read(b, 5000, buf, 1), SW_ERR_OUT_OF_RANGE);

    /* A failed read leaves the destination alone. */
    memset(buf, 0xEE, sizeof buf);
    ASSERT_ERR(sw_buffer_read(b, 995, buf, 10), SW_ERR_OUT_OF_RANGE);
    for (size_t i = 0; i < sizeof buf; i++)
        ASSERT_EQ(buf[i], 0xEE);

    /* A failed write writes nothing, not even the part that would fit. */
    ASSERT_ERR(sw_buffer_write(b, 990, buf, 20), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_buffer_write(b, 0, buf, 1001), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_buffer_write(b, 1000, buf, 1), SW_ERR_OUT_OF_RANGE);
    test_expect_pattern(b, 31);

    /* The message says what the range and the size were. */
    ASSERT_ERR(sw_buffer_read(b, 999, buf, 2), SW_ERR_OUT_OF_RANGE);
    ASSERT_STR_CONTAINS(sw_last_error(), "1000");
    ASSERT_OK(sw_buffer_free(b));
}

TEST(buffer_offset_overflow)
{
    sw_device *dev = test_device();
    sw_buffer *b = test_alloc(dev, 1000, "overflow");
    sw_buffer *c = test_alloc(dev, 1000, "other");
    test_write_pattern(b, 41);
    test_write_pattern(c, 42);
    unsigned char buf[64];
    memset(buf, 0xEE, sizeof buf);

    /* offset + n wraps around: still out of range, never a wild access. */
    ASSERT_ERR(sw_buffer_read(b, SIZE_MAX, buf, 1), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_buffer_read(b, SIZE_MAX, buf, 2), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_buffer_read(b, SIZE_MAX - 5, buf, 10), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_buffer_read(b, 1, buf, SIZE_MAX), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_buffer_write(b, SIZE_MAX, buf, 2), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_buffer_write(b, 2, buf, SIZE_MAX), SW_ERR_OUT_OF_RANGE);
    for (size_t i = 0; i < sizeof buf; i++)
        ASSERT_EQ(buf[i], 0xEE);

    sw_buffer *v = (sw_buffer *)(uintptr_t)1;
    ASSERT_ERR(sw_buffer_view(b, SIZE_MAX, 2, &v), SW_ERR_OUT_OF_RANGE);
    ASSERT_NULL(v);
    ASSERT_ERR(sw_buffer_view(b, 2, SIZE_MAX, &v), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_buffer_copy(c, 0, b, SIZE_MAX, 2), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_buffer_copy(c, SIZE_MAX, b, 0, 2), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_buffer_copy(c, 8, b, 8, SIZE_MAX), SW_ERR_OUT_OF_RANGE);
    uint64_t pat = 0x1122334455667788ull;
    ASSERT_ERR(sw_buffer_fill(b, SIZE_MAX - 7, 8, &pat, 8),
               SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_buffer_fill(b, 8, SIZE_MAX - 7, &pat, 8),
               SW_ERR_OUT_OF_RANGE);

    ASSERT_OK(sw_device_synchronize(dev));
    test_expect_pattern(b, 41);
    test_expect_pattern(c, 42);
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_buffer_free(c));
}

TEST(buffer_double_free)
{
    sw_device *dev = test_device();
    sw_buffer *b = test_alloc(dev, 4096, "twice");
    ASSERT_OK(sw_buffer_free(b));
    sw_memory_info i = test_info(dev);
    ASSERT_ERR(sw_buffer_free(b), SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_buffer_free(b), SW_ERR_INVALID_HANDLE);
    expect_same_accounting(dev, &i);
    ASSERT_UEQ(i.frees, 1);
    ASSERT_UEQ(test_info_synced(dev).cached, 4096);

    /* A view freed twice, its base unaffected. */
    sw_buffer *base = test_alloc(dev, 2048, "base");
    test_write_pattern(base, 8);
    sw_buffer *v = NULL;
    ASSERT_OK(sw_buffer_view(base, 0, 100, &v));
    ASSERT_OK(sw_buffer_free(v));
    ASSERT_ERR(sw_buffer_free(v), SW_ERR_INVALID_HANDLE);
    test_expect_pattern(base, 8);
    ASSERT_OK(sw_buffer_free(base));
}

TEST(buffer_use_after_free)
{
    sw_device *dev = test_device();
    sw_buffer *good = test_alloc(dev, 256, "good");
    test_write_pattern(good, 1);
    sw_buffer *dead = test_alloc(dev, 256, "dead");
    sw_buffer *deadview = NULL;
    ASSERT_OK(sw_buffer_view(good, 16, 64, &deadview));
    ASSERT_OK(sw_buffer_free(dead));
    ASSERT_OK(sw_buffer_free(deadview));
    sw_memory_info before = test_info(dev);

    sw_buffer *handles[2] = {dead, deadview};
    for (int h = 0; h < 2; h++) {
        sw_buffer *x = handles[h];
        unsigned char host[16];
        memset(host, 0x5A, sizeof host);
        size_t size = 7;
        ASSERT_ERR(sw_buffer_size(x, &size), SW_ERR_INVALID_HANDLE);
        ASSERT_EQ(size, 0);
        ASSERT_ERR(sw_buffer_read(x, 0, host, 8), SW_ERR_INVALID_HANDLE);
        for (size_t i = 0; i < sizeof host; i++)
            ASSERT_EQ(host[i], 0x5A);
        ASSERT_ERR(sw_buffer_write(x, 0, host, 8), SW_ERR_INVALID_HANDLE);
        sw_buffer *v = (sw_buffer *)(uintptr_t)1;
        ASSERT_ERR(sw_buffer_view(x, 0, 8, &v), SW_ERR_INVALID_HANDLE);
        ASSERT_NULL(v);
        ASSERT_ERR(sw_buffer_retain(x), SW_ERR_INVALID_HANDLE);
        sw_device *d = (sw_device *)(uintptr_t)1;
        ASSERT_ERR(sw_buffer_device(x, &d), SW_ERR_INVALID_HANDLE);
        ASSERT_NULL(d);
        sw_devmem mem = {1, 1};
        ASSERT_ERR(sw_buffer_device_ptr(x, &mem), SW_ERR_INVALID_HANDLE);
        ASSERT_UEQ(mem.base, 0);
        sw_scalar s = {.f = 1.0};
        ASSERT_ERR(sw_op_fill(x, SW_FLOAT32, 2, s), SW_ERR_INVALID_HANDLE);
        ASSERT_ERR(sw_op_add(good, x, good, SW_FLOAT32, 2),
                   SW_ERR_INVALID_HANDLE);
        ASSERT_ERR(sw_buffer_copy(good, 0, x, 0, 8), SW_ERR_INVALID_HANDLE);
        sw_buffer *arr[2] = {good, x};
        sw_devmem ptrs[2];
        ASSERT_ERR(sw_launch_begin(dev, arr, 2, ptrs), SW_ERR_INVALID_HANDLE);
        ASSERT_ERR(sw_buffer_free(x), SW_ERR_INVALID_HANDLE);
    }
    ASSERT_OK(sw_device_synchronize(dev));
    expect_same_accounting(dev, &before);
    test_expect_pattern(good, 1);

    /* New buffers do not bring the dead handle back to life. */
    sw_buffer *fresh[8];
    for (int i = 0; i < 8; i++) {
        fresh[i] = test_alloc(dev, 256, "fresh");
        ASSERT_PTR_NE(fresh[i], dead);
        ASSERT_PTR_NE(fresh[i], deadview);
    }
    size_t size = 1;
    ASSERT_ERR(sw_buffer_size(dead, &size), SW_ERR_INVALID_HANDLE);
    for (int i = 0; i < 8; i++)
        ASSERT_OK(sw_buffer_free(fresh[i]));
    /* The good buffer took no damage from launches that were refused (it is
     * not left pinned: its memory can still go back to the cache). */
    ASSERT_OK(sw_buffer_free(good));
    ASSERT_UEQ(test_info_synced(dev).in_use, 0);
}

TEST(buffer_retain)
{
    sw_device *dev = test_device();
    sw_buffer *b = test_alloc(dev, 3000, "retained");
    test_write_pattern(b, 17);
    ASSERT_OK(sw_buffer_retain(b));
    ASSERT_OK(sw_buffer_retain(b));
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_buffer_free(b));
    /* One reference left: alive and counted. */
    test_expect_pattern(b, 17);
    sw_memory_info i = test_info(dev);
    ASSERT_UEQ(i.in_use, 3072);
    ASSERT_UEQ(i.frees, 0);
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_UEQ(test_info(dev).in_use, 0);
    ASSERT_UEQ(test_info(dev).frees, 1);
    ASSERT_ERR(sw_buffer_free(b), SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_buffer_retain(b), SW_ERR_INVALID_HANDLE);

    /* Views have their own references. */
    sw_buffer *base = test_alloc(dev, 1024, "base");
    sw_buffer *v = NULL;
    ASSERT_OK(sw_buffer_view(base, 512, 512, &v));
    ASSERT_OK(sw_buffer_retain(v));
    ASSERT_OK(sw_buffer_free(base));
    ASSERT_OK(sw_buffer_free(v));
    size_t size = 0;
    ASSERT_OK(sw_buffer_size(v, &size));
    ASSERT_EQ(size, 512);
    ASSERT_UEQ(test_info(dev).in_use, 1024);
    ASSERT_OK(sw_buffer_free(v));
    ASSERT_UEQ(test_info(dev).in_use, 0);
}

TEST(buffer_views)
{
    sw_device *dev = test_device();
    sw_buffer *base = test_alloc(dev, 4096, "viewed");
    test_write_pattern(base, 55);
    unsigned char model[4096];
    test_pattern(model, sizeof model, 55);

    sw_buffer *v = NULL;
    ASSERT_OK(sw_buffer_view(base, 1000, 500, &v));
    size_t size = 0;
    ASSERT_OK(sw_buffer_size(v, &size));
    ASSERT_EQ(size, 500);
    sw_device *owner = NULL;
    ASSERT_OK(sw_buffer_device(v, &owner));
    ASSERT_PTR_EQ(owner, dev);
    unsigned char got[4096];
    ASSERT_OK(sw_buffer_read(v, 0, got, 500));
    ASSERT_MEM_EQ(got, model + 1000, 500);

    /* Writes through the view land in the base. */
    unsigned char patch[50];
    test_pattern(patch, sizeof patch, 1234);
    ASSERT_OK(sw_buffer_write(v, 10, patch, sizeof patch));
    memcpy(model + 1010, patch, sizeof patch);
    ASSERT_OK(sw_buffer_read(base, 0, got, 4096));
    ASSERT_MEM_EQ(got, model, 4096);

    /* A view of a view is a view of the same base, offsets added. */
    sw_buffer *vv = NULL;
    ASSERT_OK(sw_buffer_view(v, 100, 50, &vv));
    ASSERT_OK(sw_buffer_read(vv, 0, got, 50));
    ASSERT_MEM_EQ(got, model + 1100, 50);
    sw_devmem mb, mv, mvv;
    ASSERT_OK(sw_buffer_device_ptr(base, &mb));
    ASSERT_OK(sw_buffer_device_ptr(v, &mv));
    ASSERT_OK(sw_buffer_device_ptr(vv, &mvv));
    ASSERT_UEQ(mv.base, mb.base);
    ASSERT_UEQ(mvv.base, mb.base);
    ASSERT_UEQ(mv.offset, mb.offset + 1000);
    ASSERT_UEQ(mvv.offset, mb.offset + 1100);

    /* Writes to the base show through the views. */
    memset(patch, 0xC3, sizeof patch);
    ASSERT_OK(sw_buffer_write(base, 1120, patch, 10));
    ASSERT_OK(sw_buffer_read(vv, 20, got, 10));
    for (int i = 0; i < 10; i++)
        ASSERT_EQ(got[i], 0xC3);

    /* Whole and empty views. */
    sw_buffer *whole = NULL, *empty = NULL;
    ASSERT_OK(sw_buffer_view(base, 0, 4096, &whole));
    ASSERT_OK(sw_buffer_view(base, 4096, 0, &empty));
    ASSERT_OK(sw_buffer_size(empty, &size));
    ASSERT_EQ(size, 0);
    ASSERT_OK(sw_buffer_read(whole, 0, got, 4096));
    ASSERT_OK(sw_buffer_read(base, 0, model, 4096));
    ASSERT_MEM_EQ(got, model, 4096);
    sw_buffer_state st = SW_SPILLED;
    ASSERT_OK(sw_buffer_state_get(vv, &st));
    ASSERT_EQ(st, SW_RESIDENT);

    ASSERT_OK(sw_buffer_free(whole));
    ASSERT_OK(sw_buffer_free(empty));
    ASSERT_OK(sw_buffer_free(vv));
    ASSERT_OK(sw_buffer_free(v));
    ASSERT_OK(sw_buffer_free(base));
}

TEST(buffer_view_out_of_range)
{
    sw_device *dev = test_device();
    sw_buffer *base = test_alloc(dev, 4096, "base");
    sw_buffer *v = NULL;
    ASSERT_OK(sw_buffer_view(base, 1000, 500, &v));
    sw_memory_info before = test_info(dev);

    sw_buffer *out = (sw_buffer *)(uintptr_t)1;
    ASSERT_ERR(sw_buffer_view(base, 4000, 97, &out), SW_ERR_OUT_OF_RANGE);
    ASSERT_NULL(out);
    ASSERT_ERR(sw_buffer_view(base, 4097, 0, &out), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_buffer_view(base, 0, 4097, &out), SW_ERR_OUT_OF_RANGE);
    /* Relative to the view, not to the base (which has room). */
    ASSERT_ERR(sw_buffer_view(v, 400, 101, &out), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_buffer_view(v, 501, 0, &out), SW_ERR_OUT_OF_RANGE);
    ASSERT_NULL(out);
    /* And host access through the view is bounded by the view. */
    unsigned char buf[600];
    ASSERT_ERR(sw_buffer_read(v, 0, buf, 501), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_buffer_write(v, 450, buf, 51), SW_ERR_OUT_OF_RANGE);
    ASSERT_OK(sw_buffer_view(v, 500, 0, &out));
    ASSERT_OK(sw_buffer_free(out));
    expect_same_accounting(dev, &before);
    ASSERT_OK(sw_buffer_free(v));
    ASSERT_OK(sw_buffer_free(base));
}

TEST(buffer_tag)
{
    sw_device *dev = test_device();
    char out[128];
    sw_buffer *a = test_alloc(dev, 16, "conv1.weight");
    ASSERT_OK(sw_buffer_tag(a, out, sizeof out));
    ASSERT_STR_EQ(out, "conv1.weight");
    /* Truncated to the caller's buffer. */
    ASSERT_OK(sw_buffer_tag(a, out, 5));
    ASSERT_STR_EQ(out, "conv");
    ASSERT_OK(sw_buffer_tag(a, out, 1));
    ASSERT_STR_EQ(out, "");

    sw_buffer *b = test_alloc(dev, 16, NULL);
    strcpy(out, "junk");
    ASSERT_OK(sw_buffer_tag(b, out, sizeof out));
    ASSERT_STR_EQ(out, "");

    /* Longer than SW_TAG_MAX: the first SW_TAG_MAX characters are kept. */
    char longtag[101];
    for (int i = 0; i < 100; i++)
        longtag[i] = (char)('a' + i % 26);
    longtag[100] = '\0';
    sw_buffer *c = test_alloc(dev, 16, longtag);
    ASSERT_OK(sw_buffer_tag(c, out, sizeof out));
    ASSERT_EQ(strlen(out), SW_TAG_MAX);
    ASSERT_TRUE(strncmp(out, longtag, SW_TAG_MAX) == 0);

    /* The tag is a copy: the caller's string may change afterwards. */
    char mine[16] = "mutable";
    sw_buffer *d = test_alloc(dev, 16, mine);
    strcpy(mine, "changed");
    ASSERT_OK(sw_buffer_tag(d, out, sizeof out));
    ASSERT_STR_EQ(out, "mutable");

    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_buffer_free(c));
    ASSERT_OK(sw_buffer_free(d));
}

TEST(buffer_state_and_device)
{
    sw_device *dev = test_device();
    sw_buffer *b = test_alloc(dev, 100, "s");
    sw_buffer_state st = SW_SPILLED;
    ASSERT_OK(sw_buffer_state_get(b, &st));
    ASSERT_EQ(st, SW_RESIDENT);
    sw_device *owner = NULL;
    ASSERT_OK(sw_buffer_device(b, &owner));
    ASSERT_PTR_EQ(owner, dev);
    ASSERT_UEQ(test_info(dev).spilled, 0);
    ASSERT_OK(sw_buffer_free(b));
}

TEST(buffer_device_ptr)
{
    sw_device *dev = test_device();
    enum { N = 16 };
    sw_buffer *bufs[N];
    sw_devmem mem[N];
    for (int i = 0; i < N; i++) {
        bufs[i] = test_alloc(dev, (size_t)(1000 + 700 * i), "ptr");
        ASSERT_OK(sw_buffer_device_ptr(bufs[i], &mem[i]));
        ASSERT_NE(mem[i].base, 0);
    }
    /* Live buffers never overlap (where the backend has addresses). */
    if (test_is_sim()) {
        for (int i = 0; i < N; i++)
            for (int j = 0; j < i; j++) {
                uintptr_t a0 = mem[i].base + mem[i].offset;
                uintptr_t a1 = a0 + (uintptr_t)(1000 + 700 * i);
                uintptr_t b0 = mem[j].base + mem[j].offset;
                uintptr_t b1 = b0 + (uintptr_t)(1000 + 700 * j);
                ASSERT_TRUE(a1 <= b0 || b1 <= a0);
            }
    }
    /* Stable while the buffer lives. */
    for (int i = 0; i < N; i++) {
        sw_devmem again;
        ASSERT_OK(sw_buffer_device_ptr(bufs[i], &again));
        ASSERT_UEQ(again.base, mem[i].base);
        ASSERT_UEQ(again.offset, mem[i].offset);
        ASSERT_OK(sw_buffer_free(bufs[i]));
    }
}

TEST(buffer_copy)
{
    sw_device *dev = test_device();
    sw_buffer *a = test_alloc(dev, 4096, "src");
    sw_buffer *b = test_alloc(dev, 4096, "dst");
    test_write_pattern(a, 1);
    test_write_pattern(b, 2);
    unsigned char ma[4096], mb[4096], got[4096];
    test_pattern(ma, sizeof ma, 1);
    test_pattern(mb, sizeof mb, 2);

    ASSERT_OK(sw_buffer_copy(b, 100, a, 200, 1000));
    memcpy(mb + 100, ma + 200, 1000);
    ASSERT_OK(sw_buffer_read(b, 0, got, sizeof got)); /* ordered after */
    ASSERT_MEM_EQ(got, mb, sizeof mb);
    ASSERT_OK(sw_buffer_read(a, 0, got, sizeof got));
    ASSERT_MEM_EQ(got, ma, sizeof ma);

    /* Within one buffer, non-overlapping ranges. */
    ASSERT_OK(sw_buffer_copy(a, 3000, a, 0, 500));
    memcpy(ma + 3000, ma, 500);
    /* Through views. */
    sw_buffer *va = NULL, *vb = NULL;
    ASSERT_OK(sw_buffer_view(a, 2048, 1024, &va));
    ASSERT_OK(sw_buffer_view(b, 1024, 2048, &vb));
    ASSERT_OK(sw_buffer_copy(vb, 1000, va, 24, 1000));
    memcpy(mb + 2024, ma + 2072, 1000);
    /* 0 bytes: nothing. */
    ASSERT_OK(sw_buffer_copy(b, 4096, a, 4096, 0));

    /* Out of range on either side: nothing copied. */
    ASSERT_ERR(sw_buffer_copy(b, 3500, a, 0, 1000), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_buffer_copy(b, 0, a, 3500, 1000), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_buffer_copy(vb, 0, va, 0, 1025), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_buffer_copy(vb, 1100, va, 0, 1000), SW_ERR_OUT_OF_RANGE);

    ASSERT_OK(sw_buffer_read(a, 0, got, sizeof got));
    ASSERT_MEM_EQ(got, ma, sizeof ma);
    ASSERT_OK(sw_buffer_read(b, 0, got, sizeof got));
    ASSERT_MEM_EQ(got, mb, sizeof mb);
    ASSERT_OK(sw_buffer_free(va));
    ASSERT_OK(sw_buffer_free(vb));
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
}

TEST(buffer_fill)
{
    sw_device *dev = test_device();
    sw_buffer *b = test_alloc(dev, 1024, "fill");
    test_write_pattern(b, 3);
    unsigned char model[1024], got[1024];
    test_pattern(model, sizeof model, 3);

    const uint8_t p1 = 0xAB;
    const uint16_t p2 = 0x1234;
    const uint32_t p4 = 0xDEADBEEF;
    const uint64_t p8 = 0x0102030405060708ull;
    struct {
        size_t off, n;
        const void *pat;
        size_t psize;
    } cases[] = {
        {3, 10, &p1, 1},    {20, 30, &p2, 2},    {64, 64, &p4, 4},
        {130, 24, &p4, 4},  {200, 128, &p8, 8},  {1000, 24, &p8, 8},
        {0, 0, &p4, 4},     {1024, 0, &p8, 8},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ASSERT_OK(sw_buffer_fill(b, cases[c].off, cases[c].n, cases[c].pat,
                                 cases[c].psize));
        for (size_t i = 0; i < cases[c].n; i++)
            model[cases[c].off + i] =
                ((const unsigned char *)cases[c].pat)[i % cases[c].psize];
    }
    ASSERT_OK(sw_buffer_read(b, 0, got, sizeof got));
    ASSERT_MEM_EQ(got, model, sizeof model);

    /* Bad pattern sizes and lengths: refused, nothing written. */
    ASSERT_ERR(sw_buffer_fill(b, 0, 9, &p8, 3), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_buffer_fill(b, 0, 16, &p8, 16), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_buffer_fill(b, 0, 16, &p8, 0), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_buffer_fill(b, 0, 10, &p4, 4), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_buffer_fill(b, 0, 7, &p2, 2), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_buffer_fill(b, 1020, 8, &p4, 4), SW_ERR_OUT_OF_RANGE);
    ASSERT_ERR(sw_buffer_fill(b, 1025, 0, &p4, 4), SW_ERR_OUT_OF_RANGE);
    /* Through a view, bounded by it. */
    sw_buffer *v = NULL;
    ASSERT_OK(sw_buffer_view(b, 512, 256, &v));
    ASSERT_ERR(sw_buffer_fill(v, 0, 260, &p4, 4), SW_ERR_OUT_OF_RANGE);
    ASSERT_OK(sw_buffer_fill(v, 8, 16, &p2, 2));
    for (size_t i = 0; i < 16; i++)
        model[520 + i] = ((const unsigned char *)&p2)[i % 2];
    ASSERT_OK(sw_buffer_read(b, 0, got, sizeof got));
    ASSERT_MEM_EQ(got, model, sizeof model);
    ASSERT_OK(sw_buffer_free(v));
    ASSERT_OK(sw_buffer_free(b));
}
