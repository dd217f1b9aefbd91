/*
 * c_api.h -- what spillway._spillway lends other extension modules: the
 * capsule spillway._spillway._c_api.
 *
 * Why a capsule.  The extension module links libspillway statically and
 * hides its symbols, so a second extension linking the library would get
 * a copy of its own: its own device registry (a second "sim:0"), its own
 * pressure callbacks, its own per-thread error message.  An extension
 * that lays something over spillway -- the PyTorch device in
 * python/spillway/torch/, a vendor's layer -- links no libspillway and
 * reaches this module's copy through the function pointers below, as
 * NumPy's and datetime's C APIs are reached.  The devices it uses are the
 * module's own Device objects, so the pressure callback that runs Python's
 * collector (pressure.c) is registered on them, and its figures are the
 * ones spillway.memory_info() shows.
 *
 * The struct is versioned: entries are only ever appended, and a user
 * checks version and size before reading one.  Every library entry is the
 * public function of include/spillway.h of the same name, with its
 * contract; none of them needs the GIL (those that can block are better
 * called without it).  The module entries need the GIL.
 */
#ifndef SPILLWAY_PY_C_API_H
#define SPILLWAY_PY_C_API_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "spillway.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SW_PY_C_API_CAPSULE "spillway._spillway._c_api"
#define SW_PY_C_API_VERSION 1

typedef struct sw_py_c_api {
    int version; /* SW_PY_C_API_VERSION of the lender */
    size_t size; /* sizeof(sw_py_c_api) of the lender */

    /* Errors and sizes. */
    const char *(*last_error)(void);
    const char *(*err_name)(int err);
    int (*parse_size)(const char *s, uint64_t *out);
    const char *(*format_bytes)(uint64_t n, char *buf, size_t len);

    /* Devices. */
    const char *(*device_name)(const sw_device *dev);
    int (*device_host_addressable)(sw_device *dev, int *yes);
    int (*device_synchronize)(sw_device *dev);
    int (*memory_info_get)(sw_device *dev, sw_memory_info *out);
    int (*reset_peak)(sw_device *dev);
    int (*reset_counters)(sw_device *dev);
    int (*set_memory_budget)(sw_device *dev, uint64_t bytes);
    int (*get_memory_budget)(sw_device *dev, uint64_t *bytes);
    int (*set_host_budget)(sw_device *dev, uint64_t bytes);
    int (*get_host_budget)(sw_device *dev, uint64_t *bytes);
    int (*empty_cache)(sw_device *dev);

    /* Buffers. */
    int (*buffer_alloc)(sw_device *dev, size_t size, const char *tag,
                        sw_buffer **out);
    int (*buffer_free)(sw_buffer *buf);
    int (*buffer_retain)(sw_buffer *buf);
    int (*buffer_size)(sw_buffer *buf, size_t *size);
    int (*buffer_state_get)(sw_buffer *buf, sw_buffer_state *state);
    int (*buffer_id)(sw_buffer *buf, uint64_t *id);
    int (*buffer_read)(sw_buffer *buf, size_t offset, void *dst, size_t n);
    int (*buffer_write)(sw_buffer *buf, size_t offset, const void *src,
                        size_t n);
    int (*buffer_copy)(sw_buffer *dst, size_t dst_offset, sw_buffer *src,
                       size_t src_offset, size_t n);
    int (*buffer_fill)(sw_buffer *buf, size_t offset, size_t n,
                       const void *pattern, size_t pattern_size);
    int (*buffer_advise)(sw_buffer *buf, sw_advice advice);

    /* Pins: the host's (q NULL) and a queue's. */
    int (*launch_begin_q)(sw_queue *q, sw_buffer *const *bufs, size_t n,
                          sw_devmem *ptrs);
    int (*launch_begin_q_access)(sw_queue *q, sw_buffer *const *bufs,
                                 const unsigned char *access, size_t n,
                                 sw_devmem *ptrs);
    int (*launch_end_q)(sw_queue *q, sw_buffer *const *bufs, size_t n);

    /* The module, with the GIL.  resolve_device: a device argument (a
     * spillway.Device, a spec such as "sim:0", or None for the default)
     * -> a new reference to the module's Device, its handle in *dev,
     * counted as one user of it until device_unuse (a Device closed from
     * Python really closes when its last user goes); NULL with an
     * exception set.  raise_error sets the module's exception for a
     * library error code (DeviceMemoryError, ValueError, ...) with the
     * calling thread's message and returns NULL. */
    PyObject *(*resolve_device)(PyObject *module, PyObject *obj,
                                sw_device **dev);
    void (*device_unuse)(PyObject *device);
    PyObject *(*raise_error)(PyObject *module, int rc);

    /* Queues: a runtime's own streams joined (sw_queue_wrap_native), so
     * that its kernels' pins are ordered on them. */
    int (*queue_create)(sw_device *dev, sw_queue **out);
    int (*queue_wrap_native)(sw_device *dev, uintptr_t handle,
                             sw_queue **out);
    int (*queue_native)(sw_queue *q, uintptr_t *handle);
    int (*queue_release)(sw_queue *q);
    int (*queue_synchronize)(sw_queue *q);
    int (*device_native_context)(sw_device *dev, uintptr_t *context);
} sw_py_c_api;

#ifdef __cplusplus
}
#endif
#endif /* SPILLWAY_PY_C_API_H */
