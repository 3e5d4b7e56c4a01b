// Showing an answer as it streams, its stats, and Ctrl-C as "stop this answer".
#pragma once

#include <atomic>
#include <cstdio>
#include <string>

#include "diskformer/generate.h"

// Set by SIGINT. A second SIGINT while it is still set ends the process (exit 130), so a stuck
// prompt evaluation can always be left.
std::atomic<bool>& interrupt_flag();
// Installs the handler (without SA_RESTART: a blocking read returns EINTR at Ctrl-C).
void install_interrupt_handler();

// Writes pieces to a stream: the answer as is; the reasoning dimmed (ANSI) on a colour
// terminal, each line prefixed with "> " otherwise, or not at all with hide_reasoning. On a
// terminal, control characters in the text are shown in caret notation (^[), never obeyed.
class PiecePrinter {
public:
    PiecePrinter(std::FILE* out, bool hide_reasoning);
    void operator()(const diskformer::Piece& p);
    // Ends the answer: closes any styling and the last line.
    void finish();

private:
    void write(const std::string& s);
    std::FILE* out_;
    enum class Style { dim, prefix, hide } reasoning_style_;
    bool terminal_;               // control characters in the text are shown, not obeyed
    bool in_reasoning_ = false;   // reasoning text was written and not yet closed
    bool line_start_ = true;      // the last byte written was a newline (or nothing was)
    bool wrote_anything_ = false;
};

// True when f is a terminal that takes ANSI styling (not NO_COLOR, not TERM=dumb).
bool ansi_terminal(std::FILE* f);

// One line of stats, e.g. "29 prompt tokens (0 cached) at 1234 tok/s · first token 25 ms ·
// 64 tokens at 456 tok/s · stopped: end token · seed 42".
std::string stats_line(const diskformer::GenerateResult& r, const diskformer::GenerateOptions& o);
