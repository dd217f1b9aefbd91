"""dask.sizeof for spillway arrays, without importing distributed: the
"dask.sizeof" entry point (pyproject.toml) calls register(sizeof) while
dask.sizeof itself is being imported, and spillway.dask registers it too."""

import spillway


def _sizeof_array(a):
    # Device bytes, or host bytes when spilled: the same number.  A view
    # counts its own bytes, as NumPy's sizeof does.
    return int(a.nbytes)


def register(sizeof):
    sizeof.register(spillway.Array)(_sizeof_array)
