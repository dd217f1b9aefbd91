/*
 * dtype.h -- element types and their NumPy, buffer-protocol and DLPack
 * names, single elements as Python numbers (dtype.c); float16 and bfloat16
 * bits (dtype.c); shapes (shape.c).
 */
#ifndef SPILLWAY_PY_DTYPE_H
#define SPILLWAY_PY_DTYPE_H

#include "module.h"

typedef struct {
    const char *name;   /* NumPy's name, which is also the library's */
    const char *np_str; /* NumPy's dtype.str less the byte-order character
                         * ("f4", "b1", "c16"); bfloat16: "V2", ml_dtypes'
                         * spelling, told apart by its name */
    const char *fmt;    /* PEP 3118 format ("?", "e", "Zf"); NULL for
                         * bfloat16, which has none */
    uint8_t size;
    uint8_t kind;       /* sw_dtype_kind: which member of sw_scalar */
    uint8_t dl_code;    /* DLPack's type code (bits: 8 * size) */
} sw_py_dtype_info;

/* Indexed by sw_dtype; checked against the library's own table when the
 * module is set up (sw_py_dtype_setup). */
extern const sw_py_dtype_info sw_py_dtypes[SW_DTYPE_COUNT];

#define SW_PY_DTYPE_HELP                                                      \
    "spillway arrays hold bool, int8, int16, int32, int64, uint8, uint16, "  \
    "uint32, uint64, float16, bfloat16, float32, float64, complex64 or "     \
    "complex128, in native byte order"

/* ------------------------------------------------------------------------
 * dtype.c.  NumPy is imported on first need: only numpy(), dtype objects
 * and conversions of non-buffer objects use it.  bfloat16 has no NumPy
 * dtype; when ml_dtypes is importable its bfloat16 stands for it.
 * ---------------------------------------------------------------------- */

int sw_py_dtype_setup(PyObject *m, sw_py_state *st);

/* The numpy module (borrowed; NULL with an exception set). */
PyObject *sw_py_numpy(sw_py_state *st);
/* The numpy.dtype object for dt (borrowed); for bfloat16, ml_dtypes' when
 * it is importable, else NULL with a TypeError that says what to do. */
PyObject *sw_py_np_dtype(sw_py_state *st, sw_dtype dt);
/* What Array.dtype returns: sw_py_np_dtype, or the str "bfloat16" when
 * there is no bfloat16 dtype object (new reference). */
PyObject *sw_py_dtype_obj(sw_py_state *st, sw_dtype dt);
/* dtype argument: None (float32), a name ("float32", "f4", "bfloat16",
 * ...), a numpy.dtype, anything numpy.dtype() accepts, or a torch.dtype;
 * native byte order only.  TypeError otherwise. */
int sw_py_parse_dtype(sw_py_state *st, PyObject *obj, sw_dtype *out);
/* The dtype named name (NULL-terminated), or -1 without an exception. */
int sw_py_dtype_by_name(const char *name, sw_dtype *out);
/* The element type of a buffer (PEP 3118 format), native order only. */
int sw_py_dtype_from_format(const char *fmt, Py_ssize_t itemsize,
                            sw_dtype *out);
/* The element type of a DLPack tensor; TypeError for what spillway cannot
 * hold (vector lanes, sub-byte and unknown types). */
int sw_py_dtype_from_dl(uint8_t code, uint8_t bits, uint16_t lanes,
                        sw_dtype *out);
/* A Python number as an element of dt: bool arrays take bools (and the
 * integers 0 and 1), integer arrays integers in range, float arrays real
 * numbers, complex arrays any number.  `what` names it in errors. */
int sw_py_scalar_from_py(PyObject *obj, sw_dtype dt, sw_scalar *out,
                         const char *what);
/* One element read from memory as a Python number (bool, int, float or
 * complex). */
PyObject *sw_py_scalar_to_py(const void *p, sw_dtype dt);
/* An element value as the bytes the array stores (size of dt). */
void sw_py_scalar_store(void *p, sw_dtype dt, sw_scalar v);
/* -1 in dt's kind: what `-` and `a - b` scale by (for unsigned types the
 * all-ones value, whose product wraps to the negation). */
sw_scalar sw_py_scalar_minus_one(sw_dtype dt);

/* bfloat16 <-> float32 arrays (round to nearest even; NaN stays NaN). */
void sw_py_bf16_from_f32(const float *src, uint16_t *dst, size_t n);
void sw_py_bf16_to_f32(const uint16_t *src, float *dst, size_t n);

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
