"""The prefix-cache keys of a VLA prefix: which spans of it depend on content their token ids do not show.

* Image tokens: keyed by the images' content hashes (one key over all of them: every image token of a VLA sees
  every image), and fed from the vision encoder.
* A bidirectional region wider than the images (pi0: images + prompt; pi0.5: images + prompt with the state as
  text): every token's K/V depends on the whole region, so each block overlapping it is keyed by the hash of the
  whole region (images and prompt ids).  Two requests share those blocks exactly when frame and instruction (and,
  for pi0.5, the state) are identical, never across prompts.
* pi0's state token: keyed by the state values, so the block holding it (and every block after) follows the state.
"""

import hashlib
import struct

from oxygen_ros.engine.block_hash import MultiModalSpan
from oxygen_ros.models.pi05.model import PreparedPrefix


def vla_spans(prefix: PreparedPrefix, tokens_per_image: int) -> list[MultiModalSpan]:
    num_image_tokens = len(prefix.image_hashes) * tokens_per_image
    images_key = hashlib.sha256("|".join(prefix.image_hashes).encode()).digest()
    spans = [MultiModalSpan(0, num_image_tokens, images_key)] if num_image_tokens else []
    region = prefix.bidirectional_len
    if region > num_image_tokens:
        ids = prefix.token_ids[:region]
        key = hashlib.sha256(b"region|" + images_key + struct.pack(f"<{len(ids)}q", *ids)).digest()
        spans.append(MultiModalSpan(0, region, key, image=False))
    if prefix.state is not None:
        spans.append(MultiModalSpan(region, 1, hashlib.sha256(b"state|" + prefix.state.tobytes()).digest(), image=False))
    return spans
