"""Input pipelines of the `tf-embedding` job: synthetic click logs, Criteo TSV, TFRecord.

Importing this package imports nothing heavy; each module pulls in TensorFlow itself, so the
command line can build its parser (and answer `--help`) without loading TensorFlow.
"""
