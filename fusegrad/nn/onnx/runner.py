"""OnnxRunner: bind named inputs to an ONNX graph and evaluate its nodes, in order, as lazy fusegrad Tensor ops.

Everything that can be checked without computing is checked at construction (ops, opset, dtypes) or at the start
of a call (input names, shapes, dtypes), so a bad model or input fails before any kernel runs.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from fusegrad.dtype import DType, dtypes

# importing the op modules registers their ops in ONNX_OPS
from fusegrad.nn.onnx import (  # noqa: F401
    casts,
    ops_control,
    ops_extra,
    ops_index,
    ops_math,
    ops_nn,
    ops_norm,
    ops_recurrent,
    ops_reduce,
    ops_sample,
    ops_selection,
    ops_sequence,
    ops_shape,
    ops_training,
)
from fusegrad.nn.onnx.proto import attributes_of, dtype_of, load_model, tensor_from_numpy, tensor_from_proto
from fusegrad.nn.onnx.registry import ONNX_OPS, TensorSequence, Value, remember_value
from fusegrad.tensor import Tensor

DEFAULT_DOMAINS = ("", "ai.onnx")  # the operator set whose version is "the opset"
# the preview domains: training for Adagrad, Momentum, Adam; ai.onnx.preview for FlexAttention
ONNX_DOMAINS = (*DEFAULT_DOMAINS, "ai.onnx.preview.training", "ai.onnx.preview")
# ops whose output is a function of their input's shape alone
SHAPE_ONLY_OPS = ("Shape", "Size")
# ops whose output shape is read from the values of inputs after the first (or, for NonZero/Compress, the data)
VALUE_SHAPED_OPS = (
    "Reshape",
    "Expand",
    "Tile",
    "Slice",
    "Pad",
    "Range",
    "ConstantOfShape",
    "TopK",
    "OneHot",
    "Resize",
    "Upsample",
    "Squeeze",
    "Unsqueeze",
    "Split",
    "CenterCropPad",
    "NonZero",
    "Compress",
)
# static outputs up to this many elements keep a Python copy of their values (see registry.KNOWN_VALUES)
MAX_REMEMBERED = 1024


def shape_key(value: Value) -> tuple[Any, ...] | None:
    """What of a bound input the folded static values depend on: its shape (each element's, for a sequence)."""
    if value is None:
        return None
    if isinstance(value, TensorSequence):
        return tuple(tuple(t.shape) for t in value)
    return tuple(value.shape)


def declared_types(graph: onnx.GraphProto) -> dict[str, int]:
    """Value name -> the ONNX element type the graph declares for it (inputs, outputs, value infos, initializers)."""
    types = {t.name: t.data_type for t in graph.initializer}
    for info in [*graph.input, *graph.output, *graph.value_info]:
        if info.type.HasField("tensor_type"):
            types[info.name] = info.type.tensor_type.elem_type
    return types


@dataclass(frozen=True, slots=True)
class InputSpec:
    """A graph input: its name, dtype and shape (an int per fixed dim, a str per named dim, None when unknown);
    an optional input may be given None."""

    name: str
    dtype: DType
    shape: tuple[int | str | None, ...] | None
    optional: bool = False
    sequence: bool = False  # a sequence of tensors of dtype (shape unchecked)


def input_spec(info: onnx.ValueInfoProto) -> InputSpec:
    """The InputSpec of a graph input's ValueInfoProto."""
    value_type = info.type
    optional = value_type.HasField("optional_type")
    if optional:
        value_type = value_type.optional_type.elem_type
    if value_type.HasField("sequence_type") and value_type.sequence_type.elem_type.HasField("tensor_type"):
        element = value_type.sequence_type.elem_type.tensor_type.elem_type
        return InputSpec(info.name, dtype_of(element, f"input {info.name!r}"), None, optional, sequence=True)
    if not value_type.HasField("tensor_type"):
        kind = value_type.WhichOneof("value")
        raise NotImplementedError(f"OnnxRunner: input {info.name!r} is a {kind}; only tensor inputs are supported")
    tensor_type = value_type.tensor_type
    dtype = dtype_of(tensor_type.elem_type, f"input {info.name!r}")
    if not tensor_type.HasField("shape"):
        return InputSpec(info.name, dtype, None, optional)
    dims: list[int | str | None] = []
    for dim in tensor_type.shape.dim:
        dims.append(dim.dim_value if dim.HasField("dim_value") else (dim.dim_param or None))
    return InputSpec(info.name, dtype, tuple(dims), optional)


class OnnxRunner:
    """Run an ONNX model with fusegrad: `OnnxRunner(path | bytes | Tensor)({"x": array}) -> {"y": Tensor}`.

    Raises FileNotFoundError for a missing file, ValueError for a truncated or corrupt one, NotImplementedError for an
    op (named with its node and opset) or dtype fusegrad does not support, RuntimeError for missing or mis-shaped
    inputs. Example: `OnnxRunner("model.onnx")({"input": np.zeros((1, 3, 224, 224), np.float32)})["output"]`.
    """

    def __init__(self, model: str | os.PathLike[str] | bytes | Tensor) -> None:
        self.model, base_dir = load_model(model)
        self.base_dir = base_dir
        self.opset = self._onnx_opset()
        graph = self.model.graph
        self._check_ops(graph)
        self.initializers: dict[str, Tensor] = {t.name: tensor_from_proto(t, base_dir) for t in graph.initializer}
        self.inputs = {i.name: input_spec(i) for i in graph.input if i.name not in self.initializers}
        self.output_names = [o.name for o in graph.output]
        self.value_types = declared_types(graph)
        self.nodes = [(node, attributes_of(node, base_dir)) for node in graph.node]
        self.static_nodes = self._find_static_nodes()
        # input shapes -> the realized outputs of the static nodes for those shapes
        self._folded: dict[tuple[tuple[Any, ...] | None, ...], dict[str, Value]] = {}

    def _find_static_nodes(self) -> set[int]:
        """Indices of nodes whose outputs depend on the input shapes only, never on input values.

        Initializers are static, graph inputs are not, and Shape/Size of anything is. These nodes (shape arithmetic,
        weight transposes, dequantised weights) run in the first call for an input shape; their realized outputs are
        reused by later calls, so a TinyJit capture finds the shapes ops read with `static` already computed.
        """
        static_names = set(self.initializers) | {""}
        value_shaped: set[str] = set()  # tensors whose shape depends on input values (NonZero, a Reshape by them...)
        found = set()
        for index, (node, _) in enumerate(self.nodes):
            inputs_static = [name in static_names for name in node.input]
            if (node.op_type in SHAPE_ONLY_OPS and not value_shaped.intersection(node.input)) or all(inputs_static):
                static_names.update(node.output)
                found.add(index)
            elif value_shaped.intersection(node.input) or self._reads_shape_from_values(node.op_type, inputs_static):
                value_shaped.update(node.output)
        return found

    @staticmethod
    def _reads_shape_from_values(op_type: str, inputs_static: list[bool]) -> bool:
        """Whether a node's output shape follows from the values of its non-static inputs."""
        if op_type in ("NonZero", "Compress", "NonMaxSuppression", "Unique"):
            return True
        if op_type in ("Range", "ConstantOfShape"):  # every input is a shape or bound
            return not all(inputs_static)
        return op_type in VALUE_SHAPED_OPS and not all(inputs_static[1:])

    def _onnx_opset(self) -> int:
        """The version of the default (ai.onnx) operator set the model imports."""
        versions = [o.version for o in self.model.opset_import if o.domain in DEFAULT_DOMAINS]
        newest = int(onnx.defs.onnx_opset_version())
        if not versions:
            return newest
        if versions[0] > newest:
            raise NotImplementedError(f"OnnxRunner: opset {versions[0]} is newer than the newest known ({newest})")
        return int(versions[0])

    def _check_ops(self, graph: onnx.GraphProto) -> None:
        """NotImplementedError for the first node whose op (or domain) has no implementation."""
        for index, node in enumerate(graph.node):
            for attr in node.attribute:  # sub-graphs (If branches, Loop bodies) are checked too
                if attr.type == onnx.AttributeProto.GRAPH:
                    self._check_ops(attr.g)
            if node.domain not in ONNX_DOMAINS or node.op_type not in ONNX_OPS:
                where = f"node {node.name!r}" if node.name else f"node #{index}"
                domain = f" in domain {node.domain!r}" if node.domain not in ONNX_DOMAINS else ""
                raise NotImplementedError(
                    f"OnnxRunner: op {node.op_type}{domain} ({where}, opset {self.opset}) is not supported"
                )

    def bind(self, inputs: dict[str, Any]) -> dict[str, Value]:
        """The inputs as Tensors, after checking names, dtypes and shapes against the graph (named dims must agree)."""
        if missing := [name for name in self.inputs if name not in inputs]:
            raise RuntimeError(f"OnnxRunner: no value for input(s) {missing}; the model takes {list(self.inputs)}")
        if unknown := [name for name in inputs if name not in self.inputs]:
            raise RuntimeError(f"OnnxRunner: unknown input(s) {unknown}; the model takes {list(self.inputs)}")
        named_dims: dict[str, int] = {}
        bound: dict[str, Value] = {}
        for name, spec in self.inputs.items():
            value = inputs[name]
            if value is None and spec.optional:  # an empty optional
                bound[name] = None
                continue
            if spec.sequence:
                bound[name] = TensorSequence(self._bind_tensor(spec, item) for item in value)
                continue
            tensor = self._bind_tensor(spec, value)
            self._check_shape(spec, tuple(tensor.shape), named_dims)
            bound[name] = tensor
        return bound

    @staticmethod
    def _bind_tensor(spec: InputSpec, value: Any) -> Tensor:
        """One input value (or sequence element) as a Tensor of the spec's dtype; RuntimeError for another dtype."""
        tensor = value if isinstance(value, Tensor) else tensor_from_numpy(np.asarray(value), spec.dtype)
        if tensor.dtype != spec.dtype:
            raise RuntimeError(
                f"OnnxRunner: input {spec.name!r} has dtype {tensor.dtype}, the model wants {spec.dtype}"
            )
        return tensor

    @staticmethod
    def _check_shape(spec: InputSpec, shape: tuple[Any, ...], named_dims: dict[str, int]) -> None:
        """RuntimeError unless shape fits the spec's fixed dims and every named dim has one size across inputs."""
        if spec.shape is None:
            return
        wanted = tuple("?" if d is None else d for d in spec.shape)
        if len(shape) != len(spec.shape):
            raise RuntimeError(f"OnnxRunner: input {spec.name!r} has shape {shape}, the model wants {wanted}")
        for size, dim in zip(shape, spec.shape, strict=False):
            if isinstance(dim, str) and named_dims.setdefault(dim, size) != size:
                raise RuntimeError(
                    f"OnnxRunner: input {spec.name!r} has {dim}={size} but another input set {dim}={named_dims[dim]}"
                )
            if isinstance(dim, int) and dim > 0 and size != dim:
                raise RuntimeError(f"OnnxRunner: input {spec.name!r} has shape {shape}, the model wants {wanted}")

    def __call__(self, inputs: dict[str, Any]) -> dict[str, Tensor | TensorSequence]:
        """Evaluate the graph on inputs (arrays, lists or Tensors by input name; a list of them for a sequence
        input); outputs are lazy Tensors (or lists of them, for a sequence output) by name."""
        bound = self.bind(inputs)
        values: dict[str, Value] = {"": None, **self.initializers, **bound}
        key = tuple(shape_key(t) for t in bound.values())
        folded = self._folded.get(key)
        values.update(folded or {})
        for index, (node, attrs) in enumerate(self.nodes):
            if folded is None or index not in self.static_nodes:
                self._run_node(node, attrs, values)
        if folded is None:
            self._folded[key] = self._keep_static(values)
        outputs = {}
        for name in self.output_names:
            value = values.get(name)
            if value is None:
                raise RuntimeError(f"OnnxRunner: the graph never computes its output {name!r}")
            outputs[name] = value
        return outputs

    def _keep_static(self, values: dict[str, Value]) -> dict[str, Value]:
        """The static nodes' outputs from a finished call, realized (they hold no input values, only shapes)."""
        folded: dict[str, Value] = {}
        for index in self.static_nodes:
            folded.update({name: values[name] for name in self.nodes[index][0].output if name})
        results = [t for v in folded.values() for t in ([v] if isinstance(v, Tensor) else v or [])]
        if results:
            results[0].realize(*results[1:])
        for t in results:
            if t.numel() <= MAX_REMEMBERED and t.dtype != dtypes.bfloat16:  # shapes, axes, scales: read once
                remember_value(t)
        return folded

    def _run_graph(self, scope: dict[str, Value], graph: onnx.GraphProto, bindings: dict[str, Value]) -> list[Value]:
        """A sub-graph's outputs (If branches, Loop bodies): it sees the enclosing scope, then its own names."""
        values = {**scope, **{t.name: tensor_from_proto(t, self.base_dir) for t in graph.initializer}, **bindings}
        for node in graph.node:
            self._run_node(node, attributes_of(node, self.base_dir), values)
        return [values[output.name] for output in graph.output]

    def _run_node(self, node: onnx.NodeProto, attrs: dict[str, Any], values: dict[str, Value]) -> None:
        """Compute one node's outputs into values; errors get a note naming the node."""
        fn, extras = ONNX_OPS[node.op_type]
        args = [values[name] for name in node.input]
        context = {
            "opset": self.opset,
            "node_outputs": len(node.output),
            "run_graph": functools.partial(self._run_graph, values),
            "input_types": tuple(self.value_types.get(name, 0) for name in node.input),
        }
        keywords = {**attrs, **{key: context[key] for key in extras}}
        try:
            result = fn(*args, **keywords)
        except Exception as e:
            e.add_note(f"in ONNX node {node.name!r} ({node.op_type}, opset {self.opset})")
            raise
        results = [result] if isinstance(result, (Tensor, TensorSequence)) else list(result)
        for name, value in zip(node.output, results, strict=False):
            if name:
                values[name] = value
