// kda_fwd_recurrence.cu: K2 "recurrence". The chunk loop of kda_recurrence.cuh, each chunk's record read
// back from the workspace K1 (kda_fwd_prepare.cu) left, by one bulk copy per chunk into a pipeline stage.
// One block per (sequence, head, slice of 16 * K2_WARPS state rows).
#include "kda_common.cuh"
#include "kda_launch.h"
#include "kda_layout.cuh"
#include "kda_recurrence.cuh"

namespace kda {

// The configurations: K2_WARPS warps (16 * K2_WARPS state rows) per block, 3 or 4 stages. Wider blocks
// read each record fewer times; narrower ones put more SMs to work. On the H200 (T = 8192, H = 64 and 96;
// fixed, six lengths, 1024 x 8) 4 warps were fastest or within 1% of 2 and 8 in every case, so K2 runs 4.
// Four stages (3 blocks per SM) suit a grid that fits on the GPU at once, and a step of a pipeline
// (kda_binding.cpp); three stages (4 blocks per SM, fewer chunks in flight each) suit one of more than
// K2_WAVES_FOR_3_STAGES such waves, where more resident blocks keep the schedulers busier: kernels notebook.
constexpr int K2_WARPS = 4;
constexpr int K2_STAGES = 4;               // a grid that fits on the GPU at once, or a pipeline step
constexpr int K2_STAGES_MANY_WAVES = 3;    // a grid of more than K2_WAVES_FOR_3_STAGES waves
constexpr int K2_WAVES_FOR_3_STAGES = 2;   // waves of 3 blocks per SM (the 4-stage residency)

// Blocks per SM the registers must allow: 3 blocks of 4 warps with 4 stages (shared memory allows no
// more), 4 with 3 stages (at most 128 registers).
template <int WARPS, int NSTAGE> constexpr int k2_min_blocks() { return (NSTAGE <= 3 ? 16 : 12) / WARPS; }

// CKPT: the instance that stores the checkpoints of FwdArgs::ckpt_offsets (kda_recurrence.cuh); without a table the
// one without them runs. DIMS: the head dims of FwdArgs::dim_k, dim_v (kda_recurrence.cuh §dims); without it
// K = V = 128. IN: the inputs' element type (of v and the outputs; the records are the same for both). STATES: the
// states only, no outputs (FwdArgs::states_only; K = V = 128, no checkpoints; kda_recurrence.cuh §states)
template <int WARPS, int NSTAGE, bool CKPT, bool DIMS, int IN, bool STATES = false>
__global__ void __launch_bounds__(32 * WARPS, k2_min_blocks<WARPS, NSTAGE>()) kda_fwd_recurrence(FwdArgs p) {
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ __align__(8) uint64_t full[NSTAGE];      // full[s]: stage s's record has landed
    __shared__ __align__(8) uint64_t empty[NSTAGE];     // empty[s]: every warp is done with stage s
    recurrence_block<WARPS, NSTAGE, 0, NoPrepare, CKPT, DIMS, IN, STATES>(p, smem, full, empty);
}

// Whether the shared-memory attribute of each configuration's kernel is set, per device. A variable of the file
// (internal linkage), not a static inside launch_recurrence_with: a template's static local is one object per
// process, which two builds of these kernels loaded side by side (a before/after comparison) would share, so the
// second build's kernel would go without its attribute and fail to launch ("invalid argument").
namespace { bool k2_attribute_set[2][2][2][2][2][MAX_DEVICES] = {}; }

template <int NSTAGE, bool CKPT, bool DIMS, int IN, bool STATES = false>
cudaError_t launch_recurrence_with(const FwdArgs& a, int device, cudaStream_t stream) {
    using Ly = K2Layout<K2_WARPS>;
    constexpr int smem = NSTAGE * Ly::STAGE + Ly::OUT_BYTES;
    void (*kernel)(FwdArgs) = kda_fwd_recurrence<K2_WARPS, NSTAGE, CKPT, DIMS, IN, STATES>;
    bool& ready = k2_attribute_set[STATES][DIMS][IN][CKPT][NSTAGE == K2_STAGES ? 0 : 1][device];
    if (!ready) {
        cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (err != cudaSuccess) return err;
        ready = true;
    }
    const int ys = a.n_seq < K2_MAX_GRID_Y ? a.n_seq : K2_MAX_GRID_Y;
    // the row slices that hold rows < V (all D / VB of them without DIMS): V = 64 launches half the blocks of V = 128
    // (§paired: twice them, the second half the transitions)
    const int slices = (DIMS ? (a.dim_v + Ly::VB - 1) / Ly::VB : D / Ly::VB) * (STATES && a.transitions_out ? 2 : 1);
    const dim3 grid(a.H * slices, ys, (a.n_seq + K2_MAX_GRID_Y - 1) / K2_MAX_GRID_Y);
    kernel<<<grid, Ly::THREADS, smem, stream>>>(a);
    return cudaGetLastError();
}

// K2 in the plan's number of stages (kda_nb.plan: FwdPlan::k2_stages); a table of checkpoints picks the instance
// that stores them, the inputs' type its own instances (kda_switch.h: dispatch_input), and head dims other than
// K = V = 128 the instances with DIMS (kda_switch.h §dims); the states only (K = V = 128, no checkpoints) those with STATES
cudaError_t launch_recurrence(const FwdArgs& a, int stages, cudaStream_t stream) {
    if (a.n_seq == 0) return cudaSuccess;
    if (!dims_valid(a.dim_k, a.dim_v)) return cudaErrorInvalidValue;
    const bool has_ckpt = a.ckpt_offsets != nullptr && a.ckpt_slots != nullptr && a.ckpt_count > 0;
    if ((a.states_only && (has_ckpt || native_dims(a.dim_k, a.dim_v))) || (a.zero_values && !a.states_only) ||
        (a.transitions_out && (!a.states_only || a.zero_values || a.chunk_lo != 0 || a.chunk_hi != INT64_MAX)))
        return cudaErrorInvalidValue;
    int device = 0;
    const cudaError_t err = current_device(device);
    if (err != cudaSuccess) return err;
    if (a.states_only)
        return dispatch_input(a.input_kind, [&](auto in) {
            return dispatch<K2_STAGES_MANY_WAVES, K2_STAGES>(stages, [&](auto n) {
                return launch_recurrence_with<decltype(n)::value, false, false, decltype(in)::value, true>(a, device, stream);
            });
        });
    return dispatch_input(a.input_kind, [&](auto in) {
        return dispatch_bool(has_ckpt, [&](auto ckpt) {
            return dispatch_bool(native_dims(a.dim_k, a.dim_v), [&](auto dims) {
                return dispatch<K2_STAGES_MANY_WAVES, K2_STAGES>(stages, [&](auto n) {
                    return launch_recurrence_with<decltype(n)::value, decltype(ckpt)::value, decltype(dims)::value,
                                                  decltype(in)::value>(a, device, stream);
                });
            });
        });
    });
}

}  // namespace kda
