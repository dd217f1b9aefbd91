/*
 * capi.c -- the capsule spillway._spillway._c_api (why: c_api.h), and the
 * module entries it shares with the test module's capsule (testapi.c).
 */
#include "array.h"
#include "c_api.h"

PyObject *sw_py_api_resolve_device(PyObject *module, PyObject *obj,
                                   sw_device **dev)
{
    sw_py_state *st = sw_py_module_state(module);
    DeviceObject *d = sw_py_resolve_device(st, obj);
    if (d == NULL)
        return NULL;
    /* Counted as in use for the caller, which ends it (device_unuse):
     * never a handle that a close() from another thread ends meanwhile. */
    if ((*dev = sw_py_device_try_use(d)) == NULL) {
        if (sw_py_device_check_open(d) == 0)
            sw_py_raise(st, SW_PY_CLOSED);
        Py_DECREF(d);
        return NULL;
    }
    return (PyObject *)d;
}

void sw_py_api_device_use(PyObject *device)
{
    sw_py_device_use((DeviceObject *)device);
}

void sw_py_api_device_unuse(PyObject *device)
{
    sw_py_device_unuse((DeviceObject *)device);
}

PyObject *sw_py_api_raise_error(PyObject *module, int rc)
{
    return sw_py_raise_rc(sw_py_module_state(module), rc);
}

static const sw_py_c_api c_api = {
    .version = SW_PY_C_API_VERSION,
    .size = sizeof(sw_py_c_api),
    .last_error = sw_last_error,
    .err_name = sw_err_name,
    .parse_size = sw_parse_size,
    .format_bytes = sw_format_bytes,
    .device_name = sw_device_name,
    .device_host_addressable = sw_device_host_addressable,
    .device_synchronize = sw_device_synchronize,
    .memory_info_get = sw_memory_info_get,
    .reset_peak = sw_reset_peak,
    .reset_counters = sw_reset_counters,
    .set_memory_budget = sw_set_memory_budget,
    .get_memory_budget = sw_get_memory_budget,
    .set_host_budget = sw_set_host_budget,
    .get_host_budget = sw_get_host_budget,
    .empty_cache = sw_empty_cache,
    .buffer_alloc = sw_buffer_alloc,
    .buffer_free = sw_buffer_free,
    .buffer_retain = sw_buffer_retain,
    .buffer_size = sw_buffer_size,
    .buffer_state_get = sw_buffer_state_get,
    .buffer_id = sw_buffer_id,
    .buffer_read = sw_buffer_read,
    .buffer_write = sw_buffer_write,
    .buffer_copy = sw_buffer_copy,
    .buffer_fill = sw_buffer_fill,
    .buffer_advise = sw_buffer_advise,
    .launch_begin_q = sw_launch_begin_q,
    .launch_begin_q_access = sw_launch_begin_q_access,
    .launch_end_q = sw_launch_end_q,
    .queue_create = sw_queue_create,
    .queue_wrap_native = sw_queue_wrap_native,
    .queue_native = sw_queue_native,
    .queue_release = sw_queue_release,
    .queue_synchronize = sw_queue_synchronize,
    .device_native_context = sw_device_native_context,
    .resolve_device = sw_py_api_resolve_device,
    .device_unuse = sw_py_api_device_unuse,
    .raise_error = sw_py_api_raise_error,
};

int sw_py_capi_setup(PyObject *m, sw_py_state *st)
{
    (void)st;
    PyObject *cap = PyCapsule_New((void *)&c_api, SW_PY_C_API_CAPSULE, NULL);
    if (cap == NULL)
        return -1;
    int rc = PyModule_AddObjectRef(m, "_c_api", cap);
    Py_DECREF(cap);
    return rc;
}
