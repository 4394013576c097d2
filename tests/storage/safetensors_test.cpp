// Safetensors reader and writer: exact bytes against the spec, round trips of every
// dtype, and rejection of corrupt files with errors naming the file and the tensor.
#include "storage/safetensors.hpp"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "kernels/half.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class Safetensors : public ::testing::Test {
 protected:
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  TempDir tmp_{"st"};
  const fs::path& dir_ = tmp_.path();
};

std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char(uint8_t(v >> (8 * i)));
  return s;
}

std::string f32_bytes(std::initializer_list<float> values) {
  std::string s;
  for (float v : values) s.append(reinterpret_cast<const char*>(&v), 4);
  return s;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good());
}

// A file laid out by hand: length, header (unpadded, as other writers may leave it), data.
std::string st_file(const std::string& header, const std::string& data) {
  return u64_le(header.size()) + header + data;
}

// Expects `fn` to throw troupe::Error whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown; expected one mentioning '" << *parts.begin() << "'";
  } catch (const Error& e) {
    for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

// ---- exact bytes --------------------------------------------------------------------------

TEST_F(Safetensors, OneF32TensorHasTheSpecsExactBytes) {
  write_safetensors(file("x.safetensors"), {{"x", Tensor::host_f32({2}, {1.0f, 2.0f})}});
  const std::string json = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_EQ(json.size(), 54u);
  const std::string header = json + "  ";  // padded to 56, a multiple of 8
  const std::string expected = u64_le(56) + header + std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);
  EXPECT_EQ(read_bytes(file("x.safetensors")), expected);
}

// The layouts the reference serializer's own tests expect (huggingface/safetensors,
// safetensors/src/tensor.rs: test_serialization_forced_alignement and test_empty).
TEST_F(Safetensors, MatchesReferenceSerializerLayouts) {
  Tensor t = Tensor::host_f32({1, 1, 2, 3}, {0, 1, 2, 3, 4, 5});
  write_safetensors(file("a.safetensors"), {{"attn0", t}});
  const std::string json = R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})";
  EXPECT_EQ(read_bytes(file("a.safetensors")),
            u64_le(72) + json + std::string(72 - json.size(), ' ') + f32_bytes({0, 1, 2, 3, 4, 5}));

  write_safetensors(file("empty.safetensors"), {});
  EXPECT_EQ(read_bytes(file("empty.safetensors")), u64_le(8) + "{}      ");

  write_safetensors(file("meta.safetensors"), {}, {{"framework", "pt"}});
  EXPECT_EQ(read_bytes(file("meta.safetensors")), u64_le(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
  EXPECT_EQ(SafetensorsFile::open(file("meta.safetensors")).metadata().at("framework"), "pt");
}

TEST_F(Safetensors, ReadsAHandWrittenFile) {
  // Pretty-printed header, keys not in offset order, BF16 then I32 then an empty tensor.
  const std::string header = R"({
    "ids": {"dtype": "I32", "shape": [2], "data_offsets": [4, 12]},
    "__metadata__": {"format": "pt"},
    "w": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]},
    "none": {"dtype": "F16", "shape": [0, 5], "data_offsets": [12, 12]}
  })";
  // bf16 1.0 = 0x3f80, -2.0 = 0xc000; i32 7, -1.
  const std::string data("\x80\x3f\x00\xc0\x07\x00\x00\x00\xff\xff\xff\xff", 12);
  // Pad so the buffer starts 8-aligned and view("ids") is allowed.
  write_bytes(file("h.safetensors"), st_file(header + std::string((8 - header.size() % 8) % 8, ' '), data));

  SafetensorsFile f = SafetensorsFile::open(file("h.safetensors"));
  EXPECT_EQ(f.names(), (std::vector<std::string>{"w", "ids", "none"}));
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  EXPECT_EQ(f.info("w").dtype, DType::bf16);
  EXPECT_EQ(f.info("w").dtype_name, "BF16");
  EXPECT_EQ(f.info("ids").nbytes(), 8u);
  Tensor w = f.read_f32("w");
  EXPECT_EQ(w.at(0), 1.0f);
  EXPECT_EQ(w.at(1), -2.0f);
  Tensor ids = f.view("ids");
  EXPECT_EQ(ids.dtype(), DType::i32);
  EXPECT_EQ(ids.data_as<int32_t>()[0], 7);
  EXPECT_EQ(ids.data_as<int32_t>()[1], -1);
  EXPECT_EQ(f.read_f32("none").shape(), (Shape{0, 5}));
}

// ---- round trips --------------------------------------------------------------------------

TEST_F(Safetensors, RoundTripsEveryDtypeAndEdgeShape) {
  Tensor f32 = random_normal({3, 5}, 1);
  Tensor bf16 = Tensor::host(DType::bf16, {4, 2});
  Tensor f16 = Tensor::host(DType::f16, {7});
  Tensor f32_of_bf16 = random_normal({4, 2}, 2), f32_of_f16 = random_normal({7}, 3);
  for (int64_t i = 0; i < 8; ++i) bf16.data_as<uint16_t>()[i] = f32_to_bf16_bits(f32_of_bf16.at(i));
  for (int64_t i = 0; i < 7; ++i) f16.data_as<uint16_t>()[i] = f32_to_f16_bits(f32_of_f16.at(i));
  Tensor i32 = random_tokens({2, 3}, 4, 50257);
  Tensor i64 = Tensor::host(DType::i64, {2});
  i64.data_as<int64_t>()[0] = int64_t(1) << 40;
  i64.data_as<int64_t>()[1] = -3;
  Tensor u8 = Tensor::host(DType::u8, {3});
  std::memcpy(u8.data(), "abc", 3);
  Tensor scalar = Tensor::host_f32({}, {42.0f});
  Tensor empty = Tensor::host(DType::f32, {3, 0});

  // Larger elements first, as the reference writer orders them, so every view is aligned.
  const std::vector<std::pair<std::string, Tensor>> tensors = {{"i64", i64},       {"f32", f32},     {"i32", i32},
                                                               {"scalar", scalar}, {"empty", empty}, {"bf16", bf16},
                                                               {"f16", f16},       {"u8", u8}};
  const std::map<std::string, std::string> metadata = {
      {"step", "100"}, {"quote\"back\\slash", "new\nline\ttab"}, {"unicode", "h\xc3\xa9llo"}};
  write_safetensors(file("rt.safetensors"), tensors, metadata);
  EXPECT_FALSE(fs::exists(file("rt.safetensors.tmp")));

  SafetensorsFile f = SafetensorsFile::open(file("rt.safetensors"));
  EXPECT_EQ(f.metadata(), metadata);
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors) names.push_back(name);
  EXPECT_EQ(f.names(), names);  // buffer order is the given order
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(f.has(name));
    EXPECT_EQ(f.info(name).dtype, t.dtype());
    EXPECT_EQ(f.info(name).shape, t.shape());
    EXPECT_EQ(f.info(name).nbytes(), t.nbytes());
    for (const Tensor& back : {f.view(name), f.read(name)}) {
      EXPECT_EQ(back.dtype(), t.dtype());
      EXPECT_EQ(back.shape(), t.shape());
      EXPECT_EQ(back.device(), DeviceKind::cpu);
      EXPECT_EQ(std::memcmp(back.data(), t.data(), t.nbytes()), 0);
    }
  }
  EXPECT_FALSE(f.has("missing"));
  EXPECT_EQ(f.info("scalar").shape, Shape{});
  EXPECT_EQ(f.read_f32("scalar").at(0), 42.0f);
  EXPECT_EQ(max_abs_diff(f.read_f32("bf16"), round_through(f32_of_bf16, DType::bf16)), 0.0);
  EXPECT_EQ(max_abs_diff(f.read_f32("f16"), round_through(f32_of_f16, DType::f16)), 0.0);
  EXPECT_EQ(max_abs_diff(f.expect("f32", {3, 5}), f32), 0.0);
}

TEST_F(Safetensors, OverwritesAtomicallyAndKeepsTheOldFileOnFailure) {
  const std::string path = file("w.safetensors");
  write_safetensors(path, {{"a", Tensor::host_f32({1}, {1.0f})}});
  write_safetensors(path, {{"b", Tensor::host_f32({2}, {2.0f, 3.0f})}});
  EXPECT_EQ(SafetensorsFile::open(path).names(), std::vector<std::string>{"b"});

  // A device tensor is refused before anything is written.
  int dummy = 0;
  Tensor on_gpu = Tensor::wrap(&dummy, DType::i32, {1}, DeviceKind::cuda);
  expect_error([&] { write_safetensors(path, {{"gpu", on_gpu}}); }, {path, "'gpu'", "host tensor"});
  Tensor one = Tensor::host_f32({1}, {1.0f});
  expect_error([&] { write_safetensors(path, {{"a", one}, {"a", one}}); }, {path, "'a'", "twice"});
  expect_error([&] { write_safetensors(path, {{"__metadata__", one}}); }, {path, "reserved"});
  expect_error([&] { write_safetensors(path, {{"u", Tensor()}}); }, {path, "'u'", "undefined"});
  EXPECT_EQ(SafetensorsFile::open(path).names(), std::vector<std::string>{"b"});
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  const std::string nowhere = file("no/such/dir/x.safetensors");
  expect_error(
      [&] {
        write_safetensors(nowhere, {{"a", Tensor::host_f32({1}, {1.0f})}});
      },
      {nowhere + ".tmp", "No such file or directory"});
}

// ---- lookups ------------------------------------------------------------------------------

TEST_F(Safetensors, LookupErrorsNameTheTensorAndTheFile) {
  const std::string path = file("l.safetensors");
  write_safetensors(path, {{"wte", Tensor::host_f32({2, 3}, {1, 2, 3, 4, 5, 6})}, {"ids", random_tokens({2}, 1, 9)}});
  SafetensorsFile f = SafetensorsFile::open(path);
  expect_error([&] { f.info("wpe"); }, {path, "'wpe'", "no such tensor", "'wte'"});
  expect_error([&] { f.view("wpe"); }, {path, "'wpe'"});
  expect_error([&] { f.expect("wpe", {2, 3}); }, {path, "'wpe'", "no such tensor"});
  expect_error([&] { f.expect("wte", {3, 2}); }, {path, "'wte'", "[2, 3]", "[3, 2]"});
  expect_error([&] { f.read_f32("ids"); }, {path, "'ids'", "I32"});
}

TEST_F(Safetensors, MisalignedViewIsRefusedButReadsWork) {
  Tensor b = Tensor::host(DType::bf16, {1});
  b.data_as<uint16_t>()[0] = f32_to_bf16_bits(0.5f);
  const std::string path = file("m.safetensors");
  write_safetensors(path, {{"b", b}, {"x", Tensor::host_f32({2}, {1.0f, 2.0f})}});  // x at buffer offset 2
  SafetensorsFile f = SafetensorsFile::open(path);
  expect_error([&] { f.view("x"); }, {path, "'x'", "aligned"});
  EXPECT_EQ(f.read_f32("x").at(1), 2.0f);
  EXPECT_EQ(f.read("x").data_as<float>()[0], 1.0f);
  EXPECT_EQ(f.read_f32("b").at(0), 0.5f);
}

TEST_F(Safetensors, SpecDtypesWithoutATroupeDtypeOpenButCannotBeRead) {
  const std::string path = file("f64.safetensors");
  write_bytes(path, st_file(R"({"d":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", std::string(8, '\0')));
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.info("d").dtype_name, "F64");
  EXPECT_FALSE(f.info("d").dtype.has_value());
  expect_error([&] { f.view("d"); }, {path, "'d'", "F64"});
  expect_error([&] { f.read_f32("d"); }, {path, "'d'", "F64"});
}

// ---- corrupt files ------------------------------------------------------------------------

TEST_F(Safetensors, RejectsTruncatedData) {
  const std::string path = file("t.safetensors");
  write_safetensors(path, {{"first", Tensor::host_f32({2}, {1, 2})}, {"second", Tensor::host_f32({3}, {3, 4, 5})}});
  const std::string whole = read_bytes(path);

  write_bytes(path, whole.substr(0, whole.size() - 4));  // cut into "second"
  expect_error([&] { SafetensorsFile::open(path); }, {path, "'second'", "truncated"});
  write_bytes(path, whole.substr(0, whole.size() - 16));  // cut into "first"
  expect_error([&] { SafetensorsFile::open(path); }, {path, "'first'", "truncated"});
}

TEST_F(Safetensors, RejectsBadHeaderLengths) {
  const std::string path = file("h.safetensors");
  write_bytes(path, "");
  expect_error([&] { SafetensorsFile::open(path); }, {path, "shorter than the 8-byte header length"});
  write_bytes(path, u64_le(100) + "{}");
  expect_error([&] { SafetensorsFile::open(path); }, {path, "header length 100", "10-byte file"});
  write_bytes(path, u64_le(~uint64_t(0)) + "{}");
  expect_error([&] { SafetensorsFile::open(path); }, {path, "exceeds"});
  expect_error([&] { SafetensorsFile::open(file("absent.safetensors")); },
               {file("absent.safetensors"), "No such file or directory"});
}

TEST_F(Safetensors, RejectsMalformedJson) {
  const std::string path = file("j.safetensors");
  write_bytes(path, st_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", f32_bytes({1})));
  expect_error([&] { SafetensorsFile::open(path); }, {path, "not valid JSON"});
  write_bytes(path, st_file("[1, 2]", ""));
  expect_error([&] { SafetensorsFile::open(path); }, {path, "must be a JSON object"});
  write_bytes(path, st_file(R"({"x":{"dtype":"F32","shape":[1]}})", ""));
  expect_error([&] { SafetensorsFile::open(path); }, {path, "'x'", "data_offsets"});
  write_bytes(path, st_file(R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", ""));
  expect_error([&] { SafetensorsFile::open(path); }, {path, "'x'", "non-negative"});
  write_bytes(path, st_file(R"({"__metadata__":{"step":100}})", ""));
  expect_error([&] { SafetensorsFile::open(path); }, {path, "'step'", "must be a string"});
  write_bytes(path, st_file(R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                            R"("x":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                            "ab"));
  expect_error([&] { SafetensorsFile::open(path); }, {path, "'x'", "twice"});
}

TEST_F(Safetensors, RejectsUnknownDtype) {
  const std::string path = file("d.safetensors");
  write_bytes(path, st_file(R"({"x":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", f32_bytes({1})));
  expect_error([&] { SafetensorsFile::open(path); }, {path, "'x'", "unknown dtype 'F33'"});
}

TEST_F(Safetensors, RejectsShapeOffsetMismatch) {
  const std::string path = file("s.safetensors");
  write_bytes(path, st_file(R"({"x":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", f32_bytes({1, 2, 3})));
  expect_error([&] { SafetensorsFile::open(path); }, {path, "'x'", "needs 16 bytes", "hold 12"});
  write_bytes(path, st_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", f32_bytes({1})));
  expect_error([&] { SafetensorsFile::open(path); }, {path, "'x'", "end before they begin"});
  // 2^32 * 2^32 * 4 wraps to 0 in 64 bits; it must not pass as an empty tensor.
  write_bytes(path, st_file(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", ""));
  expect_error([&] { SafetensorsFile::open(path); }, {path, "'x'", "overflows"});
}

TEST_F(Safetensors, RejectsOverlapsGapsAndTrailingBytes) {
  const std::string path = file("o.safetensors");
  write_bytes(path, st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                            R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                            f32_bytes({1, 2, 3})));
  expect_error([&] { SafetensorsFile::open(path); }, {path, "'b'", "overlap", "'a'"});
  write_bytes(path, st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                            R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                            f32_bytes({1, 2, 3})));
  expect_error([&] { SafetensorsFile::open(path); }, {path, "'b'", "no gaps"});
  write_bytes(path, st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", f32_bytes({1, 2})));
  expect_error([&] { SafetensorsFile::open(path); }, {path, "4 bytes after the last tensor 'a'"});
}

}  // namespace
}  // namespace troupe::test
