"""A goal's ticks keep the node's time: the monotonic clock on a robot, ROS time under use_sim_time, where a wait
lasts until the simulator's /clock reaches it (however long that takes on the wall) and ROS time going back (a
simulator reset) is reported rather than waited out. Through a real node that takes /clock from a publisher."""

import threading
import time

from builtin_interfaces.msg import Time
from rclpy.node import Node
from rclpy.parameter import Parameter
from rosgraph_msgs.msg import Clock
from ros_harness import spin_nodes, wait_until

from oxygen_ros.nodes.tick_clock import TickClock


def _waiter(ticks: TickClock, due: float, stop: threading.Event) -> tuple[threading.Thread, list[bool]]:
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(ticks.wait_until(due, stop)), daemon=True)
    thread.start()
    return thread, result


def test_ticks_follow_a_simulators_clock_and_report_it_going_back(ros_context):
    node = Node("tick_clock_test", context=ros_context, parameter_overrides=[Parameter("use_sim_time", value=True)])
    sim = Node("tick_clock_sim", context=ros_context)
    clock = sim.create_publisher(Clock, "/clock", 10)
    with spin_nodes(ros_context, node, sim):
        wait_until(lambda: clock.get_subscription_count() > 0, 10.0, "the node's /clock subscription")

        def publish(sec: int, nanosec: int = 0) -> None:
            clock.publish(Clock(clock=Time(sec=sec, nanosec=nanosec)))
            wait_until(lambda: node.get_clock().now().nanoseconds == sec * 10**9 + nanosec, 10.0, "the sim time")

        publish(100)
        ticks = TickClock(node.get_clock())
        assert ticks.simulated and ticks.now() == 100.0
        thread, result = _waiter(ticks, 100.5, threading.Event())
        publish(100, 200_000_000)
        time.sleep(0.6)  # more than the wait on the wall: the simulator's time has not got there
        assert thread.is_alive() and not result
        publish(100, 600_000_000)
        thread.join(5.0)
        assert result == [False] and not ticks.went_back
        thread, result = _waiter(ticks, 101.0, threading.Event())
        publish(20)  # a simulator reset
        thread.join(5.0)
        assert result == [False] and ticks.went_back
        stop = threading.Event()
        thread, result = _waiter(TickClock(node.get_clock()), 30.0, stop)
        stop.set()  # the goal ended: the wait ends at once, whatever the time
        thread.join(5.0)
        assert result == [True]


def test_a_robot_ticks_on_the_monotonic_clock(ros_context):
    node = Node("tick_clock_robot", context=ros_context)
    try:
        ticks = TickClock(node.get_clock())
        assert not ticks.simulated
        start = time.monotonic()
        assert ticks.wait_until(ticks.now() + 0.05, threading.Event()) is False
        assert 0.04 <= time.monotonic() - start < 1.0
    finally:
        node.destroy_node()
