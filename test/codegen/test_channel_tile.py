"""codegen/opt.py channel_tile_opts on an unpadded conv whose columns' own tile would be narrower than a vector (the
convnet's first conv: 26 columns): the tile over output channels with the weights packed, not scalars; and on AVX2
(conftest's 8 lanes) a padded conv's tile of 2 image rows x 2 columns x 2 vectors of channels."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad.codegen import KernelInfo
from fusegrad.codegen.opt import Opt, OptOps, hand_coded_opts
from fusegrad.dtype import dtypes
from fusegrad.uop.ops import graph_rewrite
from fusegrad.uop.symbolic import sym
from test.codegen.test_opt import assert_plain_bits, check, conv1d, conv2d_padded, conv2d_valid, run
from test.codegen.test_rowbuffer import softmax_ast

F32 = dtypes.float32


def test_an_unpadded_conv_of_26_columns_tiles_its_channels(monkeypatch: pytest.MonkeyPatch) -> None:
    # 26 columns take 2 lanes at most (8 channels x 2 columns of scalars: the convnet's conv1 3.3 ms single-thread);
    # 13 columns x 16 channels with the weights packed once per image run as vectors (0.33 ms)
    from fusegrad.codegen import vectorize

    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vectorize.WIDE_VECTOR_BYTES)
    case = conv2d_valid(4, 1, 16, 28, F32)
    assert hand_coded_opts(case[0]) == [
        Opt(OptOps.UPCAST, 3, 13), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.PACK, 0, 2)]  # fmt: skip
    check(case, F32, "CPU", None)
    # columns a whole narrow vector divides keep their tile along the columns (24: 8 lanes)
    assert Opt(OptOps.PACK, 0, 2) not in hand_coded_opts(conv2d_valid(4, 1, 16, 26, F32)[0])


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 2), st.sampled_from([1, 3]), st.sampled_from([8, 16, 32]), st.integers(3, 30))
def test_any_unpadded_conv_runs_bit_for_bit_as_the_plain_kernel(batch: int, cin: int, cout: int, size: int) -> None:
    """Whatever the sizes, the heuristic's opts (this tile where it applies: upcasts and a packed panel keep each
    output's sum in order) give the plain kernel's outputs bit for bit, on CPU and interpreted on PYTHON."""
    ast, inputs, expected = conv2d_valid(batch, cin, cout, size, F32)
    opts = tuple(hand_coded_opts(graph_rewrite(ast, sym)))
    plain = run(ast.replace(arg=KernelInfo(opts_to_apply=())), inputs, expected.size, F32, "PYTHON")
    np.testing.assert_allclose(plain.astype(np.float64), expected, rtol=1e-4, atol=1e-4)
    for device in ("CPU", "PYTHON"):
        got = run(ast.replace(arg=KernelInfo(opts_to_apply=opts)), inputs, expected.size, F32, device)
        if any(o.op is OptOps.UPCAST for o in opts):
            np.testing.assert_array_equal(got, plain, err_msg=f"{device} {opts}")
        else:  # a plain reduce loop: C may sum it in SIMD lanes
            np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-5, err_msg=f"{device} {opts}")


SQUARE = [Opt(OptOps.UPCAST, 2, 2), Opt(OptOps.UPCAST, 3, 2), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.PACK, 0, 2)]


def test_a_padded_conv_tiles_two_rows_of_two_columns() -> None:
    # 8x64x56x56's forward: 4 columns x 2 vectors 16.3-16.6 -> 13.5-14.0 ms as 2 rows x 2 columns (Zen 3, in turns)
    assert hand_coded_opts(graph_rewrite(conv2d_padded(2, 64, 64, 56, F32)[0], sym)) == SQUARE
    # a 1-D conv has no image rows to split (its batch is no padded axis): 4 columns
    assert hand_coded_opts(conv1d(8, 128, 64, 56, F32)[0])[0] == Opt(OptOps.UPCAST, 2, 4)


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_the_square_tile_gives_the_plain_kernels_bits(device: str) -> None:
    case = conv2d_padded(2, 3, 16, 8, F32)
    assert hand_coded_opts(graph_rewrite(case[0], sym)) == SQUARE
    assert_plain_bits(case, SQUARE, device)


def test_an_input_gradients_channels_go_outside_its_window() -> None:
    # reduce loops (ky, kx, channel) as (channel, ky, kx): 8x64x56x56's input gradient 19.7-22.3 -> 14.7-17.2 ms
    case = conv2d_padded(2, 64, 64, 56, F32, channels_inner=True)
    swaps = [Opt(OptOps.SWAP, 5, 6), Opt(OptOps.SWAP, 4, 5)]
    assert hand_coded_opts(graph_rewrite(case[0], sym)) == swaps + SQUARE
    small = conv2d_padded(2, 8, 16, 8, F32, channels_inner=True)
    opts = tuple(hand_coded_opts(graph_rewrite(small[0], sym)))
    assert opts[:2] == tuple(swaps)
    for device in ("CPU", "PYTHON"):  # the terms summed in another order: close to the plain kernel, not its bits
        got = run(small[0].replace(arg=KernelInfo(opts_to_apply=opts)), small[1], small[2].size, F32, device)
        np.testing.assert_allclose(got, small[2], rtol=1e-5, atol=1e-5)


def test_a_reduce_swap_keeps_each_sum() -> None:
    # any two loops of one reduce, swapped, give the same sums to rounding; loops of two reduces are refused
    from fusegrad.codegen.opt import apply_opts

    ast, inputs, expected = conv2d_padded(1, 4, 16, 8, F32)
    for a, b in ((4, 5), (4, 6), (5, 6)):
        got = run(
            ast.replace(arg=KernelInfo(opts_to_apply=(Opt(OptOps.SWAP, a, b),))), inputs, expected.size, F32, "CPU"
        )
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="loops of different reduces"):
        apply_opts(graph_rewrite(softmax_ast(8, 16), sym), (Opt(OptOps.SWAP, 2, 3),))  # its max's and its sum's


def test_avx512_padded_conv_tiles_two_rows_of_four_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    # AVX-512: 4 columns x 4 vectors of channels as 2 rows x 4 columns x 2 vectors (the same 16 accumulators); Zen 5,
    # 8x64x56x56 in turns: forward 4.92-5.10 -> 4.34-4.75 ms, input gradient (channels outside its window) 4.83-5.03 ->
    # 4.47-4.68
    from fusegrad.codegen import vectorize

    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vectorize.WIDE_VECTOR_BYTES)
    taller = [Opt(OptOps.UPCAST, 2, 2), Opt(OptOps.UPCAST, 3, 4), Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.PACK, 0, 2)]
    assert hand_coded_opts(graph_rewrite(conv2d_padded(2, 64, 64, 56, F32)[0], sym)) == taller
    swaps = [Opt(OptOps.SWAP, 5, 6), Opt(OptOps.SWAP, 4, 5)]
    assert hand_coded_opts(graph_rewrite(conv2d_padded(2, 64, 64, 56, F32, channels_inner=True)[0], sym)) == [
        *swaps, *taller]  # fmt: skip
    # 32 channels are 2 vectors: the tile keeps its 4 columns x 2 vectors on one row
    assert Opt(OptOps.UPCAST, 2, 2) not in hand_coded_opts(graph_rewrite(conv2d_padded(2, 64, 32, 56, F32)[0], sym))
    small = conv2d_padded(1, 1, 64, 8, F32)
    opts = [o for o in hand_coded_opts(graph_rewrite(small[0], sym)) if o.op is not OptOps.SWAP]  # SWAP: a new order
    assert opts[:3] == taller[:3]
    for device in ("CPU", "PYTHON"):
        assert_plain_bits(small, opts, device)
