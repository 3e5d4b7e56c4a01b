// sha256 of a file through OpenSSL's EVP interface, read in 4 MiB pieces (and of a copy as it is made).
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "diskformer/store.h"
#include "store/hash.h"

namespace diskformer::store {
namespace {

// The digest of a finished stream as lower-case hex.
std::string finish_hex(EVP_MD_CTX* ctx) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    EVP_DigestFinal_ex(ctx, md, &len);
    static const char* hex = "0123456789abcdef";
    std::string out;
    for (unsigned i = 0; i < len; ++i) {
        out += hex[md[i] >> 4];
        out += hex[md[i] & 15];
    }
    return out;
}

}  // namespace

std::string sha256_file(const std::string& path) {
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
    if (!f) throw Error("cannot read " + path + ": " + std::strerror(errno));
    std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
    if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) throw Error("sha256: OpenSSL could not start a digest");
    std::vector<unsigned char> buf(size_t{4} << 20);
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) EVP_DigestUpdate(ctx.get(), buf.data(), n);
    if (std::ferror(f.get())) throw Error("cannot read " + path + ": " + std::strerror(errno));
    return finish_hex(ctx.get());
}

std::string copy_hashing(const std::string& src, const std::string& dst) {
    std::unique_ptr<FILE, int (*)(FILE*)> in(std::fopen(src.c_str(), "rb"), std::fclose);
    if (!in) throw Error("cannot read " + src + ": " + std::strerror(errno));
    std::unique_ptr<FILE, int (*)(FILE*)> out(std::fopen(dst.c_str(), "wb"), std::fclose);
    if (!out) throw Error("cannot write " + dst + ": " + std::strerror(errno));
    std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
    if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) throw Error("sha256: OpenSSL could not start a digest");
    std::vector<unsigned char> buf(size_t{4} << 20);
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), in.get())) > 0) {
        EVP_DigestUpdate(ctx.get(), buf.data(), n);
        if (std::fwrite(buf.data(), 1, n, out.get()) != n) throw Error("cannot write " + dst + ": " + std::strerror(errno));
    }
    if (std::ferror(in.get())) throw Error("cannot read " + src + ": " + std::strerror(errno));
    if (std::fflush(out.get()) != 0 || ::fsync(::fileno(out.get())) != 0) throw Error("cannot write " + dst + ": " + std::strerror(errno));
    return finish_hex(ctx.get());
}

}  // namespace diskformer::store
