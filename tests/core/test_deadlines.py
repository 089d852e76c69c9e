"""bot.core.deadlines: limits and stage deadlines in force, the timeouts requests get, and the guarded body."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from bot.core import deadlines
from bot.core.deadlines import DeadlinePassed, Limits, Stalled


class _Chunks(httpx.SyncByteStream):
    def __init__(self, chunks: list[bytes], error: Exception | None = None):
        self.chunks = chunks
        self.error = error
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self.closed = True


def guarded(stream: httpx.SyncByteStream) -> httpx.Response:
    response = httpx.Response(200, stream=stream)
    deadlines.on_response(response)
    return response


def test_no_deadline_by_default():
    assert deadlines.remaining() is None
    assert deadlines.passed() is None
    deadlines.check_deadline()


def test_default_limits_give_the_timeouts():
    timeout = deadlines.timeouts()
    assert (timeout.connect, timeout.read, timeout.write, timeout.pool) == (10.0, 60.0, 60.0, 10.0)


def test_limits_apply_inside_the_context_only():
    with deadlines.limits(Limits(connect_s=2.0, read_s=5.0, min_bytes_per_s=0)):
        assert deadlines.timeouts().read == 5.0
        assert deadlines.timeouts().connect == 2.0
    assert deadlines.timeouts().read == 60.0


def test_deadline_caps_the_timeouts():
    with deadlines.stage_deadline("plan", 3.0):
        left = deadlines.remaining()
        assert left is not None and 2.0 < left <= 3.0
        timeout = deadlines.timeouts()
        assert timeout.read <= 3.0 and timeout.connect <= 3.0
    assert deadlines.remaining() is None


def test_earlier_outer_deadline_wins():
    with deadlines.stage_deadline("outer", 5.0), deadlines.stage_deadline("inner", 100.0):
        left = deadlines.remaining()
        assert left is not None and left <= 5.0


def test_earlier_inner_deadline_applies():
    with deadlines.stage_deadline("outer", 100.0), deadlines.stage_deadline("inner", 2.0):
        left = deadlines.remaining()
        assert left is not None and left <= 2.0


def test_passed_deadline_raises_and_reports():
    with deadlines.stage_deadline("publish", 0.0):
        error = deadlines.passed()
        assert isinstance(error, DeadlinePassed)
        assert (error.stage, error.seconds) == ("publish", 0.0)
        assert str(error) == "the publish deadline of 0 s passed"
        with pytest.raises(DeadlinePassed, match="publish"):
            deadlines.check_deadline()
        assert deadlines.timeouts().read == 0.001  # never zero or negative


def test_on_request_overrides_the_call_sites_timeout():
    request = httpx.Request("GET", "https://example.invalid/x", extensions={"timeout": {"read": None}})
    with deadlines.limits(Limits(connect_s=1.0, read_s=7.0, min_bytes_per_s=0)):
        deadlines.on_request(request)
    assert request.extensions["timeout"] == {"connect": 1.0, "read": 7.0, "write": 7.0, "pool": 1.0}


def test_on_request_past_the_deadline_stops():
    request = httpx.Request("GET", "https://example.invalid/x")
    with deadlines.stage_deadline("download", 0.0), pytest.raises(DeadlinePassed):
        deadlines.on_request(request)


def test_guarded_body_passes_a_healthy_answer_through():
    inner = _Chunks([b"abc", b"def"])
    response = guarded(inner)
    assert isinstance(response.stream, deadlines._GuardedStream)
    assert response.read() == b"abcdef"
    assert response.stream.received == 6
    response.close()
    assert inner.closed


def test_read_timeout_becomes_stalled_with_bytes_received():
    response = guarded(_Chunks([b"12345"], error=httpx.ReadTimeout("slow")))
    with pytest.raises(Stalled, match="after 5 bytes") as caught:
        response.read()
    assert caught.value.received == 5


def test_trickle_under_the_minimum_rate_is_stalled():
    with deadlines.limits(Limits(connect_s=1.0, read_s=0.0, min_bytes_per_s=10**12)):
        response = guarded(_Chunks([b"x", b"y"]))
    with pytest.raises(Stalled, match="bytes/s") as caught:
        response.read()
    assert caught.value.received == 1


def test_rate_check_off_with_zero_minimum():
    with deadlines.limits(Limits(connect_s=1.0, read_s=0.0, min_bytes_per_s=0)):
        response = guarded(_Chunks([b"x", b"y", b"z"]))
    assert response.read() == b"xyz"


def test_body_stops_past_the_stage_deadline():
    with deadlines.stage_deadline("download", 0.0):
        response = guarded(_Chunks([b"x"]))
    with pytest.raises(DeadlinePassed, match="download"):
        response.read()
