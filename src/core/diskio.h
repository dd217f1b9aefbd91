/*
 * diskio.h -- the disk tier's I/O engine (diskio.c): transfers between
 * host memory and the spill file.  Internal; disk.c's only.
 */
#ifndef SW_CORE_DISKIO_H
#define SW_CORE_DISKIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One transfer: n bytes at p to (write) or from the file fd at off. */
typedef struct {
    bool write;
    int fd;
    void *p;
    size_t n;
    uint64_t off;
    int err; /* out: 0, or the first errno of its pieces (EIO: past the
              * end; ENOSPC: a write that wrote nothing) */
} sw__dio;

/* Do every transfer of v[0..n) and wait for them all: reads in pieces by
 * the caller and the I/O threads at once, writes by the caller.  Called
 * with no lock held (it waits for the I/O threads, which take only the
 * engine's own mutex, a leaf).  Never fails as a whole: each transfer
 * says. */
void sw__dio_run(sw__dio *v, size_t n);

/* The same by the calling thread alone: a transfer no one waits for
 * (disk.c's background reads), which would take the CPUs from the work it
 * overlaps if it were cut in pieces for the I/O threads. */
void sw__dio_run_alone(sw__dio *v, size_t n);

/* The I/O threads besides the caller (SPILLWAY_DISK_THREADS, read once;
 * default: the online CPUs less one, at most 3; 0: the caller alone). */
int sw__dio_threads(void);

#endif
