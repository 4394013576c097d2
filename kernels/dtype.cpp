#include "kernels/dtype.hpp"

#include "base/check.hpp"

namespace troupe {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::f16:
      return 2;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
  }
  TROUPE_FAIL("unknown dtype ", int(t));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
  }
  return "?";
}

bool is_float(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

DType dtype_from_name(const std::string& name) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8})
    if (name == dtype_name(t)) return t;
  TROUPE_FAIL("unknown dtype '", name, "' (expected f32, bf16, f16, i32, i64 or u8)");
}

}  // namespace troupe
