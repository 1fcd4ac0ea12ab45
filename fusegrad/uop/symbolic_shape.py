"""Symbolic sizes: a tensor axis whose length is a bound variable, so one kernel serves a range of sizes.

At the Tensor level a size may be `Variable("i", 1, 10).bind(5)` (a BIND of a DEFINE_VAR to a value) or an index
expression of such BINDs; movement ops keep them in their args. Shape checks use the bound values (`at_bound`).
kernelize strips the values (`unbind_graph`) so kernels hold only DEFINE_VARs (the same AST, hence one compile, for
every value); the values travel with each kernel (`Kernel.var_vals` -> `ExecItem.fixedvars`) to the runner, which
passes them as kernel arguments. Results are views whose sizes are bound again (`rebind`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeGuard

from fusegrad.errors import SymbolicError as SymbolicError  # its home before errors.py
from fusegrad.uop import GroupOp, Ops

if TYPE_CHECKING:
    from fusegrad.dtype import DType
    from fusegrad.uop.ops import UOp, sint


def _is_uop(x: object) -> bool:
    from fusegrad.uop.ops import UOp

    return isinstance(x, UOp)


def is_symbolic(shape: tuple[Any, ...]) -> bool:
    """Whether any size in `shape` is a UOp (a bound or unbound variable expression)."""
    return any(_is_uop(s) for s in shape)


def bound_vars(x: UOp) -> dict[str, int]:
    """{name: value} of the BINDs in expression `x`."""
    return {u.src[0].expr: int(u.src[1].arg) for u in x.toposort() if u.op is Ops.BIND}


def at_bound(x: sint) -> int | None:
    """The value of size `x` at its variables' bound values; None when some variable is not bound."""
    if isinstance(x, int):
        return x
    from fusegrad.uop.ops import sym_infer

    try:
        return sym_infer(x, bound_vars(x))
    except KeyError:  # an unbound variable: a graph inside the scheduler, checked when it was built
        return None


def max_size(x: sint) -> int:
    """The largest value size `x` can take: what memory for it must hold."""
    return x if isinstance(x, int) else int(x.vmax)


def check_bind(var: UOp, val: int) -> None:
    """Raise SymbolicError unless `val` is in `var`'s range."""
    name, lo, hi = var.arg
    if not isinstance(val, int) or isinstance(val, bool):
        raise TypeError(f"bind: {name} takes an int value, got {type(val).__name__}")
    if not lo <= val <= hi:
        raise SymbolicError(f"bind: {val} is out of range for variable {name!r}: expected {lo}..{hi}")


def _strip(x: UOp) -> UOp:
    """Size expression `x` with each BIND replaced by its variable."""
    binds = {u: u.src[0] for u in x.toposort() if u.op is Ops.BIND}
    return x.substitute(binds) if binds else x


def _map_arg(arg: Any, fn: Any) -> Any:
    """`arg` (nested tuples of sizes) with `fn` applied to each UOp in it."""
    if isinstance(arg, tuple):
        return tuple(_map_arg(a, fn) for a in arg)
    return fn(arg) if _is_uop(arg) else arg


def _has_uop_arg(u: UOp) -> bool:
    """Whether movement op (or IOTA) `u` has a symbolic size in its arg. Runs on every node kernelize sees, so it
    tests types directly: movement args hold ints and bools, or (PAD, SHRINK) pairs of them; else it is a size UOp."""
    if u.op is Ops.IOTA:  # Tensor.arange of a symbolic length
        return type(u.arg) is not int
    if u.op not in GroupOp.Movement:
        return False
    for a in u.arg:
        if type(a) is tuple:
            if type(a[0]) is not int or type(a[1]) is not int:
                return True
        elif type(a) is not int and type(a) is not bool:
            return True
    return False


def _rebuild(sink: UOp, fn: Any) -> dict[UOp, UOp]:
    """old -> new for every node below `sink` whose sizes (movement args) or sources change under `fn` (sizes only).

    Rebuilt nodes keep their tensor metadata (kernel names, VIZ labels)."""
    from fusegrad.uop.ops import all_metadata

    new: dict[UOp, UOp] = {}
    for node in sink.toposort():
        if node.op is Ops.BIND:  # a size used as a value (`x / x.shape[0]`)
            if (value := fn(node)) is not node:
                new[node] = value
            continue
        srcs = tuple(new.get(s, s) for s in node.src)
        arg = _map_arg(node.arg, fn) if _has_uop_arg(node) else node.arg
        if srcs == node.src and arg is node.arg:
            continue
        new[node] = rebuilt = node.replace(src=srcs, arg=arg)
        if (meta := all_metadata.get(node)) is not None and rebuilt not in all_metadata:
            all_metadata[rebuilt] = meta
    return new


def unbind_graph(sink: UOp) -> tuple[dict[UOp, UOp], dict[str, int]]:
    """(old -> new map, {variable name: value}) stripping the bound values from every size below `sink`.

    Raises SymbolicError when one variable is bound to two values in the graph."""
    var_vals: dict[str, int] = {}

    def strip(x: UOp) -> UOp:
        for name, val in bound_vars(x).items():
            if var_vals.setdefault(name, val) != val:
                raise SymbolicError(f"schedule: variable {name!r} is bound to {var_vals[name]} and {val}")
        return _strip(x)

    if not any(_has_uop_arg(u) or u.op is Ops.BIND for u in sink.toposort()):
        return {}, {}
    return _rebuild(sink, strip), var_vals


def rebind(u: UOp, var_vals: dict[str, int]) -> UOp:
    """`u` with every DEFINE_VAR in its sizes bound to its value in `var_vals` (the inverse of `unbind_graph`)."""
    if not var_vals:
        return u

    def bind(x: UOp) -> UOp:
        nodes = x.toposort()
        if any(n.op is Ops.BIND for n in nodes):  # already bound (a size from before the schedule)
            return x
        found = {v: v.bind(var_vals[v.expr]) for v in nodes if v.op is Ops.DEFINE_VAR and v.expr in var_vals}
        return x.substitute(found) if found else x

    return _rebuild(u, bind).get(u, u)


def symbolic_selection(i: int | slice, size: sint, axis: int) -> tuple[tuple[sint, sint], bool, int]:
    """(shrink bounds, flip?, step) of index or slice `i` on an axis when its size or a slice bound is symbolic.

    Only what has one meaning for every value of the variables: non-negative ints and slices with step 1."""
    if isinstance(i, int):
        n = at_bound(size)
        if i < 0 or (n is not None and i >= n):
            raise IndexError(f"getitem: index {i} is out of bounds for axis {axis} of symbolic size {size_str(size)}")
        return (i, i + 1), False, 1
    if i.step not in (None, 1):
        raise ValueError(f"getitem: a slice with a symbolic size or bound takes step 1, got step {i.step}")
    start = 0 if i.start is None else i.start
    stop = size if i.stop is None else i.stop
    if any(isinstance(b, int) and b < 0 for b in (start, stop)):
        raise IndexError(f"getitem: negative bound in slice {i} on axis {axis} of symbolic size {size_str(size)}")
    return (start, stop), False, 1


def symbolic_reshape(old: tuple[sint, ...], new: tuple[sint, ...]) -> tuple[sint, ...]:
    """The sizes of a reshape from `old` to `new` where some are symbolic: one -1 is inferred (exact division), and
    the element counts must agree at the bound values. Raises ValueError otherwise."""
    from fusegrad.helpers import prod
    from fusegrad.uop.ops import ssimplify

    if sum(1 for s in new if isinstance(s, int) and s == -1) > 1:
        raise ValueError(f"reshape: only one axis can be -1, got {shape_str(new)}")
    if any(isinstance(s, int) and s < -1 for s in new):
        raise ValueError(f"reshape: negative size in {shape_str(new)}")
    numel, shape = prod(old), list(new)
    if (at := next((a for a, s in enumerate(new) if isinstance(s, int) and s == -1), None)) is not None:
        known = prod(s for a, s in enumerate(new) if a != at)
        if at_bound(known) == 0 or (at_bound(numel) or 0) % (at_bound(known) or 1):
            raise ValueError(f"reshape: cannot reshape {shape_str(old)} to {shape_str(new)}")
        shape[at] = ssimplify(numel // known)
    have, want = at_bound(numel), at_bound(prod(shape))
    if have is not None and want is not None and have != want:
        raise ValueError(
            f"reshape: cannot reshape {shape_str(old)} ({have} elements) to {shape_str(tuple(shape))} ({want} elements)"
        )
    return tuple(shape)


def rebind_map(becomes: dict[UOp, UOp], unbound: dict[UOp, UOp], var_vals: dict[str, int]) -> dict[UOp, UOp]:
    """kernelize's map (keyed by unbound nodes) keyed by the nodes tensors hold, with their sizes bound again."""
    if not unbound:
        return becomes
    original = {new: old for old, new in unbound.items()}
    return {original.get(k, k): rebind(v, var_vals) for k, v in becomes.items()}


def kernel_var_vals(ast: UOp, var_vals: dict[str, int]) -> tuple[tuple[str, int], ...]:
    """The (name, value) pairs of the variables kernel `ast` uses, sorted by name."""
    if not var_vals:
        return ()
    names = sorted({u.expr for u in ast.toposort() if u.op is Ops.DEFINE_VAR and u.expr in var_vals})
    return tuple((n, var_vals[n]) for n in names)


def size_tensor(x: UOp, dtype: DType, device: str | tuple[str, ...]) -> UOp:
    """A 0-d tensor node on `device` whose value is symbolic size `x` as `dtype` (a mean divides by one)."""
    from fusegrad.uop.ops import UOp

    return UOp.const_tensor(dtype, 0, device) + x.cast(dtype)  # the constant gives the node its device


def simplify_size(x: sint) -> sint:
    """A size with its algebra folded (`(i+1)-i` -> 1, `i+(10-i)` -> 10), so equal sizes are equal nodes or ints."""
    if isinstance(x, int):
        return x
    from fusegrad.uop.ops import ssimplify

    return ssimplify(x)


def size_str(x: sint) -> str:
    """A size for messages: an int, or a symbolic size's expression (`i`, `(i+2)`)."""
    return str(x) if isinstance(x, int) else x.render()


def shape_str(shape: tuple[sint, ...]) -> str:
    """A shape for messages: `(4, i)`, symbolic sizes rendered as their expressions."""
    return "(" + ", ".join(size_str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def check_concrete(shape: tuple[sint, ...], op: str) -> None:
    """Raise SymbolicError when `shape` has a symbolic size: `op` needs the data of every element."""
    if is_symbolic(shape):
        raise SymbolicError(f"{op}: no data for a tensor of symbolic shape {shape_str(shape)}: slice it to int sizes")


# *** TinyJit: a call's variables ***


def unbind_sizes(arg: Any) -> Any:
    """Sizes (an int, a UOp or nested tuples of them) with the bound values stripped: what stays the same across calls
    that bind a variable to different values (TinyJit compares inputs by it)."""
    return _map_arg(arg, _strip)


def is_bound_variable(x: object) -> TypeGuard[UOp]:
    """A bound variable passed as a value (`f(x, i.bind(3))`): a BIND of a DEFINE_VAR to a constant."""
    from fusegrad.uop.ops import UOp

    return isinstance(x, UOp) and x.op is Ops.BIND


def call_var_vals(values: list[object], views: list[UOp]) -> dict[str, int]:
    """{name: value} of the variables one call binds: bound variables among `values` (the arguments, one level into
    lists, tuples and dicts) and in the sizes of the input tensors' `views`. Raises SymbolicError for two values."""
    found: list[UOp] = []
    for v in values:
        items = [v]
        if isinstance(v, dict):
            items = list(v.values())
        elif isinstance(v, (list, tuple)):
            items = list(v)
        found += [x for x in items if is_bound_variable(x)]
    for u in views:
        node = u
        while node.op in GroupOp.Movement:
            found += _flat_uops(node.arg)
            node = node.src[0]
    var_vals: dict[str, int] = {}
    for x in found:
        for name, val in bound_vars(x).items():
            if var_vals.setdefault(name, val) != val:
                raise SymbolicError(f"TinyJit: variable {name!r} is bound to {var_vals[name]} and {val} in one call")
    return var_vals


def _flat_uops(arg: Any) -> list[UOp]:
    if isinstance(arg, tuple):
        return [u for a in arg for u in _flat_uops(a)]
    return [arg] if _is_uop(arg) else []


def with_values(u: UOp, var_vals: dict[str, int]) -> UOp:
    """Tensor node `u` with its variables bound to the values in `var_vals` instead (TinyJit refills its captured
    outputs: their sizes take each replay's values)."""
    unbound, _ = unbind_graph(u)
    return rebind(unbound.get(u, u), var_vals)
