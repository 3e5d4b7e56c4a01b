#include "runtime/sampling.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "backend/backend.h"
#include "backend/row_mass.h"

namespace diskformer::sampling {
namespace {

uint64_t splitmix64(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

std::string num(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

}  // namespace

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t chosen, int top) {
    float mx = -INFINITY;
    for (float x : logits) mx = std::max(mx, x);
    double sum = 0;
    if (mx > -INFINITY)
        for (float x : logits) sum += std::exp(static_cast<double>(x) - mx);
    const double lse = mx + std::log(sum);  // -inf + log(0) stays -inf: every token ruled out
    auto lp = [&](int32_t id) {
        const double v = static_cast<double>(logits[static_cast<size_t>(id)]) - lse;
        return std::isnan(v) ? -INFINITY : static_cast<float>(v);
    };
    TokenLogprobs r;
    r.chosen = {chosen, lp(chosen)};
    // The `top` best in one pass: insertion into a short sorted list (most logits fall below its
    // last entry and cost one comparison).
    const size_t k = std::min(static_cast<size_t>(std::max(top, 0)), logits.size());
    std::vector<int32_t> best;
    best.reserve(k + 1);
    auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    for (int32_t id = 0; k > 0 && id < static_cast<int32_t>(logits.size()); ++id) {
        if (best.size() == k && !better(id, best.back())) continue;
        best.insert(std::upper_bound(best.begin(), best.end(), id, better), id);
        if (best.size() > k) best.pop_back();
    }
    for (int32_t id : best) r.top.push_back({id, lp(id)});
    return r;
}

Rng::Rng(uint64_t seed) {
    for (auto& s : s_) s = splitmix64(seed);
}

uint64_t Rng::next() {
    const uint64_t out = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return out;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

void check_options(const GenerateOptions& o) {
    auto bad = [](const std::string& what) { throw Error("generate: " + what); };
    if (o.max_tokens < -1) bad("max_tokens must be -1 (no limit) or at least 0, got " + std::to_string(o.max_tokens));
    if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
        bad("temperature must be 0 (greedy) or positive, got " + num(o.temperature));
    if (o.top_k < 0) bad("top_k must be 0 (off) or positive, got " + std::to_string(o.top_k));
    if (!(o.top_p > 0 && o.top_p <= 1)) bad("top_p must be in (0, 1], got " + num(o.top_p));
    if (!(o.min_p >= 0 && o.min_p < 1)) bad("min_p must be in [0, 1), got " + num(o.min_p));
    if (!(o.repeat_penalty > 0) || !std::isfinite(o.repeat_penalty))
        bad("repeat_penalty must be positive (1: off), got " + num(o.repeat_penalty));
    if (!std::isfinite(o.presence_penalty)) bad("presence_penalty must be finite");
    if (!std::isfinite(o.frequency_penalty)) bad("frequency_penalty must be finite");
    for (const auto& [id, bias] : o.logit_bias) {
        if (id < 0) bad("logit_bias names token " + std::to_string(id));
        if (!std::isfinite(bias)) bad("logit_bias of token " + std::to_string(id) + " must be finite");
    }
    if (o.logprobs < -1 || o.logprobs > kMaxTopLogprobs)
        bad("logprobs must be -1 (off) or 0.." + std::to_string(kMaxTopLogprobs) + " alternatives, got " + std::to_string(o.logprobs));
    if (o.penalty_window < 0) bad("penalty_window must be 0 or positive, got " + std::to_string(o.penalty_window));
    for (const auto& s : o.stop)
        if (s.empty()) bad("a stop string is empty");
}

Sampler::Sampler(const GenerateOptions& o)
    : o_(o),
      plain_greedy_(o.temperature == 0 && (o.penalty_window == 0 || !has_penalties(o)) && o.logit_bias.empty()),
      rng_(o.seed) {}

bool Sampler::has_penalties(const GenerateOptions& o) {
    return o.repeat_penalty != 1 || o.presence_penalty != 0 || o.frequency_penalty != 0;
}

std::vector<std::pair<int32_t, int>> Sampler::window_counts(std::span<const int32_t> recent) const {
    std::vector<std::pair<int32_t, int>> out;
    if (o_.penalty_window == 0 || !has_penalties(o_)) return out;
    const size_t n = std::min(recent.size(), static_cast<size_t>(o_.penalty_window));
    std::vector<int32_t> ids(recent.end() - n, recent.end());
    std::sort(ids.begin(), ids.end());
    for (size_t i = 0; i < ids.size();) {
        const int32_t id = ids[i];
        int count = 0;
        for (; i < ids.size() && ids[i] == id; ++i) ++count;
        out.push_back({id, count});
    }
    return out;
}

// The repeat and presence penalties apply once per distinct token however often it occurs
// (llama.cpp's), the frequency penalty once per occurrence (OpenAI's).
float Sampler::penalized(float l, int count) const {
    l = l > 0 ? l / o_.repeat_penalty : l * o_.repeat_penalty;
    return l - (o_.presence_penalty + o_.frequency_penalty * static_cast<float>(count));
}

void Sampler::apply_penalties(std::vector<float>& logits, std::span<const int32_t> recent) const {
    for (const auto& [id, count] : window_counts(recent))
        if (id >= 0 && static_cast<size_t>(id) < logits.size()) logits[id] = penalized(logits[id], count);
}

// A total order (logit, then lower id first) so that every selection and sort has one result and
// the same seed gives the same token with any standard library.
bool Sampler::before(const Cand& a, const Cand& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); }

void Sampler::top_candidates(const std::vector<float>& logits, size_t k) {
    cands_.resize(k);
    for (size_t i = 0; i < k; ++i) cands_[i] = {logits[i], static_cast<int32_t>(i)};
    std::make_heap(cands_.begin(), cands_.end(), Before{});  // its front: the worst one kept
    for (size_t i = k; i < logits.size(); ++i) {
        // A later id loses a tie, so only a larger logit gets in (a NaN never does).
        if (!(logits[i] > cands_.front().logit)) continue;
        std::pop_heap(cands_.begin(), cands_.end(), Before{});
        cands_.back() = {logits[i], static_cast<int32_t>(i)};
        std::push_heap(cands_.begin(), cands_.end(), Before{});
    }
    // Sorted, so that top-p's mass is summed in one order whatever the path (sample_top).
    std::sort_heap(cands_.begin(), cands_.end(), Before{});
}

// before's order as one unsigned key: the logit's order bits (larger first; -0 as +0, which
// before cannot tell apart; NaN last) above the id (lower first). before is a total order on
// the keys' values, so any sort by key puts candidates in the one order std::sort would.
uint64_t Sampler::sort_key(const Cand& x) {
    const float l = x.logit == 0 ? 0.f : x.logit;
    const uint32_t u = std::bit_cast<uint32_t>(l);
    const uint32_t ascending = std::isnan(l) ? 0 : (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return static_cast<uint64_t>(~ascending) << 32 | static_cast<uint32_t>(x.id);
}

void Sampler::sort(std::vector<Cand>& c, size_t from) {
    const size_t n = c.size() - from;
    if (n < 2048) {
        std::sort(c.begin() + static_cast<std::ptrdiff_t>(from), c.end(), Before{});
        return;
    }
    // A whole vocabulary (top-k off, a flat distribution under top-p): LSD radix sort of the
    // keys, 8 bits a pass, passes where every key has the same byte skipped; several times
    // std::sort's speed at 150k candidates.
    std::vector<uint64_t>& keys = keys_;
    std::vector<uint64_t>& tmp = keys_tmp_;
    keys.resize(n);
    tmp.resize(n);
    for (size_t i = 0; i < n; ++i) keys[i] = sort_key(c[from + i]);
    for (int shift = 0; shift < 64; shift += 8) {
        size_t count[257] = {};
        for (uint64_t k : keys) ++count[((k >> shift) & 255) + 1];
        if (std::any_of(count + 1, count + 257, [&](size_t x) { return x == n; })) continue;
        for (int b = 0; b < 256; ++b) count[b + 1] += count[b];
        for (uint64_t k : keys) tmp[count[(k >> shift) & 255]++] = k;
        keys.swap(tmp);
    }
    for (size_t i = 0; i < n; ++i) {
        const uint32_t ascending = ~static_cast<uint32_t>(keys[i] >> 32);
        const uint32_t u = ascending == 0 ? 0x7fc00000u : (ascending & 0x80000000u) ? ascending & 0x7fffffffu : ~ascending;
        c[from + i] = {std::bit_cast<float>(u), static_cast<int32_t>(static_cast<uint32_t>(keys[i]))};
    }
}

void Sampler::truncate(std::vector<Cand>& c) {
    const size_t k = o_.top_k > 0 ? std::min(c.size(), static_cast<size_t>(o_.top_k)) : c.size();
    if (k < c.size()) {
        std::nth_element(c.begin(), c.begin() + k, c.end(), Before{});
        c.resize(k);
    }
    auto max_logit = [&] {
        return std::max_element(c.begin(), c.end(), [](const Cand& a, const Cand& b) { return a.logit < b.logit; })->logit;
    };
    bool sorted_all = false;
    if (o_.top_p < 1) {
        // Sort only as far as the mass reaches p: usually a few dozen of 150k tokens. The mass in
        // df::mass_term's integers: a GPU can sum a row to the same normalizer (sample_top).
        const float lmax = max_logit();
        uint64_t z = 0;
        for (const auto& x : c) z += df::mass_term(x.logit, lmax);
        const double want = o_.top_p * static_cast<double>(z);
        uint64_t cum = 0;
        size_t sorted = 0, keep = c.size();
        bool reached = false;
        while (sorted < c.size() && !reached) {
            // partial_sort is a heap: good for a short head (the usual nucleus is a few dozen
            // tokens), slower than a sort of the rest for a long one.
            size_t upto = std::max<size_t>(64, sorted * 8);
            if (upto > 512 || upto >= c.size() / 4) {
                upto = c.size();
                sort(c, sorted);
            } else {
                std::partial_sort(c.begin() + sorted, c.begin() + upto, c.end(), Before{});
            }
            for (; sorted < upto; ++sorted) {
                cum += df::mass_term(c[sorted].logit, lmax);
                if (static_cast<double>(cum) >= want) {
                    keep = sorted + 1;
                    reached = true;
                    break;
                }
            }
        }
        c.resize(keep);
        sorted_all = true;  // the kept ones are the sorted head
    }
    if (o_.min_p > 0 && !sorted_all) {
        // Only those at the floor or above can stay (below: the cut after the sort would drop
        // them): drop the rest before sorting. The likeliest is always kept.
        const float lmax = max_logit();
        const float floor = lmax + std::log(o_.min_p);
        c.erase(std::remove_if(c.begin(), c.end(), [&](const Cand& x) { return x.logit < floor; }), c.end());
    }
    if (!sorted_all) sort(c, 0);
    cut_min_p(c);
}

bool Sampler::cut_min_p(std::vector<Cand>& c) const {
    if (o_.min_p <= 0) return false;
    const float floor = c.front().logit + std::log(o_.min_p);
    const auto below = std::find_if(c.begin() + 1, c.end(), [&](const Cand& x) { return x.logit < floor; });
    const bool cut = below != c.end();
    c.erase(below, c.end());
    return cut;
}

int32_t Sampler::sample(std::vector<float>& logits, std::span<const int32_t> recent,
                        const std::function<bool(int32_t)>& allowed, const std::function<void(std::vector<float>&)>& mask) {
    if (logits.empty()) throw Error("generate: no logits to sample from");
    apply_penalties(logits, recent);
    for (const auto& [t, bias] : o_.logit_bias) {
        if (static_cast<size_t>(t) >= logits.size())
            throw Error("generate: logit_bias names token " + std::to_string(t) + ", past the vocabulary's " + std::to_string(logits.size()));
        logits[static_cast<size_t>(t)] += bias;
    }
    const int32_t id = pick(logits);
    if (!allowed || allowed(id)) return id;
    if (mask) {
        mask(logits);
    } else {
        for (size_t i = 0; i < logits.size(); ++i)
            if (!allowed(static_cast<int32_t>(i))) logits[i] = -INFINITY;
    }
    if (std::none_of(logits.begin(), logits.end(), [](float x) { return x > -INFINITY; }))
        throw Error("generate: no token can continue the constrained answer");
    return pick(logits);
}

size_t Sampler::top_plan(size_t n_vocab, std::span<const int32_t> recent, std::vector<int32_t>& extra) const {
    extra.clear();
    // DF_SAMPLE_WHOLE_ROW=1: always the whole row (for A/B timing; the same tokens).
    static const bool whole_row = [] {
        const char* e = std::getenv("DF_SAMPLE_WHOLE_ROW");
        return e && std::string(e) == "1";
    }();
    if (whole_row) return 0;
    // pick()'s paths: greedy (the best one), or the top-k candidates when k < n_vocab / 4; with
    // top-k off, the row's head when top-p or min-p may cut within it (sample_top says).
    const bool head = head_mode();
    const size_t k = o_.temperature == 0 ? 1 : static_cast<size_t>(o_.top_k);
    if (!head && (k == 0 || (o_.temperature > 0 && k >= n_vocab / 4))) return 0;
    for (const auto& [id, count] : window_counts(recent))
        if (id >= 0 && static_cast<size_t>(id) < n_vocab) extra.push_back(id);
    for (const auto& [id, bias] : o_.logit_bias) {
        if (static_cast<size_t>(id) >= n_vocab) return 0;  // sample() names the error
        extra.push_back(id);
    }
    std::sort(extra.begin(), extra.end());
    extra.erase(std::unique(extra.begin(), extra.end()), extra.end());
    constexpr size_t kMax = df::Backend::kTopLogitsMax;  // Session::top_logits's bound
    if (head) return extra.size() <= kMax ? std::min(n_vocab, kMax) : 0;
    const size_t n_top = k + extra.size();
    if (n_top > std::min(n_vocab, kMax)) return 0;
    return n_top;
}

int32_t Sampler::sample_top(std::span<const std::pair<int32_t, float>> cands, size_t n_top, std::span<const int32_t> recent,
                            const std::function<uint64_t(float)>& mass) {
    if (n_top == 0 || n_top > cands.size()) throw Error("generate: no candidates to sample from");
    // The changed tokens (cands past n_top, sorted by id as top_plan left them): their logits
    // after the penalties and biases, by the same operations as sample().
    std::vector<Cand> changed;
    for (size_t i = n_top; i < cands.size(); ++i) changed.push_back({cands[i].second, cands[i].first});
    std::vector<Cand> raw;  // their logits as they were (the head path swaps their mass terms)
    if (head_mode()) raw = changed;
    auto find = [&](int32_t id) {
        const auto it = std::lower_bound(changed.begin(), changed.end(), id, [](const Cand& c, int32_t v) { return c.id < v; });
        return it != changed.end() && it->id == id ? it : changed.end();
    };
    for (const auto& [id, count] : window_counts(recent))
        if (const auto it = find(id); it != changed.end()) it->logit = penalized(it->logit, count);
    for (const auto& [id, bias] : o_.logit_bias)
        if (const auto it = find(id); it != changed.end()) it->logit += bias;
    cands_.clear();
    for (size_t i = 0; i < n_top; ++i)
        if (find(cands[i].first) == changed.end()) cands_.push_back({cands[i].second, cands[i].first});
    cands_.insert(cands_.end(), changed.begin(), changed.end());
    if (head_mode()) return sample_head({cands[n_top - 1].second, cands[n_top - 1].first}, raw, changed, mass);
    // The k best of them are the k best of the whole row: any other token has k unchanged ones
    // above it.
    const size_t k = std::min(cands_.size(), o_.temperature == 0 ? size_t{1} : static_cast<size_t>(o_.top_k));
    if (k == 0) throw Error("generate: sample_top needs top-k on (top_plan returns 0 without it)");
    std::partial_sort(cands_.begin(), cands_.begin() + static_cast<std::ptrdiff_t>(k), cands_.end(), Before{});
    cands_.resize(k);
    if (o_.temperature == 0) return cands_.front().id;
    return draw();
}

int32_t Sampler::pick(const std::vector<float>& logits) {
    if (o_.temperature == 0) {
        // max_element returns the first maximum: the lowest id wins a tie.
        return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    const size_t k = o_.top_k > 0 ? static_cast<size_t>(o_.top_k) : logits.size();
    if (k < logits.size() / 4) {
        top_candidates(logits, k);  // ~1 ms less per token than selecting among 150k candidates
    } else {
        cands_.resize(logits.size());
        for (size_t i = 0; i < logits.size(); ++i) cands_[i] = {logits[i], static_cast<int32_t>(i)};
    }
    return draw();
}

int32_t Sampler::sample_head(const Cand& edge, std::span<const Cand> raw, std::span<const Cand> changed,
                             const std::function<uint64_t(float)>& mass) {
    // cands_: the row's likeliest but the changed tokens, and those with their new logits. Every
    // other token comes after `edge` (the last of the likeliest, as it was) in before's order, so
    // the candidates up to it, sorted, are the head of the whole row sorted: exact.
    if (std::any_of(cands_.begin(), cands_.end(), [](const Cand& x) { return std::isnan(x.logit); }) || std::isnan(edge.logit))
        return -1;
    std::sort(cands_.begin(), cands_.end(), Before{});
    size_t exact = 0;
    while (exact < cands_.size() && !before(edge, cands_[exact])) ++exact;
    if (exact == 0) return -1;
    // truncate()'s cuts, made where they fall within the exact head (else the whole row decides).
    const float lmax = cands_.front().logit;
    bool cut = false;
    size_t keep = exact;
    if (o_.top_p < 1) {
        if (!mass) return -1;
        // The row's mass as the backend summed it, with the changed tokens' terms swapped for
        // their new logits' (integers: the sum truncate() takes over the changed row).
        uint64_t z = mass(lmax);
        for (size_t i = 0; i < changed.size(); ++i) z = z - df::mass_term(raw[i].logit, lmax) + df::mass_term(changed[i].logit, lmax);
        const double want = o_.top_p * static_cast<double>(z);
        uint64_t cum = 0;
        for (size_t i = 0; i < exact && !cut; ++i) {
            cum += df::mass_term(cands_[i].logit, lmax);
            if (static_cast<double>(cum) >= want) {
                keep = i + 1;
                cut = true;
            }
        }
    }
    cands_.resize(keep);
    if (cut_min_p(cands_)) cut = true;
    if (!cut) return -1;  // the survivors may reach past the head
    return draw_kept();
}

int32_t Sampler::draw() {
    truncate(cands_);
    return draw_kept();
}

int32_t Sampler::draw_kept() {
    // Temperature scales the survivors only (llama.cpp's order: truncate, then temperature).
    const float lmax = cands_.front().logit;
    std::vector<double>& w = weights_;
    w.resize(cands_.size());
    double total = 0;
    for (size_t i = 0; i < cands_.size(); ++i) total += w[i] = std::exp((cands_[i].logit - lmax) / o_.temperature);
    const double u = rng_.uniform() * total;
    double cum = 0;
    for (size_t i = 0; i < cands_.size(); ++i) {
        cum += w[i];
        if (u < cum) return cands_[i].id;
    }
    for (size_t i = cands_.size(); i-- > 0;)  // u within rounding of total: the last one with weight
        if (w[i] > 0) return cands_[i].id;
    return cands_.front().id;
}

}  // namespace diskformer::sampling
