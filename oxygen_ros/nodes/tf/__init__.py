"""Coordinate frames (REP 105) for oxygen_ros's nodes: tf2_ros where it is installed (a robot), else a small buffer,
listener and broadcaster of our own on the same topics and message (tf2_msgs/TFMessage on /tf and /tf_static), so a
node is written once against ``backend`` and talks to real TF either way."""
