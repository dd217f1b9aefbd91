/*
 * testing.c -- the test suite's helpers (spillway._testing): a C thread
 * allocating on a device, fault injection, the array tracker, the
 * collector's rate limit, open devices, host tasks, object counts.
 */
#include "device.h"
#include "queue.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CT_MAX_HOLD 64

typedef struct {
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
    DeviceObject *device;
} CThreadObject;

/* A plain C thread: never touches Python (it has no thread state), so the
 * only way it meets the GIL is through the pressure callback. */
static void *cthread_main(void *arg)
{
    cthread_job *j = arg;
    sw_buffer *ring[CT_MAX_HOLD] = {0};
    int head = 0;
    for (long i = 0; i < j->count; i++) {
        sw_buffer *b = NULL;
        int rc = sw_buffer_alloc(j->dev, j->nbytes, j->tag, &b);
        if (rc == SW_OK) {
            uint64_t val = 0x5eed0000ull ^ (uint64_t)i, back = 0;
            size_t n = j->nbytes < 8 ? j->nbytes : 8;
            rc = n ? sw_buffer_write(b, 0, &val, n) : SW_OK;
            if (rc == SW_OK && n)
                rc = sw_buffer_read(b, 0, &back, n);
            if (rc != SW_OK || memcmp(&val, &back, n) != 0) {
                j->errors++;
                snprintf(j->last_error, sizeof j->last_error,
                         "read back: %s", rc ? sw_last_error() : "mismatch");
            } else {
                j->ok++;
            }
            if (j->hold == 0) {
                (void)sw_buffer_free(b);
            } else {
                (void)sw_buffer_free(ring[head]);
                ring[head] = b;
                head = (head + 1) % j->hold;
            }
        } else if (rc == SW_ERR_OOM) {
            j->oom++;
        } else {
            j->errors++;
            snprintf(j->last_error, sizeof j->last_error, "%s: %s",
                     sw_err_name(rc), sw_last_error());
        }
    }
    for (int i = 0; i < CT_MAX_HOLD; i++)
        (void)sw_buffer_free(ring[i]);
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

static PyObject *mod_start_c_thread(PyObject *m, PyObject *const *args,
                                    Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"device", "nbytes", "count", "hold",
                                        "tag"};
    PyObject *v[5];
    if (sw_py_parse_args("start_c_thread_allocating", args, nargs, kwnames,
                         names, 5, 5, 3, v) < 0)
        return NULL;
    sw_py_state *st = sw_py_module_state(m);
    Py_ssize_t nbytes, count, hold = 0;
    const char *tag = "c-thread";
    if ((nbytes = PyNumber_AsSsize_t(v[1], PyExc_OverflowError)) == -1 &&
        PyErr_Occurred())
        return NULL;
    if ((count = PyNumber_AsSsize_t(v[2], PyExc_OverflowError)) == -1 &&
        PyErr_Occurred())
        return NULL;
    if (!sw_py_absent(v[3]) &&
        (hold = PyNumber_AsSsize_t(v[3], PyExc_OverflowError)) == -1 &&
        PyErr_Occurred())
        return NULL;
    if (!sw_py_absent(v[4]) && sw_py_parse_tag(v[4], &tag) < 0)
        return NULL;
    if (nbytes < 0 || count < 0 || hold < 0 || hold > CT_MAX_HOLD) {
        PyErr_Format(PyExc_ValueError,
                     "nbytes and count must be >= 0 and hold in 0..%d",
                     CT_MAX_HOLD);
        return NULL;
    }
    DeviceObject *d = sw_py_resolve_device(st, v[0]);
    if (d == NULL)
        return NULL;
    cthread_job *j = calloc(1, sizeof *j);
    if (j == NULL) {
        Py_DECREF(d);
        return PyErr_NoMemory();
    }
    j->dev = d->dev;
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
        Py_DECREF(d);
        return NULL;
    }
    t->job = NULL;
    t->device = d;
    PyObject_GC_Track(t);
    int e = pthread_create(&j->thread, NULL, cthread_main, j);
    if (e != 0) {
        cthread_job_free(j);
        Py_DECREF(t);
        PyErr_Format(PyExc_RuntimeError, "pthread_create: %s", strerror(e));
        return NULL;
    }
    t->job = j;
    sw_py_device_use(d);
    return (PyObject *)t;
}

/* Wait (without the GIL) up to timeout seconds (< 0: forever). */
static int cthread_wait(cthread_job *j, double timeout)
{
    int done;
    Py_BEGIN_ALLOW_THREADS
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
    pthread_mutex_lock(&j->mu);
    while (!j->done) {
        if (timeout < 0)
            pthread_cond_wait(&j->cv, &j->mu);
        else if (pthread_cond_timedwait(&j->cv, &j->mu, &until) == ETIMEDOUT)
            break;
    }
    done = j->done;
    pthread_mutex_unlock(&j->mu);
    if (done && !j->joined) {
        pthread_join(j->thread, NULL);
        j->joined = 1;
    }
    Py_END_ALLOW_THREADS
    return done;
}

static PyObject *CThread_join(CThreadObject *t, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"timeout"};
    PyObject *v[1];
    if (sw_py_parse_args("join", args, nargs, kwnames, names, 1, 1, 0, v) < 0)
        return NULL;
    double timeout = -1;
    if (!sw_py_absent(v[0])) {
        timeout = PyFloat_AsDouble(v[0]);
        if (timeout == -1 && PyErr_Occurred())
            return NULL;
        if (timeout < 0)
            timeout = 0;
    }
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
        if (sw_py_finalizing() && !done) {
            /* At exit the thread may be stuck for good: a thread that
             * asks for the GIL while the interpreter finalizes never gets
             * it.  Leave it (and its job) be; the process is ending. */
            pthread_detach(t->job->thread);
        } else {
            (void)cthread_wait(t->job, -1);
            cthread_job_free(t->job);
            sw_py_device_unuse(t->device);
        }
        t->job = NULL;
    }
    Py_CLEAR(t->device);
    tp->tp_free((PyObject *)t);
    Py_DECREF(tp);
}

static PyMethodDef CThread_methods[] = {
    {"join", (PyCFunction)(void (*)(void))CThread_join,
     METH_FASTCALL | METH_KEYWORDS,
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

static PyType_Spec cthread_spec = {
    .name = "spillway._CThread",
    .basicsize = sizeof(CThreadObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = CThread_slots,
};


static PyObject *mod_inject_fault(PyObject *m, PyObject *const *args,
                                  Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"device", "op", "nth", "persistent"};
    PyObject *v[4];
    if (sw_py_parse_args("inject_fault", args, nargs, kwnames, names, 4, 4, 3,
                         v) < 0)
        return NULL;
    sw_py_state *st = sw_py_module_state(m);
    const char *op = PyUnicode_Check(v[1]) ? PyUnicode_AsUTF8(v[1]) : NULL;
    sw_fault_op fop;
    if (op != NULL && strcmp(op, "alloc") == 0) {
        fop = SW_FAULT_ALLOC;
    } else if (op != NULL && strcmp(op, "copy") == 0) {
        fop = SW_FAULT_COPY;
    } else {
        PyErr_SetString(PyExc_ValueError, "op must be 'alloc' or 'copy'");
        return NULL;
    }
    unsigned long long nth = PyLong_AsUnsignedLongLong(v[2]);
    int persistent = sw_py_absent(v[3]) ? 0 : PyObject_IsTrue(v[3]);
    if ((nth == (unsigned long long)-1 && PyErr_Occurred()) || persistent < 0)
        return NULL;
    DeviceObject *d = sw_py_resolve_device(st, v[0]);
    if (d == NULL)
        return NULL;
    int rc;
    SW_PY_DEVICE_CALL(d, rc, sw_inject_fault(dev_, fop, nth, persistent));
    Py_DECREF(d);
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    Py_RETURN_NONE;
}

static PyObject *mod_track_arrays(PyObject *m, PyObject *arg)
{
    sw_py_state *st = sw_py_module_state(m);
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    PyObject *old = st->track;
    st->track = NULL;
    if (on && (st->track = PyList_New(0)) == NULL) {
        st->track = old;
        return NULL;
    }
    if (old == NULL)
        Py_RETURN_NONE;
    return old;
}

static PyObject *mod_gc_backoff(PyObject *m, PyObject *const *args,
                                Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"min_interval"};
    PyObject *v[1];
    if (sw_py_parse_args("gc_backoff", args, nargs, kwnames, names, 1, 1, 0,
                         v) < 0)
        return NULL;
    double old = (double)atomic_load(&sw_py_process.gc.min_interval_ns) / 1e9;
    if (!sw_py_absent(v[0])) {
        double s = PyFloat_AsDouble(v[0]);
        if (s == -1 && PyErr_Occurred())
            return NULL;
        if (!(s >= 0) || s > 3600) {
            PyErr_SetString(PyExc_ValueError,
                            "min_interval must be 0 to 3600 seconds");
            return NULL;
        }
        atomic_store(&sw_py_process.gc.min_interval_ns, (int64_t)(s * 1e9));
    }
    return PyFloat_FromDouble(old);
}

static PyObject *mod_gc_backoff_reset(PyObject *m, PyObject *unused)
{
    atomic_store(&sw_py_process.gc.quiet_until_ns, 0);
    Py_RETURN_NONE;
}

static PyObject *mod_gc_stats(PyObject *m, PyObject *unused)
{
    int64_t q = atomic_load(&sw_py_process.gc.quiet_until_ns);
    int64_t now = sw_py_now_ns();
    return Py_BuildValue(
        "{s:K,s:K,s:K,s:K,s:d}", "collections",
        (unsigned long long)atomic_load(&sw_py_process.gc.seq), "fruitful",
        (unsigned long long)atomic_load(&sw_py_process.gc.fruitful),
        "skipped_backoff",
        (unsigned long long)atomic_load(&sw_py_process.gc.skipped_backoff),
        "skipped_shared",
        (unsigned long long)atomic_load(&sw_py_process.gc.skipped_shared),
        "backoff_left", q > now ? (double)(q - now) / 1e9 : 0.0);
}

static PyObject *mod_open_devices(PyObject *m, PyObject *unused)
{
    return PyDict_Values(sw_py_module_state(m)->devices);
}

static PyObject *mod_wait_host_tasks(PyObject *m, PyObject *const *args,
                                     Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"timeout"};
    PyObject *v[1];
    if (sw_py_parse_args("wait_host_tasks", args, nargs, kwnames, names, 1, 1,
                         0, v) < 0)
        return NULL;
    double timeout = -1;
    if (!sw_py_absent(v[0])) {
        timeout = PyFloat_AsDouble(v[0]);
        if (timeout == -1 && PyErr_Occurred())
            return NULL;
        if (timeout < 0)
            timeout = 0;
    }
    if (sw_py_thread.task_queue != NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "wait_host_tasks() inside a host task would wait "
                        "for itself");
        return NULL;
    }
    int none;
    NOGIL(none = sw_py_wait_host_tasks(timeout));
    sw_py_drain_releases();
    if (!none) {
        PyErr_SetString(PyExc_TimeoutError,
                        "Python host tasks are still pending");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *mod_object_counts(PyObject *m, PyObject *unused)
{
    sw_py_state *st = sw_py_module_state(m);
    return Py_BuildValue("{s:n,s:n,s:n,s:l}", "queues", st->live_queues,
                         "managers", st->live_managers, "events",
                         st->live_events, "host_tasks",
                         sw_py_pending_host_tasks());
}

static PyMethodDef testing_methods[] = {
    FASTKW("_start_c_thread_allocating", mod_start_c_thread,
           "_start_c_thread_allocating(device, nbytes, count, hold=0, "
           "tag=None)\n--\n\nTesting: start a C thread (which never holds "
           "the GIL) that allocates count buffers of nbytes, keeping the "
           "last `hold` alive."),
    FASTKW("_inject_fault", mod_inject_fault,
           "_inject_fault(device, op, nth, persistent=False)\n--\n\n"
           "Testing: make the nth next backend 'alloc' or 'copy' fail."),
    {"_track_arrays", (PyCFunction)(void (*)(void))mod_track_arrays, METH_O,
     "_track_arrays(on)\n--\n\nTesting: start (True) or stop keeping weak "
     "references to every new Array; returns the previous list or None."},
    FASTKW("_gc_backoff", mod_gc_backoff,
           "_gc_backoff(min_interval=None)\n--\n\nThe pressure collector's "
           "minimum back-off in seconds (returns the old value)."),
    {"_gc_backoff_reset", (PyCFunction)(void (*)(void))mod_gc_backoff_reset,
     METH_NOARGS, "_gc_backoff_reset()\n--\n\nEnd a back-off now."},
    {"_gc_stats", (PyCFunction)(void (*)(void))mod_gc_stats, METH_NOARGS,
     "_gc_stats()\n--\n\nCounters of the pressure collector."},
    {"_open_devices", (PyCFunction)(void (*)(void))mod_open_devices,
     METH_NOARGS, "_open_devices()\n--\n\nThe Devices this module has open."},
    FASTKW("_wait_host_tasks", mod_wait_host_tasks,
           "_wait_host_tasks(timeout=None)\n--\n\nWait until no Python "
           "host task is pending (TimeoutError after timeout seconds)."),
    {"_object_counts", (PyCFunction)(void (*)(void))mod_object_counts,
     METH_NOARGS,
     "_object_counts()\n--\n\nTesting: live Queue, SequentialOrderManager "
     "and Event objects, and Python host tasks not yet finished."},
    {NULL, NULL, 0, NULL},
};

int sw_py_testing_setup(PyObject *m, sw_py_state *st)
{
    if ((st->cthread_type = sw_py_add_type(m, &cthread_spec)) == NULL)
        return -1;
    return PyModule_AddFunctions(m, testing_methods);
}
