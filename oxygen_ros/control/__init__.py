"""Low-level controllers of the task nodes (no ROS, no model): they turn a target into motion at the control rate."""
