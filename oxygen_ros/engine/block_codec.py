"""One KV block as bytes for the disk tier: a self-describing, checksummed, zstd-compressed record (no pickle).

Layout: ``MAGIC | version u16 | header length u32 | header (JSON) | blake2b-128 of header + body | body``.  The
header names the cache key (model id and pool KV format), the block hash and every layer's storage dtype; the body
is the zstd-compressed raw bytes of each layer's K codes, K scales, V codes, V scales.  ``decode_block`` checks all
of it against what the caller expects and raises ``BadBlockFile`` on any mismatch, so a corrupted, truncated or
foreign file is a miss, never a wrong block.  A block travels as one ``KVBlocks`` per layer holding one block
(int8: its key channel and value token scales; fp8: the per-head scales it was quantized with).
"""

import hashlib
import json
import struct

import numpy as np
import torch
import zstandard

from oxygen_ros.kernels import KVBlocks, KVQuantSpec

MAGIC = b"OXKVBLK\0"
VERSION = 2  # 2: int8 keys with per-channel block scales (a version-1 file is a miss, never misread)
_PREFIX = struct.Struct("<8sHI")
_DIGEST = 16


class BadBlockFile(ValueError):
    """The bytes are not a block this cache can use: corrupted, truncated, another version, model or format."""


def _raw(t: torch.Tensor) -> bytes:
    return t.contiguous().cpu().view(torch.uint8).numpy().tobytes()


def _tensor(buf: memoryview, offset: int, dtype: torch.dtype, shape: tuple[int, ...]) -> tuple[torch.Tensor, int]:
    n = int(np.prod(shape)) * dtype.itemsize
    if offset + n > len(buf):
        raise BadBlockFile("block body shorter than its header says")
    t = torch.frombuffer(bytearray(buf[offset : offset + n]), dtype=torch.uint8).view(dtype).reshape(shape)
    return t, offset + n


def encode_block(key: str, block_hash: bytes, layers: list[KVBlocks], level: int = 3) -> bytes:
    parts = []
    for blocks in layers:
        for data, scale in blocks.planes:
            parts.append(_raw(data))
            if scale is not None:
                parts.append(_raw(scale))
    header = json.dumps(
        {"key": key, "hash": block_hash.hex(), "dtypes": [b.spec.name for b in layers]}, separators=(",", ":")
    ).encode()
    body = zstandard.ZstdCompressor(level=level).compress(b"".join(parts))
    digest = hashlib.blake2b(header + body, digest_size=_DIGEST).digest()
    return _PREFIX.pack(MAGIC, VERSION, len(header)) + header + digest + body


def decode_block(
    data: bytes, key: str, block_hash: bytes, block_shape: tuple[int, int, int], num_layers: int
) -> list[KVBlocks]:
    """The layers of the block ``block_hash`` stored under ``key``; ``block_shape`` = (block_size, kv heads, dim)."""
    if len(data) < _PREFIX.size:
        raise BadBlockFile("file shorter than the block header")
    magic, version, header_len = _PREFIX.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise BadBlockFile(f"not a version-{VERSION} KV block file")
    start = _PREFIX.size
    header_bytes = data[start : start + header_len]
    digest = data[start + header_len : start + header_len + _DIGEST]
    body = data[start + header_len + _DIGEST :]
    if hashlib.blake2b(header_bytes + body, digest_size=_DIGEST).digest() != digest:
        raise BadBlockFile("checksum mismatch")
    try:
        header = json.loads(header_bytes)
        specs = [KVQuantSpec.parse(name) for name in header["dtypes"]]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BadBlockFile(f"unreadable header: {exc}") from exc
    if header.get("key") != key or header.get("hash") != block_hash.hex() or len(specs) != num_layers:
        raise BadBlockFile("the file holds another model, format or block")
    bs, kvh, dim = block_shape
    expected = sum(s.block_bytes(bs, kvh, dim) + (2 * kvh * 4 if s.kind == "fp8" else 0) for s in specs)
    try:
        raw = memoryview(zstandard.ZstdDecompressor().decompress(body, max_output_size=expected))
    except zstandard.ZstdError as exc:
        raise BadBlockFile(f"cannot decompress: {exc}") from exc
    if len(raw) != expected:
        raise BadBlockFile(f"block body holds {len(raw)} bytes, expected {expected}")
    layers, offset = [], 0
    for spec in specs:
        planes = []
        shapes = spec.scale_shapes(1, bs, kvh, dim)
        for plane, scale_dtype in enumerate(spec.scale_dtypes()):
            codes, offset = _tensor(raw, offset, spec.storage_dtype, (1, bs, kvh, dim))
            scale = None
            if shapes is not None:
                scale, offset = _tensor(raw, offset, scale_dtype, shapes[plane])
            planes.append((codes, scale))
        (k, k_scale), (v, v_scale) = planes
        layers.append(KVBlocks(k, v, k_scale, v_scale))
    return layers
