/*
 * stats.c -- the memory API people already know from PyTorch and CuPy:
 * memory_stats() (a dict, flat names and PyTorch's dotted ones),
 * reset_accumulated_memory_stats(), mem_get_info(), memory_snapshot()
 * (every live buffer), and the host's bounds: set_host_budget(),
 * set_host_pool_limit() (their sizes read by size.c).
 */
#include "device.h"

#include <string.h>

/* ------------------------------------------------------------------------
 * memory_stats, reset_accumulated_memory_stats, mem_get_info
 * ---------------------------------------------------------------------- */

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

static int info_of(sw_py_state *st, DeviceObject *d, sw_memory_info *info)
{
    int rc;
    SW_PY_DEVICE_CALL(d, rc, sw_memory_info_get(dev_, info));
    if (rc != SW_OK) {
        sw_py_raise(st, rc);
        return -1;
    }
    return 0;
}

static int put_u(PyObject *dict, const char *key, uint64_t v)
{
    PyObject *o = PyLong_FromUnsignedLongLong(v);
    int rc = o ? PyDict_SetItemString(dict, key, o) : -1;
    Py_XDECREF(o);
    return rc;
}

static int put_f(PyObject *dict, const char *key, double v)
{
    PyObject *o = PyFloat_FromDouble(v);
    int rc = o ? PyDict_SetItemString(dict, key, o) : -1;
    Py_XDECREF(o);
    return rc;
}

static int put_opt(PyObject *dict, const char *key, int known, uint64_t v)
{
    if (!known)
        return PyDict_SetItemString(dict, key, Py_None);
    return put_u(dict, key, v);
}

/* Flat names: memory_info's fields and a few more; dotted names: PyTorch's
 * torch.cuda.memory_stats() keys for the same figures, so that code
 * written against PyTorch reads spillway's unchanged.  docs/python.md has
 * the table. */
static PyObject *stats_dict(const sw_memory_info *m)
{
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    uint64_t reserved = m->in_use + m->cached;
    int bad =
        put_u(d, "in_use", m->in_use) < 0 || put_u(d, "peak", m->peak) < 0 ||
        put_u(d, "cached", m->cached) < 0 ||
        put_u(d, "spilled", m->spilled) < 0 ||
        put_opt(d, "device_free", m->device_free_known, m->device_free) < 0 ||
        put_opt(d, "device_total", m->device_total != 0, m->device_total) <
            0 ||
        put_opt(d, "budget", m->budget != 0, m->budget) < 0 ||
        put_u(d, "allocs", m->allocs) < 0 || put_u(d, "frees", m->frees) < 0 ||
        put_u(d, "spills", m->spills) < 0 ||
        put_u(d, "restores", m->restores) < 0 ||
        put_u(d, "spilled_bytes_total", m->spilled_bytes_total) < 0 ||
        put_u(d, "restored_bytes_total", m->restored_bytes_total) < 0 ||
        put_f(d, "spill_seconds", m->spill_seconds) < 0 ||
        put_f(d, "restore_seconds", m->restore_seconds) < 0 ||
        put_u(d, "alloc_retries", m->alloc_retries) < 0 ||
        put_u(d, "ooms", m->ooms) < 0 || put_u(d, "gc_runs", m->gc_runs) < 0 ||
        put_u(d, "reserved", reserved) < 0 ||
        put_u(d, "max_reserved", m->peak_reserved) < 0 ||
        put_u(d, "live_buffers", m->live_buffers) < 0 ||
        put_u(d, "num_alloc_retries", m->alloc_retries) < 0 ||
        put_u(d, "num_ooms", m->ooms) < 0 ||
        put_u(d, "num_spills", m->spills) < 0 ||
        put_u(d, "num_restores", m->restores) < 0 ||
        put_u(d, "allocated_bytes.all.current", m->in_use) < 0 ||
        put_u(d, "allocated_bytes.all.peak", m->peak) < 0 ||
        put_u(d, "reserved_bytes.all.current", reserved) < 0 ||
        put_u(d, "reserved_bytes.all.peak", m->peak_reserved) < 0 ||
        put_u(d, "allocation.all.current", m->live_buffers) < 0 ||
        put_u(d, "allocation.all.allocated", m->allocs) < 0 ||
        put_u(d, "allocation.all.freed", m->frees) < 0 ||
        put_u(d, "host_pool", m->host_pool) < 0 ||
        put_u(d, "host_pool_limit", m->host_pool_limit) < 0 ||
        put_u(d, "host_copies", m->host_copies) < 0 ||
        put_u(d, "clean_evictions", m->clean_evictions) < 0 ||
        put_opt(d, "host_budget", m->host_budget != 0, m->host_budget) < 0 ||
        put_u(d, "spilled_disk", m->spilled_disk) < 0 ||
        put_u(d, "disk_write_bytes", m->disk_write_bytes) < 0 ||
        put_u(d, "disk_read_bytes", m->disk_read_bytes) < 0 ||
        put_f(d, "disk_write_seconds", m->disk_write_seconds) < 0 ||
        put_f(d, "disk_read_seconds", m->disk_read_seconds) < 0;
    if (bad)
        Py_CLEAR(d);
    return d;
}

static PyObject *mod_memory_stats(PyObject *m, PyObject *const *args,
                                  Py_ssize_t nargs, PyObject *kwnames)
{
    sw_py_state *st = sw_py_module_state(m);
    DeviceObject *d = device_arg(m, "memory_stats", args, nargs, kwnames);
    if (d == NULL)
        return NULL;
    sw_memory_info info;
    int rc = info_of(st, d, &info);
    Py_DECREF(d);
    return rc < 0 ? NULL : stats_dict(&info);
}

static PyObject *mod_reset_accumulated(PyObject *m, PyObject *const *args,
                                       Py_ssize_t nargs, PyObject *kwnames)
{
    sw_py_state *st = sw_py_module_state(m);
    DeviceObject *d = device_arg(m, "reset_accumulated_memory_stats", args,
                                 nargs, kwnames);
    if (d == NULL)
        return NULL;
    int rc;
    SW_PY_DEVICE_CALL(d, rc, sw_reset_counters(dev_));
    Py_DECREF(d);
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    Py_RETURN_NONE;
}

/* (free, total) as torch.cuda.mem_get_info: the driver's view.  A driver
 * that cannot tell what is free (OpenCL) gets total minus what spillway
 * holds there, the best the process knows. */
static PyObject *mod_mem_get_info(PyObject *m, PyObject *const *args,
                                  Py_ssize_t nargs, PyObject *kwnames)
{
    sw_py_state *st = sw_py_module_state(m);
    DeviceObject *d = device_arg(m, "mem_get_info", args, nargs, kwnames);
    if (d == NULL)
        return NULL;
    sw_memory_info info;
    int rc = info_of(st, d, &info);
    PyObject *name = Py_NewRef(d->name);
    Py_DECREF(d);
    if (rc < 0) {
        Py_DECREF(name);
        return NULL;
    }
    if (info.device_total == 0) {
        PyErr_Format(PyExc_NotImplementedError,
                     "%U's driver tells neither its free nor its total "
                     "memory",
                     name);
        Py_DECREF(name);
        return NULL;
    }
    Py_DECREF(name);
    uint64_t held = info.in_use + info.cached;
    uint64_t free_ = info.device_free_known ? info.device_free
                     : held < info.device_total ? info.device_total - held
                                                : 0;
    return Py_BuildValue("(KK)", (unsigned long long)free_,
                         (unsigned long long)info.device_total);
}

/* ------------------------------------------------------------------------
 * memory_snapshot
 * ---------------------------------------------------------------------- */

static PyObject *buffer_dict(const sw_buffer_info *b, PyObject *devname)
{
    int nq = 0;
    for (int k = 0; k < 64; k++)
        nq += (b->queues >> k) & 1u;
    PyObject *queues = PyTuple_New(nq);
    for (int k = 0, i = 0; queues != NULL && k < 64; k++) {
        if (!((b->queues >> k) & 1u))
            continue;
        PyObject *q = PyLong_FromLong(k);
        if (q == NULL) {
            Py_CLEAR(queues);
            break;
        }
        PyTuple_SET_ITEM(queues, i++, q);
    }
    if (queues == NULL)
        return NULL;
    PyObject *tag = b->tag[0] ? PyUnicode_DecodeUTF8(b->tag, (Py_ssize_t)
                                                     strlen(b->tag),
                                                     "replace")
                              : Py_NewRef(Py_None);
    if (tag == NULL) {
        Py_DECREF(queues);
        return NULL;
    }
    PyObject *r = Py_BuildValue(
        "{sKsNsKsKsssOsOsOsIsIsOsIsIsKsNsOsOsO}", "id",
        (unsigned long long)b->id,
        "tag", tag, "size", (unsigned long long)b->size, "alloc_size",
        (unsigned long long)b->alloc_size, "state",
        b->state == SW_SPILLED ? "spilled" : "resident", "external",
        b->external ? Py_True : Py_False, "moving",
        b->moving ? Py_True : Py_False, "exposed",
        b->leases ? Py_True : Py_False, "pins", (unsigned)b->pins, "leases",
        (unsigned)b->leases, "pinned", b->pins ? Py_True : Py_False, "views",
        (unsigned)b->views, "handles", (unsigned)b->handles, "last_use",
        (unsigned long long)b->last_use, "queues", queues, "device",
        devname, "on_disk", b->on_disk ? Py_True : Py_False, "host_copy",
        b->host_copy ? Py_True : Py_False);
    return r;
}

static PyObject *mod_memory_snapshot(PyObject *m, PyObject *const *args,
                                     Py_ssize_t nargs, PyObject *kwnames)
{
    sw_py_state *st = sw_py_module_state(m);
    DeviceObject *d = device_arg(m, "memory_snapshot", args, nargs, kwnames);
    if (d == NULL)
        return NULL;
    sw_buffer_info *bufs = NULL;
    size_t cap = 0, count = 0;
    int rc;
    /* Buffers come and go between calls: ask again until it all fit. */
    for (;;) {
        SW_PY_DEVICE_CALL(d, rc, sw_memory_snapshot(dev_, bufs, cap, &count));
        if (rc != SW_OK || count <= cap)
            break;
        PyMem_RawFree(bufs);
        cap = count + count / 4 + 8;
        bufs = PyMem_RawMalloc(cap * sizeof *bufs);
        if (bufs == NULL) {
            Py_DECREF(d);
            return PyErr_NoMemory();
        }
    }
    PyObject *list = NULL;
    if (rc != SW_OK) {
        sw_py_raise(st, rc);
    } else if ((list = PyList_New((Py_ssize_t)count)) != NULL) {
        for (size_t i = 0; i < count; i++) {
            PyObject *b = buffer_dict(&bufs[i], d->name);
            if (b == NULL) {
                Py_CLEAR(list);
                break;
            }
            PyList_SET_ITEM(list, (Py_ssize_t)i, b);
        }
    }
    PyMem_RawFree(bufs);
    Py_DECREF(d);
    return list;
}

/* set_host_pool_limit(nbytes, device=None): the bound of the device's host
 * staging pool (idle host memory kept for spills), bytes or a size string
 * only (size.c: a fraction is TypeError); 0 keeps no idle block.  It is
 * $SPILLWAY_HOST_POOL (or 1 GiB) at open. */
static PyObject *mod_set_host_pool_limit(PyObject *m, PyObject *const *args,
                                         Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"nbytes", "device"};
    PyObject *v[2];
    if (sw_py_parse_args("set_host_pool_limit", args, nargs, kwnames, names,
                         2, 2, 1, v) < 0)
        return NULL;
    sw_py_state *st = sw_py_module_state(m);
    DeviceObject *d = sw_py_resolve_device(st, v[1]);
    if (d == NULL)
        return NULL;
    uint64_t bytes = 0;
    if (sw_py_parse_size(st, v[0], "set_host_pool_limit()", SW_PY_SIZE_BYTES,
                         d, &bytes) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    int rc;
    SW_PY_DEVICE_CALL(d, rc, sw_set_host_pool_limit(dev_, bytes));
    Py_DECREF(d);
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    Py_RETURN_NONE;
}

/* set_host_budget(nbytes, device=None): bound the host memory spillway
 * holds for the device (spilled and clean copies, the idle pool); past it
 * spilled copies go to files under $SPILLWAY_SPILL_DIR.  Bytes, a size
 * string, a fraction of the machine's memory, or None (no bound): size.c
 * reads it. */
static PyObject *mod_set_host_budget(PyObject *m, PyObject *const *args,
                                     Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"nbytes", "device"};
    PyObject *v[2];
    if (sw_py_parse_args("set_host_budget", args, nargs, kwnames, names, 2,
                         2, 1, v) < 0)
        return NULL;
    sw_py_state *st = sw_py_module_state(m);
    DeviceObject *d = sw_py_resolve_device(st, v[1]);
    if (d == NULL)
        return NULL;
    uint64_t bytes = 0;
    if (sw_py_parse_size(st, v[0], "set_host_budget()", SW_PY_SIZE_HOST, d,
                         &bytes) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    int rc;
    SW_PY_DEVICE_CALL(d, rc, sw_set_host_budget(dev_, bytes));
    Py_DECREF(d);
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    Py_RETURN_NONE;
}

static PyMethodDef stats_methods[] = {
    FASTKW("set_host_budget", mod_set_host_budget,
           "set_host_budget(nbytes, device=None)\n--\n\nBound the host "
           "memory spillway holds for the device (spilled copies, clean "
           "copies, the idle staging pool) to nbytes: bytes, a size "
           "('8G'), a fraction of the machine's memory (a float, NumPy "
           "float, Fraction or Decimal in (0, 1]: 0.25; at least one byte), "
           "or None for no bound.  Past it the least recently used "
           "spilled copies and clean copies go to a file under "
           "$SPILLWAY_SPILL_DIR (default: the temporary directory) and come "
           "back when used.  memory_stats() shows host_budget, spilled_disk "
           "and the disk traffic."),
    FASTKW("memory_stats", mod_memory_stats,
           "memory_stats(device=None)\n--\n\nA dict of the device's figures: "
           "every field of memory_info(), reserved (in_use + cached), "
           "num_alloc_retries, num_ooms, "
           "num_spills, num_restores, and PyTorch's dotted names for the "
           "same figures ('allocated_bytes.all.current', ...)."),
    FASTKW("reset_accumulated_memory_stats", mod_reset_accumulated,
           "reset_accumulated_memory_stats(device=None)\n--\n\nZero the "
           "counters (allocs, frees, spills, restores, bytes and seconds "
           "moved, retries, ooms, gc_runs); in_use, cached, spilled and the "
           "peaks stay."),
    FASTKW("set_host_pool_limit", mod_set_host_pool_limit,
           "set_host_pool_limit(nbytes, device=None)\n--\n\nBound the "
           "device's host staging pool (idle host memory kept for spills) "
           "to nbytes: bytes (an int) or a size ('512M'); 0 keeps none.  "
           "memory_stats() shows host_pool and host_pool_limit."),
    FASTKW("mem_get_info", mod_mem_get_info,
           "mem_get_info(device=None)\n--\n\n(free, total) bytes of the "
           "device, as its driver says (torch.cuda.mem_get_info); where the "
           "driver cannot tell what is free, total minus what spillway "
           "holds."),
    FASTKW("memory_snapshot", mod_memory_snapshot,
           "memory_snapshot(device=None)\n--\n\nEvery live buffer of the "
           "device, most recently allocated first, as dicts: id, tag, size, "
           "alloc_size, state ('resident' or 'spilled'), external, moving, "
           "exposed, pins, pinned, leases, views, handles, last_use, queues "
           "(ids of the queues other than the default that used it), "
           "device, on_disk (spilled to the spill file: the disk tier), "
           "host_copy (resident with a clean copy on the host)."),
    {NULL, NULL, 0, NULL},
};

int sw_py_stats_setup(PyObject *m, sw_py_state *st)
{
    (void)st;
    return PyModule_AddFunctions(m, stats_methods);
}
