// kda_entry_scan.cu: the chain of entry states of a sequence cut into segments (kda_nb.segments.entry_states), in one
// launch. Segment p of a sequence has a transition M_p [K, K] and a state from zero X_p [V, K] (fp32); the state
// entering its first segment is the sequence's initial state, and each next one is
//   E_{p+1} = E_p M_p + X_p          (the state's layout is [V, K]: rows are value channels v).
// Row v of E_{p+1} needs row v of E_p only (E_{p+1}[v, :] = E_p[v, :] M_p + X_p[v, :]), so the rows are independent
// chains over the same maps: one block per (sequence n, value head h, slice of ROWS rows) walks its sequence's
// segments in order, carrying its rows of E in shared memory, and writes E_p for every segment p. Its cost is S steps
// of ROWS x K x K fused multiply-adds, S the sequence's segments; the blocks of all sequences, heads and slices run
// side by side.
//
// The segments: grid [S, N] int64, grid[p, n] the row of P (the segment tensors' first axis) of sequence n's segment
// p; a value outside [0, P) (P itself is the padding row past a sequence's last segment) ends that sequence there:
// nothing is read or written for it or any later p. So no value of the table sends an access outside the tensors.
//
// A step, for the block's rows, with 16 ROWS threads: 64 column threads x ROWS / 4 row groups, thread (group g,
// column thread c) owning rows 4g .. 4g + 3 and columns 2c, 2c + 1 of E (K <= 128: every element has one owner):
//   - M_p is in shared memory already (fp32, K x K, row stride KP = K rounded up to 4): it was copied with cp.async
//     during the step before, into the other of two buffers (2 x 64 KB at K = 128);
//   - each thread sums E_p[v, i] M_p[i, j] over i in order (plain fp32 FMAs): E_p's rows from shared memory as float4
//     (the same address across a warp: a broadcast), M_p's row i as float2 (a warp's 32 column threads read 256
//     contiguous bytes); its X_p elements, loaded from global memory before the sum, are added after it, so that
//     their latency hides behind it;
//   - after a barrier the sums plus X_p become the block's E_{p+1} in shared memory, and are written to E at the
//     next segment's row. The copy of M_{p+1} is only issued where segment p + 2 exists (M of a sequence's last
//     segment is never needed); the grid's values are read a step before they are needed.
// Nothing is read back to the host, so the launch can be captured in a CUDA graph. fp32 throughout: the result is
// the chain's fp32 product, in the order of the recurrence (no reassociation across segments, unlike a scan).
#include "kda_common.cuh"
#include "kda_launch.h"
#include "kda_layout.cuh"

namespace kda {
namespace scan {

constexpr int COL_THREADS = 64;       // column threads of a row group: two columns each, 128 in all
constexpr int ROWS_PER_THREAD = 4;    // rows of E a thread owns

template <int ROWS> constexpr int threads() { return COL_THREADS * ROWS / ROWS_PER_THREAD; }
__host__ __device__ __forceinline__ int padded(int K) { return (K + 3) & ~3; }
// shared memory of a block: two buffers of M (KP x KP) and its rows of E (ROWS x KP), fp32
inline size_t smem_bytes(int rows, int K) {
    const size_t kp = static_cast<size_t>(padded(K));
    return (2 * kp * kp + static_cast<size_t>(rows) * kp) * sizeof(float);
}

__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: "r"(smem_addr(smem)), "l"(gmem));
}

// §copy: M of one (segment row, head) into a buffer of KP x KP floats, as cp.async copies (committed by the caller).
// K a multiple of 4: KP = K, the matrix is one contiguous run of 16-byte pieces; else 4-byte pieces, row by row.
template <int NT>
__device__ __forceinline__ void copy_map(float* buf, const float* M, int K, int KP) {
    if (K == KP) {
        const int pieces = K * K / 4;
        for (int i = threadIdx.x; i < pieces; i += NT) cp_async16(buf + 4 * i, M + 4 * i);
    } else {
        for (int e = threadIdx.x; e < K * K; e += NT) cp_async4(buf + (e / K) * KP + e % K, M + e);
    }
}

// the grid's row of sequence n's segment p, or -1 past its end (p >= S, or a value outside [0, P))
__device__ __forceinline__ int64_t segment_row(const ScanArgs& a, int64_t p, int64_t n) {
    if (p >= a.S) return -1;
    const int64_t r = __ldg(a.grid + p * a.N + n);
    return r >= 0 && r < a.P ? r : -1;
}

// §kernel
template <int ROWS>
__global__ void __launch_bounds__(threads<ROWS>()) kda_entry_scan(ScanArgs a) {
    constexpr int NT = threads<ROWS>();
    extern __shared__ __align__(16) float scan_smem[];
    const int K = a.K, V = a.V, HV = a.HV, KP = padded(K);
    auto Mbuf = [&](int64_t p) { return scan_smem + (p & 1) * KP * KP; };   // the two buffers of M
    float* Es = scan_smem + 2 * KP * KP;                         // [ROWS][KP]: the block's rows of E

    const int slices = (V + ROWS - 1) / ROWS;
    const int64_t b = blockIdx.x;
    const int slice = static_cast<int>(b % slices), h = static_cast<int>((b / slices) % HV);
    const int64_t n = b / (static_cast<int64_t>(slices) * HV);
    const int c0 = 2 * (threadIdx.x % COL_THREADS), g = threadIdx.x / COL_THREADS;
    const int v0 = slice * ROWS + g * ROWS_PER_THREAD;           // this thread's first row of the state
    const bool pair = (K & 1) == 0;                              // K even: a thread's two columns as one float2
    const int64_t kk = static_cast<int64_t>(K) * K, vk = static_cast<int64_t>(V) * K;

    // the rows of segments p, p + 1 and p + 2 (-1: the sequence has ended), each read a step before it is needed
    int64_t r = segment_row(a, 0, n);
    if (r < 0) return;                                           // (the whole block alike: no barrier yet)
    int64_t rn = segment_row(a, 1, n);
    int64_t rnn = rn >= 0 ? segment_row(a, 2, n) : -1;

    // an element (v, j) of a [.., HV, V, K] tensor at first-axis row `row`, in range or zero
    auto load2 = [&](const float* t, int64_t row, int v, float& x0, float& x1) {
        x0 = x1 = 0.f;
        if (v >= V || c0 >= K) return;
        const float* p = t + (row * HV + h) * vk + static_cast<int64_t>(v) * K + c0;
        if (pair) { const float2 x = *reinterpret_cast<const float2*>(p); x0 = x.x; x1 = x.y; }
        else { x0 = p[0]; if (c0 + 1 < K) x1 = p[1]; }
    };
    auto store2 = [&](int64_t row, int v, float x0, float x1) {
        if (v >= V || c0 >= K) return;
        float* p = a.E + (row * HV + h) * vk + static_cast<int64_t>(v) * K + c0;
        if (pair) *reinterpret_cast<float2*>(p) = make_float2(x0, x1);
        else { p[0] = x0; if (c0 + 1 < K) p[1] = x1; }
    };

    if (KP != K) {                                               // the padding of M's rows and columns and E's: zeros
        for (int i = threadIdx.x; i < 2 * KP * KP + ROWS * KP; i += NT) scan_smem[i] = 0.f;
        __syncthreads();
    }
    float cur[ROWS_PER_THREAD][2];                               // this thread's elements of E_p
#pragma unroll
    for (int q = 0; q < ROWS_PER_THREAD; ++q) {
        load2(a.initial, n, v0 + q, cur[q][0], cur[q][1]);
        if (c0 < KP) *reinterpret_cast<float2*>(Es + (g * ROWS_PER_THREAD + q) * KP + c0) = make_float2(cur[q][0], cur[q][1]);
    }
    if (rn >= 0) {
        copy_map<NT>(Mbuf(0), a.M + (r * HV + h) * kk, K, KP);
        cp_async_commit();
    }
    for (int64_t p = 0;; ++p) {
        // §step: E_p out at its segment's row; then E_{p+1} = E_p M_p + X_p where segment p + 1 exists
#pragma unroll
        for (int q = 0; q < ROWS_PER_THREAD; ++q) store2(r, v0 + q, cur[q][0], cur[q][1]);
        if (rn < 0) break;
        const int64_t r3 = rnn >= 0 ? segment_row(a, p + 3, n) : -1;
        if (rnn >= 0) {                                          // M_{p+1} on its way while this step runs
            copy_map<NT>(Mbuf(p + 1), a.M + (rn * HV + h) * kk, K, KP);
            cp_async_commit();
        }
        float x[ROWS_PER_THREAD][2], acc[ROWS_PER_THREAD][2];     // X_p's loads land while the products run
#pragma unroll
        for (int q = 0; q < ROWS_PER_THREAD; ++q) {
            load2(a.X, r, v0 + q, x[q][0], x[q][1]);
            acc[q][0] = acc[q][1] = 0.f;
        }
        if (rnn >= 0) cp_async_wait<1>(); else cp_async_wait<0>();
        __syncthreads();                                         // M_p landed for every thread; E_p in Es
        if (c0 < K) {
            const float* Mp = Mbuf(p) + c0;
            const float* Er = Es + g * ROWS_PER_THREAD * KP;
#pragma unroll 2
            for (int i = 0; i < KP; i += 4) {
                float4 e[ROWS_PER_THREAD];
#pragma unroll
                for (int q = 0; q < ROWS_PER_THREAD; ++q) e[q] = lds4(Er + q * KP + i);
                float2 m[4];
#pragma unroll
                for (int u = 0; u < 4; ++u) m[u] = *reinterpret_cast<const float2*>(Mp + (i + u) * KP);
#pragma unroll
                for (int q = 0; q < ROWS_PER_THREAD; ++q) {
                    const float ev[4] = {e[q].x, e[q].y, e[q].z, e[q].w};
#pragma unroll
                    for (int u = 0; u < 4; ++u) {
                        acc[q][0] = fmaf(ev[u], m[u].x, acc[q][0]);
                        acc[q][1] = fmaf(ev[u], m[u].y, acc[q][1]);
                    }
                }
            }
        }
        __syncthreads();                                         // every thread done with E_p and this buffer of M
#pragma unroll
        for (int q = 0; q < ROWS_PER_THREAD; ++q) {
            cur[q][0] = acc[q][0] + x[q][0]; cur[q][1] = acc[q][1] + x[q][1];      // E_p M_p + X_p
            if (c0 < KP) *reinterpret_cast<float2*>(Es + (g * ROWS_PER_THREAD + q) * KP + c0) = make_float2(cur[q][0], cur[q][1]);
        }
        r = rn; rn = rnn; rnn = r3;
    }
}

}  // namespace scan

// Whether each instance's shared-memory attribute (its most: K = 128) is set, per device: a variable of the file, not
// a static inside the launcher's lambda (kda_fwd_recurrence.cu says why), so that a launch made under CUDA-graph
// capture, after one made before it, calls nothing but the launch.
namespace { bool scan_attribute_set[3][MAX_DEVICES] = {}; }

// §launch: ScanArgs::rows (8, 16 or 32) picks the instance; kda_nb.segments chooses it from the blocks and the SMs
cudaError_t launch_entry_scan(const ScanArgs& a, cudaStream_t stream) {
    if (a.N == 0 || a.S == 0 || a.HV == 0 || a.V == 0) return cudaSuccess;
    if (a.K < 1 || a.K > 128 || a.V > 128) return cudaErrorInvalidValue;
    int device = 0;
    const cudaError_t dev_err = current_device(device);
    if (dev_err != cudaSuccess) return dev_err;
    return dispatch<8, 16, 32>(a.rows, [&](auto rows) {
        constexpr int ROWS = decltype(rows)::value;
        void (*kernel)(ScanArgs) = scan::kda_entry_scan<ROWS>;
        bool& ready = scan_attribute_set[ROWS == 8 ? 0 : ROWS == 16 ? 1 : 2][device];
        if (!ready) {
            const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                         static_cast<int>(scan::smem_bytes(ROWS, 128)));
            if (err != cudaSuccess) return err;
            ready = true;
        }
        const int64_t blocks = a.N * a.HV * ((a.V + ROWS - 1) / ROWS);
        if (blocks > INT32_MAX) return cudaErrorInvalidValue;
        kernel<<<static_cast<unsigned>(blocks), scan::threads<ROWS>(), scan::smem_bytes(ROWS, a.K), stream>>>(a);
        return cudaGetLastError();
    });
}

}  // namespace kda
