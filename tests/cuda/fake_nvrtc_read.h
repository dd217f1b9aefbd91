/*
 * fake_nvrtc_read.h -- between the two files of the CPU stand-in for
 * NVRTC: fake_nvrtc_read.c reads a program's kernel declarations,
 * fake_libnvrtc.c writes the images from them.  Not exported from the
 * library.
 */
#ifndef SW_FAKE_NVRTC_READ_H
#define SW_FAKE_NVRTC_READ_H

#define FAKE_NVRTC_MAX_PARAMS 16
#define FAKE_NVRTC_LOG_MAX 1024

/* A kernel as declared: its entry name and each parameter's PTX type. */
typedef struct fake_kernel {
    char name[96];
    int nparams;
    char ptype[FAKE_NVRTC_MAX_PARAMS][8]; /* "u64", "u8", "f32", ... */
} fake_kernel;

/* Read src (called file in messages): its kernels in *kernels (the caller
 * frees them) and their number in *count, and 0; or -1 with NVRTC's log
 * of the error in log (FAKE_NVRTC_LOG_MAX bytes), -2 when out of memory. */
int fake_nvrtc_read(const char *src, const char *file, fake_kernel **kernels,
                    int *count, char *log);

#endif /* SW_FAKE_NVRTC_READ_H */
