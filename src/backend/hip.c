/*
 * hip.c -- AMD GPUs through the HIP runtime API, loaded at run time.
 *
 * The divisions of this file, in order:
 *   - The runtime: loading libamdhip64 once per process, error names and
 *     codes.  (hipRTC and the compiled code objects are hip_rtc.c's.)
 *   - The built-in kernels: the entry names launched and their parameter
 *     sizes (the CUDA backend's table, looked up by name).
 *   - Devices, queues and events: types, the current device, reference
 *     counts, recycled events, the fallback allocator's deferred frees.
 *   - Operations (the ops table's functions): devices; memory; queues;
 *     transfers and fills; kernels; events and waiting.
 *   - The ops table.
 *
 * The shape is the CUDA backend's (cuda.c), whose comments say why each
 * choice is made; this file says where HIP differs.  Nothing ROCm is
 * needed to build it: hip_api.h declares what is used, and the runtime is
 * dlopen'ed the first time anyone asks how many HIP devices there are.
 * Without a runtime (or a GPU) the backend offers no devices and says why
 * in one line, e.g. "libamdhip64.so not found: no ROCm runtime".
 *
 * Model.
 *  - hip:N is the runtime's device N (after HIP_VISIBLE_DEVICES /
 *    ROCR_VISIBLE_DEVICES).  The runtime API has no contexts to push: the
 *    backend makes device N current (hipSetDevice) around each call that
 *    depends on it and puts the thread's own back afterwards.
 *  - A queue is a non-blocking stream (hipStreamNonBlocking); the default
 *    queue is one such stream per device.
 *  - Memory comes from a private stream-ordered pool (hipMemPoolCreate;
 *    hipMallocFromPoolAsync on the default stream, hipFreeAsync on the
 *    stream the core names; release threshold 0, trimmed before every
 *    memory query), so that the core's cache is the only cache and
 *    device_free (hipMemGetInfo) is what the device has.  Where pools are
 *    not supported (the runtime lacks them, hipMemPoolCreate fails, or
 *    SPILLWAY_HIP_POOL=0), hipMalloc, and a free records an event on its
 *    stream and calls hipFree once that event has completed, reaped at
 *    later allocations and memory queries: a free never waits.
 *  - Transfers use pageable host memory (hipMemcpyHtoDAsync and
 *    hipMemcpyDtoHAsync on the queue's stream).
 *  - The built-in kernels are cuda.cu compiled by hipRTC for the device's
 *    gcnArchName at first use (once per architecture per process, loaded
 *    once per device), launched with 256-thread blocks as on CUDA, so a
 *    sum adds in the same order and gives the same bits.  The backend
 *    declares the four dtypes of contract version 1 (props.dtypes == 0).
 *  - Events are HIP events without timing, recycled per device;
 *    hipStreamWaitEvent is the contract's wait_event.
 *
 * Threads and locks: as cuda.c.  The core's device mutex covers everything
 * but the event operations and synchronize; ev_mu (a leaf) covers a
 * device's event free list, and refs (atomic) keeps a device alive while
 * any event or queue of it exists.
 *
 * fork(): a child of a process that initialized HIP reports no HIP
 * devices, and says why (the ROCm runtime cannot be used across fork).
 */
#include "backend.h"
#include "cuda_internal.h" /* the kernels' parameter table */
#include "hip_api.h"
#include "hip_internal.h"

#include <assert.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define HIP__MAX_DEVICES 64
#define HIP__THREADS 256u    /* threads per block: cuda.cu's SW_THREADS */
#define HIP__SUM_BLOCKS 256u /* most partial sums per reduction */

/* ------------------------------------------------------------------------
 * The runtime: loaded once per process
 * ---------------------------------------------------------------------- */

typedef struct hip__loader {
    void *lib;
    swhip_runtime api;
    int count;
    int version; /* hipDriverGetVersion: major * 10^7 + minor * 10^5 + patch */
    pid_t pid;
    char path[256];
    char why[320];
    char missing[512];
} hip__loader;

static hip__loader hip__g;
static pthread_once_t hip__once = PTHREAD_ONCE_INIT;

#define HIP(fn) (hip__g.api.fn)

const char *sw__hip_error_table_name(int err)
{
    switch (err) {
#define HIP__NAME_CASE(name, value)                                           \
    case value:                                                               \
        return #name;
        SWHIP_ERRORS(HIP__NAME_CASE)
#undef HIP__NAME_CASE
    }
    return NULL;
}

static const char *hip__err_name(swhip_error r, char *buf, size_t len)
{
    const char *s = NULL;
    if (hip__g.lib != NULL && HIP(hipGetErrorName) != NULL)
        s = HIP(hipGetErrorName)(r);
    /* Some runtimes name unknown codes "hipErrorUnknown": ours is better. */
    const char *t = sw__hip_error_table_name((int)r);
    if (t != NULL && (s == NULL || strcmp(s, "hipErrorUnknown") == 0))
        return t;
    if (s != NULL)
        return s;
    snprintf(buf, len, "HIP error %u", r);
    return buf;
}

int sw__hip_error_code(int err)
{
    switch (err) {
    case SWHIP_hipSuccess:
        return SW_OK;
    case SWHIP_hipErrorOutOfMemory:
        return SW_ERR_OOM;
    case SWHIP_hipErrorNoDevice:
    case SWHIP_hipErrorInvalidDevice:
        return SW_ERR_NO_DEVICE;
    case SWHIP_hipErrorNotSupported:
        return SW_ERR_UNSUPPORTED;
    default:
        return SW_ERR_DEVICE;
    }
}

/* "hip:0: hipMalloc (4096 bytes) failed: hipErrorOutOfMemory (out of
 * memory)"; returns the mapped code.  detail may be NULL. */
static int hip__fail(int index, swhip_error r, const char *call,
                     const char *detail)
{
    char nbuf[32];
    const char *name = hip__err_name(r, nbuf, sizeof nbuf);
    const char *text = hip__g.lib != NULL && HIP(hipGetErrorString) != NULL
                           ? HIP(hipGetErrorString)(r)
                           : NULL;
    if (text != NULL && strcmp(text, name) == 0)
        text = NULL;
    int code = sw__hip_error_code((int)r);
    if (code == SW_OK)
        code = SW_ERR_DEVICE;
    return sw__errorf(code, "hip:%d: %s%s%s%s failed: %s%s%s%s", index, call,
                      detail ? " (" : "", detail ? detail : "",
                      detail ? ")" : "", name, text ? " (" : "",
                      text ? text : "", text ? ")" : "");
}

int sw__hip_fail(int index, int err, const char *call)
{
    return hip__fail(index, (swhip_error)err, call, NULL);
}

static void hip__append(char *buf, size_t len, const char *word)
{
    size_t used = strlen(buf);
    if (used + 1 < len)
        snprintf(buf + used, len - used, "%s%s", used ? " " : "", word);
}

/* 1 when lib has every required entry point (resolved into api). */
static int hip__resolve(void *lib, swhip_runtime *api, char *missing,
                        size_t mlen, const char **lacking)
{
    *lacking = NULL;
#define HIP__RESOLVE(kind, ret, name, params)                                 \
    {                                                                         \
        void *p = dlsym(lib, #name);                                          \
        if (p == NULL && (kind) == 1 && *lacking == NULL)                     \
            *lacking = #name;                                                 \
        if (p == NULL && (kind) == 0)                                         \
            hip__append(missing, mlen, #name);                                \
        memcpy(&api->name, &p, sizeof p);                                     \
    }
    SWHIP_FUNCS(HIP__RESOLVE)
#undef HIP__RESOLVE
    return *lacking == NULL;
}

static void hip__load(void)
{
    hip__loader *g = &hip__g;
    g->pid = getpid();
    const char *env = getenv("SPILLWAY_HIP_LIBRARY");
    void *lib = NULL;
    const char *path = NULL;
    char err[256] = "";
    if (env != NULL && env[0] != '\0') {
        path = env;
        dlerror();
        lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL) {
            const char *e = dlerror();
            if (e != NULL && strstr(e, "No such file") != NULL)
                snprintf(g->why, sizeof g->why, "%.200s not found "
                         "(SPILLWAY_HIP_LIBRARY)", env);
            else
                snprintf(g->why, sizeof g->why, "cannot load %.100s: %.200s",
                         env, e ? e : "dlopen failed");
            return;
        }
    } else {
        /* The development name first (what ROCm installs), then the
         * runtime packages' sonames, then ROCm's own directory. */
        static const char *const names[] = {
            "libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5",
            "/opt/rocm/lib/libamdhip64.so"};
        for (size_t i = 0; lib == NULL && i < sizeof names / sizeof names[0];
             i++) {
            dlerror();
            lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
            path = names[i];
            const char *e = dlerror();
            if (lib == NULL && e != NULL && strstr(e, "No such file") == NULL &&
                err[0] == '\0')
                snprintf(err, sizeof err, "%.200s", e);
        }
        if (lib == NULL) {
            if (err[0] != '\0')
                snprintf(g->why, sizeof g->why, "cannot load libamdhip64.so: "
                         "%s", err);
            else
                snprintf(g->why, sizeof g->why, "libamdhip64.so not found: "
                         "no ROCm runtime");
            return;
        }
    }
    const char *lacking = NULL;
    if (!hip__resolve(lib, &g->api, g->missing, sizeof g->missing,
                      &lacking)) {
        snprintf(g->why, sizeof g->why, "%.150s lacks %s: the ROCm runtime "
                 "is too old (spillway needs HIP 5.0 or later)", path,
                 lacking);
        memset(&g->api, 0, sizeof g->api);
        g->missing[0] = '\0';
        dlclose(lib);
        return;
    }
    g->lib = lib;
    snprintf(g->path, sizeof g->path, "%s", path);

    char nbuf[32];
    swhip_error r = HIP(hipInit)(0);
    if (r != SWHIP_hipSuccess) {
        snprintf(g->why, sizeof g->why, "hipInit failed: %s%s",
                 hip__err_name(r, nbuf, sizeof nbuf),
                 r == SWHIP_hipErrorNoDevice ||
                         r == SWHIP_hipErrorInvalidDevice
                     ? " (no AMD GPU, or no access to /dev/kfd)"
                     : "");
        return;
    }
    (void)HIP(hipDriverGetVersion)(&g->version);
    int n = 0;
    r = HIP(hipGetDeviceCount)(&n);
    if (r != SWHIP_hipSuccess) {
        snprintf(g->why, sizeof g->why, "hipGetDeviceCount failed: %s",
                 hip__err_name(r, nbuf, sizeof nbuf));
        return;
    }
    if (n <= 0) {
        snprintf(g->why, sizeof g->why, "the ROCm runtime reports no AMD "
                 "GPUs");
        return;
    }
    g->count = n > HIP__MAX_DEVICES ? HIP__MAX_DEVICES : n;
}

static int hip__devices(char *why, size_t why_len)
{
    pthread_once(&hip__once, hip__load);
    if (hip__g.count > 0 && getpid() != hip__g.pid) {
        if (why_len > 0)
            snprintf(why, why_len, "HIP was initialized in the parent before "
                     "fork(): a forked child cannot use it");
        return 0;
    }
    if (why_len > 0)
        snprintf(why, why_len, "%s", hip__g.count > 0 ? "" : hip__g.why);
    return hip__g.count;
}

const char *sw__hip_runtime_path(void)
{
    pthread_once(&hip__once, hip__load);
    return hip__g.path;
}

/* ------------------------------------------------------------------------
 * The built-in kernels: cuda.cu's entry points, launched as cuda.c does.
 * ---------------------------------------------------------------------- */

enum {
    HIP__K_GRID = 6 * 4, /* sw_kernel (FILL..SUM) x the four dtypes */
    HIP__K_SUM_FINAL_F64 = HIP__K_GRID,
    HIP__K_SUM_FINAL_I64,
    HIP__K_FILL_BYTES,
    HIP__K_COUNT,
};

/* cuda.cu's entry points for the four dtypes of contract version 1 (float32,
 * float64, int32, int64, in that order): FILL and COPY move bits (u32,
 * u64), integer arithmetic wraps (u32, u64), int64 sums as u64.  The
 * other dtypes cuda.cu has kernels for are not offered on HIP yet:
 * props.dtypes stays version 1's four. */
static const char *const hip__names[HIP__K_COUNT] = {
    "sw_fill_u32",  "sw_fill_u64",  "sw_fill_u32",  "sw_fill_u64",
    "sw_copy_u32",  "sw_copy_u64",  "sw_copy_u32",  "sw_copy_u64",
    "sw_add_f32",   "sw_add_f64",   "sw_add_u32",   "sw_add_u64",
    "sw_scale_f32", "sw_scale_f64", "sw_scale_u32", "sw_scale_u64",
    "sw_axpy_f32",  "sw_axpy_f64",  "sw_axpy_u32",  "sw_axpy_u64",
    "sw_sum_f32",   "sw_sum_f64",   "sw_sum_i32",   "sw_sum_u64",
    "sw_sum_final_f64", "sw_sum_final_i64", "sw_fill_bytes",
};

const char *const *sw__hip_kernel_names(size_t *count)
{
    if (count != NULL)
        *count = HIP__K_COUNT;
    return hip__names;
}

/* Kernel k's parameter sizes from the CUDA backend's table (by name), so
 * that a launch here is checked against the same declaration cuda.c's
 * are; NULL when the CUDA source has no such kernel. */
static const unsigned char *hip__params(int k, size_t *n)
{
    size_t count = 0;
    const char *const *names = sw__cuda_kernel_names(&count);
    for (size_t i = 0; i < count; i++)
        if (strcmp(names[i], hip__names[k]) == 0)
            return sw__cuda_kernel_params(i, n);
    *n = 0;
    return NULL;
}

/* ------------------------------------------------------------------------
 * Devices, queues and events
 * ---------------------------------------------------------------------- */

/* A free of the hipMalloc fallback, waiting for its stream's work; made
 * at allocation so that a free never needs host memory (cuda.c). */
typedef struct hip__pending {
    struct hip__pending *next;
    void *mem;
    swhip_event after;
} hip__pending;

struct sw__bevent {
    sw__bdev *dev;
    swhip_event ev;
    sw__bevent *next; /* in dev->ev_free */
};

struct sw__bqueue {
    sw__bdev *dev;
    swhip_stream stream;
    void *partials; /* HIP__SUM_BLOCKS partial sums, at the first sum */
    int partials_pooled;
    int foreign; /* the caller's stream (queue_wrap): never destroyed */
};

struct sw__bdev {
    _Atomic int refs; /* the open, live events, queues */
    int index;
    int cus;
    char arch[256]; /* gcnArchName; "" when the runtime cannot say */
    swhip_mempool pool; /* NULL: the hipMalloc fallback */
    sw__bqueue dq;

    /* Kernels (device lock). */
    swhip_module module;
    swhip_function fn[HIP__K_COUNT];
    unsigned char nparams[HIP__K_COUNT], params[HIP__K_COUNT][8];
    int kernels_failed;
    char kernels_why[768];

    /* The fallback's frees (device lock). */
    hip__pending *pending, *spare;
    size_t nspare, nlive;

    pthread_mutex_t ev_mu; /* leaf: the event free list */
    sw__bevent *ev_free;
};

static pthread_mutex_t hip__open_mu = PTHREAD_MUTEX_INITIALIZER;
static sw__bdev *hip__open[HIP__MAX_DEVICES];

/* The device current on this thread for the scope of a call. */
typedef struct hip__scope {
    int prev; /* -1: nothing to restore */
} hip__scope;

static int hip__enter(sw__bdev *d, hip__scope *s)
{
    s->prev = -1;
    int cur = -1;
    if (HIP(hipGetDevice)(&cur) == SWHIP_hipSuccess && cur == d->index)
        return SW_OK;
    swhip_error r = HIP(hipSetDevice)(d->index);
    if (r != SWHIP_hipSuccess)
        return hip__fail(d->index, r, "hipSetDevice", NULL);
    s->prev = cur;
    return SW_OK;
}

static void hip__leave(const hip__scope *s)
{
    if (s->prev >= 0)
        (void)HIP(hipSetDevice)(s->prev);
}

static void hip__ref(sw__bdev *d)
{
    atomic_fetch_add_explicit(&d->refs, 1, memory_order_relaxed);
}

static void hip__unref(sw__bdev *d)
{
    if (atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) != 1)
        return;
    hip__scope s;
    int entered = hip__enter(d, &s) == SW_OK;
    for (sw__bevent *e = d->ev_free, *next; e; e = next) {
        next = e->next;
        if (entered)
            (void)HIP(hipEventDestroy)(e->ev);
        sw__free(e);
    }
    if (entered)
        hip__leave(&s);
    pthread_mutex_destroy(&d->ev_mu);
    sw__free(d);
}

static int hip__event_new(sw__bdev *d, sw__bevent **out)
{
    pthread_mutex_lock(&d->ev_mu);
    sw__bevent *e = d->ev_free;
    if (e != NULL)
        d->ev_free = e->next;
    pthread_mutex_unlock(&d->ev_mu);
    if (e == NULL) {
        e = sw__malloc(sizeof *e);
        if (e == NULL)
            return sw__errorf(SW_ERR_HOST_OOM, "hip:%d: no host memory for "
                              "an event", d->index);
        swhip_error r = HIP(hipEventCreateWithFlags)(
            &e->ev, SWHIP_hipEventDisableTiming);
        if (r != SWHIP_hipSuccess) {
            sw__free(e);
            return hip__fail(d->index, r, "hipEventCreateWithFlags", NULL);
        }
        e->dev = d;
    }
    e->next = NULL;
    hip__ref(d);
    *out = e;
    return SW_OK;
}

static void hip__event_put(sw__bevent *e)
{
    sw__bdev *d = e->dev;
    pthread_mutex_lock(&d->ev_mu);
    e->next = d->ev_free;
    d->ev_free = e;
    pthread_mutex_unlock(&d->ev_mu);
    hip__unref(d);
}

/* Fallback frees whose stream work is done go back to the runtime.  The
 * device lock is held, the device current. */
static void hip__reap(sw__bdev *d)
{
    hip__pending **pp = &d->pending;
    while (*pp != NULL) {
        hip__pending *p = *pp;
        if (HIP(hipEventQuery)(p->after) == SWHIP_hipErrorNotReady) {
            pp = &p->next;
            continue;
        }
        (void)HIP(hipFree)(p->mem);
        *pp = p->next;
        p->next = d->spare;
        d->spare = p;
        d->nspare++;
    }
}

static void hip__reap_all(sw__bdev *d, int entered)
{
    while (entered && d->pending != NULL) {
        hip__pending *p = d->pending;
        d->pending = p->next;
        (void)HIP(hipEventSynchronize)(p->after);
        (void)HIP(hipFree)(p->mem);
        p->next = d->spare;
        d->spare = p;
    }
    for (hip__pending *p = d->spare, *next; p != NULL; p = next) {
        next = p->next;
        if (entered)
            (void)HIP(hipEventDestroy)(p->after);
        sw__free(p);
    }
    d->pending = d->spare = NULL;
    d->nspare = d->nlive = 0;
}

/* Before a hipMalloc of the fallback: a record ready for its free. */
static int hip__reserve(sw__bdev *d)
{
    if (d->nspare > d->nlive)
        return SW_OK;
    hip__pending *p = sw__malloc(sizeof *p);
    if (p == NULL)
        return sw__errorf(SW_ERR_HOST_OOM, "hip:%d: no host memory for the "
                          "record of a later free", d->index);
    swhip_error r = HIP(hipEventCreateWithFlags)(&p->after,
                                                 SWHIP_hipEventDisableTiming);
    if (r != SWHIP_hipSuccess) {
        sw__free(p);
        return hip__fail(d->index, r, "hipEventCreateWithFlags",
                         "a later free");
    }
    p->next = d->spare;
    d->spare = p;
    d->nspare++;
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * Operations: devices
 * ---------------------------------------------------------------------- */

static int hip_device_count(int *count, char *why, size_t why_len)
{
    *count = hip__devices(why, why_len);
    return SW_OK;
}

int sw__hip_device_count(int *count, char *why, size_t why_len)
{
    return hip_device_count(count, why, why_len);
}

/* The private pool, or NULL (the fallback) with why set.  The device is
 * current. */
static swhip_mempool hip__pool_create(sw__bdev *d, char *why, size_t len)
{
    const char *env = getenv("SPILLWAY_HIP_POOL");
    if (env != NULL && strcmp(env, "0") == 0) {
        snprintf(why, len, "SPILLWAY_HIP_POOL=0");
        return NULL;
    }
    if (HIP(hipMemPoolCreate) == NULL || HIP(hipMemPoolDestroy) == NULL ||
        HIP(hipMallocFromPoolAsync) == NULL || HIP(hipFreeAsync) == NULL ||
        HIP(hipMemPoolSetAttribute) == NULL) {
        snprintf(why, len, "the runtime has no memory pools");
        return NULL;
    }
    swhip_mempool_props props;
    memset(&props, 0, sizeof props);
    props.alloc_type = SWHIP_hipMemAllocationTypePinned;
    props.handle_types = SWHIP_hipMemHandleTypeNone;
    props.location.type = SWHIP_hipMemLocationTypeDevice;
    props.location.id = d->index;
    swhip_mempool pool = NULL;
    swhip_error r = HIP(hipMemPoolCreate)(&pool, &props);
    if (r != SWHIP_hipSuccess) {
        char nbuf[32];
        snprintf(why, len, "hipMemPoolCreate failed: %s",
                 hip__err_name(r, nbuf, sizeof nbuf));
        return NULL;
    }
    uint64_t zero = 0;
    (void)HIP(hipMemPoolSetAttribute)(pool,
                                      SWHIP_hipMemPoolAttrReleaseThreshold,
                                      &zero);
    return pool;
}

/* Name, architecture and compute units from the legacy properties. */
static void hip__describe(sw__bdev *d, char *name, size_t nlen)
{
    if (HIP(hipDeviceGetName)(name, (int)nlen, d->index) != SWHIP_hipSuccess)
        snprintf(name, nlen, "AMD GPU");
    if (HIP(hipGetDeviceProperties) == NULL)
        return;
    unsigned char *buf = sw__calloc(1, SWHIP_PROPS_BUFFER);
    if (buf == NULL)
        return;
    if (HIP(hipGetDeviceProperties)(buf, d->index) == SWHIP_hipSuccess) {
        memcpy(d->arch, buf + SWHIP_PROP_GCN_ARCH_NAME, sizeof d->arch - 1);
        d->arch[sizeof d->arch - 1] = '\0';
        memcpy(&d->cus, buf + SWHIP_PROP_MP_COUNT, sizeof d->cus);
        /* An architecture that does not look like one is not passed on. */
        if (strncmp(d->arch, "gfx", 3) != 0)
            d->arch[0] = '\0';
    }
    sw__free(buf);
}

static int hip_open(int index, sw__bdev **out, sw__device_props *props)
{
    char why[320];
    int n = hip__devices(why, sizeof why);
    if (index < 0 || index >= n)
        return n == 0 ? sw__errorf(SW_ERR_NO_DEVICE, "hip:%d: no HIP "
                                   "devices: %s", index, why)
                      : sw__errorf(SW_ERR_NO_DEVICE, "hip:%d: no such "
                                   "device (the runtime reports %d)", index,
                                   n);
    sw__bdev *d = sw__calloc(1, sizeof *d);
    if (d == NULL)
        return sw__errorf(SW_ERR_HOST_OOM, "hip:%d: out of host memory",
                          index);
    d->index = index;
    d->dq.dev = d;
    atomic_init(&d->refs, 1);
    pthread_mutex_init(&d->ev_mu, NULL);

    hip__scope s;
    int rc = hip__enter(d, &s);
    if (rc != SW_OK) {
        hip__unref(d);
        return rc;
    }
    char name[256];
    hip__describe(d, name, sizeof name);
    size_t total = 0;
    swhip_error r = HIP(hipDeviceTotalMem)(&total, index);
    if (r != SWHIP_hipSuccess)
        rc = hip__fail(index, r, "hipDeviceTotalMem", NULL);
    if (rc == SW_OK &&
        (r = HIP(hipStreamCreateWithFlags)(&d->dq.stream,
                                           SWHIP_hipStreamNonBlocking)) !=
            SWHIP_hipSuccess)
        rc = hip__fail(index, r, "hipStreamCreateWithFlags", NULL);
    if (rc != SW_OK) {
        hip__leave(&s);
        hip__unref(d);
        return rc;
    }
    char nopool[96] = "";
    d->pool = hip__pool_create(d, nopool, sizeof nopool);
    hip__leave(&s);

    pthread_mutex_lock(&hip__open_mu);
    hip__open[index] = d;
    pthread_mutex_unlock(&hip__open_mu);

    memset(props, 0, sizeof *props);
    int v = hip__g.version;
    char cus[32] = "";
    if (d->cus > 0)
        snprintf(cus, sizeof cus, ", %d CUs", d->cus);
    snprintf(props->description, sizeof props->description,
             "%.40s, %.30s%s, HIP %d.%d, %s%s%.60s%s", name,
             d->arch[0] ? d->arch : "unknown architecture", cus,
             v / 10000000, (v / 100000) % 100,
             d->pool ? "stream-ordered memory pool" : "hipMalloc",
             d->pool ? "" : " (", d->pool ? "" : nopool, d->pool ? "" : ")");
    props->total = total;
    props->host_addressable = 0;
    *out = d;
    return SW_OK;
}

static void hip__partials_free(sw__bqueue *q)
{
    if (q->partials == NULL)
        return;
    if (q->partials_pooled)
        (void)HIP(hipFreeAsync)(q->partials, q->stream);
    else
        (void)HIP(hipFree)(q->partials);
    q->partials = NULL;
}

static void hip_close(sw__bdev *d)
{
    if (d == NULL)
        return;
    pthread_mutex_lock(&hip__open_mu);
    if (hip__open[d->index] == d)
        hip__open[d->index] = NULL;
    pthread_mutex_unlock(&hip__open_mu);
    hip__scope s;
    if (hip__enter(d, &s) == SW_OK) {
        if (d->dq.partials_pooled)
            hip__partials_free(&d->dq);
        (void)HIP(hipStreamSynchronize)(d->dq.stream);
        hip__partials_free(&d->dq);
        hip__reap_all(d, 1);
        (void)HIP(hipStreamDestroy)(d->dq.stream);
        if (d->module != NULL)
            (void)HIP(hipModuleUnload)(d->module);
        if (d->pool != NULL)
            (void)HIP(hipMemPoolDestroy)(d->pool);
        hip__leave(&s);
    } else {
        hip__reap_all(d, 0);
    }
    d->module = NULL;
    d->pool = NULL;
    hip__unref(d);
}

/* ------------------------------------------------------------------------
 * Operations: memory
 * ---------------------------------------------------------------------- */

static int hip_alloc(sw__bdev *d, size_t size, uintptr_t *mem)
{
    hip__scope s;
    int rc = hip__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    void *p = NULL;
    swhip_error r;
    const char *call;
    if (d->pool != NULL) {
        call = "hipMallocFromPoolAsync";
        r = HIP(hipMallocFromPoolAsync)(&p, size, d->pool, d->dq.stream);
        if (r == SWHIP_hipErrorOutOfMemory && HIP(hipMemPoolTrimTo)) {
            (void)HIP(hipMemPoolTrimTo)(d->pool, 0);
            r = HIP(hipMallocFromPoolAsync)(&p, size, d->pool, d->dq.stream);
        }
    } else {
        call = "hipMalloc";
        hip__reap(d);
        if ((rc = hip__reserve(d)) != SW_OK) {
            hip__leave(&s);
            return rc;
        }
        r = HIP(hipMalloc)(&p, size);
        if (r == SWHIP_hipSuccess)
            d->nlive++;
    }
    hip__leave(&s);
    if (r != SWHIP_hipSuccess) {
        char detail[48];
        snprintf(detail, sizeof detail, "%zu bytes", size);
        return hip__fail(d->index, r, call, detail);
    }
    *mem = (uintptr_t)p;
    return SW_OK;
}

/* The fallback's free: hipFree once q's work so far is done. */
static int hip__defer_free(sw__bdev *d, sw__bqueue *q, void *mem)
{
    hip__pending *p = d->spare;
    assert(p != NULL && d->nspare >= d->nlive && d->nlive > 0);
    swhip_error r = HIP(hipEventRecord)(p->after, q->stream);
    if (r != SWHIP_hipSuccess)
        return hip__fail(d->index, r, "hipEventRecord", "deferred free");
    d->spare = p->next;
    d->nspare--;
    d->nlive--;
    p->mem = mem;
    p->next = d->pending;
    d->pending = p;
    return SW_OK;
}

static int hip_free(sw__bdev *d, sw__bqueue *q, uintptr_t mem, size_t size)
{
    if (q == NULL)
        q = &d->dq;
    hip__scope s;
    int rc = hip__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    if (d->pool != NULL) {
        swhip_error r = HIP(hipFreeAsync)((void *)mem, q->stream);
        if (r != SWHIP_hipSuccess) {
            char detail[64];
            snprintf(detail, sizeof detail, "0x%" PRIxPTR ", %zu bytes", mem,
                     size);
            rc = hip__fail(d->index, r, "hipFreeAsync", detail);
        }
    } else {
        rc = hip__defer_free(d, q, (void *)mem);
    }
    hip__leave(&s);
    return rc;
}

static int hip_mem_info(sw__bdev *d, uint64_t *free_bytes, uint64_t *total,
                        int *free_known)
{
    hip__scope s;
    int rc = hip__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    if (d->pool != NULL) {
        if (HIP(hipMemPoolTrimTo) != NULL)
            (void)HIP(hipMemPoolTrimTo)(d->pool, 0);
    } else {
        hip__reap(d);
    }
    size_t f = 0, t = 0;
    swhip_error r = HIP(hipMemGetInfo)(&f, &t);
    hip__leave(&s);
    if (r != SWHIP_hipSuccess)
        return hip__fail(d->index, r, "hipMemGetInfo", NULL);
    *free_bytes = f;
    *total = t;
    *free_known = 1;
    return SW_OK;
}

int sw__hip_pool_usage(int index, uint64_t *reserved, uint64_t *used)
{
    *reserved = *used = 0;
    if (index < 0 || index >= HIP__MAX_DEVICES)
        return sw__errorf(SW_ERR_INVALID_ARG, "hip:%d: no such device",
                          index);
    pthread_mutex_lock(&hip__open_mu);
    sw__bdev *d = hip__open[index];
    int rc = SW_OK;
    if (d == NULL || d->pool == NULL || HIP(hipMemPoolGetAttribute) == NULL) {
        rc = sw__errorf(SW_ERR_UNSUPPORTED, "hip:%d: %s", index,
                        d == NULL ? "not open" : "allocates without a pool");
    } else {
        hip__scope s;
        rc = hip__enter(d, &s);
        if (rc == SW_OK) {
            swhip_error r = HIP(hipMemPoolGetAttribute)(
                d->pool, SWHIP_hipMemPoolAttrReservedMemCurrent, reserved);
            if (r == SWHIP_hipSuccess)
                r = HIP(hipMemPoolGetAttribute)(
                    d->pool, SWHIP_hipMemPoolAttrUsedMemCurrent, used);
            if (r != SWHIP_hipSuccess)
                rc = hip__fail(index, r, "hipMemPoolGetAttribute", NULL);
            hip__leave(&s);
        }
    }
    pthread_mutex_unlock(&hip__open_mu);
    return rc;
}

/* ------------------------------------------------------------------------
 * Operations: queues
 * ---------------------------------------------------------------------- */

static sw__bqueue *hip_default_queue(sw__bdev *d) { return &d->dq; }

static int hip_queue_create(sw__bdev *d, sw__bqueue **out)
{
    sw__bqueue *q = sw__calloc(1, sizeof *q);
    if (q == NULL)
        return sw__errorf(SW_ERR_HOST_OOM, "hip:%d: no host memory for a "
                          "queue", d->index);
    q->dev = d;
    hip__scope s;
    int rc = hip__enter(d, &s);
    if (rc == SW_OK) {
        swhip_error r = HIP(hipStreamCreateWithFlags)(
            &q->stream, SWHIP_hipStreamNonBlocking);
        if (r != SWHIP_hipSuccess)
            rc = hip__fail(d->index, r, "hipStreamCreateWithFlags", NULL);
        hip__leave(&s);
    }
    if (rc != SW_OK) {
        sw__free(q);
        return rc;
    }
    hip__ref(d);
    *out = q;
    return SW_OK;
}

static void hip_queue_destroy(sw__bqueue *q)
{
    if (q == NULL || q == &q->dev->dq)
        return;
    sw__bdev *d = q->dev;
    hip__scope s;
    if (hip__enter(d, &s) == SW_OK) {
        if (q->partials_pooled)
            hip__partials_free(q);
        (void)HIP(hipStreamSynchronize)(q->stream);
        hip__partials_free(q);
        if (!q->foreign)
            (void)HIP(hipStreamDestroy)(q->stream);
        hip__leave(&s);
    }
    sw__free(q);
    hip__unref(d);
}

static int hip_queue_native(sw__bqueue *q, uintptr_t *handle)
{
    *handle = (uintptr_t)q->stream;
    return SW_OK;
}

/* The caller's stream, which must be one of this device
 * (hipStreamGetDevice, where the runtime has it).  The legacy and
 * per-thread default streams (hipStreamLegacy 0x1, hipStreamPerThread 0x2)
 * are refused, as 0 is, and so is spillway's own default stream (the core
 * refuses the others it handed out). */
static int hip_queue_wrap(sw__bdev *d, uintptr_t handle, sw__bqueue **out)
{
    if (handle == 0x1 || handle == 0x2)
        return sw__errorf(SW_ERR_INVALID_ARG, "hip:%d: %#jx is a default "
                          "stream, which spillway does not adopt: create a "
                          "stream", d->index, (uintmax_t)handle);
    if (handle == (uintptr_t)d->dq.stream)
        return sw__errorf(SW_ERR_INVALID_ARG, "hip:%d: %#jx is spillway's "
                          "own default queue's stream: use that queue "
                          "itself", d->index, (uintmax_t)handle);
    if (HIP(hipStreamGetDevice) != NULL) {
        swhip_device dev = -1;
        hip__scope s;
        int rc = hip__enter(d, &s);
        if (rc != SW_OK)
            return rc;
        swhip_error r = HIP(hipStreamGetDevice)((swhip_stream)handle, &dev);
        hip__leave(&s);
        if (r != SWHIP_hipSuccess)
            return sw__errorf(SW_ERR_INVALID_ARG, "hip:%d: %#jx is not a "
                              "live stream (hipStreamGetDevice: error %d)",
                              d->index, (uintmax_t)handle, (int)r);
        if (dev != d->index)
            return sw__errorf(SW_ERR_INVALID_ARG, "hip:%d: stream %#jx is "
                              "of device %d", d->index, (uintmax_t)handle,
                              (int)dev);
    }
    sw__bqueue *q = sw__calloc(1, sizeof *q);
    if (q == NULL)
        return sw__errorf(SW_ERR_HOST_OOM, "hip:%d: no host memory for a "
                          "queue", d->index);
    q->dev = d;
    q->stream = (swhip_stream)handle;
    q->foreign = 1;
    hip__ref(d);
    *out = q;
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * Operations: transfers and fills
 * ---------------------------------------------------------------------- */

static int hip__done(sw__bdev *d, swhip_error r, const char *call, size_t n)
{
    if (r == SWHIP_hipSuccess)
        return SW_OK;
    char detail[48];
    snprintf(detail, sizeof detail, "%zu bytes", n);
    return hip__fail(d->index, r, call, detail);
}

static int hip_write(sw__bqueue *q, uintptr_t dst, size_t dst_off,
                     const void *src, size_t n)
{
    sw__bdev *d = q->dev;
    hip__scope s;
    int rc = hip__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    /* hipMemcpyHtoDAsync takes a non-const source; it only reads it. */
    swhip_error r = HIP(hipMemcpyHtoDAsync)((void *)(dst + dst_off),
                                            (void *)(uintptr_t)src, n,
                                            q->stream);
    hip__leave(&s);
    return hip__done(d, r, "hipMemcpyHtoDAsync", n);
}

static int hip_read(sw__bqueue *q, void *dst, uintptr_t src, size_t src_off,
                    size_t n)
{
    sw__bdev *d = q->dev;
    hip__scope s;
    int rc = hip__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    swhip_error r = HIP(hipMemcpyDtoHAsync)(dst, (void *)(src + src_off), n,
                                            q->stream);
    hip__leave(&s);
    return hip__done(d, r, "hipMemcpyDtoHAsync", n);
}

static int hip_copy(sw__bqueue *q, uintptr_t dst, size_t dst_off,
                    uintptr_t src, size_t src_off, size_t n)
{
    sw__bdev *d = q->dev;
    hip__scope s;
    int rc = hip__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    swhip_error r = HIP(hipMemcpyDtoDAsync)((void *)(dst + dst_off),
                                            (void *)(src + src_off), n,
                                            q->stream);
    hip__leave(&s);
    return hip__done(d, r, "hipMemcpyDtoDAsync", n);
}

static int hip__kernels_ready(sw__bdev *d);

typedef struct hip__args {
    void *ptr[5]; /* cuda.cu's kernels take at most five */
    unsigned char size[5];
    unsigned char n;
} hip__args;

#define HIP__ARG(a, v)                                                        \
    ((a).ptr[(a).n] = (void *)&(v), (a).size[(a).n++] = sizeof(v))
#define HIP__ARGP(a, p, bytes)                                                \
    ((a).ptr[(a).n] = (p), (a).size[(a).n++] = (unsigned char)(bytes))

/* Launch kernel k on q with grid blocks of HIP__THREADS threads.  The
 * device is current. */
static int hip__run(sw__bqueue *q, int k, unsigned grid, const hip__args *a)
{
    sw__bdev *d = q->dev;
    int rc = hip__kernels_ready(d);
    if (rc != SW_OK)
        return rc;
    int ok = a->n == d->nparams[k];
    for (int i = 0; ok && i < a->n; i++)
        ok = a->size[i] == d->params[k][i];
    if (!ok)
        return sw__errorf(SW_ERR_INVALID_ARG, "hip:%d: internal error: %s "
                          "launched with arguments that do not match its "
                          "parameters", d->index, hip__names[k]);
    void *params[5];
    memcpy(params, a->ptr, sizeof params);
    swhip_error r = HIP(hipModuleLaunchKernel)(d->fn[k], grid, 1, 1,
                                               HIP__THREADS, 1, 1, 0,
                                               q->stream, params, NULL);
    if (r != SWHIP_hipSuccess)
        return hip__fail(d->index, r, "hipModuleLaunchKernel", hip__names[k]);
    return SW_OK;
}

static unsigned hip__grid(const sw__bdev *d, size_t n)
{
    size_t blocks = (n + HIP__THREADS - 1) / HIP__THREADS;
    size_t cap = d->cus > 0 ? (size_t)d->cus * 16 : 2048;
    return (unsigned)(blocks < cap ? blocks : cap);
}

static int hip__fill_bytes(sw__bqueue *q, void *p, size_t n,
                           const unsigned char *pattern, size_t psize)
{
    /* cuda.cu's (dst, n, lo, hi, psize): patterns of up to 16 bytes. */
    unsigned char pat[16] = {0};
    memcpy(pat, pattern, psize);
    unsigned long long lo = 0, hi = 0, count = n;
    memcpy(&lo, pat, 8);
    memcpy(&hi, pat + 8, 8);
    unsigned int ps = (unsigned int)psize;
    hip__args a = {.n = 0};
    HIP__ARG(a, p);
    HIP__ARG(a, count);
    HIP__ARG(a, lo);
    HIP__ARG(a, hi);
    HIP__ARG(a, ps);
    return hip__run(q, HIP__K_FILL_BYTES, hip__grid(q->dev, n), &a);
}

static int hip_fill(sw__bqueue *q, uintptr_t dst, size_t dst_off, size_t n,
                    const void *pattern, size_t pattern_size)
{
    sw__bdev *d = q->dev;
    const unsigned char *pat = pattern;
    void *p = (void *)(dst + dst_off);
    uintptr_t addr = dst + dst_off;
    int uniform = 1;
    for (size_t i = 1; i < pattern_size; i++)
        uniform &= pat[i] == pat[0];
    uint16_t v16 = 0;
    uint32_t v32 = 0, hi32 = 0;
    if (pattern_size == 2)
        memcpy(&v16, pat, 2);
    if (pattern_size >= 4)
        memcpy(&v32, pat, 4);
    if (pattern_size == 8)
        memcpy(&hi32, pat + 4, 4);

    hip__scope s;
    int rc = hip__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    swhip_error r = SWHIP_hipSuccess;
    const char *call = NULL;
    if (uniform) {
        call = "hipMemsetD8Async";
        r = HIP(hipMemsetD8Async)(p, pat[0], n, q->stream);
    } else if (pattern_size == 2 && addr % 2 == 0) {
        call = "hipMemsetD16Async";
        r = HIP(hipMemsetD16Async)(p, v16, n / 2, q->stream);
    } else if ((pattern_size == 4 || (pattern_size == 8 && v32 == hi32)) &&
               addr % 4 == 0) {
        call = "hipMemsetD32Async";
        r = HIP(hipMemsetD32Async)(p, (int)v32, n / 4, q->stream);
    } else if (pattern_size == 8 && addr % 8 == 0) {
        unsigned long long bits = 0, count = n / 8;
        memcpy(&bits, pat, 8);
        hip__args a = {.n = 0};
        HIP__ARG(a, p);
        HIP__ARG(a, bits);
        HIP__ARG(a, count);
        rc = hip__run(q, SW_KERNEL_FILL * 4 + SW_INT64, hip__grid(d, n / 8),
                      &a);
    } else {
        rc = hip__fill_bytes(q, p, n, pat, pattern_size);
    }
    hip__leave(&s);
    if (call != NULL)
        return hip__done(d, r, call, n);
    return rc;
}

/* ------------------------------------------------------------------------
 * Operations: kernels
 * ---------------------------------------------------------------------- */

static int hip__kernels_fail(sw__bdev *d, int code)
{
    d->kernels_failed = code;
    snprintf(d->kernels_why, sizeof d->kernels_why, "%s", sw_last_error());
    return code;
}

/* Compile (once per architecture per process) and load (once per device)
 * the built-in kernels.  The device lock is held, the device current. */
static int hip__kernels_ready(sw__bdev *d)
{
    if (d->module != NULL)
        return SW_OK;
    if (d->kernels_failed)
        return sw__errorf(d->kernels_failed, "%s", d->kernels_why);
    for (int k = 0; k < HIP__K_COUNT; k++) {
        size_t n = 0;
        const unsigned char *p = hip__params(k, &n);
        if (p == NULL || n > sizeof d->params[k]) {
            sw__errorf(SW_ERR_UNSUPPORTED, "hip:%d: the built-in kernels' "
                       "source (kernels/cuda.cu) has no %s", d->index,
                       hip__names[k]);
            return hip__kernels_fail(d, SW_ERR_UNSUPPORTED);
        }
        d->nparams[k] = (unsigned char)n;
        memcpy(d->params[k], p, n);
    }
    char why[512];
    if (sw__hip_rtc_load(why, sizeof why, NULL, NULL) != SW_OK) {
        sw__errorf(SW_ERR_UNSUPPORTED, "hip:%d: the built-in kernels need "
                   "hipRTC: %s", d->index, why);
        return hip__kernels_fail(d, SW_ERR_UNSUPPORTED);
    }
    const char *image = NULL;
    size_t size = 0;
    int rc = sw__hip_image_get(d->arch, &image, &size);
    if (rc != SW_OK) {
        if (rc == SW_ERR_HOST_OOM)
            return rc; /* transient: the next launch tries again */
        sw__errorf(rc, "hip:%d: %s", d->index, sw_last_error());
        return hip__kernels_fail(d, rc);
    }
    swhip_module mod = NULL;
    swhip_error r = HIP(hipModuleLoadData)(&mod, image);
    if (r != SWHIP_hipSuccess) {
        int code = hip__fail(d->index, r, "hipModuleLoadData",
                             d->arch[0] ? d->arch : "current device");
        if (code == SW_ERR_OOM)
            return code;
        return hip__kernels_fail(d, code == SW_ERR_NO_DEVICE ? SW_ERR_DEVICE
                                                             : code);
    }
    for (int k = 0; k < HIP__K_COUNT; k++) {
        r = HIP(hipModuleGetFunction)(&d->fn[k], mod, hip__names[k]);
        if (r != SWHIP_hipSuccess) {
            (void)HIP(hipModuleUnload)(mod);
            hip__fail(d->index, r, "hipModuleGetFunction", hip__names[k]);
            return hip__kernels_fail(d, SW_ERR_DEVICE);
        }
    }
    d->module = mod;
    return SW_OK;
}

/* Scratch for an overlapping COPY, freed again in stream order (pool) or
 * once q's work is done (fallback). */
static int hip__copy_overlapping(sw__bqueue *q, void *dst, void *src,
                                 size_t bytes)
{
    sw__bdev *d = q->dev;
    void *tmp = NULL;
    int rc = d->pool != NULL ? SW_OK : hip__reserve(d);
    if (rc != SW_OK)
        return rc;
    swhip_error r = d->pool != NULL
                        ? HIP(hipMallocFromPoolAsync)(&tmp, bytes, d->pool,
                                                      q->stream)
                        : HIP(hipMalloc)(&tmp, bytes);
    char detail[80];
    snprintf(detail, sizeof detail, "%zu bytes of scratch for an "
             "overlapping COPY", bytes);
    if (r != SWHIP_hipSuccess)
        return hip__fail(d->index, r, d->pool ? "hipMallocFromPoolAsync"
                                              : "hipMalloc", detail);
    if (d->pool == NULL)
        d->nlive++;
    r = HIP(hipMemcpyDtoDAsync)(tmp, src, bytes, q->stream);
    if (r == SWHIP_hipSuccess)
        r = HIP(hipMemcpyDtoDAsync)(dst, tmp, bytes, q->stream);
    rc = r == SWHIP_hipSuccess
             ? SW_OK
             : hip__fail(d->index, r, "hipMemcpyDtoDAsync", detail);
    if (d->pool != NULL) {
        (void)HIP(hipFreeAsync)(tmp, q->stream);
    } else if (hip__defer_free(d, q, tmp) != SW_OK) {
        (void)HIP(hipStreamSynchronize)(q->stream);
        (void)HIP(hipFree)(tmp);
        d->nlive--;
    }
    return rc;
}

static int hip__partials(sw__bqueue *q)
{
    if (q->partials != NULL)
        return SW_OK;
    sw__bdev *d = q->dev;
    size_t bytes = HIP__SUM_BLOCKS * 8;
    swhip_error r;
    if (d->pool != NULL) {
        r = HIP(hipMallocFromPoolAsync)(&q->partials, bytes, d->pool,
                                        q->stream);
        q->partials_pooled = 1;
    } else {
        r = HIP(hipMalloc)(&q->partials, bytes);
        q->partials_pooled = 0;
    }
    if (r != SWHIP_hipSuccess) {
        q->partials = NULL;
        return hip__fail(d->index, r, d->pool ? "hipMallocFromPoolAsync"
                                              : "hipMalloc", "partial sums");
    }
    return SW_OK;
}

static int hip__launch(sw__bqueue *q, const sw_kernel_args *a, size_t es)
{
    sw__bdev *d = q->dev;
    uintptr_t o = a->out.base + a->out.offset;
    uintptr_t x = a->a.base + a->a.offset;
    void *out = (void *)o;
    void *pa = (void *)x;
    void *pb = (void *)(a->b.base + a->b.offset);
    unsigned long long n = a->n;
    int k = (int)a->kernel * 4 + (int)a->dtype;
    unsigned grid = hip__grid(d, a->n);
    size_t bytes = a->n * es;

    float af = (float)a->alpha.f;
    double ad = a->alpha.f;
    uint32_t ai32 = (uint32_t)(uint64_t)a->alpha.i;
    uint64_t ai64 = (uint64_t)a->alpha.i;
    void *alpha = a->dtype == SW_FLOAT32   ? (void *)&af
                  : a->dtype == SW_FLOAT64 ? (void *)&ad
                  : a->dtype == SW_INT32   ? (void *)&ai32
                                           : (void *)&ai64;
    hip__args args = {.n = 0};

    switch (a->kernel) {
    case SW_KERNEL_FILL:
        if (o % es != 0) {
            unsigned char pat[8];
            memcpy(pat, alpha, es);
            return hip__fill_bytes(q, out, bytes, pat, es);
        }
        HIP__ARG(args, out);
        HIP__ARGP(args, alpha, es);
        HIP__ARG(args, n);
        return hip__run(q, k, grid, &args);
    case SW_KERNEL_COPY:
        if (o == x)
            return SW_OK;
        if (o < x + bytes && x < o + bytes)
            return hip__copy_overlapping(q, out, pa, bytes);
        if (o % es != 0 || x % es != 0)
            return hip__done(d, HIP(hipMemcpyDtoDAsync)(out, pa, bytes,
                                                        q->stream),
                             "hipMemcpyDtoDAsync", bytes);
        HIP__ARG(args, out);
        HIP__ARG(args, pa);
        HIP__ARG(args, n);
        return hip__run(q, k, grid, &args);
    case SW_KERNEL_ADD:
        HIP__ARG(args, out);
        HIP__ARG(args, pa);
        HIP__ARG(args, pb);
        HIP__ARG(args, n);
        return hip__run(q, k, grid, &args);
    case SW_KERNEL_SCALE:
    case SW_KERNEL_AXPY:
        HIP__ARG(args, out);
        HIP__ARG(args, pa);
        HIP__ARGP(args, alpha, es);
        HIP__ARG(args, n);
        return hip__run(q, k, grid, &args);
    case SW_KERNEL_SUM: {
        int rc = hip__partials(q);
        if (rc != SW_OK)
            return rc;
        size_t blocks = (a->n + HIP__THREADS - 1) / HIP__THREADS;
        unsigned g = (unsigned)(blocks < HIP__SUM_BLOCKS ? blocks
                                                         : HIP__SUM_BLOCKS);
        void *partials = q->partials;
        HIP__ARG(args, pa);
        HIP__ARG(args, n);
        HIP__ARG(args, partials);
        rc = hip__run(q, k, g, &args);
        if (rc != SW_OK)
            return rc;
        unsigned int count = g;
        hip__args fin = {.n = 0};
        HIP__ARG(fin, partials);
        HIP__ARG(fin, count);
        HIP__ARG(fin, out);
        return hip__run(q,
                        a->dtype == SW_FLOAT32 || a->dtype == SW_FLOAT64
                            ? HIP__K_SUM_FINAL_F64
                            : HIP__K_SUM_FINAL_I64,
                        1, &fin);
    }
    }
    return sw__errorf(SW_ERR_INVALID_ARG, "hip:%d: unknown kernel %d",
                      d->index, (int)a->kernel);
}

/* As cuda_launch: the core has checked the kernel, the dtype (one of the
 * four), the count and the typed operands' alignment. */
static int hip_launch(sw__bqueue *q, const sw_kernel_args *args)
{
    sw__bdev *d = q->dev;
    assert((unsigned)args->dtype <= SW_INT64);
    size_t es = sw_dtype_size(args->dtype);
    hip__scope s;
    int rc = hip__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    rc = hip__launch(q, args, es);
    hip__leave(&s);
    return rc;
}

/* ------------------------------------------------------------------------
 * Operations: events and waiting
 * ---------------------------------------------------------------------- */

static int hip_event_record(sw__bqueue *q, sw__bevent **out)
{
    sw__bdev *d = q->dev;
    hip__scope s;
    int rc = hip__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    sw__bevent *e = NULL;
    rc = hip__event_new(d, &e);
    if (rc == SW_OK) {
        swhip_error r = HIP(hipEventRecord)(e->ev, q->stream);
        if (r != SWHIP_hipSuccess) {
            hip__event_put(e);
            rc = hip__fail(d->index, r, "hipEventRecord", NULL);
        } else {
            *out = e;
        }
    }
    hip__leave(&s);
    return rc;
}

static int hip_event_query(sw__bevent *e, int *done)
{
    sw__bdev *d = e->dev;
    hip__scope s;
    int rc = hip__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    swhip_error r = HIP(hipEventQuery)(e->ev);
    hip__leave(&s);
    if (r == SWHIP_hipSuccess || r == SWHIP_hipErrorNotReady) {
        *done = r == SWHIP_hipSuccess;
        return SW_OK;
    }
    return hip__fail(d->index, r, "hipEventQuery", NULL);
}

static int hip_event_wait(sw__bevent *e)
{
    sw__bdev *d = e->dev;
    hip__scope s;
    int rc = hip__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    swhip_error r = HIP(hipEventSynchronize)(e->ev);
    hip__leave(&s);
    return r == SWHIP_hipSuccess
               ? SW_OK
               : hip__fail(d->index, r, "hipEventSynchronize", NULL);
}

static void hip_event_release(sw__bevent *e)
{
    if (e != NULL)
        hip__event_put(e);
}

static int hip_synchronize(sw__bqueue *q)
{
    sw__bdev *d = q->dev;
    hip__scope s;
    int rc = hip__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    swhip_error r = HIP(hipStreamSynchronize)(q->stream);
    hip__leave(&s);
    return r == SWHIP_hipSuccess
               ? SW_OK
               : hip__fail(d->index, r, "hipStreamSynchronize", NULL);
}

/* Device-side: never blocks the caller; the wait is on the event as
 * recorded now (HIP, like CUDA, captures it at the call). */
static int hip_wait_event(sw__bqueue *q, sw__bevent *e)
{
    sw__bdev *d = q->dev;
    hip__scope s;
    int rc = hip__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    swhip_error r = HIP(hipStreamWaitEvent)(q->stream, e->ev, 0);
    hip__leave(&s);
    return r == SWHIP_hipSuccess
               ? SW_OK
               : hip__fail(d->index, r, "hipStreamWaitEvent", NULL);
}

/* ------------------------------------------------------------------------
 * The ops table
 * ---------------------------------------------------------------------- */

const sw__backend_ops sw__hip_backend = {
    .version = SW__BACKEND_VERSION,
    .name = "hip",
    .device_count = hip_device_count,
    .open = hip_open,
    .close = hip_close,
    .alloc = hip_alloc,
    .free = hip_free,
    .mem_info = hip_mem_info,
    .default_queue = hip_default_queue,
    .queue_create = hip_queue_create,
    .queue_destroy = hip_queue_destroy,
    .write = hip_write,
    .read = hip_read,
    .copy = hip_copy,
    .fill = hip_fill,
    .launch = hip_launch,
    .event_record = hip_event_record,
    .event_query = hip_event_query,
    .event_wait = hip_event_wait,
    .event_release = hip_event_release,
    .synchronize = hip_synchronize,
    .wait_event = hip_wait_event,
    .queue_native = hip_queue_native,
    .queue_wrap = hip_queue_wrap,
};
