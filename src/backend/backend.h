/*
 * backend.h -- the backend contract, as the library's own backends see it.
 *
 * The contract itself is public and versioned: include/spillway/backend.h
 * (installed), which states the table, its rules and what a backend may
 * call.  The library's backends (sim.c, opencl.c, cuda.c, hip.c, ze.c,
 * host.c) are written against it under the internal names below, which
 * are the public ones: sw__bdev is sw_bdev, and so on.  They call the
 * core's allocator and message functions directly (sw__malloc,
 * sw__errorf), which the public sw_backend_* functions wrap.  The core
 * reaches a backend solely through the thin wrappers in src/core/bops.c.
 */
#ifndef SW_BACKEND_H
#define SW_BACKEND_H

#include "spillway.h"
#include "spillway/backend.h"

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* The internal names of the public types (struct tags included: a
 * backend's `struct sw__bqueue { ... }` defines struct sw_bqueue). */
#define sw__bdev sw_bdev
#define sw__bqueue sw_bqueue
#define sw__bevent sw_bevent
#define sw__device_props sw_device_props
#define sw__backend_ops sw_backend_ops
#define SW__BACKEND_VERSION SW_BACKEND_VERSION

/* The backends this build has (NULL-free list in src/core/device.c). */
extern const sw__backend_ops sw__sim_backend;
#ifdef SW_HAVE_OPENCL
extern const sw__backend_ops sw__opencl_backend; /* opencl.c */
#endif
extern const sw__backend_ops sw__cuda_backend; /* cuda.c: always built */
extern const sw__backend_ops sw__hip_backend;  /* hip.c: always built */
extern const sw__backend_ops sw__ze_backend;   /* ze.c: always built */
extern const sw__backend_ops sw__host_backend; /* host.c: always built */

/* Host memory for the library's own use, core and backends alike: every
 * host allocation goes through these (never malloc directly), the one place
 * where SW_FAULT_HOST_ALLOC fails the nth one.  Semantics as the C
 * library's; sw__aligned_alloc as posix_memalign (0 or ENOMEM/EINVAL). */
void *sw__malloc(size_t n);
void *sw__calloc(size_t count, size_t size);
void *sw__realloc(void *p, size_t n);
int sw__aligned_alloc(void **out, size_t align, size_t n);
void sw__free(void *p);
/* pthread_create(t, NULL, fn, arg) for the library's own threads, failed
 * (EAGAIN) by the same fault. */
int sw__thread_create(pthread_t *t, void *(*fn)(void *), void *arg);

/* Set the calling thread's detail message; returns code, so that
 * `return sw__errorf(SW_ERR_OOM, "...", ...);` reads naturally. */
int sw__errorf(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Copy n bytes at addr into dst if they can be read, asked of the kernel
 * (never a load that could fault: memprobe.c): 1 copied, 0 unreadable, -1
 * cannot tell (the system allows neither way). */
int sw__mem_probe(uintptr_t addr, void *dst, size_t n);

#endif /* SW_BACKEND_H */
