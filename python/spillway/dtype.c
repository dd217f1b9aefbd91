/*
 * dtype.c -- element types: their names, NumPy's dtype objects, buffer
 * formats and DLPack codes, single elements as Python numbers, and the bits
 * of float16 and bfloat16 (which C has no type for).
 */
#include "dtype.h"
#include "dlpack.h"

#include <math.h>
#include <string.h>

/* Indexed by sw_dtype.  np_str is NumPy's dtype.str less its byte order;
 * fmt the struct-module letter NumPy's buffers carry. */
const sw_py_dtype_info sw_py_dtypes[SW_DTYPE_COUNT] = {
    [SW_FLOAT32] = {"float32", "f4", "f", 4, SW_KIND_FLOAT, kDLFloat},
    [SW_FLOAT64] = {"float64", "f8", "d", 8, SW_KIND_FLOAT, kDLFloat},
    [SW_INT32] = {"int32", "i4", "i", 4, SW_KIND_INT, kDLInt},
    [SW_INT64] = {"int64", "i8", "q", 8, SW_KIND_INT, kDLInt},
    [SW_BOOL] = {"bool", "b1", "?", 1, SW_KIND_BOOL, kDLBool},
    [SW_INT8] = {"int8", "i1", "b", 1, SW_KIND_INT, kDLInt},
    [SW_INT16] = {"int16", "i2", "h", 2, SW_KIND_INT, kDLInt},
    [SW_UINT8] = {"uint8", "u1", "B", 1, SW_KIND_UINT, kDLUInt},
    [SW_UINT16] = {"uint16", "u2", "H", 2, SW_KIND_UINT, kDLUInt},
    [SW_UINT32] = {"uint32", "u4", "I", 4, SW_KIND_UINT, kDLUInt},
    [SW_UINT64] = {"uint64", "u8", "Q", 8, SW_KIND_UINT, kDLUInt},
    [SW_FLOAT16] = {"float16", "f2", "e", 2, SW_KIND_FLOAT, kDLFloat},
    [SW_BFLOAT16] = {"bfloat16", "V2", NULL, 2, SW_KIND_FLOAT, kDLBfloat},
    [SW_COMPLEX64] = {"complex64", "c8", "Zf", 8, SW_KIND_COMPLEX,
                      kDLComplex},
    [SW_COMPLEX128] = {"complex128", "c16", "Zd", 16, SW_KIND_COMPLEX,
                       kDLComplex},
};

/* The table repeats the library's names, sizes and kinds so that the hot
 * paths read a static array; a library with other values would be a build
 * of another version, refused at import rather than misread later. */
int sw_py_dtype_setup(PyObject *m, sw_py_state *st)
{
    (void)m;
    (void)st;
    for (int d = 0; d < SW_DTYPE_COUNT; d++) {
        sw_dtype_kind kind;
        const char *name = sw_dtype_name((sw_dtype)d);
        if (name == NULL || strcmp(name, sw_py_dtypes[d].name) != 0 ||
            sw_dtype_size((sw_dtype)d) != sw_py_dtypes[d].size ||
            sw_dtype_kind_get((sw_dtype)d, &kind) != SW_OK ||
            (int)kind != sw_py_dtypes[d].kind) {
            PyErr_Format(PyExc_ImportError,
                         "spillway: the library's element type %d (%s) is "
                         "not the module's %s: mismatched build",
                         d, name ? name : "?", sw_py_dtypes[d].name);
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * NumPy (imported on first need: only numpy(), dtype objects and
 * conversions of non-buffer objects use it)
 * ---------------------------------------------------------------------- */

PyObject *sw_py_numpy(sw_py_state *st)
{
    PyObject *np = sw_py_cache_load(&st->numpy);
    if (np != NULL)
        return np;
    np = PyImport_ImportModule("numpy");
    return np ? sw_py_cache_publish(&st->numpy, np) : NULL;
}

/* ml_dtypes' bfloat16 as a numpy.dtype, or None when it is not importable
 * (kept, so that the import is tried once). */
static PyObject *bf16_dtype(sw_py_state *st)
{
    PyObject *np = sw_py_numpy(st);
    if (np == NULL)
        return NULL;
    PyObject *mod = PyImport_ImportModule("ml_dtypes");
    PyObject *t = mod ? PyObject_GetAttrString(mod, "bfloat16") : NULL;
    Py_XDECREF(mod);
    PyObject *d = t ? PyObject_CallMethod(np, "dtype", "O", t) : NULL;
    Py_XDECREF(t);
    if (d == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_ImportError) &&
            !PyErr_ExceptionMatches(PyExc_AttributeError) &&
            !PyErr_ExceptionMatches(PyExc_TypeError))
            return NULL;
        PyErr_Clear();
        d = Py_NewRef(Py_None);
    }
    return d;
}

PyObject *sw_py_np_dtype(sw_py_state *st, sw_dtype dt)
{
    PyObject *d = sw_py_cache_load(&st->np_dtypes[dt]);
    if (d == NULL) {
        if (dt == SW_BFLOAT16) {
            d = bf16_dtype(st);
        } else {
            PyObject *np = sw_py_numpy(st);
            if (np == NULL)
                return NULL;
            d = PyObject_CallMethod(np, "dtype", "s", sw_py_dtypes[dt].name);
        }
        if (d == NULL)
            return NULL;
        d = sw_py_cache_publish(&st->np_dtypes[dt], d);
    }
    if (d == Py_None) {
        PyErr_SetString(PyExc_TypeError,
                        "NumPy has no bfloat16: convert on the device side "
                        "first (a.astype('float32')), hand the array over "
                        "through DLPack (torch.from_dlpack(a)), or install "
                        "ml_dtypes, whose bfloat16 NumPy arrays spillway "
                        "reads and writes");
        return NULL;
    }
    return d;
}

PyObject *sw_py_dtype_obj(sw_py_state *st, sw_dtype dt)
{
    PyObject *d = sw_py_np_dtype(st, dt);
    if (d == NULL && dt == SW_BFLOAT16 &&
        sw_py_cache_load(&st->np_dtypes[dt]) == Py_None) {
        PyErr_Clear();
        return PyUnicode_FromString("bfloat16");
    }
    return Py_XNewRef(d);
}

static PyObject *unsupported_dtype(PyObject *obj, const char *why)
{
    PyErr_Format(PyExc_TypeError, "unsupported dtype %R%s: " SW_PY_DTYPE_HELP,
                 obj, why);
    return NULL;
}

int sw_py_dtype_by_name(const char *name, sw_dtype *out)
{
    for (int i = 0; i < SW_DTYPE_COUNT; i++) {
        if (strcmp(name, sw_py_dtypes[i].name) == 0) {
            *out = (sw_dtype)i;
            return 0;
        }
    }
    return -1;
}

/* A name or a NumPy type string, without asking NumPy: "float32", "f4",
 * "<f4" (native order), "?", "bfloat16". */
static int dtype_from_string(const char *s, sw_dtype *out)
{
    if (sw_py_dtype_by_name(s, out) == 0)
        return 0;
    char native = PY_LITTLE_ENDIAN ? '<' : '>';
    const char *t = (s[0] == native || s[0] == '=' || s[0] == '|') ? s + 1
                                                                     : s;
    for (int i = 0; i < SW_DTYPE_COUNT; i++) {
        if (i != SW_BFLOAT16 && strcmp(t, sw_py_dtypes[i].np_str) == 0) {
            *out = (sw_dtype)i;
            return 0;
        }
    }
    if (strcmp(s, "?") == 0) {
        *out = SW_BOOL;
        return 0;
    }
    return -1;
}

/* A numpy.dtype: by its .str (the byte order tells non-native ones) and,
 * for bfloat16 (ml_dtypes: "<V2"), its name. */
static int dtype_from_np(PyObject *obj, PyObject *d, sw_dtype *out)
{
    PyObject *str = PyObject_GetAttrString(d, "str");
    PyObject *name = str ? PyObject_GetAttrString(d, "name") : NULL;
    const char *s = str ? PyUnicode_AsUTF8(str) : NULL;
    const char *n = name ? PyUnicode_AsUTF8(name) : NULL;
    int rc = -1;
    if (s != NULL && n != NULL) {
        char native = PY_LITTLE_ENDIAN ? '<' : '>';
        int foreign = s[0] != native && s[0] != '|' && s[0] != '=';
        if (foreign) {
            unsupported_dtype(obj, " (non-native byte order)");
        } else if (strcmp(n, "bfloat16") == 0 &&
                   strcmp(s + 1, "V2") == 0) {
            *out = SW_BFLOAT16;
            rc = 0;
        } else {
            for (int i = 0; i < SW_DTYPE_COUNT && rc != 0; i++) {
                if (i != SW_BFLOAT16 &&
                    strcmp(s + 1, sw_py_dtypes[i].np_str) == 0) {
                    *out = (sw_dtype)i;
                    rc = 0;
                }
            }
            if (rc != 0)
                unsupported_dtype(obj, "");
        }
    }
    Py_XDECREF(str);
    Py_XDECREF(name);
    return rc;
}

/* dtype argument: None (float32), a name, a numpy.dtype, anything
 * numpy.dtype() accepts (np.float64, float, complex, bool) or a
 * torch.dtype ("torch.bfloat16" names it).  Native byte order only. */
int sw_py_parse_dtype(sw_py_state *st, PyObject *obj, sw_dtype *out)
{
    if (sw_py_absent(obj)) {
        *out = SW_FLOAT32;
        return 0;
    }
    for (int i = 0; i < SW_DTYPE_COUNT; i++) {
        if (obj == sw_py_cache_load(&st->np_dtypes[i]) && obj != Py_None) {
            *out = (sw_dtype)i;
            return 0;
        }
    }
    if (PyUnicode_Check(obj)) {
        const char *s = sw_py_utf8(obj, "a dtype name");
        if (s == NULL)
            return -1;
        if (dtype_from_string(s, out) == 0)
            return 0;
    } else if (strcmp(Py_TYPE(obj)->tp_name, "torch.dtype") == 0) {
        /* torch's dtypes print as "torch.float32": no torch import. */
        PyObject *r = PyObject_Str(obj);
        const char *s = r ? PyUnicode_AsUTF8(r) : NULL;
        int ok = s != NULL && strncmp(s, "torch.", 6) == 0 &&
                 sw_py_dtype_by_name(s + 6, out) == 0;
        Py_XDECREF(r);
        if (ok)
            return 0;
        if (s == NULL)
            return -1;
        unsupported_dtype(obj, "");
        return -1;
    }
    /* Whatever NumPy calls one of ours. */
    PyObject *np = sw_py_numpy(st);
    if (np == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_ImportError))
            return -1;
        PyErr_Clear();
        unsupported_dtype(obj, "");
        return -1;
    }
    PyObject *d = PyObject_CallMethod(np, "dtype", "O", obj);
    if (d == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError) &&
            !PyErr_ExceptionMatches(PyExc_ValueError))
            return -1;
        PyErr_Clear();
        unsupported_dtype(obj, "");
        return -1;
    }
    int rc = dtype_from_np(obj, d, out);
    Py_DECREF(d);
    return rc;
}

/* The element type of a buffer (PEP 3118 format), native order only.
 * Integers go by signedness and size ('l' is 8 bytes here, 'i' 4). */
int sw_py_dtype_from_format(const char *fmt, Py_ssize_t itemsize,
                            sw_dtype *out)
{
    static const sw_dtype sint[9] = {[1] = SW_INT8, [2] = SW_INT16,
                                     [4] = SW_INT32, [8] = SW_INT64};
    static const sw_dtype uint[9] = {[1] = SW_UINT8, [2] = SW_UINT16,
                                     [4] = SW_UINT32, [8] = SW_UINT64};
    const char *f = fmt ? fmt : "B";
    char order = '@';
    if (*f == '@' || *f == '=' || *f == '<' || *f == '>' || *f == '!')
        order = *f++;
    int foreign = itemsize > 1 && (PY_LITTLE_ENDIAN
                                       ? (order == '>' || order == '!')
                                       : (order == '<'));
    int ok = !foreign && f[0] != '\0';
    int isize = itemsize >= 1 && itemsize <= 8 ? (int)itemsize : 0;
    if (ok && f[0] == 'Z' && f[1] != '\0' && f[2] == '\0') {
        ok = (f[1] == 'f' && itemsize == 8) || (f[1] == 'd' && itemsize == 16);
        *out = f[1] == 'f' ? SW_COMPLEX64 : SW_COMPLEX128;
    } else if (ok && f[1] == '\0') {
        switch (f[0]) {
        case '?':
            ok = itemsize == 1;
            *out = SW_BOOL;
            break;
        case 'e':
            ok = itemsize == 2;
            *out = SW_FLOAT16;
            break;
        case 'f':
            ok = itemsize == 4;
            *out = SW_FLOAT32;
            break;
        case 'd':
            ok = itemsize == 8;
            *out = SW_FLOAT64;
            break;
        case 'b': case 'h': case 'i': case 'l': case 'q': case 'n':
            ok = isize != 0 && (sint[isize] != 0 || isize == 4);
            *out = isize ? sint[isize] : SW_INT32;
            break;
        case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N':
            ok = isize != 0 && uint[isize] != 0;
            *out = isize ? uint[isize] : SW_UINT8;
            break;
        default:
            ok = 0;
        }
    } else {
        ok = 0;
    }
    if (!ok) {
        PyErr_Format(PyExc_TypeError,
                     "unsupported element type (buffer format '%s', %zd "
                     "byte%s per item%s): " SW_PY_DTYPE_HELP,
                     fmt ? fmt : "B", itemsize, itemsize == 1 ? "" : "s",
                     foreign ? ", non-native byte order" : "");
        return -1;
    }
    return 0;
}

int sw_py_dtype_from_dl(uint8_t code, uint8_t bits, uint16_t lanes,
                        sw_dtype *out)
{
    for (int i = 0; lanes == 1 && i < SW_DTYPE_COUNT; i++) {
        if (sw_py_dtypes[i].dl_code == code &&
            8u * sw_py_dtypes[i].size == bits) {
            *out = (sw_dtype)i;
            return 0;
        }
    }
    PyErr_Format(PyExc_TypeError,
                 "unsupported DLPack element type (code %d, %d bits, %d "
                 "lanes): " SW_PY_DTYPE_HELP,
                 (int)code, (int)bits, (int)lanes);
    return -1;
}

/* ------------------------------------------------------------------------
 * float16 and bfloat16 bits
 *
 * Both are a sign, an exponent of eb bits and a mantissa of mb bits
 * (float16: 5, 10; bfloat16: 8, 7).  From a double they are rounded once,
 * to nearest even, as NumPy's float16 is (a detour through float32 could
 * round twice).
 * ---------------------------------------------------------------------- */

static uint16_t small_from_double(double d, int eb, int mb)
{
    uint64_t x;
    memcpy(&x, &d, sizeof x);
    uint16_t sign = (uint16_t)((x >> 63) << (eb + mb));
    int exp = (int)((x >> 52) & 0x7ff);
    uint64_t mant = x & ((UINT64_C(1) << 52) - 1);
    uint16_t inf = (uint16_t)(((1u << eb) - 1) << mb);
    if (exp == 0x7ff) /* infinity, or NaN (kept quiet) */
        return (uint16_t)(sign | inf | (mant ? 1u << (mb - 1) : 0));
    if (exp == 0) /* zero or a double subnormal: below both */
        return sign;
    int bias = (1 << (eb - 1)) - 1;
    int e = exp - 1023 + bias;
    if (e >= (1 << eb) - 1)
        return (uint16_t)(sign | inf);
    uint64_t m, r;
    int shift;
    if (e <= 0) { /* a subnormal of the small type, or zero */
        shift = 52 - mb + 1 - e;
        if (shift > 53)
            return sign;
        m = mant | (UINT64_C(1) << 52);
        r = m >> shift;
    } else {
        shift = 52 - mb;
        m = mant;
        r = ((uint64_t)e << mb) | (mant >> shift);
    }
    uint64_t rem = m & ((UINT64_C(1) << shift) - 1);
    uint64_t half = UINT64_C(1) << (shift - 1);
    if (rem > half || (rem == half && (r & 1)))
        r++; /* a carry into the exponent is right, up to infinity */
    return (uint16_t)(sign | r);
}

static double small_to_double(uint16_t h, int eb, int mb)
{
    int bias = (1 << (eb - 1)) - 1;
    int e = (h >> mb) & ((1 << eb) - 1);
    int m = h & ((1 << mb) - 1);
    double v;
    if (e == (1 << eb) - 1)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp((double)m, 1 - bias - mb);
    else
        v = ldexp((double)(m + (1 << mb)), e - bias - mb);
    return (h >> (eb + mb)) ? -v : v;
}

void sw_py_bf16_from_f32(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t x;
        memcpy(&x, &src[i], sizeof x);
        if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet */
            dst[i] = (uint16_t)((x >> 16) | 0x40);
        else /* round to nearest even on the 16 bits dropped */
            dst[i] = (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
    }
}

void sw_py_bf16_to_f32(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t x = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &x, sizeof x);
    }
}

/* ------------------------------------------------------------------------
 * Single elements
 * ---------------------------------------------------------------------- */

static int scalar_error(PyObject *obj, sw_dtype dt, const char *what,
                        const char *must)
{
    PyErr_Format(PyExc_TypeError, "%s must be %s for a %s array, not %.100s",
                 what, must, sw_py_dtypes[dt].name, Py_TYPE(obj)->tp_name);
    return -1;
}

static int is_numpy_bool(PyObject *obj)
{
    const char *n = Py_TYPE(obj)->tp_name;
    return strcmp(n, "numpy.bool") == 0 || strcmp(n, "numpy.bool_") == 0;
}

/* An integer for an integer (or bool) array, range-checked. */
static int int_from_py(PyObject *obj, sw_dtype dt, sw_scalar *out,
                       const char *what)
{
    PyObject *idx = PyNumber_Index(obj);
    if (idx == NULL)
        return -1;
    int kind = sw_py_dtypes[dt].kind, bits = 8 * sw_py_dtypes[dt].size;
    int bad = 0;
    if (kind == SW_KIND_UINT) {
        int neg = PyObject_RichCompareBool(idx, Py_False, Py_LT);
        if (neg < 0) {
            Py_DECREF(idx);
            return -1;
        }
        unsigned long long v = neg ? 0 : PyLong_AsUnsignedLongLong(idx);
        if (v == (unsigned long long)-1 && PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
                Py_DECREF(idx);
                return -1;
            }
            PyErr_Clear();
            bad = 1;
        }
        bad = bad || neg || (bits < 64 && v >> bits != 0);
        out->u = v;
    } else {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(idx, &overflow);
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(idx);
            return -1;
        }
        if (kind == SW_KIND_BOOL)
            bad = overflow != 0 || (v != 0 && v != 1);
        else
            bad = overflow != 0 ||
                  (bits < 64 && (v < -(1LL << (bits - 1)) ||
                                 v > (1LL << (bits - 1)) - 1));
        out->i = v;
    }
    Py_DECREF(idx);
    if (bad) {
        if (kind == SW_KIND_BOOL)
            PyErr_Format(PyExc_ValueError,
                         "%s %R is not a truth value for a bool array (True, "
                         "False, 1 or 0)",
                         what, obj);
        else
            PyErr_Format(PyExc_OverflowError, "%s %R is out of range for %s",
                         what, obj, sw_py_dtypes[dt].name);
        return -1;
    }
    return 0;
}

int sw_py_scalar_from_py(PyObject *obj, sw_dtype dt, sw_scalar *out,
                         const char *what)
{
    memset(out, 0, sizeof *out);
    switch (sw_py_dtypes[dt].kind) {
    case SW_KIND_FLOAT: {
        if (PyComplex_Check(obj))
            return scalar_error(obj, dt, what, "a real number");
        double v = PyFloat_AsDouble(obj);
        if (v == -1.0 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                return scalar_error(obj, dt, what, "a real number");
            }
            return -1;
        }
        out->f = v;
        return 0;
    }
    case SW_KIND_COMPLEX: {
        Py_complex c = PyComplex_AsCComplex(obj);
        if (c.real == -1.0 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                return scalar_error(obj, dt, what, "a number");
            }
            return -1;
        }
        out->c.re = c.real;
        out->c.im = c.imag;
        return 0;
    }
    case SW_KIND_BOOL:
        if (is_numpy_bool(obj)) {
            int t = PyObject_IsTrue(obj);
            if (t < 0)
                return -1;
            out->i = t;
            return 0;
        }
        if (PyFloat_Check(obj) || !PyIndex_Check(obj))
            return scalar_error(obj, dt, what, "a bool");
        return int_from_py(obj, dt, out, what);
    default:
        if (PyFloat_Check(obj) || !PyIndex_Check(obj))
            return scalar_error(obj, dt, what, "an integer");
        return int_from_py(obj, dt, out, what);
    }
}

PyObject *sw_py_scalar_to_py(const void *p, sw_dtype dt)
{
    union {
        int8_t i8; int16_t i16; int32_t i32; int64_t i64;
        uint8_t u8; uint16_t u16; uint32_t u32; uint64_t u64;
        float f[2]; double d[2];
    } v;
    memcpy(&v, p, sw_py_dtypes[dt].size);
    switch (dt) {
    case SW_BOOL: return PyBool_FromLong(v.u8 != 0);
    case SW_INT8: return PyLong_FromLong(v.i8);
    case SW_INT16: return PyLong_FromLong(v.i16);
    case SW_INT32: return PyLong_FromLong((long)v.i32);
    case SW_INT64: return PyLong_FromLongLong((long long)v.i64);
    case SW_UINT8: return PyLong_FromUnsignedLong(v.u8);
    case SW_UINT16: return PyLong_FromUnsignedLong(v.u16);
    case SW_UINT32: return PyLong_FromUnsignedLong((unsigned long)v.u32);
    case SW_UINT64: return PyLong_FromUnsignedLongLong(v.u64);
    case SW_FLOAT16: return PyFloat_FromDouble(small_to_double(v.u16, 5, 10));
    case SW_BFLOAT16: return PyFloat_FromDouble(small_to_double(v.u16, 8, 7));
    case SW_FLOAT32: return PyFloat_FromDouble((double)v.f[0]);
    case SW_FLOAT64: return PyFloat_FromDouble(v.d[0]);
    case SW_COMPLEX64:
        return PyComplex_FromDoubles((double)v.f[0], (double)v.f[1]);
    case SW_COMPLEX128: return PyComplex_FromDoubles(v.d[0], v.d[1]);
    }
    PyErr_SetString(PyExc_SystemError, "bad dtype");
    return NULL;
}

void sw_py_scalar_store(void *p, sw_dtype dt, sw_scalar s)
{
    union {
        int8_t i8; int16_t i16; int32_t i32; int64_t i64;
        uint16_t u16; float f[2]; double d[2];
    } v;
    memset(&v, 0, sizeof v);
    switch (dt) {
    case SW_BOOL: v.i8 = s.i != 0; break;
    case SW_INT8: case SW_UINT8: v.i8 = (int8_t)s.u; break;
    case SW_INT16: case SW_UINT16: v.i16 = (int16_t)s.u; break;
    case SW_INT32: case SW_UINT32: v.i32 = (int32_t)s.u; break;
    case SW_INT64: case SW_UINT64: v.i64 = (int64_t)s.u; break;
    case SW_FLOAT16: v.u16 = small_from_double(s.f, 5, 10); break;
    case SW_BFLOAT16: v.u16 = small_from_double(s.f, 8, 7); break;
    case SW_FLOAT32: v.f[0] = (float)s.f; break;
    case SW_FLOAT64: v.d[0] = s.f; break;
    case SW_COMPLEX64:
        v.f[0] = (float)s.c.re;
        v.f[1] = (float)s.c.im;
        break;
    case SW_COMPLEX128:
        v.d[0] = s.c.re;
        v.d[1] = s.c.im;
        break;
    }
    memcpy(p, &v, sw_py_dtypes[dt].size);
}

sw_scalar sw_py_scalar_minus_one(sw_dtype dt)
{
    sw_scalar s;
    memset(&s, 0, sizeof s);
    switch (sw_py_dtypes[dt].kind) {
    case SW_KIND_FLOAT: s.f = -1.0; break;
    case SW_KIND_COMPLEX: s.c.re = -1.0; break;
    case SW_KIND_UINT: s.u = UINT64_MAX; break;
    default: s.i = -1; break;
    }
    return s;
}
