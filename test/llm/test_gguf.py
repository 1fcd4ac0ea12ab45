"""fusegrad.llm.gguf against files written by the `gguf` package and its own dequantisation."""

from __future__ import annotations

import pathlib

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q  # the package's usual short name

from fusegrad import Tensor
from fusegrad.llm.gguf import ggml_data_to_tensor, gguf_load
from fusegrad.nn import state

RNG = np.random.default_rng(0)


def _q6_k_blocks(rows: int) -> np.ndarray:
    """Random Q6_K bytes (the gguf package cannot quantise to Q6_K): random bits with a small finite f16 scale."""
    raw = RNG.integers(0, 256, size=(rows, 210), dtype=np.uint8)
    raw[:, 208:210] = np.full((rows, 1), 0.01, dtype=np.float16).view(np.uint8)
    return raw


def _write(path: pathlib.Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """A GGUF file with one tensor per type; returns name -> (what gguf_load should give, stored raw data)."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_string("general.name", "tiny")
    writer.add_uint32("llama.block_count", 2)
    writer.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    writer.add_bool("flag", True)
    writer.add_array("tokenizer.ggml.tokens", ["a", "b", "Ġc"])
    writer.add_array("scores", [0.5, -1.0])
    expected: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for qtype in (Q.Q4_0, Q.Q4_1, Q.Q8_0):
        x = RNG.standard_normal((3, 64)).astype(np.float32)
        raw = gguf.quants.quantize(x, qtype)
        writer.add_tensor(qtype.name, raw, raw_dtype=qtype)
        expected[qtype.name] = (gguf.quants.dequantize(raw, qtype), raw)
    raw6 = _q6_k_blocks(2)
    writer.add_tensor("Q6_K", raw6, raw_dtype=Q.Q6_K)
    expected["Q6_K"] = (gguf.quants.dequantize(raw6, Q.Q6_K), raw6)
    for name, dtype in (("F32", np.float32), ("F16", np.float16), ("I32", np.int32)):
        x = (RNG.standard_normal((2, 5)) * 10).astype(dtype)
        writer.add_tensor(name, x)
        expected[name] = (x, x)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return expected


def test_tensors_and_metadata_match_the_gguf_package(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "tiny.gguf"
    expected = _write(path)
    kv, weights = gguf_load(path)
    assert kv["general.name"] == "tiny"
    assert kv["general.architecture"] == "llama"
    assert kv["llama.block_count"] == 2
    assert kv["flag"] is True
    assert kv["tokenizer.ggml.tokens"] == ["a", "b", "Ġc"]
    assert kv["scores"] == [0.5, -1.0]
    assert kv["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)
    assert set(weights) == set(expected)
    for name, (want, _) in expected.items():
        got = weights[name]
        assert got.shape == want.shape, name
        np.testing.assert_array_equal(got.numpy(), want, err_msg=name)
    assert weights["F16"].dtype.name == "half"
    assert weights["Q6_K"].shape == (2, 256)
    # the same through a Tensor of the file and through nn.state
    assert (gguf_load(Tensor(np.fromfile(path, dtype=np.uint8)))[1]["Q4_1"].numpy() == expected["Q4_1"][0]).all()
    assert state.gguf_load(str(path))[0]["general.name"] == "tiny"


def test_ggml_data_to_tensor_on_raw_blocks() -> None:
    raw = _q6_k_blocks(3)
    got = ggml_data_to_tensor(Tensor(raw.reshape(-1)), 3 * 256, Q.Q6_K.value)
    np.testing.assert_array_equal(got.numpy(), gguf.quants.dequantize(raw, Q.Q6_K).reshape(-1))


def test_bad_files_are_refused(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGML" + bytes(20))
    with pytest.raises(ValueError, match=r"not a GGUF file: starts with b'GGML'"):
        gguf_load(bad)
    bad.write_bytes(b"GGUF" + (1).to_bytes(4, "little") + bytes(16))
    with pytest.raises(ValueError, match="GGUF version 1 is not supported"):
        gguf_load(bad)
    bad.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (0).to_bytes(8, "little") + (1).to_bytes(8, "little"))
    with pytest.raises(ValueError, match="the file ends inside its header"):
        gguf_load(bad)
    with pytest.raises(FileNotFoundError, match="gguf_load: no file at"):
        gguf_load(tmp_path / "missing.gguf")
    with pytest.raises(ValueError, match="ggml type 12 is not supported"):
        ggml_data_to_tensor(Tensor(np.zeros(144, np.uint8)), 256, 12)
