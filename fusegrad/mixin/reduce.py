"""Tensor methods: reductions beyond sum/max/min/mean (prod, any, argmax, var, logsumexp, cumsum, sort, topk)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fusegrad.tensor import Tensor  # noqa: F401  # methods annotate `self: Tensor`


class ReduceMixin:
    """Mixed into Tensor; see the module docstring."""

    __slots__ = ()
