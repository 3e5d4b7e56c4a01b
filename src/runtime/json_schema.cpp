#include "runtime/json_schema.h"

#include <nlohmann/json.hpp>

#include <string>

#include "diskformer/diskformer.h"

namespace diskformer {
namespace {

using OJ = nlohmann::ordered_json;  // properties keep their declared order

[[noreturn]] void fail(const std::string& at, const std::string& what) {
    throw Error("json schema" + (at.empty() ? std::string() : " at " + at) + ": " + what);
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

class Compiler {
public:
    std::vector<JsonSchema::Node> nodes{JsonSchema::Node{}};  // node 0: any value

    int add(const OJ& s, const std::string& at) {
        if (s.is_boolean()) {
            if (!s.get<bool>()) fail(at, "false (no value) cannot be generated");
            return 0;
        }
        if (!s.is_object()) fail(at, "a schema must be an object or true");
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
                    if (!e.is_string()) fail(here, "only string values are supported");
                    n.enums.push_back(escaped(e.get<std::string>()));
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
            } else if (k == "required" || k == "additionalProperties" || k == "items" || k == "minItems" || k == "maxItems") {
                // read below, once properties are known
            } else if (k == "title" || k == "description" || k == "default" || k == "examples" || k == "format" ||
                       k == "$schema" || k == "$id" || k == "$comment" || k == "strict") {
                // annotations
            } else {
                fail(here, "\"" + k + "\" is not supported");
            }
        }
        if (!typed) {
            if (n.props || s.contains("additionalProperties") || s.contains("required")) n.types = JsonSchema::kObject;
            else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) n.types = JsonSchema::kArray;
            else if (!n.enums.empty()) n.types = JsonSchema::kString;
        }
        if (!n.enums.empty() && n.types != JsonSchema::kString) fail(at, "an enum of strings needs type string");
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
        if (s.contains("items")) n.items = add(s["items"], at + "/items");
        if (n.props) {
            const OJ& props = s["properties"];
            size_t i = 0;
            for (auto p = props.begin(); p != props.end(); ++p, ++i) n.values[i] = add(p.value(), at + "/properties/" + p.key());
        }
        nodes.push_back(std::move(n));
        return static_cast<int>(nodes.size() - 1);
    }
};

}  // namespace

JsonSchema JsonSchema::compile(std::string_view text) {
    const OJ s = OJ::parse(text, nullptr, /*allow_exceptions=*/false);
    if (s.is_discarded()) throw Error("json schema: not valid JSON");
    Compiler c;
    JsonSchema out;
    out.root_ = c.add(s, "");
    out.nodes_ = std::move(c.nodes);
    if (!(out.nodes_[static_cast<size_t>(out.root_)].types & kObject)) throw Error("json schema: the top level must allow an object");
    return out;
}

}  // namespace diskformer
