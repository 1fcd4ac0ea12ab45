"""Small torch models exported to ONNX for the runner tests and bench/onnx.py: a ResNet-18-like convnet, a transformer
encoder taking a padding mask, and an MLP. Each `export_*` returns (model bytes, {input name: numpy array})."""

from __future__ import annotations

import io
import warnings

import numpy as np
import torch
from torch import nn


class BasicBlock(nn.Module):
    """ResNet's two 3x3 convs with batch norm and a skip (a strided 1x1 conv when the shape changes)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip = nn.Sequential()
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.skip(x))


class ConvNet(nn.Module):
    """ResNet-18's layout at a small width: stem, max pool, four stages of two blocks, global pool, linear."""

    def __init__(self, width: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.pool = nn.MaxPool2d(3, 2, 1)
        widths = [width, width * 2, width * 4, width * 8]
        blocks: list[nn.Module] = []
        cin = width
        for i, cout in enumerate(widths):
            blocks += [BasicBlock(cin, cout, 1 if i == 0 else 2), BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.pool(self.stem(x)))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class Encoder(nn.Module):
    """Token embedding, two pre-norm transformer encoder layers with a key padding mask, a linear head."""

    def __init__(self, vocab: int = 50, dim: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, dim * 2, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens), src_key_padding_mask=padding))


def export(model: nn.Module, inputs: dict[str, np.ndarray]) -> bytes:
    """model in eval mode exported by torch's TorchScript exporter (opset 17) to bytes."""
    model.eval()
    buffer = io.BytesIO()
    args = tuple(torch.from_numpy(v) for v in inputs.values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter warns that it is deprecated
        torch.onnx.export(
            model, args, buffer, input_names=list(inputs), output_names=["output"], opset_version=17, dynamo=False
        )
    return buffer.getvalue()


def randomize_batchnorm(model: nn.Module, rng: np.random.Generator) -> None:
    """Give every batch norm non-trivial running statistics and affine parameters, so folding them is tested."""
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            size = module.num_features
            module.running_mean.copy_(torch.from_numpy(rng.normal(0, 0.1, size).astype(np.float32)))
            module.running_var.copy_(torch.from_numpy(rng.uniform(0.5, 1.5, size).astype(np.float32)))
            module.weight.data.copy_(torch.from_numpy(rng.uniform(0.5, 1.5, size).astype(np.float32)))
            module.bias.data.copy_(torch.from_numpy(rng.normal(0, 0.1, size).astype(np.float32)))


def export_convnet(batch: int = 2, size: int = 32) -> tuple[bytes, dict[str, np.ndarray]]:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = ConvNet()
    randomize_batchnorm(model, rng)
    inputs = {"image": rng.standard_normal((batch, 3, size, size)).astype(np.float32)}
    return export(model, inputs), inputs


def export_encoder(batch: int = 2, seq: int = 16) -> tuple[bytes, dict[str, np.ndarray]]:
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 50, (batch, seq)).astype(np.int64)
    padding = np.zeros((batch, seq), dtype=bool)
    padding[1, seq // 2 :] = True  # the second sequence is half padding
    return export(Encoder(), {"tokens": tokens, "padding": padding}), {"tokens": tokens, "padding": padding}


def export_mlp(batch: int = 8) -> tuple[bytes, dict[str, np.ndarray]]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(20, 64), nn.GELU(), nn.Linear(64, 64), nn.Tanh(), nn.LayerNorm(64), nn.Linear(64, 5), nn.Softmax(-1)
    )
    inputs = {"x": np.random.default_rng(2).standard_normal((batch, 20)).astype(np.float32)}
    return export(model, inputs), inputs


def onnxruntime_outputs(model: bytes, inputs: dict[str, np.ndarray], threads: int = 2) -> list[np.ndarray]:
    """The model's outputs from onnxruntime on the CPU."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    return list(session.run(None, inputs))
