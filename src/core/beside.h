/*
 * beside.h -- a launch's result, allocated beside its operands (internal;
 * the Python module's operations, which allocate their result and then
 * launch on it).
 *
 * Allocated first, the result's room may be made by spilling an operand
 * (which the launch then brings back, spilling something else) or by
 * trimming the cache, and a launch that cannot fit is then refused with
 * the operand moved and the cache changed, though a refusal changes
 * nothing (include/spillway.h, "Conventions").  Here the operands are
 * pinned first, the launch they and the result make is checked as
 * sw_launch_begin checks one (they fit the budget or the device together,
 * and the spilled ones and the result can be brought back and allocated
 * beside what cannot move) before anything moves, and the allocation's
 * ladder spills other buffers only.
 */
#ifndef SW_CORE_BESIDE_H
#define SW_CORE_BESIDE_H

#include "spillway.h"

#include <stddef.h>

/* sw_buffer_alloc of size bytes on dev for a launch on operands[0..n)
 * (buffers of dev; n 0: a plain allocation): SW_ERR_OOM saying "nothing
 * was moved" when the launch cannot fit, with *out NULL and nothing
 * moved. */
int sw__buffer_alloc_beside(sw_device *dev, size_t size, const char *tag,
                            sw_buffer *const *operands, size_t n,
                            sw_buffer **out);

#endif
