/*
 * test-disk.c -- the host budget and the disk tier (disk.c): spilled
 * copies past the budget go to the spill file and come back bit-identical
 * (restored, read from the host, written from the host); faults at every
 * N, a full disk and a missing directory leave every buffer intact and say
 * why; threads spill through the disk at once with every result checked.
 * Each test runs in its own process (main.c), with its own spill
 * directory.
 */
#include "test.h"
#include "tests.h"

#include "core/internal.h"
#include "core/diskio.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define DB (1u << 20)
#define DN 8

/* A fresh spill directory for this test's process. */
static void spill_dir(char *out, size_t len)
{
    const char *base = getenv("TMPDIR");
    snprintf(out, len, "%s/spillway-disk-XXXXXX",
             base != NULL && base[0] ? base : "/tmp");
    if (mkdtemp(out) == NULL)
        FAIL("mkdtemp: %s", strerror(errno));
    ASSERT_EQ(setenv("SPILLWAY_SPILL_DIR", out, 1), 0);
}

static uint64_t host_held(const sw_memory_info *m)
{
    return m->spilled - m->spilled_disk + m->host_copies + m->host_pool;
}

static sw_buffer_state dstate(sw_buffer *b)
{
    sw_buffer_state st;
    ASSERT_OK(sw_buffer_state_get(b, &st));
    return st;
}

/* DN patterned buffers of DB bytes under a device budget of two of them
 * and a host budget of `host` bytes: most spill, most of that to disk. */
static void fill_set(sw_device *dev, sw_buffer **b, uint64_t host)
{
    ASSERT_OK(sw_set_host_budget(dev, host));
    ASSERT_OK(sw_set_memory_budget(dev, 2 * test_round(DB)));
    for (int i = 0; i < DN; i++) {
        b[i] = test_alloc(dev, DB, "disk set");
        test_write_pattern(b[i], 40 + (uint32_t)i);
    }
}

TEST(disk_spills_past_the_host_budget)
{
    test_require_spill();
    char dir[256];
    spill_dir(dir, sizeof dir);
    sw_device *dev = test_device();
    sw_buffer *b[DN];
    ASSERT_OK(sw_trace_start(dev, NULL));
    fill_set(dev, b, 2 * DB);
    /* Met once the copies in flight have landed. */
    ASSERT_OK(sw_set_host_budget(dev, 2 * DB));
    sw_memory_info m = test_info(dev);
    ASSERT_UEQ(m.host_budget, 2 * DB);
    ASSERT_TRUE(host_held(&m) <= 2 * DB);
    ASSERT_TRUE(m.spilled_disk >= 4 * (uint64_t)DB);
    ASSERT_TRUE(m.disk_write_bytes >= 4 * (uint64_t)DB);
    ASSERT_TRUE(m.spilled_disk <= m.spilled);
    /* The snapshot says which are on disk: as many bytes as spilled_disk. */
    sw_buffer_info info[DN + 4];
    size_t nb = 0;
    ASSERT_OK(sw_memory_snapshot(dev, info, DN + 4, &nb));
    uint64_t disk_bytes = 0;
    for (size_t i = 0; i < nb; i++) {
        if (info[i].on_disk)
            ASSERT_EQ(info[i].state, SW_SPILLED);
        disk_bytes += info[i].on_disk ? info[i].alloc_size : 0;
    }
    ASSERT_UEQ(disk_bytes, m.spilled_disk);
    /* Read from the host: straight from the file where it is there. */
    for (int i = 0; i < DN; i++)
        test_expect_pattern(b[i], 40 + (uint32_t)i);
    ASSERT_TRUE(test_info(dev).disk_read_bytes >= 4 * (uint64_t)DB);
    /* Written from the host: brought back to host memory first. */
    int on_disk = -1;
    for (int i = 0; i < DN && on_disk < 0; i++)
        if (dstate(b[i]) == SW_SPILLED)
            on_disk = i;
    ASSERT_TRUE(on_disk >= 0);
    test_write_pattern(b[on_disk], 77);
    /* Restored through kernels: every one comes back bit-identical. */
    for (int i = 0; i < DN; i++) {
        sw_scalar s;
        ASSERT_OK(sw_op_sum(b[i], SW_INT32, DB / 4, &s));
        test_expect_pattern(b[i], i == on_disk ? 77 : 40 + (uint32_t)i);
    }
    m = test_info(dev);
    ASSERT_TRUE(host_held(&m) <= 2 * DB + DB); /* a copy may be in flight */
    /* The history saw both ways, with the totals. */
    ASSERT_OK(sw_trace_stop(dev));
    static sw_trace_event ev[65536];
    size_t count = 0;
    ASSERT_OK(sw_trace_read(dev, ev, 65536, &count, NULL));
    int writes = 0, reads = 0;
    for (size_t i = 0; i < count; i++) {
        writes += ev[i].kind == SW_TRACE_DISK_WRITE;
        reads += ev[i].kind == SW_TRACE_DISK_READ;
        if (ev[i].kind == SW_TRACE_DISK_WRITE)
            ASSERT_TRUE(ev[i].spilled_disk >= test_round(DB));
    }
    ASSERT_TRUE(writes >= 4 && reads >= 1);
    ASSERT_STR_EQ(sw_trace_kind_name(SW_TRACE_DISK_WRITE), "disk_write");
    for (int i = 0; i < DN; i++)
        ASSERT_OK(sw_buffer_free(b[i]));
    m = test_info(dev);
    ASSERT_UEQ(m.spilled_disk, 0);
    ASSERT_UEQ(m.spilled, 0);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    ASSERT_OK(sw_set_host_budget(dev, 0));
    ASSERT_EQ(rmdir(dir), 0); /* nothing was left in it */
}

/* Internal: the block a read back from disk lands in is the pool's, not
 * fresh memory (a page fault per page): taken before the room is made, so
 * that trimming the pool to the budget cannot free it, and taken as soon
 * as one arrives while room is made (here the pool is over the budget:
 * one of its two blocks is trimmed, the other handed over). */
TEST(disk_read_takes_a_pool_block)
{
    test_require_spill();
    char dir[256];
    spill_dir(dir, sizeof dir);
    sw_device *dev = test_device();
    ASSERT_OK(sw_set_host_budget(dev, DB));
    sw__lock(dev);
    void *blk[2];
    size_t got[2];
    bool pinned[2];
    for (int i = 0; i < 2; i++)
        ASSERT_NOT_NULL(blk[i] = sw__host_get_locked(dev, DB, &got[i],
                                                     &pinned[i]));
    for (int i = 0; i < 2; i++)
        sw__host_put_locked(dev, blk[i], got[i], pinned[i]);
    ASSERT_UEQ(dev->hpool.bytes, 2 * (uint64_t)DB); /* over the budget */
    void *p = NULL;
    size_t pgot = 0;
    bool ppinned = false;
    int rc = sw__host_room_block_locked(dev, DB, DB, &p, &pgot, &ppinned);
    uint64_t left = dev->hpool.bytes;
    sw__unlock(dev);
    ASSERT_OK(rc);
    ASSERT_TRUE(p == blk[0] || p == blk[1]);
    ASSERT_UEQ(pgot, DB);
    ASSERT_UEQ(left, 0); /* the other trimmed: held + need = the budget */
    /* A pool block of a quarter of the size asked for does not fit: none
     * is taken (the caller allocates), and it is trimmed for the room. */
    sw__lock(dev);
    sw__host_put_locked(dev, p, pgot, ppinned);
    void *q = NULL;
    rc = sw__host_room_block_locked(dev, 4 * DB, 4 * DB, &q, &pgot,
                                    &ppinned);
    left = dev->hpool.bytes;
    sw__unlock(dev);
    ASSERT_OK(rc);
    ASSERT_TRUE(q == NULL);
    ASSERT_UEQ(left, 0);
    ASSERT_OK(sw_release_host_pool(dev));
    ASSERT_OK(sw_set_host_budget(dev, 0));
    ASSERT_EQ(rmdir(dir), 0);
}

/* Internal: the I/O engine (diskio.c) on its own.  Transfers of sizes
 * that are not whole pieces, in one call, come back bit-identical; each
 * says its own error (a closed descriptor); threads calling at once share
 * the I/O threads, every result checked (thread_dio_engine under TSan). */
static int dio_file(void)
{
    const char *base = getenv("TMPDIR");
    char path[512];
    snprintf(path, sizeof path, "%s/spillway-dio-XXXXXX",
             base != NULL && base[0] ? base : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0)
        FAIL("mkstemp: %s", strerror(errno));
    unlink(path);
    return fd;
}

/* Write, then read back into zeroed memory, n transfers of sizes[i]
 * bytes with patterns seed + i, at consecutive offsets of fd. */
static void dio_roundtrip(int fd, const size_t *sizes, size_t n,
                          uint32_t seed)
{
    sw__dio d[8];
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        void *p = malloc(sizes[i]);
        ASSERT_NOT_NULL(p);
        test_pattern(p, sizes[i], seed + (uint32_t)i);
        d[i] = (sw__dio){true, fd, p, sizes[i], off, -1};
        off += sizes[i];
    }
    sw__dio_run(d, n);
    for (size_t i = 0; i < n; i++) {
        ASSERT_EQ(d[i].err, 0);
        memset(d[i].p, 0, sizes[i]);
        d[i].write = false;
    }
    sw__dio_run(d, n);
    for (size_t i = 0; i < n; i++) {
        ASSERT_EQ(d[i].err, 0);
        size_t bad = test_pattern_check(d[i].p, sizes[i], seed + (uint32_t)i);
        if (bad != (size_t)-1)
            FAIL("transfer %zu of %zu bytes differs at byte %zu", i,
                 sizes[i], bad);
        free(d[i].p);
    }
}

TEST(disk_io_engine)
{
    int fd = dio_file();
    const size_t sizes[5] = {(3u << 20) + 123, 1, 4096, (1u << 20) - 1,
                             (2u << 20) + 4097};
    dio_roundtrip(fd, sizes, 5, 11);
    /* A read past the end is EIO; a closed descriptor EBADF, for that
     * transfer alone. */
    char buf[64], big[(1u << 20) + 64];
    sw__dio d[3] = {{false, fd, buf, sizeof buf, (uint64_t)1 << 40, 0},
                    {false, 9999, big, sizeof big, 0, 0},
                    {false, fd, buf, sizeof buf, 0, 0}};
    sw__dio_run(d, 3);
    ASSERT_EQ(d[0].err, EIO);
    ASSERT_EQ(d[1].err, EBADF);
    ASSERT_EQ(d[2].err, 0);
    ASSERT_TRUE(sw__dio_threads() >= 0);
    close(fd);
}

typedef struct {
    int fd;
    uint32_t seed;
} dio_arg;

static void *dio_thread(void *p)
{
    dio_arg *a = p;
    for (int r = 0; r < 20; r++) {
        const size_t sizes[3] = {(2u << 20) + 17 * (size_t)r, 777,
                                 (1u << 20) + 1};
        dio_roundtrip(a->fd, sizes, 3, a->seed + 100 * (uint32_t)r);
    }
    return NULL;
}

TEST(thread_dio_engine)
{
    enum { NT = 4 };
    pthread_t t[NT];
    dio_arg a[NT];
    for (int i = 0; i < NT; i++) {
        a[i] = (dio_arg){dio_file(), 1000 * (uint32_t)i};
        ASSERT_EQ(pthread_create(&t[i], NULL, dio_thread, &a[i]), 0);
    }
    for (int i = 0; i < NT; i++) {
        ASSERT_EQ(pthread_join(t[i], NULL), 0);
        close(a[i].fd);
    }
}

/* A host budget below what is spilled at once, set after the spills. */
TEST(disk_budget_lowered_under_spilled_data)
{
    test_require_spill();
    char dir[256];
    spill_dir(dir, sizeof dir);
    sw_device *dev = test_device();
    sw_buffer *b[DN];
    fill_set(dev, b, 0);
    sw_memory_info m = test_info(dev);
    ASSERT_UEQ(m.spilled_disk, 0);
    ASSERT_OK(sw_set_host_budget(dev, DB / 2)); /* less than one buffer */
    m = test_info(dev);
    ASSERT_TRUE(host_held(&m) <= DB / 2);
    ASSERT_UEQ(m.spilled_disk, m.spilled);
    for (int i = 0; i < DN; i++)
        test_expect_pattern(b[i], 40 + (uint32_t)i);
    /* Bad input. */
    ASSERT_ERR(sw_set_host_budget(NULL, 1), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_get_host_budget(dev, NULL), SW_ERR_INVALID_ARG);
    uint64_t hb = 0;
    ASSERT_OK(sw_get_host_budget(dev, &hb));
    ASSERT_UEQ(hb, DB / 2);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    ASSERT_OK(sw_set_host_budget(dev, 0));
    for (int i = 0; i < DN; i++)
        ASSERT_OK(sw_buffer_free(b[i]));
    (void)rmdir(dir);
}

/* Disk faults at every N: each call either works or fails saying why,
 * and every buffer ends bit-identical. */
TEST(disk_faults_at_every_n)
{
    test_require_spill();
    char dir[256];
    spill_dir(dir, sizeof dir);
    sw_device *dev = test_device();
    int failures = 0;
    for (uint64_t nth = 1; nth <= 12; nth++) {
        sw_buffer *b[DN];
        fill_set(dev, b, 0);
        ASSERT_OK(sw_inject_fault(dev, SW_FAULT_DISK, nth, 0));
        int rc = sw_set_host_budget(dev, DB); /* the budget stands */
        ASSERT_EQ(rc, SW_OK);
        for (int i = 0; i < DN; i++) {
            uint32_t word;
            rc = sw_buffer_read(b[i], 0, &word, sizeof word);
            sw_scalar s;
            if (rc == SW_OK)
                rc = sw_op_sum(b[i], SW_INT32, DB / 4, &s);
            if (rc != SW_OK) {
                failures++;
                ASSERT_EQ(rc, SW_ERR_HOST_OOM);
                ASSERT_TRUE(strstr(sw_last_error(), "injected") != NULL);
            }
        }
        ASSERT_OK(sw_inject_fault(dev, SW_FAULT_DISK, 0, 0));
        for (int i = 0; i < DN; i++)
            test_expect_pattern(b[i], 40 + (uint32_t)i);
        ASSERT_OK(sw_set_memory_budget(dev, 0));
        ASSERT_OK(sw_set_host_budget(dev, 0));
        for (int i = 0; i < DN; i++)
            ASSERT_OK(sw_buffer_free(b[i]));
    }
    ASSERT_TRUE(failures > 0); /* the faults were met */
    (void)rmdir(dir);
}

/* The directory: missing when the file is first needed (the spill fails,
 * saying where), removed after (nothing changes: the file is unlinked). */
TEST(disk_directory_missing_or_removed)
{
    test_require_spill();
    char dir[256];
    spill_dir(dir, sizeof dir);
    ASSERT_EQ(rmdir(dir), 0);
    sw_device *dev = test_device();
    ASSERT_OK(sw_set_host_budget(dev, DB));
    ASSERT_OK(sw_set_memory_budget(dev, 2 * test_round(DB)));
    sw_buffer *b[4];
    int refused = -1;
    for (int i = 0; i < 4; i++) {
        sw_buffer *x = NULL;
        int rc = sw_buffer_alloc(dev, DB, "disk dir", &x);
        if (rc != SW_OK) {
            ASSERT_EQ(rc, SW_ERR_HOST_OOM);
            ASSERT_TRUE(strstr(sw_last_error(), dir) != NULL);
            ASSERT_TRUE(strstr(sw_last_error(), "No such file") != NULL);
            refused = i;
            break;
        }
        b[i] = x;
        test_write_pattern(b[i], 60 + (uint32_t)i);
    }
    ASSERT_TRUE(refused > 0);
    for (int i = 0; i < refused; i++)
        test_expect_pattern(b[i], 60 + (uint32_t)i);
    /* Made again: the spills go through. */
    ASSERT_EQ(mkdir(dir, 0700), 0);
    for (int i = refused; i < 4; i++) {
        b[i] = test_alloc(dev, DB, "disk dir");
        test_write_pattern(b[i], 60 + (uint32_t)i);
    }
    ASSERT_OK(sw_set_host_budget(dev, DB));
    ASSERT_TRUE(test_info(dev).spilled_disk > 0);
    /* Removed under the process: the unlinked file lives on. */
    ASSERT_EQ(rmdir(dir), 0);
    sw_buffer *more = test_alloc(dev, DB, "after rmdir");
    test_write_pattern(more, 70);
    ASSERT_OK(sw_set_host_budget(dev, DB / 2));
    for (int i = 0; i < 4; i++)
        test_expect_pattern(b[i], 60 + (uint32_t)i);
    test_expect_pattern(more, 70);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    ASSERT_OK(sw_set_host_budget(dev, 0));
    for (int i = 0; i < 4; i++)
        ASSERT_OK(sw_buffer_free(b[i]));
    ASSERT_OK(sw_buffer_free(more));
}

/* Garbage a pressure callback frees: the buffers of `held`, all at once. */
typedef struct {
    sw_buffer **held;
    int n, calls;
} garbage;

static int free_garbage(sw_device *dev, sw_pressure *p, size_t bytes,
                        void *user)
{
    (void)dev;
    (void)bytes;
    garbage *g = user;
    g->calls++;
    if (g->n == 0)
        return 0;
    sw_pressure_unlock(p);
    for (int i = 0; i < g->n; i++)
        (void)sw_buffer_free(g->held[i]);
    g->n = 0;
    sw_pressure_relock(p);
    return 1;
}

/* Every tier full -- the device budget, the host budget, and a spill
 * directory that cannot be written -- with garbage holding them: the
 * spill that fails for the host runs the pressure callbacks before its
 * error stands, and the allocation succeeds once they free it (it failed
 * with SW_ERR_HOST_OOM and no callback called). */
TEST(disk_full_tiers_run_the_pressure_callbacks)
{
    test_require_spill();
    char dir[256];
    spill_dir(dir, sizeof dir);
    ASSERT_EQ(rmdir(dir), 0);
    sw_device *dev = test_device();
    ASSERT_OK(sw_set_host_budget(dev, DB));
    ASSERT_OK(sw_set_memory_budget(dev, 2 * test_round(DB)));
    sw_buffer *held[3];
    for (int i = 0; i < 3; i++) {
        held[i] = test_alloc(dev, DB, "garbage");
        test_write_pattern(held[i], 80 + (uint32_t)i);
    }
    /* Device and host full: one more cannot spill anything. */
    sw_buffer *x = NULL;
    ASSERT_ERR(sw_buffer_alloc(dev, DB, "refused", &x), SW_ERR_HOST_OOM);
    ASSERT_TRUE(strstr(sw_last_error(), dir) != NULL);
    garbage g = {held, 3, 0};
    int id = -1;
    ASSERT_OK(sw_add_pressure_callback(dev, free_garbage, &g, &id));
    sw_buffer *a = test_alloc(dev, DB, "after collection");
    sw_buffer *b = test_alloc(dev, DB, "after collection");
    ASSERT_EQ(g.n, 0);
    ASSERT_TRUE(g.calls >= 1);
    test_write_pattern(a, 90);
    test_write_pattern(b, 91);
    test_expect_pattern(a, 90);
    test_expect_pattern(b, 91);
    /* Nothing left to free: both calls, then the tiers' own error. */
    int calls = g.calls;
    sw_buffer *c = NULL, *d = NULL;
    ASSERT_OK(sw_buffer_alloc(dev, DB, "host tier", &c)); /* a spills */
    ASSERT_ERR(sw_buffer_alloc(dev, DB, "refused", &d), SW_ERR_HOST_OOM);
    ASSERT_TRUE(strstr(sw_last_error(), dir) != NULL);
    ASSERT_EQ(g.calls, calls + 2);
    test_expect_pattern(a, 90);
    ASSERT_OK(sw_remove_pressure_callback(dev, id));
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    ASSERT_OK(sw_set_host_budget(dev, 0));
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_buffer_free(c));
}

/* A full disk: a file size limit (RLIMIT_FSIZE, EFBIG; what a small
 * filesystem's ENOSPC does to the same writes), in a child of its own. */
static int full_disk_child(void *arg)
{
    (void)arg;
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {.rlim_cur = 3 * DB / 2, .rlim_max = 3 * DB / 2};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
        return 10;
    sw_device *dev = NULL;
    if (sw_device_open(test_device_spec(), &dev) != SW_OK)
        return 11;
    sw_set_host_budget(dev, DB);
    sw_set_memory_budget(dev, 2 * test_round(DB));
    sw_buffer *b[6] = {0};
    uint32_t *v = malloc(DB);
    int refused = 0;
    for (int i = 0; i < 6; i++) {
        if (sw_buffer_alloc(dev, DB, "full", &b[i]) != SW_OK) {
            if (strstr(sw_last_error(), "too large") == NULL &&
                strstr(sw_last_error(), "space") == NULL)
                return 12;
            refused++;
            b[i] = NULL;
            continue;
        }
        for (size_t k = 0; k < DB / 4; k++)
            v[k] = (uint32_t)(i * 1000003u + k);
        if (sw_buffer_write(b[i], 0, v, DB) != SW_OK)
            return 13;
    }
    if (refused == 0)
        return 14; /* the limit was never met */
    for (int i = 0; i < 6; i++) {
        if (b[i] == NULL)
            continue;
        if (sw_buffer_read(b[i], 0, v, DB) != SW_OK)
            return 15;
        for (size_t k = 0; k < DB / 4; k++)
            if (v[k] != (uint32_t)(i * 1000003u + k))
                return 16;
    }
    sw_set_memory_budget(dev, 0);
    sw_set_host_budget(dev, 0);
    for (int i = 0; i < 6; i++)
        sw_buffer_free(b[i]);
    free(v);
    return sw_device_close(dev) == SW_OK ? 0 : 17;
}

TEST(disk_full)
{
    test_require_spill();
    char dir[256];
    spill_dir(dir, sizeof dir);
    char err[2048];
    int st = test_fork_run(full_disk_child, NULL, err, sizeof err);
    (void)rmdir(dir);
    if (st != 0)
        FAIL("the child ended with status %d: %s", st, err);
}

/* Threads fill, read and sum their own buffers under both budgets (a
 * quarter of the buffers on the device, one in host memory): every
 * spill goes through the disk, and every result is checked. */
#define TD_THREADS 4
#define TD_PER 3
#define TD_N (64u << 10) /* uint32 elements: 256 KiB */

typedef struct {
    sw_device *dev;
    int id;
    sw_buffer *b[TD_PER]; /* left to the main thread, with their values */
    uint32_t val[TD_PER];
} td_arg;

static void *td_worker(void *p)
{
    td_arg *a = p;
    sw_buffer **b = a->b;
    uint32_t *val = a->val;
    for (int i = 0; i < TD_PER; i++) {
        b[i] = test_alloc(a->dev, TD_N * 4, "disk thread");
        val[i] = (uint32_t)(a->id * 10 + i);
        sw_scalar s = {.i = val[i]};
        ASSERT_OK(sw_op_fill(b[i], SW_INT32, TD_N, s));
    }
    uint64_t rng = 0x9E3779B97F4A7C15ull * (uint64_t)(a->id + 1);
    for (int it = 0; it < 60; it++) {
        int i = (int)(test_rand(&rng) % TD_PER);
        int what = (int)(test_rand(&rng) % 5);
        if (what == 3) {
            /* On disk: its read runs in the background meanwhile. */
            ASSERT_OK(sw_buffer_prefetch(b[i], NULL));
        } else if (what == 4) {
            /* Freed while its background read may run: released at its
             * end; a new one in its place. */
            ASSERT_OK(sw_buffer_prefetch(b[i], NULL));
            ASSERT_OK(sw_buffer_free(b[i]));
            b[i] = test_alloc(a->dev, TD_N * 4, "disk thread");
            val[i] = (uint32_t)(test_rand(&rng) % 1000);
            sw_scalar s = {.i = val[i]};
            ASSERT_OK(sw_op_fill(b[i], SW_INT32, TD_N, s));
        } else if (what == 0) {
            val[i] = (uint32_t)(test_rand(&rng) % 1000);
            sw_scalar s = {.i = val[i]};
            ASSERT_OK(sw_op_fill(b[i], SW_INT32, TD_N, s));
        } else if (what == 1) {
            uint32_t w[4];
            ASSERT_OK(sw_buffer_read(b[i], 4096, w, sizeof w));
            for (int k = 0; k < 4; k++)
                if (w[k] != val[i])
                    FAIL("thread %d buffer %d: %u, want %u", a->id, i, w[k],
                         val[i]);
        } else {
            sw_scalar s;
            ASSERT_OK(sw_op_sum(b[i], SW_INT32, TD_N, &s));
            ASSERT_EQ(s.i, (int64_t)val[i] * TD_N);
        }
    }
    return NULL;
}

TEST(thread_disk_tier)
{
    test_require_spill();
    char dir[256];
    spill_dir(dir, sizeof dir);
    /* Prefetches read in the background, whatever the device. */
    ASSERT_EQ(setenv("SPILLWAY_DISK_PREFETCH", "background", 1), 0);
    sw_device *dev = test_device();
    uint64_t one = test_round(TD_N * 4);
    /* Room for each thread's pinned buffer and one more: most of the 12
     * are spilled at any time. */
    ASSERT_OK(sw_set_memory_budget(dev, (TD_THREADS + 1) * one));
    ASSERT_OK(sw_set_host_budget(dev, one));
    pthread_t t[TD_THREADS];
    td_arg args[TD_THREADS];
    for (int i = 0; i < TD_THREADS; i++) {
        args[i] = (td_arg){.dev = dev, .id = i};
        args[i].dev = dev;
        ASSERT_EQ(pthread_create(&t[i], NULL, td_worker, &args[i]), 0);
    }
    for (int i = 0; i < TD_THREADS; i++)
        pthread_join(t[i], NULL);
    /* What is still in host memory past the budget goes now (copies that
     * were in flight when the threads' last spills returned, all landed
     * after the synchronize). */
    ASSERT_OK(sw_device_synchronize(dev));
    ASSERT_OK(sw_set_host_budget(dev, one));
    sw_memory_info m = test_info(dev);
    ASSERT_TRUE(m.spilled > 0 && m.disk_write_bytes > 0);
    if (m.spilled - m.spilled_disk + m.host_copies + m.host_pool > one)
        FAIL("host holds %llu past its budget of %llu: spilled %llu (on "
             "disk %llu), clean copies %llu, pool %llu",
             (unsigned long long)(m.spilled - m.spilled_disk +
                                  m.host_copies + m.host_pool),
             (unsigned long long)one, (unsigned long long)m.spilled,
             (unsigned long long)m.spilled_disk,
             (unsigned long long)m.host_copies,
             (unsigned long long)m.host_pool);
    for (int i = 0; i < TD_THREADS; i++)
        for (int k = 0; k < TD_PER; k++) {
            uint32_t w[4];
            ASSERT_OK(sw_buffer_read(args[i].b[k], 8192, w, sizeof w));
            for (int j = 0; j < 4; j++)
                ASSERT_UEQ(w[j], args[i].val[k]);
            ASSERT_OK(sw_buffer_free(args[i].b[k]));
        }
    ASSERT_UEQ(test_info(dev).spilled_disk, 0);
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    ASSERT_OK(sw_set_host_budget(dev, 0));
    (void)rmdir(dir);
}

/* A prefetch of a buffer in the spill file returns at once: its read runs
 * on the prefetch thread, which then queues its copy to the device; a use
 * meanwhile waits for it; a free meanwhile releases it at the end; a
 * failed read leaves it on disk, intact, for its next use to report; the
 * last close waits for the reads. */
static sw_buffer_state wait_resident(sw_buffer *b)
{
    sw_buffer_state st = SW_SPILLED;
    for (int i = 0; i < 5000 && st != SW_RESIDENT; i++) {
        st = dstate(b);
        if (st != SW_RESIDENT)
            usleep(1000);
    }
    return st;
}

static bool on_disk(sw_device *dev, sw_buffer *b)
{
    return test_buffer_info(dev, b).on_disk != 0;
}

TEST(disk_prefetch_in_background)
{
    test_require_spill();
    char dir[256];
    spill_dir(dir, sizeof dir);
    /* Opened here, not through test_device(): the test closes it. */
    sw_device *dev = NULL;
    ASSERT_OK(sw_device_open(test_device_spec(), &dev));
    sw_buffer *b[DN];
    fill_set(dev, b, 0);
    ASSERT_OK(sw_set_host_budget(dev, DB)); /* the copies landed: to disk */
    int k = -1;
    for (int i = 0; i < DN && k < 0; i++)
        if (on_disk(dev, b[i]))
            k = i;
    ASSERT_GE(k, 0);

    /* Inline (a device that computes on the host's CPUs, by default, or
     * SPILLWAY_DISK_PREFETCH=inline): read and queued before it returns. */
    ASSERT_EQ(setenv("SPILLWAY_DISK_PREFETCH",
                     dev->props.host_compute ? "" : "inline", 1), 0);
    ASSERT_OK(sw_buffer_prefetch(b[k], NULL));
    ASSERT_EQ(dstate(b[k]), SW_RESIDENT);
    ASSERT_UEQ(dev->bg_reads, 0);
    test_expect_pattern(b[k], 40 + (uint32_t)k);
    ASSERT_EQ(setenv("SPILLWAY_DISK_PREFETCH", "background", 1), 0);
    k = -1;
    for (int i = 0; i < DN && k < 0; i++)
        if (on_disk(dev, b[i]))
            k = i;
    ASSERT_GE(k, 0);
    uint64_t reads = test_info(dev).disk_read_bytes;
    ASSERT_OK(sw_trace_start(dev, NULL));

    /* It returns before the read: with the prefetch thread held, the read
     * is pending, the buffer still on disk.  Let go, and nothing else
     * asked, the buffer reaches the device by itself. */
    sw__disk_bg_pause(true);
    ASSERT_OK(sw_buffer_prefetch(b[k], NULL));
    sw__lock(dev);
    ASSERT_UEQ(dev->bg_reads, 1);
    sw__unlock(dev);
    ASSERT_EQ(dstate(b[k]), SW_SPILLED);
    sw__disk_bg_pause(false);
    ASSERT_EQ(wait_resident(b[k]), SW_RESIDENT);
    ASSERT_FALSE(on_disk(dev, b[k]));
    ASSERT_UGE(test_info(dev).disk_read_bytes, reads + DB);
    size_t n = 0;
    ASSERT_OK(sw_trace_read(dev, NULL, 0, &n, NULL));
    sw_trace_event *ev = calloc(n, sizeof *ev);
    ASSERT_NOT_NULL(ev);
    ASSERT_OK(sw_trace_read(dev, ev, n, &n, NULL));
    bool read = false, prefetch = false;
    for (size_t i = 0; i < n; i++) {
        read |= ev[i].kind == SW_TRACE_DISK_READ;
        prefetch |= ev[i].kind == SW_TRACE_PREFETCH && read;
    }
    free(ev);
    ASSERT_TRUE(read && prefetch);
    test_expect_pattern(b[k], 40 + (uint32_t)k);

    /* Used at once: the use waits for the read, then restores. */
    for (int i = 0; i < DN; i++) {
        if (!on_disk(dev, b[i]))
            continue;
        ASSERT_OK(sw_buffer_prefetch(b[i], NULL));
        sw_scalar s;
        ASSERT_OK(sw_op_sum(b[i], SW_INT32, DB / 4, &s));
        test_expect_pattern(b[i], 40 + (uint32_t)i);
    }

    /* A failed read: the prefetch still returns OK; the buffer stays on
     * disk, intact, and its next use meets the fault. */
    ASSERT_OK(sw_set_host_budget(dev, DB));
    k = -1;
    for (int i = 0; i < DN && k < 0; i++)
        if (on_disk(dev, b[i]))
            k = i;
    ASSERT_GE(k, 0);
    /* (No budget: the read needs no room made, which would write first.) */
    ASSERT_OK(sw_set_host_budget(dev, 0));
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_DISK, 1, 1));
    ASSERT_OK(sw_buffer_prefetch(b[k], NULL));
    sw_scalar s;
    ASSERT_ERR(sw_op_sum(b[k], SW_INT32, DB / 4, &s), SW_ERR_HOST_OOM);
    ASSERT_TRUE(strstr(sw_last_error(), "injected") != NULL);
    ASSERT_TRUE(on_disk(dev, b[k]));
    ASSERT_OK(sw_inject_fault(dev, SW_FAULT_DISK, 0, 0));
    test_expect_pattern(b[k], 40 + (uint32_t)k);

    /* Freed right after: released when its read ends, and the last close
     * waits for that (no BUSY, nothing left). */
    ASSERT_OK(sw_set_host_budget(dev, DB));
    for (int i = 0; i < DN; i++) {
        if (on_disk(dev, b[i]))
            ASSERT_OK(sw_buffer_prefetch(b[i], NULL));
        ASSERT_OK(sw_buffer_free(b[i]));
    }
    ASSERT_OK(sw_trace_stop(dev));
    ASSERT_OK(sw_device_close(dev));
    /* Closed for good: nothing was left on it. */
    ASSERT_ERR(sw_device_synchronize(dev), SW_ERR_INVALID_HANDLE);
    (void)rmdir(dir);
}
