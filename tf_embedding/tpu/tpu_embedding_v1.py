"""`tensorflow.python.tpu.tpu_embedding_v1`'s names: `TPUEmbeddingV0`, replicated tables."""

from tf_embedding.replicated import TPUEmbeddingV0

__all__ = ["TPUEmbeddingV0"]
