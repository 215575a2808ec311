"""L2 of the KV tiers: one compressed file per block in a size-bounded folder, deleted least recently used first.

File names are the block hash in hex and nothing else, so no observation id, prompt or cache salt ever reaches a
path and nothing can be written outside the folder.  Startup lists the folder (names and sizes only: loading is
lazy), so a restarted engine with the same model and KV format serves the blocks an earlier run left; the file
modification time is the LRU order across restarts.  A file that fails any check (``block_codec``) is deleted and
counts as a miss.

The engine thread never touches a file: ``store`` (called while the pool evicts) queues the block's copy for a
daemon writer thread (``DaemonWorker``, started with the first store) that compresses and writes it, and ``discard``
queues the deletion; the lock is held for bookkeeping only, never across a file operation, so a slow or stalled disk
holds no step. A queued block is in the tier at once (``load`` answers it from memory); the queue is bounded by
``WRITE_QUEUE_BYTES`` of block data, past which a block is dropped (recomputed if it is asked for again), as an
eviction without tiers loses it. Thread-safe: the prefetch worker reads, the writer writes, the engine thread queues.
"""

import contextlib
import logging
import os
import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait as wait_for
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oxygen_ros.engine.block_codec import decode_block, encode_block
from oxygen_ros.engine.daemon_worker import DaemonWorker
from oxygen_ros.kernels import KVBlocks

log = logging.getLogger(__name__)
SUFFIX = ".kvb"
_NAME = re.compile(r"^[0-9a-f]{64}\.kvb$")
_TEMPORARY = re.compile(r"^\.[0-9a-f]{64}\.kvb\.(\d+)\.\d+\.tmp$")  # a write's file before its rename: pid, thread
WRITE_QUEUE_BYTES = 64 << 20  # block data waiting for the writer at most; more is dropped, never waited for


@dataclass(frozen=True, eq=False)
class _Queued:
    """A block waiting for the writer (compared by identity: a block stored again after a discard is another)."""

    layers: list[KVBlocks]
    nbytes: int


class DiskTier:
    def __init__(
        self, path: str | Path, capacity_bytes: int, key: str, block_shape: tuple[int, int, int], num_layers: int
    ) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.capacity_bytes = capacity_bytes
        self.key = key
        self.block_shape = block_shape
        self.num_layers = num_layers
        self._lock = threading.Lock()
        self._files: OrderedDict[bytes, int] = OrderedDict()  # block hash -> file size, least recently used first
        self._queued: dict[bytes, _Queued] = {}  # blocks the writer has not written yet
        self.queued_bytes = 0
        self.dropped_writes = 0  # blocks not queued because the writer was WRITE_QUEUE_BYTES behind
        self._dropping = False  # since the last warning; cleared once the queue drains
        self._writer: DaemonWorker | None = None
        self._last_write: Future | None = None
        found = []
        for entry in os.scandir(self.path):
            if _NAME.match(entry.name) and entry.is_file(follow_symlinks=False):
                stat = entry.stat(follow_symlinks=False)
                found.append((stat.st_mtime_ns, bytes.fromhex(entry.name[: -len(SUFFIX)]), stat.st_size))
            elif (written := _TEMPORARY.match(entry.name)) and not _alive(int(written[1])):
                with contextlib.suppress(OSError):  # a process killed mid-write left it: counted nowhere, deleted
                    os.unlink(entry.path)
        for _, block_hash, size in sorted(found):
            self._files[block_hash] = size
        self.used_bytes = sum(self._files.values())
        with self._lock:
            victims = self._shrink(0)
        self._delete(victims)

    def _file(self, block_hash: bytes) -> Path:
        if len(block_hash) != 32:
            raise ValueError(f"a block hash has 32 bytes, got {len(block_hash)}")
        return self.path / (block_hash.hex() + SUFFIX)

    @property
    def num_blocks(self) -> int:
        """Blocks the tier holds: its files and those queued for the writer (``used_bytes`` counts the files only)."""
        with self._lock:
            return len(self._files) + len(self._queued)

    def __contains__(self, block_hash: bytes) -> bool:
        # the queue first: the writer moves a block from it into the files, never back
        return block_hash in self._queued or block_hash in self._files

    def store(self, block_hash: bytes, layers: list[KVBlocks]) -> None:
        """Queue the block (a copy the caller gives up) for the writer unless the tier has it; dropped when the queue
        is full. Never waits on the disk and never fails for it (it is called while the pool evicts)."""
        self._file(block_hash)  # (a bad hash is the caller's error, raised here)
        with self._lock:
            if block_hash in self._files:
                self._files.move_to_end(block_hash)
                return
            if block_hash in self._queued:
                return
            nbytes = sum(blocks.nbytes for blocks in layers)
            if self.queued_bytes + nbytes > WRITE_QUEUE_BYTES:
                self.dropped_writes += 1
                if not self._dropping:
                    self._dropping = True
                    log.warning("KV disk tier: the writer is %d MiB behind the evictions: blocks are dropped until "
                                "it catches up (%d so far)", WRITE_QUEUE_BYTES >> 20, self.dropped_writes)  # fmt: skip
                return
            queued = self._queued[block_hash] = _Queued(layers, nbytes)
            self.queued_bytes += nbytes
            self._submit(self._write_queued, block_hash, queued)

    def _submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """``fn(*args)`` on the writer after everything queued before it (caller holds the lock)."""
        if self._writer is None:
            self._writer = DaemonWorker("oxygen-kv-disk-writer")
            # a tier dropped unclosed (an engine never closed) stops its writer; not at exit: a thread that ran torch
            # ending while the interpreter finalizes aborts the process (std::terminate)
            weakref.finalize(self, self._writer.shutdown, 0.0).atexit = False
        self._last_write = self._writer.submit(fn, *args)

    def flush(self, timeout_s: float) -> bool:
        """Wait until everything queued so far is written or deleted; False when the writer is not done within
        ``timeout_s`` (a slow or stalled disk)."""
        last = self._last_write
        return last is None or not wait_for([last], timeout=timeout_s).not_done

    def write(self, block_hash: bytes, layers: list[KVBlocks]) -> None:
        """Write the block now, on the calling thread (a shutdown's ``persist``, after a ``flush``)."""
        with self._lock:
            if block_hash in self._files:
                self._files.move_to_end(block_hash)
                return
        size = self._put_file(block_hash, layers)
        if size is not None:
            with self._lock:
                victims = self._add(block_hash, size)
            self._delete(victims)

    def close(self, wait_s: float) -> None:
        """Stop the writer after what it has queued, waiting for it at most ``wait_s``."""
        if self._writer is not None:
            self._writer.shutdown(wait_s)

    def _write_queued(self, block_hash: bytes, queued: _Queued) -> None:
        """The writer's part of ``store``: the file, unless the block was discarded before or while it was written."""
        size, mine, victims = None, False, []
        try:
            with self._lock:
                if self._queued.get(block_hash) is not queued:
                    return
            size = self._put_file(block_hash, queued.layers)
        except Exception:  # noqa: BLE001 - nobody waits on the writer's futures: said here, the block is lost
            log.exception("KV disk tier: cannot write %s", block_hash.hex())
        finally:
            with self._lock:
                mine = self._queued.get(block_hash) is queued
                if mine:
                    del self._queued[block_hash]
                self.queued_bytes -= queued.nbytes
                if self.queued_bytes == 0:
                    self._dropping = False
                if size is not None and mine:
                    victims = self._add(block_hash, size)
        self._delete(victims)
        if size is not None and not mine:  # discarded while it was written: its file goes too
            self._delete([block_hash])

    def _put_file(self, block_hash: bytes, layers: list[KVBlocks]) -> int | None:
        """Write the block's file (atomically: a temporary file renamed into place); its size, or None when it
        does not fit the bound or the disk refuses it (a full or read-only disk loses this block only)."""
        data = encode_block(self.key, block_hash, layers)
        if len(data) > self.capacity_bytes:
            return None
        final = self._file(block_hash)
        tmp = final.with_name(f".{final.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, final)
        except OSError as exc:
            log.warning("KV disk tier: cannot write %s: %s", final.name, exc)
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            return None
        return len(data)

    def _add(self, block_hash: bytes, size: int) -> list[bytes]:
        """A written file into the LRU order; the least recently used that must go to make room, to delete once the
        lock is released (caller holds it)."""
        victims = self._shrink(size)
        self._files[block_hash] = size
        self.used_bytes += size
        return victims

    def load(self, block_hash: bytes) -> list[KVBlocks] | None:
        """The block's layers, or None (a miss) when it is absent or its file is bad (then the file is removed); a
        block still queued is answered from memory."""
        queued = self._queued.get(block_hash)
        if queued is not None:
            return queued.layers
        if block_hash not in self._files:
            return None
        path = self._file(block_hash)
        try:
            layers = decode_block(path.read_bytes(), self.key, block_hash, self.block_shape, self.num_layers)
        except (OSError, ValueError) as exc:  # BadBlockFile is a ValueError
            log.warning("KV disk tier: dropping %s: %s", path.name, exc)
            self._forget(block_hash)
            self._delete([block_hash])
            return None
        with self._lock:
            if block_hash in self._files:
                self._files.move_to_end(block_hash)
        with contextlib.suppress(OSError):
            os.utime(path)  # the LRU order survives a restart
        return layers

    def discard(self, block_hash: bytes) -> None:
        """Forget a block (a swapped request's own, no longer needed): out of the queue, or its file deleted by the
        writer."""
        with self._lock:
            self._queued.pop(block_hash, None)  # (its bytes leave the queue once the writer has passed it)
            if self._forget_locked(block_hash):
                self._submit(self._delete, [block_hash])

    def _forget(self, block_hash: bytes) -> None:
        with self._lock:
            self._forget_locked(block_hash)

    def _forget_locked(self, block_hash: bytes) -> bool:
        """Whether the block had a file, now out of the LRU order (caller holds the lock)."""
        size = self._files.pop(block_hash, None)
        if size is not None:
            self.used_bytes -= size
        return size is not None

    def _delete(self, block_hashes: list[bytes]) -> None:
        """Delete these blocks' files (without the lock: a slow disk holds no one else); a disk that refuses (remounted
        read-only) leaves the file, forgotten all the same."""
        for block_hash in block_hashes:
            with contextlib.suppress(OSError):
                self._file(block_hash).unlink(missing_ok=True)

    def _shrink(self, incoming: int) -> list[bytes]:
        """Take least recently used files out of the LRU order until ``incoming`` more bytes fit; their hashes, to
        delete once the lock is released (caller holds it)."""
        victims = []
        while self._files and self.used_bytes + incoming > self.capacity_bytes:
            block_hash, size = self._files.popitem(last=False)
            self.used_bytes -= size
            victims.append(block_hash)
        return victims


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a temporary file of a live process is its write under way)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # (overflow: a number no pid can be)
        return False
    except PermissionError:  # another user's
        return True
    return True
