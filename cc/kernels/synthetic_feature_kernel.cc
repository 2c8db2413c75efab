// TfeSyntheticFeature (cc/ops/synthetic_ops.cc): one feature of the job's synthetic batch, drawn
// with TensorFlow's own Philox streams so that it equals the stateless TF ops the op's doc names
// bit for bit (tests/job/test_synthetic_feature_op.py holds that composition as the reference).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "cc/core/combiner_rule.h"
#include "cc/core/huge_pages.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/kernels/stateless_random_ops.h"
#include "tensorflow/core/lib/random/philox_random.h"
#include "tensorflow/core/lib/random/random_distributions.h"

namespace tf_embedding {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::random::PhiloxRandom;
using ::tensorflow::random::UniformDistribution;

// The alias table's columns: the chance of keeping the column's own rank, the alias's rank, the
// column's effect, the alias's effect.
constexpr int kKeep = 0;
constexpr int kAlias = 1;
constexpr int kEffect = 2;
constexpr int kAliasEffect = 3;
constexpr int kColumns = 4;
// Ids drawn per block: their table rows are prefetched together, so the reads of a large table
// (a uniformly drawn column each) overlap instead of waiting one after another. Even, so that
// the Philox pairs of doubles never straddle two blocks.
constexpr int64_t kBlock = 64;

class SyntheticFeatureOp : public OpKernel {
 public:
  explicit SyntheticFeatureOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("feature_name", &feature_name_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("batch_size", &batch_size_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_ids", &max_ids_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("min_ids", &min_ids_));
    OP_REQUIRES(ctx, min_ids_ <= max_ids_,
                absl::InvalidArgumentError(absl::StrCat(
                    "Feature '", feature_name_, "': min_ids ", min_ids_, " is above max_ids ",
                    max_ids_)));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("weighted", &weighted_));
    std::string combiner;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("combiner", &combiner));
    // The op's attr admits only the three names.
    ParseCombiner(combiner, &combiner_);
    OP_REQUIRES_OK(ctx, ctx->GetAttr("multiplier", &multiplier_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("offset", &offset_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("weight_min", &weight_min_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("weight_max", &weight_max_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& columns = ctx->input(0);
    const Tensor& seeds = ctx->input(1);
    OP_REQUIRES(ctx, columns.dims() == 2 && columns.dim_size(1) == kColumns &&
                         columns.dim_size(0) >= 1 && columns.dim_size(0) <= (int64_t{1} << 31),
                Error("columns must be [N, 4] with 1 <= N <= 2^31, got shape ",
                      columns.shape().DebugString()));
    const int64_t size = columns.dim_size(0);
    OP_REQUIRES(ctx, multiplier_ < size && offset_ < size,
                Error("multiplier ", multiplier_, " and offset ", offset_,
                      " must be below the table's ", size, " rows"));
    OP_REQUIRES(ctx, seeds.dims() == 2 && seeds.dim_size(0) == 3 && seeds.dim_size(1) == 2,
                Error("seeds must be [3, 2], got shape ", seeds.shape().DebugString()));

    Tensor* row_splits = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({batch_size_ + 1}), &row_splits));
    int64_t* splits = row_splits->flat<int64_t>().data();
    PhiloxRandom lengths_generator;
    OP_REQUIRES_OK(ctx, Generator(seeds, 0, &lengths_generator));
    DrawRowSplits(lengths_generator, splits);
    const int64_t total = splits[batch_size_];

    Tensor* rows = nullptr;
    Tensor* weights = nullptr;
    Tensor* contribution = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({total}), &rows));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({weighted_ ? total : 0}), &weights));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({batch_size_}), &contribution));
    Tensor effects;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_FLOAT, TensorShape({total}), &effects));

    // Every id reads a uniformly drawn column of the alias table (32 MB for a million rows), so
    // on 4 KiB pages nearly every read would also miss the TLB.
    AdviseHugePages(columns.tensor_data().data(), columns.TotalBytes());
    PhiloxRandom ids_generator;
    OP_REQUIRES_OK(ctx, Generator(seeds, 1, &ids_generator));
    OP_REQUIRES_OK(ctx, DrawRows(columns.flat<double>().data(), size, ids_generator, total,
                                 rows->flat<int64_t>().data(), effects.flat<float>().data()));
    if (weighted_) {
      PhiloxRandom weights_generator;
      OP_REQUIRES_OK(ctx, Generator(seeds, 2, &weights_generator));
      DrawWeights(weights_generator, total, weights->flat<float>().data());
    }
    Combine(splits, weighted_ ? weights->flat<float>().data() : nullptr,
            effects.flat<float>().data(), contribution->flat<float>().data());
  }

 private:
  template <typename... Parts>
  absl::Status Error(const Parts&... parts) const {
    return absl::InvalidArgumentError(absl::StrCat("Feature '", feature_name_, "': ", parts...));
  }

  // The generator TensorFlow's stateless ops use for the seed pair seeds[stream].
  static absl::Status Generator(const Tensor& seeds, int stream, PhiloxRandom* generator) {
    // GenerateKey takes the seed pair as its op's input: an aligned [2] int32 or int64 tensor.
    Tensor seed(seeds.dtype(), TensorShape({2}));
    if (seeds.dtype() == tensorflow::DT_INT32) {
      seed.vec<int32_t>().setValues({seeds.matrix<int32_t>()(stream, 0),
                                     seeds.matrix<int32_t>()(stream, 1)});
    } else {
      seed.vec<int64_t>().setValues({seeds.matrix<int64_t>()(stream, 0),
                                     seeds.matrix<int64_t>()(stream, 1)});
    }
    PhiloxRandom::Key key;
    PhiloxRandom::ResultType counter;
    TF_RETURN_IF_ERROR(tensorflow::GenerateKey(seed, &key, &counter));
    *generator = PhiloxRandom(counter, key);
    return absl::OkStatus();
  }

  // Lengths uniform in [min_ids, max_ids] (none drawn when they are equal), as row splits.
  void DrawRowSplits(PhiloxRandom generator, int64_t* splits) const {
    splits[0] = 0;
    const bool drawn = max_ids_ > min_ids_;
    UniformDistribution<PhiloxRandom, int64_t> lengths(min_ids_, max_ids_ + 1);
    constexpr int kGroup = UniformDistribution<PhiloxRandom, int64_t>::kResultElementCount;
    for (int64_t b = 0; b < batch_size_; b += kGroup) {
      const auto group = drawn ? lengths(&generator)
                               : UniformDistribution<PhiloxRandom, int64_t>::ResultType();
      for (int k = 0; k < kGroup && b + k < batch_size_; ++k) {
        splits[b + k + 1] = splits[b + k] + (drawn ? group[k] : max_ids_);
      }
    }
  }

  // Walker's alias method: a uniform column, kept or replaced by its alias; the rank's row under
  // the table's bijection, and the planted effect. The draws of block k + 1 are made, and their
  // rows prefetched, before block k's rows are read: each read has a block's time to arrive.
  absl::Status DrawRows(const double* columns, int64_t size, PhiloxRandom generator,
                        int64_t total, int64_t* rows, float* effects) const {
    struct Block {
      double scaled[kBlock];
      int64_t column[kBlock];
    };
    UniformDistribution<PhiloxRandom, double> uniform;
    const double size_as_double = static_cast<double>(size);
    const double inverse_size = 1.0 / size_as_double;
    const auto draw = [&](int64_t start, Block* block) {
      const int64_t count = std::min(kBlock, total - start);
      for (int64_t i = 0; i < count; i += 2) {
        const auto pair = uniform(&generator);
        for (int64_t k = i; k < std::min(i + 2, count); ++k) {
          block->scaled[k] = pair[k - i] * size_as_double;
          block->column[k] = std::min(static_cast<int64_t>(block->scaled[k]), size - 1);
          __builtin_prefetch(columns + block->column[k] * kColumns);
        }
      }
    };
    Block blocks[2];
    if (total > 0) draw(0, &blocks[0]);
    for (int64_t start = 0, current = 0; start < total; start += kBlock, current ^= 1) {
      if (start + kBlock < total) draw(start + kBlock, &blocks[current ^ 1]);
      const Block& block = blocks[current];
      const int64_t count = std::min(kBlock, total - start);
      for (int64_t k = 0; k < count; ++k) {
        const double* entry = columns + block.column[k] * kColumns;
        const bool kept = block.scaled[k] - static_cast<double>(block.column[k]) < entry[kKeep];
        int64_t rank = block.column[k];
        if (!kept) {
          const double alias = entry[kAlias];
          if (!(alias >= 0.0 && alias < size_as_double)) {
            return Error("alias table entry ", block.column[k], " holds ", alias,
                         ", not a rank below ", size);
          }
          rank = static_cast<int64_t>(alias);
        }
        rows[start + k] = BelowSize(rank * multiplier_ + offset_, size, inverse_size);
        effects[start + k] = static_cast<float>(entry[kept ? kEffect : kAliasEffect]);
      }
    }
    return absl::OkStatus();
  }

  // value % size for 0 <= value < size^2 <= 2^62, without a 64-bit division (its instructions
  // held about a tenth of the op's samples in a profile): the quotient, below 2^31, comes from a
  // double product whose error is far below 1, so it is off by at most one, and the remainder is
  // corrected once.
  static int64_t BelowSize(int64_t value, int64_t size, double inverse_size) {
    const int64_t quotient = static_cast<int64_t>(static_cast<double>(value) * inverse_size);
    const int64_t remainder = value - quotient * size;
    return remainder < 0 ? remainder + size : remainder >= size ? remainder - size : remainder;
  }

  void DrawWeights(PhiloxRandom generator, int64_t total, float* weights) const {
    UniformDistribution<PhiloxRandom, float> uniform;
    constexpr int kGroup = UniformDistribution<PhiloxRandom, float>::kResultElementCount;
    // Two roundings, as TF's stateless_uniform: u * (max - min), then + min.
    const float range = weight_max_ - weight_min_;
    for (int64_t i = 0; i < total; i += kGroup) {
      const auto group = uniform(&generator);
      for (int k = 0; k < kGroup && i + k < total; ++k) {
        const float scaled = group[k] * range;
        weights[i + k] = scaled + weight_min_;
      }
    }
  }

  // Each sample's combined effect: float sums in lookup order, as TF's segment sum takes them,
  // then the division (not the engine's per-id gains of combiner_rule.h, summed in double): the
  // labels the log has always planted.
  void Combine(const int64_t* splits, const float* weights, const float* effects,
               float* contribution) const {
    for (int64_t b = 0; b < batch_size_; ++b) {
      float weighted = 0.0f;
      float norm = 0.0f;
      for (int64_t k = splits[b]; k < splits[b + 1]; ++k) {
        const float weight = weights == nullptr ? 1.0f : weights[k];
        const float term = weight * effects[k];
        weighted += term;
        if (combiner_ == Combiner::kMean) {
          norm += weight;
        } else if (combiner_ == Combiner::kSqrtn) {
          const float square = weight * weight;
          norm += square;
        }
      }
      if (combiner_ == Combiner::kSqrtn) norm = std::sqrt(norm);
      // TF's divide_no_nan: 0 where the divisor is 0.
      contribution[b] = combiner_ == Combiner::kSum ? weighted
                        : norm == 0.0f              ? 0.0f
                                                    : weighted / norm;
    }
  }

  std::string feature_name_;
  int64_t batch_size_ = 0;
  int64_t max_ids_ = 1;
  int64_t min_ids_ = 1;
  bool weighted_ = false;
  Combiner combiner_ = Combiner::kSum;
  int64_t multiplier_ = 0;
  int64_t offset_ = 0;
  float weight_min_ = 0.0f;
  float weight_max_ = 1.0f;
};

REGISTER_KERNEL_BUILDER(Name("TfeSyntheticFeature").Device(::tensorflow::DEVICE_CPU),
                        SyntheticFeatureOp);

}  // namespace
}  // namespace tf_embedding
