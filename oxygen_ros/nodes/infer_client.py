"""How a task node calls the inference node: `/oxygen/infer`, or `/oxygen/generate` when the answer should stream,
from an executor coroutine, never blocking a thread, with a timeout and every failure turned into an
``Infer.Response`` whose ``error_code`` says what happened.

- The service (or action server) is absent (the inference node is not running, or restarting): UNAVAILABLE after
  ``wait_s``; the next call checks again, so a task node recovers on its own when the inference node returns.
- The server a call went to vanishes while it waits (the inference node's process died): UNAVAILABLE as soon as
  discovery notices, not after ``timeout_s``: a dead server never answers. The servers are polled every
  ``GONE_POLL_S`` by the id of their request reader, so a server restarted meanwhile (which never got the request)
  does not hide that the old one is gone. Discovery drops a SIGKILLed process after its DDS lease: 2 s for the
  processes of `oxygen-ros up` and `ros2 launch` (config/fastdds_profile.xml), 20 s by Fast DDS's default.
- A server gets no request until ``SETTLE_S`` after it could first have matched this client (a restarted inference
  node: when this client first saw it; the first server: when this client was made or last saw no server): DDS
  matches a service's two topics one way at a time, and a reply the server sends before its reply writer has matched
  this node's reader is lost, so the call would wait its whole ``timeout_s`` for an answer (often a prompt
  FAILED_PRECONDITION from a node still loading its model) that never comes.
- No answer within ``timeout_s``: DEADLINE_EXCEEDED. Text requests carry the same ``deadline_s``, so the engine
  drops a request nobody waits for any more and frees its KV blocks instead of decoding it to the end. A request
  that comes with a shorter ``deadline_s`` of its own (an action chunk, due within a control period) is waited for
  that long and ANSWER_SLACK_S more: the inference node answers DEADLINE_EXCEEDED at the deadline itself, so one
  that has not answered by then is stuck (a hung device, a lost reply), and waiting infer_timeout_s would hold the
  arm's goal that long per chunk.
- Anything the inference node answers (INVALID_ARGUMENT, FAILED_PRECONDITION, ...) is passed on unchanged; a streamed
  answer's Generate result comes back as the Infer response it equals (the inference node fills both alike).
- A goal that ends cancels its task (``cancel_task``): calls still in flight answer CANCELLED and their KV blocks are
  freed at once, instead of decoding narration nobody will read until their deadline.
"""

import time
from collections.abc import Callable
from typing import Any

from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node

from oxygen_ros.action import Generate
from oxygen_ros.errors import ErrorCode
from oxygen_ros.nodes.fleet import robot_name
from oxygen_ros.nodes.action_client import ActionClient, cancel_if_accepted
from oxygen_ros.nodes.future_wait import wait
from oxygen_ros.nodes.latest_frame import LatestFrame
from oxygen_ros.nodes.qos import ACTION_QUEUES, SERVICE_QUEUE
from oxygen_ros.nodes.served_model import STATS_SERVICE, STATS_TOPIC, ServedModel
from oxygen_ros.nodes.streamed_text import StreamedText, TextCallback
from oxygen_ros.srv import CancelTask, Infer

SERVICE = "oxygen/infer"
GENERATE = "oxygen/generate"
CANCEL_SERVICE = "oxygen/cancel_task"
_POLL_S = 0.05  # how often a call waiting for the service to appear looks for it again
SETTLE_S = 0.5  # how long a replacement server is left to match this node's reply reader (discovery takes ms)
ANSWER_SLACK_S = 1.0  # how long past its own deadline_s a request's answer is waited for (the transport, a step)
FEEDBACK_EVERY = 4  # tokens per streamed piece: a few words at a time, not a message per token
# A Generate goal is an Infer request's text fields (plus feedback_every); its result is an Infer response's fields
GOAL_FIELDS = [name for name in Generate.Goal.get_fields_and_field_types() if name != "feedback_every"]
RESULT_FIELDS = list(Generate.Result.get_fields_and_field_types())


def inference_remappings(namespace: str) -> tuple[str, ...]:
    """The remappings (``-r from:=to`` pairs) pointing a task node at the inference node of ``namespace`` ('/' = the
    root) instead of its own namespace's, so several robots share one pool; the task ids carry each task node's full
    name, so their requests and per-task KV reports stay apart."""
    target = namespace.rstrip("/")
    names = (SERVICE, GENERATE, CANCEL_SERVICE, STATS_TOPIC, STATS_SERVICE)
    return tuple(arg for name in names for arg in ("-r", f"{name}:={target}/{name}"))


def inference_at(namespace: str) -> list[str]:
    """``inference_remappings`` as a node's ROS arguments (``cli_args``)."""
    return ["--ros-args", *inference_remappings(namespace)]


def error(code: ErrorCode, message: str) -> Infer.Response:
    return Infer.Response(success=False, error_code=code.value, message=message)


class InferClient:
    """One node's client of `/oxygen/infer`; ``call`` may run in many coroutines at once."""

    def __init__(self, node: Node, group: CallbackGroup, wait_s: float, timeout_s: float) -> None:
        self._node = node
        self._client = node.create_client(Infer, SERVICE, qos_profile=SERVICE_QUEUE, callback_group=group)
        self._cancel = node.create_client(CancelTask, CANCEL_SERVICE, qos_profile=SERVICE_QUEUE, callback_group=group)
        self._generate = ActionClient(node, Generate, GENERATE, callback_group=group, **ACTION_QUEUES)
        self.model = ServedModel(node, group, wait_s)
        # the service's request topic as DDS names it (every DDS rmw), for the node's namespace and remaps
        self.service = node.resolve_service_name(SERVICE)  # the full name, as messages quote it
        self._request_topic = f"rq{self.service}Request"
        self.wait_s, self.timeout_s = wait_s, timeout_s
        self._first_seen: dict[bytes, float] = {}  # server id -> when it could first have matched this client
        self._met_a_server = False
        self._since = time.monotonic()  # this client made, or last seen with no server: a new server is newer

    def destroy(self) -> None:
        """Destroy the action client with the node: rclpy's destroy_node leaves action clients alive, and a node
        handle still in use is only freed by the garbage collector, where Fast DDS's teardown can deadlock."""
        self._generate.destroy()

    def ready(self, streaming: bool = False) -> bool:
        return self._client.service_is_ready() and (not streaming or self._generate.server_is_ready())

    async def available(self, streaming: bool = False) -> bool:
        """Whether the service (and with ``streaming`` the action server) appears within ``wait_s`` (polled, so no
        executor thread is held)."""
        for _ in range(max(1, round(self.wait_s / _POLL_S))):
            if self.ready(streaming):
                return True
            self._since = time.monotonic()
            await wait(self._node, None, _POLL_S)
        return self.ready(streaming)

    def cancel_task(self, task_id: str) -> None:
        """Cancel every request of ``task_id`` in the inference node; fire and forget (an absent node has none)."""
        if self._cancel.service_is_ready():
            self._cancel.call_async(CancelTask.Request(task_id=task_id))

    async def ask_about(self, request: Infer.Request, frame: LatestFrame, on_text: TextCallback | None = None,
                        cancelled: Callable[[], bool] = lambda: False) -> Infer.Response:  # fmt: skip
        """``request`` about ``frame``'s newest observation. A model that reads images gets the frame's images inline
        and no scene text: the engine puts them first in the prompt, so every task asking about the frame shares
        its image tokens' KV up to its own words. A text-only model gets the frame by id, so the inference node adds
        the describer's text; when it does not have that frame (NOT_FOUND: it just started, or has moved past it)
        the request is about its own latest observation instead."""
        inline = frame.inline(await self.model.max_images())
        if inline:
            request.observation = inline
            return await self.call(request, on_text, cancelled)
        observation_id = frame.observation_id()
        request.observation_id = observation_id
        response = await self.call(request, on_text, cancelled)
        if response.error_code == ErrorCode.NOT_FOUND.value and observation_id:
            request.observation_id = ""
            response = await self.call(request, on_text, cancelled)
        return response

    async def call(self, request: Infer.Request, on_text: TextCallback | None = None,
                   cancelled: Callable[[], bool] = lambda: False) -> Infer.Response:  # fmt: skip
        """One request; with ``on_text`` its text answer streams through `/oxygen/generate` (actions are not
        streamed) and ``on_text(piece, tokens)`` runs on each feedback, the pieces adding up to the answer (a tail the
        result overtook is passed on when the result lands). ``cancelled()`` true (the caller's goal was cancelled):
        nothing more is asked, a streamed answer is cancelled in the inference node, and the answer is CANCELLED."""
        ready = await self.available(streaming=on_text is not None)
        servers = await self._settled() if ready else set()
        if cancelled():
            return error(ErrorCode.CANCELLED, "cancelled before it was asked")
        if not ready:
            return error(ErrorCode.UNAVAILABLE, f"{self.service} is not available (is the inference node running?)")
        if request.want_text and not request.deadline_s:
            request.deadline_s = self.timeout_s
        wait_s = min(self.timeout_s, request.deadline_s + ANSWER_SLACK_S) if request.deadline_s > 0 else self.timeout_s
        if not request.robot:  # a fleet's shared inference node tells the robots apart by their namespaces
            request.robot = robot_name(self._node.get_namespace())

        def give_up() -> bool:
            return cancelled() or self._gone(servers)

        ok, response = await (self._stream(request, on_text, give_up) if on_text else
                              self._ask(request, give_up, wait_s))  # fmt: skip
        if ok:
            return response
        if cancelled():
            return error(ErrorCode.CANCELLED, "cancelled while it was answered")
        if self._gone(servers):
            return error(ErrorCode.UNAVAILABLE, f"{self.service} went away while answering (did the inference node die?)")
        return error(ErrorCode.DEADLINE_EXCEEDED, f"{self.service} did not answer within {wait_s:g} s")

    async def _ask(self, request: Infer.Request, give_up: Callable[[], bool], wait_s: float) -> tuple[bool, Any]:
        future = self._client.call_async(request)
        ok, response = await wait(self._node, future, wait_s, give_up)
        if not ok:
            self._client.remove_pending_request(future)
        return ok, response

    async def _stream(self, request: Infer.Request, on_text: TextCallback,
                      give_up: Callable[[], bool]) -> tuple[bool, Any]:  # fmt: skip
        goal = Generate.Goal(feedback_every=FEEDBACK_EVERY, **{name: getattr(request, name) for name in GOAL_FIELDS})
        end = time.monotonic() + self.timeout_s
        stream = StreamedText(on_text)
        sent = self._generate.send_goal_async(
            goal, feedback_callback=lambda msg: stream.piece(msg.feedback.text, msg.feedback.generated_tokens)
        )
        ok, handle = await wait(self._node, sent, self.timeout_s, give_up)
        if not ok:
            sent.add_done_callback(cancel_if_accepted)  # a goal taken after all is not left decoding for nobody
            return False, None
        if not handle.accepted:
            return True, error(ErrorCode.FAILED_PRECONDITION, f"{GENERATE} refused the goal")
        ok, got = await wait(self._node, handle.get_result_async(), max(0.0, end - time.monotonic()), give_up)
        if not ok:
            handle.cancel_goal_async()  # nobody waits for the rest: its blocks go back now
            return False, None
        stream.finish(got.result.text, got.result.generated_tokens)  # the feedback the result overtook
        return True, Infer.Response(**{name: getattr(got.result, name) for name in RESULT_FIELDS})

    async def _settled(self) -> set[bytes]:
        """The servers now, once each could have matched this client ``SETTLE_S`` ago (see the module docstring)."""
        servers = self._servers()
        now = time.monotonic()
        new = now if self._met_a_server else self._since
        seen = {server: self._first_seen.get(server, new) for server in servers}
        self._first_seen, self._met_a_server = seen, self._met_a_server or bool(seen)  # ids of gone servers dropped
        youngest = max(seen.values(), default=now - SETTLE_S)
        if now - youngest < SETTLE_S:
            await wait(self._node, None, SETTLE_S - (now - youngest))
        return servers

    def _servers(self) -> set[bytes]:
        """The ids of the servers' request readers now (empty where the rmw does not name them)."""
        readers = self._node.get_subscriptions_info_by_topic(self._request_topic, no_mangle=True)
        return {bytes(reader.endpoint_gid) for reader in readers}

    def _gone(self, servers: set[bytes]) -> bool:
        """Whether every server of ``servers`` has left the graph (without their ids: whether no server is left)."""
        return not (servers & self._servers()) if servers else not self.ready()
