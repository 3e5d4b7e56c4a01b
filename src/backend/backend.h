// The Backend interface: buffers plus the ops a layer program is written against.
//
// A layer program (src/model) is written once against this interface and serves both a chunk of
// T prompt tokens and a one-token step. The CPU backend runs each op directly; the CUDA backend
// records it on a stream (and captures decode once as a graph), so:
//   * every pointer argument is backend memory (host memory for cpu, device memory for cuda);
//   * token ids and positions are read from backend memory (Step::tokens / Step::pos), never passed
//     by value, so a captured graph replays unchanged for the next token;
//   * an op never returns data to the host except through download().
// All activations are f32 and row-major with one row per token (contiguous, no padding) unless an
// argument says otherwise. Contracts on each op name shapes and what may alias.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "quant/types.h"

namespace df {

// What an allocation is for (memory accounting in Stats and bench).
enum class MemKind : uint8_t { weights, kv, state, scratch, count_ };

enum class KvType : uint8_t { f32, f16 };

// A weight matrix as the backend holds it: `rows` outputs, each a row of `cols` inputs stored as
// `cols / block_elems` consecutive blocks of `type` (ggml layout, unless the backend repacked it;
// `data` is then only meaningful to that backend).
struct Weight {
    quant::Type type = quant::Type::F32;
    int64_t cols = 0;
    int64_t rows = 0;
    const void* data = nullptr;
    size_t bytes = 0;
    size_t row_stride = 0;  // bytes between rows as held by the backend
};

// The tokens of one forward call. tokens[T] and pos[T] live in backend memory, written by the
// caller's uploads or by the previous call's argmax feed (its last op); no other op writes them
// (CUDA kernels read pos before waiting for the kernel before them, and a forward's first kernel
// waits for everything before it).
struct Step {
    int T = 0;                      // tokens in this call (1 for decode)
    const int32_t* tokens = nullptr;
    const int32_t* pos = nullptr;   // absolute position of each token (consecutive, ascending)
    int pos0_hint = 0;              // host copy of pos[0]; may be stale inside a replayed graph
    int max_ctx = 0;                // context capacity (KV rows) of the session
};

// Where argmax also leaves the next one-token step's inputs, so that a greedy decode loop feeds
// itself on the backend and uploads nothing: tokens[0] = the last row's argmax, pos[0] = pos[T - 1]
// + 1 (tokens and pos: the Step buffers of the forward whose logits argmax reads, T its tokens).
struct ArgmaxFeed {
    int32_t* tokens = nullptr;
    int32_t* pos = nullptr;
    int T = 0;
};

// Geometry of one causal attention call over a KV cache.
struct AttnShape {
    int heads = 0;         // query heads
    int kv_heads = 0;      // heads % kv_heads == 0 (GQA)
    int head_dim = 0;
    int q_stride = 0;      // floats between consecutive query heads inside a token's row
    int q_row = 0;         // floats between tokens in the query buffer
    float scale = 0.f;     // softmax scale, 1/sqrt(head_dim)
};

// Geometry of a Gated DeltaNet layer (value head j uses key head j % k_heads).
struct GdnShape {
    int k_heads = 0;       // Hk
    int v_heads = 0;       // Hv
    int head_dim = 0;      // Dk = Dv (ssm.state_size)
    int conv_kernel = 4;   // taps, including the current token
    int channels() const { return (2 * k_heads + v_heads) * head_dim; }
};

// One GDN layer's small weights and its recurrent state (Backend::gdn_mix).
struct GdnLayer {
    const float* conv_w = nullptr;   // [C, taps]
    const float* dt_bias = nullptr;  // [Hv]
    const float* a_neg = nullptr;    // [Hv]
    const float* norm_w = nullptr;   // [head_dim]
    float* conv_state = nullptr;     // [taps - 1, C]
    float* state = nullptr;          // [Hv, Dv, Dk]
};

// One sequence's rows in a batched attention (Backend::attention_lanes): rows [row0, row0 + s.T)
// of the pass, its Step (s.pos inside the pass's positions, so that row r's is pass_pos[r]) and
// its KV cache.
struct AttnLane {
    void* k_cache = nullptr;
    void* v_cache = nullptr;
    Step s;
    int row0 = 0;
};

// One sequence's rows and recurrent state in a batched GDN mix (Backend::gdn_mix_lanes).
struct GdnMixLane {
    float* qkv = nullptr;          // as gdn_mix's arguments, for this sequence's T rows
    const float* z = nullptr;
    const float* alpha = nullptr;
    const float* beta = nullptr;
    float* conv_state = nullptr;
    float* state = nullptr;
    float* out = nullptr;
    int T = 0;
};

// RoPE (NeoX pairing (i, i + n_rot/2) over the first n_rot dims of each head).
struct RopeShape {
    int n_rot = 0;
    float base = 10000.f;
    // Pair i of a head turns by pos * theta_scale()^i. One expression for every backend: their
    // rotations, and so their bits, agree only if this float does.
    float theta_scale() const { return std::pow(base, -2.0f / static_cast<float>(n_rot)); }
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual std::string name() const = 0;

    // ---- memory ------------------------------------------------------------------------------
    virtual void* alloc(size_t bytes, MemKind kind) = 0;   // zero-filled; throws on failure
    virtual void release(void* p) = 0;
    virtual void upload(void* dst, const void* src, size_t bytes) = 0;
    virtual void download(void* dst, const void* src, size_t bytes) = 0;
    virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // backend to backend
    virtual void zero(void* dst, size_t bytes) = 0;
    virtual void synchronize() {}
    // Makes the calling thread's later calls reach this backend's device (CUDA: its current
    // device): a thread other than the one that made the backend may use it next (the server's
    // workers take turns through the runtime's engine, which calls this for each).
    virtual void bind_thread() {}
    // Memory that ops write like any other and the host reads in place once synchronize() has
    // returned: a small result (the argmax) comes back without a copy call. CUDA: mapped pinned
    // host memory; the CPU backend's memory is the host's anyway. Zero-filled; release() frees it.
    virtual void* alloc_host_visible(size_t bytes, MemKind kind) { return alloc(bytes, kind); }
    // Makes a weight usable by the ops. host points into the mapped GGUF and stays valid for the
    // model's lifetime (the CPU backend uses it in place; CUDA copies it).
    virtual Weight load_weight(quant::Type type, int64_t cols, int64_t rows, const void* host,
                               size_t bytes) = 0;
    virtual size_t bytes_in_use(MemKind kind) const = 0;
    virtual size_t peak_bytes(MemKind kind) const = 0;

    // ---- ops -------------------------------------------------------------------------------
    // out[t] = dequant(w row tokens[t]); out [T, w.cols].
    virtual void embed(const Weight& w, const Step& s, float* out) = 0;

    // out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, for rows r < n_rows of n floats with row
    // strides in floats. weight [n] (may be null: no scaling). out may alias x.
    virtual void rmsnorm(const float* x, int64_t x_stride, const float* weight, int n_rows, int n,
                         float eps, float* out, int64_t out_stride) = 0;

    // out[t, r] = sum_c W[r, c] * x[t, c]  (+ out[t, r] when accumulate).
    // x [T, w.cols], out [T, w.rows]; x must not alias out.
    virtual void matmul(const Weight& w, const float* x, int T, float* out, bool accumulate = false) = 0;

    // out[t, j] = silu(gate[t, j]) * up[t, j] with gate = Wg x, up = Wu x; out [T, wg.rows].
    // Default: two matmuls and swiglu through scratch supplied by the caller.
    virtual void ffn_gate_up(const Weight& wg, const Weight& wu, const float* x, int T, float* out,
                             float* scratch) = 0;

    // In place on T tokens of `heads` heads of head_dim floats, head h of token t at
    // x + t*row + h*head_stride: x = rmsnorm(x) * norm_w (norm_w [head_dim], may be null),
    // then NeoX RoPE at position s.pos[t] over the first rope.n_rot dims.
    virtual void head_norm_rope(float* x, int heads, int head_dim, int head_stride, int row,
                                const float* norm_w, float eps, const RopeShape& rope,
                                const Step& s) = 0;

    // Stores k, v ([T, kv_heads*head_dim] each) at rows s.pos[t] of this layer's cache
    // ([max_ctx, kv_heads*head_dim] of kv type each).
    virtual void kv_store(const float* k, const float* v, void* k_cache, void* v_cache, KvType kt,
                          int kv_dim, const Step& s) = 0;

    // Causal GQA attention of T queries (token t attends cache rows 0..s.pos[t]) with online
    // softmax; out [T, heads*head_dim]. q laid out by AttnShape strides. Here alone pos need not
    // be consecutive: the DFlash drafter gives every query of its block the block's last
    // position, which makes the block attend bidirectionally (model/dflash.h).
    virtual void attention(const float* q, const void* k_cache, const void* v_cache, KvType kt,
                           const AttnShape& a, const Step& s, float* out) = 0;

    // The per-sequence part of an attention block over the rows of a batched forward: for each
    // lane, what a lone forward issues (head_norm_rope of its q rows with q_norm and of its k rows
    // with k_norm, kv_store of its k and v rows, attention of its q rows into its out rows), with
    // those calls' bits in out and the caches (a backend may run all lanes as one launch per op,
    // or fold the norms into the attention and leave q and k as they were). q [rows, a.q_row]
    // (heads at a.q_stride), k and v [rows, kv_heads * head_dim], out [rows, heads * head_dim].
    virtual void attention_lanes(std::span<const AttnLane> lanes, float* q, float* k, const float* v,
                                 const float* q_norm, const float* k_norm, float eps, const RopeShape& rope,
                                 KvType kt, const AttnShape& a, float* out) {
        const int kv_dim = a.kv_heads * a.head_dim;
        for (const AttnLane& ln : lanes) {
            float* lq = q + static_cast<int64_t>(ln.row0) * a.q_row;
            float* lk = k + static_cast<int64_t>(ln.row0) * kv_dim;
            head_norm_rope(lq, a.heads, a.head_dim, a.q_stride, a.q_row, q_norm, eps, rope, ln.s);
            head_norm_rope(lk, a.kv_heads, a.head_dim, a.head_dim, kv_dim, k_norm, eps, rope, ln.s);
            kv_store(lk, v + static_cast<int64_t>(ln.row0) * kv_dim, ln.k_cache, ln.v_cache, kt, kv_dim, ln.s);
            attention(lq, ln.k_cache, ln.v_cache, kt, a, ln.s, out + static_cast<int64_t>(ln.row0) * a.heads * a.head_dim);
        }
    }

    // x[t, i] *= sigmoid(gate[t*gate_row + (i / width) * gate_stride + i % width]) for i < n.
    virtual void sigmoid_mul(float* x, int n, const float* gate, int width, int gate_stride,
                             int gate_row, int T) = 0;

    // Causal depthwise conv over T tokens of C channels with a carried state of the previous
    // (taps - 1) inputs ([taps-1, C], oldest first), then SiLU. w [C, taps] (tap taps-1 multiplies
    // the current token). In place on x [T, C]; the state is updated.
    virtual void gdn_conv(float* x, int T, const GdnShape& g, const float* w, float* conv_state) = 0;

    // The gated delta rule over T tokens. qkv [T, C] (after conv): q heads, then k heads, then v
    // heads. alpha/beta [T, Hv] are the raw projections; g = softplus(alpha + dt_bias) * a_neg,
    // beta = sigmoid(beta). q, k are L2-normalised (eps) inside. state [Hv, Dv, Dk] f32 (value
    // column c of head j is a contiguous run over the key index). out [T, Hv*Dv] (scaled by
    // 1/sqrt(Dk)).
    virtual void gdn_delta(const float* qkv, const float* alpha, const float* beta,
                           const float* dt_bias, const float* a_neg, int T, const GdnShape& g,
                           float eps, float* state, float* out) = 0;

    // out[t, j, :] = rmsnorm(x[t, j, :]) * w * silu(z[t, j, :]) per head j of n floats.
    // x, z, out [T, heads*n]; out may alias x.
    virtual void gated_rmsnorm(const float* x, const float* z, const float* w, int T, int heads,
                               int n, float eps, float* out) = 0;

    // The GDN mixer after its projections: gdn_conv on qkv, gdn_delta into out, then
    // gated_rmsnorm of out with z, in one call so that a backend may fuse them (qkv's and z's
    // contents are unspecified afterwards: the CUDA backend may leave parts of the matmuls that
    // wrote them for the mixer to sum). out must not alias qkv or z.
    virtual void gdn_mix(float* qkv, const float* z, const float* alpha, const float* beta, const GdnLayer& l,
                         int T, const GdnShape& g, float eps, float* out) {
        gdn_conv(qkv, T, g, l.conv_w, l.conv_state);
        gdn_delta(qkv, alpha, beta, l.dt_bias, l.a_neg, T, g, eps, l.state, out);
        gated_rmsnorm(out, z, l.norm_w, T, g.v_heads, g.head_dim, eps, out);
    }

    // gdn_mix for several sequences of a batched forward: the small weights of w (its states
    // unused) for all, each lane its own rows and states; every lane's results are those of its
    // own gdn_mix call, bit for bit (a backend may run them as one launch).
    virtual void gdn_mix_lanes(std::span<const GdnMixLane> lanes, const GdnLayer& w, const GdnShape& g, float eps) {
        for (const GdnMixLane& ln : lanes) {
            GdnLayer l = w;
            l.conv_state = ln.conv_state;
            l.state = ln.state;
            gdn_mix(ln.qkv, ln.z, ln.alpha, ln.beta, l, ln.T, g, eps, ln.out);
        }
    }

    // y[i] += x[i] for i < n.
    virtual void add(float* y, const float* x, int64_t n) = 0;

    // out[t] = argmax over x[t, 0..n) (lowest index wins ties); with `feed`, also the next step's
    // inputs (ArgmaxFeed) from out[T - 1].
    virtual void argmax(const float* x, int T, int n, int32_t* out, const ArgmaxFeed* feed = nullptr) = 0;

    // A sampler's candidates without the whole row's copy (Session::top_logits): the k largest
    // of x[0..n) in top_key's order (larger first, then the lower index; -0 as +0, NaN after
    // every number) into ids[0..k) and vals[0..k), then ids[k + i] = extra[i] and vals[k + i] =
    // x[extra[i]] for i < n_extra. 1 <= k <= min(n, kTopLogitsMax), 0 <= n_extra <=
    // kTopLogitsMax, each extra in [0, n); throws otherwise. extra, ids and vals are
    // host-visible (alloc_host_visible): the host writes extra before the call and reads ids and
    // vals after synchronize(). Not while recording a graph.
    static constexpr int kTopLogitsMax = 1024;
    virtual void top_logits(const float* x, int n, int k, const int32_t* extra, int n_extra, int32_t* ids,
                            float* vals) = 0;
    // The sum of mass_term(x[i], lmax) over i < n (row_mass.h: exp(x - lmax) in fixed point, so
    // any order gives the same sum): top-p's normalizer without the row's copy. n >= 1.
    // Synchronizes. Not while recording a graph.
    virtual uint64_t row_mass(const float* x, int n, float lmax) = 0;

    // ---- graphs (decode) ----------------------------------------------------------------------
    // A forward step whose changing inputs all live in backend memory (Step::tokens/pos, caches,
    // state) is recorded once and replayed for every later token:
    //   if (!be.replay(key)) {
    //       const bool recording = be.begin_capture(key);
    //       ... issue the step's ops ...
    //       if (recording) { be.end_capture(); be.replay(key); }
    //   }
    // `key` names the buffers and shapes the ops use (e.g. the session's state and T): several
    // sessions (a drafter beside its target) keep their own graphs on one backend. A graph holds
    // pointers, so drop_capture(key) must come before those buffers are released. While
    // recording, ops are recorded, not run, and upload/download/synchronize/alloc must not be
    // called. Backends without graphs (CPU) keep these defaults: nothing is recorded, ops run.
    // A backend may pick kernels by context length (the host's Step::pos0_hint): it then names the
    // step's length band, 0 .. kGraphVariants - 1, and callers record a graph per band (key + band),
    // so a replayed graph always runs with positions in the band it was recorded for.
    static constexpr int kGraphVariants = 4;
    virtual int graph_variant(const Step& s) const { return 0; }
    virtual bool begin_capture(uint64_t key) { return false; }
    virtual void end_capture() {}
    virtual bool replay(uint64_t key) { return false; }  // false: nothing recorded under key
    virtual void drop_capture(uint64_t key) {}
};

std::unique_ptr<Backend> make_cpu_backend(int threads = 0);  // 0: one per core
#ifdef DF_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend(int device = 0);
bool cuda_device_available();
#endif

}  // namespace df
