/*
 * bops.c -- the core's thin wrappers around the backend ops table, and its
 * host allocator: the one place for lock assertions, preconditions and
 * fault injection, so that every backend gets them alike (SQLite's os.c).
 */
#include "core/internal.h"

#include <errno.h>
#include <stdlib.h>

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

static int copy_fault(sw_device *dev, const char *what)
{
    return sw__errorf(SW_ERR_DEVICE, "%s: injected %s failure", dev->name,
                      what);
}

int sw__b_write(sw_device *dev, uintptr_t dst, size_t off, const void *src,
                size_t n)
{
    sw__assert_locked(dev);
    assert(dst != 0 && n > 0);
    if (fault_hits(dev, SW_FAULT_COPY))
        return copy_fault(dev, "host-to-device copy");
    return dev->ops->write(dev->q, dst, off, src, n);
}

int sw__b_read(sw_device *dev, void *dst, uintptr_t src, size_t off,
               size_t n)
{
    sw__assert_locked(dev);
    assert(src != 0 && n > 0);
    if (fault_hits(dev, SW_FAULT_COPY))
        return copy_fault(dev, "device-to-host copy");
    return dev->ops->read(dev->q, dst, src, off, n);
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

int sw__b_queue_wait(sw_device *dev, sw__bqueue *q, sw__bqueue *on)
{
    sw__assert_locked(dev);
    sw__bevent *ev = NULL;
    int rc = dev->ops->event_record(on, &ev);
    if (rc != SW_OK)
        return rc;
    if (dev->ops->wait_event != NULL) {
        rc = dev->ops->wait_event(q, ev);
        dev->ops->event_release(ev);
        return rc;
    }
    /* A version-1 backend: wait on the host.  The lock stays held, as
     * callers (frees among them) rely on it; device work never takes it,
     * so this cannot deadlock, it only serializes. */
    rc = dev->ops->event_wait(ev);
    dev->ops->event_release(ev);
    return rc;
}

int sw__b_fill(sw_device *dev, uintptr_t dst, size_t off, size_t n,
               const void *pattern, size_t psize)
{
    sw__assert_locked(dev);
    assert(dst != 0 && n > 0 && n % psize == 0);
    return dev->ops->fill(dev->q, dst, off, n, pattern, psize);
}

int sw__b_launch(sw_device *dev, sw__bqueue *q, const sw_kernel_args *args)
{
    sw__assert_locked(dev);
    assert(args->n > 0);
    return dev->ops->launch(q, args);
}

int sw__b_event_record(sw_device *dev, sw__bevent **ev)
{
    sw__assert_locked(dev);
    return dev->ops->event_record(dev->q, ev);
}

int sw__b_mem_info(sw_device *dev, uint64_t *free, uint64_t *total,
                   int *known)
{
    sw__assert_locked(dev);
    return dev->ops->mem_info(dev->b, free, total, known);
}
