// Generation options on the command line: run, chat and serve.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <fstream>
#include <iterator>
#include <vector>

#include "cli_checks.h"

#include "diskformer/generate.h"

// Length and sampling: what `serve` takes as the defaults for fields a request leaves out.
struct SamplingArgs {
    int max_tokens = -1;
    float temperature = 0, top_p = 0.95f, min_p = 0.05f, repeat_penalty = 1, presence_penalty = 0, frequency_penalty = 0;
    int top_k = 40, repeat_last_n = 64, draft = 0;
    CLI::Option* draft_option = nullptr;

    void add_to(CLI::App& cmd) {
        cmd.add_option("-n,--max-tokens", max_tokens, "new tokens per answer at most (-1: until the model ends or the context is full)")
            ->check(in_range(-1, 1 << 30));
        cmd.add_option("--temp", temperature, "sampling temperature (0: greedy, the default)")->check(non_negative());
        cmd.add_option("--top-k", top_k, "sample among the k likeliest tokens (0: all)")->capture_default_str()->check(non_negative());
        cmd.add_option("--top-p", top_p, "… the fewest whose probability reaches p (1: all)")->capture_default_str()->check(in_range(0, 1));
        cmd.add_option("--min-p", min_p, "… at least min-p × the likeliest (0: all)")->capture_default_str()->check(in_range(0, 1));
        cmd.add_option("--repeat-penalty", repeat_penalty, "penalise recently seen tokens (1: off)")->check(positive());
        cmd.add_option("--presence-penalty", presence_penalty, "subtract from recently seen tokens' logits (0: off)");
        cmd.add_option("--frequency-penalty", frequency_penalty, "subtract this times how often a recent token occurs (0: off)");
        cmd.add_option("--repeat-last-n", repeat_last_n, "how many recent tokens the penalties see")->capture_default_str()->check(non_negative());
        draft_option = cmd.add_option("--draft", draft,
                                      "speculative decoding: verify up to N drafted tokens per pass, guessed by prompt lookup "
                                      "(faster where text repeats) or by --draft-model / --dflash (default 7 with them); the "
                                      "same answer either way, sampled ones too with the same --seed (0: off)")
                           ->check(in_range(0, 64));
    }

    // With a draft model, --draft defaults to a full verify pass (7 drafted tokens).
    void default_draft_for_model() {
        if (draft_option && draft_option->count() == 0) draft = 7;
    }

    void apply(diskformer::GenerateOptions& o) const {
        o.max_tokens = max_tokens;
        o.temperature = temperature;
        o.top_k = top_k;
        o.top_p = top_p;
        o.min_p = min_p;
        o.repeat_penalty = repeat_penalty;
        o.presence_penalty = presence_penalty;
        o.frequency_penalty = frequency_penalty;
        o.penalty_window = repeat_last_n;
        o.draft = draft;
    }
};

// Options shared by `run` and `chat`: the above, thinking, and how the answer is shown.
struct GenArgs {
    SamplingArgs sampling;
    std::string system;
    bool think = false, no_think = false, hide_think = false, json = false;
    std::string json_schema_file;
    std::optional<uint64_t> seed;
    std::vector<std::string> stop;

    void add_to(CLI::App& cmd) {
        sampling.add_to(cmd);
        cmd.add_option("--system", system, "system prompt");
        auto* on = cmd.add_flag("--think", think, "let the model think before answering");
        auto* off = cmd.add_flag("--no-think", no_think, "answer without thinking (an empty think block)");
        on->excludes(off);
        cmd.add_flag("--hide-think", hide_think, "do not show the thinking, only the answer");
        cmd.add_option("--seed", seed, "sampling seed (default: random, printed with the stats)");
        cmd.add_option("--stop", stop, "stop before this text (repeatable)");
        cmd.add_flag("--json", json, "answer with one JSON object (tokens that would break JSON are never chosen)");
        cmd.add_option("--json-schema", json_schema_file, "answer with one JSON object that this JSON Schema file allows")
            ->check(CLI::ExistingFile);
    }

    diskformer::Thinking thinking() const {
        return think ? diskformer::Thinking::on : no_think ? diskformer::Thinking::off : diskformer::Thinking::automatic;
    }

    // Options for generate(); the seed is drawn once here when none was given.
    diskformer::GenerateOptions options() {
        if (!seed) seed = std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
        diskformer::GenerateOptions o;
        sampling.apply(o);
        o.stop = stop;
        o.seed = *seed;
        o.json = json || !json_schema_file.empty();
        if (!json_schema_file.empty()) {
            std::ifstream in(json_schema_file, std::ios::binary);
            o.json_schema.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
            if (!in.good() && !in.eof()) throw diskformer::Error("cannot read " + json_schema_file);
        }
        return o;
    }
};
