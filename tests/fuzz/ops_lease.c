/*
 * ops_lease.c -- device pointers, exposure leases, and external buffers
 * wrapped over a leased buffer's memory (sw_buffer_wrap): an external
 * buffer aliases the leased allocation's bytes, so the shadow maps it onto
 * them (fz_bytes follows ext_of).
 */
#include "model.h"

#include <stdio.h>
#include <string.h>

/* The devmem the header promises for handle i while it is resident. */
void fz_check_devmem(fz_engine *e, int i, sw_devmem m, const char *what,
                     bool bytes)
{
    fz_buf *b = &e->buf[i];
    size_t ro;
    (void)fz_root(e, b->alloc, b->off, &ro);
    /* An allocation of 0 bytes (owned or wrapped) has no memory: base 0,
     * and so offset 0, for every handle of it. */
    if (e->alloc[b->alloc].size == 0) {
        if (m.base != 0 || m.offset != 0)
            fz_fail(e->w, e, "%s of a 0-byte allocation: base %#lx offset "
                    "%zu", what, (unsigned long)m.base, m.offset);
        return;
    }
    if (m.base == 0 || m.offset != ro)
        fz_fail(e->w, e, "%s of handle %d: base %#lx offset %zu, want a "
                "base and offset %zu", what, i, (unsigned long)m.base,
                m.offset, ro);
    /* Where device memory is host memory, the bytes are there too, once
     * all work queued before this step has completed (the last check
     * waited for it, unless it was a burst's). */
    int devi = e->alloc[b->alloc].devi;
    if (bytes && e->w->host_addressable[devi] && b->size > 0 &&
        !e->in_flight &&
        memcmp((const void *)(m.base + m.offset),
               fz_bytes(e, b->alloc, b->off), b->size) != 0)
        fz_fail(e->w, e, "%s of handle %d: the device memory at base + "
                "offset differs from the shadow", what, i);
}

static bool op_device_ptr(fz_engine *e, fz_src *s)
{
    int i = fz_pick_buf(e, s, false);
    if (i < 0)
        return false;
    int slots[1] = {i};
    fz_note(e, "device_ptr of handle %d", i);
    sw_devmem m = {7, 7};
    int rc = sw_buffer_device_ptr(e->buf[i].h, &m);
    fz_process_callbacks(e); /* a restore may have run them */
    if (!fz_result(e, "sw_buffer_device_ptr", rc, fz_expect_for(e, slots, 1),
                   0, NULL)) {
        if (m.base != 0 || m.offset != 0)
            fz_fail(e->w, e, "a failed sw_buffer_device_ptr left *out set");
        return true;
    }
    fz_expect_resident(e, i, "sw_buffer_device_ptr");
    if (!e->w->threaded)
        fz_check_devmem(e, i, m, "sw_buffer_device_ptr", true);
    return true;
}

static int free_lease(fz_engine *e)
{
    for (int l = 0; l < FZ_NLEASE; l++)
        if (!e->lease[l].live)
            return l;
    return -1;
}

static bool op_expose(fz_engine *e, fz_src *s)
{
    int i = fz_pick_buf(e, s, false);
    int l = free_lease(e);
    if (i < 0 || l < 0)
        return false;
    int slots[1] = {i};
    fz_note(e, "expose handle %d", i);
    sw_devmem m = {7, 7};
    sw_lease *ls = (sw_lease *)(uintptr_t)0xA5A5;
    int rc = sw_buffer_expose(e->buf[i].h, &m, &ls);
    if (!fz_result(e, "sw_buffer_expose", rc, fz_expect_for(e, slots, 1), 0,
                   NULL)) {
        if (m.base != 0 || m.offset != 0 || ls != NULL)
            fz_fail(e->w, e, "a failed sw_buffer_expose left *out set");
        return true;
    }
    fz_lease *fl = &e->lease[l];
    memset(fl, 0, sizeof *fl);
    fl->live = true;
    fl->l = ls;
    fl->alloc = e->buf[i].alloc;
    fl->mem = m;
    fl->buf_off = (int)e->buf[i].off;
    fz_note_more(e, " -> lease %d", l);
    e->alloc[fl->alloc].leases++;
    fz_expect_resident(e, i, "sw_buffer_expose");
    fz_check_devmem(e, i, m, "sw_buffer_expose", true);
    return true;
}

static bool op_release(fz_engine *e, fz_src *s)
{
    int start = (int)fz_below(s, FZ_NLEASE), l = -1;
    for (int k = 0; k < FZ_NLEASE && l < 0; k++) {
        int j = (start + k) % FZ_NLEASE;
        /* Wrapped buffers must not outlive the lease they wrap. */
        if (e->lease[j].live && e->lease[j].wraps == 0)
            l = j;
    }
    if (l < 0)
        return false;
    fz_lease *fl = &e->lease[l];
    fz_note(e, "release lease %d (allocation %d)", l, fl->alloc);
    int rc = sw_lease_release(fl->l);
    fz_result(e, "sw_lease_release", rc, FZ_OK, 0, NULL);
    fl->live = false;
    fz_remember_dead(e, 1, fl->l);
    e->alloc[fl->alloc].leases--;
    fz_model_maybe_release(e, fl->alloc);
    return true;
}

static bool op_wrap(fz_engine *e, fz_src *s)
{
    int start = (int)fz_below(s, FZ_NLEASE), l = -1;
    for (int k = 0; k < FZ_NLEASE && l < 0; k++)
        if (e->lease[(start + k) % FZ_NLEASE].live)
            l = (start + k) % FZ_NLEASE;
    if (l < 0 || fz_free_buf_slot(e) < 0 || fz_free_alloc_slot(e) < 0)
        return false;
    fz_lease *fl = &e->lease[l];
    /* Any range of the leased allocation's memory from the exposed
     * pointer on: the lease keeps all of it. */
    size_t ro;
    int r = fz_root(e, fl->alloc, (size_t)fl->buf_off, &ro);
    size_t room = e->alloc[r].size - ro;
    size_t k = fz_below(s, room + 1);
    size_t len = fz_below(s, room - k + 1);
    if (fz_u8(s) < 64)
        k &= ~(size_t)7, len &= ~(size_t)7;
    sw_devmem m = fl->mem;
    if (m.base == 0)
        k = len = 0; /* a 0-byte allocation: only 0 bytes at 0 */
    else
        m.offset += k;
    int devi = e->alloc[fl->alloc].devi;
    fz_note(e, "wrap %zu bytes at lease %d + %zu", len, l, k);
    sw_buffer *h = (sw_buffer *)(uintptr_t)0xA5A5;
    int rc = sw_buffer_wrap(e->w->dev[devi], m, len, "wrapped", &h);
    if (!fz_result(e, "sw_buffer_wrap", rc, FZ_OK, 0, NULL)) {
        if (h != NULL)
            fz_fail(e->w, e, "a failed sw_buffer_wrap left *out set");
        return true;
    }
    int a = fz_new_alloc(e, devi, len, true);
    fz_alloc *al = &e->alloc[a];
    al->ext_of = fl->alloc;
    al->ext_off = (size_t)fl->buf_off + k;
    al->ext_lease = l;
    al->readonly = e->alloc[fl->alloc].readonly;
    fl->wraps++;
    int i = fz_new_buf(e, h, a, 0, len, false, "wrapped");
    fz_note_more(e, " -> handle %d, allocation %d over allocation %d + %zu",
                 i, a, al->ext_of, al->ext_off);
    sw_buffer_state st = SW_SPILLED;
    if (sw_buffer_state_get(h, &st) != SW_OK || st != SW_RESIDENT)
        fz_fail(e->w, e, "a wrapped buffer is not resident");
    (void)i;
    return true;
}

/* Whether handle i's base is in the spill file (a host budget's disk
 * tier): then a prefetch without a queue reads it back in the background
 * and restores it from there, whenever that ends. */
static bool fz_on_disk(fz_engine *e, int i)
{
    int devi = e->alloc[e->buf[i].alloc].devi;
    uint64_t id = 0;
    if (sw_buffer_id(e->buf[i].h, &id) != SW_OK)
        return false;
    sw_buffer_info info[FZ_NALLOC + 8];
    size_t n = 0;
    if (sw_memory_snapshot(e->w->dev[devi], info, FZ_NALLOC + 8, &n) !=
        SW_OK)
        return false;
    for (size_t k = 0; k < n && k < FZ_NALLOC + 8; k++)
        if (info[k].id == id)
            return info[k].on_disk != 0;
    return false;
}

/* Whether a prefetch of handle i may read it from disk: with other
 * engines on the device, one may send it there at any moment (a host
 * budget), even between the look and the prefetch. */
static bool fz_maybe_on_disk(fz_engine *e, int i)
{
    return e->w->threaded || fz_on_disk(e, i);
}

/* The end of a step that prefetched from the disk tier: its background
 * read and restore end within the step, where the checks expect what a
 * prefetch moves (sw_device_synchronize waits for them).  The calls made
 * meanwhile in the step ran against the read in flight. */
static void fz_settle_prefetch(fz_engine *e, int devi)
{
    if (fz_sync_device(e, e->w->dev[devi]) != SW_OK)
        fz_fail(e->w, e, "sw_device_synchronize after a prefetch from "
                "disk failed: %s", sw_last_error());
}

/* sw_buffer_prefetch: a restore started ahead of use (and q, if given,
 * ordered after it).  It leaves the data as it was; the buffer is on its
 * way back unless a spill of it was still in flight. */
static bool op_prefetch(fz_engine *e, fz_src *s)
{
    int i = fz_pick_buf(e, s, false);
    if (i < 0)
        return false;
    int devi = e->alloc[e->buf[i].alloc].devi;
    unsigned pick = fz_u8(s);
    if (pick >= 224) {
        /* sw_buffer_advise instead: only the spilling order changes,
         * nothing moves (the step obtains no memory: a spill in it would
         * be caught). */
        sw_advice how = (pick & 1) ? SW_ADVISE_COLD : SW_ADVISE_NORMAL;
        fz_note(e, "advise handle %d %s", i,
                how == SW_ADVISE_COLD ? "cold" : "normal");
        int rc = sw_buffer_advise(e->buf[i].h, how);
        fz_result(e, "sw_buffer_advise", rc, FZ_OK, 0, NULL);
        return true;
    }
    int q = pick < 128 ? fz_pick_queue(e, s, devi) : -1;
    int slots[1] = {i};
    fz_note(e, "prefetch handle %d%s", i, q >= 0 ? " for a queue" : "");
    bool disk = q < 0 && fz_maybe_on_disk(e, i);
    int rc = sw_buffer_prefetch(e->buf[i].h,
                                q >= 0 ? e->queue[devi][q].q : NULL);
    fz_result(e, "sw_buffer_prefetch", rc, fz_expect_for(e, slots, 1), 0,
              NULL);
    if (disk && rc == SW_OK)
        fz_settle_prefetch(e, devi);
    return true;
}

/* A prefetch followed at once by a use of the same buffer while its copy
 * in may still be in flight: a host write or read, a free, or a budget
 * that spills what it can again (the surface an outside campaign saw
 * bytes differ on, issue 24). */
static bool op_prefetch_then(fz_engine *e, fz_src *s)
{
    int i = fz_pick_buf(e, s, false);
    if (i < 0)
        return false;
    int devi = e->alloc[e->buf[i].alloc].devi;
    int slots[1] = {i};
    unsigned then = fz_u8(s) % 4;
    static const char *const what[] = {"write", "read", "free", "budget"};
    fz_note(e, "prefetch handle %d, then %s", i, what[then]);
    bool disk = fz_maybe_on_disk(e, i);
    int rc = sw_buffer_prefetch(e->buf[i].h, NULL);
    fz_result(e, "sw_buffer_prefetch", rc, fz_expect_for(e, slots, 1), 0,
              NULL);
    /* The prefetch's ladder may have run the callbacks, which free
     * donated handles: the model learns of it before the second call
     * looks at its handles. */
    fz_process_callbacks(e);
    e->prefer_buf1 = i + 1;
    e->prefer_dev1 = devi + 1;
    if (disk && rc == SW_OK)
        e->bg_prefetch_alloc1 = e->buf[i].alloc + 1;
    bool did;
    switch (then) {
    case 0: did = fz_op_buffer(e, s, 4); break;
    case 1: did = fz_op_buffer(e, s, 5); break;
    case 2: did = fz_op_buffer(e, s, 1); break;
    default: did = fz_op_account(e, s, 0); break;
    }
    (void)did; /* the prefetch was a step's call either way */
    e->prefer_buf1 = e->prefer_dev1 = 0;
    e->bg_prefetch_alloc1 = 0;
    if (disk && rc == SW_OK)
        fz_settle_prefetch(e, devi);
    return true;
}

bool fz_op_lease(fz_engine *e, fz_src *s, unsigned k)
{
    switch (k) {
    case 0: return op_device_ptr(e, s);
    case 1: return op_expose(e, s);
    case 2: return op_release(e, s);
    case 3: return op_wrap(e, s);
    case 4: return op_prefetch(e, s);
    default: return op_prefetch_then(e, s);
    }
}
