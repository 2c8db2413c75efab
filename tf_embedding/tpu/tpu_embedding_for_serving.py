"""`tensorflow.python.tpu.tpu_embedding_for_serving`'s names: serving with stock TF ops."""

from tf_embedding.for_serving import TPUEmbeddingForServing
from tf_embedding.for_serving import serving_embedding_lookup as cpu_embedding_lookup

__all__ = ["TPUEmbeddingForServing", "cpu_embedding_lookup"]
