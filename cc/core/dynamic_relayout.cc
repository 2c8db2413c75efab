#include "cc/core/dynamic_relayout.h"

#include "cc/core/errors.h"

namespace tf_embedding {

Status PlaceRows(const std::string& table, const DynamicIndex& index,
                 const std::vector<KeyRecord>& rows, std::vector<KeyRecord>* placed,
                 std::vector<int64_t>* saved_rows, std::vector<int64_t>* new_rows) {
  *placed = rows;
  saved_rows->clear();
  new_rows->clear();
  const int64_t capacity = static_cast<int64_t>(rows.size());
  if (capacity != index.capacity()) return Status();
  std::vector<int64_t> keys_of_block(index.num_blocks(), 0);
  bool in_place = true;
  for (int64_t row = 0; row < capacity; ++row) {
    if (rows[row].key < 0) continue;
    const int block = index.BlockOf(rows[row].key);
    ++keys_of_block[block];
    in_place = in_place && block == index.BlockOfRow(row);
  }
  if (in_place) return Status();
  const std::vector<int64_t>& block_rows = index.options().block_rows;
  for (int block = 0; block < index.num_blocks(); ++block) {
    if (keys_of_block[block] > block_rows[block]) {
      return TableError(table, "the checkpoint's dynamic index holds ", keys_of_block[block],
                        " keys that belong to block ", block, " of this table's ",
                        index.num_blocks(), " (partition_strategy ",
                        index.options().strided ? "'mod'" : "'div'", "), which has ",
                        block_rows[block], " rows: restore it onto a layout whose blocks hold "
                        "its keys (fewer blocks, or the checkpoint's own)");
    }
  }
  placed->assign(capacity, KeyRecord{-1, 0, 0});
  std::vector<int64_t> next_slot(index.num_blocks(), 0);
  for (int64_t row = 0; row < capacity; ++row) {
    if (rows[row].key < 0) continue;
    const int block = index.BlockOf(rows[row].key);
    const int64_t new_row = index.TableRow(block, next_slot[block]++);
    (*placed)[new_row] = rows[row];
    saved_rows->push_back(row);
    new_rows->push_back(new_row);
  }
  return Status();
}

}  // namespace tf_embedding
