/*
 * cli.c -- helpers every command of the spillway program shares: a
 * command's help, usage errors, option parsing, reporting failures,
 * opening a device, byte counts for printf.
 */
#include "cli.h"

#include "progress.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
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

/* Parse "4096", "512K", "512M", "1G", "2GiB", "64mb" (binary units) into
 * *out.  Returns 0, or -1 for anything else (including overflow). */
static int parse_size(const char *s, uint64_t *out)
{
    if (s == NULL || !isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE)
        return -1;
    uint64_t mult = 1;
    switch (toupper((unsigned char)*end)) {
    case '\0':
        break;
    case 'K': mult = CLI_KIB; end++; break;
    case 'M': mult = CLI_MIB; end++; break;
    case 'G': mult = CLI_GIB; end++; break;
    case 'T': mult = CLI_GIB * 1024; end++; break;
    case 'B':
        break;
    default:
        return -1;
    }
    /* Optional "iB" / "B" after a unit, "B" after a plain number. */
    if (mult > 1 && (end[0] == 'i' || end[0] == 'I') &&
        (end[1] == 'B' || end[1] == 'b'))
        end += 2;
    else if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0')
        return -1;
    if (v > UINT64_MAX / mult)
        return -1;
    *out = (uint64_t)v * mult;
    return 0;
}

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
            if (parse_size(val, &o->budget) || o->budget == 0)
                return cli_usage_error(cmd, "--budget: '%s' is not a size "
                                       "above 0 (e.g. 4096, 64K, 512M, 1G)",
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

const char *cli_bytes(uint64_t bytes)
{
    /* 16 slots: the most one printf of the program shows is six. */
    static char ring[16][32];
    static unsigned next;
    char *buf = ring[next++ % 16];
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};

    if (bytes < CLI_KIB) {
        snprintf(buf, sizeof ring[0], "%" PRIu64 " B", bytes);
        return buf;
    }
    double v = (double)bytes / 1024.0;
    size_t u = 0;
    /* 1023.999 KiB prints as 1.00 MiB, not 1024.00 KiB. */
    while (v >= 1023.995 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, sizeof ring[0], "%.2f %s", v, units[u]);
    return buf;
}
