"""`tf-embedding generate`: synthetic examples written as TSV or TFRecord."""

import math

import tensorflow as tf

from tf_embedding.job.data import criteo, synthetic, tfrecord
from tf_embedding.job.data.spec import DataSpec
from tf_embedding.job.options import GenerateOptions


def write(options: GenerateOptions, spec: DataSpec) -> int:
    """Writes whole batches of the chosen split; returns the number of examples."""
    if options.data != "synthetic":
        raise ValueError("generate writes synthetic data; --data must be synthetic")
    log = synthetic.SyntheticClickLog(spec, options.seed)
    split = synthetic.TRAIN if options.split == "train" else synthetic.TEST
    batches = log.dataset(split, options.batch_size, 0,
                          math.ceil(options.examples / options.batch_size))
    count = 0
    if options.format == "tsv":
        with open(options.output, "w") as out:
            for batch in batches:
                out.writelines(line + "\n" for line in criteo.format_lines(batch, spec))
                count += int(tf.size(batch["label"]))
    else:
        with tf.io.TFRecordWriter(options.output) as out:
            for batch in batches:
                for example in tfrecord.to_examples(batch, spec):
                    out.write(example.SerializeToString())
                count += int(tf.size(batch["label"]))
    return count
