// Metal -> C++ translator of the emulator: a lexer that keeps every
// character of layout, and rewriting passes over its tokens. See translate.h
// for what is rewritten and why.
#include "translate.h"

#include <string.h>

#include <map>
#include <set>

namespace mlxn::emu {

const char* const kCompileFlags[] = {
    "-std=c++20",
    "-O1",
    "-fPIC",
    "-shared",
    "-fno-exceptions",
    "-fno-rtti",
    "-fvisibility=hidden",
    "-ffp-contract=off",
    "-fno-math-errno",
    "-Xclang",
    "-ffloat16-excess-precision=none",
    "-Xclang",
    "-fbfloat16-excess-precision=none",
    "-Wno-unknown-attributes",
    "-ferror-limit=20",
    nullptr,
};

namespace {

// MLXN_CONST_* (mlx_native.h); repeated so this file needs only its own header.
enum : uint32_t { kBool = 1, kI32 = 2, kU32 = 3, kF32 = 4, kF16 = 5, kI16 = 6, kU16 = 7 };

enum class K { Ident, Number, String, Char, Punct, Directive };

struct Tok {
  K kind;
  std::string text;
  int line = 0, col = 0;
  std::string pre;  // whitespace and comments before the token
  std::string out;  // what is emitted for the token (text unless rewritten)
  bool done = false;  // consumed by a rewrite; later passes leave it alone
};

struct Fail {
  int line, col;
  std::string msg;
};

bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident_char(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Splits src into tokens. Whitespace, comments and backslash-newlines go into
// the next token's `pre`; a preprocessor directive (from a line-initial '#'
// to the end of its logical line) is one token.
bool lex(const std::string& src, std::vector<Tok>* toks, std::string* trailing, Fail* fail,
         bool directives = true) {
  size_t i = 0, n = src.size();
  int line = 1, col = 1;
  bool line_start = true;
  std::string pre;
  auto adv = [&](size_t k) {
    for (size_t j = 0; j < k && i < n; ++j, ++i) {
      if (src[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
  };
  while (i < n) {
    char c = src[i];
    if (c == '\n') {
      pre += c;
      adv(1);
      line_start = true;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      pre += c;
      adv(1);
      continue;
    }
    if (c == '\\' && i + 1 < n && (src[i + 1] == '\n' || (src[i + 1] == '\r' && i + 2 < n && src[i + 2] == '\n'))) {
      size_t k = src[i + 1] == '\n' ? 2 : 3;
      pre += src.substr(i, k);
      adv(k);
      continue;
    }
    if (c == '/' && i + 1 < n && src[i + 1] == '/') {
      size_t e = i;
      while (e < n && src[e] != '\n') {
        if (src[e] == '\\' && e + 1 < n && src[e + 1] == '\n') ++e;
        ++e;
      }
      pre += src.substr(i, e - i);
      adv(e - i);
      continue;
    }
    if (c == '/' && i + 1 < n && src[i + 1] == '*') {
      size_t e = src.find("*/", i + 2);
      if (e == std::string::npos) {
        *fail = {line, col, "unterminated comment"};
        return false;
      }
      pre += src.substr(i, e + 2 - i);
      adv(e + 2 - i);
      continue;
    }
    Tok t;
    t.line = line;
    t.col = col;
    t.pre = std::move(pre);
    pre.clear();
    size_t s = i;
    if (c == '#' && line_start && directives) {
      size_t e = i;
      while (e < n && src[e] != '\n') {
        if (src[e] == '\\' && e + 1 < n && src[e + 1] == '\n') ++e;
        else if (src[e] == '/' && e + 1 < n && src[e + 1] == '*') {
          size_t ce = src.find("*/", e + 2);
          if (ce == std::string::npos) break;
          e = ce + 1;
        }
        ++e;
      }
      t.kind = K::Directive;
      adv(e - i);
    } else if (is_ident_start(c)) {
      size_t e = i;
      while (e < n && is_ident_char(src[e])) ++e;
      t.kind = K::Ident;
      adv(e - i);
    } else if (is_digit(c) || (c == '.' && i + 1 < n && is_digit(src[i + 1]))) {
      size_t e = i + 1;
      while (e < n) {
        char d = src[e];
        if ((d == '+' || d == '-') && (src[e - 1] == 'e' || src[e - 1] == 'E' || src[e - 1] == 'p' || src[e - 1] == 'P')) {
          ++e;
        } else if (is_ident_char(d) || d == '.' || d == '\'') {
          ++e;
        } else {
          break;
        }
      }
      t.kind = K::Number;
      adv(e - i);
    } else if (c == '"' || c == '\'') {
      size_t e = i + 1;
      while (e < n && src[e] != c && src[e] != '\n') {
        if (src[e] == '\\') ++e;
        ++e;
      }
      if (e >= n || src[e] != c) {
        *fail = {line, col, c == '"' ? "unterminated string literal" : "unterminated character literal"};
        return false;
      }
      t.kind = c == '"' ? K::String : K::Char;
      adv(e + 1 - i);
    } else {
      static const char* const puncts[] = {"<<=", ">>=", "...", "->*", "::", "->", "++", "--", "<<", ">>", "<=", ">=",
                                           "==",  "!=",  "&&",  "||",  "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=",
                                           ".*"};
      size_t len = 1;
      for (const char* p : puncts) {
        size_t pl = strlen(p);
        if (src.compare(i, pl, p) == 0) {
          len = pl;
          break;
        }
      }
      t.kind = K::Punct;
      adv(len);
    }
    t.text = src.substr(s, i - s);
    t.out = t.text;
    line_start = false;
    toks->push_back(std::move(t));
  }
  *trailing = pre;
  return true;
}

std::string quote(const std::string& s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    if (c == '\n') {
      r += "\\n";
      continue;
    }
    r += c;
  }
  return r + "\"";
}

bool is_identifier(const std::string& s) {
  if (s.empty() || !is_ident_start(s[0])) return false;
  for (char c : s)
    if (!is_ident_char(c)) return false;
  return true;
}

const std::map<std::string, std::string>& builtin_attrs() {
  static const std::map<std::string, std::string> m = {
      {"thread_position_in_grid", "bi_thread_position_in_grid"},
      {"threadgroup_position_in_grid", "bi_threadgroup_position_in_grid"},
      {"thread_position_in_threadgroup", "bi_thread_position_in_threadgroup"},
      {"threads_per_threadgroup", "bi_threads_per_threadgroup"},
      {"dispatch_threads_per_threadgroup", "bi_threads_per_threadgroup"},
      {"threadgroups_per_grid", "bi_threadgroups_per_grid"},
      {"threads_per_grid", "bi_threads_per_grid"},
      {"grid_size", "bi_threads_per_grid"},
      {"thread_index_in_threadgroup", "bi_thread_index_in_threadgroup"},
      {"thread_index_in_simdgroup", "bi_thread_index_in_simdgroup"},
      {"simdgroup_index_in_threadgroup", "bi_simdgroup_index_in_threadgroup"},
      {"simdgroups_per_threadgroup", "bi_simdgroups_per_threadgroup"},
      {"dispatch_simdgroups_per_threadgroup", "bi_simdgroups_per_threadgroup"},
      {"threads_per_simdgroup", "bi_threads_per_simdgroup"},
      {"thread_execution_width", "bi_thread_execution_width"},
      {"thread_index_in_quadgroup", "bi_thread_index_in_quadgroup"},
      {"quadgroup_index_in_threadgroup", "bi_quadgroup_index_in_threadgroup"},
      {"quadgroups_per_threadgroup", "bi_quadgroups_per_threadgroup"},
  };
  return m;
}

struct Param {
  std::string spec;  // mlxn::arg_* type
};

struct KernelDef {
  std::string name;
  bool is_template = false;
  std::string host_name;  // from a [[host_name]] on a non-template kernel
  std::vector<std::string> specs;
  std::vector<uint32_t> buffers, threadgroups;
  uint32_t max_threads = 0;
  int line = 0, col = 0;
  size_t body = 0;  // token index of the body's '{'
};

class Translator {
 public:
  Translator(std::vector<Tok>& toks, const std::string& name, const std::vector<FunctionConstant>& constants)
      : t_(toks), name_(name), constants_(constants) {}

  std::vector<Tok>& t_;
  std::string name_;
  const std::vector<FunctionConstant>& constants_;
  std::vector<KernelDef> kernels_;
  std::map<std::string, size_t> kernel_by_name_;
  struct Inst {
    std::string host, name, call;
    int line, col;
  };
  std::vector<Inst> insts_;
  std::set<std::string> defined_fc_, undefined_fc_;
  // The function constants given a non-zero value (a bool set to true).
  std::set<std::string> true_fc_;
  uint32_t next_tg_id_ = 0;
  // Threadgroup variable declarations: token index and id.
  std::vector<std::pair<size_t, uint32_t>> tg_decls_;

  size_t size() const { return t_.size(); }
  // Next/previous token index that is not a directive; size() / npos at the ends.
  size_t nx(size_t i) const {
    for (++i; i < t_.size(); ++i)
      if (t_[i].kind != K::Directive) return i;
    return t_.size();
  }
  size_t pv(size_t i) const {
    while (i > 0) {
      --i;
      if (t_[i].kind != K::Directive) return i;
    }
    return std::string::npos;
  }
  bool is(size_t i, const char* s) const { return i < t_.size() && t_[i].text == s && t_[i].kind != K::String; }
  [[noreturn]] void fail(size_t i, const std::string& msg) const {
    if (i < t_.size()) throw Fail{t_[i].line, t_[i].col, msg};
    throw Fail{t_.empty() ? 1 : t_.back().line, 1, msg};
  }
  // Index of the bracket closing the one at i ('(' '[' '{' '<').
  size_t match(size_t i) const {
    std::string o = t_[i].text;
    std::string c = o == "(" ? ")" : o == "[" ? "]" : o == "{" ? "}" : ">";
    int depth = 0;
    for (size_t j = i; j < t_.size(); ++j) {
      if (t_[j].kind != K::Punct) continue;
      const std::string& x = t_[j].text;
      if (o == "<") {
        if (x == "<") ++depth;
        else if (x == ">") --depth;
        else if (x == ">>") depth -= 2;
        else if (x == "(" || x == "[" || x == "{") j = match(j);
        else if (x == ";" || x == "{" || x == "}") fail(i, "unbalanced '<'");
        if (depth <= 0) return j;
        continue;
      }
      if (x == o) ++depth;
      else if (x == c) {
        if (--depth == 0) return j;
      }
    }
    fail(i, "unbalanced '" + o + "'");
  }
  void blank(size_t a, size_t b) {  // [a, b]
    for (size_t j = a; j <= b && j < t_.size(); ++j) {
      t_[j].out.clear();
      t_[j].done = true;
    }
  }
  std::string join(size_t a, size_t b) const {  // [a, b), the emitted text
    std::string r;
    for (size_t j = a; j < b; ++j) {
      if (t_[j].kind == K::Directive) continue;
      if (!r.empty() && !t_[j].out.empty()) r += ' ';
      r += t_[j].out;
    }
    return r;
  }
  // An attribute group [[ ... ]] starting at i, or npos.
  size_t attr_end(size_t i) const {
    if (!is(i, "[")) return std::string::npos;
    size_t j = nx(i);
    if (!is(j, "[")) return std::string::npos;
    size_t e = match(i);
    return e;
  }

  // ---- function constants ----
  std::string constant_value(const std::string& type, uint32_t bits, uint32_t ctype) const {
    char buf[96];
    switch (ctype) {
      case kBool: return bits ? "true" : "false";
      case kI32: snprintf(buf, sizeof buf, "int32_t(%d)", int32_t(bits)); break;
      case kU32: snprintf(buf, sizeof buf, "uint32_t(%uu)", bits); break;
      case kF32: snprintf(buf, sizeof buf, "__builtin_bit_cast(float, uint32_t(0x%08xu))", bits); break;
      case kF16: snprintf(buf, sizeof buf, "__builtin_bit_cast(half, uint16_t(0x%04xu))", bits & 0xffffu); break;
      case kI16: snprintf(buf, sizeof buf, "int16_t(%d)", int(int16_t(bits & 0xffffu))); break;
      case kU16: snprintf(buf, sizeof buf, "uint16_t(%uu)", bits & 0xffffu); break;
      default: return "";
    }
    return type + "(" + buf + ")";
  }

  void pass_function_constants() {
    for (size_t i = 0; i < size(); i = nx(i)) {
      if (!is(i, "constant") || t_[i].done) continue;
      // constant TYPE NAME [[function_constant(n)]] ;
      size_t j = i;
      size_t attr = std::string::npos;
      while ((j = nx(j)) < size()) {
        if (is(j, ";") || is(j, "{") || is(j, "=")) break;
        if (is(j, "[") && is(nx(j), "[") && is(nx(nx(j)), "function_constant")) {
          attr = j;
          break;
        }
      }
      if (attr == std::string::npos) continue;
      size_t name = pv(attr);
      if (name == std::string::npos || name <= i || t_[name].kind != K::Ident) fail(i, "malformed function constant");
      size_t ae = attr_end(attr);
      size_t p = nx(nx(nx(attr)));
      if (!is(p, "(") || t_[nx(p)].kind != K::Number) fail(attr, "function_constant needs an index");
      uint32_t index = uint32_t(strtoul(t_[nx(p)].text.c_str(), nullptr, 0));
      size_t semi = nx(ae);
      if (!is(semi, ";")) fail(ae, "expected ';' after a function constant");
      std::string type = join(nx(i), name);
      const FunctionConstant* fc = nullptr;
      for (const auto& c : constants_)
        if (c.index == index) fc = &c;
      std::string value;
      if (fc) {
        value = constant_value(type, fc->bits, fc->type);
        if (value.empty()) fail(attr, "function constant " + std::to_string(index) + " has an unknown type code");
        defined_fc_.insert(t_[name].text);
        if (fc->bits != 0) true_fc_.insert(t_[name].text);
      } else {
        value = type + "{}";
        undefined_fc_.insert(t_[name].text);
      }
      std::string rep = "static constexpr " + type + " " + t_[name].text + " = " + value + ";";
      blank(i, semi);
      t_[i].out = rep;
    }
    for (size_t i = 0; i < size(); i = nx(i)) {
      if (!is(i, "is_function_constant_defined") || t_[i].done) continue;
      size_t p = nx(i), a = nx(p), c = nx(a);
      if (!is(p, "(") || !is(c, ")") || t_[a].kind != K::Ident) fail(i, "is_function_constant_defined takes a name");
      bool def = defined_fc_.count(t_[a].text) != 0;
      if (!def && !undefined_fc_.count(t_[a].text)) fail(a, "'" + t_[a].text + "' is not a function constant");
      blank(i, c);
      t_[i].out = def ? "true" : "false";
    }
  }

  // ---- kernels ----
  // Parses attribute groups in [a, b): host_name and max_total_threads_per_threadgroup.
  void kernel_attrs(size_t a, size_t b, KernelDef* k) {
    for (size_t j = a; j < b && j < size(); j = nx(j)) {
      size_t e = attr_end(j);
      if (e == std::string::npos) continue;
      for (size_t q = nx(nx(j)); q < e; q = nx(q)) {
        if (is(q, "max_total_threads_per_threadgroup")) {
          size_t p = nx(q);
          if (is(p, "(") && t_[nx(p)].kind == K::Number)
            k->max_threads = uint32_t(strtoul(t_[nx(p)].text.c_str(), nullptr, 0));
        } else if (is(q, "host_name")) {
          size_t p = nx(q);
          if (is(p, "(") && t_[nx(p)].kind == K::String) {
            std::string s = t_[nx(p)].text;
            k->host_name = s.substr(1, s.size() - 2);
          }
        }
      }
      blank(j, e);
      j = e;
    }
  }

  void pass_kernels() {
    int depth = 0;
    for (size_t i = 0; i < size(); i = nx(i)) {
      if (is(i, "{")) ++depth;
      else if (is(i, "}")) --depth;
      if (depth != 0 || !is(i, "kernel") || t_[i].done) continue;
      // Skip `template [[host_name]] kernel ...;` instantiations (pass_instantiations).
      size_t start = i;  // first token of the declaration's attributes
      size_t p = pv(i);
      while (p != std::string::npos && is(p, "]")) {
        // walk back over an attribute group
        int d = 0;
        size_t q = p;
        for (;; q = pv(q)) {
          if (is(q, "]")) ++d;
          else if (is(q, "[")) --d;
          if (d == 0 || q == 0) break;
        }
        start = q;
        p = pv(q);
      }
      bool is_template = false;
      if (p != std::string::npos && is(p, "template")) continue;  // an explicit instantiation
      if (p != std::string::npos && is(p, ">")) {
        int d = 0;
        size_t q = p;
        for (; q != std::string::npos; q = pv(q)) {
          if (is(q, ">")) ++d;
          else if (is(q, ">>")) d += 2;
          else if (is(q, "<")) --d;
          if (d == 0) break;
        }
        if (q != std::string::npos && is(pv(q), "template")) is_template = true;
      }
      KernelDef k;
      k.is_template = is_template;
      k.line = t_[i].line;
      k.col = t_[i].col;
      kernel_attrs(start, i, &k);
      t_[i].out.clear();
      t_[i].done = true;
      size_t r = nx(i);
      size_t a = r;
      while (a < size() && !is(a, "(")) {
        if (is(a, ";") || is(a, "{")) fail(i, "expected a kernel function declaration");
        a = nx(a);
      }
      size_t nm = pv(a);
      if (t_[nm].kind != K::Ident) fail(nm, "expected the kernel's name");
      k.name = t_[nm].text;
      if (!is(r, "void")) fail(r, "a kernel returns void");
      size_t close = match(a);
      parse_params(a, close, &k);
      size_t body = nx(close);
      size_t b = body;
      while (b < size() && !is(b, "{") && !is(b, ";")) b = nx(b);
      kernel_attrs(body, b, &k);
      if (!is(b, "{")) continue;  // a declaration only
      if (kernel_by_name_.count(k.name) && !is_template) fail(nm, "kernel '" + k.name + "' defined twice");
      k.body = b;
      kernel_by_name_[k.name] = kernels_.size();
      kernels_.push_back(std::move(k));
      i = pv(b);  // continue at the body's '{' so depth counts it
    }
  }

  void parse_params(size_t open, size_t close, KernelDef* k) {
    size_t s = nx(open);
    if (s == close) return;
    int angle = 0;
    size_t seg = s;
    for (size_t j = s; j <= close; j = nx(j)) {
      if (j < close) {
        if (is(j, "(") || is(j, "[") || is(j, "{")) {
          j = match(j);
          continue;
        }
        if (is(j, "<")) ++angle;
        else if (is(j, ">")) --angle;
        else if (is(j, ">>")) angle -= 2;
      }
      if (j == close || (is(j, ",") && angle <= 0)) {
        param(seg, j, k);
        seg = nx(j);
      }
    }
  }

  // The function constant that an attribute group [[..., function_constant(name)]]
  // in [j, e] names, or "" when it names none.
  std::string gating_constant(size_t j, size_t e) {
    for (size_t q = nx(nx(j)); q < e; q = nx(q)) {
      if (!is(q, "function_constant")) continue;
      size_t p = nx(q), n = nx(p), c = nx(n);
      if (!is(p, "(") || t_[n].kind != K::Ident || !is(c, ")")) fail(q, "function_constant takes a name");
      if (!defined_fc_.count(t_[n].text) && !undefined_fc_.count(t_[n].text))
        fail(n, "'" + t_[n].text + "' is not a function constant");
      return t_[n].text;
    }
    return "";
  }

  // A parameter [[buffer(n), function_constant(c)]] exists only where c is
  // true, as in Metal: with c false (or not given) its binding is not
  // required, a pointer to it covers no memory (any access is out of
  // bounds) and a reference to it reads zeros.
  void param(size_t a, size_t b, KernelDef* k) {  // [a, b)
    std::string spec;
    for (size_t j = a; j < b; j = nx(j)) {
      size_t e = attr_end(j);
      if (e == std::string::npos) continue;
      size_t q = nx(nx(j));
      const std::string& an = t_[q].text;
      const std::string gate = gating_constant(j, e);
      const bool absent = !gate.empty() && !true_fc_.count(gate);
      if (absent && an != "buffer") fail(q, "function_constant applies to [[buffer(n)]] parameters in the emulator");
      auto num = [&](size_t at) -> uint32_t {
        size_t p = nx(at);
        if (!is(p, "(") || t_[nx(p)].kind != K::Number) fail(at, "[[" + an + "]] needs an index");
        uint32_t v = uint32_t(strtoul(t_[nx(p)].text.c_str(), nullptr, 0));
        if (v >= MLXN_MAX_BINDINGS_) fail(at, "binding index " + std::to_string(v) + " is not below 31");
        return v;
      };
      if (an == "buffer" && absent) {
        spec = "::mlxn::arg_absent_buffer<" + std::to_string(num(q)) + "u>";
      } else if (an == "buffer") {
        uint32_t v = num(q);
        spec = "::mlxn::arg_buffer<" + std::to_string(v) + "u>";
        k->buffers.push_back(v);
      } else if (an == "threadgroup") {
        uint32_t v = num(q);
        spec = "::mlxn::arg_threadgroup<" + std::to_string(v) + "u>";
        k->threadgroups.push_back(v);
      } else if (builtin_attrs().count(an)) {
        spec = "::mlxn::arg_builtin<::mlxn::" + builtin_attrs().at(an) + ">";
      } else {
        fail(q, "kernel parameter attribute [[" + an + "]] is not supported by the emulator");
      }
      blank(j, e);
      j = e;
    }
    if (spec.empty()) fail(a, "kernel parameter without a [[buffer(n)]], [[threadgroup(n)]] or builtin attribute");
    k->specs.push_back(spec);
  }
  static constexpr uint32_t MLXN_MAX_BINDINGS_ = 31;

  void pass_instantiations() {
    for (size_t i = 0; i < size(); i = nx(i)) {
      if (!is(i, "template") || t_[i].done) continue;
      size_t a = nx(i);
      size_t e = attr_end(a);
      if (e == std::string::npos) continue;
      // template [[host_name("x")]] [kernel] TYPE NAME<ARGS> [(...)] ;
      std::string host;
      for (size_t q = a; q < e; q = nx(q))
        if (is(q, "host_name") && is(nx(q), "(") && t_[nx(nx(q))].kind == K::String) {
          std::string s = t_[nx(nx(q))].text;
          host = s.substr(1, s.size() - 2);
        }
      if (host.empty()) continue;
      size_t semi = e;
      while (semi < size() && !is(semi, ";")) {
        if (is(semi, "(")) semi = match(semi);
        semi = nx(semi);
      }
      if (semi >= size()) fail(i, "expected ';' after the instantiation");
      // The function name: the last identifier followed by '<' at paren depth 0.
      size_t name = std::string::npos;
      for (size_t q = nx(e); q < semi; q = nx(q)) {
        if (is(q, "(")) {
          q = match(q);
          continue;
        }
        if (t_[q].kind == K::Ident && is(nx(q), "<") && !is(q, "kernel")) name = q;
      }
      if (name == std::string::npos) fail(i, "cannot find the instantiated kernel template");
      size_t lt = nx(name);
      size_t gt = match(lt);
      Inst in;
      in.host = host;
      in.name = t_[name].text;
      in.call = t_[name].text + "<" + join(nx(lt), gt) + ">";
      in.line = t_[i].line;
      in.col = t_[i].col;
      insts_.push_back(in);
      blank(i, semi);
    }
  }

  // ---- address spaces ----
  static unsigned space_of(const std::string& s) {
    if (s == "device") return 1;
    if (s == "constant") return 2;
    if (s == "threadgroup") return 3;
    if (s == "thread") return 4;
    return 0;
  }

  void pass_address_spaces() {
    for (size_t i = 0; i < size(); i = nx(i)) {
      if (t_[i].kind != K::Ident || t_[i].done) continue;
      unsigned sp = space_of(t_[i].text);
      if (!sp) continue;
      size_t before = pv(i);
      if (before != std::string::npos && (is(before, ".") || is(before, "->") || is(before, "::"))) continue;
      if (is(nx(i), "::")) continue;
      // cv-qualifiers written before the address space belong to the pointee.
      std::string cv;
      size_t first = i;
      while (before != std::string::npos && (is(before, "const") || is(before, "volatile")) && !t_[before].done) {
        cv = t_[before].text + " " + cv;
        first = before;
        before = pv(before);
      }
      // Scan the type up to '*', '&' or the end of a declaration.
      size_t j = nx(i);
      int angle = 0;
      size_t stop = std::string::npos;
      for (; j < size(); j = nx(j)) {
        const Tok& x = t_[j];
        if (x.kind == K::Punct) {
          if (x.text == "<") { ++angle; continue; }
          if (x.text == ">") { --angle; continue; }
          if (x.text == ">>") { angle -= 2; continue; }
          if (x.text == "::") continue;
          if (angle > 0 && x.text != ";" && x.text != "{" && x.text != "}") {
            if (x.text == "(" || x.text == "[") j = match(j);
            continue;
          }
          stop = j;
          break;
        }
        if (x.kind == K::Ident && x.text == "decltype" && is(nx(j), "(")) {
          j = match(nx(j));
          continue;
        }
        if (x.kind != K::Ident && x.kind != K::Number) {
          stop = j;
          break;
        }
      }
      if (stop == std::string::npos) fail(i, "unexpected end of source after '" + t_[i].text + "'");
      const std::string& st = t_[stop].text;
      std::string type = join(nx(i), stop);
      if (st == "*") {
        std::string pointee = cv + (sp == 2 ? "const " : "") + type;
        std::string rep;
        if (sp == 4) {
          rep = pointee + " *";
        } else {
          rep = " ::mlxn::dptr<" + pointee + ", " + std::to_string(sp) + "u>";
        }
        blank(first, stop);
        t_[first].out = rep;
        // static_cast<device T*>(x) and friends: a class type cannot be the
        // target of reinterpret_cast, so go through mlxn::ptr_cast.
        size_t lt = pv(first);
        if (sp != 4 && lt != std::string::npos && is(lt, "<")) {
          size_t c = pv(lt);
          if (c != std::string::npos && (is(c, "static_cast") || is(c, "reinterpret_cast") || is(c, "const_cast"))) {
            t_[c].out = "::mlxn::ptr_cast";
            t_[c].done = true;
          }
        }
      } else if (st == "&" || st == "&&") {
        t_[i].out = sp == 2 ? "const" : "";
        t_[i].done = true;
      } else if (sp == 3) {
        threadgroup_variable(i, first, cv);
      } else if (sp == 2) {
        bool has_const = false;
        for (size_t q = nx(i); q < stop; q = nx(q))
          if (is(q, "constexpr") || is(q, "const")) has_const = true;
        t_[i].out = has_const ? "" : "const";
        t_[i].done = true;
      } else {
        t_[i].out.clear();
        t_[i].done = true;
      }
    }
  }

  // threadgroup T a[N][M], b; -> storage from the runtime, checked.
  void threadgroup_variable(size_t kw, size_t first, const std::string& cv) {
    size_t semi = kw;
    while (semi < size() && !is(semi, ";")) {
      if (is(semi, "(") || is(semi, "{")) fail(kw, "threadgroup variables cannot be initialized");
      if (is(semi, "[")) semi = match(semi);
      semi = nx(semi);
    }
    if (semi >= size()) fail(kw, "expected ';' after a threadgroup variable");
    // Declarators: split at top-level commas; the first carries the type.
    std::vector<std::pair<size_t, size_t>> decls;
    size_t seg = nx(kw);
    int angle = 0;
    for (size_t j = seg; j <= semi; j = nx(j)) {
      if (j < semi) {
        if (is(j, "[")) {
          j = match(j);
          continue;
        }
        if (is(j, "<")) ++angle;
        else if (is(j, ">")) --angle;
        else if (is(j, ">>")) angle -= 2;
      }
      if (j == semi || (is(j, ",") && angle <= 0)) {
        decls.push_back({seg, j});
        seg = nx(j);
      }
    }
    std::string type;
    std::string rep;
    for (size_t d = 0; d < decls.size(); ++d) {
      size_t a = decls[d].first, b = decls[d].second;
      size_t br = a;
      while (br < b && !is(br, "[")) br = nx(br);
      size_t name = pv(br);
      if (name == std::string::npos || name < a || t_[name].kind != K::Ident)
        fail(a, "expected the threadgroup variable's name");
      if (d == 0) type = cv + join(a, name);
      std::string dims = join(br, b);
      uint32_t id = next_tg_id_++;
      tg_decls_.push_back({kw, id});
      if (!dims.empty()) {
        rep += "auto " + t_[name].text + " = ::mlxn::tg_array<" + type + " " + dims + ", " + std::to_string(id) + "u>(); ";
      } else {
        rep += type + "& " + t_[name].text + " = ::mlxn::tg_scalar<" + type + ", " + std::to_string(id) + "u>(); ";
      }
    }
    blank(first, semi);
    t_[first].out = rep;
  }

  // ---- threadgroup variables per kernel ----
  // A function body: the '{' of `NAME ( ... ) [qualifiers] {`, NAME not a
  // control keyword (lambdas, `]( ... ) {`, are part of the enclosing body).
  struct FnBody {
    std::string name;
    size_t open, close;
  };
  std::vector<FnBody> fn_bodies() const {
    static const std::set<std::string> control = {"if", "for", "while", "switch", "catch", "return", "sizeof",
                                                   "alignof", "decltype", "static_assert"};
    std::vector<FnBody> out;
    for (size_t i = 0; i < size(); i = nx(i)) {
      if (!is(i, "{")) continue;
      size_t p = pv(i);
      // Skip qualifiers between ')' and '{'.
      while (p != std::string::npos && t_[p].kind == K::Ident &&
             (is(p, "const") || is(p, "noexcept") || is(p, "override") || is(p, "final") || is(p, "mutable")))
        p = pv(p);
      if (p == std::string::npos || !is(p, ")")) continue;
      // Walk back to the matching '('.
      int d = 0;
      size_t q = p;
      for (; q != std::string::npos; q = pv(q)) {
        if (is(q, ")")) ++d;
        else if (is(q, "(") && --d == 0) break;
      }
      if (q == std::string::npos) continue;
      size_t nm = pv(q);
      if (nm == std::string::npos || t_[nm].kind != K::Ident || control.count(t_[nm].text)) continue;
      size_t close;
      try {
        close = match(i);
      } catch (const Fail&) {
        continue;
      }
      out.push_back({t_[nm].text, i, close});
    }
    return out;
  }

  // Ids of the threadgroup variables that kernel k's body declares, and the
  // functions it calls (by name, every overload, transitively) declare.
  // Declarations inside #define bodies are not counted.
  std::vector<uint32_t> kernel_tg_ids(const KernelDef& k, const std::vector<FnBody>& fns) const {
    std::set<uint32_t> ids;
    std::set<std::string> seen;
    std::vector<std::pair<size_t, size_t>> todo;
    size_t kclose;
    try {
      kclose = match(k.body);
    } catch (const Fail&) {
      return {};
    }
    todo.push_back({k.body, kclose});
    seen.insert(k.name);
    while (!todo.empty()) {
      auto [a, b] = todo.back();
      todo.pop_back();
      for (const auto& d : tg_decls_)
        if (d.first > a && d.first < b) ids.insert(d.second);
      for (size_t j = a; j < b; j = nx(j)) {
        if (t_[j].kind != K::Ident) continue;
        size_t n = nx(j);
        if (is(n, "<")) {  // f<...>(
          size_t e = n;
          int depth = 0;
          for (; e < b; e = nx(e)) {
            if (is(e, "<")) ++depth;
            else if (is(e, ">")) --depth;
            else if (is(e, ">>")) depth -= 2;
            else if (is(e, ";") || is(e, "{") || is(e, "}")) break;
            if (depth <= 0) break;
          }
          if (e < b && depth <= 0 && (is(e, ">") || is(e, ">>"))) n = nx(e);
        }
        if (!is(n, "(")) continue;
        const std::string& name = t_[j].text;
        if (!seen.insert(name).second) continue;
        for (const FnBody& f : fns)
          if (f.name == name) todo.push_back({f.open, f.close});
      }
    }
    return std::vector<uint32_t>(ids.begin(), ids.end());
  }

  // ---- element addresses ----
  // Unary `&X[i]` (X a name with member accesses, calls and subscripts, the
  // last postfix operation the subscript) -> ::mlxn::elem_addr(X, i), so
  // that the address of an element of a checked pointer is checked too.
  void pass_elem_addr() {
    for (size_t i = 0; i < size(); i = nx(i)) {
      if (!is(i, "&") || t_[i].kind != K::Punct || t_[i].done) continue;
      size_t p = pv(i);
      bool unary = p == std::string::npos;
      if (!unary) {
        const Tok& x = t_[p];
        if (x.kind == K::Punct)
          unary = !(x.text == ")" || x.text == "]" || x.text == ">" || x.text == ">>" || x.text == "++" ||
                    x.text == "--");
        else
          unary = x.kind == K::Ident && x.text == "return";
      }
      if (!unary) continue;
      size_t j = nx(i);
      if (j >= size() || !(t_[j].kind == K::Ident || is(j, "(") || is(j, "::"))) continue;
      size_t last_open = std::string::npos, last_close = std::string::npos;
      bool last_is_subscript = false;
      while (j < size()) {
        if (t_[j].kind == K::Ident) {
          last_is_subscript = false;
          j = nx(j);
        } else if (is(j, "::") || is(j, ".") || is(j, "->")) {
          last_is_subscript = false;
          j = nx(j);
          if (j >= size() || t_[j].kind != K::Ident) break;
        } else if (is(j, "(")) {
          last_is_subscript = false;
          j = nx(match(j));
        } else if (is(j, "[")) {
          if (is(nx(j), "[")) break;  // an attribute
          last_open = j;
          last_close = match(j);
          last_is_subscript = true;
          j = nx(last_close);
        } else {
          break;
        }
      }
      if (!last_is_subscript || last_open == nx(i) || t_[last_open].done || t_[last_close].done) continue;
      t_[i].out = "::mlxn::elem_addr(";
      t_[last_open].out = ",";
      t_[last_close].out = ")";
      t_[i].done = t_[last_open].done = t_[last_close].done = true;
    }
  }

  // ---- literals ----
  void pass_literals() {
    for (size_t i = 0; i < size(); i = nx(i)) {
      Tok& x = t_[i];
      if (x.kind != K::Number || x.done) continue;
      std::string s = x.text;
      bool hex = s.size() > 1 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
      bool flt = false;
      for (char c : s) {
        if (c == '.') flt = true;
        if (!hex && (c == 'e' || c == 'E')) flt = true;
        if (hex && (c == 'p' || c == 'P')) flt = true;
      }
      size_t n = s.size();
      auto ends = [&](const char* suf) {
        size_t l = strlen(suf);
        return n > l && strcasecmp(s.c_str() + n - l, suf) == 0;
      };
      if (hex && !flt) continue;
      if (ends("bf")) {
        std::string body = s.substr(0, n - 2);
        bool bf = body.find_first_of(".eEpP") != std::string::npos;
        x.out = "((bfloat)" + body + (bf ? "f" : ".0f") + ")";
      } else if (ends("h") && !ends("uh")) {
        std::string body = s.substr(0, n - 1);
        bool bf = body.find_first_of(".eEpP") != std::string::npos;
        x.out = "((half)" + body + (bf ? "f" : ".0f") + ")";
      } else if (flt && !ends("f") && !ends("l")) {
        x.out = s + "f";
      }
    }
  }

  // Loop-unrolling requests change nothing in what a kernel computes, and full
  // unrolling of loops around SIMD collectives makes clang take tens of
  // seconds, so they are dropped: _Pragma("clang loop unroll...") and
  // #pragma unroll / #pragma clang loop.
  void pass_unroll_pragmas() {
    for (size_t i = 0; i < size(); ++i) {
      Tok& x = t_[i];
      if (x.kind == K::Directive) {
        std::string d;
        for (char c : x.text)
          if (c != ' ' && c != '\t') d += c;
        if (d.rfind("#pragmaunroll", 0) == 0 || d.rfind("#pragmanounroll", 0) == 0 ||
            d.rfind("#pragmaclangloop", 0) == 0)
          x.out.clear();
        continue;
      }
      if (x.text != "_Pragma" || x.done) continue;
      size_t p = nx(i), s = nx(p), c = nx(s);
      if (is(p, "(") && s < size() && t_[s].kind == K::String && is(c, ")") &&
          (t_[s].text.find("unroll") != std::string::npos || t_[s].text.find("clang loop") != std::string::npos))
        blank(i, c);
    }
  }

  // #define bodies get the address-space and literal rewrites too.
  void pass_macros() {
    for (size_t i = 0; i < size(); ++i) {
      Tok& x = t_[i];
      if (x.kind != K::Directive) continue;
      size_t p = 1;
      while (p < x.text.size() && (x.text[p] == ' ' || x.text[p] == '\t')) ++p;
      if (x.text.compare(p, 6, "define") != 0) continue;
      std::vector<Tok> body;
      std::string trail;
      Fail f;
      std::string inner = x.text.substr(p + 6);
      if (!lex(inner, &body, &trail, &f, false)) continue;
      Translator sub(body, name_, constants_);
      sub.next_tg_id_ = next_tg_id_ + 100000;
      try {
        // Skip the macro's name and parameter list.
        if (body.empty()) continue;
        for (auto& b : body) b.done = false;
        size_t start = 1;
        if (body.size() > 1 && body[1].text == "(" && body[1].pre.empty()) {
          size_t q = 1;
          while (q < body.size() && body[q].text != ")") ++q;
          start = q + 1;
        }
        for (size_t q = 0; q < start && q < body.size(); ++q) body[q].done = true;
        sub.pass_unroll_pragmas();
        sub.pass_address_spaces();
        sub.pass_literals();
        sub.pass_elem_addr();
      } catch (const Fail&) {
        continue;
      }
      std::string r = x.text.substr(0, p + 6);
      for (auto& b : body) r += b.pre + b.out;
      r += trail;
      x.out = r;
    }
  }
};

}  // namespace

bool translate(const std::string& source, const std::string& name, const std::vector<FunctionConstant>& constants,
               Translation* out, std::string* error) {
  std::vector<Tok> toks;
  std::string trailing;
  Fail f{1, 1, ""};
  auto report = [&](const Fail& fl) {
    if (error) *error = name + ":" + std::to_string(fl.line) + ":" + std::to_string(fl.col) + ": " + fl.msg;
    return false;
  };
  if (!lex(source, &toks, &trailing, &f)) return report(f);
  Translator tr(toks, name, constants);
  try {
    tr.pass_unroll_pragmas();
    tr.pass_function_constants();
    tr.pass_kernels();
    tr.pass_instantiations();
    tr.pass_address_spaces();
    tr.pass_literals();
    tr.pass_elem_addr();
    tr.pass_macros();
  } catch (const Fail& fl) {
    return report(fl);
  }

  Translation res;
  std::string& cpp = res.cpp;
  cpp += "// Translated from " + name + " by the mlx-native emulator.\n";
  cpp += "#define MLXN_SOURCE_NAME " + quote(name) + "\n";
  cpp += "#include <metal_stdlib>\n";
  cpp += "#line 1 " + quote(name) + "\n";
  for (const Tok& t : toks) cpp += t.pre + t.out;
  cpp += trailing;
  cpp += "\n#line 1 " + quote(name + " (emulator entry points)") + "\n";

  std::set<std::string> hosts;
  const auto fns = tr.fn_bodies();
  auto emit = [&](const KernelDef& k, const std::string& host, const std::string& call, int line, int col) {
    if (!is_identifier(host)) {
      report(Fail{line, col, "kernel host name '" + host + "' is not an identifier"});
      return false;
    }
    if (!hosts.insert(host).second) {
      report(Fail{line, col, "two kernels named '" + host + "'"});
      return false;
    }
    KernelInfo info;
    info.host_name = host;
    info.symbol = "mlxn_emu_kernel_" + host;
    info.buffer_indices = k.buffers;
    info.threadgroup_indices = k.threadgroups;
    info.max_total_threads_per_threadgroup = k.max_threads;
    std::string specs;
    for (size_t i = 0; i < k.specs.size(); ++i) specs += (i ? ", " : "") + k.specs[i];
    cpp += "extern \"C\" __attribute__((visibility(\"default\"))) void " + info.symbol +
           "(mlxn_emu_thread* t) {\n  ::mlxn::run_kernel(t, &" + call + ", ::mlxn::specs<" + specs + ">{});\n}\n";
    std::string ids;
    const std::vector<uint32_t> tg_ids = tr.kernel_tg_ids(k, fns);
    for (uint32_t id : tg_ids) ids += std::to_string(id) + "u, ";
    cpp += "extern \"C\" __attribute__((visibility(\"default\"))) uint64_t mlxn_emu_kernel_static_threadgroup_" +
           host + "(void) {\n  static const uint32_t ids[] = {" + ids + "0u};\n  return ::mlxn::static_threadgroup_bytes(ids, " +
           std::to_string(tg_ids.size()) + "u);\n}\n";
    res.kernels.push_back(std::move(info));
    return true;
  };
  for (const KernelDef& k : tr.kernels_) {
    if (k.is_template) continue;
    if (!emit(k, k.host_name.empty() ? k.name : k.host_name, k.name, k.line, k.col)) return false;
  }
  for (const auto& in : tr.insts_) {
    auto it = tr.kernel_by_name_.find(in.name);
    if (it == tr.kernel_by_name_.end())
      return report(Fail{in.line, in.col, "'" + in.name + "' is not a kernel template of this file"});
    if (!emit(tr.kernels_[it->second], in.host, in.call, in.line, in.col)) return false;
  }
  cpp += "extern \"C\" __attribute__((visibility(\"default\"))) uint32_t mlxn_emu_kernel_abi(void) { return MLXN_EMU_KERNEL_ABI; }\n";
  *out = std::move(res);
  return true;
}

}  // namespace mlxn::emu
