/*
 * fake_libamdhip64.c -- a strict stand-in for the HIP runtime
 * (libamdhip64.so) on the CPU, so that the HIP backend's host side
 * (loading, the current device, pools, the hipMalloc fallback, streams,
 * events, module loading, kernel arguments, deferred frees) runs in CI
 * without a GPU:
 *
 *   SPILLWAY_HIP_LIBRARY=BUILD/tests/c/libamdhip64_fake.so \
 *   SPILLWAY_HIPRTC_LIBRARY=BUILD/tests/c/libhiprtc_fake.so \
 *   SW_TEST_DEVICE=hip:0 BUILD/tests/c/test_spillway
 *
 * It is NOT a GPU and proves nothing about one: it exports the entry
 * points src/backend/hip_api.h declares, with the same prototypes, and
 * implements them on host memory.  Work runs at once, in the calling
 * thread; the order the backend asked for is still kept
 * (tests/standin/stream_order.h), so that what would race on a GPU is
 * caught here.
 *
 * What it checks.  Misuse aborts, loudly (a message on stderr naming the
 * call, then abort()), so that a test cannot pass over it:
 *  - a device range a copy, memset or kernel touches that is not inside a
 *    live allocation (use of freed memory, out of bounds);
 *  - memory allocated in stream order (hipMallocFromPoolAsync) used on a
 *    stream not ordered after the allocation;
 *  - a stream-ordered free (hipFreeAsync) while another stream's earlier
 *    work on the memory is not ordered before it (a free used early), and
 *    a blocking hipFree of memory queued work may still use;
 *  - a free of something that is not a live allocation of that kind;
 *  - an event waited for, queried or synchronized before it was recorded;
 *  - a stream, event, module, function or pool used after it was
 *    destroyed (handles are never freed, so this is detected, not a
 *    use-after-free), and the null stream (spillway never uses it);
 *  - a stream destroyed with work the host has not waited for, a pool
 *    destroyed with live allocations;
 *  - at exit, once every stream is gone (so every device was closed):
 *    allocations, events, modules or pools still live are leaks.
 * And as the runtime would: calls before hipInit fail with
 * hipErrorNotInitialized, a device index other than 0 with
 * hipErrorInvalidDevice, a misaligned typed kernel operand with a sticky
 * hipErrorIllegalAddress.
 *
 * The kernels are emulated by name with the semantics of
 * src/backend/kernels/cuda.cu, sums block by block and thread by thread,
 * so results are the bits the GPU code should produce.  Code objects come
 * from the fake hipRTC (fake_libhiprtc.c, fake_hip.h).
 *
 * Environment: FAKE_HIP_MEMORY (bytes, default 2 GiB), FAKE_HIP_NO_POOLS=1
 * (hipMemPoolCreate fails with hipErrorNotSupported).
 */
#include "backend/hip_api.h"
#include "fake_hip.h"
#include "../standin/stream_order.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))

#define FAKE_DECL(kind, ret, name, params) API ret name params;
SWHIP_FUNCS(FAKE_DECL)
#undef FAKE_DECL

#define LIVE 0x4c495645u
#define DEAD 0x44454144u

/* ------------------------------------------------------------------------
 * State.  Every handle is kept (never freed) in a list of its kind, so
 * that a dead one is recognized.
 * ---------------------------------------------------------------------- */

struct ihipStream_t {
    unsigned magic;
    so_stream so;
    struct ihipStream_t *all;
};
struct ihipEvent_t {
    unsigned magic;
    int recorded;
    so_point pt;
    so_clock vc;
    struct ihipEvent_t *all;
};
struct ihipModule_t {
    unsigned magic;
    char *src;
    struct ihipModule_t *all;
};
struct ihipModuleSymbol_t {
    unsigned magic;
    int kind;
    struct ihipModule_t *module;
    struct ihipModuleSymbol_t *all;
};
struct ihipMemPoolHandle_t {
    unsigned magic;
    size_t used;
    struct ihipMemPoolHandle_t *all;
};

typedef struct fake_alloc {
    uintptr_t base;
    size_t size;
    struct ihipMemPoolHandle_t *pool; /* NULL: hipMalloc */
    so_point born;                    /* gen 0: not stream-ordered */
    so_uses uses;
} fake_alloc;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static swhip_error sticky;
static fake_alloc **allocs; /* sorted by base */
static size_t nallocs, capallocs, allocated;
static size_t capacity = (size_t)2 << 30;
static struct ihipStream_t *streams;
static struct ihipEvent_t *events;
static struct ihipModule_t *modules;
static struct ihipModuleSymbol_t *functions;
static struct ihipMemPoolHandle_t *pools;
static long live_streams, live_events, live_modules, live_pools, ever_streams;
/* One device, so the current one is always 0: a plain global rather than
 * thread-local (with _Thread_local here, LeakSanitizer's check at exit
 * crashed in a test whose exporter thread had called into this module). */
static int current = 0;

static void die(const char *call, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
static void die(const char *call, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fake libamdhip64: %s: ", call);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

#define FIND_LIVE(list, p, call, what)                                        \
    do {                                                                      \
        __typeof__(list) f_ = list;                                           \
        while (f_ != NULL && f_ != (p))                                       \
            f_ = f_->all;                                                     \
        if (f_ == NULL)                                                       \
            die(call, "%p is not a %s this runtime made%s", (void *)(p),      \
                what, (p) == NULL ? " (spillway never uses the null one)"     \
                                  : "");                                      \
        if (f_->magic != LIVE)                                                \
            die(call, "%s %p used after it was destroyed", what,              \
                (void *)(p));                                                 \
    } while (0)

static swhip_error ready(void)
{
    return initialized ? sticky : SWHIP_hipErrorNotInitialized;
}

/* Index of the first allocation with base > p.  Under mu. */
static size_t upper(uintptr_t p)
{
    size_t lo = 0, hi = nallocs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (allocs[mid]->base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The allocation holding [p, p + n), or NULL.  Under mu. */
static fake_alloc *holding(uintptr_t p, size_t n)
{
    size_t i = upper(p);
    if (i == 0)
        return NULL;
    fake_alloc *a = allocs[i - 1];
    return p - a->base <= a->size && n <= a->size - (p - a->base) ? a : NULL;
}

/* Device memory [p, p + n) used by a command of stream s at point pt:
 * inside a live allocation, ordered after its stream-ordered allocation;
 * remembered as a use.  Under mu. */
static void touch(const void *p, size_t n, struct ihipStream_t *s,
                  so_point pt, const char *call, const char *what)
{
    fake_alloc *a = holding((uintptr_t)p, n);
    if (a == NULL)
        die(call, "%s [%p+%zu) is not inside a live allocation (freed, or "
            "out of bounds)", what, p, n);
    if (!so_after(&s->so.vc, a->born))
        die(call, "%s [%p+%zu) was allocated in stream order on another "
            "stream, and this stream does not wait for that allocation",
            what, p, n);
    so_use(&a->uses, pt);
}

/* ------------------------------------------------------------------------
 * Initialization, devices
 * ---------------------------------------------------------------------- */

swhip_error hipInit(unsigned int flags)
{
    if (flags != 0)
        return SWHIP_hipErrorInvalidValue;
    const char *m = getenv("FAKE_HIP_MEMORY");
    pthread_mutex_lock(&mu);
    if (m != NULL && *m)
        capacity = (size_t)strtoull(m, NULL, 10);
    initialized = 1;
    pthread_mutex_unlock(&mu);
    return SWHIP_hipSuccess;
}

swhip_error hipDriverGetVersion(int *version)
{
    *version = 60032830; /* 6.0.32830, as ROCm 6.0 reports it */
    return SWHIP_hipSuccess;
}

swhip_error hipRuntimeGetVersion(int *version)
{
    *version = 60032830;
    return SWHIP_hipSuccess;
}

swhip_error hipGetDeviceCount(int *count)
{
    if (!initialized)
        return SWHIP_hipErrorNotInitialized;
    *count = 1;
    return SWHIP_hipSuccess;
}

swhip_error hipGetDevice(int *device)
{
    if (!initialized)
        return SWHIP_hipErrorNotInitialized;
    *device = current;
    return SWHIP_hipSuccess;
}

swhip_error hipSetDevice(int device)
{
    if (!initialized)
        return SWHIP_hipErrorNotInitialized;
    if (device != 0)
        return SWHIP_hipErrorInvalidDevice;
    current = device;
    return SWHIP_hipSuccess;
}

swhip_error hipDeviceGetName(char *name, int len, swhip_device device)
{
    if (device != 0)
        return SWHIP_hipErrorInvalidDevice;
    snprintf(name, (size_t)len, "%s", FAKE_HIP_NAME);
    return SWHIP_hipSuccess;
}

swhip_error hipDeviceTotalMem(size_t *bytes, swhip_device device)
{
    if (device != 0)
        return SWHIP_hipErrorInvalidDevice;
    *bytes = capacity;
    return SWHIP_hipSuccess;
}

/* The legacy (ROCm 5) hipDeviceProp_t, at the offsets hip_api.h reads
 * (checked against the real struct by tests/hip/sigcheck.c). */
swhip_error hipGetDeviceProperties(void *props, int device)
{
    if (device != 0)
        return SWHIP_hipErrorInvalidDevice;
    unsigned char *p = props;
    memset(p, 0, SWHIP_PROPS_SIZE);
    snprintf((char *)p + SWHIP_PROP_NAME, 256, "%s", FAKE_HIP_NAME);
    size_t total = capacity;
    memcpy(p + SWHIP_PROP_TOTAL_MEM, &total, sizeof total);
    int cus = 4;
    memcpy(p + SWHIP_PROP_MP_COUNT, &cus, sizeof cus);
    snprintf((char *)p + SWHIP_PROP_GCN_ARCH_NAME, 256, "%s", FAKE_HIP_ARCH);
    return SWHIP_hipSuccess;
}

const char *hipGetErrorName(swhip_error error)
{
    switch (error) {
#define FAKE_NAME(n, v)                                                       \
    case v:                                                                   \
        return #n;
        SWHIP_ERRORS(FAKE_NAME)
#undef FAKE_NAME
    }
    return "hipErrorUnknown";
}

const char *hipGetErrorString(swhip_error error)
{
    return error == SWHIP_hipSuccess ? "no error" : "fake runtime error";
}

/* ------------------------------------------------------------------------
 * Memory
 * ---------------------------------------------------------------------- */

swhip_error hipMemGetInfo(size_t *free_bytes, size_t *total)
{
    swhip_error r = ready();
    if (r)
        return r;
    pthread_mutex_lock(&mu);
    *free_bytes = capacity - allocated;
    *total = capacity;
    pthread_mutex_unlock(&mu);
    return SWHIP_hipSuccess;
}

static swhip_error alloc_mem(void **ptr, size_t size,
                             struct ihipMemPoolHandle_t *pool, so_point born)
{
    if (size == 0)
        return SWHIP_hipErrorInvalidValue;
    size_t rounded = (size + 255) & ~(size_t)255;
    pthread_mutex_lock(&mu);
    if (allocated + rounded > capacity) {
        pthread_mutex_unlock(&mu);
        return SWHIP_hipErrorOutOfMemory;
    }
    fake_alloc *a = calloc(1, sizeof *a);
    void *p = aligned_alloc(256, rounded);
    if (a == NULL || p == NULL) {
        pthread_mutex_unlock(&mu);
        free(a);
        free(p);
        return SWHIP_hipErrorOutOfMemory;
    }
    memset(p, 0xA5, rounded); /* not zeroed, as on a GPU */
    if (nallocs == capallocs) {
        size_t cap = capallocs ? 2 * capallocs : 256;
        fake_alloc **v = realloc(allocs, cap * sizeof *v);
        if (v == NULL) {
            pthread_mutex_unlock(&mu);
            free(a);
            free(p);
            return SWHIP_hipErrorOutOfMemory;
        }
        allocs = v;
        capallocs = cap;
    }
    a->base = (uintptr_t)p;
    a->size = rounded;
    a->pool = pool;
    a->born = born;
    size_t i = upper(a->base);
    memmove(&allocs[i + 1], &allocs[i], (nallocs - i) * sizeof *allocs);
    allocs[i] = a;
    nallocs++;
    allocated += rounded;
    if (pool)
        pool->used += rounded;
    pthread_mutex_unlock(&mu);
    *ptr = p;
    return SWHIP_hipSuccess;
}

/* Under mu: the live allocation at ptr of the right kind, removed. */
static fake_alloc *take_alloc(void *ptr, int pooled, const char *call)
{
    size_t i = upper((uintptr_t)ptr);
    if (i == 0 || allocs[i - 1]->base != (uintptr_t)ptr)
        die(call, "%p is not a live allocation (a double free?)", ptr);
    fake_alloc *a = allocs[i - 1];
    if ((a->pool != NULL) != pooled)
        die(call, "%p was allocated %s", ptr,
            pooled ? "with hipMalloc, not from a pool"
                   : "from a pool (free it with hipFreeAsync)");
    memmove(&allocs[i - 1], &allocs[i], (nallocs - i) * sizeof *allocs);
    nallocs--;
    allocated -= a->size;
    if (a->pool)
        a->pool->used -= a->size;
    return a;
}

static void release_alloc(fake_alloc *a)
{
    memset((void *)a->base, 0xDB, a->size); /* poison, like the sim */
    free((void *)a->base);
    so_uses_free(&a->uses);
    free(a);
}

swhip_error hipMalloc(void **ptr, size_t size)
{
    swhip_error r = ready();
    so_point none = {0, 0, 0};
    return r ? r : alloc_mem(ptr, size, NULL, none);
}

swhip_error hipFree(void *ptr)
{
    swhip_error r = ready();
    if (r)
        return r;
    if (ptr == NULL)
        return SWHIP_hipSuccess;
    pthread_mutex_lock(&mu);
    fake_alloc *a = take_alloc(ptr, 0, "hipFree");
    const so_point *u = so_pending_use(&a->uses, &so_host);
    if (u != NULL)
        die("hipFree", "%p is still used by work the host has not waited "
            "for (stream slot %u)", ptr, u->slot);
    pthread_mutex_unlock(&mu);
    release_alloc(a);
    return SWHIP_hipSuccess;
}

swhip_error hipMemPoolCreate(swhip_mempool *pool,
                             const swhip_mempool_props *props)
{
    swhip_error r = ready();
    if (r)
        return r;
    if (getenv("FAKE_HIP_NO_POOLS") != NULL)
        return SWHIP_hipErrorNotSupported;
    if (props->alloc_type != SWHIP_hipMemAllocationTypePinned ||
        props->location.type != SWHIP_hipMemLocationTypeDevice ||
        props->location.id != 0)
        die("hipMemPoolCreate", "bad properties");
    for (size_t i = 0; i < sizeof props->reserved; i++)
        if (props->reserved[i] != 0)
            die("hipMemPoolCreate", "reserved bytes not zero");
    struct ihipMemPoolHandle_t *p = calloc(1, sizeof *p);
    if (p == NULL)
        return SWHIP_hipErrorOutOfMemory;
    p->magic = LIVE;
    pthread_mutex_lock(&mu);
    p->all = pools;
    pools = p;
    live_pools++;
    pthread_mutex_unlock(&mu);
    *pool = p;
    return SWHIP_hipSuccess;
}

swhip_error hipMemPoolDestroy(swhip_mempool pool)
{
    pthread_mutex_lock(&mu);
    FIND_LIVE(pools, pool, "hipMemPoolDestroy", "memory pool");
    if (pool->used != 0)
        die("hipMemPoolDestroy", "%zu bytes still allocated from it",
            pool->used);
    pool->magic = DEAD;
    live_pools--;
    pthread_mutex_unlock(&mu);
    return SWHIP_hipSuccess;
}

swhip_error hipMemPoolSetAttribute(swhip_mempool pool,
                                   swhip_mempool_attr attr, void *value)
{
    (void)value;
    pthread_mutex_lock(&mu);
    FIND_LIVE(pools, pool, "hipMemPoolSetAttribute", "memory pool");
    pthread_mutex_unlock(&mu);
    return attr == SWHIP_hipMemPoolAttrReleaseThreshold
               ? SWHIP_hipSuccess
               : SWHIP_hipErrorInvalidValue;
}

swhip_error hipMemPoolGetAttribute(swhip_mempool pool,
                                   swhip_mempool_attr attr, void *value)
{
    pthread_mutex_lock(&mu);
    FIND_LIVE(pools, pool, "hipMemPoolGetAttribute", "memory pool");
    uint64_t v = pool->used; /* frees run at once: nothing held unused */
    pthread_mutex_unlock(&mu);
    if (attr != SWHIP_hipMemPoolAttrReservedMemCurrent &&
        attr != SWHIP_hipMemPoolAttrUsedMemCurrent)
        return SWHIP_hipErrorInvalidValue;
    memcpy(value, &v, sizeof v);
    return SWHIP_hipSuccess;
}

swhip_error hipMemPoolTrimTo(swhip_mempool pool, size_t keep)
{
    (void)keep;
    pthread_mutex_lock(&mu);
    FIND_LIVE(pools, pool, "hipMemPoolTrimTo", "memory pool");
    pthread_mutex_unlock(&mu);
    return SWHIP_hipSuccess;
}

/* Under mu: stream s is live; a command of it gets its point. */
static so_point enqueue(swhip_stream s, const char *call)
{
    FIND_LIVE(streams, s, call, "stream");
    return so_enqueue(&s->so);
}

swhip_error hipMallocFromPoolAsync(void **ptr, size_t size,
                                   swhip_mempool pool, swhip_stream stream)
{
    swhip_error r = ready();
    if (r)
        return r;
    pthread_mutex_lock(&mu);
    FIND_LIVE(pools, pool, "hipMallocFromPoolAsync", "memory pool");
    so_point born = enqueue(stream, "hipMallocFromPoolAsync");
    pthread_mutex_unlock(&mu);
    return alloc_mem(ptr, size, pool, born);
}

swhip_error hipFreeAsync(void *ptr, swhip_stream stream)
{
    swhip_error r = ready();
    if (r)
        return r;
    pthread_mutex_lock(&mu);
    so_point pt = enqueue(stream, "hipFreeAsync");
    (void)pt;
    fake_alloc *a = take_alloc(ptr, 1, "hipFreeAsync");
    const so_point *u = so_pending_use(&a->uses, &stream->so.vc);
    if (u != NULL)
        die("hipFreeAsync", "%p freed in stream order while work of another "
            "stream (slot %u) that uses it is not ordered before the free "
            "(a stream-ordered free used early)", ptr, u->slot);
    pthread_mutex_unlock(&mu);
    release_alloc(a);
    return SWHIP_hipSuccess;
}

/* ------------------------------------------------------------------------
 * Streams and events
 * ---------------------------------------------------------------------- */

swhip_error hipStreamCreateWithFlags(swhip_stream *stream, unsigned int flags)
{
    swhip_error r = ready();
    if (r)
        return r;
    if (flags != SWHIP_hipStreamNonBlocking)
        die("hipStreamCreateWithFlags", "flags %u: spillway's streams are "
            "non-blocking", flags);
    struct ihipStream_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return SWHIP_hipErrorOutOfMemory;
    pthread_mutex_lock(&mu);
    if (so_stream_create(&s->so) != 0)
        die("hipStreamCreateWithFlags", "more than %d live streams", SO_MAX);
    s->magic = LIVE;
    s->all = streams;
    streams = s;
    live_streams++;
    ever_streams++;
    pthread_mutex_unlock(&mu);
    *stream = s;
    return SWHIP_hipSuccess;
}

/* A live stream's device (this runtime has one: 0); a destroyed or
 * foreign handle is looked up, never read, and answered as the runtime
 * does where it can tell. */
swhip_error hipStreamGetDevice(swhip_stream stream, swhip_device *device)
{
    pthread_mutex_lock(&mu);
    struct ihipStream_t *f = streams;
    while (f != NULL && f != stream)
        f = f->all;
    int live = f != NULL && f->magic == LIVE;
    pthread_mutex_unlock(&mu);
    if (!live)
        return SWHIP_hipErrorInvalidHandle;
    *device = 0;
    return SWHIP_hipSuccess;
}

swhip_error hipStreamDestroy(swhip_stream stream)
{
    pthread_mutex_lock(&mu);
    FIND_LIVE(streams, stream, "hipStreamDestroy", "stream");
    so_point last = {stream->so.slot, stream->so.gen, stream->so.pos};
    if (!so_after(&so_host, last))
        die("hipStreamDestroy", "the stream has work the host has not "
            "waited for");
    so_stream_destroy(&stream->so);
    stream->magic = DEAD;
    live_streams--;
    pthread_mutex_unlock(&mu);
    return SWHIP_hipSuccess;
}

swhip_error hipStreamSynchronize(swhip_stream stream)
{
    swhip_error r = ready();
    pthread_mutex_lock(&mu);
    FIND_LIVE(streams, stream, "hipStreamSynchronize", "stream");
    so_host_sync(&stream->so);
    pthread_mutex_unlock(&mu);
    return r;
}

swhip_error hipEventCreateWithFlags(swhip_event *event, unsigned int flags)
{
    swhip_error r = ready();
    if (r)
        return r;
    if (flags != SWHIP_hipEventDisableTiming)
        die("hipEventCreateWithFlags", "flags %u: spillway's events "
            "disable timing", flags);
    struct ihipEvent_t *e = calloc(1, sizeof *e);
    if (e == NULL)
        return SWHIP_hipErrorOutOfMemory;
    e->magic = LIVE;
    pthread_mutex_lock(&mu);
    e->all = events;
    events = e;
    live_events++;
    pthread_mutex_unlock(&mu);
    *event = e;
    return SWHIP_hipSuccess;
}

swhip_error hipEventDestroy(swhip_event event)
{
    pthread_mutex_lock(&mu);
    FIND_LIVE(events, event, "hipEventDestroy", "event");
    event->magic = DEAD;
    live_events--;
    pthread_mutex_unlock(&mu);
    return SWHIP_hipSuccess;
}

swhip_error hipEventRecord(swhip_event event, swhip_stream stream)
{
    swhip_error r = ready();
    if (r)
        return r;
    pthread_mutex_lock(&mu);
    FIND_LIVE(events, event, "hipEventRecord", "event");
    event->pt = enqueue(stream, "hipEventRecord");
    event->vc = stream->so.vc;
    event->recorded = 1;
    pthread_mutex_unlock(&mu);
    return SWHIP_hipSuccess;
}

/* Under mu: a recorded, live event. */
static void recorded(swhip_event e, const char *call)
{
    FIND_LIVE(events, e, call, "event");
    if (!e->recorded)
        die(call, "event %p waited for before it was ever recorded",
            (void *)e);
}

swhip_error hipEventQuery(swhip_event event)
{
    pthread_mutex_lock(&mu);
    recorded(event, "hipEventQuery");
    so_merge(&so_host, &event->vc); /* all work is done: complete */
    pthread_mutex_unlock(&mu);
    return sticky;
}

swhip_error hipEventSynchronize(swhip_event event)
{
    pthread_mutex_lock(&mu);
    recorded(event, "hipEventSynchronize");
    so_merge(&so_host, &event->vc);
    pthread_mutex_unlock(&mu);
    return sticky;
}

swhip_error hipStreamWaitEvent(swhip_stream stream, swhip_event event,
                               unsigned int flags)
{
    swhip_error r = ready();
    if (r)
        return r;
    if (flags != 0)
        return SWHIP_hipErrorInvalidValue;
    pthread_mutex_lock(&mu);
    recorded(event, "hipStreamWaitEvent");
    (void)enqueue(stream, "hipStreamWaitEvent");
    so_merge(&stream->so.vc, &event->vc);
    pthread_mutex_unlock(&mu);
    return SWHIP_hipSuccess;
}

/* ------------------------------------------------------------------------
 * Copies and memsets (run at once)
 * ---------------------------------------------------------------------- */

swhip_error hipMemcpyHtoDAsync(swhip_deviceptr dst, void *src, size_t bytes,
                               swhip_stream stream)
{
    swhip_error r = ready();
    if (r)
        return r;
    pthread_mutex_lock(&mu);
    so_point pt = enqueue(stream, "hipMemcpyHtoDAsync");
    touch(dst, bytes, stream, pt, "hipMemcpyHtoDAsync", "dst");
    pthread_mutex_unlock(&mu);
    memcpy(dst, src, bytes);
    return SWHIP_hipSuccess;
}

swhip_error hipMemcpyDtoHAsync(void *dst, swhip_deviceptr src, size_t bytes,
                               swhip_stream stream)
{
    swhip_error r = ready();
    if (r)
        return r;
    pthread_mutex_lock(&mu);
    so_point pt = enqueue(stream, "hipMemcpyDtoHAsync");
    touch(src, bytes, stream, pt, "hipMemcpyDtoHAsync", "src");
    pthread_mutex_unlock(&mu);
    memcpy(dst, src, bytes);
    return SWHIP_hipSuccess;
}

swhip_error hipMemcpyDtoDAsync(swhip_deviceptr dst, swhip_deviceptr src,
                               size_t bytes, swhip_stream stream)
{
    swhip_error r = ready();
    if (r)
        return r;
    pthread_mutex_lock(&mu);
    so_point pt = enqueue(stream, "hipMemcpyDtoDAsync");
    touch(dst, bytes, stream, pt, "hipMemcpyDtoDAsync", "dst");
    touch(src, bytes, stream, pt, "hipMemcpyDtoDAsync", "src");
    pthread_mutex_unlock(&mu);
    if ((uintptr_t)dst < (uintptr_t)src + bytes &&
        (uintptr_t)src < (uintptr_t)dst + bytes)
        die("hipMemcpyDtoDAsync", "overlapping ranges (undefined in HIP)");
    memcpy(dst, src, bytes);
    return SWHIP_hipSuccess;
}

static swhip_error memset_n(swhip_deviceptr dst, const void *value,
                            size_t width, size_t count, swhip_stream stream,
                            const char *call)
{
    swhip_error r = ready();
    if (r)
        return r;
    if ((uintptr_t)dst % width != 0)
        return SWHIP_hipErrorInvalidValue;
    pthread_mutex_lock(&mu);
    so_point pt = enqueue(stream, call);
    touch(dst, count * width, stream, pt, call, "dst");
    pthread_mutex_unlock(&mu);
    for (size_t i = 0; i < count; i++)
        memcpy((unsigned char *)dst + i * width, value, width);
    return SWHIP_hipSuccess;
}

swhip_error hipMemsetD8Async(swhip_deviceptr dst, unsigned char value,
                             size_t count, swhip_stream stream)
{
    return memset_n(dst, &value, 1, count, stream, "hipMemsetD8Async");
}

swhip_error hipMemsetD16Async(swhip_deviceptr dst, unsigned short value,
                              size_t count, swhip_stream stream)
{
    return memset_n(dst, &value, 2, count, stream, "hipMemsetD16Async");
}

swhip_error hipMemsetD32Async(swhip_deviceptr dst, int value, size_t count,
                              swhip_stream stream)
{
    return memset_n(dst, &value, 4, count, stream, "hipMemsetD32Async");
}

/* ------------------------------------------------------------------------
 * Modules and kernels
 * ---------------------------------------------------------------------- */

swhip_error hipModuleLoadData(swhip_module *module, const void *image)
{
    swhip_error r = ready();
    if (r)
        return r;
    const char *im = image;
    size_t ml = strlen(FAKE_HIP_MAGIC), kl = strlen(FAKE_HIP_ARCH_KEY);
    if (strncmp(im, FAKE_HIP_MAGIC, ml) != 0 ||
        strncmp(im + ml, FAKE_HIP_ARCH_KEY, kl) != 0)
        return SWHIP_hipErrorInvalidImage;
    const char *arch = im + ml + kl;
    size_t al = strcspn(arch, "\n");
    if (al != strlen(FAKE_HIP_ARCH) || strncmp(arch, FAKE_HIP_ARCH, al) != 0)
        return SWHIP_hipErrorNoBinaryForGpu;
    struct ihipModule_t *m = calloc(1, sizeof *m);
    if (m == NULL || (m->src = strdup(arch + al)) == NULL) {
        free(m);
        return SWHIP_hipErrorOutOfMemory;
    }
    m->magic = LIVE;
    pthread_mutex_lock(&mu);
    m->all = modules;
    modules = m;
    live_modules++;
    pthread_mutex_unlock(&mu);
    *module = m;
    return SWHIP_hipSuccess;
}

swhip_error hipModuleUnload(swhip_module module)
{
    pthread_mutex_lock(&mu);
    FIND_LIVE(modules, module, "hipModuleUnload", "module");
    module->magic = DEAD;
    free(module->src);
    module->src = NULL;
    for (struct ihipModuleSymbol_t *f = functions; f; f = f->all)
        if (f->module == module)
            f->magic = DEAD;
    live_modules--;
    pthread_mutex_unlock(&mu);
    return SWHIP_hipSuccess;
}

/* The emulated kernels: op x type, plus the final sums and the byte fill. */
enum { K_FILL, K_COPY, K_ADD, K_SCALE, K_AXPY, K_SUM };
enum { T_F32, T_F64, T_U32, T_U64 };
#define K_SUM_FINAL_F64 100
#define K_SUM_FINAL_I64 101
#define K_FILL_BYTES 102

/* hip.c's names (cuda.cu's entry points for the four dtypes): the kind is
 * op * 4 + type, the type being how the kernel treats the bits. */
static int kernel_kind(const char *name)
{
    static const struct {
        const char *name;
        int kind;
    } known[] = {
        {"sw_fill_u32", K_FILL * 4 + T_U32},  {"sw_fill_u64", K_FILL * 4 + T_U64},
        {"sw_copy_u32", K_COPY * 4 + T_U32},  {"sw_copy_u64", K_COPY * 4 + T_U64},
        {"sw_add_f32", K_ADD * 4 + T_F32},    {"sw_add_f64", K_ADD * 4 + T_F64},
        {"sw_add_u32", K_ADD * 4 + T_U32},    {"sw_add_u64", K_ADD * 4 + T_U64},
        {"sw_scale_f32", K_SCALE * 4 + T_F32}, {"sw_scale_f64", K_SCALE * 4 + T_F64},
        {"sw_scale_u32", K_SCALE * 4 + T_U32}, {"sw_scale_u64", K_SCALE * 4 + T_U64},
        {"sw_axpy_f32", K_AXPY * 4 + T_F32},  {"sw_axpy_f64", K_AXPY * 4 + T_F64},
        {"sw_axpy_u32", K_AXPY * 4 + T_U32},  {"sw_axpy_u64", K_AXPY * 4 + T_U64},
        {"sw_sum_f32", K_SUM * 4 + T_F32},    {"sw_sum_f64", K_SUM * 4 + T_F64},
        {"sw_sum_i32", K_SUM * 4 + T_U32},    {"sw_sum_u64", K_SUM * 4 + T_U64},
        {"sw_sum_final_f64", K_SUM_FINAL_F64},
        {"sw_sum_final_i64", K_SUM_FINAL_I64},
        {"sw_fill_bytes", K_FILL_BYTES},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(name, known[i].name) == 0)
            return known[i].kind;
    return -1;
}

swhip_error hipModuleGetFunction(swhip_function *function,
                                 swhip_module module, const char *name)
{
    pthread_mutex_lock(&mu);
    FIND_LIVE(modules, module, "hipModuleGetFunction", "module");
    int kind = kernel_kind(name);
    /* The source declares kernels through macros (sw_add_##S): its name
     * up to the last '_' must be there. */
    char stem[64];
    snprintf(stem, sizeof stem, "%s", name);
    char *us = strrchr(stem, '_');
    if (us != NULL && kind >= 0 && kind < K_SUM_FINAL_F64)
        us[1] = '\0';
    if (kind < 0 || strstr(module->src, stem) == NULL) {
        pthread_mutex_unlock(&mu);
        fprintf(stderr, "fake libamdhip64: hipModuleGetFunction: no kernel "
                "'%s' in the code object\n", name);
        return SWHIP_hipErrorNotFound;
    }
    struct ihipModuleSymbol_t *f = calloc(1, sizeof *f);
    if (f == NULL) {
        pthread_mutex_unlock(&mu);
        return SWHIP_hipErrorOutOfMemory;
    }
    f->magic = LIVE;
    f->kind = kind;
    f->module = module;
    f->all = functions;
    functions = f;
    pthread_mutex_unlock(&mu);
    *function = f;
    return SWHIP_hipSuccess;
}

/* A kernel fault: the device is done, as on a GPU. */
static swhip_error fault(swhip_error r, const char *what)
{
    fprintf(stderr, "fake libamdhip64: kernel fault: %s\n", what);
    pthread_mutex_lock(&mu);
    sticky = r;
    pthread_mutex_unlock(&mu);
    return r;
}

/* The launch being emulated: its stream and point, for touch(). */
typedef struct launch {
    swhip_stream s;
    so_point pt;
} launch;

static void use(const launch *l, const void *p, size_t n, const char *what)
{
    pthread_mutex_lock(&mu);
    touch(p, n, l->s, l->pt, "hipModuleLaunchKernel", what);
    pthread_mutex_unlock(&mu);
}

#define ARG(T, i) (*(T *)params[i])

#define FAKE_ELEMENTWISE(T)                                                   \
    static swhip_error ew_##T(const launch *l, int op, void **params,        \
                              unsigned long long n)                          \
    {                                                                         \
        T *out = ARG(T *, 0);                                                 \
        size_t bytes = (size_t)n * sizeof(T);                                 \
        if ((uintptr_t)out % sizeof(T))                                       \
            return fault(SWHIP_hipErrorIllegalAddress, "misaligned out");     \
        use(l, out, bytes, "out");                                            \
        if (op == K_FILL) {                                                   \
            T alpha = ARG(T, 1);                                              \
            for (unsigned long long i = 0; i < n; i++)                        \
                out[i] = alpha;                                               \
            return SWHIP_hipSuccess;                                          \
        }                                                                     \
        const T *a = ARG(const T *, 1);                                       \
        if ((uintptr_t)a % sizeof(T))                                         \
            return fault(SWHIP_hipErrorIllegalAddress, "misaligned a");       \
        use(l, a, bytes, "a");                                                \
        if (op == K_COPY) {                                                   \
            if (a != out && (uintptr_t)a < (uintptr_t)out + bytes &&          \
                (uintptr_t)out < (uintptr_t)a + bytes)                        \
                die("hipModuleLaunchKernel", "COPY kernel on overlapping "    \
                    "ranges (racy on a GPU)");                                \
            for (unsigned long long i = 0; i < n; i++)                        \
                out[i] = a[i];                                                \
            return SWHIP_hipSuccess;                                          \
        }                                                                     \
        if (op == K_ADD) {                                                    \
            const T *b = ARG(const T *, 2);                                   \
            if ((uintptr_t)b % sizeof(T))                                     \
                return fault(SWHIP_hipErrorIllegalAddress, "misaligned b");   \
            use(l, b, bytes, "b");                                            \
            for (unsigned long long i = 0; i < n; i++)                        \
                out[i] = a[i] + b[i];                                         \
            return SWHIP_hipSuccess;                                          \
        }                                                                     \
        T alpha = ARG(T, 2);                                                  \
        for (unsigned long long i = 0; i < n; i++) {                          \
            T t = alpha * a[i];                                               \
            out[i] = op == K_SCALE ? t : t + out[i];                          \
        }                                                                     \
        return SWHIP_hipSuccess;                                              \
    }

typedef uint32_t u32;
typedef uint64_t u64;
FAKE_ELEMENTWISE(float)
FAKE_ELEMENTWISE(double)
FAKE_ELEMENTWISE(u32)
FAKE_ELEMENTWISE(u64)

#define FAKE_TREE(A)                                                          \
    static A tree_##A(A *sh)                                                  \
    {                                                                         \
        for (unsigned s = 128; s > 0; s >>= 1)                                \
            for (unsigned t = 0; t < s; t++)                                  \
                sh[t] = sh[t] + sh[t + s];                                    \
        return sh[0];                                                         \
    }
FAKE_TREE(double)
FAKE_TREE(u64)

#define FAKE_SUM(NAME, T, A, CONV)                                            \
    static swhip_error NAME(const launch *l, void **params, unsigned grid)   \
    {                                                                         \
        const T *a = ARG(const T *, 0);                                       \
        unsigned long long n = ARG(unsigned long long, 1);                    \
        A *partials = ARG(A *, 2);                                            \
        if ((uintptr_t)a % sizeof(T) || (uintptr_t)partials % sizeof(A))      \
            return fault(SWHIP_hipErrorIllegalAddress, "misaligned sum");     \
        use(l, a, n * sizeof(T), "sum input");                                \
        use(l, partials, grid * sizeof(A), "sum partials");                   \
        A sh[256];                                                            \
        for (unsigned b = 0; b < grid; b++) {                                 \
            for (unsigned t = 0; t < 256; t++) {                              \
                A acc = 0;                                                    \
                for (unsigned long long i = (unsigned long long)b * 256 + t;  \
                     i < n; i += (unsigned long long)grid * 256)              \
                    acc += CONV(a[i]);                                        \
                sh[t] = acc;                                                  \
            }                                                                 \
            partials[b] = tree_##A(sh);                                       \
        }                                                                     \
        return SWHIP_hipSuccess;                                              \
    }
FAKE_SUM(sum_f32, float, double, (double))
FAKE_SUM(sum_f64, double, double, )
FAKE_SUM(sum_i32, int32_t, u64, (u64)(int64_t))
FAKE_SUM(sum_i64, u64, u64, )

#define FAKE_FINAL(NAME, A)                                                   \
    static swhip_error NAME(const launch *l, void **params)                  \
    {                                                                         \
        const A *partials = ARG(const A *, 0);                                \
        unsigned count = ARG(unsigned int, 1);                                \
        unsigned char *out = ARG(unsigned char *, 2);                         \
        if (count == 0 || count > 256)                                        \
            return fault(SWHIP_hipErrorIllegalAddress, "final count");        \
        use(l, partials, count * sizeof(A), "final partials");                \
        use(l, out, 8, "final out");                                          \
        A sh[256];                                                            \
        for (unsigned t = 0; t < 256; t++)                                    \
            sh[t] = t < count ? partials[t] : (A)0;                           \
        A total = tree_##A(sh);                                               \
        memcpy(out, &total, 8);                                               \
        return SWHIP_hipSuccess;                                              \
    }
FAKE_FINAL(final_f64, double)
FAKE_FINAL(final_i64, u64)

static swhip_error fill_bytes(const launch *l, void **params)
{
    unsigned char *dst = ARG(unsigned char *, 0);
    unsigned long long n = ARG(unsigned long long, 1);
    /* cuda.cu's (dst, n, lo, hi, psize): a pattern of up to 16 bytes. */
    unsigned long long lo = ARG(unsigned long long, 2);
    unsigned long long hi = ARG(unsigned long long, 3);
    unsigned psize = ARG(unsigned int, 4);
    if (psize != 1 && psize != 2 && psize != 4 && psize != 8 && psize != 16)
        return fault(SWHIP_hipErrorIllegalAddress, "fill_bytes psize");
    use(l, dst, n, "fill_bytes");
    for (unsigned long long i = 0; i < n; i++) {
        unsigned k = (unsigned)(i % psize);
        dst[i] = (unsigned char)((k < 8 ? lo : hi) >> (8 * (k % 8)));
    }
    return SWHIP_hipSuccess;
}

swhip_error hipModuleLaunchKernel(swhip_function f, unsigned int grid_x,
                                  unsigned int grid_y, unsigned int grid_z,
                                  unsigned int block_x, unsigned int block_y,
                                  unsigned int block_z,
                                  unsigned int shared_bytes,
                                  swhip_stream stream, void **params,
                                  void **extra)
{
    swhip_error r = ready();
    if (r)
        return r;
    launch l;
    pthread_mutex_lock(&mu);
    FIND_LIVE(functions, f, "hipModuleLaunchKernel", "function");
    l.s = stream;
    l.pt = enqueue(stream, "hipModuleLaunchKernel");
    pthread_mutex_unlock(&mu);
    if (grid_x == 0 || grid_y != 1 || grid_z != 1 || block_x != 256 ||
        block_y != 1 || block_z != 1 || shared_bytes != 0 || extra != NULL ||
        params == NULL)
        die("hipModuleLaunchKernel", "unexpected configuration (grid %u x %u "
            "x %u, block %u x %u x %u)", grid_x, grid_y, grid_z, block_x,
            block_y, block_z);
    switch (f->kind) {
    case K_SUM_FINAL_F64:
        return grid_x == 1 ? final_f64(&l, params)
                           : SWHIP_hipErrorInvalidValue;
    case K_SUM_FINAL_I64:
        return grid_x == 1 ? final_i64(&l, params)
                           : SWHIP_hipErrorInvalidValue;
    case K_FILL_BYTES:
        return fill_bytes(&l, params);
    default:
        break;
    }
    int op = f->kind / 4, type = f->kind % 4;
    if (op == K_SUM) {
        if (grid_x > 256)
            die("hipModuleLaunchKernel", "more partial sums (%u) than the "
                "final pass adds", grid_x);
        switch (type) {
        case T_F32: return sum_f32(&l, params, grid_x);
        case T_F64: return sum_f64(&l, params, grid_x);
        case T_U32: return sum_i32(&l, params, grid_x);
        default: return sum_i64(&l, params, grid_x);
        }
    }
    unsigned long long n = ARG(unsigned long long, op == K_FILL   ? 2
                                                  : op == K_COPY ? 2
                                                                 : 3);
    switch (type) {
    case T_F32: return ew_float(&l, op, params, n);
    case T_F64: return ew_double(&l, op, params, n);
    case T_U32: return ew_u32(&l, op, params, n);
    default: return ew_u64(&l, op, params, n);
    }
}

/* ------------------------------------------------------------------------
 * Leaks, at exit
 * ---------------------------------------------------------------------- */

__attribute__((destructor)) static void fake_exit_check(void)
{
    pthread_mutex_lock(&mu);
    /* Only once every stream is gone, so every device was closed: a
     * process that exits with a device open keeps its handles. */
    int closed = ever_streams > 0 && live_streams == 0;
    if (closed && (nallocs || live_events || live_modules || live_pools)) {
        fprintf(stderr, "fake libamdhip64: at exit, every stream destroyed "
                "but %zu allocations, %ld events, %ld modules and %ld pools "
                "still live (leaks)\n", nallocs, live_events, live_modules,
                live_pools);
        abort();
    }
    pthread_mutex_unlock(&mu);
}
