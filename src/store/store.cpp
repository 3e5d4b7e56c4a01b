// The local model store: files under <root>/models/, a JSON catalog beside them, changed only
// under an exclusive flock and replaced whole by rename (a reader never sees half a catalog).
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "diskformer/store.h"
#include "store/hash.h"

namespace diskformer::store {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string now_utc() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

// The catalog, locked for the object's lifetime; save() replaces the file whole.
class Catalog {
public:
    Catalog(const std::string& root, bool write) : root_(root) {
        if (write) {
            fs::create_directories(fs::path(root) / "models");
            lock_ = ::open((fs::path(root) / "catalog.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
            if (lock_ < 0 || ::flock(lock_, LOCK_EX) != 0)
                throw Error("cannot lock the model store at " + root + ": " + std::strerror(errno));
        }
        const fs::path p = fs::path(root) / "catalog.json";
        std::ifstream f(p);
        if (!f) return;  // an empty store
        try {
            doc_ = json::parse(f);
        } catch (const json::exception& e) {
            throw Error("the model store's catalog " + p.string() + " is not valid JSON (" + e.what() + ")");
        }
        if (!doc_.is_object() || !doc_.contains("models") || !doc_["models"].is_object())
            throw Error("the model store's catalog " + p.string() + " has no \"models\" object");
    }
    ~Catalog() {
        if (lock_ >= 0) ::close(lock_);  // releases the flock
    }
    Catalog(const Catalog&) = delete;
    Catalog& operator=(const Catalog&) = delete;

    json& models() {
        if (!doc_.contains("models")) doc_["models"] = json::object();
        return doc_["models"];
    }
    void save() {
        doc_["version"] = 1;
        const fs::path p = fs::path(root_) / "catalog.json", tmp = fs::path(root_) / "catalog.json.tmp";
        {
            std::ofstream f(tmp, std::ios::trunc);
            f << doc_.dump(2) << '\n';
            f.flush();
            if (!f) throw Error("cannot write " + tmp.string());
        }
        fs::rename(tmp, p);
    }
    Entry entry(const std::string& name) const {
        const json& j = doc_.at("models").at(name);
        Entry e;
        e.name = name;
        e.path = (fs::path(root_) / "models" / j.value("file", "")).string();
        e.size = j.value("size", uint64_t{0});
        e.sha256 = j.value("sha256", "");
        e.source = j.value("source", "");
        e.added = j.value("added", "");
        return e;
    }
    bool has(const std::string& name) const { return doc_.contains("models") && doc_["models"].contains(name); }
    std::vector<std::string> names() const {
        std::vector<std::string> out;
        if (doc_.contains("models"))
            for (const auto& [k, v] : doc_["models"].items()) out.push_back(k);
        std::sort(out.begin(), out.end());
        return out;
    }

private:
    std::string root_;
    json doc_ = json::object();
    int lock_ = -1;
};

json to_json(const Entry& e) {
    return {{"file", fs::path(e.path).filename().string()}, {"size", e.size}, {"sha256", e.sha256},
            {"source", e.source}, {"added", e.added}};
}

}  // namespace

void check_name(const std::string& name) {
    const bool ok = !name.empty() && name.size() <= 128 && name != "." && name != ".." && name[0] != '.' &&
                    std::all_of(name.begin(), name.end(), [](char c) {
                        return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("._-:+", c);
                    });
    if (!ok)
        throw Error("'" + name + "' is not a model name for the store (letters, digits and . _ - : +, not starting with '.', "
                    "at most 128 bytes)");
}

Store::Store(std::string root) : root_(fs::absolute(root).lexically_normal().string()) {}

std::string Store::default_root() {
    if (const char* d = std::getenv("DISKFORMER_HOME"); d && *d) return d;
    if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) return (fs::path(x) / "diskformer").string();
    if (const char* h = std::getenv("HOME"); h && *h) return (fs::path(h) / ".local" / "share" / "diskformer").string();
    throw Error("no model store: set DISKFORMER_HOME (or HOME)");
}

std::vector<Entry> Store::list() const {
    Catalog c(root_, false);
    std::vector<Entry> out;
    for (const auto& n : c.names()) out.push_back(c.entry(n));
    return out;
}

std::optional<Entry> Store::find(const std::string& name) const {
    Catalog c(root_, false);
    if (!c.has(name)) return std::nullopt;
    return c.entry(name);
}

std::string Store::file_for(const std::string& name) const {
    check_name(name);
    return (fs::path(root_) / "models" / (name + ".gguf")).string();
}

Entry Store::import(const std::string& file, const std::string& name, ImportMode mode, bool replace) {
    check_name(name);
    const fs::path src = fs::absolute(file);
    if (!fs::is_regular_file(src)) throw Error("cannot import " + file + ": not a regular file");
    Catalog c(root_, true);
    if (c.has(name) && !replace)
        throw Error("the store already has a model named '" + name + "' (" + c.entry(name).path + "); remove it first (rm) or replace it (--replace)");
    const fs::path dst = file_for(name), part = dst.string() + ".part";
    if (fs::exists(dst) && fs::equivalent(src, dst)) throw Error("cannot import " + file + ": it is the store's own file");
    fs::remove(part);
    Entry e;
    e.name = name;
    e.path = dst.string();
    e.source = "import:" + src.string();
    e.added = now_utc();
    switch (mode) {
        case ImportMode::copy:
            try {
                e.sha256 = copy_hashing(src.string(), part.string());
            } catch (...) {
                fs::remove(part);
                throw;
            }
            break;
        case ImportMode::link: {
            std::error_code ec;
            fs::create_hard_link(src, part, ec);
            if (ec) throw Error("cannot hard-link " + src.string() + " into " + root_ + ": " + ec.message() + " (copy it instead)");
            e.sha256 = sha256_file(part.string());
            break;
        }
        case ImportMode::move: {
            e.sha256 = sha256_file(src.string());
            std::error_code ec;
            fs::rename(src, part, ec);
            if (ec) {  // another filesystem: copy, check, then drop the original
                try {
                    if (copy_hashing(src.string(), part.string()) != e.sha256) throw Error("the copy of " + src.string() + " differs from it");
                } catch (...) {
                    fs::remove(part);
                    throw;
                }
                fs::remove(src);
            }
            break;
        }
    }
    e.size = static_cast<uint64_t>(fs::file_size(part));
    fs::rename(part, dst);
    c.models()[name] = to_json(e);
    c.save();
    return e;
}

Entry Store::record(const std::string& name, uint64_t size, const std::string& sha256, const std::string& source) {
    Catalog c(root_, true);
    Entry e;
    e.name = name;
    e.path = file_for(name);
    if (!fs::is_regular_file(e.path)) throw Error("cannot record '" + name + "': " + e.path + " is not there");
    e.size = size;
    e.sha256 = sha256;
    e.source = source;
    e.added = now_utc();
    c.models()[name] = to_json(e);
    c.save();
    return e;
}

bool Store::remove(const std::string& name) {
    Catalog c(root_, true);
    if (!c.has(name)) return false;
    const Entry e = c.entry(name);
    c.models().erase(name);
    c.save();
    std::error_code ec;
    fs::remove(e.path, ec);  // the entry is gone either way; a file someone deleted is not an error
    return true;
}

std::string resolve_model(const std::string& arg, const Store& store) {
    std::error_code ec;
    if (fs::is_regular_file(arg, ec)) return arg;
    std::string name = arg;
    if (name.size() > 5 && name.ends_with(".gguf")) name.resize(name.size() - 5);
    bool valid = true;
    try {
        check_name(name);
    } catch (const Error&) {
        valid = false;
    }
    if (!valid) throw Error("cannot open '" + arg + "': no such file");  // a path, not a name
    if (const auto e = store.find(name)) {
        if (!fs::is_regular_file(e->path, ec))
            throw Error("the store's model '" + name + "' is missing its file " + e->path + " (pull or import it again)");
        return e->path;
    }
    std::string have;
    for (const auto& e : store.list()) have += (have.empty() ? "" : ", ") + e.name;
    throw Error("no file '" + arg + "' and no model of that name in the store at " + store.root() +
                (have.empty() ? std::string(" (it is empty: diskformer pull or import adds models)") : " (it has: " + have + ")"));
}

}  // namespace diskformer::store
