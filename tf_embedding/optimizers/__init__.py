"""Embedding optimizers: SGD, Adagrad, AdagradMomentum, Adam, FTRL, and the TPU optimizers only
TF v1 named (ProximalAdagrad, Momentum, RMSProp, ProximalYogi; not public names of
`tf_embedding`, whose namespace mirrors TF's).

Each optimizer is described once (`catalogue.py`); its class here, its v1 parameter class
(`tf_embedding.feature_column`), its fused op and its slots follow from that description.
What the classes share is `base._Optimizer`.

* `catalogue.py`: every optimizer's description; `description.py`: the form of one.
* `accepted.py`: the values each argument's math accepts, declared in the descriptions.
* `classes.py`: the v2 classes, made from the descriptions; `base.py`: what they share.
* `serialization.py`: optimizers as JSON-ready dicts and back (Keras configs, `get_config`).
* `keras_translation.py`: Keras optimizers as embedding optimizers (`rule=`).
"""

from typing import Any

from tensorflow.python.tpu import tpu_embedding_v2_utils

from tf_embedding.optimizers import catalogue
from tf_embedding.optimizers import serialization
from tf_embedding.optimizers.base import (ClipValueType, LearningRate, SlotVariableCreationFn,
                                          _Optimizer)
from tf_embedding.optimizers.classes import make_class

SGD = make_class(catalogue.SGD)
Adagrad = make_class(catalogue.ADAGRAD)
AdagradMomentum = make_class(catalogue.ADAGRAD_MOMENTUM)
FTRL = make_class(catalogue.FTRL)
Adam = make_class(catalogue.ADAM)
ProximalAdagrad = make_class(catalogue.PROXIMAL_ADAGRAD)
Momentum = make_class(catalogue.MOMENTUM)
RMSProp = make_class(catalogue.RMS_PROP)
ProximalYogi = make_class(catalogue.PROXIMAL_YOGI)

# Every class, by name; the classes of `tf.tpu.experimental.embedding` whose objects
# tf_embedding accepts in place of its own (same constructor, argument for argument, and every
# argument kept as an attribute of the same name; the clipping range as `clip_gradient_min` /
# `_max`).
CLASSES = {cls.__name__: cls for cls in (SGD, Adagrad, AdagradMomentum, FTRL, Adam,
                                         ProximalAdagrad, Momentum, RMSProp, ProximalYogi)}
_STOCK_CLASSES = {name: cls for name, cls in CLASSES.items() if cls.description.public}


def is_embedding_optimizer(optimizer: Any) -> bool:
    """Whether `optimizer` speaks TF's slot protocol (ours and stock TF's embedding optimizers)."""
    return all(callable(getattr(optimizer, method, None))
               for method in ("_slot_names", "_slot_initializers", "_create_slots"))


def from_stock(optimizer: Any) -> _Optimizer:
    """tf_embedding's optimizer equal to a stock `tf.tpu.experimental.embedding` optimizer.

    Stock objects describe the TPU's update but cannot run it off a TPU; the returned object has
    the same class name, hyperparameters, slot initializers and `slot_variable_creation_fn`, and
    runs the fused update op. Other objects are returned unchanged.

    Raises:
      ValueError: another stock optimizer (`CustomOptimizer`, or a subclass of a stock class).
    """
    if not isinstance(optimizer,
                      tpu_embedding_v2_utils._Optimizer):  # pylint: disable=protected-access
        return optimizer
    ours = _STOCK_CLASSES.get(type(optimizer).__name__)
    if ours is None or type(optimizer) is not getattr(tpu_embedding_v2_utils, ours.__name__):
        raise ValueError(
            f"{type(optimizer).__name__} has no tf_embedding equivalent (CustomOptimizer runs "
            "only on SparseCore); pass one of tf.tpu.experimental.embedding's "
            f"{', '.join(sorted(_STOCK_CLASSES))} or tf_embedding's own.")
    arguments = serialization.constructor_arguments(optimizer, ours)
    return ours(**arguments)


__all__ = ["SGD", "Adagrad", "AdagradMomentum", "Adam", "FTRL", "ProximalAdagrad", "Momentum",
           "RMSProp", "ProximalYogi", "from_stock", "is_embedding_optimizer",
           "ClipValueType", "LearningRate",
           "SlotVariableCreationFn"]
