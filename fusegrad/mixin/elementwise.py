"""Tensor methods: unary math, activations and binary ops beyond the core (exp, relu, ...)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fusegrad.tensor import Tensor  # noqa: F401  # methods annotate `self: Tensor`


class ElementwiseMixin:
    """Mixed into Tensor; see the module docstring."""

    __slots__ = ()
