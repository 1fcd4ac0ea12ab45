"""Stage 9 (engine): `TinyJit` runs a function eagerly once, records every kernel its second call runs (run_schedule
shows it each ExecItem), and from the third call on replays them with the new inputs' buffers swapped in: no Python,
tracing or scheduling. Entry point: `@TinyJit def step(x): ...`; misuse that would replay something else: `JitError`.
"""

from __future__ import annotations

import functools
import inspect
import time
import types
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

from fusegrad.device import Buffer, BufferStorage
from fusegrad.dtype import DType
from fusegrad.engine.capture import CAPTURE_STATES, CaptureState
from fusegrad.engine.graph import GraphException as GraphException  # the reference imports these from engine.jit
from fusegrad.engine.graph import GraphRunner, apply_graph_to_jit
from fusegrad.engine.graph import MultiGraphRunner as MultiGraphRunner
from fusegrad.engine.graph import graph_class as graph_class
from fusegrad.engine.memory import output_buffers, plan_memory, replan_arenas
from fusegrad.engine.realize import DirectLaunch, ExecItem, capturing
from fusegrad.errors import JitError as JitError  # its home before errors.py; the reference imports it from here
from fusegrad.helpers import DEBUG, JIT, JIT_BATCH_SIZE, NO_MEMORY_PLANNER, PROFILE, GlobalCounters, colored
from fusegrad.schedule.multi import multi_buffer, register_multi_buffer
from fusegrad.tensor import Tensor, _all_tensors
from fusegrad.uop import GroupOp, Ops
from fusegrad.uop.ops import UOp, buffers, sym_infer
from fusegrad.uop.symbolic_shape import call_var_vals, is_bound_variable, unbind_sizes, with_values

R = TypeVar("R")
# where an input's memory is used: (item, buffer slot, part, None) for a part (the buffer, or one device's buffer of
# a multi-device input) itself, or with (size, dtype, byte offset) for a view of it (e.g. a shard of a copy)
Slot = tuple[int, int, int, tuple[int, DType, int] | None]
# where an input sits in a call: (0,) the first argument, ("lr",) a keyword, (1, 2) item 2 of argument 1
Key = tuple[int | str, ...]


@dataclass(frozen=True, slots=True)
class InputSpec:
    """What a replay's input must match: shape, dtype, device, and the view (movement ops) over a base of that size."""

    shape: tuple[int, ...]
    dtype: DType
    device: str | tuple[str, ...]
    view: tuple[tuple[Ops, Any], ...]
    base_size: int
    placement: str = ""  # how a multi-device input is spread ("sharded(0)", "replicated")

    def describe(self) -> str:
        view = f" as a {'/'.join(op.name.lower() for op, _ in self.view)} view" if self.view else ""
        placement = f" {self.placement}" if self.placement else ""
        return f"shape {self.shape} {self.dtype} on {self.device}{placement}{view} of a {self.base_size}-element buffer"


class JitInput(NamedTuple):  # a tuple: every replay makes one per argument, and tuples build fastest
    """One Tensor argument of a call: its place, its (realized) tensor and the memory its kernels read: one buffer, or
    one per device for a multi-device tensor. `symbolic`: its sizes bind variables (their values are this call's)."""

    key: Key
    tensor: Tensor
    spec: InputSpec
    parts: tuple[Buffer, ...]
    symbolic: bool = False


@dataclass(frozen=True, slots=True)
class KnownInput:
    """What a call needs of a realized input node, worked out once per node (`known_input`)."""

    spec: InputSpec
    parts: tuple[Buffer, ...]
    symbolic: bool


# the entry of a node's __dict__ (where UOp keeps its per-node cached values) that holds its KnownInput
_KNOWN = "_jit_input"


@dataclass(frozen=True, slots=True)
class SameCall:
    """A direct replay's Tensor arguments (all its arguments), held weakly, with the nodes and memory they had and the
    input addresses it wrote (kernel argument lists or a graph's table, `target[pos] = address`): a next call with the
    same Tensors, still on the same nodes and memory, replays on that memory without collecting, checking and placing
    its inputs again (CapturedJit.replay_same). It matters after a memory-bound kernel, whose data evicts Python's
    from every cache: a replay of a 64 MB sum spent ~65 us in cold Python around its kernel (5% of it), ~6 us hot."""

    tensors: tuple[weakref.ref[Tensor], ...]
    nodes: tuple[weakref.ref[UOp], ...]
    memory: tuple[tuple[weakref.ref[Buffer], weakref.ref[BufferStorage]], ...]  # each input's buffer and storage
    training: bool
    writes: tuple[tuple[Any, int, Any], ...]

    def matches(self, args: tuple[Any, ...]) -> bool:
        """Whether a call with positional arguments `args` (no keywords) would replay exactly this call."""
        if len(args) != len(self.tensors) or Tensor.training is not self.training:
            return False
        for arg, tensor, node in zip(args, self.tensors, self.nodes, strict=True):
            if (held := tensor()) is not arg or held is None or held.uop is not node():
                return False
        for buf, storage in self.memory:  # memory given back since (free_intermediates) is allocated again elsewhere
            if (b := buf()) is None or (kept := storage()) is None or b._storage is not kept:
                return False
        return True


def _input_spec(node: UOp) -> InputSpec:
    u, view = node, []
    while u.op in GroupOp.Movement:
        view.append((u.op, u.arg))
        u = u.src[0]
    placement = repr(multi_buffer(u).placement) if isinstance(u.device, tuple) else ""
    view = [(op, unbind_sizes(arg)) for op, arg in view]  # a symbolic size may take another value in each call
    return InputSpec(unbind_sizes(node.shape), node.dtype, node.device, tuple(view), int(u.arg), placement)


def _memory_parts(base: UOp) -> tuple[Buffer, ...]:
    """The Buffers holding a BUFFER node's memory: its own, or each device's for a multi-device one."""
    return tuple(multi_buffer(base).bufs) if isinstance(base.device, tuple) else (base.buffer,)


def known_input(u: UOp) -> KnownInput:
    """The spec and memory of a realized input node (a BUFFER or a view of one), allocated.

    A node is immutable and hash-consed, and a one-device BUFFER node's Buffer never changes while the node lives, so
    this is worked out on the first call that passes it and kept in the node itself: a replay fed the same tensors
    (or new tensors holding nodes seen before) skips it, and it goes when the node goes. A multi-device node's
    placement lives in a registry that a later realize may fill in: it is worked out again on every call.
    """
    if (known := u.__dict__.get(_KNOWN)) is not None:
        for b in known.parts:  # memory given back since (free_intermediates on an output fed back in) comes back
            if not b.is_allocated() and b.size:
                b.allocate()
        return known  # type: ignore[no-any-return]  # only KnownInputs are stored under _KNOWN
    base = u.base
    assert base.op is Ops.BUFFER, f"TinyJit: known_input of a {base.op}, expected a realized node"
    parts = tuple(b.ensure_allocated() if b.size else b for b in _memory_parts(base))
    known = KnownInput(_input_spec(u), parts, bool(call_var_vals([], [u])))
    if not isinstance(base.device, tuple):
        u.__dict__[_KNOWN] = known
    return known


def _tensor_items(key: Key, value: object) -> Iterator[tuple[Key, Tensor]]:
    """The Tensors in one argument: itself, or the items of a list/tuple/dict (one level, like the reference)."""
    if isinstance(value, UOp) and not is_bound_variable(value):
        raise JitError(
            f"TinyJit: argument {_label(key)} is a UOp: got {value.op}, expected Tensors or bound variables "
            "(`Variable('i', 1, 10).bind(3)`)"
        )
    if isinstance(value, Tensor):
        yield key, value
    elif isinstance(value, (list, tuple)):
        yield from (((*key, i), x) for i, x in enumerate(value) if isinstance(x, Tensor))
    elif isinstance(value, dict):
        yield from (((*key, k), x) for k, x in value.items() if isinstance(x, Tensor))


def _label(key: Key, names: tuple[str, ...] = ()) -> str:
    """(0,) -> "'x' (argument 0)", ("lr",) -> "'lr' (keyword)", (1, 2) -> "'xs'[2] (argument 1)"."""
    head = key[0]
    name = head if isinstance(head, str) else names[head] if head < len(names) else f"#{head}"
    where = "keyword" if isinstance(head, str) else f"argument {head}"
    return f"'{name}'{''.join(f'[{k!r}]' for k in key[1:])} ({where})"


_NESTED_TYPES = (list, tuple, dict, UOp)  # arguments that may hold Tensors or bind a variable


def _find_tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[tuple[Key, Tensor]], bool]:
    """(every Tensor argument with its place, whether an argument is a container or a UOp: one that may hold
    Tensors or bind a variable)."""
    if not kwargs and all(type(a) is Tensor for a in args):  # the common call: Tensors only
        return [((i,), a) for i, a in enumerate(args)], False
    top: list[tuple[Key, Any]] = [((i,), a) for i, a in enumerate(args)]
    if kwargs:
        top += [((k,), v) for k, v in sorted(kwargs.items())]
    found: list[tuple[Key, Tensor]] = []
    nested: list[tuple[Key, Any]] = []
    for key, value in top:
        if isinstance(value, Tensor):
            found.append((key, value))
        elif isinstance(value, _NESTED_TYPES):
            nested.append((key, value))
    for key, value in nested:  # a Tensor inside a container that is also passed on its own is one input, not two
        found += [(k, t) for k, t in _tensor_items(key, value) if not any(t is other for _, other in found)]
    return found, bool(nested)


def _realize_inputs(tensors: list[Tensor]) -> None:
    """Realize the inputs that are not yet (constants into memory of their own, so a replay can take the next call's
    value)."""
    for t in tensors:
        if t.uop.base.op is Ops.CONST:
            t.uop = t.contiguous().uop
    if unrealized := [t for t in tensors if t.uop.base.op is not Ops.BUFFER]:
        Tensor.realize(*unrealized)


def _collect_inputs(
    args: tuple[Any, ...], kwargs: dict[str, Any], names: tuple[str, ...]
) -> tuple[list[JitInput], bool]:
    """(every Tensor argument, realized; whether an argument may bind a variable); JitError for inputs sharing a
    buffer."""
    found, nested = _find_tensors(args, kwargs)
    if pending := [t for _, t in found if _KNOWN not in t.uop.__dict__]:  # a known node is realized
        _realize_inputs(pending)
    inputs = []
    for key, t in found:
        known = known_input(t.uop)
        inputs.append(JitInput(key, t, known.spec, known.parts, known.symbolic))
    if len(inputs) > 1:
        _check_distinct(inputs, names)
    return inputs, nested


def _check_distinct(inputs: list[JitInput], names: tuple[str, ...]) -> None:
    """JitError for two inputs sharing memory: a replay could not tell them apart."""
    memory = [id(b.base) for inp in inputs for b in inp.parts]
    if len(set(memory)) == len(memory):
        return
    seen: dict[int, Key] = {}
    for inp in inputs:
        if (first := next((seen[id(b.base)] for b in inp.parts if id(b.base) in seen), None)) is not None:
            raise JitError(
                f"TinyJit: duplicate inputs: {_label(first, names)} and {_label(inp.key, names)} share one "
                "buffer, expected distinct buffers: a replay could not tell them apart"
            )
        seen.update((id(b.base), inp.key) for b in inp.parts)


def _returned_tensors(ret: object, where: str = "result", strict: bool = True) -> Iterator[tuple[str, Tensor]]:
    """The Tensors in a return value (nested tuples/lists/dicts); if strict, JitError for anything else but None."""
    if ret is None or (not strict and not isinstance(ret, (Tensor, list, tuple, dict))):
        return
    if isinstance(ret, Tensor):
        yield where, ret
    elif isinstance(ret, (list, tuple)):
        for i, x in enumerate(ret):
            yield from _returned_tensors(x, f"{where}[{i}]", strict)
    elif isinstance(ret, dict):
        for k, x in ret.items():
            yield from _returned_tensors(x, f"{where}[{k!r}]", strict)
    else:
        raise JitError(
            f"TinyJit: {where} is a {type(ret).__name__}, expected Tensors (or tuples/lists/dicts of "
            "them): a replay skips the function and could only return the captured value"
        )


def _pending_writes() -> set[tuple[int, UOp]]:
    return {(id(t), t.uop) for t in _live_tensors() if t.uop.op is Ops.ASSIGN}


def _call_and_realize(fxn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any], strict: bool) -> R:
    """Run the function, then realize its results and the assigns it left pending (e.g. a weight update nobody read):
    a replay only re-runs kernels, so every side effect of the call must have run as one."""
    before = _pending_writes()
    ret = fxn(*args, **kwargs)
    outs = [t for _, t in _returned_tensors(ret, strict=strict) if t.uop.base.op not in (Ops.BUFFER, Ops.CONST)]
    writes = [t for t in _live_tensors() if t.uop.op is Ops.ASSIGN and (id(t), t.uop) not in before]
    if outs or writes:
        Tensor.realize(*outs, *writes)
    return ret


def _memory_ids(t: Tensor) -> set[int]:
    """ids of the base Buffers a realized tensor's memory lives in; none for constants and lazy tensors."""
    base = t.uop.base
    return {id(b.base) for b in _memory_parts(base)} if base.op is Ops.BUFFER else set()


def _input_memory(inputs: list[JitInput]) -> dict[int, int]:
    """{id of a base Buffer: index of the input whose memory it is}."""
    return {id(b.base): k for k, inp in enumerate(inputs) for b in inp.parts}


def _live_tensors() -> list[Tensor]:
    return [t for ref in list(_all_tensors) if (t := ref()) is not None]


def _replace_in_tensors(mapping: dict[UOp, UOp]) -> None:
    """Point every live tensor whose graph reaches a key of `mapping` at the replacement."""
    touched = [t for t in _live_tensors() if t.uop.base in mapping or t.uop.base.op not in (Ops.BUFFER, Ops.CONST)]
    if not touched:
        return
    new_sink = UOp.sink(*[t.uop for t in touched]).substitute(mapping, name="TinyJit: restore inputs")
    for t, new in zip(touched, new_sink.src, strict=True):
        t.uop = new


@dataclass(frozen=True, slots=True)
class Alias:
    """An input's stand-in during the capture call: a fresh BUFFER node and memory holding a copy of its values."""

    index: int
    original: UOp
    node: UOp
    parts: tuple[Buffer, ...]


def _alias_inputs(inputs: list[JitInput]) -> list[Alias]:
    """Give each input tensor an Alias for the capture call.

    Kernels that read an input through the argument then name the alias; a kernel that names the original buffer
    reached that memory another way (a global or attribute holding the same tensor or a view of it): a replay would
    leave that read on the old memory. `_undo_aliases` copies writes back and undoes it.
    """
    aliases = []
    for k, inp in enumerate(inputs):
        base = inp.tensor.uop.base
        if base.arg == 0:
            continue  # an empty buffer: no kernel reads it
        node = UOp.new_buffer(base.src[1].arg, base.arg, base.dtype)
        if isinstance(base.device, tuple):
            source = multi_buffer(base)
            parts = tuple(register_multi_buffer(node, source.placement, source.shape).bufs)
        else:
            parts = (buffers.setdefault(node, Buffer(base.device, base.arg, base.dtype)),)
        for part, original in zip(parts, inp.parts, strict=True):
            part.allocate().copy_from(original)
        inp.tensor.uop = inp.tensor.uop.substitute({base: node})
        aliases.append(Alias(k, base, node, parts))
    return aliases


def _undo_aliases(aliases: list[Alias], inputs: list[JitInput]) -> None:
    """Copy what the call wrote into each alias back to the input's memory, and point every tensor at it again."""
    for alias in aliases:
        for original, part in zip(inputs[alias.index].parts, alias.parts, strict=True):
            original.copy_from(part)
    _replace_in_tensors({alias.node: alias.original for alias in aliases})


def _function_globals(fxn: Callable[..., Any]) -> Iterator[tuple[str, object]]:
    """Names a function reads without being passed them: its closure cells and the module globals it mentions
    (looking through decorators such as `Tensor.train()` to the function they wrap)."""
    fxn = inspect.unwrap(fxn)
    code = getattr(fxn, "__code__", None)
    if code is None:
        return
    for name, cell in zip(code.co_freevars, getattr(fxn, "__closure__", None) or (), strict=False):
        try:
            yield name, cell.cell_contents
        except ValueError:  # a cell not yet assigned
            continue
    module = getattr(fxn, "__globals__", {})
    yield from ((name, module[name]) for name in code.co_names if name in module)


# values whose attributes hold no tensors of the program's state (modules and functions hold globals, scanned apart)
_SKIPPED_TYPES = (type, types.ModuleType, types.FunctionType, types.MethodType, types.BuiltinFunctionType, str, bytes,
                  int, float, bool, type(None))  # fmt: skip


def _reachable_tensors(name: str, value: object, depth: int = 6) -> Iterator[tuple[str, Tensor]]:
    """Tensors reachable from a value through containers and object attributes, `depth` levels deep (a model's
    `self.blocks[0].attn.query.weight` is 5), visiting at most 100k objects."""
    stack: list[tuple[str, object, int]] = [(name, value, depth)]
    seen: set[int] = set()
    while stack and len(seen) < 100_000:
        path, x, left = stack.pop()
        if id(x) in seen or isinstance(x, _SKIPPED_TYPES):
            continue
        seen.add(id(x))
        if isinstance(x, Tensor):
            yield path, x
            continue
        if left == 0:
            continue
        if isinstance(x, (list, tuple)):
            stack += [(f"{path}[{i}]", v, left - 1) for i, v in enumerate(x)]
        elif isinstance(x, dict):
            stack += [(f"{path}[{k!r}]", v, left - 1) for k, v in x.items()]
        elif isinstance(attrs := getattr(x, "__dict__", None), dict):
            stack += [(f"{path}.{k}", v, left - 1) for k, v in attrs.items()]


@dataclass
class CapturedJit(Generic[R]):
    """The kernels of one captured call and how to feed them. Each call's inputs become one flat buffer list: every
    input's parts (one buffer, or one per device), then the views of them that kernels read (`extra_view_inputs`:
    flat index of the part, size, dtype, byte offset). `input_replace` maps (item, slot) to an index in that list;
    `returned_inputs` maps result tensors that were input tensors themselves to the input's index.

    `jit_cache` is the captured list; the first replay (and the first after `free_intermediates` or
    `replan_buffers_memory_layout`) allocates what it needs and groups runs of kernels into the devices' graph
    runners (JIT=2: no graphs), giving the list that replays run (`TinyJit.jit_cache`)."""

    ret: R
    jit_cache: list[ExecItem]
    input_replace: dict[tuple[int, int], int]
    extra_view_inputs: list[tuple[int, int, DType, int]]
    keys: list[Key]
    specs: list[InputSpec]
    returned_inputs: dict[int, int] = field(default_factory=dict)
    plain: dict[Key, str] = field(default_factory=dict)
    training: bool = False
    _copies: dict[int, Buffer] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._reset_replay()

    @property
    def items(self) -> list[ExecItem]:
        """The captured ExecItems (`jit_cache`), under the name bench/train.py reads."""
        return self.jit_cache

    def _reset_replay(self) -> None:
        """Forget the graphed list: the next replay allocates and graphs again."""
        self._jit_cache, self._input_replace, self._first_run = self.jit_cache, self.input_replace, True
        self._direct: list[DirectLaunch] | None = None
        self.same: SameCall | None = None  # the last direct replay, when the next may repeat it (TinyJit.__call__)
        for j, i in self.input_replace:
            self.jit_cache[j].bufs[i] = None
        self.__dict__.pop("_written", None)

    def replay(self, inputs: list[JitInput], var_vals: dict[str, int] | None = None, whole: bool = False) -> R:
        """Run the captured kernels on this call's inputs, with its variables' values (`var_vals`) passed at launch.
        `whole`: the inputs are the call's arguments, all of them and in order (positional Tensors only), so a next
        call with the same ones may repeat this replay (`same`, `replay_same`)."""
        var_vals = {} if var_vals is None else var_vals
        flat = self._input_buffers(inputs)
        if self._first_run:
            self._prepare(flat)
        self.same = None
        if self._direct is not None and not var_vals and not (DEBUG.value >= 2 or PROFILE.value):
            self._launch_direct(self._direct, flat)
            if whole and not self.returned_inputs:
                self.same = self._same_call(inputs)
        else:
            self._run_items(flat, var_vals)
        for _, t in _returned_tensors(self.ret, strict=False) if var_vals else ():  # symbolic sizes: this call's values
            t.uop = with_values(t.uop, var_vals)
        if self.returned_inputs:
            return _swap_returned(self.ret, self.returned_inputs, inputs)  # type: ignore[no-any-return]  # same shape as ret
        return self.ret

    def _run_items(self, flat: list[Buffer], var_vals: dict[str, int]) -> None:
        """Run every item through its runner, with this call's inputs in their slots while they run."""
        for (j, i), k in self._input_replace.items():
            self._jit_cache[j].bufs[i] = flat[k]
        try:
            if DEBUG.value >= 2 or PROFILE.value:
                for ei in self._jit_cache:  # per-kernel (per-graph) lines and profile events
                    ei.run(var_vals, jit=True)
            else:
                self._launch(var_vals)
        finally:
            for j, i in self._input_replace:  # let go of the caller's memory
                self._jit_cache[j].bufs[i] = None

    def _input_buffers(self, inputs: list[JitInput]) -> list[Buffer]:
        """This call's flat input list; an input that is also memory the kernels write (e.g. the last call's output fed
        back in) is copied first, or it would be overwritten while still being read."""
        flat = [b for inp in inputs for b in inp.parts]
        written = self._written
        if any(id(b.base) in written for b in flat):
            flat = [self._private_copy(k, b) if id(b.base) in written else b for k, b in enumerate(flat)]
        if self.extra_view_inputs:
            flat += [
                flat[k].view(size, dtype, offset).ensure_allocated()
                for k, size, dtype, offset in self.extra_view_inputs
            ]
        return flat

    def _prepare(self, flat: list[Buffer]) -> None:
        """Allocate every buffer the kernels use (intermediates may have been freed), then group the kernels into the
        devices' graph runners, with this call's inputs in their slots so the graphs find them."""
        for ei in self.jit_cache:
            for b in ei.bufs:
                if b is not None:
                    b.ensure_allocated()
        if JIT.value < 2:
            for (j, i), k in self.input_replace.items():
                self.jit_cache[j].bufs[i] = flat[k]
            own = {(id(self.jit_cache[j]), i): k for (j, i), k in self.input_replace.items()}
            self._jit_cache = apply_graph_to_jit(self.jit_cache, flat, {}, max_batch_size=JIT_BATCH_SIZE.value)
            self._input_replace = {}
            for j, ei in enumerate(self._jit_cache):  # a graph takes every input; a plain item keeps its own slots
                if isinstance(ei.prg, GraphRunner):
                    self._input_replace.update({(j, k): k for k in range(len(flat))})
                else:
                    self._input_replace.update({(j, i): k for (item, i), k in own.items() if item == id(ei)})
            for j, i in self.input_replace:
                self.jit_cache[j].bufs[i] = None
        for j, i in self._input_replace:  # the graphs were built with this call's inputs: let go of them
            self._jit_cache[j].bufs[i] = None
        self._direct = self._direct_plan()
        self._first_run = False

    def _direct_plan(self) -> list[DirectLaunch] | None:
        """Every item as a bare call (`Runner.direct_launch`: a CPU kernel, a CPU graph), or None where one has no
        such form (another device, kernel variables, a copy): then replays go through the runners."""
        launches = []
        for j, ei in enumerate(self._jit_cache):
            slots = {i: k for (item, i), k in self._input_replace.items() if item == j}
            if ei.prg is None or (launch := ei.prg.direct_launch(ei.bufs, slots)) is None:
                return None
            launches.append(launch)
        return launches if len({launch.address for launch in launches}) == 1 else None

    def _launch_direct(self, launches: list[DirectLaunch], flat: list[Buffer]) -> None:
        """The replay's hot path: the call's input addresses into each launch's table, one bare call per item, and
        the counters; the least Python between and after kernels (it runs with the cores' caches full of the kernels'
        data, several times slower than hot)."""
        address = launches[0].address
        addresses = [address(b) for b in flat]
        for launch in launches:
            target = launch.target
            for pos, k in launch.subs:
                target[pos] = addresses[k]
            launch.fxn(*launch.args)
        self._add_totals()

    def _add_totals(self) -> None:
        """One replay without variables into GlobalCounters."""
        ops, mem = self._totals
        GlobalCounters.kernel_count += len(self.jit_cache)
        GlobalCounters.global_ops += ops
        GlobalCounters.global_mem += mem

    def _same_call(self, inputs: list[JitInput]) -> SameCall | None:
        """The record of the direct replay just run on `inputs` (the input addresses read back from the launches'
        tables) for replay_same; None where a next call must go the whole way: an input copied first (memory the
        kernels write), on several devices, or a view of other memory."""
        parts = [b for inp in inputs for b in inp.parts]
        written = self._written
        if any(isinstance(inp.spec.device, tuple) for inp in inputs) or any(
            b._base is not None or id(b) in written for b in parts
        ):
            return None
        return SameCall(
            tuple(weakref.ref(inp.tensor) for inp in inputs),
            tuple(weakref.ref(inp.tensor.uop) for inp in inputs),
            tuple((weakref.ref(b), weakref.ref(b._storage)) for b in parts if b._storage is not None),
            Tensor.training,
            tuple((launch.target, pos, launch.target[pos]) for launch in self._direct or () for pos, _ in launch.subs),
        )

    def replay_same(self, same: SameCall) -> R:
        """Replay again on the memory of the replay `same` recorded (its caller checked `same.matches`): the input
        addresses written again, one bare call per item, the counters."""
        for target, pos, value in same.writes:
            target[pos] = value
        for launch in self._direct or ():
            launch.fxn(*launch.args)
        self._add_totals()
        return self.ret

    @functools.cached_property
    def _written(self) -> set[int]:
        """ids of the memory the captured kernels write besides their inputs (outputs, intermediates, weights)."""
        return {id(b.base) for ei in self.jit_cache for b in output_buffers(ei)}

    def _private_copy(self, k: int, buf: Buffer) -> Buffer:
        if (copy := self._copies.get(k)) is None or copy.nbytes != buf.nbytes:
            copy = self._copies[k] = Buffer(buf.device, buf.size, buf.dtype).allocate()
        return copy.copy_from(buf)

    def _launch(self, var_vals: dict[str, int]) -> None:
        """Run every item straight through its runner, then add the whole replay to GlobalCounters at once."""
        for ei in self._jit_cache:
            assert ei.prg is not None, "TinyJit: a captured ExecItem was not lowered"
            values = var_vals | ei.fixedvars if var_vals else ei.fixedvars
            ei.prg(ei.bufs, values)  # type: ignore[arg-type]  # every input slot was just filled
        ops, mem = self._count(var_vals) if var_vals else self._totals
        GlobalCounters.kernel_count += len(self.jit_cache)
        GlobalCounters.global_ops += ops
        GlobalCounters.global_mem += mem

    @functools.cached_property
    def _totals(self) -> tuple[int, int]:
        """(ops, bytes) of one replay without variables, for GlobalCounters."""
        return self._count({})

    def _count(self, call_vals: dict[str, int]) -> tuple[int, int]:
        """(ops, bytes) of one replay with these values of the call's variables."""
        progs = [(ei.prg, call_vals | ei.fixedvars) for ei in self.jit_cache if ei.prg is not None]
        ops = sum(sym_infer(prg.estimates.ops, var_vals) for prg, var_vals in progs)
        return ops, sum(sym_infer(prg.estimates.mem, var_vals) for prg, var_vals in progs)

    def free_intermediates(self) -> None:
        """Give back the memory of every buffer whose value comes from the inputs (written by a kernel that reads an
        input or such a buffer, not updated in place): the next replay allocates it again. The returned tensors'
        memory is among them, so their values are gone until that replay."""
        depends: set[int] = set()
        freed: list[Buffer] = []
        for ei in self.jit_cache:
            if any(b is None or id(b.base) in depends for b in ei.bufs):
                outs = output_buffers(ei, in_place=False)
                depends |= {id(b.base) for b in outs}
                freed += outs
        for b in freed:
            if b.is_allocated():
                b.deallocate()
            if (base := b._base) is not None and base.allocated_views == 0 and base.is_allocated():
                base.deallocate()
        self._reset_replay()

    def replan_buffers_memory_layout(self) -> None:
        """Move the memory the kernels use into one arena per device, intermediates whose lifetimes don't overlap
        sharing bytes, values copied over. Left in place: the returned tensors' buffers, buffers a live tensor holds
        that the kernels write (weights being trained), views and buffers with special options. Read-only buffers a
        tensor holds (weights used for inference) are copied into the arena: later writes to them outside the JIT
        are not seen by replays."""
        moved = replan_arenas(self.jit_cache, _result_buffers(self.ret))
        for ei in self.jit_cache:
            ei.bufs = [moved.get(id(b), b) if b is not None else None for b in ei.bufs]
        self._reset_replay()


def _result_buffers(ret: object) -> set[int]:
    """ids of the base Buffers of the tensors a captured call returned."""
    return {b for _, t in _returned_tensors(ret, strict=False) for b in _memory_ids(t)}


def _swap_returned(ret: Any, returned: dict[int, int], inputs: list[JitInput]) -> Any:
    """The captured result with each tensor that was an input replaced by this call's input in that place."""
    if isinstance(ret, Tensor):
        return inputs[returned[id(ret)]].tensor if id(ret) in returned else ret
    if isinstance(ret, (list, tuple)):
        return type(ret)(_swap_returned(x, returned, inputs) for x in ret)
    if isinstance(ret, dict):
        return {k: _swap_returned(x, returned, inputs) for k, x in ret.items()}
    return ret


class TinyJit(Generic[R]):
    """Capture a function's kernels and replay them. Call 1 runs `fxn` eagerly, call 2 runs it while recording every
    kernel (ExecItem) it runs, calls 3+ replay those kernels on the new inputs and return the same output tensors,
    refilled. Each call also realizes its results and the assigns it left pending, so weight and optimizer updates
    (and the random generator's device counter) run again on every replay.

    Inputs are the Tensor arguments (also one level inside lists/tuples/dicts; sharded ones too), realized before
    the call; they must keep their shape, dtype, device(s), placement and view, other arguments must stay equal
    (plain values) or the same objects, and Tensor.training must not change. Everything else the function reads
    (weights, Python numbers, tensors made from data, `.numpy()` values) is frozen at capture. Intermediates stay
    allocated between calls, sharing buffers where their lifetimes allow (NO_MEMORY_PLANNER=1 turns that off).
    Bound variables (`f(x, i.bind(3))`, or in an input's symbolic shape) may take another value in each call: the
    kernels take them as arguments, so replays never recompile; returned tensors keep the capture call's symbolic
    shapes (slice them with ints). `prune=True` (also as
    `@TinyJit(prune=True)`) replays only the kernels whose work changes between calls; the others ran at capture.
    `optimize=True` moves the captured buffers into one arena per device (CapturedJit.replan_buffers_memory_layout).
    A constant input (Tensor.zeros, Tensor.ones) is realized into memory of its own first, then treated like any input.
    A call with the very Tensors of the last replay (positional arguments only, each still on the node and memory it
    had) repeats that replay without collecting and checking its inputs again (`CapturedJit.same`).
    `jit_cache` lists what a replay runs: ExecItems, runs of kernels grouped into a device's graph runner.

    Args:
        fxn: the function to capture (None when used as `@TinyJit(prune=True)`).
        prune: replay only the kernels whose work changes between calls.
        optimize: move the captured buffers into one arena per device.

    Raises:
        JitError: (a RuntimeError and an AssertionError, raised by a call) changed inputs or arguments, duplicate
            inputs, non-Tensor results, a capture that ran no kernels, a nested TinyJit call, or an input also read
            without being passed.

    Examples:
        >>> step = TinyJit(lambda x: (x * 2).realize())
        >>> [step(Tensor([float(i)]).realize()).item() for i in range(4)]  # calls 3 and 4 replay the capture
        [0.0, 2.0, 4.0, 6.0]
        >>> len(step.jit_cache)
        1
    """

    def __init__(self, fxn: Callable[..., R] | None = None, *, prune: bool = False, optimize: bool = False) -> None:
        self.fxn, self.prune, self.optimize = fxn, prune, optimize
        self.cnt = 0
        self.captured: CapturedJit[R] | None = None
        self._items: list[ExecItem] = []
        # what the capture did to host state its kernels advance (the random generator), redone before each replay
        self._records: list[tuple[CaptureState[Any], Any]] = []
        self._names: tuple[str, ...] = _positional_names(fxn) if fxn is not None else ()
        if fxn is not None:
            functools.update_wrapper(self, fxn, updated=())  # name and docstring; never the function's attributes

    def reset(self) -> None:
        """Forget the capture: the next call runs eagerly again (then captures, then replays).

        Examples:
            >>> step = TinyJit(lambda x: (x + 1).realize())
            >>> for _ in range(2):
            ...     _ = step(Tensor([1.0]).realize())
            >>> step.reset()
            >>> step.jit_cache
            []
        """
        self.cnt, self.captured = 0, None

    def add(self, ei: ExecItem) -> None:
        """Called by run_schedule for every ExecItem run while this JIT captures.

        Args:
            ei: the kernel (or copy) just run, with its buffers.

        Examples:
            >>> TinyJit(lambda x: x).add  # the engine calls it: user code does not
            <bound method TinyJit.add of ...>
        """
        self._items.append(ei)

    @property
    def jit_cache(self) -> list[ExecItem]:
        """What a replay runs (graph runners included once the first replay grouped them); [] before capture.

        Examples:
            >>> step = TinyJit(lambda x: (x.exp() + 1).sum().realize())
            >>> for _ in range(3):
            ...     _ = step(Tensor([1.0, 2.0]).realize())
            >>> len(step.jit_cache) >= 1
            True
        """
        return self.captured._jit_cache if self.captured is not None else []

    @property
    def input_replace(self) -> dict[tuple[int, int], int]:
        """{(item in jit_cache, buffer slot): index in a call's flat input buffer list}; {} before capture.

        Examples:
            >>> step = TinyJit(lambda x: (x * 2).realize())
            >>> for _ in range(2):
            ...     _ = step(Tensor([1.0]).realize())
            >>> list(step.input_replace.values())  # the one input feeds one slot of the kernel
            [0]
        """
        return self.captured._input_replace if self.captured is not None else {}

    def __get__(self, obj: object, objtype: type | None = None) -> Callable[..., R]:
        return functools.partial(self.__call__, obj)  # a jitted method gets its instance as argument 0

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        if self.fxn is None:  # `@TinyJit(prune=True)`: this call hands over the function
            if len(args) != 1 or kwargs or not callable(args[0]):
                raise TypeError(f"TinyJit: expected the function to wrap, got {len(args)} args {sorted(kwargs)}")
            self.__init__(args[0], prune=self.prune, optimize=self.optimize)  # type: ignore[misc]  # rebinding the function is the intent
            return self  # type: ignore[return-value]  # the decorator form returns the JIT itself
        captured = self.captured
        if (
            captured is not None
            and (same := captured.same) is not None
            and not kwargs
            and not capturing
            and same.matches(args)
            and JIT.value
            and not DEBUG.value
            and not PROFILE.value
        ):  # the very same Tensors as the last replay: it runs again on their memory
            for state, record in self._records:
                state.replay(record)
            self.cnt += 1
            return captured.replay_same(same)
        if capturing and capturing[0] is not self and self.cnt >= 1 and JIT.value:
            raise JitError(
                "TinyJit: having TinyJit inside another TinyJit is not supported: called from inside another "
                "TinyJit's capture, expected one JIT at a time (the outer capture would miss the inner kernels); "
                "call the inner function"
            )
        inputs, nested = _collect_inputs(args, kwargs, self._names)
        # the values of the variables this call binds (arguments, input sizes): kernel arguments at every replay
        var_vals: dict[str, int] = {}
        if nested or any(inp.symbolic for inp in inputs):
            var_vals = call_var_vals([*args, *kwargs.values()], [inp.tensor.uop for inp in inputs])
        if not JIT.value or self.cnt == 0:
            ret = _call_and_realize(self.fxn, args, kwargs, strict=False)
        elif self.cnt == 1:
            ret = self._capture(args, kwargs, inputs, var_vals)
        else:
            assert self.captured is not None, "TinyJit: call 3+ without a capture"
            self._check_inputs(inputs, args, kwargs)
            start = time.perf_counter()
            for state, record in self._records:
                state.replay(record)
            whole = not kwargs and not nested and len(inputs) == len(args)
            ret = self.captured.replay(inputs, var_vals, whole)
            if DEBUG.value >= 1:
                took = (time.perf_counter() - start) * 1e3
                print(colored(f"JIT replayed {len(self.captured.jit_cache)} kernels in {took:.2f} ms", "magenta"))
        self.cnt += 1
        return ret

    def _capture(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], inputs: list[JitInput], var_vals: dict[str, int]
    ) -> R:
        assert self.fxn is not None, "TinyJit: capture without a function"
        names = [self._names[i] if i < len(self._names) else f"#{i}" for i in range(len(args))]
        objects = [(n, a) for n, a in zip(names, args, strict=True) if not isinstance(a, (Tensor, list, tuple, dict))]
        self._check_closure(inputs, objects)
        if pending := [t for t in _live_tensors() if t.uop.op is Ops.ASSIGN]:
            Tensor.realize(*pending)  # writes made before this call run once now, not on every replay
        self._items = []
        aliases = _alias_inputs(inputs)
        begun = [(state, state.begin()) for state in CAPTURE_STATES]  # e.g. the random states hold the host's words
        capturing.append(self)
        try:
            ret = _call_and_realize(self.fxn, args, kwargs, strict=True)
        finally:
            capturing.remove(self)
            _undo_aliases(aliases, inputs)
        ends = [(state, state.end(start)) for state, start in begun]
        self._records = [(state, record) for state, record in ends if record is not None]
        items, self._items = self._items, []
        for ei in items:  # the call's variables take each replay's values; values bound inside the function stay
            ei.fixedvars = {k: v for k, v in ei.fixedvars.items() if k not in var_vals}
        if not items:
            raise JitError(
                "TinyJit: the function ran no kernels on the capture call (call 2): got 0 kernels, "
                "expected at least one: return realized Tensors that the function computes"
            )
        alias_of = {id(part): (alias.index, d) for alias in aliases for d, part in enumerate(alias.parts)}
        slots = _input_slots(items, inputs, alias_of, self._names)
        if self.prune:
            items, slots = _prune(items, slots)
        if not NO_MEMORY_PLANNER.value:
            plan_memory(items)
        input_replace, views = _flatten_slots(slots, [len(inp.parts) for inp in inputs])
        self.captured = CapturedJit(  # its __post_init__ empties the input slots: don't keep this call's inputs alive
            ret,
            items,
            input_replace,
            views,
            [i.key for i in inputs],
            [i.spec for i in inputs],
            _returned_inputs(ret, inputs, self._names),
            _plain_arguments(args, kwargs),
            Tensor.training,
        )
        if self.optimize:
            self.captured.replan_buffers_memory_layout()
        if DEBUG.value >= 1:
            print(colored(f"JIT captured {len(items)} kernels with {len(inputs)} inputs", "magenta"))
        return ret

    def _check_closure(self, inputs: list[JitInput], objects: list[tuple[str, object]]) -> None:
        """JitError when an input is also a global or closure variable of the function: a replay could not tell the
        argument's reads (new input) from the variable's (old memory)."""
        assert self.fxn is not None, "TinyJit: no function"
        memory = _input_memory(inputs)
        for name, value in [*_function_globals(self.fxn), *objects]:
            for path, t in _reachable_tensors(name, value):
                if shared := [memory[b] for b in _memory_ids(t) if b in memory]:
                    raise _constant_error(inputs[shared[0]].key, f"the function's variable '{path}'", self._names)

    def _check_inputs(self, inputs: list[JitInput], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        assert self.captured is not None, "TinyJit: no capture to check against"
        if (plain := _plain_arguments(args, kwargs)) != self.captured.plain:
            key = next(k for k in {**plain, **self.captured.plain} if plain.get(k) != self.captured.plain.get(k))
            raise JitError(
                f"TinyJit: argument {_label(key, self._names)} changed since capture: got {plain.get(key, 'nothing')}, "
                f"expected {self.captured.plain.get(key, 'nothing')}; Python values and objects are baked into the "
                "captured kernels: pass a Tensor, use one TinyJit per object, or call reset() to capture again"
            )
        if Tensor.training != self.captured.training:
            raise JitError(
                f"TinyJit: Tensor.training changed since capture: got {Tensor.training}, expected "
                f"{self.captured.training}; the mode is baked into the captured kernels (dropout, batchnorm): use one "
                "TinyJit per mode, or call reset()"
            )
        keys = [i.key for i in inputs]
        if keys != self.captured.keys:
            shown = ", ".join(_label(k, self._names) for k in keys)
            expected = ", ".join(_label(k, self._names) for k in self.captured.keys)
            raise JitError(f"TinyJit: the Tensor arguments changed since capture: got [{shown}], expected [{expected}]")
        for inp, spec in zip(inputs, self.captured.specs, strict=True):
            if inp.spec is not spec and inp.spec != spec:  # the same node as at capture: the same spec object
                raise JitError(
                    f"TinyJit: input {_label(inp.key, self._names)} changed since capture: got "
                    f"{inp.spec.describe()}, expected {spec.describe()}; call reset() to capture again"
                )


_PLAIN_TYPES = (int, float, bool, str, bytes, type(None))
_TENSOR_HOLDERS = (Tensor, list, tuple, dict)  # arguments whose Tensors are inputs, checked by their specs


def _plain_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[Key, str]:
    """{place: description} of the arguments that are not Tensors or containers: plain values (numbers, strings, None)
    by value, other objects (a model, `self`) by identity. A replay can't follow them, so other ones must not replay."""
    plain: dict[Key, str] = {
        (i,): _describe_argument(a) for i, a in enumerate(args) if not isinstance(a, _TENSOR_HOLDERS)
    }
    if kwargs:
        plain.update({(k,): _describe_argument(v) for k, v in kwargs.items() if not isinstance(v, _TENSOR_HOLDERS)})
    return plain


def _describe_argument(v: object) -> str:
    """A plain value by value, a bound variable by its variable (its value may change: it is passed at launch), any
    other object by identity."""
    if isinstance(v, _PLAIN_TYPES):
        return f"{type(v).__name__} {v!r}"
    if is_bound_variable(v):
        name, lo, hi = v.src[0].arg
        return f"variable {name} in {lo}..{hi}"
    return f"{type(v).__name__} object {id(v):#x}"


def _positional_names(fxn: Callable[..., Any]) -> tuple[str, ...]:
    try:
        params = inspect.signature(fxn).parameters.values()
    except (TypeError, ValueError):
        return ()
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(p.name for p in params if p.kind in kinds)


def _constant_error(key: Key, how: str, names: tuple[str, ...]) -> JitError:
    return JitError(
        f"TinyJit: input {_label(key, names)} is also read without being passed, through {how}: got one "
        "buffer on two paths, expected inputs to reach the kernels only as arguments (a replay would "
        "swap both reads to the new input); pass it as an argument only, or pass a copy (.contiguous())"
    )


def _flatten_slots(
    slots: list[list[Slot]], part_counts: list[int]
) -> tuple[dict[tuple[int, int], int], list[tuple[int, int, DType, int]]]:
    """Per-input slots -> (input_replace, extra view inputs) over the flat list of every input's parts followed by
    the distinct views of them that kernels read."""
    starts = [sum(part_counts[:k]) for k in range(len(part_counts))]
    replace: dict[tuple[int, int], int] = {}
    views: dict[tuple[int, int, DType, int], int] = {}
    for k, input_slots in enumerate(slots):
        for j, i, d, view in input_slots:
            part = starts[k] + d
            if view is None:
                replace[(j, i)] = part
            else:
                key = (part, *view)
                replace[(j, i)] = views.setdefault(key, sum(part_counts) + len(views))
    return replace, list(views)


def _input_slots(
    items: list[ExecItem], inputs: list[JitInput], alias_of: dict[int, tuple[int, int]], names: tuple[str, ...]
) -> list[list[Slot]]:
    """For each input, the buffer slots that use its memory through the argument; JitError for other paths."""
    slots: list[list[Slot]] = [[] for _ in inputs]
    memory = _input_memory(inputs)
    for j, ei in enumerate(items):
        for i, b in enumerate(ei.bufs):
            if b is None:
                continue
            if (found := alias_of.get(id(b.base))) is not None:
                slots[found[0]].append((j, i, found[1], None if b is b.base else (b.size, b.dtype, b.offset)))
            elif (k := memory.get(id(b.base))) is not None:
                raise _constant_error(
                    inputs[k].key, f"kernel {j} ({ei.prg.display_name if ei.prg else ei.ast.op})", names
                )
    return slots


def _returned_inputs(ret: object, inputs: list[JitInput], names: tuple[str, ...]) -> dict[int, int]:
    """{id(result tensor): input index} for results that are input tensors; JitError for views of an input."""
    found: dict[int, int] = {}
    memory = _input_memory(inputs)
    for where, t in _returned_tensors(ret):
        if (k := next((k for k, inp in enumerate(inputs) if inp.tensor is t), None)) is not None:
            found[id(t)] = k
        elif shared := [memory[b] for b in _memory_ids(t) if b in memory]:
            k = shared[0]
            raise JitError(
                f"TinyJit: {where} is a view of input {_label(inputs[k].key, names)}: got a result that "
                "shares the input's memory, expected the input itself or a new tensor: return "
                ".contiguous() of it"
            )
    return found


def _accesses(ei: ExecItem) -> tuple[set[int], set[int]]:
    """(read, written) memory of one captured kernel, as ids of base Buffers."""
    assert ei.prg is not None, "TinyJit: a captured ExecItem was not lowered"
    read = {id(b.base) for i in ei.prg.inputs if (b := ei.bufs[i]) is not None}
    return read, {id(b.base) for i in ei.prg.outputs if (b := ei.bufs[i]) is not None}


def _prune(items: list[ExecItem], slots: list[list[Slot]]) -> tuple[list[ExecItem], list[list[Slot]]]:
    """Keep the kernels whose work changes from call to call: those that read an input, update memory that outlives
    the call (read before it is written, like an optimizer's state or the random counter), or read what a kept
    kernel writes. The others computed the same values every call, and already ran at capture."""
    access = [_accesses(ei) for ei in items]
    first_write: dict[int, int] = {}
    for j, (_, written) in enumerate(access):
        for b in written:
            first_write.setdefault(b, j)
    state = {b for j, (read, _) in enumerate(access) for b in read if first_write.get(b, -1) >= j}
    keep = {j for slot in slots for j, _, _, _ in slot}
    keep |= {j for j, (_, written) in enumerate(access) if not written.isdisjoint(state)}
    changed = True
    while changed:  # whatever reads memory that a kept kernel writes is kept too
        dirty = {b for j in keep for b in access[j][1]}
        grown = {j for j, (read, _) in enumerate(access) if not read.isdisjoint(dirty)}
        changed = not grown <= keep
        keep |= grown
    kept = sorted(keep)
    renumber = {j: n for n, j in enumerate(kept)}
    if DEBUG.value >= 1:
        print(colored(f"JIT pruned {len(items)} -> {len(kept)} kernels", "magenta"))
    return [items[j] for j in kept], [[(renumber[j], i, d, view) for j, i, d, view in slot] for slot in slots]
