"""Tests for fusegrad/dtype.py: interning, promotion, fixed-width truncation and numpy interop."""

import ctypes
import dataclasses
import itertools
import math
import pickle
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fusegrad.dtype import (
    DTYPES_DICT,
    INVERSE_DTYPES_DICT,
    AddrSpace,
    DType,
    Invalid,
    InvalidType,
    PtrDType,
    _from_np_dtype,
    _to_np_dtype,
    can_safe_cast,
    dtypes,
    float_to_bf16,
    float_to_fp8,
    fp8_to_float,
    least_upper_dtype,
    least_upper_float,
    promo_lattice,
    storage_fmt_for_dtype,
    sum_acc_dtype,
    to_dtype,
    truncate,
    truncate_fp16,
)

LATTICE_DTYPES = [dt for dt in dtypes.all if dt != dtypes.index]
NUMPY_DTYPES = [dt for dt in DTYPES_DICT.values() if dt.fmt is not None]  # the ones numpy has
CTYPES_INTS = {dtypes.int8: ctypes.c_int8, dtypes.uint8: ctypes.c_uint8, dtypes.int16: ctypes.c_int16,
               dtypes.uint16: ctypes.c_uint16, dtypes.int32: ctypes.c_int32, dtypes.uint32: ctypes.c_uint32,
               dtypes.int64: ctypes.c_int64, dtypes.uint64: ctypes.c_uint64}  # fmt: skip
lattice_dtype = st.sampled_from(LATTICE_DTYPES)


def _np(dt: DType) -> type[np.generic]:
    np_type = _to_np_dtype(dt)
    assert np_type is not None, f"no numpy type for {dt}"
    return np_type


# *** DType objects: interning, vectors, pointers, repr ***


def test_scalar_fields() -> None:
    assert (dtypes.float32.priority, dtypes.float32.bitsize, dtypes.float32.name) == (13, 32, "float")
    assert (dtypes.float32.fmt, dtypes.float32.count, dtypes.float32.itemsize) == ("f", 1, 4)
    assert dtypes.bool.itemsize == 1
    assert dtypes.bfloat16.fmt is None
    assert dtypes.index.name == "index"
    assert dtypes.void.itemsize == 0


def test_priorities_follow_reference() -> None:
    order = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
             dtypes.int64, dtypes.uint64]  # fmt: skip
    assert [dt.priority for dt in order] == list(range(9))
    assert [dt.priority for dt in (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)] == [11, 12, 13, 14]
    assert dtypes.void.priority == -1
    assert all(dt.priority in (9, 10) for dt in dtypes.fp8s)


def test_aliases_are_the_same_objects() -> None:
    pairs = [(dtypes.char, dtypes.int8), (dtypes.uchar, dtypes.uint8), (dtypes.short, dtypes.int16),
             (dtypes.ushort, dtypes.uint16), (dtypes.int, dtypes.int32), (dtypes.uint, dtypes.uint32),
             (dtypes.long, dtypes.int64), (dtypes.ulong, dtypes.uint64), (dtypes.half, dtypes.float16),
             (dtypes.float, dtypes.float32), (dtypes.double, dtypes.float64)]  # fmt: skip
    assert all(alias is dt for alias, dt in pairs)
    assert dtypes.default_float is dtypes.float32
    assert dtypes.default_int is dtypes.int32


def test_construction_is_interned() -> None:
    assert DType.new(13, 32, "float", "f") is dtypes.float32
    assert DType(13, 32, "float", "f", 1, None) is dtypes.float32
    assert dtypes.float.vec(4) is dtypes.float.vec(4)
    assert dtypes.float.ptr(16) is PtrDType(13, 32, "float", "f", 1, None, dtypes.float, AddrSpace.GLOBAL, 1, 16)
    # spelling the default, or using keywords, still lands on the same object
    assert dtypes.float.ptr() is PtrDType(13, 32, "float", "f", 1, None, dtypes.float, AddrSpace.GLOBAL, 1)
    assert dataclasses.replace(dtypes.float.ptr(), size=8) is dtypes.float.ptr(8)


def test_vec() -> None:
    float4 = dtypes.float.vec(4)
    assert (float4.count, float4.vcount, float4.bitsize, float4.itemsize, float4.name) == (4, 4, 128, 16, "float4")
    assert float4.fmt is None
    assert float4.scalar() is dtypes.float
    assert float4.base is float4
    assert float4 != dtypes.float
    assert dtypes.float.vec(1) is dtypes.float
    assert dtypes.void.vec(4) is dtypes.void
    assert [dtypes.half.vec(2).name, dtypes.int8.vec(4).name, dtypes.uint8.vec(3).name] == ["half2", "char4", "uchar3"]


def test_vec_of_vector_asserts() -> None:
    with pytest.raises(AssertionError, match="can't vectorize a vector dtype"):
        dtypes.float.vec(4).vec(2)
    with pytest.raises(AssertionError, match="can't vectorize a vector pointer"):
        dtypes.float.ptr().vec(4).vec(2)


def test_ptr() -> None:
    ptr = dtypes.float.ptr(16)
    assert isinstance(ptr, PtrDType)
    assert (ptr.base, ptr.size, ptr.addrspace) == (dtypes.float, 16, AddrSpace.GLOBAL)
    assert (ptr.v, ptr.vcount, ptr.count) == (1, 1, 1)
    assert ptr.nbytes() == 64
    assert ptr.scalar() is ptr
    assert ptr != dtypes.float
    assert ptr != dtypes.float.ptr(8)
    assert ptr != dtypes.float.ptr(16, AddrSpace.LOCAL)
    local = dtypes.float.vec(4).ptr(8, AddrSpace.LOCAL)
    assert local.base is dtypes.float.vec(4)
    assert local.itemsize == 16


def test_ptr_vec() -> None:
    ptr = dtypes.half.ptr(32)
    vptr = ptr.vec(4)
    assert isinstance(vptr, PtrDType)
    assert (vptr.v, vptr.vcount, vptr.count, vptr.size) == (4, 4, 1, 32)
    assert vptr.scalar() is ptr
    assert vptr.base is dtypes.half
    assert ptr.vec(1) is ptr


def test_ptr_errors() -> None:
    with pytest.raises(TypeError, match="ptr: can't point to a pointer"):
        dtypes.float.ptr().ptr()
    with pytest.raises(ValueError, match="nbytes: pointer has unbounded size"):
        dtypes.float.ptr().nbytes()


@pytest.mark.parametrize(
    ("dt", "text"),
    [
        (dtypes.float32, "dtypes.float"),
        (dtypes.float16, "dtypes.half"),
        (dtypes.float64, "dtypes.double"),
        (dtypes.bfloat16, "dtypes.bfloat16"),
        (dtypes.int8, "dtypes.char"),
        (dtypes.uint8, "dtypes.uchar"),
        (dtypes.int32, "dtypes.int"),
        (dtypes.int64, "dtypes.long"),
        (dtypes.uint64, "dtypes.ulong"),
        (dtypes.bool, "dtypes.bool"),
        (dtypes.void, "dtypes.void"),
        (dtypes.index, "dtypes.index"),
        (dtypes.fp8e4m3, "dtypes.fp8e4m3"),
        (dtypes.float.vec(4), "dtypes.float.vec(4)"),
        (dtypes.float.ptr(16), "dtypes.float.ptr(16)"),
        (dtypes.float.ptr(), "dtypes.float.ptr(-1)"),
        (dtypes.float.ptr(16).vec(4), "dtypes.float.ptr(16).vec(4)"),
        (dtypes.half.vec(2).ptr(8, AddrSpace.LOCAL), "dtypes.half.vec(2).ptr(8, AddrSpace.LOCAL)"),
        (dtypes.int.ptr(4, AddrSpace.REG), "dtypes.int.ptr(4, AddrSpace.REG)"),
    ],
)
def test_repr(dt: DType, text: str) -> None:
    assert repr(dt) == text
    assert str(dt) == text


def test_repr_round_trips_through_eval() -> None:
    for dt in [*dtypes.all, dtypes.float.vec(4), dtypes.float.ptr(16, AddrSpace.LOCAL).vec(2)]:
        assert eval(repr(dt), {"dtypes": dtypes, "AddrSpace": AddrSpace}) is dt


def test_sorting() -> None:
    shuffled = [dtypes.float64, dtypes.bool, dtypes.uint64, dtypes.int8, dtypes.float16, dtypes.bfloat16, dtypes.void]
    assert sorted(shuffled) == [dtypes.void, dtypes.bool, dtypes.int8, dtypes.uint64, dtypes.float16, dtypes.bfloat16,
                                dtypes.float64]  # fmt: skip
    assert max(dtypes.floats) is dtypes.float64
    assert min(dtypes.ints) is dtypes.int8
    assert dtypes.float < dtypes.float.vec(4)


def test_hashing() -> None:
    every = [*dtypes.all, dtypes.void, dtypes.float.vec(4), dtypes.float.ptr(), dtypes.float.ptr(4).vec(2)]
    assert len(set(every)) == len(every)
    table = {dt: i for i, dt in enumerate(every)}
    assert table[dtypes.float] == every.index(dtypes.float32)
    assert hash(dtypes.float.vec(4)) == hash(DType(13, 128, "float4", None, 4, dtypes.float))


@pytest.mark.parametrize("dt", [*dtypes.all, dtypes.void, dtypes.float.vec(4), dtypes.float.ptr(16, AddrSpace.LOCAL),
                                dtypes.half.ptr(8).vec(2)], ids=repr)  # fmt: skip
def test_pickle_gives_the_same_object(dt: DType) -> None:
    assert pickle.loads(pickle.dumps(dt)) is dt


def test_invalid() -> None:
    assert InvalidType() is Invalid
    assert repr(Invalid) == "Invalid"
    assert Invalid == Invalid
    assert Invalid != 0
    assert {Invalid: 1}[InvalidType()] == 1
    assert pickle.loads(pickle.dumps(Invalid)) is Invalid


def test_addrspace() -> None:
    assert [a.name for a in AddrSpace] == ["GLOBAL", "LOCAL", "REG"]
    assert repr(AddrSpace.LOCAL) == "AddrSpace.LOCAL"


# *** the dtypes namespace ***


def test_groups() -> None:
    assert dtypes.uints == (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)
    assert dtypes.sints == (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)
    assert set(dtypes.ints) == set(dtypes.uints + dtypes.sints)
    assert set(dtypes.floats) == {*dtypes.fp8s, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64}
    assert set(dtypes.all) == {*dtypes.floats, *dtypes.ints, dtypes.bool, dtypes.index}


def test_predicates() -> None:
    assert all(dtypes.is_float(dt) and not dtypes.is_int(dt) for dt in dtypes.floats)
    assert all(dtypes.is_int(dt) and not dtypes.is_float(dt) for dt in dtypes.ints)
    assert dtypes.is_int(dtypes.index)
    assert not dtypes.is_unsigned(dtypes.index)
    assert all(dtypes.is_unsigned(dt) for dt in dtypes.uints)
    assert not any(dtypes.is_unsigned(dt) for dt in (*dtypes.sints, dtypes.bool))
    assert dtypes.is_bool(dtypes.bool)
    assert not dtypes.is_int(dtypes.bool)
    assert not dtypes.is_float(dtypes.bool)
    # vectors answer for their scalar
    assert dtypes.is_float(dtypes.half.vec(4))
    assert dtypes.is_unsigned(dtypes.uint8.vec(2))
    assert dtypes.is_bool(dtypes.bool.vec(4))


def test_fields_and_dicts() -> None:
    fields = dtypes.fields()
    assert fields["float"] is dtypes.float32
    assert fields["half"] is dtypes.float16
    assert fields["bfloat16"] is dtypes.bfloat16
    assert "void" not in fields
    assert "index" not in fields
    assert "default_float" not in fields
    assert list(DTYPES_DICT) == ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                                 "fp8e4m3", "fp8e5m2", "fp8e4m3fnuz", "fp8e5m2fnuz", "float16", "bfloat16", "float32",
                                 "float64"]  # fmt: skip
    assert set(DTYPES_DICT.values()) == set(fields.values())
    assert INVERSE_DTYPES_DICT["float"] == "float"
    assert INVERSE_DTYPES_DICT["__bf16"] == "bfloat16"
    assert INVERSE_DTYPES_DICT["unsigned char"] == "uchar"
    fields.clear()  # a copy: clearing it leaves the module's table alone
    assert "float" in dtypes.fields()


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1.5, dtypes.float32), (3, dtypes.int32), (True, dtypes.bool), ([1, 2.0], dtypes.float32),
     ((True, 2), dtypes.int32), ([[1], [True]], dtypes.int32), ([], dtypes.float32), ([False], dtypes.bool)],
)  # fmt: skip
def test_from_py(value: object, expected: DType) -> None:
    assert dtypes.from_py(value) is expected


def test_from_py_rejects_other_types() -> None:
    with pytest.raises(TypeError, match="from_py: can't infer a dtype: got str"):
        dtypes.from_py("1")


def test_as_const() -> None:
    assert dtypes.as_const(2.7, dtypes.int32) == 2
    assert type(dtypes.as_const(True, dtypes.int8)) is int
    assert type(dtypes.as_const(3, dtypes.float16)) is float
    assert dtypes.as_const(3, dtypes.bool) is True
    assert dtypes.as_const(0.0, dtypes.bool) is False
    assert dtypes.as_const(7, dtypes.index) == 7
    assert dtypes.as_const(Invalid, dtypes.index) is Invalid
    assert dtypes.as_const((1, 2.5, Invalid), dtypes.float.vec(3)) == (1.0, 2.5, Invalid)
    with pytest.raises(AssertionError, match="wrong lane count"):
        dtypes.as_const((1, 2), dtypes.float.vec(4))


@pytest.mark.parametrize("dt", dtypes.ints, ids=repr)
def test_int_min_max_match_numpy(dt: DType) -> None:
    info = np.iinfo(np.dtype(_np(dt)).name)
    assert (dtypes.min(dt), dtypes.max(dt)) == (int(info.min), int(info.max))
    assert dtypes.min(dt.vec(4)) == dtypes.min(dt)


def test_min_max_others() -> None:
    assert all(dtypes.min(dt) == -math.inf and dtypes.max(dt) == math.inf for dt in dtypes.floats)
    assert (dtypes.min(dtypes.bool), dtypes.max(dtypes.bool)) == (False, True)
    assert dtypes.max(dtypes.index) > 2**63


def test_finfo() -> None:
    expected = {dtypes.float16: (5, 10), dtypes.bfloat16: (8, 7), dtypes.float32: (8, 23), dtypes.float64: (11, 52),
                dtypes.fp8e4m3: (4, 3), dtypes.fp8e5m2: (5, 2), dtypes.fp8e4m3fnuz: (4, 3),
                dtypes.fp8e5m2fnuz: (5, 2)}  # fmt: skip
    assert {dt: dtypes.finfo(dt) for dt in dtypes.floats} == expected
    for dt in (dtypes.float16, dtypes.float32, dtypes.float64):
        info = np.finfo(np.dtype(_np(dt)).name)
        assert dtypes.finfo(dt) == (info.nexp, info.nmant)
    with pytest.raises(TypeError, match=r"finfo: not a float dtype: got dtypes\.int"):
        dtypes.finfo(dtypes.int32)


# *** to_dtype ***


@pytest.mark.parametrize(
    ("name", "expected"),
    [("float32", dtypes.float32), ("float", dtypes.float32), ("half", dtypes.float16), ("int", dtypes.int32),
     ("uchar", dtypes.uint8), ("bfloat16", dtypes.bfloat16), ("FLOAT16", dtypes.float16), ("bool", dtypes.bool),
     ("index", dtypes.index), ("void", dtypes.void)],
)  # fmt: skip
def test_to_dtype_names(name: str, expected: DType) -> None:
    assert to_dtype(name) is expected


def test_to_dtype_passes_dtypes_through() -> None:
    assert to_dtype(dtypes.half.vec(2)) is dtypes.half.vec(2)


def test_to_dtype_unknown_name() -> None:
    with pytest.raises(ValueError, match=r"^to_dtype: unknown dtype name 'flaot32': expected one of .*float32"):
        to_dtype("flaot32")


def test_to_dtype_wrong_type() -> None:
    with pytest.raises(TypeError, match="to_dtype: not a dtype or dtype name: got int"):
        to_dtype(3)  # type: ignore[arg-type]  # the wrong type is the point of the test


# *** promotion ***


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (dtypes.int8, dtypes.uint8, dtypes.int16),
        (dtypes.int16, dtypes.uint16, dtypes.int32),
        (dtypes.int32, dtypes.uint32, dtypes.int64),
        (dtypes.int64, dtypes.uint64, dtypes.float16),  # the reference lattice's answer (numpy says float64)
        (dtypes.uint64, dtypes.int8, dtypes.float16),
        (dtypes.bool, dtypes.int32, dtypes.int32),
        (dtypes.bool, dtypes.uint8, dtypes.uint8),
        (dtypes.bool, dtypes.float16, dtypes.float16),
        (dtypes.float16, dtypes.bfloat16, dtypes.float32),
        (dtypes.int64, dtypes.float16, dtypes.float16),
        (dtypes.int32, dtypes.float32, dtypes.float32),
        (dtypes.uint8, dtypes.bfloat16, dtypes.bfloat16),
        (dtypes.float32, dtypes.float64, dtypes.float64),
        (dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.float16),
        (dtypes.fp8e4m3, dtypes.int8, dtypes.float16),
        (dtypes.fp8e5m2, dtypes.bfloat16, dtypes.bfloat16),
        (dtypes.uint32, dtypes.uint64, dtypes.uint64),
    ],
)
def test_least_upper_table(a: DType, b: DType, expected: DType) -> None:
    assert least_upper_dtype(a, b) is expected
    assert least_upper_dtype(b, a) is expected


def test_least_upper_matches_numpy_where_numpy_has_no_float_fallback() -> None:
    # numpy sends int mixes that fit no int to float64, and int + float to a float wide enough for the int; the lattice
    # differs there on purpose. Everywhere else (bool, ints that fit an int, float + float) the two agree
    for a, b in itertools.product(NUMPY_DTYPES, repeat=2):
        expected = _from_np_dtype(np.promote_types(_np(a), _np(b)))
        both_floats = dtypes.is_float(a) and dtypes.is_float(b)
        if both_floats or (not dtypes.is_float(a) and not dtypes.is_float(b) and expected != dtypes.float64):
            assert least_upper_dtype(a, b) is expected, (a, b)


@given(lattice_dtype, lattice_dtype, lattice_dtype)
def test_least_upper_is_the_least_upper_bound(a: DType, b: DType, c: DType) -> None:
    # not associative: int64, uint64 and the fp8s meet at both float16 and bfloat16, and pairwise joins pick float16
    join = least_upper_dtype(a, b, c)
    assert all(least_upper_dtype(*order) is join for order in itertools.permutations((a, b, c)))
    assert least_upper_dtype(a, a) is a
    assert all(least_upper_dtype(x, join) is join for x in (a, b, c))  # every input promotes to the join
    upper_bounds = [d for d in LATTICE_DTYPES if all(least_upper_dtype(x, d) is d for x in (a, b, c))]
    assert join in upper_bounds
    assert min(upper_bounds) is join


def test_least_upper_is_not_associative_like_the_reference() -> None:
    pairwise = least_upper_dtype(least_upper_dtype(dtypes.int64, dtypes.uint64), dtypes.bfloat16)
    assert pairwise is dtypes.float32
    assert least_upper_dtype(dtypes.int64, dtypes.uint64, dtypes.bfloat16) is dtypes.bfloat16


def test_lattice_edges() -> None:
    assert promo_lattice[dtypes.bool] == [dtypes.int8, dtypes.uint8]
    assert promo_lattice[dtypes.int64] == [dtypes.float16, dtypes.bfloat16]
    assert promo_lattice[dtypes.uint64] == [dtypes.float16, dtypes.bfloat16]
    assert dtypes.float64 not in promo_lattice
    assert all(up.priority > dt.priority for dt, ups in promo_lattice.items() for up in ups)


def test_least_upper_index() -> None:
    assert all(least_upper_dtype(dtypes.index, dt) is dtypes.index for dt in (*dtypes.ints, dtypes.bool, dtypes.index))
    assert least_upper_dtype(dtypes.int32, dtypes.index, dtypes.uint64) is dtypes.index
    assert least_upper_dtype(dtypes.index, dtypes.float16) is dtypes.float16
    assert least_upper_dtype(dtypes.index, dtypes.float32) is dtypes.float32


def test_least_upper_vectors_and_pointers_use_scalars() -> None:
    assert least_upper_dtype(dtypes.float.vec(4), dtypes.half) is dtypes.float
    assert least_upper_dtype(dtypes.int8.ptr(), dtypes.uint8.vec(4).ptr(16)) is dtypes.int16
    assert least_upper_dtype(dtypes.half.ptr().vec(4)) is dtypes.half


def test_least_upper_errors() -> None:
    with pytest.raises(TypeError, match=r"least_upper_dtype: dtype can't be promoted: got dtypes\.void"):
        least_upper_dtype(dtypes.void, dtypes.int)
    with pytest.raises(TypeError, match="least_upper_dtype: no dtypes"):
        least_upper_dtype()


def test_least_upper_float() -> None:
    assert least_upper_float(dtypes.half) is dtypes.half
    assert least_upper_float(dtypes.int64) is dtypes.float32
    assert least_upper_float(dtypes.bool) is dtypes.float32
    assert least_upper_float(dtypes.float64) is dtypes.float64


@pytest.mark.parametrize(
    ("dt", "expected"),
    [(dtypes.bool, dtypes.int32), (dtypes.uint8, dtypes.uint32), (dtypes.uint64, dtypes.uint64),
     (dtypes.int8, dtypes.int32), (dtypes.int64, dtypes.int64), (dtypes.index, dtypes.index),
     (dtypes.half, dtypes.float32), (dtypes.bfloat16, dtypes.float32), (dtypes.float64, dtypes.float64),
     (dtypes.half.vec(4), dtypes.float32)],
)  # fmt: skip
def test_sum_acc_dtype(dt: DType, expected: DType) -> None:
    assert sum_acc_dtype(dt) is expected


def test_can_safe_cast_matches_numpy() -> None:
    for a, b in itertools.product(NUMPY_DTYPES, repeat=2):
        if (a, b) not in ((dtypes.int64, dtypes.float64), (dtypes.uint64, dtypes.float64)):
            assert can_safe_cast(a, b) == np.can_cast(_np(a), _np(b), "safe"), (a, b)
    # numpy calls these safe by kind; 2**53 + 1 doesn't survive, so they aren't (as in the reference system)
    assert not can_safe_cast(dtypes.int64, dtypes.float64)
    assert not can_safe_cast(dtypes.uint64, dtypes.float64)


def test_can_safe_cast_others() -> None:
    assert can_safe_cast(dtypes.uint8, dtypes.bfloat16)
    assert can_safe_cast(dtypes.int8, dtypes.bfloat16)
    assert not can_safe_cast(dtypes.int16, dtypes.bfloat16)
    assert not can_safe_cast(dtypes.float16, dtypes.bfloat16)
    assert can_safe_cast(dtypes.bfloat16, dtypes.float32)
    assert can_safe_cast(dtypes.fp8e4m3, dtypes.float16)
    assert not can_safe_cast(dtypes.fp8e4m3, dtypes.fp8e5m2)
    assert can_safe_cast(dtypes.int64, dtypes.index)
    assert not can_safe_cast(dtypes.index, dtypes.int64)
    assert can_safe_cast(dtypes.bool, dtypes.index)
    assert can_safe_cast(dtypes.half.vec(4), dtypes.float.vec(4))
    assert not can_safe_cast(dtypes.half.vec(4), dtypes.float.vec(2))


# *** truncate: C's fixed-width semantics on Python values ***


@pytest.mark.parametrize("dt", dtypes.ints, ids=repr)
def test_truncate_int_boundaries(dt: DType) -> None:
    low, high, span = int(dtypes.min(dt)), int(dtypes.max(dt)), 1 << dt.bitsize
    wrap = truncate[dt]
    assert [wrap(low), wrap(high), wrap(0)] == [low, high, 0]
    assert wrap(high + 1) == low
    assert wrap(low - 1) == high
    assert wrap(high + span) == high
    assert type(wrap(True)) is int


def test_truncate_int_examples() -> None:
    assert truncate[dtypes.int8](128) == -128
    assert truncate[dtypes.uint8](-1) == 255
    assert truncate[dtypes.uint32](2**32) == 0
    assert truncate[dtypes.int64](2**63) == -(2**63)
    assert truncate[dtypes.int32](-3.9) == -3  # float -> int truncates toward zero, as C does


@given(st.sampled_from(dtypes.ints), st.integers(-(2**70), 2**70))
def test_truncate_int_matches_ctypes(dt: DType, value: int) -> None:
    assert truncate[dt](value) == CTYPES_INTS[dt](value).value


def test_truncate_bool_index() -> None:
    assert truncate[dtypes.bool](2) is True
    assert truncate[dtypes.bool](0.0) is False
    assert truncate[dtypes.index](2**100) == 2**100


@given(st.floats(allow_nan=False, width=64))
def test_truncate_float32_matches_numpy(value: float) -> None:
    with np.errstate(over="ignore"):
        assert truncate[dtypes.float32](value) == float(np.float32(value))


@given(st.floats(allow_nan=False, width=64))
def test_truncate_float16_matches_numpy(value: float) -> None:
    with np.errstate(over="ignore"):
        assert truncate[dtypes.float16](value) == float(np.float16(value))
    assert truncate_fp16(value) == truncate[dtypes.float16](value)


def test_truncate_float_overflow_is_inf() -> None:
    assert truncate[dtypes.float32](1e39) == math.inf
    assert truncate[dtypes.float32](-1e39) == -math.inf
    assert truncate[dtypes.float16](70000) == math.inf
    assert truncate[dtypes.float16](-1e300) == -math.inf
    assert truncate[dtypes.bfloat16](1e39) == math.inf
    assert math.isnan(truncate[dtypes.float16](math.nan))
    assert truncate[dtypes.float64](3) == 3.0


def _as_f32(bits: int) -> float:
    return float(struct.unpack("f", struct.pack("I", bits))[0])


def _reference_bf16(value: float) -> float:
    """Nearest bfloat16 to float32(value), ties to even, found by comparing the two candidates exactly."""
    f32 = float(np.float32(value))
    below = struct.unpack("I", struct.pack("f", f32))[0] & 0xFFFF0000  # truncated towards zero
    above = below + 0x10000  # the next bfloat16 away from zero (infinity past the top binade)
    below_value, above_value = _as_f32(below), _as_f32(above)
    above_exact = math.copysign(2.0**128, f32) if math.isinf(above_value) else above_value  # infinity rounds as 2**128
    below_gap, above_gap = abs(f32 - below_value), abs(above_exact - f32)
    if below_gap == above_gap:
        return below_value if (below >> 16) % 2 == 0 else above_value
    return below_value if below_gap < above_gap else above_value


@given(st.floats(allow_nan=False, allow_infinity=False, width=32))
def test_truncate_bfloat16_rounds_to_nearest_even(value: float) -> None:
    assert float_to_bf16(value) == _reference_bf16(value)
    assert truncate[dtypes.bfloat16](value) == float_to_bf16(value)


def test_bfloat16_examples() -> None:
    assert float_to_bf16(1.0) == 1.0
    assert float_to_bf16(1 + 2**-8) == 1.0  # halfway between 1 and 1 + 2**-7: ties to the even one
    assert float_to_bf16(1 + 3 * 2**-8) == 1 + 2**-6
    assert float_to_bf16(3.4e38) == math.inf
    assert math.isnan(float_to_bf16(math.nan))


# *** fp8 ***


@pytest.mark.parametrize("dt", dtypes.fp8s, ids=repr)
def test_fp8_bits_round_trip(dt: DType) -> None:
    for bits in range(256):
        value = fp8_to_float(bits, dt)
        if math.isfinite(value):
            assert float_to_fp8(value, dt) == bits, (bits, value)
            assert truncate[dt](value) == value


def test_fp8_known_values() -> None:
    assert fp8_to_float(0x7E, dtypes.fp8e4m3) == 448.0
    assert math.isnan(fp8_to_float(0x7F, dtypes.fp8e4m3))
    assert fp8_to_float(0x01, dtypes.fp8e4m3) == 2**-9
    assert fp8_to_float(0x38, dtypes.fp8e4m3) == 1.0
    assert fp8_to_float(0x7B, dtypes.fp8e5m2) == 57344.0
    assert fp8_to_float(0x7C, dtypes.fp8e5m2) == math.inf
    assert fp8_to_float(0x01, dtypes.fp8e5m2) == 2**-16
    assert fp8_to_float(0xBC, dtypes.fp8e5m2) == -1.0
    assert float_to_fp8(math.nan, dtypes.fp8e5m2) == 0x7F


def test_fp8_saturates() -> None:
    assert truncate[dtypes.fp8e4m3](1000.0) == 448.0
    assert truncate[dtypes.fp8e4m3](-math.inf) == -448.0
    assert truncate[dtypes.fp8e5m2](1e9) == 57344.0
    assert float_to_fp8(1e9, dtypes.fp8e4m3) == 0x7E


@given(st.sampled_from(dtypes.fp8s), st.floats(-1000, 1000))
def test_fp8_rounds_to_nearest_even(dt: DType, value: float) -> None:
    finite = [(fp8_to_float(b, dt), b) for b in range(256) if math.isfinite(fp8_to_float(b, dt))]
    best_gap = min(abs(v - value) for v, _ in finite)
    candidates = [(v, b) for v, b in finite if abs(v - value) == best_gap]
    # of two equally near values, the one with an even bit pattern wins (both zeros are fine)
    expected = next(v for v, b in candidates if b % 2 == 0) if len({v for v, _ in candidates}) > 1 else candidates[0][0]
    assert truncate[dt](value) == expected


def test_truncate_covers_every_dtype() -> None:
    assert set(truncate) == set(dtypes.all)


# *** numpy interop and storage ***


@pytest.mark.parametrize("dt", NUMPY_DTYPES, ids=repr)
def test_numpy_round_trip(dt: DType) -> None:
    np_type = _to_np_dtype(dt)
    assert np_type is not None
    assert np.dtype(np_type).itemsize == dt.itemsize
    assert _from_np_dtype(np_type) is dt
    assert _from_np_dtype(np.dtype(np_type)) is dt


def test_numpy_names() -> None:
    assert _to_np_dtype(dtypes.float32) is np.float32
    assert _to_np_dtype(dtypes.bool) is np.bool_
    assert _to_np_dtype(dtypes.uint64) is np.uint64
    assert _from_np_dtype(np.int64) is dtypes.int64
    assert _from_np_dtype("float16") is dtypes.float16


def test_no_numpy_dtype() -> None:
    for dt in (dtypes.bfloat16, *dtypes.fp8s, dtypes.void, dtypes.index, dtypes.float.vec(4)):
        assert _to_np_dtype(dt) is None


@pytest.mark.parametrize("np_dtype", [np.complex64, np.object_, np.str_, np.float128], ids=str)
def test_from_np_dtype_unsupported(np_dtype: type) -> None:
    name = np.dtype(np_dtype).name
    with pytest.raises(TypeError, match=f"_from_np_dtype: numpy dtype has no fusegrad dtype: got {name}"):
        _from_np_dtype(np_dtype)


def test_storage_fmt() -> None:
    assert storage_fmt_for_dtype(dtypes.bfloat16) == "H"
    assert all(storage_fmt_for_dtype(dt) == "B" for dt in dtypes.fp8s)
    assert storage_fmt_for_dtype(dtypes.float32) == "f"
    assert all(struct.calcsize(str(storage_fmt_for_dtype(dt))) == dt.itemsize for dt in DTYPES_DICT.values())
