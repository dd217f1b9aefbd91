/*
 * bops.c -- the core's thin wrappers around the backend ops table, and its
 * host allocator: the one place for lock assertions, preconditions and
 * fault injection, so that every backend gets them alike (SQLite's os.c).
 */
#include "core/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Counts a call against an armed fault; true when it must fail. */
static bool countdown_hits(sw__fault *f)
{
    if (f->failing)
        return true;
    if (f->countdown == 0)
        return false;
    if (--f->countdown > 0)
        return false;
    f->failing = f->persistent;
    return true;
}

static bool fault_hits(sw_device *dev, sw_fault_op op)
{
    return countdown_hits(&dev->fault[op]);
}

bool sw__fault_hits(sw_device *dev, sw_fault_op op)
{
    return fault_hits(dev, op);
}

/* ------------------------------------------------------------------------
 * Host memory.  Every host allocation of the library (core and backends)
 * comes through here, so SW_FAULT_HOST_ALLOC reaches each of them: it
 * counts against the device whose lock the calling thread holds (backend
 * operations run under it), or against the thread's own no-device fault.
 * ---------------------------------------------------------------------- */

static _Thread_local sw__fault nodev_fault;

void sw__arm_nodev_fault(uint64_t nth, bool persistent)
{
    nodev_fault.countdown = nth;
    nodev_fault.persistent = persistent;
    nodev_fault.failing = false;
}

static bool host_fault_hits(void)
{
    sw_device *dev = sw__tl_dev;
    return countdown_hits(dev != NULL ? &dev->fault[SW_FAULT_HOST_ALLOC]
                                      : &nodev_fault);
}

void *sw__malloc(size_t n)
{
    if (host_fault_hits()) {
        errno = ENOMEM;
        return NULL;
    }
    return malloc(n);
}

void *sw__calloc(size_t count, size_t size)
{
    if (host_fault_hits()) {
        errno = ENOMEM;
        return NULL;
    }
    return calloc(count, size);
}

void *sw__realloc(void *p, size_t n)
{
    if (host_fault_hits()) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, n);
}

int sw__aligned_alloc(void **out, size_t align, size_t n)
{
    *out = NULL;
    if (host_fault_hits())
        return ENOMEM;
    return posix_memalign(out, align, n);
}

void sw__free(void *p) { free(p); }

/* The same for backends outside the library (spillway/backend.h): the
 * same fault injection reaches their out-of-host-memory paths. */
SW_API void *sw_backend_malloc(size_t n) { return sw__malloc(n); }
SW_API void *sw_backend_calloc(size_t count, size_t size)
{
    return sw__calloc(count, size);
}
SW_API void *sw_backend_realloc(void *p, size_t n)
{
    return sw__realloc(p, n);
}
SW_API void sw_backend_free(void *p) { sw__free(p); }

bool sw__host_fault(void) { return host_fault_hits(); }

int sw__thread_create(pthread_t *t, void *(*fn)(void *), void *arg)
{
    /* A thread is host memory too (its stack): the same fault fails it. */
    if (host_fault_hits())
        return EAGAIN;
    return pthread_create(t, NULL, fn, arg);
}

/* ------------------------------------------------------------------------
 * Backend operations
 *
 * One wrapper per op, and the only calls through an ops table in the core.
 * Each asserts the lock rule backend.h states for its op:
 *  - held: everything that changes a device's state or enqueues work;
 *  - not held by this thread (no device lock at all, since a thread never
 *    holds two): whatever can block on the device -- event_wait,
 *    synchronize, close;
 *  - either: event_query and event_release, which never block.
 * ---------------------------------------------------------------------- */

/* No device lock held by this thread: safe to wait on a device. */
#define sw__assert_unlocked() assert(sw__tl_dev == NULL)

/* Devices */

const char *sw__b_name(const sw__backend_ops *ops) { return ops->name; }

bool sw__b_usable(const sw__backend_ops *ops)
{
    /* wait_event (version 2) is what keeps work on two queues ordered
     * without the caller waiting: every backend must have it. */
    return ops->version >= 2 && ops->wait_event != NULL;
}

int sw__b_device_count(const sw__backend_ops *ops, int *count, char *why,
                       size_t why_len)
{
    *count = 0;
    int rc = ops->device_count(count, why, why_len);
    if (rc == SW_OK && *count < 0)
        *count = 0;
    return rc;
}

int sw__b_open(const sw__backend_ops *ops, int index, sw__bdev **out,
               sw__device_props *props)
{
    sw__assert_unlocked();
    assert(index >= 0);
    return ops->open(index, out, props);
}

void sw__b_close(const sw__backend_ops *ops, sw__bdev *b)
{
    sw__assert_unlocked(); /* close waits for the device */
    ops->close(b);
}

sw__bqueue *sw__b_default_queue(sw_device *dev)
{
    sw__assert_locked(dev);
    return dev->ops->default_queue(dev->b);
}

int sw__b_mem_info(sw_device *dev, uint64_t *free, uint64_t *total,
                   int *known)
{
    sw__assert_locked(dev);
    return dev->ops->mem_info(dev->b, free, total, known);
}

/* Memory */

int sw__b_alloc(sw_device *dev, size_t size, uintptr_t *mem)
{
    sw__assert_locked(dev);
    assert(size > 0 && size % SW_ALLOC_GRANULARITY == 0);
    if (fault_hits(dev, SW_FAULT_ALLOC))
        return sw__errorf(SW_ERR_OOM, "%s: injected allocation failure",
                          dev->name);
    return dev->ops->alloc(dev->b, size, mem);
}

int sw__b_free(sw_device *dev, uintptr_t mem, size_t size)
{
    sw__assert_locked(dev);
    assert(mem != 0 && size > 0);
    return dev->ops->free(dev->b, dev->q, mem, size);
}

/* Queues */

int sw__b_queue_create(sw_device *dev, sw__bqueue **out)
{
    sw__assert_locked(dev);
    return dev->ops->queue_create(dev->b, out);
}

void sw__b_queue_destroy(sw_device *dev, sw__bqueue *q)
{
    /* Under the lock: destroying a queue changes the backend's device
     * state (its queue list, its reserved memory), which other threads
     * read under the lock.  The core calls it only once the queue's work
     * has completed, so it does not wait for the device. */
    sw__assert_locked(dev);
    assert(q != dev->q);
    dev->ops->queue_destroy(q);
}

/* Transfers and kernels, enqueued */

static int copy_fault(sw_device *dev, const char *what)
{
    return sw__errorf(SW_ERR_DEVICE, "%s: injected %s failure", dev->name,
                      what);
}

int sw__b_write_q(sw_device *dev, sw__bqueue *q, uintptr_t dst, size_t off,
                  const void *src, size_t n)
{
    sw__assert_locked(dev);
    assert(dst != 0 && n > 0);
    if (fault_hits(dev, SW_FAULT_COPY))
        return copy_fault(dev, "host-to-device copy");
    return dev->ops->write(q, dst, off, src, n);
}

int sw__b_write(sw_device *dev, uintptr_t dst, size_t off, const void *src,
                size_t n)
{
    return sw__b_write_q(dev, dev->q, dst, off, src, n);
}

int sw__b_read_q(sw_device *dev, sw__bqueue *q, void *dst, uintptr_t src,
                 size_t off, size_t n)
{
    sw__assert_locked(dev);
    assert(src != 0 && n > 0);
    if (fault_hits(dev, SW_FAULT_COPY))
        return copy_fault(dev, "device-to-host copy");
    return dev->ops->read(q, dst, src, off, n);
}

int sw__b_read(sw_device *dev, void *dst, uintptr_t src, size_t off,
               size_t n)
{
    return sw__b_read_q(dev, dev->q, dst, src, off, n);
}

int sw__b_copy_q(sw_device *dev, sw__bqueue *q, uintptr_t dst, size_t doff,
                 uintptr_t src, size_t soff, size_t n)
{
    sw__assert_locked(dev);
    assert(dst != 0 && src != 0 && n > 0);
    if (fault_hits(dev, SW_FAULT_COPY))
        return copy_fault(dev, "device-to-device copy");
    return dev->ops->copy(q, dst, doff, src, soff, n);
}

int sw__b_copy(sw_device *dev, uintptr_t dst, size_t doff, uintptr_t src,
               size_t soff, size_t n)
{
    return sw__b_copy_q(dev, dev->q, dst, doff, src, soff, n);
}

int sw__b_fill_q(sw_device *dev, sw__bqueue *q, uintptr_t dst, size_t off,
                 size_t n, const void *pattern, size_t psize)
{
    sw__assert_locked(dev);
    assert(dst != 0 && n > 0 && n % psize == 0);
    assert(psize == 1 || psize == 2 || psize == 4 || psize == 8);
    return dev->ops->fill(q, dst, off, n, pattern, psize);
}

int sw__b_fill(sw_device *dev, uintptr_t dst, size_t off, size_t n,
               const void *pattern, size_t psize)
{
    return sw__b_fill_q(dev, dev->q, dst, off, n, pattern, psize);
}

int sw__b_launch(sw_device *dev, sw__bqueue *q, const sw_kernel_args *args)
{
    sw__assert_locked(dev);
    assert(args->n > 0);
    return dev->ops->launch(q, args);
}

/* Events and waiting */

int sw__b_event_record_q(sw_device *dev, sw__bqueue *q, sw__bevent **ev)
{
    sw__assert_locked(dev);
    return dev->ops->event_record(q, ev);
}

int sw__b_event_record(sw_device *dev, sw__bevent **ev)
{
    return sw__b_event_record_q(dev, dev->q, ev);
}

int sw__b_event_query(const sw__backend_ops *ops, sw__bevent *ev, int *done)
{
    return ops->event_query(ev, done); /* never blocks: any lock state */
}

int sw__b_event_elapsed(const sw__backend_ops *ops, sw__bevent *from,
                        sw__bevent *to, double *seconds)
{
    *seconds = 0;
    if (ops->version < 4 || ops->event_elapsed == NULL)
        return SW_ERR_UNSUPPORTED;
    return ops->event_elapsed(from, to, seconds); /* never blocks */
}

sw__bevent *sw__b_timing_start(sw_device *dev, sw__bqueue *q)
{
    sw__assert_locked(dev);
    sw__bevent *ev = NULL;
    if (dev->ops->version < 4 || dev->ops->event_elapsed == NULL ||
        dev->ops->event_record(q, &ev) != SW_OK)
        return NULL;
    return ev;
}

int sw__b_event_wait(const sw__backend_ops *ops, sw__bevent *ev)
{
    sw__assert_unlocked();
    return ops->event_wait(ev);
}

void sw__b_event_release(const sw__backend_ops *ops, sw__bevent *ev)
{
    ops->event_release(ev); /* never blocks: any lock state */
}

int sw__b_synchronize(const sw__backend_ops *ops, sw__bqueue *q)
{
    sw__assert_unlocked();
    return ops->synchronize(q);
}

int sw__b_wait_event(sw_device *dev, sw__bqueue *q, sw__bevent *ev)
{
    sw__assert_locked(dev);
    return dev->ops->wait_event(q, ev); /* device-side: never blocks */
}

/* Version 3 */

sw__bqueue *sw__b_copy_queue(sw_device *dev)
{
    sw__assert_locked(dev);
    if (dev->ops->version < 3 || dev->ops->copy_queue == NULL)
        return NULL;
    return dev->ops->copy_queue(dev->b);
}

int sw__b_queue_idle_or(sw_device *dev, sw__bqueue *q, int unknown)
{
    sw__assert_locked(dev);
    if (dev->ops->version < 3 || dev->ops->queue_idle == NULL)
        return unknown;
    return dev->ops->queue_idle(q) != 0;
}

int sw__b_queue_idle(sw_device *dev, sw__bqueue *q)
{
    return sw__b_queue_idle_or(dev, q, 0);
}

int sw__b_host_alloc(sw_device *dev, size_t size, void **out)
{
    sw__assert_locked(dev);
    *out = NULL;
    if (dev->ops->version < 3 || dev->ops->host_alloc == NULL)
        return SW_ERR_UNSUPPORTED;
    /* Page-locked memory is host memory too: the same fault fails it. */
    if (sw__host_fault())
        return SW_ERR_HOST_OOM;
    return dev->ops->host_alloc(dev->b, size, out);
}

void sw__b_host_free(sw_device *dev, void *p, size_t size)
{
    sw__assert_locked(dev);
    dev->ops->host_free(dev->b, p, size);
}

int sw__b_queue_wait(sw_device *dev, sw__bqueue *q, sw__bqueue *on)
{
    sw__assert_locked(dev);
    sw__bevent *ev = NULL;
    int rc = dev->ops->event_record(on, &ev);
    if (rc != SW_OK)
        return rc;
    /* Device-side: never blocks the caller (every registered backend has
     * wait_event; device.c checks). */
    rc = dev->ops->wait_event(q, ev);
    dev->ops->event_release(ev);
    return rc;
}

/* Version 5 */

static int no_native(const sw_device *dev, const char *what)
{
    return sw__errorf(SW_ERR_UNSUPPORTED, "%s: the %s backend has no %s",
                      dev->name, dev->ops->name, what);
}

int sw__b_queue_native(sw_device *dev, sw__bqueue *q, uintptr_t *handle)
{
    sw__assert_locked(dev);
    *handle = 0;
    if (dev->ops->version < 5 || dev->ops->queue_native == NULL)
        return no_native(dev, "native queue handles");
    return dev->ops->queue_native(q, handle);
}

int sw__b_queue_wrap(sw_device *dev, uintptr_t handle, sw__bqueue **out)
{
    sw__assert_locked(dev);
    *out = NULL;
    if (dev->ops->version < 5 || dev->ops->queue_wrap == NULL)
        return no_native(dev, "way to adopt a queue it did not create");
    return dev->ops->queue_wrap(dev->b, handle, out);
}

int sw__b_native_context(sw_device *dev, uintptr_t *context)
{
    sw__assert_locked(dev);
    *context = 0;
    if (dev->ops->version < 5 || dev->ops->native_context == NULL)
        return no_native(dev, "native context");
    return dev->ops->native_context(dev->b, context);
}

/* Whether the table can be a backend here; the message says why not. */
int sw__b_check_table(const sw__backend_ops *ops)
{
    if (ops == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "the backend table is NULL");
    const char *name = ops->name;
    if (ops->version < SW_BACKEND_VERSION_MIN ||
        ops->version > SW_BACKEND_VERSION)
        return sw__errorf(SW_ERR_INVALID_ARG, "backend '%.40s': contract "
                          "version %d, and this spillway takes versions %d "
                          "to %d (spillway/backend.h: SW_BACKEND_VERSION)",
                          name ? name : "?", ops->version,
                          SW_BACKEND_VERSION_MIN, SW_BACKEND_VERSION);
    size_t len = name ? strlen(name) : 0;
    bool ok = len > 0 && len <= 23;
    for (size_t k = 0; ok && k < len; k++)
        ok = (name[k] >= 'a' && name[k] <= 'z') ||
             (name[k] >= '0' && name[k] <= '9') || name[k] == '_';
    if (!ok)
        return sw__errorf(SW_ERR_INVALID_ARG, "backend name '%.40s': a "
                          "backend is named by 1 to 23 of [a-z0-9_] (the "
                          "spec prefix, as in \"sim:0\")", name ? name : "");
#define SW__REQUIRED(X)                                                       \
    X(device_count) X(open) X(close) X(alloc) X(free) X(mem_info)             \
    X(default_queue) X(queue_create) X(queue_destroy) X(write) X(read)       \
    X(copy) X(fill) X(launch) X(event_record) X(event_query) X(event_wait)   \
    X(event_release) X(synchronize) X(wait_event)
#define SW__CHECK_MEMBER(m)                                                   \
    if (ops->m == NULL)                                                       \
        return sw__errorf(SW_ERR_INVALID_ARG, "backend '%s': its %s is "      \
                          "NULL, and every backend must have one", name, #m);
    SW__REQUIRED(SW__CHECK_MEMBER)
#undef SW__CHECK_MEMBER
#undef SW__REQUIRED
    return SW_OK;
}
