/*
 * main.c -- the spillway program: look at devices, run the main job (a
 * pipeline whose live arrays outgrow a memory budget), walk through the
 * library step by step.
 *
 * The commands are rows of one table: `spillway --help` (and `spillway
 * help`) lists them, `spillway COMMAND --help` (and `spillway help
 * COMMAND`) prints a row's usage and options, and main dispatches on the
 * name, so a command is added in one place.  Each command lives in its own
 * cmd_*.c (commands.h is the map); cli.h holds what they share.
 */
#include "commands.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * The table
 * ---------------------------------------------------------------------- */

static int cmd_help(const cli_command *self, int argc, char **argv);

/* The option of every command that opens one device: one wording, so the
 * commands cannot drift apart. */
#define DEVICE_OPTION                                                         \
    "  --device SPEC         device to use (default: $SPILLWAY_DEVICE or "    \
    "sim:0)\n"

/* Printed after the options of a command that reads a SIZE. */
#define SIZE_NOTE                                                             \
    "SIZE is a byte count with an optional binary unit K, M, G, T or P\n"     \
    "(512M = 512 MiB; 1.5G and 2GiB work too).\n"

static const cli_command commands[] = {
    {
        .name = "info",
        .run = cmd_info,
        .summary = "list every device with its memory",
        .args = "",
        .about = "Every device of every backend present, with its memory in "
                 "a table: total,\nfree, in use, cached, peak and budget.  "
                 "A backend that offers no device\nsays why in one line.\n",
    },
    {
        .name = "devices",
        .run = cmd_devices,
        .summary = "print device specs, one per line",
        .args = "",
        .about = "The spec of every device (sim:0, opencl:0, ...), one per "
                 "line, for scripts.\n",
    },
    {
        .name = "demo",
        .run = cmd_demo,
        .summary = "the main job: a pipeline that outgrows a budget",
        .args = "[OPTIONS]",
        .about = "The main job: a pipeline whose live arrays grow to several "
                 "times a budget\nwhile each step fits, run without and then "
                 "with the budget; shows spills,\nrestores, time and "
                 "slowdown, and checks that every output is bit-identical.\n",
        .options =
            DEVICE_OPTION
            "  --budget SIZE         budget of the second run (default: a "
            "quarter of the\n"
            "                        live set, at least one step's arrays)\n"
            "  --steps N             forward steps, so arrays kept live, "
            CLI_STR(DEMO_STEPS_MIN) " to " CLI_STR(DEMO_STEPS_MAX) "\n"
            "                        (default " CLI_STR(DEMO_STEPS_DEFAULT)
            "); as many backward steps follow\n"
            "  --repeat N            run each N times, keep the fastest "
            "(default 3, up to 9\n"
            "                        while they take under a second)\n"
            "  --sweep               32, 128 and 512 steps under budgets of "
            "1/2, 1/4 and\n"
            "                        1/8 of the live set, in one table\n"
            "  --json                print the figures as one JSON object, "
            "each repeat's too\n"
            "  --trace DIR           write each run's memory history to "
            "DIR/runN.json\n"
            "                        (and its picture, with spillway plot)\n"
            "  --no-prefetch         the backward pass does not prefetch\n"
            "  --no-advise           nor advise consumed arrays cold\n"
            "  --host-budget SIZE    a host budget for run 2 (or 'quarter': "
            "a quarter of\n"
            "                        what it spills): past it, to disk\n",
        .notes = SIZE_NOTE,
    },
    {
        .name = "tour",
        .run = cmd_tour,
        .summary = "walk through allocation, kernels, peaks, cache, budget",
        .args = "[OPTIONS]",
        .about = "A step-by-step walk through allocation, data, the built-in "
                 "kernels (every\nresult checked), nested peak scopes, the "
                 "cache and a memory budget.\n",
        .options =
            DEVICE_OPTION
            "  --budget SIZE         budget for the budget step (default: "
            "what is held\n"
            "                        then plus 1 MiB)\n"
            "  --rounds N            rounds of the cache step, "
            CLI_STR(TOUR_ROUNDS_MIN) " to " CLI_STR(TOUR_ROUNDS_MAX)
            " (default " CLI_STR(TOUR_ROUNDS_DEFAULT) ")\n",
        .notes = SIZE_NOTE,
    },
    {
        .name = "top",
        .run = cmd_top,
        .summary = "watch a running program's device memory",
        .args = "[PATH]",
        .about = "Live per-device figures of a program run with "
                 "SPILLWAY_STATS=PATH (the\nlibrary rewrites PATH a few "
                 "times a second): in use, peak, cached, spilled,\nbudget, "
                 "device free/total, buffers, spills, restores, OOMs and "
                 "collections.\nPATH defaults to $SPILLWAY_STATS.  Ctrl-C "
                 "ends it.\n",
        .options =
            "  --interval SECONDS    time between refreshes (default 1)\n"
            "  --count N             stop after N refreshes\n"
            "  --once                print once and exit (for scripts)\n",
    },
    {
        .name = "plot",
        .run = cmd_plot,
        .summary = "draw a recorded memory history as a PNG",
        .args = "TRACE",
        .about = "The timeline of a memory history dumped with "
                 "sw_trace_dump or\nspillway.dump_memory_history: in use, "
                 "cached and spilled stacked over time,\nthe budget as a "
                 "line, spills and restores marked, OOMs flagged, the "
                 "largest\nholders labelled.  Drawn by python3 -m "
                 "spillway.plot (matplotlib:\npip install spillway[plot]); "
                 "its options are passed on.\n",
        .options =
            "  -o, --output OUT.png  where to write (default: TRACE.png)\n"
            "  --title TEXT          the picture's title\n",
    },
    {
        .name = "help",
        .run = cmd_help,
        .summary = "show this help, or a command's",
        .args = "[COMMAND]",
        .about = "This help, or a command's usage and options (the same "
                 "as\n'spillway COMMAND --help').\n",
    },
};

enum { NCOMMANDS = sizeof commands / sizeof commands[0] };

static const cli_command *find_command(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++) {
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    }
    return NULL;
}

/* ------------------------------------------------------------------------
 * The program's help
 * ---------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: %s COMMAND [OPTIONS]\n"
               "\n"
               "Accelerator memory manager: accounting, caching, budgets,\n"
               "spilling to host memory.\n"
               "\n"
               "commands:\n",
            cli_progname);
    for (size_t i = 0; i < NCOMMANDS; i++) {
        const cli_command *c = &commands[i];
        char synopsis[64];
        snprintf(synopsis, sizeof synopsis, "%s%s%s", c->name,
                 c->args[0] ? " " : "", c->args);
        fprintf(f, "  %-*s%s\n", CLI_HELP_COLUMN - 2, synopsis, c->summary);
    }
    fprintf(f, "\n  %-*s%s\n  %-*s%s\n", CLI_HELP_COLUMN - 2, "-h, --help",
            "show this help", CLI_HELP_COLUMN - 2, "-V, --version",
            "show the version");
    fprintf(f, "\n'%s COMMAND --help' shows a command's options.\n"
               "\n"
               "Environment: SPILLWAY_DEVICE (default device), "
               "SPILLWAY_SIM_MEMORY (simulated\ndevice size, e.g. 512M), "
               "SPILLWAY_SIM_DEVICES (number of simulated devices),\n"
               "SPILLWAY_STATS (a file for spillway top).\n",
            cli_progname);
}

/* "spillway: <message>", a blank line and the program's help, on stderr;
 * returns 2.  (A command's own usage errors are cli_usage_error's.) */
static int usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", cli_progname);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n\n");
    usage(stderr);
    return 2;
}

static int cmd_help(const cli_command *self, int argc, char **argv)
{
    if (argc == 0) {
        usage(stdout);
        return 0;
    }
    if (argc > 1)
        return cli_usage_error(self, "unexpected argument '%s'", argv[1]);
    if (strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "--help") == 0) {
        cli_command_help(stdout, self);
        return 0;
    }
    const cli_command *cmd = find_command(argv[0]);
    if (cmd == NULL)
        return cli_usage_error(self, "unknown command '%s'", argv[0]);
    cli_command_help(stdout, cmd);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines in order with stderr */
    if (argc < 2)
        return usage_error("no command given");
    const char *name = argv[1];
    if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(name, "-V") == 0 || strcmp(name, "--version") == 0) {
        printf("spillway %s\n", CLI_VERSION);
        return 0;
    }
    const cli_command *cmd = find_command(name);
    if (cmd == NULL)
        return usage_error("unknown command '%s'", name);
    return cmd->run(cmd, argc - 2, argv + 2);
}
