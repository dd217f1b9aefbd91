/*
 * disk.h -- the disk tier's internal interface (disk.c): included by
 * internal.h, after the structures it uses.
 */
#ifndef SW_CORE_DISK_H
#define SW_CORE_DISK_H

/* ------------------------------------------------------------------------
 * The disk tier (disk.c)
 * ---------------------------------------------------------------------- */

/* Host memory spillway holds for dev: spilled copies in host memory, the
 * clean copies and the idle staging pool. */
static inline uint64_t sw__host_held(const sw_device *dev)
{
    return dev->spilled - dev->spilled_disk + dev->host_copies +
           dev->hpool.bytes;
}
/* Under a host budget, make room for `need` more bytes of host copies:
 * the host blocks of clean copies whose bytes the spill file holds go
 * first, then the idle pool, then the copies the file holds (nothing
 * written), then the least recently used spilled copies and clean copies
 * are written to disk (the lock released meanwhile), spilled ones after
 * their copies out end (with wait; without, only those already done).
 * Best effort where nothing more can move (pinned, in flight); fails only
 * when a write to disk of a spilled copy does and dropping clean copies
 * cannot make the room (the buffer stays in host memory, intact, and the
 * message says why). */
int sw__host_room_locked(sw_device *dev, uint64_t need, bool wait);
/* The same for one host copy of size bytes (need: what it will count),
 * taking its block: a pool block that fits, taken as soon as there is one
 * -- the blocks that clean copies and disk writes give up go to the pool
 * on the way, and would otherwise be trimmed from under the caller --, so
 * that the copy lands in memory already faulted in.  *p stays NULL when
 * none fitted (the caller allocates); on failure nothing is taken. */
int sw__host_room_block_locked(sw_device *dev, size_t size, uint64_t need,
                               void **p, size_t *got, bool *pinned);
/* A spilled base's copy back from disk into a host block (the base is
 * moving and pinned by the caller; the lock is released meanwhile).  On
 * failure it stays on disk, intact. */
int sw__disk_read_locked(sw_device *dev, sw__buf *base);
/* sw_buffer_prefetch (without a queue) of a base on disk: its read is
 * started on the prefetch thread, which then queues its copy to the
 * device; SW_OK at once.  SW__DISK_INLINE when no background read can be
 * started (the base is not on disk, or moving; no memory or thread for
 * it): the caller restores it itself.  An error (no host memory for the
 * read) changes nothing. */
#define SW__DISK_INLINE 1
int sw__disk_prefetch_locked(sw_device *dev, sw__buf *base);
/* Hold the prefetch thread before its next read (pause) or let it go:
 * for the tests, which check that a prefetch returned before its read. */
void sw__disk_bg_pause(bool pause);
/* Wait (the lock released meanwhile) until no background read of dev's is
 * left: device close. */
void sw__disk_wait_reads_locked(sw_device *dev);
/* n bytes at off of an on-disk base, read straight from the file (the
 * base pinned by the caller). */
int sw__disk_pread_locked(sw_device *dev, sw__buf *base, size_t off, void *p,
                          size_t n);
/* A base released: its extent of the file, if it has one, is given back
 * (on_disk: a disk_drop event, before its free's). */
void sw__disk_release_locked(sw_device *dev, sw__buf *base);
/* base's kept extent (disk_kept) no longer holds its bytes (it is
 * written): given back.  A no-op without one. */
void sw__disk_forget_locked(sw_device *dev, sw__buf *base);
/* The device closes: the file goes. */
void sw__disk_close_locked(sw_device *dev);
/* Whether an armed fault of op hits this call (bops.c). */
bool sw__fault_hits(sw_device *dev, sw_fault_op op);

#endif /* SW_CORE_DISK_H */
