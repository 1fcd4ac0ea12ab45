"""Train a small convnet (conv, batchnorm, max-pool, linear) on MNIST with Adam, the training step run by TinyJit.

Run `python -m fusegrad.examples.mnist` (or `--help`). `--data auto` downloads MNIST into the dataset cache when the
network allows, else falls back to scikit-learn's handwritten digits upscaled to 28x28 (no download); it says which
data it used. A progress bar shows the loss, the batch accuracy and steps per second; the last line is the accuracy
on the test images. `VIZ=1` records the run for the VIZ web viewer.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from tqdm import tqdm

from fusegrad import Tensor, nn
from fusegrad.engine.jit import TinyJit
from fusegrad.helpers import GlobalCounters
from fusegrad.nn import datasets
from fusegrad.nn.optim import Adam
from fusegrad.nn.state import get_parameters

DataSet = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # images (N, 28, 28) uint8, labels (N,) uint8 x2


def max_pool(x: Tensor) -> Tensor:
    """2x2 max-pool of the last two axes."""
    pooled = x.max_pool2d()
    # TODO(#7): drop this check once max_pool2d's signature is overloaded on return_indices
    assert isinstance(pooled, Tensor), "max_pool2d returns a tuple only with return_indices"
    return pooled


class ConvNet:
    """(B, 1, 28, 28) images scaled to 0..1 -> (B, 10) logits: two conv-batchnorm-relu-pool blocks and a linear head."""

    def __init__(self, width: int = 16) -> None:
        self.conv1, self.norm1 = nn.Conv2d(1, width, 3), nn.BatchNorm(width)
        self.conv2, self.norm2 = nn.Conv2d(width, 2 * width, 3), nn.BatchNorm(2 * width)
        self.head = nn.Linear(2 * width * 5 * 5, 10)

    def __call__(self, x: Tensor) -> Tensor:
        x = max_pool(self.norm1(self.conv1(x)).relu())  # (B, 1, 28, 28) -> (B, w, 26, 26) -> (B, w, 13, 13)
        x = max_pool(self.norm2(self.conv2(x)).relu())  # -> (B, 2w, 11, 11) -> (B, 2w, 5, 5)
        return self.head(x.flatten(1))  # (B, 2w*25) -> (B, 10)


def load_data(choice: str) -> tuple[str, DataSet]:
    """The data named by --data, and a line saying what it is; `auto` tries MNIST, then the offline digits."""
    if choice in ("auto", "mnist"):
        try:
            return "MNIST (60000 train / 10000 test images)", datasets.load_mnist_arrays()
        except (OSError, ValueError) as e:  # offline (URLError is an OSError), or a download that fails its checksum
            if choice == "mnist":
                raise SystemExit(f"mnist: cannot download MNIST ({e}); --data digits trains offline") from None
            reason = f"MNIST unavailable: {e}"
    else:
        reason = "chosen with --data digits"
    data = datasets.load_digits_arrays()
    what = f"scikit-learn digits, 8x8 upscaled to 28x28 ({len(data[1])} train / {len(data[3])} test images; {reason})"
    return what, data


def evaluate(model: ConvNet, images: Tensor, labels: np.ndarray, chunk: int = 2000) -> float:
    """Accuracy (0..1) of the model in evaluation mode (batchnorm's running statistics) on uint8 images."""
    correct = 0
    with Tensor.test():
        for start in range(0, len(labels), chunk):
            logits = model(images[start : start + chunk].float() / 255.0)
            correct += int((logits.argmax(-1).numpy() == labels[start : start + chunk]).sum())
    return correct / len(labels)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=400, help="training steps (default 400)")
    parser.add_argument("--batch-size", type=int, default=64, help="images per step (default 64)")
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate (default 3e-3)")
    parser.add_argument("--width", type=int, default=16, help="channels of the first conv layer (default 16)")
    parser.add_argument("--device", default=None, help="device to train on (default: Device.DEFAULT)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights and the batch order (default 0)")
    parser.add_argument("--data", choices=("auto", "mnist", "digits"), default="auto",
                        help="auto: MNIST if it can be downloaded, else the offline digits (default auto)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch_size < 2 or args.width < 1 or args.lr <= 0:
        parser.error("--steps and --width must be at least 1, --batch-size at least 2, --lr positive")
    return args


def train(args: argparse.Namespace, data: DataSet) -> float:
    """Train for args.steps steps and return the test accuracy."""
    x_train, y_train, x_test, y_test = data
    Tensor.manual_seed(args.seed)
    model = ConvNet(args.width)
    optimizer = Adam(get_parameters(model), lr=args.lr)

    @TinyJit
    def train_step(images: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        optimizer.zero_grad()
        logits = model(images.float() / 255.0)  # (B, 1, 28, 28) uint8 -> (B, 10)
        loss = logits.sparse_categorical_crossentropy(labels).backward()
        accuracy = (logits.argmax(-1) == labels).float().mean()
        # loss, accuracy and gradients in one schedule (one forward, on the weights before this step's update)
        Tensor.realize(loss, accuracy, *[p.grad for p in optimizer.params if p.grad is not None])
        optimizer.step()
        return loss, accuracy

    order = np.random.default_rng(args.seed)
    bar = tqdm(range(args.steps), unit="step", dynamic_ncols=True)
    with Tensor.train():
        for _ in bar:
            # batches are gathered on the host: indexing a Tensor with a Tensor costs a one-hot pass over all images
            index = order.integers(0, len(y_train), args.batch_size)
            images = Tensor(x_train[index][:, None], device=args.device).realize()  # (B, 1, 28, 28) uint8
            labels = Tensor(y_train[index], device=args.device).realize()  # (B,) uint8
            loss, accuracy = train_step(images, labels)
            bar.set_postfix(loss=f"{loss.item():.3f}", acc=f"{accuracy.item():.3f}", refresh=False)
    return evaluate(model, Tensor(x_test[:, None], device=args.device), y_test)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    what, data = load_data(args.data)
    print(f"data: {what}", flush=True)
    start = time.perf_counter()
    accuracy = train(args, data)
    took = time.perf_counter() - start
    print(f"{args.steps} steps of batch {args.batch_size} in {took:.1f} s ({GlobalCounters.kernel_count} kernels run)")
    print(f"test accuracy: {100 * accuracy:.2f}% on {len(data[3])} test images")


if __name__ == "__main__":
    main()
