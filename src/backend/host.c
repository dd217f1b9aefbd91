/*
 * host.c -- the process's own memory as a device (`host:0`): accounting
 * only.
 *
 * The divisions of this file, in order:
 *   - The host's memory: MemTotal/MemAvailable, a cgroup's limit,
 *     SPILLWAY_HOST_MEMORY.
 *   - Kernels: the built-in kernels on the CPU.
 *   - Operations (the ops table's functions): devices; memory; queues;
 *     transfers; kernels; events.
 *   - The ops table.
 *
 * What it is for.  A runtime whose "device" is the CPU (or a unified-memory
 * machine, where the GPU computes in the same memory as the host, as on
 * Apple silicon with Metal) still wants what spillway's core gives: what
 * is live and its peaks, a budget, the pressure callbacks and Python's
 * garbage collector run before an allocation fails, an out-of-memory
 * report that names the largest buffers, queues and events.  What it
 * cannot want is spilling: there is no slower memory to spill to, and a
 * copy from host memory to host memory frees nothing.  So this backend
 * reports props.no_spill (contract version 3), and the core then never
 * makes its buffers spill candidates: a budget that would be passed is an
 * out-of-memory error once the pressure callbacks have run, and `spilled`
 * stays 0.  (docs/host.md.)
 *
 * Model.
 *  - One device, host:0.  Its memory comes from the C library
 *    (posix_memalign, 256-byte aligned), not from sw__malloc: it is the
 *    device's memory, which the caller asked for, not the library's own
 *    (so SW_FAULT_HOST_ALLOC does not fail it; SW_FAULT_ALLOC, the core's
 *    device-allocation fault, does).
 *  - Capacity: SPILLWAY_HOST_MEMORY when set (a size, e.g. 2G), enforced:
 *    an allocation past it is SW_ERR_OOM, as on a device.  Otherwise the
 *    host's MemTotal (or the cgroup's memory.max, when lower), and an
 *    allocation larger than what the kernel says is available now
 *    (MemAvailable, or the cgroup's room) is refused with SW_ERR_OOM rather
 *    than left to the kernel's OOM killer.  device_free is MemAvailable
 *    (never more than the capacity left), and "unknown" where
 *    /proc/meminfo cannot be read: it is never invented.
 *  - Work runs at once, in the calling thread, when it is enqueued: every
 *    queue is trivially in order, every event is complete when recorded,
 *    and a stream-ordered free is a free.  Queues give no concurrency, and
 *    a kernel runs under the core's device lock.
 *  - Addresses are host addresses (host_addressable), so DLPack exports
 *    them as CPU memory.
 */
#include "backend.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HOST__ALIGN 256

/* ------------------------------------------------------------------------
 * The host's memory
 * ---------------------------------------------------------------------- */

/* A "Key:   123 kB" line of /proc/meminfo, in bytes; 0 if absent. */
static uint64_t host__meminfo(const char *text, const char *key)
{
    size_t klen = strlen(key);
    for (const char *p = text; p != NULL && *p; p = strchr(p, '\n')) {
        if (*p == '\n')
            p++;
        if (strncmp(p, key, klen) == 0 && p[klen] == ':') {
            unsigned long long kb = strtoull(p + klen + 1, NULL, 10);
            return (uint64_t)kb * 1024u;
        }
    }
    return 0;
}

/* A file's first line as a number; 0 when absent, "max" or not one. */
static uint64_t host__read_number(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    char buf[64] = "";
    uint64_t v = 0;
    if (fgets(buf, sizeof buf, f) != NULL && buf[0] >= '0' && buf[0] <= '9')
        v = (uint64_t)strtoull(buf, NULL, 10);
    fclose(f);
    return v;
}

/* What the kernel says now: the memory in total and what is available,
 * both bounded by the process's cgroup (v2) when it has a limit.  Returns
 * 0 when /proc/meminfo cannot be read (then both are 0). */
static int host__probe(uint64_t *total, uint64_t *avail)
{
    *total = *avail = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f == NULL)
        return 0;
    char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    *total = host__meminfo(text, "MemTotal");
    *avail = host__meminfo(text, "MemAvailable");
    if (*total == 0) {
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0)
            *total = (uint64_t)pages * (uint64_t)page;
    }
    if (*avail == 0) /* kernels before 3.14 */
        *avail = host__meminfo(text, "MemFree");
    uint64_t limit = host__read_number("/sys/fs/cgroup/memory.max");
    if (limit > 0 && (*total == 0 || limit < *total)) {
        uint64_t used = host__read_number("/sys/fs/cgroup/memory.current");
        *total = limit;
        uint64_t room = used < limit ? limit - used : 0;
        if (room < *avail)
            *avail = room;
    }
    return *total > 0;
}

/* SPILLWAY_HOST_MEMORY: *cap = 0 when unset. */
static int host__config(uint64_t *cap)
{
    *cap = 0;
    const char *s = getenv("SPILLWAY_HOST_MEMORY");
    if (s == NULL || s[0] == '\0')
        return SW_OK;
    uint64_t v = 0;
    if (sw_parse_size(s, &v) != SW_OK || v < SW_ALLOC_GRANULARITY ||
        v > SIZE_MAX)
        return sw__errorf(SW_ERR_INVALID_ARG,
                          "SPILLWAY_HOST_MEMORY='%.100s' is not a size of "
                          "host memory (expected bytes with an optional K, "
                          "M, G or T suffix, e.g. 512M or 8G)",
                          s);
    *cap = v - v % SW_ALLOC_GRANULARITY;
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * Kernels: as backend.h and spillway.h state them.  Integers compute in
 * unsigned types (wrapping); a*x + y rounds twice (the build is ISO C11,
 * where GCC contracts nothing into an FMA); sums add in
 * index order, float32 and float64 into one double, int32 sign-extended
 * and int64 into one wrapping 64-bit integer.
 * ---------------------------------------------------------------------- */

#define HOST__ELEMENTWISE(NAME, T)                                            \
    static void NAME(sw_kernel k, T *o, const T *a, const T *b, T alpha,      \
                     size_t n)                                                \
    {                                                                         \
        switch (k) {                                                          \
        case SW_KERNEL_ADD:                                                   \
            for (size_t i = 0; i < n; i++)                                    \
                o[i] = a[i] + b[i];                                           \
            break;                                                            \
        case SW_KERNEL_SCALE:                                                 \
            for (size_t i = 0; i < n; i++)                                    \
                o[i] = alpha * a[i];                                          \
            break;                                                            \
        case SW_KERNEL_AXPY:                                                  \
            for (size_t i = 0; i < n; i++) {                                  \
                T t = alpha * a[i];                                           \
                o[i] = t + o[i];                                              \
            }                                                                 \
            break;                                                            \
        default:                                                              \
            break;                                                            \
        }                                                                     \
    }
HOST__ELEMENTWISE(host__ew_f32, float)
HOST__ELEMENTWISE(host__ew_f64, double)
HOST__ELEMENTWISE(host__ew_u32, uint32_t)
HOST__ELEMENTWISE(host__ew_u64, uint64_t)

static void host__fill(unsigned char *dst, size_t n, const unsigned char *pat,
                       size_t psize)
{
    int uniform = 1;
    for (size_t i = 1; i < psize; i++)
        uniform &= pat[i] == pat[0];
    if (uniform) {
        memset(dst, pat[0], n);
        return;
    }
    for (size_t i = 0; i < n; i += psize)
        memcpy(dst + i, pat, psize);
}

static void host__sum(sw_dtype d, const unsigned char *a, size_t n,
                      unsigned char *out)
{
    double f = 0.0;
    uint64_t u = 0;
    for (size_t i = 0; i < n; i++) {
        switch (d) {
        case SW_FLOAT32: {
            float x;
            memcpy(&x, a + 4 * i, 4);
            f += (double)x;
            break;
        }
        case SW_FLOAT64: {
            double x;
            memcpy(&x, a + 8 * i, 8);
            f += x;
            break;
        }
        case SW_INT32: {
            int32_t x;
            memcpy(&x, a + 4 * i, 4);
            u += (uint64_t)(int64_t)x;
            break;
        }
        default: {
            uint64_t x;
            memcpy(&x, a + 8 * i, 8);
            u += x;
            break;
        }
        }
    }
    if (d == SW_FLOAT32 || d == SW_FLOAT64)
        memcpy(out, &f, 8);
    else
        memcpy(out, &u, 8);
}

/* ------------------------------------------------------------------------
 * Devices, queues, events
 * ---------------------------------------------------------------------- */

struct sw__bqueue {
    sw__bdev *dev;
    sw__bqueue *next; /* in dev->queues (the device lock) */
};

struct sw__bdev {
    sw__bqueue dq;
    sw__bqueue *queues; /* made by queue_create: what queue_wrap adopts */
    uint64_t cap;       /* SPILLWAY_HOST_MEMORY, 0 when unset */
    uint64_t total;     /* props.total */
    uint64_t allocated; /* bytes of live allocations (device lock) */
};

/* Work is done when it is enqueued: every event is complete, and all are
 * the same one. */
struct sw__bevent {
    int unused;
};
static sw__bevent host__done;

/* ------------------------------------------------------------------------
 * Operations: devices
 * ---------------------------------------------------------------------- */

static int host_device_count(int *count, char *why, size_t why_len)
{
    uint64_t cap = 0;
    int rc = host__config(&cap);
    if (rc != SW_OK)
        return rc;
    if (why_len > 0)
        why[0] = '\0';
    *count = 1;
    return SW_OK;
}

static int host_open(int index, sw__bdev **out, sw__device_props *props)
{
    uint64_t cap = 0;
    int rc = host__config(&cap);
    if (rc != SW_OK)
        return rc;
    if (index != 0)
        return sw__errorf(SW_ERR_NO_DEVICE, "host:%d: no such device (the "
                          "host is host:0)", index);
    uint64_t total = 0, avail = 0;
    int known = host__probe(&total, &avail);
    sw__bdev *d = sw__calloc(1, sizeof *d);
    if (d == NULL)
        return sw__errorf(SW_ERR_HOST_OOM, "host:0: out of host memory");
    d->dq.dev = d;
    d->cap = cap;
    d->total = cap != 0 ? cap : total;

    char size[32];
    sw_format_bytes(d->total, size, sizeof size);
    memset(props, 0, sizeof *props);
#if SW__BACKEND_VERSION >= 3
#define HOST__SPILLS "never spills"
#else
    /* A core without props.no_spill spills this device's buffers into
     * more host memory: say so rather than promise otherwise. */
#define HOST__SPILLS "this core still spills it"
#endif
    snprintf(props->description, sizeof props->description,
             "the process's own memory, %.24s%s; kernels on the CPU; "
             "accounting only (" HOST__SPILLS ")",
             d->total ? size : "size unknown",
             cap ? " (SPILLWAY_HOST_MEMORY)" : known ? " (the host's)" : "");
    props->total = d->total;
    props->max_alloc = 0;
    props->host_addressable = 1;
    props->host_compute = 1;
#if SW__BACKEND_VERSION >= 3
    props->no_spill = 1;
#endif
    *out = d;
    return SW_OK;
}

/* pre: nothing allocated, no queue but the default (the core's). */
static void host_close(sw__bdev *d) { sw__free(d); }

/* ------------------------------------------------------------------------
 * Operations: memory
 * ---------------------------------------------------------------------- */

static int host_alloc(sw__bdev *d, size_t size, uintptr_t *mem)
{
    char b1[32], b2[32];
    if (d->cap != 0 && (d->allocated > d->cap || size > d->cap - d->allocated))
        return sw__errorf(SW_ERR_OOM, "host:0: %zu bytes more would pass "
                          "SPILLWAY_HOST_MEMORY=%s (%s allocated)", size,
                          sw_format_bytes(d->cap, b1, sizeof b1),
                          sw_format_bytes(d->allocated, b2, sizeof b2));
    if (d->cap == 0 && size >= ((size_t)1 << 20)) {
        /* Past what the kernel can give without swapping or killing. */
        uint64_t total = 0, avail = 0;
        if (host__probe(&total, &avail) && size > avail)
            return sw__errorf(SW_ERR_OOM, "host:0: %zu bytes is more than "
                              "the host has available (%s)", size,
                              sw_format_bytes(avail, b1, sizeof b1));
    }
    void *p = NULL;
    int e = posix_memalign(&p, HOST__ALIGN, size);
    if (e != 0 || p == NULL)
        return sw__errorf(SW_ERR_OOM, "host:0: posix_memalign of %zu bytes "
                          "failed: %s", size, strerror(e ? e : ENOMEM));
    d->allocated += size;
    *mem = (uintptr_t)p;
    return SW_OK;
}

/* Stream order holds already: all work enqueued so far has run. */
static int host_free(sw__bdev *d, sw__bqueue *q, uintptr_t mem, size_t size)
{
    (void)q;
    free((void *)mem);
    d->allocated -= size;
    return SW_OK;
}

static int host_mem_info(sw__bdev *d, uint64_t *free_bytes, uint64_t *total,
                         int *free_known)
{
    uint64_t t = 0, avail = 0;
    int known = host__probe(&t, &avail);
    if (d->cap != 0) {
        uint64_t left = d->allocated < d->cap ? d->cap - d->allocated : 0;
        if (!known || left < avail)
            avail = left;
        known = 1; /* at most what is left of the cap, at least that known */
    }
    *free_bytes = known ? avail : 0;
    *total = d->total;
    *free_known = known;
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * Operations: queues
 * ---------------------------------------------------------------------- */

static sw__bqueue *host_default_queue(sw__bdev *d) { return &d->dq; }

static int host_queue_create(sw__bdev *d, sw__bqueue **out)
{
    sw__bqueue *q = sw__calloc(1, sizeof *q);
    if (q == NULL)
        return sw__errorf(SW_ERR_HOST_OOM, "host:0: no host memory for a "
                          "queue");
    q->dev = d;
    q->next = d->queues;
    d->queues = q;
    *out = q;
    return SW_OK;
}

static void host_queue_destroy(sw__bqueue *q)
{
    if (q == NULL || q == &q->dev->dq)
        return;
    sw__bqueue **pp = &q->dev->queues;
    while (*pp != q)
        pp = &(*pp)->next;
    *pp = q->next;
    sw__free(q);
}

/* A host queue's native handle is its address. */
static int host_queue_native(sw__bqueue *q, uintptr_t *handle)
{
    *handle = (uintptr_t)q;
    return SW_OK;
}

/* The host has no runtime but spillway: every queue of it is spillway's
 * own, which the core never adopts (the default queue's address is also
 * the device's context's).  Looked up among the device's, never
 * dereferenced, to say which it is. */
static int host_queue_wrap(sw__bdev *d, uintptr_t handle, sw__bqueue **out)
{
    (void)out;
    bool found = handle == (uintptr_t)&d->dq;
    for (sw__bqueue *q = d->queues; q && !found; q = q->next)
        found = (uintptr_t)q == handle;
    if (!found)
        return sw__errorf(SW_ERR_INVALID_ARG, "host:0: %#jx is not a live "
                          "queue of this device", (uintmax_t)handle);
    return sw__errorf(SW_ERR_INVALID_ARG, "host:0: %#jx is spillway's own "
                      "%s: use that queue itself (the host has no stream of "
                      "another runtime to adopt)", (uintmax_t)handle,
                      handle == (uintptr_t)&d->dq ? "default queue"
                                                  : "queue");
}

static int host_native_context(sw__bdev *d, uintptr_t *context)
{
    *context = (uintptr_t)d;
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * Operations: transfers and kernels (done at once)
 * ---------------------------------------------------------------------- */

static int host_write(sw__bqueue *q, uintptr_t dst, size_t dst_off,
                      const void *src, size_t n)
{
    (void)q;
    memcpy((void *)(dst + dst_off), src, n);
    return SW_OK;
}

static int host_read(sw__bqueue *q, void *dst, uintptr_t src, size_t src_off,
                     size_t n)
{
    (void)q;
    memcpy(dst, (const void *)(src + src_off), n);
    return SW_OK;
}

static int host_copy(sw__bqueue *q, uintptr_t dst, size_t dst_off,
                     uintptr_t src, size_t src_off, size_t n)
{
    (void)q;
    memmove((void *)(dst + dst_off), (const void *)(src + src_off), n);
    return SW_OK;
}

static int host_fill(sw__bqueue *q, uintptr_t dst, size_t dst_off, size_t n,
                     const void *pattern, size_t pattern_size)
{
    (void)q;
    host__fill((unsigned char *)(dst + dst_off), n, pattern, pattern_size);
    return SW_OK;
}

/* The core has checked everything (kernel, one of the four dtypes of
 * props.dtypes == 0, ranges, alignment of typed operands). */
static int host_launch(sw__bqueue *q, const sw_kernel_args *k)
{
    (void)q;
    size_t es = sw_dtype_size(k->dtype);
    size_t bytes = k->n * es;
    unsigned char *o = (unsigned char *)(k->out.base + k->out.offset);
    const unsigned char *a =
        (const unsigned char *)(k->a.base + k->a.offset);
    const unsigned char *b =
        (const unsigned char *)(k->b.base + k->b.offset);
    float af = (float)k->alpha.f;
    uint32_t a32 = (uint32_t)(uint64_t)k->alpha.i;
    uint64_t a64 = (uint64_t)k->alpha.i;
    switch (k->kernel) {
    case SW_KERNEL_FILL: {
        unsigned char pat[8];
        if (k->dtype == SW_FLOAT32)
            memcpy(pat, &af, 4);
        else if (k->dtype == SW_FLOAT64)
            memcpy(pat, &k->alpha.f, 8);
        else if (k->dtype == SW_INT32)
            memcpy(pat, &a32, 4);
        else
            memcpy(pat, &a64, 8);
        host__fill(o, bytes, pat, es);
        return SW_OK;
    }
    case SW_KERNEL_COPY:
        memmove(o, a, bytes);
        return SW_OK;
    case SW_KERNEL_SUM:
        host__sum(k->dtype, a, k->n, o);
        return SW_OK;
    default:
        break;
    }
    switch (k->dtype) {
    case SW_FLOAT32:
        host__ew_f32(k->kernel, (float *)(void *)o, (const float *)(const void *)a,
                     (const float *)(const void *)b, af, k->n);
        break;
    case SW_FLOAT64:
        host__ew_f64(k->kernel, (double *)(void *)o,
                     (const double *)(const void *)a,
                     (const double *)(const void *)b, k->alpha.f, k->n);
        break;
    case SW_INT32:
        host__ew_u32(k->kernel, (uint32_t *)(void *)o,
                     (const uint32_t *)(const void *)a,
                     (const uint32_t *)(const void *)b, a32, k->n);
        break;
    default:
        host__ew_u64(k->kernel, (uint64_t *)(void *)o,
                     (const uint64_t *)(const void *)a,
                     (const uint64_t *)(const void *)b, a64, k->n);
        break;
    }
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * Operations: events (always complete)
 * ---------------------------------------------------------------------- */

static int host_event_record(sw__bqueue *q, sw__bevent **out)
{
    (void)q;
    *out = &host__done;
    return SW_OK;
}

static int host_event_query(sw__bevent *ev, int *done)
{
    (void)ev;
    *done = 1;
    return SW_OK;
}

static int host_event_wait(sw__bevent *ev)
{
    (void)ev;
    return SW_OK;
}

static void host_event_release(sw__bevent *ev) { (void)ev; }

static int host_synchronize(sw__bqueue *q)
{
    (void)q;
    return SW_OK;
}

/* Work runs when it is queued: nothing is ever pending (and the core may
 * skip a wait, e.g. the host's pin of sw_launch_begin_q). */
static int host_queue_idle(sw__bqueue *q)
{
    (void)q;
    return 1;
}

static int host_wait_event(sw__bqueue *q, sw__bevent *ev)
{
    (void)q;
    (void)ev;
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * The ops table
 * ---------------------------------------------------------------------- */

const sw__backend_ops sw__host_backend = {
    .version = SW__BACKEND_VERSION,
    .name = "host",
    .device_count = host_device_count,
    .open = host_open,
    .close = host_close,
    .alloc = host_alloc,
    .free = host_free,
    .mem_info = host_mem_info,
    .default_queue = host_default_queue,
    .queue_create = host_queue_create,
    .queue_destroy = host_queue_destroy,
    .write = host_write,
    .read = host_read,
    .copy = host_copy,
    .fill = host_fill,
    .launch = host_launch,
    .event_record = host_event_record,
    .event_query = host_event_query,
    .event_wait = host_event_wait,
    .event_release = host_event_release,
    .synchronize = host_synchronize,
    .wait_event = host_wait_event,
    .queue_idle = host_queue_idle,
    .queue_native = host_queue_native,
    .queue_wrap = host_queue_wrap,
    .native_context = host_native_context,
};
