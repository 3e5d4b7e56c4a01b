// The model store's commands: `list`, `import FILE`, `rm NAME` (pull, in cmd_pull.cpp, fetches
// into it). Every command that takes -m finds a store name there (cli_common.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_common.h"
#include "commands.h"
#include "gguf/gguf.h"
#include "model/inspect.h"

namespace {

namespace fs = std::filesystem;
namespace store = diskformer::store;

std::string human_size(uint64_t bytes) {
    char buf[32];
    if (bytes >= 1000000000) std::snprintf(buf, sizeof buf, "%.2f GB", static_cast<double>(bytes) / 1e9);
    else std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / 1e6);
    return buf;
}

struct ImportArgs {
    std::string file, name;
    bool link = false, move = false, replace = false;
};

}  // namespace

std::string store_root() { return store::Store::default_root(); }

void check_model_file(const std::string& path) {
    const auto j = df::model::inspect(*df::gguf::File::open(path));
    if (j.contains("config_error")) throw diskformer::Error(path + " is not a model diskformer can run: " + j["config_error"].get<std::string>());
    if (j["tensors"].empty()) throw diskformer::Error(path + " holds no tensors (a vocabulary-only file?)");
}

void register_store(CLI::App& app) {
    {
        auto json_out = std::make_shared<bool>(false);
        auto* c = app.add_subcommand("list", "List the models in the store (" + std::string("$DISKFORMER_HOME, else ~/.local/share/diskformer") + ")");
        c->add_flag("--json", *json_out, "one JSON array");
        c->callback([json_out] {
            const store::Store s(store_root());
            const auto entries = s.list();
            if (*json_out) {
                nlohmann::json a = nlohmann::json::array();
                for (const auto& e : entries)
                    a.push_back({{"name", e.name}, {"path", e.path}, {"size", e.size}, {"sha256", e.sha256}, {"source", e.source},
                                 {"added", e.added}, {"present", fs::is_regular_file(e.path)}});
                std::cout << a.dump() << '\n';
                return;
            }
            if (entries.empty()) {
                std::fprintf(stderr, "the store at %s is empty: `diskformer pull URL` or `diskformer import FILE` adds models\n",
                             s.root().c_str());
                return;
            }
            size_t w = 4;
            for (const auto& e : entries) w = std::max(w, e.name.size());
            std::printf("%-*s  %9s  %-12s  %-20s  %s\n", static_cast<int>(w), "NAME", "SIZE", "SHA256", "ADDED", "SOURCE");
            for (const auto& e : entries) {
                const bool here = fs::is_regular_file(e.path);
                std::printf("%-*s  %9s  %-12s  %-20s  %s%s\n", static_cast<int>(w), e.name.c_str(), human_size(e.size).c_str(),
                            e.sha256.substr(0, 12).c_str(), e.added.c_str(), e.source.c_str(), here ? "" : "  (FILE MISSING)");
            }
        });
    }
    {
        auto a = std::make_shared<ImportArgs>();
        auto* c = app.add_subcommand("import", "Take a GGUF model file into the store (checked that it loads; sha256 recorded)");
        c->add_option("FILE", a->file, "GGUF model file")->required()->check(CLI::ExistingFile);
        c->add_option("--name", a->name, "its name in the store (default: the file name without .gguf)");
        auto* link = c->add_flag("--link", a->link, "hard-link it instead of copying (same filesystem)");
        c->add_flag("--move", a->move, "move it instead of copying")->excludes(link);
        c->add_flag("--replace", a->replace, "replace a model of the same name");
        c->callback([a] {
            const std::string name = a->name.empty() ? fs::path(a->file).stem().string() : a->name;
            store::check_name(name);
            check_model_file(a->file);
            store::Store s(store_root());
            const auto mode = a->link ? store::ImportMode::link : a->move ? store::ImportMode::move : store::ImportMode::copy;
            const auto e = s.import(a->file, name, mode, a->replace);
            std::printf("%s  %llu bytes  sha256 %s\n", e.name.c_str(), static_cast<unsigned long long>(e.size), e.sha256.c_str());
        });
    }
    {
        auto name = std::make_shared<std::string>();
        auto* c = app.add_subcommand("rm", "Remove a model from the store (its entry and its file)");
        c->add_option("NAME", *name, "its name in the store")->required();
        c->callback([name] {
            store::Store s(store_root());
            if (!s.remove(*name)) throw diskformer::Error("the store at " + s.root() + " has no model named '" + *name + "'");
            std::fprintf(stderr, "removed %s\n", name->c_str());
        });
    }
}
