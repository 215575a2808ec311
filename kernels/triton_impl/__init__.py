"""Triton implementations of the ops in ``oxygen_ros.kernels``; imported only when a Triton kernel is launched."""
