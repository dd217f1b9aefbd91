/*
 * test-trypin.c -- the pins that never wait (src/core/trypin.h), which
 * the Python module takes with the GIL held: they do the warm path's
 * bookkeeping or nothing at all.  Internal API: the tests include the
 * core's headers.  Every case checks the pins left on each buffer, and a
 * threaded case runs the module's pattern (try, then the full form)
 * under a moving budget with every result checked.
 */
#include "test.h"
#include "tests.h"

#include "core/internal.h"
#include "core/trypin.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define TB (64u << 10)

static sw_buffer_state tstate(sw_buffer *b)
{
    sw_buffer_state st;
    ASSERT_OK(sw_buffer_state_get(b, &st));
    return st;
}

/* Warm, the try gives what the full form gives: the same pointers, one
 * pin per occurrence, and its end leaves none. */
TEST(trypin_warm_matches_full_form)
{
    sw_device *dev = test_device();
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    sw_buffer *bufs[3] = {test_alloc(dev, TB, "a"), test_alloc(dev, TB, "b"),
                          test_alloc(dev, TB, "c")};
    sw_devmem full[3], got[3];
    /* The first pin on q orders q after the buffers' earlier work: that
     * is the full form's. */
    ASSERT_EQ(sw__launch_begin_q_try(q, bufs, NULL, 3, got), SW__AGAIN);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(test_pins_of(dev, bufs[i]), 0);
    ASSERT_OK(sw_launch_begin_q(q, bufs, 3, full));
    ASSERT_OK(sw_launch_end_q(q, bufs, 3));
    ASSERT_EQ(sw__launch_begin_q_try(q, bufs, NULL, 3, got), SW_OK);
    ASSERT_MEM_EQ(got, full, sizeof full);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(test_pins_of(dev, bufs[i]), 1);
    ASSERT_EQ(sw__launch_end_q_try(q, bufs, 3), SW_OK);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(test_pins_of(dev, bufs[i]), 0);

    /* The same handles in another array pin the same way; an end must
     * name the begin's own array, else the full form checks it. */
    sw_buffer *again[3] = {bufs[0], bufs[1], bufs[2]};
    ASSERT_EQ(sw__launch_begin_q_try(q, again, NULL, 3, got), SW_OK);
    ASSERT_MEM_EQ(got, full, sizeof full);
    ASSERT_EQ(sw__launch_end_q_try(q, bufs, 3), SW__AGAIN);
    ASSERT_EQ(test_pins_of(dev, bufs[0]), 1);
    ASSERT_OK(sw_launch_end_q(q, bufs, 3));
    ASSERT_EQ(test_pins_of(dev, bufs[0]), 0);
    /* An end with no begin: nothing unpinned, the full form refuses. */
    ASSERT_EQ(sw__launch_end_q_try(q, bufs, 3), SW__AGAIN);
    ASSERT_ERR(sw_launch_end_q(q, bufs, 3), SW_ERR_INVALID_ARG);

    /* The same buffer twice is pinned twice, and unpinned twice. */
    sw_buffer *twice[2] = {bufs[1], bufs[1]};
    ASSERT_EQ(sw__launch_begin_q_try(q, twice, NULL, 2, got), SW_OK);
    ASSERT_EQ(test_pins_of(dev, bufs[1]), 2);
    ASSERT_EQ(sw__launch_end_q_try(q, twice, 2), SW_OK);
    ASSERT_EQ(test_pins_of(dev, bufs[1]), 0);

    /* Access modes: valid ones pin; a bad one is the full form's error. */
    const unsigned char rw[3] = {SW_ACCESS_READ, SW_ACCESS_WRITE,
                                 SW_ACCESS_READ};
    ASSERT_EQ(sw__launch_begin_q_try(q, bufs, rw, 3, got), SW_OK);
    ASSERT_EQ(sw__launch_end_q_try(q, bufs, 3), SW_OK);
    const unsigned char bad[3] = {SW_ACCESS_READ, 7, SW_ACCESS_READ};
    ASSERT_EQ(sw__launch_begin_q_try(q, bufs, bad, 3, got), SW__AGAIN);
    ASSERT_ERR(sw_launch_begin_q_access(q, bufs, bad, 3, got),
               SW_ERR_INVALID_ARG);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(test_pins_of(dev, bufs[i]), 0);

    /* Nothing to do, or nothing to do it with: the full form's. */
    ASSERT_EQ(sw__launch_begin_q_try(q, bufs, NULL, 0, got), SW__AGAIN);
    ASSERT_EQ(sw__launch_begin_q_try(q, NULL, NULL, 3, got), SW__AGAIN);
    ASSERT_EQ(sw__launch_begin_q_try(q, bufs, NULL, 3, NULL), SW__AGAIN);
    ASSERT_EQ(sw__launch_end_q_try(q, NULL, 3), SW__AGAIN);
    for (int i = 0; i < 3; i++)
        ASSERT_OK(sw_buffer_free(bufs[i]));
    ASSERT_OK(sw_queue_release(q));
}

/* What the try leaves to the full form, each time with nothing changed:
 * a spilled argument (the others it pinned are unpinned), the host's pin
 * of a buffer a queue used, a buffer freed while pinned (its last pin
 * releases it), a released queue. */
TEST(trypin_leaves_the_rest_to_the_full_form)
{
    sw_device *dev = test_device();
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    sw_buffer *a = test_alloc(dev, TB, "a"), *b = test_alloc(dev, TB, "b");
    test_write_pattern(a, 5);
    sw_buffer *set[2] = {b, a};
    sw_devmem p[2];
    ASSERT_OK(sw_launch_begin_q(q, set, 2, p));
    ASSERT_OK(sw_launch_end_q(q, set, 2));

    if (test_can_spill()) {
        ASSERT_OK(sw_set_memory_budget(dev, 1)); /* both go */
        ASSERT_OK(sw_set_memory_budget(dev, 0));
        ASSERT_EQ(tstate(a), SW_SPILLED);
        sw_buffer *one[1] = {b};
        ASSERT_OK(sw_launch_begin_q(q, one, 1, p)); /* b back, not a */
        ASSERT_OK(sw_launch_end_q(q, one, 1));
        ASSERT_EQ(sw__launch_begin_q_try(q, set, NULL, 2, p), SW__AGAIN);
        ASSERT_EQ(tstate(a), SW_SPILLED);
        ASSERT_EQ(test_pins_of(dev, a), 0);
        ASSERT_EQ(test_pins_of(dev, b), 0); /* the try's pin, undone */
        ASSERT_OK(sw_launch_begin_q(q, set, 2, p)); /* restores a */
        ASSERT_EQ(tstate(a), SW_RESIDENT);
        ASSERT_EQ(sw__launch_end_q_try(q, set, 2), SW_OK);
        ASSERT_EQ(test_pins_of(dev, a), 0);
        test_expect_pattern(a, 5);
    }

    /* The host's pin of a buffer q used waits for q: the full form's. */
    sw_buffer *ha[1] = {a};
    ASSERT_OK(sw_launch_begin_q(q, ha, 1, p));
    ASSERT_OK(sw_launch_end_q(q, ha, 1));
    ASSERT_EQ(sw__launch_begin_q_try(NULL, ha, NULL, 1, p), SW__AGAIN);
    ASSERT_EQ(test_pins_of(dev, a), 0);
    ASSERT_OK(sw_launch_begin_q(NULL, ha, 1, p));
    ASSERT_EQ(sw__launch_end_q_try(NULL, ha, 1), SW_OK);
    ASSERT_EQ(test_pins_of(dev, a), 0);
    /* Now no queue's work is on it: once the default queue is idle, the
     * host's pin is bookkeeping too -- where the backend can tell that it
     * is (its queue_idle op: sim, host, OpenCL, CUDA; the HIP and Level
     * Zero backends have none, and their host pins take the full form). */
    ASSERT_OK(sw_device_synchronize(dev));
    int rc = sw__launch_begin_q_try(NULL, ha, NULL, 1, p);
    if (test_is_sim())
        ASSERT_EQ(rc, SW_OK);
    if (rc == SW_OK) {
        ASSERT_EQ(test_pins_of(dev, a), 1);
        ASSERT_EQ(sw__launch_end_q_try(NULL, ha, 1), SW_OK);
    } else {
        ASSERT_EQ(rc, SW__AGAIN);
    }
    ASSERT_EQ(test_pins_of(dev, a), 0);

    /* A view pinned whose base's handle is freed meanwhile: the end of
     * the base's last pin may release it, the full form's.  (The host's
     * pin made q wait for the default queue again: the full form's too.) */
    sw_buffer *v = NULL;
    ASSERT_OK(sw_buffer_view(b, 0, TB / 2, &v));
    sw_buffer *vs[2] = {v, a};
    ASSERT_EQ(sw__launch_begin_q_try(q, vs, NULL, 2, p), SW__AGAIN);
    ASSERT_OK(sw_launch_begin_q(q, vs, 2, p));
    ASSERT_OK(sw_launch_end_q(q, vs, 2));
    sw_memory_info m0 = test_info_synced(dev);
    ASSERT_EQ(sw__launch_begin_q_try(q, vs, NULL, 2, p), SW_OK);
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_EQ(sw__launch_end_q_try(q, vs, 2), SW__AGAIN);
    ASSERT_EQ(test_pins_of(dev, a), 1);
    ASSERT_OK(sw_launch_end_q(q, vs, 2));
    ASSERT_EQ(test_pins_of(dev, a), 0);
    ASSERT_OK(sw_buffer_free(v)); /* the base's last reference */
    sw_memory_info m1 = test_info_synced(dev);
    ASSERT_UEQ(m0.in_use - m1.in_use, test_round(TB));

    /* A released queue, a freed buffer: the full form says what. */
    sw_queue *gone = NULL;
    ASSERT_OK(sw_queue_create(dev, &gone));
    ASSERT_OK(sw_queue_release(gone));
    ASSERT_EQ(sw__launch_begin_q_try(gone, ha, NULL, 1, p), SW__AGAIN);
    ASSERT_ERR(sw_launch_begin_q(gone, ha, 1, p), SW_ERR_INVALID_HANDLE);
    ASSERT_EQ(sw__launch_begin_q_try(q, set, NULL, 2, p), SW__AGAIN);
    ASSERT_EQ(sw__launch_begin_q_try(NULL, set, NULL, 2, p), SW__AGAIN);
    ASSERT_EQ(test_pins_of(dev, a), 0);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_queue_release(q));
}

typedef struct {
    sw_queue *q;
    sw_buffer **set;
    int rc_begin, rc_end;
} try_arg;

static void *try_thread(void *arg)
{
    try_arg *t = arg;
    sw_devmem p[2];
    t->rc_begin = sw__launch_begin_q_try(t->q, t->set, NULL, 2, p);
    t->rc_end = sw__launch_end_q_try(t->q, t->set, 2);
    return NULL;
}

/* The device lock held by another thread: the try returns at once. */
TEST(trypin_never_waits_for_the_lock)
{
    sw_device *dev = test_device();
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    sw_buffer *set[2] = {test_alloc(dev, TB, "a"), test_alloc(dev, TB, "b")};
    sw_devmem p[2];
    ASSERT_OK(sw_launch_begin_q(q, set, 2, p));
    ASSERT_OK(sw_launch_end_q(q, set, 2));
    try_arg t = {q, set, 0, 0};
    pthread_t th;
    sw__lock(dev);
    ASSERT_EQ(pthread_create(&th, NULL, try_thread, &t), 0);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    sw__unlock(dev);
    ASSERT_EQ(t.rc_begin, SW__AGAIN);
    ASSERT_EQ(t.rc_end, SW__AGAIN);
    ASSERT_EQ(test_pins_of(dev, set[0]), 0);
    /* Free, the same thread's begin and end are bookkeeping. */
    ASSERT_EQ(pthread_create(&th, NULL, try_thread, &t), 0);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    ASSERT_EQ(t.rc_begin, SW_OK);
    ASSERT_EQ(t.rc_end, SW_OK);
    ASSERT_EQ(test_pins_of(dev, set[0]), 0);
    ASSERT_OK(sw_buffer_free(set[0]));
    ASSERT_OK(sw_buffer_free(set[1]));
    ASSERT_OK(sw_queue_release(q));
}

/* ------------------------------------------------------------------------
 * Threads: the module's pattern, the try then the full form
 * ---------------------------------------------------------------------- */

typedef struct {
    sw_device *dev;
    sw_buffer *shared; /* every thread pins it, reading */
    int index;
    atomic_int *failed;
    atomic_int *tried; /* pins the try took */
} try_worker;

static int pin_either(sw_queue *q, sw_buffer **set, const unsigned char *acc,
                      sw_devmem *p, atomic_int *tried)
{
    int rc = sw__launch_begin_q_try(q, set, acc, 2, p);
    if (rc == SW_OK) {
        atomic_fetch_add(tried, 1);
        return rc;
    }
    while ((rc = sw_launch_begin_q_access(q, set, acc, 2, p)) == SW_ERR_OOM)
        ; /* the budget: other threads' pins hold the rest */
    return rc;
}

static void *try_pin_thread(void *arg)
{
    try_worker *w = arg;
    const size_t n = 16384;
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(w->dev, &q));
    sw_buffer *mine = test_alloc(w->dev, n * 4, "mine");
    int32_t *host = malloc(n * 4);
    ASSERT_NOT_NULL(host);
    sw_scalar s = {.i = w->index * 100000};
    ASSERT_OK(sw_op_fill(mine, SW_INT32, n, s));
    const unsigned char acc[2] = {SW_ACCESS_WRITE, SW_ACCESS_READ};
    for (int it = 0; it < 300; it++) {
        sw_buffer *set[2] = {mine, w->shared};
        sw_devmem p[2];
        sw_queue *on = (it % 3) ? q : NULL;
        ASSERT_OK(pin_either(on, set, acc, p, w->tried));
        /* mine += shared (1s), raw on the pinned memory: on q, or on the
         * default queue waited for (the host's pin). */
        sw_kernel_args k = {.kernel = SW_KERNEL_ADD, .dtype = SW_INT32,
                            .n = n, .out = p[0], .a = p[0], .b = p[1]};
        if (on != NULL) {
            ASSERT_OK(sw_launch_kernel_q(q, &k));
        } else {
            ASSERT_OK(sw_launch_kernel(w->dev, &k));
            ASSERT_OK(sw_device_synchronize(w->dev));
        }
        int rc = sw__launch_end_q_try(on, set, 2);
        if (rc == SW__AGAIN)
            rc = sw_launch_end_q(on, set, 2);
        ASSERT_OK(rc);
        if (it % 50 == 49) {
            int32_t want = w->index * 100000 + it + 1;
            ASSERT_OK(sw_buffer_read(mine, 0, host, n * 4));
            for (size_t i = 0; i < n; i += 61)
                if (host[i] != want) {
                    atomic_store(w->failed, 1);
                    FAIL("thread %d iteration %d element %zu: %d, expected "
                         "%d", w->index, it, i, host[i], want);
                }
        }
    }
    free(host);
    ASSERT_OK(sw_buffer_free(mine));
    ASSERT_OK(sw_queue_release(q));
    return NULL;
}

TEST(thread_trypins)
{
    sw_device *dev = test_device();
    enum { NT = 4 };
    sw_buffer *shared = test_alloc(dev, 16384 * 4, "shared");
    sw_scalar one = {.i = 1};
    ASSERT_OK(sw_op_fill(shared, SW_INT32, 16384, one));
    pthread_t t[NT];
    try_worker w[NT];
    atomic_int failed = 0, tried = 0;
    for (int i = 0; i < NT; i++) {
        w[i] = (try_worker){dev, shared, i, &failed, &tried};
        ASSERT_EQ(pthread_create(&t[i], NULL, try_pin_thread, &w[i]), 0);
    }
    int can_spill = test_can_spill();
    for (int r = 0; r < 30 && can_spill; r++) {
        /* Room for two threads' pins at a time, and none. */
        ASSERT_OK(sw_set_memory_budget(dev, r % 3 == 2 ? 0 : 6 * 16384 * 4));
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < NT; i++)
        ASSERT_EQ(pthread_join(t[i], NULL), 0);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    ASSERT_EQ(atomic_load(&failed), 0);
    /* The warm path is the common one even with the budget moving. */
    ASSERT_TRUE(atomic_load(&tried) > 0);
    ASSERT_EQ(test_pins_of(dev, shared), 0);
    ASSERT_OK(sw_buffer_free(shared));
}
