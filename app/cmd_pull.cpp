// diskformer pull: fetch a model file over HTTP(S), resumable and checked (store::fetch), into
// the model store (or to a file with -o).
//
//   diskformer pull https://host/path/Model-Q8_0.gguf [--name NAME | -o FILE] [--sha256 HEX] [--size BYTES]
//   diskformer pull hf:Qwen/Qwen3-4B-GGUF/Qwen3-4B-Q8_0.gguf      (the hub's resolve URL, main)
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
#include <filesystem>
#include <memory>
#include <string>

#include "cli_common.h"
#include "commands.h"
#include "diskformer/store.h"

namespace {

struct PullArgs {
    std::string url, out, name, sha256;
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
        throw std::runtime_error("cannot take a file name from '" + url + "': give one with --name (or -o for a file)");
    return name;
}

// hf:OWNER/REPO/PATH[@REVISION] -> the hub's resolve URL; anything else as it is.
std::string expand_url(const std::string& arg) {
    if (arg.rfind("hf:", 0) != 0) return arg;
    std::string rest = arg.substr(3), rev = "main";
    if (const size_t at = rest.rfind('@'); at != std::string::npos) {
        rev = rest.substr(at + 1);
        rest.resize(at);
    }
    const size_t s1 = rest.find('/'), s2 = s1 == std::string::npos ? s1 : rest.find('/', s1 + 1);
    if (s2 == std::string::npos || s2 + 1 >= rest.size() || rev.empty() || s1 == 0 || s2 == s1 + 1)
        throw std::runtime_error("'" + arg + "' is not hf:OWNER/REPO/FILE[@REVISION]");
    return "https://huggingface.co/" + rest.substr(0, s2) + "/resolve/" + rev + "/" + rest.substr(s2 + 1);
}

void run_pull(PullArgs a) {
    a.url = expand_url(a.url);
    // Into the store unless -o names a file: as NAME, else the URL's file name without .gguf.
    std::unique_ptr<diskformer::store::Store> into;
    std::string name;
    if (a.out.empty()) {
        into = std::make_unique<diskformer::store::Store>(store_root());
        name = a.name;
        if (name.empty()) {
            name = file_name_of(a.url);
            if (name.size() > 5 && name.ends_with(".gguf")) name.resize(name.size() - 5);
        }
    }
    const std::string out = into ? into->file_for(name) : a.out;
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
    // What was fetched must load: a wrong address can serve a web page with status 200.
    try {
        check_model_file(r.path);
    } catch (const std::exception& e) {  // the GGUF reader's errors too
        if (!into) {
            std::fprintf(stderr, "warning: %s\n", e.what());  // -o: the file is kept as asked
        } else {
            std::error_code ec;
            std::filesystem::remove(r.path, ec);
            throw diskformer::Error(std::string(e.what()) + "; removed, not added to the store");
        }
    }
    if (into) {
        into->record(name, r.bytes, r.sha256, a.url);
        std::fprintf(stderr, "in the store as '%s' (diskformer run -m %s)\n", name.c_str(), name.c_str());
    }
    std::printf("%s  %llu bytes  sha256 %s\n", r.path.c_str(), static_cast<unsigned long long>(r.bytes), r.sha256.c_str());
}

}  // namespace

void register_pull(CLI::App& app) {
    auto a = std::make_shared<PullArgs>();
    auto* c = app.add_subcommand("pull", "Download a model into the store, or to a file (resumes an interrupted download; checks size, sha256 and that it loads)");
    c->add_option("url", a->url, "http(s) address of the file, or hf:OWNER/REPO/FILE[@REVISION] on the Hugging Face hub")->required();
    auto* out = c->add_option("-o,--out", a->out, "save it to this file instead of the store");
    c->add_option("--name", a->name, "its name in the store (default: the file name without .gguf)")->excludes(out);
    c->add_option("--sha256", a->sha256, "expected sha256 (64 hex digits): a file that differs is removed");
    c->add_option("--size", a->size, "expected size in bytes");
    c->add_option("--attempts", a->attempts, "transfers tried before giving up (each resumes)")->check(positive());
    c->callback([a] { run_pull(*a); });
}
