"""Shared helpers for the ONNX tests: run one backend node test case through OnnxRunner and compare its outputs."""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from fusegrad import Tensor, dtypes
from fusegrad.nn.onnx import OnnxRunner
from fusegrad.nn.onnx.proto import BITS_DTYPES, CONTAINED_NUMPY


@functools.cache
def node_cases() -> dict[str, Any]:
    """name -> onnx.backend TestCase for every node case the onnx package generates in Python (~15 s, once)."""
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators overflow casts on purpose
        return {case.name: case for case in node.collect_testcases()}


def as_numpy(t: Tensor) -> np.ndarray:
    """A Tensor's value as numpy (bfloat16 and float8 widened to float32, which numpy lacks)."""
    return (t.cast(dtypes.float32) if t.dtype in BITS_DTYPES else t).numpy()


def as_array(value: Any) -> np.ndarray | None:
    """A data set entry (an array or a TensorProto) as numpy; ml_dtypes' bfloat16/float8 kept as they are; an empty
    optional (None) stays None."""
    if value is None:
        return None
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)


def as_input(value: Any) -> np.ndarray | list[np.ndarray | None] | None:
    """A data set input: a sequence (a list) element by element, anything else as_array."""
    return [as_array(v) for v in value] if isinstance(value, list) else as_array(value)


def check_output(name: str, got: Any, want: Any, case: Any) -> None:
    """AssertionError unless an output (a tensor, or a sequence of them) matches the expected value."""
    if isinstance(want, list):
        assert isinstance(got, list), f"{name}: a tensor where the case expects a sequence"
        assert len(got) == len(want), f"{name}: sequence of {len(got)}, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            check_output(f"{name}[{i}]", g, w, case)
        return
    assert not isinstance(got, list), f"{name}: a sequence where the case expects a tensor"
    expected_array = as_array(want)
    assert expected_array is not None, f"{name}: the case expects an empty optional"
    want = comparable(expected_array)
    values = as_numpy(got)
    assert values.shape == want.shape, f"{name}: shape {values.shape}, expected {want.shape}"
    if want.dtype.kind in "fc":
        np.testing.assert_allclose(values, want.astype(values.dtype), rtol=case.rtol, atol=case.atol, err_msg=name)
    else:
        np.testing.assert_array_equal(values, want, err_msg=name)


def comparable(want: np.ndarray) -> np.ndarray:
    """Expected values in a dtype numpy compares: ml_dtypes' bfloat16/float8 (kind 'V' or unknown) as float32, the
    sub-byte types (int4, float4_e2m1fn...) in the container fusegrad holds them in."""
    if (container := CONTAINED_NUMPY.get(want.dtype.name)) is not None:
        return want.astype(container)
    return want.astype(np.float32) if want.dtype.name.startswith(("bfloat16", "float8")) else want


def run_case(case: Any) -> None:
    """Run every data set of a node case; AssertionError (or the runner's error) when an output differs."""
    model: onnx.ModelProto = case.model
    runner = OnnxRunner(model.SerializeToString())
    input_names = [i.name for i in model.graph.input if i.name not in runner.initializers]
    for inputs, expected in case.data_sets:
        outputs = runner(dict(zip(input_names, [as_input(i) for i in inputs], strict=False)))
        for name, want in zip(runner.output_names, expected, strict=False):
            check_output(name, outputs[name], want, case)
