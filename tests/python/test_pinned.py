"""spillway.pinned, Queue.native, Queue.from_native, Device.native_context:
runtimes running their own kernels on spillway's memory (issue 25).

On host-addressable devices (sim:0, host:0) the "kernels" are NumPy views
built from each PinnedView's .ptr; on opencl:0 they are OpenCL C kernels
built and launched with PyOpenCL (a real client no one here wrote), on the
queue spillway hands out, in the context it hands out, on the cl_mem of
each view.  The CUDA side (__cuda_array_interface__, DLPack's stream=)
runs against the CPU stand-in for libcuda.so.1 in a subprocess.
"""

import os
import pathlib
import subprocess
import sys
import textwrap
import threading
import types

import numpy as np
import pytest

import spillway as sw

ROOT = pathlib.Path(__file__).resolve().parents[2]


def host_addressable(dev):
    return dev.name.split(":")[0] in ("sim", "host")


def np_view(v):
    """A NumPy array on a pinned view's memory (host-addressable devices)."""
    if v.nbytes == 0:
        return np.empty(v.shape, dtype=v.dtype)
    # Through __array_interface__, not ctypes: CPython 3.13t's ctypes is
    # not thread-safe (from_address() races on the type's flags), and the
    # threaded tests build views at once.
    mem = types.SimpleNamespace(__array_interface__={
        "data": (v.ptr, False), "shape": tuple(v.shape),
        "typestr": np.dtype(v.dtype).str, "version": 3})
    return np.asarray(mem)


# The Tack-style helper of docs/python.md ("Your own kernels"), verbatim.
def execute(kernel, *arrays, outputs=(), queue=None):
    """Run kernel(*input_views, *output_views) on spillway memory.

    Every input is made resident in one pass and pinned; the outputs,
    given as (shape, dtype) pairs, are allocated while the inputs are
    pinned (so making room for them never spills an input), then pinned
    too.  Returns the output Arrays.  With queue=None the kernel runs on
    the host (NumPy on .ptr); with a Queue, kernel queues its work on
    queue.native and the pins end in that stream's order.
    """
    device = arrays[0].device if arrays else None
    with sw.pinned(*arrays, queue=queue, access="r" * len(arrays)) as views:
        outs = [sw.empty(shape, dtype=dtype, device=device)
                for shape, dtype in outputs]
        with sw.pinned(*outs, queue=queue) as out_views:
            kernel(*views, *out_views)
    return outs[0] if len(outs) == 1 else tuple(outs)


# ---------------------------------------------------------------------------
# The pin itself
# ---------------------------------------------------------------------------

def test_views_describe_the_memory(dev):
    a = sw.asarray(np.arange(12, dtype=np.float32).reshape(3, 4), device=dev)
    row = a[1]
    with sw.pinned(a, row) as (va, vr):
        assert va.nbytes == 48 and va.shape == (3, 4)
        assert str(va.dtype) == "float32"
        assert va.array is a and va.queue is None
        assert vr.offset == va.offset + 16
        if dev.name.startswith("opencl"):
            assert vr.cl_mem == va.cl_mem
            with pytest.raises(AttributeError, match="cl_mem"):
                va.ptr
        else:
            assert vr.ptr == va.ptr + 16
            with pytest.raises(AttributeError, match="ptr"):
                va.cl_mem
        assert va.__dlpack_device__() == a.__dlpack_device__()
        if not dev.name.startswith("cuda"):
            with pytest.raises(AttributeError, match="CUDA"):
                va.__cuda_array_interface__
        assert "PinnedView" in repr(va)


@pytest.mark.skipif(not host_addressable(sw.Device()),
                    reason="NumPy reads the memory by address")
def test_host_pin_reads_and_writes(dev):
    a = sw.asarray(np.arange(1000, dtype=np.int32), device=dev)
    out = sw.zeros(1000, dtype="int32", device=dev)
    q = sw.Queue(dev)
    sw.scale(a, 3, out=a, queue=q)      # queued on another queue
    with sw.pinned(a, out) as (va, vo):  # waits for it
        np_view(vo)[:] = np_view(va) + 1
        assert np.from_dlpack(va)[10] == 30
    np.testing.assert_array_equal(out.numpy(), np.arange(1000) * 3 + 1)
    del q


def test_pin_on_a_queue_orders_after_other_queues(dev):
    """pinned(..., queue=q) orders q after the work already queued on the
    arrays on any queue (issue 34, item 3): the kernel run on q inside the
    block (here the library's own fill, queued on q) is never overtaken by
    another queue's earlier writes -- first pin of the array on q, then
    again (the warm path), then the host's pin after both."""
    n = 4 << 20  # int32: 16 MiB, so that o's work is still running
    o, q = sw.Queue(dev), sw.Queue(dev)
    a = sw.zeros(n, dtype="int32", device=dev)
    for value in (-1, -2):
        a.fill(5, queue=o)
        for _ in range(3):
            sw.scale(a, 3, out=a, queue=o)
        with sw.pinned(a, queue=q):
            a.fill(value, queue=q)
        got = a.numpy()
        assert (got == value).all(), np.unique(got)
    sw.scale(a, 3, out=a, queue=o)
    with sw.pinned(a, queue=q):
        a.fill(-3, queue=q)
    if host_addressable(dev):
        with sw.pinned(a) as (v,):
            got = np_view(v)
            assert (got == -3).all(), np.unique(got)
    assert (a.numpy() == -3).all()
    del o, q


def test_view_used_after_its_block_raises(dev):
    a = sw.zeros(16, device=dev)
    with sw.pinned(a) as (v,):
        pass
    for attr in ("ptr", "cl_mem", "offset", "nbytes", "dtype", "shape"):
        with pytest.raises(ValueError, match="after its"):
            getattr(v, attr)
    with pytest.raises(ValueError, match="after its"):
        v.__dlpack__()
    assert "ended" in repr(v)


def test_exception_in_block_ends_the_pins(dev):
    a = sw.zeros(16, device=dev)
    p = sw.pinned(a)
    with pytest.raises(KeyError):
        with p as (v,):
            raise KeyError("inside")
    with pytest.raises(ValueError):
        v.nbytes
    assert "ended" in repr(p)
    with pytest.raises(RuntimeError, match="entered once"):
        p.__enter__()
    # Not pinned any more: a budget that holds nothing spills it.
    if dev.name != "host:0":
        sw.set_memory_budget(1, dev)
        assert a.is_spilled
        sw.set_memory_budget(None, dev)


def test_duplicates_nesting_and_empty(dev):
    a = sw.ones(64, device=dev)
    with sw.pinned(a, a, a[2:4]) as views:
        assert len(views) == 3
        with sw.pinned(a) as (inner,):
            assert inner.offset == views[0].offset
    with sw.pinned() as views:
        assert len(views) == 0 and tuple(views) == ()
    np.testing.assert_array_equal(a.numpy(), np.ones(64, np.float32))


def test_views_are_a_sequence_made_as_read(dev):
    """The block's views are the pin set itself, a sequence: a view is
    made when it is read (a kernel that reads two of eight makes two),
    inside the block only."""
    arrays = [sw.full(16, k, device=dev) for k in (1, 2, 3)]
    p = sw.pinned(*arrays)
    with pytest.raises(ValueError, match="inside its `with` block"):
        p[0]
    with p as views:
        assert views is p and len(views) == 3
        assert all(v.array is x for v, x in zip(views, arrays))
        assert views[-1].array is arrays[2]
        assert views[0] is not views[0]  # one per read, sharing the pin
        assert views[0].offset == views[0].offset
        tail = views[1:]
        assert isinstance(tail, tuple) and len(tail) == 2
        assert tail[0].array is arrays[1] and views[::-1][0].array is arrays[2]
        va, vb, vc = views
        assert all(v.array is x for v, x in zip((va, vb, vc), arrays))
        assert len(tuple(views)) == 3 and len(list(views)) == 3
        assert (lambda *vs: len(vs))(*views) == 3
        for bad in (3, -4):
            with pytest.raises(IndexError):
                views[bad]
        with pytest.raises(TypeError, match="integers or slices"):
            views["0"]
    for use in (lambda: p[0], lambda: list(p), lambda: p[0:1]):
        with pytest.raises(ValueError, match="inside its `with` block"):
            use()
    with pytest.raises(ValueError, match="used after"):
        va.nbytes


@pytest.mark.spills
def test_pins_hold_under_a_lowered_budget(dev):
    a, b = sw.ones(1 << 16, device=dev), sw.zeros(1 << 16, device=dev)
    other = sw.full(1 << 16, 7, device=dev)
    with sw.pinned(a, b) as (va, vb):
        before = (va.offset, vb.offset, va.__dlpack_device__())
        sw.set_memory_budget(sw.ALLOC_GRANULARITY, dev)
        sw.empty_cache(dev)
        assert not a.is_spilled and not b.is_spilled
        assert other.is_spilled
        assert (va.offset, vb.offset, va.__dlpack_device__()) == before
    sw.set_memory_budget(None, dev)
    assert other.numpy()[0] == 7


@pytest.mark.spills
def test_set_too_large_moves_nothing(dev):
    a, b = sw.ones(1 << 16, device=dev), sw.ones(1 << 16, device=dev)
    sw.set_memory_budget(1 << 18, dev)
    before = sw.memory_info(dev)
    with pytest.raises(sw.DeviceMemoryError, match="nothing was moved"):
        with sw.pinned(a, b):
            pass
    after = sw.memory_info(dev)
    assert (after.in_use, after.spilled, after.cached) == \
        (before.in_use, before.spilled, before.cached)
    sw.set_memory_budget(None, dev)


def test_bad_input(dev, sim1):
    a = sw.zeros(8, device=dev)
    with pytest.raises(TypeError, match="spillway.Array"):
        sw.pinned(a, np.zeros(8))
    with pytest.raises(TypeError, match="keyword"):
        sw.pinned(a, stream=1)
    other = sw.zeros(8, device=sim1)
    if dev != sim1:
        with pytest.raises(ValueError, match="one device"):
            sw.pinned(a, other)
        q1 = sw.Queue(sim1)
        with pytest.raises(ValueError):
            sw.pinned(a, queue=q1)
        del q1
    with pytest.raises(TypeError):
        sw.pinned(a, queue="not a queue")


def test_closed_device_is_refused():
    d = sw.Device("sim:1")
    a = sw.zeros(8, device=d)
    p = sw.pinned(a)
    d.close()
    try:
        with pytest.raises(ValueError, match="closed"):
            p.__enter__()
        with pytest.raises(ValueError, match="closed"):
            sw.pinned(a)
    finally:
        del a, p
        sw.Device("sim:1")  # opened again for the tests after


def test_threads_pin_at_once(dev):
    """8 threads pin shared and own arrays, on queues and for the host,
    under a budget that moves; every result checked."""
    shared = sw.ones(4096, dtype="int32", device=dev)
    errors = []
    addressable = host_addressable(dev)

    def work(k):
        try:
            q = sw.Queue(dev)
            mine = sw.zeros(4096, dtype="int32", device=dev)
            for it in range(40):
                sw.full(4096, k + it, dtype="int32", device=dev)  # churn
                with sw.pinned(mine, shared,
                               queue=q if it % 2 else None) as (vm, vs):
                    if addressable and it % 2 == 0:
                        np_view(vm)[:] += np_view(vs)
                if not addressable or it % 2:
                    sw.add(mine, shared, out=mine)
                assert mine.numpy()[4095] == it + 1
            del q
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    if dev.name != "host:0":
        for r in range(10):
            sw.set_memory_budget((512 << 10) if r % 2 else None, dev)
    for t in threads:
        t.join()
    sw.set_memory_budget(None, dev)
    assert not errors, errors[:3]


# ---------------------------------------------------------------------------
# Native handles
# ---------------------------------------------------------------------------

def test_from_native_refuses_spillways_own(dev):
    """What spillway made is spillway's, on every device: a Queue's .native
    and the device's context are ValueError, saying to use the Queue (on
    host:0 the context is the default queue's address: adopting it, then
    dropping the adoption, destroyed the default queue and aborted)."""
    q = sw.Queue(dev)
    h = q.native
    assert isinstance(h, int) and h
    with pytest.raises(ValueError, match="use that queue itself"):
        sw.Queue.from_native(h, device=dev)
    if not dev.name.startswith("hip"):
        ctx = dev.native_context
        assert isinstance(ctx, int) and ctx
        with pytest.raises(ValueError, match="native context"):
            sw.Queue.from_native(ctx, device=dev)
    # Both the queue and the default queue are untouched.
    a = sw.zeros(1024, device=dev)
    sw.add(a, sw.ones(1024, device=dev), out=a, queue=q)
    q.synchronize()
    sw.add(a, a, out=a)
    assert a.numpy()[1023] == 2
    del q


def test_from_native_bad_input(dev):
    with pytest.raises(ValueError, match="no queue"):
        sw.Queue.from_native(0, device=dev)
    with pytest.raises(TypeError, match="int"):
        sw.Queue.from_native("0x10", device=dev)
    for b in (True, False, np.bool_(True)):
        with pytest.raises(TypeError, match="int"):
            sw.Queue.from_native(b, device=dev)
    with pytest.raises(ValueError, match="not an address"):
        sw.Queue.from_native(-5, device=dev)
    # Another device's queue and context: refused before a driver reads
    # them.
    other_dev = sw.Device("sim:0" if dev.name.startswith("host") else "host:0")
    other = sw.Queue(other_dev)
    with pytest.raises(ValueError, match="not of this device"):
        sw.Queue.from_native(other.native, device=dev)
    with pytest.raises(ValueError, match="native context of"):
        sw.Queue.from_native(other_dev.native_context, device=dev)
    del other
    if dev.name.split(":")[0] not in ("sim", "host", "opencl"):
        return  # a real driver reads through what it is given
    # Integers that name nothing: no memory there, memory that is no
    # queue (an object's, an array's).
    o = object()
    z = np.zeros(8, dtype=np.uint64)
    for h in (1, 0x1000, (1 << 63) + 8, id(o), z.ctypes.data):
        with pytest.raises(ValueError):
            sw.Queue.from_native(h, device=dev)
    # A queue spillway destroyed: the simulated and host devices can tell
    # (OpenCL cannot: docs/python.md).
    if host_addressable(dev):
        q = sw.Queue(dev)
        h = q.native
        del q
        sw.order_manager.clear()
        sw.synchronize(dev)
        q = sw.Queue(dev)   # a creation destroys the idle dead ones
        with pytest.raises(ValueError):
            sw.Queue.from_native(h, device=dev)
        del q


def test_other_devices_handles_refused_on_opencl():
    """Handles of sim:0 and host:0, and integers that name nothing, named
    for opencl:0 (PoCL read through them and crashed)."""
    if "opencl:0" not in [d.name for d in sw.devices()]:
        pytest.skip("no opencl:0")
    for spec in ("sim:0", "host:0"):
        d = sw.Device(spec)
        q = sw.Queue(d)
        with pytest.raises(ValueError, match="not of this device"):
            sw.Queue.from_native(q.native, "opencl:0")
        with pytest.raises(ValueError, match="native context of"):
            sw.Queue.from_native(d.native_context, "opencl:0")
        del q
    with pytest.raises(TypeError):
        sw.Queue.from_native(True, "opencl:0")
    o = object()
    for h in (1, 0x1000, 1 << 40, id(o)):
        with pytest.raises(ValueError, match="not an OpenCL object"):
            sw.Queue.from_native(h, "opencl:0")


# ---------------------------------------------------------------------------
# A pipeline of the user's own kernels, under a budget
# ---------------------------------------------------------------------------

LAYERS = 8
WIDTH = 1 << 15


def layer_weights():
    rng = np.random.default_rng(25)
    return [rng.standard_normal(WIDTH).astype(np.float32)
            for _ in range(LAYERS)]


def numpy_step(vx, vw, vy):
    """y = max(x * w + 0.5, 0) in float32, one operation at a time."""
    x, w, y = np_view(vx), np_view(vw), np_view(vy)
    np.multiply(x, w, out=y)
    np.add(y, np.float32(0.5), out=y)
    np.maximum(y, np.float32(0), out=y)


def run_pipeline(dev, step, budget, queue=None, check=None):
    """Forward through LAYERS steps keeping every activation (the live set
    grows to 2 * LAYERS arrays), each step the user's kernel inside
    execute(); returns the activations' bytes and the spills seen."""
    ws = [sw.asarray(w, device=dev, tag=f"w{i}")
          for i, w in enumerate(layer_weights())]
    xs = [sw.full(WIDTH, 1.0, dtype="float32", device=dev, tag="x0")]
    sw.set_memory_budget(budget, dev)
    spills = sw.memory_info(dev).spills
    try:
        for i in range(LAYERS):
            def kernel(vx, vw, vy, i=i):
                if check is not None:
                    check(xs[i], ws[i])
                step(vx, vw, vy)
            xs.append(execute(kernel, xs[i], ws[i],
                              outputs=[((WIDTH,), "float32")], queue=queue))
        spills = sw.memory_info(dev).spills - spills
    finally:
        sw.set_memory_budget(None, dev)
    return [x.numpy().tobytes() for x in xs], spills


def never_spilled(*arrays):
    for a in arrays:
        assert not a.is_spilled, "a pinned array was spilled"


@pytest.mark.skipif(not host_addressable(sw.Device()),
                    reason="NumPy kernels read the memory by address")
def test_numpy_pipeline_under_a_quarter_budget(dev):
    live = 2 * (LAYERS + 1) * WIDTH * 4
    free, spills0 = run_pipeline(dev, numpy_step, None)
    if dev.name == "host:0":
        return  # host:0 never spills: the unbudgeted run is the test
    tight, spills = run_pipeline(dev, numpy_step, live // 4,
                                 check=never_spilled)
    assert tight == free  # bit-identical
    assert spills > 0 and spills0 == 0


OPENCL_SRC = """
#pragma OPENCL FP_CONTRACT OFF
__kernel void layer(__global const float *x, uint xo,
                   __global const float *w, uint wo,
                   __global float *y, uint yo, uint n)
{
    size_t i = get_global_id(0);
    if (i < n) {
        float v = x[xo + i] * w[wo + i];
        v = v + 0.5f;
        y[yo + i] = fmax(v, 0.0f);
    }
}
"""


def opencl_step_maker(dev, q):
    cl = pytest.importorskip("pyopencl")
    ctx = cl.Context.from_int_ptr(dev.native_context)
    cq = cl.CommandQueue.from_int_ptr(q.native)
    prg = cl.Program(ctx, OPENCL_SRC).build()
    kern = prg.layer
    launches = []

    def step(vx, vw, vy):
        bufs = [cl.Buffer.from_int_ptr(v.cl_mem) for v in (vx, vw, vy)]
        kern(cq, (WIDTH,), None,
             bufs[0], np.uint32(vx.offset // 4),
             bufs[1], np.uint32(vw.offset // 4),
             bufs[2], np.uint32(vy.offset // 4), np.uint32(WIDTH))
        launches.append(1)
        for b in bufs:  # our references only: spillway owns the memory
            b.release()

    return step, launches, (ctx, cq, prg)


@pytest.mark.skipif(not sw.Device().name.startswith("opencl"),
                    reason="the PyOpenCL pipeline runs on opencl:0")
def test_pyopencl_pipeline_under_a_quarter_budget(dev):
    q = sw.Queue(dev)
    step, launches, keep = opencl_step_maker(dev, q)
    live = 2 * (LAYERS + 1) * WIDTH * 4
    free, spills0 = run_pipeline(dev, step, None, queue=q)
    tight, spills = run_pipeline(dev, step, live // 4, queue=q,
                                 check=never_spilled)
    assert len(launches) == 2 * LAYERS
    assert tight == free  # bit-identical
    assert spills > 0 and spills0 == 0
    # The same steps in NumPy give the same bits (IEEE float32, one
    # rounding per operation: the kernel's fmax(x * w + 0.5, 0)).
    x = np.full(WIDTH, 1.0, np.float32)
    for w in layer_weights():
        x = np.maximum(x * w + np.float32(0.5), np.float32(0))
        # (numpy's float32 arithmetic rounds each operation as OpenCL's)
    assert free[-1] == x.tobytes()
    del q, keep


@pytest.mark.skipif(not sw.Device().name.startswith("opencl"),
                    reason="PyOpenCL's own queue, adopted, on opencl:0")
def test_pyopencl_queue_adopted(dev):
    cl = pytest.importorskip("pyopencl")
    ctx = cl.Context.from_int_ptr(dev.native_context)
    theirs = cl.CommandQueue(ctx)
    q = sw.Queue.from_native(theirs.int_ptr, device=dev)
    a = sw.ones(4096, device=dev)
    with sw.pinned(a, queue=q) as (v,):
        buf = cl.Buffer.from_int_ptr(v.cl_mem)
        prg = cl.Program(ctx, "__kernel void dbl(__global float *a, uint o)"
                              "{ a[o + get_global_id(0)] *= 2.0f; }").build()
        prg.dbl(theirs, (4096,), None, buf, np.uint32(v.offset // 4))
        buf.release()
    # Ordered after their kernel: the read waits for it on the device.
    assert (a.numpy() == 2).all()
    # Another context's queue is refused.
    other = cl.Context(devices=ctx.devices)
    other_q = cl.CommandQueue(other)  # alive while asked about
    with pytest.raises(ValueError, match="another context"):
        sw.Queue.from_native(other_q.int_ptr, device=dev)
    del q
    theirs.finish()


# ---------------------------------------------------------------------------
# CUDA, through the stand-in driver
# ---------------------------------------------------------------------------

def test_cuda_views_and_dlpack_streams_on_the_stand_in(tmp_path):
    build = pathlib.Path(os.environ.get("SPILLWAY_BUILD_DIR", ROOT / "build"))
    if not build.is_absolute():
        build = ROOT / build
    fake = build / "tests" / "c" / "libcuda_fake.so"
    nvrtc = build / "tests" / "c" / "libnvrtc_fake.so"  # goes with it
    if not fake.exists() or not nvrtc.exists() or \
            os.environ.get("SPILLWAY_TEST_INSTALLED") == "1":
        pytest.skip(f"no {fake} or {nvrtc}")
    code = textwrap.dedent("""
        import sys
        sys.path.insert(0, sys.argv[1])
        import numpy as np
        import spillway as sw
        dev = sw.Device("cuda:0")
        assert dev.native_context
        q = sw.Queue(dev)
        a = sw.asarray(np.arange(256, dtype=np.float32), device=dev)
        with sw.pinned(a, queue=q) as (v,):
            cai = v.__cuda_array_interface__
            assert cai["version"] == 3 and cai["shape"] == (256,)
            assert cai["typestr"] == "<f4" and cai["strides"] is None
            assert cai["data"] == (v.ptr, False)
            assert cai["stream"] == q.native
            cap = v.__dlpack__(stream=q.native)   # its own queue: no wait
            assert type(cap).__name__ == "PyCapsule"
        with sw.pinned(a) as (v,):
            assert v.__cuda_array_interface__["stream"] is None
        # Array exports: a consumer's stream waits on the device for the
        # array's work (the stream adopted for it), 1 and 2 synchronize,
        # -1 asks for nothing.
        sw.scale(a, 2, out=a)
        for stream in (q.native, 1, 2, -1):
            cap = a.__dlpack__(stream=stream)
            del cap
        try:
            a.__dlpack__(stream=0x1234000)   # no stream of this driver
        except ValueError as e:
            assert "not a live stream" in str(e), e
        else:
            raise AssertionError("a dead stream was accepted")
        assert a.numpy()[255] == 510
        del q
        print("ok")
    """)
    env = dict(os.environ, SPILLWAY_CUDA_LIBRARY=str(fake),
               SPILLWAY_NVRTC_LIBRARY=str(nvrtc),
               SPILLWAY_DEVICE="cuda:0", FAKE_CUDA_MEMORY=str(256 << 20))
    r = subprocess.run([sys.executable, "-c", code, str(build / "python")],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), \
        r.stdout + r.stderr
