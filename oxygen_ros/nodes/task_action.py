"""What the action-serving task nodes (instruction_node, navigation_node) share: parameters, the `/oxygen/infer`
client, the newest camera frame, and the life of a goal.

A goal is checked against ``bounds`` before anything is sized by it (a bad one is accepted, then aborted
INVALID_ARGUMENT or OUT_OF_RANGE with the reason); a valid one preempts the goal running before it at once (one arm,
one base: the old goal ends CANCELLED and the node's ``stopped`` holds the hardware while the new goal is prepared,
as nav2's bt_navigator preempts), is prepared by the node (which may end it, e.g. UNAVAILABLE), then runs on the
node's timers until something ends it (see GoalRun); the timers are removed and the node fills in the result.
Everything waits as coroutines, so no goal holds an executor thread while it runs.
"""

import itertools
import threading
import time
from typing import Any, Generic, TypeVar

from rclpy.action import ActionServer, CancelResponse
from rclpy.action.server import ServerGoalHandle
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.exceptions import InvalidHandle
from rclpy.node import Node
from rclpy.timer import Timer

from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.nodes.declare import Ranges, Table, declare
from oxygen_ros.nodes.goal_run import GoalRun
from oxygen_ros.nodes.infer_client import InferClient
from oxygen_ros.nodes.latest_frame import LatestFrame
from oxygen_ros.nodes.qos import ACTION_SERVER_QOS
from oxygen_ros.nodes.spin import MAX_ENDING_S
from oxygen_ros.srv import Infer

State = TypeVar("State")


class TaskActionNode(Node, Generic[State]):
    """Subclasses implement ``check``, ``prepare``, ``start`` and ``finish`` (and ``stopped`` if they command
    hardware, ``settle`` if they hand goals on). The table must hold ``service_wait_s``, ``infer_timeout_s`` and
    latest_frame's PARAMETERS; ``read_only`` names what is read once (``ranges``: see declare)."""

    def __init__(
        self,
        name: str,
        action_type: Any,
        action_name: str,
        table: Table,
        positive: list[str],
        ranges: Ranges,
        read_only: list[str],
        **kwargs: Any,
    ) -> None:
        super().__init__(name, **kwargs)
        self.settings = declare(self, table, positive, ranges, read_only)
        self.group = ReentrantCallbackGroup()
        self.infer = InferClient(self, self.group, self.settings["service_wait_s"], self.settings["infer_timeout_s"])
        self.frame = LatestFrame(self, self.settings, self.group)
        self._action_type = action_type
        self._goal_ids = itertools.count()
        self._newest = -1  # the number of the latest goal accepted
        self._current: GoalRun | None = None
        self._unreported: set[GoalRun] = set()  # goals that ran and have not sent their result (some still settle)
        # Goals run as coroutines on several executor threads: who is newest and who is current change together
        self._goals_lock = threading.Lock()
        self._destroyed = False
        self._shutting_down = False  # no goal becomes current from now on (one still preparing ends instead)
        self._server = ActionServer(
            self,
            action_type,
            action_name,
            execute_callback=self._execute,
            cancel_callback=lambda _: CancelResponse.ACCEPT,
            callback_group=self.group,
            **ACTION_SERVER_QOS,
        )

    def end_for_shutdown(self, wait_s: float) -> None:
        """End the running goal while the executor still runs (``spin`` calls this first), so it ends as any goal
        does: the robot stood by ``stopped``, what it handed on cancelled (``settle``), its result sent; up to
        ``wait_s``, or as long as that settling may take (``settle_s``) when longer, up to MAX_ENDING_S. A goal
        still preparing (waiting for the one it preempted to settle) never starts: nothing would watch what it drove."""
        with self._goals_lock:
            self._shutting_down = True
            run = self._current
        if run is not None:
            run.end(ErrorCode.CANCELLED, "the node is shutting down")
        wait_s = max(wait_s, min(self.settle_s(), MAX_ENDING_S))
        deadline = time.monotonic() + wait_s
        with self._goals_lock:
            ending = list(self._unreported)  # the current goal, and any that ended before and still settle
        for each in ending:
            if not each.reported.wait(max(0.0, deadline - time.monotonic())):
                self.get_logger().error(f"{each.task_id} had not finished ending after {wait_s:g} s when the node "
                                        "shut down: what it handed on may still move (nav2's goal; the arm, its "
                                        "stop unanswered)")  # fmt: skip

    def destroy_node(self) -> None:
        """A goal still running ends (its threads and timers stop with it) and the robot stands, sent while the node
        can still send (``spin`` destroys nodes before rclpy shuts down); then the node's own clients (``release``).
        Once: rclpy's shutdown destroys the nodes it still tracks too."""
        if self._destroyed:
            return
        self._destroyed = True
        try:
            self._stop_current("the node is shutting down")
        except InvalidHandle:  # rclpy was shut down before the node (not by ``spin``): nothing can be sent now
            self.get_logger().error("shut down mid-goal after rclpy: the robot could not be told to stop")
        self.release()
        self._server.destroy()
        self.infer.destroy()
        super().destroy_node()

    def release(self) -> None:
        """Destroy what the node made besides its action server and inference client (action clients: rclpy's
        destroy_node leaves them alive)."""

    # --- what a node implements -------------------------------------------------------------------------------
    def check(self, goal: Any) -> None:
        """Raise EngineError (INVALID_ARGUMENT, OUT_OF_RANGE) saying why the goal cannot be run."""
        raise NotImplementedError

    async def prepare(self, run: GoalRun, goal: Any) -> State | None:
        """The goal's state, or None after ending ``run`` with the reason it cannot start."""
        raise NotImplementedError

    def start(self, state: State) -> list[Timer]:
        """Start the goal's timers (removed when it ends)."""
        raise NotImplementedError

    def finish(self, state: State, result: Any) -> None:
        """Fill the result's own fields (success, error_code and message are filled from the outcome)."""
        raise NotImplementedError

    async def settle(self, state: State) -> str:
        """After the goal ended and the robot was told to stand, before its result: wait for what the goal handed on
        to stop (a nav2 goal's cancel confirmed); '' or what did not."""
        return ""

    def settle_s(self) -> float:
        """The longest ``settle`` of a goal ending now may take (a shutdown waits for it: what the goal handed on must
        not be left moving the robot); 0 = nothing to settle."""
        return 0.0

    def stopped(self) -> None:
        """Called when the last goal ended and no newer one took over, and at once when a newer goal preempts the
        running one (the robot stands while the newer goal is prepared)."""

    # --- the goal's life ----------------------------------------------------------------------------------------
    def _stop_current(self, why: str, only: GoalRun | None = None) -> None:
        """End the running goal (CANCELLED, ``why``; with ``only``, only if that one still runs: a goal that ended
        on its own) and stand the robot now: its coroutine may resume only later (after a preempting goal runs, or
        never once the node is destroyed), so the stop is sent here. Under the goals' lock, so no newer goal becomes
        current between the two and is stopped by an older one's ending."""
        with self._goals_lock:
            run = self._current
            if run is None or (only is not None and run is not only):
                return
            self._current = None
            run.end(ErrorCode.CANCELLED, why)
            self.stopped()

    async def _execute(self, goal_handle: ServerGoalHandle) -> Any:
        with self._goals_lock:
            number = self._newest = next(self._goal_ids)
        run = GoalRun(self, goal_handle, f"{self.get_fully_qualified_name()}/{number}")
        goal, result = goal_handle.request, self._action_type.Result()
        try:
            self.check(goal)
        except EngineError as exc:
            run.end(exc.code, exc.message)
            return run.report(result)
        self._stop_current("preempted by a newer goal")  # one arm, one base: now, not once this one is ready
        state = await self.prepare(run, goal)
        if state is None:
            return run.report(result)
        timers: list[Timer] | None = None
        try:
            with self._goals_lock:  # a newer goal numbered after this check finds this one current and stops it
                if number != self._newest:  # a newer goal arrived while this one prepared: it wins
                    run.end(ErrorCode.CANCELLED, "preempted by a newer goal")
                elif self._shutting_down:
                    run.end(ErrorCode.CANCELLED, "the node is shutting down")
                if not run.end_if_cancelled():
                    self._current = run
                    self._unreported.add(run)
                    # started under the lock: a newer goal's preemption comes after it, and ends what it started
                    timers = self.start(state)
            if timers is None:  # it never started
                self.infer.cancel_task(run.task_id)
                return run.report(result)
            await run.ended
            try:  # the robot stands first (unless a newer goal took over): nothing below may keep it moving
                self._stop_current("ended", only=run)
            finally:
                self.infer.cancel_task(run.task_id)
                for timer in timers:
                    self.destroy_timer(timer)
            note = await self.settle(state)
            self.finish(state, result)
            return run.report(result, note)
        finally:
            with self._goals_lock:
                self._unreported.discard(run)

    async def language_head(self, run: GoalRun, task_type: str, prompt: str, json_schema: str = "") -> str | None:
        """The language head's text about the newest frame (its pixels for a model that reads images, else its scene
        text: ``InferClient.ask_about``), one call per goal at a time (None while one is already running, or once
        the goal ended); a failure comes back as a parenthesised error line. Not streamed: the narration and the
        reasoning are state the nodes read as fields, so they change to a whole answer, never to half a sentence.
        With ``json_schema`` the answer is JSON valid against it."""
        if run.asking or not run.running:
            return None
        run.asking = True
        try:
            max_new_tokens = self.get_parameter("max_new_tokens").value
            request = Infer.Request(
                task_id=run.task_id, task_type=task_type, prompt=prompt, want_text=True, max_new_tokens=max_new_tokens,
                json_schema=json_schema,
            )
            out = await self.infer.ask_about(request, self.frame)
        finally:
            run.asking = False
        return out.text.strip() if out.success else f"(language head: {out.error_code}: {out.message})"
