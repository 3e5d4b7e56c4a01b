#include "model/model.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>

#include "model/arch.h"

namespace df::model {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
    std::ostringstream o;
    o << '[';
    for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
    o << ']';
    return o.str();
}

[[noreturn]] void tensor_error(const std::string& name, const std::string& what) {
    throw gguf::Error("model: tensor '" + name + "': " + what);
}

}  // namespace

Model::~Model() = default;

std::unique_ptr<Model> Model::load(const std::string& path, std::shared_ptr<Backend> backend) {
    std::unique_ptr<Model> m(new Model());
    m->file_ = gguf::File::open(path);
    m->backend_ = std::move(backend);
    m->config_ = ModelConfig::from_gguf(*m->file_);
    const ModelConfig& c = m->config_;
    const ArchEntry* arch = find_arch(c.arch);
    if (!arch) throw gguf::Error("model: architecture '" + c.arch + "' has no layer program");
    if (c.n_vocab <= 0) throw gguf::Error("model: tensor 'token_embd.weight' is missing");
    // The SIMD and CUDA kernels work on head rows in units of 8 floats.
    if (c.head_dim % 8) throw gguf::Error("model: key '" + c.arch + ".attention.key_length' must be a multiple of 8, got " + std::to_string(c.head_dim));
    if (c.n_recurrent() && c.ssm_state % 8)
        throw gguf::Error("model: key '" + c.arch + ".ssm.state_size' must be a multiple of 8, got " + std::to_string(c.ssm_state));

    arch->visit(c, m->weights_, [&](const TensorSpec& spec) {
        const gguf::TensorInfo* t = m->file_->find_tensor(spec.name);
        if (!t) {
            if (spec.optional) return;
            tensor_error(spec.name, "missing (expected shape " + shape_str(spec.shape) + ")");
        }
        if (t->shape != spec.shape)
            tensor_error(spec.name, "expected shape " + shape_str(spec.shape) + ", found " + shape_str(t->shape));
        if (spec.kind == TensorKind::f32 && t->type != quant::Type::F32)
            tensor_error(spec.name, "expected type F32, found " + std::string(quant::type_name(t->type)));
        const int64_t cols = t->shape[0];
        const int64_t rows = t->shape.size() > 1 ? t->shape[1] : 1;
        *spec.slot = m->backend_->load_weight(t->type, cols, rows, t->data, t->bytes);
        m->weight_bytes_ += t->bytes;
    });
    arch->fixup(c, m->weights_);
    m->backend_->synchronize();
    return m;
}

namespace {

// Bytes of one GDN layer's conv state and delta-rule state.
size_t conv_state_bytes(const ModelConfig& c) { return sizeof(float) * (c.ssm_conv - 1) * c.ssm_channels(); }
size_t ssm_state_bytes(const ModelConfig& c) { return sizeof(float) * c.ssm_v_heads * c.ssm_state * c.ssm_state; }

// Calls f(layer buffer, bytes) for each recurrent buffer of st, in a fixed order.
template <class F>
void each_recurrent(const ModelConfig& c, const State& st, F&& f) {
    for (int i = 0; i < c.n_layer; ++i) {
        if (st.conv_state[i]) f(st.conv_state[i], conv_state_bytes(c));
        if (st.ssm_state[i]) f(st.ssm_state[i], ssm_state_bytes(c));
    }
}

}  // namespace

void Model::alloc_scratch(State& st, int chunk) const {
    const ModelConfig& c = config_;
    Backend& be = *backend_;
    auto take = [&](size_t bytes) {
        void* p = be.alloc(bytes, MemKind::scratch);
        st.owned.push_back(p);
        st.scratch_bytes += bytes;
        return p;
    };
    const size_t T = chunk;
    const size_t E = c.n_embd;
    const size_t q_rows = static_cast<size_t>(c.attn_gated ? 2 : 1) * c.q_dim();
    const size_t big = std::max({static_cast<size_t>(c.n_ff), q_rows, static_cast<size_t>(c.ssm_channels())});
    const size_t big2 = std::max(static_cast<size_t>(c.n_ff), static_cast<size_t>(c.ssm_inner));
    const size_t small = std::max(static_cast<size_t>(c.kv_dim()), static_cast<size_t>(c.ssm_v_heads));
    const size_t attn = std::max(static_cast<size_t>(c.q_dim()), static_cast<size_t>(c.ssm_inner));
    auto f32 = [&](size_t n) { return static_cast<float*>(take(sizeof(float) * n)); };
    st.h = f32(T * E);
    st.x = f32(T * E);
    st.big = f32(T * big);
    st.big2 = f32(T * big2);
    st.small = f32(T * small);
    st.small2 = f32(T * small);
    st.attn = f32(T * attn);
    st.logits = f32((st.all_logits ? T : std::min<size_t>(T, kVerifyRows)) * static_cast<size_t>(c.n_vocab));
    st.tokens = static_cast<int32_t*>(take(sizeof(int32_t) * T));
    st.pos = static_cast<int32_t*>(take(sizeof(int32_t) * T));
    st.argmax = static_cast<int32_t*>(be.alloc_host_visible(sizeof(int32_t) * T, MemKind::scratch));
    st.owned.push_back(st.argmax);
    st.scratch_bytes += sizeof(int32_t) * T;
    constexpr size_t kTop = Backend::kTopLogitsMax;
    const size_t top_bytes = (2 * kTop) * (sizeof(int32_t) + sizeof(float)) + kTop * sizeof(int32_t);
    void* top = be.alloc_host_visible(top_bytes, MemKind::scratch);
    st.owned.push_back(top);
    st.scratch_bytes += top_bytes;
    st.top_ids = static_cast<int32_t*>(top);
    st.top_vals = reinterpret_cast<float*>(st.top_ids + 2 * kTop);
    st.top_extra = reinterpret_cast<int32_t*>(st.top_vals + 2 * kTop);
}

std::unique_ptr<State> Model::new_scratch(int rows) const {
    if (rows < 1 || rows > kVerifyRows)
        throw std::invalid_argument("new_scratch: " + std::to_string(rows) + " rows (1.." + std::to_string(kVerifyRows) + ")");
    auto st = std::make_unique<State>();
    st->chunk = rows;
    alloc_scratch(*st, rows);
    return st;
}

std::unique_ptr<State> Model::new_state(int ctx, int chunk, KvType kv_type, bool all_logits) const {
    const ModelConfig& c = config_;
    auto st = std::make_unique<State>();
    st->ctx = ctx;
    st->chunk = chunk;
    st->kv_type = kv_type;
    st->all_logits = all_logits;
    Backend& be = *backend_;
    auto take = [&](size_t bytes, MemKind kind) {
        void* p = be.alloc(bytes, kind);
        st->owned.push_back(p);
        (kind == MemKind::kv ? st->kv_bytes : kind == MemKind::state ? st->state_bytes : st->scratch_bytes) += bytes;
        return p;
    };
    const size_t kv_elem = kv_type == KvType::f16 ? 2 : 4;
    st->k_cache.assign(c.n_layer, nullptr);
    st->v_cache.assign(c.n_layer, nullptr);
    st->conv_state.assign(c.n_layer, nullptr);
    st->ssm_state.assign(c.n_layer, nullptr);
    for (int i = 0; i < c.n_layer; ++i) {
        if (c.recurrent[i]) {
            st->conv_state[i] = static_cast<float*>(take(conv_state_bytes(c), MemKind::state));
            st->ssm_state[i] = static_cast<float*>(take(ssm_state_bytes(c), MemKind::state));
        } else {
            const size_t bytes = kv_elem * static_cast<size_t>(ctx) * c.kv_dim();
            st->k_cache[i] = take(bytes, MemKind::kv);
            st->v_cache[i] = take(bytes, MemKind::kv);
        }
    }
    alloc_scratch(*st, chunk);
    return st;
}

void Model::free_state(State& st) const {
    for (void* p : st.owned) backend_->release(p);
    st.owned.clear();
}

void Model::reset_state(State& st) const {
    each_recurrent(config_, st, [&](float* p, size_t bytes) { backend_->zero(p, bytes); });
}

void Model::enable_taps(State& st, const std::vector<int>& layers) const {
    for (int l : layers)
        if (l < 0 || l >= config_.n_layer)
            throw gguf::Error("model: layer " + std::to_string(l) + " to keep does not exist (0.." + std::to_string(config_.n_layer - 1) + ")");
    if (st.taps) {
        backend_->release(st.taps);
        st.owned.erase(std::find(st.owned.begin(), st.owned.end(), static_cast<void*>(st.taps)));
        st.scratch_bytes -= sizeof(float) * st.tap_layers.size() * static_cast<size_t>(st.chunk) * config_.n_embd;
        st.taps = nullptr;
    }
    st.tap_layers = layers;
    if (layers.empty()) return;
    const size_t bytes = sizeof(float) * layers.size() * static_cast<size_t>(st.chunk) * config_.n_embd;
    st.taps = static_cast<float*>(backend_->alloc(bytes, MemKind::scratch));
    st.owned.push_back(st.taps);
    st.scratch_bytes += bytes;
}

size_t Model::recurrent_bytes() const {
    const ModelConfig& c = config_;
    return c.n_recurrent() > 0 ? (conv_state_bytes(c) + ssm_state_bytes(c)) * c.n_recurrent() : 0;
}

void Model::save_recurrent(const State& st, void* dst) const {
    size_t off = 0;
    each_recurrent(config_, st, [&](float* p, size_t bytes) {
        backend_->copy(static_cast<uint8_t*>(dst) + off, p, bytes);
        off += bytes;
    });
}

void Model::load_recurrent(State& st, const void* src) const {
    size_t off = 0;
    each_recurrent(config_, st, [&](float* p, size_t bytes) {
        backend_->copy(p, static_cast<const uint8_t*>(src) + off, bytes);
        off += bytes;
    });
}

void Model::copy_kv_rows(const State& from, State& to, int n) const {
    if (from.kv_type != to.kv_type || n < 0 || n > from.ctx || n > to.ctx)
        throw std::invalid_argument("copy_kv_rows: " + std::to_string(n) + " rows between states of other KV types or contexts");
    const size_t bytes = (from.kv_type == KvType::f16 ? 2 : 4) * static_cast<size_t>(n) * config_.kv_dim();
    for (int i = 0; i < config_.n_layer; ++i)
        if (from.k_cache[i]) {
            backend_->copy(to.k_cache[i], from.k_cache[i], bytes);
            backend_->copy(to.v_cache[i], from.v_cache[i], bytes);
        }
}

void Model::copy_recurrent(const State& from, State& to) const {
    for (int i = 0; i < config_.n_layer; ++i) {
        if (from.conv_state[i]) backend_->copy(to.conv_state[i], from.conv_state[i], conv_state_bytes(config_));
        if (from.ssm_state[i]) backend_->copy(to.ssm_state[i], from.ssm_state[i], ssm_state_bytes(config_));
    }
}

void Model::forward(State& st, const Step& s, Output out) const {
    if (out == Output::all && !st.all_logits && s.T > kVerifyRows)
        throw std::invalid_argument("forward: logits of every row need all_logits past " + std::to_string(kVerifyRows) + " tokens");
    const Lane lone{&st, s, 0};
    find_arch(config_.arch)->forward(*this, st, std::span(&lone, 1), out);
}

void Model::forward_lanes(State& scratch, std::span<const Lane> lanes) const {
    int rows = 0;
    for (const Lane& l : lanes) {
        if (l.row0 != rows || l.s.T < 1 || l.st == &scratch || !l.st->tap_layers.empty())
            throw std::invalid_argument("forward_lanes: lanes must be consecutive rows of other states, without taps");
        // The token-wise ops read every row's id and position from the scratch's buffers.
        if (l.s.tokens != scratch.tokens + l.row0 || l.s.pos != scratch.pos + l.row0 || l.st->kv_type != lanes[0].st->kv_type)
            throw std::invalid_argument("forward_lanes: a lane's ids and positions must be its rows of the scratch's, its KV type the others'");
        rows += l.s.T;
    }
    if (lanes.empty() || rows > scratch.chunk || rows > kVerifyRows)
        throw std::invalid_argument("forward_lanes: " + std::to_string(rows) + " rows for a scratch of " + std::to_string(scratch.chunk));
    find_arch(config_.arch)->forward(*this, scratch, lanes, Output::last);
}

}  // namespace df::model
