/*
 * cmd_plot.c -- spillway plot: the picture of a recorded memory history.
 *
 * Drawing is matplotlib's, so it lives in the Python package
 * (spillway.plot, installed with `pip install spillway[plot]`); this
 * command runs `python3 -m spillway.plot` with the same arguments, so the
 * library and the other commands need neither Python nor matplotlib.  In
 * a build tree the package next to this program (BUILD/python) is found
 * first.
 */
#include "commands.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* BUILD/python when this program is BUILD/spillway and the package was
 * built there; else "". */
static void build_tree_python(char *out, size_t len)
{
    out[0] = '\0';
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash == NULL)
        return;
    *slash = '\0';
    char probe[PATH_MAX + 64];
    snprintf(probe, sizeof probe, "%s/python/spillway/plot.py", exe);
    if (access(probe, R_OK) == 0)
        snprintf(out, len, "%s/python", exe);
}

int cmd_plot(const cli_command *self, int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            cli_command_help(stdout, self);
            return 0;
        }
    }
    if (argc == 0)
        return cli_usage_error(self, "no TRACE file given");
    char pypath[PATH_MAX + 16];
    build_tree_python(pypath, sizeof pypath);
    if (pypath[0] != '\0') {
        const char *old = getenv("PYTHONPATH");
        char *both = malloc(strlen(pypath) + (old ? strlen(old) : 0) + 2);
        if (both != NULL) {
            sprintf(both, "%s%s%s", pypath, old && *old ? ":" : "",
                    old ? old : "");
            setenv("PYTHONPATH", both, 1);
            free(both);
        }
    }
    const char *py = getenv("PYTHON");
    if (py == NULL || py[0] == '\0')
        py = "python3";
    char **args = calloc((size_t)argc + 4, sizeof *args);
    if (args == NULL) {
        fprintf(stderr, "%s: plot: out of memory\n", cli_progname);
        return 1;
    }
    args[0] = (char *)py;
    args[1] = "-m";
    args[2] = "spillway.plot";
    for (int i = 0; i < argc; i++)
        args[3 + i] = argv[i];
    execvp(py, args);
    fprintf(stderr, "%s: plot: cannot run %s: %s (the picture is drawn by "
            "the Python package: pip install spillway[plot])\n",
            cli_progname, py, strerror(errno));
    free(args);
    return 1;
}
