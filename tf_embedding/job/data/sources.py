"""Picks the reader for a run's options: the training stream from a step, the held-out set."""

import math

import tensorflow as tf

from tf_embedding.job.data import common, criteo, synthetic, tfrecord
from tf_embedding.job.data.spec import DataSpec
from tf_embedding.job.options import DataOptions


class Source:
    """Batches for the options' data kind; synthetic tables are drawn once and shared."""

    def __init__(self, options: DataOptions, spec: DataSpec):
        self.options = options
        self.spec = spec
        if options.data == "synthetic":
            self._log = synthetic.SyntheticClickLog(spec, options.seed)
        else:
            self._reader = criteo.read_tsv if options.data == "tsv" else tfrecord.read_tfrecord
            self._train_files = common.expand(options.train_input, "--train-input")
            self._eval_files = common.expand(options.eval_input, "--eval-input")
            if not any(tf.io.gfile.stat(f).length for f in self._train_files):
                raise ValueError("the training input holds no examples (empty files)")

    @property
    def is_synthetic(self) -> bool:
        return self.options.data == "synthetic"

    def train(self, start_step: int = 0) -> tf.data.Dataset:
        """The training batches from `start_step` on, forever."""
        if self.is_synthetic:
            return self._log.dataset(synthetic.TRAIN, self.options.batch_size, start_step)
        holdout = 0 if self._eval_files else self.options.holdout_every
        return self._reader(self._train_files, self.spec, self.options.batch_size, start_step,
                            holdout, "train")

    def eval(self, max_examples: int) -> tf.data.Dataset:
        """Held-out batches: at most max_examples rounded up to whole batches (0: all)."""
        batch_size = self.options.batch_size
        batches = math.ceil(max_examples / batch_size)
        if self.is_synthetic:
            if max_examples <= 0:
                raise ValueError("synthetic data is endless: give a positive --eval-examples")
            return self._log.dataset(synthetic.TEST, batch_size, 0, batches)
        if self._eval_files:
            dataset = self._reader(self._eval_files, self.spec, batch_size, 0, 0, "eval")
        elif self.options.holdout_every > 0:
            dataset = self._reader(self._train_files, self.spec, batch_size, 0,
                                   self.options.holdout_every, "eval")
        else:
            raise ValueError("no held-out data: give --eval-input or a positive "
                             "--holdout-every")
        return dataset.take(batches) if max_examples > 0 else dataset
