// Launchers of the CUDA kernels, callable from host C++ (backend_cuda.cpp). Each launcher
// enqueues on the given stream and checks the launch; shapes are validated by the caller
// (CudaBackend) against the Backend contract, alignment by the launcher where it matters.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda.h>
#include <cuda_runtime.h>

#include "quant/types.h"

namespace df::cuda {

struct GridTables;
struct ImmaTables;

// Programmatic dependent launch for every kernel (launch.cuh); on unless DF_CUDA_PDL=0. The
// setter is for tests comparing both ways (call it between ops, not during a capture).
bool pdl_enabled();
void set_pdl_enabled(bool on);
// One shared-memory carveout (percent of an SM's shared memory) for every decode launch (launch.cuh
// adds it to a launch while decode launches are on). An SM holds blocks of one L1/shared split at
// a time, so with each kernel's own preference (the driver's default) a kernel whose split
// differs from the running one's could start its blocks (PDL) only on SMs that had drained; one
// split for all, the one the model's largest one-token matmul kernel needs
// (CudaBackend::note_decode_smem), made decode 1-2 % faster when set per function (session 20;
// per launch, session 21: +0.3 % on the 27B, even on the 4B). Prefill launches keep the driver's
// choice: the GEMMs lost 25 % with it. The largest percent asked for wins; kernels
// that need more still get it; -1: the driver's choice. DF_CUDA_CARVEOUT=-1 turns it off, P
// (0..100) forces P (A/B runs). Returns the carveout now.
int request_carveout(int percent);
// Whether the launches from now on are a decode forward's (T <= 8): CudaBackend::embed, the first
// op of every forward, sets it.
void set_decode_launches(bool on);
int launch_carveout();  // for launch(): the carveout while decode launches are on, else -1

// Decode attention splits a context into pieces of at least this many keys (default 16,
// DF_CUDA_ATTN_SPLIT_KEYS overrides); the setter is for tests, between ops like set_pdl_enabled.
int attn_split_keys();
void set_attn_split_keys(int keys);
// The split kernel's blocks take at most this many query heads of a KV head's group (1..8,
// default 8, DF_CUDA_ATTN_SPLIT_HEADS overrides): fewer heads per block, more blocks over the
// same keys. Setter for tests, between ops.
int attn_split_heads();
void set_attn_split_heads(int heads);
// Decode attention in thread block clusters of this many blocks (1, 2, 4, 8 or 16) that merge
// their splits through distributed shared memory, no combine kernel, for contexts of up to
// attn_cluster() * attn_cluster_keys() keys; 0: always the split kernel and its combine kernel.
// DF_CUDA_ATTN_CLUSTER and DF_CUDA_ATTN_CLUSTER_KEYS override the defaults (16, 128). Setters for
// tests, between ops (a value that is not a power of two up to 16 sets 0).
int attn_cluster();
void set_attn_cluster(int blocks);
int attn_cluster_keys();
void set_attn_cluster_keys(int keys);
// Depth of the per-warp cp.async rings of the one-token Q8_0, Q4_0 and IQ4_NL matvecs
// (DF_CUDA_MATVEC_RING: 2, 3 or 4 chunks; 0: the register double buffer). The setter is for tests.
int matvec_ring();
void set_matvec_ring(int depth);
// How the T = 2..8 matvecs of those types run (DF_CUDA_MATVEC_RING_MULTI): 2 (default), through
// the same rings, 4 rows per warp, each weight decoded once for all tokens, the activations staged
// whole in shared memory for T >= 3 where they fit (else 1's way); 1, the same with activations read from
// global memory; 0, the staged-activation kernel of the other types. Setter for tests.
int matvec_ring_multi();
void set_matvec_ring_multi(int mode);

// ---- quantized weights (one translation unit per block type) ------------------------------

// A weight matrix as the kernels see it (layout.h).
struct QuantMatrix {
    const uint8_t* data = nullptr;
    size_t row_stride = 0;   // bytes
    size_t head_off = 0;     // bytes from a row's start to its split heads
    int rows = 0;
    int cols = 0;
};

// out[t, r] (+)= sum_c W[r, c] x[t, c] for T <= 8 tokens. x [T, cols] 16-byte aligned, cols a
// multiple of the type's unit. With `up` set (same type and shape as w): out[t, r] =
// silu(W x)[t, r] * (Up x)[t, r] (the fused gate/up of SwiGLU; accumulate must be false).
inline constexpr int kMatvecSegs = 3;
struct MatvecArgs {
    QuantMatrix w;
    // Several matrices of one layout (type, cols, row stride, heads) over the same activations
    // in one launch (decode's q, k, v): launch rows [seg_row[k], seg_row[k + 1]) are matrix k's,
    // read from seg_data[k] and written to seg_out[k] (rows seg_row[k + 1] - seg_row[k]); w.rows
    // is the total, every seg_row[k] a multiple of 4 (a row group never straddles two matrices).
    // segs = 0: the one matrix w.data into out. Not with `up`.
    int segs = 0;
    const uint8_t* seg_data[kMatvecSegs] = {};
    float* seg_out[kMatvecSegs] = {};
    int seg_row[kMatvecSegs + 1] = {};
    const uint8_t* up = nullptr;
    const float* x = nullptr;
    int T = 0;
    float* out = nullptr;
    bool accumulate = false;
    int warps_per_row = 1;   // 1, 2, 4 or 8 warps share a group of rows
    const GridTables* tables = nullptr;
    bool stage_x = false;    // set by the launcher: T > 1 reads activations from shared memory
    // T = 1 with the RMSNorm before it folded in (norm_x set; x unused): every block computes
    // y = rmsnorm(norm_x) * norm_w exactly as launch_rmsnorm does (norm_sum.cuh) into shared
    // memory and uses it as the activations; block 0 also writes y to norm_out when set.
    // cols a multiple of 256 (at most 64 units), all four pointers 16-byte aligned.
    const float* norm_x = nullptr;
    const float* norm_w = nullptr;
    float norm_eps = 0.f;
    float* norm_out = nullptr;
};

// Whether a T = 1 matvec of this width can fold the RMSNorm before it (MatvecArgs::norm_x).
bool matvec_can_fold_norm(int cols, int unit);

// Tiled GEMM for any T: the same product as MatvecArgs (no fused gate/up). `split` selects
// three bf16 tensor-core products per tile (hi*hi + hi*lo + lo*hi, ~16 mantissa bits: the f32
// contract) instead of one (bf16 operands, ~8 bits).
struct GemmArgs {
    QuantMatrix w;
    const float* x = nullptr;
    int T = 0;
    float* out = nullptr;
    bool accumulate = false;
    bool split = true;
    const GridTables* tables = nullptr;
};

// out[t, :] = dequantized row tokens[t] of w; an id outside [0, rows) gives a row of zeros.
struct EmbedArgs {
    QuantMatrix w;
    const int32_t* tokens = nullptr;
    int T = 0;
    float* out = nullptr;
    const GridTables* tables = nullptr;
};

// The same product as MatvecArgs on the integer tensor cores (imma.cuh), from activations that
// launch_act_quant has converted (xq, xe); cols a multiple of 256. Its grid: kImmaBlocksPerSm
// blocks of kImmaWarps warps per SM (one block: the decoder tables staged once per SM).
#ifndef DF_IMMA_WARPS  // build-time knob for A/B builds
#define DF_IMMA_WARPS 16
#endif
inline constexpr int kImmaWarps = DF_IMMA_WARPS, kImmaBlocksPerSm = 1;
struct ImmaArgs {
    QuantMatrix w;
    const uint8_t* up = nullptr;   // fused gate/up, as MatvecArgs
    const uint2* xq = nullptr;
    const float* xe = nullptr;
    int T = 0;
    float* out = nullptr;
    bool accumulate = false;
    int blocks = 0;                // grid (or its part: imma_two.cuh): kImmaBlocksPerSm per SM in all; a function of device and shapes only (stream-K)
    float* partial = nullptr;      // per-stream scratch of imma_scratch_bytes(blocks)
    unsigned* counters = nullptr;  // per-stream, one per 16-row tile, zero between calls
    const ImmaTables* itables = nullptr;
    // A tile shared by several warps is not fixed up here (the fused gate/up, an accumulating
    // launch, the GDN's q/k/v + z pair): each contributor stores its limb-recombined sums
    // (ImmaDeferred's layout), and the next reader adds them up in contributor order:
    // launch_act_quant_deferred (the down projection's conversion), launch_rmsnorm_quant_deferred
    // (the norm of the residual an accumulating launch added to) or launch_gdn_step
    // (GdnStepArgs::qkv_parts). Whole tiles are written as usual, the shared ones by that reader
    // (CudaBackend::imma_defer_: 1 gate/up, 2 also the accumulating launches, 3, the default,
    // also the GDN pair).
    bool defer = false;
};

// Where a deferred launch (ImmaArgs::defer) left a tile's sums: warp w's slot s (0: its first
// tile, 1: its last) holds, for matrix mt (0 gate or the single matrix, 1 up), token t and row r
// of the tile, partial[(2 w + s) * kSlotFloats + (8 mt + t) * 16 + r].
struct ImmaDeferred {
    static constexpr int kSlotFloats = 1024;  // imma_partial_floats<4, 2>(): the scratch's slot
    float* out = nullptr;                     // the launch's output, its whole tiles written
    const float* partial = nullptr;
    int rows = 0, cols = 0;                   // of the matrix (the gate's, for a pair)
    int warps = 0;                            // the launch's warps (blocks * kImmaWarps)
    bool pair = true;                         // fused gate/up (else one matrix's outputs)
    bool add = true;                          // (one matrix) sums added to out's values, else they are the values
};

// Two imma matmuls over the same activations as one launch (imma_two.cuh): a.blocks + b.blocks
// blocks, each part with its own scratch; for the type pairs built (DF_CUDA_IMMA_TWO in
// CMakeLists.txt), else nullptr.
using ImmaTwoFn = void (*)(const ImmaArgs& a, const ImmaArgs& b, cudaStream_t s);
ImmaTwoFn imma_two(quant::Type a, quant::Type b);

// The same product as GemmArgs on exact f16 weights (gemm_q.cuh), from activations that
// launch_gemm_act has converted; for types with an integer decoder.
struct QGemmArgs {
    QuantMatrix w;
    const uint16_t* xhl = nullptr;  // launch_gemm_act's halves
    const float* xinv = nullptr;    // and its per-token scales
    int T = 0;
    float* out = nullptr;
    bool accumulate = false;
    int splits = 1;                 // K ranges over blockIdx.z; > 1: partial sums, then launch_gemm_reduce
    float* partial = nullptr;       // splits * T * rows floats when splits > 1
    const ImmaTables* itables = nullptr;
    bool wg_order = false;          // xhl in launch_gemm_act's wg_order
    bool fold_scales = false;       // on wgmma: a block scale too large to carry in f16 weights, so fold them
    int tokens = 0;                 // wgmma: tokens per block (qgemm_wg_ina_tokens / qgemm_wg_fold_tokens; 0: by T)
};
struct QGemmEntry {
    void (*launch)(const QGemmArgs&, cudaStream_t) = nullptr;  // nullptr: no exact-f16 GEMM
    int unit = 0;                                               // cols must be a multiple of it
    void (*launch_wg)(const QGemmArgs&, cudaStream_t) = nullptr;  // the wgmma form (wg_order), if any
    // launch_wg carries the scales in the weights unless QGemmArgs::fold_scales; a weight with a
    // block scale whose f16 bits (sign cleared) reach this needs the fold (gemm_q.cuh's
    // scale_hi_lo). 0: no such form.
    uint16_t wide_scale_bits = 0;
};
// Rows and tokens of one qgemm block, and blocks resident per SM (the caller sizes splits from
// them), for the mma.sync kernel (gemm_q.cuh) and the wgmma one (gemm_wg.cuh).
constexpr int kQGemmTileRows = 128, kQGemmTileTokens = 128, kQGemmBlocksPerSm = 2;
// ... and of its form with the scales in the weights (gemm_wg.cuh's kInA): 256 tokens per block,
// two consumer warpgroups (128 rows) sharing each activation slab, one block per SM, four slab
// stages; as an A/B build one warpgroup (64 rows), two blocks per SM, three stages (session 29's
// form, bench/RESULTS.md sessions 29-30).
#ifndef DF_QGEMM_WG_INA_GROUPS  // build-time knob for A/B builds: warpgroups per block, 1 or 2
#define DF_QGEMM_WG_INA_GROUPS 2
#endif
constexpr int kQGemmWgTileRows = 64, kQGemmWgBlocksPerSm = 2, kQGemmWgInATokens = 256;
constexpr int kQGemmWgInAGroups = DF_QGEMM_WG_INA_GROUPS, kQGemmWgInATileRows = 64 * kQGemmWgInAGroups;
constexpr int kQGemmWgInABlocksPerSm = kQGemmWgInAGroups == 2 ? 1 : 2, kQGemmWgInAStages = kQGemmWgInAGroups == 2 ? 4 : 3;
// Short T (a DFlash block of 16, a short prompt, a chunk's tail) on 256-token blocks would pay for
// 256 tokens of products: 16x at T = 16, the tensor pipe then the bound instead of the weights'
// bytes. The kInA form therefore also comes with 16 and 64 tokens per block, whose small slabs
// leave room for more blocks per SM and six slab stages (four slabs ahead); `narrow` false: 256.
// The folded form (K-quants) likewise has 16- and 64-token blocks besides its 128.
constexpr int kQGemmWgNarrowStages = 6;
constexpr int qgemm_wg_ina_tokens(int T, bool narrow = true) {
    return !narrow ? kQGemmWgInATokens : T <= 16 ? 16 : T <= 64 ? 64 : kQGemmWgInATokens;
}
constexpr int qgemm_wg_ina_blocks_per_sm(int tokens) {
    return tokens == 16 ? 3 : tokens == 64 ? 2 : kQGemmWgInABlocksPerSm;
}
// The folded form likewise (128 tokens per block otherwise).
constexpr int qgemm_wg_fold_tokens(int T, bool narrow = true) { return !narrow ? 128 : T <= 16 ? 16 : T <= 64 ? 64 : 128; }
constexpr int qgemm_wg_fold_blocks_per_sm(int tokens) { return tokens == 16 ? 3 : kQGemmWgBlocksPerSm; }
// Blocks per thread block cluster of the wgmma GEMM: the blocks of a cluster take consecutive row
// tiles of the same tokens and share each activation slab, copied once for all of them (TMA
// multicast; at most this many, fewer where the row tiles do not divide; the form with the scales
// in the weights always runs alone). 1, 2, 4 or 8; DF_CUDA_QGEMM_CLUSTER overrides the default;
// the setter is for tests, between ops.
int qgemm_cluster();
void set_qgemm_cluster(int blocks);
// A 2-D tensor map (tma.cuh) over `rows` rows of `cols` u16 elements, rows `row_bytes` apart,
// copied in boxes of box_cols x box_rows (box_cols * 2 <= 128 bytes) in the 128-byte swizzle.
CUtensorMap tensor_map_u16_sw128(const void* base, uint64_t cols, uint64_t rows, uint64_t row_bytes, uint32_t box_cols,
                                 uint32_t box_rows);
// Whether this build has the wgmma kernels (sm_90a code; CMake's DF_CUDA_WGMMA).
#if defined(DF_CUDA_WGMMA)
constexpr bool kQGemmWgBuilt = true;
#else
constexpr bool kQGemmWgBuilt = false;
#endif

struct QuantOps {
    int unit;  // elements per decode unit: cols must be a multiple of it for matmul
    void (*matvec)(const MatvecArgs&, cudaStream_t);
    void (*gemm)(const GemmArgs&, cudaStream_t);
    void (*embed)(const EmbedArgs&, cudaStream_t);
    void (*imma)(const ImmaArgs&, cudaStream_t);  // nullptr: no integer tensor-core decoder
    QGemmEntry qgemm;
    // Shared memory per SM of the one-token matmul kernels of the type (on the imma path or the
    // f32 one): resident blocks x (dynamic + static + the 1 KB an SM reserves per block), at most.
    int (*decode_smem_per_sm)(bool imma, bool pair);
};

// Activations of a qgemm: per token t, x 2^k_t (k_t puts the largest |x| in [2^14, 2^15)) split
// into f16 hi + lo, stored per 32-column slab as 8 chunks of 8 halves, 4 of hi then 4 of lo (xhl:
// 2 * T * cols halves, 16-byte aligned); xinv[t] = 2^-k_t. cols a multiple of 32. Chunk c holds
// columns 8c .. 8c + 7 of the slab; in wg_order (the wgmma GEMM, gemm_wg.cuh), chunk c holds the
// pairs 2c, 2c + 1 of each lane's 8 columns: columns 8i + 2c, 8i + 2c + 1 for i = 0 .. 3.
void launch_gemm_act(const float* x, int T, int cols, uint16_t* xhl, float* xinv, bool wg_order, cudaStream_t s);
// gate[i] = silu(gate[i]) * up[i] (as launch_swiglu, bit for bit) over T rows of cols, then the rows
// converted as launch_gemm_act does: the SwiGLU of a prefill FFN and its down projection's input.
void launch_swiglu_gemm_act(float* gate, const float* up, int T, int cols, uint16_t* xhl, float* xinv, bool wg_order,
                            cudaStream_t s);
// out[i] (+)= sum over z < splits of partial[z * n + i], z in order; n = T * rows.
void launch_gemm_reduce(const float* partial, int splits, int64_t n, float* out, bool accumulate, cudaStream_t s);

// Activations of T <= 8 tokens as the imma kernels read them (imma.cuh explains the format):
// xq needs act_quant_xq_bytes(cols) bytes, xe 8 * cols / 256 floats; cols a multiple of 256.
size_t act_quant_xq_bytes(int cols);
void launch_act_quant(const float* x, int T, int cols, uint2* xq, float* xe, cudaStream_t s);
// The same conversion of a deferred gate/up launch's output (ImmaArgs::defer): a shared tile's
// partial sums added in contributor order, then silu(gate) * up (also written into d.out); d.rows columns.
void launch_act_quant_deferred(const ImmaDeferred& d, int T, uint2* xq, float* xe, cudaStream_t s);
// Writes a deferred launch's shared tiles into d.out (for any other reader).
void launch_imma_deferred_write(const ImmaDeferred& d, int T, cudaStream_t s);
// launch_rmsnorm_quant of the residual d.out (x, rows x n, contiguous) that a deferred accumulating
// launch added to: its shared tiles summed and added first, and written back into it.
void launch_rmsnorm_quant_deferred(const ImmaDeferred& d, const float* w, int rows, int n, float eps, float* out,
                                   uint2* xq, float* xe, cudaStream_t s);
// Scratch of the imma kernels launched with `blocks` blocks.
size_t imma_scratch_bytes(int blocks);

// nullptr for types without a native decoder (they are held as F32).
const QuantOps* quant_ops(quant::Type t);

// ---- dense ops ------------------------------------------------------------------------------

// See Backend::rmsnorm. Sum of squares in double, like ggml's CPU path.
void launch_rmsnorm(const float* x, int64_t x_stride, const float* w, int rows, int n, float eps,
                    float* out, int64_t out_stride, cudaStream_t s);

// launch_rmsnorm for rows <= 8 (out contiguous, n a multiple of 256 up to kRmsnormQuantMaxCols)
// that also writes the rows as launch_act_quant would.
constexpr int kRmsnormQuantMaxCols = 16384;
void launch_rmsnorm_quant(const float* x, int64_t x_stride, const float* w, int rows, int n, float eps, float* out,
                          uint2* xq, float* xe, cudaStream_t s);

// Backend::head_norm_rope of one or two head sets (q and k) that share head_dim and RoPE, in one
// launch; with k_cache set, the last set is k (heads * head_dim = kv_dim values per token,
// contiguous) and, once normed and rotated, it and v are stored as Backend::kv_store would.
// theta_scale = RopeShape::theta_scale(), computed on the host.
// A batched pass's rows from several sequences (Backend::attention_lanes): row t's KV cache.
inline constexpr int kMaxLaneRows = 8;
struct RowCaches {
    void* k[kMaxLaneRows] = {};
    void* v[kMaxLaneRows] = {};
};

struct HeadSet {
    float* x = nullptr;
    int heads = 0, head_stride = 0, row = 0;
    const float* norm_w = nullptr;
};
struct AttnPrepArgs {
    HeadSet set[2];
    int sets = 0;
    int T = 0, head_dim = 0, n_rot = 0;
    float eps = 0.f, theta_scale = 0.f;
    const int32_t* pos = nullptr;
    const float* v = nullptr;
    void* k_cache = nullptr;
    void* v_cache = nullptr;
    bool half_cache = false;
};
// rows: T <= kMaxLaneRows rows of several sequences, row t's caches rows->k[t], rows->v[t]
// (a.k_cache, a.v_cache unused).
void launch_attn_prep(const AttnPrepArgs& a, cudaStream_t s, const RowCaches* rows = nullptr);
// Its prefill kernel, a warp per head (attention_prep.cu): per_block heads per block of the grid.
void launch_attn_prep_warps(const AttnPrepArgs& a, int per_block, dim3 grid, cudaStream_t s);

// See Backend::kv_store (f16 when half_cache).
void launch_kv_store(const float* k, const float* v, void* k_cache, void* v_cache, bool half_cache,
                     int kv_dim, int T, const int32_t* pos, cudaStream_t s);

struct AttnArgs {
    const float* q = nullptr;
    const void* k_cache = nullptr;
    const void* v_cache = nullptr;
    bool half_cache = false;
    int heads = 0, kv_heads = 0, head_dim = 0, q_stride = 0, q_row = 0;
    float scale = 0.f;
    int T = 0;
    const int32_t* pos = nullptr;
    float* out = nullptr;
    float* partial = nullptr;      // scratch for split partial results
    size_t partial_floats = 0;     // its capacity
    int sm_count = 132;
    int split_keys = 16;           // decode: keys per split at least (attn_split_keys())
    int split_heads = 8;           // decode, split kernel: query heads per block at most (attn_split_heads())
    int cluster = 0;               // decode: cluster size of the cluster kernel, 0 = split + combine kernels
    int cluster_keys = 128;        // decode: contexts up to cluster * cluster_keys keys go to the cluster kernel
    // With cluster > 0 the cluster kernel is for tokens whose context fits one cluster (n_kv <=
    // cluster * cluster_keys; long contexts stream faster through the split kernels): launch_attention
    // launches the kernels the host's copy of pos[0] calls for, and a token's path depends on its
    // own position only. (Set by launch_attention: a kernel skips the tokens of the other.)
    int pos0_hint = 0;
    int skip_above = 0;            // cluster kernel: tokens with n_kv above this go to the split kernels
    int skip_upto = 0;             // split kernels: tokens with n_kv up to this went to the cluster kernel
};
// The per-head q/k norm + RoPE and the KV store of a one-token step folded into its attention
// (launch_attention_prepped): the raw k and v heads of the token, the norms' weights (may be null),
// RoPE's rotated dims and angle ratio, and the caches to store the new row in.
struct HeadPrep {
    const float* k = nullptr;
    const float* v = nullptr;
    const float* q_norm = nullptr;
    const float* k_norm = nullptr;
    float eps = 0.f, theta_scale = 0.f;
    int n_rot = 0;
    void* k_cache = nullptr;
    void* v_cache = nullptr;
};
// launch_attn_prep (q and k sets, KV store) followed by launch_attention in one launch, with the
// same bits (a.q: the raw q heads; they and p.k are left as they are, not normed in place). Only
// for one token whose context the cluster kernel takes, head dims 128 and 256, and when
// attn_prep_fused() is on: returns false, launching nothing, otherwise.
bool launch_attention_prepped(const AttnArgs& a, const HeadPrep& p, cudaStream_t s);
// Whether launch_attention_prepped takes the calls it can: off unless DF_CUDA_ATTN_PREP_FUSED=1
// (4B decode 424-427 against 430-433 tok/s with the separate prep kernel, H100: bench/RESULTS.md,
// session 44); the setter for tests, between ops.
bool attn_prep_fused();
void set_attn_prep_fused(bool on);

// Causal GQA attention (Backend::attention): flash decoding with the key range of each query
// split across blocks (the split is decided on the device from pos, so graphs replay). rows:
// T <= kMaxLaneRows rows of several sequences (Backend::attention_lanes), token t attending its
// own caches rows->k[t], rows->v[t]; pos0_hint is then the least position, last_hint the largest.
void launch_attention(const AttnArgs& a, cudaStream_t s, const RowCaches* rows = nullptr, int last_hint = 0);

void launch_sigmoid_mul(float* x, int n, const float* gate, int width, int gate_stride, int gate_row,
                        int T, cudaStream_t s);
void launch_gdn_conv(float* x, int T, int channels, int taps, const float* w, float* conv_state,
                     cudaStream_t s);

struct GdnArgs {
    const float* qkv = nullptr;
    const float* alpha = nullptr;
    const float* beta = nullptr;
    const float* dt_bias = nullptr;
    const float* a_neg = nullptr;
    int T = 0, k_heads = 0, v_heads = 0, head_dim = 0;
    float eps = 0.f;
    float* state = nullptr;
    float* out = nullptr;
    // Scratch of T * gdn_prep_floats_per_token floats, or nullptr: with it, a first kernel
    // prepares each token's normalized q, k, decay and beta once per head (prefill); without,
    // every value column prepares its own (decode, where T is small and launches count).
    float* prep = nullptr;
};
// (Rounded up to 4 floats: each token's q and k rows stay 16-byte aligned.)
constexpr int64_t gdn_prep_floats_per_token(int k_heads, int v_heads, int head_dim) {
    return (int64_t{2} * k_heads * head_dim + 2 * int64_t{v_heads} + 3) / 4 * 4;
}
void launch_gdn_delta(const GdnArgs& a, cudaStream_t s);

void launch_gated_rmsnorm(const float* x, const float* z, const float* w, int T, int heads, int n,
                          float eps, float* out, cudaStream_t s);
// launch_gated_rmsnorm (up to its summation order) that also writes the rows as launch_act_quant
// would, where gated_rmsnorm_quant_fits: T <= 8, n = 64, 128 or 256, heads * n a multiple of
// 256; x, z and out 16-byte aligned (out may alias x).
bool gated_rmsnorm_quant_fits(const float* x, const float* z, const float* out, int T, int heads, int n);
void launch_gated_rmsnorm_quant(const float* x, const float* z, const float* w, int T, int heads, int n,
                                float eps, float* out, uint2* xq, float* xe, cudaStream_t s);
void launch_add(float* y, const float* x, int64_t n, cudaStream_t s);
// keys: scratch of keys_cap 64-bit words (rows are processed keys_cap at a time). With feed_tokens,
// also feed_tokens[0] = out[T - 1] and feed_pos[0] = feed_pos[feed_T - 1] + 1 (Backend::argmax).
void launch_argmax(const float* x, int T, int n, int32_t* out, unsigned long long* keys, int keys_cap,
                   cudaStream_t s, int32_t* feed_tokens = nullptr, int32_t* feed_pos = nullptr, int feed_T = 0);
// Backend::top_logits (top_logits.cu); k in 1..min(n, 1024), extra in [0, n). scratch: device
// memory of top_logits_scratch_bytes(n) or more, zero-filled before the first call (each call
// leaves it so).
size_t top_logits_scratch_bytes(int n);
void launch_top_logits(const float* x, int n, int k, const int32_t* extra, int n_extra, int32_t* ids, float* vals,
                       void* scratch, cudaStream_t s);
// *sum = Backend::row_mass(x, n, lmax) (sum: device memory).
void launch_row_mass(const float* x, int n, float lmax, uint64_t* sum, int sm_count, cudaStream_t s);
// gate[i] = silu(gate[i]) * up[i] for i < n.
void launch_swiglu(float* gate, const float* up, int64_t n, cudaStream_t s);

}  // namespace df::cuda
