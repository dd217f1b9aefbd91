/*
 * test.h -- the C suite's assertions and helpers.
 *
 * Every test is a function `void test_<name>(void)` defined with TEST(name)
 * and listed once in tests.h.  main.c runs each in its own fork()ed child with
 * a timeout.  A failed assertion (from any thread) reports file, line and
 * both values to the runner through a pipe and ends the child at once, so a
 * test needs no cleanup on its failure paths.  When a test function returns,
 * the child checks that every device the test opened through test_device()
 * or test_open() is empty (in_use == 0, spilled == 0) and that closing each
 * reference succeeds: a leaked buffer is a failure.
 */
#ifndef SW_TEST_H
#define SW_TEST_H

#include "spillway.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST(name) void test_##name(void)

/* ------------------------------------------------------------------------
 * Reporting (main.c)
 * ---------------------------------------------------------------------- */

/* Report a failure and end the test process.  Safe from any thread. */
void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
/* Report a skip and end the test process. */
void test_skip(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));

#define FAIL(...) test_fail(__FILE__, __LINE__, __VA_ARGS__)
#define SKIP(...) test_skip(__VA_ARGS__)

/* ------------------------------------------------------------------------
 * Assertions.  Each evaluates its arguments once.
 * ---------------------------------------------------------------------- */

#define ASSERT_TRUE(cond)                                                     \
    do {                                                                      \
        if (!(cond))                                                          \
            FAIL("ASSERT_TRUE(%s) failed", #cond);                            \
    } while (0)
#define ASSERT_FALSE(cond)                                                    \
    do {                                                                      \
        if (cond)                                                             \
            FAIL("ASSERT_FALSE(%s) failed", #cond);                           \
    } while (0)

/* Integer comparisons: both sides are converted to long long and printed in
 * decimal and hex (so -3 and 0xfffffffffffffffd both read clearly). */
#define SW__ASSERT_CMP(a, op, b)                                              \
    do {                                                                      \
        long long sw__a = (long long)(a);                                     \
        long long sw__b = (long long)(b);                                     \
        if (!(sw__a op sw__b))                                                \
            FAIL("ASSERT(%s %s %s) failed: %lld (%#llx) vs %lld (%#llx)", #a, \
                 #op, #b, sw__a, (unsigned long long)sw__a, sw__b,            \
                 (unsigned long long)sw__b);                                  \
    } while (0)
/* Unsigned comparisons, for sizes and byte counts near the top of range. */
#define SW__ASSERT_UCMP(a, op, b)                                             \
    do {                                                                      \
        unsigned long long sw__a = (unsigned long long)(a);                   \
        unsigned long long sw__b = (unsigned long long)(b);                   \
        if (!(sw__a op sw__b))                                                \
            FAIL("ASSERT(%s %s %s) failed: %llu (%#llx) vs %llu (%#llx)", #a, \
                 #op, #b, sw__a, sw__a, sw__b, sw__b);                        \
    } while (0)

#define ASSERT_EQ(a, b) SW__ASSERT_CMP(a, ==, b)
#define ASSERT_NE(a, b) SW__ASSERT_CMP(a, !=, b)
#define ASSERT_LT(a, b) SW__ASSERT_CMP(a, <, b)
#define ASSERT_LE(a, b) SW__ASSERT_CMP(a, <=, b)
#define ASSERT_GT(a, b) SW__ASSERT_CMP(a, >, b)
#define ASSERT_GE(a, b) SW__ASSERT_CMP(a, >=, b)
#define ASSERT_UEQ(a, b) SW__ASSERT_UCMP(a, ==, b)
#define ASSERT_ULT(a, b) SW__ASSERT_UCMP(a, <, b)
#define ASSERT_ULE(a, b) SW__ASSERT_UCMP(a, <=, b)
#define ASSERT_UGT(a, b) SW__ASSERT_UCMP(a, >, b)
#define ASSERT_UGE(a, b) SW__ASSERT_UCMP(a, >=, b)

#define ASSERT_PTR_EQ(a, b)                                                   \
    do {                                                                      \
        const void *sw__a = (const void *)(a);                                \
        const void *sw__b = (const void *)(b);                                \
        if (sw__a != sw__b)                                                   \
            FAIL("ASSERT(%s == %s) failed: %p vs %p", #a, #b, sw__a, sw__b);  \
    } while (0)
#define ASSERT_PTR_NE(a, b)                                                   \
    do {                                                                      \
        const void *sw__a = (const void *)(a);                                \
        const void *sw__b = (const void *)(b);                                \
        if (sw__a == sw__b)                                                   \
            FAIL("ASSERT(%s != %s) failed: both %p", #a, #b, sw__a);          \
    } while (0)
#define ASSERT_NULL(p) ASSERT_PTR_EQ(p, NULL)
#define ASSERT_NOT_NULL(p) ASSERT_PTR_NE(p, NULL)

#define ASSERT_DBL_EQ(a, b)                                                   \
    do {                                                                      \
        double sw__a = (double)(a);                                           \
        double sw__b = (double)(b);                                           \
        if (!(sw__a == sw__b))                                                \
            FAIL("ASSERT(%s == %s) failed: %.17g vs %.17g", #a, #b, sw__a,    \
                 sw__b);                                                      \
    } while (0)

/* call must return SW_OK; prints the code's name and the detail message. */
#define ASSERT_OK(call)                                                       \
    do {                                                                      \
        int sw__rc = (call);                                                  \
        if (sw__rc != SW_OK)                                                  \
            FAIL("%s -> %s (%d): %s", #call, sw_err_name(sw__rc), sw__rc,     \
                 sw_last_error());                                            \
    } while (0)

/* call must fail with exactly code, and set a non-empty detail message. */
#define ASSERT_ERR(call, code)                                                \
    do {                                                                      \
        int sw__rc = (call);                                                  \
        int sw__want = (code);                                                \
        if (sw__rc != sw__want)                                               \
            FAIL("%s -> %s (%d), expected %s (%d); last error: %s", #call,    \
                 sw_err_name(sw__rc), sw__rc, sw_err_name(sw__want),          \
                 sw__want, sw_last_error());                                  \
        const char *sw__msg = sw_last_error();                                \
        if (sw__msg == NULL || sw__msg[0] == '\0')                            \
            FAIL("%s -> %s as expected, but sw_last_error() is empty", #call, \
                 sw_err_name(sw__rc));                                        \
    } while (0)

/* call must fail with one of two codes (where the header leaves the choice
 * open), with a non-empty detail message. */
#define ASSERT_ERR2(call, code1, code2)                                       \
    do {                                                                      \
        int sw__rc = (call);                                                  \
        int sw__w1 = (code1), sw__w2 = (code2);                               \
        if (sw__rc != sw__w1 && sw__rc != sw__w2)                             \
            FAIL("%s -> %s (%d), expected %s or %s; last error: %s", #call,   \
                 sw_err_name(sw__rc), sw__rc, sw_err_name(sw__w1),            \
                 sw_err_name(sw__w2), sw_last_error());                       \
        const char *sw__msg = sw_last_error();                                \
        if (sw__msg == NULL || sw__msg[0] == '\0')                            \
            FAIL("%s -> %s as expected, but sw_last_error() is empty", #call, \
                 sw_err_name(sw__rc));                                        \
    } while (0)

#define ASSERT_STR_EQ(a, b)                                                   \
    do {                                                                      \
        const char *sw__a = (a);                                              \
        const char *sw__b = (b);                                              \
        if (sw__a == NULL || sw__b == NULL || strcmp(sw__a, sw__b) != 0)      \
            FAIL("ASSERT_STR_EQ(%s, %s) failed: \"%s\" vs \"%s\"", #a, #b,    \
                 sw__a ? sw__a : "(null)", sw__b ? sw__b : "(null)");         \
    } while (0)

/* Case-sensitive and case-insensitive substring checks. */
#define ASSERT_STR_CONTAINS(hay, needle)                                      \
    do {                                                                      \
        const char *sw__h = (hay);                                            \
        const char *sw__n = (needle);                                         \
        if (sw__h == NULL || strstr(sw__h, sw__n) == NULL)                    \
            FAIL("\"%s\" does not contain \"%s\"",                            \
                 sw__h ? sw__h : "(null)", sw__n);                            \
    } while (0)
#define ASSERT_STR_ICONTAINS(hay, needle)                                     \
    do {                                                                      \
        const char *sw__h = (hay);                                            \
        const char *sw__n = (needle);                                         \
        if (sw__h == NULL || test_strcasestr(sw__h, sw__n) == NULL)           \
            FAIL("\"%s\" does not contain \"%s\" (any case)",                 \
                 sw__h ? sw__h : "(null)", sw__n);                            \
    } while (0)

/* Byte-wise comparison; reports the first differing offset. */
#define ASSERT_MEM_EQ(a, b, n)                                                \
    do {                                                                      \
        size_t sw__off = test_memdiff((a), (b), (n));                         \
        if (sw__off != (size_t)-1)                                            \
            FAIL("ASSERT_MEM_EQ(%s, %s, %s) failed at byte %zu: %#x vs %#x", \
                 #a, #b, #n, sw__off,                                         \
                 ((const unsigned char *)(a))[sw__off],                       \
                 ((const unsigned char *)(b))[sw__off]);                      \
    } while (0)

/* ------------------------------------------------------------------------
 * Helpers (helpers.c)
 * ---------------------------------------------------------------------- */

/* The device under test: $SW_TEST_DEVICE, default "sim:0".  Each call opens
 * one reference that the runner closes (and checks) after the test. */
const char *test_device_spec(void);
sw_device *test_device(void);
/* Open spec (fails the test if it cannot) with the same tracking. */
sw_device *test_open(const char *spec);
/* Nonzero when the device under test is the simulated device. */
int test_is_sim(void);
/* SKIP unless the device under test is the simulated one. */
void test_require_sim(void);
/* Nonzero when the device under test spills: every device but host:0,
 * whose memory is the host's own (docs/host.md). */
int test_can_spill(void);
/* SKIP unless the device under test spills. */
void test_require_spill(void);

/* Called by main.c in the child after the test function returned. */
void test_check_devices_empty(void);

/* sw_memory_info_get that must succeed. */
sw_memory_info test_info(sw_device *dev);
/* Synchronize, then read the memory info (device_free moves in stream
 * order). */
sw_memory_info test_info_synced(sw_device *dev);

/* What a fresh simulated device may keep for the library's own use (the
 * core's scratch block for small results): device_free starts at most this
 * much below device_total. */
#define TEST_SIM_RESERVED 4096u

/* Round up to SW_ALLOC_GRANULARITY. */
static inline uint64_t test_round(uint64_t n)
{
    return (n + SW_ALLOC_GRANULARITY - 1) / SW_ALLOC_GRANULARITY *
           SW_ALLOC_GRANULARITY;
}

/* Pin a buffer where it is (sw_launch_begin of it alone), so that nothing
 * (spilling included) can move it to make room: a test that wants an
 * allocation to fail for want of room pins what it holds.  Unpin before
 * freeing. */
void test_pin(sw_buffer *buf);
void test_unpin(sw_buffer *buf);
/* Unpin and free. */
void test_unpin_free(sw_buffer *buf);
/* b's entry in dev's snapshot (sw_memory_snapshot; fails the test if it
 * has none). */
sw_buffer_info test_buffer_info(sw_device *dev, sw_buffer *b);
/* The pins on b's base now (from the snapshot). */
uint32_t test_pins_of(sw_device *dev, sw_buffer *b);

/* Allocation that must succeed. */
sw_buffer *test_alloc(sw_device *dev, size_t size, const char *tag);

/* Deterministic byte patterns: byte i of pattern seed. */
void test_pattern(void *dst, size_t n, uint32_t seed);
/* Offset of the first byte of [p, p + n) that does not match the pattern,
 * or (size_t)-1. */
size_t test_pattern_check(const void *p, size_t n, uint32_t seed);
/* Write a pattern into buf (whole buffer) and check it reads back. */
void test_write_pattern(sw_buffer *buf, uint32_t seed);
/* Read the whole of buf and require it to hold the pattern. */
void test_expect_pattern(sw_buffer *buf, uint32_t seed);

/* Does msg state the byte count n?  Either in decimal ("1048576") or in a
 * human-readable form ("1 MiB", "1.0MiB", "1.00 MB", "1M"), so that the
 * tests do not fix the message's format, only its content. */
int test_msg_has_bytes(const char *msg, uint64_t n);
#define ASSERT_MSG_BYTES(msg, n)                                              \
    do {                                                                      \
        const char *sw__m = (msg);                                            \
        uint64_t sw__n = (uint64_t)(n);                                       \
        if (!test_msg_has_bytes(sw__m, sw__n))                                \
            FAIL("message does not state %s = %" PRIu64 " bytes: \"%s\"",    \
                 #n, sw__n, sw__m ? sw__m : "(null)");                        \
    } while (0)

/* First differing byte offset, or (size_t)-1. */
size_t test_memdiff(const void *a, const void *b, size_t n);
const char *test_strcasestr(const char *hay, const char *needle);

/* A small, fast PRNG (xorshift64*), one state per user. */
static inline uint64_t test_rand(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* Seconds on a monotonic clock. */
double test_now(void);

/* Run fn(arg) in a fork()ed child (before the calling test opened any
 * device: a fork after threads exist keeps only this thread) and return its
 * wait status.  The child's stderr is captured into err (err_len bytes,
 * NUL-terminated; may be NULL).  The child ends with _exit(fn(arg)). */
int test_fork_run(int (*fn)(void *), void *arg, char *err, size_t err_len);

#endif /* SW_TEST_H */
