// Shared by the fuzz targets: the file-based parsers read paths, so each input is written to a
// scratch directory of this process first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace troupe::fuzz {

// A directory private to this process (created once, under $TMPDIR or /tmp).
const std::string& scratch_dir();
// Writes `bytes` to scratch_dir()/name (replacing it) and returns the path.
std::string write_scratch_file(const std::string& name, std::string_view bytes);
// The input as a string_view.
std::string_view as_text(const uint8_t* data, size_t size);

}  // namespace troupe::fuzz
