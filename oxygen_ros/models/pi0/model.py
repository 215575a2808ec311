"""``Pi0Model``: PaliGemma (SigLIP + Gemma 2B) prefix in the shared pool, and pi0's action expert reading it.

Per observation:

1. ``observation_prefix(tokenizer, text, images, state)`` (the state normalised with the folder's stats, then
   ``prepare_prefix``) -> [image tokens of every present camera | prompt tokens | state token].  A camera slot given as None (missing camera) contributes no tokens: openpi and
   transformers mask its tokens out of attention and positions, which computes the same thing.
2. Prefill it with ``forward(..., input_embeds=embed_span(...))`` and ``ctx.bidirectional_lens`` = the whole
   prefix: in pi0 every prefix token sees every other one (images and prompt alike), so the prefix is one step and
   an image's K/V depends on the prompt.
3. ``write_prefix_tail(states, block_tables, prefix_lens, kv)``: the state token's K/V after the prefix (see
   ``Pi0ActionExpert``).
4. ``sample_actions(block_tables, prefix_lens + 1, kv)``: the action chunk (robot units), reading [prefix | state]
   from the pool.
"""

from collections.abc import Sequence

import numpy as np
import torch

from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.models.common.policy import LeRobotPolicy
from oxygen_ros.models.common.prefix import PreparedPrefix, bidirectional_prefix, state_values
from oxygen_ros.models.common.vla_config import VlaConfig
from oxygen_ros.models.pi0.action_expert import Pi0ActionExpert
from oxygen_ros.models.pi0.prompt import encode_prompt
from oxygen_ros.models.tokenizer import Tokenizer


class Pi0Model(LeRobotPolicy):
    """pi0: the shared PaliGemma prefix plus pi0's state-token action expert. It decodes no text: its state token,
    written by the action expert, would sit in the text's context."""

    serves_text = False

    def __init__(self, cfg: VlaConfig) -> None:
        super().__init__(cfg, Pi0ActionExpert(cfg))

    def encode_prompt(self, tokenizer: Tokenizer, text: str) -> list[int]:
        """``<bos>`` + text + newline, as pi0 was trained (see ``pi0/prompt.py``)."""
        return encode_prompt(tokenizer, text)

    def observation_prefix(
        self, tokenizer: Tokenizer, text: str, images: Sequence[np.ndarray | None],
        state: np.ndarray | Sequence[float] | None,
    ) -> PreparedPrefix:
        """One observation's prefix, the state normalised (``robot_state``); ValueError as ``prepare_prefix``."""
        return self.prepare_prefix(images, self.encode_prompt(tokenizer, text), self.robot_state(state))

    def prepare_prefix(
        self, images: Sequence[np.ndarray | None], prompt_ids: Sequence[int],
        state: np.ndarray | Sequence[float] | None = None,
    ) -> PreparedPrefix:
        """Validate and lay out the prefix without running any network.  ``images`` holds one entry per camera slot
        in the checkpoint's order (None = that camera is missing).  With ``state``, one state token follows the
        bidirectional [images | prompt] region, so the block table holds its slot (``write_prefix_tail`` fills it).
        ValueError on bad images or state, too many slots, out-of-vocab ids, a prompt over
        ``max_prompt_tokens`` or an empty prefix."""
        cfg = self.config
        values = None if state is None else state_values(state, cfg.state_dim)
        prefix = bidirectional_prefix(cfg, images, prompt_ids)
        if values is None:
            return prefix
        return prefix._replace(token_ids=[*prefix.token_ids, cfg.state_token_id], state=values)

    def state_tensor(self, states: Sequence[np.ndarray | Sequence[float]]) -> torch.Tensor:
        """Robot states -> [B, state_dim] fp32, each zero-padded to ``state_dim`` as openpi pads it; ValueError for a
        state that is longer, not 1-D, empty or not finite."""
        dim = self.config.state_dim
        rows = [np.pad(values, (0, dim - values.size)) for values in (state_values(s, dim, b) for b, s in enumerate(states))]
        return torch.tensor(np.stack(rows), dtype=torch.float32, device=self.backbone.embed_tokens.weight.device)

    @torch.no_grad()
    def write_prefix_tail(
        self, states: Sequence[np.ndarray | Sequence[float]], block_tables: torch.Tensor, prefix_lens: list[int],
        kv: KVCache,
    ) -> None:
        """Each sequence's state token into the pool at position ``prefix_lens[b]`` (its block table must hold it)."""
        self.expert.write_state(self.state_tensor(states), block_tables, prefix_lens, kv)
