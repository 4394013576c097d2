#include "data/indexed_dataset.hpp"

#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include "base/check.hpp"

namespace troupe {
namespace {

static_assert(std::endian::native == std::endian::little, "indexed datasets are little-endian");

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
void append(std::vector<uint8_t>& out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

bool is_integer(TokenDtype t) { return t != TokenDtype::f32 && t != TokenDtype::f64; }

// Converts int32 tokens to `T`, refusing any the type cannot hold.
template <typename T>
void convert(std::span<const int32_t> in, std::vector<uint8_t>& out, const std::string& prefix) {
  out.resize(in.size() * sizeof(T));
  T* dst = reinterpret_cast<T*>(out.data());
  for (size_t i = 0; i < in.size(); ++i) {
    const int64_t v = in[i];
    if (v < int64_t(std::numeric_limits<T>::min()) || v > int64_t(std::numeric_limits<T>::max()))
      TROUPE_FAIL("indexed dataset '", prefix, "': token id ", v, " does not fit its dtype (range ",
                  int64_t(std::numeric_limits<T>::min()), "..", int64_t(std::numeric_limits<T>::max()), ")");
    dst[i] = T(v);
  }
}

template <typename T>
void widen(const uint8_t* src, int64_t n, int32_t* out) {
  const T* p = reinterpret_cast<const T*>(src);  // aligned: open() checks pointers % itemsize
  // NOLINTNEXTLINE(bugprone-signed-char-misuse): an int8 dataset holds signed token ids
  for (int64_t i = 0; i < n; ++i) out[i] = int32_t(p[i]);
}

}  // namespace

size_t token_dtype_size(TokenDtype t) {
  switch (t) {
    case TokenDtype::u8:
    case TokenDtype::i8:
      return 1;
    case TokenDtype::i16:
    case TokenDtype::u16:
      return 2;
    case TokenDtype::i32:
    case TokenDtype::f32:
      return 4;
    case TokenDtype::i64:
    case TokenDtype::f64:
      return 8;
  }
  TROUPE_FAIL("unknown token dtype code ", int(t));
}

const char* token_dtype_name(TokenDtype t) {
  switch (t) {
    case TokenDtype::u8:
      return "uint8";
    case TokenDtype::i8:
      return "int8";
    case TokenDtype::i16:
      return "int16";
    case TokenDtype::i32:
      return "int32";
    case TokenDtype::i64:
      return "int64";
    case TokenDtype::f64:
      return "float64";
    case TokenDtype::f32:
      return "float32";
    case TokenDtype::u16:
      return "uint16";
  }
  return "unknown";
}

bool token_dtype_known(uint8_t code) { return code >= 1 && code <= 8; }

TokenDtype optimal_token_dtype(int64_t vocab_size) { return vocab_size < 65500 ? TokenDtype::u16 : TokenDtype::i32; }

std::string index_file_path(const std::string& path_prefix) { return path_prefix + ".idx"; }
std::string data_file_path(const std::string& path_prefix) { return path_prefix + ".bin"; }

// ---------------------------------------------------------------------------------------------
// Builder

IndexedDatasetBuilder::IndexedDatasetBuilder(std::string path_prefix, TokenDtype dtype)
    : prefix_(std::move(path_prefix)), dtype_(dtype), bin_(data_file_path(prefix_), size_t(4) << 20) {
  TROUPE_CHECK(is_integer(dtype), "indexed dataset '", prefix_, "': tokens need an integer dtype, got ",
               token_dtype_name(dtype));
}

void IndexedDatasetBuilder::write_tokens(std::span<const int32_t> tokens) {
  switch (dtype_) {
    case TokenDtype::u8:
      convert<uint8_t>(tokens, scratch_, prefix_);
      break;
    case TokenDtype::i8:
      convert<int8_t>(tokens, scratch_, prefix_);
      break;
    case TokenDtype::i16:
      convert<int16_t>(tokens, scratch_, prefix_);
      break;
    case TokenDtype::u16:
      convert<uint16_t>(tokens, scratch_, prefix_);
      break;
    case TokenDtype::i32:
      convert<int32_t>(tokens, scratch_, prefix_);
      break;
    case TokenDtype::i64:
      convert<int64_t>(tokens, scratch_, prefix_);
      break;
    default:
      TROUPE_FAIL("unreachable");
  }
  bin_.write(scratch_.data(), scratch_.size());
  tokens_ += int64_t(tokens.size());
}

void IndexedDatasetBuilder::add_item(std::span<const int32_t> tokens) {
  TROUPE_CHECK(!finalized_, "indexed dataset '", prefix_, "': add after finalize()");
  TROUPE_CHECK(tokens.size() <= size_t(std::numeric_limits<int32_t>::max()), "indexed dataset '", prefix_,
               "': a sequence of ", tokens.size(), " tokens does not fit the int32 length field");
  write_tokens(tokens);
  lengths_.push_back(int32_t(tokens.size()));
}

void IndexedDatasetBuilder::end_document() { document_index_.push_back(int64_t(lengths_.size())); }

void IndexedDatasetBuilder::add_document(std::span<const int32_t> tokens) {
  add_item(tokens);
  end_document();
}

void IndexedDatasetBuilder::add_document(std::span<const int32_t> tokens, std::span<const int32_t> sequence_lengths) {
  TROUPE_CHECK(!finalized_, "indexed dataset '", prefix_, "': add after finalize()");
  int64_t sum = 0;
  for (int32_t n : sequence_lengths) {
    TROUPE_CHECK(n >= 0, "indexed dataset '", prefix_, "': negative sequence length ", n);
    sum += n;
  }
  TROUPE_CHECK(sum == int64_t(tokens.size()), "indexed dataset '", prefix_, "': sequence lengths sum to ", sum,
               " but the document has ", tokens.size(), " tokens");
  write_tokens(tokens);
  lengths_.insert(lengths_.end(), sequence_lengths.begin(), sequence_lengths.end());
  end_document();
}

void IndexedDatasetBuilder::finalize() {
  TROUPE_CHECK(!finalized_, "indexed dataset '", prefix_, "': finalize() called twice");
  const int64_t S = int64_t(lengths_.size());
  const int64_t D = int64_t(document_index_.size());
  std::vector<uint8_t> idx;
  idx.reserve(kIndexHeaderBytes + size_t(S) * 12 + size_t(D) * 8);
  idx.insert(idx.end(), kIndexMagic, kIndexMagic + 9);
  append<uint64_t>(idx, 1);
  append<uint8_t>(idx, uint8_t(dtype_));
  append<uint64_t>(idx, uint64_t(S));
  append<uint64_t>(idx, uint64_t(D));
  for (int32_t n : lengths_) append<int32_t>(idx, n);
  const int64_t itemsize = int64_t(token_dtype_size(dtype_));
  int64_t pointer = 0;
  for (int32_t n : lengths_) {
    append<int64_t>(idx, pointer);
    pointer += int64_t(n) * itemsize;
  }
  for (int64_t d : document_index_) append<int64_t>(idx, d);

  AtomicFile idx_file(index_file_path(prefix_));
  idx_file.write(idx.data(), idx.size());
  idx_file.close();
  bin_.close();
  // Order matters: with the old .idx gone first, a crash between the renames leaves a .bin
  // with no .idx (visibly incomplete), never a new .bin beside a stale .idx.
  const std::string idx_path = index_file_path(prefix_);
  if (::unlink(idx_path.c_str()) != 0 && errno != ENOENT)
    fail_errno("unlink", __FILE__, __LINE__, str_cat("cannot remove the old '", idx_path, "'"));
  bin_.commit();
  idx_file.commit();
  finalized_ = true;
}

// ---------------------------------------------------------------------------------------------
// Reader

IndexedDataset IndexedDataset::open(const std::string& path_prefix) {
  IndexedDataset ds;
  ds.prefix_ = path_prefix;
  const std::string idx_path = index_file_path(path_prefix);
  const std::string bin_path = data_file_path(path_prefix);
  ds.idx_ = MappedFile::open(idx_path);
  const uint8_t* p = ds.idx_.data();
  const uint64_t size = ds.idx_.size();
  const std::string what = str_cat("'", idx_path, "'");

  TROUPE_CHECK(size >= 9 && std::memcmp(p, kIndexMagic, 9) == 0, what,
               " is not a Megatron indexed dataset index: it does not start with the magic \"MMIDIDX\\0\\0\"",
               size < 9 ? str_cat(" (the file has only ", size, " bytes)") : std::string());
  TROUPE_CHECK(size >= kIndexHeaderBytes, what, " is truncated: ", size, " bytes, shorter than the ", kIndexHeaderBytes,
               "-byte header");
  const uint64_t version = load<uint64_t>(p + 9);
  TROUPE_CHECK(version == 1, what, ": unsupported index version ", version, " (only version 1 exists)");
  const uint8_t code = p[17];
  TROUPE_CHECK(token_dtype_known(code), what, ": unknown dtype code ", int(code), " (Megatron's codes are 1..8)");
  ds.dtype_ = TokenDtype(code);
  const uint64_t S = load<uint64_t>(p + 18);
  const uint64_t D = load<uint64_t>(p + 26);
  // Bound the counts before multiplying them: each takes at least one byte per entry.
  TROUPE_CHECK(S <= size && D <= size, what, " is truncated or corrupt: the header claims ", S, " sequences and ", D,
               " document-index entries, more than a ", size, "-byte file can hold");
  const uint64_t expected = kIndexHeaderBytes + S * 4 + S * 8 + D * 8;
  TROUPE_CHECK(size == expected || size == expected + S, what, " has ", size, " bytes but its header (", S,
               " sequences, ", D, " document-index entries) needs ", expected,
               size < expected ? ": the file is truncated" : ": the file has trailing bytes");
  ds.has_modes_ = S > 0 && size == expected + S;
  ds.num_sequences_ = int64_t(S);
  ds.num_document_entries_ = int64_t(D);
  ds.lengths_at_ = kIndexHeaderBytes;
  ds.pointers_at_ = ds.lengths_at_ + S * 4;
  ds.documents_at_ = ds.pointers_at_ + S * 8;

  TROUPE_CHECK(D >= 1, what, ": the document index is empty (it must hold at least the leading 0)");
  TROUPE_CHECK(ds.document_index(0) == 0, what, ": the document index starts at ", ds.document_index(0), ", not 0");
  for (int64_t j = 1; j < int64_t(D); ++j) {
    const int64_t prev = ds.document_index(j - 1), cur = ds.document_index(j);
    TROUPE_CHECK(cur >= prev, what, ": the document index decreases at entry ", j, " (", prev, " then ", cur, ")");
  }
  TROUPE_CHECK(ds.document_index(int64_t(D) - 1) == int64_t(S), what, ": the document index ends at ",
               ds.document_index(int64_t(D) - 1), " but there are ", S, " sequences");

  ds.bin_ = MappedFile::open(bin_path);
  const int64_t bin_size = int64_t(ds.bin_.size());
  const int64_t itemsize = int64_t(token_dtype_size(ds.dtype_));
  int64_t tokens = 0;
  for (int64_t i = 0; i < int64_t(S); ++i) {
    const int64_t n = ds.sequence_length(i), ptr = ds.sequence_pointer(i);
    TROUPE_CHECK(n >= 0, what, ": sequence ", i, " has a negative length ", n);
    TROUPE_CHECK(ptr >= 0 && ptr % itemsize == 0, what, ": sequence ", i, " has a bad byte pointer ", ptr,
                 " (must be a non-negative multiple of ", itemsize, ")");
    TROUPE_CHECK(ptr <= bin_size && n <= (bin_size - ptr) / itemsize, "'", bin_path, "' is truncated or does not ",
                 "belong to its .idx: sequence ", i, " (", n, " tokens at byte ", ptr, ") ends past the file's ",
                 bin_size, " bytes");
    tokens += n;
  }
  ds.num_tokens_ = tokens;
  return ds;
}

int32_t IndexedDataset::sequence_length(int64_t i) const {
  return load<int32_t>(idx_.data() + lengths_at_ + size_t(i) * 4);
}

int64_t IndexedDataset::sequence_pointer(int64_t i) const {
  return load<int64_t>(idx_.data() + pointers_at_ + size_t(i) * 8);
}

int64_t IndexedDataset::document_index(int64_t j) const {
  return load<int64_t>(idx_.data() + documents_at_ + size_t(j) * 8);
}

std::vector<int32_t> IndexedDataset::sequence_lengths() const {
  std::vector<int32_t> out(static_cast<size_t>(num_sequences_));
  if (!out.empty()) std::memcpy(out.data(), idx_.data() + lengths_at_, out.size() * 4);
  return out;
}

void IndexedDataset::read(int64_t i, int64_t offset, int64_t length, int32_t* out) const {
  TROUPE_CHECK(i >= 0 && i < num_sequences_, "indexed dataset '", prefix_, "': sequence ", i, " out of range [0, ",
               num_sequences_, ")");
  const int64_t n = sequence_length(i);
  TROUPE_CHECK(offset >= 0 && length >= 0 && offset + length <= n, "indexed dataset '", prefix_, "': tokens [", offset,
               ", ", offset + length, ") of sequence ", i, " out of its ", n);
  const uint8_t* src = bin_.data() + sequence_pointer(i) + offset * int64_t(token_dtype_size(dtype_));
  if (length == 0) return;
  switch (dtype_) {
    case TokenDtype::u8:
      widen<uint8_t>(src, length, out);
      break;
    case TokenDtype::i8:
      widen<int8_t>(src, length, out);
      break;
    case TokenDtype::i16:
      widen<int16_t>(src, length, out);
      break;
    case TokenDtype::u16:
      widen<uint16_t>(src, length, out);
      break;
    case TokenDtype::i32:
      std::memcpy(out, src, size_t(length) * 4);
      break;
    case TokenDtype::i64:
      widen<int64_t>(src, length, out);
      break;
    default:
      TROUPE_FAIL("indexed dataset '", prefix_, "' holds ", token_dtype_name(dtype_), " values, not token ids");
  }
}

std::vector<int32_t> IndexedDataset::get(int64_t i, int64_t offset, int64_t length) const {
  TROUPE_CHECK(i >= 0 && i < num_sequences_, "indexed dataset '", prefix_, "': sequence ", i, " out of range [0, ",
               num_sequences_, ")");
  if (length < 0) length = sequence_length(i) - offset;
  std::vector<int32_t> out(size_t(std::max<int64_t>(length, 0)));
  read(i, offset, length, out.data());
  return out;
}

}  // namespace troupe
