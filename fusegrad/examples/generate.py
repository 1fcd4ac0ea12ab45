"""Continue a prompt with the character model that `python -m fusegrad.examples.gpt` trained, decoding with a KV cache.

Run `python -m fusegrad.examples.generate --prompt "def "` (or `--help`). It reads the gpt example's checkpoint
(default checkpoints/gpt.safetensors; train first if there is none), runs the prompt once, then each new character
alone at a bound `start_pos` variable: one TinyJit capture replays for every position. When the model's context is
full, the last half of the text is run again from position 0 (the model only knows `context` positions).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time
from collections.abc import Iterator

import numpy as np

from fusegrad import Tensor, UOp
from fusegrad.engine.jit import TinyJit
from fusegrad.examples.gpt import GPT, Block, load_checkpoint
from fusegrad.helpers import DEV
from fusegrad.llm.model import StartPos, attend_with_cache
from fusegrad.llm.sampling import check_sampling, sample
from fusegrad.nn.datasets import decode, encode
from fusegrad.nn.state import load_state_dict


class CachedGPT:
    """The gpt example's model run with a KV cache per block: (1, T) ids at start_pos -> logits of the last one."""

    def __init__(self, model: GPT) -> None:
        self.model, self.cfg = model, model.cfg
        head_dim = self.cfg.dim // self.cfg.heads
        shape = (2, 1, self.cfg.heads, self.cfg.context, head_dim)
        self.caches = [Tensor.zeros(*shape).contiguous().realize() for _ in model.blocks]
        self.step_jit: TinyJit[Tensor] = TinyJit(self.forward)

    def _attention(self, block: Block, cache: Tensor, x: Tensor, start_pos: StartPos) -> Tensor:
        b, t, c = x.shape
        # (B, T, 3C) -> (3, B, heads, T, C/heads), the gpt example's layout
        qkv = block.attn.qkv(x).reshape(b, t, 3, self.cfg.heads, c // self.cfg.heads).permute(2, 0, 3, 1, 4)
        y = attend_with_cache(cache, qkv[0], qkv[1], qkv[2], start_pos)
        return block.attn.out(y.transpose(1, 2).reshape(b, t, c))

    def forward(self, ids: Tensor, start_pos: StartPos) -> Tensor:
        """(1, T) ids -> (1, vocab) logits of the last position, realized."""
        t = ids.shape[1]
        x = self.model.tokens(ids) + self.model.positions.weight[start_pos : start_pos + t]  # (1, T, C)
        for block, cache in zip(self.model.blocks, self.caches, strict=True):
            x = x + self._attention(block, cache, block.norm1(x), start_pos)
            x = x + block.down(block.up(block.norm2(x)).gelu())
        return self.model.head(self.model.norm(x[:, -1, :])).realize()

    def continue_text(
        self, prompt: list[int], n: int, sampling: tuple[float, int, float], rng: np.random.Generator
    ) -> Iterator[int]:
        """Yield n sampled ids after `prompt` (temperature, top_k, top_p in `sampling`)."""
        context = self.cfg.context
        position = UOp.variable("start_pos", 1, context - 1)
        ids = list(prompt[-context:])
        logits, pos = self.forward(Tensor([ids], dtype="int32"), 0), len(ids)
        for _ in range(n):
            ids.append(sample(logits.numpy()[0], *sampling, rng=rng))
            yield ids[-1]
            if pos == context:  # full: run the last half again from position 0 (one prompt length, one compile)
                ids = ids[-(context // 2) :]
                logits, pos = self.forward(Tensor([ids], dtype="int32"), 0), len(ids)
                continue
            logits = self.step_jit(Tensor([[ids[-1]]], dtype="int32").realize(), position.bind(pos))
            pos += 1


def load_model(path: pathlib.Path) -> GPT:
    """The gpt example's model with the weights of its checkpoint; SystemExit telling the user to train if none."""
    if not path.is_file():
        raise SystemExit(
            f"generate: no checkpoint at {path}: train one first with `python -m fusegrad.examples.gpt` "
            "(it saves checkpoints/gpt.safetensors), or pass --checkpoint"
        )
    cfg, state, _, step = load_checkpoint(path)
    model = GPT(cfg)
    load_state_dict(model, state)
    print(f"loaded {path} (step {step}: {cfg.layers} layers, dim {cfg.dim}, context {cfg.context})", file=sys.stderr)
    return model


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--checkpoint", default="checkpoints/gpt.safetensors", help="the gpt example's checkpoint")
    parser.add_argument("--prompt", default="def ", help="text to continue (default 'def ')")
    parser.add_argument("--length", type=int, default=300, help="characters to generate (default 300)")
    parser.add_argument("--temperature", type=float, default=0.8, help="0 is greedy (default 0.8)")
    parser.add_argument("--top-k", type=int, default=0, help="sample from the k most likely (default 0: all)")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus: smallest set with this mass (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampling (default 0)")
    parser.add_argument("--device", default=None, help="device to run on (default: Device.DEFAULT)")
    args = parser.parse_args(argv)
    if args.length < 0 or not args.prompt:
        parser.error("--length must be >= 0 and --prompt non-empty")
    try:
        check_sampling(args.temperature, args.top_k, args.top_p)
    except ValueError as e:
        parser.error(str(e))
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.device is not None:
        DEV.value = args.device  # every tensor below is created on Device.DEFAULT
    model = CachedGPT(load_model(pathlib.Path(args.checkpoint)))
    rng = np.random.default_rng(args.seed)
    sys.stdout.write(args.prompt)
    begun, made = time.perf_counter(), 0
    with Tensor.test():
        for token in model.continue_text(
            encode(args.prompt).tolist(), args.length, (args.temperature, args.top_k, args.top_p), rng
        ):
            sys.stdout.write(decode([token]))
            sys.stdout.flush()
            made += 1
    took = time.perf_counter() - begun
    print(f"\n{made} characters in {took:.2f} s ({made / max(took, 1e-9):.1f} characters/s)", file=sys.stderr)


if __name__ == "__main__":
    main()
