/*
 * queue.c -- Queue, an in-order stream of work on a device, and Event (the
 * overview of queues, host tasks and order managers: queue.h).
 */
#include "queue.h"

#include <stdio.h>
#include <structmember.h>

/* Objects hash by a pointer, as CPython's _Py_HashPointer does. */
static Py_hash_t hash_pointer(const void *p)
{
    size_t y = (size_t)p;
    y = (y >> 4) | (y << (8 * sizeof(void *) - 4));
    Py_hash_t h = (Py_hash_t)y;
    return h == -1 ? -2 : h;
}

/* ------------------------------------------------------------------------
 * Event
 * ---------------------------------------------------------------------- */

PyObject *sw_py_event_wrap(sw_py_state *st, sw_event *ev, sw_queue *origin,
                           int host_task)
{
    EventObject *e = sw_py_state_alive(st)
                         ? PyObject_New(EventObject, st->event_type)
                         : NULL;
    if (e == NULL) {
        NOGIL((void)sw_event_release(ev));
        return NULL;
    }
    e->ev = ev;
    e->origin = origin;
    e->host_task = host_task;
    st->live_events++;
    return (PyObject *)e;
}

static void Event_dealloc(EventObject *e)
{
    PyTypeObject *tp = Py_TYPE(e);
    sw_event *ev = e->ev;
    e->ev = NULL;
    if (ev != NULL)
        NOGIL((void)sw_event_release(ev));
    sw_py_state *st = sw_py_type_state_nothrow(tp);
    if (st != NULL)
        st->live_events--;
    tp->tp_free((PyObject *)e);
    Py_DECREF(tp);
}

static PyObject *Event_query(EventObject *e, PyObject *unused)
{
    int done = 0, rc;
    NOGIL(rc = sw_event_query(e->ev, &done));
    if (rc != SW_OK) {
        sw_py_state *st = sw_py_type_state(Py_TYPE(e));
        return st ? sw_py_raise(st, rc) : NULL;
    }
    return PyBool_FromLong(done);
}

static PyObject *Event_wait(EventObject *e, PyObject *unused)
{
    int rc;
    NOGIL(rc = sw_event_wait(e->ev));
    if (rc != SW_OK) {
        sw_py_state *st = sw_py_type_state(Py_TYPE(e));
        return st ? sw_py_raise(st, rc) : NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Event_repr(EventObject *e)
{
    int done = 0, rc;
    NOGIL(rc = sw_event_query(e->ev, &done));
    return PyUnicode_FromFormat("<spillway.Event%s, %s>",
                                e->host_task ? " of a host task" : "",
                                rc != SW_OK ? "failed"
                                : done      ? "complete"
                                            : "pending");
}

static PyObject *Event_get_is_host_task(EventObject *e, void *c)
{
    return PyBool_FromLong(e->host_task);
}

static PyMethodDef Event_methods[] = {
    {"query", (PyCFunction)(void (*)(void))Event_query, METH_NOARGS,
     "query()\n--\n\nTrue once the event has completed; never blocks.  "
     "Raises DeviceError if the work before it failed."},
    {"wait", (PyCFunction)(void (*)(void))Event_wait, METH_NOARGS,
     "wait()\n--\n\nBlock until the event has completed (the GIL is "
     "released meanwhile).  Raises DeviceError if the work before it "
     "failed."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Event_getset[] = {
    {"is_host_task", (getter)Event_get_is_host_task, NULL,
     "True for the event of a host task (it completes when the task's "
     "function has returned).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Event_slots[] = {
    {Py_tp_doc, "An event on a queue (Queue.record_event(), "
                "Queue.host_task()): it completes when the work submitted "
                "before it has.  query() never blocks; wait() releases the "
                "GIL."},
    {Py_tp_dealloc, Event_dealloc},
    {Py_tp_repr, Event_repr},
    {Py_tp_methods, Event_methods},
    {Py_tp_getset, Event_getset},
    {0, NULL},
};

PyType_Spec sw_py_event_spec = {
    .name = "spillway.Event",
    .basicsize = sizeof(EventObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Event_slots,
};

/* ------------------------------------------------------------------------
 * Queue
 * ---------------------------------------------------------------------- */

/* A Queue on d taking the reference q (released on failure). */
static PyObject *queue_wrap(sw_py_state *st, DeviceObject *d, sw_queue *q)
{
    QueueObject *o = sw_py_state_alive(st)
                         ? PyObject_GC_New(QueueObject, st->queue_type)
                         : NULL;
    if (o == NULL) {
        NOGIL((void)sw_queue_release(q));
        return NULL;
    }
    o->q = q;
    o->device = (DeviceObject *)Py_NewRef(d);
    o->weakreflist = NULL;
    sw_py_device_use(d);
    st->live_queues++;
    PyObject_GC_Track(o);
    return (PyObject *)o;
}

int sw_py_queue_check_open(QueueObject *q)
{
    if (q->device->closed) {
        PyErr_Format(PyExc_ValueError,
                     "this queue's device %U is closed: the queue can no "
                     "longer be used",
                     q->device->name);
        return -1;
    }
    return 0;
}

static PyObject *Queue_new(PyTypeObject *type, PyObject *args,
                           PyObject *kwds)
{
    static char *kwlist[] = {"device", NULL};
    PyObject *arg = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:Queue", kwlist, &arg))
        return NULL;
    sw_py_state *st = sw_py_type_state(type);
    if (st == NULL || !sw_py_state_alive(st))
        return NULL;
    sw_py_drain_releases();
    int rc;
    if (Py_IS_TYPE(arg, st->queue_type)) {
        /* Another wrapper of the same queue. */
        QueueObject *other = (QueueObject *)arg;
        if (sw_py_queue_check_open(other) < 0)
            return NULL;
        sw_queue *q = other->q;
        NOGIL(rc = sw_queue_retain(q));
        if (rc != SW_OK)
            return sw_py_raise(st, rc);
        return queue_wrap(st, other->device, q);
    }
    if (!sw_py_absent(arg) && !PyUnicode_Check(arg) &&
        !Py_IS_TYPE(arg, st->device_type)) {
        PyErr_Format(PyExc_TypeError,
                     "Queue() takes a spillway.Device, a device spec such as "
                     "'sim:0', another Queue or None, not %.100s",
                     Py_TYPE(arg)->tp_name);
        return NULL;
    }
    DeviceObject *d = sw_py_resolve_device(st, arg);
    if (d == NULL)
        return NULL;
    sw_queue *q = NULL;
    sw_device *dev = sw_py_device_try_use(d);
    if (dev == NULL) {
        Py_DECREF(d);
        return sw_py_raise(st, SW_PY_CLOSED);
    }
    NOGIL(rc = sw_queue_create(dev, &q));
    if (rc == SW_ERR_OOM) {
        /* Device memory is short, and this thread's managers of dead
         * queues may be what holds it (a queue lives while its manager
         * does, and each reserves memory).  Wait for their work, drop
         * them, try once more. */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", sw_last_error());
        int relieved = sw_py_relieve_dead_managers(st);
        if (relieved < 0) {
            sw_py_device_unuse(d);
            Py_DECREF(d);
            return NULL;
        }
        if (relieved > 0)
            NOGIL(rc = sw_queue_create(dev, &q));
        if (rc != SW_OK) {
            sw_py_device_unuse(d);
            Py_DECREF(d);
            return sw_py_raise_detail(st, rc,
                                      relieved ? sw_last_error() : msg);
        }
    }
    sw_py_device_unuse(d);
    PyObject *r = rc == SW_OK ? queue_wrap(st, d, q) : sw_py_raise(st, rc);
    Py_DECREF(d);
    return r;
}

static int Queue_traverse(QueueObject *q, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(q));
    Py_VISIT(q->device);
    return 0;
}

/* Weak references first: their callbacks (an order manager map's among
 * them) see the queue gone before its handle is released. */
static void Queue_dealloc(QueueObject *q)
{
    PyTypeObject *tp = Py_TYPE(q);
    PyObject_GC_UnTrack(q);
    if (q->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)q);
    sw_queue *h = q->q;
    q->q = NULL;
    if (h != NULL)
        NOGIL((void)sw_queue_release(h)); /* never waits */
    DeviceObject *d = q->device;
    q->device = NULL;
    if (d != NULL) {
        sw_py_device_unuse(d);
        Py_DECREF(d);
    }
    sw_py_state *st = sw_py_type_state_nothrow(tp);
    if (st != NULL)
        st->live_queues--;
    tp->tp_free((PyObject *)q);
    Py_DECREF(tp);
}

static PyObject *Queue_repr(QueueObject *q)
{
    return PyUnicode_FromFormat("<spillway.Queue %p on %U%s>", (void *)q->q,
                                q->device->name,
                                q->device->closed ? " (closed)" : "");
}

static Py_hash_t Queue_hash(QueueObject *q) { return hash_pointer(q->q); }

/* Equal: the same underlying sw_queue. */
static PyObject *Queue_richcompare(QueueObject *q, PyObject *other, int op)
{
    if ((op != Py_EQ && op != Py_NE) || !Py_IS_TYPE(other, Py_TYPE(q)))
        Py_RETURN_NOTIMPLEMENTED;
    int eq = q->q == ((QueueObject *)other)->q;
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

static PyObject *Queue_get_device(QueueObject *q, void *c)
{
    return Py_NewRef(q->device);
}

static PyObject *Queue_record_event(QueueObject *q, PyObject *unused)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(q));
    if (st == NULL || sw_py_queue_check_open(q) < 0)
        return NULL;
    sw_queue *h = q->q;
    sw_event *ev = NULL;
    int rc;
    NOGIL(rc = sw_queue_record_event(h, &ev));
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    return sw_py_event_wrap(st, ev, h, 0);
}

static PyObject *Queue_host_task(QueueObject *q, PyObject *fn)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(q));
    if (st == NULL || sw_py_queue_check_open(q) < 0)
        return NULL;
    if (!PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError,
                     "host_task() takes a callable, not %.100s",
                     Py_TYPE(fn)->tp_name);
        return NULL;
    }
    sw_queue *h = q->q;
    sw_py_pytask *t = sw_py_pytask_new(fn, NULL, 0, h);
    if (t == NULL)
        return NULL;
    sw_event *ev = NULL;
    int rc;
    NOGIL(rc = sw_py_pytask_submit(h, t, &ev));
    if (rc != SW_OK) {
        sw_py_pytask_free(t);
        return sw_py_raise(st, rc);
    }
    return sw_py_event_wrap(st, ev, h, 1);
}

static void noop_task(void *arg) { (void)arg; }

/* Wait for the work and the host tasks submitted so far: a task that does
 * nothing, queued last, completes after both (the runner runs a queue's
 * tasks in order).  From inside one of this queue's own host tasks only
 * the device work is waited for: the tasks would wait for themselves. */
static PyObject *Queue_synchronize(QueueObject *q, PyObject *unused)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(q));
    if (st == NULL || sw_py_queue_check_open(q) < 0)
        return NULL;
    sw_queue *h = q->q;
    int rc;
    if (sw_py_thread.task_queue == h) {
        NOGIL(rc = sw_queue_synchronize(h));
    } else {
        Py_BEGIN_ALLOW_THREADS
        sw_event *ev = NULL;
        rc = sw_queue_host_task(h, noop_task, NULL, &ev);
        if (rc == SW_OK) {
            rc = sw_event_wait(ev);
            (void)sw_event_release(ev);
        }
        Py_END_ALLOW_THREADS
    }
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    Py_RETURN_NONE;
}

/* Queue.native: the stream as the backend's runtime knows it. */
static PyObject *Queue_get_native(QueueObject *q, void *c)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(q));
    if (st == NULL || sw_py_queue_check_open(q) < 0)
        return NULL;
    uintptr_t h = 0;
    int rc;
    NOGIL(rc = sw_queue_native(q->q, &h));
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    return PyLong_FromUnsignedLongLong((unsigned long long)h);
}

/* Queue.from_native(handle, device=None): a queue over the caller's own
 * stream (an int: CUstream, cl_command_queue, ...). */
static PyObject *Queue_from_native(PyTypeObject *type, PyObject *const *args,
                                   Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"handle", "device"};
    PyObject *v[2];
    if (sw_py_parse_args("Queue.from_native", args, nargs, kwnames, names, 2,
                         2, 1, v) < 0)
        return NULL;
    sw_py_state *st = sw_py_type_state(type);
    if (st == NULL || !sw_py_state_alive(st))
        return NULL;
    /* A bool is an int to Python, never a handle: True is 1, an address
     * a driver would read through. */
    if (!PyLong_Check(v[0]) || PyBool_Check(v[0])) {
        PyErr_Format(PyExc_TypeError,
                     "Queue.from_native() takes the handle as an int (a "
                     "CUstream, cl_command_queue, ...: pyopencl's "
                     "queue.int_ptr, cupy's stream.ptr), not %.100s",
                     Py_TYPE(v[0])->tp_name);
        return NULL;
    }
    unsigned long long h = PyLong_AsUnsignedLongLong(v[0]);
    if (h == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError,
                        "Queue.from_native(): the handle is not an address "
                        "(negative, or too large)");
        return NULL;
    }
    DeviceObject *d = sw_py_resolve_device(st, v[1] ? v[1] : Py_None);
    if (d == NULL)
        return NULL;
    sw_queue *q = NULL;
    int rc;
    SW_PY_DEVICE_CALL(d, rc, sw_queue_wrap_native(dev_, (uintptr_t)h, &q));
    PyObject *r = rc == SW_OK ? queue_wrap(st, d, q) : sw_py_raise(st, rc);
    Py_DECREF(d);
    return r;
}

static PyMethodDef Queue_methods[] = {
    {"from_native", (PyCFunction)(void (*)(void))Queue_from_native,
     METH_FASTCALL | METH_KEYWORDS | METH_CLASS,
     "from_native(handle, device=None)\n--\n\nA Queue over a stream or "
     "command queue you own (an int: a CUstream on cuda, a "
     "cl_command_queue on opencl, a hipStream_t on hip, an immediate "
     "command list on ze): spillway's work and pins on it are ordered as "
     "on any queue, and spillway never destroys it -- keep it alive until "
     "this Queue and its work are gone.  TypeError for a bool; ValueError "
     "for 0 or a negative int, anything spillway made (a Queue's .native: "
     "use that Queue; a Device.native_context; on any device), a stream "
     "of another device or context, and one the runtime knows is "
     "destroyed.  OpenCL cannot tell a released queue, or another object "
     "of the platform, from a live queue without reading through it: "
     "never pass one (docs/python.md)."},
    {"record_event", (PyCFunction)(void (*)(void))Queue_record_event,
     METH_NOARGS,
     "record_event()\n--\n\nAn Event that completes when all work submitted "
     "to this queue so far has."},
    {"host_task", (PyCFunction)(void (*)(void))Queue_host_task, METH_O,
     "host_task(fn)\n--\n\nRun fn() off the caller's thread once the work "
     "submitted to this queue so far has completed; returns its Event "
     "(complete when fn has returned).  fn runs with the GIL (taken on the "
     "queue's host-task thread); an exception it raises is reported through "
     "sys.unraisablehook."},
    {"synchronize", (PyCFunction)(void (*)(void))Queue_synchronize,
     METH_NOARGS,
     "synchronize()\n--\n\nWait for the work and the host tasks submitted "
     "to this queue so far (the GIL is released meanwhile)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Queue_getset[] = {
    {"device", (getter)Queue_get_device, NULL, "The Device it runs on.",
     NULL},
    {"native", (getter)Queue_get_native, NULL,
     "The queue's stream as the backend's runtime knows it, an int: a "
     "CUstream (cuda), a cl_command_queue (opencl: "
     "pyopencl.CommandQueue.from_int_ptr), a hipStream_t (hip), an "
     "immediate command list (ze), the simulated or host device's own "
     "queue.  Valid while the Queue lives.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef Queue_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(QueueObject, weakreflist),
     READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Queue_slots[] = {
    {Py_tp_doc, "Queue(device=None)\n--\n\n"
                "An in-order stream of work on a device (a new one), or "
                "Queue(q): another wrapper of the same queue as q, equal to "
                "it with the same hash.  Operations take queue=; their "
                "events are recorded in spillway.order_manager[queue]."},
    {Py_tp_new, Queue_new},
    {Py_tp_dealloc, Queue_dealloc},
    {Py_tp_traverse, Queue_traverse},
    {Py_tp_repr, Queue_repr},
    {Py_tp_hash, Queue_hash},
    {Py_tp_richcompare, Queue_richcompare},
    {Py_tp_methods, Queue_methods},
    {Py_tp_getset, Queue_getset},
    {Py_tp_members, Queue_members},
    {0, NULL},
};

PyType_Spec sw_py_queue_spec = {
    .name = "spillway.Queue",
    .basicsize = sizeof(QueueObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Queue_slots,
};

int sw_py_queue_setup(PyObject *m, sw_py_state *st)
{
    if ((st->queue_type = sw_py_add_type(m, &sw_py_queue_spec)) == NULL ||
        (st->event_type = sw_py_add_type(m, &sw_py_event_spec)) == NULL)
        return -1;
    return 0;
}
