// The DFlash block drafter against a scalar reference written from reference/drafters.md §1.2
// (double precision, the K/V cache rounded to f16 as the engine stores it): context rows through
// fc + hidden_norm only, k_norm and RoPE at each row's own position; the block bidirectional
// over the whole cache; slot j's logits for position start + j through the target's LM head.
// Also: the target's kept hidden states are the residual stream after the named layer (a model
// truncated to that layer ends with the same state), safetensors' checks, and config checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "backend/backend.h"
#include "common/gguf_edit.h"
#include "common/random_dflash.h"
#include "gguf/gguf.h"
#include "model/dflash.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "quant/dequant.h"
#include "quant/quantize.h"

namespace {

using namespace df;
using model::Dflash;
using model::SafeTensorData;
using model::SafeTensors;

constexpr const char* kTarget = "q3_4L_kmix";  // attention only, 4 layers, n_embd 256, vocab 1024

using test::DflashSpec;
using test::DflashWeights;
using test::dflash_config;
using test::random_dflash;

using Vec = std::vector<double>;

// y = W x for W [rows, cols] row-major.
Vec mul(const Vec& W, const Vec& x, size_t rows) {
    const size_t cols = x.size();
    Vec y(rows, 0);
    for (size_t r = 0; r < rows; ++r)
        for (size_t c = 0; c < cols; ++c) y[r] += W[r * cols + c] * x[c];
    return y;
}

Vec rmsnorm(const Vec& x, const Vec& w, double eps) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double r = 1 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * w[i];
    return y;
}

// Per head: RMSNorm with w, then rotate-half RoPE at pos.
void norm_rope_heads(Vec& x, int heads, int D, const Vec& w, double eps, int pos, double theta) {
    for (int h = 0; h < heads; ++h) {
        Vec head(x.begin() + h * D, x.begin() + (h + 1) * D);
        head = rmsnorm(head, w, eps);
        for (int i = 0; i < D / 2; ++i) {
            const double a = pos * std::pow(theta, -2.0 * i / D);
            const double x0 = head[static_cast<size_t>(i)], x1 = head[static_cast<size_t>(i + D / 2)];
            head[static_cast<size_t>(i)] = x0 * std::cos(a) - x1 * std::sin(a);
            head[static_cast<size_t>(i + D / 2)] = x0 * std::sin(a) + x1 * std::cos(a);
        }
        std::copy(head.begin(), head.end(), x.begin() + h * D);
    }
}

void to_f16(Vec& x) {
    for (double& v : x) v = quant::f16_to_f32(quant::f32_to_f16(static_cast<float>(v)));
}

Vec rows_of(const gguf::TensorInfo& t) {
    Vec out(static_cast<size_t>(t.elements()));
    std::vector<float> row(static_cast<size_t>(t.shape[0]));
    const size_t rb = t.bytes / static_cast<size_t>(t.rows());
    for (int64_t r = 0; r < t.rows(); ++r) {
        quant::dequantize_row(t.type, t.data + static_cast<size_t>(r) * rb, row.data(), t.shape[0]);
        for (int64_t c = 0; c < t.shape[0]; ++c) out[static_cast<size_t>(r * t.shape[0] + c)] = row[static_cast<size_t>(c)];
    }
    return out;
}

// The drafter's logits for slots 1..K-1 of a block after N context rows (features[t][tap][E]).
std::vector<Vec> reference(const DflashSpec& s, const DflashWeights& w, const gguf::File& target,
                           const std::vector<std::vector<Vec>>& features, int32_t last) {
    const auto& f = w.f;
    const int N = static_cast<int>(features.size()), K = s.K, D = s.D;
    const Vec embd = rows_of(*target.find_tensor("token_embd.weight"));
    const auto* out_t = target.find_tensor("output.weight");
    const Vec out = out_t ? rows_of(*out_t) : embd;
    const size_t E = static_cast<size_t>(s.E), V = embd.size() / E, kv = static_cast<size_t>(s.Hkv * D);
    // Context K/V per layer and row.
    std::vector<std::vector<Vec>> Kc(static_cast<size_t>(s.L)), Vc(static_cast<size_t>(s.L));
    for (int t = 0; t < N; ++t) {
        Vec ctx(E, 0);
        const Vec& fc = f.at("fc.weight");
        const size_t width = E * s.taps.size();
        for (size_t r = 0; r < E; ++r)
            for (size_t i = 0; i < s.taps.size(); ++i)
                for (size_t c = 0; c < E; ++c) ctx[r] += fc[r * width + i * E + c] * features[static_cast<size_t>(t)][i][c];
        ctx = rmsnorm(ctx, f.at("hidden_norm.weight"), s.eps);
        for (int l = 0; l < s.L; ++l) {
            const std::string p = "layers." + std::to_string(l) + ".";
            Vec k = mul(f.at(p + "self_attn.k_proj.weight"), ctx, kv), v = mul(f.at(p + "self_attn.v_proj.weight"), ctx, kv);
            norm_rope_heads(k, s.Hkv, D, f.at(p + "self_attn.k_norm.weight"), s.eps, t, s.theta);
            to_f16(k);
            to_f16(v);
            Kc[static_cast<size_t>(l)].push_back(k);
            Vc[static_cast<size_t>(l)].push_back(v);
        }
    }
    // The block.
    std::vector<Vec> x(static_cast<size_t>(K));
    for (int j = 0; j < K; ++j) {
        const size_t id = static_cast<size_t>(j == 0 ? last : s.mask);
        x[static_cast<size_t>(j)].assign(embd.begin() + static_cast<std::ptrdiff_t>(id * E), embd.begin() + static_cast<std::ptrdiff_t>((id + 1) * E));
    }
    for (int l = 0; l < s.L; ++l) {
        const std::string p = "layers." + std::to_string(l) + ".";
        std::vector<Vec> q(static_cast<size_t>(K)), k = Kc[static_cast<size_t>(l)], v = Vc[static_cast<size_t>(l)];
        for (int j = 0; j < K; ++j) {
            const Vec n = rmsnorm(x[static_cast<size_t>(j)], f.at(p + "input_layernorm.weight"), s.eps);
            q[static_cast<size_t>(j)] = mul(f.at(p + "self_attn.q_proj.weight"), n, static_cast<size_t>(s.Hq * D));
            norm_rope_heads(q[static_cast<size_t>(j)], s.Hq, D, f.at(p + "self_attn.q_norm.weight"), s.eps, N + j, s.theta);
            Vec kb = mul(f.at(p + "self_attn.k_proj.weight"), n, kv), vb = mul(f.at(p + "self_attn.v_proj.weight"), n, kv);
            norm_rope_heads(kb, s.Hkv, D, f.at(p + "self_attn.k_norm.weight"), s.eps, N + j, s.theta);
            to_f16(kb);
            to_f16(vb);
            k.push_back(kb);
            v.push_back(vb);
        }
        for (int j = 0; j < K; ++j) {
            Vec att(static_cast<size_t>(s.Hq * D), 0);
            for (int h = 0; h < s.Hq; ++h) {
                const int g = h / (s.Hq / s.Hkv);
                std::vector<double> sc(k.size());
                double mx = -1e300;
                for (size_t r = 0; r < k.size(); ++r) {  // every row: no mask
                    double d = 0;
                    for (int i = 0; i < D; ++i) d += q[static_cast<size_t>(j)][static_cast<size_t>(h * D + i)] * k[r][static_cast<size_t>(g * D + i)];
                    sc[r] = d / std::sqrt(double(D));
                    mx = std::max(mx, sc[r]);
                }
                double sum = 0;
                for (double& e : sc) sum += (e = std::exp(e - mx));
                for (size_t r = 0; r < k.size(); ++r)
                    for (int i = 0; i < D; ++i) att[static_cast<size_t>(h * D + i)] += sc[r] / sum * v[r][static_cast<size_t>(g * D + i)];
            }
            const Vec o = mul(f.at(p + "self_attn.o_proj.weight"), att, E);
            for (size_t i = 0; i < E; ++i) x[static_cast<size_t>(j)][i] += o[i];
        }
        for (int j = 0; j < K; ++j) {
            const Vec n = rmsnorm(x[static_cast<size_t>(j)], f.at(p + "post_attention_layernorm.weight"), s.eps);
            const Vec gt = mul(f.at(p + "mlp.gate_proj.weight"), n, static_cast<size_t>(s.F));
            const Vec up = mul(f.at(p + "mlp.up_proj.weight"), n, static_cast<size_t>(s.F));
            Vec a(static_cast<size_t>(s.F));
            for (size_t i = 0; i < a.size(); ++i) a[i] = gt[i] / (1 + std::exp(-gt[i])) * up[i];
            const Vec dn = mul(f.at(p + "mlp.down_proj.weight"), a, E);
            for (size_t i = 0; i < E; ++i) x[static_cast<size_t>(j)][i] += dn[i];
        }
    }
    std::vector<Vec> logits;
    for (int j = 1; j < K; ++j) logits.push_back(mul(out, rmsnorm(x[static_cast<size_t>(j)], f.at("norm.weight"), s.eps), V));
    return logits;
}

std::shared_ptr<Backend> cpu() {
    static std::shared_ptr<Backend> be = make_cpu_backend(2);
    return be;
}

// The matrices as Q8_0 (the default): the reference with the same quantized weights.
DflashWeights quantized(DflashWeights w) {
    for (auto& t : w.data) {
        if (t.shape.size() != 2) continue;
        auto& v = w.f.at(t.name);
        std::vector<float> row(static_cast<size_t>(t.shape[1])), back(row.size());
        std::vector<uint8_t> blocks(row.size() / 32 * 34);
        for (size_t r = 0; r < static_cast<size_t>(t.shape[0]); ++r) {
            for (size_t c = 0; c < row.size(); ++c) row[c] = static_cast<float>(v[r * row.size() + c]);
            quant::quantize_q8_0(row.data(), blocks.data(), static_cast<int64_t>(row.size()));
            quant::dequantize_row(quant::Type::Q8_0, blocks.data(), back.data(), static_cast<int64_t>(row.size()));
            for (size_t c = 0; c < row.size(); ++c) {
                // Round to nearest: within half a step (step = max |x| / 127) of the weight, plus
                // the step's own rounding to f16 times |q| <= 127 (2^-11 relative).
                const double amax = std::fabs(*std::max_element(row.begin() + static_cast<std::ptrdiff_t>(c / 32 * 32),
                                                                 row.begin() + static_cast<std::ptrdiff_t>(c / 32 * 32 + 32),
                                                                 [](float a, float b) { return std::fabs(a) < std::fabs(b); }));
                EXPECT_LE(std::fabs(back[c] - row[c]), amax / 127 * (0.5 + 127.0 / 2048) * 1.0001 + 1e-30);
                v[r * row.size() + c] = back[c];
            }
        }
    }
    return w;
}

class DflashWeightsAs : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Dflash, DflashWeightsAs, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? std::string("Q8_0") : std::string("AsStored"); });

TEST_P(DflashWeightsAs, DraftEqualsTheScalarReference) {
    const DflashSpec s;
    const bool q8 = GetParam();
    const DflashWeights stored = random_dflash(s, 7);
    const DflashWeights w = q8 ? quantized(stored) : stored;
    auto target = model::Model::load(test::golden_model(kTarget).string(), cpu());
    auto d = Dflash::from_parts(dflash_config(s), SafeTensors::from_bytes(model::safetensors_bytes(stored.data)), *target, q8);
    EXPECT_EQ(d->config().target_layers, s.taps);
    const int chunk = 16, N = 23, E = s.E, taps = static_cast<int>(s.taps.size());
    auto st = d->new_state(64, chunk);
    // Random context features, fed in chunks as a target's forwards would (13 rows, then 10).
    std::mt19937 rng(3);
    std::normal_distribution<double> normal(0, 1);
    std::vector<std::vector<Vec>> features(static_cast<size_t>(N), std::vector<Vec>(static_cast<size_t>(taps), Vec(static_cast<size_t>(E))));
    for (auto& row : features)
        for (auto& tap : row)
            for (double& v : tap) v = static_cast<float>(normal(rng));
    float* buf = static_cast<float*>(cpu()->alloc(sizeof(float) * static_cast<size_t>(taps * chunk * E), MemKind::scratch));
    for (const auto& [pos0, T] : std::vector<std::pair<int, int>>{{0, 13}, {13, 10}}) {
        for (int i = 0; i < taps; ++i)
            for (int t = 0; t < T; ++t)
                for (int c = 0; c < E; ++c)
                    buf[(i * chunk + t) * E + c] = static_cast<float>(features[static_cast<size_t>(pos0 + t)][static_cast<size_t>(i)][static_cast<size_t>(c)]);
        d->inject(*st, buf, chunk, T, pos0);
    }
    cpu()->release(buf);
    const int32_t last = 321;
    const auto guess = d->draft(*st, last, N);
    const auto got = d->logits(*st);
    const auto want = reference(s, w, target->file(), features, last);
    ASSERT_EQ(guess.size(), static_cast<size_t>(s.K - 1));
    const size_t V = want[0].size();
    for (size_t j = 0; j < want.size(); ++j) {
        double err = 0, ref = 0;
        size_t best = 0;
        for (size_t v = 0; v < V; ++v) {
            const double a = got[j * V + v], b = want[j][v];
            err += (a - b) * (a - b);
            ref += b * b;
            if (b > want[j][best]) best = v;
        }
        EXPECT_LT(err / ref, 1e-8) << "slot " << j + 1;
        double second = -1e300;
        for (size_t v = 0; v < V; ++v)
            if (v != best) second = std::max(second, want[j][v]);
        if (want[j][best] - second > 1e-3) {
            EXPECT_EQ(guess[j], static_cast<int32_t>(best)) << "slot " << j + 1;
        }
    }
}

// The state kept after layer l is what a model of layers 0..l ends with (the residual stream
// before the output norm): z-lab's taps are the output of 0-based layer l (drafters.md §3.5).
TEST(Dflash, KeptHiddenStatesAreTheOutputOfTheNamedLayer) {
    auto full = model::Model::load(test::golden_model(kTarget).string(), cpu());
    const int T = 9, E = full->config().n_embd;
    std::vector<int32_t> tokens(T), pos(T);
    for (int t = 0; t < T; ++t) tokens[static_cast<size_t>(t)] = 17 * t + 5, pos[static_cast<size_t>(t)] = t;
    auto run = [&](const model::Model& m, model::State& st) {
        cpu()->upload(st.tokens, tokens.data(), sizeof(int32_t) * T);
        cpu()->upload(st.pos, pos.data(), sizeof(int32_t) * T);
        Step s;
        s.T = T;
        s.tokens = st.tokens;
        s.pos = st.pos;
        s.max_ctx = st.ctx;
        m.forward(st, s, model::Output::none);
    };
    auto st = full->new_state(32, 16, KvType::f32, false);
    full->enable_taps(*st, {2, 0});
    run(*full, *st);
    for (const auto& [tap, layer] : std::vector<std::pair<int, int>>{{0, 2}, {1, 0}}) {
        const auto path = test::truncated_model(kTarget, layer + 1);
        auto part = model::Model::load(path.string(), cpu());
        auto pst = part->new_state(32, 16, KvType::f32, false);
        run(*part, *pst);
        EXPECT_EQ(0, std::memcmp(st->taps + tap * 16 * E, pst->h, sizeof(float) * T * E)) << "layer " << layer;
        part->free_state(*pst);
        std::filesystem::remove(path);
    }
    full->free_state(*st);
    EXPECT_THROW(full->enable_taps(*full->new_state(8, 8, KvType::f32, false), {4}), gguf::Error);
}

TEST(Dflash, ConfigAndTensorsAreChecked) {
    const DflashSpec s;
    const DflashWeights w = random_dflash(s, 1);
    auto target = model::Model::load(test::golden_model(kTarget).string(), cpu());
    auto error = [&](const std::string& config, const std::vector<SafeTensorData>& data) {
        try {
            Dflash::from_parts(config, SafeTensors::from_bytes(model::safetensors_bytes(data)), *target);
        } catch (const gguf::Error& e) {
            return std::string(e.what());
        }
        return std::string("(accepted)");
    };
    EXPECT_EQ(error(dflash_config(s), w.data), "(accepted)");
    EXPECT_NE(error(dflash_config(s, R"(, "time_embed_dim": 256)"), w.data).find("\"time_embed_dim\" is not known"), std::string::npos);
    DflashSpec wide = s;
    wide.E = 512;
    EXPECT_NE(error(dflash_config(wide), w.data).find("hidden_size 512 differs"), std::string::npos);
    DflashSpec far = s;
    far.taps = {0, 4};
    EXPECT_NE(error(dflash_config(far), w.data).find("target_layer_ids"), std::string::npos);
    auto missing = w.data;
    missing.erase(missing.begin() + 3);
    EXPECT_NE(error(dflash_config(s), missing).find("'layers.0.input_layernorm.weight' is missing"), std::string::npos);
    auto extra = w.data;
    extra.push_back({"t_embedder.mlp.0.weight", "BF16", {2}, std::vector<uint8_t>(4)});
    EXPECT_NE(error(dflash_config(s), extra).find("'t_embedder.mlp.0.weight' is not part of"), std::string::npos);
    auto reshaped = w.data;
    reshaped[0].shape = {s.E * 2, s.E};
    EXPECT_NE(error(dflash_config(s), reshaped).find("'fc.weight' has shape [512, 256]"), std::string::npos);
    // A hybrid target has no attention-only stack to tap.
    auto hybrid = model::Model::load(test::golden_model("q35_4L_iq2mix").string(), cpu());
    EXPECT_THROW(Dflash::from_parts(dflash_config(s), SafeTensors::from_bytes(model::safetensors_bytes(w.data)), *hybrid), gguf::Error);
}

TEST(SafeTensorsFile, RoundTripAndBadFiles) {
    const std::vector<SafeTensorData> data = {{"a", "BF16", {2, 3}, std::vector<uint8_t>(12, 1)},
                                              {"b", "F32", {4}, std::vector<uint8_t>(16, 2)}};
    const auto bytes = model::safetensors_bytes(data);
    auto st = SafeTensors::from_bytes(bytes);
    ASSERT_EQ(st->tensors().size(), 2u);
    ASSERT_NE(st->find("b"), nullptr);
    EXPECT_EQ(st->find("b")->shape, (std::vector<int64_t>{4}));
    EXPECT_EQ(st->find("b")->data[15], 2);
    EXPECT_EQ(st->find("a")->elements(), 6);
    EXPECT_EQ(st->find("nope"), nullptr);

    auto bad = [](std::vector<uint8_t> b) {
        try {
            SafeTensors::from_bytes(b, "x.safetensors");
        } catch (const gguf::Error& e) {
            return std::string(e.what());
        }
        return std::string("(accepted)");
    };
    EXPECT_NE(bad(std::vector<uint8_t>(bytes.begin(), bytes.end() - 1)).find("tensor 'b'"), std::string::npos) << "truncated";
    EXPECT_NE(bad({1, 2, 3}).find("shorter"), std::string::npos);
    auto huge = bytes;
    huge[5] = 0x7f;
    EXPECT_NE(bad(huge).find("header length"), std::string::npos);
    auto header = [](const std::string& h, size_t n_data) {
        std::vector<uint8_t> b(8 + h.size() + n_data);
        for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<uint8_t>(h.size() >> (8 * i));
        std::memcpy(b.data() + 8, h.data(), h.size());
        return b;
    };
    EXPECT_NE(bad(header("[1]", 0)).find("not a JSON object"), std::string::npos);
    EXPECT_NE(bad(header(R"({"t": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", 8)).find("I64 is not supported"), std::string::npos);
    EXPECT_NE(bad(header(R"({"t": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8)).find("need 12"), std::string::npos);
    EXPECT_NE(bad(header(R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}})", 8)).find("aligned"), std::string::npos);
    EXPECT_NE(bad(header(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "u": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8))
                  .find("share bytes"), std::string::npos);
    EXPECT_NE(bad(header(R"({"t": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}})", 0)).find("bad size"), std::string::npos);
    EXPECT_NE(bad(header(R"({"t": {"dtype": "F32"}})", 0)).find("needs dtype, shape and data_offsets"), std::string::npos);
    // A file on disk.
    const auto path = std::filesystem::temp_directory_path() / ("df_st_" + std::to_string(::getpid()) + ".safetensors");
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    EXPECT_EQ(SafeTensors::open(path.string())->tensors().size(), 2u);
    std::filesystem::resize_file(path, bytes.size() - 4);
    EXPECT_THROW(SafeTensors::open(path.string()), gguf::Error);
    std::filesystem::remove(path);
    EXPECT_THROW(SafeTensors::open(path.string()), gguf::Error);
}

}  // namespace
