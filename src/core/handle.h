/*
 * handle.h -- the handle pool's interface (handle.c): included by
 * internal.h first, as every core struct below is pooled.
 */
#ifndef SW_CORE_HANDLE_H
#define SW_CORE_HANDLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------
 * Handles (handle.c)
 *
 * Every handle the API gives out (buffer, lease, queue, event, peak scope)
 * is an encoded slot index, type and generation, never a pointer; the
 * core's own structs are internal.h's sw__ types, reached only by
 * decoding and checking a handle.  Devices are the exception: they are never freed
 * and are checked by address (device.c).
 * ---------------------------------------------------------------------- */

#if UINTPTR_MAX > 0xFFFFFFFFu
#define SW__H_INDEX_BITS 28
#define SW__H_TYPE_BITS 4
#define SW__H_GEN_BITS 32
#else
#define SW__H_INDEX_BITS 20
#define SW__H_TYPE_BITS 3
#define SW__H_GEN_BITS 9
#endif
#define SW__H_TYPE_SHIFT SW__H_INDEX_BITS
#define SW__H_GEN_SHIFT (SW__H_INDEX_BITS + SW__H_TYPE_BITS)
#define SW__H_INDEX_MASK ((UINT32_C(1) << SW__H_INDEX_BITS) - 1)
#define SW__H_TYPE_MASK ((UINT32_C(1) << SW__H_TYPE_BITS) - 1)
#define SW__H_GEN_MASK                                                        \
    ((uint32_t)((UINT64_C(1) << SW__H_GEN_BITS) - 1))

typedef enum sw__htype {
    SW__H_BUFFER = 1,
    SW__H_LEASE = 2,
    SW__H_QUEUE = 3,
    SW__H_EVENT = 4,
    SW__H_SCOPE = 5,
} sw__htype;

/* The header every pooled struct starts with. */
typedef struct sw__slot {
    /* Odd while a handle to the object is live; advanced when that handle
     * dies and again when the slot is reused. */
    _Atomic uint32_t gen;
    uint32_t index;
    /* The device the object lives on (NULL for events): read before the
     * lock to know which lock to take, so it survives reuse atomically. */
    _Atomic(sw_device *) dev;
    struct sw__slot *free_next; /* the pool's free FIFO */
} sw__slot;

#define SW__POOL_CHUNKS 24

typedef struct sw__pool {
    sw__htype type;
    size_t size; /* of the pooled struct */
    size_t keep; /* bytes from its start not zeroed on reuse */
    void (*init)(void *obj); /* once per slot, when its chunk is made */
    pthread_mutex_t lock;    /* a leaf lock: the free list, growth */
    sw__slot *free_head, *free_tail;
    size_t nfree;
    _Atomic uint32_t nslots;
    char *_Atomic chunks[SW__POOL_CHUNKS];
} sw__pool;

/* Adaptive where glibc has it: threads taking and giving back their
 * batches at once wait a few hundred nanoseconds, less than a futex
 * sleep and wake-up costs (bench_lock, two devices). */
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
#define SW__POOL_LOCK_INIT PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
#else
#define SW__POOL_LOCK_INIT PTHREAD_MUTEX_INITIALIZER
#endif

#define SW__POOL_INIT(t, type_, keep_, init_)                                 \
    {                                                                         \
        .type = (t), .size = sizeof(type_), .keep = (keep_),                  \
        .init = (init_), .lock = SW__POOL_LOCK_INIT,                          \
    }

/* A new object with a live handle (its payload past `keep` zeroed); NULL
 * without host memory. */
void *sw__pool_get(sw__pool *p);
/* The object's handle dies (later lookups fail); the object stays. */
void sw__handle_kill(void *obj);
/* Kill the handle if live and return the slot to the pool. */
void sw__pool_put(sw__pool *p, void *obj);
/* The handle of a live object. */
uintptr_t sw__handle_of(const sw__pool *p, const void *obj);
static inline bool sw__slot_live(const sw__slot *s)
{
    return atomic_load_explicit(&s->gen, memory_order_acquire) & 1u;
}

/* Whether handle (already decoded to s) still names s's live object. */
static inline bool sw__handle_matches(const sw__slot *s, const void *handle)
{
    uint32_t g = atomic_load_explicit(&s->gen, memory_order_acquire);
    return (g & 1u) &&
           (g & SW__H_GEN_MASK) ==
               (uint32_t)(((uintptr_t)handle >> SW__H_GEN_SHIFT) &
                          SW__H_GEN_MASK);
}

/* Chunk k of a pool holds 64 << k slots (handle.c). */
#define SW__POOL_FIRST_SHIFT 6

/* The object a handle names while the handle is live, else NULL.  Reads
 * nothing outside the pool whatever the value.  Inline: it is on every
 * call's path, and every launch argument's. */
static inline void *sw__handle_lookup(const sw__pool *p, const void *handle)
{
    uintptr_t h = (uintptr_t)handle;
    if (((h >> SW__H_TYPE_SHIFT) & SW__H_TYPE_MASK) != p->type)
        return NULL;
    uint32_t index = (uint32_t)(h & SW__H_INDEX_MASK);
    if (index >= atomic_load_explicit(&p->nslots, memory_order_acquire))
        return NULL;
    uint32_t i = index + (1u << SW__POOL_FIRST_SHIFT);
    unsigned top = 31u - (unsigned)__builtin_clz(i);
    char *c = atomic_load_explicit(&p->chunks[top - SW__POOL_FIRST_SHIFT],
                                   memory_order_relaxed);
    sw__slot *s = (sw__slot *)(c + (size_t)(i - (1u << top)) * p->size);
    return sw__handle_matches(s, handle) ? s : NULL;
}

extern sw__pool sw__buf_pool, sw__lease_pool, sw__queue_pool,
    sw__event_pool, sw__scope_pool;

#endif /* SW_CORE_HANDLE_H */
