/*
 * ops_pressure.c -- memory-pressure callbacks that free buffers.
 *
 * An engine registers callbacks and *donates* handles to them: ownership
 * moves to the callback, which frees some (one, all, none) when an
 * allocation runs short, may allocate and free inside (an allocation from
 * inside a callback does not run the callbacks again), may remove itself,
 * and notes a GC run when it freed something.  It does all of that with
 * the device lock released, as the header requires of a callback that
 * re-enters spillway: sw_pressure_unlock first, sw_pressure_relock before
 * it returns.  It logs what it did; the engine applies the log to its
 * model between steps (fz_process_callbacks).
 */
#include "model.h"

#include <stdio.h>
#include <string.h>

static int cb_fn(sw_device *dev, sw_pressure *p, size_t bytes, void *user)
{
    fz_callback *cb = user;
    fz_world *w = cb->w;
    if (bytes == 0 || dev != w->dev[cb->devi])
        fz_fail(w, NULL, "pressure callback called for %zu bytes of %s",
                bytes, sw_device_name(dev));
    atomic_fetch_add(&w->stats.cb_calls, 1);
    sw_pressure_unlock(p);

    pthread_mutex_lock(&cb->mu);
    cb->calls++;
    fz_cb_mode mode = cb->mode;
    fz_victim take[FZ_NVICTIM];
    int n = 0;
    if (mode != FZ_CB_NOTHING && cb->nvictims > 0) {
        int want = mode == FZ_CB_FREE_ALL ? cb->nvictims : 1;
        while (n < want)
            take[n++] = cb->victims[--cb->nvictims];
    }
    int id = cb->id;
    pthread_mutex_unlock(&cb->mu);

    for (int k = 0; k < n; k++) {
        int rc = sw_buffer_free(take[k].h);
        if (rc != SW_OK)
            fz_fail(w, NULL, "a pressure callback's sw_buffer_free: %s",
                    fz_err(rc));
    }
    bool nested_ok = false;
    if (mode == FZ_CB_NESTED) {
        sw_buffer *t = (sw_buffer *)(uintptr_t)0xA5A5;
        int rc = sw_buffer_alloc(dev, SW_ALLOC_GRANULARITY, "nested", &t);
        if (rc == SW_OK) {
            nested_ok = true;
            /* (The write may meet the fault the allocation that ran out
             * was made under.) */
            unsigned char x[16] = {1, 2, 3};
            int wrc = sw_buffer_write(t, 0, x, sizeof x);
            if ((wrc != SW_OK && wrc != SW_ERR_DEVICE &&
                 wrc != SW_ERR_HOST_OOM) ||
                sw_buffer_free(t) != SW_OK)
                fz_fail(w, NULL, "using a buffer allocated in a pressure "
                        "callback: %s", fz_err(wrc));
        } else if ((rc != SW_ERR_OOM && rc != SW_ERR_HOST_OOM &&
                    rc != SW_ERR_DEVICE) || t != NULL) {
            fz_fail(w, NULL, "an allocation inside a pressure callback: %s",
                    fz_err(rc));
        }
    }
    if (mode == FZ_CB_SELF_REMOVE && id >= 0) {
        int rc = sw_remove_pressure_callback(dev, id);
        if (rc != SW_OK)
            fz_fail(w, NULL, "a pressure callback removing itself: %s",
                    fz_err(rc));
    }
    sw_pressure_relock(p);
    bool freed = n > 0 || nested_ok;
    if (freed)
        sw_pressure_note_gc(p);

    pthread_mutex_lock(&cb->mu);
    if (!w->threaded)
        for (int k = 0; k < n; k++)
            cb->freed[cb->nfreed++] = take[k];
    if (freed)
        cb->gc_notes++;
    if (mode == FZ_CB_NESTED)
        nested_ok ? cb->nested_ok++ : cb->nested_fail++;
    if (mode == FZ_CB_SELF_REMOVE && id >= 0 && cb->id == id)
        cb->id = -1;
    pthread_mutex_unlock(&cb->mu);
    return mode != FZ_CB_NOTHING && freed;
}

void fz_process_callbacks(fz_engine *e)
{
    fz_world *w = e->w;
    for (int d = 0; d < w->ndev; d++) {
        for (int k = 0; k < FZ_NCALLBACK; k++) {
            fz_callback *cb = &w->cb[d][k];
            fz_victim freed[FZ_NVICTIM];
            pthread_mutex_lock(&cb->mu);
            int n = cb->nfreed;
            memcpy(freed, cb->freed, sizeof freed);
            cb->nfreed = 0;
            uint64_t dgc = cb->gc_notes - e->cb_seen_gc[d][k];
            uint64_t dnest = cb->nested_ok - e->cb_seen_nested[d][k];
            e->cb_seen_gc[d][k] = cb->gc_notes;
            e->cb_seen_nested[d][k] = cb->nested_ok;
            pthread_mutex_unlock(&cb->mu);
            for (int j = 0; j < n; j++) {
                fz_buf *b = &e->buf[freed[j].slot];
                if (freed[j].owner != e || !b->live || !b->donated)
                    fz_fail(w, e, "a callback freed a victim the model "
                            "does not have");
                b->donated = false;
                b->donated_to = NULL;
                fz_model_free(e, freed[j].slot);
            }
            fz_devmodel *dm = &e->dm[d];
            if (dm->counters_known) {
                dm->gc_runs += dgc;
                dm->allocs += dnest;
                dm->frees += dnest;
            }
            if (dnest > 0)
                fz_note_obtain(e, d);
        }
    }
}

void fz_engine_reclaim_victims(fz_engine *e)
{
    if (e->w->threaded)
        return; /* donors forgot them; the world frees them */
    for (int d = 0; d < e->w->ndev; d++) {
        for (int k = 0; k < FZ_NCALLBACK; k++) {
            fz_callback *cb = &e->w->cb[d][k];
            pthread_mutex_lock(&cb->mu);
            int keep = 0;
            for (int j = 0; j < cb->nvictims; j++) {
                fz_victim v = cb->victims[j];
                if (v.owner == e) {
                    e->buf[v.slot].donated = false;
                    e->buf[v.slot].donated_to = NULL;
                } else {
                    cb->victims[keep++] = v;
                }
            }
            cb->nvictims = keep;
            pthread_mutex_unlock(&cb->mu);
        }
    }
}

/* ------------------------------------------------------------------------
 * Ops
 * ---------------------------------------------------------------------- */

static bool op_add(fz_engine *e, fz_src *s)
{
    int d = fz_pick_dev(e, s);
    fz_callback *cb = NULL;
    for (int k = 0; k < FZ_NCALLBACK && cb == NULL; k++) {
        fz_callback *c = &e->w->cb[d][k];
        pthread_mutex_lock(&c->mu);
        if (c->id < 0 && (c->owner == NULL || c->owner == e)) {
            cb = c;
            c->owner = e; /* claimed: another engine leaves it alone */
        }
        pthread_mutex_unlock(&c->mu);
    }
    if (cb == NULL)
        return false;
    fz_cb_mode mode = (fz_cb_mode)fz_below(s, FZ_CB_NMODES);
    if (e->w->threaded && mode == FZ_CB_SELF_REMOVE)
        mode = FZ_CB_FREE_ALL; /* its id could be another engine's next */
    fz_note(e, "add pressure callback (mode %d) on %s", (int)mode,
            e->w->spec[d]);
    int id = 77;
    pthread_mutex_lock(&cb->mu);
    cb->mode = mode;
    pthread_mutex_unlock(&cb->mu);
    int rc = sw_add_pressure_callback(e->w->dev[d], cb_fn, cb, &id);
    if (!fz_result(e, "sw_add_pressure_callback", rc, FZ_OK, 0, NULL)) {
        if (id != -1)
            fz_fail(e->w, e, "a failed sw_add_pressure_callback left *id "
                    "set");
        return true;
    }
    if (id < 0 || id >= SW_MAX_PRESSURE_CALLBACKS)
        fz_fail(e->w, e, "sw_add_pressure_callback gave id %d", id);
    pthread_mutex_lock(&cb->mu);
    cb->id = id;
    pthread_mutex_unlock(&cb->mu);
    return true;
}

static fz_callback *registered(fz_engine *e, fz_src *s, int d, bool own)
{
    int start = (int)fz_below(s, FZ_NCALLBACK);
    for (int k = 0; k < FZ_NCALLBACK; k++) {
        fz_callback *c = &e->w->cb[d][(start + k) % FZ_NCALLBACK];
        pthread_mutex_lock(&c->mu);
        bool ok = c->id >= 0 && (!own || c->owner == e);
        pthread_mutex_unlock(&c->mu);
        if (ok)
            return c;
    }
    return NULL;
}

static bool op_remove(fz_engine *e, fz_src *s)
{
    int d = fz_pick_dev(e, s);
    fz_callback *cb = registered(e, s, d, true);
    if (cb == NULL)
        return false;
    pthread_mutex_lock(&cb->mu);
    int id = cb->id;
    cb->id = -1;
    pthread_mutex_unlock(&cb->mu);
    if (id < 0)
        return false;
    fz_note(e, "remove pressure callback %d of %s", id, e->w->spec[d]);
    int rc = sw_remove_pressure_callback(e->w->dev[d], id);
    fz_result(e, "sw_remove_pressure_callback", rc, FZ_OK, 0, NULL);
    return true;
}

static bool op_donate(fz_engine *e, fz_src *s)
{
    int i = fz_pick_buf(e, s, false);
    if (i < 0)
        return false;
    fz_buf *b = &e->buf[i];
    if (b->refs != 1 || b->task_refs != 0 || b->launch_uses != 0)
        return false;
    int d = e->alloc[b->alloc].devi;
    fz_callback *cb = registered(e, s, d, false);
    if (cb == NULL)
        return false;
    pthread_mutex_lock(&cb->mu);
    bool room = cb->nvictims < FZ_NVICTIM;
    if (room)
        cb->victims[cb->nvictims++] = (fz_victim){b->h, e, i};
    pthread_mutex_unlock(&cb->mu);
    if (!room)
        return false;
    fz_note(e, "donate handle %d (allocation %d) to a callback of %s", i,
            b->alloc, e->w->spec[d]);
    if (!e->w->threaded) {
        b->donated = true;
        b->donated_to = cb;
        return true;
    }
    /* Threaded: the handle is the callback's now, freed by whichever
     * thread runs it; this engine forgets it (it is not dead yet, so not
     * remembered as dead). */
    b->live = false;
    fz_alloc *al = &e->alloc[b->alloc];
    if (b->view)
        al->views--;
    else
        al->base_handle = false;
    fz_model_maybe_release(e, b->alloc);
    return true;
}

static bool op_mode(fz_engine *e, fz_src *s)
{
    int d = fz_pick_dev(e, s);
    fz_callback *cb = registered(e, s, d, true);
    if (cb == NULL)
        return false;
    fz_cb_mode mode = (fz_cb_mode)fz_below(s, FZ_CB_NMODES);
    if (e->w->threaded && mode == FZ_CB_SELF_REMOVE)
        mode = FZ_CB_FREE_ONE;
    fz_note(e, "pressure callback mode %d", (int)mode);
    pthread_mutex_lock(&cb->mu);
    cb->mode = mode;
    pthread_mutex_unlock(&cb->mu);
    return false; /* no library call: nothing to check */
}

bool fz_op_pressure(fz_engine *e, fz_src *s, unsigned k)
{
    switch (k) {
    case 0: return op_add(e, s);
    case 1: return op_remove(e, s);
    case 2: return op_donate(e, s);
    default: return op_mode(e, s);
    }
}
