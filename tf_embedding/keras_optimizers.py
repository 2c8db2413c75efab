"""Translation of Keras optimizers into embedding optimizers that apply the same update rule.

`translate_optimizer` accepts what an embedding class or the Keras layer may be handed as an
optimizer: an embedding optimizer, None, a name ('sgd', 'adagrad', 'adam', 'ftrl'), or an SGD,
Adagrad, Adam or Ftrl optimizer of Keras 3 (`keras.optimizers`, which is `tf.keras.optimizers` in
TF 2.21), of `tf_keras.optimizers` or of `tf_keras.optimizers.legacy`. The translation reproduces
the Keras update of a looked-up row exactly (up to float rounding); any setting that cannot be
reproduced raises a ValueError naming it, so an optimizer is never swapped silently. How each
optimizer maps, and why, is in docs/api_differences.md.

The embedding optimizer reads the Keras optimizer's learning rate (variable, schedule or callable)
and step counter (`iterations`) each time it is applied. Embedding updates run in the backward
pass, before the Keras optimizer applies the dense gradients of the same step and increments
`iterations`, so they see the same step number Keras uses for that step.
"""

import dataclasses
import importlib
import warnings
from typing import Any, Callable, Dict, Optional, Tuple

import tensorflow as tf

from tf_embedding.optimizers import FTRL, SGD, Adagrad, Adam, _Optimizer

_DEFAULT_OPTIMIZERS: Dict[str, Callable[[], _Optimizer]] = {
    "sgd": SGD, "adagrad": Adagrad, "adam": Adam, "ftrl": FTRL}

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
    return {module.SGD: "sgd", module.Adagrad: "adagrad", module.Adam: "adam",
            module.Ftrl: "ftrl"}


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
        f"{sorted(_DEFAULT_OPTIMIZERS)}, or an SGD, Adagrad, Adam or Ftrl optimizer of "
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
    return SGD(learning_rate=learning_rate, **source.common_arguments())


def _translate_adagrad(source: _Source, learning_rate: Callable[[], Any]) -> _Optimizer:
    epsilon = source.config["epsilon"]
    initial_accumulator_value = source.config["initial_accumulator_value"]
    if source.flavour.adagrad_epsilon_inside_sqrt:
        # Keras: a += g^2; w -= lr*g/sqrt(a + eps). With a' = a + eps (a'_0 = a_0 + eps) this is
        # a' += g^2; w -= lr*g/sqrt(a'), the embedding rule.
        initial_accumulator_value += epsilon
    else:
        source.reject_if("epsilon", epsilon, _nonzero)
    return Adagrad(learning_rate=learning_rate,
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
    return Adam(
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
    return FTRL(
        learning_rate=learning_rate,
        learning_rate_power=config["learning_rate_power"],
        l1_regularization_strength=config["l1_regularization_strength"],
        l2_regularization_strength=config["l2_regularization_strength"],
        beta=config["beta"],
        initial_accumulator_value=config["initial_accumulator_value"],
        allow_zero_accumulator=config["initial_accumulator_value"] == 0,
        **source.common_arguments())


_TRANSLATORS: Dict[str, Callable[[_Source, Callable[[], Any]], _Optimizer]] = {
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


def translate_optimizer(optimizer: Any) -> Optional[_Optimizer]:
    """Returns the embedding optimizer for `optimizer`, or raises ValueError.

    Embedding optimizers and None are returned as they are; a name gives that optimizer with its
    default arguments; a Keras optimizer gives the embedding optimizer with the same update rule,
    reading the Keras learning rate and step counter on every update.
    """
    if optimizer is None or isinstance(optimizer, _Optimizer):
        return optimizer
    if isinstance(optimizer, str):
        if optimizer not in _DEFAULT_OPTIMIZERS:
            raise ValueError(f"Unknown optimizer name {optimizer!r}. Expected one of "
                             f"{sorted(_DEFAULT_OPTIMIZERS)}.")
        return _DEFAULT_OPTIMIZERS[optimizer]()
    flavour, kind = _find_flavour(optimizer)
    with warnings.catch_warnings():
        # Keras 3 warns that a lambda learning rate is unsafe to serialize; only the
        # hyperparameters are read from this config, never deserialized.
        warnings.simplefilter("ignore", UserWarning)
        config = optimizer.get_config()
    source = _Source(optimizer, flavour, config)
    return _TRANSLATORS[kind](source, flavour.learning_rate(optimizer))
