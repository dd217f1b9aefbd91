/*
 * pinned.c -- spillway.pinned(*arrays, queue=None): your own kernels on
 * spillway's memory.
 *
 *     with sw.pinned(a, b, out, queue=q) as (va, vb, vo):
 *         my_kernel(vo.ptr, va.ptr, vb.ptr, n)    # on q's stream
 *
 * Entering makes every array resident in one pass (restoring may spill
 * other buffers, never one of the set; a set that cannot fit together is
 * a DeviceMemoryError before anything moves) and pins them: while the
 * block runs they stay where they are.  It yields one PinnedView per
 * array, the memory as the backend sees it: .ptr (an address: sim, host,
 * cuda, hip, ze), .cl_mem and .offset (opencl), .nbytes, .dtype, .shape,
 * __cuda_array_interface__ (cuda, version 3, with the queue's stream) and
 * __dlpack__ / __dlpack_device__.  Leaving, an exception included, ends
 * the pins in stream order (sw_launch_end_q): later spills, frees, reuses
 * and host transfers of those buffers wait, on the device, for the work
 * queued on q before the end.  A view used after its block raises
 * ValueError.
 *
 * queue=None pins for the host: entering waits until the work queued on
 * the arrays has completed (so that NumPy, or a stream you synchronize,
 * may use the memory at once), and your work must be complete when the
 * block ends.
 *
 * Both objects are used by one thread at a time, as a context manager is;
 * the pins themselves are the library's and safe from any thread.
 */
#include "array.h"
#include "dtype.h"

#include "core/trypin.h"

#include <string.h>

/* One pin set.  Neither it nor its views are tracked by the collector: it
 * refers to Arrays, a Queue and a Device, none of which can refer back,
 * and a view refers to it alone (the set does not keep its views), so no
 * cycle can form -- and a pin, entered and left around every launch, costs
 * no collector bookkeeping.  The arrays, their handles and what the pin
 * gave are stored inline: `items` holds arrays[n], then bufs[n] (what
 * sw_launch_begin_q takes), then mem[n]. */
typedef struct PinnedObject {
    PyObject_VAR_HEAD      /* ob_size: the number of arrays */
    QueueObject *queue;    /* strong, or NULL: the host */
    DeviceObject *device;  /* strong: the arrays' device, or NULL (none) */
    /* PINNED_NEW -> _ENTERING -> _IN -> _ENDING -> _DONE, each step
     * claimed with a compare-exchange: two threads entering (or leaving)
     * one set at once pin (or unpin) it once, the other gets an error. */
    _Atomic int state;
    int has_access; /* access[] follows mem[]; else every array written */
    void *items[];
} PinnedObject;

enum { PINNED_NEW, PINNED_IN, PINNED_DONE, PINNED_ENTERING, PINNED_ENDING };

#define PINNED_ITEM_BYTES                                                     \
    (sizeof(PyObject *) + sizeof(sw_buffer *) + sizeof(sw_devmem))

static inline PyObject **pinned_arrays(PinnedObject *p)
{
    return (PyObject **)p->items;
}

static inline sw_buffer **pinned_bufs(PinnedObject *p)
{
    return (sw_buffer **)(pinned_arrays(p) + Py_SIZE(p));
}

static inline sw_devmem *pinned_mem(PinnedObject *p)
{
    return (sw_devmem *)(pinned_bufs(p) + Py_SIZE(p));
}

/* SW_ACCESS_READ or _WRITE per array, or NULL: every one written. */
static inline unsigned char *pinned_access(PinnedObject *p)
{
    return p->has_access ? (unsigned char *)(pinned_mem(p) + Py_SIZE(p))
                         : NULL;
}

typedef struct {
    PyObject_HEAD
    PinnedObject *owner; /* strong */
    Py_ssize_t index;
} PinnedViewObject;

/* ------------------------------------------------------------------------
 * pinned()
 * ---------------------------------------------------------------------- */

/* Whether keyword name is s (len ASCII characters), without strlen:
 * a pin is entered around every launch. */
static inline int kw_is(PyObject *name, const char *s, Py_ssize_t len)
{
    return PyUnicode_Check(name) && PyUnicode_IS_ASCII(name) &&
           PyUnicode_GET_LENGTH(name) == len &&
           memcmp(PyUnicode_1BYTE_DATA(name), s, (size_t)len) == 0;
}

static PyObject *sw_py_pinned(PyObject *module, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames)
{
    sw_py_state *st = sw_py_module_state(module);
    PyObject *queue = NULL, *access = NULL;
    for (Py_ssize_t k = 0; kwnames != NULL && k < PyTuple_GET_SIZE(kwnames);
         k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        if (kw_is(name, "queue", 5)) {
            queue = args[nargs + k];
        } else if (kw_is(name, "access", 6)) {
            access = args[nargs + k];
        } else {
            PyErr_Format(PyExc_TypeError,
                         "pinned() got an unexpected keyword argument %R",
                         name);
            return NULL;
        }
    }
    /* access: one letter per array, "r" (only read: a clean copy stays
     * clean) or "w" (may be written, the default). */
    const char *acc = NULL;
    if (access != NULL && access != Py_None) {
        Py_ssize_t len = 0;
        if (!PyUnicode_Check(access) ||
            (acc = PyUnicode_AsUTF8AndSize(access, &len)) == NULL) {
            if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError))
                PyErr_Format(PyExc_TypeError,
                             "pinned(): access must be a str of 'r' and "
                             "'w', one per array, not %.80s",
                             Py_TYPE(access)->tp_name);
            return NULL;
        }
        if (len != nargs) {
            PyErr_Format(PyExc_ValueError,
                         "pinned(): access %R has %zd letters for %zd "
                         "arrays: one per array ('r' or 'w')",
                         access, len, nargs);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < len; i++)
            if (acc[i] != 'r' && acc[i] != 'w') {
                PyErr_Format(PyExc_ValueError,
                             "pinned(): access %R: letter %zd is %R, not "
                             "'r' (read) or 'w' (written)",
                             access, i + 1,
                             PyUnicode_FromOrdinal((unsigned char)acc[i]));
                return NULL;
            }
    }
    DeviceObject *d = NULL;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyObject *o = args[i];
        ArrayObject *a;
        if (Py_IS_TYPE(o, st->array_type) &&
            !((ArrayObject *)o)->device->closed) {
            a = (ArrayObject *)o; /* the usual case, checked inline */
        } else {
            char what[40];
            snprintf(what, sizeof what, "argument %zd", i + 1);
            if ((a = sw_py_array_arg(st, o, "pinned", what)) == NULL)
                return NULL;
        }
        if (d != NULL && a->device != d) {
            PyErr_Format(PyExc_ValueError,
                         "pinned(): argument %zd is on %U, argument 1 on "
                         "%U: one set is on one device",
                         i + 1, a->device->name, d->name);
            return NULL;
        }
        d = a->device;
    }
    QueueObject *q = NULL;
    if (queue != NULL && queue != Py_None &&
        sw_py_queue_arg(st, queue, d, "pinned", &q) < 0)
        return NULL;
    if (d == NULL && q != NULL)
        d = q->device;
    PinnedObject *p = (PinnedObject *)PyObject_Malloc(
        sizeof(PinnedObject) +
        (size_t)nargs * (PINNED_ITEM_BYTES + (acc != NULL)));
    if (p == NULL)
        return PyErr_NoMemory();
    PyObject_InitVar((PyVarObject *)p, st->pinned_type, nargs);
    p->queue = q != NULL ? (QueueObject *)Py_NewRef(q) : NULL;
    p->device = d != NULL ? (DeviceObject *)Py_NewRef(d) : NULL;
    atomic_init(&p->state, PINNED_NEW);
    p->has_access = acc != NULL;
    for (Py_ssize_t i = 0; acc != NULL && i < nargs; i++)
        pinned_access(p)[i] = acc[i] == 'r' ? SW_ACCESS_READ
                                            : SW_ACCESS_WRITE;
    PyObject **arrays = pinned_arrays(p);
    sw_buffer **bufs = pinned_bufs(p);
    for (Py_ssize_t i = 0; i < nargs; i++) {
        arrays[i] = Py_NewRef(args[i]);
        bufs[i] = ((ArrayObject *)args[i])->buf;
    }
    return (PyObject *)p;
}

/* The end of the pins, in stream order, without the GIL; the caller has
 * claimed PINNED_ENDING. */
static int pinned_end(PinnedObject *p)
{
    int rc = SW_OK;
    if (Py_SIZE(p) > 0) {
        sw_queue *q = p->queue != NULL ? p->queue->q : NULL;
        sw_buffer *const *bufs = pinned_bufs(p);
        size_t n = (size_t)Py_SIZE(p);
        /* With the GIL when nothing waits (trypin.h): two switches of the
         * GIL were a fifth of a pin's cost. */
        rc = sw__launch_end_q_try(q, bufs, n);
        if (rc == SW__AGAIN)
            NOGIL(rc = sw_launch_end_q(q, bufs, n));
    }
    /* Release: a view that reads DONE (acquire) sees the pins ended. */
    atomic_store_explicit(&p->state, PINNED_DONE, memory_order_release);
    if (p->device != NULL)
        sw_py_device_unuse(p->device);
    return rc;
}

static PyObject *pinned_enter(sw_py_state *st, PinnedObject *p);

static PyObject *Pinned_enter(PinnedObject *p, PyObject *unused)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(p));
    if (st == NULL)
        return NULL;
    int fresh = PINNED_NEW;
    if (!atomic_compare_exchange_strong(&p->state, &fresh, PINNED_ENTERING)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "a pinned() block is entered once: call "
                        "spillway.pinned() again for another");
        return NULL;
    }
    PyObject *views = pinned_enter(st, p);
    /* Release: a view that reads IN (acquire) sees the pointers. */
    atomic_store_explicit(&p->state, views != NULL ? PINNED_IN : PINNED_NEW,
                          memory_order_release);
    return views;
}

/* Pin p's arrays (p is PINNED_ENTERING): p itself, the sequence of its
 * views, or NULL with an exception and nothing pinned.  A view is made
 * when it is read (Pinned_item): a pin whose kernel reads two of its
 * eight views makes two objects, not eight and a tuple. */
static PyObject *pinned_enter(sw_py_state *st, PinnedObject *p)
{
    /* The arrays' device may have been closed since pinned() was called;
     * the queue's too. */
    Py_ssize_t n = Py_SIZE(p);
    PyObject **arrays = pinned_arrays(p);
    if (p->device != NULL && p->device->closed) {
        for (Py_ssize_t i = 0; i < n; i++)
            if (sw_py_array_check_device((ArrayObject *)arrays[i]) < 0)
                return NULL;
    }
    if (p->queue != NULL && sw_py_queue_check_open(p->queue) < 0)
        return NULL;
    int rc = SW_OK;
    if (p->device != NULL)
        sw_py_device_use(p->device);
    if (n > 0) {
        sw_queue *q = p->queue != NULL ? p->queue->q : NULL;
        sw_buffer *const *bufs = pinned_bufs(p);
        sw_devmem *mem = pinned_mem(p);
        const unsigned char *acc = pinned_access(p);
        /* Bookkeeping only, with the GIL, when every array is resident and
         * ordered; else the full pin, which may restore, without it. */
        rc = sw__launch_begin_q_try(q, bufs, acc, (size_t)n, mem);
        if (rc == SW__AGAIN && acc == NULL)
            NOGIL_ALLOC(rc, sw_launch_begin_q(q, bufs, (size_t)n, mem));
        else if (rc == SW__AGAIN)
            NOGIL_ALLOC(rc, sw_launch_begin_q_access(q, bufs, acc, (size_t)n,
                                                     mem));
    }
    if (rc != SW_OK) {
        if (p->device != NULL)
            sw_py_device_unuse(p->device);
        return sw_py_raise(st, rc);
    }
    return Py_NewRef((PyObject *)p);
}

static PyObject *Pinned_exit(PinnedObject *p, PyObject *const *args,
                             Py_ssize_t nargs)
{
    (void)args;
    (void)nargs;
    int in = PINNED_IN;
    if (!atomic_compare_exchange_strong(&p->state, &in, PINNED_ENDING)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "__exit__ of a pinned() block that is not entered");
        return NULL;
    }
    int rc = pinned_end(p);
    if (rc != SW_OK) {
        sw_py_state *st = sw_py_type_state(Py_TYPE(p));
        return st != NULL ? sw_py_raise(st, rc) : NULL;
    }
    Py_RETURN_FALSE; /* an exception in the block goes on */
}

static void Pinned_dealloc(PinnedObject *p)
{
    PyTypeObject *tp = Py_TYPE(p);
    if (atomic_load(&p->state) == PINNED_IN) {
        /* Dropped inside its block (its __exit__ never called): the pins
         * end now. */
        PyObject *t, *val, *tb;
        PyErr_Fetch(&t, &val, &tb);
        (void)pinned_end(p);
        PyErr_Restore(t, val, tb);
    }
    PyObject **arrays = pinned_arrays(p);
    for (Py_ssize_t i = 0; i < Py_SIZE(p); i++)
        Py_XDECREF(arrays[i]);
    Py_XDECREF(p->queue);
    Py_XDECREF(p->device);
    PyObject_Free(p);
    Py_DECREF(tp);
}

static PyObject *Pinned_repr(PinnedObject *p)
{
    static const char *const states[] = {"not entered", "entered", "ended",
                                         "entering", "ending"};
    return PyUnicode_FromFormat("<spillway.pinned of %zd array%s on %S, %s>",
                                Py_SIZE(p), Py_SIZE(p) == 1 ? "" : "s",
                                p->device ? (PyObject *)p->device->name
                                          : Py_None,
                                states[atomic_load(&p->state)]);
}

/* The views: p as a sequence, inside its block only. */
static int pinned_in(PinnedObject *p)
{
    if (atomic_load_explicit(&p->state, memory_order_acquire) == PINNED_IN)
        return 0;
    PyErr_SetString(PyExc_ValueError,
                    "the views of a spillway.pinned() set exist inside its "
                    "`with` block only: its arrays are not pinned now");
    return -1;
}

static Py_ssize_t Pinned_len(PinnedObject *p)
{
    return Py_SIZE(p);
}

/* A new view of array i (each read makes one: they are small, and share
 * the set's pins). */
static PyObject *Pinned_item(PinnedObject *p, Py_ssize_t i)
{
    if (i < 0 || i >= Py_SIZE(p)) {
        PyErr_SetString(PyExc_IndexError, "pinned view index out of range");
        return NULL;
    }
    sw_py_state *st = sw_py_type_state(Py_TYPE(p));
    if (st == NULL || pinned_in(p) < 0)
        return NULL;
    PinnedViewObject *v = PyObject_New(PinnedViewObject,
                                       st->pinned_view_type);
    if (v == NULL)
        return NULL;
    v->owner = (PinnedObject *)Py_NewRef(p);
    v->index = i;
    return (PyObject *)v;
}

/* Every view, as a tuple. */
static PyObject *pinned_tuple(PinnedObject *p)
{
    if (pinned_in(p) < 0)
        return NULL;
    PyObject *t = PyTuple_New(Py_SIZE(p));
    for (Py_ssize_t i = 0; t != NULL && i < Py_SIZE(p); i++) {
        PyObject *v = Pinned_item(p, i);
        if (v == NULL)
            Py_CLEAR(t);
        else
            PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

static PyObject *Pinned_subscript(PinnedObject *p, PyObject *key)
{
    if (PyIndex_Check(key)) {
        Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred())
            return NULL;
        return Pinned_item(p, i < 0 ? i + Py_SIZE(p) : i);
    }
    if (!PySlice_Check(key)) {
        PyErr_Format(PyExc_TypeError, "pinned view indices are integers "
                     "or slices, not %.80s", Py_TYPE(key)->tp_name);
        return NULL;
    }
    PyObject *t = pinned_tuple(p);
    PyObject *r = t != NULL ? PyObject_GetItem(t, key) : NULL;
    Py_XDECREF(t);
    return r;
}

static PyObject *Pinned_iter(PinnedObject *p)
{
    PyObject *t = pinned_tuple(p);
    PyObject *it = t != NULL ? PyObject_GetIter(t) : NULL;
    Py_XDECREF(t);
    return it;
}

static PyMethodDef Pinned_methods[] = {
    {"__enter__", (PyCFunction)(void (*)(void))Pinned_enter, METH_NOARGS,
     NULL},
    {"__exit__", (PyCFunction)(void (*)(void))Pinned_exit, METH_FASTCALL,
     NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot Pinned_slots[] = {
    {Py_tp_doc, "What spillway.pinned() returns: a context manager whose "
                "block holds the arrays' pins."},
    {Py_tp_dealloc, Pinned_dealloc},
    {Py_tp_repr, Pinned_repr},
    {Py_tp_methods, Pinned_methods},
    {Py_sq_length, Pinned_len},
    {Py_sq_item, Pinned_item},
    {Py_mp_length, Pinned_len},
    {Py_mp_subscript, Pinned_subscript},
    {Py_tp_iter, Pinned_iter},
    {0, NULL},
};

static PyType_Spec Pinned_spec = {
    .name = "spillway.Pinned",
    .basicsize = sizeof(PinnedObject),
    .itemsize = PINNED_ITEM_BYTES,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Pinned_slots,
};

/* ------------------------------------------------------------------------
 * PinnedView
 * ---------------------------------------------------------------------- */

/* -1 with ValueError when the view's block has ended. */
static int view_live(PinnedViewObject *v)
{
    if (atomic_load_explicit(&v->owner->state, memory_order_acquire) ==
        PINNED_IN)
        return 0;
    PyErr_Format(PyExc_ValueError,
                 "this view of a pinned array was used after its "
                 "`with spillway.pinned(...)` block ended: its memory may "
                 "have moved since (pin the array again)");
    return -1;
}

static sw_devmem view_mem(PinnedViewObject *v)
{
    return pinned_mem(v->owner)[v->index];
}

static int view_readonly(PinnedViewObject *v)
{
    const unsigned char *acc = pinned_access(v->owner);
    return acc != NULL && acc[v->index] == SW_ACCESS_READ;
}

static ArrayObject *view_array(PinnedViewObject *v)
{
    return (ArrayObject *)pinned_arrays(v->owner)[v->index];
}

static int view_linear(PinnedViewObject *v)
{
    return sw_py_dl_linear(view_array(v)->device);
}

static PyObject *View_get_ptr(PinnedViewObject *v, void *c)
{
    if (view_live(v) < 0)
        return NULL;
    if (!view_linear(v)) {
        PyErr_Format(PyExc_AttributeError,
                     "%U's memory has no addresses: a pinned view there "
                     "has .cl_mem and .offset",
                     view_array(v)->device->name);
        return NULL;
    }
    sw_devmem m = view_mem(v);
    return PyLong_FromUnsignedLongLong(
        (unsigned long long)(m.base ? m.base + m.offset : 0));
}

static PyObject *View_get_cl_mem(PinnedViewObject *v, void *c)
{
    if (view_live(v) < 0)
        return NULL;
    if (view_linear(v)) {
        PyErr_Format(PyExc_AttributeError,
                     "%U's memory is addressed: a pinned view there has "
                     ".ptr (.cl_mem is OpenCL's)",
                     view_array(v)->device->name);
        return NULL;
    }
    return PyLong_FromUnsignedLongLong((unsigned long long)view_mem(v).base);
}

static PyObject *View_get_offset(PinnedViewObject *v, void *c)
{
    if (view_live(v) < 0)
        return NULL;
    return PyLong_FromSize_t(view_mem(v).offset);
}

static PyObject *View_get_nbytes(PinnedViewObject *v, void *c)
{
    if (view_live(v) < 0)
        return NULL;
    return PyLong_FromSize_t(view_array(v)->nbytes);
}

static PyObject *View_get_dtype(PinnedViewObject *v, void *c)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(v));
    if (st == NULL || view_live(v) < 0)
        return NULL;
    return sw_py_dtype_obj(st, view_array(v)->dtype);
}

static PyObject *shape_tuple(ArrayObject *a)
{
    int nd = SW_PY_NDIM(a);
    PyObject *t = PyTuple_New(nd);
    for (int i = 0; t != NULL && i < nd; i++) {
        PyObject *x = PyLong_FromSsize_t(a->shape[i]);
        if (x == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

static PyObject *View_get_shape(PinnedViewObject *v, void *c)
{
    if (view_live(v) < 0)
        return NULL;
    return shape_tuple(view_array(v));
}

static PyObject *View_get_array(PinnedViewObject *v, void *c)
{
    return Py_NewRef((PyObject *)view_array(v));
}

static PyObject *View_get_readonly(PinnedViewObject *v, void *c)
{
    (void)c;
    if (view_live(v) < 0)
        return NULL;
    return PyBool_FromLong(view_readonly(v));
}

static PyObject *View_get_queue(PinnedViewObject *v, void *c)
{
    return Py_NewRef(v->owner->queue ? (PyObject *)v->owner->queue : Py_None);
}

/* __cuda_array_interface__, version 3 (numba's specification): on CUDA
 * only; "stream" is the queue's CUstream (a consumer synchronizes with
 * it), None for the host's pin (the work on the arrays is complete). */
static PyObject *View_get_cai(PinnedViewObject *v, void *c)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(v));
    if (st == NULL || view_live(v) < 0)
        return NULL;
    int type = 0, id = 0;
    sw_py_dl_device_of(view_array(v)->device, &type, &id);
    if (type != 2 /* kDLCUDA */) {
        PyErr_Format(PyExc_AttributeError,
                     "__cuda_array_interface__ is CUDA's: %U is not a CUDA "
                     "device (use .ptr, or __dlpack__)",
                     view_array(v)->device->name);
        return NULL;
    }
    const sw_py_dtype_info *info = &sw_py_dtypes[view_array(v)->dtype];
    if (info->fmt == NULL) { /* bfloat16: no typestr the interface knows */
        PyErr_SetString(PyExc_AttributeError,
                        "__cuda_array_interface__ has no bfloat16 typestr: "
                        "use __dlpack__");
        return NULL;
    }
    const uint16_t probe = 1;
    char order = info->size == 1 ? '|'
                 : *(const uint8_t *)&probe == 1 ? '<'
                                                  : '>';
    char typestr[16];
    snprintf(typestr, sizeof typestr, "%c%s", order, info->np_str);
    PyObject *stream = Py_None;
    PyObject *owned = NULL;
    if (v->owner->queue != NULL) {
        uintptr_t h = 0;
        int rc;
        NOGIL(rc = sw_queue_native(v->owner->queue->q, &h));
        if (rc != SW_OK)
            return sw_py_raise(st, rc);
        stream = owned = PyLong_FromUnsignedLongLong((unsigned long long)h);
        if (owned == NULL)
            return NULL;
    }
    sw_devmem m = view_mem(v);
    PyObject *shape = shape_tuple(view_array(v));
    PyObject *r = shape == NULL
                      ? NULL
                      : Py_BuildValue(
                            "{s:N,s:s,s:(KO),s:i,s:O,s:O}", "shape", shape,
                            "typestr", typestr, "data",
                            (unsigned long long)(m.base ? m.base + m.offset
                                                        : 0),
                            view_readonly(v) ? Py_True : Py_False,
                            "version", 3, "strides", Py_None,
                            "stream", stream);
    Py_XDECREF(owned);
    return r;
}

static PyObject *View_dlpack(PinnedViewObject *v, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kwnames)
{
    if (view_live(v) < 0)
        return NULL;
    return sw_py_dlpack_pinned(view_array(v), view_mem(v),
                               v->owner->queue ? v->owner->queue->q : NULL,
                               view_readonly(v), args, nargs, kwnames);
}

static PyObject *View_dlpack_device(PinnedViewObject *v, PyObject *unused)
{
    if (view_live(v) < 0)
        return NULL;
    return sw_py_array_dlpack_device(view_array(v), NULL);
}

static void View_dealloc(PinnedViewObject *v)
{
    PyTypeObject *tp = Py_TYPE(v);
    Py_XDECREF(v->owner);
    PyObject_Free(v);
    Py_DECREF(tp);
}

static PyObject *View_repr(PinnedViewObject *v)
{
    if (atomic_load_explicit(&v->owner->state, memory_order_acquire) !=
        PINNED_IN)
        return PyUnicode_FromString("<spillway.PinnedView, its block "
                                    "ended>");
    sw_devmem m = view_mem(v);
    if (view_linear(v))
        return PyUnicode_FromFormat(
            "<spillway.PinnedView %s %zu bytes at %p on %U>",
            sw_py_dtypes[view_array(v)->dtype].name, view_array(v)->nbytes,
            (void *)(m.base ? m.base + m.offset : 0),
            view_array(v)->device->name);
    return PyUnicode_FromFormat(
        "<spillway.PinnedView %s %zu bytes, cl_mem %p + %zu on %U>",
        sw_py_dtypes[view_array(v)->dtype].name, view_array(v)->nbytes,
        (void *)m.base, m.offset, view_array(v)->device->name);
}

static PyMethodDef View_methods[] = {
    FASTKW("__dlpack__", View_dlpack,
           "__dlpack__(stream=None, *, max_version=None, dl_device=None, "
           "copy=None)\n--\n\nThe pinned memory as a DLPack capsule, valid "
           "inside the block only (no lease: the pin holds it).  copy=True "
           "is refused: ask the Array for a copy."),
    {"__dlpack_device__", (PyCFunction)(void (*)(void))View_dlpack_device,
     METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef View_getset[] = {
    {"ptr", (getter)View_get_ptr, NULL,
     "The device address of the array's first byte (an int), where the "
     "backend has addresses (sim, host, cuda, hip, ze).", NULL},
    {"cl_mem", (getter)View_get_cl_mem, NULL,
     "OpenCL: the cl_mem holding the array (an int: "
     "pyopencl.Buffer.from_int_ptr); the array starts .offset bytes in.",
     NULL},
    {"offset", (getter)View_get_offset, NULL,
     "The array's byte offset in the backend's allocation (OpenCL: in "
     ".cl_mem).", NULL},
    {"nbytes", (getter)View_get_nbytes, NULL, "Bytes of the array.", NULL},
    {"dtype", (getter)View_get_dtype, NULL, "The element type.", NULL},
    {"shape", (getter)View_get_shape, NULL, "The shape (C order).", NULL},
    {"array", (getter)View_get_array, NULL, "The Array pinned.", NULL},
    {"readonly", (getter)View_get_readonly, NULL,
     "True when pinned with access 'r': the kernel only reads it.", NULL},
    {"queue", (getter)View_get_queue, NULL,
     "The Queue the pin is for, or None (the host).", NULL},
    {"__cuda_array_interface__", (getter)View_get_cai, NULL,
     "CUDA only: version 3 of the interface, with the queue's stream.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot View_slots[] = {
    {Py_tp_doc, "One array's memory inside a `with spillway.pinned(...)` "
                "block: valid there only."},
    {Py_tp_dealloc, View_dealloc},
    {Py_tp_repr, View_repr},
    {Py_tp_methods, View_methods},
    {Py_tp_getset, View_getset},
    {0, NULL},
};

static PyType_Spec View_spec = {
    .name = "spillway.PinnedView",
    .basicsize = sizeof(PinnedViewObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = View_slots,
};

static PyMethodDef pinned_methods[] = {
    FASTKW("pinned", sw_py_pinned,
           "pinned(*arrays, queue=None, access=None)\n--\n\n"
           "A context manager: `with pinned(a, b, queue=q) as (va, vb):` "
           "makes the arrays resident in one pass, pins them for the block "
           "and yields one PinnedView per array (.ptr, or .cl_mem and "
           ".offset on OpenCL; .nbytes, .dtype, .shape; "
           "__cuda_array_interface__ on CUDA; __dlpack__), for your own "
           "kernels on q's stream (Queue.native).  Leaving ends the pins in "
           "stream order: later spills, frees and host transfers of the "
           "arrays wait on the device for what you queued on q.  "
           "queue=None pins for the host: entering waits for the arrays' "
           "queued work, and yours must be complete when the block ends.  "
           "access: a str of one letter per array, 'r' for one your kernel "
           "only reads (a restored array then keeps its host copy, and "
           "its next eviction copies nothing) or 'w' (the default: may be "
           "written).  "
           "DeviceMemoryError, before anything moves, when the set cannot "
           "fit together; ValueError for arrays of different devices or a "
           "queue of another."),
    {NULL, NULL, 0, NULL},
};

int sw_py_pinned_setup(PyObject *m, sw_py_state *st)
{
    if ((st->pinned_type = sw_py_add_type(m, &Pinned_spec)) == NULL ||
        (st->pinned_view_type = sw_py_add_type(m, &View_spec)) == NULL)
        return -1;
    return PyModule_AddFunctions(m, pinned_methods);
}
