"""Patterns over UOp graphs: `UPat` describes a node shape, `PatternMatcher` maps shapes to rewrites.

A rule is `(UPat, callback)`; the callback receives the named captures (and `ctx` if it asks for it) and returns a
replacement node or None. `PatternMatcher.rewrite(uop)` tries the rules indexed under `uop.op`, in order.
"""

from __future__ import annotations

import inspect
import itertools
import linecache
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fusegrad.dtype import DType, dtypes
from fusegrad.uop import GroupOp, Ops
from fusegrad.uop.mathtraits import MathTrait

if TYPE_CHECKING:
    from fusegrad.uop.ops import UOp

_THIS_DIR = os.path.dirname(__file__)
_PATTERN_FILES = {os.path.join(_THIS_DIR, f) for f in ("upat.py", "mathtraits.py")}


def _caller_location() -> tuple[str, int]:
    """The first frame outside the pattern-building modules: where a rule was written."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename in _PATTERN_FILES:
        frame = frame.f_back
    return frame.f_code.co_filename, frame.f_lineno


def _as_op_tuple(op: Ops | Iterable[Ops] | None) -> tuple[Ops, ...] | None:
    if op is None:
        return None
    ops = (op,) if isinstance(op, Ops) else tuple(op)
    if not ops or not all(isinstance(o, Ops) for o in ops):
        raise TypeError(f"UPat: op must be an Ops or a collection of Ops, got {op!r}")
    return ops


def _as_dtype_tuple(dtype: DType | Iterable[DType] | None) -> tuple[DType, ...] | None:
    if dtype is None:
        return None
    dts = (dtype,) if isinstance(dtype, DType) else tuple(dtype)
    if not all(isinstance(d, DType) for d in dts):
        raise TypeError(f"UPat: dtype must be a DType or a collection of DTypes, got {dtype!r}")
    return dts


class UPat(MathTrait):
    """A pattern over a UOp: op(s), dtype(s), arg, a capture name and source patterns.

    `src` as a tuple matches the sources in order; as a list, in any order (for commutative ops); as a single UPat,
    every source must match it. `allow_any_len` lets a tuple match a prefix of the sources.
    Example: `UPat(Ops.ADD, src=[UPat.var("x"), UPat.cvar("c")])` matches `x+3` and `3+x`.
    """

    __slots__ = ("_src_kind", "allow_any_len", "arg", "dtype", "early_reject", "location", "name", "op", "src")

    def __init__(
        self,
        op: Ops | Iterable[Ops] | None = None,
        dtype: DType | Iterable[DType] | None = None,
        src: UPat | tuple[UPat, ...] | list[UPat] | None = None,
        arg: Any = None,
        name: str | None = None,
        allow_any_len: bool = False,
        custom_early_reject: set[Ops] | None = None,
        location: tuple[str, int] | None = None,
    ) -> None:
        self.op = _as_op_tuple(op)
        self.dtype = _as_dtype_tuple(dtype)
        if name is not None and not isinstance(name, str):
            raise TypeError(f"UPat: name must be a str, got {type(name).__name__}")
        self.arg, self.name, self.allow_any_len = arg, name, allow_any_len
        self.location = location if location is not None else _caller_location()
        # _src_kind: "any" (no src constraint), "tuple" (in order), "perm" (any order) or "repeat" (all sources)
        self.src: tuple[UPat, ...] | None
        if src is None:
            self._src_kind, self.src = "any", None
        elif isinstance(src, UPat):
            self._src_kind, self.src = "repeat", (src,)
        elif isinstance(src, (tuple, list)):
            if not all(isinstance(s, UPat) for s in src):
                raise TypeError(f"UPat: every src must be a UPat, got {[type(s).__name__ for s in src]}")
            self._src_kind, self.src = ("perm" if isinstance(src, list) and len(src) > 1 else "tuple"), tuple(src)
        else:
            raise TypeError(f"UPat: src must be a UPat, a tuple or a list of UPats, got {type(src).__name__}")
        # ops that must appear among a matching node's direct sources: lets PatternMatcher skip rules cheaply
        if custom_early_reject is not None:
            self.early_reject = frozenset(custom_early_reject)
        elif self._src_kind in ("tuple", "perm") and self.src is not None:
            self.early_reject = frozenset(s.op[0] for s in self.src if s.op is not None and len(s.op) == 1)
        else:
            self.early_reject = frozenset()

    # constructors
    @staticmethod
    def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        """Any node, captured as `name`."""
        return UPat(dtype=dtype, name=name, location=_caller_location())

    @staticmethod
    def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None, vec: bool = True) -> UPat:
        """A constant (or a vector constant when `vec`), captured as `name`."""
        return UPat((Ops.CONST, Ops.VCONST) if vec else Ops.CONST, dtype, name=name, location=_caller_location())

    @staticmethod
    def const(dtype: DType | Iterable[DType] | None, b: Any) -> UPat:
        """A constant with value `b` (compared with ==, so 1 matches 1.0 and True)."""
        return UPat(Ops.CONST, dtype=dtype, arg=b, location=_caller_location())

    @staticmethod
    def any(*pats: UPat) -> UPat:
        """Matches when any of `pats` matches (tried in order)."""
        return _UPatAny(pats)

    def named(self, name: str) -> UPat:
        return self._with(name=name)

    def _with(self, **kwargs: Any) -> UPat:
        fields: dict[str, Any] = {"op": self.op, "dtype": self.dtype, "arg": self.arg, "name": self.name,
                                  "allow_any_len": self.allow_any_len, "location": self.location}  # fmt: skip
        src: Any = None
        if self.src is not None:
            src = {"repeat": lambda s: s[0], "perm": list, "tuple": tuple}[self._src_kind](self.src)
        return UPat(src=kwargs.pop("src", src), **(fields | kwargs))

    # MathTrait: operators build patterns; commutative ops match either source order
    def alu(self, op: Ops, *src: UPat) -> UPat:
        srcs = (self, *src)
        return UPat(op, src=list(srcs) if op in GroupOp.Commutative else srcs, location=_caller_location())

    def const_like(self, b: Any) -> UPat:
        return UPat.const(self.dtype, b)

    def cast(self, dtype: DType | None = None, name: str | None = None) -> UPat:
        return UPat(Ops.CAST, dtype, (self,), name=name, location=_caller_location())

    def bitcast(self, dtype: DType | None = None) -> UPat:
        return UPat(Ops.BITCAST, dtype, (self,), location=_caller_location())

    def or_casted(self, name: str | None = None) -> UPat:
        """This pattern, or a CAST of it."""
        return UPat.any(self if name is None else self.named(name), UPat(Ops.CAST, name=name, src=(self,)))

    def gep(self, i: int | None = None, name: str | None = None) -> UPat:
        return UPat(Ops.GEP, None, (self,), (i,) if i is not None else None, name=name, location=_caller_location())

    def reduce(self, *src: UPat, **kwargs: Any) -> UPat:
        return UPat(Ops.REDUCE, self.dtype, src=(self, *src), location=_caller_location(), **kwargs)

    def index(self, idx: UPat, *valid: UPat) -> UPat:
        return UPat(Ops.INDEX, self.dtype, (self, idx, *valid), location=_caller_location())

    def load(self, *src: UPat, **kwargs: Any) -> UPat:
        return UPat(Ops.LOAD, src=(self, *src), location=_caller_location(), **kwargs)

    def store(self, *src: UPat, **kwargs: Any) -> UPat:
        return UPat(Ops.STORE, dtypes.void, (self, *src), location=_caller_location(), **kwargs)

    def sink(self, *srcs: UPat, **kwargs: Any) -> UPat:
        return UPat(Ops.SINK, dtypes.void, (self, *srcs), location=_caller_location(), **kwargs)

    # matching
    def match(self, uop: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
        """Every way `uop` matches, as capture dicts extending `store` (empty when it doesn't match)."""
        if (
            (self.op is not None and uop.op not in self.op)
            or (self.name is not None and store.setdefault(self.name, uop) is not uop)
            or (self.dtype is not None and uop.dtype not in self.dtype and uop.dtype.scalar() not in self.dtype)
            or (self.arg is not None and self.arg != uop.arg)
        ):
            return []
        if self.src is None:
            return [store]
        n = len(uop.src)
        if self._src_kind == "repeat":
            return _match_sources(zip(uop.src, itertools.repeat(self.src[0], n), strict=True), store)
        if n != len(self.src) and not (self.allow_any_len and n >= len(self.src)):
            return []
        if self._src_kind == "tuple":
            return _match_sources(zip(uop.src, self.src, strict=False), store)  # allow_any_len: a prefix
        ret: list[dict[str, UOp]] = []
        for perm in itertools.permutations(self.src):
            ret.extend(_match_sources(zip(uop.src, perm, strict=True), dict(store)))
        return ret

    def printable(self) -> str:
        """The source line this pattern was written on."""
        return linecache.getline(*self.location).strip() or "<no source>"

    def __repr__(self) -> str:
        parts = (
            [] if self.op is None else [f"({', '.join(map(repr, self.op))})" if len(self.op) > 1 else repr(self.op[0])]
        )
        if self.dtype is not None:
            parts.append(f"dtype={self.dtype if len(self.dtype) > 1 else self.dtype[0]}")
        if self.arg is not None:
            parts.append(f"arg={self.arg!r}")
        if self.name is not None:
            parts.append(f"name={self.name!r}")
        if self.src is not None:
            parts.append(f"src={self._src_repr()}")
        return f"UPat({', '.join(parts)})"

    def _src_repr(self) -> str:
        assert self.src is not None, "only called for patterns with sources"
        inner = ", ".join(map(repr, self.src))
        return {"repeat": inner, "perm": f"[{inner}]", "tuple": f"({inner}{',' if len(self.src) == 1 else ''})"}[
            self._src_kind
        ]


def _match_sources(pairs: Iterable[tuple[UOp, UPat]], store: dict[str, UOp]) -> list[dict[str, UOp]]:
    stores = [store]
    for uop, pat in pairs:
        stores = [m for s in stores for m in pat.match(uop, s)]
        if not stores:
            return []
    return stores


class _UPatAny(UPat):
    """Alternatives: the union of every alternative's matches."""

    __slots__ = ("alternatives",)

    def __init__(self, alternatives: Sequence[UPat]) -> None:
        super().__init__(location=_caller_location())
        if not alternatives or not all(isinstance(p, UPat) for p in alternatives):
            raise TypeError(f"UPat.any: needs one or more UPats, got {alternatives!r}")
        self.alternatives = tuple(alternatives)
        if all(p.op is not None for p in alternatives):
            self.op = tuple(dict.fromkeys(o for p in alternatives for o in (p.op or ())))

    def match(self, uop: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
        return [m for p in self.alternatives for m in p.match(uop, dict(store))]

    def __repr__(self) -> str:
        return f"UPat.any({', '.join(map(repr, self.alternatives))})"


RewriteFn = Callable[..., "UOp | None"]


@dataclass(frozen=True, slots=True)
class Rule:
    """One compiled rule: the pattern, its callback and what the matcher needs to call it fast."""

    pattern: UPat
    fn: RewriteFn
    early_reject: frozenset[Ops]
    wants_ctx: bool


_WANTS_CTX: dict[RewriteFn, bool] = {}  # inspect.signature is slow, and tables are composed (`+`) many times


def _wants_ctx(fn: RewriteFn) -> bool:
    if (cached := _WANTS_CTX.get(fn)) is not None:
        return cached
    try:
        ret = "ctx" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        ret = False
    _WANTS_CTX[fn] = ret
    return ret


class PatternMatcher:
    """An ordered rule table, indexed by op. Tables compose with `+`; the first rule returning a new node wins.

    Example: `PatternMatcher([(UPat.var("x") + 0, lambda x: x)]).rewrite(a + 0) is a`.
    """

    def __init__(self, patterns: Sequence[tuple[UPat, RewriteFn]]) -> None:
        self.patterns: list[tuple[UPat, RewriteFn]] = list(patterns)
        self.pdict: dict[Ops, list[Rule]] = {}
        for i, rule in enumerate(self.patterns):
            if not (isinstance(rule, tuple) and len(rule) == 2 and isinstance(rule[0], UPat) and callable(rule[1])):
                raise TypeError(f"PatternMatcher: rule {i} must be a (UPat, callable) pair, got {rule!r}")
            pat, fn = rule
            if pat.op is None:
                raise ValueError(f"PatternMatcher: rule {i} ({pat!r}) must name the op(s) it matches at the top")
            compiled = Rule(pat, fn, pat.early_reject, _wants_ctx(fn))
            for op in pat.op:
                self.pdict.setdefault(op, []).append(compiled)

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return type(self)(self.patterns + other.patterns)

    def __len__(self) -> int:
        return len(self.patterns)

    def rewrite(self, uop: UOp, ctx: Any = None) -> UOp | None:
        """The first rule result for `uop` that differs from it, or None."""
        rules = self.pdict.get(uop.op)
        if rules is None:
            return None
        src_ops: set[Ops] | None = None
        for rule in rules:
            if rule.early_reject:
                if src_ops is None:
                    src_ops = {s.op for s in uop.src}
                if not rule.early_reject <= src_ops:
                    continue
            for captures in rule.pattern.match(uop, {}):
                ret = rule.fn(ctx=ctx, **captures) if rule.wants_ctx else rule.fn(**captures)
                if ret is not None and ret is not uop:
                    return ret
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} with {len(self.patterns)} rules>"
