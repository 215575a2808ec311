"""The fuzzer's side of the wire: one rclpy node in this process that sends batches of requests and goals at once
(floods), cancels them at their drawn moments, publishes messages, and waits for every answer within a timeout.
A call with no answer in time fails the run: every call must be answered. Its clients have the graph's deep queues
(nodes/qos.py), or a flood's answers beyond the tenth would be lost on the way back."""

import time
from typing import Any

from action_msgs.msg import GoalStatus
from oxygen_ros.action import AskQuestion as AskQuestionAction
from oxygen_ros.action import FollowInstruction, Generate, Navigate
from oxygen_ros.msg import Observation
from oxygen_ros.srv import AskQuestion, CancelTask, GetPoolStats, Infer
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from ros_harness import wait_for
from sensor_msgs.msg import Image

from oxygen_ros.nodes.action_client import ActionClient
from oxygen_ros.nodes.qos import SERVICE_QUEUE
from fuzz import oracle
from fuzz.oracle import Tally

SERVICES = {"/oxygen/infer": Infer, "/vqa/ask": AskQuestion, "/oxygen/cancel_task": CancelTask,
            "/oxygen/get_pool_stats": GetPoolStats}  # fmt: skip
ACTIONS = {"/follow_instruction": FollowInstruction, "/navigate": Navigate, "/oxygen/generate": Generate,
           "/vqa/ask": AskQuestionAction}  # fmt: skip
CANCELLED = {GoalStatus.STATUS_CANCELED: "CANCELLED"}


class Fuzzer:
    def __init__(self, node: Node, answer_s: float) -> None:
        self.node, self.answer_s = node, answer_s
        queue = {f"{part}_service_qos_profile": SERVICE_QUEUE for part in ("goal", "result", "cancel")}
        self.services = {
            name: node.create_client(kind, name, qos_profile=SERVICE_QUEUE) for name, kind in SERVICES.items()
        }
        self.actions = {name: ActionClient(node, kind, name, **queue) for name, kind in ACTIONS.items()}
        self.observations = node.create_publisher(Observation, "/oxygen/observation", 10)
        self.images = node.create_publisher(Image, "/camera/image_raw", qos_profile_sensor_data)
        self.tallies: dict[str, Tally] = {}  # by service or action
        self.published: dict[str, int] = {}  # messages by topic

    def wait_for_servers(self, timeout: float) -> None:
        for name, client in self.services.items():
            assert client.wait_for_service(timeout_sec=timeout), f"{name} is not served"
        for name, client in self.actions.items():
            assert client.wait_for_server(timeout_sec=timeout), f"{name} is not served"

    def tally(self, interface: str) -> Tally:
        return self.tallies.setdefault(interface, Tally())

    def call(self, name: str, requests: list, cancels: list[tuple[float | None, str]] | None = None) -> list:
        """Send every request at once, then CancelTask each drawn task id at its drawn delay; the responses in order
        (the cancels' own responses are checked here: a cancel with a valid id succeeds)."""
        client, tally = self.services[name], self.tally(name)
        start = time.monotonic()
        futures = [client.call_async(request) for request in requests]
        tally.calls += len(futures)
        for delay, task_id in sorted((c for c in cancels or [] if c[0] is not None), key=_first):
            time.sleep(max(0.0, start + delay - time.monotonic()))
            request = CancelTask.Request(task_id=task_id)
            response = self.answer("/oxygen/cancel_task", request)
            oracle.cancel(request).check(f"cancel {task_id[:40]!r}", response.success, response.error_code,
                                         response.message)  # fmt: skip
        responses = [self._wait(future, start, f"{name} {request}") for future, request in zip(futures, requests)]
        for response in responses:
            tally.add(response.error_code, time.monotonic() - start)
        return responses

    def answer(self, name: str, request: Any) -> Any:
        """One call, counted like the rest."""
        start = time.monotonic()
        self.tally(name).calls += 1
        response = self._wait(self.services[name].call_async(request), start, f"{name} {request}")
        self.tally(name).add(response.error_code, time.monotonic() - start)
        return response

    def pool_stats(self):
        """The pool now (not counted: it is the check, not the fuzz)."""
        client = self.services["/oxygen/get_pool_stats"]
        return self._wait(client.call_async(GetPoolStats.Request()), time.monotonic(), "pool stats").stats

    def goals(self, name: str, goals: list, cancel_after: list[float | None]) -> list[tuple[int, Any]]:
        """Send every goal at once (a task node's newer goal preempts its running one; /oxygen/generate runs them
        side by side), cancel each at its delay (None: let it end by itself); (terminal status, result) of each, in
        order. An action named like a service (/vqa/ask) is tallied apart from it."""
        client, tally = self.actions[name], self.tally(f"{name} (action)" if name in SERVICES else name)
        start = time.monotonic()
        sent = [client.send_goal_async(goal) for goal in goals]
        tally.calls += len(sent)
        handles = [self._wait(future, start, f"{name} goal response") for future in sent]
        assert all(h.accepted for h in handles), f"{name} rejected a goal: bad ones are accepted, then aborted"
        results = [handle.get_result_async() for handle in handles]
        for delay, handle in sorted(((d, h) for d, h in zip(cancel_after, handles) if d is not None), key=_first):
            time.sleep(max(0.0, start + delay - time.monotonic()))
            handle.cancel_goal_async()
        outcomes = []
        for future, goal in zip(results, goals):
            response = self._wait(future, start, f"{name} {goal}")
            tally.add(response.result.error_code or CANCELLED.get(response.status, ""), time.monotonic() - start)
            outcomes.append((response.status, response.result))
        return outcomes

    def _wait(self, future, start: float, what: str) -> Any:
        try:
            return wait_for(future, max(0.1, start + self.answer_s - time.monotonic()))
        except TimeoutError:
            raise AssertionError(f"no answer within {self.answer_s} s: {what[:300]}") from None

    def publish(self, topic: str, messages: list) -> None:
        publisher = self.observations if topic == "/oxygen/observation" else self.images
        for msg in messages:
            publisher.publish(msg)
        self.published[topic] = self.published.get(topic, 0) + len(messages)


def _first(pair: tuple) -> float:
    return pair[0]
