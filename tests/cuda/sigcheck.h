/*
 * sigcheck.h -- the run-time half of tests/cuda/sigcheck.c, called by the
 * C suite's cuda_signatures test (built only where cuda.h was found).
 */
#ifndef SW_CUDA_SIGCHECK_H
#define SW_CUDA_SIGCHECK_H

#include <stddef.h>

/* Checks that every versioned symbol the backend resolves is the name
 * cuda.h maps the public name to.  Returns the number of mismatches (0:
 * all agree), described in err. */
int sw_test_cuda_sigcheck(char *err, size_t len);

/* How many declarations were checked (driver and NVRTC functions,
 * constants). */
int sw_test_cuda_sigcheck_count(void);

#endif /* SW_CUDA_SIGCHECK_H */
