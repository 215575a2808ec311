"""What a gripper controller said of one instruction goal's gripper goals, for the goal's outcome: how many it refused
in a row, how long one of ours stood with the controller saying nothing of it, and how far short of their positions
it stalled goals on either side of where the jaw stopped.

A GripperActionController that is active ends a goal whose jaw stopped short of its position once it stood still for
the controller's stall_timeout (stalled: ABORTED, or SUCCEEDED with allow_stalling), and one that got there as
reached; a deactivated one keeps its action server (made in on_activate, left by on_deactivate), takes every goal and
ends none. Both restart their stall timer at each goal they take (a newer one preempts the older), so only a goal
that stood (until replaced or ended) well past stall_timeout with no word tells a switched-off controller from one
whose jaw holds something while the model's jaw position keeps moving (a working one leaves a goal that long
unanswered only while its jaw moves). Answers to an earlier instruction goal's gripper goals
(its ``generation``) count for nothing here. Plain bookkeeping: its owner locks and brings the clock.
"""

from dataclasses import dataclass


@dataclass
class JawAnswers:
    generation: int = 0  # the instruction goal the counts are for
    refused: int = 0  # gripper goals refused in a row
    answered: bool = False  # a goal of ours reached its position or stalled: the controller runs
    standing: tuple[bytes, float] | None = None  # our newest taken goal not yet ended, and when it was taken
    longest: float = 0.0  # the longest a goal of ours stood unended before a newer one replaced it, s
    short_below: float = 0.0  # the farthest a goal of ours that stalled was below where the jaw stopped
    short_above: float = 0.0  # and above it

    def begin(self) -> None:
        """A new instruction goal: counts start afresh, and answers to the earlier one's goals are dropped."""
        self.generation += 1
        self.refused, self.answered, self.standing, self.longest = 0, False, None, 0.0
        self.short_below = self.short_above = 0.0

    def on_refused(self, generation: int) -> None:
        if generation == self.generation:
            self.refused += 1

    def on_taken(self, generation: int, key: bytes, now: float) -> None:
        """Goal ``key`` was taken at ``now``: it replaces the one standing."""
        if generation != self.generation:
            return
        self.refused = 0
        if self.standing is not None:
            self.longest = max(self.longest, now - self.standing[1])
        self.standing = (key, now)

    def on_ended(self, generation: int, key: bytes, reached_or_stalled: bool, now: float, short: float = 0.0) -> None:
        """Goal ``key`` ended at ``now`` (a result came): it no longer stands, and how long it stood without a word
        counts as a replaced one's does (another client's goal preempting ours says nothing of the controller);
        ``reached_or_stalled``: the controller runs; ``short``: a stalled goal's position less where the jaw
        stopped."""
        if generation != self.generation:
            return
        self.answered |= reached_or_stalled
        self.short_below, self.short_above = max(self.short_below, -short), max(self.short_above, short)
        if self.standing is not None and self.standing[0] == key:
            self.longest = max(self.longest, now - self.standing[1])
            self.standing = None

    def unanswered_s(self, now: float, over_s: float) -> float:
        """The longest a goal of ours stood with no word from the controller (``now`` for one still standing), when
        that is over ``over_s`` and the controller said of no goal that it reached or stalled; else 0."""
        if self.answered:
            return 0.0
        stood = max(self.longest, now - self.standing[1] if self.standing is not None else 0.0)
        return stood if stood > over_s else 0.0

    def stalled_both_ways(self, over: float) -> tuple[float, float] | None:
        """(below, above): how far short of their positions goals of ours stalled on each side of where the jaw
        stopped, when both are over ``over``; else None."""
        return (self.short_below, self.short_above) if min(self.short_below, self.short_above) > over else None
