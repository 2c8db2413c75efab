"""The Keras layer's optimizer handling: TFRS's `translate_keras_optimizer` and the
normalisation of the layer's `optimizer` argument, with TFRS's messages.

A Keras SGD, Adagrad, Adam or Ftrl optimizer becomes the embedding optimizer of the same name
with the Keras optimizer's hyperparameters, trained by the TPU's rule (no Adagrad epsilon, no Adam
bias correction), as TFRS does. Unlike TFRS, optimizers of Keras 3 and of tf_keras (new and
legacy) are accepted, and the learning rate is read from the Keras optimizer at every update, so
schedules, callables and assignments to its learning rate all carry over. Settings the TPU rule
cannot express must keep their defaults.

(Passing a Keras optimizer to the mid-level classes instead reproduces the Keras rule itself:
`tf_embedding.keras_optimizers.translate_optimizer`.)
"""

import importlib
import warnings
from typing import Any, Callable, Dict, Tuple

from tf_embedding import keras_optimizers
from tf_embedding import optimizers
from tf_embedding import tables

# Keras class name -> (embedding optimizer class, hyperparameters copied from get_config()).
_TRANSLATABLE: Dict[str, Tuple[type, Tuple[str, ...]]] = {
    "Adam": (optimizers.Adam, ("learning_rate", "beta_1", "beta_2", "epsilon")),
    "Adagrad": (optimizers.Adagrad, ("learning_rate", "initial_accumulator_value")),
    "Ftrl": (optimizers.FTRL, ("learning_rate", "learning_rate_power",
                               "l1_regularization_strength", "l2_regularization_strength",
                               "beta", "initial_accumulator_value")),
    "SGD": (optimizers.SGD, ("learning_rate",)),
}

# Config entries that describe the optimizer object, not its update rule.
_NOT_SETTINGS = frozenset({"name", "jit_compile", "is_legacy_optimizer"})

_NAMED_OPTIMIZERS: Dict[str, Callable[[], Any]] = {
    "sgd": optimizers.SGD, "adagrad": optimizers.Adagrad, "adam": optimizers.Adam,
    "ftrl": optimizers.FTRL}

# The base classes of Keras optimizers, by the package that defines them.
_KERAS_OPTIMIZER_BASES = {
    "keras": ("keras.optimizers", ("Optimizer",)),
    "tf_keras": ("tf_keras.optimizers", ("Optimizer", "legacy.Optimizer")),
}


def _unsupported_parameter(name: str) -> ValueError:
    return ValueError(
        f"Optimizer parameter {name} is unsupported for TPU embeddings. Please construct a new "
        "optimizer for embedding if you wish to use this setting for model training. Note if "
        "you are using a dynamic learning rate schedule, the use of a new embedding specific "
        "optimizer will not automatically carry over your learning rate schedule. The learning "
        "rate will stay the same as the learning rate when the embedding layer was first "
        "defined (which is probably not the intended behavior).")


def _is_keras_optimizer(optimizer: Any) -> bool:
    """Whether `optimizer` is an optimizer of Keras 3 or tf_keras (new or legacy); only the
    package it comes from is imported."""
    package = type(optimizer).__module__.split(".", 1)[0]
    if package not in _KERAS_OPTIMIZER_BASES:
        return False
    module_path, base_names = _KERAS_OPTIMIZER_BASES[package]
    module = importlib.import_module(module_path)
    for base_name in base_names:
        base = module
        for part in base_name.split("."):
            base = getattr(base, part)
        if isinstance(optimizer, base):
            return True
    return False


def _config(optimizer: Any) -> Dict[str, Any]:
    with warnings.catch_warnings():
        # Keras 3 warns that a lambda learning rate is unsafe to serialize; only the
        # hyperparameters are read from this config, never deserialized.
        warnings.simplefilter("ignore", UserWarning)
        return optimizer.get_config()


def translate_keras_optimizer(optimizer: Any) -> optimizers._Optimizer:
    """The embedding optimizer with the hyperparameters of Keras `optimizer` (TFRS's function).

    Args:
      optimizer: an SGD, Adagrad, Adam or Ftrl optimizer of Keras 3 (`keras.optimizers`, which
        is `tf.keras.optimizers` in TF 2.21), tf_keras or tf_keras's legacy optimizers.

    Returns:
      `SGD`, `Adagrad`, `Adam` or `FTRL` of tf_embedding, whose learning rate is read from
      `optimizer` at every update.

    Raises:
      ValueError: another Keras optimizer, not a Keras optimizer, or a setting the embedding
        optimizer cannot express (gradient norm clipping, momentum, amsgrad, weight decay, ...)
        that differs from its default.
    """
    class_name = type(optimizer).__name__
    if not _is_keras_optimizer(optimizer):
        raise ValueError(
            f"{class_name} is an unsupported optimizer class. Please pass a Keras optimizer.")
    if class_name not in _TRANSLATABLE:
        raise ValueError(f"Keras optimizer {class_name} is unsupported for TPU Embedding.")
    embedding_class, copied = _TRANSLATABLE[class_name]
    config = _config(optimizer)
    for clip in ("clipnorm", "clipvalue"):
        if getattr(optimizer, clip, None) is not None:
            raise _unsupported_parameter(clip)
    # Every other setting must be what the same class has with only the copied ones.
    reference = _config(type(optimizer)(**{name: config[name] for name in copied
                                           if name != "learning_rate"}))
    for name, value in config.items():
        if name in copied or name in _NOT_SETTINGS:
            continue
        if reference.get(name) != value:
            raise _unsupported_parameter(name)
    arguments = {name: config[name] for name in copied if name != "learning_rate"}
    return embedding_class(learning_rate=keras_optimizers.keras_learning_rate(optimizer),
                           **arguments)


def normalize_optimizer(optimizer: Any) -> Any:
    """The layer's `optimizer` argument (or a table's) as an embedding optimizer, or None.

    Embedding optimizers of tf_embedding pass through, stock TF's become tf_embedding's equals;
    names give the default optimizer; Keras optimizers are translated
    (`translate_keras_optimizer`).
    """
    if optimizer is None:
        return None
    if tables.is_embedding_optimizer(optimizer):
        return optimizers.from_stock(optimizer)
    if isinstance(optimizer, str):
        if optimizer not in _NAMED_OPTIMIZERS:
            raise ValueError(f"Unknown optimizer name '{optimizer}'. Please use one of 'sgd',"
                             "'adagrad', 'adam', or 'ftrl'")
        return _NAMED_OPTIMIZERS[optimizer]()
    if _is_keras_optimizer(optimizer):
        return translate_keras_optimizer(optimizer)
    raise ValueError(
        f"Unknown optimizer type {type(optimizer)}. Please pass a string optimizer name, a "
        "subclass of keras optimizer or an instance of one of the optimizer parameter classes "
        "under tf.tpu.experimental.embedding.")
