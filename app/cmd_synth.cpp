// diskformer synth: write a GGUF with a real model's layout and random, well-scaled weights.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "cli_checks.h"
#include "commands.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/dflash.h"
#include "model/synth.h"

namespace {

struct SynthArgs {
    std::string preset, out;
    uint64_t seed = 0;
    int layers = 0;
    int threads = 0;
    bool dry_run = false;
    bool list = false;
    std::string dflash_for;  // a target GGUF: write a random DFlash drafter for it into --out
};

void run(const SynthArgs& a) {
    namespace synth = df::model::synth;
    if (a.list) {
        for (const auto& p : synth::presets())
            std::printf("%-20s %s\n", std::string(p.name).c_str(), std::string(p.about).c_str());
        return;
    }
    if (!a.dflash_for.empty()) {
        if (a.out.empty()) throw std::invalid_argument("synth: --out DIR is required with --dflash-for");
        const auto f = df::gguf::File::open(a.dflash_for);
        df::model::write_random_dflash(df::model::ModelConfig::from_gguf(*f), a.out, a.layers > 0 ? a.layers : 5, a.seed);
        std::printf("wrote a random DFlash drafter for %s into %s\n", a.dflash_for.c_str(), a.out.c_str());
        return;
    }
    if (a.preset.empty()) throw std::invalid_argument("synth: --preset is required (see --list)");
    if (a.out.empty() && !a.dry_run) throw std::invalid_argument("synth: --out FILE is required unless --dry-run");
    const synth::Layout layout = synth::plan({.preset = a.preset, .seed = a.seed, .layers = a.layers});
    std::fputs(synth::summary(layout).c_str(), stdout);
    if (a.dry_run) return;
    const auto st = synth::write(layout, a.out, a.threads);
    std::printf("wrote %s: %llu bytes in %.2f s (%.2f GB/s)\n", a.out.c_str(),
                static_cast<unsigned long long>(st.bytes), st.seconds, st.seconds > 0 ? st.bytes / st.seconds / 1e9 : 0.0);
}

}  // namespace

void register_synth(CLI::App& app) {
    auto a = std::make_shared<SynthArgs>();
    auto* cmd = app.add_subcommand("synth", "Write a synthetic GGUF with a real model's shapes and block types");
    cmd->add_option("--preset", a->preset, "layout to write (--list shows them)");
    cmd->add_option("--out", a->out, "GGUF file to write");
    cmd->add_option("--seed", a->seed, "random seed (same seed, same bytes)");
    cmd->add_option("--layers", a->layers, "keep only the first N layers (same attention pattern)")
        ->check(positive());
    cmd->add_option("--threads", a->threads, "generator threads (0: one per core)")->check(non_negative());
    cmd->add_flag("--dry-run", a->dry_run, "print the layout summary without writing");
    cmd->add_flag("--list", a->list, "list the presets");
    cmd->add_option("--dflash-for", a->dflash_for,
                    "instead: write a random DFlash block drafter for this qwen3 GGUF into the directory --out "
                    "(--layers of them, 5 by default; for bench --dflash)")
        ->check(CLI::ExistingFile);
    cmd->callback([a] { run(*a); });
}
