// The Qwen3 family: `qwen35` (Gated DeltaNet + gated attention, 3:1) and `qwen3` (all
// attention) share one layer program; qwen3 is the case with no recurrent layers and no
// attention output gate. Math as llama.cpp runs it (reference/llamacpp.md §1.4, §2).
#include <cmath>
#include <vector>

#include "model/arch.h"

namespace df::model {
namespace {

std::string blk(int i, const char* name) { return "blk." + std::to_string(i) + "." + name; }

void visit(const ModelConfig& c, Weights& w, const TensorVisitor& fn) {
    const int64_t E = c.n_embd, V = c.n_vocab, F = c.n_ff, D = c.head_dim;
    const bool q35 = c.arch == "qwen35";
    fn({"token_embd.weight", {E, V}, TensorKind::matrix, false, &w.tok_embd});
    fn({"output_norm.weight", {E}, TensorKind::f32, false, &w.output_norm});
    fn({"output.weight", {E, V}, TensorKind::matrix, true, &w.output});
    w.layers.resize(c.n_layer);
    for (int i = 0; i < c.n_layer; ++i) {
        LayerWeights& l = w.layers[i];
        fn({blk(i, "attn_norm.weight"), {E}, TensorKind::f32, false, &l.attn_norm});
        fn({blk(i, q35 ? "post_attention_norm.weight" : "ffn_norm.weight"), {E}, TensorKind::f32, false, &l.ffn_norm});
        fn({blk(i, "ffn_gate.weight"), {E, F}, TensorKind::matrix, false, &l.ffn_gate});
        fn({blk(i, "ffn_up.weight"), {E, F}, TensorKind::matrix, false, &l.ffn_up});
        fn({blk(i, "ffn_down.weight"), {F, E}, TensorKind::matrix, false, &l.ffn_down});
        if (c.recurrent[i]) {
            const int64_t Dk = c.ssm_state, Hv = c.ssm_v_heads, C = c.ssm_channels();
            fn({blk(i, "attn_qkv.weight"), {E, C}, TensorKind::matrix, false, &l.ssm_qkv});
            fn({blk(i, "attn_gate.weight"), {E, Hv * Dk}, TensorKind::matrix, false, &l.ssm_gate});
            fn({blk(i, "ssm_alpha.weight"), {E, Hv}, TensorKind::matrix, false, &l.ssm_alpha});
            fn({blk(i, "ssm_beta.weight"), {E, Hv}, TensorKind::matrix, false, &l.ssm_beta});
            fn({blk(i, "ssm_conv1d.weight"), {c.ssm_conv, C}, TensorKind::f32, false, &l.ssm_conv});
            fn({blk(i, "ssm_dt.bias"), {Hv}, TensorKind::f32, false, &l.ssm_dt_bias});
            fn({blk(i, "ssm_a"), {Hv}, TensorKind::f32, false, &l.ssm_a});
            fn({blk(i, "ssm_norm.weight"), {Dk}, TensorKind::f32, false, &l.ssm_norm});
            fn({blk(i, "ssm_out.weight"), {Hv * Dk, E}, TensorKind::matrix, false, &l.ssm_out});
        } else {
            const int64_t q_rows = (c.attn_gated ? 2 : 1) * c.n_head * D;
            fn({blk(i, "attn_q.weight"), {E, q_rows}, TensorKind::matrix, false, &l.wq});
            fn({blk(i, "attn_k.weight"), {E, c.n_head_kv * D}, TensorKind::matrix, false, &l.wk});
            fn({blk(i, "attn_v.weight"), {E, c.n_head_kv * D}, TensorKind::matrix, false, &l.wv});
            fn({blk(i, "attn_output.weight"), {c.n_head * D, E}, TensorKind::matrix, false, &l.wo});
            fn({blk(i, "attn_q_norm.weight"), {D}, TensorKind::f32, false, &l.q_norm});
            fn({blk(i, "attn_k_norm.weight"), {D}, TensorKind::f32, false, &l.k_norm});
        }
    }
}

void fixup(const ModelConfig&, Weights& w) {
    if (!w.output.data) w.output = w.tok_embd;  // tied LM head
}

const float* f(const Weight& w) { return static_cast<const float*>(w.data); }

// Row r of a [T, width] scratch buffer.
template <class P>
P* row(P* base, int r, int64_t width) { return base + static_cast<int64_t>(r) * width; }

void attention_block(const Model& m, const LayerWeights& l, int il, State& st, std::span<const Lane> lanes, int T) {
    const ModelConfig& c = m.config();
    Backend& be = m.backend();
    const int D = c.head_dim, Hq = c.n_head, Hkv = c.n_head_kv;
    const int q_stride = c.attn_gated ? 2 * D : D;  // attn_q rows: [query | gate] per head
    const int q_row = Hq * q_stride;
    float* qg = st.big;
    float* k = st.small;
    float* v = st.small2;
    be.matmul(l.wq, st.x, T, qg);
    be.matmul(l.wk, st.x, T, k);
    be.matmul(l.wv, st.x, T, v);
    const RopeShape rope{c.n_rot, c.rope_base};
    const AttnShape a{Hq, Hkv, D, q_stride, q_row, 1.0f / std::sqrt(static_cast<float>(D))};
    // Each sequence's positions, cache and context (one lane: a lone forward's calls).
    std::vector<AttnLane> at;
    at.reserve(lanes.size());
    for (const Lane& ln : lanes) at.push_back({ln.st->k_cache[il], ln.st->v_cache[il], ln.s, ln.row0});
    be.attention_lanes(at, qg, k, v, f(l.q_norm), f(l.k_norm), c.eps, rope, lanes[0].st->kv_type, a, st.attn);
    if (c.attn_gated) be.sigmoid_mul(st.attn, Hq * D, qg + D, D, q_stride, q_row, T);
    be.matmul(l.wo, st.attn, T, st.h, /*accumulate=*/true);
}

void gdn_block(const Model& m, const LayerWeights& l, int il, State& st, std::span<const Lane> lanes, int T) {
    const ModelConfig& c = m.config();
    Backend& be = m.backend();
    const GdnShape g{c.ssm_k_heads, c.ssm_v_heads, c.ssm_state, c.ssm_conv};
    float* qkv = st.big;
    float* z = st.big2;
    float* alpha = st.small;
    float* beta = st.small2;
    be.matmul(l.ssm_qkv, st.x, T, qkv);
    be.matmul(l.ssm_gate, st.x, T, z);
    be.matmul(l.ssm_alpha, st.x, T, alpha);
    be.matmul(l.ssm_beta, st.x, T, beta);
    const int64_t C = g.channels(), inner = static_cast<int64_t>(g.v_heads) * g.head_dim;
    const GdnLayer w{f(l.ssm_conv), f(l.ssm_dt_bias), f(l.ssm_a), f(l.ssm_norm), nullptr, nullptr};
    // Each sequence's rows and recurrent state (one lane: a lone forward's gdn_mix).
    std::vector<GdnMixLane> mix;
    mix.reserve(lanes.size());
    for (const Lane& ln : lanes)
        mix.push_back({row(qkv, ln.row0, C), row(z, ln.row0, inner), row(alpha, ln.row0, g.v_heads),
                       row(beta, ln.row0, g.v_heads), ln.st->conv_state[il], ln.st->ssm_state[il],
                       row(st.attn, ln.row0, inner), ln.s.T});
    be.gdn_mix_lanes(mix, w, g, c.eps);
    be.matmul(l.ssm_out, st.attn, T, st.h, /*accumulate=*/true);
}

// st: the scratch (activations, logits); one lane over st itself is a lone forward, whose
// output `out` says which rows' logits (and an ArgmaxFeed) it leaves in st. Several lanes
// leave each one's last row in its own state (Model::forward_lanes).
void forward(const Model& m, State& st, std::span<const Lane> lanes, Output out) {
    const ModelConfig& c = m.config();
    const Weights& w = m.weights();
    Backend& be = m.backend();
    const bool lone = lanes.size() == 1 && lanes[0].st == &st;
    const int T = lanes.back().row0 + lanes.back().s.T, E = c.n_embd;
    Step rows = lanes[0].s;  // token-wise ops: every row's id (and position) from lane 0's start
    rows.T = T;
    be.embed(w.tok_embd, rows, st.h);
    for (int il = 0; il < c.n_layer; ++il) {
        const LayerWeights& l = w.layers[il];
        be.rmsnorm(st.h, E, f(l.attn_norm), T, E, c.eps, st.x, E);
        if (c.recurrent[il])
            gdn_block(m, l, il, st, lanes, T);
        else
            attention_block(m, l, il, st, lanes, T);
        be.rmsnorm(st.h, E, f(l.ffn_norm), T, E, c.eps, st.x, E);
        be.ffn_gate_up(l.ffn_gate, l.ffn_up, st.x, T, st.big, st.big2);
        be.matmul(l.ffn_down, st.big, T, st.h, /*accumulate=*/true);
        for (size_t i = 0; i < st.tap_layers.size(); ++i)  // a block drafter's features
            if (st.tap_layers[i] == il)
                be.copy(st.taps + static_cast<int64_t>(i) * st.chunk * E, st.h, sizeof(float) * static_cast<size_t>(T) * E);
    }
    if (out == Output::none) return;
    const int64_t V = c.n_vocab;
    if (!lone) {
        // Each lane's last row through the final norm and the LM head together, then its logits
        // and argmax into its own state.
        const int n = static_cast<int>(lanes.size());
        if (T == n)  // one row per lane (decode): the last rows are rows 0 .. n-1, one call
            be.rmsnorm(st.h, E, f(w.output_norm), n, E, c.eps, st.x, E);
        else
            for (int i = 0; i < n; ++i)
                be.rmsnorm(row(st.h, lanes[i].row0 + lanes[i].s.T - 1, E), E, f(w.output_norm), 1, E, c.eps, row(st.x, i, E), E);
        be.matmul(w.output, st.x, n, st.logits);
        for (int i = 0; i < n; ++i) {
            State& own = *lanes[i].st;
            be.copy(own.logits, row(st.logits, i, V), sizeof(float) * static_cast<size_t>(V));
            be.argmax(own.logits, 1, c.n_vocab, own.argmax);
        }
        return;
    }
    // Only the rows whose logits are wanted go through the final norm and the LM head.
    const int first = out == Output::last ? T - 1 : 0;
    const int n = T - first;
    be.rmsnorm(row(st.h, first, E), E, f(w.output_norm), n, E, c.eps, st.x, E);
    be.matmul(w.output, st.x, n, st.logits);
    const ArgmaxFeed feed{st.tokens, st.pos, T};  // the next step's inputs, for a greedy caller
    be.argmax(st.logits, n, c.n_vocab, st.argmax, &feed);
}

}  // namespace

// One entry per architecture name; qwen35 and qwen3 share the family's program.
extern const ArchEntry kQwen35 = {"qwen35", visit, fixup, forward};
extern const ArchEntry kQwen3 = {"qwen3", visit, fixup, forward};

}  // namespace df::model
