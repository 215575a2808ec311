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


def test_goals_stalled_short_on_both_sides_of_where_the_jaw_stopped_are_kept_per_instruction_goal():
    """A jaw closing on what it holds stalls short below (or above) only, however often; goals stalled short on both
    sides are a jaw that moves neither way; a goal that reached its position or ended otherwise says nothing of it;
    an earlier instruction goal's stalls count for nothing."""
    answers = JawAnswers()
    answers.begin()
    for i, short in enumerate((-0.3, -0.5, 0.0, -0.1)):  # the third reached
        answers.on_ended(answers.generation, bytes([i]), reached_or_stalled=True, now=float(i), short=short)
    assert (answers.short_below, answers.short_above) == (0.5, 0.0)
    assert answers.stalled_both_ways(over=0.01) is None
    answers.on_ended(answers.generation, b"open", reached_or_stalled=True, now=5.0, short=0.04)
    assert answers.stalled_both_ways(over=0.01) == (0.5, 0.04)
    assert answers.stalled_both_ways(over=0.04) is None  # within 0.04 of where it stopped: a jitter, not a stall
    earlier = answers.generation
    answers.begin()
    answers.on_ended(earlier, b"late", reached_or_stalled=True, now=6.0, short=-0.2)
    answers.on_ended(answers.generation, b"new", reached_or_stalled=True, now=6.0, short=0.2)
    assert answers.stalled_both_ways(over=0.01) is None
