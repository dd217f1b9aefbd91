/*
 * main.c -- the C suite's runner.
 *
 *   test_spillway [--list] [SUBSTRING...]
 *
 * Runs every test in tests.h (or those whose name contains any SUBSTRING),
 * each in its own fork()ed child and process group, with a timeout
 * ($SW_TEST_TIMEOUT seconds, default 120).  Prints one line per test and
 * ends with "N passed, N failed, N skipped"; exits 1 if anything failed.
 *
 * The runner itself never opens a device: each child starts with a fresh
 * library state, so a test may set SPILLWAY_* variables before its first
 * open.
 */
#include "test.h"
#include "tests.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct test_entry {
    const char *name;
    void (*fn)(void);
} test_entry;

static const test_entry tests[] = {
#define SW__ENTRY(name) {#name, test_##name},
    SW_TEST_LIST(SW__ENTRY)
#undef SW__ENTRY
};
#define NTESTS (sizeof tests / sizeof tests[0])

/* ------------------------------------------------------------------------
 * Child side: reporting to the runner
 * ---------------------------------------------------------------------- */

/* Write end of the pipe to the runner; -1 in the runner itself. */
static int report_fd = -1;

/* One record per report: a kind byte ('F' fail, 'S' skip), the text, NUL.
 * Written with one write() of at most PIPE_BUF bytes, so concurrent reports
 * from several threads do not interleave. */
static void report(char kind, const char *text)
{
    char rec[4000];
    size_t n = strlen(text);
    if (n > sizeof rec - 2)
        n = sizeof rec - 2;
    rec[0] = kind;
    memcpy(rec + 1, text, n);
    rec[n + 1] = '\0';
    if (report_fd >= 0) {
        ssize_t w;
        do {
            w = write(report_fd, rec, n + 2);
        } while (w < 0 && errno == EINTR);
    } else {
        fprintf(stderr, "%c %s\n", kind, text);
    }
}

void test_fail(const char *file, int line, const char *fmt, ...)
{
    char msg[3800];
    char text[3990];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
    snprintf(text, sizeof text, "%s:%d: %s", base ? base + 1 : file, line,
             msg);
    report('F', text);
    fflush(NULL);
    _exit(1);
}

void test_skip(const char *fmt, ...)
{
    char msg[3900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    report('S', msg);
    fflush(NULL);
    _exit(0);
}

/* ------------------------------------------------------------------------
 * Runner side
 * ---------------------------------------------------------------------- */

static volatile sig_atomic_t running_pgid = 0;

static void on_interrupt(int sig)
{
    /* Take the running test's process group down with the runner. */
    if (running_pgid > 0)
        kill(-(pid_t)running_pgid, SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int selected(const char *name, int argc, char **argv, int first)
{
    if (first >= argc)
        return 1;
    for (int i = first; i < argc; i++)
        if (strstr(name, argv[i]) != NULL)
            return 1;
    return 0;
}

/* Drain whatever the child reported; return the first record. */
static void read_report(int fd, char *kind, char *text, size_t len)
{
    char buf[16384];
    size_t have = 0;
    for (;;) {
        ssize_t r = read(fd, buf + have, sizeof buf - 1 - have);
        if (r > 0) {
            have += (size_t)r;
            if (have >= sizeof buf - 1)
                break;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        break; /* EOF, or EAGAIN: a grandchild still holds the pipe */
    }
    buf[have] = '\0';
    *kind = 0;
    text[0] = '\0';
    if (have > 0 && len > 0) {
        *kind = buf[0];
        size_t n = strlen(buf + 1);
        if (n > len - 1)
            n = len - 1; /* keep the first record's head */
        memcpy(text, buf + 1, n);
        text[n] = '\0';
    }
}

typedef enum { RES_OK, RES_FAIL, RES_SKIP } result_kind;

static result_kind run_one(const test_entry *t, double timeout, char *why,
                           size_t why_len, double *elapsed)
{
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(why, why_len, "pipe: %s", strerror(errno));
        return RES_FAIL;
    }
    fflush(NULL);
    double t0 = now_s();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, why_len, "fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return RES_FAIL;
    }
    if (pid == 0) {
        /* The test's own process group, so that a timeout also ends any
         * process the test forked. */
        setpgid(0, 0);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        close(fds[0]);
        report_fd = fds[1];
        t->fn();
        test_check_devices_empty();
        fflush(NULL);
        /* exit, not _exit: LeakSanitizer checks host memory at exit. */
        exit(0);
    }
    setpgid(pid, pid);
    running_pgid = pid;
    close(fds[1]);
    fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);

    int status = 0;
    int timed_out = 0;
    long sleep_us = 200;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR) {
            snprintf(why, why_len, "waitpid: %s", strerror(errno));
            running_pgid = 0;
            close(fds[0]);
            return RES_FAIL;
        }
        if (now_s() - t0 > timeout) {
            timed_out = 1;
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            break;
        }
        usleep((useconds_t)sleep_us);
        if (sleep_us < 10000)
            sleep_us *= 2;
    }
    /* Whatever the test left behind in its group goes with it. */
    kill(-pid, SIGKILL);
    running_pgid = 0;
    *elapsed = now_s() - t0;

    char kind;
    char text[8192];
    read_report(fds[0], &kind, text, sizeof text);
    close(fds[0]);

    if (timed_out) {
        snprintf(why, why_len, "timed out after %g s%s%s", timeout,
                 kind == 'F' ? "; reported: " : "", kind == 'F' ? text : "");
        return RES_FAIL;
    }
    if (kind == 'F') {
        snprintf(why, why_len, "%s", text);
        return RES_FAIL;
    }
    if (WIFSIGNALED(status)) {
        snprintf(why, why_len, "killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
        return RES_FAIL;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
        snprintf(why, why_len,
                 "exited with status %d without reporting why (a sanitizer "
                 "report above?)",
                 WEXITSTATUS(status));
        return RES_FAIL;
    }
    if (kind == 'S') {
        snprintf(why, why_len, "%s", text);
        return RES_SKIP;
    }
    return RES_OK;
}

int main(int argc, char **argv)
{
    int first = 1;
    if (argc > 1 && (strcmp(argv[1], "--list") == 0 ||
                     strcmp(argv[1], "-l") == 0)) {
        for (size_t i = 0; i < NTESTS; i++)
            if (selected(tests[i].name, argc, argv, 2))
                printf("%s\n", tests[i].name);
        return 0;
    }
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 ||
                     strcmp(argv[1], "-h") == 0)) {
        printf("usage: %s [--list] [SUBSTRING...]\n"
               "  runs the tests whose names contain any SUBSTRING (all by "
               "default)\n"
               "  env: SW_TEST_DEVICE (default sim:0), SW_TEST_TIMEOUT "
               "(seconds per test, default 120)\n",
               argv[0]);
        return 0;
    }

    double timeout = 120.0;
    const char *env = getenv("SW_TEST_TIMEOUT");
    if (env != NULL && env[0] != '\0') {
        char *end;
        double v = strtod(env, &end);
        if (*end != '\0' || !(v > 0)) {
            fprintf(stderr, "SW_TEST_TIMEOUT=%s is not a positive number\n",
                    env);
            return 2;
        }
        timeout = v;
    }

    signal(SIGINT, on_interrupt);
    signal(SIGTERM, on_interrupt);
    setvbuf(stdout, NULL, _IOLBF, 0);

    int passed = 0, failed = 0, skipped = 0;
    for (size_t i = 0; i < NTESTS; i++) {
        const test_entry *t = &tests[i];
        if (!selected(t->name, argc, argv, first))
            continue;
        char why[8300];
        double elapsed = 0;
        why[0] = '\0';
        switch (run_one(t, timeout, why, sizeof why, &elapsed)) {
        case RES_OK:
            passed++;
            printf("ok   %s (%.2fs)\n", t->name, elapsed);
            break;
        case RES_FAIL:
            failed++;
            printf("FAIL %s: %s\n", t->name, why);
            break;
        case RES_SKIP:
            skipped++;
            printf("skip %s: %s\n", t->name, why);
            break;
        }
        fflush(stdout);
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
