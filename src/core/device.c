/*
 * device.c -- the device registry: backends, specs, open/close, the device
 * lock and handle validation.
 */
#include "core/internal.h"
#include "core/trypin.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* ------------------------------------------------------------------------
 * Backends and the registry
 * ---------------------------------------------------------------------- */

static const sw__backend_ops *const builtin[] = {
    &sw__sim_backend,
#ifdef SW_HAVE_OPENCL
    &sw__opencl_backend,
#endif
    &sw__cuda_backend,
    &sw__hip_backend,
    &sw__ze_backend,
    &sw__host_backend,
};
#define NBUILTIN (sizeof builtin / sizeof builtin[0])
/* The library's own backends, then those registered at run time
 * (sw_backend_register, SPILLWAY_BACKENDS): append-only, each pointer
 * written before the count that publishes it, so that readers need no
 * lock. */
#define MAX_BACKENDS 16
#define MAX_DEVICES 64 /* per backend */
static const sw__backend_ops *backends[MAX_BACKENDS];
static _Atomic size_t nbackends;

/* SPILLWAY_BACKENDS entries that could not be registered: listed by
 * sw_backend_info with the reason. */
#define MAX_FAILED 8
static struct {
    char name[64];
    char why[320];
} failed[MAX_FAILED];
static size_t nfailed;

/* Device structs live in one static array and are never freed, so a
 * device handle stays valid (and detectably closed) for the life of the
 * process, and any pointer can be checked by address before anything is
 * read through it.  A slot is set up at its device's first open.  The
 * registry lock covers open/close, registration and first-time setup; it
 * is never taken while a device lock is held. */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static sw_device registry[MAX_BACKENDS][MAX_DEVICES];

static void backends_init(void);
static pthread_once_t backends_once = PTHREAD_ONCE_INIT;

/* How many backends there are (the first call loads SPILLWAY_BACKENDS). */
static size_t backend_n(void)
{
    pthread_once(&backends_once, backends_init);
    return atomic_load_explicit(&nbackends, memory_order_acquire);
}

sw_device *sw__device_at(size_t i)
{
    return i < MAX_BACKENDS * MAX_DEVICES ? &registry[0][0] + i : NULL;
}

bool sw__device_valid(const sw_device *dev)
{
    uintptr_t p = (uintptr_t)dev, lo = (uintptr_t)&registry[0][0];
    if (p < lo || p - lo >= sizeof registry ||
        (p - lo) % sizeof registry[0][0] != 0)
        return false;
    return atomic_load_explicit(&dev->magic, memory_order_acquire) ==
           SW__DEVICE_MAGIC;
}

/* ------------------------------------------------------------------------
 * The device lock
 * ---------------------------------------------------------------------- */

_Thread_local sw_device *sw__tl_dev;

void sw__lock(sw_device *dev)
{
    pthread_mutex_lock(&dev->lock);
    atomic_store_explicit(&dev->owner, pthread_self(), memory_order_relaxed);
    atomic_store_explicit(&dev->owned, 1, memory_order_relaxed);
    sw__tl_dev = dev;
}

bool sw__trylock(sw_device *dev)
{
    if (pthread_mutex_trylock(&dev->lock) != 0)
        return false;
    atomic_store_explicit(&dev->owner, pthread_self(), memory_order_relaxed);
    atomic_store_explicit(&dev->owned, 1, memory_order_relaxed);
    sw__tl_dev = dev;
    return true;
}

void sw__unlock(sw_device *dev)
{
    sw__tl_dev = NULL;
    atomic_store_explicit(&dev->owned, 0, memory_order_relaxed);
    pthread_mutex_unlock(&dev->lock);
}

bool sw__held(sw_device *dev)
{
    return atomic_load_explicit(&dev->owned, memory_order_relaxed) &&
           pthread_equal(atomic_load_explicit(&dev->owner,
                                              memory_order_relaxed),
                         pthread_self());
}

int sw__device_enter(sw_device *dev)
{
    if (dev == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "device is NULL");
    if (!sw__device_valid(dev))
        return sw__errorf(SW_ERR_INVALID_HANDLE,
                          "%p is not a spillway device handle", (void *)dev);
    sw__lock(dev);
    if (dev->b == NULL) {
        sw__unlock(dev);
        return sw__errorf(SW_ERR_INVALID_HANDLE,
                          "device %s is closed (every sw_device_open was "
                          "matched by a close)", dev->name);
    }
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * Listing
 * ---------------------------------------------------------------------- */

/* Count a backend's devices; a backend that reports an error (for example
 * a malformed SPILLWAY_SIM_DEVICES) counts as having none here, and open
 * reports the error. */
static int backend_count(const sw__backend_ops *ops)
{
    int n = 0;
    char why[256] = "";
    if (sw__b_device_count(ops, &n, why, sizeof why) != SW_OK)
        return 0;
    return n > MAX_DEVICES ? MAX_DEVICES : n;
}

SW_API size_t sw_backend_count(void)
{
    size_t n = backend_n();
    return n + nfailed;
}

SW_API int sw_backend_info(size_t i, const char **name, int *devices,
                           char *why, size_t why_len)
{
    if (name != NULL)
        *name = NULL;
    if (devices != NULL)
        *devices = 0;
    if (why != NULL && why_len > 0)
        why[0] = '\0';
    size_t n = backend_n();
    if (i >= n && i - n < nfailed) {
        /* A SPILLWAY_BACKENDS entry that did not load. */
        if (name != NULL)
            *name = failed[i - n].name;
        if (why != NULL && why_len > 0)
            snprintf(why, why_len, "%s", failed[i - n].why);
        return sw__errorf(SW_ERR_INVALID_ARG, "SPILLWAY_BACKENDS: %s",
                          failed[i - n].why);
    }
    if (i >= n)
        return sw__errorf(SW_ERR_INVALID_ARG, "backend %zu: this process "
                          "has %zu", i, n + nfailed);
    char buf[256] = "";
    int count = 0;
    int rc = sw__b_device_count(backends[i], &count, buf, sizeof buf);
    if (name != NULL)
        *name = backends[i]->name;
    if (rc != SW_OK)
        return rc;
    if (devices != NULL)
        *devices = count > MAX_DEVICES ? MAX_DEVICES : count;
    if (why != NULL && why_len > 0 && count == 0)
        snprintf(why, why_len, "%s", buf);
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * Registering backends (spillway/backend.h)
 * ---------------------------------------------------------------------- */

/* Under the registry lock. */
static int register_locked(const sw__backend_ops *ops)
{
    int rc = sw__b_check_table(ops);
    if (rc != SW_OK)
        return rc;
    size_t n = atomic_load_explicit(&nbackends, memory_order_relaxed);
    for (size_t i = 0; i < n; i++)
        if (strcmp(sw__b_name(backends[i]), sw__b_name(ops)) == 0)
            return sw__errorf(SW_ERR_INVALID_ARG, "a backend named '%s' is "
                              "registered already", sw__b_name(ops));
    if (n == MAX_BACKENDS)
        return sw__errorf(SW_ERR_BUSY, "backend '%s': this process has %d "
                          "backends, the most it can", sw__b_name(ops),
                          MAX_BACKENDS);
    backends[n] = ops;
    atomic_store_explicit(&nbackends, n + 1, memory_order_release);
    return SW_OK;
}

/* dlopen a backend's shared object and register its table. */
static int load_locked(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        return sw__errorf(SW_ERR_INVALID_ARG, "%s does not load: %s", path,
                          e ? e : "dlopen failed");
    }
    void *sym = dlsym(h, SW_BACKEND_ENTRY);
    if (sym == NULL) {
        dlclose(h);
        return sw__errorf(SW_ERR_INVALID_ARG, "%s exports no %s: not a "
                          "spillway backend (spillway/backend.h)", path,
                          SW_BACKEND_ENTRY);
    }
    static const sw_backend_host host = {
        .version = SW_BACKEND_VERSION,
        .errorf = sw_backend_errorf,
        .malloc = sw_backend_malloc,
        .calloc = sw_backend_calloc,
        .realloc = sw_backend_realloc,
        .free = sw_backend_free,
        .parse_size = sw_parse_size,
        .format_bytes = sw_format_bytes,
        .dtype_size = sw_dtype_size,
        .dtype_name = sw_dtype_name,
        .kernel_name = sw_kernel_name,
    };
    sw_backend_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry);
    const sw__backend_ops *ops = entry(&host);
    int rc = register_locked(ops);
    if (rc != SW_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", sw_last_error());
        dlclose(h);
        return sw__errorf(rc, "%s: %s", path, why);
    }
    return SW_OK; /* kept loaded for the life of the process */
}

/* Once: the library's backends, then SPILLWAY_BACKENDS'. */
static void backends_init(void)
{
    for (size_t i = 0; i < NBUILTIN; i++)
        backends[i] = builtin[i];
    atomic_store_explicit(&nbackends, NBUILTIN, memory_order_release);
    const char *env = getenv("SPILLWAY_BACKENDS");
    if (env == NULL || env[0] == '\0')
        return;
    char list[4096];
    snprintf(list, sizeof list, "%s", env);
    pthread_mutex_lock(&registry_lock);
    for (char *save = NULL, *p = strtok_r(list, ":", &save); p != NULL;
         p = strtok_r(NULL, ":", &save)) {
        if (load_locked(p) == SW_OK || nfailed == MAX_FAILED)
            continue;
        const char *base = strrchr(p, '/');
        snprintf(failed[nfailed].name, sizeof failed[nfailed].name, "%s",
                 base ? base + 1 : p);
        snprintf(failed[nfailed].why, sizeof failed[nfailed].why, "%s",
                 sw_last_error());
        nfailed++;
    }
    pthread_mutex_unlock(&registry_lock);
}

SW_API int sw_backend_register(const sw_backend_ops *ops)
{
    (void)backend_n();
    pthread_mutex_lock(&registry_lock);
    int rc = register_locked(ops);
    pthread_mutex_unlock(&registry_lock);
    return rc;
}

SW_API int sw_backend_load(const char *path)
{
    if (path == NULL || path[0] == '\0')
        return sw__errorf(SW_ERR_INVALID_ARG, "path is NULL or empty");
    (void)backend_n();
    pthread_mutex_lock(&registry_lock);
    int rc = load_locked(path);
    pthread_mutex_unlock(&registry_lock);
    return rc;
}

SW_API int sw_device_count(size_t *count)
{
    if (count == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "count is NULL");
    size_t total = 0;
    size_t n = backend_n();
    for (size_t i = 0; i < n; i++)
        total += (size_t)backend_count(backends[i]);
    *count = total;
    return SW_OK;
}

SW_API int sw_device_spec_at(size_t index, char *buf, size_t len)
{
    if (buf == NULL || len == 0)
        return sw__errorf(SW_ERR_INVALID_ARG, "buf is NULL or empty");
    buf[0] = '\0';
    size_t seen = 0, nb = backend_n();
    for (size_t i = 0; i < nb; i++) {
        size_t n = (size_t)backend_count(backends[i]);
        if (index < seen + n) {
            int w = snprintf(buf, len, "%s:%zu", backends[i]->name,
                             index - seen);
            if (w < 0 || (size_t)w >= len) {
                buf[0] = '\0';
                return sw__errorf(SW_ERR_INVALID_ARG,
                                  "buffer of %zu bytes is too small", len);
            }
            return SW_OK;
        }
        seen += n;
    }
    return sw__errorf(SW_ERR_NO_DEVICE, "device index %zu: there are %zu "
                      "devices", index, seen);
}

/* ------------------------------------------------------------------------
 * Open and close
 * ---------------------------------------------------------------------- */

/* "name:index" (index decimal, no sign) or a bare "name" for index 0. */
static int parse_spec(const char *spec, size_t *backend, int *index)
{
    const char *colon = strchr(spec, ':');
    size_t nlen = colon ? (size_t)(colon - spec) : strlen(spec);
    int idx = 0;
    if (colon != NULL) {
        const char *p = colon + 1;
        if (*p == '\0')
            return sw__errorf(SW_ERR_INVALID_ARG, "malformed device spec "
                              "'%s': expected NAME:INDEX, e.g. sim:0", spec);
        long v = 0;
        for (; *p; p++) {
            if (*p < '0' || *p > '9')
                return sw__errorf(SW_ERR_INVALID_ARG, "malformed device "
                                  "spec '%s': the index must be a decimal "
                                  "number, e.g. sim:0", spec);
            v = v * 10 + (*p - '0');
            if (v > 1000000)
                break;
        }
        idx = v >= MAX_DEVICES ? MAX_DEVICES : (int)v;
    }
    size_t nb = backend_n();
    for (size_t i = 0; i < nb; i++) {
        if (strlen(backends[i]->name) == nlen &&
            strncmp(backends[i]->name, spec, nlen) == 0) {
            *backend = i;
            *index = idx;
            return SW_OK;
        }
    }
    int rc = sw__errorf(SW_ERR_NO_DEVICE, "no backend named '%.*s' in "
                        "device spec '%s' (this process has:", (int)nlen,
                        spec, spec);
    for (size_t i = 0; i < nb; i++)
        sw__error_append(" %s", backends[i]->name);
    sw__error_append(")");
    for (size_t i = 0; i < nfailed; i++)
        sw__error_append("; SPILLWAY_BACKENDS: %s", failed[i].why);
    return rc;
}

/* A new opening's state: everything from `b` on (internal.h), zeroed
 * whole.  Closing gave back what the last opening held. */
/* An on/off environment variable: 1/0, on/off, yes/no, true/false. */
static int parse_switch(const char *name, const char *v, bool *on)
{
    static const char *const yes[] = {"1", "on", "yes", "true"};
    static const char *const no[] = {"0", "off", "no", "false"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
        if (strcasecmp(v, yes[i]) == 0) {
            *on = true;
            return SW_OK;
        }
        if (strcasecmp(v, no[i]) == 0) {
            *on = false;
            return SW_OK;
        }
    }
    return sw__errorf(SW_ERR_INVALID_ARG, "%s='%.60s' is neither on nor "
                      "off (expected 1 or 0)", name, v);
}

static void reset_state(sw_device *dev)
{
    char *first = (char *)&dev->b;
    memset(first, 0, (size_t)((char *)(dev + 1) - first));
    sw__cache_init(&dev->cache);
}

/* SPILLWAY_HOST_BUDGET: a size ("8G", bytes) or a fraction of the
 * machine's memory ("0.25"; at least a byte, never "no budget": size.c). */
static int parse_host_budget(const char *s, uint64_t *out)
{
    char *end = NULL;
    if (strchr(s, '.') != NULL && strpbrk(s, "KMGTPkmgtpBb") == NULL) {
        double f = strtod(s, &end);
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (end != s && *end == '\0' && f > 0 && f <= 1 && pages > 0 &&
            page > 0) {
            uint64_t b = (uint64_t)(f * (double)pages * (double)page);
            *out = b != 0 ? b : 1;
            return SW_OK;
        }
    } else if (sw_parse_size(s, out) == SW_OK) {
        return SW_OK;
    }
    return sw__errorf(SW_ERR_INVALID_ARG, "SPILLWAY_HOST_BUDGET='%.60s' is "
                      "neither a size (bytes with an optional unit, e.g. 8G) "
                      "nor a fraction of the machine's memory (e.g. 0.25)",
                      s);
}

/* Under the registry lock. */
static int open_registered(const char *spec, size_t bi, int index,
                       sw_device **out)
{
    const sw__backend_ops *ops = backends[bi];
    assert(sw__b_usable(ops));
    char why[256] = "";
    int n = 0;
    int rc = sw__b_device_count(ops, &n, why, sizeof why);
    if (rc != SW_OK)
        return rc;
    if (index >= n || index >= MAX_DEVICES) {
        const char *kind = sw__b_name(ops);
        if (n == 0)
            return sw__errorf(SW_ERR_NO_DEVICE, "%s: no %s devices%s%s",
                              spec, kind, why[0] ? ": " : "", why);
        return sw__errorf(SW_ERR_NO_DEVICE, "%s: %s has %d device%s "
                          "(%s:0..%s:%d)", spec, kind, n,
                          n == 1 ? "" : "s", kind, kind, n - 1);
    }
    sw_device *dev = &registry[bi][index];
    if (atomic_load_explicit(&dev->magic, memory_order_relaxed) !=
        SW__DEVICE_MAGIC) {
        /* Adaptive: a waiter spins briefly before it sleeps.  Held for
         * a few hundred nanoseconds at a time, the lock is usually free
         * again before a futex sleep and wake would end; two free-threaded
         * Python threads allocating small arrays spent a quarter of their
         * time in futex calls with a plain mutex (bench_threads.py). */
        pthread_mutexattr_t ma;
        pthread_mutexattr_init(&ma);
        pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
        pthread_mutex_init(&dev->lock, &ma);
        pthread_mutexattr_destroy(&ma);
        pthread_cond_init(&dev->moved, NULL);
        dev->ops = ops;
        dev->index = index;
        snprintf(dev->name, sizeof dev->name, "%s:%d", sw__b_name(ops), index);
        atomic_store_explicit(&dev->magic, SW__DEVICE_MAGIC,
                              memory_order_release);
    }
    if (dev->refs > 0) {
        /* Under the device lock too: the last close reads refs under it
         * alone (sw_device_close, before it takes the registry lock). */
        sw__lock(dev);
        dev->refs++;
        sw__unlock(dev);
        *out = dev;
        return SW_OK;
    }
    /* The host staging pool's bound (hostpool.c), read at open. */
    uint64_t host_pool_limit = SW__HOST_POOL_DEFAULT;
    const char *hp = getenv("SPILLWAY_HOST_POOL");
    if (hp != NULL && hp[0] != '\0' &&
        sw_parse_size(hp, &host_pool_limit) != SW_OK)
        return sw__errorf(SW_ERR_INVALID_ARG, "SPILLWAY_HOST_POOL='%.60s' "
                          "is not a size (expected bytes with an optional "
                          "unit, e.g. 2G or 512M)", hp);
    /* The host budget (disk.c): bytes, a size, or a fraction of the
     * machine's memory ("0.25"). */
    uint64_t host_budget = 0;
    const char *hb = getenv("SPILLWAY_HOST_BUDGET");
    if (hb != NULL && hb[0] != '\0' &&
        (rc = parse_host_budget(hb, &host_budget)) != SW_OK)
        return rc;
    /* New memory cleared (sw_set_clear_new), read at open. */
    bool clear_new = false;
    const char *cn = getenv("SPILLWAY_CLEAR_NEW");
    if (cn != NULL && cn[0] != '\0' &&
        (rc = parse_switch("SPILLWAY_CLEAR_NEW", cn, &clear_new)) != SW_OK)
        return rc;
    sw__bdev *b = NULL;
    sw__device_props props;
    memset(&props, 0, sizeof props);
    rc = sw__b_open(ops, index, &b, &props);
    if (rc != SW_OK)
        return rc;
    if (props.max_alloc == 0)
        props.max_alloc = props.total;
    if (props.dtypes == 0) /* a version-1 backend: the first four */
        props.dtypes = (1u << SW_FLOAT32) | (1u << SW_FLOAT64) |
                       (1u << SW_INT32) | (1u << SW_INT64);
    sw__lock(dev);
    reset_state(dev);
    dev->props = props;
    dev->b = b;
    dev->q = sw__b_default_queue(dev);
    dev->copyq = sw__b_copy_queue(dev);
    dev->hpool.limit = host_pool_limit;
    dev->host_budget = host_budget;
    dev->clear_new = clear_new;
    dev->refs = 1;
    sw__unlock(dev);
    *out = dev;
    return SW_OK;
}

SW_API int sw_device_open(const char *spec, sw_device **out)
{
    if (out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (spec == NULL || spec[0] == '\0') {
        spec = getenv("SPILLWAY_DEVICE");
        if (spec == NULL || spec[0] == '\0')
            spec = "sim:0";
    }
    size_t bi = 0;
    int index = 0;
    int rc = parse_spec(spec, &bi, &index);
    if (rc != SW_OK)
        return rc;
    pthread_mutex_lock(&registry_lock);
    rc = open_registered(spec, bi, index, out);
    pthread_mutex_unlock(&registry_lock);
    if (rc == SW_OK)
        sw__export_start();
    return rc;
}

SW_API int sw_device_close(sw_device *dev)
{
    if (dev == NULL)
        return SW_OK;
    if (!sw__device_valid(dev))
        return sw__errorf(SW_ERR_INVALID_HANDLE,
                          "%p is not a spillway device handle", (void *)dev);
    /* The last close waits for the prefetch thread's reads of this
     * device (disk.c) first, without the registry lock: the restore that
     * ends one may run pressure callbacks, which may do anything. */
    if (sw__device_enter(dev) == SW_OK) {
        if (dev->refs <= 1)
            sw__disk_wait_reads_locked(dev);
        sw__unlock(dev);
    }
    pthread_mutex_lock(&registry_lock);
    int rc = sw__device_enter(dev);
    if (rc != SW_OK) {
        pthread_mutex_unlock(&registry_lock);
        return rc;
    }
    if (dev->refs > 1) {
        dev->refs--;
        sw__unlock(dev);
        pthread_mutex_unlock(&registry_lock);
        return SW_OK;
    }
    /* Dead queues still running work are waited for here. */
    sw__reap_queues_locked(dev, true);
    if (dev->parked != NULL && dev->live_queues == 0) {
        /* Only the default queue is left, and every dead queue's work
         * has completed: parked memory is safe. */
        sw__unpark_locked(dev, true);
    }
    if (dev->waiting > 0 || dev->bg_reads > 0) {
        unsigned n = dev->waiting + dev->bg_reads;
        rc = sw__errorf(SW_ERR_BUSY, "%s: cannot close the device: %u "
                        "call%s on other threads are waiting for it",
                        dev->name, n, n == 1 ? "" : "s");
        sw__unlock(dev);
        pthread_mutex_unlock(&registry_lock);
        return rc;
    }
    if (dev->live_count > 0 || dev->scope_first != NULL ||
        dev->live_queues > 0) {
        size_t scopes = 0;
        for (sw__scope *s = dev->scope_first; s; s = s->next)
            scopes++;
        rc = sw__errorf(SW_ERR_BUSY, "%s: cannot close the device: %zu "
                        "buffer%s, %zu queue%s and %zu peak scope%s still "
                        "live", dev->name, dev->live_count,
                        dev->live_count == 1 ? "" : "s", dev->live_queues,
                        dev->live_queues == 1 ? "" : "s", scopes,
                        scopes == 1 ? "" : "s");
        sw__unlock(dev);
        pthread_mutex_unlock(&registry_lock);
        return rc;
    }
    /* Copies still in flight (of buffers freed meanwhile) end first. */
    sw__xfer_close_locked(dev);
    sw__cache_drain_locked(dev);
    sw__host_pool_drain_locked(dev);
    sw__disk_close_locked(dev);
    sw__trace_close_locked(dev);
    if (dev->scratch != 0)
        (void)sw__b_free(dev, dev->scratch, SW_ALLOC_GRANULARITY);
    sw__free(dev->heap);
    dev->heap = NULL;
    dev->heap_cap = 0;
    sw__native_forget(&dev->context);
    sw__bdev *b = dev->b;
    dev->b = NULL;
    dev->q = NULL;
    dev->copyq = NULL;
    dev->refs = 0;
    sw__unlock(dev);
    /* The backend waits for its work here; no device lock is held, and
     * other threads see the device as closed. */
    sw__b_close(dev->ops, b);
    pthread_mutex_unlock(&registry_lock);
    return SW_OK;
}

SW_API const char *sw_device_name(const sw_device *dev)
{
    if (!sw__device_valid(dev))
        return "(invalid device)";
    return dev->name;
}

SW_API const char *sw_device_description(const sw_device *dev)
{
    if (!sw__device_valid(dev))
        return "(invalid device)";
    return dev->props.description;
}

SW_API int sw_device_host_addressable(sw_device *dev, int *yes)
{
    if (yes == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "yes is NULL");
    *yes = 0;
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    *yes = dev->props.host_addressable != 0;
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_device_dtypes(sw_device *dev, uint32_t *mask)
{
    if (mask == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "mask is NULL");
    *mask = 0;
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    /* Only dtype bits: a backend marks "no kernels at all" with a bit past
     * them (props.dtypes 0 means version 1's four). */
    *mask = dev->props.dtypes & ((UINT32_C(1) << SW_DTYPE_COUNT) - 1);
    sw__unlock(dev);
    return SW_OK;
}

int sw__dtype_unsupported(const sw_device *dev, sw_dtype d)
{
    return sw__errorf(SW_ERR_DTYPE, "%s cannot compute with %s%s%s",
                      dev->name, sw_dtype_name(d),
                      dev->props.dtypes_why[0] ? ": " : "",
                      dev->props.dtypes_why);
}

/* ------------------------------------------------------------------------
 * Waiting
 * ---------------------------------------------------------------------- */

int sw__wait_event_locked(sw_device *dev, sw__bevent *ev)
{
    sw__assert_locked(dev);
    const sw__backend_ops *ops = dev->ops;
    dev->waiting++;
    sw__unlock(dev);
    int rc = sw__b_event_wait(ops, ev);
    sw__b_event_release(ops, ev);
    sw__lock(dev);
    dev->waiting--;
    return rc;
}

int sw__wait_idle_locked(sw_device *dev)
{
    sw__assert_locked(dev);
    /* Uses queued by now are done after the wait (spill.c's timeline). */
    uint64_t clock = dev->clock;
    sw__bevent *ev = NULL;
    int rc;
    if (sw__b_event_record(dev, &ev) == SW_OK) {
        rc = sw__wait_event_locked(dev, ev);
        if (rc == SW_OK && clock > dev->tl_done)
            dev->tl_done = clock;
        return rc;
    }
    /* No event to be had (no host memory for one): wait for the whole
     * queue instead, which allocates nothing (backend.h), without the
     * lock.  Callers rely on the work being done when this returns: a
     * copy into host memory they are about to reuse or free. */
    const sw__backend_ops *ops = dev->ops;
    sw__bqueue *q = dev->q;
    dev->waiting++;
    sw__unlock(dev);
    rc = sw__b_synchronize(ops, q);
    sw__lock(dev);
    dev->waiting--;
    if (rc == SW_OK && clock > dev->tl_done)
        dev->tl_done = clock;
    return rc;
}

SW_API int sw_device_synchronize(sw_device *dev)
{
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    /* Prefetches reading from the spill file in the background first:
     * their copies are work the caller queued too (disk.c). */
    sw__disk_wait_reads_locked(dev);
    /* Every queue's work: events recorded under the lock (they outlive
     * their queues), waited for without it. */
    size_t n = 0;
    for (sw__queue *q = dev->queues; q; q = q->next)
        n++;
    sw__bevent **evs = n ? sw__calloc(n, sizeof *evs) : NULL;
    size_t k = 0;
    for (sw__queue *q = dev->queues; evs && q; q = q->next) {
        /* A queue whose event cannot be had is not waited for: say so
         * (after waiting for the others) rather than return early. */
        int r = sw__b_event_record_q(dev, q->bq, &evs[k]);
        if (r == SW_OK)
            k++;
        else if (rc == SW_OK)
            rc = r;
    }
    /* Every queue (or none, when dead queues were all reaped idle). */
    bool all_waited = n == 0 || (evs != NULL && k == n);
    const sw__backend_ops *ops = dev->ops;
    dev->waiting++;
    sw__unlock(dev);
    for (size_t i = 0; i < k; i++) {
        int r = sw__b_event_wait(ops, evs[i]);
        sw__b_event_release(ops, evs[i]);
        if (rc == SW_OK)
            rc = r;
    }
    sw__free(evs);
    sw__lock(dev);
    dev->waiting--;
    if (n > 0 && evs == NULL)
        rc = sw__errorf(SW_ERR_HOST_OOM, "no host memory to wait for %zu "
                        "queues", n);
    int r = sw__wait_idle_locked(dev);
    if (rc == SW_OK)
        rc = r;
    if (dev->copyq != NULL) {
        /* The copy queue's copies (spills, restores, prefetches). */
        sw__bevent *ev = NULL;
        r = sw__b_event_record_q(dev, dev->copyq, &ev);
        if (r == SW_OK) {
            r = sw__wait_event_locked(dev, ev);
        } else {
            sw__bqueue *cq = dev->copyq;
            dev->waiting++;
            sw__unlock(dev);
            r = sw__b_synchronize(ops, cq);
            sw__lock(dev);
            dev->waiting--;
        }
        if (rc == SW_OK)
            rc = r;
    }
    if (dev->xfers != NULL || dev->xfer_orphans != NULL)
        sw__xfer_poll_locked(dev);
    /* Work queued before this call has completed on every queue we could
     * wait for; parked memory is safe to reuse when that was all of them. */
    sw__unpark_locked(dev, rc == SW_OK && all_waited);
    sw__reap_queues_locked(dev, false);
    sw__unlock(dev);
    return rc;
}

/* ------------------------------------------------------------------------
 * Fault injection
 * ---------------------------------------------------------------------- */

SW_API int sw_inject_fault(sw_device *dev, sw_fault_op op, uint64_t nth,
                           int persistent)
{
    if (op != SW_FAULT_ALLOC && op != SW_FAULT_COPY &&
        op != SW_FAULT_HOST_ALLOC && op != SW_FAULT_DISK)
        return sw__errorf(SW_ERR_INVALID_ARG, "unknown fault op %d", (int)op);
    if (dev == NULL && op == SW_FAULT_HOST_ALLOC) {
        sw__arm_nodev_fault(nth, persistent != 0);
        return SW_OK;
    }
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    sw__fault *f = &dev->fault[op];
    f->countdown = nth;
    f->persistent = persistent != 0;
    f->failing = false;
    sw__unlock(dev);
    return SW_OK;
}
