"""L2 of the KV tiers: one compressed file per block in a size-bounded folder, deleted least recently used first.

File names are the block hash in hex and nothing else, so no observation id, prompt or cache salt ever reaches a
path and nothing can be written outside the folder.  Startup lists the folder (names and sizes only: loading is
lazy), so a restarted engine with the same model and KV format serves the blocks an earlier run left; the file
modification time is the LRU order across restarts.  A file that fails any check (``block_codec``) is deleted and
counts as a miss.  Thread-safe: the prefetch worker reads while the engine thread writes.
"""

import contextlib
import logging
import os
import re
import threading
from collections import OrderedDict
from pathlib import Path

from oxygen_ros.engine.block_codec import decode_block, encode_block
from oxygen_ros.kernels import KVBlocks

log = logging.getLogger(__name__)
SUFFIX = ".kvb"
_NAME = re.compile(r"^[0-9a-f]{64}\.kvb$")


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
        found = []
        for entry in os.scandir(self.path):
            if _NAME.match(entry.name) and entry.is_file(follow_symlinks=False):
                stat = entry.stat(follow_symlinks=False)
                found.append((stat.st_mtime_ns, bytes.fromhex(entry.name[: -len(SUFFIX)]), stat.st_size))
        for _, block_hash, size in sorted(found):
            self._files[block_hash] = size
        self.used_bytes = sum(self._files.values())
        with self._lock:
            self._shrink(0)

    def _file(self, block_hash: bytes) -> Path:
        if len(block_hash) != 32:
            raise ValueError(f"a block hash has 32 bytes, got {len(block_hash)}")
        return self.path / (block_hash.hex() + SUFFIX)

    @property
    def num_blocks(self) -> int:
        return len(self._files)

    def __contains__(self, block_hash: bytes) -> bool:
        return block_hash in self._files

    def store(self, block_hash: bytes, layers: list[KVBlocks]) -> None:
        """Write the block (atomically: a temporary file renamed into place) unless it is already there; a failed
        write only loses the block (it is called while the pool evicts, which must not fail)."""
        if block_hash in self._files:
            with self._lock:
                self._files.move_to_end(block_hash)
            return
        data = encode_block(self.key, block_hash, layers)
        if len(data) > self.capacity_bytes:
            return
        final = self._file(block_hash)
        tmp = final.with_name(f".{final.name}.{threading.get_ident()}.tmp")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, final)
        except OSError as exc:  # a full or read-only disk loses this block, never the caller's step
            log.warning("KV disk tier: cannot write %s: %s", final.name, exc)
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            return
        with self._lock:
            self._shrink(len(data))
            self._files[block_hash] = len(data)
            self.used_bytes += len(data)

    def load(self, block_hash: bytes) -> list[KVBlocks] | None:
        """The block's layers, or None (a miss) when it is absent or its file is bad (then the file is removed)."""
        if block_hash not in self._files:
            return None
        path = self._file(block_hash)
        try:
            layers = decode_block(path.read_bytes(), self.key, block_hash, self.block_shape, self.num_layers)
        except (OSError, ValueError) as exc:  # BadBlockFile is a ValueError
            log.warning("KV disk tier: dropping %s: %s", path.name, exc)
            self._forget(block_hash, delete=True)
            return None
        with self._lock:
            if block_hash in self._files:
                self._files.move_to_end(block_hash)
        with contextlib.suppress(OSError):
            os.utime(path)  # the LRU order survives a restart
        return layers

    def discard(self, block_hash: bytes) -> None:
        """Delete a block's file if there is one (a swapped request's own block, no longer needed)."""
        if block_hash in self._files:
            self._forget(block_hash, delete=True)

    def _forget(self, block_hash: bytes, delete: bool) -> None:
        with self._lock:
            size = self._files.pop(block_hash, None)
            if size is not None:
                self.used_bytes -= size
        if delete:
            with contextlib.suppress(OSError):  # (a disk remounted read-only: the file is forgotten, not the request)
                self._file(block_hash).unlink(missing_ok=True)

    def _shrink(self, incoming: int) -> None:
        """Delete least recently used files until ``incoming`` more bytes fit (caller holds the lock)."""
        while self._files and self.used_bytes + incoming > self.capacity_bytes:
            block_hash, size = self._files.popitem(last=False)
            self.used_bytes -= size
            with contextlib.suppress(OSError):
                self._file(block_hash).unlink(missing_ok=True)
