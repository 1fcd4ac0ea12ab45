"""Streaming stores for the C renderer: a big kernel's output lines go to memory without being read first.

A plain store to a line that is not in cache reads the line from memory before writing it (write-allocate), so a
kernel that writes N bytes of output moves 2N bytes for them; its output then evicts cache lines the next kernel may
want. When a kernel's buffers together are well past the last-level cache (`min_kernel_bytes`), its outputs can't
stay in cache anyway: a non-temporal store (x86 `movntps`) writes a whole 64-byte line straight to memory. On an AMD
Zen 5 host with a softmax forward+backward kernel of (4096, 1024) (64 MB read and written), the last loop's two
outputs written this way ran 3.04 -> 2.19 ms and 1.73 -> 1.51 ms (C harness, same arithmetic, same results).

GCC vectorises `omp simd` loops but has no way to make their stores non-temporal (it ignores OpenMP's
`nontemporal` clause), so an eligible loop is rendered in blocks of one cache line: the loop runs over
`LINE` elements at a time into a local line array per output (kept in a vector register), and `fg_stream_line`
writes each array with one streaming store where the address is aligned to a line, or with a plain store where it is
not (a view at an odd offset). `fg_sfence` orders the streamed lines before the kernel returns (and before the
threads of a parallel loop meet at its end), as non-temporal stores are weakly ordered.

Eligible: an innermost output loop with an OpenMP `simd` pragma and a constant trip count that is a multiple of
`LINE`, and each streamed store in it an unconditional float32 store whose index is that loop plus terms defined
before the loop, to a buffer of at least `MIN_BUFFER_BYTES` that the kernel writes with no other store and never
reads. `STREAM_STORES=0` turns it off; `STREAM_STORES=2` streams every such store, whatever the sizes.

Vector code (an output loop upcast by a line's worth of float32 lanes: codegen/opt.py's `exp_vector_opts`) stores
whole lines already: such a store, to a buffer as above, goes through `fg_stream_line` as it is, and its threaded
loop (else its outermost) is fenced after it ends (inside its parallel region, which it then opens and closes). An
AVX-512 chain of `exp` on 4M floats streamed this way ran 1.05-1.16 -> 0.81-0.85 ms against the line-at-a-time loop
(C harness).
"""

from __future__ import annotations

import functools
import pathlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from fusegrad.dtype import PtrDType, dtypes
from fusegrad.helpers import STREAM_STORES
from fusegrad.renderer import base_buffer
from fusegrad.uop import REDUCE_AXES, Ops
from fusegrad.uop.symbolic import split_uop

if TYPE_CHECKING:
    from fusegrad.uop.ops import UOp

LINE = 16  # float32 elements of one 64-byte cache line
MIN_BUFFER_BYTES = 1 << 20  # an output smaller than this (a row's statistics) is stored as usual
DEFAULT_LLC_BYTES = 32 << 20  # where the OS does not say how big the last-level cache is


@functools.cache
def last_level_cache_bytes() -> int:
    """The largest CPU cache Linux lists for cpu0 (sysfs `cache/index*/size`, "32768K"), or DEFAULT_LLC_BYTES."""
    sizes = []
    for path in pathlib.Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = path.read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes, default=DEFAULT_LLC_BYTES)


def min_kernel_bytes() -> int:
    """The bytes a kernel's buffers must reach together for its stores to stream: 1.5 times the last-level cache.
    A kernel about the cache's size and run again finds much of its data still in cache, and plain stores keep its
    output there: a layernorm forward of (4096, 1024) (32 MB with a 32 MB cache) ran 0.38-0.54 ms with plain stores
    and 0.53-0.66 ms streamed, while one of 48 MB or more (its backward, a softmax's forward and backward) gained."""
    return last_level_cache_bytes() * 3 // 2


@dataclass
class StreamPlan:
    """The loops rendered in lines (RANGE -> its streamed STOREs, in program order), each streamed store's line
    array and the index terms that stay once the loop's own term is taken out."""

    loops: dict[UOp, list[UOp]] = field(default_factory=dict)
    lines: dict[UOp, str] = field(default_factory=dict)
    offsets: dict[UOp, list[UOp]] = field(default_factory=dict)
    vectors: set[UOp] = field(default_factory=set)  # STOREs of a whole line as one vector, streamed as they are
    fenced: set[UOp] = field(default_factory=set)  # the loops around them: fg_sfence after each

    def __bool__(self) -> bool:
        return bool(self.loops or self.fenced)

    def open_loop(self, rng: UOp, name: str, index_type: str, pragma: str, indent: str) -> list[str]:
        """The lines that replace loop `rng`'s pragma and `for`: an outer loop over its cache lines (in a parallel
        region of its own where `rng` ran on threads), the line arrays, and the inner `simd` loop of one line under
        `rng`'s own name."""
        trip, parallel = int(rng.src[0].arg), "parallel for" in pragma
        simd = "#pragma omp " + pragma.removeprefix("#pragma omp ").replace("parallel for ", "").strip()
        ret = _open_region("#pragma omp for", indent) if parallel else []
        ret.append(f"{indent}for ({index_type} {name}_line = 0; {name}_line < {trip}; {name}_line += {LINE}) {{")
        ret += [f"{indent}  float {self.lines[s]}[{LINE}] __attribute__((aligned(64)));" for s in self.loops[rng]]
        ret.append(f"{indent}  {simd}")
        ret.append(f"{indent}  for ({index_type} {name} = {name}_line; {name} < {name}_line + {LINE}; {name}++) {{")
        return ret

    def store(self, store: UOp, loop_name: str, value: str) -> str:
        """A streamed store writes its element of the line array."""
        return f"{self.lines[store]}[{loop_name} - {loop_name}_line] = {value};"

    def close_loop(self, rng: UOp, pragma: str, indent: str, names: Callable[[UOp], str]) -> list[str]:
        """The lines that replace loop `rng`'s closing brace: the inner loop's end, each line array streamed to its
        buffer at the line's first element, the outer loop's end and the fence (inside the parallel region, so each
        thread fences its own lines). `names` gives a rendered node's C text."""
        ret = [f"{indent}  }}"]
        for s in self.loops[rng]:
            at = " + ".join([f"{names(rng)}_line", *(f"({names(t)})" for t in self.offsets[s])])
            buf = names(cast("UOp", _global_of(s.src[0])))  # a DEFINE_GLOBAL: plan_streams checked
            ret.append(f"{indent}  fg_stream_line(&{buf}[{at}], {self.lines[s]});")
        return ret + self.close_fenced(pragma, indent)

    @staticmethod
    def open_fenced(pragma: str, loop: str, indent: str) -> list[str]:
        """A fenced loop's start (`loop`: its rendered `for` line): a threaded one in a parallel region of its own."""
        if "parallel for" not in pragma:
            return [f"{indent}{text}" for text in (pragma, loop) if text]
        return [*_open_region(pragma.replace("parallel for", "for"), indent), f"{indent}{loop}"]

    @staticmethod
    def close_fenced(pragma: str, indent: str) -> list[str]:
        """A fenced loop's end: the fence (each thread its own, inside the region), then the region's end."""
        ret = [f"{indent}}}", f"{indent}fg_sfence();"]
        return [*ret, f"{indent}}}"] if "parallel for" in pragma else ret

    @staticmethod
    def vector_store(address: str, vector_type: str, value: str) -> str:
        """A whole line's vector streamed to `address` (held in a local: fg_stream_line reads it through a pointer)."""
        return f"{{ {vector_type} fg_vline = {value}; fg_stream_line({address}, (const float*)&fg_vline); }}"


def _open_region(for_pragma: str, indent: str) -> list[str]:
    """A parallel region's start and its work-sharing loop's pragma (the loop follows): a loop streaming stores fences
    them inside the region, each thread its own, before the threads meet at its end."""
    return [f"{indent}#pragma omp parallel", f"{indent}{{", f"{indent}{for_pragma}"]


def plan_streams(uops: list[UOp], pragmas: dict[UOp, str]) -> StreamPlan:
    """The loops of linear program `uops` whose stores stream (see the module's docstring); `pragmas` are the
    renderer's loop pragmas (RANGE -> text)."""
    plan = StreamPlan()
    globs = [u for u in uops if u.op is Ops.DEFINE_GLOBAL and isinstance(u.dtype, PtrDType)]
    if not STREAM_STORES or not globs or any(cast(PtrDType, g.dtype).size < 0 for g in globs):
        return plan
    sizes = {g: cast(PtrDType, g.dtype).size * g.dtype.base.itemsize for g in globs}
    forced = STREAM_STORES.value >= 2  # every eligible loop, whatever its size (tests, fuzzing, known workloads)
    if not forced and sum(sizes.values()) < min_kernel_bytes():
        return plan
    position = {u: i for i, u in enumerate(uops)}
    enclosing, outer = _loop_nesting(uops)
    for buf, written in _only_written(uops).items():
        if len(written) != 1 or (sizes[buf] < MIN_BUFFER_BYTES and not forced) or not enclosing[written[0]]:
            continue
        store, loops = written[0], enclosing[written[0]]
        rng, pragma = loops[-1], pragmas.get(loops[-1], "")
        if store.src[1].dtype == dtypes.float32.vec(LINE):  # vector code: a whole line per store already
            if len(store.src[0].src) == 2 and "simd" not in pragma and rng.arg[1] not in REDUCE_AXES:
                plan.vectors.add(store)
                # one fence per thread: after the threaded loop, else the outermost (an upcast of several vectors
                # is a short loop inside, where a fence per few stores would wait on every line)
                plan.fenced.add(next((r for r in loops if "parallel for" in pragmas.get(r, "")), loops[0]))
            continue
        if rng in outer or rng.arg[1] in REDUCE_AXES or "simd" not in pragma or "reduction" in pragma:
            continue
        if _trip(rng) == 0 or _trip(rng) % LINE or (offsets := _offsets(store, loops, enclosing, position)) is None:
            continue
        plan.loops.setdefault(rng, []).append(store)
        plan.offsets[store] = offsets
    for i, store in enumerate(sorted(plan.offsets, key=position.__getitem__)):
        plan.lines[store] = f"fg_line{i}"
    for streamed in plan.loops.values():
        streamed.sort(key=position.__getitem__)
    return plan


def _loop_nesting(uops: list[UOp]) -> tuple[dict[UOp, tuple[UOp, ...]], set[UOp]]:
    """Each node's enclosing loops (outermost first), and the loops that hold another loop."""
    enclosing: dict[UOp, tuple[UOp, ...]] = {}
    outer: set[UOp] = set()
    open_loops: list[UOp] = []
    for u in uops:
        if u.op is Ops.END:
            open_loops.pop()
        enclosing[u] = tuple(open_loops)
        if u.op is Ops.RANGE:
            outer.update(open_loops[-1:])
            open_loops.append(u)
    return enclosing, outer


def _only_written(uops: list[UOp]) -> dict[UOp, list[UOp]]:
    """The global buffers that nothing reads (an address used only by stores), with their stores."""
    stores: dict[UOp, list[UOp]] = {}
    read: set[UOp] = set()
    for u in uops:
        for s in u.src:
            if s.op is Ops.INDEX and (buf := _global_of(s)) is not None:
                if u.op is Ops.STORE and u.src[0] is s:
                    stores.setdefault(buf, []).append(u)
                else:
                    read.add(buf)
    return {buf: written for buf, written in stores.items() if buf not in read}


def _global_of(index: UOp) -> UOp | None:
    """The DEFINE_GLOBAL an INDEX addresses (through pending writes), or None for a register or local."""
    buf = base_buffer(index.src[0])
    return buf if buf.op is Ops.DEFINE_GLOBAL else None


def _trip(rng: UOp) -> int:
    return int(rng.src[0].arg) if rng.src[0].op is Ops.CONST else 0


def _offsets(store: UOp, loops: tuple[UOp, ...], enclosing: dict[UOp, tuple[UOp, ...]],
             position: dict[UOp, int]) -> list[UOp] | None:  # fmt: skip
    """The index terms of `store` besides its innermost loop, when the index is that loop plus terms defined before
    the loop in a scope still open there; else None. Only an unconditional float32 store qualifies."""
    index, value, rng = store.src[0], store.src[1], loops[-1]
    if len(index.src) != 2 or value.dtype != dtypes.float32:
        return None
    terms = list(split_uop(index.src[1], Ops.ADD))
    if sum(t is rng for t in terms) != 1:
        return None
    rest = [t for t in terms if t is not rng]
    for t in rest:
        if t.op is not Ops.CONST and (
            position.get(t, len(position)) > position[rng] or not set(enclosing[t]) <= set(loops[:-1])
        ):
            return None
    return rest


def render_stream_helpers() -> str:
    """`fg_stream_line` (one line of 16 floats, streamed where the address is line-aligned, else a plain store) and
    `fg_sfence`: GCC's x86 builtins, Clang's generic non-temporal store; plain C elsewhere."""
    return """#ifndef FG_STREAM_LINE
#define FG_STREAM_LINE
static inline void fg_stream_line(float* p, const float* v) {
#if defined(__clang__)
  typedef float fg_line16 __attribute__((vector_size(64)));
  if (((unsigned long)p & 63) == 0) { __builtin_nontemporal_store(*(const fg_line16*)v, (fg_line16*)p); return; }
#elif defined(__x86_64__) && defined(__AVX512F__)
  typedef float fg_line16 __attribute__((vector_size(64)));
  if (((unsigned long)p & 63) == 0) { __builtin_ia32_movntps512(p, *(const fg_line16*)v); return; }
#elif defined(__x86_64__) && defined(__AVX__)
  typedef float fg_line8 __attribute__((vector_size(32)));
  if (((unsigned long)p & 31) == 0) {
    __builtin_ia32_movntps256(p, *(const fg_line8*)v);
    __builtin_ia32_movntps256(p + 8, *(const fg_line8*)(v + 8));
    return;
  }
#endif
  __builtin_memcpy(p, v, 64);
}
static inline void fg_sfence(void) {
#if defined(__x86_64__)
  __builtin_ia32_sfence();
#endif
}
#endif
"""
