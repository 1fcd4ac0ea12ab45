"""Data types: interned `DType` scalars, vectors and pointers, the `dtypes` namespace and the promotion lattice.

Stage 0 of the pipeline: every UOp carries a DType. Entry points: `dtypes`, `to_dtype`, `least_upper_dtype`, `truncate`.
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import TYPE_CHECKING, ClassVar, Final, NoReturn, TypeAlias, TypeVar

from fusegrad.errors import UnknownDTypeError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

ConstType: TypeAlias = float | int | bool


class InvalidType:
    """Marker value of an invalid index lane (a masked load or store). A singleton, equal only to itself."""

    _instance: ClassVar[InvalidType | None] = None

    def __new__(cls) -> InvalidType:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return hash("Invalid")

    def __repr__(self) -> str:
        return "Invalid"

    def __reduce__(self) -> tuple[type[InvalidType], tuple[()]]:
        return InvalidType, ()


Invalid: Final[InvalidType] = InvalidType()
_ConstValue: TypeAlias = ConstType | InvalidType | tuple[ConstType | InvalidType, ...]


class AddrSpace(Enum):
    """Where a pointer points: device memory, workgroup-shared memory, or registers."""

    def __repr__(self) -> str:
        return str(self)

    GLOBAL = auto()
    LOCAL = auto()
    REG = auto()


_T = TypeVar("_T")
_INTERNED: dict[tuple[object, ...], object] = {}


class _InternedMeta(type):
    """Hash-conses dtypes: building a dtype equal to an existing one returns that object, so `is` checks hold."""

    def __call__(cls: type[_T], *args: object, **kwargs: object) -> _T:
        if not kwargs and (hit := _INTERNED.get((cls, *args))) is not None:
            return hit  # type: ignore[return-value]  # the key holds cls, so the value is a cls instance
        fresh: _T = super().__call__(*args, **kwargs)  # type: ignore[misc]  # mypy can't type super() in a metaclass
        # key by every init field too, so calls that spell defaults or use kwargs land on the same object
        interned = _INTERNED.setdefault((cls, *fresh._init_values()), fresh)  # type: ignore[attr-defined]  # a DType
        if not kwargs:
            _INTERNED[(cls, *args)] = interned
        return interned  # type: ignore[return-value]  # same reason as above


@dataclass(frozen=True, eq=False)  # interned: equal dtypes are the same object, so == is identity (fast)
class DType(metaclass=_InternedMeta):
    """A scalar or vector element type. `name` is the C spelling ("float", "unsigned char") that renderers print."""

    priority: int  # tie-break order for promotion; higher wins
    bitsize: int
    name: str
    fmt: str | None  # struct format character; None where struct has none (bfloat16, fp8, vectors)
    count: int  # vector lanes
    _scalar: DType | None  # the element type of a vector, else None
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # every UOp cache lookup hashes a dtype, so hash once: dtypes are immutable and interned
        object.__setattr__(self, "_hash", hash((type(self), *self._init_values())))

    def __hash__(self) -> int:
        return self._hash

    def _init_values(self) -> tuple[object, ...]:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self) if f.init)

    def __reduce__(self) -> tuple[type[DType], tuple[object, ...]]:
        return type(self), self._init_values()  # unpickling calls the constructor, which returns the interned dtype

    @staticmethod
    def new(priority: int, bitsize: int, name: str, fmt: str | None) -> DType:
        """A new scalar dtype of the given priority (promotion order), bit size, name and struct format character.

        Args:
            priority: the tie-break order for promotion (higher wins).
            bitsize: bits per element.
            name: the C spelling renderers print.
            fmt: the struct format character (None: no Python buffer format).

        Returns:
            The dtype; equal fields give the same (interned) object.

        Examples:
            >>> DType.new(5, 32, "int", "i") is dtypes.int32
            True
        """
        return DType(priority, bitsize, name, fmt, 1, None)

    @property
    def itemsize(self) -> int:
        """Bytes per element (bool takes one byte).

        Examples:
            >>> dtypes.float16.itemsize, dtypes.bool.itemsize
            (2, 1)
        """
        return (self.bitsize + 7) // 8

    @property
    def base(self) -> DType:
        """The dtype itself (a pointer dtype's base is the dtype it points to).

        Examples:
            >>> dtypes.float.base, dtypes.float.ptr(16).base
            (dtypes.float, dtypes.float)
        """
        return self

    @property
    def vcount(self) -> int:
        """The number of lanes of a vector dtype (1 for a scalar).

        Examples:
            >>> dtypes.float.vec(4).vcount, dtypes.float.vcount
            (4, 1)
        """
        return self.count

    def scalar(self) -> DType:
        """The scalar dtype of a vector dtype, or the dtype itself.

        Returns:
            The one-lane dtype.

        Examples:
            >>> dtypes.float.vec(4).scalar()
            dtypes.float
        """
        return self if self._scalar is None else self._scalar

    def __repr__(self) -> str:
        lanes = f".vec({self.count})" if self.count != 1 else ""
        return f"dtypes.{INVERSE_DTYPES_DICT.get(self.scalar().name, self.scalar().name)}{lanes}"

    def __lt__(self, other: DType) -> bool:
        return (self.priority, self.bitsize, self.name, self.fmt or "", self.count) < (
            other.priority, other.bitsize, other.name, other.fmt or "", other.count)  # fmt: skip

    @functools.cache  # noqa: B019  # dtypes are interned and immortal, so caching on self leaks nothing
    def vec(self, sz: int) -> DType:
        assert self.count == 1, f"vec: can't vectorize a vector dtype: got {self}, expected a scalar dtype"
        if sz == 1 or self == dtypes.void:  # void stays void: a vectorized store still has no value
            return self
        return DType(self.priority, self.bitsize * sz, f"{INVERSE_DTYPES_DICT[self.name]}{sz}", None, sz, self)

    def ptr(self, size: int = -1, addrspace: AddrSpace = AddrSpace.GLOBAL) -> PtrDType:
        """The pointer dtype to buffers of this dtype (`size` elements, -1: unknown) in `addrspace` (kernel IR).

        Args:
            size: how many elements the buffer holds (-1: unknown).
            addrspace: global, local (shared) or register memory.

        Returns:
            A PtrDType whose base is this dtype.

        Examples:
            >>> dtypes.float.ptr(16)
            dtypes.float.ptr(16)
        """
        return PtrDType(self.priority, self.bitsize, self.name, self.fmt, self.count, None, self, addrspace, 1, size)


@dataclass(frozen=True, eq=False)  # interned like DType
class PtrDType(DType):
    """A pointer to `size` elements (-1: unbounded) of `base` in `addrspace`; `v` > 1 is a vector of pointers."""

    _base: DType
    addrspace: AddrSpace
    v: int
    size: int = -1

    def __hash__(self) -> int:
        return self._hash

    @property
    def base(self) -> DType:
        return self._base

    @property
    def vcount(self) -> int:
        return self.v

    @functools.cache  # noqa: B019  # see DType.vec
    def vec(self, sz: int) -> PtrDType:
        assert self.v == 1, f"vec: can't vectorize a vector pointer: got {self}, expected a scalar pointer"
        if sz == 1:
            return self
        fields = (self.priority, self.bitsize, self.name, self.fmt, self.count)
        return PtrDType(*fields, self, self._base, self.addrspace, sz, self.size)

    def ptr(self, size: int = -1, addrspace: AddrSpace = AddrSpace.GLOBAL) -> NoReturn:
        raise TypeError(f"ptr: can't point to a pointer: got {self}, expected a non-pointer dtype")

    def nbytes(self) -> int:
        if self.size == -1:
            raise ValueError(f"nbytes: pointer has unbounded size: got {self}, expected a pointer with a size")
        return self.size * self.itemsize

    def __repr__(self) -> str:
        space = f", {self.addrspace}" if self.addrspace != AddrSpace.GLOBAL else ""
        lanes = f".vec({self.v})" if self.v != 1 else ""
        return f"{self._base!r}.ptr({self.size}{space}){lanes}"


class dtypes:  # compat name: a namespace used as dtypes.float32
    """The named dtypes, their groups, and predicates over them.

    Examples:
        >>> dtypes.float32 is dtypes.float, dtypes.is_float(dtypes.half), dtypes.default_float
        (True, True, dtypes.float)
    """

    @staticmethod
    @functools.cache
    def is_float(x: DType) -> builtins.bool:
        return x.scalar() in dtypes.floats

    @staticmethod
    @functools.cache
    def is_int(x: DType) -> builtins.bool:
        return x.scalar() in dtypes.ints or x.scalar() == dtypes.index

    @staticmethod
    @functools.cache
    def is_unsigned(x: DType) -> builtins.bool:
        return x.scalar() in dtypes.uints

    @staticmethod
    def is_bool(x: DType) -> builtins.bool:
        """Whether `x` (or its scalar type) is bool.

        Args:
            x: a dtype.

        Returns:
            True for bool and bool vectors.

        Examples:
            >>> dtypes.is_bool(dtypes.bool), dtypes.is_bool(dtypes.uint8)
            (True, False)
        """
        return x.scalar() == dtypes.bool

    @staticmethod
    def from_py(x: object) -> DType:
        """The dtype a Python value gets: float -> default_float, int -> default_int; a sequence its widest element.

        Args:
            x: a float, int, bool, or a (nested) list or tuple of them.

        Returns:
            The dtype `Tensor(x)` would get.

        Raises:
            TypeError: any other kind of value.

        Examples:
            >>> dtypes.from_py(1), dtypes.from_py([1, 2.0]), dtypes.from_py(True)
            (dtypes.int, dtypes.float, dtypes.bool)
        """
        if x.__class__ is builtins.float:
            return dtypes.default_float
        if x.__class__ is builtins.int:
            return dtypes.default_int
        if x.__class__ is builtins.bool:
            return dtypes.bool
        if isinstance(x, list | tuple):
            return builtins.max((dtypes.from_py(item) for item in x), default=dtypes.default_float)
        raise TypeError(f"from_py: can't infer a dtype: got {type(x).__name__}, expected float, int, bool, list, tuple")

    @staticmethod
    def as_const(val: _ConstValue, dtype: DType) -> _ConstValue:
        """`val` as the Python type of `dtype` (int, float or bool); a tuple holds one value per vector lane.

        Args:
            val: a Python number, or a tuple of one per lane.
            dtype: the dtype whose Python type to use.

        Returns:
            The converted value (ints truncate toward zero and wrap to the dtype's range).

        Examples:
            >>> dtypes.as_const(3.7, dtypes.int32), dtypes.as_const(2, dtypes.float32), dtypes.as_const(2, dtypes.bool)
            (3, 2.0, True)
        """
        if isinstance(val, tuple):
            assert len(val) == dtype.count, f"as_const: wrong lane count: got {len(val)}, expected {dtype.count}"
            return tuple(_as_scalar_const(x, dtype) for x in val)
        return _as_scalar_const(val, dtype)

    @staticmethod
    @functools.cache
    def min(dtype: DType) -> ConstType:
        if dtypes.is_int(dtype):
            return 0 if dtypes.is_unsigned(dtype) else -(1 << (dtype.scalar().bitsize - 1))
        return -math.inf if dtypes.is_float(dtype) else False

    @staticmethod
    @functools.cache
    def max(dtype: DType) -> ConstType:
        if dtypes.is_int(dtype):
            bits = dtype.scalar().bitsize if dtypes.is_unsigned(dtype) else dtype.scalar().bitsize - 1
            return (1 << bits) - 1
        return math.inf if dtypes.is_float(dtype) else True

    @staticmethod
    def finfo(dtype: DType) -> tuple[builtins.int, builtins.int]:
        """(exponent bits, mantissa bits) of a float dtype.

        Args:
            dtype: a float dtype.

        Returns:
            (exponent bits, mantissa bits).

        Raises:
            TypeError: dtype is not a float dtype.

        Examples:
            >>> dtypes.finfo(dtypes.half), dtypes.finfo(dtypes.bfloat16)
            ((5, 10), (8, 7))
        """
        if (bits := _FLOAT_BITS.get(dtype)) is None:
            raise TypeError(f"finfo: not a float dtype: got {dtype}, expected one of {dtypes.floats}")
        return bits

    @staticmethod
    def fields() -> dict[str, DType]:
        """Every named dtype, aliases included ("float32" and "float").

        Returns:
            Name -> dtype.

        Examples:
            >>> dtypes.fields()["float32"] is dtypes.fields()["float"]
            True
        """
        return dict(_NAMED_DTYPES)

    void: Final[DType] = DType.new(-1, 0, "void", None)
    index: Final[DType] = DType.new(-1, 800, "index", None)  # symbolic index math: an unbounded int
    bool: Final[DType] = DType.new(0, 1, "bool", "?")
    int8: Final[DType] = DType.new(1, 8, "signed char", "b")
    uint8: Final[DType] = DType.new(2, 8, "unsigned char", "B")
    int16: Final[DType] = DType.new(3, 16, "short", "h")
    uint16: Final[DType] = DType.new(4, 16, "unsigned short", "H")
    int32: Final[DType] = DType.new(5, 32, "int", "i")
    uint32: Final[DType] = DType.new(6, 32, "unsigned int", "I")
    int64: Final[DType] = DType.new(7, 64, "long", "q")
    uint64: Final[DType] = DType.new(8, 64, "unsigned long", "Q")
    fp8e4m3: Final[DType] = DType.new(9, 8, "float8_e4m3", None)
    fp8e5m2: Final[DType] = DType.new(10, 8, "float8_e5m2", None)
    # AMD's variants: no negative zero or infinity, NaN only at 0x80, exponent bias one higher
    fp8e4m3fnuz: Final[DType] = DType.new(9, 8, "float8_e4m3fnuz", None)
    fp8e5m2fnuz: Final[DType] = DType.new(10, 8, "float8_e5m2fnuz", None)
    float16: Final[DType] = DType.new(11, 16, "half", "e")
    # bfloat16 ranks above float16, so int64 + uint64 (which meet at both) promotes to float16
    bfloat16: Final[DType] = DType.new(12, 16, "__bf16", None)
    float32: Final[DType] = DType.new(13, 32, "float", "f")
    float64: Final[DType] = DType.new(14, 64, "double", "d")

    # aliases come after the canonical names: repr prints the alias (dtypes.float), DTYPES_DICT keeps the canonical
    half: Final = float16
    float: Final = float32
    double: Final = float64
    uchar: Final = uint8
    ushort: Final = uint16
    uint: Final = uint32
    ulong: Final = uint64
    char: Final = int8
    short: Final = int16
    int: Final = int32
    long: Final = int64

    default_float: ClassVar[DType] = float32
    default_int: ClassVar[DType] = int32

    fp8_ocp: Final = (fp8e4m3, fp8e5m2)
    fp8_fnuz: Final = (fp8e4m3fnuz, fp8e5m2fnuz)
    fp8s: Final = (*fp8_ocp, *fp8_fnuz)
    floats: Final = (*fp8s, float16, bfloat16, float32, float64)
    uints: Final = (uint8, uint16, uint32, uint64)
    sints: Final = (int8, int16, int32, int64)
    ints: Final = uints + sints
    all: Final = (*floats, *ints, bool, index)  # noqa: A003  # bool is the dtype above, not the builtin


def _as_scalar_const(val: ConstType | InvalidType, dtype: DType) -> ConstType | InvalidType:
    if isinstance(val, InvalidType):
        return val
    if dtypes.is_int(dtype):
        return int(val)
    return float(val) if dtypes.is_float(dtype) else bool(val)


_FLOAT_BITS: dict[DType, tuple[int, int]] = {
    dtypes.fp8e4m3: (4, 3), dtypes.fp8e5m2: (5, 2), dtypes.fp8e4m3fnuz: (4, 3), dtypes.fp8e5m2fnuz: (5, 2),
    dtypes.float16: (5, 10), dtypes.bfloat16: (8, 7),
    dtypes.float32: (8, 23), dtypes.float64: (11, 52)}  # fmt: skip

_UNNAMED: Final = ("void", "index", "default_float", "default_int")  # not data types, or not fixed names
_NAMED_DTYPES: dict[str, DType] = {k: v for k, v in vars(dtypes).items() if isinstance(v, DType) and k not in _UNNAMED}
_CANONICAL_NAMES = {dt: name for name, dt in reversed(_NAMED_DTYPES.items())}
DTYPES_DICT: Final[dict[str, DType]] = {name: dt for name, dt in _NAMED_DTYPES.items() if _CANONICAL_NAMES[dt] == name}
# C name -> the attribute repr prints; the last spelling wins, so aliases do ("half" -> "half", "__bf16" -> "bfloat16")
INVERSE_DTYPES_DICT: Final[dict[str, str]] = {
    **{dt.name: name for name, dt in _NAMED_DTYPES.items()}, "void": "void", "index": "index"}  # fmt: skip

DTypeLike: TypeAlias = str | DType
_DTYPES_BY_NAME: Final = {**_NAMED_DTYPES, "void": dtypes.void, "index": dtypes.index}


def to_dtype(x: DTypeLike) -> DType:
    """A DType, or one looked up by name ("float32", "float", "half"; any case). Raises TypeError for other types and
    UnknownDTypeError (a ValueError and an AttributeError, as in the reference) for an unknown name."""
    if isinstance(x, DType):
        return x
    if not isinstance(x, str):
        raise TypeError(f"to_dtype: not a dtype or dtype name: got {type(x).__name__}, expected DType or str")
    if (dt := _DTYPES_BY_NAME.get(x.lower())) is None:
        raise UnknownDTypeError(f"to_dtype: unknown dtype name {x!r}: expected one of {', '.join(_DTYPES_BY_NAME)}")
    return dt


# https://jax.readthedocs.io/en/latest/jep/9407-type-promo.html without weak or complex types: each dtype -> the
# dtypes directly above it. float64 is the top; index sits outside (see least_upper_dtype).
promo_lattice: Final[dict[DType, list[DType]]] = {
    dtypes.bool: [dtypes.int8, dtypes.uint8], dtypes.int8: [dtypes.int16], dtypes.int16: [dtypes.int32],
    dtypes.int32: [dtypes.int64], dtypes.int64: [dtypes.float16, dtypes.bfloat16],
    dtypes.uint8: [dtypes.int16, dtypes.uint16], dtypes.uint16: [dtypes.int32, dtypes.uint32],
    dtypes.uint32: [dtypes.int64, dtypes.uint64], dtypes.uint64: [dtypes.float16, dtypes.bfloat16],
    **{dt: [dtypes.float16, dtypes.bfloat16] for dt in dtypes.fp8s},
    dtypes.float16: [dtypes.float32], dtypes.bfloat16: [dtypes.float32], dtypes.float32: [dtypes.float64]}  # fmt: skip


@functools.cache
def _upward_closure(dt: DType) -> frozenset[DType]:
    if dt not in promo_lattice and dt != dtypes.float64:
        raise TypeError(f"least_upper_dtype: dtype can't be promoted: got {dt}, expected one of {dtypes.all}")
    return frozenset({dt}).union(*(_upward_closure(up) for up in promo_lattice.get(dt, [])))


@functools.cache
def least_upper_dtype(*ds: DType) -> DType:
    """The lowest dtype all of `ds` promote to. Vectors and pointers promote by their scalar type."""
    scalars = [d.base.scalar() for d in ds]
    if not scalars:
        raise TypeError("least_upper_dtype: no dtypes: got (), expected at least one dtype")
    if dtypes.index in scalars:
        # index is the unbounded int: it absorbs ints and bools, and promotes like int64 against floats
        if all(dtypes.is_int(d) or d == dtypes.bool for d in scalars):
            return dtypes.index
        scalars = [dtypes.int64 if d == dtypes.index else d for d in scalars]
    return min(frozenset.intersection(*(_upward_closure(d) for d in scalars)))


def least_upper_float(dt: DType) -> DType:
    return dt if dtypes.is_float(dt) else least_upper_dtype(dt, dtypes.default_float)


def sum_acc_dtype(dt: DType) -> DType:
    """The accumulator dtype of a sum: at least uint32 for unsigned ints, int32 for ints and bool, else a float."""
    if dtypes.is_unsigned(dt):
        return least_upper_dtype(dt, dtypes.uint32)
    if dtypes.is_int(dt) or dtypes.is_bool(dt):
        return least_upper_dtype(dt, dtypes.int32)
    return least_upper_dtype(dt, dtypes.default_float)


def can_safe_cast(dt0: DType, dt1: DType) -> bool:
    """Whether a cast from dt0 to dt1 keeps every value (numpy's can_cast with casting="safe")."""
    if dt0.count != dt1.count:
        return False
    if dt0 == dt1 or dt0.scalar() == dtypes.bool:
        return True
    dt0, dt1 = dt0.scalar(), dt1.scalar()
    if dtypes.is_int(dt0) and dtypes.is_int(dt1):
        return dtypes.min(dt1) <= dtypes.min(dt0) and dtypes.max(dt0) <= dtypes.max(dt1)
    if not dtypes.is_float(dt1):
        return False
    exponent, mantissa = dtypes.finfo(dt1)
    if dtypes.is_float(dt0):
        return dtypes.finfo(dt0)[0] <= exponent and dtypes.finfo(dt0)[1] <= mantissa
    # an int fits if its magnitude bits fit the significand (mantissa + the implicit leading 1)
    return dtypes.is_int(dt0) and dt0.bitsize - (0 if dtypes.is_unsigned(dt0) else 1) <= mantissa + 1


# *** Python values at fixed width, as C computes them (the PYTHON backend and constant folding use these) ***


def _round_with_struct(fmt: str, x: ConstType) -> float:
    try:
        return float(struct.unpack(fmt, struct.pack(fmt, float(x)))[0])
    except OverflowError:  # struct refuses what C rounds to infinity
        return math.copysign(math.inf, x)


def truncate_fp16(x: ConstType) -> float:
    return _round_with_struct("e", x)


def _truncate_fp32(x: ConstType) -> float:
    return _round_with_struct("f", x)


def float_to_bf16(x: float) -> float:
    """Round to bfloat16 (the top 16 bits of a float32), to nearest even."""
    x = _truncate_fp32(x)
    if not math.isfinite(x):
        return x
    bits = struct.unpack("I", struct.pack("f", x))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return float(struct.unpack("f", struct.pack("I", bits))[0])


@dataclass(frozen=True, slots=True)
class Fp8Format:
    """How an 8-bit float lays out its values. The OCP formats (e4m3fn, e5m2) have a negative zero, and NaN (and for
    e5m2 infinity) in the top exponent; AMD's fnuz ones have neither: 0x80 is their only NaN."""

    exponent_bits: int
    mantissa_bits: int
    bias: int
    max: float  # the largest finite value
    has_inf: bool
    fnuz: bool  # finite, no negative zero, NaN only at 0x80

    @property
    def nan_bits(self) -> int:
        return 0x80 if self.fnuz else 0x7F


FP8_FORMATS: Final[dict[DType, Fp8Format]] = {
    dtypes.fp8e4m3: Fp8Format(4, 3, 7, 448.0, has_inf=False, fnuz=False),
    dtypes.fp8e5m2: Fp8Format(5, 2, 15, 57344.0, has_inf=True, fnuz=False),
    dtypes.fp8e4m3fnuz: Fp8Format(4, 3, 8, 240.0, has_inf=False, fnuz=True),
    dtypes.fp8e5m2fnuz: Fp8Format(5, 2, 16, 57344.0, has_inf=False, fnuz=True),
}


def _round_fp8(x: ConstType, dtype: DType) -> float:
    """Round to nearest even in an fp8 format, saturating past the largest finite value (CUDA's satfinite; ONNX's
    saturating Cast, so infinities become the largest value too)."""
    x, fmt = float(x), FP8_FORMATS[dtype]
    if math.isnan(x) or x == 0:
        return 0.0 if fmt.fnuz and x == 0 else x
    magnitude = abs(x)
    if math.isfinite(x):
        # below the smallest normal's exponent (1 - bias) the spacing stays fixed: subnormals
        spacing = math.ldexp(1.0, max(math.frexp(x)[1] - 1, 1 - fmt.bias) - fmt.mantissa_bits)
        magnitude = round(magnitude / spacing) * spacing  # round() is half-to-even
    if fmt.fnuz and magnitude == 0:
        return 0.0  # no negative zero
    return math.copysign(min(magnitude, fmt.max), x)


def fp8_to_float(x: int, dtype: DType) -> float:
    """The value of an fp8 bit pattern (see Fp8Format): e5m2 is IEEE-like; e4m3fn has no infinity, and NaN only at
    0x7F and 0xFF; the fnuz formats have NaN only at 0x80."""
    fmt = FP8_FORMATS[dtype]
    biased = (x >> fmt.mantissa_bits) & ((1 << fmt.exponent_bits) - 1)
    mantissa = x & ((1 << fmt.mantissa_bits) - 1)
    top_exponent = biased == (1 << fmt.exponent_bits) - 1
    if fmt.fnuz and x == 0x80:
        value = math.nan
    elif not fmt.fnuz and top_exponent and fmt.has_inf:
        value = math.inf if mantissa == 0 else math.nan
    elif not fmt.fnuz and top_exponent and mantissa == (1 << fmt.mantissa_bits) - 1:
        value = math.nan
    else:  # biased exponent 0 is subnormal: no implicit leading 1, and the exponent of biased 1
        significand = mantissa | (1 << fmt.mantissa_bits if biased else 0)
        value = math.ldexp(significand, max(biased, 1) - fmt.bias - fmt.mantissa_bits)
    return -value if x & 0x80 else value


@functools.cache
def _fp8_codes(dtype: DType) -> dict[float, int]:
    """The bit pattern of each finite non-negative fp8 value."""
    return {value: bits for bits in range(0x80) if math.isfinite(value := fp8_to_float(bits, dtype))}


def float_to_fp8(x: float, dtype: DType) -> int:
    """The bit pattern of the fp8 value nearest to `x` (saturating; NaN -> 0x7F, or 0x80 in the fnuz formats)."""
    value = _round_fp8(x, dtype)
    if math.isnan(value):
        return FP8_FORMATS[dtype].nan_bits
    return (0x80 if math.copysign(1.0, value) < 0 else 0) | _fp8_codes(dtype)[abs(value)]


def _wrap_int(dtype: DType) -> Callable[[ConstType], ConstType]:
    """Two's complement wraparound to the width of an int dtype (C's conversion to a fixed-width int)."""
    bits, signed = dtype.bitsize, not dtypes.is_unsigned(dtype)

    def wrap(x: ConstType) -> ConstType:
        value = int(x) & ((1 << bits) - 1)
        return value - (1 << bits) if signed and value >> (bits - 1) else value

    return wrap


truncate: Final[dict[DType, Callable[[ConstType], ConstType]]] = {
    dtypes.bool: bool, dtypes.index: int, dtypes.float16: truncate_fp16, dtypes.bfloat16: float_to_bf16,
    dtypes.float32: _truncate_fp32, dtypes.float64: float, **{dt: _wrap_int(dt) for dt in dtypes.ints},
    **{dt: functools.partial(_round_fp8, dtype=dt) for dt in dtypes.fp8s}}  # fmt: skip


def storage_fmt_for_dtype(dt: DType) -> str | None:
    """The struct format a buffer of `dt` is stored as: raw bits for the formats struct lacks."""
    if dt == dtypes.bfloat16:
        return "H"
    return "B" if dt in dtypes.fp8s else dt.fmt


# *** numpy interop: numpy is imported lazily, so importing fusegrad never requires it ***


def _to_np_dtype(dt: DType) -> type[np.generic] | None:
    import numpy as np

    # by name, not fmt: struct's "q" is numpy's longlong, a distinct type from int64
    return None if dt.fmt is None else np.dtype(_CANONICAL_NAMES[dt]).type


def _from_np_dtype(npdtype: npt.DTypeLike) -> DType:
    import numpy as np

    name = np.dtype(npdtype).name
    if (dt := DTYPES_DICT.get(name)) is None:
        raise TypeError(f"_from_np_dtype: numpy dtype has no fusegrad dtype: got {name}, expected one of "
                        f"{', '.join(n for n, d in DTYPES_DICT.items() if d.fmt is not None)}")  # fmt: skip
    return dt
