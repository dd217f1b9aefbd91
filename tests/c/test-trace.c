/*
 * test-trace.c -- the memory history: every event kind in a recorded
 * workload, the totals replaying exactly, the ring's bound, dumps that
 * are valid JSON while other threads allocate, the callback, bad input.
 */
#include "test.h"
#include "tests.h"

#include "core/internal.h" /* whether the backend times copies */

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------
 * A small JSON validator (RFC 8259 grammar), enough to say a dump parses.
 * ---------------------------------------------------------------------- */

typedef struct {
    const char *p, *end;
    int depth;
} jparse;

static void jws(jparse *j)
{
    while (j->p < j->end &&
           (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t'))
        j->p++;
}

static int jvalue(jparse *j);

static int jstring(jparse *j)
{
    if (j->p >= j->end || *j->p != '"')
        return 0;
    for (j->p++; j->p < j->end; j->p++) {
        unsigned char c = (unsigned char)*j->p;
        if (c == '"') {
            j->p++;
            return 1;
        }
        if (c < 0x20)
            return 0;
        if (c == '\\') {
            j->p++;
            if (j->p >= j->end || !strchr("\"\\/bfnrtu", *j->p))
                return 0;
            if (*j->p == 'u') {
                for (int i = 0; i < 4; i++)
                    if (++j->p >= j->end || !strchr("0123456789abcdefABCDEF",
                                                    *j->p))
                        return 0;
            }
        }
    }
    return 0;
}

static int jnumber(jparse *j)
{
    const char *s = j->p;
    if (j->p < j->end && *j->p == '-')
        j->p++;
    if (j->p >= j->end || *j->p < '0' || *j->p > '9')
        return 0;
    while (j->p < j->end && strchr("0123456789.eE+-", *j->p))
        j->p++;
    return j->p > s;
}

static int jvalue(jparse *j)
{
    jws(j);
    if (j->p >= j->end || ++j->depth > 64)
        return 0;
    int ok = 0;
    char c = *j->p;
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        jws(j);
        if (j->p < j->end && *j->p == close) {
            j->p++;
            ok = 1;
        } else {
            for (;;) {
                if (c == '{') {
                    jws(j);
                    if (!jstring(j))
                        break;
                    jws(j);
                    if (j->p >= j->end || *j->p++ != ':')
                        break;
                }
                if (!jvalue(j))
                    break;
                jws(j);
                if (j->p < j->end && *j->p == ',') {
                    j->p++;
                    continue;
                }
                if (j->p < j->end && *j->p == close) {
                    j->p++;
                    ok = 1;
                }
                break;
            }
        }
    } else if (c == '"') {
        ok = jstring(j);
    } else if (!strncmp(j->p, "true", 4) || !strncmp(j->p, "null", 4)) {
        j->p += 4;
        ok = 1;
    } else if (!strncmp(j->p, "false", 5)) {
        j->p += 5;
        ok = 1;
    } else {
        ok = jnumber(j);
    }
    j->depth--;
    return ok;
}

static char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ASSERT_NOT_NULL(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)len + 1);
    ASSERT_NOT_NULL(s);
    ASSERT_EQ(fread(s, 1, (size_t)len, f), (size_t)len);
    s[len] = '\0';
    fclose(f);
    *n = (size_t)len;
    return s;
}

static void expect_valid_json(const char *path)
{
    size_t n;
    char *s = read_file(path, &n);
    jparse j = {s, s + n, 0};
    if (!jvalue(&j))
        FAIL("%s is not valid JSON near byte %zu: %.60s", path,
             (size_t)(j.p - s), j.p);
    jws(&j);
    ASSERT_TRUE(j.p == j.end);
    free(s);
}

static void tmp_path(char *buf, size_t len, const char *what)
{
    snprintf(buf, len, "/tmp/spillway-trace-%d-%s.json", (int)getpid(),
             what);
}

/* ------------------------------------------------------------------------
 * Replay
 * ---------------------------------------------------------------------- */

typedef struct {
    uint64_t in_use, cached, spilled, host_copies, spilled_disk;
} totals;

/* Apply one event's documented effect (docs/memory-history.md's table) to
 * t. */
static void apply(totals *t, const sw_trace_event *e)
{
    switch (e->kind) {
    case SW_TRACE_START:
        t->in_use = e->in_use;
        t->cached = e->cached;
        t->spilled = e->spilled;
        t->host_copies = e->host_copies;
        t->spilled_disk = e->spilled_disk;
        break;
    case SW_TRACE_ALLOC:
        t->in_use += e->size;
        break;
    case SW_TRACE_FREE:
        if (e->aux)
            t->spilled -= e->size;
        else
            t->in_use -= e->size;
        break;
    case SW_TRACE_CACHE_HIT:
    case SW_TRACE_CACHE_TRIM:
        t->cached -= e->size;
        break;
    case SW_TRACE_CACHE_PUT:
        t->cached += e->size;
        break;
    case SW_TRACE_SPILL_BEGIN:
        t->in_use -= e->size;
        t->spilled += e->size;
        if (e->aux == 3)
            t->host_copies -= e->size;
        if (e->aux == 4)
            t->spilled_disk += e->size;
        break;
    case SW_TRACE_RESTORE_BEGIN:
        t->spilled -= e->size;
        t->in_use += e->size;
        t->host_copies += e->size;
        break;
    case SW_TRACE_HOST_COPY_DROP:
        t->host_copies -= e->size;
        break;
    case SW_TRACE_DISK_WRITE:
        if (e->aux == 2)
            t->host_copies -= e->size;
        else
            t->spilled_disk += e->size;
        break;
    case SW_TRACE_DISK_READ:
    case SW_TRACE_DISK_DROP:
        t->spilled_disk -= e->size;
        break;
    default:
        break;
    }
}

/* Replaying ev[0..n) from its start event reproduces the five totals
 * every event carries, and then m's. */
static void expect_replay(const sw_trace_event *ev, size_t n,
                          const sw_memory_info *m)
{
    totals r = {0, 0, 0, 0, 0};
    for (size_t i = 0; i < n; i++) {
        apply(&r, &ev[i]);
        if (r.in_use != ev[i].in_use || r.cached != ev[i].cached ||
            r.spilled != ev[i].spilled ||
            r.host_copies != ev[i].host_copies ||
            r.spilled_disk != ev[i].spilled_disk)
            FAIL("event %zu (%s, aux %llu): replayed in_use/cached/spilled/"
                 "host_copies/spilled_disk %llu/%llu/%llu/%llu/%llu, "
                 "recorded %llu/%llu/%llu/%llu/%llu", i,
                 sw_trace_kind_name(ev[i].kind),
                 (unsigned long long)ev[i].aux,
                 (unsigned long long)r.in_use, (unsigned long long)r.cached,
                 (unsigned long long)r.spilled,
                 (unsigned long long)r.host_copies,
                 (unsigned long long)r.spilled_disk,
                 (unsigned long long)ev[i].in_use,
                 (unsigned long long)ev[i].cached,
                 (unsigned long long)ev[i].spilled,
                 (unsigned long long)ev[i].host_copies,
                 (unsigned long long)ev[i].spilled_disk);
        ASSERT_UEQ(ev[i].seq, i);
        if (i > 0)
            ASSERT_UGE(ev[i].time_ns, ev[i - 1].time_ns);
    }
    ASSERT_UEQ(r.in_use, m->in_use);
    ASSERT_UEQ(r.cached, m->cached);
    ASSERT_UEQ(r.spilled, m->spilled);
    ASSERT_UEQ(r.host_copies, m->host_copies);
    ASSERT_UEQ(r.spilled_disk, m->spilled_disk);
}

static int gc_callback(sw_device *dev, sw_pressure *p, size_t bytes,
                       void *user)
{
    sw_pressure_note_gc(p);
    sw_buffer **victim = user;
    if (*victim == NULL)
        return 0;
    sw_pressure_unlock(p);
    ASSERT_OK(sw_buffer_free(*victim));
    *victim = NULL;
    sw_pressure_relock(p);
    return 1;
}

static size_t count_kind(const sw_trace_event *ev, size_t n, uint32_t k)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ev[i].kind == k;
    return c;
}

/* b brought back for a launch that only reads it (no kernel: every
 * backend): a clean copy. */
static void read_back(sw_device *dev, sw_buffer *b)
{
    unsigned char read = SW_ACCESS_READ;
    sw_devmem p;
    ASSERT_OK(sw_launch_begin_access(dev, &b, &read, 1, &p));
    ASSERT_OK(sw_launch_end(dev, &b, 1));
}

TEST(trace_every_kind_replays)
{
    test_require_spill();
    sw_device *dev = test_device();
    ASSERT_OK(sw_trace_start(dev, NULL));
    /* Allocation, cache reuse and trimming. */
    sw_buffer *a = test_alloc(dev, 64 * 1024, "trace-a");
    test_write_pattern(a, 1);
    sw_buffer *t = test_alloc(dev, 32 * 1024, "temporary");
    ASSERT_OK(sw_buffer_free(t));
    t = test_alloc(dev, 32 * 1024, "temporary again"); /* a cache hit */
    ASSERT_OK(sw_buffer_free(t));
    ASSERT_OK(sw_empty_cache(dev));
    /* Leases. */
    sw_devmem ptr;
    sw_lease *l = NULL;
    ASSERT_OK(sw_buffer_expose(a, &ptr, &l));
    ASSERT_OK(sw_lease_release(l));
    /* A queue. */
    sw_queue *q = NULL;
    ASSERT_OK(sw_queue_create(dev, &q));
    ASSERT_OK(sw_queue_release(q));
    ASSERT_OK(sw_device_synchronize(dev));
    /* Spilling and restoring under a budget. */
    sw_buffer *b = test_alloc(dev, 64 * 1024, "trace-b");
    test_write_pattern(b, 2);
    ASSERT_OK(sw_set_memory_budget(dev, 64 * 1024)); /* spills a */
    sw_devmem p;
    ASSERT_OK(sw_buffer_device_ptr(a, &p)); /* restores a, spills b */
    /* The disk tier: b's host copy to the spill file, read from there,
     * and back in host memory for a write. */
    ASSERT_OK(sw_set_host_budget(dev, 1));
    test_expect_pattern(b, 2);
    test_write_pattern(b, 2);
    ASSERT_OK(sw_set_host_budget(dev, 0));
    /* Pressure callbacks that collect, then an OOM. */
    sw_buffer *victim = test_alloc(dev, 1024, "garbage");
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    test_pin(a);
    test_pin(b);
    int id = -1;
    ASSERT_OK(sw_add_pressure_callback(dev, gc_callback, &victim, &id));
    ASSERT_OK(sw_set_memory_budget(dev, 128 * 1024 + 1024));
    sw_buffer *c = NULL;
    ASSERT_OK(sw_buffer_alloc(dev, 1024, "fits after gc", &c));
    sw_buffer *none = NULL;
    ASSERT_ERR(sw_buffer_alloc(dev, 64 * 1024, "too much", &none),
               SW_ERR_OOM);
    char report[2048];
    snprintf(report, sizeof report, "%s", sw_last_error());
    ASSERT_OK(sw_remove_pressure_callback(dev, id));
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    test_unpin(a);
    test_unpin(b);
    sw_buffer *done = NULL;
    ASSERT_OK(sw_buffer_alloc(dev, 0, "empty", &done));
    ASSERT_OK(sw_buffer_free(done));
    /* Clean copies, the disk tier, a prefetch, and frees of a clean copy,
     * of a buffer on disk and of one spilled to host memory. */
    enum { KN = 4, KS = 64 * 1024 };
    sw_buffer *k[KN];
    for (int i = 0; i < KN; i++) {
        k[i] = test_alloc(dev, KS, "kept");
        test_write_pattern(k[i], 20u + (uint32_t)i);
    }
    ASSERT_OK(sw_set_memory_budget(dev, 1)); /* everything out */
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    for (int i = 0; i < KN; i++) /* back by a read: clean copies */
        read_back(dev, k[i]);
    ASSERT_OK(sw_buffer_free(k[0])); /* a clean copy freed */
    k[0] = NULL;
    test_write_pattern(k[2], 22); /* written: its host copy goes */
    ASSERT_OK(sw_set_memory_budget(dev, 1)); /* k[1], k[3]: evicted clean */
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    read_back(dev, k[3]); /* clean again */
    /* Past a host budget of one byte: the spilled copies go to disk, and
     * so does the clean copy's host block (k[3] stays resident, clean). */
    ASSERT_OK(sw_set_host_budget(dev, 1));
    ASSERT_OK(sw_buffer_free(k[1])); /* a buffer on disk freed */
    k[1] = NULL;
    ASSERT_OK(sw_buffer_prefetch(k[2], NULL)); /* from disk, ahead of use */
    ASSERT_OK(sw_device_synchronize(dev)); /* its read, if in background */
    ASSERT_OK(sw_set_host_budget(dev, 0));
    /* k[3] evicted clean to the file, k[2] (its extent kept) to host
     * memory, then back to the file with nothing written. */
    ASSERT_OK(sw_set_memory_budget(dev, 1));
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    ASSERT_OK(sw_device_synchronize(dev));
    ASSERT_OK(sw_set_host_budget(dev, 1));
    ASSERT_OK(sw_set_host_budget(dev, 0));
    /* k[3] back from disk and written, then out to host memory, freed. */
    read_back(dev, k[3]);
    test_write_pattern(k[3], 23);
    ASSERT_OK(sw_set_memory_budget(dev, 1));
    ASSERT_OK(sw_set_memory_budget(dev, 0));
    ASSERT_OK(sw_device_synchronize(dev));
    ASSERT_OK(sw_buffer_free(k[3])); /* a buffer spilled to host freed */
    k[3] = NULL;
    /* The copies' ends are seen once they are done. */
    ASSERT_OK(sw_device_synchronize(dev));
    ASSERT_OK(sw_trace_stop(dev));

    size_t n = 0;
    uint64_t dropped = 7;
    ASSERT_OK(sw_trace_read(dev, NULL, 0, &n, &dropped));
    ASSERT_UEQ(dropped, 0);
    sw_trace_event *ev = calloc(n, sizeof *ev);
    ASSERT_OK(sw_trace_read(dev, ev, n, &n, NULL));
    ASSERT_EQ(ev[0].kind, SW_TRACE_START);
    for (uint32_t kind = 0; kind < SW_TRACE_KIND_COUNT; kind++)
        if (count_kind(ev, n, kind) == 0)
            FAIL("no '%s' event was recorded", sw_trace_kind_name(kind));
    /* Each way the five totals move, reached: a clean copy evicted from
     * host memory and from the spill file, given up for a write, written
     * to the file, freed; a spilled copy sent back to the file it was
     * read from; a buffer freed on disk and one in host memory; a restore
     * for a prefetch. */
    bool evicted = false, evicted_disk = false, written = false;
    bool to_file = false, back_to_file = false, prefetched = false;
    bool freed_clean = false, freed_disk = false, freed_spilled = false;
    for (size_t i = 0; i < n; i++) {
        const sw_trace_event *e = &ev[i], *next = i + 1 < n ? e + 1 : NULL;
        evicted |= e->kind == SW_TRACE_SPILL_BEGIN && e->aux == 3;
        evicted_disk |= e->kind == SW_TRACE_SPILL_BEGIN && e->aux == 4;
        written |= e->kind == SW_TRACE_HOST_COPY_DROP && e->aux == 0;
        to_file |= e->kind == SW_TRACE_DISK_WRITE && e->aux == 2;
        back_to_file |= e->kind == SW_TRACE_DISK_WRITE && e->aux == 1;
        prefetched |= e->kind == SW_TRACE_RESTORE_BEGIN && e->aux == 1;
        bool freed = next != NULL && next->kind == SW_TRACE_FREE &&
                     next->buffer == e->buffer;
        freed_clean |= freed && e->kind == SW_TRACE_HOST_COPY_DROP &&
                       next->aux == 0;
        freed_disk |= freed && e->kind == SW_TRACE_DISK_DROP &&
                      next->aux == 1;
        freed_spilled |= e->kind == SW_TRACE_FREE && e->aux == 1 &&
                         strcmp(e->tag, "kept") == 0 &&
                         !(ev[i - 1].kind == SW_TRACE_DISK_DROP &&
                           ev[i - 1].buffer == e->buffer);
    }
    ASSERT_TRUE(evicted && evicted_disk && written && prefetched);
    ASSERT_TRUE(to_file && back_to_file);
    ASSERT_TRUE(freed_clean && freed_disk && freed_spilled);
    /* Replaying the events reproduces every total on the way, and the
     * device's now. */
    sw_memory_info m = test_info(dev);
    expect_replay(ev, n, &m);
    /* The OOM keeps its report; the GC count rides on its event. */
    for (size_t i = 0; i < n; i++) {
        if (ev[i].kind == SW_TRACE_OOM) {
            char got[2048];
            ASSERT_OK(sw_trace_oom_report(dev, ev[i].aux, got, sizeof got));
            ASSERT_STR_EQ(got, report);
            ASSERT_STR_EQ(ev[i].tag, "too much");
            ASSERT_UEQ(ev[i].size, 64 * 1024);
        }
        if (ev[i].kind == SW_TRACE_ALLOC && ev[i].buffer != 0 &&
            strcmp(ev[i].tag, "trace-a") == 0) {
            uint64_t aid = 0;
            ASSERT_OK(sw_buffer_id(a, &aid));
            ASSERT_UEQ(ev[i].buffer, aid);
        }
    }
    /* The OOM's: its first call freed the garbage, its last chance found
     * nothing more. */
    ASSERT_UEQ(count_kind(ev, n, SW_TRACE_GC), 2);
    free(ev);

    /* Both dumps are valid JSON. */
    char path[128];
    tmp_path(path, sizeof path, "chrome");
    ASSERT_OK(sw_trace_dump(dev, path, "chrome"));
    expect_valid_json(path);
    unlink(path);
    tmp_path(path, sizeof path, "snapshot");
    ASSERT_OK(sw_trace_dump(dev, path, "snapshot"));
    expect_valid_json(path);
    unlink(path);

    test_expect_pattern(a, 1);
    test_expect_pattern(b, 2);
    test_expect_pattern(k[2], 22);
    ASSERT_OK(sw_buffer_free(k[2]));
    ASSERT_OK(sw_buffer_free(c));
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_buffer_free(b));
}

/* Device time: each completed copy's start and end as the device timed
 * them, on the history's clock, and each disk transfer's I/O interval.
 * Their intervals sum to the copy seconds the device reported (the same
 * elapsed times, from the anchor instead of from each batch's start). */
static bool times_copies(sw_device *dev)
{
    return dev->ops->version >= 4 && dev->ops->event_elapsed != NULL;
}

/* The last event before i of kind k for the same buffer, or NULL. */
static const sw_trace_event *begin_of(const sw_trace_event *ev, size_t i,
                                      uint32_t k)
{
    for (size_t j = i; j-- > 0;)
        if (ev[j].kind == k && ev[j].buffer == ev[i].buffer)
            return &ev[j];
    return NULL;
}

TEST(trace_device_times)
{
    test_require_spill();
    sw_device *dev = test_device();
    enum { N = 6, SZ = 256 * 1024 };
    ASSERT_OK(sw_device_synchronize(dev)); /* the copy queue idle */
    sw_memory_info before = test_info(dev);
    ASSERT_OK(sw_trace_start(dev, NULL));
    sw_buffer *b[N];
    for (int i = 0; i < N; i++) {
        b[i] = test_alloc(dev, SZ, "timed");
        test_write_pattern(b[i], 10u + (uint32_t)i);
    }
    ASSERT_OK(sw_set_memory_budget(dev, 3 * SZ)); /* spills 3 */
    for (int i = 0; i < N; i++) {
        sw_devmem p;
        ASSERT_OK(sw_buffer_device_ptr(b[i], &p)); /* restores, spills */
        ASSERT_OK(sw_device_synchronize(dev));
    }
    /* The disk tier: spilled copies to the file, and restored from it. */
    ASSERT_OK(sw_set_host_budget(dev, 1));
    for (int i = 0; i < N; i++) {
        sw_devmem p;
        ASSERT_OK(sw_buffer_device_ptr(b[i], &p));
        ASSERT_OK(sw_device_synchronize(dev));
    }
    ASSERT_OK(sw_set_host_budget(dev, 0));
    ASSERT_OK(sw_device_synchronize(dev));
    sw_memory_info after = test_info(dev); /* notices the last copies */
    ASSERT_OK(sw_trace_stop(dev));

    size_t n = 0;
    ASSERT_OK(sw_trace_read(dev, NULL, 0, &n, NULL));
    sw_trace_event *ev = calloc(n, sizeof *ev);
    ASSERT_NOT_NULL(ev);
    ASSERT_OK(sw_trace_read(dev, ev, n, &n, NULL));
    uint64_t t_start = ev[0].time_ns;
    size_t timed[2] = {0, 0}, untimed = 0, disk[2] = {0, 0};
    double sum[2] = {0, 0};
    uint64_t last_end[2] = {0, 0}, last_begin[2] = {0, 0};
    for (size_t i = 0; i < n; i++) {
        const sw_trace_event *e = &ev[i];
        bool copy = e->kind == SW_TRACE_SPILL_END ||
                    e->kind == SW_TRACE_RESTORE_END;
        bool io = e->kind == SW_TRACE_DISK_WRITE ||
                  e->kind == SW_TRACE_DISK_READ;
        if (!copy && !io) {
            ASSERT_UEQ(e->dev_begin_ns, 0);
            ASSERT_UEQ(e->dev_end_ns, 0);
            continue;
        }
        if (e->dev_end_ns == 0) {
            ASSERT_UEQ(e->dev_begin_ns, 0);
            untimed++;
            continue;
        }
        ASSERT_UGT(e->dev_begin_ns, 0);
        ASSERT_ULE(e->dev_begin_ns, e->dev_end_ns);
        /* Ran before it was recorded as done. */
        ASSERT_ULE(e->dev_end_ns, e->time_ns);
        if (io) {
            /* The host's own clock: after the history began. */
            ASSERT_UGE(e->dev_begin_ns, t_start);
            disk[e->kind == SW_TRACE_DISK_READ]++;
            continue;
        }
        ASSERT_UEQ(e->aux, 0);
        int k = e->kind == SW_TRACE_RESTORE_END;
        const sw_trace_event *q = begin_of(
            ev, i, k ? SW_TRACE_RESTORE_BEGIN : SW_TRACE_SPILL_BEGIN);
        ASSERT_NOT_NULL(q);
        /* Ran after the history began: device times are early only by
         * the anchor's latency (the time an idle queue takes to run an
         * event; a second is more than the sanitizers on a loaded machine
         * make of it).  Not checked against its begin event: that is
         * recorded once the whole batch is queued, and a copy may run
         * before it. */
        ASSERT_UGE(e->dev_begin_ns + 1000000000u, t_start);
        ASSERT_NOT_NULL(q);
        timed[k]++;
        /* One batch's buffers share its interval: counted once. */
        if (e->dev_begin_ns != last_begin[k] || e->dev_end_ns != last_end[k])
            sum[k] += (double)(e->dev_end_ns - e->dev_begin_ns) * 1e-9;
        last_begin[k] = e->dev_begin_ns;
        last_end[k] = e->dev_end_ns;
    }
    if (times_copies(dev)) {
        ASSERT_UGE(timed[0], 3);
        ASSERT_UGE(timed[1], 3);
        ASSERT_EQ(untimed, 0);
        double spill = after.spill_seconds - before.spill_seconds;
        double restore = after.restore_seconds - before.restore_seconds;
        /* Rounded to the nanosecond once per batch. */
        if (sum[0] < spill - 1e-6 * (double)timed[0] ||
            sum[0] > spill + 1e-6 * (double)timed[0] ||
            sum[1] < restore - 1e-6 * (double)timed[1] ||
            sum[1] > restore + 1e-6 * (double)timed[1])
            FAIL("device intervals %.9f s out, %.9f s in; the device "
                 "timed %.9f s and %.9f s", sum[0], sum[1], spill, restore);
    } else {
        ASSERT_EQ(timed[0] + timed[1], 0);
    }
    ASSERT_GE(disk[0], 1);
    ASSERT_GE(disk[1], 1);
    free(ev);

    /* The dumps carry them: a track of the device's time in Chrome's,
     * the fields in the snapshot's events. */
    char path[128];
    size_t len;
    tmp_path(path, sizeof path, "devtime-chrome");
    ASSERT_OK(sw_trace_dump(dev, path, "chrome"));
    expect_valid_json(path);
    char *text = read_file(path, &len);
    if (times_copies(dev)) {
        ASSERT_NOT_NULL(strstr(text, "\"spill (device)\""));
        ASSERT_NOT_NULL(strstr(text, "\"restore (device)\""));
    }
    ASSERT_NOT_NULL(strstr(text, "\"disk write (I/O)\""));
    ASSERT_NOT_NULL(strstr(text, "\"disk read (I/O)\""));
    free(text);
    unlink(path);
    tmp_path(path, sizeof path, "devtime-snapshot");
    ASSERT_OK(sw_trace_dump(dev, path, "snapshot"));
    expect_valid_json(path);
    text = read_file(path, &len);
    ASSERT_NOT_NULL(strstr(text, "\"dev_begin_ns\":"));
    free(text);
    unlink(path);

    ASSERT_OK(sw_set_memory_budget(dev, 0));
    for (int i = 0; i < N; i++) {
        test_expect_pattern(b[i], 10u + (uint32_t)i);
        ASSERT_OK(sw_buffer_free(b[i]));
    }
}

TEST(trace_ring_bound)
{
    sw_device *dev = test_device();
    sw_trace_options o = {.capacity = 1000};
    ASSERT_OK(sw_trace_start(dev, &o));
    /* A million events: alloc, free, cache put, cache hit per pair. */
    sw_buffer *warm = test_alloc(dev, 512, "warm");
    ASSERT_OK(sw_buffer_free(warm));
    for (int i = 0; i < 250000; i++) {
        sw_buffer *b = NULL;
        ASSERT_OK(sw_buffer_alloc(dev, 512, "churn", &b));
        ASSERT_OK(sw_buffer_free(b));
    }
    size_t n = 0;
    uint64_t dropped = 0;
    sw_trace_event *ev = calloc(1000, sizeof *ev);
    ASSERT_OK(sw_trace_read(dev, ev, 1000, &n, &dropped));
    ASSERT_EQ(n, 1000);
    uint64_t recorded = ev[n - 1].seq + 1;
    ASSERT_UGE(recorded, 1000000);
    ASSERT_UEQ(dropped, recorded - 1000);
    for (size_t i = 1; i < n; i++)
        ASSERT_UEQ(ev[i].seq, ev[i - 1].seq + 1);
    free(ev);
    /* The chrome dump says how many were dropped. */
    char path[128];
    tmp_path(path, sizeof path, "bound");
    ASSERT_OK(sw_trace_dump(dev, path, "chrome"));
    size_t len;
    char *s = read_file(path, &len);
    char want[64];
    snprintf(want, sizeof want, "\"dropped\":%llu",
             (unsigned long long)dropped);
    ASSERT_STR_CONTAINS(s, want);
    free(s);
    unlink(path);
    ASSERT_OK(sw_trace_stop(dev));
}

typedef struct {
    sw_device *dev;
    atomic_int stop;
    atomic_int ops;
    int fails;
} churner;

static void *churn(void *arg)
{
    churner *c = arg;
    while (!atomic_load(&c->stop)) {
        sw_buffer *b = NULL;
        if (sw_buffer_alloc(c->dev, 4096, "thread \"churn\"\n", &b) != SW_OK) {
            c->fails++;
            continue;
        }
        uint32_t v = 7;
        if (sw_buffer_write(b, 0, &v, 4) != SW_OK ||
            sw_buffer_free(b) != SW_OK)
            c->fails++;
        atomic_fetch_add(&c->ops, 1);
    }
    return NULL;
}

/* Dumps while other threads allocate (tags with quotes and newlines) are
 * valid JSON; runs under ThreadSanitizer as a thread_ test. */
TEST(thread_trace_dump_while_allocating)
{
    sw_device *dev = test_device();
    sw_trace_options o = {.capacity = 4096};
    ASSERT_OK(sw_trace_start(dev, &o));
    churner c = {.dev = dev};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        ASSERT_EQ(pthread_create(&th[i], NULL, churn, &c), 0);
    char path[128];
    for (int i = 0; i < 10; i++) {
        /* Each dump with allocations in flight since the last one. */
        int seen = atomic_load(&c.ops);
        while (atomic_load(&c.ops) < seen + 20)
            sched_yield();
        tmp_path(path, sizeof path, i % 2 ? "live-chrome" : "live-snap");
        ASSERT_OK(sw_trace_dump(dev, path, i % 2 ? "chrome" : "snapshot"));
        expect_valid_json(path);
        unlink(path);
    }
    atomic_store(&c.stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    ASSERT_EQ(c.fails, 0);
    ASSERT_OK(sw_trace_stop(dev));
}

typedef struct {
    size_t n;
    uint64_t last_seq;
    int out_of_order;
} forwarded;

static void forward(const sw_trace_event *ev, void *user)
{
    forwarded *f = user;
    if (f->n > 0 && ev->seq != f->last_seq + 1)
        f->out_of_order++;
    f->last_seq = ev->seq;
    f->n++;
}

TEST(trace_callback_and_bad_input)
{
    sw_device *dev = test_device();
    /* Stop or dump without a start. */
    ASSERT_ERR(sw_trace_stop(dev), SW_ERR_INVALID_ARG);
    ASSERT_ERR(sw_trace_dump(dev, "/tmp/never.json", "chrome"),
               SW_ERR_INVALID_ARG);
    sw_trace_options huge = {.capacity = (size_t)1 << 40};
    ASSERT_ERR(sw_trace_start(dev, &huge), SW_ERR_TOO_LARGE);
    ASSERT_ERR(sw_trace_start(NULL, NULL), SW_ERR_INVALID_ARG);

    forwarded f = {0, 0, 0};
    ASSERT_OK(sw_trace_set_callback(dev, forward, &f));
    ASSERT_OK(sw_trace_start(dev, NULL));
    for (int i = 0; i < 10; i++) {
        sw_buffer *b = test_alloc(dev, 1000, "fwd");
        ASSERT_OK(sw_buffer_free(b));
    }
    size_t n;
    ASSERT_OK(sw_trace_read(dev, NULL, 0, &n, NULL));
    ASSERT_EQ(f.n, n);
    ASSERT_EQ(f.out_of_order, 0);
    ASSERT_OK(sw_trace_set_callback(dev, NULL, NULL));
    sw_buffer *b = test_alloc(dev, 1000, "not forwarded");
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_EQ(f.n, n);

    ASSERT_ERR(sw_trace_dump(dev, "/tmp/x.json", "perfetto"),
               SW_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(sw_last_error(), "perfetto");
    ASSERT_ERR(sw_trace_dump(dev, "/nonexistent-dir/x.json", "chrome"),
               SW_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(sw_last_error(), "/nonexistent-dir/x.json");
    ASSERT_ERR(sw_trace_dump(dev, NULL, "chrome"), SW_ERR_INVALID_ARG);
    size_t junk;
    ASSERT_ERR(sw_trace_read(dev, NULL, 5, &junk, NULL), SW_ERR_INVALID_ARG);
    ASSERT_NULL(sw_trace_kind_name((sw_trace_kind)SW_TRACE_KIND_COUNT));
    ASSERT_STR_EQ(sw_trace_kind_name(SW_TRACE_SPILL_BEGIN), "spill_begin");
    ASSERT_OK(sw_trace_read(dev, NULL, 0, &n, NULL));
    ASSERT_OK(sw_trace_stop(dev));
    /* Stopped: nothing more is recorded, the ring stays readable. */
    size_t m;
    b = test_alloc(dev, 1000, "after stop");
    ASSERT_OK(sw_buffer_free(b));
    ASSERT_OK(sw_trace_read(dev, NULL, 0, &m, NULL));
    ASSERT_EQ(m, n);
    char path[128];
    tmp_path(path, sizeof path, "stopped");
    ASSERT_OK(sw_trace_dump(dev, path, "chrome"));
    expect_valid_json(path);
    unlink(path);
}

/* SPILLWAY_STATS: the live figures another process reads. */
TEST(stats_export_file)
{
    char path[128];
    snprintf(path, sizeof path, "/tmp/spillway-stats-%d.json", (int)getpid());
    unlink(path);
    setenv("SPILLWAY_STATS", path, 1);
    sw_device *dev = test_device();
    sw_buffer *b = test_alloc(dev, 3 * 1024 * 1024, "watched");
    /* Written a few times a second: wait for a write that sees b. */
    char want[64];
    snprintf(want, sizeof want, "\"in_use\":%llu",
             (unsigned long long)test_info(dev).in_use);
    int seen = 0;
    for (int i = 0; i < 100 && !seen; i++) {
        usleep(20 * 1000);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        fclose(f);
        size_t n;
        char *s = read_file(path, &n);
        seen = strstr(s, want) != NULL &&
               strstr(s, sw_device_name(dev)) != NULL;
        free(s);
    }
    ASSERT_TRUE(seen);
    expect_valid_json(path);
    ASSERT_OK(sw_buffer_free(b));
    unsetenv("SPILLWAY_STATS");
    unlink(path);
}
