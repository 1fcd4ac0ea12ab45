"""Tensor methods: random numbers from a counter-based generator on the device, and the initialisers."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fusegrad.tensor import Tensor  # noqa: F401  # methods annotate `self: Tensor`


class RandomMixin:
    """Mixed into Tensor; see the module docstring."""

    __slots__ = ()
