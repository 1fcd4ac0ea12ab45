"""Tensor methods: linear algebra (qr, svd, newton_schulz) on the last two axes, batched over the others.

Each is a fixed sequence of ordinary Tensor ops (no data-dependent loop count), so results stay lazy, fuse, run in a
TinyJit and have gradients: QR by Householder reflections with a row mask instead of slicing, SVD by QR followed by
one-sided (Hestenes) Jacobi rotations applied to all disjoint column pairs at once in round-robin order.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from fusegrad.dtype import dtypes
from fusegrad.mixin import traced

if TYPE_CHECKING:
    from fusegrad.tensor import Tensor

# one-sided Jacobi sweeps: convergence is quadratic, float32 settles within 4-5 sweeps for well-scaled matrices
JACOBI_SWEEPS = 5


def _check_matrix(x: Tensor, op: str) -> tuple[int, int]:
    if x.ndim < 2:
        raise ValueError(f"{op}: expected a matrix (at least 2 dims), got shape {x.shape}")
    if not dtypes.is_float(x.dtype):
        raise TypeError(f"{op}: expected a float tensor, got {x.dtype}")
    return x.shape[-2], x.shape[-1]


def _eye_like(x: Tensor, n: int) -> Tensor:
    """The (n, n) identity broadcast over x's batch axes, in x's dtype."""
    index = type(x).arange(n, device=x.device)
    return (index.unsqueeze(-1) == index).cast(x.dtype).expand(*x.shape[:-2], n, n)


def _norm(squares: Tensor) -> Tensor:
    """sqrt(squares) with a zero (not NaN) gradient at 0: a zero column's norm would otherwise poison backward."""
    zero = squares == 0
    return zero.where(0.0, zero.where(1.0, squares).sqrt())


def _householder_step(q: Tensor, r: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Zero r[..., k+1:, k] with the reflection H = I - beta v v^T (v zero above row k): r -> H r, q -> q H.

    Like LAPACK (and so numpy and torch), r[k, k] becomes -sign(r[k, k]) * |column| and a column already zero below
    the diagonal is left alone (beta = 0), so the signs of R match theirs."""
    m = r.shape[-2]
    row = type(r).arange(m, device=r.device)
    column = r[..., :, k]  # (..., m)
    below = (row > k).where(column, 0)
    head = column[..., k : k + 1]  # (..., 1): the diagonal entry
    tail_squares = below.square().sum(-1, keepdim=True)
    tail_norm, norm = _norm(tail_squares), _norm(tail_squares + head.square())
    sign = (head >= 0).where(1.0, -1.0)
    v = below + (row == k).where(head + sign * norm, 0)  # x - alpha e_k with alpha = -sign * norm
    v_sq = v.square().sum(-1, keepdim=True)
    beta = (tail_norm == 0).where(0.0, 2 / (tail_norm == 0).where(1.0, v_sq))  # (..., 1)
    v_col = v.unsqueeze(-1)  # (..., m, 1)
    r = r - (beta.unsqueeze(-1) * v_col) @ (v_col.transpose(-2, -1) @ r)
    q = q - (q @ v_col) @ (beta.unsqueeze(-1) * v_col).transpose(-2, -1)
    return q, r


def _jacobi_round(state: Tensor, rows: int, half: int) -> Tensor:
    """One round on `state` = [W; V] (rows of W first): rotate each column pair (i, half + i) so the two columns of W
    become orthogonal (V gets the same rotations), then move the columns to the next round-robin pairing."""
    left, right = state[..., :half], state[..., half:]  # (..., rows + n, half) each
    # the three dot products of each pair over W's rows, in one reduction: |l|^2, |r|^2, l . r
    dots = (left.cat(right, left, dim=-1) * left.cat(right, right, dim=-1))[..., :rows, :].sum(-2, keepdim=True)
    alpha, beta, gamma = dots[..., :half], dots[..., half : 2 * half], dots[..., 2 * half :]  # (..., 1, half)
    rotate = gamma != 0
    zeta = (beta - alpha) / (2 * rotate.where(gamma, 1.0))
    t = (zeta >= 0).where(1.0, -1.0) / (
        zeta.abs() + (1 + zeta.square()).sqrt()
    )  # the smaller root of t^2 + 2 zeta t = 1
    t = rotate.where(t, 0.0)
    c = 1 / (1 + t.square()).sqrt()
    s = c * t
    new_left, new_right = c * left - s * right, s * left + c * right
    if half == 1:  # two columns: the one pair meets every round
        return new_left.cat(new_right, dim=-1)
    # round robin: top [0, 1, .., h-1] and bottom [h, .., 2h-1] -> top [0, h, 1, .., h-2], bottom [h+1, .., 2h-1, h-1]
    top = new_left[..., :1].cat(new_right[..., :1], new_left[..., 1 : half - 1], dim=-1)
    bottom = new_right[..., 1:].cat(new_left[..., half - 1 :], dim=-1)
    return top.cat(bottom, dim=-1)


def _sort_columns(w: Tensor, v: Tensor, padded: bool) -> tuple[Tensor, Tensor, Tensor]:
    """(w's columns by descending norm, the norms, v's columns in the same order); a padding column goes last."""
    norms = _norm(w.square().sum(-2))  # (..., n)
    key = (v[..., -1, :] == 1).where(-1.0, norms) if padded else norms  # the padding column keeps e_last in v
    order = key.sort(-1, descending=True)[1]
    index = order.unsqueeze(-2)
    w = w.gather(-1, index.expand(*w.shape))
    v = v.gather(-1, index.expand(*v.shape))
    return w, norms.gather(-1, order), v


def _svd_tall(x: Tensor, full_matrices: bool) -> tuple[Tensor, Tensor, Tensor]:
    """SVD of x with m >= n rows: x = Q R, Jacobi on the top (n, n) block of R, U = Q diag(U_R, I)."""
    m, n = x.shape[-2], x.shape[-1]
    q, r = LinalgMixin.qr(x)
    w = r[..., :n, :]  # (..., n, n)
    pad = n % 2  # rounds pair columns: an odd count gets a zero column, which no rotation touches
    if pad:
        w = w.pad((*[None] * (w.ndim - 1), (0, 1)))
    state = w.cat(_eye_like(x, n + pad), dim=-2)  # [W; V], W = x V kept as the rotations apply to both
    for _ in range(JACOBI_SWEEPS * (n + pad - 1)):  # one sweep meets every pair once: n + pad - 1 rounds
        state = _jacobi_round(state, n, (n + pad) // 2).contiguous()  # read by the next round 4 times: store it
    w, s, v = _sort_columns(state[..., :n, :], state[..., n:, :], bool(pad))
    w, s, v = w[..., :n], s[..., :n], v[..., :n, :n]
    u_r = w / (s == 0).where(1.0, s).unsqueeze(-2)  # columns of W are s_i u_i
    u_block = u_r.pad((*[None] * (u_r.ndim - 2), (0, m - n), (0, m - n)))
    filler = _eye_like(x, m) - _eye_like(x, n).pad((*[None] * (x.ndim - 2), (0, m - n), (0, m - n)))
    u = q @ (u_block + filler)  # (..., m, m)
    return (u if full_matrices else u[..., :n]), s, v.transpose(-2, -1)


class LinalgMixin:
    """Mixed into Tensor; see the module docstring."""

    __slots__ = ()

    @traced
    def qr(self: Tensor) -> tuple[Tensor, Tensor]:
        """Q, R with self = Q @ R, Q orthogonal and R upper triangular: (..., m, n) -> Q (..., m, m), R (..., m, n)
        (numpy's mode="complete"; signs as LAPACK's).

        Returns:
            (Q, R).

        Raises:
            ValueError: fewer than 2 dims.
            TypeError: a dtype that is not float.

        Examples:
            >>> q, r = Tensor([[3.0, 1.0], [4.0, 2.0]]).qr()
            >>> np.allclose((q @ r).numpy(), [[3.0, 1.0], [4.0, 2.0]], atol=1e-5), abs(r[1, 0].item()) < 1e-6
            (True, True)
        """
        m, n = _check_matrix(self, "qr")
        q, r = _eye_like(self, m), self
        for k in range(min(m - 1, n)):
            q, r = _householder_step(q, r, k)
        return q, r

    @traced
    def svd(self: Tensor, full_matrices: bool = True) -> tuple[Tensor, Tensor, Tensor]:
        """U, S, Vh with self = U[..., :k] @ diag(S) @ Vh[..., :k, :], k = min(m, n), S descending:
        (..., m, n) -> U (..., m, m), S (..., k), Vh (..., n, n); full_matrices=False: U (..., m, k), Vh (..., k, n).
        Like numpy.linalg.svd up to the signs of paired singular vectors.

        Args:
            full_matrices: square U and Vh (False: only the k columns/rows that multiply S).

        Returns:
            (U, S, Vh).

        Raises:
            ValueError: fewer than 2 dims.
            TypeError: a dtype that is not float.

        Examples:
            >>> u, s, vh = Tensor([[3.0, 0.0], [0.0, -2.0], [0.0, 0.0]]).svd(full_matrices=False)
            >>> [round(v, 4) for v in s.tolist()], u.shape, vh.shape
            ([3.0, 2.0], (3, 2), (2, 2))
        """
        m, n = _check_matrix(self, "svd")
        if m >= n:
            return _svd_tall(self, full_matrices)
        u, s, vh = _svd_tall(self.transpose(-2, -1), full_matrices)  # x^T = U S Vh -> x = Vh^T S U^T
        return vh.transpose(-2, -1), s, u.transpose(-2, -1)

    @traced
    def newton_schulz(self: Tensor, steps: int, params: tuple[int, ...], eps: float = 1.0e-7) -> Tensor:
        """Newton-Schulz iteration of an odd matrix polynomial: X <- sum_i params[i] (X X^T)^i X, `steps` times,
        from X = self / |self|_F (a wide view of a tall matrix). With params (3/2, -1/2) (or Muon's quintic
        (3.4445, -4.7750, 2.0315)) it tends to the orthogonal factor U Vh of self. (..., m, n) -> (..., m, n).

        Args:
            steps: how many iterations.
            params: the polynomial's coefficients, lowest power first.
            eps: added to the norm before dividing.

        Returns:
            (..., m, n), close to orthogonal after enough steps.

        Raises:
            ValueError: fewer than 2 dims.

        Examples:
            >>> x = Tensor([[2.0, 0.0], [0.0, 0.5]]).newton_schulz(20, (1.5, -0.5))
            >>> [round(v, 3) for v in x.flatten().tolist()]  # the orthogonal factor: the identity
            [1.0, 0.0, 0.0, 1.0]
        """
        m, n = _check_matrix(self, "newton_schulz")
        if m > n:  # iterate on the wide shape: X X^T is then the smaller Gram matrix
            return LinalgMixin.newton_schulz(self.transpose(-2, -1), steps, params, eps).transpose(-2, -1)
        x = self / (self.square().sum(axis=(-2, -1), keepdim=True).sqrt() + eps)
        for _ in range(steps):
            gram = x @ x.transpose(-2, -1)  # (..., m, m)
            powers = [x]
            for _ in params[1:]:
                powers.append(gram @ powers[-1])  # (X X^T)^i X
            x = functools.reduce(
                lambda acc, term: acc + term, [p * power for p, power in zip(params, powers, strict=True)]
            )
        return x
