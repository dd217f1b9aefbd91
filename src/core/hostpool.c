/*
 * hostpool.c -- the host staging pool: the host memory spills copy into.
 *
 * Fresh host memory costs a page fault per page on first touch, which
 * halves the bandwidth of a spill into it (measured: 0.4-1.6 GB/s into
 * fresh memory against 8-10 GB/s into reused memory on this machine's
 * CPUs); on CUDA, only page-locked memory copies at full rate and
 * asynchronously.  So host copies come from a per-device pool of blocks
 * kept after use, page-locked where the backend can (its host_alloc op),
 * bounded in bytes (SPILLWAY_HOST_POOL, sw_set_host_pool_limit; default
 * 1 GiB) and kept across sw_empty_cache (sw_release_host_pool gives it
 * back).  Only idle blocks count against the bound: a block holding a
 * spilled buffer's data counts in `spilled`, and one kept as a clean
 * copy of a resident buffer in `host_copies` (spill.c).
 */
#include "core/internal.h"

#include <stdlib.h>

/* A block is reused for a request of at most its size and at least half
 * of it: close enough not to waste much, loose enough to hit often. */
static bool fits(size_t block, size_t want)
{
    return block >= want && block / 2 <= want;
}

static void block_free(sw_device *dev, void *p, size_t size, bool pinned)
{
    if (pinned)
        sw__b_host_free(dev, p, size);
    else
        sw__free(p);
}

void *sw__host_take_fit_locked(sw_device *dev, size_t size, size_t *got,
                               bool *pinned)
{
    sw__assert_locked(dev);
    sw__hostpool *hp = &dev->hpool;
    sw__hblock **best = NULL;
    for (sw__hblock **pp = &hp->head; *pp; pp = &(*pp)->next)
        if (fits((*pp)->size, size) &&
            (best == NULL || (*pp)->size < (*best)->size))
            best = pp;
    if (best == NULL)
        return NULL;
    sw__hblock *b = *best;
    *best = b->next;
    hp->bytes -= b->size;
    hp->count--;
    void *p = b->p;
    *got = b->size;
    *pinned = b->pinned;
    sw__free(b);
    return p;
}

void *sw__host_get_locked(sw_device *dev, size_t size, size_t *got,
                          bool *pinned)
{
    sw__assert_locked(dev);
    void *p = sw__host_take_fit_locked(dev, size, got, pinned);
    if (p != NULL)
        return p;
    /* A new block: page-locked where the backend offers it. */
    *pinned = false;
    if (sw__b_host_alloc(dev, size, &p) == SW_OK && p != NULL)
        *pinned = true;
    else
        p = sw__malloc(size);
    *got = size;
    return p;
}

void sw__host_put_locked(sw_device *dev, void *p, size_t size, bool pinned)
{
    sw__assert_locked(dev);
    if (p == NULL)
        return;
    sw__hostpool *hp = &dev->hpool;
    sw__hblock *b = NULL;
    if (hp->bytes + size <= hp->limit)
        b = sw__malloc(sizeof *b);
    if (b == NULL) { /* over the bound, or no memory for the record */
        block_free(dev, p, size, pinned);
        return;
    }
    b->p = p;
    b->size = size;
    b->pinned = pinned;
    b->next = hp->head;
    hp->head = b;
    hp->bytes += size;
    hp->count++;
}

void sw__host_pool_trim_locked(sw_device *dev, uint64_t limit)
{
    sw__assert_locked(dev);
    sw__hostpool *hp = &dev->hpool;
    while (hp->bytes > limit && hp->head != NULL) {
        sw__hblock *b = hp->head;
        hp->head = b->next;
        hp->bytes -= b->size;
        hp->count--;
        block_free(dev, b->p, b->size, b->pinned);
        sw__free(b);
    }
}

void sw__host_pool_drain_locked(sw_device *dev)
{
    sw__host_pool_trim_locked(dev, 0);
}

SW_API int sw_set_host_pool_limit(sw_device *dev, uint64_t bytes)
{
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    dev->hpool.limit = bytes;
    sw__host_pool_trim_locked(dev, bytes);
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_release_host_pool(sw_device *dev)
{
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    /* A restore's host block comes back to the pool when its copy in is
     * seen done, which may be long after the buffer looks RESIDENT (a
     * prefetch): released before that, the pool filled up again at the
     * next poll (a synchronize, a memory query).  So the copies in flight
     * that hold blocks are waited for first, without the lock. */
    for (;;) {
        sw__xfer_poll_locked(dev);
        sw__buf *b = dev->xfers;
        while (b != NULL && !(b->state == SW_RESIDENT && b->host != NULL &&
                              !b->hold_host))
            b = b->xnext;
        if (b == NULL)
            break;
        sw__xfer_settle_locked(dev, b); /* b may be gone after it */
    }
    /* The clean copies are host memory held for speed only: they go too
     * (their buffers' next eviction copies again, unless the spill file
     * holds their bytes). */
    (void)sw__clean_drop_locked(dev, UINT64_MAX, true, false);
    sw__host_pool_drain_locked(dev);
    sw__unlock(dev);
    return SW_OK;
}
