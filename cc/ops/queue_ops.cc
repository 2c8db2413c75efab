// The engine's queue check (tf_embedding/sharded/queues.py): one op where the graph would need
// a size op per queue, their sum, a comparison and an assertion before every queue op.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"

namespace tf_embedding {
namespace {

REGISTER_OP("TfeCheckQueueSizes")
    .Input("queues: N * resource")
    .Attr("N: int >= 1")
    .Attr("min_size: int = 0")
    .Attr("max_size: int")
    .Attr("message: string")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
Fails with InvalidArgumentError(message) unless the elements the N queues (FIFOQueueV2 handles)
hold together number from min_size to max_size; does nothing else. A queue op that runs after
it (a control dependency) then cannot block: an enqueue checked to find room, a dequeue checked
to find an element.
)doc");

}  // namespace
}  // namespace tf_embedding
