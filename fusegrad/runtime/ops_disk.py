"""The DISK device: `Device["DISK:/path/to/file"]` is a file as device memory, mapped with mmap; it computes nothing.

Buffers and views at byte offsets touch only the pages they read, so one tensor's weights come out of a large checkpoint
without reading the rest. Entry point: `Tensor.empty(n, dtype=..., device="DISK:/path")`, then `.to("CPU")`; writes
are `t.assign(x.to(t.device))` (the copy lands in the file, in place).
Reads past the end of the file raise ValueError with both sizes; writes grow the file (and never truncate it).

A buffer belongs to the file its path named when it was allocated. When the path is replaced by another file (a
checkpoint saved over it with os.replace), buffers that had opened the old file keep reading and writing the old
bytes through their open descriptor, and buffers allocated afterwards open the new file.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field

from fusegrad.device import Allocator, BufferSpec, Compiled


class MappedFile:
    """One open file and a mapping of all of it; remapped when the file grows. Opened read-write, else read-only."""

    def __init__(self, path: str, create: bool) -> None:
        self.path = path
        try:
            self.fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
            self.writable = True
        except PermissionError:
            self.fd = os.open(path, os.O_RDONLY)  # a read-only checkpoint still loads
            self.writable = False
        stat = os.fstat(self.fd)
        self.identity = (stat.st_dev, stat.st_ino)
        self.mem: mmap.mmap | None = None

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def mapping(self, end: int) -> mmap.mmap:
        """A mapping that covers bytes [0, end); the caller has checked (or made) the file that long."""
        if self.mem is None or len(self.mem) < end:
            self.unmap()
            access = mmap.ACCESS_WRITE if self.writable else mmap.ACCESS_READ
            self.mem = mmap.mmap(self.fd, self.size(), access=access)
        return self.mem

    def is_current(self) -> bool:
        """Does the path still name this file (not replaced, not removed)?"""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return False
        return (stat.st_dev, stat.st_ino) == self.identity

    def unmap(self) -> None:
        if self.mem is not None:
            self.mem.close()  # copies never keep a view of the mapping open, so nothing is exported here
            self.mem = None

    def close(self) -> None:
        if self.mem is not None and self.writable:
            self.mem.flush()
        self.unmap()
        os.close(self.fd)


@dataclass(eq=False)
class FileUse:
    """The buffers allocated while the path named one file: they share its descriptor, opened on their first read
    or write and closed with the last of them."""

    path: str
    users: int = 0  # live base allocations
    extent: int = 0  # the largest base allocated: a write makes the file at least this long
    file: MappedFile | None = field(default=None)

    def open(self, create: bool) -> MappedFile:
        if self.file is None:
            self.file = MappedFile(self.path, create)
        return self.file

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


@dataclass(frozen=True, slots=True)
class DiskBuffer:
    """The handle of a DISK allocation: `size` bytes at byte `offset` of the file `use` (a view only moves it)."""

    size: int
    use: FileUse
    offset: int = 0


class DiskAllocator(Allocator[DiskBuffer]):
    """Allocations are byte ranges of one file: reads check the file is long enough, writes grow it."""

    lru = False  # a freed range goes straight back, so the file closes with its last buffer

    def __init__(self, dev: DiskDevice) -> None:
        super().__init__(dev)
        self.disk = dev

    def _alloc(self, size: int, options: BufferSpec) -> DiskBuffer:
        return DiskBuffer(size, self.disk.retain(size))

    def _free(self, opaque: DiskBuffer, options: BufferSpec) -> None:
        self.disk.release(opaque.use)

    def _copyin(self, dest: DiskBuffer, src: memoryview) -> None:
        self.disk.write(dest.use, dest.offset, src)

    def _copyout(self, dest: memoryview, src: DiskBuffer) -> None:
        self.disk.read_into(src.use, dest, src.offset)

    def _offset(self, buf: DiskBuffer, size: int, offset: int) -> DiskBuffer:
        return DiskBuffer(size, buf.use, buf.offset + offset)


class DiskDevice(Compiled):
    """One path. Its file is opened on the first read or write and closed when its last buffer is freed."""

    def __init__(self, device: str) -> None:
        self.path = device.partition(":")[2]
        self._use: FileUse | None = None  # what new buffers get
        self._uses: list[FileUse] = []  # every use with live buffers (older files replaced at the path too)
        super().__init__(device, DiskAllocator(self), None, None, None)

    @property
    def _file(self) -> MappedFile | None:
        """The open file new buffers use (None while closed)."""
        return None if self._use is None else self._use.file

    def retain(self, size: int) -> FileUse:
        """The file use a new base allocation of `size` bytes joins: a fresh one once the path names another file."""
        if not self.path:
            raise ValueError(f"allocate: DISK needs a file: got {self.device!r}, expected 'DISK:/path/to/file'")
        if self._use is None or (self._use.file is not None and not self._use.file.is_current()):
            self._use = FileUse(self.path)
            self._uses.append(self._use)
        self._use.users += 1
        self._use.extent = max(self._use.extent, size)
        return self._use

    def release(self, use: FileUse) -> None:
        use.users -= 1
        if use.users == 0:
            use.close()
            self._uses.remove(use)
            if use is self._use:
                self._use = None

    def read_into(self, use: FileUse, dest: memoryview, offset: int) -> None:
        """Copy len(dest) bytes at `offset` from the mapping into dest. Raises ValueError past the file's end."""
        end = offset + len(dest)
        if end == offset:
            return  # nothing to read (and an empty file can't be mapped)
        try:
            file = use.open(create=False)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"copyout: {self.path} does not exist: expected a file of at least {end} bytes"
            ) from None
        if (size := file.size()) < end:
            raise ValueError(
                f"copyout: {self.path} is too short: got {size} bytes, expected at least {end} "
                f"(reading {len(dest)} bytes at offset {offset})"
            )
        with memoryview(file.mapping(end)) as mem:
            dest[:] = mem[offset:end]

    def write(self, use: FileUse, offset: int, src: memoryview) -> None:
        """Copy src into the file at `offset`, growing the file first (to cover every live buffer) if it's too short."""
        end = offset + len(src)
        if end == offset:
            return
        file = use.open(create=True)
        if not file.writable:
            raise PermissionError(f"copyin: {self.path} is read-only: can't write {len(src)} bytes at offset {offset}")
        if file.size() < end:
            os.ftruncate(file.fd, max(end, use.extent))
        with memoryview(file.mapping(end)) as mem:
            mem[offset:end] = src

    def finalize(self) -> None:
        """At exit: flush and close every file even if buffers are still alive (their later frees do nothing)."""
        for use in self._uses:
            use.close()
