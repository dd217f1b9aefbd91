/*
 * membank.c -- a spillway backend that lives outside spillway: a device
 * whose memory is a bank of host memory with a fixed capacity, built only
 * against the installed headers,
 *
 *   cc -std=c11 -O2 -ffp-contract=off -fPIC -shared -Wl,--as-needed \
 *      -o libspillway_membank.so membank.c $(pkg-config --cflags --libs spillway)
 *
 * and used by naming it:
 *
 *   SPILLWAY_BACKENDS=$PWD/libspillway_membank.so spillway info
 *   SPILLWAY_BACKENDS=... SPILLWAY_DEVICE=membank:0 python3 -c 'import spillway'
 *
 * It is what a vendor writes for a new device, small enough to read in
 * one sitting: memory (alloc, free, capacity), queues, copies, fills, the
 * built-in kernels on the four element types of contract version 1, and
 * events.  Everything else -- accounting, the cache, budgets, spilling to
 * host memory and back, pressure callbacks and the garbage collector,
 * out-of-memory reports, the memory history, cross-queue ordering, pins
 * for the caller's own kernels -- the core does for it (docs/backends.md).
 *
 * Its device runs work at once, when it is queued: every queue is trivially
 * in order and every event complete, which the contract allows (a GPU's
 * backend queues work on streams instead).  MEMBANK_MEMORY (a size, as
 * "256M"; default 256 MiB) is each device's capacity, enforced;
 * MEMBANK_DEVICES (default 1) their number.
 *
 * Every call into spillway goes through the host table the loading
 * library lends (sw_backend_host): the library's allocator, so that fault
 * injection reaches this file's out-of-memory paths, its messages and its
 * helpers.  So the shared object needs no spillway symbol at run time
 * (--as-needed drops the library pkg-config names) and loads into any
 * program that holds the library, the Python module included.
 */
#include <spillway/backend.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const sw_backend_host *host; /* set by sw_backend_entry */

#define MB_MAX_DEVICES 8

struct sw_bqueue {
    sw_bdev *dev;
    sw_bqueue *next; /* the device's queues (under the device lock) */
};

struct sw_bdev {
    int index;
    uint64_t capacity, used;
    sw_bqueue dq;      /* the default queue */
    sw_bqueue *queues; /* queue_create's */
};

/* Work is done when it is queued: one event stands for every point. */
struct sw_bevent {
    int unused;
};
static sw_bevent mb_done;

/* ------------------------------------------------------------------------
 * Configuration
 * ---------------------------------------------------------------------- */

static int mb_config(uint64_t *capacity, int *ndev)
{
    *capacity = UINT64_C(256) << 20;
    *ndev = 1;
    const char *m = getenv("MEMBANK_MEMORY");
    if (m != NULL && *m && host->parse_size(m, capacity) != SW_OK)
        return host->errorf(SW_ERR_INVALID_ARG, "MEMBANK_MEMORY='%.60s' is "
                            "not a size (e.g. 256M)", m);
    const char *d = getenv("MEMBANK_DEVICES");
    if (d != NULL && *d) {
        char *end = NULL;
        long v = strtol(d, &end, 10);
        if (*end != '\0' || v < 0 || v > MB_MAX_DEVICES)
            return host->errorf(SW_ERR_INVALID_ARG, "MEMBANK_DEVICES='%.20s'"
                                ": 0 to %d", d, MB_MAX_DEVICES);
        *ndev = (int)v;
    }
    if (*capacity < SW_ALLOC_GRANULARITY)
        return host->errorf(SW_ERR_INVALID_ARG, "MEMBANK_MEMORY: at least "
                            "%u bytes", SW_ALLOC_GRANULARITY);
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * Devices and memory
 * ---------------------------------------------------------------------- */

static int mb_device_count(int *count, char *why, size_t why_len)
{
    uint64_t cap;
    int rc = mb_config(&cap, count);
    if (rc == SW_OK && *count == 0)
        snprintf(why, why_len, "MEMBANK_DEVICES=0");
    return rc;
}

static int mb_open(int index, sw_bdev **out, sw_device_props *props)
{
    uint64_t cap;
    int n;
    int rc = mb_config(&cap, &n);
    if (rc != SW_OK)
        return rc;
    sw_bdev *d = host->calloc(1, sizeof *d);
    if (d == NULL)
        return host->errorf(SW_ERR_HOST_OOM, "membank:%d: no host memory",
                            index);
    d->index = index;
    d->capacity = cap;
    d->dq.dev = d;
    snprintf(props->description, sizeof props->description,
             "membank: %llu MiB of host memory run by a backend outside "
             "spillway (examples/backend)",
             (unsigned long long)(cap >> 20));
    props->total = cap;
    props->host_addressable = 1;
    props->dtypes = (1u << SW_FLOAT32) | (1u << SW_FLOAT64) |
                    (1u << SW_INT32) | (1u << SW_INT64);
    snprintf(props->dtypes_why, sizeof props->dtypes_why,
             "membank computes with float32, float64, int32 and int64");
    *out = d;
    return SW_OK;
}

static void mb_close(sw_bdev *d)
{
    while (d->queues != NULL) { /* (the core destroyed them all) */
        sw_bqueue *q = d->queues;
        d->queues = q->next;
        host->free(q);
    }
    host->free(d);
}

static int mb_alloc(sw_bdev *d, size_t size, uintptr_t *mem)
{
    if (size > d->capacity - d->used)
        return host->errorf(SW_ERR_OOM, "membank:%d: %zu bytes asked, %llu "
                            "free of %llu", d->index, size,
                            (unsigned long long)(d->capacity - d->used),
                            (unsigned long long)d->capacity);
    /* Device memory is not the library's bookkeeping: the C library's,
     * aligned for any element (size is a multiple of 512, as C11's
     * aligned_alloc asks). */
    void *p = aligned_alloc(64, size);
    if (p == NULL)
        return host->errorf(SW_ERR_OOM, "membank:%d: the bank could not "
                            "provide %zu bytes", d->index, size);
    d->used += size;
    *mem = (uintptr_t)p;
    return SW_OK;
}

/* Work before the free is done already: the memory goes now. */
static int mb_free(sw_bdev *d, sw_bqueue *q, uintptr_t mem, size_t size)
{
    (void)q;
    free((void *)mem);
    d->used -= size;
    return SW_OK;
}

static int mb_mem_info(sw_bdev *d, uint64_t *free_bytes, uint64_t *total,
                       int *known)
{
    *free_bytes = d->capacity - d->used;
    *total = d->capacity;
    *known = 1;
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * Queues
 * ---------------------------------------------------------------------- */

static sw_bqueue *mb_default_queue(sw_bdev *d) { return &d->dq; }

static int mb_queue_create(sw_bdev *d, sw_bqueue **out)
{
    sw_bqueue *q = host->calloc(1, sizeof *q);
    if (q == NULL)
        return host->errorf(SW_ERR_HOST_OOM, "membank:%d: no host memory "
                            "for a queue", d->index);
    q->dev = d;
    q->next = d->queues;
    d->queues = q;
    *out = q;
    return SW_OK;
}

static void mb_queue_destroy(sw_bqueue *q)
{
    if (q == NULL || q == &q->dev->dq)
        return;
    sw_bqueue **pp = &q->dev->queues;
    while (*pp != q)
        pp = &(*pp)->next;
    *pp = q->next;
    host->free(q);
}

static int mb_queue_native(sw_bqueue *q, uintptr_t *handle)
{
    *handle = (uintptr_t)q;
    return SW_OK;
}

/* A stream of the runtime's own that a caller made, were there one: this
 * device has no runtime but spillway, so every queue on it is spillway's
 * own, which is never adopted (the core refuses those it handed out, and
 * any a backend hands back).  Looked up, never read, to say which. */
static int mb_queue_wrap(sw_bdev *d, uintptr_t handle, sw_bqueue **out)
{
    (void)out;
    int found = handle == (uintptr_t)&d->dq;
    for (sw_bqueue *q = d->queues; q != NULL && !found; q = q->next)
        found = (uintptr_t)q == handle;
    return host->errorf(SW_ERR_INVALID_ARG, "membank:%d: %#llx is %s",
                        d->index, (unsigned long long)handle,
                        found ? "spillway's own queue: use that queue itself"
                              : "not a live queue of this device");
}

static int mb_native_context(sw_bdev *d, uintptr_t *context)
{
    *context = (uintptr_t)d;
    return SW_OK;
}

static int mb_queue_idle(sw_bqueue *q)
{
    (void)q;
    return 1;
}

/* ------------------------------------------------------------------------
 * Transfers and kernels: done at once
 * ---------------------------------------------------------------------- */

static int mb_write(sw_bqueue *q, uintptr_t dst, size_t off, const void *src,
                    size_t n)
{
    (void)q;
    memcpy((char *)dst + off, src, n);
    return SW_OK;
}

static int mb_read(sw_bqueue *q, void *dst, uintptr_t src, size_t off,
                   size_t n)
{
    (void)q;
    memcpy(dst, (const char *)src + off, n);
    return SW_OK;
}

static int mb_copy(sw_bqueue *q, uintptr_t dst, size_t doff, uintptr_t src,
                   size_t soff, size_t n)
{
    (void)q;
    memmove((char *)dst + doff, (const char *)src + soff, n);
    return SW_OK;
}

static int mb_fill(sw_bqueue *q, uintptr_t dst, size_t off, size_t n,
                   const void *pattern, size_t psize)
{
    (void)q;
    unsigned char *p = (unsigned char *)dst + off;
    for (size_t i = 0; i < n; i += psize)
        memcpy(p + i, pattern, psize);
    return SW_OK;
}

/* One kernel for one element type T; integers in an unsigned type U, so
 * that they wrap (the header's rule), floats as one IEEE operation each
 * (built with -ffp-contract=off: no fused multiply-add). */
#define MB_KERNELS(T, U, ACC, alpha_of)                                       \
    static void mb_run_##T(const sw_kernel_args *a)                           \
    {                                                                         \
        T *out = (T *)(a->out.base + a->out.offset);                          \
        const T *x = (const T *)(a->a.base + a->a.offset);                    \
        const T *y = (const T *)(a->b.base + a->b.offset);                    \
        T alpha = alpha_of;                                                   \
        size_t n = a->n;                                                      \
        switch (a->kernel) {                                                  \
        case SW_KERNEL_FILL:                                                  \
            for (size_t i = 0; i < n; i++)                                    \
                out[i] = alpha;                                               \
            break;                                                            \
        case SW_KERNEL_COPY:                                                  \
            memmove(out, x, n * sizeof(T));                                   \
            break;                                                            \
        case SW_KERNEL_ADD:                                                   \
            for (size_t i = 0; i < n; i++)                                    \
                out[i] = (T)((U)x[i] + (U)y[i]);                              \
            break;                                                            \
        case SW_KERNEL_SCALE:                                                 \
            for (size_t i = 0; i < n; i++)                                    \
                out[i] = (T)((U)alpha * (U)x[i]);                             \
            break;                                                            \
        case SW_KERNEL_AXPY:                                                  \
            for (size_t i = 0; i < n; i++) {                                  \
                U p = (U)alpha * (U)x[i];                                     \
                out[i] = (T)(p + (U)out[i]);                                  \
            }                                                                 \
            break;                                                            \
        case SW_KERNEL_SUM: {                                                 \
            ACC s = 0;                                                        \
            for (size_t i = 0; i < n; i++)                                    \
                s += (ACC)x[i];                                               \
            memcpy(out, &s, sizeof s);                                        \
            break;                                                            \
        }                                                                     \
        }                                                                     \
    }

MB_KERNELS(float, float, double, (float)a->alpha.f)
MB_KERNELS(double, double, double, a->alpha.f)
MB_KERNELS(int32_t, uint32_t, uint64_t, (int32_t)(uint32_t)a->alpha.i)
MB_KERNELS(int64_t, uint64_t, uint64_t, (int64_t)a->alpha.i)

static int mb_launch(sw_bqueue *q, const sw_kernel_args *args)
{
    (void)q;
    switch (args->dtype) {
    case SW_FLOAT32: mb_run_float(args); break;
    case SW_FLOAT64: mb_run_double(args); break;
    case SW_INT32: mb_run_int32_t(args); break;
    case SW_INT64: mb_run_int64_t(args); break;
    default:
        return host->errorf(SW_ERR_DTYPE, "membank computes with float32, "
                            "float64, int32 and int64, not %s",
                            host->dtype_name(args->dtype));
    }
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * Events: every point is reached when it is recorded
 * ---------------------------------------------------------------------- */

static int mb_event_record(sw_bqueue *q, sw_bevent **out)
{
    (void)q;
    *out = &mb_done;
    return SW_OK;
}

static int mb_event_query(sw_bevent *ev, int *done)
{
    (void)ev;
    *done = 1;
    return SW_OK;
}

static int mb_event_wait(sw_bevent *ev)
{
    (void)ev;
    return SW_OK;
}

static void mb_event_release(sw_bevent *ev) { (void)ev; }

static int mb_synchronize(sw_bqueue *q)
{
    (void)q;
    return SW_OK;
}

static int mb_wait_event(sw_bqueue *q, sw_bevent *ev)
{
    (void)q;
    (void)ev;
    return SW_OK;
}

static const sw_backend_ops membank_ops = {
    .version = SW_BACKEND_VERSION,
    .name = "membank",
    .device_count = mb_device_count,
    .open = mb_open,
    .close = mb_close,
    .alloc = mb_alloc,
    .free = mb_free,
    .mem_info = mb_mem_info,
    .default_queue = mb_default_queue,
    .queue_create = mb_queue_create,
    .queue_destroy = mb_queue_destroy,
    .write = mb_write,
    .read = mb_read,
    .copy = mb_copy,
    .fill = mb_fill,
    .launch = mb_launch,
    .event_record = mb_event_record,
    .event_query = mb_event_query,
    .event_wait = mb_event_wait,
    .event_release = mb_event_release,
    .synchronize = mb_synchronize,
    .wait_event = mb_wait_event,
    .queue_idle = mb_queue_idle,
    .queue_native = mb_queue_native,
    .queue_wrap = mb_queue_wrap,
    .native_context = mb_native_context,
};

/* The one symbol spillway looks for (SW_BACKEND_ENTRY). */
__attribute__((visibility("default"))) const sw_backend_ops *
sw_backend_entry(const sw_backend_host *h);

const sw_backend_ops *sw_backend_entry(const sw_backend_host *h)
{
    host = h;
    return &membank_ops;
}
