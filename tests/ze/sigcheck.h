/*
 * sigcheck.h -- the run-time half of tests/ze/sigcheck.c, called by the C
 * suite's ze_signatures test (built only where the Level Zero headers were
 * found).
 */
#ifndef SW_ZE_SIGCHECK_H
#define SW_ZE_SIGCHECK_H

/* How many declarations, constants and struct members were checked at
 * compile time. */
int sw_test_ze_sigcheck_count(void);

#endif /* SW_ZE_SIGCHECK_H */
