/* quickstart.c -- libspillway in one page: allocate, budget, spill, pin,
 * read the figures, and leave the device empty.
 *
 *   cc -std=c11 quickstart.c $(pkg-config --cflags --libs spillway) \
 *       -o quickstart && ./quickstart
 *
 * (for a prefix the loader does not search, add
 * -Wl,-rpath,$(pkg-config --variable=libdir spillway); README, "Installing").
 *
 * On sim:0, the simulated device (no hardware needed): eight buffers of
 * 1 MiB under a budget of 4 MiB, so the least recently used ones spill to
 * host memory as the later ones are made.  Then "your own kernel", a plain
 * C loop, adds every buffer into an accumulator through the pointers a
 * launch pin hands out: pinning a spilled buffer brings it back (spilling
 * another), and while pinned, nothing moves.  The results are checked,
 * and every call's error is reported with the library's own message.
 * Exit status 0, and "ok", only when every check passed and the device
 * ends with nothing in use. */
#include <spillway.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#define NBUF 8
#define ELEMS (256 * 1024)          /* float32: 1 MiB a buffer */
#define BYTES ((size_t)ELEMS * sizeof(float))
#define BUDGET ((uint64_t)4 << 20) /* room for 4 of the 9 buffers */
#define MIB (1024.0 * 1024.0)

/* Every spillway call returns 0 or a negative SW_ERR_* code; the calling
 * thread's sw_last_error() says why, with the figures that matter. */
#define CHECK(call)                                                           \
    do {                                                                      \
        int err_ = (call);                                                    \
        if (err_ != SW_OK) {                                                  \
            fprintf(stderr, "quickstart: %s: %s\n  %s\n", #call,              \
                    sw_err_name(err_), sw_last_error());                      \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

static int failures;

static void expect(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "quickstart: FAILED: %s\n", what);
        failures++;
    }
}

/* The value element j of buffer i starts with: small whole numbers, so
 * every sum below is exact in float32 and in double. */
static float start_value(int i, size_t j)
{
    return (float)(10 * i + (int)(j % 10));
}

static void print_info(sw_device *dev, const char *when)
{
    sw_memory_info info;
    CHECK(sw_memory_info_get(dev, &info));
    printf("%s: in use %.1f MiB, spilled %.1f MiB, budget %.1f MiB; %" PRIu64
           " spills, %" PRIu64 " restores\n", when, info.in_use / MIB,
           info.spilled / MIB, info.budget / MIB, info.spills, info.restores);
}

int main(void)
{
    static float host[ELEMS]; /* the host side of every transfer */
    sw_device *dev = NULL;
    sw_buffer *bufs[NBUF] = {0}, *acc = NULL;
    sw_memory_info info;
    int host_addressable = 0;

    /* 1. A device, and a budget on the device memory spillway holds. */
    CHECK(sw_device_open("sim:0", &dev));
    printf("device %s: %s\n", sw_device_name(dev), sw_device_description(dev));
    CHECK(sw_device_host_addressable(dev, &host_addressable));
    if (!host_addressable) {
        fprintf(stderr, "quickstart: %s's memory is not host memory\n",
                sw_device_name(dev));
        return 1;
    }
    CHECK(sw_set_memory_budget(dev, BUDGET));

    /* 2. Allocate and fill: past the budget, the least recently used
     * buffers spill to host memory to make room for the next ones. */
    CHECK(sw_buffer_alloc(dev, BYTES, "acc", &acc));
    CHECK(sw_buffer_fill(acc, 0, BYTES, &(float){0}, sizeof(float)));
    for (int i = 0; i < NBUF; i++) {
        char tag[16];
        snprintf(tag, sizeof tag, "x%d", i);
        for (size_t j = 0; j < ELEMS; j++)
            host[j] = start_value(i, j);
        CHECK(sw_buffer_alloc(dev, BYTES, tag, &bufs[i]));
        CHECK(sw_buffer_write(bufs[i], 0, host, BYTES));
    }
    print_info(dev, "9 buffers of 1 MiB made");
    sw_buffer_state state;
    CHECK(sw_buffer_state_get(bufs[0], &state));
    expect(state == SW_SPILLED, "x0, the least recently used, was spilled");

    /* 3. Your own kernel, through launch pins: acc[j] += x_i[j] for every
     * buffer.  Here the kernel is this loop on the host's CPU, so the pin
     * is the host's, sw_launch_begin_q with no queue: it makes acc and x_i
     * resident in one pass (restoring a spilled one, spilling others but
     * never these two), waits for the work queued on them (a restore's
     * copy), pins them and hands out their memory; on a host-addressable
     * device base + offset is a host pointer.  (A kernel of your own on
     * the device's queue takes sw_launch_begin, or sw_launch_begin_q with
     * your queue: there the device orders it after the copy.)
     * sw_launch_end_q unpins them: they may move again. */
    for (int i = 0; i < NBUF; i++) {
        sw_buffer *pair[2] = {acc, bufs[i]};
        sw_devmem mem[2];
        CHECK(sw_launch_begin_q(NULL, pair, 2, mem));
        float *a = (float *)(mem[0].base + mem[0].offset);
        const float *x = (const float *)(mem[1].base + mem[1].offset);
        for (size_t j = 0; j < ELEMS; j++)
            a[j] += x[j];
        CHECK(sw_launch_end_q(NULL, pair, 2));
    }
    print_info(dev, "after 8 pinned launches");

    /* 4. Check: acc on the host (a read of a spilled buffer uses its host
     * copy); each x_i reduced on the device (which brings it back). */
    CHECK(sw_buffer_read(acc, 0, host, BYTES));
    int acc_ok = 1;
    for (size_t j = 0; j < ELEMS; j++) {
        float want = 0;
        for (int i = 0; i < NBUF; i++)
            want += start_value(i, j);
        acc_ok &= host[j] == want;
    }
    expect(acc_ok, "acc holds the sum of the 8 buffers");
    for (int i = 0; i < NBUF; i++) {
        sw_scalar sum;
        double want = 0;
        CHECK(sw_op_sum(bufs[i], SW_FLOAT32, ELEMS, &sum));
        for (size_t j = 0; j < ELEMS; j++)
            want += start_value(i, j);
        expect(sum.f == want, "a buffer's sum on the device");
    }
    CHECK(sw_memory_info_get(dev, &info));
    expect(info.spills > 0 && info.restores > 0, "buffers spilled and came "
           "back");
    expect(info.peak <= BUDGET, "in use never passed the budget");
    print_info(dev, "after the checks");

    /* 5. Leave the device empty: free every buffer; frees are stream-
     * ordered, so wait for the device before reading the figures.  The
     * last close fails with SW_ERR_BUSY while any buffer is live. */
    for (int i = 0; i < NBUF; i++)
        CHECK(sw_buffer_free(bufs[i]));
    CHECK(sw_buffer_free(acc));
    CHECK(sw_device_synchronize(dev));
    CHECK(sw_memory_info_get(dev, &info));
    expect(info.in_use == 0 && info.spilled == 0, "nothing left in use");
    CHECK(sw_set_memory_budget(dev, 0));
    CHECK(sw_empty_cache(dev));
    CHECK(sw_device_close(dev));

    if (failures) {
        fprintf(stderr, "quickstart: %d checks failed\n", failures);
        return 1;
    }
    printf("ok: spilled, restored, pinned and checked; the device is "
           "empty\n");
    return 0;
}
