"""The KV pool's storage and the per-step context that every layer reads.

Below ``layers/`` and ``models/`` and above ``kernels/``: nothing here imports the engine, the layers or ROS, so the
engine (which owns the pool's bookkeeping) and the models (which write and read K/V) both build on it.
"""
