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

/* ------------------------------------------------------------------------
 * Per-thread batches
 *
 * Every allocation and free takes a slot and gives one back; with one
 * lock per pool, threads that allocate at once (a free-threaded Python's)
 * queued on it.  So each thread moves slots between itself and the pool
 * in batches: a get batch taken from the free list's head, a put batch
 * appended to its tail when full.  The pool lock is taken once per BATCH
 * gets or puts, and the order is kept: a freed slot still goes through
 * the whole FIFO and its quarantine before anyone reuses it (a thread
 * never takes back its own put batch).  A thread's batches go back to the
 * pool when it exits.
 * ---------------------------------------------------------------------- */

#define BATCH 16u
#define NPOOLS 8 /* above the largest sw__htype */

typedef struct {
    sw__pool *pool;
    sw__slot *get_head; /* in FIFO order, taken from the pool's head */
    unsigned nget;
    sw__slot *put_head, *put_tail; /* in the order they were freed */
    unsigned nput;
} tcache;

static _Thread_local tcache tl_cache[NPOOLS];
static pthread_key_t tl_key;
static pthread_once_t tl_once = PTHREAD_ONCE_INIT;
static bool tl_key_ok;

/* Under p->lock: a chain of n slots (head .. tail) to the free list's
 * tail. */
static void append_locked(sw__pool *p, sw__slot *head, sw__slot *tail,
                          size_t n)
{
    tail->free_next = NULL;
    if (p->free_tail)
        p->free_tail->free_next = head;
    else
        p->free_head = head;
    p->free_tail = tail;
    p->nfree += n;
}

static void flush_puts(tcache *c)
{
    if (c->nput == 0)
        return;
    pthread_mutex_lock(&c->pool->lock);
    append_locked(c->pool, c->put_head, c->put_tail, c->nput);
    pthread_mutex_unlock(&c->pool->lock);
    c->put_head = c->put_tail = NULL;
    c->nput = 0;
}

/* The thread's get batch back, at the head: they were next anyway. */
static void flush_gets(tcache *c)
{
    if (c->nget == 0)
        return;
    sw__slot *tail = c->get_head;
    while (tail->free_next != NULL)
        tail = tail->free_next;
    sw__pool *p = c->pool;
    pthread_mutex_lock(&p->lock);
    tail->free_next = p->free_head;
    if (p->free_head == NULL)
        p->free_tail = tail;
    p->free_head = c->get_head;
    p->nfree += c->nget;
    pthread_mutex_unlock(&p->lock);
    c->get_head = NULL;
    c->nget = 0;
}

static void tl_exit(void *arg)
{
    (void)arg;
    for (int t = 0; t < NPOOLS; t++) {
        tcache *c = &tl_cache[t];
        if (c->pool == NULL)
            continue;
        flush_puts(c);
        flush_gets(c);
    }
}

static void tl_init(void)
{
    tl_key_ok = pthread_key_create(&tl_key, tl_exit) == 0;
}

/* This thread's batches for p; NULL where no exit hook could be set (the
 * slots would be lost with the thread): then the pool is used directly. */
static tcache *cache_of(sw__pool *p)
{
    assert((unsigned)p->type < NPOOLS);
    tcache *c = &tl_cache[p->type];
    if (c->pool == p)
        return c;
    pthread_once(&tl_once, tl_init);
    if (!tl_key_ok || pthread_setspecific(tl_key, tl_cache) != 0)
        return NULL;
    c->pool = p;
    return c;
}

/* Under p->lock: up to want slots from the free list's head, leaving the
 * quarantine unless nothing else is left (the pool cannot grow). */
static sw__slot *take_locked(sw__pool *p, unsigned want, unsigned *got)
{
    if (p->nfree <= QUARANTINE + want)
        (void)pool_grow(p); /* without memory: the quarantine, below */
    size_t n = p->nfree > QUARANTINE + want ? want
               : p->nfree > QUARANTINE      ? p->nfree - QUARANTINE
               : p->nfree > 0               ? 1
                                            : 0;
    *got = (unsigned)n;
    if (n == 0)
        return NULL;
    sw__slot *head = p->free_head, *s = head;
    for (size_t i = 1; i < n; i++)
        s = s->free_next;
    p->free_head = s->free_next;
    if (p->free_head == NULL)
        p->free_tail = NULL;
    s->free_next = NULL;
    p->nfree -= n;
    return head;
}

void *sw__pool_get(sw__pool *p)
{
    /* Every handle is a host allocation to the fault injector, whether or
     * not the pool has to grow for it, so that each caller's HOST_OOM path
     * is reached deterministically. */
    if (sw__host_fault())
        return NULL;
    tcache *c = cache_of(p);
    sw__slot *s;
    if (c != NULL && c->nget > 0) {
        s = c->get_head;
        c->get_head = s->free_next;
        c->nget--;
    } else {
        unsigned got;
        pthread_mutex_lock(&p->lock);
        s = take_locked(p, c != NULL ? BATCH : 1, &got);
        pthread_mutex_unlock(&p->lock);
        if (s == NULL)
            return NULL;
        if (c != NULL) {
            c->get_head = s->free_next;
            c->nget = got - 1;
        }
    }
    s->free_next = NULL;
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
    s->free_next = NULL;
    tcache *c = cache_of(p);
    if (c == NULL) {
        pthread_mutex_lock(&p->lock);
        append_locked(p, s, s, 1);
        pthread_mutex_unlock(&p->lock);
        return;
    }
    if (c->put_tail)
        c->put_tail->free_next = s;
    else
        c->put_head = s;
    c->put_tail = s;
    if (++c->nput == BATCH)
        flush_puts(c);
}

uintptr_t sw__handle_of(const sw__pool *p, const void *obj)
{
    const sw__slot *s = obj;
    uint32_t g = atomic_load_explicit(&s->gen, memory_order_relaxed);
    assert(g & 1u);
    return ((uintptr_t)(g & SW__H_GEN_MASK) << SW__H_GEN_SHIFT) |
           ((uintptr_t)p->type << SW__H_TYPE_SHIFT) | (uintptr_t)s->index;
}
