"""Op recipes: a composite Tensor method called again on inputs of a structure seen before rebuilds the graph its
first call built, instead of running its Python again (RECIPE_CACHE).

`layernorm`, `scaled_dot_product_attention` or `sparse_categorical_crossentropy` each build a few dozen nodes through
a few dozen Tensor operations (broadcasts, constants, dtype checks), 100-330 µs of Python a call; a training step calls
them on inputs of the same structure every time. The graph such a method builds is a function of its inputs'
structure (every node's op, dtype, arg and sources down to the buffers, which stand for any buffer of their dtype,
size and device), the other arguments' values, the call site (its label) and the global settings (default dtypes,
training mode, flags). So the first call of each (method, call site, inputs' structure, arguments, settings) runs the
method and records its graph over its inputs' nodes (engine/cache.py's GraphRecipe); a later call of the same key
makes the same nodes on its own inputs, one per recipe node (hash-consing returns live equal ones), and wraps the
outputs in Tensors as the method would have.

A call is run, not recorded, when its result can't be expressed that way: an argument that is not a Tensor or a
plain value (a callable, a Tensor subclass, a sharded or symbolic tensor), a method that reads data or realizes (its
graph would depend on values), writes a tensor (assign, setitem) or draws random numbers (a fresh buffer), or returns
something other than Tensors. Methods whose recordings are too small to gain (a reshape makes one node) are switched
off after a few. RECIPE_CACHE=2 runs the method on every reuse too and raises if the graphs differ: the test suite's
check that the structure decides the graph.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fusegrad.dtype import DType, dtypes
from fusegrad.engine.cache import GraphRecipe, flag_state_id, is_replayable
from fusegrad.helpers import RECIPE_CACHE, TRACK_MATCH_STATS, Metadata
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp

RECIPES = 4096  # recordings kept; the oldest goes first
STRUCTURES = 200_000  # structure parts interned before the table starts over (ids already given stay valid)
# a recording gains when its method took longer than a rebuild costs, about this much plus this much per node (µs)
REBUILD_US, NODE_US = 6.0, 1.0
TRIES = 4  # recordings of one method in a row that gained nothing, after which it is run straight
MISSES = 64  # recordings of one method after which it is run straight unless its calls reuse them at least as often
RETRY = 4096  # calls of a method switched off after which it is tried again (a program's next phase: a training loop)

# the Tensor class (tensor.py registers it: mixins never import Tensor); None until then, and nothing is recorded
tensor_type: Any = None
# host events so far: realizes, data reads and assigns (tensor.py counts them): a recording during which one happened
# depends on values or writes a tensor
host_events = 0
counts = {"hit": 0, "recorded": 0, "run": 0}  # calls by outcome, for tests and bench/overhead.py


@dataclass(frozen=True, slots=True)
class Recording:
    """A method's graph over its inputs' nodes: None when its calls of this key are run (see the module doc). Each
    output is ("input", i) for an input tensor returned as it is, else ("new", its class, requires_grad, the structure
    id of its node)."""

    recipe: GraphRecipe | None
    meta: Metadata | None  # the key holds its id: kept alive here, so no other label takes that id meanwhile
    outputs: tuple[tuple[Any, ...], ...] = ()
    many: bool = False  # the method returned a tuple (else one Tensor)


_recordings: dict[tuple[Any, ...], Recording] = {}


@dataclass(slots=True)
class _MethodStats:
    """Per method: recordings, the last ones in a row that gained nothing (too fast, or unrecordable), reuses; `off`:
    run it straight (its recordings don't gain, or it is called with new keys most of the time: a Python float that
    changes every call, a test suite's many shapes) for its next RETRY calls, then counted afresh."""

    records: int = 0
    no_gain: int = 0
    hits: int = 0
    off: int = 0  # calls left to run straight

    def recorded(self, gain: bool) -> None:
        self.records += 1
        self.no_gain = 0 if gain else self.no_gain + 1
        if self.no_gain >= TRIES or (self.records >= MISSES and self.hits < self.records):
            self.off, self.records, self.no_gain, self.hits = RETRY, 0, 0, 0


_stats: dict[Callable[..., Any], _MethodStats] = {}


def call(fn: Callable[..., Any], meta: Metadata | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`fn(*args, **kwargs)` for the outermost traced call: rebuilt from a recording when its key has one."""
    if (stats := _stats.get(fn)) is None:
        stats = _stats[fn] = _MethodStats()
    if stats.off:
        stats.off -= 1
        return fn(*args, **kwargs)
    if tensor_type is None or not RECIPE_CACHE.value or TRACK_MATCH_STATS.value >= 2:
        return fn(*args, **kwargs)
    inputs: list[Any] = []
    parts = _arg_parts(args, kwargs, inputs)
    if parts is None or not inputs:
        counts["run"] += 1
        return fn(*args, **kwargs)
    context = (fn, id(meta), dtypes.default_float, dtypes.default_int, tensor_type.training, flag_state_id())
    key = (context, parts)
    if (recording := _recordings.get(key)) is None or recording.meta is not meta:
        return _record(fn, meta, key, inputs, args, kwargs, stats)
    if recording.recipe is None:
        counts["run"] += 1
        return fn(*args, **kwargs)
    counts["hit"] += 1
    stats.hits += 1
    built = _rebuild(recording, inputs)
    if RECIPE_CACHE.value >= 2:
        _check(fn, args, kwargs, built)
    return built


# *** keys ***

_NO = object()  # an argument a key can't express


def _arg_parts(args: tuple[Any, ...], kwargs: dict[str, Any], inputs: list[Any]) -> tuple[Any, ...] | None:
    parts = [_part(a, inputs) for a in args]
    if kwargs:
        parts += list(kwargs)
        parts += [_part(v, inputs) for v in kwargs.values()]
    return None if _NO in parts else tuple(parts)


def _part(v: Any, inputs: list[Any]) -> Any:
    """`v` in a key: a tensor by its node's structure, whether it requires a gradient and the first input holding
    the same node (sharing); a plain value by type and value (floats by repr: -0.0 is not 0.0, nan equals nan)."""
    t = type(v)
    if t is tensor_type:
        u = v._uop
        if (sid := structure_id(u)) is None:
            return _NO
        at = next((i for i, x in enumerate(inputs) if x._uop is u), len(inputs))
        inputs.append(v)
        return (sid, v.requires_grad, at)
    if v is None or t is int or t is bool or t is str:
        return (t, v)
    if t is float:
        return (t, repr(v))
    if t is tuple or t is list:
        inner = tuple([_part(x, inputs) for x in v])
        return _NO if _NO in inner else (t, inner)
    if t is slice:
        inner = (_part(v.start, inputs), _part(v.stop, inputs), _part(v.step, inputs))
        return _NO if _NO in inner else (t, inner)
    if isinstance(v, DType) or v is Ellipsis:  # dtypes are interned, hashable values
        return (t, v)
    return _NO


# *** structure ids ***

_STRUCTURE = "_structure_id"  # a node's __dict__ entry: its structure id, or -1 when no key can express it
_ids: dict[tuple[Any, ...], int] = {}
_next_id = itertools.count()  # never reused: ids given before the table starts over stay distinct


def structure_id(u: UOp) -> int | None:
    """A small int naming the structure of `u`'s graph: every node's op, dtype, arg and tag, with BUFFER nodes by
    dtype, size and device and UNIQUE nodes alike (identities, not structure). Equal ids, equal structures. Kept in
    each node (a node never changes). None for a graph with symbolic values, a sharded device or earlier kernels."""
    if (sid := u.__dict__.get(_STRUCTURE)) is None:
        sid = _assign_ids(u)
    return None if sid < 0 else sid


def _assign_ids(root: UOp) -> int:
    if len(_ids) >= STRUCTURES:
        _ids.clear()
    stack = [root]
    while stack:
        u = stack[-1]
        known = u.__dict__
        if _STRUCTURE in known:
            stack.pop()
            continue
        op = u.op
        part: tuple[Any, ...] | None
        if op is Ops.BUFFER:
            device = u.src[1].arg if len(u.src) > 1 else None
            part = None if type(device) is tuple else (op, u._cache_key[1], u.arg, device)
        elif op is Ops.UNIQUE:
            part = (op,)
        elif not is_replayable(u):
            part = None
        else:
            if pending := [s for s in u.src if _STRUCTURE not in s.__dict__]:
                stack.extend(pending)
                continue
            srcs = tuple([s.__dict__[_STRUCTURE] for s in u.src])
            _, dtype_id, _, key_arg, tag = u._cache_key
            part = None if -1 in srcs else (op, dtype_id, key_arg, tag, srcs)
        if part is None:
            known[_STRUCTURE] = -1
        elif (sid := _ids.get(part)) is not None:
            known[_STRUCTURE] = sid
        else:
            known[_STRUCTURE] = _ids[part] = next(_next_id)
        stack.pop()
    return root.__dict__[_STRUCTURE]  # type: ignore[no-any-return]  # set by the loop


# *** recording and rebuilding ***


def _record(
    fn: Callable[..., Any],
    meta: Metadata | None,
    key: tuple[Any, ...],
    inputs: list[Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    stats: _MethodStats,
) -> Any:
    """Run `fn` and keep what it built under `key` (or that its calls of this key are run)."""
    before = [t._uop for t in inputs]
    events, start = host_events, time.perf_counter()
    result = fn(*args, **kwargs)
    took = (time.perf_counter() - start) * 1e6
    counts["recorded"] += 1
    outs = list(result) if type(result) is tuple else [result]
    recording = Recording(None, meta)
    wrote = host_events != events or any(t._uop is not u for t, u in zip(inputs, before, strict=True))
    if not wrote and outs and all(type(o) is tensor_type for o in outs):
        recipe = GraphRecipe.of([o._uop for o in outs], before)
        if recipe is not None and took > REBUILD_US + NODE_US * len(recipe.nodes):
            recording = Recording(recipe, meta, tuple(_output(o, inputs) for o in outs), type(result) is tuple)
    stats.recorded(recording.recipe is not None)
    if len(_recordings) >= RECIPES:
        del _recordings[next(iter(_recordings))]
    _recordings[key] = recording
    return result


def _output(out: Any, inputs: list[Any]) -> tuple[Any, ...]:
    for i, t in enumerate(inputs):
        if out is t:
            return ("input", i)
    return ("new", type(out), out.requires_grad, structure_id(out._uop))


def _rebuild(recording: Recording, inputs: list[Any]) -> Any:
    assert recording.recipe is not None  # call() checked
    nodes = recording.recipe.build([t._uop for t in inputs])
    outs: list[Any] = []
    for node, spec in zip(nodes, recording.outputs, strict=True):
        if spec[0] == "input":
            outs.append(inputs[spec[1]])
            continue
        _, cls, requires_grad, sid = spec
        if sid is not None:
            node.__dict__.setdefault(_STRUCTURE, sid)
        outs.append(cls(node, requires_grad=requires_grad))
    return tuple(outs) if recording.many else outs[0]


def _check(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], built: Any) -> None:
    """RECIPE_CACHE=2: the method run on the same inputs must build the very nodes the recipe did."""
    ran = fn(*args, **kwargs)
    ran_outs, built_outs = (list(ran), list(built)) if type(ran) is tuple else ([ran], [built])
    same = len(ran_outs) == len(built_outs) and all(
        a._uop is b._uop and a.requires_grad == b.requires_grad and type(a) is type(b)
        for a, b in zip(ran_outs, built_outs, strict=False)
    )
    if not same:
        raise RuntimeError(f"RECIPE_CACHE=2: {fn.__name__} rebuilt from its recipe differs from the method run again")
