"""Embedding optimizers: SGD, Adagrad, AdagradMomentum, Adam, FTRL, and the TPU optimizers only
TF v1 named (ProximalAdagrad, Momentum, RMSProp, ProximalYogi; not public names of tf_embedding).

Arguments, defaults, slot names, slot initial values, validation and equality are those of
`tf.tpu.experimental.embedding` in TensorFlow 2.21, so checkpoints and configs carry over. Each
class states its hyperparameters, its validation and its `_description`, the fused update op
that applies it; what they all share (common arguments, TF's slot protocol, the op's attrs) is
`tf_embedding.optimizer_base._Optimizer`.

Deviations from TensorFlow (bug fixes) are listed in docs/api_differences.md.
"""

import inspect
from typing import Any, List, Optional

from tensorflow.python.ops import init_ops_v2
from tensorflow.python.tpu import tpu_embedding_v2_utils

from tf_embedding.optimizer_base import (ClipValueType, LearningRate, SlotVariableCreationFn,
                                         _constant_slot_initializer, _Description, _Optimizer)


def _check_initial_accumulator_value(value: float, allow_zero: bool = False) -> None:
    """Adagrad/FTRL accumulators start at this value; it is a divisor under a power, so it must be
    positive, or non-negative when the optimizer handles zero accumulators."""
    if allow_zero:
        if value < 0:
            raise ValueError(
                "Argument `initial_accumulator_value` must be a non-negative float when "
                f"`allow_zero_accumulator` is True. Received: {value}")
    elif value <= 0:
        raise ValueError(
            f"Argument `initial_accumulator_value` must be a positive float. "
            f"Received: {value}")


class SGD(_Optimizer):
    """Stochastic gradient descent: `w -= lr * g`. No slots."""

    _description = _Description("TfeSparseApplySgd")

    def __init__(
        self,
        learning_rate: LearningRate = 0.01,
        use_gradient_accumulation: bool = True,
        clip_weight_min: Optional[float] = None,
        clip_weight_max: Optional[float] = None,
        weight_decay_factor: Optional[float] = None,
        multiply_weight_decay_factor_by_learning_rate: Optional[bool] = None,
        clipvalue: Optional[ClipValueType] = None,
        low_dimensional_packing_status: bool = False,
    ):
        """Arguments as in `tf.tpu.experimental.embedding.SGD` (no `slot_variable_creation_fn`:
        SGD has no slots)."""
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clipvalue,
            None,
            low_dimensional_packing_status,
        )


class Adagrad(_Optimizer):
    """Adagrad without epsilon: `a += g^2; w -= lr * g / sqrt(a)`. Slot `accumulators`."""

    _description = _Description("TfeSparseApplyAdagrad", slot_names=("accumulators",))

    def __init__(
        self,
        learning_rate: LearningRate = 0.001,
        initial_accumulator_value: float = 0.1,
        use_gradient_accumulation: bool = True,
        clip_weight_min: Optional[float] = None,
        clip_weight_max: Optional[float] = None,
        weight_decay_factor: Optional[float] = None,
        multiply_weight_decay_factor_by_learning_rate: Optional[bool] = None,
        slot_variable_creation_fn: Optional[SlotVariableCreationFn] = None,
        clipvalue: Optional[ClipValueType] = None,
        low_dimensional_packing_status: bool = False,
    ):
        """Arguments as in `tf.tpu.experimental.embedding.Adagrad`."""
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clipvalue,
            slot_variable_creation_fn,
            low_dimensional_packing_status,
        )
        _check_initial_accumulator_value(initial_accumulator_value)
        self.initial_accumulator_value = initial_accumulator_value

    def _slot_initializers(self) -> List[init_ops_v2.Initializer]:
        return [_constant_slot_initializer(self.initial_accumulator_value)]


class AdagradMomentum(_Optimizer):
    """Adagrad with momentum (and optional Nesterov, decaying accumulator, general exponent).

    Slots `accumulators` and `momenta`, both starting at 0.
    """

    _description = _Description(
        "TfeSparseApplyAdagradMomentum", slot_names=("accumulators", "momenta"),
        hyperparameters=(("momentum", float), ("use_nesterov", bool), ("exponent", float),
                         ("beta2", float), ("epsilon", float)))

    def __init__(
        self,
        learning_rate: LearningRate = 0.001,
        momentum: float = 0.0,
        use_nesterov: bool = False,
        exponent: float = 2,
        beta2: float = 1,
        epsilon: float = 1e-10,
        use_gradient_accumulation: bool = True,
        clip_weight_min: Optional[float] = None,
        clip_weight_max: Optional[float] = None,
        weight_decay_factor: Optional[float] = None,
        multiply_weight_decay_factor_by_learning_rate: Optional[bool] = None,
        slot_variable_creation_fn: Optional[SlotVariableCreationFn] = None,
        clipvalue: Optional[ClipValueType] = None,
        low_dimensional_packing_status: bool = False,
    ):
        """Arguments as in `tf.tpu.experimental.embedding.AdagradMomentum`."""
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clipvalue,
            slot_variable_creation_fn,
            low_dimensional_packing_status,
        )
        if epsilon <= 0:
            raise ValueError("Adagrad momentum: epsilon must be positive")
        if exponent <= 0:
            raise ValueError("Adagrad momentum: Precondition exponent must >0")
        self.momentum = momentum
        self.use_nesterov = use_nesterov
        self.exponent = exponent
        self.beta2 = beta2
        self.epsilon = epsilon


class FTRL(_Optimizer):
    """FTRL-Proximal (McMahan et al. 2013, Algorithm 1). Slots `accumulators`, `linears`."""

    _description = _Description(
        "TfeSparseApplyFtrl", slot_names=("accumulators", "linears"),
        hyperparameters=(("learning_rate_power", float), ("l1_regularization_strength", float),
                         ("l2_regularization_strength", float), ("beta", float),
                         ("multiply_linear_by_learning_rate", bool),
                         ("allow_zero_accumulator", bool)))

    def __init__(
        self,
        learning_rate: LearningRate = 0.001,
        learning_rate_power: float = -0.5,
        l1_regularization_strength: float = 0.0,
        l2_regularization_strength: float = 0.0,
        beta: float = 0.0,
        initial_accumulator_value: float = 0.1,
        use_gradient_accumulation: bool = True,
        clip_weight_min: Optional[float] = None,
        clip_weight_max: Optional[float] = None,
        weight_decay_factor: Optional[float] = None,
        multiply_weight_decay_factor_by_learning_rate: Optional[bool] = None,
        slot_variable_creation_fn: Optional[SlotVariableCreationFn] = None,
        clipvalue: Optional[ClipValueType] = None,
        multiply_linear_by_learning_rate: bool = False,
        allow_zero_accumulator: bool = False,
        low_dimensional_packing_status: bool = False,
    ):
        """Arguments as in `tf.tpu.experimental.embedding.FTRL`.

        Unlike TF 2.21, `initial_accumulator_value=0` is accepted when `allow_zero_accumulator`
        is True, as TF's own docstring promises.
        """
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clipvalue,
            slot_variable_creation_fn,
            low_dimensional_packing_status,
        )
        _check_initial_accumulator_value(initial_accumulator_value,
                                         allow_zero=allow_zero_accumulator)
        self.initial_accumulator_value = initial_accumulator_value
        self.learning_rate_power = learning_rate_power
        self.l1_regularization_strength = l1_regularization_strength
        self.l2_regularization_strength = l2_regularization_strength
        self.beta = beta
        self.multiply_linear_by_learning_rate = multiply_linear_by_learning_rate
        self.allow_zero_accumulator = allow_zero_accumulator

    def _slot_initializers(self) -> List[init_ops_v2.Initializer]:
        return [_constant_slot_initializer(self.initial_accumulator_value),
                _constant_slot_initializer()]


class Adam(_Optimizer):
    """Adam without bias correction (emulate it with a dynamic learning rate). Slots `momenta`,
    `velocities`, both starting at 0. Lazy by default: only looked-up rows are updated."""

    _description = _Description(
        "TfeSparseApplyAdam", slot_names=("momenta", "velocities"),
        hyperparameters=(("beta_1", float), ("beta_2", float), ("epsilon", float),
                         ("lazy_adam", bool), ("sum_inside_sqrt", bool)))

    def __init__(
        self,
        learning_rate: LearningRate = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-07,
        lazy_adam: bool = True,
        sum_inside_sqrt: bool = True,
        use_gradient_accumulation: bool = True,
        clip_weight_min: Optional[float] = None,
        clip_weight_max: Optional[float] = None,
        weight_decay_factor: Optional[float] = None,
        multiply_weight_decay_factor_by_learning_rate: Optional[bool] = None,
        slot_variable_creation_fn: Optional[SlotVariableCreationFn] = None,
        clipvalue: Optional[ClipValueType] = None,
        low_dimensional_packing_status: bool = False,
    ):
        """Arguments as in `tf.tpu.experimental.embedding.Adam`."""
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clipvalue,
            slot_variable_creation_fn,
            low_dimensional_packing_status,
        )
        if beta_1 < 0. or beta_1 >= 1.:
            raise ValueError(f"Argument `beta_1` must be >= 0 and < 1. Received: {beta_1}.")
        if beta_2 < 0. or beta_2 >= 1.:
            raise ValueError(f"Argument `beta_2` must be >= 0 and < 1. Received: {beta_2}.")
        if epsilon <= 0.:
            raise ValueError(f"epsilon must be positive; got {epsilon}.")
        if not use_gradient_accumulation and not lazy_adam:
            raise ValueError(
                "When disabling lazy Adam (`lazy_adam=False`), "
                "gradient accumulation must be used. "
                "Set `use_gradient_accumulation` to True.")
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.lazy_adam = lazy_adam
        self.sum_inside_sqrt = sum_inside_sqrt


# ---------------------------------------------------------------------------------------------
# The TPU optimizers of TF v1's `tpu_embedding.py` that `tf.tpu.experimental.embedding` never
# exposed. They train the v1 Parameter classes (tf_embedding.feature_column); they are not
# public names of `tf_embedding`, whose namespace mirrors TF's. Arguments follow the v2 classes'
# conventions (`initial_accumulator_value`, `clipvalue`, common arguments in the same order);
# hyperparameter defaults are those of the rules' CPU references (docs/feature_columns.md).


def _check_non_negative(name: str, value: float) -> None:
    if value < 0.0:
        raise ValueError(f"Argument `{name}` must be >= 0. Received: {value}.")


class ProximalAdagrad(_Optimizer):
    """Adagrad's rate, then a proximal step for l1/l2 (TF's `ApplyProximalAdagrad`).

    Slot `accumulators`, starting at `initial_accumulator_value`.
    """

    _description = _Description(
        "TfeSparseApplyProximalAdagrad", slot_names=("accumulators",),
        hyperparameters=(("l1_regularization_strength", float),
                         ("l2_regularization_strength", float)))

    def __init__(
        self,
        learning_rate: LearningRate = 0.001,
        initial_accumulator_value: float = 0.1,
        l1_regularization_strength: float = 0.0,
        l2_regularization_strength: float = 0.0,
        use_gradient_accumulation: bool = True,
        clip_weight_min: Optional[float] = None,
        clip_weight_max: Optional[float] = None,
        weight_decay_factor: Optional[float] = None,
        multiply_weight_decay_factor_by_learning_rate: Optional[bool] = None,
        slot_variable_creation_fn: Optional[SlotVariableCreationFn] = None,
        clipvalue: Optional[ClipValueType] = None,
        low_dimensional_packing_status: bool = False,
    ):
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clipvalue,
            slot_variable_creation_fn,
            low_dimensional_packing_status,
        )
        _check_initial_accumulator_value(initial_accumulator_value)
        _check_non_negative("l1_regularization_strength", l1_regularization_strength)
        _check_non_negative("l2_regularization_strength", l2_regularization_strength)
        self.initial_accumulator_value = initial_accumulator_value
        self.l1_regularization_strength = l1_regularization_strength
        self.l2_regularization_strength = l2_regularization_strength

    def _slot_initializers(self) -> List[init_ops_v2.Initializer]:
        return [_constant_slot_initializer(self.initial_accumulator_value)]


class Momentum(_Optimizer):
    """TF1 momentum: `m = momentum * m + g; w -= lr * m` (Nesterov: `w -= lr * (g + momentum *
    m)`), TF's `ApplyMomentum`. Slot `momenta`, starting at 0."""

    _description = _Description(
        "TfeSparseApplyMomentum", slot_names=("momenta",),
        hyperparameters=(("momentum", float), ("use_nesterov", bool)))

    def __init__(
        self,
        learning_rate: LearningRate = 0.001,
        momentum: float = 0.0,
        use_nesterov: bool = False,
        use_gradient_accumulation: bool = True,
        clip_weight_min: Optional[float] = None,
        clip_weight_max: Optional[float] = None,
        weight_decay_factor: Optional[float] = None,
        multiply_weight_decay_factor_by_learning_rate: Optional[bool] = None,
        slot_variable_creation_fn: Optional[SlotVariableCreationFn] = None,
        clipvalue: Optional[ClipValueType] = None,
        low_dimensional_packing_status: bool = False,
    ):
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clipvalue,
            slot_variable_creation_fn,
            low_dimensional_packing_status,
        )
        self.momentum = momentum
        self.use_nesterov = use_nesterov


class RMSProp(_Optimizer):
    """RMSProp with momentum, not centered (TF's `ApplyRMSProp`): `ms = rho * ms + (1 - rho) *
    g^2; mom = momentum * mom + lr * g / sqrt(ms + epsilon); w -= mom`. Slots `ms`, `mom`, both
    starting at 0 (as v1's TPU slots do; TF1's CPU `RMSPropOptimizer` starts `ms` at 1)."""

    _description = _Description(
        "TfeSparseApplyRMSProp", slot_names=("ms", "mom"),
        hyperparameters=(("rho", float), ("momentum", float), ("epsilon", float)))

    def __init__(
        self,
        learning_rate: LearningRate = 0.001,
        rho: float = 0.9,
        momentum: float = 0.0,
        epsilon: float = 1e-07,
        use_gradient_accumulation: bool = True,
        clip_weight_min: Optional[float] = None,
        clip_weight_max: Optional[float] = None,
        weight_decay_factor: Optional[float] = None,
        multiply_weight_decay_factor_by_learning_rate: Optional[bool] = None,
        slot_variable_creation_fn: Optional[SlotVariableCreationFn] = None,
        clipvalue: Optional[ClipValueType] = None,
        low_dimensional_packing_status: bool = False,
    ):
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clipvalue,
            slot_variable_creation_fn,
            low_dimensional_packing_status,
        )
        self.rho = rho
        self.momentum = momentum
        self.epsilon = epsilon


class ProximalYogi(_Optimizer):
    """Yogi (additive second moment) with a proximal l1/l2 step, lazy, without bias correction
    (pass a bias-corrected learning rate to get it). Slots `v`, starting at
    `initial_accumulator_value`, and `m`, starting at 0."""

    _description = _Description(
        "TfeSparseApplyProximalYogi", slot_names=("v", "m"),
        hyperparameters=(("beta1", float), ("beta2", float), ("epsilon", float),
                         ("l1_regularization_strength", float),
                         ("l2_regularization_strength", float)))

    def __init__(
        self,
        learning_rate: LearningRate = 0.01,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-3,
        l1_regularization_strength: float = 0.0,
        l2_regularization_strength: float = 0.0,
        initial_accumulator_value: float = 1e-6,
        use_gradient_accumulation: bool = True,
        clip_weight_min: Optional[float] = None,
        clip_weight_max: Optional[float] = None,
        weight_decay_factor: Optional[float] = None,
        multiply_weight_decay_factor_by_learning_rate: Optional[bool] = None,
        slot_variable_creation_fn: Optional[SlotVariableCreationFn] = None,
        clipvalue: Optional[ClipValueType] = None,
        low_dimensional_packing_status: bool = False,
    ):
        """Defaults are v1's `ProximalYogiParameters`' (and TF Addons' `Yogi`'s)."""
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clipvalue,
            slot_variable_creation_fn,
            low_dimensional_packing_status,
        )
        if beta1 < 0. or beta1 >= 1.:
            raise ValueError(f"Argument `beta1` must be >= 0 and < 1. Received: {beta1}.")
        if beta2 < 0. or beta2 >= 1.:
            raise ValueError(f"Argument `beta2` must be >= 0 and < 1. Received: {beta2}.")
        if epsilon <= 0.:
            raise ValueError(f"epsilon must be positive; got {epsilon}.")
        _check_non_negative("l1_regularization_strength", l1_regularization_strength)
        _check_non_negative("l2_regularization_strength", l2_regularization_strength)
        _check_non_negative("initial_accumulator_value", initial_accumulator_value)
        self.beta1 = beta1
        self.beta2 = beta2
        self.epsilon = epsilon
        self.l1_regularization_strength = l1_regularization_strength
        self.l2_regularization_strength = l2_regularization_strength
        self.initial_accumulator_value = initial_accumulator_value

    def _slot_initializers(self) -> List[init_ops_v2.Initializer]:
        return [_constant_slot_initializer(self.initial_accumulator_value),
                _constant_slot_initializer()]


# The classes of `tf.tpu.experimental.embedding` whose objects tf_embedding accepts in place of
# its own: each has this module's constructor, argument for argument, and keeps every argument
# as an attribute of the same name (the clipping range as `clip_gradient_min` / `_max`).
_STOCK_CLASSES = {"SGD": SGD, "Adagrad": Adagrad, "AdagradMomentum": AdagradMomentum,
                  "Adam": Adam, "FTRL": FTRL}


def from_stock(optimizer: Any) -> _Optimizer:
    """tf_embedding's optimizer equal to a stock `tf.tpu.experimental.embedding` optimizer.

    Stock objects describe the TPU's update but cannot run it off a TPU; the returned object has
    the same class name, hyperparameters, slot initializers and `slot_variable_creation_fn`, and
    runs the fused update op. Other objects are returned unchanged.

    Raises:
      ValueError: another stock optimizer (`CustomOptimizer`, or a subclass of a stock class).
    """
    if not isinstance(optimizer, tpu_embedding_v2_utils._Optimizer):  # pylint: disable=protected-access
        return optimizer
    ours = _STOCK_CLASSES.get(type(optimizer).__name__)
    if ours is None or type(optimizer) is not getattr(tpu_embedding_v2_utils, ours.__name__):
        raise ValueError(
            f"{type(optimizer).__name__} has no tf_embedding equivalent (CustomOptimizer runs "
            "only on SparseCore); pass one of tf.tpu.experimental.embedding's "
            f"{', '.join(sorted(_STOCK_CLASSES))} or tf_embedding's own.")
    arguments = {}
    for argument in list(inspect.signature(ours.__init__).parameters)[1:]:
        if argument == "clipvalue":
            bounds = (optimizer.clip_gradient_min, optimizer.clip_gradient_max)
            arguments[argument] = None if bounds == (None, None) else bounds
        else:
            arguments[argument] = getattr(optimizer, argument)
    return ours(**arguments)
