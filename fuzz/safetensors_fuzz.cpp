// Safetensors files (storage/safetensors_reader.cpp): open validates the header; every tensor
// it accepts is then copied out and converted to f32.
#include <cstdint>
#include <exception>

#include "fuzz/fuzz_util.hpp"
#include "storage/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = troupe::fuzz::write_scratch_file("model.safetensors", troupe::fuzz::as_text(data, size));
  try {
    const troupe::SafetensorsFile f = troupe::SafetensorsFile::open(path);
    for (const std::string& name : f.names()) {
      (void)f.read(name);
      (void)f.read_f32(name);
    }
  } catch (const std::exception&) {}
  return 0;
}
