"""`tf-embedding predict`: scores files with an exported SavedModel.

Needs TensorFlow and the export only: the SavedModel parses and hashes records itself with
stock ops, so this module never loads tf_embedding's op library.
"""

import math

import numpy as np
import tensorflow as tf

from tf_embedding.job.data import common
from tf_embedding.job.options import PredictOptions


def _score_one_by_one(signature: tf.types.experimental.ConcreteFunction, argument: str,
                      records: tf.Tensor) -> np.ndarray:
    """Scores records separately, so a record the model cannot parse only costs itself."""
    scores = np.full([int(tf.size(records))], np.nan, np.float32)
    for i, record in enumerate(records):
        try:
            scores[i] = signature(**{argument: record[None]})["probability"].numpy()[0]
        except tf.errors.InvalidArgumentError:
            pass
    return scores


def predict(options: PredictOptions) -> tuple[int, int]:
    """Writes one probability per input record to options.output; returns (records, malformed)."""
    files = common.expand(options.input, "--input")
    loaded = tf.saved_model.load(options.model)
    if options.format == "tsv":
        signature, argument = loaded.signatures["serve_tsv"], "lines"
        records = tf.data.TextLineDataset(files)
    else:
        signature, argument = loaded.signatures["serving_default"], "examples"
        records = tf.data.TFRecordDataset(files)
    count = malformed = 0
    with open(options.output, "w") as out:
        for batch in records.batch(options.batch_size).prefetch(2):
            try:
                scores = signature(**{argument: batch})["probability"].numpy()
            except tf.errors.InvalidArgumentError:
                scores = _score_one_by_one(signature, argument, batch)
            count += len(scores)
            malformed += int(np.isnan(scores).sum())
            out.writelines(f"{s:.9g}\n" if not math.isnan(s) else "nan\n" for s in scores)
    return count, malformed
