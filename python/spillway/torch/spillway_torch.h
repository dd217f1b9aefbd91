/*
 * spillway_torch.h -- for a vendor's own PyTorch kernels on the spillway
 * device (docs/torch.md, "Your own device and kernels").
 *
 * spillway.torch's C++ layer lends what such kernels need as the capsule
 * spillway.torch._C._api: the spillway library of the process (the one
 * Python's spillway module uses: its devices, budgets and pressure
 * callbacks) and the buffer behind a spillway tensor.  A kernel registered
 * for PrivateUse1 with TORCH_LIBRARY_IMPL pins its tensors' buffers on its
 * own queue (lib->queue_wrap_native of its stream), runs on the memory the
 * pins hand out, and ends the pins on that queue: spillway keeps every
 * byte where the kernel expects it until the kernel's work is done, and
 * may move them after.  Never keep an address past the pin.
 *
 * The headers are in the wheel: spillway.torch.include_dir().  The struct
 * is versioned: entries are only ever appended; check version and size.
 */
#ifndef SPILLWAY_TORCH_H
#define SPILLWAY_TORCH_H

#include "c_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SW_TORCH_API_CAPSULE "spillway.torch._C._api"
#define SW_TORCH_API_VERSION 1

typedef struct sw_torch_api {
    int version; /* SW_TORCH_API_VERSION of the lender */
    size_t size; /* sizeof(sw_torch_api) of the lender */
    /* The spillway library (c_api.h): pins, queues, figures. */
    const sw_py_c_api *lib;
    /* The buffer behind a spillway tensor (tensor: an at::Tensor *) and
     * the byte offset of its first element in it; *buf NULL for a tensor of
     * 0 bytes.  SW_ERR_INVALID_ARG for a tensor of another device type. */
    int (*tensor_buffer)(const void *tensor, sw_buffer **buf, size_t *offset);
    /* The spillway device behind spillway:index; NULL for none. */
    sw_device *(*device)(int index);
} sw_torch_api;

#ifdef __cplusplus
}
#endif
#endif /* SPILLWAY_TORCH_H */
