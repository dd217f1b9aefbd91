"""Pickling and copying Arrays (and Devices)."""

import copy
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import spillway as sw
from spillway import _spillway

from test_dtypes import ALL, host, sample

MiB = 1 << 20


@pytest.mark.parametrize("protocol", range(2, pickle.HIGHEST_PROTOCOL + 1))
@pytest.mark.parametrize("dt", ALL)
def test_round_trip_every_dtype(dev, dt, protocol):
    a = sw.asarray(sample(dt).reshape(3, 4), dtype=dt, device=dev,
                   tag="pickled")
    b = pickle.loads(pickle.dumps(a, protocol=protocol))
    assert b is not a and b.device is dev and b.tag == "pickled"
    assert str(b.dtype) == dt and b.shape == (3, 4)
    assert np.array_equal(host(b), host(a))


def test_shapes_and_views(dev):
    for a in [sw.zeros(()), sw.zeros(0), sw.zeros((2, 0, 3)),
              sw.asarray(np.arange(24.0).reshape(2, 3, 4))[1]]:
        b = pickle.loads(pickle.dumps(a))
        assert b.shape == a.shape and np.array_equal(b.numpy(), a.numpy())
    t = sw.zeros(3)
    assert pickle.loads(pickle.dumps(t)).tag is None


def test_protocol_5_buffers_out_of_band(dev):
    """The host copy is handed to the buffer callback itself: the stream
    holds none of the data, and loading takes the buffer back."""
    a = sw.asarray(np.arange(MiB // 8, dtype=np.float64), device=dev)
    bufs = []
    data = pickle.dumps(a, protocol=5, buffer_callback=bufs.append)
    assert len(data) < 1024 and len(bufs) == 1
    raw = bufs[0].raw()
    assert raw.nbytes == a.nbytes and raw.contiguous
    b = pickle.loads(data, buffers=bufs)
    assert np.array_equal(b.numpy(), a.numpy())
    inband = pickle.dumps(a, protocol=5)
    assert a.nbytes < len(inband) < a.nbytes + 1024  # one copy, in band
    del raw


def test_a_spilled_array_pickles_without_a_restore(sim):
    a = sw.asarray(np.arange(MiB // 4, dtype=np.float32), device=sim,
                   tag="cold")
    sw.set_memory_budget(2 * MiB, sim)
    others = [sw.zeros(MiB // 4, device=sim) for _ in range(2)]
    assert a.is_spilled
    restores = sw.memory_info(sim).restores
    for protocol in (2, 4, 5):
        data = pickle.dumps(a, protocol=protocol)
        assert a.is_spilled
    bufs = []
    pickle.dumps(a, protocol=5, buffer_callback=bufs.append)
    assert a.is_spilled and sw.memory_info(sim).restores == restores
    b = pickle.loads(data)
    assert np.array_equal(b.numpy(), np.arange(MiB // 4, dtype=np.float32))
    c = copy.copy(a)  # from the host copy too: a stays spilled
    assert a.is_spilled and sw.memory_info(sim).restores == restores
    assert np.array_equal(c.numpy(), b.numpy())
    sw.set_memory_budget(None, sim)
    del others


def test_copy_and_deepcopy(dev):
    a = sw.asarray(np.arange(6, dtype=np.int32).reshape(2, 3), device=dev)
    for c in (copy.copy(a), copy.deepcopy(a), copy.deepcopy([a, a])[0]):
        assert c is not a and c.device is dev
        assert c.numpy().tolist() == a.numpy().tolist()
    c = copy.copy(a)
    c.fill(9)
    assert a[0, 0] == 0  # a copy, not a view
    box = copy.deepcopy({"x": a, "y": a})
    assert box["x"] is box["y"]  # the memo keeps sharing


def test_device_pickles_as_its_spec(sim, sim1):
    assert pickle.loads(pickle.dumps(sim)) is sim
    assert pickle.loads(pickle.dumps(sim1)) is sim1
    assert copy.copy(sim) is sim and copy.deepcopy(sim) is sim
    a = sw.zeros(3, device=sim1)
    assert pickle.loads(pickle.dumps(a)).device is sim1  # its spec


def test_cloudpickle(dev):
    cloudpickle = pytest.importorskip("cloudpickle")
    a = sw.asarray(np.arange(5, dtype=np.float32), device=dev)
    b = cloudpickle.loads(cloudpickle.dumps(a))
    assert np.array_equal(b.numpy(), a.numpy())
    f = cloudpickle.loads(cloudpickle.dumps(lambda: a.sum()))
    assert f() == 10.0


def test_unpickling_what_this_build_lacks(dev):
    a = sw.zeros(2, dtype="float32")
    fn, args = a.__reduce_ex__(5)
    assert fn is _spillway._rebuild_array
    fmt, dt, shape, spec, tag, data = args
    assert (fmt, dt, shape, spec) == (1, "float32", (2,), a.device.name)
    before = sw.memory_info(dev).allocs
    with pytest.raises(TypeError, match="no such element type"):
        fn(fmt, "float8_e4m3", shape, spec, tag, bytes(2))
    with pytest.raises(ValueError, match="newer spillway"):
        fn(2, dt, shape, spec, tag, bytes(8))
    with pytest.raises(ValueError, match="corrupt"):
        fn(fmt, dt, shape, spec, tag, bytes(7))
    with pytest.raises(ValueError, match="negative"):
        fn(fmt, dt, (-1,), spec, tag, bytes(0))
    assert sw.memory_info(dev).allocs == before
    # the pickle as another build would write it, with a dtype name this
    # one does not know
    data = pickle.dumps(a, protocol=2).replace(b"float32", b"float99")
    with pytest.raises(TypeError, match="'float99'"):
        pickle.loads(data)


def test_unpickling_where_the_device_is_missing(tmp_path):
    """On the pickled spec when the receiving process has that device, else
    on its default device."""
    path = tmp_path / "a.pkl"
    path.write_bytes(pickle.dumps(
        sw.asarray(np.arange(4, dtype=np.int16), device="sim:1")))
    where = os.path.dirname(os.path.dirname(sw.__file__))
    code = textwrap.dedent(f"""
        import pickle, sys
        sys.path.insert(0, {where!r})
        import spillway as sw
        a = pickle.loads(open({str(path)!r}, "rb").read())
        print(a.device.name, a.numpy().tolist())
    """)
    env = dict(os.environ, SPILLWAY_SIM_DEVICES="1", SPILLWAY_DEVICE="sim:0")
    out = subprocess.run([sys.executable, "-c", code], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == "sim:0 [0, 1, 2, 3]"
    env["SPILLWAY_SIM_DEVICES"] = "2"
    out = subprocess.run([sys.executable, "-c", code], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.split("\n")[0] == "sim:1 [0, 1, 2, 3]", out.stderr


def test_pickling_a_closed_devices_array(sim1):
    a = sw.zeros(2, device=sim1)
    sim1.close()
    with pytest.raises(ValueError, match="closed"):
        pickle.dumps(a)
    with pytest.raises(ValueError, match="closed"):
        copy.copy(a)
    del a
