/*
 * launch_q.c -- pins for work on a queue spillway does not see: the
 * caller's kernels on its own stream (sw_launch_begin_q / _end_q, whose
 * end is in stream order), the host's pin (a NULL queue), and the forms
 * that never wait (trypin.h).  launch.c has the device's pins.
 */
#include "core/internal.h"
#include "core/launch.h"
#include "core/trypin.h"

#include <string.h>

/* ------------------------------------------------------------------------
 * Pins for work on a queue spillway does not see (sw_launch_begin_q)
 * ---------------------------------------------------------------------- */

/* The host's pin: the general pin for the default queue, then every
 * argument's queued work waited for (the default queue waits on the device
 * for the other queues that used them, then the host for the default
 * queue, without the lock), so that the memory may be touched from the
 * host at once.  On failure nothing stays pinned. */
static int begin_host_locked(sw_device *dev, sw__buf *const *v,
                             const unsigned char *access, size_t n,
                             sw_devmem *ptrs)
{
    int rc = sw__pin_all_access_locked(dev, NULL, v, access, n, ptrs);
    if (rc != SW_OK)
        return rc;
    for (size_t i = 0; rc == SW_OK && i < n; i++) {
        sw__buf *base = v[i]->base;
        if (base->qmask != 0)
            rc = sw__order_use_locked(dev, base, NULL);
        /* The caller may write it from now on: a restore's hold ends. */
        if (rc == SW_OK && base->hold_host)
            sw__hold_end_locked(dev, base);
    }
    /* Everything queued on the buffers is behind the default queue now
     * (restores' copies and other queues' work included, through device
     * waits on it): nothing queued there, nothing to wait for. */
    if (rc == SW_OK && !sw__b_queue_idle(dev, dev->q))
        rc = sw__wait_idle_locked(dev);
    if (rc != SW_OK)
        sw__unpin_all_locked(dev, v, n);
    return rc;
}

/* Ordering across queues for a pin (launch.h).  q first waits for the
 * default queue's work as any use (queue.c), then for each other queue
 * marked on base: those marks may stand for work that writes it. */
int sw__order_pin_locked(sw_device *dev, sw__buf *base, sw__queue *q)
{
    int rc = sw__order_use_locked(dev, base, q);
    uint64_t bit = UINT64_C(1) << q->id;
    uint64_t others = base->qmask & ~SW__QMASK_RESTORE;
    if (rc != SW_OK || ((others & ~bit) == 0 && q->id != SW__QID_SHARED))
        return rc;
    for (sw__queue *o = dev->queues; o; o = o->next) {
        if (o == q || o->bq == q->bq ||
            !(others & (UINT64_C(1) << o->id)))
            continue;
        if ((rc = sw__b_queue_wait(dev, q->bq, o->bq)) != SW_OK)
            return rc;
    }
    /* q's work now comes after theirs, so whatever waits for q (its mark
     * is set) waits for theirs too: their marks go, so that q's next pin
     * is the warm path's, and their next use marks them again (and orders
     * them after the default queue's work again).  A queue holding a pin
     * keeps its mark: more of its work may come before its pin ends. */
    uint64_t done = others & ~bit & ~base->qpinmask;
    base->qmask &= ~done;
    base->qsynced &= ~done;
    return SW_OK;
}

/* The pins of sw_launch_begin_q for the queue of bit, counted on each
 * base (each occurrence: duplicates are pinned twice). */
static inline void queue_pins_locked(sw__buf *const *v, size_t n,
                                     uint64_t bit)
{
    for (size_t i = 0; i < n; i++) {
        sw__buf *base = v[i]->base;
        base->qpins++;
        base->qpinmask |= bit;
    }
}


/* The device of q, or of bufs[0] for the host's pin (q NULL), locked:
 * SW_OK, or the error with the message set and nothing locked.  *dev NULL
 * (and SW_OK) when there is nothing to pin: no queue and no buffers. */
static int enter(sw_queue *qh, sw_buffer *const *bufs, size_t n,
                 sw__queue **q, sw_device **dev)
{
    *q = NULL;
    *dev = NULL;
    if (qh != NULL) {
        int rc = sw__queue_enter(qh, q);
        if (rc == SW_OK)
            *dev = (*q)->dev;
        return rc;
    }
    if (n == 0)
        return SW_OK;
    sw__buf *b0;
    int rc = sw__buffer_enter(bufs[0], &b0, dev);
    if (rc != SW_OK)
        sw__error_append(" (argument 0)");
    return rc;
}

static int launch_begin_q(sw_queue *qh, sw_buffer *const *bufs,
                          const unsigned char *access, size_t n,
                          sw_devmem *ptrs)
{
    if ((bufs == NULL || ptrs == NULL) && n > 0) {
        if (ptrs != NULL)
            memset(ptrs, 0, n * sizeof *ptrs);
        return sw__errorf(SW_ERR_INVALID_ARG, "bufs or ptrs is NULL");
    }
    sw_device *dev;
    sw__queue *q;
    int rc = enter(qh, bufs, n, &q, &dev);
    if (rc != SW_OK) {
        if (ptrs != NULL)
            memset(ptrs, 0, n * sizeof *ptrs);
        return rc;
    }
    if (dev == NULL)
        return SW_OK; /* the host pins nothing */
    last_begin_t *last = sw__last_begin();
    uint64_t bit = q != NULL ? UINT64_C(1) << q->id : 0;
    /* The warm path: every argument resident and q already ordered after
     * its earlier work (its bit set and no other: no other queue's work
     * and no prefetch's copy in to wait for). */
    if (q != NULL && n <= ARGS_ON_STACK && n > 0 &&
        sw__memo_pin_locked(dev, last, bufs, access, n, ptrs, bit) == n) {
        queue_pins_locked(last->b, n, bit);
        last->dev = dev;
        last->q = q;
        last->bufs = bufs;
        sw__unlock(dev);
        return SW_OK;
    }
    launch_args a;
    rc = sw__args_decode_locked(dev, bufs, n, &a);
    if (rc == SW_OK) {
        if (q == NULL) {
            rc = begin_host_locked(dev, a.v, access, n, ptrs);
        } else {
            uint64_t clock = dev->clock;
            size_t i = 0;
            for (; i < n && sw__pin_warm(a.v[i], clock + 1, &ptrs[i], bit,
                                         sw__acc_write(access, i));
                 i++)
                clock++;
            dev->clock = clock;
            rc = i == n ? SW_OK
                        : sw__pin_rest_locked(dev, q, a.v, access, n, ptrs,
                                              i, true);
            if (rc == SW_OK)
                queue_pins_locked(a.v, n, bit);
        }
        if (rc == SW_OK && n <= ARGS_ON_STACK) {
            last->dev = dev;
            last->q = q;
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

SW_API int sw_launch_begin_q(sw_queue *q, sw_buffer *const *bufs, size_t n,
                             sw_devmem *ptrs)
{
    return launch_begin_q(q, bufs, NULL, n, ptrs);
}

SW_API int sw_launch_begin_q_access(sw_queue *q, sw_buffer *const *bufs,
                                    const unsigned char *access, size_t n,
                                    sw_devmem *ptrs)
{
    int rc = sw__access_check(access, n, ptrs);
    return rc != SW_OK ? rc : launch_begin_q(q, bufs, access, n, ptrs);
}

SW_API int sw_launch_end_q(sw_queue *qh, sw_buffer *const *bufs, size_t n)
{
    if (bufs == NULL && n > 0)
        return sw__errorf(SW_ERR_INVALID_ARG, "bufs is NULL");
    sw_device *dev;
    sw__queue *q;
    int rc = enter(qh, bufs, n, &q, &dev);
    if (rc != SW_OK || dev == NULL)
        return rc;
    if (sw__warm_end_locked(dev, q, bufs, n)) {
        sw__unlock(dev);
        return SW_OK;
    }
    sw__last_begin()->dev = NULL;
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
                            "not pinned: sw_launch_end_q without a matching "
                            "sw_launch_begin_q", i);
            sw__args_free(&a);
        }
    }
    if (rc != SW_OK) {
        sw__unlock(dev);
        return rc;
    }
    /* q's work on them, queued before now, is what later spills, frees,
     * reuses and host transfers must wait for: q's mark on each says so
     * (sw__order_use_locked then makes the default queue wait for q). */
    for (size_t i = 0; q != NULL && i < n; i++) {
        sw__queue_unpin(a.v[i]->base);
        sw__queue_mark_used_locked(q, a.v[i]->base);
    }
    sw__unpin_all_locked(dev, a.v, n);
    sw__args_free(&a);
    sw__unlock(dev);
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * The forms that never wait (trypin.h)
 * ---------------------------------------------------------------------- */

/* The device of q, or of the buffer h (q NULL), locked without waiting;
 * NULL: call the full form. */
static sw_device *try_enter(sw_queue *qh, const sw_buffer *h, sw__queue **q)
{
    *q = NULL;
    if (qh != NULL)
        return sw__queue_try_enter(qh, q) == SW_OK ? (*q)->dev : NULL;
    sw__buf *b = sw__buf_of(h);
    sw_device *dev = b != NULL ? atomic_load_explicit(&b->h.dev,
                                                      memory_order_acquire)
                               : NULL;
    if (!sw__device_valid(dev) || !sw__trylock(dev))
        return NULL;
    if (dev->b == NULL || !sw__handle_matches(&b->h, h) ||
        atomic_load_explicit(&b->h.dev, memory_order_relaxed) != dev) {
        sw__unlock(dev);
        return NULL;
    }
    return dev;
}

int sw__launch_begin_q_try(sw_queue *qh, sw_buffer *const *bufs,
                           const unsigned char *access, size_t n,
                           sw_devmem *ptrs)
{
    if (bufs == NULL || ptrs == NULL || n == 0 || n > ARGS_ON_STACK)
        return SW__AGAIN;
    for (size_t i = 0; access != NULL && i < n; i++)
        if (access[i] != SW_ACCESS_READ && access[i] != SW_ACCESS_WRITE)
            return SW__AGAIN; /* the full form says which */
    sw__queue *q;
    sw_device *dev = try_enter(qh, bufs[0], &q);
    if (dev == NULL)
        return SW__AGAIN;
    last_begin_t *last = sw__last_begin();
    uint64_t bit = q != NULL ? UINT64_C(1) << q->id : 0;
    /* As launch_begin_q's warm paths: this thread's last arguments again,
     * or any arguments all warm (for the host: no queue's work on them).
     * The first one not warm unpins the others (none reaches zero) and
     * leaves the rest to the full form. */
    bool pinned = sw__memo_pin_locked(dev, last, bufs, access, n, ptrs,
                                      bit) == n;
    if (!pinned) {
        launch_args a;
        if (sw__args_decode_locked(dev, bufs, n, &a) == SW_OK) {
            uint64_t clock = dev->clock;
            size_t i = 0;
            for (; i < n && sw__pin_warm(a.v[i], clock + 1, &ptrs[i], bit,
                                         sw__acc_write(access, i));
                 i++)
                clock++;
            dev->clock = clock;
            pinned = i == n;
            for (size_t j = 0; !pinned && j < i; j++)
                a.v[j]->base->pins--;
            if (pinned) {
                last->memo = dev;
                last->n = n;
                memcpy(last->h, bufs, n * sizeof *bufs);
                memcpy(last->b, a.v, n * sizeof *a.v);
            }
            sw__args_free(&a);
        }
    }
    /* The host's pin waits for the default queue to drain: only when it
     * has, nothing to wait for. */
    if (pinned && q == NULL && !sw__b_queue_idle(dev, dev->q)) {
        for (size_t j = 0; j < n; j++)
            last->b[j]->base->pins--;
        pinned = false;
    }
    if (pinned) {
        if (q != NULL)
            queue_pins_locked(last->b, n, bit);
        last->dev = dev;
        last->q = q;
        last->bufs = bufs;
    }
    sw__unlock(dev);
    return pinned ? SW_OK : SW__AGAIN;
}

int sw__launch_end_q_try(sw_queue *qh, sw_buffer *const *bufs, size_t n)
{
    if (bufs == NULL || n == 0)
        return SW__AGAIN;
    sw__queue *q;
    sw_device *dev = try_enter(qh, bufs[0], &q);
    if (dev == NULL)
        return SW__AGAIN;
    bool done = sw__warm_end_locked(dev, q, bufs, n);
    sw__unlock(dev);
    return done ? SW_OK : SW__AGAIN;
}
