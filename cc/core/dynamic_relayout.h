// A dynamic table's exported row records placed for an index of another block layout (block
// count or partition strategy, the same capacity; docs/dynamic_vocabulary.md): each admitted
// key goes to its block under the index's layout, the block's keys in the order of their saved
// rows into its first slots, so a restore can move each key's table rows with it.
#ifndef TF_EMBEDDING_CC_CORE_DYNAMIC_RELAYOUT_H_
#define TF_EMBEDDING_CC_CORE_DYNAMIC_RELAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cc/core/dynamic_index.h"
#include "cc/core/status.h"

namespace tf_embedding {

// `rows` (an export's row records) placed for `index`'s layout into `placed`, with every
// admitted key's saved row and new row in `saved_rows` and `new_rows` (in saved-row order).
// When every key already lies in its block (the same layout), or the capacities differ (which
// Import refuses, naming both), `placed` is `rows` and no row moves. Fails, naming `table`, the
// block and both counts, when a block would hold more keys than its slots.
Status PlaceRows(const std::string& table, const DynamicIndex& index,
                 const std::vector<KeyRecord>& rows, std::vector<KeyRecord>* placed,
                 std::vector<int64_t>* saved_rows, std::vector<int64_t>* new_rows);

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_DYNAMIC_RELAYOUT_H_
