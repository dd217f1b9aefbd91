/*
 * dtype.h -- element types and their NumPy names (dtype.c), shapes
 * (shape.c).
 */
#ifndef SPILLWAY_PY_DTYPE_H
#define SPILLWAY_PY_DTYPE_H

#include "module.h"

typedef struct {
    const char *name;
    const char *np_str; /* NumPy's dtype.str on a little-endian host, less
                         * the byte-order character */
    size_t size;
    int is_float;
    uint8_t dl_code; /* DLPack's type code */
} sw_py_dtype_info;

/* Indexed by sw_dtype. */
extern const sw_py_dtype_info sw_py_dtypes[4];

#define SW_PY_DTYPE_HELP                                                      \
    "spillway arrays hold float32, float64, int32 or int64"

/* ------------------------------------------------------------------------
 * dtype.c.  NumPy is imported on first need: only numpy(), dtype objects
 * and conversions of non-buffer objects use it.
 * ---------------------------------------------------------------------- */

/* The numpy module (borrowed; NULL with an exception set). */
PyObject *sw_py_numpy(sw_py_state *st);
/* The numpy.dtype object for dt (borrowed). */
PyObject *sw_py_np_dtype(sw_py_state *st, sw_dtype dt);
/* dtype argument: None (float32), a name ("float32", "f4", ...), a
 * numpy.dtype or anything numpy.dtype() accepts; native byte order only. */
int sw_py_parse_dtype(sw_py_state *st, PyObject *obj, sw_dtype *out);
/* The element type of a buffer (PEP 3118 format), native order only. */
int sw_py_dtype_from_format(const char *fmt, Py_ssize_t itemsize,
                            sw_dtype *out);
/* A Python number as an element of dt: integer arrays take integers only
 * (in range); float arrays take any real number.  `what` names it in
 * errors. */
int sw_py_scalar_from_py(PyObject *obj, sw_dtype dt, sw_scalar *out,
                         const char *what);
/* One element read from memory as a Python number. */
PyObject *sw_py_scalar_to_py(const void *p, sw_dtype dt);
/* An element value as the bytes the array stores. */
void sw_py_scalar_store(void *p, sw_dtype dt, sw_scalar v);

/* ------------------------------------------------------------------------
 * shape.c
 * ---------------------------------------------------------------------- */

/* shape: an integer or a sequence of at most SW_PY_MAXDIMS non-negative
 * integers. */
int sw_py_parse_shape(PyObject *obj, Py_ssize_t *shape, int *ndim);
/* nelem * itemsize without overflow, within Py_ssize_t; -1 with ValueError
 * (naming `whole`, the shape as given, when not NULL) otherwise. */
int sw_py_shape_sizes(const Py_ssize_t *shape, int ndim, size_t itemsize,
                      PyObject *whole, size_t *nelem, size_t *nbytes);
PyObject *sw_py_shape_tuple(const Py_ssize_t *shape, int ndim);

#endif /* SPILLWAY_PY_DTYPE_H */
