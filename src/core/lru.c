/*
 * lru.c -- the spilling order: a lazy min-heap of the device's buffers
 * keyed by each one's last use.
 *
 * A use only advances the buffer's counter (the warm path touches no
 * shared structure); the heap key is brought up to date when the buffer
 * reaches the top.  Keys never exceed true last-use values, so a top whose
 * key is current is the least recently used buffer: exact LRU at
 * O(log n) per stale entry met, paid only when spilling (spill.c).
 */
#include "core/internal.h"

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

int sw__lru_reserve_locked(sw_device *dev, size_t n)
{
    sw__assert_locked(dev);
    if (dev->props.no_spill || dev->heap_cap >= n)
        return SW_OK;
    size_t cap = dev->heap_cap ? dev->heap_cap : 1024;
    while (cap < n)
        cap *= 2;
    sw__buf **h = sw__realloc(dev->heap, cap * sizeof *h);
    if (h == NULL)
        return sw__errorf(SW_ERR_HOST_OOM, "%s: no host memory for the "
                          "spilling order of %zu buffers", dev->name, n);
    dev->heap = h;
    dev->heap_cap = cap;
    return SW_OK;
}

void sw__lru_insert_locked(sw_device *dev, sw__buf *b)
{
    sw__assert_locked(dev);
    if (dev->props.no_spill)
        return; /* nothing to spill to: never a victim */
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

/* The least recently used buffer in the heap, removed from it; NULL when
 * the heap is empty.  Stale keys are refreshed on the way. */
sw__buf *sw__lru_pop_locked(sw_device *dev)
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
