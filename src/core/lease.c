/*
 * lease.c -- memory spillway does not own (sw_buffer_wrap) and exposure
 * leases on memory it does (sw_buffer_expose).
 */
#include "core/internal.h"

#include <stdio.h>

sw__pool sw__lease_pool =
    SW__POOL_INIT(SW__H_LEASE, sw__lease, sizeof(sw__slot), NULL);

/* ------------------------------------------------------------------------
 * External memory and exposure leases
 * ---------------------------------------------------------------------- */

SW_API int sw_buffer_wrap(sw_device *dev, sw_devmem mem, size_t size,
                          const char *tag, sw_buffer **out)
{
    if (out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (mem.base == 0 && size > 0)
        return sw__errorf(SW_ERR_INVALID_ARG, "cannot wrap %zu bytes at a "
                          "null device address", size);
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    sw__buf *b = sw__pool_get(&sw__buf_pool);
    if (b == NULL) {
        sw__unlock(dev);
        return sw__errorf(SW_ERR_HOST_OOM, "no host memory for a buffer "
                          "handle");
    }
    atomic_store_explicit(&b->h.dev, dev, memory_order_release);
    sw__buf_init_base(b, size, tag);
    b->external = true;
    b->mem = size > 0 ? mem.base : 0;
    b->offset = size > 0 ? mem.offset : 0;
    b->last_use = ++dev->clock;
    sw__live_link_locked(dev, b);
    *out = sw__buf_handle(b);
    sw__unlock(dev);
    return SW_OK;
}

/* A lease has its own handle (type-stable like every handle), so a second
 * release is detected; while any is live its base neither spills nor
 * releases its memory. */
static int expose(sw_buffer *h, sw_devmem *ptr, sw_lease **out, bool write)
{
    /* Out-parameters are cleared on failure, the one given too. */
    if (ptr != NULL) {
        ptr->base = 0;
        ptr->offset = 0;
    }
    if (out != NULL)
        *out = NULL;
    if (ptr == NULL || out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "ptr or out is NULL");
    sw__buf *buf;
    sw_device *dev;
    int rc = sw__buffer_enter(h, &buf, &dev);
    if (rc != SW_OK)
        return rc;
    sw__lease *l = sw__pool_get(&sw__lease_pool);
    if (l == NULL) {
        sw__unlock(dev);
        return sw__errorf(SW_ERR_HOST_OOM, "no host memory for a lease");
    }
    sw__buf *base = buf->base;
    base->pins++;
    rc = sw__make_resident_locked(dev, base);
    /* The consumer reads the memory outside spillway's queues: the
     * restore's copy must have landed. */
    if (rc == SW_OK)
        rc = sw__xfer_wait_locked(dev, base);
    if (rc != SW_OK) {
        sw__unpin_locked(dev, base);
        sw__unlock(dev);
        sw__pool_put(&sw__lease_pool, l);
        return rc;
    }
    /* The consumer may write it (unless it promised not to). */
    sw__hold_end_locked(dev, base);
    if (write)
        sw__dirty_locked(dev, base);
    if (base->exposed++ == 0)
        sw__lru_remove_locked(dev, base);
    SW__TRACE(dev, SW_TRACE_LEASE, base, base->alloc_size, 0, base->exposed);
    base->last_use = ++dev->clock;
    sw__unpin_locked(dev, base);
    atomic_store_explicit(&l->h.dev, dev, memory_order_release);
    l->base = base;
    ptr->base = base->mem;
    ptr->offset = base->mem ? buf->offset : 0;
    *out = (sw_lease *)sw__handle_of(&sw__lease_pool, l);
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_buffer_expose(sw_buffer *h, sw_devmem *ptr, sw_lease **out)
{
    return expose(h, ptr, out, true);
}

SW_API int sw_buffer_expose_read(sw_buffer *h, sw_devmem *ptr,
                                 sw_lease **out)
{
    return expose(h, ptr, out, false);
}

SW_API int sw_lease_release(sw_lease *lease)
{
    if (lease == NULL)
        return SW_OK;
    for (;;) {
        sw__lease *l = sw__handle_lookup(&sw__lease_pool, lease);
        sw_device *dev = l ? atomic_load_explicit(&l->h.dev,
                                                  memory_order_acquire)
                           : NULL;
        if (!sw__device_valid(dev))
            return sw__errorf(SW_ERR_INVALID_HANDLE, "lease %p was released "
                              "or is not a spillway lease", (void *)lease);
        sw__lock(dev);
        if (!sw__handle_matches(&l->h, lease) ||
            atomic_load_explicit(&l->h.dev, memory_order_relaxed) != dev) {
            sw__unlock(dev);
            continue; /* released meanwhile: the lookup says so */
        }
        sw__buf *base = l->base;
        sw__pool_put(&sw__lease_pool, l);
        /* The holder's work on it is queued by now (spill.c's timeline). */
        base->last_use = ++dev->clock;
        if (--base->exposed == 0 && base->state == SW_RESIDENT &&
            !base->external && base->mem != 0)
            sw__lru_insert_locked(dev, base);
        SW__TRACE(dev, SW_TRACE_LEASE_RELEASE, base, base->alloc_size, 0,
                  base->exposed);
        sw__maybe_release_locked(dev, base);
        sw__unlock(dev);
        return SW_OK;
    }
}
