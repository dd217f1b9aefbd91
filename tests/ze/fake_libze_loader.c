/*
 * fake_libze_loader.c -- a strict stand-in for the Level Zero loader
 * (libze_loader.so.1) with one GPU behind it, on the CPU, so that the
 * Level Zero backend's host side (loading, contexts, immediate command
 * lists, barriers, event pools and their reuse, deferred frees, the
 * SPIR-V module and kernel arguments, Sysman) runs in CI without a GPU:
 *
 *   SPILLWAY_ZE_LIBRARY=BUILD/tests/c/libze_loader_fake.so \
 *   SW_TEST_DEVICE=ze:0 BUILD/tests/c/test_spillway
 *
 * It is NOT a GPU and proves nothing about one: it exports the entry
 * points src/backend/ze_api.h declares, with the same prototypes, and runs
 * every command at once on host memory, while keeping the order the
 * backend asked for (tests/standin/stream_order.h) so that what would race
 * on a GPU is caught here.
 *
 * What it checks.  Misuse aborts, loudly (a message on stderr naming the
 * call, then abort()):
 *  - a device range a copy, fill or kernel touches that is not inside a
 *    live allocation (use of freed memory, out of bounds);
 *  - zeMemFree of memory that queued work may still use (Level Zero frees
 *    at once: a free the backend did not defer until its queue's work was
 *    done is a stream-ordered free used early);
 *  - two commands on a command list with no barrier between them (Level
 *    Zero does not order them: spillway's queues must be in order);
 *  - a barrier or a host wait on an event that was never signaled nor
 *    appended to be (on a GPU: a hang), an event signaled twice without a
 *    reset, and zeEventHostReset of an event a queued wait may not have
 *    read yet;
 *  - a context, command list, event pool, event, module, kernel or build
 *    log used after it was destroyed (handles are never freed, so this is
 *    detected, not a use-after-free), and descriptors with the wrong stype;
 *  - a kernel launched with arguments unset, a work-group size other than
 *    256 (what opencl.cl was compiled for) or too few work-items for n;
 *  - a context destroyed with allocations, command lists, event pools or
 *    modules still live (a leak), and a command list destroyed with work
 *    the host has not waited for.
 * And as a driver would: zeInit fails (ZE_RESULT_ERROR_UNINITIALIZED) with
 * FAKE_ZE_NO_DRIVER=1; a module with the Float64 capability fails to build
 * on a device without fp64 (FAKE_ZE_NO_FP64=1), with a build log;
 * allocations past FAKE_ZE_MEMORY (default 2 GiB) are
 * ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY.
 *
 * Sysman: zesInit and the Sysman handles (distinct from the core ones,
 * matched by UUID), or, with FAKE_ZE_LEGACY_SYSMAN=1, only the core handle
 * under ZES_ENABLE_SYSMAN=1 (as loaders before 1.5); FAKE_ZE_NO_SYSMAN=1:
 * neither.  Two memory modules: the device's (free = capacity - allocated)
 * and a system one, which must not be counted.
 *
 * The kernels are emulated by name with the semantics of
 * src/backend/kernels/opencl.cl (work-group by work-group, the sums'
 * fixed-order trees, float-float accumulators in a module without fp64),
 * so results are the bits the device code should produce.
 */
#include "backend/ze_api.h"
#include "../standin/stream_order.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))

#define FAKE_DECL(kind, name, params) API swze_result name params;
SWZE_FUNCS(FAKE_DECL)
#undef FAKE_DECL

#define LIVE 0x4c495645u
#define DEAD 0x44454144u
#define LOCAL 256u

static void die(const char *call, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
static void die(const char *call, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fake libze_loader: %s: ", call);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

/* ------------------------------------------------------------------------
 * Objects (never freed; kept in a list per kind)
 * ---------------------------------------------------------------------- */

struct _ze_driver_handle_t {
    unsigned magic;
};
struct _ze_device_handle_t {
    unsigned magic;
};
struct _ze_context_handle_t {
    unsigned magic;
    long lists, pools, modules, allocs;
    struct _ze_context_handle_t *all;
};
struct _ze_command_list_handle_t {
    unsigned magic;
    struct _ze_context_handle_t *ctx;
    so_stream so;
    int unfenced; /* a command with no barrier after it yet */
    struct _ze_command_list_handle_t *all;
};
struct _ze_event_pool_handle_t {
    unsigned magic;
    struct _ze_context_handle_t *ctx;
    uint32_t count, used;
    long events;
    struct _ze_event_pool_handle_t *all;
};
struct _ze_event_handle_t {
    unsigned magic;
    struct _ze_event_pool_handle_t *pool;
    int signaled;
    so_clock vc;     /* the signaling list's clock at the signal */
    so_uses waiters; /* barriers that read it */
    struct _ze_event_handle_t *all;
};
struct _ze_module_handle_t {
    unsigned magic;
    struct _ze_context_handle_t *ctx;
    unsigned char *spv;
    size_t size;
    int fp64;
    long kernels;
    struct _ze_module_handle_t *all;
};
struct _ze_kernel_handle_t {
    unsigned magic;
    struct _ze_module_handle_t *module;
    int kind;
    uint32_t group;
    unsigned set;  /* bit i: argument i set */
    size_t size[8];
    unsigned char val[8][8];
    struct _ze_kernel_handle_t *all;
};
struct _ze_module_build_log_handle_t {
    unsigned magic;
    char text[256];
    struct _ze_module_build_log_handle_t *all;
};
struct _zes_mem_handle_t {
    unsigned magic;
    int device; /* 1: on the device; 0: system memory */
};

typedef struct fake_alloc {
    uintptr_t base;
    size_t size;
    struct _ze_context_handle_t *ctx;
    so_uses uses;
} fake_alloc;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int initialized, no_fp64, sysman_init, legacy_sysman_ok;
static struct _ze_driver_handle_t driver = {LIVE}, zes_driver = {LIVE};
static struct _ze_device_handle_t device = {LIVE}, zes_device = {LIVE};
static struct _zes_mem_handle_t mem_device = {LIVE, 1}, mem_system = {LIVE, 0};
static fake_alloc **allocs;
static size_t nallocs, capallocs, allocated;
static size_t capacity = (size_t)2 << 30;
static size_t max_fill = 128;
static struct _ze_context_handle_t *contexts;
static struct _ze_command_list_handle_t *lists;
static struct _ze_event_pool_handle_t *pools;
static struct _ze_event_handle_t *events;
static struct _ze_module_handle_t *modules;
static struct _ze_kernel_handle_t *kernels;
static struct _ze_module_build_log_handle_t *logs;
static const uint8_t uuid[16] = {0x5a, 0x45, 'f', 'a', 'k', 'e', 0, 1,
                                 2,    3,    4,   5,   6,   7,   8, 9};

#define FIND_LIVE(list, p, call, what)                                        \
    do {                                                                      \
        __typeof__(list) f_ = list;                                           \
        while (f_ != NULL && f_ != (p))                                       \
            f_ = f_->all;                                                     \
        if (f_ == NULL)                                                       \
            die(call, "%p is not a %s this loader made", (void *)(p), what);  \
        if (f_->magic != LIVE)                                                \
            die(call, "%s %p used after it was destroyed", what,              \
                (void *)(p));                                                 \
    } while (0)

static void live_ctx(struct _ze_context_handle_t *c, const char *call)
{
    FIND_LIVE(contexts, c, call, "context");
}

static void stype(uint32_t got, uint32_t want, const char *call)
{
    if (got != want)
        die(call, "descriptor stype %u, expected %u", got, want);
}

/* ------------------------------------------------------------------------
 * Memory: allocations, and the ranges commands touch
 * ---------------------------------------------------------------------- */

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

/* [p, p + n) used by a command of list l at point pt.  Under mu. */
static void touch(const void *p, size_t n, so_point pt, const char *call,
                  const char *what)
{
    size_t i = upper((uintptr_t)p);
    fake_alloc *a = i ? allocs[i - 1] : NULL;
    if (a == NULL || (uintptr_t)p - a->base > a->size ||
        n > a->size - ((uintptr_t)p - a->base))
        die(call, "%s [%p+%zu) is not inside a live allocation (freed, or "
            "out of bounds)", what, p, n);
    so_use(&a->uses, pt);
}

/* Host memory passed to a copy may be anything; device memory must be
 * allocated.  Is p inside a live allocation?  Under mu. */
static int is_device(const void *p)
{
    size_t i = upper((uintptr_t)p);
    return i > 0 && (uintptr_t)p - allocs[i - 1]->base < allocs[i - 1]->size;
}

/* ------------------------------------------------------------------------
 * Init, drivers, devices
 * ---------------------------------------------------------------------- */

swze_result zeInit(uint32_t flags)
{
    (void)flags;
    if (getenv("FAKE_ZE_NO_DRIVER") != NULL)
        return SWZE_ZE_RESULT_ERROR_UNINITIALIZED;
    pthread_mutex_lock(&mu);
    const char *m = getenv("FAKE_ZE_MEMORY");
    if (m != NULL && *m)
        capacity = (size_t)strtoull(m, NULL, 10);
    const char *f = getenv("FAKE_ZE_MAX_FILL");
    if (f != NULL && *f)
        max_fill = (size_t)strtoull(f, NULL, 10);
    no_fp64 = getenv("FAKE_ZE_NO_FP64") != NULL;
    const char *e = getenv("ZES_ENABLE_SYSMAN");
    legacy_sysman_ok = getenv("FAKE_ZE_NO_SYSMAN") == NULL &&
                       (getenv("FAKE_ZE_LEGACY_SYSMAN") != NULL ||
                        (e != NULL && strcmp(e, "1") == 0));
    initialized = 1;
    pthread_mutex_unlock(&mu);
    return SWZE_ZE_RESULT_SUCCESS;
}

static swze_result get_one(uint32_t *count, void *out, void *one)
{
    if (!initialized)
        return SWZE_ZE_RESULT_ERROR_UNINITIALIZED;
    if (*count == 0 || out == NULL) {
        *count = 1;
        return SWZE_ZE_RESULT_SUCCESS;
    }
    *count = 1;
    memcpy(out, &one, sizeof one);
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zeDriverGet(uint32_t *count, swze_driver *drivers)
{
    return get_one(count, drivers, &driver);
}

swze_result zeDeviceGet(swze_driver d, uint32_t *count, swze_device *devices)
{
    if (d != &driver)
        die("zeDeviceGet", "not a driver handle of zeDriverGet");
    return get_one(count, devices, &device);
}

static void fill_props(swze_device_properties *p)
{
    uint32_t st = p->stype;
    void *next = p->pNext;
    memset(p, 0, sizeof *p);
    p->stype = st;
    p->pNext = next;
    p->type = SWZE_ZE_DEVICE_TYPE_GPU;
    p->vendor_id = 0x8086;
    p->max_mem_alloc_size = capacity / 2;
    p->num_eus_per_subslice = 8;
    p->num_subslices_per_slice = 4;
    p->num_slices = 1;
    memcpy(p->uuid, uuid, sizeof uuid);
    snprintf(p->name, sizeof p->name, "Fake Intel GPU (CPU stand-in)");
}

swze_result zeDeviceGetProperties(swze_device d, swze_device_properties *p)
{
    if (d != &device)
        die("zeDeviceGetProperties", "not a core device handle%s",
            d == &zes_device ? " (a Sysman one)" : "");
    stype(p->stype, SWZE_ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES,
          "zeDeviceGetProperties");
    fill_props(p);
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zeDeviceGetMemoryProperties(swze_device d, uint32_t *count,
                                        swze_device_memory_properties *p)
{
    if (d != &device)
        die("zeDeviceGetMemoryProperties", "not a core device handle");
    if (*count == 0 || p == NULL) {
        *count = 1;
        return SWZE_ZE_RESULT_SUCCESS;
    }
    stype(p->stype, SWZE_ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES,
          "zeDeviceGetMemoryProperties");
    *count = 1;
    p->total_size = capacity;
    snprintf(p->name, sizeof p->name, "HBM");
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zeDeviceGetModuleProperties(swze_device d,
                                        swze_device_module_properties *p)
{
    if (d != &device)
        die("zeDeviceGetModuleProperties", "not a core device handle");
    stype(p->stype, SWZE_ZE_STRUCTURE_TYPE_DEVICE_MODULE_PROPERTIES,
          "zeDeviceGetModuleProperties");
    p->spirv_version_supported = 0x10200;
    p->flags = no_fp64 ? 0 : SWZE_ZE_DEVICE_MODULE_FLAG_FP64;
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zeDeviceGetCommandQueueGroupProperties(
    swze_device d, uint32_t *count, swze_queue_group_properties *p)
{
    if (d != &device)
        die("zeDeviceGetCommandQueueGroupProperties", "not a core device");
    if (*count == 0 || p == NULL) {
        *count = 2;
        return SWZE_ZE_RESULT_SUCCESS;
    }
    /* A copy-only group first, then the compute one. */
    uint32_t n = *count < 2 ? *count : 2;
    for (uint32_t i = 0; i < n; i++) {
        stype(p[i].stype, SWZE_ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES,
              "zeDeviceGetCommandQueueGroupProperties");
        p[i].flags = i == 1 ? SWZE_ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE
                            : 0;
        p[i].max_memory_fill_pattern_size = i == 1 ? max_fill : 4;
        p[i].num_queues = 1;
    }
    *count = n;
    return SWZE_ZE_RESULT_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Contexts and memory
 * ---------------------------------------------------------------------- */

swze_result zeContextCreate(swze_driver d, const swze_context_desc *desc,
                            swze_context *ctx)
{
    if (!initialized)
        return SWZE_ZE_RESULT_ERROR_UNINITIALIZED;
    if (d != &driver)
        die("zeContextCreate", "not a driver handle");
    stype(desc->stype, SWZE_ZE_STRUCTURE_TYPE_CONTEXT_DESC, "zeContextCreate");
    struct _ze_context_handle_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return SWZE_ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    c->magic = LIVE;
    pthread_mutex_lock(&mu);
    c->all = contexts;
    contexts = c;
    pthread_mutex_unlock(&mu);
    *ctx = c;
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zeContextDestroy(swze_context c)
{
    pthread_mutex_lock(&mu);
    live_ctx(c, "zeContextDestroy");
    if (c->allocs || c->lists || c->pools || c->modules)
        die("zeContextDestroy", "%ld allocations, %ld command lists, %ld "
            "event pools and %ld modules still live (leaks)", c->allocs,
            c->lists, c->pools, c->modules);
    c->magic = DEAD;
    pthread_mutex_unlock(&mu);
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zeMemAllocDevice(swze_context c,
                             const swze_device_mem_alloc_desc *desc,
                             size_t size, size_t alignment, swze_device d,
                             void **ptr)
{
    pthread_mutex_lock(&mu);
    live_ctx(c, "zeMemAllocDevice");
    pthread_mutex_unlock(&mu);
    stype(desc->stype, SWZE_ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC,
          "zeMemAllocDevice");
    if (d != &device)
        die("zeMemAllocDevice", "not a core device handle");
    if (size == 0 || (alignment & (alignment - 1)) != 0)
        return SWZE_ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
    size_t rounded = (size + 255) & ~(size_t)255;
    pthread_mutex_lock(&mu);
    if (allocated + rounded > capacity) {
        pthread_mutex_unlock(&mu);
        return SWZE_ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
    }
    fake_alloc *a = calloc(1, sizeof *a);
    void *p = aligned_alloc(alignment > 256 ? alignment : 256, rounded);
    if (a == NULL || p == NULL) {
        pthread_mutex_unlock(&mu);
        free(a);
        free(p);
        return SWZE_ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
    }
    if (nallocs == capallocs) {
        size_t cap = capallocs ? 2 * capallocs : 256;
        fake_alloc **v = realloc(allocs, cap * sizeof *v);
        if (v == NULL) {
            pthread_mutex_unlock(&mu);
            free(a);
            free(p);
            return SWZE_ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
        }
        allocs = v;
        capallocs = cap;
    }
    memset(p, 0xA5, rounded);
    a->base = (uintptr_t)p;
    a->size = rounded;
    a->ctx = c;
    size_t i = upper(a->base);
    memmove(&allocs[i + 1], &allocs[i], (nallocs - i) * sizeof *allocs);
    allocs[i] = a;
    nallocs++;
    allocated += rounded;
    c->allocs++;
    pthread_mutex_unlock(&mu);
    *ptr = p;
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zeMemFree(swze_context c, void *ptr)
{
    pthread_mutex_lock(&mu);
    live_ctx(c, "zeMemFree");
    size_t i = upper((uintptr_t)ptr);
    if (i == 0 || allocs[i - 1]->base != (uintptr_t)ptr ||
        allocs[i - 1]->ctx != c)
        die("zeMemFree", "%p is not a live allocation of this context (a "
            "double free?)", ptr);
    fake_alloc *a = allocs[i - 1];
    const so_point *u = so_pending_use(&a->uses, &so_host);
    if (u != NULL)
        die("zeMemFree", "%p is still used by queued work the host has not "
            "seen complete (command list slot %u): zeMemFree frees at once, "
            "so this is a stream-ordered free used early", ptr, u->slot);
    memmove(&allocs[i - 1], &allocs[i], (nallocs - i) * sizeof *allocs);
    nallocs--;
    allocated -= a->size;
    c->allocs--;
    pthread_mutex_unlock(&mu);
    memset((void *)a->base, 0xDB, a->size);
    free((void *)a->base);
    so_uses_free(&a->uses);
    free(a);
    return SWZE_ZE_RESULT_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Command lists: every command runs at once; order is recorded
 * ---------------------------------------------------------------------- */

swze_result zeCommandListCreateImmediate(swze_context c, swze_device d,
                                         const swze_command_queue_desc *desc,
                                         swze_cmdlist *out)
{
    stype(desc->stype, SWZE_ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC,
          "zeCommandListCreateImmediate");
    if (d != &device)
        die("zeCommandListCreateImmediate", "not a core device handle");
    if (desc->ordinal != 1)
        die("zeCommandListCreateImmediate", "ordinal %u: the compute group "
            "is 1 (group 0 copies only)", desc->ordinal);
    struct _ze_command_list_handle_t *l = calloc(1, sizeof *l);
    if (l == NULL)
        return SWZE_ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    pthread_mutex_lock(&mu);
    live_ctx(c, "zeCommandListCreateImmediate");
    if (so_stream_create(&l->so) != 0)
        die("zeCommandListCreateImmediate", "more than %d live lists",
            SO_MAX);
    l->magic = LIVE;
    l->ctx = c;
    l->all = lists;
    lists = l;
    c->lists++;
    pthread_mutex_unlock(&mu);
    *out = l;
    return SWZE_ZE_RESULT_SUCCESS;
}

/* The queries of Level Zero 1.9, for live lists only: a destroyed or
 * foreign handle is looked up, never read. */
static struct _ze_command_list_handle_t *find_list(swze_cmdlist l)
{
    pthread_mutex_lock(&mu);
    struct _ze_command_list_handle_t *f = lists;
    while (f != NULL && f != l)
        f = f->all;
    if (f != NULL && f->magic != LIVE)
        f = NULL;
    pthread_mutex_unlock(&mu);
    return f;
}

swze_result zeCommandListGetContextHandle(swze_cmdlist l, swze_context *c)
{
    struct _ze_command_list_handle_t *f = find_list(l);
    if (f == NULL)
        return SWZE_ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    *c = f->ctx;
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zeCommandListGetDeviceHandle(swze_cmdlist l, swze_device *d)
{
    if (find_list(l) == NULL)
        return SWZE_ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    *d = &device;
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zeCommandListIsImmediate(swze_cmdlist l, uint8_t *immediate)
{
    if (find_list(l) == NULL)
        return SWZE_ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    *immediate = 1; /* the only kind this runtime makes */
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zeCommandListDestroy(swze_cmdlist l)
{
    pthread_mutex_lock(&mu);
    FIND_LIVE(lists, l, "zeCommandListDestroy", "command list");
    so_point last = {l->so.slot, l->so.gen, l->so.pos};
    if (!so_after(&so_host, last))
        die("zeCommandListDestroy", "the list has work the host has not "
            "waited for");
    so_stream_destroy(&l->so);
    l->magic = DEAD;
    l->ctx->lists--;
    pthread_mutex_unlock(&mu);
    return SWZE_ZE_RESULT_SUCCESS;
}

static void live_event(swze_event e, const char *call)
{
    FIND_LIVE(events, e, call, "event");
}

/* A command (not a barrier) enqueued on l: its point.  Under mu. */
static so_point command(swze_cmdlist l, const char *call)
{
    FIND_LIVE(lists, l, call, "command list");
    if (l->unfenced)
        die(call, "appended right after another command with no barrier "
            "between them: Level Zero may run the two at once");
    l->unfenced = 1;
    return so_enqueue(&l->so);
}

/* The signal of a command: the event takes the list's clock.  Under mu. */
static void signal_event(swze_cmdlist l, swze_event e, const char *call)
{
    if (e == NULL)
        return;
    live_event(e, call);
    if (e->signaled)
        die(call, "event %p signaled again without zeEventHostReset",
            (void *)e);
    e->signaled = 1;
    e->vc = l->so.vc;
}

swze_result zeCommandListAppendBarrier(swze_cmdlist l, swze_event signal,
                                       uint32_t nwait, swze_event *waits)
{
    pthread_mutex_lock(&mu);
    FIND_LIVE(lists, l, "zeCommandListAppendBarrier", "command list");
    so_point pt = so_enqueue(&l->so);
    for (uint32_t i = 0; i < nwait; i++) {
        live_event(waits[i], "zeCommandListAppendBarrier");
        if (!waits[i]->signaled)
            die("zeCommandListAppendBarrier", "waits for event %p, which "
                "was never signaled (waited for before it was recorded: a "
                "GPU would wait forever)", (void *)waits[i]);
        so_merge(&l->so.vc, &waits[i]->vc);
        so_use(&waits[i]->waiters, pt);
    }
    l->unfenced = 0;
    signal_event(l, signal, "zeCommandListAppendBarrier");
    pthread_mutex_unlock(&mu);
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zeCommandListAppendMemoryCopy(swze_cmdlist l, void *dst,
                                          const void *src, size_t size,
                                          swze_event signal, uint32_t nwait,
                                          swze_event *waits)
{
    if (nwait != 0 || waits != NULL)
        die("zeCommandListAppendMemoryCopy", "unexpected wait list");
    pthread_mutex_lock(&mu);
    so_point pt = command(l, "zeCommandListAppendMemoryCopy");
    int dd = is_device(dst), sd = is_device(src);
    if (!dd && !sd)
        die("zeCommandListAppendMemoryCopy", "neither %p nor %p is inside "
            "a live allocation (freed, or out of bounds)", dst, (void *)src);
    if (dd)
        touch(dst, size, pt, "zeCommandListAppendMemoryCopy", "dst");
    if (sd)
        touch(src, size, pt, "zeCommandListAppendMemoryCopy", "src");
    if ((uintptr_t)dst < (uintptr_t)src + size &&
        (uintptr_t)src < (uintptr_t)dst + size)
        die("zeCommandListAppendMemoryCopy", "overlapping ranges");
    signal_event(l, signal, "zeCommandListAppendMemoryCopy");
    pthread_mutex_unlock(&mu);
    memcpy(dst, src, size);
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zeCommandListAppendMemoryFill(swze_cmdlist l, void *ptr,
                                          const void *pattern,
                                          size_t pattern_size, size_t size,
                                          swze_event signal, uint32_t nwait,
                                          swze_event *waits)
{
    if (nwait != 0 || waits != NULL)
        die("zeCommandListAppendMemoryFill", "unexpected wait list");
    if (pattern_size == 0 || (pattern_size & (pattern_size - 1)) != 0 ||
        pattern_size > max_fill || size % pattern_size != 0)
        return SWZE_ZE_RESULT_ERROR_INVALID_SIZE;
    pthread_mutex_lock(&mu);
    so_point pt = command(l, "zeCommandListAppendMemoryFill");
    touch(ptr, size, pt, "zeCommandListAppendMemoryFill", "dst");
    signal_event(l, signal, "zeCommandListAppendMemoryFill");
    pthread_mutex_unlock(&mu);
    for (size_t i = 0; i < size; i += pattern_size)
        memcpy((unsigned char *)ptr + i, pattern, pattern_size);
    return SWZE_ZE_RESULT_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Events
 * ---------------------------------------------------------------------- */

swze_result zeEventPoolCreate(swze_context c, const swze_event_pool_desc *desc,
                              uint32_t ndevices, swze_device *devices,
                              swze_event_pool *out)
{
    stype(desc->stype, SWZE_ZE_STRUCTURE_TYPE_EVENT_POOL_DESC,
          "zeEventPoolCreate");
    if (ndevices != 1 || devices[0] != &device || desc->count == 0)
        die("zeEventPoolCreate", "bad devices or count");
    if (!(desc->flags & SWZE_ZE_EVENT_POOL_FLAG_HOST_VISIBLE))
        die("zeEventPoolCreate", "events the host waits for must be "
            "host-visible");
    struct _ze_event_pool_handle_t *p = calloc(1, sizeof *p);
    if (p == NULL)
        return SWZE_ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    pthread_mutex_lock(&mu);
    live_ctx(c, "zeEventPoolCreate");
    p->magic = LIVE;
    p->ctx = c;
    p->count = desc->count;
    p->all = pools;
    pools = p;
    c->pools++;
    pthread_mutex_unlock(&mu);
    *out = p;
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zeEventPoolDestroy(swze_event_pool p)
{
    pthread_mutex_lock(&mu);
    FIND_LIVE(pools, p, "zeEventPoolDestroy", "event pool");
    if (p->events != 0)
        die("zeEventPoolDestroy", "%ld events of it still live", p->events);
    p->magic = DEAD;
    p->ctx->pools--;
    pthread_mutex_unlock(&mu);
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zeEventCreate(swze_event_pool p, const swze_event_desc *desc,
                          swze_event *out)
{
    stype(desc->stype, SWZE_ZE_STRUCTURE_TYPE_EVENT_DESC, "zeEventCreate");
    struct _ze_event_handle_t *e = calloc(1, sizeof *e);
    if (e == NULL)
        return SWZE_ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    pthread_mutex_lock(&mu);
    FIND_LIVE(pools, p, "zeEventCreate", "event pool");
    if (desc->index >= p->count)
        die("zeEventCreate", "index %u of a pool of %u", desc->index,
            p->count);
    e->magic = LIVE;
    e->pool = p;
    e->all = events;
    events = e;
    p->events++;
    pthread_mutex_unlock(&mu);
    *out = e;
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zeEventDestroy(swze_event e)
{
    pthread_mutex_lock(&mu);
    live_event(e, "zeEventDestroy");
    e->magic = DEAD;
    e->pool->events--;
    so_uses_free(&e->waiters);
    pthread_mutex_unlock(&mu);
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zeEventHostSynchronize(swze_event e, uint64_t timeout)
{
    (void)timeout;
    pthread_mutex_lock(&mu);
    live_event(e, "zeEventHostSynchronize");
    if (!e->signaled)
        die("zeEventHostSynchronize", "event %p was never signaled (waited "
            "for before it was recorded: this would wait forever)",
            (void *)e);
    so_merge(&so_host, &e->vc);
    pthread_mutex_unlock(&mu);
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zeEventQueryStatus(swze_event e)
{
    pthread_mutex_lock(&mu);
    live_event(e, "zeEventQueryStatus");
    int s = e->signaled;
    if (s)
        so_merge(&so_host, &e->vc);
    pthread_mutex_unlock(&mu);
    return s ? SWZE_ZE_RESULT_SUCCESS : SWZE_ZE_RESULT_NOT_READY;
}

swze_result zeEventHostReset(swze_event e)
{
    pthread_mutex_lock(&mu);
    live_event(e, "zeEventHostReset");
    const so_point *w = so_pending_use(&e->waiters, &so_host);
    if (w != NULL)
        die("zeEventHostReset", "event %p reset while a barrier of command "
            "list slot %u that waits for it may not have run (the host has "
            "not seen that list's later work complete)", (void *)e, w->slot);
    e->signaled = 0;
    e->waiters.n = 0;
    pthread_mutex_unlock(&mu);
    return SWZE_ZE_RESULT_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Modules and kernels
 * ---------------------------------------------------------------------- */

/* Does the SPIR-V declare capability cap (OpCapability, opcode 17)? */
static int spirv_has_cap(const unsigned char *spv, size_t size, uint32_t cap)
{
    size_t words = size / 4;
    for (size_t i = 5; i < words;) {
        uint32_t w, arg = 0;
        memcpy(&w, spv + 4 * i, 4);
        uint32_t wc = w >> 16, op = w & 0xffff;
        if (op == 17 && wc == 2 && i + 1 < words) {
            memcpy(&arg, spv + 4 * (i + 1), 4);
            if (arg == cap)
                return 1;
        }
        i += wc ? wc : 1;
    }
    return 0;
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

swze_result zeModuleCreate(swze_context c, swze_device d,
                           const swze_module_desc *desc, swze_module *out,
                           swze_build_log *log)
{
    stype(desc->stype, SWZE_ZE_STRUCTURE_TYPE_MODULE_DESC, "zeModuleCreate");
    if (d != &device)
        die("zeModuleCreate", "not a core device handle");
    struct _ze_module_build_log_handle_t *lg = calloc(1, sizeof *lg);
    if (lg == NULL)
        return SWZE_ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    lg->magic = LIVE;
    pthread_mutex_lock(&mu);
    live_ctx(c, "zeModuleCreate");
    lg->all = logs;
    logs = lg;
    pthread_mutex_unlock(&mu);
    if (log != NULL)
        *log = lg;
    else
        lg->magic = DEAD;
    uint32_t magic = 0;
    if (desc->input_size >= 20)
        memcpy(&magic, desc->input, 4);
    if (desc->format != SWZE_ZE_MODULE_FORMAT_IL_SPIRV ||
        magic != 0x07230203u) {
        snprintf(lg->text, sizeof lg->text, "error: not SPIR-V");
        return SWZE_ZE_RESULT_ERROR_MODULE_BUILD_FAILURE;
    }
    int fp64 = spirv_has_cap(desc->input, desc->input_size, 10);
    if (fp64 && no_fp64) {
        snprintf(lg->text, sizeof lg->text, "error: the module declares "
                 "the Float64 capability,\nwhich this device lacks");
        return SWZE_ZE_RESULT_ERROR_MODULE_BUILD_FAILURE;
    }
    struct _ze_module_handle_t *m = calloc(1, sizeof *m);
    unsigned char *copy = malloc(desc->input_size);
    if (m == NULL || copy == NULL) {
        free(m);
        free(copy);
        return SWZE_ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    }
    memcpy(copy, desc->input, desc->input_size);
    m->magic = LIVE;
    m->ctx = c;
    m->spv = copy;
    m->size = desc->input_size;
    m->fp64 = fp64;
    pthread_mutex_lock(&mu);
    m->all = modules;
    modules = m;
    c->modules++;
    pthread_mutex_unlock(&mu);
    *out = m;
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zeModuleDestroy(swze_module m)
{
    pthread_mutex_lock(&mu);
    FIND_LIVE(modules, m, "zeModuleDestroy", "module");
    if (m->kernels != 0)
        die("zeModuleDestroy", "%ld kernels of it still live", m->kernels);
    m->magic = DEAD;
    m->ctx->modules--;
    free(m->spv);
    m->spv = NULL;
    pthread_mutex_unlock(&mu);
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zeModuleBuildLogGetString(swze_build_log log, size_t *size,
                                      char *text)
{
    pthread_mutex_lock(&mu);
    FIND_LIVE(logs, log, "zeModuleBuildLogGetString", "build log");
    size_t n = strlen(log->text) + 1;
    if (text != NULL)
        memcpy(text, log->text, n < *size ? n : *size);
    *size = n;
    pthread_mutex_unlock(&mu);
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zeModuleBuildLogDestroy(swze_build_log log)
{
    pthread_mutex_lock(&mu);
    FIND_LIVE(logs, log, "zeModuleBuildLogDestroy", "build log");
    log->magic = DEAD;
    pthread_mutex_unlock(&mu);
    return SWZE_ZE_RESULT_SUCCESS;
}

/* The emulated kernels. */
enum {
    K_FILL_U32, K_FILL_U64, K_COPY_U32, K_COPY_U64,
    K_ADD_F32, K_SCALE_F32, K_AXPY_F32, K_ADD_U32, K_SCALE_U32, K_AXPY_U32,
    K_ADD_U64, K_SCALE_U64, K_AXPY_U64, K_ADD_F64, K_SCALE_F64, K_AXPY_F64,
    K_FILL_BYTES, K_MOVE_BYTES, K_SUM1_I32, K_SUM1_I64, K_SUM2_U,
    K_SUM1_F32, K_SUM1_F64, K_SUM2_D, K_COUNT
};
static const char *const knames[K_COUNT] = {
    "sw_fill_u32", "sw_fill_u64", "sw_copy_u32", "sw_copy_u64",
    "sw_add_f32", "sw_scale_f32", "sw_axpy_f32", "sw_add_u32",
    "sw_scale_u32", "sw_axpy_u32", "sw_add_u64", "sw_scale_u64",
    "sw_axpy_u64", "sw_add_f64", "sw_scale_f64", "sw_axpy_f64",
    "sw_fill_bytes", "sw_move_bytes", "sw_sum1_i32", "sw_sum1_u64",
    "sw_sum2_u", "sw_sum1_f32", "sw_sum1_f64", "sw_sum2_d",
};
static const int nargs_of[K_COUNT] = {
    8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 5, 5, 5, 5, 4, 5, 5, 4,
};

swze_result zeKernelCreate(swze_module m, const swze_kernel_desc *desc,
                           swze_kernel *out)
{
    stype(desc->stype, SWZE_ZE_STRUCTURE_TYPE_KERNEL_DESC, "zeKernelCreate");
    pthread_mutex_lock(&mu);
    FIND_LIVE(modules, m, "zeKernelCreate", "module");
    int kind = -1;
    for (int k = 0; k < K_COUNT && kind < 0; k++)
        if (strcmp(knames[k], desc->name) == 0)
            kind = k;
    /* The entry name is in the module (SPIR-V keeps it as a string). */
    char want[64];
    snprintf(want, sizeof want, "%s", desc->name);
    if (kind < 0 || memmem_(m->spv, m->size, want) == NULL ||
        ((kind == K_ADD_F64 || kind == K_SCALE_F64 || kind == K_AXPY_F64 ||
          kind == K_SUM1_F64) &&
         !m->fp64)) {
        pthread_mutex_unlock(&mu);
        fprintf(stderr, "fake libze_loader: zeKernelCreate: no kernel '%s' "
                "in the module\n", desc->name);
        return SWZE_ZE_RESULT_ERROR_INVALID_KERNEL_NAME;
    }
    struct _ze_kernel_handle_t *k = calloc(1, sizeof *k);
    if (k == NULL) {
        pthread_mutex_unlock(&mu);
        return SWZE_ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    }
    k->magic = LIVE;
    k->module = m;
    k->kind = kind;
    k->all = kernels;
    kernels = k;
    m->kernels++;
    pthread_mutex_unlock(&mu);
    *out = k;
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zeKernelDestroy(swze_kernel k)
{
    pthread_mutex_lock(&mu);
    FIND_LIVE(kernels, k, "zeKernelDestroy", "kernel");
    k->magic = DEAD;
    k->module->kernels--;
    pthread_mutex_unlock(&mu);
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zeKernelSetArgumentValue(swze_kernel k, uint32_t index,
                                     size_t size, const void *value)
{
    pthread_mutex_lock(&mu);
    FIND_LIVE(kernels, k, "zeKernelSetArgumentValue", "kernel");
    pthread_mutex_unlock(&mu);
    if (index >= (uint32_t)nargs_of[k->kind])
        return SWZE_ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX;
    if (size != 4 && size != 8)
        return SWZE_ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE;
    k->size[index] = size;
    memcpy(k->val[index], value, size);
    k->set |= 1u << index;
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zeKernelSetGroupSize(swze_kernel k, uint32_t x, uint32_t y,
                                 uint32_t z)
{
    pthread_mutex_lock(&mu);
    FIND_LIVE(kernels, k, "zeKernelSetGroupSize", "kernel");
    pthread_mutex_unlock(&mu);
    if (y != 1 || z != 1 || x == 0 || x > 1024)
        return SWZE_ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION;
    k->group = x;
    return SWZE_ZE_RESULT_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Kernel emulation (opencl.cl's semantics)
 * ---------------------------------------------------------------------- */

typedef struct run {
    swze_kernel k;
    so_point pt;
    uint32_t groups;
} run;

static uint64_t u64arg(const run *r, int i)
{
    uint64_t v = 0;
    memcpy(&v, r->k->val[i], r->k->size[i] < 8 ? r->k->size[i] : 8);
    return v;
}

static unsigned char *ptrarg(const run *r, int i)
{
    void *p = NULL;
    if (r->k->size[i] != sizeof p)
        die("zeCommandListAppendLaunchKernel", "argument %d of %s is %zu "
            "bytes, not a pointer", i, knames[r->k->kind], r->k->size[i]);
    memcpy(&p, r->k->val[i], sizeof p);
    return p;
}

static void use(const run *r, const void *p, size_t n, const char *what)
{
    if (n == 0)
        return;
    pthread_mutex_lock(&mu);
    touch(p, n, r->pt, "zeCommandListAppendLaunchKernel", what);
    pthread_mutex_unlock(&mu);
}

static void need_items(const run *r, uint64_t n)
{
    if ((uint64_t)r->groups * LOCAL < n)
        die("zeCommandListAppendLaunchKernel", "%s: %u work-groups of %u "
            "cover fewer than its %llu items", knames[r->k->kind], r->groups,
            LOCAL, (unsigned long long)n);
}

#define EW(NAME, T)                                                           \
    static void NAME(const run *r, int op)                                    \
    {                                                                         \
        T *o = (T *)(void *)ptrarg(r, 0);                                     \
        uint64_t oo = u64arg(r, 1), ao = u64arg(r, 3), bo = u64arg(r, 5);     \
        const T *a = (const T *)(void *)ptrarg(r, 2);                         \
        const T *b = (const T *)(void *)ptrarg(r, 4);                         \
        uint64_t n = u64arg(r, 7);                                            \
        T alpha;                                                              \
        if (r->k->size[6] != sizeof(T))                                       \
            die("zeCommandListAppendLaunchKernel", "%s: alpha of %zu bytes",  \
                knames[r->k->kind], r->k->size[6]);                           \
        memcpy(&alpha, r->k->val[6], sizeof(T));                              \
        need_items(r, n);                                                     \
        use(r, o + oo, n * sizeof(T), "o");                                   \
        if (op != 0)                                                          \
            use(r, a + ao, n * sizeof(T), "a");                               \
        if (op == 2)                                                          \
            use(r, b + bo, n * sizeof(T), "b");                               \
        for (uint64_t i = 0; i < n; i++) {                                    \
            switch (op) {                                                     \
            case 0: o[oo + i] = alpha; break;                                 \
            case 1: o[oo + i] = a[ao + i]; break;                             \
            case 2: o[oo + i] = a[ao + i] + b[bo + i]; break;                 \
            case 3: o[oo + i] = alpha * a[ao + i]; break;                     \
            default: {                                                        \
                T t = alpha * a[ao + i];                                      \
                o[oo + i] = t + o[oo + i];                                    \
            }                                                                 \
            }                                                                 \
        }                                                                     \
    }
EW(ew_f32, float)
EW(ew_f64, double)
EW(ew_u32, uint32_t)
EW(ew_u64, uint64_t)

/* opencl.cl's float-float (double-single) accumulators, in C. */
typedef struct ff {
    float x, y;
} ff;

static ff ff_norm(float s, float e)
{
    float h = s + e;
    ff r = {h, e - (h - s)};
    return r;
}

static ff ff_add(ff x, ff y)
{
    float s = x.x + y.x;
    if (!isfinite(s)) {
        ff r = {s, 0.0f};
        return r;
    }
    float bb = s - x.x;
    float e = (x.x - (s - bb)) + (y.x - bb);
    return ff_norm(s, e + (x.y + y.y));
}

static void ff_split(float f, int64_t *m, int *e)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t ex = (u >> 23) & 0xffu;
    int64_t fr = (int64_t)(u & 0x7fffffu);
    if (ex == 0) {
        *e = -149;
    } else {
        fr |= 0x800000;
        *e = (int)ex - 150;
    }
    *m = (u >> 31) ? -fr : fr;
}

static uint64_t ff_bits(ff v)
{
    uint32_t uh;
    memcpy(&uh, &v.x, 4);
    if (((uh >> 23) & 0xffu) == 0xffu)
        return ((uint64_t)(uh >> 31) << 63) | 0x7ff0000000000000ull |
               ((uint64_t)(uh & 0x7fffffu) << 29);
    int64_t mh, ml;
    int eh, el;
    ff_split(v.x, &mh, &eh);
    ff_split(v.y, &ml, &el);
    if (mh == 0 && ml == 0)
        return (uint64_t)(uh >> 31) << 63;
    if (mh == 0 || (ml != 0 && el > eh)) {
        int64_t tm = mh;
        mh = ml;
        ml = tm;
        int te = eh;
        eh = el;
        el = te;
    }
    int64_t t;
    int e;
    int d = ml == 0 ? 0 : eh - el;
    if (ml == 0) {
        t = mh;
        e = eh;
    } else if (d <= 37) {
        t = mh * ((int64_t)1 << d) + ml;
        e = el;
    } else {
        int k = d - 37;
        int64_t q;
        if (k > 40)
            q = ml < 0 ? -1 : 0;
        else if (ml >= 0)
            q = ml >> k;
        else
            q = -((-ml + ((int64_t)1 << k) - 1) >> k);
        int lost = k > 40 ? 1 : (ml - q * ((int64_t)1 << k)) != 0;
        t = (mh * ((int64_t)1 << 37) + q) * 2 + lost;
        e = el + k - 1;
    }
    if (t == 0)
        return 0;
    uint64_t sign = t < 0 ? (1ull << 63) : 0;
    uint64_t mag = t < 0 ? (uint64_t)(-t) : (uint64_t)t;
    int lz = __builtin_clzll(mag);
    uint64_t norm = mag << lz;
    uint64_t m = norm >> 11;
    uint64_t rem = norm & 0x7ffull;
    int x2 = e + 63 - lz;
    if (rem > 0x400ull || (rem == 0x400ull && (m & 1ull)))
        m++;
    if (m >> 53) {
        m >>= 1;
        x2++;
    }
    return sign | ((uint64_t)(x2 + 1023) << 52) | (m & 0xfffffffffffffull);
}

/* Stage 1: group g's partial over [g*T*L, min((g+1)*T*L, n)), work-item
 * j adding j + k*L in order, then the pairwise tree. */
#define SUM1(NAME, T, ACC, ZERO, CONV, ADD)                                   \
    static void NAME(const run *r)                                            \
    {                                                                         \
        const T *a = (const T *)(void *)ptrarg(r, 0);                         \
        uint64_t ao = u64arg(r, 1), n = u64arg(r, 2), tiles = u64arg(r, 3);   \
        ACC *part = (ACC *)(void *)ptrarg(r, 4);                              \
        use(r, a + ao, n * sizeof(T), "sum input");                           \
        use(r, part, r->groups * sizeof(ACC), "sum partials");                \
        if ((uint64_t)r->groups * tiles * LOCAL < n)                          \
            die("zeCommandListAppendLaunchKernel", "sum: %u groups of %llu "  \
                "tiles do not cover n", r->groups,                            \
                (unsigned long long)tiles);                                   \
        ACC s[LOCAL];                                                  \
        for (uint32_t g = 0; g < r->groups; g++) {                            \
            uint64_t lo = (uint64_t)g * tiles * LOCAL;                        \
            uint64_t hi = lo + tiles * LOCAL < n ? lo + tiles * LOCAL : n;    \
            for (uint32_t j = 0; j < LOCAL; j++) {                            \
                ACC acc = ZERO;                                               \
                for (uint64_t i = lo + j; i < hi; i += LOCAL)                 \
                    acc = ADD(acc, CONV(a[ao + i]));                          \
                s[j] = acc;                                                   \
            }                                                                 \
            for (uint32_t t = LOCAL / 2; t > 0; t >>= 1)                      \
                for (uint32_t j = 0; j < t; j++)                              \
                    s[j] = ADD(s[j], s[j + t]);                               \
            part[g] = s[0];                                                   \
        }                                                                     \
    }
#define SUM2(NAME, ACC, ZERO, ADD, BITS)                                      \
    static void NAME(const run *r)                                            \
    {                                                                         \
        const ACC *part = (const ACC *)(void *)ptrarg(r, 0);                  \
        uint64_t groups = u64arg(r, 1), oo = u64arg(r, 3);                    \
        unsigned char *out = ptrarg(r, 2);                                    \
        if (r->groups != 1)                                                   \
            die("zeCommandListAppendLaunchKernel", "sum stage 2 on %u "       \
                "groups", r->groups);                                         \
        use(r, part, groups * sizeof(ACC), "sum partials");                   \
        use(r, out + oo, 8, "sum out");                                       \
        ACC s[LOCAL];                                                  \
        for (uint32_t j = 0; j < LOCAL; j++) {                                \
            ACC acc = ZERO;                                                   \
            for (uint64_t i = j; i < groups; i += LOCAL)                      \
                acc = ADD(acc, part[i]);                                      \
            s[j] = acc;                                                       \
        }                                                                     \
        for (uint32_t t = LOCAL / 2; t > 0; t >>= 1)                          \
            for (uint32_t j = 0; j < t; j++)                                  \
                s[j] = ADD(s[j], s[j + t]);                                   \
        uint64_t bits = BITS(s[0]);                                           \
        for (int k = 0; k < 8; k++)                                           \
            out[oo + k] = (unsigned char)(bits >> (8 * k));                   \
    }
#define PLUS(x, y) ((x) + (y))
#define SEXT(x) ((uint64_t)(int64_t)(x))
#define U64(x) ((uint64_t)(x))
#define F2D(x) ((double)(x))
static ff ff_of(float x)
{
    ff r = {x, 0.0f};
    return r;
}
static uint64_t d_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}
static const ff ff_zero = {0.0f, 0.0f};
SUM1(sum1_i32, int32_t, uint64_t, 0, SEXT, PLUS)
SUM1(sum1_i64, uint64_t, uint64_t, 0, U64, PLUS)
SUM2(sum2_u, uint64_t, 0, PLUS, U64)
SUM1(sum1_f32_d, float, double, 0.0, F2D, PLUS)
SUM1(sum1_f64, double, double, 0.0, F2D, PLUS)
SUM2(sum2_d, double, 0.0, PLUS, d_bits)
SUM1(sum1_f32_ff, float, ff, ff_zero, ff_of, ff_add)
SUM2(sum2_ff, ff, ff_zero, ff_add, ff_bits)

static void fill_bytes(const run *r)
{
    unsigned char *o = ptrarg(r, 0);
    uint64_t oo = u64arg(r, 1), pat = u64arg(r, 2), ps = u64arg(r, 3),
             n = u64arg(r, 4);
    if (ps != 1 && ps != 2 && ps != 4 && ps != 8)
        die("zeCommandListAppendLaunchKernel", "fill_bytes psize %llu",
            (unsigned long long)ps);
    need_items(r, n);
    use(r, o + oo, n, "fill_bytes");
    for (uint64_t i = 0; i < n; i++)
        o[oo + i] = (unsigned char)(pat >> (8 * (i % ps)));
}

static void move_bytes(const run *r)
{
    unsigned char *o = ptrarg(r, 0);
    const unsigned char *a = ptrarg(r, 2);
    uint64_t oo = u64arg(r, 1), ao = u64arg(r, 3), n = u64arg(r, 4);
    use(r, o + oo, n, "move_bytes out");
    use(r, a + ao, n, "move_bytes in");
    memmove(o + oo, a + ao, n);
}

swze_result zeCommandListAppendLaunchKernel(swze_cmdlist l, swze_kernel k,
                                            const swze_group_count *groups,
                                            swze_event signal, uint32_t nwait,
                                            swze_event *waits)
{
    if (nwait != 0 || waits != NULL)
        die("zeCommandListAppendLaunchKernel", "unexpected wait list");
    run r;
    pthread_mutex_lock(&mu);
    FIND_LIVE(kernels, k, "zeCommandListAppendLaunchKernel", "kernel");
    r.pt = command(l, "zeCommandListAppendLaunchKernel");
    signal_event(l, signal, "zeCommandListAppendLaunchKernel");
    pthread_mutex_unlock(&mu);
    r.k = k;
    r.groups = groups->x;
    if (groups->x == 0 || groups->y != 1 || groups->z != 1)
        die("zeCommandListAppendLaunchKernel", "%s: %u x %u x %u groups",
            knames[k->kind], groups->x, groups->y, groups->z);
    if (k->group != LOCAL)
        die("zeCommandListAppendLaunchKernel", "%s: work-group size %u, not "
            "the %u opencl.cl was compiled for", knames[k->kind], k->group,
            LOCAL);
    unsigned want = (1u << nargs_of[k->kind]) - 1;
    if ((k->set & want) != want)
        die("zeCommandListAppendLaunchKernel", "%s: arguments unset (mask "
            "%#x of %#x)", knames[k->kind], k->set, want);
    int ffsum = !k->module->fp64;
    switch (k->kind) {
    case K_FILL_U32: ew_u32(&r, 0); break;
    case K_FILL_U64: ew_u64(&r, 0); break;
    case K_COPY_U32: ew_u32(&r, 1); break;
    case K_COPY_U64: ew_u64(&r, 1); break;
    case K_ADD_F32: ew_f32(&r, 2); break;
    case K_SCALE_F32: ew_f32(&r, 3); break;
    case K_AXPY_F32: ew_f32(&r, 4); break;
    case K_ADD_U32: ew_u32(&r, 2); break;
    case K_SCALE_U32: ew_u32(&r, 3); break;
    case K_AXPY_U32: ew_u32(&r, 4); break;
    case K_ADD_U64: ew_u64(&r, 2); break;
    case K_SCALE_U64: ew_u64(&r, 3); break;
    case K_AXPY_U64: ew_u64(&r, 4); break;
    case K_ADD_F64: ew_f64(&r, 2); break;
    case K_SCALE_F64: ew_f64(&r, 3); break;
    case K_AXPY_F64: ew_f64(&r, 4); break;
    case K_FILL_BYTES: fill_bytes(&r); break;
    case K_MOVE_BYTES: move_bytes(&r); break;
    case K_SUM1_I32: sum1_i32(&r); break;
    case K_SUM1_I64: sum1_i64(&r); break;
    case K_SUM2_U: sum2_u(&r); break;
    case K_SUM1_F32:
        if (ffsum)
            sum1_f32_ff(&r);
        else
            sum1_f32_d(&r);
        break;
    case K_SUM1_F64: sum1_f64(&r); break;
    case K_SUM2_D:
        if (ffsum)
            sum2_ff(&r);
        else
            sum2_d(&r);
        break;
    }
    return SWZE_ZE_RESULT_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Sysman
 * ---------------------------------------------------------------------- */

swze_result zesInit(uint32_t flags)
{
    (void)flags;
    if (getenv("FAKE_ZE_NO_SYSMAN") != NULL ||
        getenv("FAKE_ZE_LEGACY_SYSMAN") != NULL)
        return SWZE_ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
    sysman_init = 1;
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zesDriverGet(uint32_t *count, swze_driver *drivers)
{
    if (!sysman_init)
        return SWZE_ZE_RESULT_ERROR_UNINITIALIZED;
    return get_one(count, drivers, &zes_driver);
}

swze_result zesDeviceGet(swze_driver d, uint32_t *count, swze_device *devs)
{
    if (!sysman_init)
        return SWZE_ZE_RESULT_ERROR_UNINITIALIZED;
    if (d != &zes_driver)
        die("zesDeviceGet", "not a Sysman driver handle%s",
            d == &driver ? " (a core one)" : "");
    return get_one(count, devs, &zes_device);
}

/* The Sysman device: zesInit's handle, or the core one under
 * ZES_ENABLE_SYSMAN=1. */
static swze_result sysman_device(swze_device d, const char *call)
{
    if (d == &zes_device)
        return sysman_init ? SWZE_ZE_RESULT_SUCCESS
                           : SWZE_ZE_RESULT_ERROR_UNINITIALIZED;
    if (d == &device)
        return legacy_sysman_ok ? SWZE_ZE_RESULT_SUCCESS
                                : SWZE_ZE_RESULT_ERROR_UNINITIALIZED;
    die(call, "not a device handle");
}

swze_result zesDeviceGetProperties(swze_device d, swzes_device_properties *p)
{
    swze_result r = sysman_device(d, "zesDeviceGetProperties");
    if (r)
        return r;
    stype(p->stype, SWZE_ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES,
          "zesDeviceGetProperties");
    p->core.stype = SWZE_ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
    fill_props(&p->core);
    snprintf(p->model_name, sizeof p->model_name, "fake");
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zesDeviceEnumMemoryModules(swze_device d, uint32_t *count,
                                       swzes_mem *mems)
{
    swze_result r = sysman_device(d, "zesDeviceEnumMemoryModules");
    if (r)
        return r;
    if (*count == 0 || mems == NULL) {
        *count = 2;
        return SWZE_ZE_RESULT_SUCCESS;
    }
    uint32_t n = *count < 2 ? *count : 2;
    swzes_mem both[2] = {&mem_system, &mem_device};
    memcpy(mems, both, n * sizeof *mems);
    *count = n;
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zesMemoryGetProperties(swzes_mem m, swzes_mem_properties *p)
{
    if (m != &mem_device && m != &mem_system)
        die("zesMemoryGetProperties", "not a memory module handle");
    stype(p->stype, SWZE_ZES_STRUCTURE_TYPE_MEM_PROPERTIES,
          "zesMemoryGetProperties");
    p->location = m->device ? SWZE_ZES_MEM_LOC_DEVICE : 0;
    p->physical_size = m->device ? capacity : ((uint64_t)64 << 30);
    return SWZE_ZE_RESULT_SUCCESS;
}

swze_result zesMemoryGetState(swzes_mem m, swzes_mem_state *st)
{
    if (m != &mem_device && m != &mem_system)
        die("zesMemoryGetState", "not a memory module handle");
    stype(st->stype, SWZE_ZES_STRUCTURE_TYPE_MEM_STATE, "zesMemoryGetState");
    pthread_mutex_lock(&mu);
    st->size = m->device ? capacity : ((uint64_t)64 << 30);
    st->free = m->device ? capacity - allocated : ((uint64_t)33 << 30);
    pthread_mutex_unlock(&mu);
    return SWZE_ZE_RESULT_SUCCESS;
}
