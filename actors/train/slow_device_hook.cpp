#include "actors/train/slow_device_hook.hpp"

#include <optional>

#include "actors/train/test_hook_env.hpp"
#include "model/rank_layout.hpp"

namespace troupe::actors {

namespace {

struct SlowDevice {
  int64_t rank = 0;
  std::chrono::microseconds delay{0};
};

std::optional<SlowDevice> slow_device() {
  const auto v = hook_number_pair("TROUPE_SLOW_DEVICE",
                                  "RANK:MS: set it to the device's global rank and the milliseconds each of its ops "
                                  "should sleep (a test hook), or unset it");
  if (!v) return std::nullopt;
  return SlowDevice{(*v)[0], std::chrono::milliseconds((*v)[1])};
}

struct OpSleep {
  std::chrono::microseconds per_layer{0}, head{0};
};

std::optional<OpSleep> op_sleep() {
  const auto v = hook_number_pair("TROUPE_OP_SLEEP",
                                  "LAYER_MS:HEAD_MS: set it to the milliseconds a forward should sleep per layer and "
                                  "on the last virtual stage (a test hook), or unset it");
  if (!v) return std::nullopt;
  return OpSleep{std::chrono::milliseconds((*v)[0]), std::chrono::milliseconds((*v)[1])};
}

const std::optional<OpSleep>& configured_op_sleep() {
  static const std::optional<OpSleep> sleep = op_sleep();
  return sleep;
}

}  // namespace

bool op_sleep_injected() { return configured_op_sleep().has_value(); }

std::chrono::microseconds injected_op_sleep(StageWorker& worker, const schedules::Op& op) {
  const std::optional<OpSleep>& sleep = configured_op_sleep();
  if (!sleep) return std::chrono::microseconds(0);
  std::chrono::microseconds t = sleep->per_layer * worker.model(op.chunk).layout().num_layers();
  if (worker.last_virtual(op.chunk)) t += sleep->head;
  return op.kind == schedules::OpKind::backward ? 2 * t : t;
}

std::chrono::microseconds injected_op_delay(const StageWorker& worker) {
  static const std::optional<SlowDevice> slow = slow_device();
  if (!slow) return std::chrono::microseconds(0);
  const RankLayout layout{.tensor = worker.tp_size(), .data = worker.dp_size(), .pipeline = worker.stages()};
  const int rank = layout.rank({.pp = worker.stage(), .dp = worker.dp_rank(), .tp = worker.tp_rank()});
  return rank == slow->rank ? slow->delay : std::chrono::microseconds(0);
}

}  // namespace troupe::actors
