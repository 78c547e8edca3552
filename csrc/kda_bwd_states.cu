// kda_bwd_states.cu: the two sequential passes of the backward (kda_nb.backward's chunk_states and
// chunk_state_adjoint), one block per (sequence, head, slice of state rows) walking that sequence's chunks;
// everything between them (the chunk factors before, the token-parallel adjoint after) runs over all chunks at once.
//
// Chunks sit in step-major rows, as kda_nb.backward lays them out: sequences sorted by chunk count (most
// first), row step_off[i] + n holds chunk i of sorted sequence n, which has chunks[n] chunks. The state is
// [V][K] (S^T of the math), fp32, with the head dimension K = V = 128. Rows of the state never mix (each row's
// update reads only that row), so a block owns a slice of ROWS rows, blockIdx.z, and the grid is (sequence, head,
// slice): eight blocks walk one sequence's chunks side by side. TPR = 8 threads share a pair of rows: thread t
// owns rows ROWS z + t / TPR and ROWS z + t / TPR + PAIRS of the state and the same 16 channels of both, four
// runs of four, 4 (t % TPR) + 32 m + e (m, e < 4), so that the eight threads of a pair read 128 contiguous bytes
// of a tile at once: 32 fp32 registers, for the whole sequence. Every value a thread reads from a chunk's tiles
// serves both of its rows, which halves the shared-memory reads that bound the first version with one row a
// thread (1a3e19f). Per chunk:
//
//   forward  (kda_bwd_states):   Sc = S;  R = V - kd S^T;  U = INVb R;  S <- S diag(decay) + U^T kr
//   backward (kda_bwd_dstates):  dSo = dS;  dU += kr dS^T;  dR = INVb^T dU;
//                                dS <- dS diag(decay) + dP^T qd - dR^T kd
//
// The products with the state are a row of S against a chunk's 16 x 128 tile: each thread forms its share
// of the 16 sums and three shuffles add the row's eight shares. The next chunk's tiles arrive in shared memory
// (cp.async, two buffers) while this chunk's arithmetic runs. Plain fp32 arithmetic, each row's sums in the
// same order as with one row a thread, so the results are the same bits.
#include "kda_common.cuh"
#include "kda_layout.cuh"

namespace kda {
namespace bwd {

constexpr int ROWS = 16;                    // state rows per block (the first version, 84f1080: all 128, one block
                                            // per (sequence, head), too few blocks to fill the GPU)
constexpr int SLICES = D / ROWS;            // blocks per (sequence, head)
constexpr int RPT = 2;                      // state rows per thread (1a3e19f: one)
constexpr int PAIRS = ROWS / RPT;           // a thread's rows are PAIRS apart
constexpr int TPR = 8;                      // threads per pair of rows
constexpr int THREADS = TPR * PAIRS;
constexpr int HALF = D / TPR;               // channels per thread (four runs of four)
constexpr int TILE = CHUNK * D;             // floats in one [CHUNK][D] tile
constexpr int SMALL = CHUNK * CHUNK;        // floats in INVb

using kda::StatesArgs;
using kda::DStatesArgs;

// copy `floats` floats (a multiple of 4, 16-byte aligned) global -> shared, all threads taking part
__device__ __forceinline__ void copy_tile(float* dst, const float* src, int floats) {
    for (int i = 4 * threadIdx.x; i < floats; i += 4 * THREADS) cp_async16(dst + i, src + i);
}

__device__ __forceinline__ void store_row(void* base, bool bf16, int64_t off, const float (&x)[HALF]) {
#pragma unroll
    for (int m = 0; m < HALF / 4; ++m) {
        if (bf16) {
            uint2 w;
            w.x = pack_bf16(x[4 * m], x[4 * m + 1]);
            w.y = pack_bf16(x[4 * m + 2], x[4 * m + 3]);
            *reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(base) + off + 32 * m) = w;
        } else {
            *reinterpret_cast<float4*>(static_cast<float*>(base) + off + 32 * m) =
                make_float4(x[4 * m], x[4 * m + 1], x[4 * m + 2], x[4 * m + 3]);
        }
    }
}

// sum over this thread's channels of tile[c][.] * x[r], for every row c and each of the thread's rows r; then
// each row's other shares added
__device__ __forceinline__ void row_products(const float* tile, int k0, const float (&x)[RPT][HALF],
                                             float (&out)[RPT][CHUNK]) {
#pragma unroll
    for (int c = 0; c < CHUNK; ++c) {
        float acc[RPT];
#pragma unroll
        for (int r = 0; r < RPT; ++r) acc[r] = 0.f;
#pragma unroll
        for (int m = 0; m < HALF / 4; ++m) {
            const float4 w = *reinterpret_cast<const float4*>(tile + c * D + k0 + 32 * m);
#pragma unroll
            for (int r = 0; r < RPT; ++r) {
                acc[r] = fmaf(w.x, x[r][4 * m], acc[r]); acc[r] = fmaf(w.y, x[r][4 * m + 1], acc[r]);
                acc[r] = fmaf(w.z, x[r][4 * m + 2], acc[r]); acc[r] = fmaf(w.w, x[r][4 * m + 3], acc[r]);
            }
        }
#pragma unroll
        for (int r = 0; r < RPT; ++r) {
#pragma unroll
            for (int o = 1; o < TPR; o <<= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
            out[r][c] = acc[r];
        }
    }
}

// S[r][j] <- S[r][j] decay + sum_c a[r][c] tile_a[c][.] (+ sum_c b[r][c] tile_b[c][.]), over this thread's
// channels, for each of its rows r
template <bool TWO>
__device__ __forceinline__ void update_rows(float (&S)[RPT][HALF], const float* decay, int k0, const float* ta,
                                            const float (&a)[RPT][CHUNK], const float* tb, const float (&b)[RPT][CHUNK]) {
#pragma unroll
    for (int m = 0; m < HALF / 4; ++m) {
        const float4 d = *reinterpret_cast<const float4*>(decay + k0 + 32 * m);
        float4 acc[RPT];
#pragma unroll
        for (int r = 0; r < RPT; ++r)
            acc[r] = make_float4(S[r][4 * m] * d.x, S[r][4 * m + 1] * d.y, S[r][4 * m + 2] * d.z, S[r][4 * m + 3] * d.w);
#pragma unroll
        for (int c = 0; c < CHUNK; ++c) {
            const float4 w = *reinterpret_cast<const float4*>(ta + c * D + k0 + 32 * m);
            float4 u;
            if constexpr (TWO) u = *reinterpret_cast<const float4*>(tb + c * D + k0 + 32 * m);
#pragma unroll
            for (int r = 0; r < RPT; ++r) {
                acc[r].x = fmaf(a[r][c], w.x, acc[r].x); acc[r].y = fmaf(a[r][c], w.y, acc[r].y);
                acc[r].z = fmaf(a[r][c], w.z, acc[r].z); acc[r].w = fmaf(a[r][c], w.w, acc[r].w);
                if constexpr (TWO) {
                    acc[r].x = fmaf(b[r][c], u.x, acc[r].x); acc[r].y = fmaf(b[r][c], u.y, acc[r].y);
                    acc[r].z = fmaf(b[r][c], u.z, acc[r].z); acc[r].w = fmaf(b[r][c], u.w, acc[r].w);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < RPT; ++r) {
            S[r][4 * m] = acc[r].x; S[r][4 * m + 1] = acc[r].y; S[r][4 * m + 2] = acc[r].z; S[r][4 * m + 3] = acc[r].w;
        }
    }
}

// y = INVb x (or INVb^T x, TRANS) for the 16 values x every thread of a row holds: thread `part` of the row
// makes y[2 part] and y[2 part + 1], and shuffles hand every thread all 16
template <bool TRANS>
__device__ __forceinline__ void small_product(const float* invb, const float (&x)[CHUNK], float (&y)[CHUNK], int part) {
    float y0 = 0.f, y1 = 0.f;
    if constexpr (TRANS) {
#pragma unroll
        for (int e = 0; e < CHUNK; ++e) {
            const float2 w = *reinterpret_cast<const float2*>(invb + e * CHUNK + 2 * part);   // INVb[e][2 part ..]
            y0 = fmaf(w.x, x[e], y0);
            y1 = fmaf(w.y, x[e], y1);
        }
    } else {
#pragma unroll
        for (int e = 0; e < CHUNK; e += 4) {
            const float4 w0 = *reinterpret_cast<const float4*>(invb + 2 * part * CHUNK + e);
            const float4 w1 = *reinterpret_cast<const float4*>(invb + (2 * part + 1) * CHUNK + e);
            y0 = fmaf(w0.x, x[e], fmaf(w0.y, x[e + 1], fmaf(w0.z, x[e + 2], fmaf(w0.w, x[e + 3], y0))));
            y1 = fmaf(w1.x, x[e], fmaf(w1.y, x[e + 1], fmaf(w1.z, x[e + 2], fmaf(w1.w, x[e + 3], y1))));
        }
    }
    const int row0 = (threadIdx.x & 31) & ~(TPR - 1);                  // lane of the row's part 0
#pragma unroll
    for (int c = 0; c < CHUNK; ++c) y[c] = __shfl_sync(0xffffffffu, c & 1 ? y1 : y0, row0 + c / 2);
}

// shared memory of one buffer: the chunk's tiles, in this order; X and Y hold the block's slice of the
// tiles it reads by state row (V, or dP and dU), [CHUNK][ROWS]
struct Buf {
    static constexpr int A = 0, B = TILE, C = 2 * TILE, INVB = 3 * TILE, DECAY = 3 * TILE + SMALL;
    static constexpr int X = DECAY + D, Y = X + CHUNK * ROWS;
    static constexpr int FLOATS = Y + CHUNK * ROWS;
};

// columns ROWS z .. ROWS z + ROWS - 1 of a [CHUNK][D] tile, global -> shared [CHUNK][ROWS]
__device__ __forceinline__ void copy_slice(float* dst, const float* src) {
    for (int e = threadIdx.x; e < CHUNK * ROWS / 4; e += THREADS) {
        const int c = e / (ROWS / 4), q = e % (ROWS / 4);
        cp_async16(dst + c * ROWS + 4 * q, src + c * D + ROWS * blockIdx.z + 4 * q);
    }
}

// the first index of thread's rows into a block's [CHUNK][ROWS] slice, and their state rows
__device__ __forceinline__ int slice_row(int r) { return threadIdx.x / TPR + PAIRS * r; }
__device__ __forceinline__ int state_row(int r) { return ROWS * blockIdx.z + slice_row(r); }

// §states: the forward's loop again, keeping each chunk's entering state, R and U
__global__ void __launch_bounds__(THREADS) kda_bwd_states(StatesArgs p) {
    extern __shared__ __align__(16) float smem[];
    const int n = blockIdx.x, h = blockIdx.y;
    const int part = threadIdx.x % TPR, k0 = 4 * part;
    const int H = p.heads, nch = p.chunks[n];
    float S[RPT][HALF];
    const int64_t s_base = (static_cast<int64_t>(n) * H + h) * D * D + k0;
#pragma unroll
    for (int r = 0; r < RPT; ++r)
#pragma unroll
        for (int j = 0; j < HALF; ++j) S[r][j] = p.s0[s_base + state_row(r) * D + 32 * (j / 4) + j % 4];
    auto load = [&](int i, float* buf) {
        const int64_t rh = (p.step_off[i] + n) * H + h;                // (row, head)
        copy_tile(buf + Buf::A, p.kd + rh * TILE, TILE);
        copy_tile(buf + Buf::B, p.kr + rh * TILE, TILE);
        copy_slice(buf + Buf::X, p.v + rh * TILE);
        copy_tile(buf + Buf::INVB, p.invb + rh * SMALL, SMALL);
        copy_tile(buf + Buf::DECAY, p.decay + rh * D, D);
        cp_async_commit();
    };
    if (nch > 0) load(0, smem);
    for (int i = 0; i < nch; ++i) {
        float* buf = smem + (i & 1) * Buf::FLOATS;
        if (i + 1 < nch) { load(i + 1, smem + ((i + 1) & 1) * Buf::FLOATS); cp_async_wait<1>(); }
        else cp_async_wait<0>();
        __syncthreads();
        const int64_t rh = (p.step_off[i] + n) * H + h;
#pragma unroll
        for (int r = 0; r < RPT; ++r)                                  // the state entering chunk i
            store_row(p.sc, p.sc_bf16, (rh * D + state_row(r)) * D + k0, S[r]);
        float R[RPT][CHUNK], U[RPT][CHUNK];
        row_products(buf + Buf::A, k0, S, R);                          // (kd S^T)[c][v]
#pragma unroll
        for (int r = 0; r < RPT; ++r) {
#pragma unroll
            for (int c = 0; c < CHUNK; ++c) R[r][c] = buf[Buf::X + c * ROWS + slice_row(r)] - R[r][c];
            small_product<false>(buf + Buf::INVB, R[r], U[r], part);    // U = INVb R
        }
#pragma unroll
        for (int r = 0; r < RPT; ++r) {                                // part 2r writes row r's R, part 2r + 1 its U
            if (part == 2 * r || part == 2 * r + 1) {
                float* out = part & 1 ? p.u : p.r;
#pragma unroll
                for (int c = 0; c < CHUNK; ++c) out[rh * TILE + c * D + state_row(r)] = part & 1 ? U[r][c] : R[r][c];
            }
        }
        update_rows<false>(S, buf + Buf::DECAY, k0, buf + Buf::B, U, nullptr, U);
        __syncthreads();                                               // buf is refilled two chunks on
    }
}

// §dstates: the loop backwards, dS from the last chunk to the first
__global__ void __launch_bounds__(THREADS) kda_bwd_dstates(DStatesArgs p) {
    extern __shared__ __align__(16) float smem[];
    const int n = blockIdx.x, h = blockIdx.y;
    const int part = threadIdx.x % TPR, k0 = 4 * part;
    const int H = p.heads, nch = p.chunks[n];
    float dS[RPT][HALF];
    const int64_t s_base = (static_cast<int64_t>(n) * H + h) * D * D + k0;
#pragma unroll
    for (int r = 0; r < RPT; ++r)
#pragma unroll
        for (int j = 0; j < HALF; ++j) dS[r][j] = p.ds_final[s_base + state_row(r) * D + 32 * (j / 4) + j % 4];
    // buffer: A = qd, B = kd, C = kr, then INVb and decay, X = dP and Y = dU (the outputs' share) of the slice
    auto load = [&](int i, float* buf) {
        const int64_t rh = (p.step_off[i] + n) * H + h;
        copy_tile(buf + Buf::A, p.qd + rh * TILE, TILE);
        copy_tile(buf + Buf::B, p.kd + rh * TILE, TILE);
        copy_tile(buf + Buf::C, p.kr + rh * TILE, TILE);
        copy_tile(buf + Buf::INVB, p.invb + rh * SMALL, SMALL);
        copy_tile(buf + Buf::DECAY, p.decay + rh * D, D);
        copy_slice(buf + Buf::X, p.dp + rh * TILE);
        copy_slice(buf + Buf::Y, p.du + rh * TILE);
        cp_async_commit();
    };
    if (nch > 0) load(nch - 1, smem + ((nch - 1) & 1) * Buf::FLOATS);
    for (int i = nch - 1; i >= 0; --i) {
        float* buf = smem + (i & 1) * Buf::FLOATS;
        if (i > 0) { load(i - 1, smem + ((i - 1) & 1) * Buf::FLOATS); cp_async_wait<1>(); }
        else cp_async_wait<0>();
        __syncthreads();
        const int64_t rh = (p.step_off[i] + n) * H + h;
#pragma unroll
        for (int r = 0; r < RPT; ++r)                                  // dS leaving chunk i
            store_row(p.dso, p.sc_bf16, (rh * D + state_row(r)) * D + k0, dS[r]);
        float dU[RPT][CHUNK], dR[RPT][CHUNK], dP[RPT][CHUNK];
        row_products(buf + Buf::C, k0, dS, dU);                        // (kr dS^T)[c][v]
#pragma unroll
        for (int r = 0; r < RPT; ++r) {
#pragma unroll
            for (int c = 0; c < CHUNK; ++c) {
                dU[r][c] += buf[Buf::Y + c * ROWS + slice_row(r)];
                dP[r][c] = buf[Buf::X + c * ROWS + slice_row(r)];
            }
            small_product<true>(buf + Buf::INVB, dU[r], dR[r], part);   // dR = INVb^T dU
        }
#pragma unroll
        for (int r = 0; r < RPT; ++r) {                                // part 2r writes row r's dU, part 2r + 1 its dR
            if (part == 2 * r || part == 2 * r + 1) {
                float* out = part & 1 ? p.dr : p.du;
#pragma unroll
                for (int c = 0; c < CHUNK; ++c) out[rh * TILE + c * D + state_row(r)] = part & 1 ? dR[r][c] : dU[r][c];
            }
#pragma unroll
            for (int c = 0; c < CHUNK; ++c) dR[r][c] = -dR[r][c];
        }
        update_rows<true>(dS, buf + Buf::DECAY, k0, buf + Buf::A, dP, buf + Buf::B, dR);   // + dP^T qd - dR^T kd
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
        float* out = p.ds0 + s_base + state_row(r) * D;
#pragma unroll
        for (int m = 0; m < HALF / 4; ++m)
            *reinterpret_cast<float4*>(out + 32 * m) =
                make_float4(dS[r][4 * m], dS[r][4 * m + 1], dS[r][4 * m + 2], dS[r][4 * m + 3]);
    }
}

}  // namespace bwd

constexpr size_t BWD_SMEM = 2 * bwd::Buf::FLOATS * sizeof(float);

cudaError_t launch_bwd_states(const StatesArgs& a, cudaStream_t stream) {
    if (a.n_seq == 0 || a.heads == 0) return cudaSuccess;
    cudaError_t err = cudaFuncSetAttribute(bwd::kda_bwd_states, cudaFuncAttributeMaxDynamicSharedMemorySize, BWD_SMEM);
    if (err != cudaSuccess) return err;
    bwd::kda_bwd_states<<<dim3(a.n_seq, a.heads, bwd::SLICES), bwd::THREADS, BWD_SMEM, stream>>>(a);
    return cudaGetLastError();
}
cudaError_t launch_bwd_dstates(const DStatesArgs& a, cudaStream_t stream) {
    if (a.n_seq == 0 || a.heads == 0) return cudaSuccess;
    cudaError_t err = cudaFuncSetAttribute(bwd::kda_bwd_dstates, cudaFuncAttributeMaxDynamicSharedMemorySize, BWD_SMEM);
    if (err != cudaSuccess) return err;
    bwd::kda_bwd_dstates<<<dim3(a.n_seq, a.heads, bwd::SLICES), bwd::THREADS, BWD_SMEM, stream>>>(a);
    return cudaGetLastError();
}

}  // namespace kda
