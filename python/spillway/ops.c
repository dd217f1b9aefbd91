/*
 * ops.c -- operations on arrays: add, scale, axpy and sum, and the
 * plumbing every operation goes through (fill, zeros, copies too): on the
 * device's default queue, or on a Queue, ordered by this thread's order
 * manager of it.
 *
 * Kernels compute only with the dtypes the device declares
 * (sw_device_dtypes; bool: fill, copy and sum).  Storage, copies and fills
 * by byte pattern work for every dtype, so fill() and zeros() fall back on
 * them, and an operation whose kernel cannot run is refused before
 * anything is allocated, with the library's own message (it names the
 * device and the dtype).
 */
#include "array.h"
#include "dtype.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Operations on a queue
 * ---------------------------------------------------------------------- */

/* Without the GIL.  q NULL: the device's default queue. */
static int op_submit(sw_queue *q, const sw_py_op *op)
{
    switch (op->kind) {
    case SW_PY_OP_FILL:
        return q ? sw_op_fill_q(q, op->out, op->dtype, op->n, op->s)
                 : sw_op_fill(op->out, op->dtype, op->n, op->s);
    case SW_PY_OP_ADD:
        return q ? sw_op_add_q(q, op->out, op->a, op->b, op->dtype, op->n)
                 : sw_op_add(op->out, op->a, op->b, op->dtype, op->n);
    case SW_PY_OP_SCALE:
        return q ? sw_op_scale_q(q, op->out, op->a, op->s, op->dtype, op->n)
                 : sw_op_scale(op->out, op->a, op->s, op->dtype, op->n);
    case SW_PY_OP_COPY: {
        size_t nb = op->n * sw_py_dtypes[op->dtype].size;
        return q ? sw_buffer_copy_q(q, op->out, 0, op->a, 0, nb)
                 : sw_buffer_copy(op->out, 0, op->a, 0, nb);
    }
    case SW_PY_OP_BYTEFILL: /* the library has no queue form: q is NULL */
        return sw_buffer_fill(op->out, 0,
                              op->n * sw_py_dtypes[op->dtype].size, &op->s,
                              op->n_pattern);
    default:
        return q ? sw_op_axpy_q(q, op->s, op->a, op->out, op->dtype, op->n)
                 : sw_op_axpy(op->s, op->a, op->out, op->dtype, op->n);
    }
}

int sw_py_queue_arg(sw_py_state *st, PyObject *o, DeviceObject *d,
                    const char *fname, QueueObject **out)
{
    *out = NULL;
    if (sw_py_absent(o))
        return 0;
    if (!Py_IS_TYPE(o, st->queue_type)) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): queue must be a spillway.Queue or None, not "
                     "%.100s",
                     fname, Py_TYPE(o)->tp_name);
        return -1;
    }
    QueueObject *q = (QueueObject *)o;
    if (sw_py_queue_check_open(q) < 0)
        return -1;
    if (d != NULL && q->device != d) {
        PyErr_Format(PyExc_ValueError,
                     "%s(): the queue is on %U and the arrays on %U", fname,
                     q->device->name, d->name);
        return -1;
    }
    *out = q;
    return 0;
}

/* Run op on queue (NULL: the device's default queue, the plain C call).
 * On a queue, as dpnp does with dpctl's order manager: the work is
 * submitted after the foreign events of this thread's manager of the
 * queue, its event is recorded there together with that of a host task
 * holding keep[0..nkeep) (the Arrays it uses) until the work has
 * completed.  -1 with an exception set on failure. */
int sw_py_do_op(sw_py_state *st, QueueObject *queue, const sw_py_op *op,
                  PyObject *const *keep, int nkeep)
{
    int rc;
    if (queue == NULL) {
        NOGIL_ALLOC(rc, op_submit(NULL, op));
        if (rc != SW_OK) {
            sw_py_raise(st, rc);
            return -1;
        }
        return 0;
    }
    ManagerObject *m = sw_py_manager_of(st, queue);
    if (m == NULL)
        return -1;
    sw_queue *q = queue->q;
    sw_py_pytask *t = sw_py_pytask_new(NULL, keep, nkeep, q);
    if (t == NULL) {
        Py_DECREF(m);
        return -1;
    }
    int queued = 0;
    char msg[512] = "";
    sw_py_gc_mark_t gc_mark = sw_py_gc_mark();
    int last_chance = 0;
again:
    Py_BEGIN_ALLOW_THREADS
    rc = sw_py_manager_wait_foreign_nogil(m);
    if (rc == SW_OK)
        rc = op_submit(q, op);
    int done = 0;
    if (rc == SW_OK) {
        sw_event *ev = NULL, *ht = NULL;
        rc = sw_queue_record_event(q, &ev);
        /* Complete already (small work on an idle queue runs at once):
         * nothing to keep alive or to order after, so no host task --
         * whose runner thread then took the GIL to drop the references,
         * a GIL hand-off per operation (the cost of a new queue's first
         * op from Python).  t is freed below, with the GIL. */
        if (rc == SW_OK && (sw_event_query(ev, &done) != SW_OK || !done))
            done = 0;
        if (rc == SW_OK && !done &&
            (rc = sw_py_pytask_submit(q, t, &ht)) == SW_OK)
            queued = 1;
        if (rc == SW_OK && !done) {
            pthread_mutex_lock(&m->mu);
            rc = sw_py_manager_add_locked(m, ev, 0, 1);
            if (rc == SW_OK)
                rc = sw_py_manager_add_locked(m, ht, 1, 1);
            pthread_mutex_unlock(&m->mu);
        }
        (void)sw_event_release(ev);
        (void)sw_event_release(ht);
        if (rc != SW_OK) {
            /* Submitted but not recorded (no host memory): finish the work
             * here, so that nothing is left unordered or unkept; the
             * failure's message is kept for the exception. */
            snprintf(msg, sizeof msg, "%s", sw_last_error());
            (void)sw_queue_synchronize(q);
        }
    }
    Py_END_ALLOW_THREADS
    if (last_chance) {
        sw_py_gc_force_full(0);
    } else if (!queued && msg[0] == '\0' &&
               sw_py_gc_retry_full(rc, gc_mark)) {
        /* Nothing was submitted: once more, with a full collection in its
         * ladder (pressure.c). */
        last_chance = 1;
        sw_py_gc_force_full(1);
        goto again;
    }
    if (!queued)
        sw_py_pytask_free(t);
    Py_DECREF(m);
    if (rc != SW_OK) {
        if (msg[0] != '\0')
            sw_py_raise_detail(st, rc, msg);
        else
            sw_py_raise_rc(st, rc);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * What the device's kernels compute with
 * ---------------------------------------------------------------------- */

int sw_py_kernel_check(sw_py_state *st, DeviceObject *d, int kind,
                       sw_dtype dt, sw_buffer *buf)
{
    int arith = kind == SW_PY_OP_ADD || kind == SW_PY_OP_SCALE ||
                kind == SW_PY_OP_AXPY;
    if (((d->dtypes >> dt) & 1u) && !(dt == SW_BOOL && arith))
        return 0;
    /* The same kernel on no elements: the library checks the dtype (and
     * the kernel's definition for it) first, moves nothing, and says why
     * in its own words. */
    sw_scalar z;
    memset(&z, 0, sizeof z);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    switch (kind) {
    case SW_PY_OP_FILL:
        rc = sw_op_fill(buf, dt, 0, z);
        break;
    case SW_PY_OP_ADD:
        rc = sw_op_add(buf, buf, buf, dt, 0);
        break;
    case SW_PY_OP_SCALE:
        rc = sw_op_scale(buf, buf, z, dt, 0);
        break;
    case SW_PY_OP_AXPY:
        rc = sw_op_axpy(z, buf, buf, dt, 0);
        break;
    default:
        rc = sw_op_sum(buf, dt, 0, &z);
        break;
    }
    Py_END_ALLOW_THREADS
    if (rc != SW_OK) {
        sw_py_raise(st, rc);
        return -1;
    }
    return 0;
}

int sw_py_fill(sw_py_state *st, ArrayObject *a, sw_scalar v,
               QueueObject *queue)
{
    if (a->nelem == 0)
        return 0;
    PyObject *keep[1] = {(PyObject *)a};
    if ((a->device->dtypes >> a->dtype) & 1u) {
        sw_py_op op = {.kind = SW_PY_OP_FILL, .out = a->buf, .s = v,
                       .dtype = a->dtype, .n = a->nelem};
        return sw_py_do_op(st, queue, &op, keep, 1);
    }
    unsigned char bytes[16];
    size_t size = sw_py_dtypes[a->dtype].size;
    sw_py_scalar_store(bytes, a->dtype, v);
    if (size == 16 && memcmp(bytes, bytes + 8, 8) == 0)
        size = 8; /* complex128 with equal halves: one 8-byte pattern */
    if (size <= 8) {
        sw_py_op op = {.kind = SW_PY_OP_BYTEFILL, .out = a->buf,
                       .dtype = a->dtype, .n = a->nelem, .n_pattern = size};
        memcpy(&op.s, bytes, size);
        return sw_py_do_op(st, NULL, &op, keep, 1);
    }
    /* A 16-byte element no pattern can make: written from the host. */
    unsigned char *tmp = PyMem_RawMalloc(a->nbytes);
    if (tmp == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < a->nelem; i++)
        memcpy(tmp + 16 * i, bytes, 16);
    int rc;
    NOGIL(rc = sw_buffer_write(a->buf, 0, tmp, a->nbytes));
    PyMem_RawFree(tmp);
    if (rc != SW_OK) {
        sw_py_raise(st, rc);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * add, scale, axpy, sum
 * ---------------------------------------------------------------------- */

ArrayObject *sw_py_array_arg(sw_py_state *st, PyObject *o, const char *fname,
                             const char *what)
{
    if (!Py_IS_TYPE(o, st->array_type)) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): %s must be a spillway.Array, not %.100s", fname,
                     what, Py_TYPE(o)->tp_name);
        return NULL;
    }
    ArrayObject *a = (ArrayObject *)o;
    return sw_py_array_check_device(a) < 0 ? NULL : a;
}

int sw_py_check_match(ArrayObject *a, ArrayObject *b, const char *fname,
                       const char *an, const char *bn)
{
    if (a->device != b->device) {
        PyErr_Format(PyExc_ValueError,
                     "%s(): %s is on %U and %s on %U: operands must be on "
                     "the same device",
                     fname, an, a->device->name, bn, b->device->name);
        return -1;
    }
    if (a->dtype != b->dtype) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): %s is %s and %s is %s: operands must have the "
                     "same dtype",
                     fname, an, sw_py_dtypes[a->dtype].name, bn,
                     sw_py_dtypes[b->dtype].name);
        return -1;
    }
    int same = SW_PY_NDIM(a) == SW_PY_NDIM(b);
    for (int i = 0; same && i < SW_PY_NDIM(a); i++)
        same = a->shape[i] == b->shape[i];
    if (!same) {
        PyObject *sa = sw_py_shape_tuple(a->shape, SW_PY_NDIM(a));
        PyObject *sb = sw_py_shape_tuple(b->shape, SW_PY_NDIM(b));
        if (sa != NULL && sb != NULL)
            PyErr_Format(PyExc_ValueError,
                         "%s(): shapes %R (%s) and %R (%s) do not match",
                         fname, sa, an, sb, bn);
        Py_XDECREF(sa);
        Py_XDECREF(sb);
        return -1;
    }
    return 0;
}

/* out= argument: the given Array (checked against a) or a new one,
 * allocated beside the operands a and b (b may be NULL). */
static ArrayObject *out_arg(sw_py_state *st, PyObject *o, ArrayObject *a,
                            ArrayObject *b, const char *fname)
{
    if (sw_py_absent(o))
        return sw_py_result_like(st, a, b, fname);
    ArrayObject *out = sw_py_array_arg(st, o, fname, "out");
    if (out == NULL || sw_py_check_match(a, out, fname, "the input", "out") < 0)
        return NULL;
    return (ArrayObject *)Py_NewRef(out);
}

PyObject *sw_py_op_done(sw_py_state *st, ArrayObject *out, int r)
{
    if (r < 0 || sw_py_sync_if_exported(st, out->device) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return (PyObject *)out;
}

static PyObject *mod_add(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames)
{
    static const char *const names[] = {"a", "b", "out", "queue"};
    PyObject *v[4];
    if (sw_py_parse_args("add", args, nargs, kwnames, names, 4, 3, 2, v) < 0)
        return NULL;
    sw_py_state *st = sw_py_module_state(m);
    ArrayObject *a = sw_py_array_arg(st, v[0], "add", "a");
    ArrayObject *b = a ? sw_py_array_arg(st, v[1], "add", "b") : NULL;
    QueueObject *q;
    if (b == NULL || sw_py_check_match(a, b, "add", "a", "b") < 0 ||
        sw_py_queue_arg(st, v[3], a->device, "add", &q) < 0 ||
        sw_py_kernel_check(st, a->device, SW_PY_OP_ADD, a->dtype, a->buf) <
            0)
        return NULL;
    ArrayObject *out = out_arg(st, v[2], a, b, "add");
    if (out == NULL)
        return NULL;
    sw_py_op op = {.kind = SW_PY_OP_ADD, .out = out->buf, .a = a->buf,
                   .b = b->buf, .dtype = a->dtype, .n = a->nelem};
    PyObject *keep[3] = {(PyObject *)a, (PyObject *)b, (PyObject *)out};
    return sw_py_op_done(st, out, sw_py_do_op(st, q, &op, keep, 3));
}

static PyObject *mod_scale(PyObject *m, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"a", "s", "out", "queue"};
    PyObject *v[4];
    if (sw_py_parse_args("scale", args, nargs, kwnames, names, 4, 3, 2, v) < 0)
        return NULL;
    sw_py_state *st = sw_py_module_state(m);
    ArrayObject *a = sw_py_array_arg(st, v[0], "scale", "a");
    sw_scalar s;
    QueueObject *q;
    /* The kernel first: scale of a bool array is a TypeError whatever the
     * factor (2 is no truth value, but that is not why it fails). */
    if (a == NULL ||
        sw_py_kernel_check(st, a->device, SW_PY_OP_SCALE, a->dtype, a->buf) <
            0 ||
        sw_py_scalar_from_py(v[1], a->dtype, &s, "scale factor") < 0 ||
        sw_py_queue_arg(st, v[3], a->device, "scale", &q) < 0)
        return NULL;
    ArrayObject *out = out_arg(st, v[2], a, NULL, "scale");
    if (out == NULL)
        return NULL;
    sw_py_op op = {.kind = SW_PY_OP_SCALE, .out = out->buf, .a = a->buf,
                   .s = s, .dtype = a->dtype, .n = a->nelem};
    PyObject *keep[2] = {(PyObject *)a, (PyObject *)out};
    return sw_py_op_done(st, out, sw_py_do_op(st, q, &op, keep, 2));
}

static PyObject *mod_axpy(PyObject *m, PyObject *const *args,
                          Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"alpha", "x", "y", "queue"};
    PyObject *v[4];
    if (sw_py_parse_args("axpy", args, nargs, kwnames, names, 4, 3, 3, v) < 0)
        return NULL;
    sw_py_state *st = sw_py_module_state(m);
    ArrayObject *x = sw_py_array_arg(st, v[1], "axpy", "x");
    ArrayObject *y = x ? sw_py_array_arg(st, v[2], "axpy", "y") : NULL;
    if (y == NULL || sw_py_check_match(x, y, "axpy", "x", "y") < 0)
        return NULL;
    sw_scalar alpha;
    QueueObject *q;
    if (sw_py_kernel_check(st, x->device, SW_PY_OP_AXPY, x->dtype, x->buf) <
            0 ||
        sw_py_scalar_from_py(v[0], x->dtype, &alpha, "alpha") < 0 ||
        sw_py_queue_arg(st, v[3], x->device, "axpy", &q) < 0)
        return NULL;
    sw_py_op op = {.kind = SW_PY_OP_AXPY, .out = y->buf, .a = x->buf,
                   .s = alpha, .dtype = x->dtype, .n = x->nelem};
    PyObject *keep[2] = {(PyObject *)x, (PyObject *)y};
    return sw_py_op_done(st, (ArrayObject *)Py_NewRef(y),
                   sw_py_do_op(st, q, &op, keep, 2));
}

PyObject *sw_py_sum(sw_py_state *st, ArrayObject *a)
{
    if (sw_py_kernel_check(st, a->device, SW_PY_OP_SUM, a->dtype, a->buf) < 0)
        return NULL;
    sw_scalar s;
    memset(&s, 0, sizeof s);
    int rc;
    NOGIL_ALLOC(rc, sw_op_sum(a->buf, a->dtype, a->nelem, &s));
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    switch (sw_py_dtypes[a->dtype].kind) {
    case SW_KIND_FLOAT:
        return PyFloat_FromDouble(s.f);
    case SW_KIND_COMPLEX:
        return PyComplex_FromDoubles(s.c.re, s.c.im);
    case SW_KIND_UINT:
        return PyLong_FromUnsignedLongLong((unsigned long long)s.u);
    default: /* signed integers, and bool's count */
        return PyLong_FromLongLong((long long)s.i);
    }
}

static PyObject *mod_sum(PyObject *m, PyObject *arg)
{
    sw_py_state *st = sw_py_module_state(m);
    ArrayObject *a = sw_py_array_arg(st, arg, "sum", "a");
    return a ? sw_py_sum(st, a) : NULL;
}

static PyMethodDef ops_methods[] = {
    FASTKW("add", mod_add,
           "add(a, b, out=None, *, queue=None)\n--\n\nout = a + b on the "
           "device (a new Array when out is None); returns out.  With queue, "
           "the work goes to that queue, ordered after the events in "
           "spillway.order_manager[queue], and records its own there."),
    FASTKW("scale", mod_scale,
           "scale(a, s, out=None, *, queue=None)\n--\n\nout = s * a on "
           "the device; returns out.  queue= as for add()."),
    FASTKW("axpy", mod_axpy,
           "axpy(alpha, x, y, *, queue=None)\n--\n\ny = alpha * x + y, in "
           "place on the device; returns y.  queue= as for add()."),
    {"sum", (PyCFunction)(void (*)(void))mod_sum, METH_O,
     "sum(a)\n--\n\nThe sum of a's elements, reduced on the device: a float "
     "for float arrays (accumulated in float64), a complex for complex "
     "ones, an int for integer ones (wrapping at 64 bits) and the count of "
     "True for bool ones."},
    {NULL, NULL, 0, NULL},
};

int sw_py_ops_setup(PyObject *m, sw_py_state *st)
{
    (void)st;
    return PyModule_AddFunctions(m, ops_methods);
}
