/*
 * hosttask.c -- host tasks: callbacks run off the caller's thread once the
 * work queued on a queue before them has completed, in order per queue.
 *
 * They run on a pool of runner threads shared by every queue of every
 * device, not a thread per queue: a thread costs ~50 us to start and join,
 * which dominated a new queue's first operation (the Python layer queues a
 * keep-alive task after each operation on a non-default queue).  A queue
 * with tasks is `scheduled`: on the pool's ready list or being run by one
 * runner, which runs its tasks one after another, so a queue's tasks never
 * overlap and keep their order.  A runner blocked in a task (waiting for
 * the device, or for the GIL in a Python task) holds up only that queue;
 * the pool grows, up to MAX_RUNNERS, when every runner is busy.  Runners
 * never hold a device lock while waiting or running a task: a task may
 * call anything, including releasing its own queue.
 *
 * Locks: pool.mu and each queue's tlock are leaves (taken under a device
 * lock or none, never one inside the other).
 */
#include "core/internal.h"

#include <unistd.h>

#define MAX_RUNNERS 64

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sw__queue *head, *tail; /* scheduled queues no runner has yet */
    int idle, total;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL,
          0, 0};

/* The queue whose task this thread is running: a queue may not wait for
 * itself (reap, close from inside its own task). */
static _Thread_local sw__queue *running;

bool sw__in_own_task(const sw__queue *q) { return running == q; }

/* A child of fork() has none of the parent's runners. */
static void pool_after_fork(void)
{
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.cv, NULL);
    pool.head = pool.tail = NULL;
    pool.idle = pool.total = 0;
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void register_atfork(void)
{
    (void)pthread_atfork(NULL, NULL, pool_after_fork);
}

/* Run q's tasks until it has none; then it is no longer scheduled (and
 * may be destroyed at once: q is not touched after that). */
static void run_queue(sw__queue *q)
{
    const sw__backend_ops *ops = q->dev->ops;
    for (;;) {
        pthread_mutex_lock(&q->tlock);
        sw__task *t = q->thead;
        if (t == NULL) {
            q->scheduled = false;
            pthread_cond_broadcast(&q->tcv);
            pthread_mutex_unlock(&q->tlock);
            return;
        }
        q->thead = t->next;
        if (q->thead == NULL)
            q->ttail = NULL;
        pthread_mutex_unlock(&q->tlock);

        running = q;
        int rc = sw__b_event_wait(ops, t->after);
        sw__b_event_release(ops, t->after);
        t->fn(t->arg);
        sw__event_complete(t->done, rc);
        sw__event_unref(t->done);
        sw__free(t);
        running = NULL;

        pthread_mutex_lock(&q->tlock);
        q->tpending--;
        pthread_cond_broadcast(&q->tcv);
        pthread_mutex_unlock(&q->tlock);
    }
}

static void *runner_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        while (pool.head == NULL) {
            pool.idle++;
            pthread_cond_wait(&pool.cv, &pool.mu);
            pool.idle--;
        }
        sw__queue *q = pool.head;
        pool.head = q->rnext;
        if (pool.head == NULL)
            pool.tail = NULL;
        q->rnext = NULL;
        pthread_mutex_unlock(&pool.mu);
        run_queue(q);
        pthread_mutex_lock(&pool.mu);
    }
    return NULL;
}

/* Under pool.mu: one more runner.  false when none could be started. */
static bool spawn_locked(void)
{
    pthread_t t;
    if (pool.total >= MAX_RUNNERS || sw__thread_create(&t, runner_main,
                                                       NULL) != 0)
        return false;
    pthread_detach(t);
    pool.total++;
    return true;
}

/* A runner exists (or was just started), so that a task queued now will
 * run.  false when there is none and none can be started. */
static bool ensure_runner(void)
{
    pthread_once(&atfork_once, register_atfork);
    pthread_mutex_lock(&pool.mu);
    bool ok = pool.total > 0 || spawn_locked();
    pthread_mutex_unlock(&pool.mu);
    return ok;
}

static void schedule(sw__queue *q)
{
    pthread_mutex_lock(&pool.mu);
    q->rnext = NULL;
    if (pool.tail)
        pool.tail->rnext = q;
    else
        pool.head = q;
    pool.tail = q;
    /* An idle runner takes it; else a new one, so that a runner blocked in
     * a long task does not hold up every other queue. */
    if (pool.idle > 0)
        pthread_cond_signal(&pool.cv);
    else
        (void)spawn_locked();
    pthread_mutex_unlock(&pool.mu);
}

SW_API int sw_queue_host_task(sw_queue *h, void (*fn)(void *arg), void *arg,
                              sw_event **out)
{
    if (out != NULL)
        *out = NULL;
    if (fn == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "fn is NULL");
    sw__queue *q;
    int rc = sw__queue_enter(h, &q);
    if (rc != SW_OK)
        return rc;
    sw_device *dev = q->dev;
    sw__task *t = sw__calloc(1, sizeof *t);
    if (t == NULL) {
        sw__unlock(dev);
        return sw__errorf(SW_ERR_HOST_OOM, "no host memory for a task");
    }
    t->fn = fn;
    t->arg = arg;
    t->done = sw__event_new(dev->ops, NULL);
    if (t->done == NULL) {
        rc = sw__errorf(SW_ERR_HOST_OOM, "no host memory for an event");
        goto fail;
    }
    /* The task's own reference is not the handle's: once the caller
     * released it, the handle is dead though the task is pending. */
    if (out != NULL)
        atomic_fetch_add_explicit(&t->done->refs, 1, memory_order_relaxed);
    else
        atomic_store_explicit(&t->done->handles, 0, memory_order_relaxed);
    if (!ensure_runner()) {
        rc = sw__errorf(SW_ERR_HOST_OOM, "cannot start a host-task "
                        "thread");
        goto fail;
    }
    rc = sw__b_event_record_q(dev, q->bq, &t->after);
    if (rc != SW_OK)
        goto fail;
    sw__event *done = t->done; /* t is the runner's once queued */
    pthread_mutex_lock(&q->tlock);
    if (q->ttail)
        q->ttail->next = t;
    else
        q->thead = t;
    q->ttail = t;
    q->tpending++;
    bool start = !q->scheduled;
    q->scheduled = true;
    pthread_mutex_unlock(&q->tlock);
    if (start)
        schedule(q);
    if (out != NULL)
        *out = sw__event_handle(done);
    sw__unlock(dev);
    return SW_OK;
fail:
    if (t->done != NULL) {
        if (out != NULL)
            sw__event_drop_handle(t->done);
        sw__event_unref(t->done);
    }
    sw__unlock(dev);
    sw__free(t);
    return rc;
}
