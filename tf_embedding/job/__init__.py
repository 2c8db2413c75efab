"""The `tf-embedding` command (train, predict, stats, generate) and its input pipelines.

It uses the library (`tf_embedding`) as any user would; nothing in the library imports it.
"""
