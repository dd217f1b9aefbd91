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

int sw__parse_size(const char *s, uint64_t *out)
{
    if (s == NULL)
        return -1;
    while (isspace((unsigned char)*s))
        s++;
    if (!isdigit((unsigned char)*s))
        return -1; /* also rejects a sign */
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0)
        return -1;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    case 'T': shift = 40; end++; break;
    default: break;
    }
    /* Accept "512M", "512MB", "512MiB", "512 M". */
    if (shift != 0) {
        if (*end == 'i' || *end == 'I')
            end++;
        if (*end == 'b' || *end == 'B')
            end++;
    } else if (*end == 'b' || *end == 'B') {
        end++;
    }
    while (isspace((unsigned char)*end))
        end++;
    if (*end != '\0')
        return -1;
    if (shift != 0 && v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

const char *sw__fmt_bytes(uint64_t n, char *buf, size_t len)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (n < 1024) {
        snprintf(buf, len, "%llu B", (unsigned long long)n);
        return buf;
    }
    double v = (double)n;
    int u = 0;
    /* 1023.999 KiB prints as 1.00 MiB, not 1024.00 KiB. */
    while (v >= 1023.995 && u < 5) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, len, "%.2f %s", v, unit[u]);
    return buf;
}

SW_API size_t sw_dtype_size(sw_dtype dtype)
{
    switch (dtype) {
    case SW_FLOAT32: return 4;
    case SW_FLOAT64: return 8;
    case SW_INT32: return 4;
    case SW_INT64: return 8;
    }
    return 0;
}
