"""Run a LLaMA-style model file: continue a prompt with a GGUF file or a Hugging Face safetensors checkpoint.

Run `python -m fusegrad.examples.llama --model FILE --prompt "Once upon a time"` (or `--help`). FILE is a .gguf
(LLaMA architecture; F32/F16/Q4_0/Q4_1/Q8_0/Q6_K weights, tokenizer from its metadata) or a .safetensors file or
folder with config.json and tokenizer.json beside it. Nothing is downloaded. Decoding uses the KV cache: one TinyJit
capture replays for every position.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

from fusegrad.helpers import DEV
from fusegrad.llm.model import Transformer
from fusegrad.llm.sampling import check_sampling
from fusegrad.llm.tokenizer import SimpleTokenizer


def load(path: pathlib.Path, max_context: int, tokenizer: pathlib.Path | None) -> tuple[Transformer, SimpleTokenizer]:
    """The model and its tokenizer; SystemExit with a message for a missing or unrecognised file."""
    if not path.exists():
        raise SystemExit(f"llama: no model at {path}: pass a .gguf file or a .safetensors file/folder with --model")
    if path.suffix == ".gguf":
        model, kv = Transformer.from_gguf(path, max_context)
        return model, SimpleTokenizer.from_tokenizer_json(tokenizer) if tokenizer else SimpleTokenizer.from_gguf_kv(kv)
    if path.suffix != ".safetensors" and not path.is_dir():
        raise SystemExit(f"llama: {path} is neither .gguf nor .safetensors (nor a folder of safetensors shards)")
    folder = path if path.is_dir() else path.parent
    tokenizer_json = tokenizer or folder / "tokenizer.json"
    if not tokenizer_json.is_file():
        raise SystemExit(f"llama: no tokenizer.json in {folder}: pass one with --tokenizer")
    return Transformer.from_safetensors(path, max_context), SimpleTokenizer.from_tokenizer_json(tokenizer_json)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", required=True, type=pathlib.Path, help=".gguf file, or .safetensors file/folder")
    parser.add_argument("--tokenizer", type=pathlib.Path, default=None, help="a tokenizer.json to use instead")
    parser.add_argument("--prompt", default="Once upon a time", help="text to continue")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens to generate at most (default 64)")
    parser.add_argument("--max-context", type=int, default=512, help="KV cache length in tokens (default 512)")
    parser.add_argument("--temperature", type=float, default=0.7, help="0 is greedy (default 0.7)")
    parser.add_argument("--top-k", type=int, default=0, help="sample from the k most likely (default 0: all)")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus: smallest set with this mass (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampling (default 0)")
    parser.add_argument("--device", default=None, help="device to run on (default: Device.DEFAULT)")
    args = parser.parse_args(argv)
    if args.max_tokens < 0 or args.max_context < 2:
        parser.error("--max-tokens must be >= 0 and --max-context >= 2")
    try:
        check_sampling(args.temperature, args.top_k, args.top_p)
    except ValueError as e:
        parser.error(str(e))
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.device is not None:
        DEV.value = args.device  # every tensor below is created on Device.DEFAULT
    begun = time.perf_counter()
    model, tokenizer = load(args.model, args.max_context, args.tokenizer)
    prompt = ([] if tokenizer.bos_id is None else [tokenizer.bos_id]) + tokenizer.encode(args.prompt)
    cfg = model.config
    shape = f"{cfg.num_blocks} blocks, dim {cfg.dim}, {cfg.n_heads}/{cfg.n_kv_heads} heads, vocab {cfg.vocab_size}"
    took = time.perf_counter() - begun
    print(f"loaded {args.model} in {took:.1f} s: {shape}; prompt {len(prompt)} tokens", file=sys.stderr)
    sys.stdout.write(args.prompt)
    made, shown, first = [], "", time.perf_counter()
    stream = model.generate(prompt, args.temperature, args.top_k, args.top_p, np.random.default_rng(args.seed))
    for token in stream if args.max_tokens else ():
        if tokenizer.is_end(token):
            break
        made.append(token)
        text = tokenizer.decode(made).rstrip("\ufffd")  # hold back a character whose bytes are not all out yet
        sys.stdout.write(text[len(shown) :])
        sys.stdout.flush()
        shown = text
        if len(made) == args.max_tokens or len(prompt) + len(made) >= model.max_context:
            break
    took = time.perf_counter() - first
    print(f"\n{len(made)} tokens in {took:.2f} s ({len(made) / max(took, 1e-9):.1f} tokens/s)", file=sys.stderr)


if __name__ == "__main__":
    main()
