"""Stage 0 of the pipeline: every env flag (ContextVars, read at call time), Context to scope them, profile events,
small pure helpers used by every later stage, and the persistent compile cache (diskcache_get / diskcache_put).

Imports only the stdlib, so any module can import it first.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import decimal
import functools
import gc
import getpass
import operator
import os
import pathlib
import re
import string
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ClassVar, Generic, ParamSpec, TypeGuard, TypeVar, cast, overload

from fusegrad.diskcache import CacheKey, CacheValue, cache_clear, cache_get, cache_put

T = TypeVar("T")
U = TypeVar("U")
P = ParamSpec("P")
V = TypeVar("V", bound=CacheValue)
FlagT = TypeVar("FlagT", int, str)  # a flag holds an int or a str, chosen by its default

# *** environment ***


def _parse_int(key: str, raw: str, default: int) -> int:
    if raw.strip() == "":
        return default  # `DEBUG= python x.py` means unset, not a crash
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"getenv: {key}={raw!r} is not an integer: expected an int like its default") from None
    return bool(value) if isinstance(default, bool) else value


@functools.cache
def _cpuinfo() -> str:
    """The first CPU's block of Linux's /proc/cpuinfo ("" where there is none): read once."""
    try:
        return pathlib.Path("/proc/cpuinfo").read_text(errors="replace").split("\n\n")[0]
    except OSError:
        return ""


def _cpuinfo_field(name: str) -> str:
    line = re.search(rf"^{name}\s*:(.*)$", _cpuinfo(), re.MULTILINE)
    return line.group(1).strip() if line else ""


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The host CPU's feature flags (/proc/cpuinfo's `flags` line: "avx512f", "fma", ...); empty where there is none.
    The C kernels compile with -march=native, so these are what they may use."""
    return frozenset(_cpuinfo_field("flags").split())


@functools.cache
def cpu_family() -> tuple[str, int]:
    """The host CPU's vendor and family number from /proc/cpuinfo (("AuthenticAMD", 25) on a Zen 3 or Zen 4); ("", 0)
    where there is none."""
    family = _cpuinfo_field("cpu family")
    return _cpuinfo_field("vendor_id"), int(family) if family.isdigit() else 0


@overload
def getenv(key: str, default: bool) -> bool: ...
@overload
def getenv(key: str, default: int = 0) -> int: ...
@overload
def getenv(key: str, default: str) -> str: ...
def getenv(key: str, default: int | str = 0) -> int | str:
    """os.environ[key] converted to type(default) ("0"/"1" for bools); default when unset. Not cached: reads now.

    Args:
        key: the environment variable.
        default: the value when unset; its type is the result's.

    Returns:
        The converted value, or default.

    Examples:
        >>> getenv("FUSEGRAD_DOCS_UNSET_EXAMPLE", 3)
        3
    """
    raw = os.environ.get(key)
    if raw is None or isinstance(default, str):
        return default if raw is None else raw
    return _parse_int(key, raw, default)


class ContextVar(Generic[FlagT]):
    """A named, process-wide flag. Starts from env var `key` (else the default); `.value` may be set at any time.

    Every flag is declared once, in helpers.py (the environment flags page lists them); compare it like a number.

    Args:
        key: the flag's name (and environment variable).
        default_value: an int or str default; its type is the flag's.

    Raises:
        RuntimeError: a second declaration of the same key.

    Examples:
        >>> DEBUG.key, isinstance(DEBUG.value, int)
        ('DEBUG', True)
        >>> with Context(DEBUG=2):
        ...     DEBUG >= 2
        True
    """

    _cache: ClassVar[dict[str, ContextVar[int] | ContextVar[str]]] = {}
    value: FlagT
    key: str

    def __init__(self, key: str, default_value: FlagT) -> None:
        if key in ContextVar._cache:
            raise RuntimeError(f"ContextVar: flag {key} is declared twice: each flag is declared once, in helpers.py")
        ContextVar._cache[key] = cast(ContextVar[int] | ContextVar[str], self)
        self.key, self.value = key, getenv(key, default_value)

    # counts writes of any flag's value: what is derived from all the flags (the schedule cache's key) is recomputed
    # only when it changed
    generation: ClassVar[int] = 0

    def __setattr__(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)
        if name == "value":
            ContextVar.generation += 1

    def __bool__(self) -> bool:
        return bool(self.value)

    def __ge__(self, x: FlagT) -> bool:
        return self.value >= x

    def __gt__(self, x: FlagT) -> bool:
        return self.value > x

    def __le__(self, x: FlagT) -> bool:
        return self.value <= x

    def __lt__(self, x: FlagT) -> bool:
        return self.value < x

    def __repr__(self) -> str:
        return f"ContextVar({self.key!r}, {self.value!r})"


class Context(contextlib.ContextDecorator):
    """`with Context(DEBUG=2, VIZ=1):` sets flags for the block and restores them on exit, exceptions included.

    Args:
        **kwargs: flag name -> value for the block.

    Examples:
        >>> before = BEAM.value
        >>> with Context(BEAM=2):
        ...     BEAM.value
        2
        >>> BEAM.value == before
        True
    """

    def __init__(self, **kwargs: int | str) -> None:
        self.kwargs = kwargs
        self._saved: list[dict[str, int | str]] = []  # a stack: the same Context may be entered recursively

    def __enter__(self) -> None:
        if unknown := [k for k in self.kwargs if k not in ContextVar._cache]:
            raise KeyError(f"Context: unknown flag {', '.join(unknown)}: expected one of {sorted(ContextVar._cache)}")
        self._saved.append({k: ContextVar._cache[k].value for k in self.kwargs})
        for k, v in self.kwargs.items():
            ContextVar._cache[k].value = v

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        for k, v in self._saved.pop().items():
            ContextVar._cache[k].value = v


class _LazyDefault(ContextVar[str]):
    """A str flag whose default is computed at its first read, when the environment doesn't set it (an empty value
    reads as unset): PROFILEPATH's file in the system temp folder needs tempfile, which with shutil and random is
    ~8 ms of `import fusegrad` that a program without PROFILE never uses.

    Examples:
        >>> PROFILEPATH.value.endswith("fusegrad_profile.fgprof") or "PROFILEPATH" in os.environ
        True
    """

    _value: str

    def __init__(self, key: str, default: Callable[[], str]) -> None:
        self._default = default
        super().__init__(key, "")

    @property  # a computed default behind the plain attribute of every other flag
    def value(self) -> str:
        if not self._value:
            self._value = self._default()
        return self._value

    @value.setter
    def value(self, value: str) -> None:
        self._value = value


def temp(x: str, append_user: bool = False) -> str:
    """Path of `x` in the system temp folder (`x.<user>` with append_user, so users of one machine don't collide).

    Args:
        x: the file name.
        append_user: add "." and the current user's name.

    Returns:
        The path, with forward slashes.

    Examples:
        >>> import tempfile
        >>> temp("a.db") == (pathlib.Path(tempfile.gettempdir()) / "a.db").as_posix()
        True
        >>> temp("a.db", append_user=True).endswith("a.db." + getpass.getuser())
        True
    """
    import tempfile  # with shutil, lzma and random, ~10 ms of import: only when asked

    name = f"{x}.{getpass.getuser()}" if append_user else x
    return (pathlib.Path(tempfile.gettempdir()) / name).as_posix()


def _default_cache_db() -> str:
    cache_home = getenv("XDG_CACHE_HOME", "") or os.path.expanduser("~/.cache")
    return os.path.abspath(os.path.join(cache_home, "fusegrad", "cache.db"))


OSX = sys.platform == "darwin"  # platform.system()'s answer, without importing platform
WIN = sys.platform == "win32"
CI = getenv("CI", "") != ""  # running under continuous integration: tests pick smaller, deterministic workloads

# *** flags: each declared once, read through .value at call time ***
DEBUG = ContextVar("DEBUG", 0)  # 1: kernel counts, 2: per-kernel timing, 3: schedules, 4: source, 5+: UOp graphs
IMAGE = ContextVar("IMAGE", 0)  # 1/2: use image (texture) dtypes for GPU convolutions
BEAM = ContextVar("BEAM", 0)  # >0: beam-search kernel optimisations with this beam width
IGNORE_BEAM_CACHE = ContextVar("IGNORE_BEAM_CACHE", 0)  # 1: BEAM searches again instead of reusing cached opts
NOOPT = ContextVar("NOOPT", 0)  # 1: apply no kernel optimisations (no heuristics, no BEAM)
STREAM_STORES = ContextVar("STREAM_STORES", 1)  # 1: big CPU kernels' outputs skip the cache; 0: never; 2: any size
JIT = ContextVar("JIT", 1)  # 0: TinyJit runs the function eagerly every call; 1: capture once and replay; 2: no graphs
JIT_BATCH_SIZE = ContextVar("JIT_BATCH_SIZE", 32)  # kernels in a JIT's first graph batch (doubling after); 0: no limit
WINO = ContextVar("WINO", 0)  # 1: use Winograd for 3x3 convolutions
CAPTURING = ContextVar("CAPTURING", 1)  # 0: JIT capture pauses (set internally while a JIT runs nested code)
TRACEMETA = ContextVar("TRACEMETA", 1)  # 1: attach Tensor-call Metadata to UOps; 2: also record the caller's line
NO_MEMORY_PLANNER = ContextVar("NO_MEMORY_PLANNER", 0)  # 1: give every scheduled buffer its own allocation
SCHEDULE_CACHE = ContextVar("SCHEDULE_CACHE", 1)  # 0: schedule every realize, even one shaped like an earlier one
RECIPE_CACHE = ContextVar("RECIPE_CACHE", 1)  # 0: run composite Tensor methods always; 2: check reuses (recipes.py)
RING = ContextVar("RING", 1)  # multi-device allreduce: 0 naive, 1 ring when large enough, 2 always ring
RING_ALLREDUCE_THRESHOLD = ContextVar("RING_ALLREDUCE_THRESHOLD", 256_000)  # RING=1: ring from this many elements
SPLIT_REDUCEOP = ContextVar("SPLIT_REDUCEOP", 1)  # 1: split very large reductions into two kernels
CACHELEVEL = ContextVar("CACHELEVEL", 2)  # 0: disable the persistent compile cache (diskcache)
CCACHE = ContextVar("CCACHE", 1)  # 0: recompile kernels even when the compiled binary is cached
RUNNER_CACHE_SIZE = ContextVar("RUNNER_CACHE_SIZE", 4096)  # loaded kernels cached (entries); least recently used unload
PARALLEL_COMPILE = ContextVar("PARALLEL_COMPILE", 0)  # compiler runs at once on new kernels; 0: one per core, 1: off
ALLOW_DEVICE_USAGE = ContextVar("ALLOW_DEVICE_USAGE", 1)  # 0: opening a real device raises (tests that must not run)
MAX_BUFFER_SIZE = ContextVar("MAX_BUFFER_SIZE", 0)  # >0: refuse to fuse kernels whose buffers exceed this many elements
SPEC = ContextVar("SPEC", 0)  # 1: validate UOp graphs against the IR spec after each stage (slow, for tests)
IGNORE_OOB = ContextVar("IGNORE_OOB", 1)  # 0: prove every index in bounds (needs z3) and fail otherwise
USE_TC = ContextVar("USE_TC", 1)  # 0: never use tensor cores; 2: emulate them
TC_OPT = ContextVar("TC_OPT", 0)  # tensor-core opt level: 0 exact shapes only, 1 allow padding, 2 allow more axes
AMX = ContextVar("AMX", 0)  # 1: use Apple AMX matrix instructions on the CPU backend
TRANSCENDENTAL = ContextVar("TRANSCENDENTAL", 1)  # 1: native exp2/log2/sin if the device has them; 2: always emulate
FUSE_ARANGE = ContextVar("FUSE_ARANGE", 0)  # 1: fuse arange-built index tensors into their consumers
FUSE_CONV_BW = ContextVar("FUSE_CONV_BW", 0)  # 1: fuse the convolution backward pass into fewer kernels
FUSE_SIBLINGS = ContextVar("FUSE_SIBLINGS", 1)  # 1: independent same-shape kernels reading one buffer run as one
LRU = ContextVar("LRU", 1)  # 0: free buffers immediately instead of keeping them in the allocator's LRU cache
GC_THRESHOLD = ContextVar("GC_THRESHOLD", 10_000)  # gc generation-0 threshold import sets if lower; 0: leave it alone
ALLREDUCE_CAST = ContextVar("ALLREDUCE_CAST", 1)  # 1: allreduce half-precision inputs in a wider dtype
VIZ = ContextVar("VIZ", 0)  # 1: record rewrites and profile events and serve them in the VIZ web app; -1: save only
PROFILE = ContextVar("PROFILE", abs(VIZ.value))  # 1: record timing events (cpu_events, Buffer.profile_events)
PROFILEPATH = _LazyDefault("PROFILEPATH", lambda: temp("fusegrad_profile.fgprof"))  # PROFILE trace; .json: JSON
TRACK_MATCH_STATS = ContextVar("TRACK_MATCH_STATS", 2 if VIZ.value else 0)  # 1: count rule matches; 2: record them
REWRITE_STACK_LIMIT = ContextVar("REWRITE_STACK_LIMIT", 250000)  # graph_rewrite stack size that signals a rule loop
DEV = ContextVar("DEV", "")  # default device name ("" means pick the first available)
CPU_CC = ContextVar("CPU_CC", "")  # C compiler for the CPU backend ("" means clang, then cc)
CRASH_REPORT = ContextVar("CRASH_REPORT", 0)  # 1: print each kernel's name (source on first run) to stderr as it starts
CACHEDB = ContextVar("CACHEDB", _default_cache_db())  # sqlite file of the persistent compile cache
DOWNLOADS_DIR = ContextVar("DOWNLOADS_DIR", "")  # folder fetch() and nn.datasets cache downloads in ("": cache_dir)
DISABLE_HTTP_CACHE = ContextVar("DISABLE_HTTP_CACHE", 0)  # 1: fetch() downloads again even when a cached copy exists
# fusegrad's cache folder (the compile cache and downloads live under it): $XDG_CACHE_HOME/fusegrad or ~/.cache/fusegrad
cache_dir: str = os.path.dirname(_default_cache_db())

# *** small helpers ***


def prod(xs: Iterable[T]) -> T | int:
    """Product of xs; int 1 when empty.

    Args:
        xs: numbers (or symbolic sizes).

    Returns:
        The product.

    Examples:
        >>> prod((2, 3, 4)), prod(())
        (24, 1)
    """
    return functools.reduce(operator.mul, xs, 1)


def dedup(xs: Iterable[T]) -> list[T]:
    """Drop repeats, keeping first-seen order.

    Args:
        xs: hashable items.

    Returns:
        A list of the distinct items.

    Examples:
        >>> dedup([3, 1, 3, 2, 1])
        [3, 1, 2]
    """
    return list(dict.fromkeys(xs))


# Any: shape arguments mix ints and symbolic UOps, passed as `f(2, 3)` or `f((2, 3))`
def argfix(*x: Any) -> tuple[Any, ...]:
    """Arguments given as `f(2, 3)` or `f((2, 3))` as one tuple.

    Args:
        *x: the values, or one tuple or list holding them.

    Returns:
        The values as a tuple.

    Raises:
        ValueError: a tuple or list followed by more arguments.

    Examples:
        >>> argfix((2, 3)), argfix([2, 3]), argfix(2, 3)
        ((2, 3), (2, 3), (2, 3))
        >>> argfix((2, 3), 4)
        Traceback (most recent call last):
        ...
        ValueError: argfix: a sequence must be the only argument: got ((2, 3), 4)
    """
    if x and x[0].__class__ in (tuple, list):
        if len(x) != 1:
            raise ValueError(f"argfix: a sequence must be the only argument: got {x}")
        return tuple(x[0])
    return x


@overload
def argsort(x: list[Any]) -> list[int]: ...
@overload
def argsort(x: tuple[Any, ...]) -> tuple[int, ...]: ...
def argsort(x: list[Any] | tuple[Any, ...]) -> list[int] | tuple[int, ...]:
    """Indices that sort `x`, as the same sequence type (a stable sort: equal items keep their order).

    Args:
        x: a list or tuple of comparable items.

    Returns:
        The indices, a tuple for a tuple and a list for a list.

    Examples:
        >>> argsort((3, 1, 2)), argsort([3, 1, 2])
        ((1, 2, 0), [1, 2, 0])
    """
    order = sorted(range(len(x)), key=x.__getitem__)
    return tuple(order) if isinstance(x, tuple) else order


def all_same(items: Sequence[object]) -> bool:
    """Whether every item equals the first (True for an empty sequence).

    Args:
        items: a sequence.

    Returns:
        True when all items are equal.

    Examples:
        >>> all_same([1, 1]), all_same([1, 2]), all_same([])
        (True, False, True)
    """
    return all(x == items[0] for x in items)


def all_int(t: Sequence[object]) -> TypeGuard[tuple[int, ...]]:
    """Whether every entry of `t` is a Python int (no symbolic sizes); narrows the type for mypy.

    Args:
        t: a sequence, usually a shape.

    Returns:
        True when all entries are ints (also for an empty sequence).

    Examples:
        >>> all_int((2, 3)), all_int((2, 3.0)), all_int(())
        (True, False, True)
    """
    return all(isinstance(s, int) for s in t)


_COLORS = ["black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"]


def colored(st: str, color: str | None, background: bool = False) -> str:
    """Wrap st in an ANSI color: lowercase name = normal, UPPERCASE = bright; None returns st unchanged.

    Args:
        st: the text.
        color: a color name (black, red, green, yellow, blue, magenta, cyan, white; upper case for bright), or None.
        background: color the background instead of the text.

    Returns:
        The text with the escape codes around it.

    Raises:
        ValueError: an unknown color name.

    Examples:
        >>> colored("ok", "green")
        '\\x1b[32mok\\x1b[0m'
        >>> ansistrip(colored("ok", "RED"))
        'ok'
    """
    if color is None:
        return st
    if color.lower() not in _COLORS:
        raise ValueError(f"colored: unknown color {color!r}: expected one of {_COLORS} (UPPERCASE for bright)")
    code = 30 + 10 * background + 60 * (color.upper() == color) + _COLORS.index(color.lower())
    return f"\u001b[{code}m{st}\u001b[0m"


def colorize_float(x: float) -> str:
    """A speed ratio as "  0.50x", green when clearly faster (< 0.75), red when clearly slower (> 1.15), else yellow.

    Args:
        x: the ratio (new time / old time).

    Returns:
        The ratio, 7 characters wide with 2 decimals and an "x", in ANSI colour.

    Examples:
        >>> colorize_float(0.5) == colored("   0.50x", "green"), ansistrip(colorize_float(2.0))
        (True, '   2.00x')
    """
    if x < 0.75:
        return colored(f"{x:7.2f}x", "green")
    return colored(f"{x:7.2f}x", "red" if x > 1.15 else "yellow")


_ANSI_RE = re.compile("\x1b\\[(K|.*?m)")


def ansistrip(s: str) -> str:
    """`s` without its ANSI colour escape codes (and erase-line codes).

    Args:
        s: the text.

    Returns:
        The text as it reads when printed.

    Examples:
        >>> ansistrip(colored("x", "red") + "y")
        'xy'
    """
    return _ANSI_RE.sub("", s)


def ansilen(s: str) -> int:
    """Printed width of `s`: its length without the ANSI escape codes.

    Args:
        s: the text.

    Returns:
        The number of characters that print.

    Examples:
        >>> ansilen(colored("abc", "blue")), len(colored("abc", "blue"))
        (3, 12)
    """
    return len(ansistrip(s))


def make_tuple(x: int | Sequence[int], cnt: int) -> tuple[int, ...]:
    """`x` repeated `cnt` times if it is an int, else `x` as a tuple (whatever its length).

    Args:
        x: an int or a sequence of ints (a kernel size, a stride).
        cnt: how many times to repeat an int.

    Returns:
        A tuple of ints.

    Examples:
        >>> make_tuple(3, 2), make_tuple([1, 2], 2)
        ((3, 3), (1, 2))
    """
    return (x,) * cnt if isinstance(x, int) else tuple(x)


def flatten(nested: Iterable[Iterable[T]]) -> list[T]:
    """The items of the inner iterables in one list.

    Args:
        nested: an iterable of iterables.

    Returns:
        One list.

    Examples:
        >>> flatten([[1], [2, 3]])
        [1, 2, 3]
    """
    return [item for sub in nested for item in sub]


# Any: nested Python lists / numpy arrays of scalars of any type, as given to Tensor(...)
def fully_flatten(nested: Any) -> list[Any]:
    """Every leaf of arbitrarily nested sequences (numpy arrays too; strings and bytes are leaves) in one list.

    Args:
        nested: a scalar, or nested lists, tuples or numpy arrays.

    Returns:
        The leaves in order (a scalar gives a list of one).

    Examples:
        >>> fully_flatten([[1, [2]], 3]), fully_flatten(5), fully_flatten(["ab", b"c"])
        ([1, 2, 3], [5], ['ab', b'c'])
        >>> [int(v) for v in fully_flatten(np.array([[1, 2], [3, 4]]))]
        [1, 2, 3, 4]
    """
    if hasattr(nested, "__len__") and hasattr(nested, "__getitem__") and not isinstance(nested, str | bytes):
        if getattr(nested, "shape", None) == ():
            return [nested[()]]  # 0-d numpy array
        return [leaf for sub in nested for leaf in fully_flatten(sub)]
    return [nested]


def strip_parens(fst: str) -> str:
    """One pair of outer parentheses removed, when they match each other: "(a+b)" -> "a+b", "(a)+(b)" is left alone.

    Args:
        fst: an expression as text.

    Returns:
        The expression without its enclosing parentheses, or unchanged.

    Examples:
        >>> strip_parens("(a+b)"), strip_parens("(a)+(b)"), strip_parens("a")
        ('a+b', '(a)+(b)', 'a')
    """
    inner = fst[1:-1]
    if fst[:1] == "(" and fst[-1:] == ")" and inner.find("(") <= inner.find(")"):
        return inner
    return fst


def ceildiv(num: int, amt: int) -> int:
    """num / amt rounded up, for ints.

    Args:
        num: the dividend.
        amt: the divisor.

    Returns:
        The rounded-up quotient.

    Examples:
        >>> ceildiv(7, 2), ceildiv(8, 2)
        (4, 4)
    """
    return -(num // -amt)


def round_up(num: int, amt: int) -> int:
    """`num` rounded up to a multiple of `amt`.

    Args:
        num: the value.
        amt: the multiple.

    Returns:
        The smallest multiple of amt that is >= num.

    Examples:
        >>> round_up(7, 4), round_up(8, 4)
        (8, 8)
    """
    return (num + amt - 1) // amt * amt


def round_down(num: int, amt: int) -> int:
    """The largest multiple of `amt` that is <= `num` (towards minus infinity for negative numbers).

    Args:
        num: the value.
        amt: the multiple (positive).

    Returns:
        The rounded-down value.

    Examples:
        >>> round_down(7, 4), round_down(8, 4), round_down(-1, 4)
        (4, 8, -4)
    """
    return num // amt * amt


def next_power2(x: int) -> int:
    """The smallest power of two >= `x` (1 for 0 and 1).

    Args:
        x: a non-negative int.

    Returns:
        A power of two.

    Examples:
        >>> next_power2(0), next_power2(5), next_power2(8)
        (1, 8, 8)
    """
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


def strides_for_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major (C order) element strides of a shape, 0 on size-1 axes (an index there never moves).

    Args:
        shape: the sizes.

    Returns:
        One stride per axis.

    Examples:
        >>> strides_for_shape((2, 3)), strides_for_shape((2, 1, 3)), strides_for_shape(())
        ((3, 1), (3, 0, 1), ())
    """
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(0 if size == 1 else step)
        step *= size
    return tuple(reversed(strides))


def get_shape(x: Any) -> tuple[int, ...]:
    """The shape of nested lists or tuples; a str or scalar (or a 0-d array) is 0-d.

    Args:
        x: nested sequences of scalars.

    Returns:
        The sizes, outermost first.

    Raises:
        ValueError: the nesting is ragged (sub-sequences of different shapes).

    Examples:
        >>> get_shape([[1, 2], [3, 4], [5, 6]]), get_shape(7), get_shape([])
        ((3, 2), (), (0,))
        >>> get_shape([[1, 2], [3]])
        Traceback (most recent call last):
        ...
        ValueError: get_shape: inhomogeneous shape from [[1, 2], [3]]
    """
    if isinstance(x, str) or not hasattr(x, "__len__") or getattr(x, "shape", None) == ():
        return ()
    inner = [get_shape(item) for item in x]
    if not all_same(inner):
        raise ValueError(f"get_shape: inhomogeneous shape from {x}")
    return (len(inner), *(inner[0] if inner else ()))


def to_tuple(x: T | tuple[T, ...]) -> tuple[T, ...]:
    """`x` itself if it is a tuple, else the tuple `(x,)`.

    Args:
        x: a value or a tuple of values.

    Returns:
        A tuple.

    Examples:
        >>> to_tuple(3), to_tuple((3, 4)), to_tuple([3])
        ((3,), (3, 4), ([3],))
    """
    return x if isinstance(x, tuple) else (x,)


def flat_to_grouped(padding: Sequence[T]) -> tuple[tuple[T, T], ...]:
    """torch's flat padding (last axis first, before and after per axis) as (before, after) pairs, first axis first.

    Args:
        padding: an even number of values: (last_before, last_after, second_last_before, ...).

    Returns:
        One (before, after) pair per padded axis.

    Raises:
        ValueError: (from zip) an odd number of values.

    Examples:
        >>> flat_to_grouped((1, 2, 3, 4))
        ((3, 4), (1, 2))
    """
    return tuple(zip(padding[-2::-2], padding[::-2], strict=True))


def lo32(x: int) -> int:
    """The low 32 bits of `x`.

    Args:
        x: a non-negative int.

    Returns:
        x modulo 2**32.

    Examples:
        >>> lo32((1 << 32) + 5), lo32(0xFFFFFFFF)
        (5, 4294967295)
    """
    return x & 0xFFFFFFFF


def hi32(x: int) -> int:
    """The bits of `x` above the low 32.

    Args:
        x: a non-negative int.

    Returns:
        x shifted right by 32.

    Examples:
        >>> hi32(1 << 33), hi32(5)
        (2, 0)
    """
    return x >> 32


def data64(data: int) -> tuple[int, int]:
    """A 64-bit value split into (high 32 bits, low 32 bits), for registers and command packets.

    Args:
        data: a non-negative int below 2**64.

    Returns:
        The (high, low) pair.

    Examples:
        >>> data64((3 << 32) + 7)
        (3, 7)
    """
    return (data >> 32, data & 0xFFFFFFFF)


def data64_le(data: int) -> tuple[int, int]:
    """A 64-bit value split into (low 32 bits, high 32 bits), little-endian order.

    Args:
        data: a non-negative int below 2**64.

    Returns:
        The (low, high) pair.

    Examples:
        >>> data64_le((3 << 32) + 7)
        (7, 3)
    """
    return (data & 0xFFFFFFFF, data >> 32)


def getbits(value: int, start: int, end: int) -> int:
    """Bits `start`..`end` of `value` (both inclusive), shifted down to bit 0.

    Args:
        value: the int.
        start: the lowest bit.
        end: the highest bit.

    Returns:
        The field's value.

    Examples:
        >>> getbits(0b101100, 2, 3), getbits(0xAB, 4, 7)
        (3, 10)
    """
    return (value >> start) & ((1 << (end - start + 1)) - 1)


def i2u(bits: int, value: int) -> int:
    """A signed `bits`-wide int reinterpreted as unsigned (two's complement).

    Args:
        bits: the width.
        value: the signed value (in range for the width).

    Returns:
        The unsigned value.

    Examples:
        >>> i2u(8, -1), i2u(32, -2), i2u(8, 5)
        (255, 4294967294, 5)
    """
    return value if value >= 0 else (1 << bits) + value


def cdiv(x: int, y: int) -> int:
    """C integer division: truncates toward zero (Python's // floors).

    x // 0 is 0, as kernels compute it (numpy's choice; undefined in C). Unwrapped: INT_MIN // -1 is 2**(bits-1) here
    and wraps when truncated to the dtype. The one implementation: constant folding, bounds and the PYTHON backend use
    it (uop/alu.py, KERNEL_IR.md section 5).

    Args:
        x: the dividend.
        y: the divisor.

    Returns:
        The truncated quotient (0 when y is 0).

    Examples:
        >>> cdiv(7, 2), cdiv(-7, 2), -7 // 2, cdiv(5, 0)
        (3, -3, -4, 0)
    """
    if y == 0:
        return 0
    quotient = abs(x) // abs(y)
    return -quotient if (x < 0) != (y < 0) else quotient


def cmod(x: int, y: int) -> int:
    """C remainder: takes the sign of the dividend, so x == cdiv(x, y) * y + cmod(x, y) for y != 0.

    x % 0 is 0, as kernels compute it (the reference's helper gives x there).

    Args:
        x: the dividend.
        y: the divisor.

    Returns:
        The remainder (0 when y is 0).

    Examples:
        >>> cmod(7, 3), cmod(-7, 3), -7 % 3, cmod(5, 0)
        (1, -1, 2, 0)
    """
    return 0 if y == 0 else x - cdiv(x, y) * y


def polyN(x: T, p: list[float]) -> T:  # noqa: N802  # compat name
    """A polynomial by Horner's rule: p[0]*x**(n-1) + ... + p[-1]; works on floats and on UOps.

    Args:
        x: the point (a number, or a UOp to build the expression).
        p: the coefficients, highest power first.

    Returns:
        The value (a float for a number, a UOp for a UOp).

    Examples:
        >>> polyN(2.0, [1.0, 0.0, 3.0])  # x**2 + 3
        7.0
    """
    acc: Any = 0.0  # Any: the accumulator takes x's type (float or UOp) after the first step
    for c in p:
        acc = acc * x + c
    return cast(T, acc)


def merge_dicts(ds: Iterable[dict[T, U]]) -> dict[T, U]:
    """The union of the dicts; a key repeated across them must have the same value.

    Args:
        ds: the dicts.

    Returns:
        One new dict.

    Raises:
        AssertionError: a key with two different values.

    Examples:
        >>> merge_dicts([{1: 2}, {3: 4}, {1: 2}])
        {1: 2, 3: 4}
    """
    ret: dict[T, U] = {}
    for d in ds:
        for k, v in d.items():
            assert k not in ret or ret[k] == v, f"merge_dicts: key {k!r} has two values: {ret[k]!r} and {v!r}"
            ret[k] = v
    return ret


def partition(itr: Iterable[T], fxn: Callable[[T], bool]) -> tuple[list[T], list[T]]:
    """Split items by a predicate, keeping input order on each side.

    Args:
        itr: the items.
        fxn: the predicate.

    Returns:
        (items where fxn is true, items where it is false).

    Examples:
        >>> partition(range(6), lambda x: x % 2 == 0)
        ([0, 2, 4], [1, 3, 5])
    """
    yes: list[T] = []
    no: list[T] = []
    for x in itr:
        (yes if fxn(x) else no).append(x)
    return yes, no


def unwrap(x: T | None) -> T:
    """`x`, checked not to be None (narrows `T | None` to `T` for mypy).

    Args:
        x: a value that should be there.

    Returns:
        x.

    Raises:
        AssertionError: x is None.

    Examples:
        >>> unwrap(3)
        3
    """
    assert x is not None, "unwrap: got None, expected a value"
    return x


def get_single_element(x: Sequence[T]) -> T:
    """The only element of `x`.

    Args:
        x: a sequence of exactly one item.

    Returns:
        That item.

    Raises:
        AssertionError: x has no element or more than one.

    Examples:
        >>> get_single_element([5])
        5
    """
    assert len(x) == 1, f"get_single_element: got {len(x)} elements, expected 1: {x}"
    return x[0]


# Any: walks arbitrary objects, e.g. get_child(model, "layers.0.weight")
def get_child(obj: Any, key: str) -> Any:
    """Follow a dotted path into an object: numeric parts index sequences, other parts index dicts or read attributes.

    Args:
        obj: the root (a model, a dict, a list).
        key: the path, like "layers.0.weight".

    Returns:
        The object at the end of the path.

    Raises:
        KeyError: (from indexing) a missing dict key.
        IndexError: (from indexing) an index past a sequence's end.
        AttributeError: (from getattr) a missing attribute.

    Examples:
        >>> get_child({"layers": [{"w": 1}, {"w": 2}]}, "layers.1.w")
        2
    """
    for k in key.split("."):
        if k.isnumeric():
            obj = obj[int(k)]
        elif isinstance(obj, dict):
            obj = obj[k]
        else:
            obj = getattr(obj, k)
    return obj


def word_wrap(x: str, wrap: int = 80) -> str:
    """Break lines longer than `wrap` printed characters (ANSI codes don't count), line by line.

    Args:
        x: the text (may hold newlines).
        wrap: the widest line allowed.

    Returns:
        The text with extra newlines.

    Examples:
        >>> word_wrap("abcdefg", 3)
        'abc\\ndef\\ng'
    """
    if len(lines := x.splitlines()) > 1:
        return "\n".join(word_wrap(line, wrap) for line in lines)
    chunks: list[str] = []
    while ansilen(x) > wrap:
        i = 0
        while i < len(x) and ansilen(x[:i]) < wrap:
            i += 1
        chunks.append(x[:i])
        x = x[i:]
    return "\n".join([*chunks, x])


def pluralize(st: str, cnt: int) -> str:
    """`cnt` and the word, with an "s" unless cnt is 1.

    Args:
        st: the singular word.
        cnt: the count.

    Returns:
        "<cnt> <word>[s]".

    Examples:
        >>> pluralize("kernel", 2), pluralize("kernel", 1), pluralize("kernel", 0)
        ('2 kernels', '1 kernel', '0 kernels')
    """
    return f"{cnt} {st}" + ("" if cnt == 1 else "s")


_IDENTIFIER_CHARS = frozenset(string.ascii_letters + string.digits + "_")


def to_function_name(s: str) -> str:
    """A C identifier for a kernel name: ANSI codes stripped, every other char outside [A-Za-z0-9_] as its hex code.

    Args:
        s: the (possibly coloured) kernel name.

    Returns:
        The identifier.

    Examples:
        >>> to_function_name(colored("r_4", "green") + "n1")
        'r_4n1'
        >>> to_function_name("a.b")
        'a2Eb'
    """
    return "".join(c if c in _IDENTIFIER_CHARS else f"{ord(c):02X}" for c in ansistrip(s))


def time_to_str(t: float, w: int = 8) -> str:
    """Seconds as a fixed-width string in s (above 10 s), ms (above 10 ms) or us.

    Args:
        t: the time in seconds.
        w: the width of the number.

    Returns:
        The number, right-aligned with 2 decimals, and its unit.

    Examples:
        >>> time_to_str(12.0), time_to_str(0.5), time_to_str(2e-6, w=5)
        ('   12.00s ', '  500.00ms', ' 2.00us')
    """
    if t > 10:
        return f"{t:{w}.2f}s "
    if t > 10e-3:
        return f"{t * 1e3:{w}.2f}ms"
    return f"{t * 1e6:{w}.2f}us"


def size_to_str(nbytes: float) -> str:
    """A byte count in decimal units (1 KB = 1000 B).

    Args:
        nbytes: the number of bytes.

    Returns:
        "512 B", or the value with 2 decimals and KB, MB, GB or TB.

    Examples:
        >>> size_to_str(512), size_to_str(1500), size_to_str(2e9)
        ('512 B', '1.50 KB', '2.00 GB')
    """
    if nbytes < 1e3:
        return f"{nbytes:.0f} B"
    units = [(1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB")]
    scale, unit = next((s, u) for s, u in units if nbytes >= s)
    return f"{nbytes / scale:.2f} {unit}"


def suppress_finalizing(func: Callable[P, T]) -> Callable[P, T | None]:
    """Decorator for __del__ and finalizers: errors at interpreter shutdown (modules half torn down) are ignored.

    At any other time the error propagates as usual.

    Args:
        func: the finalizer.

    Returns:
        A wrapper returning func's result, or None for an error during interpreter shutdown.

    Examples:
        >>> @suppress_finalizing
        ... def close():
        ...     raise OSError("gone")
        >>> close()  # the interpreter is not shutting down: the error shows
        Traceback (most recent call last):
        ...
        OSError: gone
    """
    is_finalizing = sys.is_finalizing  # bound now: at shutdown this module's globals (`sys` too) may already be None

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T | None:
        try:
            return func(*args, **kwargs)
        except Exception:
            if not is_finalizing():
                raise
            return None

    return wrapper


def is_numpy_ndarray(x: object) -> bool:
    """Whether `x` is a numpy array, checked without importing numpy (it may not be installed).

    Args:
        x: any object.

    Returns:
        True for a numpy.ndarray.

    Examples:
        >>> is_numpy_ndarray(np.zeros(2)), is_numpy_ndarray([0.0, 0.0])
        (True, False)
    """
    return str(type(x)) == "<class 'numpy.ndarray'>"


class Timing(contextlib.ContextDecorator):
    """`with Timing("step "):` prints the block's wall time in ms.

    Args:
        prefix: printed before the time.
        on_exit: a function of the elapsed nanoseconds whose string is printed after the time.
        enabled: print at all.

    Examples:
        >>> with Timing("sum: "):
        ...     _ = Tensor([1, 2]).sum().item()
        sum: ... ms
    """

    def __init__(self, prefix: str = "", on_exit: Callable[[int], str] | None = None, enabled: bool = True) -> None:
        self.prefix, self.on_exit, self.enabled = prefix, on_exit, enabled

    def __enter__(self) -> None:
        self.st = time.perf_counter_ns()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.et = time.perf_counter_ns() - self.st
        if self.enabled:
            print(f"{self.prefix}{self.et * 1e-6:6.2f} ms" + (self.on_exit(self.et) if self.on_exit else ""))


# *** downloads ***


class FetchError(OSError):
    """fetch() could not download a URL (no network, refused, HTTP error, cut short); the message names the URL.

    An OSError, so `except OSError` catches it too.

    Examples:
        >>> try:
        ...     fetch("bogus://example")
        ... except FetchError as e:
        ...     print(isinstance(e, OSError), e)
        True fetch: cannot download bogus://example: unknown url type: bogus
    """


def downloads_dir() -> pathlib.Path:
    """Where fetch() caches files: $DOWNLOADS_DIR, else <cache_dir>/downloads.

    Returns:
        The folder (it may not exist yet).

    Examples:
        >>> with Context(DOWNLOADS_DIR="/tmp/dl"):
        ...     downloads_dir()
        PosixPath('/tmp/dl')
    """
    return pathlib.Path(DOWNLOADS_DIR.value or os.path.join(cache_dir, "downloads"))


def fetch(
    url: str,
    name: pathlib.Path | str | None = None,
    subdir: str | None = None,
    gunzip: bool = False,
    allow_caching: bool | None = None,
    headers: dict[str, str] | None = None,
    sha256: str | None = None,
    extract: bool = False,
) -> pathlib.Path:
    """The local path of `url`'s contents, downloaded into downloads_dir()/subdir/name on first use.

    `name` defaults to the md5 of the URL (a name with "/" or a Path is used as the path itself); a path URL ("/", ".")
    is returned as it is. `gunzip` stores the decompressed bytes, `sha256` checks them (a cached file that fails it is
    fetched again), `extract` unpacks a tar into "<file>.extract" and returns that folder. `allow_caching=False` (or
    DISABLE_HTTP_CACHE=1) downloads even when a copy exists. Writes go to a temporary file renamed into place, so no
    reader sees a half-written file.

    Args:
        url: what to download (http(s)), or a local path returned as it is.
        name: the file name in the cache (default: the md5 of the URL), or a path to use instead.
        subdir: a folder under downloads_dir().
        gunzip: store the decompressed bytes.
        allow_caching: use a cached copy when there is one.
        headers: extra HTTP headers.
        sha256: the expected digest of the stored bytes.
        extract: unpack a tar and return its folder.

    Returns:
        The local path.

    Raises:
        FetchError: (an OSError) the download failed, naming the URL.
        RuntimeError: a sha256 mismatch.

    Examples:
        >>> fetch(".")  # a local path comes back as a Path
        PosixPath('.')

        A download: `fetch("https://example.com/w.bin", subdir="weights")`.
    """
    if url.startswith(("/", ".")):
        return pathlib.Path(url)
    path = _fetch_path(url, name, subdir, gunzip, headers or {})
    caching = not DISABLE_HTTP_CACHE.value if allow_caching is None else allow_caching
    if not caching or not path.is_file() or (sha256 is not None and _sha256_of(path) != sha256):
        if extract:
            import shutil

            shutil.rmtree(_extract_dir(path), ignore_errors=True)
        _download(url, path, gunzip, headers or {}, sha256)
    return _extract_tar(path) if extract else path


def _fetch_path(
    url: str, name: pathlib.Path | str | None, subdir: str | None, gunzip: bool, headers: dict[str, str]
) -> pathlib.Path:
    if isinstance(name, pathlib.Path) or (name is not None and "/" in name):
        return pathlib.Path(name)
    # different headers (an auth token) can mean different contents: they get a file of their own
    import hashlib  # with OpenSSL, ~8 ms of import: not with fusegrad

    header_text = "\n".join(f"{k.strip()}:{v.strip()}" for k, v in sorted(headers.items()))
    suffix = "_" + hashlib.md5(header_text.encode()).hexdigest() if headers else ""
    stem = name if name is not None else hashlib.md5(url.encode()).hexdigest()
    return downloads_dir() / (subdir or "") / (stem + suffix + (".gunzip" if gunzip else ""))


def _sha256_of(path: pathlib.Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _download(url: str, path: pathlib.Path, gunzip: bool, headers: dict[str, str], sha256: str | None) -> None:
    """Stream `url` into a temporary file next to `path`, check it, then rename it to `path` (atomic)."""
    import gzip
    import tempfile
    import urllib.request  # only when something is downloaded: importing helpers stays cheap

    path.parent.mkdir(parents=True, exist_ok=True)
    request = urllib.request.Request(url, headers={"User-Agent": "fusegrad", **headers})
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=path.name, suffix=".part", delete=False) as f:
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                length = None if gunzip else int(response.headers.get("content-length", 0)) or None
                reader = gzip.GzipFile(fileobj=response) if gunzip else response
                written, digest = _copy_stream(reader, f, length, url)
        except (OSError, EOFError) as e:  # URLError, HTTPError, timeouts, refused connections, bad gzip data
            _remove(f.name)
            raise FetchError(f"fetch: cannot download {url}: {_download_failure(e)}") from e
    if length is not None and written < length:
        _remove(f.name)
        raise FetchError(f"fetch: download of {url} was cut short: got {written} bytes, expected {length}")
    if sha256 is not None and digest != sha256:
        _remove(f.name)
        raise RuntimeError(f"fetch: sha256 mismatch for {url}: got {digest}, expected {sha256}")
    os.replace(f.name, path)


def _download_failure(e: BaseException) -> str:
    """What went wrong, briefly: "HTTP 404 File not found", "[Errno 111] Connection refused", "timed out"."""
    if (code := getattr(e, "code", None)) is not None:  # urllib's HTTPError
        return f"HTTP {code} {getattr(e, 'reason', '')}".strip()
    return str(getattr(e, "reason", None) or e)


def _copy_stream(reader: Any, out: Any, length: int | None, url: str) -> tuple[int, str]:
    """Copy `reader` into `out` in chunks, with a tqdm bar when tqdm is installed; (bytes written, their sha256)."""
    try:
        from tqdm import tqdm  # optional (the `train` extra); the bar hides itself when stderr is not a terminal
    except ImportError:
        bar = None
    else:
        bar = tqdm(total=length, unit="B", unit_scale=True, desc=url, disable=None)
    import hashlib

    digest, written = hashlib.sha256(), 0
    while chunk := reader.read(1 << 16):
        out.write(chunk)
        digest.update(chunk)
        written += len(chunk)
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()
    return written, digest.hexdigest()


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _extract_dir(path: pathlib.Path) -> pathlib.Path:
    return path.parent / f"{path.name}.extract"


def _extract_tar(path: pathlib.Path) -> pathlib.Path:
    """Unpack the tar at `path` into "<path>.extract" once (into a temporary folder renamed into place)."""
    import shutil
    import tarfile
    import tempfile

    target = _extract_dir(path)
    if target.is_dir():
        return target
    staging = tempfile.mkdtemp(dir=path.parent, prefix=f"{path.name}.", suffix=".part")
    try:
        with tarfile.open(path) as archive:
            archive.extractall(staging, filter="data")  # "data": no absolute paths, links out or device files
        with contextlib.suppress(OSError):  # a concurrent fetch may have renamed its copy first: keep that one
            os.rename(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not target.is_dir():
        raise FetchError(f"fetch: could not unpack {path} into {target}")
    return target


# *** ctypes memory ***


def mv_address(mv: memoryview) -> int:
    """Address of a writable memoryview's first byte.

    Args:
        mv: a memoryview over writable memory (a bytearray, a ctypes array).

    Returns:
        The address, as an int.

    Raises:
        TypeError: (from ctypes) a read-only memoryview.

    Examples:
        >>> buf = bytearray(b"hi")
        >>> to_mv(mv_address(memoryview(buf)), 2).tobytes()
        b'hi'
    """
    return ctypes.addressof(ctypes.c_char.from_buffer(mv))


def to_mv(ptr: int, sz: int) -> memoryview:
    """A byte memoryview over `sz` bytes at raw address `ptr` (no copy; the caller keeps the memory alive).

    Args:
        ptr: the address.
        sz: the number of bytes.

    Returns:
        A writable memoryview of format "B".

    Examples:
        >>> arr = (ctypes.c_uint8 * 3)(1, 2, 3)
        >>> to_mv(ctypes.addressof(arr), 3).tolist()
        [1, 2, 3]
    """
    return memoryview(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_uint8 * sz)).contents).cast("B")


def flat_mv(mv: memoryview) -> memoryview:
    """The memoryview as flat bytes (format "B", one dimension), over the same memory.

    Args:
        mv: a C-contiguous memoryview of any format and shape.

    Returns:
        A byte memoryview of mv.nbytes items (mv itself when empty).

    Examples:
        >>> mv = memoryview(bytearray(8)).cast("I", shape=(2, 1))
        >>> flat = flat_mv(mv)
        >>> flat.format, len(flat)
        ('B', 8)
    """
    return mv if len(mv) == 0 else mv.cast("B", shape=(mv.nbytes,))


def init_c_var(ctypes_var: T, creat_cb: Callable[[T], object]) -> T:
    """Let a C call fill `ctypes_var`, then return it: `init_c_var(c_int(), lambda x: lib.get(byref(x)))`.

    Args:
        ctypes_var: the ctypes object to fill.
        creat_cb: called with ctypes_var (its result is ignored).

    Returns:
        ctypes_var, filled.

    Examples:
        >>> init_c_var(ctypes.c_int(), lambda x: setattr(x, "value", 7)).value
        7
    """
    creat_cb(ctypes_var)
    return ctypes_var


# *** tracing and profiling ***


@dataclass(frozen=True)
class Metadata:
    """Which Tensor call (and user line) produced a UOp; shown by VIZ and DEBUG.

    Attributes:
        name: the Tensor method ("add", "matmul").
        caller: the user's file and line (TRACEMETA=2), else "".
        backward: whether the op belongs to a backward pass.

    Examples:
        >>> m = Metadata("matmul", "train.py:12", backward=True)
        >>> str(m), repr(m)
        ('matmul bw', 'matmul bw - train.py:12')
    """

    name: str
    caller: str
    backward: bool = False

    def __str__(self) -> str:
        return self.name + (" bw" if self.backward else "")

    def __repr__(self) -> str:
        return str(self) + (f" - {self.caller}" if self.caller else "")


_METADATA: contextvars.ContextVar[Metadata | None] = contextvars.ContextVar("_METADATA", default=None)


@dataclass(frozen=True)
class TracingKey:
    """The name and keys of a traced step (a rewrite, a kernel) that VIZ lists and finds it by.

    Attributes:
        display_name: the name VIZ shows for this trace.
        keys: related objects (UOps, kernel names) used to find this trace.
        ret: the traced function's result, kept for VIZ.
        fmt: an optional format string for display_name.

    Examples:
        >>> TracingKey("schedule", keys=("k1",)).display_name
        'schedule'
    """

    display_name: str  # the name VIZ shows for this trace
    keys: tuple[Any, ...] = ()  # Any: related objects (UOps, kernel names) used to find this trace
    ret: Any = None  # Any: the traced function's result, kept for VIZ
    fmt: str | None = None  # optional format string for display_name


class GlobalCounters:
    """Process-wide tallies, updated as kernels run and buffers are allocated.

    Examples:
        >>> GlobalCounters.reset()
        >>> _ = (Tensor([1.0, 2.0]) + 1).realize()
        >>> GlobalCounters.kernel_count >= 1
        True
    """

    global_ops: ClassVar[int] = 0
    global_mem: ClassVar[int] = 0
    time_sum_s: ClassVar[float] = 0.0
    kernel_count: ClassVar[int] = 0
    mem_used: ClassVar[int] = 0  # bytes allocated now, so reset() leaves it alone
    mem_used_per_device: ClassVar[defaultdict[str, int]] = defaultdict(int)

    @staticmethod
    def reset() -> None:
        """Set every counter (ops, memory, kernel time, kernel count) back to zero.

        Examples:
            >>> GlobalCounters.reset()
            >>> GlobalCounters.kernel_count, GlobalCounters.global_ops
            (0, 0)
        """
        GlobalCounters.global_ops, GlobalCounters.global_mem = 0, 0
        GlobalCounters.time_sum_s, GlobalCounters.kernel_count = 0.0, 0


def perf_counter_us() -> decimal.Decimal:
    """Monotonic time in microseconds, exact (a Decimal), the unit of every profile event.

    Returns:
        The time since an arbitrary start.

    Examples:
        >>> a = perf_counter_us()
        >>> isinstance(a, decimal.Decimal), perf_counter_us() >= a
        (True, True)
    """
    return decimal.Decimal(time.perf_counter_ns()) / 1000


class ProfileEvent:
    """Base of every profile event; device.py adds device and graph events.

    Examples:
        >>> isinstance(ProfilePointEvent("TINY", "marker", None), ProfileEvent)
        True
    """


@dataclass(frozen=True)
class ProfileRangeEvent(ProfileEvent):
    """A span of time on a device's timeline (a kernel, a copy, a cpu_profile block), times in microseconds.

    Attributes:
        device: the timeline's device ("TINY" for host-side work).
        name: what ran.
        st: the start (perf_counter_us()).
        en: the end, None while it runs.
        is_copy: whether it is a transfer between devices.

    Examples:
        >>> e = ProfileRangeEvent("CPU", "E_4", decimal.Decimal(1), decimal.Decimal(3))
        >>> e.en - e.st
        Decimal('2')
    """

    device: str
    name: str | TracingKey
    st: decimal.Decimal
    en: decimal.Decimal | None = None
    is_copy: bool = False


@dataclass(frozen=True)
class ProfilePointEvent(ProfileEvent):
    """A point on a timeline: a marker, a buffer allocation or free.

    Attributes:
        device: the timeline's device.
        name: the kind of point ("marker", "alloc", ...).
        key: identifies the object the point refers to (a buffer id, None for markers).
        arg: a JSON-able payload for VIZ.
        ts: when, in microseconds (now by default).

    Examples:
        >>> ProfilePointEvent("TINY", "marker", None, {"name": "epoch 1"}).arg
        {'name': 'epoch 1'}
    """

    device: str
    name: str
    key: Any  # Any: identifies the object the point refers to (a buffer id, None for markers)
    arg: dict[str, Any] = field(default_factory=dict, hash=False)  # Any: JSON-able payload for VIZ
    ts: decimal.Decimal = field(default_factory=perf_counter_us)


cpu_events: list[ProfileEvent] = []  # mutated in place, never rebound: VIZ and tests read and .clear() it
# VIZ's streaming profile writer, once armed: called when cpu_events holds PROFILE_CHUNK events, it appends them to the
# profile file and empties the list, so a long run's memory stays bounded and a crash keeps what was written
profile_sinks: list[Callable[[], None]] = []
PROFILE_CHUNK = 8192


@dataclass
class ProfileTimer:
    """What cpu_profile yields: st is set on entry, en on exit (microseconds).

    Attributes:
        device: the timeline's device.
        name: the block's name.
        st: the start time.
        en: the end time, None inside the block.
        is_copy: whether the block is a transfer.

    Examples:
        >>> with cpu_profile("step") as timer:
        ...     timer.en is None
        True
        >>> timer.en >= timer.st
        True
    """

    device: str
    name: str | TracingKey
    st: decimal.Decimal
    en: decimal.Decimal | None = None
    is_copy: bool = False


@contextlib.contextmanager
def cpu_profile(
    name: str | TracingKey, device: str = "TINY", is_copy: bool = False, display: bool = True
) -> Iterator[ProfileTimer]:
    """Time the block; when PROFILE is on (checked at exit) append a ProfileRangeEvent to cpu_events, even if it raised.

    Args:
        name: the block's name on the timeline.
        device: the timeline to put it on.
        is_copy: mark the event as a transfer.
        display: record the event at all (the timer is filled either way).

    Yields:
        The ProfileTimer, whose `en` is set when the block ends.

    Examples:
        >>> cpu_events.clear()
        >>> with Context(PROFILE=1), cpu_profile("load") as timer:
        ...     pass
        >>> [(e.name, e.st == timer.st) for e in cpu_events]
        [('load', True)]
        >>> cpu_events.clear()
    """
    timer = ProfileTimer(device, name, perf_counter_us(), is_copy=is_copy)
    try:
        yield timer
    finally:
        timer.en = perf_counter_us()
        if PROFILE and display:
            cpu_events.append(ProfileRangeEvent(device, name, timer.st, timer.en, is_copy))
            if len(cpu_events) >= PROFILE_CHUNK and profile_sinks:
                profile_sinks[0]()


def profile_marker(name: str, color: str = "gray") -> None:
    """A named point on the VIZ timeline (appended to cpu_events whatever PROFILE says).

    Args:
        name: the label.
        color: its colour in VIZ.

    Examples:
        >>> cpu_events.clear()
        >>> profile_marker("epoch 1")
        >>> cpu_events[0].arg
        {'name': 'epoch 1', 'color': 'gray'}
        >>> cpu_events.clear()
    """
    cpu_events.append(ProfilePointEvent("TINY", "marker", None, {"name": name, "color": color}))


# *** persistent compile cache (storage in diskcache.py) ***


def diskcache_get(table: str, key: CacheKey) -> CacheValue | None:
    """The value stored under (`table`, `key`) in the persistent compile cache.

    Args:
        table: the cache's table name.
        key: a cache key (str, int, float, bool, None, bytes, or tuples, lists and str-keyed dicts of them).

    Returns:
        The stored value, or None when missing or when CACHELEVEL is 0.

    Examples:
        >>> import tempfile
        >>> with Context(CACHEDB=tempfile.mkdtemp() + "/c.db"):
        ...     diskcache_put("docs", "k", [1, 2]), diskcache_get("docs", "k"), diskcache_get("docs", "other")
        ([1, 2], [1, 2], None)
    """
    if CACHELEVEL.value == 0:
        return None
    return cache_get(CACHEDB.value, table, key)


def diskcache_put(table: str, key: CacheKey, val: V) -> V:
    """Store `val` under (`table`, `key`) in the persistent compile cache (nothing when CACHELEVEL is 0) and return it.

    Args:
        table: the cache's table name.
        key: a cache key (str, int, float, bool, None, bytes, or tuples, lists and str-keyed dicts of them).
        val: bytes, or a JSON value (str, int, float, bool, None, list, str-keyed dict).

    Returns:
        val.

    Examples:
        >>> import tempfile
        >>> with Context(CACHEDB=tempfile.mkdtemp() + "/c.db"):
        ...     diskcache_put("docs", ("k", 1), b"\\x00"), diskcache_get("docs", ("k", 1))
        (b'\\x00', b'\\x00')
    """
    if CACHELEVEL.value != 0:
        cache_put(CACHEDB.value, table, key, val)
    return val


def diskcache_clear() -> None:
    """Delete every entry of the persistent compile cache (the sqlite file CACHEDB names).

    Examples:
        >>> import tempfile
        >>> with Context(CACHEDB=tempfile.mkdtemp() + "/c.db"):
        ...     _ = diskcache_put("docs", "k", 1)
        ...     diskcache_clear()
        ...     diskcache_get("docs", "k") is None
        True
    """
    cache_clear(CACHEDB.value)


def diskcache(func: Callable[P, V]) -> Callable[P, V]:
    """Decorator: memoise `func` on disk, keyed by its qualified name and arguments.

    A None result reads back as a miss, so func runs again. Nothing is stored when CACHELEVEL is 0.

    Args:
        func: a function whose arguments are cache keys and whose result is a cache value.

    Returns:
        The caching wrapper.

    Raises:
        TypeError: (from the cache, when called) an argument that is not a valid cache key.

    Examples:
        >>> import tempfile
        >>> @diskcache
        ... def square(x):
        ...     print("computing")
        ...     return x * x
        >>> with Context(CACHEDB=tempfile.mkdtemp() + "/c.db"):
        ...     square(3), square(3)
        computing
        (9, 9)
    """

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> V:
        table, key = f"cache_{func.__qualname__}", cast(CacheKey, (args, kwargs))
        if (ret := diskcache_get(table, key)) is not None:
            return cast(V, ret)
        return diskcache_put(table, key, func(*args, **kwargs))

    return wrapper


def report_kernel(name: str, src: str | None) -> None:
    """CRASH_REPORT=1: say which kernel is about to run, flushed to stderr, so the last one before a crash is there.

    Args:
        name: the kernel's name.
        src: its source, printed first when given (a runtime passes it the first time a program runs).

    Examples:
        >>> import contextlib, io
        >>> err = io.StringIO()
        >>> with contextlib.redirect_stderr(err):
        ...     report_kernel("E_4", None)
        >>> err.getvalue()
        'CRASH_REPORT: running E_4\\n'
    """
    text = f"CRASH_REPORT: running {name}\n"
    if src is not None:
        text = f"CRASH_REPORT: source of {name}:\n{src.rstrip()}\n{text}"
    sys.stderr.write(text)
    sys.stderr.flush()


def raise_gc_threshold() -> None:
    """Raise the cyclic collector's generation-0 threshold to GC_THRESHOLD (read once, at `import fusegrad`) where it is
    lower and automatic collection is on (a threshold of 0 turns it off: left alone, as is a higher one set earlier).

    An eager training step builds and frees thousands of graph nodes, none of them in a reference cycle (a node refers
    only to its sources), so the collections their allocations trigger find nothing. At Python's default of 700 the
    bench GPT step ran ~3.7 young and 0.3 middle collections a step and a full one (47-54 ms over ~80k objects) every
    ~20 steps: 2.2-3.6 ms of its 12-16 ms of Python a step on the NULL device; at 10,000, none. Cyclic garbage (the
    program's own) is still collected, after 10,000 net allocations instead of 700.

    Examples:
        >>> import gc
        >>> raise_gc_threshold()  # `import fusegrad` did; a second call changes nothing
        >>> gc.get_threshold()[0] >= 700
        True
    """
    threshold, *older = gc.get_threshold()
    if 0 < threshold < (wanted := GC_THRESHOLD.value):
        gc.set_threshold(wanted, *older)
