/*
 * test-clean.c -- clean copies (spill.c): a restored buffer keeps the host
 * copy it came from until something writes it, and evicting it meanwhile
 * copies nothing.  Every way of writing ends it (an op's output, a launch
 * argument not marked read, a host write, a write export, a copy's
 * destination, a fill, a raw device pointer); every way of reading keeps
 * it.  Bad access modes are refused before anything moves; threads read,
 * write and spill shared buffers at once with every result checked.
 */
#include "test.h"
#include "tests.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <string.h>

#define CB (1u << 20)
#define CN (CB / 4) /* float32 / int32 elements */

static sw_buffer_state cstate(sw_buffer *b)
{
    sw_buffer_state st;
    ASSERT_OK(sw_buffer_state_get(b, &st));
    return st;
}

/* Spill every unpinned buffer of dev (a budget of one byte, then none). */
static void spill_all(sw_device *dev)
{
    ASSERT_OK(sw_set_memory_budget(dev, 1));
    ASSERT_OK(sw_set_memory_budget(dev, 0));
}

/* Whether the snapshot says b has a clean copy on the host. */
static int has_host_copy(sw_device *dev, sw_buffer *b)
{
    return test_buffer_info(dev, b).host_copy;
}

/* A buffer of CB bytes with pattern seed, spilled then brought back by a
 * read (a sum): clean, and the snapshot says so. */
static sw_buffer *clean_buffer(sw_device *dev, uint32_t seed)
{
    sw_buffer *b = test_alloc(dev, CB, "clean");
    test_write_pattern(b, seed);
    ASSERT_EQ(has_host_copy(dev, b), 0);
    spill_all(dev);
    ASSERT_EQ(cstate(b), SW_SPILLED);
    ASSERT_EQ(has_host_copy(dev, b), 0);
    sw_scalar s;
    ASSERT_OK(sw_op_sum(b, SW_INT32, CN, &s)); /* restores, reads */
    ASSERT_EQ(cstate(b), SW_RESIDENT);
    ASSERT_EQ(has_host_copy(dev, b), 1);
    return b;
}

TEST(clean_evicted_twice_moves_once)
{
    test_require_spill();
    sw_device *dev = test_device();
    sw_memory_info m0 = test_info(dev);
    sw_buffer *a = test_alloc(dev, CB, "a");
    test_write_pattern(a, 3);
    ASSERT_OK(sw_trace_start(dev, NULL));
    spill_all(dev);
    sw_memory_info m1 = test_info(dev);
    ASSERT_UEQ(m1.spilled_bytes_total - m0.spilled_bytes_total, CB);
    for (int round = 0; round < 3; round++) {
        sw_scalar s;
        ASSERT_OK(sw_op_sum(a, SW_INT32, CN, &s));
        sw_memory_info m = test_info(dev);
        ASSERT_UEQ(m.host_copies, test_round(CB));
        ASSERT_UEQ(m.restored_bytes_total - m1.restored_bytes_total,
                   (uint64_t)(round + 1) * CB);
        spill_all(dev);
        ASSERT_EQ(cstate(a), SW_SPILLED);
        m = test_info(dev);
        /* Its bytes went out once, whatever the evictions. */
        ASSERT_UEQ(m.spilled_bytes_total, m1.spilled_bytes_total);
        ASSERT_UEQ(m.clean_evictions - m0.clean_evictions,
                   (uint64_t)round + 1);
        ASSERT_UEQ(m.spills - m1.spills, (uint64_t)round + 1);
        ASSERT_UEQ(m.host_copies, 0);
        ASSERT_UEQ(m.spilled, test_round(CB));
        test_expect_pattern(a, 3);
    }
    /* The history: each restore adds to host_copies, each clean eviction
     * (aux 3) takes it away. */
    ASSERT_OK(sw_trace_stop(dev));
    sw_trace_event ev[256];
    size_t count = 0;
    ASSERT_OK(sw_trace_read(dev, ev, 256, &count, NULL));
    int restores = 0, clean = 0;
    for (size_t i = 0; i < count; i++) {
        if (ev[i].kind == SW_TRACE_RESTORE_BEGIN) {
            restores++;
            ASSERT_UEQ(ev[i].host_copies, test_round(CB));
        }
        if (ev[i].kind == SW_TRACE_SPILL_BEGIN && ev[i].aux == 3) {
            clean++;
            ASSERT_UEQ(ev[i].host_copies, 0);
        }
    }
    ASSERT_EQ(restores, 3);
    ASSERT_EQ(clean, 3);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_UEQ(test_info(dev).host_copies, 0);
}

/* The ways of using a clean buffer a: each says whether it writes, and
 * what a holds after it (a pattern seed). */
typedef enum {
    USE_SUM, USE_OP_INPUT, USE_OP_OUTPUT, USE_OP_INPLACE, USE_LAUNCH_READ,
    USE_LAUNCH_WRITE, USE_LAUNCH_NO_MODES, USE_QUEUE_READ, USE_QUEUE_WRITE,
    USE_HOST_READ, USE_HOST_WRITE, USE_EXPOSE, USE_EXPOSE_READ, USE_COPY_SRC,
    USE_COPY_DST, USE_FILL, USE_DEVICE_PTR, USE_COUNT
} use_kind;

static const char *const use_names[USE_COUNT] = {
    "sum", "op input", "op output", "op in place", "launch read",
    "launch write", "launch without modes", "queue pin read",
    "queue pin write", "host read", "host write", "expose", "expose read",
    "copy source", "copy destination", "fill", "device pointer",
};

/* Use a (pattern 7) one way; *seed: a's pattern after, or 0 when a now
 * holds the constant 9 (uint32).  Returns whether the use writes a. */
static bool use_once(sw_device *dev, sw_queue *q, sw_buffer *a,
                     sw_buffer *other, use_kind k, uint32_t *seed)
{
    sw_scalar s, nine = {.i = 9}, one = {.i = 1};
    sw_devmem p[2];
    sw_lease *l = NULL;
    const unsigned char rd = SW_ACCESS_READ, wr = SW_ACCESS_WRITE;
    char host[64];
    static uint32_t v[CN];
    uint32_t nine32 = 9;
    sw_kernel_args fill = {.kernel = SW_KERNEL_FILL, .dtype = SW_INT32,
                           .n = CN, .alpha = nine};
    *seed = 7;
    if (k == USE_SUM) {
        ASSERT_OK(sw_op_sum(a, SW_INT32, CN, &s));
    } else if (k == USE_OP_INPUT) {
        ASSERT_OK(sw_op_add(other, a, a, SW_INT32, CN));
    } else if (k == USE_OP_OUTPUT) {
        ASSERT_OK(sw_op_fill(a, SW_INT32, CN, nine));
        *seed = 0;
    } else if (k == USE_OP_INPLACE) {
        ASSERT_OK(sw_op_scale(a, a, one, SW_INT32, CN)); /* same bytes */
    } else if (k == USE_LAUNCH_READ) {
        ASSERT_OK(sw_launch_begin_access(dev, &a, &rd, 1, p));
        ASSERT_OK(sw_launch_end(dev, &a, 1));
    } else if (k == USE_LAUNCH_WRITE || k == USE_LAUNCH_NO_MODES) {
        if (k == USE_LAUNCH_WRITE)
            ASSERT_OK(sw_launch_begin_access(dev, &a, &wr, 1, p));
        else
            ASSERT_OK(sw_launch_begin(dev, &a, 1, p));
        fill.out = p[0];
        ASSERT_OK(sw_launch_kernel(dev, &fill));
        ASSERT_OK(sw_launch_end(dev, &a, 1));
        *seed = 0;
    } else if (k == USE_QUEUE_READ) {
        ASSERT_OK(sw_launch_begin_q_access(q, &a, &rd, 1, p));
        ASSERT_OK(sw_launch_end_q(q, &a, 1));
        ASSERT_OK(sw_queue_synchronize(q));
    } else if (k == USE_QUEUE_WRITE) {
        ASSERT_OK(sw_launch_begin_q_access(q, &a, &wr, 1, p));
        fill.out = p[0];
        ASSERT_OK(sw_launch_kernel_q(q, &fill));
        ASSERT_OK(sw_launch_end_q(q, &a, 1));
        ASSERT_OK(sw_queue_synchronize(q));
        *seed = 0;
    } else if (k == USE_HOST_READ) {
        ASSERT_OK(sw_buffer_read(a, 64, host, sizeof host));
    } else if (k == USE_HOST_WRITE) {
        for (size_t i = 0; i < CN; i++)
            v[i] = 9;
        ASSERT_OK(sw_buffer_write(a, 0, v, sizeof v));
        *seed = 0;
    } else if (k == USE_EXPOSE || k == USE_EXPOSE_READ) {
        if (k == USE_EXPOSE)
            ASSERT_OK(sw_buffer_expose(a, p, &l));
        else
            ASSERT_OK(sw_buffer_expose_read(a, p, &l));
        ASSERT_OK(sw_lease_release(l));
    } else if (k == USE_COPY_SRC) {
        ASSERT_OK(sw_buffer_copy(other, 0, a, 0, CB));
    } else if (k == USE_COPY_DST) {
        ASSERT_OK(sw_op_fill(other, SW_INT32, CN, nine));
        ASSERT_OK(sw_buffer_copy(a, 0, other, 0, CB));
        *seed = 0;
    } else if (k == USE_FILL) {
        ASSERT_OK(sw_buffer_fill(a, 0, CB, &nine32, sizeof nine32));
        *seed = 0;
    } else if (k == USE_DEVICE_PTR) {
        ASSERT_OK(sw_buffer_device_ptr(a, p));
    }
    return !(k == USE_SUM || k == USE_OP_INPUT || k == USE_LAUNCH_READ ||
             k == USE_QUEUE_READ || k == USE_HOST_READ ||
             k == USE_EXPOSE_READ || k == USE_COPY_SRC);
}

static void expect_nines(sw_buffer *a)
{
    static uint32_t v[CN];
    ASSERT_OK(sw_buffer_read(a, 0, v, sizeof v));
    for (size_t i = 0; i < CN; i++)
        if (v[i] != 9)
            FAIL("element %zu is %u, want 9", i, v[i]);
}

TEST(clean_every_write_dirties)
{
    test_require_spill();
    sw_device *dev = test_device();
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    for (int k = 0; k < USE_COUNT; k++) {
        sw_buffer *other = test_alloc(dev, CB, "other");
        sw_buffer *a = clean_buffer(dev, 7);
        sw_memory_info m0 = test_info(dev);
        ASSERT_UEQ(m0.host_copies, test_round(CB));
        uint32_t seed;
        bool writes = use_once(dev, q, a, other, (use_kind)k, &seed);
        sw_memory_info m1 = test_info_synced(dev);
        if (m1.host_copies != (writes ? 0 : test_round(CB)))
            FAIL("%s: host_copies %llu after it", use_names[k],
                 (unsigned long long)m1.host_copies);
        /* The next eviction copies exactly when it wrote. */
        ASSERT_OK(sw_buffer_free(other));
        spill_all(dev);
        ASSERT_EQ(cstate(a), SW_SPILLED);
        sw_memory_info m2 = test_info(dev);
        uint64_t out = m2.spilled_bytes_total - m1.spilled_bytes_total;
        if (out != (writes ? CB : 0))
            FAIL("%s: its eviction copied %llu bytes", use_names[k],
                 (unsigned long long)out);
        if (seed != 0)
            test_expect_pattern(a, seed);
        else
            expect_nines(a);
        ASSERT_OK(sw_buffer_free(a));
    }
    ASSERT_OK(sw_queue_release(q));
    ASSERT_UEQ(test_info(dev).host_copies, 0);
}

/* The arguments of one launch are used at one time: a clean one goes
 * first among them. */
TEST(clean_first_among_equally_old)
{
    test_require_spill();
    sw_device *dev = test_device();
    sw_buffer *b = test_alloc(dev, CB, "b");
    sw_buffer *c = test_alloc(dev, CB, "c");
    sw_buffer *a = clean_buffer(dev, 4); /* spills b and c too */
    test_write_pattern(b, 5); /* into its host copy */
    sw_scalar one = {.i = 1};
    ASSERT_OK(sw_op_scale(b, b, one, SW_INT32, CN)); /* back, dirty */
    ASSERT_OK(sw_buffer_fill(c, 0, CB, "\0\0\0\0", 4));
    /* c = a + b, a and b read: a, b and c used at one time. */
    ASSERT_OK(sw_op_add(c, a, b, SW_INT32, CN));
    sw_memory_info m0 = test_info(dev);
    ASSERT_EQ(cstate(a), SW_RESIDENT);
    ASSERT_EQ(cstate(b), SW_RESIDENT);
    ASSERT_EQ(cstate(c), SW_RESIDENT);
    ASSERT_OK(sw_set_memory_budget(dev, m0.in_use - test_round(CB)));
    ASSERT_EQ(cstate(a), SW_SPILLED);
    ASSERT_EQ(cstate(b), SW_RESIDENT);
    ASSERT_EQ(cstate(c), SW_RESIDENT);
    ASSERT_UEQ(test_info(dev).spilled_bytes_total, m0.spilled_bytes_total);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    test_expect_pattern(a, 4);
    test_expect_pattern(b, 5);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_buffer_free(c));
}

/* Lower the budget by one CB buffer: exactly one goes. */
static void evict_one(sw_device *dev)
{
    ASSERT_OK(sw_set_memory_budget(dev, test_info(dev).in_use -
                                            test_round(CB)));
    ASSERT_OK(sw_set_memory_budget(dev, 0));
}

/* A cold clean copy (restored once, then used by an op) goes before older
 * dirty buffers; one restored but unused (a prefetch's) does not; one
 * restored a second time is in LRU order again. */
TEST(clean_cold_copy_goes_first)
{
    test_require_spill();
    sw_device *dev = test_device();
    sw_scalar one = {.i = 1}, s;
    sw_buffer *a = clean_buffer(dev, 21); /* restored, read by a sum */
    sw_buffer *d = test_alloc(dev, CB, "dirty");
    test_write_pattern(d, 22);
    ASSERT_OK(sw_op_scale(d, d, one, SW_INT32, CN)); /* d: used */
    ASSERT_OK(sw_op_sum(a, SW_INT32, CN, &s));       /* a: used later */
    uint64_t out0 = test_info(dev).spilled_bytes_total;
    evict_one(dev);
    ASSERT_EQ(cstate(a), SW_SPILLED); /* cold: first, though newer */
    ASSERT_EQ(cstate(d), SW_RESIDENT);
    ASSERT_UEQ(test_info(dev).spilled_bytes_total, out0);

    /* Prefetched, not used yet: in LRU order (d, older, goes). */
    ASSERT_OK(sw_op_scale(d, d, one, SW_INT32, CN));
    ASSERT_OK(sw_buffer_prefetch(a, NULL));
    ASSERT_EQ(cstate(a), SW_RESIDENT);
    evict_one(dev);
    ASSERT_EQ(cstate(d), SW_SPILLED);
    ASSERT_EQ(cstate(a), SW_RESIDENT);

    /* a was restored twice: used, it is in LRU order for good. */
    ASSERT_OK(sw_op_scale(d, d, one, SW_INT32, CN)); /* d back, used */
    ASSERT_OK(sw_op_sum(a, SW_INT32, CN, &s));       /* a used later */
    evict_one(dev);
    ASSERT_EQ(cstate(d), SW_SPILLED);
    ASSERT_EQ(cstate(a), SW_RESIDENT);
    test_expect_pattern(a, 21);
    test_expect_pattern(d, 22);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(d));
}

/* sw_buffer_advise: a buffer advised cold goes before those in use, the
 * newest of them included, until its next use; clean cold ones before
 * dirty cold ones, whatever their age; SW_ADVISE_NORMAL undoes it at once;
 * through a view it is the base's; bad input changes nothing. */
TEST(advise_cold_goes_first)
{
    test_require_spill();
    sw_device *dev = test_device();
    sw_scalar one = {.i = 1};
    sw_buffer *b[4];
    for (int i = 0; i < 4; i++) {
        b[i] = test_alloc(dev, CB, "advised");
        test_write_pattern(b[i], 60u + (uint32_t)i);
        ASSERT_OK(sw_op_scale(b[i], b[i], one, SW_INT32, CN)); /* used */
    }
    /* The newest, advised cold: it goes, not the oldest. */
    ASSERT_OK(sw_buffer_advise(b[3], SW_ADVISE_COLD));
    ASSERT_EQ(cstate(b[3]), SW_RESIDENT); /* nothing moves now */
    evict_one(dev);
    ASSERT_EQ(cstate(b[3]), SW_SPILLED);
    ASSERT_EQ(cstate(b[0]), SW_RESIDENT);

    /* A use after the advice ends it: LRU order again (b[0] goes). */
    ASSERT_OK(sw_buffer_advise(b[2], SW_ADVISE_COLD));
    ASSERT_OK(sw_op_scale(b[2], b[2], one, SW_INT32, CN));
    evict_one(dev);
    ASSERT_EQ(cstate(b[0]), SW_SPILLED);
    ASSERT_EQ(cstate(b[2]), SW_RESIDENT);

    /* NORMAL undoes it at once (b[1], now the oldest, goes). */
    ASSERT_OK(sw_buffer_advise(b[2], SW_ADVISE_COLD));
    ASSERT_OK(sw_buffer_advise(b[2], SW_ADVISE_NORMAL));
    evict_one(dev);
    ASSERT_EQ(cstate(b[1]), SW_SPILLED);
    ASSERT_EQ(cstate(b[2]), SW_RESIDENT);

    /* Clean cold before dirty cold: b[3] back and read (clean), b[2]
     * dirty; both advised, the dirty one older: the clean one goes, and
     * nothing is copied. */
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    sw_scalar sum;
    ASSERT_OK(sw_op_sum(b[3], SW_INT32, CN, &sum)); /* back: clean */
    ASSERT_OK(sw_buffer_advise(b[2], SW_ADVISE_COLD));
    ASSERT_OK(sw_buffer_advise(b[3], SW_ADVISE_COLD));
    uint64_t out0 = test_info(dev).spilled_bytes_total;
    evict_one(dev);
    ASSERT_EQ(cstate(b[3]), SW_SPILLED);
    ASSERT_EQ(cstate(b[2]), SW_RESIDENT);
    ASSERT_UEQ(test_info(dev).spilled_bytes_total, out0);

    /* Through a view: the base.  A spilled buffer advised stays spilled. */
    sw_buffer *v = NULL;
    ASSERT_OK(sw_buffer_view(b[2], 4096, 4096, &v));
    ASSERT_OK(sw_op_scale(b[1], b[1], one, SW_INT32, CN)); /* b[1] back */
    ASSERT_OK(sw_op_scale(b[2], b[2], one, SW_INT32, CN)); /* advice ends */
    ASSERT_OK(sw_buffer_advise(v, SW_ADVISE_COLD));
    ASSERT_OK(sw_buffer_advise(b[0], SW_ADVISE_COLD));
    ASSERT_EQ(cstate(b[0]), SW_SPILLED);
    evict_one(dev);
    ASSERT_EQ(cstate(b[2]), SW_SPILLED); /* the newer, through its view */
    ASSERT_EQ(cstate(b[1]), SW_RESIDENT);
    ASSERT_OK(sw_buffer_free(v));

    /* Bad input: a clear error, nothing changed. */
    sw_memory_info m0 = test_info(dev);
    ASSERT_ERR(sw_buffer_advise(b[0], (sw_advice)2), SW_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(sw_last_error(), "SW_ADVISE_COLD");
    ASSERT_ERR(sw_buffer_advise(b[0], (sw_advice)-1), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_buffer_advise(NULL, SW_ADVISE_COLD), SW_ERR_INVALID_ARG);
    sw_buffer *gone = test_alloc(dev, 512, "gone");
    ASSERT_OK(sw_buffer_free(gone));
    ASSERT_ERR(sw_buffer_advise(gone, SW_ADVISE_COLD),
               SW_ERR_INVALID_HANDLE);
    sw_memory_info m1 = test_info(dev);
    ASSERT_UEQ(m1.in_use, m0.in_use);
    ASSERT_UEQ(m1.spilled, m0.spilled);
    for (int i = 0; i < 4; i++) {
        test_expect_pattern(b[i], 60u + (uint32_t)i);
        ASSERT_OK(sw_buffer_free(b[i]));
    }
}

TEST(clean_bad_access_modes)
{
    sw_device *dev = test_device();
    sw_buffer *a = test_alloc(dev, CB, "a");
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    const unsigned char bad[2] = {SW_ACCESS_READ, 2};
    sw_buffer *args[2] = {a, a};
    sw_devmem p[2] = {{.base = 1, .offset = 1}, {.base = 1, .offset = 1}};
    sw_memory_info m0 = test_info(dev);
    ASSERT_ERR(sw_launch_begin_access(dev, args, bad, 2, p),
               SW_ERR_INVALID_ARG);
    ASSERT_TRUE(strstr(sw_last_error(), "argument 1") != NULL);
    ASSERT_UEQ(p[0].base, 0);
    ASSERT_UEQ(p[1].base, 0);
    ASSERT_ERR(sw_launch_begin_q_access(q, args, bad, 2, p),
               SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_launch_begin_access(dev, NULL, bad, 2, p),
               SW_ERR_INVALID_ARG);
    /* Nothing was pinned: an end is refused, and a free goes through. */
    ASSERT_ERR(sw_launch_end(dev, args, 1), SW_ERR_INVALID_ARG);
    sw_memory_info m1 = test_info(dev);
    ASSERT_UEQ(m1.in_use, m0.in_use);
    ASSERT_UEQ(m1.host_copies, m0.host_copies);
    /* NULL modes: every argument written. */
    ASSERT_OK(sw_launch_begin_access(dev, args, NULL, 2, p));
    ASSERT_OK(sw_launch_end(dev, args, 2));
    ASSERT_OK(sw_queue_release(q));
    ASSERT_OK(sw_buffer_free(a));
}

/* Clean copies are host memory held for speed: sw_release_host_pool gives
 * them back, and so does a spill that finds host memory short. */
TEST(clean_copies_given_up)
{
    test_require_spill();
    sw_device *dev = test_device();
    sw_buffer *a = clean_buffer(dev, 11);
    ASSERT_OK(sw_trace_start(dev, NULL));
    ASSERT_OK(sw_release_host_pool(dev));
    sw_memory_info m = test_info(dev);
    ASSERT_UEQ(m.host_copies, 0);
    ASSERT_UEQ(m.host_pool, 0);
    sw_trace_event ev[64];
    size_t count = 0;
    ASSERT_OK(sw_trace_read(dev, ev, 64, &count, NULL));
    bool dropped = false;
    for (size_t i = 0; i < count; i++)
        dropped |= ev[i].kind == SW_TRACE_HOST_COPY_DROP && ev[i].aux == 1;
    ASSERT_TRUE(dropped);
    ASSERT_OK(sw_trace_stop(dev));
    spill_all(dev);
    ASSERT_UEQ(test_info(dev).spilled_bytes_total - m.spilled_bytes_total, CB);
    test_expect_pattern(a, 11);

    /* Short of host memory: a dirty victim's host block comes from the
     * clean copy given up.  Where the first host allocation of a spill is
     * the block (sim, opencl; a backend with page-locked host memory tries
     * it first and falls back to plain memory, so that one fault never
     * makes a spill short), the allocation fails once. */
    sw_buffer *d = test_alloc(dev, CB, "dirty");
    test_write_pattern(d, 12);
    sw_scalar s;
    ASSERT_OK(sw_op_sum(a, SW_INT32, CN, &s)); /* a clean, newer than d */
    ASSERT_UEQ(test_info(dev).host_copies, test_round(CB));
    const char *kind = test_device_spec();
    if (strncmp(kind, "sim", 3) == 0 || strncmp(kind, "opencl", 6) == 0) {
        ASSERT_OK(sw_set_host_pool_limit(dev, 0));
        ASSERT_OK(sw_inject_fault(dev, SW_FAULT_HOST_ALLOC, 1, 0));
        sw_memory_info m0 = test_info(dev);
        ASSERT_OK(sw_set_memory_budget(dev, m0.in_use - test_round(CB)));
        ASSERT_OK(sw_inject_fault(dev, SW_FAULT_HOST_ALLOC, 0, 0));
        ASSERT_EQ(cstate(d), SW_SPILLED);
        ASSERT_EQ(cstate(a), SW_RESIDENT);
        ASSERT_UEQ(test_info(dev).host_copies, 0);
        ASSERT_OK(sw_set_memory_budget(dev, 0));
        ASSERT_OK(sw_set_host_pool_limit(dev, UINT64_C(1) << 30));
    }
    /* A host budget: the clean copies' host blocks go to the spill file,
     * not away -- their buffers stay resident and clean, and evicted they
     * copy nothing: they are on disk at once. */
    ASSERT_OK(sw_op_sum(d, SW_INT32, CN, &s)); /* back (or still here) */
    ASSERT_OK(sw_op_sum(a, SW_INT32, CN, &s));
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    sw_memory_info m1 = test_info(dev);
    if (m1.host_copies > 0) {
        uint64_t n = m1.host_copies / test_round(CB);
        ASSERT_OK(sw_set_host_budget(dev, 1));
        sw_memory_info m2 = test_info(dev);
        ASSERT_UEQ(m2.host_copies, 0);
        ASSERT_UEQ(m2.disk_write_bytes - m1.disk_write_bytes, n * CB);
        ASSERT_EQ(cstate(a), SW_RESIDENT);
        ASSERT_EQ(cstate(d), SW_RESIDENT);
        ASSERT_OK(sw_set_host_budget(dev, 0));
        spill_all(dev); /* d, if it stayed dirty, is copied out */
        sw_memory_info m3 = test_info(dev);
        ASSERT_EQ(cstate(a), SW_SPILLED);
        ASSERT_UEQ(m3.spilled_bytes_total - m2.spilled_bytes_total,
                   (2 - n) * CB);
        ASSERT_UEQ(m3.clean_evictions - m2.clean_evictions, n);
        ASSERT_UEQ(m3.spilled_disk, n * test_round(CB));
        ASSERT_UEQ(m3.disk_write_bytes, m2.disk_write_bytes);
        ASSERT_UEQ((uint64_t)(test_buffer_info(dev, a).on_disk +
                              test_buffer_info(dev, d).on_disk), n);
    }
    test_expect_pattern(a, 11);
    test_expect_pattern(d, 12);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(d));
}

/* Threads read (sums, read-only pins), write (fills) and spill (a budget
 * of a third of the buffers) shared buffers at once; every sum is checked
 * against the value last written, under a per-buffer lock that orders the
 * writes and the reads of one buffer (not spillway's moves). */
#define TCL_THREADS 4
#define TCL_BUFS 6
#define TCL_N 4096

typedef struct {
    sw_device *dev;
    sw_buffer *buf[TCL_BUFS];
    uint32_t value[TCL_BUFS];
    pthread_mutex_t mu[TCL_BUFS];
    int seed;
} tcl_world;

typedef struct {
    tcl_world *w;
    int id;
} tcl_arg;

static void *tcl_worker(void *p)
{
    tcl_arg *a = p;
    tcl_world *w = a->w;
    uint64_t rng = 0x9E3779B97F4A7C15ull * (uint64_t)(a->id + 1);
    for (int it = 0; it < 300; it++) {
        int i = (int)(test_rand(&rng) % TCL_BUFS);
        int what = (int)(test_rand(&rng) % 4);
        pthread_mutex_lock(&w->mu[i]);
        sw_buffer *b = w->buf[i];
        if (what == 0) {
            uint32_t v = (uint32_t)(test_rand(&rng) % 1000);
            sw_scalar s = {.i = v};
            ASSERT_OK(sw_op_fill(b, SW_INT32, TCL_N, s));
            w->value[i] = v;
        } else if (what == 1) {
            sw_devmem p1;
            const unsigned char rd = SW_ACCESS_READ;
            ASSERT_OK(sw_launch_begin_access(w->dev, &b, &rd, 1, &p1));
            ASSERT_OK(sw_launch_end(w->dev, &b, 1));
        } else {
            sw_scalar s;
            ASSERT_OK(sw_op_sum(b, SW_INT32, TCL_N, &s));
            if (s.i != (int64_t)w->value[i] * TCL_N)
                FAIL("buffer %d: sum %lld, want %lld", i, (long long)s.i,
                     (long long)w->value[i] * TCL_N);
        }
        pthread_mutex_unlock(&w->mu[i]);
    }
    return NULL;
}

TEST(thread_clean_copies)
{
    test_require_spill();
    tcl_world w = {.dev = test_device()};
    for (int i = 0; i < TCL_BUFS; i++) {
        w.buf[i] = test_alloc(w.dev, TCL_N * 4, "shared");
        sw_scalar s = {.i = i};
        ASSERT_OK(sw_op_fill(w.buf[i], SW_INT32, TCL_N, s));
        w.value[i] = (uint32_t)i;
        pthread_mutex_init(&w.mu[i], NULL);
    }
    sw_memory_info m0 = test_info(w.dev);
    /* Room for 4 of the 6: every thread may pin one at once. */
    ASSERT_OK(sw_set_memory_budget(w.dev, m0.in_use / TCL_BUFS * 4));
    pthread_t t[TCL_THREADS];
    tcl_arg args[TCL_THREADS];
    for (int i = 0; i < TCL_THREADS; i++) {
        args[i] = (tcl_arg){.w = &w, .id = i};
        ASSERT_EQ(pthread_create(&t[i], NULL, tcl_worker, &args[i]), 0);
    }
    for (int i = 0; i < TCL_THREADS; i++)
        pthread_join(t[i], NULL);
    ASSERT_OK(sw_set_memory_budget(w.dev, 0));
    sw_memory_info m1 = test_info(w.dev);
    /* Clean evictions happened, and saved copies. */
    ASSERT_TRUE(m1.clean_evictions > m0.clean_evictions);
    for (int i = 0; i < TCL_BUFS; i++) {
        sw_scalar s;
        ASSERT_OK(sw_op_sum(w.buf[i], SW_INT32, TCL_N, &s));
        ASSERT_EQ(s.i, (int64_t)w.value[i] * TCL_N);
        ASSERT_OK(sw_buffer_free(w.buf[i]));
        pthread_mutex_destroy(&w.mu[i]);
    }
    ASSERT_UEQ(test_info(w.dev).host_copies, 0);
}
