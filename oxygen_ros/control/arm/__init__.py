"""A VLA's action chunks made safe for a ros2_control arm: units, limits, blending of overlapping chunks (no ROS)."""
