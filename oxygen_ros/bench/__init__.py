"""Benchmark suites behind `oxygen-ros bench --suite NAME`: each measures ours against a baseline side by side in one
run and returns a JSON-ready dict with a ``metrics`` object."""
