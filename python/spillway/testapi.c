/*
 * testapi.c -- what this module lends the test-only module
 * spillway._spillway_testing: the capsule spillway._spillway._testing_api
 * (why a capsule: testing_api.h).  Small accessors, so that the test module
 * reads this module's state through functions, never through its layout.
 */
#include "array.h"

static PyObject *api_open_devices(PyObject *module)
{
    sw_py_state *st = sw_py_module_state(module);
    if (!sw_py_state_alive(st))
        return NULL;
    return PyDict_Values(st->devices);
}

static PyObject *api_swap_track(PyObject *module, PyObject *list)
{
    sw_py_state *st = sw_py_module_state(module);
    SW_PY_LOCK(&st->mu);
    PyObject *old = st->track;
    st->track = list;
    atomic_store_explicit(&st->tracking, list != NULL, memory_order_relaxed);
    SW_PY_UNLOCK(&st->mu);
    return old;
}

static void api_object_counts(PyObject *module, sw_py_object_counts *out)
{
    sw_py_state *st = sw_py_module_state(module);
    out->queues = st->live_queues;
    out->managers = st->live_managers;
    out->events = st->live_events;
    out->host_tasks = sw_py_pending_host_tasks();
}

static int api_in_host_task(void)
{
    return sw_py_thread.task_queue != NULL;
}

static const sw_py_testing_api testing_api = {
    .version = SW_PY_TESTING_API_VERSION,
    .size = sizeof(sw_py_testing_api),
    .buffer_alloc = sw_buffer_alloc,
    .buffer_free = sw_buffer_free,
    .buffer_read = sw_buffer_read,
    .buffer_write = sw_buffer_write,
    .inject_fault = sw_inject_fault,
    .last_error = sw_last_error,
    .err_name = sw_err_name,
    .resolve_device = sw_py_api_resolve_device,
    .device_use = sw_py_api_device_use,
    .device_unuse = sw_py_api_device_unuse,
    .raise_error = sw_py_api_raise_error,
    .open_devices = api_open_devices,
    .swap_track = api_swap_track,
    .object_counts = api_object_counts,
    .gc_stats = sw_py_gc_stats_get,
    .gc_min_interval = sw_py_gc_min_interval,
    .gc_backoff_reset = sw_py_gc_backoff_reset,
    .wait_host_tasks = sw_py_wait_host_tasks,
    .drain_releases = sw_py_drain_releases,
    .in_host_task = api_in_host_task,
};

int sw_py_testapi_setup(PyObject *m, sw_py_state *st)
{
    (void)st;
    PyObject *cap = PyCapsule_New((void *)&testing_api,
                                  SW_PY_TESTING_API_CAPSULE, NULL);
    if (cap == NULL)
        return -1;
    int rc = PyModule_AddObjectRef(m, "_testing_api", cap);
    Py_DECREF(cap);
    return rc;
}
