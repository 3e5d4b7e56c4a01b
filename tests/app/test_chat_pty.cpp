// `diskformer chat` driven through a pseudo-terminal as a person would: two turns, Ctrl-C in the
// middle of an answer (the program must stay alive and answer again), /reset, and the ways out
// (/exit, Ctrl-D, Ctrl-C at the prompt).
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/golden.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

class Pty {
public:
    explicit Pty(const std::vector<std::string>& args) {
        winsize ws{};
        ws.ws_row = 40;
        ws.ws_col = 200;
        pid_ = forkpty(&fd_, nullptr, nullptr, &ws);
        if (pid_ == 0) {
            std::vector<char*> argv;
            for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
            argv.push_back(nullptr);
            setenv("TERM", "xterm", 1);
            execv(argv[0], argv.data());
            _exit(127);
        }
    }
    ~Pty() {
        if (pid_ > 0 && !exited_) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
        if (fd_ >= 0) close(fd_);
    }
    bool started() const { return pid_ > 0; }

    void send(const std::string& s) { ASSERT_EQ(write(fd_, s.data(), s.size()), static_cast<ssize_t>(s.size())); }

    // Reads until `needle` appears at or after `from`; returns the offset just past it, or
    // npos after the timeout (or when the program ended).
    size_t wait_for(const std::string& needle, size_t from, double seconds = 300) {
        const auto end = Clock::now() + std::chrono::duration<double>(seconds);
        for (;;) {
            const size_t at = out_.find(needle, from);
            if (at != std::string::npos) return at + needle.size();
            if (Clock::now() > end || !pump(50)) return std::string::npos;
        }
    }
    // Waits for more output than `from` bytes.
    bool wait_more(size_t from, double seconds = 300) {
        const auto end = Clock::now() + std::chrono::duration<double>(seconds);
        while (out_.size() <= from)
            if (Clock::now() > end || !pump(50)) return false;
        return true;
    }
    bool alive() {
        if (exited_) return false;
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
            exited_ = true;
            status_ = status;
        }
        return !exited_;
    }
    // Exit code after the program ends (draining its output), or -1 on timeout / a signal.
    int wait_exit(double seconds = 30) {
        const auto end = Clock::now() + std::chrono::duration<double>(seconds);
        while (alive() && Clock::now() < end) pump(50);
        if (alive()) return -1;
        return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
    }
    const std::string& out() const { return out_; }

private:
    // Reads what is there within ms; false once the terminal is closed.
    bool pump(int ms) {
        pollfd p{fd_, POLLIN, 0};
        if (poll(&p, 1, ms) <= 0) return true;
        char buf[4096];
        const ssize_t n = read(fd_, buf, sizeof buf);
        if (n <= 0) return false;  // EIO: the child closed the terminal
        out_.append(buf, static_cast<size_t>(n));
        return true;
    }
    pid_t pid_ = -1;
    int fd_ = -1;
    bool exited_ = false;
    int status_ = 0;
    std::string out_;
};

std::vector<std::string> chat_args(int max_tokens) {
    return {(fs::path(DF_BINARY_DIR) / "app" / "diskformer").string(), "chat", "-m",
            (df::test::golden_dir() / "models" / "q3_4L_kmix.gguf").string(), "--backend", "cpu", "-t", "2",
            "-n", std::to_string(max_tokens), "--no-think"};
}

constexpr const char* kPrompt = "\r> ";  // the line editor redraws its line from column 0

// "[N prompt tokens (M cached) …]" → M, from the last stats line at or after `from`.
long cached_in_stats(const std::string& out, size_t from) {
    static const std::regex re(R"((\d+) prompt tokens \((\d+) cached\))");
    long cached = -1;
    for (std::sregex_iterator it(out.begin() + static_cast<long>(from), out.end(), re), e; it != e; ++it)
        cached = std::stol((*it)[2]);
    return cached;
}

TEST(ChatPty, TwoTurnsCtrlCResetExit) {
    Pty t(chat_args(300));
    ASSERT_TRUE(t.started());
    size_t at = t.wait_for(kPrompt, 0);
    ASSERT_NE(at, std::string::npos) << "no prompt:\n" << t.out();

    // Turn 1 runs to its end.
    t.send("hello there\r");
    at = t.wait_for("stopped:", at);
    ASSERT_NE(at, std::string::npos) << t.out();
    at = t.wait_for(kPrompt, at);
    ASSERT_NE(at, std::string::npos) << t.out();

    // Turn 2: Ctrl-C as soon as the answer streams.
    t.send("tell me more\r");
    at = t.wait_for("\r\n", at);  // Enter's echo (redraws of the line hold no newline)
    ASSERT_NE(at, std::string::npos) << t.out();
    ASSERT_TRUE(t.wait_more(at)) << t.out();
    t.send("\x03");
    at = t.wait_for("[stopped]", at, 30);
    ASSERT_NE(at, std::string::npos) << "Ctrl-C did not stop the answer:\n" << t.out();
    const size_t stats = at;
    at = t.wait_for("stopped: aborted", at, 30);
    ASSERT_NE(at, std::string::npos) << t.out();
    EXPECT_TRUE(t.alive()) << "Ctrl-C ended the program";
    // The second turn reused the first turn's cache.
    EXPECT_GT(cached_in_stats(t.out(), stats), 0) << t.out().substr(stats);
    at = t.wait_for(kPrompt, at);
    ASSERT_NE(at, std::string::npos) << t.out();

    // Still responsive: another turn completes.
    t.send("are you still there\r");
    at = t.wait_for("stopped:", at);
    ASSERT_NE(at, std::string::npos) << t.out();
    at = t.wait_for(kPrompt, at);
    ASSERT_NE(at, std::string::npos) << t.out();

    t.send("/reset\r");
    at = t.wait_for("(conversation cleared)", at, 10);
    ASSERT_NE(at, std::string::npos) << t.out();
    at = t.wait_for(kPrompt, at);
    t.send("/think off\r");
    at = t.wait_for("(thinking off)", at, 10);
    ASSERT_NE(at, std::string::npos) << t.out();
    t.send("/exit\r");
    EXPECT_EQ(t.wait_exit(), 0) << t.out();
}

TEST(ChatPty, CtrlDAndCtrlCAtThePromptExit) {
    for (const char* key : {"\x04", "\x03"}) {
        Pty t(chat_args(8));
        ASSERT_TRUE(t.started());
        ASSERT_NE(t.wait_for(kPrompt, 0), std::string::npos) << t.out();
        t.send(key);
        EXPECT_EQ(t.wait_exit(), 0) << t.out();
    }
}

TEST(ChatPty, LineEditingKeys) {
    // Type "wrold", fix it with Left/Backspace, recall it with Up: the model sees "world".
    Pty t(chat_args(4));
    ASSERT_TRUE(t.started());
    size_t at = t.wait_for(kPrompt, 0);
    ASSERT_NE(at, std::string::npos) << t.out();
    t.send("/nope wrold");
    t.send("\x1b[D\x1b[D\x1b[D\x7f\x1b[Cr\r");  // ← ← ← ⌫ → r: "/nope world"
    at = t.wait_for("unknown command /nope world", at, 10);
    ASSERT_NE(at, std::string::npos) << t.out();
    at = t.wait_for(kPrompt, at);
    t.send("\x1b[A\x01\x0b/exit\r");  // ↑ recalls it, Ctrl-A Ctrl-K clear it, then /exit
    EXPECT_EQ(t.wait_exit(), 0) << t.out();
}

}  // namespace
