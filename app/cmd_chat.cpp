// diskformer chat: an interactive conversation. Each turn reuses the cached conversation;
// Ctrl-C stops the answer being written, Ctrl-C or Ctrl-D at the prompt leaves.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "cli_common.h"
#include "commands.h"
#include "diskformer/generate.h"
#include "gen_args.h"
#include "gen_output.h"
#include "line_editor.h"

namespace {

struct ChatArgs {
    ModelArgs model;
    DraftArgs draft;
    GenArgs gen;
};

constexpr const char* kHelp = "/reset clears the conversation · /think on|off|auto · /exit · Ctrl-C stops an answer";

void note(const std::string& s) {
    const bool dim = ansi_terminal(stderr);
    std::fprintf(stderr, "%s%s%s\n", dim ? "\x1b[2m" : "", s.c_str(), dim ? "\x1b[0m" : "");
}

std::string trim(const std::string& s) {
    const size_t a = s.find_first_not_of(" \t\r\n");
    if (a == std::string::npos) return {};
    return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

// Handles a /command; false when it asks to leave.
bool command(diskformer::Chat& chat, const std::string& line) {
    const size_t sp = line.find(' ');
    const std::string cmd = line.substr(0, sp), arg = sp == std::string::npos ? "" : trim(line.substr(sp));
    if (cmd == "/exit" || cmd == "/quit") return false;
    if (cmd == "/reset") {
        chat.reset();
        note("(conversation cleared)");
    } else if (cmd == "/think" && (arg == "on" || arg == "off" || arg == "auto")) {
        chat.set_thinking(arg == "on" ? diskformer::Thinking::on : arg == "off" ? diskformer::Thinking::off : diskformer::Thinking::automatic);
        note("(thinking " + arg + ")");
    } else if (cmd == "/help" || cmd == "/?") {
        note(kHelp);
    } else {
        note("unknown command " + line + "; " + kHelp);
    }
    return true;
}

void run(ChatArgs& a) {
    auto model = diskformer::Model::load(a.model.path, a.model.model_options());
    diskformer::Session session(model, a.model.session_options());
    std::unique_ptr<diskformer::Session> drafter;
    if (auto dm = a.draft.load(*model)) drafter = std::make_unique<diskformer::Session>(dm, a.model.session_options());
    const auto block = a.draft.attach(session);
    if (a.draft.any()) a.gen.sampling.default_draft_for_model();
    diskformer::Chat chat(session, {.system = a.gen.system, .thinking = a.gen.thinking(), .keep_reasoning = true});
    if (!chat.template_warning().empty()) std::fprintf(stderr, "warning: %s\n", chat.template_warning().c_str());
    const auto& info = model->info();
    note("diskformer chat · " + (info.name.empty() ? info.arch : info.name) + " (" + info.arch + ", " + info.backend + ", context " +
         std::to_string(session.n_ctx()) + " tokens)");
    note(std::string(kHelp) + " · Ctrl-D or Ctrl-C at the prompt exits");
    diskformer::GenerateOptions o = a.gen.options();
    o.drafter = drafter.get();
    o.block_drafter = block.get();
    install_interrupt_handler();
    o.abort = &interrupt_flag();
    LineEditor editor;
    for (std::string line;;) {
        interrupt_flag() = false;
        const auto status = editor.read("> ", line);
        if (status != LineEditor::Status::line) break;
        line = trim(line);
        if (line.empty()) continue;
        editor.add_history(line);
        if (line[0] == '/') {
            if (!command(chat, line)) break;
            continue;
        }
        PiecePrinter print(stdout, a.gen.hide_think);
        try {
            const auto r = chat.send(line, o, std::ref(print));
            print.finish();
            if (r.stop == diskformer::StopReason::aborted) note("[stopped]");
            note("[" + stats_line(r, o) + "]");
            if (r.stop == diskformer::StopReason::context_full) note("(the context is full: /reset to go on)");
        } catch (const diskformer::Error& e) {
            print.finish();
            std::fprintf(stderr, "error: %s\n", e.what());
            note("(/reset starts a new conversation)");
        }
    }
}

}  // namespace

void register_chat(CLI::App& app) {
    auto a = std::make_shared<ChatArgs>();
    auto* cmd = app.add_subcommand("chat", "Talk with a model in the terminal (multi-turn; the conversation stays cached)");
    a->model.add_to(*cmd);
    a->gen.add_to(*cmd);
    a->draft.add_to(*cmd);
    cmd->callback([a] { run(*a); });
}
