// Helpers of the CUDA differential tests: the CPU backend is the reference, inputs are fresh
// random numbers, outputs are poisoned with NaN before each run, tolerances come from the
// operands (|error| <= c * eps * sum |a_i b_i| for a dot product).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace df::test {

#define DF_REQUIRE_CUDA()                                                                       \
    do {                                                                                        \
        if (!::df::cuda_device_available())                                                     \
            GTEST_SKIP() << "no CUDA device on this machine: CUDA kernel tests skipped";         \
    } while (0)

inline constexpr float kEps = std::numeric_limits<float>::epsilon();

inline std::shared_ptr<Backend> cpu_backend() {
    static std::shared_ptr<Backend> be = make_cpu_backend(0);
    return be;
}
inline std::shared_ptr<Backend> gpu_backend() {
    static std::shared_ptr<Backend> be = make_cuda_backend(0);
    return be;
}

// A fresh generator per test, seeded from the test's name so failures reproduce.
inline std::mt19937_64 test_rng() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string name = std::string(info->test_suite_name()) + "." + info->name();
    return std::mt19937_64(std::hash<std::string>{}(name));
}

inline std::vector<float> randn(std::mt19937_64& g, size_t n, float scale = 1.f) {
    std::normal_distribution<float> d(0.f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(g);
    return v;
}

// Backend memory holding a host vector's bytes.
template <class T>
class Buf {
public:
    Buf(Backend& be, size_t n, MemKind kind = MemKind::scratch) : be_(&be), n_(n) {
        p_ = static_cast<T*>(be.alloc(std::max<size_t>(n, 1) * sizeof(T), kind));
    }
    Buf(Backend& be, const std::vector<T>& v, MemKind kind = MemKind::scratch) : Buf(be, v.size(), kind) { set(v); }
    ~Buf() { be_->release(p_); }
    Buf(const Buf&) = delete;
    Buf& operator=(const Buf&) = delete;
    void set(const std::vector<T>& v) { be_->upload(p_, v.data(), v.size() * sizeof(T)); }
    void poison() { set(std::vector<T>(n_, poison_value())); }
    std::vector<T> get() const {
        std::vector<T> v(n_);
        be_->download(v.data(), p_, n_ * sizeof(T));
        return v;
    }
    T* p() const { return p_; }
    size_t size() const { return n_; }

private:
    static T poison_value() {
        if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::quiet_NaN();
        else return static_cast<T>(-12345);
    }
    Backend* be_;
    T* p_;
    size_t n_;
};

struct CloseReport {
    size_t bad = 0, nan = 0, worst = 0;
    double worst_ratio = 0, max_abs = 0;
};

// Every got[i] finite and within tol[i] of ref[i]; one line with the worst element otherwise.
inline ::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<float>& ref,
                                            const std::vector<float>& tol) {
    if (got.size() != ref.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << ref.size();
    CloseReport r;
    for (size_t i = 0; i < got.size(); ++i) {
        const double d = std::fabs(static_cast<double>(got[i]) - ref[i]);
        if (!std::isfinite(got[i]) && std::isfinite(ref[i])) {
            ++r.nan;
            if (r.nan == 1) r.worst = i;
            continue;
        }
        r.max_abs = std::max(r.max_abs, d);
        const double ratio = d / std::max(static_cast<double>(tol[i]), 1e-38);
        if (d > tol[i]) ++r.bad;
        if (ratio > r.worst_ratio && !r.nan) {
            r.worst_ratio = ratio;
            r.worst = i;
        }
    }
    if (!r.bad && !r.nan) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << r.bad << " of " << got.size() << " outside tolerance, " << r.nan
                                         << " not finite; worst at " << r.worst << ": got " << got[r.worst] << " ref "
                                         << ref[r.worst] << " tol " << tol[r.worst] << " (max |diff| " << r.max_abs
                                         << ")";
}

inline std::vector<float> tol_rel(const std::vector<float>& ref, float rel, float abs = 0.f) {
    std::vector<float> t(ref.size());
    for (size_t i = 0; i < ref.size(); ++i) t[i] = rel * std::fabs(ref[i]) + abs;
    return t;
}

}  // namespace df::test
