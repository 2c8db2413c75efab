"""The Keras layer of tf_embedding: TensorFlow Recommenders' `TPUEmbedding`, for Keras 3 and
tf_keras, trained with the TPU's embedding optimizers on any device (docs/keras.md)."""

from tf_embedding import _loader
from tf_embedding.keras.layer import TPUEmbedding
from tf_embedding.optimizers.keras_translation import translate_keras_optimizer

_loader.load_ops()

__all__ = ["TPUEmbedding", "translate_keras_optimizer"]
