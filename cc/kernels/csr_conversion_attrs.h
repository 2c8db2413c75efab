// The attrs of TfeFeaturesToCsr (and TfeFeaturesLookup, which takes the same per feature) as the
// table and feature specs of the conversion, read the same way by its TF kernel and its XLA
// kernel (cc/xla); and their feature inputs as the conversion's views.
#ifndef TF_EMBEDDING_CC_KERNELS_CSR_CONVERSION_ATTRS_H_
#define TF_EMBEDDING_CC_KERNELS_CSR_CONVERSION_ATTRS_H_

#include <vector>

#include "absl/status/status.h"
#include "cc/core/csr_conversion.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tf_embedding {

absl::Status ReadCsrConversionAttrs(tensorflow::OpKernelConstruction* ctx, TableSpec* table,
                                    std::vector<FeatureSpec>* features);

// The attrs of TfeFeaturesLookup, which looks up several tables: each table's spec, and the specs
// of its features (the per-feature attrs list every table's features, table by table;
// table_feature_counts says how many each has).
absl::Status ReadTablesLookupAttrs(tensorflow::OpKernelConstruction* ctx,
                                   std::vector<TableSpec>* tables,
                                   std::vector<std::vector<FeatureSpec>>* features);

// Views the list inputs `ids`, `row_info`, `dense_shapes` and `weights` of `num_features`
// features. The views still have to pass CsrBuilder::AddFeature's checks.
absl::Status ReadFeatureTensors(tensorflow::OpKernelContext* ctx, size_t num_features,
                                std::vector<FeatureTensors>* features);

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_KERNELS_CSR_CONVERSION_ATTRS_H_
