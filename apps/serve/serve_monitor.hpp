// What `troupe serve` tells its monitor about itself: a hello of kind "serve" (the model's
// shape, the replicas, the device), and the end. The serving numbers come from the inference
// pool's actors (actors/serve/serving_monitor.hpp).
//
//   print_monitor_addresses(pool.start_monitor(options, serve_monitor_hello(setup, "gpt2", 2, 1)));
#pragma once

#include <string>

#include "actors/monitor/monitor_schema.hpp"
#include "apps/common/inference_flags.hpp"

namespace troupe::apps {

// `model` names what is served (the --hf or --load path).
actors::MonitorHello serve_monitor_hello(const InferenceSetup& s, const std::string& model, int replicas,
                                         int tensor_parallel);
// signal 0: the server stopped on its own; else it was stopped by that signal.
actors::MonitorEnd serve_monitor_end(int signal);

}  // namespace troupe::apps
