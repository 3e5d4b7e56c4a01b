// A JSON Schema, compiled for constrained generation (JsonPrefix checks the answer against it
// byte by byte). The subset that structured-output clients send (OpenAI's strict mode, pydantic),
// each keyword enforced or the schema refused (never a keyword silently ignored, annotations
// aside):
//   type (one or a list: object, array, string, number, integer, boolean, null), nullable;
//   enum / const of strings, numbers, booleans and null (the value written as its compact JSON
//   text); object: properties (written in their declared order, each optional one may be left
//   out), required, additionalProperties false (the default when properties are given; true or a
//   schema only without properties); array: items, minItems, maxItems; string: minLength,
//   maxLength (characters; an escape counts as one); integer and number: minimum, maximum,
//   exclusiveMinimum, exclusiveMaximum (a bounded number is written without an exponent and
//   compared exactly with the bound's double); $ref to the document itself ("#", "#/$defs/
//   Name", any JSON pointer: recursive schemas included); anyOf / oneOf whose branches allow
//   disjoint types (Optional[X] = X or null; the first byte of a value picks the branch); allOf
//   of one schema.
// Annotations (title, description, default, examples, format, $schema, $id, $defs, definitions)
// are accepted and have no effect. The top level must allow an object.
#pragma once

#include <climits>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/json_regex.h"

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
    // Bounded integers are written with at most 18 digits (their values fit an int64_t).
    static constexpr int64_t kMaxBound = 999'999'999'999'999'999;

    // A node is a value schema (ref < 0, no any_of), a reference to another node ($ref, allOf of
    // one), or a choice among branches of disjoint types (anyOf, oneOf).
    struct Node {
        uint8_t types = kAll;
        bool props = false;             // properties declared: only those keys, in that order
        std::vector<std::string> keys;  // property names as written between the quotes (JSON-escaped)
        std::vector<int> values;        // their schemas
        std::vector<bool> required;
        int extra = 0;                  // without declared properties: every key's value schema
        int items = 0;
        int min_items = 0, max_items = INT_MAX;
        int min_length = 0, max_length = INT_MAX;  // strings, in characters
        int pattern = -1;                           // strings: JsonSchema::regex(pattern) must match
        // Integers: minimum / maximum (exclusive ones made inclusive), within +-kMaxBound.
        int64_t min_value = -kMaxBound, max_value = kMaxBound;
        bool bounded = false;
        // Numbers (type number): the bounds as exact decimals of their doubles ("-12.5"; empty:
        // none), each inclusive or exclusive.
        std::string real_lo, real_hi;
        bool lo_open = false, hi_open = false;
        bool real_bounded = false;
        // enum / const: values of the types in choice_types must be one of these texts.
        std::vector<std::string> choices;
        uint8_t choice_types = 0;
        int ref = -1;
        std::vector<int> any_of;
        uint8_t reach = 0;              // the types this node allows, through refs and branches
    };

    // Compiles schema text; throws diskformer::Error naming what it cannot enforce.
    static JsonSchema compile(std::string_view schema_json);

    const Node& node(int i) const { return nodes_[static_cast<size_t>(i)]; }
    const JsonRegex& regex(int i) const { return regexes_[static_cast<size_t>(i)]; }
    int root() const { return root_; }
    // The value schema that a value of type t (a Type bit) meets at node i, through its refs and
    // branches; -1 when the node allows no such value.
    int resolve(int i, uint8_t t) const;

private:
    std::vector<Node> nodes_;  // node 0 accepts any value
    std::vector<JsonRegex> regexes_;
    int root_ = 0;
};

}  // namespace diskformer
