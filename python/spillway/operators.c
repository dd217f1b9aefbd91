/*
 * operators.c -- Array's operators and methods on the built-in kernels:
 * a + b, a - b, a * s, s * a, -a, a += b, a -= b, a *= s, a.sum(),
 * a.copy(), a.astype(dtype); comparisons refused.
 *
 * spillway is not an array library: only what the kernels express is
 * here.  So operands are two Arrays of the same device, dtype and shape
 * (no broadcasting, no promotion: TypeError / ValueError as for add()),
 * or an Array and a number for `*`.  There is no elementwise product and
 * no scalar addition kernel: array * array and array + number are
 * TypeErrors that say so.  Operands this module does not know (a NumPy
 * array, a list) give NotImplemented, so that Python asks the other side,
 * and NumPy, told by Array.__array_ufunc__ = None, hands it back: a
 * TypeError rather than a silent host computation.
 *
 * Formulations, and their rounding:
 *   a + b    add kernel: out = a + b, one rounding
 *   a - b    a copy of a (device to device), then axpy(-1, b, out): out =
 *            (-1) * b + a; the product by -1 is exact, so the result is
 *            a - b rounded once, as IEEE subtraction (fused or not);
 *            float16 and bfloat16 compute in float32 and round, as NumPy's
 *            float16 does; integers wrap (unsigned ones through the
 *            all-ones factor, whose product wraps to the negation)
 *   a * s    scale kernel, one rounding; -a is scale by -1 (exact)
 *   a += b   add(a, b, out=a); a -= b axpy(-1, b, a); a *= s scale in place
 *
 * Complex -a, a - b and a -= b run those kernels on the parts: the buffer
 * read as twice as many floats of the part's type, scaled by the real -1.
 * The complex product by -1 + 0i is not a negation: its 0 * inf terms made
 * -(inf + 0i) -inf + nan i, and its + 0 terms lost signs of zero
 * (-(0 + 0i) came out -0 + 0i).  Part by part it is NumPy's negative and
 * subtract, to the bit but for the sign of a NaN (scaling leaves it;
 * NumPy's negative flips it).
 */
#include "array.h"
#include "dtype.h"

#include <string.h>

/* A number for `*`: not an Array, and not a sequence (a NumPy array
 * answers PyNumber_Check too; a NumPy scalar is no sequence). */
static int is_scalar(sw_py_state *st, PyObject *o)
{
    return !Py_IS_TYPE(o, st->array_type) && PyNumber_Check(o) &&
           !PySequence_Check(o);
}

static PyObject *no_scalar_kernel(PyObject *a, PyObject *b, const char *op)
{
    PyErr_Format(PyExc_TypeError,
                 "spillway.Array %s %.100s: there is no kernel for an array "
                 "and a scalar here (only `*` scales); make an array of the "
                 "value first (sw.full(a.shape, value, a.dtype))",
                 op, Py_TYPE(b)->tp_name);
    (void)a;
    return NULL;
}

/* The type of a complex dtype's parts when the device computes with it,
 * else -1 (a real dtype; or a backend that declares complex and not its
 * parts, which keeps the complex kernels). */
static int parts_dtype(DeviceObject *d, sw_dtype dt)
{
    int r = dt == SW_COMPLEX64    ? SW_FLOAT32
            : dt == SW_COMPLEX128 ? SW_FLOAT64
                                  : -1;
    return r >= 0 && ((d->dtypes >> r) & 1u) ? r : -1;
}

/* The kernel's dtype, element count and -1 for a negation of a's
 * elements: over the parts of a complex array (above). */
static void negation_of(ArrayObject *a, sw_dtype *dt, size_t *n,
                        sw_scalar *minus_one)
{
    int r = parts_dtype(a->device, a->dtype);
    *dt = r >= 0 ? (sw_dtype)r : a->dtype;
    *n = r >= 0 ? 2 * a->nelem : a->nelem;
    *minus_one = sw_py_scalar_minus_one(*dt);
}

/* out = a + b (out NULL: a new array). */
static PyObject *do_add(sw_py_state *st, ArrayObject *a, ArrayObject *b,
                        ArrayObject *out, const char *name)
{
    if (sw_py_array_check_device(a) < 0 || sw_py_array_check_device(b) < 0 ||
        sw_py_check_match(a, b, name, "a", "b") < 0 ||
        sw_py_kernel_check(st, a->device, SW_PY_OP_ADD, a->dtype, a->buf) < 0)
        return NULL;
    out = out ? (ArrayObject *)Py_NewRef(out)
              : sw_py_result_like(st, a, b, "add");
    if (out == NULL)
        return NULL;
    sw_py_op op = {.kind = SW_PY_OP_ADD, .out = out->buf, .a = a->buf,
                   .b = b->buf, .dtype = a->dtype, .n = a->nelem};
    return sw_py_op_done(st, out, sw_py_do_op(st, NULL, &op, NULL, 0));
}

/* out = out - b by axpy(-1, b, out), out being a copy of a (or a itself,
 * in place). */
static PyObject *do_sub(sw_py_state *st, ArrayObject *a, ArrayObject *b,
                        int inplace, const char *name)
{
    if (sw_py_array_check_device(a) < 0 || sw_py_array_check_device(b) < 0 ||
        sw_py_check_match(a, b, name, "a", "b") < 0 ||
        sw_py_kernel_check(st, a->device, SW_PY_OP_AXPY, a->dtype, a->buf) <
            0)
        return NULL;
    ArrayObject *out;
    if (inplace) {
        out = (ArrayObject *)Py_NewRef(a);
    } else {
        out = sw_py_result_like(st, a, b, "sub");
        if (out == NULL)
            return NULL;
        sw_py_op cp = {.kind = SW_PY_OP_COPY, .out = out->buf, .a = a->buf,
                       .dtype = a->dtype, .n = a->nelem};
        if (sw_py_do_op(st, NULL, &cp, NULL, 0) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    sw_py_op op = {.kind = SW_PY_OP_AXPY, .out = out->buf, .a = b->buf};
    negation_of(a, &op.dtype, &op.n, &op.s);
    return sw_py_op_done(st, out, sw_py_do_op(st, NULL, &op, NULL, 0));
}

/* Whether a's device can scale a (the kernel checked before the factor
 * is: a bool array times 2 is a TypeError for want of a kernel, not a
 * ValueError for 2 being no truth value). */
static int scale_check(sw_py_state *st, ArrayObject *a)
{
    if (sw_py_array_check_device(a) < 0)
        return -1;
    return sw_py_kernel_check(st, a->device, SW_PY_OP_SCALE, a->dtype,
                              a->buf);
}

/* out = s * a (out NULL: a new array), scale_check()ed; over dt's n
 * elements of the buffers (negation_of). */
static PyObject *do_scale(sw_py_state *st, ArrayObject *a, sw_scalar s,
                          sw_dtype dt, size_t n, ArrayObject *out,
                          const char *tag)
{
    out = out ? (ArrayObject *)Py_NewRef(out)
              : sw_py_result_like(st, a, NULL, tag);
    if (out == NULL)
        return NULL;
    sw_py_op op = {.kind = SW_PY_OP_SCALE, .out = out->buf, .a = a->buf,
                   .s = s, .dtype = dt, .n = n};
    return sw_py_op_done(st, out, sw_py_do_op(st, NULL, &op, NULL, 0));
}

/* ------------------------------------------------------------------------
 * The number slots
 * ---------------------------------------------------------------------- */

#define BOTH_ARRAYS(st, a, b)                                                 \
    (Py_IS_TYPE(a, (st)->array_type) && Py_IS_TYPE(b, (st)->array_type))

static PyObject *binary(PyObject *a, PyObject *b, int kind, int inplace)
{
    /* The slot is the Array type's: one of the two is an Array (the type
     * cannot be subclassed), the one whose slot this is. */
    PyNumberMethods *nm = Py_TYPE(a)->tp_as_number;
    PyTypeObject *tp = nm != NULL && nm->nb_add == sw_py_array_add
                           ? Py_TYPE(a)
                           : Py_TYPE(b);
    sw_py_state *st = sw_py_type_state(tp);
    if (st == NULL)
        return NULL;
    static const char *const sym[] = {"+", "-", "*"};
    static const char *const isym[] = {"+=", "-=", "*="};
    const char *name = inplace ? isym[kind] : sym[kind];
    if (BOTH_ARRAYS(st, a, b)) {
        ArrayObject *x = (ArrayObject *)a, *y = (ArrayObject *)b;
        switch (kind) {
        case 0:
            return do_add(st, x, y, inplace ? x : NULL, name);
        case 1:
            return do_sub(st, x, y, inplace, name);
        default:
            PyErr_Format(PyExc_TypeError,
                         "spillway.Array %s spillway.Array: there is no "
                         "elementwise product kernel (only scaling by a "
                         "number: a * 2.0); multiply on the host instead",
                         name);
            return NULL;
        }
    }
    PyObject *arr = Py_IS_TYPE(a, st->array_type) ? a : b;
    PyObject *other = arr == a ? b : a;
    if (!is_scalar(st, other))
        Py_RETURN_NOTIMPLEMENTED;
    if (kind != 2)
        return no_scalar_kernel(arr, other, name);
    ArrayObject *x = (ArrayObject *)arr;
    sw_scalar s;
    if (scale_check(st, x) < 0 ||
        sw_py_scalar_from_py(other, x->dtype, &s, "the factor") < 0)
        return NULL;
    return do_scale(st, x, s, x->dtype, x->nelem, inplace ? x : NULL,
                    "scale");
}

PyObject *sw_py_array_add(PyObject *a, PyObject *b)
{
    return binary(a, b, 0, 0);
}

PyObject *sw_py_array_sub(PyObject *a, PyObject *b)
{
    return binary(a, b, 1, 0);
}

PyObject *sw_py_array_mul(PyObject *a, PyObject *b)
{
    return binary(a, b, 2, 0);
}

PyObject *sw_py_array_iadd(PyObject *a, PyObject *b)
{
    return binary(a, b, 0, 1);
}

PyObject *sw_py_array_isub(PyObject *a, PyObject *b)
{
    return binary(a, b, 1, 1);
}

PyObject *sw_py_array_imul(PyObject *a, PyObject *b)
{
    return binary(a, b, 2, 1);
}

PyObject *sw_py_array_neg(PyObject *a)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(a));
    if (st == NULL)
        return NULL;
    ArrayObject *x = (ArrayObject *)a;
    if (scale_check(st, x) < 0)
        return NULL;
    sw_dtype dt;
    size_t n;
    sw_scalar minus_one;
    negation_of(x, &dt, &n, &minus_one);
    return do_scale(st, x, minus_one, dt, n, NULL, "neg");
}

/* Comparisons would need a kernel spillway does not have, and == must not
 * quietly mean identity (a == b True for the same object, False for equal
 * contents): every comparison is a TypeError. */
PyObject *sw_py_array_richcompare(PyObject *a, PyObject *b, int op)
{
    static const char *const ops[] = {"<", "<=", "==", "!=", ">", ">="};
    (void)a;
    (void)b;
    PyErr_Format(PyExc_TypeError,
                 "spillway arrays do not support comparisons (%s): there is "
                 "no comparison kernel, and == is not identity; compare on "
                 "the host (a.numpy() %s b.numpy()), or use `is`",
                 ops[op], ops[op]);
    return NULL;
}

/* ------------------------------------------------------------------------
 * sum, copy, astype
 * ---------------------------------------------------------------------- */

/* sum(axis=None, dtype=None, out=None, keepdims=False): numpy.sum(a) calls
 * a.sum with those keywords, so they are taken -- at their defaults only:
 * the kernel reduces the whole array. */
PyObject *sw_py_array_sum_method(ArrayObject *a, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"axis", "dtype", "out", "keepdims"};
    PyObject *v[4];
    if (sw_py_parse_args("sum", args, nargs, kwnames, names, 4, 4, 0, v) < 0)
        return NULL;
    int keepdims = 0;
    if (!sw_py_absent(v[3]) && (keepdims = PyObject_IsTrue(v[3])) < 0)
        return NULL;
    if (!sw_py_absent(v[0]) || !sw_py_absent(v[1]) || !sw_py_absent(v[2]) ||
        keepdims) {
        PyErr_SetString(PyExc_TypeError,
                        "sum(): the device's sum kernel reduces the whole "
                        "array into a Python number; axis, dtype, out and "
                        "keepdims are not supported (reduce on the host: "
                        "a.numpy().sum(...))");
        return NULL;
    }
    sw_py_state *st = sw_py_type_state(Py_TYPE(a));
    if (st == NULL || sw_py_array_check_device(a) < 0)
        return NULL;
    return sw_py_sum(st, a);
}

PyObject *sw_py_array_copy_impl(sw_py_state *st, ArrayObject *a,
                                QueueObject *q, const char *tag)
{
    if (sw_py_array_check_device(a) < 0)
        return NULL;
    sw_buffer_state state = SW_RESIDENT;
    int rc;
    NOGIL(rc = sw_buffer_state_get(a->buf, &state));
    if (rc != SW_OK)
        return sw_py_raise(st, rc);
    if (state == SW_SPILLED && q == NULL) {
        /* One host-to-device copy from the host copy, rather than a
         * restore (which may spill others) and a device copy. */
        void *tmp = sw_py_array_read_all(st, a);
        if (tmp == NULL)
            return NULL;
        PyObject *r = sw_py_array_from_host(st, a->device, a->dtype,
                                            SW_PY_NDIM(a), a->shape, a->nelem,
                                            tmp, tag ? tag : "copy");
        PyMem_RawFree(tmp);
        return r;
    }
    ArrayObject *out = sw_py_result_like(st, a, NULL, tag ? tag : "copy");
    if (out == NULL)
        return NULL;
    sw_py_op op = {.kind = SW_PY_OP_COPY, .out = out->buf, .a = a->buf,
                   .dtype = a->dtype, .n = a->nelem};
    PyObject *keep[2] = {(PyObject *)a, (PyObject *)out};
    return sw_py_op_done(st, out, sw_py_do_op(st, q, &op, keep, 2));
}

PyObject *sw_py_array_copy(ArrayObject *a, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"queue"};
    PyObject *v[1];
    if (sw_py_parse_args("copy", args, nargs, kwnames, names, 1, 0, 0, v) < 0)
        return NULL;
    sw_py_state *st = sw_py_type_state(Py_TYPE(a));
    QueueObject *q;
    if (st == NULL || sw_py_array_check_device(a) < 0 ||
        sw_py_queue_arg(st, v[0], a->device, "copy", &q) < 0)
        return NULL;
    return sw_py_array_copy_impl(st, a, q, NULL);
}

/* a's elements as a NumPy array NumPy can convert: bfloat16 widened to
 * float32 (exact). */
static PyObject *host_source(sw_py_state *st, ArrayObject *a)
{
    PyObject *raw = sw_py_np_empty(st, a->dtype, SW_PY_NDIM(a), a->shape, 1);
    if (raw == NULL)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(raw, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) <
        0) {
        Py_DECREF(raw);
        return NULL;
    }
    int rc = SW_OK;
    if (a->nbytes > 0)
        NOGIL(rc = sw_buffer_read(a->buf, 0, view.buf, a->nbytes));
    PyObject *r = raw;
    if (rc != SW_OK) {
        sw_py_raise(st, rc);
        r = NULL;
    } else if (a->dtype == SW_BFLOAT16) {
        r = sw_py_np_empty(st, SW_FLOAT32, SW_PY_NDIM(a), a->shape, 1);
        Py_buffer fv;
        if (r != NULL && PyObject_GetBuffer(r, &fv, PyBUF_WRITABLE) == 0) {
            sw_py_bf16_to_f32(view.buf, fv.buf, a->nelem);
            PyBuffer_Release(&fv);
        } else {
            Py_CLEAR(r);
        }
    }
    PyBuffer_Release(&view);
    if (r != raw)
        Py_DECREF(raw);
    return r;
}

PyObject *sw_py_astype(sw_py_state *st, ArrayObject *a, sw_dtype dt,
                       DeviceObject *d, const char *tag)
{
    if (sw_py_array_check_device(a) < 0)
        return NULL;
    PyObject *np = sw_py_numpy(st);
    PyObject *src = np ? host_source(st, a) : NULL;
    if (src == NULL)
        return NULL;
    PyObject *conv;
    if (dt == SW_BFLOAT16)
        conv = PyObject_CallMethod(np, "ascontiguousarray", "Os", src,
                                   "float32");
    else if (a->dtype == dt)
        conv = Py_NewRef(src);
    else {
        PyObject *npdt = sw_py_np_dtype(st, dt);
        conv = npdt ? PyObject_CallMethod(src, "astype", "O", npdt) : NULL;
    }
    Py_DECREF(src);
    if (conv == NULL)
        return NULL;
    Py_buffer view;
    PyObject *r = NULL;
    if (PyObject_GetBuffer(conv, &view, PyBUF_C_CONTIGUOUS) == 0) {
        const void *bytes = view.buf;
        uint16_t *bits = NULL;
        if (dt == SW_BFLOAT16 && a->nelem > 0) {
            bits = PyMem_RawMalloc(2 * a->nelem);
            if (bits != NULL)
                sw_py_bf16_from_f32(view.buf, bits, a->nelem);
            bytes = bits;
        }
        if (dt == SW_BFLOAT16 && a->nelem > 0 && bits == NULL)
            PyErr_NoMemory();
        else
            r = sw_py_array_from_host(st, d, dt, SW_PY_NDIM(a), a->shape,
                                      a->nelem, bytes,
                                      tag ? tag : "astype");
        PyMem_RawFree(bits);
        PyBuffer_Release(&view);
    }
    Py_DECREF(conv);
    return r;
}

PyObject *sw_py_array_astype(ArrayObject *a, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"dtype", "copy"};
    PyObject *v[2];
    if (sw_py_parse_args("astype", args, nargs, kwnames, names, 2, 2, 1, v) <
        0)
        return NULL;
    sw_py_state *st = sw_py_type_state(Py_TYPE(a));
    sw_dtype dt;
    if (st == NULL || sw_py_array_check_device(a) < 0 ||
        sw_py_parse_dtype(st, v[0], &dt) < 0)
        return NULL;
    int copy = 1;
    if (!sw_py_absent(v[1]) && (copy = PyObject_IsTrue(v[1])) < 0)
        return NULL;
    if (dt == a->dtype)
        return copy ? sw_py_array_copy_impl(st, a, NULL, "astype")
                    : Py_NewRef(a);
    return sw_py_astype(st, a, dt, a->device, NULL);
}

int sw_py_operators_setup(PyObject *m, sw_py_state *st)
{
    (void)m;
    (void)st;
    return 0;
}
