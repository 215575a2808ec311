"""`oxygen_inference`: the one lifecycle node that owns the model and the unified KV pool; every task node calls it.

Its parameters are typed and ranged (nodes/inference_params.py); configure reads them and loads the model (a value
the finer rules refuse, or a missing model, is logged and the node stays unconfigured), activate serves, deactivate
refuses new requests (FAILED_PRECONDITION) while in-flight ones finish, cleanup cancels everything and frees the pool. The node only translates messages: the engine runs on its own thread
(AsyncEngine) and `/oxygen/infer` is a coroutine awaiting it, so 50 concurrent calls need no executor threads and
never block the camera, stats or lifecycle callbacks. Every request and subscribed message is checked against
``bounds`` before it sizes anything (docs/reliability.md); observations stay addressable by count and by time
(ObservationRing).
"""

import dataclasses
import gc
from functools import partial
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future as ConcurrentFuture
from typing import Any, TypeVar

import torch
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.exceptions import InvalidTopicNameException
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import qos_profile_sensor_data
from rclpy.task import Future
from rclpy.validate_topic_name import validate_topic_name
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header
from visualization_msgs.msg import MarkerArray

from oxygen_ros.engine.async_engine import AsyncEngine
from oxygen_ros.engine.stats import ServingStats
from oxygen_ros.engine.engine import Engine
from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.io import GenerateRequest, Observation, PoolStats, RequestOutput
from oxygen_ros.engine.pacing import FramePacer
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.models.registry import VLA_MODELS
from oxygen_ros.msg import KvPoolStats
from oxygen_ros.msg import Observation as ObservationMsg
from oxygen_ros import bounds
from oxygen_ros.nodes import convert, health, inference_params, params
from oxygen_ros.nodes.compressed import compressed_observation, is_compressed
from oxygen_ros.nodes.executor import Executor
from oxygen_ros.nodes.fleet import FleetRings
from oxygen_ros.nodes.generate_server import GenerateServer
from oxygen_ros.nodes.image_budget import ImageBudget
from oxygen_ros.nodes.pool_markers import pool_markers
from oxygen_ros.nodes.qos import SERVICE_QUEUE
from oxygen_ros.nodes.spin import run
from oxygen_ros.nodes.stamps import capture_ns
from oxygen_ros.observations import ObservationRing, Rejected
from oxygen_ros.srv import CancelTask, GetPoolStats, Infer
from oxygen_ros.viz.pool_map import draw_pool_image, pool_map

T = TypeVar("T")
NODE_NAME = "oxygen_inference"
AUTOSTART = "autostart_node"  # a parameter apart from params' table: read at start, not at configure
PREFILL_TASK = "oxygen/eager_prefill"
RANDOM_WEIGHTS = "the model has random weights"


class InferenceNode(LifecycleNode):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        inference_params.declare_all(self)  # typed, with ranges: a bad override fails here, naming it
        self._group = ReentrantCallbackGroup()  # lifecycle services keep the default group: a long configure
        self._lock = threading.Lock()  # guards the fields below against transitions on other threads
        self._state = "unconfigured"
        self._engine: AsyncEngine | None = None
        self._rings: FleetRings | None = None
        self._settings: params.NodeParams | None = None
        self._random_weights = False  # the loaded model's weights are seeded noise (registry.VLA_MODELS)
        self._inputs: list[Any] = []  # subscriptions made by configure
        self._timer: Any = None  # the pool publishing timer made by configure
        self._outputs: dict[str, Any] = {}  # lifecycle publishers made by configure
        self._drawing = False
        self._last_report: ServingStats | None = None
        self._resources: list[tuple[str, str]] = []  # what configure took of the machine, for /diagnostics
        self._images = ImageBudget(bounds.INFLIGHT_IMAGE_BYTES)  # its limit set at configure
        inference_params.refuse_while_configured(self, lambda: self._state)
        queue = SERVICE_QUEUE  # a burst from many task nodes reaches the engine's bounded queue (nodes/qos.py)
        self.create_service(Infer, "oxygen/infer", self._on_infer, qos_profile=queue, callback_group=self._group)
        self.create_service(GetPoolStats, "oxygen/get_pool_stats", self._on_get_pool_stats, qos_profile=queue,
                            callback_group=self._group)  # fmt: skip
        self.create_service(CancelTask, "oxygen/cancel_task", self._on_cancel_task, qos_profile=queue,
                            callback_group=self._group)  # fmt: skip
        self._generate = GenerateServer(self, self._serving, self._await, self._images, self._group)  # before spinning
        self._diagnostics = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_timer(1.0, self._publish_diagnostics, callback_group=self._group)
        self.declare_parameter(AUTOSTART, False, ParameterDescriptor(read_only=True, description=(
            "configure and activate as soon as the node spins (nav2's autostart_node): a respawned process serves "
            "again with no manual step; false = wait for `ros2 lifecycle set`")))  # fmt: skip
        if self.get_parameter(AUTOSTART).value:
            self._autostart = self.create_timer(0.0, self._start_serving, MutuallyExclusiveCallbackGroup())

    def _start_serving(self) -> None:
        """Configure, then activate, once (``autostart_node``); a configure that fails leaves the node unconfigured
        and says why in its log, as a manual configure would."""
        self._autostart.cancel()
        if self.trigger_configure() == TransitionCallbackReturn.SUCCESS:
            self.trigger_activate()

    # --- lifecycle ----------------------------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        log = self.get_logger()
        values = {name: self.get_parameter(name).value for name in params.defaults()}
        try:
            engine_config, settings = params.parse(values)
            for name in ("camera_topic", "observation_topic"):
                validate_topic_name(getattr(settings, name))
            rings = FleetRings(settings.robots, lambda share: ObservationRing(
                settings.observation_ring, settings.observation_keep_s, settings.observation_ring_bytes // share,
                camera_sets=settings.camera_sets_only))
            topics = rings.topics(settings.camera_topic, settings.observation_topic)
            for name, topic in (("robots", t) for _, *pair in topics for t in pair):
                validate_topic_name(topic)
        except EngineError as exc:
            log.error(f"configure failed, bad parameter: {exc.message}")
            return TransitionCallbackReturn.FAILURE
        except InvalidTopicNameException as exc:
            log.error(f"configure failed, bad parameter {name}: {exc}")
            return TransitionCallbackReturn.FAILURE
        threads = settings.threads()
        torch.set_num_threads(threads)  # torch's ops and the C kernels (which take torch's count) stay within it
        log.info(f"configure: loading model {engine_config.model!r} (device {engine_config.device})")
        start = time.perf_counter()
        try:
            engine = Engine(engine_config)
        except Exception as exc:  # whatever the loader raises, the node must stay up and unconfigured
            log.error(f"configure failed, cannot load model {engine_config.model!r}: {exc}")
            return TransitionCallbackReturn.FAILURE
        resources = _resources(engine_config, engine.stats(), threads)
        log.info(f"model {engine.stats().model} loaded in {time.perf_counter() - start:.1f} s; " + ", ".join(
            f"{key} {value}" for key, value in resources))  # fmt: skip
        group = self._group
        inputs = []
        for robot, camera_topic, observation_topic in topics:
            camera_kind, on_camera = ((CompressedImage, self._on_compressed) if is_compressed(camera_topic)
                                      else (Image, self._on_camera))  # fmt: skip
            inputs += [
                self.create_subscription(camera_kind, camera_topic, partial(on_camera, robot=robot),
                                         qos_profile_sensor_data, callback_group=group),
                self.create_subscription(ObservationMsg, observation_topic, partial(self._on_observation, robot=robot),
                                         10, callback_group=group),
            ]  # fmt: skip
        publishers = {
            "stats": self.create_lifecycle_publisher(KvPoolStats, "oxygen/pool_stats", 10),
            "markers": self.create_lifecycle_publisher(MarkerArray, "oxygen/pool_markers", 1),
            "image": self.create_lifecycle_publisher(Image, "oxygen/pool_image", 1),
        }
        with self._lock:
            pacer = FramePacer(settings.decode_steps_per_frame) if settings.frame_pacing else None
            self._engine, self._settings = AsyncEngine(engine, pacer=pacer), settings
            self._random_weights = engine_config.model in VLA_MODELS
            self._rings, self._images.limit = rings, settings.inflight_image_bytes
            self._inputs, self._outputs, self._resources = inputs, publishers, resources
            self._timer = self.create_timer(1.0 / settings.stats_rate_hz, self._publish_pool, callback_group=group)
            self._state = "inactive"
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self._lock:
            self._state = "active"
        self.get_logger().info("active: serving /oxygen/infer")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self._lock:
            self._state = "inactive"
        self.get_logger().info("inactive: new requests are refused, running ones finish")
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release("unconfigured")
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release("finalized")
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release("unconfigured")
        return TransitionCallbackReturn.SUCCESS

    def destroy_node(self) -> None:
        self._release("finalized")
        self._generate.server.destroy()  # rclpy's destroy_node leaves action servers alive (see InferClient.destroy)
        super().destroy_node()

    def _release(self, new_state: str) -> None:
        """Cancel every request, stop the engine thread and drop the pool (its memory goes back to the device)."""
        with self._lock:
            engine, inputs, timer, publishers = self._engine, self._inputs, self._timer, self._outputs
            self._engine, self._rings, self._settings, self._resources = None, None, None, []
            self._inputs, self._timer, self._outputs = [], None, {}
            self._state = new_state
        if engine is None:
            return
        self.destroy_timer(timer)
        for subscription in inputs:
            self.destroy_subscription(subscription)
        for publisher in publishers.values():
            self.destroy_lifecycle_publisher(publisher)
        engine.shutdown()
        device = engine.engine.device
        del engine
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        self.get_logger().info(f"{new_state}: the KV pool is freed")

    def held_observations(self, robot: str = "", with_images: bool = False) -> int:
        """Observations the node holds for ``robot`` now (0 while unconfigured), or only those with camera images: a
        VLA asked without one refuses."""
        with self._lock:
            rings = self._rings
        if rings is None:
            return 0
        ring = rings.ring(robot)
        return ring.count_with_images() if with_images else len(ring)

    # --- inputs -------------------------------------------------------------------------------------------------
    def _on_camera(self, msg: Image, robot: str) -> None:
        self._remember(lambda _: convert.camera_observation(msg), "camera-frame", robot)

    def _on_compressed(self, msg: CompressedImage, robot: str) -> None:
        self._remember(lambda _: compressed_observation(msg), "camera-frame", robot)

    def _on_observation(self, msg: ObservationMsg, robot: str) -> None:
        named = msg.observation_id and len(msg.observation_id) <= bounds.ID_CHARS  # else no request can name it
        self._remember(
            lambda settings: convert.observation_from_msg(msg, settings.max_prompt_chars),
            msg.observation_id if named else "unnamed-observation", robot,
        )  # fmt: skip

    def _remember(self, decode: Callable[[params.NodeParams], Observation], name_if_rejected: str, robot: str) -> None:
        """Put the observation in its robot's ring; a frame that cannot be decoded is remembered as rejected (see
        ObservationRing). A new one is prefilled at once with ``eager_prefill``."""
        arrival_ns = self.get_clock().now().nanoseconds
        with self._lock:
            rings, engine, settings, active = self._rings, self._engine, self._settings, self._state == "active"
        if rings is None:
            return
        ring = rings.ring(robot)
        try:
            observation = self._arrived(decode(settings), arrival_ns)
        except EngineError as exc:
            ring.add(Rejected(name_if_rejected, exc.message, exc.code))
            self.get_logger().warning(f"rejected observation {name_if_rejected}: {exc}", throttle_duration_sec=5.0)
            return
        if ring.add(observation) and settings.eager_prefill and active:
            prefill = GenerateRequest(
                "Describe the scene.", task_id=PREFILL_TASK, observation=observation,
                sampling=SamplingParams(max_new_tokens=1),
            )  # fmt: skip
            engine.submit(prefill).add_done_callback(self._log_prefill)

    def _arrived(self, observation: Observation, arrival_ns: int) -> Observation:
        """``observation`` dated no later than it reached this node (``capture_ns``): the stamp answers report, and a
        VLA's arm ages its chunk's frames by."""
        warn = partial(self.get_logger().warning, throttle_duration_sec=5.0)
        return dataclasses.replace(observation, stamp_ns=capture_ns(observation.stamp_ns, arrival_ns, warn))

    def _log_prefill(self, future: ConcurrentFuture[RequestOutput]) -> None:
        out = future.result()
        if not out.ok:
            self.get_logger().warning(f"eager prefill failed: {out.error_code.value}: {out.message}")

    # --- services -----------------------------------------------------------------------------------------------
    async def _on_infer(self, request: Infer.Request, response: Infer.Response) -> Infer.Response:
        received = time.perf_counter()  # a cancel of its task from now on cancels it
        with self._lock:
            engine, rings, settings, state = self._engine, self._rings, self._settings, self._state
        if state != "active":
            return convert.error_response(response, ErrorCode.FAILED_PRECONDITION, f"node is not active ({state})")
        if request.want_actions and self._random_weights and not settings.allow_random_weights:
            message = f"{RANDOM_WEIGHTS}: its actions are noise (allow_random_weights: true for a simulator or a test)"
            return convert.error_response(response, ErrorCode.FAILED_PRECONDITION, message)
        busy = engine.busy()  # before its images are decoded
        if busy:
            return convert.error_response(response, ErrorCode.RESOURCE_EXHAUSTED, busy)
        try:
            convert.check_infer_request(request, settings.max_prompt_chars)
            convert.check_state(request.state)
            with self._images.hold(request):  # until answered: what the request brought, decoded, is held till then
                seen = self._observation_of(request, rings, settings)
                observation = convert.with_state(seen or Observation(), request.state) if request.state else seen
                greq = convert.generate_request(request, observation, settings.sampling_defaults(),
                                                settings.max_prompt_chars)  # fmt: skip
                out = await self._await(engine.submit(greq, received_at=received))
        except EngineError as exc:
            return convert.error_response(response, exc.code, exc.message)
        return convert.fill_response(response, out, seen, settings.action_period_s, self.get_clock().now().to_msg())

    def _observation_of(self, request: Any, rings: FleetRings, settings: params.NodeParams) -> Observation | None:
        """A request's inline observation (hashed by content like a published one, so the same image shares its
        KV either way), else its robot's ring's ``observation_id`` ('' = that robot's latest, with camera images
        when actions are asked)."""
        if request.observation:
            arrival_ns = self.get_clock().now().nanoseconds
            observation = convert.observation_from_msg(request.observation[0], settings.max_prompt_chars)
            return self._arrived(observation, arrival_ns)
        return rings.ring(request.robot).get(request.observation_id, getattr(request, "want_actions", False))

    def _serving(self) -> tuple:
        """For /oxygen/generate: (engine, observation resolver, settings, state) as they are now."""
        with self._lock:
            engine, rings, settings, state = self._engine, self._rings, self._settings, self._state
        return engine, lambda goal: self._observation_of(goal, rings, settings), settings, state

    def _on_get_pool_stats(self, request: GetPoolStats.Request, response: GetPoolStats.Response):
        """The latest snapshot; an unconfigured node has no pool and answers an empty one (total_blocks 0)."""
        engine, stamp = self._engine, self.get_clock().now().to_msg()
        response.stats = convert.pool_stats_msg(engine.stats(), stamp) if engine else KvPoolStats()
        response.stats.header.stamp = stamp
        return response

    async def _on_cancel_task(self, request: CancelTask.Request, response: CancelTask.Response) -> CancelTask.Response:
        with self._lock:
            engine = self._engine
        if not request.task_id:
            return convert.error_response(response, ErrorCode.INVALID_ARGUMENT, "task_id must not be empty")
        try:
            bounds.text("task_id", request.task_id, bounds.ID_CHARS)
        except EngineError as exc:
            return convert.error_response(response, exc.code, exc.message)
        if engine is None:
            return convert.error_response(response, ErrorCode.FAILED_PRECONDITION, "node is not configured")
        try:
            response.cancelled = await self._await(engine.abort_task(request.task_id))
        except EngineError as exc:  # cleanup shut the engine down meanwhile
            return convert.error_response(response, exc.code, exc.message)
        response.success = True
        return response

    async def _await(self, future: ConcurrentFuture[T]) -> T:
        """Await an engine-thread future inside an executor coroutine. ``done`` belongs to no executor, so its done
        callback (``nodes.executor`` putting the parked coroutine back) runs on the engine thread at once rather
        than as one more executor task; the wake is for executors that poll waiting coroutines (rclpy's own)."""
        executor = self.executor
        done: Future = Future()

        def relay(source: ConcurrentFuture[T]) -> None:
            error = source.exception()
            if error is None:
                done.set_result(source.result())
            else:
                done.set_exception(error)
            executor.wake()

        future.add_done_callback(relay)
        return await done

    # --- outputs ------------------------------------------------------------------------------------------------
    async def _publish_pool(self) -> None:
        """KvPoolStats every tick; the block map (read on the engine thread) only for topics someone listens to,
        and never two at once when a step runs long."""
        with self._lock:
            engine, settings, publishers, state = self._engine, self._settings, self._outputs, self._state
        if state != "active":
            return
        header = Header(frame_id=settings.marker_frame_id, stamp=self.get_clock().now().to_msg())
        publishers["stats"].publish(convert.pool_stats_msg(engine.stats(), header.stamp))
        want = {name: publishers[name].get_subscription_count() > 0 for name in ("markers", "image")}
        with self._lock:
            if not any(want.values()) or self._drawing:
                return
            self._drawing = True
        try:
            pmap = await self._await(engine.call(pool_map))
        except EngineError:  # cleanup shut the engine down meanwhile
            return
        finally:
            self._drawing = False
        if self._engine is not engine:  # cleaned up while drawing: the publishers are gone
            return
        if want["markers"]:
            markers = pool_markers(pmap, settings.marker_frame_id, header.stamp, settings.marker_max_cubes)
            publishers["markers"].publish(markers)
        if want["image"]:
            publishers["image"].publish(convert.rgb_to_image(draw_pool_image(pmap), header))

    def _publish_diagnostics(self) -> None:
        with self._lock:
            engine, settings, state, resources = self._engine, self._settings, self._state, self._resources
        stats = engine.stats() if engine else None
        warn_fraction = settings.pool_warn_fraction if settings else 1.0
        report = health.assess(state, stats, self._last_report, warn_fraction, resources)
        self._last_report = stats
        status = DiagnosticStatus(
            level=bytes([report.level]), name=f"{self.get_fully_qualified_name().lstrip('/')}: KV pool",
            message=report.message,
            hardware_id=stats.pool.model if stats else "", values=[KeyValue(key=k, value=v) for k, v in report.values],
        )  # fmt: skip
        msg = DiagnosticArray(status=[status])
        msg.header.stamp = self.get_clock().now().to_msg()
        self._diagnostics.publish(msg)


def _resources(config: EngineConfig, pool: PoolStats, threads: int) -> list[tuple[str, str]]:
    """What the node takes of the machine: the KV budget and where it came from, the pool it holds (the budget,
    or less when max_num_seqs x max_model_len needs less), the requests it decodes together, its compute threads."""
    budget = (f"{config.kv_cache_bytes >> 20} MiB (kv_cache_bytes)" if config.kv_cache_bytes else
              f"{config.kv_cache_memory_fraction:g} of free memory (kv_cache_memory_fraction)")  # fmt: skip
    pool_bytes = pool.total_blocks * pool.bytes_per_block
    return [
        ("kv_budget", budget),
        ("kv_pool", f"{pool_bytes >> 20} MiB, {pool.total_blocks} blocks of {pool.block_size} tokens"),
        ("max_num_seqs", str(config.max_num_seqs)),
        ("max_model_len", str(config.max_model_len)),
        ("compute_threads", f"{threads} of {params.available_cpus()} CPUs"),
    ]


def main(args: list[str] | None = None) -> int:
    """`ros2 run oxygen_ros inference_node`; then `ros2 lifecycle set /oxygen_inference configure` and `activate`
    (or `--ros-args -p autostart_node:=true`)."""
    # a configure (model load) holds one executor thread for seconds
    return run(InferenceNode, partial(Executor, num_threads=4), NODE_NAME, args)


if __name__ == "__main__":
    raise SystemExit(main())
