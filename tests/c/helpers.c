/*
 * helpers.c -- devices under test, the end-of-test emptiness check, byte
 * patterns and small utilities shared by the tests.
 */
#include "test.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------
 * Devices opened by the test, closed and checked by the runner's child
 * ---------------------------------------------------------------------- */

#define MAX_TRACKED 256

static pthread_mutex_t tracked_lock = PTHREAD_MUTEX_INITIALIZER;
static sw_device *tracked[MAX_TRACKED];
static size_t ntracked;

const char *test_device_spec(void)
{
    const char *s = getenv("SW_TEST_DEVICE");
    return (s != NULL && s[0] != '\0') ? s : "sim:0";
}

int test_is_sim(void)
{
    return strncmp(test_device_spec(), "sim:", 4) == 0;
}

void test_require_sim(void)
{
    if (!test_is_sim())
        SKIP("needs the simulated device (SW_TEST_DEVICE=%s)",
             test_device_spec());
}

int test_can_spill(void)
{
    return strncmp(test_device_spec(), "host:", 5) != 0;
}

void test_require_spill(void)
{
    if (!test_can_spill())
        SKIP("needs a device that spills (%s never does: its memory is the "
             "host's own)", test_device_spec());
}

sw_device *test_open(const char *spec)
{
    sw_device *dev = NULL;
    int rc = sw_device_open(spec, &dev);
    if (rc != SW_OK)
        FAIL("sw_device_open(\"%s\") -> %s: %s", spec ? spec : "(null)",
             sw_err_name(rc), sw_last_error());
    if (dev == NULL)
        FAIL("sw_device_open(\"%s\") succeeded but returned NULL",
             spec ? spec : "(null)");
    pthread_mutex_lock(&tracked_lock);
    if (ntracked == MAX_TRACKED) {
        pthread_mutex_unlock(&tracked_lock);
        FAIL("test opened more than %d device references", MAX_TRACKED);
    }
    tracked[ntracked++] = dev;
    pthread_mutex_unlock(&tracked_lock);
    return dev;
}

sw_device *test_device(void)
{
    return test_open(test_device_spec());
}

void test_check_devices_empty(void)
{
    pthread_mutex_lock(&tracked_lock);
    size_t n = ntracked;
    ntracked = 0;
    pthread_mutex_unlock(&tracked_lock);

    /* Every distinct device: nothing in use, nothing spilled. */
    for (size_t i = 0; i < n; i++) {
        int seen = 0;
        for (size_t j = 0; j < i; j++)
            seen |= tracked[j] == tracked[i];
        if (seen)
            continue;
        sw_device *dev = tracked[i];
        int rc = sw_device_synchronize(dev);
        if (rc != SW_OK)
            FAIL("leak check: sw_device_synchronize(%s) -> %s: %s",
                 sw_device_name(dev), sw_err_name(rc), sw_last_error());
        sw_memory_info info;
        rc = sw_memory_info_get(dev, &info);
        if (rc != SW_OK)
            FAIL("leak check: sw_memory_info_get(%s) -> %s: %s",
                 sw_device_name(dev), sw_err_name(rc), sw_last_error());
        if (info.in_use != 0 || info.spilled != 0)
            FAIL("leak check: %s still has in_use=%" PRIu64
                 " spilled=%" PRIu64 " after the test",
                 sw_device_name(dev), info.in_use, info.spilled);
    }
    /* Every reference the test opened closes cleanly (the last close fails
     * with SW_ERR_BUSY while buffers are live). */
    for (size_t i = n; i-- > 0;) {
        int rc = sw_device_close(tracked[i]);
        if (rc != SW_OK)
            FAIL("leak check: sw_device_close(%s) -> %s: %s",
                 sw_device_name(tracked[i]), sw_err_name(rc),
                 sw_last_error());
    }
}

sw_memory_info test_info(sw_device *dev)
{
    sw_memory_info info;
    ASSERT_OK(sw_memory_info_get(dev, &info));
    return info;
}

sw_memory_info test_info_synced(sw_device *dev)
{
    ASSERT_OK(sw_device_synchronize(dev));
    return test_info(dev);
}

sw_buffer *test_alloc(sw_device *dev, size_t size, const char *tag)
{
    sw_buffer *buf = NULL;
    int rc = sw_buffer_alloc(dev, size, tag, &buf);
    if (rc != SW_OK)
        FAIL("sw_buffer_alloc(%zu, \"%s\") -> %s: %s", size,
             tag ? tag : "(null)", sw_err_name(rc), sw_last_error());
    if (buf == NULL)
        FAIL("sw_buffer_alloc(%zu) succeeded but returned NULL", size);
    return buf;
}

static sw_device *owner_of(sw_buffer *buf)
{
    sw_device *dev = NULL;
    ASSERT_OK(sw_buffer_device(buf, &dev));
    return dev;
}

void test_pin(sw_buffer *buf)
{
    sw_devmem mem;
    sw_buffer *arr[1] = {buf};
    ASSERT_OK(sw_launch_begin(owner_of(buf), arr, 1, &mem));
}

void test_unpin(sw_buffer *buf)
{
    sw_buffer *arr[1] = {buf};
    ASSERT_OK(sw_launch_end(owner_of(buf), arr, 1));
}

sw_buffer_info test_buffer_info(sw_device *dev, sw_buffer *b)
{
    uint64_t id = 0;
    ASSERT_OK(sw_buffer_id(b, &id));
    size_t count = 0;
    ASSERT_OK(sw_memory_snapshot(dev, NULL, 0, &count));
    sw_buffer_info *info = calloc(count + 1, sizeof *info);
    ASSERT_NOT_NULL(info);
    ASSERT_OK(sw_memory_snapshot(dev, info, count + 1, &count));
    sw_buffer_info got;
    bool found = false;
    for (size_t i = 0; i < count && !found; i++)
        if (info[i].id == id) {
            got = info[i];
            found = true;
        }
    free(info);
    if (!found)
        FAIL("buffer %" PRIu64 " is not in the snapshot", id);
    return got;
}

uint32_t test_pins_of(sw_device *dev, sw_buffer *b)
{
    return test_buffer_info(dev, b).pins;
}

void test_unpin_free(sw_buffer *buf)
{
    test_unpin(buf);
    ASSERT_OK(sw_buffer_free(buf));
}

/* ------------------------------------------------------------------------
 * Patterns
 * ---------------------------------------------------------------------- */

static inline unsigned char pattern_byte(size_t i, uint32_t seed)
{
    /* Position-dependent so that shifted or swapped ranges show. */
    uint32_t x = (uint32_t)i * 2654435761u + seed * 40503u + (seed >> 7);
    x ^= x >> 15;
    return (unsigned char)(x ^ (x >> 8));
}

void test_pattern(void *dst, size_t n, uint32_t seed)
{
    unsigned char *p = dst;
    for (size_t i = 0; i < n; i++)
        p[i] = pattern_byte(i, seed);
}

size_t test_pattern_check(const void *p, size_t n, uint32_t seed)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != pattern_byte(i, seed))
            return i;
    return (size_t)-1;
}

void test_write_pattern(sw_buffer *buf, uint32_t seed)
{
    size_t size;
    ASSERT_OK(sw_buffer_size(buf, &size));
    unsigned char *tmp = malloc(size ? size : 1);
    ASSERT_NOT_NULL(tmp);
    test_pattern(tmp, size, seed);
    ASSERT_OK(sw_buffer_write(buf, 0, tmp, size));
    free(tmp);
}

void test_expect_pattern(sw_buffer *buf, uint32_t seed)
{
    size_t size;
    ASSERT_OK(sw_buffer_size(buf, &size));
    unsigned char *tmp = malloc(size ? size : 1);
    ASSERT_NOT_NULL(tmp);
    memset(tmp, 0, size);
    ASSERT_OK(sw_buffer_read(buf, 0, tmp, size));
    size_t bad = test_pattern_check(tmp, size, seed);
    if (bad != (size_t)-1)
        FAIL("buffer of %zu bytes: byte %zu is %#x, pattern %u wants %#x",
             size, bad, tmp[bad], seed, pattern_byte(bad, seed));
    free(tmp);
}

/* ------------------------------------------------------------------------
 * Utilities
 * ---------------------------------------------------------------------- */

size_t test_memdiff(const void *a, const void *b, size_t n)
{
    const unsigned char *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i])
            return i;
    return (size_t)-1;
}

const char *test_strcasestr(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] &&
               tolower((unsigned char)hay[i]) ==
                   tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return hay;
    }
    return n == 0 ? hay : NULL;
}

/* Is the number at hay[0..] (not preceded by a digit or '.') followed by
 * something that ends it? */
static int number_at(const char *msg, const char *num)
{
    size_t len = strlen(num);
    for (const char *p = strstr(msg, num); p != NULL; p = strstr(p + 1, num)) {
        if (p > msg && (isdigit((unsigned char)p[-1]) || p[-1] == '.'))
            continue;
        char next = p[len];
        if (isdigit((unsigned char)next))
            continue;
        if (next == '.' && isdigit((unsigned char)p[len + 1]))
            continue;
        return 1;
    }
    return 0;
}

/* text occurs in msg not preceded by a digit or '.'. */
static int text_at(const char *msg, const char *text)
{
    for (const char *p = strstr(msg, text); p != NULL;
         p = strstr(p + 1, text)) {
        if (p > msg && (isdigit((unsigned char)p[-1]) || p[-1] == '.'))
            continue;
        return 1;
    }
    return 0;
}

int test_msg_has_bytes(const char *msg, uint64_t n)
{
    if (msg == NULL)
        return 0;
    char num[64];
    snprintf(num, sizeof num, "%" PRIu64, n);
    if (number_at(msg, num))
        return 1;
    static const struct {
        double scale;
        const char *units[4];
    } units[] = {
        {1024.0, {"KiB", "KB", "K", "kB"}},
        {1048576.0, {"MiB", "MB", "M", NULL}},
        {1073741824.0, {"GiB", "GB", "G", NULL}},
        {1099511627776.0, {"TiB", "TB", "T", NULL}},
    };
    static const char *fmts[] = {"%.0f", "%.1f", "%.2f", "%.3f", "%g"};
    for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
        double v = (double)n / units[u].scale;
        for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++) {
            char val[64];
            snprintf(val, sizeof val, fmts[f], v);
            /* A rounded form must still be close to the value. */
            double back = strtod(val, NULL);
            if (back < v * 0.995 || back > v * 1.005 + 1e-12)
                continue;
            for (size_t k = 0; k < 4 && units[u].units[k]; k++) {
                char text[96];
                snprintf(text, sizeof text, "%s %s", val, units[u].units[k]);
                if (text_at(msg, text))
                    return 1;
                snprintf(text, sizeof text, "%s%s", val, units[u].units[k]);
                if (text_at(msg, text))
                    return 1;
            }
        }
    }
    return 0;
}

double test_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int test_fork_run(int (*fn)(void *), void *arg, char *err, size_t err_len)
{
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    ASSERT_TRUE(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], STDERR_FILENO);
        close(fds[1]);
        int rc = fn(arg);
        fflush(NULL);
        _exit(rc);
    }
    close(fds[1]);
    size_t have = 0;
    char sink[4096];
    for (;;) {
        char *dst = sink;
        size_t room = sizeof sink;
        if (err != NULL && have + 1 < err_len) {
            dst = err + have;
            room = err_len - 1 - have;
        }
        ssize_t r = read(fds[0], dst, room);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        if (dst != sink)
            have += (size_t)r;
    }
    close(fds[0]);
    if (err != NULL && err_len > 0)
        err[have] = '\0';
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            FAIL("waitpid: %s", strerror(errno));
    }
    return status;
}
