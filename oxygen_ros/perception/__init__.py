"""Perception for robots whose language model reads text: a synthetic camera scene, a scene describer that turns a
frame into a short text observation (and structured detections), and frame sources (simulator, video, image folder).

ROS-free on purpose: ``oxygen_ros.nodes.camera_sim`` only moves these results into messages, so everything here is
tested without a ROS graph.
"""
