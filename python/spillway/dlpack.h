/*
 * dlpack.h -- the parts of DLPack's C ABI that spillway's Python module
 * exports through (https://dmlc.github.io/dlpack/latest/c_api.html).
 *
 * Written from the specification rather than vendored: the ABI is a handful
 * of plain structs whose layout is fixed by the standard.  Names follow
 * dlpack.h so that readers recognise them; the file is private to the
 * extension module (dlpack.c, dtype.c) and never installed.
 *
 * Two forms exist and both are produced:
 *  - DLManagedTensor, in a capsule named "dltensor" (DLPack < 1.0, and
 *    consumers that do not pass max_version);
 *  - DLManagedTensorVersioned, in a capsule named "dltensor_versioned"
 *    (DLPack >= 1.0: carries its version and flags).
 * A consumer renames the capsule ("used_dltensor", "used_dltensor_versioned")
 * when it takes ownership; the capsule's destructor calls the deleter only
 * when nobody did.
 */
#ifndef SPILLWAY_PY_DLPACK_H
#define SPILLWAY_PY_DLPACK_H

#include <stdint.h>

#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 0

typedef enum {
    kDLCPU = 1,
    kDLCUDA = 2,
    kDLCUDAHost = 3,
    kDLOpenCL = 4,
    kDLVulkan = 7,
    kDLMetal = 8,
    kDLVPI = 9,
    kDLROCM = 10,
    kDLROCMHost = 11,
    kDLExtDev = 12,
    kDLCUDAManaged = 13,
    kDLOneAPI = 14,
    kDLWebGPU = 15,
    kDLHexagon = 16,
} DLDeviceType;

typedef struct {
    DLDeviceType device_type;
    int32_t device_id;
} DLDevice;

typedef enum {
    kDLInt = 0,
    kDLUInt = 1,
    kDLFloat = 2,
    kDLOpaqueHandle = 3,
    kDLBfloat = 4,
    kDLComplex = 5,
    kDLBool = 6,
} DLDataTypeCode;

typedef struct {
    uint8_t code;   /* DLDataTypeCode */
    uint8_t bits;   /* bits per lane */
    uint16_t lanes; /* 1 for scalars */
} DLDataType;

typedef struct {
    void *data;           /* for kDLCPU: a host address */
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;       /* ndim entries */
    int64_t *strides;     /* ndim entries, in elements; NULL: row-major */
    uint64_t byte_offset; /* added to data */
} DLTensor;

typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;

/* DLManagedTensorVersioned.flags */
#define DLPACK_FLAG_BITMASK_READ_ONLY (UINT64_C(1) << 0)
#define DLPACK_FLAG_BITMASK_IS_COPIED (UINT64_C(1) << 1)

typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

#endif /* SPILLWAY_PY_DLPACK_H */
