/*
 * device.c -- Device: one object per open device in each module instance
 * (the table st->devices), holding the library's reference and the
 * pressure callback's registration; spillway.devices().
 *
 * A Device is closed for real only when close() was called and no user is
 * left (Arrays, queues, open peak scopes, helper threads, calls in
 * progress with the GIL released): SW_PY_DEVICE_CALL counts the call as a
 * user, so that a close() from another thread meanwhile waits for it.
 */
#include "device.h"
#include "dtype.h"

#include <structmember.h>

/* Stop collecting for this device and unregister the callback; with
 * shutdown, drop our reference to the device too.  Either happens once,
 * whichever thread gets there (close() and the last user's unuse may
 * race): the callback id and the device are taken under life_mu, which is
 * taken with the thread state released only, so that the library calls
 * made under it never wait with the interpreter held.  A close that
 * fails with SW_ERR_BUSY (a DLPack consumer still holds memory of it)
 * leaves the device open for the rest of the process, which is harmless. */
static void device_release(DeviceObject *d, int shutdown)
{
    if (d->ctx != NULL)
        atomic_store(&d->ctx->alive, 0);
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&d->life_mu);
    sw_device *dev = atomic_load(&d->dev);
    if (d->cb_id >= 0 && dev != NULL)
        (void)sw_remove_pressure_callback(dev, d->cb_id);
    d->cb_id = -1;
    if (shutdown && dev != NULL) {
        atomic_store(&d->dev, NULL);
        (void)sw_device_close(dev);
    }
    pthread_mutex_unlock(&d->life_mu);
    Py_END_ALLOW_THREADS
}

void sw_py_device_unuse(DeviceObject *d)
{
    if (atomic_fetch_sub(&d->users, 1) == 1 && atomic_load(&d->closed))
        device_release(d, 1);
}

sw_device *sw_py_device_try_use(DeviceObject *d)
{
    /* Counted first, closed read after; Device.close sets closed first
     * and reads the count after: one of the two sees the other. */
    atomic_fetch_add(&d->users, 1);
    sw_device *dev = atomic_load(&d->closed) ? NULL : atomic_load(&d->dev);
    if (dev == NULL)
        sw_py_device_unuse(d);
    return dev;
}

int sw_py_device_check_open(DeviceObject *d)
{
    if (atomic_load_explicit(&d->closed, memory_order_relaxed)) {
        PyErr_Format(PyExc_ValueError, "device %U is closed", d->name);
        return -1;
    }
    return 0;
}

/* A Device for a freshly opened dev (whose reference it takes), complete
 * (dtypes, the pressure callback registered) before it is entered in the
 * module's table; another thread that entered one for the same name first
 * wins, and ours goes (closing its reference).  New reference. */
static DeviceObject *device_create(sw_py_state *st, sw_device *dev,
                                   PyObject *name)
{
    DeviceObject *d = PyObject_GC_New(DeviceObject, st->device_type);
    if (d == NULL) {
        NOGIL((void)sw_device_close(dev));
        return NULL;
    }
    atomic_init(&d->dev, dev);
    d->ctx = NULL;
    d->cb_id = -1;
    pthread_mutex_init(&d->life_mu, NULL);
    atomic_init(&d->closed, 0);
    d->dtypes = 0;
    d->host_addressable = 0;
    atomic_init(&d->users, 0);
    d->name = Py_NewRef(name);
    d->description = NULL;
    d->weakreflist = NULL;
    PyObject_GC_Track(d);
    d->ctx = sw_py_ctx_new();
    d->description = PyUnicode_FromString(sw_device_description(dev));
    if (d->ctx == NULL || d->description == NULL) {
        if (d->ctx == NULL)
            PyErr_NoMemory();
        Py_DECREF(d);
        return NULL;
    }
    int rc, rc2, id = -1, yes = 0;
    uint32_t mask = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = sw_device_dtypes(dev, &mask);
    rc2 = sw_device_host_addressable(dev, &yes);
    Py_END_ALLOW_THREADS
    d->dtypes = rc == SW_OK ? mask : 0;
    d->host_addressable = rc2 == SW_OK && yes;
    NOGIL(rc = sw_add_pressure_callback(dev, sw_py_gc_on_pressure, d->ctx,
                                        &id));
    if (rc != SW_OK) {
        /* Usable, but without the collector under pressure. */
        if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                             "spillway: %U: no pressure callback (%s); "
                             "arrays held only by reference cycles will "
                             "not be collected when memory runs short",
                             name, sw_last_error()) < 0) {
            Py_DECREF(d);
            return NULL;
        }
    } else {
        d->cb_id = id;
    }
    PyObject *have = sw_py_dict_setdefault_ref(st->devices, name,
                                               (PyObject *)d);
    Py_DECREF(d); /* the table's, or ours goes: another thread won */
    return (DeviceObject *)have;
}

/* The default device as a new reference, or NULL (no exception). */
static DeviceObject *default_device_ref(sw_py_state *st)
{
    SW_PY_LOCK(&st->mu);
    PyObject *d = Py_XNewRef(st->default_device);
    SW_PY_UNLOCK(&st->mu);
    return (DeviceObject *)d;
}

DeviceObject *sw_py_device_lookup(sw_py_state *st, PyObject *spec)
{
    if (!sw_py_state_alive(st))
        return NULL;
    if (spec == NULL) {
        DeviceObject *d = default_device_ref(st);
        if (d != NULL)
            return d;
    }
    if (spec != NULL) {
        PyObject *d = NULL;
        int r = sw_py_dict_get_ref(st->devices, spec, &d);
        if (r != 0)
            return (DeviceObject *)d; /* found, or an error */
    }
    const char *cspec = NULL;
    if (spec != NULL && (cspec = sw_py_utf8(spec, "a device spec")) == NULL)
        return NULL;
    sw_device *dev = NULL;
    int rc;
    NOGIL(rc = sw_device_open(cspec, &dev));
    if (rc != SW_OK)
        return (DeviceObject *)sw_py_raise(st, rc);
    if (!sw_py_state_alive(st)) { /* cleared while the GIL was released */
        NOGIL((void)sw_device_close(dev));
        return NULL;
    }
    PyObject *name = PyUnicode_FromString(sw_device_name(dev));
    if (name == NULL) {
        NOGIL((void)sw_device_close(dev));
        return NULL;
    }
    DeviceObject *d = NULL;
    PyObject *have = NULL;
    int r = sw_py_dict_get_ref(st->devices, name, &have);
    if (r > 0) {
        /* Opened under another spelling ("sim"), or by a racing thread. */
        NOGIL((void)sw_device_close(dev));
        d = (DeviceObject *)have;
    } else if (r == 0) {
        d = device_create(st, dev, name);
    } else {
        NOGIL((void)sw_device_close(dev));
    }
    Py_DECREF(name);
    if (d != NULL && spec == NULL) {
        SW_PY_LOCK(&st->mu);
        if (st->default_device == NULL)
            st->default_device = Py_NewRef(d);
        SW_PY_UNLOCK(&st->mu);
    }
    return d;
}

DeviceObject *sw_py_resolve_device(sw_py_state *st, PyObject *obj)
{
    if (sw_py_absent(obj))
        return sw_py_device_lookup(st, NULL);
    if (Py_IS_TYPE(obj, st->device_type)) {
        if (sw_py_device_check_open((DeviceObject *)obj) < 0)
            return NULL;
        return (DeviceObject *)Py_NewRef(obj);
    }
    if (PyUnicode_Check(obj))
        return sw_py_device_lookup(st, obj);
    PyErr_Format(PyExc_TypeError,
                 "device must be a spillway.Device, a device spec such as "
                 "'sim:0', or None, not %.100s",
                 Py_TYPE(obj)->tp_name);
    return NULL;
}

static PyObject *Device_new(PyTypeObject *type, PyObject *args,
                            PyObject *kwds)
{
    static char *kwlist[] = {"spec", NULL};
    PyObject *spec = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:Device", kwlist, &spec))
        return NULL;
    sw_py_state *st = sw_py_type_state(type);
    if (st == NULL)
        return NULL;
    if (!sw_py_absent(spec) && !PyUnicode_Check(spec)) {
        PyErr_Format(PyExc_TypeError,
                     "Device() takes a spec string such as 'sim:0' or None, "
                     "not %.100s",
                     Py_TYPE(spec)->tp_name);
        return NULL;
    }
    return (PyObject *)sw_py_device_lookup(st,
                                           sw_py_absent(spec) ? NULL : spec);
}

static int Device_traverse(DeviceObject *d, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(d));
    return 0;
}

static void Device_dealloc(DeviceObject *d)
{
    PyTypeObject *tp = Py_TYPE(d);
    PyObject_GC_UnTrack(d);
    if (d->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)d);
    device_release(d, 1);
    pthread_mutex_destroy(&d->life_mu);
    sw_py_ctx_unref(d->ctx);
    d->ctx = NULL;
    Py_CLEAR(d->name);
    Py_CLEAR(d->description);
    tp->tp_free((PyObject *)d);
    Py_DECREF(tp);
}

static PyObject *Device_repr(DeviceObject *d)
{
    return PyUnicode_FromFormat("Device(%R%s)", d->name,
                                atomic_load(&d->closed) ? ", closed" : "");
}

static PyObject *Device_str(DeviceObject *d) { return Py_NewRef(d->name); }

static Py_hash_t Device_hash(DeviceObject *d)
{
    return PyObject_Hash(d->name);
}

/* Devices compare by name, and equal their spec string. */
static PyObject *Device_richcompare(DeviceObject *d, PyObject *other, int op)
{
    if (op != Py_EQ && op != Py_NE)
        Py_RETURN_NOTIMPLEMENTED;
    PyObject *oname;
    if (Py_IS_TYPE(other, Py_TYPE(d)))
        oname = ((DeviceObject *)other)->name;
    else if (PyUnicode_Check(other))
        oname = other;
    else
        Py_RETURN_NOTIMPLEMENTED;
    return PyObject_RichCompare(d->name, oname, op);
}

static PyObject *Device_close(DeviceObject *d, PyObject *unused)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(d));
    if (st == NULL)
        return NULL;
    if (atomic_exchange(&d->closed, 1))
        Py_RETURN_NONE; /* closed already, or by another thread now */
    Py_INCREF(d); /* the table may hold the last reference */
    PyObject *was = NULL;
    SW_PY_LOCK(&st->mu);
    if (st->default_device == (PyObject *)d) {
        was = st->default_device;
        st->default_device = NULL;
    }
    SW_PY_UNLOCK(&st->mu);
    Py_XDECREF(was);
    PyObject *cur = NULL;
    if (st->devices != NULL &&
        sw_py_dict_get_ref(st->devices, d->name, &cur) > 0 &&
        cur == (PyObject *)d)
        (void)PyDict_DelItem(st->devices, d->name);
    Py_XDECREF(cur);
    PyErr_Clear(); /* a failed lookup changes nothing: it closes anyway */
    device_release(d, 0);
    /* Closed set first, the count read after (sw_py_device_try_use's
     * mirror): with users left, the last of them closes it. */
    if (atomic_load(&d->users) == 0)
        device_release(d, 1);
    Py_DECREF(d);
    Py_RETURN_NONE;
}

static PyObject *Device_get_closed(DeviceObject *d, void *c)
{
    return PyBool_FromLong(atomic_load(&d->closed));
}

/* The element types the device's kernels compute with, by NumPy name. */
static PyObject *Device_get_dtypes(DeviceObject *d, void *c)
{
    int n = 0;
    for (int i = 0; i < SW_DTYPE_COUNT; i++)
        n += (d->dtypes >> i) & 1u;
    PyObject *t = PyTuple_New(n);
    for (int i = 0, k = 0; t != NULL && i < SW_DTYPE_COUNT; i++) {
        if (!((d->dtypes >> i) & 1u))
            continue;
        PyObject *name = PyUnicode_FromString(sw_py_dtypes[i].name);
        if (name == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, k++, name);
    }
    return t;
}

static PyObject *Device_supports(DeviceObject *d, PyObject *dtype)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(d));
    sw_dtype dt;
    if (st == NULL || sw_py_parse_dtype(st, dtype, &dt) < 0)
        return NULL;
    return PyBool_FromLong((d->dtypes >> dt) & 1u);
}

/* A Device pickles as its spec: the receiving process opens the device of
 * that name (ValueError there when it has none). */
static PyObject *Device_reduce(DeviceObject *d, PyObject *unused)
{
    return Py_BuildValue("O(O)", (PyObject *)Py_TYPE(d), d->name);
}

static PyMethodDef Device_methods[] = {
    {"supports", (PyCFunction)(void (*)(void))Device_supports, METH_O,
     "supports(dtype)\n--\n\nWhether the device's kernels (add, scale, "
     "axpy, sum, fill) compute with dtype.  Every dtype can be stored, "
     "read, written, copied and moved through DLPack on every device."},
    {"__reduce__", (PyCFunction)(void (*)(void))Device_reduce, METH_NOARGS,
     NULL},
    {"close", (PyCFunction)(void (*)(void))Device_close, METH_NOARGS,
     "close()\n--\n\n"
     "Close this device in this module: arrays still on it raise ValueError "
     "on any use, and the device itself is closed once the last of them is "
     "gone.  The next use of its spec opens it again (re-reading "
     "SPILLWAY_SIM_MEMORY if it was closed for good)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Device_members[] = {
    {"name", T_OBJECT, offsetof(DeviceObject, name), READONLY,
     "The device's spec, e.g. 'sim:0'."},
    {"description", T_OBJECT, offsetof(DeviceObject, description), READONLY,
     "What the backend says the device is."},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(DeviceObject, weakreflist),
     READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

/* Device.native_context: the runtime's context, an int. */
static PyObject *Device_get_native_context(DeviceObject *d, void *c)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(d));
    if (st == NULL || sw_py_device_check_open(d) < 0)
        return NULL;
    uintptr_t h = 0;
    int rc;
    SW_PY_DEVICE_CALL(d, rc, sw_device_native_context(dev_, &h));
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    return PyLong_FromUnsignedLongLong((unsigned long long)h);
}

static PyGetSetDef Device_getset[] = {
    {"native_context", (getter)Device_get_native_context, NULL,
     "The context the device's memory and queues live in, as an int: a "
     "cl_context (opencl: pyopencl.Context.from_int_ptr), a CUcontext "
     "(cuda: the primary context), a ze_context_handle_t (ze), the "
     "simulated or host device's own.  NotImplementedError where the "
     "runtime has none (hip).", NULL},
    {"closed", (getter)Device_get_closed, NULL,
     "True after close().", NULL},
    {"dtypes", (getter)Device_get_dtypes, NULL,
     "The element types the device's kernels compute with, as NumPy names "
     "('float32', ...); the others can be stored, read, written and moved "
     "but not computed with.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Device_slots[] = {
    {Py_tp_doc, "Device(spec=None)\n--\n\n"
                "A device spillway manages, by spec ('sim:0', 'opencl:0', "
                "'cuda:0'; None: the default device, $SPILLWAY_DEVICE or "
                "sim:0).  There is one Device object per open device: "
                "Device('sim:0') returns it.  Devices compare equal to "
                "their spec string."},
    {Py_tp_new, Device_new},
    {Py_tp_dealloc, Device_dealloc},
    {Py_tp_traverse, Device_traverse},
    {Py_tp_repr, Device_repr},
    {Py_tp_str, Device_str},
    {Py_tp_hash, Device_hash},
    {Py_tp_richcompare, Device_richcompare},
    {Py_tp_methods, Device_methods},
    {Py_tp_members, Device_members},
    {Py_tp_getset, Device_getset},
    {0, NULL},
};

PyType_Spec sw_py_device_spec = {
    .name = "spillway.Device",
    .basicsize = sizeof(DeviceObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Device_slots,
};

/* ------------------------------------------------------------------------
 * spillway.devices()
 * ---------------------------------------------------------------------- */

static PyObject *mod_devices(PyObject *m, PyObject *unused)
{
    sw_py_state *st = sw_py_module_state(m);
    size_t n = 0;
    int rc;
    NOGIL(rc = sw_device_count(&n));
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    PyObject *list = PyList_New(0);
    if (list == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        char spec[64];
        NOGIL(rc = sw_device_spec_at(i, spec, sizeof spec));
        if (rc == SW_ERR_NO_DEVICE)
            break; /* the count shrank meanwhile */
        if (rc != SW_OK) {
            Py_DECREF(list);
            return sw_py_raise(st, rc);
        }
        PyObject *s = PyUnicode_FromString(spec);
        DeviceObject *d = s ? sw_py_device_lookup(st, s) : NULL;
        Py_XDECREF(s);
        if (d == NULL || PyList_Append(list, (PyObject *)d) < 0) {
            Py_XDECREF(d);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(d);
    }
    return list;
}

/* _device_specs(): the specs devices() would open, without opening them
 * (spillway.dask counts a kind's devices in the client process, which
 * should hold no device context of its own). */
static PyObject *mod_device_specs(PyObject *m, PyObject *unused)
{
    (void)unused;
    sw_py_state *st = sw_py_module_state(m);
    size_t n = 0;
    int rc;
    NOGIL(rc = sw_device_count(&n));
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    PyObject *list = PyList_New(0);
    for (size_t i = 0; list != NULL && i < n; i++) {
        char spec[64];
        NOGIL(rc = sw_device_spec_at(i, spec, sizeof spec));
        if (rc == SW_ERR_NO_DEVICE)
            break; /* the count shrank meanwhile */
        if (rc != SW_OK) {
            Py_DECREF(list);
            return sw_py_raise(st, rc);
        }
        PyObject *s = PyUnicode_FromString(spec);
        if (s == NULL || PyList_Append(list, s) < 0)
            Py_CLEAR(list);
        Py_XDECREF(s);
    }
    return list;
}

/* _set_default_device(device): the Device that device=None means from now
 * on in this process, or None to resolve $SPILLWAY_DEVICE (else sim:0)
 * again on the next use.  Returns the previous default (or None).  For
 * spillway.dask: a worker process's tasks allocate on the worker's device. */
static PyObject *mod_set_default_device(PyObject *m, PyObject *obj)
{
    sw_py_state *st = sw_py_module_state(m);
    DeviceObject *d = NULL;
    if (obj != Py_None) {
        if (!Py_IS_TYPE(obj, st->device_type)) {
            PyErr_Format(PyExc_TypeError,
                         "_set_default_device() takes a Device or None, not "
                         "%.100s",
                         Py_TYPE(obj)->tp_name);
            return NULL;
        }
        if (sw_py_device_check_open((DeviceObject *)obj) < 0)
            return NULL;
        d = (DeviceObject *)obj;
    }
    SW_PY_LOCK(&st->mu);
    PyObject *prev = st->default_device;
    st->default_device = d ? Py_NewRef(d) : NULL;
    SW_PY_UNLOCK(&st->mu);
    return prev ? prev : Py_NewRef(Py_None); /* the table's reference
                                              * passes to the caller */
}

static PyMethodDef device_methods[] = {
    {"_set_default_device", (PyCFunction)mod_set_default_device, METH_O,
     "_set_default_device(device)\n--\n\nMake device (a Device, or None "
     "for $SPILLWAY_DEVICE again) what device=None means; returns the "
     "previous default."},
    {"_device_specs", (PyCFunction)(void (*)(void))mod_device_specs,
     METH_NOARGS,
     "_device_specs()\n--\n\nThe specs of every device of every backend "
     "present, without opening them."},
    {"devices", (PyCFunction)(void (*)(void))mod_devices, METH_NOARGS,
     "devices()\n--\n\nEvery device of every backend present, as Device "
     "objects (opening each)."},
    {NULL, NULL, 0, NULL},
};

int sw_py_device_setup(PyObject *m, sw_py_state *st)
{
    if ((st->devices = PyDict_New()) == NULL ||
        (st->device_type = sw_py_add_type(m, &sw_py_device_spec)) == NULL)
        return -1;
    return PyModule_AddFunctions(m, device_methods);
}
