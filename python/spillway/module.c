/*
 * module.c -- spillway._spillway: the module state's life (traverse, clear),
 * the exec slot (the chain of each file's setup function, module.h), the
 * process-wide state, and PyInit__spillway, the one exported symbol.
 */
#include "queue.h"

#include <stdio.h>
#include <time.h>

/* The one mutable global: why each part cannot be per module is written
 * next to its type (module.h). */
sw_py_process_state sw_py_process = {
    .gc = {.min_interval_ns = 50 * 1000 * 1000},
    .tasks = {.mu = PTHREAD_MUTEX_INITIALIZER,
              .cv = PTHREAD_COND_INITIALIZER},
    .release = {.mu = PTHREAD_MUTEX_INITIALIZER},
};

_Thread_local sw_py_thread_state sw_py_thread;

/* Registered with atexit by __init__.py: wait for the Python host tasks
 * (once the interpreter finalizes they could never take the GIL), then
 * drop this thread's order managers without waiting, so that nothing of
 * this module is left in the thread state when the module goes. */
static PyObject *mod_atexit(PyObject *m, PyObject *unused)
{
    if (sw_py_thread.task_queue == NULL)
        NOGIL((void)sw_py_wait_host_tasks(-1));
    /* No thread takes the GIL from here on (module.h, gate); those already
     * through the gate get it while this one waits without it (at most 5 s:
     * a thread stuck elsewhere must not hang the exit). */
    atomic_store(&sw_py_process.gate.closed, 1);
    Py_BEGIN_ALLOW_THREADS
    for (int i = 0; i < 5000 && atomic_load(&sw_py_process.gate.entering) > 0;
         i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    Py_END_ALLOW_THREADS
    sw_py_drain_releases();
    sw_py_state *st = sw_py_module_state(m);
    PyObject *d = PyThreadState_GetDict();
    if (st->order_manager != NULL && d != NULL) {
        PyObject *map = PyDict_GetItemWithError(d, st->order_manager);
        if (map == NULL && PyErr_Occurred())
            return NULL;
        if (map != NULL && PyDict_DelItem(d, st->order_manager) < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"_atexit", (PyCFunction)(void (*)(void))mod_atexit, METH_NOARGS,
     "_atexit()\n--\n\nRun at interpreter exit: wait for Python host "
     "tasks, drop this thread's order managers."},
    {NULL, NULL, 0, NULL},
};

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    sw_py_state *st = sw_py_module_state(m);
    if (st == NULL)
        return 0;
    Py_VISIT(st->device_type);
    Py_VISIT(st->array_type);
    Py_VISIT(st->peak_type);
    Py_VISIT(st->meminfo_type);
    Py_VISIT(st->queue_type);
    Py_VISIT(st->event_type);
    Py_VISIT(st->manager_type);
    Py_VISIT(st->map_type);
    Py_VISIT(st->entry_type);
    Py_VISIT(st->omap_type);
    Py_VISIT(st->pinned_type);
    Py_VISIT(st->pinned_view_type);
    Py_VISIT(st->order_manager);
    Py_VISIT(st->DeviceMemoryError);
    Py_VISIT(st->DeviceError);
    Py_VISIT(st->devices);
    Py_VISIT(st->default_device);
    Py_VISIT(st->numpy);
    for (int i = 0; i < SW_DTYPE_COUNT; i++)
        Py_VISIT(st->np_dtypes[i]);
    Py_VISIT(st->track);
    Py_VISIT(st->oom_hook);
    return 0;
}

static int module_clear(PyObject *m)
{
    sw_py_state *st = sw_py_module_state(m);
    if (st == NULL)
        return 0;
    /* Devices first: an open device whose arrays are gone is closed now;
     * one with arrays left stays open until the last of them goes. */
    Py_CLEAR(st->default_device);
    Py_CLEAR(st->devices);
    atomic_store_explicit(&st->tracking, 0, memory_order_relaxed);
    Py_CLEAR(st->track);
    Py_CLEAR(st->oom_hook);
    Py_CLEAR(st->numpy);
    for (int i = 0; i < SW_DTYPE_COUNT; i++)
        Py_CLEAR(st->np_dtypes[i]);
    Py_CLEAR(st->device_type);
    Py_CLEAR(st->array_type);
    Py_CLEAR(st->peak_type);
    Py_CLEAR(st->meminfo_type);
    Py_CLEAR(st->order_manager);
    Py_CLEAR(st->queue_type);
    Py_CLEAR(st->event_type);
    Py_CLEAR(st->manager_type);
    Py_CLEAR(st->map_type);
    Py_CLEAR(st->entry_type);
    Py_CLEAR(st->omap_type);
    Py_CLEAR(st->pinned_type);
    Py_CLEAR(st->pinned_view_type);
    Py_CLEAR(st->DeviceMemoryError);
    Py_CLEAR(st->DeviceError);
    return 0;
}

static void module_free(void *m) { (void)module_clear((PyObject *)m); }

/* Each file sets up its own types and functions (the map: module.h). */
static int module_exec(PyObject *m)
{
    sw_py_state *st = sw_py_module_state(m);
    if (sw_py_util_setup(m, st) < 0 ||
        sw_py_dtype_setup(m, st) < 0 ||
        sw_py_device_setup(m, st) < 0 ||
        sw_py_pressure_setup(m, st) < 0 ||
        sw_py_array_setup(m, st) < 0 ||
        sw_py_create_setup(m, st) < 0 ||
        sw_py_import_setup(m, st) < 0 ||
        sw_py_ops_setup(m, st) < 0 ||
        sw_py_operators_setup(m, st) < 0 ||
        sw_py_pickle_setup(m, st) < 0 ||
        sw_py_accounting_setup(m, st) < 0 ||
        sw_py_stats_setup(m, st) < 0 ||
        sw_py_size_setup(m, st) < 0 ||
        sw_py_queue_setup(m, st) < 0 ||
        sw_py_order_setup(m, st) < 0 ||
        sw_py_ordermap_setup(m, st) < 0 ||
        sw_py_history_setup(m, st) < 0 ||
        sw_py_pinned_setup(m, st) < 0 ||
        sw_py_testapi_setup(m, st) < 0 ||
        sw_py_capi_setup(m, st) < 0)
        return -1;
    char version[32];
    snprintf(version, sizeof version, "%d.%d.%d", SW_VERSION_MAJOR,
             SW_VERSION_MINOR, SW_VERSION_PATCH);
    if (PyModule_AddStringConstant(m, "__version__", version) < 0 ||
        PyModule_AddIntConstant(m, "ALLOC_GRANULARITY",
                                SW_ALLOC_GRANULARITY) < 0)
        return -1;
    return 0;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#if PY_VERSION_HEX >= 0x030C0000
    /* The pressure callback uses PyGILState_Ensure, which knows the main
     * interpreter only. */
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
#if PY_VERSION_HEX >= 0x030D0000
    /* Free-threaded Python keeps the GIL off on import: what the GIL used
     * to serialise has its own protection (module.h, "Threads"). */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

PyDoc_STRVAR(module_doc,
"spillway's C extension module; import spillway instead.\n"
"\n"
"Memory pressure runs the garbage collector: when an allocation fails on a\n"
"device, before anything is spilled, a callback registered on every\n"
"device this module opens runs gc.collect() (even under gc.disable()) and\n"
"retries when device memory was freed.  Rate limit: a full collection\n"
"that freed no device memory starts a back-off of max(50 ms, 10 x its\n"
"duration) during which pressure runs young collections (gc.collect(1))\n"
"instead; one that frees memory ends it; one collection at a time.  No\n"
"DeviceMemoryError without a full collection: a call that still fails\n"
"for want of memory with none since it began is made once more with one.\n");

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "spillway._spillway",
    .m_doc = module_doc,
    .m_size = sizeof(sw_py_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__spillway(void)
{
    return PyModuleDef_Init(&module_def);
}
