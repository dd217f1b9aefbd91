/*
 * test-contract.c -- what a failed call may change (include/spillway.h,
 * "Conventions"), and the defects an outside campaign found in it (issue
 * 24): a refusal under the budget moves nothing, the cache included; a
 * call whose second operand cannot come back keeps its first's data (and
 * never spills a later operand for an earlier one), and keeps no device
 * memory it took; the pressure callbacks get a
 * last chance before any allocation fails for good; a host pool released
 * after a prefetch is empty; a pending host task's event cannot be
 * released twice; a request larger than the device is an OOM that counts.
 */
#include "test.h"
#include "tests.h"

#include <pthread.h>
#include <stdatomic.h>

#define KiB(n) ((size_t)(n) * 1024u)

static sw_buffer_state state_of(sw_buffer *b)
{
    sw_buffer_state st;
    ASSERT_OK(sw_buffer_state_get(b, &st));
    return st;
}

/* Spill b by a budget that holds nothing else, then lift the budget: its
 * device memory is left in the cache. */
static void spill_one(sw_device *dev, sw_buffer *b)
{
    sw_memory_info m = test_info(dev);
    size_t size = 0;
    ASSERT_OK(sw_buffer_size(b, &size));
    uint64_t keep = m.in_use - test_round(size);
    ASSERT_OK(sw_set_memory_budget(dev, keep ? keep : SW_ALLOC_GRANULARITY));
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    ASSERT_EQ(state_of(b), SW_SPILLED);
}

/* The budget 8192, a leased 4096-byte buffer, 2048 bytes cached and a
 * spilled 6144-byte buffer S: every call that needs S on the device is
 * refused (what can move cannot make room), and moves nothing: neither S
 * nor the cache. */
TEST(contract_budget_refusal_keeps_the_cache)
{
    test_require_spill();
    sw_device *dev = test_device();
    sw_buffer *s = test_alloc(dev, KiB(6), "S");
    test_write_pattern(s, 3);
    sw_buffer *l = test_alloc(dev, KiB(4), "leased");
    sw_devmem ptr;
    sw_lease *lease = NULL;
    ASSERT_OK(sw_buffer_expose(l, &ptr, &lease));
    ASSERT_OK(sw_set_memory_budget(dev, KiB(8))); /* spills S */
    ASSERT_EQ(state_of(s), SW_SPILLED);
    ASSERT_OK(sw_empty_cache(dev));
    sw_buffer *t = test_alloc(dev, KiB(2), "to the cache");
    ASSERT_OK(sw_buffer_free(t));
    sw_memory_info before = test_info(dev);
    ASSERT_UEQ(before.cached, KiB(2));
    ASSERT_UEQ(before.in_use, KiB(4));

    for (int call = 0; call < 5; call++) {
        int rc;
        sw_devmem p;
        sw_buffer *n = NULL;
        sw_scalar one = {.i = 1};
        switch (call) {
        case 0: rc = sw_buffer_prefetch(s, NULL); break;
        case 1: rc = sw_buffer_device_ptr(s, &p); break;
        case 2: rc = sw_op_fill(s, SW_INT32, KiB(6) / 4, one); break;
        case 3: rc = sw_buffer_alloc(dev, KiB(6), "new", &n); break;
        default: rc = sw_launch_begin(dev, &s, 1, &p); break;
        }
        if (rc != SW_ERR_OOM)
            FAIL("call %d -> %s, expected SW_ERR_OOM: %s", call,
                 sw_err_name(rc), sw_last_error());
        ASSERT_STR_CONTAINS(sw_last_error(), "nothing was moved");
        ASSERT_NULL(n);
        sw_memory_info m = test_info(dev);
        ASSERT_UEQ(m.cached, before.cached);
        ASSERT_UEQ(m.in_use, before.in_use);
        ASSERT_UEQ(m.spilled, before.spilled);
        ASSERT_UEQ(m.spills, before.spills);
        ASSERT_UEQ(m.restores, before.restores);
        ASSERT_EQ(state_of(s), SW_SPILLED);
        /* Each is a request for device memory that failed for good. */
        ASSERT_UEQ(m.ooms, before.ooms + (uint64_t)call + 1);
    }
    test_expect_pattern(s, 3);
    ASSERT_OK(sw_lease_release(lease));
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    ASSERT_OK(sw_buffer_free(l));
    ASSERT_OK(sw_buffer_free(s));
}

/* Two spilled operands that cannot both come back under the budget (a
 * leased buffer holds the rest of it), though each alone could: the call
 * is refused before either moves, "nothing was moved" is true, and a
 * pressure callback got its two calls first.  Before, the first operand
 * came back and the second's own ladder refused it with that message
 * (found by the fuzzer's check of the contract). */
static int count_calls(sw_device *dev, sw_pressure *p, size_t bytes,
                       void *user)
{
    (void)dev, (void)p, (void)bytes;
    ++*(int *)user;
    return 0;
}

TEST(contract_set_that_cannot_come_back_moves_nothing)
{
    test_require_spill();
    sw_device *dev = test_device();
    sw_buffer *l = test_alloc(dev, KiB(1), "leased");
    sw_buffer *a = test_alloc(dev, KiB(1), "a");
    sw_buffer *b = test_alloc(dev, KiB(1), "b");
    test_write_pattern(a, 21);
    test_write_pattern(b, 22);
    sw_devmem ptr;
    sw_lease *lease = NULL;
    ASSERT_OK(sw_buffer_expose(l, &ptr, &lease));
    spill_one(dev, a);
    spill_one(dev, b);
    ASSERT_OK(sw_empty_cache(dev));
    ASSERT_OK(sw_set_memory_budget(dev, KiB(2))); /* l and one of a, b */
    int calls = 0, id = -1;
    ASSERT_OK(sw_add_pressure_callback(dev, count_calls, &calls, &id));
    sw_memory_info before = test_info(dev);
    for (int call = 0; call < 3; call++) {
        int rc;
        sw_buffer *args[2] = {a, b};
        sw_devmem p[2];
        switch (call) {
        case 0: rc = sw_buffer_copy(b, 0, a, 0, KiB(1)); break;
        case 1: rc = sw_op_add(a, a, b, SW_INT32, KiB(1) / 4); break;
        default: rc = sw_launch_begin(dev, args, 2, p); break;
        }
        if (rc != SW_ERR_OOM)
            FAIL("call %d -> %s, expected SW_ERR_OOM: %s", call,
                 sw_err_name(rc), sw_last_error());
        ASSERT_STR_CONTAINS(sw_last_error(), "nothing was moved");
        ASSERT_STR_CONTAINS(sw_last_error(), "bringing back 2 spilled");
        ASSERT_EQ(state_of(a), SW_SPILLED);
        ASSERT_EQ(state_of(b), SW_SPILLED);
        sw_memory_info m = test_info(dev);
        ASSERT_UEQ(m.in_use, before.in_use);
        ASSERT_UEQ(m.cached, before.cached);
        ASSERT_UEQ(m.restores, before.restores);
        ASSERT_UEQ(m.ooms, before.ooms + (uint64_t)call + 1);
        ASSERT_EQ(calls, 2 * (call + 1)); /* first and last chance */
    }
    ASSERT_OK(sw_remove_pressure_callback(dev, id));
    /* Without the lease there is room for both. */
    ASSERT_OK(sw_lease_release(lease));
    ASSERT_OK(sw_buffer_copy(b, 0, a, 0, KiB(1)));
    test_expect_pattern(b, 21);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    ASSERT_OK(sw_buffer_free(l));
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
}

/* A sum whose result goes to a temporary buffer (the scratch block's
 * allocation failed) checks that its operand and the temporary fit the
 * budget together before allocating the temporary: it used to allocate it
 * first, spilling another buffer to make room, and then be refused with
 * "nothing was moved" (found by the fuzzer, sim:0 with every command
 * queued). */
TEST(contract_sum_refused_before_its_temporary)
{
    test_require_spill();
    sw_device *dev = test_device();
    sw_buffer *a = test_alloc(dev, KiB(16), "a");
    test_write_pattern(a, 51);
    sw_buffer *r = test_alloc(dev, SW_ALLOC_GRANULARITY, "r");
    test_write_pattern(r, 52);
    spill_one(dev, a);
    ASSERT_EQ(state_of(r), SW_RESIDENT);
    ASSERT_OK(sw_empty_cache(dev));
    ASSERT_OK(sw_set_memory_budget(dev, SW_ALLOC_GRANULARITY * 3 / 2));
    sw_memory_info before = test_info(dev);
    /* The first backend allocation of this opening is the scratch
     * block's: failed, the sum takes a temporary buffer. */
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_ALLOC, 1, 0));
    sw_scalar out;
    int rc = sw_op_sum(a, SW_INT32, KiB(16) / 4, &out);
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_ALLOC, 0, 0));
    if (rc != SW_ERR_OOM)
        FAIL("sw_op_sum -> %s, expected SW_ERR_OOM: %s", sw_err_name(rc),
             sw_last_error());
    ASSERT_STR_CONTAINS(sw_last_error(), "nothing was moved");
    ASSERT_EQ(state_of(r), SW_RESIDENT);
    ASSERT_EQ(state_of(a), SW_SPILLED);
    sw_memory_info m = test_info(dev);
    ASSERT_UEQ(m.in_use, before.in_use);
    ASSERT_UEQ(m.cached, before.cached);
    ASSERT_UEQ(m.spills, before.spills);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    test_expect_pattern(a, 51);
    test_expect_pattern(r, 52);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(r));
}

/* sw_op_add with both operands spilled, and the nth backend copy failing:
 * the 1st (a's restore) or the 2nd (b's, after a came back).  Either way
 * the call fails with SW_ERR_DEVICE, both operands are spilled with their
 * data, and the device memory it took went back where it came from: the
 * cache holds what it held (warm: the restores took cached blocks), or
 * nothing more (cold: they took new ones). */
TEST(contract_failed_op_leaves_its_operands)
{
    test_require_spill();
    enum { N = 4096 };
    sw_device *dev = test_device();
    for (int cold = 0; cold < 2; cold++) {
        for (uint64_t nth = 1; nth <= 2; nth++) {
            sw_buffer *out = test_alloc(dev, N * 4, "out");
            sw_buffer *a = test_alloc(dev, N * 4, "a");
            sw_buffer *b = test_alloc(dev, N * 4, "b");
            test_write_pattern(a, 11);
            test_write_pattern(b, 12);
            test_write_pattern(out, 13);
            spill_one(dev, a);
            spill_one(dev, b);
            ASSERT_OK(sw_empty_cache(dev));
            if (!cold) {
                /* Two blocks of their size in the cache. */
                sw_buffer *t1 = test_alloc(dev, N * 4, "t1");
                sw_buffer *t2 = test_alloc(dev, N * 4, "t2");
                ASSERT_OK(sw_buffer_free(t1));
                ASSERT_OK(sw_buffer_free(t2));
                ASSERT_UEQ(test_info(dev).cached, 2 * N * 4);
            }
            ASSERT_OK(sw_device_synchronize(dev));
            sw_memory_info before = test_info(dev);
            ASSERT_OK(sw_inject_fault(dev, SW_FAULT_COPY, nth, 0));
            ASSERT_ERR(sw_op_add(out, a, b, SW_INT32, N), SW_ERR_DEVICE);
            ASSERT_OK(sw_inject_fault(dev, SW_FAULT_COPY, 0, 0));
            /* a came back before b's copy failed: it stays resident
             * (its restore is not undone: see pin_rest_locked), with its
             * data; b stays spilled, and b's memory went back. */
            sw_buffer_state sa = state_of(a);
            uint64_t kept = sa == SW_RESIDENT ? test_round(N * 4) : 0;
            if (nth == 1)
                ASSERT_EQ(sa, SW_SPILLED);
            ASSERT_EQ(state_of(b), SW_SPILLED);
            ASSERT_EQ(state_of(out), SW_RESIDENT);
            ASSERT_OK(sw_device_synchronize(dev));
            sw_memory_info m = test_info(dev);
            ASSERT_UEQ(m.in_use, before.in_use + kept);
            ASSERT_UEQ(m.spilled, before.spilled - kept);
            ASSERT_UEQ(m.cached + m.in_use, before.cached + before.in_use +
                       (cold ? kept : 0));
            test_expect_pattern(a, 11);
            test_expect_pattern(b, 12);
            test_expect_pattern(out, 13);
            /* And with nothing failing, it works. */
            ASSERT_OK(sw_op_add(out, a, b, SW_INT32, N));
            ASSERT_EQ(state_of(a), SW_RESIDENT);
            ASSERT_EQ(state_of(b), SW_RESIDENT);
            int32_t x[N], y[N], z[N];
            ASSERT_OK(sw_buffer_read(a, 0, x, sizeof x));
            ASSERT_OK(sw_buffer_read(b, 0, y, sizeof y));
            ASSERT_OK(sw_buffer_read(out, 0, z, sizeof z));
            for (int i = 0; i < N; i++)
                if (z[i] != (int32_t)((uint32_t)x[i] + (uint32_t)y[i]))
                    FAIL("element %d: %d + %d gave %d", i, x[i], y[i], z[i]);
            ASSERT_OK(sw_buffer_free(out));
            ASSERT_OK(sw_buffer_free(a));
            ASSERT_OK(sw_buffer_free(b));
        }
    }
}

/* A prefetch whose copy fails leaves the buffer spilled and keeps no
 * block it took: neither a cached one, nor a new one in the cache. */
TEST(contract_failed_prefetch_keeps_nothing)
{
    test_require_spill();
    sw_device *dev = test_device();
    for (int cold = 0; cold < 2; cold++) {
        sw_buffer *s = test_alloc(dev, KiB(64), "S");
        test_write_pattern(s, 21);
        spill_one(dev, s);
        ASSERT_OK(sw_empty_cache(dev));
        if (!cold) {
            sw_buffer *t = test_alloc(dev, KiB(64), "t");
            ASSERT_OK(sw_buffer_free(t));
        }
        sw_memory_info before = test_info(dev);
        ASSERT_OK(sw_inject_fault(dev, SW_FAULT_COPY, 1, 0));
        ASSERT_ERR(sw_buffer_prefetch(s, NULL), SW_ERR_DEVICE);
        ASSERT_OK(sw_inject_fault(dev, SW_FAULT_COPY, 0, 0));
        ASSERT_EQ(state_of(s), SW_SPILLED);
        sw_memory_info m = test_info(dev);
        ASSERT_UEQ(m.cached, before.cached);
        ASSERT_UEQ(m.in_use, before.in_use);
        test_expect_pattern(s, 21);
        ASSERT_OK(sw_buffer_free(s));
    }
}

/* Another thread's launch may use an argument of a call whose other
 * argument cannot come back yet: its restore is then not undone (what the
 * other launch wrote stays).  Here the same thread plays both parts
 * through a pressure callback, which runs while the first call waits. */
typedef struct {
    sw_buffer *a;
    int writes;
} writer_state;

static int write_a(sw_device *dev, sw_pressure *p, size_t bytes, void *user)
{
    (void)dev;
    (void)bytes;
    writer_state *w = user;
    if (w->writes++ > 0)
        return 0;
    sw_pressure_unlock(p);
    sw_scalar v = {.i = 77};
    /* (a is brought back here if the call under pressure has not.) */
    ASSERT_OK(sw_op_fill(w->a, SW_INT32, 1024, v));
    sw_pressure_relock(p);
    return 0;
}

TEST(contract_used_restore_is_kept)
{
    test_require_spill();
    sw_device *dev = test_device();
    sw_buffer *out = test_alloc(dev, KiB(4), "out");
    sw_buffer *a = test_alloc(dev, KiB(4), "a");
    sw_buffer *b = test_alloc(dev, KiB(4), "b");
    sw_buffer *big = test_alloc(dev, KiB(8), "leased");
    test_write_pattern(a, 31);
    test_write_pattern(b, 32);
    test_write_pattern(out, 33); /* a, then b, least recently used */
    sw_devmem ptr;
    sw_lease *lease = NULL;
    ASSERT_OK(sw_buffer_expose(big, &ptr, &lease));
    spill_one(dev, a);
    spill_one(dev, b);
    /* Room for out and one operand beside the lease: the add finds no
     * room for both, runs the callback (which brings a back and fills
     * it), still finds none for b, and is refused; what the callback
     * wrote into its argument stays. */
    ASSERT_OK(sw_set_memory_budget(dev, KiB(16)));
    writer_state w = {a, 0};
    int id = -1;
    ASSERT_OK(sw_add_pressure_callback(dev, write_a, &w, &id));
    ASSERT_ERR(sw_op_add(out, a, b, SW_INT32, 1024), SW_ERR_OOM);
    ASSERT_OK(sw_remove_pressure_callback(dev, id));
    ASSERT_GE(w.writes, 1);
    ASSERT_EQ(state_of(b), SW_SPILLED);
    int32_t x[1024];
    ASSERT_OK(sw_buffer_read(a, 0, x, sizeof x));
    for (int i = 0; i < 1024; i++)
        ASSERT_EQ(x[i], 77);
    test_expect_pattern(b, 32);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    ASSERT_OK(sw_lease_release(lease));
    ASSERT_OK(sw_buffer_free(big));
    ASSERT_OK(sw_buffer_free(out));
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
}

/* A callback that frees only when told it is the last chance (a collector
 * that does the cheap thing first): the allocation succeeds, on the
 * budget's path and on the device's. */
typedef struct {
    sw_buffer *victim;
    int calls, last;
} last_state;

static int free_at_last(sw_device *dev, sw_pressure *p, size_t bytes,
                        void *user)
{
    (void)dev;
    (void)bytes;
    last_state *st = user;
    st->calls++;
    if (!sw_pressure_last_chance(p) || st->victim == NULL)
        return 0;
    st->last++;
    sw_pressure_unlock(p);
    test_unpin_free(st->victim);
    st->victim = NULL;
    sw_pressure_relock(p);
    return 1;
}

TEST(contract_pressure_last_chance)
{
    sw_device *dev = test_device();
    /* The budget's path: everything held is pinned. */
    ASSERT_OK(sw_set_memory_budget(dev, KiB(16)));
    sw_buffer *a = test_alloc(dev, KiB(8), "a");
    sw_buffer *b = test_alloc(dev, KiB(8), "garbage");
    test_pin(a);
    test_pin(b);
    last_state st = {b, 0, 0};
    int id = -1;
    ASSERT_OK(sw_add_pressure_callback(dev, free_at_last, &st, &id));
    sw_buffer *c = NULL;
    ASSERT_OK(sw_buffer_alloc(dev, KiB(8), "c", &c));
    ASSERT_EQ(st.calls, 2);
    ASSERT_EQ(st.last, 1);
    test_pin(c);
    /* With nothing left to free: both calls, then the OOM. */
    sw_buffer *d = NULL;
    ASSERT_ERR(sw_buffer_alloc(dev, KiB(8), "d", &d), SW_ERR_OOM);
    ASSERT_EQ(st.calls, 4);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    /* A request over the whole budget fails before any callback. */
    ASSERT_OK(sw_set_memory_budget(dev, KiB(4)));
    ASSERT_ERR(sw_buffer_alloc(dev, KiB(8), "d", &d), SW_ERR_OOM);
    ASSERT_EQ(st.calls, 4);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    /* The device's path: an injected allocation failure, persistent until
     * the victim is freed. */
    sw_buffer *v = test_alloc(dev, KiB(4), "garbage 2");
    test_pin(v);
    st.victim = v;
    st.calls = st.last = 0;
    ASSERT_OK(sw_empty_cache(dev));
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_ALLOC, 1, 0));
    ASSERT_OK(sw_buffer_alloc(dev, KiB(4), "e", &d));
    ASSERT_EQ(st.last, 0); /* the retry after the first call succeeded */
    ASSERT_OK(sw_buffer_free(d));
    ASSERT_OK(sw_empty_cache(dev));
    /* Every backend allocation failing: only the last chance frees (v, to
     * the cache, where the retry finds it). */
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_ALLOC, 1, 1));
    ASSERT_OK(sw_buffer_alloc(dev, KiB(4), "e", &d));
    ASSERT_EQ(st.last, 1);
    ASSERT_NULL(st.victim);
    /* Nothing left to free (d pinned, or it would spill to the cache):
     * the OOM, counted once. */
    test_pin(d);
    sw_buffer *e = NULL;
    sw_memory_info m = test_info(dev);
    ASSERT_ERR(sw_buffer_alloc(dev, KiB(4), "e", &e), SW_ERR_OOM);
    ASSERT_UEQ(test_info(dev).ooms, m.ooms + 1);
    test_unpin_free(d);
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_ALLOC, 0, 0));
    ASSERT_OK(sw_remove_pressure_callback(dev, id));
    test_unpin_free(a);
    test_unpin_free(c);
}

/* After a prefetch of spilled buffers -- already RESIDENT and not moving
 * in the snapshot -- releasing the host pool empties it, and it stays
 * empty after a synchronize: no block comes back from a copy in that was
 * still to be noticed done. */
TEST(contract_release_host_pool_after_prefetch)
{
    test_require_spill();
    sw_device *dev = test_device();
    enum { NB = 3 };
    sw_buffer *b[NB];
    for (int i = 0; i < NB; i++) {
        b[i] = test_alloc(dev, KiB(256), "prefetched");
        test_write_pattern(b[i], 40 + (uint32_t)i);
    }
    for (int i = 0; i < NB; i++)
        spill_one(dev, b[i]);
    for (int i = 0; i < NB; i++)
        ASSERT_OK(sw_buffer_prefetch(b[i], NULL));
    sw_buffer_info info[8];
    size_t count = 0;
    ASSERT_OK(sw_memory_snapshot(dev, info, 8, &count));
    for (size_t i = 0; i < count; i++) {
        ASSERT_EQ(info[i].state, SW_RESIDENT);
        ASSERT_EQ(info[i].moving, 0);
    }
    ASSERT_OK(sw_release_host_pool(dev));
    ASSERT_UEQ(test_info(dev).host_pool, 0);
    ASSERT_OK(sw_device_synchronize(dev));
    ASSERT_UEQ(test_info(dev).host_pool, 0);
    for (int i = 0; i < NB; i++) {
        test_expect_pattern(b[i], 40 + (uint32_t)i);
        ASSERT_OK(sw_buffer_free(b[i]));
    }
}

/* A second release of a host task's event is refused while the task is
 * still pending, as after it ran. */
static void wait_for_go(void *arg)
{
    atomic_int *go = arg;
    while (!atomic_load(go))
        ;
}

TEST(contract_pending_task_event_released_twice)
{
    sw_device *dev = test_device();
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    atomic_int go = 0;
    sw_event *ev = NULL, *other = NULL;
    ASSERT_OK(sw_queue_host_task(q, wait_for_go, &go, &ev));
    ASSERT_OK(sw_queue_host_task(q, wait_for_go, &go, &other));
    int done = 1;
    ASSERT_OK(sw_event_query(other, &done));
    ASSERT_EQ(done, 0);
    ASSERT_OK(sw_event_retain(ev));
    ASSERT_OK(sw_event_release(ev));
    ASSERT_OK(sw_event_release(ev)); /* the last of the handle's */
    ASSERT_ERR(sw_event_release(ev), SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_event_query(ev, &done), SW_ERR_INVALID_HANDLE);
    /* An order record's reference keeps the handle: sw_order_event hands
     * it out. */
    sw_order *o = NULL;
    ASSERT_OK(sw_order_create(&o));
    ASSERT_OK(sw_order_add(o, other, 1));
    ASSERT_OK(sw_event_release(other));
    ASSERT_PTR_EQ(sw_order_event(o, 1, 0), other);
    ASSERT_OK(sw_event_query(other, &done));
    ASSERT_EQ(done, 0);
    atomic_store(&go, 1);
    ASSERT_OK(sw_order_wait(o));
    ASSERT_ERR(sw_event_release(other), SW_ERR_INVALID_HANDLE);
    sw_order_destroy(o);
    ASSERT_OK(sw_queue_synchronize(q));
    ASSERT_OK(sw_queue_release(q));
}

/* A request larger than the device fails with SW_ERR_TOO_LARGE and
 * counts as an OOM (PyTorch's num_ooms counts it). */
/* sw_op_add(out, a, b) with a spilled, b resident and the least recently
 * used of what could move, and a fourth buffer x beside them: making room
 * for a never spills b, a later operand.  With x free to move, x goes and
 * nothing else moves (one spill, one restore); with x pinned, nothing can
 * move, and the failed call leaves b where it was (it was spilled for a,
 * then could not come back). */
TEST(contract_restore_keeps_later_operands)
{
    test_require_spill();
    enum { N = 1024 };
    sw_device *dev = test_device();
    for (int pinned = 0; pinned < 2; pinned++) {
        sw_buffer *out = test_alloc(dev, N * 4, "out");
        sw_buffer *a = test_alloc(dev, N * 4, "a");
        sw_buffer *b = test_alloc(dev, N * 4, "b");
        sw_buffer *x = test_alloc(dev, N * 4, "x");
        /* Least recently used first: a, then b, x, out. */
        test_write_pattern(a, 21);
        test_write_pattern(b, 22);
        test_write_pattern(x, 23);
        test_write_pattern(out, 24);
        spill_one(dev, a);
        ASSERT_OK(sw_empty_cache(dev));
        if (pinned)
            test_pin(x);
        ASSERT_OK(sw_device_synchronize(dev));
        /* Room for the three operands and no more. */
        ASSERT_OK(sw_set_memory_budget(dev, test_round(N * 4) * 3));
        ASSERT_EQ(state_of(b), SW_RESIDENT);
        sw_memory_info before = test_info(dev);
        int rc = sw_op_add(out, a, b, SW_INT32, N);
        sw_memory_info m = test_info(dev);
        if (pinned) {
            if (rc != SW_ERR_OOM)
                FAIL("sw_op_add -> %s, expected SW_ERR_OOM: %s",
                     sw_err_name(rc), sw_last_error());
            ASSERT_EQ(state_of(a), SW_SPILLED);
            ASSERT_UEQ(m.spills, before.spills);
            ASSERT_UEQ(m.restores, before.restores);
        } else {
            ASSERT_OK(rc);
            ASSERT_EQ(state_of(a), SW_RESIDENT);
            ASSERT_EQ(state_of(x), SW_SPILLED);
            ASSERT_UEQ(m.spills, before.spills + 1);
            ASSERT_UEQ(m.restores, before.restores + 1);
        }
        ASSERT_EQ(state_of(b), SW_RESIDENT);
        ASSERT_OK(sw_set_memory_budget(dev, 0));
        if (pinned)
            test_unpin(x);
        test_expect_pattern(a, 21);
        test_expect_pattern(b, 22);
        test_expect_pattern(x, 23);
        if (pinned)
            test_expect_pattern(out, 24);
        ASSERT_OK(sw_buffer_free(out));
        ASSERT_OK(sw_buffer_free(a));
        ASSERT_OK(sw_buffer_free(b));
        ASSERT_OK(sw_buffer_free(x));
    }
}

/* A sum whose device has no scratch block (its allocation failed: the
 * fault) takes a temporary buffer, under a budget that holds only the
 * operand: the temporary is refused, and the operand stays where it is
 * (making room for the temporary spilled it, and then it could not come
 * back beside it). */
TEST(contract_failed_sum_keeps_its_operand)
{
    test_require_spill();
    enum { N = 1024 };
    sw_device *dev = test_device();
    sw_buffer *a = test_alloc(dev, N * 4, "a");
    test_write_pattern(a, 31);
    ASSERT_OK(sw_device_synchronize(dev));
    ASSERT_OK(sw_set_memory_budget(dev, test_round(N * 4)));
    sw_memory_info before = test_info(dev);
    /* The first backend allocation from here is the scratch block's (this
     * process has not summed on dev yet: each test is its own child). */
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_ALLOC, 1, 0));
    sw_scalar sum;
    int rc = sw_op_sum(a, SW_INT32, N, &sum);
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_ALLOC, 0, 0));
    if (rc != SW_ERR_OOM)
        FAIL("sw_op_sum -> %s, expected SW_ERR_OOM: %s", sw_err_name(rc),
             sw_last_error());
    ASSERT_EQ(state_of(a), SW_RESIDENT);
    sw_memory_info m = test_info(dev);
    ASSERT_UEQ(m.spills, before.spills);
    ASSERT_UEQ(m.in_use, before.in_use);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    test_expect_pattern(a, 31);
    ASSERT_OK(sw_buffer_free(a));
}

TEST(contract_too_large_counts_as_oom)
{
    sw_device *dev = test_device();
    sw_memory_info before = test_info(dev);
    sw_buffer *b = NULL;
    ASSERT_ERR(sw_buffer_alloc(dev, SIZE_MAX, "huge", &b), SW_ERR_TOO_LARGE);
    ASSERT_NULL(b);
    ASSERT_UEQ(test_info(dev).ooms, before.ooms + 1);
    if (before.device_total != 0 && before.device_total < UINT64_MAX / 4) {
        /* TOO_LARGE where the device states a largest allocation, else
         * an OOM after the ladder: an OOM counted either way. */
        ASSERT_ERR2(sw_buffer_alloc(dev, (size_t)before.device_total * 2,
                                    "twice the device", &b),
                    SW_ERR_TOO_LARGE, SW_ERR_OOM);
        ASSERT_UEQ(test_info(dev).ooms, before.ooms + 2);
    }
    sw_memory_info m = test_info(dev);
    ASSERT_UEQ(m.in_use, before.in_use);
    ASSERT_UEQ(m.allocs, before.allocs);
}

/* Threads: two run adds whose operands are shared and spill under a budget
 * that holds one add's set at a time, so that their sets meet the budget
 * half-way (a restore made, the next refused, the first undone); a third
 * fills the shared buffers and reads each fill straight back.  No fill may
 * be undone by another thread's failing add, and the adds' results are
 * checked whenever one succeeds. */
#define TC_N 2048 /* int32 elements per buffer */
#define TC_SHARED 4
#define TC_ROUNDS 1000

typedef struct {
    sw_device *dev;
    sw_buffer *shared[TC_SHARED];
    _Atomic int32_t value[TC_SHARED]; /* what the writer last filled */
    atomic_int stop;
    atomic_long adds_ok, adds_refused;
} tc_world;

typedef struct {
    tc_world *w;
    int id;
} tc_arg;

static void *tc_adder(void *p)
{
    tc_arg *a = p;
    tc_world *w = a->w;
    sw_buffer *out = NULL;
    while (sw_buffer_alloc(w->dev, TC_N * 4, "out", &out) != SW_OK)
        ;
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(a->id + 1);
    int32_t got[TC_N];
    while (!atomic_load(&w->stop)) {
        int i = (int)(test_rand(&rng) % TC_SHARED);
        int j = (int)((unsigned)(i + 1 + test_rand(&rng) % (TC_SHARED - 1)) %
                      TC_SHARED);
        int rc = sw_op_add(out, w->shared[i], w->shared[j], SW_INT32, TC_N);
        if (rc == SW_ERR_OOM) {
            atomic_fetch_add(&w->adds_refused, 1);
            continue;
        }
        if (rc != SW_OK)
            FAIL("add -> %s: %s", sw_err_name(rc), sw_last_error());
        atomic_fetch_add(&w->adds_ok, 1);
        /* Each shared buffer holds one value throughout (fills are whole):
         * the sum is of two of the values written. */
        rc = sw_buffer_read(out, 0, got, sizeof got);
        if (rc != SW_OK)
            FAIL("read -> %s: %s", sw_err_name(rc), sw_last_error());
        for (int k = 1; k < TC_N; k++)
            if (got[k] != got[0])
                FAIL("add result torn at %d: %d vs %d", k, got[k], got[0]);
    }
    ASSERT_OK(sw_buffer_free(out));
    return NULL;
}

static void *tc_writer(void *p)
{
    tc_world *w = p;
    int32_t got[TC_N];
    for (int r = 0; r < TC_ROUNDS; r++) {
        int i = r % TC_SHARED;
        int32_t v = 1000 + r;
        sw_scalar s = {.i = v};
        int rc;
        while ((rc = sw_op_fill(w->shared[i], SW_INT32, TC_N, s)) ==
               SW_ERR_OOM)
            ;
        if (rc != SW_OK)
            FAIL("fill -> %s: %s", sw_err_name(rc), sw_last_error());
        atomic_store(&w->value[i], v);
        ASSERT_OK(sw_buffer_read(w->shared[i], 0, got, sizeof got));
        for (int k = 0; k < TC_N; k++)
            if (got[k] != v)
                FAIL("fill %d of buffer %d undone: element %d is %d", v, i,
                     k, got[k]);
    }
    atomic_store(&w->stop, 1);
    return NULL;
}

/* The history's callback runs with the device lock held: counts the
 * restores undone (a spill that copied nothing, aux 2). */
static void tc_count_undone(const sw_trace_event *ev, void *user)
{
    if (ev->kind == SW_TRACE_SPILL_BEGIN && ev->aux == 2)
        (*(long *)user)++;
}

TEST(thread_contract_held_restores)
{
    test_require_spill();
    tc_world w = {.dev = test_device()};
    for (int i = 0; i < TC_SHARED; i++) {
        w.shared[i] = test_alloc(w.dev, TC_N * 4, "shared");
        sw_scalar s = {.i = i};
        ASSERT_OK(sw_op_fill(w.shared[i], SW_INT32, TC_N, s));
        atomic_store(&w.value[i], i);
    }
    long undone = 0;
    ASSERT_OK(sw_trace_start(w.dev, NULL));
    ASSERT_OK(sw_trace_set_callback(w.dev, tc_count_undone, &undone));
    /* Room for two outs and two operands: the adders' sets collide. */
    ASSERT_OK(sw_set_memory_budget(w.dev, 4 * test_round(TC_N * 4)));
    pthread_t t[3];
    tc_arg args[2] = {{&w, 0}, {&w, 1}};
    for (int i = 0; i < 2; i++)
        ASSERT_EQ(pthread_create(&t[i], NULL, tc_adder, &args[i]), 0);
    ASSERT_EQ(pthread_create(&t[2], NULL, tc_writer, &w), 0);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(pthread_join(t[i], NULL), 0);
    ASSERT_GT(atomic_load(&w.adds_ok), 0);
    ASSERT_OK(sw_trace_set_callback(w.dev, NULL, NULL));
    ASSERT_OK(sw_trace_stop(w.dev));
    /* Whether the sets collided (adds refused) depends on the timing:
     * either way every value written stands.  (No restore is undone any
     * more: a failed set keeps what it brought back.) */
    ASSERT_UEQ((uint64_t)undone, 0);
    ASSERT_OK(sw_set_memory_budget(w.dev, 0));
    for (int i = 0; i < TC_SHARED; i++) {
        int32_t got[TC_N];
        ASSERT_OK(sw_buffer_read(w.shared[i], 0, got, sizeof got));
        for (int k = 0; k < TC_N; k++)
            ASSERT_EQ(got[k], atomic_load(&w.value[i]));
        ASSERT_OK(sw_buffer_free(w.shared[i]));
    }
}
