"""keras-rs's `DistributedEmbedding` on tf_embedding's engine: each table trained by its own
optimizer the TPU way, on any device (docs/keras_rs.md). Needs the `keras-rs` extra.

* `layer`: the layer, `DistributedEmbedding`.
* `translation`: keras-rs's configurations as the engine's (tables, features, optimizers, table
  stacking; `table_optimizer`).
* `inputs`: keras-rs's input kinds as the engine's, every feature a rank-2 ragged batch.
* `saving`: what keras-rs's own config of the layer needs from tf_embedding.
"""

try:
    import keras_rs as _keras_rs  # pylint: disable=unused-import
except ImportError as error:
    raise ImportError(
        "tf_embedding.keras_rs needs keras-rs 0.4: pip install --no-deps 'keras-rs==0.4.0' "
        "(or the extra: pip install --no-deps 'tf_embedding[keras-rs]' after TensorFlow, so "
        "pip does not pull a second TensorFlow).") from error

from tf_embedding import _loader
from tf_embedding.keras_rs.layer import DistributedEmbedding
from tf_embedding.keras_rs.translation import table_optimizer

_loader.load_ops()

__all__ = ["DistributedEmbedding", "table_optimizer"]
