"""The task types a request may belong to: each has its own KV format (``kv_task_dtypes``), statistics and service
class. A leaf module (no imports) so the configuration table, the engine and the nodes read the one list."""

TASK_TYPES = ("vqa", "instruction", "navigation", "generic")
