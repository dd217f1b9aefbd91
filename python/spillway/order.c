/*
 * order.c -- SequentialOrderManager: the record of one queue's submitted
 * work and host tasks (the overview: queue.h).
 */
#include "queue.h"

#include <stdlib.h>
#include <structmember.h>

ManagerObject *sw_py_manager_new(sw_py_state *st, sw_queue *q,
                                 DeviceObject *d)
{
    ManagerObject *m = sw_py_state_alive(st)
                           ? PyObject_GC_New(ManagerObject, st->manager_type)
                           : NULL;
    if (m == NULL)
        return NULL;
    m->q = NULL;
    m->device = NULL;
    m->order = NULL;
    m->foreign = NULL;
    m->own = NULL;
    m->weakreflist = NULL;
    pthread_mutex_init(&m->mu, NULL);
    st->live_managers++;
    sw_order *o = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sw_queue_retain(q);
    if (rc == SW_OK && (rc = sw_order_create(&o)) != SW_OK)
        (void)sw_queue_release(q);
    Py_END_ALLOW_THREADS
    if (rc != SW_OK) {
        sw_py_raise(st, rc);
        Py_DECREF(m);
        return NULL;
    }
    m->q = q;
    m->order = o;
    m->device = (DeviceObject *)Py_NewRef(d);
    sw_py_device_use(d); /* the caller's queue holds one */
    /* Tracked once whole: the collector (another thread's, without the
     * GIL) never sees a half-made manager. */
    PyObject_GC_Track(m);
    return m;
}

static int Manager_traverse(ManagerObject *m, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(m));
    Py_VISIT(m->device);
    return 0;
}

/* Waits for nothing: the events are released, the queue handle too (its
 * work goes on; the queue is destroyed once it is done). */
static void Manager_dealloc(ManagerObject *m)
{
    PyTypeObject *tp = Py_TYPE(m);
    PyObject_GC_UnTrack(m);
    if (m->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)m);
    sw_order *o = m->order, *f = m->foreign, *own = m->own;
    sw_queue *q = m->q;
    m->order = m->foreign = m->own = NULL;
    m->q = NULL;
    if (o != NULL || f != NULL || own != NULL || q != NULL) {
        Py_BEGIN_ALLOW_THREADS
        sw_order_destroy(o);
        sw_order_destroy(f);
        sw_order_destroy(own);
        (void)sw_queue_release(q);
        Py_END_ALLOW_THREADS
    }
    pthread_mutex_destroy(&m->mu);
    DeviceObject *d = m->device;
    m->device = NULL;
    if (d != NULL) {
        sw_py_device_unuse(d);
        Py_DECREF(d);
    }
    sw_py_state *st = sw_py_type_state_nothrow(tp);
    if (st != NULL)
        st->live_managers--;
    tp->tp_free((PyObject *)m);
    Py_DECREF(tp);
}

int sw_py_manager_idle_nogil(ManagerObject *m)
{
    int idle = 0;
    pthread_mutex_lock(&m->mu);
    if (sw_order_idle(m->order, &idle) != SW_OK)
        idle = 0;
    pthread_mutex_unlock(&m->mu);
    return idle;
}

/* With m->mu held: record one event.  Submitted events not of m's queue
 * are also kept as foreign dependencies; host-task events of m's queue as
 * its own (see sw_py_manager_wait_nogil). */
int sw_py_manager_add_locked(ManagerObject *m, sw_event *ev, int host_task,
                             int of_q)
{
    int rc = sw_order_add(m->order, ev, host_task);
    if (rc != SW_OK || host_task != of_q)
        return rc;
    sw_order **sub = host_task ? &m->own : &m->foreign;
    if (*sub == NULL && (rc = sw_order_create(sub)) != SW_OK)
        return rc;
    return sw_order_add(*sub, ev, 0);
}

/* Without the GIL: record events (retained by the order). */
static int manager_add_nogil(ManagerObject *m, EventObject *const *evs,
                             size_t n, int host_task)
{
    int rc = SW_OK;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < n && rc == SW_OK; i++)
        rc = sw_py_manager_add_locked(m, evs[i]->ev, host_task,
                                      evs[i]->origin == m->q);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* With m->mu held: whether ev is in sub (a pointer search; sub is small:
 * it holds pending events only). */
static int order_has(sw_order *sub, sw_event *ev)
{
    sw_event *e;
    for (size_t j = 0; sub != NULL && (e = sw_order_event(sub, 0, j)); j++)
        if (e == ev)
            return 1;
    return 0;
}

/* Events are retained under the lock and waited for without it. */
int sw_py_manager_wait_foreign_nogil(ManagerObject *m)
{
    sw_event *stack[8], **evs = stack;
    size_t n = 0, nh = 0;
    int rc = SW_OK;
    pthread_mutex_lock(&m->mu);
    if (m->foreign != NULL &&
        (rc = sw_order_counts(m->foreign, &n, &nh)) == SW_OK && n > 0) {
        if (n > 8 && (evs = malloc(n * sizeof *evs)) == NULL) {
            rc = SW_PY_NOMEM;
            n = 0;
        }
        for (size_t i = 0; i < n; i++) {
            evs[i] = sw_order_event(m->foreign, 0, i);
            (void)sw_event_retain(evs[i]);
        }
    }
    pthread_mutex_unlock(&m->mu);
    for (size_t i = 0; i < n; i++) {
        int r = sw_event_wait(evs[i]);
        if (rc == SW_OK)
            rc = r;
        (void)sw_event_release(evs[i]);
    }
    if (evs != stack)
        free(evs);
    return rc;
}

/* Without the GIL: wait for every event recorded so far, then forget them.
 * The records are swapped for empty ones under the lock and waited for
 * without it, so that a host task may use the manager meanwhile.
 *
 * in_task: the caller is one of the queue's own host tasks.  The queue's
 * host tasks run one at a time, in order, so those it recorded are either
 * complete or queued behind the caller, unable to run until it returns:
 * waiting for them would never end.  Everything else is waited for then,
 * and nothing is forgotten (completed events are pruned as usual). */
int sw_py_manager_wait_nogil(ManagerObject *m, int in_task)
{
    if (in_task) {
        sw_event **evs = NULL;
        size_t n = 0, cap = 0;
        int rc = SW_OK;
        pthread_mutex_lock(&m->mu);
        size_t counts[2] = {0, 0};
        (void)sw_order_counts(m->order, &counts[0], &counts[1]);
        cap = counts[0] + counts[1];
        if (cap > 0 && (evs = malloc(cap * sizeof *evs)) == NULL)
            rc = SW_PY_NOMEM;
        for (int k = 0; k < 2 && evs != NULL; k++) {
            for (size_t i = 0; i < counts[k]; i++) {
                sw_event *ev = sw_order_event(m->order, k, i);
                if (k == 1 && order_has(m->own, ev))
                    continue;
                (void)sw_event_retain(ev);
                evs[n++] = ev;
            }
        }
        pthread_mutex_unlock(&m->mu);
        for (size_t i = 0; i < n; i++) {
            int r = sw_event_wait(evs[i]);
            if (rc == SW_OK)
                rc = r;
            (void)sw_event_release(evs[i]);
        }
        free(evs);
        return rc;
    }
    sw_order *fresh = NULL;
    int rc = sw_order_create(&fresh);
    if (rc != SW_OK)
        return rc;
    pthread_mutex_lock(&m->mu);
    sw_order *old = m->order, *oldf = m->foreign, *oldown = m->own;
    m->order = fresh;
    m->foreign = m->own = NULL;
    pthread_mutex_unlock(&m->mu);
    rc = sw_order_wait(old);
    sw_order_destroy(old);
    sw_order_destroy(oldf);
    sw_order_destroy(oldown);
    return rc;
}

/* Event (or sequence of Events) argument -> a new array of borrowed
 * EventObject pointers (kept alive by *seq), *n of them. */
static int events_arg(sw_py_state *st, PyObject *obj, const char *fname,
                      const char *what, PyObject **seq, EventObject ***out,
                      Py_ssize_t *n)
{
    *seq = NULL;
    *out = NULL;
    *n = 0;
    if (Py_IS_TYPE(obj, st->event_type)) {
        *seq = PyTuple_Pack(1, obj);
    } else if (PyList_Check(obj) || PyTuple_Check(obj) ||
               (PySequence_Check(obj) && !PyUnicode_Check(obj) &&
                !PyBytes_Check(obj))) {
        /* A tuple: the events stay referenced while the calls that use
         * them run without the GIL, whatever happens to a caller's list. */
        *seq = sw_py_as_tuple(obj, "events must be a sequence");
    } else {
        PyErr_Format(PyExc_TypeError,
                     "%s(): %s must be a spillway.Event or a sequence of "
                     "them, not %.100s",
                     fname, what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (*seq == NULL)
        return -1;
    Py_ssize_t len = PyTuple_GET_SIZE(*seq);
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *item = PyTuple_GET_ITEM(*seq, i);
        if (!Py_IS_TYPE(item, st->event_type)) {
            PyErr_Format(PyExc_TypeError,
                         "%s(): %s must be spillway.Events, not %.100s",
                         fname, what, Py_TYPE(item)->tp_name);
            Py_CLEAR(*seq);
            return -1;
        }
    }
    *out = (EventObject **)&PyTuple_GET_ITEM(*seq, 0);
    *n = len;
    return 0;
}

static PyObject *Manager_add_event_pair(ManagerObject *m, PyObject *args)
{
    PyObject *hobj, *cobj;
    if (!PyArg_ParseTuple(args, "OO:add_event_pair", &hobj, &cobj))
        return NULL;
    sw_py_state *st = sw_py_type_state(Py_TYPE(m));
    if (st == NULL)
        return NULL;
    PyObject *hseq, *cseq;
    EventObject **h, **c;
    Py_ssize_t nh, nc;
    if (events_arg(st, hobj, "add_event_pair", "host_task_events", &hseq, &h,
                   &nh) < 0)
        return NULL;
    if (events_arg(st, cobj, "add_event_pair", "computation_events", &cseq,
                   &c, &nc) < 0) {
        Py_DECREF(hseq);
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = manager_add_nogil(m, h, (size_t)nh, 1);
    if (rc == SW_OK)
        rc = manager_add_nogil(m, c, (size_t)nc, 0);
    Py_END_ALLOW_THREADS
    Py_DECREF(hseq);
    Py_DECREF(cseq);
    if (rc != SW_OK)
        return sw_py_raise_rc(st, rc);
    Py_RETURN_NONE;
}

static PyObject *Manager_add_event(ManagerObject *m, PyObject *ev)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(m));
    if (st == NULL)
        return NULL;
    if (!Py_IS_TYPE(ev, st->event_type)) {
        PyErr_Format(PyExc_TypeError,
                     "add_event() takes a spillway.Event, not %.100s",
                     Py_TYPE(ev)->tp_name);
        return NULL;
    }
    EventObject *e = (EventObject *)ev;
    int rc;
    NOGIL(rc = manager_add_nogil(m, &e, 1, 0));
    if (rc != SW_OK)
        return sw_py_raise_rc(st, rc);
    Py_RETURN_NONE;
}

static PyObject *Manager_wait(ManagerObject *m, PyObject *unused)
{
    int rc, in_task = sw_py_thread.task_queue == m->q;
    NOGIL(rc = sw_py_manager_wait_nogil(m, in_task));
    sw_py_drain_releases(); /* what the finished work held goes now */
    if (rc != SW_OK) {
        sw_py_state *st = sw_py_type_state(Py_TYPE(m));
        return st ? sw_py_raise_rc(st, rc) : NULL;
    }
    Py_RETURN_NONE;
}

/* A new manager of the same queue with the same events, in no map. */
static PyObject *Manager_copy(ManagerObject *m, PyObject *unused)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(m));
    if (st == NULL)
        return NULL;
    ManagerObject *c = sw_py_manager_new(st, m->q, m->device);
    if (c == NULL)
        return NULL;
    int rc = SW_OK;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&m->mu);
    for (int k = 0; k < 2 && rc == SW_OK; k++) {
        sw_event *ev;
        for (size_t i = 0; rc == SW_OK &&
                           (ev = sw_order_event(m->order, k, i)) != NULL;
             i++)
            rc = sw_py_manager_add_locked(c, ev, k,
                                          k ? order_has(m->own, ev)
                                      : !order_has(m->foreign, ev));
    }
    pthread_mutex_unlock(&m->mu);
    Py_END_ALLOW_THREADS
    if (rc != SW_OK) {
        Py_DECREF(c);
        return sw_py_raise(st, rc);
    }
    return (PyObject *)c;
}

/* The pending events of one kind, as new Event objects. */
static PyObject *manager_events(ManagerObject *m, int host_task)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(m));
    if (st == NULL)
        return NULL;
    sw_event **evs = NULL;
    unsigned char *foreign = NULL; /* of another queue (or unknown) */
    size_t n = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&m->mu);
    size_t counts[2] = {0, 0};
    rc = sw_order_counts(m->order, &counts[0], &counts[1]);
    n = rc == SW_OK ? counts[host_task] : 0;
    if (n > 0 && ((evs = malloc(n * sizeof *evs)) == NULL ||
                  (foreign = calloc(n, 1)) == NULL)) {
        rc = SW_PY_NOMEM;
        n = 0;
    }
    for (size_t i = 0; i < n; i++) {
        evs[i] = sw_order_event(m->order, host_task, i);
        (void)sw_event_retain(evs[i]);
        foreign[i] = (unsigned char)(host_task ? !order_has(m->own, evs[i])
                                               : order_has(m->foreign,
                                                           evs[i]));
    }
    pthread_mutex_unlock(&m->mu);
    Py_END_ALLOW_THREADS
    PyObject *list = rc == SW_OK ? PyList_New((Py_ssize_t)n) : NULL;
    size_t i = 0;
    for (; list != NULL && i < n; i++) {
        PyObject *e = sw_py_event_wrap(st, evs[i], foreign[i] ? NULL : m->q,
                                       host_task);
        if (e == NULL) {
            Py_CLEAR(list);
            i++;
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, e);
    }
    for (; i < n; i++) /* not handed to an Event */
        NOGIL((void)sw_event_release(evs[i]));
    free(evs);
    free(foreign);
    if (rc != SW_OK)
        return sw_py_raise_rc(st, rc);
    return list;
}

static PyObject *Manager_get_submitted_events(ManagerObject *m, void *c)
{
    return manager_events(m, 0);
}

static PyObject *Manager_get_host_task_events(ManagerObject *m, void *c)
{
    return manager_events(m, 1);
}

static PyObject *manager_count(ManagerObject *m, int host_task)
{
    size_t counts[2] = {0, 0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&m->mu);
    rc = sw_order_counts(m->order, &counts[0], &counts[1]);
    pthread_mutex_unlock(&m->mu);
    Py_END_ALLOW_THREADS
    if (rc != SW_OK) {
        sw_py_state *st = sw_py_type_state(Py_TYPE(m));
        return st ? sw_py_raise(st, rc) : NULL;
    }
    return PyLong_FromSize_t(counts[host_task]);
}

static PyObject *Manager_get_num_submitted_events(ManagerObject *m, void *c)
{
    return manager_count(m, 0);
}

static PyObject *Manager_get_num_host_task_events(ManagerObject *m, void *c)
{
    return manager_count(m, 1);
}

static PyObject *Manager_repr(ManagerObject *m)
{
    size_t counts[2] = {0, 0};
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&m->mu);
    (void)sw_order_counts(m->order, &counts[0], &counts[1]);
    pthread_mutex_unlock(&m->mu);
    Py_END_ALLOW_THREADS
    return PyUnicode_FromFormat(
        "<spillway.SequentialOrderManager of queue %p on %U: %zu submitted, "
        "%zu host-task event(s) pending>",
        (void *)m->q, m->device->name, counts[0], counts[1]);
}

static PyMethodDef Manager_methods[] = {
    {"add_event_pair", (PyCFunction)(void (*)(void))Manager_add_event_pair,
     METH_VARARGS,
     "add_event_pair(host_task_events, computation_events)\n--\n\n"
     "Record host-task events and computation (submitted) events: each an "
     "Event or a sequence of Events.  New work on the queue is ordered "
     "after the computation events; wait() waits for both."},
    {"add_event", (PyCFunction)(void (*)(void))Manager_add_event, METH_O,
     "add_event(ev)\n--\n\nRecord a computation (submitted) event: new work "
     "on the queue is ordered after it (an event of another queue is waited "
     "for on the host, without the GIL, before the work is submitted)."},
    {"wait", (PyCFunction)(void (*)(void))Manager_wait, METH_NOARGS,
     "wait()\n--\n\nWait for every recorded event (releasing the GIL), then "
     "forget them."},
    {"__copy__", (PyCFunction)(void (*)(void))Manager_copy, METH_NOARGS,
     "__copy__()\n--\n\nA new manager of the same queue holding the same "
     "events (in no map)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Manager_getset[] = {
    {"submitted_events", (getter)Manager_get_submitted_events, NULL,
     "The computation events not yet complete, a list of Events.", NULL},
    {"host_task_events", (getter)Manager_get_host_task_events, NULL,
     "The host-task events not yet complete, a list of Events.", NULL},
    {"num_submitted_events", (getter)Manager_get_num_submitted_events, NULL,
     "How many computation events are not yet complete (completed ones are "
     "pruned; never blocks).", NULL},
    {"num_host_task_events", (getter)Manager_get_num_host_task_events, NULL,
     "How many host-task events are not yet complete.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef Manager_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(ManagerObject, weakreflist),
     READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Manager_slots[] = {
    {Py_tp_doc, "The record of one queue's submitted work and host tasks "
                "(spillway.order_manager[queue]): operations with queue= "
                "are ordered after its computation events and record "
                "theirs in it."},
    {Py_tp_dealloc, Manager_dealloc},
    {Py_tp_traverse, Manager_traverse},
    {Py_tp_repr, Manager_repr},
    {Py_tp_methods, Manager_methods},
    {Py_tp_getset, Manager_getset},
    {Py_tp_members, Manager_members},
    {0, NULL},
};

PyType_Spec sw_py_manager_spec = {
    .name = "spillway.SequentialOrderManager",
    .basicsize = sizeof(ManagerObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Manager_slots,
};

int sw_py_order_setup(PyObject *m, sw_py_state *st)
{
    st->manager_type = sw_py_add_type(m, &sw_py_manager_spec);
    return st->manager_type != NULL ? 0 : -1;
}
