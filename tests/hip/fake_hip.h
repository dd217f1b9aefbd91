/*
 * fake_hip.h -- what the two HIP stand-ins (fake_libamdhip64.c,
 * fake_libhiprtc.c) agree on: the fake device's architecture and the
 * format of the "code objects" the fake hipRTC makes and the fake runtime
 * loads.  Not a GPU format: a magic line, the architecture it was
 * "compiled" for, and the source.
 */
#ifndef SW_FAKE_HIP_H
#define SW_FAKE_HIP_H

#define FAKE_HIP_ARCH "gfx90a:sramecc+:xnack-"
#define FAKE_HIP_NAME "Fake AMD GPU (CPU stand-in)"
#define FAKE_HIP_MAGIC "SWFAKE-HSACO\n"
#define FAKE_HIP_ARCH_KEY "arch="

#endif /* SW_FAKE_HIP_H */
