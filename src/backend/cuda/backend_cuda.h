// The CUDA backend: every op is enqueued on one stream; decode steps are captured as CUDA graphs.
//
// Weights are uploaded once in ggml block layout (rows padded, 4k+2 blocks split: layout.h);
// types without a native decoder are expanded to F32 at load. Memory is accounted per MemKind.
#pragma once

#include <array>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/cuda/kernels.h"

namespace df::cuda {

struct GdnStepArgs;

class CudaBackend final : public Backend {
public:
    explicit CudaBackend(int device);
    ~CudaBackend() override;
    CudaBackend(const CudaBackend&) = delete;
    CudaBackend& operator=(const CudaBackend&) = delete;

    std::string name() const override { return "cuda"; }

    void* alloc(size_t bytes, MemKind kind) override;
    void release(void* p) override;
    void* alloc_host_visible(size_t bytes, MemKind kind) override;
    void upload(void* dst, const void* src, size_t bytes) override;
    void download(void* dst, const void* src, size_t bytes) override;
    void copy(void* dst, const void* src, size_t bytes) override;
    void zero(void* dst, size_t bytes) override;
    void bind_thread() override;
    void synchronize() override;
    Weight load_weight(quant::Type type, int64_t cols, int64_t rows, const void* host, size_t bytes) override;
    size_t bytes_in_use(MemKind kind) const override;
    size_t peak_bytes(MemKind kind) const override;

    void embed(const Weight& w, const Step& s, float* out) override;
    void rmsnorm(const float* x, int64_t x_stride, const float* weight, int n_rows, int n, float eps,
                 float* out, int64_t out_stride) override;
    void matmul(const Weight& w, const float* x, int T, float* out, bool accumulate) override;
    void ffn_gate_up(const Weight& wg, const Weight& wu, const float* x, int T, float* out,
                     float* scratch) override;
    void head_norm_rope(float* x, int heads, int head_dim, int head_stride, int row, const float* norm_w,
                        float eps, const RopeShape& rope, const Step& s) override;
    void kv_store(const float* k, const float* v, void* k_cache, void* v_cache, KvType kt, int kv_dim,
                  const Step& s) override;
    void attention(const float* q, const void* k_cache, const void* v_cache, KvType kt, const AttnShape& a,
                   const Step& s, float* out) override;
    void sigmoid_mul(float* x, int n, const float* gate, int width, int gate_stride, int gate_row,
                     int T) override;
    void gdn_conv(float* x, int T, const GdnShape& g, const float* w, float* conv_state) override;
    void gdn_delta(const float* qkv, const float* alpha, const float* beta, const float* dt_bias,
                   const float* a_neg, int T, const GdnShape& g, float eps, float* state, float* out) override;
    void gated_rmsnorm(const float* x, const float* z, const float* w, int T, int heads, int n, float eps,
                       float* out) override;
    void gdn_mix(float* qkv, const float* z, const float* alpha, const float* beta, const GdnLayer& l, int T,
                 const GdnShape& g, float eps, float* out) override;
    void gdn_mix_lanes(std::span<const GdnMixLane> lanes, const GdnLayer& w, const GdnShape& g, float eps) override;
    void attention_lanes(std::span<const AttnLane> lanes, float* q, float* k, const float* v, const float* q_norm,
                         const float* k_norm, float eps, const RopeShape& rope, KvType kt, const AttnShape& a,
                         float* out) override;
    void add(float* y, const float* x, int64_t n) override;
    void argmax(const float* x, int T, int n, int32_t* out, const ArgmaxFeed* feed) override;
    void top_logits(const float* x, int n, int k, const int32_t* extra, int n_extra, int32_t* ids, float* vals) override;
    uint64_t row_mass(const float* x, int n, float lmax) override;

    int graph_variant(const Step& s) const override;
    bool begin_capture(uint64_t key) override;
    void end_capture() override;
    bool replay(uint64_t key) override;
    void drop_capture(uint64_t key) override;

    // Prefill GEMM precision: true (default) = three bf16 products per tile (f32-like); false =
    // one (bf16-rounded operands). DF_CUDA_GEMM=bf16 in the environment selects false.
    void set_split_gemm(bool split) { split_gemm_ = split; }
    // Whether a T-token matmul of w runs on the integer tensor cores (imma.cuh); for tests.
    bool matvec_on_tensor_cores(const Weight& w, int T) const { return use_imma(w, T); }
    // Two imma matmuls of a held-back group as one launch where their type pair is built
    // (imma_two.cuh; on by default, DF_CUDA_IMMA_TWO=0 turns it off). For tests and A/B runs.
    void set_imma_two(bool on) {
        flush();
        imma_two_ = on;
    }
    // Prefill GEMM on exact f16 weights (gemm_q.cuh) where the type has it: on by default
    // (DF_CUDA_QGEMM=0 turns it off); off, the dequantizing bf16 GEMM runs. For tests and A/B runs.
    void set_qgemm(bool on) {
        flush();
        qgemm_ = on;
        qg_src_ = nullptr;
    }
    // The wgmma form of the exact-f16 GEMM where the build and the device have it (else a no-op).
    void set_qgemm_wgmma(bool on) {
        flush();
        qg_wg_ = on && qg_wg_able_;
        qg_src_ = nullptr;
    }
    bool qgemm_wgmma() const { return qg_wg_; }
    // Every weight of the wgmma GEMM on its folded-scales form (DF_CUDA_QGEMM_FOLD=1; for tests).
    void set_qgemm_fold(bool on) {
        flush();
        fold_all_ = on;
    }
    // The wgmma GEMM's 16- and 64-token blocks for short T (kernels.h's qgemm_wg_ina_tokens); off:
    // every T on the wide blocks, 256 / 128 tokens (DF_CUDA_QGEMM_NARROW=0; for tests and A/B runs).
    void set_qgemm_narrow(bool on) {
        flush();
        narrow_ = on;
    }
    // Decode RMSNorm folded into the f32 register matvecs that read its output (the ring
    // kernels' types take the register kernel then). Off by default: on the H200 it measured
    // 1.7 % slower on the 4B preset (every block of every matvec repeats the norm before its
    // main loop), and folded into the ring kernels themselves 13 % (session 41,
    // bench/experiments/norm_fold_ring.patch); DF_CUDA_FOLD_NORM=1 turns it on. For tests and A/B runs.
    void set_fold_norm(bool on) {
        flush();
        fold_norm_ = on;
    }
    bool fold_norm() const { return fold_norm_; }
    // ImmaArgs::defer's reach (DF_CUDA_IMMA_DEFER): 0 off, 1 the fused gate/up, 2 also the
    // accumulating launches on the main stream, 3 (the default) also the GDN's q/k/v + z pair
    // read by the fused GDN step. For tests and A/B runs.
    void set_imma_defer(int level) {
        flush();
        settle_deferred();
        imma_defer_ = level;
    }
    int imma_defer() const { return imma_defer_; }
    // The fused GDN step's blocks per value head (1, 2 or 4; DF_CUDA_GDN_SPLIT). For tests.
    void set_gdn_split(int blocks) {
        flush();
        gdn_split_ = blocks;
    }
    int gdn_split() const { return gdn_split_; }
    bool gemm_on_exact_f16(const Weight& w, int T) const { return use_qgemm(w, T); }
    // Launches the held-back matmuls and attention prep (every op and memory call does this first).
    void flush();
    cudaStream_t stream() const { return stream_; }

private:
    // Matmuls that read the same activations (q/k/v; qkv/z/alpha/beta) are held back and then
    // launched together on parallel streams (parallel branches inside a captured graph), so the
    // small ones hide behind the large one instead of each paying its own latency.
    struct PendingMatmul {
        Weight w;
        float* out;
        bool accumulate;
    };
    // A one-row RMSNorm held back by rmsnorm(): the f32 matvecs (T = 1) that read its output next
    // fold it into their input (MatvecArgs::norm_x), the first of them writing the output too;
    // any other op launches it first (flush).
    struct PendingNorm {
        const float* x = nullptr;  // null: none
        const float* w = nullptr;
        int n = 0;
        float eps = 0.f;
        float* out = nullptr;
    };
    PendingNorm norm_;
    bool fold_norm_ = false;
    void launch_norm(const float* x, int64_t x_stride, const float* weight, int n_rows, int n, float eps, float* out,
                     int64_t out_stride);
    bool folds_norm(const Weight& w, const float* x, int T, const float* out) const;
    static void fold_into(MatvecArgs& a, const PendingNorm& n, bool write);  // write: also the norm's output
    // Split-K partial sums: where and how many floats (p null: no split).
    struct PartialSlice {  // no member initializers: {} zero-initializes (a default argument below)
        float* p;
        int64_t floats;
    };
    void run_matmul(const Weight& w, const float* x, int T, float* out, bool accumulate, cudaStream_t s,
                    PartialSlice partial = {}, const PendingNorm* fold = nullptr, bool write_norm = false);
    void flush_matmuls();
    bool imma_two_ = true;
    ImmaTwoFn find_imma_two(const int* unit_of, int units, int (&two)[2]) const;
    void run_imma_two(ImmaTwoFn fn, const int* unit_of, const int (&two)[2]);
    // Pending f32 matvecs of one layout run as one launch of up to kMatvecSegs matrices
    // (DF_CUDA_MERGE_MATVEC=0: one launch each, on parallel streams).
    bool merge_matvecs_ = true;
    bool matvec_joins(const PendingMatmul& a, const PendingMatmul& b, int T) const;
    void run_matvec_segs(const PendingMatmul* const* group, int k, cudaStream_t s, const PendingNorm* fold, bool write_norm);
    MatvecArgs matvec_args(const Weight& w, const float* x, int T, float* out, bool accumulate, int rows_per_group,
                           const PendingNorm* fold, bool write_norm) const;
    // The q and k head_norm_rope calls of an attention layer and the kv_store after them are
    // held back and launched as one kernel (launch_attn_prep); any other op launches them first.
    void flush_prep();
    GdnStepArgs gdn_step_args(const GdnLayer& w, const GdnShape& g, float eps) const;
    AttnArgs attn_args(const float* q, const void* k_cache, const void* v_cache, KvType kt, const AttnShape& a,
                       const Step& s, float* out) const;
    // Integer tensor-core matvec (imma.cuh): used for T <= 8 where the type has a decoder.
    bool imma_type(quant::Type t) const;
    bool use_imma(const Weight& w, int T) const;
    // Raises the carveout of every kernel (kernels.h, request_carveout) to what the one-token
    // matmul of a weight of type t (a fused gate/up pair: two of them) needs. Called by every
    // matmul whatever T: the prompt's forward, before any decode step is recorded, sets it.
    void note_decode_smem(quant::Type t, bool pair) const;
    // Converts x for the imma matvec unless the conversion of this x is still current.
    void quantize_activations(const float* x, int T, int cols, cudaStream_t s);
    // The fused imma gate/up leaves its shared tiles' partial sums in its scratch
    // (ImmaArgs::defer) and the conversion for the down projection adds them up; so do the
    // accumulating imma launches on the main stream, for the RMSNorm after them (from level 2;
    // set_imma_defer lists the levels). Any other reader, or a launch that would reuse
    // the scratch, first gets them written out (settle_deferred: op_start, download, synchronize,
    // flush_matmuls, ffn_gate_up). 27B decode +5.8 % (session 50, H100).
    int imma_defer_ = 3;
    ImmaDeferred deferred_{};
    int deferred_T_ = 0;
    void settle_deferred();
    // Level 3: gdn_mix names its inputs before its op_start flushes their matmuls; a two-part
    // imma launch writing exactly those leaves both parts' shared tiles to the GDN step
    // (GdnStepArgs::qkv_parts), which has them at once (nothing runs in between).
    struct StepReads {
        const float* qkv = nullptr;
        const float* z = nullptr;
        int T = 0;
    };
    StepReads step_reads_{};
    ImmaDeferred step_parts_[2]{};  // qkv's, z's
    // Flushes and forgets the current conversion: every op but rmsnorm/matmul/ffn_gate_up.
    void op_start();
    ImmaArgs imma_args(const Weight& w, const uint8_t* up, int T, float* out, bool accumulate, cudaStream_t s) const;
    int imma_blocks() const { return kImmaBlocksPerSm * sm_count_; }
    // Exact-f16 prefill GEMM (gemm_q.cuh): whether w takes it at T tokens; its activation buffer
    // grows on demand (never while recording a graph).
    bool use_qgemm(const Weight& w, int T) const;
    void reserve_qgemm(int T, int64_t cols);
    PartialSlice partial_slice(int u, int units) const;
    void run_qgemm(const Weight& w, int T, float* out, bool accumulate, cudaStream_t s, PartialSlice partial);

    QuantMatrix matrix(const Weight& w) const;
    int warps_per_row(const Weight& w, int unit, int row_groups) const;
    void account(size_t bytes, MemKind kind, bool add);

    int device_ = 0;
    int sm_count_ = 0;
    int smem_per_sm_ = 0;  // shared memory of an SM at the largest carveout, bytes
    cudaStream_t stream_ = nullptr;
    GridTables* tables_ = nullptr;      // device copy of the IQ grids
    ImmaTables* imma_tables_ = nullptr; // replicated lookup tables of the imma matvec
    float* attn_partial_ = nullptr;     // split-attention partial results
    size_t attn_partial_floats_ = 0;
    uint32_t* gdn_counters_ = nullptr;   // the fused GDN kernel's per-key-head counters (left zeroed)
    static constexpr int kGdnCounters = 256;
    unsigned long long* argmax_keys_ = nullptr;  // one per row of an argmax call
    void* top_scratch_ = nullptr;  // top_logits's histogram, count and candidates
    size_t top_scratch_bytes_ = 0;
    uint64_t* mass_sum_ = nullptr;  // row_mass's sum
    void* staging_ = nullptr;           // pinned host buffer for weight uploads
    size_t staging_bytes_ = 0;
    bool split_gemm_ = true;
    bool imma_ = true;                  // DF_CUDA_MATVEC=f32 selects the f32-FMA matvec instead
    bool gdn_fused_ = true;             // DF_CUDA_GDN_FUSED=0: the GDN mixer as three kernels (A/B runs)
    int gdn_split_ = 4;                 // DF_CUDA_GDN_SPLIT: its blocks per value head
    int matvec_wpr_ = 0;                // DF_CUDA_MATVEC_WPR: f32 matvec warps per row forced (1, 2, 4, 8)
    bool gdn_late_ = false;             // DF_CUDA_GDN_LATE=1: its PDL trigger after the delta rule
    bool lanes_ = true;                 // DF_CUDA_LANES=0: a batched pass's per-sequence ops one launch each
    uint2* xq_ = nullptr;               // converted activations of the imma matvec
    float* xe_ = nullptr;
    int xq_cols_ = 0;
    const float* xq_src_ = nullptr;     // the activations xq_ currently holds (T xq_T_, xq_n_ columns)
    int xq_T_ = 0, xq_n_ = 0;
    bool qgemm_ = true;                 // exact-f16 prefill GEMM where the type has it
    bool qg_wg_able_ = false;           // sm_90a build on a compute capability 9.0 device
    bool qg_wg_ = false;                // its wgmma form (activations converted in wg_order)
    uint16_t* qg_x_ = nullptr;          // its converted activations (hi/lo halves) ...
    float* qg_inv_ = nullptr;           // ... and per-token scales
    size_t qg_x_halves_ = 0;
    int qg_T_ = 0;
    float* qg_partial_ = nullptr;       // split-K partial sums (a slice per stream of a group: partial_slice)
    // Q8_0 and IQ weights with a block scale too large for their wgmma GEMM to carry in f16 weights
    // (load_weight): it folds their scales instead (QGemmArgs::fold_scales).
    std::unordered_set<const void*> scale_wide_;
    bool fold_all_ = std::getenv("DF_CUDA_QGEMM_FOLD") != nullptr;  // A/B: every weight folds
    bool narrow_ = [] {
        const char* e = std::getenv("DF_CUDA_QGEMM_NARROW");
        return !e || std::string(e) != "0";
    }();
    // The activations qg_x_ holds converted (T qg_src_T_, qg_src_n_ columns), from a matmul group
    // or a prefill SwiGLU; every op that may write memory forgets it, and so does graph capture.
    const float* qg_src_ = nullptr;
    int qg_src_T_ = 0, qg_src_n_ = 0;
    void remember_qg_conversion(const float* x, int T, int cols);
    float* gdn_prep_ = nullptr;         // prefill delta rule: prepared per-head inputs
    size_t gdn_prep_floats_ = 0;
    float* imma_partial_ = nullptr;     // stream-K partial sums, one region per stream
    unsigned* imma_counters_ = nullptr; // stream-K tile counters, imma_tiles_ per stream
    int imma_tiles_ = 0;
    // Types kept on the f32 matvec (DF_CUDA_IMMA_SKIP overrides): Q8_0's and Q6_K's imma kernels
    // are slower than their f32 ones at T = 1 (faster at T = 8, which speculative verify will
    // want; a type takes one path for every T). src/backend/cuda/NOTES.md has the numbers.
    std::string imma_skip_ = "Q8_0,Q6_K";

    mutable std::mutex mem_mu_;
    std::unordered_map<void*, std::pair<size_t, MemKind>> allocs_;
    std::unordered_set<void*> host_allocs_;  // alloc_host_visible: mapped pinned host memory, not device memory
    std::array<size_t, static_cast<size_t>(MemKind::count_)> in_use_{}, peak_{};

    static constexpr int kSideStreams = 4, kStreams = kSideStreams + 1;
    cudaStream_t side_[kSideStreams] = {};
    cudaEvent_t fork_ = nullptr, join_[kSideStreams] = {};
    std::vector<PendingMatmul> pending_;
    const float* pending_x_ = nullptr;
    int pending_T_ = 0;

    AttnPrepArgs prep_{};  // held back while prep_.sets > 0

    std::unordered_map<uint64_t, cudaGraphExec_t> graphs_;
    bool capturing_ = false;
    uint64_t capture_key_ = 0;
};

}  // namespace df::cuda
