"""numpy references for the ops, shared by the test modules that check the ops against them.

- `reference_csr` renders the CSR conversion of `RawFeature`s (docs/kernels.md, "The CSR
  batch") rule by rule in plain Python.
- `reference_lookup` combines `gain * table[id]` per output row of a CSR batch, in float32 in
  lookup order, the order the kernels promise; `csr` builds such batches from per-row lists.
- `reference_step` transcribes the optimizer math (tf_tpu_embedding_api.md §2, ordering of
  docs/kernels.md) in float32 in the order the formulas are written, summing gradients in
  batch order, then lookup order, as the kernels do. `reference_update` is its per-row part
  (one copy of the rules), which also runs on float64 arrays (test_keras_translation.py).
- `XLA_TOLERANCE`: how far results of the XLA kernels may be from the TF-runtime kernels': not
  at all.
"""

import math
from typing import NamedTuple, Optional

import numpy as np

from tf_embedding import optimizers as opt

F = np.float32

# On CPUs the XLA kernels (cc/xla) are custom calls that run the TF kernels' code on the
# intra-op pool, whose results do not depend on the threading: compiled steps give the TF
# runtime's bits (docs/xla.md, "Results").
XLA_TOLERANCE = dict(rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# CSR conversion: per output row, the (id, gain) pairs the contract asks for.


class RawFeature(NamedTuple):
    """A feature as the op sees it: its kind and numpy arrays."""

    kind: str
    ids: np.ndarray
    row_info: np.ndarray  # sparse indices [nnz, rank] or ragged row_splits
    dense_shape: np.ndarray
    weights: Optional[np.ndarray]
    max_sequence_length: int
    prune_invalid: bool


def _rows_of_lookups(feature):
    """(row of each lookup or None when truncated, number of rows, is_sequence).

    Like the op, reads every input but the sparse indices flattened.
    """
    msl = feature.max_sequence_length
    if feature.kind == "sparse":
        indices, shape = feature.row_info, feature.dense_shape.ravel()
        if msl > 0 and len(shape) == 2:
            rows = [b * msl + p if p < msl else None for b, p in indices]
            return rows, int(shape[0]) * msl, True
        outer = tuple(int(d) for d in shape[:-1])
        rows = [int(np.ravel_multi_index(tuple(i[:-1]), outer)) for i in indices]
        return rows, math.prod(outer), False
    if feature.kind == "ragged":
        splits = feature.row_info.ravel()
        rows = []
        for b in range(len(splits) - 1):
            for position in range(splits[b + 1] - splits[b]):
                if msl == 0:
                    rows.append(b)
                else:
                    rows.append(b * msl + position if position < msl else None)
        return rows, (len(splits) - 1) * max(msl, 1), msl > 0
    return list(range(feature.ids.size)), feature.ids.size, False


def reference_rows(feature, combiner):
    """A list over output rows of [(id, gain)], following the contract rule by rule."""
    row_of, num_rows, sequence = _rows_of_lookups(feature)
    weighted = feature.weights is not None
    rows = [[] for _ in range(num_rows)]
    for i, (lookup_id, row) in enumerate(zip(feature.ids.ravel(), row_of)):
        weight = float(feature.weights.ravel()[i]) if weighted else 1.0
        if row is None:
            continue
        if feature.prune_invalid and lookup_id < 0:
            continue
        if feature.prune_invalid and weighted and combiner != "sum" and not weight > 0:
            continue
        rows[row].append((int(lookup_id), weight))
    if sequence:
        return rows
    return [list(zip((i for i, _ in row), combined_gains([w for _, w in row], combiner)))
            for row in rows]


def combined_gains(weights, combiner):
    """The gains of one pooled row's weights: weight / combiner's norm of the row (0 if 0)."""
    if combiner == "sum":
        return list(weights)
    if combiner == "mean":
        denominator = sum(weights)
    else:
        denominator = math.sqrt(sum(w * w for w in weights))
    return [0.0 if denominator == 0 else w / denominator for w in weights]


def reference_csr(features, combiner):
    """The CSR batch of RawFeatures, as numpy arrays (row_splits, ids, gains, row counts)."""
    row_splits, ids, gains, counts = [0], [], [], []
    for feature in features:
        rows = reference_rows(feature, combiner)
        counts.append(len(rows))
        for row in rows:
            ids.extend(i for i, _ in row)
            gains.extend(g for _, g in row)
            row_splits.append(len(ids))
    return (np.array(row_splits, np.int64), np.array(ids, np.int64),
            np.array(gains, np.float32), np.array(counts, np.int64))


# ---------------------------------------------------------------------------------------------
# Lookup.


def csr(rows):
    """[[(id, gain), ...] per output row] -> (row_splits int64, ids int64, gains float32)."""
    row_splits = np.cumsum([0] + [len(row) for row in rows]).astype(np.int64)
    ids = np.array([i for row in rows for i, _ in row], np.int64)
    gains = np.array([g for row in rows for _, g in row], np.float32)
    return row_splits, ids, gains


def reference_lookup(table, row_splits, ids, gains):
    out = np.zeros([len(row_splits) - 1, table.shape[1]], np.float32)
    for r in range(len(row_splits) - 1):
        for k in range(row_splits[r], row_splits[r + 1]):
            out[r] += gains[k] * table[ids[k]]
    return out


# ---------------------------------------------------------------------------------------------
# Optimizers.


def summed_gradients(batches):
    """{id: gradient row} summed in batch order, then lookup order."""
    sums = {}
    for row_splits, ids, gains, activation_gradients in batches:
        for r in range(len(row_splits) - 1):
            for k in range(row_splits[r], row_splits[r + 1]):
                term = gains[k] * activation_gradients[r]
                sums[int(ids[k])] = sums[int(ids[k])] + term if int(ids[k]) in sums else term
    return sums


def clip(x, lo, hi):
    return np.minimum(np.maximum(x, F(lo)), F(hi))


def sgd(a, lr, g, w, slots):
    return w - lr * g, slots


def adagrad(a, lr, g, w, slots):
    (acc,) = slots
    acc = acc + g * g
    return w - lr * g / np.sqrt(acc), [acc]


def adagrad_momentum(a, lr, g, w, slots):
    acc, m = slots
    beta2, momentum = F(a["beta2"]), F(a["momentum"])
    acc = acc + g * g if beta2 == 1 else beta2 * acc + (1 - beta2) * g * g
    scaled = np.power(acc + F(a["epsilon"]), F(-1) / F(a["exponent"])) * g
    m = momentum * m + scaled
    w = w - lr * (momentum * m + scaled) if a["use_nesterov"] else w - lr * m
    return w, [acc, m]


def adam(a, lr, g, w, slots):
    m, v = slots
    beta_1, beta_2, eps = F(a["beta_1"]), F(a["beta_2"]), F(a["epsilon"])
    m = beta_1 * m + (1 - beta_1) * g
    v = beta_2 * v + (1 - beta_2) * g * g
    inside, outside = (eps * eps, F(0)) if a["sum_inside_sqrt"] else (F(0), eps)
    return w - lr * m / (np.sqrt(v + inside) + outside), [m, v]


def _power(x, exponent):
    """x ** exponent; the exponent 0.5 as sqrt, the correctly rounded value the kernel promises
    (a libm or SVML pow need not round it correctly)."""
    return np.sqrt(x) if exponent == 0.5 else np.power(x, exponent)


def ftrl(a, lr, g, w, slots):
    acc, linear = slots
    power = F(-a["learning_rate_power"])
    l1, l2, beta = F(a["l1_regularization_strength"]), F(a["l2_regularization_strength"]), F(
        a["beta"])
    acc_new = acc + g * g
    p_new = _power(acc_new, power)
    dp = p_new - _power(acc, power)
    if a["multiply_linear_by_learning_rate"]:
        linear = linear + lr * g - dp * w
        numerator = -linear if l1 == 0 else clip(linear, -lr * l1, lr * l1) - linear
        denominator = p_new + 2 * lr * l2 + beta
    else:
        linear = linear + g - dp * w / lr
        numerator = -linear if l1 == 0 else clip(linear, -l1, l1) - linear
        denominator = (p_new + beta) / lr + 2 * l2
    return numerator / denominator, [acc_new, linear]


def proximal_adagrad(a, lr, g, w, slots):
    """TF's ApplyProximalAdagrad (scalar path): Adagrad's rate, then FOBOS for l1 and l2."""
    (acc,) = slots
    l1, l2 = F(a["l1_regularization_strength"]), F(a["l2_regularization_strength"])
    acc = acc + g * g
    rate = lr / np.sqrt(acc)
    prox = w - g * rate
    if l1 > 0:
        w = np.sign(prox) * np.maximum(np.abs(prox) - rate * l1, F(0)) / (1 + l2 * rate)
    else:
        w = prox / (1 + l2 * rate)
    return w, [acc]


def momentum(a, lr, g, w, slots):
    """TF's ApplyMomentum: the learning rate scales the step, not the momentum."""
    (m,) = slots
    mu = F(a["momentum"])
    m = m * mu + g
    w = w - (g * lr + m * mu * lr) if a["use_nesterov"] else w - m * lr
    return w, [m]


def rms_prop(a, lr, g, w, slots):
    """TF's ApplyRMSProp (not centered)."""
    ms, mom = slots
    rho, mu, eps = F(a["rho"]), F(a["momentum"]), F(a["epsilon"])
    ms = ms + (g * g - ms) * (1 - rho)
    mom = mom * mu + g * lr / np.sqrt(ms + eps)
    return w - mom, [ms, mom]


def proximal_yogi(a, lr, g, w, slots):
    """Yogi's additive second moment (sign activation), no bias correction, then TF Addons'
    proximal step: argmin_x a x^2 / 2 + b x + c |x|."""
    v, m = slots
    beta1, beta2, eps = F(a["beta1"]), F(a["beta2"]), F(a["epsilon"])
    l1, l2 = F(a["l1_regularization_strength"]), F(a["l2_regularization_strength"])
    m = m * beta1 + g * (1 - beta1)
    g2 = g * g
    v = v + (1 - beta2) * np.sign(g2 - v) * g2
    rate = lr / (np.sqrt(v) + eps)
    descended = w - rate * m
    if l1 > 0:
        b, c = -descended, l1 * rate
        w = np.where(np.abs(b) > c, (c * np.sign(b) - b) / (1 + l2 * rate), F(0))
    elif l2 > 0:
        w = descended / (1 + l2 * rate)
    else:
        w = descended
    return w, [v, m]


RULES = {opt.SGD: sgd, opt.Adagrad: adagrad, opt.AdagradMomentum: adagrad_momentum,
         opt.Adam: adam, opt.FTRL: ftrl, opt.ProximalAdagrad: proximal_adagrad,
         opt.Momentum: momentum, opt.RMSProp: rms_prop, opt.ProximalYogi: proximal_yogi}


def reference_step(optimizer, table, slots, batches, lr):
    """One apply on numpy copies: table [V, dim], slots list in slot_names() order."""
    sums = summed_gradients(batches)
    every_row = isinstance(optimizer, opt.Adam) and not optimizer.lazy_adam
    rows = range(len(table)) if every_row else sorted(sums)
    zero = np.zeros(table.shape[1], F)
    reference_update(optimizer, table, slots, [(r, sums.get(r, zero)) for r in rows], lr)


def reference_update(optimizer, table, slots, gradients, lr):
    """Updates table [V, dim] and slots (list in slot_names() order) in place, row by row:
    `gradients` lists (row, summed gradient of that row) in update order. Constants are
    float32; the arithmetic runs in the arrays' dtype."""
    a = optimizer.kernel_attrs()
    lr = F(lr)
    decay = F(a["weight_decay_factor"])
    if a["multiply_weight_decay_factor_by_learning_rate"]:
        decay = decay * lr
    for r, g in gradients:
        g = clip(g, a["clip_gradient_min"], a["clip_gradient_max"])
        w = table[r] - decay * table[r]
        w, new_slots = RULES[type(optimizer)](a, lr, g, w, [s[r] for s in slots])
        table[r] = clip(w, a["clip_weight_min"], a["clip_weight_max"])
        for s, value in zip(slots, new_slots):
            s[r] = value
