// `diskformer inspect` run as a user would: on every golden model (JSON checked against
// models/index.json), on vocabulary-only files, and on bad files (exit 1, one line on stderr).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/golden.h"
#include "common/run_cli.h"
#include "gguf/raw_gguf.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using Outcome = df::test::CliOutcome;

// Runs `diskformer inspect <args>` and captures exit code, stdout and stderr.
Outcome inspect(const std::string& args) { return df::test::run_diskformer("inspect " + args); }

std::string quote(const fs::path& p) { return "'" + p.string() + "'"; }

std::string lower(std::string s) {
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

json golden_index() {
    const auto text = df::test::read_file(df::test::golden_dir() / "models" / "index.json");
    return json::parse(text.begin(), text.end());
}

TEST(Inspect, GoldenModelsMatchIndex) {
    const json index = golden_index();
    int checked = 0;
    for (const auto& m : index["models"]) {
        const fs::path path = df::test::golden_dir() / "models" / (m["name"].get<std::string>() + ".gguf");
        if (!fs::exists(path)) continue;
        SCOPED_TRACE(m["name"].get<std::string>());
        const Outcome r = inspect(quote(path) + " --json");
        ASSERT_EQ(r.code, 0) << r.err;
        EXPECT_EQ(r.err, "");
        const json j = json::parse(r.out);
        const auto& want = m["config"];
        const auto& c = j["config"];
        const std::string arch = m["arch"];
        EXPECT_EQ(j["arch"], arch);
        EXPECT_EQ(c["layers"], want["n_layer"]);
        EXPECT_EQ(c["hidden"], want["n_embd"]);
        EXPECT_EQ(c["ff"], want["n_ff"]);
        EXPECT_EQ(c["heads"], want["n_head"]);
        EXPECT_EQ(c["kv_heads"], want["n_head_kv"]);
        EXPECT_EQ(c["head_dim"], want["head_dim"]);
        EXPECT_EQ(c["rope_dims"], want.value("rope_dim", want["head_dim"].get<int>()));
        EXPECT_NEAR(c["rope_base"].get<double>(), want["rope_theta"].get<double>(), 1e-6 * want["rope_theta"].get<double>());
        EXPECT_EQ(c["eps"].get<double>(), want["rms_eps"].get<double>());  // printed as the shortest float
        EXPECT_EQ(c["vocab"], want["n_vocab"]);
        EXPECT_EQ(c["tied_output"].get<bool>(), want["tied"].get<int>() != 0);
        std::vector<bool> recurrent(want["n_layer"].get<size_t>(), false);
        if (arch == "qwen35") {
            EXPECT_EQ(c["ssm_conv"], want["ssm_conv"]);
            EXPECT_EQ(c["ssm_state"], want["ssm_state"]);
            EXPECT_EQ(c["ssm_k_heads"], want["ssm_k_heads"]);
            EXPECT_EQ(c["ssm_v_heads"], want["ssm_v_heads"]);
            for (size_t i = 0; i < recurrent.size(); ++i)
                recurrent[i] = (i + 1) % want["full_attn_interval"].get<size_t>() != 0;
        }
        EXPECT_EQ(c["recurrent"].get<std::vector<bool>>(), recurrent);

        const auto& tensors = j["tensors"];
        ASSERT_EQ(tensors.size(), m["tensors"].size());
        uint64_t count = 0, bytes = 0;
        for (size_t i = 0; i < tensors.size(); ++i) {
            EXPECT_EQ(tensors[i]["name"], m["tensors"][i]["name"]);
            EXPECT_EQ(lower(tensors[i]["type"]), lower(m["tensors"][i]["type"]));
            EXPECT_EQ(tensors[i]["shape"], m["tensors"][i]["ne"]);
        }
        for (const auto& [type, t] : j["types"].items()) {
            count += t["count"].get<uint64_t>();
            bytes += t["bytes"].get<uint64_t>();
        }
        EXPECT_EQ(count, tensors.size());
        EXPECT_EQ(bytes, j["bytes"].get<uint64_t>());
        EXPECT_LT(bytes, m["sizes"]["gguf"].get<uint64_t>());
        EXPECT_GT(bytes, m["sizes"]["gguf"].get<uint64_t>() / 2);

        const Outcome human = inspect(quote(path));
        ASSERT_EQ(human.code, 0) << human.err;
        EXPECT_NE(human.out.find("arch       " + arch), std::string::npos) << human.out;
        EXPECT_NE(human.out.find("tensors    " + std::to_string(tensors.size())), std::string::npos) << human.out;
        if (arch == "qwen35") {
            EXPECT_NE(human.out.find("Gated DeltaNet"), std::string::npos) << human.out;
        }
        ++checked;
    }
    EXPECT_GE(checked, 4);
}

TEST(Inspect, VocabularyOnlyFiles) {
    int checked = 0;
    for (const auto& e : fs::directory_iterator(df::test::golden_dir() / "tokenizer")) {
        if (e.path().extension() != ".gguf") continue;
        SCOPED_TRACE(e.path().filename().string());
        const Outcome r = inspect(quote(e.path()) + " --json");
        ASSERT_EQ(r.code, 0) << r.err;
        const json j = json::parse(r.out);
        EXPECT_TRUE(j["tensors"].empty());
        EXPECT_EQ(j["bytes"], 0);
        const bool tiny = e.path().filename().string().find("tiny") != std::string::npos;
        EXPECT_EQ(j["config"]["vocab"], tiny ? 1024 : 151936);
        EXPECT_EQ(j["tokenizer"]["tokens"], j["config"]["vocab"]);
        const Outcome human = inspect(quote(e.path()));
        EXPECT_EQ(human.code, 0) << human.err;
        EXPECT_NE(human.out.find("vocab"), std::string::npos) << human.out;
        ++checked;
    }
    EXPECT_GE(checked, 3);
}

// A bad file: exit 1, nothing on stdout, exactly one line on stderr that contains `part`.
void expect_one_line_error(const std::string& args, const std::string& part) {
    const Outcome r = inspect(args);
    EXPECT_EQ(r.code, 1) << r.out << r.err;
    EXPECT_EQ(r.out, "");
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
    EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
}

TEST(Inspect, BadFilesAreOneLineErrors) {
    const auto dir = fs::temp_directory_path() / ("df_inspect_bad_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    auto write = [&](const std::string& name, const std::vector<uint8_t>& b) {
        std::ofstream(dir / name, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
        return quote(dir / name);
    };
    using df::test::RawGguf;
    RawGguf unknown_type;
    unknown_type.header(1, 1).kv_str("general.architecture", "qwen3").tensor("token_embd.weight", {32, 4}, 99, 0).pad(32).zeros(1024);
    expect_one_line_error(write("unknown_type.gguf", unknown_type.b), "tensor 'token_embd.weight': unknown or unsupported tensor type id 99");

    const auto model = df::test::read_file(df::test::golden_dir() / "models" / "q3_4L_kmix.gguf");
    expect_one_line_error(write("truncated.gguf", std::vector<uint8_t>(model.begin(), model.begin() + 100000)), "extends past end of file");
    expect_one_line_error(write("meta_cut.gguf", std::vector<uint8_t>(model.begin(), model.begin() + 5000)), "truncated");
    expect_one_line_error(write("magic.gguf", {'G', 'G', 'M', 'L', 1, 0, 0, 0}), "bad magic");
    expect_one_line_error(write("empty.gguf", {}), "truncated");
    expect_one_line_error(quote(dir / "missing.gguf"), "cannot open");

    df::gguf::Writer llama;
    llama.set("general.architecture", df::gguf::Value::str("llama"));
    llama.add_tensor("token_embd.weight", df::quant::Type::F32, {4, 4}, std::vector<uint8_t>(64));
    expect_one_line_error(write("llama.gguf", llama.to_bytes()), "architecture 'llama' is not supported");

    df::gguf::Writer bad_key;  // a qwen3 model whose block_count is a string
    bad_key.set("general.architecture", df::gguf::Value::str("qwen3"));
    bad_key.set("qwen3.block_count", df::gguf::Value::str("four"));
    bad_key.add_tensor("token_embd.weight", df::quant::Type::F32, {4, 4}, std::vector<uint8_t>(64));
    expect_one_line_error(write("bad_key.gguf", bad_key.to_bytes()), "key 'qwen3.block_count': expected u32, found string");
    fs::remove_all(dir);
}

}  // namespace
