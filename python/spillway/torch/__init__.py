"""spillway and PyTorch.

Two things live here.

**spillway as a PyTorch device** (docs/torch.md).  Importing this module
registers PyTorch's PrivateUse1 backend as ``spillway``::

    import torch, spillway.torch
    x = torch.randn(8, device="spillway")          # spillway memory
    y = (x * 2).cpu()                               # PyTorch's CPU kernels,
                                                    # run on that memory
    torch.spillway.set_memory_budget("256M")        # tensors spill past it
    torch.accelerator.memory_allocated()

``spillway:N`` is the N-th device of :func:`set_devices` (or
``$SPILLWAY_TORCH_DEVICES``, comma-separated specs; by default spillway's
default device alone).  Storage is spillway memory: accounted, bounded by a
budget, spilled to host memory and the disk tier when short and brought
back when an op needs it, and Python's collector runs before an
allocation fails.  The C++ layer (python/spillway/torch/*.cpp) is built
when torch is found at build time (``pip install --no-build-isolation .``
in an environment with torch); it loads beside that torch version only.
Where it is missing, importing this module still works and
:data:`device_error` says why there is no device.

**spillway as PyTorch's CUDA allocator** (docs/cuda.md), through
``torch.cuda.memory.CUDAPluggableAllocator``::

    spillway.torch.use_spillway_allocator(budget="8G")   # before any CUDA

PyTorch calls the C pair ``spillway_torch_malloc`` / ``spillway_torch_free``
exported by spillway's own extension module, stream ordered on the stream
PyTorch passes; PyTorch holds raw pointers there, so that memory is leased:
it never spills.  That needs nothing of the layer above.

PyTorch is imported here when it is installed, never by ``import
spillway``.
"""

import os as _os
import warnings as _warnings

from .. import _plugin

__all__ = ["use_spillway_allocator", "memory_stats", "library_path",
           "last_error", "MALLOC", "FREE",
           "set_devices", "devices", "device_error", "is_spilled",
           "buffer_id", "include_dir"]

# ---------------------------------------------------------------------------
# The CUDA allocator plug-in
# ---------------------------------------------------------------------------

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
    spillway's figures for the CUDA device (a pluggable allocator leaves
    PyTorch's own empty), plus spillway's under "spillway.*".  (For the
    spillway device, ``torch.spillway.memory_stats()``.)"""
    index = _plugin.index_of(device)
    info = _plugin._spillway.memory_info(device=_plugin.device(index))
    blocks, nbytes = _plugin.live()
    return _plugin.torch_style_stats(info, blocks, nbytes)


def last_error():
    """spillway's message for the last allocation that failed on this
    thread (PyTorch raises its own OutOfMemoryError without it)."""
    return (_plugin.lib().spillway_plugin_last_error() or b"").decode(
        errors="replace")


# ---------------------------------------------------------------------------
# The PyTorch device
# ---------------------------------------------------------------------------

#: Why there is no ``spillway`` device in this process, or None when there
#: is one.
device_error = None

_layer = None  # spillway.torch._C once registered


def _unavailable():
    raise RuntimeError("spillway.torch: no spillway device in this process: "
                       + str(device_error))


def set_devices(specs):
    """Name the devices: ``spillway:N`` is ``specs[N]``, a spillway device
    ("sim:0", "host:0", a registered backend's, a ``spillway.Device``).
    Allowed before the first spillway tensor exists, or once every one is
    gone (indices must not change under a live tensor)."""
    if _layer is None:
        _unavailable()
    if isinstance(specs, str):
        raise TypeError("set_devices takes a list of device specs, "
                        f"not one string ({specs!r}): [{specs!r}]")
    _layer._configure(list(specs))


def devices():
    """The spillway Devices behind spillway:0, spillway:1, ..."""
    if _layer is None:
        _unavailable()
    return _layer._devices()


def buffer_id(tensor):
    """The id of the spillway buffer behind a spillway tensor (as in
    ``spillway.memory_snapshot()``), or None for one of 0 bytes."""
    if _layer is None:
        _unavailable()
    r = _layer._buffer_of(tensor)
    return None if r is None else r[0]


def is_spilled(tensor):
    """True when a spillway tensor's bytes are spilled (in host memory or
    the disk tier) rather than on its device."""
    if _layer is None:
        _unavailable()
    r = _layer._buffer_of(tensor)
    return False if r is None else r[2]


def include_dir():
    """The folder of the headers a vendor's own kernels include
    (spillway.h, c_api.h, spillway_torch.h: docs/torch.md)."""
    return _os.path.join(_os.path.dirname(_os.path.dirname(__file__)),
                         "include")


def _default_specs():
    env = _os.environ.get("SPILLWAY_TORCH_DEVICES", "").strip()
    if env:
        return [s.strip() for s in env.split(",") if s.strip()]
    return [None]  # spillway's default device ($SPILLWAY_DEVICE or sim:0)


def _register():
    global _layer, device_error
    try:
        import torch
    except ImportError:
        device_error = "PyTorch is not installed"
        return
    try:
        from . import _build
    except ImportError:
        device_error = ("this spillway was built without its PyTorch layer "
                        "(build it in an environment with torch: "
                        "pip install --no-build-isolation .)")
        return
    if torch.__version__ != _build.TORCH_VERSION:
        device_error = (f"spillway's PyTorch layer was built against torch "
                        f"{_build.TORCH_VERSION}, this is torch "
                        f"{torch.__version__}: rebuild spillway here")
        _warnings.warn("spillway.torch: " + device_error, RuntimeWarning,
                       stacklevel=3)
        return
    name = torch._C._get_privateuse1_backend_name()
    if name not in ("privateuseone", "spillway"):
        device_error = (f"PyTorch's PrivateUse1 backend is already "
                        f"{name!r}: one process has one such backend")
        _warnings.warn("spillway.torch: " + device_error, RuntimeWarning,
                       stacklevel=3)
        return
    import importlib
    layer = importlib.import_module(__name__ + "._C")
    layer._configure(_default_specs())
    _layer = layer
    from . import _device
    if name == "privateuseone":
        torch.utils.rename_privateuse1_backend("spillway")
        torch._register_device_module("spillway", _device)
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True,
            for_storage=True)
        _device._patch_printing(torch)


_register()
