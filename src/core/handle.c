/*
 * handle.c -- the one pool behind every handle type (buffers, leases,
 * queues, events, peak scopes).
 *
 * A handle is not a pointer: it encodes a slot index, the handle's type
 * and the slot's generation (see SW__H_* in internal.h), and every use
 * decodes and checks all three.  So a freed handle is reported as
 * SW_ERR_INVALID_HANDLE and never mistaken for another: a slot's
 * generation changes each time a handle to it dies and each time it is
 * reused, and a stale handle matches again only after 2^31 reuses of that
 * one slot (2^8 on 32-bit hosts); free slots are also reused in FIFO order
 * behind a quarantine, so that the same slot comes back as late as
 * possible.  A foreign value (a host pointer, another type's handle, a
 * device) fails the type or range check without anything being read
 * outside the pool.
 *
 * Slots live in chunks that are never freed (type-stable memory), so a
 * lookup may read a slot's generation without any lock while another
 * thread frees it; callers that act on the object re-check under the lock
 * that frees serialize on (the device lock for all but events, whose
 * references are atomic).  Chunk k holds 64 << k slots, so the chunk table
 * stays tiny (SW__POOL_CHUNKS pointers) and the index -> slot map is one
 * count-leading-zeros.
 */
#include "core/internal.h"

#include <string.h>

/* Slots kept free before any is reused. */
#define QUARANTINE 64u
#define FIRST_SHIFT SW__POOL_FIRST_SHIFT /* chunk 0 holds 64 slots */

/* Chunk k covers indexes [64 (2^k - 1), 64 (2^(k+1) - 1)). */
static inline unsigned chunk_of(uint32_t index, uint32_t *offset)
{
    uint32_t i = index + (1u << FIRST_SHIFT);
    unsigned top = 31u - (unsigned)__builtin_clz(i);
    *offset = i - (1u << top);
    return top - FIRST_SHIFT;
}

/* Under p->lock: one more chunk of free slots.  false without host
 * memory, or when the index space is full. */
static bool pool_grow(sw__pool *p)
{
    uint32_t n = atomic_load_explicit(&p->nslots, memory_order_relaxed);
    uint32_t off;
    unsigned k = chunk_of(n, &off);
    assert(off == 0);
    if (k >= SW__POOL_CHUNKS)
        return false;
    size_t count = (size_t)1 << (k + FIRST_SHIFT);
    if (n + count - 1 > SW__H_INDEX_MASK)
        return false;
    char *c = sw__calloc(count, p->size);
    if (c == NULL)
        return false;
    for (size_t i = 0; i < count; i++) {
        sw__slot *s = (sw__slot *)(c + i * p->size);
        s->index = n + (uint32_t)i;
        atomic_init(&s->gen, 0);
        if (p->init != NULL)
            p->init(s);
        s->free_next = NULL;
        if (p->free_tail)
            p->free_tail->free_next = s;
        else
            p->free_head = s;
        p->free_tail = s;
    }
    p->nfree += count;
    atomic_store_explicit(&p->chunks[k], c, memory_order_release);
    /* Published last: a lookup that sees the new count sees the chunk. */
    atomic_store_explicit(&p->nslots, n + (uint32_t)count,
                          memory_order_release);
    return true;
}

void *sw__pool_get(sw__pool *p)
{
    /* Every handle is a host allocation to the fault injector, whether or
     * not the pool has to grow for it, so that each caller's HOST_OOM path
     * is reached deterministically. */
    if (sw__host_fault())
        return NULL;
    pthread_mutex_lock(&p->lock);
    if (p->nfree <= QUARANTINE && !pool_grow(p) && p->nfree == 0) {
        pthread_mutex_unlock(&p->lock);
        return NULL;
    }
    sw__slot *s = p->free_head;
    p->free_head = s->free_next;
    if (p->free_head == NULL)
        p->free_tail = NULL;
    p->nfree--;
    s->free_next = NULL;
    pthread_mutex_unlock(&p->lock);
    /* Zero the payload (the header and anything init() set up that the
     * type keeps across reuse come before p->keep). */
    memset((char *)s + p->keep, 0, p->size - p->keep);
    /* Even -> odd: a new handle, unequal to every earlier one. */
    uint32_t g = atomic_load_explicit(&s->gen, memory_order_relaxed);
    atomic_store_explicit(&s->gen, g + 1, memory_order_release);
    return s;
}

void sw__handle_kill(void *obj)
{
    sw__slot *s = obj;
    uint32_t g = atomic_load_explicit(&s->gen, memory_order_relaxed);
    if (g & 1u)
        atomic_store_explicit(&s->gen, g + 1, memory_order_release);
}

void sw__pool_put(sw__pool *p, void *obj)
{
    sw__slot *s = obj;
    sw__handle_kill(s);
    pthread_mutex_lock(&p->lock);
    s->free_next = NULL;
    if (p->free_tail)
        p->free_tail->free_next = s;
    else
        p->free_head = s;
    p->free_tail = s;
    p->nfree++;
    pthread_mutex_unlock(&p->lock);
}

uintptr_t sw__handle_of(const sw__pool *p, const void *obj)
{
    const sw__slot *s = obj;
    uint32_t g = atomic_load_explicit(&s->gen, memory_order_relaxed);
    assert(g & 1u);
    return ((uintptr_t)(g & SW__H_GEN_MASK) << SW__H_GEN_SHIFT) |
           ((uintptr_t)p->type << SW__H_TYPE_SHIFT) | (uintptr_t)s->index;
}
