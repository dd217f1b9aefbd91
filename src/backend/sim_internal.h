/*
 * sim_internal.h -- the simulated device's two halves and what they share:
 * the arena (sim_arena.c), a best-fit allocator over one mapping that also
 * proves byte ranges live, and the device itself (sim.c: queues, worker
 * threads, commands, checking kernels' operands, the ops table), and the
 * kernels themselves (sim_kernels.c).
 *
 * `sw__sim_` names are internal: not exported from the shared library.
 */
#ifndef SW_SIM_INTERNAL_H
#define SW_SIM_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* Poison written over freed device memory. */
#define SIM__POISON 0xDB

/* A block of the arena (sim_arena.c): allocated, free, or on its way
 * between the two. */
typedef struct sim__block sim__block;

/* An entry of a queue's FIFO (sim.c): every command begins with one, and
 * every block carries one, so that a block's free is queued without
 * allocating.  (A free must not fail for want of host memory: the core
 * cannot take the memory back, so a failed free would leak it.) */
typedef struct sim__link {
    struct sim__link *next;
    int kind; /* sim.c's sim__cmd_kind */
} sim__link;

/* The link a block carries, and the block a link belongs to. */
sim__link *sw__sim_block_link(sim__block *b);
sim__block *sw__sim_link_block(sim__link *l);

/* One device's memory: a fixed-size mapping of host memory carved into
 * blocks.  mu is a leaf lock, held only for tree work, never while
 * waiting or while touching block contents; the fork handlers in sim.c
 * take it directly.  The other members are the arena's own. */
typedef struct sim__arena {
    pthread_mutex_t mu;
    unsigned char *base;
    size_t capacity;
    size_t allocated;      /* bytes in LIVE, DOOMED and DYING blocks */
    sim__block *first;     /* lowest block; never merged away */
    sim__block *free_root; /* FREE blocks by (size, addr): best fit */
    sim__block *live_root; /* LIVE and DOOMED blocks by addr: lookups */
    /* Block structs merged away, kept for the next split (at most
     * SIM__SPARE_BLOCKS), so that alloc/free churn needs no host memory. */
    sim__block *spare;
    unsigned nspare;
    uint32_t rng;
    int index; /* the device's, for messages */
} sim__arena;

/* Map capacity bytes (a multiple of SW_ALLOC_GRANULARITY) for device
 * index.  SW_ERR_HOST_OOM when neither the mapping nor the first block can
 * be had; the arena is then untouched. */
int sw__sim_arena_init(sim__arena *ar, int index, size_t capacity);
/* Unmap it and free every block, live or not. */
void sw__sim_arena_destroy(sim__arena *ar);

/* Best fit: the smallest free block of at least size bytes (lowest address
 * among equals), carved from its low end.  SW_ERR_OOM with the free and
 * largest free figures when none fits; SW_ERR_HOST_OOM only when the
 * remainder needs a block struct, none is spare, and none can be had. */
int sw__sim_arena_alloc(sim__arena *ar, size_t size, uintptr_t *mem);

/* A free, checked now: SW_ERR_INVALID_ARG, saying why, unless mem is a
 * LIVE block of exactly size bytes.  With now, the block is released at
 * once (poisoned, back to the free tree; *out = NULL).  Otherwise it is
 * DOOMED: still live for the commands queued before the free, and *out is
 * it, for sw__sim_arena_retire once those have run, or
 * sw__sim_arena_undoom when the free cannot be queued after all. */
int sw__sim_arena_free(sim__arena *ar, uintptr_t mem, size_t size, int now,
                       sim__block **out);
void sw__sim_arena_undoom(sim__arena *ar, sim__block *b);
/* A queued free, reached: the DOOMED block leaves the live tree (from then
 * on any command touching it is caught), is poisoned outside the lock and
 * returns to the free tree merged with its free neighbours. */
void sw__sim_arena_retire(sim__arena *ar, sim__block *b);
/* Release a live block no command ever touched (a queue's reservation):
 * not poisoned. */
void sw__sim_arena_unreserve(sim__arena *ar, uintptr_t mem);

/* Bytes not allocated (free blocks, whatever their sizes). */
size_t sw__sim_arena_free_bytes(sim__arena *ar);

/* A byte range a command touches, named for the report. */
typedef struct sim__range {
    const char *name;
    uintptr_t p;
    size_t len;
} sim__range;

/* Whether every range of r[0..count) lies inside one live block, under one
 * acquisition of the lock.  Returns -1 when they all do, else the index of
 * the first that does not, with what lies there described in there (len
 * bytes). */
int sw__sim_arena_check(sim__arena *ar, const sim__range *r, int count,
                        char *there, size_t len);

/* ------------------------------------------------------------------------
 * Kernels (sim_kernels.c)
 * ---------------------------------------------------------------------- */

struct sw_kernel_args;

/* Run a built-in kernel on host memory: every dtype, every kernel, as the
 * file comment of sim_kernels.c states.  pre: the core validated args
 * (kernel, dtype, n > 0, alignment) and the caller proved every operand
 * range live. */
void sw__sim_kernel_run(const struct sw_kernel_args *args);

/* Repeat a psize-byte pattern (any size) over n bytes, n a multiple of
 * psize. */
void sw__sim_fill_bytes(unsigned char *dst, size_t n,
                        const unsigned char *pat, size_t psize);

#endif /* SW_SIM_INTERNAL_H */
