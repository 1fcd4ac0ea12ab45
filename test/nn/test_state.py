"""Tests for fusegrad/nn/state.py: state-dict walking and loading, safetensors files checked both ways against the
safetensors library, corrupt safetensors files, PyTorch checkpoints (zip and legacy) against torch.save, the refusal of
pickled code, and a model -> file -> fresh model round trip.
"""

from __future__ import annotations

import json
import os
import pathlib
import struct
import subprocess
import sys
import tarfile
from collections import namedtuple
from typing import Any

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch

from fusegrad import Tensor, nn
from fusegrad.dtype import dtypes
from fusegrad.nn.state import (
    get_parameters,
    get_state_dict,
    load_state_dict,
    safe_load,
    safe_load_metadata,
    safe_save,
    torch_load,
)

Pair = namedtuple("Pair", ["left", "right"])


class Model:
    """Layers in a list, a tuple, a dict and a namedtuple, plus attributes that hold no tensors."""

    def __init__(self) -> None:
        self.layers = [nn.Linear(3, 4), nn.BatchNorm(4)]
        self.heads = {"out": nn.Linear(4, 2)}
        self.extra = (nn.Embedding(5, 3), None)
        self.pair = Pair(nn.LayerNorm(2), nn.RMSNorm(2))
        self.name, self.scale, self.nothing = "model", 2.0, None

    def __call__(self, idx: Tensor) -> Tensor:
        x = self.extra[0](idx)  # (B, 3)
        x = self.layers[1](self.layers[0](x)).relu()
        return self.pair.right(self.pair.left(self.heads["out"](x)))


MODEL_KEYS = [
    "layers.0.weight",
    "layers.0.bias",
    "layers.1.weight",
    "layers.1.bias",
    "layers.1.num_batches_tracked",
    "layers.1.running_mean",
    "layers.1.running_var",
    "heads.out.weight",
    "heads.out.bias",
    "extra.0.weight",
    "pair.left.weight",
    "pair.left.bias",
    "pair.right.weight",
]


def as_numpy(t: Tensor) -> np.ndarray:
    """Values of t (on any device); bfloat16 as its raw uint16 bits, which numpy can hold."""
    if t.dtype == dtypes.bfloat16:
        return t.to("CPU").bitcast(dtypes.uint16).numpy()
    return np.asarray(t.to("CPU").numpy())


# *** state dicts ***


def test_state_dict_keys_follow_the_model() -> None:
    model = Model()
    state = get_state_dict(model)
    assert list(state) == MODEL_KEYS
    assert state["heads.out.weight"] is model.heads["out"].weight
    assert get_state_dict(model, prefix="net.")["net.layers.0.bias"] is model.layers[0].bias


@pytest.mark.slow  # importing the reference system takes about 4 s
def test_state_dict_keys_match_the_reference() -> None:
    tinygrad_state = pytest.importorskip("tinygrad.nn.state")
    import tinygrad.nn as tiny_nn

    class TinyModel:
        def __init__(self) -> None:
            self.layers = [tiny_nn.Linear(3, 4), tiny_nn.BatchNorm(4)]
            self.heads = {"out": tiny_nn.Linear(4, 2)}
            self.extra = (tiny_nn.Embedding(5, 3), None)
            self.pair = Pair(tiny_nn.LayerNorm(2), tiny_nn.RMSNorm(2))

    assert list(tinygrad_state.get_state_dict(TinyModel())) == MODEL_KEYS


def test_cycles_are_not_followed_and_shared_tensors_count_once() -> None:
    model = Model()
    model.parent = model  # type: ignore[attr-defined]
    model.tied = model.layers[0]  # type: ignore[attr-defined]
    state = get_state_dict(model)
    assert state["tied.weight"] is state["layers.0.weight"]
    params = get_parameters(model)
    assert len(params) == len(MODEL_KEYS)
    assert all(any(p is t for p in params) for t in state.values())


def test_load_state_dict_assigns_into_the_models_tensors() -> None:
    model = nn.Linear(3, 2)
    weight = model.weight
    values = {"weight": Tensor(np.arange(6, dtype=np.float64).reshape(2, 3)), "bias": Tensor([7.0, 8.0])}
    loaded = load_state_dict(model, values)
    assert model.weight is weight  # the same tensor, new contents
    assert weight.dtype == dtypes.float32  # cast to the model's dtype
    assert weight.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert [id(t) for t in loaded] == [id(model.weight), id(model.bias)]
    consumed = dict(values)
    load_state_dict(model, consumed, consume=True)
    assert consumed == {}


SHARDS = ("CPU:1", "CPU:2", "CPU:3")


@pytest.mark.parametrize("sharded_dict", [False, True])
def test_load_into_a_sharded_model_keeps_its_shard_axes(sharded_dict: bool) -> None:
    """A model sharded over devices loads a one-device state dict sharded along the model's own axes (UOp.axis)."""
    layer = nn.Conv2d(3, 5, kernel_size=3)
    layer.weight.shard_(SHARDS, 3)
    layer.bias.shard_(SHARDS, None)
    assert layer.weight.uop.axis == 3
    assert layer.bias.uop.axis is None
    weight, bias = np.random.default_rng(0).standard_normal((5, 3, 3, 3)).astype(np.float32), np.arange(5.0)
    state = {"weight": Tensor(weight), "bias": Tensor(bias, dtype=dtypes.float32)}
    if sharded_dict:
        state = {"weight": state["weight"].shard(SHARDS, 3), "bias": state["bias"].to(SHARDS)}
    load_state_dict(layer, state)
    assert layer.weight.device == SHARDS
    assert layer.weight.uop.axis == 3
    assert layer.bias.uop.axis is None
    np.testing.assert_array_equal(layer.weight.numpy(), weight)
    np.testing.assert_array_equal(layer.bias.numpy(), bias)


def test_uop_axis_follows_the_placement() -> None:
    t = Tensor.ones(6, 3, 3).shard(SHARDS, 0)
    assert t.permute(1, 0, 2).uop.axis == 1
    assert t.sum(1).uop.axis == 0
    assert t.sum(0).uop.axis is None  # partial until combined
    assert Tensor.ones(3).uop.axis is None  # one device


def test_strict_load_lists_every_problem() -> None:
    model = Model()
    state = {k: Tensor.zeros(*v.shape, dtype=v.dtype) for k, v in get_state_dict(model).items()}
    del state["layers.0.bias"], state["pair.right.weight"]
    state["layers.0.weight"] = Tensor.zeros(3, 4)
    state["surplus"] = Tensor.zeros(1)
    message = (
        r"load_state_dict: the state dict does not fit the model: 2 missing keys: layers.0.bias, pair.right.weight; "
        r"1 unexpected keys: surplus; Shape mismatch in layer `layers.0.weight`: Expected shape \(4, 3\), but found "
        r"\(3, 4\) in state dict\."
    )
    with pytest.raises(ValueError, match=message):
        load_state_dict(model, state)
    with pytest.raises(ValueError, match=r"^load_state_dict: .*: Shape mismatch in layer `layers.0.weight`"):
        load_state_dict(model, state, strict=False, verbose=False)  # a mismatch is never skipped


def test_non_strict_load_skips_missing_and_unexpected(capsys: pytest.CaptureFixture[str]) -> None:
    model = nn.Linear(2, 2, bias=True)
    loaded = load_state_dict(model, {"weight": Tensor.ones(2, 2), "other": Tensor.ones(1)}, strict=False)
    assert [id(t) for t in loaded] == [id(model.weight)]
    assert model.weight.tolist() == [[1, 1], [1, 1]]
    assert "skipped 1 missing keys ['bias'] and unexpected keys ['other']" in capsys.readouterr().out
    with pytest.raises(TypeError, match=r"load_state_dict: value for 'weight' is not a Tensor: got list"):
        load_state_dict(model, {"weight": [[1.0, 2.0], [3.0, 4.0]], "step": 3}, strict=False)  # type: ignore[dict-item]


# *** safetensors ***

NUMPY_DTYPES = [np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]
NUMPY_DTYPES += [np.float16, np.float32, np.float64]


def sample(dtype: Any, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    values = np.random.default_rng(seed).standard_normal(shape) * 50
    return values.astype(dtype) if dtype is not np.bool_ else values > 0


def test_saved_files_load_in_the_safetensors_library(tmp_path: pathlib.Path) -> None:
    arrays = {f"t{i}": sample(dt, (2, 3 + i), seed=i) for i, dt in enumerate(NUMPY_DTYPES)}
    arrays["empty"] = np.zeros((0, 4), np.float32)
    arrays["scalar"] = np.array(3.5, np.float32)
    path = tmp_path / "ours.safetensors"
    safe_save({k: Tensor(v) for k, v in arrays.items()}, path, metadata={"format": "pt", "note": "ünïcode"})
    theirs = safetensors.numpy.load_file(str(path))
    for k, v in arrays.items():
        assert theirs[k].dtype == v.dtype
        np.testing.assert_array_equal(theirs[k], v, err_msg=k)
    # bfloat16 from a library file (the C renderer has no bfloat16 casts yet): its DISK tensor is saved again
    bf16_path = tmp_path / "bf16.safetensors"
    safetensors.torch.save_file({"b": torch.tensor([1.5, -2.0, 3.0], dtype=torch.bfloat16)}, str(bf16_path))
    safe_save({"again": safe_load(bf16_path)["b"]}, tmp_path / "again.safetensors")
    assert safetensors.torch.load_file(str(tmp_path / "again.safetensors"))["again"].tolist() == [1.5, -2.0, 3.0]
    with safetensors.safe_open(str(path), "np") as f:
        assert f.metadata() == {"format": "pt", "note": "ünïcode"}
    assert struct.unpack("<Q", path.read_bytes()[:8])[0] % 8 == 0  # the data starts 8-aligned, as the library's


def test_library_files_load_in_ours(tmp_path: pathlib.Path) -> None:
    arrays = {f"t{i}": sample(dt, (3, 2), seed=i) for i, dt in enumerate(NUMPY_DTYPES)}
    path = tmp_path / "theirs.safetensors"
    safetensors.numpy.save_file(arrays, str(path), metadata={"k": "v"})
    ours = safe_load(path)
    assert set(ours) == set(arrays)
    for k, v in arrays.items():
        assert ours[k].device == f"DISK:{path}"
        np.testing.assert_array_equal(as_numpy(ours[k]), v, err_msg=k)
    bf16 = torch.tensor([[0.5, -1.25]], dtype=torch.bfloat16)
    safetensors.torch.save_file({"b": bf16}, str(tmp_path / "bf16.safetensors"))
    got = safe_load(str(tmp_path / "bf16.safetensors"))["b"]
    assert got.dtype == dtypes.bfloat16
    np.testing.assert_array_equal(as_numpy(got), bf16.view(torch.int16).numpy().view(np.uint16))
    file_tensor, header_length, header = safe_load_metadata(path)
    assert file_tensor.shape == (path.stat().st_size,)
    assert header["__metadata__"] == {"k": "v"}
    assert header_length == struct.unpack("<Q", path.read_bytes()[:8])[0]


def test_load_from_tensors_of_the_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "bytes.safetensors"
    safetensors.numpy.save_file({"a": np.arange(6, dtype=np.int32).reshape(2, 3), "b": np.ones(2)}, str(path))
    in_memory = safe_load(Tensor(path.read_bytes()))  # the reference takes the file's bytes as a tensor too
    assert in_memory["a"].device == "CPU"
    assert in_memory["a"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert in_memory["b"].tolist() == [1.0, 1.0]
    on_disk = safe_load(Tensor.empty(path.stat().st_size, dtype=dtypes.uint8, device=f"DISK:{path}"))
    assert on_disk["a"].device == f"DISK:{path}"
    assert on_disk["a"].to("CPU").tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(TypeError, match=r"expected a path or a 1-d uint8 tensor: got a dtypes.float tensor \(1,\)"):
        safe_load(Tensor([1.0]))
    with pytest.raises(TypeError, match=r"torch_load: expected a path or a uint8 DISK tensor: got a dtypes.uchar"):
        torch_load(Tensor(path.read_bytes()))


def write_safetensors(path: pathlib.Path, header: Any, data: bytes, length: int | None = None) -> pathlib.Path:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    return path


def test_loading_reads_only_what_is_used(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "big.safetensors"
    header = {"big": {"dtype": "F32", "shape": [1 << 24], "data_offsets": [0, 1 << 26]}}
    header["small"] = {"dtype": "I64", "shape": [1], "data_offsets": [1 << 26, (1 << 26) + 8]}
    raw = json.dumps(header).encode()
    with path.open("wb") as f:  # a sparse 64 MiB file: reading all of it would take real time and memory
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.seek(8 + len(raw) + (1 << 26))
        f.write(struct.pack("<q", 42))
    loaded = safe_load(path)
    assert loaded["big"].shape == (1 << 24,)
    assert loaded["small"].to("CPU").tolist() == [42]


def entry(dtype: str, shape: list[int], offsets: list[int]) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "data_offsets": offsets}


CORRUPT = [
    (b"", None, b"", r"is too short: got 2 bytes, expected at least 8"),
    ({}, 1000, b"", r"bad header length: got 1000, expected at most 2"),
    (b"{not json", None, b"", r"header that is not JSON"),
    (b"[1, 2]", None, b"", r"bad header: got a list, expected an object"),
    ({"w": entry("F33", [1], [0, 4])}, None, bytes(4), r"'w' has an unknown dtype: got 'F33'"),
    ({"w": entry("F32", [2], [0, 8])}, None, bytes(4), r"'w' run past the end of the file"),
    ({"w": entry("F32", [1], [4, 0])}, None, bytes(4), r"'w' has data_offsets that disagree"),
    ({"w": entry("F32", [2], [0, 4])}, None, bytes(8), r"disagree with its shape: got \[0, 4\]"),
    ({"w": entry("F32", [-1], [0, 4])}, None, bytes(4), r"'w' has a bad shape: got \[-1\]"),
    ({"w": {"dtype": "F32", "shape": [1]}}, None, bytes(4), r"'w' has a bad entry"),
    (
        {"a": entry("F32", [2], [0, 8]), "b": entry("F32", [1], [4, 8])},
        None,
        bytes(8),
        r"tensors overlap: 'b' starts at 4, expected at least 8 where 'a' ends",
    ),
]


@pytest.mark.parametrize(("header", "length", "data", "problem"), CORRUPT)
def test_corrupt_files_name_the_file_and_the_problem(
    tmp_path: pathlib.Path, header: Any, length: int | None, data: bytes, problem: str
) -> None:
    path = tmp_path / "corrupt.safetensors"
    if header == b"" and length is None:
        path.write_bytes(b"\x01\x02")
    else:
        write_safetensors(path, header, data, length)
    with pytest.raises(ValueError, match=rf"safe_load: .*corrupt\.safetensors.*{problem}"):
        safe_load(path)
    with pytest.raises(ValueError, match=problem):
        safe_load_metadata(str(path))


def test_saving_over_a_loaded_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "w.safetensors"
    safe_save({"a": Tensor([1.0, 2.0]), "b": Tensor([3, 4])}, path)
    loaded = safe_load(path)
    safe_save({"b": loaded["b"], "a": loaded["a"]}, path)  # the file's own tensors, in another order
    assert {k: v.to("CPU").tolist() for k, v in safe_load(path).items()} == {"b": [3, 4], "a": [1.0, 2.0]}
    safe_save({"a": Tensor([5.0, 6.0, 7.0])}, path)  # while `loaded` still holds the file open
    assert safe_load(path)["a"].to("CPU").tolist() == [5.0, 6.0, 7.0]  # not the stale bytes of the old file
    assert loaded["a"].device == f"DISK:{path}"
    assert loaded["a"].to("CPU").tolist() == [1.0, 2.0]  # tensors of the replaced file keep reading its bytes
    assert [p.name for p in tmp_path.iterdir()] == ["w.safetensors"]  # no temporary file left behind


def test_save_streams_a_disk_tensor_in_chunks(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A DISK source larger than the chunk is read a chunk at a time (never whole) and saved byte for byte."""
    from fusegrad.nn import state
    from fusegrad.runtime.ops_disk import DiskDevice

    values = np.random.default_rng(0).standard_normal(100_000).astype(np.float32)  # 400 kB, 25 chunks of 16 kB
    source = tmp_path / "source.bin"
    source.write_bytes(values.tobytes())
    big = Tensor.empty(10, 10_000, device=f"DISK:{source}")
    reads: list[int] = []
    real_read = DiskDevice.read_into

    def counted(self: DiskDevice, use: Any, dest: memoryview, offset: int) -> None:
        reads.append(len(dest))
        real_read(self, use, dest, offset)

    monkeypatch.setattr(state, "SAVE_CHUNK_BYTES", 16_000)
    monkeypatch.setattr(DiskDevice, "read_into", counted)
    safe_save({"small": Tensor([1, 2], dtype=dtypes.int32), "big": big}, tmp_path / "out.safetensors")
    assert sum(reads) == values.nbytes
    assert max(reads) == 16_000
    loaded = safetensors.numpy.load_file(str(tmp_path / "out.safetensors"))
    np.testing.assert_array_equal(loaded["big"], values.reshape(10, 10_000))
    assert loaded["small"].tolist() == [1, 2]


def test_failed_save_leaves_the_old_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "keep.safetensors"
    safe_save({"a": Tensor([1.0])}, path)
    path.chmod(0o640)
    before = path.read_bytes()
    missing = Tensor.empty(4, device=f"DISK:{tmp_path / 'missing.bin'}")  # fails when its data is read
    with pytest.raises(FileNotFoundError, match=r"missing\.bin does not exist"):
        safe_save({"a": Tensor([2.0]), "b": missing}, path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["keep.safetensors"]  # the temporary file was removed
    safe_save({"a": Tensor([3.0])}, path)
    assert path.stat().st_mode & 0o777 == 0o640  # the new file keeps the old one's permissions


def test_save_through_a_symlink_replaces_its_target(tmp_path: pathlib.Path) -> None:
    (tmp_path / "real").mkdir()
    link = tmp_path / "latest.safetensors"
    link.symlink_to(tmp_path / "real" / "ckpt.safetensors")
    safe_save({"a": Tensor([1.0])}, link)
    safe_save({"a": Tensor([2.0])}, link)
    assert link.is_symlink()
    assert safe_load(tmp_path / "real" / "ckpt.safetensors")["a"].to("CPU").tolist() == [2.0]


KILLED_SAVER = """
import sys
import numpy as np
from fusegrad import Tensor
from fusegrad.nn.state import safe_save

value = float(sys.argv[2])
tensors = {f"t{i}": Tensor(np.full(1 << 20, value, dtype=np.float32)).realize() for i in range(16)}  # 64 MiB
print("saving", flush=True)
safe_save(tensors, sys.argv[1], metadata={"value": str(value)})
print("saved", flush=True)
"""


def _checkpoint_value(path: pathlib.Path) -> float:
    """The one value every tensor of a complete checkpoint holds; fails on a partial or mixed file."""
    loaded = safetensors.numpy.load_file(str(path))
    with safetensors.safe_open(str(path), "np") as f:
        value = float(f.metadata()["value"])
    assert sorted(loaded) == sorted(f"t{i}" for i in range(16))
    assert all(a.shape == (1 << 20,) and (a == value).all() for a in loaded.values())
    return value


@pytest.mark.slow  # fresh interpreters each saving 64 MiB: about 15 s
def test_save_killed_at_any_point_leaves_the_old_or_the_new_checkpoint(tmp_path: pathlib.Path) -> None:
    import random
    import signal
    import time

    path = tmp_path / "ckpt.safetensors"
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[2])}

    def start(value: float) -> subprocess.Popen[str]:
        child = subprocess.Popen(
            [sys.executable, "-c", KILLED_SAVER, str(path), str(value)], stdout=subprocess.PIPE, text=True, env=env
        )
        assert child.stdout is not None
        assert child.stdout.readline() == "saving\n"
        return child

    began = time.perf_counter()
    first = start(1.0)  # an untouched save: the old checkpoint, and how long a save takes
    saving = time.perf_counter()
    assert first.stdout is not None
    assert first.stdout.readline() == "saved\n"
    save_seconds = time.perf_counter() - saving
    assert first.wait(timeout=120) == 0
    assert _checkpoint_value(path) == 1.0
    rng, seen, window = random.Random(0), [], save_seconds * 1.2
    for attempt in range(6):
        old = _checkpoint_value(path)
        child = start(old + 1)
        time.sleep(rng.uniform(0, window))  # anywhere in the save, sometimes just after it
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        now = _checkpoint_value(path)
        assert now in (old, old + 1), f"attempt {attempt}: got a checkpoint of {now}, expected {old} or {old + 1}"
        seen.append(now == old + 1)
        if seen[-1]:  # the save outran the kill (later saves can be faster than the timed one): aim earlier
            window /= 2
        for leftover in tmp_path.glob(".ckpt.safetensors.*.tmp"):  # what a killed save leaves: never the real name
            leftover.unlink()
        if time.perf_counter() - began > 90:
            break
    assert len(seen) >= 3
    assert not all(seen)  # at least one kill landed before the rename (the test really interrupts saves)


def test_save_errors(tmp_path: pathlib.Path) -> None:
    with pytest.raises(TypeError, match=r"safe_save: metadata must map str to str"):
        safe_save({"a": Tensor([1.0])}, tmp_path / "x.safetensors", metadata={"n": 1})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match=r"tensor names must be str and not '__metadata__'"):
        safe_save({"__metadata__": Tensor([1.0])}, tmp_path / "x.safetensors")
    assert not (tmp_path / "x.safetensors").exists()
    with pytest.raises(FileNotFoundError, match=r"safe_load: no such file: .*missing\.safetensors"):
        safe_load(tmp_path / "missing.safetensors")


# *** PyTorch checkpoints ***


def torch_tensors() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    base = torch.arange(60, dtype=torch.float32).reshape(3, 4, 5)
    tensors = {
        "float": torch.randn(3, 4),
        "transposed": base[0].t(),  # non-contiguous
        "strided": base[:, 1:, ::2],  # offset and strides
        "offset": torch.arange(10, dtype=torch.int16)[3:7],  # contiguous at a storage offset
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "empty": torch.zeros(0, 3),
    }
    for dt in (torch.float16, torch.float64, torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool):
        tensors[str(dt)] = (torch.randn(2, 3) * 50).to(dt)
    tensors["bf16"] = torch.randn(2, 2).to(torch.bfloat16)
    tensors["bf16_t"] = tensors["bf16"].t()
    return tensors


def expected(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


@pytest.mark.parametrize("zip_format", [True, False])
def test_torch_checkpoints_load_with_equal_values(tmp_path: pathlib.Path, zip_format: bool) -> None:
    tensors = torch_tensors()
    module = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    saved = {"model": module.state_dict(), "tensors": tensors, "step": 7, "names": ["a", "b"]}
    path = tmp_path / "ckpt.pt"
    torch.save(saved, path, _use_new_zipfile_serialization=zip_format)
    loaded = torch_load(path)
    assert loaded["step"] == 7
    assert loaded["names"] == ["a", "b"]
    assert list(loaded["model"]) == list(module.state_dict())
    for k, v in module.state_dict().items():
        np.testing.assert_array_equal(as_numpy(loaded["model"][k]), v.numpy(), err_msg=k)
    for k, v in tensors.items():
        got = loaded["tensors"][k]
        assert got.shape == tuple(v.shape), k
        np.testing.assert_array_equal(as_numpy(got), expected(v), err_msg=k)
    assert loaded["tensors"]["float"].device == f"DISK:{path}"  # contiguous tensors are read only when used


def test_parameters_sizes_dtypes_and_unsigned_tensors(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "misc.pt"
    saved = {
        "param": torch.nn.Parameter(torch.arange(3.0)),  # _rebuild_parameter
        "size": torch.Size([2, 3]),
        "dtype": torch.float16,
        "u16": torch.arange(5).to(torch.uint16)[1:],  # _rebuild_tensor_v3 over an untyped storage
        "u32_t": torch.arange(6).to(torch.uint32).reshape(2, 3).t(),
    }
    torch.save(saved, path)
    loaded = torch_load(path)
    assert loaded["param"].tolist() == [0.0, 1.0, 2.0]
    assert loaded["size"] == (2, 3)
    assert loaded["dtype"] == dtypes.float16
    assert loaded["u16"].dtype == dtypes.uint16
    assert loaded["u16"].to("CPU").tolist() == [1, 2, 3, 4]
    assert loaded["u32_t"].to("CPU").tolist() == [[0, 3], [1, 4], [2, 5]]


def test_torch_load_does_not_import_torch(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "plain.pt"
    torch.save({"w": torch.arange(4.0)}, path)
    script = (
        "import sys; from fusegrad.nn.state import torch_load; "
        f"w = torch_load({str(path)!r})['w'].to('CPU').tolist(); "
        "assert 'torch' not in sys.modules, 'torch was imported'; print(w)"
    )
    root = pathlib.Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[0.0, 1.0, 2.0, 3.0]"


class Payload:
    """Pickles as a call of os.system: loading it with plain pickle would run a shell command."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


class Custom:
    """An arbitrary class: refused even though it runs nothing."""


@pytest.mark.parametrize("zip_format", [True, False])
def test_pickled_code_is_refused_and_nothing_runs(tmp_path: pathlib.Path, zip_format: bool) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "evil.pt"
    torch.save({"w": torch.ones(2), "x": Payload(marker)}, path, _use_new_zipfile_serialization=zip_format)
    system = f"{os.system.__module__}.system"  # posix.system on Linux
    with pytest.raises(ValueError, match=rf"torch_load: .*evil\.pt: refusing the pickled global {system}: expected"):
        torch_load(path)
    assert not marker.exists()
    torch.save({"c": Custom()}, path, _use_new_zipfile_serialization=zip_format)
    with pytest.raises(ValueError, match=r"refusing the pickled global .*\.Custom: expected only"):
        torch_load(path)


def test_not_a_checkpoint(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "junk.pt"
    path.write_bytes(b"definitely not a pickle")
    with pytest.raises(ValueError, match=r"torch_load: .*junk\.pt is not a PyTorch checkpoint"):
        torch_load(path)
    with tarfile.open(tmp_path / "old.pt", "w") as tar:
        tar.add(path, arcname="storages")
    with pytest.raises(ValueError, match=r"old\.pt is a tar checkpoint \(torch < 0\.4\): expected zip or pickle"):
        torch_load(tmp_path / "old.pt")
    truncated = tmp_path / "short.pt"
    torch.save({"w": torch.ones(64)}, truncated, _use_new_zipfile_serialization=False)
    truncated.write_bytes(truncated.read_bytes()[:-16])
    with pytest.raises(ValueError, match=r"torch_load: .*short\.pt is truncated: storage '\d+' ends at byte"):
        torch_load(truncated)


# *** round trips ***


@pytest.mark.slow  # about 5 s: several kernels compile on a cold cache
def test_model_round_trip_through_safetensors(tmp_path: pathlib.Path) -> None:
    model = Model()
    idx = Tensor([[1], [4], [0]]).reshape(3)
    with Tensor.train():
        model(idx).realize()  # moves the BatchNorm running statistics off their initial values
    for layer in (model.pair.left, model.pair.right):
        layer.weight.assign(Tensor([1.5, 0.5]))
    path = tmp_path / "model.safetensors"
    safe_save(get_state_dict(model), path)
    fresh = Model()
    load_state_dict(fresh, safe_load(path))
    for k, v in get_state_dict(fresh).items():
        np.testing.assert_array_equal(v.numpy(), get_state_dict(model)[k].numpy(), err_msg=k)
    with Tensor.test():
        np.testing.assert_array_equal(fresh(idx).numpy(), model(idx).numpy())


def test_torch_model_into_ours(tmp_path: pathlib.Path) -> None:
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3))
    module.train()
    module(torch.randn(4, 2, 5, 5))  # running statistics away from 0 and 1
    module.eval()
    path = tmp_path / "conv.pt"
    torch.save(module.state_dict(), path)
    ours = [nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3)]
    load_state_dict(ours, torch_load(path))
    x = np.random.default_rng(0).standard_normal((2, 2, 5, 5)).astype(np.float32)
    got = Tensor(x).sequential(ours).numpy()  # type: ignore[arg-type]
    np.testing.assert_allclose(got, module(torch.from_numpy(x)).detach().numpy(), rtol=1e-4, atol=1e-5)
