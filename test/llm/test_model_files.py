"""Transformer.from_gguf and Transformer.from_safetensors: tiny files (test/llm/tiny_files.py) load back to the
model that wrote them."""

from __future__ import annotations

import pathlib

import gguf
import numpy as np
import pytest

from fusegrad import Tensor
from fusegrad.llm.model import Transformer
from test.llm.tiny_files import BOS, random_model, write_gguf, write_hf_folder

IDS = Tensor([[BOS, 72, 101, 108, 108, 111]], dtype="int32")


def test_from_gguf_gives_the_same_logits(tmp_path: pathlib.Path) -> None:
    model = random_model()
    write_gguf(model, tmp_path / "tiny.gguf")
    loaded, kv = Transformer.from_gguf(tmp_path / "tiny.gguf", max_context=16)
    assert kv["general.architecture"] == "llama"
    assert loaded.config.max_context == 16
    assert loaded.config.n_kv_heads == 2
    np.testing.assert_allclose(loaded.logits(IDS).numpy(), model.logits(IDS).numpy(), rtol=1e-5, atol=1e-5)


def test_from_gguf_q8_0_is_close(tmp_path: pathlib.Path) -> None:
    model = random_model()
    write_gguf(model, tmp_path / "tiny.gguf", gguf.GGMLQuantizationType.Q8_0)
    loaded, _ = Transformer.from_gguf(tmp_path / "tiny.gguf")
    want = model.logits(IDS).numpy()
    got = loaded.logits(IDS).numpy()
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()  # 8-bit weights: close, not equal
    assert not np.array_equal(got, want)


def test_from_safetensors_gives_the_same_logits(tmp_path: pathlib.Path) -> None:
    model = random_model()
    write_hf_folder(model, tmp_path / "hf")
    for source in (tmp_path / "hf", tmp_path / "hf" / "model.safetensors"):
        loaded = Transformer.from_safetensors(source, max_context=16)
        np.testing.assert_allclose(loaded.logits(IDS).numpy(), model.logits(IDS).numpy(), rtol=1e-5, atol=1e-5)


def test_missing_or_wrong_files(tmp_path: pathlib.Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"need \.safetensors weights and config\.json"):
        Transformer.from_safetensors(tmp_path)
    writer = gguf.GGUFWriter(str(tmp_path / "gpt2.gguf"), "gpt2")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    with pytest.raises(ValueError, match="architecture 'gpt2' is not supported"):
        Transformer.from_gguf(tmp_path / "gpt2.gguf")
