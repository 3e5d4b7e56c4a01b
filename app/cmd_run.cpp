// diskformer run: one prompt in, the answer streamed to stdout, stats to stderr.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>

#include "cli_common.h"
#include "commands.h"
#include "diskformer/generate.h"
#include "gen_args.h"
#include "gen_output.h"

namespace {

struct RunArgs {
    ModelArgs model;
    DraftArgs draft;
    GenArgs gen;
    std::string prompt, prompt_file;
    bool raw = false;
};

std::string read_prompt(const RunArgs& a) {
    if (a.prompt_file.empty()) return a.prompt;
    std::ifstream f(a.prompt_file, std::ios::binary);
    if (!f) throw diskformer::Error("cannot open prompt file '" + a.prompt_file + "'");
    return {std::istreambuf_iterator<char>(f), {}};
}

int run(RunArgs& a) {
    const std::string prompt = read_prompt(a);
    auto model = diskformer::Model::load(a.model.path, a.model.model_options());
    diskformer::Session session(model, a.model.session_options());
    std::unique_ptr<diskformer::Session> drafter;
    if (auto dm = a.draft.load(*model)) drafter = std::make_unique<diskformer::Session>(dm, a.model.session_options());
    const auto block = a.draft.attach(session);
    if (a.draft.any()) a.gen.sampling.default_draft_for_model();
    diskformer::GenerateOptions o = a.gen.options();
    o.drafter = drafter.get();
    o.block_drafter = block.get();
    install_interrupt_handler();
    o.abort = &interrupt_flag();
    PiecePrinter print(stdout, a.gen.hide_think);
    diskformer::GenerateResult r;
    if (a.raw) {
        r = diskformer::generate(session, model->tokenize(prompt, true), o, std::ref(print));
    } else {
        diskformer::Chat chat(session, {.system = a.gen.system, .thinking = a.gen.thinking(), .keep_reasoning = true});
        if (!chat.template_warning().empty()) std::fprintf(stderr, "warning: %s\n", chat.template_warning().c_str());
        r = chat.send(prompt, o, std::ref(print));
    }
    print.finish();
    std::fprintf(stderr, "%s\n", stats_line(r, o).c_str());
    return r.stop == diskformer::StopReason::aborted ? 130 : 0;
}

}  // namespace

void register_run(CLI::App& app) {
    auto a = std::make_shared<RunArgs>();
    auto* cmd = app.add_subcommand("run", "Answer one prompt, streaming the text to stdout (stats on stderr)");
    a->model.add_to(*cmd);
    auto* p = cmd->add_option("-p,--prompt", a->prompt, "the prompt (the user's message, or the whole text with --raw)");
    auto* f = cmd->add_option("-f,--file", a->prompt_file, "read the prompt from this file");
    p->excludes(f);
    cmd->add_flag("--raw", a->raw,
                  "feed the prompt as is, without the chat template (control tokens like <|im_start|> in it are parsed)");
    a->gen.add_to(*cmd);
    a->draft.add_to(*cmd);
    cmd->callback([a, p, f] {
        if (p->count() == 0 && f->count() == 0) throw CLI::RequiredError("-p,--prompt or -f,--file");
        const int code = run(*a);
        if (code != 0) std::exit(code);
    });
}
