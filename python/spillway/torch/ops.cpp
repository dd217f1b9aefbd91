/*
 * ops.cpp -- the minimal set a PrivateUse1 backend registers: tensors made
 * (empty, empty_strided), views (as_strided, view, _reshape_alias, the
 * set_ forms), storage grown (resize_), copies, and scalars read.  Every
 * other op goes to fallback.cpp.
 *
 * Views never touch bytes: they share their base's storage, so spilling
 * the base is seen through every view.  Copies and scalars use what the
 * library offers every backend -- host reads and writes, device-to-device
 * copies -- so they work where the host cannot address the device's
 * memory too (opencl, cuda, hip, ze), and a host read of a spilled tensor
 * (t.cpu(), t.item(), print(t), torch.save(t)) reads its host copy without
 * bringing it back.
 */
#include "layer.h"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace spillway_torch {

namespace {

constexpr c10::DispatchKeySet kKeys(c10::DispatchKey::PrivateUse1);

void check_options(const std::optional<c10::Layout> &layout,
                   const std::optional<bool> &pin)
{
    TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
                "spillway tensors are strided (no sparse layouts)");
    TORCH_CHECK(!c10::pinned_memory_or_default(pin),
                "pin_memory: only CPU memory can be pinned");
}

at::Tensor empty_memory_format(c10::IntArrayRef size,
                               std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device,
                               std::optional<bool> pin,
                               std::optional<c10::MemoryFormat> format)
{
    check_options(layout, pin);
    const c10::Device d = c10::device_or_default(device);
    const c10::DeviceGuard guard(d);
    return at::detail::empty_generic(size, allocator(), kKeys,
                                     c10::dtype_or_default(dtype), format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device,
                         std::optional<bool> pin)
{
    check_options(layout, pin);
    const c10::Device d = c10::device_or_default(device);
    const c10::DeviceGuard guard(d);
    return at::detail::empty_strided_generic(size, stride, allocator(), kKeys,
                                             c10::dtype_or_default(dtype));
}

at::Tensor as_strided(const at::Tensor &self, c10::SymIntArrayRef size,
                      c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> offset)
{
    std::optional<int64_t> off;
    if (offset.has_value())
        off = offset->expect_int();
    return at::native::as_strided_tensorimpl(
        self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
        off);
}

at::Tensor view(const at::Tensor &self, c10::SymIntArrayRef size)
{
    return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor &self, c10::SymIntArrayRef size,
                         c10::SymIntArrayRef stride)
{
    return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size),
                                      C10_AS_INTARRAYREF_SLOW(stride));
}

/* ------------------------------------------------------------------------
 * Storage: resize_ and the set_ forms
 *
 * Memory is found before any metadata changes, so a resize_ past what can
 * fit raises torch.OutOfMemoryError and leaves the tensor as it was.
 * ---------------------------------------------------------------------- */

const at::Tensor &resize(const at::Tensor &self, c10::SymIntArrayRef sym_size,
                         std::optional<c10::MemoryFormat> format)
{
    c10::IntArrayRef size = C10_AS_INTARRAYREF_SLOW(sym_size);
    c10::TensorImpl *impl = self.unsafeGetTensorImpl();
    int64_t numel = 1;
    for (int64_t s : size) {
        TORCH_CHECK(s >= 0, "resize_: negative size ", s, " in ", size);
        TORCH_CHECK(!c10::mul_overflows(numel, s, &numel),
                    "resize_: the size ", size, " overflows");
    }
    size_t need = 0;
    if (numel > 0) {
        int64_t bytes = 0;
        TORCH_CHECK(!c10::add_overflows(self.storage_offset(), numel, &bytes) &&
                        !c10::mul_overflows(bytes, int64_t(self.itemsize()),
                                            &bytes),
                    "resize_: the size ", size, " overflows");
        need = static_cast<size_t>(bytes);
    }
    const c10::Storage &storage = self.storage();
    if (need > storage.nbytes())
        resize_storage_bytes(storage, need);
    impl->set_sizes_contiguous(size);
    c10::MemoryFormat mf = format.value_or(c10::MemoryFormat::Contiguous);
    TORCH_CHECK(mf != c10::MemoryFormat::Preserve,
                "resize_: unsupported memory format ", mf);
    if (mf != c10::MemoryFormat::Contiguous)
        impl->empty_tensor_restride(mf);
    return self;
}

at::Tensor &set_storage_offset(at::Tensor &self, at::Storage storage,
                               int64_t offset, c10::IntArrayRef size,
                               c10::IntArrayRef stride)
{
    TORCH_CHECK(storage.device().type() == kDevType,
                "set_: a ", storage.device(), " storage for a spillway tensor");
    TORCH_CHECK(storage.device() == self.device(), "set_: a storage of ",
                describe(storage.device().index()), " for a tensor of ",
                describe(self.device().index()));
    at::native::checkSetStorage(self, storage, offset, size, stride);
    c10::DimVector st;
    if (stride.empty()) {
        st = c10::contiguous_strides(size);
        stride = st;
    }
    size_t need = at::detail::computeStorageNbytes(size, stride,
                                                   self.itemsize(), offset);
    if (need > storage.nbytes())
        resize_storage_bytes(storage, need);
    c10::TensorImpl *impl = self.unsafeGetTensorImpl();
    impl->set_storage_keep_dtype(std::move(storage));
    impl->set_sizes_and_strides(size, stride, offset);
    return self;
}

at::Tensor &set_storage(at::Tensor &self, at::Storage storage)
{
    int64_t n = static_cast<int64_t>(storage.nbytes() / self.itemsize());
    return set_storage_offset(self, std::move(storage), 0, {n}, {1});
}

at::Tensor &set_tensor(at::Tensor &self, const at::Tensor &src)
{
    if (self.unsafeGetTensorImpl() == src.unsafeGetTensorImpl())
        return self;
    return set_storage_offset(self, src.storage(), src.storage_offset(),
                              src.sizes(), src.strides());
}

at::Tensor &set_empty(at::Tensor &self)
{
    const c10::DeviceGuard guard(self.device());
    c10::Storage storage(c10::Storage::use_byte_size_t(), 0,
                         allocator()->allocate(0), allocator(), true);
    c10::TensorImpl *impl = self.unsafeGetTensorImpl();
    impl->set_storage_keep_dtype(std::move(storage));
    impl->set_sizes_contiguous({0});
    return self;
}

/* ------------------------------------------------------------------------
 * Copies
 * ---------------------------------------------------------------------- */

/* The bytes a tensor spans, from its first element to its last. */
size_t extent_bytes(const at::Tensor &t)
{
    if (t.numel() == 0)
        return 0;
    int64_t last = 0;
    for (int64_t d = 0; d < t.dim(); d++)
        last += (t.size(d) - 1) * t.stride(d);
    return static_cast<size_t>(last + 1) * t.itemsize();
}

/* A tensor read to the host: a CPU tensor with its sizes, strides, dtype
 * and conj/neg bits over a copy of the bytes it spans (a spilled tensor's
 * from its host copy: nothing comes back to the device). */
struct HostCopy {
    at::Tensor view, base;
    Span span;
    size_t bytes = 0;
};

HostCopy read_to_host(const at::Tensor &t)
{
    HostCopy h;
    h.bytes = extent_bytes(t);
    auto opts = t.options().device(c10::kCPU);
    h.base = at::empty({int64_t(h.bytes)}, opts.dtype(at::kByte));
    if (h.bytes > 0) {
        h.span = span_of(t);
        NoGil nogil;
        check(api->buffer_read(h.span.block->buf, h.span.offset,
                               h.base.data_ptr(), h.bytes),
              "reading " + describe(t.device().index()) + " to the host");
    }
    h.view = at::empty({0}, opts).set_(
        h.base.storage(), 0, t.sizes(), t.strides());
    h.view._set_conj(t.is_conj());
    h.view._set_neg(t.is_neg());
    return h;
}

void write_bytes(const Span &sp, const void *src, size_t n,
                 c10::DeviceIndex index)
{
    if (n == 0)
        return;
    NoGil nogil;
    check(api->buffer_write(sp.block->buf, sp.offset, src, n),
          "writing to " + describe(index));
}

bool plain(const at::Tensor &t)
{
    return t.is_contiguous() && !t.is_conj() && !t.is_neg();
}

/* dst (spillway) <- src (CPU), with PyTorch's copy_ semantics: dtype
 * conversion, broadcasting, conj/neg bits. */
void write_from_host(const at::Tensor &dst, const at::Tensor &src)
{
    if (dst.numel() == 0)
        return;
    c10::DeviceIndex index = dst.device().index();
    if (plain(dst)) {
        at::Tensor c = src;
        if (!(plain(src) && src.dtype() == dst.dtype() &&
              src.sizes() == dst.sizes())) {
            c = at::empty(dst.sizes(), dst.options().device(c10::kCPU));
            c.copy_(src);
        }
        write_bytes(span_of(dst), c.data_ptr(), c.nbytes(), index);
        return;
    }
    /* Strided: read what it spans, copy into that, write it back. */
    HostCopy h = read_to_host(dst);
    h.view._set_conj(false);
    h.view._set_neg(false);
    /* What a conjugate or negative view shows is what its bytes hold
     * conjugated or negated: store the value that shows as src. */
    at::Tensor v = src;
    if (dst.is_conj())
        v = v.conj_physical();
    if (dst.is_neg())
        v = v.neg();
    h.view.copy_(v);
    write_bytes(h.span, h.base.data_ptr(), h.bytes, index);
}

at::Tensor copy_from(const at::Tensor &self, const at::Tensor &dst,
                     bool non_blocking)
{
    (void)non_blocking; /* copies are ordered by spillway either way */
    TORCH_CHECK(self.defined() && dst.defined(), "_copy_from: undefined");
    if (dst.numel() == 0)
        return dst;
    const bool from_dev = self.device().type() == kDevType;
    const bool to_dev = dst.device().type() == kDevType;
    if (from_dev && to_dev && self.device() == dst.device()) {
        if (plain(self) && plain(dst) && self.dtype() == dst.dtype() &&
            self.sizes() == dst.sizes()) {
            Span s = span_of(self), d = span_of(dst);
            NoGil nogil;
            check(api->buffer_copy(d.block->buf, d.offset, s.block->buf,
                                   s.offset, dst.nbytes()),
                  "copying on " + describe(dst.device().index()));
            return dst;
        }
        if (slot(dst.device().index()).host_addressable) {
            host_copy_pinned(dst, self);
            return dst;
        }
        write_from_host(dst, read_to_host(self).view);
        return dst;
    }
    if (from_dev && !to_dev) {
        TORCH_CHECK(dst.device().is_cpu(), "_copy_from: spillway to ",
                    dst.device(), " goes through the CPU");
        if (plain(self) && plain(dst) && self.dtype() == dst.dtype() &&
            self.sizes() == dst.sizes()) {
            Span s = span_of(self);
            NoGil nogil;
            check(api->buffer_read(s.block->buf, s.offset, dst.data_ptr(),
                                   dst.nbytes()),
                  "reading " + describe(self.device().index()) +
                      " to the host");
            return dst;
        }
        dst.copy_(read_to_host(self).view);
        return dst;
    }
    if (!from_dev && to_dev) {
        TORCH_CHECK(self.device().is_cpu(), "_copy_from: ", self.device(),
                    " to spillway goes through the CPU");
        write_from_host(dst, self);
        return dst;
    }
    /* spillway:a -> spillway:b */
    write_from_host(dst, read_to_host(self).view);
    return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor &self, const at::Tensor &dst)
{
    resize(dst, self.sym_sizes(), std::nullopt);
    return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor &self)
{
    TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
                " elements cannot be converted to Scalar");
    at::Tensor one = at::empty({}, self.options().device(c10::kCPU));
    Span s = span_of(self);
    {
        NoGil nogil;
        check(api->buffer_read(s.block->buf, s.offset, one.data_ptr(),
                               self.itemsize()),
              "reading " + describe(self.device().index()));
    }
    one._set_conj(self.is_conj());
    one._set_neg(self.is_neg());
    return one.item();
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
    m.impl("empty.memory_format", empty_memory_format);
    m.impl("empty_strided", empty_strided);
    m.impl("as_strided", as_strided);
    m.impl("view", view);
    m.impl("_reshape_alias", reshape_alias);
    m.impl("resize_", resize);
    m.impl("_copy_from", copy_from);
    m.impl("_copy_from_and_resize", copy_from_and_resize);
    m.impl("_local_scalar_dense", local_scalar_dense);
    m.impl("set_.source_Tensor", set_tensor);
    m.impl("set_.source_Storage", set_storage);
    m.impl("set_.source_Storage_storage_offset", set_storage_offset);
    m.impl("set_", set_empty);
}

} // namespace spillway_torch
