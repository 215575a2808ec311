"""What a pi0 and a pi0.5 checkpoint share past PaliGemma: the bidirectional [images | prompt] prefix, the robot
boundary (the state validated and normalised in, the chunk cut to the robot's dims and unnormalised out, with
LeRobot's stats of the folder) and the flow that turns a prefix in the pool into a chunk."""

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.models.pi0.config import Pi0Config
from oxygen_ros.models.pi0.normalization import Normalizer
from oxygen_ros.models.pi05.action_expert import starting_noise
from oxygen_ros.models.pi05.model import PreparedPrefix
from oxygen_ros.models.pi05.paligemma import PaliGemmaPrefix
from oxygen_ros.models.pi05.preprocess import image_content_hash, preprocess_images


def state_values(state: np.ndarray | Sequence[float], dim: int, index: int = 0) -> np.ndarray:
    """A robot state as fp64 values; ValueError for one that is longer than ``dim``, not 1-D, empty or not finite."""
    values = np.asarray(state, dtype=np.float64)
    if values.ndim != 1 or not 0 < values.size <= dim:
        raise ValueError(f"state {index}: expected a 1-D vector of 1..{dim} values, got shape {values.shape}")
    if not np.isfinite(values).all():
        raise ValueError(f"state {index}: contains NaN or infinite values")
    return values


def bidirectional_prefix(
    cfg: Pi0Config, images: Sequence[np.ndarray | None], prompt_ids: Sequence[int]
) -> PreparedPrefix:
    """[image tokens of every present camera | prompt], validated, one bidirectional region (pi0's and pi0.5's
    prefix alike); ValueError on bad images, too many slots, out-of-vocab ids, a prompt over ``max_prompt_tokens``
    or an empty prefix."""
    if len(images) > cfg.max_images:
        raise ValueError(f"{len(images)} camera slots, this checkpoint has {cfg.max_images}")
    present = [image for image in images if image is not None]
    ids = [int(i) for i in prompt_ids]
    if not ids and not present:
        raise ValueError("empty prefix: give at least one image or one prompt token")
    if len(ids) > cfg.max_prompt_tokens:
        raise ValueError(f"prompt is {len(ids)} tokens, more than {cfg.max_prompt_tokens}")
    if any(not 0 <= i < cfg.vocab_size for i in ids):
        raise ValueError(f"prompt token ids must lie in [0, {cfg.vocab_size})")
    pixels = preprocess_images(present, cfg.vision.image_size, cfg.max_images)
    token_ids = [cfg.image_token_id] * (len(present) * cfg.tokens_per_image) + ids
    return PreparedPrefix(token_ids, pixels, [image_content_hash(im) for im in present], len(token_ids))


class LeRobotPolicy(PaliGemmaPrefix):
    """The PaliGemma prefix plus an action expert (``sample_actions(tables, context_lens, kv, steps, noise)``) and
    the folder's ``Normalizer`` (identity until ``set_normalizer``)."""

    config: Pi0Config

    def __init__(self, cfg: Pi0Config, expert: nn.Module) -> None:
        super().__init__(cfg)
        self.expert = expert
        self.normalizer = Normalizer()

    def set_normalizer(self, normalizer: Normalizer) -> None:
        """Use the folder's stats; ValueError when their action width is not the chunk's robot dims."""
        width, dims = normalizer.action.width, self.config.output_action_dim
        if width not in (None, dims):
            raise ValueError(f"action normalization stats have {width} dims, the checkpoint's chunk {dims} "
                             "(config.json output_features.action.shape)")  # fmt: skip
        self.normalizer = normalizer

    def robot_state(self, state: np.ndarray | Sequence[float] | None) -> np.ndarray:
        """The robot's state, validated and normalised as the model was trained on it; ValueError without one (pi0
        and pi0.5 both need it, as LeRobot's processors do), or for a bad one."""
        if state is None:
            raise ValueError("this policy needs the robot state (observation.state)")
        return self.normalizer.normalize_state(state_values(state, self.config.state_dim))

    @torch.no_grad()
    def sample_actions(
        self,
        block_tables: torch.Tensor,
        context_lens: list[int],
        kv: KVCache,
        num_steps: int | None = None,
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Action chunks [B, action_horizon, output_action_dim] in robot units (fp32): the flow runs at the padded
        action_dim over each sequence's first ``context_lens[b]`` pool tokens, the chunk is cut to the robot's dims
        and unnormalised, as LeRobot's policy and postprocessor do.  Noise [B, action_horizon, action_dim] and steps
        as in ``Pi05Model.sample_actions``."""
        cfg = self.config
        device = block_tables.device
        if noise is None:
            noise = starting_noise((len(context_lens), cfg.action_horizon, cfg.action_dim), generator, device)
        steps = cfg.num_denoise_steps if num_steps is None else num_steps
        chunk = self.expert.sample_actions(block_tables, context_lens, kv, steps, noise.to(device))
        return self.normalizer.unnormalize_actions(chunk[..., : cfg.output_action_dim])
