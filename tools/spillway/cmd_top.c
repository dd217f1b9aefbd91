/*
 * cmd_top.c -- spillway top: watch the device memory of a running program
 * from another terminal.  The program runs with SPILLWAY_STATS=PATH, which
 * makes the library rewrite PATH with every open device's figures a few
 * times a second (src/core/export.c); this command reads that file and
 * shows a table, like nvidia-smi, with the cached and spilled bytes
 * nvidia-smi cannot see.
 *
 * The file is a small JSON object of flat per-device records written only
 * by the library, so a reader of exactly that shape is enough here: each
 * device record is found by its "name" and read field by field.
 */
#include "commands.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { TOP_MAX_DEVICES = 64, TOP_FILE_MAX = 1 << 20 };

typedef struct {
    char name[32];
    uint64_t in_use, peak, cached, spilled, budget, dfree, dtotal;
    uint64_t disk; /* of spilled: in the spill file (the host budget's) */
    uint64_t buffers, spills, restores, ooms, gc_runs;
    int free_known;
} top_row;

typedef struct {
    long pid;
    double time;
    size_t n;
    top_row rows[TOP_MAX_DEVICES];
} top_frame;

/* The number after "key": in [s, end), or 0. */
static uint64_t field(const char *s, const char *end, const char *key)
{
    char pat[48];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    size_t plen = strlen(pat);
    for (const char *p = s; p + plen < end; p++) {
        if (memcmp(p, pat, plen) == 0)
            return strtoull(p + plen, NULL, 10);
    }
    return 0;
}

/* 0, or -1 with errno / a message when the file is not a stats file. */
static int read_frame(const char *path, top_frame *fr, char *why,
                      size_t why_len)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(why, why_len, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    static char buf[TOP_FILE_MAX];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    if (strstr(buf, "\"format\":\"spillway-stats\"") == NULL) {
        snprintf(why, why_len, "%s is not a spillway stats file (written "
                 "by a program run with SPILLWAY_STATS=%s)", path, path);
        return -1;
    }
    const char *end = buf + n;
    memset(fr, 0, sizeof *fr);
    const char *p = strstr(buf, "\"pid\":");
    fr->pid = p ? strtol(p + 6, NULL, 10) : 0;
    p = strstr(buf, "\"time\":");
    fr->time = p ? strtod(p + 7, NULL) : 0;
    for (p = strstr(buf, "{\"name\":\""); p && fr->n < TOP_MAX_DEVICES;
         p = strstr(p + 1, "{\"name\":\"")) {
        const char *rec_end = strchr(p, '}');
        if (rec_end == NULL)
            rec_end = end;
        top_row *r = &fr->rows[fr->n++];
        const char *nm = p + 9;
        size_t len = strcspn(nm, "\"");
        snprintf(r->name, sizeof r->name, "%.*s", (int)len, nm);
        r->in_use = field(p, rec_end, "in_use");
        r->peak = field(p, rec_end, "peak");
        r->cached = field(p, rec_end, "cached");
        r->spilled = field(p, rec_end, "spilled");
        r->disk = field(p, rec_end, "spilled_disk");
        r->budget = field(p, rec_end, "budget");
        r->dfree = field(p, rec_end, "device_free");
        r->dtotal = field(p, rec_end, "device_total");
        r->free_known = (int)field(p, rec_end, "device_free_known");
        r->buffers = field(p, rec_end, "live_buffers");
        r->spills = field(p, rec_end, "spills");
        r->restores = field(p, rec_end, "restores");
        r->ooms = field(p, rec_end, "ooms");
        r->gc_runs = field(p, rec_end, "gc_runs");
    }
    return 0;
}

static void print_frame(const char *path, const top_frame *fr)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    double age = (double)now.tv_sec + now.tv_nsec * 1e-9 - fr->time;
    bool alive = fr->pid > 0 && (kill((pid_t)fr->pid, 0) == 0 ||
                                 errno == EPERM);
    printf("spillway top: %s, pid %ld%s, updated %.1f s ago\n\n", path,
           fr->pid, alive ? "" : " (exited)", age < 0 ? 0.0 : age);
    printf("%-10s %11s %11s %11s %11s %11s %11s %23s %8s %7s %8s %5s "
           "%5s\n",
           "device", "in use", "peak", "cached", "spilled", "on disk",
           "budget", "device free / total", "buffers", "spills", "restores",
           "ooms", "gc");
    for (size_t i = 0; i < fr->n; i++) {
        const top_row *r = &fr->rows[i];
        char fr_tot[48];
        snprintf(fr_tot, sizeof fr_tot, "%s / %s",
                 r->free_known ? cli_bytes(r->dfree) : "?",
                 r->dtotal ? cli_bytes(r->dtotal) : "?");
        printf("%-10s %11s %11s %11s %11s %11s %11s %23s %8" PRIu64
               " %7" PRIu64 " %8" PRIu64 " %5" PRIu64 " %5" PRIu64 "\n",
               r->name, cli_bytes(r->in_use), cli_bytes(r->peak),
               cli_bytes(r->cached), cli_bytes(r->spilled),
               cli_bytes(r->disk),
               r->budget ? cli_bytes(r->budget) : "none", fr_tot, r->buffers,
               r->spills, r->restores, r->ooms, r->gc_runs);
    }
    if (fr->n == 0)
        printf("(no device open)\n");
}

static volatile sig_atomic_t stop;
static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

int cmd_top(const cli_command *self, int argc, char **argv)
{
    const char *path = NULL;
    double interval = 1.0;
    long count = -1; /* forever */
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            cli_command_help(stdout, self);
            return 0;
        } else if (strcmp(a, "--once") == 0) {
            count = 1;
        } else if (strcmp(a, "--interval") == 0 || strcmp(a, "--count") == 0) {
            if (i + 1 >= argc)
                return cli_usage_error(self, "%s needs a value", a);
            char *end;
            errno = 0;
            double v = strtod(argv[++i], &end);
            if (*end || errno || v <= 0 || v > 3600)
                return cli_usage_error(self, "%s: '%s' is not a number "
                                       "above 0", a, argv[i]);
            if (a[2] == 'i')
                interval = v;
            else
                count = (long)v;
        } else if (a[0] == '-') {
            return cli_usage_error(self, "unknown option '%s'", a);
        } else if (path == NULL) {
            path = a;
        } else {
            return cli_usage_error(self, "unexpected argument '%s'", a);
        }
    }
    if (path == NULL)
        path = getenv("SPILLWAY_STATS");
    if (path == NULL || path[0] == '\0')
        return cli_usage_error(self, "no stats file: give PATH (or set "
                               "SPILLWAY_STATS)");
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    bool tty = isatty(fileno(stdout)) && count != 1;
    static top_frame fr;
    for (long k = 0; !stop && (count < 0 || k < count); k++) {
        char why[512];
        if (read_frame(path, &fr, why, sizeof why) != 0) {
            fprintf(stderr, "%s: top: %s\n", cli_progname, why);
            return 1;
        }
        if (tty)
            fputs("\033[H\033[J", stdout);
        print_frame(path, &fr);
        fflush(stdout);
        if (count >= 0 && k + 1 >= count)
            break;
        struct timespec ts = {(time_t)interval,
                              (long)((interval - (double)(time_t)interval) *
                                     1e9)};
        nanosleep(&ts, NULL);
    }
    return 0;
}
