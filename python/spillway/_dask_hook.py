"""Dask's serializers for spillway arrays, registered without importing
distributed (docs/dask.md, "How the serializers get registered").

spillway.dask holds the serializers, and importing it imports distributed.
`import spillway` must not: the "dask.sizeof" entry point imports spillway
while `import distributed` is still running (distributed imports
dask.sizeof early), and a spillway that imported distributed there would
break `import distributed` in every process where spillway is installed.
Yet a process without the plugin (a worker, a client) must still read a
spillway array that arrives "dask"-serialized.

So spillway only registers *lazily*, through dask.utils.Dispatch's
register_lazy("spillway"): the first dispatch of a type whose module's top
level is "spillway" (``spillway.Array.__module__``) calls
_import_spillway_dask, which imports spillway.dask, which registers the
real serializers.  That registration needs distributed.protocol.serialize
(where the Dispatch objects live) imported: when it already is, install()
registers at once; otherwise it puts a finder first on sys.meta_path that
answers only for that module, lets the real loader run it, and registers
right after (then leaves sys.meta_path).  If the module was already being
imported when spillway was (spillway imported from inside it), the finder
registers at the next import of anything once the module has its Dispatch
objects.
"""

import sys
import threading

_SERIALIZE = "distributed.protocol.serialize"
_lock = threading.Lock()


def _import_spillway_dask():
    # Called by Dispatch.dispatch, once per Dispatch, when distributed is
    # fully imported: spillway.dask registers the serializers for real.
    from . import dask  # noqa: F401


def _ready(module):
    return module is not None and \
        hasattr(module, "dask_serialize") and \
        hasattr(module, "dask_deserialize")


def _register(module):
    module.dask_serialize.register_lazy("spillway", _import_spillway_dask)
    module.dask_deserialize.register_lazy("spillway", _import_spillway_dask)


def _finish(module):
    """Register into module (distributed.protocol.serialize, ready) and take
    the finder off sys.meta_path; a second call does nothing."""
    with _lock:
        finders = [f for f in sys.meta_path if isinstance(f, _Finder)]
        if not finders:
            return
        _register(module)
        for f in finders:
            try:
                sys.meta_path.remove(f)
            except ValueError:  # another thread took it off
                pass


class _Loader:
    """The real loader of distributed.protocol.serialize, which registers
    once it has run the module."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        # The module is the real loader's from its first line on: nothing
        # that reads __loader__ or __spec__.loader (inspect, reload,
        # importlib.resources) ever meets this wrapper.
        module.__loader__ = self.loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        if _ready(module):
            _finish(module)

    def __getattr__(self, name):  # get_code, get_source, is_package, ...
        return getattr(self.loader, name)


class _Finder:
    """A sys.meta_path finder that finds nothing itself: it answers only for
    distributed.protocol.serialize, with the spec the other finders give
    and its loader wrapped."""

    def find_spec(self, name, path=None, target=None):
        if name != _SERIALIZE:
            # The module being imported already when spillway was: register
            # once it has its Dispatch objects.
            if _ready(sys.modules.get(_SERIALIZE)):
                _finish(sys.modules[_SERIALIZE])
            return None
        for finder in list(sys.meta_path):
            if finder is self or isinstance(finder, _Finder):
                continue
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec  # the fallback above registers after it
        spec.loader = _Loader(spec.loader)
        return spec


def install():
    """Register spillway's Dask serializers lazily, now or once distributed
    is imported; never imports distributed."""
    module = sys.modules.get(_SERIALIZE)
    if _ready(module):
        _register(module)
        return
    with _lock:
        if not any(isinstance(f, _Finder) for f in sys.meta_path):
            sys.meta_path.insert(0, _Finder())
