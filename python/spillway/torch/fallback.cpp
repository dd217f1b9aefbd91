/*
 * fallback.cpp -- every op the minimal set does not cover runs PyTorch's
 * own CPU kernel in place on the device's memory, where the host can
 * address it (sim, host, a registered backend that says so).
 *
 * One op, in order:
 *  1. its tensor arguments (tensors, lists of them, optional ones) on the
 *     spillway device are gathered by storage; an argument of another
 *     spillway device, or a CPU tensor that is not a scalar, is an error;
 *  2. every storage's buffer is pinned for the host in one pass
 *     (sw_launch_begin_q with no queue: restoring what is spilled, never
 *     spilling one of the set, waiting for work queued on them), each read
 *     only (its clean host copy kept) unless the schema says the op writes
 *     that argument;
 *  3. each tensor becomes a CPU tensor over the pinned bytes, with its
 *     sizes, strides and offset, views of one storage over one CPU storage
 *     (so PyTorch's overlap checks see what they would see);
 *  4. the CPU kernel runs (Dispatcher::redispatchBoxed with the CPU key);
 *     while it does, this thread's CPU allocations of a page or more --
 *     the op's outputs, its large temporaries -- are spillway blocks of the
 *     same device, pinned for as long as a CPU tensor holds them (the
 *     capture allocator below), so outputs are written where they will
 *     live, never copied (a smaller output is copied once);
 *  5. results come back as spillway tensors: an input returned is that
 *     input; a view of an input, a view of its storage; a new tensor, the
 *     block it was written in; anything else (allocated elsewhere), a copy;
 *     arguments the kernel resized or re-pointed (out= arguments) follow;
 *  6. the pins end.
 *
 * _foreach_* ops that reach this fallback run element by element, so that
 * no call needs a whole list (a model's parameters) resident at once; most
 * of them never come here: their CompositeExplicitAutograd kernels already
 * loop over the elements and call the per-tensor op.
 */
#include "layer.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <mutex>
#include <unordered_map>

namespace spillway_torch {

/* ------------------------------------------------------------------------
 * Host pins
 * ---------------------------------------------------------------------- */

namespace {

/* Pins a set of blocks for the host in one call and ends them when it
 * goes.  Duplicates are merged, written winning over read. */
class HostPins {
  public:
    size_t add(Block *b, bool write)
    {
        for (size_t i = 0; i < blocks_.size(); i++) {
            if (blocks_[i] == b) {
                if (write)
                    access_[i] = SW_ACCESS_WRITE;
                return i;
            }
        }
        blocks_.push_back(b);
        bufs_.push_back(b->buf);
        access_.push_back(write ? SW_ACCESS_WRITE : SW_ACCESS_READ);
        return blocks_.size() - 1;
    }

    void pin(c10::DeviceIndex index, const char *what)
    {
        if (bufs_.empty())
            return;
        mems_.resize(bufs_.size());
        int rc;
        {
            NoGil nogil;
            rc = api->launch_begin_q_access(nullptr, bufs_.data(),
                                            access_.data(), bufs_.size(),
                                            mems_.data());
        }
        if (rc != SW_OK)
            throw_error(rc, std::string(what) + " on " + describe(index));
        pinned_ = true;
    }

    char *host(size_t i) const
    {
        return reinterpret_cast<char *>(mems_[i].base + mems_[i].offset);
    }

    ~HostPins()
    {
        if (pinned_) {
            NoGil nogil;
            (void)api->launch_end_q(nullptr, bufs_.data(), bufs_.size());
        }
    }

  private:
    c10::SmallVector<Block *, 8> blocks_;
    c10::SmallVector<sw_buffer *, 8> bufs_;
    c10::SmallVector<unsigned char, 8> access_;
    c10::SmallVector<sw_devmem, 8> mems_;
    bool pinned_ = false;
};

/* ------------------------------------------------------------------------
 * The capture allocator
 *
 * Stands in front of PyTorch's CPU allocator for the whole process.  On a
 * thread running a fallback kernel (t_capture names the device), an
 * allocation is a spillway block of that device, pinned for the host while
 * the CPU DataPtr holds it; everywhere else it is the CPU allocator's.
 * Its DataPtrs' context is their address, as the CPU allocator's are, so
 * PyTorch's raw_allocate / raw_deallocate work either way.
 * ---------------------------------------------------------------------- */

thread_local c10::DeviceIndex t_capture = -1;

/* Smaller allocations stay the CPU allocator's: a kernel's scalars and
 * index buffers are not worth a block and a pin, and a small output is
 * cheaper copied once to the device (Run::to_device) than pinned. */
constexpr size_t kCaptureMin = 4096;

std::mutex g_cap_mu; /* a leaf */
std::unordered_map<void *, Block *> g_captured;
c10::Allocator *g_cpu_base = nullptr;
c10::DeleterFnPtr g_cpu_base_raw = nullptr;

void capture_delete(void *p)
{
    Block *b = nullptr;
    {
        std::lock_guard<std::mutex> lock(g_cap_mu);
        auto it = g_captured.find(p);
        if (it != g_captured.end()) {
            b = it->second;
            g_captured.erase(it);
        }
    }
    if (b == nullptr) {
        g_cpu_base_raw(p);
        return;
    }
    {
        NoGil nogil;
        (void)api->launch_end_q(nullptr, &b->buf, 1);
    }
    block_unref(b);
}

/* The block behind a captured CPU DataPtr, or nullptr. */
Block *captured_block(const c10::DataPtr &dp)
{
    if (dp.get_deleter() != &capture_delete || dp.get() == nullptr)
        return nullptr;
    std::lock_guard<std::mutex> lock(g_cap_mu);
    auto it = g_captured.find(dp.get());
    return it == g_captured.end() ? nullptr : it->second;
}

struct CaptureAllocator final : public c10::Allocator {
    c10::DataPtr allocate(size_t n) override
    {
        c10::DeviceIndex index = t_capture;
        if (index < 0 || n < kCaptureMin) {
            /* The base's DataPtr as it is: its own deleter frees it
             * (raw_deallocate's goes through capture_delete, which hands
             * what it does not know to the base). */
            return g_cpu_base->allocate(n);
        }
        Block *b = block_alloc(index, n);
        sw_devmem mem{};
        int rc;
        {
            NoGil nogil;
            rc = api->launch_begin_q(nullptr, &b->buf, 1, &mem);
        }
        if (rc != SW_OK) {
            block_unref(b);
            throw_error(rc, "pinning a new block on " + describe(index));
        }
        void *p = reinterpret_cast<void *>(mem.base + mem.offset);
        {
            std::lock_guard<std::mutex> lock(g_cap_mu);
            g_captured.emplace(p, b);
        }
        return c10::DataPtr(p, p, &capture_delete, c10::Device(c10::kCPU));
    }

    c10::DeleterFnPtr raw_deleter() const override
    {
        return g_cpu_base_raw != nullptr ? &capture_delete : nullptr;
    }

    void copy_data(void *dest, const void *src, size_t count) const override
    {
        default_copy_data(dest, src, count);
    }
};

CaptureAllocator g_capture;

class CaptureScope {
  public:
    explicit CaptureScope(c10::DeviceIndex index) : prev_(t_capture)
    {
        t_capture = index;
    }
    ~CaptureScope()
    {
        t_capture = prev_;
    }

  private:
    c10::DeviceIndex prev_;
};

} // namespace

void install_capture_allocator()
{
    static std::once_flag once;
    std::call_once(once, [] {
        g_cpu_base = c10::GetCPUAllocator();
        g_cpu_base_raw = g_cpu_base->raw_deleter();
        if (g_cpu_base_raw == nullptr)
            return; /* an unknown CPU allocator: leave it alone */
        c10::SetCPUAllocator(&g_capture, /*priority=*/2);
    });
}

/* ------------------------------------------------------------------------
 * CPU aliases of spillway tensors
 * ---------------------------------------------------------------------- */

namespace {

constexpr c10::DispatchKeySet kDevKeys(c10::DispatchKey::PrivateUse1);
constexpr c10::DispatchKeySet kCpuKeys(c10::DispatchKey::CPU);

at::Tensor make_tensor(c10::Storage storage, c10::DispatchKeySet keys,
                       const at::TensorBase &like)
{
    at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
        std::move(storage), keys, like.dtype());
    t.unsafeGetTensorImpl()->set_sizes_and_strides(
        like.sizes(), like.strides(), like.storage_offset());
    if (like.is_conj())
        t._set_conj(true);
    if (like.is_neg())
        t._set_neg(true);
    return t;
}

/* One storage of the op's arguments. */
struct Orig {
    c10::StorageImpl *impl;
    c10::Storage storage; /* the spillway storage */
    Span span;            /* its first byte */
    size_t pin = 0;       /* index in the pin set */
    c10::Storage alias;   /* its CPU twin */
};

class Run {
  public:
    Run(const c10::OperatorHandle &op, torch::jit::Stack *stack)
        : op_(op), stack_(stack), schema_(op.schema()),
          nargs_(schema_.arguments().size()),
          base_(stack->size() - nargs_)
    {
    }

    void run()
    {
        gather();
        const DeviceSlot &s = slot(index_);
        TORCH_CHECK(s.host_addressable, "spillway: ", schema_.name(),
                    " has no kernel on ", describe(index_),
                    ": the host cannot address its memory, so PyTorch's CPU "
                    "kernels cannot run there; register one for PrivateUse1 "
                    "that pins its tensors (docs/torch.md)");
        for (Orig &o : origs_)
            if (o.span.block != nullptr)
                o.pin = pins_.add(o.span.block, written(o.impl));
        pins_.pin(index_, schema_.name().c_str());
        {
            /* The CPU twins are inference tensors (no version counter, no
             * autograd state: they never reach autograd, which ran above
             * this kernel), and so are the kernel's CPU outputs; the
             * spillway tensors made of them after this block are not. */
            c10::InferenceMode inference;
            make_aliases();
            CaptureScope capture(index_);
            try {
                op_.redispatchBoxed(kCpuKeys, stack_);
            } catch (const c10::NotImplementedError &e) {
                TORCH_CHECK_NOT_IMPLEMENTED(
                    false, "spillway: ", schema_.operator_name(),
                    " has no CPU kernel to run on ", describe(index_), ": ",
                    e.what_without_backtrace());
            }
        }
        follow_written();
        map_returns();
    }

  private:
    /* -- 1. gather ------------------------------------------------------ */

    void note_device(c10::DeviceIndex i)
    {
        if (index_ < 0)
            index_ = i;
        else if (index_ != i)
            TORCH_CHECK(false, "Expected all tensors to be on the same "
                               "device, but found at least two devices, ",
                        describe(index_), " and ", describe(i), "! (in ",
                        schema_.operator_name(), ")");
    }

    void note_tensor(const at::Tensor &t, bool write)
    {
        if (!t.defined())
            return;
        if (t.device().type() != kDevType) {
            if (t.device().is_cpu() && t.dim() > 0 && !cpu_ok())
                cpu_seen_ = true;
            return;
        }
        TORCH_CHECK(t.has_storage(), "spillway: ", schema_.operator_name(),
                    ": a spillway tensor without storage");
        note_device(t.device().index());
        c10::StorageImpl *impl = t.storage().unsafeGetStorageImpl();
        if (write)
            written_.push_back(impl);
        for (Orig &o : origs_)
            if (o.impl == impl)
                return;
        Orig o;
        o.impl = impl;
        o.storage = t.storage();
        o.span = span_of_storage(o.storage);
        origs_.push_back(std::move(o));
    }

    /* Ops whose index tensors may be the host's, as on CUDA. */
    bool cpu_ok() const
    {
        const std::string &n = schema_.name();
        return n == "aten::index" || n == "aten::index_put_" ||
               n == "aten::_index_put_impl_" || n == "aten::index_put";
    }

    bool written(const c10::StorageImpl *impl) const
    {
        for (const c10::StorageImpl *w : written_)
            if (w == impl)
                return true;
        return false;
    }

    static bool is_generator(const c10::TypePtr &type)
    {
        c10::TypePtr t = type;
        if (auto opt = t->cast<c10::OptionalType>())
            t = opt->getElementType();
        return t->kind() == c10::TypeKind::GeneratorType;
    }

    void gather()
    {
        const auto &args = schema_.arguments();
        for (size_t i = 0; i < nargs_; i++) {
            c10::IValue &v = (*stack_)[base_ + i];
            const bool write =
                args[i].alias_info() != nullptr && args[i].alias_info()->isWrite();
            if (v.isTensor()) {
                note_tensor(v.toTensor(), write);
            } else if (v.isTensorList()) {
                for (const at::Tensor &t : v.toTensorList())
                    note_tensor(t, write);
            } else if (v.isOptionalTensorList()) {
                for (const std::optional<at::Tensor> t :
                     v.toOptionalTensorList())
                    if (t.has_value())
                        note_tensor(*t, write);
            } else if (v.isDevice() && v.toDevice().type() == kDevType) {
                c10::Device d = v.toDevice();
                note_device(d.has_index() ? d.index() : current_device());
            }
        }
        if (index_ < 0)
            index_ = current_device();
        TORCH_CHECK(!cpu_seen_, "Expected all tensors to be on the same "
                                "device, but found at least two devices, ",
                    describe(index_), " and cpu! (in ",
                    schema_.operator_name(), ")");
    }

    /* -- 3. aliases ------------------------------------------------------ */

    at::Tensor alias_of(const at::Tensor &t)
    {
        if (!t.defined() || t.device().type() != kDevType)
            return t;
        c10::StorageImpl *impl = t.storage().unsafeGetStorageImpl();
        for (Orig &o : origs_) {
            if (o.impl != impl)
                continue;
            at::Tensor a = make_tensor(o.alias, kCpuKeys, t);
            aliases_.push_back({a, t});
            return a;
        }
        TORCH_INTERNAL_ASSERT(false, "spillway: a storage not gathered");
    }

    void make_aliases()
    {
        for (Orig &o : origs_) {
            void *host = o.span.block != nullptr
                             ? pins_.host(o.pin) + o.span.offset
                             : nullptr;
            o.alias = c10::Storage(c10::Storage::use_byte_size_t(),
                                   o.storage.nbytes(),
                                   c10::DataPtr(host, c10::Device(c10::kCPU)),
                                   &g_capture, /*resizable=*/true);
        }
        const auto &args = schema_.arguments();
        for (size_t i = 0; i < nargs_; i++) {
            c10::IValue &v = (*stack_)[base_ + i];
            if (v.isTensor()) {
                v = alias_of(v.toTensor());
            } else if (v.isTensorList()) {
                c10::List<at::Tensor> out;
                for (const at::Tensor &t : v.toTensorList())
                    out.push_back(alias_of(t));
                v = std::move(out);
            } else if (v.isOptionalTensorList()) {
                c10::List<std::optional<at::Tensor>> out;
                for (const std::optional<at::Tensor> t :
                     v.toOptionalTensorList())
                    out.push_back(t.has_value()
                                      ? std::optional<at::Tensor>(alias_of(*t))
                                      : std::nullopt);
                v = std::move(out);
            } else if (v.isDevice() && v.toDevice().type() == kDevType) {
                v = c10::Device(c10::kCPU);
            } else if (is_generator(args[i].type())) {
                const at::Generator &g = v.isGenerator()
                                             ? v.toGenerator()
                                             : default_generator(index_);
                if (auto cpu = cpu_generator_of(g))
                    v = *cpu;
            }
        }
    }

    /* -- 5. results ------------------------------------------------------ */

    Orig *orig_of_alias(const c10::StorageImpl *impl)
    {
        for (Orig &o : origs_)
            if (o.alias.unsafeGetStorageImpl() == impl)
                return &o;
        return nullptr;
    }

    /* A spillway storage for a CPU storage the kernel allocated (held by
     * the capture allocator), made once per storage; an empty one for any
     * other. */
    c10::Storage adopt(const c10::Storage &cpu)
    {
        c10::StorageImpl *impl = cpu.unsafeGetStorageImpl();
        for (auto &kv : adopted_)
            if (kv.first == impl)
                return kv.second;
        Block *b = captured_block(cpu.data_ptr());
        if (b == nullptr)
            return c10::Storage();
        c10::Storage s(c10::Storage::use_byte_size_t(), cpu.nbytes(),
                       device_data_ptr(b), allocator(), /*resizable=*/true);
        adopted_.push_back({impl, s});
        return s;
    }

    /* The same for any CPU storage: a captured one adopted, another (a
     * small allocation the capture allocator left to the CPU's) copied
     * to a new block of the device. */
    c10::Storage adopt_or_copy(const c10::Storage &cpu)
    {
        c10::Storage s = adopt(cpu);
        if (s)
            return s;
        const size_t n = cpu.nbytes();
        c10::DataPtr dp;
        if (n == 0) {
            dp = c10::DataPtr(nullptr, c10::Device(kDevType, index_));
        } else {
            Block *b = block_alloc(index_, n);
            dp = device_data_ptr(b);
            block_unref(b); /* the DataPtr's reference remains */
            NoGil nogil;
            check(api->buffer_write(b->buf, 0, cpu.data_ptr().get(), n),
                  "writing a result to " + describe(index_));
        }
        s = c10::Storage(c10::Storage::use_byte_size_t(), n, std::move(dp),
                         allocator(), /*resizable=*/true);
        adopted_.push_back({cpu.unsafeGetStorageImpl(), s});
        return s;
    }

    at::Tensor to_device(const at::Tensor &t)
    {
        if (!t.defined() || !t.device().is_cpu())
            return t;
        TORCH_CHECK_NOT_IMPLEMENTED(
            !t.is_quantized() && t.layout() == c10::kStrided,
            "spillway: ", schema_.operator_name(), " made a ",
            t.is_quantized() ? "quantized" : "non-strided",
            " tensor; spillway devices hold strided tensors of plain dtypes");
        for (auto &a : aliases_)
            if (a.first.unsafeGetTensorImpl() == t.unsafeGetTensorImpl())
                return a.second;
        c10::StorageImpl *impl = t.storage().unsafeGetStorageImpl();
        if (Orig *o = orig_of_alias(impl))
            return make_tensor(o->storage, kDevKeys, t);
        /* Written in a block of the device, or (small, or made by another
         * allocator) copied to one: its storage whole, so views of one
         * storage stay views of one. */
        return make_tensor(adopt_or_copy(t.storage()), kDevKeys, t);
    }

    /* Arguments the kernel resized (storage re-pointed by resize_bytes)
     * or re-set (set_, a new storage, other sizes): the spillway tensor
     * follows its CPU twin. */
    void follow_written()
    {
        for (Orig &o : origs_) {
            c10::StorageImpl *a = o.alias.unsafeGetStorageImpl();
            void *was = o.span.block != nullptr
                            ? pins_.host(o.pin) + o.span.offset
                            : nullptr;
            if (!written(o.impl) || a->data_ptr().get() == was)
                continue;
            /* resize_bytes gave the twin new memory: so does the storage
             * (every view of it sees the new bytes, as on the CPU) */
            c10::Storage s = adopt_or_copy(o.alias);
            o.impl->set_data_ptr_noswap(
                device_data_ptr(span_of_storage(s).block));
            o.impl->set_nbytes(a->nbytes());
        }
        for (auto &a : aliases_) {
            const at::Tensor &orig = a.second;
            c10::TensorImpl *cpu = a.first.unsafeGetTensorImpl();
            c10::TensorImpl *dev = orig.unsafeGetTensorImpl();
            if (!written(dev->storage().unsafeGetStorageImpl()))
                continue;
            c10::StorageImpl *now = cpu->storage().unsafeGetStorageImpl();
            Orig *o = orig_of_alias(now);
            if (o == nullptr) {
                dev->set_storage_keep_dtype(adopt_or_copy(cpu->storage()));
            } else if (o->impl != dev->storage().unsafeGetStorageImpl()) {
                dev->set_storage_keep_dtype(o->storage);
            }
            if (cpu->sizes() != dev->sizes() ||
                cpu->strides() != dev->strides() ||
                cpu->storage_offset() != dev->storage_offset())
                dev->set_sizes_and_strides(cpu->sizes(), cpu->strides(),
                                           cpu->storage_offset());
        }
    }

    void map_returns()
    {
        const size_t nret = schema_.returns().size();
        for (size_t i = stack_->size() - nret; i < stack_->size(); i++) {
            c10::IValue &v = (*stack_)[i];
            if (v.isTensor()) {
                v = to_device(v.toTensor());
            } else if (v.isTensorList()) {
                c10::List<at::Tensor> out;
                for (const at::Tensor &t : v.toTensorList())
                    out.push_back(to_device(t));
                v = std::move(out);
            }
        }
    }

    const c10::OperatorHandle &op_;
    torch::jit::Stack *stack_;
    const c10::FunctionSchema &schema_;
    const size_t nargs_;
    const size_t base_;
    c10::DeviceIndex index_ = -1;
    bool cpu_seen_ = false;
    c10::SmallVector<Orig, 8> origs_;
    c10::SmallVector<const c10::StorageImpl *, 4> written_;
    /* CPU twin -> the spillway tensor it stands for; holding the twins
     * (the stack's references go with the call) */
    c10::SmallVector<std::pair<at::Tensor, at::Tensor>, 8> aliases_;
    c10::SmallVector<std::pair<c10::StorageImpl *, c10::Storage>, 4> adopted_;
    HostPins pins_;
};

/* ------------------------------------------------------------------------
 * _foreach_*: element by element
 * ---------------------------------------------------------------------- */

bool is_foreach(const c10::FunctionSchema &schema)
{
    return schema.name().rfind("aten::_foreach_", 0) == 0;
}

void foreach_run(const c10::OperatorHandle &op, torch::jit::Stack *stack)
{
    const auto &schema = op.schema();
    const size_t nargs = schema.arguments().size();
    const size_t base = stack->size() - nargs;
    size_t len = 0;
    for (size_t i = 0; i < nargs; i++)
        if ((*stack)[base + i].isTensorList())
            len = std::max(len, (*stack)[base + i].toTensorList().size());
    for (size_t i = 0; i < nargs; i++)
        if ((*stack)[base + i].isTensorList())
            TORCH_CHECK((*stack)[base + i].toTensorList().size() == len,
                        schema.operator_name(),
                        ": tensor lists of different lengths");
    const size_t nret = schema.returns().size();
    std::vector<c10::List<at::Tensor>> results(nret);
    for (size_t k = 0; k < len; k++) {
        torch::jit::Stack sub;
        for (size_t i = 0; i < nargs; i++) {
            const c10::IValue &v = (*stack)[base + i];
            if (v.isTensorList()) {
                c10::List<at::Tensor> one;
                one.push_back(v.toTensorList().get(k));
                sub.emplace_back(std::move(one));
            } else if (v.isList() && v.toListRef().size() == len &&
                       !v.toListRef().empty() && v.toListRef()[0].isScalar()) {
                c10::List<at::Scalar> one;
                one.push_back(v.toListRef()[k].toScalar());
                sub.emplace_back(std::move(one));
            } else {
                sub.push_back(v);
            }
        }
        Run(op, &sub).run();
        for (size_t r = 0; r < nret; r++) {
            const c10::IValue &out = sub[sub.size() - nret + r];
            if (out.isTensorList())
                results[r].push_back(out.toTensorList().get(0));
        }
    }
    torch::jit::drop(*stack, nargs);
    for (size_t r = 0; r < nret; r++)
        stack->emplace_back(std::move(results[r]));
}

} // namespace

void fallback(const c10::OperatorHandle &op, torch::jit::Stack *stack)
{
    if (is_foreach(op.schema()))
        foreach_run(op, stack);
    else
        Run(op, stack).run();
}

void host_copy_pinned(const at::Tensor &dst, const at::Tensor &src)
{
    HostPins pins;
    Span d = span_of(dst), s = span_of(src);
    size_t di = pins.add(d.block, true);
    size_t si = pins.add(s.block, false);
    pins.pin(dst.device().index(), "copy");
    auto alias = [&](const at::Tensor &t, size_t i, const Span &sp) {
        size_t start = static_cast<size_t>(t.storage_offset()) * t.itemsize();
        c10::Storage st(c10::Storage::use_byte_size_t(), t.storage().nbytes(),
                        c10::DataPtr(pins.host(i) + sp.offset - start,
                                     c10::Device(c10::kCPU)),
                        nullptr, false);
        return make_tensor(std::move(st), kCpuKeys, t);
    };
    at::Tensor a = alias(dst, di, d);
    a.copy_(alias(src, si, s));
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m)
{
    m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
}

} // namespace spillway_torch
