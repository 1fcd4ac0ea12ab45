"""Tests for fusegrad/runtime/ops_python.py: hand-built linear programs (docs/KERNEL_IR.md §2) interpreted with C
semantics and compared to numpy, and the JSON serialisation that carries them from renderer to program."""

from __future__ import annotations

import json
import os
import pickle
import struct
import subprocess
import sys

import numpy as np
import pytest

from fusegrad.device import Buffer, Device
from fusegrad.dtype import AddrSpace, DType, Invalid, dtypes
from fusegrad.helpers import Context, ProfileRangeEvent, cpu_events
from fusegrad.runtime.ops_python import (
    PythonProgram,
    bitcast_value,
    cast_value,
    decode_arg,
    decode_dtype,
    deserialize_program,
    encode_arg,
    encode_dtype,
    serialize_program,
)
from fusegrad.uop import AxisType, Ops
from fusegrad.uop.ops import UOp

f32, i32 = dtypes.float32, dtypes.int32


def glob(slot: int, dt: DType, size: int) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dt.ptr(size), arg=slot)


def idx(x: int) -> UOp:
    return UOp.const(dtypes.index, x)


def end(rng: UOp) -> UOp:
    return UOp(Ops.END, dtypes.void, (rng,))


def buffer(values: list[float] | list[int], dt: DType) -> Buffer:
    array = np.array(values, dtype=np.float32 if dt == f32 else np.int32)
    return Buffer("PYTHON", len(values), dt, initial_value=array.tobytes())


def run(uops: list[UOp], *bufs: Buffer, vals: tuple[int, ...] = ()) -> None:
    """Through the device's compiler and runtime, as CompiledRunner does."""
    lib = Device["PYTHON"].compiler.compile_cached(serialize_program(uops))
    Device["PYTHON"].runtime("test", lib)(*[b.ensure_allocated()._buf for b in bufs], vals=vals)


def elementwise(op: Ops, dt: DType, n: int) -> list[UOp]:
    """out[i] = a[i] <op> b[i] for i < n."""
    out, a, b = glob(0, dt, n), glob(1, dt, n), glob(2, dt, n)
    rng = UOp.range(n, 0)
    load_a, load_b = a.index(rng).load(), b.index(rng).load()
    value = load_a.alu(op, load_b)
    store = out.index(rng).store(value)
    return [out, a, b, idx(n), rng, a.index(rng), load_a, b.index(rng), load_b, value, out.index(rng), store, end(rng)]


def test_elementwise_add_matches_numpy() -> None:
    a, b = [1.5, -2.0, 3.25, 1e8], [0.25, 4.0, -1.0, 1.0]
    out = Buffer("PYTHON", 4, f32)
    run(elementwise(Ops.ADD, f32, 4), out, buffer(a, f32), buffer(b, f32))
    np.testing.assert_array_equal(out.numpy(), np.array(a, np.float32) + np.array(b, np.float32))


def test_float32_rounds_after_every_op() -> None:
    a, b = [0.1, 1 / 3, 16777216.0], [0.2, 1 / 3, 1.0]
    out = Buffer("PYTHON", 3, f32)
    run(elementwise(Ops.MUL, f32, 3), out, buffer(a, f32), buffer(b, f32))
    np.testing.assert_array_equal(out.numpy(), np.array(a, np.float32) * np.array(b, np.float32))


def test_int32_overflow_wraps() -> None:
    a, b = [2**31 - 1, -(2**31), 100000, 7], [1, -1, 100000, -9]
    with np.errstate(over="ignore"):
        expected_sum = (np.array(a, np.int32) + np.array(b, np.int32)).tolist()
        expected_product = (np.array(a, np.int32) * np.array(b, np.int32)).tolist()
    for op, expected in ((Ops.ADD, expected_sum), (Ops.MUL, expected_product)):
        out = Buffer("PYTHON", 4, i32)
        run(elementwise(op, i32, 4), out, buffer(a, i32), buffer(b, i32))
        assert out.numpy().tolist() == expected
    assert expected_sum[:2] == [-(2**31), 2**31 - 1]


def test_int_division_truncates_toward_zero() -> None:
    a, b = [-7, 7, -7, 7], [2, -2, -2, 2]
    quotient, remainder = Buffer("PYTHON", 4, i32), Buffer("PYTHON", 4, i32)
    run(elementwise(Ops.IDIV, i32, 4), quotient, buffer(a, i32), buffer(b, i32))
    run(elementwise(Ops.MOD, i32, 4), remainder, buffer(a, i32), buffer(b, i32))
    assert quotient.numpy().tolist() == [-3, -3, 3, 3]
    assert remainder.numpy().tolist() == np.fmod(a, b).tolist() == [-1, 1, -1, 1]


def sum_rows(rows: int, cols: int) -> list[UOp]:
    """out[i] = sum_j a[i*cols + j], lowered as codegen does: a DEFINE_REG accumulator inside the row loop."""
    out, a = glob(0, f32, rows), glob(1, f32, rows * cols)
    row, col = UOp.range(rows, 0), UOp.range(cols, 1, AxisType.REDUCE)
    acc = UOp(Ops.DEFINE_REG, f32.ptr(1, AddrSpace.REG), arg=0)
    zero = UOp.const(f32, 0.0)
    init = UOp(Ops.AFTER, acc.dtype, (acc, row)).index(idx(0)).store(zero)
    running = UOp(Ops.AFTER, acc.dtype, (acc, init, row, col)).index(idx(0))
    offset = row * cols
    address = offset + col
    value = a.index(address).load()
    total = running.load() + value
    update = running.store(total)
    result = UOp(Ops.AFTER, acc.dtype, (acc, update, row)).index(idx(0))
    store = out.index(row).store(result.load())
    return [out, a, idx(0), idx(cols), idx(rows), row, acc, zero, init.src[0].src[0], init.src[0], init, offset, col,
            running.src[0], running, running.load(), address, a.index(address), value, total, update, end(col),
            result.src[0], result, result.load(), out.index(row), store, end(row), UOp.sink(store)]  # fmt: skip


def test_sum_with_define_reg_accumulator() -> None:
    values = np.arange(12, dtype=np.float32) * 0.1
    out = Buffer("PYTHON", 3, f32)
    run(sum_rows(3, 4), out, buffer(values.tolist(), f32))
    expected = np.zeros(3, np.float32)
    for j in range(4):  # the same order of float32 additions as the loop
        expected += values.reshape(3, 4)[:, j]
    np.testing.assert_array_equal(out.numpy(), expected)


def test_gated_load_gives_zero() -> None:
    out, a = glob(0, f32, 4), glob(1, f32, 4)
    rng = UOp.range(4, 0)
    valid = rng < 2
    gated = a.index(rng, valid)
    value = gated.load()
    store = out.index(rng).store(value)
    uops = [out, a, idx(2), idx(4), rng, valid, gated, value, out.index(rng), store, end(rng)]
    result = Buffer("PYTHON", 4, f32)
    run(uops, result, buffer([5.0, 6.0, 7.0, 8.0], f32))
    assert result.numpy().tolist() == [5.0, 6.0, 0.0, 0.0]


def variable_fill(n: UOp) -> list[UOp]:
    """out[i] = 7 for i < n, n a DEFINE_VAR."""
    out = glob(0, i32, 4)
    rng = UOp(Ops.RANGE, dtypes.index, (n,), (0, AxisType.LOOP))
    seven = UOp.const(i32, 7)
    store = out.index(rng).store(seven)
    return [out, n, rng, seven, out.index(rng), store, end(rng)]


def test_variables_and_empty_loops() -> None:
    n = UOp.variable("n", 0, 4)
    out = buffer([1, 1, 1, 1], i32)
    run(variable_fill(n), out, vals=(3,))
    assert out.numpy().tolist() == [7, 7, 7, 1]
    empty = buffer([1, 1, 1, 1], i32)
    run(variable_fill(n), empty, vals=(0,))
    assert empty.numpy().tolist() == [1, 1, 1, 1]
    with pytest.raises(ValueError, match="got 0 variable values, expected 1"):
        run(variable_fill(n), empty)


def test_out_of_bounds_access_is_an_error() -> None:
    with pytest.raises(IndexError, match=r"out-of-bounds access data1\[4\] \(x1\): it has 4 elements"):
        run(elementwise(Ops.ADD, f32, 5), Buffer("PYTHON", 5, f32), buffer([0.0] * 4, f32), buffer([0.0] * 5, f32))


def test_casts_follow_c() -> None:
    assert [cast_value(x, i32) for x in (-2.7, 2.7, -0.5, 3.99)] == [-2, 2, 0, 3]
    assert cast_value(2**32 + 5, i32) == 5
    assert cast_value(-1, dtypes.uint8) == 255
    assert cast_value(0.1, f32) == struct.unpack("f", struct.pack("f", 0.1))[0]
    assert cast_value(3, dtypes.bool) is True
    assert cast_value((1.5, -1.5), i32.vec(2)) == (1, -1)
    assert bitcast_value(1.0, f32, dtypes.uint32) == 0x3F800000
    assert bitcast_value(-1, i32, dtypes.uint32) == 2**32 - 1
    assert bitcast_value(0x3F80, dtypes.uint16, dtypes.bfloat16) == 1.0
    with pytest.raises(TypeError, match="bitcast: size mismatch"):
        bitcast_value(1.0, f32, dtypes.int64)


def test_cast_and_bitcast_in_a_program() -> None:
    out, a = glob(0, dtypes.uint32, 2), glob(1, f32, 2)
    rng = UOp.range(2, 0)
    value = a.index(rng).load()
    bits = value.bitcast(dtypes.uint32)
    store = out.index(rng).store(bits)
    result = Buffer("PYTHON", 2, dtypes.uint32)
    run(
        [out, a, idx(2), rng, a.index(rng), value, bits, out.index(rng), store, end(rng)],
        result,
        buffer([1.0, -2.5], f32),
    )
    assert result.numpy().tolist() == np.array([1.0, -2.5], np.float32).view(np.uint32).tolist()


def test_profile_records_a_range_event() -> None:
    cpu_events.clear()
    with Context(PROFILE=1):
        run(elementwise(Ops.ADD, f32, 1), Buffer("PYTHON", 1, f32), buffer([1.0], f32), buffer([2.0], f32))
    assert [(e.device, e.name) for e in cpu_events if isinstance(e, ProfileRangeEvent)] == [("PYTHON", "test")]
    cpu_events.clear()


# *** serialisation ***


@pytest.mark.parametrize(
    "dt",
    [f32, dtypes.bool, dtypes.index, dtypes.void, dtypes.bfloat16, f32.vec(4), f32.ptr(16),
     f32.ptr(1, AddrSpace.REG), i32.vec(2).ptr(8), dtypes.half.ptr(-1, AddrSpace.LOCAL).vec(4)],
)  # fmt: skip
def test_dtypes_round_trip(dt: DType) -> None:
    assert decode_dtype(json.loads(json.dumps(encode_dtype(dt)))) is dt


def test_args_round_trip() -> None:
    for arg in (None, True, 3, -0.5, float("inf"), "n", (0, AxisType.REDUCE), ("n", 1, 10), (1, 2), Ops.ADD, Invalid):
        assert decode_arg(json.loads(json.dumps(encode_arg(Ops.CONST, arg)))) == arg
    assert encode_arg(Ops.SINK, object()) is None  # SINK's KernelInfo is never read
    with pytest.raises(TypeError, match="CUSTOM has an arg that can't be serialised"):
        encode_arg(Ops.CUSTOM, object())


def test_serialised_program_is_json_and_round_trips() -> None:
    uops = elementwise(Ops.ADD, f32, 4)
    text = serialize_program(uops)
    assert json.loads(text)["format"] == "fusegrad-linear/1"
    assert text.count("\n") == len(uops) + 2
    instrs = deserialize_program(text.encode())
    assert [(i.op, i.dtype, i.arg) for i in instrs] == [(u.op, u.dtype, u.arg) for u in uops]
    assert [i.src for i in instrs] == [tuple(uops.index(s) for s in u.src) for u in uops]


def test_bad_programs_are_rejected() -> None:
    with pytest.raises(ValueError, match="missing or listed after it"):
        serialize_program(elementwise(Ops.ADD, f32, 4)[1:])
    with pytest.raises(ValueError, match="not a fusegrad-linear/1 program"):
        deserialize_program(pickle.dumps([1, 2, 3]))  # never unpickled
    with pytest.raises(ValueError, match="not a fusegrad-linear/1 program"):
        deserialize_program(b'{"uops": []}')
    bad = [b'["NOT_AN_OP", "float32", [], null]', b'["CONST", "float32", [0], 1.0]', b'["CONST", "float99", [], 1.0]']
    for node in bad:
        with pytest.raises(ValueError, match=r"deserialize: (bad op at position 0|not a dtype)"):
            deserialize_program(b'{"format": "fusegrad-linear/1", "uops": [' + node + b"]}")
    special = UOp(Ops.SPECIAL, dtypes.index, (idx(4),), "gidx0")
    with pytest.raises(NotImplementedError, match="can't interpret SPECIAL"):
        PythonProgram(Device["PYTHON"], "k", serialize_program([idx(4), special]).encode())


def test_crash_report_prints_the_program_before_it_runs() -> None:
    code = "from fusegrad import Tensor\nt = Tensor([1, 2])\nprint((t * 3).tolist())"
    env = {**os.environ, "CRASH_REPORT": "1", "DEV": "PYTHON"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[3, 6]"
    assert "CRASH_REPORT: source of E_2:" in proc.stderr
    assert '"format": "fusegrad-linear/1"' in proc.stderr
    assert proc.stderr.rstrip().endswith("CRASH_REPORT: running E_2")
