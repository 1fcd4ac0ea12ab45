"""fusegrad.examples.llama on tiny GGUF and safetensors files (test/llm/tiny_files.py): greedy output equals the
model's own greedy tokens, decoded by the file's tokenizer; clear messages for missing files."""

from __future__ import annotations

import pathlib

import pytest

from fusegrad.examples import llama
from fusegrad.llm.model import Transformer
from fusegrad.llm.tokenizer import SimpleTokenizer
from test.llm.tiny_files import BOS, EOS, random_model, write_gguf, write_hf_folder


def _expected(model: Transformer, tokenizer: SimpleTokenizer, prompt: str, n: int) -> str:
    """What the command should print after the prompt: the greedy tokens up to the end token or n."""
    ids = [BOS, *tokenizer.encode(prompt)]
    out = []
    for token in model.generate(ids):
        if tokenizer.is_end(token) or len(out) == n:
            break
        out.append(token)
    return tokenizer.decode(out).rstrip("\ufffd")


@pytest.mark.parametrize("kind", ["gguf", "safetensors"])
def test_greedy_continuation(kind: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = random_model(1)
    if kind == "gguf":
        path = tmp_path / "tiny.gguf"
        write_gguf(model, path)
    else:
        write_hf_folder(model, tmp_path / "hf")
        path = tmp_path / "hf" / "model.safetensors"
    llama.main(["--model", str(path), "--prompt", "the tin", "--max-tokens", "8", "--temperature", "0",
                "--max-context", "32"])  # fmt: skip
    out, err = capsys.readouterr()
    reference, tokenizer = llama.load(path, 32, None)
    assert (tokenizer.bos_id, tokenizer.eos_id) == (BOS, EOS)
    assert out == "the tin" + _expected(reference, tokenizer, "the tin", 8)
    assert "tokens in" in err


def test_missing_and_unknown_files(tmp_path: pathlib.Path) -> None:
    with pytest.raises(SystemExit, match="no model at"):
        llama.main(["--model", str(tmp_path / "missing.gguf")])
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(SystemExit, match=r"neither \.gguf nor \.safetensors"):
        llama.main(["--model", str(tmp_path / "weights.bin")])
    write_hf_folder(random_model(), tmp_path / "hf")
    (tmp_path / "hf" / "tokenizer.json").unlink()
    with pytest.raises(SystemExit, match=r"no tokenizer\.json in"):
        llama.main(["--model", str(tmp_path / "hf")])


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        llama.main(["--help"])
    assert e.value.code == 0
    assert "--max-context" in capsys.readouterr().out
