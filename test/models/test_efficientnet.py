"""EfficientNet-B0 in the reference's model-zoo idiom: MBConv blocks (a 1x1 expansion, a depthwise kxk conv,
squeeze-and-excite, a 1x1 projection, a residual where shapes allow), swish everywhere, B0's block table scaled by
width and depth multipliers. Weights (its parameter names) from a torch twin via a mocked fetch; forward against
torch, at reduced width and depth, and B0 itself."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fusegrad import Tensor, helpers, nn
from fusegrad.nn.state import load_state_dict, torch_load

URL = "https://example.invalid/efficientnet-b0.pt"
# B0: (kernel, repeats, stride, expand ratio, input filters, output filters); squeeze-excite ratio 0.25 everywhere
BLOCKS = ((3, 1, 1, 1, 32, 16), (3, 2, 2, 6, 16, 24), (5, 2, 2, 6, 24, 40), (3, 3, 2, 6, 40, 80),
          (5, 3, 1, 6, 80, 112), (5, 4, 2, 6, 112, 192), (3, 1, 1, 6, 192, 320))  # fmt: skip
SE_RATIO, BN_EPS = 0.25, 1e-3


def round_filters(filters: int, width: float) -> int:
    """Channels scaled by `width`, to a multiple of 8 no less than 90% of the scaled count."""
    scaled = filters * width
    new = max(8, int(scaled + 4) // 8 * 8)
    return new + 8 if new < 0.9 * scaled else new


def block_table(width: float, depth: float) -> list[tuple[int, int, int, int, int]]:
    """One (kernel, stride, expand ratio, input filters, output filters) per block, repeats expanded."""
    ret = []
    for kernel, repeats, stride, expand, filters_in, filters_out in BLOCKS:
        filters_in, filters_out = round_filters(filters_in, width), round_filters(filters_out, width)
        for i in range(math.ceil(depth * repeats)):
            ret.append((kernel, stride if i == 0 else 1, expand, filters_in if i == 0 else filters_out, filters_out))
    return ret


class MBConvBlock:
    def __init__(self, kernel_size: int, strides: int, expand_ratio: int, input_filters: int, output_filters: int):
        oup = expand_ratio * input_filters
        self._expand_conv: nn.Conv2d | None = None
        if expand_ratio != 1:
            self._expand_conv = nn.Conv2d(input_filters, oup, 1, bias=False)
            self._bn0 = nn.BatchNorm2d(oup, eps=BN_EPS)
        self.strides, self.pad = strides, (kernel_size - 1) // 2
        self._depthwise_conv = nn.Conv2d(oup, oup, kernel_size, strides, self.pad, groups=oup, bias=False)
        self._bn1 = nn.BatchNorm2d(oup, eps=BN_EPS)
        num_squeezed = max(1, int(input_filters * SE_RATIO))
        self._se_reduce = nn.Conv2d(oup, num_squeezed, 1)
        self._se_expand = nn.Conv2d(num_squeezed, oup, 1)
        self._project_conv = nn.Conv2d(oup, output_filters, 1, bias=False)
        self._bn2 = nn.BatchNorm2d(output_filters, eps=BN_EPS)
        self.residual = strides == 1 and input_filters == output_filters

    def __call__(self, inputs: Tensor) -> Tensor:
        x = inputs if self._expand_conv is None else self._bn0(self._expand_conv(inputs)).swish()
        x = self._bn1(self._depthwise_conv(x)).swish()
        # squeeze and excite: a per-channel gate from the globally pooled features
        x_squeezed = x.avg_pool2d(kernel_size=x.shape[2:])
        x_squeezed = self._se_expand(self._se_reduce(x_squeezed).swish())
        x = self._bn2(self._project_conv(x.mul(x_squeezed.sigmoid())))
        return x.add(inputs) if self.residual else x


class EfficientNet:
    def __init__(self, width: float = 1.0, depth: float = 1.0, classes: int = 1000) -> None:
        out_channels = round_filters(32, width)
        self._conv_stem = nn.Conv2d(3, out_channels, 3, stride=2, padding=1, bias=False)
        self._bn0 = nn.BatchNorm2d(out_channels, eps=BN_EPS)
        self._blocks = [MBConvBlock(*args) for args in block_table(width, depth)]
        in_channels, out_channels = round_filters(320, width), round_filters(1280, width)
        self._conv_head = nn.Conv2d(in_channels, out_channels, 1, bias=False)
        self._bn1 = nn.BatchNorm2d(out_channels, eps=BN_EPS)
        self._fc = nn.Linear(out_channels, classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self._bn0(self._conv_stem(x)).swish()
        x = x.sequential(self._blocks)
        x = self._bn1(self._conv_head(x)).swish()
        return self._fc(x.avg_pool2d(kernel_size=x.shape[2:]).flatten(1))

    def __call__(self, x: Tensor) -> Tensor:
        return self.forward(x)

    def load_from_pretrained(self, url: str = URL) -> None:
        load_state_dict(self, {k: v.to(Tensor.arange(1).device) for k, v in torch_load(helpers.fetch(url)).items()})


# *** the torch twin ***


class TorchMBConv(torch.nn.Module):
    def __init__(self, kernel: int, stride: int, expand: int, filters_in: int, filters_out: int) -> None:
        super().__init__()
        oup, squeezed = expand * filters_in, max(1, int(filters_in * SE_RATIO))
        self.expand = expand != 1
        if self.expand:
            self._expand_conv = torch.nn.Conv2d(filters_in, oup, 1, bias=False)
            self._bn0 = torch.nn.BatchNorm2d(oup, eps=BN_EPS)
        self._depthwise_conv = torch.nn.Conv2d(oup, oup, kernel, stride, (kernel - 1) // 2, groups=oup, bias=False)
        self._bn1 = torch.nn.BatchNorm2d(oup, eps=BN_EPS)
        self._se_reduce, self._se_expand = torch.nn.Conv2d(oup, squeezed, 1), torch.nn.Conv2d(squeezed, oup, 1)
        self._project_conv = torch.nn.Conv2d(oup, filters_out, 1, bias=False)
        self._bn2 = torch.nn.BatchNorm2d(filters_out, eps=BN_EPS)
        self.residual = stride == 1 and filters_in == filters_out

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        x = F.silu(self._bn0(self._expand_conv(inputs))) if self.expand else inputs
        x = F.silu(self._bn1(self._depthwise_conv(x)))
        gate = torch.sigmoid(self._se_expand(F.silu(self._se_reduce(F.adaptive_avg_pool2d(x, 1)))))
        x = self._bn2(self._project_conv(x * gate))
        return x + inputs if self.residual else x


class TorchEfficientNet(torch.nn.Module):
    def __init__(self, width: float, depth: float, classes: int) -> None:
        super().__init__()
        stem, head_in, head_out = round_filters(32, width), round_filters(320, width), round_filters(1280, width)
        self._conv_stem, self._bn0 = (
            torch.nn.Conv2d(3, stem, 3, 2, 1, bias=False),
            torch.nn.BatchNorm2d(stem, eps=BN_EPS),
        )
        self._blocks = torch.nn.Sequential(*[TorchMBConv(*args) for args in block_table(width, depth)])
        self._conv_head = torch.nn.Conv2d(head_in, head_out, 1, bias=False)
        self._bn1 = torch.nn.BatchNorm2d(head_out, eps=BN_EPS)
        self._fc = torch.nn.Linear(head_out, classes)
        for m in self.modules():
            if isinstance(m, torch.nn.BatchNorm2d):  # statistics away from the defaults, so loading them matters
                torch.nn.init.uniform_(m.running_mean, -0.3, 0.3)
                torch.nn.init.uniform_(m.running_var, 0.5, 1.5)
                torch.nn.init.uniform_(m.weight, 0.5, 1.5)
                torch.nn.init.uniform_(m.bias, -0.2, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self._blocks(F.silu(self._bn0(self._conv_stem(x))))
        x = F.silu(self._bn1(self._conv_head(x)))
        return self._fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def check(serve_weights: Callable[[str, torch.nn.Module], None], width: float, depth: float, classes: int) -> None:
    twin = TorchEfficientNet(width, depth, classes).eval()
    serve_weights(URL, twin)
    model = EfficientNet(width, depth, classes)
    model.load_from_pretrained()
    x = np.random.default_rng(1).standard_normal((2, 3, 32, 32)).astype(np.float32)
    np.testing.assert_allclose(model(Tensor(x)).numpy(), twin(torch.tensor(x)).detach().numpy(), rtol=2e-4, atol=2e-4)


def test_block_table_of_b0() -> None:
    table = block_table(1.0, 1.0)
    assert len(table) == 16
    assert table[0] == (3, 1, 1, 32, 16)
    assert table[-1] == (3, 1, 6, 192, 320)
    assert [round_filters(f, 0.25) for f in (32, 16, 24, 40, 1280)] == [8, 8, 8, 16, 320]


@pytest.mark.parametrize(
    "args", [(3, 1, 1, 8, 8), (5, 2, 6, 8, 16), (3, 1, 6, 16, 16)], ids=["expand 1", "stride 2", "residual"]
)
def test_mbconv_block_forward(serve_weights: Callable[[str, torch.nn.Module], None], args: tuple[int, ...]) -> None:
    """One block of each kind: (kernel, stride, expand ratio, input filters, output filters)."""
    twin = TorchMBConv(*args).eval()
    for m in twin.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            torch.nn.init.uniform_(m.running_mean, -0.3, 0.3)
            torch.nn.init.uniform_(m.running_var, 0.5, 1.5)
    serve_weights(URL, twin)
    block = MBConvBlock(*args)
    load_state_dict(block, {k: v.to(Tensor.arange(1).device) for k, v in torch_load(helpers.fetch(URL)).items()})
    x = np.random.default_rng(1).standard_normal((2, args[3], 12, 12)).astype(np.float32)
    np.testing.assert_allclose(block(Tensor(x)).numpy(), twin(torch.tensor(x)).detach().numpy(), rtol=2e-4, atol=2e-4)


@pytest.mark.slow
def test_efficientnet_scaled_forward(serve_weights: Callable[[str, torch.nn.Module], None]) -> None:
    """Every kind of block (expand 1 and 6, kernels 3 and 5, strides 1 and 2, residuals) at a quarter of the width
    and half the depth: 10 blocks. Slow for its scheduling (about 40 s on 2 busy cores for 61 kernels), not its
    compute."""
    check(serve_weights, 0.25, 0.5, 10)


@pytest.mark.slow
def test_efficientnet_b0_forward(serve_weights: Callable[[str, torch.nn.Module], None]) -> None:
    """B0 itself (16 blocks, 5.3M parameters) on a 32x32 image."""
    check(serve_weights, 1.0, 1.0, 1000)
