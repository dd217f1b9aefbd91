/*
 * cuda.cu -- spillway's built-in kernels for the CUDA backend (cuda.c).
 *
 * One CUDA C program, embedded in the library at build time
 * (scripts/embed.py) and compiled by NVRTC at first use for the device's
 * architecture (cuda_nvrtc.c), with --fmad=false: a*x + y rounds twice, as
 * on the host.  It also compiles on its own: nvcc --ptx --fmad=false
 * -arch=compute_80 cuda.cu (the build does so where it finds nvcc).
 *
 * Kernels are extern "C" so that their entry names are plain; cuda.c's
 * tables list those names and each kernel's parameter sizes, and the
 * cuda_nvrtc_ptx test checks the tables against the compiled PTX.  Integer
 * dtypes use unsigned types of their width (wrapping arithmetic, the same
 * bits).  Every kernel runs with SW_THREADS threads per block, which must
 * equal CUDA__THREADS in cuda.c: the sums' order depends on it.
 */
typedef unsigned int sw_u32;
typedef unsigned long long sw_u64;
#define SW_THREADS 256

/* Grid-stride loop: any grid covers any n. */
#define SW_LOOP(i, n)                                              \
    for (sw_u64 i = (sw_u64)blockIdx.x * blockDim.x + threadIdx.x;  \
         i < (n); i += (sw_u64)gridDim.x * blockDim.x)

/* No __restrict__: out may be an input (in-place operations). */
#define SW_ELEMENTWISE(S, T)                                       \
extern "C" __global__ void sw_fill_##S(T *out, T alpha, sw_u64 n) \
{ SW_LOOP(i, n) out[i] = alpha; }                                  \
extern "C" __global__ void sw_copy_##S(T *out, const T *a,        \
                                       sw_u64 n)                   \
{ SW_LOOP(i, n) out[i] = a[i]; }                                   \
extern "C" __global__ void sw_add_##S(T *out, const T *a,         \
                                      const T *b, sw_u64 n)        \
{ SW_LOOP(i, n) out[i] = a[i] + b[i]; }                            \
extern "C" __global__ void sw_scale_##S(T *out, const T *a,       \
                                        T alpha, sw_u64 n)         \
{ SW_LOOP(i, n) out[i] = alpha * a[i]; }                           \
extern "C" __global__ void sw_axpy_##S(T *out, const T *a,        \
                                       T alpha, sw_u64 n)          \
{ SW_LOOP(i, n) out[i] = alpha * a[i] + out[i]; }

SW_ELEMENTWISE(f32, float)
SW_ELEMENTWISE(f64, double)
SW_ELEMENTWISE(i32, sw_u32)
SW_ELEMENTWISE(i64, sw_u64)

/* A block's sum in a fixed order: a tree over SW_THREADS slots. */
template <typename A>
__device__ A sw_block_sum(A v)
{
    __shared__ A sh[SW_THREADS];
    unsigned t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (unsigned s = SW_THREADS / 2; s > 0; s >>= 1) {
        if (t < s)
            sh[t] = sh[t] + sh[t + s];
        __syncthreads();
    }
    return sh[0];
}

/* Pass 1: block b's partial sum to partials[b].  Thread t of block b
 * adds elements t + b*SW_THREADS + k*gridDim.x*SW_THREADS in order.
 * float32 accumulates in float64, int32 sign-extends into a wrapping
 * 64-bit sum. */
#define SW_SUM(S, T, A, CONV)                                      \
extern "C" __global__ void sw_sum_##S(const T *a, sw_u64 n,       \
                                      A *partials)                 \
{                                                                  \
    A acc = 0;                                                     \
    SW_LOOP(i, n) acc += CONV(a[i]);                               \
    A total = sw_block_sum<A>(acc);                                \
    if (threadIdx.x == 0)                                          \
        partials[blockIdx.x] = total;                              \
}

SW_SUM(f32, float, double, (double))
SW_SUM(f64, double, double, )
SW_SUM(i32, int, sw_u64, (sw_u64)(long long))
SW_SUM(i64, sw_u64, sw_u64, )

/* The 8-byte result, wherever out points (a raw launch may give an
 * address that is not 8-byte aligned). */
__device__ void sw_store8(unsigned char *out, sw_u64 bits)
{
    if (((sw_u64)out & 7) == 0) {
        *(sw_u64 *)out = bits;
    } else {
        for (int k = 0; k < 8; k++)
            out[k] = (unsigned char)(bits >> (8 * k));
    }
}

/* Pass 2, one block: the sum of count <= SW_THREADS partials. */
extern "C" __global__ void sw_sum_final_f64(const double *partials,
                                            sw_u32 count,
                                            unsigned char *out)
{
    double v = threadIdx.x < count ? partials[threadIdx.x] : 0.0;
    double total = sw_block_sum<double>(v);
    if (threadIdx.x == 0)
        sw_store8(out, (sw_u64)__double_as_longlong(total));
}

extern "C" __global__ void sw_sum_final_i64(const sw_u64 *partials,
                                            sw_u32 count,
                                            unsigned char *out)
{
    sw_u64 v = threadIdx.x < count ? partials[threadIdx.x] : 0ull;
    sw_u64 total = sw_block_sum<sw_u64>(v);
    if (threadIdx.x == 0)
        sw_store8(out, total);
}

/* A 1-, 2-, 4- or 8-byte pattern at any alignment: byte i of the
 * range is byte (i mod psize) of the pattern (little-endian). */
extern "C" __global__ void sw_fill_bytes(unsigned char *dst, sw_u64 n,
                                         sw_u64 pattern, sw_u32 psize)
{
    SW_LOOP(i, n) dst[i] = (unsigned char)(pattern >> (8 * (i % psize)));
}
