// Every numeric op of Troupe, one header each, one signature for two backends.
//
// Conventions shared by all ops (each op checks them at entry and names the argument):
// - Tensors are contiguous, row-major. Activations are [N, C] rows with N = B*T
//   (or [B, T, ...] where the op needs T).
// - CPU context: every floating tensor is f32 (the reference backend).
// - CUDA context: activations, weights and activation gradients are bf16 or f16 (kernels
//   are templated on the 16-bit type); statistics (mean, rstd, lse, losses) are f32;
//   parameter gradients are f32.
// - Parameter gradients (dw, db, dwte, ...) ACCUMULATE (+=): microbatches and tied
//   weights add into one buffer. Activation gradients overwrite unless the op says
//   otherwise (norm backward accumulates into dx: its input is the residual stream).
// - CUDA ops are asynchronous on the context's stream.
#pragma once

#include "kernels/activation.hpp"
#include "kernels/adamw.hpp"
#include "kernels/attention.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/dropout.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/embedding.hpp"
#include "kernels/grad_norm.hpp"
#include "kernels/grouped_linear.hpp"
#include "kernels/linear.hpp"
#include "kernels/linear_fused.hpp"
#include "kernels/moe_dispatch.hpp"
#include "kernels/moe_permute.hpp"
#include "kernels/moe_router_losses.hpp"
#include "kernels/moe_routing.hpp"
#include "kernels/moe_shared_gate.hpp"
#include "kernels/norm.hpp"
#include "kernels/rope.hpp"
#include "kernels/vocab_parallel_cross_entropy.hpp"
