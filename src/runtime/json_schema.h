// A JSON Schema, compiled for constrained generation (JsonPrefix checks the answer against it
// byte by byte). The subset that structured-output clients send, each keyword enforced or the
// schema refused (never a keyword silently ignored, annotations aside):
//   type (one or a list: object, array, string, number, integer, boolean, null); enum / const
//   of strings; object: properties (written in their declared order, each optional one may be
//   left out), required, additionalProperties false (the default when properties are given;
//   true or a schema only without properties); array: items, minItems, maxItems.
// Annotations (title, description, default, examples, format, $schema, $id) are accepted and
// have no effect. The top level must allow an object.
#pragma once

#include <climits>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace diskformer {

class JsonSchema {
public:
    enum Type : uint8_t {
        kObject = 1,
        kArray = 2,
        kString = 4,
        kNumber = 8,   // any number
        kInteger = 16,  // integers only (no fraction or exponent)
        kBoolean = 32,
        kNull = 64,
        kAll = 127,
    };
    static constexpr size_t kMaxChoices = 64;  // properties of an object, values of an enum

    struct Node {
        uint8_t types = kAll;
        bool props = false;             // properties declared: only those keys, in that order
        std::vector<std::string> keys;  // property names as written between the quotes (JSON-escaped)
        std::vector<int> values;        // their schemas
        std::vector<bool> required;
        int extra = 0;                  // without declared properties: every key's value schema
        int items = 0;
        int min_items = 0, max_items = INT_MAX;
        std::vector<std::string> enums;  // allowed strings as written between the quotes; empty: any
    };

    // Compiles schema text; throws diskformer::Error naming what it cannot enforce.
    static JsonSchema compile(std::string_view schema_json);

    const Node& node(int i) const { return nodes_[static_cast<size_t>(i)]; }
    int root() const { return root_; }

private:
    std::vector<Node> nodes_;  // node 0 accepts any value
    int root_ = 0;
};

}  // namespace diskformer
