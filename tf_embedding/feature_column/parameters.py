"""TF v1's TPU embedding optimization parameter classes (`tpu_embedding.py`), with v1 defaults.

TPUEstimator models configured their embedding optimizer with these; TF 2.21 no longer has them.
Each class is made from its optimizer's description (`tf_embedding/optimizers/catalogue.py`,
its `v1` form): v1's signature and defaults, and `embedding_optimizer()`, which gives the
tf_embedding optimizer that applies the same TPU rule through a fused kernel (the rules and their
sources: docs/feature_columns.md). Arguments are checked as the v2 optimizer checks them, with
its messages, plus v1's own checks.

v1 -> v2 naming: `initial_accumulator` -> `initial_accumulator_value`, `beta1/beta2` ->
`beta_1/beta_2`, `clip_gradient_min/max` -> `clipvalue`. Adam's v1 default epsilon is 1e-8
(v2: 1e-7), and v1 FTRL allows a zero initial accumulator. Proximal Adagrad, Momentum, RMSProp
and Proximal Yogi have no v2 class in TF; they train through tf_embedding.optimizers' classes of
those names, which are not public names of `tf_embedding`.
"""

import inspect
from typing import Any, ClassVar, Dict, Optional

from tf_embedding import optimizers
from tf_embedding.optimizers import catalogue
from tf_embedding.optimizers.base import LearningRate
from tf_embedding.optimizers.description import OptimizerDescription

_KEYWORD = inspect.Parameter.POSITIONAL_OR_KEYWORD
_COMMON = ("clip_weight_min", "clip_weight_max", "weight_decay_factor",
           "multiply_weight_decay_factor_by_learning_rate")
_CLIPS = ("clip_gradient_min", "clip_gradient_max")


class _OptimizationParameters:
    """Parameters every v1 optimizer shares; subclasses set `description`
    (the optimizer's description, public as the v2 optimizers' is)."""

    description: ClassVar[OptimizerDescription]

    def _set(self, values: Dict[str, Any]) -> None:
        """Stores and checks the bound arguments (by v1 name)."""
        v1 = self.description.v1
        # v1 accumulates only when a gradient clip needs it where it has no switch (SGD).
        clipped = any(values[clip] is not None for clip in _CLIPS)
        self.learning_rate = values["learning_rate"]
        self.use_gradient_accumulation = values.get("use_gradient_accumulation", clipped)
        for name in _COMMON + _CLIPS:
            setattr(self, name, values[name])
        # v1 builds this error and forgets to raise it (a bug); clipping a gradient that is not
        # accumulated has no meaning on a TPU, so it is raised here.
        if not self.use_gradient_accumulation and clipped:
            raise ValueError("When using gradient clipping limits, gradient accumulation must be "
                             "enabled.")
        for name, _, _ in v1.arguments():
            setattr(self, name, values[name])
        for check in v1.checks:
            check(values)
        self.embedding_optimizer()  # the v2 optimizer's checks

    def _common_arguments(self, clip_limit: Optional[float]) -> dict[str, Any]:
        """The v2 optimizer's shared arguments; `clip_limit` (the spec's `clipping_limit`)
        bounds the gradient where these parameters set no bound of their own."""
        clip_min, clip_max = self.clip_gradient_min, self.clip_gradient_max
        if clip_limit is not None:
            clip_min = -clip_limit if clip_min is None else clip_min
            clip_max = clip_limit if clip_max is None else clip_max
        clipvalue = None if clip_min is None and clip_max is None else (clip_min, clip_max)
        common = {name: getattr(self, name) for name in _COMMON}
        return dict(common, clipvalue=clipvalue, use_gradient_accumulation=(
            self.use_gradient_accumulation or clipvalue is not None))

    def embedding_optimizer(self, learning_rate: Optional[LearningRate] = None,
                            clip_limit: Optional[float] = None) -> optimizers._Optimizer:
        """The tf_embedding optimizer with these parameters: the same TPU rule, fused.

        Args:
          learning_rate: overrides `self.learning_rate` (e.g. a column's `learning_rate_fn`
            bound to a step counter).
          clip_limit: bounds the gradient to [-clip_limit, clip_limit] where these parameters set
            no gradient clip (EmbeddingConfigSpec's `clipping_limit`).
        """
        v1 = self.description.v1
        arguments = {v2_name: getattr(self, name) for name, _, v2_name in v1.arguments()
                     if name != "learning_rate"}
        if v1.allows_zero_accumulator:
            arguments["allow_zero_accumulator"] = (
                arguments["allow_zero_accumulator"]
                or arguments["initial_accumulator_value"] == 0)
        arguments.update(self._common_arguments(clip_limit))
        return optimizers.CLASSES[self.description.name](
            learning_rate=learning_rate or self.learning_rate, **arguments)


def _signature(description: OptimizerDescription) -> inspect.Signature:
    """v1's constructor signature (with `self`)."""
    v1 = description.v1

    def parameters(arguments):
        return [inspect.Parameter(name, _KEYWORD, default=default)
                for name, default, _ in arguments]

    common = [inspect.Parameter(name, _KEYWORD, default=None) for name in _COMMON]
    if v1.accumulates:
        common.insert(0, inspect.Parameter("use_gradient_accumulation", _KEYWORD,
                                           default=True))
    return inspect.Signature(
        [inspect.Parameter("self", _KEYWORD)] + parameters(v1.leading) + common
        + parameters(v1.trailing)
        + [inspect.Parameter(name, _KEYWORD, default=None) for name in _CLIPS])


def _make_class(description: OptimizerDescription) -> type:
    constructor_signature = _signature(description)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        bound = constructor_signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        self._set(dict(bound.arguments))

    __init__.__signature__ = constructor_signature  # type: ignore[attr-defined]
    name = description.v1.class_name + "Parameters"
    __init__.__qualname__ = f"{name}.__init__"
    return type(name, (_OptimizationParameters,), {
        "__init__": __init__, "description": description, "__module__": __name__,
        "__qualname__": name, "__doc__": description.rule})


StochasticGradientDescentParameters = _make_class(catalogue.SGD)
AdagradParameters = _make_class(catalogue.ADAGRAD)
AdamParameters = _make_class(catalogue.ADAM)
FtrlParameters = _make_class(catalogue.FTRL)
ProximalAdagradParameters = _make_class(catalogue.PROXIMAL_ADAGRAD)
MomentumParameters = _make_class(catalogue.MOMENTUM)
RMSPropParameters = _make_class(catalogue.RMS_PROP)
ProximalYogiParameters = _make_class(catalogue.PROXIMAL_YOGI)
