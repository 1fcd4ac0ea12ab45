"""`python -m fusegrad.viz`: open saved traces in the VIZ web app, or write the profile as a Chrome/Perfetto trace.

    python -m fusegrad.viz [--rewrites FILE] [--profile FILE] [--port N] [--no-browser] [--export-trace out.json]

Without files it opens what VIZ=1 saved last. The terminal view (no browser needed) is `python -m fusegrad.viz.cli`.
"""

from __future__ import annotations

import argparse
import sys

from fusegrad.viz.export import export_chrome_trace
from fusegrad.viz.serve import DEFAULT_PORT, can_open_browser
from fusegrad.viz.server import PortInUseError, make_server, serve_until_interrupted
from fusegrad.viz.session import open_session
from fusegrad.viz.trace_file import TraceFileError


def port_number(text: str) -> int:
    """argparse type for --port: an integer 0..65535 (0: any free port); anything else is a usage error."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r} (expected an integer 0..65535)") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is out of range: expected 0..65535 (0: any free port)")
    return port


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fusegrad.viz", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rewrites", metavar="FILE", help="rewrite trace saved by VIZ=1")
    parser.add_argument("--profile", metavar="FILE", help="profile saved by VIZ=1")
    parser.add_argument(
        "--port", type=port_number, default=DEFAULT_PORT, help=f"port on 127.0.0.1 (default {DEFAULT_PORT}; 0: any)"
    )
    parser.add_argument("--no-browser", action="store_true", help="don't open a browser tab, just print the URL")
    parser.add_argument("--export-trace", metavar="OUT", help="write the profile as Chrome trace JSON and exit")
    args = parser.parse_args(argv)
    try:
        session = open_session(args.rewrites, args.profile, background=not args.export_trace)
    except TraceFileError as e:
        print(f"viz: {e}", file=sys.stderr)
        return 2
    if args.export_trace:
        path = export_chrome_trace(session.profile_events(), args.export_trace)
        print(f"viz: wrote {path} (open it in Perfetto or chrome://tracing)")
        return 0
    try:
        server = make_server(session, args.port)
    except PortInUseError as e:
        print(e.strerror, file=sys.stderr)
        return 1
    serve_until_interrupted(server, open_browser=not args.no_browser and can_open_browser())
    return 0


if __name__ == "__main__":
    sys.exit(main())
