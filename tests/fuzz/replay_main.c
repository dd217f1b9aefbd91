/*
 * replay_main.c -- the fuzz targets without libFuzzer: a plain,
 * deterministic program that runs the same entry points, for reproducing
 * a failure under gdb or rr, and for builds without clang.
 *
 *   fuzz_spillway_replay FILE|DIR ...      each input once, in order
 *   fuzz_spillway_replay -runs=N [-seed=S] [-max_len=L] [-max_total_time=T]
 *                                          N inputs of random bytes
 *
 * Options libFuzzer takes and this does not are ignored, so the same
 * command line works for both.  FUZZ_TRACE=1 prints every step;
 * FUZZ_SAVE=FILE writes each random input there before running it.
 */
#include "driver.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 4096;
            buf = realloc(buf, cap);
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        if (got == 0)
            break;
        len += got;
    }
    fclose(f);
    if (getenv("FUZZ_TRACE") != NULL)
        fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        perror(dir);
        return -1;
    }
    char **names = NULL;
    size_t n = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        if (ent->d_name[0] == '.')
            continue;
        names = realloc(names, (n + 1) * sizeof *names);
        size_t l = strlen(dir) + strlen(ent->d_name) + 2;
        names[n] = malloc(l);
        snprintf(names[n], l, "%s/%s", dir, ent->d_name);
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp);
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode))
            run_file(names[i]);
        free(names[i]);
    }
    free(names);
    return 0;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    LLVMFuzzerInitialize(&argc, &argv);
    long long runs = -1, max_time = 0;
    unsigned long long seed = 1;
    size_t max_len = 4096;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "-runs=", 6) == 0)
            runs = atoll(a + 6);
        else if (strncmp(a, "-seed=", 6) == 0)
            seed = strtoull(a + 6, NULL, 10);
        else if (strncmp(a, "-max_len=", 9) == 0)
            max_len = (size_t)atoll(a + 9);
        else if (strncmp(a, "-max_total_time=", 16) == 0)
            max_time = atoll(a + 16);
    }
    double t0 = now();
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-')
            continue;
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            return 2;
        }
        if (S_ISDIR(st.st_mode) ? run_dir(argv[i]) : run_file(argv[i]))
            return 2;
    }
    /* Random inputs: the same seed gives the same inputs.  FUZZ_SAVE=FILE
     * keeps the one being run, so a failing one can be replayed. */
    const char *save = getenv("FUZZ_SAVE");
    uint64_t rng = seed;
    uint8_t *buf = malloc(max_len ? max_len : 1);
    for (long long r = 0; r < runs; r++) {
        if (max_time > 0 && now() - t0 >= (double)max_time)
            break;
        size_t len = max_len ? 1 + fz_splitmix(&rng) % max_len : 0;
        for (size_t k = 0; k < len; k++)
            buf[k] = (uint8_t)(fz_splitmix(&rng) >> 32);
        if (save != NULL) {
            FILE *f = fopen(save, "wb");
            if (f != NULL) {
                fwrite(buf, 1, len, f);
                fclose(f);
            }
        }
        LLVMFuzzerTestOneInput(buf, len);
    }
    free(buf);
    return 0;
}
