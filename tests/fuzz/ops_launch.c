/*
 * ops_launch.c -- raw launches: sw_launch_begin pins buffers and hands out
 * their device memory, sw_launch_kernel runs a built-in kernel on it (on
 * the default queue, or on a queue followed by a wait for that queue: the
 * core cannot order raw device memory for us), sw_launch_end unpins.
 * Pinned memory never moves: every raw launch first checks each argument's
 * device pointer is still the one sw_launch_begin gave.
 *
 * The queue-taking pins too (sw_launch_begin_q / _end_q): pinned for a
 * queue, the raw kernels run there with no wait before or after -- the
 * begin ordered the queue after the buffers' earlier work on every queue
 * (the model waits for none of it), and the end
 * orders every later use after the queue's -- which is what is checked
 * (the next full check reads the bytes); pinned for the host (q NULL), the
 * memory holds the shadow's bytes at once on a host-addressable device.
 */
#include "model.h"

#include <stdio.h>
#include <string.h>

static int free_launch(fz_engine *e)
{
    for (int l = 0; l < FZ_NLAUNCH; l++)
        if (!e->launch[l].live)
            return l;
    return -1;
}

static int live_launch(fz_engine *e, fz_src *s)
{
    int start = (int)fz_below(s, FZ_NLAUNCH);
    for (int k = 0; k < FZ_NLAUNCH; k++)
        if (e->launch[(start + k) % FZ_NLAUNCH].live)
            return (start + k) % FZ_NLAUNCH;
    return -1;
}

static bool op_begin(fz_engine *e, fz_src *s)
{
    int l = free_launch(e);
    if (l < 0)
        return false;
    int devi = fz_pick_dev(e, s);
    fz_launch *ln = &e->launch[l];
    int n = 1 + (int)fz_below(s, FZ_LAUNCH_ARGS);
    for (int k = 0; k < n; k++) {
        ln->slot[k] = fz_pick_buf_dev(e, s, devi, false);
        if (ln->slot[k] < 0)
            return false;
        ln->h[k] = e->buf[ln->slot[k]].h;
    }
    fz_note(e, "launch_begin %d args on %s: %d %d %d %d", n,
            e->w->spec[devi], ln->slot[0], n > 1 ? ln->slot[1] : -1,
            n > 2 ? ln->slot[2] : -1, n > 3 ? ln->slot[3] : -1);
    uint8_t how = fz_u8(s);
    int mode = how < 150 ? FZ_PIN_DEFAULT
               : how < 220 ? fz_pick_queue(e, s, devi)
                           : FZ_PIN_HOST;
    if (mode == -1)
        mode = FZ_PIN_DEFAULT; /* no queue to pin for */
    sw_queue *qh = mode >= 0 ? e->queue[devi][mode].q : NULL;
    fz_note_more(e, " %s", mode == FZ_PIN_DEFAULT ? ""
                           : mode == FZ_PIN_HOST  ? "(for the host)"
                                                  : "(for a queue)");
    /* Access modes, one bit per argument (1: read only), or none. */
    uint8_t acc = fz_u8(s);
    ln->has_access = acc >= 64;
    for (int k = 0; k < n; k++)
        ln->access[k] = ln->has_access && (acc >> k & 1u) ? SW_ACCESS_READ
                                                          : SW_ACCESS_WRITE;
    if (ln->has_access)
        fz_note_more(e, " access %c%c%c%c", ln->access[0] ? 'r' : 'w',
                     n > 1 ? (ln->access[1] ? 'r' : 'w') : '-',
                     n > 2 ? (ln->access[2] ? 'r' : 'w') : '-',
                     n > 3 ? (ln->access[3] ? 'r' : 'w') : '-');
    const unsigned char *access = ln->has_access ? ln->access : NULL;
    sw_devmem ptr[FZ_LAUNCH_ARGS];
    memset(ptr, 0x5A, sizeof ptr);
    /* The begin orders the queue after every queue's work on the
     * buffers, and the host's pin waits for it: the model leaves that to
     * the core (the queue's pin once waited for the others first). */
    if (mode >= 0)
        fz_order_before_pin(e, devi, mode, ln->slot, n);
    else if (mode == FZ_PIN_HOST)
        fz_order_before(e, devi, -1, ln->slot, n);
    int rc = mode == FZ_PIN_DEFAULT
                 ? (access != NULL
                        ? sw_launch_begin_access(e->w->dev[devi], ln->h,
                                                 access, (size_t)n, ptr)
                        : sw_launch_begin(e->w->dev[devi], ln->h, (size_t)n,
                                          ptr))
                 : (access != NULL
                        ? sw_launch_begin_q_access(qh, ln->h, access,
                                                   (size_t)n, ptr)
                        : sw_launch_begin_q(qh, ln->h, (size_t)n, ptr));
    /* A restore may have run the pressure callbacks (one freeing a
     * donated handle), before fz_result looks at every allocation's
     * state.  (Missing, a begin that restored under an allocation fault
     * read a handle its callback had freed -- found by the fuzzer.) */
    fz_process_callbacks(e);
    if (!fz_result(e, mode == FZ_PIN_DEFAULT ? "sw_launch_begin"
                                             : "sw_launch_begin_q",
                   rc, fz_expect_for(e, ln->slot, n), 0, NULL)) {
        for (int k = 0; k < n; k++)
            if (ptr[k].base != 0 || ptr[k].offset != 0)
                fz_fail(e->w, e, "a failed sw_launch_begin left ptrs[%d] "
                        "set", k);
        return true;
    }
    ln->live = true;
    ln->devi = devi;
    ln->n = n;
    ln->mode = mode;
    ln->qh = qh;
    ln->begin_step = e->step;
    if (qh != NULL && sw_queue_retain(qh) != SW_OK)
        fz_fail(e->w, e, "sw_queue_retain of a live queue: %s",
                sw_last_error());
    memcpy(ln->ptr, ptr, sizeof ptr);
    for (int k = 0; k < n; k++) {
        e->buf[ln->slot[k]].launch_uses++;
        e->alloc[e->buf[ln->slot[k]].alloc].pins++;
    }
    for (int k = 0; k < n; k++) {
        fz_expect_resident(e, ln->slot[k], "sw_launch_begin");
        /* The host's pin waited for the work on them: the bytes are
         * there (where the host can address them). */
        if (!e->w->threaded)
            fz_check_devmem(e, ln->slot[k], ptr[k], "sw_launch_begin",
                            mode == FZ_PIN_HOST);
    }
    if (mode >= 0)
        fz_order_after(e, devi, mode, ln->slot, n);
    return true;
}

int fz_launch_end(fz_engine *e, fz_launch *ln)
{
    int rc;
    if (ln->mode == FZ_PIN_DEFAULT) {
        rc = sw_launch_end(e->w->dev[ln->devi], ln->h, (size_t)ln->n);
    } else {
        /* The host's pin: its raw launches (on the default queue) are
         * the caller's to finish before the end. */
        if (ln->mode == FZ_PIN_HOST &&
            (rc = fz_sync_device(e, e->w->dev[ln->devi])) != SW_OK)
            fz_fail(e->w, e, "sw_device_synchronize before a host pin's "
                    "end: %s", fz_err(rc));
        rc = sw_launch_end_q(ln->qh, ln->h, (size_t)ln->n);
        sw_queue *qh = ln->qh;
        ln->qh = NULL;
        if (qh != NULL) {
            int r2 = sw_queue_release(qh);
            if (r2 != SW_OK)
                fz_fail(e->w, e, "releasing a pinned launch's queue: %s",
                        fz_err(r2));
            /* Its last reference, if the model let go of its own. */
            bool held = false;
            for (int q = 0; q < FZ_NQUEUE; q++)
                held |= e->queue[ln->devi][q].live &&
                        e->queue[ln->devi][q].q == qh;
            for (int l = 0; l < FZ_NLAUNCH; l++)
                held |= e->launch[l].live && e->launch[l].qh == qh;
            if (!held)
                fz_remember_dead(e, 2, qh);
        }
    }
    return rc;
}

static bool misaligned(sw_devmem m, size_t es)
{
    return m.offset % es != 0;
}

static bool op_kernel(fz_engine *e, fz_src *s)
{
    int l = live_launch(e, s);
    if (l < 0)
        return false;
    fz_launch *ln = &e->launch[l];
    /* Pinned memory stays put. */
    for (int k = 0; k < ln->n; k++) {
        sw_devmem m;
        int rc = sw_buffer_device_ptr(ln->h[k], &m);
        if (rc != SW_OK || m.base != ln->ptr[k].base ||
            m.offset != ln->ptr[k].offset)
            fz_fail(e->w, e, "launch %d argument %d moved while pinned "
                    "(%s)", l, k, fz_err(rc));
    }
    sw_kernel k = (sw_kernel)fz_below(s, 6);
    sw_dtype d = fz_draw_dtype(s);
    size_t es = sw_dtype_size(d);
    if (!(e->dm[ln->devi].dtypes >> d & 1u))
        return false;
    int o = (int)fz_below(s, (size_t)ln->n);
    int a = (int)fz_below(s, (size_t)ln->n);
    int b = (int)fz_below(s, (size_t)ln->n);
    /* Every kernel writes its output (a sum too): one pinned for writing
     * (the next such argument, if o was pinned read-only). */
    for (int j = 0; ln->access[o] == SW_ACCESS_READ && j < ln->n; j++)
        o = (o + 1) % ln->n;
    if (ln->access[o] == SW_ACCESS_READ)
        return false;
    fz_buf *bo = &e->buf[ln->slot[o]], *ba = &e->buf[ln->slot[a]],
           *bb = &e->buf[ln->slot[b]];
    size_t ro;
    int r = fz_root(e, bo->alloc, 0, &ro);
    if (k != SW_KERNEL_SUM &&
        (e->alloc[bo->alloc].readonly || e->alloc[r].readonly))
        return false;
    size_t sum_bytes = d == SW_COMPLEX64 || d == SW_COMPLEX128 ? 16 : 8;
    if (k == SW_KERNEL_SUM && (bo->size < sum_bytes ||
                               e->alloc[bo->alloc].readonly ||
                               e->alloc[r].readonly))
        return false;
    size_t nmax = k == SW_KERNEL_SUM ? ba->size / es : bo->size / es;
    if (k != SW_KERNEL_FILL && k != SW_KERNEL_SUM && ba->size / es < nmax)
        nmax = ba->size / es;
    if (k == SW_KERNEL_ADD && bb->size / es < nmax)
        nmax = bb->size / es;
    size_t n = fz_u8(s) < 128 ? nmax : fz_below(s, nmax + 1);
    size_t bytes = n * es;
    /* The kernels allow out == a exactly; any other overlap of what a
     * kernel writes with what it reads is a race on a GPU. */
    if (k == SW_KERNEL_COPY || k == SW_KERNEL_ADD || k == SW_KERNEL_SCALE ||
        k == SW_KERNEL_AXPY) {
        int others[2] = {a, k == SW_KERNEL_ADD ? b : a};
        for (int j = 0; j < 2; j++) {
            fz_buf *x = &e->buf[ln->slot[others[j]]];
            if (fz_overlap(e, bo->alloc, bo->off, bytes, x->alloc, x->off,
                           bytes) &&
                fz_devoff(e, bo->alloc, bo->off) !=
                    fz_devoff(e, x->alloc, x->off))
                return false;
            size_t r1, r2;
            if (fz_overlap(e, bo->alloc, bo->off, bytes, x->alloc, x->off,
                           bytes) &&
                fz_root(e, bo->alloc, bo->off, &r1) !=
                    fz_root(e, x->alloc, x->off, &r2))
                return false;
        }
    }
    sw_kernel_args args;
    memset(&args, 0, sizeof args);
    args.kernel = k;
    args.dtype = d;
    args.n = n;
    args.out = ln->ptr[o];
    if (k != SW_KERNEL_FILL)
        args.a = ln->ptr[a];
    if (k == SW_KERNEL_ADD)
        args.b = ln->ptr[b];
    args.alpha = fz_draw_scalar(s, d);
    /* bool has fill, copy and sum only (checked before alignment). */
    bool nodtype = d == SW_BOOL && k != SW_KERNEL_FILL &&
                   k != SW_KERNEL_COPY && k != SW_KERNEL_SUM;
    bool bad = nodtype;
    if (n > 0 && !nodtype) {
        if (k == SW_KERNEL_ADD)
            bad = misaligned(args.out, es) || misaligned(args.a, es) ||
                  misaligned(args.b, es);
        else if (k == SW_KERNEL_SCALE || k == SW_KERNEL_AXPY)
            bad = misaligned(args.out, es) || misaligned(args.a, es);
        else if (k == SW_KERNEL_SUM)
            bad = misaligned(args.a, es);
    }
    int q = fz_u8(s) < 64 ? fz_pick_queue(e, s, ln->devi) : -1;
    if (ln->mode >= 0)
        q = ln->mode; /* a queue's pin: its kernels run there */
    fz_snapshot snap;
    if (bad)
        fz_snapshot_take(e, &snap);
    fz_note(e, "launch_kernel %s %s n=%zu out %d a %d b %d of launch %d%s%s",
            sw_kernel_name(k), sw_dtype_name(d), n, ln->slot[o],
            ln->slot[a], ln->slot[b], l, q >= 0 ? " on a queue" : "",
            nodtype ? " (not for bool)" : bad ? " (misaligned)" : "");
    /* The core orders buffers when they are pinned, not raw device
     * memory afterwards: work queued on it since (another queue's in a
     * burst) is the caller's to wait for. */
    if (!bad)
        fz_order_before(e, ln->devi, FZ_RAW_LAUNCH, ln->slot, ln->n);
    int rc;
    if (ln->mode >= 0) {
        /* Pinned for this queue: the begin ordered it after the work
         * queued on the buffers before it, and the end will order their
         * later uses after it; what the default queue did to them since
         * the begin (a burst's steps in between) is the caller's to wait
         * for. */
        if (!bad && e->in_flight && e->step != ln->begin_step + 1 &&
            (rc = fz_sync_device(e, e->w->dev[ln->devi])) != SW_OK)
            fz_fail(e->w, e, "sw_device_synchronize: %s", fz_err(rc));
        rc = sw_launch_kernel_q(ln->qh, &args);
    } else if (q >= 0) {
        /* ... and so is the default queue's, for a launch on a queue. */
        sw_queue *qh = e->queue[ln->devi][q].q;
        if (!bad && (rc = fz_sync_device(e, e->w->dev[ln->devi])) != SW_OK)
            fz_fail(e->w, e, "sw_device_synchronize: %s", fz_err(rc));
        rc = sw_launch_kernel_q(qh, &args);
        if (rc == SW_OK) {
            int r2 = fz_sync_queue(e, qh);
            if (r2 != SW_OK)
                fz_fail(e->w, e, "sw_queue_synchronize after a launch: %s",
                        fz_err(r2));
        }
    } else {
        rc = sw_launch_kernel(e->w->dev[ln->devi], &args);
    }
    if (!fz_result(e, "sw_launch_kernel", rc, bad ? FZ_ERR : FZ_OK,
                   nodtype ? SW_ERR_DTYPE : SW_ERR_INVALID_ARG,
                   bad ? &snap : NULL))
        return true;
    fz_order_after(e, ln->devi, ln->mode >= 0 ? ln->mode : -1, ln->slot,
                   ln->n);
    /* A queue's pin orders later uses of the same bases after the queue;
     * memory reached through another base too (a wrap over an allocation,
     * or the allocation under a wrap) is the caller's to order, as for any
     * queue (fz_queue_done): wait for the queue. */
    bool aliased = false;
    for (int j = 0; ln->mode >= 0 && j < ln->n && !aliased; j++)
        aliased = fz_aliased(e, e->buf[ln->slot[j]].alloc);
    if (aliased && (rc = fz_sync_queue(e, ln->qh)) != SW_OK)
        fz_fail(e->w, e, "sw_queue_synchronize after a launch on aliased "
                "memory: %s", fz_err(rc));
    if (q < 0 && e->burst_left > 0)
        for (int j = 0; j < ln->n; j++) {
            size_t rj;
            e->lastq[fz_root(e, e->buf[ln->slot[j]].alloc, 0, &rj)] =
                FZ_LASTQ_RAW;
        }
    unsigned char *out = fz_bytes(e, bo->alloc, bo->off);
    if (k == SW_KERNEL_SUM) {
        unsigned char got[16];
        rc = fz_read(e, bo->h, 0, got, sum_bytes);
        if (rc != SW_OK)
            fz_fail(e->w, e, "reading a sum's result: %s", fz_err(rc));
        /* The sum of nothing is 0. */
        if (fz_check_sum(e, d, fz_bytes(e, ba->alloc, ba->off), n,
                         ln->devi, got) == 0)
            memcpy(out, got, sum_bytes);
        return true;
    }
    fz_apply_kernel(k, d, n, out, fz_bytes(e, ba->alloc, ba->off),
                    fz_bytes(e, bb->alloc, bb->off), args.alpha);
    fz_adopt_nans(e, ln->slot[o], 0, n, d);
    return true;
}

static bool op_end(fz_engine *e, fz_src *s)
{
    int l = live_launch(e, s);
    if (l < 0)
        return false;
    fz_launch *ln = &e->launch[l];
    fz_note(e, "launch_end of launch %d", l);
    int rc = fz_launch_end(e, ln);
    fz_result(e, "sw_launch_end", rc, FZ_OK, 0, NULL);
    ln->live = false;
    for (int k = 0; k < ln->n; k++) {
        e->buf[ln->slot[k]].launch_uses--;
        e->alloc[e->buf[ln->slot[k]].alloc].pins--;
    }
    for (int k = 0; k < ln->n; k++)
        fz_model_maybe_release(e, e->buf[ln->slot[k]].alloc);
    return true;
}

bool fz_op_launch(fz_engine *e, fz_src *s, unsigned k)
{
    switch (k) {
    case 0: return op_begin(e, s);
    case 1: return op_kernel(e, s);
    default: return op_end(e, s);
    }
}
