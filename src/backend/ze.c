/*
 * ze.c -- Intel GPUs through oneAPI Level Zero, loaded at run time.
 *
 * The divisions of this file, in order:
 *   - The loader: libze_loader.so.1 once per process, result names and
 *     codes, the GPU devices of every driver, Sysman.
 *   - The built-in kernels: the SPIR-V built into the library and the
 *     table of its entry points.
 *   - Types: events (from growable event pools), holds, deferred frees,
 *     queues, devices.
 *   - Events, holds and deferred frees.
 *   - Queues: appending in order, synchronizing without the device lock.
 *   - Operations (the ops table's functions): devices; memory; queues;
 *     transfers and fills; kernels; events and waiting.
 *   - The ops table.
 *
 * Nothing Level Zero is needed to build this file: ze_api.h declares what
 * is used, and the loader is dlopen'ed the first time anyone asks how many
 * ze devices there are.  Without a loader, or a GPU driver behind it, the
 * backend offers no devices and says why in one line.
 *
 * Model.
 *  - ze:N is the N-th GPU device over every driver the loader reports, in
 *    the loader's order (ZE_AFFINITY_MASK applies).  One context per open
 *    device.
 *  - A queue is an immediate command list on the device's first compute
 *    queue group.  Level Zero does not promise that commands of a list run
 *    in order, so every command is followed by a barrier
 *    (zeCommandListAppendBarrier, no events): that is the contract's
 *    in-order queue.  A command list is not thread-safe, and synchronize
 *    runs without the core's device lock, so each queue has its own leaf
 *    mutex around appending.
 *  - Memory is zeMemAllocDevice (256-byte aligned).  zeMemFree is not
 *    stream-ordered (it frees at once; the caller must know the device is
 *    done), so a free appends a barrier that signals an event and keeps the
 *    pointer; zeMemFree runs once the event has signaled, at a later
 *    allocation or memory query.  The record and event a free needs are
 *    made at allocation, so a free never needs host memory and never waits.
 *  - Memory figures: the total is the sum of the device's memories
 *    (zeDeviceGetMemoryProperties).  device_free comes from Sysman, the sum
 *    over the device's memory modules located on the device
 *    (zesMemoryGetState): through zesInit where the loader has it (1.5+;
 *    the Sysman device is matched by UUID), else through the core handle,
 *    which works when the process was started with ZES_ENABLE_SYSMAN=1.
 *    Without Sysman device_free is unknown (device_free_known = 0): it is
 *    never invented.
 *  - Events come from event pools (host-visible, 256 events each, a new
 *    pool when all are in use), recorded as a barrier that signals them.
 *    An event is reset (zeEventHostReset) only when it is handed out
 *    again, and only once its last signal has happened and no device-side
 *    wait on it can still be pending: a queue that waits for another's
 *    event (wait_event: a barrier that waits for it) holds it, with a
 *    marker signaled after the wait, until the marker has signaled.
 *    (Level Zero waits on the event's state when the wait runs, not when
 *    it is appended, unlike CUDA and HIP.)
 *  - Kernels: the SPIR-V the build made from kernels/opencl.cl (one module
 *    with fp64, one without), built into a module at the first launch and
 *    launched with work-groups of 256 (the reduction size it was compiled
 *    with, SW_RED_L), with the OpenCL backend's arguments: base pointers
 *    and element offsets, and SUM's fixed-order two-stage tree, so sums
 *    add in the OpenCL backend's order.  Without SPIR-V in the build the
 *    device has no kernels: props.dtypes is ZE__NO_DTYPES (no dtype at
 *    all) with the reason, and launch returns SW_ERR_UNSUPPORTED; memory,
 *    copies, fills and spilling work.
 *
 * Threads and locks.  The core's device mutex covers everything but the
 * event operations and synchronize.  Our leaf locks: each queue's mu (its
 * command list and synchronization slots), and the device's ev_mu (the
 * event free list).  ev_mu and a queue's mu are never held together.
 *
 * fork(): a child of a process that initialized Level Zero reports no ze
 * devices, and says why.
 */
#include "backend.h"
#include "ze_api.h"
#include "ze_internal.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define ZE__MAX_DEVICES 64
#define ZE__MAX_DRIVERS 16
#define ZE__LOCAL 256u /* work-group size; opencl.cl built with SW_RED_L=256 */
#define ZE__SUM_GROUPS 1024u
#define ZE__MAX_ITEMS ((size_t)1 << 30)
#define ZE__POOL_EVENTS 256u
#define ZE__SYNC_SLOTS 4
#define ZE__MAX_MEMS 16
/* props.dtypes of a device without kernels: a bit past every dtype, so
 * that no dtype is supported (0 would mean "the four of version 1"). */
#define ZE__NO_DTYPES (UINT32_C(1) << 31)

/* ------------------------------------------------------------------------
 * The loader: once per process
 * ---------------------------------------------------------------------- */

typedef struct ze__loader {
    void *lib;
    swze_loader_api api;
    int count;
    swze_driver drivers[ZE__MAX_DEVICES];
    swze_device devices[ZE__MAX_DEVICES];
    swze_device sysman[ZE__MAX_DEVICES]; /* zesInit's handle; NULL: none */
    int sysman_init; /* zesInit succeeded */
    pid_t pid;
    char path[256];
    char why[320];
} ze__loader;

static ze__loader ze__g;
static pthread_once_t ze__once = PTHREAD_ONCE_INIT;

#define ZE(fn) (ze__g.api.fn)

const char *sw__ze_result_name(uint32_t r)
{
    switch (r) {
#define ZE__NAME_CASE(name, value)                                            \
    case value:                                                               \
        return #name;
        SWZE_RESULTS(ZE__NAME_CASE)
#undef ZE__NAME_CASE
    }
    return NULL;
}

static const char *ze__name(swze_result r, char *buf, size_t len)
{
    const char *s = sw__ze_result_name(r);
    if (s != NULL)
        return s;
    snprintf(buf, len, "ze_result_t 0x%08x", (unsigned)r);
    return buf;
}

int sw__ze_error_code(uint32_t r)
{
    switch (r) {
    case SWZE_ZE_RESULT_SUCCESS:
        return SW_OK;
    case SWZE_ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY:
        return SW_ERR_OOM;
    case SWZE_ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY:
        return SW_ERR_HOST_OOM;
    case SWZE_ZE_RESULT_ERROR_UNSUPPORTED_FEATURE:
    case SWZE_ZE_RESULT_ERROR_UNSUPPORTED_VERSION:
        return SW_ERR_UNSUPPORTED;
    default:
        return SW_ERR_DEVICE;
    }
}

/* "ze:0: zeMemAllocDevice (4096 bytes) failed:
 * ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY"; returns the mapped code. */
static int ze__fail(int index, swze_result r, const char *call,
                    const char *detail)
{
    char nbuf[40];
    int code = sw__ze_error_code(r);
    if (code == SW_OK)
        code = SW_ERR_DEVICE;
    return sw__errorf(code, "ze:%d: %s%s%s%s failed: %s", index, call,
                      detail ? " (" : "", detail ? detail : "",
                      detail ? ")" : "", ze__name(r, nbuf, sizeof nbuf));
}

/* The GPU devices of every driver into ze__g (at most ZE__MAX_DEVICES). */
static void ze__enumerate(void)
{
    ze__loader *g = &ze__g;
    char nbuf[40];
    uint32_t nd = 0;
    swze_result r = ZE(zeDriverGet)(&nd, NULL);
    if (r != SWZE_ZE_RESULT_SUCCESS) {
        snprintf(g->why, sizeof g->why, "zeDriverGet failed: %s",
                 ze__name(r, nbuf, sizeof nbuf));
        return;
    }
    swze_driver drivers[ZE__MAX_DRIVERS];
    if (nd > ZE__MAX_DRIVERS)
        nd = ZE__MAX_DRIVERS;
    if (nd > 0 && ZE(zeDriverGet)(&nd, drivers) != SWZE_ZE_RESULT_SUCCESS)
        nd = 0;
    for (uint32_t i = 0; i < nd; i++) {
        swze_device devs[ZE__MAX_DEVICES];
        uint32_t n = 0;
        if (ZE(zeDeviceGet)(drivers[i], &n, NULL) != SWZE_ZE_RESULT_SUCCESS)
            continue;
        if (n > ZE__MAX_DEVICES)
            n = ZE__MAX_DEVICES;
        if (ZE(zeDeviceGet)(drivers[i], &n, devs) != SWZE_ZE_RESULT_SUCCESS)
            continue;
        for (uint32_t j = 0; j < n && g->count < ZE__MAX_DEVICES; j++) {
            swze_device_properties p;
            memset(&p, 0, sizeof p);
            p.stype = SWZE_ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
            if (ZE(zeDeviceGetProperties)(devs[j], &p) !=
                    SWZE_ZE_RESULT_SUCCESS ||
                p.type != SWZE_ZE_DEVICE_TYPE_GPU)
                continue;
            g->drivers[g->count] = drivers[i];
            g->devices[g->count] = devs[j];
            g->count++;
        }
    }
    if (g->count == 0)
        snprintf(g->why, sizeof g->why, "the Level Zero loader reports no "
                 "GPU devices (%u driver%s)", nd, nd == 1 ? "" : "s");
}

/* Sysman through zesInit (loader 1.5+): the Sysman handle of each of our
 * devices, matched by UUID.  Without it, the core handles are tried at
 * open (they work under ZES_ENABLE_SYSMAN=1). */
static void ze__sysman_init(void)
{
    ze__loader *g = &ze__g;
    if (ZE(zesInit) == NULL || ZE(zesDriverGet) == NULL ||
        ZE(zesDeviceGet) == NULL || ZE(zesDeviceGetProperties) == NULL ||
        ZE(zesInit)(0) != SWZE_ZE_RESULT_SUCCESS)
        return;
    g->sysman_init = 1;
    uint32_t nd = 0;
    swze_driver drivers[ZE__MAX_DRIVERS];
    if (ZE(zesDriverGet)(&nd, NULL) != SWZE_ZE_RESULT_SUCCESS)
        return;
    if (nd > ZE__MAX_DRIVERS)
        nd = ZE__MAX_DRIVERS;
    if (ZE(zesDriverGet)(&nd, drivers) != SWZE_ZE_RESULT_SUCCESS)
        return;
    for (uint32_t i = 0; i < nd; i++) {
        swze_device devs[ZE__MAX_DEVICES];
        uint32_t n = 0;
        if (ZE(zesDeviceGet)(drivers[i], &n, NULL) != SWZE_ZE_RESULT_SUCCESS)
            continue;
        if (n > ZE__MAX_DEVICES)
            n = ZE__MAX_DEVICES;
        if (ZE(zesDeviceGet)(drivers[i], &n, devs) != SWZE_ZE_RESULT_SUCCESS)
            continue;
        for (uint32_t j = 0; j < n; j++) {
            swzes_device_properties sp;
            memset(&sp, 0, sizeof sp);
            sp.stype = SWZE_ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES;
            sp.core.stype = SWZE_ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
            if (ZE(zesDeviceGetProperties)(devs[j], &sp) !=
                SWZE_ZE_RESULT_SUCCESS)
                continue;
            for (int k = 0; k < g->count; k++) {
                swze_device_properties p;
                memset(&p, 0, sizeof p);
                p.stype = SWZE_ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
                if (ZE(zeDeviceGetProperties)(g->devices[k], &p) ==
                        SWZE_ZE_RESULT_SUCCESS &&
                    memcmp(p.uuid, sp.core.uuid, sizeof p.uuid) == 0)
                    g->sysman[k] = devs[j];
            }
        }
    }
}

static void ze__load(void)
{
    ze__loader *g = &ze__g;
    g->pid = getpid();
    const char *env = getenv("SPILLWAY_ZE_LIBRARY");
    static const char *const names[] = {"libze_loader.so.1",
                                        "libze_loader.so"};
    void *lib = NULL;
    const char *path = NULL;
    char err[256] = "";
    size_t tries = env != NULL && env[0] != '\0' ? 1 : 2;
    for (size_t i = 0; lib == NULL && i < tries; i++) {
        path = tries == 1 ? env : names[i];
        dlerror();
        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        const char *e = dlerror();
        if (lib == NULL && e != NULL && strstr(e, "No such file") == NULL &&
            err[0] == '\0')
            snprintf(err, sizeof err, "%.200s", e);
    }
    if (lib == NULL) {
        if (err[0] != '\0')
            snprintf(g->why, sizeof g->why, "cannot load %.100s: %s",
                     tries == 1 ? env : "libze_loader.so.1", err);
        else if (tries == 1)
            snprintf(g->why, sizeof g->why, "%.200s not found "
                     "(SPILLWAY_ZE_LIBRARY)", env);
        else
            snprintf(g->why, sizeof g->why, "libze_loader.so.1 not found: "
                     "no Level Zero loader");
        return;
    }
    const char *lacking = NULL;
#define ZE__RESOLVE(kind, name, params)                                       \
    {                                                                         \
        void *p = dlsym(lib, #name);                                          \
        if (p == NULL && (kind) == 1 && lacking == NULL)                      \
            lacking = #name;                                                  \
        memcpy(&g->api.name, &p, sizeof p);                                   \
    }
    SWZE_FUNCS(ZE__RESOLVE)
#undef ZE__RESOLVE
    if (lacking != NULL) {
        snprintf(g->why, sizeof g->why, "%.150s lacks %s: not a Level Zero "
                 "loader, or one too old (spillway needs Level Zero 1.0)",
                 path, lacking);
        memset(&g->api, 0, sizeof g->api);
        dlclose(lib);
        return;
    }
    g->lib = lib;
    snprintf(g->path, sizeof g->path, "%s", path);
    char nbuf[40];
    swze_result r = ZE(zeInit)(SWZE_ZE_INIT_FLAG_GPU_ONLY);
    if (r != SWZE_ZE_RESULT_SUCCESS) {
        snprintf(g->why, sizeof g->why, "zeInit failed: %s%s",
                 ze__name(r, nbuf, sizeof nbuf),
                 r == SWZE_ZE_RESULT_ERROR_UNINITIALIZED
                     ? " (no Level Zero GPU driver, or no access to "
                       "/dev/dri)"
                     : "");
        return;
    }
    ze__enumerate();
    if (g->count > 0)
        ze__sysman_init();
}

static int ze__devices(char *why, size_t why_len)
{
    pthread_once(&ze__once, ze__load);
    if (ze__g.count > 0 && getpid() != ze__g.pid) {
        if (why_len > 0)
            snprintf(why, why_len, "Level Zero was initialized in the parent "
                     "before fork(): a forked child cannot use it");
        return 0;
    }
    if (why_len > 0)
        snprintf(why, why_len, "%s", ze__g.count > 0 ? "" : ze__g.why);
    return ze__g.count;
}

/* ------------------------------------------------------------------------
 * The built-in kernels
 * ---------------------------------------------------------------------- */

#ifdef SW_HAVE_ZE_SPIRV
extern const unsigned char sw__ze_spirv_fp64[], sw__ze_spirv_nofp64[];
extern const size_t sw__ze_spirv_fp64_size, sw__ze_spirv_nofp64_size;
#endif

const unsigned char *sw__ze_spirv(int fp64, size_t *size, const char **why)
{
#ifdef SW_HAVE_ZE_SPIRV
    if (why != NULL)
        *why = "";
    *size = fp64 ? sw__ze_spirv_fp64_size : sw__ze_spirv_nofp64_size;
    return fp64 ? sw__ze_spirv_fp64 : sw__ze_spirv_nofp64;
#else
    (void)fp64;
    if (why != NULL)
        *why = "this build has no SPIR-V kernels (" SW_ZE_SPIRV_WHY
               " when it was built; docs/level-zero.md)";
    *size = 0;
    return NULL;
#endif
}

/* The SPIR-V device d uses (NULL with why when it has no kernels).
 * Defined with the types, below. */
static const unsigned char *ze__spirv_of(const sw__bdev *d, size_t *size,
                                         const char **why);

/* opencl.cl's entry points, as opencl.c launches them. */
typedef enum ze__kid {
    ZE__FILL_U32, ZE__FILL_U64, ZE__COPY_U32, ZE__COPY_U64,
    ZE__ADD_F32, ZE__SCALE_F32, ZE__AXPY_F32,
    ZE__ADD_U32, ZE__SCALE_U32, ZE__AXPY_U32,
    ZE__ADD_U64, ZE__SCALE_U64, ZE__AXPY_U64,
    ZE__ADD_F64, ZE__SCALE_F64, ZE__AXPY_F64,
    ZE__FILL_BYTES, ZE__MOVE_BYTES,
    ZE__SUM1_I32, ZE__SUM1_I64, ZE__SUM2_U,
    ZE__SUM1_F32, ZE__SUM1_F64, ZE__SUM2_D,
    ZE__NKERNELS
} ze__kid;

static const char *const ze__knames[ZE__NKERNELS] = {
    "sw_fill_u32",  "sw_fill_u64",  "sw_copy_u32",  "sw_copy_u64",
    "sw_add_f32",   "sw_scale_f32", "sw_axpy_f32",
    "sw_add_u32",   "sw_scale_u32", "sw_axpy_u32",
    "sw_add_u64",   "sw_scale_u64", "sw_axpy_u64",
    "sw_add_f64",   "sw_scale_f64", "sw_axpy_f64",
    "sw_fill_bytes", "sw_move_bytes",
    "sw_sum1_i32",  "sw_sum1_u64",  "sw_sum2_u",
    "sw_sum1_f32",  "sw_sum1_f64",  "sw_sum2_d",
};
static const int ze__kfp64[ZE__NKERNELS] = {
    [ZE__ADD_F64] = 1, [ZE__SCALE_F64] = 1, [ZE__AXPY_F64] = 1,
    [ZE__SUM1_F64] = 1,
};

const char *const *sw__ze_kernel_names(size_t *count, const int **fp64)
{
    if (count != NULL)
        *count = ZE__NKERNELS;
    if (fp64 != NULL)
        *fp64 = ze__kfp64;
    return ze__knames;
}

/* ------------------------------------------------------------------------
 * Types
 * ---------------------------------------------------------------------- */

struct sw__bevent {
    sw__bdev *dev;
    swze_event ev;
    _Atomic int refs; /* handed out: 1 + holds; 0 in the free list */
    int armed;        /* a signal appended, not yet seen (device lock) */
    sw__bevent *next; /* in dev->ev_free */
};

/* A pool of events, and the events made from it. */
typedef struct ze__pool {
    struct ze__pool *next;
    swze_event_pool pool;
    sw__bevent ev[ZE__POOL_EVENTS];
} ze__pool;

/* A device-side wait of a queue on another's event: the event is held
 * until marker (signaled right after the wait) has signaled. */
typedef struct ze__hold {
    struct ze__hold *next;
    sw__bevent *waited, *marker;
} ze__hold;

/* A free waiting for its queue's work, made at allocation. */
typedef struct ze__pending {
    struct ze__pending *next;
    void *mem;
    sw__bevent *after;
} ze__pending;

struct sw__bqueue {
    sw__bdev *dev;
    swze_cmdlist list;
    pthread_mutex_t mu; /* leaf: list, sync slots */
    pthread_cond_t cv;
    sw__bevent *sync[ZE__SYNC_SLOTS];
    int sync_busy[ZE__SYNC_SLOTS];
    ze__hold *holds; /* device lock */
    void *partials;  /* ZE__SUM_GROUPS x 8 bytes, at the first sum */
    int foreign;     /* the caller's list (queue_wrap): never destroyed */
};

struct sw__bdev {
    _Atomic int refs; /* the open, queues (events are in the pools) */
    int index;
    swze_driver driver;
    swze_device device;
    swze_context ctx;
    uint32_t ordinal;  /* the compute queue group */
    size_t max_fill;   /* its largest fill pattern */
    int fp64;
    int no_kernels; /* SPILLWAY_ZE_KERNELS=0 */
    uint64_t total;
    sw__bqueue *dq;

    /* Sysman: the device's memory modules on the device itself. */
    swzes_mem mems[ZE__MAX_MEMS];
    int nmems;

    /* Kernels (device lock). */
    swze_module module;
    swze_kernel k[ZE__NKERNELS];
    int kernels_failed;
    char kernels_why[600];

    /* Frees (device lock). */
    ze__pending *pending, *spare;
    size_t nspare, nlive;

    pthread_mutex_t ev_mu; /* leaf: the event free list */
    sw__bevent *ev_free;
    ze__pool *pools;
};

static pthread_mutex_t ze__open_mu = PTHREAD_MUTEX_INITIALIZER;
static sw__bdev *ze__open[ZE__MAX_DEVICES];

static const unsigned char *ze__spirv_of(const sw__bdev *d, size_t *size,
                                         const char **why)
{
    if (d->no_kernels) {
        *size = 0;
        if (why != NULL)
            *why = "SPILLWAY_ZE_KERNELS=0 turns the built-in kernels off";
        return NULL;
    }
    return sw__ze_spirv(d->fp64, size, why);
}

int sw__ze_sysman(int index)
{
    if (index < 0 || index >= ZE__MAX_DEVICES)
        return -1;
    pthread_mutex_lock(&ze__open_mu);
    int r = ze__open[index] == NULL ? -1 : ze__open[index]->nmems > 0;
    pthread_mutex_unlock(&ze__open_mu);
    return r;
}

/* ------------------------------------------------------------------------
 * Events, holds, deferred frees
 * ---------------------------------------------------------------------- */

/* A pool of events more, into the free list.  ev_mu is held. */
static int ze__pool_grow(sw__bdev *d)
{
    ze__pool *p = sw__calloc(1, sizeof *p);
    if (p == NULL)
        return sw__errorf(SW_ERR_HOST_OOM, "ze:%d: no host memory for an "
                          "event pool", d->index);
    swze_event_pool_desc pd = {SWZE_ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, NULL,
                               SWZE_ZE_EVENT_POOL_FLAG_HOST_VISIBLE,
                               ZE__POOL_EVENTS};
    swze_result r = ZE(zeEventPoolCreate)(d->ctx, &pd, 1, &d->device,
                                          &p->pool);
    if (r != SWZE_ZE_RESULT_SUCCESS) {
        sw__free(p);
        return ze__fail(d->index, r, "zeEventPoolCreate", NULL);
    }
    for (uint32_t i = 0; i < ZE__POOL_EVENTS; i++) {
        swze_event_desc ed = {SWZE_ZE_STRUCTURE_TYPE_EVENT_DESC, NULL, i,
                              SWZE_ZE_EVENT_SCOPE_FLAG_HOST,
                              SWZE_ZE_EVENT_SCOPE_FLAG_HOST};
        r = ZE(zeEventCreate)(p->pool, &ed, &p->ev[i].ev);
        if (r != SWZE_ZE_RESULT_SUCCESS) {
            for (uint32_t j = 0; j < i; j++)
                (void)ZE(zeEventDestroy)(p->ev[j].ev);
            (void)ZE(zeEventPoolDestroy)(p->pool);
            sw__free(p);
            return ze__fail(d->index, r, "zeEventCreate", NULL);
        }
        p->ev[i].dev = d;
        atomic_init(&p->ev[i].refs, 0);
    }
    for (uint32_t i = ZE__POOL_EVENTS; i-- > 0;) {
        p->ev[i].next = d->ev_free;
        d->ev_free = &p->ev[i];
    }
    p->next = d->pools;
    d->pools = p;
    return SW_OK;
}

/* An event ready to be signaled (reset, its last signal seen).  The
 * device lock is held. */
static int ze__event_get(sw__bdev *d, sw__bevent **out)
{
    pthread_mutex_lock(&d->ev_mu);
    sw__bevent *skipped = NULL, *e = NULL;
    int rc = SW_OK;
    for (;;) {
        e = d->ev_free;
        if (e == NULL) {
            rc = ze__pool_grow(d);
            if (rc != SW_OK)
                break;
            continue;
        }
        d->ev_free = e->next;
        /* Released before its signal ran: not reusable yet. */
        if (e->armed &&
            ZE(zeEventQueryStatus)(e->ev) != SWZE_ZE_RESULT_SUCCESS) {
            e->next = skipped;
            skipped = e;
            continue;
        }
        break;
    }
    while (skipped != NULL) {
        sw__bevent *s = skipped;
        skipped = s->next;
        s->next = d->ev_free;
        d->ev_free = s;
    }
    pthread_mutex_unlock(&d->ev_mu);
    if (rc != SW_OK)
        return rc;
    e->armed = 0;
    swze_result r = ZE(zeEventHostReset)(e->ev);
    if (r != SWZE_ZE_RESULT_SUCCESS) {
        pthread_mutex_lock(&d->ev_mu);
        e->next = d->ev_free;
        d->ev_free = e;
        pthread_mutex_unlock(&d->ev_mu);
        return ze__fail(d->index, r, "zeEventHostReset", NULL);
    }
    atomic_store(&e->refs, 1);
    e->next = NULL;
    *out = e;
    return SW_OK;
}

/* Drop a reference; the last one returns the event to the free list.
 * Any lock state (ev_mu is a leaf). */
static void ze__event_put(sw__bevent *e)
{
    if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1)
        return;
    sw__bdev *d = e->dev;
    pthread_mutex_lock(&d->ev_mu);
    e->next = d->ev_free;
    d->ev_free = e;
    pthread_mutex_unlock(&d->ev_mu);
}

/* Holds whose wait has run (their marker signaled) let go.  The device
 * lock is held. */
static void ze__reap_holds(sw__bqueue *q)
{
    ze__hold **pp = &q->holds;
    while (*pp != NULL) {
        ze__hold *h = *pp;
        if (ZE(zeEventQueryStatus)(h->marker->ev) != SWZE_ZE_RESULT_SUCCESS) {
            pp = &h->next;
            continue;
        }
        *pp = h->next;
        ze__event_put(h->waited);
        ze__event_put(h->marker);
        sw__free(h);
    }
}

/* Frees whose queue work is done: zeMemFree now.  Device lock held. */
static void ze__reap(sw__bdev *d)
{
    ze__pending **pp = &d->pending;
    while (*pp != NULL) {
        ze__pending *p = *pp;
        if (ZE(zeEventQueryStatus)(p->after->ev) != SWZE_ZE_RESULT_SUCCESS) {
            pp = &p->next;
            continue;
        }
        (void)ZE(zeMemFree)(d->ctx, p->mem);
        *pp = p->next;
        /* The record keeps its event: signaled, waited for by nobody, it
         * is reset by the next free that takes the record. */
        p->next = d->spare;
        d->spare = p;
        d->nspare++;
    }
}

/* Before an allocation: a record, with its event, for its later free. */
static int ze__reserve(sw__bdev *d)
{
    if (d->nspare > d->nlive)
        return SW_OK;
    ze__pending *p = sw__calloc(1, sizeof *p);
    if (p == NULL)
        return sw__errorf(SW_ERR_HOST_OOM, "ze:%d: no host memory for the "
                          "record of a later free", d->index);
    int rc = ze__event_get(d, &p->after);
    if (rc != SW_OK) {
        sw__free(p);
        return rc;
    }
    p->next = d->spare;
    d->spare = p;
    d->nspare++;
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * Queues
 * ---------------------------------------------------------------------- */

/* Append one command, then the barrier that keeps the list in order.
 * Takes q->mu. */
#define ZE__APPEND(q, rvar, expr)                                             \
    do {                                                                      \
        pthread_mutex_lock(&(q)->mu);                                         \
        rvar = (expr);                                                        \
        if (rvar == SWZE_ZE_RESULT_SUCCESS)                                   \
            rvar = ZE(zeCommandListAppendBarrier)((q)->list, NULL, 0, NULL);  \
        pthread_mutex_unlock(&(q)->mu);                                       \
    } while (0)

static int ze__queue_new(sw__bdev *d, swze_cmdlist own, sw__bqueue **out)
{
    sw__bqueue *q = sw__calloc(1, sizeof *q);
    if (q == NULL)
        return sw__errorf(SW_ERR_HOST_OOM, "ze:%d: no host memory for a "
                          "queue", d->index);
    q->dev = d;
    int rc = SW_OK;
    int s = 0;
    for (; s < ZE__SYNC_SLOTS && rc == SW_OK; s++)
        rc = ze__event_get(d, &q->sync[s]);
    if (rc == SW_OK && own != NULL) {
        q->list = own;
        q->foreign = 1;
    } else if (rc == SW_OK) {
        swze_command_queue_desc qd = {
            SWZE_ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, NULL, d->ordinal, 0, 0,
            SWZE_ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS,
            SWZE_ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
        swze_result r = ZE(zeCommandListCreateImmediate)(d->ctx, d->device,
                                                         &qd, &q->list);
        if (r != SWZE_ZE_RESULT_SUCCESS)
            rc = ze__fail(d->index, r, "zeCommandListCreateImmediate", NULL);
    }
    if (rc != SW_OK) {
        for (int i = 0; i < ZE__SYNC_SLOTS; i++)
            if (q->sync[i] != NULL)
                ze__event_put(q->sync[i]);
        sw__free(q);
        return rc;
    }
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    atomic_fetch_add(&d->refs, 1);
    *out = q;
    return SW_OK;
}

/* Wait for everything appended to q so far.  Without the device lock, and
 * without host memory: a signal from one of the queue's own slots. */
static int ze__queue_sync(sw__bqueue *q)
{
    sw__bdev *d = q->dev;
    pthread_mutex_lock(&q->mu);
    int s = -1;
    for (;;) {
        for (int i = 0; i < ZE__SYNC_SLOTS && s < 0; i++)
            if (!q->sync_busy[i])
                s = i;
        if (s >= 0)
            break;
        pthread_cond_wait(&q->cv, &q->mu);
    }
    q->sync_busy[s] = 1;
    /* The slot's last signal was waited for by its last user. */
    swze_result r = ZE(zeEventHostReset)(q->sync[s]->ev);
    if (r == SWZE_ZE_RESULT_SUCCESS)
        r = ZE(zeCommandListAppendBarrier)(q->list, q->sync[s]->ev, 0, NULL);
    pthread_mutex_unlock(&q->mu);
    const char *call = "zeCommandListAppendBarrier";
    if (r == SWZE_ZE_RESULT_SUCCESS) {
        call = "zeEventHostSynchronize";
        r = ZE(zeEventHostSynchronize)(q->sync[s]->ev, UINT64_MAX);
    }
    pthread_mutex_lock(&q->mu);
    q->sync_busy[s] = 0;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    return r == SWZE_ZE_RESULT_SUCCESS ? SW_OK
                                       : ze__fail(d->index, r, call, NULL);
}

static void ze__unref(sw__bdev *d);

/* Idle it, let go of what it holds, destroy it. */
static void ze__queue_free(sw__bqueue *q)
{
    sw__bdev *d = q->dev;
    (void)ze__queue_sync(q);
    ze__reap_holds(q); /* every marker has signaled: all let go */
    while (q->holds != NULL) {
        ze__hold *h = q->holds; /* a marker in error: let go anyway */
        q->holds = h->next;
        ze__event_put(h->waited);
        ze__event_put(h->marker);
        sw__free(h);
    }
    if (q->partials != NULL)
        (void)ZE(zeMemFree)(d->ctx, q->partials);
    if (!q->foreign)
        (void)ZE(zeCommandListDestroy)(q->list);
    for (int i = 0; i < ZE__SYNC_SLOTS; i++)
        ze__event_put(q->sync[i]);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    sw__free(q);
    ze__unref(d);
}

/* ------------------------------------------------------------------------
 * Operations: devices
 * ---------------------------------------------------------------------- */

static int ze_device_count(int *count, char *why, size_t why_len)
{
    *count = ze__devices(why, why_len);
    return SW_OK;
}

int sw__ze_device_count(int *count, char *why, size_t why_len)
{
    return ze_device_count(count, why, why_len);
}

/* Everything the device owns, once nothing else refers to it. */
static void ze__unref(sw__bdev *d)
{
    if (atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) != 1)
        return;
    for (ze__pool *p = d->pools, *next; p != NULL; p = next) {
        next = p->next;
        for (uint32_t i = 0; i < ZE__POOL_EVENTS; i++)
            (void)ZE(zeEventDestroy)(p->ev[i].ev);
        (void)ZE(zeEventPoolDestroy)(p->pool);
        sw__free(p);
    }
    if (d->ctx != NULL)
        (void)ZE(zeContextDestroy)(d->ctx);
    pthread_mutex_destroy(&d->ev_mu);
    sw__free(d);
}

/* The device's memory modules on the device, from Sysman: through
 * zesInit's handle, else the core handle (ZES_ENABLE_SYSMAN=1). */
static void ze__sysman_open(sw__bdev *d)
{
    if (ZE(zesDeviceEnumMemoryModules) == NULL ||
        ZE(zesMemoryGetProperties) == NULL || ZE(zesMemoryGetState) == NULL)
        return;
    swze_device h = ze__g.sysman[d->index];
    if (h == NULL && ze__g.sysman_init)
        return; /* zesInit ran and does not know this device */
    if (h == NULL)
        h = d->device;
    swzes_mem mems[ZE__MAX_MEMS];
    uint32_t n = 0;
    if (ZE(zesDeviceEnumMemoryModules)(h, &n, NULL) != SWZE_ZE_RESULT_SUCCESS)
        return;
    if (n > ZE__MAX_MEMS)
        n = ZE__MAX_MEMS;
    if (n == 0 ||
        ZE(zesDeviceEnumMemoryModules)(h, &n, mems) != SWZE_ZE_RESULT_SUCCESS)
        return;
    for (uint32_t i = 0; i < n; i++) {
        swzes_mem_properties mp;
        memset(&mp, 0, sizeof mp);
        mp.stype = SWZE_ZES_STRUCTURE_TYPE_MEM_PROPERTIES;
        swzes_mem_state st;
        memset(&st, 0, sizeof st);
        st.stype = SWZE_ZES_STRUCTURE_TYPE_MEM_STATE;
        if (ZE(zesMemoryGetProperties)(mems[i], &mp) ==
                SWZE_ZE_RESULT_SUCCESS &&
            mp.location == SWZE_ZES_MEM_LOC_DEVICE &&
            ZE(zesMemoryGetState)(mems[i], &st) == SWZE_ZE_RESULT_SUCCESS)
            d->mems[d->nmems++] = mems[i];
    }
}

static int ze_open(int index, sw__bdev **out, sw__device_props *props)
{
    char why[320];
    int n = ze__devices(why, sizeof why);
    if (index < 0 || index >= n)
        return n == 0 ? sw__errorf(SW_ERR_NO_DEVICE, "ze:%d: no Level Zero "
                                   "devices: %s", index, why)
                      : sw__errorf(SW_ERR_NO_DEVICE, "ze:%d: no such device "
                                   "(the loader reports %d GPU%s)", index, n,
                                   n == 1 ? "" : "s");
    sw__bdev *d = sw__calloc(1, sizeof *d);
    if (d == NULL)
        return sw__errorf(SW_ERR_HOST_OOM, "ze:%d: out of host memory",
                          index);
    d->index = index;
    d->driver = ze__g.drivers[index];
    d->device = ze__g.devices[index];
    atomic_init(&d->refs, 1);
    pthread_mutex_init(&d->ev_mu, NULL);

    swze_device_properties dp;
    memset(&dp, 0, sizeof dp);
    dp.stype = SWZE_ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
    swze_result r = ZE(zeDeviceGetProperties)(d->device, &dp);
    if (r != SWZE_ZE_RESULT_SUCCESS) {
        ze__unref(d);
        return ze__fail(index, r, "zeDeviceGetProperties", NULL);
    }
    dp.name[sizeof dp.name - 1] = '\0';
    /* Memory: the sum of the device's memories. */
    swze_device_memory_properties mp[8];
    uint32_t nm = 8;
    memset(mp, 0, sizeof mp);
    for (int i = 0; i < 8; i++)
        mp[i].stype = SWZE_ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES;
    if (ZE(zeDeviceGetMemoryProperties)(d->device, &nm, mp) ==
        SWZE_ZE_RESULT_SUCCESS)
        for (uint32_t i = 0; i < nm && i < 8; i++)
            d->total += mp[i].total_size;
    swze_device_module_properties modp;
    memset(&modp, 0, sizeof modp);
    modp.stype = SWZE_ZE_STRUCTURE_TYPE_DEVICE_MODULE_PROPERTIES;
    if (ZE(zeDeviceGetModuleProperties)(d->device, &modp) ==
        SWZE_ZE_RESULT_SUCCESS)
        d->fp64 = (modp.flags & SWZE_ZE_DEVICE_MODULE_FLAG_FP64) != 0;
    const char *kenv = getenv("SPILLWAY_ZE_KERNELS");
    d->no_kernels = kenv != NULL && strcmp(kenv, "0") == 0;
    const char *fp64_env = getenv("SPILLWAY_ZE_FP64");
    if (fp64_env != NULL && strcmp(fp64_env, "0") == 0)
        d->fp64 = 0;
    /* The first compute queue group. */
    swze_queue_group_properties gp[16];
    uint32_t ng = 16;
    memset(gp, 0, sizeof gp);
    for (int i = 0; i < 16; i++)
        gp[i].stype = SWZE_ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES;
    d->max_fill = 4;
    if (ZE(zeDeviceGetCommandQueueGroupProperties)(d->device, &ng, gp) ==
        SWZE_ZE_RESULT_SUCCESS) {
        for (uint32_t i = 0; i < ng && i < 16; i++) {
            if (gp[i].flags & SWZE_ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE) {
                d->ordinal = i;
                d->max_fill = gp[i].max_memory_fill_pattern_size;
                break;
            }
        }
    }
    swze_context_desc cd = {SWZE_ZE_STRUCTURE_TYPE_CONTEXT_DESC, NULL, 0};
    r = ZE(zeContextCreate)(d->driver, &cd, &d->ctx);
    if (r != SWZE_ZE_RESULT_SUCCESS) {
        d->ctx = NULL;
        ze__unref(d);
        return ze__fail(index, r, "zeContextCreate", NULL);
    }
    int rc = ze__queue_new(d, NULL, &d->dq);
    if (rc != SW_OK) {
        ze__unref(d);
        return rc;
    }
    ze__sysman_open(d);

    pthread_mutex_lock(&ze__open_mu);
    ze__open[index] = d;
    pthread_mutex_unlock(&ze__open_mu);

    const char *nowhy = NULL;
    size_t spv = 0;
    int have_spirv = ze__spirv_of(d, &spv, &nowhy) != NULL;
    memset(props, 0, sizeof *props);
    snprintf(props->description, sizeof props->description,
             "%.60s, Level Zero, %s, %s", dp.name,
             !have_spirv ? (d->no_kernels ? "no kernels (SPILLWAY_ZE_KERNELS=0)"
                                          : "no kernels (no SPIR-V in this "
                                            "build)")
             : d->fp64   ? "fp64"
                         : "no fp64",
             d->nmems ? "free memory from Sysman"
                      : "free memory unknown (no Sysman)");
    props->total = d->total;
    props->max_alloc = dp.max_mem_alloc_size;
    props->host_addressable = 0;
    if (!have_spirv) {
        props->dtypes = ZE__NO_DTYPES;
        snprintf(props->dtypes_why, sizeof props->dtypes_why, "%s",
                 d->no_kernels ? "no kernels (SPILLWAY_ZE_KERNELS=0)"
                               : "no kernels: this build has no SPIR-V "
                                 "(clang, llvm-spirv)");
    } else if (!d->fp64) {
        props->dtypes = (1u << SW_FLOAT32) | (1u << SW_INT32) |
                        (1u << SW_INT64);
        snprintf(props->dtypes_why, sizeof props->dtypes_why,
                 "the device has no fp64%s",
                 fp64_env != NULL && strcmp(fp64_env, "0") == 0
                     ? " (SPILLWAY_ZE_FP64=0)"
                     : "");
    }
    *out = d;
    return SW_OK;
}

/* pre: no live allocations, no queue but the default one. */
static void ze_close(sw__bdev *d)
{
    if (d == NULL)
        return;
    pthread_mutex_lock(&ze__open_mu);
    if (ze__open[d->index] == d)
        ze__open[d->index] = NULL;
    pthread_mutex_unlock(&ze__open_mu);
    sw__bqueue *dq = d->dq;
    (void)ze__queue_sync(dq);
    ze__reap(d); /* every free's barrier has run */
    for (ze__pending *p = d->pending, *next; p != NULL; p = next) {
        next = p->next; /* an event in error: free anyway */
        (void)ZE(zeMemFree)(d->ctx, p->mem);
        ze__event_put(p->after);
        sw__free(p);
    }
    for (ze__pending *p = d->spare, *next; p != NULL; p = next) {
        next = p->next;
        ze__event_put(p->after);
        sw__free(p);
    }
    d->pending = d->spare = NULL;
    for (int k = 0; k < ZE__NKERNELS; k++)
        if (d->k[k] != NULL)
            (void)ZE(zeKernelDestroy)(d->k[k]);
    if (d->module != NULL)
        (void)ZE(zeModuleDestroy)(d->module);
    d->module = NULL;
    d->dq = NULL;
    ze__queue_free(dq);
    ze__unref(d);
}

/* ------------------------------------------------------------------------
 * Operations: memory
 * ---------------------------------------------------------------------- */

static int ze_alloc(sw__bdev *d, size_t size, uintptr_t *mem)
{
    ze__reap(d);
    int rc = ze__reserve(d);
    if (rc != SW_OK)
        return rc;
    swze_device_mem_alloc_desc ad = {SWZE_ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC,
                                     NULL, 0, 0};
    void *p = NULL;
    swze_result r = ZE(zeMemAllocDevice)(d->ctx, &ad, size, 256, d->device,
                                         &p);
    if (r != SWZE_ZE_RESULT_SUCCESS) {
        char detail[48];
        snprintf(detail, sizeof detail, "%zu bytes", size);
        /* The driver's own host memory short counts as the device's
         * (integrated GPUs allocate from it): the ladder may help. */
        if (r == SWZE_ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY)
            r = SWZE_ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
        return ze__fail(d->index, r, "zeMemAllocDevice", detail);
    }
    d->nlive++;
    *mem = (uintptr_t)p;
    return SW_OK;
}

/* zeMemFree once q's work so far is done: a barrier signals the record's
 * event (made at allocation: no host memory needed here). */
static int ze_free(sw__bdev *d, sw__bqueue *q, uintptr_t mem, size_t size)
{
    if (q == NULL)
        q = d->dq;
    ze__pending *p = d->spare;
    if (p == NULL) /* cannot be: reserved at allocation */
        return sw__errorf(SW_ERR_DEVICE, "ze:%d: internal error: no record "
                          "for the free of %zu bytes", d->index, size);
    /* A reused record's event signaled for its last free, and nothing
     * waits for it: reset, it signals this one. */
    swze_result r = p->after->armed ? ZE(zeEventHostReset)(p->after->ev)
                                    : SWZE_ZE_RESULT_SUCCESS;
    if (r != SWZE_ZE_RESULT_SUCCESS)
        return ze__fail(d->index, r, "zeEventHostReset", "deferred free");
    pthread_mutex_lock(&q->mu);
    r = ZE(zeCommandListAppendBarrier)(q->list, p->after->ev, 0, NULL);
    pthread_mutex_unlock(&q->mu);
    if (r != SWZE_ZE_RESULT_SUCCESS)
        return ze__fail(d->index, r, "zeCommandListAppendBarrier",
                        "deferred free");
    p->after->armed = 1;
    d->spare = p->next;
    d->nspare--;
    d->nlive--;
    p->mem = (void *)mem;
    p->next = d->pending;
    d->pending = p;
    return SW_OK;
}

static int ze_mem_info(sw__bdev *d, uint64_t *free_bytes, uint64_t *total,
                       int *free_known)
{
    ze__reap(d);
    *total = d->total;
    *free_bytes = 0;
    *free_known = 0;
    if (d->nmems == 0)
        return SW_OK; /* no Sysman: unknown, not invented */
    uint64_t f = 0, t = 0;
    for (int i = 0; i < d->nmems; i++) {
        swzes_mem_state st;
        memset(&st, 0, sizeof st);
        st.stype = SWZE_ZES_STRUCTURE_TYPE_MEM_STATE;
        swze_result r = ZE(zesMemoryGetState)(d->mems[i], &st);
        if (r != SWZE_ZE_RESULT_SUCCESS)
            return SW_OK; /* unknown this time */
        f += st.free;
        t += st.size;
    }
    *free_bytes = f;
    if (t > 0)
        *total = t;
    *free_known = 1;
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * Operations: queues
 * ---------------------------------------------------------------------- */

static sw__bqueue *ze_default_queue(sw__bdev *d) { return d->dq; }

static int ze_queue_create(sw__bdev *d, sw__bqueue **out)
{
    return ze__queue_new(d, NULL, out);
}

static int ze_queue_native(sw__bqueue *q, uintptr_t *handle)
{
    *handle = (uintptr_t)q->list;
    return SW_OK;
}

/* The caller's immediate command list, which must be of this device's
 * context and device, checked where the loader has the queries (Level
 * Zero 1.9: zeCommandListGetContextHandle, ...GetDeviceHandle,
 * ...IsImmediate); a regular list, closed and executed later, has no
 * order spillway could join.  spillway's own default list is refused (the
 * core refuses the others it handed out). */
static int ze_queue_wrap(sw__bdev *d, uintptr_t handle, sw__bqueue **out)
{
    swze_cmdlist l = (swze_cmdlist)handle;
    swze_result r;
    if (l == d->dq->list)
        return sw__errorf(SW_ERR_INVALID_ARG, "ze:%d: %#jx is spillway's "
                          "own default queue's command list: use that queue "
                          "itself", d->index, (uintmax_t)handle);
    if (ZE(zeCommandListGetContextHandle) != NULL) {
        swze_context c = NULL;
        r = ZE(zeCommandListGetContextHandle)(l, &c);
        if (r != SWZE_ZE_RESULT_SUCCESS)
            return sw__errorf(SW_ERR_INVALID_ARG, "ze:%d: %#jx is not a "
                              "live command list (zeCommandListGet"
                              "ContextHandle: %#x)", d->index,
                              (uintmax_t)handle, (unsigned)r);
        if (c != d->ctx)
            return sw__errorf(SW_ERR_INVALID_ARG, "ze:%d: command list "
                              "%#jx is of another context than the "
                              "device's (Device.native_context)", d->index,
                              (uintmax_t)handle);
    }
    if (ZE(zeCommandListGetDeviceHandle) != NULL) {
        swze_device dv = NULL;
        r = ZE(zeCommandListGetDeviceHandle)(l, &dv);
        if (r != SWZE_ZE_RESULT_SUCCESS || dv != d->device)
            return sw__errorf(SW_ERR_INVALID_ARG, "ze:%d: command list "
                              "%#jx is of another device", d->index,
                              (uintmax_t)handle);
    }
    if (ZE(zeCommandListIsImmediate) != NULL) {
        uint8_t imm = 0;
        r = ZE(zeCommandListIsImmediate)(l, &imm);
        if (r != SWZE_ZE_RESULT_SUCCESS || !imm)
            return sw__errorf(SW_ERR_INVALID_ARG, "ze:%d: command list "
                              "%#jx is not an immediate one", d->index,
                              (uintmax_t)handle);
    }
    return ze__queue_new(d, l, out);
}

static int ze_native_context(sw__bdev *d, uintptr_t *context)
{
    *context = (uintptr_t)d->ctx;
    return SW_OK;
}

static void ze_queue_destroy(sw__bqueue *q)
{
    if (q != NULL && q != q->dev->dq)
        ze__queue_free(q);
}

/* ------------------------------------------------------------------------
 * Operations: transfers and fills
 * ---------------------------------------------------------------------- */

static int ze__copy_n(sw__bqueue *q, void *dst, const void *src, size_t n,
                      const char *what)
{
    swze_result r;
    ZE__APPEND(q, r, ZE(zeCommandListAppendMemoryCopy)(q->list, dst, src, n,
                                                       NULL, 0, NULL));
    if (r == SWZE_ZE_RESULT_SUCCESS)
        return SW_OK;
    char detail[64];
    snprintf(detail, sizeof detail, "%s, %zu bytes", what, n);
    return ze__fail(q->dev->index, r, "zeCommandListAppendMemoryCopy",
                    detail);
}

static int ze_write(sw__bqueue *q, uintptr_t dst, size_t dst_off,
                    const void *src, size_t n)
{
    return ze__copy_n(q, (void *)(dst + dst_off), src, n, "host to device");
}

static int ze_read(sw__bqueue *q, void *dst, uintptr_t src, size_t src_off,
                   size_t n)
{
    return ze__copy_n(q, dst, (const void *)(src + src_off), n,
                      "device to host");
}

static int ze_copy(sw__bqueue *q, uintptr_t dst, size_t dst_off,
                   uintptr_t src, size_t src_off, size_t n)
{
    return ze__copy_n(q, (void *)(dst + dst_off),
                      (const void *)(src + src_off), n, "device to device");
}

static int ze__kernels_ready(sw__bdev *d);

typedef struct ze__arg {
    size_t size;
    const void *value;
} ze__arg;

/* Kernel kid on q over groups work-groups of ZE__LOCAL.  Device lock
 * held (a kernel's arguments are the device's, set then appended). */
static int ze__run(sw__bqueue *q, ze__kid kid, uint32_t groups,
                   const ze__arg *args, int nargs)
{
    sw__bdev *d = q->dev;
    int rc = ze__kernels_ready(d);
    if (rc != SW_OK)
        return rc;
    swze_kernel k = d->k[kid];
    for (int i = 0; i < nargs; i++) {
        swze_result r = ZE(zeKernelSetArgumentValue)(k, (uint32_t)i,
                                                     args[i].size,
                                                     args[i].value);
        if (r != SWZE_ZE_RESULT_SUCCESS) {
            char what[96];
            snprintf(what, sizeof what, "argument %d of %s", i,
                     ze__knames[kid]);
            return ze__fail(d->index, r, "zeKernelSetArgumentValue", what);
        }
    }
    swze_group_count gc = {groups, 1, 1};
    swze_result r;
    ZE__APPEND(q, r, ZE(zeCommandListAppendLaunchKernel)(q->list, k, &gc,
                                                         NULL, 0, NULL));
    if (r != SWZE_ZE_RESULT_SUCCESS)
        return ze__fail(d->index, r, "zeCommandListAppendLaunchKernel",
                        ze__knames[kid]);
    return SW_OK;
}

/* An element-wise kernel over n elements (offsets in elements), split
 * into launches of at most ZE__MAX_ITEMS work-items. */
static int ze__launch_ew(sw__bqueue *q, ze__kid kid, void *o, size_t oo,
                         void *a, size_t ao, void *b, size_t bo,
                         const void *alpha, size_t alpha_size, size_t n)
{
    for (size_t done = 0; done < n;) {
        size_t cnt = n - done < ZE__MAX_ITEMS ? n - done : ZE__MAX_ITEMS;
        uint64_t uoo = oo + done, uao = ao + done, ubo = bo + done, un = cnt;
        ze__arg args[8] = {
            {sizeof o, &o},     {sizeof uoo, &uoo}, {sizeof a, &a},
            {sizeof uao, &uao}, {sizeof b, &b},     {sizeof ubo, &ubo},
            {alpha_size, alpha}, {sizeof un, &un},
        };
        int rc = ze__run(q, kid, (uint32_t)((cnt + ZE__LOCAL - 1) / ZE__LOCAL),
                         args, 8);
        if (rc != SW_OK)
            return rc;
        done += cnt;
    }
    return SW_OK;
}

static int ze__fill_bytes(sw__bqueue *q, void *base, size_t off, size_t n,
                          const unsigned char *pattern, size_t psize)
{
    uint64_t pat = 0;
    for (size_t k = 0; k < psize; k++)
        pat |= (uint64_t)pattern[k] << (8 * k);
    uint32_t ps = (uint32_t)psize;
    for (size_t done = 0; done < n;) {
        size_t cnt = n - done < ZE__MAX_ITEMS ? n - done : ZE__MAX_ITEMS;
        uint64_t uoo = off + done, un = cnt;
        ze__arg args[5] = {{sizeof base, &base}, {sizeof uoo, &uoo},
                           {sizeof pat, &pat},   {sizeof ps, &ps},
                           {sizeof un, &un}};
        int rc = ze__run(q, ZE__FILL_BYTES,
                         (uint32_t)((cnt + ZE__LOCAL - 1) / ZE__LOCAL), args,
                         5);
        if (rc != SW_OK)
            return rc;
        done += cnt;
    }
    return SW_OK;
}

/* The pattern is passed from the caller's memory: Level Zero
 * implementations copy it when the fill is appended (docs/level-zero.md
 * notes this as one of the things a first GPU run must confirm). */
static int ze_fill(sw__bqueue *q, uintptr_t dst, size_t dst_off, size_t n,
                   const void *pattern, size_t pattern_size)
{
    if (pattern_size > q->dev->max_fill)
        return ze__fill_bytes(q, (void *)dst, dst_off, n, pattern,
                              pattern_size);
    swze_result r;
    ZE__APPEND(q, r, ZE(zeCommandListAppendMemoryFill)(
                         q->list, (void *)(dst + dst_off), pattern,
                         pattern_size, n, NULL, 0, NULL));
    if (r == SWZE_ZE_RESULT_SUCCESS)
        return SW_OK;
    char detail[64];
    snprintf(detail, sizeof detail, "%zu bytes, pattern of %zu", n,
             pattern_size);
    return ze__fail(q->dev->index, r, "zeCommandListAppendMemoryFill",
                    detail);
}

/* ------------------------------------------------------------------------
 * Operations: kernels
 * ---------------------------------------------------------------------- */

static int ze__kernels_fail(sw__bdev *d, int code)
{
    d->kernels_failed = code;
    snprintf(d->kernels_why, sizeof d->kernels_why, "%s", sw_last_error());
    return code;
}

/* The module, built from the SPIR-V at the first launch.  Device lock. */
static int ze__kernels_ready(sw__bdev *d)
{
    if (d->module != NULL)
        return SW_OK;
    if (d->kernels_failed)
        return sw__errorf(d->kernels_failed, "%s", d->kernels_why);
    size_t size = 0;
    const char *why = NULL;
    const unsigned char *spv = ze__spirv_of(d, &size, &why);
    if (spv == NULL) {
        sw__errorf(SW_ERR_UNSUPPORTED, "ze:%d: no built-in kernels: %s",
                   d->index, why);
        return ze__kernels_fail(d, SW_ERR_UNSUPPORTED);
    }
    swze_module_desc md = {SWZE_ZE_STRUCTURE_TYPE_MODULE_DESC, NULL,
                           SWZE_ZE_MODULE_FORMAT_IL_SPIRV, size, spv, "",
                           NULL};
    swze_module mod = NULL;
    swze_build_log log = NULL;
    swze_result r = ZE(zeModuleCreate)(d->ctx, d->device, &md, &mod, &log);
    char text[400] = "";
    if (log != NULL) {
        size_t n = sizeof text;
        if (ZE(zeModuleBuildLogGetString)(log, &n, text) !=
            SWZE_ZE_RESULT_SUCCESS)
            text[0] = '\0';
        text[sizeof text - 1] = '\0';
        for (char *c = text; *c; c++)
            if (*c == '\n')
                *c = ' ';
        (void)ZE(zeModuleBuildLogDestroy)(log);
    }
    if (r != SWZE_ZE_RESULT_SUCCESS) {
        char detail[520];
        snprintf(detail, sizeof detail, "the built-in kernels, %zu bytes of "
                 "SPIR-V%s%s%s", size, d->fp64 ? " with fp64" : "",
                 text[0] ? ": " : "", text);
        int code = ze__fail(d->index, r, "zeModuleCreate", detail);
        if (code == SW_ERR_OOM || code == SW_ERR_HOST_OOM)
            return code; /* transient: the next launch tries again */
        return ze__kernels_fail(d, code);
    }
    for (int k = 0; k < ZE__NKERNELS; k++) {
        if (ze__kfp64[k] && !d->fp64)
            continue;
        swze_kernel_desc kd = {SWZE_ZE_STRUCTURE_TYPE_KERNEL_DESC, NULL, 0,
                               ze__knames[k]};
        r = ZE(zeKernelCreate)(mod, &kd, &d->k[k]);
        if (r == SWZE_ZE_RESULT_SUCCESS)
            r = ZE(zeKernelSetGroupSize)(d->k[k], ZE__LOCAL, 1, 1);
        if (r != SWZE_ZE_RESULT_SUCCESS) {
            for (int j = 0; j <= k; j++)
                if (d->k[j] != NULL) {
                    (void)ZE(zeKernelDestroy)(d->k[j]);
                    d->k[j] = NULL;
                }
            (void)ZE(zeModuleDestroy)(mod);
            ze__fail(d->index, r, "zeKernelCreate", ze__knames[k]);
            return ze__kernels_fail(d, SW_ERR_DEVICE);
        }
    }
    d->module = mod;
    return SW_OK;
}

static int ze__sum(sw__bqueue *q, const sw_kernel_args *args)
{
    sw__bdev *d = q->dev;
    if (q->partials == NULL) {
        swze_device_mem_alloc_desc ad = {
            SWZE_ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, NULL, 0, 0};
        swze_result r = ZE(zeMemAllocDevice)(d->ctx, &ad, ZE__SUM_GROUPS * 8,
                                             256, d->device, &q->partials);
        if (r != SWZE_ZE_RESULT_SUCCESS) {
            q->partials = NULL;
            return ze__fail(d->index, r, "zeMemAllocDevice", "partial sums");
        }
    }
    size_t L = ZE__LOCAL, n = args->n;
    size_t groups = (n + L - 1) / L;
    if (groups > ZE__SUM_GROUPS)
        groups = ZE__SUM_GROUPS;
    uint64_t tiles = (n + groups * L - 1) / (groups * L);
    size_t es = sw_dtype_size(args->dtype);
    ze__kid k1, k2;
    switch (args->dtype) {
    case SW_FLOAT32: k1 = ZE__SUM1_F32; k2 = ZE__SUM2_D; break;
    case SW_FLOAT64: k1 = ZE__SUM1_F64; k2 = ZE__SUM2_D; break;
    case SW_INT32: k1 = ZE__SUM1_I32; k2 = ZE__SUM2_U; break;
    default: k1 = ZE__SUM1_I64; k2 = ZE__SUM2_U; break;
    }
    void *a = (void *)args->a.base, *out = (void *)args->out.base;
    void *partials = q->partials;
    uint64_t ao = args->a.offset / es, un = n, ug = groups,
             oo = args->out.offset;
    ze__arg s1[5] = {{sizeof a, &a},
                     {sizeof ao, &ao},
                     {sizeof un, &un},
                     {sizeof tiles, &tiles},
                     {sizeof partials, &partials}};
    int rc = ze__run(q, k1, (uint32_t)groups, s1, 5);
    if (rc != SW_OK)
        return rc;
    ze__arg s2[4] = {{sizeof partials, &partials},
                     {sizeof ug, &ug},
                     {sizeof out, &out},
                     {sizeof oo, &oo}};
    return ze__run(q, k2, 1, s2, 4);
}

static void ze__alpha_bits(sw_dtype dt, sw_scalar v, void *out)
{
    switch (dt) {
    case SW_FLOAT32: {
        float f = (float)v.f;
        memcpy(out, &f, 4);
        break;
    }
    case SW_FLOAT64:
        memcpy(out, &v.f, 8);
        break;
    case SW_INT32: {
        uint32_t u = (uint32_t)(uint64_t)v.i;
        memcpy(out, &u, 4);
        break;
    }
    default:
        memcpy(out, &v.i, 8);
        break;
    }
}

/* As opencl.c's launch: the core has checked the kernel, the dtype (one
 * of props.dtypes), the count and the typed operands' alignment. */
static int ze_launch(sw__bqueue *q, const sw_kernel_args *args)
{
    sw__bdev *d = q->dev;
    if (ze__spirv_of(d, &(size_t){0}, NULL) == NULL)
        return ze__kernels_ready(d); /* SW_ERR_UNSUPPORTED, saying why */
    size_t es = sw_dtype_size(args->dtype);
    size_t bytes = args->n * es;
    void *o = (void *)args->out.base;
    void *a = args->a.base ? (void *)args->a.base : o;
    void *b = args->b.base ? (void *)args->b.base : o;
    unsigned char alpha[8];
    ze__alpha_bits(args->dtype, args->alpha, alpha);
    int typed = args->out.offset % es == 0 &&
                (args->kernel != SW_KERNEL_COPY || args->a.offset % es == 0);

    switch (args->kernel) {
    case SW_KERNEL_FILL:
        if (!typed)
            return ze__fill_bytes(q, o, args->out.offset, bytes, alpha, es);
        return ze__launch_ew(q, es == 4 ? ZE__FILL_U32 : ZE__FILL_U64, o,
                             args->out.offset / es, o, 0, o, 0, alpha, es,
                             args->n);
    case SW_KERNEL_COPY: {
        if (o == a && args->out.offset == args->a.offset)
            return SW_OK;
        int overlap = o == a && args->out.offset < args->a.offset + bytes &&
                      args->a.offset < args->out.offset + bytes;
        if (overlap) {
            uint64_t udo = args->out.offset, uso = args->a.offset, un = bytes;
            ze__arg mv[5] = {{sizeof o, &o},     {sizeof udo, &udo},
                             {sizeof a, &a},     {sizeof uso, &uso},
                             {sizeof un, &un}};
            return ze__run(q, ZE__MOVE_BYTES, 1, mv, 5);
        }
        if (!typed)
            return ze__copy_n(q, (char *)o + args->out.offset,
                              (const char *)a + args->a.offset, bytes,
                              "COPY");
        return ze__launch_ew(q, es == 4 ? ZE__COPY_U32 : ZE__COPY_U64, o,
                             args->out.offset / es, a, args->a.offset / es,
                             o, 0, alpha, es, args->n);
    }
    case SW_KERNEL_SUM:
        return ze__sum(q, args);
    default:
        break;
    }
    static const ze__kid table[3][4] = {
        {ZE__ADD_F32, ZE__ADD_F64, ZE__ADD_U32, ZE__ADD_U64},
        {ZE__SCALE_F32, ZE__SCALE_F64, ZE__SCALE_U32, ZE__SCALE_U64},
        {ZE__AXPY_F32, ZE__AXPY_F64, ZE__AXPY_U32, ZE__AXPY_U64},
    };
    int row = args->kernel == SW_KERNEL_ADD     ? 0
              : args->kernel == SW_KERNEL_SCALE ? 1
                                                : 2;
    return ze__launch_ew(q, table[row][args->dtype], o, args->out.offset / es,
                         a, args->a.offset / es, b, args->b.offset / es,
                         alpha, es, args->n);
}

/* ------------------------------------------------------------------------
 * Operations: events and waiting
 * ---------------------------------------------------------------------- */

/* A barrier that signals the event once everything before it is done. */
static int ze_event_record(sw__bqueue *q, sw__bevent **out)
{
    sw__bdev *d = q->dev;
    ze__reap_holds(q);
    sw__bevent *e = NULL;
    int rc = ze__event_get(d, &e);
    if (rc != SW_OK)
        return rc;
    pthread_mutex_lock(&q->mu);
    swze_result r = ZE(zeCommandListAppendBarrier)(q->list, e->ev, 0, NULL);
    pthread_mutex_unlock(&q->mu);
    if (r != SWZE_ZE_RESULT_SUCCESS) {
        ze__event_put(e);
        return ze__fail(d->index, r, "zeCommandListAppendBarrier",
                        "an event");
    }
    e->armed = 1;
    *out = e;
    return SW_OK;
}

static int ze_event_query(sw__bevent *e, int *done)
{
    swze_result r = ZE(zeEventQueryStatus)(e->ev);
    if (r == SWZE_ZE_RESULT_SUCCESS || r == SWZE_ZE_RESULT_NOT_READY) {
        *done = r == SWZE_ZE_RESULT_SUCCESS;
        return SW_OK;
    }
    return ze__fail(e->dev->index, r, "zeEventQueryStatus", NULL);
}

static int ze_event_wait(sw__bevent *e)
{
    swze_result r = ZE(zeEventHostSynchronize)(e->ev, UINT64_MAX);
    return r == SWZE_ZE_RESULT_SUCCESS
               ? SW_OK
               : ze__fail(e->dev->index, r, "zeEventHostSynchronize", NULL);
}

static void ze_event_release(sw__bevent *e)
{
    if (e != NULL)
        ze__event_put(e);
}

static int ze_synchronize(sw__bqueue *q) { return ze__queue_sync(q); }

/* A barrier on q that waits for e, and signals a marker once it has
 * passed; e is held (not reset and reused) until the marker has signaled,
 * since Level Zero reads the event when the wait runs. */
static int ze_wait_event(sw__bqueue *q, sw__bevent *e)
{
    sw__bdev *d = q->dev;
    ze__reap_holds(q);
    ze__hold *h = sw__malloc(sizeof *h);
    if (h == NULL)
        return sw__errorf(SW_ERR_HOST_OOM, "ze:%d: no host memory to wait "
                          "for an event", d->index);
    int rc = ze__event_get(d, &h->marker);
    if (rc != SW_OK) {
        sw__free(h);
        return rc;
    }
    atomic_fetch_add(&e->refs, 1);
    h->waited = e;
    swze_event wait = e->ev;
    pthread_mutex_lock(&q->mu);
    swze_result r = ZE(zeCommandListAppendBarrier)(q->list, h->marker->ev, 1,
                                                   &wait);
    pthread_mutex_unlock(&q->mu);
    if (r != SWZE_ZE_RESULT_SUCCESS) {
        ze__event_put(e);
        ze__event_put(h->marker);
        sw__free(h);
        return ze__fail(d->index, r, "zeCommandListAppendBarrier",
                        "waiting for an event");
    }
    h->marker->armed = 1;
    h->next = q->holds;
    q->holds = h;
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * The ops table
 * ---------------------------------------------------------------------- */

const sw__backend_ops sw__ze_backend = {
    .version = SW__BACKEND_VERSION,
    .name = "ze",
    .device_count = ze_device_count,
    .open = ze_open,
    .close = ze_close,
    .alloc = ze_alloc,
    .free = ze_free,
    .mem_info = ze_mem_info,
    .default_queue = ze_default_queue,
    .queue_create = ze_queue_create,
    .queue_destroy = ze_queue_destroy,
    .write = ze_write,
    .read = ze_read,
    .copy = ze_copy,
    .fill = ze_fill,
    .launch = ze_launch,
    .event_record = ze_event_record,
    .event_query = ze_event_query,
    .event_wait = ze_event_wait,
    .event_release = ze_event_release,
    .synchronize = ze_synchronize,
    .wait_event = ze_wait_event,
    .queue_native = ze_queue_native,
    .queue_wrap = ze_queue_wrap,
    .native_context = ze_native_context,
};
