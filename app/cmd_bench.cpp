// diskformer bench: load time, prefill and decode speed, bytes per decoded token and the
// bandwidth they imply against a measured floor, peak memory by kind. Random token ids; a
// warm-up pass first; the median of --reps runs with their min and max.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cli_common.h"
#include "diskformer/generate.h"
#include "commands.h"
#include "runtime/bench.h"

namespace {

struct BenchArgs {
    ModelArgs model;
    std::vector<int> prompts{512};
    int n_gen = 128;
    int reps = 3;
    double bw = 0;  // GB/s; 0 = measure
    bool json = false;
    bool ctx_given = false;
    std::vector<int> verify;  // verify pass lengths to time (speculative decoding's cost)
    std::string dflash;       // a DFlash drafter to time (a draft + a verify pass of 8)
    std::vector<int> parallel;  // concurrent generations to time (continuous batching)
};

struct Spread {
    double median = 0, min = 0, max = 0;
};

Spread spread(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return {n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v.front(), v.back()};
}

std::vector<int32_t> random_ids(int n, int n_vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> pick(0, n_vocab - 1);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (auto& id : ids) id = pick(rng);
    return ids;
}

double mib(size_t b) { return static_cast<double>(b) / (1 << 20); }

void run(const BenchArgs& a) {
    if (a.prompts.empty()) throw diskformer::Error("bench: -p needs at least one prompt length");
    for (int p : a.prompts)
        if (p <= 0) throw diskformer::Error("bench: prompt lengths must be positive, got " + std::to_string(p));
    auto model = diskformer::Model::load(a.model.path, a.model.model_options());
    const auto& info = model->info();

    // Decode runs after the first prompt length; the context holds the longest run.
    const int decode_prompt = a.prompts.front();
    const int need = std::max(*std::max_element(a.prompts.begin(), a.prompts.end()), decode_prompt + a.n_gen) + 1;
    auto so = a.model.session_options();
    so.ctx = a.ctx_given ? std::max(so.ctx, need) : need;
    diskformer::Session s(model, so);
    if (s.n_ctx() < need)
        throw diskformer::Error("bench: the model's context of " + std::to_string(s.n_ctx()) + " tokens is below the " +
                                std::to_string(need) + " this run needs");

    // Warm-up: first-touch of weights and buffers, thread start-up, CUDA graph capture.
    {
        const auto ids = random_ids(std::min(decode_prompt, 64), info.n_vocab, 1);
        s.append(ids);
        int32_t t = s.argmax();
        for (int i = 0; i < std::min(a.n_gen, 4); ++i) t = s.step(t);
    }

    nlohmann::json prefill = nlohmann::json::array();
    std::vector<Spread> prefill_spreads;
    for (int p : a.prompts) {
        const auto ids = random_ids(p, info.n_vocab, 1000u + static_cast<uint32_t>(p));
        std::vector<double> rates;
        for (int r = 0; r < a.reps; ++r) {
            s.reset();
            s.reset_stats();
            s.append(ids);
            rates.push_back(s.stats().prefill_tok_s());
        }
        const Spread sp = spread(rates);
        prefill_spreads.push_back(sp);
        prefill.push_back({{"tokens", p}, {"tok_s_median", sp.median}, {"min", sp.min}, {"max", sp.max}});
    }

    // decode_rates: the session's own count (from each step's inputs to its logits); wall_rates:
    // the caller's loop, each token's id read back too (what a generation loop sees).
    std::vector<double> decode_rates, wall_rates;
    std::vector<int32_t> greedy;  // the decoded continuation, for the verify passes
    const auto ids = random_ids(decode_prompt, info.n_vocab, 7);
    if (a.n_gen > 0) {
        for (int r = 0; r < a.reps; ++r) {
            s.reset();
            s.append(ids);
            s.reset_stats();
            int32_t t = s.argmax();
            greedy.assign(1, t);
            const auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < a.n_gen; ++i) greedy.push_back(t = s.step(t));
            const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            decode_rates.push_back(s.stats().decode_tok_s());
            wall_rates.push_back(sec > 0 ? a.n_gen / sec : 0);
        }
    }

    // Verify passes of T tokens fed the decoded continuation itself, so every draft is kept:
    // what a pass costs against a one-token step, the break-even for speculative decoding. A
    // draft token that is not kept means a pass disagreed with the steps (not lossless): an error.
    nlohmann::json verify = nlohmann::json::array();
    std::vector<std::string> verify_lines;
    const double step_ms = decode_rates.empty() ? 0 : 1e3 / spread(decode_rates).median;
    for (int T : a.verify) {
        if (T < 2 || T - 1 > s.max_draft())
            throw diskformer::Error("bench: --verify lengths must be 2.." + std::to_string(s.max_draft() + 1));
        if (greedy.size() < static_cast<size_t>(2 * T)) throw diskformer::Error("bench: --verify needs -n of at least 2 passes");
        std::vector<double> pass_ms;
        for (int r = 0; r < a.reps; ++r) {
            s.reset();
            s.append(ids);
            int passes = 0;
            const auto t0 = std::chrono::steady_clock::now();
            for (size_t at = 0; at + static_cast<size_t>(T) < greedy.size(); at += static_cast<size_t>(T), ++passes) {
                const auto draft = std::span(greedy).subspan(at + 1, static_cast<size_t>(T) - 1);
                if (s.verify(greedy[at], draft) != T - 1)
                    throw diskformer::Error("bench: a verify pass of " + std::to_string(T) + " tokens at " + std::to_string(at) +
                                            " disagreed with one-token steps");
            }
            pass_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / passes);
        }
        const double ms = spread(pass_ms).median;
        verify.push_back({{"tokens", T}, {"ms_per_pass", ms}, {"tok_s_all_kept", 1e3 * T / ms}, {"steps_per_pass", step_ms > 0 ? ms / step_ms : 0}});
        char line[160];
        std::snprintf(line, sizeof line, "verify   %5d tokens  %9.2f tok/s  when every draft is kept (%.2f ms per pass = %.2f steps)",
                      T, 1e3 * T / ms, ms, step_ms > 0 ? ms / step_ms : 0);
        verify_lines.push_back(line);
    }
    // DFlash: a round is one drafter pass and one verify pass of 8, fed the decoded tokens (every
    // draft kept, whatever the drafter guessed): its cost in steps is the break-even.
    nlohmann::json dflash;
    std::string dflash_line;
    if (!a.dflash.empty()) {
        if (greedy.size() < 17) throw diskformer::Error("bench: --dflash needs -n of at least 16");
        diskformer::BlockDrafter drafter(a.dflash, s);
        std::vector<double> draft_ms, round_ms;
        for (int r = -1; r < a.reps; ++r) {  // r = -1: a warm-up (the verify graphs are recorded again)
            s.reset();
            s.append(ids);
            double drafting = 0;
            int rounds = 0;
            const auto t0 = std::chrono::steady_clock::now();
            for (size_t at = 0; at + 8 < greedy.size(); at += 8, ++rounds) {
                const auto d0 = std::chrono::steady_clock::now();
                (void)drafter.draft(greedy[at], 7);
                drafting += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - d0).count();
                if (s.verify(greedy[at], std::span(greedy).subspan(at + 1, 7)) != 7)
                    throw diskformer::Error("bench: a verify pass disagreed with one-token steps");
            }
            if (r < 0) continue;
            draft_ms.push_back(drafting / rounds);
            round_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / rounds);
        }
        const double dm = spread(draft_ms).median, rm = spread(round_ms).median;
        const double steps = step_ms > 0 ? rm / step_ms : 0;
        dflash = {{"drafter", a.dflash}, {"weight_bytes", drafter.weight_bytes()}, {"ms_per_draft", dm},
                  {"ms_per_round", rm}, {"steps_per_round", steps}, {"tok_s_all_kept", 8e3 / rm}};
        char line[200];
        std::snprintf(line, sizeof line,
                      "dflash   %.2f ms per draft, %.2f ms per round of 8 (= %.2f steps: pays when a round keeps more than %.1f "
                      "drafts); %.1f tok/s when all are kept",
                      dm, rm, steps, std::max(0.0, steps - 1), 8e3 / rm);
        dflash_line = line;
    }
    // Continuous batching: n greedy generations of -n tokens at once, one thread each, on
    // sessions holding prompts of the decode run's length; their steps share passes.
    nlohmann::json parallel = nlohmann::json::array();
    std::vector<std::string> parallel_lines;
    for (int n : a.parallel) {
        if (n < 2 || n > 64) throw diskformer::Error("bench: --parallel counts must be 2..64, got " + std::to_string(n));
        if (a.n_gen < 2) throw diskformer::Error("bench: --parallel needs -n of at least 2");
        auto po = so;
        po.chunk = std::min(so.chunk > 0 ? so.chunk : 512, 512);  // prefill speed is not timed here: small scratch
        std::vector<std::unique_ptr<diskformer::Session>> ss;
        std::vector<std::vector<int32_t>> prompts;
        for (int i = 0; i < n; ++i) {
            ss.push_back(std::make_unique<diskformer::Session>(model, po));
            prompts.push_back(random_ids(decode_prompt, info.n_vocab, 5000u + static_cast<uint32_t>(i)));
        }
        diskformer::GenerateOptions go;
        go.max_tokens = a.n_gen + 1;  // the first token comes from the prompt's logits: n_gen passes
        std::vector<double> totals, per_stream;
        uint64_t passes = 0, shared_steps = 0, lone_steps = 0;  // over the measured reps
        for (int r = -1; r < a.reps; ++r) {  // r = -1: a warm-up
            for (int i = 0; i < n; ++i) ss[i]->set_prompt(prompts[i]);  // generate() then evaluates none of it
            const auto before = model->batch_stats();
            std::vector<diskformer::GenerateResult> res(static_cast<size_t>(n));
            const auto t0 = std::chrono::steady_clock::now();
            std::vector<std::thread> threads;
            for (int i = 0; i < n; ++i)
                threads.emplace_back([&, i] { res[i] = diskformer::generate(*ss[i], prompts[i], go); });
            for (auto& t : threads) t.join();
            const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (r < 0) continue;
            const auto after = model->batch_stats();
            int64_t tokens = 0;
            std::vector<double> rates;
            for (const auto& g : res) {
                tokens += std::max<int64_t>(0, static_cast<int64_t>(g.tokens.size()) - 1);
                rates.push_back(g.stats.decode_tok_s());
            }
            totals.push_back(sec > 0 ? tokens / sec : 0);
            per_stream.push_back(spread(rates).median);
            passes += after.passes - before.passes;
            shared_steps += after.batched_steps - before.batched_steps;
            lone_steps += after.lone_steps - before.lone_steps;
        }
        const Spread tot = spread(totals), per = spread(per_stream);
        // How full the passes were: a loop late for a pass takes the next one (runtime/engine.cpp).
        const double steps = static_cast<double>(shared_steps + lone_steps);
        const double share = steps > 0 ? static_cast<double>(shared_steps) / steps : 0;
        const double per_pass = passes + lone_steps > 0 ? steps / static_cast<double>(passes + lone_steps) : 0;
        parallel.push_back({{"streams", n}, {"tok_s_total", tot.median}, {"min", tot.min}, {"max", tot.max},
                            {"tok_s_per_stream", per.median}, {"batched_share", share}, {"steps_per_pass", per_pass}});
        char line[240];
        std::snprintf(line, sizeof line,
                      "parallel %5d streams %9.2f tok/s in all  [%.2f, %.2f]  %.2f tok/s each, %.0f %% of steps in shared "
                      "passes, %.2f steps per pass",
                      n, tot.median, tot.min, tot.max, per.median, 100 * share, per_pass);
        parallel_lines.push_back(line);
    }
    const diskformer::Stats last = s.stats();  // memory by kind (the session's peak: it never shrinks)
    const Spread dec = decode_rates.empty() ? Spread{} : spread(decode_rates);
    const Spread wall = wall_rates.empty() ? Spread{} : spread(wall_rates);

    // Traffic at the mean depth of the decode run.
    const auto kv_type = so.kv_type;
    const auto traffic = diskformer::bench::decode_traffic(*model, decode_prompt + a.n_gen / 2, kv_type);
    const double gb_s = traffic.total() * dec.median / 1e9;
    // The floor: --bw, else a measured copy on the memory the weights live in. A host copy says
    // nothing about a GPU, so the CUDA backend reports no floor until it has its own copy test.
    double floor = a.bw;
    std::string floor_source = "--bw";
    if (a.bw <= 0 && info.backend == "cpu") {
        floor = diskformer::bench::host_copy_gbs(a.model.threads);
        floor_source = "host memcpy (read + write)";
    } else if (a.bw <= 0) {
        floor = 0;
        floor_source = "none: pass --bw GB/s for " + info.backend;
    }
    const int threads = a.model.threads > 0 ? a.model.threads : static_cast<int>(std::thread::hardware_concurrency());
    // Weights held by the backend over the load time (file to memory; on CUDA, through pinned buffers).
    const double load_gb_s = info.load_ms > 0 ? static_cast<double>(last.weight_bytes) / (info.load_ms * 1e6) : 0;

    if (a.json) {
        nlohmann::json j = {
            {"model", a.model.path},
            {"name", info.name},
            {"arch", info.arch},
            {"backend", info.backend},
            {"threads", threads},
            {"reps", a.reps},
            {"load_ms", info.load_ms},
            {"load_gb_s", load_gb_s},
            {"prefill", prefill},
            {"decode",
             {{"tokens", a.n_gen},
              {"prompt", decode_prompt},
              {"tok_s", dec.median},
              {"ms_per_token", dec.median > 0 ? 1e3 / dec.median : 0},
              {"min", dec.min},
              {"max", dec.max},
              {"wall_tok_s", wall.median}}},
            {"verify", verify},
            {"dflash", dflash},
            {"parallel", parallel},
            {"bytes_per_token", traffic.total()},
            {"bytes_per_token_detail", {{"weights", traffic.weights}, {"state", traffic.state}, {"kv", traffic.kv}}},
            {"gb_s", gb_s},
            {"floor_gb_s", floor},
            {"floor_source", floor_source},
            {"pct_of_floor", floor > 0 ? 100 * gb_s / floor : 0},
            {"memory",
             {{"weights", last.weight_bytes},
              {"kv", last.kv_bytes},
              {"state", last.state_bytes},
              {"scratch", last.scratch_bytes}}},
        };
        std::printf("%s\n", j.dump(2).c_str());
        return;
    }
    std::printf("model    %s (%s, %s, %d layers, vocab %d)\n", a.model.path.c_str(), info.name.c_str(),
                info.arch.c_str(), info.n_layer, info.n_vocab);
    std::printf("backend  %s, %d threads, %d reps (median [min, max])\n", info.backend.c_str(), threads, a.reps);
    std::printf("load     %.0f ms (%.2f GB/s of weights)\n", info.load_ms, load_gb_s);
    for (size_t i = 0; i < a.prompts.size(); ++i) {
        const auto& sp = prefill_spreads[i];
        std::printf("prefill  %5d tokens  %9.1f tok/s  [%.1f, %.1f]\n", a.prompts[i], sp.median, sp.min, sp.max);
    }
    if (a.n_gen > 0) {
        std::printf("decode   %5d tokens  %9.2f tok/s  [%.2f, %.2f]  %.2f ms/token (after a %d-token prompt)\n",
                    a.n_gen, dec.median, dec.min, dec.max, 1e3 / dec.median, decode_prompt);
        std::printf("                       %9.2f tok/s  with each token read back (%.3f ms/token)\n", wall.median,
                    1e3 / wall.median);
        std::printf("traffic  %.1f MB/token (weights %.1f, state %.2f, kv %.2f)  %.2f GB/s = %.1f %% of %.1f GB/s (%s)\n",
                    traffic.total() / 1e6, traffic.weights / 1e6, traffic.state / 1e6, traffic.kv / 1e6, gb_s,
                    floor > 0 ? 100 * gb_s / floor : 0, floor, floor_source.c_str());
    }
    for (const auto& l : verify_lines) std::printf("%s\n", l.c_str());
    if (!dflash_line.empty()) std::printf("%s\n", dflash_line.c_str());
    for (const auto& l : parallel_lines) std::printf("%s\n", l.c_str());
    std::printf("memory   weights %.1f MiB, kv %.1f MiB, state %.1f MiB, scratch %.1f MiB\n", mib(last.weight_bytes),
                mib(last.kv_bytes), mib(last.state_bytes), mib(last.scratch_bytes));
}

}  // namespace

void register_bench(CLI::App& app) {
    auto a = std::make_shared<BenchArgs>();
    auto* cmd = app.add_subcommand("bench", "Measure load, prefill and decode speed, bytes per token and bandwidth");
    a->model.add_to(*cmd);
    cmd->get_option("--ctx")->description("context size in tokens (default: what the run needs)");
    cmd->add_option("-p,--prompt", a->prompts, "prompt lengths to prefill (comma separated)")->delimiter(',');
    cmd->add_option("-n,--n-gen", a->n_gen, "tokens to decode after the first prompt length")
        ->check(non_negative());
    cmd->add_option("--reps", a->reps, "measured repetitions (median, min, max)")->check(positive());
    cmd->add_option("--bw", a->bw, "bandwidth floor in GB/s (default: measure a host memory copy)");
    cmd->add_flag("--json", a->json, "print one JSON object");
    cmd->add_option("--verify", a->verify,
                    "also time speculative verify passes of these lengths (2..8, comma separated), fed the decoded tokens")
        ->delimiter(',');
    cmd->add_option("--dflash", a->dflash, "also time a DFlash block drafter's rounds (synth --dflash-for makes one)")
        ->check(CLI::ExistingDirectory);
    cmd->add_option("--parallel", a->parallel,
                    "also time this many greedy generations of -n tokens at once (comma separated, 2..64): continuous batching")
        ->delimiter(',');
    cmd->callback([a, cmd] {
        a->ctx_given = cmd->count("--ctx") > 0;
        run(*a);
    });
}
