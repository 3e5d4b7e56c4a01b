// Tokenizer throughput on 1 MB of text (printed, not asserted: CI machines vary).
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "tok_test_util.h"
#include "tokenizer/pretokenize.h"

namespace {

// 1 MB built from the golden texts (prose, code, CJK, emoji, …): natural repetition.
std::string golden_mix(size_t bytes) {
    const auto raw = df::test::read_file(df::test::tokenizer_golden("extra.json"));
    const auto j = nlohmann::json::parse(raw.begin(), raw.end());
    std::string base;
    for (const auto& e : j["texts"])
        if (e["valid_utf8"].get<bool>()) base += e["text"].get<std::string>() + "\n";
    std::string out;
    while (out.size() < bytes) out += base;
    out.resize(bytes);
    while (!out.empty() && (static_cast<uint8_t>(out.back()) & 0xC0) == 0x80) out.pop_back();
    if (!out.empty() && static_cast<uint8_t>(out.back()) >= 0xC0) out.pop_back();
    return out;
}

// 1 MB of random pseudo-words: few repeats, so the word cache helps little.
std::string random_words(size_t bytes) {
    std::mt19937 rng(42);
    const char* syl[] = {"ka", "to", "ri", "men", "sul", "vo", "ath", "qui", "ne", "lo", "zer", "ip"};
    std::string out;
    while (out.size() < bytes) {
        const int n = 1 + static_cast<int>(rng() % 4);
        for (int i = 0; i < n; ++i) out += syl[rng() % 12];
        out += rng() % 11 == 0 ? ".\n" : " ";
    }
    out.resize(bytes);
    return out;
}

void time_one(const char* what, const std::string& text) {
    for (const char* vocab : {"ggml-vocab-qwen35.gguf", "qwen3-vocab.gguf"}) {
        const auto* tok = df::test::golden_tokenizer(vocab);
        if (!tok) continue;
        tok->encode("warm up", false);
        const auto t0 = std::chrono::steady_clock::now();
        const auto ids = tok->encode(text, false);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("[tokenizer] speed: %s, %.2f MB -> %zu tokens in %.1f ms (%.1f MB/s) with %s\n",
                    what, text.size() / 1e6, ids.size(), s * 1e3, text.size() / 1e6 / s, vocab);
        EXPECT_EQ(tok->decode(ids), text);
    }
}

TEST(TokenizerSpeed, OneMegabyte) {
    const df::tokenizer::PreSplitter probe(df::tokenizer::PreTokenizer::qwen35);
    std::printf("[tokenizer] PCRE2 Unicode %s, JIT %s\n",
                df::tokenizer::PreSplitter::unicode_version().c_str(), probe.jit() ? "on" : "off");
    time_one("golden text mix", golden_mix(1 << 20));
    time_one("random words", random_words(1 << 20));
}

TEST(TokenizerSpeed, ConcurrentEncodesAgree) {
    // encode() is const and thread-safe: a server tokenizes several requests at once.
    const auto* tok = df::test::golden_tokenizer("ggml-vocab-qwen35.gguf");
    ASSERT_TRUE(tok);
    const std::string text = golden_mix(200 << 10);
    const auto want = tok->encode(text, true);
    std::vector<std::vector<int32_t>> got(4);
    std::vector<std::thread> threads;
    for (auto& g : got) threads.emplace_back([&tok, &text, &g] { g = tok->encode(text, true); });
    for (auto& t : threads) t.join();
    for (const auto& g : got) EXPECT_EQ(g, want);
}

TEST(TokenizerSpeed, LoadTime) {
    const auto path = df::test::tokenizer_golden("ggml-vocab-qwen35.gguf");
    const auto t0 = std::chrono::steady_clock::now();
    auto file = df::gguf::File::open(path.string());
    const auto t1 = std::chrono::steady_clock::now();
    auto spec = df::tokenizer::VocabSpec::from_gguf(*file);
    const auto t2 = std::chrono::steady_clock::now();
    auto tok = df::tokenizer::Tokenizer::from_spec(std::move(spec));
    const auto t3 = std::chrono::steady_clock::now();
    auto ms = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count() * 1e3; };
    std::printf("[tokenizer] load: %zu tokens, %zu merges in %.0f ms (GGUF open %.0f, read keys "
                "%.0f, build %.0f)\n", tok->vocab_size(), size_t{151387}, ms(t0, t3), ms(t0, t1),
                ms(t1, t2), ms(t2, t3));
}

}  // namespace
