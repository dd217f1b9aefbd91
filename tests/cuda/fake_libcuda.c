/*
 * fake_libcuda.c -- a strict stand-in for libcuda.so.1 on the CPU, so that
 * the CUDA backend's host side (loading, contexts, pools, the cuMemAlloc
 * fallback, streams, events, module loading, kernel arguments, deferred
 * frees) runs in CI without a GPU:
 *
 *   SPILLWAY_CUDA_LIBRARY=BUILD/tests/c/libcuda_fake.so \
 *   SPILLWAY_NVRTC_LIBRARY=BUILD/tests/c/libnvrtc_fake.so \
 *   SW_TEST_DEVICE=cuda:0 BUILD/tests/c/test_spillway
 *
 * (the second is the stand-in for NVRTC, fake_libnvrtc.c, whose PTX and
 * CUBINs carry the entry names this library looks for; a real NVRTC's
 * images load here too).
 *
 * It is NOT a GPU and proves nothing about one: it exports the entry points
 * src/backend/cuda_api.h declares, with the same prototypes (so the
 * compiler checks them against that header), and implements them on host
 * memory.  Work runs later, as on a GPU: each stream has a worker thread
 * that runs what was queued on it in order, so an event is not complete
 * until the work before it has run, a query may say CUDA_ERROR_NOT_READY,
 * cuStreamWaitEvent holds a stream until the event's work on another
 * stream is done (the cross-stream order is enforced, not assumed), a copy
 * into host memory lands only later (the caller must wait for an event
 * before reading it), and a kernel fault is a sticky error reported by the
 * calls after it (the next synchronize, query or call), not by the launch.
 * A copy from pageable host memory waits for the stream's earlier work
 * and is staged at the call, as the driver documents; one from page-locked
 * memory (cuMemHostAlloc) reads it when it runs.  Stream 0 (the legacy default stream, which frameworks use) is
 * accepted where a framework's stream is: events, waits, synchronize.
 *
 * What it checks, failing the call as the driver would (and printing why to
 * stderr): that a context is current for the calls that need one and that
 * it is the retained primary context; that every device range a copy,
 * memset or kernel touches lies inside a live allocation; that frees name
 * live allocations of the right kind (pool or not); that handles (streams,
 * events, modules, functions, pools) are live; that typed kernel operands
 * are aligned (else a sticky CUDA_ERROR_MISALIGNED_ADDRESS, as on a GPU);
 * that device-to-device copies do not overlap (undefined in CUDA); that
 * kernels are launched with 256-thread blocks; that the module image holds
 * the entry names asked of it.  When the primary context's last reference
 * goes, anything still live (allocations, streams, events, modules, pools)
 * is a leak: it says so and aborts.
 *
 * The kernels are emulated by name, with the semantics of the built-in
 * kernels' CUDA C (src/backend/kernels/cuda.cu), sums included block by
 * block and thread by thread, so results are the bits the GPU code should
 * produce; float16 and bfloat16 convert with the kernel source's own
 * helpers, compiled here as C.
 *
 * It also checks, when the work runs, that every device range it touches
 * is still allocated and every page-locked host block still live: work
 * that runs on memory freed (or reused) too early -- a free not ordered
 * after the work of another stream -- is a kernel fault.
 *
 * Environment: FAKE_CUDA_MEMORY (bytes, default 2 GiB) is the device's
 * capacity; FAKE_CUDA_NO_POOLS=1 reports no memory-pool support;
 * FAKE_CUDA_DELAY_US (default 0) makes every queued operation take at
 * least that long, so that work is still running when the caller looks.
 * fake_cuda_stats() (not a CUDA entry point) reports what the tests check.
 */
#include "backend/cuda_api.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define API __attribute__((visibility("default")))

/* Every entry point, declared with cuda_api.h's parameter lists. */
#define FAKE_DECL(kind, pub, sym, params) API swcu_result sym params;
SWCU_DRIVER_FUNCS(FAKE_DECL)
#undef FAKE_DECL

/* ------------------------------------------------------------------------
 * State
 * ---------------------------------------------------------------------- */

struct CUctx_st {
    int retains;
};
typedef struct fake_op fake_op;
struct CUstream_st {
    unsigned magic;
    struct CUstream_st *live_next; /* in live_list (under mu) */
    pthread_t thread;
    fake_op *head, *tail; /* queued, the running one first (under qmu) */
    unsigned long long queued, done;
    int stop;
    pthread_cond_t work; /* work queued, or stop */
};
struct CUevent_st {
    unsigned magic;
    unsigned flags;
    /* Records made, and those of them queued and not yet complete: records
     * on different streams complete in any order, so "complete" is per
     * record, not a high-water mark (a record on an idle stream, which
     * completes at once, must not release a wait for an earlier record
     * still queued on a busy one: spillway's CUDA backend reuses events,
     * and thread_queues read a buffer before its stream's work ran). */
    unsigned long long gen;
    unsigned long long *pending;
    int npending, cappending;
    int refs; /* the handle and every queued record or wait (under qmu) */
    /* A timing event (created without CU_EVENT_DISABLE_TIMING): when its
     * record tgen completed, on CLOCK_MONOTONIC (cuEventElapsedTime). */
    double t;
    unsigned long long tgen;
};
struct CUfunc_st {
    unsigned magic;
    int kind;
};
struct CUmod_st {
    unsigned magic;
    const unsigned char *image;
    size_t size;
    struct CUfunc_st funcs[96]; /* die with the module, as in CUDA */
    int nfuncs;
};
struct CUmemPoolHandle_st {
    unsigned magic;
    size_t used;
};

#define LIVE 0x4c495645u

typedef struct fake_alloc {
    uintptr_t base;
    size_t size;
    struct CUmemPoolHandle_st *pool; /* NULL: cuMemAlloc */
} fake_alloc;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct CUctx_st primary;
static int initialized;
static _Atomic swcu_result sticky; /* a kernel fault ends the context */
static fake_alloc *allocs;  /* sorted by base */
static size_t nallocs, capallocs, allocated;
static size_t capacity = (size_t)2 << 30;
static long live_streams, live_events, live_modules, live_pools;
static struct CUstream_st *live_list; /* live streams, under mu */

static _Thread_local struct CUctx_st *ctx_stack[16];
static _Thread_local int ctx_depth;

static swcu_result fail(swcu_result r, const char *fmt, const char *what)
{
    fprintf(stderr, "fake libcuda: ");
    fprintf(stderr, fmt, what);
    fputc('\n', stderr);
    return r;
}

/* A call that needs the primary context current. */
static swcu_result need_ctx(const char *call)
{
    if (!initialized)
        return fail(SWCU_CUDA_ERROR_NOT_INITIALIZED, "%s before cuInit", call);
    if (ctx_depth == 0 || ctx_stack[ctx_depth - 1] != &primary)
        return fail(SWCU_CUDA_ERROR_INVALID_CONTEXT,
                    "%s without the primary context current", call);
    if (primary.retains <= 0)
        return fail(SWCU_CUDA_ERROR_CONTEXT_IS_DESTROYED,
                    "%s on a released context", call);
    return sticky;
}

/* Index of the first allocation with base > p.  Under mu. */
static size_t upper(uintptr_t p)
{
    size_t lo = 0, hi = nallocs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (allocs[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Is [p, p + n) inside one live allocation?  Under mu. */
static int in_range(uintptr_t p, size_t n)
{
    size_t i = upper(p);
    if (i == 0)
        return 0;
    const fake_alloc *a = &allocs[i - 1];
    return p - a->base <= a->size && n <= a->size - (p - a->base);
}

static int check_range(swcu_deviceptr p, size_t n, const char *call)
{
    pthread_mutex_lock(&mu);
    int ok = in_range((uintptr_t)p, n);
    pthread_mutex_unlock(&mu);
    if (!ok) {
        fprintf(stderr, "fake libcuda: %s: [0x%llx+%zu) is not inside a live "
                "allocation\n", call, (unsigned long long)p, n);
    }
    return ok;
}

static swcu_result alloc_mem(swcu_deviceptr *dptr, size_t size,
                             struct CUmemPoolHandle_st *pool)
{
    if (size == 0)
        return SWCU_CUDA_ERROR_INVALID_VALUE;
    size_t rounded = (size + 255) & ~(size_t)255;
    pthread_mutex_lock(&mu);
    if (allocated + rounded > capacity) {
        pthread_mutex_unlock(&mu);
        return SWCU_CUDA_ERROR_OUT_OF_MEMORY;
    }
    void *p = aligned_alloc(256, rounded);
    if (p == NULL) {
        pthread_mutex_unlock(&mu);
        return SWCU_CUDA_ERROR_OUT_OF_MEMORY;
    }
    memset(p, 0xA5, rounded); /* not zeroed, as on a GPU */
    if (nallocs == capallocs) {
        size_t cap = capallocs ? 2 * capallocs : 256;
        fake_alloc *v = realloc(allocs, cap * sizeof *v);
        if (v == NULL) {
            pthread_mutex_unlock(&mu);
            free(p);
            return SWCU_CUDA_ERROR_OUT_OF_MEMORY;
        }
        allocs = v;
        capallocs = cap;
    }
    size_t i = upper((uintptr_t)p);
    memmove(&allocs[i + 1], &allocs[i], (nallocs - i) * sizeof *allocs);
    allocs[i] = (fake_alloc){(uintptr_t)p, rounded, pool};
    nallocs++;
    allocated += rounded;
    if (pool)
        pool->used += rounded;
    pthread_mutex_unlock(&mu);
    *dptr = (swcu_deviceptr)(uintptr_t)p;
    return SWCU_CUDA_SUCCESS;
}

static swcu_result free_mem(swcu_deviceptr dptr, int pooled, const char *call)
{
    pthread_mutex_lock(&mu);
    size_t i = upper((uintptr_t)dptr);
    if (i == 0 || allocs[i - 1].base != (uintptr_t)dptr ||
        (allocs[i - 1].pool != NULL) != pooled) {
        pthread_mutex_unlock(&mu);
        fprintf(stderr, "fake libcuda: %s(0x%llx): not a live %s "
                "allocation\n", call, (unsigned long long)dptr,
                pooled ? "pool" : "cuMemAlloc");
        return SWCU_CUDA_ERROR_INVALID_VALUE;
    }
    fake_alloc a = allocs[i - 1];
    memmove(&allocs[i - 1], &allocs[i], (nallocs - i) * sizeof *allocs);
    nallocs--;
    allocated -= a.size;
    if (a.pool)
        a.pool->used -= a.size;
    pthread_mutex_unlock(&mu);
    memset((void *)a.base, 0xDB, a.size); /* poison, like the sim */
    free((void *)a.base);
    return SWCU_CUDA_SUCCESS;
}

static swcu_result stream_ok(swcu_stream s, const char *call);
static swcu_result event_ok(swcu_event e, const char *call);
static swcu_result fault(swcu_result r, const char *what);
static int param_sizes(int kind, unsigned char *sz);
static size_t type_size(int t);

/* ------------------------------------------------------------------------
 * Initialization, devices, contexts
 * ---------------------------------------------------------------------- */

swcu_result cuInit(unsigned int flags)
{
    if (flags != 0)
        return SWCU_CUDA_ERROR_INVALID_VALUE;
    const char *m = getenv("FAKE_CUDA_MEMORY");
    if (m != NULL && *m)
        capacity = (size_t)strtoull(m, NULL, 10);
    initialized = 1;
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuDriverGetVersion(int *version)
{
    *version = 13000;
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuDeviceGetCount(int *count)
{
    if (!initialized)
        return SWCU_CUDA_ERROR_NOT_INITIALIZED;
    *count = 1;
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuDeviceGet(swcu_device *device, int ordinal)
{
    if (!initialized)
        return SWCU_CUDA_ERROR_NOT_INITIALIZED;
    if (ordinal != 0)
        return SWCU_CUDA_ERROR_INVALID_DEVICE;
    *device = 0;
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuDeviceGetName(char *name, int len, swcu_device dev)
{
    if (dev != 0)
        return SWCU_CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "Fake CUDA device (CPU test double)");
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuDeviceTotalMem_v2(size_t *bytes, swcu_device dev)
{
    if (dev != 0)
        return SWCU_CUDA_ERROR_INVALID_DEVICE;
    *bytes = capacity;
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuDeviceGetAttribute(int *value, swcu_device_attribute attrib,
                                 swcu_device dev)
{
    if (dev != 0)
        return SWCU_CUDA_ERROR_INVALID_DEVICE;
    switch (attrib) {
    case SWCU_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; break;
    case SWCU_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; break;
    case SWCU_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = 4; break;
    case SWCU_CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
        *value = getenv("FAKE_CUDA_NO_POOLS") == NULL;
        break;
    default:
        return SWCU_CUDA_ERROR_INVALID_VALUE;
    }
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuDeviceGetPCIBusId(char *bus_id, int len, swcu_device dev)
{
    (void)dev;
    snprintf(bus_id, (size_t)len, "0000:00:00.0");
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuDevicePrimaryCtxRetain(swcu_context *pctx, swcu_device dev)
{
    if (!initialized)
        return SWCU_CUDA_ERROR_NOT_INITIALIZED;
    if (dev != 0)
        return SWCU_CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&mu);
    primary.retains++;
    pthread_mutex_unlock(&mu);
    *pctx = &primary;
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuDevicePrimaryCtxRelease_v2(swcu_device dev)
{
    if (dev != 0)
        return SWCU_CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&mu);
    if (primary.retains <= 0) {
        pthread_mutex_unlock(&mu);
        return fail(SWCU_CUDA_ERROR_INVALID_CONTEXT, "%s: not retained",
                    "cuDevicePrimaryCtxRelease_v2");
    }
    int last = --primary.retains == 0;
    if (last && (nallocs || live_streams || live_events || live_modules ||
                 live_pools)) {
        fprintf(stderr, "fake libcuda: the primary context's last release "
                "with %zu allocations, %ld streams, %ld events, %ld modules "
                "and %ld pools still live\n", nallocs, live_streams,
                live_events, live_modules, live_pools);
        abort();
    }
    if (last)
        sticky = SWCU_CUDA_SUCCESS; /* a new context starts clean */
    pthread_mutex_unlock(&mu);
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuCtxGetCurrent(swcu_context *pctx)
{
    *pctx = ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuCtxPushCurrent_v2(swcu_context ctx)
{
    if (ctx != &primary || primary.retains <= 0)
        return SWCU_CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == 16)
        return fail(SWCU_CUDA_ERROR_INVALID_VALUE, "%s: 16 contexts deep "
                    "(a push without its pop?)", "cuCtxPushCurrent_v2");
    ctx_stack[ctx_depth++] = ctx;
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuCtxPopCurrent_v2(swcu_context *pctx)
{
    if (ctx_depth == 0)
        return fail(SWCU_CUDA_ERROR_INVALID_CONTEXT, "%s with no context "
                    "current", "cuCtxPopCurrent_v2");
    struct CUctx_st *c = ctx_stack[--ctx_depth];
    if (pctx)
        *pctx = c;
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuGetErrorName(swcu_result error, const char **name)
{
    switch (error) {
#define FAKE_NAME(n, v)                                                       \
    case v:                                                                   \
        *name = #n;                                                           \
        return SWCU_CUDA_SUCCESS;
        SWCU_ERRORS(FAKE_NAME)
#undef FAKE_NAME
    }
    *name = NULL;
    return SWCU_CUDA_ERROR_INVALID_VALUE;
}

swcu_result cuGetErrorString(swcu_result error, const char **text)
{
    *text = error == SWCU_CUDA_SUCCESS ? "no error" : "fake driver error";
    return SWCU_CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Memory
 * ---------------------------------------------------------------------- */

swcu_result cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    swcu_result r = need_ctx("cuMemGetInfo_v2");
    if (r)
        return r;
    pthread_mutex_lock(&mu);
    *free_bytes = capacity - allocated;
    *total = capacity;
    pthread_mutex_unlock(&mu);
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuMemAlloc_v2(swcu_deviceptr *dptr, size_t bytesize)
{
    swcu_result r = need_ctx("cuMemAlloc_v2");
    return r ? r : alloc_mem(dptr, bytesize, NULL);
}

swcu_result cuMemFree_v2(swcu_deviceptr dptr)
{
    swcu_result r = need_ctx("cuMemFree_v2");
    return r ? r : free_mem(dptr, 0, "cuMemFree_v2");
}

swcu_result cuMemPoolCreate(swcu_mempool *pool,
                            const swcu_mempool_props *props)
{
    swcu_result r = need_ctx("cuMemPoolCreate");
    if (r)
        return r;
    if (getenv("FAKE_CUDA_NO_POOLS") != NULL)
        return SWCU_CUDA_ERROR_NOT_SUPPORTED;
    if (props->alloc_type != SWCU_CU_MEM_ALLOCATION_TYPE_PINNED ||
        props->location.type != SWCU_CU_MEM_LOCATION_TYPE_DEVICE ||
        props->location.id != 0)
        return fail(SWCU_CUDA_ERROR_INVALID_VALUE, "%s: bad properties",
                    "cuMemPoolCreate");
    for (size_t i = 0; i < sizeof props->reserved; i++)
        if (props->reserved[i] != 0)
            return fail(SWCU_CUDA_ERROR_INVALID_VALUE, "%s: reserved bytes "
                        "not zero", "cuMemPoolCreate");
    struct CUmemPoolHandle_st *p = calloc(1, sizeof *p);
    if (p == NULL)
        return SWCU_CUDA_ERROR_OUT_OF_MEMORY;
    p->magic = LIVE;
    pthread_mutex_lock(&mu);
    live_pools++;
    pthread_mutex_unlock(&mu);
    *pool = p;
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuMemPoolDestroy(swcu_mempool pool)
{
    if (pool == NULL || pool->magic != LIVE)
        return fail(SWCU_CUDA_ERROR_INVALID_HANDLE, "%s: not a live pool",
                    "cuMemPoolDestroy");
    if (pool->used != 0)
        return fail(SWCU_CUDA_ERROR_INVALID_VALUE, "%s with allocations "
                    "still live", "cuMemPoolDestroy");
    pool->magic = 0;
    free(pool);
    pthread_mutex_lock(&mu);
    live_pools--;
    pthread_mutex_unlock(&mu);
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuMemPoolSetAttribute(swcu_mempool pool,
                                  swcu_mempool_attribute attr, void *value)
{
    if (pool == NULL || pool->magic != LIVE)
        return SWCU_CUDA_ERROR_INVALID_HANDLE;
    if (attr != SWCU_CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
        return SWCU_CUDA_ERROR_INVALID_VALUE;
    (void)value;
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuMemPoolGetAttribute(swcu_mempool pool,
                                  swcu_mempool_attribute attr, void *value)
{
    if (pool == NULL || pool->magic != LIVE)
        return SWCU_CUDA_ERROR_INVALID_HANDLE;
    uint64_t v;
    pthread_mutex_lock(&mu);
    v = pool->used; /* frees run at once: nothing is ever held unused */
    pthread_mutex_unlock(&mu);
    if (attr != SWCU_CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT &&
        attr != SWCU_CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
        return SWCU_CUDA_ERROR_INVALID_VALUE;
    memcpy(value, &v, sizeof v);
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuMemPoolTrimTo(swcu_mempool pool, size_t min_bytes_to_keep)
{
    (void)min_bytes_to_keep;
    return pool != NULL && pool->magic == LIVE ? SWCU_CUDA_SUCCESS
                                               : SWCU_CUDA_ERROR_INVALID_HANDLE;
}

swcu_result cuMemAllocFromPoolAsync(swcu_deviceptr *dptr, size_t bytesize,
                                    swcu_mempool pool, swcu_stream stream)
{
    swcu_result r = need_ctx("cuMemAllocFromPoolAsync");
    if (!r)
        r = stream_ok(stream, "cuMemAllocFromPoolAsync");
    if (!r && (pool == NULL || pool->magic != LIVE))
        r = SWCU_CUDA_ERROR_INVALID_HANDLE;
    return r ? r : alloc_mem(dptr, bytesize, pool);
}


/* Page-locked host blocks (cuMemHostAlloc), so that copies know whether
 * their host side is staged at the call or read when they run.  Under
 * mu. */
typedef struct fake_pinned {
    uintptr_t base;
    size_t size;
} fake_pinned;
static fake_pinned *pinned;
static size_t npinned, cappinned;
static unsigned long long stat_pinned_allocs;

/* Is [p, p + n) inside a live page-locked block?  Takes mu. */
static int is_pinned(const void *p, size_t n)
{
    uintptr_t a = (uintptr_t)p;
    int yes = 0;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < npinned && !yes; i++)
        yes = a >= pinned[i].base && a - pinned[i].base <= pinned[i].size &&
              n <= pinned[i].size - (a - pinned[i].base);
    pthread_mutex_unlock(&mu);
    return yes;
}

swcu_result cuMemHostAlloc(void **p, size_t bytesize, unsigned int flags)
{
    swcu_result r = need_ctx("cuMemHostAlloc");
    if (r)
        return r;
    if (flags & ~(unsigned)SWCU_CU_MEMHOSTALLOC_PORTABLE)
        return fail(SWCU_CUDA_ERROR_INVALID_VALUE, "%s: unexpected flags",
                    "cuMemHostAlloc");
    void *m = malloc(bytesize ? bytesize : 1);
    if (m == NULL)
        return SWCU_CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&mu);
    if (npinned == cappinned) {
        size_t cap = cappinned ? 2 * cappinned : 64;
        fake_pinned *v = realloc(pinned, cap * sizeof *v);
        if (v == NULL) {
            pthread_mutex_unlock(&mu);
            free(m);
            return SWCU_CUDA_ERROR_OUT_OF_MEMORY;
        }
        pinned = v;
        cappinned = cap;
    }
    pinned[npinned++] = (fake_pinned){(uintptr_t)m, bytesize};
    stat_pinned_allocs++;
    pthread_mutex_unlock(&mu);
    *p = m;
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuMemFreeHost(void *p)
{
    pthread_mutex_lock(&mu);
    size_t i = 0;
    while (i < npinned && pinned[i].base != (uintptr_t)p)
        i++;
    if (i == npinned) {
        pthread_mutex_unlock(&mu);
        return fail(SWCU_CUDA_ERROR_INVALID_VALUE, "%s: not a block of "
                    "cuMemHostAlloc", "cuMemFreeHost");
    }
    pinned[i] = pinned[--npinned];
    pthread_mutex_unlock(&mu);
    free(p);
    return SWCU_CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Streams: a worker thread each, running queued operations in order
 * ---------------------------------------------------------------------- */

enum { OP_H2D, OP_D2H, OP_D2D, OP_MEMSET, OP_KERNEL, OP_FREE, OP_RECORD,
       OP_WAIT };

#define FAKE_MAX_PARAMS 5
struct fake_op {
    fake_op *next;
    int kind;
    const char *call;
    /* copies and memsets */
    void *dst;
    const void *src;
    size_t n;
    void *staged;   /* a pageable source, copied at the call */
    int host_pinned; /* the host side was page-locked at the call */
    unsigned long long value;
    unsigned width;
    /* kernels: the function's kind, grid, and the arguments' values */
    int kkind;
    unsigned grid;
    _Alignas(16) unsigned char slots[FAKE_MAX_PARAMS][16];
    /* records and waits */
    struct CUevent_st *ev;
    unsigned long long gen;
};

/* One lock for every stream and event (a test double); each stream's
 * worker sleeps on its own condition until work comes, and everything that
 * waits for work to complete (synchronize, a stream held by
 * cuStreamWaitEvent) on qcv, broadcast at every completion. */
static pthread_mutex_t qmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qcv = PTHREAD_COND_INITIALIZER;
static long delay_us = -1;
static struct CUstream_st legacy; /* stream 0, started at first use */
static int legacy_started;
static unsigned long long stat_waits_blocked, stat_not_ready, stat_ops;

static swcu_result run_kernel(int kind, unsigned grid, void **params);

/* Under qmu: an event's last reference. */
static void event_unref(struct CUevent_st *e)
{
    if (--e->refs == 0) {
        free(e->pending);
        free(e);
    }
}

/* Under qmu: whether record g of e has completed (0: never recorded). */
static int record_done(const struct CUevent_st *e, unsigned long long g)
{
    for (int i = 0; i < e->npending; i++)
        if (e->pending[i] == g)
            return 0;
    return 1;
}

/* Under qmu: record g of e queued (0) or completed (1). */
static int record_pending(struct CUevent_st *e, unsigned long long g)
{
    if (e->npending == e->cappending) {
        int cap = e->cappending ? 2 * e->cappending : 4;
        unsigned long long *v = realloc(e->pending, (size_t)cap * sizeof *v);
        if (v == NULL)
            return -1;
        e->pending = v;
        e->cappending = cap;
    }
    e->pending[e->npending++] = g;
    return 0;
}

/* Under qmu: record g of a timing event completes now. */
static void record_stamp(struct CUevent_st *e, unsigned long long g)
{
    if (e->flags & SWCU_CU_EVENT_DISABLE_TIMING)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    e->t = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    e->tgen = g;
}

static void record_complete(struct CUevent_st *e, unsigned long long g)
{
    record_stamp(e, g);
    for (int i = 0; i < e->npending; i++)
        if (e->pending[i] == g) {
            e->pending[i] = e->pending[--e->npending];
            return;
        }
}

/* Runs op o of stream s, without qmu. */
static void run_op(fake_op *o)
{
    if (delay_us > 0 && o->kind != OP_RECORD && o->kind != OP_WAIT) {
        struct timespec ts = {delay_us / 1000000, (delay_us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
    switch (o->kind) {
    case OP_H2D:
        if (!check_range((swcu_deviceptr)(uintptr_t)o->dst, o->n, o->call)) {
            fault(SWCU_CUDA_ERROR_ILLEGAL_ADDRESS, "a copy to device memory "
                  "freed before it ran");
            return;
        }
        if (o->host_pinned && !is_pinned(o->src, o->n)) {
            fault(SWCU_CUDA_ERROR_ILLEGAL_ADDRESS, "a copy from page-locked "
                  "memory freed before it ran");
            return;
        }
        memcpy(o->dst, o->staged ? o->staged : o->src, o->n);
        return;
    case OP_D2H:
        if (!check_range((swcu_deviceptr)(uintptr_t)o->src, o->n, o->call)) {
            fault(SWCU_CUDA_ERROR_ILLEGAL_ADDRESS, "a copy from device "
                  "memory freed before it ran");
            return;
        }
        if (o->host_pinned && !is_pinned(o->dst, o->n)) {
            fault(SWCU_CUDA_ERROR_ILLEGAL_ADDRESS, "a copy into page-locked "
                  "memory freed before it ran");
            return;
        }
        memcpy(o->dst, o->src, o->n);
        return;
    case OP_D2D:
        if (!check_range((swcu_deviceptr)(uintptr_t)o->dst, o->n, o->call) ||
            !check_range((swcu_deviceptr)(uintptr_t)o->src, o->n, o->call)) {
            fault(SWCU_CUDA_ERROR_ILLEGAL_ADDRESS, "a device copy on memory "
                  "freed before it ran");
            return;
        }
        memcpy(o->dst, o->src, o->n);
        return;
    case OP_MEMSET:
        if (!check_range((swcu_deviceptr)(uintptr_t)o->dst, o->n * o->width,
                         o->call)) {
            fault(SWCU_CUDA_ERROR_ILLEGAL_ADDRESS, "a memset of memory freed "
                  "before it ran");
            return;
        }
        for (size_t i = 0; i < o->n; i++) {
            unsigned char *p = (unsigned char *)o->dst + i * o->width;
            if (o->width == 1)
                *p = (unsigned char)o->value;
            else if (o->width == 2)
                *(unsigned short *)(void *)p = (unsigned short)o->value;
            else
                *(unsigned int *)(void *)p = (unsigned int)o->value;
        }
        return;
    case OP_KERNEL: {
        void *params[FAKE_MAX_PARAMS];
        for (int i = 0; i < FAKE_MAX_PARAMS; i++)
            params[i] = o->slots[i];
        (void)run_kernel(o->kkind, o->grid, params); /* faults are sticky */
        return;
    }
    case OP_FREE:
        if (free_mem((swcu_deviceptr)(uintptr_t)o->dst, 1, o->call))
            fault(SWCU_CUDA_ERROR_ILLEGAL_ADDRESS, "a stream-ordered free of "
                  "memory that was not live when it ran");
        return;
    default:
        return;
    }
}

static void *stream_worker(void *arg)
{
    struct CUstream_st *s = arg;
    pthread_mutex_lock(&qmu);
    for (;;) {
        fake_op *o = s->head;
        if (o == NULL) {
            if (s->stop)
                break;
            pthread_cond_wait(&s->work, &qmu);
            continue;
        }
        if (o->kind == OP_WAIT && !record_done(o->ev, o->gen)) {
            pthread_cond_wait(&qcv, &qmu); /* held: the event is not done */
            continue;
        }
        pthread_mutex_unlock(&qmu);
        run_op(o);
        pthread_mutex_lock(&qmu);
        s->head = o->next;
        if (s->head == NULL)
            s->tail = NULL;
        s->done++;
        stat_ops++;
        if (o->kind == OP_RECORD)
            record_complete(o->ev, o->gen);
        if (o->ev != NULL)
            event_unref(o->ev);
        free(o->staged);
        free(o);
        pthread_cond_broadcast(&qcv);
    }
    pthread_mutex_unlock(&qmu);
    return NULL;
}

/* Starts s's worker; 0 or an error. */
static int stream_start(struct CUstream_st *s)
{
    if (delay_us < 0) {
        const char *d = getenv("FAKE_CUDA_DELAY_US");
        delay_us = d != NULL && *d ? strtol(d, NULL, 10) : 0;
    }
    s->head = s->tail = NULL;
    s->queued = s->done = 0;
    s->stop = 0;
    pthread_cond_init(&s->work, NULL);
    int rc = pthread_create(&s->thread, NULL, stream_worker, s);
    if (rc != 0)
        pthread_cond_destroy(&s->work);
    return rc;
}

/* The stream a call names: a live one, or stream 0 where allow0 (started
 * at its first use); NULL after printing why. */
static struct CUstream_st *stream_of(swcu_stream st, int allow0,
                                     const char *call)
{
    if (st == NULL && allow0) {
        pthread_mutex_lock(&qmu);
        if (!legacy_started && stream_start(&legacy) == 0) {
            legacy.magic = LIVE;
            legacy_started = 1;
        }
        pthread_mutex_unlock(&qmu);
        return legacy_started ? &legacy : NULL;
    }
    if (st == NULL || st->magic != LIVE) {
        fail(SWCU_CUDA_ERROR_INVALID_HANDLE, "%s: not a live stream "
             "(spillway never uses stream 0)", call);
        return NULL;
    }
    return st;
}

static swcu_result stream_ok(swcu_stream s, const char *call)
{
    if (stream_of(s, 0, call) == NULL)
        return SWCU_CUDA_ERROR_INVALID_HANDLE;
    return sticky;
}

static swcu_result event_ok(swcu_event e, const char *call)
{
    if (e == NULL || e->magic != LIVE)
        return fail(SWCU_CUDA_ERROR_INVALID_HANDLE, "%s: not a live event",
                    call);
    return SWCU_CUDA_SUCCESS;
}

/* Queue o on s (takes o). */
static void enqueue(struct CUstream_st *s, fake_op *o)
{
    pthread_mutex_lock(&qmu);
    o->next = NULL;
    if (o->ev != NULL)
        o->ev->refs++;
    if (s->tail != NULL)
        s->tail->next = o;
    else
        s->head = o;
    s->tail = o;
    s->queued++;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&qmu);
}

static fake_op *op_new(int kind, const char *call)
{
    fake_op *o = calloc(1, sizeof *o);
    if (o != NULL) {
        o->kind = kind;
        o->call = call;
    }
    return o;
}

/* ------------------------------------------------------------------------
 * Copies and memsets (queued)
 * ---------------------------------------------------------------------- */

static swcu_result queued(swcu_stream s, const char *call)
{
    swcu_result r = need_ctx(call);
    return r ? r : stream_ok(s, call);
}

swcu_result cuMemcpyHtoDAsync_v2(swcu_deviceptr dst, const void *src,
                                 size_t bytes, swcu_stream stream)
{
    swcu_result r = queued(stream, "cuMemcpyHtoDAsync_v2");
    if (r)
        return r;
    if (!check_range(dst, bytes, "cuMemcpyHtoDAsync_v2"))
        return SWCU_CUDA_ERROR_INVALID_VALUE;
    fake_op *o = op_new(OP_H2D, "cuMemcpyHtoDAsync_v2");
    if (o == NULL)
        return SWCU_CUDA_ERROR_OUT_OF_MEMORY;
    o->dst = (void *)(uintptr_t)dst;
    o->src = src;
    o->n = bytes;
    o->host_pinned = is_pinned(src, bytes);
    if (!o->host_pinned) {
        /* Pageable: the stream's earlier work first (a copy into this
         * very memory may be queued there), then the source staged, as
         * NVIDIA documents it ("a stream sync is performed before the copy
         * is initiated"); the caller may reuse src on return. */
        pthread_mutex_lock(&qmu);
        unsigned long long target = stream->queued;
        while (stream->done < target)
            pthread_cond_wait(&qcv, &qmu);
        pthread_mutex_unlock(&qmu);
        o->staged = malloc(bytes ? bytes : 1);
        if (o->staged == NULL) {
            free(o);
            return SWCU_CUDA_ERROR_OUT_OF_MEMORY;
        }
        memcpy(o->staged, src, bytes);
    }
    enqueue(stream, o);
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuMemcpyHtoD_v2(swcu_deviceptr dst, const void *src,
                            size_t bytes)
{
    swcu_result r = need_ctx("cuMemcpyHtoD_v2");
    if (r)
        return r;
    if (!check_range(dst, bytes, "cuMemcpyHtoD_v2"))
        return SWCU_CUDA_ERROR_INVALID_VALUE;
    memcpy((void *)(uintptr_t)dst, src, bytes);
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuMemcpyDtoHAsync_v2(void *dst, swcu_deviceptr src, size_t bytes,
                                 swcu_stream stream)
{
    swcu_result r = queued(stream, "cuMemcpyDtoHAsync_v2");
    if (r)
        return r;
    if (!check_range(src, bytes, "cuMemcpyDtoHAsync_v2"))
        return SWCU_CUDA_ERROR_INVALID_VALUE;
    fake_op *o = op_new(OP_D2H, "cuMemcpyDtoHAsync_v2");
    if (o == NULL)
        return SWCU_CUDA_ERROR_OUT_OF_MEMORY;
    /* Lands when it runs, pinned or not: the caller waits for an event. */
    o->dst = dst;
    o->src = (const void *)(uintptr_t)src;
    o->n = bytes;
    o->host_pinned = is_pinned(dst, bytes);
    enqueue(stream, o);
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuMemcpyDtoDAsync_v2(swcu_deviceptr dst, swcu_deviceptr src,
                                 size_t bytes, swcu_stream stream)
{
    swcu_result r = queued(stream, "cuMemcpyDtoDAsync_v2");
    if (r)
        return r;
    if (!check_range(dst, bytes, "cuMemcpyDtoDAsync_v2 dst") ||
        !check_range(src, bytes, "cuMemcpyDtoDAsync_v2 src"))
        return SWCU_CUDA_ERROR_INVALID_VALUE;
    if (dst < src + bytes && src < dst + bytes)
        return fail(SWCU_CUDA_ERROR_INVALID_VALUE, "%s between overlapping "
                    "ranges (undefined in CUDA)", "cuMemcpyDtoDAsync_v2");
    fake_op *o = op_new(OP_D2D, "cuMemcpyDtoDAsync_v2");
    if (o == NULL)
        return SWCU_CUDA_ERROR_OUT_OF_MEMORY;
    o->dst = (void *)(uintptr_t)dst;
    o->src = (const void *)(uintptr_t)src;
    o->n = bytes;
    enqueue(stream, o);
    return SWCU_CUDA_SUCCESS;
}

#define FAKE_MEMSET(NAME, T, A)                                               \
    swcu_result NAME(swcu_deviceptr dst, T value, size_t n,                   \
                     swcu_stream stream)                                      \
    {                                                                         \
        swcu_result r = queued(stream, #NAME);                                \
        if (r)                                                                \
            return r;                                                         \
        if (dst % (A) != 0)                                                   \
            return fail(SWCU_CUDA_ERROR_INVALID_VALUE, "%s: misaligned "      \
                        "destination", #NAME);                                \
        if (!check_range(dst, n * sizeof(T), #NAME))                          \
            return SWCU_CUDA_ERROR_INVALID_VALUE;                             \
        fake_op *o = op_new(OP_MEMSET, #NAME);                                \
        if (o == NULL)                                                        \
            return SWCU_CUDA_ERROR_OUT_OF_MEMORY;                             \
        o->dst = (void *)(uintptr_t)dst;                                      \
        o->n = n;                                                             \
        o->value = value;                                                     \
        o->width = sizeof(T);                                                 \
        enqueue(stream, o);                                                   \
        return SWCU_CUDA_SUCCESS;                                             \
    }
FAKE_MEMSET(cuMemsetD8Async, unsigned char, 1)
FAKE_MEMSET(cuMemsetD16Async, unsigned short, 2)
FAKE_MEMSET(cuMemsetD32Async, unsigned int, 4)

/* ------------------------------------------------------------------------
 * Streams and events
 * ---------------------------------------------------------------------- */

swcu_result cuStreamCreate(swcu_stream *stream, unsigned int flags)
{
    swcu_result r = need_ctx("cuStreamCreate");
    if (r)
        return r;
    if (flags != SWCU_CU_STREAM_NON_BLOCKING)
        return fail(SWCU_CUDA_ERROR_INVALID_VALUE, "%s: spillway's streams "
                    "are non-blocking", "cuStreamCreate");
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (s == NULL)
        return SWCU_CUDA_ERROR_OUT_OF_MEMORY;
    if (stream_start(s) != 0) {
        free(s);
        return SWCU_CUDA_ERROR_OUT_OF_MEMORY;
    }
    s->magic = LIVE;
    pthread_mutex_lock(&mu);
    live_streams++;
    s->live_next = live_list;
    live_list = s;
    pthread_mutex_unlock(&mu);
    *stream = s;
    return SWCU_CUDA_SUCCESS;
}

/* The stream's context, for a live stream only: a destroyed or foreign
 * handle is looked up, never read (the driver says
 * CUDA_ERROR_INVALID_HANDLE where it can tell). */
swcu_result cuStreamGetCtx(swcu_stream stream, swcu_context *pctx)
{
    pthread_mutex_lock(&mu);
    struct CUstream_st *s = live_list;
    while (s != NULL && s != stream)
        s = s->live_next;
    pthread_mutex_unlock(&mu);
    if (s == NULL)
        return fail(SWCU_CUDA_ERROR_INVALID_HANDLE, "%s: not a live stream",
                    "cuStreamGetCtx");
    *pctx = &primary;
    return SWCU_CUDA_SUCCESS;
}

/* The stream's work runs to its end (as CUDA lets it), then it goes. */
swcu_result cuStreamDestroy_v2(swcu_stream stream)
{
    if (stream_of(stream, 0, "cuStreamDestroy_v2") == NULL)
        return SWCU_CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&mu);
    struct CUstream_st **pp = &live_list;
    while (*pp != NULL && *pp != stream)
        pp = &(*pp)->live_next;
    if (*pp != NULL)
        *pp = stream->live_next;
    pthread_mutex_unlock(&mu);
    stream->magic = 0;
    pthread_mutex_lock(&qmu);
    stream->stop = 1;
    pthread_cond_signal(&stream->work);
    pthread_mutex_unlock(&qmu);
    pthread_join(stream->thread, NULL);
    pthread_cond_destroy(&stream->work);
    free(stream);
    pthread_mutex_lock(&mu);
    live_streams--;
    pthread_mutex_unlock(&mu);
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuStreamSynchronize(swcu_stream stream)
{
    struct CUstream_st *s = stream_of(stream, 1, "cuStreamSynchronize");
    if (s == NULL)
        return SWCU_CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&qmu);
    unsigned long long target = s->queued;
    while (s->done < target)
        pthread_cond_wait(&qcv, &qmu);
    pthread_mutex_unlock(&qmu);
    return sticky;
}

swcu_result cuStreamQuery(swcu_stream stream)
{
    struct CUstream_st *s = stream_of(stream, 1, "cuStreamQuery");
    if (s == NULL)
        return SWCU_CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&qmu);
    int idle = s->done == s->queued;
    if (!idle)
        stat_not_ready++;
    pthread_mutex_unlock(&qmu);
    if (sticky)
        return sticky;
    return idle ? SWCU_CUDA_SUCCESS : SWCU_CUDA_ERROR_NOT_READY;
}

/* Work queued on stream after this waits for the event's record as it is
 * now (a later record of the event does not change it). */
swcu_result cuStreamWaitEvent(swcu_stream stream, swcu_event event,
                              unsigned int flags)
{
    struct CUstream_st *s = stream_of(stream, 1, "cuStreamWaitEvent");
    if (s == NULL)
        return SWCU_CUDA_ERROR_INVALID_HANDLE;
    swcu_result r = event_ok(event, "cuStreamWaitEvent");
    if (!r && flags != 0)
        r = SWCU_CUDA_ERROR_INVALID_VALUE;
    if (r)
        return r;
    fake_op *o = op_new(OP_WAIT, "cuStreamWaitEvent");
    if (o == NULL)
        return SWCU_CUDA_ERROR_OUT_OF_MEMORY;
    o->ev = event;
    pthread_mutex_lock(&qmu);
    o->gen = event->gen;
    if (!record_done(event, event->gen))
        stat_waits_blocked++; /* a real cross-stream dependency */
    pthread_mutex_unlock(&qmu);
    enqueue(s, o);
    return sticky;
}

swcu_result cuEventCreate(swcu_event *event, unsigned int flags)
{
    swcu_result r = need_ctx("cuEventCreate");
    if (r)
        return r;
    /* spillway's events do not time, but for the plain timing events
     * (flags 0) of its copy stream. */
    if (flags != 0 &&
        ((flags & SWCU_CU_EVENT_DISABLE_TIMING) == 0 ||
         (flags & ~(unsigned)(SWCU_CU_EVENT_DISABLE_TIMING |
                              SWCU_CU_EVENT_BLOCKING_SYNC)) != 0))
        return fail(SWCU_CUDA_ERROR_INVALID_VALUE, "%s: spillway's events "
                    "either time (flags 0) or do not", "cuEventCreate");
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (e == NULL)
        return SWCU_CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = LIVE;
    e->flags = flags;
    e->refs = 1;
    pthread_mutex_lock(&mu);
    live_events++;
    pthread_mutex_unlock(&mu);
    *event = e;
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuEventRecord(swcu_event event, swcu_stream stream)
{
    swcu_result r = event_ok(event, "cuEventRecord");
    if (r)
        return r;
    struct CUstream_st *s = stream_of(stream, 1, "cuEventRecord");
    if (s == NULL)
        return SWCU_CUDA_ERROR_INVALID_HANDLE;
    fake_op *o = op_new(OP_RECORD, "cuEventRecord");
    if (o == NULL)
        return SWCU_CUDA_ERROR_OUT_OF_MEMORY;
    o->ev = event;
    pthread_mutex_lock(&qmu);
    o->gen = ++event->gen;
    if (s->head == NULL) {
        /* Nothing queued before it: complete at once, as on a GPU, whose
         * idle stream passes a record straight away. */
        record_stamp(event, o->gen);
        pthread_cond_broadcast(&qcv);
        pthread_mutex_unlock(&qmu);
        free(o);
        return sticky;
    }
    if (record_pending(event, o->gen) != 0) {
        --event->gen;
        pthread_mutex_unlock(&qmu);
        free(o);
        return SWCU_CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&qmu);
    enqueue(s, o);
    return sticky;
}

swcu_result cuEventQuery(swcu_event event)
{
    swcu_result r = event_ok(event, "cuEventQuery");
    if (r)
        return r;
    pthread_mutex_lock(&qmu);
    int done = record_done(event, event->gen);
    if (!done)
        stat_not_ready++;
    pthread_mutex_unlock(&qmu);
    if (sticky)
        return sticky;
    return done ? SWCU_CUDA_SUCCESS : SWCU_CUDA_ERROR_NOT_READY;
}

/* As the driver: both timing events, both latest records complete (else
 * CUDA_ERROR_NOT_READY), milliseconds between them. */
swcu_result cuEventElapsedTime_v2(float *ms, swcu_event start,
                                  swcu_event end)
{
    swcu_result r = event_ok(start, "cuEventElapsedTime");
    if (r == SWCU_CUDA_SUCCESS)
        r = event_ok(end, "cuEventElapsedTime");
    if (r)
        return r;
    if (ms == NULL)
        return fail(SWCU_CUDA_ERROR_INVALID_VALUE, "%s: ms is NULL",
                    "cuEventElapsedTime");
    if ((start->flags | end->flags) & SWCU_CU_EVENT_DISABLE_TIMING)
        return fail(SWCU_CUDA_ERROR_INVALID_HANDLE, "%s: an event "
                    "created with CU_EVENT_DISABLE_TIMING",
                    "cuEventElapsedTime");
    pthread_mutex_lock(&qmu);
    int ready = start->gen != 0 && end->gen != 0 &&
                start->tgen == start->gen && end->tgen == end->gen &&
                record_done(start, start->gen) && record_done(end, end->gen);
    double dt = end->t - start->t;
    pthread_mutex_unlock(&qmu);
    if (!ready)
        return SWCU_CUDA_ERROR_NOT_READY;
    *ms = (float)(dt * 1e3);
    return sticky;
}

swcu_result cuEventSynchronize(swcu_event event)
{
    swcu_result r = event_ok(event, "cuEventSynchronize");
    if (r)
        return r;
    pthread_mutex_lock(&qmu);
    unsigned long long target = event->gen;
    while (!record_done(event, target))
        pthread_cond_wait(&qcv, &qmu);
    pthread_mutex_unlock(&qmu);
    return sticky;
}

/* Destroyed at once for the caller; what is still queued with it finishes
 * first (as CUDA allows). */
swcu_result cuEventDestroy_v2(swcu_event event)
{
    swcu_result r = event_ok(event, "cuEventDestroy_v2");
    if (r)
        return r;
    event->magic = 0;
    pthread_mutex_lock(&qmu);
    event_unref(event);
    pthread_mutex_unlock(&qmu);
    pthread_mutex_lock(&mu);
    live_events--;
    pthread_mutex_unlock(&mu);
    return SWCU_CUDA_SUCCESS;
}

/* Queued: the memory stays allocated until the stream's earlier work is
 * done. */
swcu_result cuMemFreeAsync(swcu_deviceptr dptr, swcu_stream stream)
{
    swcu_result r = need_ctx("cuMemFreeAsync");
    if (!r)
        r = stream_ok(stream, "cuMemFreeAsync");
    if (r)
        return r;
    pthread_mutex_lock(&mu);
    size_t i = upper((uintptr_t)dptr);
    int ok = i > 0 && allocs[i - 1].base == (uintptr_t)dptr &&
             allocs[i - 1].pool != NULL;
    pthread_mutex_unlock(&mu);
    if (!ok)
        return fail(SWCU_CUDA_ERROR_INVALID_VALUE, "%s: not a live pool "
                    "allocation", "cuMemFreeAsync");
    fake_op *o = op_new(OP_FREE, "cuMemFreeAsync");
    if (o == NULL)
        return SWCU_CUDA_ERROR_OUT_OF_MEMORY;
    o->dst = (void *)(uintptr_t)dptr;
    enqueue(stream, o);
    return SWCU_CUDA_SUCCESS;
}

/* What the tests check (not a CUDA entry point). */
typedef struct fake_cuda_stats_t {
    unsigned long long ops;           /* queued operations run */
    unsigned long long not_ready;     /* queries that said NOT_READY */
    unsigned long long waits_blocked; /* cuStreamWaitEvent on work not done */
    unsigned long long pinned_allocs; /* cuMemHostAlloc calls */
    long streams, events, pinned_live;
} fake_cuda_stats_t;

API void fake_cuda_stats(fake_cuda_stats_t *out);
API void fake_cuda_set_sticky(unsigned code);

void fake_cuda_stats(fake_cuda_stats_t *out)
{
    pthread_mutex_lock(&qmu);
    out->ops = stat_ops;
    out->not_ready = stat_not_ready;
    out->waits_blocked = stat_waits_blocked;
    pthread_mutex_unlock(&qmu);
    pthread_mutex_lock(&mu);
    out->pinned_allocs = stat_pinned_allocs;
    out->pinned_live = (long)npinned;
    out->streams = live_streams;
    out->events = live_events;
    pthread_mutex_unlock(&mu);
}

/* A context error as a kernel fault leaves it (0 clears it). */
void fake_cuda_set_sticky(unsigned code) { sticky = code; }

/* ------------------------------------------------------------------------
 * Modules and kernels
 * ---------------------------------------------------------------------- */

swcu_result cuModuleLoadData(swcu_module *module, const void *image)
{
    swcu_result r = need_ctx("cuModuleLoadData");
    if (r)
        return r;
    const unsigned char *im = image;
    size_t size;
    if (memcmp(im, "\177ELF", 4) == 0 && im[4] == 2) {
        /* 64-bit ELF: the section headers end the image. */
        uint64_t shoff;
        uint16_t shentsize, shnum;
        memcpy(&shoff, im + 0x28, 8);
        memcpy(&shentsize, im + 0x3A, 2);
        memcpy(&shnum, im + 0x3C, 2);
        size = (size_t)shoff + (size_t)shentsize * shnum;
    } else if (strstr((const char *)im, ".version") != NULL &&
               strstr((const char *)im, ".target") != NULL) {
        size = strlen((const char *)im);
    } else {
        return fail(SWCU_CUDA_ERROR_INVALID_IMAGE, "%s: neither a CUBIN nor "
                    "PTX", "cuModuleLoadData");
    }
    struct CUmod_st *m = calloc(1, sizeof *m);
    if (m == NULL)
        return SWCU_CUDA_ERROR_OUT_OF_MEMORY;
    m->magic = LIVE;
    m->image = im; /* the caller keeps the image (the backend caches it) */
    m->size = size;
    pthread_mutex_lock(&mu);
    live_modules++;
    pthread_mutex_unlock(&mu);
    *module = m;
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuModuleUnload(swcu_module module)
{
    if (module == NULL || module->magic != LIVE)
        return SWCU_CUDA_ERROR_INVALID_HANDLE;
    module->magic = 0;
    for (int i = 0; i < module->nfuncs; i++)
        module->funcs[i].magic = 0;
    free(module);
    pthread_mutex_lock(&mu);
    live_modules--;
    pthread_mutex_unlock(&mu);
    return SWCU_CUDA_SUCCESS;
}

/* The emulated kernels, by entry name: an operation on a type, as
 * kernels/cuda.cu declares them. */
enum { K_FILL, K_COPY, K_ADD, K_SCALE, K_AXPY, K_SUM, K_FINAL, K_BYTES };
enum {
    T_U8, T_U16, T_U32, T_U64, T_U128, T_F16, T_BF16, T_F32, T_F64, T_C64,
    T_C128, T_I8, T_I16, T_I32, T_B8, T_NONE
};
static const struct {
    const char *name;
    int op, type;
} kernel_table[] = {
#define ARITH(S, T)                                                           \
    {"sw_add_" S, K_ADD, T}, {"sw_scale_" S, K_SCALE, T},                     \
        {"sw_axpy_" S, K_AXPY, T}
    {"sw_fill_u8", K_FILL, T_U8},     {"sw_fill_u16", K_FILL, T_U16},
    {"sw_fill_u32", K_FILL, T_U32},   {"sw_fill_u64", K_FILL, T_U64},
    {"sw_fill_u128", K_FILL, T_U128}, {"sw_copy_u8", K_COPY, T_U8},
    {"sw_copy_u16", K_COPY, T_U16},   {"sw_copy_u32", K_COPY, T_U32},
    {"sw_copy_u64", K_COPY, T_U64},   ARITH("u8", T_U8),
    ARITH("u16", T_U16),              ARITH("u32", T_U32),
    ARITH("u64", T_U64),              ARITH("f16", T_F16),
    ARITH("bf16", T_BF16),            ARITH("f32", T_F32),
    ARITH("f64", T_F64),              ARITH("c64", T_C64),
    ARITH("c128", T_C128),
    {"sw_sum_i8", K_SUM, T_I8},       {"sw_sum_i16", K_SUM, T_I16},
    {"sw_sum_i32", K_SUM, T_I32},     {"sw_sum_u8", K_SUM, T_U8},
    {"sw_sum_u16", K_SUM, T_U16},     {"sw_sum_u32", K_SUM, T_U32},
    {"sw_sum_u64", K_SUM, T_U64},     {"sw_sum_b8", K_SUM, T_B8},
    {"sw_sum_f16", K_SUM, T_F16},     {"sw_sum_bf16", K_SUM, T_BF16},
    {"sw_sum_f32", K_SUM, T_F32},     {"sw_sum_f64", K_SUM, T_F64},
    {"sw_sum_c64", K_SUM, T_C64},     {"sw_sum_c128", K_SUM, T_C128},
    {"sw_sum_final_f64", K_FINAL, T_F64},
    {"sw_sum_final_i64", K_FINAL, T_U64},
    {"sw_sum_final_c128", K_FINAL, T_C128},
    {"sw_fill_bytes", K_BYTES, T_NONE},
#undef ARITH
};
#define NKERNELS (int)(sizeof kernel_table / sizeof kernel_table[0])

/* The function's kind: an index into kernel_table, or -1. */
static int kernel_kind(const char *name)
{
    for (int k = 0; k < NKERNELS; k++)
        if (strcmp(name, kernel_table[k].name) == 0)
            return k;
    return -1;
}

static void *memmem_(const void *hay, size_t n, const char *needle)
{
    size_t m = strlen(needle);
    const unsigned char *h = hay;
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(h + i, needle, m) == 0)
            return (void *)(h + i);
    return NULL;
}

swcu_result cuModuleGetFunction(swcu_function *function, swcu_module module,
                                const char *name)
{
    if (module == NULL || module->magic != LIVE)
        return SWCU_CUDA_ERROR_INVALID_HANDLE;
    int kind = kernel_kind(name);
    if (kind < 0 || memmem_(module->image, module->size, name) == NULL)
        return fail(SWCU_CUDA_ERROR_NOT_FOUND, "cuModuleGetFunction: no "
                    "entry '%s' in the image", name);
    struct CUfunc_st *f = NULL;
    for (int i = 0; i < module->nfuncs && f == NULL; i++)
        if (module->funcs[i].kind == kind)
            f = &module->funcs[i];
    if (f == NULL) {
        if (module->nfuncs == 96)
            return SWCU_CUDA_ERROR_OUT_OF_MEMORY;
        f = &module->funcs[module->nfuncs++];
        f->magic = LIVE;
        f->kind = kind;
    }
    *function = f;
    return SWCU_CUDA_SUCCESS;
}

/* A kernel fault: the context is done, as on a GPU. */
static swcu_result fault(swcu_result r, const char *what)
{
    fprintf(stderr, "fake libcuda: kernel fault: %s\n", what);
    pthread_mutex_lock(&mu);
    sticky = r;
    pthread_mutex_unlock(&mu);
    return r;
}

#define ARG(T, i) (*(T *)params[i])

/* float16 and bfloat16 convert with the kernels' own code: the helpers
 * section of kernels/cuda.cu is plain C (SW_DEV, SW_HELPERS_ONLY). */
static inline float fake_uint_as_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t fake_float_as_uint(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
#define __uint_as_float fake_uint_as_float
#define __float_as_uint fake_float_as_uint
#define SW_DEV static inline
#define SW_HELPERS_ONLY 1
#include "backend/kernels/cuda.cu"
#undef SW_HELPERS_ONLY
#undef SW_DEV

typedef uint32_t u32;
typedef uint64_t u64;

/* A typed operand: aligned to align, [p, p + bytes) live. */
static swcu_result operand(const void *p, size_t align, size_t bytes,
                           const char *what)
{
    if ((uintptr_t)p % align)
        return fault(SWCU_CUDA_ERROR_MISALIGNED_ADDRESS, what);
    if (!check_range((swcu_deviceptr)(uintptr_t)p, bytes, what))
        return fault(SWCU_CUDA_ERROR_ILLEGAL_ADDRESS, what);
    return SWCU_CUDA_SUCCESS;
}

/* Element sizes (and alignments) of the types. */
static size_t type_size(int t)
{
    static const size_t size[] = {
        [T_U8] = 1, [T_U16] = 2, [T_U32] = 4, [T_U64] = 8, [T_U128] = 16,
        [T_F16] = 2, [T_BF16] = 2, [T_F32] = 4, [T_F64] = 8, [T_C64] = 8,
        [T_C128] = 16, [T_I8] = 1, [T_I16] = 2, [T_I32] = 4, [T_B8] = 1,
    };
    return size[t];
}

/* FILL (out, alpha, n) and COPY (out, a, n), by element size; the 16-byte
 * FILL is (out, lo, hi, n). */
static swcu_result fill_copy(int op, int type, void **params)
{
    size_t es = type_size(type);
    unsigned char *out = (unsigned char *)(uintptr_t)ARG(swcu_deviceptr, 0);
    unsigned long long n = ARG(unsigned long long, type == T_U128 ? 3 : 2);
    size_t bytes = (size_t)n * es;
    swcu_result r = operand(out, es, bytes, "kernel out");
    if (r)
        return r;
    if (op == K_FILL) {
        unsigned char v[16];
        if (type == T_U128) {
            memcpy(v, params[1], 8);
            memcpy(v + 8, params[2], 8);
        } else {
            memcpy(v, params[1], es);
        }
        for (unsigned long long i = 0; i < n; i++)
            memcpy(out + i * es, v, es);
        return SWCU_CUDA_SUCCESS;
    }
    const unsigned char *a =
        (const unsigned char *)(uintptr_t)ARG(swcu_deviceptr, 1);
    if ((r = operand(a, es, bytes, "kernel a")))
        return r;
    if (a != out && (uintptr_t)a < (uintptr_t)out + bytes &&
        (uintptr_t)out < (uintptr_t)a + bytes)
        return fault(SWCU_CUDA_ERROR_ILLEGAL_ADDRESS,
                     "COPY kernel on overlapping ranges (racy)");
    if (a != out)
        memcpy(out, a, bytes);
    return SWCU_CUDA_SUCCESS;
}

/* ADD (out, a, b, n), SCALE and AXPY (out, a, alpha, n) on storage type T
 * computed in C, alpha of type A, LD and ST converting: as SW_ARITH in
 * kernels/cuda.cu. */
#define SAME(x) (x)
#define FAKE_ARITH(NAME, T, C, A, LD, ST)                                     \
    static swcu_result NAME(int op, void **params)                           \
    {                                                                         \
        T *out = (T *)(uintptr_t)ARG(swcu_deviceptr, 0);                      \
        const T *a = (const T *)(uintptr_t)ARG(swcu_deviceptr, 1);            \
        unsigned long long n = ARG(unsigned long long, 3);                    \
        size_t bytes = (size_t)n * sizeof(T);                                 \
        swcu_result r = operand(out, sizeof(T), bytes, "kernel out");        \
        if (!r)                                                               \
            r = operand(a, sizeof(T), bytes, "kernel a");                     \
        if (r)                                                                \
            return r;                                                         \
        if (op == K_ADD) {                                                    \
            const T *b = (const T *)(uintptr_t)ARG(swcu_deviceptr, 2);        \
            if ((r = operand(b, sizeof(T), bytes, "kernel b")))               \
                return r;                                                     \
            for (unsigned long long i = 0; i < n; i++)                        \
                out[i] = (T)ST((C)LD(a[i]) + (C)LD(b[i]));                    \
            return SWCU_CUDA_SUCCESS;                                         \
        }                                                                     \
        A alpha = ARG(A, 2);                                                  \
        for (unsigned long long i = 0; i < n; i++)                            \
            out[i] = op == K_SCALE                                            \
                         ? (T)ST((C)alpha * (C)LD(a[i]))                      \
                         : (T)ST((C)alpha * (C)LD(a[i]) + (C)LD(out[i]));     \
        return SWCU_CUDA_SUCCESS;                                             \
    }
FAKE_ARITH(ar_u8, uint8_t, u32, uint8_t, SAME, SAME)
FAKE_ARITH(ar_u16, uint16_t, u32, uint16_t, SAME, SAME)
FAKE_ARITH(ar_u32, u32, u32, u32, SAME, SAME)
FAKE_ARITH(ar_u64, u64, u64, u64, SAME, SAME)
FAKE_ARITH(ar_f32, float, float, float, SAME, SAME)
FAKE_ARITH(ar_f64, double, double, double, SAME, SAME)
FAKE_ARITH(ar_f16, uint16_t, float, float, sw_f16_to_f32, sw_f32_to_f16)
FAKE_ARITH(ar_bf16, uint16_t, float, float, sw_bf16_to_f32, sw_f32_to_bf16)

/* Complex (float2 / double2 elements, alpha as ar, ai): as SW_COMPLEX. */
#define FAKE_COMPLEX(NAME, R)                                                 \
    static swcu_result NAME(int op, void **params)                           \
    {                                                                         \
        R *out = (R *)(uintptr_t)ARG(swcu_deviceptr, 0);                      \
        const R *a = (const R *)(uintptr_t)ARG(swcu_deviceptr, 1);            \
        unsigned long long n = ARG(unsigned long long, op == K_ADD ? 3 : 4);  \
        size_t bytes = (size_t)n * 2 * sizeof(R);                             \
        swcu_result r = operand(out, 2 * sizeof(R), bytes, "kernel out");    \
        if (!r)                                                               \
            r = operand(a, 2 * sizeof(R), bytes, "kernel a");                 \
        if (r)                                                                \
            return r;                                                         \
        if (op == K_ADD) {                                                    \
            const R *b = (const R *)(uintptr_t)ARG(swcu_deviceptr, 2);        \
            if ((r = operand(b, 2 * sizeof(R), bytes, "kernel b")))           \
                return r;                                                     \
            for (unsigned long long i = 0; i < n; i++) {                      \
                R re = a[2 * i] + b[2 * i], im = a[2 * i + 1] + b[2 * i + 1]; \
                out[2 * i] = re;                                              \
                out[2 * i + 1] = im;                                          \
            }                                                                 \
            return SWCU_CUDA_SUCCESS;                                         \
        }                                                                     \
        R ar = ARG(R, 2), ai = ARG(R, 3);                                     \
        for (unsigned long long i = 0; i < n; i++) {                          \
            R xr = a[2 * i], xi = a[2 * i + 1];                               \
            R yr = out[2 * i], yi = out[2 * i + 1];                           \
            R re = ar * xr - ai * xi, im = ar * xi + ai * xr;                 \
            if (op == K_AXPY) {                                               \
                re = re + yr;                                                 \
                im = im + yi;                                                 \
            }                                                                 \
            out[2 * i] = re;                                                  \
            out[2 * i + 1] = im;                                              \
        }                                                                     \
        return SWCU_CUDA_SUCCESS;                                             \
    }
FAKE_COMPLEX(ar_c64, float)
FAKE_COMPLEX(ar_c128, double)

/* Accumulators: u64, double, and a complex pair. */
typedef struct {
    double re, im;
} c128;
static u64 add_u64(u64 x, u64 y) { return x + y; }
static double add_double(double x, double y) { return x + y; }
static c128 add_c128(c128 x, c128 y)
{
    c128 r = {x.re + y.re, x.im + y.im};
    return r;
}

/* A block's tree sum over 256 slots, as sw_block_sum does it. */
#define FAKE_TREE(A)                                                          \
    static A tree_##A(A *sh)                                                  \
    {                                                                         \
        for (unsigned s = 128; s > 0; s >>= 1)                                \
            for (unsigned t = 0; t < s; t++)                                  \
                sh[t] = add_##A(sh[t], sh[t + s]);                            \
        return sh[0];                                                         \
    }
FAKE_TREE(double)
FAKE_TREE(u64)
FAKE_TREE(c128)

/* Element conversions into accumulators, as cuda.cu's SW_SUM uses. */
static u64 sext8(int8_t x) { return (u64)(int64_t)x; }
static u64 sext16(int16_t x) { return (u64)(int64_t)x; }
static u64 sext32(int32_t x) { return (u64)(int64_t)x; }
static u64 zext(u64 x) { return x; }
static u64 nonzero(uint8_t x) { return x != 0; }
static double f16d(uint16_t x) { return (double)sw_f16_to_f32(x); }
static double bf16d(uint16_t x) { return (double)sw_bf16_to_f32(x); }
static double dbl(double x) { return x; }
static const double zero_double = 0.0;
static const u64 zero_u64 = 0;
static const c128 zero_c128 = {0.0, 0.0};

/* Pass 1 of a sum, thread by thread: partials[b] for each block b.
 * Elements of S bytes, aligned to S, read by LOAD. */
#define FAKE_SUM(NAME, S, A, LOAD)                                            \
    static swcu_result NAME(void **params, unsigned grid)                     \
    {                                                                         \
        const unsigned char *a =                                              \
            (const unsigned char *)(uintptr_t)ARG(swcu_deviceptr, 0);         \
        unsigned long long n = ARG(unsigned long long, 1);                    \
        A *partials = (A *)(uintptr_t)ARG(swcu_deviceptr, 2);                 \
        if ((uintptr_t)a % (S) || (uintptr_t)partials % 8)                    \
            return fault(SWCU_CUDA_ERROR_MISALIGNED_ADDRESS, "sum");          \
        if (!check_range((swcu_deviceptr)(uintptr_t)a, n * (S),               \
                         "sum input") ||                                      \
            !check_range((swcu_deviceptr)(uintptr_t)partials,                 \
                         grid * sizeof(A), "sum partials"))                   \
            return fault(SWCU_CUDA_ERROR_ILLEGAL_ADDRESS, "sum");             \
        A sh[256];                                                            \
        for (unsigned b = 0; b < grid; b++) {                                 \
            for (unsigned t = 0; t < 256; t++) {                              \
                A acc = zero_##A;                                             \
                for (unsigned long long i = (unsigned long long)b * 256 + t;  \
                     i < n; i += (unsigned long long)grid * 256)              \
                    acc = add_##A(acc, LOAD(a + i * (S)));                    \
                sh[t] = acc;                                                  \
            }                                                                 \
            partials[b] = tree_##A(sh);                                       \
        }                                                                     \
        return SWCU_CUDA_SUCCESS;                                             \
    }
#define LD(T, CONV, p) CONV(*(const T *)(const void *)(p))
#define L_I8(p) LD(int8_t, sext8, p)
#define L_I16(p) LD(int16_t, sext16, p)
#define L_I32(p) LD(int32_t, sext32, p)
#define L_U8(p) LD(uint8_t, zext, p)
#define L_U16(p) LD(uint16_t, zext, p)
#define L_U32(p) LD(u32, zext, p)
#define L_U64(p) LD(u64, zext, p)
#define L_B8(p) LD(uint8_t, nonzero, p)
#define L_F16(p) LD(uint16_t, f16d, p)
#define L_BF16(p) LD(uint16_t, bf16d, p)
#define L_F32(p) LD(float, dbl, p)
#define L_F64(p) LD(double, dbl, p)
static c128 l_c64(const unsigned char *p)
{
    const float *f = (const float *)(const void *)p;
    c128 r = {(double)f[0], (double)f[1]};
    return r;
}
static c128 l_c128(const unsigned char *p)
{
    const double *d = (const double *)(const void *)p;
    c128 r = {d[0], d[1]};
    return r;
}
FAKE_SUM(sum_i8, 1, u64, L_I8)
FAKE_SUM(sum_i16, 2, u64, L_I16)
FAKE_SUM(sum_i32, 4, u64, L_I32)
FAKE_SUM(sum_u8, 1, u64, L_U8)
FAKE_SUM(sum_u16, 2, u64, L_U16)
FAKE_SUM(sum_u32, 4, u64, L_U32)
FAKE_SUM(sum_u64, 8, u64, L_U64)
FAKE_SUM(sum_b8, 1, u64, L_B8)
FAKE_SUM(sum_f16, 2, double, L_F16)
FAKE_SUM(sum_bf16, 2, double, L_BF16)
FAKE_SUM(sum_f32, 4, double, L_F32)
FAKE_SUM(sum_f64, 8, double, L_F64)
FAKE_SUM(sum_c64, 8, c128, l_c64)
FAKE_SUM(sum_c128, 16, c128, l_c128)

/* Pass 2: one block over count <= 256 partials; the result (8 bytes, 16
 * for a complex one) stored at any alignment. */
#define FAKE_FINAL(NAME, A)                                                   \
    static swcu_result NAME(void **params)                                    \
    {                                                                         \
        const A *partials = (const A *)(uintptr_t)ARG(swcu_deviceptr, 0);     \
        unsigned count = ARG(unsigned int, 1);                                \
        unsigned char *out = (unsigned char *)(uintptr_t)ARG(swcu_deviceptr, 2); \
        if (count == 0 || count > 256)                                        \
            return fault(SWCU_CUDA_ERROR_ILLEGAL_ADDRESS, "final count");     \
        if (!check_range((swcu_deviceptr)(uintptr_t)partials,                 \
                         count * sizeof(A), "final partials") ||              \
            !check_range((swcu_deviceptr)(uintptr_t)out, sizeof(A),           \
                         "final out"))                                        \
            return fault(SWCU_CUDA_ERROR_ILLEGAL_ADDRESS, "final");           \
        A sh[256];                                                            \
        for (unsigned t = 0; t < 256; t++)                                    \
            sh[t] = t < count ? partials[t] : zero_##A;                       \
        A total = tree_##A(sh);                                               \
        memcpy(out, &total, sizeof(A));                                       \
        return SWCU_CUDA_SUCCESS;                                             \
    }
FAKE_FINAL(final_f64, double)
FAKE_FINAL(final_i64, u64)
FAKE_FINAL(final_c128, c128)

/* (dst, n, lo, hi, psize): byte i is byte (i mod psize) of lo, hi. */
static swcu_result fill_bytes(void **params)
{
    unsigned char *dst = (unsigned char *)(uintptr_t)ARG(swcu_deviceptr, 0);
    unsigned long long n = ARG(unsigned long long, 1);
    unsigned char pat[16];
    memcpy(pat, params[2], 8);
    memcpy(pat + 8, params[3], 8);
    unsigned psize = ARG(unsigned int, 4);
    if (psize != 1 && psize != 2 && psize != 4 && psize != 8 && psize != 16)
        return fault(SWCU_CUDA_ERROR_ILLEGAL_ADDRESS, "fill_bytes psize");
    if (!check_range((swcu_deviceptr)(uintptr_t)dst, n, "fill_bytes"))
        return fault(SWCU_CUDA_ERROR_ILLEGAL_ADDRESS, "fill_bytes");
    for (unsigned long long i = 0; i < n; i++)
        dst[i] = pat[i % psize];
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuLaunchKernel(swcu_function f, unsigned int grid_x,
                           unsigned int grid_y, unsigned int grid_z,
                           unsigned int block_x, unsigned int block_y,
                           unsigned int block_z, unsigned int shared_bytes,
                           swcu_stream stream, void **params, void **extra)
{
    swcu_result r = queued(stream, "cuLaunchKernel");
    if (r)
        return r;
    if (f == NULL || f->magic != LIVE)
        return SWCU_CUDA_ERROR_INVALID_HANDLE;
    if (grid_x == 0 || grid_y != 1 || grid_z != 1 || block_x != 256 ||
        block_y != 1 || block_z != 1 || shared_bytes != 0 || extra != NULL ||
        params == NULL)
        return fail(SWCU_CUDA_ERROR_INVALID_VALUE, "%s: unexpected "
                    "configuration", "cuLaunchKernel");
    int op = kernel_table[f->kind].op;
    if (op == K_FINAL && grid_x != 1)
        return SWCU_CUDA_ERROR_INVALID_VALUE;
    if (op == K_SUM && grid_x > 256)
        return fail(SWCU_CUDA_ERROR_INVALID_VALUE, "%s: more partials "
                    "than the final pass sums", "sum");
    /* The arguments' values are taken now, as the driver does; the kernel
     * runs when the stream gets to it, and a fault there is sticky. */
    unsigned char sizes[FAKE_MAX_PARAMS];
    int n = param_sizes(f->kind, sizes);
    fake_op *o = op_new(OP_KERNEL, "cuLaunchKernel");
    if (o == NULL)
        return SWCU_CUDA_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < n; i++)
        memcpy(o->slots[i], params[i], sizes[i]);
    o->kkind = f->kind;
    o->grid = grid_x;
    enqueue(stream, o);
    return SWCU_CUDA_SUCCESS;
}

/* The sizes of kernel kind's parameters, as kernels/cuda.cu declares them
 * (the backend's table checks the same); their number. */
static int param_sizes(int kind, unsigned char *sz)
{
    int op = kernel_table[kind].op, type = kernel_table[kind].type;
    static const unsigned char alpha[] = {
        [T_U8] = 1, [T_U16] = 2, [T_U32] = 4, [T_U64] = 8, [T_F16] = 4,
        [T_BF16] = 4, [T_F32] = 4, [T_F64] = 8, [T_C64] = 4, [T_C128] = 8};
    switch (op) {
    case K_FILL:
        if (type == T_U128) {
            memcpy(sz, (unsigned char[]){8, 8, 8, 8}, 4);
            return 4;
        }
        memcpy(sz, (unsigned char[]){8, (unsigned char)type_size(type), 8},
               3);
        return 3;
    case K_COPY:
    case K_SUM:
        memcpy(sz, (unsigned char[]){8, 8, 8}, 3);
        return 3;
    case K_ADD:
        memcpy(sz, (unsigned char[]){8, 8, 8, 8}, 4);
        return 4;
    case K_SCALE:
    case K_AXPY:
        if (type == T_C64 || type == T_C128) {
            memcpy(sz, (unsigned char[]){8, 8, alpha[type], alpha[type], 8},
                   5);
            return 5;
        }
        memcpy(sz, (unsigned char[]){8, 8, alpha[type], 8}, 4);
        return 4;
    case K_FINAL:
        memcpy(sz, (unsigned char[]){8, 4, 8}, 3);
        return 3;
    default: /* K_BYTES */
        memcpy(sz, (unsigned char[]){8, 8, 8, 8, 4}, 5);
        return 5;
    }
}

/* A queued kernel, on its stream's worker. */
static swcu_result run_kernel(int kind, unsigned grid_x, void **params)
{
    int op = kernel_table[kind].op, type = kernel_table[kind].type;
    switch (op) {
    case K_FINAL:
        return type == T_F64 ? final_f64(params)
               : type == T_U64 ? final_i64(params)
                               : final_c128(params);
    case K_BYTES:
        return fill_bytes(params);
    case K_FILL:
    case K_COPY:
        return fill_copy(op, type, params);
    case K_SUM:
        switch (type) {
        case T_I8: return sum_i8(params, grid_x);
        case T_I16: return sum_i16(params, grid_x);
        case T_I32: return sum_i32(params, grid_x);
        case T_U8: return sum_u8(params, grid_x);
        case T_U16: return sum_u16(params, grid_x);
        case T_U32: return sum_u32(params, grid_x);
        case T_U64: return sum_u64(params, grid_x);
        case T_B8: return sum_b8(params, grid_x);
        case T_F16: return sum_f16(params, grid_x);
        case T_BF16: return sum_bf16(params, grid_x);
        case T_F32: return sum_f32(params, grid_x);
        case T_F64: return sum_f64(params, grid_x);
        case T_C64: return sum_c64(params, grid_x);
        default: return sum_c128(params, grid_x);
        }
    default:
        break;
    }
    switch (type) {
    case T_U8: return ar_u8(op, params);
    case T_U16: return ar_u16(op, params);
    case T_U32: return ar_u32(op, params);
    case T_U64: return ar_u64(op, params);
    case T_F16: return ar_f16(op, params);
    case T_BF16: return ar_bf16(op, params);
    case T_F32: return ar_f32(op, params);
    case T_F64: return ar_f64(op, params);
    case T_C64: return ar_c64(op, params);
    default: return ar_c128(op, params);
    }
}
