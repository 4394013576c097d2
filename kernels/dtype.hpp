// Element types of tensors. The CPU backend computes in f32; the CUDA backend stores
// activations and parameters in bf16 (or f16) and accumulates in f32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace troupe {

enum class DType : uint8_t { f32, bf16, f16, i32, i64, u8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
// f32, bf16 or f16.
bool is_float(DType t);
// "f32" / "bf16" / "f16" / ... -> DType; throws on an unknown name.
DType dtype_from_name(const std::string& name);

}  // namespace troupe
