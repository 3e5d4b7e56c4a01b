// Whole models on the CUDA backend against llama.cpp's f32-twin golden logits: a chunked
// prompt pass (GEMM path), then token-by-token steps recorded once as a CUDA graph and replayed
// (matvec path), then the greedy continuation.
#include <algorithm>
#include <filesystem>
#include <optional>
#include <utility>
#include <regex>
#include <latch>
#include <thread>
#include <span>

#include <cstdlib>
#include <cstring>

#include "backend/cuda/kernels.h"
#include "diskformer/diskformer.h"
#include "diskformer/generate.h"
#include "common/golden.h"
#include "common/random_dflash.h"
#include "model/dflash.h"
#include "cuda_test_util.h"
#include "model/model.h"
#include "runtime/model_impl.h"
#include "runtime/session_impl.h"

namespace df::test {
namespace {

namespace fs = std::filesystem;

std::vector<int32_t> json_ints(const std::string& text, const std::string& key) {
    const auto at = text.find("\"" + key + "\"");
    if (at == std::string::npos) return {};
    const auto open = text.find('[', at), close = text.find(']', open);
    std::vector<int32_t> v;
    const std::string body = text.substr(open + 1, close - open - 1);
    const std::regex num("-?[0-9]+");
    for (auto it = std::sregex_iterator(body.begin(), body.end(), num); it != std::sregex_iterator(); ++it)
        v.push_back(std::stoi(it->str()));
    return v;
}

// Sum (a-b)^2 / sum b^2 of one row.
double nmse(const float* a, const float* b, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; ++i) {
        num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
        den += static_cast<double>(b[i]) * b[i];
    }
    return num / std::max(den, 1e-300);
}

int argmax_of(const float* x, int n) { return static_cast<int>(std::max_element(x, x + n) - x); }

std::vector<fs::path> golden_models() {
    std::vector<fs::path> v;
    for (const auto& e : fs::directory_iterator(golden_dir() / "models"))
        if (e.path().extension() == ".gguf") v.push_back(e.path());
    std::sort(v.begin(), v.end());
    return v;
}

// The prompt of a golden model's greedy reference, or nothing when it has none.
std::optional<std::vector<int32_t>> greedy_prompt(const fs::path& model_path) {
    const fs::path meta = model_path.parent_path() / (model_path.stem().string() + ".greedy_f32w.json");
    if (!fs::exists(meta)) return std::nullopt;
    const auto text = read_file(meta);
    return json_ints(std::string(text.begin(), text.end()), "prompt");
}

void upload_step(Backend& be, model::State& st, const std::vector<int32_t>& tokens, int pos0) {
    std::vector<int32_t> pos(tokens.size());
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = pos0 + static_cast<int>(i);
    be.upload(st.tokens, tokens.data(), tokens.size() * 4);
    be.upload(st.pos, pos.data(), pos.size() * 4);
}

// One token at position pos through the model (state of capacity max_ctx): eager, or as the
// decode graph keyed `key`, recorded on first use and replayed after. Without `upload` the step
// takes what the previous forward's argmax fed into st.tokens / st.pos (ArgmaxFeed).
void decode_step(const model::Model& m, Backend& gpu, model::State& st, uint64_t key, int32_t tok, int pos, int max_ctx,
                 bool graph, bool upload = true) {
    if (upload) upload_step(gpu, st, {tok}, pos);
    if (graph && gpu.replay(key)) return;
    const bool rec = graph && gpu.begin_capture(key);
    Step s;
    s.T = 1;
    s.tokens = st.tokens;
    s.pos = st.pos;
    s.pos0_hint = pos;
    s.max_ctx = max_ctx;
    m.forward(st, s, model::Output::last);
    if (rec) {
        gpu.end_capture();
        gpu.replay(key);
    }
}

TEST(CudaModel, GoldenF32TwinLogitsChunkedStepwiseAndGreedy) {
    DF_REQUIRE_CUDA();
    auto gpu = gpu_backend();
    for (const fs::path& path : golden_models()) {
        const std::string name = path.stem().string();
        SCOPED_TRACE(name);
        const fs::path dir = path.parent_path();
        if (!fs::exists(dir / (name + ".logits_f32w.f32"))) continue;
        const auto ref = read_f32(dir / (name + ".logits_f32w.f32"));
        const auto greedy_ref = read_f32(dir / (name + ".greedy_f32w_logits.f32"));
        const auto meta = read_file(dir / (name + ".greedy_f32w.json"));
        const std::string js(meta.begin(), meta.end());
        const auto prompt = json_ints(js, "prompt"), generated = json_ints(js, "generated");
        ASSERT_EQ(prompt.size(), 100u);

        const auto m = model::Model::load(path.string(), gpu);
        const int V = m->config().n_vocab, P = static_cast<int>(prompt.size());
        ASSERT_EQ(ref.size(), static_cast<size_t>(P) * V);

        // 1. The prompt in chunks of 37 (GEMM path, attention over a growing cache).
        {
            const int chunk = 37;
            auto st = m->new_state(512, chunk, KvType::f32, true);
            std::vector<float> logits(static_cast<size_t>(P) * V);
            for (int p0 = 0; p0 < P; p0 += chunk) {
                const int T = std::min(chunk, P - p0);
                upload_step(*gpu, *st, std::vector<int32_t>(prompt.begin() + p0, prompt.begin() + p0 + T), p0);
                Step s;
                s.T = T;
                s.tokens = st->tokens;
                s.pos = st->pos;
                s.pos0_hint = p0;
                s.max_ctx = 512;
                m->forward(*st, s, model::Output::all);
                gpu->download(logits.data() + static_cast<size_t>(p0) * V, st->logits, static_cast<size_t>(T) * V * 4);
            }
            double worst = 0;
            int top1 = 0;
            for (int t = 0; t < P; ++t) {
                worst = std::max(worst, nmse(&logits[static_cast<size_t>(t) * V], &ref[static_cast<size_t>(t) * V], V));
                top1 += argmax_of(&logits[static_cast<size_t>(t) * V], V) == argmax_of(&ref[static_cast<size_t>(t) * V], V);
            }
            std::printf("[cuda golden] %-18s chunked prompt: worst NMSE %.3g, top-1 %d/%d\n", name.c_str(), worst, top1, P);
            EXPECT_LE(worst, 1e-6) << "chunked prompt";
            EXPECT_EQ(top1, P);
            m->free_state(*st);
            // The prompt's matmuls chose the decode carveout (kernels.h) before any step is recorded.
            if (const char* e = std::getenv("DF_CUDA_CARVEOUT"); !e || std::strcmp(e, "auto") == 0) {
                EXPECT_GE(cuda::request_carveout(-1), 1);
            }
        }

        // 2. One token per step, recorded once as a graph and replayed; then greedy decoding.
        {
            auto st = m->new_state(512, 1, KvType::f32, false);
            const uint64_t key = reinterpret_cast<uintptr_t>(st.get());
            std::vector<float> logits(V);
            double worst = 0, worst_gen = 0;
            int top1 = 0, same_gen = 0;
            auto step = [&](int32_t tok, int pos) {
                decode_step(*m, *gpu, *st, key, tok, pos, 512, /*graph=*/true);
                gpu->download(logits.data(), st->logits, static_cast<size_t>(V) * 4);
                int32_t next = 0;
                gpu->download(&next, st->argmax, 4);
                return next;
            };
            int32_t next = 0;
            for (int t = 0; t < P; ++t) {
                next = step(prompt[t], t);
                worst = std::max(worst, nmse(logits.data(), &ref[static_cast<size_t>(t) * V], V));
                top1 += argmax_of(logits.data(), V) == argmax_of(&ref[static_cast<size_t>(t) * V], V);
            }
            for (size_t i = 0; i < generated.size(); ++i) {
                worst_gen = std::max(worst_gen, nmse(logits.data(), &greedy_ref[i * V], V));
                same_gen += next == generated[i];
                if (next != generated[i]) break;
                next = step(next, P + static_cast<int>(i));
            }
            gpu->drop_capture(key);
            std::printf("[cuda golden] %-18s stepwise (graph): worst NMSE %.3g, top-1 %d/%d, greedy %d/%zu (NMSE %.3g)\n",
                        name.c_str(), worst, top1, P, same_gen, generated.size(), worst_gen);
            EXPECT_LE(worst, 1e-8) << "token by token";
            EXPECT_EQ(top1, P);
            EXPECT_EQ(same_gen, static_cast<int>(generated.size())) << "greedy continuation";
            m->free_state(*st);
        }
    }
}

// The logits of `steps` one-token steps of the golden prompt: eager launches or one recorded
// graph replayed, with programmatic dependent launch on or off.
std::vector<float> decode_logits(const model::Model& m, Backend& gpu, const std::vector<int32_t>& prompt, int steps,
                                 bool graph, bool pdl) {
    cuda::set_pdl_enabled(pdl);
    const int V = m.config().n_vocab;
    auto st = m.new_state(512, 1, KvType::f16, false);
    const uint64_t key = reinterpret_cast<uintptr_t>(st.get());
    std::vector<float> out(static_cast<size_t>(steps) * V);
    for (int t = 0; t < steps; ++t) {
        decode_step(m, gpu, *st, key, prompt[static_cast<size_t>(t) % prompt.size()], t, 512, graph);
        gpu.download(out.data() + static_cast<size_t>(t) * V, st->logits, static_cast<size_t>(V) * 4);
    }
    if (graph) gpu.drop_capture(key);
    m.free_state(*st);
    cuda::set_pdl_enabled(true);
    return out;
}

TEST(CudaModel, GraphAndEagerDecodeBitIdenticalWithAndWithoutPdl) {
    DF_REQUIRE_CUDA();
    auto gpu = gpu_backend();
    const bool pdl_default = cuda::pdl_enabled();
    for (const fs::path& path : golden_models()) {
        const std::string name = path.stem().string();
        SCOPED_TRACE(name);
        const auto greedy = greedy_prompt(path);
        if (!greedy) continue;
        const std::vector<int32_t>& prompt = *greedy;
        ASSERT_FALSE(prompt.empty());
        const auto m = model::Model::load(path.string(), gpu);
        const int steps = 24;
        const auto base = decode_logits(*m, *gpu, prompt, steps, /*graph=*/false, /*pdl=*/false);
        for (const auto& [graph, pdl] : {std::pair{false, true}, std::pair{true, false}, std::pair{true, true}}) {
            const auto got = decode_logits(*m, *gpu, prompt, steps, graph, pdl);
            EXPECT_EQ(0, std::memcmp(got.data(), base.data(), base.size() * 4))
                << (graph ? "graph" : "eager") << (pdl ? " with" : " without") << " PDL differs from eager without PDL";
        }
        std::printf("[cuda golden] %-18s decode: eager/graph x PDL on/off bit-identical over %d steps\n", name.c_str(), steps);
    }
    cuda::set_pdl_enabled(pdl_default);
}

// Speculative verification on the GPU: a pass of up to 8 tokens (recorded as a graph per length,
// then replayed) keeps the longest agreeing prefix of a draft with the bits of one-token steps,
// on every golden model (a hybrid one restores its recurrent state and re-runs the kept tokens).
TEST(CudaModel, VerifyKeepsWhatGreedyStepsWouldProduce) {
    DF_REQUIRE_CUDA();
    for (const fs::path& path : golden_models()) {
        const auto greedy = greedy_prompt(path);
        if (!greedy) continue;
        SCOPED_TRACE(path.stem().string());
        diskformer::ModelOptions mo;
        mo.backend = diskformer::BackendKind::cuda;
        auto model = diskformer::Model::load(path.string(), mo);
        const std::vector<int32_t> prompt(greedy->begin(), greedy->begin() + std::min<size_t>(greedy->size(), 16));
        diskformer::Session steps(model, {.ctx = 512});
        steps.set_prompt(prompt);
        std::vector<int32_t> g{steps.argmax()};
        std::vector<std::vector<float>> logits;
        for (int i = 0; i < 32; ++i) {  // the passes below use g[0..26]
            g.push_back(steps.step(g.back()));
            logits.push_back(steps.logits());
        }
        const auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
            return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
        };
        diskformer::Session s(model, {.ctx = 512});
        s.set_prompt(prompt);
        ASSERT_EQ(s.max_draft(), 7);
        // Passes of 8, 3 (two kept of three), 5 and 1 + 7 tokens again (replays), each checked.
        size_t at = 0;  // g[at] is the next token to feed
        for (const auto& [len, right] : std::vector<std::pair<size_t, size_t>>{{7, 7}, {3, 2}, {4, 4}, {7, 0}, {7, 7}}) {
            std::vector<int32_t> draft(g.begin() + static_cast<std::ptrdiff_t>(at + 1), g.begin() + static_cast<std::ptrdiff_t>(at + 1 + len));
            if (right < len) draft[right] ^= 1;
            ASSERT_EQ(s.verify(g[at], draft), static_cast<int>(right)) << "at " << at;
            at += right + 1;
            ASSERT_EQ(s.argmax(), g[at]) << "at " << at;
            EXPECT_TRUE(same(s.logits(), logits[at - 1])) << "logits after g[" << at - 1 << "]";
        }
        EXPECT_EQ(s.step(g[at]), g[at + 1]);
        EXPECT_TRUE(same(s.logits(), logits[at]));
    }
}

// A draft model beside its target on one device (two sessions' graphs on one backend): the
// answer is the target's greedy answer; a target drafting for itself has every guess kept.
TEST(CudaModel, ADraftModelBesideItsTargetGivesTheTargetsAnswer) {
    DF_REQUIRE_CUDA();
    diskformer::ModelOptions mo;
    mo.backend = diskformer::BackendKind::cuda;
    const fs::path dir = golden_dir() / "models";
    for (const auto& [tname, dname] : std::vector<std::pair<std::string, std::string>>{
             {"q3_4L_kmix", "q35_4L_iq2mix"}, {"q35_4L_iq2mix", "q3_4L_kmix"}, {"q35_4L_iq2mix", "q35_4L_iq2mix"}}) {
        SCOPED_TRACE(tname + " by " + dname);
        auto target = diskformer::Model::load((dir / (tname + ".gguf")).string(), mo);
        auto drafter = diskformer::Model::load_beside((dir / (dname + ".gguf")).string(), *target);
        const auto prompt = target->tokenize("def main():\n    print(");
        diskformer::GenerateOptions o;
        o.max_tokens = 80;
        diskformer::Session plain(target, {.ctx = 512});
        const auto want = diskformer::generate(plain, prompt, o);
        o.draft = 7;
        o.draft_adaptive = false;
        diskformer::Session s(target, {.ctx = 512}), d(drafter, {.ctx = 512});
        o.drafter = &d;
        for (int round = 0; round < 2; ++round) {  // the second reuses both caches and replays graphs
            const auto got = diskformer::generate(s, prompt, o);
            EXPECT_EQ(got.tokens, want.tokens);
            EXPECT_GT(got.stats.drafted_tokens, 0);
            if (tname == dname) {
                EXPECT_EQ(got.stats.accepted_tokens, got.stats.drafted_tokens);
            }
        }
    }
}

// A sampled answer with drafts on the GPU (the rows of a verify pass copied to the host and
// sampled one by one): the same seed gives the same answer as plain sampled steps.
TEST(CudaModel, SampledDraftsGiveTheSameAnswer) {
    DF_REQUIRE_CUDA();
    diskformer::ModelOptions mo;
    mo.backend = diskformer::BackendKind::cuda;
    const fs::path dir = golden_dir() / "models";
    for (const std::string name : {"q3_4L_kmix", "q35_4L_iq2mix"}) {
        SCOPED_TRACE(name);
        auto target = diskformer::Model::load((dir / (name + ".gguf")).string(), mo);
        auto drafter = diskformer::Model::load_beside((dir / (name + ".gguf")).string(), *target);
        const auto prompt = target->tokenize("def main():\n    print(");
        diskformer::GenerateOptions o;
        o.max_tokens = 80;
        o.temperature = 0.7f;
        o.top_k = 3;
        o.repeat_penalty = 1.05f;
        o.seed = 11;
        diskformer::Session plain(target, {.ctx = 512});
        const auto want = diskformer::generate(plain, prompt, o);
        o.draft = 7;
        o.draft_adaptive = false;
        diskformer::Session s(target, {.ctx = 512}), d(drafter, {.ctx = 512});
        o.drafter = &d;
        const auto got = diskformer::generate(s, prompt, o);
        EXPECT_EQ(got.tokens, want.tokens);
        EXPECT_GT(got.stats.accepted_tokens, 0) << "of " << got.stats.drafted_tokens;
        EXPECT_LT(got.stats.accepted_tokens, got.stats.drafted_tokens);
    }
}

// The DFlash block drafter on the GPU: its logits are the CPU's (the block's 16 rows take the
// GEMM path, whose activations are rounded: DESIGN.md, numerics) for context fed in chunks, and
// with it attached to a session, generation keeps the target's answer through graph-recorded
// verify passes that also keep the hidden states.
TEST(CudaModel, DflashDrafterMatchesTheCpuAndKeepsTheAnswer) {
    DF_REQUIRE_CUDA();
    const DflashSpec spec;
    const auto w = random_dflash(spec, 21);
    const auto path = golden_dir() / "models" / "q3_4L_kmix.gguf";
    std::vector<std::vector<float>> logits;
    for (const auto& be : {std::shared_ptr<Backend>(make_cpu_backend(2)), gpu_backend()}) {
        auto target = model::Model::load(path.string(), be);
        auto d = model::Dflash::from_parts(dflash_config(spec), model::SafeTensors::from_bytes(model::safetensors_bytes(w.data)), *target, /*q8_0=*/false);
        const int chunk = 16, E = spec.E, taps = static_cast<int>(spec.taps.size());
        auto st = d->new_state(128, chunk);
        std::vector<float> feats(static_cast<size_t>(taps * chunk * E));
        float* buf = static_cast<float*>(be->alloc(sizeof(float) * feats.size(), MemKind::scratch));
        for (int c = 0; c < 3; ++c) {  // 3 chunks of 16 rows
            for (size_t i = 0; i < feats.size(); ++i) feats[i] = std::sin(0.37f * static_cast<float>(i + 1000 * c));
            be->upload(buf, feats.data(), sizeof(float) * feats.size());
            d->inject(*st, buf, chunk, chunk, c * chunk);
        }
        d->draft(*st, 42, 3 * chunk);
        logits.push_back(d->logits(*st));
        be->release(buf);
    }
    const int V = static_cast<int>(logits[0].size()) / (spec.K - 1);
    for (int j = 0; j < spec.K - 1; ++j)
        EXPECT_LT(nmse(logits[1].data() + j * V, logits[0].data() + j * V, V), 1e-4) << "slot " << j + 1;

    diskformer::ModelOptions mo;
    mo.backend = diskformer::BackendKind::cuda;
    auto target = diskformer::Model::load(path.string(), mo);
    const auto dir = write_dflash_dir(spec, 22);
    const auto prompt = target->tokenize("def main():\n    print(");
    diskformer::GenerateOptions o;
    o.max_tokens = 80;
    diskformer::Session plain(target, {.ctx = 512});
    const auto want = diskformer::generate(plain, prompt, o);
    diskformer::Session s(target, {.ctx = 512});
    diskformer::BlockDrafter drafter(dir.string(), s);
    o.draft = 7;
    o.draft_adaptive = false;
    o.block_drafter = &drafter;
    for (int round = 0; round < 2; ++round) {
        const auto got = diskformer::generate(s, prompt, o);
        EXPECT_EQ(got.tokens, want.tokens);
        EXPECT_GT(got.stats.drafted_tokens, 0);
    }
    fs::remove_all(dir);
}

// A hybrid model's session resumes from a checkpoint of its recurrent state (device-to-device
// copies) with the bits of a run cut at the same places, after graph-recorded decode steps
// moved the state on (Session::checkpoint).
TEST(CudaModel, CheckpointResumesWithTheBitsOfAnUnbrokenRun) {
    DF_REQUIRE_CUDA();
    int ran = 0;
    for (const fs::path& path : golden_models()) {
        const auto greedy = greedy_prompt(path);
        if (!greedy || greedy->size() < 8) continue;
        diskformer::ModelOptions mo;
        mo.backend = diskformer::BackendKind::cuda;
        auto model = diskformer::Model::load(path.string(), mo);
        if (model->info().arch != "qwen35") continue;
        SCOPED_TRACE(path.stem().string());
        ++ran;
        const std::vector<int32_t>& p = *greedy;
        const size_t n = p.size(), c1 = n / 2, c2 = n - 1;
        const auto bits_equal = [](const std::vector<float>& a, const std::vector<float>& b) {
            return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
        };
        diskformer::Session s(model, {.ctx = 512});
        s.set_prompt(std::span(p).first(c1));
        ASSERT_TRUE(s.checkpoint());
        s.append(std::span(p).subspan(c1, c2 - c1));
        ASSERT_TRUE(s.checkpoint());
        s.append(std::span(p).subspan(c2));
        const auto whole = s.logits();
        int32_t t = s.argmax();
        for (int i = 0; i < 6; ++i) t = s.step(t);
        EXPECT_EQ(s.set_prompt(p), static_cast<int>(c2));
        EXPECT_TRUE(bits_equal(s.logits(), whole)) << "the same prompt again";
        std::vector<int32_t> other(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(c1 + 1));
        other.push_back(p[0]);
        other.push_back(p[1]);
        EXPECT_EQ(s.set_prompt(other), static_cast<int>(c1));
        diskformer::Session fresh(model, {.ctx = 512});
        fresh.set_prompt(std::span(other).first(c1));
        fresh.append(std::span(other).subspan(c1));
        EXPECT_TRUE(bits_equal(s.logits(), fresh.logits())) << "departing between the checkpoints";
        // Decode goes on from the restored state as from the fresh one (replayed graphs).
        int32_t a = s.argmax(), b = fresh.argmax();
        for (int i = 0; i < 8; ++i) {
            ASSERT_EQ(a, b) << "step " << i;
            a = s.step(a);
            b = fresh.step(b);
        }
        EXPECT_TRUE(bits_equal(s.logits(), fresh.logits()));
    }
    if (!ran) GTEST_SKIP() << "no qwen35 golden model with a greedy prompt";
}

// A greedy continuation whose steps take their token and position from the previous step's
// argmax (no upload) equals one whose steps upload them, bit for bit, recorded as a graph or
// launched eagerly (the embedding kernel then waits for the argmax without PDL); the argmax is
// read in place from host-visible memory.
TEST(CudaModel, ArgmaxFeedsTheNextDecodeStep) {
    DF_REQUIRE_CUDA();
    auto gpu = gpu_backend();
    for (const fs::path& path : golden_models()) {
        const std::string name = path.stem().string();
        SCOPED_TRACE(name);
        const auto greedy = greedy_prompt(path);
        if (!greedy) continue;
        const std::vector<int32_t>& prompt = *greedy;
        ASSERT_FALSE(prompt.empty());
        const auto m = model::Model::load(path.string(), gpu);
        const int V = m->config().n_vocab, P = 12, G = 20;
        for (const bool graph : {true, false}) {
            std::vector<float> want, got;
            std::vector<int32_t> want_ids, got_ids;
            for (const bool feed : {false, true}) {
                auto st = m->new_state(512, 1, KvType::f16, false);
                const uint64_t key = reinterpret_cast<uintptr_t>(st.get());
                auto& logits = feed ? got : want;
                auto& ids = feed ? got_ids : want_ids;
                int32_t next = 0;
                for (int t = 0; t < P + G; ++t) {
                    const bool fed = feed && t >= P;
                    decode_step(*m, *gpu, *st, key, t < P ? prompt[static_cast<size_t>(t)] : next, t, 512, graph, !fed);
                    gpu->synchronize();
                    next = st->argmax[0];  // host-visible
                    int32_t copied = -1;
                    gpu->download(&copied, st->argmax, 4);
                    EXPECT_EQ(copied, next);
                    std::vector<float> row(V);
                    gpu->download(row.data(), st->logits, static_cast<size_t>(V) * 4);
                    EXPECT_EQ(next, argmax_of(row.data(), V)) << "step " << t;
                    logits.insert(logits.end(), row.begin(), row.end());
                    ids.push_back(next);
                }
                if (graph) gpu->drop_capture(key);
                m->free_state(*st);
            }
            EXPECT_EQ(got_ids, want_ids) << (graph ? "graph" : "eager");
            EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4)) << (graph ? "graph" : "eager");
        }
        std::printf("[cuda golden] %-18s decode: %d steps fed by the argmax equal uploaded ones (graph, eager)\n",
                    name.c_str(), G);
    }
}

// Continuous batching on the GPU: sessions at different positions stepping together in passes
// of 2 .. 8 lanes (Model::forward_lanes) get the bits of lone steps (graph replays), with the
// batched passes unrecorded (DF_BATCH_GRAPHS=0) and recorded as graphs (the default: a set of
// lanes that steps together again replays its pass); and generations from several threads at once keep each
// one's answer.
TEST(CudaModel, BatchedStepsEqualLoneSteps) {
    DF_REQUIRE_CUDA();
    const char* const texts[] = {"The quick brown fox jumps over", "Once upon a time, in a land far away, there lived a",
                                 "1, 2, 3, 4,", "def main():\n    print(", "x", "Q: What is the capital of France?\nA:",
                                 "In 1905 Einstein published four papers that", "Le soleil se leve a l'est et"};
    const auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
        return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    for (const bool graphs : {false, true}) {
        if (graphs)
            unsetenv("DF_BATCH_GRAPHS");
        else
            setenv("DF_BATCH_GRAPHS", "0", 1);
        for (const fs::path& path : golden_models()) {
            SCOPED_TRACE(path.stem().string() + (graphs ? " (batched passes as graphs)" : ""));
            diskformer::ModelOptions mo;
            mo.backend = diskformer::BackendKind::cuda;
            auto model = diskformer::Model::load(path.string(), mo);  // the engine reads DF_BATCH_GRAPHS here
            constexpr int kN = 8;
            std::vector<std::unique_ptr<diskformer::Session>> batched, alone;
            std::vector<int32_t> next(kN);
            for (int i = 0; i < kN; ++i) {
                const auto prompt = model->tokenize(texts[i]);
                for (auto* v : {&batched, &alone}) {
                    v->push_back(std::make_unique<diskformer::Session>(model, diskformer::SessionOptions{.ctx = 256}));
                    v->back()->append(prompt);
                }
                next[i] = alone.back()->argmax();
            }
            // Steps 0..11: a different set each pass; 12..19: lanes 0..3, then 20..27 all eight,
            // the same set pass after pass (recorded on its second pass, replayed after).
            for (int step = 0; step < 28; ++step) {
                const int n = step < 12 ? 2 + step % (kN - 1) : step < 20 ? 4 : kN;
                const int first = step < 12 ? step % kN : 0;
                std::vector<diskformer::Engine::Step> steps(n);
                std::vector<diskformer::Engine::Step*> batch;
                for (int k = 0; k < n; ++k) {
                    steps[k].session = &batched[(first + k) % kN]->impl();
                    steps[k].token = next[(first + k) % kN];
                    batch.push_back(&steps[k]);
                }
                {
                    diskformer::Engine::Lock hold(*model->impl().engine);  // as Engine::step holds it
                    diskformer::Session::Impl::run_steps(batch);
                }
                for (int k = 0; k < n; ++k) {
                    const int i = (first + k) % kN;
                    const int32_t want = alone[i]->step(next[i]);
                    ASSERT_EQ(batched[i]->argmax(), want) << "step " << step << " session " << i;
                    ASSERT_TRUE(same(batched[i]->logits(), alone[i]->logits())) << "step " << step << " session " << i;
                    next[i] = want;
                }
            }
            // Eight greedy generations from eight threads against the same requests one by one.
            std::vector<std::vector<int32_t>> want(kN), got(kN);
            for (int i = 0; i < kN; ++i) {
                diskformer::GenerateOptions o;
                o.max_tokens = 20 + 2 * i;
                diskformer::Session s(model, {.ctx = 256});
                want[i] = diskformer::generate(s, model->tokenize(texts[i]), o).tokens;
            }
            // Whether the threads' steps meet in a pass is up to timing (a tiny model's whole
            // generation can end before another thread starts): they start together, and a round
            // whose generations never met is run again (each round's answers checked).
            const auto before = model->batch_stats();
            for (int round = 0; round < 5 && model->batch_stats().passes == before.passes; ++round) {
                std::latch start(kN);
                std::vector<std::thread> threads;
                for (int i = 0; i < kN; ++i)
                    threads.emplace_back([&, i] {
                        diskformer::GenerateOptions o;
                        o.max_tokens = 20 + 2 * i;
                        diskformer::Session s(model, {.ctx = 256});
                        const auto prompt = model->tokenize(texts[i]);
                        start.arrive_and_wait();
                        got[i] = diskformer::generate(s, prompt, o).tokens;
                    });
                for (auto& t : threads) t.join();
                for (int i = 0; i < kN; ++i) EXPECT_EQ(got[i], want[i]) << "request " << i << " round " << round;
            }
            EXPECT_GT(model->batch_stats().passes, before.passes);
        }
    }
    unsetenv("DF_BATCH_GRAPHS");
}

}  // namespace
}  // namespace df::test
