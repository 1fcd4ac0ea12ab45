"""Train a small convnet (conv, batchnorm, max-pool, linear) on MNIST with Adam, the training step run by TinyJit.

Run `python -m fusegrad.examples.mnist` (or `--help`). `--data auto` downloads MNIST into the dataset cache when the
network allows, else falls back to scikit-learn's handwritten digits upscaled to 28x28 (no download); it says which
data it used. A progress bar shows the loss, the batch accuracy and steps per second; the last line is the accuracy
on the test images. `VIZ=1` records the run for the VIZ web viewer. `--checkpoint PATH` saves the weights and the
optimiser state (`--resume` continues from them); `mpirun -np 2 python -m fusegrad.examples.mnist --data-parallel`
trains on 2 processes (fusegrad.distributed), each on its own slice of the training images.
"""

from __future__ import annotations

import argparse
import pathlib
import time
from collections.abc import Callable

import numpy as np
from tqdm import tqdm

from fusegrad import Tensor, distributed, nn
from fusegrad.distributed import DistributedDataParallel
from fusegrad.engine.jit import TinyJit
from fusegrad.helpers import GlobalCounters
from fusegrad.nn import datasets
from fusegrad.nn.optim import Adam
from fusegrad.nn.state import get_parameters, get_state_dict, load_state_dict, safe_load, safe_load_metadata, safe_save

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
    parser.add_argument("--checkpoint", default=None, help="save weights and optimiser state here at the end")
    parser.add_argument("--resume", action="store_true", help="continue from --checkpoint for --steps more steps")
    parser.add_argument("--data-parallel", action="store_true",
                        help="train on every rank of the MPI world (under mpirun; the dist extra)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch_size < 2 or args.width < 1 or args.lr <= 0:
        parser.error("--steps and --width must be at least 1, --batch-size at least 2, --lr positive")
    if args.resume and args.checkpoint is None:
        parser.error("--resume needs --checkpoint PATH")
    return args


def save_checkpoint(path: pathlib.Path, model: ConvNet, optimizer: Adam, step: int, width: int) -> None:
    tensors = {f"model.{k}": v for k, v in get_state_dict(model).items()}
    tensors |= {f"optim.{k}": v for k, v in get_state_dict(optimizer).items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    safe_save(tensors, str(path), metadata={"step": str(step), "width": str(width)})


def load_checkpoint(path: pathlib.Path, model: ConvNet, optimizer: Adam, width: int) -> int:
    """Load a checkpoint written by `save_checkpoint` into model and optimizer; returns the step it was saved at."""
    if not path.is_file():
        raise SystemExit(f"--resume: no checkpoint at {path} (train with --checkpoint first)")
    metadata = safe_load_metadata(str(path))[2].get("__metadata__", {})
    if metadata.get("width") != str(width) or "step" not in metadata:
        raise SystemExit(f"--resume: {path} is not a checkpoint of this example with --width {width} ({metadata})")
    tensors = safe_load(str(path))
    load_state_dict(model, {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")})
    load_state_dict(optimizer, {k.removeprefix("optim."): v for k, v in tensors.items() if k.startswith("optim.")})
    return int(metadata["step"])


Step = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]


def make_step(model: ConvNet, optimizer: Adam, ddp: DistributedDataParallel | None) -> Step:
    """The jitted training step; data-parallel, the gradient averaging captured inside it."""

    def forward_backward(images: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        optimizer.zero_grad()
        logits = model(images.float() / 255.0)  # (B, 1, 28, 28) uint8 -> (B, 10)
        loss = logits.sparse_categorical_crossentropy(labels).backward()
        accuracy = (logits.argmax(-1) == labels).float().mean()
        # loss, accuracy and gradients in one schedule (one forward, on the weights before this step's update)
        Tensor.realize(loss, accuracy, *[p.grad for p in optimizer.params if p.grad is not None])
        return loss, accuracy

    @TinyJit
    def train_step(images: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        loss, accuracy = forward_backward(images, labels)
        optimizer.step()
        return loss, accuracy

    if ddp is None:
        return train_step

    @TinyJit
    def step_data_parallel(images: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        optimizer.zero_grad()
        logits = model(images.float() / 255.0)
        loss = logits.sparse_categorical_crossentropy(labels).backward()
        accuracy = (logits.argmax(-1) == labels).float().mean()
        # the gradients are realized bucket by bucket with loss and accuracy, each bucket's averaging started as soon
        # as it is ready; the averaging is captured with the kernels and replays inside this one jit
        ddp.sync_gradients(loss, accuracy)
        optimizer.step()
        return loss, accuracy

    return step_data_parallel


def train(args: argparse.Namespace, data: DataSet) -> float | None:
    """Train for args.steps steps and return the test accuracy (None on the ranks other than 0 of --data-parallel)."""
    x_train, y_train, x_test, y_test = data
    rank, world = (distributed.init().rank, distributed.get_world_size()) if args.data_parallel else (0, 1)
    Tensor.manual_seed(args.seed)
    model = ConvNet(args.width)
    optimizer = Adam(get_parameters(model), lr=args.lr)
    start = load_checkpoint(pathlib.Path(args.checkpoint), model, optimizer, args.width) if args.resume else 0
    ddp = DistributedDataParallel(model) if args.data_parallel else None  # rank 0's weights (and statistics) to all
    train_step = make_step(model, optimizer, ddp)

    # each rank draws from its own slice of the images; a first single-process run keeps its historical batch order
    mine = np.array_split(np.arange(len(y_train)), world)[rank]
    order = np.random.default_rng(args.seed if (rank, start) == (0, 0) else [args.seed, rank, start])
    bar = tqdm(range(start, start + args.steps), unit="step", dynamic_ncols=True, disable=rank != 0)
    with Tensor.train():
        for _ in bar:
            # batches are gathered on the host: indexing a Tensor with a Tensor costs a one-hot pass over all images
            index = mine[order.integers(0, len(mine), args.batch_size)]
            images = Tensor(x_train[index][:, None], device=args.device).realize()  # (B, 1, 28, 28) uint8
            labels = Tensor(y_train[index], device=args.device).realize()  # (B,) uint8
            loss, accuracy = train_step(images, labels)
            bar.set_postfix(loss=f"{loss.item():.3f}", acc=f"{accuracy.item():.3f}", refresh=False)
    if rank != 0:  # every rank holds the same weights: rank 0 alone evaluates and saves
        distributed.shutdown()
        return None
    if args.checkpoint is not None:
        save_checkpoint(pathlib.Path(args.checkpoint), model, optimizer, start + args.steps, args.width)
    test_accuracy = evaluate(model, Tensor(x_test[:, None], device=args.device), y_test)
    if args.data_parallel:
        print(f"data-parallel over {world} ranks, each with batch {args.batch_size}")
        distributed.shutdown()
    return test_accuracy


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    what, data = load_data(args.data)
    rank = distributed.init().rank if args.data_parallel else 0
    if rank == 0:
        print(f"data: {what}", flush=True)
    start = time.perf_counter()
    accuracy = train(args, data)
    took = time.perf_counter() - start
    if accuracy is None:  # a rank other than 0
        return
    if args.checkpoint is not None:
        print(f"saved {args.checkpoint}; continue with --resume")
    print(f"{args.steps} steps of batch {args.batch_size} in {took:.1f} s ({GlobalCounters.kernel_count} kernels run)")
    print(f"test accuracy: {100 * accuracy:.2f}% on {len(data[3])} test images")


if __name__ == "__main__":
    main()
