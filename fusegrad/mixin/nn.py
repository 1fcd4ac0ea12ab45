"""Tensor methods: neural-network functionals: conv, pooling, normalisation, attention, losses."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fusegrad.tensor import Tensor  # noqa: F401  # methods annotate `self: Tensor`


class NNMixin:
    """Mixed into Tensor; see the module docstring."""

    __slots__ = ()
