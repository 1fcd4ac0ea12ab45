"""fusegrad.distributed over a real MPI: each test starts this file under `mpiexec -n 2` as the worker of a scenario.

Skips cleanly without mpi4py or mpiexec (`pip install -e '.[dist]'` brings both). Run as a script, the file is the
worker: `mpiexec -n 2 python test/test_distributed.py SCENARIO OUT_DIR`.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from fusegrad import Tensor
from fusegrad.engine.jit import TinyJit
from fusegrad.nn import Linear, optim
from fusegrad.nn.state import get_parameters

STEPS, BATCH = 4, 3  # per-rank batch; the single-process reference uses 2 * BATCH


class TinyModel:
    """(B, 4) -> (B, 2): two linear layers with a tanh; `wide` changes a shape for the mismatch scenario."""

    def __init__(self, wide: bool = False) -> None:
        self.l1 = Linear(4, 5 if wide else 3)
        self.l2 = Linear(5 if wide else 3, 2)

    def __call__(self, x: Tensor) -> Tensor:
        return self.l2(self.l1(x).tanh())


def global_batch(step: int) -> tuple[np.ndarray, np.ndarray]:
    """The whole (2 * BATCH) batch of a step; rank r trains on rows r*BATCH .. (r+1)*BATCH."""
    rng = np.random.default_rng(100 + step)
    return rng.standard_normal((2 * BATCH, 4)).astype(np.float32), rng.standard_normal((2 * BATCH, 2)).astype(
        np.float32
    )


SHARD_DEVICES = ("CPU:0", "CPU:1")


def replicate(tensors: list[Tensor], devices: tuple[str, ...] | None) -> list[Tensor]:
    """The tensors copied to every one of `devices`, in place (no devices: unchanged)."""
    return tensors if devices is None else [t.shard_(devices) for t in tensors]


def train(rank: int, world: int, mode: str) -> TinyModel:
    """STEPS steps on mean squared error; with world > 1 the gradients are averaged by DDP.

    "eager" uses SGD (sensitive to the gradients' scale: a sum instead of a mean shows); "sharded" is eager SGD with
    the model and batch replicated over two devices inside each rank (gradients staged through the host); "jit"
    (forward+backward and update jitted apart, the averaging between them) and "jit_whole" (one TinyJit for the whole
    step, the averaging captured inside it) use Adam."""
    Tensor.manual_seed(rank)  # different initial weights per rank: DDP must broadcast rank 0's
    model = TinyModel()
    params = get_parameters(model)
    devices = SHARD_DEVICES if mode == "sharded" else None
    opt = optim.SGD(replicate(params, devices), lr=0.2) if mode in ("eager", "sharded") else optim.Adam(params, lr=0.05)
    ddp = None
    if world > 1:
        from fusegrad.distributed import DistributedDataParallel

        ddp = DistributedDataParallel(model, bucket_mb=0.00003)  # 30-byte buckets: 2 Iallreduce calls per step

    def forward_backward(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean().backward()
        Tensor.realize(loss, *[p.grad for p in opt.params if p.grad is not None])
        return loss

    def update() -> Tensor:
        opt.step()
        return opt.params[0]

    def whole_step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean().backward()
        if ddp is not None:
            ddp.sync_gradients(loss)  # realizes loss and gradients bucket by bucket, averaging as each is ready
        opt.step()
        return loss.realize()

    jitted = TinyJit(whole_step)
    forward_backward_step = TinyJit(forward_backward) if mode == "jit" else forward_backward
    update_step = TinyJit(update) if mode == "jit" else update
    with Tensor.train():
        for step in range(STEPS):
            x, y = global_batch(step)
            rows = slice(rank * BATCH, (rank + 1) * BATCH) if world > 1 else slice(None)
            if mode == "jit_whole":
                jitted(Tensor(x[rows]), Tensor(y[rows]))
                continue
            forward_backward_step(*replicate([Tensor(x[rows]), Tensor(y[rows])], devices))
            if ddp is not None:
                ddp.sync_gradients()
            update_step()
    if mode == "jit_whole":
        assert jitted.captured is not None, "the whole step was never captured"
        assert STEPS >= 3, "the whole step must replay at least once"
        if ddp is not None:
            names = [ei.prg.display_name for ei in jitted.captured.jit_cache if ei.prg is not None]
            assert sum(name.startswith("allreduce start") for name in names) == len(ddp.buckets) > 1, names
            assert names.count("allreduce wait") == 1, names
    return model


def weights(model: TinyModel) -> list[np.ndarray]:
    return [p.numpy() for p in get_parameters(model)]


# *** the worker side (runs under mpiexec) ***


def run_scenario(scenario: str, out: pathlib.Path) -> None:
    from fusegrad import distributed

    info = distributed.init()
    if scenario in TRAIN_MODES:
        model = train(info.rank, info.world_size, TRAIN_MODES[scenario])
        if info.rank == 0:
            np.savez(out / "weights.npz", *weights(model))
    elif scenario == "collectives":
        t = Tensor([1.0, 2.0]) * (info.rank + 1)  # lazy: allreduce must realize it
        summed = distributed.allreduce(t, "sum").numpy()
        mean = distributed.allreduce(Tensor([float(info.rank)]), "mean").numpy()
        biggest = distributed.allreduce(Tensor([info.rank, -info.rank], dtype="int32"), "max").numpy()
        shared = distributed.broadcast(Tensor([float(info.rank + 7)] * 3), src=1).numpy()
        gathered = distributed.allgather(Tensor([[info.rank, 10 + info.rank]])).numpy()
        with pytest.raises(TypeError, match=r"op 'mean' needs a float tensor, got dtypes\.int"):
            distributed.allreduce(Tensor([1, 2]), "mean")
        with pytest.raises(ValueError, match=r"src 5 is not a rank, expected 0\.\.1"):
            distributed.broadcast(Tensor([1.0]), src=5)
        with pytest.raises(ValueError, match="unknown op 'prod'"):
            distributed.allreduce(Tensor([1.0]), "prod")  # type: ignore[arg-type]  # the wrong value is the test
        devices = ("CPU:0", "CPU:1")  # in-process sharding inside each rank
        split = distributed.allreduce(Tensor([[1.0, 2.0], [3.0, 4.0]]).shard(devices, axis=0) * (info.rank + 1))
        replicated = distributed.broadcast(Tensor([float(info.rank)] * 2).shard(devices), src=1)
        stacked = distributed.allgather(Tensor([1.0, 2.0]).shard(devices, axis=0) * (info.rank + 1))
        assert stacked.device == split.device, stacked.device  # replicated on the devices t was sharded over
        assert isinstance(split.device, tuple), split.device
        assert (split.uop.axis, replicated.uop.axis) == (0, None)
        again = Tensor([1.0, 2.0]).contiguous().realize()
        distributed.allreduce(again)  # [2, 4]; the next calls on this buffer take the remembered host array
        again.assign(again + info.rank)  # pending work on the same buffer: the cached path must run it first
        distributed.allreduce(again)  # [2, 4] + [3, 5]
        repeated = distributed.allreduce(again).numpy()  # doubled
        distributed.barrier()
        arrays = {"summed": summed, "mean": mean, "biggest": biggest, "shared": shared, "gathered": gathered}
        arrays |= {"split": split.numpy(), "replicated": replicated.numpy(), "stacked": stacked.numpy()}
        arrays |= {"repeated": repeated}
        np.savez(out / f"rank{info.rank}.npz", **arrays)
    elif scenario == "view_grad":
        from fusegrad.distributed import DistributedDataParallel

        model = {"w": Tensor.ones(3).contiguous().realize(), "v": Tensor.ones(2).contiguous().realize()}
        for p in model.values():
            p.requires_grad = True
        ddp = DistributedDataParallel(model, bucket_mb=0.00001)  # one bucket per parameter
        # through the cat, both gradients are slices of one tensor, neither a buffer of its own
        coefficients = Tensor([info.rank, 1.0, 2.0, 3.0, 4.0 + info.rank])
        loss = (model["w"].cat(model["v"]).contiguous() * coefficients).sum()
        ddp.sync_gradients(loss.backward())
        grads = {name: p.grad.numpy() for name, p in model.items() if p.grad is not None}
        np.savez(out / f"rank{info.rank}.npz", loss=loss.numpy(), **grads)
    elif scenario == "mismatch":
        from fusegrad.distributed import DistributedDataParallel

        DistributedDataParallel(TinyModel(wide=info.rank == 1))
    elif scenario == "raise":
        if info.rank == 1:
            raise ValueError("scenario: rank 1 fails on purpose")
        distributed.barrier()  # rank 0 would wait here forever without the abort
    elif scenario == "kill":
        if info.rank == 1:
            os.kill(os.getpid(), 9)
        distributed.barrier()
    distributed.shutdown()


# *** the pytest side ***


def mpiexec() -> list[str]:
    """The mpiexec command line for 2 ranks on this machine; skips the test when there is no MPI."""
    pytest.importorskip("mpi4py", reason="needs mpi4py: pip install -e '.[dist]'")
    found = shutil.which("mpiexec", path=f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    if found is None:
        pytest.skip("needs mpiexec: pip install -e '.[dist]'")
    version = subprocess.run([found, "--version"], capture_output=True, text=True, check=False).stdout
    extra = ["--oversubscribe"] if "Open MPI" in version or "OpenRTE" in version else []  # Open MPI: 2 ranks, 1 core
    return [found, "-n", "2", *extra]


def launch(
    scenario: str, out: pathlib.Path, timeout: float = 240, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    # Open MPI refuses to start as root without these two; CI runs as root
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", **extra_env}
    command = [*mpiexec(), sys.executable, __file__, scenario, str(out)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, check=False)


def check_ok(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, f"mpiexec exited {result.returncode}:\n{result.stdout}\n{result.stderr}"


TRAIN_MODES = {"train": "eager", "train_sharded": "sharded", "train_jit": "jit", "train_jit_whole": "jit_whole"}


@pytest.mark.parametrize("scenario", list(TRAIN_MODES))
def test_two_ranks_match_one_process_with_twice_the_batch(scenario: str, tmp_path: pathlib.Path) -> None:
    check_ok(launch(scenario, tmp_path))
    with np.load(tmp_path / "weights.npz", allow_pickle=False) as saved:
        two_ranks = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    one_process = weights(train(rank=0, world=1, mode=TRAIN_MODES[scenario]))
    for got, expected in zip(two_ranks, one_process, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_jitted_averaging_overlaps_the_backward_in_the_profile(tmp_path: pathlib.Path) -> None:
    """Each rank's VIZ profile shows the buckets' starts and the wait on its MPI track at every step, replays
    included, with backward kernels running after the first bucket started and before the wait."""
    from fusegrad.helpers import ProfileRangeEvent
    from fusegrad.viz.profile_file import read_profile_file

    check_ok(launch("train_jit_whole", tmp_path, VIZ="-1", PROFILEPATH=str(tmp_path / "profile.fgprof")))
    for rank in range(2):
        profile = tmp_path / f"profile.rank{rank}.fgprof"
        events = read_profile_file(profile, profile.read_bytes()).events
        ranges = sorted((e for e in events if isinstance(e, ProfileRangeEvent)), key=lambda e: e.st)
        mpi = [e for e in ranges if e.device == f"MPI:{rank}"]
        starts = [e for e in mpi if str(e.name).startswith("allreduce start")]
        waits = [e for e in mpi if str(e.name).startswith("allreduce wait")]
        assert (len(starts), len(waits)) == (2 * STEPS, STEPS), [str(e.name) for e in mpi]
        kernels = [e for e in ranges if e.device.startswith("CPU")]
        for first, wait in zip(starts[::2], waits, strict=True):  # 2 buckets a step
            assert first.en is not None
            between = [k for k in kernels if first.en <= k.st and k.en is not None and k.en <= wait.st]
            assert between, f"rank {rank}: no kernel ran while the first bucket was on the wire"


def test_collectives(tmp_path: pathlib.Path) -> None:
    from fusegrad.viz.profile_file import read_profile_file

    check_ok(launch("collectives", tmp_path, VIZ="-1", PROFILEPATH=str(tmp_path / "profile.fgprof")))
    for rank in range(2):
        profile = tmp_path / f"profile.rank{rank}.fgprof"  # one profile per rank, each with its own MPI track
        spans = [e.name for e in read_profile_file(profile, profile.read_bytes()).events
                 if getattr(e, "device", None) == f"MPI:{rank}"]  # fmt: skip
        assert [str(name).split()[0] for name in spans] == ["allreduce"] * 3 + [
            "broadcast",
            "allgather",
            "allreduce",
            "broadcast",
            "allgather",
            *["allreduce"] * 3,
            "barrier",
        ]
        with np.load(tmp_path / f"rank{rank}.npz", allow_pickle=False) as got:
            np.testing.assert_allclose(got["summed"], [3.0, 6.0])
            np.testing.assert_allclose(got["mean"], [0.5])
            np.testing.assert_array_equal(got["biggest"], [1, 0])
            np.testing.assert_allclose(got["shared"], [8.0, 8.0, 8.0])
            np.testing.assert_array_equal(got["gathered"], [[[0, 10]], [[1, 11]]])
            np.testing.assert_allclose(got["split"], [[3.0, 6.0], [9.0, 12.0]])
            np.testing.assert_allclose(got["replicated"], [1.0, 1.0])
            np.testing.assert_allclose(got["stacked"], [[1.0, 2.0], [2.0, 4.0]])
            np.testing.assert_allclose(got["repeated"], [10.0, 18.0])


def test_gradient_without_its_own_buffer_is_averaged(tmp_path: pathlib.Path) -> None:
    check_ok(launch("view_grad", tmp_path))
    for rank in range(2):
        with np.load(tmp_path / f"rank{rank}.npz", allow_pickle=False) as got:
            np.testing.assert_allclose(got["w"], [0.5, 1.0, 2.0])
            np.testing.assert_allclose(got["v"], [3.0, 4.5])
            np.testing.assert_allclose(got["loss"], 10.0 + 2 * rank)


def test_mismatched_shapes_name_the_rank_and_parameter(tmp_path: pathlib.Path) -> None:
    result = launch("mismatch", tmp_path, timeout=120)
    assert result.returncode != 0
    assert "parameter 'l1.weight' on rank 1 is (5, 4)" in result.stderr, result.stderr


@pytest.mark.parametrize("scenario", ["raise", "kill"])
def test_a_failing_rank_stops_the_others(scenario: str, tmp_path: pathlib.Path) -> None:
    begun = time.monotonic()
    result = launch(scenario, tmp_path, timeout=120)  # a hang would raise TimeoutExpired
    assert result.returncode != 0
    assert time.monotonic() - begun < 120
    if scenario == "raise":
        assert "rank 1 raised ValueError; aborting all 2 ranks" in result.stderr, result.stderr


EXAMPLE_ARGS = {
    "mnist": ["--data", "digits", "--steps", "3", "--batch-size", "8", "--width", "2"],
    "gpt": ["--steps", "3", "--batch-size", "2", "--context", "8", "--dim", "16", "--heads", "2", "--layers", "1",
            "--corpus-bytes", "20000", "--eval-batches", "1", "--sample", "5"],
}  # fmt: skip
EXAMPLE_REPORTS = {"mnist": "data-parallel over 2 ranks, each with batch 8", "gpt": "data-parallel over 2 ranks"}


@pytest.mark.slow
@pytest.mark.parametrize("example", ["mnist", "gpt"])
def test_examples_train_data_parallel_and_resume(example: str, tmp_path: pathlib.Path) -> None:
    """Only rank 0 reports and saves; a second run resumes from its checkpoint."""
    checkpoint = tmp_path / f"{example}.safetensors"
    args = ["-m", f"fusegrad.examples.{example}", "--data-parallel", *EXAMPLE_ARGS[example], "--checkpoint",
            str(checkpoint)]  # fmt: skip
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    for extra in ([], ["--resume"]):
        command = [*mpiexec(), sys.executable, *args, *extra]
        result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, check=False)
        check_ok(result)
        assert result.stdout.count("saved ") == 1, result.stdout  # rank 0 alone reports and saves
        assert EXAMPLE_REPORTS[example] in result.stdout
    from fusegrad.nn.state import safe_load_metadata

    assert safe_load_metadata(str(checkpoint))[2]["__metadata__"]["step"] == "6"


def test_collectives_need_init() -> None:
    from fusegrad import distributed

    if distributed.is_initialized():
        pytest.skip("MPI already initialised in this process")
    with pytest.raises(RuntimeError, match=r"distributed.allreduce: call distributed.init\(\) first"):
        distributed.allreduce(Tensor([1.0]))


if __name__ == "__main__":
    run_scenario(sys.argv[1], pathlib.Path(sys.argv[2]))
