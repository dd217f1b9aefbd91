/*
 * trace.c -- the memory history: a bounded ring of memory events per
 * device, a callback for embedding runtimes, and dumps in the Chrome Trace
 * Event format (Perfetto, chrome://tracing) and as a JSON snapshot.
 *
 * Recording happens under the device lock, at the places that change
 * in_use, cached or spilled (and at a few others worth seeing), through
 * SW__TRACE in internal.h: one predictable branch when tracing is off.
 * A dump copies what it needs under the lock and writes without it.
 */
#include "core/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define DEFAULT_CAPACITY 65536u
#define MAX_CAPACITY (1u << 24)

static const char *const kind_names[SW_TRACE_KIND_COUNT] = {
    [SW_TRACE_START] = "start",
    [SW_TRACE_ALLOC] = "alloc",
    [SW_TRACE_FREE] = "free",
    [SW_TRACE_CACHE_HIT] = "cache_hit",
    [SW_TRACE_CACHE_PUT] = "cache_put",
    [SW_TRACE_CACHE_TRIM] = "cache_trim",
    [SW_TRACE_SPILL_BEGIN] = "spill_begin",
    [SW_TRACE_SPILL_END] = "spill_end",
    [SW_TRACE_RESTORE_BEGIN] = "restore_begin",
    [SW_TRACE_RESTORE_END] = "restore_end",
    [SW_TRACE_PREFETCH] = "prefetch",
    [SW_TRACE_BUDGET] = "budget",
    [SW_TRACE_PRESSURE_BEGIN] = "pressure_begin",
    [SW_TRACE_PRESSURE_END] = "pressure_end",
    [SW_TRACE_GC] = "gc",
    [SW_TRACE_OOM] = "oom",
    [SW_TRACE_LEASE] = "lease",
    [SW_TRACE_LEASE_RELEASE] = "lease_release",
    [SW_TRACE_QUEUE_CREATE] = "queue_create",
    [SW_TRACE_QUEUE_DESTROY] = "queue_destroy",
    [SW_TRACE_HOST_COPY_DROP] = "host_copy_drop",
    [SW_TRACE_DISK_WRITE] = "disk_write",
    [SW_TRACE_DISK_READ] = "disk_read",
    [SW_TRACE_HOST_BUDGET] = "host_budget",
    [SW_TRACE_DISK_DROP] = "disk_drop",
};

SW_API const char *sw_trace_kind_name(sw_trace_kind kind)
{
    return (unsigned)kind < SW_TRACE_KIND_COUNT ? kind_names[kind] : NULL;
}

uint64_t sw__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#define now_ns sw__now_ns

/* ------------------------------------------------------------------------
 * Recording
 * ---------------------------------------------------------------------- */

/* An event about buffer id (0: none) tagged tag (NULL: none). */
static void emit(sw_device *dev, sw_trace_kind kind, uint64_t id,
                 const char *tag, uint64_t size, uint32_t queue, uint64_t aux,
                 uint64_t begin_ns, uint64_t end_ns)
{
    sw__assert_locked(dev);
    sw__trace *t = &dev->trace;
    sw_trace_event ev;
    ev.seq = t->recorded;
    ev.time_ns = now_ns();
    ev.kind = (uint32_t)kind;
    ev.queue = queue;
    ev.buffer = id;
    ev.size = size;
    ev.aux = aux;
    ev.in_use = dev->in_use;
    ev.cached = dev->cached;
    ev.spilled = dev->spilled;
    ev.budget = dev->budget;
    sw__copy_tag(ev.tag, sizeof ev.tag, tag);
    ev.host_copies = dev->host_copies;
    ev.spilled_disk = dev->spilled_disk;
    ev.dev_begin_ns = begin_ns;
    ev.dev_end_ns = end_ns;
    t->recorded++;
    if (t->cap > 0)
        t->ring[ev.seq % t->cap] = ev;
    if (t->fn != NULL)
        t->fn(&ev, t->user);
}

void sw__trace_emit(sw_device *dev, sw_trace_kind kind, const sw__buf *b,
                    uint64_t size, uint32_t queue, uint64_t aux)
{
    emit(dev, kind, b != NULL ? b->base->id : 0,
         b != NULL ? b->base->tag : NULL, size, queue, aux, 0, 0);
}

void sw__trace_emit_timed(sw_device *dev, sw_trace_kind kind,
                          const sw__buf *b, uint64_t size, uint64_t aux,
                          uint64_t begin_ns, uint64_t end_ns)
{
    emit(dev, kind, b->base->id, b->base->tag, size, 0, aux, begin_ns,
         end_ns);
}

void sw__trace_xfer_note_end_locked(sw_device *dev, sw__xfer *x,
                                    const sw__buf *base)
{
    sw__assert_locked(dev);
    /* Without host memory for the note, the END is left out. */
    sw__xfer_end *e = sw__malloc(sizeof *e);
    if (e == NULL)
        return;
    e->id = base->id;
    e->size = base->alloc_size;
    memcpy(e->tag, base->tag, sizeof e->tag);
    e->next = x->ends;
    x->ends = e;
}

void sw__trace_xfer_ends_locked(sw_device *dev, sw__xfer *x)
{
    sw__assert_locked(dev);
    uint64_t d0 = 0, d1 = 0;
    bool record = dev->tracing && x->done;
    if (record)
        sw__trace_xfer_times_locked(dev, x, &d0, &d1);
    while (x->ends != NULL) {
        sw__xfer_end *e = x->ends;
        x->ends = e->next;
        if (record)
            emit(dev, x->kind == SW__XFER_SPILL ? SW_TRACE_SPILL_END
                                                : SW_TRACE_RESTORE_END,
                 e->id, e->tag, e->size, 0, x->rc != SW_OK, d0, d1);
        sw__free(e);
    }
}

/* ------------------------------------------------------------------------
 * Device time
 *
 * Backends time copies between two events of one queue (event_elapsed),
 * in the device's own clock.  To put a copy on the host's clock, the
 * history records one event of its own on the copy queue while that queue
 * is idle: it runs at once, so its device time is the host time of its
 * recording, to within the latency of an idle queue.  A copy's start and
 * end are that time plus the device's elapsed time from it.  The anchor is
 * taken at sw_trace_start, or, when the copy queue is busy then, before
 * the first copy queued once it is idle; copies queued before it have no
 * device times.
 * ---------------------------------------------------------------------- */

static void anchor_release_locked(sw_device *dev)
{
    sw__trace *t = &dev->trace;
    if (t->anchor != NULL)
        sw__b_event_release(dev->ops, t->anchor);
    t->anchor = NULL;
    t->anchor_ns = 0;
}

void sw__trace_anchor_locked(sw_device *dev, sw__bqueue *q)
{
    sw__assert_locked(dev);
    sw__trace *t = &dev->trace;
    if (!dev->tracing || t->anchor != NULL || q == NULL ||
        !sw__b_queue_idle(dev, q))
        return;
    /* A timing event as the copies' start events are (NULL where the
     * backend cannot time events; no fault is injected into it, and
     * failing here changes nothing). */
    uint64_t at = now_ns();
    sw__bevent *ev = sw__b_timing_start(dev, q);
    if (ev == NULL)
        return;
    t->anchor = ev;
    t->anchor_ns = at;
    if (++t->anchor_gen == 0)
        t->anchor_gen = 1;
}

void sw__trace_xfer_times_locked(sw_device *dev, const sw__xfer *x,
                                 uint64_t *begin_ns, uint64_t *end_ns)
{
    sw__assert_locked(dev);
    *begin_ns = *end_ns = 0;
    const sw__trace *t = &dev->trace;
    if (x->anchor_gen == 0 || x->anchor_gen != t->anchor_gen ||
        t->anchor == NULL || x->start == NULL || !x->done || x->rc != SW_OK)
        return;
    double s0, s1;
    if (sw__b_event_elapsed(dev->ops, t->anchor, x->start, &s0) != SW_OK ||
        sw__b_event_elapsed(dev->ops, t->anchor, x->ev, &s1) != SW_OK ||
        !(s0 >= 0) || !(s1 >= s0))
        return;
    /* The anchor ran a little after the host recorded it (an idle queue
     * still takes a moment to start: microseconds on sim and PoCL), so
     * these times are early by as much.  Not corrected: any correction
     * found later (a copy that seems to start before it was queued) would
     * shift later copies against earlier ones, and their order on the
     * copy queue is what the picture must keep. */
    *begin_ns = t->anchor_ns + (uint64_t)(s0 * 1e9 + 0.5);
    *end_ns = t->anchor_ns + (uint64_t)(s1 * 1e9 + 0.5);
}

void sw__trace_oom(sw_device *dev, uint64_t size, const char *tag,
                   const char *report)
{
    sw__trace *t = &dev->trace;
    /* The report is long: kept beside the ring, the last few only.  No
     * host memory for it is no reason to fail anything. */
    size_t len = strlen(report) + 1;
    char *copy = sw__malloc(len);
    uint64_t slot = t->oom_next++;
    char **cell = &t->oom[slot % SW__TRACE_OOM_KEPT];
    sw__free(*cell);
    *cell = copy;
    if (copy != NULL)
        memcpy(copy, report, len);
    emit(dev, SW_TRACE_OOM, 0, tag, size, 0, slot, 0, 0);
}

static void trace_clear_locked(sw_device *dev)
{
    sw__trace *t = &dev->trace;
    anchor_release_locked(dev);
    sw__free(t->ring);
    t->ring = NULL;
    t->cap = 0;
    t->recorded = 0;
    for (size_t i = 0; i < SW__TRACE_OOM_KEPT; i++) {
        sw__free(t->oom[i]);
        t->oom[i] = NULL;
    }
    t->oom_next = 0;
}

void sw__trace_close_locked(sw_device *dev)
{
    dev->tracing = false;
    dev->trace.fn = NULL;
    dev->trace.user = NULL;
    dev->trace.started = false;
    trace_clear_locked(dev);
}

SW_API int sw_trace_start(sw_device *dev, const sw_trace_options *opts)
{
    size_t cap = opts != NULL && opts->capacity != 0 ? opts->capacity
                                                     : DEFAULT_CAPACITY;
    if (cap > MAX_CAPACITY)
        return sw__errorf(SW_ERR_TOO_LARGE, "a memory history of %zu events "
                          "is too large (at most %u)", cap, MAX_CAPACITY);
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    sw_trace_event *ring = sw__malloc(cap * sizeof *ring);
    if (ring == NULL) {
        sw__unlock(dev);
        return sw__errorf(SW_ERR_HOST_OOM, "no host memory for a memory "
                          "history of %zu events", cap);
    }
    trace_clear_locked(dev);
    dev->trace.ring = ring;
    dev->trace.cap = cap;
    dev->trace.started = true;
    dev->tracing = true;
    sw__trace_emit(dev, SW_TRACE_START, NULL, 0, 0, 0);
    sw__trace_anchor_locked(dev, dev->copyq != NULL ? dev->copyq : dev->q);
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_trace_stop(sw_device *dev)
{
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    if (!dev->trace.started)
        rc = sw__errorf(SW_ERR_INVALID_ARG, "%s: the memory history was "
                        "not started (sw_trace_start)", dev->name);
    /* Copies already done end in the history (with their device times),
     * not after it: they are otherwise noticed at the next call that
     * looks.  Querying, never waiting. */
    if (dev->tracing && (dev->xfers != NULL || dev->xfer_orphans != NULL))
        sw__xfer_poll_locked(dev);
    dev->tracing = false;
    sw__unlock(dev);
    return rc;
}

SW_API int sw_trace_set_callback(sw_device *dev, sw_trace_fn fn, void *user)
{
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    dev->trace.fn = fn;
    dev->trace.user = fn != NULL ? user : NULL;
    sw__unlock(dev);
    return SW_OK;
}

/* Kept events, oldest first: how many, and where the oldest is. */
static size_t kept_locked(const sw__trace *t, uint64_t *first)
{
    size_t n = t->recorded < t->cap ? (size_t)t->recorded : t->cap;
    *first = t->recorded - n;
    return n;
}

SW_API int sw_trace_read(sw_device *dev, sw_trace_event *out, size_t cap,
                         size_t *count, uint64_t *dropped)
{
    if (count != NULL)
        *count = 0;
    if (dropped != NULL)
        *dropped = 0;
    if (out == NULL && cap > 0)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL with cap %zu",
                          cap);
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    const sw__trace *t = &dev->trace;
    uint64_t first;
    size_t n = kept_locked(t, &first);
    for (size_t i = 0; i < n && i < cap; i++)
        out[i] = t->ring[(first + i) % t->cap];
    if (count != NULL)
        *count = n;
    if (dropped != NULL)
        *dropped = first;
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_trace_oom_report(sw_device *dev, uint64_t aux, char *buf,
                               size_t len)
{
    if (buf == NULL || len == 0)
        return sw__errorf(SW_ERR_INVALID_ARG, "buf is NULL or empty");
    buf[0] = '\0';
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    const sw__trace *t = &dev->trace;
    if (aux < t->oom_next && t->oom_next - aux <= SW__TRACE_OOM_KEPT) {
        const char *r = t->oom[aux % SW__TRACE_OOM_KEPT];
        if (r != NULL)
            snprintf(buf, len, "%s", r);
    }
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_buffer_id(sw_buffer *h, uint64_t *id)
{
    if (id == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "id is NULL");
    *id = 0;
    sw__buf *b;
    sw_device *dev;
    int rc = sw__buffer_enter(h, &b, &dev);
    if (rc != SW_OK)
        return rc;
    *id = b->base->id;
    sw__unlock(dev);
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * Dumps
 * ---------------------------------------------------------------------- */

/* What a dump needs, copied under the lock. */
typedef struct {
    char name[32];
    sw_trace_event *ev;
    size_t n;
    uint64_t dropped;
    char *oom[SW__TRACE_OOM_KEPT];
    uint64_t oom_next;
    sw_buffer_info *bufs;
    size_t nbufs;
    sw_memory_info mi;
} dump_copy;

static void copy_free(dump_copy *c)
{
    sw__free(c->ev);
    sw__free(c->bufs);
    for (size_t i = 0; i < SW__TRACE_OOM_KEPT; i++)
        sw__free(c->oom[i]);
}

static int copy_locked(sw_device *dev, dump_copy *c, bool buffers)
{
    const sw__trace *t = &dev->trace;
    snprintf(c->name, sizeof c->name, "%s", dev->name);
    uint64_t first;
    c->n = kept_locked(t, &first);
    c->dropped = first;
    c->ev = c->n ? sw__malloc(c->n * sizeof *c->ev) : NULL;
    if (c->n && c->ev == NULL)
        return SW_ERR_HOST_OOM;
    for (size_t i = 0; i < c->n; i++)
        c->ev[i] = t->ring[(first + i) % t->cap];
    c->oom_next = t->oom_next;
    for (size_t i = 0; i < SW__TRACE_OOM_KEPT; i++) {
        const char *r = t->oom[i];
        if (r == NULL)
            continue;
        size_t len = strlen(r) + 1;
        c->oom[i] = sw__malloc(len);
        if (c->oom[i] == NULL)
            return SW_ERR_HOST_OOM;
        memcpy(c->oom[i], r, len);
    }
    if (!buffers)
        return SW_OK;
    c->bufs = dev->live_count ? sw__malloc(dev->live_count * sizeof *c->bufs)
                              : NULL;
    if (dev->live_count && c->bufs == NULL)
        return SW_ERR_HOST_OOM;
    sw__snapshot_locked(dev, c->bufs, dev->live_count, &c->nbufs);
    sw__memory_info_locked(dev, &c->mi);
    return SW_OK;
}

static const char *oom_text(const dump_copy *c, uint64_t aux)
{
    if (aux < c->oom_next && c->oom_next - aux <= SW__TRACE_OOM_KEPT)
        return c->oom[aux % SW__TRACE_OOM_KEPT];
    return NULL;
}

/* A JSON string (quotes included). */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s != NULL && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch == '\n')
            fputs("\\n", f);
        else if (ch < 0x20 || ch == 0x7f)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static double us(uint64_t ns, uint64_t t0)
{
    return (double)(ns - t0) / 1000.0;
}

/* Microseconds from t0, for a time that may come before it (a copy that
 * ran before the first kept event). */
static double us_signed(uint64_t ns, uint64_t t0)
{
    return ns >= t0 ? (double)(ns - t0) / 1000.0
                    : -(double)(t0 - ns) / 1000.0;
}

/* The track (tid) of an event: its queue, or one of its own.  The copy
 * engine's and the disk's tracks are on the device's time (dev_begin_ns,
 * dev_end_ns): when the copies and the file I/O ran. */
enum {
    TID_MEMORY = 100000,
    TID_PRESSURE = 100001,
    TID_COPY = 100002,
    TID_DISK = 100003
};

static void chrome_meta(FILE *f, const dump_copy *c)
{
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,"
               "\"args\":{\"name\":");
    char pname[64];
    snprintf(pname, sizeof pname, "spillway %s", c->name);
    json_str(f, pname);
    fprintf(f, "}},\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,"
               "\"tid\":0,\"args\":{\"name\":\"default queue\"}},\n"
               "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,"
               "\"tid\":%d,\"args\":{\"name\":\"allocations\"}},\n"
               "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,"
               "\"tid\":%d,\"args\":{\"name\":\"memory pressure\"}},\n"
               "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,"
               "\"tid\":%d,\"args\":{\"name\":\"copies (device time)\"}},\n"
               "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,"
               "\"tid\":%d,\"args\":{\"name\":\"spill file I/O\"}}",
            TID_MEMORY, TID_PRESSURE, TID_COPY, TID_DISK);
    /* Other queues that appear. */
    uint64_t seen[64] = {0};
    for (size_t i = 0; i < c->n; i++) {
        uint32_t q = c->ev[i].queue;
        if (q == 0 || q >= 64 * 64 || (seen[q / 64] >> (q % 64) & 1))
            continue;
        seen[q / 64] |= UINT64_C(1) << (q % 64);
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,"
                   "\"tid\":%u,\"args\":{\"name\":\"queue %u\"}}",
                q, q);
    }
}

/* The event that ends the slice begun at i (the same buffer's END, or the
 * next PRESSURE_END), or SIZE_MAX. */
static size_t slice_end(const dump_copy *c, size_t i)
{
    uint32_t k = c->ev[i].kind, want = k + 1;
    for (size_t j = i + 1; j < c->n; j++) {
        if (c->ev[j].kind != want)
            continue;
        if (k == SW_TRACE_PRESSURE_BEGIN || c->ev[j].buffer == c->ev[i].buffer)
            return j;
    }
    return SIZE_MAX;
}

/* A slice on the device's time: from e's dev_begin_ns to dev_end_ns on
 * track tid, with the buffer, its bytes and tag, and event_ts: the ts of
 * the history's event it times (a spill's or restore's slice, which
 * begins when its copy was queued; a disk transfer's own instant). */
static void chrome_timed(FILE *f, const char *name, int tid,
                         const sw_trace_event *e, uint64_t t0,
                         double event_ts)
{
    fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"device\",\"ph\":\"X\","
               "\"ts\":%.3f,\"dur\":%.3f,\"pid\":1,\"tid\":%d,"
               "\"args\":{\"buffer\":%" PRIu64 ",\"bytes\":%" PRIu64,
            name, us_signed(e->dev_begin_ns, t0),
            (double)(e->dev_end_ns - e->dev_begin_ns) / 1000.0, tid,
            e->buffer, e->size);
    fprintf(f, ",\"event_ts\":%.3f,\"tag\":", event_ts);
    json_str(f, e->tag);
    fputs("}}", f);
}

static void write_chrome(FILE *f, const dump_copy *c)
{
    uint64_t t0 = c->n ? c->ev[0].time_ns : 0;
    fputs("{\"traceEvents\":[\n", f);
    chrome_meta(f, c);
    uint64_t last[6] = {UINT64_MAX, UINT64_MAX, UINT64_MAX,
                        UINT64_MAX, UINT64_MAX, UINT64_MAX};
    for (size_t i = 0; i < c->n; i++) {
        const sw_trace_event *e = &c->ev[i];
        double ts = us(e->time_ns, t0);
        /* Counter tracks, when a total moved. */
        if (e->in_use != last[0] || e->cached != last[1] ||
            e->spilled != last[2] || e->host_copies != last[4] ||
            e->spilled_disk != last[5]) {
            fprintf(f, ",\n{\"name\":\"memory\",\"ph\":\"C\",\"ts\":%.3f,"
                       "\"pid\":1,\"tid\":0,\"args\":{\"in_use\":%" PRIu64
                       ",\"cached\":%" PRIu64 ",\"spilled\":%" PRIu64
                       ",\"host_copies\":%" PRIu64 ",\"spilled_disk\":%" PRIu64
                       "}}",
                    ts, e->in_use, e->cached, e->spilled, e->host_copies,
                    e->spilled_disk);
            last[0] = e->in_use, last[1] = e->cached, last[2] = e->spilled;
            last[4] = e->host_copies, last[5] = e->spilled_disk;
        }
        if (e->budget != last[3]) {
            fprintf(f, ",\n{\"name\":\"budget\",\"ph\":\"C\",\"ts\":%.3f,"
                       "\"pid\":1,\"tid\":0,\"args\":{\"budget\":%" PRIu64
                       "}}",
                    ts, e->budget);
            last[3] = e->budget;
        }
        const char *name = kind_names[e->kind];
        switch (e->kind) {
        case SW_TRACE_SPILL_BEGIN:
        case SW_TRACE_RESTORE_BEGIN:
        case SW_TRACE_PRESSURE_BEGIN: {
            /* A slice from begin to end on the queue's (or pressure)
             * track; an end that was not kept leaves an instant. */
            size_t j = slice_end(c, i);
            bool pressure = e->kind == SW_TRACE_PRESSURE_BEGIN;
            const char *sname = pressure ? "pressure callbacks"
                                : e->kind == SW_TRACE_SPILL_BEGIN ? "spill"
                                                                  : "restore";
            fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"memory\",\"ph\":\"%s\","
                       "\"ts\":%.3f,",
                    sname, j == SIZE_MAX ? "i" : "X", ts);
            if (j != SIZE_MAX)
                fprintf(f, "\"dur\":%.3f,", us(c->ev[j].time_ns, e->time_ns));
            else
                fputs("\"s\":\"t\",", f);
            fprintf(f, "\"pid\":1,\"tid\":%u,\"args\":{\"buffer\":%" PRIu64
                       ",\"bytes\":%" PRIu64 ",\"aux\":%" PRIu64 ",\"tag\":",
                    pressure ? (unsigned)TID_PRESSURE : e->queue, e->buffer,
                    e->size, e->aux);
            json_str(f, e->tag);
            if (j != SIZE_MAX)
                fprintf(f, ",\"%s\":%" PRIu64, pressure ? "freed" : "failed",
                        c->ev[j].aux);
            fputs("}}", f);
            if (j != SIZE_MAX && c->ev[j].dev_end_ns != 0)
                chrome_timed(f, c->ev[j].kind == SW_TRACE_SPILL_END
                                    ? "spill (device)"
                                    : "restore (device)",
                             TID_COPY, &c->ev[j], t0, ts);
            break;
        }
        case SW_TRACE_SPILL_END:
        case SW_TRACE_RESTORE_END:
        case SW_TRACE_PRESSURE_END:
            break; /* drawn with their begin */
        case SW_TRACE_OOM:
            fprintf(f, ",\n{\"name\":\"OOM\",\"cat\":\"memory\",\"ph\":\"i\","
                       "\"s\":\"p\",\"ts\":%.3f,\"pid\":1,\"tid\":%d,"
                       "\"args\":{\"requested\":%" PRIu64 ",\"tag\":",
                    ts, TID_MEMORY, e->size);
            json_str(f, e->tag);
            fputs(",\"report\":", f);
            json_str(f, oom_text(c, e->aux));
            fputs("}}", f);
            break;
        case SW_TRACE_GC:
            fprintf(f, ",\n{\"name\":\"gc\",\"cat\":\"memory\",\"ph\":\"i\","
                       "\"s\":\"t\",\"ts\":%.3f,\"pid\":1,\"tid\":%d}",
                    ts, TID_PRESSURE);
            break;
        default:
            fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"memory\",\"ph\":\"i\","
                       "\"s\":\"t\",\"ts\":%.3f,\"pid\":1,\"tid\":%d,"
                       "\"args\":{\"buffer\":%" PRIu64 ",\"bytes\":%" PRIu64
                       ",\"queue\":%u,\"aux\":%" PRIu64 ",\"tag\":",
                    name, ts,
                    e->kind == SW_TRACE_QUEUE_CREATE ||
                            e->kind == SW_TRACE_QUEUE_DESTROY
                        ? (int)e->queue
                        : TID_MEMORY,
                    e->buffer, e->size, e->queue, e->aux);
            json_str(f, e->tag);
            fputs("}}", f);
            if (e->dev_end_ns != 0 && (e->kind == SW_TRACE_DISK_WRITE ||
                                       e->kind == SW_TRACE_DISK_READ))
                chrome_timed(f, e->kind == SW_TRACE_DISK_WRITE
                                    ? "disk write (I/O)"
                                    : "disk read (I/O)",
                             TID_DISK, e, t0, ts);
            break;
        }
    }
    fprintf(f, "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{"
               "\"spillway_device\":");
    json_str(f, c->name);
    fprintf(f, ",\"events\":%zu,\"dropped\":%" PRIu64 "}}\n", c->n,
            c->dropped);
}

static void write_event_json(FILE *f, const sw_trace_event *e)
{
    fprintf(f, "{\"seq\":%" PRIu64 ",\"time_ns\":%" PRIu64 ",\"kind\":\"%s\","
               "\"queue\":%u,\"buffer\":%" PRIu64 ",\"size\":%" PRIu64
               ",\"aux\":%" PRIu64 ",\"in_use\":%" PRIu64
               ",\"cached\":%" PRIu64 ",\"spilled\":%" PRIu64
               ",\"budget\":%" PRIu64 ",\"host_copies\":%" PRIu64
               ",\"spilled_disk\":%" PRIu64 ",\"dev_begin_ns\":%" PRIu64
               ",\"dev_end_ns\":%" PRIu64 ",\"tag\":",
            e->seq, e->time_ns, kind_names[e->kind], e->queue, e->buffer,
            e->size, e->aux, e->in_use, e->cached, e->spilled, e->budget,
            e->host_copies, e->spilled_disk, e->dev_begin_ns, e->dev_end_ns);
    json_str(f, e->tag);
    fputc('}', f);
}

static void write_snapshot(FILE *f, const dump_copy *c)
{
    const sw_memory_info *m = &c->mi;
    fputs("{\"format\":\"spillway-snapshot\",\"version\":1,\"device\":", f);
    json_str(f, c->name);
    fprintf(f, ",\"time_ns\":%" PRIu64 ",\n\"totals\":{\"in_use\":%" PRIu64
               ",\"peak\":%" PRIu64 ",\"cached\":%" PRIu64
               ",\"spilled\":%" PRIu64 ",\"budget\":%" PRIu64
               ",\"device_free\":%" PRIu64 ",\"device_total\":%" PRIu64
               ",\"allocs\":%" PRIu64 ",\"frees\":%" PRIu64
               ",\"spills\":%" PRIu64 ",\"restores\":%" PRIu64
               ",\"ooms\":%" PRIu64 ",\"gc_runs\":%" PRIu64
               ",\"host_copies\":%" PRIu64 ",\"clean_evictions\":%" PRIu64
               ",\"host_budget\":%" PRIu64 ",\"spilled_disk\":%" PRIu64
               "},\n\"buffers\":[",
            now_ns(), m->in_use, m->peak, m->cached, m->spilled, m->budget,
            m->device_free, m->device_total, m->allocs, m->frees, m->spills,
            m->restores, m->ooms, m->gc_runs, m->host_copies,
            m->clean_evictions, m->host_budget, m->spilled_disk);
    for (size_t i = 0; i < c->nbufs; i++) {
        const sw_buffer_info *b = &c->bufs[i];
        fprintf(f, "%s\n{\"id\":%" PRIu64 ",\"tag\":", i ? "," : "", b->id);
        json_str(f, b->tag);
        fprintf(f, ",\"size\":%" PRIu64 ",\"alloc_size\":%" PRIu64
                   ",\"state\":\"%s\",\"external\":%s,\"moving\":%s,"
                   "\"pins\":%u,\"leases\":%u,\"views\":%u,\"handles\":%u,"
                   "\"last_use\":%" PRIu64 ",\"queues\":%" PRIu64
                   ",\"on_disk\":%s,\"host_copy\":%s}",
                b->size, b->alloc_size,
                b->state == SW_SPILLED ? "spilled" : "resident",
                b->external ? "true" : "false", b->moving ? "true" : "false",
                b->pins, b->leases, b->views, b->handles, b->last_use,
                b->queues, b->on_disk ? "true" : "false",
                b->host_copy ? "true" : "false");
    }
    fprintf(f, "],\n\"history\":{\"dropped\":%" PRIu64 ",\"events\":[",
            c->dropped);
    for (size_t i = 0; i < c->n; i++) {
        fputs(i ? ",\n" : "\n", f);
        write_event_json(f, &c->ev[i]);
    }
    fputs("]},\n\"oom_reports\":[", f);
    bool any = false;
    for (uint64_t k = c->oom_next > SW__TRACE_OOM_KEPT
                          ? c->oom_next - SW__TRACE_OOM_KEPT
                          : 0;
         k < c->oom_next; k++) {
        const char *r = oom_text(c, k);
        if (r == NULL)
            continue;
        fprintf(f, "%s{\"aux\":%" PRIu64 ",\"report\":", any ? "," : "", k);
        json_str(f, r);
        fputc('}', f);
        any = true;
    }
    fputs("]}\n", f);
}

SW_API int sw_trace_dump(sw_device *dev, const char *path, const char *format)
{
    if (path == NULL || format == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "path or format is NULL");
    bool chrome = strcmp(format, "chrome") == 0;
    if (!chrome && strcmp(format, "snapshot") != 0)
        return sw__errorf(SW_ERR_INVALID_ARG, "unknown memory history "
                          "format '%.40s': \"chrome\" (Perfetto, "
                          "chrome://tracing) or \"snapshot\"", format);
    dump_copy c;
    memset(&c, 0, sizeof c);
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    if (!dev->trace.started) {
        sw__unlock(dev);
        return sw__errorf(SW_ERR_INVALID_ARG, "%s: no memory history to "
                          "dump (sw_trace_start was not called)", dev->name);
    }
    rc = copy_locked(dev, &c, !chrome);
    sw__unlock(dev);
    if (rc != SW_OK) {
        copy_free(&c);
        return sw__errorf(rc, "no host memory to copy the memory history");
    }
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        int e = errno;
        copy_free(&c);
        return sw__errorf(SW_ERR_INVALID_ARG, "cannot write the memory "
                          "history to '%.200s': %s", path, strerror(e));
    }
    if (chrome)
        write_chrome(f, &c);
    else
        write_snapshot(f, &c);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        copy_free(&c);
        return sw__errorf(SW_ERR_INVALID_ARG, "writing the memory history "
                          "to '%.200s' failed", path);
    }
    copy_free(&c);
    return SW_OK;
}
