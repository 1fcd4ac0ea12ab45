"""Persistent key-value store behind the compile cache (compiled binaries, BEAM results): stage 0 support code.

One sqlite file is shared by every process. Writes are single transactions retried while another process holds the
lock; a corrupt file is moved aside and replaced by an empty one; values are tagged raw bytes or JSON, never pickle,
so a cache file can't run code. Entry points: cache_get / cache_put / cache_clear (helpers.diskcache_* wrap them).
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, TypeAlias, TypeVar

if TYPE_CHECKING:
    import sqlite3

SCHEMA_VERSION = 1  # bump when the key or value encoding changes: new tables get a new prefix, old rows are never read
BUSY_TIMEOUT_S = 30.0  # how long sqlite's busy handler waits for another process's write lock
LOCK_RETRIES = 5  # extra attempts after the busy handler gives up (WAL can report BUSY without waiting)

JSONValue: TypeAlias = str | int | float | bool | list["JSONValue"] | dict[str, "JSONValue"] | None
CacheValue: TypeAlias = bytes | JSONValue
CacheKey: TypeAlias = (
    str | bytes | int | float | bool | tuple["CacheKey", ...] | list["CacheKey"] | dict[str, "CacheKey"] | None
)
R = TypeVar("R")

_RAW_TAG, _JSON_TAG = b"\x00", b"\x01"


# hashlib, json and sqlite3 are imported at the first cache access, not with fusegrad: together ~15 ms of
# `import fusegrad` (hashlib loads OpenSSL), paid by programs that never compile a kernel
def _sqlite3() -> ModuleType:
    import sqlite3

    return sqlite3


def _sqlite3_or_warn(path: str) -> ModuleType | None:
    """sqlite3, or None (said once) where this Python was built without it: the cache is skipped, nothing fails."""
    try:
        return _sqlite3()
    except ImportError as err:
        _warn_once(f"fusegrad: cache {path} unusable, continuing without it: this Python has no sqlite3 ({err})")
        return None


_warned: set[str] = set()  # messages already printed, so a broken cache warns once per process, not per lookup


def _tag_key(key: CacheKey) -> JSONValue:
    """Key -> JSON with a type tag per node, so 1, 1.0, True, "1", b"1" and (1,) vs [1] all hash differently."""
    match key:
        case bool() | None:
            return ["b", key]
        case int():
            return ["i", key]
        case float():
            return ["f", repr(key)]
        case str():
            return ["s", key]
        case bytes():
            return ["y", key.hex()]
        case tuple():
            return ["t", [_tag_key(x) for x in key]]
        case list():
            return ["l", [_tag_key(x) for x in key]]
        case dict():
            return ["d", [[k, _tag_key(v)] for k, v in sorted(key.items())]]
    raise TypeError(
        f"diskcache: unsupported key type: got {type(key).__name__}, "
        "expected str/bytes/int/float/bool/None or tuples, lists and str-keyed dicts of those"
    )


def key_digest(key: CacheKey) -> str:
    """Stable across processes and Python versions (unlike hash()): sha256 of the canonical tagged JSON."""
    import hashlib
    import json

    canonical = json.dumps(_tag_key(key), separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _check_json(val: object) -> None:
    """Raise unless val survives a JSON round trip unchanged (tuples would come back as lists, int keys as str)."""
    if val is None or isinstance(val, str | int | float):
        return
    if isinstance(val, list):
        for x in val:
            _check_json(x)
        return
    if isinstance(val, dict) and all(isinstance(k, str) for k in val):
        for x in val.values():
            _check_json(x)
        return
    raise TypeError(
        f"diskcache: unsupported value type: got {type(val).__name__}, expected bytes, str, int, float, "
        "bool, None, or lists and str-keyed dicts of those"
    )


def encode_value(val: CacheValue) -> bytes:
    """One tag byte, then the raw bytes (fast path for compiled binaries) or UTF-8 JSON."""
    if isinstance(val, bytes):
        return _RAW_TAG + val
    import json

    _check_json(val)
    return _JSON_TAG + json.dumps(val, separators=(",", ":")).encode()


def decode_value(blob: bytes) -> CacheValue:
    tag, body = blob[:1], blob[1:]
    if tag == _RAW_TAG:
        return bytes(body)
    if tag == _JSON_TAG:
        import json

        ret: JSONValue = json.loads(body)
        return ret
    raise ValueError(f"diskcache: unknown value tag: got {tag!r}, expected {_RAW_TAG!r} or {_JSON_TAG!r}")


def table_name(table: str) -> str:
    """Quote-safe sqlite identifier; a hash suffix keeps distinct names distinct after sanitising."""
    safe = re.sub(r"[^A-Za-z0-9_]", "_", table)
    if safe != table:
        import hashlib

        safe += "_" + hashlib.sha256(table.encode()).hexdigest()[:8]
    return f"v{SCHEMA_VERSION}_{safe}"


def _errorname(err: sqlite3.Error) -> str:
    return str(getattr(err, "sqlite_errorname", ""))


def _is_busy(err: sqlite3.Error) -> bool:
    return _errorname(err).startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(err)


def _is_corrupt(err: sqlite3.Error) -> bool:
    if _errorname(err).startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
        return True
    return any(s in str(err) for s in ("not a database", "malformed"))


def _warn_once(msg: str) -> None:
    if msg not in _warned:
        _warned.add(msg)
        print(msg, file=sys.stderr)


class SqliteStore:
    """One connection to one cache file, owned by the process that opened it (sqlite handles must not cross fork)."""

    def __init__(self, path: str) -> None:
        self.path, self.pid = path, os.getpid()
        self.lock = threading.Lock()  # one connection is shared by the process's threads
        self.conn: sqlite3.Connection | None = None
        self.file_id: tuple[int, int] | None = None  # (st_dev, st_ino) of the file we opened, to spot replacement

    def connect(self) -> sqlite3.Connection:
        if self.conn is None:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            # isolation_level=None: no implicit transactions; writes use explicit BEGIN IMMEDIATE
            self.conn = _sqlite3().connect(
                self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
            stat = os.stat(self.path)
            self.file_id = (stat.st_dev, stat.st_ino)
            # WAL: readers never block the writer; synchronous=NORMAL is corruption-safe in WAL mode
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn, self.file_id = None, None

    def quarantine(self, err: sqlite3.Error) -> None:
        """Move a corrupt file (and its WAL sidecars) aside, unless another process has already replaced it."""
        opened = self.file_id
        self.close()
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return
        if opened is not None and (stat.st_dev, stat.st_ino) != opened:
            return
        dest = f"{self.path}.corrupt-{int(time.time() * 1000)}"
        os.replace(self.path, dest)
        for suffix in ("-wal", "-shm"):
            if os.path.exists(self.path + suffix):
                os.replace(self.path + suffix, dest + suffix)
        print(f"fusegrad: cache {self.path} is corrupt ({err}); moved to {dest}, starting a fresh one", file=sys.stderr)

    def run(self, op: Callable[[sqlite3.Connection], R]) -> R:
        """Run op, retrying while the database is locked and once more after replacing a corrupt file."""
        with self.lock:
            healed = False
            for attempt in range(LOCK_RETRIES + 1):
                try:
                    return op(self.connect())
                except _sqlite3().DatabaseError as err:
                    if _is_corrupt(err) and not healed:
                        self.quarantine(err)
                        healed = True
                    elif not _is_busy(err) or attempt == LOCK_RETRIES:
                        raise
                    else:
                        time.sleep(0.05 * 2**attempt)
            raise AssertionError("diskcache: unreachable: the last attempt returns or raises")


def _select(table: str, digest: str) -> Callable[[sqlite3.Connection], bytes | None]:
    def op(conn: sqlite3.Connection) -> bytes | None:
        try:
            row = conn.execute(f'SELECT val FROM "{table}" WHERE key=?', (digest,)).fetchone()
        except _sqlite3().OperationalError as err:
            if "no such table" in str(err):
                return None
            raise
        return None if row is None else bytes(row[0])

    return op


def _upsert(table: str, digest: str, blob: bytes) -> Callable[[sqlite3.Connection], None]:
    def op(conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")  # take the write lock up front: no read->write upgrade deadlock
        try:
            conn.execute(f'CREATE TABLE IF NOT EXISTS "{table}" (key TEXT PRIMARY KEY, val BLOB NOT NULL)')
            conn.execute(f'INSERT OR REPLACE INTO "{table}" (key, val) VALUES (?, ?)', (digest, blob))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    return op


def _drop_all(conn: sqlite3.Connection) -> None:
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()]
    for name in names:
        conn.execute(f'DROP TABLE IF EXISTS "{name}"')
    conn.execute("VACUUM")


_stores: dict[str, SqliteStore] = {}
_inherited: list[SqliteStore] = []  # a parent's stores seen after fork: kept, never closed, as sqlite requires
_stores_lock = threading.Lock()


def get_store(path: str) -> SqliteStore:
    path = os.path.abspath(path)
    with _stores_lock:
        store = _stores.get(path)
        if store is None or store.pid != os.getpid():
            if store is not None:
                _inherited.append(store)
            store = _stores[path] = SqliteStore(path)
        return store


def close_all() -> None:
    """Close this process's connections (the last close checkpoints the WAL into the main file)."""
    with _stores_lock:
        for store in _stores.values():
            if store.pid == os.getpid():
                with store.lock:
                    store.close()
        _stores.clear()


def cache_get(path: str, table: str, key: CacheKey) -> CacheValue | None:
    """The value stored under (table, key), or None when missing, unreadable, or the cache is unusable."""
    digest = key_digest(key)
    if (sqlite3 := _sqlite3_or_warn(path)) is None:
        return None
    try:
        blob = get_store(path).run(_select(table_name(table), digest))
        return None if blob is None else decode_value(blob)
    except ValueError as err:
        _warn_once(f"fusegrad: ignoring unreadable cache entry in {path}: {err}")
    except (sqlite3.Error, OSError) as err:
        _warn_once(f"fusegrad: cache {path} unusable, continuing without it: {err}")
    return None


def cache_put(path: str, table: str, key: CacheKey, val: CacheValue) -> None:
    """Store val under (table, key); a cache that can't be written is reported once and otherwise ignored."""
    digest, blob = key_digest(key), encode_value(val)
    if (sqlite3 := _sqlite3_or_warn(path)) is None:
        return
    try:
        get_store(path).run(_upsert(table_name(table), digest, blob))
    except (sqlite3.Error, OSError) as err:
        _warn_once(f"fusegrad: cache {path} unusable, continuing without it: {err}")


def cache_clear(path: str) -> None:
    """Drop every table (all schema versions) and shrink the file."""
    get_store(path).run(_drop_all)
