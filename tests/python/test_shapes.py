"""Shapes with a zero-length axis: the product of the other axes must
still fit (issue 11.5).  NumPy refuses np.zeros((2**62, 2**62, 0)) and
np.zeros(0).reshape(2**62, 2**62, 0); so does spillway, wherever a shape is
built: creation, reshape, unpickling and DLPack import."""

import ctypes
import pickle

import numpy as np
import pytest

import spillway as sw

HUGE_EMPTY = [(2**62, 2**62, 0), (0, 2**62, 2**62), (2**62, 0, 2**62),
              (2**40, 2**40, 0), (2**62, 0)]  # (2**62, 0): 2**62 x 4 bytes


@pytest.mark.parametrize("shape", HUGE_EMPTY)
@pytest.mark.parametrize("make", ["empty", "zeros", "ones"])
def test_creation_refuses_an_overflowing_empty_shape(dev, make, shape):
    with pytest.raises(ValueError, match="too big"):
        np.zeros(shape, dtype=np.float32)  # the behaviour we follow
    with pytest.raises(ValueError, match="too big"):
        getattr(sw, make)(shape, dtype="float32", device=dev)


def test_full_refuses_an_overflowing_empty_shape(dev):
    with pytest.raises(ValueError, match="too big"):
        sw.full((2**62, 2**62, 0), 1.0, device=dev)


@pytest.mark.parametrize("shape", [(2**62, 2**62, 0), (2**62, 2**62, -1),
                                   (0, 2**62, 2**62), (2**62, 0)])
def test_reshape_refuses_an_overflowing_empty_shape(dev, shape):
    with pytest.raises(ValueError):
        np.zeros(0, dtype=np.float32).reshape(shape)
    a = sw.zeros(0, device=dev)
    with pytest.raises(ValueError, match="too big|cannot reshape"):
        a.reshape(shape)
    with pytest.raises(ValueError, match="too big|cannot reshape"):
        a.reshape(*shape)


@pytest.mark.parametrize("shape", [(5, 0), (0,), (2**40, 0, 3), (0, 2**31)])
def test_empty_shapes_that_fit_still_work(dev, shape):
    a = sw.zeros(shape, device=dev)
    assert a.shape == shape and a.nbytes == 0
    assert a.numpy().shape == shape
    b = sw.zeros(0, device=dev).reshape(shape)
    assert b.shape == shape
    assert pickle.loads(pickle.dumps(a)).shape == shape


def test_unpickling_refuses_an_overflowing_empty_shape(dev):
    a = sw.zeros((1, 1, 0), device=dev)
    fn, args = a.__reduce_ex__(5)[:2]
    args = list(args)
    shape_at = [i for i, x in enumerate(args) if x == (1, 1, 0)]
    assert shape_at, args
    args[shape_at[0]] = (2**62, 2**62, 0)
    with pytest.raises(ValueError, match="too big"):
        fn(*args)


_name = ctypes.pythonapi.PyCapsule_GetName
_name.restype = ctypes.c_char_p
_name.argtypes = [ctypes.py_object]
_ptr = ctypes.pythonapi.PyCapsule_GetPointer
_ptr.restype = ctypes.c_void_p
_ptr.argtypes = [ctypes.py_object, ctypes.c_char_p]
V_SHAPE = 32 + 24  # DLManagedTensorVersioned: dl_tensor at 32, shape at 24


def test_dlpack_import_refuses_an_overflowing_empty_shape(dev):
    x = np.zeros((1, 1, 0), dtype=np.float32)
    cap = x.__dlpack__(max_version=(1, 0))
    p = _ptr(cap, _name(cap))
    shape = ctypes.cast(ctypes.c_void_p.from_address(p + V_SHAPE).value,
                        ctypes.POINTER(ctypes.c_int64))
    assert [shape[0], shape[1], shape[2]] == [1, 1, 0]
    shape[0] = shape[1] = 2**62
    with pytest.raises(ValueError, match="too big"):
        sw.from_dlpack(cap, device=dev)
    shape[0] = shape[1] = 1  # numpy's deleter frees what it made
