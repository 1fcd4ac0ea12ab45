"""What realize repoints: outputs and explicit materialisations, never a node the scheduler stored along the way."""

from __future__ import annotations

import numpy as np

from fusegrad import Tensor


def test_gradient_after_realizing_a_layernorm_output_copy() -> None:
    x_np = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    weight = Tensor([[1.0, 2, 3, 4]] * 2)
    x = Tensor(x_np)
    out = x.layernorm()
    out.numpy()  # realizes the statistics as kernels of their own; out's graph must still reach x
    after = (out * weight).sum().gradient(x)[0].numpy()
    x2 = Tensor(x_np)
    before = (x2.layernorm() * weight).sum().gradient(x2)[0].numpy()
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-6)


def test_uploaded_array_is_copied_once() -> None:
    a = Tensor(np.arange(4, dtype=np.float32))
    (a + 1).realize()
    assert a.uop.base.op.name == "BUFFER"  # the upload (an explicit COPY) became a's memory
