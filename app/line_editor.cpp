#include "line_editor.h"

#include <cerrno>
#include <string_view>

#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

namespace {

bool is_cont(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// Columns of s: one per code point. East Asian wide characters take two on screen; they are
// rare at a chat prompt and only misplace the cursor, so this stays simple.
size_t columns(std::string_view s) {
    size_t n = 0;
    for (char c : s) n += !is_cont(c);
    return n;
}

int terminal_columns() {
    winsize ws{};
    return ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 80;
}

void out(std::string_view s) {
    while (!s.empty()) {
        const ssize_t n = ::write(STDOUT_FILENO, s.data(), s.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        s.remove_prefix(static_cast<size_t>(n));
    }
}

// Reads one byte; false at end of input, and (errno EINTR) when a signal came.
bool read_byte(char& c) { return ::read(STDIN_FILENO, &c, 1) == 1; }

// Puts the terminal in raw mode for the life of the object (restored even on exceptions).
class RawMode {
public:
    RawMode() {
        ok_ = tcgetattr(STDIN_FILENO, &saved_) == 0;
        if (!ok_) return;
        termios raw = saved_;
        raw.c_iflag &= ~static_cast<tcflag_t>(BRKINT | ICRNL | INPCK | ISTRIP | IXON);
        raw.c_cflag |= CS8;
        raw.c_lflag &= ~static_cast<tcflag_t>(ECHO | ICANON | IEXTEN | ISIG);
        raw.c_cc[VMIN] = 1;
        raw.c_cc[VTIME] = 0;
        // TCSANOW, not TCSAFLUSH: keep what was typed while the last answer streamed.
        ok_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    ~RawMode() {
        if (ok_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
    }
    bool ok() const { return ok_; }

private:
    termios saved_{};
    bool ok_ = false;
};

struct Edit {
    std::string buf;
    size_t pos = 0;  // byte offset of the cursor, on a character boundary

    size_t prev(size_t i) const {
        if (i == 0) return 0;
        do --i;
        while (i > 0 && is_cont(buf[i]));
        return i;
    }
    size_t next(size_t i) const {
        if (i >= buf.size()) return buf.size();
        do ++i;
        while (i < buf.size() && is_cont(buf[i]));
        return i;
    }
    // True while the bytes before the cursor are an incomplete character (being typed).
    bool inside_char() const {
        const size_t start = prev(pos);
        const auto lead = static_cast<unsigned char>(pos > 0 ? buf[start] : 0);
        const size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
        return pos - start < need;
    }
    void erase(size_t from, size_t to) {
        buf.erase(from, to - from);
        pos = from;
    }
};

// Redraws prompt + buffer on the current line, scrolled so that the cursor is visible.
void refresh(const std::string& prompt, const Edit& e) {
    const size_t width = static_cast<size_t>(terminal_columns());
    const size_t pcols = columns(prompt);
    const size_t room = width > pcols + 1 ? width - pcols - 1 : 1;
    size_t start = 0;
    while (columns(std::string_view(e.buf).substr(start, e.pos - start)) > room) start = e.next(start);
    size_t end = start, cols = 0;
    while (end < e.buf.size() && cols < room) {
        end = e.next(end);
        ++cols;
    }
    std::string s = "\r" + prompt + e.buf.substr(start, end - start) + "\x1b[K\r";
    const size_t cursor = pcols + columns(std::string_view(e.buf).substr(start, e.pos - start));
    if (cursor) s += "\x1b[" + std::to_string(cursor) + "C";
    out(s);
}

}  // namespace

void LineEditor::add_history(const std::string& line) {
    if (line.empty() || (!history_.empty() && history_.back() == line)) return;
    history_.push_back(line);
    if (history_.size() > 1000) history_.erase(history_.begin());
}

LineEditor::Status LineEditor::read(const std::string& prompt, std::string& line) {
    line.clear();
    if (isatty(STDIN_FILENO) && isatty(STDOUT_FILENO)) return read_raw(prompt, line);
    return read_plain(line);
}

LineEditor::Status LineEditor::read_plain(std::string& line) {
    for (char c;;) {
        if (!read_byte(c)) {
            if (errno == EINTR) return Status::interrupted;
            return line.empty() ? Status::eof : Status::line;
        }
        if (c == '\n') {
            if (!line.empty() && line.back() == '\r') line.pop_back();
            return Status::line;
        }
        line += c;
    }
}

LineEditor::Status LineEditor::read_raw(const std::string& prompt, std::string& line) {
    RawMode raw;
    if (!raw.ok()) {
        out(prompt);
        return read_plain(line);
    }
    Edit e;
    size_t hist = history_.size();  // history_.size(): the line being typed
    std::string typed;              // kept while browsing history
    auto show_history = [&](size_t h) {
        if (hist == history_.size()) typed = e.buf;
        hist = h;
        e.buf = hist == history_.size() ? typed : history_[hist];
        e.pos = e.buf.size();
    };
    refresh(prompt, e);
    for (char c;;) {
        if (!read_byte(c)) {
            const bool sig = errno == EINTR;
            out("\r\n");
            return sig ? Status::interrupted : Status::eof;
        }
        switch (c) {
            case '\r':
            case '\n':
                out("\r\n");
                line = e.buf;
                return Status::line;
            case 3:  // Ctrl-C
                out("^C\r\n");
                return Status::interrupted;
            case 4:  // Ctrl-D: end of input on an empty line, else delete forward
                if (e.buf.empty()) {
                    out("\r\n");
                    return Status::eof;
                }
                e.erase(e.pos, e.next(e.pos));
                break;
            case 127:
            case 8:  // Backspace
                e.erase(e.prev(e.pos), e.pos);
                break;
            case 1: e.pos = 0; break;                 // Ctrl-A
            case 5: e.pos = e.buf.size(); break;      // Ctrl-E
            case 2: e.pos = e.prev(e.pos); break;     // Ctrl-B
            case 6: e.pos = e.next(e.pos); break;     // Ctrl-F
            case 11: e.buf.resize(e.pos); break;      // Ctrl-K
            case 21: e.erase(0, e.pos); break;        // Ctrl-U
            case 23: {                                // Ctrl-W: the word before the cursor
                size_t i = e.pos;
                while (i > 0 && e.buf[i - 1] == ' ') --i;
                while (i > 0 && e.buf[i - 1] != ' ') --i;
                e.erase(i, e.pos);
                break;
            }
            case 12: out("\x1b[H\x1b[2J"); break;   // Ctrl-L
            case 16: if (hist > 0) show_history(hist - 1); break;                    // Ctrl-P
            case 14: if (hist < history_.size()) show_history(hist + 1); break;      // Ctrl-N
            case 27: {  // escape sequences: ESC [ x, ESC O x, ESC [ n ~
                char a, b;
                if (!read_byte(a) || !read_byte(b)) break;
                if (a == '[' && b >= '0' && b <= '9') {
                    char t;
                    if (!read_byte(t) || t != '~') break;
                    if (b == '3') e.erase(e.pos, e.next(e.pos));
                    if (b == '1' || b == '7') e.pos = 0;
                    if (b == '4' || b == '8') e.pos = e.buf.size();
                } else if (a == '[' || a == 'O') {
                    if (b == 'A' && hist > 0) show_history(hist - 1);
                    if (b == 'B' && hist < history_.size()) show_history(hist + 1);
                    if (b == 'C') e.pos = e.next(e.pos);
                    if (b == 'D') e.pos = e.prev(e.pos);
                    if (b == 'H') e.pos = 0;
                    if (b == 'F') e.pos = e.buf.size();
                }
                break;
            }
            default:
                if (static_cast<unsigned char>(c) < 32) break;  // other control keys: ignored
                e.buf.insert(e.pos, 1, c);
                ++e.pos;
                break;
        }
        if (!e.inside_char()) refresh(prompt, e);  // a multi-byte character is drawn once whole
    }
}
