// store::fetch against a loopback server whose every answer the test picks: complete transfers,
// cut ones and their resumes, servers that ignore Range, HTTP errors, and files whose size or
// sha256 is wrong (never kept).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "common/mini_http.h"
#include "common/run_cli.h"
#include "diskformer/store.h"

namespace {

namespace fs = std::filesystem;
namespace store = diskformer::store;
using df::test::HttpReply;
using df::test::HttpRequest;
using df::test::MiniHttp;
using df::test::slurp;

std::string make_blob(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    return s;
}

void write_file(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

store::Expect with_sha(const std::string& sha) { return store::Expect{std::nullopt, sha}; }
store::Expect with_size(uint64_t size) { return store::Expect{size, ""}; }
HttpReply reply(int status, const std::string& body) {
    HttpReply r;
    r.status = status;
    r.body = body;
    return r;
}

class Fetch : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("df_fetch_" + std::to_string(::getpid()) + "_" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        blob_ = make_blob(3 * 1024 * 1024 + 77, 7);
        write_file(dir_ / "ref", blob_);
        sha_ = store::sha256_file((dir_ / "ref").string());
    }
    void TearDown() override { fs::remove_all(dir_); }
    store::FetchOptions quick(int attempts = 3) const {
        store::FetchOptions o;
        o.attempts = attempts;
        o.retry_delay_ms = 5;
        return o;
    }
    fs::path dest() const { return dir_ / "sub" / "model.gguf"; }
    fs::path part() const { return dest().string() + ".part"; }

    fs::path dir_;
    std::string blob_, sha_;
};

TEST(Sha256, KnownVectors) {
    const fs::path p = fs::temp_directory_path() / ("df_sha_" + std::to_string(::getpid()));
    write_file(p, "abc");
    EXPECT_EQ(store::sha256_file(p.string()), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    write_file(p, "");
    EXPECT_EQ(store::sha256_file(p.string()), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    fs::remove(p);
    EXPECT_THROW(store::sha256_file(p.string()), diskformer::Error);
}

TEST_F(Fetch, DownloadsChecksAndRenames) {
    MiniHttp http([&](const HttpRequest& r) { return df::test::serve_range(r, blob_); });
    int calls = 0;
    uint64_t last_have = 0, last_total = 0;
    auto o = quick();
    o.on_progress = [&](uint64_t have, uint64_t total) {
        ++calls;
        EXPECT_GE(have, last_have);
        last_have = have;
        last_total = total;
        return true;
    };
    const auto r = store::fetch(http.url("/m.gguf"), dest().string(), store::Expect{blob_.size(), sha_}, o);
    EXPECT_EQ(slurp(dest()), blob_);
    EXPECT_FALSE(fs::exists(part()));
    EXPECT_EQ(r.bytes, blob_.size());
    EXPECT_EQ(r.sha256, sha_);
    EXPECT_EQ(r.resumed_from, 0u);
    EXPECT_FALSE(r.already_present);
    EXPECT_GT(calls, 0);
    EXPECT_EQ(last_total, blob_.size());
    ASSERT_EQ(http.requests().size(), 1u);
    EXPECT_FALSE(http.requests()[0].range_from);
}

TEST_F(Fetch, ACutTransferIsResumedFromWhereItStopped) {
    int n = 0;
    MiniHttp http([&](const HttpRequest& r) {
        HttpReply rep = df::test::serve_range(r, blob_);
        if (n++ == 0) rep.cut_after = 1000000;  // the first transfer drops after ~1 MB
        return rep;
    });
    const auto r = store::fetch(http.url("/m.gguf"), dest().string(), with_sha(sha_), quick());
    EXPECT_EQ(slurp(dest()), blob_);
    const auto reqs = http.requests();
    ASSERT_EQ(reqs.size(), 2u);
    ASSERT_TRUE(reqs[1].range_from);
    EXPECT_EQ(*reqs[1].range_from, 1000000u);
    EXPECT_EQ(r.sha256, sha_);
}

TEST_F(Fetch, APartFromAnEarlierRunIsResumed) {
    fs::create_directories(dest().parent_path());
    write_file(part(), blob_.substr(0, 700001));
    MiniHttp http([&](const HttpRequest& r) { return df::test::serve_range(r, blob_); });
    const auto r = store::fetch(http.url("/m.gguf"), dest().string(), with_sha(sha_), quick());
    EXPECT_EQ(r.resumed_from, 700001u);
    EXPECT_EQ(slurp(dest()), blob_);
    ASSERT_EQ(http.requests().size(), 1u);
    EXPECT_EQ(http.requests()[0].range_from.value_or(0), 700001u);
}

TEST_F(Fetch, StaleBytesFromAnEarlierRunAreFetchedAgain) {
    fs::create_directories(dest().parent_path());
    write_file(part(), std::string(700001, 'x'));  // another version's bytes: the digest cannot match
    MiniHttp http([&](const HttpRequest& r) { return df::test::serve_range(r, blob_); });
    const auto r = store::fetch(http.url("/m.gguf"), dest().string(), with_sha(sha_), quick());
    EXPECT_EQ(slurp(dest()), blob_);
    EXPECT_EQ(r.resumed_from, 0u);
    const auto reqs = http.requests();
    ASSERT_EQ(reqs.size(), 2u);  // the resume, then the whole file
    EXPECT_EQ(reqs[0].range_from.value_or(0), 700001u);
    EXPECT_FALSE(reqs[1].range_from);
}

TEST_F(Fetch, AServerThatIgnoresRangeStartsOver) {
    fs::create_directories(dest().parent_path());
    write_file(part(), std::string(5000, 'x'));  // not even the file's bytes
    MiniHttp http([&](const HttpRequest&) { return reply(200, blob_); });
    store::fetch(http.url("/m.gguf"), dest().string(), with_sha(sha_), quick());
    EXPECT_EQ(slurp(dest()), blob_);
}

TEST_F(Fetch, ARangeThatStartsElsewhereIsNotAppended) {
    fs::create_directories(dest().parent_path());
    write_file(part(), blob_.substr(0, 5000));
    MiniHttp http([&](const HttpRequest& r) {
        if (!r.range_from) return df::test::serve_range(r, blob_);
        HttpRequest off = r;
        off.range_from = 4000;  // 1000 bytes before the part's end
        return df::test::serve_range(off, blob_);
    });
    store::fetch(http.url("/m.gguf"), dest().string(), with_sha(sha_), quick());
    EXPECT_EQ(slurp(dest()), blob_);
    EXPECT_EQ(http.requests().size(), 2u);
}

TEST_F(Fetch, ACompletePartIsFinishedOnA416) {
    fs::create_directories(dest().parent_path());
    write_file(part(), blob_);
    MiniHttp http([&](const HttpRequest& r) { return df::test::serve_range(r, blob_); });
    const auto r = store::fetch(http.url("/m.gguf"), dest().string(), with_sha(sha_), quick());
    EXPECT_EQ(r.bytes, blob_.size());
    EXPECT_EQ(slurp(dest()), blob_);
    EXPECT_FALSE(fs::exists(part()));
}

TEST_F(Fetch, AWrongSha256RemovesTheFile) {
    MiniHttp http([&](const HttpRequest& r) { return df::test::serve_range(r, blob_); });
    std::string wrong = sha_;
    wrong[10] = wrong[10] == '0' ? '1' : '0';
    try {
        store::fetch(http.url("/m.gguf"), dest().string(), with_sha(wrong), quick());
        FAIL() << "expected a sha256 error";
    } catch (const diskformer::Error& e) {
        EXPECT_NE(std::string(e.what()).find("sha256"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(sha_), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(dest()));
    EXPECT_FALSE(fs::exists(part()));
}

// The hub's resolve URL: a redirect naming the LFS object's digest and size, then the bytes.
HttpReply hub(const HttpRequest& r, const std::string& blob, const std::string& sha) {
    if (r.path != "/resolve/m.gguf") return df::test::serve_range(r, blob);
    HttpReply rep = reply(302, "");
    rep.headers = {"Location: /cdn/m.gguf", "X-Linked-Etag: \"" + sha + "\"", "X-Linked-Size: " + std::to_string(blob.size())};
    return rep;
}

TEST_F(Fetch, TheServersDigestIsCheckedWhenNoneIsGiven) {
    MiniHttp http([&](const HttpRequest& r) { return hub(r, blob_, sha_); });
    const auto r = store::fetch(http.url("/resolve/m.gguf"), dest().string(), {}, quick());
    EXPECT_EQ(slurp(dest()), blob_);
    EXPECT_TRUE(r.sha256_checked);
    EXPECT_TRUE(r.sha256_from_server);
    ASSERT_EQ(http.requests().size(), 2u);
    EXPECT_EQ(http.requests()[1].path, "/cdn/m.gguf");

    // A digest the caller gives wins over the server's.
    fs::remove(dest());
    const auto mine = store::fetch(http.url("/resolve/m.gguf"), dest().string(), with_sha(sha_), quick());
    EXPECT_TRUE(mine.sha256_checked);
    EXPECT_FALSE(mine.sha256_from_server);

    // A server that names no digest: nothing to check against, and the result says so.
    fs::remove(dest());
    MiniHttp plain([&](const HttpRequest& q) { return df::test::serve_range(q, blob_); });
    const auto unchecked = store::fetch(plain.url("/m.gguf"), dest().string(), {}, quick());
    EXPECT_EQ(slurp(dest()), blob_);
    EXPECT_FALSE(unchecked.sha256_checked);
}

TEST_F(Fetch, BytesThatDisagreeWithTheServersDigestAreNotKept) {
    std::string wrong = sha_;
    wrong[3] = wrong[3] == 'a' ? 'b' : 'a';
    MiniHttp http([&](const HttpRequest& r) { return hub(r, blob_, wrong); });
    try {
        store::fetch(http.url("/resolve/m.gguf"), dest().string(), {}, quick());
        FAIL() << "expected a sha256 error";
    } catch (const diskformer::Error& e) {
        EXPECT_NE(std::string(e.what()).find("the digest the server gave"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(wrong), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(dest()));
    EXPECT_FALSE(fs::exists(part()));
}

TEST_F(Fetch, OneDownloadToAFileAtATime) {
    MiniHttp http([&](const HttpRequest& r) { return df::test::serve_range(r, blob_); });
    fs::create_directories(dest().parent_path());
    const std::string lock = dest().string() + ".lock";
    {
        const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT, 0644);  // another download holds it
        ASSERT_GE(fd, 0);
        ASSERT_EQ(::flock(fd, LOCK_EX), 0);
        try {
            store::fetch(http.url("/m.gguf"), dest().string(), {}, quick());
            FAIL() << "expected the second download to be refused";
        } catch (const diskformer::Error& e) {
            EXPECT_NE(std::string(e.what()).find("in progress"), std::string::npos) << e.what();
        }
        EXPECT_TRUE(http.requests().empty()) << "refused before any transfer";
        ::close(fd);
    }
    store::fetch(http.url("/m.gguf"), dest().string(), with_sha(sha_), quick());
    EXPECT_EQ(slurp(dest()), blob_);
    EXPECT_FALSE(fs::exists(lock)) << "the lock goes with its download";
}

TEST_F(Fetch, ASizeOtherThanExpectedIsRefused) {
    MiniHttp http([&](const HttpRequest& r) { return df::test::serve_range(r, blob_); });
    try {
        store::fetch(http.url("/m.gguf"), dest().string(), with_size(blob_.size() + 1), quick());
        FAIL() << "expected a size error";
    } catch (const diskformer::Error& e) {
        EXPECT_NE(std::string(e.what()).find(std::to_string(blob_.size())), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(dest()));
    EXPECT_FALSE(fs::exists(part()));
    EXPECT_EQ(http.requests().size(), 1u);  // stopped at the headers, not retried
}

TEST_F(Fetch, ATransferThatKeepsFailingKeepsItsPartForLater) {
    MiniHttp http([&](const HttpRequest& r) {
        HttpReply rep = df::test::serve_range(r, blob_);
        rep.cut_after = 400000;  // every transfer drops
        return rep;
    });
    try {
        store::fetch(http.url("/m.gguf"), dest().string(), with_sha(sha_), quick(2));
        FAIL() << "expected the fetch to give up";
    } catch (const diskformer::Error& e) {
        EXPECT_NE(std::string(e.what()).find("after 2 attempts"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(dest()));
    ASSERT_TRUE(fs::exists(part()));
    EXPECT_EQ(slurp(part()), blob_.substr(0, 800000));  // two transfers' worth, in order
    MiniHttp good([&](const HttpRequest& r) { return df::test::serve_range(r, blob_); });
    const auto r = store::fetch(good.url("/m.gguf"), dest().string(), with_sha(sha_), quick());
    EXPECT_EQ(r.resumed_from, 800000u);
    EXPECT_EQ(slurp(dest()), blob_);
}

TEST_F(Fetch, HttpErrorsAreNamedAndTransientOnesRetried) {
    int n = 0;
    MiniHttp http([&](const HttpRequest& r) {
        if (r.path == "/missing") return reply(404, "not found");
        if (n++ < 2) return reply(503, "busy");
        return df::test::serve_range(r, blob_);
    });
    try {
        store::fetch(http.url("/missing"), dest().string(), {}, quick());
        FAIL() << "expected an HTTP error";
    } catch (const diskformer::Error& e) {
        EXPECT_NE(std::string(e.what()).find("HTTP 404"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(dest()));
    EXPECT_FALSE(fs::exists(part()));
    const auto r = store::fetch(http.url("/m.gguf"), dest().string(), with_sha(sha_), quick(3));
    EXPECT_EQ(r.sha256, sha_);
    EXPECT_EQ(http.requests().size(), 4u);  // the 404, two 503s, the transfer
}

TEST_F(Fetch, AFileAlreadyThereIsKeptOrReplaced) {
    MiniHttp http([&](const HttpRequest& r) { return df::test::serve_range(r, blob_); });
    fs::create_directories(dest().parent_path());
    write_file(dest(), blob_);
    auto r = store::fetch(http.url("/m.gguf"), dest().string(), with_sha(sha_), quick());
    EXPECT_TRUE(r.already_present);
    EXPECT_EQ(http.requests().size(), 0u);
    write_file(dest(), "an older, different file");
    r = store::fetch(http.url("/m.gguf"), dest().string(), with_sha(sha_), quick());
    EXPECT_FALSE(r.already_present);
    EXPECT_EQ(slurp(dest()), blob_);
}

TEST_F(Fetch, StoppedByTheCallerKeepsThePart) {
    MiniHttp http([&](const HttpRequest& r) { return df::test::serve_range(r, blob_); });
    auto o = quick();
    o.on_progress = [](uint64_t have, uint64_t) { return have < 100000; };
    EXPECT_THROW(store::fetch(http.url("/m.gguf"), dest().string(), {}, o), diskformer::Error);
    EXPECT_FALSE(fs::exists(dest()));
    EXPECT_TRUE(fs::exists(part()));
    EXPECT_GT(fs::file_size(part()), 0u);
}

TEST_F(Fetch, ATokenIsSentAsBearerAuthorization) {
    MiniHttp http([&](const HttpRequest& r) {
        if (r.authorization != "Bearer hf_secret") {
            HttpReply no;
            no.status = 401;
            return no;
        }
        return df::test::serve_range(r, blob_);
    });
    EXPECT_THROW(store::fetch(http.url("/m.gguf"), dest().string(), {}, quick()), diskformer::Error);
    auto o = quick();
    o.bearer_token = "hf_secret";
    store::fetch(http.url("/m.gguf"), dest().string(), with_sha(sha_), o);
    EXPECT_EQ(slurp(dest()), blob_);
}

TEST_F(Fetch, AMalformedRequestIsRefusedBeforeAnyTransfer) {
    MiniHttp http([&](const HttpRequest& r) { return df::test::serve_range(r, blob_); });
    EXPECT_THROW(store::fetch(http.url("/m.gguf"), dest().string(), with_sha("abc"), quick()), diskformer::Error);
    EXPECT_THROW(store::fetch(http.url("/m.gguf"), dest().string(), with_sha(std::string(64, 'g')), quick()), diskformer::Error);
    EXPECT_THROW(store::fetch("file://" + (dir_ / "ref").string(), dest().string(), {}, quick()), diskformer::Error);
    EXPECT_THROW(store::fetch("ftp://127.0.0.1/m.gguf", dest().string(), {}, quick()), diskformer::Error);
    EXPECT_EQ(http.requests().size(), 0u);
    EXPECT_FALSE(fs::exists(dest()));
    EXPECT_FALSE(fs::exists(part()));
}

}  // namespace
