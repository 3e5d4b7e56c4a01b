// The local model store: import by copy / hard link / move with the digest recorded, names
// checked, entries found and removed, -m style resolution, a broken catalog named, and
// concurrent writers that never lose each other's entries.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "common/run_cli.h"
#include "diskformer/store.h"

namespace {

namespace fs = std::filesystem;
namespace store = diskformer::store;
using df::test::slurp;

class StoreTest : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("df_store_" + std::to_string(::getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_ / "src");
    }
    void TearDown() override { fs::remove_all(dir_); }
    fs::path make_file(const std::string& name, size_t n, uint32_t seed) const {
        std::mt19937 rng(seed);
        std::string s(n, '\0');
        for (auto& c : s) c = static_cast<char>(rng());
        const fs::path p = dir_ / "src" / name;
        std::ofstream(p, std::ios::binary) << s;
        return p;
    }
    fs::path root() const { return dir_ / "home"; }

    fs::path dir_;
};

TEST_F(StoreTest, ImportsByCopyLinkAndMoveWithTheirDigests) {
    store::Store s(root().string());
    EXPECT_TRUE(s.list().empty());
    const fs::path a = make_file("a.gguf", 5 * 1024 * 1024 + 3, 1);  // more than one 4 MiB piece
    const std::string sha_a = store::sha256_file(a.string());

    const auto copied = s.import(a.string(), "model-a", store::ImportMode::copy);
    EXPECT_EQ(copied.sha256, sha_a);
    EXPECT_EQ(copied.size, fs::file_size(a));
    EXPECT_EQ(slurp(copied.path), slurp(a));
    EXPECT_EQ(fs::path(copied.path), root() / "models" / "model-a.gguf");
    EXPECT_EQ(copied.source, "import:" + a.string());
    EXPECT_TRUE(fs::exists(a)) << "a copy leaves the original";

    const auto linked = s.import(a.string(), "model-b", store::ImportMode::link);
    EXPECT_EQ(linked.sha256, sha_a);
    EXPECT_TRUE(fs::equivalent(linked.path, a)) << "a hard link is the same file";

    const fs::path c = make_file("c.gguf", 1000, 2);
    const std::string sha_c = store::sha256_file(c.string());
    const auto moved = s.import(c.string(), "qwen3:4b-q8_0", store::ImportMode::move);
    EXPECT_EQ(moved.sha256, sha_c);
    EXPECT_FALSE(fs::exists(c)) << "a move takes the original";

    const auto all = s.list();
    ASSERT_EQ(all.size(), 3u);
    EXPECT_EQ(all[0].name, "model-a");
    EXPECT_EQ(all[1].name, "model-b");
    EXPECT_EQ(all[2].name, "qwen3:4b-q8_0");
    // A second Store over the same root reads what the first wrote.
    const auto again = store::Store(root().string()).find("qwen3:4b-q8_0");
    ASSERT_TRUE(again);
    EXPECT_EQ(again->sha256, sha_c);
    EXPECT_EQ(again->size, 1000u);
    EXPECT_FALSE(again->added.empty());
    for (const auto& e : all) EXPECT_FALSE(fs::exists(e.path + ".part"));
}

TEST_F(StoreTest, ANameIsTakenOnceAndChecked) {
    store::Store s(root().string());
    const fs::path a = make_file("a.gguf", 100, 1), b = make_file("b.gguf", 200, 2);
    s.import(a.string(), "m", store::ImportMode::copy);
    EXPECT_THROW(s.import(b.string(), "m", store::ImportMode::copy), diskformer::Error);
    EXPECT_EQ(s.find("m")->size, 100u) << "refused: the first stays";
    const auto replaced = s.import(b.string(), "m", store::ImportMode::copy, /*replace=*/true);
    EXPECT_EQ(replaced.size, 200u);
    EXPECT_EQ(slurp(s.find("m")->path), slurp(b));
    for (const char* bad : {"", ".", "..", ".hidden", "a/b", "../up", "sp ace", "a\\b", "x\n"})
        EXPECT_THROW(s.import(a.string(), bad, store::ImportMode::copy), diskformer::Error) << '"' << bad << '"';
    EXPECT_THROW(s.import(a.string(), std::string(129, 'x'), store::ImportMode::copy), diskformer::Error);
    EXPECT_THROW(s.import((dir_ / "src" / "missing.gguf").string(), "n", store::ImportMode::copy), diskformer::Error);
    EXPECT_THROW(s.import(s.find("m")->path, "m", store::ImportMode::copy, true), diskformer::Error)
        << "the store's own file onto itself";
    EXPECT_EQ(slurp(s.find("m")->path), slurp(b)) << "and that refusal left it whole";
    EXPECT_EQ(s.list().size(), 1u);
}

TEST_F(StoreTest, RemoveDropsTheEntryAndTheFile) {
    store::Store s(root().string());
    const auto e = s.import(make_file("a.gguf", 100, 1).string(), "m", store::ImportMode::copy);
    EXPECT_TRUE(s.remove("m"));
    EXPECT_FALSE(fs::exists(e.path));
    EXPECT_FALSE(s.find("m"));
    EXPECT_FALSE(s.remove("m"));
    // An entry whose file someone deleted is still removable.
    const auto f = s.import(make_file("b.gguf", 100, 2).string(), "n", store::ImportMode::copy);
    fs::remove(f.path);
    EXPECT_TRUE(s.remove("n"));
    EXPECT_TRUE(s.list().empty());
}

TEST_F(StoreTest, ResolvesFilesThenNamesAndSaysWhatItHas) {
    store::Store s(root().string());
    const fs::path a = make_file("a.gguf", 100, 1);
    const auto e = s.import(a.string(), "qwen3-4b", store::ImportMode::copy);
    EXPECT_EQ(store::resolve_model(a.string(), s), a.string()) << "an existing file as it is";
    EXPECT_EQ(store::resolve_model("qwen3-4b", s), e.path);
    EXPECT_EQ(store::resolve_model("qwen3-4b.gguf", s), e.path) << "the file name works as the name";
    try {
        store::resolve_model("nope", s);
        FAIL();
    } catch (const diskformer::Error& err) {
        EXPECT_NE(std::string(err.what()).find("it has: qwen3-4b"), std::string::npos) << err.what();
    }
    try {
        store::resolve_model("nope", store::Store((dir_ / "empty").string()));
        FAIL();
    } catch (const diskformer::Error& err) {
        EXPECT_NE(std::string(err.what()).find("empty"), std::string::npos) << err.what();
    }
    fs::remove(e.path);
    try {
        store::resolve_model("qwen3-4b", s);
        FAIL();
    } catch (const diskformer::Error& err) {
        EXPECT_NE(std::string(err.what()).find("missing its file"), std::string::npos) << err.what();
    }
}

TEST_F(StoreTest, ABrokenCatalogIsNamedNotGuessed) {
    fs::create_directories(root());
    std::ofstream(root() / "catalog.json") << "{\"models\": [";
    store::Store s(root().string());
    try {
        s.list();
        FAIL();
    } catch (const diskformer::Error& e) {
        EXPECT_NE(std::string(e.what()).find("catalog.json"), std::string::npos) << e.what();
    }
    EXPECT_THROW(s.import(make_file("a.gguf", 10, 1).string(), "m", store::ImportMode::copy), diskformer::Error);
    std::ofstream(root() / "catalog.json", std::ios::trunc) << "[1, 2]";
    EXPECT_THROW(s.list(), diskformer::Error);
}

TEST_F(StoreTest, ConcurrentWritersKeepEveryEntry) {
    // Each import reads, changes and rewrites the catalog under the lock: none is lost.
    constexpr int kThreads = 6, kEach = 5;
    std::vector<fs::path> files;
    for (int i = 0; i < kThreads * kEach; ++i) files.push_back(make_file("f" + std::to_string(i), 64 + i, i));
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            store::Store s(root().string());  // a Store per thread, as separate processes would
            for (int k = 0; k < kEach; ++k) {
                const int i = t * kEach + k;
                s.import(files[static_cast<size_t>(i)].string(), "m" + std::to_string(i), store::ImportMode::copy);
            }
        });
    for (auto& th : threads) th.join();
    const auto all = store::Store(root().string()).list();
    ASSERT_EQ(all.size(), static_cast<size_t>(kThreads * kEach));
    for (const auto& e : all) EXPECT_EQ(e.sha256, store::sha256_file(e.path)) << e.name;
}

TEST(StoreRoot, FromTheEnvironment) {
    const char* old_home = std::getenv("DISKFORMER_HOME");
    const std::string saved = old_home ? old_home : "";
    ::setenv("DISKFORMER_HOME", "/tmp/df-home-x", 1);
    EXPECT_EQ(store::Store::default_root(), "/tmp/df-home-x");
    ::unsetenv("DISKFORMER_HOME");
    const char* xdg = std::getenv("XDG_DATA_HOME");
    const std::string saved_xdg = xdg ? xdg : "";
    ::setenv("XDG_DATA_HOME", "/tmp/xdg", 1);
    EXPECT_EQ(store::Store::default_root(), "/tmp/xdg/diskformer");
    ::unsetenv("XDG_DATA_HOME");
    if (const char* home = std::getenv("HOME")) {
        EXPECT_EQ(store::Store::default_root(), std::string(home) + "/.local/share/diskformer");
    }
    if (!saved_xdg.empty()) ::setenv("XDG_DATA_HOME", saved_xdg.c_str(), 1);
    if (!saved.empty()) ::setenv("DISKFORMER_HOME", saved.c_str(), 1);
}

}  // namespace
