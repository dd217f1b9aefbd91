/*
 * clean.c -- clean copies: a restored buffer keeps the host copy it came
 * from until something writes it (sw__dirty_locked), and evicting it
 * meanwhile copies nothing; the copies are the first host memory given up
 * when host memory is short.  Under a host budget their host blocks go to
 * the spill file instead (disk.c), and a copy read back from there keeps
 * its extent: a clean copy holds its bytes in its host block, or in the
 * file (disk_kept), or both.
 */
#include "core/internal.h"

/* ------------------------------------------------------------------------
 * Clean copies
 * ---------------------------------------------------------------------- */

/* Evict a clean base: its device memory goes (to the cache), its host
 * block stays as its only copy -- or, without one, its extent of the
 * spill file, which held its bytes all along: it is on disk then, with
 * nothing copied or written.  pre: unpinned, not moving, out of the heap,
 * other queues' work on it ordered before the default queue's. */
void sw__evict_clean_locked(sw_device *dev, sw__buf *b)
{
    assert(b->clean && b->state == SW_RESIDENT &&
           (b->host != NULL || b->disk_kept));
    uintptr_t mem = b->mem;
    bool host = b->host != NULL;
    b->clean = false;
    b->mem = 0;
    b->state = SW_SPILLED;
    if (host) {
        dev->host_copies -= b->alloc_size;
    } else {
        b->disk_kept = false;
        b->on_disk = true;
        dev->spilled_disk += b->alloc_size;
    }
    dev->in_use -= b->alloc_size;
    dev->spilled += b->alloc_size;
    dev->spills++;
    dev->clean_evictions++;
    SW__TRACE(dev, SW_TRACE_SPILL_BEGIN, b, b->alloc_size, 0, host ? 3 : 4);
    SW__TRACE(dev, SW_TRACE_SPILL_END, b, b->alloc_size, 0, host ? 3 : 4);
    sw__cache_put_locked(dev, mem, b->alloc_size);
}

/* The host block of a clean copy goes; aux as SW_TRACE_HOST_COPY_DROP's. */
static void host_copy_end_locked(sw_device *dev, sw__buf *base, uint64_t aux)
{
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
    assert(base->clean ? base->state == SW_RESIDENT : base->disk_kept);
    if (base->clean) {
        bool host = base->host != NULL;
        base->clean = false;
        if (host)
            host_copy_end_locked(dev, base, 0);
    }
    sw__disk_forget_locked(dev, base);
}

void sw__host_copy_drop_locked(sw_device *dev, sw__buf *b)
{
    sw__assert_locked(dev);
    assert(sw__host_clean(b) && !b->hold_host && b->xfer == NULL);
    /* Clean still with its extent of the file, else no more. */
    b->clean = b->disk_kept;
    host_copy_end_locked(dev, b, 1);
}

uint64_t sw__clean_drop_locked(sw_device *dev, uint64_t need, bool drain,
                               bool file_only)
{
    sw__assert_locked(dev);
    uint64_t got = 0;
    /* Those whose bytes the spill file holds too first: nothing is lost,
     * the buffer stays clean.  Then most recently used first: the
     * likeliest to stay resident a while, so the least likely to be
     * evicted (copy-free) soon.  The live list is in allocation order,
     * newest first: near enough. */
    for (int pass = 0; pass < (file_only ? 1 : 2) && got < need; pass++) {
        for (sw__buf *b = dev->live; b != NULL && got < need;
             b = b->live_next) {
            if (!sw__host_clean(b) || b->hold_host || b->xfer != NULL ||
                b->moving || (pass == 0 && !b->disk_kept))
                continue;
            got += b->alloc_size;
            sw__host_copy_drop_locked(dev, b);
        }
    }
    /* The blocks went to the pool; with drain, to the system with it (what
     * is short is the system's memory, not the budget's). */
    if (got > 0 && drain)
        sw__host_pool_drain_locked(dev);
    return got;
}
