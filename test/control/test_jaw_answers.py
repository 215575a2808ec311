"""What the instruction goal's outcome reads of a gripper controller's answers (``control.arm.jaw_answers``): a goal
of ours stands from when it was taken until a newer one replaces it or a result ends it, and the longest stand
without a word counts; one word of reached or stalled means the controller runs; refusals count in a row; answers
to an earlier instruction goal's gripper goals count for nothing."""

import pytest

from oxygen_ros.control.arm.jaw_answers import JawAnswers


def test_the_longest_stand_of_one_goal_counts_not_the_time_since_the_first():
    """Goals replacing each other every 0.5 s (a model's jaw position that keeps moving) never stand 1 s; one goal
    taken at 3.0 and left standing does, from 3.0 on; a stand ended by a result without a word (another client's
    goal preempted it) counts up to where it ended."""
    answers = JawAnswers()
    answers.begin()
    for i, taken in enumerate((0.0, 0.5, 1.0, 1.5, 2.0, 2.5)):
        answers.on_taken(answers.generation, bytes([i]), taken)
    assert answers.unanswered_s(3.0, over_s=1.0) == 0.0  # 0.5 each, and 0.5 for the one standing
    answers.on_taken(answers.generation, b"last", 3.0)
    assert answers.unanswered_s(4.5, over_s=1.0) == 1.5
    answers.on_ended(answers.generation, b"last", reached_or_stalled=False, now=4.6)
    assert answers.standing is None
    assert answers.unanswered_s(9.0, over_s=1.0) == pytest.approx(1.6)


def test_one_word_of_reached_or_stalled_means_the_controller_runs():
    answers = JawAnswers()
    answers.begin()
    answers.on_taken(answers.generation, b"a", 0.0)
    answers.on_taken(answers.generation, b"b", 5.0)  # a stood 5 s
    assert answers.unanswered_s(5.0, over_s=2.0) == 5.0
    answers.on_ended(answers.generation, b"a", reached_or_stalled=True, now=5.1)  # its late word: stalled
    assert answers.unanswered_s(20.0, over_s=2.0) == 0.0


def test_refusals_count_in_a_row_and_an_earlier_goals_answers_count_for_nothing():
    answers = JawAnswers()
    answers.begin()
    earlier = answers.generation
    answers.on_refused(earlier)
    answers.on_taken(earlier, b"old", 0.0)
    answers.begin()  # the next instruction goal
    answers.on_refused(earlier)
    answers.on_ended(earlier, b"old", reached_or_stalled=True, now=1.0)
    answers.on_taken(earlier, b"older", 1.0)
    assert (answers.refused, answers.answered, answers.standing) == (0, False, None)
    for count in (1, 2):
        answers.on_refused(answers.generation)
        assert answers.refused == count
    answers.on_taken(answers.generation, b"new", 2.0)
    assert answers.refused == 0 and answers.unanswered_s(4.5, over_s=2.0) == 2.5



def test_a_jaw_stalled_below_and_above_at_one_place_is_jammed_one_way_or_apart_is_not():
    """A jaw closing on what it holds stalls short below where it stopped, however often; opening it, nothing stops
    it. The newest goal stalled below and the newest above, each over the floor short, the jaw stopping within the
    floor of one place both times: it moves neither way there. A result with no stall says nothing of it, and an
    earlier instruction goal's stalls count for nothing."""
    answers = JawAnswers()
    answers.begin()
    for i, stall in enumerate(((0.5, 0.2), (0.5, 0.0), None, (0.52, 0.1))):  # the third reached, or was preempted
        answers.on_ended(answers.generation, bytes([i]), reached_or_stalled=True, now=float(i), stall=stall)
    assert answers.stalled_below == (0.52, pytest.approx(0.42)) and answers.stalled_above is None
    assert answers.jammed(floor=0.03) is None
    answers.on_ended(answers.generation, b"open", reached_or_stalled=True, now=5.0, stall=(0.9, 1.2))  # elsewhere
    assert answers.jammed(floor=0.03) is None  # stalled above at 0.9, below at 0.52: it moved between them
    answers.on_ended(answers.generation, b"again", reached_or_stalled=True, now=6.0, stall=(0.53, 0.6))
    assert answers.jammed(floor=0.03) == (0.53, pytest.approx(0.42), pytest.approx(0.07))
    assert answers.jammed(floor=0.08) is None  # 0.07 short of its goal: within the floor, no stall
    earlier = answers.generation
    answers.begin()
    answers.on_ended(earlier, b"late", reached_or_stalled=True, now=7.0, stall=(0.5, 0.2))
    answers.on_ended(answers.generation, b"new", reached_or_stalled=True, now=7.0, stall=(0.5, 0.8))
    assert answers.jammed(floor=0.03) is None and answers.stalled_below is None
