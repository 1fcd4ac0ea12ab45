"""fusegrad.nn.onnx.OnnxRunner on models exported from torch (checked against onnxruntime), on bad models and inputs
(each a clear error before any kernel runs), with external data, under TinyJit, and through the command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from fusegrad import GlobalCounters, Tensor, TinyJit  # noqa: E402
from fusegrad.nn.onnx import OnnxRunner  # noqa: E402
from fusegrad.uop import Ops  # noqa: E402
from test.nn.onnx_models import export_convnet, export_encoder, export_mlp, onnxruntime_outputs  # noqa: E402

RTOL = 1e-4  # the bar: every exported model within 1e-4 relative error of onnxruntime


def assert_close_relative(got: np.ndarray, want: np.ndarray) -> None:
    """Max error relative to the output's scale (element-wise relative error is meaningless near 0)."""
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= RTOL * np.abs(want).max()


@pytest.mark.parametrize("export", [export_mlp, export_convnet, export_encoder], ids=["mlp", "convnet", "encoder"])
def test_exported_model_matches_onnxruntime(export):
    model, inputs = export()
    want = onnxruntime_outputs(model, inputs)[0]
    got = OnnxRunner(model)(inputs)["output"].numpy()
    assert_close_relative(got, want)


def test_encoder_padding_mask_matters():
    # the padded half of sequence 1 must not change its unpadded positions
    model, inputs = export_encoder()
    runner = OnnxRunner(model)
    first = runner(inputs)["output"].numpy()
    changed = {**inputs, "tokens": inputs["tokens"].copy()}
    changed["tokens"][1, -1] = (changed["tokens"][1, -1] + 1) % 50
    second = runner(changed)["output"].numpy()
    np.testing.assert_allclose(first[1, :8], second[1, :8], rtol=1e-5, atol=1e-6)
    assert not np.allclose(first[1, -1], second[1, -1])


def test_model_as_path_bytes_and_tensor(tmp_path):
    model, inputs = export_mlp()
    path = tmp_path / "mlp.onnx"
    path.write_bytes(model)
    want = OnnxRunner(model)(inputs)["output"].numpy()
    for source in (path, str(path), Tensor(np.frombuffer(model, dtype=np.uint8))):
        np.testing.assert_allclose(OnnxRunner(source)(inputs)["output"].numpy(), want, rtol=1e-6)


def test_tinyjit_replays_with_new_values():
    model, inputs = export_encoder()
    runner = OnnxRunner(model)
    jitted = TinyJit(lambda **kw: runner(kw)["output"].realize())
    rng = np.random.default_rng(5)
    for _ in range(4):  # capture on the second call, replay on the third and fourth
        tokens = rng.integers(0, 50, inputs["tokens"].shape).astype(np.int64)
        feed = {"tokens": tokens, "padding": inputs["padding"]}
        got = jitted(tokens=Tensor(tokens).realize(), padding=Tensor(inputs["padding"]).realize()).numpy()
        assert_close_relative(got, onnxruntime_outputs(model, feed)[0])


# *** external data ***


def test_external_data_is_read_from_its_file(tmp_path):
    weight = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save_model(model, tmp_path / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=0)
    assert (tmp_path / "m.data").stat().st_size == weight.nbytes
    runner = OnnxRunner(tmp_path / "m.onnx")
    assert runner.initializers["w"].device.startswith("CPU")
    x = np.ones((2, 6), np.float32)
    np.testing.assert_allclose(runner({"x": x})["y"].numpy(), x @ weight, rtol=1e-6)
    # bytes carry no folder to find m.data in
    with pytest.raises(ValueError, match="external data"):
        OnnxRunner((tmp_path / "m.onnx").read_bytes())


# *** bad models and inputs: errors before any kernel runs ***


def tiny_model(op: str = "Relu", domain: str = "", opset: int = 17) -> bytes:
    node = helper.make_node(op, ["x"], ["y"], name="the_node", domain=domain)
    graph = helper.make_graph(
        [node],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


@pytest.fixture
def no_kernels():
    """Fails the test if any kernel ran during it."""
    before = GlobalCounters.kernel_count
    yield
    assert GlobalCounters.kernel_count == before


def test_truncated_file(tmp_path, no_kernels):
    model, _ = export_mlp()
    path = tmp_path / "cut.onnx"
    path.write_bytes(model[: len(model) // 2])
    with pytest.raises(ValueError, match=r"cut\.onnx is not a valid ONNX model"):
        OnnxRunner(path)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such model file"):
        OnnxRunner(tmp_path / "absent.onnx")


def test_unknown_op_names_op_node_and_opset(no_kernels):
    with pytest.raises(NotImplementedError, match=r"op FancyOp \(node 'the_node', opset 17\)"):
        OnnxRunner(tiny_model("FancyOp"))
    with pytest.raises(NotImplementedError, match=r"domain 'com\.vendor'"):
        OnnxRunner(tiny_model("Relu", domain="com.vendor"))


def test_missing_and_unknown_inputs(no_kernels):
    runner = OnnxRunner(tiny_model())
    with pytest.raises(RuntimeError, match=r"no value for input\(s\) \['x'\]"):
        runner({})
    with pytest.raises(RuntimeError, match=r"unknown input\(s\) \['z'\]"):
        runner({"x": np.zeros((1, 3), np.float32), "z": 1})


def test_wrong_input_shape_and_dtype(no_kernels):
    runner = OnnxRunner(tiny_model())
    with pytest.raises(RuntimeError, match=r"has shape \(2, 4\), the model wants \('batch', 3\)"):
        runner({"x": np.zeros((2, 4), np.float32)})
    with pytest.raises(RuntimeError, match=r"has shape \(3,\)"):
        runner({"x": np.zeros(3, np.float32)})
    with pytest.raises(RuntimeError, match=r"has dtype dtypes\.int"):
        runner({"x": Tensor([[1, 2, 3]])})


def test_named_dims_must_agree(no_kernels):
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        "two",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n"]) for n in ("a", "b")],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, ["n"])],
    )
    runner = OnnxRunner(helper.make_model(graph).SerializeToString())
    with pytest.raises(RuntimeError, match="n=3 but another input set n=2"):
        runner({"a": np.zeros(2, np.float32), "b": np.zeros(3, np.float32)})


def test_newer_opset_than_known(no_kernels):
    with pytest.raises(NotImplementedError, match="newer than the newest known"):
        OnnxRunner(tiny_model(opset=onnx.defs.onnx_opset_version() + 1))


def test_op_error_names_the_node():
    graph = helper.make_graph(
        [helper.make_node("Pad", ["x", "p"], ["y"], name="pad_it", mode="mirror")],
        "pad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])],
        [numpy_helper.from_array(np.array([1, 1], np.int64), "p")],
    )
    with pytest.raises(ValueError, match="mode 'mirror'") as info:
        OnnxRunner(helper.make_model(graph).SerializeToString())({"x": np.zeros(3, np.float32)})
    assert "in ONNX node 'pad_it' (Pad" in "".join(info.value.__notes__)


# *** command line ***


def test_command_line(tmp_path):
    model, inputs = export_mlp()
    (tmp_path / "mlp.onnx").write_bytes(model)
    np.savez(tmp_path / "in.npz", **inputs)
    command = [
        sys.executable,
        "-m",
        "fusegrad.nn.onnx",
        str(tmp_path / "mlp.onnx"),
        "--inputs",
        str(tmp_path / "in.npz"),
    ]
    result = subprocess.run(
        [*command, "--bench", "--runs", "2", "--compare"], capture_output=True, text=True, check=True
    )
    assert "output: shape (8, 5) dtype float32" in result.stdout
    assert "ms per run" in result.stdout
    difference = float(result.stdout.split("max |fusegrad - onnxruntime| = ")[1].split()[0])
    assert difference < 1e-5
    help_text = subprocess.run([*command[:3], "--help"], capture_output=True, text=True, check=True).stdout
    assert "--compare" in help_text
    assert "--inputs" in help_text
    assert Path(tmp_path / "mlp.onnx").exists()


def sequence_model() -> bytes:
    """xs (a sequence of float tensors) -> (xs with y inserted at the front, every element concatenated)."""
    seq = helper.make_tensor_sequence_value_info
    graph = helper.make_graph(
        [
            helper.make_node("SequenceInsert", ["xs", "y", "zero"], ["inserted"]),
            helper.make_node("ConcatFromSequence", ["inserted"], ["joined"], axis=0),
        ],
        "sequences",
        [seq("xs", TensorProto.FLOAT, None), helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [seq("inserted", TensorProto.FLOAT, None), helper.make_tensor_value_info("joined", TensorProto.FLOAT, [None])],
        [numpy_helper.from_array(np.array(0, np.int64), "zero")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_sequence_inputs_and_outputs():
    xs = [np.float32([1, 2, 3]), np.float32([4])]
    outputs = OnnxRunner(sequence_model())({"xs": xs, "y": np.float32([8, 9])})
    assert [t.tolist() for t in outputs["inserted"]] == [[8, 9], [1, 2, 3], [4]]
    assert outputs["joined"].tolist() == [8, 9, 1, 2, 3, 4]


def test_sequence_input_dtype_is_checked(no_kernels):
    # (arrays are converted to the input's dtype; a Tensor keeps its own)
    with pytest.raises(RuntimeError, match=r"input 'xs' has dtype dtypes\.int"):
        OnnxRunner(sequence_model())({"xs": [Tensor(np.int32([1]))], "y": np.float32([8, 9])})


# *** Gather by folded constant indices ***


def constant_gather_model(cases: list[tuple[list[int] | int, int]]) -> bytes:
    """x (4, 6, 5) -> y{i} = Gather(x, Constant(indices), axis) for each (indices, axis) in cases."""
    nodes, outputs = [], []
    for i, (indices, axis) in enumerate(cases):
        value = numpy_helper.from_array(np.array(indices, dtype=np.int64), f"c{i}")
        nodes.append(helper.make_node("Constant", [], [f"c{i}"], value=value))
        nodes.append(helper.make_node("Gather", ["x", f"c{i}"], [f"y{i}"], axis=axis))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6, 5])
    graph = helper.make_graph(nodes, "gathers", [x], outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_gather_by_known_indices_is_a_view():
    # one index, a run written with negative indices, a run on the last axis: slices once the constants are folded;
    # a gap and an out-of-range index keep the general gather
    cases: list[tuple[list[int] | int, int]] = [(2, 1), ([-3, -2], 1), ([[1, 2]], -1), ([0, 2], 2), ([1, 9], 1)]
    runner = OnnxRunner(constant_gather_model(cases))
    x = np.random.default_rng(3).standard_normal((4, 6, 5)).astype(np.float32)
    for call in range(2):  # the first call folds the constants, the second gathers by their known values
        outputs = runner({"x": x})
        for i, (indices, axis) in enumerate(cases[:4]):
            np.testing.assert_array_equal(outputs[f"y{i}"].numpy(), np.take(x, indices, axis=axis))
        assert outputs["y4"].shape == (4, 2, 5)
        reduces = [any(u.op is Ops.REDUCE_AXIS for u in outputs[f"y{i}"].uop.toposort()) for i in range(len(cases))]
        assert reduces == ([True] * 5 if call == 0 else [False, False, False, True, True])
