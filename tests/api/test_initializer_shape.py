"""An initializer whose value has another shape than its table is refused by name, by every
embedding object (the sharded one would otherwise slice its blocks' rows out of it and keep a
wrong table)."""

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding as emb

pytestmark = pytest.mark.unit

CLASSES = {
    "sharded": lambda features: emb.TPUEmbedding(features, emb.Adagrad(0.1)),
    "V0": lambda features: emb.TPUEmbeddingV0(features, emb.Adagrad(0.1)),
    "serving": lambda features: emb.TPUEmbeddingForServing(features, None),
}


def _build(kind: str, value) -> dict:
    table = emb.TableConfig(8, 2, name="video",
                            initializer=lambda shape, dtype=None: value)
    embedding = CLASSES[kind]({"a": emb.FeatureConfig(table=table)})
    if kind == "sharded":
        embedding.build({"a": tf.TensorShape([2])})
    else:
        embedding.build()
    return embedding.embedding_tables


@pytest.mark.parametrize("kind", sorted(CLASSES))
@pytest.mark.parametrize("shape", [(16, 2), (4, 2), (8, 3), (3, 3)])
def test_a_value_of_another_shape_names_the_table(kind, shape):
    with pytest.raises(ValueError, match=r"Table 'video': the initializer of variable 'video' "
                                         rf"gave a value of shape \({shape[0]}, {shape[1]}\), "
                                         r"not the variable's \(8, 2\)"):
        _build(kind, tf.ones(shape))


@pytest.mark.parametrize("kind", sorted(CLASSES))
def test_a_value_of_the_table_shape_is_the_table(kind):
    value = np.arange(16, dtype=np.float32).reshape(8, 2)
    (table,) = _build(kind, value).values()
    np.testing.assert_array_equal(tf.convert_to_tensor(table).numpy(), value)
