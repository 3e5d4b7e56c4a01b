#include "backend/cuda/backend_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/gdn_step.h"
#include "backend/cuda/layout.h"
#include "backend/cuda/tables.h"
#include "backend/cuda/trace.h"
#include "backend/row_mass.h"
#include "backend/top_key.h"
#include "quant/dequant.h"

namespace df::cuda {
namespace {

// Kernels load with their modules when CUDA starts, not at their first launch (CUDA's default
// since 12.2 is lazy): lazily, a process's first decode step loaded ~100 kernels inside the
// answer (~115 ms on an H100: `run -n 512` reported 405 tok/s against bench's 450) and its first
// prompt the GEMM kernels (first token 15 vs 8 ms). Eagerly: no measurable load time, +34 MiB of
// device memory (4B layout, H100; bench/RESULTS.md session 42). A CUDA_MODULE_LOADING the user
// set is kept; this must run before the process's first CUDA call (every entry point calls it).
void load_kernels_eagerly() {
    static std::once_flag once;
    std::call_once(once, [] { setenv("CUDA_MODULE_LOADING", "EAGER", 0); });
}

constexpr size_t kStagingBytes = size_t{64} << 20;
// Split attention partials: (head_dim + 2) floats per (token, head, split); 32 MB covers decode
// and verify with 64 splits at 128 heads, and a few splits for prefill chunks.
constexpr size_t kAttnPartialBytes = size_t{32} << 20;
// Split-K partial sums of the exact-f16 GEMM (64 MB; splits that would need more are not taken).
constexpr int64_t kQGemmPartialFloats = int64_t{16} << 20;
// Up to this many tokens, a type without the exact-f16 GEMM runs its matvec per 8 tokens (run_matmul).
constexpr int kChunkedMatvecT = 32;
constexpr int kArgmaxKeys = 1 << 16;

const char* kind_name(MemKind k) {
    switch (k) {
        case MemKind::weights: return "weights";
        case MemKind::kv: return "kv cache";
        case MemKind::state: return "state";
        case MemKind::scratch: return "scratch";
        default: return "?";
    }
}

// One row from ggml layout into the backend's (layout.h): block bodies, then the split heads;
// types without a decoder are dequantized to F32.
void pack_row(quant::Type src_type, quant::Type held, const uint8_t* src, int64_t cols, const RowLayout& lay,
              uint8_t* dst) {
    std::memset(dst, 0, lay.row_stride);
    if (held != src_type) {
        quant::dequantize_row(src_type, src, reinterpret_cast<float*>(dst), cols);
        return;
    }
    const auto& ti = quant::type_info(src_type);
    const BlockSplit s = block_split(src_type);
    const size_t blocks = static_cast<size_t>(cols / ti.block_elems);
    if (!s.head) {
        std::memcpy(dst, src, blocks * ti.block_bytes);
        return;
    }
    const size_t body = ti.block_bytes - s.head;
    for (size_t b = 0; b < blocks; ++b) {
        const uint8_t* blk = src + b * ti.block_bytes;
        std::memcpy(dst + b * body, blk + (s.head_last ? 0 : s.head), body);
        std::memcpy(dst + lay.head_off + b * s.head, blk + (s.head_last ? body : 0), s.head);
    }
}

}  // namespace

CudaBackend::CudaBackend(int device) : device_(device) {
    load_kernels_eagerly();
    DF_CUDA_CHECK(cudaSetDevice(device_));
    DF_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_));
    DF_CUDA_CHECK(cudaDeviceGetAttribute(&smem_per_sm_, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device_));
    DF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    for (int i = 0; i < kSideStreams; ++i) {
        DF_CUDA_CHECK(cudaStreamCreateWithFlags(&side_[i], cudaStreamNonBlocking));
        DF_CUDA_CHECK(cudaEventCreateWithFlags(&join_[i], cudaEventDisableTiming));
    }
    DF_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
    GridTables host{};
    fill_grid_tables(host);
    tables_ = static_cast<GridTables*>(alloc(sizeof(GridTables), MemKind::weights));
    upload(tables_, &host, sizeof host);
    {
        auto itab = std::make_unique<ImmaTables>();
        fill_imma_tables(*itab);
        imma_tables_ = static_cast<ImmaTables*>(alloc(sizeof(ImmaTables), MemKind::weights));
        upload(imma_tables_, itab.get(), sizeof(ImmaTables));
    }
    attn_partial_ = static_cast<float*>(alloc(kAttnPartialBytes, MemKind::scratch));
    attn_partial_floats_ = kAttnPartialBytes / sizeof(float);
    gdn_counters_ = static_cast<uint32_t*>(alloc(sizeof(uint32_t) * kGdnCounters, MemKind::scratch));
    argmax_keys_ = static_cast<unsigned long long*>(alloc(sizeof(unsigned long long) * kArgmaxKeys, MemKind::scratch));
    if (const char* g = std::getenv("DF_CUDA_GEMM")) split_gemm_ = std::string(g) != "bf16";
    if (const char* m = std::getenv("DF_CUDA_MATVEC")) imma_ = std::string(m) != "f32";
    if (const char* m = std::getenv("DF_CUDA_IMMA_SKIP")) imma_skip_ = m;  // block type names, for A/B runs
    if (const char* q = std::getenv("DF_CUDA_QGEMM")) qgemm_ = std::string(q) != "0";
    if (const char* f = std::getenv("DF_CUDA_FOLD_NORM")) fold_norm_ = std::string(f) == "1";
    if (const char* m = std::getenv("DF_CUDA_MERGE_MATVEC")) merge_matvecs_ = std::string(m) != "0";
    if (const char* m = std::getenv("DF_CUDA_IMMA_TWO")) imma_two_ = std::string(m) != "0";
    if (const char* g = std::getenv("DF_CUDA_GDN_FUSED")) gdn_fused_ = std::string(g) != "0";
    if (const char* g = std::getenv("DF_CUDA_GDN_SPLIT")) gdn_split_ = std::atoi(g);
    if (const char* g = std::getenv("DF_CUDA_GDN_LATE")) gdn_late_ = std::string(g) == "1";
    if (const char* l = std::getenv("DF_CUDA_LANES")) lanes_ = std::string(l) != "0";
    if (const char* d = std::getenv("DF_CUDA_IMMA_DEFER")) imma_defer_ = std::clamp(std::atoi(d), 0, 3);
    if (const char* w = std::getenv("DF_CUDA_MATVEC_WPR")) {  // for A/B runs
        const int n = std::atoi(w);
        if (n == 1 || n == 2 || n == 4 || n == 8) matvec_wpr_ = n;
    }
    int major = 0, minor = 0;
    DF_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_));
    DF_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_));
    qg_wg_able_ = kQGemmWgBuilt && major == 9 && minor == 0;
    qg_wg_ = qg_wg_able_;
    if (const char* q = std::getenv("DF_CUDA_QGEMM_WGMMA")) qg_wg_ = qg_wg_able_ && std::string(q) != "0";
    synchronize();
}

CudaBackend::~CudaBackend() {
    cudaStreamSynchronize(stream_);
    trace_dump();
    for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
    for (auto& [p, info] : allocs_) cudaFree(p);
    for (void* p : host_allocs_) cudaFreeHost(p);
    if (staging_) cudaFreeHost(staging_);
    for (int i = 0; i < kSideStreams; ++i) {
        cudaStreamDestroy(side_[i]);
        cudaEventDestroy(join_[i]);
    }
    cudaEventDestroy(fork_);
    cudaStreamDestroy(stream_);
}

// ---- memory ------------------------------------------------------------------------------

void CudaBackend::account(size_t bytes, MemKind kind, bool add) {
    const auto k = static_cast<size_t>(kind);
    if (add) {
        in_use_[k] += bytes;
        peak_[k] = std::max(peak_[k], in_use_[k]);
    } else {
        in_use_[k] -= bytes;
    }
}

void* CudaBackend::alloc(size_t bytes, MemKind kind) {
    DF_CUDA_REQUIRE(!capturing_, "alloc while a graph is being recorded");
    const size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, rounded);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();  // not sticky: clear it so later checks do not see it
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        throw std::runtime_error("CUDA backend: out of device memory allocating " + std::to_string(bytes) +
                                 " bytes for " + kind_name(kind) + " (" + std::to_string(free_b >> 20) + " MiB free of " +
                                 std::to_string(total_b >> 20) + " MiB)");
    }
    DF_CUDA_CHECK(e);
    DF_CUDA_CHECK(cudaMemsetAsync(p, 0, rounded, stream_));
    std::lock_guard lock(mem_mu_);
    allocs_[p] = {bytes, kind};
    account(bytes, kind, true);
    return p;
}

// The host reads it in place after synchronize(); kernels write it through the same address
// (unified addressing), each store going over the bus: for results of a few bytes per token.
void* CudaBackend::alloc_host_visible(size_t bytes, MemKind kind) {
    DF_CUDA_REQUIRE(!capturing_, "alloc while a graph is being recorded");
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocMapped | cudaHostAllocPortable);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        throw std::runtime_error("CUDA backend: out of pinned host memory allocating " + std::to_string(bytes) +
                                 " bytes for " + kind_name(kind));
    }
    DF_CUDA_CHECK(e);
    void* dev = nullptr;
    DF_CUDA_CHECK(cudaHostGetDevicePointer(&dev, p, 0));
    if (dev != p) {
        cudaFreeHost(p);
        DF_CUDA_REQUIRE(false, "mapped host memory needs unified addressing (device and host pointers differ)");
    }
    std::memset(p, 0, std::max<size_t>(bytes, 1));
    std::lock_guard lock(mem_mu_);
    host_allocs_.insert(p);
    return p;
}

void CudaBackend::release(void* p) {
    if (!p) return;
    op_start();
    DF_CUDA_REQUIRE(!capturing_, "release while a graph is being recorded");
    {
        std::unique_lock lock(mem_mu_);
        if (host_allocs_.erase(p)) {
            lock.unlock();
            DF_CUDA_CHECK(cudaStreamSynchronize(stream_));
            DF_CUDA_CHECK(cudaFreeHost(p));
            return;
        }
        auto it = allocs_.find(p);
        DF_CUDA_REQUIRE(it != allocs_.end(), "release of a pointer this backend did not allocate");
        scale_wide_.erase(p);
        account(it->second.first, it->second.second, false);
        allocs_.erase(it);
    }
    DF_CUDA_CHECK(cudaStreamSynchronize(stream_));
    DF_CUDA_CHECK(cudaFree(p));
}

void CudaBackend::upload(void* dst, const void* src, size_t bytes) {
    if (!bytes) return;
    op_start();
    DF_CUDA_REQUIRE(!capturing_, "upload while a graph is being recorded");
    DF_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));  // dst may be host-visible memory
}

void CudaBackend::download(void* dst, const void* src, size_t bytes) {
    if (!bytes) return;
    flush();
    settle_deferred();
    DF_CUDA_REQUIRE(!capturing_, "download while a graph is being recorded");
    DF_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));  // src may be host-visible memory
    DF_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy(void* dst, const void* src, size_t bytes) {
    if (!bytes) return;
    op_start();
    DF_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::zero(void* dst, size_t bytes) {
    if (!bytes) return;
    op_start();
    DF_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream_));
}

void CudaBackend::bind_thread() {
    thread_local int bound = -1;  // this thread's current device, as far as this code set it
    if (bound == device_) return;
    DF_CUDA_CHECK(cudaSetDevice(device_));
    bound = device_;
}

void CudaBackend::synchronize() {
    flush();
    settle_deferred();
    DF_CUDA_REQUIRE(!capturing_, "synchronize while a graph is being recorded");
    DF_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

Weight CudaBackend::load_weight(quant::Type type, int64_t cols, int64_t rows, const void* host, size_t bytes) {
    const quant::TypeInfo* ti = quant::type_info(static_cast<uint32_t>(type));
    if (!ti) throw std::invalid_argument("CUDA backend: unknown weight type id " + std::to_string(static_cast<uint32_t>(type)));
    if (cols <= 0 || rows <= 0 || cols % ti->block_elems)
        throw std::invalid_argument("CUDA backend: a " + std::string(ti->name) + " weight needs a row length that is a positive multiple of " +
                                    std::to_string(ti->block_elems) + ", got " + std::to_string(cols));
    const size_t src_row = quant::row_bytes(type, cols);
    if (bytes < src_row * static_cast<size_t>(rows))
        throw std::invalid_argument("CUDA backend: weight data of " + std::to_string(bytes) + " bytes is shorter than " +
                                    std::to_string(rows) + " rows of " + std::to_string(src_row));
    const quant::Type held = native_type(type) ? type : quant::Type::F32;
    const RowLayout lay = row_layout(held, cols);
    const size_t total = lay.row_stride * static_cast<size_t>(rows);
    auto* dev = static_cast<uint8_t*>(alloc(total, MemKind::weights));

    if (!staging_) {
        DF_CUDA_CHECK(cudaMallocHost(&staging_, kStagingBytes));
        staging_bytes_ = kStagingBytes;
    }
    const auto* src = static_cast<const uint8_t*>(host);
    // A block scale too large for the wgmma GEMM to carry in f16 weights (inf and NaN too).
    const QuantOps* ops = quant_ops(held);
    const uint32_t wide_bits = qg_wg_able_ && ops ? ops->qgemm.wide_scale_bits : 0u;
    bool wide = false;
    const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(staging_bytes_ / lay.row_stride));
    std::vector<uint8_t> big;  // a single row larger than the staging buffer
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        const int64_t n = std::min(chunk, rows - r0);
        uint8_t* buf = static_cast<uint8_t*>(staging_);
        if (lay.row_stride > staging_bytes_) {
            big.resize(lay.row_stride);
            buf = big.data();
        }
        for (int64_t r = 0; r < n; ++r) {
            uint8_t* row = buf + static_cast<size_t>(r) * lay.row_stride;
            pack_row(type, held, src + static_cast<size_t>(r0 + r) * src_row, cols, lay, row);
            if (wide_bits) {
                uint16_t d;  // the split heads: one f16 per block
                for (int64_t b = 0; b < cols / ti->block_elems; ++b) {
                    std::memcpy(&d, row + lay.head_off + 2 * b, 2);
                    wide |= (d & 0x7FFFu) >= wide_bits;
                }
            }
        }
        DF_CUDA_CHECK(cudaMemcpyAsync(dev + static_cast<size_t>(r0) * lay.row_stride, buf, static_cast<size_t>(n) * lay.row_stride,
                                      cudaMemcpyHostToDevice, stream_));
        DF_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the staging buffer is refilled next
    }
    // Activation buffers of the integer tensor-core matvec, sized by the widest such weight
    // (allocated here: never while a graph is recorded).
    if (imma_type(held) && cols % 256 == 0) {
        if (cols > xq_cols_) {
            release(xq_);
            release(xe_);
            xq_ = static_cast<uint2*>(alloc(act_quant_xq_bytes(static_cast<int>(cols)), MemKind::scratch));
            xe_ = static_cast<float*>(alloc(sizeof(float) * 8 * static_cast<size_t>(cols / 256), MemKind::scratch));
            xq_cols_ = static_cast<int>(cols);
        }
        const int tiles = static_cast<int>((rows + 15) / 16);
        if (!imma_partial_) imma_partial_ = static_cast<float*>(alloc(kStreams * imma_scratch_bytes(imma_blocks()), MemKind::scratch));
        if (tiles > imma_tiles_) {  // counters start (and are left) at zero
            release(imma_counters_);
            imma_counters_ = static_cast<unsigned*>(alloc(sizeof(unsigned) * kStreams * static_cast<size_t>(tiles), MemKind::scratch));
            imma_tiles_ = tiles;
        }
    }
    if (wide) scale_wide_.insert(dev);
    Weight w;
    w.type = held;
    w.cols = cols;
    w.rows = rows;
    w.data = dev;
    w.bytes = total;
    w.row_stride = lay.row_stride;
    return w;
}

size_t CudaBackend::bytes_in_use(MemKind kind) const {
    std::lock_guard lock(mem_mu_);
    return in_use_[static_cast<size_t>(kind)];
}

size_t CudaBackend::peak_bytes(MemKind kind) const {
    std::lock_guard lock(mem_mu_);
    return peak_[static_cast<size_t>(kind)];
}

// ---- ops ---------------------------------------------------------------------------------

QuantMatrix CudaBackend::matrix(const Weight& w) const {
    QuantMatrix m;
    m.data = static_cast<const uint8_t*>(w.data);
    m.row_stride = w.row_stride;
    m.head_off = row_layout(w.type, w.cols).head_off;
    m.rows = static_cast<int>(w.rows);
    m.cols = static_cast<int>(w.cols);
    return m;
}

// Warps sharing one pair of rows: one, unless a row is long enough to give every lane of two
// warps 8+ units, or the matrix has too few rows to give every SM two blocks. Then another count
// replaces it where a rough model of the kernel's time is strictly lower: rounds of row groups
// over the resident warp groups (3 blocks of 8 warps per SM) times chunks of one unit per lane
// per row. (It moves the 4B's q from 4 to 2 warps: 160 units over 128 lanes left a second chunk
// three quarters idle; k and v from 4 to 8.)
int CudaBackend::warps_per_row(const Weight& w, int unit, int row_groups) const {
    if (matvec_wpr_ > 0) return matvec_wpr_;
    const int64_t units = w.cols / unit;
    int wpr = 1;
    while (wpr < 8 && units >= int64_t{2} * 32 * wpr * 8) wpr *= 2;
    auto blocks = [&](int k) { return (row_groups + 8 / k - 1) / (8 / k); };
    while (wpr < 8 && blocks(wpr) < 2 * sm_count_ && units >= int64_t{2} * 32 * wpr) wpr *= 2;
    const int64_t resident = int64_t{3} * 8 * sm_count_;
    auto cost = [&](int k) {
        const int64_t slots = resident / k;
        return (row_groups + slots - 1) / slots * ((units + 32 * k - 1) / (32 * k));
    };
    int best = wpr;
    for (int k = 1; k <= 8; k *= 2)
        if (cost(k) < cost(best)) best = k;
    return best;
}

static const QuantOps& ops_for(const Weight& w) {
    const QuantOps* ops = quant_ops(w.type);
    DF_CUDA_REQUIRE(ops, "weight type without CUDA kernels (was it loaded by this backend?)");
    return *ops;
}

bool CudaBackend::imma_type(quant::Type t) const {
    const QuantOps* ops = quant_ops(t);
    return imma_ && ops && ops->imma && (imma_skip_.empty() || imma_skip_.find(quant::type_name(t)) == std::string::npos);
}

void CudaBackend::note_decode_smem(quant::Type t, bool pair) const {
    const QuantOps* ops = quant_ops(t);
    if (!ops || smem_per_sm_ <= 0) return;
    const int64_t need = ops->decode_smem_per_sm(imma_type(t), pair);
    request_carveout(static_cast<int>(std::min<int64_t>(100, (100 * need + smem_per_sm_ - 1) / smem_per_sm_)));
}

bool CudaBackend::use_imma(const Weight& w, int T) const {
    // The stream-K split computes (tile, unit) * warps in 32 bits.
    const uint64_t split = static_cast<uint64_t>((w.rows + 15) / 16) * (w.cols / 256) * imma_blocks() * kImmaWarps;
    return T <= 8 && imma_type(w.type) && w.cols % 256 == 0 && w.cols <= xq_cols_ && (w.rows + 15) / 16 <= imma_tiles_ &&
           split < (uint64_t{1} << 32);
}

void CudaBackend::op_start() {
    flush();
    settle_deferred();
    xq_src_ = nullptr;  // this op may write the converted activations' source
    qg_src_ = nullptr;
}

void CudaBackend::remember_qg_conversion(const float* x, int T, int cols) {
    qg_src_ = capturing_ ? nullptr : x;  // a replayed graph converts again (op_start clears it at capture)
    qg_src_T_ = T;
    qg_src_n_ = cols;
}

void CudaBackend::quantize_activations(const float* x, int T, int cols, cudaStream_t s) {
    if (x == xq_src_ && T == xq_T_ && cols == xq_n_) return;  // converted by rmsnorm or a previous group
    if (deferred_.out && deferred_.pair && x == deferred_.out && T == deferred_T_ && cols == deferred_.rows) {
        launch_act_quant_deferred(deferred_, T, xq_, xe_, s);
        deferred_ = {};
    } else {
        launch_act_quant(x, T, cols, xq_, xe_, s);
    }
    xq_src_ = x;
    xq_T_ = T;
    xq_n_ = cols;
}

ImmaArgs CudaBackend::imma_args(const Weight& w, const uint8_t* up, int T, float* out, bool accumulate,
                                cudaStream_t s) const {
    int slot = 0;  // matmuls on parallel streams need their own scratch
    for (int i = 0; i < kSideStreams; ++i)
        if (s == side_[i]) slot = i + 1;
    ImmaArgs a;
    a.w = matrix(w);
    a.up = up;
    a.xq = xq_;
    a.xe = xe_;
    a.T = T;
    a.out = out;
    a.accumulate = accumulate;
    a.blocks = imma_blocks();
    a.partial = imma_partial_ + slot * (imma_scratch_bytes(a.blocks) / sizeof(float));
    a.counters = imma_counters_ + static_cast<size_t>(slot) * imma_tiles_;
    a.itables = imma_tables_;
    return a;
}

void CudaBackend::embed(const Weight& w, const Step& s, float* out) {
    op_start();
    set_decode_launches(s.T <= 8);  // the forward's launches (embed is its first op)
    const QuantOps& ops = ops_for(w);
    EmbedArgs a;
    a.w = matrix(w);
    a.tokens = s.tokens;
    a.T = s.T;
    a.out = out;
    a.tables = tables_;
    ops.embed(a, stream_);
}

namespace {
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
bool overlap(const float* a, const float* b, int64_t n) { return a < b + n && b < a + n; }
// Where deferred launch a (ImmaArgs::defer) left its shared tiles, for their reader.
ImmaDeferred deferred_of(const ImmaArgs& a, bool pair, bool add) {
    return {a.out, a.partial, a.w.rows, a.w.cols, a.blocks * kImmaWarps, pair, add};
}
}  // namespace

void CudaBackend::fold_into(MatvecArgs& a, const PendingNorm& n, bool write) {
    a.norm_x = n.x;
    a.norm_w = n.w;
    a.norm_eps = n.eps;
    a.norm_out = write ? n.out : nullptr;
}

void CudaBackend::rmsnorm(const float* x, int64_t x_stride, const float* weight, int n_rows, int n, float eps,
                          float* out, int64_t out_stride) {
    // op_start(), except that the residual a deferred accumulating launch added to is summed here.
    flush();
    const bool takes = deferred_.out && !deferred_.pair && x == deferred_.out && n_rows == deferred_T_ &&
                       n == deferred_.rows && x_stride == n && out_stride == n && n <= xq_cols_ &&
                       n <= kRmsnormQuantMaxCols && !fold_norm_ && !overlap(x, out, static_cast<int64_t>(n) * n_rows) &&
                       aligned16(out) && (!weight || aligned16(weight));
    if (!takes) settle_deferred();
    xq_src_ = nullptr;
    qg_src_ = nullptr;
    if (takes) {
        launch_rmsnorm_quant_deferred(deferred_, weight, n_rows, n, eps, out, xq_, xe_, stream_);
        deferred_ = {};
        xq_src_ = out;
        xq_T_ = n_rows;
        xq_n_ = n;
        return;
    }
    // Held back when a matvec could fold it (folds_norm checks the width); else launched by the next flush.
    if (fold_norm_ && n_rows == 1 && weight && !overlap(x, out, n) && aligned16(x) && aligned16(out) && aligned16(weight)) {
        norm_ = {x, weight, n, eps, out};
        return;
    }
    launch_norm(x, x_stride, weight, n_rows, n, eps, out, out_stride);
}

bool CudaBackend::folds_norm(const Weight& w, const float* x, int T, const float* out) const {
    return norm_.x && x == norm_.out && T == 1 && w.cols == norm_.n && !use_imma(w, T) && !use_qgemm(w, T) &&
           matvec_can_fold_norm(static_cast<int>(w.cols), ops_for(w).unit) && !overlap(out, norm_.x, w.rows) &&
           !overlap(out, norm_.out, w.rows);
}

void CudaBackend::launch_norm(const float* x, int64_t x_stride, const float* weight, int n_rows, int n, float eps,
                              float* out, int64_t out_stride) {
    // Decode: the imma matvecs that read `out` next find it converted already.
    if (imma_ && n_rows >= 1 && n_rows <= 8 && n % 256 == 0 && n <= xq_cols_ && n <= kRmsnormQuantMaxCols &&
        out_stride == n) {
        launch_rmsnorm_quant(x, x_stride, weight, n_rows, n, eps, out, xq_, xe_, stream_);
        xq_src_ = out;
        xq_T_ = n_rows;
        xq_n_ = n;
        return;
    }
    launch_rmsnorm(x, x_stride, weight, n_rows, n, eps, out, out_stride, stream_);
}

bool CudaBackend::use_qgemm(const Weight& w, int T) const {
    const QuantOps* ops = quant_ops(w.type);
    if (!qgemm_ || T <= 8 || !ops || !ops->qgemm.launch || w.cols % ops->qgemm.unit != 0) return false;
    return !capturing_ || (T <= qg_T_ && static_cast<size_t>(2) * T * w.cols <= qg_x_halves_);
}

void CudaBackend::reserve_qgemm(int T, int64_t cols) {
    const size_t halves = static_cast<size_t>(2) * T * cols;
    if (halves > qg_x_halves_) {
        release(qg_x_);
        qg_x_ = static_cast<uint16_t*>(alloc(sizeof(uint16_t) * halves, MemKind::scratch));
        qg_x_halves_ = halves;
    }
    if (T > qg_T_) {
        release(qg_inv_);
        qg_inv_ = static_cast<float*>(alloc(sizeof(float) * T, MemKind::scratch));
        qg_T_ = T;
    }
    if (!qg_partial_) qg_partial_ = static_cast<float*>(alloc(sizeof(float) * kQGemmPartialFloats, MemKind::scratch));
}

// The split-K scratch of launch unit u of a pending group of `units`: a lone matmul takes all of
// it, a group's units (on their own streams) a slice each.
CudaBackend::PartialSlice CudaBackend::partial_slice(int u, int units) const {
    if (!qg_partial_) return {};
    if (units <= 1) return {qg_partial_, kQGemmPartialFloats};
    constexpr int64_t kSlice = (kQGemmPartialFloats / kStreams) & ~int64_t{63};  // 256-byte aligned
    return {qg_partial_ + u * kSlice, kSlice};
}

void CudaBackend::run_qgemm(const Weight& w, int T, float* out, bool accumulate, cudaStream_t s, PartialSlice partial) {
    const QGemmEntry& e = ops_for(w).qgemm;
    QGemmArgs a;
    a.w = matrix(w);
    a.xhl = qg_x_;
    a.xinv = qg_inv_;
    a.T = T;
    a.out = out;
    a.accumulate = accumulate;
    a.itables = imma_tables_;
    a.wg_order = qg_wg_;
    a.fold_scales = fold_all_ || scale_wide_.count(w.data) != 0;
    const bool wg = qg_wg_ && e.launch_wg;
    const bool in_a = wg && e.wide_scale_bits && !a.fold_scales;  // gemm_wg.cuh's kInA form
    const int tile_rows = in_a ? kQGemmWgInATileRows : wg ? kQGemmWgTileRows : kQGemmTileRows;
    const int tile_tokens = in_a ? qgemm_wg_ina_tokens(T, narrow_) : wg ? qgemm_wg_fold_tokens(T, narrow_) : kQGemmTileTokens;
    a.tokens = wg ? tile_tokens : 0;
    // Split K when that fills the waves of resident blocks better: the estimated time of s splits
    // is ceil(tiles s / slots) / s waves of whole-K blocks plus ~2 % per split for the partial sums;
    // at least two units per range, partial sums within the scratch. Deterministic either way.
    const int64_t tiles = ((w.rows + tile_rows - 1) / tile_rows) * ((T + tile_tokens - 1) / tile_tokens);
    const int per_sm = !wg ? kQGemmBlocksPerSm : in_a ? qgemm_wg_ina_blocks_per_sm(tile_tokens) : qgemm_wg_fold_blocks_per_sm(tile_tokens);
    const int64_t slots = static_cast<int64_t>(per_sm) * sm_count_;
    const int64_t max_splits =
        partial.p ? std::max<int64_t>(1, std::min<int64_t>({8, w.cols / e.unit / 2, partial.floats / (int64_t{T} * w.rows)})) : 1;
    int64_t splits = 1;
    double best = 1e30;
    for (int64_t k = 1; k <= max_splits; ++k) {
        const double cost = static_cast<double>((tiles * k + slots - 1) / slots) / k + (k > 1 ? 0.02 * k : 0.0);
        if (cost < best - 1e-9) {
            best = cost;
            splits = k;
        }
    }
    const auto launch_fn = wg ? e.launch_wg : e.launch;
    if (splits > 1) {
        a.splits = static_cast<int>(splits);
        a.partial = partial.p;
        launch_fn(a, s);
        launch_gemm_reduce(partial.p, a.splits, static_cast<int64_t>(T) * w.rows, out, accumulate, s);
    } else {
        launch_fn(a, s);
    }
}

void CudaBackend::matmul(const Weight& w, const float* x, int T, float* out, bool accumulate) {
    if (T <= 0) return;
    note_decode_smem(w.type, false);
    const bool fold = folds_norm(w, x, T, out);
    if (norm_.x && !fold) flush();  // the held-back norm (and any group folding it) first
    if (use_qgemm(w, T) && !capturing_) reserve_qgemm(T, w.cols);  // may flush: before joining
    bool joins = !pending_.empty() && pending_x_ == x && pending_T_ == T && pending_.size() < kSideStreams + 1;
    for (const PendingMatmul& p : pending_) joins = joins && p.out != out;
    if (!joins) {
        if (fold && pending_.empty())
            flush_prep();  // keeps the norm held back for this matmul
        else
            flush();
    }
    if (out == xq_src_) xq_src_ = nullptr;
    if (out == qg_src_) qg_src_ = nullptr;
    pending_x_ = x;
    pending_T_ = T;
    pending_.push_back({w, out, accumulate});
}

void CudaBackend::flush() {
    flush_prep();
    flush_matmuls();
}

void CudaBackend::settle_deferred() {
    if (!deferred_.out) return;
    launch_imma_deferred_write(deferred_, deferred_T_, stream_);
    deferred_ = {};
}

void CudaBackend::flush_prep() {
    if (prep_.sets == 0) return;
    launch_attn_prep(prep_, stream_);
    prep_ = {};
}

void CudaBackend::flush_matmuls() {
    const PendingNorm fold = norm_;  // the pending matmuls, if any, all fold it (matmul() checked)
    norm_ = {};
    if (pending_.empty()) {
        if (fold.x) launch_norm(fold.x, fold.n, fold.w, 1, fold.n, fold.eps, fold.out, fold.n);
        return;
    }
    const PendingNorm* f = fold.x ? &fold : nullptr;
    // A deferred output is summed by the conversion of a group of imma matmuls reading it (the
    // down projection after gate/up); before any other group it is written out, since the group
    // may read it or reuse the scratch holding its parts.
    bool consumer = deferred_.out && deferred_.pair && pending_x_ == deferred_.out;
    for (const PendingMatmul& p : pending_) consumer = consumer && use_imma(p.w, pending_T_);
    if (!consumer) settle_deferred();
    // Matmuls sharing the activations share their conversion (before the fork).
    bool quantize = false;
    for (const PendingMatmul& p : pending_) quantize = quantize || use_imma(p.w, pending_T_);
    if (quantize) quantize_activations(pending_x_, pending_T_, static_cast<int>(pending_[0].w.cols), stream_);
    bool convert = false;
    for (const PendingMatmul& p : pending_) convert = convert || use_qgemm(p.w, pending_T_);
    const int cols = static_cast<int>(pending_[0].w.cols);
    if (convert && !(pending_x_ == qg_src_ && pending_T_ == qg_src_T_ && cols == qg_src_n_)) {
        launch_gemm_act(pending_x_, pending_T_, cols, qg_x_, qg_inv_, qg_wg_, stream_);
        remember_qg_conversion(pending_x_, pending_T_, cols);
    }
    // Launches: the f32 matvecs of the first matmul's layout join its launch (MatvecArgs::segs),
    // the others run one each on side streams. (Only the first: the 27B's alpha and beta, side
    // kernels of a few blocks each, were 1.4 % slower as one launch; the 4B's q, k, v 1 % faster.)
    const size_t n = pending_.size();
    int unit_of[kStreams], units = 1, first_size = 1;
    unit_of[0] = 0;
    for (size_t i = 1; i < n; ++i) {
        if (first_size < kMatvecSegs && matvec_joins(pending_[0], pending_[i], pending_T_)) {
            unit_of[i] = 0;
            ++first_size;
        } else {
            unit_of[i] = units++;
        }
    }
    auto run_unit = [&](int u, cudaStream_t s, bool first) {
        const PendingMatmul* group[kStreams];
        int k = 0;
        for (size_t i = 0; i < n; ++i)
            if (unit_of[i] == u) group[k++] = &pending_[i];
        if (k == 1)
            run_matmul(group[0]->w, pending_x_, pending_T_, group[0]->out, group[0]->accumulate, s, partial_slice(u, units), f, first);
        else
            run_matvec_segs(group, k, s, f, first);
    };
    // Two lone imma matmuls of a built type pair run as one launch on the main stream (imma_two.cuh);
    // the other units (unit 0 too, if it is not one of them) go to side streams.
    int two[2] = {-1, -1};
    const ImmaTwoFn two_fn = imma_two_ ? find_imma_two(unit_of, units, two) : nullptr;
    int sides = 0;
    if (units > (two_fn ? 2 : 1)) {
        // Fork: the side streams start after everything already on the main stream.
        DF_CUDA_CHECK(cudaEventRecord(fork_, stream_));
        for (int u = two_fn ? 0 : 1; u < units; ++u) {
            if (u == two[0] || u == two[1]) continue;
            DF_CUDA_CHECK(cudaStreamWaitEvent(side_[sides], fork_, 0));
            run_unit(u, side_[sides], false);
            DF_CUDA_CHECK(cudaEventRecord(join_[sides], side_[sides]));
            ++sides;
        }
    }
    if (two_fn)
        run_imma_two(two_fn, unit_of, two);
    else
        run_unit(0, stream_, true);
    for (int i = 0; i < sides; ++i) DF_CUDA_CHECK(cudaStreamWaitEvent(stream_, join_[i], 0));
    pending_.clear();
}

// The launch units (two[0], two[1]) of the first two lone imma matmuls of the pending group whose
// type pair has a two-part kernel, in the order it takes them; nullptr if none.
ImmaTwoFn CudaBackend::find_imma_two(const int* unit_of, int units, int (&two)[2]) const {
    int members[kStreams] = {}, first[kStreams];
    for (size_t i = 0; i < pending_.size(); ++i)
        if (members[unit_of[i]]++ == 0) first[unit_of[i]] = static_cast<int>(i);
    int cand[2], k = 0;
    for (int u = 0; u < units && k < 2; ++u)
        if (members[u] == 1 && use_imma(pending_[first[u]].w, pending_T_)) cand[k++] = u;
    if (k < 2) return nullptr;
    const quant::Type a = pending_[first[cand[0]]].w.type, b = pending_[first[cand[1]]].w.type;
    if (ImmaTwoFn f = imma_two(a, b)) {
        two[0] = cand[0];
        two[1] = cand[1];
        return f;
    }
    if (ImmaTwoFn f = imma_two(b, a)) {
        two[0] = cand[1];
        two[1] = cand[0];
        return f;
    }
    return nullptr;
}

// The imma grid split between the two parts by weight bytes (shapes only: T <= 8 cannot change
// the stream-K splits); part b's scratch is the last side stream's, which no side launch of a
// group uses (at most kSideStreams - 1 other units).
void CudaBackend::run_imma_two(ImmaTwoFn fn, const int* unit_of, const int (&two)[2]) {
    const PendingMatmul* m[2] = {};
    for (size_t i = 0; i < pending_.size(); ++i)
        for (int k = 0; k < 2; ++k)
            if (unit_of[i] == two[k]) m[k] = &pending_[i];
    ImmaArgs a = imma_args(m[0]->w, nullptr, pending_T_, m[0]->out, m[0]->accumulate, stream_);
    ImmaArgs b = imma_args(m[1]->w, nullptr, pending_T_, m[1]->out, m[1]->accumulate, side_[kSideStreams - 1]);
    const int total = imma_blocks();
    const double ba = static_cast<double>(m[0]->w.bytes), bb = static_cast<double>(m[1]->w.bytes);
    a.blocks = std::clamp(static_cast<int>(total * ba / (ba + bb) + 0.5), 1, total - 1);
    b.blocks = total - a.blocks;
    // The GDN step about to read both outputs (gdn_mix's step_reads_) sums their shared tiles.
    const StepReads& r = step_reads_;
    const int q = m[0]->out == r.qkv && m[1]->out == r.z ? 0 : m[1]->out == r.qkv && m[0]->out == r.z ? 1 : -1;
    const bool defer = imma_defer_ >= 3 && r.qkv && q >= 0 && pending_T_ == r.T && !a.accumulate && !b.accumulate &&
                       a.w.rows % 16 == 0 && b.w.rows % 16 == 0;
    a.defer = b.defer = defer;
    fn(a, b, stream_);
    if (defer) {
        step_parts_[q] = deferred_of(a, false, false);
        step_parts_[1 - q] = deferred_of(b, false, false);
    }
}

// Whether pending matmul b may share a's f32 matvec launch: same layout and accumulation, rows
// in groups of 4 (MatvecArgs::segs). A function of the shapes only, as T <= 8 cannot change it.
bool CudaBackend::matvec_joins(const PendingMatmul& a, const PendingMatmul& b, int T) const {
    auto f32_matvec = [&](const Weight& w) { return T <= 8 && !use_imma(w, T) && !use_qgemm(w, T); };
    return merge_matvecs_ && f32_matvec(a.w) && f32_matvec(b.w) && a.w.type == b.w.type && a.w.cols == b.w.cols &&
           a.w.row_stride == b.w.row_stride && a.accumulate == b.accumulate && a.w.rows % 4 == 0 && b.w.rows % 4 == 0;
}

// The f32 matvec's arguments for T <= 8 tokens of x times w (rows_per_group: outputs of a warp
// group, 4, or 2 for fused gate/up; warps per row from the shape only: T must not change a
// token's summation order).
MatvecArgs CudaBackend::matvec_args(const Weight& w, const float* x, int T, float* out, bool accumulate,
                                    int rows_per_group, const PendingNorm* fold, bool write_norm) const {
    MatvecArgs a;
    a.w = matrix(w);
    a.x = x;
    a.T = T;
    a.out = out;
    a.accumulate = accumulate;
    a.warps_per_row = warps_per_row(w, ops_for(w).unit, static_cast<int>((w.rows + rows_per_group - 1) / rows_per_group));
    a.tables = tables_;
    if (fold) fold_into(a, *fold, write_norm);
    return a;
}

void CudaBackend::run_matvec_segs(const PendingMatmul* const* group, int k, cudaStream_t s, const PendingNorm* fold,
                                  bool write_norm) {
    DF_CUDA_REQUIRE(k >= 2 && k <= kMatvecSegs, "matvec segments: 2 or 3 matrices");
    const Weight& w0 = group[0]->w;
    int rows = 0;
    for (int i = 0; i < k; ++i) rows += static_cast<int>(group[i]->w.rows);
    Weight total = w0;  // the stacked matrix: its shape sets the warps per row
    total.rows = rows;
    MatvecArgs a = matvec_args(total, pending_x_, pending_T_, group[0]->out, group[0]->accumulate, 4, fold, write_norm);
    a.segs = k;
    rows = 0;
    for (int i = 0; i < k; ++i) {
        a.seg_data[i] = static_cast<const uint8_t*>(group[i]->w.data);
        a.seg_out[i] = group[i]->out;
        a.seg_row[i] = rows;
        rows += static_cast<int>(group[i]->w.rows);
    }
    a.seg_row[k] = rows;
    ops_for(w0).matvec(a, s);
}

void CudaBackend::run_matmul(const Weight& w, const float* x, int T, float* out, bool accumulate, cudaStream_t s,
                             PartialSlice partial, const PendingNorm* fold, bool write_norm) {
    const QuantOps& ops = ops_for(w);
    if (use_qgemm(w, T)) {
        run_qgemm(w, T, out, accumulate, s, partial);  // flush() converted x
    } else if (use_imma(w, T)) {
        ImmaArgs a = imma_args(w, nullptr, T, out, accumulate, s);  // flush() converted x
        // An accumulating launch on the main stream leaves its shared tiles to the RMSNorm after
        // it (rmsnorm(); imma_defer_ 2).
        a.defer = imma_defer_ >= 2 && accumulate && s == stream_ && w.rows % 256 == 0 && aligned16(out);
        ops.imma(a, s);
        if (a.defer) {
            deferred_ = deferred_of(a, false, true);
            deferred_T_ = T;
        }
    } else if (T <= 8) {
        ops.matvec(matvec_args(w, x, T, out, accumulate, 4, fold, write_norm), s);
    } else if (T <= kChunkedMatvecT) {
        // A short T on a type without the exact-f16 GEMM: the matvec on 8 tokens at a time (the
        // weights read once per chunk) instead of gemm_kernel, whose 128-row blocks are too few
        // for a short T (the 27B's IQ4_XS attn_k at T = 16: 8 blocks, 190 us).
        for (int t0 = 0; t0 < T; t0 += 8)
            ops.matvec(matvec_args(w, x + static_cast<size_t>(t0) * w.cols, std::min(8, T - t0),
                                   out + static_cast<size_t>(t0) * w.rows, accumulate, 4, nullptr, false),
                       s);
    } else {
        GemmArgs a;
        a.w = matrix(w);
        a.x = x;
        a.T = T;
        a.out = out;
        a.accumulate = accumulate;
        a.split = split_gemm_;
        a.tables = tables_;
        ops.gemm(a, s);
    }
}

void CudaBackend::ffn_gate_up(const Weight& wg, const Weight& wu, const float* x, int T, float* out,
                              float* scratch) {
    if (T <= 0) return;
    const bool pair = wg.type == wu.type && wg.rows == wu.rows && wg.cols == wu.cols && wg.row_stride == wu.row_stride;
    const bool fused = T <= 8 && pair;
    note_decode_smem(wg.type, pair);
    if (!pair) note_decode_smem(wu.type, false);
    // Decode after an RMSNorm: the fused f32 matvec folds it (nothing else is pending then).
    const bool fold = fused && pending_.empty() && folds_norm(wg, x, T, out) && !overlap(scratch, norm_.x, wg.rows) &&
                      !overlap(scratch, norm_.out, wg.rows);
    const PendingNorm norm = fold ? norm_ : PendingNorm{};
    if (fold) {
        norm_ = {};
        flush_prep();
    } else {
        flush();
    }
    settle_deferred();  // (its launches reuse the scratch)
    if (out == xq_src_ || scratch == xq_src_) xq_src_ = nullptr;
    qg_src_ = nullptr;
    if (fused && use_imma(wg, T)) {
        quantize_activations(x, T, static_cast<int>(wg.cols), stream_);
        ImmaArgs a = imma_args(wg, static_cast<const uint8_t*>(wu.data), T, out, false, stream_);
        a.defer = imma_defer_ >= 1 && wg.rows % 256 == 0 && aligned16(out);
        ops_for(wg).imma(a, stream_);
        if (a.defer) {
            deferred_ = deferred_of(a, true, true);
            deferred_T_ = T;
        }
        return;
    }
    if (fused) {
        MatvecArgs a = matvec_args(wg, x, T, out, false, 2, norm.x ? &norm : nullptr, true);  // two outputs per group
        a.up = static_cast<const uint8_t*>(wu.data);
        ops_for(wg).matvec(a, stream_);
        return;
    }
    // Prefill: the SwiGLU also converts its result for the down projection's exact-f16 GEMM (which
    // then finds qg_x_ current), where this FFN's own matrices take that GEMM.
    const bool convert = use_qgemm(wg, T) && !capturing_ && wg.rows % 32 == 0;
    if (convert) reserve_qgemm(T, wg.rows);
    matmul(wg, x, T, out, false);
    matmul(wu, x, T, scratch, false);
    flush();
    if (convert) {
        launch_swiglu_gemm_act(out, scratch, T, static_cast<int>(wg.rows), qg_x_, qg_inv_, qg_wg_, stream_);
        remember_qg_conversion(out, T, static_cast<int>(wg.rows));
    } else {
        launch_swiglu(out, scratch, static_cast<int64_t>(T) * wg.rows, stream_);
    }
}

void CudaBackend::head_norm_rope(float* x, int heads, int head_dim, int head_stride, int row, const float* norm_w,
                                 float eps, const RopeShape& rope, const Step& s) {
    flush_matmuls();
    xq_src_ = nullptr;
    qg_src_ = nullptr;
    if (s.T <= 0) return;
    // The same host expression as the CPU backend, so both start from the same f32 ratio.
    const float theta_scale = rope.theta_scale();
    const auto end = [&](const float* p, int r) { return p + static_cast<int64_t>(s.T) * r; };
    const HeadSet& q = prep_.set[0];
    const bool joins = prep_.sets == 1 && !prep_.k_cache && prep_.T == s.T && prep_.pos == s.pos &&
                       prep_.head_dim == head_dim && prep_.n_rot == rope.n_rot && prep_.eps == eps &&
                       prep_.theta_scale == theta_scale && (end(x, row) <= q.x || end(q.x, q.row) <= x);
    if (!joins) {
        flush_prep();
        prep_.T = s.T;
        prep_.pos = s.pos;
        prep_.head_dim = head_dim;
        prep_.n_rot = rope.n_rot;
        prep_.eps = eps;
        prep_.theta_scale = theta_scale;
    }
    prep_.set[prep_.sets++] = HeadSet{x, heads, head_stride, row, norm_w};
}

void CudaBackend::kv_store(const float* k, const float* v, void* k_cache, void* v_cache, KvType kt, int kv_dim,
                           const Step& s) {
    flush_matmuls();
    xq_src_ = nullptr;
    qg_src_ = nullptr;
    if (prep_.sets > 0 && prep_.T == s.T && prep_.pos == s.pos) {
        const HeadSet& last = prep_.set[prep_.sets - 1];
        if (last.x == k && last.heads * prep_.head_dim == kv_dim && last.head_stride == prep_.head_dim &&
            last.row == kv_dim) {
            prep_.v = v;
            prep_.k_cache = k_cache;
            prep_.v_cache = v_cache;
            prep_.half_cache = kt == KvType::f16;
            flush_prep();
            return;
        }
    }
    flush_prep();
    launch_kv_store(k, v, k_cache, v_cache, kt == KvType::f16, kv_dim, s.T, s.pos, stream_);
}

// Band 1: a step whose every token's context fits one cluster of the cluster attention kernel.
int CudaBackend::graph_variant(const Step& s) const {
    const int c = attn_cluster();
    return c > 0 && s.pos0_hint + s.T <= c * attn_cluster_keys() ? 1 : 0;
}

// The attention kernels' arguments for this backend's knobs and scratch.
AttnArgs CudaBackend::attn_args(const float* q, const void* k_cache, const void* v_cache, KvType kt, const AttnShape& a,
                                const Step& s, float* out) const {
    AttnArgs args;
    args.q = q;
    args.k_cache = k_cache;
    args.v_cache = v_cache;
    args.half_cache = kt == KvType::f16;
    args.heads = a.heads;
    args.kv_heads = a.kv_heads;
    args.head_dim = a.head_dim;
    args.q_stride = a.q_stride;
    args.q_row = a.q_row;
    args.scale = a.scale;
    args.T = s.T;
    args.pos = s.pos;
    args.out = out;
    args.partial = attn_partial_;
    args.partial_floats = attn_partial_floats_;
    args.sm_count = sm_count_;
    args.split_keys = attn_split_keys();
    args.split_heads = attn_split_heads();
    args.cluster = attn_cluster();
    args.cluster_keys = attn_cluster_keys();
    args.pos0_hint = s.pos0_hint;
    return args;
}

void CudaBackend::attention(const float* q, const void* k_cache, const void* v_cache, KvType kt, const AttnShape& a,
                            const Step& s, float* out) {
    op_start();
    launch_attention(attn_args(q, k_cache, v_cache, kt, a, s, out), stream_);
}

// One prep launch (q and k norm + RoPE, the KV store) and one attention launch (per kernel band)
// over every lane's rows, each row with its own caches: a row's blocks are those of its lone step
// (the kernels' work per token depends on its position only), so the bits are the same.
void CudaBackend::attention_lanes(std::span<const AttnLane> lanes, float* q, float* k, const float* v,
                                  const float* q_norm, const float* k_norm, float eps, const RopeShape& rope, KvType kt,
                                  const AttnShape& a, float* out) {
    if (lanes.size() == 1 && lanes[0].s.T == 1 && attn_prep_fused()) {
        // One token (decode): the q/k norm, RoPE and KV store inside the attention launch,
        // where the kernel takes the shape and context (launch_attention_prepped).
        const AttnLane& ln = lanes[0];
        op_start();
        HeadPrep p;
        p.k = k;
        p.v = v;
        p.q_norm = q_norm;
        p.k_norm = k_norm;
        p.eps = eps;
        p.theta_scale = rope.theta_scale();  // the host expression head_norm_rope uses
        p.n_rot = rope.n_rot;
        p.k_cache = ln.k_cache;
        p.v_cache = ln.v_cache;
        if (launch_attention_prepped(attn_args(q, ln.k_cache, ln.v_cache, kt, a, ln.s, out), p, stream_)) return;
    }
    const int rows = lanes.empty() ? 0 : lanes.back().row0 + lanes.back().s.T;
    bool fits = lanes.size() >= 2 && lanes_ && rows <= kMaxLaneRows;
    for (const AttnLane& ln : lanes)  // rows in order, positions contiguous (Model::forward_lanes)
        fits = fits && ln.s.T >= 1 && ln.s.pos == lanes[0].s.pos + ln.row0;
    if (!fits) {
        Backend::attention_lanes(lanes, q, k, v, q_norm, k_norm, eps, rope, kt, a, out);
        return;
    }
    op_start();
    const int kv_dim = a.kv_heads * a.head_dim;
    RowCaches rc;
    int lo = lanes[0].s.pos0_hint, hi = lo;
    for (const AttnLane& ln : lanes) {
        for (int t = ln.row0; t < ln.row0 + ln.s.T; ++t) {
            rc.k[t] = ln.k_cache;
            rc.v[t] = ln.v_cache;
        }
        lo = std::min(lo, ln.s.pos0_hint);
        hi = std::max(hi, ln.s.pos0_hint + ln.s.T - 1);
    }
    AttnPrepArgs p;
    p.set[0] = HeadSet{q, a.heads, a.q_stride, a.q_row, q_norm};
    p.set[1] = HeadSet{k, a.kv_heads, a.head_dim, kv_dim, k_norm};
    p.sets = 2;
    p.T = rows;
    p.head_dim = a.head_dim;
    p.n_rot = rope.n_rot;
    p.eps = eps;
    p.theta_scale = rope.theta_scale();
    p.pos = lanes[0].s.pos;
    p.v = v;
    p.half_cache = kt == KvType::f16;
    launch_attn_prep(p, stream_, &rc);

    Step all = lanes[0].s;
    all.T = rows;
    all.pos0_hint = lo;
    AttnArgs args = attn_args(q, rc.k[0], rc.v[0], kt, a, all, out);
    launch_attention(args, stream_, &rc, hi);
}

void CudaBackend::sigmoid_mul(float* x, int n, const float* gate, int width, int gate_stride, int gate_row, int T) {
    op_start();
    launch_sigmoid_mul(x, n, gate, width, gate_stride, gate_row, T, stream_);
}

void CudaBackend::gdn_conv(float* x, int T, const GdnShape& g, const float* w, float* conv_state) {
    op_start();
    launch_gdn_conv(x, T, g.channels(), g.conv_kernel, w, conv_state, stream_);
}

void CudaBackend::gdn_delta(const float* qkv, const float* alpha, const float* beta, const float* dt_bias,
                            const float* a_neg, int T, const GdnShape& g, float eps, float* state, float* out) {
    op_start();
    GdnArgs a;
    a.qkv = qkv;
    a.alpha = alpha;
    a.beta = beta;
    a.dt_bias = dt_bias;
    a.a_neg = a_neg;
    a.T = T;
    a.k_heads = g.k_heads;
    a.v_heads = g.v_heads;
    a.head_dim = g.head_dim;
    a.eps = eps;
    a.state = state;
    a.out = out;
    // Prefill: per-head inputs prepared once (the scratch grows on demand; never while a graph
    // is recorded, and decode keeps the single fused kernel).
    const size_t prep = static_cast<size_t>(T) * gdn_prep_floats_per_token(g.k_heads, g.v_heads, g.head_dim);
    if (T > 8 && !capturing_) {
        if (prep > gdn_prep_floats_) {
            release(gdn_prep_);
            gdn_prep_ = static_cast<float*>(alloc(sizeof(float) * prep, MemKind::scratch));
            gdn_prep_floats_ = prep;
        }
        a.prep = gdn_prep_;
    }
    launch_gdn_delta(a, stream_);
}

void CudaBackend::gated_rmsnorm(const float* x, const float* z, const float* w, int T, int heads, int n, float eps,
                                float* out) {
    op_start();
    // Decode: the imma matvec that reads `out` next (ssm_out) finds it converted already.
    const int cols = heads * n;
    if (imma_ && gated_rmsnorm_quant_fits(x, z, out, T, heads, n) && cols <= xq_cols_) {
        launch_gated_rmsnorm_quant(x, z, w, T, heads, n, eps, out, xq_, xe_, stream_);
        xq_src_ = out;
        xq_T_ = T;
        xq_n_ = cols;
        return;
    }
    launch_gated_rmsnorm(x, z, w, T, heads, n, eps, out, stream_);
}

// The fused GDN step's arguments for weights w (its states: the lone call's) and this backend's knobs.
GdnStepArgs CudaBackend::gdn_step_args(const GdnLayer& w, const GdnShape& g, float eps) const {
    GdnStepArgs a;
    a.conv_w = w.conv_w;
    a.dt_bias = w.dt_bias;
    a.a_neg = w.a_neg;
    a.norm_w = w.norm_w;
    a.k_heads = g.k_heads;
    a.v_heads = g.v_heads;
    a.head_dim = g.head_dim;
    a.taps = g.conv_kernel;
    a.eps = eps;
    a.conv_state = w.conv_state;
    a.state = w.state;
    a.blocks_per_head = gdn_split_;
    a.counters = gdn_counters_;
    a.counter_count = kGdnCounters;
    a.late_trigger = gdn_late_;
    return a;
}

void CudaBackend::gdn_mix(float* qkv, const float* z, const float* alpha, const float* beta, const GdnLayer& l, int T,
                          const GdnShape& g, float eps, float* out) {
    GdnStepArgs a = gdn_step_args(l, g, eps);
    a.qkv = qkv;
    a.z = z;
    a.alpha = alpha;
    a.beta = beta;
    a.T = T;
    a.out = out;
    if (!gdn_fused_ || !gdn_step_fits(a)) {
        Backend::gdn_mix(qkv, z, alpha, beta, l, T, g, eps, out);
        return;
    }
    step_reads_ = {qkv, z, T};
    op_start();
    step_reads_ = {};
    if (step_parts_[0].out) {
        a.qkv_parts = step_parts_[0];
        a.z_parts = step_parts_[1];
        step_parts_[0] = step_parts_[1] = {};
    }
    // Decode: the imma matvec that reads `out` next (ssm_out) finds it converted already.
    const int cols = g.v_heads * g.head_dim;
    const bool convert = imma_ && cols <= xq_cols_;
    if (convert) {
        a.xq = xq_;
        a.xe = xe_;
    }
    launch_gdn_step(a, stream_);
    if (convert) {
        xq_src_ = out;
        xq_T_ = T;
        xq_n_ = cols;
    }
}

void CudaBackend::gdn_mix_lanes(std::span<const GdnMixLane> lanes, const GdnLayer& w, const GdnShape& g, float eps) {
    if (lanes.size() < 2 || !lanes_ || !gdn_fused_) {  // a lone forward's gdn_mix
        Backend::gdn_mix_lanes(lanes, w, g, eps);
        return;
    }
    GdnStepArgs a = gdn_step_args(w, g, eps);
    a.lanes = static_cast<int>(lanes.size());
    for (size_t i = 0; i < lanes.size() && i < static_cast<size_t>(kGdnStepMaxLanes); ++i) {
        const GdnMixLane& ln = lanes[i];
        a.lane[i] = GdnStepLane{ln.qkv, ln.z, ln.alpha, ln.beta, ln.conv_state, ln.state, ln.out, ln.T};
    }
    if (!gdn_step_fits(a)) {
        Backend::gdn_mix_lanes(lanes, w, g, eps);
        return;
    }
    op_start();
    launch_gdn_step(a, stream_);
}

void CudaBackend::add(float* y, const float* x, int64_t n) {
    op_start();
    launch_add(y, x, n, stream_);
}

void CudaBackend::argmax(const float* x, int T, int n, int32_t* out, const ArgmaxFeed* feed) {
    op_start();
    DF_CUDA_REQUIRE(!feed || (feed->T >= 1 && feed->tokens && feed->pos), "argmax: incomplete feed");
    launch_argmax(x, T, n, out, argmax_keys_, kArgmaxKeys, stream_, feed ? feed->tokens : nullptr,
                  feed ? feed->pos : nullptr, feed ? feed->T : 0);
}

void CudaBackend::top_logits(const float* x, int n, int k, const int32_t* extra, int n_extra, int32_t* ids, float* vals) {
    op_start();
    DF_CUDA_REQUIRE(!capturing_, "top_logits while a graph is being recorded");
    check_top_logits(n, k, extra, n_extra, kTopLogitsMax);
    const size_t bytes = top_logits_scratch_bytes(n);
    if (bytes > top_scratch_bytes_) {
        release(top_scratch_);
        top_scratch_ = nullptr;  // (alloc may throw)
        top_scratch_ = alloc(bytes, MemKind::scratch);  // zero-filled, as the kernels need
        top_scratch_bytes_ = bytes;
    }
    launch_top_logits(x, n, k, extra, n_extra, ids, vals, top_scratch_, stream_);
}

uint64_t CudaBackend::row_mass(const float* x, int n, float lmax) {
    op_start();
    DF_CUDA_REQUIRE(!capturing_, "row_mass while a graph is being recorded");
    check_row_mass(n);
    if (!mass_sum_) mass_sum_ = static_cast<uint64_t*>(alloc(sizeof(uint64_t), MemKind::scratch));
    launch_row_mass(x, n, lmax, mass_sum_, sm_count_, stream_);
    uint64_t sum = 0;
    DF_CUDA_CHECK(cudaMemcpyAsync(&sum, mass_sum_, sizeof sum, cudaMemcpyDeviceToHost, stream_));
    DF_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return sum;
}

// ---- graphs --------------------------------------------------------------------------------

bool CudaBackend::begin_capture(uint64_t key) {
    op_start();
    DF_CUDA_REQUIRE(!capturing_, "begin_capture while already recording");
    DF_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    trace_mark("capture");
    capturing_ = true;
    capture_key_ = key;
    return true;
}

void CudaBackend::end_capture() {
    op_start();
    DF_CUDA_REQUIRE(capturing_, "end_capture without begin_capture");
    cudaGraph_t graph = nullptr;
    DF_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    trace_mark("end");
    capturing_ = false;
    cudaGraphExec_t exec = nullptr;
    DF_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    DF_CUDA_CHECK(cudaGraphDestroy(graph));
    drop_capture(capture_key_);
    graphs_[capture_key_] = exec;
}

bool CudaBackend::replay(uint64_t key) {
    op_start();
    const auto it = graphs_.find(key);
    if (it == graphs_.end()) return false;
    DF_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
    return true;
}

void CudaBackend::drop_capture(uint64_t key) {
    const auto it = graphs_.find(key);
    if (it == graphs_.end()) return;
    DF_CUDA_CHECK(cudaGraphExecDestroy(it->second));
    graphs_.erase(it);
}

}  // namespace df::cuda

namespace df {

bool cuda_device_available() {
    cuda::load_kernels_eagerly();
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return n > 0;
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
    cuda::load_kernels_eagerly();
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || device < 0 || device >= n) {
        cudaGetLastError();
        throw std::runtime_error("CUDA backend: no CUDA device " + std::to_string(device) + " (" + std::to_string(n) +
                                 " found)");
    }
    return std::make_unique<cuda::CudaBackend>(device);
}

}  // namespace df
