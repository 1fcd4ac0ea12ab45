"""Tests for fusegrad/viz/kernels.py: KERNEL nodes carry their kernel's name and link to its codegen group, live and in
a saved trace."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fusegrad.helpers import ansistrip
from fusegrad.uop.rewrite import RewriteTrace
from fusegrad.viz.kernels import SavedKernel, kernel_text
from fusegrad.viz.session import VizSession
from fusegrad.viz.trace_file import decode, encode, load_rewrites, save_rewrites

if TYPE_CHECKING:  # the fixture's type; conftest is not importable in importlib mode
    from conftest import RealTrace

KERNEL_NAME = re.compile(r"<Kernel ([A-Za-z]\w*) \d+ store\(s\)>")


def kernel_nodes(session: VizSession) -> list[dict[str, Any]]:
    """Every KERNEL node drawn in the input graph of each step that has one."""
    assert session.trace is not None, "the session has a trace"
    nodes = []
    for ctx, steps in enumerate(session.trace.rewrites):
        for idx in range(len(steps)):
            graph = next(m for m in session.step_stream(ctx, idx) if m["kind"] == "graph")["graph"]
            nodes += [n for n in graph.values() if n["label"].startswith("KERNEL")]
    return nodes


def check_named_and_linked(trace: RewriteTrace, nodes: list[dict[str, Any]]) -> None:
    assert nodes, "the run has KERNEL nodes"
    linked = [n for n in nodes if n["ref"] is not None]
    compiled = {k.ret.name for k in trace.keys if k.ret is not None}
    assert len(linked) >= len(compiled), "every compiled kernel's node links to its codegen"
    for node in nodes:
        arg_line = ansistrip(node["label"]).split("\n")[1]
        assert (m := KERNEL_NAME.fullmatch(arg_line)) is not None, arg_line
        if node["ref"] is not None:
            assert m.group(1) == trace.keys[node["ref"]].display_name
    assert {KERNEL_NAME.fullmatch(ansistrip(n["label"]).split("\n")[1]).group(1) for n in linked} == compiled  # type: ignore[union-attr]  # checked above


def test_live_kernel_nodes_are_named_and_linked(real_trace: RealTrace) -> None:
    check_named_and_linked(real_trace.trace, kernel_nodes(real_trace.session()))


def test_saved_kernel_nodes_are_named_and_linked(real_trace: RealTrace, tmp_path: Path) -> None:
    loaded = load_rewrites(save_rewrites(real_trace.trace, tmp_path / "r.json.gz")).trace
    check_named_and_linked(loaded, kernel_nodes(VizSession(loaded)))
    live = [(n["label"], n["ref"]) for n in kernel_nodes(real_trace.session())]
    assert [(n["label"], n["ref"]) for n in kernel_nodes(VizSession(loaded))] == live


def test_saved_kernel_round_trip_and_text() -> None:
    for value in (SavedKernel("r_4_16", 3, 1), SavedKernel(None, None, 2)):
        assert decode(encode(value)) == value
    assert repr(SavedKernel("r_4_16", 3, 1)) == kernel_text("r_4_16", 1) == "<Kernel r_4_16 1 store(s)>"
    assert repr(SavedKernel(None, None, 2)) == "<Kernel 2 store(s)>"
