/*
 * accounting.c -- what a device holds and has done: memory_info() (the
 * MemoryInfo record), memory_peak() (PeakScope, a context manager over a
 * library peak scope: scopes nest, and neither a reset nor an inner scope
 * disturbs an outer one), reset_peak_memory(), the budget, empty_cache()
 * and synchronize().
 */
#include "device.h"

#include <string.h>

/* ------------------------------------------------------------------------
 * memory_peak(): a context manager over a peak scope
 * ---------------------------------------------------------------------- */

/* A scope's life: created -> entering -> open -> closing -> closed, each
 * step claimed with a compare-exchange, so that two threads entering (or
 * leaving) one scope at once make one scope, and the loser gets an error
 * (or nothing to do).  scope and peak are read and changed under mu, a
 * leaf lock taken only with the thread state released: a thread reading
 * .bytes while another leaves the block never reads a scope being ended. */
enum { PEAK_NEW, PEAK_OPEN, PEAK_CLOSED, PEAK_ENTERING, PEAK_CLOSING };

typedef struct {
    PyObject_HEAD
    DeviceObject *device;
    _Atomic int stage;
    pthread_mutex_t mu;
    sw_peak_scope *scope; /* while open (mu) */
    uint64_t peak;        /* once closed (mu; then fixed) */
} PeakObject;

static int Peak_traverse(PeakObject *p, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(p));
    Py_VISIT(p->device);
    return 0;
}

static void peak_end(PeakObject *p)
{
    int open = PEAK_OPEN;
    if (!atomic_compare_exchange_strong(&p->stage, &open, PEAK_CLOSING))
        return;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&p->mu);
    uint64_t peak = 0;
    int rc = sw_peak_scope_end(p->scope, &peak);
    p->scope = NULL;
    p->peak = rc == SW_OK ? peak : 0;
    pthread_mutex_unlock(&p->mu);
    Py_END_ALLOW_THREADS
    atomic_store(&p->stage, PEAK_CLOSED);
    sw_py_device_unuse(p->device);
}

static void Peak_dealloc(PeakObject *p)
{
    PyTypeObject *tp = Py_TYPE(p);
    PyObject_GC_UnTrack(p);
    if (p->device != NULL)
        peak_end(p);
    Py_CLEAR(p->device);
    pthread_mutex_destroy(&p->mu);
    tp->tp_free((PyObject *)p);
    Py_DECREF(tp);
}

static PyObject *Peak_enter(PeakObject *p, PyObject *unused)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(p));
    if (st == NULL)
        return NULL;
    int fresh = PEAK_NEW;
    if (!atomic_compare_exchange_strong(&p->stage, &fresh, PEAK_ENTERING)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "a memory_peak() scope can be entered only once");
        return NULL;
    }
    /* The device's use is the open scope's, dropped when it closes. */
    sw_device *dev = sw_py_device_try_use(p->device);
    if (dev == NULL) {
        atomic_store(&p->stage, PEAK_NEW);
        if (sw_py_device_check_open(p->device) == 0) /* closing */
            sw_py_raise(st, SW_PY_CLOSED);
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&p->mu);
    sw_peak_scope *s = NULL;
    rc = sw_peak_scope_begin(dev, &s);
    p->scope = s;
    pthread_mutex_unlock(&p->mu);
    Py_END_ALLOW_THREADS
    if (rc != SW_OK) {
        sw_py_device_unuse(p->device);
        atomic_store(&p->stage, PEAK_NEW); /* nothing changed */
        return sw_py_raise(st, rc);
    }
    atomic_store(&p->stage, PEAK_OPEN);
    return Py_NewRef(p);
}

static PyObject *Peak_exit(PeakObject *p, PyObject *args)
{
    peak_end(p);
    Py_RETURN_FALSE;
}

static PyObject *Peak_get_bytes(PeakObject *p, void *c)
{
    int stage = atomic_load(&p->stage);
    if (stage == PEAK_NEW || stage == PEAK_ENTERING)
        Py_RETURN_NONE;
    uint64_t peak = 0;
    int rc = SW_OK;
    /* Open or closing: the scope so far, or its final peak once ended. */
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&p->mu);
    if (p->scope != NULL)
        rc = sw_peak_scope_peak(p->scope, &peak);
    else
        peak = p->peak;
    pthread_mutex_unlock(&p->mu);
    Py_END_ALLOW_THREADS
    if (rc != SW_OK) {
        sw_py_state *st = sw_py_type_state(Py_TYPE(p));
        return st ? sw_py_raise(st, rc) : NULL;
    }
    return PyLong_FromUnsignedLongLong(peak);
}

static PyObject *Peak_get_device(PeakObject *p, void *c)
{
    return Py_NewRef(p->device);
}

static PyObject *Peak_repr(PeakObject *p)
{
    static const char *const stages[] = {"not entered", "open", "closed",
                                         "entering", "closing"};
    int stage = atomic_load(&p->stage);
    if (stage == PEAK_CLOSED)
        return PyUnicode_FromFormat("memory_peak(%R, bytes=%llu)",
                                    p->device->name,
                                    (unsigned long long)p->peak);
    return PyUnicode_FromFormat("memory_peak(%R, %s)", p->device->name,
                                stages[stage]);
}

static PyMethodDef Peak_methods[] = {
    {"__enter__", (PyCFunction)(void (*)(void))Peak_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))Peak_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Peak_getset[] = {
    {"bytes", (getter)Peak_get_bytes, NULL,
     "The peak of in_use inside the block: so far while it runs, final "
     "after it; None before it is entered.", NULL},
    {"device", (getter)Peak_get_device, NULL, "The device measured.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Peak_slots[] = {
    {Py_tp_doc, "The context manager returned by memory_peak()."},
    {Py_tp_dealloc, Peak_dealloc},
    {Py_tp_traverse, Peak_traverse},
    {Py_tp_repr, Peak_repr},
    {Py_tp_methods, Peak_methods},
    {Py_tp_getset, Peak_getset},
    {0, NULL},
};

PyType_Spec sw_py_peak_spec = {
    .name = "spillway.PeakScope",
    .basicsize = sizeof(PeakObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Peak_slots,
};

/* ------------------------------------------------------------------------
 * MemoryInfo: a named record (structseq)
 * ---------------------------------------------------------------------- */

static PyStructSequence_Field meminfo_fields[] = {
    {"in_use", "bytes held by live arrays (sizes rounded up to 512)"},
    {"peak", "highest in_use since the device was opened or "
             "reset_peak_memory()"},
    {"cached", "bytes of freed blocks kept for reuse"},
    {"spilled", "bytes of live arrays held in host memory"},
    {"device_free", "what the driver says is free (None if it cannot tell)"},
    {"device_total", "the device's capacity (None if unknown)"},
    {"budget", "the memory budget in bytes, or None"},
    {"allocs", "allocations since the device was opened"},
    {"frees", "buffers released"},
    {"spills", "buffers spilled to host memory"},
    {"restores", "buffers brought back to the device"},
    {"spilled_bytes_total", "bytes spilled in all"},
    {"restored_bytes_total", "bytes restored in all"},
    {"spill_seconds", "time spent spilling"},
    {"restore_seconds", "time spent restoring"},
    {"alloc_retries", "allocation attempts repeated after a failure"},
    {"ooms", "allocations that failed for good"},
    {"gc_runs", "garbage collections run under memory pressure"},
    /* Appended (issue 34): every other tier of sw_memory_info, so that the
     * record the seed names shows the host and the disk as well. */
    {"live_buffers", "live arrays' buffers, spilled ones included"},
    {"max_reserved", "highest in_use + cached since the device was opened "
                     "or reset_peak_memory()"},
    {"host_pool", "idle host memory kept by the staging pool for spills"},
    {"host_pool_limit", "the staging pool's bound (set_host_pool_limit)"},
    {"host_copies", "bytes of resident arrays with a clean copy on the "
                    "host"},
    {"clean_evictions", "evictions that copied nothing (counted in spills)"},
    {"host_budget", "the host budget in bytes (set_host_budget), or None"},
    {"spilled_disk", "bytes of spilled arrays in the spill file (of "
                     "spilled)"},
    {"disk_write_bytes", "bytes written to the spill file"},
    {"disk_read_bytes", "bytes read from the spill file"},
    {"disk_write_seconds", "time spent writing the spill file"},
    {"disk_read_seconds", "time spent reading the spill file"},
    {NULL, NULL},
};

enum { MEMINFO_FIELDS = 30 };

static PyStructSequence_Desc meminfo_desc = {
    "spillway.MemoryInfo",
    "Memory accounting of one device (spillway.memory_info()).",
    meminfo_fields,
    MEMINFO_FIELDS,
};

static PyObject *meminfo_new(sw_py_state *st, const sw_memory_info *m)
{
    PyObject *r = PyStructSequence_New(st->meminfo_type);
    if (r == NULL)
        return NULL;
    PyObject *v[MEMINFO_FIELDS];
    v[0] = PyLong_FromUnsignedLongLong(m->in_use);
    v[1] = PyLong_FromUnsignedLongLong(m->peak);
    v[2] = PyLong_FromUnsignedLongLong(m->cached);
    v[3] = PyLong_FromUnsignedLongLong(m->spilled);
    v[4] = m->device_free_known ? PyLong_FromUnsignedLongLong(m->device_free)
                                : Py_NewRef(Py_None);
    v[5] = m->device_total ? PyLong_FromUnsignedLongLong(m->device_total)
                           : Py_NewRef(Py_None);
    v[6] = m->budget ? PyLong_FromUnsignedLongLong(m->budget)
                     : Py_NewRef(Py_None);
    v[7] = PyLong_FromUnsignedLongLong(m->allocs);
    v[8] = PyLong_FromUnsignedLongLong(m->frees);
    v[9] = PyLong_FromUnsignedLongLong(m->spills);
    v[10] = PyLong_FromUnsignedLongLong(m->restores);
    v[11] = PyLong_FromUnsignedLongLong(m->spilled_bytes_total);
    v[12] = PyLong_FromUnsignedLongLong(m->restored_bytes_total);
    v[13] = PyFloat_FromDouble(m->spill_seconds);
    v[14] = PyFloat_FromDouble(m->restore_seconds);
    v[15] = PyLong_FromUnsignedLongLong(m->alloc_retries);
    v[16] = PyLong_FromUnsignedLongLong(m->ooms);
    v[17] = PyLong_FromUnsignedLongLong(m->gc_runs);
    v[18] = PyLong_FromUnsignedLongLong(m->live_buffers);
    v[19] = PyLong_FromUnsignedLongLong(m->peak_reserved);
    v[20] = PyLong_FromUnsignedLongLong(m->host_pool);
    v[21] = PyLong_FromUnsignedLongLong(m->host_pool_limit);
    v[22] = PyLong_FromUnsignedLongLong(m->host_copies);
    v[23] = PyLong_FromUnsignedLongLong(m->clean_evictions);
    v[24] = m->host_budget ? PyLong_FromUnsignedLongLong(m->host_budget)
                           : Py_NewRef(Py_None);
    v[25] = PyLong_FromUnsignedLongLong(m->spilled_disk);
    v[26] = PyLong_FromUnsignedLongLong(m->disk_write_bytes);
    v[27] = PyLong_FromUnsignedLongLong(m->disk_read_bytes);
    v[28] = PyFloat_FromDouble(m->disk_write_seconds);
    v[29] = PyFloat_FromDouble(m->disk_read_seconds);
    int bad = 0;
    for (int i = 0; i < MEMINFO_FIELDS; i++) {
        if (v[i] == NULL)
            bad = 1;
        PyStructSequence_SetItem(r, i, v[i] ? v[i] : Py_NewRef(Py_None));
    }
    if (bad) {
        Py_DECREF(r);
        return NULL;
    }
    return r;
}

/* ------------------------------------------------------------------------
 * Module functions
 * ---------------------------------------------------------------------- */

/* Parse a lone optional device= argument. */
static DeviceObject *device_arg(PyObject *m, const char *fname,
                                PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    static const char *const names[] = {"device"};
    PyObject *v[1];
    if (sw_py_parse_args(fname, args, nargs, kwnames, names, 1, 1, 0, v) < 0)
        return NULL;
    return sw_py_resolve_device(sw_py_module_state(m), v[0]);
}

static PyObject *mod_memory_info(PyObject *m, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames)
{
    sw_py_state *st = sw_py_module_state(m);
    DeviceObject *d = device_arg(m, "memory_info", args, nargs, kwnames);
    if (d == NULL)
        return NULL;
    sw_memory_info info;
    int rc;
    SW_PY_DEVICE_CALL(d, rc, sw_memory_info_get(dev_, &info));
    Py_DECREF(d);
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    return meminfo_new(st, &info);
}

static PyObject *mod_reset_peak_memory(PyObject *m, PyObject *const *args,
                                       Py_ssize_t nargs, PyObject *kwnames)
{
    sw_py_state *st = sw_py_module_state(m);
    DeviceObject *d = device_arg(m, "reset_peak_memory", args, nargs,
                                 kwnames);
    if (d == NULL)
        return NULL;
    int rc;
    SW_PY_DEVICE_CALL(d, rc, sw_reset_peak(dev_));
    Py_DECREF(d);
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    Py_RETURN_NONE;
}

static PyObject *mod_empty_cache(PyObject *m, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames)
{
    sw_py_state *st = sw_py_module_state(m);
    DeviceObject *d = device_arg(m, "empty_cache", args, nargs, kwnames);
    if (d == NULL)
        return NULL;
    int rc;
    SW_PY_DEVICE_CALL(d, rc, sw_empty_cache(dev_));
    Py_DECREF(d);
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    Py_RETURN_NONE;
}

static PyObject *mod_synchronize(PyObject *m, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames)
{
    sw_py_state *st = sw_py_module_state(m);
    DeviceObject *d = device_arg(m, "synchronize", args, nargs, kwnames);
    if (d == NULL)
        return NULL;
    int rc;
    SW_PY_DEVICE_CALL(d, rc, sw_device_synchronize(dev_));
    Py_DECREF(d);
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    Py_RETURN_NONE;
}

static PyObject *mod_get_memory_budget(PyObject *m, PyObject *const *args,
                                       Py_ssize_t nargs, PyObject *kwnames)
{
    sw_py_state *st = sw_py_module_state(m);
    DeviceObject *d = device_arg(m, "get_memory_budget", args, nargs,
                                 kwnames);
    if (d == NULL)
        return NULL;
    uint64_t bytes = 0;
    int rc;
    SW_PY_DEVICE_CALL(d, rc, sw_get_memory_budget(dev_, &bytes));
    Py_DECREF(d);
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    if (bytes == 0)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(bytes);
}

/* set_clear_new(on, device=None): every new buffer reads as zeros until
 * written (sw_set_clear_new).  A switch takes True or False (a NumPy bool,
 * 0 or 1 too); anything else is a TypeError, not a truth value. */
static PyObject *mod_set_clear_new(PyObject *m, PyObject *const *args,
                                   Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"on", "device"};
    PyObject *v[2];
    if (sw_py_parse_args("set_clear_new", args, nargs, kwnames, names, 2, 2,
                         1, v) < 0)
        return NULL;
    sw_py_state *st = sw_py_module_state(m);
    int on;
    const char *tn = Py_TYPE(v[0])->tp_name;
    if (PyBool_Check(v[0]) || strcmp(tn, "numpy.bool") == 0 ||
        strcmp(tn, "numpy.bool_") == 0) {
        on = PyObject_IsTrue(v[0]);
        if (on < 0)
            return NULL;
    } else if (PyLong_CheckExact(v[0])) {
        long x = PyLong_AsLong(v[0]);
        if (x == -1 && PyErr_Occurred())
            PyErr_Clear();
        if (x != 0 && x != 1)
            return PyErr_Format(PyExc_ValueError, "set_clear_new(): on must "
                                "be True or False, not %R", v[0]);
        on = (int)x;
    } else {
        return PyErr_Format(PyExc_TypeError, "set_clear_new(): on must be "
                            "True or False, not %.80s", tn);
    }
    DeviceObject *d = sw_py_resolve_device(st, v[1]);
    if (d == NULL)
        return NULL;
    int rc;
    SW_PY_DEVICE_CALL(d, rc, sw_set_clear_new(dev_, on));
    Py_DECREF(d);
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    Py_RETURN_NONE;
}

static PyObject *mod_get_clear_new(PyObject *m, PyObject *const *args,
                                   Py_ssize_t nargs, PyObject *kwnames)
{
    sw_py_state *st = sw_py_module_state(m);
    DeviceObject *d = device_arg(m, "get_clear_new", args, nargs, kwnames);
    if (d == NULL)
        return NULL;
    int on = 0, rc;
    SW_PY_DEVICE_CALL(d, rc, sw_get_clear_new(dev_, &on));
    Py_DECREF(d);
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    return PyBool_FromLong(on);
}

static PyObject *mod_set_memory_budget(PyObject *m, PyObject *const *args,
                                       Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"nbytes", "device"};
    PyObject *v[2];
    if (sw_py_parse_args("set_memory_budget", args, nargs, kwnames, names, 2,
                         2, 1, v) < 0)
        return NULL;
    sw_py_state *st = sw_py_module_state(m);
    DeviceObject *d = sw_py_resolve_device(st, v[1]);
    if (d == NULL)
        return NULL;
    uint64_t bytes = 0;
    if (sw_py_parse_size(st, v[0], "set_memory_budget()", SW_PY_SIZE_DEVICE,
                         d, &bytes) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    int rc;
    SW_PY_DEVICE_CALL(d, rc, sw_set_memory_budget(dev_, bytes));
    Py_DECREF(d);
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    Py_RETURN_NONE;
}

static PyObject *mod_memory_peak(PyObject *m, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames)
{
    sw_py_state *st = sw_py_module_state(m);
    DeviceObject *d = device_arg(m, "memory_peak", args, nargs, kwnames);
    if (d == NULL)
        return NULL;
    PeakObject *p = PyObject_GC_New(PeakObject, st->peak_type);
    if (p == NULL) {
        Py_DECREF(d);
        return NULL;
    }
    p->device = d; /* takes the reference */
    p->scope = NULL;
    atomic_init(&p->stage, PEAK_NEW);
    pthread_mutex_init(&p->mu, NULL);
    p->peak = 0;
    PyObject_GC_Track(p);
    return (PyObject *)p;
}

static PyMethodDef accounting_methods[] = {
    FASTKW("memory_info", mod_memory_info,
           "memory_info(device=None)\n--\n\nThe device's accounting, a "
           "MemoryInfo record: device memory (in_use, peak, cached, "
           "spilled, the driver's free and total, budget), the counters and "
           "the time spent moving, and the host and disk tiers (host_pool, "
           "host_copies, clean_evictions, host_budget, spilled_disk, the "
           "disk's bytes and seconds)."),
    FASTKW("reset_peak_memory", mod_reset_peak_memory,
           "reset_peak_memory(device=None)\n--\n\npeak = in_use (open "
           "memory_peak() scopes are not disturbed)."),
    FASTKW("memory_peak", mod_memory_peak,
           "memory_peak(device=None)\n--\n\nA context manager: "
           "`with memory_peak() as p: ...` then p.bytes is the peak of "
           "in_use inside the block.  Scopes nest; each reports its own."),
    FASTKW("set_memory_budget", mod_set_memory_budget,
           "set_memory_budget(nbytes, device=None)\n--\n\nBound in_use + "
           "cached to nbytes: bytes (an int), a size ('512M', '2GiB'), a "
           "fraction of the device's memory (a float, NumPy float, Fraction "
           "or Decimal in (0, 1]; at least one byte) or None (no budget).  "
           "Beyond it arrays spill to host memory, not least recently used "
           "first: arrays advised cold and clean copies read on the device "
           "since their one restore go first, however recent, then the "
           "least recently used.  A budget below what is held now spills at "
           "once."),
    FASTKW("set_clear_new", mod_set_clear_new,
           "set_clear_new(on, device=None)\n--\n\nWith on True, every new "
           "array or buffer of the device -- fresh from the driver or "
           "reused from spillway's cache -- reads as zeros until written: "
           "a fill queued before its first use, never a wait (a reused "
           "block otherwise holds its last owner's bytes).  "
           "$SPILLWAY_CLEAR_NEW=1 sets it at open."),
    FASTKW("get_clear_new", mod_get_clear_new,
           "get_clear_new(device=None)\n--\n\nWhether new buffers of the "
           "device are cleared (set_clear_new)."),
    FASTKW("get_memory_budget", mod_get_memory_budget,
           "get_memory_budget(device=None)\n--\n\nThe budget in bytes, or "
           "None."),
    FASTKW("empty_cache", mod_empty_cache,
           "empty_cache(device=None)\n--\n\nReturn every cached block to "
           "the device."),
    FASTKW("synchronize", mod_synchronize,
           "synchronize(device=None)\n--\n\nWait for all work queued on the "
           "device."),
    {NULL, NULL, 0, NULL},
};

int sw_py_accounting_setup(PyObject *m, sw_py_state *st)
{
    if ((st->peak_type = sw_py_add_type(m, &sw_py_peak_spec)) == NULL)
        return -1;
    st->meminfo_type = PyStructSequence_NewType(&meminfo_desc);
    if (st->meminfo_type == NULL || PyModule_AddType(m, st->meminfo_type) < 0)
        return -1;
    return PyModule_AddFunctions(m, accounting_methods);
}
