// kda_binding.cpp: the torch side of the kernels, the entry points Python calls (by keyword: the module at the end
// names every argument). Each checks its tensors (kda_checks.h), fills the kernels' arguments (kda_args.h) and
// launches on torch's current stream of the inputs' device. It chooses nothing: every launch choice arrives from
// kda_nb.plan (Plan, BackwardPlan) as an argument and is obeyed.
//   kda_forward(<14>, path=, steps=, growth=, k2_stages=, k1_persistent=, sms=, keep=, gate_form=, beta_form=, norm_form=,
//               eager_loads=False, k3_rows=2, token_slots=None, write_final=True, records=None, reuse_records=False,
//               ckpt_offsets=None, ckpt_slots=None, replay=None)  the forward on the plan's
//       path: 'chunked' (the layout kernel for variable lengths, K1 and K2 in the plan's pipeline steps,
//       kda_pipeline.h), 'fused' (the layout kernel and the fused kernel) or 'decode' (K3); with keep (K3 only), the
//       call is checked and packed once and kept as a prepared decode step: kda_decode_run(id), kda_decode_free(id);
//       with token_slots (K3 only, not kept), the states after chosen tokens stored into chosen pool slots (kda_checks.h);
//       with ckpt_offsets and ckpt_slots ('chunked' only), K2 stores the states at chosen 16-aligned offsets of each
//       sequence into chosen pool slots (kda_checks.h §checkpoints); with outputs=False ('chunked' only, K = V = 128, no
//       checkpoints), K2 writes the states only, with zero_values also reads v as zeros, and with lean_record copies
//       only the parts of K1's records the states read (§states); with k3_wide
//       ('decode' with eager_loads and two rows, no token_slots, K = V = 128, a state read in bf16 or none), K3 runs
//       one block per (sequence, head) (kda_decode.cu §wide)
//   kda_bwd_prepare(..., gate_form=, beta_form=, norm_form=)  the backward's chunk factors, the tiles for the passes (kda_bwd_chunk.cu)
//   kda_bwd_states(...), kda_bwd_dstates(...)  the backward's two passes over each sequence's chunks, on those
//                                 tiles and the caller's v and dO (kda_bwd_states.cu)
//   kda_bwd_adjoint(..., gate_form=, beta_form=, norm_form=)  the rest of the backward, into the gradients (kda_bwd_chunk.cu)
//   kda_layout, kda_record_bytes, kda_bwd_factor_floats   the layout kernel alone (tests) and two sizes
//   kda_entry_scan(initial, X, M, grid, rows, check_grid=True)  the chain of entry states between the passes over
//                                 segments (kda_entry_scan.cu)
// It needs torch's headers and the CUDA runtime's headers only, so it also compiles against a CPU build of
// torch (CI does).
#include <torch/extension.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "kda_checks.h"
#include "kda_pipeline.h"

// The 14 arguments of the forward, as parameters and as the names passed on: written once here.
#define KDA_CALL_PARAMS                                                                                        \
    torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor g, torch::Tensor beta, double scale,        \
        torch::Tensor out, c10::optional<torch::Tensor> A_log, c10::optional<torch::Tensor> dt_bias,             \
        double lower_bound,                                                                                      \
        c10::optional<torch::Tensor> initial_state, c10::optional<torch::Tensor> final_state,                    \
        c10::optional<torch::Tensor> cu_seqlens, c10::optional<torch::Tensor> state_indices
#define KDA_CALL_TENSORS q, k, v, g, beta, out, A_log, dt_bias, initial_state, final_state, cu_seqlens, state_indices

namespace {

// §forward: what the chunked and fused paths share. The call's FwdArgs, with the layout tables [offsets N+1 | chunk
// offsets N+1 | order, N int32] filled by the layout kernel from cu_seqlens (a fixed-length batch needs
// none: the kernels find its chunks by division), and the bound on the chunks (kda_layout.cuh) that sizes
// K1's grid and the workspace. Everything is derived on the device from shapes and cu_seqlens, with no copy
// to the host, so the call can be captured in a CUDA graph. `tables` keeps the tables alive. Without `outputs` (the
// states only, §states) the layout kernel leaves out alone too (it zeroes the rows no sequence covers).
kda::FwdArgs forward_args(const Call& c, double scale, double lower_bound, torch::Tensor& tables, bool outputs = true) {
    const int64_t B = c.B, T = c.T, H = c.H, N = c.N;
    kda::FwdArgs a{};
    fill_common(a, c, scale, lower_bound);
    a.state_slot = c.pooled ? c.slots.data_ptr<int64_t>() : nullptr;
    tables = torch::empty({2 * (N + 1) + (N + 1) / 2}, c.qc.options().dtype(at::kLong));
    int64_t* t = tables.data_ptr<int64_t>();
    int* order = c.varlen && N > 1 ? reinterpret_cast<int*>(t + 2 * (N + 1)) : nullptr;
    a.cu_seqlens = t; a.cu_chunks = t + (N + 1); a.seq_order = order;
    a.max_chunks = c.varlen ? kda::max_chunks_varlen(B * T, N) : kda::max_chunks_fixed(B, T);
    a.seq_len = c.varlen ? 0 : T;                      // fixed length: the kernels need no tables
    if (c.varlen) {
        const cudaError_t err = kda::launch_layout(c.cu.data_ptr<int64_t>(), a.n_seq, B * T, t, t + (N + 1), order,
                                                   c.o.data_ptr(), outputs ? H * c.V * static_cast<int64_t>(c.o.element_size()) : 0,
                                                   c.stream);
        TORCH_CHECK(err == cudaSuccess, "kda_fwd_layout launch failed: ", cudaGetErrorString(err));
    }
    return a;
}

// K3's arguments from a prepared call: it reads the caller's cu_seqlens itself, and the slots as given; `token_slots`
// (checked: check_token_slots, token_slots_fit) the per-token stores, read as given
kda::DecodeArgs decode_args(const Call& c, double scale, double lower_bound, bool eager_loads, int64_t k3_rows,
                            const c10::optional<torch::Tensor>& token_slots = c10::nullopt, bool write_final = true,
                            const std::vector<torch::Tensor>* replay = nullptr, int64_t rec_per_slot = 0) {
    kda::DecodeArgs a{};
    fill_common(a, c, scale, lower_bound);
    a.state_slot = c.pooled ? c.slots.data_ptr() : nullptr;      // int32 or int64, as given
    a.slot_int32 = c.pooled && c.slots.scalar_type() == at::kInt;
    a.cu_seqlens = c.varlen ? c.cu.data_ptr<int64_t>() : nullptr;
    a.seq_len = c.varlen ? 0 : c.T;
    a.total = c.B * c.T;
    if (token_slots.has_value()) {
        a.token_slots = token_slots->data_ptr();
        a.token_slots_int32 = token_slots->scalar_type() == at::kInt;
        a.token_slots_width = token_slots->size(1);
    }
    a.write_final = write_final;
    a.eager_loads = eager_loads;
    a.k3_rows = static_cast<int>(k3_rows);            // (checked: 2, or 4 with eager_loads)
    if (replay) {                                     // (checked: replay_fit)
        a.rec_k = (*replay)[0].data_ptr(); a.rec_v = (*replay)[1].data_ptr();
        a.rec_g = (*replay)[2].data_ptr(); a.rec_beta = (*replay)[3].data_ptr();
        a.replay_table = (*replay)[4].data_ptr<int64_t>();
        a.rec_per_slot = rec_per_slot;
        a.replay_total = a.total + c.N * rec_per_slot;  // the sequences' tokens: at most every record row of theirs and the batch
    }
    return a;
}

// §plans: a decode call prepared once (kda_nb.DecodeStep: kda_forward with keep). A serving loop calls the same step
// on the same buffers every token; checking and packing the 14 arguments each time costs more host time than K3
// takes on the GPU for a small batch. A prepared step does that once: it checks the tensors as any call does,
// refuses any that would need a copy (it runs on the caller's tensors themselves, so that what the caller writes
// into them before a call is what that call reads), and keeps them alive; kda_decode_run(id) launches K3 on torch's
// current stream; kda_decode_free(id) lets the tensors go. The kernel reads cu_seqlens and state_indices on the
// device at every launch and makes any values safe, so a step stays in bounds whatever is written into them.

struct DecodePlan {
    Call c;
    kda::DecodeArgs a{};
};
std::mutex plans_mutex;
std::unordered_map<int64_t, std::shared_ptr<const DecodePlan>> plans;
int64_t next_plan = 1;

// `used` (what prepare made of `given`) must be `given` itself: a copy would be read once, at planning
void require_as_is(const torch::Tensor& given, const torch::Tensor& used, const char* name,
                   const char* what = "contiguous and 16-byte aligned") {
    TORCH_CHECK(used.is_same(given), name, " must be ", what,
                " for a prepared decode step: it runs on the tensors themselves at every call");
}

// the plan's choices for the forward, checked: what a launcher can obey
kda::FwdPlan checked_plan(const std::string& path, int64_t steps, double growth, int64_t k2_stages, bool k1_persistent,
                          int64_t sms, bool keep) {
    TORCH_CHECK(path == "chunked" || path == "fused" || path == "decode",
                "path must be 'chunked', 'fused' or 'decode', got '", path, "'");
    TORCH_CHECK(steps >= 1 && steps <= kda::MAX_STEPS, "steps must be 1 to ", num(kda::MAX_STEPS).c_str(), ", got ",
                num(steps).c_str());
    TORCH_CHECK(steps == 1 || path == "chunked", "steps above 1 are for the 'chunked' path only");
    TORCH_CHECK(std::isfinite(growth) && growth > 0.0, "growth must be a positive number");
    TORCH_CHECK(k2_stages == 3 || k2_stages == 4, "k2_stages must be 3 or 4, got ", num(k2_stages).c_str());
    TORCH_CHECK(!(path == "chunked" && k1_persistent) || sms >= 1,
                "sms must be the device's SM count (>= 1) for K1's persistent grid, got ", num(sms).c_str());
    TORCH_CHECK(sms <= INT32_MAX, "sms is too large");
    TORCH_CHECK(!keep || path == "decode", "keep (a prepared step) is for the 'decode' path only");
    kda::FwdPlan p;
    p.steps = static_cast<int>(steps); p.growth = growth; p.k2_stages = static_cast<int>(k2_stages);
    p.k1_persistent = k1_persistent; p.sms = static_cast<int>(sms);
    return p;
}

int64_t keep_decode_step(KDA_CALL_PARAMS, int64_t gate_form, int64_t beta_form, int64_t norm_form, bool eager_loads,
                         int64_t k3_rows, bool k3_wide) {
    auto plan = std::make_shared<DecodePlan>();
    plan->c = prepare(KDA_CALL_TENSORS, false, gate_form, beta_form, norm_form);
    const Call& c = plan->c;
    require_as_is(q, c.qc, "q"); require_as_is(k, c.kc, "k"); require_as_is(v, c.vc, "v"); require_as_is(g, c.gc, "g");
    require_as_is(beta, c.bc, "beta");
    if (A_log.has_value()) require_as_is(*A_log, c.Ac, "A_log", "float32, contiguous and 16-byte aligned");
    if (dt_bias.has_value()) require_as_is(*dt_bias, c.dc, "dt_bias", "float32, contiguous and 16-byte aligned");
    require_as_is(out, c.o, "out");
    if (initial_state.has_value()) require_as_is(*initial_state, *c.s_in, "initial_state");
    if (final_state.has_value()) require_as_is(*final_state, *c.s_out, "final_state");
    if (c.varlen) require_as_is(*cu_seqlens, c.cu, "cu_seqlens", "contiguous and on q's device");
    if (c.pooled) require_as_is(*state_indices, c.slots, "state_indices");
    plan->a = decode_args(c, scale, lower_bound, eager_loads, k3_rows);
    plan->a.k3_wide = k3_wide;
    const std::lock_guard<std::mutex> lock(plans_mutex);
    const int64_t id = next_plan++;
    plans.emplace(id, std::move(plan));
    return id;
}

}  // namespace

// The forward on the plan's path, obeying its choices (kda_nb.plan.Plan: path, steps, growth, k2_stages,
// k1_persistent, sms), on torch's current stream of q's device; writes out and final_state. q, k, v, g, beta and out:
// one dtype, bfloat16 or float16 (the kernels' instances of that element type; kda_checks.h §input). 'chunked': the
// workspace holds K1's records, then (a pipeline) the two carry states; the steps are at most the batch's chunks
// (the plan picks no more; a direct caller's are cut to them). 0, or with keep the id of a prepared decode step.
// 'decode' only: token_slots [N, W] stores the state after token t < W of sequence n into pool slot token_slots[n, t]
// of final_state, and write_final false leaves out the usual write of the state after a sequence's last token.
// 'chunked' in one step only: records (uint8) takes K1's records in place of a workspace of the call's own, and with
// reuse_records K1 does not run: K2 reads the records an earlier call over the same q, k, g, beta, cu_seqlens, form
// and heads left there (kda_checks.h §records).
// 'chunked' or 'fused': ckpt_offsets and ckpt_slots [N, C] int64, the checkpoints K2 or the fused kernel stores: the state
// after ckpt_offsets[n, c] tokens of sequence n (a multiple of 16, or its length) into slot ckpt_slots[n, c] of
// final_state (kda_checks.h §checkpoints).
// 'decode' only: eager_loads, K3's instances that issue every load of a tile of tokens at once (kda_decode.cu §eager;
// K = V = 128: at other head dims K3 loads token by token whatever it is given), and k3_rows, the state rows a thread of
// K3 updates: 2, or 4 with eager_loads (kda_decode.cu §four rows; at other head dims 2 whatever it is given).
// 'decode' only, with token_slots: replay = [rec_k, rec_v, rec_g, rec_beta, table], a replay read in place
// (kda_decode.cu §replay, kda_checks.h §replay): sequence n of cu_seqlens reads its first table[0, n] tokens from the
// records of its slot and the rest from the batch from row table[1, n] on, and writes only those rows of out.
// 'chunked' only, at K = V = 128 without checkpoints, with final_state: outputs=False writes the states only (K2's STATES
// instances, kda_recurrence.cuh §states: out is left as it is, and the states have the bits of a full call's), and
// zero_values then reads v as zeros (v's shape counts, its values are not read): a segment's transition; lean_record
// then copies only the parts of each chunk's record that the states read (FwdArgs::states_only = 2; the same bits).
// With outputs=False and no zero_values, in one step: transitions [N, H, 128, 128] fp32 takes each sequence's transition
// (the state from the identity with v read as zeros) from the same launch (kda_recurrence.cuh §paired; its own bits).
// 'decode' with eager_loads and two rows, without token_slots, at K = V = 128, with initial_state in bf16 or none:
// k3_wide runs K3's wide instances, one block per (sequence, head) (kda_decode.cu §wide; the same bits).
int64_t kda_forward(KDA_CALL_PARAMS, std::string path, int64_t steps, double growth, int64_t k2_stages,
                    bool k1_persistent, int64_t sms, bool keep, int64_t gate_form, int64_t beta_form,
                    int64_t norm_form, bool eager_loads, int64_t k3_rows, c10::optional<torch::Tensor> token_slots,
                    bool write_final, c10::optional<torch::Tensor> records, bool reuse_records,
                    c10::optional<torch::Tensor> ckpt_offsets, c10::optional<torch::Tensor> ckpt_slots,
                    c10::optional<std::vector<torch::Tensor>> replay, bool outputs, bool zero_values, bool k3_wide,
                    bool lean_record, c10::optional<torch::Tensor> transitions) {
    const kda::FwdPlan p0 = checked_plan(path, steps, growth, k2_stages, k1_persistent, sms, keep);
    TORCH_CHECK(!eager_loads || path == "decode", "eager_loads is for the 'decode' path (K3) only");
    TORCH_CHECK(k3_rows == 2 || (k3_rows == 4 && eager_loads), "k3_rows must be 2, or 4 with eager_loads (K3), got ", num(k3_rows).c_str(),
                eager_loads ? "" : " without eager_loads");
    TORCH_CHECK(!replay.has_value() || (path == "decode" && !keep && token_slots.has_value()), "replay (the records read "
                "in place) is for the 'decode' path with token_slots, not a prepared step");
    check_form_codes(gate_form, beta_form, norm_form);
    check_token_slots(token_slots, write_final, path, keep, final_state);
    check_records(records, reuse_records, path, steps);
    check_checkpoints(ckpt_offsets, ckpt_slots, path, final_state);
    TORCH_CHECK(!(ckpt_offsets.has_value() && path == "fused" && gate_form == 1), "the fused kernel stores no checkpoints "
                "for the softplus gate (kda_fwd_fused.cu: that instance would spill): take the 'chunked' path");
    // §states: the states only on the 'chunked' path at K = V = 128 without checkpoints, into a final_state
    TORCH_CHECK(!zero_values || !outputs, "zero_values=True (v read as zeros) needs outputs=False");
    TORCH_CHECK(!lean_record || !outputs, "lean_record=True (the records' parts the states read) needs outputs=False");
    TORCH_CHECK(outputs || (path == "chunked" && !keep && !ckpt_offsets.has_value() && q.dim() == 4 && v.dim() == 4 &&
                            q.size(-1) == 128 && v.size(-1) == 128),
                "outputs=False (K2's states only) is for the 'chunked' path at K = V = 128 without checkpoints, got path '",
                path, "' with q ", shape_of(q).c_str(), " and v ", shape_of(v).c_str(),
                ckpt_offsets.has_value() ? " and checkpoints" : "");
    TORCH_CHECK(outputs || final_state.has_value(), "outputs=False (the states only) needs final_state: it is all the call writes");
    TORCH_CHECK(!transitions.has_value() || (!outputs && !zero_values && steps == 1),
                "transitions (each sequence's transition beside its state) needs outputs=False, no zero_values and one step, "
                "got outputs=", outputs ? "True" : "False", ", zero_values=", zero_values ? "True" : "False", ", steps = ",
                num(steps).c_str());
    // §wide: K3 one block a head, where its instances are: eager, two rows, no per-token stores, K = V = 128, a bf16 state in
    TORCH_CHECK(!k3_wide || (path == "decode" && eager_loads && k3_rows == 2 && !token_slots.has_value() && q.dim() == 4 &&
                             v.dim() == 4 && q.size(-1) == 128 && v.size(-1) == 128),
                "k3_wide (K3 one block a head) is for the 'decode' path with eager_loads, two rows, no token_slots and "
                "K = V = 128, got path '", path, "' with q ", shape_of(q).c_str(), " and v ", shape_of(v).c_str());
    TORCH_CHECK(!k3_wide || !initial_state.has_value() || initial_state->scalar_type() == at::kBFloat16,
                "k3_wide reads the state in bfloat16: initial_state must be bfloat16 or None, got ",
                initial_state.has_value() ? initial_state->scalar_type() : at::kBFloat16);
    input_kind_of(q, k, v, g, beta, out);             // one dtype, bf16 or fp16 (kda_checks.h §input; prepare keeps it)
    // the head dims (kda_checks.h §dims), before the device: K and V multiples of 8 up to 128; the fused kernel 128 only
    if (q.dim() == 4) check_head_dim(q.size(3), "q's K (its last dim)", q);
    if (v.dim() == 4) check_head_dim(v.size(3), "v's V (its last dim)", v);
    TORCH_CHECK(path != "fused" || (q.size(-1) == 128 && v.size(-1) == 128), "the fused kernel takes K = V = 128 only "
                "(kda_fwd_fused.cu), got q ", shape_of(q).c_str(), " and v ", shape_of(v).c_str(),
                ": pad them, or take the 'chunked' or 'decode' path");
    TORCH_CHECK(q.is_cuda(), "q must be a CUDA tensor");
    const c10::DeviceGuard guard(q.device());
    if (keep) return keep_decode_step(q, k, v, g, beta, scale, out, A_log, dt_bias, lower_bound, initial_state,
                                      final_state, cu_seqlens, state_indices, gate_form, beta_form, norm_form, eager_loads,
                                      k3_rows, k3_wide);
    const Call c = prepare(KDA_CALL_TENSORS, path != "decode", gate_form, beta_form, norm_form);
    cudaError_t err;
    if (path == "decode") {
        if (token_slots.has_value()) token_slots_fit(*token_slots, c.N, q);
        const int64_t per_slot = replay.has_value() ? replay_fit(*replay, path, keep, token_slots.has_value(), c, q) : 0;
        kda::DecodeArgs a = decode_args(c, scale, lower_bound, eager_loads, k3_rows, token_slots, write_final,
                                        replay.has_value() ? &*replay : nullptr, per_slot);
        a.k3_wide = k3_wide;
        err = kda::launch_decode(a, c.stream);
        TORCH_CHECK(err == cudaSuccess, "kda_decode launch failed: ", cudaGetErrorString(err));
    } else {
        torch::Tensor tables;
        kda::FwdArgs a = forward_args(c, scale, lower_bound, tables, outputs);
        a.states_only = outputs ? 0 : lean_record ? 2 : 1;
        a.zero_values = zero_values;
        if (transitions.has_value()) {                // §paired: [N, H, 128, 128] fp32, contiguous, on q's device
            const torch::Tensor& m = *transitions;
            TORCH_CHECK(m.device() == q.device() && m.scalar_type() == at::kFloat && m.is_contiguous() && m.dim() == 4 &&
                        m.size(0) == c.N && m.size(1) == c.H && m.size(2) == 128 && m.size(3) == 128,
                        "transitions must be a contiguous float32 tensor [", num(c.N).c_str(), ", ", num(c.H).c_str(),
                        ", 128, 128] on ", q.device(), ", got ", m.scalar_type(), " ", shape_of(m).c_str(), " on ", m.device());
            a.transitions_out = m.data_ptr<float>();
        }
        if (ckpt_offsets.has_value()) {               // the checkpoints (kda_checks.h §checkpoints)
            checkpoints_fit(*ckpt_offsets, *ckpt_slots, c.N, q);
            a.ckpt_offsets = ckpt_offsets->data_ptr<int64_t>();
            a.ckpt_slots = ckpt_slots->data_ptr<int64_t>();
            a.ckpt_count = ckpt_offsets->size(1);
        }
        if (path == "fused") {
            const torch::Tensor ws = torch::empty({16}, q.options().dtype(at::kByte));
            a.workspace = ws.data_ptr();
            err = kda::launch_fused(a, c.stream);
            TORCH_CHECK(err == cudaSuccess, "kda_forward: launching the fused kernel failed: ", cudaGetErrorString(err));
        } else {
            kda::FwdPlan p = p0;
            p.steps = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(p.steps, a.max_chunks)));
            const int64_t H = c.H;
            const int64_t rec_bytes = a.max_chunks * H * static_cast<int64_t>(kda::record_bytes());
            if (records.has_value()) {                // the caller's records: K1 into them (unless reused), then K2
                records_fit(*records, rec_bytes, q);
                a.workspace = records->data_ptr();
                err = reuse_records ? cudaSuccess : kda::launch_prepare(a, p.k1_persistent, p.sms, c.stream);
                if (err == cudaSuccess) err = kda::launch_recurrence(a, p.k2_stages, c.stream);
                TORCH_CHECK(err == cudaSuccess, "kda_forward: launching K2 on the given records failed: ", cudaGetErrorString(err));
            } else {
                const int64_t ws_bytes = rec_bytes + (p.steps > 1 ? 2 * H * 128 * 128 * 4 : 0);
                const torch::Tensor ws = torch::empty({std::max<int64_t>(ws_bytes, 16)}, q.options().dtype(at::kByte));
                a.workspace = ws.data_ptr();
                err = kda::launch_chunked(a, p, reinterpret_cast<float*>(static_cast<uint8_t*>(a.workspace) + rec_bytes),
                                          c.stream);
                TORCH_CHECK(err == cudaSuccess, "kda_forward: launching K1 and K2 failed: ", cudaGetErrorString(err));
            }
        }
    }
    finish(c, out, final_state, outputs);
    return 0;
}

void kda_decode_run(int64_t id) {
    std::shared_ptr<const DecodePlan> plan;
    {
        const std::lock_guard<std::mutex> lock(plans_mutex);
        const auto it = plans.find(id);
        TORCH_CHECK(it != plans.end(), "no prepared decode step ", num(id).c_str(), " (freed, or never made)");
        plan = it->second;
    }
    const c10::Device device = plan->c.qc.device();
    const c10::DeviceGuard guard(device);
    const cudaStream_t stream = static_cast<cudaStream_t>(
        c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device).native_handle());
    const cudaError_t err = kda::launch_decode(plan->a, stream);
    TORCH_CHECK(err == cudaSuccess, "kda_decode launch failed: ", cudaGetErrorString(err));
}

bool kda_decode_free(int64_t id) {
    std::shared_ptr<const DecodePlan> plan;          // released after the lock: its tensors' destructors run outside it
    const std::lock_guard<std::mutex> lock(plans_mutex);
    const auto it = plans.find(id);
    if (it == plans.end()) return false;
    plan = std::move(it->second);
    plans.erase(it);
    return true;
}

// The layout kernel alone, for the tests: (safe offsets [N+1], chunk offsets [N+1], order [N] int32,
// zeroed [T] bytes: 1 where the token's output row would have been zeroed) for cu_seqlens [N+1] on the
// device and T tokens.
std::vector<torch::Tensor> kda_layout(torch::Tensor cu_seqlens, int64_t total) {
    TORCH_CHECK(cu_seqlens.is_cuda() && cu_seqlens.scalar_type() == at::kLong && cu_seqlens.dim() == 1 &&
                cu_seqlens.numel() >= 2, "cu_seqlens must be a CUDA int64 tensor [N + 1], N >= 1");
    const c10::DeviceGuard guard(cu_seqlens.device());
    const int64_t N = cu_seqlens.numel() - 1;
    const torch::Tensor cu = cu_seqlens.contiguous();
    const torch::Tensor safe = torch::empty({N + 1}, cu.options()), chunks = torch::empty({N + 1}, cu.options());
    const torch::Tensor order = torch::empty({N}, cu.options().dtype(at::kInt));
    const torch::Tensor rows = torch::ones({total, 16}, cu.options().dtype(at::kByte));
    const cudaStream_t stream = static_cast<cudaStream_t>(
        c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(cu.device()).native_handle());
    const cudaError_t err = kda::launch_layout(cu.data_ptr<int64_t>(), static_cast<int>(N), total,
                                               safe.data_ptr<int64_t>(), chunks.data_ptr<int64_t>(),
                                               order.data_ptr<int>(), rows.data_ptr(), 16, stream);
    TORCH_CHECK(err == cudaSuccess, "kda_fwd_layout launch failed: ", cudaGetErrorString(err));
    return {safe, chunks, order, rows.select(1, 0).eq(0)};
}

int64_t kda_record_bytes() { return static_cast<int64_t>(kda::record_bytes()); }
// floats of the small factors kda_bwd_prepare keeps for kda_bwd_adjoint, per (chunk row, head)
int64_t kda_bwd_factor_floats() { return kda::BWD_FACTOR_FLOATS; }

// The backward's kernels. Their tables are made on the host by the caller (kda_nb.backward_kernels) and checked
// (kda_checks.h) before they are copied to the device, so that no kernel can be sent outside its tensors, whatever
// cu_seqlens held. The k-split and the states' dtype are kda_nb.plan.BackwardPlan's, obeyed here.

namespace {
// What both passes take alike, checked and filled into `a`: the tiles kd, kr [M, H, 16, 128] fp16, invb [M, H, 16, 16]
// and decay [M, H, 128] fp32; the per-sequence states `seq` ([N, H, 128, 128] fp32 each, N from the first); the chunks'
// states `kept` [M, H, 128, 128], fp32 or bf16 (sc_bf16); the row tables, rows inside `total` tokens; the step tables;
// the k-split and the steps [step_lo, step_hi). The tables are copied to the device and kept alive in `tables`.
struct PassShape { int64_t M, H, N; };
PassShape fill_pass(kda::PassArgs& a, std::vector<torch::Tensor>& tables, const torch::Tensor& kd, const torch::Tensor& kr,
                    const torch::Tensor& invb, const torch::Tensor& decay,
                    std::initializer_list<std::pair<torch::Tensor, const char*>> seq, const torch::Tensor& kept,
                    const char* kept_name, const torch::Tensor& row_tok_host, const torch::Tensor& row_len_host,
                    int64_t total, const torch::Tensor& step_off_host, const torch::Tensor& chunks_host, int64_t ksplit,
                    int64_t step_lo, int64_t step_hi) {
    TORCH_CHECK(kd.dim() == 4, "kd must be [M, H, 16, 128]");
    const int64_t M = kd.size(0), H = kd.size(1), N = seq.begin()->first.size(0);
    for (auto [t, name] : {std::pair{kd, "kd"}, {kr, "kr"}}) check_tile(t, name, kd, {M, H, 16, 128}, at::kHalf);
    check_tile(invb, "invb", kd, {M, H, 16, 16});
    check_tile(decay, "decay", kd, {M, H, 128});
    for (const auto& [t, name] : seq) check_tile(t, name, kd, {N, H, 128, 128});
    check_rows(row_tok_host, row_len_host, total);
    TORCH_CHECK(row_tok_host.numel() == M, "row_tok must have a row per tile row (", num(M).c_str(), ")");
    TORCH_CHECK(kept.scalar_type() == at::kFloat || kept.scalar_type() == at::kBFloat16, kept_name, " must be float32 or bfloat16");
    check_tensor(kept, kept_name, kept.scalar_type(), kd);
    TORCH_CHECK(kept.is_contiguous() && kept.sizes() == c10::IntArrayRef({M, H, 128, 128}), kept_name, " must be [M, H, 128, 128]");
    check_steps(step_off_host, chunks_host, M, N);
    TORCH_CHECK(N < (int64_t(1) << 31) && H <= 65535, "too many sequences or heads");
    const int ks = check_ksplit(ksplit);
    check_range(step_lo, step_hi, step_off_host.numel() - 1, "steps");
    const torch::Device dev = kd.device();
    tables = {to_device_async(step_off_host, dev), to_device_async(chunks_host, dev), to_device_async(row_tok_host, dev),
              to_device_async(row_len_host, dev)};
    a.kd = kd.data_ptr(); a.kr = kr.data_ptr(); a.invb = invb.data_ptr<float>(); a.decay = decay.data_ptr<float>();
    a.step_off = tables[0].data_ptr<int64_t>(); a.chunks = tables[1].data_ptr<int>();
    a.row_tok = tables[2].data_ptr<int64_t>(); a.row_len = tables[3].data_ptr<int>();
    a.n_seq = static_cast<int>(N); a.heads = static_cast<int>(H); a.sc_bf16 = kept.scalar_type() == at::kBFloat16;
    a.ksplit = ks; a.step_lo = static_cast<int>(step_lo); a.step_hi = static_cast<int>(step_hi);
    return {M, H, N};
}
}  // namespace

// The backward's forward pass (kda_bwd_states.cu): the chunk loop from s0, keeping each chunk's entering state in sc
// and R, U; v the caller's [..., H, 128], bfloat16 or float16 (the inputs' dtype: the instance of that type).
void kda_bwd_states(torch::Tensor kd, torch::Tensor kr, torch::Tensor invb, torch::Tensor decay, torch::Tensor v,
                    torch::Tensor row_tok_host, torch::Tensor row_len_host, torch::Tensor s0, torch::Tensor step_off_host,
                    torch::Tensor chunks_host, torch::Tensor sc, torch::Tensor r, torch::Tensor u, int64_t ksplit,
                    int64_t step_lo, int64_t step_hi) {
    TORCH_CHECK(kd.dim() == 4, "kd must be [M, H, 16, 128]");
    const int input_kind = bwd_input_kind({{&v, "v"}});
    const c10::DeviceGuard guard(kd.device());
    kda::StatesArgs a{};
    std::vector<torch::Tensor> tables;
    const PassShape n = fill_pass(a, tables, kd, kr, invb, decay, {{s0, "s0"}}, sc, "sc", row_tok_host, row_len_host,
                                  check_tokens(v, "v", kd.size(1), kd), step_off_host, chunks_host, ksplit, step_lo, step_hi);
    for (auto [t, name] : {std::pair{r, "r"}, {u, "u"}}) check_tile(t, name, kd, {n.M, n.H, 16, 128});
    a.s0 = s0.data_ptr<float>(); a.v = v.data_ptr(); a.sc = sc.data_ptr(); a.r = r.data_ptr<float>(); a.u = u.data_ptr<float>();
    const cudaError_t err = kda::launch_bwd_states(a, input_kind, stream_of(kd));
    TORCH_CHECK(err == cudaSuccess, "kda_bwd_states launch failed: ", cudaGetErrorString(err));
}

// The backward's reverse pass (kda_bwd_states.cu): dS from ds_final back through the chunks, keeping each chunk's
// leaving dS in dso and dU, dR; dout the caller's dO (bf16, fp16 or fp32 [..., H, 128]: a 16-bit one takes the
// instance of its type) or empty (zero).
void kda_bwd_dstates(torch::Tensor qd, torch::Tensor kd, torch::Tensor kr, torch::Tensor invb, torch::Tensor decay,
                     torch::Tensor dout, double scale, torch::Tensor row_tok_host, torch::Tensor row_len_host,
                     torch::Tensor ds_final, torch::Tensor step_off_host, torch::Tensor chunks_host,
                     torch::Tensor du, torch::Tensor dso, torch::Tensor dr, torch::Tensor ds0, int64_t ksplit,
                     int64_t step_lo, int64_t step_hi, bool entry_only) {
    TORCH_CHECK(kd.dim() == 4, "kd must be [M, H, 16, 128]");
    TORCH_CHECK(!dout.numel() || dout.scalar_type() == at::kBFloat16 || dout.scalar_type() == at::kHalf ||
                dout.scalar_type() == at::kFloat, "dout must be bfloat16, float16 or float32, got ", dout.scalar_type());
    const int64_t total = dout.numel() ? check_tokens(dout, "dout", kd.size(1), kd) : INT64_MAX;   // (none read: no dO)
    const c10::DeviceGuard guard(kd.device());
    kda::DStatesArgs a{};
    std::vector<torch::Tensor> tables;
    const PassShape n = fill_pass(a, tables, kd, kr, invb, decay, {{ds_final, "ds_final"}, {ds0, "ds0"}}, dso, "dso",
                                  row_tok_host, row_len_host, total, step_off_host, chunks_host, ksplit, step_lo, step_hi);
    check_tile(qd, "qd", kd, {n.M, n.H, 16, 128}, at::kHalf);
    for (auto [t, name] : {std::pair{du, "du"}, {dr, "dr"}}) check_tile(t, name, kd, {n.M, n.H, 16, 128});
    a.qd = qd.data_ptr(); a.ds_final = ds_final.data_ptr<float>(); a.dout = dout.numel() ? dout.data_ptr() : nullptr;
    a.dout_fp32 = dout.scalar_type() == at::kFloat; a.scale = static_cast<float>(scale); a.du = du.data_ptr<float>();
    a.dso = dso.data_ptr(); a.dr = dr.data_ptr<float>(); a.ds0 = ds0.data_ptr<float>();
    a.entry_only = entry_only;                        // (kda_bwd_states.cu §entry: dso, du and dr then not written)
    const int input_kind = dout.numel() && dout.scalar_type() == at::kHalf ? kda::INPUT_F16 : kda::INPUT_BF16;   // (fp32, none: either)
    const cudaError_t err = kda::launch_bwd_dstates(a, input_kind, stream_of(kd));
    TORCH_CHECK(err == cudaSuccess, "kda_bwd_dstates launch failed: ", cudaGetErrorString(err));
}

// The backward's token-parallel kernels (kda_bwd_chunk.cu). q, k, g: [..., H, 128] contiguous (any leading shape;
// `total` tokens), beta with H last, all of one dtype, bfloat16 or float16 (kda_checks.h §backward input: the kernels'
// instance of that type); dout shaped like q, of q's dtype or fp32, or empty (zero); A_log fp32 [H], dt_bias fp32
// [H, 128]; the row tables as above.
namespace {
struct ChunkRows { int64_t M, H, total; torch::Tensor tok, len; int input_kind; };
ChunkRows check_chunk_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& g,
                             const torch::Tensor& beta, const torch::Tensor& dout, const torch::Tensor& A_log,
                             const torch::Tensor& dt_bias, const torch::Tensor& row_tok_host, const torch::Tensor& row_len_host) {
    const int input_kind = bwd_input_kind({{&q, "q"}, {&k, "k"}, {&g, "g"}, {&beta, "beta"}});
    check_dout_dtype(dout, q.scalar_type());
    TORCH_CHECK(q.dim() >= 2 && q.size(-1) == 128, "q must be [..., H, 128]");
    const int64_t H = q.size(-2), total = q.numel() / (H * 128);
    for (auto [t, name] : {std::pair{q, "q"}, {k, "k"}, {g, "g"}}) {
        check_tensor(t, name, q.scalar_type(), q);
        TORCH_CHECK(t.is_contiguous() && t.sizes() == q.sizes(), name, " must be contiguous and shaped like q");
    }
    check_tensor(beta, "beta", q.scalar_type(), q);
    TORCH_CHECK(beta.is_contiguous() && beta.numel() == total * H && beta.size(-1) == H, "beta must be contiguous [..., H]");
    if (dout.numel()) {
        check_tensor(dout, "dout", dout.scalar_type(), q);
        TORCH_CHECK(dout.is_contiguous() && dout.sizes() == q.sizes(), "dout must be contiguous and shaped like q");
    }
    check_tensor(A_log, "A_log", at::kFloat, q);
    check_tensor(dt_bias, "dt_bias", at::kFloat, q);
    TORCH_CHECK(A_log.is_contiguous() && A_log.numel() == H, "A_log must be contiguous [H]");
    TORCH_CHECK(dt_bias.is_contiguous() && dt_bias.numel() == H * 128, "dt_bias must be contiguous [H, 128]");
    check_rows(row_tok_host, row_len_host, total);
    const int64_t M = row_tok_host.numel();
    TORCH_CHECK(M < (int64_t(1) << 31) && H <= 65535, "too many rows or heads");
    return {M, H, total, to_device_async(row_tok_host, q.device()), to_device_async(row_len_host, q.device()), input_kind};
}
kda::ChunkArgs chunk_args(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& g, const torch::Tensor& beta,
                          const torch::Tensor& dout, const torch::Tensor& A_log, const torch::Tensor& dt_bias,
                          const ChunkRows& rows, double scale, double lower_bound) {
    kda::ChunkArgs a{};
    a.q = q.data_ptr(); a.k = k.data_ptr(); a.v = nullptr; a.g = g.data_ptr(); a.beta = beta.data_ptr();
    a.A_log = A_log.data_ptr<float>(); a.dt_bias = dt_bias.data_ptr<float>(); a.H = static_cast<int>(rows.H);
    a.scale = static_cast<float>(scale); a.lower_bound = static_cast<float>(lower_bound);
    a.dout = dout.numel() ? dout.data_ptr() : nullptr; a.dout_fp32 = dout.scalar_type() == at::kFloat;
    a.row_tok = rows.tok.data_ptr<int64_t>(); a.row_len = rows.len.data_ptr<int>(); a.rows = rows.M; a.row0 = 0;
    return a;
}
// the backward's form from the binding's numbers (kda_nb.layout.Form.codes), or an error naming the bad one. A given
// gate (2) reads no A_log and no dt_bias: the caller passes any tensors of their shapes (zeros).
kda::BwdForm bwd_form(int64_t gate, int64_t beta, int64_t norm, const char* fn) {
    TORCH_CHECK(0 <= gate && gate <= 2, fn, ": gate_form must be 0 (safe), 1 (softplus) or 2 (given), got ", num(gate).c_str());
    TORCH_CHECK(0 <= beta && beta <= 2, fn, ": beta_form must be 0 (logits), 1 (probabilities) or 2 (allow_neg_eigval), got ",
                num(beta).c_str());
    TORCH_CHECK(0 <= norm && norm <= 1, fn, ": norm_form must be 0 (L2 inside) or 1 (outside), got ", num(norm).c_str());
    kda::BwdForm f;
    f.gate = static_cast<int>(gate); f.beta = static_cast<int>(beta); f.norm = static_cast<int>(norm);
    return f;
}

}  // namespace

void kda_bwd_prepare(torch::Tensor q, torch::Tensor k, torch::Tensor g, torch::Tensor beta, torch::Tensor dout,
                     torch::Tensor A_log, torch::Tensor dt_bias, torch::Tensor row_tok_host, torch::Tensor row_len_host,
                     double scale, double lower_bound, torch::Tensor qd, torch::Tensor kd, torch::Tensor kr, torch::Tensor du,
                     torch::Tensor invb, torch::Tensor decay, torch::Tensor factors, int64_t row_lo, int64_t row_hi,
                     int64_t gate_form, int64_t beta_form, int64_t norm_form) {
    const kda::BwdForm form = bwd_form(gate_form, beta_form, norm_form, "kda_bwd_prepare");
    const ChunkRows rows = check_chunk_inputs(q, k, g, beta, dout, A_log, dt_bias, row_tok_host, row_len_host);
    const int64_t M = rows.M, H = rows.H;
    for (auto [t, name] : {std::pair{qd, "qd"}, {kd, "kd"}, {kr, "kr"}}) check_tile(t, name, q, {M, H, 16, 128}, at::kHalf);
    check_tile(du, "du", q, {M, H, 16, 128});
    check_tile(invb, "invb", q, {M, H, 16, 16});
    check_tile(decay, "decay", q, {M, H, 128});
    check_tile(factors, "factors", q, {M, H, kda::BWD_FACTOR_FLOATS});
    const c10::DeviceGuard guard(q.device());
    kda::PrepArgs a{chunk_args(q, k, g, beta, dout, A_log, dt_bias, rows, scale, lower_bound)};
    a.qd = qd.data_ptr(); a.kd = kd.data_ptr(); a.kr = kr.data_ptr(); a.du = du.data_ptr<float>();
    a.invb = invb.data_ptr<float>(); a.decay = decay.data_ptr<float>(); a.factors = factors.data_ptr<float>();
    a.form = form;
    a.input_kind = rows.input_kind;
    check_range(row_lo, row_hi, M, "rows");
    a.row0 = row_lo; a.rows = row_hi - row_lo;
    const cudaError_t err = kda::launch_bwd_prepare(a, stream_of(q));
    TORCH_CHECK(err == cudaSuccess, "kda_bwd_prepare launch failed: ", cudaGetErrorString(err));
}

void kda_bwd_adjoint(torch::Tensor q, torch::Tensor k, torch::Tensor g, torch::Tensor beta, torch::Tensor dout,
                     torch::Tensor A_log, torch::Tensor dt_bias, torch::Tensor row_tok_host, torch::Tensor row_len_host,
                     double scale, double lower_bound, torch::Tensor sc, torch::Tensor dso, torch::Tensor u,
                     torch::Tensor r, torch::Tensor du, torch::Tensor dr, torch::Tensor factors, torch::Tensor dq, torch::Tensor dk,
                     torch::Tensor dv, torch::Tensor dg, torch::Tensor dbeta, torch::Tensor dA_part, torch::Tensor ddt_part,
                     int64_t row_lo, int64_t row_hi, int64_t gate_form, int64_t beta_form, int64_t norm_form) {
    const kda::BwdForm form = bwd_form(gate_form, beta_form, norm_form, "kda_bwd_adjoint");
    // the gradients: float32, or the inputs' dtype (checked before the inputs' devices and shapes, as their dtypes are)
    TORCH_CHECK(dq.scalar_type() == at::kFloat || dq.scalar_type() == q.scalar_type(), "dq must be float32 or q's dtype ",
                q.scalar_type(), ", got ", dq.scalar_type());
    const ChunkRows rows = check_chunk_inputs(q, k, g, beta, dout, A_log, dt_bias, row_tok_host, row_len_host);
    const int64_t M = rows.M, H = rows.H;
    for (auto [t, name] : {std::pair{u, "u"}, {r, "r"}, {du, "du"}, {dr, "dr"}}) check_tile(t, name, q, {M, H, 16, 128});
    check_tile(factors, "factors", q, {M, H, kda::BWD_FACTOR_FLOATS});
    TORCH_CHECK(sc.scalar_type() == dso.scalar_type() && (sc.scalar_type() == at::kFloat || sc.scalar_type() == at::kBFloat16),
                "sc and dso must both be float32 or both bfloat16");
    for (auto [t, name] : {std::pair{sc, "sc"}, {dso, "dso"}}) {
        check_tensor(t, name, sc.scalar_type(), q);
        TORCH_CHECK(t.is_contiguous() && t.sizes() == c10::IntArrayRef({M, H, 128, 128}), name, " must be [M, H, 128, 128]");
    }
    const auto grad_type = dq.scalar_type();
    for (auto [t, name] : {std::pair{dq, "dq"}, {dk, "dk"}, {dv, "dv"}, {dg, "dg"}}) {
        check_tensor(t, name, grad_type, q);
        TORCH_CHECK(t.is_contiguous() && t.sizes() == q.sizes(), name, " must be contiguous, shaped like q, of dq's dtype");
    }
    check_tensor(dbeta, "dbeta", grad_type, q);
    TORCH_CHECK(dbeta.is_contiguous() && dbeta.sizes() == beta.sizes(), "dbeta must be contiguous, shaped like beta, of dq's dtype");
    check_tile(dA_part, "dA_part", q, {M, H});
    check_tile(ddt_part, "ddt_part", q, {M, H, 128});
    const c10::DeviceGuard guard(q.device());
    kda::AdjointArgs a{chunk_args(q, k, g, beta, dout, A_log, dt_bias, rows, scale, lower_bound)};
    a.sc = sc.data_ptr(); a.dso = dso.data_ptr(); a.states_bf16 = sc.scalar_type() == at::kBFloat16;
    a.u = u.data_ptr<float>(); a.r = r.data_ptr<float>(); a.du = du.data_ptr<float>(); a.dr = dr.data_ptr<float>();
    a.factors = factors.data_ptr<float>();
    a.dq = dq.data_ptr(); a.dk = dk.data_ptr(); a.dv = dv.data_ptr(); a.dg = dg.data_ptr();
    a.dbeta = dbeta.data_ptr(); a.grads_in_type = grad_type != at::kFloat; a.dA_part = dA_part.data_ptr<float>(); a.ddt_part = ddt_part.data_ptr<float>();
    a.form = form;
    a.input_kind = rows.input_kind;
    check_range(row_lo, row_hi, M, "rows");
    a.row0 = row_lo; a.rows = row_hi - row_lo;
    const cudaError_t err = kda::launch_bwd_adjoint(a, stream_of(q));
    TORCH_CHECK(err == cudaSuccess, "kda_bwd_adjoint launch failed: ", cudaGetErrorString(err));
}

// The chain of entry states of sequences cut into segments (kda_entry_scan.cu; kda_nb.segments.entry_states): E
// [P, HV, V, K] fp32, E[grid[0, n]] = initial[n] and E[grid[p + 1, n]] = E[grid[p, n]] M + X at that row, on the
// current stream; `rows` (8, 16 or 32) the state rows of a block, kda_nb's choice. With check_grid, outside CUDA-graph
// capture, the grid's values are checked on the host first (kda_checks.h §entry scan); rows no grid value names are
// left unwritten.
torch::Tensor kda_entry_scan(torch::Tensor initial, torch::Tensor X, torch::Tensor M, torch::Tensor grid, int64_t rows,
                             bool check_grid) {
    const ScanTensors t = check_entry_scan(initial, X, M, grid, rows);
    const c10::DeviceGuard guard(initial.device());
    const cudaStream_t stream = stream_of(initial);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    const cudaError_t cap = cudaStreamIsCapturing(stream, &capture);
    TORCH_CHECK(cap == cudaSuccess, "kda_entry_scan: cudaStreamIsCapturing failed: ", cudaGetErrorString(cap));
    if (check_grid && capture == cudaStreamCaptureStatusNone) check_scan_grid(t.grid, t.P);
    torch::Tensor E = torch::empty({t.P, t.HV, t.V, t.K}, t.X.options());
    kda::ScanArgs a{};
    a.initial = t.initial.data_ptr<float>(); a.X = t.X.data_ptr<float>(); a.M = t.M.data_ptr<float>();
    a.grid = t.grid.data_ptr<int64_t>(); a.E = E.data_ptr<float>();
    a.P = t.P; a.S = t.S; a.N = t.N;
    a.HV = static_cast<int>(t.HV); a.V = static_cast<int>(t.V); a.K = static_cast<int>(t.K); a.rows = static_cast<int>(rows);
    const cudaError_t err = kda::launch_entry_scan(a, stream);
    TORCH_CHECK(err == cudaSuccess, "kda_entry_scan launch failed: ", cudaGetErrorString(err));
    return E;
}

// The module: every entry point with its arguments named, so that Python may pass them by keyword (kda_nb.kernels.launch
// passes kda_forward's positionally: a call's host time matters for small decode steps).
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    namespace py = pybind11;
    m.def("kda_forward", torch::wrap_pybind_function(kda_forward), "the forward on the plan's path, obeying its choices; 0, or a prepared decode step's id (keep)",
          py::arg("q"), py::arg("k"), py::arg("v"), py::arg("g"), py::arg("beta"), py::arg("scale"), py::arg("out"),
          py::arg("A_log"), py::arg("dt_bias"), py::arg("lower_bound"), py::arg("initial_state"),
          py::arg("final_state"), py::arg("cu_seqlens"), py::arg("state_indices"), py::arg("path"),
          py::arg("steps"), py::arg("growth"), py::arg("k2_stages"), py::arg("k1_persistent"), py::arg("sms"),
          py::arg("keep"), py::arg("gate_form"), py::arg("beta_form"), py::arg("norm_form"),
          py::arg("eager_loads") = false, py::arg("k3_rows") = 2,
          py::arg("token_slots") = py::none(), py::arg("write_final") = true, py::arg("records") = py::none(),
          py::arg("reuse_records") = false, py::arg("ckpt_offsets") = py::none(), py::arg("ckpt_slots") = py::none(),
          py::arg("replay") = py::none(), py::arg("outputs") = true, py::arg("zero_values") = false,
          py::arg("k3_wide") = false, py::arg("lean_record") = false, py::arg("transitions") = py::none());
    m.def("kda_decode_run", torch::wrap_pybind_function(kda_decode_run), "launch a prepared decode step on the current stream",
          py::arg("id"));
    m.def("kda_decode_free", torch::wrap_pybind_function(kda_decode_free), "release a prepared decode step (False: none with this id)",
          py::arg("id"));
    m.def("kda_layout", torch::wrap_pybind_function(kda_layout), "the layout kernel alone, for the tests",
          py::arg("cu_seqlens"), py::arg("total"));
    m.def("kda_record_bytes", torch::wrap_pybind_function(kda_record_bytes), "bytes K1 leaves per (chunk, head)");
    m.def("kda_bwd_factor_floats", torch::wrap_pybind_function(kda_bwd_factor_floats), "floats of the chunk factors kda_bwd_prepare keeps per (chunk row, head)");
    m.def("kda_bwd_prepare", torch::wrap_pybind_function(kda_bwd_prepare), "the backward's chunk factors and the passes' tiles, rows [row_lo, row_hi)",
          py::arg("q"), py::arg("k"), py::arg("g"), py::arg("beta"), py::arg("dout"), py::arg("A_log"),
          py::arg("dt_bias"), py::arg("row_tok_host"), py::arg("row_len_host"), py::arg("scale"),
          py::arg("lower_bound"), py::arg("qd"), py::arg("kd"), py::arg("kr"), py::arg("du"), py::arg("invb"),
          py::arg("decay"), py::arg("factors"), py::arg("row_lo"), py::arg("row_hi"), py::arg("gate_form") = 0,
          py::arg("beta_form") = 0, py::arg("norm_form") = 0);
    m.def("kda_bwd_states", torch::wrap_pybind_function(kda_bwd_states), "the backward's forward pass over the chunks, steps [step_lo, step_hi)",
          py::arg("kd"), py::arg("kr"), py::arg("invb"), py::arg("decay"), py::arg("v"), py::arg("row_tok_host"),
          py::arg("row_len_host"), py::arg("s0"), py::arg("step_off_host"), py::arg("chunks_host"), py::arg("sc"),
          py::arg("r"), py::arg("u"), py::arg("ksplit"), py::arg("step_lo"), py::arg("step_hi"));
    m.def("kda_bwd_dstates", torch::wrap_pybind_function(kda_bwd_dstates), "the backward's reverse pass over the chunks, steps [step_lo, step_hi)",
          py::arg("qd"), py::arg("kd"), py::arg("kr"), py::arg("invb"), py::arg("decay"), py::arg("dout"),
          py::arg("scale"), py::arg("row_tok_host"), py::arg("row_len_host"), py::arg("ds_final"),
          py::arg("step_off_host"), py::arg("chunks_host"), py::arg("du"), py::arg("dso"), py::arg("dr"),
          py::arg("ds0"), py::arg("ksplit"), py::arg("step_lo"), py::arg("step_hi"), py::arg("entry_only") = false);
    m.def("kda_bwd_adjoint", torch::wrap_pybind_function(kda_bwd_adjoint), "the rest of the backward into the gradients, rows [row_lo, row_hi)",
          py::arg("q"), py::arg("k"), py::arg("g"), py::arg("beta"), py::arg("dout"), py::arg("A_log"),
          py::arg("dt_bias"), py::arg("row_tok_host"), py::arg("row_len_host"), py::arg("scale"),
          py::arg("lower_bound"), py::arg("sc"), py::arg("dso"), py::arg("u"), py::arg("r"), py::arg("du"),
          py::arg("dr"), py::arg("factors"), py::arg("dq"), py::arg("dk"), py::arg("dv"), py::arg("dg"),
          py::arg("dbeta"), py::arg("dA_part"), py::arg("ddt_part"), py::arg("row_lo"), py::arg("row_hi"),
          py::arg("gate_form") = 0, py::arg("beta_form") = 0, py::arg("norm_form") = 0);
    m.def("kda_entry_scan", torch::wrap_pybind_function(kda_entry_scan), "the chain of entry states of segmented sequences, E [P, HV, V, K]",
          py::arg("initial"), py::arg("X"), py::arg("M"), py::arg("grid"), py::arg("rows"), py::arg("check_grid") = true);
}
