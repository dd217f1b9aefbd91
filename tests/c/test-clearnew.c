/*
 * test-clearnew.c -- new memory cleared on request (sw_set_clear_new): a
 * block reused from the cache, a block fresh from the driver and one used
 * first on another queue all read as zeros until written, on whatever
 * device the suite runs; a bad switch is refused and changes nothing; and
 * threads allocating, checking, writing and freeing at once never see
 * another's bytes.
 */
#include "test.h"
#include "tests.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define ZB (256u << 10)

/* Whether bytes [0, n) of b all read as zero (a host read: it waits for
 * the work queued on b). */
static int reads_zero(sw_buffer *b, size_t n)
{
    unsigned char *p = malloc(n);
    ASSERT_NOT_NULL(p);
    ASSERT_OK(sw_buffer_read(b, 0, p, n));
    size_t i = 0;
    while (i < n && p[i] == 0)
        i++;
    free(p);
    return i == n;
}

TEST(clearnew_reused_block_reads_zeros)
{
    sw_device *dev = test_device();
    int on = -1;
    ASSERT_OK(sw_get_clear_new(dev, &on));
    ASSERT_EQ(on, 0); /* off by default */

    /* A block with someone's bytes goes to the cache. */
    sw_buffer *a = test_alloc(dev, ZB, "secret");
    test_write_pattern(a, 11);
    ASSERT_OK(sw_buffer_free(a));
    sw_memory_info m0 = test_info_synced(dev);
    ASSERT_TRUE(m0.cached >= test_round(ZB));

    ASSERT_OK(sw_set_clear_new(dev, 1));
    ASSERT_OK(sw_get_clear_new(dev, &on));
    ASSERT_EQ(on, 1);
    /* The same size again: the cached block, cleared. */
    sw_buffer *b = test_alloc(dev, ZB, "next owner");
    sw_memory_info m1 = test_info(dev);
    ASSERT_UEQ(m1.cached, m0.cached - test_round(ZB));
    ASSERT_TRUE(reads_zero(b, ZB));
    /* Written, it reads what was written (the fill came first). */
    test_write_pattern(b, 12);
    test_expect_pattern(b, 12);
    ASSERT_OK(sw_buffer_free(b));

    /* Fresh from the driver: the cache emptied first. */
    ASSERT_OK(sw_empty_cache(dev));
    sw_buffer *c = test_alloc(dev, 3 * ZB + 5, "fresh");
    ASSERT_TRUE(reads_zero(c, 3 * ZB + 5));
    ASSERT_OK(sw_buffer_free(c));

    /* An op's operand: the sum of a reused block is 0. */
    sw_buffer *d = test_alloc(dev, ZB, "d");
    test_write_pattern(d, 13);
    ASSERT_OK(sw_buffer_free(d));
    d = test_alloc(dev, ZB, "d again");
    sw_scalar s;
    ASSERT_OK(sw_op_sum(d, SW_INT32, ZB / 4, &s));
    ASSERT_EQ(s.i, 0);
    ASSERT_OK(sw_buffer_free(d));

    /* Off again: a reused block is handed out as it is (nothing queued). */
    ASSERT_OK(sw_set_clear_new(dev, 0));
    sw_buffer *e = test_alloc(dev, ZB, "e");
    ASSERT_OK(sw_buffer_free(e));
}

/* Another queue's first use of a reused, cleared block runs after the
 * fill: its op adds the cleared block to ones and finds ones. */
TEST(clearnew_another_queue_sees_zeros)
{
    sw_device *dev = test_device();
    sw_queue *q = NULL;
    int rc = sw_queue_create(dev, &q);
    if (rc == SW_ERR_UNSUPPORTED)
        test_skip("%s has no queues of its own", sw_device_name(dev));
    ASSERT_OK(rc);
    const size_t n = ZB / 4;
    for (int round = 0; round < 8; round++) {
        sw_buffer *a = test_alloc(dev, ZB, "old");
        test_write_pattern(a, 20 + (uint32_t)round);
        ASSERT_OK(sw_buffer_free(a));
        ASSERT_OK(sw_set_clear_new(dev, 1));
        sw_buffer *z = test_alloc(dev, ZB, "cleared");
        ASSERT_OK(sw_set_clear_new(dev, 0));
        sw_buffer *one = test_alloc(dev, ZB, "ones");
        sw_buffer *out = test_alloc(dev, ZB, "out");
        sw_scalar v = {.i = 1};
        ASSERT_OK(sw_op_fill_q(q, one, SW_INT32, n, v));
        ASSERT_OK(sw_op_add_q(q, out, z, one, SW_INT32, n));
        sw_scalar s;
        ASSERT_OK(sw_op_sum(out, SW_INT32, n, &s));
        ASSERT_EQ(s.i, (int64_t)n);
        ASSERT_OK(sw_buffer_free(z));
        ASSERT_OK(sw_buffer_free(one));
        ASSERT_OK(sw_buffer_free(out));
    }
    ASSERT_OK(sw_queue_release(q));
}

TEST(clearnew_bad_input)
{
    sw_device *dev = test_device();
    for (int bad = -1; bad <= 3; bad += 4) {
        ASSERT_ERR(sw_set_clear_new(dev, bad), SW_ERR_INVALID_ARG);
        ASSERT_STR_CONTAINS(sw_last_error(), "clear_new");
    }
    ASSERT_ERR(sw_set_clear_new(dev, 2), SW_ERR_INVALID_ARG);
    int on = -1;
    ASSERT_OK(sw_get_clear_new(dev, &on));
    ASSERT_EQ(on, 0); /* a refused call changed nothing */
    ASSERT_ERR(sw_get_clear_new(dev, NULL), SW_ERR_INVALID_ARG);
    ASSERT_TRUE(sw_set_clear_new(NULL, 1) != SW_OK);
    ASSERT_TRUE(sw_get_clear_new(NULL, &on) != SW_OK);
    ASSERT_EQ(on, 0);
    /* A budget that refuses the allocation: nothing is filled, nothing
     * held. */
    ASSERT_OK(sw_set_clear_new(dev, 1));
    sw_memory_info m0 = test_info_synced(dev);
    ASSERT_OK(sw_set_memory_budget(dev, ZB));
    sw_buffer *b = NULL;
    ASSERT_ERR(sw_buffer_alloc(dev, 2 * ZB, "too big", &b), SW_ERR_OOM);
    ASSERT_NULL(b);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    sw_memory_info m1 = test_info_synced(dev);
    ASSERT_UEQ(m1.in_use, m0.in_use);
    ASSERT_OK(sw_set_clear_new(dev, 0));
}

/* Threads allocate sizes that collide in the cache, check each new buffer
 * reads as zeros, write their own pattern, check it and free it, while
 * the others do the same. */
#define CT_THREADS 4
#define CT_ROUNDS 60

static void *clear_worker(void *arg)
{
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uintptr_t)arg + 1;
    sw_device *dev = test_device();
    for (int i = 0; i < CT_ROUNDS; i++) {
        size_t n = (size_t)(1 + test_rand(&rng) % 4) * (16u << 10);
        sw_buffer *b = test_alloc(dev, n, "worker");
        ASSERT_TRUE(reads_zero(b, n));
        uint32_t seed = (uint32_t)(uintptr_t)arg * 1000u + (uint32_t)i;
        test_write_pattern(b, seed);
        test_expect_pattern(b, seed);
        ASSERT_OK(sw_buffer_free(b));
    }
    return NULL;
}

TEST(thread_clearnew)
{
    sw_device *dev = test_device();
    ASSERT_OK(sw_set_clear_new(dev, 1));
    pthread_t t[CT_THREADS];
    for (uintptr_t i = 0; i < CT_THREADS; i++)
        ASSERT_EQ(pthread_create(&t[i], NULL, clear_worker, (void *)(i + 1)),
                  0);
    for (int i = 0; i < CT_THREADS; i++)
        ASSERT_EQ(pthread_join(t[i], NULL), 0);
    ASSERT_OK(sw_set_clear_new(dev, 0));
}
