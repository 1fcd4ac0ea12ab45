"""A kernel whose load of some buffer folds away still receives every other buffer at the right parameter."""

from __future__ import annotations

import pytest

from fusegrad import Context, Tensor, dtypes


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_slice_of_cat_reads_the_right_buffer(device: str) -> None:
    with Context(DEV=device):
        a = Tensor([0.0, 1, 2, 3, 4, 5]).realize()
        b = Tensor([10.0, 20.0]).realize()
        assert Tensor.cat(a, b)[0:6].tolist() == [0, 1, 2, 3, 4, 5]  # b's load is never valid here: slot 1 is unused
        assert Tensor.cat(a, b)[6:8].tolist() == [10, 20]
        assert Tensor.cat(a, b)[5:7].tolist() == [5, 10]


def test_where_of_pads_sliced_to_one_side() -> None:
    a, b = Tensor([0.0, 1, 2, 3, 4, 5]).realize(), Tensor([10.0, 20.0]).realize()
    mask = Tensor.full((2,), True, dtype=dtypes.bool).pad((6, 0))
    assert mask.where(b.pad((6, 0)), a.pad((0, 2)))[0:6].tolist() == [0, 1, 2, 3, 4, 5]


def test_reading_data_inside_a_jit_capture_raises() -> None:
    from fusegrad.engine.jit import JitError, TinyJit

    @TinyJit
    def f(x: Tensor) -> Tensor:
        y = (x * 2).realize()
        return y * y.sum().item()

    f(Tensor([1.0, 2.0]))  # the first call runs eagerly: reading is fine
    with pytest.raises(JitError, match="during a TinyJit capture"):
        f(Tensor([1.0, 2.0]))
