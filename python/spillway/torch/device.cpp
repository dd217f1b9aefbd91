/*
 * device.cpp -- spillway:N for PyTorch: the device table, the current
 * device, and what PyTorch asks of a PrivateUse1 backend about its devices
 * (DeviceGuardImplInterface, PrivateUse1HooksInterface, generators).
 *
 * Streams and events.  Ops run on the host (fallback.cpp) and return when
 * their work is done; spillway orders its own asynchronous work (copies
 * between devices' memory, spills, restores) on the device's queues and
 * makes every host access wait for it.  So a spillway device has one
 * stream, its default, and an event completes when recorded; waiting for
 * one, or for the stream, waits for the device (sw_device_synchronize).
 *
 * Generators.  The kernels are PyTorch's CPU kernels, which take only CPU
 * generators.  A spillway generator wraps one (its state is a CPU
 * generator's state) and the fallback hands the CPU kernel that one; so
 * torch.manual_seed(s) makes torch.randn(n, device="spillway") draw what
 * torch.randn(n) draws after the same seed.
 */
#include "layer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/DeviceCapability.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <array>
#include <mutex>

namespace spillway_torch {

/* ------------------------------------------------------------------------
 * The device table
 *
 * Fixed once the first tensor exists (module.cpp checks): readers take the
 * current table with one atomic load and never lock.  Replaced tables are
 * kept (a few bytes each, at most once per set_devices call before any
 * tensor), so a reader never sees one freed.
 * ---------------------------------------------------------------------- */

namespace {

struct Table {
    int n = 0;
    std::array<DeviceSlot, kMaxDevices> slots;
};

std::atomic<const Table *> g_table{new Table()};
thread_local c10::DeviceIndex t_current = 0;

} // namespace

int device_count() noexcept
{
    return g_table.load(std::memory_order_acquire)->n;
}

static std::string table_list(const Table *t)
{
    std::string s;
    for (int i = 0; i < t->n; i++) {
        s += (i ? ", spillway:" : "spillway:") + std::to_string(i) + " = " +
             t->slots[i].spec;
    }
    return s.empty() ? std::string("none") : s;
}

const DeviceSlot &slot(c10::DeviceIndex index)
{
    const Table *t = g_table.load(std::memory_order_acquire);
    TORCH_CHECK(index >= 0 && index < t->n, "spillway:", int(index),
                      " does not exist: there ", t->n == 1 ? "is " : "are ",
                      t->n, t->n == 1 ? " spillway device (" : " spillway devices (",
                      table_list(t),
                      "; spillway.torch.set_devices or $SPILLWAY_TORCH_DEVICES "
                      "names them)");
    return t->slots[index];
}

std::string describe(c10::DeviceIndex index)
{
    const Table *t = g_table.load(std::memory_order_acquire);
    std::string s = "spillway:" + std::to_string(int(index));
    if (index >= 0 && index < t->n)
        s += " (" + t->slots[index].spec + ")";
    return s;
}

c10::DeviceIndex current_device() noexcept
{
    return t_current;
}

void set_current_device(c10::DeviceIndex index)
{
    (void)slot(index); /* checks it */
    t_current = index;
}

void configure_devices(const DeviceSlot *slots, int n)
{
    TORCH_CHECK(n >= 0 && n <= kMaxDevices, "spillway.torch: at most ",
                kMaxDevices, " devices");
    auto *t = new Table();
    t->n = n;
    for (int i = 0; i < n; i++)
        t->slots[i] = slots[i];
    g_table.store(t, std::memory_order_release);
    if (t_current >= n)
        t_current = 0;
}

/* ------------------------------------------------------------------------
 * Generators
 * ---------------------------------------------------------------------- */

namespace {

struct Generator final : public c10::GeneratorImpl {
    explicit Generator(c10::DeviceIndex index,
                       uint64_t seed = c10::default_rng_seed_val)
        : c10::GeneratorImpl(c10::Device(kDevType, index),
                             c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
          cpu(at::make_generator<at::CPUGeneratorImpl>(seed))
    {
    }

    /* Every state change goes to the CPU generator under its own mutex,
     * the one PyTorch's CPU kernels take while they draw. */
    void set_current_seed(uint64_t seed) override
    {
        std::lock_guard<std::mutex> lock(cpu.mutex());
        cpu.set_current_seed(seed);
    }
    void set_offset(uint64_t offset) override
    {
        std::lock_guard<std::mutex> lock(cpu.mutex());
        cpu.set_offset(offset);
    }
    uint64_t get_offset() const override
    {
        std::lock_guard<std::mutex> lock(cpu.mutex());
        return cpu.get_offset();
    }
    uint64_t current_seed() const override
    {
        return cpu.current_seed();
    }
    uint64_t seed() override
    {
        std::lock_guard<std::mutex> lock(cpu.mutex());
        return cpu.seed();
    }
    void set_state(const c10::TensorImpl &state) override
    {
        std::lock_guard<std::mutex> lock(cpu.mutex());
        cpu.unsafeGetGeneratorImpl()->set_state(state);
    }
    c10::intrusive_ptr<c10::TensorImpl> get_state() const override
    {
        std::lock_guard<std::mutex> lock(cpu.mutex());
        return cpu.unsafeGetGeneratorImpl()->get_state();
    }
    Generator *clone_impl() const override
    {
        auto *g = new Generator(device().index());
        std::lock_guard<std::mutex> lock(cpu.mutex());
        g->cpu = cpu.clone();
        return g;
    }

    mutable at::Generator cpu;
};

std::once_flag g_default_once[kMaxDevices];
at::Generator g_default[kMaxDevices];

} // namespace

const at::Generator &default_generator(c10::DeviceIndex index)
{
    (void)slot(index);
    std::call_once(g_default_once[index], [index] {
        g_default[index] = at::make_generator<Generator>(index);
    });
    return g_default[index];
}

std::optional<at::Generator> cpu_generator_of(const at::Generator &gen)
{
    if (!gen.defined() || gen.device().type() != kDevType)
        return std::nullopt;
    return static_cast<Generator *>(gen.unsafeGetGeneratorImpl())->cpu;
}

/* ------------------------------------------------------------------------
 * DeviceGuardImplInterface
 * ---------------------------------------------------------------------- */

namespace {

/* An event: recorded or not (a non-null pointer once recorded). */
char g_recorded;

void sync_device(c10::DeviceIndex index)
{
    const DeviceSlot &s = slot(index);
    NoGil nogil;
    check(api->device_synchronize(s.dev), "synchronize");
}

struct GuardImpl final : public c10::impl::DeviceGuardImplInterface {
    GuardImpl() = default;
    explicit GuardImpl(c10::DeviceType t)
    {
        TORCH_CHECK(t == kDevType, "spillway's guard got ", t);
    }
    c10::DeviceType type() const override
    {
        return kDevType;
    }
    c10::Device exchangeDevice(c10::Device d) const override
    {
        TORCH_CHECK(d.type() == kDevType, "expected a spillway device, got ",
                    d);
        c10::DeviceIndex old = current_device();
        if (d.has_index())
            set_current_device(d.index());
        return c10::Device(kDevType, old);
    }
    c10::Device getDevice() const override
    {
        return c10::Device(kDevType, current_device());
    }
    void setDevice(c10::Device d) const override
    {
        TORCH_CHECK(d.type() == kDevType, "expected a spillway device, got ",
                    d);
        if (d.has_index())
            set_current_device(d.index());
    }
    void uncheckedSetDevice(c10::Device d) const noexcept override
    {
        if (d.has_index() && d.index() >= 0 && d.index() < device_count())
            t_current = d.index();
    }
    c10::Stream getStream(c10::Device d) const override
    {
        return c10::Stream(c10::Stream::DEFAULT, d);
    }
    c10::Stream getDefaultStream(c10::Device d) const override
    {
        return c10::Stream(c10::Stream::DEFAULT, d);
    }
    c10::Stream getNewStream(c10::Device d, int) const override
    {
        return c10::Stream(c10::Stream::DEFAULT, d);
    }
    c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override
    {
        return c10::Stream(c10::Stream::DEFAULT, d);
    }
    c10::Stream exchangeStream(c10::Stream s) const noexcept override
    {
        return s;
    }
    c10::DeviceIndex deviceCount() const noexcept override
    {
        return static_cast<c10::DeviceIndex>(device_count());
    }
    /* Every dtype: the kernels are the CPU's. */
    c10::DeviceCapability getDeviceCapability(c10::Device) const override
    {
        return c10::DeviceCapability();
    }
    void destroyEvent(void *, const c10::DeviceIndex) const noexcept override
    {
    }
    void record(void **event, const c10::Stream &, const c10::DeviceIndex,
                const c10::EventFlag) const override
    {
        *event = &g_recorded;
    }
    void block(void *, const c10::Stream &) const override
    {
        /* The stream is the host's: work after this already waits. */
    }
    bool queryEvent(void *) const override
    {
        return true;
    }
    bool queryStream(const c10::Stream &) const override
    {
        return true;
    }
    void synchronizeStream(const c10::Stream &s) const override
    {
        sync_device(s.device_index());
    }
    void synchronizeEvent(void *) const override
    {
        sync_device(current_device());
    }
    void synchronizeDevice(const c10::DeviceIndex index) const override
    {
        sync_device(index < 0 ? current_device() : index);
    }
    void recordDataPtrOnStream(const c10::DataPtr &,
                               const c10::Stream &) const override
    {
    }
    double elapsedTime(void *, void *, const c10::DeviceIndex) const override
    {
        TORCH_CHECK(false, "spillway devices do not time events");
    }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

/* ------------------------------------------------------------------------
 * PrivateUse1HooksInterface
 * ---------------------------------------------------------------------- */

struct Hooks final : public at::PrivateUse1HooksInterface {
    void init() const override {}
    bool isBuilt() const override
    {
        return true;
    }
    bool isAvailable() const override
    {
        return device_count() > 0;
    }
    bool hasPrimaryContext(c10::DeviceIndex) const override
    {
        return true;
    }
    c10::DeviceIndex deviceCount() const override
    {
        return static_cast<c10::DeviceIndex>(device_count());
    }
    void setCurrentDevice(c10::DeviceIndex d) const override
    {
        set_current_device(d);
    }
    c10::DeviceIndex getCurrentDevice() const override
    {
        return current_device();
    }
    c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override
    {
        c10::DeviceIndex old = current_device();
        set_current_device(d);
        return old;
    }
    c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override
    {
        if (d < 0 || d >= device_count())
            return current_device();
        return exchangeDevice(d);
    }
    const at::Generator &
    getDefaultGenerator(c10::DeviceIndex index) const override
    {
        return default_generator(index < 0 ? current_device() : index);
    }
    at::Generator getNewGenerator(c10::DeviceIndex index) const override
    {
        c10::DeviceIndex i = index < 0 ? current_device() : index;
        (void)slot(i);
        return at::make_generator<Generator>(i);
    }
    at::Device getDeviceFromPtr(void *data) const override
    {
        size_t off = 0;
        Block *b = resolve(data, &off);
        TORCH_CHECK(b != nullptr, "not an address of a spillway tensor");
        return at::Device(kDevType, b->device);
    }
    bool isPinnedPtr(const void *) const override
    {
        return false;
    }
    /* Pinned host memory means nothing here (every copy is the host's):
     * pin_memory() hands out plain host memory. */
    at::Allocator *getPinnedMemoryAllocator() const override
    {
        return c10::GetCPUAllocator();
    }
    void resizePrivateUse1Bytes(const c10::Storage &storage,
                                size_t newsize) const override
    {
        resize_storage_bytes(storage, newsize);
    }
};

struct RegisterHooks {
    RegisterHooks()
    {
        at::RegisterPrivateUse1HooksInterface(new Hooks());
    }
} g_register_hooks;

} // namespace

} // namespace spillway_torch
