"""Held-out evaluation: exact ROC AUC and log loss of the model, and of the planted probabilities
when the data carries them."""

from typing import Any, Callable

import numpy as np
import tensorflow as tf

from tf_embedding.job.data import common


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Exact ROC AUC (ties count one half); nan without both classes."""
    labels = np.asarray(labels) > 0.5
    scores = np.asarray(scores, np.float64)
    positives = int(labels.sum())
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    _, first, counts = np.unique(scores[order], return_index=True, return_counts=True)
    ranks = np.empty(len(scores))
    ranks[order] = np.repeat(first + (counts + 1) / 2.0, counts)
    return float((ranks[labels].sum() - positives * (positives + 1) / 2.0)
                 / (positives * negatives))


def log_loss(labels: np.ndarray, probabilities: np.ndarray) -> float:
    """Mean binary cross-entropy; nan for no examples."""
    if len(labels) == 0:
        return float("nan")
    p = np.clip(np.asarray(probabilities, np.float64), 1e-7, 1 - 1e-7)
    y = np.asarray(labels, np.float64)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def evaluate(predict: Callable[[common.Batch], Any], dataset: tf.data.Dataset) -> dict[str, float]:
    """AUC and log loss of `predict(batch)` (probabilities [B], a tensor or an array) on the
    dataset, and of the planted probability (the Bayes-optimal model) when the batches carry
    it."""
    labels, scores, truth, malformed = [], [], [], 0
    for batch in dataset:
        labels.append(batch["label"].numpy())
        scores.append(np.asarray(predict(batch)))
        malformed += int(batch["malformed"])
        if "probability" in batch:
            truth.append(batch["probability"].numpy())
    labels_all = np.concatenate(labels) if labels else np.zeros([0])
    scores_all = np.concatenate(scores) if scores else np.zeros([0])
    result = {"examples": int(len(labels_all)), "malformed": malformed,
              "auc": roc_auc(labels_all, scores_all), "log_loss": log_loss(labels_all, scores_all),
              "click_rate": float(labels_all.mean()) if len(labels_all) else float("nan")}
    if truth:
        truth_all = np.concatenate(truth)
        result.update(bayes_auc=roc_auc(labels_all, truth_all),
                      bayes_log_loss=log_loss(labels_all, truth_all))
    return result


