"""What one forward pass needs to know about its batch: built once per step from Python lists, read by every layer.

A step carries a flattened ragged batch: sequence ``b`` contributes ``query_lens[b]`` new tokens at the end of a
context of ``context_lens[b]`` tokens.  The first ``context_lens[b] - query_lens[b]`` tokens are already in the pool
(a cached prefix, earlier chunks, earlier decode steps) and are read through the row's block table; the new tokens'
K/V are written to ``slot_mapping`` (``-1`` = not stored: the action expert, whose K/V is never kept) and attended to
directly.  Masks are causal, except that tokens at absolute positions below ``bidirectional_lens[b]`` also see each
other whatever their order (a prefix-LM mask: pi0.5's image tokens, the action expert's action tokens); such a region
is computed in one step.

A step that prefills and also carries one-token (decode) rows keeps those rows apart (``DecodeRows``): they are
attended as a decode step over the pool, so padding them to the longest prompt does not multiply the step's
attention (four decode rows beside a 300-token pi0.5 prompt took 2.4 times the prompt alone). A pool of several
formats undoes the split (``merge_decode_rows``): its decode reads need a plan per format.

Everything derived from the batch (length tensors, the prefill mask and padding index) is computed here, once, so a
layer neither creates tensors nor reads values back to the host (on a GPU either would stall the step thirty times).
What depends on the pool (the per-format plan of a mixed pool, the shared-prefix plan of a CPU decode step) is added
by ``StepBuilder.plan`` (``kv.steps``) before the first layer runs.
"""

import itertools
from dataclasses import dataclass, field

import torch

from oxygen_ros.kernels import CascadeLayout
from oxygen_ros.kernels.cpu_paged_decode import PrefixGroups
from oxygen_ros.kv.format_plan import FormatPlan
from oxygen_ros.kv.kv_write import KVWrite, stored_tokens
from oxygen_ros.kv.token_rows import TokenRows


@dataclass
class PrefillLayout:
    """A prefill (or mixed prefill + decode) step's queries padded to ``[B, max_query]`` over ``[cached | new]``
    keys, and the boolean mask of who sees whom; ``mask`` is None for one causal sequence with nothing cached
    (attention then runs causal without a mask)."""

    max_query: int
    max_cached: int
    cached_lens: list[int]
    pad_index: torch.Tensor | None  # [T] position of each token in the flattened [B * max_query]; None for B == 1
    mask: torch.Tensor | None  # [B, 1, max_query, max_cached + max_query]


@dataclass
class DecodeRows:
    """The one-token rows of a step that also prefills, and where the step's other tokens and sequences are."""

    tokens: torch.Tensor  # [n] their positions among the step's new tokens
    context: "StepContext"  # theirs as a decode step (planned with the step: StepBuilder.plan)
    prompt_tokens: torch.Tensor  # [T - n] the positions of the other (prompt) tokens
    prompt_tables: torch.Tensor  # [B - n, max_blocks]


@dataclass
class StepContext:
    slot_mapping: torch.Tensor  # [T] int64: flat slot (block * block_size + offset) per new token, -1 = not stored
    query_lens: list[int]  # new tokens per sequence
    context_lens: list[int]  # tokens per sequence after this step, including the new ones
    block_tables: torch.Tensor  # [B, max_blocks] int64, padded with 0 (never read past context_lens)
    bidirectional_lens: list[int] | None = None  # per sequence: positions below it see each other; None = causal
    block_mass: torch.Tensor | None = None  # decode only: fp32 [B, max_blocks], every layer adds its attention mass
    tables: list[list[int]] | None = None  # host copy of block_tables (builders have it; else read back once)
    slots: list[int] | None = None  # host copy of slot_mapping, likewise
    is_decode: bool = field(init=False)
    max_context: int = field(init=False)
    context_lens_tensor: torch.Tensor = field(init=False, repr=False)
    writes: list[KVWrite] = field(init=False, repr=False)  # a one-format pool's; a mixed pool's are the plan's
    prefill: PrefillLayout | None = field(init=False, repr=False)  # of the prompt rows when decode_rows is set
    decode_rows: DecodeRows | None = field(init=False, repr=False)
    # the read path, added once by StepBuilder.plan (``planned``): layers only read it
    planned: bool = field(default=False, init=False, repr=False)
    format_plan: FormatPlan | None = field(default=None, init=False, repr=False)  # mixed pools
    cascade: CascadeLayout | None = field(default=None, init=False, repr=False)  # CPU decode, torch's ops
    prefix_groups: PrefixGroups | None = field(default=None, init=False, repr=False)  # CPU decode, the C kernel
    token_rows: TokenRows | None = field(default=None, init=False, repr=False)  # CPU prefill, the C kernel
    row_decode: bool = field(default=False, init=False, repr=False)  # decode of up to 8 rows: the one-call C decoder
    # per layer, the cached K/V every row attends, gathered once for a context many forward passes read (an action
    # flow's denoising steps); None: each pass gathers its own
    past_kv: list[tuple[torch.Tensor, torch.Tensor]] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.tables is None:
            self.tables = self.block_tables.tolist()
        if self.slots is None:
            self.slots = self.slot_mapping.tolist()
        device = self.block_tables.device
        self.is_decode = all(n == 1 for n in self.query_lens)
        self.max_context = max(self.context_lens)
        self.context_lens_tensor = torch.tensor(self.context_lens, dtype=torch.long, device=device)
        self.writes = [w for w in (stored_tokens(0, self.slots, device, self.slot_mapping),) if w is not None]
        self.prefill, self.decode_rows = None, None
        if self.is_decode:
            return
        wide = [b for b, n in enumerate(self.query_lens) if n > 1]
        starts = list(itertools.accumulate(self.query_lens, initial=0))  # each sequence's first new token
        single = [b for b, n in enumerate(self.query_lens) if n == 1 and self.slots[starts[b]] >= 0]
        if len(single) + len(wide) < self.num_seqs or not single:  # nothing to split, or a row not stored
            self.merge_decode_rows()
            return
        tokens = torch.tensor([starts[b] for b in single], device=device)
        decode = StepContext(self.slot_mapping.index_select(0, tokens), [1] * len(single),
                             [self.context_lens[b] for b in single],
                             self.block_tables.index_select(0, torch.tensor(single, device=device)),
                             tables=[self.tables[b] for b in single], slots=[self.slots[starts[b]] for b in single])
        prompt_tokens = [starts[b] + i for b in wide for i in range(self.query_lens[b])]
        self.decode_rows = DecodeRows(tokens, decode, torch.tensor(prompt_tokens, device=device),
                                      self.block_tables.index_select(0, torch.tensor(wide, device=device)))
        bidirectional = None if self.bidirectional_lens is None else [self.bidirectional_lens[b] for b in wide]
        self.prefill = _prefill_layout([self.query_lens[b] for b in wide], [self.context_lens[b] for b in wide],
                                       bidirectional, device)  # fmt: skip

    def merge_decode_rows(self) -> None:
        """One padded layout over every row (the decode rows padded like prompts)."""
        self.decode_rows = None
        self.prefill = _prefill_layout(self.query_lens, self.context_lens, self.bidirectional_lens,
                                       self.block_tables.device)  # fmt: skip

    @property
    def num_seqs(self) -> int:
        return len(self.query_lens)

    @property
    def kv_writes(self) -> list[KVWrite]:
        """Where this step's new K/V goes, per format."""
        return self.format_plan.write_slots() if self.format_plan is not None else self.writes


def _prefill_layout(
    query_lens: list[int], context_lens: list[int], bidirectional_lens: list[int] | None, device: torch.device
) -> PrefillLayout:
    num_seqs, max_q = len(query_lens), max(query_lens)
    cached_lens = [c - n for c, n in zip(context_lens, query_lens)]
    max_cached = max(cached_lens)
    pad_index = None
    if num_seqs > 1:
        pad_index = torch.tensor([b * max_q + i for b, n in enumerate(query_lens) for i in range(n)], device=device)
    if num_seqs == 1 and max_cached == 0 and not (bidirectional_lens and bidirectional_lens[0] > 0):
        return PrefillLayout(max_q, 0, cached_lens, None, None)
    cached = torch.tensor(cached_lens, device=device)
    qlens = torch.tensor(query_lens, device=device)
    kpos = torch.arange(max_cached + max_q, device=device)
    is_past = kpos < max_cached  # [K]
    past_ok = is_past[None, :] & (kpos[None, :] < cached[:, None])  # [B, K]: a row's own cached tokens
    new_idx = kpos - max_cached  # index among the new tokens, for the new part of the keys
    new_ok = (~is_past)[None, :] & (new_idx[None, :] < qlens[:, None])
    qi = torch.arange(max_q, device=device)
    visible = is_past[None, None, :] | (new_idx[None, None, :] <= qi[None, :, None])  # [1, Q, K]: causal
    if bidirectional_lens is not None:
        bidir = torch.tensor(bidirectional_lens, device=device) - cached  # new tokens inside the region
        both_inside = (new_idx[None, None, :] < bidir[:, None, None]) & (qi[None, :, None] < bidir[:, None, None])
        visible = visible | both_inside
    mask = ((past_ok | new_ok)[:, None, :] & visible)[:, None]  # [B, 1, Q, K]
    return PrefillLayout(max_q, max_cached, cached_lens, pad_index, mask)
