"""Ctrl-C while training becomes a stop request checked between steps (`job/interrupts.py`)."""

import os
import signal

import pytest

from tf_embedding.job import interrupts

pytestmark = pytest.mark.unit


@pytest.fixture
def default_sigint():
    """SIGINT at Python's default handler, as in a terminal, whatever this process was handed: a
    suite started in the background or under nohup (or a pytest-xdist worker) may have SIGINT
    ignored. The previous disposition is restored afterwards."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_first_sigint_requests_a_stop_and_a_second_one_raises(default_sigint):
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with interrupts.stop_on_interrupt() as stop:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.requested
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_sigint_stays_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts.stop_on_interrupt() as stop:
            os.kill(os.getpid(), signal.SIGINT)
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert not stop.requested
    finally:
        signal.signal(signal.SIGINT, previous)
