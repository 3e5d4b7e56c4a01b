// diskformer eval: feed token ids, write every position's logits and/or a greedy continuation.
// This is how fidelity is checked from outside, so its interface stays exactly as documented.
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli_common.h"
#include "commands.h"

namespace {

struct EvalArgs {
    ModelArgs model;
    std::string tokens_path, logits_out, ids_out;
    int greedy = 0;
};

std::vector<int32_t> read_ids(const std::string& path) {
    std::ifstream f(path);
    if (!f) throw diskformer::Error("cannot open token file '" + path + "'");
    nlohmann::json j;
    try {
        f >> j;
    } catch (const std::exception& e) {
        throw diskformer::Error("token file '" + path + "' is not valid JSON: " + e.what());
    }
    if (j.is_object() && j.contains("prompt")) j = j["prompt"];  // golden greedy files work too
    if (!j.is_array()) throw diskformer::Error("token file '" + path + "' must hold a JSON array of token ids");
    std::vector<int32_t> ids;
    for (const auto& v : j) {
        if (!v.is_number_integer()) throw diskformer::Error("token file '" + path + "': every entry must be an integer id");
        ids.push_back(v.get<int32_t>());
    }
    if (ids.empty()) throw diskformer::Error("token file '" + path + "' holds no tokens");
    return ids;
}

void run(const EvalArgs& a) {
    const auto prompt = read_ids(a.tokens_path);
    auto model = diskformer::Model::load(a.model.path, a.model.model_options());
    auto so = a.model.session_options();
    so.ctx = std::max<int>(so.ctx, static_cast<int>(prompt.size()) + a.greedy + 1);
    diskformer::Session s(model, so);
    const size_t V = model->info().n_vocab;
    if (!a.logits_out.empty()) {
        std::vector<float> logits(prompt.size() * V);
        s.append(prompt, logits.data());
        std::ofstream f(a.logits_out, std::ios::binary);
        f.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * sizeof(float)));
        if (!f) throw diskformer::Error("cannot write '" + a.logits_out + "'");
    } else {
        s.append(prompt);
    }
    if (a.greedy > 0) {
        std::vector<int32_t> gen{s.argmax()};
        while (static_cast<int>(gen.size()) < a.greedy) gen.push_back(s.step(gen.back()));
        const std::string text = nlohmann::json(gen).dump();
        if (a.ids_out.empty()) {
            std::printf("%s\n", text.c_str());
        } else {
            std::ofstream f(a.ids_out);
            f << text << '\n';
            if (!f) throw diskformer::Error("cannot write '" + a.ids_out + "'");
        }
    }
    const auto st = s.stats();
    std::fprintf(stderr, "eval: %s on %s, %lld prompt tokens at %.1f tok/s, %lld decoded at %.1f tok/s\n",
                 model->info().arch.c_str(), model->info().backend.c_str(), static_cast<long long>(st.prompt_tokens),
                 st.prefill_tok_s(), static_cast<long long>(st.decode_tokens), st.decode_tok_s());
}

}  // namespace

void register_eval(CLI::App& app) {
    auto a = std::make_shared<EvalArgs>();
    auto* cmd = app.add_subcommand("eval", "Feed token ids; write per-position logits and/or a greedy continuation");
    a->model.add_to(*cmd);
    cmd->add_option("--tokens", a->tokens_path, "JSON array of token ids")->required();
    cmd->add_option("--logits-out", a->logits_out, "write logits of every position (f32, positions x vocab)");
    cmd->add_option("--greedy", a->greedy, "generate N tokens greedily")->check(non_negative());
    cmd->add_option("--ids-out", a->ids_out, "write the greedy ids as a JSON array (default: stdout)");
    cmd->callback([a] { run(*a); });
}
