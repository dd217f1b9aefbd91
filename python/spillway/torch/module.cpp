/*
 * module.cpp -- spillway.torch._C, the layer's Python module.  Loading it
 * registers the device with PyTorch (the static registrations of the other
 * files: allocator, guard, hooks, ops, fallback); importing it takes the
 * library's capsule and puts the capture allocator in front of PyTorch's
 * CPU allocator.  spillway/torch/__init__.py does the rest in Python.
 */
#include "layer.h"
#include "spillway_torch.h"

#include <torch/csrc/Generator.h>
#include <torch/csrc/autograd/python_variable.h>

#include <vector>

namespace spillway_torch {

namespace {

/* spillway._spillway and the Devices of the table (strong references:
 * each is counted as a user of its device until replaced). */
PyObject *g_spillway = nullptr;
std::vector<PyObject *> g_devices;

int index_arg(PyObject *arg, long *out)
{
    long i = PyLong_AsLong(arg);
    if (i == -1 && PyErr_Occurred())
        return -1;
    *out = i;
    return 0;
}

/* Run fn, turning a C++ exception (a torch error) into a Python one. */
template <typename F> PyObject *guarded(F fn)
{
    try {
        return fn();
    } catch (const c10::IndexError &e) {
        PyErr_SetString(PyExc_IndexError, e.what_without_backtrace());
    } catch (const c10::ValueError &e) {
        PyErr_SetString(PyExc_ValueError, e.what_without_backtrace());
    } catch (const c10::Error &e) {
        PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
    } catch (const std::exception &e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
    }
    return nullptr;
}

/* _configure(devices): the table, from spillway Devices or specs.  Only
 * while no spillway tensor lives (the autograd engine and every tensor
 * hold indices into it). */
PyObject *configure(PyObject *, PyObject *arg)
{
    PyObject *seq = PySequence_Fast(arg, "set_devices: a list of devices");
    if (seq == nullptr)
        return nullptr;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > kMaxDevices) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError,
                     "set_devices: 1 to %d devices, not %zd", kMaxDevices, n);
        return nullptr;
    }
    std::vector<PyObject *> objs;
    std::vector<DeviceSlot> slots(n);
    for (Py_ssize_t i = 0; i < n; i++) {
        sw_device *dev = nullptr;
        PyObject *d = api->resolve_device(
            g_spillway, PySequence_Fast_GET_ITEM(seq, i), &dev);
        if (d == nullptr) {
            for (PyObject *o : objs) {
                api->device_unuse(o);
                Py_DECREF(o);
            }
            Py_DECREF(seq);
            return nullptr;
        }
        objs.push_back(d);
        int yes = 0;
        (void)api->device_host_addressable(dev, &yes);
        slots[i].dev = dev;
        slots[i].spec = api->device_name(dev);
        slots[i].host_addressable = yes != 0;
    }
    Py_DECREF(seq);
    bool same = static_cast<Py_ssize_t>(device_count()) == n;
    for (Py_ssize_t i = 0; same && i < n; i++)
        same = slot(static_cast<c10::DeviceIndex>(i)).dev == slots[i].dev;
    if (!same && live_blocks() > 0) {
        for (PyObject *o : objs) {
            api->device_unuse(o);
            Py_DECREF(o);
        }
        PyErr_Format(PyExc_RuntimeError,
                     "spillway.torch.set_devices: %ld spillway tensors (or "
                     "their storages) are alive; the devices are set before "
                     "the first one, or once they are all gone",
                     live_blocks());
        return nullptr;
    }
    configure_devices(slots.data(), static_cast<int>(n));
    for (PyObject *o : g_devices) {
        api->device_unuse(o);
        Py_DECREF(o);
    }
    g_devices = std::move(objs);
    Py_RETURN_NONE;
}

PyObject *devices(PyObject *, PyObject *)
{
    PyObject *list = PyList_New(0);
    if (list == nullptr)
        return nullptr;
    for (PyObject *d : g_devices) {
        if (PyList_Append(list, d) < 0) {
            Py_DECREF(list);
            return nullptr;
        }
    }
    return list;
}

PyObject *device_count_py(PyObject *, PyObject *)
{
    return PyLong_FromLong(device_count());
}

PyObject *get_device(PyObject *, PyObject *)
{
    return PyLong_FromLong(current_device());
}

PyObject *set_device(PyObject *, PyObject *arg)
{
    long i;
    if (index_arg(arg, &i) < 0)
        return nullptr;
    return guarded([&]() -> PyObject * {
        if (i >= 0)
            set_current_device(static_cast<c10::DeviceIndex>(i));
        Py_RETURN_NONE;
    });
}

PyObject *exchange_device(PyObject *, PyObject *arg)
{
    long i;
    if (index_arg(arg, &i) < 0)
        return nullptr;
    return guarded([&]() -> PyObject * {
        c10::DeviceIndex old = current_device();
        if (i >= 0)
            set_current_device(static_cast<c10::DeviceIndex>(i));
        return PyLong_FromLong(old);
    });
}

PyObject *live(PyObject *, PyObject *)
{
    return PyLong_FromLong(live_blocks());
}

/* _buffer_of(tensor) -> (buffer id, byte offset, spilled): where a spillway
 * tensor's bytes are, as the library names them (memory_snapshot's ids). */
PyObject *buffer_of(PyObject *, PyObject *arg)
{
    if (!THPVariable_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "a torch.Tensor");
        return nullptr;
    }
    const at::Tensor &t = THPVariable_Unpack(arg);
    return guarded([&]() -> PyObject * {
        TORCH_CHECK_VALUE(t.device().type() == kDevType,
                          "not a spillway tensor: ", t.device());
        Span sp = span_of(t);
        if (sp.block == nullptr)
            Py_RETURN_NONE;
        uint64_t id = 0;
        sw_buffer_state state = SW_RESIDENT;
        {
            NoGil nogil;
            check(api->buffer_id(sp.block->buf, &id), "buffer id");
            check(api->buffer_state_get(sp.block->buf, &state), "state");
        }
        return Py_BuildValue("(KnO)", static_cast<unsigned long long>(id),
                             static_cast<Py_ssize_t>(sp.offset),
                             state == SW_SPILLED ? Py_True : Py_False);
    });
}

/* _default_generator(i) -> the torch.Generator of spillway:i's default
 * generator (torch.spillway.manual_seed and friends). */
PyObject *default_generator_py(PyObject *, PyObject *arg)
{
    long i;
    if (index_arg(arg, &i) < 0)
        return nullptr;
    return guarded([&]() -> PyObject * {
        return THPGenerator_initDefaultGenerator(
            default_generator(static_cast<c10::DeviceIndex>(i)));
    });
}

/* ------------------------------------------------------------------------
 * The capsule for vendors' kernels (spillway_torch.h)
 * ---------------------------------------------------------------------- */

int api_tensor_buffer(const void *tensor, sw_buffer **buf, size_t *offset)
{
    *buf = nullptr;
    *offset = 0;
    const auto &t = *static_cast<const at::Tensor *>(tensor);
    if (!t.defined() || t.device().type() != kDevType || !t.has_storage())
        return SW_ERR_INVALID_ARG;
    try {
        Span sp = span_of(t);
        if (sp.block != nullptr) {
            *buf = sp.block->buf;
            *offset = sp.offset;
        }
        return SW_OK;
    } catch (...) {
        return SW_ERR_INVALID_ARG;
    }
}

sw_device *api_device(int index)
{
    if (index < 0 || index >= device_count())
        return nullptr;
    return slot(static_cast<c10::DeviceIndex>(index)).dev;
}

sw_torch_api torch_api = {
    SW_TORCH_API_VERSION, sizeof(sw_torch_api), nullptr, api_tensor_buffer,
    api_device,
};

PyMethodDef methods[] = {
    {"_default_generator", default_generator_py, METH_O,
     "the default generator of spillway:i"},
    {"_configure", configure, METH_O, "the device table (set_devices)"},
    {"_devices", devices, METH_NOARGS, "the spillway Devices of the table"},
    {"_device_count", device_count_py, METH_NOARGS, "spillway devices"},
    {"_get_device", get_device, METH_NOARGS, "this thread's device"},
    {"_set_device", set_device, METH_O, "set this thread's device"},
    {"_exchange_device", exchange_device, METH_O,
     "set this thread's device, return the previous one"},
    {"_live_blocks", live, METH_NOARGS, "live storages and temporaries"},
    {"_buffer_of", buffer_of, METH_O,
     "(buffer id, byte offset, spilled) of a spillway tensor"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "spillway.torch._C",
    "spillway as a PyTorch device: the C++ layer (docs/torch.md).", -1,
    methods, nullptr, nullptr, nullptr, nullptr,
};

} // namespace

} // namespace spillway_torch

extern "C" __attribute__((visibility("default"))) PyObject *PyInit__C(void)
{
    using namespace spillway_torch;
    PyObject *mod = PyImport_ImportModule("spillway._spillway");
    if (mod == nullptr)
        return nullptr;
    auto *capi =
        static_cast<const sw_py_c_api *>(PyCapsule_Import(SW_PY_C_API_CAPSULE, 0));
    if (capi == nullptr) {
        Py_DECREF(mod);
        return nullptr;
    }
    if (capi->version < SW_PY_C_API_VERSION ||
        capi->size < sizeof(sw_py_c_api)) {
        Py_DECREF(mod);
        PyErr_Format(PyExc_ImportError,
                     "spillway.torch._C needs spillway's C API version %d, "
                     "this spillway has %d: install them together",
                     SW_PY_C_API_VERSION, capi->version);
        return nullptr;
    }
    api = capi;
    g_spillway = mod; /* kept for the life of the process */
    try {
        install_capture_allocator();
        register_cpu_paths();
    } catch (const std::exception &e) {
        PyErr_Format(PyExc_ImportError, "spillway.torch._C: %s", e.what());
        return nullptr;
    }
    PyObject *m = PyModule_Create(&moduledef);
    if (m == nullptr)
        return nullptr;
    torch_api.lib = capi;
    PyObject *cap = PyCapsule_New(&torch_api, SW_TORCH_API_CAPSULE, nullptr);
    if (cap == nullptr || PyModule_AddObject(m, "_api", cap) < 0) {
        Py_XDECREF(cap);
        Py_DECREF(m);
        return nullptr;
    }
    return m;
}
