"""Turns a scheduled batch into one forward pass over the pool, and logits into tokens.

For each scheduled request the runner computes the tokens ``[num_computed_tokens, num_computed_tokens + n)``: a whole
prompt, a prompt chunk, the tail after a cached prefix, or the one new token of a decode step: one code path.
"""

import math
from collections.abc import Callable

import torch

from oxygen_ros.engine.grammar import allowed_tokens
from oxygen_ros.engine.image_features import ImageFeatureCache
from oxygen_ros.engine.io import TokenLogprob
from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.engine.request import Request
from oxygen_ros.engine.sampling import sample
from oxygen_ros.engine.scheduler_output import ScheduledBatch
from oxygen_ros.kv.step_builder import padded_tables
from oxygen_ros.models.interface import ServingModel


MassHook = Callable[[torch.Tensor, torch.Tensor], None]


# Decode steps per measurement of attention mass. The mass is computed beside the attention (the output never
# depends on it), and on a CPU it costs ~10% of a batched step; activity is a rank over a window of ~1000 steps, so a
# sample of every 4th step ranks blocks alike at a quarter of the cost.
ATTENTION_MASS_EVERY = 4


def token_logprob(logprobs: torch.Tensor, token: int, top: int) -> TokenLogprob:
    """The chosen token's log-probability in ``logprobs`` (one row, the model's raw distribution) and the ``top``
    likeliest tokens there."""
    best = torch.topk(logprobs, top) if top else None
    return TokenLogprob(
        token_id=token, logprob=float(logprobs[token]),
        top_ids=[] if best is None else best.indices.tolist(), top_logprobs=[] if best is None else best.values.tolist(),
    )  # fmt: skip


class ModelRunner:
    """Runs scheduled batches; ``on_block_mass(block_tables, mass)`` (if set) gets the attention mass per
    block-table entry of every ``ATTENTION_MASS_EVERY``-th decode step (the first included), summed over layers and
    heads: the eviction policy's activity signal, gathered by the decode kernel."""

    def __init__(
        self, model: ServingModel, kv: KVCache, device: torch.device, on_block_mass: MassHook | None = None,
    ) -> None:
        self.model = model
        self.on_block_mass = on_block_mass
        self.takes_images = model.max_images > 0  # a VLA or VLM: its ImageInputs feed image tokens
        self.image_features = ImageFeatureCache()
        self.kv = kv
        self.device = device
        self.block_size = kv.layout.block_size
        self.tokens_computed = 0  # every token that went through the model (prefill and decode), for stats
        self.decode_steps = 0

    @torch.inference_mode()
    def execute(self, batch: ScheduledBatch) -> dict[str, int]:
        """Run one forward pass; returns the sampled token of every request whose prompt is now fully computed.

        A request with a ``state`` has it as its last prompt token (pi0's state token): the backbone computes the
        tokens before it, then the model writes that token's K/V (``write_prefix_tail``: pi0's action expert,
        attending to the prefix just written).
        """
        self.tokens_computed += batch.total_tokens
        stated = [r.state is not None and r.num_computed_tokens + n == r.num_prompt_tokens
                  for r, n in zip(batch.requests, batch.num_new_tokens)]  # fmt: skip
        rows = [(r, n - s) for r, n, s in zip(batch.requests, batch.num_new_tokens, stated) if n - s]
        sampled = self._forward([r for r, _ in rows], [n for _, n in rows]) if rows else {}
        if any(stated):
            self._write_states([r for r, s in zip(batch.requests, stated) if s])
        return sampled

    def _write_states(self, reqs: list[Request]) -> None:
        """Each request's state token into the pool right after its prefix (``write_prefix_tail``)."""
        prefix_lens = [r.num_prompt_tokens - 1 for r in reqs]
        self.model.write_prefix_tail([r.state for r in reqs], self._block_tables(reqs), prefix_lens, self.kv)
        for req in reqs:
            req.num_computed_tokens += 1

    def _forward(self, reqs: list[Request], counts: list[int]) -> dict[str, int]:
        """The backbone over ``counts[i]`` new tokens of each request; sampled tokens as ``execute`` returns them."""
        ctx, positions = self.kv.steps.batch([r.block_table for r in reqs], [r.num_computed_tokens for r in reqs],
                                             counts, [r.bidirectional_len for r in reqs])  # fmt: skip
        ids = [t for r, n in zip(reqs, counts) for t in r.all_token_ids[r.num_computed_tokens : r.num_computed_tokens + n]]
        input_ids = torch.tensor(ids, dtype=torch.long, device=self.device)
        embeds = self._image_embeds(reqs, counts) if self.takes_images else None
        if ctx.is_decode:
            if self.on_block_mass is not None and self.decode_steps % ATTENTION_MASS_EVERY == 0:
                ctx.block_mass = torch.zeros(ctx.block_tables.shape, dtype=torch.float32, device=self.device)
            self.decode_steps += 1
        hidden = self.model(input_ids, positions, ctx, self.kv, input_embeds=embeds)
        if ctx.block_mass is not None:
            self.on_block_mass(ctx.block_tables, ctx.block_mass)
        ends = torch.tensor(counts, device=self.device).cumsum(0) - 1
        sampling_rows = [
            i for i, (r, n) in enumerate(zip(reqs, counts)) if r.want_text and r.num_computed_tokens + n == r.num_tokens
        ]
        for r, n in zip(reqs, counts):
            r.num_computed_tokens += n
        if not sampling_rows:
            return {}
        logits = self.model.compute_logits(hidden[ends[sampling_rows]])
        chosen = [reqs[i] for i in sampling_rows]
        logprobs = {i: torch.log_softmax(logits[i].float(), dim=-1) for i, r in enumerate(chosen) if r.logprobs >= 0}
        for i, req in enumerate(chosen):
            if req.matcher is not None:  # constrained: only what the grammar allows next (engine/grammar.py)
                logits[i].masked_fill_(~allowed_tokens(req.matcher, logits.shape[-1]).to(logits.device), -math.inf)
        histories = [r.all_token_ids if r.sampling.repetition_penalty != 1.0 else [] for r in chosen]
        tokens = sample(logits, [r.sampling for r in chosen], [r.generator for r in chosen], histories)
        for i, row in logprobs.items():
            chosen[i].output_logprobs.append(token_logprob(row, tokens[i], chosen[i].logprobs))
        return {r.request_id: t for r, t in zip(chosen, tokens)}

    def _image_embeds(self, reqs: list[Request], counts: list[int]) -> torch.Tensor | None:
        """Input rows of a batch of an image model: image tokens from the vision encoder (run once per image set,
        only if some of a request's image tokens are not in the prefix cache; held by the request until its last
        one is computed), text tokens from the embedding table.  None when no row is an image token (decode
        steps): the model embeds the ids."""
        ends = [max((s.start + s.length for s in r.mm_spans if s.image), default=0) for r in reqs]
        if all(r.num_computed_tokens >= end for r, end in zip(reqs, ends)):
            return None
        parts = []
        for req, n, end in zip(reqs, counts, ends):
            start = req.num_computed_tokens
            if start < end and req.image_tokens is None:
                key = b"".join(span.content_hash for span in req.mm_spans if span.image)
                req.image_tokens = self.image_features.get(key, lambda: self.model.encode_images(req.pixels))
            parts.append(self.model.embed_span(req.all_token_ids, start, n, req.image_tokens))
            if start + n >= end:
                req.image_tokens = None
        return torch.cat(parts)

    def _block_tables(self, reqs: list[Request]) -> torch.Tensor:
        """The requests' block tables as one [B, max_blocks] tensor, padded with block 0 (never read)."""
        return torch.tensor(padded_tables([r.block_table for r in reqs]), dtype=torch.long, device=self.device)

    @torch.inference_mode()
    def sample_actions(self, reqs: list[Request], num_steps: int) -> None:
        """One action chunk per request from its prefix in the pool; all requests denoise together in one batch.

        Each request's starting noise comes from its own seeded generator, so a chunk does not depend on batching.
        """
        horizon, action_dim = self.model.action_shape
        noise = torch.stack(
            [torch.randn(horizon, action_dim, generator=r.generator, device=r.generator.device) for r in reqs]
        )
        prefix_lens = [r.num_prompt_tokens for r in reqs]
        tables = self._block_tables(reqs)
        actions = self.model.sample_actions(tables, prefix_lens, self.kv, num_steps, noise=noise)
        for req, chunk in zip(reqs, actions):
            offset = req.action_offset
            req.actions = chunk if offset is None else chunk + torch.from_numpy(offset).to(chunk.device)
