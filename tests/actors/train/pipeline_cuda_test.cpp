// The runtime on GPUs. One GPU: the actor-driven single stage against the plain Trainer on
// the same kernels (bf16), and pipelines whose stages share the GPU (same-device hand-over
// behind events; 1F1B, interleaved, ZB-H1 and ZB-V) against one stage. Two or more GPUs: the same pipelines with one
// stage per GPU over NCCL (stage s runs on GPU s mod count).
#include <cstdio>

#include <filesystem>

#if TROUPE_HAVE_CUDA
#include "kernels/cuda/runtime.hpp"
#endif
#include "schedules/trace.hpp"
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

TEST(PipelineCuda, OneStageMatchesPlainTrainer) {
  const actors::TrainingConfig config = gpu_config(1, 1);
  const int iters = 6, M = 8;
  GptChunk model(gpu(), config.model, ChunkSpec::whole_model(), DType::bf16);
  model.init_weights(config.seed);
  Optimizer optimizer(model, config.optimizer);
  Trainer trainer(model, optimizer, config.lr, nullptr, config.seed);
  auto data_loader = loader(tiny_data(config.model), config.micro_batch_size);
  const std::vector<IterationStats> got = train_iterations(config, iters);
  for (int it = 0; it < iters; ++it) {
    std::vector<Batch> batches;
    for (int m = 0; m < M; ++m) batches.push_back(actors::to_batch(*data_loader->next()));
    const IterationStats r = trainer.train_step(batches);
    EXPECT_LT(rel(got[size_t(it)].loss, r.loss), 1e-6) << "iteration " << it + 1;
    EXPECT_LT(rel(got[size_t(it)].grad_norm, r.grad_norm), 1e-5) << "iteration " << it + 1;
    std::printf("iteration %d: actors loss %.6f grad norm %.5f, plain loop loss %.6f grad norm %.5f\n", it + 1,
                got[size_t(it)].loss, got[size_t(it)].grad_norm, r.loss, r.grad_norm);
  }
}

TEST(PipelineCuda, PipelinesMatchOneStage) {
  const int iters = 6;
  const std::vector<IterationStats> ref = train_iterations(gpu_config(1, 1), iters);
#if TROUPE_HAVE_CUDA
  std::printf("%d GPU(s): stage s runs on GPU s mod %d\n", cuda::device_count(), cuda::device_count());
#endif
  const std::string trace_path = (std::filesystem::temp_directory_path() / "troupe_cuda_trace.trace").string();
  for (const auto& [P, V] : {std::pair(2, 1), std::pair(4, 1), std::pair(2, 2)}) {
    actors::TrainingConfig config = gpu_config(P, V);
    if (V == 2) config.trace_path = trace_path;  // GPU op timing through events
    const std::vector<IterationStats> got = train_iterations(config, iters);
    double worst = 0;
    for (int it = 0; it < iters; ++it) {
      worst = std::max(worst, rel(got[size_t(it)].loss, ref[size_t(it)].loss));
      EXPECT_LT(rel(got[size_t(it)].loss, ref[size_t(it)].loss), 2e-3) << "P=" << P << " V=" << V << " it " << it + 1;
    }
    std::printf("P=%d V=%d: last loss %.6f (one stage %.6f), max relative loss difference %.2e\n", P, V,
                got.back().loss, ref.back().loss, worst);
  }
  const schedules::Trace trace = schedules::trace_read(trace_path);
  int ops = 0;
  for (const schedules::TraceEvent& e : trace.events) {
    if (e.kind != schedules::EventKind::forward && e.kind != schedules::EventKind::backward) continue;
    ++ops;
    EXPECT_GT(e.start_ns, 0);
    EXPECT_LT(e.start_ns, e.end_ns);
    // The first microbatch's fused backward times its weight-gradient GEMMs with events
    // (weight_ns): part of the op. The others do not (the events cost time).
    if (e.kind == schedules::EventKind::backward && e.microbatch == 0) {
      EXPECT_GT(e.weight_ns, 0);
      EXPECT_LT(e.weight_ns, e.end_ns - e.start_ns);
    } else {
      EXPECT_EQ(e.weight_ns, 0);
    }
  }
  EXPECT_EQ(ops, iters * 2 * 2 * 8 * 2);  // iterations x P x V x M x (F, B)
  std::filesystem::remove(trace_path);
}

// ZB-H1 and ZB-V on GPUs: the split backward's B and W ops, and ZB-V's V (stage P-1 hands its
// chunk 0's output to its chunk 1 on its own stream, stage 0 sums the tied embedding's two
// copies and computes the loss) train the one stage's losses, as the other pipelines do.
TEST(PipelineCuda, ZeroBubbleSchedulesMatchOneStage) {
  const int iters = 6;
  const std::vector<IterationStats> ref = train_iterations(gpu_config(1, 1), iters);
  using schedules::Schedule;
  for (const auto& [schedule, P] :
       {std::pair(Schedule::zb_h1, 2), std::pair(Schedule::zb_v, 2), std::pair(Schedule::zb_v, 4)}) {
    const int V = schedule == Schedule::zb_v ? 2 : 1;
    actors::TrainingConfig config = gpu_config(P, V);
    config.parallel.schedule = schedule;
    const std::vector<IterationStats> got = train_iterations(config, iters);
    double worst = 0;
    for (int it = 0; it < iters; ++it) {
      worst = std::max(worst, rel(got[size_t(it)].loss, ref[size_t(it)].loss));
      EXPECT_LT(rel(got[size_t(it)].loss, ref[size_t(it)].loss), 2e-3)
          << schedules::schedule_name(schedule) << " P=" << P << " it " << it + 1;
    }
    std::printf("%s P=%d: last loss %.6f (one stage %.6f), max relative loss difference %.2e\n",
                schedules::schedule_name(schedule), P, got.back().loss, ref.back().loss, worst);
  }
}

// On two GPUs, P = 4 puts two stages on each; the per-op NaN check syncs a stage's stream while
// the other stage's NCCL kernel on that GPU may be waiting for it. A device-wide sync there
// (cudaFree of a temporary) hung the run; it must train as without the check.
TEST(PipelineCuda, PerOpNanChecksWithTwoStagesPerGpu) {
  const int iters = 3;
  actors::TrainingConfig config = gpu_config(4, 1);
  const std::vector<IterationStats> plain = train_iterations(config, iters);
  config.check_for_nan_every_op = true;
  config.op_timeout = std::chrono::seconds(60);
  const std::vector<IterationStats> checked = train_iterations(config, iters);
  for (int it = 0; it < iters; ++it) EXPECT_EQ(checked[size_t(it)].loss, plain[size_t(it)].loss) << "it " << it + 1;
}

TEST(PipelineCuda, FailureInAStageIsReported) {
  actors::TrainingConfig config = gpu_config(2, 1);
  config.before_op = [](int stage, const schedules::Op& op) {
    if (stage == 1 && op.kind == schedules::OpKind::backward && op.microbatch == 2) throw Error("injected");
  };
  actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
  try {
    run.train_iteration();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stage 1 failed in backward of microbatch 2 (chunk 0): injected"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace troupe::test
