// Preset -> layout (tensor list + metadata), the summary, and the streaming write.
#include "model/synth.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>

namespace df::model::synth {
namespace {

using quant::Type;

// Weight gains of the golden recipe (shared/golden/README.md): 1 for input projections, 0.7 for
// output projections, 0.5 for ssm_alpha, 3 for the LM head (so logits have std ~ 3).
constexpr float kGainIn = 1.f, kGainOut = 0.7f, kGainAlpha = 0.5f, kGainHead = 3.f;

struct Builder {
    std::vector<TensorSpec>& out;

    void add(std::string name, Type type, std::vector<int64_t> shape, Init init, float gain = 1.f) {
        const auto& ti = quant::type_info(type);
        if (shape[0] % ti.block_elems != 0)
            throw std::logic_error("synth: tensor '" + name + "' row of " + std::to_string(shape[0]) +
                                   " is not a multiple of the " + std::string(ti.name) + " block");
        int64_t rows = 1;
        for (size_t i = 1; i < shape.size(); ++i) rows *= shape[i];
        const uint64_t bytes = quant::row_bytes(type, shape[0]) * static_cast<uint64_t>(rows);
        out.push_back({std::move(name), type, std::move(shape), init, gain, bytes});
    }
    void norm(const std::string& name, int64_t n) { add(name, Type::F32, {n}, Init::norm); }
    void linear(const std::string& name, const TypeRule& r, int il, int n_layer, int64_t in, int64_t outs,
                float gain) {
        add(name, rule_type(r, il, n_layer), {in, outs}, Init::linear, gain);
    }
};

std::string known_presets() {
    std::string s;
    for (const auto& p : presets()) s += (s.empty() ? "" : ", ") + std::string(p.name);
    return s;
}

std::vector<gguf::KeyValue> model_kv(const Preset& p, int n_layer, uint64_t seed) {
    using gguf::Value;
    const std::string a = std::string(p.arch) + ".";
    std::vector<gguf::KeyValue> kv = {
        {"general.architecture", Value::str(std::string(p.arch))},
        {"general.name", Value::str(std::string(p.name))},
        {"general.file_type", Value::u32(p.file_type)},
        {"general.quantization_version", Value::u32(2)},
        {"diskformer.synth.preset", Value::str(std::string(p.name))},
        {"diskformer.synth.seed", Value::u64(seed)},
        {a + "context_length", Value::u32(static_cast<uint32_t>(p.n_ctx))},
        {a + "embedding_length", Value::u32(static_cast<uint32_t>(p.n_embd))},
        {a + "block_count", Value::u32(static_cast<uint32_t>(n_layer))},
        {a + "feed_forward_length", Value::u32(static_cast<uint32_t>(p.n_ff))},
        {a + "attention.head_count", Value::u32(static_cast<uint32_t>(p.n_head))},
        {a + "attention.head_count_kv", Value::u32(static_cast<uint32_t>(p.n_head_kv))},
        {a + "attention.key_length", Value::u32(static_cast<uint32_t>(p.head_dim))},
        {a + "attention.value_length", Value::u32(static_cast<uint32_t>(p.head_dim))},
        {a + "rope.freq_base", Value::f32(p.rope_base)},
        {a + "attention.layer_norm_rms_epsilon", Value::f32(1e-6f)},
    };
    if (p.ssm_v_heads > 0) {
        // IMROPE sections as Qwen3.5 ships them; they cover n_rot / 2 = 32 rotary pairs.
        if (p.n_rot != 64) throw std::logic_error("synth: qwen35 presets need rope.dimension_count 64");
        kv.push_back({a + "rope.dimension_count", Value::u32(static_cast<uint32_t>(p.n_rot))});
        kv.push_back({a + "rope.dimension_sections", Value::i32s({11, 11, 10, 0})});
        kv.push_back({a + "ssm.conv_kernel", Value::u32(static_cast<uint32_t>(p.ssm_conv))});
        kv.push_back({a + "ssm.state_size", Value::u32(static_cast<uint32_t>(p.ssm_state))});
        kv.push_back({a + "ssm.group_count", Value::u32(static_cast<uint32_t>(p.ssm_k_heads))});
        kv.push_back({a + "ssm.time_step_rank", Value::u32(static_cast<uint32_t>(p.ssm_v_heads))});
        kv.push_back({a + "ssm.inner_size", Value::u32(static_cast<uint32_t>(p.ssm_v_heads * p.ssm_state))});
        kv.push_back({a + "full_attention_interval", Value::u32(static_cast<uint32_t>(p.attn_interval))});
    }
    return kv;
}

// The tensors of one layer, in the order llama.cpp's converter writes them.
void layer_tensors(Builder& b, const Preset& p, int il, int n_layer) {
    const TypeMix& m = p.types;
    const std::string pre = "blk." + std::to_string(il) + ".";
    const int64_t E = p.n_embd, F = p.n_ff, D = p.head_dim;
    const bool hybrid = p.ssm_v_heads > 0;
    const bool recurrent = hybrid && (il + 1) % p.attn_interval != 0;

    b.norm(pre + "attn_norm.weight", E);
    if (hybrid) b.norm(pre + "post_attention_norm.weight", E);
    if (recurrent) {
        const int64_t Hv = p.ssm_v_heads, S = p.ssm_state, C = (2 * p.ssm_k_heads + Hv) * S;
        b.linear(pre + "attn_qkv.weight", m.attn_qkv, il, n_layer, E, C, kGainIn);
        b.linear(pre + "attn_gate.weight", m.attn_gate, il, n_layer, E, Hv * S, kGainIn);
        b.add(pre + "ssm_conv1d.weight", Type::F32, {p.ssm_conv, C}, Init::conv);
        b.add(pre + "ssm_dt.bias", Type::F32, {Hv}, Init::dt_bias);
        b.add(pre + "ssm_a", Type::F32, {Hv}, Init::ssm_a);
        b.linear(pre + "ssm_beta.weight", m.ssm_beta, il, n_layer, E, Hv, kGainIn);
        b.linear(pre + "ssm_alpha.weight", m.ssm_alpha, il, n_layer, E, Hv, kGainAlpha);
        b.norm(pre + "ssm_norm.weight", S);
        b.linear(pre + "ssm_out.weight", m.ssm_out, il, n_layer, Hv * S, E, kGainOut);
    } else {
        const int64_t q_rows = (hybrid ? 2 : 1) * p.n_head * D;  // qwen35: query and gate per head
        b.linear(pre + "attn_q.weight", m.attn_q, il, n_layer, E, q_rows, kGainIn);
        b.linear(pre + "attn_k.weight", m.attn_k, il, n_layer, E, p.n_head_kv * D, kGainIn);
        b.linear(pre + "attn_v.weight", m.attn_v, il, n_layer, E, p.n_head_kv * D, kGainIn);
        b.linear(pre + "attn_output.weight", m.attn_output, il, n_layer, p.n_head * D, E, kGainOut);
        b.norm(pre + "attn_q_norm.weight", D);
        b.norm(pre + "attn_k_norm.weight", D);
    }
    if (!hybrid) b.norm(pre + "ffn_norm.weight", E);
    b.linear(pre + "ffn_gate.weight", m.ffn_gate, il, n_layer, E, F, kGainIn);
    b.linear(pre + "ffn_up.weight", m.ffn_up, il, n_layer, E, F, kGainIn);
    b.linear(pre + "ffn_down.weight", m.ffn_down, il, n_layer, F, E, kGainOut);
}

std::string with_commas(uint64_t v) {
    const std::string digits = std::to_string(v);
    std::string s;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
        s += digits[i];
    }
    return s;
}

}  // namespace

uint64_t Layout::tensor_bytes() const {
    uint64_t s = 0;
    for (const auto& t : tensors) s += t.bytes;
    return s;
}

std::vector<std::pair<quant::Type, uint64_t>> Layout::bytes_by_type() const {
    std::map<Type, uint64_t> by;
    for (const auto& t : tensors) by[t.type] += t.bytes;
    std::vector<std::pair<Type, uint64_t>> out(by.begin(), by.end());
    std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    return out;
}

Layout plan(const Options& o) {
    const Preset* p = find_preset(o.preset);
    if (!p) throw std::invalid_argument("synth: unknown preset '" + o.preset + "' (known: " + known_presets() + ")");
    if (o.layers < 0 || o.layers > p->n_layer)
        throw std::invalid_argument("synth: --layers must be in 1.." + std::to_string(p->n_layer) + " for " +
                                    std::string(p->name) + ", got " + std::to_string(o.layers));
    Layout l;
    l.preset = p->name;
    l.arch = p->arch;
    l.seed = o.seed;
    l.n_layer = o.layers > 0 ? o.layers : p->n_layer;
    l.n_vocab = p->n_vocab;
    l.kv = model_kv(*p, l.n_layer, o.seed);
    for (auto& kv : vocab_kv(p->n_vocab, p->arch == "qwen35" ? "qwen35" : "qwen2")) l.kv.push_back(std::move(kv));

    Builder b{l.tensors};
    const int64_t E = p->n_embd, V = p->n_vocab;
    b.linear("token_embd.weight", p->types.token_embd, 0, 1, E, V, p->tied ? kGainHead : kGainIn);
    b.norm("output_norm.weight", E);
    if (!p->tied) b.linear("output.weight", p->types.output, 0, 1, E, V, kGainHead);
    // Rules like "first 1/8 of ffn_down" see the truncated depth, as llama-quantize would.
    for (int il = 0; il < l.n_layer; ++il) layer_tensors(b, *p, il, l.n_layer);
    return l;
}

std::string summary(const Layout& l) {
    std::string s;
    char line[160];
    const Preset* p = find_preset(l.preset);
    std::snprintf(line, sizeof line, "preset %s: %s, %d layers, hidden %d, vocab %d, seed %llu\n", l.preset.c_str(),
                  l.arch.c_str(), l.n_layer, p ? p->n_embd : 0, l.n_vocab, static_cast<unsigned long long>(l.seed));
    s += line;
    const uint64_t total = l.tensor_bytes();
    std::snprintf(line, sizeof line, "%zu tensors, %s bytes of tensor data (%.1f MB)\n", l.tensors.size(),
                  with_commas(total).c_str(), total / 1e6);
    s += line;
    const uint64_t file = file_size(l);
    std::snprintf(line, sizeof line, "GGUF file %s bytes (%.1f MB of metadata and padding)\n", with_commas(file).c_str(),
                  (file - total) / 1e6);
    s += line;
    for (const auto& [type, bytes] : l.bytes_by_type()) {
        size_t n = 0;
        for (const auto& t : l.tensors) n += t.type == type;
        std::snprintf(line, sizeof line, "  %-8s %15s B %10.1f MB %5zu tensors\n",
                      std::string(quant::type_name(type)).c_str(), with_commas(bytes).c_str(), bytes / 1e6, n);
        s += line;
    }
    return s;
}

uint64_t file_size(const Layout& l) {
    gguf::Writer w;
    for (const auto& kv : l.kv) w.set(kv.key, kv.value);
    for (const auto& t : l.tensors) w.add_tensor(t.name, t.type, t.shape, [](uint64_t, uint8_t*, uint64_t) {});
    return w.file_size();
}

WriteStats write(const Layout& l, const std::string& path, int threads) {
    if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const auto t0 = std::chrono::steady_clock::now();
    gguf::Writer w;
    for (const auto& kv : l.kv) w.set(kv.key, kv.value);
    for (const auto& t : l.tensors) {
        const uint64_t seed = tensor_seed(l.seed, t.name);
        w.add_tensor(t.name, t.type, t.shape, [&t, seed, threads](uint64_t off, uint8_t* dst, uint64_t n) {
            fill(t, seed, off, dst, n, threads);
        });
    }
    w.write(path);
    WriteStats st;
    st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    st.bytes = std::filesystem::file_size(path);
    return st;
}

}  // namespace df::model::synth
