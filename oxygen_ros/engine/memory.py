"""How much KV the pool holds and in which formats: the storage format of each task type and of observation
prefixes (one pool, several formats under one budget), and the number of pool units the byte budget buys."""

import os
from dataclasses import dataclass

import torch

from oxygen_ros.config import EngineConfig
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.kernels import KVQuantSpec, format_support_error
from oxygen_ros.kv.layout import KVLayout, PoolLayout
from oxygen_ros.models.registry import ModelBundle
from oxygen_ros.tasks import TASK_TYPES


@dataclass(frozen=True)
class KVFormats:
    """The pool's layout, the format id of each task type and of observation prefixes (None = the task's)."""

    pool_layout: PoolLayout
    task_formats: dict[str, int]
    observation_format: int | None
    block_size: int

    def units_of(self, formats: tuple[int, int, int], num_tokens: int) -> int:
        """Pool units ``num_tokens`` tokens of a request with these block formats take: (its format, its
        observation prefix's format, how many leading full blocks are that prefix)."""
        kv_format, observation_format, observation_blocks = formats
        width = self.pool_layout.units_per_block
        blocks = -(-num_tokens // self.block_size)
        return (blocks - observation_blocks) * width(kv_format) + observation_blocks * width(observation_format)


def kv_formats(config: EngineConfig, bundle: ModelBundle, dtype: torch.dtype, device: torch.device,
               kernels: str) -> KVFormats:  # fmt: skip
    """The formats from ``kv_dtype``, ``kv_full_precision_layers``, ``kv_task_dtypes`` and ``kv_observation_dtype``;
    INVALID_ARGUMENT for a bad value, FAILED_PRECONDITION for a format this device cannot run on ``kernels``."""
    bad = [i for i in config.kv_full_precision_layers if not 0 <= i < bundle.num_layers]
    if bad:
        raise EngineError(ErrorCode.INVALID_ARGUMENT, f"kv_full_precision_layers {bad} out of range: "
                          f"{bundle.model_id} has layers 0..{bundle.num_layers - 1}")  # fmt: skip

    def storage(name: str) -> torch.dtype:
        return dtype if name == "auto" else KVQuantSpec.parse(name).storage_dtype  # validated by the config

    task_dtypes = config.task_kv_dtypes()
    per_task = {t: storage(task_dtypes.get(t, config.kv_dtype)) for t in TASK_TYPES}
    observation = storage(config.kv_observation_dtype) if config.kv_observation_dtype else None
    dtypes = list(dict.fromkeys([*per_task.values(), *([observation] if observation else [])]))  # used ones
    full_precision = tuple(sorted(set(config.kv_full_precision_layers)))
    layouts = tuple(
        KVLayout(bundle.num_layers, bundle.num_kv_heads, bundle.head_dim, config.block_size, d, full_precision, dtype)
        for d in dtypes
    )
    try:
        pool_layout = PoolLayout(layouts)
    except ValueError as exc:
        raise EngineError(ErrorCode.INVALID_ARGUMENT, str(exc)) from exc
    group = bundle.num_heads // bundle.num_kv_heads if bundle.num_heads else 2  # query heads per kv-head
    for lay in layouts:
        for spec in dict.fromkeys(lay.layer_spec(i) for i in range(bundle.num_layers)):  # e.g. fp8 and fp32 layers
            why = format_support_error(spec, device, kernels, bundle.num_kv_heads, bundle.head_dim, group,
                                       config.block_size, dtype)  # fmt: skip
            if why:
                raise EngineError(ErrorCode.FAILED_PRECONDITION, f"KV format {spec.name} cannot run here: {why}")
    task_formats = {t: dtypes.index(d) for t, d in per_task.items()}
    observation_format = None if observation is None else dtypes.index(observation)
    return KVFormats(pool_layout, task_formats, observation_format, config.block_size)


def budget_bytes(config: EngineConfig, device: torch.device) -> int:
    """``kv_cache_bytes``, or when it is 0 ``kv_cache_memory_fraction`` of free device memory (CUDA) or of the
    available RAM (CPU)."""
    if config.kv_cache_bytes:
        return config.kv_cache_bytes
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
    else:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return int(free * config.kv_cache_memory_fraction)


def num_blocks(config: EngineConfig, pool_layout: PoolLayout, max_model_len: int, device: torch.device) -> int:
    """Pool units in the byte budget; never more than every sequence at full length could use. INVALID_ARGUMENT
    when the budget holds not even one block of the widest format."""
    budget = budget_bytes(config, device)
    widest = max(pool_layout.units_per_block(f) for f in range(len(pool_layout.formats)))
    ceiling = config.max_num_seqs * -(-max_model_len // config.block_size) * widest
    units = min(pool_layout.units_for_budget(budget), ceiling)
    if units < widest:
        raise EngineError(ErrorCode.INVALID_ARGUMENT,
                          f"KV budget of {budget} bytes holds no block of {pool_layout.bytes_per_block()} bytes")  # fmt: skip
    return units
