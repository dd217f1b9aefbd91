/*
 * cpu_paths.cpp -- where PyTorch picks an algorithm by the device's type,
 * a spillway device picks the CPU's, so that a model computes on it what
 * it computes on the CPU, bit for bit (the kernels are the CPU's; only the
 * choice of kernel is made elsewhere):
 *
 *  - ops with a CPU kernel and a CompositeExplicitAutograd one (a generic
 *    decomposition other backends get: native_layer_norm,
 *    native_group_norm, _stack, ...): the fallback, so the CPU kernel
 *    runs.  Found at import by asking the dispatcher, not listed by hand,
 *    so a PyTorch that adds one is covered;
 *  - convolution: PyTorch sends a PrivateUse1 device to the
 *    "_overrideable" pair, whose default raises; here they run the CPU's
 *    convolution and convolution_backward;
 *  - scaled_dot_product_attention: the backend choice is a DispatchStub by
 *    device type; here it is the CPU's choice (its flash kernel, run by the
 *    fallback, where the CPU would pick it).
 */
#include "layer.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_native.h>
#include <torch/library.h>

#include <mutex>

namespace spillway_torch {

namespace {

c10::OperatorHandle aten_op(const char *name, const char *overload)
{
    return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
}

/* convolution_overrideable has convolution's arguments, in its order. */
void convolution(const c10::OperatorHandle &, torch::jit::Stack *stack)
{
    static const c10::OperatorHandle op = aten_op("aten::convolution", "");
    fallback(op, stack);
}

/* convolution_backward_overrideable lacks convolution_backward's
 * bias_sizes (4th): the bias has one element per output channel. */
void convolution_backward(const c10::OperatorHandle &,
                          torch::jit::Stack *stack)
{
    static const c10::OperatorHandle op =
        aten_op("aten::convolution_backward", "");
    const size_t base = stack->size() - 10;
    const at::Tensor &weight = (*stack)[base + 2].toTensor();
    const bool transposed = (*stack)[base + 6].toBool();
    const int64_t groups = (*stack)[base + 8].toInt();
    const auto mask = (*stack)[base + 9].toBoolList();
    c10::IValue bias_sizes;
    if (mask.get(2)) {
        int64_t channels = transposed ? weight.size(1) * groups
                                      : weight.size(0);
        bias_sizes = c10::List<int64_t>({channels});
    }
    stack->insert(stack->begin() + static_cast<std::ptrdiff_t>(base + 3),
                  std::move(bias_sizes));
    fallback(op, stack);
}

int64_t sdp_choice(const at::Tensor &q, const at::Tensor &k,
                   const at::Tensor &v, const std::optional<at::Tensor> &mask,
                   double dropout, bool causal, std::optional<double> scale,
                   bool gqa)
{
    return at::native::_fused_sdp_choice_cpp(q, k, v, mask, dropout, causal,
                                             scale, gqa);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
    m.impl("convolution_overrideable",
           torch::CppFunction::makeFromBoxedFunction<&convolution>());
    m.impl("convolution_backward_overrideable",
           torch::CppFunction::makeFromBoxedFunction<&convolution_backward>());
}

} // namespace spillway_torch

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub,
                              &spillway_torch::sdp_choice);
}

namespace spillway_torch {

void register_cpu_paths()
{
    static std::once_flag once;
    std::call_once(once, [] {
        static torch::Library lib(torch::Library::IMPL, "aten",
                                  c10::DispatchKey::PrivateUse1, __FILE__,
                                  __LINE__);
        for (const c10::OperatorName &name :
             c10::Dispatcher::singleton().getAllOpNames()) {
            if (name.name.rfind("aten::", 0) != 0)
                continue;
            auto op = c10::Dispatcher::singleton().findOp(name);
            if (!op.has_value() ||
                !op->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
                !op->hasKernelForDispatchKey(
                    c10::DispatchKey::CompositeExplicitAutograd) ||
                op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1))
                continue;
            std::string n = name.name.substr(6);
            if (!name.overload_name.empty())
                n += "." + name.overload_name;
            lib.impl(n.c_str(),
                     torch::CppFunction::makeFromBoxedFunction<&fallback>());
        }
    });
}

} // namespace spillway_torch
