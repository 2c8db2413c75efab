"""The Keras layer of tf_embedding: TensorFlow Recommenders' `TPUEmbedding`, for Keras 3 and
tf_keras, trained with the TPU's embedding optimizers on any device (docs/keras.md).

* `layer`: the layer, `TPUEmbedding`.
* `layer_config`: what its `get_config` stores and `from_config` reads back.
* `weights_store`: Keras saving of what Keras cannot see (tables, slots, counters).
* `export`: what the layers look up with while `tf.saved_model.save` traces them (stock TF ops).
"""

from tf_embedding import _loader
from tf_embedding.keras.layer import TPUEmbedding
from tf_embedding.optimizers.keras_translation import translate_keras_optimizer

_loader.load_ops()

__all__ = ["TPUEmbedding", "translate_keras_optimizer"]
