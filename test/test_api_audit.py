"""API audit: fusegrad's public names and signatures against the installed reference (tinygrad 0.14).

Each surface (Tensor, nn layers, nn.state, nn.optim, helpers, dtypes, Device, engine.jit, engine.realize) is compared by
its public names and, for names both sides have, by call signature: the reference's positional parameters must appear
in the same order under the same names, and every keyword it takes must be accepted. What fusegrad deliberately lacks
is in an allow-list below, each entry with its reason; a stale entry (the name now exists) fails too, so the list only
shrinks. Skipped when the reference is not installed.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

tinygrad = pytest.importorskip("tinygrad")


@pytest.fixture(autouse=True)
def _keep_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference writes DEV=<its default> into os.environ when its Device.DEFAULT is first read (CL where PoCL is
    installed), and fusegrad reads DEV from the environment: later tests in the same process ran on CL. Registering
    DEV with monkeypatch puts it back as it was after each test."""
    import os

    was = os.environ.get("DEV")
    monkeypatch.setenv("DEV", was or "")  # recorded as it was (unset included), undone after the test
    if was is None:
        monkeypatch.delenv("DEV")


# *** what is compared ***

# label -> the dotted module path below `tinygrad` / `fusegrad` whose module-level definitions are compared
MODULES = {
    "nn": "nn",
    "nn.state": "nn.state",
    "nn.optim": "nn.optim",
    "helpers": "helpers",
    "engine.jit": "engine.jit",
    "engine.realize": "engine.realize",
}
# label -> attribute of the package whose attributes (dir(), without underscore names) are compared
OBJECTS = {"Tensor": "Tensor", "dtypes": "dtypes", "Device": "Device"}


def _defined_names(module: ModuleType) -> set[str]:
    """Public names a module defines itself (def, class, assignment at top level), not the names it imports."""
    tree = ast.parse(inspect.getsource(module))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return {n for n in names if not n.startswith("_")}


def _surface(package: str, label: str) -> tuple[Any, set[str]]:
    """(the object, its public names) for one surface of `package` ("tinygrad" or "fusegrad"). A reference module
    counts what it defines itself; fusegrad's counts whatever it offers, re-exports included."""
    if label in MODULES:
        module = importlib.import_module(f"{package}.{MODULES[label]}")
        if package == "fusegrad":
            return module, {n for n in dir(module) if not n.startswith("_")}
        return module, _defined_names(module)
    obj = getattr(importlib.import_module(package), OBJECTS[label])
    return obj, {n for n in dir(obj) if not n.startswith("_")}


# *** the allow-list: reference names fusegrad chooses not to have ***

# Each entry: name -> why fusegrad does without it. Grouped by the reason; keep the reason true when editing.
_NO_GPU_DRIVERS = (
    "fusegrad has no AMD/HCQ/NV driver stack (CPU, PYTHON, NULL, DISK, NPY devices; CUDA/OpenCL via runtimes)"
)
_NO_LINEAR_IR = (
    "0.14's LINEAR/CALL program IR (schedule_linear, exec_* handlers) is not fusegrad's design: schedules are lists "
    "of ExecItems run by engine/realize.py (see docs/KERNEL_IR.md)"
)
_NO_WEAK_DTYPES = "fusegrad promotes Python scalars when an op is built (dtype.py), so it has no weak dtypes"
_NO_IMAGE = "no IMAGE (texture) dtypes or kernels: fusegrad targets buffers only"
_STDLIB = "a one-line stdlib wrapper; fusegrad calls the stdlib directly"
_UOP_MIXIN = (
    "0.14 shares one mixin between Tensor and UOp (alu, const, ufix, usum, uprod); fusegrad's Tensor builds UOps "
    "through its own methods, so these UOp-level helpers are not Tensor API"
)
_RNG = (
    "fusegrad's RNG is its own counter-based generator (mixin/random.py); 0.14's threefry/random_bits internals differ"
)
_ENV_FLAG_UNUSED = (
    "an env flag for a 0.14 feature fusegrad does not have, so declaring it would be a flag that does nothing"
)

_ALLOWED_MISSING: dict[str, dict[str, str]] = {
    "nn.state": {
        "TensorIO": "state loaders read files through helpers in nn/state.py (_File/_Bytes), not a Tensor-backed io",
        "accept_filename": "loaders take a path or a DISK tensor directly (nn/state.py _open); no decorator needed",
        "fs_load": "0.14's filesystem-object loader has no fusegrad counterpart (no fs format)",
        "fs_store": "0.14's filesystem-object store has no fusegrad counterpart (no fs format)",
        "tar_extract": "torch_load refuses legacy tar checkpoints (torch < 0.4); fetch(extract=True) unpacks tars",
        "zip_extract": "torch_load opens zip checkpoints itself (zipfile); no public extractor",
    },
    "helpers": {
        **dict.fromkeys(
            [
                "ALL2ALL",
                "ALLOW_TF32",
                "CAPTURE_PROCESS_REPLAY",
                "CHECK_OOB",
                "DEBUG_RANGEIFY",
                "DISABLE_FAST_IDIV",
                "DISALLOW_BROADCAST",
                "EMULATED_DTYPES",
                "FLOAT16",
                "FUSE_OPTIM",
                "MAX_KERNEL_BUFFERS",
                "NOLOCALS",
                "NULL_ALLOW_COPYOUT",
                "OPENPILOT_HACKS",
                "PARALLEL",
                "PCONTIG",
                "SCACHE",
                "TC_SELECT",
                "TUPLE_ORDER",
                "USE_ATOMICS",
                "VALIDATE_WITH_CPU",
                "NUM_CPU_THREADS",
            ],
            _ENV_FLAG_UNUSED,
        ),
        "DEFAULT_FLOAT": "the default dtypes are set in code (dtypes.default_float), not by an env flag",
        "DEFAULT_INT": "the default dtypes are set in code (dtypes.default_int), not by an env flag",
        "NO_COLOR": "colored() always colors; output to non-terminals is rare (DEBUG prints)",
        "TRAINING": "training mode is Tensor.training / Tensor.train(), not an env flag",
        "BASEDIR": "fusegrad locates its files through importlib where needed",
        "CHUNK_SIZE": "nn/state.py and helpers.fetch choose their own chunk sizes",
        "START_TIME": "profile timestamps come from perf_counter_us(); no process start constant",
        "VERSION": "the compile cache keys on fusegrad's own schema (diskcache.py), not a version number",
        "Target": "0.14's compile-target record for its driver stack; " + _NO_GPU_DRIVERS,
        "Profiling": "profiling is PROFILE=1 / cpu_profile and VIZ's profiler, not a cProfile context manager",
        "amdgpu_disassemble": _NO_GPU_DRIVERS,
        "capstone_flatdump": _NO_GPU_DRIVERS,
        "cpu_objdump": "DEBUG shows kernel source; no disassembler hook",
        "fetch_fw": _NO_GPU_DRIVERS,
        "to_be32": _NO_GPU_DRIVERS,
        "to_be64": _NO_GPU_DRIVERS,
        "to_char_p_p": "ctypes glue lives in runtime/support",
        "from_mv": "ctypes glue lives in runtime/support (to_mv, mv_address are here)",
        "wait_cond": _NO_GPU_DRIVERS,
        "select_first_inited": "device selection is Device.DEFAULT's own logic (device.py)",
        "select_by_name": "device selection is Device.DEFAULT's own logic (device.py)",
        "db_connection": "the compile cache's sqlite connection is private to diskcache.py",
        "disable_gc": "TinyJit does not pause the garbage collector",
        "ansipad": "ansilen/ansistrip cover fusegrad's table printing",
        "printable": "Metadata carries caller text already formatted",
        "get_stacktrace": "Metadata records one caller line (TRACEMETA=2), not stacks",
        "stderr_log": "DEBUG output goes through print",
        "panic": "errors are raised where they happen, with the op's name",
        "system": _STDLIB,
        "fromimport": _STDLIB,
        "lines": _STDLIB,
        "count": _STDLIB + " (itertools.count)",
        "floordiv": "integer helpers are cdiv/cmod (C semantics) and Python's // and %",
        "floormod": "integer helpers are cdiv/cmod (C semantics) and Python's // and %",
        "canonicalize_strides": "views are UOp movement chains, not stride tuples",
        "is_image_shape": _NO_IMAGE,
        "pad_bytes": "buffers are sized exactly; no byte padding helper",
        "resolve_pool_pads": "pool padding is resolved inside mixin/nn.py",
        "tqdm": "progress bars use the tqdm package when installed (the `train` extra) instead of a bundled copy",
        "trange": "progress bars use the tqdm package when installed (the `train` extra) instead of a bundled copy",
    },
    "engine.jit": {
        "ReturnType": "TinyJit is typed with a ParamSpec/TypeVar pair of its own",
        "create_graph_call": _NO_LINEAR_IR,
        "graph_split_rewrite": _NO_LINEAR_IR,
        "jit_lower": _NO_LINEAR_IR,
        "prune_linear": _NO_LINEAR_IR,
    },
    "engine.realize": dict.fromkeys(
        [
            "ExecContext",
            "compile_linear",
            "estimate_uop",
            "exec_copy",
            "exec_encdec",
            "exec_graph",
            "exec_hcq",
            "exec_kernel",
            "exec_validate",
            "first_run_cache",
            "get_call_arg_uops",
            "get_call_kernels",
            "get_call_name",
            "get_call_outs_ins",
            "get_call_var_uops",
            "get_graph_runtime",
            "get_runtime",
            "graph_cache",
            "link_linear",
            "local_size_cache",
            "lower_and_compile",
            "optimize_local_size",
            "pm_beam",
            "pm_exec",
            "pm_flatten_linear",
            "pm_optimize_local_size",
            "pm_validate",
            "resolve_params",
            "run_linear",
            "runtime_cache",
            "time_call",
            "track_stats",
            "unwrap_multi",
        ],
        _NO_LINEAR_IR,
    ),
    "Tensor": {
        **dict.fromkeys(["alu", "const", "ufix", "usum", "uprod"], _UOP_MIXIN),
        "schedule_linear": _NO_LINEAR_IR + "; Tensor.schedule and schedule_with_vars return ExecItems",
        "linear_with_vars": _NO_LINEAR_IR + "; Tensor.schedule and schedule_with_vars return ExecItems",
        "call": "0.14's CALL (function) op is part of its LINEAR IR; " + _NO_LINEAR_IR,
        "callify": "0.14's CALL (function) op is part of its LINEAR IR; " + _NO_LINEAR_IR,
        "custom_kernel": "no user-written kernels: every kernel comes from the scheduler",
        "as_param": "0.14's parameter marking for its CALL functions; TinyJit finds inputs by argument",
        "is_param": "0.14's parameter marking for its CALL functions; TinyJit finds inputs by argument",
        "is_param_": "0.14's parameter marking for its CALL functions; TinyJit finds inputs by argument",
        "invalids": "0.14's Invalid-filled anonymous buffers; Tensor.empty is fusegrad's",
        "decode_hevc_frame": "no video decoding (a hardware HEVC path in 0.14)",
        "hash": "no keccak/tensor hashing kernels (0.14 uses them for its disk formats)",
        "keccak": "no keccak/tensor hashing kernels (0.14 uses them for its disk formats)",
        "image_conv2d": _NO_IMAGE,
        "image_dot": _NO_IMAGE,
        "threefry": _RNG,
        "random_bits": _RNG,
        "max_shape": "symbolic sizes (uop/symbolic_shape.py) give their bound as UOp.vmax; no Tensor-level maximum",
        "max_numel": "symbolic sizes (uop/symbolic_shape.py) give their bound as UOp.vmax; no Tensor-level maximum",
    },
    "dtypes": {
        **dict.fromkeys(["weakfloat", "weakint", "weaks"], _NO_WEAK_DTYPES),
        **dict.fromkeys(
            ["int8s", "int16s", "int32s", "int64s"], "0.14's groups of a dtype with its weak twin; " + _NO_WEAK_DTYPES
        ),
    },
}


def _missing(label: str) -> set[str]:
    _, reference = _surface("tinygrad", label)
    _, ours = _surface("fusegrad", label)
    return reference - ours


# *** signatures ***


def _signature(fn: Any) -> inspect.Signature | None:
    """fn's signature (a class: its constructor's), or None for non-callables and builtins without one."""
    if not callable(fn):
        return None
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # builtins without text signatures
        return None


def signature_gaps(reference: inspect.Signature, ours: inspect.Signature) -> list[str]:
    """How `ours` fails to accept every call `reference` accepts: renamed or reordered positional parameters, a missing
    *args, or a keyword it does not take. Extra parameters of ours are fine."""
    gaps: list[str] = []
    ref_params = [p for p in reference.parameters.values() if p.name not in ("self", "cls")]
    our_params = [p for p in ours.parameters.values() if p.name not in ("self", "cls")]
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ref_pos = [p for p in ref_params if p.kind in positional]
    our_pos = [p for p in our_params if p.kind in positional]
    for i, p in enumerate(ref_pos):
        if i >= len(our_pos) or (our_pos[i].name != p.name and p.kind is not inspect.Parameter.POSITIONAL_ONLY):
            got = our_pos[i].name if i < len(our_pos) else "nothing"
            gaps.append(f"positional parameter {i} is {p.name!r}, ours is {got!r}")
    kinds = {p.kind for p in our_params}
    ref_star = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in ref_params)
    if ref_star and inspect.Parameter.VAR_POSITIONAL not in kinds:
        gaps.append("takes *args, ours does not")
    keywords = {p.name for p in our_params if p.kind not in (*positional[:1], inspect.Parameter.VAR_POSITIONAL)}
    for p in ref_params:
        taken = p.name in keywords or inspect.Parameter.VAR_KEYWORD in kinds
        if p.kind is inspect.Parameter.KEYWORD_ONLY and not taken:
            gaps.append(f"keyword {p.name!r} is not accepted")
        if p.kind is inspect.Parameter.VAR_KEYWORD and inspect.Parameter.VAR_KEYWORD not in kinds:
            gaps.append("takes **kwargs, ours does not")
    return gaps


def _signature_gaps(label: str) -> dict[str, list[str]]:
    reference, ref_names = _surface("tinygrad", label)
    ours, our_names = _surface("fusegrad", label)
    found: dict[str, list[str]] = {}
    for name in sorted(ref_names & our_names):
        ref_sig, our_sig = _signature(getattr(reference, name)), _signature(getattr(ours, name))
        if ref_sig is not None and our_sig is not None and (gaps := signature_gaps(ref_sig, our_sig)):
            found[name] = gaps
    return found


_CONST_OR_BUFFER = "0.14's buffer= picks a const or a buffer-backed tensor; fusegrad's constants get buffers on demand"
_POSITIONAL_NAME = "called positionally everywhere; fusegrad's parameter name is clearer (ruff forbids `l`)"
_ALLOWED_SIGNATURES: dict[str, dict[str, str]] = {
    "nn.optim": {"Muon": "no fused optimizer step (0.14's FUSE_OPTIM): each parameter updates in its own kernels"},
    "engine.jit": {
        "CapturedJit": "built by TinyJit from its ExecItem list, never by users; " + _NO_LINEAR_IR,
        "GraphRunner": "built by TinyJit from its ExecItem list, never by users; " + _NO_LINEAR_IR,
        "MultiGraphRunner": "built by TinyJit from its ExecItem list, never by users; " + _NO_LINEAR_IR,
        "TinyJit": "0.14 forwards **kwargs to its capture options; fusegrad names the ones it has (prune, optimize)",
    },
    "nn.state": {
        "safe_load_metadata": "takes a path or a DISK tensor, so the parameter is `fn` as in safe_load",
        "torch_load": "takes a path or a DISK tensor, so the parameter is `fn` as in safe_load",
    },
    "helpers": {
        **dict.fromkeys(["dedup", "flatten", "fully_flatten", "prod", "size_to_str"], _POSITIONAL_NAME),
        "cpu_profile": "is_copy (VIZ draws copies apart) is third; display is keyword-accepted; no HCQ profile_key",
        "diskcache_put": "values are stored by type (diskcache.py), never pickled, so there is no prepickled flag",
        "Metadata": "fusegrad's Metadata records the calling line (TRACEMETA=2) as its second field, before backward",
        "ProfileRangeEvent": "is_copy (VIZ draws copies apart) instead of 0.14's HCQ profile_key",
        "TracingKey": "VIZ formats a key with `fmt`; fusegrad records no tracebacks (`tb`)",
    },
    "Tensor": {
        "contiguous": "0.14's **kwargs pass options to its CONTIGUOUS op (ranges); fusegrad's op has none",
        "full": _CONST_OR_BUFFER,
        "full_like": _CONST_OR_BUFFER,
    },
}

LABELS = [*MODULES, *OBJECTS]


@pytest.mark.parametrize("label", LABELS)
def test_public_names_match_the_reference(label: str) -> None:
    allowed = _ALLOWED_MISSING.get(label, {})
    missing = _missing(label) - set(allowed)
    assert not missing, (
        f"{label}: reference names fusegrad lacks (implement, or allow-list with a reason): {sorted(missing)}"
    )


@pytest.mark.parametrize("label", LABELS)
def test_allow_list_has_no_stale_entries(label: str) -> None:
    stale = set(_ALLOWED_MISSING.get(label, {})) - _missing(label)
    assert not stale, f"{label}: allow-listed names that now exist or left the reference (remove them): {sorted(stale)}"


@pytest.mark.parametrize("label", LABELS)
def test_signatures_match_the_reference(label: str) -> None:
    allowed = _ALLOWED_SIGNATURES.get(label, {})
    gaps = {name: g for name, g in _signature_gaps(label).items() if name not in allowed}
    assert not gaps, f"{label}: signatures that differ from the reference: {gaps}"


@pytest.mark.parametrize("label", LABELS)
def test_signature_allow_list_has_no_stale_entries(label: str) -> None:
    stale = set(_ALLOWED_SIGNATURES.get(label, {})) - set(_signature_gaps(label))
    assert not stale, f"{label}: allow-listed signatures that now match (remove them): {sorted(stale)}"


# the package itself: what `from tinygrad import X` offers (submodules aside)
_PACKAGE_ALLOWED = {
    "function": "0.14's @function (CALL-op) decorator belongs to its LINEAR IR; " + _NO_LINEAR_IR,
}


def test_package_exports_match_the_reference() -> None:
    import fusegrad

    def public(package: ModuleType) -> set[str]:
        names = {n for n in dir(package) if not n.startswith("_")}
        return {n for n in names if not isinstance(getattr(package, n), ModuleType)}

    missing = public(tinygrad) - public(fusegrad)
    assert missing == set(_PACKAGE_ALLOWED), f"from tinygrad import X that fusegrad lacks: {sorted(missing)}"


def test_signature_gaps_detects_renames_order_and_keywords() -> None:
    def reference(self: Any, shape: Any, *args: Any, pad: int = 0) -> None: ...

    def renamed(self: Any, new_shape: Any, *args: Any, pad: int = 0) -> None: ...

    def no_star(self: Any, shape: Any, pad: int = 0) -> None: ...

    def no_keyword(self: Any, shape: Any, *args: Any) -> None: ...

    def extra(self: Any, shape: Any, *args: Any, pad: int = 0, extra: bool = False) -> None: ...

    def check(fn: Callable[..., None]) -> list[str]:
        return signature_gaps(inspect.signature(reference), inspect.signature(fn))

    assert check(renamed) == ["positional parameter 0 is 'shape', ours is 'new_shape'"]
    assert check(no_star) == ["takes *args, ours does not"]
    assert check(no_keyword) == ["keyword 'pad' is not accepted"]
    assert check(extra) == []
