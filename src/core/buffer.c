/*
 * buffer.c -- buffers: allocation, views, references, frees, accessors and
 * host/device transfers.  The cache is cache.c, the allocation ladder and
 * its out-of-memory report alloc.c, external memory and leases lease.c,
 * the handle pool handle.c.
 */
#include "core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sw__pool sw__buf_pool =
    SW__POOL_INIT(SW__H_BUFFER, sw__buf, sizeof(sw__slot), NULL);

/* ------------------------------------------------------------------------
 * Handle validation
 * ---------------------------------------------------------------------- */

static int dead_handle(const char *what, const sw_buffer *h)
{
    return sw__errorf(SW_ERR_INVALID_HANDLE, "%s%s%p was freed or is not a "
                      "spillway buffer", what ? what : "", what ? ": " : "",
                      (const void *)h);
}

int sw__buffer_enter(const sw_buffer *h, sw__buf **out, sw_device **devp)
{
    *out = NULL;
    *devp = NULL;
    if (h == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "buffer is NULL");
    for (;;) {
        sw__buf *b = sw__buf_of(h);
        if (b == NULL)
            return dead_handle(NULL, h);
        sw_device *dev = atomic_load_explicit(&b->h.dev,
                                              memory_order_acquire);
        if (!sw__device_valid(dev))
            return dead_handle(NULL, h);
        sw__lock(dev);
        /* Re-check under the lock: frees happen under it. */
        if (sw__handle_matches(&b->h, h) &&
            atomic_load_explicit(&b->h.dev, memory_order_relaxed) == dev) {
            *out = b;
            *devp = dev;
            return SW_OK;
        }
        sw__unlock(dev); /* freed, or reused on another device: look again */
    }
}

int sw__buffer_check_locked(sw_device *dev, const sw_buffer *h,
                            const char *what, sw__buf **out)
{
    sw__assert_locked(dev);
    *out = NULL;
    if (h == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "%s: buffer is NULL", what);
    sw__buf *b = sw__buf_of(h);
    if (b == NULL)
        return dead_handle(what, h);
    sw_device *other = atomic_load_explicit(&b->h.dev, memory_order_relaxed);
    if (other != dev) {
        /* Not under our lock, so it may be changing: say what we saw. */
        if (!sw__device_valid(other))
            return dead_handle(what, h);
        return sw__errorf(SW_ERR_INVALID_ARG, "%s: buffer is on %s, not on "
                          "%s", what, sw_device_name(other), dev->name);
    }
    /* Buffers of dev are freed under its lock, which we hold: this holds. */
    if (!sw__handle_matches(&b->h, h))
        return dead_handle(what, h);
    *out = b;
    return SW_OK;
}

static bool range_ok(size_t size, size_t off, size_t n)
{
    return off <= size && n <= size - off;
}

static int range_error(const char *what, size_t off, size_t n, size_t size)
{
    return sw__errorf(SW_ERR_OUT_OF_RANGE, "%s of %zu bytes at offset %zu "
                      "is outside a buffer of %zu bytes", what, n, off, size);
}

/* ------------------------------------------------------------------------
 * Allocation, views, references
 * ---------------------------------------------------------------------- */

void sw__live_link_locked(sw_device *dev, sw__buf *b)
{
    sw__assert_locked(dev);
    b->live_prev = NULL;
    b->live_next = dev->live;
    if (dev->live)
        dev->live->live_prev = b;
    dev->live = b;
    dev->live_count++;
}

static void live_unlink_locked(sw_device *dev, sw__buf *b)
{
    if (b->live_prev)
        b->live_prev->live_next = b->live_next;
    else
        dev->live = b->live_next;
    if (b->live_next)
        b->live_next->live_prev = b->live_prev;
    dev->live_count--;
}

/* Buffer ids: unique in the process, increasing within a thread.  Each
 * thread takes them in blocks, so that threads allocating at once do not
 * all write one counter's cache line. */
#define ID_BLOCK 256u
static _Atomic uint64_t next_id = 1;
static _Thread_local uint64_t tl_id, tl_id_end;

static uint64_t new_id(void)
{
    if (tl_id == tl_id_end) {
        tl_id = atomic_fetch_add_explicit(&next_id, ID_BLOCK,
                                          memory_order_relaxed);
        tl_id_end = tl_id + ID_BLOCK;
    }
    return tl_id++;
}

void sw__buf_init_base(sw__buf *b, size_t size, const char *tag)
{
    b->id = new_id();
    b->base = b;
    b->offset = 0;
    b->size = size;
    b->user_refs = 1;
    b->children = 0;
    b->pins = 0;
    b->exposed = 0;
    b->external = false;
    b->moving = false;
    b->state = SW_RESIDENT;
    b->mem = 0;
    b->host = NULL;
    b->hold_host = false;
    b->clean = false;
    b->on_disk = b->disk_kept = false;
    b->nrestores = b->clean_uses = 0;
    b->cold_at = 0;
    b->alloc_size = 0;
    b->heap_idx = SW__NOT_IN_HEAP;
    b->heap_key = 0;
    b->tmp_next = NULL;
    sw__copy_tag(b->tag, sizeof b->tag, tag);
}

SW_API int sw_buffer_alloc(sw_device *dev, size_t size, const char *tag,
                           sw_buffer **out)
{
    if (out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    char b1[32], b2[32];
    if (size > SIZE_MAX - (SW_ALLOC_GRANULARITY - 1) ||
        (dev->props.max_alloc != 0 &&
         ((size + SW_ALLOC_GRANULARITY - 1) & ~(size_t)(SW_ALLOC_GRANULARITY
                                                        - 1)) >
             dev->props.max_alloc)) {
        rc = sw__errorf(SW_ERR_TOO_LARGE, "%s: cannot allocate %zu bytes: "
                        "the largest allocation this device allows is %s "
                        "(its capacity is %s)", dev->name, size,
                        sw_format_bytes(dev->props.max_alloc, b1, sizeof b1),
                        sw_format_bytes(dev->props.total, b2, sizeof b2));
        /* An allocation that failed for good, as PyTorch's num_ooms
         * counts it, and in the history as one. */
        dev->ooms++;
        if (dev->tracing)
            sw__trace_oom(dev, size, tag, sw_last_error());
        sw__unlock(dev);
        return rc;
    }
    size_t rounded = (size + SW_ALLOC_GRANULARITY - 1) &
                     ~(size_t)(SW_ALLOC_GRANULARITY - 1);
    /* Its place in the spilling order first: inserted without one, it
     * could never be spilled. */
    if (rounded > 0 &&
        (rc = sw__lru_reserve_locked(dev, dev->live_count + 1)) != SW_OK) {
        sw__unlock(dev);
        return rc;
    }
    sw__buf *b = sw__pool_get(&sw__buf_pool);
    if (b == NULL) {
        sw__unlock(dev);
        return sw__errorf(SW_ERR_HOST_OOM, "no host memory for a buffer "
                          "handle");
    }
    uintptr_t mem = 0;
    if (rounded > 0) {
        bool from_cache = false;
        rc = sw__obtain_locked(dev, size, rounded, tag, &mem, &from_cache);
        if (rc != SW_OK) {
            dev->ooms++;
            if (rc == SW_ERR_OOM && dev->tracing)
                sw__trace_oom(dev, size, tag, sw_last_error());
            sw__unlock(dev);
            sw__pool_put(&sw__buf_pool, b);
            return rc;
        }
        /* New memory cleared: a fill on the default queue, after whatever
         * the block's last owner queued there (the cache hands a block out
         * for work queued later on it) and before any use -- another
         * queue's first use of a new buffer waits for the default queue
         * (sw__order_use_locked).  No host wait. */
        if (dev->clear_new) {
            static const unsigned char zero = 0;
            rc = sw__b_fill(dev, mem, 0, rounded, &zero, 1);
            if (rc != SW_OK) { /* the block goes back where it came from */
                if (from_cache)
                    sw__cache_put_locked(dev, mem, rounded);
                else
                    (void)sw__b_free(dev, mem, rounded);
                sw__unlock(dev);
                sw__pool_put(&sw__buf_pool, b);
                return rc;
            }
        }
    }
    atomic_store_explicit(&b->h.dev, dev, memory_order_release);
    sw__buf_init_base(b, size, tag);
    b->mem = mem;
    b->alloc_size = rounded;
    b->last_use = ++dev->clock;
    sw__live_link_locked(dev, b);
    if (mem != 0)
        sw__lru_insert_locked(dev, b);
    dev->allocs++;
    sw__note_in_use_locked(dev, rounded);
    SW__TRACE(dev, SW_TRACE_ALLOC, b, rounded, 0, 0);
    *out = sw__buf_handle(b);
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_set_clear_new(sw_device *dev, int on)
{
    if (on != 0 && on != 1)
        return sw__errorf(SW_ERR_INVALID_ARG, "clear_new is %d: 1 clears "
                          "every new buffer, 0 does not", on);
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    dev->clear_new = on != 0;
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_get_clear_new(sw_device *dev, int *on)
{
    if (on == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "on is NULL");
    *on = 0;
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    *on = dev->clear_new;
    sw__unlock(dev);
    return SW_OK;
}

void sw__buf_slot_free_locked(sw_device *dev, sw__buf *base)
{
    sw__assert_locked(dev);
    if (base->host != NULL) {
        sw__host_put_locked(dev, base->host, base->host_size,
                            base->host_pinned);
        base->host = NULL;
    }
    sw__pool_put(&sw__buf_pool, base);
}

/* The last step of a release: accounting, then the memory to the cache
 * (resident; in stream order, so a copy still reading it comes first) or
 * the host copy dropped (spilled), then the slot -- unless a copy to or
 * from its host block is in flight: then the base stays, released, until
 * that copy ends (spill.c). */
static void release_base_locked(sw_device *dev, sw__buf *base)
{
    if (sw__host_clean(base)) { /* its host block goes with the slot */
        dev->host_copies -= base->alloc_size;
        /* In the history before its free, as every drop of a clean copy
         * is: a replay lowers host_copies only there. */
        SW__TRACE(dev, SW_TRACE_HOST_COPY_DROP, base, base->alloc_size, 0,
                  1);
    }
    base->clean = false;
    sw__disk_release_locked(dev, base); /* its extent of the spill file */
    if (base->state == SW_SPILLED) {
        dev->spilled -= base->alloc_size;
        SW__TRACE(dev, SW_TRACE_FREE, base, base->alloc_size, 0, 1);
    } else {
        dev->in_use -= base->alloc_size;
        SW__TRACE(dev, SW_TRACE_FREE, base, base->alloc_size, 0, 0);
        if (base->mem != 0 && !base->external)
            sw__cache_put_locked(dev, base->mem, base->alloc_size);
        base->mem = 0;
    }
    if (!base->external)
        dev->frees++;
    if (base->xfer != NULL) {
        base->released = true;
        return;
    }
    sw__buf_slot_free_locked(dev, base);
}

/* Releases a base once nothing refers to it: no user reference, view,
 * pin, lease, or move in progress.  Its memory goes to the cache in stream
 * order (the cache only hands it out for work queued later on the same
 * in-order queue); a spilled one just drops its host copy. */
void sw__maybe_release_locked(sw_device *dev, sw__buf *base)
{
    sw__assert_locked(dev);
    if (sw__slot_live(&base->h) || base->children > 0 || base->pins > 0 || base->exposed > 0 ||
        base->moving)
        return;
    live_unlink_locked(dev, base);
    sw__lru_remove_locked(dev, base);
    /* (A base without memory -- 0 bytes, external -- has nothing whose
     * reuse could overtake another queue's work.) */
    if (base->state == SW_RESIDENT && base->qmask != 0 && base->mem != 0 &&
        !base->external && sw__order_use_locked(dev, base, NULL) != SW_OK) {
        /* The cache hands memory to default-queue work, so it must first
         * be ordered after other queues' work on it.  That failed (no
         * host memory for an event), and waiting here would wait on the
         * device with the lock held: park the base instead.  It is its own
         * record (nothing to allocate on this path), its memory stays in
         * in_use, and sw__unpark_locked releases it once ordering works
         * again or every queue is known idle. */
        base->live_next = dev->parked;
        dev->parked = base;
        dev->parked_count++;
        return;
    }
    release_base_locked(dev, base);
}

void sw__unpark_locked(sw_device *dev, bool queues_idle)
{
    sw__assert_locked(dev);
    sw__buf *keep = NULL;
    while (dev->parked != NULL) {
        sw__buf *b = dev->parked;
        dev->parked = b->live_next;
        dev->parked_count--;
        if (queues_idle)
            b->qmask = 0;
        if (b->qmask != 0 && sw__order_use_locked(dev, b, NULL) != SW_OK) {
            b->live_next = keep;
            keep = b;
            continue;
        }
        release_base_locked(dev, b);
    }
    while (keep != NULL) {
        sw__buf *b = keep;
        keep = b->live_next;
        b->live_next = dev->parked;
        dev->parked = b;
        dev->parked_count++;
    }
}

void sw__unpin_locked(sw_device *dev, sw__buf *base)
{
    sw__assert_locked(dev);
    assert(base->pins > 0);
    base->pins--;
    /* Its work is queued now: spill.c's timeline orders copies by this. */
    base->last_use = ++dev->clock;
    sw__maybe_release_locked(dev, base);
}

void sw__unpin_all_locked(sw_device *dev, sw__buf *const *v, size_t n)
{
    sw__assert_locked(dev);
    uint64_t clock = ++dev->clock; /* the launch is queued (spill.c) */
    for (size_t i = 0; i < n; i++) {
        sw__buf *base = v[i]->base;
        assert(base->pins > 0);
        base->last_use = clock;
        sw__note_use(dev, base);
        /* Release only matters when the last pin of a base whose handle
         * is gone goes. */
        if (--base->pins == 0 && !sw__slot_live(&base->h))
            sw__maybe_release_locked(dev, base);
    }
}

SW_API int sw_buffer_view(sw_buffer *h, size_t offset, size_t size,
                          sw_buffer **out)
{
    if (out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    sw__buf *buf;
    sw_device *dev;
    int rc = sw__buffer_enter(h, &buf, &dev);
    if (rc != SW_OK)
        return rc;
    if (!range_ok(buf->size, offset, size)) {
        rc = range_error("a view", offset, size, buf->size);
        sw__unlock(dev);
        return rc;
    }
    sw__buf *v = sw__pool_get(&sw__buf_pool);
    if (v == NULL) {
        sw__unlock(dev);
        return sw__errorf(SW_ERR_HOST_OOM, "no host memory for a buffer "
                          "handle");
    }
    sw__buf *base = buf->base;
    atomic_store_explicit(&v->h.dev, dev, memory_order_release);
    v->base = base;
    v->offset = buf->offset + offset;
    v->size = size;
    v->user_refs = 1;
    v->heap_idx = SW__NOT_IN_HEAP;
    base->children++;
    *out = sw__buf_handle(v);
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_buffer_retain(sw_buffer *h)
{
    sw__buf *buf;
    sw_device *dev;
    int rc = sw__buffer_enter(h, &buf, &dev);
    if (rc != SW_OK)
        return rc;
    if (buf->user_refs == UINT32_MAX)
        rc = sw__errorf(SW_ERR_TOO_LARGE, "too many references to one "
                        "buffer");
    else
        buf->user_refs++;
    sw__unlock(dev);
    return rc;
}

SW_API int sw_buffer_free(sw_buffer *h)
{
    if (h == NULL)
        return SW_OK;
    sw__buf *buf;
    sw_device *dev;
    int rc = sw__buffer_enter(h, &buf, &dev);
    if (rc != SW_OK)
        return rc;
    if (--buf->user_refs == 0) {
        sw__buf *base = buf->base;
        if (buf != base) {
            sw__pool_put(&sw__buf_pool, buf);
            base->children--;
        } else {
            /* The handle dies; the base lives on for its views, pins and
             * leases (sw__maybe_release_locked decides). */
            sw__handle_kill(buf);
        }
        sw__maybe_release_locked(dev, base);
    }
    sw__unlock(dev);
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * Accessors
 * ---------------------------------------------------------------------- */

SW_API int sw_buffer_size(sw_buffer *h, size_t *size)
{
    if (size == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "size is NULL");
    *size = 0;
    sw__buf *buf;
    sw_device *dev;
    int rc = sw__buffer_enter(h, &buf, &dev);
    if (rc != SW_OK)
        return rc;
    *size = buf->size;
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_buffer_device(sw_buffer *h, sw_device **out)
{
    if (out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    sw__buf *buf;
    sw_device *dev;
    int rc = sw__buffer_enter(h, &buf, &dev);
    if (rc != SW_OK)
        return rc;
    sw__unlock(dev);
    *out = dev;
    return SW_OK;
}

SW_API int sw_buffer_state_get(sw_buffer *h, sw_buffer_state *state)
{
    if (state == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "state is NULL");
    *state = SW_RESIDENT;
    sw__buf *buf;
    sw_device *dev;
    int rc = sw__buffer_enter(h, &buf, &dev);
    if (rc != SW_OK)
        return rc;
    *state = buf->base->state;
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_buffer_tag(sw_buffer *h, char *out, size_t len)
{
    if (out == NULL || len == 0)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL or empty");
    out[0] = '\0';
    sw__buf *buf;
    sw_device *dev;
    int rc = sw__buffer_enter(h, &buf, &dev);
    if (rc != SW_OK)
        return rc;
    snprintf(out, len, "%s", buf->base->tag);
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_buffer_device_ptr(sw_buffer *h, sw_devmem *out)
{
    if (out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL");
    out->base = 0;
    out->offset = 0;
    sw__buf *buf;
    sw_device *dev;
    int rc = sw__buffer_enter(h, &buf, &dev);
    if (rc != SW_OK)
        return rc;
    sw__buf *base = buf->base;
    base->pins++; /* alive across a restore that releases the lock */
    rc = sw__make_resident_locked(dev, base);
    /* The pointer leaves spillway's queues: the restore's copy must have
     * landed before the caller uses it. */
    if (rc == SW_OK)
        rc = sw__xfer_wait_locked(dev, base);
    if (rc == SW_OK) {
        /* The caller may write it. */
        sw__hold_end_locked(dev, base);
        sw__dirty_locked(dev, base);
        base->last_use = ++dev->clock;
        out->base = base->mem;
        out->offset = base->mem ? buf->offset : 0;
    }
    sw__unpin_locked(dev, base);
    sw__unlock(dev);
    return rc;
}

/* ------------------------------------------------------------------------
 * Transfers
 * ---------------------------------------------------------------------- */

/* Waits, without the lock, for a host transfer just queued on base; the
 * pin keeps base alive and in place meanwhile.  The caller's host memory
 * is not touched by the device after this returns, even when no event can
 * be had (sw__wait_idle_locked). */
static int finish_transfer_locked(sw_device *dev, sw__buf *base)
{
    base->pins++;
    int rc = sw__wait_idle_locked(dev);
    sw__unpin_locked(dev, base);
    return rc;
}

/* Host transfers of at most this many bytes are done inline, without a
 * queue round trip, when the device's memory is host memory and nothing
 * is queued that could touch the buffer (a[7] from Python: a queued read
 * is two cross-thread wake-ups, ~10 us, against ~0.1 us inline). */
#define INLINE_MAX 4096

static bool can_inline_locked(sw_device *dev, const sw__buf *base, size_t n)
{
    /* An armed copy fault counts backend copies: every transfer goes
     * there while one is, so that the nth still fails. */
    const sw__fault *f = &dev->fault[SW_FAULT_COPY];
    return n <= INLINE_MAX && dev->props.host_addressable &&
           f->countdown == 0 && !f->failing &&
           base->xfer == NULL && base->qmask == 0 && !base->external &&
           sw__b_queue_idle(dev, dev->q);
}

/* A host read (write: false) or write of n bytes at offset of buf.  A
 * spilled buffer is read and written in its host copy, once any copy into
 * it has landed; a resident one through the default queue (after the
 * copies and work queued before), or inline when that queue is idle. */
static int host_access_locked(sw_device *dev, sw__buf *buf, size_t offset,
                              void *p, size_t n, bool write)
{
    sw__buf *base = buf->base;
    size_t off = buf->offset + offset;
    int rc = SW_OK;
    base->pins++; /* alive and in place across the waits below */
    for (;;) {
        sw__wait_stable_locked(dev, base);
        if (base->state != SW_SPILLED || base->xfer == NULL)
            break;
        if ((rc = sw__xfer_wait_locked(dev, base)) != SW_OK)
            break;
    }
    if (rc == SW_OK && base->lost)
        rc = sw__xfer_wait_locked(dev, base); /* says why */
    if (rc == SW_OK && base->state == SW_SPILLED && base->on_disk) {
        /* In the spill file (disk.c): a read is served from it; a write
         * brings the copy back into host memory first, so that a write
         * that fails half-way changes nothing. */
        if (!write) {
            rc = sw__disk_pread_locked(dev, base, off, p, n);
            sw__unpin_locked(dev, base);
            return rc;
        }
        base->moving = true;
        rc = sw__disk_read_locked(dev, base);
        base->moving = false;
        pthread_cond_broadcast(&dev->moved);
    }
    if (rc == SW_OK) {
        /* Another call's restore, held: a write must not be undone; and
         * a clean copy is one no longer. */
        if (write) {
            sw__hold_end_locked(dev, base);
            sw__dirty_locked(dev, base);
        }
        base->last_use = ++dev->clock;
        /* A clean copy is read from the host block it keeps: the same
         * bytes, without a round trip through the device -- once no copy
         * is in flight: the copy out that filled the block may still be
         * running ahead of the copy in (a spill superseded by a restore
         * on the in-order copy queue). */
        char *h = base->state == SW_SPILLED ||
                          (sw__host_clean(base) && !write &&
                           base->xfer == NULL)
                      ? (char *)base->host + off
                  : can_inline_locked(dev, base, n)
                      ? (char *)(uintptr_t)base->mem + off
                      : NULL;
        if (h != NULL && write)
            memcpy(h, p, n);
        else if (h != NULL)
            memcpy(p, h, n);
        else if ((rc = sw__order_use_locked(dev, base, NULL)) == SW_OK &&
                 (rc = write ? sw__b_write(dev, base->mem, off, p, n)
                             : sw__b_read(dev, p, base->mem, off, n)) ==
                     SW_OK)
            rc = finish_transfer_locked(dev, base);
    }
    sw__unpin_locked(dev, base);
    return rc;
}

SW_API int sw_buffer_read(sw_buffer *h, size_t offset, void *dst, size_t n)
{
    if (dst == NULL && n > 0)
        return sw__errorf(SW_ERR_INVALID_ARG, "dst is NULL");
    sw__buf *buf;
    sw_device *dev;
    int rc = sw__buffer_enter(h, &buf, &dev);
    if (rc != SW_OK)
        return rc;
    if (!range_ok(buf->size, offset, n))
        rc = range_error("a read", offset, n, buf->size);
    else if (n > 0)
        rc = host_access_locked(dev, buf, offset, dst, n, false);
    sw__unlock(dev);
    return rc;
}

SW_API int sw_buffer_write(sw_buffer *h, size_t offset, const void *src,
                           size_t n)
{
    if (src == NULL && n > 0)
        return sw__errorf(SW_ERR_INVALID_ARG, "src is NULL");
    sw__buf *buf;
    sw_device *dev;
    int rc = sw__buffer_enter(h, &buf, &dev);
    if (rc != SW_OK)
        return rc;
    if (!range_ok(buf->size, offset, n))
        rc = range_error("a write", offset, n, buf->size);
    else if (n > 0)
        rc = host_access_locked(dev, buf, offset, (void *)src, n, true);
    sw__unlock(dev);
    return rc;
}

SW_API int sw_buffer_prefetch(sw_buffer *h, sw_queue *qh)
{
    sw__buf *buf;
    sw__queue *q = NULL;
    sw_device *dev;
    int rc = sw__buffer_enter(h, &buf, &dev);
    if (rc != SW_OK)
        return rc;
    if (qh != NULL && (rc = sw__queue_check_locked(dev, qh, &q)) != SW_OK) {
        sw__unlock(dev);
        return rc;
    }
    sw__buf *base = buf->base;
    /* A move in progress ends first: a buffer being spilled is still
     * SW_RESIDENT while its copy out runs without the lock, and ordering
     * q after it then marked q as ordered on a buffer about to leave the
     * device, so that q's first use after its restore skipped the wait
     * for the copy in (test thread_spill_of_restoring_buffer). */
    if (base->moving) {
        /* Pinned across the wait, but not "used": a use moves last_use,
         * and a later spill's copy would wait for the work queued before
         * this prefetch.  The caller's handle keeps it alive. */
        base->pins++;
        sw__wait_stable_locked(dev, base);
        base->pins--;
    }
    /* No queue to order now: a buffer in the spill file may be read in
     * the background (disk.c), the call returning once that started (or
     * failed, with nothing changed). */
    rc = q == NULL ? sw__disk_prefetch_locked(dev, base) : SW__DISK_INLINE;
    if (rc == SW__DISK_INLINE) {
        rc = SW_OK;
        if (base->state == SW_SPILLED) {
            base->pins++;
            rc = sw__restore_locked(dev, base, q, true, 0);
            sw__unpin_locked(dev, base);
        } else if (q != NULL) {
            /* Already there (or on its way): q is ordered after it as
             * any first use on q is. */
            rc = sw__order_use_locked(dev, base, q);
        }
    }
    sw__unlock(dev);
    return rc;
}

SW_API int sw_buffer_advise(sw_buffer *h, sw_advice advice)
{
    if (advice != SW_ADVISE_NORMAL && advice != SW_ADVISE_COLD)
        return sw__errorf(SW_ERR_INVALID_ARG, "advice %d: SW_ADVISE_NORMAL "
                          "(0) or SW_ADVISE_COLD (1)", (int)advice);
    sw__buf *buf;
    sw_device *dev;
    int rc = sw__buffer_enter(h, &buf, &dev);
    if (rc != SW_OK)
        return rc;
    sw__buf *base = buf->base;
    /* Cold until a use moves last_use past the mark (never 0: a base's
     * last_use starts at its allocation's clock, at least 1). */
    base->cold_at = advice == SW_ADVISE_COLD ? base->last_use : 0;
    sw__lru_refresh_locked(dev, base);
    sw__unlock(dev);
    return SW_OK;
}

static int copy_on(const sw_queue *qh, sw_buffer *dsth, size_t dst_offset,
                   sw_buffer *srch, size_t src_offset, size_t n)
{
    sw__buf *dst, *src;
    sw__queue *q = NULL;
    sw_device *dev;
    int rc = sw__buffer_enter(dsth, &dst, &dev);
    if (rc != SW_OK)
        return rc;
    if (qh != NULL && (rc = sw__queue_check_locked(dev, qh, &q)) != SW_OK)
        goto out;
    rc = sw__buffer_check_locked(dev, srch, "copy source", &src);
    if (rc != SW_OK)
        goto out;
    if (!range_ok(dst->size, dst_offset, n)) {
        rc = range_error("a copy destination", dst_offset, n, dst->size);
        goto out;
    }
    if (!range_ok(src->size, src_offset, n)) {
        rc = range_error("a copy source", src_offset, n, src->size);
        goto out;
    }
    if (n == 0)
        goto out;
    sw__buf *db = dst->base, *sb = src->base;
    size_t doff = dst->offset + dst_offset, soff = src->offset + src_offset;
    if (db == sb && doff < soff + n && soff < doff + n) {
        rc = sw__errorf(SW_ERR_INVALID_ARG, "copy of %zu bytes between "
                        "overlapping ranges (offsets %zu and %zu of one "
                        "allocation)", n, soff, doff);
        goto out;
    }
    sw__buf *args[2] = {src, dst};
    static const unsigned char access[2] = {SW_ACCESS_READ, SW_ACCESS_WRITE};
    sw_devmem p[2];
    rc = sw__pin_all_access_locked(dev, q, args, access, 2, p);
    if (rc != SW_OK)
        goto out;
    rc = sw__b_copy_q(dev, q ? q->bq : dev->q, db->mem, doff, sb->mem, soff,
                      n);
    sw__unpin_all_locked(dev, args, 2);
out:
    sw__unlock(dev);
    return rc;
}

SW_API int sw_buffer_copy(sw_buffer *dst, size_t dst_offset, sw_buffer *src,
                          size_t src_offset, size_t n)
{
    return copy_on(NULL, dst, dst_offset, src, src_offset, n);
}

SW_API int sw_buffer_copy_q(sw_queue *q, sw_buffer *dst, size_t dst_offset,
                            sw_buffer *src, size_t src_offset, size_t n)
{
    if (q == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "queue is NULL");
    return copy_on(q, dst, dst_offset, src, src_offset, n);
}

SW_API int sw_buffer_fill(sw_buffer *h, size_t offset, size_t n,
                          const void *pattern, size_t pattern_size)
{
    if (pattern == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "pattern is NULL");
    if (pattern_size != 1 && pattern_size != 2 && pattern_size != 4 &&
        pattern_size != 8)
        return sw__errorf(SW_ERR_INVALID_ARG, "pattern size %zu: must be "
                          "1, 2, 4 or 8", pattern_size);
    if (n % pattern_size != 0)
        return sw__errorf(SW_ERR_INVALID_ARG, "fill of %zu bytes is not a "
                          "multiple of the %zu-byte pattern", n,
                          pattern_size);
    sw__buf *buf;
    sw_device *dev;
    int rc = sw__buffer_enter(h, &buf, &dev);
    if (rc != SW_OK)
        return rc;
    if (!range_ok(buf->size, offset, n)) {
        rc = range_error("a fill", offset, n, buf->size);
    } else if (n > 0) {
        sw__buf *base = buf->base;
        sw_devmem p;
        rc = sw__pin_all_locked(dev, NULL, &buf, 1, &p);
        if (rc == SW_OK) {
            rc = sw__b_fill(dev, base->mem, buf->offset + offset, n, pattern,
                            pattern_size);
            sw__unpin_locked(dev, base);
        }
    }
    sw__unlock(dev);
    return rc;
}

