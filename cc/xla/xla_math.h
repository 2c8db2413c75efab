// The optimizer rules' scalar vocabulary (cc/core/optimizers.h) for XLA: an elementwise XLA
// value with the operators and functions the rules are written in. UpdateElement and every
// rule's Update are templates over their scalar type, so instantiated with XlaValue they build
// the XLA ops that update whole [rows, dim] arrays at once, from the same definition the TF
// kernels run with float.
//
// Every value is float32: an array, or a scalar (the learning rate), which XLA broadcasts
// against arrays. Float constants become scalar constants of the builder of the other operand.
//
// XLA's CPU compiler may fuse a * b + c into one FMA and rewrite x / sqrt(y) as x * rsqrt(y),
// which the TF kernels (compiled with -ffp-contract=off) never do, so the XLA kernels agree
// with the TF kernels to within a few float32 ulps per step, not bit for bit
// (docs/xla.md, "Results").
#ifndef TF_EMBEDDING_CC_XLA_XLA_MATH_H_
#define TF_EMBEDDING_CC_XLA_XLA_MATH_H_

#include <limits>

#include "xla/hlo/builder/xla_builder.h"

namespace tf_embedding {

class XlaValue {
 public:
  // Empty until assigned; the rules declare some values before computing them.
  XlaValue() = default;
  explicit XlaValue(xla::XlaOp op) : op_(op) {}

  xla::XlaOp op() const { return op_; }
  // A float32 scalar constant in this value's computation.
  xla::XlaOp Constant(float value) const { return xla::ConstantR0<float>(op_.builder(), value); }

 private:
  xla::XlaOp op_;
};

#define TF_EMBEDDING_XLA_BINARY_OPERATOR(SYMBOL)                                       \
  inline XlaValue operator SYMBOL(const XlaValue& a, const XlaValue& b) {            \
    return XlaValue(a.op() SYMBOL b.op());                                           \
  }                                                                                  \
  inline XlaValue operator SYMBOL(const XlaValue& a, float b) {                      \
    return XlaValue(a.op() SYMBOL a.Constant(b));                                    \
  }                                                                                  \
  inline XlaValue operator SYMBOL(float a, const XlaValue& b) {                      \
    return XlaValue(b.Constant(a) SYMBOL b.op());                                    \
  }
TF_EMBEDDING_XLA_BINARY_OPERATOR(+)
TF_EMBEDDING_XLA_BINARY_OPERATOR(-)
TF_EMBEDDING_XLA_BINARY_OPERATOR(*)
TF_EMBEDDING_XLA_BINARY_OPERATOR(/)
#undef TF_EMBEDDING_XLA_BINARY_OPERATOR

inline XlaValue operator-(const XlaValue& a) { return XlaValue(xla::Neg(a.op())); }

inline XlaValue Sqrt(const XlaValue& x) { return XlaValue(xla::Sqrt(x.op())); }

inline XlaValue Abs(const XlaValue& x) { return XlaValue(xla::Abs(x.op())); }

// -1, 0 or 1, and 0 for NaN: (x > 0) - (x < 0) as the float Sign (xla::Sign gives NaN).
inline XlaValue Sign(const XlaValue& x) {
  const xla::XlaOp zero = x.Constant(0.0f);
  return XlaValue(xla::ConvertElementType(xla::Gt(x.op(), zero), xla::F32) -
                  xla::ConvertElementType(xla::Lt(x.op(), zero), xla::F32));
}

// XLA's max propagates NaN, as the float Max does for a NaN x.
inline XlaValue Max(const XlaValue& x, float y) { return XlaValue(xla::Max(x.op(), x.Constant(y))); }

inline XlaValue Pow(const XlaValue& x, float y) { return XlaValue(xla::Pow(x.op(), x.Constant(y))); }

// Like the float Clamp: NaN stays NaN (XLA's min and max propagate NaN).
inline XlaValue Clamp(const XlaValue& x, const XlaValue& lo, const XlaValue& hi) {
  return XlaValue(xla::Min(xla::Max(x.op(), lo.op()), hi.op()));
}

// The default bounds (-inf, inf) leave every value, NaN included, as it is: no ops for them.
inline XlaValue Clamp(const XlaValue& x, float lo, float hi) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  if (lo == -kInf && hi == kInf) return x;
  return Clamp(x, XlaValue(x.Constant(lo)), XlaValue(x.Constant(hi)));
}

// 1 / sqrt(x) in float64, rounded once to float32, as the float version computes it.
inline XlaValue ReciprocalSqrt(const XlaValue& x) {
  const xla::XlaOp wide = xla::ConvertElementType(x.op(), xla::F64);
  const xla::XlaOp one = xla::ConstantR0<double>(x.op().builder(), 1.0);
  return XlaValue(xla::ConvertElementType(one / xla::Sqrt(wide), xla::F32));
}

inline XlaValue ScalarLike(const XlaValue& like, float value) {
  return XlaValue(like.Constant(value));
}

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_XLA_XLA_MATH_H_
