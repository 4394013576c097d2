#include "apps/train/train_log.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "apps/common/duration_format.hpp"

namespace troupe::apps {

namespace {
std::string timestamp() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

// A NaN prints as "NAN" or "nan", whatever its sign bit ("-NAN" reads as a negative number).
double plain(double v) { return std::isnan(v) ? std::fabs(v) : v; }
}  // namespace

std::string iteration_line(const LogWindow& w) {
  // Megatron prints the MoE losses right after the lm loss (its total_loss_dict order).
  std::string moe_losses;
  char part[96];
  if (!std::isnan(w.load_balancing_loss)) {
    std::snprintf(part, sizeof(part), " load_balancing_loss: %E |", w.load_balancing_loss);
    moe_losses += part;
  }
  if (!std::isnan(w.z_loss)) {
    std::snprintf(part, sizeof(part), " z_loss: %E |", w.z_loss);
    moe_losses += part;
  }
  char buf[768];
  std::snprintf(buf, sizeof(buf),
                " [%s] iteration %8ld/%8ld | consumed samples: %12ld | elapsed time per iteration (ms): %.1f | "
                "throughput per GPU (TFLOP/s/GPU): %.1f | learning rate: %E | global batch size: %5ld | "
                "lm loss: %E |%s loss scale: %.1f | grad norm: %.3f | number of skipped iterations: %3ld | "
                "number of nan iterations: %3ld | elapsed: %s | ETA: %s |",
                timestamp().c_str(), long(w.iteration), long(w.train_iters), long(w.consumed_samples),
                w.ms_per_iteration, w.tflops_per_device, plain(w.lr), long(w.global_batch_size), plain(w.loss),
                moe_losses.c_str(), w.loss_scale, plain(w.grad_norm), long(w.skipped), long(w.nan),
                format_duration(w.elapsed_seconds).c_str(), format_duration(w.eta_seconds).c_str());
  std::string line = buf;
  if (w.expert_load.empty()) return line;
  line += " expert load max/mean:";
  for (const MoeExpertLoad& l : w.expert_load) {
    std::snprintf(part, sizeof(part), " %d: %ld/%.1f", l.layer, long(l.tokens_max), l.tokens_mean);
    line += part;
  }
  return line + " |";
}

double perplexity(double loss) { return std::exp(std::min(loss, 20.0)); }

std::string validation_block(const std::string& where, double loss) {
  char line[256];
  const int n = std::snprintf(line, sizeof(line), " validation loss at %s | lm loss value: %E | lm loss PPL: %E | ",
                              where.c_str(), plain(loss), plain(perplexity(loss)));
  const std::string dashes(size_t(n), '-');
  return dashes + "\n" + line + "\n" + dashes;
}

}  // namespace troupe::apps
