"""Tests for fusegrad/mixin/movement.py: movement, joining, indexing, gather/scatter and setitem against torch/numpy.

Inputs are small seeded random arrays in float32, int32 and bool over shapes with size-0 and size-1 axes. Shapes
come from short fixed lists so kernels repeat (each new kernel is a C compile); a few cases also run on PYTHON.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fusegrad import Tensor
from fusegrad.dtype import DType, dtypes

NP_DTYPES: dict[DType, Any] = {dtypes.float32: np.float32, dtypes.int32: np.int32, dtypes.bool: np.bool_}
DTYPES = [dtypes.float32, dtypes.int32, dtypes.bool]
DTYPE_IDS = ["float32", "int32", "bool"]


def data(shape: tuple[int, ...], dt: DType = dtypes.float32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dt == dtypes.bool:
        return np.asarray(rng.random(shape) < 0.5)
    if dt == dtypes.int32:
        return np.asarray(rng.integers(-9, 10, size=shape), dtype=np.int32)
    return np.asarray(rng.uniform(-3, 3, size=shape), dtype=np.float32)


def tensor(arr: np.ndarray, device: str | None = None) -> Tensor:
    """arr as a Tensor on device (default: Device.DEFAULT, so DEV=CL runs these tests on OpenCL); 0-d kept 0-d."""
    return Tensor(arr.reshape(1), device=device).reshape(()) if arr.ndim == 0 else Tensor(arr, device=device)


def check(t: Tensor, ref: Any, dtype: DType | None = None) -> None:
    """t equals ref (numpy or torch): shape, dtype (when given) and values (floats to 1e-6)."""
    expected = ref.numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
    if dtype is not None:
        assert t.dtype == dtype, f"dtype {t.dtype}, expected {dtype}"
    out = t.numpy()
    assert out.shape == expected.shape, f"shape {out.shape}, expected {expected.shape}"
    if dtypes.is_float(t.dtype):
        np.testing.assert_allclose(out, expected.astype(out.dtype), rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(out, expected.astype(out.dtype))


# pad modes and tensor indices go through tensor.py, which routes them to the mixin once wired (see the report)
PAD_ROUTED = "mode" in inspect.signature(Tensor.pad).parameters


def _getitem_routed() -> bool:
    try:
        Tensor([1, 2])[Tensor([0])]
    except TypeError:
        return False
    return True


GETITEM_ROUTED = _getitem_routed()


def pad(t: Tensor, padding: Any, mode: str = "constant", value: float = 0.0) -> Tensor:
    return t.pad(padding, mode=mode, value=value) if PAD_ROUTED else t._pad_mode(padding, mode, value)  # type: ignore[call-arg]


def getitem(t: Tensor, index: Any) -> Tensor:
    return t[index] if GETITEM_ROUTED else t._getitem_advanced(index)


@pytest.mark.xfail(not (PAD_ROUTED and GETITEM_ROUTED), reason="tensor.py does not route pad/getitem yet", strict=True)
def test_tensor_py_routes_pad_modes_and_tensor_indices() -> None:
    t = Tensor([1.0, 2.0, 3.0])
    assert t.pad((2, 1), mode="reflect").tolist() == [3.0, 2.0, 1.0, 2.0, 3.0, 2.0]
    assert t[Tensor([2, 0])].tolist() == [3.0, 1.0]
    assert t[[True, False, True]].tolist() == [1.0, 3.0]


# *** tiling and padding ***


@pytest.mark.parametrize("dt", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    ("shape", "reps"), [((), (2,)), ((3,), (2,)), ((2, 3), (1, 2)), ((2, 0, 3), (2, 1, 2)), ((1, 4), (3, 1, 2))]
)
def test_repeat(dt: DType, shape: tuple[int, ...], reps: tuple[int, ...]) -> None:
    x = data(shape, dt)
    check(tensor(x).repeat(reps), np.tile(x, reps), dt)
    check(tensor(x).repeat(*reps), np.tile(x, reps), dt)


def test_repeat_needs_a_repeat_per_axis() -> None:
    with pytest.raises(ValueError, match="repeat: need 2 or more"):
        Tensor.ones(2, 3).repeat(2)


@pytest.mark.parametrize("dim", [None, 0, -1])
@pytest.mark.parametrize("shape", [(3,), (2, 3), (0, 2)])
def test_repeat_interleave(dim: int | None, shape: tuple[int, ...]) -> None:
    x = data(shape, dtypes.int32)
    check(tensor(x).repeat_interleave(2, dim), torch.from_numpy(x).repeat_interleave(2, dim))


def test_pad_to() -> None:
    x = data((2, 3))
    check(tensor(x).pad_to(4, None), np.pad(x, ((0, 2), (0, 0))))
    check(tensor(x).pad_to((3, 5), value=7.0), np.pad(x, ((0, 1), (0, 2)), constant_values=7.0))
    with pytest.raises(ValueError, match=r"pad_to: cannot pad shape \(2, 3\) to \(1, 3\)"):
        Tensor.ones(2, 3).pad_to(1, 3)


PADDINGS = [(1, 2), (2, 1, 0, 2), (-1, 2, 1, -1), (2, -2), (3, 3, 2, 2)]


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("padding", PADDINGS, ids=str)
def test_pad_modes_match_torch(mode: str, padding: tuple[int, ...]) -> None:
    x = data((3, 4))
    if mode == "reflect" and any(p >= 3 for p in padding):
        pytest.skip("torch: reflect padding must be smaller than the axis")
    ref = F.pad(torch.from_numpy(x)[None], padding, mode=mode)[0]
    check(pad(tensor(x), padding, mode), ref)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_modes_grouped_padding_and_3d(mode: str) -> None:
    x = data((2, 3, 4), dtypes.int32)
    ref = F.pad(torch.from_numpy(x).float()[None], (1, 2, 2, 1), mode=mode)[0].int()
    check(pad(tensor(x), (None, (2, 1), (1, 2)), mode), ref, dtypes.int32)


def test_pad_constant_value_and_flat_padding() -> None:
    x = data((2, 3))
    check(pad(tensor(x), (1, 0, 0, 2), value=-1.5), F.pad(torch.from_numpy(x), (1, 0, 0, 2), value=-1.5))
    check(pad(tensor(x), (2, 1)), np.pad(x, ((0, 0), (2, 1))))


@pytest.mark.parametrize(
    ("mode", "padding", "value", "match"),
    [
        ("reflect", (3, 0), 0.0, r"reflect padding \(3, 0\) must be smaller than axis 1 of size 3"),
        ("circular", (0, 4), 0.0, "wraps around more than once"),
        ("wrap", (1, 1), 0.0, "mode 'wrap' is not supported"),
        ("reflect", (1, 1), 2.0, "value=2.0 only applies to mode 'constant'"),
        ("constant", (1, 1, 1), 0.0, "flat padding needs an even length"),
    ],
)
def test_pad_errors(mode: str, padding: tuple[int, ...], value: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        pad(Tensor.ones(2, 3), padding, mode, value)


@pytest.mark.parametrize(
    ("shifts", "dims"), [(1, None), ((-7,), None), (2, 0), (-1, 1), ((1, -2), (0, 1)), ((3, 1), (1, 1)), (0, 0)]
)
@pytest.mark.parametrize("shape", [(3, 4), (0, 3)])
def test_roll(shifts: Any, dims: Any, shape: tuple[int, ...]) -> None:
    x = data(shape)
    check(tensor(x).roll(shifts, dims), torch.from_numpy(x).roll(shifts, dims))


# *** joining and splitting ***


@pytest.mark.parametrize("dt", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(("shapes", "dim"), [([(2, 3), (4, 3)], 0), ([(2, 1), (2, 3), (2, 0)], -1), ([(0,), (3,)], 0)])
def test_cat(dt: DType, shapes: list[tuple[int, ...]], dim: int) -> None:
    arrs = [data(s, dt, seed=i) for i, s in enumerate(shapes)]
    check(tensor(arrs[0]).cat(*[tensor(a) for a in arrs[1:]], dim=dim), np.concatenate(arrs, axis=dim), dt)


def test_cat_promotes_dtypes_and_keeps_negative_zero() -> None:
    out = Tensor([1, 2]).cat(Tensor([1.5]), Tensor([True]))
    check(out, [1.0, 2.0, 1.5, 1.0], dtypes.float32)
    assert np.signbit(Tensor([-0.0]).cat(Tensor([-0.0])).numpy()).all()
    assert Tensor([True]).cat(Tensor([False])).dtype == dtypes.bool


def test_cat_errors() -> None:
    with pytest.raises(ValueError, match=r"cat: shapes \(2, 3\) and \(2, 4\) differ outside dim 0"):
        Tensor.ones(2, 3).cat(Tensor.ones(2, 4))
    with pytest.raises(IndexError, match="zero-dimensional"):  # no dim to join along: IndexError, as the reference
        Tensor(1.0).cat(Tensor(2.0))
    with pytest.raises(IndexError, match="cat: axis 2 out of range"):
        Tensor.ones(2, 3).cat(Tensor.ones(2, 3), dim=2)


@pytest.mark.parametrize("dim", [0, 1, -1, 2])
def test_stack(dim: int) -> None:
    arrs = [data((2, 3), seed=i) for i in range(3)]
    check(tensor(arrs[0]).stack(tensor(arrs[1]), tensor(arrs[2]), dim=dim), np.stack(arrs, axis=dim))
    with pytest.raises(ValueError, match="stack: all tensors need the same shape"):
        Tensor.ones(2).stack(Tensor.ones(3))


def test_stack_takes_one_sequence_and_0d_tensors() -> None:
    arrs = [data((2, 3), seed=i) for i in range(3)]
    for seq in (tuple(tensor(a) for a in arrs), [tensor(a) for a in arrs]):
        check(Tensor.stack(seq, dim=1), np.stack(arrs, axis=1))  # type: ignore[arg-type]  # a sequence as self
    check(Tensor.stack(Tensor(3.5), Tensor(3.5)), [3.5, 3.5])


def test_squeeze_reshape_and_flip_edge_cases_match_torch() -> None:
    """A 0-d tensor squeezes at dim 0 or -1 (as torch); reshape keeps an axis for None; flip names each axis once."""
    x = data((4, 3, 6, 6))
    for dim in (0, -1):
        check(Tensor(2.5).squeeze(dim), torch.tensor(2.5).squeeze(dim))
    check(tensor(x).reshape(None, None, 36), x.reshape(4, 3, 36))
    check(tensor(x).reshape((None, -1, 6)), x.reshape(4, -1, 6))
    check(tensor(x[:1, :1, :1, :1]).reshape([]), x[0, 0, 0, 0])  # an empty shape is 0-d
    with pytest.raises(ValueError, match=r"^reshape: cannot reshape \(4, 3, 6, 6\) \(432 elements\) to \(\)"):
        tensor(x).reshape([])
    with pytest.raises(IndexError, match=r"^reshape: None keeps an axis, but \(None, None, None\) has more axes"):
        Tensor.ones(2, 3).reshape(None, None, None)
    with pytest.raises(RuntimeError, match=r"^flip: each axis can appear once, got \(0, 0\)"):
        Tensor.ones(3, 4).flip(0, 0)


@pytest.mark.parametrize(("sizes", "dim"), [(2, 0), (3, 1), ([1, 4], 0), ([2, 0, 1], 1), (10, 0)])
def test_split(sizes: Any, dim: int) -> None:
    x = data((5, 3))
    ours, ref = tensor(x).split(sizes, dim), torch.from_numpy(x).split(sizes, dim)
    assert isinstance(ours, tuple)
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref, strict=True):
        check(a, b)


def test_split_errors() -> None:
    with pytest.raises(ValueError, match=r"split: sizes \[1, 1\] must be non-negative and sum to 3"):
        Tensor.ones(3).split([1, 1])


@pytest.mark.parametrize(("n", "chunks"), [(11, 6), (12, 6), (13, 6), (5, 10), (1, 3)])
def test_chunk(n: int, chunks: int) -> None:
    x = data((n, 2))
    ours, ref = tensor(x).chunk(chunks), torch.from_numpy(x).chunk(chunks)
    assert isinstance(ours, list)
    assert [t.shape for t in ours] == [tuple(t.shape) for t in ref]
    check(ours[-1], ref[-1])
    assert [t.shape for t in Tensor.ones(0).chunk(3)] == [(0,)] * 3  # tinygrad keeps `chunks` empty pieces


@pytest.mark.parametrize(("dim", "size", "step"), [(0, 2, 1), (1, 3, 2), (1, 4, 1), (-1, 1, 3), (0, 0, 2), (2, 2, 2)])
def test_unfold(dim: int, size: int, step: int) -> None:
    x = data((3, 4, 2))
    check(tensor(x).unfold(dim, size, step), torch.from_numpy(x).unfold(dim, size, step))


def test_unfold_errors() -> None:
    with pytest.raises(ValueError, match=r"unfold: need 0 <= size <= 3 and step > 0 on dim 0, got size=4"):
        Tensor.ones(3).unfold(0, 4, 1)


@pytest.mark.parametrize(("dim", "sizes"), [(1, (2, -1)), (0, (1, 3)), (-1, (4, 1))])
def test_unflatten(dim: int, sizes: tuple[int, ...]) -> None:
    x = data((3, 4))
    check(tensor(x).unflatten(dim, sizes), torch.from_numpy(x).unflatten(dim, sizes))


# *** triangles and diagonals ***


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.bool], ids=["float32", "bool"])
@pytest.mark.parametrize("diagonal", [-1, 2])
@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 3), (0, 2)])
def test_tril_triu(dt: DType, diagonal: int, shape: tuple[int, ...]) -> None:
    x = data(shape, dt)
    check(tensor(x).tril(diagonal), np.tril(x, diagonal), dt)
    check(tensor(x).triu(diagonal), np.triu(x, diagonal), dt)


@pytest.mark.parametrize("dt", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("n", [0, 1, 4])
def test_diag(dt: DType, n: int) -> None:
    x = data((n,), dt)
    check(tensor(x).diag(), np.diag(x), dt)
    with pytest.raises(ValueError, match=r"diag: expected a 1-d tensor, got shape \(2, 2\)"):
        Tensor.ones(2, 2).diag()


@pytest.mark.parametrize(
    ("offset", "dim1", "dim2"), [(0, 0, 1), (1, 0, 1), (-1, 1, 2), (2, 2, 0), (-5, 0, 1), (9, -1, 0)]
)
def test_diagonal(offset: int, dim1: int, dim2: int) -> None:
    x = data((3, 4, 5))
    check(tensor(x).diagonal(offset, dim1, dim2), torch.from_numpy(x).diagonal(offset, dim1, dim2))


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid(indexing: str) -> None:
    a, b, c = data((3,)), data((2,), seed=1), data((4,), seed=2)
    ours = tensor(a).meshgrid(tensor(b), tensor(c), indexing=indexing)
    ref = torch.meshgrid(torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c), indexing=indexing)
    assert isinstance(ours, tuple)
    for o, r in zip(ours, ref, strict=True):
        check(o, r)
    assert [t.shape for t in Tensor(3).meshgrid(Tensor([1, 2]))] == [(1, 2), (1, 2)]


@pytest.mark.parametrize(
    ("start", "stop", "steps", "dt"),
    [(0, 10, 5, None), (-1, 1, 7, None), (1, 0, 4, None), (3, 3, 1, None), (0, 1, 0, None), (0, 1, 4, dtypes.int32)],
)
def test_linspace(start: float, stop: float, steps: int, dt: DType | None) -> None:
    ref = torch.linspace(start, stop, steps, dtype=torch.int32 if dt == dtypes.int32 else torch.float32)
    check(Tensor.linspace(start, stop, steps, dtype=dt), ref, dt or dtypes.float32)
    assert Tensor.linspace(0, 1, 3).numpy()[-1] == 1.0  # the end is exact


@pytest.mark.parametrize(
    ("n", "m", "dt"), [(3, None, None), (2, 4, dtypes.int32), (4, 2, dtypes.bool), (0, None, None)]
)
def test_eye(n: int, m: int | None, dt: DType | None) -> None:
    check(Tensor.eye(n, m, dtype=dt), np.eye(n, m).astype(NP_DTYPES[dt or dtypes.float32]), dt or dtypes.float32)


# *** gather and scatter ***


@pytest.mark.parametrize("dt", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(("dim", "index_shape"), [(0, (2, 4)), (-1, (2, 6)), (0, (0, 4))])
def test_gather(dt: DType, dim: int, index_shape: tuple[int, ...]) -> None:
    x = data((3, 4), dt)
    idx = np.random.default_rng(3).integers(0, x.shape[dim], size=index_shape)
    check(
        tensor(x).gather(dim, Tensor(idx.astype(np.int32))), torch.from_numpy(x).gather(dim, torch.from_numpy(idx)), dt
    )


def test_gather_errors() -> None:
    with pytest.raises(TypeError, match="gather: index must be an integer tensor"):
        Tensor.ones(3).gather(0, Tensor([0.0]))
    with pytest.raises(ValueError, match=r"gather: index shape \(4, 1\) does not fit self \(3, 2\)"):
        Tensor.ones(3, 2).gather(1, Tensor.zeros(4, 1, dtype=dtypes.int32))


def _unique_index(shape: tuple[int, ...], size: int, dim: int, seed: int) -> np.ndarray:
    """Scatter indices without duplicates along dim (torch leaves duplicates unspecified)."""
    rng = np.random.default_rng(seed)
    lines = np.moveaxis(np.zeros(shape, dtype=np.int64), dim, -1)
    for pos in np.ndindex(lines.shape[:-1]):
        lines[pos] = rng.permutation(size)[: shape[dim]]
    return np.moveaxis(lines, -1, dim)


@pytest.mark.parametrize("dt", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(("dim", "index_shape"), [(0, (2, 3)), (1, (3, 2)), (1, (2, 0))])
def test_scatter(dt: DType, dim: int, index_shape: tuple[int, ...]) -> None:
    x, src = data((3, 4), dt), data((3, 3), dt, seed=1)
    idx = _unique_index(index_shape, x.shape[dim], dim, seed=2)
    ref = torch.from_numpy(x).scatter(dim, torch.from_numpy(idx), torch.from_numpy(src))
    check(tensor(x).scatter(dim, Tensor(idx.astype(np.int32)), tensor(src)), ref, dt)


@pytest.mark.parametrize("reduce", ["add", "multiply"])
def test_scatter_reduce_arg_with_a_constant(reduce: str) -> None:
    x, idx = data((2, 4)), np.array([[2, 2], [3, 0]])
    ref = torch.from_numpy(x).scatter(1, torch.from_numpy(idx), 1.5, reduce=reduce)
    check(tensor(x).scatter(1, Tensor(idx.astype(np.int32)), 1.5, reduce=reduce), ref)  # type: ignore[arg-type]


def test_scatter_reduce_arg_takes_only_a_scalar_src() -> None:
    """As the reference: a tensor src with reduce= raises TypeError (before the axis check) and names scatter_reduce."""
    with pytest.raises(TypeError, match=r"^scatter: reduce='multiply' takes a scalar src, got a Tensor: use scatter_r"):
        Tensor.ones(4).scatter(1, Tensor([0]), Tensor.ones(4), reduce="multiply")


def test_scatter_duplicates_last_wins() -> None:
    out = Tensor.zeros(5).scatter(0, Tensor([1, 3, 1, 1]), Tensor([1.0, 2.0, 3.0, 4.0]))
    check(out, [0.0, 4.0, 0.0, 2.0, 0.0])


def test_scatter_errors() -> None:
    with pytest.raises(TypeError, match=r"scatter: src dtype dtypes\.int does not match self's dtypes\.float\b"):
        Tensor.zeros(3).scatter(0, Tensor([0]), Tensor([1]))
    with pytest.raises(ValueError, match="scatter: reduce must be None, 'add' or 'multiply'"):
        Tensor.zeros(3).scatter(0, Tensor([0]), 1.0, reduce="max")  # type: ignore[arg-type]


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce(reduce: str, include_self: bool) -> None:
    x, src = data((3, 5)), data((4, 5), seed=1)
    idx = np.random.default_rng(5).integers(0, 3, size=(4, 5))
    idx[:, 4] = 0  # column 4: every source lands in row 0; rows 1 and 2 of it keep self
    ref = torch.from_numpy(x).scatter_reduce(
        0, torch.from_numpy(idx), torch.from_numpy(src), reduce, include_self=include_self
    )
    out = tensor(x).scatter_reduce(0, Tensor(idx.astype(np.int32)), tensor(src), reduce, include_self=include_self)  # type: ignore[arg-type]
    check(out, ref)


def test_scatter_reduce_int_mean_is_float_like_tinygrad() -> None:
    out = Tensor([1, 2, 3, 4]).scatter_reduce(0, Tensor([0, 0, 1]), Tensor([-5, 2, 4]), reduce="mean")
    check(out, [-2 / 3, 3.0, 3.0, 4.0], dtypes.float32)


@pytest.mark.parametrize("dt", DTYPES, ids=DTYPE_IDS)
def test_masked_fill(dt: DType) -> None:
    x, mask = data((3, 4), dt), data((1, 4), dtypes.bool, seed=1)
    value = True if dt == dtypes.bool else 7
    ref = torch.from_numpy(x).masked_fill(torch.from_numpy(mask), value)
    check(tensor(x).masked_fill(tensor(mask), value), ref, dt)
    check(tensor(x).masked_fill(tensor(mask), tensor(x[0])), np.where(mask, x[0], x), dt)


@pytest.mark.parametrize("dt", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(("shape", "mask_shape"), [((3, 4), (3, 4)), ((3, 4), (4,)), ((0, 2), (0, 2))])
def test_masked_select(dt: DType, shape: tuple[int, ...], mask_shape: tuple[int, ...]) -> None:
    x, mask = data(shape, dt), data(mask_shape, dtypes.bool, seed=1)
    ref = torch.from_numpy(x).masked_select(torch.from_numpy(mask))
    check(tensor(x).masked_select(tensor(mask)), ref, dt)


def test_masked_select_with_size_pads_or_truncates() -> None:
    t = Tensor([[0, 1, 2], [3, 4, 5]])
    check(t.masked_select(t > 2, size=5, fill_value=-1), [3, 4, 5, -1, -1], dtypes.int32)
    check(t.masked_select(t > 0, size=2), [1, 2], dtypes.int32)


@pytest.mark.parametrize("num_classes", [-1, 5])
@pytest.mark.parametrize("shape", [(4,), (2, 3), (0,)])
def test_one_hot(num_classes: int, shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(0).integers(0, 4, size=shape)
    if num_classes == -1 and not x.size:
        pytest.skip("num_classes=-1 needs values")
    ref = F.one_hot(torch.from_numpy(x), num_classes)
    check(Tensor(x.astype(np.int32)).one_hot(num_classes), ref, dtypes.int32)
    with pytest.raises(TypeError, match="one_hot: expected an integer tensor"):
        Tensor([1.0]).one_hot(2)


# *** advanced indexing ***

IDX = np.array([[0, 2], [1, -1]])
INDICES: list[Any] = [
    [2, 0, 2],
    ([0, 2], [1, 3]),
    (slice(None), [1, 1, 0]),
    ([0, 1], slice(None), [0, 4]),  # not adjacent: the index axes go first
    (0, slice(None), [0, 1]),  # ints are basic (torch and tinygrad, unlike numpy)
    ([0], 1, [1, 2]),
    ([0, 1], None, [0, 1]),
    (Ellipsis, [-1, 0]),
    (None, slice(1, 3), IDX),
    (slice(None, None, -1), IDX, slice(0, 5, 2)),
    (IDX, IDX[::-1]),
    ([[True, False, True, True], [False, False, True, False], [True, True, False, False]],),
    (np.ones((3, 4, 5), dtype=bool) & (np.arange(5) % 2 == 0),),
    (slice(None), [True, False, True, True], 2),
    ([],),
]


def torch_index(i: Any) -> Any:
    if not isinstance(i, (list, np.ndarray)):
        return i
    arr = np.asarray(i)
    return torch.from_numpy(np.ascontiguousarray(arr.astype(np.int64) if arr.size == 0 else arr))


@pytest.mark.parametrize("index", INDICES, ids=range(len(INDICES)))
def test_getitem_with_tensor_indices(index: Any) -> None:
    x = data((3, 4, 5))
    ref, ref_index = torch.from_numpy(x), tuple(torch_index(i) for i in index)
    if isinstance(index[0], slice) and index[0].step == -1:  # torch has no negative steps: flip first
        ref, ref_index = ref.flip(0), (slice(None), *ref_index[1:])
    ours = tuple(
        Tensor(i if i.dtype == np.bool_ else i.astype(np.int32)) if isinstance(i, np.ndarray) else i for i in index
    )
    check(getitem(tensor(x), ours), ref[ref_index])


@pytest.mark.parametrize("dt", DTYPES, ids=DTYPE_IDS)
def test_getitem_tensor_index_dtypes_and_0d_index(dt: DType) -> None:
    x = data((4, 3), dt)
    check(getitem(tensor(x), Tensor([3, 0, 3])), x[[3, 0, 3]], dt)
    check(getitem(tensor(x), (Tensor([1]).reshape(()), Tensor([2, 0]))), x[1, [2, 0]], dt)


def test_getitem_index_errors() -> None:
    with pytest.raises(IndexError, match=r"boolean index of shape \(3, 3\) does not match axes 0..1 of shape \(3, 4\)"):
        getitem(Tensor.ones(3, 4), [[True] * 3] * 3)
    with pytest.raises(IndexError, match="index arrays must hold ints or bools"):
        getitem(Tensor.ones(3), [0.5])
    with pytest.raises(IndexError, match="tensor indices must be integers or bools"):
        getitem(Tensor.ones(3), Tensor([0.5]))
    with pytest.raises(IndexError, match="cannot be broadcast together"):
        getitem(Tensor.ones(3, 3), ([0, 1], [0, 1, 2]))
    with pytest.raises(IndexError, match="too many indices"):
        getitem(Tensor.ones(3), ([0], [0]))


# *** setitem ***

SET_CASES: list[tuple[Any, Any]] = [
    ((1, 2), 5.0),
    ((slice(None), 1), np.array([7.0, 8.0, 9.0])),
    ((slice(1, 3), slice(0, 4, 3)), -1.0),
    ((slice(None, None, -1), 0), np.array([1.0, 2.0, 3.0])),
    ((Ellipsis, slice(0, 4, 2)), np.array([[1.0], [2.0], [3.0]])),
    ((slice(2, 0, -2), slice(None, None, -3)), np.array([[4.0, 5.0]])),
    (([0, 2], [1, 3]), np.array([10.0, 20.0])),
    ((slice(None), [3, 0]), np.array([[1.0, 2.0]])),
    (([2, 2, 0],), np.array([[1.0] * 4, [2.0] * 4, [3.0] * 4])),  # duplicates: the last wins
    ((np.array([[True, False, True, False], [False] * 4, [True] * 4]),), 0.5),
    ((None, 1), np.array([[6.0, 6.0, 6.0, 6.0]])),
]


@pytest.mark.parametrize(("index", "value"), SET_CASES, ids=range(len(SET_CASES)))
def test_setitem_matches_numpy(index: Any, value: Any) -> None:
    x = data((3, 4))
    expected = x.copy()
    expected[index] = value
    t = tensor(x).contiguous().realize()
    view_before = t[0:2]  # shares memory: sees the write, like a torch view
    t[index] = Tensor(np.asarray(value, dtype=np.float32)) if isinstance(value, np.ndarray) else value
    check(t, expected)
    check(view_before, expected[0:2])


def test_setitem_on_lazy_and_constant_tensors() -> None:
    lazy = Tensor.arange(6).reshape(2, 3) * 2
    lazy[1, 1:] = 0
    check(lazy, [[0, 2, 4], [6, 0, 0]], dtypes.int32)
    const = Tensor.zeros(2, 3)
    const[:, ::2] = 1.0
    const[0, 1] = 2.0
    check(const, [[1.0, 2.0, 1.0], [1.0, 0.0, 1.0]])


def test_setitem_twice_in_a_row_keeps_both_writes() -> None:
    t = Tensor.zeros(4).contiguous().realize()
    t[0] = 1.0
    t[1] = 2.0
    t[[3]] = 4.0
    check(t, [1.0, 2.0, 0.0, 4.0])


def test_assign_into_a_view_after_a_pending_write() -> None:
    t = Tensor.zeros(4).contiguous().realize()
    t[0:1].assign(Tensor([1.0]))
    t[1:2].assign(Tensor([2.0]))
    check(t, [1.0, 2.0, 0.0, 0.0])


def test_setitem_writes_through_a_view_into_its_base() -> None:
    base = Tensor.zeros(2, 3).contiguous().realize()
    row = base[1]
    row[0:2] = Tensor([5.0, 6.0])
    check(base, [[0.0, 0.0, 0.0], [5.0, 6.0, 0.0]])


def test_setitem_errors() -> None:
    t = Tensor.zeros(3).contiguous().realize()
    with pytest.raises(
        TypeError, match=r"setitem: value dtype dtypes\.int does not match the target's dtypes\.float\b"
    ):
        t[0:1] = Tensor([1])
    with pytest.raises(ValueError, match=r"setitem: cannot broadcast shape \(2,\) to \(3,\)"):
        t[:] = Tensor([1.0, 2.0])


# *** gradients flow through the compositions ***

GRAD_CASES: list[tuple[str, Any, Any]] = [
    ("cat", lambda a: a.cat(a * 2, dim=1), lambda a: torch.cat([a, a * 2], 1)),
    ("reflect", lambda a: pad(a, (2, 1), "reflect"), lambda a: F.pad(a[None], (2, 1), mode="reflect")[0]),
    ("gather", lambda a: a.gather(1, Tensor([[0, 0], [2, 1]])), lambda a: a.gather(1, torch.tensor([[0, 0], [2, 1]]))),
    ("getitem", lambda a: getitem(a, ([1, 0, 1], [2, 2, 0])), lambda a: a[[1, 0, 1], [2, 2, 0]]),
    ("roll", lambda a: a.roll(1, 1), lambda a: a.roll(1, 1)),
    ("unfold", lambda a: a.unfold(1, 2, 1), lambda a: a.unfold(1, 2, 1)),
    ("diagonal", lambda a: a.diagonal(), lambda a: a.diagonal()),
    ("masked_select", lambda a: a.masked_select(a > 2), lambda a: a.masked_select(a > 2)),
]


@pytest.mark.parametrize(("name", "ours", "ref"), GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_backward_matches_torch(name: str, ours: Any, ref: Any) -> None:
    x = data((2, 3))
    t, tt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, out_ref = ours(t), ref(tt)
    weights = np.arange(1, out.numel() + 1, dtype=np.float32).reshape(out.shape)  # distinct weight per output
    (out * Tensor(weights)).sum().backward()
    (out_ref * torch.from_numpy(weights)).sum().backward()
    assert t.grad is not None
    check(t.grad, tt.grad)


# *** the interpreter backend ***


def test_python_device() -> None:
    x = data((2, 3))
    t = tensor(x, "PYTHON")
    check(t.cat(t, dim=1), np.concatenate([x, x], axis=1))
    check(pad(t, (1, 1), "reflect"), np.pad(x, ((0, 0), (1, 1)), mode="reflect"))
    check(t.gather(1, Tensor([[2, 0], [1, 1]], device="PYTHON")), np.take_along_axis(x, np.array([[2, 0], [1, 1]]), 1))
    check(getitem(t, (Tensor([1, 0], device="PYTHON"), slice(None, None, 2))), x[[1, 0], ::2])
    u = Tensor.zeros(2, 3, device="PYTHON").contiguous().realize()
    u[[1, 0], 2] = Tensor([1.0, 2.0], device="PYTHON")
    u[0, :2] = 3.0
    check(u, [[3.0, 3.0, 2.0], [0.0, 0.0, 1.0]])


@pytest.mark.parametrize(
    "sizes", [(16, 8), ((16, 8),), ([4, 4, 8],), (128,), (2, 1, 64), (16, -1), (None, 16), (0 + 1, 128)]
)
def test_reshape_plain_sizes_fast_path_matches_checked_path(sizes: tuple[Any, ...]) -> None:
    """Non-negative int sizes whose product fits take reshape's fast path: the same node as sizes with a -1 or None
    spelling the same shape through the checked path, and the same values."""
    x = Tensor.arange(128).reshape(8, 16)
    got = x.reshape(*sizes)
    target = got.shape
    checked = x.reshape(-1, *target[1:]) if len(target) > 1 else x.reshape(-1)
    assert got.uop is checked.uop
    np.testing.assert_array_equal(got.numpy(), np.arange(128).reshape(target))


@pytest.mark.parametrize(
    ("sizes", "error"), [((16, 9), ValueError), ((True, 128), TypeError), ((4, -4, -8), ValueError)]
)
def test_reshape_fast_path_leaves_errors_to_the_checks(sizes: tuple[Any, ...], error: type[Exception]) -> None:
    with pytest.raises(error, match=r"reshape|shape"):
        Tensor.arange(128).reshape(8, 16).reshape(*sizes)
