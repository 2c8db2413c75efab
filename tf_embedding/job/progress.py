"""The training progress display of the custom loop: running loss and AUC, steps and examples/s
as a carriage-return bar or as plain lines."""

import math
import time
from typing import TextIO

import numpy as np
import tensorflow as tf


class RunningMetrics(tf.Module):
    """Loss and AUC over roughly the last 1 / (1 - decay) steps, for the progress display.

    The AUC comes from decayed histograms of the predicted probability of clicks and
    non-clicks, so it costs two small vectors per step.
    """

    def __init__(self, bins: int = 200, decay: float = 0.98):
        super().__init__(name="running_metrics")
        self._bins = bins
        self._decay = decay
        self.positives = tf.Variable(tf.zeros([bins], tf.float64), trainable=False)
        self.negatives = tf.Variable(tf.zeros([bins], tf.float64), trainable=False)
        self.loss_sum = tf.Variable(tf.constant(0.0, tf.float64), trainable=False)
        self.weight = tf.Variable(tf.constant(0.0, tf.float64), trainable=False)

    @tf.Module.with_name_scope  # its ops under "running_metrics/", for profiles
    def update(self, labels: tf.Tensor, probabilities: tf.Tensor, loss: tf.Tensor) -> None:
        bucket = tf.cast(tf.minimum(probabilities * self._bins, self._bins - 1), tf.int32)
        labels = tf.cast(labels, tf.float64)
        for variable, weights in ((self.positives, labels), (self.negatives, 1.0 - labels)):
            counts = tf.math.unsorted_segment_sum(weights, bucket, self._bins)
            variable.assign(variable * self._decay + counts)
        self.loss_sum.assign(self.loss_sum * self._decay + tf.cast(loss, tf.float64))
        self.weight.assign(self.weight * self._decay + 1.0)

    def loss(self) -> float:
        return float(self.loss_sum.numpy() / max(self.weight.numpy(), 1e-12))

    def auc(self) -> float:
        positives, negatives = self.positives.numpy(), self.negatives.numpy()
        total = positives.sum() * negatives.sum()
        if total <= 0:
            return float("nan")
        # Each negative beats the positives in lower buckets and ties half of its own.
        below = np.cumsum(positives) - positives
        return float(np.sum(negatives * (positives.sum() - below - 0.5 * positives)) / total)


class Progress:
    """Steps, examples/s, loss and running AUC as a carriage-return bar or as plain lines."""

    def __init__(self, mode: str, first_step: int, last_step: int, stream: TextIO):
        self._mode = resolve_mode(mode, stream)
        self._stream = stream
        self._first_step = first_step
        self._last_step = last_step
        self._started: float | None = None
        self._timed_from = first_step  # the step the timing starts after
        self._first_examples = 0
        self._examples = 0
        self._last_print = 0.0
        self._next_line = first_step

    def update(self, step: int, examples: int, metrics: RunningMetrics, malformed: tf.Variable,
               force: bool = False) -> None:
        """Records that `step` is done with `examples` examples so far; draws when due
        (reading `malformed`, the count of malformed records, only then)."""
        now = time.monotonic()
        if self._started is None:
            # Timing starts after the first update, whose steps include tracing the step
            # function.
            self._started = now
            self._timed_from = step
            self._first_examples = examples
        self._examples = examples - self._first_examples
        if self._mode == "none":
            return
        if self._mode == "bar" and not force and now - self._last_print < 0.25:
            return
        if self._mode == "lines" and not force and step < self._next_line:
            return
        self._last_print = now
        self._next_line = step + max(1, (self._last_step - self._first_step) // 10)
        elapsed = now - self._started
        timed_steps = step - self._timed_from
        rate = f"{self._examples / elapsed / 1000:.1f}k" if timed_steps > 0 else "-"
        eta = elapsed / timed_steps * (self._last_step - step) if timed_steps > 0 \
            else float("nan")
        width = 24
        filled = int(width * step / max(self._last_step, 1))
        text = (f"step {step}/{self._last_step} [{'#' * filled}{'.' * (width - filled)}] "
                f"{rate} ex/s | loss {metrics.loss():.4f} | "
                f"auc {metrics.auc():.4f} | eta {_duration(eta)}")
        if int(malformed):
            text += f" | malformed {int(malformed)}"
        if self._mode == "bar":
            self._stream.write("\r" + text)
        else:
            self._stream.write(text + "\n")
        self._stream.flush()

    def close(self) -> None:
        if self._mode == "bar":
            self._stream.write("\n")
            self._stream.flush()


def resolve_mode(mode: str, stream: TextIO) -> str:
    """--progress with auto resolved: a bar on a terminal, lines otherwise."""
    if mode == "auto":
        return "bar" if stream.isatty() else "lines"
    return mode


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s"


