/*
 * stream_order.h -- what the CPU stand-ins for vendor runtimes
 * (tests/hip/, tests/ze/) know about stream order, so that they can tell
 * a backend's ordering mistakes even though they run all work at once.
 *
 * A stand-in executes every command when it is enqueued, so nothing it
 * runs can observe a race.  What it can check is whether the order the
 * backend *asked for* would have made the work correct on a real device,
 * where streams (HIP) and command lists (Level Zero) run concurrently.
 * This header keeps that order as vector clocks:
 *
 *  - a stream is a slot (up to SO_MAX live at once) with a generation (a
 *    destroyed stream has completed everything, so points of an older
 *    generation are complete for everyone) and a position, advanced by
 *    every command enqueued on it;
 *  - each stream's clock says, for every slot, up to which position its
 *    next command is ordered after that stream's commands: its own, the
 *    points of the events it waited for (transitively), and what the host
 *    had waited for when the command was enqueued;
 *  - the host's clock says what the host has waited for (stream and event
 *    synchronizations, completed queries).
 *
 * The stand-ins use it for: memory allocated in stream order and used on
 * another stream that is not ordered after the allocation; a
 * stream-ordered free while another stream's earlier work on the memory
 * may still run (a free used early); a blocking free of memory that queued
 * work may still use.  Header-only (static functions); the includer
 * serializes calls (its own mutex).
 */
#ifndef SW_STANDIN_STREAM_ORDER_H
#define SW_STANDIN_STREAM_ORDER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SO_MAX 256

typedef struct so_point {
    uint32_t slot, gen;
    uint64_t pos;
} so_point;

typedef struct so_clock {
    uint32_t gen[SO_MAX];
    uint64_t pos[SO_MAX];
} so_clock;

typedef struct so_stream {
    uint32_t slot, gen;
    uint64_t pos;
    so_clock vc;
} so_stream;

/* Per slot: the live generation (odd) or a dead one (even). */
static uint32_t so_gen[SO_MAX];
static so_clock so_host;

/* Is p complete as far as clock vc knows? */
static int so_after(const so_clock *vc, so_point p)
{
    if (p.gen == 0 || p.pos == 0)
        return 1; /* not a stream-ordered point, or before any command */
    if (so_gen[p.slot] != p.gen)
        return 1; /* its stream is gone: destroyed after completing */
    return vc->gen[p.slot] == p.gen && vc->pos[p.slot] >= p.pos;
}

static void so_merge(so_clock *dst, const so_clock *src)
{
    for (int s = 0; s < SO_MAX; s++) {
        if (src->gen[s] == 0 || src->gen[s] != so_gen[s])
            continue;
        if (dst->gen[s] != src->gen[s] || dst->pos[s] < src->pos[s]) {
            dst->gen[s] = src->gen[s];
            dst->pos[s] = src->pos[s];
        }
    }
}

/* 0, or -1 when SO_MAX streams are live. */
static int so_stream_create(so_stream *s)
{
    for (uint32_t i = 0; i < SO_MAX; i++) {
        if (so_gen[i] % 2 == 0) {
            so_gen[i]++;
            memset(s, 0, sizeof *s);
            s->slot = i;
            s->gen = so_gen[i];
            return 0;
        }
    }
    return -1;
}

/* The stream has completed its work (the caller synchronized it). */
static void so_stream_destroy(so_stream *s)
{
    if (so_gen[s->slot] == s->gen)
        so_gen[s->slot]++;
    s->gen = 0;
}

/* A command enqueued on s now: its point. */
static so_point so_enqueue(so_stream *s)
{
    so_merge(&s->vc, &so_host);
    s->pos++;
    s->vc.gen[s->slot] = s->gen;
    s->vc.pos[s->slot] = s->pos;
    so_point p = {s->slot, s->gen, s->pos};
    return p;
}

/* The host has waited for everything enqueued on s. */
static __attribute__((unused)) void so_host_sync(const so_stream *s) { so_merge(&so_host, &s->vc); }

/* A memory's uses: the last point per stream that touched it. */
typedef struct so_uses {
    so_point *p;
    size_t n, cap;
} so_uses;

static void so_use(so_uses *u, so_point p)
{
    for (size_t i = 0; i < u->n; i++) {
        if (u->p[i].slot == p.slot) {
            u->p[i] = p; /* a later point of that slot supersedes */
            return;
        }
    }
    if (u->n == u->cap) {
        size_t cap = u->cap ? 2 * u->cap : 4;
        so_point *np = realloc(u->p, cap * sizeof *np);
        if (np == NULL) {
            fprintf(stderr, "stand-in: out of host memory\n");
            abort();
        }
        u->p = np;
        u->cap = cap;
    }
    u->p[u->n++] = p;
}

/* The first use not complete for clock vc, or NULL. */
static const so_point *so_pending_use(const so_uses *u, const so_clock *vc)
{
    for (size_t i = 0; i < u->n; i++)
        if (!so_after(vc, u->p[i]))
            return &u->p[i];
    return NULL;
}

static void so_uses_free(so_uses *u)
{
    free(u->p);
    memset(u, 0, sizeof *u);
}

#endif /* SW_STANDIN_STREAM_ORDER_H */
