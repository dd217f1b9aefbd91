/*
 * cli.c -- helpers every command of the spillway program shares: a
 * command's help, usage errors, option parsing, reporting failures,
 * opening a device, byte counts for printf.
 */
#include "cli.h"

#include "progress.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *const cli_progname = "spillway";

/* ------------------------------------------------------------------------
 * Help and usage errors
 * ---------------------------------------------------------------------- */

void cli_command_help(FILE *f, const cli_command *cmd)
{
    fprintf(f, "usage: %s %s%s%s\n\n%s\noptions:\n%s", cli_progname,
            cmd->name, cmd->args[0] ? " " : "", cmd->args, cmd->about,
            cmd->options ? cmd->options : "");
    fprintf(f, "  %-*s%s\n", CLI_HELP_COLUMN - 2, "-h, --help",
            "show this help");
    if (cmd->notes != NULL)
        fprintf(f, "\n%s", cmd->notes);
}

int cli_usage_error(const cli_command *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: %s: ", cli_progname, cmd->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n\n");
    cli_command_help(stderr, cmd);
    return 2;
}

static bool is_help(const char *arg)
{
    return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

/* ------------------------------------------------------------------------
 * Options
 * ---------------------------------------------------------------------- */

/* A decimal count in [lo, hi]; 0 or -1. */
static int parse_count(const char *s, unsigned long lo, unsigned long hi,
                       unsigned long *out)
{
    if (s == NULL || !isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (errno == ERANGE || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* If arg is --name or --name=VALUE, the index of name, with *val set (the
 * next argument for the first form, consuming it); else -1.  -2 when the
 * value is missing. */
static int match_option(const char *const *names, int nnames, int argc,
                        char **argv, int *i, const char **val)
{
    const char *arg = argv[*i];
    for (int j = 0; j < nnames; j++) {
        size_t len = strlen(names[j]);
        if (strncmp(arg, names[j], len) != 0 ||
            (arg[len] != '\0' && arg[len] != '='))
            continue;
        if (arg[len] == '=')
            *val = arg + len + 1;
        else if (*i + 1 < argc)
            *val = argv[++*i];
        else
            return -2;
        return j;
    }
    return -1;
}

int cli_parse_options(const cli_command *cmd, int argc, char **argv,
                      const char *count_name, unsigned long count_lo,
                      unsigned long count_hi, cli_options *o)
{
    enum { OPT_DEVICE, OPT_BUDGET, OPT_COUNT };
    const char *const names[] = {"--device", "--budget", count_name};
    for (int i = 0; i < argc; i++) {
        const char *val = NULL;
        int which = match_option(names, 3, argc, argv, &i, &val);
        if (which == -2)
            return cli_usage_error(cmd, "%s needs a value", argv[i]);
        if (which == -1) {
            if (is_help(argv[i])) {
                cli_command_help(stdout, cmd);
                o->help = true;
                return 0;
            }
            return cli_usage_error(cmd, "unknown option '%s'", argv[i]);
        }
        if (which == OPT_DEVICE) {
            o->spec = val;
        } else if (which == OPT_BUDGET) {
            /* The library's message quotes the input and says what a size
             * looks like; copy it before anything else can replace it. */
            if (sw_parse_size(val, &o->budget) != SW_OK) {
                char why[512];
                snprintf(why, sizeof why, "%s", sw_last_error());
                return cli_usage_error(cmd, "--budget: %s", why);
            }
            /* A budget of 0 would mean "none", which is not what a user
             * asking for a budget wants. */
            if (o->budget == 0)
                return cli_usage_error(cmd,
                                       "--budget: '%s' is not a size above 0",
                                       val);
        } else if (parse_count(val, count_lo, count_hi, &o->count)) {
            return cli_usage_error(cmd, "%s: '%s' is not a number from %lu "
                                   "to %lu",
                                   count_name, val, count_lo, count_hi);
        }
    }
    return 0;
}

int cli_parse_no_arguments(const cli_command *cmd, int argc, char **argv,
                           bool *help)
{
    *help = false;
    if (argc == 0)
        return 0;
    if (is_help(argv[0])) {
        cli_command_help(stdout, cmd);
        *help = true;
        return 0;
    }
    return cli_usage_error(cmd, "unexpected argument '%s'", argv[0]);
}

/* ------------------------------------------------------------------------
 * Errors
 * ---------------------------------------------------------------------- */

void cli_report(const char *what, int err)
{
    /* Copied first: the detail is only valid until the next spillway
     * call. */
    char detail[4096];
    snprintf(detail, sizeof detail, "%s", sw_last_error());
    progress_end_line();
    fprintf(stderr, "%s: %s failed: %s (%s)%s%s\n", cli_progname, what,
            sw_err_name(err), sw_strerror(err), detail[0] ? ": " : "",
            detail);
}

void cli_mismatch(const char *fmt, ...)
{
    va_list ap;
    progress_end_line();
    fprintf(stderr, "%s: check failed: ", cli_progname);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* ------------------------------------------------------------------------
 * Devices and figures
 * ---------------------------------------------------------------------- */

int cli_open_device(const char *spec, sw_device **dev)
{
    int err = sw_device_open(spec, dev);
    if (err == SW_OK)
        return 0;
    char what[160];
    if (spec)
        snprintf(what, sizeof what, "sw_device_open(\"%.100s\")", spec);
    else
        snprintf(what, sizeof what, "sw_device_open(default device)");
    cli_report(what, err);
    return 1;
}

const char *cli_bytes(uint64_t n)
{
    /* 16 slots: the most one printf of the program shows is seven. */
    static char ring[16][32];
    static unsigned next;
    char *buf = ring[next++ % 16];
    return sw_format_bytes(n, buf, sizeof ring[0]);
}
