/*
 * cuda.c -- NVIDIA GPUs through the CUDA driver API, loaded at run time.
 *
 * The divisions of this file, in order:
 *   - The driver: loading libcuda.so.1 once per process, error names and
 *     codes.  (NVRTC, the kernels' source and their compilation are
 *     cuda_nvrtc.c's.)
 *   - The built-in kernels: the tables of entry names and parameter sizes
 *     that launches are checked against.
 *   - Devices, queues and events: types, the current context, reference
 *     counts, recycled events, the fallback allocator's deferred frees.
 *   - Operations (the ops table's functions): devices; memory; queues;
 *     transfers and fills; kernels (loading the module, launching);
 *     events and waiting; version 3 (the copy queue, idleness, pinned
 *     host memory).
 *   - Foreign streams: a framework's stream ordered against ours, for the
 *     allocator plug-ins (python/spillway/allocator.c).
 *   - The ops table.
 *
 * Nothing CUDA is needed to build this file: cuda_api.h declares the few
 * types, constants and entry points used, and libcuda.so.1 is dlopen'ed the
 * first time anyone asks how many CUDA devices there are.  Without a driver
 * (or without a GPU) the backend offers no devices and says why in one
 * line; `cuda:N` then fails to open with that reason.
 *
 * Model.
 *  - cuda:N is the driver's device N (after CUDA_VISIBLE_DEVICES).  The
 *    backend uses the device's primary context, the one the CUDA runtime
 *    (and so PyTorch, CuPy, ...) uses, and makes it current around every
 *    call it makes: the core calls operations from any thread, and a
 *    thread's own current context is pushed back as it was (push/pop, or
 *    nothing when it already is ours).
 *  - A queue is a non-blocking stream (it never serializes with the legacy
 *    stream 0 that other libraries may use).  Every device has one, the
 *    default queue; sw_queue_create adds more.
 *  - Memory comes from a private stream-ordered memory pool
 *    (cuMemPoolCreate; allocations cuMemAllocFromPoolAsync on the default
 *    stream, frees cuMemFreeAsync on the stream the core names).  The pool
 *    is private so that its accounting is ours alone and its release
 *    threshold is 0: the core keeps its own cache of freed blocks, and a
 *    second cache inside the pool would be memory the core's accounting
 *    cannot see.  With threshold 0 the pool returns unused memory to the
 *    device at every synchronization, and mem_info trims it first, so
 *    device_free is what the device really has.  Where pools are not
 *    supported (or SPILLWAY_CUDA_POOL=0) allocation falls back to
 *    cuMemAlloc, and a free records an event on the stream and calls
 *    cuMemFree once that event has completed, reaped at later calls; a
 *    free never waits.
 *  - Allocations are ordered on the default stream.  The core makes any
 *    other queue wait for the default queue's earlier work before it first
 *    uses a buffer (queue.c), which is what makes such memory safe to use
 *    there.
 *  - Each device has a second stream, the copy queue (backend.h:
 *    copy_queue), for the spills' and restores' copies, so that they run
 *    beside kernels; the core orders it against the default queue with
 *    events.  The host staging pool those copies use is page-locked
 *    (cuMemHostAlloc; SPILLWAY_CUDA_PINNED=0 turns it off), so they run at
 *    full rate and asynchronously.
 *  - What the code relies on for host memory: a copy into host memory
 *    (pinned or pageable) is complete only once an event recorded after it
 *    has completed -- the core waits for one before it reads the memory.
 *    NVIDIA documents cuMemcpyDtoHAsync into pageable memory as *possibly*
 *    synchronous, never as guaranteed to be, and into pinned memory as
 *    asynchronous.  The one thing relied on at return is the source side
 *    of cuMemcpyHtoDAsync from pageable memory: the driver has staged it
 *    (the fills without NVRTC copy a pattern from the stack that way).
 *  - The built-in kernels are CUDA C (src/backend/kernels/cuda.cu, embedded
 *    at build time), compiled at first use by NVRTC (libnvrtc dlopen'ed
 *    too) for the device's architecture, once per architecture per
 *    process, and loaded once per device.  They cover every dtype, with
 *    the simulated device's arithmetic bit for bit (cuda.cu's comment):
 *    integer kernels compute in unsigned types (so they wrap), float16
 *    and bfloat16 in float, complex by one stated formula; floats are
 *    compiled with --fmad=false (a*x + y rounds twice, as on the host);
 *    sums reduce in a fixed order (a grid of at most 256 blocks of 256
 *    threads, each thread striding, a tree in each block, then one block
 *    over the partials), so a sum is the same bits every time for the
 *    same input.
 *  - Events are recycled per device.  An event the core records is two
 *    CUDA events recorded together: one without timing for queries and
 *    device-side waits (cuStreamWaitEvent), one with CU_EVENT_BLOCKING_SYNC
 *    for host waits, so that a host wait sleeps instead of spinning a core
 *    (the primary context's default scheduling spins in cuEventSynchronize
 *    and cuStreamSynchronize).  Blocking-sync events slow cuStreamWaitEvent
 *    down, hence the pair.  Every host wait, synchronize and queue destroy
 *    included, is record-then-wait on a blocking-sync event; nothing calls
 *    cuStreamSynchronize.  On the copy stream a third, timing event is
 *    recorded with them, for event_elapsed (cuEventElapsedTime_v2, CUDA
 *    12.8 drivers on; without it the core times copies on the host).
 *  - Without NVRTC (a driver-only machine) the built-in kernels are
 *    unavailable (launches say why, SW_ERR_UNSUPPORTED), but fills still
 *    work: the driver's memsets where the pattern allows, else the pattern
 *    copied in once and doubled with device-to-device copies.
 *  - Out of device memory outside an allocation (loading the kernels'
 *    module, a queue's partial sums, an overlapping copy's scratch): the
 *    pool's unused memory (or the fallback's completed frees) is given
 *    back to the device and the call retried once before SW_ERR_OOM.
 *  - A sticky context error (700-719: a kernel fault of earlier work)
 *    ends the context: every later call reports it by name.
 *
 * Threads and locks.  The core holds its device mutex around everything
 * except the event operations and synchronize.  Our own state those touch:
 * a device's event free list (ev_mu, a leaf) and its reference count
 * (atomic: the open, every live event and every queue hold one, so that
 * the primary context stays retained while any of our handles exists).  The loader runs once (pthread_once); so do NVRTC's, in
 * cuda_nvrtc.c, whose compiled-image cache has its own leaf mutex.
 *
 * fork(): the CUDA driver cannot be used in a child forked after it was
 * initialized.  A child of a process that initialized it reports no CUDA
 * devices, and says so; every operation on a device opened before the fork
 * (cuda__enter) fails with the same message.
 */
#include "backend.h"
#include "cuda_api.h"
#include "cuda_internal.h"
#include "elements.h"

#include <assert.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define CUDA__MAX_DEVICES 64
#define CUDA__THREADS 256u      /* threads per block of every kernel */
#define CUDA__SUM_BLOCKS 256u   /* most partial sums per reduction */
#define CUDA__PARTIAL 16u       /* bytes of one partial sum, at most */

/* ------------------------------------------------------------------------
 * The driver: loaded once per process
 * ---------------------------------------------------------------------- */

typedef struct cuda__loader {
    void *lib;          /* NULL when the library or a required symbol is
                         * missing */
    swcu_driver api;
    int count;          /* usable devices; 0 with why set */
    int version;        /* cuDriverGetVersion, e.g. 12080 */
    pid_t pid;          /* the process that loaded it */
    char why[256];
    char missing[512];  /* optional entry points not found */
} cuda__loader;

static cuda__loader cuda__g;
static pthread_once_t cuda__once = PTHREAD_ONCE_INIT;
/* Set in a child forked after the loader ran (pthread_atfork): cheaper than
 * a getpid() on every entry. */
static volatile int cuda__forked;
static const char cuda__fork_msg[] =
    "CUDA was initialized in the parent before fork(): a forked child "
    "cannot use it";

static void cuda__atfork_child(void) { cuda__forked = 1; }

#define CU(fn) (cuda__g.api.fn)

/* Names of CUresult codes: the driver's when it can, else our table. */
static const char *cuda__err_name(swcu_result r, char *buf, size_t len)
{
    const char *s = NULL;
    if (cuda__g.lib != NULL && CU(cuGetErrorName) != NULL &&
        CU(cuGetErrorName)(r, &s) == SWCU_CUDA_SUCCESS && s != NULL)
        return s;
    s = sw__cuda_error_table_name((int)r);
    if (s != NULL)
        return s;
    snprintf(buf, len, "CUDA error %u", r);
    return buf;
}

static const char *cuda__err_text(swcu_result r)
{
    const char *s = NULL;
    if (cuda__g.lib != NULL && CU(cuGetErrorString) != NULL &&
        CU(cuGetErrorString)(r, &s) == SWCU_CUDA_SUCCESS)
        return s;
    return NULL;
}

const char *sw__cuda_error_table_name(int cuerr)
{
    switch (cuerr) {
#define CUDA__NAME_CASE(name, value)                                          \
    case value:                                                               \
        return #name;
        SWCU_ERRORS(CUDA__NAME_CASE)
#undef CUDA__NAME_CASE
    }
    return NULL;
}

int sw__cuda_error_code(int cuerr)
{
    switch (cuerr) {
    case SWCU_CUDA_SUCCESS:
        return SW_OK;
    case SWCU_CUDA_ERROR_OUT_OF_MEMORY:
        return SW_ERR_OOM;
    case SWCU_CUDA_ERROR_NO_DEVICE:
    case SWCU_CUDA_ERROR_INVALID_DEVICE:
        return SW_ERR_NO_DEVICE;
    case SWCU_CUDA_ERROR_NOT_SUPPORTED:
        return SW_ERR_UNSUPPORTED;
    default:
        return SW_ERR_DEVICE;
    }
}

/* "cuda:0: cuMemAlloc_v2 (4096 bytes) failed: CUDA_ERROR_OUT_OF_MEMORY
 * (out of memory)"; returns the mapped code.  detail may be NULL. */
static int cuda__fail(int index, swcu_result r, const char *call,
                      const char *detail)
{
    char nbuf[32];
    const char *name = cuda__err_name(r, nbuf, sizeof nbuf);
    const char *text = cuda__err_text(r);
    int code = sw__cuda_error_code((int)r);
    if (code == SW_OK) /* never reported as a failure */
        code = SW_ERR_DEVICE;
    return sw__errorf(code, "cuda:%d: %s%s%s%s failed: %s%s%s%s", index,
                      call, detail ? " (" : "", detail ? detail : "",
                      detail ? ")" : "", name, text ? " (" : "",
                      text ? text : "", text ? ")" : "");
}

int sw__cuda_fail(int index, int cuerr, const char *call)
{
    return cuda__fail(index, (swcu_result)cuerr, call, NULL);
}

static void cuda__append(char *buf, size_t len, const char *word)
{
    size_t used = strlen(buf);
    if (used + 1 < len)
        snprintf(buf + used, len - used, "%s%s", used ? " " : "", word);
}

static void cuda__load(void)
{
    cuda__loader *g = &cuda__g;
    g->pid = getpid();
    (void)pthread_atfork(NULL, NULL, cuda__atfork_child);
    const char *env = getenv("SPILLWAY_CUDA_LIBRARY");
    const char *path = env != NULL && env[0] != '\0' ? env : "libcuda.so.1";

    dlerror();
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *e = dlerror();
        if (e != NULL && strstr(e, "No such file") != NULL)
            snprintf(g->why, sizeof g->why, "%s not found%s", path,
                     path == env ? " (SPILLWAY_CUDA_LIBRARY)"
                                 : ": no NVIDIA driver");
        else
            snprintf(g->why, sizeof g->why, "cannot load %s: %s", path,
                     e ? e : "dlopen failed");
        return;
    }

    /* Object-to-function pointer conversion through memcpy: POSIX makes
     * them the same size, ISO C does not let us cast. */
    const char *lacking = NULL;
#define CUDA__RESOLVE(kind, pub, sym, params)                                 \
    if ((kind) != 2) {                                                        \
        void *p = dlsym(lib, #sym);                                           \
        if (p == NULL && (kind) == 1 && lacking == NULL)                      \
            lacking = #sym;                                                   \
        if (p == NULL && (kind) == 0)                                         \
            cuda__append(g->missing, sizeof g->missing, #sym);                \
        memcpy(&g->api.sym, &p, sizeof p);                                    \
    }
    SWCU_DRIVER_FUNCS(CUDA__RESOLVE)
#undef CUDA__RESOLVE

    if (lacking != NULL) {
        int v = 0;
        if (g->api.cuDriverGetVersion != NULL)
            (void)g->api.cuDriverGetVersion(&v);
        snprintf(g->why, sizeof g->why,
                 "%s (driver API %d.%d) lacks %s: the NVIDIA driver is too "
                 "old (spillway needs CUDA 11.2 or later)",
                 path, v / 1000, (v % 1000) / 10, lacking);
        memset(&g->api, 0, sizeof g->api);
        dlclose(lib);
        return;
    }
    g->lib = lib;

    char nbuf[32];
    swcu_result r = CU(cuInit)(0);
    if (r != SWCU_CUDA_SUCCESS) {
        snprintf(g->why, sizeof g->why, "cuInit failed: %s",
                 cuda__err_name(r, nbuf, sizeof nbuf));
        return;
    }
    (void)CU(cuDriverGetVersion)(&g->version);
    int n = 0;
    r = CU(cuDeviceGetCount)(&n);
    if (r != SWCU_CUDA_SUCCESS) {
        snprintf(g->why, sizeof g->why, "cuDeviceGetCount failed: %s",
                 cuda__err_name(r, nbuf, sizeof nbuf));
        return;
    }
    if (n <= 0) {
        snprintf(g->why, sizeof g->why, "the NVIDIA driver reports no CUDA "
                 "devices");
        return;
    }
    g->count = n > CUDA__MAX_DEVICES ? CUDA__MAX_DEVICES : n;
}

/* The loader's answer for this process: count and why. */
static int cuda__devices(char *why, size_t why_len)
{
    pthread_once(&cuda__once, cuda__load);
    if (cuda__g.count > 0 && (cuda__forked || getpid() != cuda__g.pid)) {
        if (why_len > 0)
            snprintf(why, why_len, "%s", cuda__fork_msg);
        return 0;
    }
    if (why_len > 0)
        snprintf(why, why_len, "%s", cuda__g.count > 0 ? "" : cuda__g.why);
    return cuda__g.count;
}

int sw__cuda_driver_version(void)
{
    pthread_once(&cuda__once, cuda__load);
    return cuda__g.version;
}

int sw__cuda_loader_missing(char *buf, size_t len)
{
    pthread_once(&cuda__once, cuda__load);
    if (len > 0)
        snprintf(buf, len, "%s", cuda__g.missing);
    return cuda__g.lib != NULL ? 0 : -1;
}

void *sw__cuda_thread_context(void)
{
    pthread_once(&cuda__once, cuda__load);
    swcu_context ctx = NULL;
    if (cuda__g.lib == NULL || CU(cuCtxGetCurrent)(&ctx) != SWCU_CUDA_SUCCESS)
        return NULL;
    return ctx;
}

/* ------------------------------------------------------------------------
 * The built-in kernels: one CUDA C program, src/backend/kernels/cuda.cu
 * (embedded at build time as sw__cuda_kernels_cu), and the tables that
 * launch it.  Every kernel runs with CUDA__THREADS threads per block (the
 * sums depend on it; the source's SW_THREADS is the same number).
 * ---------------------------------------------------------------------- */

/* The entry points.  The arithmetic comes in groups of three, ADD,
 * SCALE, AXPY, one group per arithmetic type (cuda__dtype). */
enum {
    CUDA__K_FILL_U8,
    CUDA__K_FILL_U16,
    CUDA__K_FILL_U32,
    CUDA__K_FILL_U64,
    CUDA__K_FILL_U128,
    CUDA__K_COPY_U8,
    CUDA__K_COPY_U16,
    CUDA__K_COPY_U32,
    CUDA__K_COPY_U64,
#define CUDA__ARITH(T) CUDA__K_ADD_##T, CUDA__K_SCALE_##T, CUDA__K_AXPY_##T
    CUDA__ARITH(U8),
    CUDA__ARITH(U16),
    CUDA__ARITH(U32),
    CUDA__ARITH(U64),
    CUDA__ARITH(F16),
    CUDA__ARITH(BF16),
    CUDA__ARITH(F32),
    CUDA__ARITH(F64),
    CUDA__ARITH(C64),
    CUDA__ARITH(C128),
#undef CUDA__ARITH
    CUDA__K_SUM_I8,
    CUDA__K_SUM_I16,
    CUDA__K_SUM_I32,
    CUDA__K_SUM_U8,
    CUDA__K_SUM_U16,
    CUDA__K_SUM_U32,
    CUDA__K_SUM_U64,
    CUDA__K_SUM_B8,
    CUDA__K_SUM_F16,
    CUDA__K_SUM_BF16,
    CUDA__K_SUM_F32,
    CUDA__K_SUM_F64,
    CUDA__K_SUM_C64,
    CUDA__K_SUM_C128,
    CUDA__K_SUM_FINAL_F64,
    CUDA__K_SUM_FINAL_I64,
    CUDA__K_SUM_FINAL_C128,
    CUDA__K_FILL_BYTES,
    CUDA__K_COUNT,
};

static const char *const cuda__names[CUDA__K_COUNT] = {
    "sw_fill_u8", "sw_fill_u16", "sw_fill_u32", "sw_fill_u64",
    "sw_fill_u128", "sw_copy_u8", "sw_copy_u16", "sw_copy_u32",
    "sw_copy_u64",
#define CUDA__ARITH(S) "sw_add_" S, "sw_scale_" S, "sw_axpy_" S
    CUDA__ARITH("u8"), CUDA__ARITH("u16"), CUDA__ARITH("u32"),
    CUDA__ARITH("u64"), CUDA__ARITH("f16"), CUDA__ARITH("bf16"),
    CUDA__ARITH("f32"), CUDA__ARITH("f64"), CUDA__ARITH("c64"),
    CUDA__ARITH("c128"),
#undef CUDA__ARITH
    "sw_sum_i8", "sw_sum_i16", "sw_sum_i32", "sw_sum_u8", "sw_sum_u16",
    "sw_sum_u32", "sw_sum_u64", "sw_sum_b8", "sw_sum_f16", "sw_sum_bf16",
    "sw_sum_f32", "sw_sum_f64", "sw_sum_c64", "sw_sum_c128",
    "sw_sum_final_f64", "sw_sum_final_i64", "sw_sum_final_c128",
    "sw_fill_bytes",
};

/* Each kernel's parameters, in bytes, as its CUDA C declares them: every
 * launch is checked against this before it reaches the driver (a wrong
 * size would be read as garbage by the GPU), and the cuda_nvrtc_ptx test
 * checks it against the compiled PTX's .param lists. */
#define CUDA__MAX_PARAMS 5
#define CUDA__P3(a, b, c) {3, {a, b, c, 0, 0}}
#define CUDA__P4(a, b, c, d) {4, {a, b, c, d, 0}}
#define CUDA__P5(a, b, c, d, e) {5, {a, b, c, d, e}}
/* ADD (out, a, b, n); SCALE and AXPY (out, a, alpha, n) */
#define CUDA__PARITH(alpha)                                                   \
    CUDA__P4(8, 8, 8, 8), CUDA__P4(8, 8, alpha, 8), CUDA__P4(8, 8, alpha, 8)
/* complex SCALE and AXPY: (out, a, ar, ai, n) */
#define CUDA__PCOMPLEX(part)                                                  \
    CUDA__P4(8, 8, 8, 8), CUDA__P5(8, 8, part, part, 8),                      \
        CUDA__P5(8, 8, part, part, 8)
static const struct {
    unsigned char n, size[CUDA__MAX_PARAMS];
} cuda__params[CUDA__K_COUNT] = {
    /* fill (out, alpha, n); the 16-byte one (out, lo, hi, n) */
    CUDA__P3(8, 1, 8), CUDA__P3(8, 2, 8), CUDA__P3(8, 4, 8),
    CUDA__P3(8, 8, 8), CUDA__P4(8, 8, 8, 8),
    /* copy (out, a, n) */
    CUDA__P3(8, 8, 8), CUDA__P3(8, 8, 8), CUDA__P3(8, 8, 8),
    CUDA__P3(8, 8, 8),
    /* add, scale, axpy: u8 u16 u32 u64 f16 bf16 f32 f64 (float16 and
     * bfloat16 take alpha as a float), c64 c128 */
    CUDA__PARITH(1), CUDA__PARITH(2), CUDA__PARITH(4), CUDA__PARITH(8),
    CUDA__PARITH(4), CUDA__PARITH(4), CUDA__PARITH(4), CUDA__PARITH(8),
    CUDA__PCOMPLEX(4), CUDA__PCOMPLEX(8),
    /* sum (a, n, partials), 14 of them */
    CUDA__P3(8, 8, 8), CUDA__P3(8, 8, 8), CUDA__P3(8, 8, 8),
    CUDA__P3(8, 8, 8), CUDA__P3(8, 8, 8), CUDA__P3(8, 8, 8),
    CUDA__P3(8, 8, 8), CUDA__P3(8, 8, 8), CUDA__P3(8, 8, 8),
    CUDA__P3(8, 8, 8), CUDA__P3(8, 8, 8), CUDA__P3(8, 8, 8),
    CUDA__P3(8, 8, 8), CUDA__P3(8, 8, 8),
    /* sum_final_f64, _i64, _c128 (partials, count, out) */
    CUDA__P3(8, 4, 8), CUDA__P3(8, 4, 8), CUDA__P3(8, 4, 8),
    /* fill_bytes (dst, n, lo, hi, psize) */
    CUDA__P5(8, 8, 8, 8, 4),
};
#undef CUDA__P3
#undef CUDA__P4
#undef CUDA__P5
#undef CUDA__PARITH
#undef CUDA__PCOMPLEX

/* Per dtype: its ADD kernel (SCALE and AXPY follow; -1 for bool, which
 * has no arithmetic), its SUM kernel and that sum's final pass. */
static const struct {
    int add, sum, final;
} cuda__dtype[SW_DTYPE_COUNT] = {
    [SW_FLOAT32] = {CUDA__K_ADD_F32, CUDA__K_SUM_F32, CUDA__K_SUM_FINAL_F64},
    [SW_FLOAT64] = {CUDA__K_ADD_F64, CUDA__K_SUM_F64, CUDA__K_SUM_FINAL_F64},
    [SW_INT32] = {CUDA__K_ADD_U32, CUDA__K_SUM_I32, CUDA__K_SUM_FINAL_I64},
    [SW_INT64] = {CUDA__K_ADD_U64, CUDA__K_SUM_U64, CUDA__K_SUM_FINAL_I64},
    [SW_BOOL] = {-1, CUDA__K_SUM_B8, CUDA__K_SUM_FINAL_I64},
    [SW_INT8] = {CUDA__K_ADD_U8, CUDA__K_SUM_I8, CUDA__K_SUM_FINAL_I64},
    [SW_INT16] = {CUDA__K_ADD_U16, CUDA__K_SUM_I16, CUDA__K_SUM_FINAL_I64},
    [SW_UINT8] = {CUDA__K_ADD_U8, CUDA__K_SUM_U8, CUDA__K_SUM_FINAL_I64},
    [SW_UINT16] = {CUDA__K_ADD_U16, CUDA__K_SUM_U16, CUDA__K_SUM_FINAL_I64},
    [SW_UINT32] = {CUDA__K_ADD_U32, CUDA__K_SUM_U32, CUDA__K_SUM_FINAL_I64},
    [SW_UINT64] = {CUDA__K_ADD_U64, CUDA__K_SUM_U64, CUDA__K_SUM_FINAL_I64},
    [SW_FLOAT16] = {CUDA__K_ADD_F16, CUDA__K_SUM_F16, CUDA__K_SUM_FINAL_F64},
    [SW_BFLOAT16] = {CUDA__K_ADD_BF16, CUDA__K_SUM_BF16,
                     CUDA__K_SUM_FINAL_F64},
    [SW_COMPLEX64] = {CUDA__K_ADD_C64, CUDA__K_SUM_C64,
                      CUDA__K_SUM_FINAL_C128},
    [SW_COMPLEX128] = {CUDA__K_ADD_C128, CUDA__K_SUM_C128,
                       CUDA__K_SUM_FINAL_C128},
};

/* FILL and COPY kernels by log2 of the element size (COPY of 16-byte
 * elements copies twice as many u64). */
static const int cuda__fills[5] = {CUDA__K_FILL_U8, CUDA__K_FILL_U16,
                                   CUDA__K_FILL_U32, CUDA__K_FILL_U64,
                                   CUDA__K_FILL_U128};
static const int cuda__copies[4] = {CUDA__K_COPY_U8, CUDA__K_COPY_U16,
                                    CUDA__K_COPY_U32, CUDA__K_COPY_U64};

static int cuda__log2_size(size_t es)
{
    return es == 1 ? 0 : es == 2 ? 1 : es == 4 ? 2 : es == 8 ? 3 : 4;
}

int sw__cuda_kernel_for(int kernel, int dtype)
{
    if (dtype < 0 || dtype >= SW_DTYPE_COUNT)
        return -1;
    int lg = cuda__log2_size(sw_dtype_size((sw_dtype)dtype));
    switch (kernel) {
    case SW_KERNEL_FILL: return cuda__fills[lg];
    case SW_KERNEL_COPY: return cuda__copies[lg < 3 ? lg : 3];
    case SW_KERNEL_ADD:
    case SW_KERNEL_SCALE:
    case SW_KERNEL_AXPY:
        return cuda__dtype[dtype].add < 0
                   ? -1
                   : cuda__dtype[dtype].add + (kernel - SW_KERNEL_ADD);
    case SW_KERNEL_SUM: return cuda__dtype[dtype].sum;
    default: return -1;
    }
}

const unsigned char *sw__cuda_kernel_params(size_t k, size_t *count)
{
    if (k >= CUDA__K_COUNT) {
        *count = 0;
        return NULL;
    }
    *count = cuda__params[k].n;
    return cuda__params[k].size;
}

const char *const *sw__cuda_kernel_names(size_t *count)
{
    if (count != NULL)
        *count = CUDA__K_COUNT;
    return cuda__names;
}

/* ------------------------------------------------------------------------
 * Devices, queues and events
 * ---------------------------------------------------------------------- */

/* A free of the cuMemAlloc fallback, waiting for its stream's work.
 * Records are made ahead, at allocation (cuda__reserve): a free must not
 * fail for want of host memory, since the core cannot take the memory
 * back, so each free finds one ready. */
typedef struct cuda__pending {
    struct cuda__pending *next;
    swcu_deviceptr mem;
    swcu_event after; /* the record's own, recorded again at each free */
} cuda__pending;

struct sw__bevent {
    sw__bdev *dev;
    swcu_event ev;  /* without timing: queries, cuStreamWaitEvent */
    swcu_event hev; /* CU_EVENT_BLOCKING_SYNC: host waits; NULL in an
                     * event for device-side joins only */
    /* A timing event (flags 0), recorded with the others on the copy
     * stream only, for event_elapsed: a spill's or restore's own time on
     * the device.  Made at the first such record, kept when recycled. */
    swcu_event tev;
    int timed; /* tev was recorded with this record */
    sw__bevent *next; /* in dev->ev_free or dev->jev_free */
};

struct sw__bqueue {
    sw__bdev *dev;
    swcu_stream stream;
    /* Blocking-sync, recorded and waited by synchronize (made with the
     * queue: synchronize must not allocate). */
    swcu_event sync_ev;
    /* CUDA__SUM_BLOCKS partial sums, allocated at the queue's first sum
     * (only this queue's work uses them, in its stream order). */
    swcu_deviceptr partials;
    int partials_pooled; /* from the pool (freed async) or cuMemAlloc */
    int foreign; /* the caller's stream (queue_wrap): never destroyed */
};

struct sw__bdev {
    _Atomic int refs; /* the open, live events, queues */
    int index;
    swcu_device cu;
    swcu_context ctx; /* the primary context, retained */
    int cc_major, cc_minor, sms;
    swcu_mempool pool; /* NULL: the cuMemAlloc fallback */
    sw__bqueue dq;     /* the default queue */
    sw__bqueue cq;     /* the copy queue (stream NULL: none) */
    int pinned;        /* host_alloc gives page-locked memory */

    /* Kernels (under the core's device lock). */
    swcu_module module;
    swcu_function fn[CUDA__K_COUNT];
    int kernels_failed;  /* code of the first failure, 0 if none */
    char kernels_why[768];

    /* The fallback's frees (device lock): queued ones, and records ready
     * for the next, at least one per live cuMemAlloc allocation
     * (nspare >= nlive). */
    cuda__pending *pending, *spare;
    size_t nspare, nlive;

    pthread_mutex_t ev_mu; /* leaf: the event free lists */
    sw__bevent *ev_free;   /* host events (a pair) */
    sw__bevent *jev_free;  /* join events (one, without timing) */
};

/* Open devices, for sw__cuda_pool_usage. */
static pthread_mutex_t cuda__open_mu = PTHREAD_MUTEX_INITIALIZER;
static sw__bdev *cuda__open[CUDA__MAX_DEVICES];

/* The device's context current on this thread for the scope of a call:
 * pushed when another (or none) is current, popped again after. */
typedef struct cuda__scope {
    int pushed;
} cuda__scope;

static int cuda__enter(sw__bdev *d, cuda__scope *s)
{
    s->pushed = 0;
    if (cuda__forked)
        return sw__errorf(SW_ERR_DEVICE, "cuda:%d: %s", d->index,
                          cuda__fork_msg);
    swcu_context cur = NULL;
    if (CU(cuCtxGetCurrent)(&cur) == SWCU_CUDA_SUCCESS && cur == d->ctx)
        return SW_OK;
    swcu_result r = CU(cuCtxPushCurrent_v2)(d->ctx);
    if (r != SWCU_CUDA_SUCCESS)
        return cuda__fail(d->index, r, "cuCtxPushCurrent_v2", NULL);
    s->pushed = 1;
    return SW_OK;
}

static void cuda__leave(const cuda__scope *s)
{
    if (s->pushed) {
        swcu_context popped = NULL;
        (void)CU(cuCtxPopCurrent_v2)(&popped);
    }
}

static void cuda__ref(sw__bdev *d)
{
    atomic_fetch_add_explicit(&d->refs, 1, memory_order_relaxed);
}

/* The last reference: recycled events, then the primary context. */
static void cuda__unref(sw__bdev *d)
{
    if (atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) != 1)
        return;
    cuda__scope s;
    int entered = cuda__enter(d, &s) == SW_OK;
    sw__bevent *lists[2] = {d->ev_free, d->jev_free};
    for (int i = 0; i < 2; i++) {
        for (sw__bevent *e = lists[i], *next; e; e = next) {
            next = e->next;
            if (entered) {
                (void)CU(cuEventDestroy_v2)(e->ev);
                if (e->hev != NULL)
                    (void)CU(cuEventDestroy_v2)(e->hev);
                if (e->tev != NULL)
                    (void)CU(cuEventDestroy_v2)(e->tev);
            }
            sw__free(e);
        }
    }
    if (entered)
        cuda__leave(&s);
    (void)CU(cuDevicePrimaryCtxRelease_v2)(d->cu);
    pthread_mutex_destroy(&d->ev_mu);
    sw__free(d);
}

/* An event recorded nowhere yet: a host event (the pair: host != 0) or a
 * join event (device-side waits only).  The context is current. */
static int cuda__event_new(sw__bdev *d, int host, sw__bevent **out)
{
    sw__bevent **list = host ? &d->ev_free : &d->jev_free;
    pthread_mutex_lock(&d->ev_mu);
    sw__bevent *e = *list;
    if (e != NULL)
        *list = e->next;
    pthread_mutex_unlock(&d->ev_mu);
    if (e == NULL) {
        e = sw__malloc(sizeof *e);
        if (e == NULL)
            return sw__errorf(SW_ERR_HOST_OOM, "cuda:%d: no host memory for "
                              "an event", d->index);
        e->hev = NULL;
        e->tev = NULL;
        swcu_result r = CU(cuEventCreate)(&e->ev, SWCU_CU_EVENT_DISABLE_TIMING);
        if (r == SWCU_CUDA_SUCCESS && host) {
            r = CU(cuEventCreate)(&e->hev, SWCU_CU_EVENT_DISABLE_TIMING |
                                               SWCU_CU_EVENT_BLOCKING_SYNC);
            if (r != SWCU_CUDA_SUCCESS)
                (void)CU(cuEventDestroy_v2)(e->ev);
        }
        if (r != SWCU_CUDA_SUCCESS) {
            sw__free(e);
            return cuda__fail(d->index, r, "cuEventCreate", NULL);
        }
        e->dev = d;
    }
    e->next = NULL;
    e->timed = 0;
    cuda__ref(d);
    *out = e;
    return SW_OK;
}

/* Back to the free list (a CUDA event is re-recorded, never reset). */
static void cuda__event_put(sw__bevent *e)
{
    sw__bdev *d = e->dev;
    sw__bevent **list = e->hev != NULL ? &d->ev_free : &d->jev_free;
    pthread_mutex_lock(&d->ev_mu);
    e->next = *list;
    *list = e;
    pthread_mutex_unlock(&d->ev_mu);
    cuda__unref(d);
}

/* Record q's blocking-sync event and wait for it: all of q's work so far,
 * the calling thread asleep meanwhile.  The context is current. */
static swcu_result cuda__stream_wait_host(sw__bqueue *q)
{
    swcu_result r = CU(cuEventRecord)(q->sync_ev, q->stream);
    if (r == SWCU_CUDA_SUCCESS)
        r = CU(cuEventSynchronize)(q->sync_ev);
    return r;
}

/* A stream and its blocking-sync event, for a queue; the context is
 * current.  Undone by cuda__stream_destroy. */
static swcu_result cuda__stream_create(sw__bqueue *q, const char **call)
{
    *call = "cuStreamCreate";
    swcu_result r = CU(cuStreamCreate)(&q->stream,
                                       SWCU_CU_STREAM_NON_BLOCKING);
    if (r != SWCU_CUDA_SUCCESS) {
        q->stream = NULL;
        return r;
    }
    *call = "cuEventCreate";
    r = CU(cuEventCreate)(&q->sync_ev, SWCU_CU_EVENT_DISABLE_TIMING |
                                           SWCU_CU_EVENT_BLOCKING_SYNC);
    if (r != SWCU_CUDA_SUCCESS) {
        (void)CU(cuStreamDestroy_v2)(q->stream);
        q->stream = NULL;
        q->sync_ev = NULL;
    }
    return r;
}

static void cuda__stream_destroy(sw__bqueue *q)
{
    if (q->stream == NULL)
        return;
    (void)CU(cuEventDestroy_v2)(q->sync_ev);
    if (!q->foreign)
        (void)CU(cuStreamDestroy_v2)(q->stream);
    q->stream = NULL;
    q->sync_ev = NULL;
}

/* Fallback frees whose stream work is done go back to the driver.  The
 * device lock is held and the context is current.  cuMemFree may wait
 * for the device; it is only ever called here, never from free. */
static void cuda__reap(sw__bdev *d)
{
    cuda__pending **pp = &d->pending;
    while (*pp != NULL) {
        cuda__pending *p = *pp;
        swcu_result r = CU(cuEventQuery)(p->after);
        if (r == SWCU_CUDA_ERROR_NOT_READY) {
            pp = &p->next;
            continue;
        }
        /* Complete, or the context is broken (then freeing is moot). */
        (void)CU(cuMemFree_v2)(p->mem);
        *pp = p->next;
        p->next = d->spare;
        d->spare = p;
        d->nspare++;
    }
}

/* At close: every pending free, waiting for each, then the records.  The
 * context is current when entered (else only host memory is released). */
static void cuda__reap_all(sw__bdev *d, int entered)
{
    while (entered && d->pending != NULL) {
        cuda__pending *p = d->pending;
        d->pending = p->next;
        (void)CU(cuEventSynchronize)(p->after);
        (void)CU(cuMemFree_v2)(p->mem);
        p->next = d->spare;
        d->spare = p;
    }
    cuda__pending *lists[2] = {d->pending, d->spare};
    for (int i = 0; i < 2; i++) {
        for (cuda__pending *p = lists[i], *next; p != NULL; p = next) {
            next = p->next;
            if (entered)
                (void)CU(cuEventDestroy_v2)(p->after);
            sw__free(p);
        }
    }
    d->pending = d->spare = NULL;
    d->nspare = d->nlive = 0;
}

/* Before a cuMemAlloc of the fallback: a record ready for its free.  The
 * context is current. */
static int cuda__reserve(sw__bdev *d)
{
    if (d->nspare > d->nlive)
        return SW_OK;
    cuda__pending *p = sw__malloc(sizeof *p);
    if (p == NULL)
        return sw__errorf(SW_ERR_HOST_OOM, "cuda:%d: no host memory for "
                          "the record of a later free", d->index);
    swcu_result r = CU(cuEventCreate)(&p->after,
                                      SWCU_CU_EVENT_DISABLE_TIMING);
    if (r != SWCU_CUDA_SUCCESS) {
        sw__free(p);
        return cuda__fail(d->index, r, "cuEventCreate", "a later free");
    }
    p->next = d->spare;
    d->spare = p;
    d->nspare++;
    return SW_OK;
}

/* Is r a sticky context error (a kernel fault of earlier work, 700-719):
 * the context is unusable from now on, whatever is tried. */
static int cuda__sticky(swcu_result r)
{
    return r >= SWCU_CUDA_ERROR_ILLEGAL_ADDRESS &&
           r <= SWCU_CUDA_ERROR_LAUNCH_FAILED;
}

/* Give the device what it can have back without waiting: the pool's
 * unused memory, or the fallback's frees whose work is done.  For an
 * out-of-memory outside an allocation (which the core's ladder does not
 * see).  The device lock is held, the context current. */
static void cuda__give_back(sw__bdev *d)
{
    if (d->pool != NULL) {
        if (CU(cuMemPoolTrimTo) != NULL)
            (void)CU(cuMemPoolTrimTo)(d->pool, 0);
    } else {
        cuda__reap(d);
    }
}

/* ------------------------------------------------------------------------
 * Operations: devices
 * ---------------------------------------------------------------------- */

static int cuda_device_count(int *count, char *why, size_t why_len)
{
    *count = cuda__devices(why, why_len);
    return SW_OK;
}

int sw__cuda_device_count(int *count, char *why, size_t why_len)
{
    return cuda_device_count(count, why, why_len);
}

/* The private pool, or NULL (the fallback) with why set. */
static swcu_mempool cuda__pool_create(sw__bdev *d, char *why, size_t len)
{
    const char *env = getenv("SPILLWAY_CUDA_POOL");
    if (env != NULL && strcmp(env, "0") == 0) {
        snprintf(why, len, "SPILLWAY_CUDA_POOL=0");
        return NULL;
    }
    int supported = 0;
    if (CU(cuDeviceGetAttribute)(&supported,
                                 SWCU_CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
                                 d->cu) != SWCU_CUDA_SUCCESS ||
        !supported) {
        snprintf(why, len, "no memory pools on this device");
        return NULL;
    }
    if (CU(cuMemPoolCreate) == NULL || CU(cuMemPoolDestroy) == NULL ||
        CU(cuMemAllocFromPoolAsync) == NULL || CU(cuMemFreeAsync) == NULL ||
        CU(cuMemPoolSetAttribute) == NULL) {
        snprintf(why, len, "the driver has no memory pools");
        return NULL;
    }
    swcu_mempool_props props;
    memset(&props, 0, sizeof props);
    props.alloc_type = SWCU_CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handle_types = SWCU_CU_MEM_HANDLE_TYPE_NONE;
    props.location.type = SWCU_CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = d->cu;
    swcu_mempool pool = NULL;
    swcu_result r = CU(cuMemPoolCreate)(&pool, &props);
    if (r != SWCU_CUDA_SUCCESS) {
        char nbuf[32];
        snprintf(why, len, "cuMemPoolCreate failed: %s",
                 cuda__err_name(r, nbuf, sizeof nbuf));
        return NULL;
    }
    /* Threshold 0 (a new pool's default, set to be sure): unused memory
     * goes back to the device at every synchronization. */
    uint64_t zero = 0;
    (void)CU(cuMemPoolSetAttribute)(pool,
                                    SWCU_CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                                    &zero);
    return pool;
}

static int cuda_open(int index, sw__bdev **out, sw__device_props *props)
{
    char why[256];
    int n = cuda__devices(why, sizeof why);
    if (index < 0 || index >= n)
        return n == 0 ? sw__errorf(SW_ERR_NO_DEVICE, "cuda:%d: no CUDA "
                                   "devices: %s", index, why)
                      : sw__errorf(SW_ERR_NO_DEVICE, "cuda:%d: no such "
                                   "device (the driver reports %d)", index,
                                   n);
    sw__bdev *d = sw__calloc(1, sizeof *d);
    if (d == NULL)
        return sw__errorf(SW_ERR_HOST_OOM, "cuda:%d: out of host memory",
                          index);
    d->index = index;
    d->dq.dev = d;
    atomic_init(&d->refs, 1);
    pthread_mutex_init(&d->ev_mu, NULL);

    swcu_result r = CU(cuDeviceGet)(&d->cu, index);
    if (r != SWCU_CUDA_SUCCESS) {
        pthread_mutex_destroy(&d->ev_mu);
        sw__free(d);
        return cuda__fail(index, r, "cuDeviceGet", NULL);
    }
    r = CU(cuDevicePrimaryCtxRetain)(&d->ctx, d->cu);
    if (r != SWCU_CUDA_SUCCESS) {
        pthread_mutex_destroy(&d->ev_mu);
        sw__free(d);
        return cuda__fail(index, r, "cuDevicePrimaryCtxRetain", NULL);
    }
    /* From here on cuda__unref undoes everything. */
    cuda__scope s;
    int rc = cuda__enter(d, &s);
    if (rc != SW_OK) {
        cuda__unref(d);
        return rc;
    }
    char name[100] = "NVIDIA GPU";
    size_t total = 0;
    struct {
        swcu_device_attribute attr;
        int *value;
        const char *what;
    } attrs[] = {
        {SWCU_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &d->cc_major,
         "compute capability"},
        {SWCU_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &d->cc_minor,
         "compute capability"},
        {SWCU_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &d->sms,
         "multiprocessor count"},
    };
    for (size_t i = 0; rc == SW_OK && i < sizeof attrs / sizeof attrs[0];
         i++) {
        r = CU(cuDeviceGetAttribute)(attrs[i].value, attrs[i].attr, d->cu);
        if (r != SWCU_CUDA_SUCCESS)
            rc = cuda__fail(index, r, "cuDeviceGetAttribute",
                            attrs[i].what);
    }
    if (rc == SW_OK &&
        (r = CU(cuDeviceTotalMem_v2)(&total, d->cu)) != SWCU_CUDA_SUCCESS)
        rc = cuda__fail(index, r, "cuDeviceTotalMem_v2", NULL);
    if (rc == SW_OK &&
        CU(cuDeviceGetName)(name, (int)sizeof name, d->cu) !=
            SWCU_CUDA_SUCCESS)
        snprintf(name, sizeof name, "NVIDIA GPU");
    d->cq.dev = d;
    const char *call = NULL;
    if (rc == SW_OK &&
        (r = cuda__stream_create(&d->dq, &call)) != SWCU_CUDA_SUCCESS)
        rc = cuda__fail(index, r, call, "the default queue");
    if (rc == SW_OK &&
        (r = cuda__stream_create(&d->cq, &call)) != SWCU_CUDA_SUCCESS)
        rc = cuda__fail(index, r, call, "the copy queue");
    if (rc != SW_OK) {
        cuda__stream_destroy(&d->dq);
        cuda__leave(&s);
        cuda__unref(d);
        return rc;
    }
    const char *pin = getenv("SPILLWAY_CUDA_PINNED");
    d->pinned = (pin == NULL || strcmp(pin, "0") != 0) &&
                CU(cuMemHostAlloc) != NULL && CU(cuMemFreeHost) != NULL;
    char nopool[96] = "";
    d->pool = cuda__pool_create(d, nopool, sizeof nopool);
    cuda__leave(&s);

    pthread_mutex_lock(&cuda__open_mu);
    cuda__open[index] = d;
    pthread_mutex_unlock(&cuda__open_mu);

    memset(props, 0, sizeof *props);
    int v = cuda__g.version;
    snprintf(props->description, sizeof props->description,
             "%.60s, sm_%d%d, %d SMs, driver %d.%d, %s%s%.40s%s%s", name,
             d->cc_major, d->cc_minor, d->sms, v / 1000, (v % 1000) / 10,
             d->pool ? "stream-ordered memory pool" : "cuMemAlloc",
             d->pool ? "" : " (", d->pool ? "" : nopool,
             d->pool ? "" : ")",
             d->pinned ? ", pinned staging" : ", pageable staging");
    props->total = total;
    props->max_alloc = 0;
    props->host_addressable = 0;
    props->dtypes = SW__ALL_DTYPES; /* kernels/cuda.cu covers them all */
    *out = d;
    return SW_OK;
}

/* The partial-sum block of a queue; the context is current. */
static void cuda__partials_free(sw__bqueue *q)
{
    if (q->partials == 0)
        return;
    if (q->partials_pooled)
        (void)CU(cuMemFreeAsync)(q->partials, q->stream);
    else
        (void)CU(cuMemFree_v2)(q->partials);
    q->partials = 0;
}

/* pre: no live allocations, no queues but the default. */
static void cuda_close(sw__bdev *d)
{
    if (d == NULL)
        return;
    pthread_mutex_lock(&cuda__open_mu);
    if (cuda__open[d->index] == d)
        cuda__open[d->index] = NULL;
    pthread_mutex_unlock(&cuda__open_mu);

    cuda__scope s;
    if (cuda__enter(d, &s) == SW_OK) {
        if (d->dq.partials_pooled)
            cuda__partials_free(&d->dq); /* stream-ordered: before the sync */
        (void)cuda__stream_wait_host(&d->cq);
        (void)cuda__stream_wait_host(&d->dq);
        cuda__partials_free(&d->dq);
        /* Every queue is idle now (the others were destroyed first), so
         * the fallback's frees all complete. */
        cuda__reap_all(d, 1);
        cuda__stream_destroy(&d->cq);
        cuda__stream_destroy(&d->dq);
        if (d->module != NULL)
            (void)CU(cuModuleUnload)(d->module);
        if (d->pool != NULL)
            (void)CU(cuMemPoolDestroy)(d->pool);
        cuda__leave(&s);
    } else {
        cuda__reap_all(d, 0);
    }
    d->module = NULL;
    d->pool = NULL;
    cuda__unref(d);
}

/* ------------------------------------------------------------------------
 * Operations: memory
 * ---------------------------------------------------------------------- */

static int cuda_alloc(sw__bdev *d, size_t size, uintptr_t *mem)
{
    cuda__scope s;
    int rc = cuda__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    swcu_deviceptr p = 0;
    swcu_result r;
    const char *call;
    if (d->pool != NULL) {
        call = "cuMemAllocFromPoolAsync";
        r = CU(cuMemAllocFromPoolAsync)(&p, size, d->pool, d->dq.stream);
        if (r == SWCU_CUDA_ERROR_OUT_OF_MEMORY && CU(cuMemPoolTrimTo)) {
            /* Free chunks of other sizes the pool still maps: give them
             * back, so that the device can map one that fits. */
            (void)CU(cuMemPoolTrimTo)(d->pool, 0);
            r = CU(cuMemAllocFromPoolAsync)(&p, size, d->pool, d->dq.stream);
        }
    } else {
        call = "cuMemAlloc_v2";
        cuda__reap(d);
        if ((rc = cuda__reserve(d)) != SW_OK) {
            cuda__leave(&s);
            return rc;
        }
        r = CU(cuMemAlloc_v2)(&p, size);
        if (r == SWCU_CUDA_SUCCESS)
            d->nlive++;
    }
    cuda__leave(&s);
    if (r != SWCU_CUDA_SUCCESS) {
        char detail[48];
        snprintf(detail, sizeof detail, "%zu bytes", size);
        return cuda__fail(d->index, r, call, detail);
    }
    *mem = (uintptr_t)p;
    return SW_OK;
}

/* The fallback's free: cuMemFree once q's work so far is done, through a
 * record made at the allocation (no host memory needed here).  The
 * context is current. */
static int cuda__defer_free(sw__bdev *d, sw__bqueue *q, swcu_deviceptr mem)
{
    cuda__pending *p = d->spare;
    assert(p != NULL && d->nspare >= d->nlive && d->nlive > 0);
    swcu_result r = CU(cuEventRecord)(p->after, q->stream);
    if (r != SWCU_CUDA_SUCCESS)
        return cuda__fail(d->index, r, "cuEventRecord", "deferred free");
    d->spare = p->next;
    d->nspare--;
    d->nlive--;
    p->mem = mem;
    p->next = d->pending;
    d->pending = p;
    return SW_OK;
}

static int cuda_free(sw__bdev *d, sw__bqueue *q, uintptr_t mem, size_t size)
{
    if (q == NULL)
        q = &d->dq;
    cuda__scope s;
    int rc = cuda__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    if (d->pool != NULL) {
        swcu_result r = CU(cuMemFreeAsync)((swcu_deviceptr)mem, q->stream);
        if (r != SWCU_CUDA_SUCCESS) {
            char detail[64];
            snprintf(detail, sizeof detail, "0x%" PRIxPTR ", %zu bytes", mem,
                     size);
            rc = cuda__fail(d->index, r, "cuMemFreeAsync", detail);
        }
    } else {
        rc = cuda__defer_free(d, q, (swcu_deviceptr)mem);
    }
    cuda__leave(&s);
    return rc;
}

static int cuda_mem_info(sw__bdev *d, uint64_t *free_bytes, uint64_t *total,
                         int *free_known)
{
    cuda__scope s;
    int rc = cuda__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    /* What the pool holds unused, or fallback frees now complete, is
     * returned first, so that device_free is what the device has. */
    if (d->pool != NULL) {
        if (CU(cuMemPoolTrimTo) != NULL)
            (void)CU(cuMemPoolTrimTo)(d->pool, 0);
    } else {
        cuda__reap(d);
    }
    size_t f = 0, t = 0;
    swcu_result r = CU(cuMemGetInfo_v2)(&f, &t);
    cuda__leave(&s);
    if (r != SWCU_CUDA_SUCCESS)
        return cuda__fail(d->index, r, "cuMemGetInfo_v2", NULL);
    *free_bytes = f;
    *total = t;
    *free_known = 1;
    return SW_OK;
}

int sw__cuda_pool_usage(int index, uint64_t *reserved, uint64_t *used)
{
    *reserved = *used = 0;
    if (index < 0 || index >= CUDA__MAX_DEVICES)
        return sw__errorf(SW_ERR_INVALID_ARG, "cuda:%d: no such device",
                          index);
    pthread_mutex_lock(&cuda__open_mu);
    sw__bdev *d = cuda__open[index];
    int rc = SW_OK;
    if (d == NULL || d->pool == NULL || CU(cuMemPoolGetAttribute) == NULL) {
        rc = sw__errorf(SW_ERR_UNSUPPORTED, "cuda:%d: %s", index,
                        d == NULL ? "not open" : "allocates without a pool");
    } else {
        cuda__scope s;
        rc = cuda__enter(d, &s);
        if (rc == SW_OK) {
            swcu_result r = CU(cuMemPoolGetAttribute)(
                d->pool, SWCU_CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, reserved);
            if (r == SWCU_CUDA_SUCCESS)
                r = CU(cuMemPoolGetAttribute)(
                    d->pool, SWCU_CU_MEMPOOL_ATTR_USED_MEM_CURRENT, used);
            if (r != SWCU_CUDA_SUCCESS)
                rc = cuda__fail(index, r, "cuMemPoolGetAttribute", NULL);
            cuda__leave(&s);
        }
    }
    pthread_mutex_unlock(&cuda__open_mu);
    return rc;
}

/* ------------------------------------------------------------------------
 * Operations: queues
 * ---------------------------------------------------------------------- */

static sw__bqueue *cuda_default_queue(sw__bdev *d) { return &d->dq; }

static int cuda_queue_create(sw__bdev *d, sw__bqueue **out)
{
    sw__bqueue *q = sw__calloc(1, sizeof *q);
    if (q == NULL)
        return sw__errorf(SW_ERR_HOST_OOM, "cuda:%d: no host memory for a "
                          "queue", d->index);
    q->dev = d;
    cuda__scope s;
    int rc = cuda__enter(d, &s);
    if (rc == SW_OK) {
        const char *call = NULL;
        swcu_result r = cuda__stream_create(q, &call);
        if (r != SWCU_CUDA_SUCCESS)
            rc = cuda__fail(d->index, r, call, NULL);
        cuda__leave(&s);
    }
    if (rc != SW_OK) {
        sw__free(q);
        return rc;
    }
    cuda__ref(d);
    *out = q;
    return SW_OK;
}

static int cuda_queue_native(sw__bqueue *q, uintptr_t *handle)
{
    *handle = (uintptr_t)q->stream;
    return SW_OK;
}

/* The caller's stream, which must be a stream of the device's primary
 * context (cuStreamGetCtx, where the driver has it: CUDA 9.2 on).  The
 * legacy and per-thread default streams (CU_STREAM_LEGACY 0x1,
 * CU_STREAM_PER_THREAD 0x2) are no stream objects: refused, as 0 is, and
 * so are spillway's own default and copy streams (the core refuses the
 * others it handed out). */
static int cuda_queue_wrap(sw__bdev *d, uintptr_t handle, sw__bqueue **out)
{
    if (handle == 0x1 || handle == 0x2)
        return sw__errorf(SW_ERR_INVALID_ARG, "cuda:%d: %#jx is the %s "
                          "default stream, which spillway does not adopt: "
                          "create a stream", d->index, (uintmax_t)handle,
                          handle == 0x1 ? "legacy" : "per-thread");
    if (handle == (uintptr_t)d->dq.stream ||
        (d->cq.stream != NULL && handle == (uintptr_t)d->cq.stream))
        return sw__errorf(SW_ERR_INVALID_ARG, "cuda:%d: %#jx is spillway's "
                          "own %s queue's stream: use that queue itself",
                          d->index, (uintmax_t)handle,
                          handle == (uintptr_t)d->dq.stream ? "default"
                                                            : "copy");
    sw__bqueue *q = sw__calloc(1, sizeof *q);
    if (q == NULL)
        return sw__errorf(SW_ERR_HOST_OOM, "cuda:%d: no host memory for a "
                          "queue", d->index);
    q->dev = d;
    q->foreign = 1;
    q->stream = (swcu_stream)handle;
    cuda__scope s;
    int rc = cuda__enter(d, &s);
    if (rc == SW_OK) {
        swcu_context ctx = NULL;
        swcu_result r = SWCU_CUDA_SUCCESS;
        char nb[64];
        if (CU(cuStreamGetCtx) != NULL &&
            (r = CU(cuStreamGetCtx)(q->stream, &ctx)) != SWCU_CUDA_SUCCESS)
            rc = sw__errorf(SW_ERR_INVALID_ARG, "cuda:%d: %#jx is not a "
                            "live stream (cuStreamGetCtx: %s)", d->index,
                            (uintmax_t)handle,
                            cuda__err_name(r, nb, sizeof nb));
        else if (CU(cuStreamGetCtx) != NULL && ctx != d->ctx)
            rc = sw__errorf(SW_ERR_INVALID_ARG, "cuda:%d: stream %#jx is "
                            "of another context than the device's primary "
                            "one (Device.native_context)", d->index,
                            (uintmax_t)handle);
        if (rc == SW_OK &&
            (r = CU(cuEventCreate)(&q->sync_ev,
                                   SWCU_CU_EVENT_DISABLE_TIMING |
                                       SWCU_CU_EVENT_BLOCKING_SYNC)) !=
                SWCU_CUDA_SUCCESS)
            rc = cuda__fail(d->index, r, "cuEventCreate", NULL);
        cuda__leave(&s);
    }
    if (rc != SW_OK) {
        sw__free(q);
        return rc;
    }
    cuda__ref(d);
    *out = q;
    return SW_OK;
}

static int cuda_native_context(sw__bdev *d, uintptr_t *context)
{
    *context = (uintptr_t)d->ctx;
    return SW_OK;
}

/* Waits for the queue's work, then destroys it.  The core calls it under
 * the device lock once the queue's work is done, so the wait is short;
 * it touches nothing but the queue and the device's reference count. */
static void cuda_queue_destroy(sw__bqueue *q)
{
    if (q == NULL || q == &q->dev->dq || q == &q->dev->cq)
        return;
    sw__bdev *d = q->dev;
    cuda__scope s;
    if (cuda__enter(d, &s) == SW_OK) {
        if (q->partials_pooled)
            cuda__partials_free(q); /* stream-ordered: before the sync */
        (void)cuda__stream_wait_host(q);
        cuda__partials_free(q);
        cuda__stream_destroy(q);
        cuda__leave(&s);
    }
    sw__free(q);
    cuda__unref(d);
}

/* ------------------------------------------------------------------------
 * Operations: transfers and fills
 * ---------------------------------------------------------------------- */

static int cuda_write(sw__bqueue *q, uintptr_t dst, size_t dst_off,
                      const void *src, size_t n)
{
    sw__bdev *d = q->dev;
    cuda__scope s;
    int rc = cuda__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    swcu_result r = CU(cuMemcpyHtoDAsync_v2)((swcu_deviceptr)(dst + dst_off),
                                              src, n, q->stream);
    cuda__leave(&s);
    if (r != SWCU_CUDA_SUCCESS) {
        char detail[48];
        snprintf(detail, sizeof detail, "%zu bytes", n);
        return cuda__fail(d->index, r, "cuMemcpyHtoDAsync_v2", detail);
    }
    return SW_OK;
}

/* Asynchronous into pinned memory, possibly synchronous into pageable
 * memory (NVIDIA's wording): either way dst is read only after an event
 * recorded after this has completed (the core waits for one). */
static int cuda_read(sw__bqueue *q, void *dst, uintptr_t src, size_t src_off,
                     size_t n)
{
    sw__bdev *d = q->dev;
    cuda__scope s;
    int rc = cuda__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    swcu_result r = CU(cuMemcpyDtoHAsync_v2)(
        dst, (swcu_deviceptr)(src + src_off), n, q->stream);
    cuda__leave(&s);
    if (r != SWCU_CUDA_SUCCESS) {
        char detail[48];
        snprintf(detail, sizeof detail, "%zu bytes", n);
        return cuda__fail(d->index, r, "cuMemcpyDtoHAsync_v2", detail);
    }
    return SW_OK;
}

static int cuda_copy(sw__bqueue *q, uintptr_t dst, size_t dst_off,
                     uintptr_t src, size_t src_off, size_t n)
{
    sw__bdev *d = q->dev;
    cuda__scope s;
    int rc = cuda__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    swcu_result r = CU(cuMemcpyDtoDAsync_v2)((swcu_deviceptr)(dst + dst_off),
                                              (swcu_deviceptr)(src + src_off),
                                              n, q->stream);
    cuda__leave(&s);
    if (r != SWCU_CUDA_SUCCESS) {
        char detail[48];
        snprintf(detail, sizeof detail, "%zu bytes", n);
        return cuda__fail(d->index, r, "cuMemcpyDtoDAsync_v2", detail);
    }
    return SW_OK;
}

static int cuda__kernels_ready(sw__bdev *d);

/* A kernel's arguments: pointers to host variables, with their sizes. */
typedef struct cuda__args {
    void *ptr[CUDA__MAX_PARAMS];
    unsigned char size[CUDA__MAX_PARAMS];
    unsigned char n;
} cuda__args;

#define CUDA__ARG(a, v)                                                       \
    ((a).ptr[(a).n] = (void *)&(v), (a).size[(a).n++] = sizeof(v))
#define CUDA__ARGP(a, p, bytes)                                               \
    ((a).ptr[(a).n] = (p), (a).size[(a).n++] = (unsigned char)(bytes))

/* Launch kernel k on q: grid blocks of CUDA__THREADS threads, compiling
 * and loading the kernels first if need be.  The context is current. */
static int cuda__run(sw__bqueue *q, int k, unsigned grid,
                     const cuda__args *a)
{
    sw__bdev *d = q->dev;
    int ok = a->n == cuda__params[k].n;
    for (int i = 0; ok && i < a->n; i++)
        ok = a->size[i] == cuda__params[k].size[i];
    if (!ok) /* a programming error: never let the GPU read garbage */
        return sw__errorf(SW_ERR_INVALID_ARG, "cuda:%d: internal error: %s "
                          "launched with arguments that do not match its "
                          "parameters", d->index, cuda__names[k]);
    int rc = cuda__kernels_ready(d);
    if (rc != SW_OK)
        return rc;
    void *params[CUDA__MAX_PARAMS];
    memcpy(params, a->ptr, sizeof params);
    swcu_result r = CU(cuLaunchKernel)(d->fn[k], grid, 1, 1, CUDA__THREADS,
                                       1, 1, 0, q->stream, params, NULL);
    if (r != SWCU_CUDA_SUCCESS)
        return cuda__fail(d->index, r, "cuLaunchKernel", cuda__names[k]);
    return SW_OK;
}

/* Blocks for n elements: one per CUDA__THREADS, at most 16 per SM (a
 * grid-stride loop covers the rest). */
static unsigned cuda__grid(const sw__bdev *d, size_t n)
{
    size_t blocks = (n + CUDA__THREADS - 1) / CUDA__THREADS;
    size_t cap = d->sms > 0 ? (size_t)d->sms * 16 : 2048;
    return (unsigned)(blocks < cap ? blocks : cap);
}

/* A pattern of 1, 2, 4, 8 or 16 bytes at any alignment, through the
 * byte kernel. */
static int cuda__fill_bytes(sw__bqueue *q, swcu_deviceptr p, size_t n,
                            const unsigned char *pattern, size_t psize)
{
    unsigned char pat[16] = {0};
    memcpy(pat, pattern, psize);
    unsigned long long lo = 0, hi = 0, count = n;
    memcpy(&lo, pat, 8);
    memcpy(&hi, pat + 8, 8);
    unsigned int ps = (unsigned int)psize;
    cuda__args a = {.n = 0};
    CUDA__ARG(a, p);
    CUDA__ARG(a, count);
    CUDA__ARG(a, lo);
    CUDA__ARG(a, hi);
    CUDA__ARG(a, ps);
    return cuda__run(q, CUDA__K_FILL_BYTES, cuda__grid(q->dev, n), &a);
}

/* The driver's memsets, where the pattern and the alignment allow one:
 * returns 1 with *rc set when it was one, 0 when a kernel or copies must
 * do it.  The context is current. */
static int cuda__fill_memset(sw__bqueue *q, swcu_deviceptr p, size_t n,
                             const unsigned char *pat, size_t psize, int *rc)
{
    int uniform = 1;
    for (size_t i = 1; i < psize; i++)
        uniform &= pat[i] == pat[0];
    uint16_t v16 = 0;
    uint32_t w[4] = {0, 0, 0, 0};
    if (psize == 2)
        memcpy(&v16, pat, 2);
    /* Elements are at most 16 bytes (complex128); a longer pattern would
     * not fit w and goes to the kernel. */
    int words = psize >= 4 && psize <= sizeof w;
    if (words)
        memcpy(w, pat, psize);
    int words_equal = words;
    for (size_t i = 1; i < psize / 4; i++)
        words_equal &= w[i] == w[0];
    swcu_result r;
    const char *call;
    if (uniform) {
        call = "cuMemsetD8Async";
        r = CU(cuMemsetD8Async)(p, pat[0], n, q->stream);
    } else if (psize == 2 && p % 2 == 0) {
        call = "cuMemsetD16Async";
        r = CU(cuMemsetD16Async)(p, v16, n / 2, q->stream);
    } else if (words_equal && p % 4 == 0) {
        call = "cuMemsetD32Async";
        r = CU(cuMemsetD32Async)(p, w[0], n / 4, q->stream);
    } else {
        return 0;
    }
    *rc = SW_OK;
    if (r != SWCU_CUDA_SUCCESS) {
        char detail[48];
        snprintf(detail, sizeof detail, "%zu bytes", n);
        *rc = cuda__fail(q->dev->index, r, call, detail);
    }
    return 1;
}

/* Without kernels (no NVRTC): the pattern written once into the first
 * chunk, then doubled by device-to-device copies (log2(n / 4096) of
 * them).  The chunk is pageable stack memory: cuMemcpyHtoDAsync has staged
 * it when it returns.  The context is current. */
static int cuda__fill_copies(sw__bqueue *q, swcu_deviceptr p, size_t n,
                             const unsigned char *pat, size_t psize)
{
    unsigned char chunk[4096] = {0}; /* a multiple of every pattern size */
    size_t k = n < sizeof chunk ? n : sizeof chunk;
    for (size_t i = 0; i < k; i++)
        chunk[i] = pat[i % psize];
    const char *call = "cuMemcpyHtoDAsync_v2";
    swcu_result r = CU(cuMemcpyHtoDAsync_v2)(p, chunk, k, q->stream);
    call = "cuMemcpyDtoDAsync_v2";
    for (size_t done = k; r == SWCU_CUDA_SUCCESS && done < n;) {
        size_t c = done < n - done ? done : n - done;
        r = CU(cuMemcpyDtoDAsync_v2)(p + done, p, c, q->stream);
        done += c;
    }
    if (r != SWCU_CUDA_SUCCESS) {
        char detail[64];
        snprintf(detail, sizeof detail, "a fill of %zu bytes", n);
        return cuda__fail(q->dev->index, r, call, detail);
    }
    return SW_OK;
}

/* A fill no memset does: kernels when there are, else copies (a
 * driver-only machine).  *kernel_rc: the kernels' state (SW_OK when
 * usable).  The context is current. */
static int cuda__fill_without_kernels(sw__bqueue *q, swcu_deviceptr p,
                                      size_t n, const unsigned char *pat,
                                      size_t psize, int *kernel_rc)
{
    *kernel_rc = cuda__kernels_ready(q->dev);
    if (*kernel_rc == SW_ERR_UNSUPPORTED)
        return cuda__fill_copies(q, p, n, pat, psize);
    return *kernel_rc;
}

static int cuda_fill(sw__bqueue *q, uintptr_t dst, size_t dst_off, size_t n,
                     const void *pattern, size_t pattern_size)
{
    sw__bdev *d = q->dev;
    const unsigned char *pat = pattern;
    swcu_deviceptr p = (swcu_deviceptr)(dst + dst_off);
    cuda__scope s;
    int rc = cuda__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    /* The driver's memsets where the alignment allows, kernels otherwise
     * (an 8-byte pattern of two different halves has no memset), copies
     * where there are no kernels. */
    int krc = SW_OK;
    if (!cuda__fill_memset(q, p, n, pat, pattern_size, &rc)) {
        rc = cuda__fill_without_kernels(q, p, n, pat, pattern_size, &krc);
        if (krc == SW_OK) {
            if (pattern_size == 8 && p % 8 == 0) {
                unsigned long long bits = 0, count = n / 8;
                memcpy(&bits, pat, 8);
                cuda__args a = {.n = 0};
                CUDA__ARG(a, p);
                CUDA__ARG(a, bits);
                CUDA__ARG(a, count);
                rc = cuda__run(q, CUDA__K_FILL_U64, cuda__grid(d, n / 8), &a);
            } else {
                rc = cuda__fill_bytes(q, p, n, pat, pattern_size);
            }
        }
    }
    cuda__leave(&s);
    return rc;
}

/* ------------------------------------------------------------------------
 * Operations: kernels
 * ---------------------------------------------------------------------- */

/* Remember the first failure to get kernels, so that later launches
 * report it at once instead of compiling again. */
static int cuda__kernels_fail(sw__bdev *d, int code)
{
    d->kernels_failed = code;
    snprintf(d->kernels_why, sizeof d->kernels_why, "%s", sw_last_error());
    return code;
}

/* Compile (once per architecture per process) and load (once per device)
 * the built-in kernels.  The device lock is held, the context current. */
static int cuda__kernels_ready(sw__bdev *d)
{
    if (d->module != NULL)
        return SW_OK;
    if (d->kernels_failed)
        return sw__errorf(d->kernels_failed, "%s", d->kernels_why);

    char why[512];
    int nvmaj = 0, nvmin = 0;
    if (sw__cuda_nvrtc_load(why, sizeof why, &nvmaj, &nvmin) != SW_OK) {
        sw__errorf(SW_ERR_UNSUPPORTED, "cuda:%d: the built-in kernels need "
                   "NVRTC: %s", d->index, why);
        return cuda__kernels_fail(d, SW_ERR_UNSUPPORTED);
    }
    int archs[64];
    int narch = sw__cuda_nvrtc_archs(archs, 64);
    int devarch = d->cc_major * 10 + d->cc_minor, arch = 0, cubin = 0;
    if (sw__cuda_pick_arch(devarch, archs, narch, &arch, &cubin) != 0) {
        sw__errorf(SW_ERR_UNSUPPORTED, "cuda:%d: NVRTC %d.%d (%s) supports "
                   "no architecture at or below this device's sm_%d",
                   d->index, nvmaj, nvmin, sw__cuda_nvrtc_path(), devarch);
        return cuda__kernels_fail(d, SW_ERR_UNSUPPORTED);
    }

    /* A CUBIN of the device's own architecture needs no JIT, and loads on
     * any driver of the same major version as NVRTC; PTX is the fallback
     * (JIT-compiled, and only by a driver at least as new as NVRTC). */
    int tries[2][2] = {{arch, cubin}, {arch, 0}};
    int ntries = cubin ? 2 : 1;
    char errs[2][300] = {"", ""};
    /* Out of device or host memory: SW_ERR_OOM or SW_ERR_HOST_OOM (the
     * device's, which the core's ladder can help, first), not
     * remembered: the next launch tries again. */
    int transient = 0;
    swcu_module mod = NULL;
    for (int t = 0; t < ntries && mod == NULL; t++) {
        const char *image = NULL;
        int rc = sw__cuda_image_get(tries[t][0], tries[t][1], &image);
        if (rc != SW_OK) {
            if (rc == SW_ERR_HOST_OOM && transient == 0)
                transient = SW_ERR_HOST_OOM;
            snprintf(errs[t], sizeof errs[t], "%s", sw_last_error());
            continue;
        }
        swcu_result r = CU(cuModuleLoadData)(&mod, image);
        if (r == SWCU_CUDA_ERROR_OUT_OF_MEMORY) {
            /* The module's code and data are device memory too. */
            cuda__give_back(d);
            r = CU(cuModuleLoadData)(&mod, image);
        }
        if (cuda__sticky(r)) {
            /* Not the kernels' fault: the context ended with earlier work.
             * Said as it is, and not remembered against the kernels. */
            mod = NULL;
            return cuda__fail(d->index, r, "cuModuleLoadData",
                              "the context has a sticky error from "
                              "earlier work");
        }
        if (r != SWCU_CUDA_SUCCESS) {
            char nbuf[32];
            if (r == SWCU_CUDA_ERROR_OUT_OF_MEMORY)
                transient = SW_ERR_OOM;
            mod = NULL;
            snprintf(errs[t], sizeof errs[t], "%s %s_%d: cuModuleLoadData "
                     "failed: %s", tries[t][1] ? "CUBIN" : "PTX",
                     tries[t][1] ? "sm" : "compute", tries[t][0],
                     cuda__err_name(r, nbuf, sizeof nbuf));
        }
    }
    if (mod == NULL) {
        int v = cuda__g.version;
        sw__errorf(SW_ERR_DEVICE, "cuda:%d: cannot load the built-in kernels "
                   "(NVRTC %d.%d, driver %d.%d): %s%s%s%s", d->index, nvmaj,
                   nvmin, v / 1000, (v % 1000) / 10, errs[0],
                   errs[1][0] ? "; " : "", errs[1],
                   v / 1000 * 10 + (v % 1000) / 10 < nvmaj * 10 + nvmin
                       ? ": the driver is older than NVRTC; set "
                         "SPILLWAY_NVRTC_LIBRARY to an NVRTC no newer than "
                         "the driver"
                       : "");
        if (transient != 0)
            return transient;
        return cuda__kernels_fail(d, SW_ERR_DEVICE);
    }
    for (int k = 0; k < CUDA__K_COUNT; k++) {
        swcu_result r = CU(cuModuleGetFunction)(&d->fn[k], mod,
                                                cuda__names[k]);
        if (r != SWCU_CUDA_SUCCESS) {
            (void)CU(cuModuleUnload)(mod);
            cuda__fail(d->index, r, "cuModuleGetFunction", cuda__names[k]);
            return cuda__kernels_fail(d, SW_ERR_DEVICE);
        }
    }
    d->module = mod;
    return SW_OK;
}

/* Device memory the backend needs for itself (partial sums, scratch), on
 * stream s: from the pool or cuMemAlloc, retried once after
 * cuda__give_back when the device is out of memory.  The fallback's
 * caller accounts d->nlive. */
static swcu_result cuda__scratch_alloc(sw__bdev *d, swcu_stream s,
                                       size_t bytes, swcu_deviceptr *p)
{
    for (int attempt = 0;; attempt++) {
        swcu_result r = d->pool != NULL
                            ? CU(cuMemAllocFromPoolAsync)(p, bytes, d->pool,
                                                          s)
                            : CU(cuMemAlloc_v2)(p, bytes);
        if (r != SWCU_CUDA_ERROR_OUT_OF_MEMORY || attempt == 1)
            return r;
        cuda__give_back(d);
    }
}

/* Scratch of `bytes` on q's stream for an overlapping COPY: from the pool
 * (freed again in stream order) or cuMemAlloc (freed once q's work is
 * done).  The context is current. */
static int cuda__copy_overlapping(sw__bqueue *q, swcu_deviceptr dst,
                                  swcu_deviceptr src, size_t bytes)
{
    sw__bdev *d = q->dev;
    swcu_deviceptr tmp = 0;
    int rc = d->pool != NULL ? SW_OK : cuda__reserve(d);
    if (rc != SW_OK)
        return rc;
    swcu_result r = cuda__scratch_alloc(d, q->stream, bytes, &tmp);
    char detail[80];
    snprintf(detail, sizeof detail, "%zu bytes of scratch for an "
             "overlapping COPY", bytes);
    if (r != SWCU_CUDA_SUCCESS)
        return cuda__fail(d->index, r, d->pool ? "cuMemAllocFromPoolAsync"
                                               : "cuMemAlloc_v2", detail);
    if (d->pool == NULL)
        d->nlive++;
    r = CU(cuMemcpyDtoDAsync_v2)(tmp, src, bytes, q->stream);
    if (r == SWCU_CUDA_SUCCESS)
        r = CU(cuMemcpyDtoDAsync_v2)(dst, tmp, bytes, q->stream);
    rc = r == SWCU_CUDA_SUCCESS
             ? SW_OK
             : cuda__fail(d->index, r, "cuMemcpyDtoDAsync_v2", detail);
    if (d->pool != NULL) {
        (void)CU(cuMemFreeAsync)(tmp, q->stream);
    } else if (cuda__defer_free(d, q, tmp) != SW_OK) {
        /* The stream cannot take the free's event: wait, then free now. */
        (void)cuda__stream_wait_host(q);
        (void)CU(cuMemFree_v2)(tmp);
        d->nlive--;
    }
    return rc;
}

/* The partial sums of q, allocated at its first sum. */
static int cuda__partials(sw__bqueue *q)
{
    if (q->partials != 0)
        return SW_OK;
    sw__bdev *d = q->dev;
    size_t bytes = CUDA__SUM_BLOCKS * CUDA__PARTIAL;
    swcu_result r;
    r = cuda__scratch_alloc(d, q->stream, bytes, &q->partials);
    q->partials_pooled = d->pool != NULL;
    if (r != SWCU_CUDA_SUCCESS) {
        q->partials = 0;
        return cuda__fail(d->index, r, d->pool ? "cuMemAllocFromPoolAsync"
                                               : "cuMemAlloc_v2",
                          "partial sums");
    }
    return SW_OK;
}

static int cuda__launch(sw__bqueue *q, const sw_kernel_args *a, size_t es)
{
    sw__bdev *d = q->dev;
    int rc;
    swcu_deviceptr out = (swcu_deviceptr)(a->out.base + a->out.offset);
    swcu_deviceptr pa = (swcu_deviceptr)(a->a.base + a->a.offset);
    swcu_deviceptr pb = (swcu_deviceptr)(a->b.base + a->b.offset);
    unsigned long long n = a->n;
    unsigned grid = cuda__grid(d, a->n);
    size_t bytes = a->n * es;
    int lg = cuda__log2_size(es);

    /* alpha as one element of the dtype (elements.h's rules). */
    unsigned char alpha[16];
    sw__element_bytes(a->dtype, a->alpha, alpha);
    cuda__args args = {.n = 0};

    switch (a->kernel) {
    case SW_KERNEL_FILL: {
        int krc = SW_OK;
        if (cuda__fill_memset(q, out, bytes, alpha, es, &rc))
            return rc;
        rc = cuda__fill_without_kernels(q, out, bytes, alpha, es, &krc);
        if (krc != SW_OK)
            return rc;
        if (out % es != 0)
            return cuda__fill_bytes(q, out, bytes, alpha, es);
        CUDA__ARG(args, out);
        if (es == 16) { /* (out, lo, hi, n) */
            CUDA__ARGP(args, alpha, 8);
            CUDA__ARGP(args, alpha + 8, 8);
        } else {
            CUDA__ARGP(args, alpha, es);
        }
        CUDA__ARG(args, n);
        return cuda__run(q, cuda__fills[lg], grid, &args);
    }
    case SW_KERNEL_COPY: {
        if (out == pa)
            return SW_OK; /* out[i] = out[i] */
        if (out < pa + bytes && pa < out + bytes)
            return cuda__copy_overlapping(q, out, pa, bytes);
        if (out % es != 0 || pa % es != 0) {
            swcu_result r = CU(cuMemcpyDtoDAsync_v2)(out, pa, bytes,
                                                      q->stream);
            return r == SWCU_CUDA_SUCCESS
                       ? SW_OK
                       : cuda__fail(d->index, r, "cuMemcpyDtoDAsync_v2",
                                    "COPY");
        }
        /* 16-byte elements copy as twice as many u64. */
        unsigned long long cn = es == 16 ? 2 * n : n;
        CUDA__ARG(args, out);
        CUDA__ARG(args, pa);
        CUDA__ARG(args, cn);
        return cuda__run(q, cuda__copies[lg < 3 ? lg : 3],
                         cuda__grid(d, (size_t)cn), &args);
    }
    case SW_KERNEL_ADD:
        CUDA__ARG(args, out);
        CUDA__ARG(args, pa);
        CUDA__ARG(args, pb);
        CUDA__ARG(args, n);
        return cuda__run(q, cuda__dtype[a->dtype].add, grid, &args);
    case SW_KERNEL_SCALE:
    case SW_KERNEL_AXPY: {
        int k = cuda__dtype[a->dtype].add + (int)(a->kernel - SW_KERNEL_ADD);
        float half = 0.0f;
        CUDA__ARG(args, out);
        CUDA__ARG(args, pa);
        if (a->dtype == SW_FLOAT16 || a->dtype == SW_BFLOAT16) {
            /* The element's value, as the float the kernel computes in. */
            uint16_t h;
            memcpy(&h, alpha, 2);
            half = a->dtype == SW_FLOAT16 ? sw__f16_to_f32(h)
                                          : sw__bf16_to_f32(h);
            CUDA__ARG(args, half);
        } else if (a->dtype == SW_COMPLEX64 || a->dtype == SW_COMPLEX128) {
            CUDA__ARGP(args, alpha, es / 2);          /* ar */
            CUDA__ARGP(args, alpha + es / 2, es / 2); /* ai */
        } else {
            CUDA__ARGP(args, alpha, es);
        }
        CUDA__ARG(args, n);
        return cuda__run(q, k, grid, &args);
    }
    case SW_KERNEL_SUM: {
        rc = cuda__partials(q);
        if (rc != SW_OK)
            return rc;
        /* The grid depends on n alone (not on the device), so a sum is
         * the same bits on every run and every GPU. */
        size_t blocks = (a->n + CUDA__THREADS - 1) / CUDA__THREADS;
        unsigned g = (unsigned)(blocks < CUDA__SUM_BLOCKS ? blocks
                                                          : CUDA__SUM_BLOCKS);
        swcu_deviceptr partials = q->partials;
        CUDA__ARG(args, pa);
        CUDA__ARG(args, n);
        CUDA__ARG(args, partials);
        rc = cuda__run(q, cuda__dtype[a->dtype].sum, g, &args);
        if (rc != SW_OK)
            return rc;
        unsigned int count = g;
        cuda__args fin = {.n = 0};
        CUDA__ARG(fin, partials);
        CUDA__ARG(fin, count);
        CUDA__ARG(fin, out);
        return cuda__run(q, cuda__dtype[a->dtype].final, 1, &fin);
    }
    }
    return sw__errorf(SW_ERR_INVALID_ARG, "cuda:%d: unknown kernel %d",
                      d->index, (int)a->kernel);
}

/* The core has checked the kernel, the dtype (one of props.dtypes: every
 * one), the count and the typed operands' alignment: a misaligned access
 * would end the context for good (a sticky
 * CUDA_ERROR_MISALIGNED_ADDRESS), so none reaches the GPU.  FILL and COPY
 * take any alignment (bytes), SUM stores its result wherever out points. */
static int cuda_launch(sw__bqueue *q, const sw_kernel_args *args)
{
    sw__bdev *d = q->dev;
    assert((unsigned)args->dtype < SW_DTYPE_COUNT);
    assert(args->kernel == SW_KERNEL_FILL || args->kernel == SW_KERNEL_COPY ||
           args->kernel == SW_KERNEL_SUM || args->dtype != SW_BOOL);
    size_t es = sw_dtype_size(args->dtype);
    cuda__scope s;
    int rc = cuda__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    rc = cuda__launch(q, args, es);
    cuda__leave(&s);
    return rc;
}

/* ------------------------------------------------------------------------
 * Operations: events and waiting
 * ---------------------------------------------------------------------- */

static int cuda_event_record(sw__bqueue *q, sw__bevent **out)
{
    sw__bdev *d = q->dev;
    cuda__scope s;
    int rc = cuda__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    sw__bevent *e = NULL;
    rc = cuda__event_new(d, 1, &e);
    if (rc == SW_OK) {
        /* On the copy stream, timed too (best effort: untimed, the core
         * times the copies on the host).  The timing event goes first: an
         * event seen complete (ev, queried) then implies that its timing
         * event is, on an in-order stream.  Recorded after ev, it could
         * still be pending when ev was seen done, and its elapsed time
         * came back CUDA_ERROR_NOT_READY (the memory history's device
         * times of such a copy were lost). */
        e->timed = 0;
        if (q == &d->cq && CU(cuEventElapsedTime_v2) != NULL &&
            e->tev == NULL) {
            swcu_event t = NULL;
            if (CU(cuEventCreate)(&t, 0) == SWCU_CUDA_SUCCESS)
                e->tev = t;
        }
        if (q == &d->cq && e->tev != NULL)
            e->timed = CU(cuEventRecord)(e->tev, q->stream) ==
                       SWCU_CUDA_SUCCESS;
        swcu_result r = CU(cuEventRecord)(e->ev, q->stream);
        if (r == SWCU_CUDA_SUCCESS)
            r = CU(cuEventRecord)(e->hev, q->stream);
        if (r != SWCU_CUDA_SUCCESS) {
            cuda__event_put(e);
            rc = cuda__fail(d->index, r, "cuEventRecord", NULL);
        } else {
            *out = e;
        }
    }
    cuda__leave(&s);
    return rc;
}

static int cuda_event_query(sw__bevent *e, int *done)
{
    sw__bdev *d = e->dev;
    cuda__scope s;
    int rc = cuda__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    swcu_result r = CU(cuEventQuery)(e->ev);
    cuda__leave(&s);
    if (r == SWCU_CUDA_SUCCESS) {
        *done = 1;
        return SW_OK;
    }
    if (r == SWCU_CUDA_ERROR_NOT_READY) {
        *done = 0;
        return SW_OK;
    }
    /* An error of the work before the event (sticky in the context). */
    return cuda__fail(d->index, r, "cuEventQuery", NULL);
}

static int cuda_event_wait(sw__bevent *e)
{
    sw__bdev *d = e->dev;
    cuda__scope s;
    int rc = cuda__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    /* The blocking-sync twin: the thread sleeps until the work is done. */
    swcu_result r = CU(cuEventSynchronize)(e->hev);
    cuda__leave(&s);
    return r == SWCU_CUDA_SUCCESS
               ? SW_OK
               : cuda__fail(d->index, r, "cuEventSynchronize", NULL);
}

/* Between two records of the copy stream (in order, so what ran between
 * them ran in that time; resolution ~0.5 us).  Never blocks: both are
 * complete when the core asks. */
static int cuda_event_elapsed(sw__bevent *from, sw__bevent *to,
                              double *seconds)
{
    sw__bdev *d = to->dev;
    if (!from->timed || !to->timed)
        return sw__errorf(SW_ERR_UNSUPPORTED, "cuda:%d: elapsed time only "
                          "between the copy stream's events", d->index);
    cuda__scope s;
    int rc = cuda__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    float ms = 0;
    swcu_result r = CU(cuEventElapsedTime_v2)(&ms, from->tev, to->tev);
    cuda__leave(&s);
    if (r != SWCU_CUDA_SUCCESS) /* not complete, or a sticky error */
        return cuda__fail(d->index, r, "cuEventElapsedTime", NULL);
    *seconds = ms > 0 ? (double)ms * 1e-3 : 0;
    return SW_OK;
}

static void cuda_event_release(sw__bevent *e)
{
    if (e != NULL)
        cuda__event_put(e);
}

static int cuda_synchronize(sw__bqueue *q)
{
    sw__bdev *d = q->dev;
    cuda__scope s;
    int rc = cuda__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    /* Record-then-wait on a blocking-sync event made with the queue:
     * cuStreamSynchronize would spin a core, and this must not allocate. */
    swcu_result r = cuda__stream_wait_host(q);
    cuda__leave(&s);
    return r == SWCU_CUDA_SUCCESS
               ? SW_OK
               : cuda__fail(d->index, r, "cuEventSynchronize", "synchronize");
}

/* A device-side wait: never blocks the caller.  The wait is on the
 * event's state now; recording it again later (it is recycled once
 * released) does not change what q waits for. */
static int cuda_wait_event(sw__bqueue *q, sw__bevent *e)
{
    sw__bdev *d = q->dev;
    cuda__scope s;
    int rc = cuda__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    swcu_result r = CU(cuStreamWaitEvent)(q->stream, e->ev, 0);
    cuda__leave(&s);
    return r == SWCU_CUDA_SUCCESS
               ? SW_OK
               : cuda__fail(d->index, r, "cuStreamWaitEvent", NULL);
}

/* ------------------------------------------------------------------------
 * Operations: version 3 (the copy queue, idleness, pinned host memory)
 * ---------------------------------------------------------------------- */

static sw__bqueue *cuda_copy_queue(sw__bdev *d)
{
    return d->cq.stream != NULL ? &d->cq : NULL;
}

/* Never blocks: cuStreamQuery says whether everything queued is done. */
static int cuda_queue_idle(sw__bqueue *q)
{
    cuda__scope s;
    if (cuda__enter(q->dev, &s) != SW_OK)
        return 0;
    swcu_result r = CU(cuStreamQuery)(q->stream);
    cuda__leave(&s);
    return r == SWCU_CUDA_SUCCESS;
}

/* Page-locked, portable (usable with every context) host memory for the
 * staging pool; the core falls back to its own allocator on any error. */
static int cuda_host_alloc(sw__bdev *d, size_t size, void **out)
{
    if (!d->pinned)
        return sw__errorf(SW_ERR_UNSUPPORTED, "cuda:%d: pinned staging is "
                          "off (SPILLWAY_CUDA_PINNED=0, or the driver lacks "
                          "cuMemHostAlloc)", d->index);
    cuda__scope s;
    int rc = cuda__enter(d, &s);
    if (rc != SW_OK)
        return rc;
    void *p = NULL;
    swcu_result r = CU(cuMemHostAlloc)(&p, size, SWCU_CU_MEMHOSTALLOC_PORTABLE);
    cuda__leave(&s);
    if (r != SWCU_CUDA_SUCCESS) {
        char detail[48];
        snprintf(detail, sizeof detail, "%zu bytes", size);
        rc = cuda__fail(d->index, r, "cuMemHostAlloc", detail);
        return rc == SW_ERR_OOM ? SW_ERR_HOST_OOM : rc;
    }
    *out = p;
    return SW_OK;
}

static void cuda_host_free(sw__bdev *d, void *p, size_t size)
{
    (void)size;
    cuda__scope s;
    if (p == NULL || cuda__enter(d, &s) != SW_OK)
        return; /* a forked child: the parent's pinned memory is not ours */
    (void)CU(cuMemFreeHost)(p);
    cuda__leave(&s);
}

/* ------------------------------------------------------------------------
 * Foreign streams (the allocator plug-ins: python/spillway/allocator.c)
 * ---------------------------------------------------------------------- */

int sw__cuda_stream_join(int index, void *foreign, int foreign_waits)
{
    if (index < 0 || index >= CUDA__MAX_DEVICES)
        return sw__errorf(SW_ERR_INVALID_ARG, "cuda:%d: no such device",
                          index);
    pthread_mutex_lock(&cuda__open_mu);
    sw__bdev *d = cuda__open[index];
    if (d != NULL)
        cuda__ref(d); /* alive past the registry's lock */
    pthread_mutex_unlock(&cuda__open_mu);
    if (d == NULL)
        return sw__errorf(SW_ERR_NO_DEVICE, "cuda:%d: not open", index);
    cuda__scope s;
    int rc = cuda__enter(d, &s);
    if (rc == SW_OK) {
        swcu_stream ours = d->dq.stream, theirs = (swcu_stream)foreign;
        swcu_stream from = foreign_waits ? ours : theirs;
        swcu_stream to = foreign_waits ? theirs : ours;
        sw__bevent *e = NULL;
        rc = cuda__event_new(d, 0, &e);
        if (rc == SW_OK) {
            swcu_result r = CU(cuEventRecord)(e->ev, from);
            const char *call = "cuEventRecord";
            if (r == SWCU_CUDA_SUCCESS) {
                call = "cuStreamWaitEvent";
                r = CU(cuStreamWaitEvent)(to, e->ev, 0);
            }
            if (r != SWCU_CUDA_SUCCESS)
                rc = cuda__fail(index, r, call, "a foreign stream");
            cuda__event_put(e); /* the wait keeps its captured state */
        }
        cuda__leave(&s);
    }
    cuda__unref(d);
    return rc;
}

/* ------------------------------------------------------------------------
 * The ops table
 * ---------------------------------------------------------------------- */

const sw__backend_ops sw__cuda_backend = {
    .version = SW__BACKEND_VERSION,
    .name = "cuda",
    .device_count = cuda_device_count,
    .open = cuda_open,
    .close = cuda_close,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .mem_info = cuda_mem_info,
    .default_queue = cuda_default_queue,
    .queue_create = cuda_queue_create,
    .queue_destroy = cuda_queue_destroy,
    .write = cuda_write,
    .read = cuda_read,
    .copy = cuda_copy,
    .fill = cuda_fill,
    .launch = cuda_launch,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_wait = cuda_event_wait,
    .event_release = cuda_event_release,
    .event_elapsed = cuda_event_elapsed,
    .queue_native = cuda_queue_native,
    .queue_wrap = cuda_queue_wrap,
    .native_context = cuda_native_context,
    .synchronize = cuda_synchronize,
    .wait_event = cuda_wait_event,
    .copy_queue = cuda_copy_queue,
    .queue_idle = cuda_queue_idle,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
};
