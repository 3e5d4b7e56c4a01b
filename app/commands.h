// Each diskformer subcommand registers itself on the CLI11 app; main() wires them up.
#pragma once

namespace CLI {
class App;
}

void register_eval(CLI::App& app);
void register_inspect(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_synth(CLI::App& app);
void register_bench(CLI::App& app);
void register_run(CLI::App& app);
void register_chat(CLI::App& app);
void register_pull(CLI::App& app);
void register_serve(CLI::App& app);
void register_batch(CLI::App& app);
void register_store(CLI::App& app);  // list, import, rm
