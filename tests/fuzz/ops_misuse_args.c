/*
 * ops_misuse_args.c -- misuse, arguments: ranges past the end, byte counts
 * that overflow, bad dtypes and kernels, misaligned typed operands, bad
 * fill patterns, overlapping copies, the other device's buffers and
 * queues, unmatched launch ends, and a few more.
 */
#include "misuse.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* A live buffer handle slot (any), or -1. */
static int live_buf(fz_engine *e, fz_src *s)
{
    return fz_pick_buf(e, s, false);
}

/* ------------------------------------------------------------------------
 * Ranges, sizes, dtypes, alignment, patterns, overlap
 * ---------------------------------------------------------------------- */

bool fz_misuse_ranges(fz_engine *e, fz_src *s)
{
    const int R = SW_ERR_OUT_OF_RANGE;
    int li = live_buf(e, s);
    if (li < 0)
        return false;
    fz_buf *b = &e->buf[li];
    int devi = e->alloc[b->alloc].devi;
    size_t S = b->size;
    size_t off = fz_u8(s) & 1 ? S + 1 + fz_below(s, 64) : SIZE_MAX;
    size_t n = 1 + fz_below(s, 64);
    unsigned char *tmp = e->tmp;
    uint8_t k = fz_u8(s) % 12;
    fz_note(e, "misuse: out of range (%u) on handle %d of %zu bytes", k, li,
            S);
    switch (k) {
    case 0: STRICT("sw_buffer_read past the end", R,
                   sw_buffer_read(b->h, S - (S > 0), tmp, 1 + (S > 0)));
        break;
    case 1: STRICT("sw_buffer_write past the end", R,
                   sw_buffer_write(b->h, off, tmp, n));
        break;
    case 2: {
        sw_buffer *v = (sw_buffer *)&fz_static_var;
        STRICT("sw_buffer_view past the end", R,
               sw_buffer_view(b->h, 0, S + n, &v));
        OUT_NULL(v, "sw_buffer_view");
        break;
    }
    case 3: {
        unsigned char pat[1] = {7};
        STRICT("sw_buffer_fill past the end", R,
               sw_buffer_fill(b->h, S, n, pat, 1));
        break;
    }
    case 4: {
        int si = fz_pick_buf_dev(e, s, devi, false);
        if (si < 0)
            return false;
        STRICT("sw_buffer_copy past the source's end", R,
               sw_buffer_copy(b->h, 0, e->buf[si].h, e->buf[si].size, 1));
        break;
    }
    case 5: {
        sw_scalar v = {.i = 1};
        STRICT("sw_op_fill past the end", R,
               sw_op_fill(b->h, SW_INT32, S / 4 + 1, v));
        break;
    }
    case 6: {
        sw_scalar out = {.i = 3};
        STRICT("sw_op_sum past the end", R,
               sw_op_sum(b->h, SW_FLOAT64, S / 8 + 1, &out));
        break;
    }
    case 7: {
        sw_scalar v = {.i = 1};
        STRICT("sw_op_fill with a byte count that overflows",
               SW_ERR_TOO_LARGE,
               sw_op_fill(b->h, SW_INT64, SIZE_MAX / 4, v));
        break;
    }
    case 8: {
        sw_buffer *o = (sw_buffer *)&fz_static_var;
        size_t huge = fz_u8(s) & 1 ? SIZE_MAX : (size_t)1 << 62;
        STRICT("sw_buffer_alloc(huge)", SW_ERR_TOO_LARGE,
               sw_buffer_alloc(e->w->dev[devi], huge, "huge", &o));
        OUT_NULL(o, "sw_buffer_alloc");
        break;
    }
    case 9: {
        sw_kernel_args a;
        memset(&a, 0, sizeof a);
        a.kernel = SW_KERNEL_FILL;
        a.dtype = SW_FLOAT64;
        a.n = SIZE_MAX / 2;
        STRICT("sw_launch_kernel with n overflowing", SW_ERR_INVALID_ARG,
               sw_launch_kernel(e->w->dev[devi], &a));
        break;
    }
    case 10: {
        sw_buffer *v = (sw_buffer *)&fz_static_var;
        STRICT("sw_buffer_view at SIZE_MAX", R,
               sw_buffer_view(b->h, SIZE_MAX, 1, &v));
        OUT_NULL(v, "sw_buffer_view");
        break;
    }
    default: {
        int si = fz_pick_buf_dev(e, s, devi, false);
        if (si < 0)
            return false;
        STRICT("sw_buffer_copy past the destination's end", R,
               sw_buffer_copy(b->h, SIZE_MAX - 1, e->buf[si].h, 0, 2));
        break;
    }
    }
    return true;
}

bool fz_misuse_dtypes(fz_engine *e, fz_src *s)
{
    const int D = SW_ERR_DTYPE;
    int li = live_buf(e, s);
    if (li < 0)
        return false;
    sw_buffer *h = e->buf[li].h;
    int devi = e->alloc[e->buf[li].alloc].devi;
    static const int bad[] = {SW_DTYPE_COUNT, -1, 99, 1 << 20};
    sw_dtype d = (sw_dtype)bad[fz_below(s, 4)];
    sw_dtype_kind kind = SW_KIND_COMPLEX;
    sw_dtype named = SW_INT64;
    if (sw_dtype_size(d) != 0 || sw_dtype_name(d) != NULL ||
        sw_kernel_name((sw_kernel)6) != NULL ||
        sw_kernel_name((sw_kernel)-1) != NULL ||
        sw_dtype_kind_get(d, &kind) != SW_ERR_DTYPE ||
        sw_dtype_from_name("float33", &named) != SW_ERR_DTYPE ||
        sw_dtype_from_name("float32", &named) != SW_OK ||
        named != SW_FLOAT32)
        fz_fail(e->w, e, "a bad dtype %d has a size, a name or a kind, or "
                "names do not map", (int)d);
    sw_scalar v = {.i = 0};
    uint8_t k = fz_u8(s) % 6;
    fz_note(e, "misuse: dtype %d in call %u", (int)d, k);
    switch (k) {
    case 0: STRICT("sw_op_fill(bad dtype)", D, sw_op_fill(h, d, 0, v));
        break;
    case 1: STRICT("sw_op_add(bad dtype)", D, sw_op_add(h, h, h, d, 0));
        break;
    case 2: {
        sw_scalar out = {.i = 4};
        STRICT("sw_op_sum(bad dtype)", D, sw_op_sum(h, d, 0, &out));
        break;
    }
    case 3: STRICT("sw_op_axpy(bad dtype)", D, sw_op_axpy(v, h, h, d, 1));
        break;
    case 4: {
        sw_kernel_args a;
        memset(&a, 0, sizeof a);
        a.kernel = SW_KERNEL_ADD;
        a.dtype = d;
        STRICT("sw_launch_kernel(bad dtype)", D,
               sw_launch_kernel(e->w->dev[devi], &a));
        break;
    }
    default: {
        sw_kernel_args a;
        memset(&a, 0, sizeof a);
        a.kernel = (sw_kernel)(fz_u8(s) & 1 ? 6 : -1);
        a.dtype = SW_INT32;
        STRICT("sw_launch_kernel(bad kernel)", SW_ERR_INVALID_ARG,
               sw_launch_kernel(e->w->dev[devi], &a));
        break;
    }
    }
    return true;
}

bool fz_misuse_misalign(fz_engine *e, fz_src *s)
{
    int li = live_buf(e, s);
    if (li < 0 || e->buf[li].size < 16)
        return false;
    fz_buf *b = &e->buf[li];
    sw_dtype d = fz_u8(s) & 1 ? SW_FLOAT32 : SW_INT64;
    size_t es = sw_dtype_size(d);
    size_t base = fz_devoff(e, b->alloc, b->off);
    size_t off = 1 + fz_below(s, 3);
    while ((base + off) % es == 0)
        off++;
    sw_buffer *v = NULL;
    int rc = sw_buffer_view(b->h, off, b->size - off, &v);
    if (rc == SW_ERR_HOST_OOM && e->w->outside_faults)
        return false;
    if (rc != SW_OK)
        fz_fail(e->w, e, "a view for the misalignment test: %s",
                fz_err(rc));
    sw_scalar two = {.i = 2};
    uint8_t k = fz_u8(s) % 3;
    fz_note(e, "misuse: misaligned operand at +%zu of handle %d (%u)", off,
            li, k);
    const int A = SW_ERR_INVALID_ARG;
    /* The view is ours and writable only if the base is: nothing is
     * written anyway, every call below fails. */
    switch (k) {
    case 0: STRICT("sw_op_scale(misaligned)", A,
                   sw_op_scale(v, v, two, d, 1));
        break;
    case 1: {
        sw_scalar out = {.i = 5};
        STRICT("sw_op_sum(misaligned)", A, sw_op_sum(v, d, 1, &out));
        break;
    }
    default: STRICT("sw_op_add(misaligned b)", A,
                    sw_op_add(b->h, b->h, v, d, 1));
        break;
    }
    if (sw_buffer_free(v) != SW_OK)
        fz_fail(e->w, e, "freeing the misalignment test's view");
    return true;
}

bool fz_misuse_patterns(fz_engine *e, fz_src *s)
{
    int li = live_buf(e, s);
    if (li < 0)
        return false;
    fz_buf *b = &e->buf[li];
    unsigned char pat[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const int A = SW_ERR_INVALID_ARG;
    uint8_t k = fz_u8(s) % 4;
    fz_note(e, "misuse: pattern/overlap (%u) on handle %d", k, li);
    switch (k) {
    case 0: STRICT("sw_buffer_fill(pattern size 3)", A,
                   sw_buffer_fill(b->h, 0, 3, pat, 3));
        break;
    case 1: STRICT("sw_buffer_fill(n not a multiple)", A,
                   sw_buffer_fill(b->h, 0, 5, pat, 2));
        break;
    case 2: STRICT("sw_buffer_fill(pattern size 0)", A,
                   sw_buffer_fill(b->h, 0, 0, pat, 0));
        break;
    default: {
        if (b->size < 3)
            return false;
        size_t n = 2 + fz_below(s, b->size - 2);
        STRICT("sw_buffer_copy(overlapping)", A,
               sw_buffer_copy(b->h, 1, b->h, 0, n));
        break;
    }
    }
    return true;
}

/* ------------------------------------------------------------------------
 * The wrong device, launches
 * ---------------------------------------------------------------------- */

bool fz_misuse_wrong_device(fz_engine *e, fz_src *s)
{
    if (e->w->ndev < 2)
        return false;
    int i0 = fz_pick_buf_dev(e, s, 0, false), i1 = fz_pick_buf_dev(e, s, 1,
                                                                   false);
    if (i0 < 0 || i1 < 0)
        return false;
    if (fz_u8(s) & 1) {
        int t = i0;
        i0 = i1;
        i1 = t;
    }
    sw_buffer *a = e->buf[i0].h, *b = e->buf[i1].h;
    int d0 = e->alloc[e->buf[i0].alloc].devi;
    int d1 = e->alloc[e->buf[i1].alloc].devi;
    const int A = SW_ERR_INVALID_ARG;
    sw_scalar v = {.i = 1};
    uint8_t k = fz_u8(s) % 7;
    fz_note(e, "misuse: handle %d of %s with handle %d of %s (%u)", i0,
            e->w->spec[d0], i1, e->w->spec[d1], k);
    switch (k) {
    case 0: STRICT("sw_buffer_copy across devices", A,
                   sw_buffer_copy(a, 0, b, 0, 0));
        break;
    case 1: STRICT("sw_op_add across devices", A,
                   sw_op_add(a, a, b, SW_INT32, 0));
        break;
    case 2: STRICT("sw_op_scale across devices", A,
                   sw_op_scale(a, b, v, SW_INT64, 0));
        break;
    case 3: {
        sw_buffer *args[2] = {a, b};
        sw_devmem p[2];
        STRICT("sw_launch_begin with another device's buffer", A,
               sw_launch_begin(e->w->dev[d0], args, 2, p));
        break;
    }
    case 4: {
        sw_buffer *args[1] = {b};
        STRICT("sw_launch_end with another device's buffer", A,
               sw_launch_end(e->w->dev[d0], args, 1));
        break;
    }
    case 5: {
        int q = fz_pick_queue(e, s, d1);
        if (q < 0)
            return false;
        STRICT("sw_op_fill_q on another device's queue", A,
               sw_op_fill_q(e->queue[d1][q].q, a, SW_INT32, 0, v));
        break;
    }
    default: {
        int q = fz_pick_queue(e, s, d1);
        if (q < 0)
            return false;
        STRICT("sw_buffer_copy_q on another device's queue", A,
               sw_buffer_copy_q(e->queue[d1][q].q, a, 0, a, 0, 0));
        break;
    }
    }
    return true;
}

bool fz_misuse_unmatched_end(fz_engine *e, fz_src *s)
{
    int li = live_buf(e, s);
    /* (Another engine may pin a shared buffer's base.) */
    if (li < 0 || e->alloc[e->buf[li].alloc].pins != 0 ||
        e->alloc[e->buf[li].alloc].shared >= 0)
        return false;
    fz_note(e, "misuse: launch_end of unpinned handle %d", li);
    sw_buffer *args[1] = {e->buf[li].h};
    STRICT("sw_launch_end without a begin", SW_ERR_INVALID_ARG,
           sw_launch_end(e->w->dev[e->alloc[e->buf[li].alloc].devi], args,
                         1));
    return true;
}

bool fz_misuse_misc(fz_engine *e, fz_src *s)
{
    int li = live_buf(e, s);
    if (li < 0)
        return false;
    fz_buf *b = &e->buf[li];
    int d = e->alloc[b->alloc].devi;
    uint8_t k = fz_u8(s) % 3;
    fz_note(e, "misuse: misc (%u) on handle %d", k, li);
    switch (k) {
    case 0: {
        char t[4] = "x";
        STRICT("sw_buffer_tag(len 0)", SW_ERR_INVALID_ARG,
               sw_buffer_tag(b->h, t, 0));
        break;
    }
    case 1: {
        /* Larger than the whole budget: OOM, and only ooms counts it. */
        uint64_t bud = e->dm[d].budget;
        if (e->w->threaded || bud == 0)
            return false;
        fz_snapshot snap;
        fz_snapshot_take(e, &snap);
        /* Within what one allocation may be, so that it is the budget
         * that refuses it, not the device (SW_ERR_TOO_LARGE). */
        if (bud > snap.info[d].device_total / 2)
            return false;
        size_t size = (size_t)bud + 1;
        snap.info[d].ooms++;
        sw_buffer *o = (sw_buffer *)&fz_static_var;
        int rc = sw_buffer_alloc(e->w->dev[d], size, "over budget", &o);
        fz_result(e, "sw_buffer_alloc(larger than the budget)", rc, FZ_ERR,
                  SW_ERR_OOM, &snap);
        OUT_NULL(o, "sw_buffer_alloc");
        break;
    }
    default: {
        /* A launch refused for one bad argument pins none of the others:
         * ending it afterwards finds them unpinned. */
        if (e->alloc[b->alloc].pins != 0 || e->alloc[b->alloc].shared >= 0)
            return false;
        sw_buffer *args[2] = {b->h, fz_foreign(e, s, 0)};
        sw_devmem p[2];
        STRICT("sw_launch_begin with a bad argument",
               SW_ERR_INVALID_HANDLE, sw_launch_begin(e->w->dev[d], args, 2,
                                                      p));
        STRICT("sw_launch_end after a refused begin", SW_ERR_INVALID_ARG,
               sw_launch_end(e->w->dev[d], args, 1));
        break;
    }
    }
    return true;
}
