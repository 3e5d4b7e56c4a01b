// Options shared by the commands that load a model.
#pragma once

#include <CLI/CLI.hpp>

#include <filesystem>
#include <memory>
#include <string>

#include "cli_checks.h"
#include "diskformer/diskformer.h"
#include "diskformer/generate.h"
#include "diskformer/store.h"

// The store's root (store::Store::default_root()).
std::string store_root();
// Throws diskformer::Error unless a run could load the file: a GGUF whose architecture and
// config the engine reads, with tensors (not a vocabulary-only file). The store takes in only
// such files (import, pull).
void check_model_file(const std::string& path);

// -m and --draft-model take a file or a name in the model store: the option's value becomes the
// file's path (an unknown name is a parse error naming what the store holds).
inline CLI::Validator model_file_or_name() {
    return CLI::Validator(
        [](std::string& arg) -> std::string {
            std::error_code ec;
            if (std::filesystem::is_regular_file(arg, ec)) return {};  // a file needs no store (nor a HOME)
            try {
                arg = diskformer::store::resolve_model(arg, diskformer::store::Store(store_root()));
                return {};
            } catch (const diskformer::Error& e) {
                return e.what();
            }
        },
        "FILE|NAME");
}

struct ModelArgs {
    std::string path;
    std::string backend = "auto";
    int threads = 0;
    int ctx = 4096;
    int chunk = 0;
    std::string kv_type = "f16";

    void add_to(CLI::App& cmd, bool with_ctx = true) {
        cmd.add_option("-m,--model", path, "GGUF model file, or a model's name in the store (diskformer list)")
            ->required()
            ->transform(model_file_or_name());
        cmd.add_option("--backend", backend, "cpu, cuda or auto (cuda when a GPU is present)")
            ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
        cmd.add_option("-t,--threads", threads, "CPU threads (0: one per core)")->check(non_negative());
        if (with_ctx) cmd.add_option("--ctx", ctx, "context size in tokens")->check(at_least(1));
        cmd.add_option("--chunk", chunk, "prompt tokens per forward pass (0: 256 on the CPU; on a GPU 2048, 4096 for hybrid models)")
            ->check(non_negative());
        cmd.add_option("--kv-type", kv_type, "KV cache type: f16 or f32")->check(CLI::IsMember({"f16", "f32"}));
    }
    diskformer::ModelOptions model_options() const {
        diskformer::ModelOptions o;
        o.backend = backend == "cpu"    ? diskformer::BackendKind::cpu
                    : backend == "cuda" ? diskformer::BackendKind::cuda
                                        : diskformer::BackendKind::automatic;
        o.threads = threads;
        return o;
    }
    diskformer::SessionOptions session_options() const {
        diskformer::SessionOptions o;
        o.ctx = ctx;
        o.chunk = chunk;
        o.kv_type = kv_type == "f32" ? diskformer::KvType::f32 : diskformer::KvType::f16;
        return o;
    }
};

// A draft model or a DFlash block drafter for speculative decoding (run, chat, serve).
struct DraftArgs {
    std::string path;
    std::string dflash;

    void add_to(CLI::App& cmd) {
        auto* m = cmd.add_option("--draft-model", path,
                                 "a smaller GGUF model with the same tokenizer that guesses the --draft tokens (speculative "
                                 "decoding, greedy only: e.g. Qwen3-0.6B beside Qwen3-4B); a file or a store name")
                      ->transform(model_file_or_name());
        cmd.add_option("--dflash", dflash,
                       "a DFlash block drafter directory (config.json + model.safetensors, e.g. z-lab's Qwen3-4B-DFlash-b16) "
                       "that guesses the --draft tokens from a qwen3 target's hidden states")
            ->check(CLI::ExistingDirectory)
            ->excludes(m);
    }
    bool any() const { return !path.empty() || !dflash.empty(); }
    // A block drafter attached to `target`, or null without --dflash.
    std::unique_ptr<diskformer::BlockDrafter> attach(diskformer::Session& target) const {
        if (dflash.empty()) return nullptr;
        try {
            return std::make_unique<diskformer::BlockDrafter>(dflash, target);
        } catch (const diskformer::Error& e) {
            throw diskformer::Error("--dflash " + dflash + ": " + e.what());
        }
    }
    // Loads it onto the target's backend and checks that it fits; null without --draft-model.
    std::shared_ptr<diskformer::Model> load(const diskformer::Model& target) const {
        if (path.empty()) return nullptr;
        try {
            auto m = diskformer::Model::load_beside(path, target);
            diskformer::check_drafter(target, *m);
            return m;
        } catch (const diskformer::Error& e) {
            throw diskformer::Error("--draft-model " + path + ": " + e.what());
        }
    }
};
