/*
 * test-refused.c -- a launch refused for the budget changes nothing
 * (include/spillway.h, "Conventions"; issue 34, item 4): whether its
 * arguments cannot fit together or its spilled ones cannot come back
 * beside what cannot move, the operations (sw_op_*), sw_launch_begin and
 * sw_launch_begin_q (on a queue and for the host) leave every buffer where
 * it was, the cache holding what it held, and the spill counters as they
 * were.  And the result of an operation allocated beside its operands
 * (src/core/beside.h, the Python module's operations): refused as the
 * launch would be, before its allocation moves anything, and never made
 * room for by spilling an operand.
 */
#include "test.h"
#include "tests.h"

#include "core/beside.h"

#define KiB(n) ((size_t)(n) * 1024u)

static sw_buffer_state state_of(sw_buffer *b)
{
    sw_buffer_state st;
    ASSERT_OK(sw_buffer_state_get(b, &st));
    return st;
}

/* The budget 8 KiB: L (4 KiB, leased: it cannot move), r (1 KiB,
 * resident), a and b (3 KiB each, spilled), B (9 KiB, spilled, larger
 * than the budget), and 2 KiB in the cache (two blocks). */
typedef struct {
    sw_device *dev;
    sw_buffer *l, *r, *a, *b, *big;
    sw_lease *lease;
    sw_queue *q;
} world;

static void spill(sw_device *dev, sw_buffer *x)
{
    ASSERT_OK(sw_set_memory_budget(dev, SW_ALLOC_GRANULARITY));
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    ASSERT_EQ(state_of(x), SW_SPILLED);
}

static void setup(world *w)
{
    sw_device *dev = w->dev = test_device();
    w->a = test_alloc(dev, KiB(3), "a");
    test_write_pattern(w->a, 1);
    w->b = test_alloc(dev, KiB(3), "b");
    test_write_pattern(w->b, 2);
    w->big = test_alloc(dev, KiB(9), "B");
    test_write_pattern(w->big, 3);
    spill(dev, w->a); /* (spills every buffer there is) */
    ASSERT_EQ(state_of(w->b), SW_SPILLED);
    ASSERT_EQ(state_of(w->big), SW_SPILLED);
    w->l = test_alloc(dev, KiB(4), "L");
    test_write_pattern(w->l, 4);
    sw_devmem p;
    ASSERT_OK(sw_buffer_expose(w->l, &p, &w->lease));
    w->r = test_alloc(dev, KiB(1), "r");
    test_write_pattern(w->r, 5);
    ASSERT_OK(sw_empty_cache(dev));
    ASSERT_OK(sw_set_memory_budget(dev, KiB(8)));
    sw_buffer *t1 = test_alloc(dev, KiB(1), "cached");
    sw_buffer *t2 = test_alloc(dev, KiB(1), "cached");
    ASSERT_OK(sw_buffer_free(t1));
    ASSERT_OK(sw_buffer_free(t2));
    sw_memory_info m = test_info(dev);
    ASSERT_UEQ(m.cached, KiB(2));
    ASSERT_UEQ(m.in_use, KiB(5));
    ASSERT_OK(sw_queue_create(dev, &w->q));
}

static void teardown(world *w)
{
    ASSERT_OK(sw_queue_release(w->q));
    ASSERT_OK(sw_lease_release(w->lease));
    ASSERT_OK(sw_set_memory_budget(w->dev, 0));
    test_expect_pattern(w->a, 1);
    test_expect_pattern(w->b, 2);
    test_expect_pattern(w->big, 3);
    test_expect_pattern(w->l, 4);
    test_expect_pattern(w->r, 5);
    sw_buffer *all[5] = {w->a, w->b, w->big, w->l, w->r};
    for (int i = 0; i < 5; i++)
        ASSERT_OK(sw_buffer_free(all[i]));
}

/* The call refused with SW_ERR_OOM, "nothing was moved", and nothing
 * changed: the accounting, the spill counters, every buffer's state. */
static void expect_refused(world *w, int rc, const char *call,
                           const char *why)
{
    static sw_memory_info before;
    static int have;
    if (call == NULL) { /* take the reference */
        before = test_info(w->dev);
        have = 1;
        return;
    }
    ASSERT_TRUE(have);
    if (rc != SW_ERR_OOM)
        FAIL("%s -> %s, expected SW_ERR_OOM: %s", call, sw_err_name(rc),
             sw_last_error());
    ASSERT_STR_CONTAINS(sw_last_error(), "nothing was moved");
    ASSERT_STR_CONTAINS(sw_last_error(), why);
    sw_memory_info m = test_info(w->dev);
    if (m.cached != before.cached || m.in_use != before.in_use ||
        m.spilled != before.spilled || m.spills != before.spills ||
        m.restores != before.restores ||
        m.spilled_bytes_total != before.spilled_bytes_total)
        FAIL("%s was refused, yet: cached %" PRIu64 " -> %" PRIu64
             ", in use %" PRIu64 " -> %" PRIu64 ", spills %" PRIu64
             " -> %" PRIu64 ", restores %" PRIu64 " -> %" PRIu64, call,
             before.cached, m.cached, before.in_use, m.in_use, before.spills,
             m.spills, before.restores, m.restores);
    ASSERT_EQ(state_of(w->l), SW_RESIDENT);
    ASSERT_EQ(state_of(w->r), SW_RESIDENT);
    ASSERT_EQ(state_of(w->a), SW_SPILLED);
    ASSERT_EQ(state_of(w->b), SW_SPILLED);
    ASSERT_EQ(state_of(w->big), SW_SPILLED);
    ASSERT_UEQ(test_pins_of(w->dev, w->l), 0);
    ASSERT_UEQ(test_pins_of(w->dev, w->r), 0);
}

#define REFUSED(w, call, why) expect_refused(w, (call), #call, why)

/* Arguments that cannot fit the budget together (L, a and b: 10 KiB; B
 * alone: 9 KiB). */
TEST(refused_set_too_large_moves_nothing)
{
    test_require_spill();
    world w;
    setup(&w);
    expect_refused(&w, 0, NULL, NULL);
    const char *why = "on the device together";
    sw_scalar two = {.i = 2};
    size_t n = KiB(3) / 4;
    sw_buffer *set[3] = {w.l, w.a, w.b};
    sw_devmem p[3];
    REFUSED(&w, sw_op_add(w.l, w.a, w.b, SW_INT32, n), why);
    REFUSED(&w, sw_op_add_q(w.q, w.l, w.a, w.b, SW_INT32, n), why);
    REFUSED(&w, sw_op_fill(w.big, SW_INT32, KiB(9) / 4, two), why);
    REFUSED(&w, sw_op_fill_q(w.q, w.big, SW_INT32, KiB(9) / 4, two), why);
    REFUSED(&w, sw_op_scale(w.big, w.a, two, SW_INT32, n), why);
    REFUSED(&w, sw_op_axpy(two, w.big, w.a, SW_INT32, n), why);
    REFUSED(&w, sw_launch_begin(w.dev, set, 3, p), why);
    REFUSED(&w, sw_launch_begin_q(w.q, set, 3, p), why);
    REFUSED(&w, sw_launch_begin_q(NULL, set, 3, p), why);
    teardown(&w);
}

/* Arguments that fit the budget together, but whose spilled ones cannot
 * come back beside what cannot move (L leased; r and the others pinned by
 * the call itself): r, a and b (7 KiB, 6 of them to bring back beside 5
 * in use), or a and b beside r (6 KiB to bring back; r, the only buffer
 * that could make room, 1 KiB). */
TEST(refused_set_that_cannot_come_back_moves_nothing)
{
    test_require_spill();
    world w;
    setup(&w);
    expect_refused(&w, 0, NULL, NULL);
    const char *why = "bringing back 2 spilled";
    sw_scalar two = {.i = 2};
    size_t n = KiB(3) / 4;
    sw_buffer *set[3] = {w.r, w.a, w.b};
    sw_devmem p[3];
    REFUSED(&w, sw_op_add(w.a, w.a, w.b, SW_INT32, n), why);
    REFUSED(&w, sw_op_add_q(w.q, w.b, w.a, w.b, SW_INT32, n), why);
    REFUSED(&w, sw_op_scale(w.b, w.a, two, SW_INT32, n), why);
    REFUSED(&w, sw_op_scale_q(w.q, w.b, w.a, two, SW_INT32, n), why);
    REFUSED(&w, sw_op_axpy(two, w.a, w.b, SW_INT32, n), why);
    REFUSED(&w, sw_op_axpy_q(w.q, two, w.a, w.b, SW_INT32, n), why);
    REFUSED(&w, sw_buffer_copy(w.b, 0, w.a, 0, KiB(3)), why);
    REFUSED(&w, sw_launch_begin(w.dev, set, 3, p), why);
    REFUSED(&w, sw_launch_begin(w.dev, set + 1, 2, p), why);
    REFUSED(&w, sw_launch_begin_q(w.q, set, 3, p), why);
    REFUSED(&w, sw_launch_begin_q(w.q, set + 1, 2, p), why);
    REFUSED(&w, sw_launch_begin_q(NULL, set, 3, p), why);
    teardown(&w);
}

/* The result of a launch on its operands (sw__buffer_alloc_beside): a
 * and a 3 KiB result cannot both be on the device beside L and r (the
 * spilled operand is counted); r and a 4 KiB result neither (r, pinned,
 * is not spilled to make room, which a plain allocation would do); r and
 * a 3 KiB result fit, made room for by trimming the cache. */
TEST(refused_result_beside_its_operands)
{
    test_require_spill();
    world w;
    setup(&w);
    expect_refused(&w, 0, NULL, NULL);
    sw_buffer *out = NULL;
    REFUSED(&w, sw__buffer_alloc_beside(w.dev, KiB(3), "out", &w.a, 1, &out),
            "bringing back 1 spilled argument of 1 and 3.00 KiB for the "
            "result");
    ASSERT_NULL(out);
    REFUSED(&w, sw__buffer_alloc_beside(w.dev, KiB(4), "out", &w.r, 1, &out),
            "nothing was moved");
    ASSERT_NULL(out);
    sw_buffer *set[2] = {w.a, w.b};
    REFUSED(&w, sw__buffer_alloc_beside(w.dev, KiB(3), "out", set, 2, &out),
            "on the device together");
    ASSERT_NULL(out);
    ASSERT_OK(sw__buffer_alloc_beside(w.dev, KiB(3), "out", &w.r, 1, &out));
    ASSERT_EQ(state_of(w.r), SW_RESIDENT);
    ASSERT_UEQ(test_pins_of(w.dev, w.r), 0);
    ASSERT_UEQ(test_info(w.dev).cached, 0);
    ASSERT_OK(sw_buffer_free(out));
    /* Bad input changes nothing either. */
    ASSERT_EQ(sw__buffer_alloc_beside(w.dev, 8, "out", NULL, 1, &out),
              SW_ERR_INVALID_ARG);
    ASSERT_NULL(out);
    ASSERT_EQ(sw__buffer_alloc_beside(w.dev, 8, "out", &w.a, 1, NULL),
              SW_ERR_INVALID_ARG);
    teardown(&w);
}
