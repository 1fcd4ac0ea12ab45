"""fusegrad.llm.tokenizer on a small vocabulary learned here: round trips, the reference's tokenizer as oracle, and
the same tokenizer read from a tokenizer.json and from GGUF metadata (written by the gguf package). No downloads."""

from __future__ import annotations

import collections
import importlib
import itertools
import json
import pathlib
import sys
import types

import gguf
import pytest

from fusegrad.llm.gguf import gguf_load
from fusegrad.llm.tokenizer import SimpleTokenizer, byte_alphabet, word_pattern

TRAIN = "the cat sat on the mat. the hat is flat; that cat is fat! 123 4567 théâtre naïve\n\nthe end " * 3
SPECIAL = {"<|begin_of_text|>": 1000, "<|eot_id|>": 1001}
SAMPLES = ["the cat", "  the   hat\n\n\tis flat", "théâtre 2024!!", "emoji 🙂 and 日本語", "", "a<|eot_id|>b the",
           "that's THE end's", "x\r\ny 12345678"]  # fmt: skip


def _learn_merges(text: str, count: int) -> list[tuple[str, str]]:
    """A tiny BPE trainer: merge the most frequent adjacent pair inside words, `count` times."""
    alphabet = byte_alphabet()
    words = [[alphabet[b] for b in w.encode()] for w in word_pattern("llama3").findall(text)]
    merges = []
    for _ in range(count):
        pairs = collections.Counter(p for w in words for p in itertools.pairwise(w))
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], p))
        merges.append(best)
        words = [_join(w, best) for w in words]
    return merges


def _join(word: list[str], pair: tuple[str, str]) -> list[str]:
    out: list[str] = []
    for s in word:
        if out and (out[-1], s) == pair:  # the merged symbol never matches again
            out[-1] += s
        else:
            out.append(s)
    return out


MERGES = _learn_merges(TRAIN, 40)
# byte tokens 0..255, then each merge's token in merge order: the id order is the merge order
VOCAB = {c: i for i, c in enumerate(byte_alphabet().values())} | {a + b: 256 + i for i, (a, b) in enumerate(MERGES)}


def test_merges_shorten_and_round_trip() -> None:
    tok = SimpleTokenizer(VOCAB, SPECIAL, merges=MERGES)
    assert len(tok.encode("the cat")) < len(b"the cat")
    assert "Ġthe" in VOCAB  # the most frequent word of TRAIN is one token
    assert tok.encode(" the") == [VOCAB["Ġthe"]]
    for text in SAMPLES:
        assert tok.decode(tok.encode(text)) == text
    assert tok.encode("a<|eot_id|>b")[1] == 1001
    assert tok.is_end(1001) is False
    assert SimpleTokenizer(VOCAB, SPECIAL, eot_id=1001).is_end(1001)


def _reference_cli(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """The reference's tinygrad.llm.cli; its model module needs kernels the pip package lacks, and the tokenizer
    does not use it, so a stand-in module takes its place while cli imports."""
    pytest.importorskip("tinygrad")
    monkeypatch.setitem(sys.modules, "tinygrad.llm.model", types.SimpleNamespace(Transformer=None))
    monkeypatch.delitem(sys.modules, "tinygrad.llm.cli", raising=False)
    return importlib.import_module("tinygrad.llm.cli")


def test_id_ranks_equal_merge_ranks_and_match_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    ours_ids = SimpleTokenizer(VOCAB, SPECIAL)
    ours_merges = SimpleTokenizer(VOCAB, SPECIAL, merges=MERGES)
    cli = _reference_cli(monkeypatch)
    reference = cli.SimpleTokenizer(VOCAB, SPECIAL, "llama3")
    for text in SAMPLES:
        assert ours_ids.encode(text) == ours_merges.encode(text) == reference.encode(text), text


def test_gpt2_preset_splits_like_gpt2() -> None:
    assert word_pattern("gpt2").findall("I'm  12345 x!?") == ["I", "'m", " ", " 12345", " x", "!?"]
    assert word_pattern("llama3").findall("I'm  12345 x!?") == ["I", "'m", " ", " ", "123", "45", " x", "!?"]


def test_from_tokenizer_json(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "tokenizer.json"
    added = [{"id": i, "content": t, "special": True} for t, i in SPECIAL.items()]
    pre = {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}}
    model = {"type": "BPE", "vocab": VOCAB | SPECIAL, "merges": [f"{a} {b}" for a, b in MERGES]}
    path.write_text(json.dumps({"model": model, "added_tokens": added, "pre_tokenizer": pre}))
    tok = SimpleTokenizer.from_tokenizer_json(path)
    ref = SimpleTokenizer(VOCAB, SPECIAL, merges=MERGES)
    for text in SAMPLES:
        assert tok.encode(text) == ref.encode(text)
    path.write_text(json.dumps({"model": {"type": "Unigram"}}))
    with pytest.raises(ValueError, match="model type 'Unigram' is not 'BPE'"):
        SimpleTokenizer.from_tokenizer_json(path)


def test_from_gguf_metadata(tmp_path: pathlib.Path) -> None:
    tokens = [""] * (max(SPECIAL.values()) + 1)
    types = [1] * len(tokens)
    for t, i in (VOCAB | SPECIAL).items():
        tokens[i] = t
    for i in SPECIAL.values():
        types[i] = 3  # control
    for i in range(len(tokens)):
        if not tokens[i]:
            tokens[i], types[i] = f"<unused{i}>", 5  # unused
    path = tmp_path / "tok.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("llama-bpe")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([f"{a} {b}" for a, b in MERGES])
    writer.add_bos_token_id(1000)
    writer.add_eos_token_id(1001)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    tok = SimpleTokenizer.from_gguf_kv(gguf_load(path)[0])
    assert (tok.bos_id, tok.eos_id) == (1000, 1001)
    assert tok.is_end(1001)
    ref = SimpleTokenizer(VOCAB, SPECIAL, merges=MERGES)
    for text in SAMPLES:
        assert tok.encode(text) == ref.encode(text)
        assert tok.decode(tok.encode(text)) == text


def test_errors() -> None:
    with pytest.raises(ValueError, match="unknown preset 'bert'"):
        SimpleTokenizer(VOCAB, {}, "bert")
    with pytest.raises(ValueError, match="GGUF tokenizer model 'llama' is not byte-level BPE"):
        SimpleTokenizer.from_gguf_kv({"tokenizer.ggml.model": "llama"})
    with pytest.raises(ValueError, match="no token for 'x'"):
        SimpleTokenizer({"a": 0}, {}).encode("ax")
    with pytest.raises(KeyError, match=r"unknown token ids \[5000\]"):
        SimpleTokenizer(VOCAB, {}).decode([5000])
