"""ResNet-18 in the reference's model-zoo idiom (BasicBlock lists run with `x.sequential`, BatchNorm2d, a padded
max pool, a global avg_pool2d, `reshape(shape=...)`), weights from a torch twin through a mocked fetch; forward and a
few gradients against torch. At full width its 3x3 convs over 256 channels once crashed kernel opts (a SWAP of a
loop an upcast had taken whole)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fusegrad import Tensor, helpers, nn
from fusegrad.nn.state import get_parameters, load_state_dict, torch_load

URL = "https://example.invalid/resnet18.pt"
STAGES = ((1, 1), (2, 2), (4, 2), (8, 2))  # (channel multiple of the stem width, stride of its first block)


class BasicBlock:
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample: list[Callable[[Tensor], Tensor]] = []
        if stride != 1 or in_planes != self.expansion * planes:
            self.downsample = [nn.Conv2d(in_planes, self.expansion * planes, kernel_size=1, stride=stride, bias=False),
                               nn.BatchNorm2d(self.expansion * planes)]  # fmt: skip

    def __call__(self, x: Tensor) -> Tensor:
        out = self.bn1(self.conv1(x)).relu()
        out = self.bn2(self.conv2(out))
        return (out + x.sequential(self.downsample)).relu()


class ResNet18:
    def __init__(self, num_classes: int = 10, width: int = 64) -> None:
        self.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        in_planes = width
        for i, (mult, stride) in enumerate(STAGES):
            setattr(
                self,
                f"layer{i + 1}",
                [BasicBlock(in_planes, width * mult, stride), BasicBlock(width * mult, width * mult)],
            )
            in_planes = width * mult
        self.fc = nn.Linear(in_planes, num_classes)

    def __call__(self, x: Tensor) -> Tensor:
        out = self.bn1(self.conv1(x)).relu()
        out = out.pad([1, 1, 1, 1]).max_pool2d((3, 3), 2)  # zero padding: the input is >= 0 after relu
        out = out.sequential(self.layer1).sequential(self.layer2).sequential(self.layer3).sequential(self.layer4)
        out = out.avg_pool2d(kernel_size=out.shape[2:])  # (B, C, 1, 1)
        return self.fc(out.reshape(shape=(out.shape[0], -1)))

    def load_from_pretrained(self, url: str = URL) -> None:
        load_state_dict(self, {k: v.to(Tensor.arange(1).device) for k, v in torch_load(helpers.fetch(url)).items()})


# *** the torch twin: same parameter names ***


class TorchBlock(torch.nn.Module):
    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(planes)
        self.conv2 = torch.nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(planes)
        self.downsample = torch.nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.downsample = torch.nn.Sequential(torch.nn.Conv2d(in_planes, planes, 1, stride, bias=False),
                                                  torch.nn.BatchNorm2d(planes))  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.downsample(x))


class TorchResNet18(torch.nn.Module):
    def __init__(self, num_classes: int, width: int) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(width)
        in_planes = width
        for i, (mult, stride) in enumerate(STAGES):
            blocks = [TorchBlock(in_planes, width * mult, stride), TorchBlock(width * mult, width * mult)]
            self.add_module(f"layer{i + 1}", torch.nn.Sequential(*blocks))
            in_planes = width * mult
        self.fc = torch.nn.Linear(in_planes, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))


def randomize_batchnorms(module: torch.nn.Module) -> None:
    """Running statistics and affine parameters away from their defaults, so loading them matters."""
    for m in module.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)


def pair(serve_weights: Callable[[str, torch.nn.Module], None], width: int) -> tuple[ResNet18, TorchResNet18]:
    twin = TorchResNet18(10, width)
    randomize_batchnorms(twin)
    twin.eval()
    serve_weights(URL, twin)
    model = ResNet18(10, width)
    model.load_from_pretrained()
    return model, twin


def check_forward(model: ResNet18, twin: TorchResNet18, shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(model(Tensor(x)).numpy(), twin(torch.tensor(x)).detach().numpy(), rtol=2e-4, atol=2e-4)


def test_resnet18_small_forward(serve_weights: Callable[[str, torch.nn.Module], None]) -> None:
    check_forward(*pair(serve_weights, 8), (2, 3, 32, 32))


@pytest.mark.slow
def test_resnet18_small_backward(serve_weights: Callable[[str, torch.nn.Module], None]) -> None:
    """Gradients of a weighted sum of the logits (batchnorm in eval mode) for the stem, a block and the head."""
    model, twin = pair(serve_weights, 8)
    x = np.random.default_rng(2).standard_normal((2, 3, 32, 32)).astype(np.float32)
    weights = np.random.default_rng(3).standard_normal((2, 10)).astype(np.float32)
    for p in get_parameters(model):
        p.requires_grad = True
    (model(Tensor(x)) * Tensor(weights)).sum().backward()
    (twin(torch.tensor(x)) * torch.tensor(weights)).sum().backward()
    pairs = [(model.conv1.weight, twin.conv1.weight), (model.layer3[0].conv2.weight, twin.layer3[0].conv2.weight),
             (model.layer2[0].downsample[0].weight, twin.layer2[0].downsample[0].weight),
             (model.fc.weight, twin.fc.weight), (model.fc.bias, twin.fc.bias)]  # fmt: skip
    for ours, theirs in pairs:
        assert ours.grad is not None
        assert theirs.grad is not None
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-3, atol=1e-4)


def test_resnet18_full_width_forward(serve_weights: Callable[[str, torch.nn.Module], None]) -> None:
    """ResNet-18 itself (11.2M parameters) on a 32x32 image: the model that crashed kernel opts."""
    check_forward(*pair(serve_weights, 64), (1, 3, 32, 32))
