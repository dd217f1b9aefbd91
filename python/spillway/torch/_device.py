"""torch.spillway: the spillway device's module in PyTorch (registered by
``import spillway.torch``), as ``torch.cuda`` is CUDA's.

It mirrors ``torch.cuda``'s device, random-number and memory functions
(the memory figures are PyTorch's keys, from the allocator's
``c10::DeviceAllocator`` statistics: docs/torch.md says what each counts)
and adds spillway's own: budgets, ``memory_info``, ``memory_summary``,
``memory_snapshot``.  ``device`` arguments take an index, "spillway:N", a
``torch.device`` or None (the current device).
"""

import torch as _torch

import spillway as _sw

from . import _C

__all__ = [
    "is_available", "device_count", "current_device", "set_device",
    "device", "synchronize", "is_initialized", "init",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed",
    "get_rng_state", "set_rng_state", "get_rng_state_all",
    "set_rng_state_all",
    "memory_stats", "memory_allocated", "max_memory_allocated",
    "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats",
    "reset_accumulated_memory_stats", "empty_cache", "mem_get_info",
    "set_memory_budget", "get_memory_budget", "set_host_budget",
    "get_host_budget", "memory_info", "memory_summary", "memory_snapshot",
    "spillway_device",
]


def _index(dev=None, optional=True):
    if dev is None:
        return _C._get_device()
    if isinstance(dev, bool):
        raise TypeError(f"a spillway device, not {dev!r}")
    if isinstance(dev, int):
        i = dev
    else:
        d = _torch.device(dev)
        if d.type != "spillway":
            raise ValueError(f"expected a spillway device, got {d}")
        i = _C._get_device() if d.index is None else d.index
    if not 0 <= i < _C._device_count():
        raise ValueError(f"spillway:{i} does not exist: there are "
                         f"{_C._device_count()} spillway devices")
    return i


def spillway_device(device=None):
    """The ``spillway.Device`` behind spillway:N."""
    return _C._devices()[_index(device)]


# -- devices ----------------------------------------------------------------

def is_available():
    return _C._device_count() > 0


def device_count():
    return _C._device_count()


def current_device():
    return _C._get_device()


def set_device(device):
    _C._set_device(_index(device))


def is_initialized():
    return True


def init():
    pass


def _lazy_init():
    pass


def _is_in_bad_fork():
    return False


class device:
    """Context manager that makes ``device`` the current spillway device
    (None or a negative index: no change)."""

    def __init__(self, device):
        if device is None or (isinstance(device, int) and device < 0):
            self.idx = -1
        else:
            self.idx = _index(device)
        self.prev = -1

    def __enter__(self):
        self.prev = _C._exchange_device(self.idx)

    def __exit__(self, *exc):
        _C._set_device(self.prev)
        return False


def synchronize(device=None):
    """Wait for the device's queued work (copies, spills, restores)."""
    _sw.synchronize(device=spillway_device(device))


# -- random numbers -----------------------------------------------------------
# Each device has a default generator whose state is a CPU generator's: the
# kernels are PyTorch's CPU kernels (docs/torch.md).

def _gen(device=None):
    return _C._default_generator(_index(device))


def manual_seed(seed):
    _gen().manual_seed(int(seed))


def manual_seed_all(seed):
    for i in range(device_count()):
        _C._default_generator(i).manual_seed(int(seed))


def seed():
    _gen().seed()


def seed_all():
    s = _gen(0).seed()
    for i in range(1, device_count()):
        _C._default_generator(i).manual_seed(s)


def initial_seed():
    return _gen().initial_seed()


def get_rng_state(device="spillway"):
    return _gen(device).get_state()


def set_rng_state(new_state, device="spillway"):
    _gen(device).set_state(new_state)


def get_rng_state_all():
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states):
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


# -- memory: PyTorch's figures ------------------------------------------------

def memory_stats(device=None):
    """PyTorch's keys ("allocated_bytes.all.current", ...), as
    ``torch.cuda.memory_stats()``."""
    return _torch.accelerator.memory_stats(_index(device))


def memory_allocated(device=None):
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None):
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None):
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None):
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device=None):
    _torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device=None):
    _torch.accelerator.reset_accumulated_memory_stats(_index(device))


def empty_cache():
    _torch.accelerator.empty_cache()


def mem_get_info(device=None):
    """(free, total) bytes of the device, as its driver says."""
    info = memory_info(device)
    return (info.device_free or 0, info.device_total)


# -- memory: spillway's --------------------------------------------------------

def set_memory_budget(budget, device=None):
    """spillway.set_memory_budget for the device: bytes, a size such as
    "512M", a fraction of the device such as 0.25, or None for none."""
    _sw.set_memory_budget(budget, device=spillway_device(device))


def get_memory_budget(device=None):
    return _sw.get_memory_budget(device=spillway_device(device))


def set_host_budget(budget, device=None):
    """spillway.set_host_budget: past it, spilled copies go to the disk."""
    _sw.set_host_budget(budget, device=spillway_device(device))


def get_host_budget(device=None):
    """The host budget in bytes, or None for none."""
    return _sw.memory_stats(device=spillway_device(device))["host_budget"] or None


def memory_info(device=None):
    """spillway.memory_info for the device: in_use, spilled, the tiers..."""
    return _sw.memory_info(device=spillway_device(device))


def memory_summary(device=None):
    return _sw.memory_summary(device=spillway_device(device))


def memory_snapshot(device=None):
    """spillway.memory_snapshot for the device: every live buffer
    (tensors' storages are tagged "torch")."""
    return _sw.memory_snapshot(device=spillway_device(device))


# -- printing ------------------------------------------------------------------

def _patch_printing(torch):
    """print(t) reads a spillway tensor's bytes to the host first (as
    PyTorch does for xla and lazy tensors) -- a spilled one's host copy,
    never bringing it back -- instead of running the formatter's ops on
    the device."""
    tensor_str = torch._tensor_str
    if getattr(tensor_str._tensor_str, "_spillway", False):
        return
    orig = tensor_str._tensor_str

    def _tensor_str(self, indent):
        if self.device.type == "spillway":
            self = self.cpu()
        return orig(self, indent)

    _tensor_str._spillway = True
    tensor_str._tensor_str = _tensor_str
