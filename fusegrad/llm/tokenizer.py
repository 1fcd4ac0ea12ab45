"""Byte-level BPE tokenizer (GPT-2 / LLaMA 3 style) read from a Hugging Face `tokenizer.json` or GGUF metadata.

Text is split into words by the preset's pattern, each word's UTF-8 bytes become one symbol per byte (in the GPT-2
byte-to-character alphabet that vocabularies are written in), and adjacent symbols merge pair by pair, lowest rank
first: the rank is the merge list's order when there is one, else the id of the merged token (tiktoken-style
vocabularies). Entry point: `SimpleTokenizer.from_gguf_kv(kv)` / `SimpleTokenizer.from_tokenizer_json(path)`.
"""

from __future__ import annotations

import functools
import json
import pathlib
import re
import unicodedata
from collections.abc import Sequence
from typing import Any

# presets whose words split like LLaMA 3's pattern; "gpt2" splits like GPT-2's
_LLAMA3_PRESETS = ("llama3", "llama-v3", "llama-bpe", "qwen2", "olmo", "smollm", "dbrx", "default")
_GPT2_PRESETS = ("gpt2", "gpt-2")
_BOS_NAMES = ("<|begin_of_text|>", "<s>", "<|startoftext|>")
_EOS_NAMES = ("<|end_of_text|>", "</s>", "<|endoftext|>")
_EOT_NAMES = ("<|eot_id|>", "<|im_end|>")
_CONTRACTIONS = "'s|'t|'re|'ve|'m|'ll|'d"


def byte_alphabet() -> dict[int, str]:
    """Byte -> the character that stands for it in byte-level vocabularies: printable Latin-1 bytes are themselves,
    the other 68 take the characters from U+0100 on, in byte order (so a space is 'Ġ' and a newline 'Ċ').

    Returns:
        A dict of all 256 bytes to one-character strings.

    Examples:
        >>> alphabet = byte_alphabet()
        >>> alphabet[ord("a")], alphabet[ord(" ")], alphabet[ord("\\n")]
        ('a', 'Ġ', 'Ċ')
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    others = [b for b in range(256) if b not in printable]
    return {b: chr(b) for b in printable} | {b: chr(256 + i) for i, b in enumerate(others)}


# no letter or number lies past plane 3 (Unicode 15's last one is U+323AF): the scan stops there
_LAST_SCANNED = 0x3FFFF


@functools.cache
def _category_classes() -> tuple[str, str]:
    """Regex character-class bodies for Unicode letters (L*) and numbers (N*): runs of consecutive code points are
    written as ranges, which keeps each class short and the pattern fast."""
    runs: dict[str, list[list[int]]] = {"L": [], "N": []}
    for cp in range(_LAST_SCANNED + 1):
        kind = unicodedata.category(chr(cp))[0]
        if kind not in runs:
            continue
        if runs[kind] and runs[kind][-1][1] == cp - 1:
            runs[kind][-1][1] = cp
        else:
            runs[kind].append([cp, cp])
    letters, numbers = ("".join(_range(a, b) for a, b in runs[k]) for k in "LN")
    return letters, numbers


def _range(first: int, last: int) -> str:
    return re.escape(chr(first)) if first == last else f"{re.escape(chr(first))}-{re.escape(chr(last))}"


@functools.cache
def word_pattern(preset: str) -> re.Pattern[str]:
    """The compiled word-splitting pattern of a preset (LLaMA 3's or GPT-2's), with exact letter/number classes."""
    letters, numbers = _category_classes()
    if preset in _GPT2_PRESETS:
        return re.compile(f"{_CONTRACTIONS}| ?[{letters}]+| ?[{numbers}]+| ?[^\\s{letters}{numbers}]+|\\s+(?!\\S)|\\s+")
    return re.compile(
        f"(?i:{_CONTRACTIONS})|[^\\r\\n{letters}{numbers}]?[{letters}]+|[{numbers}]{{1,3}}"
        f"| ?[^\\s{letters}{numbers}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
    )


class SimpleTokenizer:
    """Byte-level BPE: `encode(text) -> ids`, `decode(ids) -> text`.

    normal_tokens maps vocabulary strings (in the byte alphabet) to ids; special_tokens (like "<|eot_id|>") are
    matched literally in the text and never merged. merges, when given, are the ranked pairs; without them a pair
    ranks by the id of the token it makes.

    Args:
        normal_tokens: vocabulary string (in the byte alphabet) -> id.
        special_tokens: special token text -> id.
        preset: the word-splitting pattern: "llama3" (and its aliases such as "llama-bpe") or "gpt2".
        bos_id: the id a prompt starts with, if the model wants one.
        eos_id: the end-of-text id (-1: none).
        eot_id: the end-of-turn id of chat models, if any.
        merges: the ranked merge pairs (None: rank a pair by the id of the token it makes).

    Raises:
        ValueError: an unknown preset, or (when encoding) a byte with no token.

    Examples:
        >>> tokenizer = SimpleTokenizer({"a": 0, "b": 1, "ab": 2}, {"<s>": 3})
        >>> tokenizer.encode("<s>ab")
        [3, 2]
    """

    def __init__(
        self,
        normal_tokens: dict[str, int],
        special_tokens: dict[str, int],
        preset: str = "llama3",
        bos_id: int | None = None,
        eos_id: int = 0,
        eot_id: int | None = None,
        merges: Sequence[tuple[str, str]] | None = None,
    ) -> None:
        if preset not in _LLAMA3_PRESETS + _GPT2_PRESETS:
            known = ", ".join(_LLAMA3_PRESETS + _GPT2_PRESETS)
            raise ValueError(f"SimpleTokenizer: unknown preset {preset!r}: expected one of {known}")
        self.preset, self.bos_id, self.eos_id, self.eot_id = preset, bos_id, eos_id, eot_id
        self._words = word_pattern(preset)
        self._vocab = dict(normal_tokens)
        self._special = dict(special_tokens)
        self._ranks: dict[tuple[str, str], int] | None = None
        if merges is not None:
            self._ranks = {(a, b): i for i, (a, b) in enumerate(merges)}
        self._alphabet = byte_alphabet()
        to_byte = {c: b for b, c in self._alphabet.items()}
        self._id_bytes = {
            i: bytes(to_byte[c] for c in tok) for tok, i in self._vocab.items() if set(tok) <= to_byte.keys()
        }
        self._id_bytes |= {i: tok.encode() for tok, i in self._special.items()}
        longest_first = sorted(self._special, key=len, reverse=True)
        self._special_split = re.compile("(" + "|".join(map(re.escape, longest_first)) + ")") if longest_first else None
        self._cache: dict[str, list[int]] = {}

    @staticmethod
    def from_gguf_kv(kv: dict[str, Any]) -> SimpleTokenizer:
        """The tokenizer in GGUF metadata (`tokenizer.ggml.*`: tokens, token types, merges, pre, bos/eos/eot ids).

        Args:
            kv: the metadata of a GGUF file, as `gguf_load` returns it.

        Returns:
            The tokenizer; tokens whose type is not 1 (normal) are special.

        Raises:
            ValueError: the file's tokenizer model is not byte-level BPE ("gpt2").

        Examples:
            >>> kv = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b", "ab"],
            ...       "tokenizer.ggml.merges": ["a b"], "tokenizer.ggml.pre": "gpt2"}
            >>> SimpleTokenizer.from_gguf_kv(kv).encode("ab")
            [2]
        """
        model = kv.get("tokenizer.ggml.model")
        if model != "gpt2":
            raise ValueError(f"SimpleTokenizer: GGUF tokenizer model {model!r} is not byte-level BPE: expected 'gpt2'")
        tokens, types = kv["tokenizer.ggml.tokens"], kv.get("tokenizer.ggml.token_type", [])
        normal = {tok: i for i, tok in enumerate(tokens) if i >= len(types) or types[i] == 1}
        special = {tok: i for i, tok in enumerate(tokens) if i < len(types) and types[i] != 1}
        merges = (
            [tuple(m.split(" ", 1)) for m in kv["tokenizer.ggml.merges"]] if "tokenizer.ggml.merges" in kv else None
        )
        preset = kv.get("tokenizer.ggml.pre", "llama3")
        bos = kv.get("tokenizer.ggml.bos_token_id") if kv.get("tokenizer.ggml.add_bos_token", True) else None
        eos, eot = kv.get("tokenizer.ggml.eos_token_id", 0), kv.get("tokenizer.ggml.eot_token_id")
        return SimpleTokenizer(normal, special, preset, bos, eos, eot, merges)

    @staticmethod
    def from_tokenizer_json(path: str | pathlib.Path) -> SimpleTokenizer:
        """The BPE model of a Hugging Face `tokenizer.json`: its vocab, merges and added (special) tokens.

        Args:
            path: the tokenizer.json file.

        Returns:
            The tokenizer; bos, eos and eot ids come from the usual special token names (`<|begin_of_text|>`,
            `<s>`, `</s>`, `<|eot_id|>`, ...).

        Raises:
            ValueError: the file's model is not BPE.

        Examples:
            >>> import json, pathlib, tempfile
            >>> path = pathlib.Path(tempfile.mkdtemp()) / "tokenizer.json"
            >>> _ = path.write_text(json.dumps({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2},
            ...     "merges": ["a b"]}, "added_tokens": [{"id": 3, "content": "</s>", "special": True}]}))
            >>> tokenizer = SimpleTokenizer.from_tokenizer_json(path)
            >>> tokenizer.encode("ab</s>"), tokenizer.eos_id
            ([2, 3], 3)
        """
        data = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
        model = data.get("model", {})
        if model.get("type") != "BPE":
            raise ValueError(f"SimpleTokenizer: {path}: model type {model.get('type')!r} is not 'BPE'")
        merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model.get("merges", [])]
        special = {t["content"]: t["id"] for t in data.get("added_tokens", []) if t.get("special", True)}
        normal = {tok: i for tok, i in model["vocab"].items() if tok not in special}
        preset = "llama3" if "{1,3}" in json.dumps(data.get("pre_tokenizer")) else "gpt2"
        # tokenizer.json does not say which tokens begin and end a text: the usual names do (-1: no end token)
        bos = next((special[t] for t in _BOS_NAMES if t in special), None)
        eos = next((special[t] for t in _EOS_NAMES if t in special), -1)
        eot = next((special[t] for t in _EOT_NAMES if t in special), None)
        return SimpleTokenizer(normal, special, preset, bos, eos, eot, merges)  # type: ignore[arg-type]

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` (no BOS added: prepend `bos_id` yourself).

        Args:
            text: any text; special tokens in it are matched literally.

        Returns:
            The ids, in order.

        Examples:
            >>> SimpleTokenizer({"a": 0, "b": 1, "ab": 2}, {}).encode("aab")
            [0, 2]
        """
        pieces = self._special_split.split(text) if self._special_split is not None else [text]
        ids: list[int] = []
        for piece in pieces:
            if piece in self._special:
                ids.append(self._special[piece])
                continue
            for word in self._words.findall(piece):
                ids.extend(self._encode_word(word))
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """The text of `ids`; bytes that are not valid UTF-8 read as U+FFFD.

        Args:
            ids: token ids.

        Returns:
            The decoded text.

        Raises:
            KeyError: an id the vocabulary lacks (named in the message).

        Examples:
            >>> SimpleTokenizer({"a": 0, "b": 1, "ab": 2}, {}).decode([2, 0])
            'aba'
        """
        unknown = [i for i in ids if i not in self._id_bytes]
        if unknown:
            raise KeyError(f"decode: unknown token ids {unknown[:5]}: the vocabulary has {len(self._id_bytes)} tokens")
        return b"".join(self._id_bytes[i] for i in ids).decode("utf-8", errors="replace")

    def is_end(self, token_id: int) -> bool:
        """Whether token_id ends a generation (the eos or eot token).

        Args:
            token_id: a generated token id.

        Returns:
            True for the eos or eot id.

        Examples:
            >>> SimpleTokenizer({"a": 0}, {"</s>": 1}, eos_id=1).is_end(1)
            True
        """
        return token_id in (self.eos_id, self.eot_id)

    def _rank(self, pair: tuple[str, str]) -> int | None:
        if self._ranks is not None:
            return self._ranks.get(pair)
        return self._vocab.get(pair[0] + pair[1])

    def _encode_word(self, word: str) -> list[int]:
        if (cached := self._cache.get(word)) is not None:
            return cached
        symbols = [self._alphabet[b] for b in word.encode("utf-8")]
        while len(symbols) > 1:
            ranked = [
                (r, i) for i in range(len(symbols) - 1) if (r := self._rank((symbols[i], symbols[i + 1]))) is not None
            ]
            if not ranked:
                break
            best = min(ranked)[0]
            symbols = _merge(symbols, self._pair_at(symbols, ranked, best))
        missing = [s for s in symbols if s not in self._vocab]
        if missing:
            raise ValueError(
                f"encode: no token for {missing[0]!r} in {word!r}: the vocabulary lacks that byte sequence"
            )
        self._cache[word] = ids = [self._vocab[s] for s in symbols]
        return ids

    @staticmethod
    def _pair_at(symbols: list[str], ranked: list[tuple[int, int]], best: int) -> tuple[str, str]:
        i = next(i for r, i in ranked if r == best)
        return symbols[i], symbols[i + 1]


def _merge(symbols: list[str], pair: tuple[str, str]) -> list[str]:
    """Every non-overlapping occurrence of `pair`, left to right, joined into one symbol."""
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out
