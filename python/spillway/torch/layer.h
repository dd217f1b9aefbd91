/*
 * layer.h -- spillway as a PyTorch device (PrivateUse1, named "spillway"):
 * what the layer's files share.  docs/torch.md is the user's page.
 *
 * The layer is C++ only because PyTorch's dispatcher and allocator
 * interfaces are; every decision about memory (accounting, budgets,
 * spilling, the disk tier, pressure callbacks, OOM reports) stays in the C
 * library, reached through the capsule spillway._spillway._c_api
 * (../c_api.h): the extension module's own copy of libspillway, so that
 * spillway:N is the very device spillway.memory_info() describes and
 * Python's collector runs when it is short.
 *
 * The map:
 *   device.cpp     the device table (spillway:N -> a spillway device), the
 *                  current device, PyTorch's guard, hooks and generators
 *   allocator.cpp  storage: blocks of spillway memory behind opaque
 *                  addresses, c10::DeviceAllocator, PyTorch's statistics
 *   ops.cpp        the minimal PrivateUse1 set: empty, views, resize_,
 *                  copies, scalars, set_
 *   fallback.cpp   every other op: PyTorch's own CPU kernel run in place
 *                  on pinned device memory
 *   cpu_paths.cpp  where PyTorch picks an algorithm by device type (a
 *                  generic decomposition, an "overrideable" op, the SDPA
 *                  backend), the CPU's, so results match the CPU's bit
 *                  for bit
 *   module.cpp     the Python module spillway.torch._C
 *
 * Opaque addresses.  A tensor's data pointer is never an address of its
 * bytes: those move (spilled to host memory or the disk, restored
 * elsewhere), so nothing in PyTorch may keep one.  Each block gets a range
 * of addresses of its own far above any mapping (from 2^48 up: not
 * canonical on x86-64 with 4-level paging, past the 48-bit address space
 * on arm64), so a stray dereference faults at once instead of reading
 * someone's memory, while the ranges keep what PyTorch relies on: distinct
 * storages never overlap, and a view's interior pointer is its base's
 * plus its offset.  resolve() maps any pointer inside a live range back to
 * its block and offset.
 *
 * Locks: the device lock (inside the C library) is the only lock held
 * while calling spillway, and a thread never waits for it holding the GIL
 * (NoGil below): DESIGN.md's order, device lock -> GIL.  The registry's
 * mutex is a leaf: nothing is called while it is held.
 */
#ifndef SPILLWAY_TORCH_LAYER_H
#define SPILLWAY_TORCH_LAYER_H

#include <Python.h>

#include <ATen/core/Generator.h>
#include <ATen/core/TensorBase.h>
#include <ATen/core/stack.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/Storage.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "../c_api.h"

namespace spillway_torch {

constexpr c10::DeviceType kDevType = c10::DeviceType::PrivateUse1;
/* Devices the layer can name (spillway:0 .. spillway:63). */
constexpr int kMaxDevices = 64;

/* ------------------------------------------------------------------------
 * The C library, through the capsule (module.cpp sets it at import)
 * ---------------------------------------------------------------------- */

extern const sw_py_c_api *api;

/* Release the GIL for a call that takes a device lock, if this thread
 * holds it (PyTorch's bindings release it around most ops; some paths, a
 * storage method, a destructor run by Python, keep it). */
class NoGil {
  public:
    NoGil() : state_(holds_gil() ? PyEval_SaveThread() : nullptr) {}
    ~NoGil()
    {
        if (state_ != nullptr)
            PyEval_RestoreThread(state_);
    }
    NoGil(const NoGil &) = delete;
    NoGil &operator=(const NoGil &) = delete;

  private:
    /* From 3.13 the current thread state (PyThreadState_GetUnchecked) is
     * this thread's, set exactly while it holds the GIL: one thread-local
     * read, where PyGILState_Check costs a lookup (this runs twice or more
     * in every op).  In 3.11 it is the state of whichever thread holds the
     * GIL, which says nothing of this one. */
    static bool holds_gil()
    {
#if PY_VERSION_HEX >= 0x030D0000
        return PyThreadState_GetUnchecked() != nullptr;
#else
        return Py_IsInitialized() && PyGILState_Check();
#endif
    }
    PyThreadState *state_;
};

/* Throw for a failed library call: torch.OutOfMemoryError for memory that
 * ran out (device, budget, host tiers), RuntimeError otherwise, with the
 * library's own message (its OOM report) after `what`. */
[[noreturn]] void throw_error(int rc, const std::string &what);
inline void check(int rc, const char *what)
{
    if (rc != SW_OK)
        throw_error(rc, what);
}
inline void check(int rc, const std::string &what)
{
    if (rc != SW_OK)
        throw_error(rc, what);
}

/* ------------------------------------------------------------------------
 * Devices (device.cpp)
 * ---------------------------------------------------------------------- */

struct DeviceSlot {
    sw_device *dev = nullptr;
    std::string spec;          /* "sim:0" */
    bool host_addressable = false;
};

int device_count() noexcept;
/* The slot of spillway:index; throws (ValueError-like IndexError) for an
 * index that names no device. */
const DeviceSlot &slot(c10::DeviceIndex index);
c10::DeviceIndex current_device() noexcept;
void set_current_device(c10::DeviceIndex index);
/* "spillway:1 (sim:1)" */
std::string describe(c10::DeviceIndex index);
/* Called by the module while no tensor is alive: the new table. */
void configure_devices(const DeviceSlot *slots, int n);

/* The CPU generator behind a spillway generator (the fallback hands it to
 * PyTorch's CPU kernels), and the device's default one. */
std::optional<at::Generator> cpu_generator_of(const at::Generator &gen);
const at::Generator &default_generator(c10::DeviceIndex index);

/* ------------------------------------------------------------------------
 * Blocks and the allocator (allocator.cpp)
 * ---------------------------------------------------------------------- */

/* One spillway buffer behind one or more storages.  refs counts the
 * DataPtrs that hold it: a device storage's, and the CPU storage of a
 * block the fallback's CPU kernels allocated (which holds a host pin while
 * it lives: see fallback.cpp). */
struct Block {
    sw_buffer *buf = nullptr;
    uintptr_t addr = 0;        /* opaque base address */
    size_t nbytes = 0;         /* requested */
    size_t rounded = 0;        /* as the device counts it */
    c10::DeviceIndex device = 0;
    std::atomic<int> refs{1};
};

/* A new block of nbytes (> 0) on spillway:index, one reference; throws
 * torch.OutOfMemoryError when spillway cannot find the memory. */
Block *block_alloc(c10::DeviceIndex index, size_t nbytes);
void block_unref(Block *b);
/* A device DataPtr holding one more reference to b. */
c10::DataPtr device_data_ptr(Block *b);
/* The block holding the opaque address p (inside it, or its base), and p's
 * offset into it; nullptr when p is in no live block. */
Block *resolve(const void *p, size_t *offset);

/* A tensor's bytes as the library sees them: its block (nullptr for a
 * storage of 0 bytes) and the byte offset of the tensor's first element. */
struct Span {
    Block *block = nullptr;
    size_t offset = 0;
};
Span span_of(const at::TensorBase &t);
/* The same for a storage's first byte. */
Span span_of_storage(const c10::Storage &s);

c10::Allocator *allocator();
/* Grow or shrink a storage to newsize bytes, its bytes kept up to the
 * smaller size; the storage is unchanged when this throws. */
void resize_storage_bytes(const c10::Storage &storage, size_t newsize);

/* Live blocks (tensors' and temporaries'): set_devices needs none. */
long live_blocks() noexcept;

/* ------------------------------------------------------------------------
 * Host pins and the fallback (fallback.cpp)
 * ---------------------------------------------------------------------- */

void install_capture_allocator();
/* The fallback: op's CPU kernel on its arguments' pinned bytes (the stack
 * holds op's arguments; it ends holding its results, on the device). */
void fallback(const c10::OperatorHandle &op, torch::jit::Stack *stack);
/* Register the fallback for the aten ops whose CPU kernel PyTorch would
 * otherwise pass over for a generic decomposition (cpu_paths.cpp); once,
 * at import, when every aten op is known. */
void register_cpu_paths();
/* dst <- src, both on one host-addressable device, by PyTorch's CPU copy
 * on their pinned bytes. */
void host_copy_pinned(const at::Tensor &dst, const at::Tensor &src);

} // namespace spillway_torch

#endif
