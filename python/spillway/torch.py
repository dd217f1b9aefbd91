"""spillway as PyTorch's CUDA allocator.

    import torch, spillway.torch
    spillway.torch.use_spillway_allocator(budget="8G")   # before any CUDA
    x = torch.empty(1 << 20, device="cuda")              # allocation
    spillway.torch.memory_stats()

Through ``torch.cuda.memory.CUDAPluggableAllocator``: PyTorch calls the
C pair ``spillway_torch_malloc`` / ``spillway_torch_free`` exported by
spillway's own extension module (python/spillway/allocator.c), stream
ordered on the stream PyTorch passes.  Every tensor's memory is then a
spillway buffer tagged "torch": counted in spillway's figures, bounded by
its budget, and, when memory runs out, the garbage collector runs first
(PyTorch's own allocator does not: pytorch/pytorch#50185), then
spillway's own arrays are spilled, and only then does the allocation fail
with spillway's OOM report (``last_error()``).  PyTorch holds raw pointers,
so its memory is leased: it never spills.  docs/cuda.md.

PyTorch is imported when a function needs it, never at import time; it
is not a dependency of spillway.
"""

from . import _plugin

__all__ = ["use_spillway_allocator", "memory_stats", "library_path",
           "last_error", "MALLOC", "FREE"]

MALLOC = "spillway_torch_malloc"
FREE = "spillway_torch_free"

_installed = None


def library_path():
    """The shared object that exports MALLOC and FREE."""
    return _plugin.library_path()


def use_spillway_allocator(device=None, budget=None):
    """Make spillway PyTorch's CUDA allocator, for every device (PyTorch
    allows one allocator per process, set before its first CUDA
    allocation).  ``device`` (index, "cuda:N", torch.device; default 0) is
    the device whose budget is set to ``budget`` (bytes, "512M", a
    fraction of the device, or None for none) and whose spillway Device is
    opened now.  Returns the CUDAPluggableAllocator.  Calling it again is
    a no-op that sets the budget."""
    global _installed
    torch = _plugin.require("torch", "PyTorch", "torch")
    index = _plugin.index_of(device)
    _plugin.device(index)  # opened: the pressure callback is registered
    _plugin.set_budget(index, budget)
    if _installed is None:
        alloc = torch.cuda.memory.CUDAPluggableAllocator(
            library_path(), MALLOC, FREE)
        torch.cuda.memory.change_current_allocator(alloc)
        _installed = alloc
    return _installed


def memory_stats(device=None):
    """PyTorch's ``torch.cuda.memory_stats()`` keys, filled from
    spillway's figures for the device (a pluggable allocator leaves
    PyTorch's own empty), plus spillway's under "spillway.*"."""
    index = _plugin.index_of(device)
    info = _plugin._spillway.memory_info(device=_plugin.device(index))
    blocks, nbytes = _plugin.live()
    return _plugin.torch_style_stats(info, blocks, nbytes)


def last_error():
    """spillway's message for the last allocation that failed on this
    thread (PyTorch raises its own OutOfMemoryError without it)."""
    return (_plugin.lib().spillway_plugin_last_error() or b"").decode(
        errors="replace")
