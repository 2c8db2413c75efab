"""Ctrl-C while training: a request to stop at the next step boundary, instead of a
KeyboardInterrupt raised wherever the main thread happens to be.

An exception raised at an arbitrary bytecode can land inside TensorFlow's own Python code, between
the creation of a C++ object and the code that owns it; a chief of a parameter-server cluster
interrupted that way once aborted with glibc's "corrupted size vs. prev_size" instead of saving
its checkpoint. The training loops check `StopRequest.requested` between steps instead.
"""

import contextlib
import signal
import threading
from typing import Iterator


class StopRequest:
    """Set by the first SIGINT received inside `stop_on_interrupt`."""

    def __init__(self) -> None:
        self.requested = False


@contextlib.contextmanager
def stop_on_interrupt() -> Iterator[StopRequest]:
    """Inside the block, the first SIGINT sets the yielded request's `requested`; a second one
    raises KeyboardInterrupt as usual (for a loop stuck in a step). Outside the main thread, or
    when SIGINT is not handled by Python's default handler (ignored, or handled by the caller),
    SIGINT is left as it is."""
    request = StopRequest()
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield request
        return

    def handler(signum: int, frame: object) -> None:
        if request.requested:
            signal.default_int_handler(signum, frame)
        request.requested = True

    signal.signal(signal.SIGINT, handler)
    try:
        yield request
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
