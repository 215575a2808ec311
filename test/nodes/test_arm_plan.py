"""A goal's chunk requests on the VLA path: one in flight at a time. Each request has a number; its answer (or its
failure) lets the next be asked for only if no newer request was made meanwhile, so a late answer cannot clear the
mark of the request after it and put two in flight (seen in the robot benchmark: two chunks computed in one step,
both late)."""

from oxygen_ros.control.arm.action_queue import ActionQueue
from oxygen_ros.nodes.vla_arm import ArmPlan


def test_a_late_answer_does_not_clear_the_request_after_it():
    plan = ArmPlan(ActionQueue(0.1, 0.3), horizon=10, threshold=5, limits=[], action_dim=2)
    first = plan.ask(10.0, 2.5)
    assert (plan.awaiting, plan.due_at, plan.asked) == (True, 12.5, 2)  # the probe was request 1
    second = plan.ask(10.1, 2.4)  # asked again (the first went past due)
    plan.answered(first)  # the first answer arrives late
    assert plan.awaiting and plan.due_at == 12.5
    plan.answered(second)
    assert not plan.awaiting and plan.asked == 3
    plan.overdue = True
    plan.ask(11.0, 1.0)
    assert not plan.overdue  # a new request has not missed anything yet
