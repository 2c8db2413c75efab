"""`tensorflow.python.tpu.tpu_embedding_v2`'s names: the sharded `TPUEmbedding` engine.

`TPUEmbeddingVariable` is TF's own class (a TPU table's copy in host memory), re-exported so that
`isinstance` checks written for TPUs run. tf_embedding's tables are never instances of it: they
are `ShardedVariable`s of row blocks, whose `numpy()` and `read_value()` give the whole table.
"""

from tensorflow.python.tpu.tpu_embedding_v2 import TPUEmbeddingVariable

from tf_embedding.sharded.tpu_embedding import TPUEmbedding

__all__ = ["TPUEmbedding", "TPUEmbeddingVariable"]
