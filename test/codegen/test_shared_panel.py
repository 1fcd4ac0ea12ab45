"""codegen/opt.py shared_panel_opts: a conv weight gradient tiled along the output channels, the output gradient's
panel packed once per channel tile and shared by every input channel and tap; and the C renderer's subscripts of the
tile's gated row loads (renderer/cstyle.py _is_strided_gather)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad.codegen import KernelInfo, to_program
from fusegrad.codegen.opt import Opt, OptOps, hand_coded_opts
from fusegrad.dtype import DType, dtypes
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import sym
from test.codegen.test_opt import (
    Case,
    check,
    conv1d_strided,
    conv2d_valid,
    data,
    glob,
    loop,
    matmul_transposed,
    red,
    run,
)

F32 = dtypes.float32


def conv2d_weight_gradient(batch: int, cin: int, cout: int, size: int, pad: int, dt: DType, *, per_image: bool) -> Case:
    """dW (cout, cin, 3, 3) of a 3x3 conv of x (batch, cin, size, size) padded by `pad`, given the output's gradient g
    (batch, cout, out, out): sum over images and positions of g[n, o, y, x] * x[n, c, y + ky - pad, x + kx - pad].
    `per_image`: the images are an output loop (one partial dW each, as the scheduler splits a long reduce: the bench
    conv's (8, 64, 64, 3, 3)); else they are reduced too (the convnet's)."""
    out = size + 2 * pad - 2
    plane, out_plane = size * size, out * out
    if per_image:
        n, o, c, ky, kx = loop(batch, 0), loop(cout, 1), loop(cin, 2), loop(3, 3), loop(3, 4)
        y, x = red(out, 5), red(out, 6)
        reduced = (y, x)
    else:
        o, c, ky, kx = loop(cout, 0), loop(cin, 1), loop(3, 2), loop(3, 3)
        n, y, x = red(batch, 4), red(out, 5), red(out, 6)
        reduced = (n, y, x)
    row, col = y + ky - pad, x + kx - pad
    x_buf, x_index = glob(2, batch * cin * plane, dt), n * (cin * plane) + c * plane + row * size + col
    inp = x_buf.index(x_index, (row >= 0) & (row < size) & (col >= 0) & (col < size)) if pad else x_buf.index(x_index)
    grad = glob(1, batch * cout * out_plane, dt).index(n * (cout * out_plane) + o * out_plane + y * out + x)
    value = (grad.load() * inp.load()).reduce(*reduced, arg=Ops.ADD)
    dest_index = o * (cin * 9) + c * 9 + ky * 3 + kx
    dest = glob(0, (batch if per_image else 1) * cout * cin * 9, dt)
    ast = UOp.sink(dest.index(n * (cout * cin * 9) + dest_index if per_image else dest_index).store(value))
    gs, xs = data((batch, cout, out, out), dt), data((batch, cin, size, size), dt, 1)
    padded = np.pad(xs.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    taps = np.stack([padded[:, :, i : i + out, j : j + out] for i in range(3) for j in range(3)], 2)  # (n, c, 9, y, x)
    expected = np.einsum("noyx,nckyx->nock", gs.astype(np.float64), taps)
    return ast, [gs, xs], (expected if per_image else expected.sum(0)).ravel()


def wide_host(monkeypatch: pytest.MonkeyPatch) -> None:
    from fusegrad.codegen import vectorize

    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vectorize.WIDE_VECTOR_BYTES)


def test_a_padded_convs_weight_gradient_packs_the_output_gradient_once_per_channel_tile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the bench conv's dW, smaller: output loops (image, co, ci, ky, kx). The innermost strided axis (ci) would pack
    # the padded input per (ci tile, ky, kx): 9 copies of it per image; along co the output gradient's panel (16
    # channels x 196 positions) is copied once per image and channel tile and serves all 64 x 9 columns, 16 rows of
    # input channels x one vector of output channels (bench 8x64x56x56: 24 -> 13.5 ms single-thread)
    wide_host(monkeypatch)
    case = conv2d_weight_gradient(2, 64, 64, 14, 1, F32, per_image=True)
    assert hand_coded_opts(graph_rewrite(case[0], sym)) == [
        Opt(OptOps.UPCAST, 2, 16), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.PACK, 2, 1)]  # fmt: skip
    check(case, F32, "CPU", None)


def test_the_convnets_weight_gradient_packs_the_output_gradient_when_it_fits() -> None:
    # images reduced too (the convnet's conv2 dW, 16 -> 32 channels on 13x13): the panel spans every image's positions
    case = conv2d_weight_gradient(4, 16, 32, 13, 0, F32, per_image=False)
    opts = hand_coded_opts(graph_rewrite(case[0], sym))
    assert [o for o in opts if o.op is OptOps.PACK] == [Opt(OptOps.PACK, 1, 1)]  # g (slot 1), outside the ci loop
    check(case, F32, "CPU", None)


@pytest.mark.parametrize("wide", [False, True])
def test_kernels_whose_panels_are_copied_alike_keep_their_tiles(monkeypatch: pytest.MonkeyPatch, wide: bool) -> None:
    # a @ b.T packs either operand once, and a conv's forward its weights: the rule leaves their tiles as they were
    from fusegrad.codegen import opt

    if wide:
        wide_host(monkeypatch)
    asts = [matmul_transposed(64, 96, 64, F32)[0], matmul_transposed(1024, 128, 384, F32)[0]]
    asts += [conv2d_valid(4, 16, 32, 13, F32)[0], conv1d_strided(2, 16, 16, 32, 2, 1, F32)[0]]
    tiles = [hand_coded_opts(graph_rewrite(ast, sym)) for ast in asts]
    monkeypatch.setattr(opt, "shared_panel_opts", lambda *_: [])
    assert tiles == [hand_coded_opts(graph_rewrite(ast, sym)) for ast in asts]


@settings(max_examples=10, deadline=None)
@given(
    st.integers(1, 2), st.sampled_from([1, 3, 16]), st.sampled_from([1, 8, 16]), st.integers(3, 9), st.integers(0, 1),
    st.booleans(), st.booleans(),
)  # fmt: skip
def test_any_weight_gradient_runs_as_the_plain_kernel(
    batch: int, cin: int, cout: int, size: int, pad: int, per_image: bool, wide: bool
) -> None:
    """Whatever the sizes and pad, the heuristic's opts give the plain kernel's result on CPU and on PYTHON: bit for
    bit where they pack a panel (this tile and the other packed tiles keep each output's sum in order), else within
    rounding (C may sum a plain reduce loop in SIMD lanes)."""
    from fusegrad.codegen import vectorize

    with pytest.MonkeyPatch.context() as monkeypatch:
        if wide:
            monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vectorize.WIDE_VECTOR_BYTES)
        ast, inputs, expected = conv2d_weight_gradient(batch, cin, cout, size, pad, F32, per_image=per_image)
        opts = tuple(hand_coded_opts(graph_rewrite(ast, sym)))
        plain = run(ast.replace(arg=KernelInfo(opts_to_apply=())), inputs, expected.size, F32, "PYTHON")
        for device in ("CPU", "PYTHON"):
            got = run(ast.replace(arg=KernelInfo(opts_to_apply=opts)), inputs, expected.size, F32, device)
            if any(o.op is OptOps.PACK for o in opts):
                np.testing.assert_array_equal(got, plain, err_msg=f"{device} {opts}")
            else:
                np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-5, err_msg=f"{device} {opts}")
        np.testing.assert_allclose(plain.astype(np.float64), expected, rtol=1e-4, atol=1e-3)


def test_an_unrolled_tiles_gated_row_loads_keep_their_64_bit_subscript(monkeypatch: pytest.MonkeyPatch) -> None:
    # the tile's rows (input channels, 784 floats apart) are an unrolled upcast loop: each row's gated load is a scalar
    # broadcast, no gather, and an int subscript there cost a 32-bit add and a sign extension per load (bench conv dW
    # 17.7 -> 12.6 ms single-thread); the panel's copy loop (a simd loop) reads unit-stride, also without the cast
    wide_host(monkeypatch)
    ast = conv2d_weight_gradient(2, 64, 64, 28, 1, F32, per_image=True)[0]
    src = to_program(ast.replace(arg=KernelInfo()), ClangRenderer()).src
    assert "#pragma GCC unroll 16" in src
    assert "?data2[" in src
    assert "[(int)" not in src
