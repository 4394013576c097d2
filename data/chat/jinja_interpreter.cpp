#include "data/chat/jinja_interpreter.hpp"

#include "data/chat/jinja_error.hpp"
#include "data/chat/jinja_repr.hpp"

namespace troupe::jinja {

const Value* Interpreter::Scope::find(std::string_view name) const {
  for (const Scope* s = this; s; s = s->parent)
    for (const auto& [n, v] : s->vars)
      if (n == name) return &v;
  return nullptr;
}

void Interpreter::Scope::set(const std::string& name, Value value) {
  for (auto& [n, v] : vars) {
    if (n == name) {
      v = std::move(value);
      return;
    }
  }
  vars.emplace_back(name, std::move(value));
}

Interpreter::Scope* Interpreter::new_scope(Scope* parent) {
  scopes_.push_back(std::make_unique<Scope>());
  scopes_.back()->parent = parent;
  return scopes_.back().get();
}

std::string Interpreter::render(const std::vector<std::pair<std::string, Value>>& variables) {
  scopes_.clear();
  Scope* root = new_scope(nullptr);
  for (const auto& [name, value] : variables) root->set(name, value);
  std::string out;
  exec_body(program_.body, root, out);
  scopes_.clear();
  return out;
}

Interpreter::Flow Interpreter::exec_body(const Body& body, Scope* scope, std::string& out) {
  for (const Stmt& stmt : body) {
    const Flow flow = exec(stmt, scope, out);
    if (flow != Flow::normal) return flow;
  }
  return Flow::normal;
}

Interpreter::Flow Interpreter::exec(const Stmt& stmt, Scope* scope, std::string& out) {
  try {
    return std::visit(
        [&](const auto& s) -> Flow {
          using T = std::decay_t<decltype(s)>;
          if constexpr (std::is_same_v<T, TextStmt>) {
            out += s.text;
          } else if constexpr (std::is_same_v<T, OutputStmt>) {
            out += to_str(eval(*s.expr, scope));
          } else if constexpr (std::is_same_v<T, IfStmt>) {
            return exec_if(s, scope, out);
          } else if constexpr (std::is_same_v<T, ForStmt>) {
            return exec_for(s, scope, out);
          } else if constexpr (std::is_same_v<T, SetStmt>) {
            assign(s.target, eval(*s.value, scope), scope);
          } else if constexpr (std::is_same_v<T, SetBlockStmt>) {
            exec_set_block(s, scope);
          } else if constexpr (std::is_same_v<T, MacroStmt>) {
            scope->set(s.macro->name, make_macro(s.macro, scope));
          } else if constexpr (std::is_same_v<T, CallBlockStmt>) {
            exec_call_block(s, scope, out);
          } else if constexpr (std::is_same_v<T, FilterBlockStmt>) {
            exec_filter_block(s, scope, out);
          } else if constexpr (std::is_same_v<T, WithStmt>) {
            return exec_with(s, scope, out);
          } else if constexpr (std::is_same_v<T, ScopeStmt>) {
            exec_body(s.body, new_scope(scope), out);
          } else if constexpr (std::is_same_v<T, LoopControlStmt>) {
            return s.is_break ? Flow::break_loop : Flow::continue_loop;
          }
          return Flow::normal;
        },
        stmt.node);
  } catch (const JinjaError& e) {
    fail_at(program_.name, stmt.pos, e.what());
  }
}

Interpreter::Flow Interpreter::exec_if(const IfStmt& s, Scope* scope, std::string& out) {
  for (const auto& [test, body] : s.branches)
    if (truthy(eval(*test, scope))) return exec_body(body, scope, out);
  return exec_body(s.otherwise, scope, out);
}

Interpreter::Flow Interpreter::exec_for(const ForStmt& s, Scope* scope, std::string& out) {
  std::vector<Value> items = iterate(eval(*s.iterable, scope));
  if (s.condition) {
    std::vector<Value> kept;
    for (Value& item : items) {
      Scope* probe = new_scope(scope);
      assign(s.target, item, probe);
      if (truthy(eval(*s.condition, probe))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec_body(s.otherwise, new_scope(scope), out);
    return Flow::normal;
  }
  auto changed_state = std::make_shared<std::optional<std::vector<Value>>>();
  for (size_t i = 0; i < items.size(); ++i) {
    Scope* iteration = new_scope(scope);
    assign(s.target, items[i], iteration);
    iteration->set("loop", make_loop(items, i, changed_state));
    if (exec_body(s.body, iteration, out) == Flow::break_loop) break;
  }
  return Flow::normal;
}

Value Interpreter::make_loop(const std::vector<Value>& items, size_t index,
                             const std::shared_ptr<std::optional<std::vector<Value>>>& changed_state) {
  const auto n = static_cast<int64_t>(items.size());
  const auto i = static_cast<int64_t>(index);
  Dict attrs;
  auto set = [&](const char* name, Value v) { attrs.items.emplace_back(Value::string(name), std::move(v)); };
  set("index", Value::integer(i + 1));
  set("index0", Value::integer(i));
  set("revindex", Value::integer(n - i));
  set("revindex0", Value::integer(n - i - 1));
  set("first", Value::boolean(i == 0));
  set("last", Value::boolean(i == n - 1));
  set("length", Value::integer(n));
  set("depth", Value::integer(1));
  set("depth0", Value::integer(0));
  set("previtem", i > 0 ? items[index - 1] : Value::undefined("there is no previous item"));
  set("nextitem", i + 1 < n ? items[index + 1] : Value::undefined("there is no next item"));
  set("cycle", Value::callable("loop.cycle", [i](CallArgs& args) {
        if (!args.kwargs.empty()) throw JinjaError("loop.cycle() takes no keyword arguments");
        if (args.args.empty()) throw JinjaError("no items for cycling given");
        return args.args[static_cast<size_t>(i) % args.args.size()];
      }));
  set("changed", Value::callable("loop.changed", [changed_state](CallArgs& args) {
        if (!args.kwargs.empty()) throw JinjaError("loop.changed() takes no keyword arguments");
        const Value now = Value::sequence(args.args, SeqKind::tuple);
        if (*changed_state && equals(Value::sequence(**changed_state, SeqKind::tuple), now))
          return Value::boolean(false);
        *changed_state = args.args;
        return Value::boolean(true);
      }));
  return Value::object("LoopContext", std::move(attrs));
}

void Interpreter::exec_set_block(const SetBlockStmt& s, Scope* scope) {
  std::string body;
  exec_body(s.body, new_scope(scope), body);
  Value value = Value::string(std::move(body));
  if (s.filter) value = apply_filter_chain(*s.filter, value, scope);
  assign(s.target, value, scope);
}

void Interpreter::exec_call_block(const CallBlockStmt& s, Scope* scope, std::string& out) {
  Value caller = make_macro(s.caller, scope);
  out += to_str(eval_call(std::get<CallExpr>(s.call->node), scope, {{"caller", std::move(caller)}}));
}

void Interpreter::exec_filter_block(const FilterBlockStmt& s, Scope* scope, std::string& out) {
  std::string body;
  exec_body(s.body, new_scope(scope), body);
  out += to_str(apply_filter_chain(*s.filter, Value::string(std::move(body)), scope));
}

Interpreter::Flow Interpreter::exec_with(const WithStmt& s, Scope* scope, std::string& out) {
  std::vector<Value> values;
  for (const auto& [target, expr] : s.assignments) values.push_back(eval(*expr, scope));
  Scope* inner = new_scope(scope);
  for (size_t i = 0; i < values.size(); ++i) assign(s.assignments[i].first, values[i], inner);
  return exec_body(s.body, inner, out);
}

void Interpreter::assign(const Target& target, const Value& value, Scope* scope) {
  if (!target.ns_attr.empty()) {
    const Value* ns = scope->find(target.names[0]);
    if (!ns || !ns->is_namespace()) throw JinjaError("cannot assign attribute on non-namespace object");
    ns->ns().attrs.set(Value::string(target.ns_attr), value);
    return;
  }
  if (!target.unpack) {
    scope->set(target.names[0], value);
    return;
  }
  const std::vector<Value> items = iterate(value);
  if (items.size() > target.names.size())
    throw JinjaError(str_cat("too many values to unpack (expected ", target.names.size(), ")"));
  if (items.size() < target.names.size())
    throw JinjaError(
        str_cat("not enough values to unpack (expected ", target.names.size(), ", got ", items.size(), ")"));
  for (size_t i = 0; i < items.size(); ++i) scope->set(target.names[i], items[i]);
}

Value Interpreter::make_macro(const std::shared_ptr<MacroDef>& macro, Scope* closure) {
  const MacroDef* def = macro.get();
  return Value::callable(def->name, [this, def, closure](CallArgs& args) { return call_macro(*def, closure, args); });
}

Value Interpreter::call_macro(const MacroDef& m, Scope* closure, CallArgs& args) {
  Scope* s = new_scope(closure);
  const size_t n = m.params.size();
  std::vector<bool> bound(n, false);
  std::vector<Value> varargs;
  for (size_t i = 0; i < args.args.size(); ++i) {
    if (i < n) {
      s->set(m.params[i], args.args[i]);
      bound[i] = true;
    } else if (m.catch_varargs) {
      varargs.push_back(args.args[i]);
    } else {
      throw JinjaError(str_cat("macro '", m.name, "' takes not more than ", n, " argument(s)"));
    }
  }
  Dict kwargs;
  for (const auto& [key, value] : args.kwargs) {
    size_t i = 0;
    while (i < n && m.params[i] != key) ++i;
    if (i < n) {
      if (bound[i]) throw JinjaError(str_cat("macro '", m.name, "' got multiple values for argument '", key, "'"));
      s->set(key, value);
      bound[i] = true;
    } else if (key == "caller") {
      s->set("caller", value);
    } else if (m.catch_kwargs) {
      kwargs.set(Value::string(key), value);
    } else {
      throw JinjaError(str_cat("macro '", m.name, "' takes no keyword argument '", key, "'"));
    }
  }
  const size_t first_default = n - m.defaults.size();
  for (size_t i = 0; i < n; ++i) {
    if (bound[i]) continue;
    s->set(m.params[i], i >= first_default
                            ? eval(*m.defaults[i - first_default], s)
                            : Value::undefined(str_cat("parameter '", m.params[i], "' was not provided")));
  }
  if (m.catch_varargs) s->set("varargs", Value::sequence(std::move(varargs), SeqKind::tuple));
  if (m.catch_kwargs) s->set("kwargs", Value::dict(std::move(kwargs)));
  std::string out;
  exec_body(m.body, s, out);
  return Value::string(std::move(out));
}

}  // namespace troupe::jinja
