// store::fetch: HTTP(S) download into <path>.part with libcurl, resumed by Range requests,
// retried on transient failures, checked (size, sha256) and renamed into place.
#include <curl/curl.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "diskformer/store.h"

namespace diskformer::store {
namespace {

namespace fs = std::filesystem;

void curl_init_once() {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string lower_hex(const std::string& s) {
    std::string out = s;
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (out.size() != 64 || !std::all_of(out.begin(), out.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); }))
        throw Error("expected sha256 '" + s + "' is not 64 hex digits");
    return out;
}

uint64_t file_size_or_zero(const fs::path& p) {
    std::error_code ec;
    const auto n = fs::file_size(p, ec);
    return ec ? 0 : static_cast<uint64_t>(n);
}

// What one HTTP exchange said and did. The header callback sees every response of a redirect
// chain; each status line starts a new one.
struct Transfer {
    FILE* out = nullptr;
    uint64_t start = 0;        // bytes in the part when the request was made
    uint64_t have = 0;         // bytes in the part now
    uint64_t total = 0;        // the whole file's size per the server, 0 if unknown
    long status = 0;
    uint64_t range_first = 0;  // of a 206's Content-Range
    bool range_seen = false;
    uint64_t length = 0;       // Content-Length
    bool length_seen = false;
    bool body_started = false;
    bool aborted = false;      // by on_progress
    std::string linked_sha;    // a Hugging Face LFS file's sha256 (X-Linked-Etag), lower-case hex
    uint64_t linked_size = 0;  // and its size (X-Linked-Size)
    uint64_t expect_total = 0; // the caller's size, 0 if none: another size stops the transfer at once
    bool wrong_size = false;
    bool wrong_range = false;  // a 206 that does not start where the part ends
    std::string write_error;
    const FetchOptions* options = nullptr;
};

bool starts_with_ci(const std::string& s, const char* prefix) {
    const size_t n = std::strlen(prefix);
    if (s.size() < n) return false;
    for (size_t i = 0; i < n; ++i)
        if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
    return true;
}

// 64 hex digits, lower-cased, or "" (a header value with quotes and spaces around it).
std::string sha256_in(const std::string& value) {
    std::string h;
    for (char c : value)
        if (std::isxdigit(static_cast<unsigned char>(c))) h += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        else if (c != '"' && c != ' ' && c != '\t' && c != '\r' && c != '\n') return "";
    return h.size() == 64 ? h : "";
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
    auto& t = *static_cast<Transfer*>(user);
    const std::string line(data, size * n);
    // The hub answers a resolve URL with a redirect that names the LFS object's digest and size
    // (the CDN's own ETag is not a sha256): kept from whichever response of the chain has them.
    if (starts_with_ci(line, "x-linked-etag:")) {
        if (std::string h = sha256_in(line.substr(14)); !h.empty()) t.linked_sha = h;
        return size * n;
    }
    if (starts_with_ci(line, "x-linked-size:")) {
        t.linked_size = std::strtoull(line.c_str() + 14, nullptr, 10);
        return size * n;
    }
    if (line.rfind("HTTP/", 0) == 0) {
        const size_t sp = line.find(' ');
        t.status = sp == std::string::npos ? 0 : std::strtol(line.c_str() + sp + 1, nullptr, 10);
        t.range_seen = t.length_seen = false;
        t.range_first = t.length = 0;
    } else if (starts_with_ci(line, "content-length:")) {
        t.length = std::strtoull(line.c_str() + 15, nullptr, 10);
        t.length_seen = true;
    } else if (starts_with_ci(line, "content-range:")) {
        // "bytes first-last/total" (206) or "bytes */total" (416)
        const char* p = line.c_str() + 14;
        while (*p == ' ') ++p;
        if (starts_with_ci(p, "bytes")) p += 5;
        while (*p == ' ') ++p;
        if (*p != '*') {
            t.range_first = std::strtoull(p, nullptr, 10);
            t.range_seen = true;
        }
        if (const char* slash = std::strchr(p, '/'); slash && slash[1] != '*') t.total = std::strtoull(slash + 1, nullptr, 10);
    }
    return size * n;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
    auto& t = *static_cast<Transfer*>(user);
    const size_t bytes = size * n;
    if (t.status != 200 && t.status != 206) return bytes;  // an error page: read and dropped
    if (!t.body_started) {
        t.body_started = true;
        if (t.status == 200) {  // the whole file (a server that ignores Range starts over)
            if (std::fflush(t.out) != 0 || ::ftruncate(::fileno(t.out), 0) != 0 || std::fseek(t.out, 0, SEEK_SET) != 0) {
                t.write_error = std::strerror(errno);
                return 0;
            }
            t.start = t.have = 0;
            t.total = t.length_seen ? t.length : 0;
        } else if (!t.range_seen || t.range_first != t.start) {
            t.wrong_range = true;
            return 0;
        }
        if (t.expect_total && t.total && t.total != t.expect_total) {
            t.wrong_size = true;
            return 0;
        }
    }
    if (std::fwrite(data, 1, bytes, t.out) != bytes) {
        t.write_error = std::strerror(errno);
        return 0;
    }
    t.have += bytes;
    return bytes;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    auto& t = *static_cast<Transfer*>(user);
    if (t.options->on_progress && !t.options->on_progress(t.have, t.total)) {
        t.aborted = true;
        return 1;
    }
    return 0;
}

enum class Outcome { complete, retry, restart };

// One request for the rest of the part; throws on errors a retry cannot mend.
// `linked` receives the server's digest and size of the file when it names them.
struct Linked {
    std::string sha;
    uint64_t size = 0;
};
Outcome transfer(const std::string& url, const fs::path& part, const FetchOptions& options, uint64_t expect_total,
                 uint64_t& total, std::string& last_error, Linked& linked) {
    std::unique_ptr<FILE, int (*)(FILE*)> out(std::fopen(part.c_str(), "ab"), std::fclose);
    if (!out) throw Error("cannot write " + part.string() + ": " + std::strerror(errno));
    Transfer t;
    t.out = out.get();
    t.options = &options;
    t.start = t.have = file_size_or_zero(part);
    t.total = total;
    t.expect_total = expect_total;
    std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), curl_easy_cleanup);
    if (!curl) throw Error("libcurl could not start a transfer");
    CURL* c = curl.get();
    char err[CURL_ERROR_SIZE] = {};
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "diskformer/0.1");
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, static_cast<long>(options.stall_seconds));
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &t);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    std::unique_ptr<curl_slist, void (*)(curl_slist*)> headers(nullptr, curl_slist_free_all);
    if (!options.bearer_token.empty()) {  // libcurl drops it on a redirect to another host
        headers.reset(curl_slist_append(nullptr, ("Authorization: Bearer " + options.bearer_token).c_str()));
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
    }
    const std::string range = std::to_string(t.start) + "-";
    if (t.start > 0) curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
    const CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (std::fflush(out.get()) != 0 && t.write_error.empty()) t.write_error = std::strerror(errno);
    if (t.total) total = t.total;
    if (!t.linked_sha.empty()) linked.sha = t.linked_sha;
    if (t.linked_size) linked.size = t.linked_size;

    if (t.wrong_size) return Outcome::retry;  // the caller compares the sizes
    if (t.aborted) throw Error("download of " + url + " stopped; " + part.string() + " keeps " + std::to_string(t.have) +
                               " bytes for a resume");
    if (!t.write_error.empty()) throw Error("cannot write " + part.string() + ": " + t.write_error);
    if (t.wrong_range) {
        last_error = "the server answered a resume from byte " + std::to_string(t.start) + " with another range";
        return Outcome::restart;
    }
    if (rc == CURLE_OK && (status == 200 || status == 206)) return Outcome::complete;
    if (status == 416) {  // nothing left past our bytes: complete, or a part longer than the file
        last_error = "HTTP 416 for a resume from byte " + std::to_string(t.start);
        return total && t.start == total ? Outcome::complete : Outcome::restart;
    }
    if (status >= 400 && status != 408 && status != 429 && status < 500) {
        if (t.have == 0) fs::remove(part);  // nothing to resume: no empty part left behind
        throw Error("HTTP " + std::to_string(status) + " fetching " + url);
    }
    last_error = rc != CURLE_OK ? std::string(err[0] ? err : curl_easy_strerror(rc)) : "HTTP " + std::to_string(status);
    return Outcome::retry;
}

// One download per destination at a time (two would append to the same part): an exclusive
// flock on <path>.lock, removed when done. After locking, the file must still be the one at the
// path (another holder may have removed it meanwhile), else the lock is taken again.
class DownloadLock {
public:
    explicit DownloadLock(std::string path) : path_(std::move(path)) {
        for (;;) {
            fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
            if (fd_ < 0) throw Error("cannot create " + path_ + ": " + std::strerror(errno));
            if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
                ::close(fd_);
                throw Error("another download to the same file is in progress (" + path_ + " is locked)");
            }
            struct stat held{}, now{};
            if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &now) == 0 && held.st_dev == now.st_dev && held.st_ino == now.st_ino)
                return;
            ::close(fd_);
        }
    }
    ~DownloadLock() {
        ::unlink(path_.c_str());  // before the unlock: a waiter that got the old file sees it gone
        ::close(fd_);
    }
    DownloadLock(const DownloadLock&) = delete;
    DownloadLock& operator=(const DownloadLock&) = delete;

private:
    std::string path_;
    int fd_ = -1;
};

FetchResult fetch_locked(const std::string& url, const std::string& path, const Expect& expect, const FetchOptions& options);

}  // namespace

FetchResult fetch(const std::string& url, const std::string& path, const Expect& expect, const FetchOptions& options) {
    curl_init_once();
    if (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0)
        throw Error("cannot fetch '" + url + "': only http:// and https:// addresses");
    if (!expect.sha256.empty()) lower_hex(expect.sha256);  // a malformed digest fails before anything is made
    if (const fs::path dest(path); dest.has_parent_path()) fs::create_directories(dest.parent_path());
    const DownloadLock lock(path + ".lock");
    return fetch_locked(url, path, expect, options);
}

namespace {

FetchResult fetch_locked(const std::string& url, const std::string& path, const Expect& expect, const FetchOptions& options) {
    std::string want_sha = expect.sha256.empty() ? "" : lower_hex(expect.sha256);
    const fs::path dest(path), part(path + ".part");
    FetchResult r;
    r.path = path;
    if (fs::exists(dest)) {  // idempotent: a file that meets the expectations is kept as it is
        r.bytes = file_size_or_zero(dest);
        if (!expect.size || *expect.size == r.bytes) {
            r.sha256 = sha256_file(path);
            if (want_sha.empty() || want_sha == r.sha256) {
                r.already_present = true;
                r.sha256_checked = !want_sha.empty();
                return r;
            }
        }
    }
    uint64_t total = expect.size.value_or(0);
    r.resumed_from = file_size_or_zero(part);
    std::string last_error;
    bool complete = false;
    int delay_ms = options.retry_delay_ms;
    Linked linked;
    const int attempts = std::max(1, options.attempts);
    for (int attempt = 0; attempt < attempts && !complete; ++attempt) {
        if (attempt > 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
            delay_ms *= 2;
        }
        const uint64_t have = file_size_or_zero(part);
        if (total && have > total) fs::remove(part);  // longer than the file: start over
        if (total && have == total) {
            complete = true;
            break;
        }
        const Outcome o = transfer(url, part, options, expect.size.value_or(0), total, last_error, linked);
        if (expect.size && total != *expect.size) {  // another file than the one asked for
            fs::remove(part);
            throw Error("the server has " + std::to_string(total) + " bytes at " + url + ", expected " + std::to_string(*expect.size));
        }
        if (!total && linked.size) total = linked.size;
        if (o == Outcome::complete) complete = true;
        if (o == Outcome::restart) fs::remove(part);
    }
    if (!complete)
        throw Error("fetching " + url + " failed after " + std::to_string(attempts) + " attempts (" +
                    last_error + "); " + part.string() + " keeps " + std::to_string(file_size_or_zero(part)) +
                    " bytes for a resume");

    r.bytes = file_size_or_zero(part);
    if (total && r.bytes != total) {
        fs::remove(part);
        throw Error("fetched " + std::to_string(r.bytes) + " bytes from " + url + ", expected " + std::to_string(total) +
                    "; the partial file was removed");
    }
    r.sha256 = sha256_file(part.string());
    const bool from_server = want_sha.empty() && !linked.sha.empty();
    if (from_server) want_sha = linked.sha;  // no digest given: the server's own is the expectation
    r.sha256_checked = !want_sha.empty();
    r.sha256_from_server = from_server;
    if (!want_sha.empty() && r.sha256 != want_sha) {
        fs::remove(part);
        if (r.resumed_from > 0) {  // the bytes kept from before may be another version's: once more from zero
            FetchResult again = fetch_locked(url, path, expect, options);
            again.resumed_from = 0;
            return again;
        }
        throw Error("sha256 of " + url + " is " + r.sha256 + ", expected " + want_sha +
                    (from_server ? " (the digest the server gave)" : "") + "; the file was removed");
    }
    {  // on disk before it takes the final name
        const int fd = ::open(part.c_str(), O_RDONLY);
        if (fd >= 0) {
            ::fsync(fd);
            ::close(fd);
        }
    }
    fs::rename(part, dest);
    return r;
}

}  // namespace
}  // namespace diskformer::store
