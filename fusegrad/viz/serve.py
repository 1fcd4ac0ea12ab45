"""VIZ entry points: the data functions (`get_rewrites`, `get_full_rewrite`, `uop_to_json`, `get_profile`), the trace
being served (`trace`), and what `VIZ=1` does at exit: save both traces, then serve them (`save_and_serve_at_exit`).

`VIZ=1`: save, print the viewer's URL and serve until Ctrl-C (a browser tab opens where one can). `VIZ=-1`, CI or a
pytest run: save only, silently. `register_at_exit()` arms the hook once and says on stderr, then, where the files will
be and how to open them (`python -m fusegrad.viz`): nothing is printed at exit. A save that fails (a folder that can't
be created or written) prints why and ends the process with exit status 1.
With PROFILE on when the hook is armed, the profile streams to PROFILEPATH while the run goes (`ProfileStream`, the
format in profile_file.py); a PROFILEPATH ending in .json or .json.gz gets the JSON form, written whole at exit.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from pathlib import Path
from typing import NoReturn

from fusegrad.device import Buffer, Compiled
from fusegrad.helpers import CI, OSX, PROFILE, VIZ, ProfileEvent, cpu_events, profile_sinks
from fusegrad.uop.rewrite import RewriteTrace, tracked_ctxs, tracked_keys, uop_fields
from fusegrad.viz.profile import get_profile
from fusegrad.viz.profile_file import ProfileWriter
from fusegrad.viz.rewrites import get_full_rewrite, get_rewrites, rebuild_uop, uop_to_json
from fusegrad.viz.server import PortInUseError, make_server, serve_until_interrupted
from fusegrad.viz.session import VizSession, open_session
from fusegrad.viz.trace_file import (
    default_paths,
    is_json_path,
    new_run_id,
    rewrites_path_for,
    save_profile,
    save_rewrites,
)

__all__ = ["get_full_rewrite", "get_profile", "get_rewrites", "rebuild_uop", "register_at_exit",
           "save_and_serve_at_exit", "trace", "uop_to_json"]  # fmt: skip

# the trace being served; None until loaded (tests assign it directly)
trace: RewriteTrace | None = None
DEFAULT_PORT = 8000
_registered: list[bool] = []  # one entry once the exit hook is armed


def live_events() -> list[ProfileEvent]:
    """Every profile event recorded in this process: device clocks, host-side ranges and points, buffer lifetimes."""
    return [*Compiled.profile_events, *cpu_events, *Buffer.profile_events]


class ProfileStream:
    """Streams this process's profile events to a ProfileWriter while it runs (helpers.profile_sinks calls `drain`).

    cpu_events (kernel runs, ranges, markers: nearly every event) and Buffer.profile_events (allocs and frees) are
    emptied into each chunk, so recording holds at most a chunk's events. Device clocks (one per device) are written
    from a cursor and stay in their list: they are how later events' clocks are read."""

    def __init__(self, path: Path) -> None:
        self.writer = ProfileWriter(path, new_run_id())
        self.devices_done = 0
        self.lock = threading.Lock()

    def drain(self) -> None:
        if not self.lock.acquire(blocking=False):
            return  # another thread is writing a chunk: these events go with the next one
        try:
            devices = Compiled.profile_events[self.devices_done :]
            count, buffer_count = len(cpu_events), len(Buffer.profile_events)
            batch = [*devices, *cpu_events[:count], *Buffer.profile_events[:buffer_count]]
            del cpu_events[:count]  # events appended meanwhile (other threads) stay for the next chunk
            del Buffer.profile_events[:buffer_count]
            self.devices_done += len(devices)
            self.writer.write(batch)
        finally:
            self.lock.release()

    def close(self) -> Path:
        self.drain()
        return self.writer.close()


_streams: list[ProfileStream] = []  # the armed stream, once


def arm_stream() -> None:
    """Start streaming profile events to PROFILEPATH (unless it names a .json file: that one is written at exit)."""
    path = default_paths()[1]
    if _streams or is_json_path(path):
        return
    try:
        stream = ProfileStream(path)
    except OSError as e:
        exit_on_save_error(e)
    _streams.append(stream)
    profile_sinks.append(stream.drain)


def save_profile_now(path: Path, run_id: str | None) -> tuple[Path, str | None]:
    """Finish the streamed profile (or write the JSON one); returns its path and run id."""
    if _streams:
        stream = _streams.pop()
        profile_sinks.remove(stream.drain)
        return stream.close(), stream.writer.run_id
    if is_json_path(path):
        return save_profile(live_events(), path, run_id), run_id
    writer = ProfileWriter(path, run_id)  # PROFILE was off when the process started: no stream, one chunk now
    writer.write(live_events())
    return writer.close(), run_id


def live_trace() -> RewriteTrace:
    """`trace` when one was assigned, else this process's own tracing containers."""
    return trace if trace is not None else RewriteTrace(tracked_keys, tracked_ctxs, uop_fields)


def save_traces(rewrites: Path | None = None, profile: Path | None = None) -> tuple[Path, Path]:
    """Save this process's rewrite trace and profile (safe JSON, one shared run id) to the given or default paths.

    The rewrites go beside the profile, named after it, unless `rewrites` is given.
    """
    profile, run_id = save_profile_now(profile or default_paths()[1], new_run_id())
    return save_rewrites(live_trace(), rewrites or rewrites_path_for(profile), run_id), profile


def exit_on_save_error(e: OSError) -> NoReturn:
    """A trace that can't be written must not pass silently: say which file and why, then exit with status 1.

    Exceptions raised in an atexit hook are only printed as "ignored" and the exit status stays 0, so the process is
    ended here (hooks registered before this one, which would run after it, are skipped).
    """
    where = f"{e.filename}: " if e.filename else ""
    print(f"VIZ: could not save the trace: {where}{e.strerror or e}; set PROFILEPATH to a file in a writable folder",
          file=sys.stderr, flush=True)  # fmt: skip
    sys.stdout.flush()
    os._exit(1)


def can_open_browser() -> bool:
    """A graphical session exists (not over plain SSH, not in CI): only then is a tab opened."""
    if CI:
        return False
    # DISPLAY/WAYLAND_DISPLAY are the desktop's variables, not fusegrad flags: they say whether a window can open
    return OSX or sys.platform == "win32" or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def save_and_serve_at_exit() -> None:
    """The VIZ exit hook: save both traces; with VIZ>0 (not in CI or pytest) serve them. With only PROFILE=1 it saves
    the profile (never pickle). Quiet: where the files go was said when recording started (`announce_paths`)."""
    if not VIZ.value:
        if PROFILE.value:
            try:
                save_profile_now(default_paths()[1], None)
            except OSError as e:
                exit_on_save_error(e)
        return
    try:
        rewrites, profile = save_traces()
    except OSError as e:
        exit_on_save_error(e)
    if VIZ.value < 0 or CI or "pytest" in sys.modules:
        return  # save only: nothing may block a CI job or a test run
    session = (
        VizSession(live_trace(), live_events())
        if is_json_path(profile)
        else open_session(rewrites, profile, background=True)
    )
    try:
        server = make_server(session, DEFAULT_PORT)
    except PortInUseError:
        server = make_server(session, 0)  # another viewer holds the usual port: any free one will do
    serve_until_interrupted(server, open_browser=can_open_browser())


def announce_paths() -> None:
    """Say on stderr, as recording starts, where the traces will be saved and how to open them (not at exit: a process
    prints nothing while it ends)."""
    profile = default_paths()[1]
    if VIZ.value:
        rewrites = rewrites_path_for(profile)
        where, args = f"{rewrites} and {profile}", f"--rewrites {rewrites} --profile {profile}"
    else:
        where, args = str(profile), f"--profile {profile}"
    flag = "VIZ" if VIZ.value else "PROFILE"
    print(f"{flag}: recording to {where}; view with: python -m fusegrad.viz {args}", file=sys.stderr, flush=True)


def register_at_exit() -> None:
    """Arm `save_and_serve_at_exit` for this process, once, and announce the paths; call it where VIZ is found set."""
    if not _registered:
        _registered.append(True)
        atexit.register(save_and_serve_at_exit)
        if PROFILE.value:
            arm_stream()
        if VIZ.value or PROFILE.value:
            announce_paths()
