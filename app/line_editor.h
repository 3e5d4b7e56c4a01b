// A small line editor for `diskformer chat`, so that no readline is needed: on a terminal it
// edits in raw mode (arrows, Home/End, Backspace/Delete, Ctrl-A/E/B/F/K/U/W/L, history with
// Up/Down, UTF-8 aware, long lines scroll sideways); otherwise it reads plain lines.
#pragma once

#include <string>
#include <vector>

class LineEditor {
public:
    enum class Status { line, eof, interrupted };

    // Shows prompt (on a terminal) and reads one line into `line`, without its newline.
    // eof: Ctrl-D on an empty line or the end of input; interrupted: Ctrl-C (or SIGINT).
    Status read(const std::string& prompt, std::string& line);
    // Remembers a line for Up/Down (consecutive duplicates once).
    void add_history(const std::string& line);

private:
    Status read_raw(const std::string& prompt, std::string& line);
    Status read_plain(std::string& line);
    std::vector<std::string> history_;
};
