"""Every embedding optimizer, described once (the form: `description.py`).

Arguments, defaults, slot names, slot initial values and checks are those of
`tf.tpu.experimental.embedding` in TensorFlow 2.21, so checkpoints and configs carry over; the
v1 forms are TF v1's `tpu_embedding.py` parameter classes. ProximalAdagrad, Momentum, RMSProp and
ProximalYogi are TPU optimizers only v1 named (not public names of `tf_embedding`); their v2
arguments follow the v2 classes' conventions, with the defaults of the rules' CPU references
(docs/feature_columns.md). Deviations from TensorFlow are listed in docs/api_differences.md.
"""

from typing import Any, Mapping

from tf_embedding.optimizers.accepted import (ACCUMULATOR_DECAY, DECAY_RATE,
                                              MOMENTUM_FACTOR, NON_NEGATIVE,
                                              NON_POSITIVE_POWER, POSITIVE)
from tf_embedding.optimizers.description import (REQUIRED, Argument, OptimizerDescription, Slot,
                                                 V1Form, in_unit_interval, non_negative,
                                                 positive_accumulator, positive_epsilon)


def _adagrad_momentum_checks(arguments: Mapping[str, Any]) -> None:
    if arguments["epsilon"] <= 0:
        raise ValueError("Adagrad momentum: epsilon must be positive")
    if arguments["exponent"] <= 0:
        raise ValueError("Adagrad momentum: Precondition exponent must >0")


def _lazy_adam_or_accumulation(arguments: Mapping[str, Any]) -> None:
    if not arguments["use_gradient_accumulation"] and not arguments["lazy_adam"]:
        raise ValueError(
            "When disabling lazy Adam (`lazy_adam=False`), "
            "gradient accumulation must be used. "
            "Set `use_gradient_accumulation` to True.")


def _non_positive_learning_rate_power(arguments: Mapping[str, Any]) -> None:
    """v1 FTRL's own check (v2 has none)."""
    if arguments["learning_rate_power"] > 0.0:
        raise ValueError("learning_rate_power must be less than or equal to 0. "
                         f"got {arguments['learning_rate_power']}.")


SGD = OptimizerDescription(
    name="SGD", rule="Stochastic gradient descent: `w -= lr * g`. No slots.",
    op="TfeSparseApplySgd", learning_rate=0.01, keras_class="SGD",
    v1=V1Form("StochasticGradientDescent", leading=(("learning_rate", REQUIRED, None),),
              accumulates=False))

ADAGRAD = OptimizerDescription(
    name="Adagrad",
    rule="Adagrad without epsilon: `a += g^2; w -= lr * g / sqrt(a)`. Slot `accumulators`.",
    op="TfeSparseApplyAdagrad", learning_rate=0.001,
    arguments=(Argument("initial_accumulator_value", 0.1, accepted=POSITIVE),),
    slots=(Slot("accumulators", "initial_accumulator_value", "Adagrad"),),
    checks=(positive_accumulator,), keras_class="Adagrad",
    v1=V1Form("Adagrad", leading=(("learning_rate", REQUIRED, None),
                                  ("initial_accumulator", 0.1, "initial_accumulator_value"))))

ADAGRAD_MOMENTUM = OptimizerDescription(
    name="AdagradMomentum",
    rule="Adagrad with momentum (and optional Nesterov, decaying accumulator, general "
         "exponent). Slots `accumulators` and `momenta`, both starting at 0.",
    op="TfeSparseApplyAdagradMomentum", learning_rate=0.001,
    arguments=(Argument("momentum", 0.0, float, MOMENTUM_FACTOR),
               Argument("use_nesterov", False, bool),
               Argument("exponent", 2, float, POSITIVE),
               Argument("beta2", 1, float, ACCUMULATOR_DECAY),
               Argument("epsilon", 1e-10, float, POSITIVE)),
    slots=(Slot("accumulators"), Slot("momenta")),
    checks=(_adagrad_momentum_checks,))

FTRL = OptimizerDescription(
    name="FTRL",
    rule="FTRL-Proximal (McMahan et al. 2013, Algorithm 1). Slots `accumulators`, `linears`. "
         "Unlike TF 2.21, `initial_accumulator_value=0` is accepted when "
         "`allow_zero_accumulator` is True, as TF's own docstring promises.",
    op="TfeSparseApplyFtrl", learning_rate=0.001,
    arguments=(Argument("learning_rate_power", -0.5, float, NON_POSITIVE_POWER),
               Argument("l1_regularization_strength", 0.0, float, NON_NEGATIVE),
               Argument("l2_regularization_strength", 0.0, float, NON_NEGATIVE),
               Argument("beta", 0.0, float, NON_NEGATIVE),
               Argument("initial_accumulator_value", 0.1, accepted=NON_NEGATIVE)),
    trailing=(Argument("multiply_linear_by_learning_rate", False, bool),
              Argument("allow_zero_accumulator", False, bool)),
    slots=(Slot("accumulators", "initial_accumulator_value", "Ftrl"),
           Slot("linears", 0.0, "Ftrl_1")),
    checks=(positive_accumulator,), keras_class="Ftrl",
    stored_first=("initial_accumulator_value",),
    v1=V1Form("Ftrl",
              leading=(("learning_rate", REQUIRED, None), ("learning_rate_power", -0.5, None),
                       ("initial_accumulator_value", 0.1, None),
                       ("l1_regularization_strength", 0.0, None),
                       ("l2_regularization_strength", 0.0, None)),
              trailing=(("multiply_linear_by_learning_rate", False, None), ("beta", 0, None),
                        ("allow_zero_accumulator", False, None)),
              allows_zero_accumulator=True,
              checks=(_non_positive_learning_rate_power,
                      non_negative("initial_accumulator_value"))))

ADAM = OptimizerDescription(
    name="Adam",
    rule="Adam without bias correction (emulate it with a dynamic learning rate). Slots "
         "`momenta`, `velocities`, both starting at 0. Lazy by default: only looked-up rows "
         "are updated.",
    op="TfeSparseApplyAdam", learning_rate=0.001,
    arguments=(Argument("beta_1", 0.9, float, DECAY_RATE),
               Argument("beta_2", 0.999, float, DECAY_RATE),
               Argument("epsilon", 1e-07, float, POSITIVE), Argument("lazy_adam", True, bool),
               Argument("sum_inside_sqrt", True, bool)),
    slots=(Slot("momenta", 0.0, "Adam/m"), Slot("velocities", 0.0, "Adam/v")),
    checks=(in_unit_interval("beta_1", "beta_2"), positive_epsilon,
            _lazy_adam_or_accumulation),
    keras_class="Adam",
    v1=V1Form("Adam", leading=(("learning_rate", REQUIRED, None), ("beta1", 0.9, "beta_1"),
                               ("beta2", 0.999, "beta_2"), ("epsilon", 1e-08, None),
                               ("lazy_adam", True, None), ("sum_inside_sqrt", True, None))))

PROXIMAL_ADAGRAD = OptimizerDescription(
    name="ProximalAdagrad",
    rule="Adagrad's rate, then a proximal step for l1/l2 (TF's `ApplyProximalAdagrad`). Slot "
         "`accumulators`, starting at `initial_accumulator_value`.",
    op="TfeSparseApplyProximalAdagrad", learning_rate=0.001, public=False,
    arguments=(Argument("initial_accumulator_value", 0.1, accepted=POSITIVE),
               Argument("l1_regularization_strength", 0.0, float, NON_NEGATIVE),
               Argument("l2_regularization_strength", 0.0, float, NON_NEGATIVE)),
    slots=(Slot("accumulators", "initial_accumulator_value", "ProximalAdagrad"),),
    checks=(positive_accumulator,
            non_negative("l1_regularization_strength", "l2_regularization_strength")),
    v1=V1Form("ProximalAdagrad",
              leading=(("learning_rate", REQUIRED, None),
                       ("initial_accumulator", 0.1, "initial_accumulator_value"),
                       ("l1_regularization_strength", 0.0, None),
                       ("l2_regularization_strength", 0.0, None))))

MOMENTUM = OptimizerDescription(
    name="Momentum",
    rule="TF1 momentum: `m = momentum * m + g; w -= lr * m` (Nesterov: `w -= lr * (g + "
         "momentum * m)`), TF's `ApplyMomentum`. Slot `momenta`, starting at 0.",
    op="TfeSparseApplyMomentum", learning_rate=0.001, public=False,
    arguments=(Argument("momentum", 0.0, float, MOMENTUM_FACTOR),
               Argument("use_nesterov", False, bool)),
    slots=(Slot("momenta", 0.0, "Momentum"),),
    v1=V1Form("Momentum", leading=(("learning_rate", REQUIRED, None),
                                   ("momentum", REQUIRED, None),
                                   ("use_nesterov", False, None))))

RMS_PROP = OptimizerDescription(
    name="RMSProp",
    rule="RMSProp with momentum, not centered (TF's `ApplyRMSProp`): `ms = rho * ms + (1 - "
         "rho) * g^2; mom = momentum * mom + lr * g / sqrt(ms + epsilon); w -= mom`. Slots "
         "`ms`, `mom`, both starting at 0 (as v1's TPU slots do; TF1's CPU `RMSPropOptimizer` "
         "starts `ms` at 1).",
    op="TfeSparseApplyRMSProp", learning_rate=0.001, public=False,
    arguments=(Argument("rho", 0.9, float, DECAY_RATE),
               Argument("momentum", 0.0, float, MOMENTUM_FACTOR),
               Argument("epsilon", 1e-07, float, POSITIVE)),
    slots=(Slot("ms", 0.0, "RMSProp/ms"), Slot("mom", 0.0, "RMSProp/mom")),
    v1=V1Form("RMSProp", leading=(("learning_rate", REQUIRED, None), ("rho", REQUIRED, None),
                                  ("momentum", REQUIRED, None), ("epsilon", REQUIRED, None))))

PROXIMAL_YOGI = OptimizerDescription(
    name="ProximalYogi",
    rule="Yogi (additive second moment) with a proximal l1/l2 step, lazy, without bias "
         "correction (pass a bias-corrected learning rate to get it). Slots `v`, starting at "
         "`initial_accumulator_value`, and `m`, starting at 0. Defaults are v1's "
         "`ProximalYogiParameters`' (and TF Addons' `Yogi`'s).",
    op="TfeSparseApplyProximalYogi", learning_rate=0.01, public=False,
    arguments=(Argument("beta1", 0.9, float, DECAY_RATE),
               Argument("beta2", 0.999, float, DECAY_RATE),
               Argument("epsilon", 1e-3, float, POSITIVE),
               Argument("l1_regularization_strength", 0.0, float, NON_NEGATIVE),
               Argument("l2_regularization_strength", 0.0, float, NON_NEGATIVE),
               Argument("initial_accumulator_value", 1e-6, accepted=NON_NEGATIVE)),
    # TPUEstimator infers no TF1 slot names for Proximal Yogi (the spec rejects it with columns).
    slots=(Slot("v", "initial_accumulator_value"), Slot("m")),
    checks=(in_unit_interval("beta1", "beta2"), positive_epsilon,
            non_negative("l1_regularization_strength", "l2_regularization_strength",
                         "initial_accumulator_value")),
    v1=V1Form("ProximalYogi",
              leading=(("learning_rate", 0.01, None), ("beta1", 0.9, None),
                       ("beta2", 0.999, None), ("epsilon", 1e-3, None),
                       ("l1_regularization_strength", 0.0, None),
                       ("l2_regularization_strength", 0.0, None),
                       ("initial_accumulator_value", 1e-6, None))))

DESCRIPTIONS = (SGD, ADAGRAD, ADAGRAD_MOMENTUM, FTRL, ADAM, PROXIMAL_ADAGRAD, MOMENTUM, RMS_PROP,
                PROXIMAL_YOGI)
