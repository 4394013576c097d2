// Megatron-LM's training log lines, so existing log parsers and habits carry over:
//  [2026-11-21 06:50:01] iteration       10/     100 | consumed samples:          320 | elapsed time per
//  iteration (ms): 123.4 | throughput per GPU (TFLOP/s/GPU): 98.7 | learning rate: 6.000000E-04 | global
//  batch size:    32 | lm loss: 7.123456E+00 | loss scale: 1.0 | grad norm: 1.234 | number of skipped
//  iterations:   0 | number of nan iterations:   0 | elapsed: 1m23s | ETA: 10m05s |
// Troupe's fields come after Megatron's (parsers match those): the elapsed time and the ETA
// (apps/train/train_progress.hpp), as `troupe monitor` shows durations. An MoE model adds
// Megatron's `load_balancing_loss: ... |` (and `z_loss: ... |`) after the lm loss, and
// `expert load max/mean: 0: 37/32.0 1: ... |` at the end.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "model/train/moe_iteration_stats.hpp"

namespace troupe::apps {

struct LogWindow {
  int64_t iteration = 0, train_iters = 0, consumed_samples = 0, global_batch_size = 0;
  double ms_per_iteration = 0, tflops_per_device = 0, lr = 0, loss = 0, loss_scale = 1, grad_norm = 0;
  int64_t skipped = 0, nan = 0;
  int64_t iterations = 0;  // iterations the means cover (not printed; the monitor reports it)
  // Troupe's fields after Megatron's: the elapsed time and the ETA (NaN prints "?").
  double elapsed_seconds = NAN, eta_seconds = NAN;
  // The straggler report's sentences (apps/train/straggler_report.hpp), printed on lines of
  // their own after the iteration line, and the devices they name.
  std::vector<std::string> stragglers{};
  std::vector<int64_t> straggler_devices{};
  // Mixture of experts (NaN / empty: a dense model): Megatron's load_balancing_loss and z_loss
  // after the lm loss (means over the window), and Troupe's expert load of the window's last
  // iteration at the end: per MoE layer, the most tokens one expert got / the mean per expert.
  double load_balancing_loss = NAN, z_loss = NAN;
  std::vector<MoeExpertLoad> expert_load{};
};

std::string iteration_line(const LogWindow& w);
// Megatron's validation perplexity: exp(loss), the exponent capped at 20.
double perplexity(double loss);
// The block Megatron prints after an evaluation: loss and perplexity.
std::string validation_block(const std::string& where, double loss);

}  // namespace troupe::apps
