/*
 * launch.c -- launches: pinning arguments for kernels (the library's and
 * the caller's) on a device.  launch_q.c has the pins in a queue's order;
 * the built-in kernels and the operations built on them are ops.c's.
 */
#include "core/internal.h"
#include "core/beside.h"
#include "core/launch.h"

#include <stdio.h>
#include <string.h>

/* This thread's last begin (launch.h). */
_Thread_local last_begin_t sw__last_begin_tl;

/* ------------------------------------------------------------------------
 * Pinning
 * ---------------------------------------------------------------------- */

/* Whether the distinct owned bases of a launch fit the device (or the
 * budget) together; if not, the message says so before anything moves. */
int sw__check_fit_locked(sw_device *dev, sw__buf *const *bufs, size_t n,
                            uint64_t extra)
{
    uint64_t total = extra;
    for (size_t i = 0; i < n; i++) {
        sw__buf *b = bufs[i]->base;
        bool seen = b->external;
        for (size_t j = 0; j < i && !seen; j++)
            seen = bufs[j]->base == b;
        if (!seen)
            total += b->alloc_size;
    }
    uint64_t cap = dev->budget ? dev->budget : dev->props.total;
    if (cap == 0 || total <= cap)
        return SW_OK;
    char b1[32], b2[32];
    int rc = sw__errorf(SW_ERR_OOM, "%s: the %zu arguments of one launch "
                        "need %s on the device together, more than its %s "
                        "of %s; nothing was moved. Sizes:", dev->name,
                        n + (extra > 0),
                        sw_format_bytes(total, b1, sizeof b1),
                        dev->budget ? "budget" : "capacity",
                        sw_format_bytes(cap, b2, sizeof b2));
    for (size_t i = 0; i < n && i < 16; i++)
        sw__error_append(" %s", sw_format_bytes(bufs[i]->base->alloc_size, b1,
                                              sizeof b1));
    if (extra > 0)
        sw__error_append(" %s", sw_format_bytes(extra, b1, sizeof b1));
    return rc;
}

/* Bytes the spilled owned bases among bufs[0..n) take back on the device,
 * each base once. */
static uint64_t restore_bytes_locked(sw__buf *const *bufs, size_t n,
                                     size_t *count)
{
    uint64_t total = 0;
    *count = 0;
    for (size_t i = 0; i < n; i++) {
        sw__buf *b = bufs[i]->base;
        if (b->external || b->state == SW_RESIDENT)
            continue;
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = bufs[j]->base == b;
        if (!seen) {
            total += b->alloc_size;
            (*count)++;
        }
    }
    return total;
}

/* Under a budget, before the first restore of a launch (every argument
 * pinned): whether bringing back all its spilled arguments can find room
 * once everything that can move has moved.  If not, the pressure
 * callbacks run (first, then as the last chance: they may free garbage
 * that holds the device), and if there is still no room the launch is
 * refused with SW_ERR_OOM before anything moved.  Without it, a second
 * argument that cannot come back would fail the call after the first was
 * brought back, with a message from its own ladder saying "nothing was
 * moved" (found by the fuzzer's check of that contract). */
int sw__check_room_locked(sw_device *dev, sw__buf *const *bufs, size_t n,
                             uint64_t extra)
{
    if (dev->budget == 0 || dev->props.no_spill)
        return SW_OK;
    size_t count = 0;
    uint64_t bytes = 0;
    for (int round = 0;; round++) {
        /* Recounted: the callbacks let the lock go, and another call may
         * have brought an argument back meanwhile. */
        bytes = restore_bytes_locked(bufs, n, &count);
        if (bytes == 0 || sw__budget_room_locked(dev, bytes + extra))
            return SW_OK;
        bytes += extra;
        if (round == 2)
            break;
        if (sw__run_callbacks_locked(dev, bytes, round == 1))
            dev->alloc_retries++;
    }
    char what[120], b1[32];
    int at = snprintf(what, sizeof what, "bringing back %zu spilled "
                      "argument%s of %zu", count, count == 1 ? "" : "s", n);
    if (extra > 0 && at > 0 && (size_t)at < sizeof what)
        snprintf(what + at, sizeof what - (size_t)at, " and %s for the "
                 "result", sw_format_bytes(extra, b1, sizeof b1));
    int rc = sw__budget_refusal_locked(dev, bytes, bytes, what);
    dev->ooms++;
    if (dev->tracing)
        sw__trace_oom(dev, bytes, what, sw_last_error());
    return rc;
}

/* A later argument failed after this call brought back `brought` earlier
 * ones, which stay resident: a budget refusal from that argument's own
 * ladder says "nothing was moved", true of it alone, which the message
 * must not claim for the call (the room was there when sw__check_room_locked
 * looked; another thread took it while the lock was let go). */
static void say_brought_back(int rc, size_t brought)
{
    const char *m = sw_last_error();
    const char *at = strstr(m, "; nothing was moved");
    if (at == NULL)
        return;
    char head[1024], tail[1536];
    snprintf(head, sizeof head, "%.*s", (int)(at - m), m);
    snprintf(tail, sizeof tail, "%s", at + strlen("; nothing was moved"));
    sw__errorf(rc, "%s; nothing was moved for it, but the %zu earlier "
               "argument%s this call brought back stay%s resident%s", head,
               brought, brought == 1 ? "" : "s", brought == 1 ? "s" : "",
               tail);
}

/* Pin bufs[from..n): the general path (a spilled or moving argument, or a
 * queue to order), after the warm path pinned bufs[0..from).  On failure
 * every argument pinned so far, the warm ones included, is unpinned; the
 * restores this call made stay (their buffers resident, their data
 * intact), as the header's contract for a call that fails on the way
 * says: an add whose second operand cannot come back leaves its first,
 * which it brought back, resident.  Those restores hold their host copies
 * (hold_token: this call's) until the end. */
int sw__pin_rest_locked(sw_device *dev, sw__queue *q, sw__buf *const *bufs,
                        const unsigned char *access, size_t n,
                        sw_devmem *ptrs, size_t from, bool pin_q)
{
    int rc = SW_OK;
    bool checked_fit = false, room_checked = false;
    bool restored = false;
    size_t brought = 0; /* arguments this call brought back */
    uint32_t token = 0;
    size_t guard = n; /* bufs[guard..n) hold a guard pin */
    size_t i;
    for (i = from; i < n; i++) {
        sw__buf *b = bufs[i], *base = b->base;
        if (base->state != SW_RESIDENT || base->moving) {
            restored = true;
            if (!checked_fit) {
                checked_fit = true;
                if ((rc = sw__check_fit_locked(dev, bufs, n, 0)) != SW_OK)
                    break;
                if (++dev->hold_seq == 0)
                    dev->hold_seq = 1; /* 0 is "no hold" */
                token = dev->hold_seq;
                /* The arguments after this one are pinned too until the
                 * end, so that making room for this one never spills
                 * them: a later one it spilled would have to come back in
                 * turn (copies for nothing), and if that failed the call
                 * would fail with an operand it never had to move moved. */
                guard = i + 1;
                for (size_t j = guard; j < n; j++)
                    bufs[j]->base->pins++;
            }
            base->pins++;
            /* Once, with every argument pinned. */
            if (!room_checked) {
                room_checked = true;
                if ((rc = sw__check_room_locked(dev, bufs, n, 0)) != SW_OK) {
                    sw__unpin_locked(dev, base);
                    break;
                }
            }
            bool was_spilled = base->state != SW_RESIDENT;
            rc = sw__restore_locked(dev, base, NULL, false, token);
            if (rc != SW_OK) {
                sw__unpin_locked(dev, base);
                break;
            }
            brought += was_spilled;
            /* It may have been another call's restore, in flight, that
             * this one waited for: held by that call, which would undo it
             * if it failed, and with it what this use writes. */
            if (base->hold_host && base->hold_token != token)
                sw__hold_end_locked(dev, base);
        } else {
            /* Another call's restore, held: this use may write it, and
             * what it writes must not be undone. */
            if (base->hold_host && base->hold_token != token)
                sw__hold_end_locked(dev, base);
            base->pins++;
        }
        base->last_use = ++dev->clock;
        /* Safe across queues (queue.c); a pin for the caller's work on q
         * after every queue's work on it. */
        if ((q != NULL || base->qmask != 0) &&
            (rc = pin_q ? sw__order_pin_locked(dev, base, q)
                        : sw__order_use_locked(dev, base, q)) != SW_OK) {
            i++; /* this one is pinned too */
            break;
        }
        if (ptrs != NULL) {
            ptrs[i].base = base->mem;
            ptrs[i].offset = base->mem ? b->offset : 0;
        }
    }
    if (rc != SW_OK) {
        /* The restores this call made stay: their buffers are resident
         * with their data, and their holds end here.  (Undoing them,
         * sw__unrestore_locked, lost writes under concurrency: the soak,
         * 4 threads on sim:0 with every command queued, found a buffer
         * whose bytes went back to an older host copy in about one run
         * of two.  Until that window is found, a failed call may leave
         * an operand it brought back resident, never its data changed.) */
        for (size_t j = 0; token != 0 && j < i; j++) {
            sw__buf *base = bufs[j]->base;
            if (base->hold_host && base->hold_token == token)
                sw__hold_end_locked(dev, base);
        }
        if (brought > 0)
            say_brought_back(rc, brought);
        while (i-- > 0)
            sw__unpin_locked(dev, bufs[i]->base);
        for (size_t j = guard; j < n; j++)
            sw__unpin_locked(dev, bufs[j]->base);
        return rc;
    }
    /* Each argument now holds its own pin: the guards go (no release:
     * each base is pinned). */
    for (size_t j = guard; j < n; j++)
        bufs[j]->base->pins--;
    for (i = 0; token != 0 && i < n; i++) {
        sw__buf *base = bufs[i]->base;
        if (base->hold_host && base->hold_token == token)
            sw__hold_end_locked(dev, base);
    }
    /* The call succeeds: what it may write is no clean copy any more. */
    for (i = 0; i < n; i++)
        if (sw__acc_write(access, i))
            sw__dirty_locked(dev, bufs[i]->base);
    /* Pointers: an argument restored after an earlier one was written
     * cannot have moved it (pinned), but a restore may have been of a base
     * shared with an earlier argument (a view): read them all again. */
    for (i = 0; restored && ptrs != NULL && i < n; i++) {
        sw__buf *base = bufs[i]->base;
        ptrs[i].base = base->mem;
        ptrs[i].offset = base->mem ? bufs[i]->offset : 0;
    }
    return SW_OK;
}

/* Make every argument resident and pin it.  pre: every argument is a
 * live buffer of dev (validated by the caller, so that a bad argument
 * fails before anything moves).  The warm path (all resident, no queue to
 * order) is a loop of its own, a state check, a pin and the pointer per
 * argument, with the device clock in a register; the first argument it
 * cannot take goes to sw__pin_rest_locked, which restores a spilled one
 * after pinning the others, so that making room for it can never spill
 * them. */
int sw__pin_all_access_locked(sw_device *dev, sw__queue *q,
                              sw__buf *const *bufs,
                              const unsigned char *access, size_t n,
                              sw_devmem *ptrs)
{
    sw__assert_locked(dev);
    size_t i = 0;
    if (q == NULL && ptrs != NULL) {
        uint64_t clock = dev->clock;
        for (; i < n && sw__pin_warm(bufs[i], clock + 1, &ptrs[i], 0,
                                     sw__acc_write(access, i));
             i++)
            clock++;
        dev->clock = clock;
        if (__builtin_expect(i == n, 1))
            return SW_OK;
    }
    return sw__pin_rest_locked(dev, q, bufs, access, n, ptrs, i, false);
}

int sw__pin_all_locked(sw_device *dev, sw__queue *q, sw__buf *const *bufs,
                       size_t n, sw_devmem *ptrs)
{
    return sw__pin_all_access_locked(dev, q, bufs, NULL, n, ptrs);
}

int sw__args_decode_locked(sw_device *dev, sw_buffer *const *h, size_t n,
                           launch_args *a)
{
    a->v = a->stack;
    if (n > ARGS_ON_STACK) {
        a->v = sw__malloc(n * sizeof *a->v);
        if (a->v == NULL)
            return sw__errorf(SW_ERR_HOST_OOM, "no host memory for the %zu "
                              "arguments of a launch", n);
    }
    /* The warm path, sw__handle_lookup unrolled for buffers: the pool's
     * size read once, relaxed loads (we hold the lock that frees and
     * moves buffers of dev; one of another device fails the device check
     * whatever it reads).  The full check runs only to say what is
     * wrong. */
    uint32_t nslots = atomic_load_explicit(&sw__buf_pool.nslots,
                                           memory_order_acquire);
    for (size_t i = 0; i < n; i++) {
        uintptr_t v = (uintptr_t)h[i];
        uint32_t index = (uint32_t)(v & SW__H_INDEX_MASK);
        if (((v >> SW__H_TYPE_SHIFT) & SW__H_TYPE_MASK) == SW__H_BUFFER &&
            index < nslots) {
            uint32_t k = index + (1u << SW__POOL_FIRST_SHIFT);
            unsigned top = 31u - (unsigned)__builtin_clz(k);
            sw__buf *c = (sw__buf *)atomic_load_explicit(
                &sw__buf_pool.chunks[top - SW__POOL_FIRST_SHIFT],
                memory_order_relaxed);
            sw__buf *b = c + (k - (1u << top));
            uint32_t g = atomic_load_explicit(&b->h.gen, memory_order_relaxed);
            if ((g & 1u) &&
                ((g ^ (uint32_t)(v >> SW__H_GEN_SHIFT)) & SW__H_GEN_MASK) ==
                    0 &&
                atomic_load_explicit(&b->h.dev, memory_order_relaxed) ==
                    dev) {
                a->v[i] = b;
                continue;
            }
        }
        sw__buf *b;
        int rc = sw__buffer_check_locked(dev, h[i], "launch argument", &b);
        if (rc == SW_OK) /* freed and reused onto dev meanwhile */
            rc = sw__errorf(SW_ERR_INVALID_HANDLE, "launch argument %p was "
                            "freed", (const void *)h[i]);
        sw__error_append(" (argument %zu)", i);
        sw__args_free(a);
        return rc;
    }
    return SW_OK;
}

/* Every access mode one of the two (checked before anything else); on
 * failure the pointers are cleared, as every failed begin leaves them. */
int sw__access_check(const unsigned char *access, size_t n,
                     sw_devmem *ptrs)
{
    for (size_t i = 0; access != NULL && i < n; i++) {
        if (access[i] == SW_ACCESS_READ || access[i] == SW_ACCESS_WRITE)
            continue;
        if (ptrs != NULL)
            memset(ptrs, 0, n * sizeof *ptrs);
        return sw__errorf(SW_ERR_INVALID_ARG, "access mode %u of argument "
                          "%zu: must be SW_ACCESS_READ or SW_ACCESS_WRITE",
                          (unsigned)access[i], i);
    }
    return SW_OK;
}

static int launch_begin(sw_device *dev, sw_buffer *const *bufs,
                        const unsigned char *access, size_t n,
                        sw_devmem *ptrs)
{
    if ((bufs == NULL || ptrs == NULL) && n > 0) {
        if (ptrs != NULL) /* out-parameters are cleared on failure */
            memset(ptrs, 0, n * sizeof *ptrs);
        return sw__errorf(SW_ERR_INVALID_ARG, "bufs or ptrs is NULL");
    }
    int rc = sw__device_enter(dev);
    if (rc != SW_OK) {
        if (ptrs != NULL)
            memset(ptrs, 0, n * sizeof *ptrs);
        return rc;
    }
    last_begin_t *last = sw__last_begin();
    if (n <= ARGS_ON_STACK && n > 0 &&
        sw__memo_pin_locked(dev, last, bufs, access, n, ptrs, 0) == n) {
        last->dev = dev;
        last->q = NULL;
        last->bufs = bufs;
        sw__unlock(dev);
        return SW_OK;
    }
    launch_args a;
    rc = sw__args_decode_locked(dev, bufs, n, &a);
    if (rc == SW_OK) {
        rc = sw__pin_all_access_locked(dev, NULL, a.v, access, n, ptrs);
        if (rc == SW_OK && n <= ARGS_ON_STACK) {
            last->dev = dev;
            last->q = NULL;
            last->memo = dev;
            last->bufs = bufs;
            last->n = n;
            memcpy(last->h, bufs, n * sizeof *bufs);
            memcpy(last->b, a.v, n * sizeof *a.v);
        }
        sw__args_free(&a);
    }
    sw__unlock(dev);
    if (rc != SW_OK && ptrs != NULL)
        memset(ptrs, 0, n * sizeof *ptrs);
    return rc;
}

SW_API int sw_launch_begin(sw_device *dev, sw_buffer *const *bufs, size_t n,
                           sw_devmem *ptrs)
{
    return launch_begin(dev, bufs, NULL, n, ptrs);
}

SW_API int sw_launch_begin_access(sw_device *dev, sw_buffer *const *bufs,
                                  const unsigned char *access, size_t n,
                                  sw_devmem *ptrs)
{
    int rc = sw__access_check(access, n, ptrs);
    return rc != SW_OK ? rc : launch_begin(dev, bufs, access, n, ptrs);
}

bool sw__warm_end_locked(sw_device *dev, const sw__queue *q,
                         sw_buffer *const *bufs, size_t n)
{
    last_begin_t *last = sw__last_begin();
    if (last->dev != dev || last->q != q || last->bufs != bufs ||
        last->n != n || n == 0)
        return false;
    /* Check and unpin in one pass; a failed check pins back what was
     * unpinned (none of which reached zero with its handle gone: that
     * release is the general path's). */
    uint64_t bit = q != NULL ? UINT64_C(1) << q->id : 0;
    bool dead = false; /* a base unpinned to zero with its handle gone */
    uint64_t clock = dev->clock + 1; /* the launch is queued (spill.c) */
    size_t i;
    for (i = 0; i < n; i++) {
        sw__buf *b = last->b[i];
        if (bufs[i] != last->h[i] || !sw__handle_matches(&b->h, bufs[i]) ||
            (b->base->qmask & bit) != bit)
            break;
        sw__buf *base = b->base;
        base->last_use = clock;
        sw__note_use(dev, base);
        if (--base->pins == 0)
            dead |= !sw__slot_live(&base->h);
    }
    if (__builtin_expect(i < n || dead, 0)) {
        for (size_t j = 0; j < i; j++)
            last->b[j]->base->pins++;
        return false;
    }
    /* (A queue's pins: its mark stays set for the stream order of what it
     * queued, the pin's count goes.) */
    for (size_t j = 0; q != NULL && j < n; j++)
        sw__queue_unpin(last->b[j]->base);
    dev->clock = clock;
    last->dev = NULL;
    return true;
}

SW_API int sw_launch_end(sw_device *dev, sw_buffer *const *bufs, size_t n)
{
    if (bufs == NULL && n > 0)
        return sw__errorf(SW_ERR_INVALID_ARG, "bufs is NULL");
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    if (sw__warm_end_locked(dev, NULL, bufs, n)) {
        sw__unlock(dev);
        return SW_OK;
    }
    sw__last_begin()->dev = NULL;
    /* Check everything first, so that a bad array unpins nothing. */
    launch_args a;
    rc = sw__args_decode_locked(dev, bufs, n, &a);
    for (size_t i = 0; rc == SW_OK && i < n; i++) {
        /* Pinned at least as many times as it appears (an end that would
         * unpin past zero is refused whole). */
        sw__buf *base = a.v[i]->base;
        uint32_t need = 1;
        for (size_t j = 0; j < i; j++)
            need += a.v[j]->base == base;
        if (base->pins < need) {
            rc = sw__errorf(SW_ERR_INVALID_ARG, "launch argument %zu is "
                            "not pinned: sw_launch_end without a matching "
                            "sw_launch_begin", i);
            sw__args_free(&a);
        }
    }
    if (rc != SW_OK) {
        sw__unlock(dev);
        return rc;
    }
    sw__unpin_all_locked(dev, a.v, n);
    sw__args_free(&a);
    sw__unlock(dev);
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * A launch's result, allocated beside its operands (beside.h)
 * ---------------------------------------------------------------------- */

int sw__buffer_alloc_beside(sw_device *dev, size_t size, const char *tag,
                            sw_buffer *const *operands, size_t n,
                            sw_buffer **out)
{
    if (out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (n == 0)
        return sw_buffer_alloc(dev, size, tag, out);
    if (operands == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "operands is NULL");
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    launch_args a;
    rc = sw__args_decode_locked(dev, operands, n, &a);
    if (rc != SW_OK) {
        sw__unlock(dev);
        return rc;
    }
    /* The bases, pinned: the checks count them as what cannot move (so
     * that room is never found by spilling one), the allocation's ladder
     * spills others only, and a handle freed meanwhile (the lock is let
     * go) leaves its base to be released at the unpin. */
    for (size_t i = 0; i < n; i++) {
        a.v[i] = a.v[i]->base;
        a.v[i]->pins++;
    }
    uint64_t rounded = size > SIZE_MAX - (SW_ALLOC_GRANULARITY - 1)
                           ? size
                           : (size + SW_ALLOC_GRANULARITY - 1) &
                                 ~(size_t)(SW_ALLOC_GRANULARITY - 1);
    rc = sw__check_fit_locked(dev, a.v, n, rounded);
    if (rc == SW_OK)
        rc = sw__check_room_locked(dev, a.v, n, rounded);
    if (rc == SW_OK) {
        sw__unlock(dev);
        rc = sw_buffer_alloc(dev, size, tag, out);
        sw__lock(dev);
    }
    for (size_t i = 0; i < n; i++)
        sw__unpin_locked(dev, a.v[i]);
    sw__args_free(&a);
    sw__unlock(dev);
    return rc;
}
