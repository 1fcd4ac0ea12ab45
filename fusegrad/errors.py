"""Exception types for bad input to Tensor ops, raised at the frontend boundary (see STYLE.md, Errors).

Each is the house type (ValueError for values and shapes, TypeError for dtypes) and, as a second base, the type the
reference system and torch raise for the same mistake, so `except ValueError` and `except RuntimeError` both catch
`x.permute(0, 0)`. Raise them only where the reference's type differs from the house one.
"""

from __future__ import annotations


class OpValueError(ValueError, RuntimeError):
    """A bad shape or value given to an op where the reference raises RuntimeError (matmul shapes, permute order,
    reshape with two -1s, an unknown mode string). Example: `Tensor.ones(2, 4) @ Tensor.ones(1, 3)`."""


class OpTypeError(TypeError, RuntimeError):
    """A dtype an op does not take where the reference raises RuntimeError (bitwise ops on floats, an integer tensor
    to a negative power, scatter with mismatched dtypes). Example: `Tensor([1.0]) & Tensor([2.0])`."""


class UnsupportedModeError(ValueError, NotImplementedError):
    """A mode the op does not implement (NotImplementedError in the reference, itself a RuntimeError).
    Example: `x.pad((1, 1), mode="typo")`."""


class UnknownDTypeError(ValueError, AttributeError):
    """An unknown dtype name; AttributeError as well, like the reference's failed `dtypes.<name>` lookup.
    Example: `x.sum(dtype="typo")`."""


class ArangeOverflowError(OverflowError, ValueError):
    """An arange whose values leave its integer dtype: OverflowError like the reference, ValueError like the house.
    Example: `Tensor.arange(2**33, dtype=dtypes.int)`."""


class DTypeArgumentError(AttributeError, TypeError):
    """A `dtype=` that is neither a DType nor a dtype name; AttributeError like the reference.
    Example: `Tensor([1], dtype=(dtypes.int,))`."""


class RearrangeError(ValueError, AssertionError):
    """A rearrange formula that cannot apply; an AssertionError too, as the reference raises.
    Example: `Tensor.ones(2, 3).rearrange("a b -> a c")`."""


class SampleError(ValueError, AssertionError):
    """Bad multinomial arguments (weights not 1-d or 2-d, or a sample count the draw can't give); an AssertionError as
    well, the type the reference raises. Example: `Tensor(2.0).multinomial(1)`."""


class SymbolicError(ValueError, AssertionError):
    """A bad symbolic size: a value outside its variable's range, two values for one variable, or data asked of a
    tensor whose shape is symbolic. An AssertionError as the reference raises, and a ValueError as house style asks.
    Example: `Variable("n", 1, 4).bind(9)`."""


class JitError(RuntimeError, AssertionError):
    """A TinyJit call that a replay could not run faithfully (changed inputs, baked-in values, nothing captured).
    Also an AssertionError: the reference's older JIT asserted these conditions, and its tests catch that type.
    Lives here, below the frontend, because Tensor raises it too (a realize inside a capture)."""


# every type raised for bad input: `traced` re-raises these with the user-facing op's name in front
INPUT_ERRORS: tuple[type[Exception], ...] = (
    ValueError, TypeError, IndexError, OpValueError, OpTypeError, UnsupportedModeError, UnknownDTypeError)  # fmt: skip
