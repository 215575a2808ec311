"""Shared by the engine tests: a tiny random Llama shape, an engine factory with invariant checks on, and the frame
period an action-stream test can hold on this machine."""

from oxygen_ros.config import EngineConfig
from oxygen_ros.bench.robot_frames import robot_frames
from oxygen_ros.engine.engine import Engine
from oxygen_ros.bench.frames import FrameDriver, Mode
from oxygen_ros.models.args import LlamaArgs
from oxygen_ros.models.registry import ModelBundle

TINY = LlamaArgs(
    vocab_size=49152, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8,
    rope_theta=10000.0, max_position_embeddings=4096,
)


def make_engine(bundle: ModelBundle, **overrides) -> Engine:
    """An engine over ``bundle`` with a small pool and the pool's invariants checked after every step."""
    values = {"kv_cache_bytes": 64 << 20, "debug_checks": True, "max_model_len": 2048} | overrides
    return Engine(EngineConfig(**values), bundle=bundle)


TARGET_PERIOD_S = 0.1  # 10 Hz


def action_frame_period(bundle: ModelBundle) -> float:
    """10 Hz if this CPU can serve a frame's action step (prefill + denoise) in a quarter of that, else 4x the
    slowest action step measured now: a test checks the deadline logic, not the machine's speed."""
    engine = make_engine(bundle)
    driver = FrameDriver(engine, Mode.CONTINUOUS_BATCHING, steps_per_frame=1)
    driver.run(robot_frames([0, 0, 0], max_new_tokens=1, images=0, seed=99))
    slowest = max(r.steps[0].end_s - r.steps[0].start_s for r in driver.records)
    return max(TARGET_PERIOD_S, 4 * slowest)
