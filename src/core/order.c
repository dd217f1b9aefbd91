/*
 * order.c -- order records: the events of work submitted to a queue and of
 * host tasks, so that new work can be ordered after them and the host can
 * wait for them.  One owner each (the Python layer keeps one per thread),
 * so no lock of their own; their events are the queues' (queue.c).
 */
#include "core/internal.h"

struct sw_order {
    sw__event **ev[2]; /* submitted, host tasks */
    size_t n[2], cap[2];
};

SW_API int sw_order_create(sw_order **out)
{
    if (out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL");
    *out = sw__calloc(1, sizeof **out);
    return *out ? SW_OK
                : sw__errorf(SW_ERR_HOST_OOM, "no host memory for an order "
                             "record");
}

SW_API void sw_order_destroy(sw_order *o)
{
    if (o == NULL)
        return;
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < o->n[k]; i++)
            sw__event_drop_handle(o->ev[k][i]);
        sw__free(o->ev[k]);
    }
    sw__free(o);
}

/* Drops completed events (a query never blocks). */
static void prune(sw_order *o)
{
    for (int k = 0; k < 2; k++) {
        size_t w = 0;
        for (size_t i = 0; i < o->n[k]; i++) {
            int done = 0;
            (void)sw__event_query(o->ev[k][i], &done);
            if (done)
                sw__event_drop_handle(o->ev[k][i]);
            else
                o->ev[k][w++] = o->ev[k][i];
        }
        o->n[k] = w;
    }
}

SW_API int sw_order_add(sw_order *o, sw_event *h, int host_task)
{
    if (o == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "order record is NULL");
    sw__event *ev;
    int rc = sw__event_check(h, &ev);
    if (rc != SW_OK)
        return rc;
    int k = host_task ? 1 : 0;
    prune(o);
    if (o->n[k] == o->cap[k]) {
        size_t cap = o->cap[k] ? 2 * o->cap[k] : 8;
        sw__event **v = sw__realloc(o->ev[k], cap * sizeof *v);
        if (v == NULL)
            return sw__errorf(SW_ERR_HOST_OOM, "no host memory for an "
                              "order record");
        o->ev[k] = v;
        o->cap[k] = cap;
    }
    sw__event_hold_handle(ev); /* sw_order_event hands the handle out */
    o->ev[k][o->n[k]++] = ev;
    return SW_OK;
}

SW_API int sw_order_counts(sw_order *o, size_t *submitted, size_t *host_tasks)
{
    if (submitted != NULL) /* out-parameters are cleared on failure */
        *submitted = 0;
    if (host_tasks != NULL)
        *host_tasks = 0;
    if (o == NULL || submitted == NULL || host_tasks == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "NULL argument");
    prune(o);
    *submitted = o->n[0];
    *host_tasks = o->n[1];
    return SW_OK;
}

SW_API sw_event *sw_order_event(sw_order *o, int host_task, size_t i)
{
    int k = host_task ? 1 : 0;
    return o != NULL && i < o->n[k] ? sw__event_handle(o->ev[k][i]) : NULL;
}

SW_API int sw_order_idle(sw_order *o, int *idle)
{
    if (idle != NULL) /* cleared on failure */
        *idle = 0;
    if (o == NULL || idle == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "NULL argument");
    prune(o);
    *idle = o->n[0] == 0 && o->n[1] == 0;
    return SW_OK;
}

SW_API int sw_order_wait(sw_order *o)
{
    if (o == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "order record is NULL");
    int first = SW_OK;
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < o->n[k]; i++) {
            int rc = sw__event_wait(o->ev[k][i]);
            if (first == SW_OK)
                first = rc;
            sw__event_drop_handle(o->ev[k][i]);
        }
        o->n[k] = 0;
    }
    return first;
}
