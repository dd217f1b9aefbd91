/*
 * test-register.c -- bringing your own device (spillway/backend.h): a
 * backend registered at run time opens by spec and gets what spillway's
 * own get (accounting, budgets, spilling and restoring, pressure
 * callbacks, the history); tables that cannot be a backend are refused,
 * saying why, and change nothing; paths that do not load are refused
 * with the reason (SPILLWAY_BACKENDS's: tests/cli).  The backend is examples/backend/membank.c,
 * compiled into this suite under another name (the whole suite also runs
 * on it, loaded from a shared object built against the installed headers:
 * make test's c-backend-example).  Each test runs in a process of its own,
 * so registrations do not outlive it.
 */
#include "test.h"
#include "tests.h"

#include "spillway/backend.h"


/* examples/backend/membank.c's entry, built in (tests/c/meson.build). */
const sw_backend_ops *sw_backend_entry(const sw_backend_host *host);

static const sw_backend_host test_host = {
    .version = SW_BACKEND_VERSION,
    .errorf = sw_backend_errorf,
    .malloc = sw_backend_malloc,
    .calloc = sw_backend_calloc,
    .realloc = sw_backend_realloc,
    .free = sw_backend_free,
    .parse_size = sw_parse_size,
    .format_bytes = sw_format_bytes,
    .dtype_size = sw_dtype_size,
    .dtype_name = sw_dtype_name,
    .kernel_name = sw_kernel_name,
};

/* Tables live as long as the process: a fresh static copy for each use
 * (one registered is never edited again), and `other` for the refused. */
static sw_backend_ops tables[8], other;
static int ntables;

static const sw_backend_ops *membank(const char *name)
{
    if (ntables == 8)
        FAIL("the test used more tables than it has");
    sw_backend_ops *t = &tables[ntables++];
    *t = *sw_backend_entry(&test_host);
    t->name = name;
    return t;
}

static size_t backend_index(const char *name)
{
    size_t n = sw_backend_count();
    for (size_t i = 0; i < n; i++) {
        const char *bn = NULL;
        (void)sw_backend_info(i, &bn, NULL, NULL, 0);
        if (bn != NULL && strcmp(bn, name) == 0)
            return i;
    }
    return (size_t)-1;
}

TEST(register_backend_opens_and_spills)
{
    size_t before = sw_backend_count();
    ASSERT_OK(sw_backend_register(membank("bank_t")));
    ASSERT_UEQ(sw_backend_count(), before + 1);
    size_t i = backend_index("bank_t");
    ASSERT_TRUE(i != (size_t)-1);
    int ndev = 0;
    ASSERT_OK(sw_backend_info(i, NULL, &ndev, NULL, 0));
    ASSERT_EQ(ndev, 1);
    /* Listed among the devices, opened by spec. */
    size_t count = 0;
    ASSERT_OK(sw_device_count(&count));
    int listed = 0;
    for (size_t k = 0; k < count; k++) {
        char spec[32];
        ASSERT_OK(sw_device_spec_at(k, spec, sizeof spec));
        listed |= strcmp(spec, "bank_t:0") == 0;
    }
    ASSERT_TRUE(listed);
    sw_device *dev = test_open("bank_t:0");
    ASSERT_STR_EQ(sw_device_name(dev), "bank_t:0");
    ASSERT_TRUE(test_strcasestr(sw_device_description(dev), "membank") !=
                NULL);
    /* What the core does for it: accounting, a budget, spilling and
     * restoring, an out-of-memory report, the history. */
    ASSERT_OK(sw_trace_start(dev, NULL));
    sw_buffer *b[4];
    for (int k = 0; k < 4; k++) {
        b[k] = test_alloc(dev, 1u << 20, "bank");
        test_write_pattern(b[k], 100 + (uint32_t)k);
    }
    sw_memory_info m = test_info(dev);
    ASSERT_UEQ(m.in_use, 4u << 20);
    ASSERT_UEQ(m.device_total, 256u << 20);
    ASSERT_OK(sw_set_memory_budget(dev, 2u << 20));
    m = test_info(dev);
    ASSERT_UEQ(m.spilled, 2u << 20);
    ASSERT_UGE(m.spills, 2);
    for (int k = 0; k < 4; k++) {
        test_pin(b[k]);
        test_unpin(b[k]);
    }
    ASSERT_UGT(test_info(dev).restores, 0);
    sw_buffer *big = NULL;
    ASSERT_ERR(sw_buffer_alloc(dev, 512u << 20, "too big", &big),
               SW_ERR_TOO_LARGE);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    for (int k = 0; k < 4; k++) {
        test_expect_pattern(b[k], 100 + (uint32_t)k);
        ASSERT_OK(sw_buffer_free(b[k]));
    }
    size_t nev = 0;
    ASSERT_OK(sw_trace_read(dev, NULL, 0, &nev, NULL));
    ASSERT_UGT(nev, 8);
    ASSERT_OK(sw_trace_stop(dev));
}

static int count_calls(sw_device *dev, sw_pressure *p, size_t bytes,
                       void *user)
{
    (void)dev, (void)p, (void)bytes;
    ++*(int *)user;
    return 0;
}

/* The device's own capacity runs out (no budget): the pressure callbacks
 * run, then spilling makes room, as on any device. */
TEST(register_backend_pressure_and_capacity)
{
    setenv("MEMBANK_MEMORY", "4M", 1);
    ASSERT_OK(sw_backend_register(membank("bank_p")));
    sw_device *dev = test_open("bank_p:0");
    int calls = 0, id = -1;
    ASSERT_OK(sw_add_pressure_callback(dev, count_calls, &calls, &id));
    sw_buffer *b[6];
    for (int k = 0; k < 6; k++) {
        b[k] = test_alloc(dev, 1u << 20, "fill");
        test_write_pattern(b[k], 200 + (uint32_t)k);
    }
    ASSERT_GT(calls, 0);
    ASSERT_UGT(test_info(dev).spills, 0);
    ASSERT_OK(sw_remove_pressure_callback(dev, id));
    for (int k = 0; k < 6; k++) {
        test_expect_pattern(b[k], 200 + (uint32_t)k);
        ASSERT_OK(sw_buffer_free(b[k]));
    }
    unsetenv("MEMBANK_MEMORY");
}

TEST(register_bad_tables)
{
    size_t before = sw_backend_count();
    ASSERT_ERR(sw_backend_register(NULL), SW_ERR_INVALID_ARG);
    other = *membank("bank_v");
    other.version = 1;
    ASSERT_ERR(sw_backend_register(&other), SW_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(sw_last_error(), "version 1");
    other.version = SW_BACKEND_VERSION + 1;
    ASSERT_ERR(sw_backend_register(&other), SW_ERR_INVALID_ARG);
    other = *membank("bank_n");
    other.wait_event = NULL;
    ASSERT_ERR(sw_backend_register(&other), SW_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(sw_last_error(), "wait_event");
    other = *membank("bank_n");
    other.alloc = NULL;
    ASSERT_ERR(sw_backend_register(&other), SW_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(sw_last_error(), "alloc");
    static const char *const bad_names[] = {
        "", "Bank", "bank:0", "bank-0", "a_name_of_twenty_four_ch", NULL};
    const sw_backend_ops *base = membank("x");
    for (int k = 0; k < 6; k++) {
        other = *base;
        other.name = bad_names[k];
        if (sw_backend_register(&other) != SW_ERR_INVALID_ARG)
            FAIL("backend name '%s' was not refused",
                 bad_names[k] ? bad_names[k] : "(null)");
    }
    /* Names taken: a backend of the library's, or one registered. */
    other = *membank("sim");
    ASSERT_ERR(sw_backend_register(&other), SW_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(sw_last_error(), "registered already");
    ASSERT_UEQ(sw_backend_count(), before); /* nothing changed */
    const sw_backend_ops *once = membank("bank_once");
    ASSERT_OK(sw_backend_register(once));
    other = *once;
    ASSERT_ERR(sw_backend_register(&other), SW_ERR_INVALID_ARG);
    ASSERT_UEQ(sw_backend_count(), before + 1);
    /* Optional members of later versions may be NULL. */
    other = *membank("bank_v2");
    other.version = 2;
    other.queue_idle = NULL;
    other.queue_native = NULL;
    other.queue_wrap = NULL;
    other.native_context = NULL;
    ASSERT_OK(sw_backend_register(&other));
    sw_device *dev = test_open("bank_v2:0");
    uintptr_t ctx = 0;
    ASSERT_ERR(sw_device_native_context(dev, &ctx), SW_ERR_UNSUPPORTED);
    sw_buffer *b = test_alloc(dev, 4096, "v2");
    test_write_pattern(b, 7);
    test_expect_pattern(b, 7);
    ASSERT_OK(sw_buffer_free(b));
}

/* A backend whose queue_wrap hands back one of its own queues (as
 * membank's and host's did: the default queue, or a queue spillway made)
 * is refused by the core, which destroys nothing: the default queue and
 * the queue live on, and the device closes (destroying the default queue
 * through an adoption aborted at close). */
static const sw_backend_ops *lax_base;

static int lax_wrap(sw_bdev *d, uintptr_t handle, sw_bqueue **out)
{
    /* handle 2: the default queue; else handle ^ 1 is a queue's own. */
    *out = handle == 2 ? lax_base->default_queue(d)
                       : (sw_bqueue *)(handle ^ 1);
    return SW_OK;
}

TEST(register_wrap_of_own_queue_refused)
{
    lax_base = membank("x");
    other = *lax_base;
    other.name = "bank_lax";
    other.queue_wrap = lax_wrap;
    ASSERT_OK(sw_backend_register(&other));
    sw_device *dev = test_open("bank_lax:0");
    sw_queue *q = NULL, *adopted = (sw_queue *)(uintptr_t)0x1234;
    ASSERT_ERR(sw_queue_wrap_native(dev, 2, &adopted), SW_ERR_INVALID_ARG);
    ASSERT_NULL(adopted);
    ASSERT_STR_CONTAINS(sw_last_error(), "spillway's own");
    ASSERT_OK(sw_queue_create(dev, &q));
    uintptr_t h = 0;
    ASSERT_OK(sw_queue_native(q, &h));
    ASSERT_ERR(sw_queue_wrap_native(dev, h ^ 1, &adopted),
               SW_ERR_INVALID_ARG);
    ASSERT_NULL(adopted);
    sw_buffer *b = test_alloc(dev, 4096, "lax");
    sw_scalar v = {.i = 5};
    ASSERT_OK(sw_op_fill_q(q, b, SW_INT32, 1024, v));
    ASSERT_OK(sw_queue_synchronize(q));
    sw_scalar two = {.i = 2};
    ASSERT_OK(sw_op_scale(b, b, two, SW_INT32, 1024)); /* default queue */
    int32_t x = 0;
    ASSERT_OK(sw_buffer_read(b, 4 * 1023, &x, 4));
    ASSERT_EQ(x, 10);
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_queue_release(q));
}

TEST(register_table_full)
{
    static sw_backend_ops many[16];
    static char names[16][16];
    int ok = 0, rc = SW_OK;
    const sw_backend_ops *base = membank("x");
    for (int k = 0; k < 16 && rc == SW_OK; k++) {
        many[k] = *base;
        snprintf(names[k], sizeof names[k], "bank_%d", k);
        many[k].name = names[k];
        rc = sw_backend_register(&many[k]);
        ok += rc == SW_OK;
    }
    ASSERT_EQ(rc, SW_ERR_BUSY);
    ASSERT_STR_CONTAINS(sw_last_error(), "16 backends");
    ASSERT_GT(ok, 0);
    ASSERT_UEQ(sw_backend_count(), 16);
}

TEST(register_load_bad_paths)
{
    ASSERT_ERR(sw_backend_load(NULL), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_backend_load("/nonexistent/libspillway_none.so"),
               SW_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(sw_last_error(), "does not load");
    /* A shared object that is no backend. */
    ASSERT_ERR(sw_backend_load("libm.so.6"), SW_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(sw_last_error(), "exports no sw_backend_entry");
}
