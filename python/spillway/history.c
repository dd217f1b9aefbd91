/*
 * history.c -- the memory history from Python: the library's ring of
 * memory events (sw_trace_*), and the Python tracebacks of allocations
 * recorded beside it (history.py builds the user-facing API on these).
 *
 * Tracebacks.  With stacks on, a trace callback on the device sees every
 * allocation and free as it happens, on the thread that made it.  The
 * callback runs with the device lock held, and takes the GIL to read that
 * thread's Python frames: the lock order is device lock -> GIL, which the
 * contract allows (module.h): no thread holding the GIL ever waits for a
 * device lock, because this module releases the GIL around every library
 * call.  A thread that never ran Python (a queue worker, a C thread) has no
 * frames, and its allocations have no traceback.  The tracebacks live in a
 * dict owned by history.py, id -> ((filename, line, function), ...),
 * bounded to `limit` entries (the oldest go first).
 */
#include "array.h"

#include <frameobject.h>

/* What the callback needs; owned by the Device's entry in st->history. */
typedef struct {
    PyObject *stacks; /* dict, strong (released with the GIL held) */
    int max_frames;
    Py_ssize_t limit;
} hist_ctx;

static PyObject *frames_of_this_thread(int max_frames)
{
    PyThreadState *ts = PyThreadState_Get();
    PyFrameObject *f = PyThreadState_GetFrame(ts); /* new reference */
    PyObject *list = PyList_New(0);
    if (list == NULL) {
        Py_XDECREF(f);
        return NULL;
    }
    for (int n = 0; f != NULL && n < max_frames; n++) {
        PyCodeObject *code = PyFrame_GetCode(f);
        PyObject *item = Py_BuildValue("(OiO)", code->co_filename,
                                       PyFrame_GetLineNumber(f),
                                       code->co_name);
        Py_DECREF(code);
        if (item == NULL || PyList_Append(list, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(f);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(item);
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    Py_XDECREF(f);
    PyObject *t = PyList_AsTuple(list);
    Py_DECREF(list);
    return t;
}

static void on_event(const sw_trace_event *ev, void *user)
{
    if (ev->kind != SW_TRACE_ALLOC || ev->buffer == 0 || sw_py_finalizing())
        return;
    hist_ctx *h = user;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *key = PyLong_FromUnsignedLongLong(ev->buffer);
    PyObject *frames = key ? frames_of_this_thread(h->max_frames) : NULL;
    /* Insert-then-evict is one step for other threads (and PyDict_Next
     * needs the dict held without the GIL). */
    Py_BEGIN_CRITICAL_SECTION(h->stacks);
    if (frames != NULL && PyTuple_GET_SIZE(frames) > 0 &&
        PyDict_SetItem(h->stacks, key, frames) == 0 &&
        PyDict_GET_SIZE(h->stacks) > h->limit) {
        /* The oldest entry: dicts keep insertion order. */
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        if (PyDict_Next(h->stacks, &pos, &k, &v)) {
            Py_INCREF(k);
            (void)PyDict_DelItem(h->stacks, k);
            Py_DECREF(k);
        }
    }
    Py_END_CRITICAL_SECTION();
    Py_XDECREF(frames);
    Py_XDECREF(key);
    PyErr_Clear(); /* a traceback is never worth an allocation's failure */
    PyGILState_Release(g);
}

static void ctx_free(PyObject *capsule)
{
    hist_ctx *h = PyCapsule_GetPointer(capsule, "spillway.history");
    if (h != NULL) {
        Py_XDECREF(h->stacks);
        PyMem_Free(h);
    }
}

/* ------------------------------------------------------------------------
 * Module functions (private: history.py is the API)
 * ---------------------------------------------------------------------- */

static DeviceObject *open_device(sw_py_state *st, PyObject *obj)
{
    DeviceObject *d = sw_py_resolve_device(st, obj);
    if (d != NULL && sw_py_device_check_open(d) < 0)
        Py_CLEAR(d);
    return d;
}

/* _trace_start(device, capacity, stacks_dict_or_None, max_frames, limit) */
static PyObject *mod_trace_start(PyObject *m, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames)
{
    sw_py_state *st = sw_py_module_state(m);
    static const char *const names[] = {"device", "capacity", "stacks",
                                        "max_frames", "limit"};
    PyObject *v[5];
    if (sw_py_parse_args("_trace_start", args, nargs, kwnames, names, 5, 5,
                         5, v) < 0)
        return NULL;
    Py_ssize_t cap = PyLong_AsSsize_t(v[1]);
    int max_frames = PyLong_AsLong(v[3]);
    Py_ssize_t limit = PyLong_AsSsize_t(v[4]);
    if (PyErr_Occurred())
        return NULL;
    if (cap < 0 || max_frames < 1 || limit < 1)
        return PyErr_Format(PyExc_ValueError, "capacity, max_frames and "
                            "limit must be positive");
    if (!sw_py_absent(v[2]) && !PyDict_Check(v[2]))
        return PyErr_Format(PyExc_TypeError, "stacks must be a dict");
    DeviceObject *d = open_device(st, v[0]);
    if (d == NULL)
        return NULL;
    hist_ctx *h = NULL;
    PyObject *capsule = NULL;
    if (!sw_py_absent(v[2])) {
        h = PyMem_Calloc(1, sizeof *h);
        if (h == NULL) {
            Py_DECREF(d);
            return PyErr_NoMemory();
        }
        h->stacks = Py_NewRef(v[2]);
        h->max_frames = max_frames;
        h->limit = limit;
        capsule = PyCapsule_New(h, "spillway.history", ctx_free);
        if (capsule == NULL) {
            Py_DECREF(h->stacks);
            PyMem_Free(h);
            Py_DECREF(d);
            return NULL;
        }
    }
    sw_trace_options o = {.capacity = (size_t)cap};
    int rc;
    SW_PY_DEVICE_CALL(d, rc, sw_trace_start(dev_, &o));
    if (rc == SW_OK)
        SW_PY_DEVICE_CALL(d, rc, sw_trace_set_callback(dev_, h ? on_event
                                                               : NULL, h));
    if (rc != SW_OK) {
        Py_XDECREF(capsule);
        Py_DECREF(d);
        return sw_py_raise(st, rc);
    }
    /* The capsule keeps the callback's context alive; history.py holds it
     * until the callback is removed (_trace_stop). */
    Py_DECREF(d);
    if (capsule == NULL)
        Py_RETURN_NONE;
    return capsule;
}

static PyObject *mod_trace_stop(PyObject *m, PyObject *const *args,
                                Py_ssize_t nargs, PyObject *kwnames)
{
    sw_py_state *st = sw_py_module_state(m);
    static const char *const names[] = {"device"};
    PyObject *v[1];
    if (sw_py_parse_args("_trace_stop", args, nargs, kwnames, names, 1, 1, 0,
                         v) < 0)
        return NULL;
    DeviceObject *d = open_device(st, v[0]);
    if (d == NULL)
        return NULL;
    int rc, rc2;
    /* The callback goes first, so that nothing touches its context once
     * history.py drops it. */
    SW_PY_DEVICE_CALL(d, rc2, sw_trace_set_callback(dev_, NULL, NULL));
    SW_PY_DEVICE_CALL(d, rc, sw_trace_stop(dev_));
    Py_DECREF(d);
    if (rc == SW_OK)
        rc = rc2;
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    Py_RETURN_NONE;
}

static PyObject *mod_trace_dump(PyObject *m, PyObject *const *args,
                                Py_ssize_t nargs, PyObject *kwnames)
{
    sw_py_state *st = sw_py_module_state(m);
    static const char *const names[] = {"device", "path", "format"};
    PyObject *v[3];
    if (sw_py_parse_args("_trace_dump", args, nargs, kwnames, names, 3, 3, 3,
                         v) < 0)
        return NULL;
    PyObject *path = NULL;
    if (!PyUnicode_FSConverter(v[1], &path))
        return NULL;
    const char *fmt =
        PyUnicode_Check(v[2]) ? sw_py_utf8(v[2], "a dump format") : NULL;
    if (fmt == NULL) {
        Py_DECREF(path);
        return PyErr_Occurred() ? NULL
                                : PyErr_Format(PyExc_TypeError,
                                               "format must be a str");
    }
    DeviceObject *d = open_device(st, v[0]);
    if (d == NULL) {
        Py_DECREF(path);
        return NULL;
    }
    const char *p = PyBytes_AS_STRING(path);
    int rc;
    SW_PY_DEVICE_CALL(d, rc, sw_trace_dump(dev_, p, fmt));
    Py_DECREF(path);
    Py_DECREF(d);
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    Py_RETURN_NONE;
}

/* _trace_events(device) -> (events, dropped): each event a tuple (seq,
 * time_ns, kind, queue, buffer, size, aux, in_use, cached, spilled,
 * budget, tag, host_copies, spilled_disk, dev_begin_ns, dev_end_ns). */
static PyObject *mod_trace_events(PyObject *m, PyObject *const *args,
                                  Py_ssize_t nargs, PyObject *kwnames)
{
    sw_py_state *st = sw_py_module_state(m);
    static const char *const names[] = {"device"};
    PyObject *v[1];
    if (sw_py_parse_args("_trace_events", args, nargs, kwnames, names, 1, 1,
                         0, v) < 0)
        return NULL;
    DeviceObject *d = open_device(st, v[0]);
    if (d == NULL)
        return NULL;
    size_t n = 0;
    uint64_t dropped = 0;
    sw_trace_event *ev = NULL;
    int rc;
    SW_PY_DEVICE_CALL(d, rc, sw_trace_read(dev_, NULL, 0, &n, NULL));
    if (rc == SW_OK && n > 0) {
        ev = PyMem_Malloc(n * sizeof *ev);
        if (ev == NULL) {
            Py_DECREF(d);
            return PyErr_NoMemory();
        }
        size_t cap = n;
        SW_PY_DEVICE_CALL(d, rc, sw_trace_read(dev_, ev, cap, &n, &dropped));
        if (n > cap)
            n = cap;
    }
    Py_DECREF(d);
    if (rc != SW_OK) {
        PyMem_Free(ev);
        return sw_py_raise(st, rc);
    }
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list != NULL && i < n; i++) {
        const sw_trace_event *e = &ev[i];
        PyObject *t = Py_BuildValue(
            "(KKsIKKKKKKKsKKKK)", (unsigned long long)e->seq,
            (unsigned long long)e->time_ns, sw_trace_kind_name(e->kind),
            e->queue, (unsigned long long)e->buffer,
            (unsigned long long)e->size, (unsigned long long)e->aux,
            (unsigned long long)e->in_use, (unsigned long long)e->cached,
            (unsigned long long)e->spilled, (unsigned long long)e->budget,
            e->tag, (unsigned long long)e->host_copies,
            (unsigned long long)e->spilled_disk,
            (unsigned long long)e->dev_begin_ns,
            (unsigned long long)e->dev_end_ns);
        if (t == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    PyMem_Free(ev);
    if (list == NULL)
        return NULL;
    return Py_BuildValue("(NK)", list, (unsigned long long)dropped);
}

static PyObject *mod_trace_oom_report(PyObject *m, PyObject *const *args,
                                      Py_ssize_t nargs, PyObject *kwnames)
{
    sw_py_state *st = sw_py_module_state(m);
    static const char *const names[] = {"device", "aux"};
    PyObject *v[2];
    if (sw_py_parse_args("_trace_oom_report", args, nargs, kwnames, names, 2,
                         2, 2, v) < 0)
        return NULL;
    unsigned long long aux = PyLong_AsUnsignedLongLong(v[1]);
    if (PyErr_Occurred())
        return NULL;
    DeviceObject *d = open_device(st, v[0]);
    if (d == NULL)
        return NULL;
    char buf[8192];
    int rc;
    SW_PY_DEVICE_CALL(d, rc, sw_trace_oom_report(dev_, aux, buf, sizeof buf));
    Py_DECREF(d);
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    return PyUnicode_DecodeUTF8(buf, (Py_ssize_t)strlen(buf), "replace");
}

/* _buffer_id(array) -> the id of its base buffer in events and
 * snapshots. */
static PyObject *mod_buffer_id(PyObject *m, PyObject *arg)
{
    sw_py_state *st = sw_py_module_state(m);
    if (!PyObject_TypeCheck(arg, st->array_type))
        return PyErr_Format(PyExc_TypeError, "expected a spillway Array, "
                            "not %.80s", Py_TYPE(arg)->tp_name);
    ArrayObject *a = (ArrayObject *)arg;
    if (sw_py_array_check_device(a) < 0)
        return NULL;
    uint64_t id = 0;
    int rc;
    NOGIL(rc = sw_buffer_id(a->buf, &id));
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    return PyLong_FromUnsignedLongLong(id);
}

static PyObject *mod_set_oom_hook(PyObject *m, PyObject *hook)
{
    sw_py_state *st = sw_py_module_state(m);
    if (hook != Py_None && !PyCallable_Check(hook))
        return PyErr_Format(PyExc_TypeError, "the hook must be callable");
    SW_PY_LOCK(&st->mu);
    PyObject *old = st->oom_hook;
    st->oom_hook = hook == Py_None ? NULL : Py_NewRef(hook);
    SW_PY_UNLOCK(&st->mu);
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

/* _live_buffers(device) -> [(id, size, alloc_size, tag, spilled, pins,
 * leases, external)], most recent first (sw_memory_snapshot). */
static PyObject *mod_live_buffers(PyObject *m, PyObject *const *args,
                                  Py_ssize_t nargs, PyObject *kwnames)
{
    sw_py_state *st = sw_py_module_state(m);
    static const char *const names[] = {"device"};
    PyObject *v[1];
    if (sw_py_parse_args("_live_buffers", args, nargs, kwnames, names, 1, 1,
                         0, v) < 0)
        return NULL;
    DeviceObject *d = open_device(st, v[0]);
    if (d == NULL)
        return NULL;
    sw_buffer_info *info = NULL;
    size_t n = 0, cap = 0;
    int rc;
    for (;;) { /* buffers may come and go between the calls */
        SW_PY_DEVICE_CALL(d, rc, sw_memory_snapshot(dev_, info, cap, &n));
        if (rc != SW_OK || n <= cap)
            break;
        PyMem_Free(info);
        cap = n + 16;
        info = PyMem_Malloc(cap * sizeof *info);
        if (info == NULL) {
            Py_DECREF(d);
            return PyErr_NoMemory();
        }
    }
    Py_DECREF(d);
    if (rc != SW_OK) {
        PyMem_Free(info);
        return sw_py_raise(st, rc);
    }
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list != NULL && i < n; i++) {
        const sw_buffer_info *b = &info[i];
        PyObject *t = Py_BuildValue(
            "(KKKsNIIN)", (unsigned long long)b->id,
            (unsigned long long)b->size, (unsigned long long)b->alloc_size,
            b->tag, PyBool_FromLong(b->state == SW_SPILLED), b->pins,
            b->leases, PyBool_FromLong(b->external));
        if (t == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    PyMem_Free(info);
    return list;
}

static PyMethodDef history_methods[] = {
    {"_set_oom_hook", (PyCFunction)mod_set_oom_hook, METH_O,
     "_set_oom_hook(callable_or_None)\n--\n\nhook(message) -> message, "
     "for DeviceMemoryError."},
    FASTKW("_live_buffers", mod_live_buffers,
           "_live_buffers(device=None)\n--\n\nThe live buffers, most "
           "recent first."),
    FASTKW("_trace_start", mod_trace_start,
           "_trace_start(device, capacity, stacks, max_frames, limit)\n--\n"
           "\nStart the device's memory history (see history.py)."),
    FASTKW("_trace_stop", mod_trace_stop,
           "_trace_stop(device=None)\n--\n\nStop recording."),
    FASTKW("_trace_dump", mod_trace_dump,
           "_trace_dump(device, path, format)\n--\n\nsw_trace_dump."),
    FASTKW("_trace_events", mod_trace_events,
           "_trace_events(device=None)\n--\n\n(events, dropped)."),
    FASTKW("_trace_oom_report", mod_trace_oom_report,
           "_trace_oom_report(device, aux)\n--\n\nAn OOM event's report."),
    {"_buffer_id", (PyCFunction)mod_buffer_id, METH_O,
     "_buffer_id(array)\n--\n\nThe id of the array's base buffer."},
    {NULL, NULL, 0, NULL},
};

int sw_py_history_setup(PyObject *m, sw_py_state *st)
{
    (void)st;
    return PyModule_AddFunctions(m, history_methods);
}
