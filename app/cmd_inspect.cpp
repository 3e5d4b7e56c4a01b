// diskformer inspect FILE [--json] [--tensors]: what a GGUF file holds (architecture,
// hyperparameters, vocabulary, tensors and bytes per block type) without loading any weights.
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>

#include "cli_common.h"
#include "commands.h"
#include "gguf/gguf.h"
#include "model/inspect.h"

namespace {

struct InspectArgs {
    std::string file;
    bool json = false;
    bool tensors = false;
};

}  // namespace

// Errors (unreadable or malformed file, unknown tensor type, invalid or unsupported model config)
// propagate as gguf::Error; main() prints them as one line and exits 1.
void register_inspect(CLI::App& app) {
    auto args = std::make_shared<InspectArgs>();
    auto* cmd = app.add_subcommand("inspect", "Show a GGUF file's architecture, hyperparameters, vocabulary and tensors");
    cmd->add_option("FILE", args->file, "GGUF file, or a model's name in the store")->required()->transform(model_file_or_name());
    cmd->add_flag("--json", args->json, "Print one JSON object (arch, config, tensors, types, bytes, ...)");
    cmd->add_flag("--tensors", args->tensors, "Also list every tensor (text form)");
    cmd->callback([args] {
        const auto f = df::gguf::File::open(args->file);
        const auto j = df::model::inspect(*f);
        if (args->json)  // names come from the file: replace invalid UTF-8 rather than throw
            std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
        else
            df::model::print_inspect(j, std::cout, args->tensors);
        std::cout.flush();
        if (!std::cout) throw std::runtime_error("cannot write to stdout");
    });
}
