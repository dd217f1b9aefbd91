/*
 * hostpool.h -- the host staging pool's internal interface (hostpool.c):
 * included by internal.h, after the structures it uses.
 */
#ifndef SW_CORE_HOSTPOOL_H
#define SW_CORE_HOSTPOOL_H

/* Host memory for a host copy of size bytes, from the pool when it has a
 * block of about that size: *got is the block's size, *pinned how it was
 * allocated (both go back with it).  NULL without host memory. */
void *sw__host_get_locked(sw_device *dev, size_t size, size_t *got,
                          bool *pinned);
/* The pool's block for size bytes, taken out of it, or NULL when none
 * fits (nothing allocated).  Taken before making room under a host
 * budget, the block cannot be trimmed meanwhile, and the room then counts
 * it as what it becomes -- a host copy -- not as idle: reused memory
 * instead of fresh (a page fault per page). */
void *sw__host_take_fit_locked(sw_device *dev, size_t size, size_t *got,
                               bool *pinned);
void sw__host_put_locked(sw_device *dev, void *p, size_t size, bool pinned);
void sw__host_pool_trim_locked(sw_device *dev, uint64_t limit);
void sw__host_pool_drain_locked(sw_device *dev);

#endif
