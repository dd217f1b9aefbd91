/*
 * stats.c -- accounting: memory info, peaks, nested peak scopes, budgets.
 */
#include "core/internal.h"

#include <stdlib.h>
#include <string.h>

/* Peak scopes form a list in the order they were opened.  Only the newest
 * open scope is updated as in_use grows (O(1) per allocation); when a scope
 * ends, its peak is folded into the scope opened just before it, and it
 * takes the partial peaks of the scopes opened after it that are still
 * open.  So every scope sees the peak of in_use over its own lifetime, in
 * any nesting and even if scopes end out of order. */

void sw__note_in_use_locked(sw_device *dev, uint64_t delta)
{
    sw__assert_locked(dev);
    dev->in_use += delta;
    if (dev->in_use > dev->peak)
        dev->peak = dev->in_use;
    sw__note_reserved_locked(dev);
    sw__scope *s = dev->scope_last;
    if (s != NULL && dev->in_use > s->peak)
        s->peak = dev->in_use;
}

void sw__memory_info_locked(sw_device *dev, sw_memory_info *out)
{
    sw__assert_locked(dev);
    memset(out, 0, sizeof *out);
    uint64_t dfree = 0, dtotal = 0;
    int known = 0;
    if (sw__b_mem_info(dev, &dfree, &dtotal, &known) != SW_OK) {
        dfree = 0;
        dtotal = dev->props.total;
        known = 0;
    }
    out->in_use = dev->in_use;
    out->peak = dev->peak;
    out->cached = dev->cached;
    out->spilled = dev->spilled;
    out->device_free = known ? dfree : 0;
    out->device_total = dtotal;
    out->device_free_known = known;
    out->budget = dev->budget;
    out->allocs = dev->allocs;
    out->frees = dev->frees;
    out->spills = dev->spills;
    out->restores = dev->restores;
    out->spilled_bytes_total = dev->spilled_bytes_total;
    out->restored_bytes_total = dev->restored_bytes_total;
    out->spill_seconds = dev->spill_seconds;
    out->restore_seconds = dev->restore_seconds;
    out->alloc_retries = dev->alloc_retries;
    out->ooms = dev->ooms;
    out->gc_runs = dev->gc_runs;
    out->peak_reserved = dev->peak_reserved;
    out->live_buffers = dev->live_count;
    out->host_pool = dev->hpool.bytes;
    out->host_pool_limit = dev->hpool.limit;
    out->host_copies = dev->host_copies;
    out->clean_evictions = dev->clean_evictions;
    out->host_budget = dev->host_budget;
    out->spilled_disk = dev->spilled_disk;
    out->disk_write_bytes = dev->disk_write_bytes;
    out->disk_read_bytes = dev->disk_read_bytes;
    out->disk_write_seconds = dev->disk_write_seconds;
    out->disk_read_seconds = dev->disk_read_seconds;
}

SW_API int sw_memory_info_get(sw_device *dev, sw_memory_info *out)
{
    if (out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL");
    memset(out, 0, sizeof *out);
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    /* Copies done count in the figures now. */
    if (dev->xfers != NULL || dev->xfer_orphans != NULL)
        sw__xfer_poll_locked(dev);
    sw__memory_info_locked(dev, out);
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_reset_peak(sw_device *dev)
{
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    dev->peak = dev->in_use;
    dev->peak_reserved = dev->in_use + dev->cached;
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_reset_counters(sw_device *dev)
{
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    dev->allocs = dev->frees = dev->spills = dev->restores = 0;
    dev->clean_evictions = 0;
    dev->disk_write_bytes = dev->disk_read_bytes = 0;
    dev->disk_write_seconds = dev->disk_read_seconds = 0;
    dev->spilled_bytes_total = dev->restored_bytes_total = 0;
    dev->spill_seconds = dev->restore_seconds = 0;
    dev->alloc_retries = dev->ooms = dev->gc_runs = 0;
    dev->counters_epoch++;
    sw__unlock(dev);
    return SW_OK;
}

void sw__snapshot_locked(sw_device *dev, sw_buffer_info *out, size_t cap,
                         size_t *count)
{
    sw__assert_locked(dev);
    size_t i = 0;
    for (const sw__buf *b = dev->live; b != NULL; b = b->live_next, i++) {
        if (i >= cap)
            continue;
        sw_buffer_info *o = &out[i];
        memset(o, 0, sizeof *o);
        o->id = b->id;
        o->size = b->size;
        o->alloc_size = b->alloc_size;
        o->state = (sw_buffer_state)b->state;
        o->external = b->external;
        o->moving = b->moving;
        o->pins = b->pins;
        o->leases = b->exposed;
        o->views = b->children;
        o->handles = sw__slot_live(&b->h) ? b->user_refs : 0;
        o->last_use = b->last_use;
        o->queues = b->qmask & ~SW__QMASK_RESTORE; /* queues only */
        memcpy(o->tag, b->tag, sizeof o->tag);
        o->on_disk = b->state == SW_SPILLED && b->on_disk;
        o->host_copy = b->state == SW_RESIDENT && sw__host_clean(b);
    }
    *count = i;
}

SW_API int sw_memory_snapshot(sw_device *dev, sw_buffer_info *out,
                              size_t cap, size_t *count)
{
    if (count == NULL || (out == NULL && cap > 0))
        return sw__errorf(SW_ERR_INVALID_ARG, "count is NULL, or out is "
                          "NULL with cap %zu", cap);
    *count = 0;
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    sw__snapshot_locked(dev, out, cap, count);
    sw__unlock(dev);
    return SW_OK;
}

/* Scope structs come from the handle pool (handle.c): an ended scope's
 * handle is reported, never read after free or taken for another. */
sw__pool sw__scope_pool =
    SW__POOL_INIT(SW__H_SCOPE, sw__scope, sizeof(sw__slot), NULL);

SW_API int sw_peak_scope_begin(sw_device *dev, sw_peak_scope **out)
{
    if (out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    sw__scope *s = sw__pool_get(&sw__scope_pool);
    if (s == NULL) {
        sw__unlock(dev);
        return sw__errorf(SW_ERR_HOST_OOM, "no host memory for a scope");
    }
    atomic_store_explicit(&s->h.dev, dev, memory_order_release);
    s->peak = dev->in_use;
    s->prev = dev->scope_last;
    if (dev->scope_last)
        dev->scope_last->next = s;
    else
        dev->scope_first = s;
    dev->scope_last = s;
    *out = (sw_peak_scope *)sw__handle_of(&sw__scope_pool, s);
    sw__unlock(dev);
    return SW_OK;
}

/* Decodes a scope handle and takes its device's lock.  Checked again
 * under the lock, since scopes end under it. */
static int scope_enter(const sw_peak_scope *h, sw__scope **out,
                       sw_device **devp)
{
    *out = NULL;
    *devp = NULL;
    if (h == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "scope is NULL");
    for (;;) {
        sw__scope *s = sw__handle_lookup(&sw__scope_pool, h);
        sw_device *dev = s ? atomic_load_explicit(&s->h.dev,
                                                  memory_order_acquire)
                           : NULL;
        if (!sw__device_valid(dev))
            return sw__errorf(SW_ERR_INVALID_HANDLE, "%p is not an open "
                              "peak scope", (const void *)h);
        int rc = sw__device_enter(dev);
        if (rc != SW_OK)
            return rc;
        if (sw__handle_matches(&s->h, h) &&
            atomic_load_explicit(&s->h.dev, memory_order_relaxed) == dev) {
            *out = s;
            *devp = dev;
            return SW_OK;
        }
        sw__unlock(dev); /* ended meanwhile: the lookup says so */
    }
}

/* The peak over s's lifetime so far: its own, and the partial peaks of the
 * scopes opened after it, which took the updates since they began. */
static uint64_t scope_peak_locked(const sw__scope *s)
{
    uint64_t p = s->peak;
    for (const sw__scope *t = s->next; t; t = t->next)
        if (t->peak > p)
            p = t->peak;
    return p;
}

SW_API int sw_peak_scope_peak(sw_peak_scope *h, uint64_t *peak)
{
    if (peak == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "peak is NULL");
    *peak = 0;
    sw__scope *scope;
    sw_device *dev;
    int rc = scope_enter(h, &scope, &dev);
    if (rc != SW_OK)
        return rc;
    *peak = scope_peak_locked(scope);
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_peak_scope_end(sw_peak_scope *h, uint64_t *peak)
{
    if (peak != NULL)
        *peak = 0;
    sw__scope *scope;
    sw_device *dev;
    int rc = scope_enter(h, &scope, &dev);
    if (rc != SW_OK)
        return rc;
    uint64_t p = scope_peak_locked(scope);
    if (scope->prev) {
        if (p > scope->prev->peak)
            scope->prev->peak = p;
        scope->prev->next = scope->next;
    } else {
        dev->scope_first = scope->next;
    }
    if (scope->next)
        scope->next->prev = scope->prev;
    else
        dev->scope_last = scope->prev;
    sw__pool_put(&sw__scope_pool, scope);
    sw__unlock(dev);
    if (peak != NULL)
        *peak = p;
    return SW_OK;
}

SW_API int sw_set_memory_budget(sw_device *dev, uint64_t bytes)
{
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    dev->budget = bytes;
    SW__TRACE(dev, SW_TRACE_BUDGET, NULL, 0, 0, bytes);
    sw__enforce_budget_locked(dev);
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_get_memory_budget(sw_device *dev, uint64_t *bytes)
{
    if (bytes == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "bytes is NULL");
    *bytes = 0;
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    *bytes = dev->budget;
    sw__unlock(dev);
    return SW_OK;
}
