"""The per-content KV policy measured: questions about an observation, answered with every block quantized vs with
the observation prefix (the chat system turn holding the scene text) kept in a wider format and only the rest
quantized, both against full precision.  Same greedy agreement as ``quant_language``; bytes per token as stored; the
batch's wall time against the full-precision run's (a mixed pool runs one decode kernel per format).
"""

import time
from dataclasses import dataclass

from oxygen_ros.bench.quant_language import agreement, generate_tokens
from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.engine import Engine
from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.models.registry import ModelBundle

SCENES = [
    "A kitchen. A red mug stands on the counter left of the sink, a knife lies next to a cutting board with two "
    "tomatoes, the fridge door is open and a chair blocks the way to the window.",
    "A living room. A blue sofa faces a television, a cat sleeps on a green rug, three books and a remote control lie "
    "on a low glass table, and the door to the hall is half open.",
    "A warehouse aisle. Two pallets of brown boxes stand on the right, a yellow forklift is parked at the far end, a "
    "spill of water covers the floor ahead and an exit sign glows above a door on the left.",
    "An office. A laptop and a cup of coffee sit on the desk, a person in a grey jacket stands by the printer, a plant "
    "grows in the corner and the window blinds are closed.",
    "A garden. A watering can lies on its side on the path, roses bloom along the fence, a ball rests under a tree "
    "and the gate at the end of the path is closed.",
]
QUESTIONS = [
    "Describe everything you can see and where it is.",
    "Which objects could a robot pick up safely, and how?",
    "Plan a path to the far side of the room and say what to avoid.",
    "What should the robot do first to help here? Explain.",
]


def observation_requests(count: int, new_tokens: int) -> list[GenerateRequest]:
    """``count`` questions about the scenes (each scene asked in turn), greedy, exactly ``new_tokens`` each."""
    sampling = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
    pairs = [(scene, q) for q in QUESTIONS for scene in SCENES][:count]
    return [GenerateRequest(q, task_type="vqa", observation=Observation(text=scene), chat=True, sampling=sampling)
            for scene, q in pairs]  # fmt: skip


@dataclass
class PolicyQuality:
    layout: str  # the pool layout's name, e.g. "int8" or "int8+fp32"
    token_agreement: float
    prompts_identical: float
    bytes_per_token: float  # KV bytes of the requests' tokens as stored (every block counted, shared or not)
    time_ratio: float  # wall time of the batch / the full-precision reference's (same run; below 1: faster)


class PolicyBench:
    """Engines that differ only in their KV formats, over the same observation questions."""

    def __init__(self, bundle: ModelBundle, count: int, new_tokens: int, block_size: int = 16,
                 kv_cache_bytes: int = 256 << 20) -> None:  # fmt: skip
        self.bundle, self.count, self.new_tokens = bundle, count, new_tokens
        self.block_size, self.kv_cache_bytes = block_size, kv_cache_bytes
        self.reference, self.reference_s = self._tokens(self._engine(), "observation reference")

    def _engine(self, **kv: str) -> Engine:
        config = EngineConfig(block_size=self.block_size, kv_cache_bytes=self.kv_cache_bytes, max_num_seqs=self.count,
                              **kv)  # fmt: skip
        return Engine(config, bundle=self.bundle)

    def _tokens(self, engine: Engine, label: str) -> tuple[list[list[int]], float]:
        """The batch's tokens and the seconds it took (prefill included)."""
        start = time.perf_counter()
        tokens = generate_tokens(engine, observation_requests(self.count, self.new_tokens), label)
        return tokens, time.perf_counter() - start

    def measure(self, kv_dtype: str, observation_dtype: str = "") -> PolicyQuality:
        """Every block in ``kv_dtype``, or with ``observation_dtype`` the observation prefix in that format."""
        engine = self._engine(kv_dtype=kv_dtype, kv_observation_dtype=observation_dtype)
        tokens, seconds = self._tokens(engine, f"observation {engine.kv_dtype_name}")
        found = agreement(self.reference, tokens)
        return PolicyQuality(engine.kv_dtype_name, found.token_agreement, found.prompts_identical,
                             self._bytes_per_token(engine), seconds / self.reference_s)  # fmt: skip

    def _bytes_per_token(self, engine: Engine) -> float:
        """What the requests' KV takes in this engine's pool per token: observation blocks in their format, the
        rest in the task's, split as the engine splits them (``InputProcessor.block_formats``)."""
        total_units = total_tokens = 0
        for greq in observation_requests(self.count, self.new_tokens):
            prompt = engine.inputs.prepare(greq)
            tokens = -(-(len(prompt.token_ids) + self.new_tokens) // self.block_size) * self.block_size
            total_units += engine.formats.units_of(engine.inputs.block_formats(greq, prompt), tokens)
            total_tokens += tokens
        return total_units * engine.pool_layout.unit_bytes / total_tokens
