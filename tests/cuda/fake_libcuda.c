/*
 * fake_libcuda.c -- a strict stand-in for libcuda.so.1 on the CPU, so that
 * the CUDA backend's host side (loading, contexts, pools, the cuMemAlloc
 * fallback, streams, events, module loading, kernel arguments, deferred
 * frees) runs in CI without a GPU:
 *
 *   SPILLWAY_CUDA_LIBRARY=BUILD/tests/c/libcuda_fake.so \
 *   SW_TEST_DEVICE=cuda:0 BUILD/tests/c/test_spillway
 *
 * It is NOT a GPU and proves nothing about one: it exports the entry points
 * src/backend/cuda_api.h declares, with the same prototypes (so the
 * compiler checks them against that header), and implements them on host
 * memory.  Work runs at once, in the calling thread, so every stream is
 * trivially in order and every event complete when recorded.
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
 * kernels' CUDA C (src/backend/cuda.c), sums included block by block and
 * thread by thread, so results are the bits the GPU code should produce.
 *
 * Environment: FAKE_CUDA_MEMORY (bytes, default 2 GiB) is the device's
 * capacity; FAKE_CUDA_NO_POOLS=1 reports no memory-pool support.
 */
#include "backend/cuda_api.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
struct CUstream_st {
    unsigned magic;
};
struct CUevent_st {
    unsigned magic;
};
struct CUfunc_st {
    unsigned magic;
    int kind;
};
struct CUmod_st {
    unsigned magic;
    const unsigned char *image;
    size_t size;
    struct CUfunc_st funcs[64]; /* die with the module, as in CUDA */
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
static swcu_result sticky; /* a kernel fault ends the context */
static fake_alloc *allocs;  /* sorted by base */
static size_t nallocs, capallocs, allocated;
static size_t capacity = (size_t)2 << 30;
static long live_streams, live_events, live_modules, live_pools;

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

static swcu_result stream_ok(swcu_stream s, const char *call)
{
    if (s == NULL || s->magic != LIVE)
        return fail(SWCU_CUDA_ERROR_INVALID_HANDLE, "%s: not a live stream "
                    "(spillway never uses stream 0)", call);
    return sticky;
}

static swcu_result event_ok(swcu_event e, const char *call)
{
    if (e == NULL || e->magic != LIVE)
        return fail(SWCU_CUDA_ERROR_INVALID_HANDLE, "%s: not a live event",
                    call);
    return SWCU_CUDA_SUCCESS;
}

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

swcu_result cuMemFreeAsync(swcu_deviceptr dptr, swcu_stream stream)
{
    swcu_result r = need_ctx("cuMemFreeAsync");
    if (!r)
        r = stream_ok(stream, "cuMemFreeAsync");
    return r ? r : free_mem(dptr, 1, "cuMemFreeAsync");
}

swcu_result cuMemHostAlloc(void **p, size_t bytesize, unsigned int flags)
{
    (void)flags;
    swcu_result r = need_ctx("cuMemHostAlloc");
    if (r)
        return r;
    *p = malloc(bytesize);
    return *p ? SWCU_CUDA_SUCCESS : SWCU_CUDA_ERROR_OUT_OF_MEMORY;
}

swcu_result cuMemFreeHost(void *p)
{
    free(p);
    return SWCU_CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Copies and memsets (run at once)
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
    memcpy((void *)(uintptr_t)dst, src, bytes);
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
    memcpy(dst, (const void *)(uintptr_t)src, bytes);
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
    memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
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
        T *p = (T *)(uintptr_t)dst;                                           \
        for (size_t i = 0; i < n; i++)                                        \
            p[i] = value;                                                     \
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
    struct CUstream_st *s = malloc(sizeof *s);
    if (s == NULL)
        return SWCU_CUDA_ERROR_OUT_OF_MEMORY;
    s->magic = LIVE;
    pthread_mutex_lock(&mu);
    live_streams++;
    pthread_mutex_unlock(&mu);
    *stream = s;
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuStreamDestroy_v2(swcu_stream stream)
{
    swcu_result r = stream_ok(stream, "cuStreamDestroy_v2");
    if (r && r != sticky)
        return r;
    stream->magic = 0;
    free(stream);
    pthread_mutex_lock(&mu);
    live_streams--;
    pthread_mutex_unlock(&mu);
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuStreamSynchronize(swcu_stream stream)
{
    return stream_ok(stream, "cuStreamSynchronize");
}

swcu_result cuStreamWaitEvent(swcu_stream stream, swcu_event event,
                              unsigned int flags)
{
    swcu_result r = stream_ok(stream, "cuStreamWaitEvent");
    if (!r)
        r = event_ok(event, "cuStreamWaitEvent");
    if (!r && flags != 0)
        r = SWCU_CUDA_ERROR_INVALID_VALUE;
    return r;
}

swcu_result cuEventCreate(swcu_event *event, unsigned int flags)
{
    swcu_result r = need_ctx("cuEventCreate");
    if (r)
        return r;
    if (flags != SWCU_CU_EVENT_DISABLE_TIMING)
        return fail(SWCU_CUDA_ERROR_INVALID_VALUE, "%s: spillway's events "
                    "do not time", "cuEventCreate");
    struct CUevent_st *e = malloc(sizeof *e);
    if (e == NULL)
        return SWCU_CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = LIVE;
    pthread_mutex_lock(&mu);
    live_events++;
    pthread_mutex_unlock(&mu);
    *event = e;
    return SWCU_CUDA_SUCCESS;
}

swcu_result cuEventRecord(swcu_event event, swcu_stream stream)
{
    swcu_result r = event_ok(event, "cuEventRecord");
    return r ? r : stream_ok(stream, "cuEventRecord");
}

swcu_result cuEventQuery(swcu_event event)
{
    swcu_result r = event_ok(event, "cuEventQuery");
    return r ? r : sticky;
}

swcu_result cuEventSynchronize(swcu_event event)
{
    swcu_result r = event_ok(event, "cuEventSynchronize");
    return r ? r : sticky;
}

swcu_result cuEventDestroy_v2(swcu_event event)
{
    swcu_result r = event_ok(event, "cuEventDestroy_v2");
    if (r)
        return r;
    event->magic = 0;
    free(event);
    pthread_mutex_lock(&mu);
    live_events--;
    pthread_mutex_unlock(&mu);
    return SWCU_CUDA_SUCCESS;
}

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

/* The emulated kernels: op x type, plus the two final sums and the byte
 * fill. */
enum { K_FILL, K_COPY, K_ADD, K_SCALE, K_AXPY, K_SUM };
enum { T_F32, T_F64, T_U32, T_U64 };
#define K_SUM_FINAL_F64 100
#define K_SUM_FINAL_I64 101
#define K_FILL_BYTES 102

static int kernel_kind(const char *name)
{
    static const char *const ops[] = {"fill", "copy", "add", "scale", "axpy",
                                      "sum"};
    static const char *const types[] = {"f32", "f64", "i32", "i64"};
    if (strcmp(name, "sw_sum_final_f64") == 0)
        return K_SUM_FINAL_F64;
    if (strcmp(name, "sw_sum_final_i64") == 0)
        return K_SUM_FINAL_I64;
    if (strcmp(name, "sw_fill_bytes") == 0)
        return K_FILL_BYTES;
    for (int o = 0; o < 6; o++)
        for (int t = 0; t < 4; t++) {
            char want[32];
            snprintf(want, sizeof want, "sw_%s_%s", ops[o], types[t]);
            if (strcmp(name, want) == 0)
                return o * 4 + t;
        }
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
        if (module->nfuncs == 64)
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

/* Element-wise kernels on type T: out, then operands. */
#define FAKE_ELEMENTWISE(T)                                                   \
    static swcu_result ew_##T(int op, void **params, unsigned long long n)   \
    {                                                                         \
        T *out = (T *)(uintptr_t)ARG(swcu_deviceptr, 0);                      \
        size_t bytes = (size_t)n * sizeof(T);                                 \
        if ((uintptr_t)out % sizeof(T))                                       \
            return fault(SWCU_CUDA_ERROR_MISALIGNED_ADDRESS, "out");          \
        if (!check_range((swcu_deviceptr)(uintptr_t)out, bytes, "kernel out")) \
            return fault(SWCU_CUDA_ERROR_ILLEGAL_ADDRESS, "out");             \
        if (op == K_FILL) {                                                   \
            T alpha = ARG(T, 1);                                              \
            for (unsigned long long i = 0; i < n; i++)                        \
                out[i] = alpha;                                               \
            return SWCU_CUDA_SUCCESS;                                         \
        }                                                                     \
        const T *a = (const T *)(uintptr_t)ARG(swcu_deviceptr, 1);            \
        if ((uintptr_t)a % sizeof(T))                                         \
            return fault(SWCU_CUDA_ERROR_MISALIGNED_ADDRESS, "a");            \
        if (!check_range((swcu_deviceptr)(uintptr_t)a, bytes, "kernel a"))    \
            return fault(SWCU_CUDA_ERROR_ILLEGAL_ADDRESS, "a");               \
        if (op == K_COPY) {                                                   \
            if (a != out && (uintptr_t)a < (uintptr_t)out + bytes &&          \
                (uintptr_t)out < (uintptr_t)a + bytes)                        \
                return fault(SWCU_CUDA_ERROR_ILLEGAL_ADDRESS,                 \
                             "COPY kernel on overlapping ranges (racy)");     \
            for (unsigned long long i = 0; i < n; i++)                        \
                out[i] = a[i];                                                \
            return SWCU_CUDA_SUCCESS;                                         \
        }                                                                     \
        if (op == K_ADD) {                                                    \
            const T *b = (const T *)(uintptr_t)ARG(swcu_deviceptr, 2);        \
            if ((uintptr_t)b % sizeof(T))                                     \
                return fault(SWCU_CUDA_ERROR_MISALIGNED_ADDRESS, "b");        \
            if (!check_range((swcu_deviceptr)(uintptr_t)b, bytes, "kernel b")) \
                return fault(SWCU_CUDA_ERROR_ILLEGAL_ADDRESS, "b");           \
            for (unsigned long long i = 0; i < n; i++)                        \
                out[i] = a[i] + b[i];                                         \
            return SWCU_CUDA_SUCCESS;                                         \
        }                                                                     \
        T alpha = ARG(T, 2);                                                  \
        for (unsigned long long i = 0; i < n; i++)                            \
            out[i] = op == K_SCALE ? alpha * a[i] : alpha * a[i] + out[i];    \
        return SWCU_CUDA_SUCCESS;                                             \
    }

typedef uint32_t u32;
typedef uint64_t u64;
FAKE_ELEMENTWISE(float)
FAKE_ELEMENTWISE(double)
FAKE_ELEMENTWISE(u32)
FAKE_ELEMENTWISE(u64)

/* A block's tree sum over 256 slots, as sw_block_sum does it. */
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

/* Pass 1 of a sum, thread by thread: partials[b] for each block b. */
#define FAKE_SUM(NAME, T, A, CONV)                                            \
    static swcu_result NAME(void **params, unsigned grid)                     \
    {                                                                         \
        const T *a = (const T *)(uintptr_t)ARG(swcu_deviceptr, 0);            \
        unsigned long long n = ARG(unsigned long long, 1);                    \
        A *partials = (A *)(uintptr_t)ARG(swcu_deviceptr, 2);                 \
        if ((uintptr_t)a % sizeof(T) || (uintptr_t)partials % sizeof(A))      \
            return fault(SWCU_CUDA_ERROR_MISALIGNED_ADDRESS, "sum");          \
        if (!check_range((swcu_deviceptr)(uintptr_t)a, n * sizeof(T),         \
                         "sum input") ||                                      \
            !check_range((swcu_deviceptr)(uintptr_t)partials,                 \
                         grid * sizeof(A), "sum partials"))                   \
            return fault(SWCU_CUDA_ERROR_ILLEGAL_ADDRESS, "sum");             \
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
        return SWCU_CUDA_SUCCESS;                                             \
    }
FAKE_SUM(sum_f32, float, double, (double))
FAKE_SUM(sum_f64, double, double, )
FAKE_SUM(sum_i32, int32_t, u64, (u64)(int64_t))
FAKE_SUM(sum_i64, u64, u64, )

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
            !check_range((swcu_deviceptr)(uintptr_t)out, 8, "final out"))     \
            return fault(SWCU_CUDA_ERROR_ILLEGAL_ADDRESS, "final");           \
        A sh[256];                                                            \
        for (unsigned t = 0; t < 256; t++)                                    \
            sh[t] = t < count ? partials[t] : (A)0;                           \
        A total = tree_##A(sh);                                               \
        memcpy(out, &total, 8);                                               \
        return SWCU_CUDA_SUCCESS;                                             \
    }
FAKE_FINAL(final_f64, double)
FAKE_FINAL(final_i64, u64)

static swcu_result fill_bytes(void **params)
{
    unsigned char *dst = (unsigned char *)(uintptr_t)ARG(swcu_deviceptr, 0);
    unsigned long long n = ARG(unsigned long long, 1);
    unsigned long long pattern = ARG(unsigned long long, 2);
    unsigned psize = ARG(unsigned int, 3);
    if (psize != 1 && psize != 2 && psize != 4 && psize != 8)
        return fault(SWCU_CUDA_ERROR_ILLEGAL_ADDRESS, "fill_bytes psize");
    if (!check_range((swcu_deviceptr)(uintptr_t)dst, n, "fill_bytes"))
        return fault(SWCU_CUDA_ERROR_ILLEGAL_ADDRESS, "fill_bytes");
    for (unsigned long long i = 0; i < n; i++)
        dst[i] = (unsigned char)(pattern >> (8 * (i % psize)));
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
    switch (f->kind) {
    case K_SUM_FINAL_F64:
        return grid_x == 1 ? final_f64(params) : SWCU_CUDA_ERROR_INVALID_VALUE;
    case K_SUM_FINAL_I64:
        return grid_x == 1 ? final_i64(params) : SWCU_CUDA_ERROR_INVALID_VALUE;
    case K_FILL_BYTES:
        return fill_bytes(params);
    default:
        break;
    }
    int op = f->kind / 4, type = f->kind % 4;
    if (op == K_SUM) {
        if (grid_x > 256)
            return fail(SWCU_CUDA_ERROR_INVALID_VALUE, "%s: more partials "
                        "than the final pass sums", "sum");
        switch (type) {
        case T_F32: return sum_f32(params, grid_x);
        case T_F64: return sum_f64(params, grid_x);
        case T_U32: return sum_i32(params, grid_x);
        default: return sum_i64(params, grid_x);
        }
    }
    unsigned long long n = ARG(unsigned long long, op == K_FILL   ? 2
                                                  : op == K_COPY ? 2
                                                  : 3);
    switch (type) {
    case T_F32: return ew_float(op, params, n);
    case T_F64: return ew_double(op, params, n);
    case T_U32: return ew_u32(op, params, n);
    default: return ew_u64(op, params, n);
    }
}
