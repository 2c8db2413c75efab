"""TensorBoard summaries of `tf-embedding train`, under MODEL_DIR/tensorboard (docs/main_job.md,
"TensorBoard"): the run `train` every --summary-every steps, the run `eval` once, at the last
step. Only the process that writes the run's files writes them.

`train` holds, from this module: `examples_per_second` (over the steps since the last write),
`learning_rate/dense` and `learning_rate/embedding`, `lookups_per_example/TABLE` (each table's
ids over the examples since the last write, every feature of the table together) and
`dynamic/TABLE/COUNT` for each dynamic table's counts (`TPUEmbedding.dynamic_statistics`); the
custom loop adds its running `loss` and `auc` (the progress display's); under
`--embedding-api keras`, Keras' own TensorBoard callback writes the loss and AUC
(`batch_loss`, `batch_auc`, `epoch_*`) into the same run. `eval` holds the evaluation's
metrics.json numbers (`auc`, `log_loss`, ...).
"""

import math
import os
import time
from typing import Callable, Mapping

import keras
import numpy as np
import tensorflow as tf

from tf_embedding.job.data.spec import DataSpec


def summary_dir(model_dir: str) -> str:
    """Where a run's TensorBoard runs go (`tensorboard --logdir` takes it)."""
    return os.path.join(model_dir, "tensorboard")


def table_lookups(spec: DataSpec, ids: Mapping[str, tf.RaggedTensor]) -> tf.Tensor:
    """[tables] int64 in `spec.tables`' order: each table's ids in a batch's ragged ids (a
    spec's every table has a feature)."""
    counts = {table.name: [] for table in spec.tables}
    for feature in spec.features:
        counts[feature.table].append(tf.size(ids[feature.name].flat_values, out_type=tf.int64))
    return tf.stack([tf.add_n(counts[table.name]) for table in spec.tables])


def lookups_counter(spec: DataSpec) -> tf.Variable:
    """The run's count of training lookups per table (`table_lookups` summed over the steps);
    not checkpointed: the summaries write its differences."""
    return tf.Variable(tf.zeros([len(spec.tables)], tf.int64), trainable=False,
                       name="table_lookups")


class TrainingSummaries:
    """Writes the `train` run every `every` steps and the `eval` run once (module docstring).

    `scalars()` gives the writer's caller-specific numbers at a write (the custom loop's
    running loss and AUC; nothing under Keras); `learning_rates()` the two learning rates;
    `dynamic_statistics()` each dynamic table's counts."""

    def __init__(self, model_dir: str, every: int, spec: DataSpec, lookups: tf.Variable,
                 learning_rates: Callable[[], dict[str, float]],
                 dynamic_statistics: Callable[[], dict[str, dict[str, int]]],
                 scalars: Callable[[], dict[str, float]] = dict):
        self.every = every
        self._tables = [table.name for table in spec.tables]
        self._lookups = lookups
        self._learning_rates = learning_rates
        self._dynamic_statistics = dynamic_statistics
        self._scalars = scalars
        self._directory = summary_dir(model_dir)
        self._writers: dict[str, tf.summary.SummaryWriter] = {}
        # (step, examples, time, lookups) at the last write, or at the first call.
        self._last: tuple[int, int, float, np.ndarray] | None = None

    def _writer(self, run: str) -> tf.summary.SummaryWriter:
        if run not in self._writers:
            self._writers[run] = tf.summary.create_file_writer(
                os.path.join(self._directory, run))
        return self._writers[run]

    def after_step(self, step: int, examples: int | Callable[[], int],
                   force: bool = False) -> None:
        """Records that `step` is done with `examples` examples so far (a count, or what reads
        it); writes the `train` run when a multiple of `every` was passed since its last write
        (or `force`). The first call only starts the clock: its steps include tracing the step
        function. Other calls read nothing (no variable) unless they write."""
        if not self.every:
            return
        if self._last is not None:
            last_step, last_examples, last_time, last_lookups = self._last
            # At the multiples of `every` (the steps Keras' callback writes at too).
            if step == last_step or (step // self.every == last_step // self.every
                                     and not force):
                return
        now, lookups = time.monotonic(), self._lookups.numpy()
        examples = examples() if callable(examples) else examples
        if self._last is None:
            self._last = (step, examples, now, lookups)
            return
        new_examples = examples - last_examples
        values = dict(self._scalars())
        values["examples_per_second"] = new_examples / max(now - last_time, 1e-9)
        values.update({f"learning_rate/{name}": rate
                       for name, rate in self._learning_rates().items()})
        for table, count in zip(self._tables, lookups - last_lookups):
            values[f"lookups_per_example/{table}"] = (int(count) / new_examples if new_examples
                                                      else math.nan)
        for table, counts in self._dynamic_statistics().items():
            values.update({f"dynamic/{table}/{name}": value for name, value in counts.items()
                           if name != "step"})
        self._write("train", step, values)
        self._last = (step, examples, now, lookups)

    def evaluation(self, step: int, metrics: Mapping[str, object]) -> None:
        """Writes the evaluation's numeric metrics as the `eval` run at `step`."""
        if self.every:
            self._write("eval", step, {name: value for name, value in metrics.items()
                                       if isinstance(value, (int, float))})

    def _write(self, run: str, step: int, values: Mapping[str, float]) -> None:
        writer = self._writer(run)
        with writer.as_default(step=step):
            for name, value in values.items():
                tf.summary.scalar(name, float(value))
        writer.flush()

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()


def keras_callbacks(model_dir: str, every: int, first_step: int) -> list[keras.callbacks.Callback]:
    """For `model.fit`: Keras' TensorBoard callback, writing the loss and AUC into the `train` run
    every `every` steps at the run's step numbers (none when `every` is 0)."""
    if not every:
        return []
    return [_RunTensorBoard(first_step, log_dir=summary_dir(model_dir), update_freq=every,
                            write_graph=False, profile_batch=0)]


class _RunTensorBoard(keras.callbacks.TensorBoard):
    """Keras' TensorBoard callback numbering the batches by the run's step. Keras numbers a
    `fit`'s batches from 0 (its `_global_train_batch`), so a resumed run would write over the
    first run's steps; the job's one epoch per `fit` is written at the step it ends at."""

    def __init__(self, first_step: int, **kwargs):
        super().__init__(**kwargs)
        self._first_step = first_step

    def on_train_begin(self, logs: dict | None = None) -> None:
        super().on_train_begin(logs)
        self._global_train_batch = self._first_step

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        del epoch
        super().on_epoch_end(self._global_train_batch, logs)
