// diskformer model store: fetching model files over HTTP(S), resumable and checked.
//
//   auto r = diskformer::store::fetch(url, "Qwen3-4B-Q8_0.gguf", {.sha256 = "4f7c..."});
//
// A file appears at its path only complete and checked: bytes arrive in `<path>.part`, an
// interrupted transfer resumes from there (HTTP Range) on the next attempt or the next call, and
// the part is renamed into place once its size (the expected one, else the server's) and, when
// given, its sha256 match. With no sha256 given, a digest the server names for the file (the
// Hugging Face hub's X-Linked-Etag on LFS files) is checked instead. A wrong size or digest removes the part and throws Error; an HTTP
// error throws too (a part that holds bytes is kept: it is still good for a later resume).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "diskformer/diskformer.h"

namespace diskformer::store {

struct Expect {
    std::optional<uint64_t> size;  // bytes, if known
    std::string sha256;            // 64 hex digits (any case), or empty: not checked
};

struct FetchOptions {
    int attempts = 5;                // transfers tried before giving up (each resumes)
    int retry_delay_ms = 1000;       // before the second attempt; doubles after each failure
    int stall_seconds = 60;          // a transfer slower than 1 byte/s this long is retried
    std::string bearer_token;        // sent as "Authorization: Bearer" to the URL's host (not to redirects elsewhere)
    // Called while a transfer runs, as bytes arrive and at least once a second (have, total;
    // total 0 while unknown); returning false stops the fetch with Error, keeping the part.
    std::function<bool(uint64_t have, uint64_t total)> on_progress;
};

struct FetchResult {
    std::string path;
    uint64_t bytes = 0;
    std::string sha256;           // of the file, lower-case hex
    uint64_t resumed_from = 0;    // bytes already in the part when the first transfer started
    bool already_present = false; // the file was there and met the expectations: nothing fetched
    bool sha256_checked = false;  // compared with an expected digest (the caller's or the server's)
    bool sha256_from_server = false; // that digest came from the server (Hugging Face's X-Linked-Etag)
};

FetchResult fetch(const std::string& url, const std::string& path, const Expect& expect = {},
                  const FetchOptions& options = {});

// Lower-case hex sha256 of a file's bytes (throws Error if it cannot be read).
std::string sha256_file(const std::string& path);

}  // namespace diskformer::store
