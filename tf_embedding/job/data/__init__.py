"""Input pipelines of the `tf-embedding` job: synthetic click logs, Criteo TSV, TFRecord.

Importing this package imports nothing heavy; each module pulls in TensorFlow itself, so the
command line can build its parser (and answer `--help`) without loading TensorFlow.

* `spec`: a run's data layout (tables, features, dense inputs), as plain Python.
* `sources`: picks the reader for a run's options (the training stream from a step, the held-out
  set).
* `common`: what every reader shares (batch layout, file lists, id hashing, row filtering, the
  windowed reading pipeline).
* `synthetic`: a synthetic click log with a planted model; `criteo`: Criteo-format TSV;
  `tfrecord`: TFRecord files of `tf.train.Example`.
* `input_ops`: typed wrappers of the job's own ops, which those readers run (the synthetic
  log's features, the TSV decoder).
* `generate`: `tf-embedding generate`, synthetic examples written as TSV or TFRecord.
"""
