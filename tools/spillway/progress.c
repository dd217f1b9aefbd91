/*
 * progress.c -- the progress line (see progress.h).
 */
/* isatty, fileno and clock_gettime are POSIX, not C11. */
#define _POSIX_C_SOURCE 200809L

#include "progress.h"

#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { BAR_WIDTH = 20 };

/* Set while a bar is on the terminal without its newline: a message
 * printed then must end that line first. */
static bool bar_open;

void progress_end_line(void)
{
    if (bar_open) {
        fputc('\n', stdout);
        fflush(stdout);
        bar_open = false;
    }
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void progress_draw(progress *pg)
{
    sw_memory_info mi;
    char mem[80] = "";
    if (sw_memory_info_get(pg->dev, &mi) == SW_OK)
        snprintf(mem, sizeof mem, "in use %s  spilled %s",
                 cli_bytes(mi.in_use), cli_bytes(mi.spilled));
    if (!pg->tty) {
        printf("run %d: %zu/%zu steps  %s\n", pg->run, pg->done, pg->total,
               mem);
        return;
    }
    char bar[BAR_WIDTH + 1];
    size_t full = pg->done * BAR_WIDTH / pg->total;
    memset(bar, '#', full);
    memset(bar + full, '.', BAR_WIDTH - full);
    bar[BAR_WIDTH] = '\0';
    /* \033[K clears what a longer previous line left on the right. */
    printf("\rrun %d [%s] %zu/%zu steps  %s\033[K", pg->run, bar, pg->done,
           pg->total, mem);
    fflush(stdout);
    bar_open = true;
}

void progress_begin(progress *pg, sw_device *dev, int run, size_t total)
{
    const char *term = getenv("TERM");
    memset(pg, 0, sizeof *pg);
    pg->dev = dev;
    pg->run = run;
    pg->total = total;
    pg->tty = isatty(fileno(stdout)) && !(term && strcmp(term, "dumb") == 0);
    pg->next_line = (total + 3) / 4;
    if (pg->tty)
        progress_draw(pg);
}

void progress_step(progress *pg)
{
    pg->done++;
    if (pg->tty) {
        /* At most 20 redraws a second: a terminal is slower than a step. */
        double t = now_seconds();
        if (pg->done < pg->total && t - pg->last_draw < 0.05)
            return;
        pg->last_draw = t;
        progress_draw(pg);
    } else if (pg->done >= pg->next_line || pg->done == pg->total) {
        progress_draw(pg);
        pg->next_line += (pg->total + 3) / 4;
    }
}
