"""What the navigation node's built-in driver may drive by, decided without a graph: a reading's age when this node's
clock goes back (a simulator reset, a stepped system clock), a LaserScan that says nothing (covered, a driver's error
codes), and turning in place only when no obstacle source sees a point within the footprint."""

import asyncio
import math
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
from geometry_msgs.msg import PoseStamped, TransformStamped, Twist
from sensor_msgs.msg import LaserScan

from oxygen_ros.control.obstacles import Blocking
from oxygen_ros.control.unicycle import Pose2D
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.nodes.command_deadline import POLL_S
from oxygen_ros.nodes.nav2_handoff import Nav2Handoff
from oxygen_ros.nodes.navigation_node import NavigationNode, Trip
from oxygen_ros.nodes.obstacle_sources import Reading, _Points, _scan_points, scan_reading
from oxygen_ros.nodes.odometry_history import Odom, OdometryHistory
from oxygen_ros.nodes.stamps import CLOCK_BACK_NS, NS, StillClock, reading_age
from oxygen_ros.nodes.tf.rigid import planar
from oxygen_ros.nodes.tf.tree import TransformTree, TransformUnavailable

SETTINGS = {"input_timeout_s": 0.5, "robot_radius_m": 0.2, "safety_clearance_cm": 25.0, "obstacle_memory_s": 30.0}


def test_a_reading_is_as_old_as_the_older_of_its_stamp_and_arrival_and_stale_once_the_clock_went_back():
    now = 100 * NS
    assert reading_age(now, now - NS // 2, now - NS // 4) == 0.5  # stamped earlier than it arrived
    assert reading_age(now, now + NS, now - NS // 4) == 0.25  # a sender's clock ahead of ours: its arrival counts
    assert reading_age(now, 0, now) == 100.0  # a zero stamp is the epoch (sources store it as their arrival)
    # arrived "after now": this node's clock went back since, so the reading cannot be dated
    assert reading_age(now, now + NS, now + NS) == math.inf
    assert reading_age(now, now - NS, now + CLOCK_BACK_NS + 1) == math.inf
    # taken in just after the check read its clock (a source's callback on another thread): dated by its stamp
    assert reading_age(now, now - NS, now + 1) == 1.0 and reading_age(now, now + 1, now + 1) == 0.0


def scan(ranges, range_min=0.05, range_max=10.0, angle_max=None) -> LaserScan:
    step = 2 * math.pi / max(len(ranges), 1)
    last = -math.pi + step * (len(ranges) - 1) if angle_max is None else angle_max
    return LaserScan(angle_min=-math.pi, angle_max=last, angle_increment=step, range_min=range_min,
                     range_max=range_max, ranges=[float(r) for r in ranges])  # fmt: skip


@pytest.mark.parametrize("ranges", [
    [], [math.nan] * 360, [0.0] * 360,  # empty; REP 117's erroneous; urg_node-style error codes under range_min
    [0.01] * 350 + [math.nan] * 5 + [2.0] * 5,  # a covered window: 5 of 360 readings say something (< 5%)
])  # fmt: skip
def test_a_scan_that_says_nothing_is_blind_not_clear(ranges):
    with pytest.raises(EngineError) as err:
        _scan_points(scan(ranges))
    assert err.value.code == ErrorCode.FAILED_PRECONDITION and "blind scan" in err.value.message


def test_a_scan_of_nothing_in_range_is_clear_and_a_partly_invalid_one_keeps_its_returns():
    assert _scan_points(scan([math.inf] * 360)).shape == (0, 3)  # REP 117: +inf, nothing within range_max
    assert _scan_points(scan([20.0] * 360)).shape == (0, 3)  # an older driver's "beyond range_max"
    ranges = np.full(360, math.inf)
    ranges[:100], ranges[180] = math.nan, 1.0  # a dark sector, and one return
    points = _scan_points(scan(ranges))
    assert points.shape == (1, 3) and np.allclose(np.hypot(points[0, 0], points[0, 1]), 1.0)
    too_close = _scan_points(scan([-math.inf] + [math.inf] * 359))  # too close to measure: at range_min
    assert too_close.shape == (1, 3) and np.isclose(np.hypot(*too_close[0, :2]), 0.05)


def test_a_scan_whose_bearings_do_not_add_up_is_refused():
    """Bearings are angle_min + i x angle_increment and must end at angle_max (within one increment: drivers
    differ): a driver giving degrees, or a wrong increment, would put an obstacle ahead at another bearing."""
    assert _scan_points(scan([2.0] * 360, angle_max=math.pi)).shape == (360, 3)  # one increment past: accepted
    for angle_max in (180.0, 0.0):  # degrees; a field left unset
        with pytest.raises(EngineError, match=r"LaserScan bearings: .* not its angle_max") as err:
            _scan_points(scan([2.0] * 360, angle_max=angle_max))
        assert err.value.code == ErrorCode.INVALID_ARGUMENT


def test_a_clockwise_scan_whose_bearings_end_a_turn_past_angle_max_is_placed():
    """A scanner turning clockwise (sick_scan's NAV310: angle_min -pi, a negative increment, angle_max pi) ends its
    bearings at -3 pi, which is pi as a bearing: accepted, each reading placed at its own bearing."""
    step, ranges = 2 * math.pi / 360, [5.0] * 360
    ranges[90] = 1.0  # -pi - 90 steps = -3 pi / 2: to the left
    msg = LaserScan(angle_min=-math.pi, angle_max=math.pi, angle_increment=-step, range_min=0.05, range_max=10.0,
                    ranges=ranges)  # fmt: skip
    points = _scan_points(msg)
    nearest = points[np.argmin(np.hypot(points[:, 0], points[:, 1]))]
    assert points.shape == (360, 3) and np.allclose(nearest[:2], (0.0, 1.0), atol=1e-9)


class Source:
    def __init__(self, name: str, seen: Blocking | None = None, placed: bool = True) -> None:
        self.name, self.seen, self.placed = name, seen, placed

    def age(self, now_ns: int) -> float:
        return 0.0

    def blocking(self, radius_m: float, clearance_m: float, odometry, memory_s: float) -> Blocking | None:
        if not self.placed:
            raise TransformUnavailable("no laser -> base_link")
        return self.seen


def stop_reason(*sources: Source):
    node = SimpleNamespace(_odom_name="/odom", _sources=list(sources), _base="base_link",
                           _odometry=None)  # fmt: skip
    return NavigationNode._stop_reason(node, 0.0, "", SETTINGS, 0)


def test_turning_in_place_needs_every_source_clear_of_the_footprint():
    ahead = Blocking(0.15, 0.35)  # 15 cm ahead of the footprint: stop, but a circle may turn
    inside = Blocking(0.0, 0.2, touching=True)
    assert stop_reason(Source("scan"), Source("depth")) == (None, "", True)
    code, why, may_turn = stop_reason(Source("scan", ahead), Source("depth"))
    assert code == ErrorCode.OBSTACLE and may_turn and "15 cm away" in why and "(scan)" in why
    # the scan's point alone would allow turning; the depth camera's within the footprint forbids it
    code, why, may_turn = stop_reason(Source("scan", ahead), Source("depth", inside))
    assert code == ErrorCode.OBSTACLE and not may_turn and "(depth)" in why  # the nearest is named
    code, why, may_turn = stop_reason(Source("scan", ahead), Source("depth", placed=False))
    assert code == ErrorCode.TF_ERROR and not may_turn and "depth cannot be placed" in why


class Run:
    """What the watchdog reads of GoalRun."""

    running, ended, cancel_requested = True, None, False

    def end(self, code=None, message="") -> None:
        self.running, self.ended = False, (code, message)

    def end_if_cancelled(self) -> bool:
        if self.cancel_requested:
            self.end(ErrorCode.CANCELLED, "cancelled by the client")
        return not self.running


def test_a_clock_that_stops_stops_the_base():
    """The replan ticks run on the node's clock, which under use_sim_time stops with /clock; a watchdog on the
    steady clock stops the base and ends the goal UNAVAILABLE once that clock has not moved for watch_s (a slow
    clock is no stopped one), and acts on a cancel the ticks can no longer see."""
    sent, clock = [], SimpleNamespace(nanoseconds=5 * NS)
    node = SimpleNamespace(_send=lambda twist, trip=None: sent.append(twist),
                           get_clock=lambda: SimpleNamespace(now=lambda: clock))  # fmt: skip
    run = Run()
    trip = Trip(run, PoseStamped(), "", 0.0, False, clock=StillClock(5 * NS, time.monotonic() - 1.0), watch_s=0.5)
    clock.nanoseconds += 1  # moved (slowly) since: it runs on
    NavigationNode._watchdog(node, trip)
    assert run.running and not sent
    trip.clock.since -= 1.0  # then still for a second
    NavigationNode._watchdog(node, trip)
    assert run.ended[0] == ErrorCode.UNAVAILABLE and "clock has not moved" in run.ended[1] and sent == [Twist()]
    cancelled = Run()
    cancelled.cancel_requested = True
    NavigationNode._watchdog(node, Trip(cancelled, PoseStamped(), "", 0.0, False))
    assert cancelled.ended[0] == ErrorCode.CANCELLED


def test_a_reading_is_placed_by_its_sensors_mount_when_it_was_taken():
    """A depth camera on a pan head (base_link -> head on /tf, turned from ahead to the left between 1 s and 2 s): a
    point 0.4 m ahead of the head is ahead of the base in the reading taken at 1 s and to its left in the one at 2 s;
    a reading taken after the head's transforms stopped (beyond transform_tolerance_s) cannot be placed, so the base
    stops (TF_ERROR) rather than place it by the head's last known pose."""
    tree = TransformTree(tolerance_s=0.1)
    for sec, yaw in ((1, 0.0), (2, math.pi / 2)):
        mount = TransformStamped(child_frame_id="head", transform=planar(0.0, 0.0, yaw).to_msg())
        mount.header.frame_id, mount.header.stamp.sec = "base_link", sec
        tree.set(mount, static=False)
    source, odometry = _Points(None, "depth camera", tree, "base_link"), OdometryHistory()
    for sec in range(7):  # the base stands at odom's origin
        odometry.add(Odom(Pose2D(0.0, 0.0, 0.0), sec * NS, sec * NS))
    point = np.array([[0.4, 0.0, 0.0]])

    def placed(stamp_ns: int) -> Blocking | None:
        source._reading = Reading(point, lambda at: np.zeros(len(at), dtype=bool), "head", stamp_ns, stamp_ns)
        return source.blocking(0.2, 0.25, odometry, memory_s=0.0)

    assert placed(1 * NS) == Blocking(pytest.approx(0.2), pytest.approx(0.4))
    assert placed(2 * NS) is None
    with pytest.raises(TransformUnavailable, match="would extrapolate"):
        placed(5 * NS)


def test_no_motion_is_sent_for_a_goal_whose_cancel_was_asked():
    """A replan that passed its cancel check as the cancel came sends nothing: the goal ends at the next tick, and
    the stop is sent then (a stop for no goal still goes out)."""
    published, deadline = [], []
    node = SimpleNamespace(_command_lock=threading.Lock(), _publish=published.append,
                           _deadline=SimpleNamespace(arm=lambda *when: deadline.append(when),
                                                     disarm=lambda: deadline.append(None)))  # fmt: skip
    run = SimpleNamespace(running=True, goal_handle=SimpleNamespace(is_cancel_requested=False))
    trip, forward = Trip(run, PoseStamped(), "", 0.0, False, cover_s=0.3), Twist()
    forward.linear.x = 0.3
    NavigationNode._send(node, forward, trip, 7)
    run.goal_handle.is_cancel_requested = True
    NavigationNode._send(node, forward, trip, 8)
    NavigationNode._send(node, Twist())
    assert published == [forward, Twist()]
    assert deadline == [(7, 0.3 - POLL_S), None]  # the motion lasts its cover from its check; the stop, for good


def test_a_goal_that_ended_before_its_drive_began_is_never_handed_to_nav2():
    """A newer goal (or a shutdown) ended it between becoming current and its drive's first step: nav2 never hears
    of it, so nothing drives it unwatched."""

    def send_goal_async(*_args):
        raise AssertionError("handed to nav2")

    handoff = SimpleNamespace(client=SimpleNamespace(send_goal_async=send_goal_async))
    run = SimpleNamespace(running=False)
    assert asyncio.run(Nav2Handoff._drive(handoff, run, PoseStamped(), print, 1.0, print)) == ""


class NarrowScanner:
    """A base at (x, 0) facing ``yaw`` with a 90-degree scanner 15 cm ahead of its centre (a depth camera's field
    of view, as a scan) and a pole at ``pole`` in odom; each ``look`` is a reading fed to the source."""

    MOUNT = planar(0.15, 0.0, 0.0)

    def __init__(self, pole: tuple[float, float] | None) -> None:
        tree = TransformTree()
        mount = TransformStamped(child_frame_id="laser", transform=self.MOUNT.to_msg())
        mount.header.frame_id = "base_link"
        tree.set(mount, static=True)
        self.source, self.odometry, self.pole, self.stamp_ns = _Points(None, "scan", tree, "base_link"), \
            OdometryHistory(), pole, 0  # fmt: skip

    def look(self, x: float, yaw: float = 0.0, memory_s: float = 30.0) -> Blocking | None:
        self.stamp_ns += NS // 10
        pose = Pose2D(x, 0.0, yaw)
        self.odometry.add(Odom(pose, self.stamp_ns, self.stamp_ns))
        step, ranges = math.radians(1.0), [math.inf] * 91
        if self.pole is not None:
            laser = (x + 0.15 * math.cos(yaw), 0.15 * math.sin(yaw))
            bearing = math.atan2(self.pole[1] - laser[1], self.pole[0] - laser[0]) - yaw
            ray = round((bearing + math.pi / 4) / step)
            if 0 <= ray < len(ranges):
                ranges[ray] = math.dist(laser, self.pole)
        msg = LaserScan(angle_min=-math.pi / 4, angle_max=math.pi / 4, angle_increment=step, range_min=0.05,
                        range_max=10.0, ranges=ranges)  # fmt: skip
        points, rays = scan_reading(msg)
        self.source._reading = Reading(points, rays, "laser", self.stamp_ns, self.stamp_ns)
        return self.source.blocking(0.2, 0.25, self.odometry, memory_s)


@pytest.mark.parametrize("memory_s", [30.0, 0.0])
def test_an_obstacle_that_leaves_a_narrow_view_as_the_base_nears_it_still_stops_it(memory_s):
    """A pole 19 cm beside the centre line (inside the 25 cm corridor) leaves the 90-degree view when 34 cm ahead,
    where the base could still advance 28 cm before touching it: past the 25 cm clearance, so no reading ever
    stopped the base and it drove into the pole (memory_s 0, the newest reading only). Remembered, it stops the base
    once it is within the clearance."""
    scanner = NarrowScanner((1.0, 0.19))
    stops = [x for x in np.arange(0.0, 0.9, 0.02) if scanner.look(x, memory_s=memory_s) is not None]
    if memory_s:
        assert stops and 1.0 - stops[0] == pytest.approx(0.31, abs=0.011)  # gap 0.25 - 0.0624 (the circle's edge)
    else:
        assert not stops


def test_a_remembered_obstacle_stays_until_a_ray_reaches_past_it_or_it_is_forgotten():
    """Stopped by the remembered pole, the base stays stopped after the pole went (nothing sees where it was);
    turning to look there with nothing in the way clears it. Left unseen, it is forgotten memory_s after it was
    seen."""
    scanner = NarrowScanner((1.0, 0.19))
    for x in np.arange(0.0, 0.7, 0.02):
        scanner.look(x)
    scanner.pole = None
    assert scanner.look(0.7) is not None  # out of view: still there for all the base knows
    assert scanner.look(0.7, yaw=math.pi / 6) is None  # turned to look where it was: nothing there
    assert scanner.look(0.7) is None
    forgetting = NarrowScanner((1.0, 0.19))
    for x in np.arange(0.0, 0.7, 0.02):
        forgetting.look(x, memory_s=2.0)
    forgetting.pole = None
    assert forgetting.look(0.7, memory_s=2.0) is not None
    for _ in range(20):  # two more seconds
        forgetting.look(0.7, memory_s=2.0)
    assert forgetting.look(0.7, memory_s=2.0) is None


def test_after_the_odometry_restarts_no_remembered_point_is_measured_against_the_new_frame():
    """A wall seen 0.3 m ahead of a base at odom x = 5 stops it; the base controller restarts (odom back at the
    origin): the same reading, kept in the old frame, would now be 5.3 m ahead, a clear way. It is placed again by
    the new history, which does not reach back to it: a stop; the next reading is placed in the new frame."""
    tree = TransformTree()
    mount = TransformStamped(child_frame_id="laser", transform=planar(0.0, 0.0, 0.0).to_msg())
    mount.header.frame_id = "base_link"
    tree.set(mount, static=True)
    source, odometry = _Points(None, "scan", tree, "base_link"), OdometryHistory()
    wall = np.array([[0.3, 0.0, 0.0]])
    nothing_reached = lambda at: np.zeros(len(at), dtype=bool)  # noqa: E731
    for sec in (1, 2, 3):
        odometry.add(Odom(Pose2D(5.0, 0.0, 0.0), sec * NS, sec * NS))
    source._reading = Reading(wall, nothing_reached, "laser", 3 * NS, 3 * NS)
    assert source.blocking(0.2, 0.25, odometry, memory_s=30.0) is not None
    restart = 3 * NS + NS // 10
    odometry.add(Odom(Pose2D(0.0, 0.0, 0.0), restart, restart))  # restarted at its origin (5 m in 0.1 s)
    assert odometry.epoch == 1
    with pytest.raises(TransformUnavailable, match="does not reach back"):
        source.blocking(0.2, 0.25, odometry, memory_s=30.0)
    source._reading = Reading(wall, nothing_reached, "laser", restart, restart)
    assert source.blocking(0.2, 0.25, odometry, memory_s=30.0) == Blocking(pytest.approx(0.1), pytest.approx(0.3))
