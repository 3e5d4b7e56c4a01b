#include "runtime/json_schema.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "diskformer/diskformer.h"
#include "diskformer/generate.h"

namespace diskformer {
namespace {

using OJ = nlohmann::ordered_json;  // properties keep their declared order

[[noreturn]] void fail(const std::string& at, const std::string& what) {
    throw Error("json schema" + (at.empty() ? std::string() : " at " + at) + ": " + what);
}

// The exact decimal value of a finite double, without exponent or trailing zeros
// ("0.1000000000000000055511151231257827021181583404541015625"): a double's fraction has at
// most 1074 digits, which printf writes exactly.
std::string exact_decimal(double x) {
    std::vector<char> buf(1600);
    std::snprintf(buf.data(), buf.size(), "%.1100f", x);
    std::string d = buf.data();
    d.erase(d.find_last_not_of('0') + 1);
    if (d.back() == '.') d.pop_back();
    return d == "-0" ? "0" : d;
}

// A string as it appears between the quotes of its JSON text.
std::string escaped(const std::string& s) {
    const std::string q = OJ(s).dump(-1, ' ', false, OJ::error_handler_t::replace);
    return q.substr(1, q.size() - 2);
}

uint8_t type_bit(const OJ& t, const std::string& at) {
    if (!t.is_string()) fail(at, "\"type\" must be a string or a list of strings");
    const std::string& s = t.get_ref<const std::string&>();
    if (s == "object") return JsonSchema::kObject;
    if (s == "array") return JsonSchema::kArray;
    if (s == "string") return JsonSchema::kString;
    if (s == "number") return JsonSchema::kNumber | JsonSchema::kInteger;
    if (s == "integer") return JsonSchema::kInteger;
    if (s == "boolean") return JsonSchema::kBoolean;
    if (s == "null") return JsonSchema::kNull;
    fail(at, "unknown type \"" + s + "\"");
}

int bound(const OJ& v, const std::string& at, const char* key) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT_MAX)
        fail(at, std::string("\"") + key + "\" must be a non-negative integer");
    return static_cast<int>(v.get<int64_t>());
}

// The string formats JSON mode enforces, as patterns of their syntax (RFC 3339 dates and times,
// RFC 4122 UUIDs, dotted-quad IPv4, a common subset of e-mail addresses: every string generated
// is valid, not every valid one can be generated). Calendar checks (February 30) are not made.
// Other formats stay annotations.
const char* format_pattern(const std::string& format) {
#define DF_DATE "\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])"
#define DF_TIME "([01]\\d|2[0-3]):[0-5]\\d:([0-5]\\d|60)(\\.\\d{1,9})?([Zz]|[+-]([01]\\d|2[0-3]):[0-5]\\d)"
#define DF_OCTET "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)"
    if (format == "date") return "^" DF_DATE "$";
    if (format == "time") return "^" DF_TIME "$";
    if (format == "date-time") return "^" DF_DATE "[Tt]" DF_TIME "$";
    if (format == "uuid") return "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
    if (format == "ipv4") return "^(" DF_OCTET "\\.){3}" DF_OCTET "$";
    if (format == "email") return "^[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\\.[A-Za-z0-9-]+)+$";
#undef DF_DATE
#undef DF_TIME
#undef DF_OCTET
    return nullptr;
}

bool annotation(const std::string& k) {
    return k == "title" || k == "description" || k == "default" || k == "examples" || k == "format" || k == "$schema" ||
           k == "$id" || k == "$comment" || k == "strict" || k == "$defs" || k == "definitions";
}

// The type of an enum value (a scalar), or 0 for arrays and objects.
uint8_t value_type(const OJ& v) {
    if (v.is_string()) return JsonSchema::kString;
    if (v.is_boolean()) return JsonSchema::kBoolean;
    if (v.is_null()) return JsonSchema::kNull;
    if (v.is_number_integer()) return JsonSchema::kInteger | JsonSchema::kNumber;
    if (v.is_number()) return JsonSchema::kNumber;
    return 0;
}

class Compiler {
public:
    explicit Compiler(const OJ& root) : root_(root) {}
    std::vector<JsonSchema::Node> nodes{JsonSchema::Node{}};  // node 0: any value
    std::vector<JsonRegex> regexes;                              // Node::pattern indexes these

    int add(const OJ& s, const std::string& at) {
        // A request's schema must not recurse the compiler off its stack.
        struct Depth {
            int& d;
            explicit Depth(int& x) : d(++x) {}
            ~Depth() { --d; }
        } depth(depth_);
        if (depth_ > kMaxDepth) fail(at, "schemas nested deeper than " + std::to_string(kMaxDepth) + " are not supported");
        if (s.is_boolean()) {
            if (!s.get<bool>()) fail(at, "false (no value) cannot be generated");
            return 0;
        }
        if (!s.is_object()) fail(at, "a schema must be an object or true");
        for (const char* k : {"$ref", "anyOf", "oneOf", "allOf"})
            if (s.contains(k)) return composite(s, k, at);
        JsonSchema::Node n;
        bool typed = false;
        for (auto it = s.begin(); it != s.end(); ++it) {
            const std::string& k = it.key();
            const OJ& v = it.value();
            const std::string here = at + "/" + k;
            if (k == "type") {
                n.types = 0;
                if (v.is_array()) {
                    for (const auto& t : v) n.types |= type_bit(t, here);
                } else {
                    n.types = type_bit(v, here);
                }
                if (n.types == 0) fail(here, "an empty list of types");
                typed = true;
            } else if (k == "enum" || k == "const") {
                const OJ list = k == "const" ? OJ::array({v}) : v;
                if (!list.is_array() || list.empty()) fail(here, "\"enum\" must be a non-empty array");
                if (list.size() > JsonSchema::kMaxChoices) fail(here, "more than 64 values");
                for (const auto& e : list) {
                    const uint8_t t = value_type(e);
                    if (!t) fail(here, "only strings, numbers, booleans and null are supported as values");
                    n.choice_types |= t;
                    n.choices.push_back(e.dump(-1, ' ', false, OJ::error_handler_t::replace));
                }
            } else if (k == "properties") {
                if (!v.is_object()) fail(here, "\"properties\" must be an object");
                if (v.size() > JsonSchema::kMaxChoices) fail(here, "more than 64 properties");
                n.props = true;
                for (auto p = v.begin(); p != v.end(); ++p) {
                    n.keys.push_back(escaped(p.key()));
                    n.required.push_back(false);
                    n.values.push_back(-1);  // compiled below (nodes may move while compiling)
                }
            } else if (k == "nullable") {
                if (!v.is_boolean()) fail(here, "must be true or false");
            } else if (k == "required" || k == "additionalProperties" || k == "items" || k == "minItems" || k == "maxItems" ||
                       k == "minLength" || k == "maxLength" || k == "pattern" || k == "minimum" || k == "maximum" || k == "exclusiveMinimum" ||
                       k == "exclusiveMaximum") {
                // read below, once properties are known
            } else if (!annotation(k)) {
                fail(here, "\"" + k + "\" is not supported");
            }
        }
        if (!typed) {
            if (n.props || s.contains("additionalProperties") || s.contains("required")) n.types = JsonSchema::kObject;
            else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) n.types = JsonSchema::kArray;
            else if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern")) n.types = JsonSchema::kString;
            else if (!n.choices.empty()) n.types = n.choice_types;
        }
        if (s.contains("nullable") && s["nullable"].get<bool>()) n.types |= JsonSchema::kNull;
        if (!n.choices.empty()) {
            // Every value must be of an allowed type (an integer value meets "integer" and "number").
            for (size_t i = 0; i < n.choices.size(); ++i) {
                const OJ e = OJ::parse(n.choices[i]);
                if (!(value_type(e) & n.types)) fail(at + "/enum", n.choices[i] + " is not of the schema's type");
            }
            n.choice_types = n.types;  // a value of any allowed type must be one of them
        }
        if (s.contains("required")) {
            const OJ& r = s["required"];
            if (!r.is_array()) fail(at + "/required", "must be an array of property names");
            for (const auto& name : r) {
                if (!name.is_string()) fail(at + "/required", "must be an array of property names");
                const std::string key = escaped(name.get<std::string>());
                size_t i = 0;
                while (i < n.keys.size() && n.keys[i] != key) ++i;
                if (i == n.keys.size()) fail(at + "/required", "\"" + name.get<std::string>() + "\" is not among the properties");
                n.required[i] = true;
            }
        }
        if (s.contains("additionalProperties")) {
            const OJ& a = s["additionalProperties"];
            const bool none = a.is_boolean() && !a.get<bool>();
            if (!none && n.props) fail(at + "/additionalProperties", "other keys beside declared properties are not supported");
            if (!none) n.extra = add(a, at + "/additionalProperties");
        }
        if (s.contains("minItems")) n.min_items = bound(s["minItems"], at, "minItems");
        if (s.contains("maxItems")) n.max_items = bound(s["maxItems"], at, "maxItems");
        if (n.min_items > n.max_items) fail(at, "minItems exceeds maxItems");
        if (s.contains("minLength")) n.min_length = bound(s["minLength"], at, "minLength");
        if (s.contains("maxLength")) n.max_length = bound(s["maxLength"], at, "maxLength");
        if (n.min_length > n.max_length) fail(at, "minLength exceeds maxLength");
        // A pattern, else a format JSON mode knows (format_pattern); with both, the pattern.
        const char* format = s.contains("format") && s["format"].is_string() && (n.types & JsonSchema::kString)
                                 ? format_pattern(s["format"].get<std::string>())
                                 : nullptr;
        if (s.contains("pattern") || format) {
            const bool own = s.contains("pattern");
            const OJ& p = own ? s["pattern"] : OJ(format);
            const std::string where = at + (own ? "/pattern" : "/format");
            if (!p.is_string()) fail(where, "must be a string");
            try {
                regexes.push_back(JsonRegex::compile(p.get<std::string>()));
            } catch (const Error& e) {
                fail(where, std::string(e.what()).substr(9));  // without its "pattern: "
            }
            n.pattern = static_cast<int>(regexes.size()) - 1;
            if (n.types == JsonSchema::kString && n.choices.empty() && !regexes.back().fits(regexes.back().start(), n.min_length, n.max_length))
                fail(where, n.max_length == INT_MAX
                                ? "no string of at least " + std::to_string(n.min_length) + " characters matches it (minLength)"
                                : "no string of " + std::to_string(n.min_length) + " to " + std::to_string(n.max_length) +
                                      " characters matches it (minLength / maxLength)");
            // enum / const strings are generated as written: each must match too.
            for (const auto& c : n.choices) {
                const OJ e = OJ::parse(c);
                if (e.is_string() && !regexes.back().matches(e.get<std::string>()))
                    fail(where, c + " (an enum value) does not match it");
            }
        }
        double real_lo = -HUGE_VAL, real_hi = HUGE_VAL;
        for (const char* k : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
            if (!s.contains(k)) continue;
            const std::string here = at + "/" + k;
            const OJ& v = s[k];
            if (!v.is_number()) fail(here, "must be a number");
            if (!typed) n.types = JsonSchema::kInteger;
            const double x = v.get<double>();
            if (!std::isfinite(x)) fail(here, "must be finite");
            const std::string key = k;
            const bool low = key == "minimum" || key == "exclusiveMinimum";
            const bool exclusive = key.rfind("exclusive", 0) == 0;
            // Numbers: the tighter bound, an exclusive one where both are the same number.
            if (low && (x > real_lo || (x == real_lo && exclusive))) real_lo = x, n.lo_open = exclusive;
            if (!low && (x < real_hi || (x == real_hi && exclusive))) real_hi = x, n.hi_open = exclusive;
            // Integers: the nearest integer inside the bound.
            double b = low ? (exclusive ? std::floor(x) + 1 : std::ceil(x)) : (exclusive ? std::ceil(x) - 1 : std::floor(x));
            b = std::clamp(b, -static_cast<double>(JsonSchema::kMaxBound), static_cast<double>(JsonSchema::kMaxBound));
            auto& bound = low ? n.min_value : n.max_value;
            bound = low ? std::max(bound, static_cast<int64_t>(b)) : std::min(bound, static_cast<int64_t>(b));
            n.bounded = true;
        }
        if (n.bounded && (n.types & JsonSchema::kNumber)) {
            if (real_lo > real_hi || (real_lo == real_hi && (n.lo_open || n.hi_open))) fail(at, "no number lies within the bounds");
            n.real_bounded = true;
            if (real_lo > -HUGE_VAL) n.real_lo = exact_decimal(real_lo);
            if (real_hi < HUGE_VAL) n.real_hi = exact_decimal(real_hi);
        } else if (n.min_value > n.max_value) {
            fail(at, "no integer lies within the bounds");
        }
        if (s.contains("items")) n.items = add(s["items"], at + "/items");
        if (n.props) {
            const OJ& props = s["properties"];
            size_t i = 0;
            for (auto p = props.begin(); p != props.end(); ++p, ++i) n.values[i] = add(p.value(), at + "/properties/" + p.key());
        }
        nodes.push_back(std::move(n));
        return static_cast<int>(nodes.size() - 1);
    }

private:
    static constexpr int kMaxDepth = 64;
    int depth_ = 0;
    const OJ& root_;
    std::map<std::string, int> refs_;  // JSON pointer -> the node standing for it

    // $ref, anyOf / oneOf, allOf: with nothing beside them but annotations.
    int composite(const OJ& s, const char* kw, const std::string& at) {
        for (auto it = s.begin(); it != s.end(); ++it)
            if (it.key() != kw && !annotation(it.key()))
                fail(at + "/" + it.key(), "\"" + it.key() + "\" beside \"" + kw + "\" is not supported");
        const OJ& v = s[kw];
        const std::string here = at + "/" + kw;
        if (std::string(kw) == "$ref") {
            if (!v.is_string()) fail(here, "must be a string");
            return ref(v.get<std::string>(), here);
        }
        if (!v.is_array() || v.empty()) fail(here, "must be a non-empty array of schemas");
        if (std::string(kw) == "allOf") {
            if (v.size() != 1) fail(here, "more than one schema to meet at once is not supported");
            return alias(add(v[0], here + "/0"));
        }
        if (v.size() > JsonSchema::kMaxChoices) fail(here, "more than 64 schemas");
        JsonSchema::Node n;
        for (size_t i = 0; i < v.size(); ++i) n.any_of.push_back(add(v[i], here + "/" + std::to_string(i)));
        nodes.push_back(std::move(n));
        return static_cast<int>(nodes.size() - 1);
    }

    int alias(int target) {
        JsonSchema::Node n;
        n.ref = target;
        nodes.push_back(std::move(n));
        return static_cast<int>(nodes.size() - 1);
    }

    // A reference into this document ("#" or "#/json/pointer"): one node per pointer, made before
    // its target is compiled so that the target may refer to it (recursion).
    int ref(const std::string& to, const std::string& at) {
        if (to.empty() || to[0] != '#') fail(at, "only references into the schema itself (\"#...\") are supported");
        if (const auto it = refs_.find(to); it != refs_.end()) return it->second;
        const OJ* target = nullptr;
        try {
            target = &root_.at(OJ::json_pointer(to.substr(1)));
        } catch (const std::exception&) {
            fail(at, "\"" + to + "\" does not name a part of the schema");
        }
        const int me = alias(0);
        refs_[to] = me;
        const int body = add(*target, to);
        nodes[static_cast<size_t>(me)].ref = body;
        return me;
    }
};

}  // namespace

int JsonSchema::resolve(int i, uint8_t t) const {
    // Each hop leaves a ref or a branch; finish() refused cycles of those.
    for (;;) {
        const Node& n = node(i);
        if (!(n.reach & t)) return -1;
        if (n.ref >= 0) {
            i = n.ref;
        } else if (!n.any_of.empty()) {
            for (int b : n.any_of)
                if (node(b).reach & t) {
                    i = b;
                    break;
                }
        } else {
            return i;
        }
    }
}

namespace {

// Computes every node's reach; refuses ref cycles that never reach a value schema and branches
// whose types overlap (a value's first byte must pick one branch).
void finish(std::vector<JsonSchema::Node>& nodes) {
    std::vector<uint8_t> state(nodes.size(), 0);  // 0 new, 1 in progress, 2 done
    std::function<uint8_t(size_t)> reach = [&](size_t i) -> uint8_t {
        auto& n = nodes[i];
        if (state[i] == 2) return n.reach;
        if (state[i] == 1) throw Error("json schema: a $ref or anyOf refers to itself before any value");
        state[i] = 1;
        uint8_t r = 0;
        if (n.ref >= 0) {
            r = reach(static_cast<size_t>(n.ref));
        } else if (!n.any_of.empty()) {
            for (int b : n.any_of) {
                const uint8_t rb = reach(static_cast<size_t>(b));
                if (r & rb) throw Error("json schema: anyOf / oneOf branches that allow the same type are not supported");
                r |= rb;
            }
        } else {
            r = n.types;
        }
        n.reach = r;
        state[i] = 2;
        return r;
    };
    for (size_t i = 0; i < nodes.size(); ++i) reach(i);
}

}  // namespace

JsonSchema JsonSchema::compile(std::string_view text) {
    const OJ s = OJ::parse(text, nullptr, /*allow_exceptions=*/false);
    if (s.is_discarded()) throw Error("json schema: not valid JSON");
    Compiler c(s);
    JsonSchema out;
    out.root_ = c.add(s, "");
    out.nodes_ = std::move(c.nodes);
    out.regexes_ = std::move(c.regexes);
    finish(out.nodes_);
    if (!(out.nodes_[static_cast<size_t>(out.root_)].reach & kObject)) throw Error("json schema: the top level must allow an object");
    return out;
}

// diskformer/generate.h's check, here beside the compiler it runs.
void check_json_schema(std::string_view schema_json) { (void)JsonSchema::compile(schema_json); }

}  // namespace diskformer
