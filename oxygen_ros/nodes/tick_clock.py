"""The time a goal's ticks keep (instruction_node's clock thread): the monotonic clock on a robot, the node's clock
when the node runs on ROS time (``use_sim_time`` with a simulator's or a bag's /clock). A simulator may run slower or
faster than the wall, or pause: a control period, and a goal's ``duration_s``, are then periods of its time, so the
thread waits on the node clock in short wall-clock slices (rclpy's ``Clock.sleep_until`` cannot also wake for the
goal's end). Which clock is chosen once, when the goal starts.

ROS time that goes backwards (a simulator reset, a looped bag) is reported by ``went_back``: a plan stamped in the old
time cannot be executed in the new one, so the goal ends with the arm held rather than waiting for the old time to
come back.
"""

import math
import threading
import time

from rclpy.clock import Clock, ROSClock

from oxygen_ros.nodes.stamps import NS

POLL_S = 0.005  # the wall-clock slice a wait on ROS time sleeps between readings of the node clock


class TickClock:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.simulated = isinstance(clock, ROSClock) and clock.ros_time_is_active
        self.went_back = False
        self._latest = -math.inf

    def now(self) -> float:
        """Seconds on the goal's clock (monotonic, or the node's ROS time); notes a backward step in ``went_back``."""
        if not self.simulated:
            return time.monotonic()
        now = self._clock.now().nanoseconds / NS
        self.went_back |= now < self._latest
        self._latest = max(self._latest, now)
        return now

    def wait_until(self, due: float, stop: threading.Event) -> bool:
        """Sleep until ``due`` on this clock, the time going back, or ``stop``; True when ``stop`` was set."""
        while True:
            left = due - self.now()
            if left <= 0 or self.went_back:
                return stop.is_set()
            if stop.wait(min(left, POLL_S) if self.simulated else left):
                return True
