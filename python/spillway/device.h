/*
 * device.h -- Device objects (device.c) and the per-device context they
 * share with the pressure callback (pressure.c) and DLPack exports
 * (dlpack.c).
 */
#ifndef SPILLWAY_PY_DEVICE_H
#define SPILLWAY_PY_DEVICE_H

#include "module.h"

#include <stdlib.h>

/* ------------------------------------------------------------------------
 * Per-device context shared with the pressure callback and DLPack exports
 *
 * Those run without the GIL and may outlive the Device object, so what
 * they need lives in a small reference-counted block: the Device holds one
 * reference; a running callback and every live DLPack export hold one each.
 *
 * It also lists the live zero-copy exports of the device's memory (the
 * ranges handed out under a lease), so that from_dlpack can tell memory
 * that truly is this device's -- a NumPy array viewing an export, handed
 * back -- from memory that only looks like it (any other host pointer on
 * the simulated device, whose memory is an arena of its own).
 * ---------------------------------------------------------------------- */

typedef struct sw_py_range {
    struct sw_py_range *next, *prev;
    sw_devmem mem; /* the export's memory: base + offset */
    size_t size;
} sw_py_range;

typedef struct sw_py_devctx {
    atomic_int refs;
    atomic_int alive;    /* 0 once the Device is closed: stop collecting */
    atomic_long exports; /* live zero-copy DLPack exports of its memory */
    pthread_mutex_t mu;  /* guards live; taken with no other lock held */
    sw_py_range live;    /* list head of the exports' ranges */
} sw_py_devctx;

static inline sw_py_devctx *sw_py_ctx_new(void)
{
    sw_py_devctx *c = malloc(sizeof *c);
    if (c != NULL) {
        atomic_init(&c->refs, 1);
        atomic_init(&c->alive, 1);
        atomic_init(&c->exports, 0);
        pthread_mutex_init(&c->mu, NULL);
        c->live.next = c->live.prev = &c->live;
    }
    return c;
}

static inline void sw_py_ctx_ref(sw_py_devctx *c)
{
    atomic_fetch_add(&c->refs, 1);
}

static inline void sw_py_ctx_unref(sw_py_devctx *c)
{
    if (c != NULL && atomic_fetch_sub(&c->refs, 1) == 1) {
        pthread_mutex_destroy(&c->mu);
        free(c);
    }
}

/* ------------------------------------------------------------------------
 * Device
 * ---------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    /* Our sw_device_open reference; NULL once closed.  Read by any
     * thread; taken (and the callback removed) under life_mu, which is
     * only ever taken with the thread state released. */
    _Atomic(sw_device *) dev;
    sw_py_devctx *ctx;
    int cb_id;      /* pressure callback slot; -1 when none (life_mu) */
    pthread_mutex_t life_mu;
    _Atomic int closed; /* close() was called (0 -> 1 once) */
    uint32_t dtypes; /* the kernels' dtypes (sw_device_dtypes), fixed
                      * while the device is open */
    int host_addressable; /* sw_device_host_addressable, at open: asked
                           * with the thread state released, as every
                           * library call is */
    /* Arrays, open peak scopes, helper threads and calls in progress on
     * it: the device is really closed when close() was called and this
     * drops to 0.  Changed from any thread: with `closed`, a Dekker pair
     * (sw_py_device_try_use and Device.close, seq_cst), so that no call
     * starts on a device being closed and the last user closes it. */
    _Atomic Py_ssize_t users;
    PyObject *name;        /* str "sim:0" */
    PyObject *description; /* str */
    PyObject *weakreflist;
} DeviceObject;

/* Count a user of d / drop one (the last one of a closed device closes
 * it).  sw_py_device_use is for a caller that holds a user already (an
 * Array on d); sw_py_device_try_use for one that holds none: the device,
 * or NULL (nothing counted) when it is closed or closing. */
static inline void sw_py_device_use(DeviceObject *d)
{
    atomic_fetch_add(&d->users, 1);
}
void sw_py_device_unuse(DeviceObject *d);
sw_device *sw_py_device_try_use(DeviceObject *d);

/* -1 with ValueError when d was closed. */
int sw_py_device_check_open(DeviceObject *d);

/* The Device for spec (a str), or the default device when spec is NULL,
 * opening it on first use.  New reference. */
DeviceObject *sw_py_device_lookup(sw_py_state *st, PyObject *spec);

/* A device= argument: a Device, a spec string or None.  New reference. */
DeviceObject *sw_py_resolve_device(sw_py_state *st, PyObject *obj);

/* A device call with the GIL released, the device counted as in use
 * meanwhile (so that a close() from another thread waits for it); the call
 * names the device dev_.  rc is SW_PY_CLOSED (sw_py_raise: ValueError)
 * when the device was closed before it could start. */
#define SW_PY_DEVICE_CALL(d, rc, call)                                        \
    do {                                                                      \
        sw_device *dev_ = sw_py_device_try_use(d);                            \
        if (dev_ == NULL) {                                                   \
            rc = SW_PY_CLOSED;                                                \
        } else {                                                              \
            NOGIL(rc = (call));                                               \
            sw_py_device_unuse(d);                                            \
        }                                                                     \
    } while (0)

/* size.c: a size argument as people write it, read one way for every
 * setter -- bytes (an int), a size string ("512M", "2GiB": sw_parse_size),
 * a fraction in (0, 1] (a float, a NumPy float, a Fraction or a Decimal)
 * of what `of` names, or None (no budget: 0).  *out is at least 1 for a
 * fraction.  what names the argument in errors ("set_host_budget()"):
 * TypeError for a bool or another type, ValueError for a bad value. */
typedef enum {
    SW_PY_SIZE_BYTES,  /* bytes only: an int or a size string; no None */
    SW_PY_SIZE_DEVICE, /* or a fraction of d's memory, or None */
    SW_PY_SIZE_HOST,   /* or a fraction of the machine's memory, or None */
} sw_py_size_of;
int sw_py_parse_size(sw_py_state *st, PyObject *obj, const char *what,
                     sw_py_size_of of, DeviceObject *d, uint64_t *out);

#endif /* SPILLWAY_PY_DEVICE_H */
