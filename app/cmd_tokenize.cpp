// diskformer tokenize / detokenize: text <-> token ids with a model's vocabulary.
//
// These read only the GGUF's tokenizer keys (the file is mapped, no weights are loaded), so they
// answer in a fraction of a second even for a large model; that is why they use the tokenizer
// layer directly rather than loading a diskformer::Model.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli_common.h"
#include "commands.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace {

struct TokenizeArgs {
    std::string model;
    std::string text;
    bool has_text = false;  // TEXT was given (it may be empty)
    std::string file;
    bool special = false;
};

struct DetokenizeArgs {
    std::string model;
    std::vector<std::string> ids;
    bool skip_special = false;
};

std::unique_ptr<df::tokenizer::Tokenizer> load_tokenizer(const std::string& path) {
    auto file = df::gguf::File::open(path);
    return df::tokenizer::Tokenizer::from_gguf(*file);
}

std::string read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot open '" + path + "'");
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (f.bad()) throw std::runtime_error("cannot read '" + path + "'");
    return bytes;
}

// Ids from arguments like "9707 1879", "9707,1879" or "[9707, 1879]" (tokenize's own output).
std::vector<int32_t> parse_ids(const std::vector<std::string>& args) {
    std::string all;
    for (const auto& a : args) all += a + ' ';
    for (char& c : all)
        if (c == '[' || c == ']' || c == ',') c = ' ';
    std::vector<int32_t> ids;
    size_t pos = 0;
    while ((pos = all.find_first_not_of(" \t\r\n", pos)) != std::string::npos) {
        const size_t end = all.find_first_of(" \t\r\n", pos);
        const std::string word = all.substr(pos, end - pos);
        pos = end;
        size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(word, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != word.size() || v < INT32_MIN || v > INT32_MAX)
            throw std::runtime_error("'" + word + "' is not a token id");
        ids.push_back(static_cast<int32_t>(v));
    }
    return ids;
}

void run_tokenize(const TokenizeArgs& a) {
    if (a.has_text == !a.file.empty())
        throw std::runtime_error(a.has_text ? "give either TEXT or --file, not both"
                                            : "give the text to tokenize, or --file");
    const std::string text = a.file.empty() ? a.text : read_bytes(a.file);
    const auto tok = load_tokenizer(a.model);
    const auto ids = tok->encode(text, a.special);
    std::string out = "[";
    for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
    out += "]\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
}

void run_detokenize(const DetokenizeArgs& a) {
    const auto ids = parse_ids(a.ids);
    const auto tok = load_tokenizer(a.model);
    const std::string text = tok->decode(ids, !a.skip_special) + "\n";
    std::fwrite(text.data(), 1, text.size(), stdout);
}

}  // namespace

void register_tokenize(CLI::App& app) {
    auto t = std::make_shared<TokenizeArgs>();
    auto* tc = app.add_subcommand("tokenize", "Print the token ids of a text as a JSON array");
    tc->add_option("-m,--model", t->model, "GGUF model (or vocabulary-only) file, or a store name")->required()->transform(model_file_or_name());
    tc->add_flag("--special", t->special,
                 "parse control tokens written in the text (<|im_start|>, …) as single ids");
    tc->add_option("--file", t->file, "tokenize this file's exact bytes instead of TEXT");
    auto* text =
        tc->add_option("text", t->text, "the text (put -- before it if it starts with '-')");
    tc->callback([t, text] {
        t->has_text = text->count() > 0;
        run_tokenize(*t);
    });

    auto d = std::make_shared<DetokenizeArgs>();
    auto* dc = app.add_subcommand("detokenize", "Print the text of token ids");
    dc->add_option("-m,--model", d->model, "GGUF model (or vocabulary-only) file, or a store name")->required()->transform(model_file_or_name());
    dc->add_flag("--skip-special", d->skip_special, "leave out control tokens (<|im_end|>, …)");
    dc->add_option("ids", d->ids, "token ids: '9707 1879', '9707,1879' or '[9707, 1879]'")
        ->required();
    dc->callback([d] { run_detokenize(*d); });
}
