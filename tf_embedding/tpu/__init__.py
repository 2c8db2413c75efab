"""TensorFlow's TPU-embedding module layout (`tensorflow.python.tpu`), mirrored by tf_embedding.

Code written against TF's private module paths moves by changing the package of its imports:

    from tensorflow.python.tpu import tpu_embedding_v2        # before
    from tf_embedding.tpu import tpu_embedding_v2             # after

Each module here names tf_embedding's class or function for every public name of TF's module
of the same name (docs/api_differences.md, "TF's module layout"). They hold no code of their own.

* `tpu_embedding_v2`: the sharded `TPUEmbedding`.
* `tpu_embedding_v2_utils`: the configs and the embedding optimizers.
* `tpu_embedding_for_serving`: `TPUEmbeddingForServing` and `cpu_embedding_lookup`.
* `tpu_embedding_v1`: `TPUEmbeddingV0`, replicated tables.
"""
