"""fusegrad.llm.model against a torch LLaMA (test/llm/torch_llama.py): RoPE, RMSNorm, grouped-query attention and
the SwiGLU block forward and backward; the KV cache against whole-sequence logits; one capture, no recompile."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fusegrad.engine.realize as realize_module
from fusegrad import Tensor, UOp, nn
from fusegrad.llm.model import Transformer, TransformerBlock, TransformerConfig, apply_rope, precompute_freqs_cis
from fusegrad.nn.state import get_state_dict
from test.llm.torch_llama import TorchLlama, rms_norm, rope

CFG = TransformerConfig(num_blocks=2, dim=16, hidden_dim=24, n_heads=4, n_kv_heads=2, norm_eps=1e-5, vocab_size=11,
                        head_dim=4, rope_theta=100.0)  # fmt: skip


def _torch_weights(model: object) -> dict[str, torch.Tensor]:
    return {k: torch.tensor(v.numpy(), requires_grad=True) for k, v in get_state_dict(model).items()}


def _randomise(model: object, seed: int = 0) -> None:
    """Norm weights away from 1 so a missing multiply shows."""
    rng = np.random.default_rng(seed)
    for v in get_state_dict(model).values():
        v.assign(Tensor(rng.standard_normal(v.shape).astype(np.float32) * 0.5)).realize()
        v.requires_grad = True


def test_precompute_freqs_cis_and_apply_rope_match_torch() -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 8)).astype(np.float32)
    freqs = precompute_freqs_cis(8, 16, 500.0)
    assert freqs.shape == (16, 8)
    xf, xt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out = apply_rope(xf, freqs[2:7])
    ref = rope(xt, 2, 500.0, 8)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    (out * out.exp()).sum().backward()
    (ref * ref.exp()).sum().backward()
    np.testing.assert_allclose(xf.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_rope_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match=r"apply_rope: expected \(B, H, T, D\) with D even"):
        apply_rope(Tensor.ones(2, 5, 3), precompute_freqs_cis(4, 8))
    with pytest.raises(ValueError, match="precompute_freqs_cis: dim must be even"):
        precompute_freqs_cis(3, 8)


def test_rms_norm_matches_torch() -> None:
    x = np.random.default_rng(1).standard_normal((3, 6)).astype(np.float32)
    w = np.random.default_rng(2).standard_normal(6).astype(np.float32)
    norm = nn.RMSNorm(6, 1e-5)
    norm.weight = Tensor(w, requires_grad=True)
    xf, xt, wt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    out, ref = norm(xf), rms_norm(xt, wt, 1e-5)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    (out * out).sum().backward()
    (ref * ref).sum().backward()
    np.testing.assert_allclose(xf.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(norm.weight.grad.numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("n_kv_heads", "rope_dim", "qkv_bias"), [(2, 0, False), (1, 2, True), (4, 0, False)])
def test_block_forward_and_backward_match_torch(n_kv_heads: int, rope_dim: int, qkv_bias: bool) -> None:
    """Grouped-query attention (4 heads over 2, 1 or 4 kv heads), partial RoPE, biases and SwiGLU, with gradients."""
    cfg = TransformerConfig(1, 16, 24, 4, n_kv_heads, 1e-5, 11, 4, 100.0, rope_dim=rope_dim, qkv_bias=qkv_bias)
    block = TransformerBlock(cfg)
    _randomise(block)
    weights = {f"blk.0.{k}": v for k, v in _torch_weights(block).items()}
    x = np.random.default_rng(3).standard_normal((2, 5, 16)).astype(np.float32)
    xf, xt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out = block(xf)
    ref = TorchLlama(weights, cfg)._block(0, xt, 0, cached=False)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-4)
    (out * out).sum().backward()
    (ref * ref).sum().backward()
    np.testing.assert_allclose(xf.grad.numpy(), xt.grad.numpy(), rtol=1e-3, atol=1e-3)
    for name, value in get_state_dict(block).items():
        np.testing.assert_allclose(value.grad.numpy(), weights[f"blk.0.{name}"].grad.numpy(), rtol=1e-3, atol=1e-3)


def test_config_checks() -> None:
    with pytest.raises(ValueError, match="n_heads must be a multiple of n_kv_heads: got 4 and 3"):
        TransformerConfig(1, 16, 24, 4, 3, 1e-5, 11, 4)
    with pytest.raises(ValueError, match="rope_dim must be even and at most head_dim"):
        TransformerConfig(1, 16, 24, 4, 2, 1e-5, 11, 4, rope_dim=6)
    with pytest.raises(ValueError, match=r"without a KV cache .* starts at 0"):
        TransformerBlock(CFG)(Tensor.ones(1, 2, 16), 3)


def _cached_model(max_context: int = 16) -> Transformer:
    Tensor.manual_seed(0)
    model = Transformer(TransformerConfig(**{**CFG.__dict__, "max_context": max_context}))
    _randomise(model)
    return model


def test_kv_cache_decoding_matches_whole_sequence_logits() -> None:
    model = _cached_model()
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    full = model.logits(Tensor([ids], dtype="int32")).numpy()[0]  # (it writes the keys and values the steps rewrite)
    position = UOp.variable("start_pos", 1, 15)
    np.testing.assert_allclose(model(Tensor([ids[:3]], dtype="int32"), 0).numpy()[0], full[2], rtol=1e-4, atol=1e-4)
    for pos in range(3, len(ids)):
        step = model(Tensor([[ids[pos]]], dtype="int32"), position.bind(pos)).numpy()[0]
        np.testing.assert_allclose(step, full[pos], rtol=1e-4, atol=1e-4)


def test_decode_captures_once_and_never_recompiles(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _cached_model(32)
    compiles: list[int] = []
    real = realize_module.get_program
    monkeypatch.setattr(realize_module, "get_program", lambda ast, r: compiles.append(1) or real(ast, r))
    counts = []
    tokens = model.generate([1, 2, 3])
    for _ in range(12):
        next(tokens)
        counts.append(len(compiles))
    # step 1: prefill; step 2: the first decode runs (and compiles) eagerly; step 3: the capture; then replays only
    assert counts[3:] == [counts[2]] * (len(counts) - 3)
    assert model.rollout_jit.captured is not None


def test_chunked_prefill_matches_and_compiles_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prompts of 7 and 5 tokens in chunks of 3 (the last one padded): the logits of the whole sequence, through two
    captures (the chunk at position 0, the chunks at a bound position); a third prompt compiles nothing."""
    model = _cached_model(32)
    for prompt in ([3, 1, 4, 1, 5, 9, 2], [2, 7, 1, 8, 2]):
        full = model.logits(Tensor([prompt], dtype="int32")).numpy()[0, -1]
        np.testing.assert_allclose(model.prefill(prompt, 3).numpy()[0], full, rtol=1e-4, atol=1e-4)
    assert sorted(model.chunk_jits) == [(3, False), (3, True)]
    assert all(jit.captured is not None for jit in model.chunk_jits.values())
    compiles: list[int] = []
    real = realize_module.get_program
    monkeypatch.setattr(realize_module, "get_program", lambda ast, r: compiles.append(1) or real(ast, r))
    model.prefill([5, 5, 5, 5, 6, 6, 6, 6], 3)
    assert compiles == []


def test_prefill_chunks_cover_the_prompt() -> None:
    """Whole chunks, then the rest padded when it fits in the cache, else a whole chunk ending at the prompt's end."""
    from fusegrad.llm.model import _chunks

    assert list(_chunks(10, 4, 16)) == [(0, 4), (4, 4), (8, 2)]
    assert list(_chunks(10, 4, 10)) == [(0, 4), (4, 4), (6, 4)]
    assert list(_chunks(3, 4, 16)) == [(0, 3)]
    assert list(_chunks(8, 4, 8)) == [(0, 4), (4, 4)]


def test_prefill_that_ends_at_the_cache_recomputes_the_last_chunk() -> None:
    """7 tokens in chunks of 3 in an 8-token cache: the third chunk can't be padded (6 + 3 > 8), so it covers
    positions 4..6 again; a short prompt runs as one chunk of 16 (the smallest size for it) and leaves the stale
    positions of the longer one past it unread."""
    model = _cached_model(8)
    prompt = [3, 1, 4, 1, 5, 9, 2]
    full = model.logits(Tensor([prompt], dtype="int32")).numpy()[0, -1]
    np.testing.assert_allclose(model.prefill(prompt, 3).numpy()[0], full, rtol=1e-4, atol=1e-4)
    model = _cached_model(32)
    full = model.logits(Tensor([prompt * 4], dtype="int32")).numpy()[0, -1]
    np.testing.assert_allclose(model.prefill(prompt * 4).numpy()[0], full, rtol=1e-4, atol=1e-4)
    assert sorted(model.chunk_jits) == [(32, True)]  # 28 tokens: one chunk of 32 (their power of two, max_context)
    full = model.logits(Tensor([prompt[:3]], dtype="int32")).numpy()[0, -1]
    np.testing.assert_allclose(model.prefill(prompt[:3]).numpy()[0], full, rtol=1e-4, atol=1e-4)
    assert (16, True) in model.chunk_jits


def test_prefill_checks_its_arguments() -> None:
    model = _cached_model(4)
    with pytest.raises(ValueError, match=r"prefill: expected 1\.\.4 tokens .*: got 5"):
        model.prefill([1, 2, 3, 4, 5])
    with pytest.raises(ValueError, match=r"prefill: expected 1\.\.4 tokens .*: got 0"):
        model.prefill([])
    with pytest.raises(ValueError, match="prefill: chunk_size must be >= 1: got 0"):
        model.prefill([1], 0)


def test_greedy_generation_matches_torch() -> None:
    model = _cached_model(40)
    ref = TorchLlama({k: v.detach() for k, v in _torch_weights(model).items()}, model.config)
    prompt = [1, 2, 3, 4]
    ours = [t for _, t in zip(range(24), model.generate(prompt), strict=False)]
    assert ours == ref.greedy(prompt, 24)


def test_generate_checks_its_arguments() -> None:
    model = _cached_model(4)
    with pytest.raises(ValueError, match="fills max_context"):
        next(model.generate([1, 2, 3, 4]))
    with pytest.raises(ValueError, match="top_p must be in"):
        next(model.generate([1], top_p=0.0))
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        next(model.generate([1], chunk_size=0))
    # the cache ends at max_context: generation stops there
    assert len(list(model.generate([1, 2]))) == 3


def test_one_token_at_a_bound_position_ignores_the_cache_past_it() -> None:
    """A single token at a bound start_pos attends over the whole cache with the later positions masked: stale values
    there (a previous, longer generation) change nothing, and the result is the slice-to-start_pos one's."""
    from fusegrad.llm.model import attend_with_cache

    rng = np.random.default_rng(3)
    q, k, v = (Tensor(rng.standard_normal((1, 4, 1, 8)).astype(np.float32)) for _ in range(3))
    stale = rng.standard_normal((2, 1, 4, 10, 8)).astype(np.float32) * 100
    sliced = attend_with_cache(Tensor(stale).contiguous().realize(), q, k, v, 5).numpy()
    position = UOp.variable("start_pos", 1, 9).bind(5)
    masked = attend_with_cache(Tensor(stale).contiguous().realize(), q, k, v, position).numpy()
    np.testing.assert_allclose(masked, sliced, rtol=1e-5, atol=1e-5)
