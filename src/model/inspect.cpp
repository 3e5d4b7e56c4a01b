#include "model/inspect.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <string>
#include <vector>

#include "model/config.h"

namespace df::model {
namespace {

using nlohmann::json;

// The shortest decimal that reads back as x, so 1e-6f shows as 1e-06 rather than 9.99999997e-07.
double shortest(float x) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof(buf) - 1, x);
    *r.ptr = '\0';
    return std::strtod(buf, nullptr);
}

// A scalar metadata value as JSON; null for arrays (and hand-made values that disagree).
json scalar(const gguf::Value& v) {
    using gguf::ValueType;
    switch (v.type) {
        case ValueType::F32: return shortest(static_cast<float>(gguf::value_as<double>(v, "")));
        case ValueType::F64: return gguf::value_as<double>(v, "");
        case ValueType::BOOL: return gguf::value_as<bool>(v, "");
        case ValueType::STRING: return gguf::value_as<std::string>(v, "");
        case ValueType::ARRAY: return nullptr;
        case ValueType::U64: return gguf::value_as<uint64_t>(v, "");
        default: return gguf::value_as<int64_t>(v, "");
    }
}

json config_json(const ModelConfig& c) {
    json j = {
        {"layers", c.n_layer},          {"hidden", c.n_embd},
        {"ff", c.n_ff},                 {"heads", c.n_head},
        {"kv_heads", c.n_head_kv},      {"head_dim", c.head_dim},
        {"rope_dims", c.n_rot},         {"rope_base", shortest(c.rope_base)},
        {"eps", shortest(c.eps)},       {"vocab", c.n_vocab},
        {"recurrent", c.recurrent},     {"nextn", c.n_layer_nextn},
        {"ctx_train", c.n_ctx_train},   {"tied_output", c.tied_output},
    };
    if (c.arch == "qwen35") {
        j["ssm_conv"] = c.ssm_conv;
        j["ssm_state"] = c.ssm_state;
        j["ssm_k_heads"] = c.ssm_k_heads;
        j["ssm_v_heads"] = c.ssm_v_heads;
        j["ssm_inner"] = c.ssm_inner;
    }
    return j;
}

// For files ModelConfig cannot read (vocabulary-only GGUFs): whichever hyperparameters are there.
json partial_config(const gguf::File& f, const std::string& arch) {
    static constexpr std::pair<const char*, const char*> kKeys[] = {
        {"layers", "block_count"},
        {"hidden", "embedding_length"},
        {"ff", "feed_forward_length"},
        {"heads", "attention.head_count"},
        {"kv_heads", "attention.head_count_kv"},
        {"head_dim", "attention.key_length"},
        {"rope_dims", "rope.dimension_count"},
        {"rope_base", "rope.freq_base"},
        {"eps", "attention.layer_norm_rms_epsilon"},
        {"ctx_train", "context_length"},
        {"ssm_conv", "ssm.conv_kernel"},
        {"ssm_state", "ssm.state_size"},
        {"ssm_k_heads", "ssm.group_count"},
        {"ssm_v_heads", "ssm.time_step_rank"},
    };
    json j = json::object();
    for (const auto& [name, key] : kKeys)
        if (const gguf::Value* v = f.find(arch + "." + key); v && !scalar(*v).is_null()) j[name] = scalar(*v);
    if (const gguf::Value* t = f.find("tokenizer.ggml.tokens"); t && t->type == gguf::ValueType::ARRAY)
        j["vocab"] = std::get<gguf::Array>(t->v).items.size();
    return j;
}

json tokenizer_json(const gguf::File& f) {
    json j = json::object();
    auto put_scalar = [&](const char* name, const char* key) {
        if (const gguf::Value* v = f.find(key); v && !scalar(*v).is_null()) j[name] = scalar(*v);
    };
    auto put_count = [&](const char* name, const char* key) {
        if (const gguf::Value* v = f.find(key); v && v->type == gguf::ValueType::ARRAY)
            j[name] = std::get<gguf::Array>(v->v).items.size();
    };
    put_scalar("model", "tokenizer.ggml.model");
    put_scalar("pre", "tokenizer.ggml.pre");
    put_count("tokens", "tokenizer.ggml.tokens");
    put_count("merges", "tokenizer.ggml.merges");
    put_scalar("bos", "tokenizer.ggml.bos_token_id");
    put_scalar("eos", "tokenizer.ggml.eos_token_id");
    return j;
}

std::string size_str(uint64_t b) {
    char buf[48];
    if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1ull << 30));
    else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / (1ull << 20));
    else if (b >= (1ull << 10)) std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(b) / (1ull << 10));
    else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
    return buf;
}

// A JSON scalar as plain text: numbers in %g form, strings unquoted.
std::string text(const json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_number_float()) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", v.get<double>());
        return buf;
    }
    return v.dump();
}

void row(std::ostream& os, const char* label, const std::string& value) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%-11s", label);
    os << buf << value << '\n';
}

}  // namespace

json inspect(const gguf::File& f) {
    json j;
    j["file"] = {{"path", f.path()},           {"version", f.version()},
                 {"alignment", f.alignment()}, {"size", f.file_size()},
                 {"kv_count", f.kv().size()},  {"data_offset", f.data_offset()}};
    const auto arch = f.get_opt<std::string>("general.architecture");
    j["arch"] = arch ? json(*arch) : json(nullptr);
    try {
        j["config"] = config_json(ModelConfig::from_gguf(f));
    } catch (const gguf::Error& e) {
        if (!f.tensors().empty()) throw;  // a model we could not run is an error, not a summary
        j["config"] = partial_config(f, arch.value_or(""));
        j["config_error"] = e.what();
    }
    j["tokenizer"] = tokenizer_json(f);

    json tensors = json::array();
    json types = json::object();
    uint64_t total = 0;
    for (const auto& t : f.tensors()) {
        const std::string type(quant::type_name(t.type));
        tensors.push_back({{"name", t.name}, {"type", type}, {"shape", t.shape}});
        auto& slot = types[type];
        if (slot.is_null()) slot = {{"count", uint64_t{0}}, {"bytes", uint64_t{0}}};
        slot["count"] = slot["count"].get<uint64_t>() + 1;
        slot["bytes"] = slot["bytes"].get<uint64_t>() + t.bytes;
        total += t.bytes;
    }
    j["tensors"] = std::move(tensors);
    j["types"] = std::move(types);
    j["bytes"] = total;
    return j;
}

void print_inspect(const json& j, std::ostream& os, bool list_tensors) {
    const auto& file = j["file"];
    row(os, "file", file["path"].get<std::string>() + " (GGUF v" + text(file["version"]) + ", " +
                        size_str(file["size"].get<uint64_t>()) + ", " + text(file["kv_count"]) + " keys, alignment " +
                        text(file["alignment"]) + ")");
    row(os, "arch", j["arch"].is_null() ? "(none)" : j["arch"].get<std::string>());

    const auto& c = j["config"];
    auto has = [&](const char* k) { return c.contains(k); };
    if (j.contains("config_error")) row(os, "config", "incomplete: " + j["config_error"].get<std::string>());
    if (has("layers") && has("recurrent")) {
        std::string attention;
        int n_attn = 0;
        const auto& rec = c["recurrent"];
        for (size_t i = 0; i < rec.size(); ++i)
            if (!rec[i].get<bool>()) {
                if (n_attn++) attention += ' ';
                attention += std::to_string(i);
            }
        std::string s = text(c["layers"]);
        if (c.value("nextn", 0) > 0) s += " (+" + text(c["nextn"]) + " MTP, not run)";
        if (n_attn == static_cast<int>(rec.size()))
            s += ", all attention";
        else
            s += ": " + std::to_string(rec.size() - n_attn) + " Gated DeltaNet, " + std::to_string(n_attn) +
                 " attention (layers " + attention + ")";
        row(os, "layers", s);
    } else if (has("layers")) {
        row(os, "layers", text(c["layers"]) + " (block_count)");
    }
    if (has("hidden")) row(os, "hidden", text(c["hidden"]));
    if (has("ff")) row(os, "ff", text(c["ff"]));
    if (has("heads")) {
        std::string s = text(c["heads"]) + " query";
        if (has("kv_heads")) s += ", " + text(c["kv_heads"]) + " KV";
        if (has("head_dim")) s += ", head dim " + text(c["head_dim"]);
        row(os, "heads", s);
    }
    if (has("rope_dims") || has("rope_base")) {
        std::string s = has("rope_dims") ? text(c["rope_dims"]) + " dims" : std::string("dims: default");
        if (has("rope_base")) s += ", base " + text(c["rope_base"]);
        row(os, "rope", s);
    }
    if (has("eps")) row(os, "eps", text(c["eps"]));
    if (has("ssm_conv") || has("ssm_state")) {
        std::string s;
        for (const char* k : {"ssm_conv", "ssm_state", "ssm_k_heads", "ssm_v_heads", "ssm_inner"})
            if (has(k)) s += (s.empty() ? "" : ", ") + std::string(k + 4) + " " + text(c[k]);
        row(os, "gdn", s);
    }
    if (has("ctx_train")) row(os, "context", text(c["ctx_train"]) + " (trained)");
    if (has("tied_output")) row(os, "output", c["tied_output"].get<bool>() ? "tied to token_embd" : "output.weight");
    if (has("vocab")) {
        std::string s = text(c["vocab"]);
        const auto& tok = j["tokenizer"];
        if (tok.contains("model")) s += " (" + text(tok["model"]) + (tok.contains("pre") ? ", pre " + text(tok["pre"]) : "") + ")";
        row(os, "vocab", s);
    }

    const auto& tensors = j["tensors"];
    row(os, "tensors", std::to_string(tensors.size()) + ", " + size_str(j["bytes"].get<uint64_t>()) + " (" +
                           text(j["bytes"]) + " bytes)");
    std::vector<std::pair<std::string, json>> types;  // largest first
    for (const auto& [name, t] : j["types"].items()) types.emplace_back(name, t);
    std::stable_sort(types.begin(), types.end(), [](const auto& a, const auto& b) {
        return a.second["bytes"].template get<uint64_t>() > b.second["bytes"].template get<uint64_t>();
    });
    const double total = std::max<double>(1, j["bytes"].get<double>());
    char buf[128];
    if (!types.empty()) os << "  type     count        bytes  share\n";
    for (const auto& [name, t] : types) {
        std::snprintf(buf, sizeof buf, "  %-8s %5llu %12s %5.1f%%\n", name.c_str(),
                      static_cast<unsigned long long>(t["count"].get<uint64_t>()),
                      size_str(t["bytes"].get<uint64_t>()).c_str(), 100.0 * t["bytes"].get<double>() / total);
        os << buf;
    }
    if (!list_tensors) return;
    size_t width = 0;
    for (const auto& t : tensors) width = std::max(width, t["name"].get<std::string>().size());
    for (const auto& t : tensors) {
        std::string shape;
        for (const auto& d : t["shape"]) {
            if (!shape.empty()) shape += ", ";
            shape += d.dump();
        }
        const std::string name = t["name"];
        os << "  " << name << std::string(width - name.size() + 2, ' ') << t["type"].get<std::string>()
           << std::string(9 - std::min<size_t>(8, t["type"].get<std::string>().size()), ' ') << '[' << shape << "]\n";
    }
}

}  // namespace df::model
