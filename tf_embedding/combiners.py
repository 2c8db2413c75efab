"""The names of the combiners that reduce a sample's rows to one, defined once for every class
and for the command line (which resolves its configuration without importing TensorFlow, so
this module imports nothing). In TF's order, as TF's messages list them.

What each computes is stated once per runtime: in C++ for the fused ops' TF and XLA kernels
(`cc/core/combiner_rule.h`), and in stock TF ops for the lookups of exported serving graphs
(`feature_inputs.cpu_rules.combiner_norm`, `pooled_lookup`).
"""

COMBINERS = ("mean", "sum", "sqrtn")
