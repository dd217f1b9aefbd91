/*
 * cli.h -- what the commands of the spillway program share: a row of the
 * command table, option parsing, usage errors, reporting a failed library
 * call, opening a device, byte counts for printf.
 *
 * The program uses the public API only (spillway.h), as any caller would,
 * so it doubles as a small end-to-end check of the library.  Exit status:
 * 0 done, 1 a library call or a check failed (reported with the code's name
 * and the library's detail message), 2 a usage error.
 */
#ifndef SPILLWAY_TOOLS_CLI_H
#define SPILLWAY_TOOLS_CLI_H

#include "spillway.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define CLI_STR2(x) #x
#define CLI_STR(x) CLI_STR2(x)
#define CLI_VERSION                                                           \
    CLI_STR(SW_VERSION_MAJOR)                                                 \
    "." CLI_STR(SW_VERSION_MINOR) "." CLI_STR(SW_VERSION_PATCH)

#define CLI_KIB ((uint64_t)1024)
#define CLI_MIB (CLI_KIB * 1024)
#define CLI_GIB (CLI_MIB * 1024)

/* The name every message starts with. */
extern const char *const cli_progname;

/* ------------------------------------------------------------------------
 * The command table (its rows live in main.c)
 * ---------------------------------------------------------------------- */

typedef struct cli_command cli_command;

/* Runs a command: argv holds the arguments after its name.  Returns the
 * exit status (0, 1, or 2 for a usage error). */
typedef int (*cli_command_fn)(const cli_command *self, int argc, char **argv);

/* `spillway --help` lists name, args and summary; `spillway NAME --help`
 * prints the usage line, about, options (then -h, --help, which every
 * command takes) and notes.  Text fields end lines with '\n'; options and
 * notes may be "" / NULL. */
struct cli_command {
    const char *name;
    cli_command_fn run;
    const char *summary; /* one line, no '\n' */
    const char *args;    /* the synopsis after the name: "[OPTIONS]", "" */
    const char *about;   /* a paragraph: what it does */
    const char *options; /* "  --name VALUE          what it does\n"... */
    const char *notes;   /* after the options, or NULL */
};

/* The column where the help's descriptions start (options, commands). */
enum { CLI_HELP_COLUMN = 24 };

/* `spillway NAME --help`. */
void cli_command_help(FILE *f, const cli_command *cmd);

/* "spillway: NAME: <message>", a blank line and the command's help, on
 * stderr.  Returns 2, the status of a usage error. */
int cli_usage_error(const cli_command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------------
 * Options
 * ---------------------------------------------------------------------- */

/* The options of demo and tour: --device SPEC, --budget SIZE and one count
 * (--steps for the demo, --rounds for the tour). */
typedef struct cli_options {
    const char *spec;    /* NULL: the default device */
    uint64_t budget;     /* 0: the command's default */
    unsigned long count; /* preset to the default by the caller */
    bool help;           /* --help was given and printed */
} cli_options;

/* Parse argv into o.  Returns 0 (o filled; o->help when the command's help
 * was printed instead) or 2 after a usage error.  A SIZE is read by
 * sw_parse_size ("512M", "1.5G", "2GiB") and must be above 0; the count is
 * a decimal number in [count_lo, count_hi]. */
int cli_parse_options(const cli_command *cmd, int argc, char **argv,
                      const char *count_name, unsigned long count_lo,
                      unsigned long count_hi, cli_options *o);

/* For a command that takes no arguments: 0 (*help set when -h / --help
 * was given and the help printed) or 2 after a usage error. */
int cli_parse_no_arguments(const cli_command *cmd, int argc, char **argv,
                           bool *help);

/* ------------------------------------------------------------------------
 * Errors
 * ---------------------------------------------------------------------- */

/* A failed library call: "spillway: WHAT failed: SW_ERR_X (text): detail",
 * the detail being sw_last_error(), so call it before any other spillway
 * call. */
void cli_report(const char *what, int err);

/* A check that is not a library error (a wrong result):
 * "spillway: check failed: <message>". */
void cli_mismatch(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Call a library function; on failure report it and return 1 (the status
 * of a failed command) from the enclosing function. */
#define TRY_OR_RETURN(call)                                                   \
    do {                                                                      \
        int try_err_ = (call);                                                \
        if (try_err_ != SW_OK) {                                              \
            cli_report(#call, try_err_);                                      \
            return 1;                                                         \
        }                                                                     \
    } while (0)

/* Unless cond holds, report a failed check and return 1 from the
 * enclosing function. */
#define CHECK_OR_RETURN(cond, ...)                                            \
    do {                                                                      \
        if (!(cond)) {                                                        \
            cli_mismatch(__VA_ARGS__);                                        \
            return 1;                                                         \
        }                                                                     \
    } while (0)

/* ------------------------------------------------------------------------
 * Devices and figures
 * ---------------------------------------------------------------------- */

/* Open spec (NULL: the default device); 0, or 1 after reporting. */
int cli_open_device(const char *spec, sw_device **dev);

/* sw_format_bytes into one of a ring of static buffers, so that a few can
 * appear in one printf ("512 B", "4.00 MiB").  Not thread-safe: the
 * program prints from one thread. */
const char *cli_bytes(uint64_t n);

#endif /* SPILLWAY_TOOLS_CLI_H */
