"""Pictures of the KV pool for people: per-block state, heatmap images (ROS-free; the nodes publish them)."""
