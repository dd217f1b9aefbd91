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
    sw_peak_scope *s = dev->scope_last;
    if (s != NULL && dev->in_use > s->peak)
        s->peak = dev->in_use;
}

SW_API int sw_memory_info_get(sw_device *dev, sw_memory_info *out)
{
    if (out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL");
    memset(out, 0, sizeof *out);
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
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
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_reset_peak(sw_device *dev)
{
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    dev->peak = dev->in_use;
    sw__unlock(dev);
    return SW_OK;
}

/* Scope structs are never freed: ended ones wait in a FIFO behind at
 * least SCOPE_QUARANTINE others before reuse, so that an ended scope
 * handle is detected by its magic rather than read after free. */
#define SCOPE_QUARANTINE 64u

static pthread_mutex_t scope_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static sw_peak_scope *pool_head, *pool_tail;
static size_t pool_len;

static sw_peak_scope *scope_get(void)
{
    sw_peak_scope *s = NULL;
    pthread_mutex_lock(&scope_pool_lock);
    if (pool_len > SCOPE_QUARANTINE) {
        s = pool_head;
        pool_head = s->next;
        if (pool_head == NULL)
            pool_tail = NULL;
        pool_len--;
    }
    pthread_mutex_unlock(&scope_pool_lock);
    if (s == NULL)
        s = calloc(1, sizeof *s);
    return s;
}

static void scope_put(sw_peak_scope *s)
{
    s->magic = 0;
    s->dev = NULL;
    s->prev = s->next = NULL;
    pthread_mutex_lock(&scope_pool_lock);
    if (pool_tail)
        pool_tail->next = s;
    else
        pool_head = s;
    pool_tail = s;
    pool_len++;
    pthread_mutex_unlock(&scope_pool_lock);
}

SW_API int sw_peak_scope_begin(sw_device *dev, sw_peak_scope **out)
{
    if (out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    sw_peak_scope *s = scope_get();
    if (s == NULL)
        return sw__errorf(SW_ERR_HOST_OOM, "no host memory for a scope");
    int rc = sw__device_enter(dev);
    if (rc != SW_OK) {
        scope_put(s);
        return rc;
    }
    s->next = NULL;
    s->dev = dev;
    __atomic_store_n(&s->magic, SW__SCOPE_MAGIC, __ATOMIC_RELEASE);
    s->peak = dev->in_use;
    s->prev = dev->scope_last;
    if (dev->scope_last)
        dev->scope_last->next = s;
    else
        dev->scope_first = s;
    dev->scope_last = s;
    sw__unlock(dev);
    *out = s;
    return SW_OK;
}

/* Validates a scope and takes its device's lock.  The magic is read
 * without the lock first (scope memory is type-stable), then again under
 * it, since scopes end under the lock. */
static int scope_enter(sw_peak_scope *s)
{
    if (s == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "scope is NULL");
    sw_device *dev = __atomic_load_n(&s->dev, __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) != SW__SCOPE_MAGIC ||
        dev == NULL)
        return sw__errorf(SW_ERR_INVALID_HANDLE, "%p is not an open peak "
                          "scope", (void *)s);
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    if (s->magic != SW__SCOPE_MAGIC || s->dev != dev) {
        sw__unlock(dev);
        return sw__errorf(SW_ERR_INVALID_HANDLE, "%p is not an open peak "
                          "scope", (void *)s);
    }
    return SW_OK;
}

/* The peak over s's lifetime so far: its own, and the partial peaks of the
 * scopes opened after it, which took the updates since they began. */
static uint64_t scope_peak_locked(const sw_peak_scope *s)
{
    uint64_t p = s->peak;
    for (const sw_peak_scope *t = s->next; t; t = t->next)
        if (t->peak > p)
            p = t->peak;
    return p;
}

SW_API int sw_peak_scope_peak(sw_peak_scope *scope, uint64_t *peak)
{
    if (peak == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "peak is NULL");
    *peak = 0;
    int rc = scope_enter(scope);
    if (rc != SW_OK)
        return rc;
    *peak = scope_peak_locked(scope);
    sw__unlock(scope->dev);
    return SW_OK;
}

SW_API int sw_peak_scope_end(sw_peak_scope *scope, uint64_t *peak)
{
    if (peak != NULL)
        *peak = 0;
    int rc = scope_enter(scope);
    if (rc != SW_OK)
        return rc;
    sw_device *dev = scope->dev;
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
    __atomic_store_n(&scope->magic, 0, __ATOMIC_RELEASE);
    sw__unlock(dev);
    scope_put(scope);
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
