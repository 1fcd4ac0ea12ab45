"""Text forms of a UOp graph: `render_expr` for index expressions (`(a+1)`) and `render_tree` for `repr`.

Both walk the graph in topological order with no recursion, so 100,000-deep chains print.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusegrad.dtype import dtypes
from fusegrad.uop import Ops

if TYPE_CHECKING:
    from fusegrad.uop.ops import UOp

_INFIX = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!=",
          Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>",
          Ops.FDIV: "/"}  # fmt: skip
_CALL = {Ops.MAX: "max", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt",
         Ops.RECIPROCAL: "1/", Ops.TRUNC: "trunc", Ops.POW: "pow"}  # fmt: skip


def _render_node(u: UOp, s: list[str]) -> str:  # noqa: C901  # one case per op: a dispatch table
    match u.op:
        case Ops.CONST:
            return str(u.arg) if u.dtype != dtypes.bool else str(bool(u.arg))
        case Ops.VCONST:
            return "(" + ",".join(map(str, u.arg)) + ")"
        case Ops.DEFINE_VAR:
            return str(u.arg[0])
        case Ops.RANGE:
            return f"r{u.arg[0]}" if isinstance(u.arg, tuple) else f"r{u.arg}"
        case Ops.SPECIAL:
            return str(u.arg)
        case Ops.BIND:
            return s[0]
        case Ops.CAST:
            return f"({u.dtype.name})({s[0]})" if u.dtype != dtypes.index else s[0]
        case Ops.NEG:
            return f"(-{s[0]})"
        case Ops.WHERE:
            return f"({s[0]} ? {s[1]} : {s[2]})"
        case Ops.MULACC:
            return f"(({s[0]}*{s[1]})+{s[2]})"
    if u.op in _INFIX and len(s) == 2:
        return f"({s[0]}{_INFIX[u.op]}{s[1]})"
    if u.op in _CALL:
        return f"{_CALL[u.op]}({', '.join(s)})"
    return f"{u.op.name}({', '.join(s)})"


_MARK = "\x00"  # brackets a source's position inside a node's template


def _template(u: UOp) -> list[str]:
    """The node's text with its sources left as holes: literal, source index, literal, ... (odd items are holes)."""
    return _render_node(u, [f"{_MARK}{i}{_MARK}" for i in range(len(u.src))]).split(_MARK)


def render_expr(root: UOp) -> str:
    """`root` as a C-like expression, e.g. `((a*4)+b)`. Linear in the output size, with no recursion."""
    templates: dict[UOp, list[str]] = {}
    out: list[str] = []
    stack: list[UOp | str] = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
            continue
        if (parts := templates.get(item)) is None:
            parts = templates[item] = _template(item)
        for k in range(len(parts) - 1, -1, -1):
            stack.append(parts[k] if k % 2 == 0 else item.src[int(parts[k])])
    return "".join(out)


def _node_head(u: UOp) -> str:
    parts = [repr(u.op), repr(u.dtype)]
    if u.arg is not None:
        parts.append(f"arg={u.arg!r}")
    if u.tag is not None:
        parts.append(f"tag={u.tag!r}")
    return ", ".join(parts)


# past this many nodes a nested tree would be unreadable (and quadratic in depth), so list the nodes instead
_NESTED_LIMIT = 200


def render_tree(root: UOp) -> str:
    """A readable `UOp(...)` form; shared nodes are named once (`x3:=UOp(...)`) and referred to by name later."""
    order = list(root.toposort())
    if len(order) > _NESTED_LIMIT:
        names = {u: f"x{i}" for i, u in enumerate(order)}
        lines = [f"{names[u]} = UOp({_node_head(u)}, src=({', '.join(names[s] for s in u.src)}))" for u in order]
        return "\n".join(lines)
    users: dict[UOp, int] = {}
    for u in order:
        for s in u.src:
            users[s] = users.get(s, 0) + 1
    shared = {u: f"x{i}" for i, u in enumerate(order) if users.get(u, 0) > 1}
    written: set[UOp] = set()  # shared nodes already written out in full: later users refer to them by name
    text: dict[UOp, str] = {}
    for u in order:
        src: list[str] = []
        for s in u.src:
            src.append(shared[s] if s in written else _indent(text[s]))
            if s in shared:
                written.add(s)
        body = f"UOp({_node_head(u)}, src=(" + "".join(f"\n  {x}," for x in src) + ("))" if not src else "\n))")
        text[u] = f"{shared[u]}:={body}" if u in shared else body
    return text[root]


def _indent(s: str) -> str:
    return s.replace("\n", "\n  ")
