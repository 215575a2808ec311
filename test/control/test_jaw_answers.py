"""What the instruction goal's outcome reads of a gripper controller's answers (``control.arm.jaw_answers``): a goal
of ours stands from when it was taken until a newer one replaces it or a result ends it, and the longest stand
without a word counts; one word of reached or stalled means the controller runs; refusals count in a row; goals
stalled below and above the jaw at one place, none reaching its position between, are a jaw that cannot move;
answers to an earlier instruction goal's gripper goals count for nothing."""

import math

import pytest

from oxygen_ros.control.arm.jaw_answers import JawAnswers


def test_the_longest_stand_of_one_goal_counts_not_the_time_since_the_first():
    """Goals replacing each other every 0.5 s (a model's jaw position that keeps moving) never stand 1 s; one goal
    taken at 3.0 and left standing does, from 3.0 on; a stand ended by a result without a word (another client's
    goal preempted it) counts up to where it ended."""
    answers = JawAnswers()
    answers.begin()
    for i, taken in enumerate((0.0, 0.5, 1.0, 1.5, 2.0, 2.5)):
        answers.on_taken(answers.generation, bytes([i]), taken, 0.0)
    assert answers.unanswered_s(3.0, over_s=1.0) == 0.0  # 0.5 each, and 0.5 for the one standing
    answers.on_taken(answers.generation, b"last", 3.0, 0.0)
    assert answers.unanswered_s(4.5, over_s=1.0) == 1.5
    answers.on_ended(answers.generation, b"last", reached_or_stalled=False, now=4.6)
    assert answers.standing is None
    assert answers.unanswered_s(9.0, over_s=1.0) == pytest.approx(1.6)


def test_one_word_of_reached_or_stalled_means_the_controller_runs():
    answers = JawAnswers()
    answers.begin()
    answers.on_taken(answers.generation, b"a", 0.0, 0.0)
    answers.on_taken(answers.generation, b"b", 5.0, 0.0)  # a stood 5 s
    assert answers.unanswered_s(5.0, over_s=2.0) == 5.0
    answers.on_ended(answers.generation, b"a", reached_or_stalled=True, now=5.1)  # its late word: stalled
    assert answers.unanswered_s(20.0, over_s=2.0) == 0.0


def test_refusals_count_in_a_row_and_an_earlier_goals_answers_count_for_nothing():
    answers = JawAnswers()
    answers.begin()
    earlier = answers.generation
    answers.on_refused(earlier)
    answers.on_taken(earlier, b"old", 0.0, 0.0)
    answers.begin()  # the next instruction goal
    answers.on_refused(earlier)
    answers.on_ended(earlier, b"old", reached_or_stalled=True, now=1.0)
    answers.on_taken(earlier, b"older", 1.0, 0.0)
    assert (answers.refused, answers.answered, answers.standing) == (0, False, None)
    for count in (1, 2):
        answers.on_refused(answers.generation)
        assert answers.refused == count
    answers.on_taken(answers.generation, b"new", 2.0, 0.0)
    assert answers.refused == 0 and answers.unanswered_s(4.5, over_s=2.0) == 2.5


def test_a_jaw_stalled_below_and_above_at_one_place_with_none_reached_between_is_jammed():
    """A jaw closing on what it holds stalls short below where it stopped, however often; opening it, nothing stops
    it. The newest goal stalled below and the newest above, each over the floor short, the jaw stopping within the
    floor of one place both times and no goal reaching its position between: it moves neither way there. A preempted
    goal says nothing of it, nor a stall whose result names no position; an earlier instruction goal's stalls count
    for nothing."""
    answers = JawAnswers()
    answers.begin()

    def ended(stall: tuple[float, float] | None, reached_or_stalled: bool = True, generation: int | None = None):
        answers.on_ended(answers.generation if generation is None else generation, b"goal", reached_or_stalled,
                         now=0.0, stall=stall)  # fmt: skip

    for stall in ((0.5, 0.2), (0.5, 0.0), (0.52, 0.1)):  # (where it stopped, the goal): closing on what it holds
        ended(stall)
    assert answers.stalled_below == (0.52, pytest.approx(0.42)) and answers.stalled_above is None
    assert answers.jammed(floor=0.03) is None
    ended(None, reached_or_stalled=False)  # preempted
    ended((0.9, 1.2))  # stalled opening at 0.9: it moved between the two
    assert answers.jammed(floor=0.03) is None
    ended((0.53, 0.6))
    assert answers.jammed(floor=0.03) == (0.53, pytest.approx(0.42), pytest.approx(0.07))
    assert answers.jammed(floor=0.08) is None  # 0.07 short of its goal: within the floor, no stall of note
    ended(None)  # a goal reached its position: the stalls before it are no jam
    assert (answers.stalled_below, answers.stalled_above) == (None, None)
    ended((0.5, 0.8))
    ended((math.nan, 0.2))  # a ParallelGripperCommand result naming no position
    assert answers.stalled_below is None and answers.jammed(floor=0.03) is None
    earlier = answers.generation
    answers.begin()
    ended((0.5, 0.2), generation=earlier)
    ended((0.5, 0.8))
    assert answers.jammed(floor=0.03) is None and answers.stalled_below is None


SIDES = ([0.8] * 5 + [0.2] * 5) * 4  # 1 s asking 0.3 above, 1 s below, four times


@pytest.mark.parametrize(("asked", "moves", "stuck"), [
    (SIDES, False, True),  # asked away each way, never moving: cannot move
    ([0.2] * 40, False, False),  # asked one way only: what the jaw holds stops it there
    (SIDES, True, False),  # it follows (over the floor): a working jaw
    ([0.8, 0.2] * 20, False, False),  # turned every 0.2 s, under REACT_S: a jaw that slow would not follow either
    ([0.54, 0.46] * 20, False, False),  # asked within the floor of where it stands: nothing to follow
])  # fmt: skip
def test_a_jaw_that_stays_put_while_fast_replaced_goals_ask_it_both_ways_is_stuck(asked, moves, stuck):
    """Goals replaced every 0.2 s (faster than any stall_timeout: the controller never says stalled) asking the jaw
    at 0.5 away above and below; read every 0.1 s. Over 1.5 s asked each way (each stretch's first REACT_S aside)
    with the jaw within the floor (0.05) of one place is a jaw that cannot move; one way only, turns too fast to
    follow, or a jaw that goes with its goals, is not; a goal reached clears the count."""
    answers = JawAnswers()
    answers.begin()
    position = 0.5
    for i, goal in enumerate(asked):
        answers.on_taken(answers.generation, bytes([i]), 0.2 * i, goal)
        for t in (0.2 * i, 0.2 * i + 0.1):
            if moves:
                position += 0.5 * (goal - position)
            answers.on_measured(position, t, 0.05)
    found = answers.stuck(1.5)
    assert (found is not None) == stuck
    if stuck:
        where, above_s, below_s = found
        assert where == 0.5 and above_s == pytest.approx(2.4) and below_s == pytest.approx(2.4)  # 0.6 of each 1 s
        answers.on_ended(answers.generation, bytes([len(asked) - 1]), reached_or_stalled=True, now=8.0)
        assert answers.stuck(1.5) is None  # reached: the jaw follows after all


def ask_a_jaw_that_stays_at_half(answers: JawAnswers, first: int) -> None:
    """SIDES' goals, the ``first``-th on, one every 0.2 s, the jaw read at 0.5 every 0.1 s."""
    for i, goal in enumerate(SIDES, start=first):
        answers.on_taken(answers.generation, bytes([i]), 0.2 * i, goal)
        for t in (0.2 * i, 0.2 * i + 0.1):
            answers.on_measured(0.5, t, 0.05)


def test_a_stall_said_of_one_side_clears_that_sides_stuck_count():
    """A jaw holding an object nearly as wide as its opening stays put both ways: closing, the object stops it;
    opening, its physical stop just past the object (the URDF's open limit is further) does. A controller that says
    stalled of a goal above runs, and its stalls are what ``jammed`` reads: the time asked above before that word is
    no sign of a switched-off jaw, so only the time asked above after it counts toward ``stuck``."""
    answers = JawAnswers()
    answers.begin()
    ask_a_jaw_that_stays_at_half(answers, first=0)
    assert answers.stuck(1.5) is not None
    answers.on_ended(answers.generation, bytes([len(SIDES) - 1]), reached_or_stalled=True, now=8.0, stall=(0.5, 0.8))
    assert answers.asked_above_s == 0.0 and answers.asked_below_s == pytest.approx(2.4)  # the other side kept
    assert answers.stuck(1.5) is None and answers.stalled_above == (0.5, pytest.approx(0.3))
    ask_a_jaw_that_stays_at_half(answers, first=len(SIDES))  # asked away both ways again, with no word of a stall
    assert answers.stuck(1.5) is not None
