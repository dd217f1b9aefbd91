/*
 * test-handle.c -- the handle pool's per-thread batches (handle.c) and the
 * per-thread blocks of buffer ids (buffer.c).  Internal API: the tests
 * include the core's headers to read the pool's size.
 *
 * What the batches must keep: a freed slot is reused only after it went
 * through the pool's FIFO and its quarantine (a thread never takes back
 * its own frees at once); a thread that exits gives its batches back, so
 * threads made and ended in a loop do not grow the pool; and handles made
 * on one thread and freed on another stay valid until freed and invalid
 * after.
 */
#include "test.h"
#include "tests.h"

#include "core/internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static uint32_t index_of(const sw_buffer *h)
{
    return (uint32_t)((uintptr_t)h & SW__H_INDEX_MASK);
}

/* A slot freed comes back only after at least the quarantine's worth of
 * other allocations; by then its old handle fails. */
TEST(handle_freed_slot_waits_its_turn)
{
    sw_device *dev = test_device();
    sw_buffer *first = test_alloc(dev, 256, "first");
    uint32_t idx = index_of(first);
    sw_buffer *stale = first;
    ASSERT_OK(sw_buffer_free(first));
    int reused_after = -1;
    for (int i = 0; i < 400 && reused_after < 0; i++) {
        sw_buffer *b = test_alloc(dev, 256, "churn");
        if (index_of(b) == idx)
            reused_after = i;
        ASSERT_OK(sw_buffer_free(b));
    }
    /* 64 slots of quarantine stand between a free and its reuse. */
    ASSERT_GE(reused_after, 64);
    ASSERT_ERR(sw_buffer_free(stale), SW_ERR_INVALID_HANDLE);
}

/* Threads that allocate, free and exit, 8 at a time, 256 of them: their
 * batches go back to the pool at exit, so the pool stays the size a few
 * threads need.  Without the exit hook each thread would keep up to two
 * batches of each pool it used. */
typedef struct {
    sw_device *dev;
    sw_buffer *keep; /* made here, freed by the main thread */
    uint64_t keep_id;
} churn_arg;

static void *churn(void *p)
{
    churn_arg *a = p;
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(a->dev, &q));
    for (int i = 0; i < 23; i++) {
        sw_buffer *b = test_alloc(a->dev, 512, "churn");
        uint32_t v = 0x5eed0000u + (uint32_t)i;
        ASSERT_OK(sw_buffer_write(b, 0, &v, sizeof v));
        sw_buffer *view = NULL;
        ASSERT_OK(sw_buffer_view(b, 0, sizeof v, &view));
        sw_event *ev = NULL;
        ASSERT_OK(sw_queue_record_event(q, &ev));
        uint32_t got = 0;
        ASSERT_OK(sw_buffer_read(view, 0, &got, sizeof got));
        ASSERT_EQ(got, v);
        ASSERT_OK(sw_event_wait(ev));
        ASSERT_OK(sw_event_release(ev));
        ASSERT_OK(sw_buffer_free(view));
        ASSERT_OK(sw_buffer_free(b));
    }
    ASSERT_OK(sw_queue_release(q));
    a->keep = test_alloc(a->dev, 256, "kept");
    ASSERT_OK(sw_buffer_id(a->keep, &a->keep_id));
    return NULL;
}

TEST(thread_handle_batches_go_back_at_exit)
{
    sw_device *dev = test_device();
    enum { AT_ONCE = 8, ROUNDS = 32 };
    uint32_t before = atomic_load(&sw__buf_pool.nslots);
    sw_buffer *kept[AT_ONCE * ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        pthread_t t[AT_ONCE];
        churn_arg a[AT_ONCE];
        for (int i = 0; i < AT_ONCE; i++) {
            a[i] = (churn_arg){.dev = dev};
            ASSERT_EQ(pthread_create(&t[i], NULL, churn, &a[i]), 0);
        }
        for (int i = 0; i < AT_ONCE; i++) {
            ASSERT_EQ(pthread_join(t[i], NULL), 0);
            kept[r * AT_ONCE + i] = a[i].keep;
            ASSERT_NE(a[i].keep_id, 0);
        }
    }
    /* 8 threads at once hold at most 2 batches of 16 buffer slots each
     * (views included), plus the quarantine and the kept buffers: a few
     * chunks.  256 threads that each kept their batches would need
     * thousands more. */
    uint32_t after = atomic_load(&sw__buf_pool.nslots);
    ASSERT_ULE(after - before, 2048u);

    /* Buffers made on other threads: their ids differ, and each frees
     * here once and only once. */
    size_t n = 0;
    ASSERT_OK(sw_memory_snapshot(dev, NULL, 0, &n));
    ASSERT_GE(n, (size_t)(AT_ONCE * ROUNDS));
    sw_buffer_info *info = calloc(n, sizeof *info);
    ASSERT_NOT_NULL(info);
    ASSERT_OK(sw_memory_snapshot(dev, info, n, &n));
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            ASSERT_NE(info[i].id, info[j].id);
    free(info);
    for (int i = 0; i < AT_ONCE * ROUNDS; i++)
        ASSERT_OK(sw_buffer_free(kept[i]));
    for (int i = 0; i < AT_ONCE * ROUNDS; i++)
        ASSERT_ERR(sw_buffer_free(kept[i]), SW_ERR_INVALID_HANDLE);
}

/* Ids are unique across threads that allocate at once, and increase
 * within each thread. */
typedef struct {
    sw_device *dev;
    uint64_t ids[300];
} id_arg;

static void *ids_worker(void *p)
{
    id_arg *a = p;
    for (int i = 0; i < 300; i++) {
        sw_buffer *b = test_alloc(a->dev, 256, "id");
        ASSERT_OK(sw_buffer_id(b, &a->ids[i]));
        ASSERT_NE(a->ids[i], 0);
        if (i > 0)
            ASSERT_UGT(a->ids[i], a->ids[i - 1]);
        ASSERT_OK(sw_buffer_free(b));
    }
    return NULL;
}

TEST(thread_buffer_ids_unique)
{
    sw_device *dev = test_device();
    enum { N = 4 };
    static id_arg a[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        a[i].dev = dev;
        ASSERT_EQ(pthread_create(&t[i], NULL, ids_worker, &a[i]), 0);
    }
    for (int i = 0; i < N; i++)
        ASSERT_EQ(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < N; i++)
        for (int j = i + 1; j < N; j++)
            for (int x = 0; x < 300; x++)
                for (int y = 0; y < 300; y++)
                    ASSERT_NE(a[i].ids[x], a[j].ids[y]);
}
