"""The images requests in flight carry inline are bounded in bytes, not only in number: each request reserves its
inline images' data and RGB copies (read from the message's fields, before decoding) until it is answered; one that
does not fit beside the others is refused RESOURCE_EXHAUSTED naming the parameter, and one larger than the whole
budget still runs alone."""

import pytest
from sensor_msgs.msg import Image

from oxygen_ros.action import Generate
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.msg import ChatMessage
from oxygen_ros.msg import Observation as ObservationMsg
from oxygen_ros.nodes.image_budget import ImageBudget, image_bytes, inline_images
from oxygen_ros.srv import Infer


def _image(width: int, height: int, encoding: str = "rgb8", channels: int = 3) -> Image:
    return Image(width=width, height=height, encoding=encoding, step=width * channels,
                 data=bytes(width * height * channels))  # fmt: skip


def test_a_request_counts_its_observation_and_conversation_images_data_and_rgb_copies():
    mono = _image(10, 10, "mono8", 1)  # 100 bytes, its RGB copy 300
    rgb = _image(20, 10)  # 600 and 600
    request = Infer.Request(observation=[ObservationMsg(images=[mono, rgb])],
                            messages=[ChatMessage(role="user", images=[rgb])])  # fmt: skip
    assert list(inline_images(request)) == [mono, rgb, rgb]
    assert image_bytes(inline_images(request)) == 400 + 1200 + 1200
    huge = Image(width=8192, height=8192, encoding="rgb8", step=0, data=b"")  # its copy refused before it is made
    assert image_bytes([huge]) == 64 << 20


def test_requests_in_flight_hold_their_images_until_answered_and_the_next_that_does_not_fit_is_refused():
    budget = ImageBudget(3000)
    first = Infer.Request(observation=[ObservationMsg(images=[_image(20, 20)])])  # 1200 + 1200
    second = Generate.Goal(messages=[ChatMessage(role="user", images=[_image(10, 10)])])  # 300 + 300
    with budget.hold(first):
        with budget.hold(second):
            assert budget.held == 3000
            with pytest.raises(EngineError) as err, budget.hold(second):
                pass
            assert err.value.code == ErrorCode.RESOURCE_EXHAUSTED and "inflight_image_bytes 3000" in err.value.message
            with budget.hold(Infer.Request()):  # a request without inline images always fits
                pass
        assert budget.held == 2400
    assert budget.held == 0
    alone = Infer.Request(observation=[ObservationMsg(images=[_image(40, 40)])])  # 9600: over the whole budget
    with budget.hold(alone):  # but nothing else is in flight: it runs
        assert budget.held == 9600
        with pytest.raises(EngineError):
            with budget.hold(second):
                pass
        with budget.hold(Infer.Request()):  # and one without images still runs beside it (a by-id VLA request)
            pass
    assert budget.held == 0
