"""spillway as CuPy's device memory allocator.

    import cupy, spillway.cupy
    spillway.cupy.use_spillway_allocator(budget="8G")
    a = cupy.zeros(1 << 20)

Through ``cupy.cuda.set_allocator``: every CuPy allocation is a spillway
buffer tagged "cupy", exposed under a lease (CuPy holds raw pointers, so
it never spills), counted in spillway's figures, bounded by its budget,
with the garbage collector run before an allocation fails and spillway's
OOM report when it does.  Blocks are stream ordered on CuPy's current
stream at allocation time.  CuPy's pinned host memory stays CuPy's (its
pinned pool already keeps page-locked memory); spillway's staging pool for
spills is page-locked by spillway itself (docs/cuda.md).

CuPy is imported when a function needs it; it is not a dependency.
"""

from . import _plugin

__all__ = ["use_spillway_allocator", "malloc", "memory_stats"]


class _Block:
    """Owns one spillway block; frees it (stream ordered) when CuPy drops
    the last reference to its memory."""

    __slots__ = ("ptr", "size", "index", "stream", "__weakref__")

    def __init__(self, ptr, size, index, stream):
        self.ptr, self.size, self.index, self.stream = ptr, size, index, stream

    def free(self):
        p, self.ptr = self.ptr, 0
        if p:
            _plugin.free(p, self.index, self.stream)

    def __del__(self):
        try:
            self.free()
        except Exception:  # interpreter shutdown: nothing to report to
            pass


def malloc(size):
    """The allocator function given to cupy.cuda.set_allocator."""
    cupy = _plugin.require("cupy", "CuPy", "cupy")
    index = cupy.cuda.runtime.getDevice()
    stream = cupy.cuda.get_current_stream().ptr
    ptr = _plugin.malloc(size, index, stream, "cupy")
    block = _Block(ptr, size, index, stream)
    mem = cupy.cuda.UnownedMemory(ptr, size, block, index)
    return cupy.cuda.MemoryPointer(mem, 0)


def use_spillway_allocator(device=None, budget=None):
    """Make spillway CuPy's allocator (for every device), and set the
    budget of ``device`` (index or "cuda:N"; default 0) to ``budget``
    (bytes, "512M", a fraction, or None)."""
    cupy = _plugin.require("cupy", "CuPy", "cupy")
    index = _plugin.index_of(device)
    _plugin.device(index)
    _plugin.set_budget(index, budget)
    cupy.cuda.set_allocator(malloc)


def memory_stats(device=None):
    """The same keys as spillway.torch.memory_stats()."""
    index = _plugin.index_of(device)
    info = _plugin._spillway.memory_info(device=_plugin.device(index))
    blocks, nbytes = _plugin.live()
    return _plugin.torch_style_stats(info, blocks, nbytes)
