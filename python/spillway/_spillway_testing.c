/*
 * _spillway_testing.c -- spillway._spillway_testing, the test suite's own
 * extension module (CPython's _testcapi model): built in the build tree
 * for tests/python, never installed.  spillway._testing re-exports its
 * functions under their public helper names (the list: _testing.py).
 *
 * It links no libspillway: a copy of its own would have its own device
 * registry (the extension modules hide the static library's symbols), so a
 * device opened here would not be the production module's.  Everything it
 * does to a device or to the production module's state goes through the
 * functions spillway._spillway lends in the capsule
 * spillway._spillway._testing_api (testing_api.h); spillway.h is included
 * for its types and constants only, and an sw_* call here would leave an
 * undefined symbol that fails the import.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "testing_api.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

PyMODINIT_FUNC PyInit__spillway_testing(void);

typedef struct {
    PyObject *spillway;           /* spillway._spillway (the lender) */
    const sw_py_testing_api *api; /* its capsule's, kept alive by it */
    PyTypeObject *cthread_type;
} testing_state;

static testing_state *get_state(PyObject *m)
{
    return (testing_state *)PyModule_GetState(m);
}

static int finalizing(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* timeout seconds (< 0: none) from now on the monotonic clock. */
static struct timespec deadline(double timeout)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    if (timeout >= 0) {
        double whole = (double)(time_t)timeout;
        until.tv_sec += (time_t)timeout;
        until.tv_nsec += (long)((timeout - whole) * 1e9);
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    return until;
}

/* timeout=: None (-1: no limit) or seconds (negative: 0). */
static int parse_timeout(PyObject *obj, double *timeout)
{
    *timeout = -1;
    if (obj == NULL || obj == Py_None)
        return 0;
    *timeout = PyFloat_AsDouble(obj);
    if (*timeout == -1 && PyErr_Occurred())
        return -1;
    if (*timeout < 0)
        *timeout = 0;
    return 0;
}

/* ------------------------------------------------------------------------
 * start_c_thread_allocating: a plain C thread allocating on a device
 * ---------------------------------------------------------------------- */

#define CT_MAX_HOLD 64

typedef struct {
    const sw_py_testing_api *api;
    sw_device *dev;
    size_t nbytes;
    long count;
    int hold;
    char tag[SW_TAG_MAX + 1];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    int joined;
    long ok, oom, errors;
    char last_error[512];
} cthread_job;

typedef struct {
    PyObject_HEAD
    cthread_job *job;
    PyObject *device; /* a spillway Device, counted in its users */
} CThreadObject;

/* A plain C thread: never touches Python (it has no thread state), so the
 * only way it meets the GIL is through the pressure callback. */
static void *cthread_main(void *arg)
{
    cthread_job *j = arg;
    const sw_py_testing_api *api = j->api;
    sw_buffer *ring[CT_MAX_HOLD] = {0};
    int head = 0;
    for (long i = 0; i < j->count; i++) {
        sw_buffer *b = NULL;
        int rc = api->buffer_alloc(j->dev, j->nbytes, j->tag, &b);
        if (rc == SW_OK) {
            uint64_t val = 0x5eed0000ull ^ (uint64_t)i, back = 0;
            size_t n = j->nbytes < 8 ? j->nbytes : 8;
            rc = n ? api->buffer_write(b, 0, &val, n) : SW_OK;
            if (rc == SW_OK && n)
                rc = api->buffer_read(b, 0, &back, n);
            if (rc != SW_OK || memcmp(&val, &back, n) != 0) {
                j->errors++;
                snprintf(j->last_error, sizeof j->last_error,
                         "read back: %s",
                         rc ? api->last_error() : "mismatch");
            } else {
                j->ok++;
            }
            if (j->hold == 0) {
                (void)api->buffer_free(b);
            } else {
                (void)api->buffer_free(ring[head]);
                ring[head] = b;
                head = (head + 1) % j->hold;
            }
        } else if (rc == SW_ERR_OOM) {
            j->oom++;
        } else {
            j->errors++;
            snprintf(j->last_error, sizeof j->last_error, "%s: %s",
                     api->err_name(rc), api->last_error());
        }
    }
    for (int i = 0; i < CT_MAX_HOLD; i++)
        (void)api->buffer_free(ring[i]);
    pthread_mutex_lock(&j->mu);
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

static void cthread_job_free(cthread_job *j)
{
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

/* str as a C string, ValueError when a NUL would end it early (as
 * sw_py_utf8 in the module). */
static const char *c_string(PyObject *str, const char *what)
{
    Py_ssize_t len;
    const char *s = PyUnicode_AsUTF8AndSize(str, &len);
    if (s != NULL && strlen(s) != (size_t)len) {
        PyErr_Format(PyExc_ValueError, "%s must not contain a NUL character",
                     what);
        return NULL;
    }
    return s;
}

static PyObject *mod_start_c_thread(PyObject *m, PyObject *args,
                                    PyObject *kwds)
{
    static char *kwlist[] = {"device", "nbytes", "count", "hold", "tag",
                             NULL};
    PyObject *dev_obj, *nbytes_obj, *count_obj, *hold_obj = Py_None;
    PyObject *tag_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds,
                                     "OOO|OO:start_c_thread_allocating",
                                     kwlist, &dev_obj, &nbytes_obj,
                                     &count_obj, &hold_obj, &tag_obj))
        return NULL;
    testing_state *st = get_state(m);
    Py_ssize_t nbytes, count, hold = 0;
    const char *tag = "c-thread";
    if ((nbytes = PyNumber_AsSsize_t(nbytes_obj, PyExc_OverflowError)) ==
            -1 &&
        PyErr_Occurred())
        return NULL;
    if ((count = PyNumber_AsSsize_t(count_obj, PyExc_OverflowError)) == -1 &&
        PyErr_Occurred())
        return NULL;
    if (hold_obj != Py_None &&
        (hold = PyNumber_AsSsize_t(hold_obj, PyExc_OverflowError)) == -1 &&
        PyErr_Occurred())
        return NULL;
    if (tag_obj != Py_None) {
        if (!PyUnicode_Check(tag_obj)) {
            PyErr_Format(PyExc_TypeError,
                         "tag must be a str or None, not %.100s",
                         Py_TYPE(tag_obj)->tp_name);
            return NULL;
        }
        if ((tag = c_string(tag_obj, "tag")) == NULL)
            return NULL;
    }
    if (nbytes < 0 || count < 0 || hold < 0 || hold > CT_MAX_HOLD) {
        PyErr_Format(PyExc_ValueError,
                     "nbytes and count must be >= 0 and hold in 0..%d",
                     CT_MAX_HOLD);
        return NULL;
    }
    sw_device *dev = NULL;
    PyObject *d = st->api->resolve_device(st->spillway, dev_obj, &dev);
    if (d == NULL)
        return NULL;
    /* d's use (resolve_device's) is the thread's, until it is joined. */
    cthread_job *j = calloc(1, sizeof *j);
    if (j == NULL) {
        st->api->device_unuse(d);
        Py_DECREF(d);
        return PyErr_NoMemory();
    }
    j->api = st->api;
    j->dev = dev;
    j->nbytes = (size_t)nbytes;
    j->count = (long)count;
    j->hold = (int)hold;
    snprintf(j->tag, sizeof j->tag, "%s", tag);
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    CThreadObject *t = PyObject_GC_New(CThreadObject, st->cthread_type);
    if (t == NULL) {
        cthread_job_free(j);
        st->api->device_unuse(d);
        Py_DECREF(d);
        return NULL;
    }
    int e = pthread_create(&j->thread, NULL, cthread_main, j);
    if (e != 0) {
        cthread_job_free(j);
        st->api->device_unuse(d);
        Py_DECREF(d);
        t->job = NULL;
        t->device = NULL;
        Py_DECREF(t); /* never tracked, owns nothing */
        PyErr_Format(PyExc_RuntimeError, "pthread_create: %s", strerror(e));
        return NULL;
    }
    /* Whole before the collector (another thread's) can see it. */
    t->job = j;
    t->device = d;
    PyObject_GC_Track(t);
    return (PyObject *)t;
}

/* Wait (without the GIL) up to timeout seconds (< 0: forever). */
static int cthread_wait(cthread_job *j, double timeout)
{
    int done;
    Py_BEGIN_ALLOW_THREADS
    struct timespec until = deadline(timeout);
    pthread_mutex_lock(&j->mu);
    while (!j->done) {
        if (timeout < 0)
            pthread_cond_wait(&j->cv, &j->mu);
        else if (pthread_cond_timedwait(&j->cv, &j->mu, &until) == ETIMEDOUT)
            break;
    }
    done = j->done;
    /* One joiner, however many threads wait at once. */
    int join = done && !j->joined;
    if (join)
        j->joined = 1;
    pthread_mutex_unlock(&j->mu);
    if (join)
        pthread_join(j->thread, NULL);
    Py_END_ALLOW_THREADS
    return done;
}

static PyObject *CThread_join(CThreadObject *t, PyObject *args,
                              PyObject *kwds)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *obj = Py_None;
    double timeout;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:join", kwlist, &obj) ||
        parse_timeout(obj, &timeout) < 0)
        return NULL;
    cthread_job *j = t->job;
    if (!cthread_wait(j, timeout)) {
        PyErr_SetString(PyExc_TimeoutError,
                        "the C thread is still allocating");
        return NULL;
    }
    return Py_BuildValue("{s:l,s:l,s:l,s:s}", "ok", j->ok, "oom", j->oom,
                         "errors", j->errors, "last_error", j->last_error);
}

static int CThread_traverse(CThreadObject *t, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(t));
    Py_VISIT(t->device);
    return 0;
}

static void CThread_dealloc(CThreadObject *t)
{
    PyTypeObject *tp = Py_TYPE(t);
    PyObject_GC_UnTrack(t);
    if (t->job != NULL) {
        int done;
        pthread_mutex_lock(&t->job->mu);
        done = t->job->done;
        pthread_mutex_unlock(&t->job->mu);
        if (finalizing() && !done) {
            /* At exit the thread may be stuck for good: a thread that
             * asks for the GIL while the interpreter finalizes never gets
             * it.  Leave it (and its job) be; the process is ending. */
            pthread_detach(t->job->thread);
        } else {
            const sw_py_testing_api *api = t->job->api;
            (void)cthread_wait(t->job, -1);
            cthread_job_free(t->job);
            api->device_unuse(t->device);
        }
        t->job = NULL;
    }
    Py_CLEAR(t->device);
    tp->tp_free((PyObject *)t);
    Py_DECREF(tp);
}

static PyMethodDef CThread_methods[] = {
    {"join", (PyCFunction)(void (*)(void))CThread_join,
     METH_VARARGS | METH_KEYWORDS,
     "join(timeout=None)\n--\n\nWait for the thread; return its counts "
     "{'ok', 'oom', 'errors', 'last_error'}.  TimeoutError if it is still "
     "running after timeout seconds."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot CThread_slots[] = {
    {Py_tp_doc, "A C thread allocating on a device (testing only)."},
    {Py_tp_dealloc, CThread_dealloc},
    {Py_tp_traverse, CThread_traverse},
    {Py_tp_methods, CThread_methods},
    {0, NULL},
};

static PyType_Spec CThread_spec = {
    .name = "spillway._spillway_testing.CThread",
    .basicsize = sizeof(CThreadObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = CThread_slots,
};

/* ------------------------------------------------------------------------
 * Faults, the array tracker, the collector's rate limit, devices, host
 * tasks, object counts
 * ---------------------------------------------------------------------- */

static PyObject *mod_inject_fault(PyObject *m, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"device", "op", "nth", "persistent", NULL};
    PyObject *dev_obj, *op_obj, *nth_obj, *pers_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|O:inject_fault", kwlist,
                                     &dev_obj, &op_obj, &nth_obj, &pers_obj))
        return NULL;
    testing_state *st = get_state(m);
    const char *op = PyUnicode_Check(op_obj) ? c_string(op_obj, "op") : NULL;
    if (op == NULL && PyErr_Occurred())
        return NULL;
    sw_fault_op fop;
    if (op != NULL && strcmp(op, "alloc") == 0) {
        fop = SW_FAULT_ALLOC;
    } else if (op != NULL && strcmp(op, "copy") == 0) {
        fop = SW_FAULT_COPY;
    } else if (op != NULL && strcmp(op, "disk") == 0) {
        fop = SW_FAULT_DISK;
    } else {
        PyErr_SetString(PyExc_ValueError,
                        "op must be 'alloc', 'copy' or 'disk'");
        return NULL;
    }
    unsigned long long nth = PyLong_AsUnsignedLongLong(nth_obj);
    int persistent = pers_obj == Py_None ? 0 : PyObject_IsTrue(pers_obj);
    if ((nth == (unsigned long long)-1 && PyErr_Occurred()) || persistent < 0)
        return NULL;
    sw_device *dev = NULL;
    PyObject *d = st->api->resolve_device(st->spillway, dev_obj, &dev);
    if (d == NULL)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = st->api->inject_fault(dev, fop, nth, persistent);
    Py_END_ALLOW_THREADS
    st->api->device_unuse(d);
    Py_DECREF(d);
    if (rc != SW_OK)
        return st->api->raise_error(st->spillway, rc);
    Py_RETURN_NONE;
}

static PyObject *mod_track_arrays(PyObject *m, PyObject *arg)
{
    testing_state *st = get_state(m);
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    PyObject *list = NULL;
    if (on && (list = PyList_New(0)) == NULL)
        return NULL;
    PyObject *old = st->api->swap_track(st->spillway, list);
    if (old == NULL)
        Py_RETURN_NONE;
    return old;
}

static PyObject *mod_gc_backoff(PyObject *m, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"min_interval", NULL};
    PyObject *obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:gc_backoff", kwlist,
                                     &obj))
        return NULL;
    testing_state *st = get_state(m);
    int64_t ns = -1;
    if (obj != Py_None) {
        double s = PyFloat_AsDouble(obj);
        if (s == -1 && PyErr_Occurred())
            return NULL;
        if (!(s >= 0) || s > 3600) {
            PyErr_SetString(PyExc_ValueError,
                            "min_interval must be 0 to 3600 seconds");
            return NULL;
        }
        ns = (int64_t)(s * 1e9);
    }
    return PyFloat_FromDouble((double)st->api->gc_min_interval(ns) / 1e9);
}

static PyObject *mod_gc_backoff_reset(PyObject *m, PyObject *unused)
{
    get_state(m)->api->gc_backoff_reset();
    Py_RETURN_NONE;
}

static PyObject *mod_gc_stats(PyObject *m, PyObject *unused)
{
    sw_py_gc_stats s;
    get_state(m)->api->gc_stats(&s);
    return Py_BuildValue(
        "{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:d}", "collections",
        (unsigned long long)s.collections, "full",
        (unsigned long long)s.full, "young", (unsigned long long)s.young,
        "last_chance", (unsigned long long)s.last_chance, "fruitful",
        (unsigned long long)s.fruitful, "skipped_backoff",
        (unsigned long long)s.skipped_backoff, "skipped_shared",
        (unsigned long long)s.skipped_shared, "busy_retries",
        (unsigned long long)s.busy_retries, "backoff_left",
        (double)s.backoff_left_ns / 1e9);
}

static PyObject *mod_open_devices(PyObject *m, PyObject *unused)
{
    testing_state *st = get_state(m);
    return st->api->open_devices(st->spillway);
}

static PyObject *mod_wait_host_tasks(PyObject *m, PyObject *args,
                                     PyObject *kwds)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *obj = Py_None;
    double timeout;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:wait_host_tasks",
                                     kwlist, &obj) ||
        parse_timeout(obj, &timeout) < 0)
        return NULL;
    const sw_py_testing_api *api = get_state(m)->api;
    if (api->in_host_task()) {
        PyErr_SetString(PyExc_RuntimeError,
                        "wait_host_tasks() inside a host task would wait "
                        "for itself");
        return NULL;
    }
    int none;
    Py_BEGIN_ALLOW_THREADS
    none = api->wait_host_tasks(timeout);
    Py_END_ALLOW_THREADS
    api->drain_releases();
    if (!none) {
        PyErr_SetString(PyExc_TimeoutError,
                        "Python host tasks are still pending");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *mod_object_counts(PyObject *m, PyObject *unused)
{
    testing_state *st = get_state(m);
    sw_py_object_counts c;
    st->api->object_counts(st->spillway, &c);
    return Py_BuildValue("{s:n,s:n,s:n,s:l}", "queues", c.queues,
                         "managers", c.managers, "events", c.events,
                         "host_tasks", c.host_tasks);
}

/* ------------------------------------------------------------------------
 * The module
 * ---------------------------------------------------------------------- */

#define VARKW(name, fn, doc)                                                  \
    {name, (PyCFunction)(void (*)(void))fn, METH_VARARGS | METH_KEYWORDS, doc}
#define NOARGS(name, fn, doc)                                                 \
    {name, (PyCFunction)(void (*)(void))fn, METH_NOARGS, doc}

static PyMethodDef testing_methods[] = {
    VARKW("start_c_thread_allocating", mod_start_c_thread,
          "start_c_thread_allocating(device, nbytes, count, hold=0, "
          "tag=None)\n--\n\nStart a C thread (which never holds the GIL) "
          "that allocates count buffers of nbytes, keeping the last `hold` "
          "alive."),
    VARKW("inject_fault", mod_inject_fault,
          "inject_fault(device, op, nth, persistent=False)\n--\n\n"
          "Make the nth next backend 'alloc' or 'copy' fail."),
    {"track_arrays", (PyCFunction)(void (*)(void))mod_track_arrays, METH_O,
     "track_arrays(on)\n--\n\nStart (True) or stop keeping weak references "
     "to every new Array; returns the previous list or None."},
    VARKW("gc_backoff", mod_gc_backoff,
          "gc_backoff(min_interval=None)\n--\n\nThe pressure collector's "
          "minimum back-off in seconds (returns the old value)."),
    NOARGS("gc_backoff_reset", mod_gc_backoff_reset,
           "gc_backoff_reset()\n--\n\nEnd a back-off now."),
    NOARGS("gc_stats", mod_gc_stats,
           "gc_stats()\n--\n\nCounters of the pressure collector."),
    NOARGS("open_devices", mod_open_devices,
           "open_devices()\n--\n\nThe Devices spillway._spillway has open."),
    VARKW("wait_host_tasks", mod_wait_host_tasks,
          "wait_host_tasks(timeout=None)\n--\n\nWait until no Python host "
          "task is pending (TimeoutError after timeout seconds)."),
    NOARGS("object_counts", mod_object_counts,
           "object_counts()\n--\n\nLive Queue, SequentialOrderManager and "
           "Event objects of spillway._spillway, and Python host tasks not "
           "yet finished (process-wide)."),
    {NULL, NULL, 0, NULL},
};

static int testing_exec(PyObject *m)
{
    testing_state *st = get_state(m);
    st->spillway = PyImport_ImportModule("spillway._spillway");
    if (st->spillway == NULL)
        return -1;
    PyObject *cap = PyObject_GetAttrString(st->spillway, "_testing_api");
    if (cap == NULL)
        return -1;
    st->api = PyCapsule_GetPointer(cap, SW_PY_TESTING_API_CAPSULE);
    Py_DECREF(cap); /* the lender keeps it (and the struct is static) */
    if (st->api == NULL)
        return -1;
    if (st->api->version < SW_PY_TESTING_API_VERSION ||
        st->api->size < sizeof(sw_py_testing_api)) {
        PyErr_Format(PyExc_ImportError,
                     "spillway._spillway lends testing API version %d (%zu "
                     "bytes); this module needs version %d",
                     st->api->version, st->api->size,
                     SW_PY_TESTING_API_VERSION);
        st->api = NULL;
        return -1;
    }
    st->cthread_type =
        (PyTypeObject *)PyType_FromModuleAndSpec(m, &CThread_spec, NULL);
    if (st->cthread_type == NULL ||
        PyModule_AddType(m, st->cthread_type) < 0)
        return -1;
    return 0;
}

static int testing_traverse(PyObject *m, visitproc visit, void *arg)
{
    testing_state *st = get_state(m);
    if (st == NULL)
        return 0;
    Py_VISIT(st->spillway);
    Py_VISIT(st->cthread_type);
    return 0;
}

static int testing_clear(PyObject *m)
{
    testing_state *st = get_state(m);
    if (st == NULL)
        return 0;
    Py_CLEAR(st->cthread_type);
    Py_CLEAR(st->spillway);
    return 0;
}

static void testing_free(void *m) { (void)testing_clear((PyObject *)m); }

static PyModuleDef_Slot testing_slots[] = {
    {Py_mod_exec, testing_exec},
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
#if PY_VERSION_HEX >= 0x030D0000
    /* Its state is set at import and read after; the C threads it starts
     * never attach; their jobs are guarded by their own mutex. */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef testing_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "spillway._spillway_testing",
    .m_doc = "spillway's test-only helpers (spillway._testing); never "
             "installed.",
    .m_size = sizeof(testing_state),
    .m_methods = testing_methods,
    .m_slots = testing_slots,
    .m_traverse = testing_traverse,
    .m_clear = testing_clear,
    .m_free = testing_free,
};

PyMODINIT_FUNC PyInit__spillway_testing(void)
{
    return PyModuleDef_Init(&testing_def);
}
