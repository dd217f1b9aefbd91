/*
 * test-hostoom.c -- the library's own host allocations failing
 * (SW_FAULT_HOST_ALLOC).  Each step of a fixed sequence is run under a
 * fault at its 1st, 2nd, ... host allocation until it succeeds (SQLite's
 * OOM loops, one call at a time, so that the test's own set-up never runs
 * under the fault).  The steps are every entry point whose host allocation
 * can fail -- handles of every type, the arguments of a long launch, a
 * queue's events, tasks and runner thread, waits on several queues, a
 * spill's host copy, order records -- so each SW_ERR_HOST_OOM path is
 * taken: every failure must be that error, with a message, NULL
 * out-parameters and no change of state, and every buffer's data must
 * survive.
 */
#include "test.h"
#include "tests.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

/* No call here makes more host allocations than this. */
#define MAX_FAULTS 64

/* The state a failed call must leave as it was. */
static void expect_same(const sw_memory_info *a, const sw_memory_info *b)
{
    ASSERT_UEQ(a->in_use, b->in_use);
    ASSERT_UEQ(a->spilled, b->spilled);
    ASSERT_UEQ(a->allocs, b->allocs);
    ASSERT_UEQ(a->frees, b->frees);
    ASSERT_UEQ(a->spills, b->spills);
    ASSERT_UEQ(a->restores, b->restores);
    ASSERT_UEQ(a->budget, b->budget);
}

static int persistent_faults; /* the variant running */

/* Runs CALL (an int expression) with the Nth host allocation failing, for
 * N = 1, 2, ... until it succeeds.  Before each try RESET runs (to put
 * out-parameters back); after a failure ON_FAIL runs (with the fault
 * disarmed) to check nothing happened.  *FAILS counts the failures. */
#define UNDER_FAULTS(dev, what, fails, RESET, CALL, ON_FAIL)                  \
    do {                                                                      \
        for (uint64_t nth_ = 1;; nth_++) {                                    \
            if (nth_ > MAX_FAULTS)                                            \
                FAIL("%s: still failing after %d host-allocation faults",     \
                     what, MAX_FAULTS);                                       \
            sw_memory_info mi_ = test_info(dev);                              \
            RESET;                                                            \
            ASSERT_OK(sw_inject_fault(dev, SW_FAULT_HOST_ALLOC, nth_,         \
                                      persistent_faults));                    \
            int rc_ = (CALL);                                                 \
            ASSERT_OK(sw_inject_fault(dev, SW_FAULT_HOST_ALLOC, 0, 0));       \
            if (rc_ == SW_OK)                                                 \
                break;                                                        \
            if (rc_ != SW_ERR_HOST_OOM)                                       \
                FAIL("%s under a host-allocation fault -> %s: %s", what,      \
                     sw_err_name(rc_), sw_last_error());                      \
            ASSERT_TRUE(sw_last_error()[0] != '\0');                          \
            sw_memory_info after_ = test_info(dev);                           \
            expect_same(&mi_, &after_);                                       \
            ON_FAIL;                                                          \
            (*(fails))++;                                                     \
        }                                                                     \
    } while (0)

static void task_fn(void *arg) { atomic_fetch_add((atomic_int *)arg, 1); }

enum {
    S_ALLOC,
    S_VIEW,
    S_EXPOSE,
    S_WRAP,
    S_LAUNCH_BEGIN,
    S_LAUNCH_END,
    S_QUEUE,
    S_RECORD,
    S_HOST_TASK,
    S_SYNC,
    S_SCOPE,
    S_SPILL,
    NSTEPS
};

static const char *const step_names[NSTEPS] = {
    "alloc",        "view",       "expose",     "wrap",
    "launch_begin", "launch_end", "queue_create", "record_event",
    "host_task",    "synchronize", "scope_begin", "alloc with a spill",
};

static void sequence(sw_device *dev, int fails[NSTEPS])
{
    sw_buffer *a;
    UNDER_FAULTS(dev, "alloc", &fails[S_ALLOC], a = (sw_buffer *)1,
                 sw_buffer_alloc(dev, 8192, "a", &a), ASSERT_NULL(a));
    test_write_pattern(a, 11);

    sw_buffer *v;
    UNDER_FAULTS(dev, "view", &fails[S_VIEW], v = (sw_buffer *)1,
                 sw_buffer_view(a, 512, 1024, &v), ASSERT_NULL(v));

    sw_devmem ptr;
    sw_lease *l;
    UNDER_FAULTS(dev, "expose", &fails[S_EXPOSE], l = (sw_lease *)1,
                 sw_buffer_expose(a, &ptr, &l), ASSERT_NULL(l));

    /* a is leased, so its memory stays put while it is wrapped. */
    sw_buffer *w;
    UNDER_FAULTS(dev, "wrap", &fails[S_WRAP], w = (sw_buffer *)1,
                 sw_buffer_wrap(dev, ptr, 4096, "wrapped", &w),
                 ASSERT_NULL(w));

    /* More arguments than fit on the stack: their array is allocated. */
    enum { NARGS = 40 };
    sw_buffer *args[NARGS];
    sw_devmem ptrs[NARGS];
    for (int i = 0; i < NARGS; i++)
        args[i] = i % 2 ? a : v;
    UNDER_FAULTS(dev, "launch_begin", &fails[S_LAUNCH_BEGIN], (void)0,
                 sw_launch_begin(dev, args, NARGS, ptrs),
                 ASSERT_UEQ(ptrs[NARGS - 1].base, 0));
    UNDER_FAULTS(dev, "launch_end", &fails[S_LAUNCH_END], (void)0,
                 sw_launch_end(dev, args, NARGS), (void)0);
    /* Exactly one begin and one end took effect: nothing stays pinned,
     * so the lease's release below lets a spill again. */

    sw_queue *q;
    UNDER_FAULTS(dev, "queue_create", &fails[S_QUEUE], q = (sw_queue *)1,
                 sw_queue_create(dev, &q), ASSERT_NULL(q));

    sw_buffer *b = test_alloc(dev, 4096, "b");
    sw_scalar two = {.f = 2.0};
    /* Ordering b after the default queue on q; whatever the backend
     * allocates for that fails cleanly too. */
    int fill_fails = 0;
    UNDER_FAULTS(dev, "fill_q", &fill_fails, (void)0,
                 sw_op_fill_q(q, b, SW_FLOAT32, 1024, two), (void)0);

    sw_event *ev;
    UNDER_FAULTS(dev, "record_event", &fails[S_RECORD], ev = (sw_event *)1,
                 sw_queue_record_event(q, &ev), ASSERT_NULL(ev));
    ASSERT_OK(sw_event_wait(ev));
    ASSERT_OK(sw_event_release(ev));

    static atomic_int ran;
    atomic_store(&ran, 0);
    UNDER_FAULTS(dev, "host_task", &fails[S_HOST_TASK], ev = (sw_event *)1,
                 sw_queue_host_task(q, task_fn, &ran, &ev), {
                     ASSERT_NULL(ev);
                     ASSERT_OK(sw_queue_synchronize(q));
                     ASSERT_EQ(atomic_load(&ran), 0); /* never queued */
                 });
    ASSERT_OK(sw_event_wait(ev));
    ASSERT_OK(sw_event_release(ev));
    ASSERT_EQ(atomic_load(&ran), 1);

    /* Waiting for every queue needs a list of their events. */
    UNDER_FAULTS(dev, "synchronize", &fails[S_SYNC], (void)0,
                 sw_device_synchronize(dev), (void)0);

    sw_peak_scope *s;
    UNDER_FAULTS(dev, "scope_begin", &fails[S_SCOPE], s = (sw_peak_scope *)1,
                 sw_peak_scope_begin(dev, &s), ASSERT_NULL(s));

    /* A budget that makes the next allocation spill b (a is leased): the
     * spill's host copy is a host allocation, and a failed one leaves b
     * resident and intact. */
    ASSERT_OK(sw_device_synchronize(dev));
    ASSERT_OK(sw_empty_cache(dev));
    sw_memory_info now = test_info(dev);
    ASSERT_OK(sw_set_memory_budget(dev, now.in_use));
    sw_buffer *c;
    UNDER_FAULTS(dev, "alloc with a spill", &fails[S_SPILL],
                 c = (sw_buffer *)1, sw_buffer_alloc(dev, 4096, "c", &c), {
                     ASSERT_NULL(c);
                     sw_buffer_state st;
                     ASSERT_OK(sw_buffer_state_get(b, &st));
                     ASSERT_EQ(st, SW_RESIDENT);
                     ASSERT_OK(sw_empty_cache(dev));
                 });
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    sw_buffer_state st;
    ASSERT_OK(sw_buffer_state_get(b, &st));
    ASSERT_EQ(st, SW_SPILLED);
    /* Back on the device for a sum: b holds 2.0 x 1024. */
    sw_scalar sum;
    ASSERT_OK(sw_op_sum(b, SW_FLOAT32, 1024, &sum));
    ASSERT_DBL_EQ(sum.f, 2048.0);

    /* Nothing lost on the way. */
    test_expect_pattern(a, 11);
    ASSERT_OK(sw_peak_scope_end(s, NULL));
    ASSERT_OK(sw_buffer_free(c));
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_queue_release(q));
    ASSERT_OK(sw_buffer_free(w));
    ASSERT_OK(sw_lease_release(l));
    ASSERT_OK(sw_buffer_free(v));
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_device_synchronize(dev));
    ASSERT_OK(sw_empty_cache(dev));
    sw_memory_info end = test_info_synced(dev);
    ASSERT_UEQ(end.in_use, 0);
    ASSERT_UEQ(end.spilled, 0);
    ASSERT_UEQ(end.cached, 0);
}

TEST(hostoom_every_path)
{
    test_require_spill();
    sw_device *dev = test_device();
    int fails[NSTEPS] = {0};
    persistent_faults = 0;
    sequence(dev, fails);
    /* Each step made at least one host allocation, and its failure was
     * reached and handled. */
    for (int k = 0; k < NSTEPS; k++)
        if (fails[k] == 0)
            FAIL("'%s' never failed: its host allocation was not reached",
                 step_names[k]);
}

TEST(hostoom_persistent)
{
    test_require_spill();
    /* Every host allocation from the Nth on fails: each step that needs
     * one fails cleanly, until N is past its last. */
    sw_device *dev = test_device();
    int fails[NSTEPS] = {0};
    persistent_faults = 1;
    sequence(dev, fails);
    for (int k = 0; k < NSTEPS; k++)
        ASSERT_GT(fails[k], 0);
}

/* Order records belong to no device: their allocations count against the
 * calling thread's no-device fault (sw_inject_fault(NULL, ...)). */
TEST(hostoom_order_records)
{
    sw_device *dev = test_device();
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    sw_order *o = NULL;
    int create_fails = 0;
    for (uint64_t nth = 1; o == NULL; nth++) {
        ASSERT_LE(nth, MAX_FAULTS);
        ASSERT_OK(sw_inject_fault(NULL, SW_FAULT_HOST_ALLOC, nth, 0));
        o = (sw_order *)(uintptr_t)1;
        int rc = sw_order_create(&o);
        ASSERT_OK(sw_inject_fault(NULL, SW_FAULT_HOST_ALLOC, 0, 0));
        if (rc != SW_OK) {
            ASSERT_EQ(rc, SW_ERR_HOST_OOM);
            ASSERT_NULL(o);
            create_fails++;
        }
    }
    ASSERT_GT(create_fails, 0);
    /* Adding grows the record's array now and then. */
    int add_fails = 0;
    static atomic_int ran;
    for (int i = 0; i < 40; i++) {
        sw_event *ev = NULL;
        ASSERT_OK(sw_queue_host_task(q, task_fn, &ran, NULL));
        ASSERT_OK(sw_queue_record_event(q, &ev));
        for (uint64_t nth = 1;; nth++) {
            ASSERT_LE(nth, MAX_FAULTS);
            size_t before, after, ht;
            ASSERT_OK(sw_order_counts(o, &before, &ht));
            ASSERT_OK(sw_inject_fault(NULL, SW_FAULT_HOST_ALLOC, nth, 0));
            int rc = sw_order_add(o, ev, 0);
            ASSERT_OK(sw_inject_fault(NULL, SW_FAULT_HOST_ALLOC, 0, 0));
            if (rc == SW_OK)
                break;
            ASSERT_EQ(rc, SW_ERR_HOST_OOM);
            ASSERT_OK(sw_order_counts(o, &after, &ht));
            /* Nothing recorded; one that completed meanwhile may have been
             * pruned (every call prunes: seen once on a loaded machine,
             * 7 after 8). */
            ASSERT_LE(after, before);
            add_fails++;
        }
        ASSERT_OK(sw_event_release(ev));
    }
    ASSERT_GT(add_fails, 0);
    ASSERT_OK(sw_order_wait(o));
    sw_order_destroy(o);
    ASSERT_OK(sw_queue_release(q));
    ASSERT_OK(sw_device_synchronize(dev));
}

/* A spill whose batch event cannot be had waits for its copies without
 * the lock (spill.c, xfer_record_locked).  Meanwhile its victims must stay
 * out of reach: a write to one then went into device memory about to be
 * given up, and was lost when the spill marked it spilled with the host
 * copy taken before.  A thread writes a counter into the victim until it
 * sees it spilled, while the spill runs under a host-allocation fault at
 * each of its first allocations in turn; the last value written must be
 * what the buffer holds. */
typedef struct {
    sw_buffer *v;
    atomic_int go, stop;
    uint32_t last;
} window_writer;

static void *window_write(void *arg)
{
    window_writer *w = arg;
    while (!atomic_load(&w->go))
        ;
    for (uint32_t i = 1; !atomic_load(&w->stop); i++) {
        sw_buffer_state st = SW_RESIDENT;
        if (sw_buffer_state_get(w->v, &st) != SW_OK || st == SW_SPILLED)
            break;
        if (sw_buffer_write(w->v, 0, &i, sizeof i) == SW_OK)
            w->last = i;
    }
    return NULL;
}

TEST(hostoom_spill_keeps_victims_out_of_reach)
{
    test_require_spill();
    sw_device *dev = test_device();
    for (int round = 0; round < 3; round++) {
        for (uint64_t nth = 1; nth <= 10; nth++) {
            sw_buffer *v = test_alloc(dev, (size_t)16 << 20, "victim");
            sw_buffer *keep = test_alloc(dev, 4096, "keep");
            uint32_t zero = 0;
            ASSERT_OK(sw_buffer_write(v, 0, &zero, sizeof zero));
            ASSERT_OK(sw_buffer_write(keep, 0, &zero, sizeof zero));
            ASSERT_OK(sw_device_synchronize(dev));
            window_writer w = {.v = v};
            pthread_t t;
            ASSERT_EQ(pthread_create(&t, NULL, window_write, &w), 0);
            ASSERT_OK(sw_inject_fault(dev, SW_FAULT_HOST_ALLOC, nth, 0));
            atomic_store(&w.go, 1);
            /* v is the least recently used once the writer pauses. */
            (void)sw_set_memory_budget(dev, 8192);
            ASSERT_OK(sw_inject_fault(dev, SW_FAULT_HOST_ALLOC, 0, 0));
            atomic_store(&w.stop, 1);
            ASSERT_EQ(pthread_join(t, NULL), 0);
            uint32_t got = 0;
            ASSERT_OK(sw_buffer_read(v, 0, &got, sizeof got));
            if (got != w.last)
                FAIL("fault at allocation %llu: the victim holds %u, but "
                     "%u was the last value written to it",
                     (unsigned long long)nth, got, w.last);
            ASSERT_OK(sw_set_memory_budget(dev, 0));
            ASSERT_OK(sw_buffer_free(v));
            ASSERT_OK(sw_buffer_free(keep));
        }
    }
}

/* An allocation that succeeds under a host-allocation fault is spillable:
 * its place in the spilling order was reserved first (a place taken
 * afterwards, failing, left the buffer resident and unspillable for good,
 * so that a budget was never met: found by the fuzzer). */
TEST(hostoom_allocation_stays_spillable)
{
    test_require_spill();
    for (uint64_t nth = 1; nth <= 8; nth++) {
        sw_device *dev = NULL;
        ASSERT_OK(sw_device_open(test_device_spec(), &dev));
        sw_buffer *b = NULL;
        ASSERT_OK(sw_inject_fault(dev, SW_FAULT_HOST_ALLOC, nth, 0));
        int rc = sw_buffer_alloc(dev, 4096, "under-fault", &b);
        ASSERT_OK(sw_inject_fault(dev, SW_FAULT_HOST_ALLOC, 0, 0));
        if (rc != SW_OK) {
            ASSERT_EQ(rc, SW_ERR_HOST_OOM);
            ASSERT_NULL(b);
        } else {
            test_write_pattern(b, 91);
            ASSERT_OK(sw_set_memory_budget(dev, SW_ALLOC_GRANULARITY));
            sw_buffer_state st;
            ASSERT_OK(sw_buffer_state_get(b, &st));
            if (st != SW_SPILLED)
                FAIL("allocated under a fault at host allocation %" PRIu64
                     ", the buffer cannot be spilled", nth);
            ASSERT_OK(sw_set_memory_budget(dev, 0));
            test_expect_pattern(b, 91);
            ASSERT_OK(sw_buffer_free(b));
        }
        ASSERT_OK(sw_device_close(dev));
    }
}

/* A freed buffer that holds no device memory (0 bytes) is released at
 * once even when ordering it after another queue's work cannot be had (no
 * host memory for the event): there is no memory whose reuse could
 * overtake that work.  It was parked, its free not counted until the next
 * synchronize (found by the fuzzer on the HIP stand-in). */
TEST(hostoom_empty_buffer_free_is_not_parked)
{
    sw_device *dev = test_device();
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    sw_buffer *z = test_alloc(dev, 0, "empty");
    ASSERT_OK(sw_buffer_prefetch(z, q)); /* q is ordered after it */
    sw_memory_info before = test_info(dev);
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_HOST_ALLOC, 1, 1));
    ASSERT_OK(sw_buffer_free(z));
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_HOST_ALLOC, 0, 0));
    sw_memory_info m = test_info(dev);
    ASSERT_UEQ(m.frees, before.frees + 1);
    ASSERT_UEQ(m.live_buffers, before.live_buffers - 1);
    ASSERT_OK(sw_queue_release(q));
}
