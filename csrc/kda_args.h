// kda_args.h: what the binding (kda_binding.cpp) hands each kernel launcher, plain pointers and sizes only, so that
// the kernels compile with nvcc alone. One hierarchy: kda::Params holds what every kernel of a call reads (the token
// tensors and the gates); Args adds the forward's outputs and state formats,
// and FwdArgs (the layout kernel, K1, K2, the fused kernel) and DecodeArgs (K3) what each forward path adds; ChunkArgs
// adds the backward's row tables for its token-parallel kernels (kda_bwd_chunk.cu), PrepArgs and AdjointArgs what each
// of those writes. The backward's two sequential passes (kda_bwd_states.cu) read tiles, not the token tensors:
// PassArgs holds what both take, StatesArgs and DStatesArgs what each adds.
#pragma once
#include <cstddef>
#include <cstdint>

namespace kda {

enum StateKind : int { STATE_NONE = 0, STATE_BF16 = 1, STATE_FP32 = 2 };
// The element type of the forward's inputs q, k, v, g, beta and of its output: a template parameter of the forward's
// kernels (kda_switch.h: dispatch_fwd), read by the launchers from FwdArgs::input_kind and DecodeArgs::input_kind
enum InputKind : int { INPUT_BF16 = 0, INPUT_F16 = 1 };

// The call's token tensors and gates, which every kernel of a call reads. A kernel that reads no v (the backward's
// token-parallel kernels) gets null there. The sizes (H, scale, the gate's floor) are declared by each kind after
// its own fields: the forward's kernels keep the parameter layout (and so the machine code) they were tuned with.
struct Params {
    const void* q;            // [total_tokens, H, 128] bf16 (B*T tokens, or the varlen concatenation); the forward's
                              // kernels also take fp16 (FwdArgs, DecodeArgs: input_kind), k, v, g, beta as q
    const void* k;            // same
    const void* v;            // same
    const void* g;            // same: raw gate
    const void* beta;         // [total_tokens, H] logits, q's dtype
    const float* A_log;       // [H]
    const float* dt_bias;     // [H, 128]
};

// The forward: its outputs and the states' formats, every path alike
struct Args : Params {
    void* out;                // [total_tokens, H, 128], the inputs' dtype
    const void* state_in;     // [n_slots, H, 128, 128] (V-first), kind state_in_kind, or null
    void* state_out;          // same layout, kind state_out_kind, or null (may be state_in itself)
    int state_in_kind;
    int state_out_kind;
};

// The chunked forward (the layout kernel, K1, K2, the fused kernel)
struct FwdArgs : Args {
    const int64_t* state_slot;  // [N]: the pool slot sequence n reads and writes, or null (slot n); a slot
                              // outside [0, n_slots) marks a padding sequence (no state, zero outputs)
    int64_t n_slots;          // states in the pool (N without state_slot)
    // The batch layout, on the device, as launch_layout builds it from the caller's cu_seqlens by the rules
    // of kda_layout.cuh (safe offsets, chunk counts). A fixed-length batch (seq_len > 0) has none: the
    // kernels find its offsets by multiplication and division.
    const int64_t* cu_seqlens;  // [N + 1] token offsets of the sequences
    const int64_t* cu_chunks;   // [N + 1] chunk offsets: cu_chunks[n+1] - cu_chunks[n] = chunk_count(len_n)
    const int* seq_order;     // [N] int32: K2 visits the sequences in this order (longest first), or null
    int n_seq;                // N
    int H;
    int64_t seq_len;          // a fixed-length batch: tokens per sequence; 0: the tables come from launch_layout
    int64_t max_chunks;       // max_chunks_varlen / max_chunks_fixed (kda_layout.cuh): it sizes K1's grid and
                              // the workspace; K1 reads the count itself
    float scale;
    float lower_bound;        // the safe gate's floor
    void* workspace;          // max_chunks * H * record_bytes() bytes, written by K1, read by K2 (the fused kernel: none)
    // One step of a pipeline (kda_binding.cpp): K1 and K2 take only the chunks [chunk_lo, chunk_hi) of the
    // batch. K2 takes the state of a sequence that began before chunk_lo from carry_in, and leaves that of
    // one that goes on past chunk_hi in carry_out ([H, 128, 128] fp32 each). The whole batch: the defaults.
    int64_t chunk_lo = 0;
    int64_t chunk_hi = INT64_MAX;
    const float* carry_in = nullptr;
    float* carry_out = nullptr;
    // The form (kda_activations.cuh): the gate's is the kernels' template parameter (the launchers dispatch on it,
    // kda_switch.h); beta's and the norm's are uniform runtime values. A_log and dt_bias are null for the given gate.
    int gate_form = 0;
    int beta_form = 0;
    int norm_form = 0;
    // Grouped value heads (GVA): H above counts the value heads (v, g, beta, A_log, dt_bias, the states, out); q and
    // k have H / 2^group_shift heads, value head h reading q and k head h >> group_shift. 0: as many as value heads.
    int group_shift = 0;
    // Checkpoints, K2's and the fused kernel's (last: the fields above keep their offsets, and the kernels without
    // checkpoints their machine code). Entry c < ckpt_count of sequence n: after the chunk that ends at token offset
    // ckpt_offsets[n * ckpt_count + c] of the sequence (0: the state entering it), the kernel stores the state into pool slot
    // ckpt_slots[n * ckpt_count + c] of state_out, in state_out's kind. An offset that is not a multiple of 16 (unless
    // it is the sequence's length), is negative or lies past the sequence's end, or a slot outside [0, n_slots),
    // means no store. Null: no checkpoints (the instances without them run).
    const int64_t* ckpt_offsets = nullptr;  // [N, C] int64
    const int64_t* ckpt_slots = nullptr;    // [N, C] int64
    int64_t ckpt_count = 0;                 // C
    // The inputs' element type (InputKind; last, as the checkpoints): a template parameter of the kernels, which read
    // no field for it; the launchers pick the instance by it.
    int input_kind = INPUT_BF16;
    // The head dims (last, as above): K channels of q, k, g, dt_bias and of the states' rows, V channels of v and out and
    // rows of the states; each a multiple of 8 in [8, 128]. Tensors are [.., K], [.., V] and states [.., V, K] (carry_in
    // and carry_out stay [H, 128, 128]). Read only by the instances with DIMS (kda_switch.h: dispatch_fwd_dims), which
    // the launchers pick where (K, V) != (128, 128); the others are built for K = V = 128 and read neither.
    int dim_k = 128;
    int dim_v = 128;
    // The states only (last, as above): K2's instances with STATES (kda_recurrence.cuh §states), which write no outputs
    // and leave out the products that make them; the launcher picks them for K = V = 128 without checkpoints (the
    // binding refuses the rest). With zero_values they also read v as zeros (its memory untouched): the passes over
    // segments that want only each segment's state from zero and its transition (kda_nb.segments). 1: the states only;
    // 2: the states only, each chunk's record copied without the parts only the outputs read (kda_recurrence.cuh
    // §states: STATES_REC_BYTES of REC_BYTES).
    int states_only = 0;
    int zero_values = 0;
    // The transitions beside the states (last, as above; read only by K2's instances with STATES): non-null, K2 runs twice
    // the row slices, the second half of each (sequence, head)'s the transition of the sequence (the state from the
    // identity with v read as zeros), written here, [n_seq, H, 128, 128] fp32 at sequence n (not its pool slot); the
    // first half the states as above. Both halves of a (sequence, head) are neighbours in the grid, so each chunk's
    // record comes from memory about once for both (kda_recurrence.cuh §paired). One step of K2 only (no carry).
    float* transitions_out = nullptr;
};

// K3 "decode": it reads the caller's cu_seqlens itself (made safe by kda_layout.cuh's rule inside the
// kernel), so it needs no layout launch and no workspace.
struct DecodeArgs : Args {
    const void* state_slot;   // [N] int32 (slot_int32) or int64: the pool slot of sequence n, or null (slot n)
    int slot_int32;
    int64_t n_slots;
    const int64_t* cu_seqlens;  // [N + 1] the caller's offsets (any values), or null: N sequences of seq_len
    int64_t seq_len;
    int64_t total;            // tokens in q
    int n_seq;
    int H;
    float scale;
    float lower_bound;
    int gate_form = 0;        // as FwdArgs
    int beta_form = 0;
    int norm_form = 0;
    int group_shift = 0;      // as FwdArgs
    // Per-token stores (last: the fields above keep their offsets, and the instance without stores its machine code).
    // The state after token t (0-based, t < token_slots_width) of sequence n goes into pool slot
    // token_slots[n * token_slots_width + t] of state_out, in state_out's kind; a value outside [0, n_slots) means no
    // store. Null: no per-token stores (K3's instance without them runs). write_final 0: no state_out write after a
    // sequence's last token (read only with a table: the binding refuses it without one).
    const void* token_slots = nullptr;  // [N, W] int32 (token_slots_int32) or int64, or null
    int token_slots_int32 = 0;
    int write_final = 1;
    int64_t token_slots_width = 0;      // W
    int input_kind = INPUT_BF16;        // as FwdArgs (last: read by the launcher only)
    int dim_k = 128;                    // as FwdArgs (last: read by K3's instances with DIMS only)
    int dim_v = 128;
    int eager_loads = 0;                // K3's instances with EAGER (kda_decode.cu §eager; K = V = 128): every load of a
                                        // tile of tokens issued before any is used (last: read by the launcher only)
    // A replay read in place (kda_decode.cu §replay; K = V = 128, with token_slots; last: read by K3's instances with
    // REPLAY only): replay_table [2, N] int64, row 0 the tokens of sequence n read from the records, row 1 the batch row
    // of its first new token; the records rec_k [R, Hq, K], rec_v [R, H, V], rec_g [R, H, K], rec_beta [R, H] in the
    // inputs' dtype, rec_per_slot rows a pool slot (R = n_slots * rec_per_slot); replay_total bounds the offsets cu.
    const int64_t* replay_table = nullptr;
    const void* rec_k = nullptr;
    const void* rec_v = nullptr;
    const void* rec_g = nullptr;
    const void* rec_beta = nullptr;
    int64_t rec_per_slot = 0;
    int64_t replay_total = 0;
    int k3_rows = 2;                    // rows a thread of K3 updates: 2, or 4 with eager_loads (kda_decode.cu §four rows;
                                        // last: read by the launcher only)
    int k3_wide = 0;                    // one block per (sequence, head), its state read in bf16 or not at all
                                        // (kda_decode.cu §wide; eager, two rows, K = V = 128; last: read by the launcher only)
};

// The backward's passes over the chunks of each sequence (kda_bwd_states.cu). Chunks are in step-major rows:
// sequences sorted by chunk count, most first; row step_off[i] + n is chunk i of sorted sequence n, which has
// chunks[n] chunks, and holds the tokens row_tok[r] .. row_tok[r] + row_len[r] - 1 of the caller's tensors. Tiles are
// contiguous [M, H, 16, 128] (C = 16 tokens by 128 channels): qd, kd and kr fp16, as kda_bwd_prepare writes them
// (their values are exact tf32 operands), dU fp32; INVb [M, H, 16, 16] fp32 (read as tf32 operands: values already
// rounded to tf32 are read exactly, others cut); decay [M, H, 128]; states [N, H, 128, 128] (V-first) fp32 in sorted
// order. v and dO are the caller's own [tokens, H, 128] tensors, 16-byte aligned, of the inputs' dtype (bf16 or fp16;
// dO may be fp32 as well). The inputs' type is a template parameter of the passes that their launchers take beside
// these structs (kda_launch.h), not a field: one more field grew kda_bwd_states' parameters, and nvcc scheduled the
// kernel's bf16 instance differently for it.
// What both passes take: the chunk tiles, the row tables, the walk
struct PassArgs {
    const void *kd, *kr;      // fp16 tiles
    const float *invb, *decay;
    const int64_t* row_tok;   // [M]
    const int* row_len;       // [M]
    const int64_t* step_off;  // [steps + 1]
    const int* chunks;        // [N]
    int n_seq, heads, sc_bf16;
    int ksplit;               // warps sharing a group of 16 state rows: 1 or 2 (kda_nb.plan.BackwardPlan.ksplit)
    int step_lo, step_hi;     // the chunks this launch walks: steps step_lo .. step_hi - 1 of each sequence (dS: from the last)
};
struct StatesArgs : PassArgs {
    float* s0;                // [N, H, 128, 128]: the state entering chunk step_lo (the initial state when 0); where a
                              // sequence has chunks past step_hi, the state entering chunk step_hi is left there
    const void* v;            // the caller's v, bf16 or fp16 (input_kind)
    void* sc;                 // [M, H, 128, 128]: the state entering each chunk, fp32 or bf16 (sc_bf16)
    float *r, *u;             // [M, H, 16, 128]: R = V - kd S^T and U = INVb R
};
struct DStatesArgs : PassArgs {
    const void* qd;           // fp16 tile
    float* ds_final;          // [N, H, 128, 128]: dS leaving chunk step_hi - 1 (or the sequence's last); unless
                              // step_lo is 0, dS entering chunk step_lo is left there for the next launch
    const void* dout;         // the caller's dO, the inputs' dtype or fp32 (dout_fp32), or null (zero); dP = scale dO
    int dout_fp32;
    float scale;
    float* du;                // [M, H, 16, 128] in: the outputs' share of dU (Mqk^T dP); out: all of dU
    void* dso;                // [M, H, 128, 128]: dS leaving each chunk, fp32 or bf16 (sc_bf16)
    float *dr, *ds0;          // [M, H, 16, 128] dR = INVb^T dU; [N, H, 128, 128] the entering states' gradient
    // The entering states' gradient alone (last: the fields above keep their offsets; read by the launcher only): the
    // instances with ENTRY (kda_bwd_states.cu §entry) write ds0 and ds_final and nothing else; du is read, not written.
    int entry_only = 0;
};

// The backward's token-parallel kernels (kda_bwd_chunk.cu), one block per (row, head). Row r of the tiles is the
// chunk of tokens row_tok[r] .. row_tok[r] + row_len[r] - 1 of the flat token axis (1 <= row_len[r] <= 16).
// Inputs as in Params (v: null), bf16 or fp16 (input_kind of PrepArgs, AdjointArgs); dout of q's dtype or fp32, or
// null (zero).
struct ChunkArgs : Params {
    const void* dout;
    int dout_fp32;            // dout is fp32 (else of the inputs' dtype)
    int H;
    float scale, lower_bound;
    const int64_t* row_tok;   // [M]
    const int* row_len;       // [M]
    int64_t rows;             // the rows this launch computes, row0 .. row0 + rows - 1 (of the tables' M)
    int64_t row0;
};
// The form of the backward's token-parallel kernels, in kda_nb.layout.Form.codes' numbers (kda_activations.cuh's
// GateForm, BetaForm, NormForm): the gate's form picks the kernel (a template parameter), beta's and the norm's are
// read at run time by the kernels of the other forms; FlashKDA's form (0, 0, 0) has kernels that read none of them.
// A given gate (2) reads no A_log and no dt_bias.
struct BwdForm { int gate = 0, beta = 0, norm = 0; };
// The chunk's small factors that kda_bwd_prepare keeps for kda_bwd_adjoint, [M, H, BWD_FACTOR_FLOATS] fp32:
// A = kd ki^T (strictly lower, [16][16]), INV = (I + diag(b) A)^-1 ([16][16]), then b, 1 / ||q|| and 1 / ||k||
// of the chunk's 16 tokens
constexpr int BWD_FACTOR_FLOATS = 2 * 16 * 16 + 3 * 16;
// kda_bwd_prepare: the activations and the chunk factors, the tiles StatesArgs and DStatesArgs read
struct PrepArgs : ChunkArgs {
    void *qd, *kd, *kr;       // [M, H, 16, 128] fp16
    float* du;                // [M, H, 16, 128]: Mqk^T dP, dP = scale dO
    float *invb, *decay;      // [M, H, 16, 16], [M, H, 128]
    float* factors;           // [M, H, BWD_FACTOR_FLOATS]
    BwdForm form;             // (last: FlashKDA's form reads its fields where it always did)
    int input_kind = INPUT_BF16;   // the inputs' element type (InputKind): a template parameter, read by the launcher only
};
// kda_bwd_adjoint: everything after the two passes, into the caller's gradients
struct AdjointArgs : ChunkArgs {
    const void *sc, *dso;     // [M, H, 128, 128] fp32, or bf16 (states_bf16)
    int states_bf16;
    const float *u, *r, *du, *dr;   // [M, H, 16, 128] from the passes
    const float* factors;     // [M, H, BWD_FACTOR_FLOATS] from kda_bwd_prepare
    void *dq, *dk, *dv, *dg;        // [total_tokens, H, 128] fp32, or the inputs' dtype (grads_in_type): tokens of the rows
                                    // only are written
    void* dbeta;              // [total_tokens, H], the same dtype
    int grads_in_type;        // the gradients in the inputs' dtype, bf16 or fp16 (else fp32)
    float *dA_part, *ddt_part;      // [M, H], [M, H, 128]: each row's share of dA_log and ddt_bias (zeros: a given gate)
    BwdForm form;
    int input_kind = INPUT_BF16;    // as PrepArgs
};

}  // namespace kda
