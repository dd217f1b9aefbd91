/*
 * allocator.c -- the allocator plug-ins' C side: the alloc/free pair that
 * PyTorch's CUDAPluggableAllocator loads by name from this very module
 * (spillway/_spillway*.so), and that spillway.cupy and spillway.numba call
 * through ctypes.  Built into the extension so that there is one copy of
 * the library in the process: the frameworks' memory and spillway's own
 * arrays share one device registry, one budget, one set of figures.
 *
 * What a block handed out is: a spillway buffer (tagged with the
 * framework's name) exposed under a lease (sw_buffer_expose), both kept
 * until the framework frees the block.  A leased buffer
 * never spills and never moves -- the framework holds a raw pointer -- but
 * it is counted in in_use, bounded by the budget, and its allocation runs
 * the whole ladder: the pressure callbacks (the Python module's runs the
 * garbage collector, so reference cycles holding tensors are collected
 * before an OOM), spilling of spillway's own arrays, and the OOM report.
 * At free the lease is released and the handle freed, and the memory goes
 * back to spillway's cache.  A free counts as a release of this thread
 * (sw_py_thread.released, as an Array's deallocation does), so that the
 * garbage-collecting pressure callback sees a collection that freed
 * framework blocks as fruitful: a retry, and no back-off.
 *
 * Stream order (CUDA): spillway allocates and frees on its own default
 * stream; a framework uses the block on the stream it names (NULL: the
 * legacy default stream).  At malloc the framework's stream waits, on the
 * device, for spillway's stream (memory reused from the cache may still
 * be in use by work queued there); at free spillway's stream waits for the
 * framework's, so the block is reused only after the framework's work on
 * it.  Neither waits on the host (sw__cuda_stream_join).
 *
 * Locks: the block table has its own leaf mutex, never held across a
 * spillway call.  The exports may be called with the GIL held (PyTorch
 * does): spillway never takes the GIL while it holds a device lock, so the
 * pressure callback can still collect.
 *
 * Devices: the framework's device index N is spillway's "cuda:N"; the
 * environment variable SPILLWAY_PLUGIN_BACKEND (e.g. "sim") names another
 * backend, so that the plug-ins' bookkeeping is tested without a GPU (no
 * stream joins are made there).
 */
#include "module.h" /* sw_py_thread: releases the collector sees */

#include "backend/cuda_internal.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define PLUGIN_API __attribute__((visibility("default")))
#define PLUGIN_MAX_DEVICES 64

/* The exports (declared here: no header, they are looked up by name). */
PLUGIN_API void *spillway_torch_malloc(ssize_t size, int device,
                                       void *stream);
PLUGIN_API void spillway_torch_free(void *ptr, ssize_t size, int device,
                                    void *stream);
PLUGIN_API void *spillway_plugin_malloc(size_t size, int device, void *stream,
                                        const char *tag);
PLUGIN_API int spillway_plugin_free(void *ptr, int device, void *stream);
PLUGIN_API const char *spillway_plugin_last_error(void);
PLUGIN_API int spillway_plugin_last_code(void);
PLUGIN_API size_t spillway_plugin_live(uint64_t *bytes);

/* ------------------------------------------------------------------------
 * The blocks handed out: an open-addressing table keyed by address
 * ---------------------------------------------------------------------- */

typedef struct block {
    uintptr_t ptr; /* 0: empty; 1: deleted */
    sw_buffer *buf;
    sw_lease *lease;
    size_t size;
} block;

static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;
static block *table;
static size_t table_cap, table_used, table_live; /* used counts deleted */
static uint64_t table_bytes;

static _Thread_local int last_code;
static _Thread_local char last_msg[1024];

static int set_error(int code, const char *msg)
{
    last_code = code;
    snprintf(last_msg, sizeof last_msg, "%s", msg);
    return code;
}

static size_t slot_of(uintptr_t p, size_t cap)
{
    uint64_t h = (uint64_t)p * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 17) & (cap - 1);
}

/* Under table_mu.  0, or -1 when no host memory for a bigger table. */
static int table_grow(void)
{
    size_t cap = table_cap ? table_cap * 2 : 1024;
    if (table_live * 4 < table_cap)
        cap = table_cap; /* mostly deleted slots: rehash in place */
    block *t = calloc(cap, sizeof *t);
    if (t == NULL)
        return -1;
    for (size_t i = 0; i < table_cap; i++) {
        if (table[i].ptr <= 1)
            continue;
        size_t j = slot_of(table[i].ptr, cap);
        while (t[j].ptr != 0)
            j = (j + 1) & (cap - 1);
        t[j] = table[i];
    }
    free(table);
    table = t;
    table_cap = cap;
    table_used = table_live;
    return 0;
}

static int table_put(uintptr_t p, sw_buffer *buf, sw_lease *lease,
                     size_t size)
{
    pthread_mutex_lock(&table_mu);
    if ((table_used + 1) * 2 > table_cap && table_grow() != 0) {
        pthread_mutex_unlock(&table_mu);
        return -1;
    }
    size_t j = slot_of(p, table_cap);
    while (table[j].ptr > 1)
        j = (j + 1) & (table_cap - 1);
    if (table[j].ptr == 0)
        table_used++;
    table[j] = (block){p, buf, lease, size};
    table_live++;
    table_bytes += size;
    pthread_mutex_unlock(&table_mu);
    return 0;
}

/* The block at p, removed; 0 when p is not one of ours. */
static int table_take(uintptr_t p, block *out)
{
    int found = 0;
    pthread_mutex_lock(&table_mu);
    if (table_cap != 0) {
        size_t j = slot_of(p, table_cap);
        while (table[j].ptr != 0) {
            if (table[j].ptr == p) {
                *out = table[j];
                table[j].ptr = 1;
                table[j].buf = NULL;
                table[j].lease = NULL;
                table_live--;
                table_bytes -= out->size;
                found = 1;
                break;
            }
            j = (j + 1) & (table_cap - 1);
        }
    }
    pthread_mutex_unlock(&table_mu);
    return found;
}

/* ------------------------------------------------------------------------
 * Devices: opened once, kept for the life of the process
 * ---------------------------------------------------------------------- */

static pthread_mutex_t dev_mu = PTHREAD_MUTEX_INITIALIZER;
static sw_device *devs[PLUGIN_MAX_DEVICES];

static const char *plugin_backend(void)
{
    const char *b = getenv("SPILLWAY_PLUGIN_BACKEND");
    return b != NULL && b[0] != '\0' ? b : "cuda";
}

static int is_cuda(void) { return strcmp(plugin_backend(), "cuda") == 0; }

static int device_get(int index, sw_device **out)
{
    if (index < 0 || index >= PLUGIN_MAX_DEVICES) {
        char msg[96];
        snprintf(msg, sizeof msg, "spillway allocator: no device index %d",
                 index);
        return set_error(SW_ERR_INVALID_ARG, msg);
    }
    pthread_mutex_lock(&dev_mu);
    int rc = SW_OK;
    if (devs[index] == NULL) {
        char spec[64];
        snprintf(spec, sizeof spec, "%.40s:%d", plugin_backend(), index);
        rc = sw_device_open(spec, &devs[index]);
        if (rc != SW_OK)
            devs[index] = NULL;
    }
    *out = devs[index];
    pthread_mutex_unlock(&dev_mu);
    if (rc != SW_OK)
        set_error(rc, sw_last_error());
    return rc;
}

/* ------------------------------------------------------------------------
 * The exports
 * ---------------------------------------------------------------------- */

void *spillway_plugin_malloc(size_t size, int device, void *stream,
                             const char *tag)
{
    last_code = SW_OK;
    last_msg[0] = '\0';
    if (size == 0)
        return NULL; /* what the frameworks expect of an empty block */
    sw_device *dev = NULL;
    if (device_get(device, &dev) != SW_OK)
        return NULL;
    sw_buffer *b = NULL;
    int rc = sw_buffer_alloc(dev, size, tag, &b);
    if (rc != SW_OK) {
        set_error(rc, sw_last_error());
        return NULL;
    }
    sw_devmem m;
    sw_lease *lease = NULL;
    rc = sw_buffer_expose(b, &m, &lease);
    if (rc != SW_OK) {
        set_error(rc, sw_last_error());
        (void)sw_buffer_free(b);
        return NULL;
    }
    uintptr_t p = m.base + m.offset;
    if (is_cuda() && (rc = sw__cuda_stream_join(device, stream, 1)) != SW_OK)
        set_error(rc, sw_last_error());
    else if (table_put(p, b, lease, size) != 0)
        rc = set_error(SW_ERR_HOST_OOM, "spillway allocator: no host memory "
                       "for the table of blocks");
    if (rc != SW_OK) {
        (void)sw_lease_release(lease);
        (void)sw_buffer_free(b);
        return NULL;
    }
    return (void *)p;
}

int spillway_plugin_free(void *ptr, int device, void *stream)
{
    last_code = SW_OK;
    last_msg[0] = '\0';
    if (ptr == NULL)
        return SW_OK;
    block blk;
    if (!table_take((uintptr_t)ptr, &blk)) {
        char msg[128];
        snprintf(msg, sizeof msg, "spillway allocator: %p was not allocated "
                 "by spillway (or was freed twice)", ptr);
        return set_error(SW_ERR_INVALID_ARG, msg);
    }
    int rc = SW_OK;
    /* Ours waits for the framework's work on the block; if that cannot be
     * had, the device's work is waited for instead (never a reuse too
     * early). */
    if (is_cuda() && sw__cuda_stream_join(device, stream, 0) != SW_OK) {
        sw_device *dev = NULL;
        if (device_get(device, &dev) == SW_OK)
            (void)sw_device_synchronize(dev);
    }
    rc = sw_lease_release(blk.lease);
    int rc2 = sw_buffer_free(blk.buf);
    if (rc == SW_OK)
        rc = rc2;
    if (rc2 == SW_OK)
        sw_py_thread.released++;
    if (rc != SW_OK)
        set_error(rc, sw_last_error());
    return rc;
}

void *spillway_torch_malloc(ssize_t size, int device, void *stream)
{
    if (size < 0) {
        set_error(SW_ERR_INVALID_ARG, "spillway allocator: negative size");
        return NULL;
    }
    return spillway_plugin_malloc((size_t)size, device, stream, "torch");
}

void spillway_torch_free(void *ptr, ssize_t size, int device, void *stream)
{
    (void)size;
    if (spillway_plugin_free(ptr, device, stream) != SW_OK)
        fprintf(stderr, "%s\n", last_msg);
}

const char *spillway_plugin_last_error(void) { return last_msg; }

int spillway_plugin_last_code(void) { return last_code; }

/* Blocks handed out and not freed yet, and their bytes (tests, stats). */
size_t spillway_plugin_live(uint64_t *bytes)
{
    pthread_mutex_lock(&table_mu);
    size_t n = table_live;
    if (bytes != NULL)
        *bytes = table_bytes;
    pthread_mutex_unlock(&table_mu);
    return n;
}
