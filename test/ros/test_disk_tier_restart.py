"""Acceptance: the disk KV tier survives a restart of `oxygen_inference` with the same model and config.  A real node
(SmolLM2) answers a question about an observation, is cleaned up (its engine writes what the pool holds to the disk
tier on shutdown) and configured and activated again with an empty pool; the same question then promotes the
observation's prefix from disk (the `disk` tier of the pool stats reports hits) and gets the same answer."""

import time

from inference_client import configure_and_activate, infer, pool_stats, transition, wait_for_observation
from lifecycle_msgs.msg import Transition
from oxygen_ros.msg import Observation as ObservationMsg
from rclpy.node import Node
from rclpy.parameter import Parameter
from ros_harness import spin_nodes, wait_until

from oxygen_ros.nodes.inference_node import InferenceNode

SMOLLM2_BLOCK_BYTES = 30 * 2 * 3 * 64 * 16 * 4  # layers x (K, V) x KV heads x head_dim x tokens x float32
KITCHEN = "The robot is in the kitchen. A red apple and a blue cup are on the table; the cup is left of the apple."
QUESTION = "Which object is left of the apple?"


def _ask(client: Node, publisher) -> tuple[str, int]:
    """Publish the observation (the node's ring is empty after a restart), ask, return (answer, reused tokens)."""
    wait_until(lambda: publisher.get_subscription_count() > 0, what="the node's observation subscription")
    publisher.publish(ObservationMsg(observation_id="kitchen", text=KITCHEN))
    wait_for_observation(client, "kitchen")
    response = infer(client, QUESTION, observation_id="kitchen", task_id="vqa", task_type="vqa", max_new_tokens=12)
    assert response.success, response.message
    return response.text, response.reused_prefix_tokens


def _tier(client: Node, name: str):
    return next(t for t in pool_stats(client).tiers if t.name == name)


def test_disk_tier_serves_hits_after_a_node_restart(ros_context, tmp_path, one_torch_thread):
    folder = tmp_path / "kv"
    overrides = [
        Parameter("model", value="smollm2-135m"),
        Parameter("kv_cache_bytes", value=64 * SMOLLM2_BLOCK_BYTES),
        Parameter("max_model_len", value=512),
        Parameter("disk_tier_path", value=str(folder)),
        Parameter("debug_checks", value=True),
    ]
    node = InferenceNode(context=ros_context, parameter_overrides=overrides)
    client = Node("disk_restart_client", context=ros_context)
    observations = client.create_publisher(ObservationMsg, "/oxygen/observation", 10)
    with spin_nodes(ros_context, node, client):
        configure_and_activate(client)
        first, reused_first = _ask(client, observations)
        assert reused_first == 0 and _tier(client, "disk").blocks == 0  # nothing evicted yet: the disk is empty

        assert transition(client, Transition.TRANSITION_DEACTIVATE)
        assert transition(client, Transition.TRANSITION_CLEANUP)  # the engine shuts down: its pool goes to disk
        files = list(folder.glob("*.kvb"))
        assert files and all(f.stat().st_size > 0 for f in files)

        start = time.monotonic()
        configure_and_activate(client)  # a new engine, an empty pool, the same folder
        disk = _tier(client, "disk")
        assert disk.blocks == len(files) and disk.hits == 0 and pool_stats(client).cached_blocks == 0
        again, reused_again = _ask(client, observations)
        assert again == first
        assert reused_again > 0 and _tier(client, "disk").hits * 16 >= reused_again
        print(f"restart + answer in {time.monotonic() - start:.1f} s, {reused_again} prompt tokens from disk")
        assert transition(client, Transition.TRANSITION_DEACTIVATE)
        assert transition(client, Transition.TRANSITION_CLEANUP)
