/*
 * commands.h -- the map of the spillway program: one entry point per
 * command (each in its own cmd_*.c), and the limits their options take,
 * which main.c's help text quotes.
 */
#ifndef SPILLWAY_TOOLS_COMMANDS_H
#define SPILLWAY_TOOLS_COMMANDS_H

#include "cli.h"

/* spillway demo --steps: at least 4, so that the recurrence has a past to
 * draw on; at most 4096, so that a run stays short on any device.  Macros,
 * not an enum, so that the help text can spell them (CLI_STR). */
#define DEMO_STEPS_MIN 4
#define DEMO_STEPS_MAX 4096
#define DEMO_STEPS_DEFAULT 32

/* spillway tour --rounds: rounds of the cache step. */
#define TOUR_ROUNDS_MIN 1
#define TOUR_ROUNDS_MAX 1000
#define TOUR_ROUNDS_DEFAULT 3

/* cmd_info.c */
int cmd_info(const cli_command *self, int argc, char **argv);
int cmd_devices(const cli_command *self, int argc, char **argv);
/* cmd_demo.c (its workload: demo_workload.h) */
int cmd_demo(const cli_command *self, int argc, char **argv);
/* cmd_tour.c */
int cmd_tour(const cli_command *self, int argc, char **argv);
/* cmd_top.c */
int cmd_top(const cli_command *self, int argc, char **argv);
/* cmd_plot.c (runs python3 -m spillway.plot) */
int cmd_plot(const cli_command *self, int argc, char **argv);

#endif /* SPILLWAY_TOOLS_COMMANDS_H */
