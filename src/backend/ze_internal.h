/*
 * ze_internal.h -- the Level Zero backend's internals that tests reach
 * directly (tests/c/test-ze.c).  `sw__` names: internal, not exported
 * from the shared library.  Safe to call without a loader.
 */
#ifndef SW_ZE_INTERNAL_H
#define SW_ZE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* The backend's device_count: loads libze_loader.so.1
 * ($SPILLWAY_ZE_LIBRARY overrides it) once per process; when no device is
 * usable *count = 0 and why says why in one line, e.g. "libze_loader.so.1
 * not found: no Level Zero loader". */
int sw__ze_device_count(int *count, char *why, size_t why_len);

/* The SW_ERR_* code a ze_result_t maps to: OUT_OF_DEVICE_MEMORY ->
 * SW_ERR_OOM, OUT_OF_HOST_MEMORY -> SW_ERR_HOST_OOM, UNSUPPORTED_FEATURE
 * and UNSUPPORTED_VERSION -> SW_ERR_UNSUPPORTED, DEVICE_LOST ->
 * SW_ERR_DEVICE, SUCCESS -> SW_OK, anything else -> SW_ERR_DEVICE. */
int sw__ze_error_code(uint32_t result);

/* "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY", or NULL for a code not in the
 * backend's table. */
const char *sw__ze_result_name(uint32_t result);

/* The SPIR-V modules built into this library from kernels/opencl.cl (with
 * fp64 != 0: the one built with -DSW_FP64=1): *size bytes, NULL (and 0)
 * when the build had no compiler for them (why says so, one line, when
 * why is not NULL). */
const unsigned char *sw__ze_spirv(int fp64, size_t *size, const char **why);

/* The kernel entry names the backend launches, *count of them, and for
 * each whether it needs fp64 (fp64[i] != 0). */
const char *const *sw__ze_kernel_names(size_t *count, const int **fp64);

/* Whether device ze:index reads its memory figures from Sysman: 1 when
 * open and it does, 0 when open and it does not (device_free unknown),
 * -1 when not open. */
int sw__ze_sysman(int index);

#endif /* SW_ZE_INTERNAL_H */
