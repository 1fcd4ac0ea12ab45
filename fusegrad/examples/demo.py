"""Demo of the IR: build an index expression as a UOp graph, print it, and simplify it with the `sym` rule table.

Run `python -m fusegrad.examples.demo` (or `--help`). The expression is the kind codegen makes when it flattens a
2-d index `(row, col)` into a 1-d buffer and back; `sym` folds it to the few nodes a kernel needs.
"""

from __future__ import annotations

import argparse

from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import sym


def build_index(width: int) -> UOp:
    """((row*width + col) // width, (row*width + col) % width) plus identities, for row, col in [0, width)."""
    row = UOp.variable("row", 0, width - 1)
    col = UOp.variable("col", 0, width - 1)
    flat = (row * width + col + 0) * 1  # +0 and *1 as a careless frontend would leave them
    return UOp.sink(flat // width, flat % width, flat * 2 + flat * 3)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--width", type=int, default=16, help="row length of the 2-d index (default 16)")
    args = parser.parse_args(argv)
    if args.width < 1:
        parser.error(f"--width must be at least 1, got {args.width}")

    graph = build_index(args.width)
    print("expressions:", ", ".join(src.render(simplify=False) for src in graph.src))
    print("graph:")
    print(repr(graph))
    simplified = graph_rewrite(graph, sym, name="demo simplify")
    print("simplified:", ", ".join(src.render(simplify=False) for src in simplified.src))
    print(f"nodes: {len(graph.toposort())} before, {len(simplified.toposort())} after")


if __name__ == "__main__":
    main()
