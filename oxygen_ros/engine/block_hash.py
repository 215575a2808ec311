"""Content hashes of full KV blocks, chained so a block's hash names its whole prefix.

hash(block i) = sha256(hash(block i-1) | token ids of block i | extra keys of block i).  The chain starts from a root
that folds in the model id, the KV dtype and an optional per-request cache salt, so KV is never shared across models,
precisions or tenants; extra keys carry the content hash of every image whose placeholder tokens overlap the block,
so identical placeholder ids over different images never share KV; in a mixed-format pool they also carry the block's
storage format, so a block is only ever reused in the format it was written in.  Encoding is explicit (no pickle, no
Python ``hash``), hence stable across processes: the disk tier can key files by it.
"""

import hashlib
import struct
from collections.abc import Callable, Sequence

from oxygen_ros.models.interface import MultiModalSpan


def root_hash(model_id: str, kv_dtype: str, cache_salt: str = "") -> bytes:
    h = hashlib.sha256(b"oxygen_ros/kv/v1")
    for part in (model_id, kv_dtype, cache_salt):
        data = part.encode()
        h.update(struct.pack("<I", len(data)) + data)
    return h.digest()


def hash_block(parent: bytes, token_ids: Sequence[int], extra_keys: Sequence[bytes] = ()) -> bytes:
    h = hashlib.sha256(parent)
    h.update(struct.pack(f"<I{len(token_ids)}q", len(token_ids), *token_ids))
    for key in extra_keys:
        h.update(struct.pack("<I", len(key)) + key)
    return h.digest()


def block_hash_chain(
    root: bytes, token_ids: Sequence[int], block_size: int, spans: Sequence[MultiModalSpan] = (), start: int = 0,
    parent: bytes | None = None, block_format: Callable[[int], int] | None = None,
) -> list[bytes]:
    """Hashes of the full blocks of ``token_ids`` from block index ``start`` (``parent`` = hash of block start-1);
    ``block_format(i)``, when given, is the storage format of block i."""
    out = []
    prev = root if parent is None else parent
    for i in range(start, len(token_ids) // block_size):
        lo, hi = i * block_size, (i + 1) * block_size
        extra = [s.content_hash for s in spans if s.start < hi and s.start + s.length > lo]
        if block_format is not None:
            extra.append(b"format:%d" % block_format(i))
        prev = hash_block(prev, token_ids[lo:hi], extra)
        out.append(prev)
    return out
