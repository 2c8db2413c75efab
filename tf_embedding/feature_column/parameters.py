"""TF v1's TPU embedding optimization parameter classes (`tpu_embedding.py`), with v1 defaults.

TPUEstimator models configured their embedding optimizer with these; TF 2.21 no longer has them.
Each class keeps v1's signature, defaults and validation messages, and `embedding_optimizer()`
gives the tf_embedding optimizer that applies the same TPU rule through a fused kernel (the rules
and their sources: docs/feature_columns.md).

v1 -> v2 naming: `initial_accumulator` -> `initial_accumulator_value`, `beta1/beta2` ->
`beta_1/beta_2`, `clip_gradient_min/max` -> `clipvalue`. Adam's v1 default epsilon is 1e-8
(v2: 1e-7), and v1 FTRL allows a zero initial accumulator. Proximal Adagrad, Momentum, RMSProp
and Proximal Yogi have no v2 class in TF; they train through tf_embedding.optimizers' classes of
those names, which are not public names of `tf_embedding`.
"""

import abc
from typing import Any, Optional

from tf_embedding import optimizers
from tf_embedding.optimizer_base import LearningRate


class _OptimizationParameters(metaclass=abc.ABCMeta):
    """Parameters every v1 optimizer shares; each subclass gives its `embedding_optimizer()`."""

    def __init__(self, learning_rate: float, use_gradient_accumulation: bool,
                 clip_weight_min: Optional[float], clip_weight_max: Optional[float],
                 weight_decay_factor: Optional[float],
                 multiply_weight_decay_factor_by_learning_rate: Optional[bool],
                 clip_gradient_min: Optional[float] = None,
                 clip_gradient_max: Optional[float] = None):
        self.learning_rate = learning_rate
        self.use_gradient_accumulation = use_gradient_accumulation
        self.clip_weight_min = clip_weight_min
        self.clip_weight_max = clip_weight_max
        self.weight_decay_factor = weight_decay_factor
        self.multiply_weight_decay_factor_by_learning_rate = (
            multiply_weight_decay_factor_by_learning_rate)
        self.clip_gradient_min = clip_gradient_min
        self.clip_gradient_max = clip_gradient_max
        # v1 builds this error and forgets to raise it (a bug); clipping a gradient that is not
        # accumulated has no meaning on a TPU, so it is raised here.
        if not use_gradient_accumulation and (clip_gradient_min is not None
                                              or clip_gradient_max is not None):
            raise ValueError("When using gradient clipping limits, gradient accumulation must be "
                             "enabled.")

    def _common_arguments(self, clip_limit: Optional[float]) -> dict[str, Any]:
        """The v2 optimizer's shared arguments; `clip_limit` (the spec's `clipping_limit`)
        bounds the gradient where these parameters set no bound of their own."""
        clip_min, clip_max = self.clip_gradient_min, self.clip_gradient_max
        if clip_limit is not None:
            clip_min = -clip_limit if clip_min is None else clip_min
            clip_max = clip_limit if clip_max is None else clip_max
        clipvalue = None if clip_min is None and clip_max is None else (clip_min, clip_max)
        return {
            "use_gradient_accumulation": self.use_gradient_accumulation or clipvalue is not None,
            "clip_weight_min": self.clip_weight_min,
            "clip_weight_max": self.clip_weight_max,
            "weight_decay_factor": self.weight_decay_factor,
            "multiply_weight_decay_factor_by_learning_rate":
                self.multiply_weight_decay_factor_by_learning_rate,
            "clipvalue": clipvalue,
        }

    @abc.abstractmethod
    def embedding_optimizer(self, learning_rate: Optional[LearningRate] = None,
                            clip_limit: Optional[float] = None) -> optimizers._Optimizer:
        """The tf_embedding optimizer with these parameters: the same TPU rule, fused.

        Args:
          learning_rate: overrides `self.learning_rate` (e.g. a column's `learning_rate_fn`
            bound to a step counter).
          clip_limit: bounds the gradient to [-clip_limit, clip_limit] where these parameters set
            no gradient clip (EmbeddingConfigSpec's `clipping_limit`).
        """


def _check_initial_accumulator(initial_accumulator: float) -> None:
    if initial_accumulator <= 0:
        raise ValueError("Adagrad initial_accumulator must be positive")


def _check_non_negative(name: str, value: float) -> None:
    if value < 0.0:
        raise ValueError(f"{name} must be greater than or equal to 0. got {value}.")


def _check_beta(name: str, value: float) -> None:
    if value < 0.0 or value >= 1.0:
        raise ValueError(f"{name} must be between 0. and 1; got {value}.")


class StochasticGradientDescentParameters(_OptimizationParameters):
    """w -= lr * g."""

    def __init__(self, learning_rate: float, clip_weight_min: Optional[float] = None,
                 clip_weight_max: Optional[float] = None,
                 weight_decay_factor: Optional[float] = None,
                 multiply_weight_decay_factor_by_learning_rate: Optional[bool] = None,
                 clip_gradient_min: Optional[float] = None,
                 clip_gradient_max: Optional[float] = None):
        # v1 accumulates only when a gradient clip needs it.
        super().__init__(learning_rate,
                         clip_gradient_min is not None or clip_gradient_max is not None,
                         clip_weight_min, clip_weight_max, weight_decay_factor,
                         multiply_weight_decay_factor_by_learning_rate, clip_gradient_min,
                         clip_gradient_max)

    def embedding_optimizer(self, learning_rate: Optional[LearningRate] = None,
                            clip_limit: Optional[float] = None) -> optimizers._Optimizer:
        return optimizers.SGD(learning_rate=learning_rate or self.learning_rate,
                              **self._common_arguments(clip_limit))


class AdagradParameters(_OptimizationParameters):
    """a += g^2; w -= lr * g / sqrt(a)."""

    def __init__(self, learning_rate: float, initial_accumulator: float = 0.1,
                 use_gradient_accumulation: bool = True,
                 clip_weight_min: Optional[float] = None,
                 clip_weight_max: Optional[float] = None,
                 weight_decay_factor: Optional[float] = None,
                 multiply_weight_decay_factor_by_learning_rate: Optional[bool] = None,
                 clip_gradient_min: Optional[float] = None,
                 clip_gradient_max: Optional[float] = None):
        super().__init__(learning_rate, use_gradient_accumulation, clip_weight_min,
                         clip_weight_max, weight_decay_factor,
                         multiply_weight_decay_factor_by_learning_rate, clip_gradient_min,
                         clip_gradient_max)
        _check_initial_accumulator(initial_accumulator)
        self.initial_accumulator = initial_accumulator

    def embedding_optimizer(self, learning_rate: Optional[LearningRate] = None,
                            clip_limit: Optional[float] = None) -> optimizers._Optimizer:
        return optimizers.Adagrad(learning_rate=learning_rate or self.learning_rate,
                                  initial_accumulator_value=self.initial_accumulator,
                                  **self._common_arguments(clip_limit))


class AdamParameters(_OptimizationParameters):
    """Adam without bias correction, lazy by default."""

    def __init__(self, learning_rate: float, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-08, lazy_adam: bool = True, sum_inside_sqrt: bool = True,
                 use_gradient_accumulation: bool = True,
                 clip_weight_min: Optional[float] = None,
                 clip_weight_max: Optional[float] = None,
                 weight_decay_factor: Optional[float] = None,
                 multiply_weight_decay_factor_by_learning_rate: Optional[bool] = None,
                 clip_gradient_min: Optional[float] = None,
                 clip_gradient_max: Optional[float] = None):
        super().__init__(learning_rate, use_gradient_accumulation, clip_weight_min,
                         clip_weight_max, weight_decay_factor,
                         multiply_weight_decay_factor_by_learning_rate, clip_gradient_min,
                         clip_gradient_max)
        _check_beta("beta1", beta1)
        _check_beta("beta2", beta2)
        if epsilon <= 0.0:
            raise ValueError(f"epsilon must be positive; got {epsilon}.")
        if not use_gradient_accumulation and not lazy_adam:
            raise ValueError("When disabling Lazy Adam, gradient accumulation must be used.")
        self.beta1 = beta1
        self.beta2 = beta2
        self.epsilon = epsilon
        self.lazy_adam = lazy_adam
        self.sum_inside_sqrt = sum_inside_sqrt

    def embedding_optimizer(self, learning_rate: Optional[LearningRate] = None,
                            clip_limit: Optional[float] = None) -> optimizers._Optimizer:
        return optimizers.Adam(learning_rate=learning_rate or self.learning_rate,
                               beta_1=self.beta1, beta_2=self.beta2, epsilon=self.epsilon,
                               lazy_adam=self.lazy_adam, sum_inside_sqrt=self.sum_inside_sqrt,
                               **self._common_arguments(clip_limit))


class FtrlParameters(_OptimizationParameters):
    """FTRL-Proximal; v1 accepts a zero initial accumulator."""

    def __init__(self, learning_rate: float, learning_rate_power: float = -0.5,
                 initial_accumulator_value: float = 0.1,
                 l1_regularization_strength: float = 0.0,
                 l2_regularization_strength: float = 0.0,
                 use_gradient_accumulation: bool = True,
                 clip_weight_min: Optional[float] = None,
                 clip_weight_max: Optional[float] = None,
                 weight_decay_factor: Optional[float] = None,
                 multiply_weight_decay_factor_by_learning_rate: Optional[bool] = None,
                 multiply_linear_by_learning_rate: bool = False, beta: float = 0,
                 allow_zero_accumulator: bool = False,
                 clip_gradient_min: Optional[float] = None,
                 clip_gradient_max: Optional[float] = None):
        super().__init__(learning_rate, use_gradient_accumulation, clip_weight_min,
                         clip_weight_max, weight_decay_factor,
                         multiply_weight_decay_factor_by_learning_rate, clip_gradient_min,
                         clip_gradient_max)
        if learning_rate_power > 0.0:
            raise ValueError("learning_rate_power must be less than or equal to 0. "
                             f"got {learning_rate_power}.")
        _check_non_negative("initial_accumulator_value", initial_accumulator_value)
        _check_non_negative("l1_regularization_strength", l1_regularization_strength)
        _check_non_negative("l2_regularization_strength", l2_regularization_strength)
        self.learning_rate_power = learning_rate_power
        self.initial_accumulator_value = initial_accumulator_value
        self.initial_linear_value = 0.0
        self.l1_regularization_strength = l1_regularization_strength
        self.l2_regularization_strength = l2_regularization_strength
        self.multiply_linear_by_learning_rate = multiply_linear_by_learning_rate
        self.beta = beta
        self.allow_zero_accumulator = allow_zero_accumulator

    def embedding_optimizer(self, learning_rate: Optional[LearningRate] = None,
                            clip_limit: Optional[float] = None) -> optimizers._Optimizer:
        return optimizers.FTRL(
            learning_rate=learning_rate or self.learning_rate,
            learning_rate_power=self.learning_rate_power,
            l1_regularization_strength=self.l1_regularization_strength,
            l2_regularization_strength=self.l2_regularization_strength, beta=self.beta,
            initial_accumulator_value=self.initial_accumulator_value,
            multiply_linear_by_learning_rate=self.multiply_linear_by_learning_rate,
            # v1 accepts a zero initial accumulator whatever allow_zero_accumulator says.
            allow_zero_accumulator=(self.allow_zero_accumulator
                                    or self.initial_accumulator_value == 0),
            **self._common_arguments(clip_limit))


class ProximalAdagradParameters(_OptimizationParameters):
    """Adagrad followed by a proximal (l1, l2) step."""

    def __init__(self, learning_rate: float, initial_accumulator: float = 0.1,
                 l1_regularization_strength: float = 0.0,
                 l2_regularization_strength: float = 0.0,
                 use_gradient_accumulation: bool = True,
                 clip_weight_min: Optional[float] = None,
                 clip_weight_max: Optional[float] = None,
                 weight_decay_factor: Optional[float] = None,
                 multiply_weight_decay_factor_by_learning_rate: Optional[bool] = None,
                 clip_gradient_min: Optional[float] = None,
                 clip_gradient_max: Optional[float] = None):
        super().__init__(learning_rate, use_gradient_accumulation, clip_weight_min,
                         clip_weight_max, weight_decay_factor,
                         multiply_weight_decay_factor_by_learning_rate, clip_gradient_min,
                         clip_gradient_max)
        _check_initial_accumulator(initial_accumulator)
        _check_non_negative("l1_regularization_strength", l1_regularization_strength)
        _check_non_negative("l2_regularization_strength", l2_regularization_strength)
        self.initial_accumulator = initial_accumulator
        self.l1_regularization_strength = l1_regularization_strength
        self.l2_regularization_strength = l2_regularization_strength

    def embedding_optimizer(self, learning_rate: Optional[LearningRate] = None,
                            clip_limit: Optional[float] = None) -> optimizers._Optimizer:
        return optimizers.ProximalAdagrad(
            learning_rate=learning_rate or self.learning_rate,
            initial_accumulator_value=self.initial_accumulator,
            l1_regularization_strength=self.l1_regularization_strength,
            l2_regularization_strength=self.l2_regularization_strength,
            **self._common_arguments(clip_limit))


class MomentumParameters(_OptimizationParameters):
    """SGD with (Nesterov) momentum."""

    def __init__(self, learning_rate: float, momentum: float, use_nesterov: bool = False,
                 use_gradient_accumulation: bool = True,
                 clip_weight_min: Optional[float] = None,
                 clip_weight_max: Optional[float] = None,
                 weight_decay_factor: Optional[float] = None,
                 multiply_weight_decay_factor_by_learning_rate: Optional[bool] = None,
                 clip_gradient_min: Optional[float] = None,
                 clip_gradient_max: Optional[float] = None):
        super().__init__(learning_rate, use_gradient_accumulation, clip_weight_min,
                         clip_weight_max, weight_decay_factor,
                         multiply_weight_decay_factor_by_learning_rate, clip_gradient_min,
                         clip_gradient_max)
        self.momentum = momentum
        self.use_nesterov = use_nesterov

    def embedding_optimizer(self, learning_rate: Optional[LearningRate] = None,
                            clip_limit: Optional[float] = None) -> optimizers._Optimizer:
        return optimizers.Momentum(learning_rate=learning_rate or self.learning_rate,
                                   momentum=self.momentum, use_nesterov=self.use_nesterov,
                                   **self._common_arguments(clip_limit))


class RMSPropParameters(_OptimizationParameters):
    """RMSProp with momentum."""

    def __init__(self, learning_rate: float, rho: float, momentum: float, epsilon: float,
                 use_gradient_accumulation: bool = True,
                 clip_weight_min: Optional[float] = None,
                 clip_weight_max: Optional[float] = None,
                 weight_decay_factor: Optional[float] = None,
                 multiply_weight_decay_factor_by_learning_rate: Optional[bool] = None,
                 clip_gradient_min: Optional[float] = None,
                 clip_gradient_max: Optional[float] = None):
        super().__init__(learning_rate, use_gradient_accumulation, clip_weight_min,
                         clip_weight_max, weight_decay_factor,
                         multiply_weight_decay_factor_by_learning_rate, clip_gradient_min,
                         clip_gradient_max)
        self.rho = rho
        self.momentum = momentum
        self.epsilon = epsilon

    def embedding_optimizer(self, learning_rate: Optional[LearningRate] = None,
                            clip_limit: Optional[float] = None) -> optimizers._Optimizer:
        return optimizers.RMSProp(learning_rate=learning_rate or self.learning_rate,
                                  rho=self.rho, momentum=self.momentum, epsilon=self.epsilon,
                                  **self._common_arguments(clip_limit))


class ProximalYogiParameters(_OptimizationParameters):
    """Yogi with a proximal (l1, l2) step."""

    def __init__(self, learning_rate: float = 0.01, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-3, l1_regularization_strength: float = 0.0,
                 l2_regularization_strength: float = 0.0,
                 initial_accumulator_value: float = 1e-6,
                 use_gradient_accumulation: bool = True,
                 clip_weight_min: Optional[float] = None,
                 clip_weight_max: Optional[float] = None,
                 weight_decay_factor: Optional[float] = None,
                 multiply_weight_decay_factor_by_learning_rate: Optional[bool] = None,
                 clip_gradient_min: Optional[float] = None,
                 clip_gradient_max: Optional[float] = None):
        super().__init__(learning_rate, use_gradient_accumulation, clip_weight_min,
                         clip_weight_max, weight_decay_factor,
                         multiply_weight_decay_factor_by_learning_rate, clip_gradient_min,
                         clip_gradient_max)
        _check_beta("beta1", beta1)
        _check_beta("beta2", beta2)
        if epsilon <= 0.0:
            raise ValueError(f"epsilon must be positive; got {epsilon}.")
        _check_non_negative("l1_regularization_strength", l1_regularization_strength)
        _check_non_negative("l2_regularization_strength", l2_regularization_strength)
        self.beta1 = beta1
        self.beta2 = beta2
        self.epsilon = epsilon
        self.l1_regularization_strength = l1_regularization_strength
        self.l2_regularization_strength = l2_regularization_strength
        self.initial_accumulator_value = initial_accumulator_value

    def embedding_optimizer(self, learning_rate: Optional[LearningRate] = None,
                            clip_limit: Optional[float] = None) -> optimizers._Optimizer:
        return optimizers.ProximalYogi(
            learning_rate=learning_rate or self.learning_rate, beta1=self.beta1,
            beta2=self.beta2, epsilon=self.epsilon,
            l1_regularization_strength=self.l1_regularization_strength,
            l2_regularization_strength=self.l2_regularization_strength,
            initial_accumulator_value=self.initial_accumulator_value,
            **self._common_arguments(clip_limit))
