// `diskformer pull` against a loopback server: the file and its sha256 line on success, one
// line on stderr and exit 1 when the digest is wrong or the server says no.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

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

TEST(Pull, NeedsANameWhenTheUrlHasNone) {
    for (const char* url : {"http://127.0.0.1:9/", "http://127.0.0.1:9", "https://example.org/models/?x=1"}) {
        const auto r = df::test::run_diskformer(std::string("pull '") + url + "'");
        EXPECT_EQ(r.code, 1) << url;
        EXPECT_NE(r.err.find("give one with -o"), std::string::npos) << url << ": " << r.err;
    }
}

}  // namespace
