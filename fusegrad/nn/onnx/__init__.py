"""Run ONNX models with fusegrad: `OnnxRunner(path | bytes | Tensor)({name: value}) -> {name: Tensor}`.

The `onnx` package parses the model (install the extra: `pip install -e '.[onnx]'`); fusegrad computes every op.
Layout: proto.py (parsing), runner.py (binding and evaluation), registry.py (op table), ops_*.py (ops by family).
"""

from fusegrad.nn.onnx.runner import OnnxRunner

__all__ = ["OnnxRunner"]
