"""Tensor methods: movement and indexing beyond the core (cat, stack, split, pad modes, gather, scatter, setitem)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fusegrad.tensor import Tensor  # noqa: F401  # methods annotate `self: Tensor`


class MovementMixin:
    """Mixed into Tensor; see the module docstring."""

    __slots__ = ()
