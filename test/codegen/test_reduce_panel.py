"""PACK across a reduce loop (a panel per step of it, codegen/opt.py pack) and reduce_panel_opts, which packs a conv
weight gradient's output gradient one image at a time when a panel of the whole reduce would be too big."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad.codegen import KernelInfo, to_program
from fusegrad.codegen.opt import Opt, OptOps, hand_coded_opts
from fusegrad.dtype import dtypes
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.uop.ops import graph_rewrite
from fusegrad.uop.symbolic import sym
from test.codegen.test_opt import check, run
from test.codegen.test_shared_panel import conv2d_weight_gradient

F32 = dtypes.float32


def test_a_long_weight_gradient_packs_one_image_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # 16 x 3 x 3 outputs over 8 images of 24 x 24: g's panel over the whole reduce (16 x 4608 floats, 288 KiB) is
    # past PACK_MAX_BYTES; one image's (36 KiB) is copied inside the image loop and read by the 9 taps' rows (the
    # convnet's conv1 dW 2.56 -> 0.45 ms single-thread)
    from fusegrad.codegen import vectorize

    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vectorize.WIDE_VECTOR_BYTES)
    case = conv2d_weight_gradient(8, 1, 16, 26, 0, F32, per_image=False)
    opts = hand_coded_opts(graph_rewrite(case[0], sym))
    # and its rows of 24 unrolled by 4: 8 x 24 x 24 steps in all (64 images: 0.25 -> 0.22 ms single-thread)
    assert opts == [Opt(OptOps.UPCAST, 3, 3), Opt(OptOps.UPCAST, 2, 3), Opt(OptOps.UPCAST, 0, 16),
                    Opt(OptOps.PACK, 4, 1), Opt(OptOps.UNROLL, 6, 4)]  # fmt: skip
    check(case, F32, "CPU", None)
    src = to_program(case[0].replace(arg=KernelInfo()), ClangRenderer()).src
    image_loop = src.index("for (long long ridx4 = 0; ridx4 < 8;")
    panel = src.index("float acc0[9216] __attribute__((aligned(32)));")  # one image, declared inside the image loop
    assert panel > image_loop


def test_more_input_channels_than_rows_keep_the_whole_reduce_panel(monkeypatch: pytest.MonkeyPatch) -> None:
    # 16 input channels x 9 taps are too many rows: a loop over them would copy each image's panel again per channel
    from fusegrad.codegen import vectorize

    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vectorize.WIDE_VECTOR_BYTES)
    opts = hand_coded_opts(graph_rewrite(conv2d_weight_gradient(8, 16, 16, 26, 0, F32, per_image=False)[0], sym))
    assert all(o.axis != 4 for o in opts if o.op is OptOps.PACK)


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 3), st.sampled_from([1, 2]), st.sampled_from([4, 8, 16]), st.integers(3, 9), st.integers(0, 1))
def test_a_panel_per_image_runs_bit_for_bit_as_the_plain_kernel(
    batch: int, cin: int, cout: int, size: int, pad: int
) -> None:
    """g packed per step of the image loop (the output channels as lanes, the taps as rows) reads the same values in
    the same order: bit for bit the plain kernel, on CPU and interpreted on PYTHON."""
    ast, inputs, expected = conv2d_weight_gradient(batch, cin, cout, size, pad, F32, per_image=False)
    opts = (Opt(OptOps.UPCAST, 3, 3), Opt(OptOps.UPCAST, 2, 3), Opt(OptOps.UPCAST, 0, cout), Opt(OptOps.PACK, 4, 1))
    plain = run(ast.replace(arg=KernelInfo(opts_to_apply=())), inputs, expected.size, F32, "PYTHON")
    np.testing.assert_allclose(plain.astype(np.float64), expected, rtol=1e-4, atol=1e-3)
    for device in ("CPU", "PYTHON"):
        got = run(ast.replace(arg=KernelInfo(opts_to_apply=opts)), inputs, expected.size, F32, device)
        np.testing.assert_array_equal(got, plain, err_msg=f"{device} {opts}")
