// libFuzzer target for JSON mode: the schema compiler and the byte-level prefix check. The input's
// first line is a JSON Schema and the rest a document fed a byte at a time (with and without the
// schema). compile() must return or throw diskformer::Error; the checker must never crash,
// allows() must agree with feed(), and what it accepted as complete must parse as JSON.
//
// DF_FUZZ_WRITE_SEEDS=DIR fuzz_json  writes seed inputs into DIR and exits (fuzz/run.sh uses it).
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "diskformer/diskformer.h"
#include "runtime/json_prefix.h"
#include "runtime/json_schema.h"
#include "seeds.h"

namespace {

using diskformer::JsonPrefix;
using diskformer::JsonSchema;

void check(const JsonSchema* schema, std::string_view doc) {
    JsonPrefix j(schema);
    size_t fed = 0;
    for (; fed < doc.size(); ++fed) {
        const std::string_view b = doc.substr(fed, 1);
        const bool ok = j.allows(b);
        if (ok != j.feed(b)) {
            std::fprintf(stderr, "fuzz_json: allows() and feed() disagree at byte %zu\n", fed);
            std::abort();
        }
        if (!ok) break;
    }
    if (!j.complete()) return;
    try {
        (void)nlohmann::json::parse(doc.substr(0, fed));
    } catch (const nlohmann::json::out_of_range&) {
        // a number past double's range (1e999): valid JSON that this parser declines
    } catch (const nlohmann::json::exception& e) {
        std::fprintf(stderr, "fuzz_json: accepted as complete but not JSON: %s\n", e.what());
        std::abort();
    }
}

void write_seeds(const std::string& dir) {
    const char* seeds[] = {
        R"({"type": "object", "properties": {"a": {"type": "integer", "minimum": 3, "maximum": 40}, "b": {"enum": [1, "x", null, true]}}, "required": ["a"]})"
        "\n{\"a\": 12, \"b\": \"x\"}",
        R"({"$defs": {"N": {"type": "object", "properties": {"v": {"type": "string", "maxLength": 3}, "next": {"anyOf": [{"$ref": "#/$defs/N"}, {"type": "null"}]}}}}, "$ref": "#/$defs/N"})"
        "\n{\"v\": \"ab\", \"next\": {\"v\": \"\\u00e9\", \"next\": null}}",
        R"({"type": "object", "additionalProperties": {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 3}})"
        "\n{\"k\": [1.5e3, -0, 2], \"l\": [7]}",
        R"({"type": "object", "properties": {"s": {"oneOf": [{"type": "string", "minLength": 2}, {"type": "integer"}]}, "t": {"allOf": [{"const": "z"}]}}})"
        "\n{\"s\": -17, \"t\": \"z\"}",
        "{}\n{\"x\": [true, false, null, {\"y\": \"\\\"\"}]}",
        R"({"type": "object", "properties": {"p": {"type": "number", "minimum": -0.5, "exclusiveMaximum": 2.25}, "q": {"type": ["number", "null"], "maximum": -1e-3}}})"
        "\n{\"p\": 2.2499, \"q\": -0.0015}",
        R"j({"type": "object", "properties": {"id": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}(-[a-zα-ω]+)?$"}, "w": {"pattern": "(?:ab|c)*\\u00e9.[^x]"}}})j"
        "\n{\"id\": \"AB-123-\u03b1\", \"w\": \"abc\u00e9\u00e9y\"}",
    };
    int i = 0;
    for (const char* s : seeds) df::fuzz::write_seed(dir, "seed" + std::to_string(i++), s);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) { return df::fuzz::seed_or_run(write_seeds); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    const size_t nl = in.find('\n');
    const std::string_view schema_text = in.substr(0, nl), doc = nl == std::string_view::npos ? "" : in.substr(nl + 1);
    check(nullptr, doc);
    try {
        const JsonSchema schema = JsonSchema::compile(schema_text);
        check(&schema, doc);
    } catch (const diskformer::Error&) {
    }
    return 0;
}
