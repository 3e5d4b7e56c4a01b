// The synthetic-weight generator: random block bytes with only the scale fields patched.
//
// A quantized block is random bytes (codes, sub-block scales, grid indices, signs: every bit
// pattern is valid) plus a few scale fields that decide the magnitude. We fill whole segments
// with xoshiro256+ output and overwrite just those fields with a per-tensor scale, calibrated
// once per type with quant::dequantize_row so the dequantized weights have the target std and
// (where the type has a min field) zero mean. That keeps generation at memory speed.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "model/synth.h"
#include "quant/dequant.h"

namespace df::model::synth {
namespace {

using quant::Type;

uint64_t splitmix64(uint64_t& x) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// xoshiro256+: fast, and its low-bit weakness does not matter for weight noise.
struct Rng {
    uint64_t s[4];
    explicit Rng(uint64_t seed) {
        for (auto& w : s) w = splitmix64(seed);
    }
    uint64_t next() {
        const uint64_t r = s[0] + s[3];
        const uint64_t t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = (s[3] << 45) | (s[3] >> 19);
        return r;
    }
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
    double normal() {  // Box-Muller; used only for the small F32 tensors
        const double u = 1.0 - uniform(), v = uniform();
        return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
    }
    void bytes(uint8_t* dst, uint64_t n) {
        uint64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            const uint64_t r = next();
            std::memcpy(dst + i, &r, 8);
        }
        if (i < n) {
            const uint64_t r = next();
            std::memcpy(dst + i, &r, n - i);
        }
    }
};

// Where a type keeps its block scale(s), and how they are encoded.
enum class Enc : uint8_t { f16, e8m0, ue4m3x4, iq1m };
struct ScaleSpec {
    Type type;
    uint16_t d_off;
    int16_t min_off;  // -1: no min field
    Enc enc;
    // 2-bit codes read as q - 1 (TQ2_0, Q2_0): random code 3 (+2) would give the weights a mean
    // of d / 2, so it is folded onto 1 (0), leaving -1, 0, +1 symmetric.
    uint16_t codes_off = 0, codes_len = 0;
};
constexpr ScaleSpec kScales[] = {
    {Type::Q4_0, 0, -1, Enc::f16},      {Type::Q4_1, 0, 2, Enc::f16},
    {Type::Q5_0, 0, -1, Enc::f16},      {Type::Q5_1, 0, 2, Enc::f16},
    {Type::Q8_0, 0, -1, Enc::f16},      {Type::Q2_K, 80, 82, Enc::f16},
    {Type::Q3_K, 108, -1, Enc::f16},    {Type::Q4_K, 0, 2, Enc::f16},
    {Type::Q5_K, 0, 2, Enc::f16},       {Type::Q6_K, 208, -1, Enc::f16},
    {Type::IQ2_XXS, 0, -1, Enc::f16},   {Type::IQ2_XS, 0, -1, Enc::f16},
    {Type::IQ2_S, 0, -1, Enc::f16},     {Type::IQ3_XXS, 0, -1, Enc::f16},
    {Type::IQ3_S, 0, -1, Enc::f16},     {Type::IQ1_S, 0, -1, Enc::f16},
    {Type::IQ1_M, 48, -1, Enc::iq1m},   {Type::IQ4_NL, 0, -1, Enc::f16},
    {Type::IQ4_XS, 0, -1, Enc::f16},    {Type::TQ1_0, 52, -1, Enc::f16},
    {Type::TQ2_0, 64, -1, Enc::f16, 0, 64},    {Type::MXFP4, 0, -1, Enc::e8m0},
    {Type::NVFP4, 0, -1, Enc::ue4m3x4}, {Type::Q1_0, 0, -1, Enc::f16},
    {Type::Q2_0, 0, -1, Enc::f16, 2, 16},
};

const ScaleSpec* scale_spec(Type t) {
    for (const auto& s : kScales)
        if (s.type == t) return &s;
    return nullptr;
}

bool is_float(Type t) { return t == Type::F32 || t == Type::F16 || t == Type::BF16; }

// Per-block scale jitter: block scales of real files vary; 256 levels in [0.75, 1.25] indexed by
// a random byte of the block keep the patch loop to one table lookup.
constexpr int kJitterLevels = 256;
double jitter(int k) { return 0.75 + 0.5 * k / (kJitterLevels - 1); }
double jitter_rms() {
    double s = 0;
    for (int k = 0; k < kJitterLevels; ++k) s += jitter(k) * jitter(k);
    return std::sqrt(s / kJitterLevels);
}

// Unsigned E4M3 (bias 7, 3 mantissa bits), rounded to nearest; x > 0.
uint8_t ue4m3(double x) {
    uint8_t best = 0;
    double best_err = INFINITY;
    for (int c = 1; c < 0x7F; ++c) {
        const int e = c >> 3, m = c & 7;
        const double v = e ? std::ldexp(1.0 + m / 8.0, e - 7) : std::ldexp(m / 8.0, -6);
        if (std::abs(v - x) < best_err) best_err = std::abs(v - x), best = static_cast<uint8_t>(c);
    }
    return best;
}

// Writes the scale fields of one block: d (and min) as the type encodes them.
struct Patch {
    uint8_t bytes[4];  // encoded d (f16: 2 bytes, e8m0: 1, ue4m3x4: 4, iq1m: 2 = f16 bits)
    uint8_t min[2];
};

Patch encode(const ScaleSpec& s, double d, double m) {
    Patch p{};
    switch (s.enc) {
        case Enc::f16:
        case Enc::iq1m: {
            const uint16_t h = quant::f32_to_f16(static_cast<float>(d));
            std::memcpy(p.bytes, &h, 2);
            break;
        }
        case Enc::e8m0: {
            const int e = std::clamp(static_cast<int>(std::lround(std::log2(d))) + 127, 1, 254);
            p.bytes[0] = static_cast<uint8_t>(e);
            break;
        }
        case Enc::ue4m3x4:
            std::fill(p.bytes, p.bytes + 4, ue4m3(d));
            break;
    }
    const uint16_t hm = quant::f32_to_f16(static_cast<float>(m));
    std::memcpy(p.min, &hm, 2);
    return p;
}

void apply(const ScaleSpec& s, const Patch& p, uint8_t* block) {
    switch (s.enc) {
        case Enc::f16: std::memcpy(block + s.d_off, p.bytes, 2); break;
        case Enc::e8m0: block[s.d_off] = p.bytes[0]; break;
        case Enc::ue4m3x4: std::memcpy(block + s.d_off, p.bytes, 4); break;
        case Enc::iq1m: {  // the f16 scale lives in the top nibble of each of the 4 u16 scales
            uint16_t h, sc[4];
            std::memcpy(&h, p.bytes, 2);
            std::memcpy(sc, block + s.d_off, 8);
            for (int i = 0; i < 4; ++i)
                sc[i] = static_cast<uint16_t>((sc[i] & 0x0FFF) | (((h >> (4 * i)) & 0xF) << 12));
            std::memcpy(block + s.d_off, sc, 8);
            break;
        }
    }
    if (s.min_off >= 0) std::memcpy(block + s.min_off, p.min, 2);
    for (uint8_t *q = block + s.codes_off, *end = q + s.codes_len; q < end; ++q)
        *q = static_cast<uint8_t>(*q & ~((*q & (*q >> 1) & 0x55) << 1));
}

// The table of patches for one tensor (one per jitter level).
struct PatchTable {
    const ScaleSpec* spec = nullptr;
    std::array<Patch, kJitterLevels> level;
};

PatchTable patch_table(Type type, double d, double min_ratio) {
    PatchTable t;
    t.spec = scale_spec(type);
    for (int k = 0; k < kJitterLevels; ++k) t.level[k] = encode(*t.spec, d * jitter(k), d * min_ratio * jitter(k));
    return t;
}

void patch_blocks(const PatchTable& t, uint8_t* p, uint64_t n_blocks, uint32_t block_bytes) {
    const ScaleSpec& s = *t.spec;
    for (uint64_t b = 0; b < n_blocks; ++b, p += block_bytes) apply(s, t.level[p[s.d_off]], p);
}

double mean_of(const std::vector<float>& x) {
    double s = 0;
    for (float v : x) s += v;
    return s / static_cast<double>(x.size());
}

double std_of(const std::vector<float>& x) {
    const double m = mean_of(x);
    double s = 0;
    for (float v : x) s += (v - m) * (v - m);
    return std::sqrt(s / static_cast<double>(x.size()));
}

Calibration measure(Type type) {
    const ScaleSpec* spec = scale_spec(type);
    if (!spec) throw std::invalid_argument("synth: no generator for block type " + std::string(quant::type_name(type)));
    const auto& ti = quant::type_info(type);
    constexpr int kBlocks = 512;
    std::vector<uint8_t> raw(static_cast<size_t>(kBlocks) * ti.block_bytes), blocks(raw.size());
    Rng(0xCA11B8A7Eull + static_cast<uint64_t>(type)).bytes(raw.data(), raw.size());
    std::vector<float> w(static_cast<size_t>(kBlocks) * ti.block_elems);
    const auto dequant = [&](double d, double m) {
        blocks = raw;
        const Patch p = encode(*spec, d, m);
        for (int b = 0; b < kBlocks; ++b) apply(*spec, p, blocks.data() + static_cast<size_t>(b) * ti.block_bytes);
        quant::dequantize_row(type, blocks.data(), w.data(), static_cast<int64_t>(w.size()));
    };
    Calibration c;
    if (spec->min_off >= 0) {
        dequant(1, 0);
        const double mx = mean_of(w);
        dequant(0, 1);
        const double my = mean_of(w);
        if (my != 0) c.min_ratio = -mx / my;
    }
    dequant(1, c.min_ratio);
    c.unit_std = std_of(w);
    if (!(c.unit_std > 0) || !std::isfinite(c.unit_std))
        throw std::logic_error("synth: calibration of " + std::string(quant::type_name(type)) + " gave std " +
                               std::to_string(c.unit_std));
    return c;
}

// ---- segments: the unit of seeding, so bytes never depend on how calls are split ----

uint64_t segment_bytes(Type type) {
    const uint32_t bb = quant::type_info(type).block_bytes;
    return std::max<uint64_t>(1, (uint64_t{1} << 16) / bb) * bb;
}

// Values of the element-wise inits, stored as the tensor's float type.
void store(Type type, const float* v, uint8_t* dst, uint64_t n) {
    switch (type) {
        case Type::F32: std::memcpy(dst, v, n * 4); break;
        case Type::F16:
            for (uint64_t i = 0; i < n; ++i) {
                const uint16_t h = quant::f32_to_f16(v[i]);
                std::memcpy(dst + 2 * i, &h, 2);
            }
            break;
        case Type::BF16:
            for (uint64_t i = 0; i < n; ++i) {
                const uint16_t h = quant::f32_to_bf16(v[i]);
                std::memcpy(dst + 2 * i, &h, 2);
            }
            break;
        default: throw std::logic_error("synth: store into a block type");
    }
}

void gen_float(const TensorSpec& t, Rng& rng, uint8_t* dst, uint64_t bytes) {
    const uint64_t elem = quant::type_info(t.type).block_bytes;
    const uint64_t n = bytes / elem;
    std::vector<float> v(n);
    switch (t.init) {
        case Init::linear: {
            // Irwin-Hall(4) of 16-bit uniforms: near-normal (tails cut at 3.5 sigma), 1 draw each.
            const float s = t.target_std() * std::sqrt(3.f) / 65536.f;
            for (auto& x : v) {
                const uint64_t r = rng.next();
                const int64_t sum = static_cast<int64_t>((r & 0xFFFF) + ((r >> 16) & 0xFFFF) +
                                                         ((r >> 32) & 0xFFFF) + (r >> 48));
                x = static_cast<float>(sum - 2 * 65535) * s;
            }
            break;
        }
        case Init::norm:
            for (auto& x : v) x = static_cast<float>(1.0 + 0.1 * rng.normal());
            break;
        case Init::conv:
            for (auto& x : v) x = static_cast<float>(rng.uniform() - 0.5);
            break;
        case Init::ssm_a:
            for (auto& x : v) x = static_cast<float>(-(1.0 + 15.0 * rng.uniform()));
            break;
        case Init::dt_bias:
            for (auto& x : v) {
                const double dt = std::exp(std::log(1e-3) + rng.uniform() * (std::log(0.1) - std::log(1e-3)));
                x = static_cast<float>(std::log(std::expm1(dt)));  // softplus^-1
            }
            break;
    }
    store(t.type, v.data(), dst, n);
}

// Everything fill needs that is the same for every segment of one tensor.
struct TensorGen {
    const TensorSpec& t;
    uint64_t seed;
    uint64_t seg;
    std::optional<PatchTable> patches;

    TensorGen(const TensorSpec& spec, uint64_t s) : t(spec), seed(s), seg(segment_bytes(spec.type)) {
        if (is_float(t.type)) return;
        if (t.init != Init::linear)
            throw std::invalid_argument("synth: tensor '" + t.name + "' needs a float type for its init");
        const Calibration c = calibration(t.type);
        patches = patch_table(t.type, t.target_std() / (c.unit_std * jitter_rms()), c.min_ratio);
    }

    void segment(uint64_t index, uint8_t* dst, uint64_t len) const {
        uint64_t s = seed ^ (index * 0xD1B54A32D192ED03ull);
        Rng rng(splitmix64(s));
        if (!patches) return gen_float(t, rng, dst, len);
        rng.bytes(dst, len);
        const uint32_t bb = quant::type_info(t.type).block_bytes;
        patch_blocks(*patches, dst, len / bb, bb);
    }

    // Bytes [lo, hi) of the tensor into dst (dst[0] is byte lo); segments first..last.
    void range(uint64_t lo, uint64_t hi, uint8_t* dst) const {
        std::vector<uint8_t> tmp;
        for (uint64_t s = lo / seg; s * seg < hi; ++s) {
            const uint64_t s0 = s * seg, s1 = std::min(s0 + seg, t.bytes);
            const uint64_t a = std::max(lo, s0), b = std::min(hi, s1);
            if (a == s0 && b == s1) {
                segment(s, dst + (s0 - lo), s1 - s0);
            } else {  // a call boundary cuts this segment: make all of it, copy the part
                tmp.resize(s1 - s0);
                segment(s, tmp.data(), s1 - s0);
                std::memcpy(dst + (a - lo), tmp.data() + (a - s0), b - a);
            }
        }
    }
};

}  // namespace

float TensorSpec::target_std() const {
    return shape.empty() ? gain : gain / std::sqrt(static_cast<float>(shape[0]));
}

uint64_t tensor_seed(uint64_t seed, std::string_view name) {
    uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a
    for (unsigned char c : name) h = (h ^ c) * 0x100000001B3ull;
    uint64_t x = seed ^ h;
    return splitmix64(x);
}

Calibration calibration(quant::Type type) {
    static std::mutex mu;
    static std::vector<std::pair<Type, Calibration>> cache;
    std::lock_guard lock(mu);
    for (const auto& [t, c] : cache)
        if (t == type) return c;
    const Calibration c = measure(type);
    cache.emplace_back(type, c);
    return c;
}

void fill(const TensorSpec& t, uint64_t seed, uint64_t offset, uint8_t* dst, uint64_t n, int threads) {
    if (offset > t.bytes || n > t.bytes - offset)
        throw std::out_of_range("synth: fill of '" + t.name + "' past its " + std::to_string(t.bytes) + " bytes");
    if (n == 0) return;
    const TensorGen gen(t, seed);
    const uint64_t n_seg = n / gen.seg;
    const int workers = static_cast<int>(std::min<uint64_t>(std::max(threads, 1), std::max<uint64_t>(n_seg / 2, 1)));
    if (workers <= 1) return gen.range(offset, offset + n, dst);
    // Split on segment boundaries so each worker makes whole segments.
    std::vector<std::thread> pool;
    const uint64_t per = (n_seg / workers) * gen.seg;
    uint64_t lo = offset;
    for (int w = 0; w < workers; ++w) {
        uint64_t hi = w + 1 == workers ? offset + n : ((lo + per) / gen.seg) * gen.seg;
        hi = std::clamp(hi, lo, offset + n);
        if (w + 1 < workers) {
            pool.emplace_back([&gen, lo, hi, p = dst + (lo - offset)] { gen.range(lo, hi, p); });
        } else {
            gen.range(lo, hi, dst + (lo - offset));
        }
        lo = hi;
    }
    for (auto& th : pool) th.join();
}

}  // namespace df::model::synth
