/*
 * bench_disk.c -- the disk tier's I/O engine, chosen by measurement
 * (issue 27): the same pieces written to and read back from a spill file
 * by
 *   - plain:   one pwrite / pread per piece by the calling thread (the
 *              demo's baseline, and the disk tier's first engine);
 *   - threads: the library's engine (src/core/diskio.c): reads cut in
 *              1 MiB chunks, done at once by a few I/O threads and the
 *              calling thread; writes by the caller (parallel writes to
 *              one file wait for its inode's lock);
 *   - uring:   the same chunks as io_uring requests, submitted together
 *              and waited for (Debian's liburing; built only with it).
 * Each engine does the work two ways: piece by piece (a restore reads one
 * buffer, and waits for it) and in batches of 8 pieces (making room
 * writes several at once).  Rounds alternate the engines; each figure is
 * the best of them, as a ratio to plain measured in the same run.
 *
 * The file is in $SPILLWAY_SPILL_DIR (else $TMPDIR, else /tmp), as the
 * library's; pieces come from and go to buffers touched first, as the
 * host pool's are.
 *
 * Usage: bench_disk [PIECES [MiB]]   (default 48 pieces of 4 MiB)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "core/diskio.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef SW_HAVE_LIBURING
#include <liburing.h>
#endif

#define CHUNK ((size_t)1 << 20)
#define BATCH 8
#define ROUNDS 7

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int io_all(bool write, int fd, char *p, size_t n, off_t off)
{
    while (n > 0) {
        ssize_t k = write ? pwrite(fd, p, n, off) : pread(fd, p, n, off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? errno : EIO;
        p += k;
        n -= (size_t)k;
        off += k;
    }
    return 0;
}

/* One request: n bytes at p <-> the file at off. */
typedef struct {
    char *p;
    size_t n;
    off_t off;
} req;

/* ------------------------------------------------------------------------
 * plain
 * ---------------------------------------------------------------------- */

static int run_plain(bool write, int fd, const req *r, size_t nr)
{
    for (size_t i = 0; i < nr; i++) {
        int err = io_all(write, fd, r[i].p, r[i].n, r[i].off);
        if (err)
            return err;
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * threads: the library's own engine (src/core/diskio.c)
 * ---------------------------------------------------------------------- */

static int run_threads(bool write, int fd, const req *r, size_t nr)
{
    sw__dio d[BATCH];
    for (size_t i = 0; i < nr; i++)
        d[i] = (sw__dio){write, fd, r[i].p, r[i].n, (uint64_t)r[i].off, 0};
    sw__dio_run(d, nr);
    for (size_t i = 0; i < nr; i++)
        if (d[i].err)
            return d[i].err;
    return 0;
}

/* ------------------------------------------------------------------------
 * uring: every chunk a request, submitted together
 * ---------------------------------------------------------------------- */

#ifdef SW_HAVE_LIBURING
static struct io_uring ring;

static int run_uring(bool write, int fd, const req *r, size_t nr)
{
    size_t total = 0, done = 0, queued = 0;
    for (size_t i = 0; i < nr; i++)
        total += (r[i].n + CHUNK - 1) / CHUNK;
    size_t ri = 0, at = 0;
    int err = 0;
    while (done < total) {
        /* Queue what fits. */
        while (ri < nr) {
            struct io_uring_sqe *s = io_uring_get_sqe(&ring);
            if (s == NULL)
                break;
            size_t n = r[ri].n - at < CHUNK ? r[ri].n - at : CHUNK;
            if (write)
                io_uring_prep_write(s, fd, r[ri].p + at, (unsigned)n,
                                    (uint64_t)r[ri].off + at);
            else
                io_uring_prep_read(s, fd, r[ri].p + at, (unsigned)n,
                                   (uint64_t)r[ri].off + at);
            io_uring_sqe_set_data64(s, n);
            queued++;
            at += n;
            if (at == r[ri].n) {
                ri++;
                at = 0;
            }
        }
        int rc = io_uring_submit(&ring);
        if (rc < 0)
            return -rc;
        struct io_uring_cqe *c;
        rc = io_uring_wait_cqe(&ring, &c);
        if (rc < 0)
            return -rc;
        if (c->res < 0 && !err)
            err = -c->res;
        else if ((uint64_t)c->res != io_uring_cqe_get_data64(c) && !err)
            err = EIO; /* short: not expected on a local file */
        io_uring_cqe_seen(&ring, c);
        done++;
    }
    (void)queued;
    return err;
}
#endif

/* ------------------------------------------------------------------------
 * The runs
 * ---------------------------------------------------------------------- */

typedef int (*engine_fn)(bool, int, const req *, size_t);

typedef struct {
    const char *name;
    engine_fn fn;
    double best[2][2]; /* [batched][write] seconds */
} engine;

/* All pieces written (or read), one call per piece or per BATCH. */
static double timed(engine *e, bool write, bool batched, int fd, req *r,
                    size_t nr)
{
    double t0 = now_s();
    size_t step = batched ? BATCH : 1;
    for (size_t i = 0; i < nr; i += step) {
        size_t k = nr - i < step ? nr - i : step;
        int err = e->fn(write, fd, r + i, k);
        if (err) {
            fprintf(stderr, "bench_disk: %s %s: %s\n", e->name,
                    write ? "write" : "read", strerror(err));
            exit(1);
        }
    }
    return now_s() - t0;
}

static int spill_file(void)
{
    const char *dir = getenv("SPILLWAY_SPILL_DIR");
    if (dir == NULL || !dir[0])
        dir = getenv("TMPDIR");
    if (dir == NULL || !dir[0])
        dir = "/tmp";
    int fd = open(dir, O_TMPFILE | O_RDWR, 0600);
    if (fd < 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/bench-disk-XXXXXX", dir);
        fd = mkstemp(path);
        if (fd >= 0)
            unlink(path);
    }
    if (fd < 0) {
        fprintf(stderr, "bench_disk: no file in %s: %s\n", dir,
                strerror(errno));
        exit(1);
    }
    return fd;
}

int main(int argc, char **argv)
{
    size_t nr = argc > 1 ? strtoul(argv[1], NULL, 10) : 48;
    size_t mib = argc > 2 ? strtoul(argv[2], NULL, 10) : 4;
    if (nr < 1 || mib < 1) {
        fprintf(stderr, "usage: bench_disk [PIECES [MiB]]\n");
        return 2;
    }
    size_t piece = mib << 20;
    /* As many buffers as a batch, reused in turn (a pool's blocks). */
    char *mem = malloc(piece * BATCH);
    req *r = calloc(nr, sizeof *r);
    if (mem == NULL || r == NULL)
        return 1;
    memset(mem, 0x5A, piece * BATCH);
    for (size_t i = 0; i < nr; i++)
        r[i] = (req){mem + (i % BATCH) * piece, piece, (off_t)(i * piece)};
    engine e[3] = {{"plain", run_plain, {{1e9, 1e9}, {1e9, 1e9}}},
                   {"threads", run_threads, {{1e9, 1e9}, {1e9, 1e9}}}};
    int ne = 2;
#ifdef SW_HAVE_LIBURING
    int rc = io_uring_queue_init(64, &ring, 0);
    if (rc == 0)
        e[ne++] = (engine){"uring", run_uring, {{1e9, 1e9}, {1e9, 1e9}}};
    else
        printf("io_uring: not available here (%s)\n", strerror(-rc));
#else
    printf("io_uring: not built (no liburing)\n");
#endif
    int fd = spill_file();
    /* The file's blocks exist before the rounds (the first write of a
     * file allocates them: every engine would pay that once). */
    (void)run_plain(true, fd, r, nr);
    for (int round = 0; round < ROUNDS; round++)
        for (int k = 0; k < ne; k++)
            for (int batched = 0; batched < 2; batched++)
                for (int w = 1; w >= 0; w--) {
                    double t = timed(&e[k], w, batched, fd, r, nr);
                    if (t < e[k].best[batched][w])
                        e[k].best[batched][w] = t;
                }
    close(fd);
    double total = (double)nr * (double)piece;
    printf("disk I/O engines: %zu pieces of %zu MiB to a spill file, best "
           "of %d rounds, GB/s (ratio to plain); the library's engine with "
           "%d I/O thread(s) and the caller\n", nr, mib, ROUNDS,
           sw__dio_threads());
    printf("  %-8s %-22s %-22s %-22s %-22s\n", "engine", "write, by piece",
           "read, by piece", "write, 8 at once", "read, 8 at once");
    for (int k = 0; k < ne; k++) {
        printf("  %-8s", e[k].name);
        for (int batched = 0; batched < 2; batched++)
            for (int w = 1; w >= 0; w--) {
                double gbps = total / e[k].best[batched][w] / 1e9;
                double ratio = e[0].best[batched][w] / e[k].best[batched][w];
                char cell[32];
                snprintf(cell, sizeof cell, "%.2f (%.2fx)", gbps, ratio);
                printf(" %-22s", cell);
            }
        printf("\n");
    }
    free(mem);
    free(r);
    return 0;
}
