"""fusegrad/mixin/linalg.py: qr, svd and newton_schulz against numpy (values) and torch (gradients)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fusegrad import Tensor, dtypes

SHAPES = [(3, 3), (4, 3), (3, 5), (2, 4, 3), (5, 1), (2, 2)]


def _random(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("shape", SHAPES)
def test_qr_matches_numpy_complete_mode(shape: tuple[int, ...]) -> None:
    a = _random(shape)
    q, r = Tensor(a).qr()
    expected_q, expected_r = np.linalg.qr(a, mode="complete")
    assert q.shape == expected_q.shape
    assert r.shape == expected_r.shape
    np.testing.assert_allclose(q.numpy(), expected_q, atol=1e-5)  # same signs as LAPACK
    np.testing.assert_allclose(r.numpy(), expected_r, atol=1e-5)


def test_qr_of_a_triangular_matrix_keeps_its_signs_and_finite_gradients() -> None:
    a = np.array([[-2.0, 1.0], [0.0, 3.0]], dtype=np.float32)  # nothing to reflect: LAPACK leaves it alone
    x = Tensor(a, requires_grad=True)
    q, r = x.qr()
    np.testing.assert_allclose(q.numpy(), np.eye(2), atol=1e-6)
    np.testing.assert_allclose(r.numpy(), a, atol=1e-6)
    (q.sum() + r.sum()).backward()
    assert x.grad is not None
    assert np.isfinite(x.grad.numpy()).all()


def test_qr_gradient_matches_torch() -> None:
    a, w_q, w_r = _random((3, 3)), _random((3, 3), 1), _random((3, 3), 2)
    x = Tensor(a, requires_grad=True)
    q, r = x.qr()
    ((q * Tensor(w_q)).sum() + (r * Tensor(w_r)).sum()).backward()
    tx = torch.tensor(a, requires_grad=True)
    tq, tr = torch.linalg.qr(tx, mode="complete")
    ((tq * torch.tensor(w_q)).sum() + (tr * torch.tensor(w_r)).sum()).backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-4)


@pytest.mark.parametrize(
    ("shape", "full_matrices"), [*((shape, True) for shape in SHAPES), ((4, 3), False), ((2, 3, 5), False)]
)
def test_svd_reconstructs_with_orthogonal_factors(shape: tuple[int, ...], full_matrices: bool) -> None:
    a = _random(shape)
    u, s, vh = (t.numpy() for t in Tensor(a).svd(full_matrices=full_matrices))
    expected_u, expected_s, expected_vh = np.linalg.svd(a, full_matrices=full_matrices)
    assert (u.shape, s.shape, vh.shape) == (expected_u.shape, expected_s.shape, expected_vh.shape)
    np.testing.assert_allclose(s, expected_s, atol=1e-5)  # sorted, descending
    k = s.shape[-1]
    np.testing.assert_allclose(u[..., :k] @ (s[..., None] * vh[..., :k, :]), a, atol=1e-5)
    uu, vv = np.swapaxes(u, -1, -2) @ u, vh @ np.swapaxes(vh, -1, -2)  # orthonormal columns of U, rows of Vh
    np.testing.assert_allclose(uu, np.broadcast_to(np.eye(uu.shape[-1]), uu.shape), atol=1e-5)
    np.testing.assert_allclose(vv, np.broadcast_to(np.eye(vv.shape[-1]), vv.shape), atol=1e-5)


def test_svd_of_a_rank_deficient_matrix() -> None:
    a = np.outer([1.0, 2.0, 3.0], [1.0, -1.0, 0.5]).astype(np.float32)  # rank 1
    u, s, vh = Tensor(a).svd()
    np.testing.assert_allclose(s.numpy(), np.linalg.svd(a)[1], atol=1e-5)
    k = 3
    np.testing.assert_allclose(u.numpy()[:, :k] @ (s.numpy()[:, None] * vh.numpy()), a, atol=1e-5)


def test_svd_gradient_of_singular_values_matches_torch() -> None:
    a, weights = _random((4, 3)), np.array([1.0, -2.0, 0.5], dtype=np.float32)
    x = Tensor(a, requires_grad=True)
    (x.svd()[1] * Tensor(weights)).sum().backward()
    tx = torch.tensor(a, requires_grad=True)
    (torch.linalg.svdvals(tx) * torch.tensor(weights)).sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-4)


def test_svd_gradient_of_the_orthogonal_factor_matches_torch() -> None:
    a = _random((3, 3))
    x = Tensor(a, requires_grad=True)
    u, _, vh = x.svd()
    (u @ vh).square().mul(Tensor(_random((3, 3), 3))).sum().backward()  # U Vh does not depend on the signs
    tx = torch.tensor(a, requires_grad=True)
    tu, _, tvh = torch.linalg.svd(tx)
    (tu @ tvh).square().mul(torch.tensor(_random((3, 3), 3))).sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-3)


def _newton_schulz_reference(x: torch.Tensor, steps: int, params: tuple[float, ...], eps: float) -> torch.Tensor:
    if x.shape[-2] > x.shape[-1]:
        return _newton_schulz_reference(x.transpose(-2, -1), steps, params, eps).transpose(-2, -1)
    g = x / (x.square().sum(dim=(-2, -1), keepdim=True).sqrt() + eps)
    for _ in range(steps):
        gram, term, total = g @ g.transpose(-2, -1), g, params[0] * g
        for p in params[1:]:
            term = gram @ term
            total = total + p * term
        g = total
    return g


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (2, 3, 6)])
def test_newton_schulz_matches_torch_forward_and_backward(shape: tuple[int, ...]) -> None:
    a, params = _random(shape), (3.4445, -4.7750, 2.0315)
    x = Tensor(a, requires_grad=True)
    out = x.newton_schulz(3, params)
    out.sum().backward()
    tx = torch.tensor(a, requires_grad=True)
    expected = _newton_schulz_reference(tx, 3, params, 1e-7)
    expected.sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), atol=1e-4)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-3)


def test_newton_schulz_tends_to_the_orthogonal_factor() -> None:
    a = _random((4, 4)) + 3 * np.eye(4, dtype=np.float32)  # well conditioned: the cubic iteration converges
    u, _, vh = np.linalg.svd(a)
    np.testing.assert_allclose(Tensor(a).newton_schulz(25, (1.5, -0.5)).numpy(), u @ vh, atol=1e-4)


@pytest.mark.parametrize("op", ["qr", "svd"])
def test_bad_input_names_the_op(op: str) -> None:
    with pytest.raises(ValueError, match=rf"{op}: expected a matrix \(at least 2 dims\), got shape \(3,\)"):
        getattr(Tensor([1.0, 2.0, 3.0]), op)()
    with pytest.raises(TypeError, match=rf"{op}: expected a float tensor, got {dtypes.int32}"):
        getattr(Tensor([[1, 2], [3, 4]], dtype=dtypes.int32), op)()
