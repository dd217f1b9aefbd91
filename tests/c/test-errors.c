/*
 * test-errors.c -- error names and messages, NULL arguments, foreign
 * handles, element types.
 */
#include "test.h"
#include "tests.h"

#include <limits.h>
#include <pthread.h>

/* What the library's own state looks like, for "nothing changed" checks. */
static void expect_unchanged(const sw_memory_info *a, const sw_memory_info *b)
{
    ASSERT_UEQ(a->in_use, b->in_use);
    ASSERT_UEQ(a->cached, b->cached);
    ASSERT_UEQ(a->peak, b->peak);
    ASSERT_UEQ(a->spilled, b->spilled);
    ASSERT_UEQ(a->allocs, b->allocs);
    ASSERT_UEQ(a->frees, b->frees);
    ASSERT_UEQ(a->budget, b->budget);
}

TEST(error_names)
{
    /* Every code of the table: its name and description, as the table says,
     * and distinct from every other code's. */
    struct {
        int code;
        const char *name;
        const char *msg;
    } table[] = {
#define SW__ROW(name, code, msg) {code, "SW_ERR_" #name, msg},
        SW_ERRNO_MAP(SW__ROW)
#undef SW__ROW
    };
    size_t n = sizeof table / sizeof table[0];
    ASSERT_EQ(n, 11);
    for (size_t i = 0; i < n; i++) {
        ASSERT_LT(table[i].code, 0);
        ASSERT_STR_EQ(sw_err_name(table[i].code), table[i].name);
        ASSERT_STR_EQ(sw_strerror(table[i].code), table[i].msg);
        for (size_t j = 0; j < i; j++)
            ASSERT_NE(table[i].code, table[j].code);
    }
    ASSERT_STR_EQ(sw_err_name(SW_ERR_OOM), "SW_ERR_OOM");
    ASSERT_STR_EQ(sw_strerror(SW_ERR_OUT_OF_RANGE),
                  "byte range outside the buffer");

    /* SW_OK has a name and a description (not NULL, not empty). */
    ASSERT_NOT_NULL(sw_err_name(SW_OK));
    ASSERT_TRUE(sw_err_name(SW_OK)[0] != '\0');
    ASSERT_NOT_NULL(sw_strerror(SW_OK));
    ASSERT_TRUE(sw_strerror(SW_OK)[0] != '\0');

    /* Codes outside the table. */
    int unknown[] = {-12, -100, 1, 42, INT_MIN, INT_MAX};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        ASSERT_STR_EQ(sw_err_name(unknown[i]), "SW_ERR_UNKNOWN");
        const char *s = sw_strerror(unknown[i]);
        ASSERT_NOT_NULL(s);
        ASSERT_TRUE(s[0] != '\0');
        for (size_t j = 0; j < n; j++)
            ASSERT_TRUE(strcmp(s, table[j].msg) != 0);
    }
}

/* ------------------------------------------------------------------------ */

typedef struct {
    char before[256];
    char after[256];
    int rc;
} last_error_probe;

static void *last_error_thread(void *arg)
{
    last_error_probe *p = arg;
    snprintf(p->before, sizeof p->before, "%s", sw_last_error());
    sw_device *dev = NULL;
    /* A failure of a different kind on this thread. */
    p->rc = sw_device_open("bogus:7", &dev);
    snprintf(p->after, sizeof p->after, "%s", sw_last_error());
    return NULL;
}

TEST(error_last_error_per_thread)
{
    /* A fresh thread has no message; a failure sets one that names what was
     * wrong, and a message is per thread. */
    sw_buffer *b = (sw_buffer *)(uintptr_t)1;
    ASSERT_ERR(sw_buffer_alloc(NULL, 16, "x", &b), SW_ERR_INVALID_ARG);
    ASSERT_NULL(b);
    char mine[256];
    snprintf(mine, sizeof mine, "%s", sw_last_error());
    ASSERT_TRUE(mine[0] != '\0');

    last_error_probe probe;
    memset(&probe, 0, sizeof probe);
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, last_error_thread, &probe), 0);
    ASSERT_EQ(pthread_join(t, NULL), 0);
    ASSERT_STR_EQ(probe.before, "");
    ASSERT_EQ(probe.rc, SW_ERR_NO_DEVICE);
    ASSERT_TRUE(probe.after[0] != '\0');
    ASSERT_STR_CONTAINS(probe.after, "bogus");

    /* The other thread's failure did not touch this thread's message. */
    ASSERT_STR_EQ(sw_last_error(), mine);
}

/* ------------------------------------------------------------------------ */

TEST(null_destroy_noop)
{
    ASSERT_EQ(sw_buffer_free(NULL), SW_OK);
    ASSERT_EQ(sw_device_close(NULL), SW_OK);
    /* And they leave a working library behind. */
    sw_device *dev = test_device();
    sw_memory_info before = test_info(dev);
    ASSERT_EQ(sw_buffer_free(NULL), SW_OK);
    ASSERT_EQ(sw_device_close(NULL), SW_OK);
    sw_memory_info after = test_info(dev);
    expect_unchanged(&before, &after);
    sw_buffer *b = test_alloc(dev, 64, "after-null");
    test_write_pattern(b, 3);
    test_expect_pattern(b, 3);
    ASSERT_OK(sw_buffer_free(b));
}

TEST(null_arguments)
{
    sw_device *dev = test_device();
    sw_buffer *buf = test_alloc(dev, 256, "null-args");
    test_write_pattern(buf, 11);
    sw_memory_info before = test_info(dev);

    /* Devices. */
    ASSERT_ERR(sw_device_open(test_device_spec(), NULL), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_device_synchronize(NULL), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_device_count(NULL), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_device_spec_at(0, NULL, 16), SW_ERR_INVALID_ARG);

    /* Accounting: the info struct is zeroed on failure. */
    sw_memory_info info;
    memset(&info, 0xA5, sizeof info);
    ASSERT_ERR(sw_memory_info_get(NULL, &info), SW_ERR_INVALID_ARG);
    ASSERT_UEQ(info.in_use, 0);
    ASSERT_UEQ(info.device_total, 0);
    ASSERT_UEQ(info.allocs, 0);
    ASSERT_UEQ(info.gc_runs, 0);
    ASSERT_EQ(info.device_free_known, 0);
    ASSERT_ERR(sw_memory_info_get(dev, NULL), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_reset_peak(NULL), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_empty_cache(NULL), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_set_memory_budget(NULL, 1024), SW_ERR_INVALID_ARG);
    uint64_t u64 = 77;
    ASSERT_ERR(sw_get_memory_budget(NULL, &u64), SW_ERR_INVALID_ARG);
    ASSERT_UEQ(u64, 0);
    ASSERT_ERR(sw_get_memory_budget(dev, NULL), SW_ERR_INVALID_ARG);
    sw_peak_scope *scope = (sw_peak_scope *)(uintptr_t)1;
    ASSERT_ERR(sw_peak_scope_begin(NULL, &scope), SW_ERR_INVALID_ARG);
    ASSERT_NULL(scope);
    ASSERT_ERR(sw_peak_scope_begin(dev, NULL), SW_ERR_INVALID_ARG);
    u64 = 77;
    ASSERT_ERR(sw_peak_scope_peak(NULL, &u64), SW_ERR_INVALID_ARG);
    ASSERT_UEQ(u64, 0);

    /* Buffers: out-parameters are NULL/0 after a failure. */
    sw_buffer *out = (sw_buffer *)(uintptr_t)1;
    ASSERT_ERR(sw_buffer_alloc(NULL, 64, "x", &out), SW_ERR_INVALID_ARG);
    ASSERT_NULL(out);
    ASSERT_ERR(sw_buffer_alloc(dev, 64, "x", NULL), SW_ERR_INVALID_ARG);
    out = (sw_buffer *)(uintptr_t)1;
    ASSERT_ERR(sw_buffer_view(NULL, 0, 0, &out), SW_ERR_INVALID_ARG);
    ASSERT_NULL(out);
    ASSERT_ERR(sw_buffer_view(buf, 0, 16, NULL), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_buffer_retain(NULL), SW_ERR_INVALID_ARG);
    size_t size = 77;
    ASSERT_ERR(sw_buffer_size(NULL, &size), SW_ERR_INVALID_ARG);
    ASSERT_EQ(size, 0);
    ASSERT_ERR(sw_buffer_size(buf, NULL), SW_ERR_INVALID_ARG);
    sw_device *d = (sw_device *)(uintptr_t)1;
    ASSERT_ERR(sw_buffer_device(NULL, &d), SW_ERR_INVALID_ARG);
    ASSERT_NULL(d);
    ASSERT_ERR(sw_buffer_device(buf, NULL), SW_ERR_INVALID_ARG);
    sw_buffer_state st;
    ASSERT_ERR(sw_buffer_state_get(NULL, &st), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_buffer_state_get(buf, NULL), SW_ERR_INVALID_ARG);
    char tag[16] = "untouched";
    ASSERT_ERR(sw_buffer_tag(NULL, tag, sizeof tag), SW_ERR_INVALID_ARG);
    ASSERT_STR_EQ(tag, "");
    ASSERT_ERR(sw_buffer_tag(buf, NULL, 16), SW_ERR_INVALID_ARG);
    sw_devmem mem = {77, 77};
    ASSERT_ERR(sw_buffer_device_ptr(NULL, &mem), SW_ERR_INVALID_ARG);
    ASSERT_UEQ(mem.base, 0);
    ASSERT_UEQ(mem.offset, 0);
    ASSERT_ERR(sw_buffer_device_ptr(buf, NULL), SW_ERR_INVALID_ARG);

    unsigned char host[256];
    memset(host, 0xEE, sizeof host);
    ASSERT_ERR(sw_buffer_read(NULL, 0, host, 16), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_buffer_read(buf, 0, NULL, 16), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_buffer_write(NULL, 0, host, 16), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_buffer_write(buf, 0, NULL, 16), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_buffer_copy(NULL, 0, buf, 0, 16), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_buffer_copy(buf, 0, NULL, 0, 16), SW_ERR_INVALID_ARG);
    uint32_t pat = 0xdeadbeef;
    ASSERT_ERR(sw_buffer_fill(NULL, 0, 16, &pat, 4), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_buffer_fill(buf, 0, 16, NULL, 4), SW_ERR_INVALID_ARG);

    /* Launches and operations. */
    sw_devmem ptrs[2];
    sw_buffer *bufs[2] = {buf, NULL};
    ASSERT_ERR(sw_launch_begin(NULL, bufs, 1, ptrs), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_launch_begin(dev, NULL, 1, ptrs), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_launch_begin(dev, bufs, 1, NULL), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_launch_begin(dev, bufs, 2, ptrs), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_launch_end(NULL, bufs, 1), SW_ERR_INVALID_ARG);
    sw_kernel_args args;
    memset(&args, 0, sizeof args);
    ASSERT_ERR(sw_launch_kernel(NULL, &args), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_launch_kernel(dev, NULL), SW_ERR_INVALID_ARG);
    sw_scalar one = {.f = 1.0};
    ASSERT_ERR(sw_op_fill(NULL, SW_FLOAT32, 4, one), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_op_add(NULL, buf, buf, SW_FLOAT32, 4), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_op_add(buf, NULL, buf, SW_FLOAT32, 4), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_op_add(buf, buf, NULL, SW_FLOAT32, 4), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_op_scale(NULL, buf, one, SW_FLOAT32, 4),
               SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_op_scale(buf, NULL, one, SW_FLOAT32, 4),
               SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_op_axpy(one, NULL, buf, SW_FLOAT32, 4), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_op_axpy(one, buf, NULL, SW_FLOAT32, 4), SW_ERR_INVALID_ARG);
    sw_scalar res = {.i = 77};
    ASSERT_ERR(sw_op_sum(NULL, SW_FLOAT32, 4, &res), SW_ERR_INVALID_ARG);
    ASSERT_EQ(res.i, 0);
    ASSERT_ERR(sw_op_sum(buf, SW_FLOAT32, 4, NULL), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_inject_fault(NULL, SW_FAULT_ALLOC, 1, 0),
               SW_ERR_INVALID_ARG);

    /* Nothing of the above changed anything. */
    ASSERT_OK(sw_device_synchronize(dev));
    sw_memory_info after = test_info(dev);
    expect_unchanged(&before, &after);
    test_expect_pattern(buf, 11);
    ASSERT_OK(sw_buffer_free(buf));
}

/* ------------------------------------------------------------------------ */

/* Every buffer entry point must reject h as SW_ERR_INVALID_HANDLE (a valid
 * buffer `good` fills the other operand positions) and change nothing. */
static void expect_buffer_rejected(sw_device *dev, sw_buffer *h,
                                   sw_buffer *good)
{
    unsigned char host[64];
    memset(host, 0x5A, sizeof host);
    size_t size = 77;
    ASSERT_ERR(sw_buffer_size(h, &size), SW_ERR_INVALID_HANDLE);
    ASSERT_EQ(size, 0);
    ASSERT_ERR(sw_buffer_read(h, 0, host, 8), SW_ERR_INVALID_HANDLE);
    for (size_t i = 0; i < sizeof host; i++)
        ASSERT_EQ(host[i], 0x5A);
    ASSERT_ERR(sw_buffer_write(h, 0, host, 8), SW_ERR_INVALID_HANDLE);
    sw_buffer *v = (sw_buffer *)(uintptr_t)1;
    ASSERT_ERR(sw_buffer_view(h, 0, 8, &v), SW_ERR_INVALID_HANDLE);
    ASSERT_NULL(v);
    ASSERT_ERR(sw_buffer_retain(h), SW_ERR_INVALID_HANDLE);
    sw_device *d = (sw_device *)(uintptr_t)1;
    ASSERT_ERR(sw_buffer_device(h, &d), SW_ERR_INVALID_HANDLE);
    ASSERT_NULL(d);
    sw_buffer_state st;
    ASSERT_ERR(sw_buffer_state_get(h, &st), SW_ERR_INVALID_HANDLE);
    char tag[8] = "xxxxxxx";
    ASSERT_ERR(sw_buffer_tag(h, tag, sizeof tag), SW_ERR_INVALID_HANDLE);
    ASSERT_STR_EQ(tag, "");
    sw_devmem mem = {77, 77};
    ASSERT_ERR(sw_buffer_device_ptr(h, &mem), SW_ERR_INVALID_HANDLE);
    ASSERT_UEQ(mem.base, 0);
    ASSERT_UEQ(mem.offset, 0);
    uint32_t pat = 1;
    ASSERT_ERR(sw_buffer_fill(h, 0, 8, &pat, 4), SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_buffer_copy(h, 0, good, 0, 8), SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_buffer_copy(good, 0, h, 0, 8), SW_ERR_INVALID_HANDLE);
    sw_scalar s = {.f = 2.0};
    ASSERT_ERR(sw_op_fill(h, SW_FLOAT32, 2, s), SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_op_add(good, h, good, SW_FLOAT32, 2),
               SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_op_add(good, good, h, SW_FLOAT32, 2),
               SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_op_scale(good, h, s, SW_FLOAT32, 2), SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_op_axpy(s, h, good, SW_FLOAT32, 2), SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_op_axpy(s, good, h, SW_FLOAT32, 2), SW_ERR_INVALID_HANDLE);
    sw_scalar r = {.i = 77};
    ASSERT_ERR(sw_op_sum(h, SW_FLOAT32, 2, &r), SW_ERR_INVALID_HANDLE);
    ASSERT_EQ(r.i, 0);
    sw_buffer *bufs[2] = {good, h};
    sw_devmem ptrs[2];
    ASSERT_ERR(sw_launch_begin(dev, bufs, 2, ptrs), SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_buffer_free(h), SW_ERR_INVALID_HANDLE);
}

/* A call refused because one pointer argument is NULL still clears the
 * out-parameters it was given (found by the fuzzer: these four returned
 * first and left them as they were). */
TEST(null_argument_clears_outparams)
{
    sw_device *dev = test_device();
    sw_buffer *buf = NULL;
    ASSERT_OK(sw_buffer_alloc(dev, 64, "outparams", &buf));
    static int junk;
    sw_lease *lease = (sw_lease *)&junk;
    ASSERT_ERR(sw_buffer_expose(buf, NULL, &lease), SW_ERR_INVALID_ARG);
    ASSERT_NULL(lease);
    sw_devmem m = {3, 3};
    ASSERT_ERR(sw_buffer_expose(buf, &m, NULL), SW_ERR_INVALID_ARG);
    ASSERT_UEQ(m.base, 0);
    ASSERT_UEQ(m.offset, 0);
    sw_devmem p[2] = {{3, 3}, {3, 3}};
    ASSERT_ERR(sw_launch_begin(dev, NULL, 2, p), SW_ERR_INVALID_ARG);
    ASSERT_UEQ(p[0].base, 0);
    ASSERT_UEQ(p[1].offset, 0);
    size_t sub = 5, host = 5;
    ASSERT_ERR(sw_order_counts(NULL, &sub, &host), SW_ERR_INVALID_ARG);
    ASSERT_EQ(sub, 0);
    ASSERT_EQ(host, 0);
    int idle = 5;
    ASSERT_ERR(sw_order_idle(NULL, &idle), SW_ERR_INVALID_ARG);
    ASSERT_EQ(idle, 0);
    ASSERT_OK(sw_buffer_free(buf));
}

TEST(foreign_handles)
{
    sw_device *dev = test_device();
    sw_buffer *good = test_alloc(dev, 64, "good");
    test_write_pattern(good, 5);
    sw_memory_info before = test_info(dev);

    /* Zeroed and patterned host memory posing as handles. */
    static uint64_t fake[512];
    memset(fake, 0, sizeof fake);
    expect_buffer_rejected(dev, (sw_buffer *)fake, good);
    memset(fake, 0xA5, sizeof fake);
    expect_buffer_rejected(dev, (sw_buffer *)fake, good);
    uint64_t local[64];
    memset(local, 0x3C, sizeof local);
    expect_buffer_rejected(dev, (sw_buffer *)local, good);

    /* A handle of another type. */
    expect_buffer_rejected(dev, (sw_buffer *)dev, good);

    sw_device *fdev = (sw_device *)local;
    sw_memory_info info;
    ASSERT_ERR(sw_memory_info_get(fdev, &info), SW_ERR_INVALID_HANDLE);
    sw_buffer *out = (sw_buffer *)(uintptr_t)1;
    ASSERT_ERR(sw_buffer_alloc(fdev, 64, "x", &out), SW_ERR_INVALID_HANDLE);
    ASSERT_NULL(out);
    ASSERT_ERR(sw_device_synchronize(fdev), SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_empty_cache(fdev), SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_set_memory_budget(fdev, 1), SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_device_close(fdev), SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_memory_info_get((sw_device *)good, &info),
               SW_ERR_INVALID_HANDLE);
    sw_buffer *bufs[1] = {good};
    sw_devmem ptrs[1];
    ASSERT_ERR(sw_launch_begin(fdev, bufs, 1, ptrs), SW_ERR_INVALID_HANDLE);
    uint64_t peak = 77;
    ASSERT_ERR(sw_peak_scope_peak((sw_peak_scope *)local, &peak),
               SW_ERR_INVALID_HANDLE);
    ASSERT_UEQ(peak, 0);
    ASSERT_ERR(sw_peak_scope_end((sw_peak_scope *)local, NULL),
               SW_ERR_INVALID_HANDLE);

    ASSERT_OK(sw_device_synchronize(dev));
    sw_memory_info after = test_info(dev);
    expect_unchanged(&before, &after);
    test_expect_pattern(good, 5);
    ASSERT_OK(sw_buffer_free(good));
}

/* A freed handle is reported, never mistaken for another -- however many
 * handles were made since (a quarantine alone gave out a released
 * event's slot again after 257 events, a buffer's after 4,096). */
TEST(stale_buffer_handles)
{
    sw_device *dev = test_device();
    sw_buffer *stale = test_alloc(dev, 64, "stale");
    sw_buffer *stale_view = NULL;
    ASSERT_OK(sw_buffer_view(stale, 0, 32, &stale_view));
    ASSERT_OK(sw_buffer_free(stale_view));
    ASSERT_OK(sw_buffer_free(stale));
    enum { N = 20000, KEEP = 64 };
    sw_buffer *keep[KEEP];
    for (int i = 0; i < KEEP; i++) {
        keep[i] = test_alloc(dev, 64, "kept");
        test_write_pattern(keep[i], (unsigned)i);
    }
    for (int i = 0; i < N; i++) {
        sw_buffer *b = test_alloc(dev, 64, "churn");
        ASSERT_TRUE(b != stale && b != stale_view);
        ASSERT_OK(sw_buffer_free(b));
    }
    sw_memory_info before = test_info(dev);
    expect_buffer_rejected(dev, stale, keep[0]);
    expect_buffer_rejected(dev, stale_view, keep[0]);
    ASSERT_ERR(sw_buffer_free(stale), SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_buffer_free(stale_view), SW_ERR_INVALID_HANDLE);
    sw_memory_info after = test_info(dev);
    expect_unchanged(&before, &after);
    for (int i = 0; i < KEEP; i++) {
        test_expect_pattern(keep[i], (unsigned)i);
        ASSERT_OK(sw_buffer_free(keep[i]));
    }
}

TEST(stale_event_handles)
{
    sw_device *dev = test_device();
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    sw_event *stale = NULL;
    ASSERT_OK(sw_queue_record_event(q, &stale));
    ASSERT_OK(sw_event_release(stale));
    /* Many more events than any quarantine, some of them held. */
    enum { N = 5000, HELD = 300 };
    sw_event *held[HELD];
    for (int i = 0; i < N; i++) {
        sw_event *ev = NULL;
        ASSERT_OK(sw_queue_record_event(q, &ev));
        ASSERT_TRUE(ev != stale);
        if (i >= N - HELD)
            held[i - (N - HELD)] = ev;
        else
            ASSERT_OK(sw_event_release(ev));
    }
    int done = 7;
    ASSERT_ERR(sw_event_query(stale, &done), SW_ERR_INVALID_HANDLE);
    ASSERT_EQ(done, 0);
    ASSERT_ERR(sw_event_wait(stale), SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_event_retain(stale), SW_ERR_INVALID_HANDLE);
    /* The second release of a stale handle releases nobody's event. */
    for (int i = 0; i < 3; i++)
        ASSERT_ERR(sw_event_release(stale), SW_ERR_INVALID_HANDLE);
    for (int i = 0; i < HELD; i++) {
        ASSERT_OK(sw_event_wait(held[i]));
        ASSERT_OK(sw_event_query(held[i], &done));
        ASSERT_EQ(done, 1);
        ASSERT_OK(sw_event_release(held[i]));
        ASSERT_ERR(sw_event_release(held[i]), SW_ERR_INVALID_HANDLE);
    }
    ASSERT_OK(sw_queue_release(q));
    ASSERT_OK(sw_device_synchronize(dev));
}

TEST(stale_queue_scope_lease_handles)
{
    sw_device *dev = test_device();
    sw_buffer *b = test_alloc(dev, 4096, "leased");
    test_write_pattern(b, 9);

    sw_queue *sq = NULL;
    ASSERT_OK(sw_queue_create(dev, &sq));
    ASSERT_OK(sw_queue_release(sq));
    sw_peak_scope *ss = NULL;
    ASSERT_OK(sw_peak_scope_begin(dev, &ss));
    ASSERT_OK(sw_peak_scope_end(ss, NULL));
    sw_devmem ptr;
    sw_lease *sl = NULL;
    ASSERT_OK(sw_buffer_expose(b, &ptr, &sl));
    ASSERT_OK(sw_lease_release(sl));

    enum { N = 400 };
    sw_queue *q[4];
    sw_peak_scope *s[4];
    sw_lease *l[4];
    for (int i = 0; i < N; i++) {
        sw_queue *tq;
        ASSERT_OK(sw_queue_create(dev, &tq));
        ASSERT_OK(sw_queue_release(tq));
        sw_peak_scope *ts;
        ASSERT_OK(sw_peak_scope_begin(dev, &ts));
        ASSERT_OK(sw_peak_scope_end(ts, NULL));
        sw_lease *tl;
        ASSERT_OK(sw_buffer_expose(b, &ptr, &tl));
        ASSERT_OK(sw_lease_release(tl));
        if (i % 64 == 0)
            ASSERT_OK(sw_device_synchronize(dev)); /* reap dead queues */
    }
    for (int i = 0; i < 4; i++) {
        ASSERT_OK(sw_queue_create(dev, &q[i]));
        ASSERT_OK(sw_peak_scope_begin(dev, &s[i]));
        ASSERT_OK(sw_buffer_expose(b, &ptr, &l[i]));
    }
    sw_device *d = NULL;
    ASSERT_ERR(sw_queue_device(sq, &d), SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_queue_retain(sq), SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_queue_release(sq), SW_ERR_INVALID_HANDLE);
    sw_event *ev = NULL;
    ASSERT_ERR(sw_queue_record_event(sq, &ev), SW_ERR_INVALID_HANDLE);
    ASSERT_NULL(ev);
    ASSERT_ERR(sw_queue_synchronize(sq), SW_ERR_INVALID_HANDLE);
    uint64_t peak = 5;
    ASSERT_ERR(sw_peak_scope_peak(ss, &peak), SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_peak_scope_end(ss, &peak), SW_ERR_INVALID_HANDLE);
    ASSERT_UEQ(peak, 0);
    ASSERT_ERR(sw_lease_release(sl), SW_ERR_INVALID_HANDLE);
    /* The live ones are untouched by all that. */
    for (int i = 0; i < 4; i++) {
        ASSERT_OK(sw_queue_device(q[i], &d));
        ASSERT_PTR_EQ(d, dev);
        ASSERT_OK(sw_queue_release(q[i]));
        ASSERT_OK(sw_peak_scope_end(s[i], NULL));
        ASSERT_OK(sw_lease_release(l[i]));
    }
    test_expect_pattern(b, 9);
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_device_synchronize(dev));
}

/* A handle of one type passed as another is refused without anything
 * being read through it. */
TEST(handles_of_another_type)
{
    sw_device *dev = test_device();
    sw_buffer *b = test_alloc(dev, 64, "typed");
    test_write_pattern(b, 3);
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    sw_event *ev = NULL;
    ASSERT_OK(sw_queue_record_event(q, &ev));
    sw_peak_scope *s = NULL;
    ASSERT_OK(sw_peak_scope_begin(dev, &s));
    sw_devmem ptr;
    sw_lease *l = NULL;
    ASSERT_OK(sw_buffer_expose(b, &ptr, &l));

    expect_buffer_rejected(dev, (sw_buffer *)q, b);
    expect_buffer_rejected(dev, (sw_buffer *)ev, b);
    expect_buffer_rejected(dev, (sw_buffer *)s, b);
    expect_buffer_rejected(dev, (sw_buffer *)l, b);
    ASSERT_ERR(sw_event_release((sw_event *)b), SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_event_release((sw_event *)q), SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_queue_release((sw_queue *)ev), SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_queue_release((sw_queue *)b), SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_lease_release((sw_lease *)b), SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_peak_scope_end((sw_peak_scope *)l, NULL),
               SW_ERR_INVALID_HANDLE);
    /* Handles posing as devices: checked by address, never read. */
    sw_memory_info info;
    ASSERT_ERR(sw_memory_info_get((sw_device *)b, &info),
               SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_memory_info_get((sw_device *)q, &info),
               SW_ERR_INVALID_HANDLE);
    ASSERT_ERR(sw_device_close((sw_device *)ev), SW_ERR_INVALID_HANDLE);
    ASSERT_STR_EQ(sw_device_name((sw_device *)s), "(invalid device)");

    ASSERT_OK(sw_lease_release(l));
    ASSERT_OK(sw_peak_scope_end(s, NULL));
    ASSERT_OK(sw_event_release(ev));
    ASSERT_OK(sw_queue_release(q));
    test_expect_pattern(b, 3);
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_device_synchronize(dev));
}

TEST(dtype_size)
{
    ASSERT_EQ(sw_dtype_size(SW_FLOAT32), 4);
    ASSERT_EQ(sw_dtype_size(SW_FLOAT64), 8);
    ASSERT_EQ(sw_dtype_size(SW_INT32), 4);
    ASSERT_EQ(sw_dtype_size(SW_INT64), 8);
    ASSERT_EQ(sw_dtype_size((sw_dtype)SW_DTYPE_COUNT), 0);
    ASSERT_EQ(sw_dtype_size((sw_dtype)-1), 0);
    ASSERT_EQ(sw_dtype_size((sw_dtype)1000), 0);
}

/* ------------------------------------------------------------------------ */

TEST(parse_size)
{
    struct {
        const char *s;
        uint64_t v;
    } ok[] = {
        {"0", 0},
        {"4096", 4096},
        {"4096B", 4096},
        {"512K", 512u << 10},
        {"512k", 512u << 10},
        {"512M", UINT64_C(512) << 20},
        {"512MiB", UINT64_C(512) << 20},
        {"64mb", UINT64_C(64) << 20},
        {" 2 GiB ", UINT64_C(2) << 30},
        {"1.5G", UINT64_C(3) << 29},
        {"0.5K", 512},
        {"1T", UINT64_C(1) << 40},
        {"1P", UINT64_C(1) << 50},
        {"15P", UINT64_C(15) << 50},
        {"18446744073709551615", UINT64_MAX},
        {"3.000", 3},
        {"2.0M", UINT64_C(2) << 20},
        /* 2^-20 M, 2^14 K - 2^-10 K: fractions longer than 13 digits */
        {"0.00000095367431640625M", 1},
        {"16383.9990234375K", (UINT64_C(16) << 20) - 1},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t v = 1;
        ASSERT_OK(sw_parse_size(ok[i].s, &v));
        ASSERT_UEQ(v, ok[i].v);
    }
    const char *bad[] = {"",        " ",      "-1",   "+1",  "M",
                         "1X",      "1.",     ".5M",  "1KK", "1 2",
                         "16384P",  "18446744073709551616", "1e9",
                         "0x10",    "1MiBs",
                         /* not whole bytes */
                         "0.5",     "1.5",    "1.5B", "0.3K", "0.05K",
                         "0.000000953674316406251M"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 7;
        ASSERT_ERR(sw_parse_size(bad[i], &v), SW_ERR_INVALID_ARG);
        ASSERT_UEQ(v, 0);
        /* The message quotes what it could not read. */
        ASSERT_NOT_NULL(strstr(sw_last_error(), bad[i]));
    }
    uint64_t v;
    ASSERT_ERR(sw_parse_size(NULL, &v), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_parse_size("1M", NULL), SW_ERR_INVALID_ARG);
}

TEST(format_bytes)
{
    char buf[32];
    ASSERT_STR_EQ(sw_format_bytes(0, buf, sizeof buf), "0 B");
    ASSERT_STR_EQ(sw_format_bytes(1023, buf, sizeof buf), "1023 B");
    ASSERT_STR_EQ(sw_format_bytes(1024, buf, sizeof buf), "1.00 KiB");
    ASSERT_STR_EQ(sw_format_bytes(3u << 19, buf, sizeof buf), "1.50 MiB");
    /* 1023.999 KiB rounds up to the next unit, not to "1024.00 KiB". */
    ASSERT_STR_EQ(sw_format_bytes((UINT64_C(1) << 20) - 1, buf, sizeof buf),
                  "1.00 MiB");
    ASSERT_STR_EQ(sw_format_bytes(UINT64_MAX, buf, sizeof buf), "16.00 EiB");
    /* Truncated, still terminated. */
    char small[4];
    ASSERT_STR_EQ(sw_format_bytes(1u << 20, small, sizeof small), "1.0");
    ASSERT_STR_EQ(sw_format_bytes(1, NULL, 0), "");
}

TEST(dtype_table)
{
    static const struct {
        sw_dtype d;
        const char *name;
        size_t size;
        sw_dtype_kind kind;
    } want[] = {
        {SW_FLOAT32, "float32", 4, SW_KIND_FLOAT},
        {SW_FLOAT64, "float64", 8, SW_KIND_FLOAT},
        {SW_INT32, "int32", 4, SW_KIND_INT},
        {SW_INT64, "int64", 8, SW_KIND_INT},
        {SW_BOOL, "bool", 1, SW_KIND_BOOL},
        {SW_INT8, "int8", 1, SW_KIND_INT},
        {SW_INT16, "int16", 2, SW_KIND_INT},
        {SW_UINT8, "uint8", 1, SW_KIND_UINT},
        {SW_UINT16, "uint16", 2, SW_KIND_UINT},
        {SW_UINT32, "uint32", 4, SW_KIND_UINT},
        {SW_UINT64, "uint64", 8, SW_KIND_UINT},
        {SW_FLOAT16, "float16", 2, SW_KIND_FLOAT},
        {SW_BFLOAT16, "bfloat16", 2, SW_KIND_FLOAT},
        {SW_COMPLEX64, "complex64", 8, SW_KIND_COMPLEX},
        {SW_COMPLEX128, "complex128", 16, SW_KIND_COMPLEX},
    };
    ASSERT_EQ(sizeof want / sizeof want[0], SW_DTYPE_COUNT);
    for (size_t i = 0; i < SW_DTYPE_COUNT; i++) {
        ASSERT_EQ((int)want[i].d, (int)i);
        ASSERT_STR_EQ(sw_dtype_name(want[i].d), want[i].name);
        ASSERT_EQ(sw_dtype_size(want[i].d), want[i].size);
        sw_dtype_kind k;
        ASSERT_OK(sw_dtype_kind_get(want[i].d, &k));
        ASSERT_EQ(k, want[i].kind);
        sw_dtype back;
        ASSERT_OK(sw_dtype_from_name(want[i].name, &back));
        ASSERT_EQ(back, want[i].d);
    }
    sw_dtype d;
    ASSERT_ERR(sw_dtype_from_name("float8", &d), SW_ERR_DTYPE);
    ASSERT_ERR(sw_dtype_from_name("", &d), SW_ERR_DTYPE);
    ASSERT_ERR(sw_dtype_from_name(NULL, &d), SW_ERR_INVALID_ARG);
    sw_dtype_kind k;
    ASSERT_ERR(sw_dtype_kind_get((sw_dtype)SW_DTYPE_COUNT, &k), SW_ERR_DTYPE);
    ASSERT_NULL(sw_dtype_name((sw_dtype)-1));
    /* A sum of complex128 fits a scalar. */
    ASSERT_GE(sizeof(sw_scalar), 16);
}
