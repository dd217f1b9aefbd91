/*
 * lru.c -- the spilling order: a lazy min-heap of the device's buffers
 * keyed by each one's last use.
 *
 * A use only advances the buffer's counter (the warm path touches no
 * shared structure); the heap key is brought up to date when the buffer
 * reaches the top.  Keys never exceed true last-use values, so a top whose
 * key is current is the least recently used buffer: exact LRU at
 * O(log n) per stale entry met, paid only when spilling (spill.c).
 *
 * Clean copies (restored, unwritten since: spill.c) cost nothing to
 * evict, and the order uses that twice.  Among buffers used equally long
 * ago (the arguments of one launch are unpinned with one clock value), a
 * clean one goes first.  And a *cold* clean copy -- restored once in its
 * life, then used by a launch (an op, a copy, sw_launch_end) -- goes
 * before every other buffer, however recently used: it is what a backward
 * pass leaves behind, an activation brought back to be read once.  In LRU
 * order the consumed dirty buffers went instead, older, each copied out
 * once more: the demo moved 1.17 x its floor at a quarter budget (1.5 x
 * at half); cold clean copies first, 1.02 at 128 steps and 1.01 at 512.
 * A clean copy restored but not used yet (a prefetch's) is not cold:
 * evicted first, it came back again at its use.  Restored a second time,
 * a buffer is in LRU order for good (clean before dirty at the same age):
 * evicting a buffer read every step first, however cheap each time, would
 * bring it back every step while a dirty buffer never used again kept its
 * place -- so a buffer costs at most one restore more than LRU's.
 *
 * The owner may know better: sw_buffer_advise(SW_ADVISE_COLD) makes a
 * buffer cold until its next use, whether clean or not -- an activation a
 * backward pass has consumed, dead until the step ends.  A backward pass
 * after a forward one is a scan in reverse, where the buffers LRU keeps
 * (the ones just consumed) are the ones never needed again and the ones it
 * evicts (the next step's, the input read by every forward step) are the
 * ones needed next: the demo at 32 steps moved 1.08 x its floor in LRU
 * order, each of x[26] and x[0] copied out and back once more than
 * needed.
 *
 * Among cold buffers the clean go first, whatever their age: an advised
 * dirty one costs a copy out, and a backward pass's consumed clean copies
 * are there from its second step on.  (Age first, the demo's advised
 * dirty arrays went before every clean copy and it moved 1.15 x its floor
 * at 128 steps, against 1.02 in LRU order.)
 *
 * The key of a cold buffer is last_use, plus 2^62 for a dirty one; of any
 * other, last_use * 2 plus 1 for a dirty one, with the top bit set.  A buffer becomes clean only when
 * restored, before it enters the heap, and a write, a second restore or a
 * later use only raise its key: the heap is lazy about those.  The one
 * change that lowers it, the first use turning it cold, moves it up at
 * once (sw__lru_clean_use_locked).
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
    b->heap_key = sw__lru_key(b);
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
        uint64_t key = sw__lru_key(b);
        if (b->heap_key != key) {
            b->heap_key = key;
            sift_down(dev, 0);
            continue;
        }
        sw__lru_remove_locked(dev, b);
        return b;
    }
    return NULL;
}


void sw__lru_refresh_locked(sw_device *dev, sw__buf *b)
{
    sw__assert_locked(dev);
    if (b->heap_idx == SW__NOT_IN_HEAP)
        return;
    uint64_t key = sw__lru_key(b);
    /* A key that rose is left for the pop to refresh (the heap is lazy
     * about rises); one that fell moves up now. */
    if (key < b->heap_key) {
        b->heap_key = key;
        sift_up(dev, b->heap_idx);
    }
}

void sw__lru_clean_use_locked(sw_device *dev, sw__buf *b)
{
    sw__assert_locked(dev);
    if (b->clean_uses == 255)
        return;
    if (++b->clean_uses == 1 && b->nrestores == 1 &&
        b->heap_idx != SW__NOT_IN_HEAP) {
        b->heap_key = sw__lru_key(b);
        sift_up(dev, b->heap_idx);
    }
}
