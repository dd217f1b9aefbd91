/*
 * progress.h -- the progress line of a long command (spillway demo): one
 * line redrawn in place on a terminal, a plain line at each quarter on
 * anything else (a log, a pipe), so logs stay readable.
 */
#ifndef SPILLWAY_TOOLS_PROGRESS_H
#define SPILLWAY_TOOLS_PROGRESS_H

#include "spillway.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct progress {
    sw_device *dev; /* its in_use and spilled are shown */
    int run;        /* "run N" */
    size_t done, total;
    bool tty;
    double last_draw;
    size_t next_line; /* not a terminal: the count of the next line */
} progress;

/* Start counting total steps of run number run on dev; on a terminal, draw
 * the empty bar. */
void progress_begin(progress *pg, sw_device *dev, int run, size_t total);

/* One more step done; redraws when it is time to. */
void progress_step(progress *pg);

/* End the bar's line if one is on the terminal without its newline: any
 * message printed while a bar is shown must call this first (cli_report
 * and cli_mismatch do). */
void progress_end_line(void);

#endif /* SPILLWAY_TOOLS_PROGRESS_H */
