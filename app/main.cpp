// diskformer: the command-line entry point. Every error ends as one line on stderr and exit 1.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "commands.h"

int main(int argc, char** argv) {
    CLI::App app{"diskformer: Qwen3.5 / Qwen3 GGUF inference on CUDA GPUs and CPUs"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "diskformer 0.1.0");
    register_run(app);
    register_chat(app);
    register_inspect(app);
    register_eval(app);
    register_tokenize(app);
    register_synth(app);
    register_bench(app);
    register_pull(app);
    register_serve(app);
    register_batch(app);
    register_store(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::fprintf(stderr, "error: %s (see --help)\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
