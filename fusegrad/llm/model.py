"""A LLaMA-style decoder: RoPE, RMSNorm, grouped-query attention with a KV cache, a SwiGLU feed-forward.

Names follow the reference's `tinygrad.llm.model` (`TransformerConfig`, `TransformerBlock`, `Transformer`,
`precompute_freqs_cis`, `apply_rope`; GGUF parameter names such as `blk.0.attn_q.weight`), so code ports by one import.
Decoding appends each token's keys and values to a preallocated cache with `assign` at a bound `start_pos` variable:
one TinyJit capture replays for every position. Entry points: `Transformer(config)`, `Transformer.generate`.
"""

from __future__ import annotations

import functools
import json
import pathlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusegrad import nn
from fusegrad.engine.jit import TinyJit
from fusegrad.llm.gguf import gguf_load
from fusegrad.llm.sampling import check_sampling, sample
from fusegrad.nn.state import load_state_dict, safe_load
from fusegrad.tensor import Tensor
from fusegrad.uop.ops import UOp

StartPos = int | UOp  # a position in the sequence: a plain int, or a variable bound to one


@functools.cache
def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0, device: str | None = None) -> Tensor:
    """RoPE's angles for positions 0..end-1: (end, dim), cos of the dim/2 frequencies then their sin.

    Frequency i is theta^(-2i/dim). Cached per arguments, so every block of a model shares one table.
    Example: `precompute_freqs_cis(8, 16).shape == (16, 8)`.
    """
    if dim < 2 or dim % 2:
        raise ValueError(f"precompute_freqs_cis: dim must be even and >= 2: got {dim}")
    freqs = 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    angles = np.arange(end, dtype=np.float64)[:, None] * freqs[None, :]  # (end, dim/2)
    table = np.concatenate([np.cos(angles), np.sin(angles)], axis=-1).astype(np.float32)
    return Tensor(table, device=device).realize()


def apply_rope(x: Tensor, freqs_cis: Tensor) -> Tensor:
    """Rotate x (B, H, T, D) by the angles of its T positions, freqs_cis (T, D), in the half-split layout: pairs are
    (x[..., i], x[..., i + D/2]), as Hugging Face LLaMA checkpoints store q and k.

    Args:
        x: queries or keys, (B, H, T, D) with D even.
        freqs_cis: the angles of the T positions, (T, D): rows of `precompute_freqs_cis`.

    Returns:
        The rotated tensor, (B, H, T, D).

    Raises:
        ValueError: x is not 4-d or its last axis is odd.

    Examples:
        >>> x = Tensor.ones(1, 1, 3, 4)
        >>> apply_rope(x, precompute_freqs_cis(4, 3)).shape
        (1, 1, 3, 4)
        >>> apply_rope(x, precompute_freqs_cis(4, 3))[0, 0, 0].tolist()  # position 0: no rotation
        [1.0, 1.0, 1.0, 1.0]
    """
    if x.ndim != 4 or x.shape[-1] % 2:
        raise ValueError(f"apply_rope: expected (B, H, T, D) with D even: got {x.shape}")
    cos, sin = freqs_cis.reshape(1, 1, x.shape[2], x.shape[-1]).chunk(2, dim=-1)  # each (1, 1, T, D/2)
    x1, x2 = x.chunk(2, dim=-1)
    return (x1 * cos - x2 * sin).cat(x2 * cos + x1 * sin, dim=-1)


@dataclass(frozen=True)
class TransformerConfig:
    """The shape of a model. rope_dim and v_head_dim of 0 mean head_dim; max_context 0 means no KV cache (the
    model then runs whole sequences from position 0, and gradients flow: the training and testing form).

    Attributes:
        num_blocks: how many transformer blocks.
        dim: the model width (embedding size).
        hidden_dim: the feed-forward's inner width.
        n_heads: query heads.
        n_kv_heads: key/value heads (n_heads must be a multiple: grouped-query attention).
        norm_eps: RMSNorm's epsilon.
        vocab_size: how many token ids.
        head_dim: features per head.
        rope_theta: RoPE's base.
        rope_dim: how many leading features of each head RoPE rotates (0: all of them).
        v_head_dim: features per value head (0, or equal to head_dim).
        max_context: KV cache length in tokens (0: no cache).
        qkv_bias: whether the q, k and v projections have a bias.

    Raises:
        ValueError: n_heads is not a multiple of n_kv_heads, v_head_dim differs from head_dim, or rope_dim is odd
            or larger than head_dim.

    Examples:
        >>> cfg = TransformerConfig(num_blocks=2, dim=32, hidden_dim=64, n_heads=4, n_kv_heads=2, norm_eps=1e-5,
        ...                         vocab_size=100, head_dim=8, max_context=16)
        >>> cfg.rotary_dim
        8
    """

    num_blocks: int
    dim: int
    hidden_dim: int
    n_heads: int
    n_kv_heads: int
    norm_eps: float
    vocab_size: int
    head_dim: int
    rope_theta: float = 10000.0
    rope_dim: int = 0
    v_head_dim: int = 0
    max_context: int = 0
    qkv_bias: bool = False

    def __post_init__(self) -> None:
        if self.n_heads < 1 or self.n_kv_heads < 1 or self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"TransformerConfig: n_heads must be a multiple of n_kv_heads: got {self.n_heads} and {self.n_kv_heads}"
            )
        if self.v_head_dim not in (0, self.head_dim):
            raise ValueError(
                f"TransformerConfig: v_head_dim must equal head_dim ({self.head_dim}): got {self.v_head_dim}"
            )
        if self.rope_dim % 2 or not 0 <= self.rope_dim <= self.head_dim or self.head_dim % 2:
            raise ValueError(
                f"TransformerConfig: rope_dim must be even and at most head_dim: got {self.rope_dim}, {self.head_dim}"
            )

    @property
    def rotary_dim(self) -> int:
        """How many leading features of each head RoPE rotates: rope_dim, or head_dim when rope_dim is 0.

        Examples:
            >>> TransformerConfig(1, 8, 16, 2, 2, 1e-5, 10, head_dim=4, rope_dim=2).rotary_dim
            2
        """
        return self.rope_dim or self.head_dim


class TransformerBlock:
    """Pre-norm block: h = x + attention(attn_norm(x)); out = h + feed_forward(ffn_norm(h)), (B, T, dim) kept.

    Args:
        config: the model's shape; the block keeps its own KV cache when config.max_context > 0.

    Examples:
        >>> cfg = TransformerConfig(1, 16, 32, 2, 1, 1e-5, 50, head_dim=8)
        >>> TransformerBlock(cfg)(Tensor.randn(2, 5, 16)).shape
        (2, 5, 16)
    """

    def __init__(self, config: TransformerConfig) -> None:
        self.config = config
        self.attn_norm = nn.RMSNorm(config.dim, config.norm_eps)
        self.ffn_norm = nn.RMSNorm(config.dim, config.norm_eps)
        kv_out = config.head_dim * config.n_kv_heads
        self.attn_q = nn.Linear(config.dim, config.head_dim * config.n_heads, bias=config.qkv_bias)
        self.attn_k = nn.Linear(config.dim, kv_out, bias=config.qkv_bias)
        self.attn_v = nn.Linear(config.dim, kv_out, bias=config.qkv_bias)
        self.attn_output = nn.Linear(config.head_dim * config.n_heads, config.dim, bias=False)
        self.ffn_gate = nn.Linear(config.dim, config.hidden_dim, bias=False)
        self.ffn_up = nn.Linear(config.dim, config.hidden_dim, bias=False)
        self.ffn_down = nn.Linear(config.hidden_dim, config.dim, bias=False)
        self.cache_kv: Tensor | None = None  # made on the first cached call, once the batch size is known

    def __call__(self, x: Tensor, start_pos: StartPos = 0) -> Tensor:
        h = self._residual(x + self._attention(self.attn_norm(x), start_pos))
        return self._residual(h + self._feed_forward(self.ffn_norm(h)))

    def _residual(self, x: Tensor) -> Tensor:
        """With a KV cache (inference), the residual stream is stored after each add: left lazy, every later norm
        kernel re-reads and re-adds all earlier blocks' outputs (a 12-block model's last norms read 24 buffers, ~8%
        of a 110M prefill). Without one (training), it stays lazy: a stored value realized before backward would
        cut the gradient's graph there."""
        return x.contiguous() if self.config.max_context else x

    def _feed_forward(self, x: Tensor) -> Tensor:
        """SwiGLU: down(silu(gate(x)) * up(x))."""
        return self.ffn_down(self.ffn_gate(x).silu() * self.ffn_up(x))

    def _rope(self, x: Tensor, start_pos: StartPos) -> Tensor:
        """RoPE on the first rotary_dim features of each head at positions start_pos..start_pos+T-1."""
        cfg, t = self.config, x.shape[2]
        freqs = precompute_freqs_cis(cfg.rotary_dim, cfg.max_context or t, cfg.rope_theta, x.device)
        rotated = apply_rope(x[..., : cfg.rotary_dim], freqs[start_pos : start_pos + t])
        return rotated if cfg.rotary_dim == cfg.head_dim else rotated.cat(x[..., cfg.rotary_dim :], dim=-1)

    def _attention(self, x: Tensor, start_pos: StartPos) -> Tensor:
        cfg = self.config
        b, t, _ = x.shape
        # (B, T, heads * head_dim) -> (B, heads, T, head_dim)
        q = self.attn_q(x).reshape(b, t, cfg.n_heads, cfg.head_dim).transpose(1, 2)
        k = self.attn_k(x).reshape(b, t, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)
        v = self.attn_v(x).reshape(b, t, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)
        if cfg.max_context == 0 and (not isinstance(start_pos, int) or start_pos != 0):
            raise ValueError(
                f"TransformerBlock: a model without a KV cache (max_context 0) starts at 0: got {start_pos}"
            )
        q, k = self._rope(q, start_pos), self._rope(k, start_pos)
        if cfg.max_context == 0:
            attn = q.scaled_dot_product_attention(k, v, is_causal=t != 1, enable_gqa=True)
        else:
            attn = attend_with_cache(self._cache(k), q, k, v, start_pos)
        return self.attn_output(attn.transpose(1, 2).reshape(b, t, cfg.n_heads * cfg.head_dim))

    def _cache(self, k: Tensor) -> Tensor:
        """This block's (2, B, kv_heads, max_context, head_dim) cache, made on first use or when B changes."""
        cfg = self.config
        if self.cache_kv is None or self.cache_kv.shape[1] != k.shape[0]:
            shape = (2, k.shape[0], cfg.n_kv_heads, cfg.max_context, cfg.head_dim)
            self.cache_kv = Tensor.zeros(*shape, dtype=k.dtype, device=k.device).contiguous().realize()
        return self.cache_kv


def attend_with_cache(cache_kv: Tensor, q: Tensor, k: Tensor, v: Tensor, start_pos: StartPos) -> Tensor:
    """Causal attention of q (B, H, T, D) over every position up to start_pos+T-1, after writing this step's k and v
    (B, kv_heads, T, D) into `cache_kv` (2, B, kv_heads, max_context, D) at start_pos with `assign`.

    start_pos may be a bound variable: the write and the reads then have symbolic shapes, so one kernel (and one
    TinyJit capture) serves every position. H must be a multiple of kv_heads (grouped-query attention).

    Args:
        cache_kv: the realized cache, (2, B, kv_heads, max_context, D); written in place.
        q: this step's queries, (B, H, T, D).
        k: this step's keys, (B, kv_heads, T, D).
        v: this step's values, (B, kv_heads, T, D).
        start_pos: the position of this step's first token: an int or a bound variable.

    Returns:
        The attention output, (B, H, T, D).

    Raises:
        ValueError: an int start_pos whose T positions run past the cache.

    Examples:
        >>> cache = Tensor.zeros(2, 1, 1, 8, 4).contiguous().realize()
        >>> q, k, v = Tensor.randn(1, 2, 3, 4), Tensor.randn(1, 1, 3, 4), Tensor.randn(1, 1, 3, 4)
        >>> attend_with_cache(cache, q, k, v, 0).shape  # then one token at a time: start_pos 3, 4, ...
        (1, 2, 3, 4)
    """
    t, max_context = k.shape[2], cache_kv.shape[3]
    if isinstance(start_pos, int) and isinstance(t, int) and not 0 <= start_pos <= max_context - t:
        raise ValueError(
            f"attend_with_cache: positions {start_pos}..{start_pos + t - 1} past the cache (0..{max_context - 1})"
        )
    cache_kv[:, :, :, start_pos : start_pos + t, :].assign(Tensor.stack(k, v))
    if isinstance(t, int) and not isinstance(start_pos, int):
        # T tokens at a bound position: the whole cache with each query's later positions masked keeps every shape
        # concrete (so kernels get the concrete-shape optimisations); a slice to start_pos+T indexes through symbolic
        # div/mod chains (~85% of a decode step's time, 0.1 s per attention kernel of a 128-token chunk)
        mask = Tensor.full((1, 1, t, max_context), float("-inf"), dtype=q.dtype, device=q.device).triu(start_pos + 1)
        return q.scaled_dot_product_attention(cache_kv[0], cache_kv[1], attn_mask=mask, enable_gqa=True)
    end = start_pos + t
    keys, values = cache_kv[0, :, :, :end, :], cache_kv[1, :, :, :end, :]
    return q.scaled_dot_product_attention(keys, values, attn_mask=_causal_mask(t, start_pos, q), enable_gqa=True)


def _causal_mask(t: StartPos, start_pos: StartPos, like: Tensor) -> Tensor | None:
    """-inf above the diagonal shifted by start_pos, (1, 1, T, start_pos+T); None for one token (it sees everything).
    T and start_pos may be bound variables: one mask kernel then serves every chunk of a chunked prefill."""
    if isinstance(t, int) and t == 1:
        return None
    mask = Tensor.full((1, 1, t, start_pos + t), float("-inf"), dtype=like.dtype, device=like.device)
    return mask.triu(start_pos + 1)  # a bound variable works as the diagonal too


class Transformer:
    """Token embedding, `num_blocks` blocks, a final RMSNorm and the output projection: (B, T) ids -> logits.

    `forward(tokens, start_pos)` gives the logits of the last position (B, vocab); `__call__` runs it under TinyJit
    for one token (`rollout_jit`) and for a chunk of a symbolic number of tokens (`prefill_jit`), so decoding and
    chunked prefill each replay one capture.

    Args:
        config: the model's shape; weights start random (load them with `from_gguf`, `from_safetensors` or
            `nn.state.load_state_dict`).

    Examples:
        >>> cfg = TransformerConfig(1, 16, 32, 2, 1, 1e-5, 50, head_dim=8, max_context=16)
        >>> model = Transformer(cfg)
        >>> model.logits(Tensor([[1, 2, 3]])).shape
        (1, 3, 50)
        >>> import itertools
        >>> len(list(itertools.islice(model.generate([1, 2, 3]), 4)))  # greedy: 4 token ids
        4
    """

    def __init__(self, config: TransformerConfig) -> None:
        self.config = config
        self.blk = [TransformerBlock(config) for _ in range(config.num_blocks)]
        self.token_embd = nn.Embedding(config.vocab_size, config.dim)
        self.output_norm = nn.RMSNorm(config.dim, config.norm_eps)
        self.output = nn.Linear(config.dim, config.vocab_size, bias=False)
        self.max_context = config.max_context
        # one capture for a single token (decode), one for a chunk of a variable number of tokens (the reference's
        # symbolic prefill), and one per chunk size for `prefill`'s fixed-size chunks at a bound position
        self.rollout_jit: TinyJit[Tensor] = TinyJit(self._forward_realized)
        self.prefill_jit: TinyJit[Tensor] = TinyJit(self._forward_realized)
        self.chunk_jits: dict[tuple[int, bool], TinyJit[Tensor]] = {}  # (chunk size, at position 0) -> capture

    @staticmethod
    def from_gguf(
        gguf: Tensor | str | pathlib.Path, max_context: int | None = None
    ) -> tuple[Transformer, dict[str, Any]]:
        """A LLaMA-architecture GGUF file as (model, metadata). max_context (default: the file's context length)
        sizes the KV cache. Quantised weights are dequantised to float32; q and k rows go from GGUF's interleaved
        RoPE pairs back to the half-split layout; a missing output.weight is tied to token_embd.weight.

        Args:
            gguf: a path, or a uint8 Tensor of the file's bytes.
            max_context: KV cache length in tokens (None: the file's context length).

        Returns:
            (model, metadata): the metadata holds the tokenizer (`SimpleTokenizer.from_gguf_kv`).

        Raises:
            ValueError: the file's architecture is not "llama" (or, from `gguf_load`, it is not a GGUF file).

        Examples:
            >>> Transformer.from_gguf("Llama-3.2-1B-Instruct-Q4_0.gguf", max_context=512)  # doctest: +SKIP
        """
        kv, state = gguf_load(gguf)
        arch = kv.get("general.architecture")
        if arch != "llama":
            raise ValueError(f"Transformer.from_gguf: architecture {arch!r} is not supported: expected 'llama'")
        config = _config_from_gguf(kv, state, max_context)
        for name in list(state):
            if name.endswith(("attn_q.weight", "attn_k.weight")):
                heads = config.n_heads if name.endswith("attn_q.weight") else config.n_kv_heads
                state[name] = _deinterleave_rows(state[name], heads)
        return Transformer._with_weights(config, state), kv

    @staticmethod
    def from_safetensors(path: str | pathlib.Path, max_context: int | None = None) -> Transformer:
        """A Hugging Face LLaMA checkpoint: `path` is a .safetensors file or a folder of shards, with the model's
        config.json beside it. Names such as model.layers.0.self_attn.q_proj.weight map to blk.0.attn_q.weight.

        Args:
            path: a .safetensors file or a folder of them, with config.json in the same folder.
            max_context: KV cache length in tokens (None: config.json's max_position_embeddings).

        Returns:
            The model with the checkpoint's weights (as float32).

        Raises:
            FileNotFoundError: no .safetensors weights or no config.json.

        Examples:
            >>> Transformer.from_safetensors("missing/model.safetensors")
            Traceback (most recent call last):
            FileNotFoundError: Transformer.from_safetensors: need .safetensors weights and config.json in missing
        """
        path = pathlib.Path(path)
        folder = path if path.is_dir() else path.parent
        files = sorted(folder.glob("*.safetensors")) if path.is_dir() else [path]
        if not files or not (folder / "config.json").is_file():
            raise FileNotFoundError(
                f"Transformer.from_safetensors: need .safetensors weights and config.json in {folder}"
            )
        hf = json.loads((folder / "config.json").read_text())
        state = {
            _gguf_name(k): v for f in files for k, v in safe_load(f).items() if not k.endswith("rotary_emb.inv_freq")
        }
        return Transformer._with_weights(_config_from_hf(hf, max_context), state)

    @staticmethod
    def _with_weights(config: TransformerConfig, state: dict[str, Tensor]) -> Transformer:
        if "output.weight" not in state:  # tied embeddings (e.g. LLaMA 3.2 1B)
            state["output.weight"] = state["token_embd.weight"]
        state.pop("rope_freqs.weight", None)  # RoPE angles are computed, not read
        model = Transformer(config)
        load_state_dict(model, {k: v.float() for k, v in state.items()}, verbose=False, consume=True)
        return model

    def _hidden(self, tokens: Tensor, start_pos: StartPos) -> Tensor:
        """(B, T) ids -> (B, T, dim) after the last block."""
        x = self.token_embd(tokens)
        for block in self.blk:
            x = block(x, start_pos)
        return x

    def logits(self, tokens: Tensor, start_pos: StartPos = 0) -> Tensor:
        """Logits of every position: (B, T) ids -> (B, T, vocab).

        Args:
            tokens: (B, T) token ids.
            start_pos: the position of the first token (with a KV cache: the tokens before it are cached).

        Returns:
            (B, T, vocab) logits, lazy.

        Examples:
            >>> model = Transformer(TransformerConfig(1, 16, 32, 2, 1, 1e-5, 50, head_dim=8))
            >>> model.logits(Tensor([[4, 5]])).shape
            (1, 2, 50)
        """
        return self.output(self.output_norm(self._hidden(tokens, start_pos)))

    def forward(self, tokens: Tensor, start_pos: StartPos = 0) -> Tensor:
        """Logits of the last position only: (B, T) ids -> (B, vocab); the projection runs on that one row.

        Args:
            tokens: (B, T) token ids (T may be a bound variable).
            start_pos: the position of the first token.

        Returns:
            (B, vocab) logits, lazy.

        Examples:
            >>> model = Transformer(TransformerConfig(1, 16, 32, 2, 1, 1e-5, 50, head_dim=8))
            >>> model.forward(Tensor([[4, 5, 6]])).shape
            (1, 50)
        """
        x = self._hidden(tokens, start_pos)
        t = x.shape[1]
        last = x[:, t - 1 : t, :].reshape(x.shape[0], x.shape[2])  # a slice, not x[:, -1]: T may be a variable
        return self.output(self.output_norm(last))

    def _forward_realized(self, tokens: Tensor, start_pos: StartPos) -> Tensor:
        return self.forward(tokens, start_pos).realize()

    def _chunk_realized(self, tokens: Tensor, start_pos: UOp, row: UOp) -> Tensor:
        """The logits of row `row` of a fixed-size chunk at a bound start_pos, realized: (B, vocab)."""
        return self._row_logits(self._hidden(tokens, start_pos), row).realize()

    def _first_chunk_realized(self, tokens: Tensor, row: UOp) -> Tensor:
        """`_chunk_realized` at position 0: attention reads only the chunk's own positions (no masked cache tail)."""
        return self._row_logits(self._hidden(tokens, 0), row).realize()

    def _row_logits(self, x: Tensor, row: UOp) -> Tensor:
        picked = x[:, row : row + 1, :].reshape(x.shape[0], x.shape[2])
        return self.output(self.output_norm(picked))

    def __call__(self, tokens: Tensor, start_pos: StartPos = 0) -> Tensor:
        """forward, realized. At a bound start_pos, one token goes through `rollout_jit` and a symbolic number of
        tokens (a slice of a realized buffer at bound variables) through `prefill_jit`: each is captured once."""
        if tokens.ndim != 2:
            raise ValueError(f"Transformer: tokens must be (B, T) ids: got shape {tokens.shape}")
        if isinstance(start_pos, UOp) and isinstance(tokens.shape[1], int) and tokens.shape[1] == 1:
            return self.rollout_jit(tokens.contiguous().realize(), start_pos)
        if isinstance(start_pos, UOp) and not isinstance(tokens.shape[1], int):
            return self.prefill_jit(tokens, start_pos)
        return self._forward_realized(tokens, start_pos)

    def generate(
        self,
        tokens: list[int],
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        rng: np.random.Generator | None = None,
        chunk_size: int = 128,
    ) -> Iterator[int]:
        """Yield the next token ids after the prompt `tokens`, until max_context (the caller stops earlier).

        The prompt runs through `prefill` (fixed-size chunks at a bound `start_pos`); each new token then runs alone
        at `start_pos` bound to its position. So a prompt of any length and every decode step replay captured
        kernels: no compile after the first calls. Sampling: `llm.sampling.sample`.

        Args:
            tokens: the prompt's token ids (at least one, fewer than max_context).
            temperature: 0 for greedy, else the divisor of the logits.
            top_k: sample from the k most likely tokens (0: all).
            top_p: sample from the smallest set of most likely tokens with this much probability (1: all).
            rng: the random generator (None: a fresh unseeded one).
            chunk_size: the most prompt tokens run at once (see `prefill`).

        Yields:
            The next token id, one per step, until the cache is full.

        Raises:
            ValueError: an empty prompt, no KV cache (max_context 0), a prompt that fills the cache, chunk_size < 1,
                or a sampling setting out of range.

        Examples:
            >>> model = Transformer(TransformerConfig(1, 16, 32, 2, 1, 1e-5, 50, head_dim=8, max_context=8))
            >>> tokens = list(model.generate([1, 2, 3]))  # greedy, until the 8-token cache is full
            >>> len(tokens), all(0 <= t < 50 for t in tokens)
            (6, True)
        """
        check_sampling(temperature, top_k, top_p)
        if not tokens or self.max_context < 1:
            raise ValueError(
                f"generate: needs a prompt and a KV cache: got {len(tokens)} tokens, max_context {self.max_context}"
            )
        if len(tokens) >= self.max_context:
            raise ValueError(f"generate: the prompt ({len(tokens)} tokens) fills max_context ({self.max_context})")
        if chunk_size < 1:
            raise ValueError(f"generate: chunk_size must be >= 1: got {chunk_size}")
        position = UOp.variable("start_pos", 0, self.max_context - 1)
        logits = self.prefill(tokens, chunk_size)
        pos = len(tokens)
        while True:
            token = sample(logits.numpy()[0], temperature, top_k, top_p, rng)
            yield token
            if pos >= self.max_context:
                return
            logits = self(Tensor([[token]], dtype="int32"), position.bind(pos))
            pos += 1

    def prefill(self, tokens: list[int], chunk_size: int = 128) -> Tensor:
        """Write the prompt's keys and values into the KV cache (positions 0..len-1); the logits of its last token.

        The prompt runs in chunks of exactly `size` tokens: chunk_size, or for a shorter prompt the power of two
        (at least 16) that holds it, at most max_context. The first chunk goes through a TinyJit capture at position
        0 (attention over the chunk alone), the others through one at a bound `start_pos` (attention over the whole
        cache, later positions masked): every shape in their kernels is concrete, and every prompt length and
        position replays the same two captures per size (`chunk_jits`).
        A last partial chunk is padded with token 0 when it fits in the cache (the padding's keys and values land
        past the prompt, where decoding masks and then overwrites them) and otherwise starts earlier, recomputing
        positions already cached (the same values are written again).

        Args:
            tokens: the prompt's token ids (at least one, at most max_context).
            chunk_size: tokens per chunk (at most; see above).

        Returns:
            (1, vocab) logits of the prompt's last token, realized.

        Raises:
            ValueError: an empty prompt or one longer than max_context, no KV cache, or chunk_size < 1.

        Examples:
            >>> model = Transformer(TransformerConfig(1, 16, 32, 2, 1, 1e-5, 50, head_dim=8, max_context=16))
            >>> model.prefill([1, 2, 3, 4, 5], chunk_size=4).shape
            (1, 50)
        """
        if self.max_context < 1 or not 1 <= len(tokens) <= self.max_context:
            raise ValueError(
                f"prefill: expected 1..{self.max_context} tokens (max_context, the KV cache's length): "
                f"got {len(tokens)}"
            )
        if chunk_size < 1:
            raise ValueError(f"prefill: chunk_size must be >= 1: got {chunk_size}")
        size = min(chunk_size, max(16, 1 << (len(tokens) - 1).bit_length()), self.max_context)
        position = UOp.variable("start_pos", 0, self.max_context - size)
        row = UOp.variable("row", 0, size - 1)
        logits: Tensor | None = None
        for start, count in _chunks(len(tokens), size, self.max_context):
            ids = Tensor([(tokens[start : start + count] + [0] * size)[:size]], dtype="int32")
            if (size, start == 0) not in self.chunk_jits:
                self.chunk_jits[size, start == 0] = TinyJit(
                    self._first_chunk_realized if start == 0 else self._chunk_realized
                )
            jit = self.chunk_jits[size, start == 0]
            args = (row.bind(count - 1),) if start == 0 else (position.bind(start), row.bind(count - 1))
            logits = jit(ids, *args)
        assert logits is not None, "prefill: no chunk ran"
        return logits


def _chunks(length: int, size: int, max_context: int) -> Iterator[tuple[int, int]]:
    """(start, tokens) of each size-token chunk covering positions 0..length-1: whole chunks, then the rest padded
    when start + size fits in the cache, else a whole chunk ending at the prompt's end (overlapping the one before).
    Example: `list(_chunks(10, 4, 16)) == [(0, 4), (4, 4), (8, 2)]`; `list(_chunks(10, 4, 10))[-1] == (6, 4)`."""
    start = 0
    while length - start >= size:
        yield start, size
        start += size
    if start < length:
        yield (start, length - start) if start + size <= max_context else (length - size, size)


def _deinterleave_rows(w: Tensor, heads: int) -> Tensor:
    """(heads * head_dim, dim) rows in GGUF's RoPE order (pairs adjacent) -> half-split order (pair i with i+D/2)."""
    rows, dim = w.shape
    # (heads, D/2, 2, dim) -> (heads, 2, D/2, dim)
    return w.reshape(heads, rows // heads // 2, 2, dim).transpose(1, 2).reshape(rows, dim)


def _config_from_gguf(kv: dict[str, Any], state: dict[str, Tensor], max_context: int | None) -> TransformerConfig:
    arch = kv["general.architecture"]
    dim, n_heads = kv[f"{arch}.embedding_length"], kv[f"{arch}.attention.head_count"]
    head_dim = kv.get(f"{arch}.attention.key_length", dim // n_heads)
    context = kv.get(f"{arch}.context_length", 2048)
    return TransformerConfig(
        num_blocks=kv[f"{arch}.block_count"], dim=dim, hidden_dim=kv[f"{arch}.feed_forward_length"], n_heads=n_heads,
        n_kv_heads=kv.get(f"{arch}.attention.head_count_kv", n_heads),
        norm_eps=kv[f"{arch}.attention.layer_norm_rms_epsilon"], vocab_size=state["token_embd.weight"].shape[0],
        head_dim=head_dim, rope_theta=kv.get(f"{arch}.rope.freq_base", 10000.0),
        rope_dim=kv.get(f"{arch}.rope.dimension_count", head_dim),
        max_context=context if max_context is None else min(max_context, context),
        qkv_bias="blk.0.attn_q.bias" in state,
    )  # fmt: skip


def _config_from_hf(hf: dict[str, Any], max_context: int | None) -> TransformerConfig:
    dim, n_heads = hf["hidden_size"], hf["num_attention_heads"]
    context = hf.get("max_position_embeddings", 2048)
    return TransformerConfig(
        num_blocks=hf["num_hidden_layers"], dim=dim, hidden_dim=hf["intermediate_size"], n_heads=n_heads,
        n_kv_heads=hf.get("num_key_value_heads", n_heads), norm_eps=hf.get("rms_norm_eps", 1e-6),
        vocab_size=hf["vocab_size"], head_dim=hf.get("head_dim") or dim // n_heads,
        rope_theta=hf.get("rope_theta", 10000.0),
        max_context=context if max_context is None else min(max_context, context),
        qkv_bias=bool(hf.get("attention_bias", False)),
    )  # fmt: skip


# Hugging Face LLaMA parameter names -> the GGUF-style names this model uses
_HF_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
             "post_attention_layernorm": "ffn_norm"}  # fmt: skip


def _gguf_name(hf_name: str) -> str:
    """model.layers.3.mlp.up_proj.weight -> blk.3.ffn_up.weight; embeddings, final norm and head likewise."""
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}  # fmt: skip
    if hf_name in top:
        return top[hf_name]
    parts = hf_name.split(".")
    if parts[:2] != ["model", "layers"] or ".".join(parts[3:-1]) not in _HF_NAMES:
        raise ValueError(f"Transformer.from_safetensors: unexpected parameter {hf_name!r} for a LLaMA model")
    return f"blk.{parts[2]}.{_HF_NAMES['.'.join(parts[3:-1])]}.{parts[-1]}"
