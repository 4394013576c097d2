// Megatron `.bin`/`.idx` datasets (data/indexed_dataset.*). Input: a little-endian u32 N, then
// N bytes of .idx, then the .bin. Every sequence the dataset accepts is read back whole.
#include <cstdint>
#include <cstring>
#include <exception>

#include "data/indexed_dataset.hpp"
#include "fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t idx_size = 0;
  std::memcpy(&idx_size, data, 4);
  const std::string_view rest = troupe::fuzz::as_text(data + 4, size - 4);
  idx_size = uint32_t(std::min<size_t>(idx_size, rest.size()));
  const std::string prefix = troupe::fuzz::scratch_dir() + "/ds";
  troupe::fuzz::write_scratch_file("ds.idx", rest.substr(0, idx_size));
  troupe::fuzz::write_scratch_file("ds.bin", rest.substr(idx_size));
  try {
    const troupe::IndexedDataset ds = troupe::IndexedDataset::open(prefix);
    for (int64_t i = 0; i < ds.num_sequences(); ++i) (void)ds.get(i);
    for (int64_t j = 0; j <= ds.num_documents(); ++j) (void)ds.document_index(j);
  } catch (const std::exception&) {}
  return 0;
}
