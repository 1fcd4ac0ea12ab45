"""A LLaMA transformer block in the reference's model-zoo idiom: RMSNorm, rotary embeddings as (cos, sin) pairs,
grouped-query attention (repeated key/value heads), a SwiGLU feed-forward, `contiguous_backward` at the block's end.
Weights from a torch twin (rotary embeddings through torch's complex numbers) via a mocked fetch; forward and
gradients against torch."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fusegrad import Tensor, helpers, nn
from fusegrad.nn.state import get_parameters, load_state_dict, torch_load

URL = "https://example.invalid/llama_block.pt"
DIM, HEADS, KV_HEADS, HIDDEN, SEQ, BATCH, EPS = 64, 4, 2, 160, 8, 2, 1e-5


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0) -> Tensor:
    """(1, end, 1, dim // 2, 2): cos and sin of position * frequency, per pair of features."""
    freqs = 1.0 / (theta ** (Tensor.arange(0, dim, 2)[: dim // 2] / dim))
    angles = Tensor.arange(end).unsqueeze(dim=1) * freqs.unsqueeze(dim=0)  # (end, dim // 2)
    return Tensor.stack(angles.cos(), angles.sin(), dim=-1).reshape(1, end, 1, dim // 2, 2)


def complex_mult(pairs: Tensor, c: Tensor, d: Tensor) -> Tensor:
    """(a + bi) * (c + di) on the last axis's (a, b) pairs."""
    a, b = pairs[..., 0:1], pairs[..., 1:2]
    return (a * c - b * d).cat(a * d + b * c, dim=-1)


def apply_rotary_emb(xq: Tensor, xk: Tensor, freqs_cis: Tensor) -> tuple[Tensor, Tensor]:
    xq, xk = xq.reshape(*xq.shape[0:-1], -1, 2), xk.reshape(*xk.shape[0:-1], -1, 2)  # (B, T, H, hd / 2, 2)
    c, d = freqs_cis[..., 0:1], freqs_cis[..., 1:2]
    return complex_mult(xq, c, d).flatten(3), complex_mult(xk, c, d).flatten(3)


def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """(B, T, kv, hd) -> (B, T, kv * n_rep, hd), each key/value head repeated for the n_rep query heads it serves."""
    bs, seqlen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return x.repeat((1, 1, 1, n_rep)).reshape(bs, seqlen, n_kv_heads * n_rep, head_dim)


class Attention:
    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, barrier: bool = False) -> None:
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, dim // n_heads
        self.barrier = barrier  # realize the projections before the rotary embedding (see BARRIERS)
        self.n_rep = n_heads // n_kv_heads
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)

    def __call__(self, x: Tensor, freqs_cis: Tensor, mask: Tensor) -> Tensor:
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).reshape(bsz, seqlen, self.n_heads, self.head_dim)
        xk = self.wk(x).reshape(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xv = self.wv(x).reshape(bsz, seqlen, self.n_kv_heads, self.head_dim)
        if self.barrier:
            xq, xk = xq.contiguous(), xk.contiguous()
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
        keys, values = repeat_kv(xk, self.n_rep), repeat_kv(xv, self.n_rep)
        xq, keys, values = xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2)  # (B, H, T, hd)
        attn = xq.scaled_dot_product_attention(keys, values, mask).transpose(1, 2)
        return self.wo(attn.reshape(bsz, seqlen, -1))


class FeedForward:
    def __init__(self, dim: int, hidden_dim: int) -> None:
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def __call__(self, x: Tensor) -> Tensor:
        return self.w2(self.w1(x).silu() * self.w3(x))  # SwiGLU


class TransformerBlock:
    def __init__(
        self, dim: int, hidden_dim: int, n_heads: int, n_kv_heads: int, norm_eps: float, barrier: bool = False
    ) -> None:
        self.attention = Attention(dim, n_heads, n_kv_heads, barrier)
        self.feed_forward = FeedForward(dim, hidden_dim)
        self.attention_norm = nn.RMSNorm(dim, norm_eps)
        self.ffn_norm = nn.RMSNorm(dim, norm_eps)

    def __call__(self, x: Tensor, freqs_cis: Tensor, mask: Tensor) -> Tensor:
        h = x + self.attention(self.attention_norm(x), freqs_cis, mask)
        return (h + self.feed_forward(self.ffn_norm(h))).contiguous().contiguous_backward()


# *** the torch twin: same parameter names, rotary embeddings as complex numbers ***


class TorchRMSNorm(torch.nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps, self.weight = eps, torch.nn.Parameter(torch.empty(dim).uniform_(0.5, 1.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class TorchBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head_dim = DIM // HEADS
        self.attention = torch.nn.Module()
        for name, outs in (("wq", HEADS), ("wk", KV_HEADS), ("wv", KV_HEADS)):
            self.attention.add_module(name, torch.nn.Linear(DIM, outs * self.head_dim, bias=False))
        self.attention.add_module("wo", torch.nn.Linear(DIM, DIM, bias=False))
        self.feed_forward = torch.nn.Module()
        for name, (i, o) in (("w1", (DIM, HIDDEN)), ("w2", (HIDDEN, DIM)), ("w3", (DIM, HIDDEN))):
            self.feed_forward.add_module(name, torch.nn.Linear(i, o, bias=False))
        self.attention_norm, self.ffn_norm = TorchRMSNorm(DIM, EPS), TorchRMSNorm(DIM, EPS)

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        freqs = 1.0 / (10000.0 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        cis = torch.polar(torch.ones(SEQ, self.head_dim // 2), torch.outer(torch.arange(SEQ).float(), freqs))
        pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))  # (B, T, H, hd / 2)
        return torch.view_as_real(pairs * cis[None, :, None, :]).flatten(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b, t = self.attention, x.shape[0], x.shape[1]
        y = self.attention_norm(x)
        q = self.rotate(a.wq(y).view(b, t, HEADS, -1)).transpose(1, 2)
        k = self.rotate(a.wk(y).view(b, t, KV_HEADS, -1)).repeat_interleave(HEADS // KV_HEADS, 2).transpose(1, 2)
        v = a.wv(y).view(b, t, KV_HEADS, -1).repeat_interleave(HEADS // KV_HEADS, 2).transpose(1, 2)
        h = x + a.wo(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, -1))
        f, z = self.feed_forward, self.ffn_norm(h)
        return h + f.w2(F.silu(f.w1(z)) * f.w3(z))


def pair(serve_weights: Callable[[str, torch.nn.Module], None], barrier: bool) -> tuple[TransformerBlock, TorchBlock]:
    twin = TorchBlock()
    serve_weights(URL, twin)
    block = TransformerBlock(DIM, HIDDEN, HEADS, KV_HEADS, EPS, barrier)
    load_state_dict(block, {k: v.to(Tensor.arange(1).device) for k, v in torch_load(helpers.fetch(URL)).items()})
    return block, twin


def run_block(block: TransformerBlock, x: Tensor) -> Tensor:
    mask = Tensor.full((1, 1, SEQ, SEQ), float("-inf")).triu(1)
    return block(x, precompute_freqs_cis(DIM // HEADS, SEQ), mask)


# The cat of two gated slices of one lazy matmul (complex_mult on the query projection) once reused one slice's
# reduce for both; "fused" runs the reference's code as it is, "barrier" realizes the projections first.
BARRIERS = [pytest.param(False, id="fused"), pytest.param(True, id="barrier")]


@pytest.mark.parametrize("barrier", BARRIERS)
def test_llama_block_forward(serve_weights: Callable[[str, torch.nn.Module], None], barrier: bool) -> None:
    block, twin = pair(serve_weights, barrier)
    x = np.random.default_rng(1).standard_normal((BATCH, SEQ, DIM)).astype(np.float32)
    np.testing.assert_allclose(run_block(block, Tensor(x)).numpy(), twin(torch.tensor(x)).detach().numpy(),
                               rtol=1e-4, atol=1e-4)  # fmt: skip


@pytest.mark.parametrize("barrier", BARRIERS)
def test_llama_block_backward(serve_weights: Callable[[str, torch.nn.Module], None], barrier: bool) -> None:
    """Gradients of a weighted sum of the outputs for the input, the query, key, output and gate weights and a norm,
    each gradient realized on its own."""
    block, twin = pair(serve_weights, barrier)
    x = np.random.default_rng(2).standard_normal((BATCH, SEQ, DIM)).astype(np.float32)
    weights = np.random.default_rng(3).standard_normal((BATCH, SEQ, DIM)).astype(np.float32)
    for p in get_parameters(block):
        p.requires_grad = True
    ours_x, theirs_x = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (run_block(block, ours_x) * Tensor(weights)).sum().backward()
    (twin(theirs_x) * torch.tensor(weights)).sum().backward()
    pairs = [(ours_x, theirs_x), (block.attention.wq.weight, twin.attention.wq.weight),
             (block.attention.wk.weight, twin.attention.wk.weight),
             (block.attention.wo.weight, twin.attention.wo.weight),
             (block.feed_forward.w1.weight, twin.feed_forward.w1.weight),
             (block.attention_norm.weight, twin.attention_norm.weight)]  # fmt: skip
    for ours, theirs in pairs:
        assert ours.grad is not None
        assert theirs.grad is not None
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-3, atol=1e-4)
