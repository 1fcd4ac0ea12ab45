"""Optimisers: turn each parameter's `.grad` into an in-place update (`Tensor.assign`) that runs as a few fused kernels.

Entry points: `SGD`, `Adam`, `AdamW`, `LAMB`, `LARS`, `Muon` and `OptimizerGroup`; `opt.step()` realizes one update.
Formulas and defaults follow the reference system (tinygrad's `nn.optim`): SGD and Muon are LARS rules, Adam and AdamW
are LAMB rules. `fused=True` updates all parameters as one concatenated vector (fewer kernels per step).
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fusegrad.dtype import dtypes, least_upper_dtype
from fusegrad.engine.cache import (
    CachedSchedule,
    GraphRecipe,
    Params,
    Structure,
    Template,
    flag_state_id,
    graph_structure,
    run_cached,
    run_hit,
    schedule_cache,
    schedule_cache_on,
    view_structure,
)
from fusegrad.engine.realize import capturing
from fusegrad.helpers import (
    _METADATA,
    dedup,
    flatten,
)
from fusegrad.tensor import Tensor
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp

Device = str | tuple[str, ...]


def _check_number(op: str, name: str, value: object) -> float:
    """A Python int or float that is not NaN; anything else is a TypeError or a ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{op}: {name} must be a Python number: got {type(value).__name__}, expected int or float")
    if math.isnan(value):
        raise ValueError(f"{op}: invalid {name}: got {value}, expected a number")
    return float(value)


def _check_nonnegative(op: str, name: str, value: object) -> float:
    if (number := _check_number(op, name, value)) < 0:
        raise ValueError(f"{op}: invalid {name}: got {value}, expected {name} >= 0")
    return number


def _check_beta(op: str, name: str, value: object) -> float:
    if not 0 <= (number := _check_number(op, name, value)) < 1:
        raise ValueError(f"{op}: invalid {name}: got {value}, expected 0 <= {name} < 1")
    return number


def _check_newton_schulz(op: str, steps: int, coefficients: tuple[float, ...] | None) -> None:
    if isinstance(steps, bool) or not isinstance(steps, int):
        raise TypeError(f"{op}: ns_steps must be an int: got {type(steps).__name__}, expected int")
    if steps < 0:
        raise ValueError(f"{op}: invalid ns_steps: got {steps}, expected ns_steps >= 0")
    if coefficients is not None:
        if not isinstance(coefficients, (tuple, list)) or not coefficients:
            raise ValueError(f"{op}: invalid ns_coefficients: got {coefficients!r}, expected a non-empty tuple")
        for c in coefficients:
            _check_number(op, "ns_coefficients item", c)


def _check_training(op: str) -> None:
    if not Tensor.training:
        raise RuntimeError(
            f"{op}: optimisers only step in training mode: got Tensor.training=False, expected True "
            "(wrap the step in `with Tensor.train():`)"
        )


class Optimizer:
    """Base of every optimiser: holds the parameters, the learning rate as a (1,) Tensor, and the step protocol.

    `params` keeps tensors whose `requires_grad` is not False (None becomes True), without duplicates; the others are
    "buffers": not updated, but realized with each step. Subclasses implement `_step`.

    Args:
        params: the tensors to update (`nn.state.get_parameters(model)`).
        lr: the learning rate (>= 0).
        device: where the optimiser's state lives (default: the first parameter's device).
        fused: update all parameters as one concatenated vector (one kernel per state buffer; one device only).

    Raises:
        ValueError: no parameter with requires_grad remains, lr < 0, or fused parameters on several devices.
        TypeError: a parameter that is not a Tensor or not a float tensor.

    Examples:
        >>> w = Tensor([1.0, -2.0], requires_grad=True)
        >>> opt = SGD([w], lr=0.25)
        >>> with Tensor.train():
        ...     opt.zero_grad()
        ...     _ = (w * w).sum().backward()
        ...     opt.step()
        >>> w.tolist()
        [0.5, -1.0]
    """

    def __init__(self, params: Sequence[Tensor], lr: float, device: Device | None = None, fused: bool = False) -> None:
        op = type(self).__name__
        lr = _check_nonnegative(op, "lr", lr)
        for i, t in enumerate(params):
            if not isinstance(t, Tensor):
                raise TypeError(f"{op}: params[{i}] is not a Tensor: got {type(t).__name__}, expected Tensor")
        for t in params:
            # a tensor handed to an optimiser without a say on requires_grad is a parameter (like the reference)
            if t.requires_grad is None:
                t.requires_grad = True
        self.params: list[Tensor] = dedup(t for t in params if t.requires_grad)
        if not self.params:
            raise ValueError(
                f"{op}: no parameter to optimise: got {len(params)} tensors, expected at least one with requires_grad"
            )
        for i, t in enumerate(self.params):
            if not dtypes.is_float(t.dtype):
                raise TypeError(f"{op}: parameter {i} is not a float tensor: got {t.dtype}, expected a float dtype")
        self.buffers: list[Tensor] = dedup(t for t in params if not t.requires_grad)
        self.device: Device = device if device is not None else self.params[0].device
        self.fused = fused
        if fused:
            self._check_fusable(op)
        # a buffer, not a constant: a new value is a write, so compiled kernels (and TinyJit replays) read it.
        # It lives in the instance dict under "lr" (the property below reads it), so state dicts name it "lr".
        dt = least_upper_dtype(dtypes.default_float, dtypes.float32)
        self.__dict__["lr"] = Tensor([lr], device=self.device, dtype=dt)

    @property
    def lr(self) -> Tensor:
        """The learning rate, a (1,) float32 Tensor; `opt.lr = 0.01` writes the new value into it (same buffer).

        A float must be >= 0 (ValueError); a one-element Tensor is taken as given (ValueError for any other size).

        Examples:
            >>> opt = SGD([Tensor([1.0], requires_grad=True)], lr=0.1)
            >>> opt.lr = 0.05  # a schedule writes into the same buffer: a TinyJit replay sees it
            >>> round(opt.lr.item(), 4)
            0.05
        """
        lr: Tensor = self.__dict__["lr"]
        return lr

    @lr.setter
    def lr(self, value: float | Tensor) -> None:
        current = self.lr
        if isinstance(value, Tensor):
            if value.numel() != 1:
                raise ValueError(f"lr: a learning rate has one element: got shape {value.shape}, expected 1 element")
            new = value.reshape(1).cast(current.dtype).to(current.device)
        else:
            new = Tensor([_check_nonnegative("lr", "lr", value)], device=current.device, dtype=current.dtype)
        current.assign(new).realize()

    def _check_fusable(self, op: str) -> None:
        """`fused` concatenates every parameter into one vector: they must share the optimiser's single device."""
        if isinstance(self.device, tuple) or any(t.device != self.device for t in self.params):
            devices = sorted({str(t.device) for t in self.params})
            raise ValueError(f"{op}: fused needs every parameter on one device: got {devices}, expected {self.device}")

    def _new_state(self) -> list[Tensor]:
        """One float32 zero tensor per parameter (momentum, moments), on the optimiser's device; one in all if fused."""
        if self.fused:
            return [Tensor.zeros(sum(t.numel() for t in self.params), dtype=dtypes.float32, device=self.device)]
        if isinstance(self.device, tuple):
            return [t.zeros_like(dtype=dtypes.float32) for t in self.params]
        return [Tensor.zeros(*t.shape, dtype=dtypes.float32, device=self.device) for t in self.params]

    def zero_grad(self) -> None:
        """Forget every parameter's gradient, so the next backward() starts from nothing.

        Examples:
            >>> w = Tensor([1.0], requires_grad=True)
            >>> _ = (w * 3).sum().backward()
            >>> opt = SGD([w])
            >>> opt.zero_grad()
            >>> w.grad is None
            True
        """
        for t in self.params:
            t.grad = None

    def step(self) -> None:
        """Run one update now: realize everything `schedule_step()` returns, in one schedule.

        Raises:
            RuntimeError: outside `Tensor.train()`, or a parameter has no gradient (from `schedule_step`).
            ValueError: a gradient's shape differs from its parameter's.

        Examples:
            >>> w = Tensor([2.0], requires_grad=True)
            >>> opt = SGD([w], lr=0.5)
            >>> with Tensor.train():
            ...     _ = (w * w).sum().backward()
            ...     opt.step()  # w -= 0.5 * 2w
            >>> w.tolist()
            [0.0]
        """
        if type(self).schedule_step is not Optimizer.schedule_step:  # a group realizes its members' steps as one
            Tensor.realize(*self.schedule_step())
            return
        grads = self._checked_grads()
        inputs, leaves, key, recording = self._recorded(grads)
        if recording is None:
            Tensor.realize(*self._update_from(grads, inputs, leaves, key), *self.params, *self.buffers)
        elif not _step_again(recording, inputs, leaves, self.buffers):  # the kept schedule rerun without a graph
            state = self._rebuild(recording, inputs, leaves)
            _realize_and_remember(recording, inputs, leaves, [*state, *self.params, *self.buffers], self.buffers)

    def schedule_step(self) -> list[Tensor]:
        """Write the update into each parameter (lazily) and return the tensors to realize to perform it.

        For a step that is part of a larger realize (the loss and the update in one schedule, or inside TinyJit).

        Returns:
            The state buffers, parameters and buffers to realize.

        Raises:
            RuntimeError: outside `Tensor.train()`, or a parameter has no gradient.
            ValueError: a gradient's shape differs from its parameter's.

        Examples:
            >>> w = Tensor([2.0], requires_grad=True)
            >>> opt = SGD([w], lr=0.5)
            >>> with Tensor.train():
            ...     loss = (w * w).sum().backward()
            ...     _ = Tensor.realize(loss, *opt.schedule_step())  # loss and update together
            >>> loss.item(), w.tolist()
            (4.0, [0.0])
        """
        return [*self._update(self._checked_grads()), *self.params, *self.buffers]

    def _checked_grads(self) -> list[Tensor]:
        """Every parameter's gradient, realized (training mode, present, of its parameter's shape: checked)."""
        op = f"{type(self).__name__}.step"
        _check_training(op)
        grads = [self._grad_of(op, i, t) for i, t in enumerate(self.params)]
        # finished gradients first: otherwise a gradient that reads another parameter's old value (every layer below
        # the last) makes the scheduler snapshot that parameter before writing it (2-layer MLP, Adam: 21 vs 25 kernels)
        Tensor.realize(*grads)
        return grads

    def _update(self, grads: list[Tensor]) -> list[Tensor]:
        """Write the step into the parameters and the state; returns the state tensors.

        The graph a step builds depends only on the structure of what it reads (each buffer's dtype, size and device,
        the hyperparameters, the flags), and every step reads the same parameter and state buffers and fresh gradient
        buffers. So after one step built op by op, a step whose inputs have that step's structure rebuilds its graph
        from a recording (GraphRecipe) on this step's buffers: the same nodes, labels and writes, for a fraction of
        the Python work (~600 Tensor ops in a GPT's AdamW step)."""
        inputs, leaves, key, recording = self._recorded(grads)
        if recording is not None:
            return self._rebuild(recording, inputs, leaves)
        return self._update_from(grads, inputs, leaves, key)

    def _recorded(
        self, grads: list[Tensor]
    ) -> tuple[list[Tensor], list[UOp], tuple[Any, ...] | None, _StepRecording | None]:
        """The step's inputs (parameters, gradients, state), their nodes, its key, and the recording to rebuild it
        from (None: it is built op by op)."""
        inputs = [*self.params, *grads, *self._state_tensors()]
        leaves = [t.uop for t in inputs]
        key = self._step_key(inputs, leaves)
        recording = _recordings.get(self)
        if key is None or recording is None or recording.key != key or recording.recipe is None:
            return inputs, leaves, key, None
        return inputs, leaves, key, recording

    def _rebuild(self, recording: _StepRecording, inputs: list[Tensor], leaves: list[UOp]) -> list[Tensor]:
        """The recorded step's writes rebuilt on these inputs' nodes; returns the state tensors."""
        assert recording.recipe is not None, "optimiser: a step rebuilt from a recording that has no graph"
        for i, assigned in zip(recording.written, recording.recipe.build(leaves), strict=True):
            inputs[i]._write(assigned)
        return [inputs[i] for i in recording.state]

    def _update_from(
        self, grads: list[Tensor], inputs: list[Tensor], leaves: list[UOp], key: tuple[Any, ...] | None
    ) -> list[Tensor]:
        """The step built op by op (and recorded under `key`, unless None); returns the state tensors."""
        recording = _recordings.get(self)
        updates, state = self._fused_step(grads) if self.fused else self._step(self.params, grads)
        for t, update in zip(self.params, updates, strict=True):
            t.assign(t.detach() - update.to(t.device))
        if key is not None and (recording is None or recording.key != key):  # one that can't be rebuilt stays known
            _recordings[self] = _StepRecording.of(key, inputs, leaves, state)
        return state

    def _state_tensors(self) -> list[Tensor]:
        """The tensors the optimiser holds besides its parameters and buffers (lr, moments, momentum)."""
        found: list[Tensor] = []
        for name, value in vars(self).items():
            if name in ("params", "buffers"):
                continue
            if isinstance(value, Tensor):
                found.append(value)
            elif isinstance(value, list) and all(isinstance(t, Tensor) for t in value):
                found.extend(value)
        return found

    def _step_key(self, inputs: list[Tensor], leaves: list[UOp]) -> tuple[Any, ...] | None:
        """What the step's graph depends on; None where it can't be rebuilt: an input that is not a realized
        single-device buffer or a view of one (a pending write), a tensor given twice, or an attribute that is not a
        plain value (a subclass's own state)."""
        settings: list[tuple[str, str]] = []
        for name, value in vars(self).items():
            if isinstance(value, Tensor) or (isinstance(value, list) and all(isinstance(t, Tensor) for t in value)):
                continue
            if not _is_plain(value):
                return None
            settings.append((name, repr(value)))  # repr: -0.0 is not 0.0, 1 is not 1.0 or True
        if len({id(t) for t in inputs}) != len(inputs):
            return None
        first: dict[UOp, int] = {}
        parts: list[tuple[Any, ...]] = []
        for i, u in enumerate(leaves):
            if (structure := view_structure(u)) is None:
                return None
            # inputs that share a node or a buffer share it again
            parts.append((structure, first.setdefault(u, i), first.setdefault(u.base, i)))
        context = (type(self), dtypes.default_float, flag_state_id(), _METADATA.get())
        return (*context, tuple(settings), tuple(parts))

    def _fused_step(self, grads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        """One update on all parameters concatenated (one kernel per state buffer), then sliced back per parameter."""
        flat_params = Tensor.cat(*[t.detach().flatten() for t in self.params])  # (total,)
        flat_grads = Tensor.cat(*[g.flatten() for g in grads])  # (total,)
        (flat_update,), state = self._step([flat_params], [flat_grads])
        # realized before any parameter is written: it reads them all (weight decay), and a slice of a lazy
        # concatenation reads the wrong elements today (TODO(#7): Tensor.cat(a, b)[0:n] != a in the scheduler)
        flat_update = flat_update.contiguous().realize()
        updates, start = [], 0
        for t in self.params:
            updates.append(flat_update[start : start + t.numel()].reshape(t.shape).cast(t.dtype))
            start += t.numel()
        return updates, state

    def _grad_of(self, op: str, i: int, t: Tensor) -> Tensor:
        if t.grad is None:
            raise RuntimeError(f"{op}: parameter {i} (shape {t.shape}) has no gradient: call backward() before step()")
        if t.grad.shape != t.shape:
            raise ValueError(
                f"{op}: gradient shape differs from parameter {i}'s: got {t.grad.shape}, expected {t.shape}"
            )
        return t.grad if t.grad.device == self.device else t.grad.to(self.device)

    def _step(self, params: list[Tensor], grads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        """The amount to subtract from each parameter, and the state tensors that the step writes."""
        raise NotImplementedError(f"{type(self).__name__}: an optimiser subclass must implement _step")


def _is_plain(value: object) -> bool:
    """A value whose repr says all a step's graph can depend on: None, a number, a string, a tuple of them."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return isinstance(value, tuple) and all(_is_plain(v) for v in value)


@dataclass(frozen=True, slots=True)
class _StepRecording:
    """An optimiser's last step built op by op: its key, the graph of its writes over its inputs' nodes (None when
    it can't be rebuilt: a realize inside the step, a fresh buffer or identity), the inputs it writes (recipe output
    order) and the state tensors it returns, as positions in the inputs (`Optimizer._update`)."""

    key: tuple[Any, ...]
    recipe: GraphRecipe | None
    written: tuple[int, ...]
    state: tuple[int, ...]
    realized: list[_RealizedStep] = field(default_factory=list)  # the rebuilt step's realize, once known (at most one)

    @staticmethod
    def of(key: tuple[Any, ...], inputs: list[Tensor], leaves: list[UOp], state: list[Tensor]) -> _StepRecording:
        at = {id(t): i for i, t in enumerate(inputs)}
        written = tuple(i for i, t in enumerate(inputs) if t.uop is not leaves[i])
        state_at = tuple(at.get(id(t), -1) for t in state)
        # each written input holds one ASSIGN into its own buffer (a tensor viewing a written buffer is repointed
        # instead: Tensor._write does that again)
        plain = all(inputs[i].uop.op is Ops.ASSIGN and inputs[i].uop.src[0] is leaves[i] for i in written)
        recipe = GraphRecipe.of([inputs[i].uop for i in written], leaves) if plain and -1 not in state_at else None
        return _StepRecording(key, recipe, written, state_at)


@dataclass(frozen=True, slots=True)
class _RealizedStep:
    """How a rebuilt step's realize ran, so that the next step of its recording runs the kept schedule straight on its
    inputs' buffers, without building the update graph or walking it for the cache key (`_step_again`). Inputs are
    numbered as the step's inputs followed by the optimiser's buffers.

    A step of one recording builds a graph of one structure (GraphRecipe), so its realize finds one schedule: the
    schedule's parameters are the buffers of inputs (`leaf_inputs`, in walk order), and each tensor the realize
    repoints is an input whose node becomes one of the schedule's templates (`writes`)."""

    structure_key: tuple[Any, ...]
    entry: CachedSchedule
    leaf_inputs: tuple[int, ...]
    writes: tuple[tuple[int, Template], ...]
    buffers_key: tuple[Any, ...]  # the optimiser's buffers' structure and sharing (the step's key has no buffers)

    @staticmethod
    def of(structure: Structure, inputs: list[Tensor], leaves: list[UOp], before: list[tuple[Tensor, UOp]],
           buffers_key: tuple[Any, ...]) -> _RealizedStep | None:  # fmt: skip
        """None unless the realize ran a kept schedule whose parameters are all inputs' buffers and repointed only
        inputs, each by one of the schedule's templates."""
        if structure.key is None or (entry := schedule_cache.get(structure.key)) is None:
            return None
        owner: dict[UOp, int] = {}
        for i, u in enumerate(leaves):
            owner.setdefault(u.base, i)
        if any(leaf not in owner for leaf in structure.leaves):
            return None
        index = {id(t): i for i, t in enumerate(inputs)}
        templates = dict(entry.becomes)
        writes: dict[int, Template] = {}
        for t, u in before:
            if (pos := structure.position.get(u)) is not None and pos in templates and id(t) in index:
                writes[index[id(t)]] = templates[pos]
            elif u.base.op is not Ops.BUFFER:  # repointed by a substitution, or no input: not a plain rerun
                return None
        leaf_inputs = tuple(owner[leaf] for leaf in structure.leaves)
        return _RealizedStep(structure.key, entry, leaf_inputs, tuple(writes.items()), buffers_key)


def _buffers_key(leaves: list[UOp], buffers: list[Tensor]) -> tuple[Any, ...] | None:
    """The buffers' structure, and which of `leaves` (or earlier buffers) first holds each one's node and memory;
    None for one that is not a realized buffer or a view of one."""
    if not buffers:
        return ()
    first: dict[UOp, int] = {}
    for i, u in enumerate(leaves):
        first.setdefault(u, i)
        first.setdefault(u.base, i)
    parts: list[tuple[Any, ...]] = []
    for i, t in enumerate(buffers, start=len(leaves)):
        if (structure := view_structure(u := t.uop)) is None:
            return None
        parts.append((structure, first.setdefault(u, i), first.setdefault(u.base, i)))
    return tuple(parts)


def _runs_cached_schedules() -> bool:
    """Whether a realize would look its graph up in the schedule cache and rerun what it finds as it is."""
    return schedule_cache_on() and not capturing


def _step_again(recording: _StepRecording, inputs: list[Tensor], leaves: list[UOp], buffers: list[Tensor]) -> bool:
    """Rerun the step whose realize `recording` remembers, on these inputs (of its key) and buffers: the kept
    schedule on their buffers, then each written input pointed at what its template gives. False (nothing done)
    when no realize is remembered, the schedule left the cache, or the buffers changed structure."""
    if not recording.realized or not _runs_cached_schedules():
        return False
    start, realized = time.perf_counter(), recording.realized[0]
    if _buffers_key(leaves, buffers) != realized.buffers_key:
        return False
    if schedule_cache.get(realized.structure_key) is not realized.entry:  # cleared or evicted: schedule it again
        return False
    targets, all_leaves = [*inputs, *buffers], [*leaves, *[t.uop for t in buffers]]
    run_hit(realized.entry, start, lambda: _rerun(realized, targets, all_leaves))  # counted and shown as realize's
    return True


def _rerun(realized: _RealizedStep, targets: list[Tensor], leaves: list[UOp]) -> None:
    def settle(params: Params) -> None:  # on the hot path before the kernels run (run_cached's `settle`)
        for i, template in realized.writes:
            targets[i].uop = template.instantiate(params)

    run_cached(realized.entry, [leaves[i].base for i in realized.leaf_inputs], True, settle)


def _realize_and_remember(
    recording: _StepRecording, inputs: list[Tensor], leaves: list[UOp], tensors: list[Tensor], buffers: list[Tensor]
) -> None:
    """Realize a rebuilt step's `tensors`, and remember how that realize ran (_RealizedStep) for the next step."""
    recording.realized.clear()
    if not _runs_cached_schedules() or (buffers_key := _buffers_key(leaves, buffers)) is None:
        Tensor.realize(*tensors)
        return
    before = [(t, t.uop) for t in tensors]
    structure = graph_structure(UOp.sink(*[u for _, u in before]))
    all_leaves = [*leaves, *[t.uop for t in buffers]]
    Tensor.realize(*tensors)
    if (realized := _RealizedStep.of(structure, [*inputs, *buffers], all_leaves, before, buffers_key)) is not None:
        recording.realized.append(realized)


# per optimiser, its last recorded step (weak: a recording never keeps an optimiser alive, and is no attribute of
# it, so state dicts and `vars()` see nothing new)
_recordings: weakref.WeakKeyDictionary[Optimizer, _StepRecording] = weakref.WeakKeyDictionary()


class OptimizerGroup(Optimizer):
    """Several optimisers stepped as one (e.g. different lr per layer group); `group[i]` is the i-th optimiser.

    Args:
        *optimizers: the members, each with its own parameters, lr and state.

    Raises:
        ValueError: no optimiser given.
        TypeError: an argument that is not an Optimizer.

    Examples:
        >>> body, head = Tensor([1.0], requires_grad=True), Tensor([1.0], requires_grad=True)
        >>> group = OptimizerGroup(SGD([body], lr=0.1), Adam([head]))
        >>> len(group.params), type(group[1]).__name__
        (2, 'Adam')
    """

    def __init__(self, *optimizers: Optimizer) -> None:  # no super().__init__: the members hold lr and state
        if not optimizers:
            raise ValueError("OptimizerGroup: no optimiser: got 0, expected at least one")
        for i, o in enumerate(optimizers):
            if not isinstance(o, Optimizer):
                raise TypeError(f"OptimizerGroup: argument {i} is not an Optimizer: got {type(o).__name__}")
        self.optimizers = optimizers
        self.params = flatten(o.params for o in optimizers)
        self.buffers = flatten(o.buffers for o in optimizers)

    def __getitem__(self, i: int) -> Optimizer:
        return self.optimizers[i]

    @property
    def lr(self) -> Tensor:
        """Members keep their own lr: read `group[i].lr`; `group.lr = x` writes x into every member's lr.

        Raises:
            AttributeError: reading it (there is no single lr to read).

        Examples:
            >>> group = OptimizerGroup(SGD([Tensor([1.0], requires_grad=True)], lr=0.1))
            >>> group.lr = 0.5
            >>> group[0].lr.item()
            0.5
        """
        raise AttributeError("OptimizerGroup.lr: each member has its own lr: got the group, expected group[i].lr")

    @lr.setter
    def lr(self, value: float | Tensor) -> None:
        for o in self.optimizers:
            o.lr = value

    def zero_grad(self) -> None:
        """Clear the gradients of every member's parameters.

        Examples:
            >>> w = Tensor([1.0], requires_grad=True)
            >>> _ = w.sum().backward()
            >>> OptimizerGroup(SGD([w])).zero_grad()
            >>> w.grad is None
            True
        """
        for o in self.optimizers:
            o.zero_grad()

    def schedule_step(self) -> list[Tensor]:
        """Every member's update, as tensors to realize (`step()` realizes them); all gradients are realized first.

        Returns:
            Every member's state buffers, parameters and buffers to realize.

        Raises:
            RuntimeError: outside training mode (`Tensor.train()`).

        Examples:
            >>> a, b = Tensor([1.0], requires_grad=True), Tensor([1.0], requires_grad=True)
            >>> group = OptimizerGroup(SGD([a], lr=0.5), SGD([b], lr=0.25))
            >>> with Tensor.train():
            ...     _ = (a + b).sum().backward()
            ...     _ = Tensor.realize(*group.schedule_step())
            >>> a.tolist(), b.tolist()
            ([0.5], [0.75])
        """
        _check_training("OptimizerGroup.step")
        # every member's gradients before any member's writes (see Optimizer.schedule_step)
        Tensor.realize(*[t.grad for t in self.params if t.grad is not None])
        return [t for o in self.optimizers for t in o.schedule_step()]


class LARS(Optimizer):
    """Layer-wise Adaptive Rate Scaling: SGD with momentum whose step per tensor is scaled by a trust ratio.

    ratio = tcoef * |w| / (|g| + weight_decay * |w|) (1 where a norm is 0); with `pre_wd` the decay is added to g.
    `classic` scales by lr before the momentum buffer (lr changes act smoothly), else after it (torch's SGD form).
    tcoef=0 turns the ratio off (that is `SGD`). Paper: https://arxiv.org/abs/1708.03888v3.

    Args:
        params: the tensors to update.
        lr: the learning rate.
        momentum: the momentum factor (0: none).
        weight_decay: L2 weight decay.
        ns_steps: Newton-Schulz iterations applied to the step (0: none; `Muon` sets them).
        ns_coefficients: the Newton-Schulz polynomial's coefficients.
        nesterov: use nesterov momentum.
        classic: apply lr before the momentum buffer.
        pre_wd: add the weight decay to the gradient before the trust ratio and momentum.
        tcoef: the trust coefficient (0: no trust ratio).
        device: where the state lives (default: the first parameter's device).
        fused: update all parameters as one vector.

    Raises:
        ValueError: negative lr, momentum, weight_decay or tcoef, nesterov without momentum, or a Newton-Schulz
            step of a 0-d parameter.

    Examples:
        >>> w = Tensor([[3.0, 4.0]], requires_grad=True)
        >>> opt = LARS([w], lr=0.1)
        >>> with Tensor.train():
        ...     _ = w.square().sum().backward()
        ...     opt.step()
        >>> [round(x, 5) for x in w.numpy().flatten().tolist()]  # a step of lr * ratio * g, ratio ~ tcoef / 2
        [2.9997, 3.9996]
    """

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        ns_steps: int = 0,
        ns_coefficients: tuple[float, ...] | None = None,
        nesterov: bool = False,
        classic: bool = True,
        pre_wd: bool = True,
        tcoef: float = 0.001,
        device: Device | None = None,
        fused: bool = False,
    ) -> None:
        op = type(self).__name__
        self.momentum = _check_nonnegative(op, "momentum", momentum)
        self.wd = _check_nonnegative(op, "weight_decay", weight_decay)
        self.tcoef = _check_nonnegative(op, "tcoef", tcoef)
        if nesterov and self.momentum == 0:
            raise ValueError(f"{op}: nesterov needs momentum: got momentum={momentum}, expected momentum > 0")
        _check_newton_schulz(op, ns_steps, ns_coefficients)
        if fused and (self.tcoef or ns_coefficients):
            raise ValueError(
                f"{op}: fused would share one trust ratio or Newton-Schulz step across all parameters: "
                f"got tcoef={tcoef}, ns_coefficients={ns_coefficients}, expected 0 and None"
            )
        super().__init__(params, lr, device, fused)
        if ns_coefficients:
            for i, t in enumerate(self.params):
                if t.ndim == 0:
                    raise ValueError(f"{op}: Newton-Schulz needs parameters with a dimension: got a 0-d parameter {i}")
        self.ns_steps, self.ns_coefficients = ns_steps, ns_coefficients
        self.nesterov, self.classic, self.pre_wd = nesterov, classic, pre_wd
        self.b = self._new_state() if self.momentum else []

    def _trust_ratio(self, t: Tensor, g: Tensor) -> Tensor | float:
        """tcoef * |w| / (|g| + wd * |w|), or 1 when either norm is 0 (a zero layer or no gradient yet)."""
        if self.tcoef == 0:
            return 1.0
        weight_norm = t.detach().square().sum().sqrt()
        grad_norm = g.square().sum().sqrt()
        ratio = self.tcoef * weight_norm / (grad_norm + self.wd * weight_norm)
        return (weight_norm > 0).where((grad_norm > 0).where(ratio, 1.0), 1.0)

    def _step(self, params: list[Tensor], grads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        updates = []
        for i, (t, g) in enumerate(zip(params, grads, strict=True)):
            ratio = self._trust_ratio(t, g)
            if self.pre_wd and self.wd > 0:
                g = g + self.wd * t.detach()
            if self.classic:
                g = g * ratio * self.lr
            if self.momentum:
                # b starts at zero, so the first step needs no special case: b_1 = g_1
                self.b[i].assign(self.momentum * self.b[i] + g)
                g = g + self.momentum * self.b[i] if self.nesterov else self.b[i]
            if self.ns_coefficients:
                g = _newton_schulz(g.reshape(g.shape[0], -1), self.ns_steps, self.ns_coefficients).reshape(g.shape)
            if not self.classic:
                g = g * ratio * self.lr
            if not self.pre_wd and self.wd > 0:
                g = g + self.wd * self.lr * t.detach()
            updates.append(g.cast(t.dtype))
        return updates, self.b


class SGD(LARS):
    """Stochastic gradient descent with optional momentum, nesterov momentum and (L2) weight decay.

    Update: g += wd * w; b = momentum * b + g; w -= lr * (g + momentum * b if nesterov else b). With `classic` the lr
    is applied before the momentum buffer: b = momentum * b + lr * g (same result while lr is constant).

    Args:
        params: the tensors to update.
        lr: the learning rate.
        momentum: the momentum factor (0: plain SGD).
        weight_decay: L2 weight decay, added to the gradient.
        nesterov: use nesterov momentum (needs momentum > 0).
        classic: apply lr before the momentum buffer.
        device: where the state lives (default: the first parameter's device).
        fused: update all parameters as one vector.

    Raises:
        ValueError: like `LARS` (negative settings, nesterov without momentum).

    Examples:
        >>> w = Tensor([1.0, -2.0], requires_grad=True)
        >>> opt = SGD([w], lr=0.1, momentum=0.9)
        >>> with Tensor.train():
        ...     for _ in range(2):
        ...         opt.zero_grad()
        ...         _ = w.sum().backward()  # gradient 1 everywhere
        ...         opt.step()
        >>> [round(x, 4) for x in w.numpy().flatten().tolist()]  # steps of 0.1, then 0.1 * (1 + 0.9)
        [0.71, -2.29]
    """

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        classic: bool = False,
        device: Device | None = None,
        fused: bool = False,
    ) -> None:
        super().__init__(params, lr, momentum, weight_decay, 0, None, nesterov, classic, True, 0.0, device, fused)


class Muon(LARS):
    """SGD whose (nesterov) momentum step is orthogonalised by Newton-Schulz iterations; decay after the momentum.

    Per tensor (viewed as (rows, -1)): b = momentum * b + g; u = NS(g + momentum * b if nesterov else b);
    w -= lr * u + lr * weight_decay * w. https://kellerjordan.github.io/posts/muon/, arxiv.org/pdf/2502.16982.

    Args:
        params: the tensors to update (each with at least one axis).
        lr: the learning rate.
        momentum: the momentum factor.
        weight_decay: decoupled weight decay, applied after the momentum.
        ns_steps: Newton-Schulz iterations.
        ns_coefficients: the Newton-Schulz polynomial's coefficients.
        nesterov: use nesterov momentum.
        device: where the state lives (default: the first parameter's device).

    Raises:
        ValueError: like `LARS`, and for a 0-d parameter.

    Examples:
        >>> w = Tensor([[1.0, 0.0], [0.0, 1.0]], requires_grad=True)
        >>> opt = Muon([w], lr=0.01, weight_decay=0.0)
        >>> with Tensor.train():
        ...     _ = (w * Tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
        ...     opt.step()
        >>> w.shape, bool((w.numpy() != [[1.0, 0.0], [0.0, 1.0]]).all())
        ((2, 2), True)
    """

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        momentum: float = 0.95,
        weight_decay: float = 0.1,
        ns_steps: int = 5,
        ns_coefficients: tuple[float, ...] = (3.4445, -4.775, 2.0315),
        nesterov: bool = True,
        device: Device | None = None,
    ) -> None:
        # popular (not classic) momentum, weight decay after the momentum, no trust ratio
        super().__init__(
            params, lr, momentum, weight_decay, ns_steps, ns_coefficients, nesterov, False, False, 0.0, device
        )


def _newton_schulz(x: Tensor, steps: int, coefficients: tuple[float, ...], eps: float = 1e-7) -> Tensor:
    """Push a matrix's singular values towards 1: x <- sum_i c_i (x x^T)^i x, after scaling x to Frobenius norm 1."""
    if x.shape[0] > x.shape[1]:
        # iterate on the wide side: x x^T is then the smaller Gram matrix
        return _newton_schulz(x.T, steps, coefficients, eps).T
    x = x / (x.square().sum().sqrt() + eps)
    for _ in range(steps):
        gram = x @ x.T  # (rows, rows)
        term, total = x, coefficients[0] * x
        for c in coefficients[1:]:
            term = gram @ term
            total = total + c * term
        x = total
    return x


class LAMB(Optimizer):
    """LAMB: Adam's bias-corrected step (plus decoupled weight decay), scaled per tensor by |w| / |step|.

    m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; step = m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd * w;
    w -= lr * ratio * step, ratio = |w| / |step| (1 where a norm is 0, and always 1 with `adam`).
    Paper: https://arxiv.org/abs/1904.00962.

    Args:
        params: the tensors to update.
        lr: the learning rate.
        b1: the first moment's decay, in [0, 1).
        b2: the second moment's decay, in [0, 1).
        eps: added to the square root of the second moment.
        weight_decay: decoupled weight decay.
        adam: no trust ratio (ratio 1): this is AdamW.
        device: where the state lives (default: the first parameter's device).
        fused: update all parameters as one vector (only with adam=True).

    Raises:
        ValueError: negative lr, eps or weight_decay, b1 or b2 outside [0, 1), or fused without adam.

    Examples:
        >>> w = Tensor([3.0, 4.0], requires_grad=True)
        >>> opt = LAMB([w], lr=0.1)
        >>> with Tensor.train():
        ...     _ = w.square().sum().backward()
        ...     opt.step()  # the first step has norm lr * |w| = 0.5, along the sign of the gradient
        >>> [round(x, 3) for x in w.numpy().flatten().tolist()]
        [2.646, 3.646]
    """

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        adam: bool = False,
        device: Device | None = None,
        fused: bool = False,
    ) -> None:
        op = type(self).__name__
        self.b1, self.b2 = _check_beta(op, "b1", b1), _check_beta(op, "b2", b2)
        self.eps = _check_nonnegative(op, "eps", eps)
        self.wd = _check_nonnegative(op, "weight_decay", weight_decay)
        if fused and not adam:
            raise ValueError(f"{op}: fused would share one trust ratio across all parameters: got adam=False")
        super().__init__(params, lr, device, fused)
        self.adam = adam
        # b1^t and b2^t, kept on the device so a step is the same kernels every time (TinyJit replays it)
        self.b1_t = Tensor([1.0], dtype=dtypes.float32, device=self.device, requires_grad=False)
        self.b2_t = Tensor([1.0], dtype=dtypes.float32, device=self.device, requires_grad=False)
        self.m = self._new_state()
        self.v = self._new_state()

    def _step(self, params: list[Tensor], grads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        self.b1_t.assign(self.b1_t * self.b1)
        self.b2_t.assign(self.b2_t * self.b2)
        # the bias corrections, shared by every parameter: built once (every op here is Python work in each step)
        correction1, correction2 = 1.0 - self.b1_t, 1.0 - self.b2_t  # (1,)
        updates = []
        for t, g, m, v in zip(params, grads, self.m, self.v, strict=True):
            m.assign((self.b1 * m + (1.0 - self.b1) * g).cast(m.dtype))
            v.assign((self.b2 * v + (1.0 - self.b2) * (g * g)).cast(v.dtype))
            step = (m / correction1) / ((v / correction2).sqrt() + self.eps)
            if self.wd:  # skipped at 0: a read of w costs memory traffic (and float 0 * w is not folded away)
                step = step + self.wd * t.detach()
            scale = self.lr if self.adam else self.lr * self._trust_ratio(t, step)  # Adam's trust ratio is 1
            updates.append((scale * step).cast(t.dtype))
        return updates, [self.b1_t, self.b2_t, *self.m, *self.v]

    def _trust_ratio(self, t: Tensor, step: Tensor) -> Tensor:
        weight_norm = t.detach().square().sum().sqrt()
        step_norm = step.square().sum().sqrt()
        return (weight_norm > 0).where((step_norm > 0).where(weight_norm / step_norm, 1.0), 1.0)


class AdamW(LAMB):
    """Adam with decoupled weight decay: w -= lr * (adam_step + weight_decay * w). Paper: arxiv.org/abs/1711.05101v3.

    Args:
        params: the tensors to update.
        lr: the learning rate.
        b1: the first moment's decay, in [0, 1).
        b2: the second moment's decay, in [0, 1).
        eps: added to the square root of the second moment.
        weight_decay: decoupled weight decay.
        device: where the state lives (default: the first parameter's device).
        fused: update all parameters as one vector.

    Raises:
        ValueError: like `LAMB`.

    Examples:
        >>> w = Tensor([1.0, -1.0], requires_grad=True)
        >>> opt = AdamW([w], lr=0.1, weight_decay=0.0)
        >>> with Tensor.train():
        ...     _ = (w * Tensor([2.0, -3.0])).sum().backward()
        ...     opt.step()  # Adam's first step is lr * sign(g)
        >>> [round(x, 4) for x in w.numpy().flatten().tolist()]
        [0.9, -0.9]
    """

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        device: Device | None = None,
        fused: bool = False,
    ) -> None:
        super().__init__(params, lr, b1, b2, eps, weight_decay, adam=True, device=device, fused=fused)


class Adam(LAMB):
    """Adam: w -= lr * m_hat / (sqrt(v_hat) + eps), with bias-corrected moments. Paper: arxiv.org/abs/1412.6980.

    Args:
        params: the tensors to update.
        lr: the learning rate.
        b1: the first moment's decay, in [0, 1).
        b2: the second moment's decay, in [0, 1).
        eps: added to the square root of the second moment.
        device: where the state lives (default: the first parameter's device).
        fused: update all parameters as one vector.

    Raises:
        ValueError: negative lr or eps, b1 or b2 outside [0, 1).

    Examples:
        >>> w = Tensor([1.0, -1.0], requires_grad=True)
        >>> opt = Adam([w], lr=0.1)
        >>> with Tensor.train():
        ...     _ = (w * Tensor([2.0, -3.0])).sum().backward()
        ...     opt.step()
        >>> [round(x, 4) for x in w.numpy().flatten().tolist()]
        [0.9, -0.9]
    """

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-8,
        device: Device | None = None,
        fused: bool = False,
    ) -> None:
        super().__init__(params, lr, b1, b2, eps, 0.0, adam=True, device=device, fused=fused)
