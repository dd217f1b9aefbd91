/*
 * export.c -- live figures for other processes: with SPILLWAY_STATS=PATH
 * set when the first device is opened, a background thread rewrites PATH
 * a few times a second with every open device's memory figures (one JSON
 * object), so that `spillway top PATH` can watch a running program from
 * another terminal, as nvidia-smi does but with spilled and cached bytes.
 *
 * The file is written next to PATH and renamed over it, so a reader never
 * sees half of one.  Nothing of this runs when the variable is unset.
 */
#include "core/internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PERIOD_MS 250

static char path[4096];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void write_once(void)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    fprintf(f, "{\"format\":\"spillway-stats\",\"version\":1,\"pid\":%d,"
               "\"time\":%.3f,\"period_ms\":%d,\"devices\":[",
            (int)getpid(), (double)now.tv_sec + now.tv_nsec * 1e-9,
            PERIOD_MS);
    int first = 1;
    for (size_t i = 0;; i++) {
        sw_device *dev = sw__device_at(i);
        if (dev == NULL)
            break;
        if (!sw__device_valid(dev))
            continue;
        sw__lock(dev);
        bool open = dev->b != NULL;
        sw_memory_info m;
        if (open)
            sw__memory_info_locked(dev, &m);
        sw__unlock(dev);
        if (!open)
            continue;
        fprintf(f, "%s\n{\"name\":\"%s\",\"in_use\":%" PRIu64
                   ",\"peak\":%" PRIu64 ",\"cached\":%" PRIu64
                   ",\"spilled\":%" PRIu64 ",\"budget\":%" PRIu64
                   ",\"device_free\":%" PRIu64 ",\"device_total\":%" PRIu64
                   ",\"device_free_known\":%d,\"live_buffers\":%" PRIu64
                   ",\"allocs\":%" PRIu64 ",\"spills\":%" PRIu64
                   ",\"restores\":%" PRIu64 ",\"spilled_bytes_total\":%" PRIu64
                   ",\"restored_bytes_total\":%" PRIu64 ",\"ooms\":%" PRIu64
                   ",\"gc_runs\":%" PRIu64 ",\"host_copies\":%" PRIu64
                   ",\"clean_evictions\":%" PRIu64
                   ",\"host_budget\":%" PRIu64 ",\"spilled_disk\":%" PRIu64
                   ",\"disk_write_bytes\":%" PRIu64
                   ",\"disk_read_bytes\":%" PRIu64 "}",
                first ? "" : ",", dev->name, m.in_use, m.peak, m.cached,
                m.spilled, m.budget, m.device_free, m.device_total,
                m.device_free_known, m.live_buffers, m.allocs, m.spills,
                m.restores, m.spilled_bytes_total, m.restored_bytes_total,
                m.ooms, m.gc_runs, m.host_copies, m.clean_evictions,
                m.host_budget, m.spilled_disk, m.disk_write_bytes,
                m.disk_read_bytes);
        first = 0;
    }
    fputs("\n]}\n", f);
    if (fclose(f) == 0)
        (void)rename(tmp, path);
    else
        (void)unlink(tmp);
}

static void *exporter(void *arg)
{
    (void)arg;
    for (;;) {
        write_once();
        struct timespec ts = {0, PERIOD_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void start(void)
{
    const char *p = getenv("SPILLWAY_STATS");
    if (p == NULL || p[0] == '\0' || strlen(p) >= sizeof path)
        return;
    snprintf(path, sizeof path, "%s", p);
    pthread_t t;
    /* Without a thread there are simply no live figures. */
    if (sw__thread_create(&t, exporter, NULL) == 0)
        pthread_detach(t);
}

void sw__export_start(void) { pthread_once(&once, start); }
