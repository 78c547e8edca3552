// kda_pipeline.h: K1 and K2 over a batch in steps of consecutive chunks (the binding's kda_forward, path 'chunked').
// step_edge needs no CUDA: kda_nb.plan.step_edges is the same rule in Python, and the plan notebook's tests compile
// this header with the host compiler alone and compare the two.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kda_launch.h"

namespace kda {
namespace {    // internal linkage: two builds of the binding loaded side by side share none of this (no shared statics)

// §pipeline: K2 runs each sequence's chunks one after another, so a batch of one long sequence gives it few blocks
// (192 at H = 96: two per head) and leaves most of the GPU idle while it runs. Such a batch can be cut into steps of
// consecutive chunks: K1 prepares step s + 1 on the caller's stream while K2 runs step s on a second stream of higher
// priority, and the state passes from one step to the next in fp32 (the carry), so the results are bitwise those of
// one step. Which batches take it, in how many steps, how much each step grows, K1's grid and K2's stages are the
// plan's (kda_nb.plan.Plan, handed over as kda::FwdPlan); how the chunks are cut into the steps is step_edge's.
constexpr int MAX_STEPS = 8;               // the most steps a call may take (kda_nb.plan.MAX_PIPELINE_STEPS)

// §edges: step s of `steps` covers the chunks [step_edge(s), step_edge(s + 1)) of the batch's `chunks`: each step
// `growth` times as long as the one before (1: equal steps), so that the first, whose K1 runs alone while K2 waits
// for it, is short; every step at least one chunk.
int64_t step_edge(int64_t s, int64_t steps, int64_t chunks, double growth) {
    if (s <= 0) return 0;
    if (s >= steps) return chunks;
    const double w = growth == 1.0 ? double(s) / double(steps) : (std::pow(growth, double(s)) - 1.0) / (std::pow(growth, double(steps)) - 1.0);
    const int64_t edge = static_cast<int64_t>(std::llround(w * double(chunks)));
    return std::max<int64_t>(s, std::min<int64_t>(chunks - (steps - s), edge));   // at least one chunk a step
}

struct SideStream {                        // per thread and device: the second stream and the events that join it
    cudaStream_t stream = nullptr;
    cudaEvent_t ready[MAX_STEPS + 1] = {};
};

cudaError_t side_stream(SideStream*& out) {
    thread_local SideStream sides[MAX_DEVICES];
    int device = 0;
    const cudaError_t found = current_device(device);
    if (found != cudaSuccess) return found;
    SideStream& s = sides[device];
    if (!s.stream) {
        int least = 0, greatest = 0;
        cudaError_t err = cudaDeviceGetStreamPriorityRange(&least, &greatest);
        if (err == cudaSuccess) err = cudaStreamCreateWithPriority(&s.stream, cudaStreamNonBlocking, greatest);
        for (auto& e : s.ready)
            if (err == cudaSuccess) err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
        if (err != cudaSuccess) { s.stream = nullptr; return err; }
    }
    out = &s;
    return cudaSuccess;
}

// §steps: K1 and K2 over the whole batch on `stream`, as plan `p` says: in p.steps steps (K2 on the side stream, joined
// back to `stream` after the last), each p.growth times the one before; K1's grid and K2's stages as p says.
// `carry` holds two [H, 128, 128] fp32 states when p.steps > 1 (step s reads the one step s - 1 wrote).
cudaError_t launch_chunked(const FwdArgs& a, const FwdPlan& p, float* carry, cudaStream_t stream) {
    cudaError_t err;
    const int64_t steps = p.steps;
    if (steps == 1) {
        if ((err = launch_prepare(a, p.k1_persistent, p.sms, stream)) != cudaSuccess) return err;
        return launch_recurrence(a, p.k2_stages, stream);
    }
    SideStream* side = nullptr;
    if ((err = side_stream(side)) != cudaSuccess) return err;
    const int64_t carry_floats = static_cast<int64_t>(a.H) * 128 * 128;
    for (int64_t s = 0; s < steps; ++s) {
        FwdArgs step = a;
        step.chunk_lo = step_edge(s, steps, a.max_chunks, p.growth);
        step.chunk_hi = s + 1 == steps ? INT64_MAX : step_edge(s + 1, steps, a.max_chunks, p.growth);
        step.carry_in = s > 0 ? carry + ((s - 1) & 1) * carry_floats : nullptr;
        step.carry_out = s + 1 < steps ? carry + (s & 1) * carry_floats : nullptr;
        if ((err = launch_prepare(step, p.k1_persistent, p.sms, stream)) != cudaSuccess) return err;
        if ((err = cudaEventRecord(side->ready[s], stream)) != cudaSuccess) return err;
        if ((err = cudaStreamWaitEvent(side->stream, side->ready[s], 0)) != cudaSuccess) return err;
        if ((err = launch_recurrence(step, p.k2_stages, side->stream)) != cudaSuccess) return err;
    }
    if ((err = cudaEventRecord(side->ready[steps], side->stream)) != cudaSuccess) return err;
    return cudaStreamWaitEvent(stream, side->ready[steps], 0);     // the caller's stream goes on after the last step
}

}  // namespace
}  // namespace kda
