/*
 * allocator.cpp -- tensors' storage is spillway memory.
 *
 * Every storage is one spillway buffer (a Block), allocated tagged "torch"
 * on the device the current device names, through the library's whole
 * allocation ladder: the budget, the cache, the pressure callbacks
 * (Python's collector, on whatever thread allocates: a Python thread or
 * one of autograd's), spilling, and an OOM report.  PyTorch gets an
 * opaque address (layer.h), never the bytes' own.
 *
 * PyTorch's figures (c10::DeviceAllocator, so torch.accelerator.* and
 * torch.spillway.* work), per device:
 *  - allocation, active, allocated_bytes, active_bytes, requested_bytes:
 *    the live blocks of tensors' storages (and the fallback's temporaries
 *    while they live), wherever their bytes are -- on the device, spilled to
 *    host memory or to the disk (memory_info() tells which); bytes rounded
 *    as the device counts them (512), requested_bytes exact;
 *  - reserved_bytes: the device memory spillway holds on the device,
 *    in_use + cached, for every user of the device (what the budget
 *    bounds); its peak is the library's peak_reserved;
 *  - num_alloc_retries, num_ooms, num_device_alloc, num_device_free: the
 *    device's own counters (memory_info's alloc_retries, ooms, allocs,
 *    frees).
 * spillway's cache is one pool (bucketed by size, not split in two as
 * PyTorch's): everything is counted in "large_pool", nothing in
 * "small_pool".
 */
#include "layer.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/irange.h>

#include <map>
#include <mutex>

namespace spillway_torch {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

const sw_py_c_api *api = nullptr;

[[noreturn]] void throw_error(int rc, const std::string &what)
{
    std::string msg = "spillway: " + what + ": " + api->err_name(rc);
    const char *detail = api->last_error();
    if (detail != nullptr && detail[0] != '\0')
        msg += std::string(": ") + detail;
    if (rc == SW_ERR_OOM || rc == SW_ERR_HOST_OOM || rc == SW_ERR_TOO_LARGE)
        TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
    if (rc == SW_ERR_INVALID_ARG || rc == SW_ERR_OUT_OF_RANGE ||
        rc == SW_ERR_DTYPE)
        TORCH_CHECK_VALUE(false, msg);
    TORCH_CHECK(false, msg);
}

/* ------------------------------------------------------------------------
 * Opaque addresses and the registry of live blocks
 * ---------------------------------------------------------------------- */

namespace {

constexpr uintptr_t kAddrBase = uintptr_t(1) << 48;
constexpr uintptr_t kAddrSpan = uintptr_t(1) << 54;
constexpr uintptr_t kAddrAlign = 4096;

std::mutex g_mu;                      /* a leaf: guards what follows */
std::map<uintptr_t, Block *> g_live;  /* by addr */
uintptr_t g_next = kAddrBase;
std::atomic<long> g_blocks{0};

/* A range of addresses for nbytes, past every live one: a bump pointer
 * that wraps (after 16 PiB of allocations) to the lowest gap that fits. */
uintptr_t take_range(size_t nbytes)
{
    uintptr_t len = (uintptr_t(nbytes) + 2 * kAddrAlign - 1) & ~(kAddrAlign - 1);
    if (g_next + len > kAddrBase + kAddrSpan) {
        uintptr_t at = kAddrBase;
        for (auto &kv : g_live) {
            if (kv.first >= at + len)
                break;
            at = (kv.first + kv.second->nbytes + 2 * kAddrAlign - 1) &
                 ~(kAddrAlign - 1);
        }
        TORCH_CHECK(at + len <= kAddrBase + kAddrSpan,
                    "spillway: out of opaque addresses");
        g_next = at;
    }
    uintptr_t a = g_next;
    g_next += len;
    return a;
}

/* ------------------------------------------------------------------------
 * Statistics
 * ---------------------------------------------------------------------- */

constexpr size_t kAgg = static_cast<size_t>(StatType::AGGREGATE);
constexpr size_t kLarge = static_cast<size_t>(StatType::LARGE_POOL);

struct DevStats {
    std::mutex mu;
    DeviceStats s;
};
DevStats g_stats[kMaxDevices];

void stats_add(const Block *b, bool add)
{
    DevStats &d = g_stats[b->device];
    std::lock_guard<std::mutex> lock(d.mu);
    for (size_t t : {kAgg, kLarge}) {
        auto step = [&](Stat &st, size_t n) {
            if (add)
                st.increase(n);
            else
                st.decrease(n);
        };
        step(d.s.allocation[t], 1);
        step(d.s.segment[t], 1);
        step(d.s.active[t], 1);
        step(d.s.allocated_bytes[t], b->rounded);
        step(d.s.active_bytes[t], b->rounded);
        step(d.s.requested_bytes[t], b->nbytes);
    }
}

void delete_device_ptr(void *ctx)
{
    if (ctx != nullptr)
        block_unref(static_cast<Block *>(ctx));
}

} // namespace

Block *block_alloc(c10::DeviceIndex index, size_t nbytes)
{
    const DeviceSlot &s = slot(index);
    sw_buffer *buf = nullptr;
    int rc;
    {
        NoGil nogil;
        rc = api->buffer_alloc(s.dev, nbytes, "torch", &buf);
    }
    if (rc != SW_OK)
        throw_error(rc, "allocating " + std::to_string(nbytes) +
                            " bytes on " + describe(index));
    auto *b = new Block();
    b->buf = buf;
    b->nbytes = nbytes;
    b->rounded = (nbytes + SW_ALLOC_GRANULARITY - 1) /
                 SW_ALLOC_GRANULARITY * SW_ALLOC_GRANULARITY;
    b->device = index;
    try {
        std::lock_guard<std::mutex> lock(g_mu);
        b->addr = take_range(nbytes);
        g_live.emplace(b->addr, b);
    } catch (...) {
        NoGil nogil;
        (void)api->buffer_free(buf);
        delete b;
        throw;
    }
    g_blocks.fetch_add(1, std::memory_order_relaxed);
    stats_add(b, true);
    return b;
}

void block_unref(Block *b)
{
    if (b->refs.fetch_sub(1, std::memory_order_acq_rel) != 1)
        return;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        g_live.erase(b->addr);
    }
    stats_add(b, false);
    g_blocks.fetch_sub(1, std::memory_order_relaxed);
    {
        /* Never waits for the device: the memory goes back in stream
         * order.  A free can come from anywhere (a collection inside a
         * pressure callback, autograd's threads). */
        NoGil nogil;
        (void)api->buffer_free(b->buf);
    }
    delete b;
}

c10::DataPtr device_data_ptr(Block *b)
{
    b->refs.fetch_add(1, std::memory_order_relaxed);
    return c10::DataPtr(reinterpret_cast<void *>(b->addr), b,
                        &delete_device_ptr, c10::Device(kDevType, b->device));
}

Block *resolve(const void *p, size_t *offset)
{
    auto a = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_live.upper_bound(a);
    if (it == g_live.begin())
        return nullptr;
    --it;
    Block *b = it->second;
    if (a - b->addr > b->nbytes)
        return nullptr;
    *offset = a - b->addr;
    return b;
}

Span span_of_storage(const c10::Storage &s)
{
    Span sp;
    const c10::DataPtr &dp = s.data_ptr();
    if (dp.get() == nullptr)
        return sp;
    /* Our own storages carry their block; any other pointer (a storage
     * slice made by PyTorch without a deleter) is looked up. */
    if (dp.get_deleter() == &delete_device_ptr) {
        sp.block = static_cast<Block *>(dp.get_context());
        sp.offset = reinterpret_cast<uintptr_t>(dp.get()) - sp.block->addr;
        return sp;
    }
    sp.block = resolve(dp.get(), &sp.offset);
    TORCH_CHECK(sp.block != nullptr,
                "spillway: a storage on a spillway device whose memory is "
                "not spillway's (freed, or made outside spillway)");
    return sp;
}

Span span_of(const at::TensorBase &t)
{
    Span sp = span_of_storage(t.storage());
    sp.offset += static_cast<size_t>(t.storage_offset()) * t.itemsize();
    return sp;
}

long live_blocks() noexcept
{
    return g_blocks.load(std::memory_order_relaxed);
}

/* ------------------------------------------------------------------------
 * c10::DeviceAllocator
 * ---------------------------------------------------------------------- */

namespace {

struct Allocator final : public c10::DeviceAllocator {
    c10::DataPtr allocate(size_t nbytes) override
    {
        c10::DeviceIndex index = current_device();
        (void)slot(index);
        if (nbytes == 0)
            return c10::DataPtr(nullptr, nullptr, &delete_device_ptr,
                                c10::Device(kDevType, index));
        Block *b = block_alloc(index, nbytes);
        /* block_alloc's reference is the DataPtr's. */
        return c10::DataPtr(reinterpret_cast<void *>(b->addr), b,
                            &delete_device_ptr, c10::Device(kDevType, index));
    }

    c10::DeleterFnPtr raw_deleter() const override
    {
        return nullptr; /* the context is not the address */
    }

    void copy_data(void *dest, const void *src, size_t count) const override
    {
        size_t doff = 0, soff = 0;
        Block *d = resolve(dest, &doff);
        Block *s = resolve(src, &soff);
        TORCH_CHECK(d && s, "spillway: copy_data outside spillway memory");
        NoGil nogil;
        check(api->buffer_copy(d->buf, doff, s->buf, soff, count),
              "copying between storages");
    }

    bool initialized() override
    {
        return device_count() > 0;
    }

    void emptyCache(c10::MempoolId_t) override
    {
        for (int i = 0; i < device_count(); i++) {
            const DeviceSlot &s = slot(static_cast<c10::DeviceIndex>(i));
            NoGil nogil;
            check(api->empty_cache(s.dev), "empty_cache");
        }
    }

    void recordStream(const c10::DataPtr &, c10::Stream) override
    {
        /* One stream per device, the host's (device.cpp). */
    }

    DeviceStats getDeviceStats(c10::DeviceIndex index) override
    {
        const DeviceSlot &s = slot(index);
        sw_memory_info info{};
        {
            NoGil nogil;
            check(api->memory_info_get(s.dev, &info), "memory_info");
        }
        DevStats &d = g_stats[index];
        std::lock_guard<std::mutex> lock(d.mu);
        DeviceStats out = d.s;
        for (size_t t : {kAgg, kLarge}) {
            Stat &r = out.reserved_bytes[t];
            r.current = static_cast<int64_t>(info.in_use + info.cached);
            r.peak = static_cast<int64_t>(info.peak_reserved);
        }
        out.num_alloc_retries = static_cast<int64_t>(info.alloc_retries);
        out.num_ooms = static_cast<int64_t>(info.ooms);
        out.num_device_alloc = static_cast<int64_t>(info.allocs);
        out.num_device_free = static_cast<int64_t>(info.frees);
        return out;
    }

    void resetAccumulatedStats(c10::DeviceIndex index) override
    {
        const DeviceSlot &s = slot(index);
        {
            DevStats &d = g_stats[index];
            std::lock_guard<std::mutex> lock(d.mu);
            for (const auto t :
                 c10::irange(static_cast<size_t>(StatType::NUM_TYPES))) {
                d.s.allocation[t].reset_accumulated();
                d.s.segment[t].reset_accumulated();
                d.s.active[t].reset_accumulated();
                d.s.allocated_bytes[t].reset_accumulated();
                d.s.active_bytes[t].reset_accumulated();
                d.s.requested_bytes[t].reset_accumulated();
            }
        }
        NoGil nogil;
        check(api->reset_counters(s.dev), "reset_accumulated_memory_stats");
    }

    void resetPeakStats(c10::DeviceIndex index) override
    {
        const DeviceSlot &s = slot(index);
        {
            DevStats &d = g_stats[index];
            std::lock_guard<std::mutex> lock(d.mu);
            for (const auto t :
                 c10::irange(static_cast<size_t>(StatType::NUM_TYPES))) {
                d.s.allocation[t].reset_peak();
                d.s.segment[t].reset_peak();
                d.s.active[t].reset_peak();
                d.s.allocated_bytes[t].reset_peak();
                d.s.active_bytes[t].reset_peak();
                d.s.requested_bytes[t].reset_peak();
            }
        }
        NoGil nogil;
        check(api->reset_peak(s.dev), "reset_peak_memory_stats");
    }

    std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex index) override
    {
        const DeviceSlot &s = slot(index);
        sw_memory_info info{};
        NoGil nogil;
        check(api->memory_info_get(s.dev, &info), "mem_get_info");
        return {static_cast<size_t>(info.device_free),
                static_cast<size_t>(info.device_total)};
    }
};

Allocator g_allocator;

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

} // namespace

c10::Allocator *allocator()
{
    return &g_allocator;
}

void resize_storage_bytes(const c10::Storage &storage, size_t newsize)
{
    TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not "
                                     "resizable");
    size_t old = storage.nbytes();
    Span from = span_of_storage(storage);
    c10::DeviceIndex index = storage.device().index();
    c10::DataPtr fresh;
    if (newsize > 0) {
        Block *b = block_alloc(index, newsize);
        fresh = c10::DataPtr(reinterpret_cast<void *>(b->addr), b,
                             &delete_device_ptr, c10::Device(kDevType, index));
        size_t keep = std::min(old, newsize);
        if (keep > 0 && from.block != nullptr) {
            int rc;
            {
                NoGil nogil;
                rc = api->buffer_copy(b->buf, 0, from.block->buf, from.offset,
                                      keep);
            }
            if (rc != SW_OK)
                throw_error(rc, "resizing a storage"); /* fresh frees b */
        }
    } else {
        fresh = c10::DataPtr(nullptr, nullptr, &delete_device_ptr,
                             c10::Device(kDevType, index));
    }
    c10::StorageImpl *impl = storage.unsafeGetStorageImpl();
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(newsize);
}

} // namespace spillway_torch
