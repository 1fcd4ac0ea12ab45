"""LLM inference, fusegrad vs torch (2 threads, eager), same random weights: prefill and decode tokens/s of LLaMA-style
models of about 15M and 110M parameters (fp32, batch 1), fusegrad's decode with and without TinyJit, the compiles and
captures over the decoded tokens, and whether greedy decoding picks the same tokens as torch.

Shapes are llama2.c's TinyStories models (15M: dim 288, 6 blocks, 6 heads; 110M: dim 768, 12 blocks, 12 heads; vocab
32000, tied embeddings). Usage: python bench/llm.py [--sizes 15M 110M] [--decode 256] [--prompt 128] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: fusegrad and test.llm.torch_llama

import fusegrad.engine.realize as realize_module
from fusegrad import Tensor, UOp
from fusegrad.llm.model import Transformer, TransformerConfig
from fusegrad.nn.state import get_state_dict, load_state_dict

SIZES = {
    "15M": {"num_blocks": 6, "dim": 288, "hidden_dim": 768, "n_heads": 6},
    "110M": {"num_blocks": 12, "dim": 768, "hidden_dim": 2048, "n_heads": 12},
}
VOCAB = 32000
AGREE_STEPS = 64  # greedy tokens compared with torch


@dataclass
class Figures:
    """One size's measurements; tokens/s unless named otherwise."""

    params: int
    prefill: float = 0.0
    decode_jit: float = 0.0
    decode_eager: float = 0.0
    torch_prefill: float = 0.0
    torch_decode: float = 0.0
    compiles_after_first: int = -1
    captures: int = -1
    same_tokens: int = 0


def make_config(size: str, context: int) -> TransformerConfig:
    shape = SIZES[size]
    head_dim = shape["dim"] // shape["n_heads"]
    return TransformerConfig(num_blocks=shape["num_blocks"], dim=shape["dim"], hidden_dim=shape["hidden_dim"],
                             n_heads=shape["n_heads"], n_kv_heads=shape["n_heads"], norm_eps=1e-5, vocab_size=VOCAB,
                             head_dim=head_dim, max_context=context)  # fmt: skip


def random_weights(model: Transformer, seed: int) -> dict[str, np.ndarray]:
    """N(0, 0.02) matrices, norm weights 1, the output tied to the embedding (llama2.c's small models)."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, value in get_state_dict(model).items():
        if name == "output.weight":
            continue
        is_norm = name.endswith("norm.weight")
        weights[name] = (
            np.ones(value.shape, np.float32)
            if is_norm
            else (rng.standard_normal(value.shape) * 0.02).astype(np.float32)
        )
    weights["output.weight"] = weights["token_embd.weight"]
    return weights


def build_fusegrad(cfg: TransformerConfig, weights: dict[str, np.ndarray]) -> Transformer:
    model = Transformer(cfg)
    load_state_dict(
        model, {k: Tensor(v) for k, v in weights.items() if k != "output.weight"}, strict=False, verbose=False
    )
    model.output.weight = model.token_embd.weight  # tied: one tensor
    return model


@contextlib.contextmanager
def count_compiles() -> Iterator[list[int]]:
    """A list that grows by one at every kernel compile inside the block."""
    compiles: list[int] = []
    real = realize_module.get_program

    def counted(ast: Any, renderer: Any) -> Any:
        compiles.append(1)
        return real(ast, renderer)

    realize_module.get_program = counted
    try:
        yield compiles
    finally:
        realize_module.get_program = real


def best_seconds(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


@dataclass
class Decoded:
    """A greedy decode: its tokens, tokens/s from the third step on, compiles after the first step, captures."""

    tokens: list[int]
    per_second: float
    compiles_after_first: int
    captures: int


def fusegrad_decode(model: Transformer, prompt: list[int], steps: int, jit: bool) -> Decoded:
    """Greedy decoding after the prompt, through the model's rollout_jit or the plain forward."""
    with count_compiles() as compiles:
        logits = model(Tensor([prompt], dtype="int32"), 0)
        position = UOp.variable("start_pos", 1, model.max_context - 1)
        tokens, captures, begun, after_first = [], set(), 0.0, 0
        for i in range(steps):
            tokens.append(int(logits.numpy()[0].argmax()))
            if i == 1:
                after_first = len(compiles)
            if i == 2:
                begun = time.perf_counter()  # the first step ran eagerly and the second captured: replays from here
            ids, pos = Tensor([[tokens[-1]]], dtype="int32"), position.bind(len(prompt) + i)
            logits = model(ids, pos) if jit else model._forward_realized(ids, pos)
            if model.rollout_jit.captured is not None:
                captures.add(id(model.rollout_jit.captured))
        per_second = (steps - 2) / (time.perf_counter() - begun)
    return Decoded(tokens, per_second, len(compiles) - after_first, len(captures))


def measure_fusegrad(size: str, args: argparse.Namespace, prompt: list[int], figures: Figures) -> list[int]:
    cfg = make_config(size, len(prompt) + args.decode + 1)
    model = build_fusegrad(cfg, random_weights(Transformer(cfg), args.seed))
    ids = Tensor([prompt], dtype="int32")
    figures.prefill = len(prompt) / best_seconds(lambda: model(ids, 0), args.repeats)
    figures.decode_eager = fusegrad_decode(model, prompt, args.eager_decode, jit=False).per_second
    decoded = fusegrad_decode(model, prompt, args.decode, jit=True)
    figures.decode_jit, figures.compiles_after_first, figures.captures = (
        decoded.per_second, decoded.compiles_after_first, decoded.captures
    )  # fmt: skip
    return decoded.tokens


def measure_torch(size: str, args: argparse.Namespace, prompt: list[int], figures: Figures) -> list[int]:
    import torch

    from test.llm.torch_llama import TorchLlama

    torch.set_num_threads(2)
    cfg = make_config(size, len(prompt) + args.decode + 1)
    weights = {k: torch.from_numpy(v) for k, v in random_weights(Transformer(cfg), args.seed).items()}
    model = TorchLlama(weights, cfg)
    ids = torch.tensor([prompt])

    def prefill() -> None:
        model.cache = []
        with torch.no_grad():
            model.logits(ids, 0, cached=True)

    figures.torch_prefill = len(prompt) / best_seconds(prefill, args.repeats)
    begun = time.perf_counter()
    tokens = model.greedy(prompt, args.decode)  # includes the prefill: subtract its best time
    figures.torch_decode = args.decode / (time.perf_counter() - begun - len(prompt) / figures.torch_prefill)
    return tokens


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES), help="models (default both)")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens for prefill (default 128)")
    parser.add_argument("--decode", type=int, default=256, help="tokens decoded with the JIT (default 256)")
    parser.add_argument("--eager-decode", type=int, default=16, help="tokens decoded without it (default 16)")
    parser.add_argument("--repeats", type=int, default=3, help="prefill runs; the best counts (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights and prompt (default 0)")
    parser.add_argument("--quick", action="store_true", help="15M only, prompt 32, decode 80, eager 8")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.prompt, args.decode, args.eager_decode = ["15M"], 32, 80, 8
    if args.prompt < 2 or args.decode < AGREE_STEPS or args.eager_decode < 4 or args.repeats < 1:
        parser.error(f"--prompt >= 2, --decode >= {AGREE_STEPS}, --eager-decode >= 4 and --repeats >= 1 are needed")
    return args


def report(size: str, f: Figures) -> None:
    verdict = "same" if f.same_tokens == AGREE_STEPS else f"first {f.same_tokens} same"
    print(
        f"{size:>5} ({f.params / 1e6:.1f}M params)  prefill {f.prefill:8.1f} vs torch {f.torch_prefill:8.1f} tok/s "
        f"({f.prefill / f.torch_prefill:.2f}x)  decode jit {f.decode_jit:6.1f}, no jit {f.decode_eager:6.1f} "
        f"vs torch {f.torch_decode:6.1f} tok/s ({f.decode_jit / f.torch_decode:.2f}x)  compiles after step 1: "
        f"{f.compiles_after_first}, captures {f.captures}  greedy {AGREE_STEPS} steps: {verdict}"
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f}; prompt {args.prompt}, decode {args.decode} tokens, fp32, batch 1")
    for size in args.sizes:
        prompt = np.random.default_rng(args.seed).integers(0, VOCAB, args.prompt).tolist()
        cfg = make_config(size, 2)
        params = sum(v.size for k, v in random_weights(Transformer(cfg), 0).items() if k != "output.weight")
        figures = Figures(params)
        ours = measure_fusegrad(size, args, prompt, figures)
        theirs = measure_torch(size, args, prompt, figures)
        agree = [a == b for a, b in zip(ours[:AGREE_STEPS], theirs[:AGREE_STEPS], strict=True)]
        figures.same_tokens = agree.index(False) if False in agree else AGREE_STEPS
        report(size, figures)


if __name__ == "__main__":
    main()
