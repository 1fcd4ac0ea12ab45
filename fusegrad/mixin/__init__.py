"""Families of Tensor methods, one module each; `Tensor` inherits them all (see fusegrad/tensor.py).

Methods here are written against the core Tensor (`self: Tensor`): they build on its primitives (elementwise ops,
reductions, movement ops) and never touch UOps directly unless a new primitive is needed. `traced` labels the nodes a
public method builds with its name, so kernels and VIZ show `softmax`, not the `exp` and `sum` inside it, and puts
that name in front of the errors its inner ops raise.
"""

from __future__ import annotations

import contextvars
import functools
import sys
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any, TypeVar

from fusegrad.errors import INPUT_ERRORS
from fusegrad.helpers import _METADATA, TRACEMETA, Metadata

F = TypeVar("F", bound=Callable[..., Any])

# the user-facing op being run: set by the outermost traced call, so nested ones leave labels and errors alone
_OUTER_OP: contextvars.ContextVar[str | None] = contextvars.ContextVar("_OUTER_OP", default=None)
# methods whose messages name the op differently from the method (Tensor.dot's say "matmul: ...")
_ERROR_NAMES = {"dot": "matmul"}


# Metadata by (method, code object's id, instruction offset): one object per call site, not one per call (a frozen
# dataclass costs ~1 µs to build, and every op of a training step builds one). The key holds the code's id, not the
# code (a code object hashes its contents, ~1 µs), and the entry holds the code, so no other code object takes that id
# while it is here; the offset is a plain attribute, where the line number is worked out from a table. Bounded:
# cleared when it grows past _METADATA_SITES entries.
_call_sites: dict[tuple[str, int, int], tuple[CodeType, Metadata]] = {}
_METADATA_SITES = 4096

# mixin/recipes.py's `call` once tensor.py installed it: the outermost traced call goes through it (op recipes)
_reuse: Callable[[Callable[..., Any], Metadata | None, tuple[Any, ...], dict[str, Any]], Any] | None = None


def call_metadata(name: str, frame: FrameType) -> Metadata:
    """The Metadata of Tensor method `name` called from `frame`'s current line."""
    code = frame.f_code
    key = (name, id(code), frame.f_lasti)
    if (site := _call_sites.get(key)) is None or site[0] is not code:
        if len(_call_sites) >= _METADATA_SITES:
            _call_sites.clear()
        site = _call_sites[key] = (code, Metadata(name, f"{code.co_filename}:{frame.f_lineno}"))
    return site[1]


def traced(fn: F) -> F:
    """Records which Tensor method (and which user line) created a node, for kernel names and VIZ labels, and names
    that method in the errors raised inside it: `x.lerp(y, w)` with mismatched shapes raises "lerp: sub: cannot
    broadcast shapes ...", not just "sub: ...".

    The outermost traced call wins: inside `cross_entropy`, the `log_softmax` and `sum` it calls add no labels of their
    own. With TRACEMETA=0 no labels are recorded (errors are still named). Example: `@traced def gelu(self, ...)`.
    """
    op = _ERROR_NAMES.get(fn.__name__, fn.__name__.strip("_"))  # __setitem__ -> setitem, as its messages spell it

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _OUTER_OP.get() is not None or _METADATA.get() is not None:  # inside another traced method
            return fn(*args, **kwargs)
        meta = call_metadata(fn.__name__, sys._getframe(1)) if TRACEMETA.value else None  # the user's line
        op_token, meta_token = _OUTER_OP.set(op), _METADATA.set(meta)
        try:
            if (reuse := _reuse) is not None:
                return reuse(fn, meta, args, kwargs)
            return fn(*args, **kwargs)
        except INPUT_ERRORS as e:  # input errors: re-raised with the user-facing op in front, as the same type
            if type(e) not in INPUT_ERRORS or str(e).startswith(f"{op}:"):
                raise
            raise type(e)(f"{op}: {e}") from e
        finally:
            _METADATA.reset(meta_token)
            _OUTER_OP.reset(op_token)

    return wrapper  # type: ignore[return-value]  # same signature as fn (functools.wraps keeps it for inspect)
