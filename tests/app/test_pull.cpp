// `diskformer pull` against a loopback server: the file and its sha256 line on success, one
// line on stderr and exit 1 when the digest is wrong or the server says no.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/mini_http.h"
#include "common/run_cli.h"

namespace {

namespace fs = std::filesystem;

TEST(Pull, SavesTheFileAndPrintsItsDigest) {
    const fs::path dir = fs::temp_directory_path() / ("df_pull_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::string blob(1 << 20, '\0');
    for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<char>(i * 2654435761u >> 13);
    df::test::MiniHttp http([&](const df::test::HttpRequest& r) {
        if (r.path != "/files/tiny.gguf?download=true") {
            df::test::HttpReply no;
            no.status = 404;
            return no;
        }
        return df::test::serve_range(r, blob);
    });
    const std::string url = http.url("/files/tiny.gguf?download=true");
    // The name comes from the URL's path; the digest is printed for pinning.
    const auto a = df::test::run_diskformer("pull '" + url + "' -o " + df::test::shell_quote(dir / "a.gguf"));
    ASSERT_EQ(a.code, 0) << a.err;
    EXPECT_EQ(df::test::slurp(dir / "a.gguf"), blob);
    EXPECT_NE(a.err.find("warning: "), std::string::npos) << "the bytes are not a model: " << a.err;
    const size_t at = a.out.find("sha256 ");
    ASSERT_NE(at, std::string::npos) << a.out;
    const std::string sha = a.out.substr(at + 7, 64);
    EXPECT_NE(a.out.find(std::to_string(blob.size()) + " bytes"), std::string::npos) << a.out;

    // Pinned: the same digest passes (the file is already there: no transfer), another fails.
    const auto again = df::test::run_diskformer("pull '" + url + "' -o " + df::test::shell_quote(dir / "a.gguf") + " --sha256 " + sha);
    EXPECT_EQ(again.code, 0) << again.err;
    EXPECT_NE(again.err.find("already"), std::string::npos) << again.err;
    std::string wrong = sha;
    wrong[0] = wrong[0] == 'a' ? 'b' : 'a';
    const auto bad = df::test::run_diskformer("pull '" + url + "' -o " + df::test::shell_quote(dir / "b.gguf") + " --sha256 " + wrong);
    EXPECT_EQ(bad.code, 1);
    EXPECT_EQ(bad.err.rfind("error: ", 0), 0u) << bad.err;
    EXPECT_EQ(bad.err.find('\n'), bad.err.size() - 1) << bad.err;
    EXPECT_NE(bad.err.find("sha256"), std::string::npos) << bad.err;
    EXPECT_FALSE(fs::exists(dir / "b.gguf"));
    EXPECT_FALSE(fs::exists(dir / "b.gguf.part"));

    const auto missing = df::test::run_diskformer("pull '" + http.url("/nope.gguf") + "' -o " + df::test::shell_quote(dir / "c.gguf"));
    EXPECT_EQ(missing.code, 1);
    EXPECT_NE(missing.err.find("HTTP 404"), std::string::npos) << missing.err;
    EXPECT_FALSE(fs::exists(dir / "c.gguf"));
    fs::remove_all(dir);
}

// Without -o a pull lands in the model store (DISKFORMER_HOME) under the file's name, and every
// command's -m finds it by that name; import / list / rm manage the store.
TEST(Pull, IntoTheStoreWhereRunFindsItByName) {
    const fs::path dir = fs::temp_directory_path() / ("df_pull_store_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    ::setenv("DISKFORMER_HOME", (dir / "home").c_str(), 1);
    const fs::path tiny = dir / "tiny.gguf";
    ASSERT_EQ(df::test::run_diskformer("synth --preset tiny-qwen3 --out " + df::test::shell_quote(tiny)).code, 0);
    const std::string blob = df::test::slurp(tiny);
    df::test::MiniHttp http([&](const df::test::HttpRequest& r) { return df::test::serve_range(r, blob); });

    const auto empty = df::test::run_diskformer("list");
    EXPECT_EQ(empty.code, 0) << empty.err;
    EXPECT_NE(empty.err.find("empty"), std::string::npos) << empty.err;

    // What does not load (a web page served for a wrong address) does not enter the store.
    const std::string page = "<!DOCTYPE html><html>not found</html>";
    df::test::MiniHttp web([&](const df::test::HttpRequest& r) { return df::test::serve_range(r, page); });
    const auto html = df::test::run_diskformer("pull '" + web.url("/repo/blob/main/Page.gguf") + "'");
    EXPECT_EQ(html.code, 1);
    EXPECT_NE(html.err.find("not added to the store"), std::string::npos) << html.err;
    EXPECT_FALSE(fs::exists(dir / "home" / "models" / "Page.gguf"));

    const auto p = df::test::run_diskformer("pull '" + http.url("/repo/Tiny-Q8_0.gguf") + "'");
    ASSERT_EQ(p.code, 0) << p.err;
    EXPECT_NE(p.err.find("in the store as 'Tiny-Q8_0'"), std::string::npos) << p.err;
    EXPECT_EQ(df::test::slurp(dir / "home" / "models" / "Tiny-Q8_0.gguf"), blob);
    const auto run = df::test::run_diskformer("run -m Tiny-Q8_0 --backend cpu -p hi -n 2");
    EXPECT_EQ(run.code, 0) << run.err;
    const auto by_file = df::test::run_diskformer("run -m Tiny-Q8_0.gguf --backend cpu -p hi -n 2");
    EXPECT_EQ(by_file.code, 0) << by_file.err;

    // import: a copy under another name, checked to be a model first.
    const auto imp = df::test::run_diskformer("import " + df::test::shell_quote(tiny) + " --name tiny");
    ASSERT_EQ(imp.code, 0) << imp.err;
    const fs::path junk = dir / "junk.gguf";
    std::ofstream(junk) << "not a model";
    const auto bad = df::test::run_diskformer("import " + df::test::shell_quote(junk));
    EXPECT_EQ(bad.code, 1);
    EXPECT_NE(bad.err.find("GGUF"), std::string::npos) << bad.err;
    const auto twice = df::test::run_diskformer("import " + df::test::shell_quote(tiny) + " --name tiny");
    EXPECT_EQ(twice.code, 1);
    EXPECT_NE(twice.err.find("already has"), std::string::npos) << twice.err;

    const auto ls = df::test::run_diskformer("list --json");
    ASSERT_EQ(ls.code, 0) << ls.err;
    const auto j = nlohmann::json::parse(ls.out);
    ASSERT_EQ(j.size(), 2u) << ls.out;
    EXPECT_EQ(j[0]["name"], "Tiny-Q8_0");
    EXPECT_EQ(j[0]["source"], http.url("/repo/Tiny-Q8_0.gguf"));
    EXPECT_EQ(j[1]["name"], "tiny");
    EXPECT_EQ(j[0]["sha256"], j[1]["sha256"]);
    EXPECT_EQ(j[1]["present"], true);

    const auto missing = df::test::run_diskformer("run -m nothing-here -p hi");
    EXPECT_EQ(missing.code, 1);
    EXPECT_NE(missing.err.find("it has: Tiny-Q8_0, tiny"), std::string::npos) << missing.err;

    EXPECT_EQ(df::test::run_diskformer("rm Tiny-Q8_0").code, 0);
    EXPECT_FALSE(fs::exists(dir / "home" / "models" / "Tiny-Q8_0.gguf"));
    EXPECT_EQ(df::test::run_diskformer("rm Tiny-Q8_0").code, 1);
    ::unsetenv("DISKFORMER_HOME");

    // With no store to be found (no HOME), a file still runs; a name says what is missing.
    const std::string home = std::getenv("HOME") ? std::getenv("HOME") : "";
    const std::string xdg = std::getenv("XDG_DATA_HOME") ? std::getenv("XDG_DATA_HOME") : "";
    ::unsetenv("HOME");
    ::unsetenv("XDG_DATA_HOME");
    const auto file = df::test::run_diskformer("run -m " + df::test::shell_quote(tiny) + " --backend cpu -p hi -n 2");
    const auto named = df::test::run_diskformer("run -m tiny --backend cpu -p hi -n 2");
    if (!home.empty()) ::setenv("HOME", home.c_str(), 1);
    if (!xdg.empty()) ::setenv("XDG_DATA_HOME", xdg.c_str(), 1);
    EXPECT_EQ(file.code, 0) << file.err;
    EXPECT_EQ(named.code, 1);
    EXPECT_NE(named.err.find("DISKFORMER_HOME"), std::string::npos) << named.err;
    fs::remove_all(dir);
}

TEST(Pull, HubShorthandMustNameOwnerRepoAndFile) {
    for (const char* arg : {"hf:Qwen", "hf:Qwen/Qwen3-4B-GGUF", "hf:Qwen/Qwen3-4B-GGUF/", "hf:/x/y", "hf:Qwen/Qwen3-4B-GGUF/f.gguf@"}) {
        const auto r = df::test::run_diskformer(std::string("pull '") + arg + "' -o /tmp/never.gguf");
        EXPECT_EQ(r.code, 1) << arg;
        EXPECT_NE(r.err.find("hf:OWNER/REPO/FILE"), std::string::npos) << arg << ": " << r.err;
    }
}

TEST(Pull, NeedsANameWhenTheUrlHasNone) {
    for (const char* url : {"http://127.0.0.1:9/", "http://127.0.0.1:9", "https://example.org/models/?x=1"}) {
        const auto r = df::test::run_diskformer(std::string("pull '") + url + "'");
        EXPECT_EQ(r.code, 1) << url;
        EXPECT_NE(r.err.find("give one with --name"), std::string::npos) << url << ": " << r.err;
    }
}

}  // namespace
