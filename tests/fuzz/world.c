/*
 * world.c -- the byte source, reports (divergences, statistics), and the
 * world the engines share: devices, pressure callbacks' storage and
 * victims, the shared read-only buffers.
 */
#include "model.h"

#include <inttypes.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * The byte source
 * ---------------------------------------------------------------------- */

uint64_t fz_splitmix(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

void fz_src_input(fz_src *s, const uint8_t *data, size_t len)
{
    memset(s, 0, sizeof *s);
    s->data = data;
    s->len = len;
    s->done = len == 0;
}

void fz_src_prng(fz_src *s, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    s->rng = seed;
}

uint8_t fz_u8(fz_src *s)
{
    if (s->data == NULL)
        return (uint8_t)(fz_splitmix(&s->rng) >> 56);
    if (s->pos >= s->len) {
        s->done = true;
        return 0;
    }
    return s->data[s->pos++];
}

uint32_t fz_u32(fz_src *s)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)fz_u8(s) << (8 * i);
    return v;
}

uint64_t fz_u64(fz_src *s)
{
    return (uint64_t)fz_u32(s) | (uint64_t)fz_u32(s) << 32;
}

size_t fz_below(fz_src *s, size_t n)
{
    if (n <= 1)
        return 0;
    uint64_t v = n <= 256 ? fz_u8(s) : n <= 65536 ? (fz_u8(s) |
                                                     (uint64_t)fz_u8(s) << 8)
                                                  : fz_u32(s);
    return (size_t)(v % n);
}

/* ------------------------------------------------------------------------
 * Reports
 * ---------------------------------------------------------------------- */

static const char *const err_names[] = {
    "OK", "INVALID_ARG", "INVALID_HANDLE", "OOM", "HOST_OOM", "NO_DEVICE",
    "OUT_OF_RANGE", "TOO_LARGE", "BUSY", "DEVICE", "UNSUPPORTED", "DTYPE",
};

const char *fz_err(int rc)
{
    if (rc <= 0 && -rc < (int)(sizeof err_names / sizeof err_names[0]))
        return err_names[-rc];
    return "UNKNOWN";
}

void fz_note(fz_engine *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->what, sizeof e->what, fmt, ap);
    va_end(ap);
    snprintf(e->ring[e->ring_n % FZ_TRACE_RING], sizeof e->ring[0],
             "#%d %s", e->step, e->what);
    e->ring_n++;
    if (e->w->verbose)
        fprintf(stderr, "fuzz[%d] #%d %s\n", e->index, e->step, e->what);
}

void fz_known(fz_engine *e, int k, int tolerated, const char *what)
{
    if (!tolerated)
        fz_fail(e->w, e, "%s", what);
    atomic_fetch_add(&e->w->stats.known[k], 1);
}

void fz_note_more(fz_engine *e, const char *fmt, ...)
{
    size_t len = strlen(e->what);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->what + len, sizeof e->what - len, fmt, ap);
    va_end(ap);
    snprintf(e->ring[(e->ring_n - 1) % FZ_TRACE_RING], sizeof e->ring[0],
             "#%d %s", e->step, e->what);
    if (e->w->verbose)
        fprintf(stderr, "fuzz[%d] #%d   ... %s\n", e->index, e->step,
                e->what + len);
}

static void default_on_fail(fz_world *w)
{
    (void)w;
    abort();
}

void fz_fail(fz_world *w, fz_engine *e, const char *fmt, ...)
{
    pthread_mutex_lock(&w->report_mu);
    atomic_store(&w->failed, 1);
    fprintf(stderr, "\n==== spillway fuzz: DIVERGENCE ====\n");
    if (e != NULL)
        fprintf(stderr, "engine %d, step %d: %s\n", e->index, e->step,
                e->what);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nlast library message: %s\n", sw_last_error());
    if (e != NULL) {
        unsigned n = e->ring_n < FZ_TRACE_RING ? e->ring_n : FZ_TRACE_RING;
        fprintf(stderr, "the engine's last %u steps:\n", n);
        for (unsigned i = e->ring_n - n; i < e->ring_n; i++)
            fprintf(stderr, "  %s\n", e->ring[i % FZ_TRACE_RING]);
    }
    fprintf(stderr, "devices:");
    for (int d = 0; d < w->ndev; d++)
        fprintf(stderr, " %s", w->spec[d]);
    fprintf(stderr, "\n====\n");
    fflush(stderr);
    pthread_mutex_unlock(&w->report_mu);
    (w->on_fail ? w->on_fail : default_on_fail)(w);
}

/* ------------------------------------------------------------------------
 * The world
 * ---------------------------------------------------------------------- */

int fz_world_open(fz_world *w, const char *specs, bool threaded)
{
    memset(w, 0, sizeof *w);
    pthread_mutex_init(&w->report_mu, NULL);
    w->threaded = threaded;
    w->faults = !threaded;
    const char *t = getenv("FUZZ_TRACE");
    w->verbose = t != NULL && t[0] != '\0' && t[0] != '0';
    char buf[128];
    snprintf(buf, sizeof buf, "%s", specs && *specs ? specs : "sim:0");
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        if (w->ndev == FZ_MAX_DEV) {
            fprintf(stderr, "fuzz: at most %d devices\n", FZ_MAX_DEV);
            return SW_ERR_INVALID_ARG;
        }
        int d = w->ndev;
        int rc = sw_device_open(tok, &w->dev[d]);
        if (rc != SW_OK) {
            fprintf(stderr, "fuzz: cannot open %s: %s: %s\n", tok,
                    sw_err_name(rc), sw_last_error());
            return rc;
        }
        snprintf(w->spec[d], sizeof w->spec[d], "%s",
                 sw_device_name(w->dev[d]));
        w->is_sim[d] = strncmp(w->spec[d], "sim:", 4) == 0;
        w->no_spill[d] = strncmp(w->spec[d], "host:", 5) == 0;
        int yes = 0;
        (void)sw_device_host_addressable(w->dev[d], &yes);
        w->host_addressable[d] = yes != 0;
        for (int k = 0; k < FZ_NCALLBACK; k++) {
            fz_callback *cb = &w->cb[d][k];
            cb->w = w;
            cb->devi = d;
            cb->id = -1;
            pthread_mutex_init(&cb->mu, NULL);
        }
        w->ndev++;
    }
    if (w->ndev == 0)
        return SW_ERR_INVALID_ARG;
    /* Two specs naming one device would make every "wrong device" call a
     * right one. */
    if (w->ndev == 2 && w->dev[0] == w->dev[1]) {
        fprintf(stderr, "fuzz: the two devices must differ\n");
        return SW_ERR_INVALID_ARG;
    }
    return SW_OK;
}

void fz_world_reset(fz_world *w)
{
    for (int d = 0; d < w->ndev; d++) {
        for (int k = 0; k < FZ_NCALLBACK; k++) {
            fz_callback *cb = &w->cb[d][k];
            pthread_mutex_lock(&cb->mu);
            int id = cb->id;
            cb->id = -1;
            fz_victim v[FZ_NVICTIM];
            int n = cb->nvictims;
            memcpy(v, cb->victims, sizeof v);
            cb->nvictims = 0;
            pthread_mutex_unlock(&cb->mu);
            if (id >= 0) {
                int rc = sw_remove_pressure_callback(w->dev[d], id);
                if (rc != SW_OK)
                    fz_fail(w, NULL, "removing pressure callback %d of %s: "
                            "%s", id, w->spec[d], fz_err(rc));
            }
            for (int i = 0; i < n; i++) {
                int rc = sw_buffer_free(v[i].h);
                if (rc != SW_OK)
                    fz_fail(w, NULL, "freeing a victim left to a callback: "
                            "%s", fz_err(rc));
            }
        }
        (void)sw_inject_fault(w->dev[d], SW_FAULT_ALLOC, 0, 0);
        (void)sw_inject_fault(w->dev[d], SW_FAULT_COPY, 0, 0);
        (void)sw_inject_fault(w->dev[d], SW_FAULT_HOST_ALLOC, 0, 0);
        (void)sw_set_memory_budget(w->dev[d], 0);
        if (w->clear_new[d]) {
            int rc = sw_set_clear_new(w->dev[d], 0);
            if (rc != SW_OK)
                fz_fail(w, NULL, "sw_set_clear_new(%s, 0): %s", w->spec[d],
                        fz_err(rc));
            w->clear_new[d] = false;
        }
    }
    (void)sw_inject_fault(NULL, SW_FAULT_HOST_ALLOC, 0, 0);
}

void fz_world_clear_new(fz_world *w, const uint8_t *data, size_t size)
{
    uint64_t h = UINT64_C(1469598103934665603);
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * UINT64_C(1099511628211);
    for (int d = 0; d < w->ndev; d++) {
        bool on = ((h >> (40 + 2 * d)) & 3) == 0;
        int rc = sw_set_clear_new(w->dev[d], on);
        if (rc != SW_OK)
            fz_fail(w, NULL, "sw_set_clear_new(%s, %d): %s", w->spec[d], on,
                    fz_err(rc));
        w->clear_new[d] = on;
    }
}

void fz_world_drain_victims(fz_world *w)
{
    for (int d = 0; d < w->ndev; d++) {
        for (int k = 0; k < FZ_NCALLBACK; k++) {
            fz_callback *cb = &w->cb[d][k];
            pthread_mutex_lock(&cb->mu);
            fz_victim v[FZ_NVICTIM];
            int n = cb->nvictims;
            memcpy(v, cb->victims, sizeof v);
            cb->nvictims = 0;
            pthread_mutex_unlock(&cb->mu);
            for (int i = 0; i < n; i++) {
                int rc = sw_buffer_free(v[i].h);
                if (rc != SW_OK)
                    fz_fail(w, NULL, "freeing a victim left to a callback: "
                            "%s", fz_err(rc));
            }
        }
    }
}

void fz_world_close(fz_world *w, bool reopen)
{
    for (int d = 0; d < w->ndev; d++) {
        int rc = sw_device_synchronize(w->dev[d]);
        if (rc != SW_OK)
            fz_fail(w, NULL, "%s: synchronize at the end: %s", w->spec[d],
                    fz_err(rc));
        sw_memory_info m;
        rc = sw_memory_info_get(w->dev[d], &m);
        if (rc != SW_OK || m.in_use != 0 || m.spilled != 0)
            fz_fail(w, NULL, "%s is not empty at the end: in_use %" PRIu64
                    ", spilled %" PRIu64 " (rc %s)", w->spec[d], m.in_use,
                    m.spilled, fz_err(rc));
        /* Our one reference is the last: a close that is refused means
         * something is still live (a wrapped buffer, a queue, a scope). */
        rc = sw_device_close(w->dev[d]);
        if (rc != SW_OK)
            fz_fail(w, NULL, "%s cannot close at the end: %s: %s",
                    w->spec[d], fz_err(rc), sw_last_error());
        w->dev[d] = NULL;
        if (reopen) {
            rc = sw_device_open(w->spec[d], &w->dev[d]);
            if (rc != SW_OK)
                fz_fail(w, NULL, "reopening %s: %s: %s", w->spec[d],
                        fz_err(rc), sw_last_error());
        }
    }
}

void fz_world_make_shared(fz_world *w, fz_src *src)
{
    w->nshared = 0;
    for (int k = 0; k < FZ_NSHARED; k++) {
        fz_shared *sh = &w->shared[k];
        sh->devi = k % w->ndev;
        sh->size = 64 + 64 * fz_below(src, 64); /* 64 B .. 4 KiB */
        sh->bytes = malloc(sh->size);
        fz_draw_bytes(src, sh->bytes, sh->size, (sw_dtype)(k % 4));
        int rc = sw_buffer_alloc(w->dev[sh->devi], sh->size, "shared",
                                 &sh->h);
        if (rc == SW_OK)
            rc = sw_buffer_write(sh->h, 0, sh->bytes, sh->size);
        if (rc != SW_OK)
            fz_fail(w, NULL, "making shared buffer %d: %s", k, fz_err(rc));
        w->nshared++;
    }
}

void fz_world_free_shared(fz_world *w)
{
    unsigned char *tmp = malloc(8192);
    for (int k = 0; k < w->nshared; k++) {
        fz_shared *sh = &w->shared[k];
        int rc = sw_buffer_read(sh->h, 0, tmp, sh->size);
        if (rc != SW_OK || memcmp(tmp, sh->bytes, sh->size) != 0)
            fz_fail(w, NULL, "shared buffer %d changed (rc %s)", k,
                    fz_err(rc));
        rc = sw_buffer_free(sh->h);
        if (rc != SW_OK)
            fz_fail(w, NULL, "freeing shared buffer %d: %s", k, fz_err(rc));
        free(sh->bytes);
        sh->bytes = NULL;
        sh->h = NULL;
    }
    w->nshared = 0;
    free(tmp);
}

void fz_world_print_stats(fz_world *w, const char *what, double seconds)
{
    fz_stats *s = &w->stats;
    fprintf(stderr,
            "%s: %" PRIu64 " inputs, %" PRIu64 " steps (%" PRIu64
            " ok, %" PRIu64 " failed as expected, %" PRIu64
            " skipped), %" PRIu64 " checks, %.1f s\n",
            what, (uint64_t)s->inputs, (uint64_t)s->steps,
            (uint64_t)s->ops_ok, (uint64_t)s->ops_failed,
            (uint64_t)s->skipped, (uint64_t)s->checks, seconds);
    fprintf(stderr,
            "%s: spills seen %" PRIu64 ", restores seen %" PRIu64
            ", faults armed %" PRIu64 ", callback runs %" PRIu64
            ", misuse calls %" PRIu64 ", peak in_use %" PRIu64 "\n",
            what, (uint64_t)s->spills_seen, (uint64_t)s->restores_seen,
            (uint64_t)s->faults_armed, (uint64_t)s->cb_calls,
            (uint64_t)s->misuse, (uint64_t)s->peak);
    fprintf(stderr, "%s: new buffers found cleared %" PRIu64 "\n", what,
            (uint64_t)s->cleared);
    fprintf(stderr, "%s: NaN results adopted %" PRIu64
            ", float sums adopted %" PRIu64 ", parked frees resolved %" PRIu64
            ", known divergences tolerated",
            what, (uint64_t)s->nan_adopted, (uint64_t)s->sum_adopted,
            (uint64_t)s->parked_resolved);
    for (int k = 0; k < 4; k++)
        fprintf(stderr, " %" PRIu64, (uint64_t)s->known[k]);
    fprintf(stderr, "\n%s: errors by kind:", what);
    for (int k = 1; k < 12; k++)
        if (s->errors[k])
            fprintf(stderr, " %s=%" PRIu64, err_names[k],
                    (uint64_t)s->errors[k]);
    fprintf(stderr, "\n");
}
