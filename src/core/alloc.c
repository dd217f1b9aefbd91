/*
 * alloc.c -- the allocation ladder (DESIGN.md, "Allocation ladder") and the
 * out-of-memory report that ends it when every step has failed.
 */
#include "core/internal.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Out-of-memory reports
 * ---------------------------------------------------------------------- */

/* A buffer's state as the report gives it: whether it could move, and if
 * not, why. */
static const char *state_desc(const sw__buf *b, char *buf, size_t len)
{
    if (b->external)
        return "external (never moves)";
    if (b->state == SW_SPILLED)
        return "SPILLED";
    if (b->pins > 0)
        return "RESIDENT, pinned by a launch or transfer";
    if (b->exposed > 0) {
        snprintf(buf, len, "RESIDENT, exported (%u lease%s)", b->exposed,
                 b->exposed == 1 ? "" : "s");
        return buf;
    }
    if (b->moving)
        return "RESIDENT, being moved";
    return "RESIDENT";
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
    sw__buf *top[TOP] = {0};
    for (sw__buf *b = dev->live; b; b = b->live_next) {
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
    char sd[48];
    for (int i = 0; i < TOP && top[i]; i++)
        sw__error_append("%s %s '%s' %s", i ? "," : "",
                         sw_format_bytes(top[i]->alloc_size ? top[i]->alloc_size
                                                          : top[i]->size,
                                         b1, sizeof b1),
                         top[i]->tag[0] ? top[i]->tag : "(untagged)",
                         state_desc(top[i], sd, sizeof sd));
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
        sw__cache_trim_oldest_locked(dev);
    return dev->in_use + dev->cached + size <= dev->budget;
}

/* Bytes a spill could free now: spillable buffers that are neither pinned
 * nor moving (the heap keeps pinned ones; spilling skips them).  Counting
 * stops at `enough`: the usual heap is mostly unpinned, so this reads a
 * few entries, not all. */
static uint64_t spillable_locked(const sw_device *dev, uint64_t enough)
{
    uint64_t got = 0;
    for (size_t i = 0; i < dev->heap_len && got < enough; i++) {
        const sw__buf *b = dev->heap[i];
        if (b->pins == 0 && !b->moving)
            got += b->alloc_size;
    }
    return got;
}

bool sw__budget_room_locked(sw_device *dev, uint64_t size)
{
    sw__assert_locked(dev);
    if (dev->budget == 0 || dev->in_use + size <= dev->budget)
        return true; /* trimming the cache is enough */
    uint64_t need = dev->in_use + size - dev->budget;
    return spillable_locked(dev, need) >= need;
}

int sw__budget_refusal_locked(sw_device *dev, size_t request, size_t size,
                              const char *tag)
{
    char why[512], b1[32], b2[32], b3[32];
    if (dev->props.no_spill)
        snprintf(why, sizeof why, "the budget of %s would be exceeded (in "
                 "use + request = %s), and this device does not spill (its "
                 "memory is the host's); nothing was moved",
                 sw_format_bytes(dev->budget, b1, sizeof b1),
                 sw_format_bytes(dev->in_use + size, b2, sizeof b2));
    else
        snprintf(why, sizeof why, "the budget of %s would be exceeded (in "
                 "use + request = %s) and only %s can be spilled (the rest "
                 "is pinned, exported or on its way); nothing was moved",
                 sw_format_bytes(dev->budget, b1, sizeof b1),
                 sw_format_bytes(dev->in_use + size, b2, sizeof b2),
                 sw_format_bytes(spillable_locked(dev, UINT64_MAX), b3,
                                 sizeof b3));
    return oom_report_locked(dev, request, size, tag, why);
}

/* A spill made for room failed -- the host tiers are full (the host budget
 * and a spill file that cannot take more), or a copy failed -- and the
 * buffers stay where they were.  What holds the tiers may be garbage
 * (cycles the Python collector frees, spilled or not): the pressure
 * callbacks run before the error stands, the last chance among them, so
 * no allocation fails for good with collectable garbage holding the
 * memory.  Returns true to retry; false leaves the spill's error, its
 * message kept (the callbacks may have failed calls of their own). */
static bool retry_after_failed_spill(sw_device *dev, size_t size, int rc,
                                     bool *called_back, bool *last_called)
{
    if (*last_called)
        return false;
    char saved[512];
    snprintf(saved, sizeof saved, "%s", sw_last_error());
    for (int i = 0; i < 2 && !*last_called; i++) {
        bool last = *called_back;
        *called_back = true;
        *last_called = last;
        if (sw__run_callbacks_locked(dev, size, last)) {
            dev->alloc_retries++;
            return true;
        }
    }
    (void)sw__errorf(rc, "%s", saved);
    return false;
}

/* The ladder.  Each step that could have freed something is followed by a
 * retry from the top: the cache; under a budget, trimming the cache and
 * then spilling least-recently-used buffers -- only when that can make
 * room: a request that what can move cannot cover is refused with nothing
 * trimmed or spilled, after the pressure callbacks; the backend; on its
 * failure the pressure callbacks, a wait for the device (frees are
 * stream-ordered), emptying the cache, and then spilling, until it
 * succeeds or nothing is left.  Its last step, whichever way it fails, is
 * the callbacks once more, told it is the last chance
 * (sw_pressure_last_chance), and so is a spill's failure (the host tiers
 * full: retry_after_failed_spill): a collector that settled for a cheap
 * collection at the first call (the Python module's back-off) then runs
 * its full one, so no allocation fails for good with collectable garbage
 * holding the memory.  On failure the message is the full report, naming
 * the request as the caller made it; *from_cache (may be NULL) says on
 * success whether the block came from the cache. */
int sw__obtain_locked(sw_device *dev, size_t request, size_t size,
                      const char *tag, uintptr_t *mem, bool *from_cache)
{
    sw__assert_locked(dev);
    char why[512];
    char b1[32];
    bool called_back = false, last_called = false, drained = false;
    int step = 0;
    if (from_cache != NULL)
        *from_cache = false;
    if (dev->budget != 0 && size > dev->budget) {
        snprintf(why, sizeof why, "it is larger than the whole budget of %s",
                 sw_format_bytes(dev->budget, b1, sizeof b1));
        return oom_report_locked(dev, request, size, tag, why);
    }
    for (;;) {
        /* A cached block keeps in_use + cached as it is: take it, unless
         * a lowered budget is already passed. */
        if ((dev->budget == 0 || dev->in_use + dev->cached <= dev->budget) &&
            sw__cache_take_locked(dev, size, mem)) {
            if (from_cache != NULL)
                *from_cache = true;
            return SW_OK;
        }
        if (dev->budget != 0 &&
            dev->in_use + dev->cached + size > dev->budget) {
            /* Nothing moves for nothing: neither the cache nor a buffer,
             * unless trimming and spilling can make the room. */
            if (sw__budget_room_locked(dev, size) &&
                !fit_budget_locked(dev, size)) {
                uint64_t over = dev->in_use + dev->cached + size -
                                dev->budget;
                uint64_t got = 0;
                int rc = sw__spill_locked(dev, over, &got);
                if (rc != SW_OK) {
                    if (retry_after_failed_spill(dev, size, rc, &called_back,
                                                 &last_called))
                        continue;
                    return rc;
                }
                if (got > 0)
                    continue;
            }
            if (dev->in_use + dev->cached + size > dev->budget) {
                if (!called_back || !last_called) {
                    bool last = called_back;
                    called_back = true;
                    last_called = last;
                    if (sw__run_callbacks_locked(dev, size, last)) {
                        dev->alloc_retries++;
                        continue;
                    }
                    if (!last)
                        continue; /* the last chance next */
                }
                return sw__budget_refusal_locked(dev, request, size, tag);
            }
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
            if (sw__run_callbacks_locked(dev, size, false)) {
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
        if (rc != SW_OK) {
            if (retry_after_failed_spill(dev, size, rc, &called_back,
                                         &last_called)) {
                drained = false;
                continue;
            }
            return rc;
        }
        if (got == 0) {
            if (!last_called) {
                last_called = true;
                if (sw__run_callbacks_locked(dev, size, true)) {
                    drained = false;
                    dev->alloc_retries++;
                    continue;
                }
            }
            return oom_report_locked(dev, request, size, tag, why);
        }
        drained = false;
        dev->alloc_retries++;
    }
}


void sw__enforce_budget_locked(sw_device *dev)
{
    sw__assert_locked(dev);
    if (dev->budget == 0)
        return;
    fit_budget_locked(dev, 0);
    while (dev->in_use + dev->cached > dev->budget && dev->heap_bytes > 0) {
        uint64_t got = 0;
        uint64_t over = dev->in_use + dev->cached - dev->budget;
        /* A failed spill leaves its buffers resident and intact; the
         * budget still stands and the next allocation enforces it. */
        if (sw__spill_locked(dev, over, &got) != SW_OK || got == 0)
            break;
        fit_budget_locked(dev, 0); /* the spilled memory went to the cache */
    }
}
