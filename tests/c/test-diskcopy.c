/*
 * test-diskcopy.c -- clean copies and the spill file (disk.c, clean.c):
 * a copy read back from the file keeps its extent there until something
 * writes the buffer, so that sending it back writes nothing and evicting
 * it copies nothing; a clean copy's host block given up to a host budget
 * goes to the file rather than away; every write ends the kept extent (the
 * file's stale bytes never come back); a failed write of a clean copy
 * leaves its buffer on the device, intact.  Each test runs in its own
 * process (main.c), with its own spill directory.
 */
#include "test.h"
#include "tests.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KB (1u << 20)

static void spill_dir(char *out, size_t len)
{
    const char *base = getenv("TMPDIR");
    snprintf(out, len, "%s/spillway-diskcopy-XXXXXX",
             base != NULL && base[0] ? base : "/tmp");
    if (mkdtemp(out) == NULL)
        FAIL("mkdtemp: %s", strerror(errno));
    ASSERT_EQ(setenv("SPILLWAY_SPILL_DIR", out, 1), 0);
}

/* Every unpinned buffer of dev out (a budget of one byte, then none). */
static void spill_all(sw_device *dev)
{
    ASSERT_OK(sw_set_memory_budget(dev, 1));
    ASSERT_OK(sw_set_memory_budget(dev, 0));
}

/* b brought back for a launch that only reads it: a clean copy. */
static void read_back(sw_device *dev, sw_buffer *b)
{
    unsigned char read = SW_ACCESS_READ;
    sw_devmem p;
    ASSERT_OK(sw_launch_begin_access(dev, &b, &read, 1, &p));
    ASSERT_OK(sw_launch_end(dev, &b, 1));
}

static sw_buffer_state state_of(sw_buffer *b)
{
    sw_buffer_state st;
    ASSERT_OK(sw_buffer_state_get(b, &st));
    return st;
}

/* b spilled, its copy in the spill file. */
static void to_disk(sw_device *dev, sw_buffer *b)
{
    ASSERT_OK(sw_set_host_budget(dev, 0));
    spill_all(dev);
    ASSERT_OK(sw_set_host_budget(dev, 1)); /* its copy landed: to disk */
    ASSERT_TRUE(test_buffer_info(dev, b).on_disk);
}

TEST(diskcopy_read_back_moves_once)
{
    test_require_spill();
    char dir[256];
    spill_dir(dir, sizeof dir);
    sw_device *dev = test_device();
    sw_buffer *a = test_alloc(dev, KB, "once");
    test_write_pattern(a, 50);
    to_disk(dev, a);
    sw_memory_info m0 = test_info(dev);
    ASSERT_UEQ(m0.disk_write_bytes, KB);

    /* Read back (a clean copy with its host block), then its host block
     * given up to the budget: the file holds its bytes, nothing written,
     * and it stays clean. */
    read_back(dev, a);
    sw_memory_info m1 = test_info(dev);
    ASSERT_UEQ(m1.disk_read_bytes - m0.disk_read_bytes, KB);
    ASSERT_UEQ(m1.spilled_disk, 0);
    ASSERT_OK(sw_set_host_budget(dev, 1));
    sw_memory_info m2 = test_info(dev);
    ASSERT_UEQ(m2.host_copies, 0);
    ASSERT_UEQ(m2.disk_write_bytes, m1.disk_write_bytes);
    ASSERT_EQ(state_of(a), SW_RESIDENT);
    /* Evicted: on disk at once, nothing copied out or written. */
    spill_all(dev);
    sw_memory_info m3 = test_info(dev);
    ASSERT_TRUE(test_buffer_info(dev, a).on_disk);
    ASSERT_UEQ(m3.spilled_bytes_total, m2.spilled_bytes_total);
    ASSERT_UEQ(m3.disk_write_bytes, m2.disk_write_bytes);
    ASSERT_UEQ(m3.clean_evictions - m2.clean_evictions, 1);
    ASSERT_UEQ(m3.spilled_disk, test_round(KB));
    test_expect_pattern(a, 50);

    /* Read back, evicted with its host block (to host memory), then sent
     * back to the file by the budget: nothing written either. */
    read_back(dev, a);
    ASSERT_OK(sw_set_host_budget(dev, 0));
    spill_all(dev);
    ASSERT_FALSE(test_buffer_info(dev, a).on_disk);
    ASSERT_OK(sw_set_host_budget(dev, 1));
    sw_memory_info m4 = test_info(dev);
    ASSERT_TRUE(test_buffer_info(dev, a).on_disk);
    ASSERT_UEQ(m4.spilled_bytes_total, m3.spilled_bytes_total);
    ASSERT_UEQ(m4.disk_write_bytes, m3.disk_write_bytes);
    test_expect_pattern(a, 50);
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_UEQ(test_info(dev).spilled_disk, 0);
    ASSERT_OK(sw_set_host_budget(dev, 0));
    ASSERT_EQ(rmdir(dir), 0);
}

/* Every way of writing a buffer read back from the file ends its extent
 * there: its next trip to disk writes the new bytes, and they are what
 * comes back -- a host write of it resident, a host write of it spilled
 * to host memory, a launch that may write it. */
TEST(diskcopy_written_copy_goes_again)
{
    test_require_spill();
    char dir[256];
    spill_dir(dir, sizeof dir);
    sw_device *dev = test_device();
    sw_buffer *a = test_alloc(dev, KB, "written");
    test_write_pattern(a, 60);
    for (uint32_t way = 0; way < 3; way++) {
        uint32_t seed = 61 + way;
        to_disk(dev, a);
        read_back(dev, a); /* clean, its extent kept */
        sw_memory_info m0 = test_info(dev);
        if (way == 0) {
            test_write_pattern(a, seed); /* resident */
        } else if (way == 1) {
            ASSERT_OK(sw_set_host_budget(dev, 0));
            spill_all(dev); /* to host memory, its extent kept */
            ASSERT_EQ(state_of(a), SW_SPILLED);
            test_write_pattern(a, seed); /* its host copy */
        } else {
            test_write_pattern(a, seed); /* resident, then a launch: */
            to_disk(dev, a);
            read_back(dev, a);
            m0 = test_info(dev);
            test_pin(a); /* no access mode: written */
            test_unpin(a);
        }
        to_disk(dev, a);
        sw_memory_info m1 = test_info(dev);
        ASSERT_UEQ(m1.disk_write_bytes - m0.disk_write_bytes, KB);
        if (way != 1) /* copied out again: it was written on the device */
            ASSERT_UEQ(m1.spilled_bytes_total - m0.spilled_bytes_total,
                       KB);
        test_expect_pattern(a, seed); /* from the file */
        read_back(dev, a);
        test_expect_pattern(a, seed); /* back through the device */
    }
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_OK(sw_set_host_budget(dev, 0));
    ASSERT_EQ(rmdir(dir), 0);
}

/* A clean copy the file cannot take (an injected fault, then a directory
 * that is gone): its host block goes as it would without the file, the
 * buffer stays on the device, intact, and the budget's call succeeds. */
TEST(diskcopy_clean_write_fails)
{
    test_require_spill();
    char dir[256];
    spill_dir(dir, sizeof dir);
    char gone[300];
    snprintf(gone, sizeof gone, "%s/gone", dir);
    ASSERT_EQ(setenv("SPILLWAY_SPILL_DIR", gone, 1), 0);
    sw_device *dev = test_device();
    sw_buffer *a = test_alloc(dev, KB, "clean");
    test_write_pattern(a, 70);
    for (int pass = 0; pass < 2; pass++) {
        spill_all(dev); /* host budget none: to host memory */
        read_back(dev, a); /* clean, a host block only */
        sw_memory_info m0 = test_info(dev);
        ASSERT_UEQ(m0.host_copies, test_round(KB));
        if (pass == 1) {
            ASSERT_EQ(setenv("SPILLWAY_SPILL_DIR", dir, 1), 0);
            ASSERT_OK(sw_inject_fault(dev, SW_FAULT_DISK, 1, 0));
        }
        ASSERT_OK(sw_set_host_budget(dev, 1));
        ASSERT_OK(sw_inject_fault(dev, SW_FAULT_DISK, 0, 0));
        sw_memory_info m1 = test_info(dev);
        ASSERT_UEQ(m1.host_copies, 0);
        ASSERT_UEQ(m1.disk_write_bytes, m0.disk_write_bytes);
        ASSERT_EQ(state_of(a), SW_RESIDENT);
        test_expect_pattern(a, 70);
        /* Its host copy went: the next eviction copies it out. */
        ASSERT_OK(sw_set_host_budget(dev, 0));
        spill_all(dev);
        ASSERT_UEQ(test_info(dev).spilled_bytes_total -
                       m1.spilled_bytes_total, KB);
        test_expect_pattern(a, 70);
    }
    ASSERT_OK(sw_buffer_free(a));
    ASSERT_EQ(rmdir(dir), 0);
}
