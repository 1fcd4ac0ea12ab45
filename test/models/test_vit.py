"""A small ViT in the reference's model-zoo idiom: a strided conv patch embedding, a class token and learned position
embeddings, pre-norm transformer blocks (a fused qkv projection, softmax attention, a GELU MLP) and a linear head on
the class token. Weights from a torch twin via a mocked fetch; forward and gradients against torch."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fusegrad import Tensor, helpers, nn
from fusegrad.nn.state import get_parameters, load_state_dict, torch_load

URL = "https://example.invalid/vit_tiny.pt"
IMAGE, PATCH, DIM, HEADS, MLP, DEPTH, CLASSES = 16, 4, 32, 4, 64, 2, 10
TOKENS = (IMAGE // PATCH) ** 2 + 1


class Attention:
    def __init__(self, dim: int, heads: int) -> None:
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def __call__(self, x: Tensor) -> Tensor:
        bs, tokens, dim = x.shape
        head_dim = dim // self.heads
        # (B, T, 3C) -> 3 x (B, heads, T, C / heads)
        q, k, v = self.qkv(x).reshape(bs, tokens, 3, self.heads, head_dim).permute(2, 0, 3, 1, 4)
        weights = (q @ k.transpose(-2, -1) / math.sqrt(head_dim)).softmax(-1)  # (B, heads, T, T)
        return self.proj((weights @ v).transpose(1, 2).reshape(shape=(bs, tokens, dim)))


class Block:
    def __init__(self, dim: int, heads: int, mlp_dim: int) -> None:
        self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = [nn.Linear(dim, mlp_dim), Tensor.gelu, nn.Linear(mlp_dim, dim)]

    def __call__(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.norm2(x).sequential(self.mlp)


class ViT:
    def __init__(self) -> None:
        self.patch_embed = nn.Conv2d(3, DIM, kernel_size=PATCH, stride=PATCH)
        self.cls_token = Tensor.zeros(1, 1, DIM)
        self.pos_embed = Tensor.zeros(1, TOKENS, DIM)
        self.blocks = [Block(DIM, HEADS, MLP) for _ in range(DEPTH)]
        self.norm = nn.LayerNorm(DIM, eps=1e-6)
        self.head = nn.Linear(DIM, CLASSES)

    def __call__(self, x: Tensor) -> Tensor:
        patches = self.patch_embed(x).flatten(2).transpose(1, 2)  # (B, C, H/p, W/p) -> (B, patches, C)
        x = self.cls_token.expand(x.shape[0], -1, -1).cat(patches, dim=1) + self.pos_embed
        return self.head(self.norm(x.sequential(self.blocks))[:, 0])


# *** the torch twin ***


class TorchBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(DIM, eps=1e-6), torch.nn.LayerNorm(DIM, eps=1e-6)
        self.attn = torch.nn.Module()
        self.attn.add_module("qkv", torch.nn.Linear(DIM, DIM * 3))
        self.attn.add_module("proj", torch.nn.Linear(DIM, DIM))
        self.mlp = torch.nn.Sequential(torch.nn.Linear(DIM, MLP), torch.nn.GELU("tanh"), torch.nn.Linear(MLP, DIM))
        for norm in (self.norm1, self.norm2):
            torch.nn.init.uniform_(norm.weight, 0.5, 1.5)
            torch.nn.init.uniform_(norm.bias, -0.2, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.attn.qkv(self.norm1(x)).view(b, t, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        x = x + self.attn.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, DIM))
        return x + self.mlp(self.norm2(x))


class TorchViT(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.patch_embed = torch.nn.Conv2d(3, DIM, PATCH, PATCH)
        self.cls_token = torch.nn.Parameter(torch.randn(1, 1, DIM))
        self.pos_embed = torch.nn.Parameter(torch.randn(1, TOKENS, DIM) * 0.5)
        self.blocks = torch.nn.Sequential(*[TorchBlock() for _ in range(DEPTH)])
        self.norm, self.head = torch.nn.LayerNorm(DIM, eps=1e-6), torch.nn.Linear(DIM, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        patches = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), patches], 1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


def pair(serve_weights: Callable[[str, torch.nn.Module], None]) -> tuple[ViT, TorchViT]:
    twin = TorchViT()
    serve_weights(URL, twin)
    model = ViT()
    load_state_dict(model, {k: v.to(Tensor.arange(1).device) for k, v in torch_load(helpers.fetch(URL)).items()})
    return model, twin


def test_vit_forward(serve_weights: Callable[[str, torch.nn.Module], None]) -> None:
    model, twin = pair(serve_weights)
    x = np.random.default_rng(1).standard_normal((2, 3, IMAGE, IMAGE)).astype(np.float32)
    np.testing.assert_allclose(model(Tensor(x)).numpy(), twin(torch.tensor(x)).detach().numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_vit_backward(serve_weights: Callable[[str, torch.nn.Module], None]) -> None:
    """Gradients of a weighted sum of the logits for the patch embedding, the class token, a qkv projection and a
    layer norm."""
    model, twin = pair(serve_weights)
    x = np.random.default_rng(2).standard_normal((2, 3, IMAGE, IMAGE)).astype(np.float32)
    weights = np.random.default_rng(3).standard_normal((2, CLASSES)).astype(np.float32)
    for p in get_parameters(model):
        p.requires_grad = True
    (model(Tensor(x)) * Tensor(weights)).sum().backward()
    (twin(torch.tensor(x)) * torch.tensor(weights)).sum().backward()
    pairs = [(model.patch_embed.weight, twin.patch_embed.weight), (model.cls_token, twin.cls_token),
             (model.pos_embed, twin.pos_embed), (model.blocks[0].attn.qkv.weight, twin.blocks[0].attn.qkv.weight),
             (model.blocks[1].norm2.weight, twin.blocks[1].norm2.weight)]  # fmt: skip
    for ours, theirs in pairs:
        assert ours.grad is not None
        assert theirs.grad is not None
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-3, atol=1e-4)
