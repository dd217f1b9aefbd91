/*
 * clean.c -- clean copies: a restored buffer keeps the host copy it came
 * from until something writes it (sw__dirty_locked), and evicting it
 * meanwhile copies nothing; the copies are the first host memory given up.
 */
#include "core/internal.h"

/* ------------------------------------------------------------------------
 * Clean copies
 * ---------------------------------------------------------------------- */

/* Evict a clean base: its device memory goes (to the cache), its host
 * block stays as its only copy.  pre: unpinned, not moving, out of the
 * heap, other queues' work on it ordered before the default queue's. */
void sw__evict_clean_locked(sw_device *dev, sw__buf *b)
{
    assert(b->clean && b->state == SW_RESIDENT && b->host != NULL);
    uintptr_t mem = b->mem;
    b->clean = false;
    b->mem = 0;
    b->state = SW_SPILLED;
    dev->host_copies -= b->alloc_size;
    dev->in_use -= b->alloc_size;
    dev->spilled += b->alloc_size;
    dev->spills++;
    dev->clean_evictions++;
    SW__TRACE(dev, SW_TRACE_SPILL_BEGIN, b, b->alloc_size, 0, 3);
    SW__TRACE(dev, SW_TRACE_SPILL_END, b, b->alloc_size, 0, 3);
    sw__cache_put_locked(dev, mem, b->alloc_size);
}

/* The clean copy of base ends; aux as SW_TRACE_HOST_COPY_DROP's. */
static void clean_end_locked(sw_device *dev, sw__buf *base, uint64_t aux)
{
    base->clean = false;
    dev->host_copies -= base->alloc_size;
    SW__TRACE(dev, SW_TRACE_HOST_COPY_DROP, base, base->alloc_size, 0, aux);
    /* A block a copy in still reads goes back when that copy ends, and
     * one a held restore may go back to stays until the hold ends. */
    if (!base->hold_host && base->xfer == NULL) {
        sw__host_put_locked(dev, base->host, base->host_size,
                            base->host_pinned);
        base->host = NULL;
    }
}

void sw__dirty_slow_locked(sw_device *dev, sw__buf *base)
{
    sw__assert_locked(dev);
    assert(base->clean && base->state == SW_RESIDENT);
    clean_end_locked(dev, base, 0);
}

uint64_t sw__clean_drop_locked(sw_device *dev, uint64_t need, bool drain)
{
    sw__assert_locked(dev);
    uint64_t got = 0;
    /* Most recently used first: the likeliest to stay resident a while,
     * so the least likely to be evicted (copy-free) soon.  The live list
     * is in allocation order, newest first: near enough. */
    for (sw__buf *b = dev->live; b != NULL && got < need; b = b->live_next) {
        if (!b->clean || b->hold_host || b->xfer != NULL)
            continue;
        got += b->alloc_size;
        clean_end_locked(dev, b, 1);
    }
    /* The blocks went to the pool; with drain, to the system with it (what
     * is short is the system's memory, not the budget's). */
    if (got > 0 && drain)
        sw__host_pool_drain_locked(dev);
    return got;
}

