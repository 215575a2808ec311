"""LeRobot's pi0.5 tensor names -> ours: pi0's renames (the same ``paligemma_with_expert`` tree and
``action_{in,out}_proj``) plus pi0.5's time MLP, which openpi checkpoints name ``action_time_mlp_*`` and LeRobot
``time_mlp_*`` (LeRobot renames the first to the second on load; so do we).  ``state_proj`` has no pi0.5 name: it
stays unknown, so a pi0 checkpoint given as pi0.5 is refused naming it."""

from oxygen_ros.models.common.lerobot_checkpoint import our_name

_TIME_MLP = (("time_mlp_", "expert.time_mlp_"), ("action_time_mlp_", "expert.time_mlp_"))


def pi05_name(name: str) -> str:
    """One checkpoint tensor name (leading ``model.`` removed) -> our module name (unknown names unchanged)."""
    for old, new in _TIME_MLP:
        if name.startswith(old):
            return new + name[len(old) :]
    return our_name(name)
