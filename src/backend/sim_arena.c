/*
 * sim_arena.c -- the simulated device's memory: one fixed-size mapping of
 * host memory (mmap'd, MAP_NORESERVE, so an unused arena costs address
 * space only) carved by a real allocator, so that fragmentation,
 * out-of-memory and device_free behave as on a GPU; and the checker that
 * proves every byte range a command touches lies inside one live block.
 *
 * Best fit over two treaps that share their links: FREE blocks by (size,
 * address), LIVE and DOOMED blocks by address.  Blocks tile the arena
 * without gaps and are linked in address order, so that a free coalesces
 * with its neighbours in O(1) and an allocation or a lookup costs
 * O(log n) however many blocks there are.
 *
 * A block's life: FREE -> (alloc) LIVE -> (free queued) DOOMED -> (the
 * queue reaches the free) DYING -> poisoned with SIM__POISON -> FREE,
 * merged with its free neighbours.  A free on an idle queue goes straight
 * from LIVE to DYING.
 *
 * Locking: ar->mu guards the block list and both trees; it is a leaf and
 * is held only for tree work, never while poisoning (nobody else touches a
 * DYING block).  Block structs are host memory from sw__malloc, taken
 * outside the lock, and those merged away are kept (a few) for the next
 * split, so that alloc/free churn allocates nothing; the mapping itself is
 * mmap'd (device memory, not the library's bookkeeping).
 */
#include "backend.h"
#include "sim_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Block structs kept spare after merges, at most. */
#define SIM__SPARE_BLOCKS 64

/* ------------------------------------------------------------------------
 * Blocks
 * ---------------------------------------------------------------------- */

typedef enum sim__block_state {
    SIM__FREE,   /* in the free tree: may be handed out */
    SIM__LIVE,   /* in the live tree: allocated */
    SIM__DOOMED, /* in the live tree: allocated, its free is queued */
    SIM__DYING,  /* in no tree: being poisoned, then back to FREE */
} sim__block_state;

/* A block covers [addr, addr + size).  Blocks tile the arena without gaps;
 * prev/next link them in address order so a free can coalesce.  A block is
 * in at most one tree at a time, so the two trees share the links. */
struct sim__block {
    struct sim__block *prev, *next;
    struct sim__block *left, *right;
    uintptr_t addr;
    size_t size;
    uint32_t prio; /* treap heap key, fixed while in a tree */
    unsigned char state;
    sim__link link; /* its queued free, while DOOMED */
};

sim__link *sw__sim_block_link(sim__block *b) { return &b->link; }

sim__block *sw__sim_link_block(sim__link *l)
{
    return (sim__block *)(void *)((char *)l - offsetof(sim__block, link));
}


/* ------------------------------------------------------------------------
 * Treaps.  Iterative split/merge, so 10^6 blocks cost O(log n) per
 * operation with no recursion and no parent pointers.  Keys are unique:
 * addresses are, and (size, addr) pairs therefore too.
 * ---------------------------------------------------------------------- */

static int sim__before(const sim__block *x, const sim__block *y, int by_size)
{
    if (by_size && x->size != y->size)
        return x->size < y->size;
    return x->addr < y->addr;
}

/* Nodes of t before key go to *l, the others to *r. */
static void sim__split(sim__block *t, const sim__block *key, int by_size,
                       sim__block **l, sim__block **r)
{
    while (t) {
        if (sim__before(t, key, by_size)) {
            *l = t;
            l = &t->right;
            t = t->right;
        } else {
            *r = t;
            r = &t->left;
            t = t->left;
        }
    }
    *l = NULL;
    *r = NULL;
}

/* pre: every key of a is before every key of b. */
static sim__block *sim__merge(sim__block *a, sim__block *b)
{
    sim__block *root = NULL, **pp = &root;
    while (a && b) {
        if (a->prio > b->prio) {
            *pp = a;
            pp = &a->right;
            a = a->right;
        } else {
            *pp = b;
            pp = &b->left;
            b = b->left;
        }
    }
    *pp = a ? a : b;
    return root;
}

static void sim__treap_insert(sim__block **root, sim__block *x, int by_size)
{
    while (*root && (*root)->prio >= x->prio)
        root = sim__before(x, *root, by_size) ? &(*root)->left
                                               : &(*root)->right;
    sim__split(*root, x, by_size, &x->left, &x->right);
    *root = x;
}

/* pre: x is in the tree. */
static void sim__treap_remove(sim__block **root, sim__block *x, int by_size)
{
    while (*root != x)
        root = sim__before(x, *root, by_size) ? &(*root)->left
                                               : &(*root)->right;
    *root = sim__merge(x->left, x->right);
    x->left = x->right = NULL;
}

/* The smallest free block of at least size bytes, lowest address first. */
static sim__block *sim__best_fit(sim__block *t, size_t size)
{
    sim__block *best = NULL;
    while (t) {
        if (t->size >= size) {
            best = t;
            t = t->left;
        } else {
            t = t->right;
        }
    }
    return best;
}

/* The live block with the highest address <= p. */
static sim__block *sim__live_floor(sim__block *t, uintptr_t p)
{
    sim__block *best = NULL;
    while (t) {
        if (t->addr <= p) {
            best = t;
            t = t->right;
        } else {
            t = t->left;
        }
    }
    return best;
}

/* ------------------------------------------------------------------------
 * Arena
 * ---------------------------------------------------------------------- */

static uint32_t sim__random(sim__arena *ar)
{
    uint32_t x = ar->rng; /* xorshift32: deterministic runs */
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return ar->rng = x;
}

int sw__sim_arena_init(sim__arena *ar, int index, size_t capacity)
{
    memset(ar, 0, sizeof *ar);
    sim__block *b = sw__calloc(1, sizeof *b);
    if (!b)
        return sw__errorf(SW_ERR_HOST_OOM, "sim:%d: out of host memory",
                          index);
    void *p = mmap(NULL, capacity, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        sw__free(b);
        return sw__errorf(SW_ERR_HOST_OOM,
                          "sim:%d: cannot map a %zu-byte arena: %s", index,
                          capacity, strerror(e));
    }
    pthread_mutex_init(&ar->mu, NULL);
    ar->base = p;
    ar->capacity = capacity;
    ar->rng = 0x9E3779B9u ^ (uint32_t)index;
    ar->index = index;
    b->addr = (uintptr_t)p;
    b->size = capacity;
    b->state = SIM__FREE;
    b->prio = sim__random(ar);
    ar->first = b;
    ar->free_root = b;
    return SW_OK;
}

void sw__sim_arena_destroy(sim__arena *ar)
{
    sim__block *lists[2] = {ar->first, ar->spare};
    for (int i = 0; i < 2; i++) {
        for (sim__block *b = lists[i], *next; b; b = next) {
            next = b->next;
            sw__free(b);
        }
    }
    munmap(ar->base, ar->capacity);
    pthread_mutex_destroy(&ar->mu);
}

static size_t sim__largest_free(const sim__arena *ar)
{
    const sim__block *t = ar->free_root;
    while (t && t->right)
        t = t->right;
    return t ? t->size : 0;
}

/* A spare block struct, or NULL.  Under ar->mu. */
static sim__block *sim__spare_take(sim__arena *ar)
{
    sim__block *b = ar->spare;
    if (b) {
        ar->spare = b->next;
        ar->nspare--;
    }
    return b;
}

/* Keep b for a later split, if there is room; returns b when there is
 * not (the caller frees it after unlocking).  Under ar->mu. */
static sim__block *sim__spare_put(sim__arena *ar, sim__block *b)
{
    if (!b || ar->nspare >= SIM__SPARE_BLOCKS)
        return b;
    b->next = ar->spare;
    ar->spare = b;
    ar->nspare++;
    return NULL;
}

/* The remainder of the free block chosen stays free, in a block struct
 * that is spare or, failing that, allocated outside the lock (the worker
 * releases blocks under it). */
int sw__sim_arena_alloc(sim__arena *ar, size_t size, uintptr_t *mem)
{
    int index = ar->index;
    sim__block *fresh = NULL;
    pthread_mutex_lock(&ar->mu);
    sim__block *b;
    for (;;) {
        b = sim__best_fit(ar->free_root, size);
        if (!b || b->size == size || fresh || ar->spare)
            break;
        /* Frees may change the tree meanwhile: look again after. */
        pthread_mutex_unlock(&ar->mu);
        fresh = sw__malloc(sizeof *fresh);
        if (!fresh)
            return sw__errorf(SW_ERR_HOST_OOM, "sim:%d: out of host memory",
                              index);
        pthread_mutex_lock(&ar->mu);
    }
    if (!b) {
        size_t avail = ar->capacity - ar->allocated;
        size_t largest = sim__largest_free(ar);
        fresh = sim__spare_put(ar, fresh);
        pthread_mutex_unlock(&ar->mu);
        sw__free(fresh);
        return sw__errorf(SW_ERR_OOM,
                          "sim:%d: no free block of %zu bytes (free %zu of "
                          "%zu bytes, largest free block %zu)",
                          index, size, avail, ar->capacity, largest);
    }
    sim__treap_remove(&ar->free_root, b, 1);
    if (b->size > size) {
        sim__block *rest = fresh ? fresh : sim__spare_take(ar);
        fresh = NULL;
        rest->addr = b->addr + size;
        rest->size = b->size - size;
        rest->state = SIM__FREE;
        rest->left = rest->right = NULL;
        rest->prio = sim__random(ar);
        rest->prev = b;
        rest->next = b->next;
        if (b->next)
            b->next->prev = rest;
        b->next = rest;
        b->size = size;
        sim__treap_insert(&ar->free_root, rest, 1);
    }
    b->state = SIM__LIVE;
    sim__treap_insert(&ar->live_root, b, 0);
    ar->allocated += size;
    *mem = b->addr;
    fresh = sim__spare_put(ar, fresh);
    pthread_mutex_unlock(&ar->mu);
    sw__free(fresh);
    return SW_OK;
}

/* The link (root or child pointer) that holds the live block starting at
 * mem, or NULL: lookup and removal in one descent.  Under ar->mu. */
static sim__block **sim__live_link(sim__arena *ar, uintptr_t mem)
{
    sim__block **pp = &ar->live_root;
    while (*pp && (*pp)->addr != mem)
        pp = mem < (*pp)->addr ? &(*pp)->left : &(*pp)->right;
    return *pp ? pp : NULL;
}

/* Second half of a free: b has left the live tree (so from then on any
 * command touching it is caught) and is DYING.  Poison it outside the lock,
 * then return it to the free tree merged with its free neighbours. */
static void sim__arena_release(sim__arena *ar, sim__block *b, int poison)
{
    /* No one else touches a DYING block: the allocator skips it and the
     * neighbours cannot merge with it. */
    if (poison)
        memset((void *)b->addr, SIM__POISON, b->size);

    sim__block *gone[2] = {NULL, NULL};
    pthread_mutex_lock(&ar->mu);
    ar->allocated -= b->size;
    b->state = SIM__FREE;
    sim__block *n = b->next;
    if (n && n->state == SIM__FREE) {
        sim__treap_remove(&ar->free_root, n, 1);
        b->size += n->size;
        b->next = n->next;
        if (n->next)
            n->next->prev = b;
        gone[0] = n;
    }
    sim__block *p = b->prev;
    if (p && p->state == SIM__FREE) {
        sim__treap_remove(&ar->free_root, p, 1);
        p->size += b->size;
        p->next = b->next;
        if (b->next)
            b->next->prev = p;
        gone[1] = b;
        b = p;
    }
    sim__treap_insert(&ar->free_root, b, 1);
    gone[0] = sim__spare_put(ar, gone[0]);
    gone[1] = sim__spare_put(ar, gone[1]);
    pthread_mutex_unlock(&ar->mu);
    sw__free(gone[0]);
    sw__free(gone[1]);
}

/* The queue whose reservation it is has done its work. */
void sw__sim_arena_unreserve(sim__arena *ar, uintptr_t mem)
{
    pthread_mutex_lock(&ar->mu);
    sim__block **link = sim__live_link(ar, mem);
    sim__block *b = *link;
    *link = sim__merge(b->left, b->right);
    b->left = b->right = NULL;
    b->state = SIM__DYING;
    pthread_mutex_unlock(&ar->mu);
    sim__arena_release(ar, b, 0);
}

void sw__sim_arena_retire(sim__arena *ar, sim__block *b)
{
    pthread_mutex_lock(&ar->mu);
    sim__treap_remove(&ar->live_root, b, 0);
    b->state = SIM__DYING;
    pthread_mutex_unlock(&ar->mu);
    sim__arena_release(ar, b, 1);
}

int sw__sim_arena_free(sim__arena *ar, uintptr_t mem, size_t size, int now,
                       sim__block **out)
{
    *out = NULL;
    pthread_mutex_lock(&ar->mu);
    sim__block **link = sim__live_link(ar, mem);
    sim__block *b = link ? *link : NULL;
    if (!b || b->size != size || b->state != SIM__LIVE) {
        const char *why = !b                     ? "is not a live allocation"
                          : b->state != SIM__LIVE ? "is already being freed"
                                                  : "has another size";
        size_t real = b ? b->size : 0;
        pthread_mutex_unlock(&ar->mu);
        return sw__errorf(SW_ERR_INVALID_ARG,
                          "sim:%d: free of [0x%" PRIxPTR "+%zu): the block %s"
                          " (allocated size %zu)",
                          ar->index, mem, size, why, real);
    }
    if (now) {
        *link = sim__merge(b->left, b->right);
        b->left = b->right = NULL;
        b->state = SIM__DYING;
        pthread_mutex_unlock(&ar->mu);
        sim__arena_release(ar, b, 1);
        return SW_OK;
    }
    b->state = SIM__DOOMED;
    pthread_mutex_unlock(&ar->mu);
    *out = b;
    return SW_OK;
}

void sw__sim_arena_undoom(sim__arena *ar, sim__block *b)
{
    pthread_mutex_lock(&ar->mu);
    b->state = SIM__LIVE;
    pthread_mutex_unlock(&ar->mu);
}

size_t sw__sim_arena_free_bytes(sim__arena *ar)
{
    pthread_mutex_lock(&ar->mu);
    size_t n = ar->capacity - ar->allocated;
    pthread_mutex_unlock(&ar->mu);
    return n;
}

/* ------------------------------------------------------------------------
 * Validation: every byte range a command touches must lie inside one live
 * block.  On failure sim.c aborts the process with a report of what is
 * there, written here.
 * ---------------------------------------------------------------------- */

static int sim__range_ok(const sim__arena *ar, const sim__range *r)
{
    const sim__block *b = sim__live_floor(ar->live_root, r->p);
    return b && r->len <= b->size && r->p - b->addr <= b->size - r->len;
}

/* What lies at r->p, for the report.  Under ar->mu.  The walk along the
 * address list is linear, but runs once, on the way to abort(). */
static void sim__describe(const sim__arena *ar, const sim__range *r,
                          char *buf, size_t len)
{
    uintptr_t lo = (uintptr_t)ar->base, hi = lo + ar->capacity;
    if (r->p < lo || r->p >= hi) {
        snprintf(buf, len,
                 "it is outside this device's arena [0x%" PRIxPTR "+%zu)",
                 lo, ar->capacity);
        return;
    }
    const sim__block *live = sim__live_floor(ar->live_root, r->p);
    if (live && r->p - live->addr < live->size) {
        snprintf(buf, len,
                 "it starts inside live block [0x%" PRIxPTR "+%zu) but runs "
                 "%zu bytes past its end",
                 live->addr, live->size,
                 (size_t)(r->p - live->addr) + r->len - live->size);
        return;
    }
    const sim__block *b = live ? live->next : ar->first;
    while (b && r->p - b->addr >= b->size)
        b = b->next;
    if (!b) { /* cannot happen: blocks tile the arena */
        snprintf(buf, len, "no block covers it");
        return;
    }
    int n = snprintf(buf, len, "nearest block: [0x%" PRIxPTR "+%zu) %s",
                     b->addr, b->size,
                     b->state == SIM__DYING
                         ? "being freed"
                         : "freed (free memory: freed, or never allocated)");
    if (live && n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n,
                 "; nearest live block below: [0x%" PRIxPTR "+%zu)",
                 live->addr, live->size);
}

int sw__sim_arena_check(sim__arena *ar, const sim__range *r, int count,
                        char *there, size_t len)
{
    pthread_mutex_lock(&ar->mu);
    for (int i = 0; i < count; i++) {
        if (sim__range_ok(ar, &r[i]))
            continue;
        sim__describe(ar, &r[i], there, len);
        pthread_mutex_unlock(&ar->mu);
        return i;
    }
    pthread_mutex_unlock(&ar->mu);
    return -1;
}
