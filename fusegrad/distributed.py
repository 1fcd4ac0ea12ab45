"""Training on several processes or machines over MPI (mpi4py): collectives on Tensors and data parallelism.

Run a script under `mpirun -np N python script.py`; `init()` reads rank and world size from the MPI environment.
Collectives stage tensors through host numpy memory (zero-copy where the device's memory is host memory) and use
mpi4py's buffer API only, so nothing is ever pickled. `DistributedDataParallel` broadcasts the initial parameters and
averages gradients in a few large buckets, overlapping the communication with the rest of the backward. Needs the
`dist` extra: `pip install -e '.[dist]'`.
"""

from __future__ import annotations

import functools
import json
import pathlib
import sys
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType, TracebackType
from typing import Any, Literal

import numpy as np

from fusegrad.device import Buffer
from fusegrad.dtype import _to_np_dtype, dtypes
from fusegrad.engine.realize import ExecItem, Runner, run_schedule
from fusegrad.helpers import PROFILE, PROFILEPATH, cpu_profile
from fusegrad.tensor import Tensor
from fusegrad.uop.ops import Ops, UOp

ReduceOp = Literal["sum", "mean", "max", "min"]


@dataclass(frozen=True, slots=True)
class WorldInfo:
    """Where this process sits: its rank among `world_size` processes and its rank among those on its own host.

    Attributes:
        rank: this process's index in the world, 0..world_size-1.
        world_size: how many processes mpiexec started.
        local_rank: this process's index among the processes on its host (pick a device with it).

    Examples:
        >>> WorldInfo(rank=1, world_size=4, local_rank=1).world_size
        4
    """

    rank: int
    world_size: int
    local_rank: int


class _State:
    """The one MPI world of this process; fields are set by init() and cleared by shutdown()."""

    comm: Any = None  # Any: mpi4py's Intracomm (mpi4py is an optional extra, so no annotations name it)
    info: WorldInfo | None = None
    previous_hook: object = None
    finalized = False


_state = _State()


def _mpi() -> ModuleType:
    """The mpi4py.MPI module, with a hint naming the extra when it is missing."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError(f"fusegrad.distributed needs mpi4py and an MPI: pip install -e '.[dist]' ({e})") from e
    return MPI


def init() -> WorldInfo:
    """Join the MPI world this process was started in (a world of 1 outside mpirun); calling it again is a no-op.

    With more than one rank, an unhandled exception in any rank aborts every rank (MPI_Abort) instead of leaving the
    others waiting in a collective, and each rank's profile goes to its own file (PROFILEPATH with `.rank<N>` before
    the suffix; call init() before making tensors, which arms the profile file).

    Returns:
        This process's WorldInfo (rank, world size, local rank).

    Raises:
        RuntimeError: after shutdown() (MPI cannot start twice).
        ImportError: mpi4py is not installed (`pip install -e '.[dist]'`).

    Examples:
        >>> info = init()  # outside mpiexec: a world of one
        >>> info.rank, info.world_size
        (0, 1)
    """
    if _state.info is not None:
        return _state.info
    if _state.finalized:
        raise RuntimeError("distributed.init: MPI was shut down in this process and cannot be initialised again")
    mpi = _mpi()
    comm = mpi.COMM_WORLD
    local = comm.Split_type(mpi.COMM_TYPE_SHARED)  # the ranks sharing this host's memory
    info = WorldInfo(comm.Get_rank(), comm.Get_size(), local.Get_rank())
    local.Free()
    _state.comm, _state.info = comm, info
    if info.world_size > 1:
        profile = pathlib.Path(PROFILEPATH.value)  # ranks would otherwise write one file over each other
        PROFILEPATH.value = str(profile.with_name(f"{profile.stem}.rank{info.rank}{profile.suffix}"))
        _state.previous_hook = sys.excepthook
        sys.excepthook = _abort_on_exception
    return info


ABORT_GRACE_S = 0.5  # seconds between printing a rank's error and aborting every rank


def _abort_on_exception(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    """sys.excepthook under init(): print the traceback, then take every rank down rather than let them hang."""
    sys.__excepthook__(kind, value, tb)
    info, comm = _state.info, _state.comm
    if info is None or comm is None:
        return
    sys.stderr.write(f"fusegrad.distributed: rank {info.rank} raised {kind.__name__}; aborting all "
                     f"{info.world_size} ranks\n")  # fmt: skip
    sys.stderr.flush()
    # the launcher forwards each rank's output asynchronously and Abort tears the job down: without a pause the
    # message could be lost (seen as a cut traceback from the other rank, killed while printing the same error)
    time.sleep(ABORT_GRACE_S)
    comm.Abort(1)


def is_initialized() -> bool:
    """Whether this process has joined the MPI world.

    Returns:
        True between init() and shutdown().

    Examples:
        >>> _ = init()
        >>> is_initialized()
        True
    """
    return _state.info is not None


def _world(op: str) -> tuple[Any, WorldInfo]:  # Any: mpi4py's Intracomm
    if _state.comm is None or _state.info is None:
        raise RuntimeError(f"distributed.{op}: call distributed.init() first")
    return _state.comm, _state.info


def get_rank() -> int:
    """This process's rank.

    Returns:
        0..world_size-1.

    Raises:
        RuntimeError: before init().

    Examples:
        >>> _ = init()
        >>> get_rank()  # outside mpiexec: a world of one
        0
    """
    return _world("get_rank")[1].rank


def get_world_size() -> int:
    """The number of processes in the world.

    Returns:
        The world size (1 outside mpiexec).

    Raises:
        RuntimeError: before init().

    Examples:
        >>> _ = init()
        >>> get_world_size()
        1
    """
    return _world("get_world_size")[1].world_size


def get_local_rank() -> int:
    """This process's rank among those on its host (pick a device with it).

    Returns:
        0..(ranks on this host)-1.

    Raises:
        RuntimeError: before init().

    Examples:
        >>> _ = init()
        >>> get_local_rank()
        0
    """
    return _world("get_local_rank")[1].local_rank


def shutdown() -> None:
    """Wait for every rank, restore sys.excepthook and finalize MPI; init() cannot be called again afterwards.

    Examples:
        >>> shutdown  # the last call of a program: `distributed.shutdown()`; a no-op before init()
        <function shutdown at ...>
    """
    if _state.comm is None:
        return
    _state.comm.Barrier()
    if sys.excepthook is _abort_on_exception:
        sys.excepthook = _state.previous_hook  # type: ignore[assignment]  # saved from sys.excepthook in init()
    mpi = _mpi()
    if not mpi.Is_finalized():
        mpi.Finalize()
    _state.comm, _state.info, _state.finalized = None, None, True


@contextmanager
def _span(name: str, nbytes: int) -> Iterator[None]:
    """Record a collective as a range on this rank's own VIZ track ("MPI:<rank>")."""
    if not PROFILE:  # the profiler's timer costs ~10 us a call, a few % of a 1 MB allreduce: none when not profiling
        yield
        return
    rank = _state.info.rank if _state.info is not None else 0
    with cpu_profile(f"{name} {nbytes / 1e6:.2f} MB", device=f"MPI:{rank}"):
        yield


# *** host staging ***


def _numpy_dtype(t: Tensor, op: str) -> np.dtype[np.generic]:
    if (np_dt := _to_np_dtype(t.dtype)) is None:
        raise TypeError(f"distributed.{op}: dtype {t.dtype} has no numpy equivalent; cast to a float or int first")
    return np.dtype(np_dt)


def _realized_buffer(t: Tensor) -> Buffer | None:
    """The Buffer that holds exactly t's elements in order, or None for a view of another layout or a sharded tensor."""
    if isinstance(t.device, tuple):
        return None
    uop = t.uop.src[0] if t.uop.op is Ops.RESHAPE else t.uop
    if uop.op is not Ops.BUFFER:  # not realized yet (a realized tensor skips the scheduler: collectives are hot)
        t.realize()
        uop = t.uop.src[0] if t.uop.op is Ops.RESHAPE else t.uop
    if uop.op is not Ops.BUFFER:
        return None
    return uop.buffer.ensure_allocated()


def host_view(t: Tensor, op: str = "host_view") -> tuple[np.ndarray, bool]:
    """t's values as a flat numpy array and whether it is the device memory itself (writes then land in t).

    On devices whose memory is host memory (CPU) the array is zero-copy; elsewhere (and for a tensor sharded over
    several devices of this process: gathered) it is a copy, written back with `write_back`.

    Args:
        t: the tensor (realized if it is not yet).
        op: the caller's name, for the error message.

    Returns:
        (values, in_place): a flat array of t.numel() elements of t's dtype, and whether writing it writes t.

    Raises:
        TypeError: t's dtype has no numpy equivalent.

    Examples:
        >>> values, in_place = host_view(Tensor([1.0, 2.0]).realize())
        >>> values.tolist(), in_place
        ([1.0, 2.0], True)
    """
    dtype = _numpy_dtype(t, op)
    buffer = _realized_buffer(t)
    if buffer is None:
        return np.ascontiguousarray(t.numpy()).reshape(-1), False
    if (host := _host_array(buffer, dtype)) is not None:
        return host, True
    out = np.empty(buffer.size, dtype=dtype)
    buffer.copyout(out.data.cast("B"))
    return out, False


# a realized tensor's zero-copy host array, kept per buffer UOp: a collective called again on the same tensor (a
# training loop's allreduce) goes straight to MPI. Work done between ranks' entries into a collective shows up
# several-fold in its time (the ranks wait for each other), and the full path costs ~10 us, 5% of a 1 MB allreduce.
_host_views: weakref.WeakKeyDictionary[UOp, tuple[Buffer, object, np.ndarray]] = weakref.WeakKeyDictionary()


def _staged(t: Tensor, op: str) -> tuple[np.ndarray, bool]:
    """`host_view(t)`, remembering the zero-copy array of a plain realized buffer (valid while the buffer keeps the
    same allocation; the device's pending work is still waited for on every call)."""
    if (entry := _host_views.get(t.uop)) is not None:
        held, storage, kept = entry
        if held._storage is storage and held.is_allocated():
            held.allocator.dev.synchronize()
            return kept, True
    dtype = _numpy_dtype(t, op)  # before realizing, as host_view checks it
    if (buffer := _realized_buffer(t)) is not None and (values := _host_array(buffer, dtype)) is not None:
        _host_views[t.uop] = (buffer, buffer._storage, values)
        return values, True
    return host_view(t, op)  # a staging copy (another device's memory, a view, a sharded tensor)


def _host_array(buffer: Buffer, dtype: np.dtype[np.generic]) -> np.ndarray | None:
    """The buffer's own memory as a flat numpy array when the device's memory is host memory (after the device's
    pending work), else None: MPI then reads and writes the tensor itself, with no staging copy."""
    host = buffer.allocator._as_buffer(buffer._buf)
    if host is None or host.readonly:
        return None
    buffer.allocator.dev.synchronize()
    return np.frombuffer(host, dtype=dtype, count=buffer.size)


def write_back(t: Tensor, values: np.ndarray) -> None:
    """Store flat `values` into t, in place when t is a plain buffer (the other half of `host_view`).

    Args:
        t: the tensor to overwrite (its shape, dtype and devices are kept).
        values: t.numel() elements of t's dtype.

    Examples:
        >>> t = Tensor([0, 0, 0]).realize()
        >>> write_back(t, np.array([7, 8, 9], dtype=np.int32))
        >>> t.tolist()
        [7, 8, 9]
    """
    buffer = _realized_buffer(t)
    if buffer is not None:
        buffer.copyin(np.ascontiguousarray(values).data.cast("B"))
    elif isinstance(t.device, tuple):  # sharded in this process: the same split (or replication) as before
        t.assign(Tensor(values.reshape(t.shape), dtype=t.dtype).shard(t.device, axis=t.uop.axis)).realize()
    else:
        t.assign(Tensor(values.reshape(t.shape), device=t.device, dtype=t.dtype)).realize()


# *** collectives ***


@functools.cache
def _mpi_ops() -> dict[str, Any]:  # Any: mpi4py's Op; built once (collectives are hot)
    mpi = _mpi()
    return {"sum": mpi.SUM, "mean": mpi.SUM, "max": mpi.MAX, "min": mpi.MIN}


def _mpi_op(op: ReduceOp) -> Any:  # Any: mpi4py's Op
    if (found := _mpi_ops().get(op)) is None:
        raise ValueError(f"distributed.allreduce: unknown op {op!r}, expected one of {sorted(_mpi_ops())}")
    return found


def allreduce(t: Tensor, op: ReduceOp = "sum") -> Tensor:
    """Reduce t elementwise over all ranks (sum, mean, max or min) and store the result in t on every rank; returns t.

    Args:
        t: this rank's tensor; every rank passes one of the same shape and dtype.
        op: "sum", "mean" (float dtypes only), "max" or "min".

    Returns:
        t itself, now holding the reduction.

    Raises:
        RuntimeError: before init().
        ValueError: an unknown op.
        TypeError: "mean" of a tensor that is not float.

    Examples:
        >>> _ = init()
        >>> allreduce(Tensor([1.0, 2.0]), "sum").tolist()  # a world of one; under mpiexec -n 2: [2.0, 4.0]
        [1.0, 2.0]
    """
    comm, info = _world("allreduce")
    mpi_op = _mpi_op(op)
    if op == "mean" and not dtypes.is_float(t.dtype):
        raise TypeError(f"distributed.allreduce: op 'mean' needs a float tensor, got {t.dtype}")
    values, in_place = _staged(t, "allreduce")
    if PROFILE:
        with _span(f"allreduce {op}", values.nbytes):
            comm.Allreduce(_mpi().IN_PLACE, values, op=mpi_op)
    else:  # no generator context on the hot path: see _host_views
        comm.Allreduce(_mpi().IN_PLACE, values, op=mpi_op)
    if op == "mean":
        values /= info.world_size
    if not in_place:
        write_back(t, values)
    return t


def broadcast(t: Tensor, src: int = 0) -> Tensor:
    """Overwrite t on every rank with rank `src`'s t.

    Args:
        t: this rank's tensor; the same shape and dtype on every rank.
        src: the rank whose values everyone receives.

    Returns:
        t itself, now holding rank src's values.

    Raises:
        RuntimeError: before init().
        ValueError: src is not a rank.

    Examples:
        >>> _ = init()
        >>> broadcast(Tensor([3, 4]), src=0).tolist()
        [3, 4]
    """
    comm, info = _world("broadcast")
    if not 0 <= src < info.world_size:
        raise ValueError(f"distributed.broadcast: src {src} is not a rank, expected 0..{info.world_size - 1}")
    values, in_place = host_view(t, "broadcast")
    with _span("broadcast", values.nbytes):
        comm.Bcast(values, root=src)
    if not in_place and info.rank != src:
        write_back(t, values)
    return t


def allgather(t: Tensor) -> Tensor:
    """Every rank's t stacked along a new leading axis, on t's device.

    Args:
        t: this rank's tensor; the same shape and dtype on every rank.

    Returns:
        A (world_size, *t.shape) tensor: row r is rank r's t.

    Raises:
        RuntimeError: before init().
        ValueError: the ranks' shapes or dtypes differ (raised on every rank, naming the rank that differs).

    Examples:
        >>> _ = init()
        >>> allgather(Tensor([get_rank()])).tolist()  # under mpiexec -n 2: [[0], [1]]
        [[0]]
    """
    comm, info = _world("allgather")
    values, _ = host_view(t, "allgather")
    signatures = _gather_json(comm, [list(t.shape), str(t.dtype)])
    for rank, signature in enumerate(signatures):
        if signature != signatures[0]:
            raise ValueError(f"distributed.allgather: rank {rank} has shape {tuple(signature[0])} {signature[1]}, "
                             f"rank 0 has {tuple(signatures[0][0])} {signatures[0][1]}")  # fmt: skip
    device = t.device if isinstance(t.device, str) else t.device[0]
    result = Tensor.empty(info.world_size, *t.shape, device=device, dtype=t.dtype).realize()
    out, in_place = host_view(result, "allgather")  # host memory: MPI writes the result tensor itself
    with _span("allgather", out.nbytes):
        comm.Allgather(values, out)
    if not in_place:
        write_back(result, out)
    return result if isinstance(t.device, str) else result.to(t.device)  # sharded t: replicated on its devices


def barrier() -> None:
    """Wait until every rank reaches this call.

    Raises:
        RuntimeError: before init().

    Examples:
        >>> _ = init()
        >>> barrier()
    """
    comm, _ = _world("barrier")
    with _span("barrier", 0):
        comm.Barrier()


def _gather_json(comm: Any, value: Any) -> list[Any]:  # Any: mpi4py's Intracomm; JSON values
    """Every rank's JSON-able `value`, in rank order (JSON text over Allgatherv: safe to read, unlike pickle)."""
    data = np.frombuffer(json.dumps(value).encode(), dtype=np.uint8)
    sizes = np.empty(comm.Get_size(), dtype=np.int64)
    comm.Allgather(np.array([data.size], dtype=np.int64), sizes)
    out = np.empty(int(sizes.sum()), dtype=np.uint8)
    comm.Allgatherv(data, [out, sizes.tolist()])
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return [json.loads(out[offsets[i] : offsets[i + 1]].tobytes()) for i in range(len(sizes))]


# *** data parallelism ***


@dataclass(frozen=True, slots=True)
class _Bucket:
    """Parameters whose gradients travel together in one Allreduce; one dtype per bucket."""

    params: tuple[Tensor, ...]
    buffer: np.ndarray  # reused every step: the flattened gradients


class DistributedDataParallel:
    """Data-parallel training over the MPI world: every rank holds the whole model and a different slice of the data.

    At construction it checks that every rank has the same parameters (names, shapes, dtypes; ValueError naming the
    rank and the parameter otherwise) and copies rank 0's values to all. After each backward, `sync_gradients()`
    averages the gradients over the ranks in buckets of about `bucket_mb` MB: one non-blocking Iallreduce each, started
    as soon as the backward's kernels have produced the bucket's gradients while the rest of the backward runs, all
    waited for before it returns. Any optimiser works: call it after backward and before `opt.step()`, passing the loss
    so it is computed in the same schedule. The whole step may be one TinyJit (the communication replays between the
    captured kernels); it may also sit between two jits. `comm_seconds` adds up the time spent communicating.

    Args:
        model: a model object (its tensors found like `nn.state.get_state_dict`) or a state dict.
        bucket_mb: about how many MB of gradients each Allreduce carries.

    Raises:
        ValueError: bucket_mb is not positive, the model has no trainable parameters, or the ranks' parameters differ.
        RuntimeError: from init() after shutdown().

    Examples:
        >>> model = nn.Linear(2, 1)
        >>> ddp = DistributedDataParallel(model)  # in a loop: loss.backward(); ddp.sync_gradients(loss); opt.step()
        >>> ddp.names
        ['weight', 'bias']
    """

    def __init__(self, model: object, bucket_mb: float = 25.0) -> None:
        from fusegrad.nn.state import get_state_dict

        if bucket_mb <= 0:
            raise ValueError(f"DistributedDataParallel: bucket_mb must be positive, got {bucket_mb}")
        self.info = init()
        self.comm, _ = _world("DistributedDataParallel")
        named = model if isinstance(model, dict) else get_state_dict(model)
        state: dict[int, tuple[str, Tensor]] = {}
        for name, t in named.items():  # state dicts can list one tensor under two names; keep the first
            state.setdefault(id(t), (name, t))
        self.state = list(state.values())  # parameters and buffers (batchnorm statistics): checked and broadcast
        trainable = [(name, t) for name, t in self.state if t.requires_grad is not False]
        if not trainable:
            raise ValueError("DistributedDataParallel: the model has no trainable parameters")
        self.names = [name for name, _ in trainable]
        self.params = [t for _, t in trainable]  # the tensors whose gradients are averaged
        self._check_same_parameters()
        for _, t in self.state:
            broadcast(t, src=0)
        self.buckets = self._plan_buckets(int(bucket_mb * 1e6))
        self._requests: list[tuple[_Bucket, Any]] = []  # Any: mpi4py's Request; buckets started, not yet waited for
        self.comm_seconds = 0.0  # time spent staging, starting and waiting for the averaging (bench/dist.py reads it)

    def _check_same_parameters(self) -> None:
        """Raise ValueError on every rank when any rank's parameters differ from rank 0's (name, shape, dtype)."""
        mine = [[name, list(t.shape), str(t.dtype)] for name, t in self.state]
        everyone = _gather_json(self.comm, mine)
        reference = everyone[0]
        assert isinstance(reference, list), "DistributedDataParallel: rank 0 sent no parameter list"
        for rank, theirs in enumerate(everyone):
            assert isinstance(theirs, list), f"DistributedDataParallel: rank {rank} sent no parameter list"
            for ours, other in zip(reference, theirs, strict=False):
                if ours != other:
                    raise ValueError(f"DistributedDataParallel: parameter {other[0]!r} on rank {rank} is "
                                     f"{tuple(other[1])} {other[2]}, but rank 0's {ours[0]!r} is {tuple(ours[1])} "
                                     f"{ours[2]}")  # fmt: skip
            if len(theirs) != len(reference):
                longer, extra = (rank, theirs) if len(theirs) > len(reference) else (0, reference)
                name = extra[min(len(theirs), len(reference))][0]
                raise ValueError(f"DistributedDataParallel: rank {rank} has {len(theirs)} parameters, rank 0 has "
                                 f"{len(reference)}; the first extra one is {name!r} on rank {longer}")  # fmt: skip

    def _plan_buckets(self, bucket_bytes: int) -> list[_Bucket]:
        """Group parameters, last first (backward's order), into buckets of one dtype and about bucket_bytes each."""
        buckets: list[_Bucket] = []
        current: list[Tensor] = []
        for t in [*reversed(self.params), None]:
            if current and (t is None or t.dtype != current[0].dtype or _nbytes(current) >= bucket_bytes):
                dtype = _numpy_dtype(current[0], "DistributedDataParallel")
                buckets.append(_Bucket(tuple(current), np.empty(sum(p.numel() for p in current), dtype=dtype)))
                current = []
            if t is not None:
                current.append(t)
        return buckets

    def sync_gradients(self, *realize_with: Tensor) -> None:
        """Replace every parameter's gradient by its mean over the ranks, in place (call after backward).

        The gradients and `realize_with` are computed in one schedule, run in pieces: as soon as the kernels that write
        a bucket's gradients have run, the bucket is copied into its staging array and its non-blocking Iallreduce
        started, while the rest of the backward runs; all are waited for at the end, before the optimiser step reads
        the gradients. Under TinyJit each start and the final wait are captured as items of their own between the
        kernels, so a whole train step, averaging included, replays as one jit.

        Args:
            *realize_with: tensors to compute in the same schedule (the loss: otherwise the forward runs twice).

        Raises:
            RuntimeError: a parameter has no gradient (every rank must send every bucket), or gradients sharded over
                several devices of the rank are averaged inside TinyJit.

        Examples:
            >>> model = nn.Linear(2, 1)
            >>> model.weight.requires_grad = model.bias.requires_grad = True
            >>> ddp = DistributedDataParallel(model)
            >>> loss = model(Tensor([[1.0, 2.0]])).sum().backward()
            >>> ddp.sync_gradients(loss)  # then opt.step(); in a world of one the gradients stay as they are
            >>> model.weight.grad.tolist()
            [[1.0, 2.0]]
        """
        missing = [name for name, t in zip(self.names, self.params, strict=True) if t.grad is None]
        if missing:
            raise RuntimeError(f"DistributedDataParallel.sync_gradients: no gradient for {missing[:3]} on rank "
                               f"{self.info.rank}; call backward() on a loss using every parameter first")  # fmt: skip
        if self.info.world_size == 1:
            Tensor.realize(*realize_with, *[t.grad for t in self.params if t.grad is not None])
            return
        grads = [t.grad for t in self.params if t.grad is not None]
        if any(isinstance(g.device, tuple) for g in grads):  # sharded inside this rank: staged through the host
            self._sync_staged(realize_with)
            return
        items = grads[0].schedule(*grads[1:], *realize_with)  # one schedule: the forward and backward once
        scheduled = {id(t): _scheduled_buffer(t) for t in grads}
        last_use: dict[int, int] = {}  # base buffer id -> the last item touching it: after it, the value is final
        for j, item in enumerate(items):
            last_use.update({id(b.base): j for b in item.bufs if b is not None})
        ready = []  # (the item after which the bucket's gradients are final, bucket index)
        for k, bucket in enumerate(self.buckets):
            planned = [scheduled[id(t.grad)] for t in bucket.params]
            if any(b is None for b in planned):  # a gradient without a buffer of its own: copied out after the schedule
                ready.append((len(items), k))
                continue
            ready.append((max((last_use.get(id(b.base), -1) for b in planned if b is not None), default=-1), k))
        started: list[Buffer] = []
        done = 0
        for at, k in sorted(ready):  # every rank's schedule is the same: the buckets start in one order everywhere
            if at >= done:
                run_schedule(items[done : at + 1])
                done = at + 1
            grads_k = [t.grad for t in self.buckets[k].params if t.grad is not None]
            bufs = [scheduled[id(g)] or _grad_buffer(g) for g in grads_k]  # scheduled: settled only at the end
            _run_item(_BucketStart(self, self.buckets[k], bufs[0].device), bufs)
            started += bufs
        if done < len(items):
            run_schedule(items[done:])
        _run_item(_BucketsWait(self, started[0].device), started)

    def _sync_staged(self, realize_with: tuple[Tensor, ...]) -> None:
        """sync_gradients for gradients sharded over several devices of this process: gathered to the host and back."""
        from fusegrad.engine.realize import capturing

        if capturing:
            raise RuntimeError("DistributedDataParallel.sync_gradients: gradients sharded inside a rank cannot be "
                               "averaged inside TinyJit; jit the forward+backward and the step apart")  # fmt: skip
        Tensor.realize(*realize_with, *[t.grad for t in self.params if t.grad is not None])
        mpi = _mpi()
        for bucket in self.buckets:
            _flatten_into(bucket)
            with _span("allreduce", bucket.buffer.nbytes):
                self.comm.Allreduce(mpi.IN_PLACE, bucket.buffer, op=mpi.SUM)
            np.divide(bucket.buffer, self.info.world_size, out=bucket.buffer, casting="unsafe")
            _unflatten_from(bucket)


def _scheduled_buffer(t: Tensor) -> Buffer | None:
    """The buffer holding all of t's elements and nothing else, in any order (the averaging is elementwise and every
    rank has the same layout), once its schedule has run; None when t is not such a view of one buffer."""
    uop = t.uop
    while uop.op in (Ops.RESHAPE, Ops.PERMUTE):  # a weight's gradient is often computed transposed
        uop = uop.src[0]
    if uop.op is Ops.ASSIGN:
        uop = uop.src[0]
    if uop.op is not Ops.BUFFER or uop.buffer.size != t.numel() or uop.buffer.dtype != t.dtype:
        return None
    return uop.buffer


def _grad_buffer(t: Tensor) -> Buffer:
    """The buffer of a gradient the schedule left lazy (a constant): realized into memory of its own."""
    if (buffer := _scheduled_buffer(t)) is None:
        t.replace(t.contiguous()).realize()
        buffer = _scheduled_buffer(t)
    assert buffer is not None, "DistributedDataParallel: a realized gradient has no buffer of its own"
    return buffer.ensure_allocated()


def _run_item(runner: Runner, bufs: list[Buffer]) -> None:
    """Run a communication step as an ExecItem; while TinyJit captures, it becomes one of the captured items."""
    from fusegrad.engine.realize import capturing
    from fusegrad.helpers import CAPTURING

    item = ExecItem(UOp(Ops.NOOP), list(bufs), prg=runner)
    if capturing and CAPTURING:
        capturing[0].add(item)
    item.run()


def _copy_out(buf: Buffer, into: np.ndarray) -> None:
    """buf's elements into the flat array `into` (one memcpy from host memory, else the device's copyout)."""
    if (host := _host_array(buf, into.dtype)) is not None:
        into[:] = host
    else:
        buf.copyout(into.data.cast("B"))


def _copy_in(buf: Buffer, values: np.ndarray) -> None:
    if (host := _host_array(buf, values.dtype)) is not None:
        host[:] = values
    else:
        buf.copyin(np.ascontiguousarray(values).data.cast("B"))


class _CommRunner(Runner):
    """A communication step of DistributedDataParallel as a jit-replayable runner: it reads and writes every slot."""

    def __init__(self, name: str, ddp: DistributedDataParallel, device: str, slots: int) -> None:
        from fusegrad.renderer import Estimates

        super().__init__(name, device, Estimates())
        self.ddp, self.slots = ddp, slots

    @property
    def inputs(self) -> list[int]:
        return list(range(self.slots))

    @property
    def outputs(self) -> list[int]:
        return list(range(self.slots))


class _BucketStart(_CommRunner):
    """Flatten one bucket's gradients into its staging array and start its Iallreduce (sum) without waiting."""

    def __init__(self, ddp: DistributedDataParallel, bucket: _Bucket, device: str) -> None:
        super().__init__(f"allreduce start {bucket.buffer.nbytes / 1e6:.2f} MB", ddp, device, len(bucket.params))
        self.bucket = bucket

    def __call__(self, rawbufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        st = time.perf_counter()
        mpi, buffer = _mpi(), self.bucket.buffer
        with _span("allreduce start", buffer.nbytes):
            offset = 0
            for b in rawbufs:
                _copy_out(b, buffer[offset : offset + b.size])
                offset += b.size
            requests = self.ddp._requests
            requests.append((self.bucket, self.ddp.comm.Iallreduce(mpi.IN_PLACE, buffer, op=mpi.SUM)))
            mpi.Request.Testall([r for _, r in requests])  # drives the earlier buckets on (MPI progresses in calls)
        self.ddp.comm_seconds += time.perf_counter() - st
        return None


class _BucketsWait(_CommRunner):
    """Wait for every started bucket, divide by the world size and write the means back into the gradients."""

    def __init__(self, ddp: DistributedDataParallel, device: str) -> None:
        super().__init__("allreduce wait", ddp, device, sum(len(b.params) for b in ddp.buckets))

    def __call__(self, rawbufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        st = time.perf_counter()
        requests = self.ddp._requests
        if len(requests) != len(self.ddp.buckets):
            raise RuntimeError(f"DistributedDataParallel: {len(requests)} buckets started, expected "
                               f"{len(self.ddp.buckets)}: the starts and the wait ran out of order")  # fmt: skip
        with _span("allreduce wait", sum(b.buffer.nbytes for b in self.ddp.buckets)):
            bufs = iter(rawbufs)
            for bucket, request in requests:
                request.Wait()
                np.divide(bucket.buffer, self.ddp.info.world_size, out=bucket.buffer, casting="unsafe")
                offset = 0
                for _ in bucket.params:
                    b = next(bufs)
                    _copy_in(b, bucket.buffer[offset : offset + b.size])
                    offset += b.size
            requests.clear()
        self.ddp.comm_seconds += time.perf_counter() - st
        return None


def _nbytes(params: Sequence[Tensor]) -> int:
    return sum(t.numel() * t.dtype.itemsize for t in params)


def _flatten_into(bucket: _Bucket) -> None:
    offset = 0
    for t in bucket.params:
        assert t.grad is not None, "DistributedDataParallel: gradient vanished after the check"
        values, _ = host_view(t.grad, "sync_gradients")
        bucket.buffer[offset : offset + values.size] = values
        offset += values.size


def _unflatten_from(bucket: _Bucket) -> None:
    offset = 0
    for t in bucket.params:
        assert t.grad is not None, "DistributedDataParallel: gradient vanished after the check"
        n = t.numel()
        write_back(t.grad, bucket.buffer[offset : offset + n])
        offset += n
