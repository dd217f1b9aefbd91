/*
 * hip_internal.h -- the HIP backend's internals that tests reach directly
 * (tests/c/test-hip.c): the loader's verdict, the error mapping, the
 * kernels it launches and the hipRTC compile step, which runs without a
 * GPU wherever hipRTC is installed.
 *
 * `sw__` names: internal, not exported from the shared library (the test
 * suite links the static one).  Every function here is safe to call when
 * neither the runtime nor hipRTC is present.
 */
#ifndef SW_HIP_INTERNAL_H
#define SW_HIP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* The backend's device_count: loads libamdhip64 ($SPILLWAY_HIP_LIBRARY
 * overrides the name or path) once per process; when no device is usable
 * *count = 0 and why says why in one line, e.g. "libamdhip64.so not found:
 * no ROCm runtime" or "hipInit failed: hipErrorNoDevice". */
int sw__hip_device_count(int *count, char *why, size_t why_len);

/* The file the runtime was loaded from ("" when none). */
const char *sw__hip_runtime_path(void);

/* The SW_ERR_* code a hipError_t maps to: hipErrorOutOfMemory ->
 * SW_ERR_OOM, hipErrorNoDevice and hipErrorInvalidDevice ->
 * SW_ERR_NO_DEVICE, hipErrorNotSupported -> SW_ERR_UNSUPPORTED, hipSuccess
 * -> SW_OK, anything else -> SW_ERR_DEVICE. */
int sw__hip_error_code(int err);

/* "hipErrorOutOfMemory" for a code in the backend's own table, NULL for
 * one it does not know. */
const char *sw__hip_error_table_name(int err);

/* Report a failed runtime call on device index as the backend does:
 * "hip:0: hipMalloc (4096 bytes) failed: hipErrorOutOfMemory (...)";
 * returns sw__hip_error_code(err). */
int sw__hip_fail(int index, int err, const char *call);

/* The device's private memory pool: bytes it reserves and bytes of it in
 * use.  SW_ERR_UNSUPPORTED when hip:index is not open or allocates
 * without a pool. */
int sw__hip_pool_usage(int index, uint64_t *reserved, uint64_t *used);

/* ------------------------------------------------------------------------
 * Kernels and hipRTC (hip_rtc.c).  The source is the CUDA backend's,
 * src/backend/kernels/cuda.cu (sw__cuda_kernel_source()): hipRTC compiles
 * CUDA-style C++.
 * ---------------------------------------------------------------------- */

/* The entry names the HIP backend launches (the kernel x dtype grid of the
 * four dtypes it declares, the sums' final passes, the byte fill), *count
 * of them; each is one of the CUDA backend's (sw__cuda_kernel_names) and
 * is launched with the parameter sizes sw__cuda_kernel_params gives it. */
const char *const *sw__hip_kernel_names(size_t *count);

/* Load hipRTC once: $SPILLWAY_HIPRTC_LIBRARY (no search then), else
 * libhiprtc.so, .so.6, .so.5, the HIP runtime itself (ROCm up to 5.2
 * exports hipRTC from libamdhip64), /opt/rocm/lib/libhiprtc.so.  SW_OK, or
 * SW_ERR_UNSUPPORTED with why set (why may be NULL).  *major, *minor (may
 * be NULL): its version, 0.0 when it cannot say. */
int sw__hip_rtc_load(char *why, size_t why_len, int *major, int *minor);

/* The file hipRTC was loaded from ("" when not loaded). */
const char *sw__hip_rtc_path(void);

/* The options the backend compiles with for arch (a gcnArchName such as
 * "gfx90a:sramecc+:xnack-"; NULL or "": the current device's, by
 * hipRTC's default): written into opts (at most 4), their number
 * returned.  The strings live in buf (len bytes). */
int sw__hip_compile_options(const char *arch, const char **opts, char *buf,
                            size_t len);

/* Compile src with hipRTC for arch into a code object.  On success *image
 * (sw__malloc'd; sw__free it) and *size; on failure SW_ERR_UNSUPPORTED (no
 * hipRTC), SW_ERR_DEVICE (the compile failed: the message has the log's
 * first line, log gets all of it) or SW_ERR_HOST_OOM.  log may be NULL. */
int sw__hip_compile_source(const char *src, const char *arch, char **image,
                           size_t *size, char *log, size_t log_len);

/* The built-in kernels compiled for arch, once per arch per process
 * (*image stays valid, *size its bytes).  Errors as above. */
int sw__hip_image_get(const char *arch, const char **image, size_t *size);

#endif /* SW_HIP_INTERNAL_H */
