/*
 * error.c -- error codes, the per-thread detail message, small utilities.
 */
#include "core/internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Codes
 * ---------------------------------------------------------------------- */

SW_API const char *sw_err_name(int err)
{
    switch (err) {
    case SW_OK:
        return "SW_OK";
#define SW__ERR_NAME(name, code, msg)                                         \
    case SW_ERR_##name:                                                       \
        return "SW_ERR_" #name;
        SW_ERRNO_MAP(SW__ERR_NAME)
#undef SW__ERR_NAME
    }
    return "SW_ERR_UNKNOWN";
}

SW_API const char *sw_strerror(int err)
{
    switch (err) {
    case SW_OK:
        return "success";
#define SW__ERR_STR(name, code, msg)                                          \
    case SW_ERR_##name:                                                       \
        return msg;
        SW_ERRNO_MAP(SW__ERR_STR)
#undef SW__ERR_STR
    }
    return "unknown error";
}

/* ------------------------------------------------------------------------
 * The per-thread message.  Large enough for an OOM report with five
 * buffers and their tags; longer text is truncated, never overflowed.
 * ---------------------------------------------------------------------- */

#define SW__MSG_MAX 2048
static _Thread_local char msg[SW__MSG_MAX];

SW_API const char *sw_last_error(void) { return msg; }

int sw__errorf(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return code;
}

/* The public form for backends outside the library (spillway/backend.h). */
SW_API int sw_backend_errorf(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return code;
}

void sw__error_append(const char *fmt, ...)
{
    size_t len = strlen(msg);
    if (len + 1 >= sizeof msg)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + len, sizeof msg - len, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------------
 * Sizes
 * ---------------------------------------------------------------------- */

/* Digits with an optional fraction ("1.5"): the whole part, and the
 * fraction's digits without their trailing zeros (*frac, *nfrac); -1 when
 * there are no digits or the whole part passes 2^64 - 1. */
static int parse_fixed(const char **sp, uint64_t *whole, const char **frac,
                       size_t *nfrac)
{
    const char *s = *sp;
    if (!isdigit((unsigned char)*s))
        return -1; /* also rejects a sign and ".5" */
    uint64_t w = 0;
    for (; isdigit((unsigned char)*s); s++) {
        unsigned d = (unsigned)(*s - '0');
        if (w > (UINT64_MAX - d) / 10)
            return -1;
        w = w * 10 + d;
    }
    *frac = NULL;
    *nfrac = 0;
    if (*s == '.') {
        s++;
        if (!isdigit((unsigned char)*s))
            return -1;
        *frac = s;
        while (isdigit((unsigned char)*s))
            s++;
        size_t k = (size_t)(s - *frac);
        while (k > 0 && (*frac)[k - 1] == '0')
            k--;
        *nfrac = k;
    }
    *sp = s;
    *whole = w;
    return 0;
}

/* The bytes of the fraction 0.D (its k digits, no trailing zero) of a unit
 * of 2^shift bytes, when they are whole: D / 10^k * 2^shift is D / 5^k *
 * 2^(shift - k), whole exactly when k <= shift and 5^k divides D (D then
 * has no factor 2 left, ending in a digit other than 0).  Exact for any
 * number of digits: D is divided by 5, k times, digit by digit.  -1 when
 * it is not whole. */
static int fraction_bytes(const char *frac, size_t k, unsigned shift,
                          uint64_t *out)
{
    if (k > shift)
        return -1; /* k <= shift <= 50 from here on */
    unsigned char dig[64];
    for (size_t j = 0; j < k; j++)
        dig[j] = (unsigned char)(frac[j] - '0');
    for (size_t r = 0; r < k; r++) {
        unsigned rem = 0;
        for (size_t j = 0; j < k; j++) {
            unsigned cur = rem * 10 + dig[j];
            dig[j] = (unsigned char)(cur / 5);
            rem = cur % 5;
        }
        if (rem != 0)
            return -1;
    }
    uint64_t q = 0;
    for (size_t j = 0; j < k; j++)
        q = q * 10 + dig[j]; /* D / 5^k < 2^k */
    *out = q << (shift - k);
    return 0;
}

SW_API int sw_parse_size(const char *s, uint64_t *out)
{
    if (out != NULL)
        *out = 0;
    if (s == NULL || out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "sw_parse_size: NULL argument");
    const char *p = s;
    while (isspace((unsigned char)*p))
        p++;
    uint64_t whole;
    const char *frac;
    size_t nfrac;
    if (parse_fixed(&p, &whole, &frac, &nfrac) != 0)
        goto bad;
    while (*p == ' ')
        p++;
    unsigned shift = 0;
    switch (toupper((unsigned char)*p)) {
    case 'K': shift = 10; p++; break;
    case 'M': shift = 20; p++; break;
    case 'G': shift = 30; p++; break;
    case 'T': shift = 40; p++; break;
    case 'P': shift = 50; p++; break;
    default: break;
    }
    /* Accept "512M", "512MB", "512MiB", "512 M", "4096B"; the units are
     * binary either way, as every memory figure spillway prints. */
    if (shift != 0 && (*p == 'i' || *p == 'I'))
        p++;
    if (*p == 'b' || *p == 'B')
        p++;
    while (isspace((unsigned char)*p))
        p++;
    if (*p != '\0')
        goto bad;
    if (whole > (UINT64_MAX >> shift))
        goto bad;
    uint64_t v = whole << shift, extra = 0;
    /* A size is whole bytes or refused: dropping the fraction made "0.5"
     * no bytes at all -- no budget -- and "1.5" one byte. */
    if (fraction_bytes(frac, nfrac, shift, &extra) != 0)
        return sw__errorf(SW_ERR_INVALID_ARG,
                          "cannot read \"%s\" as a size: it is not a whole "
                          "number of bytes (a fraction of a byte); give "
                          "bytes, e.g. \"512M\", \"1.5G\" or \"4096\"",
                          s);
    if (extra > UINT64_MAX - v)
        goto bad;
    *out = v + extra;
    return SW_OK;
bad:
    return sw__errorf(SW_ERR_INVALID_ARG,
                      "cannot read \"%s\" as a size: expected a number of "
                      "bytes with an optional unit (K, M, G, T, P; binary), "
                      "e.g. \"512M\", \"1.5GiB\" or \"1048576\"",
                      s);
}

SW_API const char *sw_format_bytes(uint64_t n, char *buf, size_t len)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (buf == NULL || len == 0)
        return "";
    if (n < 1024) {
        snprintf(buf, len, "%llu B", (unsigned long long)n);
        return buf;
    }
    double v = (double)n;
    int u = 0;
    /* 1023.999 KiB prints as 1.00 MiB, not 1024.00 KiB. */
    while (v >= 1023.995 && u < 6) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, len, "%.2f %s", v, unit[u]);
    return buf;
}

/* ------------------------------------------------------------------------
 * Element types
 * ---------------------------------------------------------------------- */

static const struct {
    const char *name;
    uint8_t size;
    uint8_t kind;
} dtypes[SW_DTYPE_COUNT] = {
    [SW_FLOAT32] = {"float32", 4, SW_KIND_FLOAT},
    [SW_FLOAT64] = {"float64", 8, SW_KIND_FLOAT},
    [SW_INT32] = {"int32", 4, SW_KIND_INT},
    [SW_INT64] = {"int64", 8, SW_KIND_INT},
    [SW_BOOL] = {"bool", 1, SW_KIND_BOOL},
    [SW_INT8] = {"int8", 1, SW_KIND_INT},
    [SW_INT16] = {"int16", 2, SW_KIND_INT},
    [SW_UINT8] = {"uint8", 1, SW_KIND_UINT},
    [SW_UINT16] = {"uint16", 2, SW_KIND_UINT},
    [SW_UINT32] = {"uint32", 4, SW_KIND_UINT},
    [SW_UINT64] = {"uint64", 8, SW_KIND_UINT},
    [SW_FLOAT16] = {"float16", 2, SW_KIND_FLOAT},
    [SW_BFLOAT16] = {"bfloat16", 2, SW_KIND_FLOAT},
    [SW_COMPLEX64] = {"complex64", 8, SW_KIND_COMPLEX},
    [SW_COMPLEX128] = {"complex128", 16, SW_KIND_COMPLEX},
};

static bool dtype_known(sw_dtype d)
{
    return (unsigned)d < SW_DTYPE_COUNT;
}

SW_API size_t sw_dtype_size(sw_dtype dtype)
{
    return dtype_known(dtype) ? dtypes[dtype].size : 0;
}

SW_API const char *sw_dtype_name(sw_dtype dtype)
{
    return dtype_known(dtype) ? dtypes[dtype].name : NULL;
}

SW_API int sw_dtype_from_name(const char *name, sw_dtype *out)
{
    if (out != NULL)
        *out = SW_FLOAT32;
    if (name == NULL || out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "name or out is NULL");
    for (int d = 0; d < SW_DTYPE_COUNT; d++) {
        if (strcmp(name, dtypes[d].name) == 0) {
            *out = (sw_dtype)d;
            return SW_OK;
        }
    }
    return sw__errorf(SW_ERR_DTYPE, "unknown element type '%.40s'", name);
}

SW_API int sw_dtype_kind_get(sw_dtype dtype, sw_dtype_kind *kind)
{
    if (kind == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "kind is NULL");
    *kind = SW_KIND_INT;
    if (!dtype_known(dtype))
        return sw__errorf(SW_ERR_DTYPE, "unknown dtype %d", (int)dtype);
    *kind = (sw_dtype_kind)dtypes[dtype].kind;
    return SW_OK;
}

SW_API const char *sw_kernel_name(sw_kernel kernel)
{
    switch (kernel) {
    case SW_KERNEL_FILL: return "fill";
    case SW_KERNEL_COPY: return "copy";
    case SW_KERNEL_ADD: return "add";
    case SW_KERNEL_SCALE: return "scale";
    case SW_KERNEL_AXPY: return "axpy";
    case SW_KERNEL_SUM: return "sum";
    }
    return NULL;
}

