// Runs the built `diskformer` binary with stdout and stderr captured (not a terminal: no ANSI
// colours; stdin /dev/null unless the arguments redirect it), for the CLI tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace df::test {

struct CliOutcome {
    int code = -1;
    std::string out, err;
};

inline std::string slurp(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
}

inline std::filesystem::path diskformer_binary() { return std::filesystem::path(DF_BINARY_DIR) / "app" / "diskformer"; }

// `args` is shell text after the binary (quote paths with shell_quote).
inline CliOutcome run_diskformer(const std::string& args) {
    namespace fs = std::filesystem;
    const fs::path bin = diskformer_binary();
    if (!fs::exists(bin)) {
        ADD_FAILURE() << bin << " is missing: build the diskformer target";
        return {};
    }
    const std::string tmp = (fs::temp_directory_path() / ("df_cli_" + std::to_string(::getpid()))).string();
    // The later redirection wins, so args may redirect stdin themselves.
    const std::string cmd = "'" + bin.string() + "' </dev/null " + args + " >'" + tmp + ".out' 2>'" + tmp + ".err'";
    const int status = std::system(cmd.c_str());
    CliOutcome r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(tmp + ".out");
    r.err = slurp(tmp + ".err");
    fs::remove(tmp + ".out");
    fs::remove(tmp + ".err");
    return r;
}

inline std::string shell_quote(const std::filesystem::path& p) { return "'" + p.string() + "'"; }

}  // namespace df::test
