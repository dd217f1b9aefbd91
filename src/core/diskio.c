/*
 * diskio.c -- the disk tier's I/O engine: transfers between host memory
 * and the spill file (disk.c) with pwrite and pread; reads cut in 1 MiB
 * pieces that the calling thread and a few I/O threads do at once, writes
 * done by the caller.
 *
 * Why threads, and not io_uring or the caller alone: the spill file's I/O
 * is copies between user memory and the page cache (the kernel writes the
 * dirty pages back later, if ever: the file is unlinked and its extents
 * are punched as they are read back).  A copy is CPU work, which a single
 * thread does at one core's memory bandwidth; io_uring does buffered
 * reads of cached pages, and buffered writes where the filesystem can,
 * inline in the submitting thread, so its requests run one after another
 * too.  bench/bench_disk.c measures the three on the same pieces
 * (docs/performance.md has the figures): reads in pieces at once ran at
 * 1.5-1.9x plain pread, io_uring's at 0.86-1.01x.  Writes are the
 * caller's alone (see sw__dio_run).
 *
 * The caller always works on its own transfers as well, so it never waits
 * for a busy pool: with every I/O thread taken by other devices' calls,
 * or none started (a failed pthread_create, SPILLWAY_DISK_THREADS=0), it
 * does them all itself.
 *
 * Locks: pool.mu is a leaf, never taken with a device lock held (disk.c
 * releases the device lock around every transfer).  A child of fork()
 * starts with no I/O threads.
 */
#include "core/internal.h"
#include "core/diskio.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#define DIO_PIECE ((size_t)1 << 20)
#define DIO_MAX_THREADS 16

/* The transfers of one sw__dio_run call, while pieces of them are left. */
typedef struct dio_batch {
    struct dio_batch *next;
    sw__dio *v;
    size_t n;
    size_t cur;      /* the transfer and offset of the next piece to take */
    size_t cur_at;
    size_t left;     /* pieces not yet done */
} dio_batch;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t work; /* a batch has pieces to take */
    pthread_cond_t done; /* a batch's last piece is done */
    dio_batch *head;     /* batches with pieces to take, oldest first */
    int started;
    int want;            /* -1: not read yet */
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
          PTHREAD_COND_INITIALIZER, NULL, 0, -1};

static void pool_after_fork(void)
{
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.work, NULL);
    pthread_cond_init(&pool.done, NULL);
    pool.head = NULL;
    pool.started = 0;
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void register_atfork(void)
{
    (void)pthread_atfork(NULL, NULL, pool_after_fork);
}

/* pwrite/pread of the whole range, through interruptions and short
 * transfers; 0 or an errno. */
static int io_all(bool write, int fd, char *p, size_t n, uint64_t off)
{
    while (n > 0) {
        ssize_t k = write ? pwrite(fd, p, n, (off_t)off)
                          : pread(fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return errno;
        if (k == 0)
            return write ? ENOSPC : EIO;
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

/* Under pool.mu: take b's next piece (false when none is left to take);
 * a batch whose last piece is taken leaves the list. */
static bool take_locked(dio_batch *b, size_t *i, size_t *at, size_t *len)
{
    while (b->cur < b->n && b->cur_at >= b->v[b->cur].n) {
        b->cur++;
        b->cur_at = 0;
    }
    if (b->cur >= b->n)
        return false;
    *i = b->cur;
    *at = b->cur_at;
    size_t rest = b->v[b->cur].n - b->cur_at;
    *len = rest < DIO_PIECE ? rest : DIO_PIECE;
    b->cur_at += *len;
    return true;
}

static void unlink_locked(dio_batch *b)
{
    for (dio_batch **pp = &pool.head; *pp != NULL; pp = &(*pp)->next)
        if (*pp == b) {
            *pp = b->next;
            return;
        }
}

/* Under pool.mu: do one piece of b (the lock released meanwhile). */
static void do_piece_locked(dio_batch *b, size_t i, size_t at, size_t len)
{
    sw__dio *d = &b->v[i];
    pthread_mutex_unlock(&pool.mu);
    int err = io_all(d->write, d->fd, (char *)d->p + at, len, d->off + at);
    pthread_mutex_lock(&pool.mu);
    if (err != 0 && d->err == 0)
        d->err = err;
    if (--b->left == 0)
        pthread_cond_broadcast(&pool.done);
}

static void *io_thread(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        dio_batch *b = pool.head;
        size_t i, at, len;
        if (b == NULL) {
            pthread_cond_wait(&pool.work, &pool.mu);
            continue;
        }
        if (!take_locked(b, &i, &at, &len)) {
            unlink_locked(b);
            continue;
        }
        do_piece_locked(b, i, at, len);
    }
    return NULL;
}

int sw__dio_threads(void)
{
    pthread_mutex_lock(&pool.mu);
    if (pool.want < 0) {
        const char *s = getenv("SPILLWAY_DISK_THREADS");
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        long want = cpus > 1 ? cpus - 1 : 0;
        if (want > 3)
            want = 3;
        if (s != NULL && s[0] != '\0') {
            char *end = NULL;
            long v = strtol(s, &end, 10);
            if (end != s && *end == '\0' && v >= 0)
                want = v > DIO_MAX_THREADS ? DIO_MAX_THREADS : v;
        }
        pool.want = (int)want;
    }
    int want = pool.want;
    pthread_mutex_unlock(&pool.mu);
    return want;
}

/* Under pool.mu: the I/O threads started, as far as they can be. */
static void start_locked(void)
{
    while (pool.started < pool.want) {
        pthread_t t;
        if (sw__thread_create(&t, io_thread, NULL) != 0)
            return; /* the caller does the work */
        pthread_detach(t);
        pool.started++;
    }
}

void sw__dio_run_alone(sw__dio *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        v[i].err = io_all(v[i].write, v[i].fd, v[i].p, v[i].n, v[i].off);
}

void sw__dio_run(sw__dio *v, size_t n)
{
    size_t pieces = 0;
    bool reads = false;
    for (size_t i = 0; i < n; i++) {
        v[i].err = 0;
        pieces += (v[i].n + DIO_PIECE - 1) / DIO_PIECE;
        reads |= !v[i].write;
    }
    /* Writes by the caller alone: buffered writes to one file take its
     * inode's lock whole (ext4, xfs), so pieces written at once wait for
     * each other, and measured 0.75-1.12x of plain pwrite against
     * 1.5-1.9x for reads (bench_disk). */
    if (pieces <= 1 || !reads || sw__dio_threads() == 0) {
        for (size_t i = 0; i < n; i++)
            v[i].err = io_all(v[i].write, v[i].fd, v[i].p, v[i].n,
                              v[i].off);
        return;
    }
    pthread_once(&atfork_once, register_atfork);
    dio_batch b = {NULL, v, n, 0, 0, pieces};
    pthread_mutex_lock(&pool.mu);
    start_locked();
    dio_batch **tail = &pool.head;
    while (*tail != NULL)
        tail = &(*tail)->next;
    *tail = &b;
    pthread_cond_broadcast(&pool.work);
    /* The caller's share: pieces of its own batch until none is left to
     * take, then the wait for those the I/O threads took. */
    size_t i, at, len;
    while (take_locked(&b, &i, &at, &len))
        do_piece_locked(&b, i, at, len);
    unlink_locked(&b);
    while (b.left > 0)
        pthread_cond_wait(&pool.done, &pool.mu);
    pthread_mutex_unlock(&pool.mu);
}
