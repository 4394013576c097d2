#include "data/chat/jinja_args.hpp"

#include "data/chat/jinja_error.hpp"

namespace troupe::jinja {

ArgBinder::ArgBinder(const CallArgs& args, std::string what, std::vector<std::string> params, size_t required)
    : what_(std::move(what)), params_(std::move(params)), values_(params_.size()) {
  if (args.args.size() > params_.size())
    throw JinjaError(str_cat(what_, " takes at most ", params_.size(), " argument(s) (", args.args.size(), " given)"));
  for (size_t i = 0; i < args.args.size(); ++i) values_[i] = args.args[i];
  for (const auto& [key, value] : args.kwargs) {
    size_t i = 0;
    while (i < params_.size() && params_[i] != key) ++i;
    if (i == params_.size()) throw JinjaError(str_cat(what_, " got an unexpected keyword argument '", key, "'"));
    if (values_[i]) throw JinjaError(str_cat(what_, " got multiple values for argument '", key, "'"));
    values_[i] = value;
  }
  for (size_t i = 0; i < required; ++i)
    if (!values_[i]) throw JinjaError(str_cat(what_, " missing required argument '", params_[i], "'"));
}

Value ArgBinder::get(size_t i, Value fallback) const {
  if (values_[i]) return *values_[i];
  return fallback;
}

int64_t ArgBinder::get_int(size_t i, int64_t fallback) const {
  if (!values_[i]) return fallback;
  return to_index(*values_[i], str_cat(what_, " argument '", params_[i], "'").c_str());
}

bool ArgBinder::get_bool(size_t i, bool fallback) const { return values_[i] ? truthy(*values_[i]) : fallback; }

std::optional<std::string> ArgBinder::get_string(size_t i) const {
  if (!values_[i] || values_[i]->is_none()) return std::nullopt;
  if (!values_[i]->is_string())
    throw JinjaError(str_cat(what_, " argument '", params_[i], "' must be str, not ", type_name(*values_[i])));
  return values_[i]->text();
}

}  // namespace troupe::jinja
