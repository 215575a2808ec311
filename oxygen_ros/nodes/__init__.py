"""ROS 2 nodes: thin wrappers that translate messages for the ROS-free engine, viz and observation modules."""
