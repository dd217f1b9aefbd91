/*
 * buffer.c -- buffers: handle slots, the cache, the allocation ladder,
 * views, frees and host/device transfers.
 */
#include "core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Handle slots
 *
 * Buffer structs come from chunks that are never freed, so that a stale or
 * foreign handle can always be read and its magic checked.  Freed slots
 * wait in a FIFO behind at least SLOT_QUARANTINE others before reuse, which
 * keeps a stale handle detectable for a long time.
 * ---------------------------------------------------------------------- */

#define SLOT_CHUNK 4096u
#define SLOT_QUARANTINE 1024u

static pthread_mutex_t slot_lock = PTHREAD_MUTEX_INITIALIZER;
static sw_buffer *slot_head, *slot_tail;
static size_t slot_free;
static sw_buffer **slot_chunks; /* kept so the chunks stay reachable */
static size_t slot_nchunks;

static sw_buffer *slot_get(void)
{
    pthread_mutex_lock(&slot_lock);
    if (slot_free <= SLOT_QUARANTINE) {
        sw_buffer **chunks =
            realloc(slot_chunks, (slot_nchunks + 1) * sizeof *chunks);
        sw_buffer *c = chunks ? calloc(SLOT_CHUNK, sizeof *c) : NULL;
        if (chunks != NULL)
            slot_chunks = chunks;
        if (c != NULL) {
            slot_chunks[slot_nchunks++] = c;
            for (size_t i = 0; i < SLOT_CHUNK; i++) {
                atomic_init(&c[i].magic, SW__BUF_FREE);
                c[i].slot_next = NULL;
                if (slot_tail)
                    slot_tail->slot_next = &c[i];
                else
                    slot_head = &c[i];
                slot_tail = &c[i];
            }
            slot_free += SLOT_CHUNK;
        } else if (slot_free == 0) {
            pthread_mutex_unlock(&slot_lock);
            return NULL;
        }
    }
    sw_buffer *b = slot_head;
    slot_head = b->slot_next;
    if (slot_head == NULL)
        slot_tail = NULL;
    slot_free--;
    pthread_mutex_unlock(&slot_lock);
    return b;
}

static void slot_put(sw_buffer *b)
{
    atomic_store_explicit(&b->magic, SW__BUF_FREE, memory_order_release);
    pthread_mutex_lock(&slot_lock);
    b->slot_next = NULL;
    if (slot_tail)
        slot_tail->slot_next = b;
    else
        slot_head = b;
    slot_tail = b;
    slot_free++;
    pthread_mutex_unlock(&slot_lock);
}

/* ------------------------------------------------------------------------
 * Handle validation
 * ---------------------------------------------------------------------- */

static int dead_handle(const sw_buffer *buf)
{
    return sw__errorf(SW_ERR_INVALID_HANDLE, "buffer %p was freed or is not "
                      "a spillway buffer", (const void *)buf);
}

int sw__buffer_enter(sw_buffer *buf, sw_device **devp)
{
    *devp = NULL;
    if (buf == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "buffer is NULL");
    for (;;) {
        if (atomic_load_explicit(&buf->magic, memory_order_acquire) !=
            SW__BUF_LIVE)
            return dead_handle(buf);
        sw_device *dev = atomic_load_explicit(&buf->dev,
                                              memory_order_acquire);
        if (dev == NULL || dev->magic != SW__DEVICE_MAGIC)
            return dead_handle(buf);
        sw__lock(dev);
        /* Re-check under the lock: frees happen under it. */
        if (atomic_load_explicit(&buf->magic, memory_order_relaxed) !=
            SW__BUF_LIVE) {
            sw__unlock(dev);
            return dead_handle(buf);
        }
        if (atomic_load_explicit(&buf->dev, memory_order_relaxed) == dev) {
            *devp = dev;
            return SW_OK;
        }
        sw__unlock(dev); /* the slot was reused meanwhile: look again */
    }
}

int sw__buffer_check_locked(sw_device *dev, sw_buffer *buf, const char *what)
{
    sw__assert_locked(dev);
    if (buf == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "%s: buffer is NULL", what);
    if (atomic_load_explicit(&buf->magic, memory_order_acquire) !=
        SW__BUF_LIVE)
        return sw__errorf(SW_ERR_INVALID_HANDLE, "%s: buffer %p was freed "
                          "or is not a spillway buffer", what, (void *)buf);
    sw_device *other = atomic_load_explicit(&buf->dev, memory_order_relaxed);
    if (other != dev)
        return sw__errorf(SW_ERR_INVALID_ARG, "%s: buffer is on %s, not on "
                          "%s", what, sw_device_name(other), dev->name);
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
 * The cache
 * ---------------------------------------------------------------------- */

void sw__cache_init(sw__cache *c) { memset(c, 0, sizeof *c); }

static size_t bucket_of(size_t size)
{
    uint64_t h = (uint64_t)(size / SW_ALLOC_GRANULARITY) *
                 UINT64_C(0x9E3779B97F4A7C15);
    return (size_t)(h >> 54) & (SW__CACHE_BUCKETS - 1);
}

static void cache_unlink(sw__cache *c, sw__cblock *b)
{
    size_t k = bucket_of(b->size);
    if (b->bprev)
        b->bprev->bnext = b->bnext;
    else
        c->bucket[k] = b->bnext;
    if (b->bnext)
        b->bnext->bprev = b->bprev;
    if (b->oprev)
        b->oprev->onext = b->onext;
    else
        c->oldest = b->onext;
    if (b->onext)
        b->onext->oprev = b->oprev;
    else
        c->newest = b->oprev;
    c->count--;
}

/* Takes a cached block of exactly size bytes, the most recently freed. */
static bool cache_take_locked(sw_device *dev, size_t size, uintptr_t *mem)
{
    sw__cache *c = &dev->cache;
    for (sw__cblock *b = c->bucket[bucket_of(size)]; b; b = b->bnext) {
        if (b->size == size) {
            cache_unlink(c, b);
            *mem = b->mem;
            dev->cached -= size;
            free(b);
            return true;
        }
    }
    return false;
}

/* Keeps a freed block; without host memory for the record the block goes
 * straight back to the device instead. */
void sw__cache_put_locked(sw_device *dev, uintptr_t mem, size_t size)
{
    sw__cache *c = &dev->cache;
    sw__cblock *b = malloc(sizeof *b);
    if (b == NULL) {
        (void)sw__b_free(dev, mem, size);
        return;
    }
    b->mem = mem;
    b->size = size;
    size_t k = bucket_of(size);
    b->bprev = NULL;
    b->bnext = c->bucket[k];
    if (b->bnext)
        b->bnext->bprev = b;
    c->bucket[k] = b;
    b->onext = NULL;
    b->oprev = c->newest;
    if (c->newest)
        c->newest->onext = b;
    else
        c->oldest = b;
    c->newest = b;
    c->count++;
    dev->cached += size;
}

static void cache_release_oldest_locked(sw_device *dev)
{
    sw__cblock *b = dev->cache.oldest;
    cache_unlink(&dev->cache, b);
    dev->cached -= b->size;
    (void)sw__b_free(dev, b->mem, b->size);
    free(b);
}

void sw__cache_drain_locked(sw_device *dev)
{
    sw__assert_locked(dev);
    while (dev->cache.oldest != NULL)
        cache_release_oldest_locked(dev);
    sw__host_pool_drain_locked(dev);
}

SW_API int sw_empty_cache(sw_device *dev)
{
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    sw__cache_drain_locked(dev);
    sw__unlock(dev);
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * Out-of-memory reports
 * ---------------------------------------------------------------------- */

static const char *state_name(sw_buffer_state s)
{
    return s == SW_SPILLED ? "SPILLED" : "RESIDENT";
}

/* Writes the full report into the thread's message; reason says why this
 * request could not be met. */
static int oom_report_locked(sw_device *dev, size_t size, size_t rounded,
                             const char *tag, const char *reason)
{
    char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32], b7[32];
    uint64_t dfree = 0, dtotal = 0;
    int known = 0;
    if (sw__b_mem_info(dev, &dfree, &dtotal, &known) != SW_OK)
        known = 0, dtotal = dev->props.total;
    int rc = sw__errorf(SW_ERR_OOM,
        "%s: out of memory: cannot allocate %zu bytes (%s as allocated)%s%s%s: "
        "%s. In use %s, cached %s, spilled %s, budget %s, device free %s of "
        "%s.", dev->name, size, sw_format_bytes(rounded, b1, sizeof b1),
        tag && tag[0] ? " for '" : "", tag && tag[0] ? tag : "",
        tag && tag[0] ? "'" : "", reason,
        sw_format_bytes(dev->in_use, b2, sizeof b2),
        sw_format_bytes(dev->cached, b3, sizeof b3),
        sw_format_bytes(dev->spilled, b4, sizeof b4),
        dev->budget ? sw_format_bytes(dev->budget, b5, sizeof b5) : "none",
        known ? sw_format_bytes(dfree, b6, sizeof b6) : "unknown",
        dtotal ? sw_format_bytes(dtotal, b7, sizeof b7) : "unknown");

    /* The five largest live buffers, by one pass over the live list. */
    enum { TOP = 5 };
    sw_buffer *top[TOP] = {0};
    for (sw_buffer *b = dev->live; b; b = b->live_next) {
        for (int i = 0; i < TOP; i++) {
            if (top[i] == NULL || b->alloc_size > top[i]->alloc_size) {
                memmove(&top[i + 1], &top[i],
                        (size_t)(TOP - 1 - i) * sizeof top[0]);
                top[i] = b;
                break;
            }
        }
    }
    if (top[0] == NULL) {
        sw__error_append(" No live buffers.");
        return rc;
    }
    sw__error_append(" Largest live buffers (of %zu):", dev->live_count);
    for (int i = 0; i < TOP && top[i]; i++)
        sw__error_append("%s %s '%s' %s", i ? "," : "",
                         sw_format_bytes(top[i]->alloc_size, b1, sizeof b1),
                         top[i]->tag[0] ? top[i]->tag : "(untagged)",
                         state_name(top[i]->state));
    sw__error_append(".");
    return rc;
}

/* ------------------------------------------------------------------------
 * The allocation ladder
 * ---------------------------------------------------------------------- */

/* Makes room under the budget by trimming the cache, oldest blocks first.
 * Returns false if in_use + cached + size still passes the budget. */
static bool fit_budget_locked(sw_device *dev, size_t size)
{
    if (dev->budget == 0)
        return true;
    while (dev->in_use + dev->cached + size > dev->budget &&
           dev->cache.oldest != NULL)
        cache_release_oldest_locked(dev);
    return dev->in_use + dev->cached + size <= dev->budget;
}

/* The ladder.  Each step that could have freed something is followed by a
 * retry from the top: the cache; under a budget, trimming the cache and
 * then spilling least-recently-used buffers (or, when nothing can move,
 * the pressure callbacks once); the backend; on its failure the pressure
 * callbacks, a wait for the device (frees are stream-ordered), emptying
 * the cache, and then spilling, until it succeeds or nothing is left.  On
 * failure the message is the full report, naming the request as the
 * caller made it. */
int sw__obtain_locked(sw_device *dev, size_t request, size_t size,
                      const char *tag, uintptr_t *mem)
{
    sw__assert_locked(dev);
    char why[512];
    char b1[32], b2[32];
    bool called_back = false, drained = false;
    int step = 0;
    if (dev->budget != 0 && size > dev->budget) {
        snprintf(why, sizeof why, "it is larger than the whole budget of %s",
                 sw_format_bytes(dev->budget, b1, sizeof b1));
        return oom_report_locked(dev, request, size, tag, why);
    }
    for (;;) {
        /* A cached block keeps in_use + cached as it is: take it, unless
         * a lowered budget is already passed. */
        if ((dev->budget == 0 || dev->in_use + dev->cached <= dev->budget) &&
            cache_take_locked(dev, size, mem))
            return SW_OK;
        if (!fit_budget_locked(dev, size)) {
            uint64_t over = dev->in_use + dev->cached + size - dev->budget;
            uint64_t got = 0;
            /* Spill only when it can succeed: nothing moves for nothing. */
            if (over <= dev->heap_bytes) {
                int rc = sw__spill_locked(dev, over, &got);
                if (rc != SW_OK)
                    return rc;
            }
            if (got > 0)
                continue;
            if (!called_back) {
                called_back = true;
                if (sw__run_callbacks_locked(dev, size)) {
                    dev->alloc_retries++;
                    continue;
                }
            }
            snprintf(why, sizeof why, "the budget of %s would be exceeded "
                     "(in use + cached + request = %s) and only %s can be "
                     "spilled", sw_format_bytes(dev->budget, b1, sizeof b1),
                     sw_format_bytes(dev->in_use + dev->cached + size, b2,
                                   sizeof b2),
                     sw_format_bytes(dev->heap_bytes, b1, sizeof b1));
            return oom_report_locked(dev, request, size, tag, why);
        }
        int rc = sw__b_alloc(dev, size, mem);
        if (rc == SW_OK)
            return SW_OK;
        if (rc != SW_ERR_OOM)
            return rc; /* a driver error, not a shortage: no retries */
        snprintf(why, sizeof why, "%s", sw_last_error());
        if (step == 0) {
            step++;
            called_back = true;
            if (sw__run_callbacks_locked(dev, size)) {
                dev->alloc_retries++;
                continue;
            }
        }
        if (step == 1 || !drained) {
            /* Frees are stream-ordered: let the device finish them, with
             * what the cache (and the last spill) put there released. */
            step = 2;
            drained = true;
            sw__unpark_locked(dev, false);
            sw__cache_drain_locked(dev);
            rc = sw__wait_idle_locked(dev);
            if (rc != SW_OK)
                return rc;
            dev->alloc_retries++;
            continue;
        }
        uint64_t got = 0;
        rc = sw__spill_locked(dev, size, &got);
        if (rc != SW_OK)
            return rc;
        if (got == 0)
            return oom_report_locked(dev, request, size, tag, why);
        drained = false;
        dev->alloc_retries++;
    }
}

/* ------------------------------------------------------------------------
 * Allocation, views, references
 * ---------------------------------------------------------------------- */

static void live_link_locked(sw_device *dev, sw_buffer *b)
{
    b->live_prev = NULL;
    b->live_next = dev->live;
    if (dev->live)
        dev->live->live_prev = b;
    dev->live = b;
    dev->live_count++;
}

static void live_unlink_locked(sw_device *dev, sw_buffer *b)
{
    if (b->live_prev)
        b->live_prev->live_next = b->live_next;
    else
        dev->live = b->live_next;
    if (b->live_next)
        b->live_next->live_prev = b->live_prev;
    dev->live_count--;
}

static void init_base(sw_buffer *b, size_t size, const char *tag)
{
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
    b->alloc_size = 0;
    b->heap_idx = SW__NOT_IN_HEAP;
    b->heap_key = 0;
    b->tmp_next = NULL;
    snprintf(b->tag, sizeof b->tag, "%s", tag ? tag : "");
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
        sw__unlock(dev);
        return rc;
    }
    size_t rounded = (size + SW_ALLOC_GRANULARITY - 1) &
                     ~(size_t)(SW_ALLOC_GRANULARITY - 1);
    sw_buffer *b = slot_get();
    if (b == NULL) {
        sw__unlock(dev);
        return sw__errorf(SW_ERR_HOST_OOM, "no host memory for a buffer "
                          "handle");
    }
    uintptr_t mem = 0;
    if (rounded > 0) {
        rc = sw__obtain_locked(dev, size, rounded, tag, &mem);
        if (rc != SW_OK) {
            dev->ooms++;
            sw__unlock(dev);
            slot_put(b);
            return rc;
        }
    }
    atomic_store_explicit(&b->dev, dev, memory_order_relaxed);
    init_base(b, size, tag);
    b->mem = mem;
    b->alloc_size = rounded;
    b->last_use = ++dev->clock;
    live_link_locked(dev, b);
    if (mem != 0)
        sw__lru_insert_locked(dev, b);
    dev->allocs++;
    sw__note_in_use_locked(dev, rounded);
    atomic_store_explicit(&b->magic, SW__BUF_LIVE, memory_order_release);
    sw__unlock(dev);
    *out = b;
    return SW_OK;
}

/* The last step of a release: accounting, then the memory to the cache
 * (resident) or the host copy dropped (spilled), then the slot. */
static void release_base_locked(sw_device *dev, sw_buffer *base)
{
    if (base->state == SW_SPILLED) {
        sw__host_put_locked(dev, base->host, base->size);
        base->host = NULL;
        dev->spilled -= base->alloc_size;
    } else {
        dev->in_use -= base->alloc_size;
        if (base->mem != 0 && !base->external)
            sw__cache_put_locked(dev, base->mem, base->alloc_size);
    }
    if (!base->external)
        dev->frees++;
    slot_put(base);
}

/* Releases a base once nothing refers to it: no user reference, view,
 * pin, lease, or move in progress.  Its memory goes to the cache in stream
 * order (the cache only hands it out for work queued later on the same
 * in-order queue); a spilled one just drops its host copy. */
void sw__maybe_release_locked(sw_device *dev, sw_buffer *base)
{
    sw__assert_locked(dev);
    if (atomic_load_explicit(&base->magic, memory_order_relaxed) ==
            SW__BUF_LIVE ||
        base->children > 0 || base->pins > 0 || base->exposed > 0 ||
        base->moving)
        return;
    live_unlink_locked(dev, base);
    sw__lru_remove_locked(dev, base);
    if (base->state == SW_RESIDENT && base->qmask != 0 &&
        sw__order_use_locked(dev, base, NULL) != SW_OK) {
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
    sw_buffer *keep = NULL;
    while (dev->parked != NULL) {
        sw_buffer *b = dev->parked;
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
        sw_buffer *b = keep;
        keep = b->live_next;
        b->live_next = dev->parked;
        dev->parked = b;
        dev->parked_count++;
    }
}

void sw__unpin_locked(sw_device *dev, sw_buffer *base)
{
    sw__assert_locked(dev);
    assert(base->pins > 0);
    base->pins--;
    sw__maybe_release_locked(dev, base);
}

SW_API int sw_buffer_view(sw_buffer *buf, size_t offset, size_t size,
                          sw_buffer **out)
{
    if (out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    sw_device *dev;
    int rc = sw__buffer_enter(buf, &dev);
    if (rc != SW_OK)
        return rc;
    if (!range_ok(buf->size, offset, size)) {
        rc = range_error("a view", offset, size, buf->size);
        sw__unlock(dev);
        return rc;
    }
    sw_buffer *v = slot_get();
    if (v == NULL) {
        sw__unlock(dev);
        return sw__errorf(SW_ERR_HOST_OOM, "no host memory for a buffer "
                          "handle");
    }
    sw_buffer *base = buf->base;
    atomic_store_explicit(&v->dev, dev, memory_order_relaxed);
    v->base = base;
    v->offset = buf->offset + offset;
    v->size = size;
    v->user_refs = 1;
    v->children = 0;
    v->pins = 0;
    v->exposed = 0;
    v->external = false;
    v->moving = false;
    v->mem = 0;
    v->host = NULL;
    v->alloc_size = 0;
    v->heap_idx = SW__NOT_IN_HEAP;
    v->tag[0] = '\0';
    base->children++;
    atomic_store_explicit(&v->magic, SW__BUF_LIVE, memory_order_release);
    sw__unlock(dev);
    *out = v;
    return SW_OK;
}

SW_API int sw_buffer_retain(sw_buffer *buf)
{
    sw_device *dev;
    int rc = sw__buffer_enter(buf, &dev);
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

SW_API int sw_buffer_free(sw_buffer *buf)
{
    if (buf == NULL)
        return SW_OK;
    sw_device *dev;
    int rc = sw__buffer_enter(buf, &dev);
    if (rc != SW_OK)
        return rc;
    if (--buf->user_refs == 0) {
        sw_buffer *base = buf->base;
        if (buf != base) {
            slot_put(buf);
            base->children--;
        } else {
            atomic_store_explicit(&buf->magic, SW__BUF_ZOMBIE,
                                  memory_order_release);
        }
        sw__maybe_release_locked(dev, base);
    }
    sw__unlock(dev);
    return SW_OK;
}

/* ------------------------------------------------------------------------
 * Accessors
 * ---------------------------------------------------------------------- */

SW_API int sw_buffer_size(sw_buffer *buf, size_t *size)
{
    if (size == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "size is NULL");
    *size = 0;
    sw_device *dev;
    int rc = sw__buffer_enter(buf, &dev);
    if (rc != SW_OK)
        return rc;
    *size = buf->size;
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_buffer_device(sw_buffer *buf, sw_device **out)
{
    if (out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    sw_device *dev;
    int rc = sw__buffer_enter(buf, &dev);
    if (rc != SW_OK)
        return rc;
    sw__unlock(dev);
    *out = dev;
    return SW_OK;
}

SW_API int sw_buffer_state_get(sw_buffer *buf, sw_buffer_state *state)
{
    if (state == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "state is NULL");
    *state = SW_RESIDENT;
    sw_device *dev;
    int rc = sw__buffer_enter(buf, &dev);
    if (rc != SW_OK)
        return rc;
    *state = buf->base->state;
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_buffer_tag(sw_buffer *buf, char *out, size_t len)
{
    if (out == NULL || len == 0)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL or empty");
    out[0] = '\0';
    sw_device *dev;
    int rc = sw__buffer_enter(buf, &dev);
    if (rc != SW_OK)
        return rc;
    snprintf(out, len, "%s", buf->base->tag);
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_buffer_device_ptr(sw_buffer *buf, sw_devmem *out)
{
    if (out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL");
    out->base = 0;
    out->offset = 0;
    sw_device *dev;
    int rc = sw__buffer_enter(buf, &dev);
    if (rc != SW_OK)
        return rc;
    sw_buffer *base = buf->base;
    base->pins++; /* alive across a restore that releases the lock */
    rc = sw__make_resident_locked(dev, base);
    if (rc == SW_OK) {
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
 * pin keeps base alive and in place meanwhile.  If no event can be had,
 * the whole queue is waited for: the caller's host memory must not be
 * touched by the device after we return. */
static int finish_transfer_locked(sw_device *dev, sw_buffer *base)
{
    base->pins++;
    sw__bevent *ev = NULL;
    int rc = sw__b_event_record(dev, &ev);
    if (rc == SW_OK) {
        rc = sw__wait_event_locked(dev, ev);
    } else {
        const sw__backend_ops *ops = dev->ops;
        sw__bqueue *q = dev->q;
        dev->waiting++;
        sw__unlock(dev);
        (void)sw__b_synchronize(ops, q);
        sw__lock(dev);
        dev->waiting--;
    }
    sw__unpin_locked(dev, base);
    return rc;
}

SW_API int sw_buffer_read(sw_buffer *buf, size_t offset, void *dst, size_t n)
{
    if (dst == NULL && n > 0)
        return sw__errorf(SW_ERR_INVALID_ARG, "dst is NULL");
    sw_device *dev;
    int rc = sw__buffer_enter(buf, &dev);
    if (rc != SW_OK)
        return rc;
    if (!range_ok(buf->size, offset, n)) {
        rc = range_error("a read", offset, n, buf->size);
    } else if (n > 0) {
        sw_buffer *base = buf->base;
        sw__wait_stable_locked(dev, base);
        base->last_use = ++dev->clock;
        if (base->state == SW_SPILLED)
            memcpy(dst, (char *)base->host + buf->offset + offset, n);
        else if ((rc = sw__order_use_locked(dev, base, NULL)) == SW_OK &&
                 (rc = sw__b_read(dev, dst, base->mem, buf->offset + offset,
                                  n)) == SW_OK)
            rc = finish_transfer_locked(dev, base);
    }
    sw__unlock(dev);
    return rc;
}

SW_API int sw_buffer_write(sw_buffer *buf, size_t offset, const void *src,
                           size_t n)
{
    if (src == NULL && n > 0)
        return sw__errorf(SW_ERR_INVALID_ARG, "src is NULL");
    sw_device *dev;
    int rc = sw__buffer_enter(buf, &dev);
    if (rc != SW_OK)
        return rc;
    if (!range_ok(buf->size, offset, n)) {
        rc = range_error("a write", offset, n, buf->size);
    } else if (n > 0) {
        sw_buffer *base = buf->base;
        sw__wait_stable_locked(dev, base);
        base->last_use = ++dev->clock;
        if (base->state == SW_SPILLED)
            memcpy((char *)base->host + buf->offset + offset, src, n);
        else if ((rc = sw__order_use_locked(dev, base, NULL)) == SW_OK &&
                 (rc = sw__b_write(dev, base->mem, buf->offset + offset, src,
                                   n)) == SW_OK)
            rc = finish_transfer_locked(dev, base);
    }
    sw__unlock(dev);
    return rc;
}

static int copy_on(sw_queue *q, sw_buffer *dst, size_t dst_offset,
                   sw_buffer *src, size_t src_offset, size_t n)
{
    sw_device *dev;
    int rc = sw__buffer_enter(dst, &dev);
    if (rc != SW_OK)
        return rc;
    if (q != NULL && (rc = sw__queue_check_locked(dev, q)) != SW_OK)
        goto out;
    rc = sw__buffer_check_locked(dev, src, "copy source");
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
    sw_buffer *db = dst->base, *sb = src->base;
    size_t doff = dst->offset + dst_offset, soff = src->offset + src_offset;
    if (db == sb && doff < soff + n && soff < doff + n) {
        rc = sw__errorf(SW_ERR_INVALID_ARG, "copy of %zu bytes between "
                        "overlapping ranges (offsets %zu and %zu of one "
                        "allocation)", n, soff, doff);
        goto out;
    }
    sw_buffer *args[2] = {src, dst};
    sw_devmem p[2];
    rc = sw__pin_all_locked(dev, q, args, 2, p);
    if (rc != SW_OK)
        goto out;
    rc = sw__b_copy_q(dev, q ? q->bq : dev->q, db->mem, doff, sb->mem, soff,
                      n);
    sw__unpin_locked(dev, sb);
    sw__unpin_locked(dev, db);
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

SW_API int sw_buffer_fill(sw_buffer *buf, size_t offset, size_t n,
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
    sw_device *dev;
    int rc = sw__buffer_enter(buf, &dev);
    if (rc != SW_OK)
        return rc;
    if (!range_ok(buf->size, offset, n)) {
        rc = range_error("a fill", offset, n, buf->size);
    } else if (n > 0) {
        sw_buffer *base = buf->base;
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

/* ------------------------------------------------------------------------
 * External memory and exposure leases
 * ---------------------------------------------------------------------- */

SW_API int sw_buffer_wrap(sw_device *dev, sw_devmem mem, size_t size,
                          const char *tag, sw_buffer **out)
{
    if (out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (mem.base == 0 && size > 0)
        return sw__errorf(SW_ERR_INVALID_ARG, "cannot wrap %zu bytes at a "
                          "null device address", size);
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    sw_buffer *b = slot_get();
    if (b == NULL) {
        sw__unlock(dev);
        return sw__errorf(SW_ERR_HOST_OOM, "no host memory for a buffer "
                          "handle");
    }
    atomic_store_explicit(&b->dev, dev, memory_order_relaxed);
    init_base(b, size, tag);
    b->external = true;
    b->mem = size > 0 ? mem.base : 0;
    b->offset = size > 0 ? mem.offset : 0;
    b->last_use = ++dev->clock;
    live_link_locked(dev, b);
    atomic_store_explicit(&b->magic, SW__BUF_LIVE, memory_order_release);
    sw__unlock(dev);
    *out = b;
    return SW_OK;
}

/* A lease is a buffer slot with its own magic: type-stable like every
 * handle, so a second release is detected. */
SW_API int sw_buffer_expose(sw_buffer *buf, sw_devmem *ptr, sw_lease **out)
{
    if (ptr == NULL || out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "ptr or out is NULL");
    ptr->base = 0;
    ptr->offset = 0;
    *out = NULL;
    sw_device *dev;
    int rc = sw__buffer_enter(buf, &dev);
    if (rc != SW_OK)
        return rc;
    sw_buffer *l = slot_get();
    if (l == NULL) {
        sw__unlock(dev);
        return sw__errorf(SW_ERR_HOST_OOM, "no host memory for a lease");
    }
    sw_buffer *base = buf->base;
    base->pins++;
    rc = sw__make_resident_locked(dev, base);
    if (rc != SW_OK) {
        sw__unpin_locked(dev, base);
        sw__unlock(dev);
        slot_put(l);
        return rc;
    }
    if (base->exposed++ == 0)
        sw__lru_remove_locked(dev, base);
    base->last_use = ++dev->clock;
    sw__unpin_locked(dev, base);
    atomic_store_explicit(&l->dev, dev, memory_order_relaxed);
    l->base = base;
    l->heap_idx = SW__NOT_IN_HEAP;
    atomic_store_explicit(&l->magic, SW__LEASE_LIVE, memory_order_release);
    ptr->base = base->mem;
    ptr->offset = base->mem ? buf->offset : 0;
    sw__unlock(dev);
    *out = (sw_lease *)l;
    return SW_OK;
}

SW_API int sw_lease_release(sw_lease *lease)
{
    if (lease == NULL)
        return SW_OK;
    sw_buffer *l = (sw_buffer *)lease;
    sw_device *dev = NULL;
    if (atomic_load_explicit(&l->magic, memory_order_acquire) ==
        SW__LEASE_LIVE)
        dev = atomic_load_explicit(&l->dev, memory_order_acquire);
    if (dev == NULL || dev->magic != SW__DEVICE_MAGIC)
        return sw__errorf(SW_ERR_INVALID_HANDLE, "lease %p was released or "
                          "is not a spillway lease", (void *)lease);
    sw__lock(dev);
    if (atomic_load_explicit(&l->magic, memory_order_relaxed) !=
            SW__LEASE_LIVE ||
        atomic_load_explicit(&l->dev, memory_order_relaxed) != dev) {
        sw__unlock(dev);
        return sw__errorf(SW_ERR_INVALID_HANDLE, "lease %p was released",
                          (void *)lease);
    }
    sw_buffer *base = l->base;
    slot_put(l);
    if (--base->exposed == 0 && base->state == SW_RESIDENT &&
        !base->external && base->mem != 0)
        sw__lru_insert_locked(dev, base);
    sw__maybe_release_locked(dev, base);
    sw__unlock(dev);
    return SW_OK;
}
