// diskformer model store: fetching model files over HTTP(S), resumable and checked, and the local
// store of model files that `-m NAME` finds.
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
#include <vector>

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

// ---- the local model store -----------------------------------------------------------------
//
// A directory holding model files under models/ and a catalog (catalog.json) of each one's name,
// file, size, sha256 and origin. Names are what `-m NAME` finds: letters, digits and . _ - : +
// (no path separators), at most 128 bytes. The catalog is rewritten whole (temporary file,
// rename) under an exclusive lock (catalog.lock), so concurrent pulls and imports never lose
// each other's entries; an entry whose file is gone is reported missing, never resolved.

struct Entry {
    std::string name;
    std::string path;    // absolute path of the file
    uint64_t size = 0;
    std::string sha256;  // lower-case hex, as checked when it entered the store
    std::string source;  // the URL it came from, or "import:<original path>"
    std::string added;   // UTC, ISO 8601
};

enum class ImportMode { copy, link, move };

class Store {
public:
    explicit Store(std::string root);
    // $DISKFORMER_HOME, else $XDG_DATA_HOME/diskformer, else $HOME/.local/share/diskformer.
    static std::string default_root();

    const std::string& root() const { return root_; }
    std::vector<Entry> list() const;  // by name
    std::optional<Entry> find(const std::string& name) const;
    // Where a model of this name is kept (<root>/models/<name>.gguf); the name is checked.
    std::string file_for(const std::string& name) const;

    // Takes an existing file into the store under `name` (copied, hard-linked or moved) and
    // records it with its sha256; a name already taken throws unless `replace`.
    Entry import(const std::string& file, const std::string& name, ImportMode mode, bool replace = false);
    // Records a file already at file_for(name) (a finished fetch) with its size and sha256.
    Entry record(const std::string& name, uint64_t size, const std::string& sha256, const std::string& source);
    // Removes the entry and its file; false when there is no such name.
    bool remove(const std::string& name);

private:
    std::string root_;
};

// Throws Error unless `name` is a valid store name.
void check_name(const std::string& name);
// A model argument as the CLI takes it: an existing file as it is; else a store name (with or
// without ".gguf") in `store`; else Error naming what the store holds.
std::string resolve_model(const std::string& arg, const Store& store);

}  // namespace diskformer::store
