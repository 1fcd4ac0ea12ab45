"""Tests for fusegrad/viz/server.py and session.py: the endpoints on a real trace, streaming, and what is refused."""

from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit
from urllib.request import urlopen

import pytest

from fusegrad.helpers import TRACK_MATCH_STATS, Context
from fusegrad.uop.ops import tracked_ctxs
from fusegrad.viz.profile import get_profile
from fusegrad.viz.rewrites import get_full_rewrite
from fusegrad.viz.server import STATIC, PortInUseError, make_server, start_in_thread
from fusegrad.viz.session import VizSession

if TYPE_CHECKING:  # the fixture's type; conftest is not importable in importlib mode
    from conftest import RealTrace

REPO = Path(__file__).resolve().parents[2]
Served = tuple[VizSession, str]


def raw_get(url: str, path: str, host: str | None = None, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    """GET (or `method`) `path` exactly as written (no client-side normalisation of `..` or `%2e`)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    conn.putrequest(method, path, skip_host=host is not None)
    if host is not None:
        conn.putheader("Host", host)
    conn.endheaders()
    res = conn.getresponse()
    body = res.read()
    conn.close()
    return res.status, dict(res.getheaders()), body


def get_json(url: str) -> Any:
    with urlopen(url, timeout=30) as res:
        return json.load(res)


def stream(url: str) -> list[dict[str, Any]]:
    with urlopen(url, timeout=60) as res:
        assert res.headers["Content-Type"] == "application/x-ndjson"
        return [json.loads(line) for line in res]


class TestPages:
    def test_index_and_assets(self, served: Served) -> None:
        _, url = served
        for path, kind in (("/", "text/html"), ("/app.js", "text/javascript"), ("/style.css", "text/css")):
            status, headers, body = raw_get(url, path)
            assert status == 200, path
            assert headers["Content-Type"].startswith(kind), path
            assert "default-src 'none'" in headers["Content-Security-Policy"]
            assert body

    @pytest.mark.parametrize(
        "path",
        ["/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/..%2f..%2fetc%2fpasswd", "/%2E%2E%5C%2E%2E%5Cwin.ini",
         "//etc/passwd", "/etc/passwd", "/static/../server.py", "/server.py", "/../server.py", "/%2e%2e/server.py",
         "/C:/Windows/win.ini", "/app.js%00.css", "/.hidden.js", "/nope.js"],
    )  # fmt: skip
    def test_nothing_outside_the_asset_folder(self, served: Served, path: str) -> None:
        status, _, body = raw_get(served[1], path)
        assert status == 404, path
        assert b"root:" not in body
        assert b"import" not in body

    def test_foreign_host_header_is_refused(self, served: Served) -> None:
        status, _, _ = raw_get(served[1], "/ctxs", host="attacker.example:80")
        assert status == 403

    def test_static_files_reference_nothing_external(self) -> None:
        files = list(STATIC.iterdir())
        assert {f.name for f in files} >= {"index.html", "app.js", "style.css"}
        for f in files:
            text = f.read_text()
            for pattern in ("http://", "https://", "//cdn", "@import", r"url\((?!#)"):
                assert not re.search(pattern, text), f"{f.name} matches {pattern!r}"


class TestRewriteEndpoints:
    def test_ctxs_lists_groups_and_steps(self, served: Served, real_trace: RealTrace) -> None:
        _session, url = served
        groups = get_json(url + "ctxs")
        assert [g["name"] for g in groups] == [k.display_name for k in real_trace.trace.keys]
        assert [len(g["steps"]) for g in groups] == [len(s) for s in real_trace.trace.rewrites]
        kernels = [g for g in groups if g["kernel"]]
        assert kernels
        assert all(g["kernel"]["query"].startswith("/kernel?ctx=") for g in kernels)
        step = groups[0]["steps"][0]
        assert {"name", "loc", "depth", "match_count", "code_line", "query"} <= set(step)
        assert "trace" not in step  # call traces come with the step, not in the list

    def test_step_streams_every_graph_with_its_order(self, served: Served, real_trace: RealTrace) -> None:
        _, url = served
        ctx, idx = next((c, i) for c, steps in enumerate(real_trace.trace.rewrites) for i, s in enumerate(steps)
                        if len(s.matches) >= 2)  # fmt: skip
        step = real_trace.trace.rewrites[ctx][idx]
        messages = stream(url + f"ctxs?ctx={ctx}&idx={idx}")
        assert [m["kind"] for m in messages] == ["step"] + ["graph"] * (len(step.matches) + 1) + ["done"]
        head, graphs = messages[0], messages[1:-1]
        assert head["match_count"] == len(step.matches)
        assert head["trace"]
        replay = list(get_full_rewrite(step, real_trace.trace.uop_fields))
        for message, want in zip(graphs, replay, strict=True):
            # replayed nodes that died in between are rebuilt at new ids: compare what is drawn
            assert sorted(n["label"] for n in message["graph"].values()) == sorted(
                re.sub("\x1b\\[[0-9;]*m", "", n["label"]) for n in want["graph"].values()
            )
            # the page lays it out itself: the nodes' order comes along (sources first, as the layout needs it)
            assert [str(n) for n in message["order"]] == list(message["graph"])
            assert "layout" not in message
            drawn = {int(k): n["src"] for k, n in message["graph"].items()}
            place = {n: i for i, n in enumerate(message["order"])}
            assert all(place[s] < place[n] for n, srcs in drawn.items() for _, s in srcs if s in place)
            assert not any("\x1b" in n["label"] for n in message["graph"].values())
        assert graphs[0]["rule"] is None
        rule = graphs[1]["rule"]
        assert rule["loc"][0].endswith(".py")
        assert rule["line"]
        assert rule["src"]
        assert isinstance(graphs[1]["diff"], list)

    def test_concurrent_streams_record_nothing(self, served: Served, real_trace: RealTrace) -> None:
        """Replays run with tracking off, one graph at a time, and leave TRACK_MATCH_STATS as they found it."""
        _, url = served
        busy = [f"{url}ctxs?ctx={c}&idx={i}" for c, steps in enumerate(real_trace.trace.rewrites)
                for i, s in enumerate(steps) if s.matches]  # fmt: skip
        steps_before = sum(len(s) for s in tracked_ctxs)
        with Context(TRACK_MATCH_STATS=2), ThreadPoolExecutor(4) as pool:
            results = list(pool.map(stream, busy * 2))
            assert TRACK_MATCH_STATS.value == 2
        assert sum(len(s) for s in tracked_ctxs) == steps_before
        assert all(r[-1]["kind"] == "done" for r in results)

    def test_prepare_replays_a_step_before_it_is_asked_for(self, real_trace: RealTrace) -> None:
        session = real_trace.session()
        server, url = start_in_thread(session)
        try:
            ctx, idx = next((c, i) for c, steps in enumerate(real_trace.trace.rewrites) for i, s in enumerate(steps)
                            if s.matches)  # fmt: skip
            assert raw_get(url, f"/prepare?ctx={ctx}&idx={idx}", method="HEAD")[0] == 200
            assert not session._preparing  # HEAD checks the numbers and starts nothing
            assert get_json(url + f"prepare?ctx={ctx}&idx={idx}") == {"started": True}
            messages = stream(url + f"ctxs?ctx={ctx}&idx={idx}")  # follows the preparation, or reads what it kept
            assert messages[-1] == {"kind": "done", "count": len(real_trace.trace.rewrites[ctx][idx].matches) + 1}
            assert (ctx, idx) in session._steps
            assert get_json(url + f"prepare?ctx={ctx}&idx={idx}") == {"started": False}  # kept: nothing to do
            status, _, body = raw_get(url, f"/prepare?ctx={ctx}&idx=100000")
            assert status == 404
            assert "no step 100000" in json.loads(body)["error"]
        finally:
            server.shutdown()
            server.server_close()

    def test_bad_queries_are_404_json(self, served: Served) -> None:
        _, url = served
        for query in ("ctxs?ctx=999&idx=0", "ctxs?ctx=0&idx=-1", "ctxs?ctx=x&idx=0", "kernel?ctx=0", "kernel"):
            status, headers, body = raw_get(url, "/" + query)
            assert status == 404, query
            assert headers["Content-Type"] == "application/json", query
            assert "error" in json.loads(body)

    @pytest.mark.parametrize("name", ["ctx", "idx"])
    @pytest.mark.parametrize("value", ["-1", "-53", "99999", "1e3", "", "0x1", "%EF%BC%99", "9" * 40])
    def test_index_parameters_out_of_range_are_404(self, served: Served, name: str, value: str) -> None:
        query = {"ctx": f"ctxs?ctx={value}&idx=0", "idx": f"ctxs?ctx=0&idx={value}"}[name]
        for path in (query, f"kernel?ctx={value}") if name == "ctx" else (query,):
            status, headers, body = raw_get(served[1], "/" + path)
            assert status == 404, path
            assert headers["Content-Type"] == "application/json", path
            error = json.loads(body)["error"]
            assert name in error or "no " in error, error
            assert "list index" not in error, error

    def test_negative_and_large_groups_never_show_another_kernel(self, served: Served, real_trace: RealTrace) -> None:
        session, _ = served
        count = len(real_trace.trace.keys)
        for ctx in (-1, -53 % count - count, count, 99999):
            with pytest.raises(IndexError, match=f"no group {ctx}: groups are numbered 0 to {count - 1}"):
                session.kernel(ctx)
            with pytest.raises(IndexError, match=f"no group {ctx}"):
                session.step(ctx, 0)
        with pytest.raises(IndexError, match="no step -1 in group 0: its steps are numbered 0 to"):
            session.step(0, -1)
        status, _, body = raw_get(served[1], f"/kernel?ctx={count}")
        assert status == 404
        assert json.loads(body)["error"] == f"no group {count}: groups are numbered 0 to {count - 1}"

    def test_head_is_get_without_a_body(self, served: Served, real_trace: RealTrace) -> None:
        _, url = served
        ctx = next(i for i, k in enumerate(real_trace.trace.keys) if k.ret is not None)
        for path in ("/", "/app.js", "/ctxs", f"/kernel?ctx={ctx}", "/get_profile", "/profile_info", "/search?q=add",
                     "/ctxs?ctx=0&idx=0"):  # fmt: skip
            _, get_headers, get_body = raw_get(url, path)
            status, headers, body = raw_get(url, path, method="HEAD")
            assert (status, body) == (200, b""), path
            assert headers["Content-Type"] == get_headers["Content-Type"], path
            if "Content-Length" in get_headers:
                assert headers["Content-Length"] == str(len(get_body)), path
        for path in ("/nope.js", "/kernel?ctx=-1"):
            status, _, body = raw_get(url, path, method="HEAD")
            assert (status, body) == (404, b""), path

    def test_kernel_source_and_linear_uops(self, served: Served, real_trace: RealTrace) -> None:
        _, url = served
        ctx, key = next((i, k) for i, k in enumerate(real_trace.trace.keys) if k.ret is not None)
        kernel = get_json(url + f"kernel?ctx={ctx}")
        assert kernel["src"] == key.ret.src
        assert kernel["name"] == key.ret.name
        assert [u["op"] for u in kernel["uops"]] == [u.op.name for u in key.ret.uops]
        pygments = pytest.importorskip("pygments")
        assert pygments
        assert '<span class="' in kernel["html"]

    def test_search_finds_where_a_node_appears(self, served: Served) -> None:
        _, url = served
        hits = get_json(url + "search?q=reduce_axis")
        assert hits
        assert all("reduce_axis" in h["text"] for h in hits)
        assert {"ctx", "idx", "match", "group", "step"} <= set(hits[0])
        created = get_json(url + "search?q=range")
        assert any(h["match"] > 0 for h in created) or created
        assert get_json(url + "search?q=") == []
        assert get_json(url + "search?q=no-such-node-text") == []


class TestProfileEndpoints:
    def test_get_profile_is_the_packed_layout(self, served: Served, real_trace: RealTrace) -> None:
        session, url = served
        with urlopen(url + "get_profile", timeout=30) as res:
            assert res.headers["Content-Type"] == "application/octet-stream"
            data = res.read()
        assert data == get_profile(real_trace.events, session.programs())
        assert data != get_profile(real_trace.events)  # kernels carry a link (ref) to their group

    def test_profile_info(self, served: Served) -> None:
        _, url = served
        info = get_json(url + "profile_info")
        assert info["kernels"]
        assert all(k["ops"] is None or k["ops"] >= 0 for k in info["kernels"].values())
        assert info["runs"]["CPU"]


class TestBinding:
    def test_binds_loopback_only(self, served: Served) -> None:
        assert urlsplit(served[1]).hostname == "127.0.0.1"

    def test_taken_port_says_so(self) -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            with pytest.raises(PortInUseError, match=f"port {port} on 127.0.0.1 is already in use.*--port"):
                make_server(VizSession(), port)

    def test_viewer_cli_reports_a_taken_port(self, real_trace: RealTrace, tmp_path: Path) -> None:
        from fusegrad.viz.trace_file import save_profile

        profile = save_profile(real_trace.events, tmp_path / "p.json")
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            proc = subprocess.run([sys.executable, "-m", "fusegrad.viz", "--profile", str(profile), "--port", str(port),
                                   "--no-browser"], capture_output=True, text=True, timeout=60,
                                  env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, cwd=tmp_path)  # fmt: skip
        assert proc.returncode == 1
        assert re.search(f"port {port} on 127.0.0.1 is already in use", proc.stderr), proc.stderr


@pytest.mark.parametrize("port", ["99999", "-1", "65536", "http"])
def test_viewer_cli_refuses_a_bad_port_as_a_usage_error(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    from fusegrad.viz.__main__ import main

    with pytest.raises(SystemExit) as info:
        main(["--port", port, "--no-browser"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ")
    assert "argument --port:" in err
    assert "0..65535" in err
    assert "Traceback" not in err


def test_empty_session_serves_empty_answers() -> None:
    session = VizSession()
    assert session.groups() == []
    assert session.search("x") == []
    assert session.profile_info() == {"kernels": {}, "runs": {}}
    assert len(session.profile_bytes()) > 0
