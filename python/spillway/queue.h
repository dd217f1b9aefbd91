/*
 * queue.h -- queues, events, host tasks and order managers: Queue and Event
 * (queue.c), Python host tasks (hosttask.c), SequentialOrderManager
 * (order.c) and spillway.order_manager, the per-thread map (ordermap.c).
 *
 * Queue wraps an sw_queue with a reference of its own; Queue(q) wraps the
 * same sw_queue, and queues compare and hash by that pointer.  Event wraps
 * an sw_event.  A SequentialOrderManager keeps, in an sw_order, the events
 * of the work submitted to one queue and of host tasks, and holds its own
 * reference to the sw_queue -- never the Queue object it was looked up by.
 *
 * spillway.order_manager maps queues to managers per thread (a map object
 * kept in the thread state's dict) and holds each key by weak reference:
 *  - the weak reference's callback (the map's entry itself) only marks the
 *    entry dead and links it on the map's dead list.  It never waits and
 *    never allocates: the last reference to a queue is often dropped
 *    inside one of the queue's own host tasks, on its runner thread;
 *  - the owning thread drops a dead entry at a later lookup, once the
 *    manager's events have all completed (sw_order_idle: queries, never a
 *    wait) and nothing but the map refers to the manager;
 *  - until then a lookup of an equal queue (the same sw_queue, found by
 *    pointer) takes the entry over with a new weak reference, so new work
 *    is still ordered after the old manager's events.
 * Only the owning thread changes its map's table; a callback, which may
 * run on any thread (always with the GIL), only sets flags and links.
 *
 * Dependencies.  Work on one queue runs in order, so a manager's events of
 * its own queue need no further ordering.  Events of other queues (added
 * with add_event or add_event_pair) are kept apart as well ("foreign"), and
 * new work waits for them on the host, without the GIL, before it is
 * submitted (the C API has no queue-waits-for-event call).  As in dpctl,
 * new work depends on submitted events only; host-task events are kept so
 * that wait() covers them and the objects they hold stay alive.
 *
 * Host tasks.  q.host_task(fn) runs fn with the GIL, taken with
 * PyGILState_Ensure on the queue's runner thread (which holds no spillway
 * lock then).  The host task that keeps an operation's Arrays alive until
 * its work has completed needs no GIL: it hands its references to a
 * release list and completes, so that a manager is idle as soon as its
 * device work is done, whatever the GIL's scheduling (a runner waiting
 * for the GIL would keep its queue, and its device memory, alive).  The
 * list is drained, with the GIL, at the next queue call of any thread, by
 * a pending call scheduled on the main thread (Py_AddPendingCall), and
 * after every wait.  Python host tasks are counted; an atexit handler
 * waits for them and drains the list before the interpreter finalizes,
 * when a thread asking for the GIL would never get it.  The count and the
 * list are process-wide (sw_py_process, module.h).
 */
#ifndef SPILLWAY_PY_QUEUE_H
#define SPILLWAY_PY_QUEUE_H

#include "device.h"

typedef struct {
    PyObject_HEAD
    sw_queue *q;          /* our reference */
    DeviceObject *device; /* strong, and counted in its users */
    PyObject *weakreflist;
} QueueObject;

typedef struct {
    PyObject_HEAD
    sw_event *ev;     /* our reference */
    sw_queue *origin; /* where it was recorded, as an identity only (no
                       * reference); NULL when unknown */
    int host_task;
} EventObject;

typedef struct {
    PyObject_HEAD
    sw_queue *q;          /* the manager's own reference */
    DeviceObject *device; /* strong, counted in its users */
    sw_order *order;      /* every event recorded */
    sw_order *foreign;    /* the submitted ones not of q; NULL until one */
    sw_order *own;        /* the host-task ones of q; NULL until one */
    /* Guards order, foreign and own.  Taken only with the GIL released,
     * and never held while waiting or while taking the GIL. */
    pthread_mutex_t mu;
    PyObject *weakreflist;
} ManagerObject;

/* ------------------------------------------------------------------------
 * hosttask.c
 * ---------------------------------------------------------------------- */

/* A Python host task that calls fn (with the GIL), or, with fn NULL, keeps
 * objs[0..nobjs) (at most 4) alive until the work before it is complete.
 * q: the queue it will run on, as an identity.  NULL with an exception
 * set. */
sw_py_pytask *sw_py_pytask_new(PyObject *fn, PyObject *const *objs,
                               int nobjs, sw_queue *q);
/* With the GIL: drop the references and free a task never submitted. */
void sw_py_pytask_free(sw_py_pytask *t);
/* Without the GIL: queue t on q; t belongs to the task once this
 * succeeds. */
int sw_py_pytask_submit(sw_queue *q, sw_py_pytask *t, sw_event **ev);
/* With the GIL: drop the references finished keep-alive tasks handed
 * back. */
void sw_py_drain_releases(void);
/* Without the GIL: wait until no Python host task (of any thread) is
 * pending, at most timeout seconds (< 0: no limit); 1 when none is. */
int sw_py_wait_host_tasks(double timeout);
/* Python host tasks not yet finished. */
long sw_py_pending_host_tasks(void);

/* ------------------------------------------------------------------------
 * queue.c
 * ---------------------------------------------------------------------- */

/* An Event taking the reference ev (released on failure). */
PyObject *sw_py_event_wrap(sw_py_state *st, sw_event *ev, sw_queue *origin,
                           int host_task);
/* -1 with ValueError when the queue's device was closed. */
int sw_py_queue_check_open(QueueObject *q);

/* ------------------------------------------------------------------------
 * order.c.  The *_nogil functions are called without the GIL and take
 * m->mu themselves; *_locked ones with m->mu held.
 * ---------------------------------------------------------------------- */

/* A manager of queue q (a reference of its own) on d, with no events. */
ManagerObject *sw_py_manager_new(sw_py_state *st, sw_queue *q,
                                 DeviceObject *d);
/* Whether every event of m has completed (never blocks). */
int sw_py_manager_idle_nogil(ManagerObject *m);
/* Record one event (of_q: recorded on m's own queue). */
int sw_py_manager_add_locked(ManagerObject *m, sw_event *ev, int host_task,
                             int of_q);
/* Wait (on the host) for the foreign dependencies of new work. */
int sw_py_manager_wait_foreign_nogil(ManagerObject *m);
/* Wait for every event recorded so far, then forget them (in_task: the
 * caller is one of the queue's own host tasks). */
int sw_py_manager_wait_nogil(ManagerObject *m, int in_task);

/* ------------------------------------------------------------------------
 * ordermap.c
 * ---------------------------------------------------------------------- */

/* The manager of queue q for this thread: a new reference. */
ManagerObject *sw_py_manager_of(sw_py_state *st, QueueObject *q);
/* Under memory pressure: wait for this thread's managers of dead queues
 * and drop them; how many were dropped, or -1 with an exception set. */
int sw_py_relieve_dead_managers(sw_py_state *st);

#endif /* SPILLWAY_PY_QUEUE_H */
