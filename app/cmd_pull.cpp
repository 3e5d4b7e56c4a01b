// diskformer pull: fetch a model file over HTTP(S), resumable and checked (store::fetch).
//
//   diskformer pull https://host/path/Model-Q8_0.gguf [-o FILE] [--sha256 HEX] [--size BYTES]
//
// Progress goes to stderr (a live line on a terminal); Ctrl-C stops and keeps `FILE.part`, so
// running the same command again resumes. HF_TOKEN, when set, authorizes huggingface.co URLs.
// The last stdout line names the file, its size and sha256 (to pin it next time).
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "commands.h"
#include "diskformer/store.h"

namespace {

struct PullArgs {
    std::string url, out, sha256;
    uint64_t size = 0;
    int attempts = 5;
};

std::atomic<bool> g_stop{false};

// The last segment of the URL's path (after the host), without query or fragment.
std::string file_name_of(const std::string& url) {
    const std::string bare = url.substr(0, url.find_first_of("?#"));
    const size_t scheme = bare.find("://");
    const size_t path = bare.find('/', scheme == std::string::npos ? 0 : scheme + 3);
    const std::string name = path == std::string::npos ? "" : bare.substr(bare.rfind('/') + 1);
    if (name.empty() || name == "." || name == "..")
        throw std::runtime_error("cannot take a file name from '" + url + "': give one with -o");
    return name;
}

void run_pull(const PullArgs& a) {
    const std::string out = a.out.empty() ? file_name_of(a.url) : a.out;
    diskformer::store::Expect expect;
    if (a.size) expect.size = a.size;
    expect.sha256 = a.sha256;
    diskformer::store::FetchOptions o;
    o.attempts = a.attempts;
    if (const char* token = std::getenv("HF_TOKEN"); token && a.url.find("://huggingface.co/") != std::string::npos)
        o.bearer_token = token;  // gated repositories on the Hugging Face hub
    const bool tty = ::isatty(STDERR_FILENO);
    const auto t0 = std::chrono::steady_clock::now();
    auto last = t0;
    uint64_t first_have = ~uint64_t{0};
    o.on_progress = [&](uint64_t have, uint64_t total) {
        if (g_stop) return false;
        const auto now = std::chrono::steady_clock::now();
        if (have < first_have) first_have = have;  // the first call, or a server that starts over
        if (tty && now - last > std::chrono::milliseconds(200)) {
            last = now;
            const double s = std::chrono::duration<double>(now - t0).count();
            const double mbs = s > 0 ? (have - first_have) / s / 1e6 : 0;
            if (total)
                std::fprintf(stderr, "\r%s: %.1f%% of %.2f GB, %.1f MB/s   ", out.c_str(), 100.0 * have / total, total / 1e9, mbs);
            else
                std::fprintf(stderr, "\r%s: %.2f GB, %.1f MB/s   ", out.c_str(), have / 1e9, mbs);
        }
        return true;
    };
    struct sigaction sa = {}, old = {};
    sa.sa_handler = [](int) { g_stop = true; };
    sigaction(SIGINT, &sa, &old);
    std::unique_ptr<struct sigaction, void (*)(struct sigaction*)> restore(&old, [](struct sigaction* s) { sigaction(SIGINT, s, nullptr); });
    const auto r = diskformer::store::fetch(a.url, out, expect, o);
    if (tty) std::fprintf(stderr, "\r\033[K");
    if (r.already_present)
        std::fprintf(stderr, "%s is already here\n", r.path.c_str());
    else if (r.resumed_from)
        std::fprintf(stderr, "resumed from byte %llu\n", static_cast<unsigned long long>(r.resumed_from));
    if (r.sha256_from_server) std::fprintf(stderr, "sha256 matches the digest the server gave\n");
    else if (!r.sha256_checked && !r.already_present) std::fprintf(stderr, "sha256 not checked (none given, none from the server): pin it with --sha256\n");
    std::printf("%s  %llu bytes  sha256 %s\n", r.path.c_str(), static_cast<unsigned long long>(r.bytes), r.sha256.c_str());
}

}  // namespace

void register_pull(CLI::App& app) {
    auto a = std::make_shared<PullArgs>();
    auto* c = app.add_subcommand("pull", "Download a model file (resumes an interrupted download; checks size and sha256)");
    c->add_option("url", a->url, "http(s) address of the file")->required();
    c->add_option("-o,--out", a->out, "where to save it (default: the URL's file name, here)");
    c->add_option("--sha256", a->sha256, "expected sha256 (64 hex digits): a file that differs is removed");
    c->add_option("--size", a->size, "expected size in bytes");
    c->add_option("--attempts", a->attempts, "transfers tried before giving up (each resumes)")->check(CLI::PositiveNumber);
    c->callback([a] { run_pull(*a); });
}
