#include "apps/serve/serve_monitor.hpp"

#include "apps/common/monitor_flags.hpp"
#include "base/check.hpp"
#include "kernels/dtype.hpp"

namespace troupe::apps {

actors::MonitorHello serve_monitor_hello(const InferenceSetup& s, const std::string& model, int replicas,
                                         int tensor_parallel) {
  actors::MonitorHello h;
  stamp_monitor_hello(h);
  h.kind = "serve";
  h.model = model;
  const GptConfig& m = s.model.config;
  h.num_layers = m.num_layers, h.hidden_size = m.hidden_size, h.num_attention_heads = m.num_attention_heads;
  h.seq_length = s.max_seq_length, h.vocab_size = m.vocab_size, h.parameters = m.num_parameters();
  h.replicas = replicas;
  h.data_parallel = replicas;           // each replica serves whole requests
  h.tensor_parallel = tensor_parallel;  // devices per replica
  h.schedule = "";
  h.device_kind = s.cuda ? "cuda" : "cpu";
  h.device_count = replicas * tensor_parallel;
  h.dtype = dtype_name(s.compute);
  return h;
}

actors::MonitorEnd serve_monitor_end(int signal) {
  actors::MonitorEnd end{.iteration = 0, .reason = "completed", .detail = ""};
  if (signal != 0) end.reason = "stopped", end.detail = str_cat("stopped by signal ", signal);
  return end;
}

}  // namespace troupe::apps
