/*
 * cmd_info.c -- spillway info (every device with its memory, in a table)
 * and spillway devices (their specs, one per line, for scripts).
 */
#include "commands.h"

#include <stdio.h>

static int count_devices(size_t *count)
{
    int err = sw_device_count(count);
    if (err != SW_OK) {
        cli_report("sw_device_count", err);
        return 1;
    }
    return 0;
}

int cmd_devices(const cli_command *self, int argc, char **argv)
{
    bool help;
    int rc = cli_parse_no_arguments(self, argc, argv, &help);
    if (rc != 0 || help)
        return rc;
    size_t n;
    if (count_devices(&n))
        return 1;
    for (size_t i = 0; i < n; i++) {
        char spec[128];
        int err = sw_device_spec_at(i, spec, sizeof spec);
        if (err != SW_OK) {
            cli_report("sw_device_spec_at", err);
            return 1;
        }
        printf("%s\n", spec);
    }
    return 0;
}

/* Backends that offer no device say why, one line each (a missing driver
 * is the usual reason a user does not see the device they expect). */
static void print_empty_backends(void)
{
    for (size_t b = 0; b < sw_backend_count(); b++) {
        const char *name = NULL;
        int ndev = 0;
        char why[256];
        int err = sw_backend_info(b, &name, &ndev, why, sizeof why);
        if (err != SW_OK)
            printf("%s: %s\n", name ? name : "?", sw_last_error());
        else if (ndev == 0)
            printf("%s: no devices%s%s\n", name, why[0] ? ": " : "", why);
    }
}

/* One row of the table; 0, or 1 after saying what went wrong (the table
 * goes on with the next device). */
static int print_device_row(size_t i)
{
    char spec[128];
    int err = sw_device_spec_at(i, spec, sizeof spec);
    if (err != SW_OK) {
        cli_report("sw_device_spec_at", err);
        return 1;
    }
    sw_device *dev;
    err = sw_device_open(spec, &dev);
    if (err != SW_OK) {
        char detail[512];
        snprintf(detail, sizeof detail, "%s", sw_last_error());
        printf("%-12s cannot open: %s%s%s\n", spec, sw_err_name(err),
               detail[0] ? ": " : "", detail);
        return 1;
    }
    int status = 0;
    sw_memory_info mi;
    err = sw_memory_info_get(dev, &mi);
    if (err != SW_OK) {
        cli_report("sw_memory_info_get", err);
        status = 1;
    } else {
        printf("%-12s %11s %11s %11s %11s %11s %11s  %s\n", spec,
               mi.device_total ? cli_bytes(mi.device_total) : "unknown",
               mi.device_free_known ? cli_bytes(mi.device_free) : "unknown",
               cli_bytes(mi.in_use), cli_bytes(mi.cached), cli_bytes(mi.peak),
               mi.budget ? cli_bytes(mi.budget) : "none",
               sw_device_description(dev));
    }
    err = sw_device_close(dev);
    if (err != SW_OK) {
        cli_report("sw_device_close", err);
        status = 1;
    }
    return status;
}

int cmd_info(const cli_command *self, int argc, char **argv)
{
    bool help;
    int rc = cli_parse_no_arguments(self, argc, argv, &help);
    if (rc != 0 || help)
        return rc;
    size_t n;
    if (count_devices(&n))
        return 1;
    printf("spillway %s: %zu device%s\n", CLI_VERSION, n, n == 1 ? "" : "s");
    if (n == 0) {
        const char *why = sw_last_error();
        printf("no device can be listed: no backend found a device%s%s\n",
               why[0] ? ": " : "", why);
        return 1;
    }
    print_empty_backends();
    printf("\n%-12s %11s %11s %11s %11s %11s %11s  %s\n", "DEVICE", "TOTAL",
           "FREE", "IN USE", "CACHED", "PEAK", "BUDGET", "DESCRIPTION");
    int status = 0;
    for (size_t i = 0; i < n; i++) {
        if (print_device_row(i))
            status = 1;
    }
    return status;
}
