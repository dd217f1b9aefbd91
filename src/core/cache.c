/*
 * cache.c -- freed device blocks kept for reuse, by exact rounded size.
 *
 * A hash of buckets finds a block of the requested size in O(1); a second
 * list keeps them in age order, so that trimming for a budget or under
 * pressure gives back the oldest first.  Frees are stream-ordered, so a
 * cached block is safe for any work queued later on the default queue
 * (other queues are ordered by queue.c before memory reaches the cache).
 */
#include "core/internal.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * The cache
 * ---------------------------------------------------------------------- */

void sw__cache_init(sw__cache *c) { memset(c, 0, sizeof *c); }

static size_t bucket_of(size_t size)
{
    uint64_t h = (uint64_t)(size / SW_ALLOC_GRANULARITY) *
                 UINT64_C(0x9E3779B97F4A7C15);
    return (size_t)(h >> 54) & (SW__CACHE_BUCKETS - 1);
}

static void cache_unlink(sw__cache *c, sw__cblock *b)
{
    size_t k = bucket_of(b->size);
    if (b->bprev)
        b->bprev->bnext = b->bnext;
    else
        c->bucket[k] = b->bnext;
    if (b->bnext)
        b->bnext->bprev = b->bprev;
    if (b->oprev)
        b->oprev->onext = b->onext;
    else
        c->oldest = b->onext;
    if (b->onext)
        b->onext->oprev = b->oprev;
    else
        c->newest = b->oprev;
    c->count--;
}

/* A record no longer in use: kept for the next put, up to a bound. */
static void record_put(sw__cache *c, sw__cblock *b)
{
    if (c->nspare >= SW__CACHE_SPARE) {
        sw__free(b);
        return;
    }
    b->bnext = c->spare;
    c->spare = b;
    c->nspare++;
}

/* Takes a cached block of exactly size bytes, the most recently freed. */
bool sw__cache_take_locked(sw_device *dev, size_t size, uintptr_t *mem)
{
    sw__assert_locked(dev);
    sw__cache *c = &dev->cache;
    for (sw__cblock *b = c->bucket[bucket_of(size)]; b; b = b->bnext) {
        if (b->size == size) {
            cache_unlink(c, b);
            *mem = b->mem;
            dev->cached -= size;
            record_put(c, b);
            SW__TRACE(dev, SW_TRACE_CACHE_HIT, NULL, size, 0, 0);
            return true;
        }
    }
    return false;
}

/* Keeps a freed block; without host memory for the record the block goes
 * straight back to the device instead. */
void sw__cache_put_locked(sw_device *dev, uintptr_t mem, size_t size)
{
    sw__assert_locked(dev);
    sw__cache *c = &dev->cache;
    sw__cblock *b = c->spare;
    if (b != NULL) {
        c->spare = b->bnext;
        c->nspare--;
    } else {
        b = sw__malloc(sizeof *b);
    }
    if (b == NULL) {
        (void)sw__b_free(dev, mem, size);
        return;
    }
    b->mem = mem;
    b->size = size;
    size_t k = bucket_of(size);
    b->bprev = NULL;
    b->bnext = c->bucket[k];
    if (b->bnext)
        b->bnext->bprev = b;
    c->bucket[k] = b;
    b->onext = NULL;
    b->oprev = c->newest;
    if (c->newest)
        c->newest->onext = b;
    else
        c->oldest = b;
    c->newest = b;
    c->count++;
    dev->cached += size;
    sw__note_reserved_locked(dev);
    SW__TRACE(dev, SW_TRACE_CACHE_PUT, NULL, size, 0, 0);
}

void sw__cache_trim_oldest_locked(sw_device *dev)
{
    sw__assert_locked(dev);
    sw__cblock *b = dev->cache.oldest;
    cache_unlink(&dev->cache, b);
    dev->cached -= b->size;
    SW__TRACE(dev, SW_TRACE_CACHE_TRIM, NULL, b->size, 0, 0);
    (void)sw__b_free(dev, b->mem, b->size);
    record_put(&dev->cache, b);
}

void sw__cache_drain_locked(sw_device *dev)
{
    sw__assert_locked(dev);
    while (dev->cache.oldest != NULL)
        sw__cache_trim_oldest_locked(dev);
    /* And the spare records: drained at close, and when memory is short. */
    sw__cache *c = &dev->cache;
    while (c->spare != NULL) {
        sw__cblock *b = c->spare;
        c->spare = b->bnext;
        sw__free(b);
    }
    c->nspare = 0;
}

SW_API int sw_empty_cache(sw_device *dev)
{
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    sw__cache_drain_locked(dev);
    sw__unlock(dev);
    return SW_OK;
}

