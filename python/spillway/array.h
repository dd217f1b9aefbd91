/*
 * array.h -- Array (array.c; views and indexing in view.c, DLPack export in
 * dlpack.c, import in import.c, operators in operators.c, pickling in
 * pickle.c) and the operations on arrays (ops.c, create.c).
 */
#ifndef SPILLWAY_PY_ARRAY_H
#define SPILLWAY_PY_ARRAY_H

#include "queue.h"

/* The producer of memory imported zero-copy through DLPack (import.c): its
 * DLManagedTensor, whose deleter is called once nothing uses the memory --
 * no Array or view on it, no export of it -- and the device has finished
 * the work queued on it.  Reference-counted without the GIL: an export's
 * deleter may drop the last reference on any thread. */
typedef struct sw_py_extmem {
    atomic_int refs;
    sw_device *dev;
    void *managed;  /* DLManagedTensor or DLManagedTensorVersioned */
    int versioned;
} sw_py_extmem;

void sw_py_extmem_ref(sw_py_extmem *x);
/* Any thread, with or without the GIL; NULL is a no-op. */
void sw_py_extmem_unref(sw_py_extmem *x);

typedef struct {
    PyObject_VAR_HEAD     /* ob_size: the number of dimensions */
    sw_buffer *buf;       /* our handle (a base, a view, or a retained
                           * reference shared with other Arrays) */
    DeviceObject *device; /* strong */
    sw_py_extmem *ext;    /* the producer of imported memory, or NULL */
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
/* An Array on another handle of src's memory (a view, or a retained
 * reference): it keeps src's producer, if any, alive too. */
PyObject *sw_py_array_wrap_view(sw_py_state *st, ArrayObject *src,
                                sw_buffer *buf, int ndim,
                                const Py_ssize_t *shape, size_t nelem);
/* Allocate an Array (the core of empty, zeros, asarray and the ops). */
PyObject *sw_py_array_alloc(sw_py_state *st, DeviceObject *d, sw_dtype dt,
                            int ndim, const Py_ssize_t *shape, size_t nelem,
                            const char *tag);
/* The same, taking the caller's reference to d (dropped on failure): one
 * count fewer on the Device that every thread using it shares. */
PyObject *sw_py_array_alloc_ref(sw_py_state *st, DeviceObject *d,
                                sw_dtype dt, int ndim,
                                const Py_ssize_t *shape, size_t nelem,
                                const char *tag);
/* A new Array like a for the result of an operation on a (and b, unless
 * NULL: of a's device): allocated beside them, so that making its room
 * never spills them, and refused (DeviceMemoryError, nothing moved) when
 * they and it cannot fit together -- before the allocation trims the
 * cache or spills anything for a launch that would then be refused. */
ArrayObject *sw_py_result_like(sw_py_state *st, ArrayObject *a,
                               ArrayObject *b, const char *tag);
/* -1 with ValueError when the array's device was closed. */
int sw_py_array_check_device(ArrayObject *a);
/* After an operation: while a DLPack export of the device's memory lives,
 * the host may be reading it, so operations complete before returning. */
int sw_py_sync_if_exported(sw_py_state *st, DeviceObject *d);

/* A new Array on a's device holding `bytes` (nbytes of a's dtype, in C
 * order) with the given shape, written from the host. */
PyObject *sw_py_array_from_host(sw_py_state *st, DeviceObject *d,
                                sw_dtype dt, int ndim,
                                const Py_ssize_t *shape, size_t nelem,
                                const void *bytes, const char *tag);
/* a's bytes read into host memory (PyMem_RawMalloc'ed, at least 1 byte),
 * a spilled array from its host copy; NULL with an exception set. */
void *sw_py_array_read_all(sw_py_state *st, ArrayObject *a);
/* A fresh NumPy array of dt (uint16 for bfloat16 when there is no
 * bfloat16 dtype and raw is set) and shape; new reference. */
PyObject *sw_py_np_empty(sw_py_state *st, sw_dtype dt, int ndim,
                         const Py_ssize_t *shape, int raw);

/* view.c: Array's methods and slots for views and elements. */
PyObject *sw_py_array_reshape(ArrayObject *a, PyObject *args);
Py_ssize_t sw_py_array_length(ArrayObject *a);
PyObject *sw_py_array_item(ArrayObject *a, Py_ssize_t i);
PyObject *sw_py_array_subscript(ArrayObject *a, PyObject *key);
int sw_py_array_ass_subscript(ArrayObject *a, PyObject *key,
                              PyObject *value);
PyObject *sw_py_array_iter(ArrayObject *a);
/* a.T: a view when at most one dimension is longer than 1, else a copy
 * with the axes reversed, made through host memory. */
PyObject *sw_py_array_get_T(ArrayObject *a, void *c);

/* dlpack.c: Array.__dlpack__ and Array.__dlpack_device__. */
PyObject *sw_py_array_dlpack(ArrayObject *a, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kwnames);
PyObject *sw_py_array_dlpack_device(ArrayObject *a, PyObject *unused);
/* The DLPack device (type, id) of a spillway device. */
void sw_py_dl_device_of(DeviceObject *d, int *type, int *id);
/* Whether d's memory is read by address (the simulated device, CUDA) or
 * through a handle (OpenCL's cl_mem). */
int sw_py_dl_linear(DeviceObject *d);
/* A live zero-copy export of d's memory that holds bytes [addr, addr + n)
 * (linear memory: addr = data + byte_offset) or, on a handle-based device,
 * bytes [byte_offset, byte_offset + n) of the handle data.  1 and the
 * memory in *mem when found, else 0. */
int sw_py_export_find(DeviceObject *d, uintptr_t data, uint64_t byte_offset,
                      size_t n, sw_devmem *mem);

/* A DLPack capsule of pinned memory (pinned.c): mem, a's shape and dtype,
 * no lease (the pin holds it); the arguments as __dlpack__'s.  On queue q
 * (NULL: the host's pin), a CUDA or HIP consumer's stream other than q's
 * waits for q's work first. */
PyObject *sw_py_dlpack_pinned(ArrayObject *a, sw_devmem mem, sw_queue *q,
                              int readonly, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames);

/* import.c: spillway.from_dlpack, and the DLPack import of asarray. */
PyObject *sw_py_from_dlpack(sw_py_state *st, PyObject *obj, PyObject *device,
                            int copy, const char *tag);

/* operators.c: the number slots, comparisons refused, and the methods
 * sum, copy, astype (all listed in array.c's type spec). */
PyObject *sw_py_array_add(PyObject *a, PyObject *b);
PyObject *sw_py_array_sub(PyObject *a, PyObject *b);
PyObject *sw_py_array_mul(PyObject *a, PyObject *b);
PyObject *sw_py_array_iadd(PyObject *a, PyObject *b);
PyObject *sw_py_array_isub(PyObject *a, PyObject *b);
PyObject *sw_py_array_imul(PyObject *a, PyObject *b);
PyObject *sw_py_array_neg(PyObject *a);
PyObject *sw_py_array_richcompare(PyObject *a, PyObject *b, int op);
PyObject *sw_py_array_sum_method(ArrayObject *a, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames);
PyObject *sw_py_array_copy(ArrayObject *a, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames);
PyObject *sw_py_array_astype(ArrayObject *a, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kwnames);
/* a converted to dt on the host (NumPy's conversions; bfloat16 through
 * float32) into a new Array on d. */
PyObject *sw_py_astype(sw_py_state *st, ArrayObject *a, sw_dtype dt,
                       DeviceObject *d, const char *tag);
/* A copy of a on its device: device to device, or from the host copy when
 * a is spilled (which leaves it spilled); on queue when given. */
PyObject *sw_py_array_copy_impl(sw_py_state *st, ArrayObject *a,
                                QueueObject *q, const char *tag);

/* pickle.c: __reduce_ex__, __copy__, __deepcopy__. */
PyObject *sw_py_array_reduce_ex(ArrayObject *a, PyObject *protocol);
PyObject *sw_py_array_copy_dunder(ArrayObject *a, PyObject *unused);
PyObject *sw_py_array_deepcopy(ArrayObject *a, PyObject *memo);

/* ------------------------------------------------------------------------
 * ops.c: operations on the device, on its default queue or on a Queue
 * ---------------------------------------------------------------------- */

enum {
    SW_PY_OP_FILL,
    SW_PY_OP_ADD,
    SW_PY_OP_SCALE,
    SW_PY_OP_AXPY,
    SW_PY_OP_COPY, /* out <- a, bytes (sw_buffer_copy: every dtype) */
    SW_PY_OP_BYTEFILL, /* out <- pattern s (its first n_pattern bytes),
                        * sw_buffer_fill: every dtype; no queue form */
    SW_PY_OP_SUM,      /* for sw_py_kernel_check only: sw_py_sum */
};

typedef struct {
    int kind;
    sw_buffer *out, *a, *b; /* AXPY: out is y, a is x */
    sw_scalar s;
    sw_dtype dtype;
    size_t n;          /* elements (COPY, BYTEFILL: of dtype too) */
    size_t n_pattern;  /* BYTEFILL: 1, 2, 4 or 8 */
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
/* Before anything moves: TypeError with the library's own message when
 * d's kernels cannot run `kind` on dt (the device lacks the dtype, or the
 * kernel is not defined for it, as add on bool).  buf: any buffer of d. */
int sw_py_kernel_check(sw_py_state *st, DeviceObject *d, int kind,
                       sw_dtype dt, sw_buffer *buf);
/* Set every element of a to v: the fill kernel where the device computes
 * with a's dtype (on queue when given), else a byte pattern on the default
 * queue, else (complex128 whose halves differ) a write from the host. */
int sw_py_fill(sw_py_state *st, ArrayObject *a, sw_scalar v,
               QueueObject *queue);
/* An argument that must be an Array of this module on an open device. */
ArrayObject *sw_py_array_arg(sw_py_state *st, PyObject *o, const char *fname,
                             const char *what);
/* b must match a: device, dtype (TypeError), shape (ValueError). */
int sw_py_check_match(ArrayObject *a, ArrayObject *b, const char *fname,
                      const char *an, const char *bn);
/* sum(a), reduced on the device: bool counts, int, float or complex. */
PyObject *sw_py_sum(sw_py_state *st, ArrayObject *a);
/* After an operation: out, or NULL with out released (r < 0). */
PyObject *sw_py_op_done(sw_py_state *st, ArrayObject *out, int r);

#endif /* SPILLWAY_PY_ARRAY_H */
