"""The DISK device: `Device["DISK:/path/to/file"]` is a file as device memory, mapped with mmap; it computes nothing.

Buffers and views at byte offsets touch only the pages they read, so one tensor's weights come out of a large checkpoint
without reading the rest. Entry point: `Tensor.empty(n, dtype=..., device="DISK:/path")`, then `.to("CPU")`.
Reads past the end of the file raise ValueError with both sizes; writes grow the file (and never truncate it).
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

from fusegrad.device import Allocator, BufferSpec, Compiled


@dataclass(frozen=True, slots=True)
class DiskBuffer:
    """The handle of a DISK allocation: `size` bytes of the device's file at byte `offset` (a view only moves it)."""

    size: int
    offset: int = 0


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

    def unmap(self) -> None:
        if self.mem is not None:
            self.mem.close()  # copies never keep a view of the mapping open, so nothing is exported here
            self.mem = None

    def close(self) -> None:
        self.unmap()
        os.close(self.fd)


class DiskAllocator(Allocator[DiskBuffer]):
    """Allocations are byte ranges of one file: reads check the file is long enough, writes grow it."""

    lru = False  # a freed range goes straight back, so the file closes with its last buffer

    def __init__(self, dev: DiskDevice) -> None:
        super().__init__(dev)
        self.disk = dev

    def _alloc(self, size: int, options: BufferSpec) -> DiskBuffer:
        self.disk.retain(size)
        return DiskBuffer(size)

    def _free(self, opaque: DiskBuffer, options: BufferSpec) -> None:
        self.disk.release()

    def _copyin(self, dest: DiskBuffer, src: memoryview) -> None:
        self.disk.write(dest.offset, src)

    def _copyout(self, dest: memoryview, src: DiskBuffer) -> None:
        self.disk.read_into(dest, src.offset)

    def _offset(self, buf: DiskBuffer, size: int, offset: int) -> DiskBuffer:
        return DiskBuffer(size, buf.offset + offset)


class DiskDevice(Compiled):
    """One file. The file is opened on the first read or write and closed when its last buffer is freed."""

    def __init__(self, device: str) -> None:
        self.path = device.partition(":")[2]
        self._file: MappedFile | None = None
        self._users = 0  # live base allocations
        self._extent = 0  # the largest base allocated since the file was opened: a write makes the file this long
        super().__init__(device, DiskAllocator(self), None, None, None)

    def retain(self, size: int) -> None:
        if not self.path:
            raise ValueError(f"allocate: DISK needs a file: got {self.device!r}, expected 'DISK:/path/to/file'")
        self._users += 1
        self._extent = max(self._extent, size)

    def release(self) -> None:
        self._users -= 1
        if self._users == 0:
            if self._file is not None:
                self._file.close()
            self._file, self._extent = None, 0

    def _open(self, create: bool) -> MappedFile:
        if self._file is None:
            self._file = MappedFile(self.path, create)
        return self._file

    def read_into(self, dest: memoryview, offset: int) -> None:
        """Copy len(dest) bytes at `offset` from the mapping into dest. Raises ValueError past the file's end."""
        end = offset + len(dest)
        if end == offset:
            return  # nothing to read (and an empty file can't be mapped)
        try:
            file = self._open(create=False)
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

    def write(self, offset: int, src: memoryview) -> None:
        """Copy src into the file at `offset`, growing the file first (to cover every live buffer) if it's too short."""
        end = offset + len(src)
        if end == offset:
            return
        file = self._open(create=True)
        if not file.writable:
            raise PermissionError(f"copyin: {self.path} is read-only: can't write {len(src)} bytes at offset {offset}")
        if file.size() < end:
            os.ftruncate(file.fd, max(end, self._extent))
        with memoryview(file.mapping(end)) as mem:
            mem[offset:end] = src

    def finalize(self) -> None:
        """At exit: flush and close the file even if buffers are still alive."""
        if self._file is not None:
            if self._file.mem is not None and self._file.writable:
                self._file.mem.flush()
            self._file.close()
            self._file = None
