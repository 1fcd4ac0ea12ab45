"""A LLaMA-style decoder in plain torch, the oracle for fusegrad.llm tests and bench/llm.py.

It reads the same parameter names as `fusegrad.llm.model.Transformer` (GGUF style, weights as (out, in)) and runs
whole sequences (`logits`) or one token at a time against its own KV cache (`step`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # torch's own spelling


def rope(x: torch.Tensor, start: int, theta: float, rotary: int) -> torch.Tensor:
    """Half-split RoPE on x (B, H, T, D) at positions start..start+T-1, on the first `rotary` features."""
    t = x.shape[2]
    freqs = 1.0 / (theta ** (torch.arange(0, rotary, 2, dtype=torch.float64) / rotary))
    angles = torch.arange(start, start + t, dtype=torch.float64)[:, None] * freqs[None, :]
    cos, sin = angles.cos().float(), angles.sin().float()
    x1, x2, rest = x[..., : rotary // 2], x[..., rotary // 2 : rotary], x[..., rotary:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


class TorchLlama:
    """Weights `w` keyed like fusegrad's state dict; cfg is a fusegrad TransformerConfig."""

    def __init__(self, w: dict[str, torch.Tensor], cfg: object) -> None:
        self.w, self.cfg = w, cfg
        self.cache: list[tuple[torch.Tensor, torch.Tensor]] = []

    def _attention(self, i: int, x: torch.Tensor, start: int, cached: bool) -> torch.Tensor:
        cfg, w, p = self.cfg, self.w, f"blk.{i}."
        b, t, _ = x.shape
        hd, rot = cfg.head_dim, cfg.rope_dim or cfg.head_dim  # type: ignore[attr-defined]
        q = F.linear(x, w[p + "attn_q.weight"], w.get(p + "attn_q.bias")).view(b, t, -1, hd).transpose(1, 2)
        k = F.linear(x, w[p + "attn_k.weight"], w.get(p + "attn_k.bias")).view(b, t, -1, hd).transpose(1, 2)
        v = F.linear(x, w[p + "attn_v.weight"], w.get(p + "attn_v.bias")).view(b, t, -1, hd).transpose(1, 2)
        q, k = rope(q, start, cfg.rope_theta, rot), rope(k, start, cfg.rope_theta, rot)  # type: ignore[attr-defined]
        if cached:
            if len(self.cache) <= i:
                self.cache.append((k, v))
            else:
                self.cache[i] = (torch.cat([self.cache[i][0], k], 2), torch.cat([self.cache[i][1], v], 2))
            k, v = self.cache[i]
        groups = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
        mask = torch.ones(t, k.shape[2], dtype=torch.bool).tril(k.shape[2] - t)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return F.linear(out.transpose(1, 2).reshape(b, t, -1), w[p + "attn_output.weight"])

    def _block(self, i: int, x: torch.Tensor, start: int, cached: bool) -> torch.Tensor:
        w, eps, p = self.w, self.cfg.norm_eps, f"blk.{i}."  # type: ignore[attr-defined]
        h = x + self._attention(i, rms_norm(x, w[p + "attn_norm.weight"], eps), start, cached)
        f = rms_norm(h, w[p + "ffn_norm.weight"], eps)
        ffn = F.linear(
            F.silu(F.linear(f, w[p + "ffn_gate.weight"])) * F.linear(f, w[p + "ffn_up.weight"]),
            w[p + "ffn_down.weight"],
        )
        return h + ffn

    def _hidden(self, ids: torch.Tensor, start: int, cached: bool) -> torch.Tensor:
        """(B, T) ids -> (B, T, dim) after the last block and the final norm."""
        x = F.embedding(ids, self.w["token_embd.weight"])
        for i in range(self.cfg.num_blocks):  # type: ignore[attr-defined]
            x = self._block(i, x, start, cached)
        return rms_norm(x, self.w["output_norm.weight"], self.cfg.norm_eps)  # type: ignore[attr-defined]

    def logits(self, ids: torch.Tensor, start: int = 0, cached: bool = False) -> torch.Tensor:
        """(B, T) ids -> (B, T, vocab)."""
        return F.linear(self._hidden(ids, start, cached), self.w["output.weight"])

    def last_logits(self, ids: torch.Tensor, start: int = 0, cached: bool = False) -> torch.Tensor:
        """(B, T) ids -> (B, vocab): the logits of the last position only (the output projection on one row)."""
        return F.linear(self._hidden(ids, start, cached)[:, -1], self.w["output.weight"])

    def greedy(self, prompt: list[int], steps: int) -> list[int]:
        """Greedy continuation with the KV cache: the same loop as Transformer.generate at temperature 0."""
        self.cache = []
        with torch.no_grad():
            logits = self.last_logits(torch.tensor([prompt]), 0, cached=True)[0]
            out, pos = [], len(prompt)
            for _ in range(steps):
                out.append(int(logits.argmax()))
                logits = self.last_logits(torch.tensor([[out[-1]]]), pos, cached=True)[0]
                pos += 1
        return out
