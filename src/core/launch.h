/*
 * launch.h -- what the two halves of the launch pins share (internal):
 * launch.c pins on a device, launch_q.c on a queue spillway does not see
 * (sw_launch_begin_q) and without waiting (trypin.h).  The warm path is
 * here, inline, so that both keep it in registers.
 */
#ifndef SW_CORE_LAUNCH_H
#define SW_CORE_LAUNCH_H

#include "core/internal.h"

/* Whether argument i may be written (access NULL: every one). */
static inline bool sw__acc_write(const unsigned char *access, size_t i)
{
    return access == NULL || access[i] != SW_ACCESS_READ;
}

/* The warm path's pin of one argument: its base resident, not moving, not
 * held by another call's restore, with nothing to order -- for the default
 * queue (q_bit 0): no queue used it (qmask 0, qsynced with it); for a
 * queue's pin (q_bit its bit): that queue waited for the default queue's
 * work on it already and is the only queue marked as using it (another
 * queue's work, or a prefetch's copy in, is to wait for: the general path,
 * sw__order_pin_locked) -- then pinned, used at `clock`, and its pointer
 * written.  False (nothing done) for the general path. */
static inline bool sw__pin_warm(sw__buf *b, uint64_t clock, sw_devmem *p,
                                uint64_t q_bit, bool write)
{
    sw__buf *base = b->base;
    uint64_t m = base->qmask;
    bool ordered = q_bit == 0 ? m == 0
                              : (base->qsynced & q_bit) != 0 && m == q_bit;
    if (__builtin_expect(base->state != SW_RESIDENT || base->moving ||
                             base->hold_host || !ordered ||
                             (base->clean & write),
                         0))
        return false;
    base->pins++;
    base->last_use = clock;
    uintptr_t mem = base->mem;
    p->base = mem;
    p->offset = mem ? b->offset : 0;
    return true;
}

/* Launch arguments decoded and checked, every one, before anything
 * moves: a failed call changes nothing.  Up to ARGS_ON_STACK need no host
 * memory. */
#define ARGS_ON_STACK 16

typedef struct {
    sw__buf **v;
    sw__buf *stack[ARGS_ON_STACK];
} launch_args;

static inline void sw__args_free(launch_args *a)
{
    if (a->v != a->stack)
        sw__free(a->v);
}

/* The arguments of this thread's last sw_launch_begin, decoded: the
 * matching sw_launch_end (the same array, unchanged) then checks each
 * handle's generation against its slot instead of decoding it again, and
 * so does the next sw_launch_begin with the same handles (a loop
 * launching the same kernel on the same buffers), while `memo` is the
 * device they were decoded for.
 * Reached through sw__last_begin(): in a shared library the address of a
 * _Thread_local comes from a call to __tls_get_addr, which gcc repeats
 * in every loop iteration rather than keep the address in a register
 * (~22 of the warm path's ~118 instructions per argument, callgrind); the
 * empty asm hides where the pointer came from, so it is computed once. */
typedef struct {
    const sw_device *dev;  /* a begin waiting for its end, or NULL */
    const sw__queue *q;    /* ... its queue (sw_launch_begin_q), or NULL */
    const sw_device *memo; /* h and b decode to b on it (until freed) */
    sw_buffer *const *bufs;
    size_t n;
    sw_buffer *h[ARGS_ON_STACK];
    sw__buf *b[ARGS_ON_STACK];
} last_begin_t;
extern _Thread_local last_begin_t sw__last_begin_tl;

static inline last_begin_t *sw__last_begin(void)
{
    last_begin_t *p = &sw__last_begin_tl;
    __asm__("" : "+r"(p));
    return p;
}

/* The warm path of a launch that repeats this thread's last (a loop
 * launching a kernel on the same buffers): in one pass, each handle is
 * the one last decoded on dev and still names the live buffer it named
 * then (its slot's generation unchanged: a freed or reused slot fails, and
 * an unchanged slot is still on dev), and its base is resident with no
 * queue to order; then it is pinned.  Returns how many were pinned: n, or
 * fewer with those unpinned again (the general path takes over).  One pass
 * rather than check, copy, pin and copy back: ~60 instructions per
 * argument were ~25 of them (callgrind). */
static inline size_t sw__memo_pin_locked(sw_device *dev,
                                         const last_begin_t *last,
                                         sw_buffer *const *h,
                                         const unsigned char *access,
                                         size_t n, sw_devmem *ptrs,
                                         uint64_t q_bit)
{
    if (last->memo != dev || last->n != n)
        return 0;
    uint64_t clock = dev->clock;
    size_t i;
    for (i = 0; i < n; i++) {
        sw__buf *b = last->b[i];
        if (h[i] != last->h[i] || !sw__handle_matches(&b->h, h[i]) ||
            !sw__pin_warm(b, clock + 1, &ptrs[i], q_bit,
                          sw__acc_write(access, i)))
            break;
        clock++;
    }
    dev->clock = clock;
    if (__builtin_expect(i < n, 0)) {
        /* Back to the pins they had: none of them reaches zero. */
        for (size_t j = 0; j < i; j++)
            last->b[j]->base->pins--;
        return 0;
    }
    return n;
}

/* Decode and check every handle (all of dev) into a->v; on failure the
 * message names the argument and nothing is held.  pre: dev locked. */
int sw__args_decode_locked(sw_device *dev, sw_buffer *const *h, size_t n,
                           launch_args *a);
/* The end of a queue's pin of base (sw_launch_begin_q): the last pin of
 * any queue clears the mask. */
static inline void sw__queue_unpin(sw__buf *base)
{
    if (base->qpins > 0 && --base->qpins == 0)
        base->qpinmask = 0;
}

/* The warm path of sw_launch_end (q NULL) and sw_launch_end_q: bufs are
 * this thread's last begin's (on dev, for q), unchanged and, for a queue,
 * each still marked as used by it (a host transfer while pinned makes the
 * default queue wait for q and clears the mark: then the general path
 * marks it again, since q's work came after).  Then they are unpinned,
 * used now, and true returned.  false with nothing unpinned otherwise,
 * and when a last pin would end on a freed handle (the release is the
 * general path's); it never waits. */
bool sw__warm_end_locked(sw_device *dev, const sw__queue *q,
                         sw_buffer *const *bufs, size_t n);
/* Pin bufs[from..n) (a spilled or moving argument, or a queue to order)
 * after the warm path pinned bufs[0..from); on failure none stays pinned
 * (launch.c says what stays restored).  pin_q: a pin for the caller's
 * work on q (sw_launch_begin_q), ordered after every queue's work on the
 * buffers (sw__order_pin_locked), not only the default queue's. */
int sw__pin_rest_locked(sw_device *dev, sw__queue *q, sw__buf *const *bufs,
                        const unsigned char *access, size_t n,
                        sw_devmem *ptrs, size_t from, bool pin_q);
/* sw__order_use_locked for a pin on q (sw_launch_begin_q; launch_q.c): q
 * also waits, on the device, for every other queue that used base, so that
 * the caller's own kernel there never sees a write still queued elsewhere
 * land over its own (the built-in operations on queues leave that order to
 * the caller).  Never blocks. */
int sw__order_pin_locked(sw_device *dev, sw__buf *base, sw__queue *q);
/* Every access mode one of the two (checked before anything else); on
 * failure the pointers are cleared, as every failed begin leaves them. */
int sw__access_check(const unsigned char *access, size_t n, sw_devmem *ptrs);

#endif
