"""Values: ops through the binding against NumPy, in both modes; listings; attributes."""

import numpy as np
import pytest

import deepx
from deepx import ops

RNG = np.random.default_rng(17)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_add_matches_numpy(rt, dtype):
    a = (RNG.standard_normal((3, 4)) * 10).astype(dtype)
    b = (RNG.standard_normal((3, 4)) * 10).astype(dtype)
    with rt.asarray(a) as ta, rt.asarray(b) as tb, ops.add(ta, tb) as out:
        assert out.shape == (3, 4)
        assert out.dtype == deepx.dtype(dtype)
        np.testing.assert_array_equal(out.numpy(), a + b)


def test_add_broadcasts_into_given_out(rt):
    a = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    b = RNG.standard_normal((4,)).astype(np.float32)
    with rt.asarray(a) as ta, rt.asarray(b) as tb, rt.empty((2, 3, 4), deepx.f32) as out:
        assert ops.add(ta, tb, out=out) is out
        np.testing.assert_array_equal(out.numpy(), a + b)


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-4), (np.float64, 1e-12)])
def test_matmul_matches_numpy(rt, dtype, tol):
    a = RNG.standard_normal((5, 7)).astype(dtype)
    b = RNG.standard_normal((7, 3)).astype(dtype)
    with rt.asarray(a) as ta, rt.asarray(b) as tb, ops.matmul(ta, tb) as out:
        assert out.shape == (5, 3)
        np.testing.assert_allclose(out.numpy(), a @ b, rtol=tol, atol=tol)


def test_matmul_transpose_attribute_and_batch(rt):
    a = RNG.standard_normal((2, 4, 3)).astype(np.float32)
    b = RNG.standard_normal((2, 5, 3)).astype(np.float32)
    with rt.asarray(a) as ta, rt.asarray(b) as tb:
        with ops.matmul(ta, tb, transpose_b=True) as out:
            assert out.shape == (2, 4, 5)
            np.testing.assert_allclose(out.numpy(), a @ b.transpose(0, 2, 1), rtol=1e-4,
                                       atol=1e-4)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_matches_numpy(rt, axis):
    x = RNG.standard_normal((4, 6)).astype(np.float32) * 3
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    expected = e / e.sum(axis=axis, keepdims=True)
    with rt.asarray(x) as tx, ops.softmax(tx, axis=axis) as out:
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out.numpy().sum(axis=axis), 1.0, rtol=1e-5)


def test_reduction_with_attributes_and_given_out(rt):
    x = RNG.standard_normal((3, 4, 5))
    with rt.asarray(x) as tx, rt.empty((3, 1, 5), deepx.f64) as out:
        ops.sum(tx, axes=[1], keepdims=True, out=out)
        np.testing.assert_allclose(out.numpy(), x.sum(axis=1, keepdims=True), rtol=1e-12)


def test_invoke_by_name_and_by_id_and_with_attrs_object(rt):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    with rt.asarray(a) as ta, rt.empty((4, 3)) as out:
        rt.invoke("dx.transpose", [ta], [out])
        np.testing.assert_array_equal(out.numpy(), a.T)
        out.write(np.zeros((4, 3)))
        op = rt.op_id("dx.transpose")
        with deepx.Attrs(perm=[1, 0]) as attrs:
            rt.invoke(op, [ta], [out], attrs)
            rt.invoke(op, [ta], [out], attrs)  # an Attrs is reusable
        np.testing.assert_array_equal(out.numpy(), a.T)


def test_backward_kernel(rt):
    """dx.mul backward: inputs dy, a, b, y; outputs da = dy * b, db = dy * a."""
    a = RNG.standard_normal((3,)).astype(np.float32)
    b = RNG.standard_normal((3,)).astype(np.float32)
    dy = np.ones(3, np.float32)
    with rt.asarray(a) as ta, rt.asarray(b) as tb, rt.asarray(dy) as tdy, \
            ops.mul(ta, tb) as y, rt.empty((3,)) as da, rt.empty((3,)) as db:
        ops.mul(tdy, ta, tb, y, out=[da, db], backward=True)
        np.testing.assert_allclose(da.numpy(), b, rtol=1e-6)
        np.testing.assert_allclose(db.numpy(), a, rtol=1e-6)


def test_multi_output_op(rt):
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    with rt.asarray(x) as tx, rt.empty((4, 8)) as y, rt.empty((4, 1)) as mean, \
            rt.empty((4, 1)) as rstd:
        got = ops.layer_norm(tx, out=(y, mean, rstd), eps=1e-5)
        assert got == (y, mean, rstd)
        m = x.mean(axis=1, keepdims=True)
        v = x.var(axis=1, keepdims=True)
        np.testing.assert_allclose(mean.numpy(), m, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(y.numpy(), (x - m) / np.sqrt(v + 1e-5), rtol=1e-4,
                                   atol=1e-4)


def test_cast_with_dtype_attribute(rt):
    x = np.array([1.7, -2.2, 3.5], np.float32)
    with rt.asarray(x) as tx, rt.empty((3,), deepx.i32) as out:
        ops.cast(tx, out=out, dtype=deepx.i32)
        np.testing.assert_array_equal(out.numpy(), x.astype(np.int32))


def test_listings(rt):
    plugins = rt.plugins()
    assert [p.name for p in plugins] == ["cpu"]
    assert plugins[0].num_kernels > 0
    devices = rt.devices()
    assert devices and devices[0].name == "cpu" and devices[0].device_type == 1
    assert rt.find_device("cpu") == devices[0].index
    names = rt.ops()
    assert "dx.add" in names and "dx.matmul" in names
    assert names[rt.op_id("dx.add")] == "dx.add"
    kernels = rt.kernels("dx.add")
    assert any(k.dtypes == (deepx.f32, deepx.f32, deepx.f32) for k in kernels)
    assert all(k.op == "dx.add" and k.num_inputs == 2 for k in kernels)


def test_tensor_properties_and_views(rt):
    a = np.arange(24, dtype=np.int64).reshape(4, 6)
    with rt.asarray(a) as t:
        assert (t.shape, t.ndim, t.size, t.nbytes, len(t)) == ((4, 6), 2, 24, 192, 4)
        assert t.dtype == deepx.i64 and t.dtype == "int64" and t.dtype == np.int64
        with t.view((2, 3), strides=(6, 2), offset=7) as v:
            np.testing.assert_array_equal(v.numpy(), a.reshape(-1)[7:].reshape(-1)[:0 + 12]
                                          .reshape(2, 6)[:, ::2])
        with t.view((24,)) as flat:
            flat.write(np.arange(24)[::-1])
        np.testing.assert_array_equal(t.numpy(), np.arange(24)[::-1].reshape(4, 6))
        assert t.tolist()[0][0] == 23


def test_scalar_and_empty_tensors(rt):
    with rt.asarray(np.float32(2.5)) as s, ops.add(s, s) as out:
        assert out.shape == ()
        assert out.numpy() == 5.0
    with rt.empty((0, 3)) as e, ops.add(e, e) as out:
        assert out.shape == (0, 3) and out.numpy().size == 0


def test_copy_between_tensors(rt):
    a = RNG.standard_normal((3, 3)).astype(np.float32)
    with rt.asarray(a) as src, rt.empty((3, 3)) as dst:
        rt.copy(dst, src)
        np.testing.assert_array_equal(dst.numpy(), a)


def test_every_op_of_the_table_is_a_function():
    from deepx._optable import OPS
    for op in OPS:
        fn = getattr(ops, op["name"].split(".", 1)[1])
        assert callable(fn) and op["name"] in fn.__doc__
