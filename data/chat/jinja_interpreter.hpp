// Renders a parsed template (jinja_parse) with Python Jinja's semantics: scopes (a for-loop
// iteration, macro call, with/filter/set block and call block get their own; if does not, so
// {% set %} inside a loop does not leak out while namespace() attributes do), the `loop`
// variable, macros with defaults and caller(), break/continue, and output as Python's str().
// Every failure is a troupe::Error naming the template, line and column, except the
// template's own raise_exception(), which is a TemplateRaised with its message.
//
//   Program p = jinja_parse("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}", "demo");
//   std::string s = Interpreter(p).render({{"messages", from_json(messages_json)}});
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/chat/jinja_ast.hpp"
#include "data/chat/jinja_value.hpp"

namespace troupe::jinja {

class Interpreter {
 public:
  // `program` must outlive the interpreter.
  explicit Interpreter(const Program& program) : program_(program) {}

  std::string render(const std::vector<std::pair<std::string, Value>>& variables);

 private:
  // Variables of one scope; lookups walk to the parent. Scopes live until render() returns,
  // so macros can keep their defining scope.
  struct Scope {
    Scope* parent = nullptr;
    std::vector<std::pair<std::string, Value>> vars;
    const Value* find(std::string_view name) const;
    void set(const std::string& name, Value value);
  };
  enum class Flow { normal, break_loop, continue_loop };

  Scope* new_scope(Scope* parent);

  // statements (jinja_interpreter.cpp)
  Flow exec_body(const Body& body, Scope* scope, std::string& out);
  Flow exec(const Stmt& stmt, Scope* scope, std::string& out);
  Flow exec_if(const IfStmt& s, Scope* scope, std::string& out);
  Flow exec_for(const ForStmt& s, Scope* scope, std::string& out);
  void exec_set_block(const SetBlockStmt& s, Scope* scope);
  void exec_call_block(const CallBlockStmt& s, Scope* scope, std::string& out);
  void exec_filter_block(const FilterBlockStmt& s, Scope* scope, std::string& out);
  Flow exec_with(const WithStmt& s, Scope* scope, std::string& out);
  void assign(const Target& target, const Value& value, Scope* scope);
  Value make_macro(const std::shared_ptr<MacroDef>& macro, Scope* closure);
  Value call_macro(const MacroDef& macro, Scope* closure, CallArgs& args);
  Value make_loop(const std::vector<Value>& items, size_t index,
                  const std::shared_ptr<std::optional<std::vector<Value>>>& changed_state);

  // expressions (jinja_eval.cpp)
  Value eval(const Expr& e, Scope* scope);
  Value eval_node(const Expr& e, Scope* scope);
  Value lookup(const std::string& name, Scope* scope);
  CallArgs eval_args(const ArgsExpr& args, Scope* scope);
  Value eval_call(const CallExpr& c, Scope* scope, std::vector<std::pair<std::string, Value>> extra_kwargs = {});
  Value eval_binary(const BinaryExpr& b, Scope* scope);
  Value eval_compare(const CompareExpr& c, Scope* scope);
  Value eval_collection(const Expr& e, Scope* scope);
  // A filter chain whose innermost operand is missing ({% filter %}, {% set x | f %}) applied to `input`.
  Value apply_filter_chain(const Expr& chain, const Value& input, Scope* scope);

  const Program& program_;
  std::vector<std::unique_ptr<Scope>> scopes_;
};

}  // namespace troupe::jinja
