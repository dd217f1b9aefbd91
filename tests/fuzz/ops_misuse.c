/*
 * ops_misuse.c -- handle misuse and bad arguments: double frees, use after
 * free of every kind of handle, foreign values (another type's handle, a
 * device, a host pointer, garbage), NULL pointers, ranges past the end,
 * the wrong device's buffers and queues, bad dtypes, kernels and sizes,
 * misaligned typed operands, bad fill patterns, overlapping copies,
 * unmatched launch ends, a full callback table, bad specs, closing a
 * device that is in use.
 *
 * Each must fail with the code the header names and change nothing at all
 * (fz_result compares memory_info and every allocation's state before and
 * after), and set its out-parameters to NULL/0.
 */
#include "misuse.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int fz_static_var;

/* A handle layout detail (src/core/internal.h: bits 28..31 of a handle
 * are its type, and type 0 is none): a value with those bits clear is
 * never a live handle.  Should the layout change, such a value is still
 * "any other value" to the header; it is only no longer certain. */
#define FZ_TYPE_BITS ((uintptr_t)0xF << 28)

static int dead_or(fz_engine *e, fz_src *s, int kind, void **out)
{
    void *d = fz_pick_dead(e, s, kind);
    *out = d != NULL ? d : (void *)&fz_static_var;
    return 0;
}

/* A value that is certainly not a live handle of `kind` (0 buffer,
 * 1 lease, 2 queue, 3 event, 4 scope), and not NULL. */
void *fz_foreign(fz_engine *e, fz_src *s, int kind)
{
    void *v = NULL;
    switch (fz_u8(s) % 9) {
    case 0:
        dead_or(e, s, kind, &v);
        return v;
    case 1: return &fz_static_var;
    case 2: return (void *)(uintptr_t)1;
    case 3: return (void *)UINTPTR_MAX;
    case 4: return (void *)e->w->dev[0];
    case 5: { /* a live handle of another type */
        for (int l = 0; l < FZ_NLEASE && kind != 1; l++)
            if (e->lease[l].live)
                return e->lease[l].l;
        for (int v2 = 0; v2 < FZ_NEVENT && kind != 3; v2++)
            if (e->event[v2].live)
                return e->event[v2].ev;
        for (int k = 0; k < FZ_NSCOPE && kind != 4; k++)
            if (e->scope[k].live)
                return e->scope[k].s;
        for (int i = 0; i < FZ_NBUF && kind != 0; i++)
            if (e->buf[i].live)
                return e->buf[i].h;
        return &fz_static_var;
    }
    case 6: { /* garbage with no type */
        uintptr_t x = (uintptr_t)fz_u64(s) & ~FZ_TYPE_BITS;
        return (void *)(x ? x : 2);
    }
    case 7: /* a dead handle of another type */
        dead_or(e, s, (kind + 1 + (int)fz_below(s, 4)) % 5, &v);
        return v;
    default: /* a live device handle, one byte off */
        return (char *)e->w->dev[0] + 1;
    }
}

/* A value that is not a device handle: the registry checks a device by
 * address, so anything but one of its slots is refused. */
sw_device *fz_foreign_device(fz_engine *e, fz_src *s)
{
    switch (fz_u8(s) % 4) {
    case 0: return (sw_device *)&fz_static_var;
    case 1: return (sw_device *)((char *)e->w->dev[0] + 1);
    case 2: {
        int i = fz_pick_buf(e, s, false);
        return i >= 0 ? (sw_device *)e->buf[i].h : (sw_device *)1;
    }
    default: return (sw_device *)(uintptr_t)8;
    }
}

/* A live buffer handle slot (any), or -1. */
static int live_buf(fz_engine *e, fz_src *s)
{
    return fz_pick_buf(e, s, false);
}

/* ------------------------------------------------------------------------
 * Freed and foreign buffer handles
 * ---------------------------------------------------------------------- */

bool fz_misuse_buffer(fz_engine *e, fz_src *s)
{
    sw_buffer *h = fz_foreign(e, s, 0);
    int li = live_buf(e, s);
    sw_buffer *live = li >= 0 ? e->buf[li].h : NULL;
    int devi = li >= 0 ? e->alloc[e->buf[li].alloc].devi : 0;
    sw_device *dev = e->w->dev[devi];
    const int H = SW_ERR_INVALID_HANDLE;
    unsigned char tmp[16] = {0};
    uint8_t k = fz_u8(s) % 20;
    fz_note(e, "misuse: foreign/freed buffer %p in call %u", (void *)h, k);
    switch (k) {
    case 0: STRICT("sw_buffer_free", H, sw_buffer_free(h)); break;
    case 1: STRICT("sw_buffer_read", H, sw_buffer_read(h, 0, tmp, 1)); break;
    case 2: STRICT("sw_buffer_write", H, sw_buffer_write(h, 0, tmp, 1));
        break;
    case 3: {
        sw_buffer *v = (sw_buffer *)&fz_static_var;
        STRICT("sw_buffer_view", H, sw_buffer_view(h, 0, 0, &v));
        OUT_NULL(v, "sw_buffer_view");
        break;
    }
    case 4: STRICT("sw_buffer_retain", H, sw_buffer_retain(h)); break;
    case 5: {
        size_t sz = 5;
        STRICT("sw_buffer_size", H, sw_buffer_size(h, &sz));
        if (sz != 0)
            fz_fail(e->w, e, "a failed sw_buffer_size left *size set");
        break;
    }
    case 6: {
        sw_buffer_state st = SW_SPILLED;
        STRICT("sw_buffer_state_get", H, sw_buffer_state_get(h, &st));
        break;
    }
    case 7: {
        char t[8] = "x";
        STRICT("sw_buffer_tag", H, sw_buffer_tag(h, t, sizeof t));
        if (t[0] != '\0')
            fz_fail(e->w, e, "a failed sw_buffer_tag left its buffer set");
        break;
    }
    case 8: {
        sw_device *d = dev;
        STRICT("sw_buffer_device", H, sw_buffer_device(h, &d));
        OUT_NULL(d, "sw_buffer_device");
        break;
    }
    case 9: {
        sw_devmem m = {3, 3};
        STRICT("sw_buffer_device_ptr", H, sw_buffer_device_ptr(h, &m));
        if (m.base || m.offset)
            fz_fail(e->w, e, "a failed device_ptr left *out set");
        break;
    }
    case 10: {
        sw_devmem m = {3, 3};
        sw_lease *l = (sw_lease *)&fz_static_var;
        STRICT("sw_buffer_expose", H, sw_buffer_expose(h, &m, &l));
        OUT_NULL(l, "sw_buffer_expose");
        break;
    }
    case 11: {
        unsigned char pat[4] = {1, 2, 3, 4};
        STRICT("sw_buffer_fill", H, sw_buffer_fill(h, 0, 4, pat, 4));
        break;
    }
    case 12:
        if (live == NULL)
            return false;
        STRICT("sw_buffer_copy (dst)", H, sw_buffer_copy(h, 0, live, 0, 0));
        break;
    case 13:
        if (live == NULL)
            return false;
        STRICT("sw_buffer_copy (src)", H, sw_buffer_copy(live, 0, h, 0, 0));
        break;
    case 14:
        if (live == NULL)
            return false;
        STRICT("sw_op_add (operand)", H,
               sw_op_add(live, h, live, SW_INT32, 0));
        break;
    case 15: {
        sw_scalar v = {.i = 1};
        STRICT("sw_op_fill", H, sw_op_fill(h, SW_INT32, 1, v));
        break;
    }
    case 16: {
        sw_scalar out = {.i = 9};
        STRICT("sw_op_sum", H, sw_op_sum(h, SW_INT64, 1, &out));
        if (out.i != 0)
            fz_fail(e->w, e, "a failed sw_op_sum left *out set");
        break;
    }
    case 17: {
        if (live == NULL)
            return false;
        sw_buffer *args[2] = {live, h};
        sw_devmem p[2] = {{3, 3}, {3, 3}};
        STRICT("sw_launch_begin", H, sw_launch_begin(dev, args, 2, p));
        if (p[0].base || p[1].base)
            fz_fail(e->w, e, "a failed sw_launch_begin left ptrs set");
        break;
    }
    case 18: {
        sw_buffer *args[1] = {h};
        STRICT("sw_launch_end", H, sw_launch_end(dev, args, 1));
        break;
    }
    default: {
        sw_scalar a = {.f = 2.0};
        if (live == NULL)
            return false;
        STRICT("sw_op_scale (operand)", H,
               sw_op_scale(live, h, a, SW_FLOAT32, 0));
        break;
    }
    }
    return true;
}

/* ------------------------------------------------------------------------
 * NULL pointers
 * ---------------------------------------------------------------------- */

static int live_queue_any(fz_engine *e, int *d)
{
    for (*d = 0; *d < e->w->ndev; (*d)++)
        for (int q = 0; q < FZ_NQUEUE; q++)
            if (e->queue[*d][q].live && e->queue[*d][q].refs > 0)
                return q;
    return -1;
}

bool fz_misuse_nulls(fz_engine *e, fz_src *s)
{
    const int A = SW_ERR_INVALID_ARG;
    int li = live_buf(e, s);
    sw_buffer *h = li >= 0 ? e->buf[li].h : NULL;
    int devi = li >= 0 ? e->alloc[e->buf[li].alloc].devi : 0;
    sw_device *dev = e->w->dev[devi];
    unsigned char pat[8] = {0};
    uint8_t k = fz_u8(s) % 32;
    fz_note(e, "misuse: NULL in call %u", k);
    if (h == NULL && k >= 2 && k <= 11)
        return false;
    switch (k) {
    case 0: STRICT("sw_buffer_alloc(out NULL)", A,
                   sw_buffer_alloc(dev, 16, NULL, NULL));
        break;
    case 1: {
        sw_buffer *o = (sw_buffer *)&fz_static_var;
        STRICT("sw_buffer_alloc(dev NULL)", A,
               sw_buffer_alloc(NULL, 16, NULL, &o));
        OUT_NULL(o, "sw_buffer_alloc");
        break;
    }
    case 2: STRICT("sw_buffer_view(out NULL)", A,
                   sw_buffer_view(h, 0, 0, NULL));
        break;
    case 3: STRICT("sw_buffer_read(dst NULL)", A,
                   sw_buffer_read(h, 0, NULL, 1));
        break;
    case 4: STRICT("sw_buffer_write(src NULL)", A,
                   sw_buffer_write(h, 0, NULL, 1));
        break;
    case 5: STRICT("sw_buffer_fill(pattern NULL)", A,
                   sw_buffer_fill(h, 0, 4, NULL, 4));
        break;
    case 6: {
        sw_lease *l = (sw_lease *)&fz_static_var;
        sw_devmem m = {3, 3};
        if (fz_u8(s) & 1) {
            STRICT("sw_buffer_expose(ptr NULL)", A,
                   sw_buffer_expose(h, NULL, &l));
            if (l != NULL)
                fz_fail(e->w, e, "sw_buffer_expose(ptr NULL) failed and "
                        "left *out as it was");
        } else {
            STRICT("sw_buffer_expose(out NULL)", A,
                   sw_buffer_expose(h, &m, NULL));
            if (m.base != 0 || m.offset != 0)
                fz_fail(e->w, e, "sw_buffer_expose(out NULL) failed and "
                        "left *ptr as it was");
        }
        break;
    }
    case 7: STRICT("sw_buffer_device_ptr(out NULL)", A,
                   sw_buffer_device_ptr(h, NULL));
        break;
    case 8: STRICT("sw_buffer_size(NULL)", A, sw_buffer_size(h, NULL));
        break;
    case 9: STRICT("sw_buffer_state_get(NULL)", A,
                   sw_buffer_state_get(h, NULL));
        break;
    case 10: STRICT("sw_buffer_tag(NULL)", A, sw_buffer_tag(h, NULL, 8));
        break;
    case 11: STRICT("sw_buffer_device(NULL)", A, sw_buffer_device(h, NULL));
        break;
    case 12: STRICT("sw_memory_info_get(NULL)", A,
                    sw_memory_info_get(dev, NULL));
        break;
    case 13: STRICT("sw_get_memory_budget(NULL)", A,
                    sw_get_memory_budget(dev, NULL));
        break;
    case 14: STRICT("sw_peak_scope_begin(NULL)", A,
                    sw_peak_scope_begin(dev, NULL));
        break;
    case 15: STRICT("sw_queue_create(NULL)", A, sw_queue_create(dev, NULL));
        break;
    case 16: {
        int d, q = live_queue_any(e, &d);
        if (q < 0)
            return false;
        STRICT("sw_queue_record_event(NULL)", A,
               sw_queue_record_event(e->queue[d][q].q, NULL));
        break;
    }
    case 17: {
        int d, q = live_queue_any(e, &d);
        if (q < 0)
            return false;
        sw_event *ev = (sw_event *)&fz_static_var;
        STRICT("sw_queue_host_task(fn NULL)", A,
               sw_queue_host_task(e->queue[d][q].q, NULL, NULL, &ev));
        OUT_NULL(ev, "sw_queue_host_task");
        break;
    }
    case 18: {
        int v = -1;
        for (int j = 0; j < FZ_NEVENT && v < 0; j++)
            if (e->event[j].live)
                v = j;
        if (v < 0)
            return false;
        STRICT("sw_event_query(NULL)", A,
               sw_event_query(e->event[v].ev, NULL));
        break;
    }
    case 19: {
        int v = -1;
        for (int j = 0; j < FZ_NEVENT && v < 0; j++)
            if (e->event[j].live)
                v = j;
        if (v < 0)
            return false;
        STRICT("sw_order_add(NULL)", A, sw_order_add(NULL, e->event[v].ev,
                                                     0));
        break;
    }
    case 20: {
        size_t a = 5, b = 5;
        int idle = 5;
        STRICT("sw_order_counts(NULL)", A, sw_order_counts(NULL, &a, &b));
        STRICT("sw_order_idle(NULL)", A, sw_order_idle(NULL, &idle));
        if (a != 0 || b != 0 || idle != 0)
            fz_fail(e->w, e, "sw_order_counts/sw_order_idle(NULL) failed "
                    "and left their counts as they were");
        if (sw_order_event(NULL, 0, 0) != NULL)
            fz_fail(e->w, e, "sw_order_event(NULL) is not NULL");
        break;
    }
    case 21: STRICT("sw_order_create(NULL)", A, sw_order_create(NULL));
        break;
    case 22: {
        sw_devmem p[1] = {{3, 3}};
        STRICT("sw_launch_begin(bufs NULL)", A,
               sw_launch_begin(dev, NULL, 1, p));
        if (p[0].base != 0 || p[0].offset != 0)
            fz_fail(e->w, e, "sw_launch_begin(bufs NULL) failed and left "
                    "ptrs as they were");
        break;
    }
    case 23: STRICT("sw_launch_kernel(NULL)", A, sw_launch_kernel(dev, NULL));
        break;
    case 24: {
        int id = 5;
        STRICT("sw_add_pressure_callback(fn NULL)", A,
               sw_add_pressure_callback(dev, NULL, NULL, &id));
        if (id != -1)
            fz_fail(e->w, e, "a failed add_pressure_callback left *id set");
        break;
    }
    case 25:
        if (h == NULL)
            return false;
        STRICT("sw_op_add(a NULL)", A, sw_op_add(h, NULL, h, SW_INT32, 0));
        break;
    case 26:
        if (h == NULL)
            return false;
        STRICT("sw_op_sum(out NULL)", A, sw_op_sum(h, SW_INT32, 0, NULL));
        break;
    case 27: {
        sw_scalar v = {.i = 0};
        if (h == NULL)
            return false;
        STRICT("sw_op_fill_q(q NULL)", A,
               sw_op_fill_q(NULL, h, SW_INT32, 0, v));
        break;
    }
    case 28:
        if (h == NULL)
            return false;
        STRICT("sw_buffer_copy_q(q NULL)", A,
               sw_buffer_copy_q(NULL, h, 0, h, 0, 0));
        break;
    case 29: STRICT("sw_buffer_read(buffer NULL)", A,
                    sw_buffer_read(NULL, 0, pat, 1));
        break;
    case 30: STRICT("sw_device_count(NULL)", A, sw_device_count(NULL));
        break;
    default: {
        /* NULL handles where the header makes them no-ops. */
        int rc = sw_buffer_free(NULL) | sw_lease_release(NULL) |
                 sw_queue_release(NULL) | sw_event_release(NULL) |
                 sw_device_close(NULL);
        sw_order_destroy(NULL);
        if (rc != SW_OK)
            fz_fail(e->w, e, "a NULL handle was not a harmless no-op");
        break;
    }
    }
    return true;
}

bool fz_op_misuse(fz_engine *e, fz_src *s, unsigned kind)
{
    (void)kind;
    atomic_fetch_add(&e->w->stats.misuse, 1);
    switch (fz_u8(s) % 13) {
    case 0: case 1: return fz_misuse_buffer(e, s);
    case 2: return fz_misuse_nulls(e, s);
    case 3: return fz_misuse_ranges(e, s);
    case 4: return fz_misuse_dtypes(e, s);
    case 5: return fz_misuse_misalign(e, s);
    case 6: return fz_misuse_patterns(e, s);
    case 7: return fz_misuse_wrong_device(e, s);
    case 8: return fz_misuse_unmatched_end(e, s);
    case 9: return fz_misuse_handles(e, s);
    case 10: return fz_misuse_callbacks(e, s) || fz_misuse_faults(e, s);
    case 11: return fz_misuse_devices(e, s);
    default: return fz_misuse_misc(e, s);
    }
}
