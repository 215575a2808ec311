"""What a gripper controller said of one instruction goal's gripper goals, for the goal's outcome: how many it refused
in a row, how long one of ours stood with the controller saying nothing of it, and where it last stalled a goal
below and one above where the jaw stopped.

A GripperActionController that is active ends a goal whose jaw stopped short of its position once it stood still for
the controller's stall_timeout (stalled: ABORTED, or SUCCEEDED with allow_stalling), and one that got there as
reached; a deactivated one keeps its action server (made in on_activate, left by on_deactivate), takes every goal and
ends none. Both restart their stall timer at each goal they take (a newer one preempts the older), so only a goal
that stood (until replaced or ended) well past stall_timeout with no word tells a switched-off controller from one
whose jaw holds something while the model's jaw position keeps moving (a working one leaves a goal that long
unanswered only while its jaw moves). A working controller whose jaw's motors are off (torque disabled, an
overload shutdown, an emergency stop's safe torque off) says stalled of every goal short of where the jaw stands:
stalls on one side are what a jaw holding something says (an object stops it closing), a goal stalled short below
and one above at the same place are a jaw that moves neither way there (``jammed``). A controller restarts its stall
timer at each goal, so goals replaced faster than its stall_timeout (a jaw position the model keeps moving) are never
said stalled, nor kept long without a word: then the jaw's own readings tell (``stuck``): a jaw measured at one
place while our newest taken goal asked it over a floor away above for long and below for long (each stretch past
REACT_S) moves neither way (switched off, motors off, wedged); a working one follows a goal that asks it away from
what it holds, and one that reaches its position clears the count.
Answers to an earlier instruction goal's gripper goals (its ``generation``) count for nothing here. Plain
bookkeeping: its owner locks and brings the clock.
"""

from dataclasses import dataclass

REACT_S = 0.3  # a jaw asked away starts moving within this (a controller's update, a servo's latency), s


@dataclass
class JawAnswers:
    generation: int = 0  # the instruction goal the counts are for
    refused: int = 0  # gripper goals refused in a row
    answered: bool = False  # a goal of ours reached its position or stalled: the controller runs
    standing: tuple[bytes, float] | None = None  # our newest taken goal not yet ended, and when it was taken
    longest: float = 0.0  # the longest a goal of ours stood unended before a newer one replaced it, s
    # since the last goal of ours that reached its position: the newest stalled below where the jaw stopped (where it
    # stopped, how far short), and the newest above it
    stalled_below: tuple[float, float] | None = None
    stalled_above: tuple[float, float] | None = None
    asked: float | None = None  # the position of our newest taken goal
    # which way it asks the jaw from its last reading (1 above, -1 below, 0 within the floor) and since when
    side: int = 0
    side_since: float = 0.0
    # where the jaw was measured since it last moved over the floor, when last, and for how long since then our
    # newest taken goal asked it away over the floor above and below, s (REACT_S of each stretch aside)
    stands: tuple[float, float] | None = None
    asked_above_s: float = 0.0
    asked_below_s: float = 0.0

    def begin(self) -> None:
        """A new instruction goal: counts start afresh, and answers to the earlier one's goals are dropped."""
        self.generation += 1
        self.refused, self.answered, self.standing, self.longest = 0, False, None, 0.0
        self.stalled_below = self.stalled_above = None
        self.asked = self.stands = None
        self.side, self.side_since, self.asked_above_s, self.asked_below_s = 0, 0.0, 0.0, 0.0

    def on_refused(self, generation: int) -> None:
        if generation == self.generation:
            self.refused += 1

    def on_taken(self, generation: int, key: bytes, now: float, position: float) -> None:
        """Goal ``key`` (to ``position``) was taken at ``now``: it replaces the one standing."""
        if generation != self.generation:
            return
        self.refused, self.asked = 0, position
        if self.standing is not None:
            self.longest = max(self.longest, now - self.standing[1])
        self.standing = (key, now)

    def on_ended(self, generation: int, key: bytes, reached_or_stalled: bool, now: float,
                 stall: tuple[float, float] | None = None) -> None:  # fmt: skip
        """Goal ``key`` ended at ``now`` (a result came): it no longer stands, and how long it stood without a word
        counts as a replaced one's does (another client's goal preempting ours says nothing of the controller);
        ``reached_or_stalled``: the controller runs; ``stall``: a stalled goal's (where the jaw stopped, NaN where
        the result does not say, the goal's position); reached_or_stalled without it: reached."""
        if generation != self.generation:
            return
        self.answered |= reached_or_stalled
        if self.standing is not None and self.standing[0] == key:
            self.longest = max(self.longest, now - self.standing[1])
            self.standing = None
        if stall is not None:  # (a controller that says so runs: ``jammed`` reads its stalls, not ``stuck``)
            where, position = stall
            if position < where:
                self.stalled_below, self.asked_below_s = (where, where - position), 0.0
            elif position > where:
                self.stalled_above, self.asked_above_s = (where, position - where), 0.0
        elif reached_or_stalled:  # the jaw got to a position: the stalls and asks before it are no jam
            self.stalled_below = self.stalled_above = None
            self.asked_above_s = self.asked_below_s = 0.0

    def on_measured(self, position: float, now: float, floor: float) -> None:
        """The jaw read at ``position`` at ``now`` (each control period). A jaw gone over ``floor`` from where it stood
        starts afresh; else the time since the last reading counts toward the side our newest taken goal asks it,
        over ``floor`` from this reading, once it has asked that way for REACT_S (a jaw follows only so fast: goals
        turning faster than that are no sign either way)."""
        side = 0 if self.asked is None or abs(self.asked - position) <= floor else (1 if self.asked > position else -1)
        if side != self.side:
            self.side, self.side_since = side, now
        if self.stands is None or abs(position - self.stands[0]) > floor:
            self.stands, self.asked_above_s, self.asked_below_s = (position, now), 0.0, 0.0
            return
        where, last = self.stands
        counted = max(min(now - last, now - self.side_since - REACT_S), 0.0)
        if side > 0:
            self.asked_above_s += counted
        elif side < 0:
            self.asked_below_s += counted
        self.stands = (where, now)

    def stuck(self, over_s: float) -> tuple[float, float, float] | None:
        """(where, above_s, below_s) when the jaw stayed at one place while our goals asked it away above it and below
        it, each for over ``over_s``; else None."""
        if self.stands is None or min(self.asked_above_s, self.asked_below_s) <= over_s:
            return None
        return self.stands[0], self.asked_above_s, self.asked_below_s

    def unanswered_s(self, now: float, over_s: float) -> float:
        """The longest a goal of ours stood with no word from the controller (``now`` for one still standing), when
        that is over ``over_s`` and the controller said of no goal that it reached or stalled; else 0."""
        if self.answered:
            return 0.0
        stood = max(self.longest, now - self.standing[1] if self.standing is not None else 0.0)
        return stood if stood > over_s else 0.0

    def jammed(self, floor: float) -> tuple[float, float, float] | None:
        """(where, below, above) when the newest goals of ours stalled below and above where the jaw stopped, with none
        reaching its position since, were each over ``floor`` short, where the jaw stopped within ``floor`` of each
        other; else None."""
        if self.stalled_below is None or self.stalled_above is None:
            return None
        (low_at, below), (high_at, above) = self.stalled_below, self.stalled_above
        return (high_at, below, above) if min(below, above) > floor and abs(high_at - low_at) <= floor else None
