/*
 * test-inflight.c -- spills and restores in stream order (spill.c): a
 * buffer whose copy is still in flight is read, written, freed, used by a
 * kernel, spilled again and prefetched; a copy refused at once leaves the
 * buffer intact; the host staging pool keeps its bound; threads do all of
 * it at once (a thread_ test, under ThreadSanitizer too).  Copies of a few
 * MiB, so that they are still running when the next call comes.
 */
#include "test.h"
#include "tests.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define BIG (4u << 20)
#define HUGE_SZ (64u << 20) /* above glibc's mmap threshold: freed = unmapped */

static sw_buffer_state state_of(sw_buffer *b)
{
    sw_buffer_state st;
    ASSERT_OK(sw_buffer_state_get(b, &st));
    return st;
}

static sw_buffer *patterned(sw_device *dev, size_t size, uint32_t seed,
                            const char *tag)
{
    sw_buffer *b = test_alloc(dev, size, tag);
    test_write_pattern(b, seed);
    return b;
}

/* Spill `victim` by allocating `size` more under a budget that holds only
 * what is there now: the copy out is queued, not waited for. */
static sw_buffer *spill_by_alloc(sw_device *dev, size_t size, const char *tag)
{
    sw_memory_info m = test_info(dev);
    ASSERT_OK(sw_set_memory_budget(dev, m.in_use));
    sw_buffer *b = test_alloc(dev, size, tag);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    return b;
}

TEST(inflight_read_write)
{
    test_require_spill();
    sw_device *dev = test_device();
    sw_buffer *a = patterned(dev, BIG, 1, "a");
    sw_buffer *b = spill_by_alloc(dev, BIG, "b");
    ASSERT_EQ(state_of(a), SW_SPILLED);
    /* Read right away: the host copy is read once the copy has landed. */
    test_expect_pattern(a, 1);
    /* Write into it while spilled (the host copy), then bring it back. */
    sw_buffer *c = spill_by_alloc(dev, BIG, "c"); /* b goes out too */
    ASSERT_EQ(state_of(b), SW_SPILLED);
    test_write_pattern(b, 2);
    sw_devmem p;
    ASSERT_OK(sw_buffer_device_ptr(b, &p));
    test_expect_pattern(b, 2);
    test_expect_pattern(a, 1);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_buffer_free(c));
}

/* sw_reset_counters while a spill's copy is in flight: the copy's time,
 * counted when it is seen done, belongs to before the reset (its count
 * went with it), so after it spills == 0 and spill_seconds == 0. */
TEST(inflight_reset_counters)
{
    test_require_spill();
    sw_device *dev = test_device();
    sw_buffer *a = patterned(dev, BIG, 3, "a");
    sw_buffer *b = spill_by_alloc(dev, BIG, "b");
    ASSERT_OK(sw_reset_counters(dev));
    ASSERT_OK(sw_device_synchronize(dev));
    sw_memory_info mi = test_info(dev);
    ASSERT_EQ(mi.spills, 0);
    ASSERT_TRUE(mi.spill_seconds == 0.0);
    test_expect_pattern(a, 3);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
}

TEST(inflight_free)
{
    test_require_spill();
    sw_device *dev = test_device();
    sw_buffer *a = patterned(dev, BIG, 3, "freed in flight");
    sw_buffer *b = spill_by_alloc(dev, BIG, "b");
    ASSERT_EQ(state_of(a), SW_SPILLED);
    ASSERT_OK(sw_buffer_free(a)); /* its copy may still be running */
    sw_memory_info m = test_info(dev);
    ASSERT_UEQ(m.spilled, 0);
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_device_synchronize(dev));
    /* Freed during a restore's copy too. */
    sw_buffer *c = patterned(dev, BIG, 4, "c");
    sw_buffer *d = spill_by_alloc(dev, BIG, "d");
    ASSERT_EQ(state_of(c), SW_SPILLED);
    ASSERT_OK(sw_buffer_free(d));
    ASSERT_OK(sw_buffer_prefetch(c, NULL));
    ASSERT_OK(sw_buffer_free(c));
}

/* A buffer freed while its prefetch's copy in runs stays (released) until
 * the copy ends; sw_release_host_pool, which waits for such copies, then
 * let it go a second time: in_use went below zero by its size and its
 * slot went back to the pool twice (found by the fuzzer: a prefetch, then
 * a free, on sim:1 with SPILLWAY_SIM_JITTER). */
TEST(inflight_free_after_prefetch_then_release_pool)
{
    test_require_spill();
    sw_device *dev = test_device();
    for (int round = 0; round < 4; round++) {
        sw_buffer *keep = patterned(dev, BIG, 40, "keep");
        sw_buffer *a = patterned(dev, 4 * BIG, 41, "a");
        sw_buffer *b = spill_by_alloc(dev, 4 * BIG, "b");
        if (state_of(a) != SW_SPILLED)
            FAIL("a is not spilled");
        ASSERT_OK(sw_device_synchronize(dev)); /* its copy out is done */
        sw_memory_info before = test_info(dev);
        ASSERT_OK(sw_buffer_prefetch(a, NULL)); /* may spill keep or b */
        ASSERT_OK(sw_buffer_free(a));           /* its copy in still runs */
        ASSERT_OK(sw_release_host_pool(dev));
        sw_memory_info m = test_info(dev);
        ASSERT_UEQ(m.frees, before.frees + 1);
        ASSERT_UEQ(m.live_buffers, 2);
        ASSERT_UEQ(m.host_pool, 0);
        ASSERT_UEQ(m.in_use + m.spilled, test_round(BIG) + test_round(4 * BIG));
        test_expect_pattern(keep, 40);
        ASSERT_OK(sw_buffer_free(keep));
        ASSERT_OK(sw_buffer_free(b));
        m = test_info(dev);
        ASSERT_UEQ(m.in_use, 0);
        ASSERT_UEQ(m.spilled, 0);
    }
}

TEST(inflight_relaunch_and_spill_again)
{
    test_require_spill();
    sw_device *dev = test_device();
    enum { N = BIG / 4 };
    sw_buffer *a = test_alloc(dev, BIG, "a");
    sw_scalar one = {.f = 1.0};
    ASSERT_OK(sw_op_fill(a, SW_FLOAT32, N, one));
    for (int round = 0; round < 4; round++) {
        /* Out (queued), straight back in for a kernel, out again, in. */
        sw_buffer *b = spill_by_alloc(dev, BIG, "pressure");
        ASSERT_EQ(state_of(a), SW_SPILLED);
        sw_scalar two = {.f = 2.0};
        ASSERT_OK(sw_op_scale(a, a, two, SW_FLOAT32, N)); /* restores a */
        ASSERT_EQ(state_of(a), SW_RESIDENT);
        ASSERT_OK(sw_buffer_free(b));
        b = spill_by_alloc(dev, BIG, "pressure again");
        ASSERT_OK(sw_buffer_prefetch(a, NULL)); /* in, while b's... */
        ASSERT_OK(sw_buffer_free(b));
    }
    sw_scalar s;
    ASSERT_OK(sw_op_sum(a, SW_FLOAT32, N, &s));
    ASSERT_DBL_EQ(s.f, 16.0 * N);
    ASSERT_OK(sw_buffer_free(a));
}

TEST(inflight_prefetch)
{
    test_require_spill();
    sw_device *dev = test_device();
    sw_buffer *a = patterned(dev, BIG, 5, "prefetched");
    sw_buffer *b = spill_by_alloc(dev, BIG, "b");
    ASSERT_EQ(state_of(a), SW_SPILLED);
    sw_memory_info before = test_info(dev);
    ASSERT_OK(sw_buffer_prefetch(a, NULL));
    ASSERT_EQ(state_of(a), SW_RESIDENT);
    sw_memory_info after = test_info(dev);
    ASSERT_UEQ(after.restores, before.restores + 1);
    test_expect_pattern(a, 5);
    /* A resident buffer: nothing to do; on a queue, ordering only. */
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    ASSERT_OK(sw_buffer_prefetch(a, q));
    ASSERT_OK(sw_buffer_prefetch(b, q));
    ASSERT_UEQ(test_info(dev).restores, after.restores);
    ASSERT_OK(sw_buffer_free(b));
    /* On a queue: the queue's work sees the data. */
    sw_buffer *c = spill_by_alloc(dev, BIG, "c");
    ASSERT_EQ(state_of(a), SW_SPILLED);
    ASSERT_OK(sw_buffer_prefetch(a, q));
    sw_buffer *d = test_alloc(dev, BIG, "copy of a");
    ASSERT_OK(sw_buffer_copy_q(q, d, 0, a, 0, BIG));
    ASSERT_OK(sw_queue_synchronize(q));
    test_expect_pattern(d, 5);
    /* Bad input. */
    ASSERT_ERR(sw_buffer_prefetch(NULL, NULL), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_buffer_prefetch((sw_buffer *)q, NULL),
               SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_buffer_prefetch(a, (sw_queue *)a), SW_ERR_INVALID_HANDLE);
    ASSERT_OK(sw_queue_release(q));
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(c));
    ASSERT_OK(sw_buffer_free(d));
}

/* A prefetch's copy in runs beside the default queue's work: that queue
 * waits for it only at the buffer's next use (SW__QMASK_RESTORE).  Every
 * next use must still see the data: a kernel on the default queue, a copy
 * on another queue, a host read; and a free right after must not let the
 * copy land in the memory's next owner. */
TEST(inflight_prefetch_next_use_waits)
{
    test_require_spill();
    sw_device *dev = test_device();
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    for (int use = 0; use < 4; use++) {
        sw_buffer *a = patterned(dev, BIG, 10 + (uint32_t)use, "a");
        sw_buffer *b = spill_by_alloc(dev, BIG, "b");
        ASSERT_EQ(state_of(a), SW_SPILLED);
        ASSERT_OK(sw_buffer_free(b));
        ASSERT_OK(sw_buffer_prefetch(a, NULL));
        sw_buffer_info bi[4];
        size_t count = 0;
        ASSERT_OK(sw_memory_snapshot(dev, bi, 4, &count));
        for (size_t i = 0; i < count; i++)
            ASSERT_UEQ(bi[i].queues, 0); /* no queue used it */
        sw_buffer *d = test_alloc(dev, BIG, "d");
        switch (use) {
        case 0: /* the default queue */
            ASSERT_OK(sw_buffer_copy(d, 0, a, 0, BIG));
            test_expect_pattern(d, 10);
            break;
        case 1: /* another queue, not the one prefetched for */
            ASSERT_OK(sw_buffer_copy_q(q, d, 0, a, 0, BIG));
            ASSERT_OK(sw_queue_synchronize(q));
            test_expect_pattern(d, 11);
            break;
        case 2: /* the host */
            test_expect_pattern(a, 12);
            break;
        case 3: { /* freed: its memory's next owner is written at once */
            ASSERT_OK(sw_buffer_free(a));
            a = test_alloc(dev, BIG, "next owner");
            sw_scalar seven = {.f = 7.0};
            ASSERT_OK(sw_op_fill(a, SW_FLOAT32, BIG / 4, seven));
            sw_scalar s;
            ASSERT_OK(sw_op_sum(a, SW_FLOAT32, BIG / 4, &s));
            ASSERT_DBL_EQ(s.f, 7.0 * (BIG / 4));
            break;
        }
        }
        ASSERT_OK(sw_buffer_free(a));
        ASSERT_OK(sw_buffer_free(d));
    }
    ASSERT_OK(sw_queue_release(q));
}

TEST(inflight_copy_fault_keeps_buffer)
{
    test_require_spill();
    sw_device *dev = test_device();
    sw_buffer *a = patterned(dev, BIG, 6, "a");
    sw_memory_info m = test_info(dev);
    ASSERT_OK(sw_set_memory_budget(dev, m.in_use));
    /* The copy out is refused when queued: a stays resident and intact,
     * the allocation that needed the room fails, nothing is lost. */
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_COPY, 1, 0));
    sw_buffer *b = NULL;
    ASSERT_ERR2(sw_buffer_alloc(dev, BIG, "b", &b), SW_ERR_DEVICE,
                SW_ERR_OOM);
    ASSERT_NULL(b);
    ASSERT_EQ(state_of(a), SW_RESIDENT);
    ASSERT_UEQ(test_info(dev).spills, m.spills);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    test_expect_pattern(a, 6);
    /* And a restore's copy in refused: the host copy is kept. */
    b = spill_by_alloc(dev, BIG, "b");
    ASSERT_EQ(state_of(a), SW_SPILLED);
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_COPY, 1, 0));
    sw_devmem p;
    ASSERT_ERR(sw_buffer_device_ptr(a, &p), SW_ERR_DEVICE);
    ASSERT_EQ(state_of(a), SW_SPILLED);
    test_expect_pattern(a, 6);
    ASSERT_OK(sw_buffer_device_ptr(a, &p));
    test_expect_pattern(a, 6);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
}

TEST(host_pool_bound)
{
    test_require_spill();
    sw_device *dev = test_device();
    ASSERT_OK(sw_set_host_pool_limit(dev, 1u << 20));
    enum { N = 12, SZ = 256 * 1024 };
    sw_buffer *b[N];
    for (int i = 0; i < N; i++)
        b[i] = patterned(dev, SZ, 10u + (uint32_t)i, "pooled");
    /* Spill and restore them round and round under a budget of three. */
    ASSERT_OK(sw_set_memory_budget(dev, 3 * SZ));
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) {
            sw_devmem p;
            ASSERT_OK(sw_buffer_device_ptr(b[i], &p));
            sw_memory_info m = test_info(dev);
            ASSERT_ULE(m.host_pool, 1u << 20);
            ASSERT_UEQ(m.host_pool_limit, 1u << 20);
            ASSERT_ULE(m.in_use + m.cached, 3 * SZ);
        }
    }
    ASSERT_OK(sw_device_synchronize(dev));
    ASSERT_ULE(test_info(dev).host_pool, 1u << 20);
    for (int i = 0; i < N; i++)
        test_expect_pattern(b[i], 10u + (uint32_t)i);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    for (int i = 0; i < N; i++)
        ASSERT_OK(sw_buffer_free(b[i]));
    ASSERT_OK(sw_device_synchronize(dev));
    /* Kept across empty_cache, given back on request. */
    sw_memory_info m = test_info(dev);
    ASSERT_UGT(m.host_pool, 0);
    ASSERT_OK(sw_empty_cache(dev));
    ASSERT_UEQ(test_info(dev).host_pool, m.host_pool);
    ASSERT_OK(sw_release_host_pool(dev));
    ASSERT_UEQ(test_info(dev).host_pool, 0);
    ASSERT_OK(sw_set_host_pool_limit(dev, 0)); /* none kept at all */
    ASSERT_ERR(sw_set_host_pool_limit(NULL, 1), SW_ERR_INVALID_ARG);
}

/* Threads spilling each other's buffers, reading, writing, launching and
 * freeing them while copies are in flight; every byte checked. */
typedef struct {
    sw_device *dev;
    uint32_t seed;
    int fails;
} inflight_arg;

static void *inflight_worker(void *p)
{
    inflight_arg *a = p;
    uint64_t rng = a->seed * 0x9E3779B97F4A7C15ull + 1;
    enum { K = 6, SZ = 512 * 1024 };
    sw_buffer *b[K];
    uint32_t seed[K];
    unsigned char *tmp = malloc(SZ), *want = malloc(SZ);
    for (int i = 0; i < K; i++) {
        seed[i] = a->seed * 100 + (uint32_t)i;
        if (sw_buffer_alloc(a->dev, SZ, "thread", &b[i]) != SW_OK) {
            a->fails++;
            b[i] = NULL;
            continue;
        }
        test_pattern(tmp, SZ, seed[i]);
        if (sw_buffer_write(b[i], 0, tmp, SZ) != SW_OK)
            a->fails++;
    }
    for (int it = 0; it < 60; it++) {
        int i = (int)(test_rand(&rng) % K);
        if (b[i] == NULL)
            continue;
        switch (test_rand(&rng) % 4) {
        case 0: /* read and check */
            if (sw_buffer_read(b[i], 0, tmp, SZ) != SW_OK)
                a->fails++;
            test_pattern(want, SZ, seed[i]);
            if (memcmp(tmp, want, SZ) != 0)
                a->fails++;
            break;
        case 1: /* rewrite */
            seed[i] += 7;
            test_pattern(tmp, SZ, seed[i]);
            if (sw_buffer_write(b[i], 0, tmp, SZ) != SW_OK)
                a->fails++;
            break;
        case 2: { /* device use */
            sw_devmem m;
            if (sw_buffer_prefetch(b[i], NULL) != SW_OK ||
                sw_buffer_device_ptr(b[i], &m) != SW_OK)
                a->fails++;
            break;
        }
        default: /* free and make anew */
            if (sw_buffer_free(b[i]) != SW_OK ||
                sw_buffer_alloc(a->dev, SZ, "thread", &b[i]) != SW_OK) {
                a->fails++;
                b[i] = NULL;
                break;
            }
            test_pattern(tmp, SZ, seed[i]);
            if (sw_buffer_write(b[i], 0, tmp, SZ) != SW_OK)
                a->fails++;
            break;
        }
    }
    for (int i = 0; i < K; i++)
        if (b[i] != NULL && sw_buffer_free(b[i]) != SW_OK)
            a->fails++;
    free(tmp);
    free(want);
    return NULL;
}

TEST(thread_inflight)
{
    test_require_spill();
    sw_device *dev = test_device();
    /* Room for about a third of what the threads hold. */
    ASSERT_OK(sw_set_memory_budget(dev, 3u << 20));
    enum { T = 3 };
    pthread_t th[T];
    inflight_arg args[T];
    for (int i = 0; i < T; i++) {
        args[i] = (inflight_arg){.dev = dev, .seed = (uint32_t)i + 1};
        ASSERT_EQ(pthread_create(&th[i], NULL, inflight_worker, &args[i]),
                  0);
    }
    for (int i = 0; i < T; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < T; i++)
        ASSERT_EQ(args[i].fails, 0);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    ASSERT_OK(sw_device_synchronize(dev));
    sw_memory_info m = test_info(dev);
    ASSERT_UGT(m.spills, 0);
}

/* A prefetch for a queue whose wait for the copy in cannot be queued (a
 * host allocation fails) fails and keeps the host copy; but the copy in
 * was queued and still reads that host copy, so a free of the buffer right
 * after must not give the block back under it (host pool bound 0: given
 * back is freed, and at 64 MiB unmapped, so the copy crashed).  Each host
 * allocation of the prefetch is failed in turn; on the sim the 7th is the
 * queue's wait. */
TEST(inflight_prefetch_queue_wait_fails)
{
    test_require_spill();
    sw_device *dev = test_device();
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    ASSERT_OK(sw_set_host_pool_limit(dev, 0));
    int failed = 0;
    for (uint64_t nth = 1; nth <= 16; nth++) {
        uint32_t seed = 100 + (uint32_t)nth;
        sw_buffer *a = patterned(dev, HUGE_SZ, seed, "a");
        sw_buffer *b = spill_by_alloc(dev, HUGE_SZ, "b");
        ASSERT_EQ(state_of(a), SW_SPILLED);
        ASSERT_OK(sw_buffer_free(b));
        ASSERT_OK(sw_device_synchronize(dev));
        ASSERT_OK(sw_inject_fault(dev, SW_FAULT_HOST_ALLOC, nth, 0));
        int rc = sw_buffer_prefetch(a, q);
        ASSERT_OK(sw_inject_fault(dev, SW_FAULT_HOST_ALLOC, 0, 0));
        if (rc != SW_OK) {
            ASSERT_EQ(rc, SW_ERR_HOST_OOM);
            ASSERT_EQ(state_of(a), SW_SPILLED);
            failed++;
            /* The memory the copy went to is written by its next owner
             * at once, on the default queue. */
            ASSERT_OK(sw_buffer_free(a));
            sw_buffer *c = patterned(dev, HUGE_SZ, seed + 50, "next owner");
            a = spill_by_alloc(dev, HUGE_SZ, "a again");
            test_expect_pattern(c, seed + 50);
            ASSERT_OK(sw_buffer_free(c));
        } else {
            sw_buffer *d = test_alloc(dev, HUGE_SZ, "d");
            ASSERT_OK(sw_buffer_copy_q(q, d, 0, a, 0, HUGE_SZ));
            ASSERT_OK(sw_queue_synchronize(q));
            test_expect_pattern(d, seed);
            ASSERT_OK(sw_buffer_free(d));
        }
        ASSERT_OK(sw_buffer_free(a));
    }
    /* On the sim a queue's wait takes a command, so the path is taken;
     * elsewhere every failure may be one the prefetch works around. */
    if (test_is_sim())
        ASSERT_TRUE(failed > 0);
    ASSERT_OK(sw_queue_release(q));
}

/* A buffer whose restore (a prefetch) is still copying in is spilled again
 * while another thread polls the device and prefetches it for a queue; the
 * spill's host allocations fail in turn, so that at one of them it has no
 * event and waits for its copies without the lock.  Two bugs lived in
 * that window: the poll found the restore done and gave its host block,
 * the copy out's target, back to the pool (the buffer ended spilled with
 * no host copy); and the prefetch, seeing the buffer still resident, marked
 * the queue as ordered on it, so that the queue's first use after the
 * restore did not wait for the copy in.  The data must survive each time,
 * read on the host and through the queue. */
typedef struct {
    sw_device *dev;
    sw_queue *q;
    _Atomic(sw_buffer *) target; /* retained for the poller while set */
    atomic_int stop, busy, fails, bad_rc;
} poll_arg;

static void *poll_worker(void *p)
{
    poll_arg *a = p;
    while (!atomic_load(&a->stop)) {
        sw_memory_info mi;
        if (sw_memory_info_get(a->dev, &mi) != SW_OK)
            atomic_fetch_add(&a->fails, 1);
        atomic_store(&a->busy, 1);
        sw_buffer *t = atomic_load(&a->target);
        if (t != NULL) {
            /* Refused for want of host memory (the fault) or of room
             * under the 1 MiB budget: both leave it as it was. */
            int rc = sw_buffer_prefetch(t, a->q);
            if (rc != SW_OK && rc != SW_ERR_HOST_OOM && rc != SW_ERR_OOM) {
                atomic_store(&a->bad_rc, rc);
                atomic_fetch_add(&a->fails, 1);
            }
        }
        atomic_store(&a->busy, 0);
    }
    return NULL;
}

TEST(thread_spill_of_restoring_buffer)
{
    test_require_spill();
    sw_device *dev = test_device();
    poll_arg pa = {.dev = dev};
    ASSERT_OK(sw_queue_create(dev, &pa.q));
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, poll_worker, &pa), 0);
    for (uint64_t nth = 1; nth <= 16; nth++) {
        uint32_t seed = 200 + (uint32_t)nth;
        sw_buffer *a = patterned(dev, BIG, seed, "a");
        sw_buffer *b = spill_by_alloc(dev, BIG, "b");
        ASSERT_OK(sw_buffer_free(b));
        ASSERT_OK(sw_buffer_prefetch(a, NULL)); /* the copy in is queued */
        ASSERT_OK(sw_buffer_retain(a));
        atomic_store(&pa.target, a);
        ASSERT_OK(sw_inject_fault(dev, SW_FAULT_HOST_ALLOC, nth, 0));
        int rc = sw_set_memory_budget(dev, 1u << 20); /* spills a */
        ASSERT_OK(sw_inject_fault(dev, SW_FAULT_HOST_ALLOC, 0, 0));
        if (rc != SW_OK)
            ASSERT_EQ(rc, SW_ERR_HOST_OOM);
        ASSERT_OK(sw_set_memory_budget(dev, 0));
        atomic_store(&pa.target, NULL);
        while (atomic_load(&pa.busy))
            ;
        ASSERT_OK(sw_buffer_free(a)); /* the poller's reference */
        sw_buffer *d = test_alloc(dev, BIG, "d");
        ASSERT_OK(sw_buffer_copy_q(pa.q, d, 0, a, 0, BIG));
        ASSERT_OK(sw_queue_synchronize(pa.q));
        test_expect_pattern(d, seed);
        test_expect_pattern(a, seed);
        ASSERT_OK(sw_buffer_free(d));
        ASSERT_OK(sw_buffer_free(a));
    }
    atomic_store(&pa.stop, 1);
    pthread_join(th, NULL);
    int fails = atomic_load(&pa.fails), bad_rc = atomic_load(&pa.bad_rc);
    if (fails != 0)
        FAIL("%d calls of the poller failed, the last with %s", fails,
             sw_err_name(bad_rc));
    ASSERT_OK(sw_queue_release(pa.q));
}
