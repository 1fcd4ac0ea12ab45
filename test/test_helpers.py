"""Tests for fusegrad/helpers.py and fusegrad/diskcache.py: flags, Context, small helpers, profiling, compile cache."""

from __future__ import annotations

import ctypes
import decimal
import functools
import gzip
import hashlib
import http.server
import math
import multiprocessing
import os
import pathlib
import re
import socket
import sqlite3
import subprocess
import sys
import tarfile
import threading
import uuid
from collections.abc import Iterator
from fractions import Fraction
from typing import Any, ClassVar

import pytest

from fusegrad import diskcache as store
from fusegrad.helpers import (
    CACHEDB,
    CACHELEVEL,
    DEBUG,
    VIZ,
    Context,
    ContextVar,
    FetchError,
    GlobalCounters,
    Metadata,
    ProfilePointEvent,
    ProfileRangeEvent,
    TracingKey,
    all_int,
    all_same,
    ansilen,
    ansistrip,
    argfix,
    argsort,
    cdiv,
    ceildiv,
    cmod,
    colored,
    cpu_events,
    cpu_profile,
    data64,
    dedup,
    diskcache,
    diskcache_clear,
    diskcache_get,
    diskcache_put,
    downloads_dir,
    fetch,
    flat_to_grouped,
    flatten,
    fully_flatten,
    get_child,
    get_shape,
    get_single_element,
    getbits,
    getenv,
    i2u,
    merge_dicts,
    mv_address,
    next_power2,
    partition,
    pluralize,
    polyN,
    prod,
    profile_marker,
    round_down,
    round_up,
    size_to_str,
    strides_for_shape,
    strip_parens,
    suppress_finalizing,
    temp,
    time_to_str,
    to_function_name,
    to_mv,
    to_tuple,
    unwrap,
    word_wrap,
)

# *** flags and Context ***


@pytest.fixture
def flag_name() -> Iterator[str]:
    """A fresh flag name, unregistered again afterwards so reruns in one process don't collide."""
    name = f"FG_TEST_{uuid.uuid4().hex[:8].upper()}"
    yield name
    ContextVar._cache.pop(name, None)


def test_context_sets_and_restores() -> None:
    before = (DEBUG.value, VIZ.value)
    with Context(DEBUG=3, VIZ=1):
        assert (DEBUG.value, VIZ.value) == (3, 1)
    assert (DEBUG.value, VIZ.value) == before


def test_context_restores_on_exception() -> None:
    before = DEBUG.value

    def fail_inside() -> None:
        with Context(DEBUG=4):
            assert DEBUG.value == 4
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        fail_inside()
    assert before == DEBUG.value


def test_context_nested_and_as_decorator() -> None:
    before = DEBUG.value
    ctx = Context(DEBUG=5)

    @ctx
    def read_debug(depth: int) -> int:
        return read_debug(depth - 1) if depth else DEBUG.value

    with Context(DEBUG=2):
        assert read_debug(3) == 5
        assert DEBUG.value == 2
    assert before == DEBUG.value


def test_context_unknown_flag_names_it() -> None:
    before = DEBUG.value
    with pytest.raises(KeyError, match=r"NOT_A_FLAG.*DEBUG"), Context(DEBUG=7, NOT_A_FLAG=1):
        pass
    assert before == DEBUG.value  # nothing was set


def test_contextvar_reads_env(monkeypatch: pytest.MonkeyPatch, flag_name: str) -> None:
    monkeypatch.setenv(flag_name, "3")
    var = ContextVar(flag_name, 0)
    assert var.value == 3
    assert var
    assert var >= 3
    assert var > 2
    assert var < 4
    assert var <= 3
    assert repr(var) == f"ContextVar('{flag_name}', 3)"
    with Context(**{flag_name: 0}):
        assert not var
    assert var.value == 3


def test_contextvar_str_and_default(monkeypatch: pytest.MonkeyPatch, flag_name: str) -> None:
    var = ContextVar(flag_name, "fallback")
    assert var.value == "fallback"
    ContextVar._cache.pop(flag_name)
    monkeypatch.setenv(flag_name, "from_env")
    assert ContextVar(flag_name, "fallback").value == "from_env"


def test_contextvar_declared_twice_raises(flag_name: str) -> None:
    ContextVar(flag_name, 1)
    with pytest.raises(RuntimeError, match="declared twice"):
        ContextVar(flag_name, 1)


def test_getenv_converts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FG_TEST_GETENV", "12")
    assert getenv("FG_TEST_GETENV") == 12
    assert getenv("FG_TEST_GETENV", "x") == "12"
    assert getenv("FG_TEST_GETENV_UNSET", 5) == 5
    monkeypatch.setenv("FG_TEST_GETENV", "0")
    assert getenv("FG_TEST_GETENV", True) is False  # bools parse as ints, not bool("0")
    monkeypatch.setenv("FG_TEST_GETENV", "")
    assert getenv("FG_TEST_GETENV", 4) == 4
    monkeypatch.setenv("FG_TEST_GETENV", "abc")
    with pytest.raises(ValueError, match="FG_TEST_GETENV='abc' is not an integer"):
        getenv("FG_TEST_GETENV")


def test_flag_defaults_are_declared() -> None:
    assert CACHEDB.value.endswith("cache.db") or "CACHEDB" in os.environ
    assert isinstance(CACHELEVEL.value, int)
    assert {"DEBUG", "BEAM", "NOOPT", "VIZ", "PROFILE", "TRACK_MATCH_STATS", "DEV", "CPU_CC"} <= set(ContextVar._cache)


# *** small helpers ***


def test_colored_and_ansi() -> None:
    assert colored("hi", "red") == "\x1b[31mhi\x1b[0m"
    assert colored("hi", "RED") == "\x1b[91mhi\x1b[0m"
    assert colored("hi", "green", background=True) == "\x1b[42mhi\x1b[0m"
    assert colored("hi", None) == "hi"
    with pytest.raises(ValueError, match="unknown color 'pink'"):
        colored("hi", "pink")
    s = colored("ab", "blue") + "c" + colored("de", "YELLOW")
    assert ansistrip(s) == "abcde"
    assert ansilen(s) == 5
    assert ansistrip("\x1b[Kx") == "x"


def test_collections() -> None:
    assert prod([]) == 1
    assert prod([2, 3, 4]) == 24
    assert dedup([3, 1, 3, 2, 1]) == [3, 1, 2]
    assert partition(range(6), lambda x: x % 2 == 0) == ([0, 2, 4], [1, 3, 5])
    assert flatten([[1, 2], (3,), []]) == [1, 2, 3]
    assert fully_flatten([[1, [2, 3]], [[4]], "ab"]) == [1, 2, 3, 4, "ab"]
    assert all_same([1, 1, 1])
    assert all_same([])
    assert not all_same([1, 2])
    assert all_int((1, 2))
    assert not all_int((1, 2.0))
    assert argfix(1, 2) == (1, 2)
    assert argfix((1, 2)) == (1, 2)
    assert argfix([3]) == (3,)
    with pytest.raises(ValueError, match="only argument"):
        argfix((1, 2), 3)
    assert argsort((3, 1, 2)) == (1, 2, 0)
    assert argsort([3, 1, 2]) == [1, 2, 0]
    assert merge_dicts([{"a": 1}, {"b": 2}, {"a": 1}]) == {"a": 1, "b": 2}
    with pytest.raises(AssertionError, match="key 'a' has two values"):
        merge_dicts([{"a": 1}, {"a": 2}])
    assert get_single_element([7]) == 7
    assert unwrap(0) == 0
    with pytest.raises(AssertionError, match="unwrap"):
        unwrap(None)


def test_strings() -> None:
    assert pluralize("Kernel", 1) == "1 Kernel"
    assert pluralize("Kernel", 2) == "2 Kernels"
    assert pluralize("Kernel", 0) == "0 Kernels"
    assert to_function_name("r_4_4") == "r_4_4"
    assert to_function_name(colored("E_2", "green") + "n1") == "E_2n1"
    assert to_function_name("a-b.c") == "a2Db2Ec"
    assert strip_parens("(a+b)") == "a+b"
    assert strip_parens("(a)+(b)") == "(a)+(b)"
    assert word_wrap("x" * 10, 4) == "xxxx\nxxxx\nxx"
    assert word_wrap("ab\ncdef", 3) == "ab\ncde\nf"
    assert time_to_str(20.0).strip() == "20.00s"
    assert time_to_str(0.5, w=0) == "500.00ms"
    assert time_to_str(2e-6, w=0) == "2.00us"
    assert size_to_str(512) == "512 B"
    assert size_to_str(1500) == "1.50 KB"
    assert size_to_str(3e9) == "3.00 GB"
    assert temp("x.json").endswith("/x.json")


def c_div_mod(x: int, y: int) -> tuple[int, int]:
    """C99 semantics: the quotient truncates toward zero, the remainder has the dividend's sign."""
    q = math.trunc(Fraction(x, y))
    return q, x - q * y


@pytest.mark.parametrize("x", [-9, -7, -6, -1, 0, 1, 6, 7, 9, -(2**40) - 3])
@pytest.mark.parametrize("y", [-4, -3, -1, 1, 2, 3, 5])
def test_cdiv_cmod_match_c(x: int, y: int) -> None:
    assert (cdiv(x, y), cmod(x, y)) == c_div_mod(x, y)
    assert cdiv(x, y) * y + cmod(x, y) == x


def test_cdiv_examples() -> None:
    assert (cdiv(-7, 2), cmod(-7, 2)) == (-3, -1)
    assert (cdiv(7, -2), cmod(7, -2)) == (-3, 1)
    assert cdiv(5, 0) == 0


def test_division_by_zero_is_zero_everywhere() -> None:
    """x // 0 and x % 0 have one answer, 0 (KERNEL_IR.md §5): the helpers, constant folding and both backends."""
    from fusegrad import Tensor
    from fusegrad.dtype import dtypes
    from fusegrad.uop import Ops
    from fusegrad.uop.alu import exec_alu

    assert (cdiv(5, 0), cmod(5, 0), cdiv(-5, 0), cmod(-5, 0)) == (0, 0, 0, 0)
    assert exec_alu(Ops.IDIV, dtypes.int, (5, 0)) == 0
    assert exec_alu(Ops.MOD, dtypes.int, (5, 0)) == 0
    for device in ("CPU", "PYTHON"):
        x, zero = Tensor([5, -5], device=device), Tensor([0, 0], device=device)
        assert (x // zero).tolist() == [0, 0], device
        assert (x % zero).tolist() == [0, 0], device


def test_numbers() -> None:
    assert ceildiv(7, 2) == 4
    assert ceildiv(-7, 2) == -3
    assert round_up(13, 8) == 16
    assert round_up(16, 8) == 16
    assert data64(0x1234_5678_9ABC_DEF0) == (0x12345678, 0x9ABCDEF0)
    assert getbits(0b1011_0000, 4, 7) == 0b1011
    assert i2u(8, -1) == 255
    assert i2u(8, 5) == 5
    assert polyN(2.0, [1.0, 0.0, -1.0]) == 3.0


def test_get_child() -> None:
    class Layer:
        def __init__(self) -> None:
            self.weight = [10, 20]

    model = {"layers": [Layer()]}
    assert get_child(model, "layers.0.weight.1") == 20


def test_memoryview_roundtrip() -> None:
    buf = bytearray(b"abcd")
    view = to_mv(mv_address(memoryview(buf)), 4)
    view[0] = ord("z")
    assert bytes(buf) == b"zbcd"
    assert mv_address(memoryview(buf)) == ctypes.addressof(ctypes.c_char.from_buffer(buf))


def test_suppress_finalizing_reraises_when_alive() -> None:
    @suppress_finalizing
    def boom() -> int:
        raise AttributeError("gone")

    with pytest.raises(AttributeError, match="gone"):
        boom()


def test_metadata_tracing_key_counters() -> None:
    meta = Metadata("add", "x.py:3")
    assert str(meta) == "add"
    assert repr(meta) == "add - x.py:3"
    assert repr(Metadata("mul", "", backward=True)) == "mul bw"
    assert hash(meta) == hash(Metadata("add", "x.py:3"))
    assert meta != Metadata("add", "y.py:1")
    assert TracingKey("k", (1,)).keys == (1,)
    GlobalCounters.global_ops, GlobalCounters.kernel_count, GlobalCounters.mem_used = 5, 2, 100
    GlobalCounters.reset()
    assert (GlobalCounters.global_ops, GlobalCounters.kernel_count, GlobalCounters.mem_used) == (0, 0, 100)
    GlobalCounters.mem_used = 0


# *** profiling ***


@pytest.fixture
def clean_events() -> Iterator[None]:
    """Run with an empty cpu_events, then put back what other tests recorded."""
    saved = list(cpu_events)
    cpu_events.clear()
    yield
    cpu_events[:] = saved


@pytest.mark.usefixtures("clean_events")
def test_cpu_profile_records_when_profile_on() -> None:
    with Context(PROFILE=1), cpu_profile("work", device="CPU") as timer:
        assert timer.en is None
    assert len(cpu_events) == 1
    event = cpu_events[0]
    assert isinstance(event, ProfileRangeEvent)
    assert (event.device, event.name, event.is_copy) == ("CPU", "work", False)
    assert event.en is not None
    assert isinstance(event.st, decimal.Decimal)
    assert event.st <= event.en
    assert timer.en == event.en


@pytest.mark.usefixtures("clean_events")
def test_cpu_profile_off_or_hidden_records_nothing() -> None:
    with Context(PROFILE=0), cpu_profile("work"):
        pass
    with Context(PROFILE=1), cpu_profile("hidden", display=False):
        pass
    assert cpu_events == []


@pytest.mark.usefixtures("clean_events")
def test_cpu_profile_records_when_body_raises() -> None:
    with pytest.raises(RuntimeError, match="fail"), Context(PROFILE=1), cpu_profile(TracingKey("k")):
        raise RuntimeError("fail")
    assert len(cpu_events) == 1
    assert isinstance(cpu_events[0], ProfileRangeEvent)
    assert cpu_events[0].name == TracingKey("k")


@pytest.mark.usefixtures("clean_events")
def test_profile_marker() -> None:
    with Context(PROFILE=1):
        profile_marker("step 1")
        profile_marker("step 2", color="red")
    assert [e.arg for e in cpu_events if isinstance(e, ProfilePointEvent)] == [
        {"name": "step 1", "color": "gray"},
        {"name": "step 2", "color": "red"},
    ]
    first, second = cpu_events
    assert isinstance(first, ProfilePointEvent)
    assert isinstance(second, ProfilePointEvent)
    assert (first.device, first.name, first.key) == ("TINY", "marker", None)
    assert first.ts <= second.ts


# *** persistent cache ***


@pytest.fixture
def cache_path(tmp_path: pathlib.Path) -> Iterator[str]:
    path = str(tmp_path / "cache" / "c.db")
    with Context(CACHEDB=path, CACHELEVEL=2):
        yield path
    store.close_all()


VALUES: list[store.CacheValue] = [
    b"\x00\xffbinary",
    b"",
    "text ✓",
    "",
    0,
    -(2**70),
    1.5,
    math.inf,
    True,
    False,
    [1, "a", [True, None], {"k": 2.5}],
    {"nested": {"list": [1, 2], "none": None}},
]


@pytest.mark.usefixtures("cache_path")
def test_diskcache_roundtrips_every_value_type() -> None:
    for i, val in enumerate(VALUES):
        assert diskcache_put("values", ("v", i), val) == val
    for i, val in enumerate(VALUES):
        got = diskcache_get("values", ("v", i))
        assert got == val
        assert type(got) is type(val)
    assert diskcache_put("values", "none", None) is None
    assert diskcache_get("values", "none") is None
    assert diskcache_get("values", "missing") is None
    assert diskcache_get("no_such_table", "k") is None


@pytest.mark.usefixtures("cache_path")
def test_diskcache_keys_are_typed_and_tables_separate() -> None:
    keys: list[store.CacheKey] = [1, True, 1.0, "1", b"1", (1,), [1], {"a": 1}, {"a": (1, b"x")}, None]
    for i, key in enumerate(keys):
        diskcache_put("keys", key, i)
    assert [diskcache_get("keys", key) for key in keys] == list(range(len(keys)))
    diskcache_put("other table!", 1, "elsewhere")
    assert diskcache_get("keys", 1) == 0
    assert diskcache_get("other table!", 1) == "elsewhere"
    diskcache_put("keys", 1, "replaced")
    assert diskcache_get("keys", 1) == "replaced"


@pytest.mark.usefixtures("cache_path")
def test_diskcache_rejects_unsupported_types() -> None:
    with pytest.raises(TypeError, match="unsupported value type: got tuple"):
        diskcache_put("t", "k", (1, 2))  # type: ignore[type-var]  # deliberately wrong
    with pytest.raises(TypeError, match="unsupported value type: got dict"):
        diskcache_put("t", "k", {1: "int key"})  # type: ignore[type-var]  # deliberately wrong
    with pytest.raises(TypeError, match="unsupported key type: got object"):
        diskcache_get("t", object())  # type: ignore[arg-type]  # deliberately wrong


@pytest.mark.usefixtures("cache_path")
def test_diskcache_clear() -> None:
    diskcache_put("t", "k", b"v")
    diskcache_clear()
    assert diskcache_get("t", "k") is None
    diskcache_put("t", "k", b"again")
    assert diskcache_get("t", "k") == b"again"


@pytest.mark.usefixtures("cache_path")
def test_diskcache_decorator() -> None:
    calls: list[int] = []

    @diskcache
    def square(x: int) -> int:
        calls.append(x)
        return x * x

    assert square(4) == 16
    assert square(4) == 16
    assert square(x=5) == 25
    assert calls == [4, 5]


def test_diskcache_without_sqlite3_is_skipped_with_one_warning(
    cache_path: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Python built without sqlite3 (its import is deferred to the first cache access) runs without the cache."""

    def missing() -> None:
        raise ImportError("No module named '_sqlite3'")

    monkeypatch.setattr(store, "_sqlite3", missing)
    monkeypatch.setattr(store, "_warned", set())
    assert diskcache_put("t", "k", b"v") == b"v"
    assert diskcache_get("t", "k") is None
    err = capsys.readouterr().err
    assert err.count("this Python has no sqlite3") == 1, err
    assert not os.path.exists(cache_path)


def test_cachelevel_zero_disables(cache_path: str) -> None:
    with Context(CACHELEVEL=0):
        assert diskcache_put("t", "k", b"v") == b"v"
        assert diskcache_get("t", "k") is None
        assert not os.path.exists(cache_path)  # the cache file isn't even opened
    assert diskcache_get("t", "k") is None  # nothing was written


def corrupt_and_check(path: str, damage: bytes | None, capsys: pytest.CaptureFixture[str]) -> None:
    """Fill the cache, damage the file (garbage bytes, or truncation when None), check it heals."""
    for i in range(300):
        diskcache_put("t", i, os.urandom(1000))
    store.close_all()  # the last close folds the WAL into the main file
    if damage is None:
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
    else:
        pathlib.Path(path).write_bytes(damage)
    assert [diskcache_get("t", i) for i in range(300)] == [None] * 300
    assert "is corrupt" in capsys.readouterr().err
    moved = [p for p in os.listdir(os.path.dirname(path)) if p.startswith("c.db.corrupt-")]
    assert len(moved) == 1
    diskcache_put("t", 1, b"fresh")
    assert diskcache_get("t", 1) == b"fresh"
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_garbage_cache_file_is_moved_aside(cache_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    corrupt_and_check(cache_path, b"this is not a database" * 100, capsys)


def test_truncated_cache_file_is_moved_aside(cache_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    corrupt_and_check(cache_path, None, capsys)


# The worker runs as source through exec: spawned children re-import a target by module name, and pytest's importlib
# mode gives this file a name (test.test_helpers) that a fresh interpreter can't import.
WRITE_KEYS = """
from fusegrad.helpers import Context, diskcache_get, diskcache_put
start.wait(30)
with Context(CACHEDB=path):
    for i in range(200):
        diskcache_put("race", (worker, i), f"{worker}:{i}")
        if i % 50 == 0:
            assert diskcache_get("race", (worker, i)) == f"{worker}:{i}"
"""


def test_two_processes_write_concurrently(cache_path: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [
        ctx.Process(target=exec, args=(WRITE_KEYS, {"path": cache_path, "worker": w, "start": start})) for w in range(2)
    ]
    for proc in procs:
        proc.start()
    start.set()
    for proc in procs:
        proc.join(120)
    assert [proc.exitcode for proc in procs] == [0, 0]
    for w in range(2):
        assert [diskcache_get("race", (w, i)) for i in range(200)] == [f"{w}:{i}" for i in range(200)]


def put_after_fork(key: str) -> None:
    diskcache_put("fork", key, "child")


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_connection_reopened_after_fork(cache_path: str) -> None:
    diskcache_put("fork", "parent", "parent")  # the parent holds an open connection when it forks
    proc = multiprocessing.get_context("fork").Process(target=put_after_fork, args=("child",))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    assert diskcache_get("fork", "child") == "child"
    assert diskcache_get("fork", "parent") == "parent"


# *** fetch: a local 127.0.0.1 server, never the internet ***


class _CountingHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the test's folder and counts GETs per path (to see when fetch used its cache)."""

    hits: ClassVar[dict[str, int]] = {}

    def do_GET(self) -> None:  # the stdlib's hook name
        _CountingHandler.hits[self.path] = _CountingHandler.hits.get(self.path, 0) + 1
        super().do_GET()

    def log_message(self, *args: Any) -> None:  # quiet: no request lines on stderr
        pass


@pytest.fixture
def served(tmp_path: pathlib.Path) -> Iterator[tuple[str, pathlib.Path]]:
    """(base URL of a 127.0.0.1 server over a folder, that folder); downloads go to tmp_path/cache."""
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(_CountingHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _CountingHandler.hits.clear()
    try:
        with Context(DOWNLOADS_DIR=str(tmp_path / "cache")):
            yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_fetch_downloads_once_then_reads_the_cache(served: tuple[str, pathlib.Path]) -> None:
    base, root = served
    (root / "w.bin").write_bytes(b"weights" * 1000)
    path = fetch(f"{base}/w.bin")
    assert path.read_bytes() == b"weights" * 1000
    assert path.parent == downloads_dir()
    assert fetch(f"{base}/w.bin") == path
    assert _CountingHandler.hits == {"/w.bin": 1}
    fetch(f"{base}/w.bin", allow_caching=False)
    assert _CountingHandler.hits == {"/w.bin": 2}
    with Context(DISABLE_HTTP_CACHE=1):
        fetch(f"{base}/w.bin")
    assert _CountingHandler.hits == {"/w.bin": 3}
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".part")], "no temporary files left behind"


def test_fetch_name_subdir_and_headers(served: tuple[str, pathlib.Path]) -> None:
    base, root = served
    (root / "a.txt").write_bytes(b"abc")
    assert fetch(f"{base}/a.txt", name="a.txt", subdir="sets") == downloads_dir() / "sets" / "a.txt"
    with_header = fetch(f"{base}/a.txt", name="a.txt", headers={"X-Token": "1"})
    assert with_header.name.startswith("a.txt_")  # its own file: headers may change what the server sends
    explicit = downloads_dir() / "elsewhere" / "b.txt"
    assert fetch(f"{base}/a.txt", name=explicit) == explicit
    assert explicit.read_bytes() == b"abc"
    assert fetch("/some/local/file") == pathlib.Path("/some/local/file")


def test_fetch_gunzip(served: tuple[str, pathlib.Path]) -> None:
    base, root = served
    (root / "d.gz").write_bytes(gzip.compress(b"0123456789" * 500))
    path = fetch(f"{base}/d.gz", gunzip=True)
    assert path.name.endswith(".gunzip")
    assert path.read_bytes() == b"0123456789" * 500


def test_fetch_checks_sha256(served: tuple[str, pathlib.Path]) -> None:
    base, root = served
    (root / "s.bin").write_bytes(b"payload")
    good = hashlib.sha256(b"payload").hexdigest()
    with pytest.raises(RuntimeError, match=r"fetch: sha256 mismatch for http://127\.0\.0\.1:\d+/s\.bin"):
        fetch(f"{base}/s.bin", sha256="0" * 64)
    assert not downloads_dir().exists() or not list(downloads_dir().iterdir()), "a bad download is not kept"
    path = fetch(f"{base}/s.bin", sha256=good)
    path.write_bytes(b"tampered")  # a cached copy that no longer matches is fetched again
    assert fetch(f"{base}/s.bin", sha256=good).read_bytes() == b"payload"
    assert _CountingHandler.hits["/s.bin"] == 3


def test_fetch_extracts_tar(served: tuple[str, pathlib.Path], tmp_path: pathlib.Path) -> None:
    base, root = served
    member = tmp_path / "inner.txt"
    member.write_text("inside")
    with tarfile.open(root / "pack.tar", "w") as archive:
        archive.add(member, arcname="pack/inner.txt")
    folder = fetch(f"{base}/pack.tar", extract=True)
    assert folder.name.endswith(".extract")
    assert (folder / "pack" / "inner.txt").read_text() == "inside"
    assert fetch(f"{base}/pack.tar", extract=True) == folder


def test_fetch_http_error_names_the_url(served: tuple[str, pathlib.Path]) -> None:
    base, _ = served
    with pytest.raises(FetchError, match=r"fetch: cannot download http://127\.0\.0\.1:\d+/missing\.bin: HTTP 404"):
        fetch(f"{base}/missing.bin")


def test_fetch_unreachable_url_raises_one_clear_error(tmp_path: pathlib.Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on: bound, then closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/w.bin"
    with Context(DOWNLOADS_DIR=str(tmp_path)), pytest.raises(OSError, match=f"fetch: cannot download {re.escape(url)}"):
        fetch(url)
    assert list(tmp_path.iterdir()) == [], "nothing is left in the cache"


def test_importing_helpers_reaches_for_no_network() -> None:
    code = "import sys, fusegrad.helpers; print('urllib.request' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert out.stderr == ""


def test_import_leaves_what_the_first_cache_access_needs_unloaded(tmp_path: pathlib.Path) -> None:
    """hashlib (OpenSSL), sqlite3, json and tempfile load at their first use (~25 ms of `import fusegrad` before), and
    the default PROFILEPATH is still the temp folder's file, found at its first read."""
    env = {k: v for k, v in os.environ.items() if k != "PROFILEPATH"} | {"CACHEDB": str(tmp_path / "c.db")}
    code = (
        "import sys, fusegrad\n"
        "print(sorted(m for m in ('hashlib', 'sqlite3', 'json', 'tempfile') if m in sys.modules))\n"
        "import pathlib, tempfile\n"
        "from fusegrad.helpers import PROFILEPATH, Context, diskcache_get, diskcache_put\n"
        "print(PROFILEPATH.value == str(pathlib.Path(tempfile.gettempdir()) / 'fusegrad_profile.fgprof'))\n"
        "with Context(PROFILEPATH='elsewhere.fgprof'): print(PROFILEPATH.value)\n"
        "diskcache_put('t', ('k', 1), {'v': [1, 2]}); print(diskcache_get('t', ('k', 1)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.splitlines() == ["[]", "True", "elsewhere.fgprof", "{'v': [1, 2]}"], out.stdout
    assert out.stderr == ""


# *** small helpers the reference exports ***


def test_rounding_and_powers() -> None:
    assert [round_down(7, 4), round_down(-1, 4), round_down(8, 4)] == [4, -4, 8]
    assert [next_power2(x) for x in (0, 1, 5, 8, 9)] == [1, 1, 8, 8, 16]


def test_shapes_and_strides() -> None:
    assert strides_for_shape((2, 1, 3)) == (3, 0, 1)
    assert strides_for_shape(()) == ()
    assert get_shape([[1, 2], [3, 4], [5, 6]]) == (3, 2)
    assert get_shape("ab") == ()
    assert get_shape([[], []]) == (2, 0)
    with pytest.raises(ValueError, match="get_shape: inhomogeneous shape"):
        get_shape([[1, 2], [3]])
    assert to_tuple(3) == (3,)
    assert to_tuple((1, 2)) == (1, 2)
    assert flat_to_grouped((1, 2, 3, 4)) == ((3, 4), (1, 2))


# *** the collector's threshold (raise_gc_threshold, at import) ***


def _threshold_after_import(setup: str, env: dict[str, str]) -> tuple[int, ...]:
    code = f"import gc\n{setup}\nimport fusegrad\nprint(*gc.get_threshold())"
    base = {k: v for k, v in os.environ.items() if k != "GC_THRESHOLD"}
    proc = subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    return tuple(int(x) for x in proc.stdout.split())


def test_import_raises_the_young_generation_threshold() -> None:
    assert _threshold_after_import("gc.set_threshold(700, 10, 10)", {}) == (10_000, 10, 10)
    assert _threshold_after_import("gc.set_threshold(700, 5, 3)", {"GC_THRESHOLD": "2000"}) == (2000, 5, 3)


def test_import_leaves_a_chosen_threshold_alone() -> None:
    assert _threshold_after_import("gc.set_threshold(700, 10, 10)", {"GC_THRESHOLD": "0"}) == (700, 10, 10)
    assert _threshold_after_import("gc.set_threshold(50_000, 10, 10)", {}) == (50_000, 10, 10)  # higher already
    assert _threshold_after_import("gc.set_threshold(0)", {}) == (0, 10, 10)  # automatic collection off: stays off
