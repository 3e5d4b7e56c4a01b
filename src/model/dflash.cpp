#include "model/dflash.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "gguf/gguf.h"
#include "quant/dequant.h"
#include "quant/quantize.h"

namespace df::model {
namespace {

using Json = nlohmann::json;

[[noreturn]] void fail(const std::string& what) { throw gguf::Error("dflash drafter: " + what); }

std::string read_text(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("cannot open " + path);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

int int_field(const Json& j, const char* key, int lo, int hi) {
    if (!j.contains(key)) fail(std::string("config.json has no \"") + key + "\"");
    const Json& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
        fail(std::string("config.json \"") + key + "\" must be an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
    return static_cast<int>(v.get<int64_t>());
}

float float_field(const Json& j, const char* key, float fallback) {
    if (!j.contains(key)) return fallback;
    if (!j[key].is_number() || !(j[key].get<double>() > 0)) fail(std::string("config.json \"") + key + "\" must be a positive number");
    return static_cast<float>(j[key].get<double>());
}

// Hugging Face's bookkeeping and fields whose only allowed value is checked below.
const std::set<std::string> kKnownKeys = {
    "architectures", "auto_map", "model_type", "block_size", "dflash_config", "num_target_layers", "hidden_size",
    "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps",
    "rope_theta", "layer_types", "sliding_window", "use_sliding_window", "max_window_layers", "vocab_size",
    "tie_word_embeddings", "attention_bias", "attention_dropout", "hidden_act", "initializer_range",
    "max_position_embeddings", "rope_scaling", "torch_dtype", "dtype", "transformers_version", "use_cache",
    "bos_token_id", "eos_token_id", "pad_token_id", "_name_or_path"};

}  // namespace

DflashConfig DflashConfig::from_json(const std::string& text, const ModelConfig& target) {
    const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) fail("config.json is not a JSON object");
    for (auto it = j.begin(); it != j.end(); ++it)
        if (!kKnownKeys.count(it.key()))
            fail("config.json field \"" + it.key() + "\" is not known (a FlashMap or other variant of DFlash is not supported)");
    if (j.contains("model_type") && j["model_type"] != "qwen3") fail("config.json \"model_type\" must be \"qwen3\"");
    if (j.value("attention_bias", false) != false) fail("config.json \"attention_bias\": biases are not supported");
    if (j.contains("hidden_act") && j["hidden_act"] != "silu") fail("config.json \"hidden_act\" must be \"silu\"");
    if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) fail("config.json \"rope_scaling\" is not supported");
    if (j.value("use_sliding_window", false) != false) fail("config.json \"use_sliding_window\": sliding windows are not supported");
    if (j.contains("layer_types"))
        for (const auto& t : j["layer_types"])
            if (t != "full_attention") fail("config.json \"layer_types\": only full_attention layers are supported");
    DflashConfig c;
    c.n_embd = int_field(j, "hidden_size", 1, 1 << 16);
    c.n_layer = int_field(j, "num_hidden_layers", 1, 64);
    c.n_head = int_field(j, "num_attention_heads", 1, 1024);
    c.n_head_kv = int_field(j, "num_key_value_heads", 1, c.n_head);
    c.head_dim = j.contains("head_dim") ? int_field(j, "head_dim", 8, 1024) : c.n_embd / c.n_head;
    c.n_ff = int_field(j, "intermediate_size", 1, 1 << 20);
    c.block_size = j.contains("block_size") ? int_field(j, "block_size", 2, 64) : 16;
    c.eps = float_field(j, "rms_norm_eps", 1e-6f);
    c.rope_base = float_field(j, "rope_theta", 1e6f);
    if (c.n_head % c.n_head_kv) fail("config.json: num_attention_heads must be a multiple of num_key_value_heads");
    if (c.head_dim % 8) fail("config.json: head_dim must be a multiple of 8");
    if (c.n_embd != target.n_embd)
        fail("hidden_size " + std::to_string(c.n_embd) + " differs from the target's " + std::to_string(target.n_embd));
    if (j.contains("num_target_layers") && int_field(j, "num_target_layers", 1, 1024) != target.n_layer)
        fail("num_target_layers " + std::to_string(j["num_target_layers"].get<int>()) + " differs from the target's " +
             std::to_string(target.n_layer) + " layers");
    const Json dc = j.value("dflash_config", Json::object());
    if (!dc.is_object()) fail("config.json \"dflash_config\" must be an object");
    for (auto it = dc.begin(); it != dc.end(); ++it)
        if (it.key() != "mask_token_id" && it.key() != "target_layer_ids")
            fail("config.json field \"dflash_config." + it.key() + "\" is not known");
    c.mask_token = int_field(dc, "mask_token_id", 0, target.n_vocab - 1);
    if (dc.contains("target_layer_ids")) {
        if (!dc["target_layer_ids"].is_array() || dc["target_layer_ids"].empty())
            fail("config.json \"dflash_config.target_layer_ids\" must be a list of layers");
        for (const auto& l : dc["target_layer_ids"]) {
            if (!l.is_number_integer() || l.get<int>() < 0 || l.get<int>() >= target.n_layer)
                fail("config.json \"dflash_config.target_layer_ids\": layers must lie in 0.." + std::to_string(target.n_layer - 1));
            c.target_layers.push_back(l.get<int>());
        }
    } else {
        // z-lab's default: one tap per drafter layer, spread over the target's layers.
        const int n = c.n_layer, L = target.n_layer;
        for (int i = 0; i < n; ++i)
            c.target_layers.push_back(n == 1 ? 1 : static_cast<int>(std::lround(1 + i * static_cast<double>(L - 4) / (n - 1))));
        for (int l : c.target_layers)
            if (l < 0 || l >= L) fail("the target has too few layers for the default taps");
    }
    return c;
}

struct Dflash::State {
    const Dflash* d = nullptr;
    int ctx = 0, chunk = 0;
    std::vector<void*> k_cache, v_cache;
    int32_t *tokens = nullptr, *pos = nullptr, *attn_pos = nullptr;
    int32_t* argmax = nullptr;  // host-visible
    float *x = nullptr, *n = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *attn = nullptr, *big = nullptr,
          *big2 = nullptr, *logits = nullptr;
    std::vector<void*> owned;
    std::vector<int32_t> host;
    std::vector<uint64_t> graphs;  // keys recorded on the backend (dropped with the state)

    // Runs `ops` as the graph `key` (CUDA: recorded on first use, replayed after; CPU: run).
    // Their token ids and positions are in backend memory, uploaded before.
    template <class Ops> void run(Backend& be, uint64_t key, Ops ops) {
        if (be.replay(key)) return;
        const bool recording = be.begin_capture(key);
        ops();
        if (!recording) return;
        be.end_capture();
        graphs.push_back(key);
        be.replay(key);
    }
    // Graph keys: the state's address and the length band, tagged apart from sessions' keys
    // (bit 62), with the pass kind and its row count above the address.
    uint64_t key(bool draft, int T, int variant) const {
        return ((reinterpret_cast<uintptr_t>(this) + static_cast<uint64_t>(variant)) ^ (uint64_t{1} << 62)) ^
               (static_cast<uint64_t>(draft) << 61) ^ (static_cast<uint64_t>(T) << 48);
    }
};

Dflash::~Dflash() = default;

std::unique_ptr<Dflash> Dflash::load(const std::string& dir, const Model& target, bool q8_0) {
    return from_parts(read_text(dir + "/config.json"), SafeTensors::open(dir + "/model.safetensors"), target, q8_0);
}

std::unique_ptr<Dflash> Dflash::from_parts(const std::string& config_json, std::unique_ptr<SafeTensors> weights,
                                           const Model& target, bool q8_0) {
    const ModelConfig& tc = target.config();
    if (tc.n_recurrent() > 0) fail("the target must be an attention-only (qwen3) model");
    std::unique_ptr<Dflash> d(new Dflash());
    d->target_ = &target;
    d->be_ = &target.backend();
    d->config_ = DflashConfig::from_json(config_json, tc);
    d->file_ = std::move(weights);
    const DflashConfig& c = d->config_;
    const int64_t E = c.n_embd, D = c.head_dim, F = c.n_ff, taps = static_cast<int64_t>(c.target_layers.size());

    // Names with or without "model." (llama.cpp's converters add it).
    std::set<std::string> used;
    auto find = [&](const std::string& name, std::vector<int64_t> shape) -> const SafeTensor& {
        const SafeTensor* t = d->file_->find(name);
        if (!t) t = d->file_->find("model." + name);
        if (!t) fail("tensor '" + name + "' is missing");
        if (t->shape != shape) {
            std::string want, got;
            for (int64_t s : shape) want += (want.empty() ? "" : ", ") + std::to_string(s);
            for (int64_t s : t->shape) got += (got.empty() ? "" : ", ") + std::to_string(s);
            fail("tensor '" + name + "' has shape [" + got + "], expected [" + want + "]");
        }
        used.insert(t->name);
        return *t;
    };
    auto qtype = [](const SafeTensor& t) {
        return t.dtype == "BF16" ? quant::Type::BF16 : t.dtype == "F16" ? quant::Type::F16 : quant::Type::F32;
    };
    // Element i of a tensor as a float.
    auto at = [](const SafeTensor& t, size_t i) {
        if (t.dtype == "F32") {
            float v;
            std::memcpy(&v, t.data + 4 * i, 4);
            return v;
        }
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        return t.dtype == "BF16" ? quant::bf16_to_f32(h) : quant::f16_to_f32(h);
    };
    // Columns [c0, c0 + cols) of a [rows, width] tensor as a weight: as stored, or as Q8_0.
    auto load = [&](const SafeTensor& t, int64_t rows, int64_t width, int64_t c0, int64_t cols) {
        const size_t elem = t.dtype == "F32" ? 4 : 2;
        const bool q = q8_0 && cols % 32 == 0;  // Q8_0 blocks hold 32
        std::vector<uint8_t> buf;
        if (q) {
            buf.resize(static_cast<size_t>(rows * cols / 32) * 34);
            std::vector<float> row(static_cast<size_t>(cols));
            for (int64_t r = 0; r < rows; ++r) {
                for (int64_t j = 0; j < cols; ++j) row[static_cast<size_t>(j)] = at(t, static_cast<size_t>(r * width + c0 + j));
                quant::quantize_q8_0(row.data(), buf.data() + static_cast<size_t>(r * cols / 32) * 34, cols);
            }
        } else if (c0 != 0 || cols != width) {
            buf.resize(static_cast<size_t>(rows * cols) * elem);
            for (int64_t r = 0; r < rows; ++r)
                std::memcpy(buf.data() + static_cast<size_t>(r * cols) * elem, t.data + static_cast<size_t>(r * width + c0) * elem,
                            static_cast<size_t>(cols) * elem);
        }
        const quant::Type type = q ? quant::Type::Q8_0 : qtype(t);
        if (buf.empty()) {  // as stored, in place
            d->weight_bytes_ += t.bytes;
            return d->be_->load_weight(type, cols, rows, t.data, t.bytes);
        }
        d->weight_bytes_ += buf.size();
        d->host_.push_back(std::move(buf));
        return d->be_->load_weight(type, cols, rows, d->host_.back().data(), d->host_.back().size());
    };
    auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
        return load(find(name, {rows, cols}), rows, cols, 0, cols);
    };
    // Norm weights as f32 (the ops read them as floats).
    auto vec = [&](const std::string& name, int64_t n) {
        const SafeTensor& t = find(name, {n});
        std::vector<uint8_t> f(sizeof(float) * static_cast<size_t>(n));
        auto* out = reinterpret_cast<float*>(f.data());
        for (int64_t i = 0; i < n; ++i) out[i] = at(t, static_cast<size_t>(i));
        d->host_.push_back(std::move(f));
        d->weight_bytes_ += sizeof(float) * static_cast<size_t>(n);
        return d->be_->load_weight(quant::Type::F32, n, 1, d->host_.back().data(), d->host_.back().size());
    };

    // fc [E, taps * E] in tap blocks of columns: one [E, E] matrix per tap.
    const SafeTensor& fc = find("fc.weight", {E, taps * E});
    for (int64_t i = 0; i < taps; ++i) d->fc_.push_back(load(fc, E, taps * E, i * E, E));
    d->hidden_norm_ = vec("hidden_norm.weight", E);
    d->norm_ = vec("norm.weight", E);
    for (int i = 0; i < c.n_layer; ++i) {
        const std::string p = "layers." + std::to_string(i) + ".";
        Layer l;
        l.attn_norm = vec(p + "input_layernorm.weight", E);
        l.ffn_norm = vec(p + "post_attention_layernorm.weight", E);
        l.wq = matrix(p + "self_attn.q_proj.weight", c.n_head * D, E);
        l.wk = matrix(p + "self_attn.k_proj.weight", c.n_head_kv * D, E);
        l.wv = matrix(p + "self_attn.v_proj.weight", c.n_head_kv * D, E);
        l.wo = matrix(p + "self_attn.o_proj.weight", E, c.n_head * D);
        l.q_norm = vec(p + "self_attn.q_norm.weight", D);
        l.k_norm = vec(p + "self_attn.k_norm.weight", D);
        l.gate = matrix(p + "mlp.gate_proj.weight", F, E);
        l.up = matrix(p + "mlp.up_proj.weight", F, E);
        l.down = matrix(p + "mlp.down_proj.weight", E, F);
        d->layers_.push_back(l);
    }
    for (const auto& t : d->file_->tensors())
        if (!used.count(t.name)) fail("tensor '" + t.name + "' is not part of a DFlash drafter (another variant?)");
    d->be_->synchronize();
    return d;
}

std::unique_ptr<Dflash::State, void (*)(Dflash::State*)> Dflash::new_state(int ctx, int chunk) const {
    const DflashConfig& c = config_;
    Backend& be = *be_;
    auto del = [](State* s) {
        for (uint64_t k : s->graphs) s->d->be_->drop_capture(k);
        for (void* p : s->owned) s->d->be_->release(p);
        delete s;
    };
    std::unique_ptr<State, void (*)(State*)> st(new State(), del);
    st->d = this;
    st->ctx = ctx;
    st->chunk = chunk;
    auto take = [&](size_t bytes, MemKind kind) {
        void* p = be.alloc(bytes, kind);
        st->owned.push_back(p);
        return p;
    };
    const size_t K = static_cast<size_t>(c.block_size), rows = std::max<size_t>(K, static_cast<size_t>(chunk));
    const size_t kv = static_cast<size_t>(c.n_head_kv) * c.head_dim, qd = static_cast<size_t>(c.n_head) * c.head_dim;
    for (int i = 0; i < c.n_layer; ++i) {
        st->k_cache.push_back(take(sizeof(uint16_t) * static_cast<size_t>(ctx) * kv, MemKind::kv));
        st->v_cache.push_back(take(sizeof(uint16_t) * static_cast<size_t>(ctx) * kv, MemKind::kv));
    }
    auto f32 = [&](size_t n) { return static_cast<float*>(take(sizeof(float) * n, MemKind::scratch)); };
    auto i32 = [&](size_t n) { return static_cast<int32_t*>(take(sizeof(int32_t) * n, MemKind::scratch)); };
    st->tokens = i32(rows);
    st->pos = i32(rows);
    st->attn_pos = i32(K);
    st->x = f32(rows * c.n_embd);
    st->n = f32(K * c.n_embd);
    st->q = f32(K * qd);
    st->k = f32(rows * kv);
    st->v = f32(rows * kv);
    st->attn = f32(K * qd);
    st->big = f32(K * static_cast<size_t>(c.n_ff));
    st->big2 = f32(K * static_cast<size_t>(c.n_ff));
    st->logits = f32((K - 1) * static_cast<size_t>(target_->config().n_vocab));
    st->argmax = static_cast<int32_t*>(be.alloc_host_visible(sizeof(int32_t) * K, MemKind::scratch));
    st->owned.push_back(st->argmax);
    return st;
}

void Dflash::inject(State& st, const float* taps, int chunk, int T, int pos0) const {
    const DflashConfig& c = config_;
    Backend& be = *be_;
    if (T <= 0) return;
    if (T > st.chunk || pos0 + T > st.ctx) fail("context rows past the drafter's buffers");
    const int E = c.n_embd, D = c.head_dim, Hkv = c.n_head_kv;
    st.host.resize(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t) st.host[static_cast<size_t>(t)] = pos0 + t;
    be.upload(st.pos, st.host.data(), sizeof(int32_t) * static_cast<size_t>(T));
    Step s;
    s.T = T;
    s.tokens = st.tokens;  // unused by these ops
    s.pos = st.pos;
    s.pos0_hint = pos0;
    s.max_ctx = st.ctx;
    auto ops = [&] {
        // ctx = hidden_norm(fc · concat(taps)): the concatenation as a sum over the tap blocks.
        for (size_t i = 0; i < fc_.size(); ++i)
            be.matmul(fc_[i], taps + static_cast<int64_t>(i) * chunk * E, T, st.x, /*accumulate=*/i > 0);
        be.rmsnorm(st.x, E, static_cast<const float*>(hidden_norm_.data), T, E, c.eps, st.x, E);
        const RopeShape rope{D, c.rope_base};
        for (size_t il = 0; il < layers_.size(); ++il) {
            const Layer& l = layers_[il];
            be.matmul(l.wk, st.x, T, st.k);
            be.matmul(l.wv, st.x, T, st.v);
            be.head_norm_rope(st.k, Hkv, D, D, Hkv * D, static_cast<const float*>(l.k_norm.data), c.eps, rope, s);
            be.kv_store(st.k, st.v, st.k_cache[il], st.v_cache[il], KvType::f16, Hkv * D, s);
        }
    };
    // The rows of a verify pass or a step (T <= 8, the same taps buffer every time) as a graph,
    // like the target's own passes: their launches would cost more than their work.
    if (T <= kVerifyRows) st.run(be, st.key(false, T, be.graph_variant(s)), ops);
    else ops();
}

std::vector<int32_t> Dflash::draft(State& st, int32_t last, int start) const {
    const DflashConfig& c = config_;
    Backend& be = *be_;
    const int K = c.block_size;
    if (start + K > st.ctx) return {};
    // Tokens, their positions, and the position every query attends up to (bidirectional).
    st.host.assign(static_cast<size_t>(3 * K), 0);
    for (int j = 0; j < K; ++j) {
        st.host[static_cast<size_t>(j)] = j == 0 ? last : c.mask_token;
        st.host[static_cast<size_t>(K + j)] = start + j;
        st.host[static_cast<size_t>(2 * K + j)] = start + K - 1;
    }
    be.upload(st.tokens, st.host.data(), sizeof(int32_t) * K);
    be.upload(st.pos, st.host.data() + K, sizeof(int32_t) * K);
    be.upload(st.attn_pos, st.host.data() + 2 * K, sizeof(int32_t) * K);
    Step s;
    s.T = K;
    s.tokens = st.tokens;
    s.pos = st.pos;
    s.pos0_hint = start;
    s.max_ctx = st.ctx;
    Step all = s;
    all.pos = st.attn_pos;
    all.pos0_hint = start + K - 1;
    // One graph per length band (the attention kernels are chosen by context length).
    st.run(be, st.key(true, K, be.graph_variant(all)), [&] { block(st, s, all); });
    be.synchronize();
    return std::vector<int32_t>(st.argmax, st.argmax + K - 1);
}

void Dflash::block(State& st, const Step& s, const Step& all) const {
    const DflashConfig& c = config_;
    Backend& be = *be_;
    const Weights& tw = target_->weights();
    const int K = c.block_size, E = c.n_embd, D = c.head_dim, Hq = c.n_head, Hkv = c.n_head_kv;
    const int V = target_->config().n_vocab;
    const RopeShape rope{D, c.rope_base};
    const AttnShape a{Hq, Hkv, D, D, Hq * D, 1.0f / std::sqrt(static_cast<float>(D))};
    be.embed(tw.tok_embd, s, st.x);
    for (size_t il = 0; il < layers_.size(); ++il) {
        const Layer& l = layers_[il];
        be.rmsnorm(st.x, E, static_cast<const float*>(l.attn_norm.data), K, E, c.eps, st.n, E);
        be.matmul(l.wq, st.n, K, st.q);
        be.matmul(l.wk, st.n, K, st.k);
        be.matmul(l.wv, st.n, K, st.v);
        be.head_norm_rope(st.q, Hq, D, D, Hq * D, static_cast<const float*>(l.q_norm.data), c.eps, rope, s);
        be.head_norm_rope(st.k, Hkv, D, D, Hkv * D, static_cast<const float*>(l.k_norm.data), c.eps, rope, s);
        be.kv_store(st.k, st.v, st.k_cache[il], st.v_cache[il], KvType::f16, Hkv * D, s);
        be.attention(st.q, st.k_cache[il], st.v_cache[il], KvType::f16, a, all, st.attn);
        be.matmul(l.wo, st.attn, K, st.x, /*accumulate=*/true);
        be.rmsnorm(st.x, E, static_cast<const float*>(l.ffn_norm.data), K, E, c.eps, st.n, E);
        be.ffn_gate_up(l.gate, l.up, st.n, K, st.big, st.big2);
        be.matmul(l.down, st.big, K, st.x, /*accumulate=*/true);
    }
    // Slots 1..K-1 through the final norm and the target's LM head.
    be.rmsnorm(st.x + E, E, static_cast<const float*>(norm_.data), K - 1, E, c.eps, st.n, E);
    be.matmul(tw.output, st.n, K - 1, st.logits);
    be.argmax(st.logits, K - 1, V, st.argmax);
}

std::vector<float> Dflash::logits(const State& st) const {
    std::vector<float> out(static_cast<size_t>(config_.block_size - 1) * target_->config().n_vocab);
    be_->download(out.data(), st.logits, sizeof(float) * out.size());
    return out;
}

}  // namespace df::model
