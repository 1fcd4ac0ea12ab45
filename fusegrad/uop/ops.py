"""The UOp: one immutable, hash-consed node type for tensors, kernels, programs and index expressions.

`UOp(op, dtype, src, arg, tag)` returns the existing node when an equal one is alive, so identity is equality.
This module also re-exports the pattern and rewrite machinery, the public path of the whole IR.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import weakref
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar, overload

from fusegrad.device import Buffer
from fusegrad.dtype import ConstType, DType, PtrDType, dtypes
from fusegrad.helpers import TRACK_MATCH_STATS, Metadata, prod
from fusegrad.uop import AxisType, GroupOp, Ops
from fusegrad.uop.alu import exec_alu
from fusegrad.uop.bounds import compute_bounds
from fusegrad.uop.mathtraits import MathTrait
from fusegrad.uop.render import render_expr, render_tree
from fusegrad.uop.rewrite import (
    RewriteLoopError,
    RewriteTrace,
    TrackedGraphRewrite,
    TrackedMatch,
    TrackedPatternMatcher,
    _name_cnt,
    active_rewrites,
    graph_rewrite,
    graph_rewrite_map,
    match_stats,
    profile_matches,
    track_rewrites,
    track_uop,
    tracked_ctxs,
    tracked_keys,
    uop_fields,
)
from fusegrad.uop.shape import compute_device, compute_shape, movement_shape
from fusegrad.uop.upat import PatternMatcher, UPat

__all__ = [
    "TRACK_MATCH_STATS",
    "AxisType",
    "GroupOp",
    "Ops",
    "PatternMatcher",
    "RewriteLoopError",
    "RewriteTrace",
    "TrackedGraphRewrite",
    "TrackedMatch",
    "TrackedPatternMatcher",
    "UOp",
    "UPat",
    "_name_cnt",
    "active_rewrites",
    "exec_alu",
    "graph_rewrite",
    "graph_rewrite_map",
    "match_stats",
    "profile_matches",
    "resolve",
    "sint",
    "smax",
    "smin",
    "ssimplify",
    "sym_infer",
    "track_rewrites",
    "track_uop",
    "tracked_ctxs",
    "tracked_keys",
    "uop_fields",
]

_NEG_ZERO = ("-0.0",)  # cache key stand-in for -0.0, which == 0.0 but must stay a distinct constant


def _canonical_float(x: Any) -> tuple[Any, Any]:
    if type(x) is not float:
        return x, x
    if x != x:
        return math.nan, math.nan  # one NaN object, so NaN constants hash-cons too
    return x, (_NEG_ZERO if x == 0.0 and math.copysign(1.0, x) < 0 else x)


def _canonical_float_arg(arg: Any) -> tuple[Any, Any]:
    """(the arg to store, the arg to key the cache with) for a float or a tuple of them (VCONST lanes)."""
    if type(arg) is float:
        return _canonical_float(arg)
    pairs = [_canonical_float(x) for x in arg]
    return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)


class UOpMetaClass(type):
    """Hash-consing: constructing a UOp equal to a live one returns that one."""

    ucache: ClassVar[dict[tuple[Any, ...], weakref.ReferenceType[UOp]]] = {}

    def __call__(
        cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None, tag: Any = None
    ) -> UOp:
        # the key holds the dtype's id: dtypes are interned and never freed, and an int hashes without the
        # Python-level DType.__hash__ (every construction hashes the key, and every node's __del__ again)
        if type(arg) is float or (type(arg) is tuple and float in map(type, arg)):  # map: no generator per node
            arg, key_arg = _canonical_float_arg(arg)
            key = (op, id(dtype), src, key_arg, tag)
        else:
            key = (op, id(dtype), src, arg, tag)
        # the look-up, inlined: every node of the frontend comes through here
        if (ref := UOpMetaClass.ucache.get(key)) is not None and (ret := ref()) is not None:
            return ret
        return UOpMetaClass._create(cls, key, op, dtype, src, arg, tag)

    def _create(cls, key: tuple[Any, ...], op: Ops, dtype: DType, src: tuple[UOp, ...], arg: Any, tag: Any) -> UOp:
        """A new node under hash-consing key `key`, for a caller that found no live one under it. The fields are set
        here, not by UOp.__init__ through type.__call__: one Python frame less for every node made."""
        created: UOp = object.__new__(cls)  # type: ignore[arg-type]  # cls is UOp (the metaclass's only class)
        created.op, created.dtype, created.src, created.arg, created.tag = op, dtype, src, arg, tag
        created._cache_key = key
        UOpMetaClass.ucache[key] = weakref.ref(created)
        return created


# BUFFER UOps own their Buffers through a weak map: nothing in a UOp graph (or a trace of it) keeps one alive
buffers: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()


_BUFFER = "_buffer"  # a node's __dict__ entry: its Buffer, once UOp.buffer has read it (see there)
_Default = TypeVar("_Default")
LABELS = "_labels"  # a labelled node's __dict__ entry (NodeLabels)


class NodeLabels:
    """Tensor-level metadata (the op that created a node) by node, looked up by VIZ labels and kernel names: the
    mapping part of a weak-keyed dict (get, in, [], del), kept in the node's own __dict__. An entry lives and dies
    with its node, as in a WeakKeyDictionary, without a weak reference and its callback per labelled node (the
    frontend labels nearly every node it builds)."""

    __slots__ = ()

    @overload
    def get(self, node: UOp) -> tuple[Metadata, ...] | None: ...
    @overload
    def get(self, node: UOp, default: _Default) -> tuple[Metadata, ...] | _Default: ...
    def get(self, node: UOp, default: Any = None) -> Any:
        return node.__dict__.get(LABELS, default)

    def __contains__(self, node: UOp) -> bool:
        return LABELS in node.__dict__

    def __getitem__(self, node: UOp) -> tuple[Metadata, ...]:
        if (labels := node.__dict__.get(LABELS)) is None:
            raise KeyError(node)
        return labels  # type: ignore[no-any-return]  # only __setitem__ writes the entry

    def __setitem__(self, node: UOp, labels: tuple[Metadata, ...]) -> None:
        node.__dict__[LABELS] = labels

    def __delitem__(self, node: UOp) -> None:
        if node.__dict__.pop(LABELS, None) is None:
            raise KeyError(node)


all_metadata = NodeLabels()
_unique_ids = itertools.count()


def _with_place(u: UOp, shape: tuple[int, ...], device: str | tuple[str, ...]) -> UOp:
    """`u` with the shape and device compute_shape and compute_device would give it, recorded now."""
    known = u.__dict__
    known.setdefault("_shape", shape)
    known.setdefault("_device", device)
    return u


def _placed_like(u: UOp, source: UOp) -> UOp:
    """`u` (a CAST or DETACH of `source`) with the shape and device `source` has recorded: compute_shape and
    compute_device would find them there (the frontend's hot path)."""
    known = source.__dict__
    if (shape := known.get("_shape")) is not None:
        u.__dict__.setdefault("_shape", shape)
    if (device := known.get("_device")) is not None:
        u.__dict__.setdefault("_device", device)
    return u


def _broadcast_constant(const: UOp, device: str | tuple[str, ...], shape: tuple[int, ...]) -> UOp:
    """Scalar `const` reshaped to ones, then expanded to int `shape`: always valid, so the nodes _mop would make are
    made without its checks, with the shapes and device it would record (the hot path of every `x * 2.0`)."""
    ones, dtype = (1,) * len(shape), const.dtype
    view = _with_place(UOp(Ops.RESHAPE, dtype, (_with_place(const, (), device),), ones), ones, device)
    return view if shape == ones else _with_place(UOp(Ops.EXPAND, dtype, (view,), shape), shape, device)


CONSTANTS_KEPT = 512  # constant tensors UOp.const_tensor keeps alive (emptied when full)
_PLAIN_CONSTANTS = (bool, int, float)  # the Python numbers it keeps constants of (not vector lanes or numpy scalars)
# its constants by (dtype id, value's type, value as the hash-consing key spells it, device, shape): the type keeps
# True, 1 and 1.0 apart. A kept constant keeps the label of the call that first made it, as a shared one does;
# kernel names already skip constants and their views (schedule/kernelize.py's _fused_metadata).
_kept_constants: dict[tuple[Any, ...], UOp] = {}


class UOp(MathTrait, metaclass=UOpMetaClass):
    """One node: `op`, result `dtype`, sources `src`, static `arg` and a free-form `tag`. Immutable; build new ones.

    Example: `(UOp.variable("a", 0, 10) + 1).render() == "(a+1)"`.
    """

    __slots__ = ("__dict__", "__weakref__", "_cache_key", "arg", "dtype", "op", "src", "tag")

    def __init__(
        self, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None, tag: Any = None
    ):
        # the fields and their types; nodes are made by UOpMetaClass._create, which sets them without this frame
        self.op, self.dtype, self.src, self.arg, self.tag = op, dtype, src, arg, tag
        self._cache_key: tuple[Any, ...] = ()

    def __del__(self) -> None:
        # drop the cache entry, unless a newer equal node already replaced it (then it goes back): one hash of the
        # key, not two (a key tuple's hash isn't cached, and every node dies once)
        try:
            cache = UOpMetaClass.ucache
            key = self._cache_key
            if (ref := cache.pop(key, None)) is not None and (live := ref()) is not None and live is not self:
                cache[key] = ref
        except (AttributeError, KeyError, TypeError):  # interpreter shutdown or a half-built node
            pass

    def __reduce__(self) -> tuple[Any, ...]:
        return UOp, (self.op, self.dtype, self.src, self.arg, self.tag)

    def replace(self, **kwargs: Any) -> UOp:
        """This node with some of op/dtype/src/arg/tag changed (the same node when nothing changes)."""
        new = (kwargs.pop("op", self.op), kwargs.pop("dtype", self.dtype), kwargs.pop("src", self.src),
               kwargs.pop("arg", self.arg), kwargs.pop("tag", self.tag))  # fmt: skip
        if kwargs:
            raise TypeError(f"replace: unknown fields {sorted(kwargs)}, expected op, dtype, src, arg or tag")
        if (
            new[0] is self.op
            and new[1] == self.dtype
            and new[2] == self.src
            and new[3] is self.arg
            and new[4] is self.tag
        ):
            return self
        return UOp(*new)

    def rtag(self, tag: Any = True) -> UOp:
        return self.replace(tag=tag)

    # *** graph walks (explicit stacks: graphs 100,000+ nodes deep are normal) ***

    def toposort(self, gate: Callable[[UOp], bool] | None = None) -> dict[UOp, None]:
        """Every node reachable from here, sources before users. `gate(node)` False prunes that node and below."""
        ret: dict[UOp, None] = {}
        stack: list[tuple[UOp, bool]] = [(self, False)]
        while stack:
            node, expanded = stack.pop()
            if node in ret:
                continue
            if expanded:
                ret[node] = None
            elif gate is None or gate(node):
                stack.append((node, True))
                stack.extend((s, False) for s in reversed(node.src) if s not in ret)
        return ret

    @property
    def backward_slice(self) -> dict[UOp, None]:
        """Every node this one depends on, excluding itself."""
        ret = self.toposort()
        del ret[self]
        return ret

    @property
    def backward_slice_with_self(self) -> dict[UOp, None]:
        return self.toposort()

    def _cached(self, attr: str, fn: Callable[[UOp], Any]) -> Any:
        """A per-node property computed bottom-up over the nodes that lack it, without recursion."""
        d = self.__dict__
        if attr in d:
            return d[attr]
        # post-order over the nodes that lack it (a node is computed once all its sources have it); usually one or
        # two levels deep, so a plain stack, not a toposort
        stack = [self]
        while stack:
            node = stack[-1]
            if attr in node.__dict__:
                stack.pop()
            elif pending := [s for s in node.src if attr not in s.__dict__]:
                stack.extend(pending)
            else:
                node.__dict__[attr] = fn(node)
                stack.pop()
        return d[attr]

    @property
    def key(self) -> bytes:
        """A content hash, stable across processes (unlike id or hash)."""
        return self._cached("_key", _content_key)  # type: ignore[no-any-return]

    @property
    def depth(self) -> int:
        """Length of the longest source chain below this node."""
        return self._cached("_depth", lambda u: 1 + max((s.__dict__["_depth"] for s in u.src), default=-1))  # type: ignore[no-any-return]

    def substitute(self, dvars: dict[UOp, UOp], name: str | None = None) -> UOp:
        """Replace nodes by others everywhere below this one, once: replacements are not searched again."""
        if not dvars:
            return self
        new: dict[UOp, UOp] = dict(dvars)
        for node in self.toposort(gate=lambda u: u not in dvars):
            srcs = tuple(new.get(s, s) for s in node.src)
            new[node] = node if srcs == node.src else node.replace(src=srcs)
        return new.get(self, dvars.get(self, self))

    # *** value bounds ***

    @property
    def _min_max(self) -> tuple[ConstType, ConstType]:
        return self._cached("_bounds", compute_bounds)  # type: ignore[no-any-return]

    @property
    def vmin(self) -> ConstType:
        """The smallest value this node can take."""
        return self._min_max[0]

    @property
    def vmax(self) -> ConstType:
        """The largest value this node can take."""
        return self._min_max[1]

    def simplify(self) -> UOp:
        """This graph rewritten by the symbolic rules (uop/symbolic.py) to a fixed point: `(x + 2) - 2` -> x."""
        from fusegrad.uop.symbolic import sym  # symbolic.py builds on this module

        return graph_rewrite(self, sym, name="simplify")

    def ssimplify(self) -> UOp | ConstType:
        """`simplify()`, but a result that folds to a constant is returned as that Python value:
        `(UOp.variable("n", 1, 8) * 0 + 3).ssimplify() == 3`."""
        ret = self.simplify()  # the rules fold a CAST of a constant, so a constant result is a CONST here
        return ret.arg if ret.op is Ops.CONST else ret

    # *** constructors ***

    @staticmethod
    def const(dtype: DType, b: ConstType | tuple[ConstType, ...] | UOp) -> UOp:
        """A constant of `dtype` (a VCONST for a tuple; a scalar broadcast for a vector dtype)."""
        if isinstance(b, UOp):
            return b.unbind()[0] if b.op is Ops.BIND else b
        if isinstance(b, tuple):
            if dtype.count != len(b):
                raise ValueError(f"const: {len(b)} values for vector dtype {dtype}, expected {dtype.count}")
            return UOp(Ops.VCONST, dtype, arg=tuple(dtypes.as_const(x, dtype.scalar()) for x in b))
        ret = UOp(Ops.CONST, dtype.scalar(), arg=dtypes.as_const(b, dtype.scalar()))
        return ret.broadcast(dtype.count) if dtype.count > 1 else ret

    def const_like(self, b: Any) -> UOp:
        if isinstance(b, float) and dtypes.is_int(self.dtype) and not b.is_integer():
            raise TypeError(f"const_like: float constant {b} cannot join an integer {self.dtype} expression")
        return UOp.const(self.dtype, b)

    @staticmethod
    def variable(name: str, min_val: ConstType, max_val: ConstType, dtype: DType = dtypes.index) -> UOp:
        """A named symbolic value in [min_val, max_val]."""
        if not isinstance(name, str):
            raise TypeError(f"variable: name must be a str, got {type(name).__name__}")
        if min_val > max_val:
            raise ValueError(f"variable: empty range for {name!r}: got min {min_val} > max {max_val}")
        return UOp(Ops.DEFINE_VAR, dtype, arg=(name, min_val, max_val))

    @property
    def expr(self) -> str:
        if self.op is not Ops.DEFINE_VAR:
            raise ValueError(f"expr: only DEFINE_VAR has a name, got {self.op}")
        return str(self.arg[0])

    def bind(self, val: int) -> UOp:
        """This variable with a value: `Variable("i", 1, 10).bind(3)`, usable as a size (`x[:i.bind(3)]`).
        Raises SymbolicError (an AssertionError and a ValueError) for a value outside the variable's range."""
        from fusegrad.uop.symbolic_shape import check_bind  # symbolic_shape builds on this module

        if self.op is not Ops.DEFINE_VAR:
            raise ValueError(f"bind: only a variable can be bound, got {self.op}")
        check_bind(self, val)
        return UOp(Ops.BIND, self.dtype, (self, self.const_like(val)))

    def unbind(self) -> tuple[UOp, int]:
        if self.op is not Ops.BIND or self.src[1].op is not Ops.CONST:
            raise ValueError(f"unbind: expected a BIND of a variable to a constant, got {self.op}")
        return self.src[0], int(self.src[1].arg)

    @staticmethod
    def range(end: sint, axis_id: int, axis_type: AxisType = AxisType.LOOP) -> UOp:
        """A loop variable 0 <= r < end."""
        return UOp(Ops.RANGE, dtypes.index, (sint_to_uop(end),), (axis_id, axis_type))

    @staticmethod
    def sink(*srcs: UOp, **kwargs: Any) -> UOp:
        return UOp(Ops.SINK, dtypes.void, tuple(srcs), **kwargs)

    @staticmethod
    def unique(num: int | None = None) -> UOp:
        return UOp(Ops.UNIQUE, arg=next(_unique_ids) if num is None else num)

    @staticmethod
    def new_buffer(device: str | tuple[str, ...], size: int, dtype: DType, num: int | None = None) -> UOp:
        """A BUFFER node for `size` elements of `dtype` on `device`; `.buffer` gives its (lazily created) Buffer."""
        return UOp(Ops.BUFFER, dtype, (UOp.unique(num), UOp(Ops.DEVICE, arg=device)), size)

    @property
    def buffer(self) -> Buffer:
        """The device Buffer behind a BUFFER node, created on first use."""
        known = self.__dict__
        if (ret := known.get(_BUFFER)) is not None:  # read before (a node's Buffer is set once and never changes)
            return ret  # type: ignore[no-any-return]  # only this property writes the entry
        if self.op in GroupOp.Movement and self.base.op is Ops.BUFFER:
            ret = self.base.buffer  # a view reads its base's memory
        elif self.op is not Ops.BUFFER:
            raise ValueError(f"buffer: only BUFFER nodes own a Buffer, got {self.op}")
        elif (ret := buffers.get(self)) is None:
            buffers[self] = ret = Buffer(self.src[1].arg, self.arg, self.dtype)
        # kept in the node too: the weak map's look-up makes a weak reference each time, and a replay reads ~150 a
        # training step; the node holds it no longer than the map does (while the node lives)
        known[_BUFFER] = ret
        return ret

    @property
    def metadata(self) -> tuple[Metadata, ...] | None:
        return all_metadata.get(self)

    # *** ALU ***

    def alu(self, op: Ops, *src: UOp) -> UOp:
        operands = (self, *src)
        if op in GroupOp.Binary and op not in (Ops.SHL, Ops.SHR) and len(operands) == 2:
            a, b = operands[0].dtype, operands[1].dtype
            if a is not b and a != b:
                raise TypeError(f"{op.name.lower()}: operand dtypes differ: got {a} and {b}, expected equal dtypes")
        out_dtype = operands[-1].dtype
        if op in GroupOp.Comparison:
            out_dtype = dtypes.bool.vec(out_dtype.count) if out_dtype.count > 1 else dtypes.bool
        ret = UOp(op, out_dtype, operands)
        # the frontend's hot path: operands of one known shape give it to the result, as compute_shape would
        # (which also checks they agree: left to it otherwise), and the first operand its device
        known = self.__dict__
        if (shape := known.get("_shape")) is None:
            return ret
        for s in src:  # a loop, not all(generator): one or two sources, on every node the frontend builds
            if s.__dict__.get("_shape") != shape:
                return ret
        made = ret.__dict__
        made.setdefault("_shape", shape)
        if (device := known.get("_device")) is not None:
            made.setdefault("_device", device)
        return ret

    def cast(self, dtype: DType) -> UOp:
        return self if self.dtype == dtype else _placed_like(UOp(Ops.CAST, dtype, (self,)), self)

    def bitcast(self, dtype: DType) -> UOp:
        return self if self.dtype == dtype else UOp(Ops.BITCAST, dtype, (self,))

    def neg(self) -> UOp:
        return self.logical_not() if self.dtype.scalar() == dtypes.bool else self * -1

    def broadcast(self, count: int) -> UOp:
        if self.dtype.count != 1:
            raise ValueError(f"broadcast: expected a scalar, got {self.dtype}")
        return self if count == 1 else UOp(Ops.VECTORIZE, self.dtype.vec(count), (self,) * count)

    def gep(self, i: int | tuple[int, ...]) -> UOp:
        idx = (i,) if isinstance(i, int) else i
        if self.dtype.count == 1 and idx == (0,):
            return self
        dt = self.dtype.scalar().vec(len(idx)) if len(idx) > 1 else self.dtype.scalar()
        return UOp(Ops.GEP, dt, (self,), idx)

    def index(self, *idx: UOp, **kwargs: Any) -> UOp:
        return UOp(Ops.INDEX, kwargs.pop("dtype", self.dtype), (self, *idx), **kwargs)

    def load(self, *src: UOp, **kwargs: Any) -> UOp:
        dt = kwargs.pop("dtype", self.dtype.base if isinstance(self.dtype, PtrDType) else self.dtype)
        return UOp(Ops.LOAD, dt, (self, *src), **kwargs)

    def store(self, *src: UOp, **kwargs: Any) -> UOp:
        return UOp(Ops.STORE, dtypes.void, (self, *src), **kwargs)

    def end(self, *ranges: UOp) -> UOp:
        return UOp(Ops.END, dtypes.void, (self, *ranges))

    def reduce(self, *src: UOp, arg: Ops) -> UOp:
        return UOp(Ops.REDUCE, self.dtype, (self, *src), arg)

    # *** tensor level: shape, device and the ops Tensor builds ***

    @property
    def shape(self) -> tuple[int, ...]:
        """The tensor shape (raises for kernel-level nodes, which have none)."""
        if (ret := self.__dict__.get("_shape")) is not None:  # computed before: the frontend asks this very often
            return ret  # type: ignore[no-any-return]
        if (ret := self._cached("_shape", compute_shape)) is None:
            raise ValueError(f"shape: {self.op} has no tensor shape")
        return ret  # type: ignore[no-any-return]

    @property
    def _shape(self) -> tuple[int, ...] | None:
        return self._cached("_shape", compute_shape)  # type: ignore[no-any-return]

    @property
    def device(self) -> str | tuple[str, ...]:
        if (ret := self.__dict__.get("_device")) is not None:
            return ret  # type: ignore[no-any-return]
        if (ret := self._cached("_device", compute_device)) is None:
            raise ValueError(f"device: {self.op} is on no device")
        return ret  # type: ignore[no-any-return]

    @property
    def axis(self) -> int | None:
        """The axis a multi-device tensor is sharded along; None when it is replicated, partial (a reduce over its
        shard axis not yet combined) or on one device. Read off the placement the scheduler gives it."""
        if not isinstance(self._cached("_device", compute_device), tuple):
            return None
        from fusegrad.schedule.multi import place_graph  # the scheduler imports this module: import on use

        _, new, placements = place_graph(UOp.sink(self))
        return placements[new[self]].axis

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def base(self) -> UOp:
        """Below any movement ops: the node whose memory a view reads."""
        node = self
        while node.op in GroupOp.Movement:
            node = node.src[0]
        return node

    @staticmethod
    def const_tensor(dtype: DType, b: ConstType, device: str | tuple[str, ...], shape: tuple[int, ...] = ()) -> UOp:
        """A constant tensor: a scalar CONST on `device`, reshaped and expanded to `shape`."""
        shape = shape if type(shape) is tuple else tuple(shape)
        kind = type(b)
        # a training step makes the same few dozen constants every step (1/n of a mean, eps, a scale): the last
        # CONSTANTS_KEPT made are kept alive, so each is one look-up here, not three nodes made and freed again
        key = (id(dtype), kind, _canonical_float(b)[1] if kind is float else b, device, shape)
        if (kept := _kept_constants.get(key)) is not None:
            return kept
        ret = UOp(Ops.CONST, dtype, (UOp(Ops.DEVICE, arg=device),), dtypes.as_const(b, dtype))
        if shape and not all(type(s) is int for s in shape):  # symbolic sizes: through the movement ops' checks
            return ret.reshape((1,) * len(shape)).expand(shape)
        if shape:
            ret = _broadcast_constant(ret, device, shape)
        if kind in _PLAIN_CONSTANTS:
            if len(_kept_constants) >= CONSTANTS_KEPT:
                _kept_constants.clear()
            _kept_constants[key] = ret
        return ret

    @staticmethod
    def iota(n: int, device: str | tuple[str, ...]) -> UOp:
        """The int32 tensor 0, 1, ..., n-1 on `device` (a kernel computes it from its loop index)."""
        return UOp(Ops.IOTA, dtypes.int32, (UOp(Ops.DEVICE, arg=device),), n)

    def _mop(self, op: Ops, arg: Any) -> UOp:
        shape = self.shape
        if shape == (new_shape := movement_shape(op, shape, arg)) and op is not Ops.FLIP and op is not Ops.PERMUTE:
            return self
        if op is Ops.PERMUTE and tuple(arg) == tuple(range(len(arg))):
            return self
        if op is Ops.FLIP and not any(arg):
            return self
        return self._view_node(op, tuple(arg), new_shape)

    def checked_view(self, op: Ops, shape: tuple[int, ...]) -> UOp:
        """RESHAPE or EXPAND to int `shape`, which the caller has checked fits (broadcasting's hot path): the node
        `_mop` makes, with its shape and device, without working the shape out and checking it again."""
        return self if self.shape == shape else self._view_node(op, shape, shape)

    def _view_node(self, op: Ops, arg: Any, shape: tuple[sint, ...]) -> UOp:
        """A node of this one alone (a view, a reduce over axes), with the shape compute_shape would work out again
        (frontend hot path) and, where this node's is known, its device (such a node is on its source's device)."""
        ret = UOp(op, self.dtype, (self,), arg)
        ret.__dict__.setdefault("_shape", shape)
        if (device := self.__dict__.get("_device")) is not None:
            ret.__dict__.setdefault("_device", device)
        return ret

    def reshape(self, shape: tuple[int, ...]) -> UOp:
        return self._mop(Ops.RESHAPE, shape)

    def permute(self, order: tuple[int, ...]) -> UOp:
        return self._mop(Ops.PERMUTE, order)

    def expand(self, shape: tuple[int, ...]) -> UOp:
        return self._mop(Ops.EXPAND, shape)

    def pad(self, padding: tuple[tuple[int, int], ...]) -> UOp:
        return self._mop(Ops.PAD, padding)

    def shrink(self, bounds: tuple[tuple[int, int], ...]) -> UOp:
        return self._mop(Ops.SHRINK, bounds)

    def flip(self, flags: tuple[bool, ...]) -> UOp:
        return self._mop(Ops.FLIP, flags)

    def r(self, op: Ops, axes: tuple[int, ...]) -> UOp:
        """Reduce `axes` with `op` (ADD, MUL, MAX), keeping them as size-1 axes."""
        shape = self.shape
        axes = tuple(sorted({a for a in axes if shape[a] != 1}))  # reducing a size-1 axis changes nothing
        if not axes:
            return self
        return self._view_node(Ops.REDUCE_AXIS, (op, axes), tuple(1 if i in axes else s for i, s in enumerate(shape)))

    def contiguous(self) -> UOp:
        return UOp(Ops.CONTIGUOUS, self.dtype, (self,))

    def copy_to_device(self, device: str | tuple[str, ...]) -> UOp:
        return UOp(Ops.COPY, self.dtype, (self, UOp(Ops.DEVICE, arg=device)))

    def assign(self, x: UOp) -> UOp:
        return UOp(Ops.ASSIGN, self.dtype, (self, x))

    def detach(self) -> UOp:
        return _placed_like(UOp(Ops.DETACH, self.dtype, (self,)), self)

    # *** evaluation of constant-valued nodes ***

    def _const_value(self) -> ConstType:
        lo, hi = self._min_max
        if lo != hi:
            raise ValueError(f"{self.op}: not a constant (value in {lo}..{hi}); use resolve() for a best guess")
        return lo

    def __int__(self) -> int:
        return int(self._const_value())

    def __float__(self) -> float:
        return float(self._const_value())

    def __index__(self) -> int:
        return int(self._const_value())

    # *** printing ***

    def render(self, simplify: bool = True) -> str:
        """An index expression as text, e.g. `(a+1)`; simplified with `sym` first unless told not to."""
        node = self
        if simplify:
            from fusegrad.helpers import Context
            from fusegrad.uop.symbolic import sym  # symbolic builds on this module

            with Context(TRACK_MATCH_STATS=0):
                node = graph_rewrite(self, sym, name="render simplify")
        return render_expr(node)

    def __repr__(self) -> str:
        return render_tree(self)

    def __str__(self) -> str:
        return render_tree(self)


# *** symbolic ints: plain ints or index-typed UOps ***

sint = int | UOp


def sint_to_uop(x: sint, dtype: DType = dtypes.index) -> UOp:
    return UOp.const(dtype, x) if isinstance(x, int) else x


def resolve(x: UOp | bool | int, default: bool = True) -> bool:
    """The truth of `x` when its bounds decide it, else `default`."""
    if not isinstance(x, UOp):
        return bool(x)
    if x.dtype.scalar() != dtypes.bool:
        raise TypeError(f"resolve: expected a bool expression, got {x.dtype}")
    lo, hi = x._min_max
    return bool(lo) if lo == hi else default


def _flat_sints(lst: tuple[Any, ...]) -> tuple[sint, ...]:
    return tuple(lst[0]) if len(lst) == 1 and isinstance(lst[0], (tuple, list)) else lst


def smax(*lst: Any) -> sint:
    """max over ints and symbolic ints."""
    items = _flat_sints(lst)
    if all(isinstance(x, int) for x in items):
        return max(items)  # type: ignore[type-var]  # all ints here
    return functools.reduce(lambda a, b: sint_to_uop(a).maximum(b), items)


def smin(*lst: Any) -> sint:
    """min over ints and symbolic ints."""
    items = _flat_sints(lst)
    if all(isinstance(x, int) for x in items):
        return min(items)  # type: ignore[type-var]  # all ints here
    return functools.reduce(lambda a, b: sint_to_uop(a).minimum(b), items)


def ssimplify(x: sint) -> sint:
    """Simplify a symbolic int; a node that folds to a constant becomes a Python int."""
    if isinstance(x, int):
        return x
    from fusegrad.uop.symbolic import sym

    ret = graph_rewrite(x, sym, name="ssimplify")
    return int(ret.arg) if ret.op is Ops.CONST else ret


def sym_infer(x: sint, var_vals: dict[str, int]) -> int:
    """The value of a symbolic int once every variable has a value."""
    if isinstance(x, int):
        return x
    values: dict[UOp, Any] = {}
    for node in x.toposort():
        if node.op is Ops.DEFINE_VAR:
            if node.arg[0] not in var_vals:
                raise KeyError(f"sym_infer: no value for variable {node.arg[0]!r}, have {sorted(var_vals)}")
            values[node] = var_vals[node.arg[0]]
        elif node.op is Ops.CONST:
            values[node] = node.arg
        elif node.op is Ops.BIND:
            values[node] = values[node.src[1]]
        elif node.op is Ops.CAST:
            values[node] = values[node.src[0]]
        else:
            values[node] = exec_alu(node.op, node.dtype, tuple(values[s] for s in node.src))
    return int(values[x])


def _content_key(u: UOp) -> bytes:
    import hashlib  # not at import: it loads OpenSSL (~8 ms of `import fusegrad`)

    h = hashlib.sha256(f"{u.op.name}|{u.dtype!r}|{_arg_text(u.arg)}|{u.tag!r}|".encode())
    for s in u.src:
        h.update(s.__dict__["_key"])
    return h.digest()


def _arg_text(arg: Any) -> str:
    """An arg's text for the content key: its repr, except that a dataclass is spelled field by field (several
    print a short form for DEBUG and VIZ, e.g. `<MultiCopy 2 moves>`, which two different args share) and a node by
    its key."""
    if isinstance(arg, tuple):
        return "(" + ",".join(map(_arg_text, arg)) + ")"
    if isinstance(arg, UOp):
        return arg.key.hex()
    if dataclasses.is_dataclass(arg) and not isinstance(arg, type):
        return (
            f"{type(arg).__qualname__}("
            + ",".join(_arg_text(getattr(arg, f.name)) for f in dataclasses.fields(arg))
            + ")"
        )
    return repr(arg)


def _substitute_node(ctx: dict[UOp, UOp], x: UOp) -> UOp | None:
    return ctx.get(x)


# substitution to a fixed point (replacements are searched again): how VIZ replays a step's matches
pm_substitute_fixed_point = PatternMatcher([(UPat(GroupOp.All, name="x"), _substitute_node)])
