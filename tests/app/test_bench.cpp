// Smoke test of `diskformer synth` + `diskformer bench --json` through the built binary: the
// report has every field and they are positive. Never a speed assertion.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>

namespace {

namespace fs = std::filesystem;

const std::string kBinary = DF_BINARY_DIR "/app/diskformer";

// Runs a command, returns {exit status, stdout}.
std::pair<int, std::string> run(const std::string& cmd) {
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return {-1, out};
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    return {pclose(p), out};
}

struct TempDir {
    fs::path path = fs::temp_directory_path() / ("df_test_bench_" + std::to_string(::getpid()));
    TempDir() { fs::create_directories(path); }
    ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST(Bench, JsonReportOnTinySynth) {
    ASSERT_TRUE(fs::exists(kBinary)) << kBinary << " is missing: build the diskformer target first";
    TempDir dir;
    const std::string model = (dir.path / "tiny.gguf").string();
    const auto [synth_rc, synth_out] = run(kBinary + " synth --preset tiny-qwen35 --seed 3 --out " + model);
    ASSERT_EQ(synth_rc, 0) << synth_out;
    ASSERT_TRUE(fs::exists(model));

    const auto [rc, out] =
        run(kBinary + " bench -m " + model + " --backend cpu --json -p 16 -n 4 --reps 1 --bw 10 --threads 2");
    ASSERT_EQ(rc, 0) << out;
    const auto j = nlohmann::json::parse(out);

    EXPECT_EQ(j.at("backend"), "cpu");
    EXPECT_EQ(j.at("model"), model);
    EXPECT_GT(j.at("load_ms").get<double>(), 0);
    EXPECT_GT(j.at("load_gb_s").get<double>(), 0);
    ASSERT_EQ(j.at("prefill").size(), 1u);
    const auto& pf = j.at("prefill")[0];
    EXPECT_EQ(pf.at("tokens"), 16);
    for (const char* k : {"tok_s_median", "min", "max"}) EXPECT_GT(pf.at(k).get<double>(), 0) << k;
    const auto& dec = j.at("decode");
    EXPECT_EQ(dec.at("tokens"), 4);
    for (const char* k : {"tok_s", "ms_per_token", "min", "max", "wall_tok_s"})
        EXPECT_GT(dec.at(k).get<double>(), 0) << k;
    // The caller's loop also reads each token back: never faster than the session's own count.
    EXPECT_LE(dec.at("wall_tok_s").get<double>(), dec.at("max").get<double>() * 1.001);
    for (const char* k : {"bytes_per_token", "gb_s", "pct_of_floor"}) EXPECT_GT(j.at(k).get<double>(), 0) << k;
    EXPECT_EQ(j.at("floor_gb_s").get<double>(), 10);
    const auto& detail = j.at("bytes_per_token_detail");
    EXPECT_GT(detail.at("weights").get<double>(), 0);
    EXPECT_GT(detail.at("state").get<double>(), 0);  // qwen35: GDN layers
    EXPECT_GT(detail.at("kv").get<double>(), 0);     // and one attention layer
    // The untied embedding is read one row per token, so a token moves less than the weights.
    EXPECT_LT(detail.at("weights").get<double>(), j.at("memory").at("weights").get<double>());
    for (const char* k : {"weights", "kv", "state", "scratch"}) EXPECT_GT(j.at("memory").at(k).get<double>(), 0) << k;
}

// `synth --dflash-for` writes a drafter of the target's shapes that loads, and `bench --dflash`
// times its rounds (each verify pass must keep all 7 decoded tokens, or bench fails).
TEST(Bench, DflashRoundsOnARandomDrafter) {
    TempDir dir;
    const std::string model = (dir.path / "tiny3.gguf").string(), drafter = (dir.path / "dflash").string();
    ASSERT_EQ(run(kBinary + " synth --preset tiny-qwen3 --seed 4 --out " + model).first, 0);
    const auto [rc_d, out_d] = run(kBinary + " synth --dflash-for " + model + " --layers 2 --out " + drafter);
    ASSERT_EQ(rc_d, 0) << out_d;
    ASSERT_TRUE(fs::exists(fs::path(drafter) / "config.json"));
    const auto [rc, out] = run(kBinary + " bench -m " + model + " --backend cpu --json -p 16 -n 24 --reps 1 --bw 10 --threads 2 --dflash " +
                               drafter);
    ASSERT_EQ(rc, 0) << out;
    const auto j = nlohmann::json::parse(out).at("dflash");
    for (const char* k : {"ms_per_draft", "ms_per_round", "steps_per_round", "tok_s_all_kept"}) EXPECT_GT(j.at(k).get<double>(), 0) << k;
    EXPECT_GT(j.at("ms_per_round").get<double>(), j.at("ms_per_draft").get<double>());
    // A hybrid target has no drafter.
    const std::string hybrid = (dir.path / "tiny35.gguf").string();
    ASSERT_EQ(run(kBinary + " synth --preset tiny-qwen35 --seed 4 --out " + hybrid).first, 0);
    EXPECT_NE(run(kBinary + " synth --dflash-for " + hybrid + " --out " + drafter + "2 2>&1").first, 0);
}

// `bench --parallel`: n generations at once report their rate and how their steps shared passes
// (never more steps per pass than streams).
TEST(Bench, ParallelReportsHowStepsSharedPasses) {
    TempDir dir;
    const std::string model = (dir.path / "tiny.gguf").string();
    ASSERT_EQ(run(kBinary + " synth --preset tiny-qwen3 --seed 5 --out " + model).first, 0);
    const auto [rc, out] =
        run(kBinary + " bench -m " + model + " --backend cpu --json -p 8 -n 6 --reps 1 --bw 10 --threads 2 --parallel 2,3");
    ASSERT_EQ(rc, 0) << out;
    const auto par = nlohmann::json::parse(out).at("parallel");
    ASSERT_EQ(par.size(), 2u);
    for (size_t i = 0; i < par.size(); ++i) {
        const auto& p = par[i];
        const int n = static_cast<int>(i) + 2;
        EXPECT_EQ(p.at("streams"), n);
        EXPECT_GT(p.at("tok_s_total").get<double>(), 0);
        EXPECT_GT(p.at("tok_s_per_stream").get<double>(), 0);
        const double share = p.at("batched_share").get<double>(), per_pass = p.at("steps_per_pass").get<double>();
        EXPECT_GE(share, 0);
        EXPECT_LE(share, 1);
        EXPECT_GE(per_pass, 1);
        EXPECT_LE(per_pass, n);
    }
}
