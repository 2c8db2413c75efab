"""Keras optimizers as embedding optimizers, by one of two rules (`rule=`).

What an embedding class or a Keras front end may be handed as an optimizer: an embedding
optimizer (tf_embedding's, or stock TF's, which becomes its tf_embedding equal), None, a name
('sgd', 'adagrad', 'adam', 'ftrl'), or an SGD, Adagrad, Adam or Ftrl optimizer of Keras 3
(`keras.optimizers`, which is `tf.keras.optimizers` in TF 2.21), of `tf_keras.optimizers` or of
`tf_keras.optimizers.legacy`. A Keras optimizer becomes the embedding optimizer of its rule
family (`keras_class` in `catalogue.py`) by one of two rules:

- `rule="tpu"` (the Keras layers' choice, as TFRS's `translate_keras_optimizer`): the Keras
  optimizer's hyperparameters, trained by the TPU's rule (no Adagrad epsilon, no Adam bias
  correction, lazy Adam). Settings the TPU rule cannot express must keep their defaults; the
  messages are TFRS's.
- `rule="keras"` (the mid-level classes' choice): the Keras update of a looked-up row reproduced
  exactly (up to float rounding): Adagrad's epsilon folded into the accumulator, Adam's bias
  correction in the learning rate, non-lazy Adam. Any setting that cannot be reproduced raises a
  ValueError naming it, so an optimizer is never swapped silently. How each maps, and why:
  docs/api_differences.md.

Either way the embedding optimizer reads the Keras optimizer's learning rate (variable, schedule
or callable) and step counter (`iterations`) each time it is applied. Embedding updates run in
the backward pass, before the Keras optimizer applies the dense gradients of the same step and
increments `iterations`, so they see the same step number Keras uses for that step.
"""

import dataclasses
import importlib
import warnings
from typing import Any, Callable, Dict, Literal, Optional, Tuple

import tensorflow as tf

from tf_embedding import optimizers
from tf_embedding.optimizers import catalogue
from tf_embedding.optimizers.base import _Optimizer

KerasRule = Literal["tpu", "keras"]

# The optimizers a Keras optimizer or a name may stand for: kind ('sgd', ...) -> Keras class
# name, and -> the embedding optimizer class of that rule family.
_KERAS_CLASSES = {description.keras_class.lower(): description.keras_class
                  for description in catalogue.DESCRIPTIONS if description.keras_class}
_EMBEDDING_CLASSES = {description.keras_class.lower(): optimizers.CLASSES[description.name]
                      for description in catalogue.DESCRIPTIONS if description.keras_class}


def _config(optimizer: Any) -> Dict[str, Any]:
    with warnings.catch_warnings():
        # Keras 3 warns that a lambda learning rate is unsafe to serialize; only the
        # hyperparameters are read from this config, never deserialized.
        warnings.simplefilter("ignore", UserWarning)
        return optimizer.get_config()


# ---------------------------------------------------------------------------------------------
# rule="keras": Keras' own update

# Why each Keras setting that the translation rejects cannot be reproduced.
_REASONS = {
    "clipnorm": "clips each gradient tensor by its norm; embedding optimizers only clip "
                "element-wise (`clipvalue`)",
    "global_clipnorm": "clips by the norm of all the model's gradients, which an embedding "
                       "update never sees together",
    "use_ema": "keeps a moving average of the weights; embedding optimizers keep none",
    "loss_scale_factor": "is divided out of the gradients inside the Keras optimizer, which "
                         "embedding updates bypass",
    "gradient_accumulation_steps": "applies gradients every N steps; embedding updates apply "
                                   "every step",
    "gradient_transformers": "are arbitrary gradient functions that cannot run inside the "
                             "fused embedding update",
    "momentum": "needs a momentum slot; embedding SGD has none",
    "amsgrad": "needs a maximum of past velocities; embedding Adam keeps none",
    "adaptive_epsilon": "scales epsilon by sqrt(1 - beta_2^t), which a fixed epsilon cannot "
                        "express",
    "weight_decay": "is scaled by the Keras learning rate, whereas the embedding kernel scales "
                    "it by its own learning rate, which carries Adam's emulated bias correction",
    "epsilon": "is added outside the square root by legacy Adagrad (lr*g/(sqrt(a)+epsilon)); "
               "embedding Adagrad has no epsilon, and legacy Adagrad replaces epsilon=0 by the "
               "Keras backend epsilon (set it to 0 with tf_keras.backend.set_epsilon(0), or use "
               "keras.optimizers.Adagrad, whose epsilon is folded into the accumulator)",
    "l2_shrinkage_regularization_strength": "has no counterpart in embedding FTRL",
}


def _class_path(optimizer: Any) -> str:
    cls = type(optimizer)
    return f"{cls.__module__}.{cls.__qualname__}"


def _cannot_translate(optimizer: Any, setting: str, value: Any) -> ValueError:
    return ValueError(
        f"Cannot translate {_class_path(optimizer)} into an embedding optimizer: "
        f"`{setting}={value!r}` {_REASONS[setting]}.")


def _positive(value: Any) -> bool:
    """Keras 3 and tf_keras ignore a clipping setting unless it is set and > 0."""
    return bool(value) and value > 0


def _is_set(value: Any) -> bool:
    """Legacy tf_keras applies a clipping setting whenever it is not None."""
    return value is not None


def _nonzero(value: Any) -> bool:
    return value != 0


def _supported_classes(module_path: str) -> Dict[type, str]:
    """The translatable classes of an optimizers module, mapped to their kind."""
    module = importlib.import_module(module_path)
    return {getattr(module, keras_class): kind for kind, keras_class in _KERAS_CLASSES.items()}


def _keras3_learning_rate(optimizer: Any) -> Callable[[], Any]:
    """Keras 3 evaluates a schedule at `iterations` (or calls a callable) on every read."""
    return lambda: optimizer.learning_rate


def _tf_keras_learning_rate(optimizer: Any) -> Callable[[], Any]:
    """tf_keras caches a schedule's value only when it applies gradients, so evaluate it here."""
    import tf_keras  # pylint: disable=g-import-not-at-top
    schedule_type = tf_keras.optimizers.schedules.LearningRateSchedule

    def learning_rate() -> Any:
        value = optimizer._learning_rate  # pylint: disable=protected-access
        if isinstance(value, schedule_type):
            return value(optimizer.iterations)
        return value

    return learning_rate


def _tf_keras_legacy_learning_rate(optimizer: Any) -> Callable[[], Any]:
    """Legacy optimizers fold schedules and the `decay` argument into `_decayed_lr`."""
    return lambda: optimizer._decayed_lr(tf.float32)  # pylint: disable=protected-access


@dataclasses.dataclass(frozen=True)
class _Flavour:
    """What differs between Keras 3, tf_keras and legacy tf_keras optimizers."""

    module_path: str
    learning_rate: Callable[[Any], Callable[[], Any]]
    # Settings that must be inactive, with the test for "active".
    rejected: Tuple[Tuple[str, Callable[[Any], bool]], ...]
    clipvalue_active: Callable[[Any], bool]
    adagrad_epsilon_inside_sqrt: bool


_FLAVOURS = (
    _Flavour(module_path="keras.optimizers", learning_rate=_keras3_learning_rate,
             rejected=(("clipnorm", _positive), ("global_clipnorm", _positive),
                       ("use_ema", bool), ("loss_scale_factor", _is_set),
                       ("gradient_accumulation_steps", bool)),
             clipvalue_active=_positive,
             adagrad_epsilon_inside_sqrt=True),
    _Flavour(module_path="tf_keras.optimizers",
             learning_rate=_tf_keras_learning_rate,
             rejected=(("clipnorm", _positive), ("global_clipnorm", _positive),
                       ("use_ema", bool)),
             clipvalue_active=_positive,
             adagrad_epsilon_inside_sqrt=True),
    _Flavour(module_path="tf_keras.optimizers.legacy",
             learning_rate=_tf_keras_legacy_learning_rate,
             rejected=(("clipnorm", _is_set), ("global_clipnorm", _is_set),
                       ("gradient_transformers", bool)),
             clipvalue_active=_is_set,
             adagrad_epsilon_inside_sqrt=False),
)


def _find_flavour(optimizer: Any) -> Tuple[_Flavour, str]:
    """The flavour and kind ('sgd', ...) of a supported Keras optimizer; exact classes only,
    since a subclass may change the update rule (keras AdamW subclasses Adam)."""
    package = type(optimizer).__module__.split(".", 1)[0]
    for flavour in _FLAVOURS:
        # Only a package the optimizer comes from is imported.
        if flavour.module_path.split(".", 1)[0] == package:
            kind = _supported_classes(flavour.module_path).get(type(optimizer))
            if kind is not None:
                return flavour, kind
    raise ValueError(
        f"{_class_path(optimizer)} is an unsupported optimizer class. Pass None, an optimizer "
        "of tf_embedding (SGD, Adagrad, AdagradMomentum, Adam, FTRL), one of "
        f"{sorted(_KERAS_CLASSES)}, or an SGD, Adagrad, Adam or Ftrl optimizer of "
        "keras.optimizers, tf_keras.optimizers or tf_keras.optimizers.legacy.")


@dataclasses.dataclass
class _Source:
    """A Keras optimizer being translated, with its configuration read once."""

    optimizer: Any
    flavour: _Flavour
    config: Dict[str, Any]

    def reject_if(self, setting: str, value: Any, active: Callable[[Any], bool]) -> None:
        """Raises when the Keras setting `setting`, whose value is `value`, is in effect."""
        if active(value):
            raise _cannot_translate(self.optimizer, setting, value)

    def common_arguments(self) -> Dict[str, Any]:
        """Clipping and decoupled weight decay, shared by every embedding optimizer."""
        for setting, active in self.flavour.rejected:
            self.reject_if(setting, getattr(self.optimizer, setting, None), active)
        clipvalue = self.config.get("clipvalue")
        weight_decay = self.config.get("weight_decay")  # legacy tf_keras has none
        return {
            "clipvalue": clipvalue if self.flavour.clipvalue_active(clipvalue) else None,
            # Keras decays `w -= w * weight_decay * learning_rate` before the update.
            "weight_decay_factor": weight_decay or None,
            "multiply_weight_decay_factor_by_learning_rate": True if weight_decay else None,
        }


def _translate_sgd(source: _Source, learning_rate: Callable[[], Any]) -> _Optimizer:
    # With momentum 0 every Keras SGD (Nesterov or not) is plain gradient descent.
    source.reject_if("momentum", source.config["momentum"], _nonzero)
    return optimizers.SGD(learning_rate=learning_rate, **source.common_arguments())


def _translate_adagrad(source: _Source, learning_rate: Callable[[], Any]) -> _Optimizer:
    epsilon = source.config["epsilon"]
    initial_accumulator_value = source.config["initial_accumulator_value"]
    if source.flavour.adagrad_epsilon_inside_sqrt:
        # Keras: a += g^2; w -= lr*g/sqrt(a + eps). With a' = a + eps (a'_0 = a_0 + eps) this is
        # a' += g^2; w -= lr*g/sqrt(a'), the embedding rule.
        initial_accumulator_value += epsilon
    else:
        source.reject_if("epsilon", epsilon, _nonzero)
    return optimizers.Adagrad(learning_rate=learning_rate,
                   initial_accumulator_value=initial_accumulator_value,
                   **source.common_arguments())


def _bias_corrected(learning_rate: Callable[[], Any], optimizer: Any, beta_1: float,
                    beta_2: float) -> Callable[[], tf.Tensor]:
    """Keras Adam's step size `lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)`, t = iterations + 1 of
    the Keras `optimizer`, computed as Keras computes it, so that Adam without bias correction
    matches Keras."""

    def corrected() -> tf.Tensor:
        step = tf.cast(optimizer.iterations + 1, tf.float32)
        beta_1_power = tf.pow(tf.constant(beta_1, tf.float32), step)
        beta_2_power = tf.pow(tf.constant(beta_2, tf.float32), step)
        return (tf.cast(learning_rate(), tf.float32) * tf.sqrt(1 - beta_2_power)
                / (1 - beta_1_power))

    return corrected


def _translate_adam(source: _Source, learning_rate: Callable[[], Any]) -> _Optimizer:
    config = source.config
    source.reject_if("amsgrad", config["amsgrad"], bool)
    source.reject_if("adaptive_epsilon", getattr(source.optimizer, "adaptive_epsilon", False),
                     bool)
    source.reject_if("weight_decay", config.get("weight_decay"), bool)
    return optimizers.Adam(
        learning_rate=_bias_corrected(learning_rate, source.optimizer, config["beta_1"],
                                      config["beta_2"]),
        beta_1=config["beta_1"],
        beta_2=config["beta_2"],
        epsilon=config["epsilon"],
        # Keras Adam decays the moments of every row each step, as non-lazy Adam does, and adds
        # epsilon outside the square root.
        lazy_adam=False,
        sum_inside_sqrt=False,
        **source.common_arguments())


def _translate_ftrl(source: _Source, learning_rate: Callable[[], Any]) -> _Optimizer:
    config = source.config
    source.reject_if("l2_shrinkage_regularization_strength",
                     config["l2_shrinkage_regularization_strength"], _nonzero)
    # Keras adds beta/(2*lr) to l2, which is how embedding FTRL uses beta; Keras allows a zero
    # initial accumulator, which embedding FTRL accepts with allow_zero_accumulator.
    return optimizers.FTRL(
        learning_rate=learning_rate,
        learning_rate_power=config["learning_rate_power"],
        l1_regularization_strength=config["l1_regularization_strength"],
        l2_regularization_strength=config["l2_regularization_strength"],
        beta=config["beta"],
        initial_accumulator_value=config["initial_accumulator_value"],
        allow_zero_accumulator=config["initial_accumulator_value"] == 0,
        **source.common_arguments())


_KERAS_RULE_TRANSLATORS: Dict[str, Callable[[_Source, Callable[[], Any]], _Optimizer]] = {
    "sgd": _translate_sgd, "adagrad": _translate_adagrad, "adam": _translate_adam,
    "ftrl": _translate_ftrl}


def keras_learning_rate(optimizer: Any) -> Callable[[], Any]:
    """A zero-argument callable reading the Keras `optimizer`'s current learning rate (its
    schedule at its `iterations`, its callable, or its variable) each time it is called.

    Raises:
      ValueError: `optimizer` is not an SGD, Adagrad, Adam or Ftrl optimizer of Keras 3,
        tf_keras or legacy tf_keras.
    """
    flavour, _ = _find_flavour(optimizer)
    return flavour.learning_rate(optimizer)




def _translate_by_keras_rule(optimizer: Any) -> _Optimizer:
    flavour, kind = _find_flavour(optimizer)
    source = _Source(optimizer, flavour, _config(optimizer))
    return _KERAS_RULE_TRANSLATORS[kind](source, flavour.learning_rate(optimizer))


# ---------------------------------------------------------------------------------------------
# rule="tpu": the TPU's update with the Keras hyperparameters (TFRS)

# Config entries that describe the optimizer object, not its update rule.
_NOT_SETTINGS = frozenset({"name", "jit_compile", "is_legacy_optimizer"})

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


def is_keras_optimizer(optimizer: Any) -> bool:
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


def has_callable_learning_rate(optimizer: Any) -> bool:
    """Whether a Keras optimizer was given a Python callable (not a schedule, not a number) as
    its learning rate: its config cannot hold it (Keras 3 stores the function's code, tf_keras
    its current value), so saving it would lose or fake it."""
    package = type(optimizer).__module__.split(".", 1)[0]
    raw = (optimizer._hyper["learning_rate"]  # pylint: disable=protected-access
           if hasattr(optimizer, "_hyper")
           else optimizer._learning_rate)  # pylint: disable=protected-access
    schedules = importlib.import_module(f"{package}.optimizers.schedules")
    return callable(raw) and not isinstance(raw, schedules.LearningRateSchedule)


def _translate_by_tpu_rule(optimizer: Any) -> _Optimizer:
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
    if not is_keras_optimizer(optimizer):
        raise ValueError(
            f"{class_name} is an unsupported optimizer class. Please pass a Keras optimizer.")
    if class_name not in _KERAS_CLASSES.values():
        raise ValueError(f"Keras optimizer {class_name} is unsupported for TPU Embedding.")
    embedding_class = _EMBEDDING_CLASSES[class_name.lower()]
    config = _config(optimizer)
    # The embedding optimizer's own arguments that Keras' config also has (Adam's betas and
    # epsilon, ...) are copied; the learning rate is read at every update.
    copied = ("learning_rate",) + tuple(
        argument.name for argument in embedding_class.description.arguments
        if argument.name in config)
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
    return embedding_class(learning_rate=keras_learning_rate(optimizer), **arguments)




# ---------------------------------------------------------------------------------------------
# The entry points

def translate_keras_optimizer(optimizer: Any, rule: KerasRule = "tpu") -> _Optimizer:
    """The embedding optimizer for Keras `optimizer`, by `rule` (module docstring).

    Args:
      optimizer: an SGD, Adagrad, Adam or Ftrl optimizer of Keras 3, tf_keras or tf_keras's
        legacy optimizers.
      rule: "tpu" (TFRS's translation: the Keras hyperparameters, the TPU's update) or "keras"
        (Keras' update, reproduced exactly).

    Returns:
      `SGD`, `Adagrad`, `Adam` or `FTRL` of tf_embedding, whose learning rate is read from
      `optimizer` at every update.

    Raises:
      ValueError: another Keras optimizer, not a Keras optimizer, or a setting the rule cannot
        express (gradient norm clipping, momentum, amsgrad, ...).
    """
    if rule == "tpu":
        return _translate_by_tpu_rule(optimizer)
    if rule == "keras":
        return _translate_by_keras_rule(optimizer)
    raise ValueError(f"Unknown rule {rule!r}; expected 'tpu' or 'keras'.")


def embedding_optimizer(optimizer: Any, rule: KerasRule) -> Optional[_Optimizer]:
    """An optimizer argument (a table's, or a Keras layer's) as an embedding optimizer, or None.

    Embedding optimizers of tf_embedding pass through, stock TF's become tf_embedding's equals;
    names give that optimizer with its default arguments; Keras optimizers are translated by
    `rule` (`translate_keras_optimizer`).
    """
    if optimizer is None:
        return None
    if optimizers.is_embedding_optimizer(optimizer):
        return optimizers.from_stock(optimizer)
    if isinstance(optimizer, str):
        if optimizer not in _EMBEDDING_CLASSES:
            raise ValueError(f"Unknown optimizer name '{optimizer}'. Please use one of 'sgd',"
                             "'adagrad', 'adam', or 'ftrl'")
        return _EMBEDDING_CLASSES[optimizer]()
    if rule == "tpu" and not is_keras_optimizer(optimizer):
        raise ValueError(
            f"Unknown optimizer type {type(optimizer)}. Please pass a string optimizer name, a "
            "subclass of keras optimizer or an instance of one of the optimizer parameter "
            "classes under tf.tpu.experimental.embedding.")
    return translate_keras_optimizer(optimizer, rule)
