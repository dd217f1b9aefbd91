/*
 * native.c -- the runtime's own handles: a queue's native stream
 * (sw_queue_native), the device's context (sw_device_native_context), and
 * the adoption of a stream the caller owns (sw_queue_wrap_native).
 *
 * What spillway made is never adopted.  Its queues' streams, its default
 * and copy queues, and its contexts are spillway's already: adopting one
 * would give a second spillway queue over a stream whose lifetime is the
 * first one's (host:0's context and default queue share an address, and
 * releasing the adoption destroyed the default queue), and on a device
 * other than the handle's the driver reads through a handle of another
 * runtime (OpenCL crashed on a simulated device's queue).  So every native
 * handle spillway hands out is kept, while it lives, in one registry of
 * all devices (a hash under a leaf lock, taken under a device lock), and
 * sw_queue_wrap_native refuses it on any device before a driver sees it:
 * on its own device the error says to use the queue itself.  A backend
 * refuses its own queues whose handles were never handed out (the default
 * and copy queues), and the core refuses any of its queues a backend hands
 * back all the same, destroying nothing.
 *
 * What cannot be told: a destroyed queue's handle is forgotten with it (its
 * address may be a new stream of the caller's by the time it comes back),
 * so only the runtime can say it is dead -- the simulated and host devices
 * look handles up, the CUDA, HIP and Level Zero backends ask their driver
 * (the stand-ins look them up; a real driver may read through one), and
 * OpenCL reads through them (opencl.c checks what it can without that).
 */
#include "core/internal.h"
#include "core/native.h"

#include <stdio.h>

/* ------------------------------------------------------------------------
 * The registry of spillway's own handles
 * ---------------------------------------------------------------------- */

#define NATIVE_BUCKETS 64

static pthread_mutex_t native_mu = PTHREAD_MUTEX_INITIALIZER;
static sw__native *native_bucket[NATIVE_BUCKETS];

static sw__native **bucket_of(uintptr_t handle)
{
    /* Handles are addresses: the low bits are alignment. */
    uintptr_t h = (handle >> 4) ^ (handle >> 12) ^ (handle >> 20);
    return &native_bucket[h % NATIVE_BUCKETS];
}

static void forget_mu(sw__native *n)
{
    if (n->handle == 0)
        return;
    sw__native **pp = bucket_of(n->handle);
    while (*pp != NULL && *pp != n)
        pp = &(*pp)->next;
    if (*pp == n)
        *pp = n->next;
    n->next = NULL;
    n->handle = 0;
}

void sw__native_keep(sw__native *n, sw_device *dev, uintptr_t handle, int qid)
{
    sw__assert_locked(dev);
    if (handle == 0)
        return;
    pthread_mutex_lock(&native_mu);
    if (n->handle != handle) {
        forget_mu(n);
        sw__native **b = bucket_of(handle);
        n->handle = handle;
        n->dev = dev;
        n->qid = qid;
        n->next = *b;
        *b = n;
    }
    pthread_mutex_unlock(&native_mu);
}

void sw__native_forget(sw__native *n)
{
    pthread_mutex_lock(&native_mu);
    forget_mu(n);
    pthread_mutex_unlock(&native_mu);
}

/* What spillway knows handle as, copied out under the registry's lock (a
 * kept entry's device is open, so its name is stable meanwhile): false if
 * nothing. */
typedef struct {
    sw_device *dev;
    sw__native *node;
    int qid;
    char name[sizeof(((sw_device *)0)->name)];
} known_handle;

static bool lookup(uintptr_t handle, sw_device *dev, known_handle *k)
{
    bool found = false;
    pthread_mutex_lock(&native_mu);
    /* One of dev's own first: a context may share its address with
     * something of another device's only by coincidence. */
    for (sw__native *n = *bucket_of(handle); n != NULL; n = n->next) {
        if (n->handle != handle || (found && n->dev != dev))
            continue;
        k->dev = n->dev;
        k->node = n;
        k->qid = n->qid;
        snprintf(k->name, sizeof k->name, "%s", n->dev->name);
        found = true;
    }
    pthread_mutex_unlock(&native_mu);
    return found;
}

/* ------------------------------------------------------------------------
 * Adoption
 * ---------------------------------------------------------------------- */

static int refuse_known(sw_device *dev, uintptr_t handle,
                        const known_handle *k)
{
    if (k->dev == dev && k->qid < 0)
        return sw__errorf(SW_ERR_INVALID_ARG, "%s: %#jx is this device's "
                          "native context (sw_device_native_context), not "
                          "a queue", dev->name, (uintmax_t)handle);
    if (k->dev == dev)
        return sw__errorf(SW_ERR_INVALID_ARG, "%s: %#jx is the stream of "
                          "spillway's own queue %d (sw_queue_native): use "
                          "that queue itself, not an adoption of its handle",
                          dev->name, (uintmax_t)handle, k->qid);
    if (k->qid < 0)
        return sw__errorf(SW_ERR_INVALID_ARG, "%s: %#jx is the native "
                          "context of %s, not a queue of this device",
                          dev->name, (uintmax_t)handle, k->name);
    return sw__errorf(SW_ERR_INVALID_ARG, "%s: %#jx is the stream of a "
                      "spillway queue of %s, not of this device", dev->name,
                      (uintmax_t)handle, k->name);
}

/* Whether bq is a backend queue spillway already has on dev. */
static bool own_bqueue_locked(sw_device *dev, const sw__bqueue *bq)
{
    if (bq == dev->q || (dev->copyq != NULL && bq == dev->copyq))
        return true;
    for (sw__queue *o = dev->queues; o != NULL; o = o->next)
        if (o->bq == bq)
            return true;
    return false;
}

static int wrap_native(sw_device *dev, uintptr_t handle, bool own_ok,
                       sw_queue **out)
{
    if (out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (handle == 0)
        return sw__errorf(SW_ERR_INVALID_ARG, "handle 0 is no queue (a "
                          "legacy default stream is not adopted: create a "
                          "stream)");
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    if (dev->dying_queues > 0)
        sw__reap_queues_locked(dev, false);
    /* The device's context, handed out or not. */
    known_handle k = {.dev = dev, .qid = -1};
    uintptr_t ctx = 0;
    if (sw__b_native_context(dev, &ctx) == SW_OK && ctx == handle) {
        rc = refuse_known(dev, handle, &k);
        sw__unlock(dev);
        return rc;
    }
    if (lookup(handle, dev, &k)) {
        /* Kept entries of dev change only under its lock, held here: the
         * queue is still there. */
        sw__queue *own = NULL;
        if (k.dev == dev && k.qid >= 0)
            own = (sw__queue *)((char *)k.node - offsetof(sw__queue, native));
        if (own_ok && own != NULL && !own->dying && own->refs < UINT32_MAX) {
            own->refs++;
            *out = (sw_queue *)sw__handle_of(&sw__queue_pool, own);
            sw__unlock(dev);
            return SW_OK;
        }
        rc = refuse_known(dev, handle, &k);
        sw__unlock(dev);
        return rc;
    }
    sw__queue *q = sw__pool_get(&sw__queue_pool);
    if (q == NULL) {
        sw__unlock(dev);
        return sw__errorf(SW_ERR_HOST_OOM, "no host memory for a queue");
    }
    rc = sw__b_queue_wrap(dev, handle, &q->bq);
    if (rc == SW_OK && own_bqueue_locked(dev, q->bq)) {
        /* The backend should have refused: its own queue is not the
         * caller's, and destroying it would take spillway's away. */
        rc = sw__errorf(SW_ERR_INVALID_ARG, "%s: %#jx is a stream of "
                        "spillway's own (its default queue, or a queue it "
                        "made): use that queue itself", dev->name,
                        (uintmax_t)handle);
    }
    if (rc != SW_OK) {
        sw__unlock(dev);
        sw__pool_put(&sw__queue_pool, q);
        return rc;
    }
    q->adopted = true;
    *out = sw__queue_install_locked(dev, q);
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_queue_wrap_native(sw_device *dev, uintptr_t handle,
                                sw_queue **out)
{
    return wrap_native(dev, handle, false, out);
}

int sw__queue_wrap_native_or_own(sw_device *dev, uintptr_t handle,
                                 sw_queue **out)
{
    return wrap_native(dev, handle, true, out);
}

SW_API int sw_queue_native(sw_queue *h, uintptr_t *handle)
{
    if (handle == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "handle is NULL");
    *handle = 0;
    sw__queue *q;
    int rc = sw__queue_enter(h, &q);
    if (rc != SW_OK)
        return rc;
    rc = sw__b_queue_native(q->dev, q->bq, handle);
    if (rc == SW_OK && !q->adopted)
        sw__native_keep(&q->native, q->dev, *handle, q->id);
    sw__unlock(q->dev);
    return rc;
}

SW_API int sw_device_native_context(sw_device *dev, uintptr_t *context)
{
    if (context == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "context is NULL");
    *context = 0;
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    rc = sw__b_native_context(dev, context);
    if (rc == SW_OK)
        sw__native_keep(&dev->context, dev, *context, -1);
    sw__unlock(dev);
    return rc;
}
