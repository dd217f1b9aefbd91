/*
 * disk.c -- the disk tier: a host budget (sw_set_host_budget) bounds the
 * host memory spillway holds for a device (spilled copies, clean copies,
 * the idle staging pool); past it, spilled copies go to a file, and so do
 * clean copies' host blocks (the buffer staying resident and clean):
 * dropped, their buffers' next eviction would copy them out again.
 *
 * Move no byte twice: a copy read back from the file keeps its extent
 * there while nothing writes the buffer (disk_kept).  Sent back to disk,
 * spilled or as a clean copy, it writes nothing, and a clean copy without
 * its host block, evicted, is on disk at once.  A write ends that
 * (sw__dirty_locked gives the extent back).
 *
 * One file per device, under SPILLWAY_SPILL_DIR (default $TMPDIR, else
 * /tmp), made when first needed and unlinked at once (O_TMPFILE where the
 * filesystem has it): nothing is left behind, whatever happens to the
 * process, and a directory removed later does not matter.  Offsets only
 * grow; a buffer written or freed gives its extent back with a hole
 * punched, so the file's blocks are what it holds now.
 *
 * The I/O goes through diskio.c's engine (the calling thread and a few
 * I/O threads, each buffer cut in 1 MiB pieces done at once) with the
 * device lock released and the buffers marked moving (others wait for
 * them, as for a copy in flight).  Making room writes as many of the least
 * recently used copies as the room needs in one go.  A write that fails (a
 * full disk, an I/O error, a directory that is gone) leaves its buffer in
 * host memory with its data intact (a clean copy: its buffer on the
 * device, its host block dropped as it would be without the file), and
 * the call that needed the room says why, unless dropping clean copies
 * made the room.
 */
#include "core/internal.h"
#include "core/diskio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Extents are whole pages: a punched hole frees whole blocks. */
#define DISK_ALIGN 4096u
/* At most this many buffers go to disk in one write (one call of the
 * engine, their pieces done at once). */
#define DISK_BATCH 16

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The bytes of the transfers a batch ran (those not failed by a fault). */
static double batch_bytes(const sw__dio *d, size_t n)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (double)d[i].n;
    return sum > 0 ? sum : 1.0;
}

static uint64_t extent_of(const sw__buf *b)
{
    return ((uint64_t)b->size + DISK_ALIGN - 1) / DISK_ALIGN * DISK_ALIGN;
}

static const char *spill_dir(void)
{
    const char *d = getenv("SPILLWAY_SPILL_DIR");
    if (d == NULL || d[0] == '\0')
        d = getenv("TMPDIR");
    return d != NULL && d[0] != '\0' ? d : "/tmp";
}

/* The spill file, made on first use (a quick open: local files only are
 * expected here, as for any temporary file). */
static int disk_open_locked(sw_device *dev)
{
    if (dev->disk_fd > 0)
        return SW_OK;
    const char *dir = spill_dir();
    int fd = -1, err = 0;
#ifdef O_TMPFILE
    fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    err = errno;
    if (fd < 0 && (err == EOPNOTSUPP || err == EISDIR || err == EINVAL))
#endif
    {
        char path[4096];
        snprintf(path, sizeof path, "%s/spillway-spill-XXXXXX", dir);
        fd = mkstemp(path);
        err = errno;
        if (fd >= 0) {
            (void)unlink(path);
            (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
        }
    }
    if (fd < 0)
        return sw__errorf(SW_ERR_HOST_OOM, "%s: no spill file in '%s' "
                          "(SPILLWAY_SPILL_DIR): %s", dev->name, dir,
                          strerror(err));
    if (fd == 0) { /* 0 is "none yet" in a freshly opened device */
        int again = fcntl(fd, F_DUPFD_CLOEXEC, 1);
        close(fd);
        if (again < 0)
            return sw__errorf(SW_ERR_HOST_OOM, "%s: no spill file: %s",
                              dev->name, strerror(errno));
        fd = again;
    }
    dev->disk_fd = fd;
    dev->disk_end = 0;
    return SW_OK;
}

/* One transfer through the engine (diskio.c): 0 or an errno (EIO for a
 * read past the end). */
static int disk_io(bool write, int fd, void *p, size_t n, uint64_t off)
{
    sw__dio d = {write, fd, p, n, off, 0};
    sw__dio_run(&d, 1);
    return d.err;
}

/* Give an extent back to the filesystem (best effort: where holes cannot
 * be punched, the space is kept until the device closes). */
static void punch(int fd, uint64_t off, uint64_t len)
{
#if defined(FALLOC_FL_PUNCH_HOLE) && defined(FALLOC_FL_KEEP_SIZE)
    (void)fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                    (off_t)off, (off_t)len);
#else
    (void)fd;
    (void)off;
    (void)len;
#endif
}

/* Write bases' host copies to the file, all at once, and give their host
 * blocks up: spilled bases (then on disk), and clean copies (then resident
 * and clean with their extent, disk_kept).  pre: each SPILLED in host
 * memory or a clean copy with its host block, no copy in flight, unpinned,
 * and marked moving by the caller (so that none is chosen twice): no one
 * reads, writes, restores or releases them meanwhile (a free waits for
 * the end).  Not pins: pins are the caller's to count (sw_launch_end
 * checks them), and this may be another thread's call making room.  A
 * spilled base whose write fails stays in host memory, intact, and the
 * first such failure is the error; a clean copy's host block goes then as
 * it would without the file (its buffer keeps its data on the device). */
static int disk_write_locked(sw_device *dev, sw__buf **v, size_t k)
{
    int orc = disk_open_locked(dev), rc = SW_OK;
    sw__dio d[DISK_BATCH];
    bool fault[DISK_BATCH];
    size_t nd = 0;
    for (size_t i = 0; orc == SW_OK && i < k; i++) {
        uint64_t len = extent_of(v[i]);
        d[i] = (sw__dio){true, dev->disk_fd, v[i]->host, v[i]->size,
                         dev->disk_end, 0};
        dev->disk_end += len;
        fault[i] = sw__fault_hits(dev, SW_FAULT_DISK);
        nd = i + 1;
    }
    /* The transfers an injected fault does not fail, together. */
    sw__dio run[DISK_BATCH];
    size_t nrun = 0;
    for (size_t i = 0; i < nd; i++)
        if (!fault[i])
            run[nrun++] = d[i];
    dev->waiting++;
    sw__unlock(dev);
    uint64_t ns0 = sw__now_ns();
    sw__dio_run(run, nrun);
    uint64_t ns1 = sw__now_ns();
    double dt = (double)(ns1 - ns0) * 1e-9;
    sw__lock(dev);
    dev->waiting--;
    for (size_t i = 0, r = 0; i < nd; i++)
        d[i].err = fault[i] ? EIO : run[r++].err;
    for (size_t i = 0; i < k; i++) {
        sw__buf *b = v[i];
        bool clean = b->state == SW_RESIDENT;
        b->moving = false;
        if (i >= nd || d[i].err != 0) {
            if (i < nd)
                punch(dev->disk_fd, d[i].off, extent_of(b));
            if (clean) {
                sw__host_copy_drop_locked(dev, b);
            } else if (rc == SW_OK && i >= nd) {
                rc = orc; /* no file: nothing was written */
            } else if (rc == SW_OK) {
                char b1[32], b2[32];
                rc = sw__errorf(SW_ERR_HOST_OOM, "%s: the host budget of %s "
                                "is reached, and buffer '%s' (%s) could not "
                                "go to disk: writing the spill file in '%s': "
                                "%s%s; it stays in host memory, intact",
                                dev->name,
                                sw_format_bytes(dev->host_budget, b1,
                                                sizeof b1),
                                b->tag, sw_format_bytes(b->size, b2,
                                                        sizeof b2),
                                spill_dir(), strerror(d[i].err),
                                fault[i] ? " (an injected fault)" : "");
            }
            continue;
        }
        sw__host_put_locked(dev, b->host, b->host_size, b->host_pinned);
        b->host = NULL;
        b->disk_off = d[i].off;
        if (clean) {
            b->disk_kept = true; /* still clean: its copy is there now */
            dev->host_copies -= b->alloc_size;
        } else {
            b->on_disk = true;
            dev->spilled_disk += b->alloc_size;
        }
        dev->disk_write_bytes += b->size;
        /* The batch's time, shared by bytes. */
        dev->disk_write_seconds += nrun > 0 ? dt * (double)b->size /
                                                  batch_bytes(run, nrun)
                                            : 0.0;
        if (dev->tracing) /* the batch's I/O, together */
            sw__trace_emit_timed(dev, SW_TRACE_DISK_WRITE, b, b->alloc_size,
                                 clean ? 2 : 0, ns0, ns1);
    }
    pthread_cond_broadcast(&dev->moved);
    for (size_t i = 0; i < k; i++)
        sw__maybe_release_locked(dev, v[i]); /* freed meanwhile */
    return rc;
}

/* A spilled base whose extent of the file still holds its bytes goes back
 * there with nothing written: its host block is given up. */
static void disk_rekeep_locked(sw_device *dev, sw__buf *b)
{
    sw__host_put_locked(dev, b->host, b->host_size, b->host_pinned);
    b->host = NULL;
    b->disk_kept = false;
    b->on_disk = true;
    dev->spilled_disk += b->alloc_size;
    SW__TRACE(dev, SW_TRACE_DISK_WRITE, b, b->alloc_size, 0, 1);
}

/* The spilled base held in host memory that can go to disk now, at the
 * least cost: one whose extent of the file still holds its bytes (nothing
 * to write), else the least recently used; with none, *busy says whether
 * one will once its copy ends. */
static sw__buf *disk_victim_locked(sw_device *dev, sw__buf **busy)
{
    sw__buf *best = NULL;
    *busy = NULL;
    for (sw__buf *b = dev->live; b != NULL; b = b->live_next) {
        /* A clean copy whose copy in is still in flight can be given up
         * once it lands. */
        if (b->clean && b->xfer != NULL && !b->hold_host)
            *busy = b;
        /* A clean copy goes to the file with the spilled copies, as old
         * as its last use: dropped, its next eviction would copy it out
         * again. */
        bool clean = sw__host_clean(b) && !b->disk_kept && !b->hold_host;
        if ((b->state != SW_SPILLED && !clean) || b->host == NULL ||
            b->on_disk || b->lost || b->moving || b->pins > 0 ||
            b->size == 0)
            continue;
        if (b->xfer != NULL) {
            *busy = b;
            continue;
        }
        if (best == NULL || b->disk_kept > best->disk_kept ||
            (b->disk_kept == best->disk_kept && b->last_use < best->last_use))
            best = b;
    }
    return best;
}

/* sw__host_room_locked, and with take, sw__host_room_block_locked. */
static int room_locked(sw_device *dev, uint64_t need, bool wait,
                       size_t take, void **p, size_t *got, bool *pinned)
{
    sw__assert_locked(dev);
    /* Landed copies first: a restore's source block, written since, is
     * counted nowhere until its copy in is seen done and it goes back to
     * the pool. */
    if (dev->host_budget != 0 && dev->xfers != NULL)
        sw__xfer_poll_locked(dev);
    for (int waits = 0;;) {
        /* Out of the pool, the block counts as nothing until it holds the
         * copy: held + need is then what the copy makes it. */
        if (take > 0 && *p == NULL)
            *p = sw__host_take_fit_locked(dev, take, got, pinned);
        uint64_t budget = dev->host_budget;
        uint64_t held = sw__host_held(dev);
        if (budget == 0 || held + need <= budget)
            return SW_OK;
        uint64_t over = held + need - budget;
        if (dev->xfers != NULL)
            sw__xfer_poll_locked(dev); /* landed copies: their blocks free */
        if (dev->host_copies > 0 &&
            sw__clean_drop_locked(dev, over, false, true) > 0)
            continue; /* copies the file holds too: they cost nothing */
        if (dev->hpool.bytes > 0) {
            /* Idle blocks next, only as many as must go: the rest are
             * what the reads back from disk land in without a page fault
             * per page (hostpool.c: reused memory copies 5-10x faster). */
            uint64_t keep = dev->hpool.bytes > over
                                ? dev->hpool.bytes - over
                                : 0;
            sw__host_pool_trim_locked(dev, keep);
            continue;
        }
        sw__buf *busy;
        sw__buf *b = disk_victim_locked(dev, &busy);
        if (b == NULL && busy != NULL && wait && waits++ < 64) {
            /* A copy still in flight (a spill's out, a clean copy's in):
             * its end first (the xfer held, not the buffer, which may be
             * freed meanwhile). */
            sw__xfer_settle_locked(dev, busy);
            continue;
        }
        if (b == NULL) {
            /* The clean copies the file could not take (pinned), dropped;
             * then nothing more can go now: best effort. */
            if (dev->host_copies > 0 &&
                sw__clean_drop_locked(dev, over, false, false) > 0)
                continue;
            return SW_OK;
        }
        if (b->disk_kept) {
            disk_rekeep_locked(dev, b);
            continue;
        }
        /* As many as make the room, least recently used first, written
         * together (the engine does their pieces at once). */
        sw__buf *v[DISK_BATCH];
        size_t k = 0;
        uint64_t going = 0;
        while (b != NULL) {
            b->moving = true; /* not chosen again */
            v[k++] = b;
            going += b->alloc_size;
            if (k == DISK_BATCH || going >= over)
                break;
            b = disk_victim_locked(dev, &busy);
            if (b != NULL && b->disk_kept)
                break; /* free: the next round's */
        }
        int rc = disk_write_locked(dev, v, k);
        /* Without the file, the clean copies' host blocks go instead (as
         * they went before the file took them); the error only when that
         * does not make the room. */
        if (rc != SW_OK && (dev->host_copies == 0 ||
                            sw__clean_drop_locked(dev, over, false,
                                                  false) == 0))
            return rc;
    }
}

int sw__host_room_locked(sw_device *dev, uint64_t need, bool wait)
{
    return room_locked(dev, need, wait, 0, NULL, NULL, NULL);
}

int sw__host_room_block_locked(sw_device *dev, size_t size, uint64_t need,
                               void **p, size_t *got, bool *pinned)
{
    *p = NULL;
    int rc = room_locked(dev, need, true, size, p, got, pinned);
    if (rc != SW_OK && *p != NULL) {
        sw__host_put_locked(dev, *p, *got, *pinned);
        *p = NULL;
    }
    return rc;
}

/* A read back from disk in three steps, so that the transfer can run on
 * another thread (sw__disk_prefetch_locked): its block and parameters
 * under the lock, the transfer without it, its end under it again. */
typedef struct disk_rd {
    void *p;
    size_t got; /* the block's size */
    bool pinned;
    bool fault;
    int fd;
    uint64_t off;
    size_t n;
    int err;
    uint64_t ns0, ns1;
} disk_rd;

static int read_begin_locked(sw_device *dev, sw__buf *b, disk_rd *r)
{
    sw__assert_locked(dev);
    assert(b->on_disk && b->moving && b->pins > 0);
    memset(r, 0, sizeof *r);
    /* Room for the block it comes back into (it may send others out),
     * and the block itself from the pool where one fits: the read lands
     * in memory already faulted in (into fresh memory it ran at 0.6-0.7
     * of a plain pread on opencl:0, docs/performance.md). */
    int rc = sw__host_room_block_locked(dev, b->size, b->alloc_size, &r->p,
                                        &r->got, &r->pinned);
    if (rc != SW_OK)
        return rc;
    if (r->p == NULL)
        r->p = sw__host_get_locked(dev, b->size, &r->got, &r->pinned);
    if (r->p == NULL)
        return sw__errorf(SW_ERR_HOST_OOM, "%s: no host memory to read "
                          "buffer '%s' (%zu bytes) back from disk",
                          dev->name, b->tag, b->size);
    r->fault = sw__fault_hits(dev, SW_FAULT_DISK);
    r->fd = dev->disk_fd;
    r->off = b->disk_off;
    r->n = b->size;
    return SW_OK;
}

/* Without the lock; alone: by this thread only (a background read). */
static void read_io(disk_rd *r, bool alone)
{
    r->ns0 = sw__now_ns();
    if (r->fault) {
        r->err = EIO;
    } else if (alone) {
        sw__dio d = {false, r->fd, r->p, r->n, r->off, 0};
        sw__dio_run_alone(&d, 1);
        r->err = d.err;
    } else {
        r->err = disk_io(false, r->fd, r->p, r->n, r->off);
    }
    r->ns1 = sw__now_ns();
}

static int read_end_locked(sw_device *dev, sw__buf *b, disk_rd *r)
{
    sw__assert_locked(dev);
    if (r->err != 0) {
        sw__host_put_locked(dev, r->p, r->got, r->pinned);
        return sw__errorf(SW_ERR_HOST_OOM, "%s: reading buffer '%s' (%zu "
                          "bytes) back from the spill file failed: %s%s; it "
                          "stays on disk, intact", dev->name, b->tag, r->n,
                          strerror(r->err),
                          r->fault ? " (an injected fault)" : "");
    }
    /* The extent stays, holding the same bytes until something writes the
     * buffer (disk_kept): going back to disk, or evicted clean without its
     * host block, it writes nothing. */
    b->host = r->p;
    b->host_size = r->got;
    b->host_pinned = r->pinned;
    b->on_disk = false;
    b->disk_kept = true;
    dev->spilled_disk -= b->alloc_size;
    dev->disk_read_bytes += r->n;
    dev->disk_read_seconds += (double)(r->ns1 - r->ns0) * 1e-9;
    if (dev->tracing)
        sw__trace_emit_timed(dev, SW_TRACE_DISK_READ, b, b->alloc_size, 0,
                             r->ns0, r->ns1);
    return SW_OK;
}

int sw__disk_read_locked(sw_device *dev, sw__buf *b)
{
    disk_rd r;
    int rc = read_begin_locked(dev, b, &r);
    if (rc != SW_OK)
        return rc;
    dev->waiting++;
    sw__unlock(dev);
    read_io(&r, false);
    sw__lock(dev);
    dev->waiting--;
    return read_end_locked(dev, b, &r);
}

/* ------------------------------------------------------------------------
 * Reads in the background: a prefetch of a buffer on disk
 *
 * sw_buffer_prefetch (without a queue) returns at once for a buffer in the
 * spill file, on a device that does not compute on the host's CPUs
 * (background_wanted): its read runs on the prefetch thread, which then queues its
 * copy to the device as any prefetch does.  Meanwhile the buffer is
 * moving: a use, a host access or a free waits for the read (as for a
 * copy in flight), and a free that came meanwhile releases it at the end.
 * A read or a restore that fails leaves the buffer where it was, intact:
 * its next use does them again and says why.  The read is the prefetch
 * thread's alone, not cut in pieces for the I/O engine's threads: those
 * serve a caller that waits.  No pressure callback runs
 * on that thread: a program's callbacks run on its own threads only.  One
 * thread for every device,
 * started when first needed; the read itself goes through the I/O engine
 * (pieces at once, diskio.c).  Device close waits for the device's reads.
 * ---------------------------------------------------------------------- */

typedef struct bg_read {
    struct bg_read *next;
    sw_device *dev;
    sw__buf *base;
    disk_rd r;
} bg_read;

static struct {
    pthread_mutex_t mu; /* a leaf: taken with a device lock or none */
    pthread_cond_t cv;
    bg_read *head, *tail;
    bool started;
    bool paused; /* sw__disk_bg_pause: the tests' */
} bg = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL,
        false, false};

void sw__disk_bg_pause(bool pause)
{
    pthread_mutex_lock(&bg.mu);
    bg.paused = pause;
    pthread_cond_broadcast(&bg.cv);
    pthread_mutex_unlock(&bg.mu);
}

static void bg_run(bg_read *j)
{
    /* By this thread alone: no one waits for it, and the I/O threads'
     * pieces would take the CPUs from the work it overlaps (on a 2-core
     * machine whose device computes on the CPU, its reads measured 0.65 of
     * a plain pread in pieces, against 0.95 in the foreground, for the
     * same wall time). */
    read_io(&j->r, true);
    sw_device *dev = j->dev;
    sw__buf *b = j->base;
    sw__lock(dev);
    int rc = read_end_locked(dev, b, &j->r);
    b->moving = false;
    pthread_cond_broadcast(&dev->moved);
    /* Still wanted (a handle or a view): on to the device, as the
     * prefetch asked, with what the ladder can do without the pressure
     * callbacks (sw__tl_background).  Failures are left for its next use
     * to meet. */
    if (rc == SW_OK && b->state == SW_SPILLED &&
        (sw__slot_live(&b->h) || b->children > 0))
        (void)sw__restore_locked(dev, b, NULL, true, 0);
    dev->bg_reads--;
    pthread_cond_broadcast(&dev->moved);
    sw__unpin_locked(dev, b); /* released here if freed meanwhile */
    sw__unlock(dev);
    sw__free(j);
}

static void *bg_main(void *arg)
{
    (void)arg;
    sw__tl_background = true; /* no callbacks, no OOMs (internal.h) */
    pthread_mutex_lock(&bg.mu);
    for (;;) {
        while (bg.head == NULL || bg.paused)
            pthread_cond_wait(&bg.cv, &bg.mu);
        bg_read *j = bg.head;
        bg.head = j->next;
        if (bg.head == NULL)
            bg.tail = NULL;
        pthread_mutex_unlock(&bg.mu);
        bg_run(j);
        pthread_mutex_lock(&bg.mu);
    }
    return NULL;
}

/* A child of fork() has no prefetch thread, and none of the parent's
 * reads (their devices are the parent's). */
static void bg_after_fork(void)
{
    pthread_mutex_init(&bg.mu, NULL);
    pthread_cond_init(&bg.cv, NULL);
    bg.head = bg.tail = NULL;
    bg.started = false;
}

static pthread_once_t bg_once = PTHREAD_ONCE_INIT;
static void bg_register_atfork(void)
{
    (void)pthread_atfork(NULL, NULL, bg_after_fork);
}

/* Under bg.mu: the thread, started once; false if it cannot be. */
static bool bg_start_locked(void)
{
    if (bg.started)
        return true;
    pthread_attr_t a;
    pthread_t t;
    if (pthread_attr_init(&a) != 0)
        return false;
    (void)pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    bg.started = pthread_create(&t, &a, bg_main, NULL) == 0;
    pthread_attr_destroy(&a);
    return bg.started;
}

/* Whether prefetches of dev read in the background: not where the device
 * computes on the host's CPUs (props.host_compute: sim, PoCL), where the
 * read would take them from the kernels it overlaps -- measured on 2
 * cores, the same wall time and reads at 0.65-0.7 of a plain pread --
 * unless SPILLWAY_DISK_PREFETCH says "background" ("inline": never). */
static bool background_wanted(const sw_device *dev)
{
    const char *s = getenv("SPILLWAY_DISK_PREFETCH");
    if (s != NULL && strcmp(s, "background") == 0)
        return true;
    if (s != NULL && strcmp(s, "inline") == 0)
        return false;
    return !dev->props.host_compute;
}

int sw__disk_prefetch_locked(sw_device *dev, sw__buf *b)
{
    sw__assert_locked(dev);
    if (!b->on_disk || b->moving || b->state != SW_SPILLED ||
        !background_wanted(dev))
        return SW__DISK_INLINE;
    pthread_once(&bg_once, bg_register_atfork);
    bg_read *j = sw__malloc(sizeof *j);
    if (j == NULL)
        return SW__DISK_INLINE;
    pthread_mutex_lock(&bg.mu);
    bool ok = bg_start_locked();
    pthread_mutex_unlock(&bg.mu);
    if (!ok) {
        sw__free(j);
        return SW__DISK_INLINE;
    }
    b->moving = true;
    b->pins++;
    int rc = read_begin_locked(dev, b, &j->r);
    if (rc != SW_OK) {
        b->moving = false;
        pthread_cond_broadcast(&dev->moved);
        sw__unpin_locked(dev, b);
        sw__free(j);
        return rc;
    }
    j->dev = dev;
    j->base = b;
    j->next = NULL;
    dev->bg_reads++;
    pthread_mutex_lock(&bg.mu);
    if (bg.tail)
        bg.tail->next = j;
    else
        bg.head = j;
    bg.tail = j;
    pthread_cond_signal(&bg.cv);
    pthread_mutex_unlock(&bg.mu);
    return SW_OK;
}

void sw__disk_wait_reads_locked(sw_device *dev)
{
    sw__assert_locked(dev);
    while (dev->bg_reads > 0)
        sw__cond_wait_locked(dev);
}

int sw__disk_pread_locked(sw_device *dev, sw__buf *b, size_t off, void *p,
                          size_t n)
{
    sw__assert_locked(dev);
    assert(b->on_disk && b->pins > 0);
    bool fault = sw__fault_hits(dev, SW_FAULT_DISK);
    int fd = dev->disk_fd;
    uint64_t at = b->disk_off + off;
    b->moving = true; /* stays on disk until the read is done */
    dev->waiting++;
    sw__unlock(dev);
    double t0 = now_seconds();
    int err = fault ? EIO : disk_io(false, fd, p, n, at);
    double dt = now_seconds() - t0;
    sw__lock(dev);
    dev->waiting--;
    b->moving = false;
    pthread_cond_broadcast(&dev->moved);
    if (err != 0)
        return sw__errorf(SW_ERR_HOST_OOM, "%s: reading %zu bytes of buffer "
                          "'%s' from the spill file failed: %s%s", dev->name,
                          n, b->tag, strerror(err),
                          fault ? " (an injected fault)" : "");
    dev->disk_read_bytes += n;
    dev->disk_read_seconds += dt;
    return SW_OK;
}

void sw__disk_forget_locked(sw_device *dev, sw__buf *b)
{
    sw__assert_locked(dev);
    if (!b->disk_kept)
        return;
    punch(dev->disk_fd, b->disk_off, extent_of(b));
    b->disk_kept = false;
}

void sw__disk_release_locked(sw_device *dev, sw__buf *b)
{
    sw__assert_locked(dev);
    sw__disk_forget_locked(dev, b);
    if (!b->on_disk)
        return;
    punch(dev->disk_fd, b->disk_off, extent_of(b));
    b->on_disk = false;
    dev->spilled_disk -= b->alloc_size;
    /* Before its free, in the history: a replay lowers spilled_disk only
     * at an event of its own (docs/memory-history.md). */
    SW__TRACE(dev, SW_TRACE_DISK_DROP, b, b->alloc_size, 0, 0);
}

void sw__disk_close_locked(sw_device *dev)
{
    if (dev->disk_fd > 0)
        close(dev->disk_fd);
    dev->disk_fd = 0;
    dev->disk_end = 0;
}

SW_API int sw_set_host_budget(sw_device *dev, uint64_t bytes)
{
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    dev->host_budget = bytes;
    SW__TRACE(dev, SW_TRACE_HOST_BUDGET, NULL, 0, 0, bytes);
    /* Met now as far as it can be; a write to disk that fails leaves its
     * buffer in host memory, and the budget stands (as the device's). */
    (void)sw__host_room_locked(dev, 0, true);
    sw__unlock(dev);
    return SW_OK;
}

SW_API int sw_get_host_budget(sw_device *dev, uint64_t *bytes)
{
    if (bytes == NULL)
        return sw__errorf(SW_ERR_INVALID_ARG, "bytes is NULL");
    *bytes = 0;
    int rc = sw__device_enter(dev);
    if (rc != SW_OK)
        return rc;
    *bytes = dev->host_budget;
    sw__unlock(dev);
    return SW_OK;
}
