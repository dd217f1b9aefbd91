/*
 * trypin.h -- pins that never wait, for a caller holding a lock of its
 * own (internal; launch.c, queue.c, device.c).
 *
 * The Python module holds the GIL, and the one lock order is device lock
 * -> interpreter (a pressure callback takes the GIL with the device lock
 * released, but a C thread may hold the device lock and wait for the
 * GIL).  So it must drop the GIL before it can wait for a device lock --
 * two switches of the GIL per pin, about a fifth of what `sw.pinned`
 * costs.  These forms let it keep the GIL when nothing has to wait: the
 * device lock is only tried, and the work done under it is the warm path
 * of sw_launch_begin_q / sw_launch_end_q -- bookkeeping, no restore, no
 * device call, no release.  Anything else (the lock taken, a buffer
 * spilled or moving, a queue to order, a bad argument, a release due) is
 * SW__AGAIN with no pin taken or ended: the caller then drops its lock
 * and calls the full form, which does the rest and says what is wrong.
 */
#ifndef SW_CORE_TRYPIN_H
#define SW_CORE_TRYPIN_H

#include "spillway.h"

#include <stdbool.h>
#include <stddef.h>

/* Not an error: "call the full form". */
#define SW__AGAIN 1

typedef struct sw_device sw_device;
typedef struct sw__queue sw__queue;

/* Take dev's lock if no one holds it; false leaves it untaken. */
bool sw__trylock(sw_device *dev);
/* sw__queue_enter without waiting: SW_OK with the lock held, or SW__AGAIN
 * (lock held by another thread, queue dead, device closed). */
int sw__queue_try_enter(const sw_queue *h, sw__queue **q);

/* sw_launch_begin_q_access (access NULL: every argument written) when
 * every argument is resident and q already ordered after its earlier
 * work (no other queue's to wait for); else SW__AGAIN, nothing pinned and
 * ptrs unspecified.  With a
 * NULL queue (the host's pin), only when no queue's work is on them and
 * the default queue is idle: nothing to wait for. */
int sw__launch_begin_q_try(sw_queue *q, sw_buffer *const *bufs,
                           const unsigned char *access, size_t n,
                           sw_devmem *ptrs);
/* sw_launch_end_q of this thread's last begin on q (the same array of
 * handles), when no pin ending releases a freed buffer; else SW__AGAIN,
 * nothing unpinned. */
int sw__launch_end_q_try(sw_queue *q, sw_buffer *const *bufs, size_t n);

#endif
