"""A PoolMap as an rviz MarkerArray: one cube per KV block on the pool's grid, coloured by state or owning task,
with a text legend beside it.

Each block is CUBE marker ``id = block id`` in namespace ``kv_blocks``; above ``max_cubes`` blocks the same grid is
sent as one CUBE_LIST whose i-th point and colour are block i (thousands of separate markers are slow to build here
and to render in rviz). A DELETEALL leads every array, so legend lines of tasks that finished disappear.
"""

from builtin_interfaces.msg import Time
from geometry_msgs.msg import Point
from std_msgs.msg import ColorRGBA, Header
from visualization_msgs.msg import Marker, MarkerArray

from oxygen_ros.viz.pool_map import PoolMap, grid_positions, grid_shape

SPACING = 0.1  # metres between block centres
TEXT_HEIGHT = 1.5 * SPACING


def _colour(rgb) -> ColorRGBA:
    r, g, b = (float(c) / 255.0 for c in rgb)
    return ColorRGBA(r=r, g=g, b=b, a=1.0)


def _marker(header: Header, ns: str, marker_id: int, marker_type: int, x: float, y: float) -> Marker:
    marker = Marker(header=header, ns=ns, id=marker_id, type=marker_type, action=Marker.ADD)
    marker.pose.position.x, marker.pose.position.y = x, y
    marker.pose.orientation.w = 1.0
    return marker


def _text(header: Header, ns: str, marker_id: int, x: float, y: float, text: str, rgb) -> Marker:
    marker = _marker(header, ns, marker_id, Marker.TEXT_VIEW_FACING, x, y)
    marker.scale.z = TEXT_HEIGHT
    marker.color = _colour(rgb)
    marker.text = text
    return marker


def pool_markers(pmap: PoolMap, frame_id: str, stamp: Time, max_cubes: int) -> MarkerArray:
    header = Header(frame_id=frame_id, stamp=stamp)
    positions = grid_positions(pmap.num_blocks) * SPACING  # (row, col) -> metres; rows grow towards -y
    colours = [_colour(c) for c in pmap.colours()]
    size = 0.9 * SPACING
    markers = [Marker(header=header, action=Marker.DELETEALL)]
    if pmap.num_blocks <= max_cubes:
        for block_id, ((y, x), colour) in enumerate(zip(positions, colours, strict=True)):
            cube = _marker(header, "kv_blocks", block_id, Marker.CUBE, float(x), -float(y))
            cube.scale.x = cube.scale.y = cube.scale.z = size
            cube.color = colour
            markers.append(cube)
    else:
        cubes = _marker(header, "kv_blocks", 0, Marker.CUBE_LIST, 0.0, 0.0)
        cubes.scale.x = cubes.scale.y = cubes.scale.z = size
        cubes.points = [Point(x=float(x), y=-float(y)) for y, x in positions]
        cubes.colors = colours
        markers.append(cubes)
    _, cols = grid_shape(pmap.num_blocks)
    legend_x = cols * SPACING + 1.0
    markers.append(_text(header, "kv_title", 0, 0.0, 2 * TEXT_HEIGHT, pmap.summary(), (255, 255, 255)))
    for i, entry in enumerate(pmap.legend()):
        label = f"{entry.label} ({entry.count})"
        markers.append(_text(header, "kv_legend", i, legend_x, -i * 1.5 * TEXT_HEIGHT, label, entry.colour))
    return MarkerArray(markers=markers)
