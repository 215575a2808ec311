"""Which robot a request is about, and that robot's own observations: a fleet served by one inference node.

One inference node may serve several robots (parameter ``robots``: their namespaces). Each robot's camera and
observation topics are subscribed under its namespace and kept in a ring of its own, so a request's empty
observation_id means the newest frame of the robot it names (or whose namespace it runs under: robot1/arm is
robot1's), never another robot's, and an id is looked up only among that robot's frames. Without ``robots`` the node serves one robot, the topics as they resolve in its own
namespace, and answers every request from them whatever robot it names (task nodes in sub-namespaces of one robot, an
arm's for instance, share its camera): a node shared by several robots must list them.
"""

from collections.abc import Callable

from oxygen_ros import bounds
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.observations import ObservationRing

MAX_ROBOTS = 64


def robot_name(namespace: str) -> str:
    """A namespace as a request names its robot: without leading and trailing slashes ('' for the root)."""
    return namespace.strip("/")


class FleetRings:
    """One observation ring per served robot (``make_ring(share)``: a ring holding ``share`` of the byte bound)."""

    def __init__(self, robots: list[str], make_ring: Callable[[int], ObservationRing]) -> None:
        names = [robot_name(r) for r in robots]
        if len(names) > MAX_ROBOTS or len(set(names)) != len(names) or any(len(n) > bounds.ID_CHARS for n in names):
            raise EngineError(ErrorCode.INVALID_ARGUMENT, f"robots must be at most {MAX_ROBOTS} distinct namespaces "
                              f"('/' for the root), got {robots!r}")  # fmt: skip
        self.fleet = bool(names)
        self._rings = {name: make_ring(len(names)) for name in names} if names else {"": make_ring(1)}

    def topics(self, camera_topic: str, observation_topic: str) -> list[tuple[str, str, str]]:
        """(robot, camera topic, observation topic) to subscribe: each robot's under its namespace, or the node's
        own topics as given (relative ones resolve in its namespace). A fleet needs relative topics."""
        if not self.fleet:
            return [("", camera_topic, observation_topic)]
        for name, topic in (("camera_topic", camera_topic), ("observation_topic", observation_topic)):
            if topic.startswith("/"):
                raise EngineError(ErrorCode.INVALID_ARGUMENT, f"{name} {topic!r} must be relative when robots is set "
                                  "(each robot's is subscribed under its namespace)")  # fmt: skip
        prefixes = {robot: f"/{robot}" if robot else "" for robot in self._rings}  # '' is the root namespace
        return [(robot, f"{prefix}/{camera_topic}", f"{prefix}/{observation_topic}") for robot, prefix in prefixes.items()]

    def ring(self, robot: str) -> ObservationRing:
        """The ring of the robot a request names (``''``: the only one); INVALID_ARGUMENT or NOT_FOUND naming
        ``robot`` when the node cannot tell or does not serve it."""
        bounds.text("robot", robot, bounds.ID_CHARS)
        name = robot_name(robot)
        if not self.fleet:  # one camera: every request is about it, whichever namespace the caller runs in
            return self._rings[""]
        owner = name if name in self._rings else max((r for r in self._rings if r and name.startswith(f"{r}/")),
                                                       key=len, default=None)  # an arm's nodes under robot1/arm  # fmt: skip
        if owner is not None:
            return self._rings[owner]
        served = ", ".join(f"/{r}" for r in self._rings)
        if not name:
            raise EngineError(ErrorCode.INVALID_ARGUMENT, f"robot must name one of the robots this node serves "
                              f"({served}) for a request about their observations")  # fmt: skip
        raise EngineError(ErrorCode.NOT_FOUND, f"robot {robot!r} is not one of the robots this node serves ({served})")
