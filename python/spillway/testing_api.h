/*
 * testing_api.h -- what spillway._spillway lends its test-only sibling,
 * spillway._spillway_testing (CPython's _testcapi model: test entry points
 * never live in the module users import).
 *
 * Why a capsule and not a link.  Each extension module links libspillway
 * statically and hides its symbols (-Wl,--exclude-libs,ALL), so a test
 * module linking the library would get a copy of its own: its own device
 * registry, its own per-thread error message, devices opened twice.  The
 * test module links no libspillway at all (an sw_* call in it fails to
 * load); everything it does to a device goes through the production
 * module's copy, lent as function pointers in one struct, exported as the
 * capsule spillway._spillway._testing_api (datetime's C-API style).
 * Functions that read the module's state take the production module object
 * (the test module holds a reference to it).
 *
 * The struct is versioned: entries are only ever appended, and a user
 * checks version and size before reading one.
 */
#ifndef SPILLWAY_PY_TESTING_API_H
#define SPILLWAY_PY_TESTING_API_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "spillway.h"

#include <stdint.h>

#define SW_PY_TESTING_API_CAPSULE "spillway._spillway._testing_api"
#define SW_PY_TESTING_API_VERSION 3

/* The pressure collector's counters (process-wide: pressure.c). */
typedef struct {
    uint64_t collections, fruitful, skipped_backoff, skipped_shared;
    int64_t backoff_left_ns;
    /* Appended in version 2: full and young collections (their sum is
     * collections), and retries made for a full one before an OOM. */
    uint64_t full, young, last_chance;
    /* Version 3: gc.collect() calls that collected nothing because
     * another collection ran (free-threaded builds), tried again. */
    uint64_t busy_retries;
} sw_py_gc_stats;

/* Live objects of the module, and Python host tasks not yet finished
 * (process-wide). */
typedef struct {
    Py_ssize_t queues, managers, events;
    long host_tasks;
} sw_py_object_counts;

typedef struct {
    int version; /* SW_PY_TESTING_API_VERSION */
    size_t size; /* sizeof(sw_py_testing_api) of the lender */

    /* The production module's libspillway.  Without the GIL (these take
     * device locks); last_error is the calling thread's message of that
     * copy. */
    int (*buffer_alloc)(sw_device *dev, size_t size, const char *tag,
                        sw_buffer **out);
    int (*buffer_free)(sw_buffer *buf);
    int (*buffer_read)(sw_buffer *buf, size_t offset, void *dst, size_t n);
    int (*buffer_write)(sw_buffer *buf, size_t offset, const void *src,
                        size_t n);
    int (*inject_fault)(sw_device *dev, sw_fault_op op, uint64_t nth,
                        int persistent);
    const char *(*last_error)(void);
    const char *(*err_name)(int err);

    /* The module's state, with the GIL.  resolve_device: a device=
     * argument (Device, spec or None) -> a new reference to the Device, its
     * handle in *dev, counted as one user of it (the caller drops it with
     * device_unuse); NULL with an exception set (ValueError: closed).  device_use/unuse count a
     * user of a Device (a closed one really closes when the last goes).
     * raise_error sets the module's exception for a library error code and
     * returns NULL. */
    PyObject *(*resolve_device)(PyObject *module, PyObject *obj,
                                sw_device **dev);
    void (*device_use)(PyObject *device);
    void (*device_unuse)(PyObject *device);
    PyObject *(*raise_error)(PyObject *module, int rc);
    /* A list of the open Devices. */
    PyObject *(*open_devices)(PyObject *module);
    /* Put list (a list, taken over, or NULL) in place of the list of weak
     * references to new Arrays; returns the old one (or NULL). */
    PyObject *(*swap_track)(PyObject *module, PyObject *list);
    void (*object_counts)(PyObject *module, sw_py_object_counts *out);

    /* Process-wide. */
    void (*gc_stats)(sw_py_gc_stats *out);
    /* Set the collector's minimum back-off (ns >= 0) or only read it
     * (ns < 0); returns the old value. */
    int64_t (*gc_min_interval)(int64_t ns);
    void (*gc_backoff_reset)(void);
    /* Without the GIL: wait until no Python host task is pending, at most
     * timeout seconds (< 0: no limit); 1 when none is. */
    int (*wait_host_tasks)(double timeout);
    /* With the GIL: drop the references finished host tasks handed back. */
    void (*drain_releases)(void);
    /* Whether this thread is running a Python host task. */
    int (*in_host_task)(void);
} sw_py_testing_api;

#endif /* SPILLWAY_PY_TESTING_API_H */
