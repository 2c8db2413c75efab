"""The names of the combiners that reduce a sample's rows to one, defined once for every class
and for the command line (which resolves its configuration without importing TensorFlow, so
this module imports nothing). In TF's order, as TF's messages list them.

What each computes is stated twice over by nature, once per runtime: the conversion's gains
(`cc/core/csr_conversion.cc`) and the stock-op lookups (`features.combiner_norm`,
`pooled_lookup`).
"""

COMBINERS = ("mean", "sum", "sqrtn")
