"""What a pi0 and a pi0.5 checkpoint share past PaliGemma: the bidirectional [images | prompt] prefix, the robot
boundary (the state validated and normalised in, the chunk cut to the robot's dims and unnormalised out, with
LeRobot's stats of the folder) and the flow that turns a prefix in the pool into a chunk."""

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.layers.packed_linear import pack_decoder_layers
from oxygen_ros.models.common.flow import starting_noise
from oxygen_ros.models.common.normalization import Normalizer
from oxygen_ros.models.common.paligemma import PaliGemmaPrefix
from oxygen_ros.models.common.prefix import PreparedPrefix, prefix_spans, state_values
from oxygen_ros.models.common.vla_config import VlaConfig
from oxygen_ros.models.interface import PreparedInputs, PromptStyle
from oxygen_ros.models.tokenizer import Tokenizer


class LeRobotPolicy(PaliGemmaPrefix):
    """The PaliGemma prefix plus an action expert (``sample_actions(tables, context_lens, kv, steps, noise)``) and
    the folder's ``Normalizer`` (identity until ``set_normalizer``). A ``ServingModel`` (models/interface.py) of the
    observation style, with ``ImageInputs`` and an ``ActionHead``; a subclass lays out its prefix
    (``observation_prefix``)."""

    config: VlaConfig
    prompt_style: PromptStyle = "observation"
    serves_text = True

    def __init__(self, cfg: VlaConfig, expert: nn.Module) -> None:
        super().__init__(cfg)
        self.expert = expert
        self.normalizer = Normalizer()

    @property
    def max_images(self) -> int:
        return self.config.max_images

    @property
    def camera_keys(self) -> tuple[str, ...]:
        return self.config.camera_keys

    @property
    def action_shape(self) -> tuple[int, int]:
        return self.config.action_horizon, self.config.action_dim

    @property
    def default_denoise_steps(self) -> int:
        return self.config.num_denoise_steps

    def observation_prefix(self, tokenizer: Tokenizer, text: str, images: Sequence[np.ndarray | None],
                           state: np.ndarray | Sequence[float] | None) -> PreparedPrefix:  # fmt: skip
        """One observation's prefix, laid out as this policy was trained on it; ValueError naming what is wrong."""
        raise NotImplementedError

    def prepare_inputs(self, tokenizer: Tokenizer, text: str, images: Sequence[np.ndarray],
                       state: np.ndarray | None) -> PreparedInputs:  # fmt: skip
        """The observation prefix (``observation_prefix``) with its cache keys (``prefix_spans``) and, for a checkpoint
        whose actions are relative to the state, the offset its chunk gets added."""
        prefix = self.observation_prefix(tokenizer, text, images, state)
        offset = None
        if self.normalizer.relative is not None and state is not None:
            offset = self.normalizer.action_offset(state_values(state, self.config.state_dim),
                                                   self.config.output_action_dim)  # fmt: skip
        return PreparedInputs(prefix.token_ids, prefix_spans(prefix, self.config.tokens_per_image), prefix.pixels,
                              prefix.bidirectional_len, prefix.state, observation_len=prefix.bidirectional_len,
                              action_offset=offset)  # fmt: skip

    def write_prefix_tail(self, states: Sequence[np.ndarray], block_tables: torch.Tensor, prefix_lens: list[int],
                          kv: KVCache) -> None:  # fmt: skip
        """The K/V of a prompt's last token that stands for the state: none in pi0.5 (its state is text)."""
        raise NotImplementedError(f"{type(self).__name__} writes no state token")

    def pack_weights(self) -> None:
        """The backbone's and the action expert's Gemma layers fused and prepacked for this CPU (``packed_linear``):
        the prefix, the text decode and every denoising step read them; the backbone's tied head read in place by
        the C product. Call once, after loading."""
        self.backbone.pack_weights()
        pack_decoder_layers(self.expert.layers)

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
