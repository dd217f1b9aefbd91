/*
 * hosttask.c -- Python host tasks: q.host_task(fn), and the tasks that keep
 * an operation's Arrays alive until its work has completed (queue.h).
 *
 * Their count and the release list are process-wide (sw_py_process): a
 * task finishes on its queue's runner thread without the GIL, and the
 * list is drained by a pending call, which carries no module.
 */
#include "queue.h"

#include <time.h>

static void pytasks_begin(void)
{
    pthread_mutex_lock(&sw_py_process.tasks.mu);
    sw_py_process.tasks.pending++;
    pthread_mutex_unlock(&sw_py_process.tasks.mu);
}

static void pytasks_end(void)
{
    pthread_mutex_lock(&sw_py_process.tasks.mu);
    if (--sw_py_process.tasks.pending == 0)
        pthread_cond_broadcast(&sw_py_process.tasks.cv);
    pthread_mutex_unlock(&sw_py_process.tasks.mu);
}

/* A Python host task: calls fn with the GIL; or, with no fn, keeps objs
 * alive until it runs and then hands them to the release list. */
struct sw_py_pytask {
    PyObject *fn;
    sw_queue *q; /* the queue it runs on, as an identity */
    struct sw_py_pytask *next; /* on the release list */
    int nobjs;
    PyObject *objs[4];
};

sw_py_pytask *sw_py_pytask_new(PyObject *fn, PyObject *const *objs,
                               int nobjs, sw_queue *q)
{
    sw_py_pytask *t = PyMem_RawCalloc(1, sizeof *t);
    if (t == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    t->fn = Py_XNewRef(fn);
    t->q = q;
    t->nobjs = nobjs;
    for (int i = 0; i < nobjs; i++)
        t->objs[i] = Py_NewRef(objs[i]);
    return t;
}

void sw_py_pytask_free(sw_py_pytask *t)
{
    Py_CLEAR(t->fn);
    for (int i = 0; i < t->nobjs; i++)
        Py_CLEAR(t->objs[i]);
    PyMem_RawFree(t);
}

/* ------------------------------------------------------------------------
 * The release list: references handed over by finished keep-alive tasks
 * ---------------------------------------------------------------------- */

void sw_py_drain_releases(void)
{
    while (atomic_load(&sw_py_process.release.nonempty)) {
        pthread_mutex_lock(&sw_py_process.release.mu);
        sw_py_pytask *list = sw_py_process.release.head;
        sw_py_process.release.head = NULL;
        atomic_store(&sw_py_process.release.nonempty, 0);
        pthread_mutex_unlock(&sw_py_process.release.mu);
        while (list != NULL) {
            sw_py_pytask *t = list;
            list = t->next;
            sw_py_pytask_free(t); /* may free Arrays: device frees, no waits */
        }
    }
}

/* A pending call: the main thread, with the GIL, between bytecodes. */
static int drain_pending_call(void *arg)
{
    (void)arg;
    atomic_store(&sw_py_process.release.scheduled, 0);
    sw_py_drain_releases();
    return 0;
}

/* Without the GIL: put t on the release list and make sure a drain comes
 * soon.  Py_AddPendingCall may be called from any thread without the GIL;
 * when its queue is full, the next queue call drains the list anyway. */
static void release_later(sw_py_pytask *t)
{
    pthread_mutex_lock(&sw_py_process.release.mu);
    t->next = sw_py_process.release.head;
    sw_py_process.release.head = t;
    atomic_store(&sw_py_process.release.nonempty, 1);
    pthread_mutex_unlock(&sw_py_process.release.mu);
    if (!atomic_exchange(&sw_py_process.release.scheduled, 1) &&
        Py_AddPendingCall(drain_pending_call, NULL) < 0)
        atomic_store(&sw_py_process.release.scheduled, 0);
}

/* On the queue's runner thread, without the GIL and without any spillway
 * lock.  While the interpreter finalizes, the GIL cannot be had: the task's
 * references are left (the atexit handler waits for tasks, so that this
 * happens only to tasks queued during finalization). */
static void pytask_run(void *arg)
{
    sw_py_pytask *t = arg;
    if (t->fn == NULL && Py_IsInitialized() && !sw_py_finalizing()) {
        release_later(t); /* the work before it is complete */
    } else if (sw_py_gil_enter()) {
        PyGILState_STATE g = PyGILState_Ensure();
        sw_queue *outer = sw_py_thread.task_queue;
        sw_py_thread.task_queue = t->q;
        if (t->fn != NULL) {
            PyObject *r = PyObject_CallNoArgs(t->fn);
            if (r == NULL)
                PyErr_WriteUnraisable(t->fn);
            Py_XDECREF(r);
        }
        sw_py_pytask_free(t);
        sw_py_thread.task_queue = outer;
        PyGILState_Release(g);
        sw_py_gil_leave();
    } else {
        PyMem_RawFree(t); /* its references are left: no GIL to be had */
    }
    pytasks_end();
}

/* ------------------------------------------------------------------------
 * Running, counting and waiting
 * ---------------------------------------------------------------------- */

int sw_py_pytask_submit(sw_queue *q, sw_py_pytask *t, sw_event **ev)
{
    pytasks_begin();
    int rc = sw_queue_host_task(q, pytask_run, t, ev);
    if (rc != SW_OK)
        pytasks_end();
    return rc;
}

int sw_py_wait_host_tasks(double timeout)
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
    int none;
    pthread_mutex_lock(&sw_py_process.tasks.mu);
    while (sw_py_process.tasks.pending > 0) {
        if (timeout < 0) {
            pthread_cond_wait(&sw_py_process.tasks.cv,
                              &sw_py_process.tasks.mu);
        } else {
            /* The condition variable uses the realtime clock: poll in
             * short steps against the monotonic deadline. */
            struct timespec now, step;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (now.tv_sec > until.tv_sec ||
                (now.tv_sec == until.tv_sec && now.tv_nsec >= until.tv_nsec))
                break;
            clock_gettime(CLOCK_REALTIME, &step);
            step.tv_nsec += 10 * 1000 * 1000;
            if (step.tv_nsec >= 1000000000L) {
                step.tv_sec++;
                step.tv_nsec -= 1000000000L;
            }
            (void)pthread_cond_timedwait(&sw_py_process.tasks.cv,
                                         &sw_py_process.tasks.mu, &step);
        }
    }
    none = sw_py_process.tasks.pending == 0;
    pthread_mutex_unlock(&sw_py_process.tasks.mu);
    return none;
}

long sw_py_pending_host_tasks(void)
{
    pthread_mutex_lock(&sw_py_process.tasks.mu);
    long pending = sw_py_process.tasks.pending;
    pthread_mutex_unlock(&sw_py_process.tasks.mu);
    return pending;
}
