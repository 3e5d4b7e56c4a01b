#include "gen_output.h"

#include <fmt/format.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <unistd.h>

namespace {

std::atomic<bool> g_interrupted{false};

void on_sigint(int) {
    if (g_interrupted.load()) _exit(130);  // async-signal-safe; the second press means "quit now"
    g_interrupted.store(true);
}

// Model text for a terminal: control characters other than newline and tab shown in caret
// notation (^[), so that generated text cannot move the cursor or restyle the terminal.
std::string for_terminal(std::string_view text) {
    std::string s;
    for (char c : text) {
        const auto u = static_cast<unsigned char>(c);
        if ((u < 0x20 && c != '\n' && c != '\t') || u == 0x7f) {
            s += '^';
            s += static_cast<char>(u ^ 0x40);
        } else {
            s += c;
        }
    }
    return s;
}

constexpr const char* kDim = "\x1b[2m";
constexpr const char* kReset = "\x1b[0m";

}  // namespace

std::atomic<bool>& interrupt_flag() { return g_interrupted; }

void install_interrupt_handler() {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART
    sigaction(SIGINT, &sa, nullptr);
}

bool ansi_terminal(std::FILE* f) {
    const char* term = std::getenv("TERM");
    const char* no_color = std::getenv("NO_COLOR");
    return isatty(fileno(f)) && !(no_color && *no_color) && !(term && std::strcmp(term, "dumb") == 0);
}

PiecePrinter::PiecePrinter(std::FILE* out, bool hide_reasoning)
    : out_(out),
      reasoning_style_(hide_reasoning ? Style::hide : ansi_terminal(out) ? Style::dim : Style::prefix),
      terminal_(isatty(fileno(out))) {}

void PiecePrinter::write(const std::string& s) {
    if (s.empty()) return;
    std::fwrite(s.data(), 1, s.size(), out_);
    line_start_ = s.back() == '\n';
    wrote_anything_ = true;
}

void PiecePrinter::operator()(const diskformer::Piece& piece) {
    diskformer::Piece p = piece;
    std::string shown;
    if (terminal_) {
        shown = for_terminal(p.text);
        p.text = shown;
    }
    if (!p.text.empty()) {
        if (p.part == diskformer::Part::reasoning) {
            if (reasoning_style_ == Style::dim) {
                if (!in_reasoning_) write(kDim);
                write(std::string(p.text));
            } else if (reasoning_style_ == Style::prefix) {
                std::string s;
                for (char c : p.text) {
                    if (line_start_ && s.empty()) s += "> ";
                    s += c;
                    if (c == '\n') {
                        write(s);
                        s.clear();
                    }
                }
                write(s);
            }
            in_reasoning_ = reasoning_style_ != Style::hide;
        } else {
            if (in_reasoning_) {
                // A blank line between the thinking and the answer.
                write(std::string(reasoning_style_ == Style::dim ? kReset : "") + (line_start_ ? "\n" : "\n\n"));
                in_reasoning_ = false;
            }
            write(std::string(p.text));
        }
    }
    std::fflush(out_);
}

void PiecePrinter::finish() {
    if (in_reasoning_ && reasoning_style_ == Style::dim) std::fputs(kReset, out_);
    in_reasoning_ = false;
    if (wrote_anything_ && !line_start_) write("\n");
    std::fflush(out_);
}

std::string stats_line(const diskformer::GenerateResult& r, const diskformer::GenerateOptions& o) {
    const auto& s = r.stats;
    std::string line = fmt::format("{} prompt tokens ({} cached)", s.prompt_tokens, s.reused_tokens);
    if (s.prompt_tokens > s.reused_tokens && s.prefill_tok_s() > 0) line += fmt::format(" at {:.1f} tok/s", s.prefill_tok_s());
    if (s.generated_tokens > 0) {
        line += fmt::format(" · first token {:.0f} ms · {} tokens", s.ttft_ms, s.generated_tokens);
        if (s.decode_tok_s() > 0) line += fmt::format(" at {:.1f} tok/s", s.decode_tok_s());
    }
    if (s.drafted_tokens > 0)
        line += fmt::format(" · drafts {} of {} kept ({:.0f} %)", s.accepted_tokens, s.drafted_tokens,
                            100.0 * static_cast<double>(s.accepted_tokens) / static_cast<double>(s.drafted_tokens));
    line += fmt::format(" · stopped: {}", diskformer::to_string(r.stop));
    if (o.temperature > 0) line += fmt::format(" · seed {}", o.seed);
    return line;
}
