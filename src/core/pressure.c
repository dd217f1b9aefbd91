/*
 * pressure.c -- memory-pressure callbacks.
 *
 * Callbacks run with the device lock held and receive it as their
 * sw_pressure; one that needs anything that can block or re-enter spillway
 * (the GIL above all) releases it first.  This keeps the one lock order,
 * device lock -> GIL, and lets a garbage collector free buffers from its
 * finalizers while an allocation waits for it.
 */
#include "core/internal.h"

/* Set while this thread runs a callback: an allocation made from inside
 * one does not run the callbacks again. */
static _Thread_local bool in_callback;

_Thread_local bool sw__tl_background;

bool sw__run_callbacks_locked(sw_device *dev, size_t bytes, bool last)
{
    sw__assert_locked(dev);
    if (in_callback || sw__tl_background)
        return false;
    bool any = false;
    SW__TRACE(dev, SW_TRACE_PRESSURE_BEGIN, NULL, bytes, 0, last);
    /* Slots are re-read under the lock each time: a callback may add or
     * remove callbacks while it has the lock released. */
    for (int i = 0; i < SW_MAX_PRESSURE_CALLBACKS; i++) {
        sw__callback cb = dev->callbacks[i];
        if (cb.fn == NULL)
            continue;
        sw_pressure p = {.dev = dev, .locked = true, .last = last};
        in_callback = true;
        dev->waiting++; /* the callback may release the lock */
        int freed = cb.fn(dev, &p, bytes, cb.user);
        if (!p.locked)
            sw__lock(dev); /* the callback forgot to re-take it */
        dev->waiting--;
        in_callback = false;
        any = any || freed != 0;
    }
    SW__TRACE(dev, SW_TRACE_PRESSURE_END, NULL, bytes, 0, any);
    return any;
}

SW_API int sw_add_pressure_callback(sw_device *dev, sw_pressure_fn fn,
                                    void *user, int *id)
{
    if (id != NULL)
        *id = -1;
    if (fn == NULL || id == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "fn or id is NULL");
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    rc = sw__errorf(SW_ERR_BUSY, "%s already has %d pressure callbacks",
                    dev->name, SW_MAX_PRESSURE_CALLBACKS);
    for (int i = 0; i < SW_MAX_PRESSURE_CALLBACKS; i++) {
        if (dev->callbacks[i].fn == NULL) {
            dev->callbacks[i].fn = fn;
            dev->callbacks[i].user = user;
            *id = i;
            rc = SW_OK;
            break;
        }
    }
    sw__unlock(dev);
    return rc;
}

SW_API int sw_remove_pressure_callback(sw_device *dev, int id)
{
    if (id < 0 || id >= SW_MAX_PRESSURE_CALLBACKS)
        return sw__errorf(SW_ERR_INVALID_ARG, "no pressure callback %d", id);
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    if (dev->callbacks[id].fn == NULL)
        rc = sw__errorf(SW_ERR_INVALID_ARG, "%s has no pressure callback %d",
                        dev->name, id);
    dev->callbacks[id].fn = NULL;
    dev->callbacks[id].user = NULL;
    sw__unlock(dev);
    return rc;
}

SW_API void sw_pressure_unlock(sw_pressure *p)
{
    if (p != NULL && p->locked) {
        p->locked = false;
        sw__unlock(p->dev);
    }
}

SW_API void sw_pressure_relock(sw_pressure *p)
{
    if (p != NULL && !p->locked) {
        sw__lock(p->dev);
        p->locked = true;
    }
}

SW_API int sw_pressure_last_chance(const sw_pressure *p)
{
    return p != NULL && p->last;
}

SW_API void sw_pressure_note_gc(sw_pressure *p)
{
    if (p != NULL && p->locked) {
        p->dev->gc_runs++;
        SW__TRACE(p->dev, SW_TRACE_GC, NULL, 0, 0, p->dev->gc_runs);
    }
}
