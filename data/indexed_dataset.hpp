// Megatron-LM's indexed dataset: token sequences in `{prefix}.bin` (raw little-endian arrays,
// concatenated, no header) described by `{prefix}.idx` (format "MMIDIDX", version 1), byte for
// byte the files megatron/core/datasets/indexed_dataset.py reads and writes.
//
// .idx layout (little-endian, no padding):
//   0   9      magic "MMIDIDX\0\0"
//   9   u64    version = 1
//   17  u8     dtype code of the tokens (TokenDtype)
//   18  u64    S = number of sequences
//   26  u64    D = number of document-index entries (documents + 1)
//   34  i32[S] sequence lengths in tokens
//   ..  i64[S] sequence pointers: byte offset of each sequence in .bin
//   ..  i64[D] document index: 0, then the exclusive end (a sequence number) of each document
//   ..  i8[S]  sequence modes, only in multimodal datasets (accepted, not used)
// A sequence is a whole document unless the text was split into sentences; an empty document
// is a repeated document-index entry.
//
//   IndexedDatasetBuilder b("out/corpus_text_document", optimal_token_dtype(tok->vocab_size()));
//   b.add_document(ids);                 // one sequence, one document
//   b.finalize();                        // .bin and .idx appear together, complete
//
//   IndexedDataset ds = IndexedDataset::open("out/corpus_text_document");   // validated
//   std::vector<int32_t> doc0 = ds.get(0);
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "storage/atomic_file.hpp"
#include "storage/mapped_file.hpp"

namespace troupe {

// Megatron's DType codes (indexed_dataset.py, class DType).
enum class TokenDtype : uint8_t { u8 = 1, i8 = 2, i16 = 3, i32 = 4, i64 = 5, f64 = 6, f32 = 7, u16 = 8 };

size_t token_dtype_size(TokenDtype t);
const char* token_dtype_name(TokenDtype t);  // numpy's name: "uint16", "int32", ...
bool token_dtype_known(uint8_t code);
// What preprocess_data.py picks: uint16 when the vocabulary has fewer than 65500 ids, else int32.
TokenDtype optimal_token_dtype(int64_t vocab_size);

std::string index_file_path(const std::string& path_prefix);  // prefix + ".idx"
std::string data_file_path(const std::string& path_prefix);   // prefix + ".bin"

inline constexpr char kIndexMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr size_t kIndexHeaderBytes = 34;

// Writes a dataset. Tokens go to a temporary file beside `{prefix}.bin` as they come;
// finalize() writes the .idx under a temporary name too, then removes any old `{prefix}.idx`, renames the .bin and last
// the .idx, so at no moment do a .bin and .idx that do not belong together both exist. Destroyed without finalize() (an
// error upstream), it leaves no file behind.
class IndexedDatasetBuilder {
 public:
  // Integer dtypes only; throws on a token outside the dtype's range.
  IndexedDatasetBuilder(std::string path_prefix, TokenDtype dtype);

  // One sequence (a sentence, or a whole document); ends no document.
  void add_item(std::span<const int32_t> tokens);
  // Closes the current document (the sequences added since the last one).
  void end_document();
  // A document of one sequence: add_item + end_document.
  void add_document(std::span<const int32_t> tokens);
  // A document of several sequences, `tokens` their concatenation (Megatron's add_document).
  void add_document(std::span<const int32_t> tokens, std::span<const int32_t> sequence_lengths);

  void finalize();

  const std::string& path_prefix() const { return prefix_; }
  TokenDtype dtype() const { return dtype_; }
  int64_t num_sequences() const { return int64_t(lengths_.size()); }
  int64_t num_documents() const { return int64_t(document_index_.size()) - 1; }
  int64_t num_tokens() const { return tokens_; }

 private:
  void write_tokens(std::span<const int32_t> tokens);

  std::string prefix_;
  TokenDtype dtype_;
  AtomicFile bin_;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> document_index_{0};
  int64_t tokens_ = 0;
  std::vector<uint8_t> scratch_;
  bool finalized_ = false;
};

// A read-only, memory-mapped dataset. open() checks the header, the .idx size against S and D,
// the document index (starts at 0, never decreases, ends at S), and every sequence's length
// and pointer against the .bin size, so a truncated, mismatched or foreign file is refused
// with an error naming the file and the fault instead of being read as garbage later.
class IndexedDataset {
 public:
  static IndexedDataset open(const std::string& path_prefix);

  const std::string& path_prefix() const { return prefix_; }
  TokenDtype dtype() const { return dtype_; }
  int64_t num_sequences() const { return num_sequences_; }
  int64_t num_documents() const { return num_document_entries_ - 1; }
  int64_t num_tokens() const { return num_tokens_; }
  bool has_sequence_modes() const { return has_modes_; }

  int32_t sequence_length(int64_t i) const;
  int64_t sequence_pointer(int64_t i) const;
  // Entry j of the document index, j in [0, num_documents()].
  int64_t document_index(int64_t j) const;
  // All sequence lengths, copied out of the (unaligned) index.
  std::vector<int32_t> sequence_lengths() const;

  // Tokens [offset, offset + length) of sequence i as int32 into out[0, length).
  void read(int64_t i, int64_t offset, int64_t length, int32_t* out) const;
  // length < 0: to the end of the sequence.
  std::vector<int32_t> get(int64_t i, int64_t offset = 0, int64_t length = -1) const;

 private:
  IndexedDataset() = default;

  std::string prefix_;
  MappedFile idx_;
  MappedFile bin_;
  TokenDtype dtype_ = TokenDtype::i32;
  int64_t num_sequences_ = 0;
  int64_t num_document_entries_ = 0;
  int64_t num_tokens_ = 0;
  bool has_modes_ = false;
  size_t lengths_at_ = 0, pointers_at_ = 0, documents_at_ = 0;  // byte offsets in the .idx
};

}  // namespace troupe
