"""Movement ops as index arithmetic: where a view reads its source, and whether that read is in bounds.

Every axis of a kernel's output is a RANGE; reading a node through a movement op turns the consumer's index tuple
into the source's (`source_index`). Padding adds a validity condition that travels with the index.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

from fusegrad.dtype import dtypes
from fusegrad.helpers import TRACK_MATCH_STATS, Context
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import sym

Index = tuple[UOp, ...]


def idx_const(x: int) -> UOp:
    if type(x) is int:  # the common case, without UOp.const's conversions (a scheduled kernel makes ~10 of these)
        return UOp(Ops.CONST, dtypes.index, arg=x)
    return UOp.const(dtypes.index, x)


def strides_for(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides of a contiguous tensor of `shape`."""
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return tuple(reversed(strides))


def linearize_index(idx: Index, shape: tuple[int, ...]) -> UOp:
    """The flat position of `idx` in a contiguous tensor of `shape` (size-1 axes contribute nothing)."""
    terms = [i * st for i, s, st in zip(idx, shape, strides_for(shape), strict=True) if s != 1]
    return functools.reduce(operator.add, terms) if terms else idx_const(0)


def simplify_index(idx: Index) -> Index:
    """Fold the div/mod a reshape introduces, so equal indices are the same nodes and unused ranges disappear."""
    if all(i.op in (Ops.RANGE, Ops.CONST) for i in idx):
        return idx
    return _simplify_index_cached(idx)


# kernels number their ranges from 0, so the same reshapes in different kernels (and passes) repeat exactly
@functools.lru_cache(maxsize=8192)
def _simplify_index_cached(idx: Index) -> Index:
    with Context(TRACK_MATCH_STATS=min(TRACK_MATCH_STATS.value, 1)):  # one step per reshape would flood VIZ
        return graph_rewrite(UOp.sink(*idx), sym, name="simplify index").src


def _and(a: UOp | None, b: UOp) -> UOp:
    return b if a is None else a & b


def source_index(node: UOp, idx: Index, valid: UOp | None) -> tuple[Index, UOp | None]:
    """The index (and validity) at which movement op `node`, read at `idx`, reads its source."""
    return _source_index(node.op, node.arg, node.src[0].shape, node.shape, idx, valid)


# the answer depends on the op, its arg, the shapes and the index only: a layer repeated n times (or the same view in
# the two walks of every kernel, find_realizes' and build_kernel's) asks the same question each time
@functools.lru_cache(maxsize=16384)
def _source_index(  # one case per op: a dispatch table
    op: Ops, arg: Any, in_shape: tuple[Any, ...], shape: tuple[Any, ...], idx: Index, valid: UOp | None
) -> tuple[Index, UOp | None]:
    match op:
        case Ops.RESHAPE:
            if (groups := _reshape_groups(in_shape, shape)) is not None:
                return simplify_index(_regroup(groups, in_shape, shape, idx)), valid
            return simplify_index(_unflatten(linearize_index(idx, shape), in_shape)), valid
        case Ops.PERMUTE:
            out_list: list[UOp] = [idx_const(0)] * len(arg)
            for out_axis, in_axis in enumerate(arg):
                out_list[in_axis] = idx[out_axis]
            return tuple(out_list), valid
        case Ops.EXPAND:
            return tuple(
                idx_const(0) if s == 1 and n != 1 else i for i, s, n in zip(idx, in_shape, arg, strict=True)
            ), valid
        case Ops.PAD:
            new_idx: list[UOp] = []
            for pos, size, (before, after) in zip(idx, in_shape, arg, strict=True):
                if before == 0 and after == 0:
                    new_idx.append(pos)
                    continue
                new_idx.append(pos - before)
                if before > 0:
                    valid = _and(valid, idx_const(before - 1) < pos)
                valid = _and(valid, pos < before + size)
            return tuple(new_idx), valid
        case Ops.SHRINK:
            return tuple(i + start if start else i for i, (start, _) in zip(idx, arg, strict=True)), valid
        case Ops.FLIP:
            return tuple((s - 1) - i if flip else i for i, s, flip in zip(idx, in_shape, arg, strict=True)), valid
    raise ValueError(f"source_index: {op} is not a movement op")


def _unflatten(flat: UOp, shape: tuple[Any, ...]) -> Index:
    """The index of flat position `flat` in a contiguous tensor of `shape`."""
    out = []
    for i, (s, st) in enumerate(zip(shape, strides_for(shape), strict=True)):
        if s == 1:
            out.append(idx_const(0))
        else:
            q = flat // st if st != 1 else flat
            out.append(q % s if i != 0 else q)  # the first axis needs no mod: flat < total size
    return tuple(out)


def _reshape_groups(in_shape: tuple[Any, ...], shape: tuple[Any, ...]) -> list[tuple[list[int], list[int]]] | None:
    """Axes of a reshape in groups of equal size, (source axes, result axes), size-1 axes left out; None when a
    symbolic axis is not matched one-to-one by the same size on the other side. A group with one source axis needs
    no div/mod, and a window's negative (masked) index stays in its own axis instead of carrying into the others."""
    ins = [i for i, s in enumerate(in_shape) if not isinstance(s, int) or s != 1]
    outs = [i for i, s in enumerate(shape) if not isinstance(s, int) or s != 1]
    groups: list[tuple[list[int], list[int]]] = []
    while ins and outs:
        group_in, group_out = [ins.pop(0)], [outs.pop(0)]
        size_in, size_out = in_shape[group_in[0]], shape[group_out[0]]
        if not isinstance(size_in, int) or not isinstance(size_out, int):
            if size_in is not size_out:  # sizes are hash-consed: the same variable expression is the same node
                return None
            groups.append((group_in, group_out))
            continue
        while size_in != size_out:
            nxt = ins if size_in < size_out else outs
            if not nxt or not isinstance((in_shape if nxt is ins else shape)[nxt[0]], int):
                return None
            if size_in < size_out:
                group_in.append(ins.pop(0))
                size_in *= in_shape[group_in[-1]]
            else:
                group_out.append(outs.pop(0))
                size_out *= shape[group_out[-1]]
        groups.append((group_in, group_out))
    return None if ins or outs else groups


def _regroup(groups: list[tuple[list[int], list[int]]], in_shape: tuple[Any, ...], shape: tuple[Any, ...],
             idx: Index) -> Index:  # fmt: skip
    """The source index of a reshape read at `idx`, group by group (_reshape_groups)."""
    out = [idx_const(0)] * len(in_shape)
    for group_in, group_out in groups:
        flat = linearize_index(tuple(idx[i] for i in group_out), tuple(shape[i] for i in group_out))
        for axis, i in zip(group_in, _unflatten(flat, tuple(in_shape[i] for i in group_in)), strict=True):
            out[axis] = i
    return tuple(out)
