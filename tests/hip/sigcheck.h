/*
 * sigcheck.h -- the run-time half of tests/hip/sigcheck.c, called by the
 * C suite's hip_signatures test (built only where the HIP headers were
 * found).
 */
#ifndef SW_HIP_SIGCHECK_H
#define SW_HIP_SIGCHECK_H

/* How many declarations, constants and offsets were checked at compile
 * time. */
int sw_test_hip_sigcheck_count(void);

/* HIP_VERSION of the headers checked against (e.g. 50221153). */
int sw_test_hip_sigcheck_version(void);

#endif /* SW_HIP_SIGCHECK_H */
