/*
 * ops.c -- the built-in kernels (checked and launched) and the
 * buffer-level operations built on them: fill, add, scale, axpy, sum.
 * Their arguments are pinned by launch.c's sw__pin_all_locked.
 */
#include "core/internal.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Kernels
 * ---------------------------------------------------------------------- */

/* bool holds truth values: it can be filled, copied and counted, but there
 * is no arithmetic on it (NumPy's bool + bool is a logical or). */
static int check_kernel_dtype(sw_kernel k, sw_dtype d)
{
    if (d == SW_BOOL && k != SW_KERNEL_FILL && k != SW_KERNEL_COPY &&
        k != SW_KERNEL_SUM)
        return sw__errorf(SW_ERR_DTYPE, "kernel %s is not defined for bool "
                          "(bool arrays support fill, copy and sum)",
                          sw_kernel_name(k));
    return SW_OK;
}

/* Everything about a launch that does not depend on the device: the
 * kernel, the dtype, the element count. */
static int check_kernel(const sw_kernel_args *a)
{
    if (a == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "args is NULL");
    const char *kname = sw_kernel_name(a->kernel);
    if (kname == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "unknown kernel %d",
                          (int)a->kernel);
    size_t es = sw_dtype_size(a->dtype);
    if (es == 0)
        return sw__errorf(SW_ERR_DTYPE, "unknown dtype %d", (int)a->dtype);
    const char *dname = sw_dtype_name(a->dtype);
    int rc = check_kernel_dtype(a->kernel, a->dtype);
    if (rc != SW_OK)
        return rc;
    if (a->n > SIZE_MAX / es)
        return sw__errorf(SW_ERR_INVALID_ARG, "kernel %s %s with n=%zu "
                          "elements: the byte count overflows", kname, dname,
                          a->n);
    return SW_OK;
}

/* The alignment of typed operands: a GPU faults on a misaligned typed
 * access (on CUDA for the life of the context), so no backend is ever
 * asked.  FILL and COPY work on bytes and SUM stores its result
 * byte-wise, so those operands may sit anywhere.  base + offset is an
 * address on every backend but those whose bases are handles (OpenCL's
 * cl_mem), where the offset alone decides. */
static int check_alignment(const sw_device *dev, const sw_kernel_args *a)
{
    size_t es = sw_dtype_size(a->dtype);
    const sw_devmem *typed[3] = {NULL, NULL, NULL};
    static const char *const names[3] = {"out", "a", "b"};
    switch (a->kernel) {
    case SW_KERNEL_ADD:
        typed[2] = &a->b;
        /* fall through */
    case SW_KERNEL_SCALE:
    case SW_KERNEL_AXPY:
        typed[0] = &a->out;
        /* fall through */
    case SW_KERNEL_SUM:
        typed[1] = &a->a;
        break;
    default:
        break;
    }
    for (int i = 0; i < 3 && a->n > 0; i++) {
        if (typed[i] == NULL)
            continue;
        uintptr_t at = dev->props.opaque_base
                           ? typed[i]->offset
                           : typed[i]->base + typed[i]->offset;
        if (at % es != 0)
            return sw__errorf(SW_ERR_INVALID_ARG,
                              "kernel %s %s: operand %s (offset %zu) is not "
                              "aligned to its %zu-byte elements",
                              sw_kernel_name(a->kernel),
                              sw_dtype_name(a->dtype), names[i],
                              typed[i]->offset, es);
    }
    return SW_OK;
}

/* Bytes a SUM writes: a complex128 for complex types, else 8. */
static size_t sum_size(sw_dtype d)
{
    return d == SW_COMPLEX64 || d == SW_COMPLEX128 ? 16 : 8;
}

static int launch_kernel(sw_device *dev, sw__queue *q,
                         const sw_kernel_args *args)
{
    if (!sw__dtype_ok(dev, args->dtype))
        return sw__dtype_unsupported(dev, args->dtype);
    int rc = check_alignment(dev, args);
    if (rc != SW_OK)
        return rc;
    sw__bqueue *bq = q ? q->bq : dev->q;
    if (args->n > 0)
        return sw__b_launch(dev, bq, args);
    if (args->kernel == SW_KERNEL_SUM) {
        /* The sum of nothing is 0; backends only see n > 0. */
        static const uint64_t zero = 0;
        return sw__b_fill_q(dev, bq, args->out.base, args->out.offset,
                            sum_size(args->dtype), &zero, 8);
    }
    return SW_OK;
}

SW_API int sw_launch_kernel(sw_device *dev, const sw_kernel_args *args)
{
    int rc = check_kernel(args);
    if (rc != SW_OK)
        return rc;
    rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    rc = launch_kernel(dev, NULL, args);
    sw__unlock(dev);
    return rc;
}

SW_API int sw_launch_kernel_q(sw_queue *qh, const sw_kernel_args *args)
{
    int rc = check_kernel(args);
    if (rc != SW_OK)
        return rc;
    sw__queue *q;
    rc = sw__queue_enter(qh, &q);
    if (rc != SW_OK)
        return rc;
    rc = launch_kernel(q->dev, q, args);
    sw__unlock(q->dev);
    return rc;
}

/* ------------------------------------------------------------------------
 * Buffer-level operations
 * ---------------------------------------------------------------------- */

/* Checks that every operand holds n elements of dtype and, where the
 * kernel reads or writes it as typed elements (bit i of typed), that it is
 * aligned to them (as check_kernel does for raw launches).  A spilled
 * base comes back at an allocation's start, which every backend aligns to
 * at least SW_ALLOC_GRANULARITY, so its offset decides. */
static int check_operands_locked(sw_device *dev, sw_kernel k,
                                 sw_buffer *const *h, sw__buf **bufs,
                                 size_t nbufs, sw_dtype dtype, size_t n,
                                 unsigned typed)
{
    size_t es = sw_dtype_size(dtype);
    if (es == 0)
        return sw__errorf(SW_ERR_DTYPE, "unknown dtype %d", (int)dtype);
    int rc0 = check_kernel_dtype(k, dtype);
    if (rc0 != SW_OK)
        return rc0;
    if (!sw__dtype_ok(dev, dtype))
        return sw__dtype_unsupported(dev, dtype);
    if (n > SIZE_MAX / es)
        return sw__errorf(SW_ERR_TOO_LARGE, "%zu elements of %zu bytes "
                          "overflow", n, es);
    static const char *names[] = {"operand 0", "operand 1", "operand 2"};
    for (size_t i = 0; i < nbufs; i++) {
        int rc = sw__buffer_check_locked(dev, h[i], names[i], &bufs[i]);
        if (rc != SW_OK)
            return rc;
        if (bufs[i]->size < n * es)
            return sw__errorf(SW_ERR_OUT_OF_RANGE, "%s holds %zu bytes, "
                              "fewer than %zu elements of %zu bytes",
                              names[i], bufs[i]->size, n, es);
        if ((typed >> i & 1u) && n > 0 &&
            ((dev->props.opaque_base ? 0 : bufs[i]->base->mem) +
             bufs[i]->offset) % es != 0)
            return sw__errorf(SW_ERR_INVALID_ARG, "%s (offset %zu) is not "
                              "aligned to its %zu-byte %s elements",
                              names[i], bufs[i]->offset, es,
                              sw_dtype_name(dtype));
    }
    return SW_OK;
}

/* One lock acquisition: check, pin, queue, unpin.  Unpinning right after
 * queueing is safe: frees and reuse are stream-ordered after the kernel. */
static int run_op(const sw_queue *qh, sw_kernel k, sw_buffer *out,
                  sw_buffer *a, sw_buffer *b, sw_scalar alpha, sw_dtype dtype,
                  size_t n)
{
    sw__buf *first;
    sw__queue *q = NULL;
    sw_device *dev;
    int rc = sw__buffer_enter(out, &first, &dev);
    if (rc != SW_OK)
        return rc;
    if (qh != NULL && (rc = sw__queue_check_locked(dev, qh, &q)) != SW_OK)
        goto out;
    sw_buffer *h[3] = {out, a, b};
    sw__buf *bufs[3] = {first, NULL, NULL};
    size_t nbufs = b ? 3 : a ? 2 : 1;
    rc = check_operands_locked(dev, k, h, bufs, nbufs, dtype, n,
                               k == SW_KERNEL_FILL ? 0u : 7u);
    if (rc != SW_OK || n == 0)
        goto out;
    /* The output is written, the operands only read (a clean copy among
     * them stays clean); an output that is also an operand is written. */
    static const unsigned char access[3] = {SW_ACCESS_WRITE, SW_ACCESS_READ,
                                            SW_ACCESS_READ};
    sw_devmem p[3];
    rc = sw__pin_all_access_locked(dev, q, bufs, access, nbufs, p);
    if (rc != SW_OK)
        goto out;
    sw_kernel_args args;
    memset(&args, 0, sizeof args);
    args.kernel = k;
    args.dtype = dtype;
    args.n = n;
    args.out = p[0];
    if (nbufs > 1)
        args.a = p[1];
    if (nbufs > 2)
        args.b = p[2];
    args.alpha = alpha;
    rc = sw__b_launch(dev, q ? q->bq : dev->q, &args);
    /* Used at one time: a clean operand goes before the output (lru.c). */
    sw__unpin_all_locked(dev, bufs, nbufs);
out:
    sw__unlock(dev);
    return rc;
}

SW_API int sw_op_fill(sw_buffer *out, sw_dtype dtype, size_t n,
                      sw_scalar value)
{
    return run_op(NULL, SW_KERNEL_FILL, out, NULL, NULL, value, dtype, n);
}

SW_API int sw_op_add(sw_buffer *out, sw_buffer *a, sw_buffer *b,
                     sw_dtype dtype, size_t n)
{
    if (a == NULL || b == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "operand is NULL");
    sw_scalar zero = {.i = 0};
    return run_op(NULL, SW_KERNEL_ADD, out, a, b, zero, dtype, n);
}

SW_API int sw_op_scale(sw_buffer *out, sw_buffer *a, sw_scalar alpha,
                       sw_dtype dtype, size_t n)
{
    if (a == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "operand is NULL");
    return run_op(NULL, SW_KERNEL_SCALE, out, a, NULL, alpha, dtype, n);
}

SW_API int sw_op_axpy(sw_scalar alpha, sw_buffer *x, sw_buffer *y,
                      sw_dtype dtype, size_t n)
{
    if (x == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "operand is NULL");
    return run_op(NULL, SW_KERNEL_AXPY, y, x, NULL, alpha, dtype, n);
}

/* The same on a queue.  A NULL queue is an error here (not the default),
 * so that a lost handle is not silently taken for the default queue. */
static int need_queue(const sw_queue *q)
{
    return q == NULL ? sw__errorf(SW_ERR_INVALID_ARG, "queue is NULL")
                     : SW_OK;
}

SW_API int sw_op_fill_q(sw_queue *q, sw_buffer *out, sw_dtype dtype, size_t n,
                        sw_scalar value)
{
    int rc = need_queue(q);
    return rc ? rc : run_op(q, SW_KERNEL_FILL, out, NULL, NULL, value, dtype,
                            n);
}

SW_API int sw_op_add_q(sw_queue *q, sw_buffer *out, sw_buffer *a,
                       sw_buffer *b, sw_dtype dtype, size_t n)
{
    if (a == NULL || b == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "operand is NULL");
    sw_scalar zero = {.i = 0};
    int rc = need_queue(q);
    return rc ? rc : run_op(q, SW_KERNEL_ADD, out, a, b, zero, dtype, n);
}

SW_API int sw_op_scale_q(sw_queue *q, sw_buffer *out, sw_buffer *a,
                         sw_scalar alpha, sw_dtype dtype, size_t n)
{
    if (a == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "operand is NULL");
    int rc = need_queue(q);
    return rc ? rc : run_op(q, SW_KERNEL_SCALE, out, a, NULL, alpha, dtype,
                            n);
}

SW_API int sw_op_axpy_q(sw_queue *q, sw_scalar alpha, sw_buffer *x,
                        sw_buffer *y, sw_dtype dtype, size_t n)
{
    if (x == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "operand is NULL");
    int rc = need_queue(q);
    return rc ? rc : run_op(q, SW_KERNEL_AXPY, y, x, NULL, alpha, dtype, n);
}

/* A slot of the device's scratch block, or -1 when all are busy.  The
 * block (SW_ALLOC_GRANULARITY bytes, the library's own: device_free shows
 * it, in_use does not) is allocated at the first sum; if that fails, sums
 * use a temporary buffer instead. */
static int scratch_take_locked(sw_device *dev)
{
    if (dev->scratch == 0 &&
        sw__b_alloc(dev, SW_ALLOC_GRANULARITY, &dev->scratch) != SW_OK)
        dev->scratch = 0;
    if (dev->scratch == 0)
        return -1;
    for (int i = 0; i < (int)SW__SCRATCH_SLOTS; i++) {
        if (!(dev->scratch_used & (UINT64_C(1) << i))) {
            dev->scratch_used |= UINT64_C(1) << i;
            return i;
        }
    }
    return -1;
}

SW_API int sw_op_sum(sw_buffer *a, sw_dtype dtype, size_t n, sw_scalar *out)
{
    if (out == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "out is NULL");
    memset(out, 0, sizeof *out);
    sw_buffer *tmp = NULL; /* before any goto: `out:` frees it */
    sw__buf *bufs[2] = {NULL, NULL}; /* the operand, and tmp if any */
    size_t nbufs = 1;
    sw_device *dev;
    int rc = sw__buffer_enter(a, &bufs[0], &dev);
    if (rc != SW_OK)
        return rc;
    rc = check_operands_locked(dev, SW_KERNEL_SUM, &a, bufs, 1, dtype, n,
                               1u);
    if (rc != SW_OK || n == 0)
        goto out; /* the sum of nothing is 0 */
    int slot = scratch_take_locked(dev);
    if (slot < 0) {
        /* Every scratch slot is busy (many concurrent sums): use a
         * temporary buffer, which is accounted like any other.  The lock
         * was released meanwhile, so the operand is checked again.  It
         * stays pinned meanwhile: making room for the temporary must not
         * spill it (if it then could not come back, the failed sum would
         * have moved it). */
        sw__buf *opbase = bufs[0]->base;
        opbase->pins++;
        /* What the launch below would refuse (the operand and the
         * temporary cannot fit together, or cannot come back together),
         * refused before the temporary's allocation makes room by
         * spilling others: "nothing was moved" must be true. */
        rc = sw__check_fit_locked(dev, bufs, 1, SW_ALLOC_GRANULARITY);
        if (rc == SW_OK)
            rc = sw__check_room_locked(dev, bufs, 1, SW_ALLOC_GRANULARITY);
        if (rc != SW_OK) {
            sw__unpin_locked(dev, opbase);
            goto release;
        }
        sw__unlock(dev);
        rc = sw_buffer_alloc(dev, SW__SCRATCH_SLOT, "sum result", &tmp);
        sw__lock(dev);
        sw__unpin_locked(dev, opbase);
        if (rc != SW_OK)
            goto out;
        rc = check_operands_locked(dev, SW_KERNEL_SUM, &a, bufs, 1, dtype, n,
                               1u);
        if (rc != SW_OK)
            goto out;
        bufs[1] = sw__buf_of(tmp); /* ours, and we hold its lock */
        nbufs = 2;
    }
    static const unsigned char access[2] = {SW_ACCESS_READ, SW_ACCESS_WRITE};
    sw_devmem p[2];
    rc = sw__pin_all_access_locked(dev, NULL, bufs, access, nbufs, p);
    if (rc != SW_OK)
        goto release;
    sw_devmem dst;
    if (slot >= 0) {
        dst.base = dev->scratch;
        dst.offset = (size_t)slot * SW__SCRATCH_SLOT;
    } else {
        dst = p[1];
    }
    sw_kernel_args args;
    memset(&args, 0, sizeof args);
    args.kernel = SW_KERNEL_SUM;
    args.dtype = dtype;
    args.n = n;
    args.a = p[0];
    args.out = dst;
    sw_scalar result;
    memset(&result, 0, sizeof result);
    rc = sw__b_launch(dev, dev->q, &args);
    if (rc == SW_OK)
        rc = sw__b_read(dev, &result, dst.base, dst.offset, sum_size(dtype));
    if (rc == SW_OK)
        rc = sw__wait_idle_locked(dev);
    sw__unpin_all_locked(dev, bufs, nbufs);
    if (rc == SW_OK)
        *out = result;
release:
    if (slot >= 0)
        dev->scratch_used &= ~(UINT64_C(1) << slot);
out:
    sw__unlock(dev);
    if (tmp != NULL)
        sw_buffer_free(tmp);
    return rc;
}
