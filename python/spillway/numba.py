"""spillway as Numba's CUDA memory manager (numba-cuda's External Memory
Management interface).

    import spillway.numba
    from numba import cuda
    cuda.set_memory_manager(spillway.numba.SpillwayEMMPlugin)
    # or: NUMBA_CUDA_MEMORY_MANAGER=spillway.numba

Every device array Numba allocates is a spillway buffer tagged "numba",
leased (Numba holds raw pointers: it never spills), counted in spillway's
figures, bounded by its budget (``set_budget``), with the garbage
collector run before an allocation fails and spillway's OOM report when it
does.  Host allocations stay Numba's (HostOnlyCUDAMemoryManager).

``SpillwayEMMPlugin`` is built on first access, importing numba.cuda
then: neither is imported by ``import spillway.numba``, and Numba is not a
dependency of spillway.
"""

from . import _plugin

__all__ = ["SpillwayEMMPlugin", "set_budget"]

_budgets = {}


def set_budget(budget, device=None):
    """spillway's budget for Numba's device (index; default 0)."""
    index = _plugin.index_of(device)
    _plugin.set_budget(index, budget)  # a refused budget is not kept
    _budgets[index] = budget


def _device_pointer(p):
    """A device address as Numba's driver layer wants it: a CUdeviceptr of
    the NVIDIA bindings where Numba uses them, else a ctypes c_uint64."""
    import ctypes
    try:
        from numba.core import config
    except ImportError:
        config = None
    if getattr(config, "CUDA_USE_NVIDIA_BINDING", False):
        from numba.cuda.cudadrv.driver import binding
        return binding.CUdeviceptr(p)
    return ctypes.c_uint64(p)


def _build():
    _plugin.require("numba.cuda", "Numba's CUDA target (numba-cuda)",
                    "numba")
    import contextlib
    from numba import cuda
    from numba.cuda import (HostOnlyCUDAMemoryManager, MemoryInfo,
                            MemoryPointer)

    class SpillwayEMMPlugin(HostOnlyCUDAMemoryManager):
        """Numba's device allocations from spillway."""

        def initialize(self):
            # (The base class's is abstract: nothing of its own to set up.)
            index = self.context.device.id
            _plugin.device(index)
            if index in _budgets:
                _plugin.set_budget(index, _budgets[index])

        def memalloc(self, size):
            index = self.context.device.id
            ptr = _plugin.malloc(size, index, 0, "numba")

            def finalizer(ptr=ptr, index=index):
                _plugin.free(ptr, index, 0)

            return MemoryPointer(self.context, _device_pointer(ptr), size,
                                 finalizer=finalizer)

        def get_memory_info(self):
            info = _plugin._spillway.memory_info(
                device=_plugin.device(self.context.device.id))
            return MemoryInfo(free=info.device_free or 0,
                              total=info.device_total or 0)

        def get_ipc_handle(self, memory):
            raise NotImplementedError(
                "spillway.numba: IPC handles of spillway blocks are not "
                "supported")

        def reset(self):
            super().reset()
            import spillway
            spillway.empty_cache(device=_plugin.device(
                self.context.device.id))

        @contextlib.contextmanager
        def defer_cleanup(self):
            with super().defer_cleanup():
                yield

        @property
        def interface_version(self):
            return 1

    return SpillwayEMMPlugin


_plugin_class = None


def __getattr__(name):
    global _plugin_class
    if name in ("SpillwayEMMPlugin", "_numba_memory_manager"):
        if _plugin_class is None:
            _plugin_class = _build()
        return _plugin_class
    raise AttributeError(f"module 'spillway.numba' has no attribute {name!r}")


# NUMBA_CUDA_MEMORY_MANAGER=spillway.numba looks for _numba_memory_manager.
def __dir__():
    return __all__ + ["_numba_memory_manager"]
