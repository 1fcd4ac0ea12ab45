"""The VIZ server's data entry points: traced rewrites (`get_rewrites`, `get_full_rewrite`, `uop_to_json`).

`trace` is the RewriteTrace being served; `VIZ=1` loads it from the saved file, tests assign it directly.
The HTTP server and the profiler's packed layout build on these (issue: VIZ web app).
"""

from __future__ import annotations

from fusegrad.uop.rewrite import RewriteTrace
from fusegrad.viz.profile import get_profile
from fusegrad.viz.rewrites import get_full_rewrite, get_rewrites, rebuild_uop, uop_to_json

__all__ = ["get_full_rewrite", "get_profile", "get_rewrites", "rebuild_uop", "trace", "uop_to_json"]

# the trace being served; None until loaded
trace: RewriteTrace | None = None
