// Every golden GGUF (llama.cpp-written models and vocabulary files) opens, and each model's
// tensor table matches models/index.json.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "common/golden.h"
#include "gguf/gguf.h"

namespace {

namespace fs = std::filesystem;
using df::gguf::File;

std::string lower(std::string_view s) {
    std::string out(s);
    for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

nlohmann::json model_index() {
    const auto text = df::test::read_file(df::test::golden_dir() / "models" / "index.json");
    return nlohmann::json::parse(text.begin(), text.end());
}

TEST(GgufGolden, ModelsMatchIndex) {
    int checked = 0;
    const auto index = model_index();
    for (const auto& m : index["models"]) {
        const std::string name = m["name"];
        const fs::path path = df::test::golden_dir() / "models" / (name + ".gguf");
        if (!fs::exists(path)) continue;  // the compact set carries only some models
        SCOPED_TRACE(name);
        const auto f = File::open(path.string());
        EXPECT_EQ(f->file_size(), m["sizes"]["gguf"].get<uint64_t>());
        EXPECT_EQ(f->get<std::string>("general.architecture"), m["arch"].get<std::string>());
        EXPECT_EQ(f->get<uint32_t>(m["arch"].get<std::string>() + ".block_count"), m["config"]["n_layer"].get<uint32_t>());
        EXPECT_EQ(f->get<std::vector<std::string>>("tokenizer.ggml.tokens").size(), m["config"]["n_vocab"].get<size_t>());
        const auto& want = m["tensors"];
        ASSERT_EQ(f->tensors().size(), want.size());
        for (size_t i = 0; i < want.size(); ++i) {
            const auto& t = f->tensors()[i];
            EXPECT_EQ(t.name, want[i]["name"].get<std::string>());
            EXPECT_EQ(lower(df::quant::type_name(t.type)), lower(want[i]["type"].get<std::string>())) << t.name;
            EXPECT_EQ(t.shape, want[i]["ne"].get<std::vector<int64_t>>()) << t.name;
            EXPECT_EQ(f->find_tensor(t.name), &t);
        }
        ++checked;
    }
    EXPECT_GE(checked, 4);
}

// Re-writing a llama.cpp file with our writer (same keys, same tensors, same order) reproduces
// it byte for byte: both pad the data section and each tensor to the alignment.
TEST(GgufGolden, WriterReproducesLlamaCppFile) {
    const fs::path path = df::test::golden_dir() / "models" / "q35_4L_iq2mix.gguf";
    const auto f = File::open(path.string());
    df::gguf::Writer w(f->alignment());
    for (const auto& [k, v] : f->kv()) w.set(k, v);
    for (const auto& t : f->tensors()) w.add_tensor(t.name, t.type, t.shape, std::vector<uint8_t>(t.data, t.data + t.bytes));
    const auto ours = w.to_bytes();
    const auto theirs = df::test::read_file(path);
    ASSERT_EQ(ours.size(), theirs.size());
    EXPECT_TRUE(std::equal(ours.begin(), ours.end(), reinterpret_cast<const uint8_t*>(theirs.data())));
}

TEST(GgufGolden, VocabularyFilesOpen) {
    int checked = 0;
    for (const auto& e : fs::directory_iterator(df::test::golden_dir() / "tokenizer")) {
        if (e.path().extension() != ".gguf") continue;
        SCOPED_TRACE(e.path().filename().string());
        const auto f = File::open(e.path().string());
        EXPECT_TRUE(f->tensors().empty());
        EXPECT_EQ(f->get<std::string>("tokenizer.ggml.model"), "gpt2");
        const auto tokens = f->get<std::vector<std::string>>("tokenizer.ggml.tokens");
        const auto types = f->get<std::vector<int32_t>>("tokenizer.ggml.token_type");
        EXPECT_EQ(types.size(), tokens.size());
        const bool tiny = e.path().filename().string().find("tiny") != std::string::npos;
        EXPECT_EQ(tokens.size(), tiny ? 1024u : 151936u);
        EXPECT_FALSE(f->get<std::vector<std::string>>("tokenizer.ggml.merges").empty());
        ++checked;
    }
    EXPECT_GE(checked, 3);
}

TEST(GgufGolden, FromBytesEqualsOpen) {
    const fs::path path = df::test::golden_dir() / "tokenizer" / "qwen3-tiny-vocab.gguf";
    if (!fs::exists(path)) GTEST_SKIP() << "not in this golden set";
    const auto a = File::open(path.string());
    const auto bytes = df::test::read_file(path);
    const auto b = File::from_bytes({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
    ASSERT_EQ(a->kv().size(), b->kv().size());
    for (size_t i = 0; i < a->kv().size(); ++i) {
        EXPECT_EQ(a->kv()[i].key, b->kv()[i].key);
        EXPECT_TRUE(a->kv()[i].value == b->kv()[i].value);
    }
    EXPECT_EQ(a->data_offset(), b->data_offset());
}

}  // namespace
