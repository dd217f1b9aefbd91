"""The allocator plug-ins' shared part: the C exports of the extension
(allocator.c), reached through ctypes, and what every plug-in does the
same way (the device kept open, the budget, errors).

The exports live in the extension module itself, so that the frameworks'
blocks and spillway's arrays are one library's: one budget, one set of
figures, one garbage-collecting pressure callback.
"""

import ctypes
import importlib
import os

from . import _spillway

# sw_error codes (include/spillway.h)
_SW_ERR_OOM = -3
_SW_ERR_TOO_LARGE = -7


def require(module, framework, plugin):
    """Import ``module`` or raise an ImportError that names the framework."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"spillway.{plugin} needs {framework} ({module!r} could not be "
            f"imported: {e}); spillway does not install it") from e


def library_path():
    """The file the exports are in (the extension module)."""
    return _spillway.__file__


_lib = None


def lib():
    """The exports through ctypes (calls release the GIL)."""
    global _lib
    if _lib is None:
        l = ctypes.CDLL(library_path())
        l.spillway_plugin_malloc.restype = ctypes.c_void_p
        l.spillway_plugin_malloc.argtypes = [ctypes.c_size_t, ctypes.c_int,
                                             ctypes.c_void_p, ctypes.c_char_p]
        l.spillway_plugin_free.restype = ctypes.c_int
        l.spillway_plugin_free.argtypes = [ctypes.c_void_p, ctypes.c_int,
                                           ctypes.c_void_p]
        l.spillway_plugin_last_error.restype = ctypes.c_char_p
        l.spillway_plugin_last_error.argtypes = []
        l.spillway_plugin_last_code.restype = ctypes.c_int
        l.spillway_plugin_last_code.argtypes = []
        l.spillway_plugin_live.restype = ctypes.c_size_t
        l.spillway_plugin_live.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
        _lib = l
    return _lib


def backend():
    """The backend the plug-ins' device indices name: "cuda", unless
    SPILLWAY_PLUGIN_BACKEND names another (the tests use "sim")."""
    return os.environ.get("SPILLWAY_PLUGIN_BACKEND") or "cuda"


# Devices the plug-ins use, kept open (and so with the garbage-collecting
# pressure callback registered) for the life of the process.
_devices = {}


def device(index):
    """spillway's Device for the framework's device ``index``."""
    d = _devices.get(index)
    if d is None or d.closed:  # closed by its user (Device.close())
        d = _spillway.Device(f"{backend()}:{index}")
        _devices[index] = d
    return d


def index_of(device_arg, default=0):
    """A framework device index from None, an int, "cuda:N", a spillway
    Device, or anything with an ``index`` (torch.device)."""
    if device_arg is None:
        return default
    if isinstance(device_arg, int):
        return device_arg
    if isinstance(device_arg, str):
        _, _, n = device_arg.partition(":")
        return int(n) if n else 0
    name = getattr(device_arg, "name", None)
    if isinstance(name, str) and ":" in name:
        return int(name.partition(":")[2])
    idx = getattr(device_arg, "index", None)
    return default if idx is None else int(idx)


def set_budget(index, budget):
    """spillway.set_memory_budget on the framework's device, when given."""
    if budget is not None:
        _spillway.set_memory_budget(budget, device=device(index))


def malloc(size, index, stream, tag):
    """A block of ``size`` bytes for a framework on device ``index``, used
    on ``stream`` (a CUstream as an int; 0 is the legacy default stream):
    its address (0 for size 0).  Raises spillway.DeviceMemoryError with
    spillway's OOM report."""
    l = lib()
    p = l.spillway_plugin_malloc(size, index, stream or None, tag.encode())
    if not p and size:
        code = l.spillway_plugin_last_code()
        msg = (l.spillway_plugin_last_error() or b"").decode(errors="replace")
        if code in (_SW_ERR_OOM, _SW_ERR_TOO_LARGE):
            raise _spillway.DeviceMemoryError(msg)
        raise _spillway.DeviceError(msg)
    return p or 0


def free(ptr, index, stream):
    """Give back a block from malloc, in the order of ``stream``."""
    l = lib()
    if l.spillway_plugin_free(ptr or None, index, stream or None) != 0:
        raise ValueError(l.spillway_plugin_last_error().decode(
            errors="replace"))


def live():
    """(blocks, bytes) handed out to the frameworks and not freed yet."""
    n = ctypes.c_uint64(0)
    count = lib().spillway_plugin_live(ctypes.byref(n))
    return count, n.value


# PyTorch's memory_stats names, from spillway's figures.
def torch_style_stats(info, blocks, block_bytes):
    """PyTorch's torch.cuda.memory_stats() keys that spillway can fill."""
    reserved = info.in_use + info.cached
    return {
        "allocated_bytes.all.current": info.in_use,
        "allocated_bytes.all.peak": info.peak,
        "active_bytes.all.current": info.in_use,
        "active_bytes.all.peak": info.peak,
        "reserved_bytes.all.current": reserved,
        "inactive_split_bytes.all.current": info.cached,
        "allocation.all.current": blocks,
        "allocation.all.allocated": info.allocs,
        "allocation.all.freed": info.frees,
        "num_alloc_retries": info.alloc_retries,
        "num_ooms": info.ooms,
        # spillway's own, under its own names
        "spillway.framework_bytes": block_bytes,
        "spillway.spilled_bytes": info.spilled,
        "spillway.budget": info.budget,
        "spillway.gc_runs": info.gc_runs,
        "spillway.spills": info.spills,
        "spillway.restores": info.restores,
    }
