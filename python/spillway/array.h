/*
 * array.h -- Array (array.c; views and indexing in view.c, DLPack export in
 * dlpack.c) and the operations on arrays (ops.c, create.c).
 */
#ifndef SPILLWAY_PY_ARRAY_H
#define SPILLWAY_PY_ARRAY_H

#include "queue.h"

typedef struct {
    PyObject_VAR_HEAD     /* ob_size: the number of dimensions */
    sw_buffer *buf;       /* our handle (a base, a view, or a retained
                           * reference shared with other Arrays) */
    DeviceObject *device; /* strong */
    PyObject *weakreflist;
    size_t nelem;
    size_t nbytes;
    sw_dtype dtype;
    Py_ssize_t shape[];
} ArrayObject;

#define SW_PY_NDIM(a) ((int)Py_SIZE(a))

/* ------------------------------------------------------------------------
 * array.c
 * ---------------------------------------------------------------------- */

/* The Array wrapping buf (whose reference it takes: freed on failure). */
PyObject *sw_py_array_wrap(sw_py_state *st, DeviceObject *d, sw_buffer *buf,
                           sw_dtype dt, int ndim, const Py_ssize_t *shape,
                           size_t nelem);
/* Allocate an Array (the core of empty, zeros, asarray and the ops). */
PyObject *sw_py_array_alloc(sw_py_state *st, DeviceObject *d, sw_dtype dt,
                            int ndim, const Py_ssize_t *shape, size_t nelem,
                            const char *tag);
/* -1 with ValueError when the array's device was closed. */
int sw_py_array_check_device(ArrayObject *a);
/* After an operation: while a DLPack export of the device's memory lives,
 * the host may be reading it, so operations complete before returning. */
int sw_py_sync_if_exported(sw_py_state *st, DeviceObject *d);

/* view.c: Array's methods and slots for views and elements. */
PyObject *sw_py_array_reshape(ArrayObject *a, PyObject *args);
Py_ssize_t sw_py_array_length(ArrayObject *a);
PyObject *sw_py_array_subscript(ArrayObject *a, PyObject *key);
int sw_py_array_ass_subscript(ArrayObject *a, PyObject *key,
                              PyObject *value);

/* dlpack.c: Array.__dlpack__ and Array.__dlpack_device__. */
PyObject *sw_py_array_dlpack(ArrayObject *a, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kwnames);
PyObject *sw_py_array_dlpack_device(ArrayObject *a, PyObject *unused);

/* ------------------------------------------------------------------------
 * ops.c: operations on the device, on its default queue or on a Queue
 * ---------------------------------------------------------------------- */

enum { SW_PY_OP_FILL, SW_PY_OP_ADD, SW_PY_OP_SCALE, SW_PY_OP_AXPY };

typedef struct {
    int kind;
    sw_buffer *out, *a, *b; /* AXPY: out is y, a is x */
    sw_scalar s;
    sw_dtype dtype;
    size_t n;
} sw_py_op;

/* queue= argument: *out is NULL (absent or None: the default queue) or the
 * Queue, which must be on device d (when d is not NULL). */
int sw_py_queue_arg(sw_py_state *st, PyObject *o, DeviceObject *d,
                    const char *fname, QueueObject **out);
/* Run op on queue (NULL: the device's default queue), keeping
 * keep[0..nkeep) alive until the work has completed.  -1 with an exception
 * set on failure. */
int sw_py_do_op(sw_py_state *st, QueueObject *queue, const sw_py_op *op,
                PyObject *const *keep, int nkeep);

#endif /* SPILLWAY_PY_ARRAY_H */
