// A loopback HTTP/1.1 server for the download tests: one connection at a time, `Connection:
// close`, every reply chosen by the test (status, headers, body, and where to cut the body short
// to simulate a dropped transfer). A real server library would answer Range requests its own way;
// these tests need to decide each answer.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace df::test {

struct HttpRequest {
    std::string path;
    std::optional<uint64_t> range_from;  // "Range: bytes=N-"
    std::string authorization;           // the Authorization header's value
};

struct HttpReply {
    int status = 200;
    std::vector<std::string> headers;  // "Name: value"
    std::string body;
    size_t cut_after = std::string::npos;  // send only this many body bytes, then close
};

class MiniHttp {
public:
    explicit MiniHttp(std::function<HttpReply(const HttpRequest&)> handler) : handler_(std::move(handler)) {
        fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 8) != 0 ||
            ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
            throw std::runtime_error("mini_http: cannot listen on loopback");
        port_ = ntohs(a.sin_port);
        thread_ = std::thread([this] { serve(); });
    }
    ~MiniHttp() {
        stop_ = true;
        ::shutdown(fd_, SHUT_RDWR);
        ::close(fd_);
        thread_.join();
    }
    std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }
    std::vector<HttpRequest> requests() const {
        std::lock_guard lock(mu_);
        return log_;
    }

private:
    void serve() {
        while (!stop_) {
            const int c = ::accept(fd_, nullptr, nullptr);
            if (c < 0) return;
            std::string head;
            char buf[4096];
            while (head.find("\r\n\r\n") == std::string::npos) {
                const ssize_t n = ::recv(c, buf, sizeof buf, 0);
                if (n <= 0) break;
                head.append(buf, static_cast<size_t>(n));
            }
            HttpRequest req;
            const size_t sp = head.find(' ');
            if (sp != std::string::npos) req.path = head.substr(sp + 1, head.find(' ', sp + 1) - sp - 1);
            if (const size_t r = head.find("Range: bytes="); r != std::string::npos)
                req.range_from = std::stoull(head.substr(r + 13));
            if (const size_t h = head.find("Authorization: "); h != std::string::npos)
                req.authorization = head.substr(h + 15, head.find("\r\n", h) - h - 15);
            {
                std::lock_guard lock(mu_);
                log_.push_back(req);
            }
            const HttpReply rep = handler_(req);
            std::string out = "HTTP/1.1 " + std::to_string(rep.status) + " X\r\n";
            for (const auto& h : rep.headers) out += h + "\r\n";
            out += "Content-Length: " + std::to_string(rep.body.size()) + "\r\nConnection: close\r\n\r\n";
            out += rep.body.substr(0, rep.cut_after);
            for (size_t sent = 0; sent < out.size();) {
                const ssize_t n = ::send(c, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
                if (n <= 0) break;
                sent += static_cast<size_t>(n);
            }
            ::close(c);
        }
    }

    std::function<HttpReply(const HttpRequest&)> handler_;
    int fd_ = -1;
    int port_ = 0;
    std::atomic<bool> stop_{false};
    mutable std::mutex mu_;
    std::vector<HttpRequest> log_;
    std::thread thread_;
};

// The reply a resuming server gives for `blob` (206 from the requested byte, or 200).
inline HttpReply serve_range(const HttpRequest& req, const std::string& blob) {
    HttpReply r;
    if (!req.range_from) {
        r.body = blob;
        return r;
    }
    const uint64_t from = *req.range_from;
    if (from >= blob.size()) {
        r.status = 416;
        r.headers.push_back("Content-Range: bytes */" + std::to_string(blob.size()));
        return r;
    }
    r.status = 206;
    r.headers.push_back("Content-Range: bytes " + std::to_string(from) + "-" + std::to_string(blob.size() - 1) + "/" +
                        std::to_string(blob.size()));
    r.body = blob.substr(from);
    return r;
}

}  // namespace df::test
