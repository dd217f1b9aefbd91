/*
 * spill.c -- spilling: the LRU heap, choosing victims, copying buffers out
 * to host memory and back.
 *
 * Victims are chosen with a lazy min-heap keyed by each buffer's last use.
 * A use only advances the buffer's counter (the warm path touches no
 * shared structure); the heap key is brought up to date when the buffer
 * reaches the top.  Keys never exceed true last-use values, so a top whose
 * key is current is the least recently used buffer: exact LRU at
 * O(log n) per stale entry met, paid only when spilling.
 */
#include "core/internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------
 * The heap
 * ---------------------------------------------------------------------- */

static void heap_set(sw_device *dev, size_t i, sw__buf *b)
{
    dev->heap[i] = b;
    b->heap_idx = i;
}

static void sift_up(sw_device *dev, size_t i)
{
    sw__buf *b = dev->heap[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (dev->heap[p]->heap_key <= b->heap_key)
            break;
        heap_set(dev, i, dev->heap[p]);
        i = p;
    }
    heap_set(dev, i, b);
}

static void sift_down(sw_device *dev, size_t i)
{
    sw__buf *b = dev->heap[i];
    size_t n = dev->heap_len;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && dev->heap[c + 1]->heap_key < dev->heap[c]->heap_key)
            c++;
        if (b->heap_key <= dev->heap[c]->heap_key)
            break;
        heap_set(dev, i, dev->heap[c]);
        i = c;
    }
    heap_set(dev, i, b);
}

void sw__lru_insert_locked(sw_device *dev, sw__buf *b)
{
    sw__assert_locked(dev);
    assert(b->heap_idx == SW__NOT_IN_HEAP);
    assert(b->state == SW_RESIDENT && !b->external && b->mem != 0);
    if (dev->heap_len == dev->heap_cap) {
        size_t cap = dev->heap_cap ? dev->heap_cap * 2 : 1024;
        sw__buf **h = sw__realloc(dev->heap, cap * sizeof *h);
        if (h == NULL)
            return; /* stays unspillable; nothing is lost */
        dev->heap = h;
        dev->heap_cap = cap;
    }
    b->heap_key = b->last_use;
    dev->heap_bytes += b->alloc_size;
    dev->heap[dev->heap_len] = b;
    b->heap_idx = dev->heap_len++;
    /* A new or just-used buffer has the largest key: no movement. */
    sift_up(dev, b->heap_idx);
}

void sw__lru_remove_locked(sw_device *dev, sw__buf *b)
{
    sw__assert_locked(dev);
    size_t i = b->heap_idx;
    if (i == SW__NOT_IN_HEAP)
        return;
    b->heap_idx = SW__NOT_IN_HEAP;
    dev->heap_bytes -= b->alloc_size;
    sw__buf *last = dev->heap[--dev->heap_len];
    if (i == dev->heap_len)
        return;
    heap_set(dev, i, last);
    if (i > 0 && dev->heap[(i - 1) / 2]->heap_key > last->heap_key)
        sift_up(dev, i);
    else
        sift_down(dev, i);
}

/* ------------------------------------------------------------------------
 * Buffers in motion
 *
 * A spill or restore releases the device lock while it waits for its
 * copy; the buffer is marked `moving` meanwhile, and anyone who needs it
 * waits on dev->moved, so two threads never move one buffer at once and
 * nobody sees it half moved.
 * ---------------------------------------------------------------------- */

void sw__cond_wait_locked(sw_device *dev)
{
    sw__assert_locked(dev);
    dev->waiting++;
    atomic_store_explicit(&dev->owned, 0, memory_order_relaxed);
    pthread_cond_wait(&dev->moved, &dev->lock);
    atomic_store_explicit(&dev->owner, pthread_self(), memory_order_relaxed);
    atomic_store_explicit(&dev->owned, 1, memory_order_relaxed);
    dev->waiting--;
}

void sw__wait_stable_locked(sw_device *dev, sw__buf *base)
{
    sw__assert_locked(dev);
    while (base->moving)
        sw__cond_wait_locked(dev);
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------------
 * Host copies
 * ---------------------------------------------------------------------- */

void *sw__host_get_locked(sw_device *dev, size_t size)
{
    sw__assert_locked(dev);
    for (size_t i = 0; i < dev->hpool_n; i++) {
        if (dev->hpool[i].size == size) {
            void *p = dev->hpool[i].p;
            dev->hpool_bytes -= size;
            dev->hpool[i] = dev->hpool[--dev->hpool_n];
            return p;
        }
    }
    return sw__malloc(size);
}

void sw__host_put_locked(sw_device *dev, void *p, size_t size)
{
    sw__assert_locked(dev);
    if (p == NULL)
        return;
    if (dev->hpool_n == SW__HPOOL_MAX ||
        dev->hpool_bytes + size > SW__HPOOL_BYTES) {
        sw__free(p);
        return;
    }
    dev->hpool[dev->hpool_n].p = p;
    dev->hpool[dev->hpool_n].size = size;
    dev->hpool_n++;
    dev->hpool_bytes += size;
}

void sw__host_pool_drain_locked(sw_device *dev)
{
    sw__assert_locked(dev);
    while (dev->hpool_n > 0)
        sw__free(dev->hpool[--dev->hpool_n].p);
    dev->hpool_bytes = 0;
}

/* Waits for the default queue with the lock released.  Used before timing
 * a copy, so that the time is the copy's alone; an error here surfaces
 * again in the copy's own wait. */
static void drain_queue_locked(sw_device *dev)
{
    (void)sw__wait_idle_locked(dev);
}

/* ------------------------------------------------------------------------
 * Spilling
 * ---------------------------------------------------------------------- */

/* The least recently used buffer in the heap, removed from it; NULL when
 * the heap is empty.  Stale keys are refreshed on the way. */
static sw__buf *pop_lru_locked(sw_device *dev)
{
    while (dev->heap_len > 0) {
        sw__buf *b = dev->heap[0];
        if (b->heap_key != b->last_use) {
            b->heap_key = b->last_use;
            sift_down(dev, 0);
            continue;
        }
        sw__lru_remove_locked(dev, b);
        return b;
    }
    return NULL;
}

int sw__spill_locked(sw_device *dev, uint64_t need, uint64_t *spilled)
{
    sw__assert_locked(dev);
    *spilled = 0;
    sw__buf *victims = NULL, *skipped = NULL, *b;
    uint64_t total = 0;
    int rc = SW_OK;

    /* Choose victims, least recently used first, and queue their copies
     * out: all of them behind the work already queued, one wait for all.
     * spill_seconds counts from when that earlier work is done, so it is
     * the copies' own time. */
    if (dev->heap_len == 0)
        return SW_OK;
    drain_queue_locked(dev);
    double t0 = now_seconds();
    while (total < need && (b = pop_lru_locked(dev)) != NULL) {
        if (b->pins > 0) {
            b->tmp_next = skipped;
            skipped = b;
            continue;
        }
        /* Other queues' work on it first (never blocks). */
        if (b->qmask != 0 && (rc = sw__order_use_locked(dev, b, NULL))) {
            b->tmp_next = skipped;
            skipped = b;
            break;
        }
        void *host = sw__host_get_locked(dev, b->size);
        if (host == NULL) {
            b->tmp_next = skipped;
            skipped = b;
            rc = sw__errorf(SW_ERR_HOST_OOM, "%s: no host memory to spill "
                            "%zu bytes", dev->name, b->size);
            break;
        }
        rc = sw__b_read(dev, host, b->mem, 0, b->size);
        if (rc != SW_OK) {
            sw__host_put_locked(dev, host, b->size);
            b->tmp_next = skipped;
            skipped = b;
            break;
        }
        b->host = host;
        b->moving = true;
        SW__TRACE(dev, SW_TRACE_SPILL_BEGIN, b, b->alloc_size, 0, 0);
        b->tmp_next = victims;
        victims = b;
        total += b->alloc_size;
    }
    while ((b = skipped) != NULL) {
        skipped = b->tmp_next;
        sw__lru_insert_locked(dev, b);
    }
    if (victims == NULL)
        return rc;

    /* Every copy out has ended when this returns, whatever it returns:
     * only then may a failed one's host copy go back to the pool. */
    int wrc = sw__wait_idle_locked(dev);
    double dt = now_seconds() - t0;

    while ((b = victims) != NULL) {
        victims = b->tmp_next;
        b->moving = false;
        if (wrc != SW_OK) {
            /* The copy out failed: the buffer stays resident, intact. */
            sw__host_put_locked(dev, b->host, b->size);
            b->host = NULL;
            sw__lru_insert_locked(dev, b);
            SW__TRACE(dev, SW_TRACE_SPILL_END, b, b->alloc_size, 0, 1);
            sw__maybe_release_locked(dev, b); /* freed meanwhile? */
            continue;
        }
        sw__cache_put_locked(dev, b->mem, b->alloc_size);
        b->mem = 0;
        b->state = SW_SPILLED;
        dev->in_use -= b->alloc_size;
        dev->spilled += b->alloc_size;
        SW__TRACE(dev, SW_TRACE_SPILL_END, b, b->alloc_size, 0, 0);
        dev->spills++;
        dev->spilled_bytes_total += b->size;
        *spilled += b->alloc_size;
        sw__maybe_release_locked(dev, b);
    }
    pthread_cond_broadcast(&dev->moved);
    if (wrc != SW_OK)
        return wrc;
    dev->spill_seconds += dt;
    return rc == SW_OK || *spilled > 0 ? SW_OK : rc;
}

/* ------------------------------------------------------------------------
 * Restoring
 * ---------------------------------------------------------------------- */

int sw__make_resident_locked(sw_device *dev, sw__buf *base)
{
    sw__assert_locked(dev);
    sw__wait_stable_locked(dev, base);
    if (base->state == SW_RESIDENT)
        return SW_OK;
    base->moving = true;
    base->pins++; /* alive, and never a victim of its own allocation */
    SW__TRACE(dev, SW_TRACE_RESTORE_BEGIN, base, base->alloc_size, 0, 0);
    uintptr_t mem = 0;
    double t0 = 0;
    int rc = sw__obtain_locked(dev, base->size, base->alloc_size, base->tag,
                               &mem);
    if (rc == SW_OK) {
        /* restore_seconds is the copy's own time: not making room (which
         * counts as spilling), not earlier work still queued. */
        drain_queue_locked(dev);
        t0 = now_seconds();
        rc = sw__b_write(dev, mem, 0, base->host, base->size);
        if (rc == SW_OK)
            rc = sw__wait_idle_locked(dev);
        if (rc != SW_OK)
            sw__cache_put_locked(dev, mem, base->alloc_size);
    }
    if (rc == SW_OK) {
        sw__host_put_locked(dev, base->host, base->size);
        base->host = NULL;
        base->mem = mem;
        base->state = SW_RESIDENT;
        dev->spilled -= base->alloc_size;
        sw__note_in_use_locked(dev, base->alloc_size);
        dev->restores++;
        dev->restored_bytes_total += base->size;
        dev->restore_seconds += now_seconds() - t0;
        base->last_use = ++dev->clock;
        if (base->exposed == 0)
            sw__lru_insert_locked(dev, base);
    }
    SW__TRACE(dev, SW_TRACE_RESTORE_END, base, base->alloc_size, 0,
              rc != SW_OK);
    /* On failure the host copy is kept: nothing is lost. */
    base->moving = false;
    pthread_cond_broadcast(&dev->moved);
    sw__unpin_locked(dev, base);
    return rc;
}
