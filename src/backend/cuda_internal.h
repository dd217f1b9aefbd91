/*
 * cuda_internal.h -- the CUDA backend's internals that tests reach
 * directly (tests/c/test-cuda.c, test-cuda-nvrtc.c): the loader's verdict,
 * the error mapping, and the built-in kernels' source with the NVRTC
 * compile step, which runs without a GPU (with the real libnvrtc where
 * installed, and with the CPU stand-in, tests/cuda/fake_libnvrtc.c).
 *
 * `sw__` names: internal, not exported from the shared library (the test
 * suite links the static one).  Every function here is safe to call when
 * neither the driver nor NVRTC is present.
 */
#ifndef SW_CUDA_INTERNAL_H
#define SW_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------
 * The driver
 * ---------------------------------------------------------------------- */

/* The backend's device_count: loads libcuda.so.1 ($SPILLWAY_CUDA_LIBRARY
 * overrides the name or path) once per process and reports the number of
 * devices; when none are usable *count = 0 and why says why in one line,
 * e.g. "libcuda.so.1 not found: no NVIDIA driver" or "cuInit failed:
 * CUDA_ERROR_NO_DEVICE". */
int sw__cuda_device_count(int *count, char *why, size_t why_len);

/* After the loader ran: the optional entry points the driver lacks, as a
 * space-separated list ("" when it has them all; the required ones are
 * never missing once the library loaded).  Returns 0 when the library
 * loaded (even if cuInit then failed), -1 when it did not. */
int sw__cuda_loader_missing(char *buf, size_t len);

/* The SW_ERR_* code a CUresult maps to: CUDA_ERROR_OUT_OF_MEMORY ->
 * SW_ERR_OOM (so that it enters the core's allocation ladder),
 * CUDA_ERROR_NO_DEVICE and CUDA_ERROR_INVALID_DEVICE -> SW_ERR_NO_DEVICE,
 * CUDA_ERROR_NOT_SUPPORTED -> SW_ERR_UNSUPPORTED, CUDA_SUCCESS -> SW_OK,
 * anything else -> SW_ERR_DEVICE. */
int sw__cuda_error_code(int cuerr);

/* "CUDA_ERROR_OUT_OF_MEMORY" for a code in the backend's own table, NULL
 * for one it does not know (the driver, when loaded, names more). */
const char *sw__cuda_error_table_name(int cuerr);

/* Report a failed driver call on device index as the backend does: sets
 * the detail message ("cuda:0: cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_
 * MEMORY (...)") and returns sw__cuda_error_code(cuerr). */
int sw__cuda_fail(int index, int cuerr, const char *call);

/* The driver's version (cuDriverGetVersion, e.g. 12080), loading it once
 * if need be; 0 when there is no usable driver. */
int sw__cuda_driver_version(void);

/* cuCtxGetCurrent on the calling thread, or NULL (also when no driver is
 * loaded): the backend leaves no context current behind it. */
void *sw__cuda_thread_context(void);

/* The device's private memory pool: bytes it reserves from the device and
 * bytes of it in use.  SW_ERR_UNSUPPORTED when cuda:index is not open or
 * allocates without a pool. */
int sw__cuda_pool_usage(int index, uint64_t *reserved, uint64_t *used);

/* Order cuda:index's default stream and a stream spillway does not own
 * (foreign: a CUstream of PyTorch, CuPy, Numba; NULL is the legacy default
 * stream), on the device, without blocking: with foreign_waits != 0 the
 * foreign stream's later work waits for everything queued on ours so far
 * (memory just allocated, restored or reused), else ours waits for the
 * foreign stream's work so far (memory it frees).  Callable without the
 * core's device lock (it touches only the stream and the event free
 * list).  SW_ERR_NO_DEVICE when cuda:index is not open. */
int sw__cuda_stream_join(int index, void *foreign, int foreign_waits);

/* ------------------------------------------------------------------------
 * Built-in kernels and NVRTC (the source and the compiler: cuda_nvrtc.c;
 * the tables that launch them: cuda.c)
 * ---------------------------------------------------------------------- */

/* The CUDA C source of every built-in kernel (NUL-terminated, static). */
const char *sw__cuda_kernel_source(void);

/* The kernels' entry names ("sw_add_f32", ...), *count of them. */
const char *const *sw__cuda_kernel_names(size_t *count);

/* The parameter sizes in bytes (*count of them) with which the backend
 * launches kernel k (an index into sw__cuda_kernel_names); NULL past the
 * end.  Every launch is checked against them; the tests check them
 * against the compiled PTX. */
const unsigned char *sw__cuda_kernel_params(size_t k, size_t *count);

/* The kernel (an index into sw__cuda_kernel_names) a launch of sw_kernel
 * kernel on sw_dtype dtype runs on aligned operands (SUM: its first pass);
 * -1 for none (bool arithmetic, or out of range). */
int sw__cuda_kernel_for(int kernel, int dtype);

/* Load libnvrtc once ($SPILLWAY_NVRTC_LIBRARY, then libnvrtc.so.<driver
 * major>, .so.13, .so.12, .so.11.2, .so, then the same under $CUDA_HOME,
 * $CUDA_PATH and /usr/local/cuda).  SW_OK, or SW_ERR_UNSUPPORTED with why
 * set (why may be NULL).  *major and *minor (may be NULL) get its version. */
int sw__cuda_nvrtc_load(char *why, size_t why_len, int *major, int *minor);

/* Compile src (a NUL-terminated CUDA C program) with NVRTC for compute
 * capability major.minor: PTX for compute_XY, or with cubin != 0 a CUBIN
 * for sm_XY.  On success *image (sw__malloc'd, NUL-terminated for PTX;
 * sw__free it) and *size; on failure SW_ERR_UNSUPPORTED (no NVRTC),
 * SW_ERR_DEVICE (the compile failed: the message names the options and the
 * log is copied to log) or SW_ERR_HOST_OOM.  log may be NULL. */
int sw__cuda_compile_source(const char *src, int major, int minor, int cubin,
                            char **image, size_t *size, char *log,
                            size_t log_len);

/* The same for the built-in kernels' source. */
int sw__cuda_compile(int major, int minor, int cubin, char **image,
                     size_t *size, char *log, size_t log_len);

/* The built-in kernels compiled for architecture arch (10 * major +
 * minor) as a CUBIN (cubin != 0) or PTX, compiled at the first call for
 * that pair and kept for the life of the process (*image stays valid).
 * Errors as sw__cuda_compile's. */
int sw__cuda_image_get(int arch, int cubin, const char **image);

/* After sw__cuda_nvrtc_load: the architectures the loaded NVRTC can
 * target (10 * major + minor), at most max of them into archs; returns
 * their number, 0 when it cannot tell (or is not loaded). */
int sw__cuda_nvrtc_archs(int *archs, int max);

/* The file name NVRTC was loaded from ("" when not loaded). */
const char *sw__cuda_nvrtc_path(void);

/* The target for a device of architecture devarch (10 * major + minor)
 * given the architectures an NVRTC supports (archs, n of them; n == 0
 * when it cannot tell): the device's own architecture as a CUBIN when
 * NVRTC knows it (*cubin = 1), else the highest known one below it as PTX
 * (*cubin = 0, JIT-compiled by the driver).  Returns 0, or -1 when NVRTC
 * knows no architecture at or below devarch. */
int sw__cuda_pick_arch(int devarch, const int *archs, int n, int *arch,
                       int *cubin);

#endif /* SW_CUDA_INTERNAL_H */
