// libFuzzer target for the GGUF reader. Any input must either parse or throw gguf::Error (ASan
// and UBSan watch every read); an input that parses must survive a writer round trip with the
// same keys, values, tensors and bytes.
//
// DF_FUZZ_WRITE_SEEDS=DIR fuzz_gguf  writes small synthetic seed files into DIR and exits
// (fuzz/run.sh uses it).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "seeds.h"

namespace {

using namespace df::gguf;
using df::quant::Type;

volatile size_t g_sink;  // keeps the reads of every value and tensor byte from being optimized out

[[noreturn]] void mismatch(const char* what) {
    std::fprintf(stderr, "fuzz_gguf: round trip mismatch: %s\n", what);
    std::abort();
}

// Visits every nested value so each string and array is read back.
size_t touch(const Value& v) {
    size_t n = 1;
    if (const auto* s = std::get_if<std::string>(&v.v)) n += s->empty() ? 0 : static_cast<unsigned char>(s->back());
    if (const auto* a = std::get_if<Array>(&v.v))
        for (const auto& item : a->items) n += touch(item);
    return n;
}

template <class T> void try_get(const File& f, const std::string& key) {
    try {
        (void)f.get<T>(key);
        (void)f.get_opt<T>(key);
    } catch (const Error&) {
    }
}

void accessors(const File& f, const std::string& key) {
    try_get<uint8_t>(f, key);
    try_get<int8_t>(f, key);
    try_get<uint32_t>(f, key);
    try_get<int32_t>(f, key);
    try_get<uint64_t>(f, key);
    try_get<int64_t>(f, key);
    try_get<float>(f, key);
    try_get<double>(f, key);
    try_get<bool>(f, key);
    try_get<std::string>(f, key);
    try_get<std::vector<std::string>>(f, key);
    try_get<std::vector<int32_t>>(f, key);
    try_get<std::vector<int64_t>>(f, key);
    try_get<std::vector<float>>(f, key);
    try_get<std::vector<bool>>(f, key);
}

// Values equal, floats compared by bit pattern (NaN payloads included).
bool same(const Value& a, const Value& b) {
    if (a.type != b.type || a.v.index() != b.v.index()) return false;
    if (const auto* x = std::get_if<double>(&a.v)) return std::memcmp(x, &std::get<double>(b.v), sizeof(double)) == 0;
    if (const auto* x = std::get_if<Array>(&a.v)) {
        const auto& y = std::get<Array>(b.v);
        if (x->elem != y.elem || x->items.size() != y.items.size()) return false;
        for (size_t i = 0; i < x->items.size(); ++i)
            if (!same(x->items[i], y.items[i])) return false;
        return true;
    }
    return a == b;
}

void round_trip(const File& f) {
    for (const auto& t : f.tensors())
        if (t.name.size() > 63) return;  // the writer refuses names llama.cpp cannot load
    Writer w(f.alignment());
    std::vector<const KeyValue*> kept;
    for (const auto& kv : f.kv()) {
        if (kv.key == "general.alignment") continue;  // carried by the constructor
        w.set(kv.key, kv.value);
        kept.push_back(&kv);
    }
    for (const auto& t : f.tensors()) w.add_tensor(t.name, t.type, t.shape, std::vector<uint8_t>(t.data, t.data + t.bytes));
    const auto bytes = w.to_bytes();
    const auto g = File::from_bytes(bytes);
    if (g->alignment() != f.alignment()) mismatch("alignment");
    if (g->kv().size() != kept.size() + (f.alignment() != 32)) mismatch("kv count");
    for (const auto* kv : kept) {
        const Value* v = g->find(kv->key);
        if (!v || !same(*v, kv->value)) mismatch("kv value");
    }
    if (g->tensors().size() != f.tensors().size()) mismatch("tensor count");
    for (size_t i = 0; i < f.tensors().size(); ++i) {
        const auto& a = f.tensors()[i];
        const auto& b = g->tensors()[i];
        if (a.name != b.name || a.type != b.type || a.shape != b.shape || a.bytes != b.bytes) mismatch("tensor info");
        if (std::memcmp(a.data, b.data, a.bytes) != 0) mismatch("tensor data");
    }
}

std::vector<uint8_t> bytes_of(size_t n, uint8_t seed) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 37);
    return v;
}

void write_seed(const std::string& dir, const std::string& name, const std::vector<uint8_t>& b) {
    df::fuzz::write_seed(dir, name, std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
}

// Small files that reach every part of the reader: each value type, nested arrays, a vocab,
// several tensor types and dimensions, a non-default alignment, version 2.
void write_seeds(const std::string& dir) {
    Writer all;
    all.set("general.architecture", Value::str("qwen35"));
    all.set("u8", Value::u8(7));
    all.set("i8", Value::i8(-7));
    all.set("u16", Value::u16(700));
    all.set("i16", Value::i16(-700));
    all.set("u32", Value::u32(70000));
    all.set("i32", Value::i32(-70000));
    all.set("u64", Value::u64(1ull << 40));
    all.set("i64", Value::i64(-(1ll << 40)));
    all.set("f32", Value::f32(1e-6f));
    all.set("f64", Value::f64(1e7));
    all.set("bool", Value::boolean(true));
    all.set("qwen35.attention.recurrent_layers", Value::bools({true, true, true, false}));
    all.set("qwen35.rope.dimension_sections", Value::i32s({11, 11, 10, 0}));
    all.set("nested", Value::array(ValueType::ARRAY, {Value::i32s({1, 2}), Value::f32s({0.5f})}));
    all.add_tensor("token_embd.weight", Type::Q8_0, {32, 4}, bytes_of(136, 1));
    all.add_tensor("blk.0.attn_norm.weight", Type::F32, {8}, bytes_of(32, 2));
    all.add_tensor("blk.0.ffn_up.weight", Type::Q4_K, {256, 1, 1}, bytes_of(144, 3));
    all.add_tensor("x.4d", Type::F16, {2, 2, 2, 2}, bytes_of(32, 4));
    write_seed(dir, "seed_all_types.gguf", all.to_bytes());

    auto v2 = all.to_bytes();
    v2[4] = 2;
    write_seed(dir, "seed_v2.gguf", v2);

    Writer aligned(64);
    aligned.set("general.architecture", Value::str("qwen3"));
    aligned.add_tensor("a", Type::IQ2_XXS, {256}, bytes_of(66, 5));
    aligned.add_tensor("b", Type::BF16, {3, 2}, bytes_of(12, 6));
    write_seed(dir, "seed_align64.gguf", aligned.to_bytes());

    Writer vocab;
    vocab.set("general.architecture", Value::str("qwen3"));
    vocab.set("tokenizer.ggml.model", Value::str("gpt2"));
    vocab.set("tokenizer.ggml.tokens", Value::strings({"a", "b", "ab", "<|im_start|>", "\xc4\xa0"}));
    vocab.set("tokenizer.ggml.token_type", Value::i32s({1, 1, 1, 3, 1}));
    vocab.set("tokenizer.ggml.merges", Value::strings({"a b"}));
    write_seed(dir, "seed_vocab.gguf", vocab.to_bytes());

    write_seed(dir, "seed_empty.gguf", Writer().to_bytes());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) { return df::fuzz::seed_or_run(write_seeds); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::unique_ptr<File> f;
    try {
        f = File::from_bytes({data, size});
    } catch (const Error&) {
        return 0;
    }
    size_t sink = 0;
    for (const auto& kv : f->kv()) {
        sink += touch(kv.value);
        if (f->find(kv.key) != &kv.value) mismatch("find");
        accessors(*f, kv.key);
    }
    for (const auto& t : f->tensors()) {
        if (f->find_tensor(t.name) != &t) mismatch("find_tensor");
        sink += static_cast<size_t>(t.elements() + t.rows()) + t.data[0] + t.data[t.bytes - 1];
    }
    g_sink = sink;
    // A tiny file may declare a huge (valid, power-of-two) alignment; re-writing it would pad
    // gigabytes, which measures the harness, not the reader.
    if (f->alignment() <= (uint64_t{1} << 20)) round_trip(*f);
    return 0;
}
