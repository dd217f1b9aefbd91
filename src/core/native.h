/*
 * native.h -- adopting native streams, for the Python module's DLPack
 * export (internal; native.c).
 */
#ifndef SW_CORE_NATIVE_H
#define SW_CORE_NATIVE_H

#include "spillway.h"

#include <stdint.h>

/* sw_queue_wrap_native, except that the stream of one of dev's own live
 * queues (handed out by sw_queue_native) gives that queue, retained,
 * instead of SW_ERR_INVALID_ARG: a DLPack consumer names the stream it
 * will use, and when that stream is spillway's, ordering it is ordering
 * that queue.  Release *out either way. */
int sw__queue_wrap_native_or_own(sw_device *dev, uintptr_t handle,
                                 sw_queue **out);

#endif
