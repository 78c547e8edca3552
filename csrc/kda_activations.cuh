// kda_activations.cuh: KDA's per-token activations, forward and backward, for every kernel (K1 and the fused
// kernel's preparation, K3 decode, the backward's prepare and adjoint): the gate's log-decay, beta (the write
// strength) and the L2 normalisation of q and k. Only the math of one value lives here; how a kernel lays its
// tokens and channels over threads (and so how it sums over channels) stays in the kernel.
//
// Each activation has a form, a compile-time parameter of its functions: a form is an enum value and an
// `if constexpr` branch in these functions, so the kernels that call them need no second copy.
//
// Python's reference: kda_nb.activations (gate, beta, l2_normalize) and kda_nb.backward (activate_backward).
#pragma once
#include "kda_common.cuh"

namespace kda {

// §forms
// The numbers are the binding's: kda_nb.layout.Form.codes gives them, kda_forward takes them.
enum class GateForm : int {
    SafeSigmoid = 0,   // log-decay = bound * sigmoid(exp(A_log) (g + dt_bias)), bound = lower_bound < 0
    Softplus = 1,      // log-decay = -exp(A_log) softplus(g + dt_bias): Kimi Linear's, no lower bound
    Given = 2,         // log-decay = g, computed by the caller (any value <= 0; no A_log, no dt_bias)
};
enum class BetaForm : int {
    Logit = 0,         // beta = sigmoid(x) of the caller's x
    Prob = 1,          // beta = x, the caller's write strength
    LogitNegEig = 2,   // beta = 2 sigmoid(x), in (0, 2) (allow_neg_eigval)
};
enum class NormForm : int {
    L2 = 0,            // x_hat = x / sqrt(|x|^2 + NORM_EPS), inside the kernels
    Outside = 1,       // x_hat = x: the caller normalised q and k
};

constexpr float NORM_EPS = 1e-6f;      // kda_nb.activations.l2_normalize

// §sigmoid: 1 / (1 + e^-x) with the fast exponential (ex2.approx: a relative error of a few 1e-7 for the arguments
// here) and a fast reciprocal, against ~10 instructions of an IEEE divide: 0 or 1 where e^-x leaves fp32's range,
// as it should be.
__device__ __forceinline__ float sigmoid(float x) { return __fdividef(1.0f, 1.0f + __expf(-x)); }
// sigmoid(x) sigmoid(-x) = e / (1 + e)^2 with e = exp(-|x|) <= 1: no cancellation where sigmoid(x) is near 1. Exact
// (expf and an IEEE divide): its fast form puts the adjoint, held to 168 registers for three blocks an SM, past them.
__device__ __forceinline__ float sigmoid_slope(float x) {
    const float e = expf(-fabsf(x)), d = 1.f + e;
    return e / (d * d);
}

// §gate: the gate's rate A = exp(A_log) of a head; its argument z of one channel of one token (the safe gate:
// A (g + dt_bias); the softplus gate: g + dt_bias; a given gate: g itself); the factor w = gate_scale(A, bound) that
// turns the form's function of z into the log-decay (the safe gate: its lower bound; the softplus gate: -A; a given
// gate: 1), and log_decay(z, w'), the log-decay for w' = w (times log2(e) where a kernel keeps the cumulative decay
// in base 2, or 0 to drop a padding token). The forward's kernels take A by the fast exponential (gate_rate), the
// backward's by the exact one (gate_rate_exact): they differ by an ulp or two.
template <GateForm F = GateForm::SafeSigmoid>
__device__ __forceinline__ float gate_rate(float A_log) { return __expf(A_log); }
template <GateForm F = GateForm::SafeSigmoid>
__device__ __forceinline__ float gate_rate_exact(float A_log) { return expf(A_log); }
template <GateForm F = GateForm::SafeSigmoid>
__device__ __forceinline__ float gate_arg(float g, float A, float bias) {
    if constexpr (F == GateForm::SafeSigmoid) return A * (g + bias);
    else if constexpr (F == GateForm::Softplus) return g + bias;
    else return g;
}
template <GateForm F = GateForm::SafeSigmoid>
__device__ __forceinline__ float gate_scale(float A, float bound) {
    if constexpr (F == GateForm::SafeSigmoid) return bound;
    else if constexpr (F == GateForm::Softplus) return -A;
    else return 1.f;
}
// softplus(z) = log(1 + e^z) = max(z, 0) + log(1 + e^-|z|), with the fast exponential and logarithm: an absolute
// error of a few 1e-7, never an overflow
__device__ __forceinline__ float softplus(float z) { return fmaxf(z, 0.f) + __logf(1.f + __expf(-fabsf(z))); }
template <GateForm F = GateForm::SafeSigmoid>
__device__ __forceinline__ float log_decay(float z, float w) {
    if constexpr (F == GateForm::SafeSigmoid) return w * sigmoid(z);
    else if constexpr (F == GateForm::Softplus) return w * softplus(z);
    else return w * z;
}
// The gate's backward, for the backward's kernels: d log_decay / dz for w = gate_scale(A, bound) (the safe gate:
// bound s(z) s(-z); the softplus gate: -A sigmoid(z); a given gate: 1), and gate_backward, from da = d(loss) / d
// log_decay of one channel of one token: returns d(loss) / dg and, for a real token (`real`), adds the token's shares
// of d(loss) / dA_log and d(loss) / ddt_bias to dA_log, ddt. The safe gate: dz = da slope, dg = dz A, dA_log += dz z
// (z = A (g + dt_bias)), ddt += dz A; the softplus gate: dz = da slope, dg = ddt = dz, dA_log += da log_decay (the
// log-decay is -A softplus(z), A = exp(A_log)); a given gate: dg = da, and no A_log or dt_bias.
template <GateForm F = GateForm::SafeSigmoid>
__device__ __forceinline__ float log_decay_slope(float z, float w) {
    if constexpr (F == GateForm::SafeSigmoid) return w * sigmoid_slope(z);
    else if constexpr (F == GateForm::Softplus) return w * sigmoid(z);
    else return w;
}
template <GateForm F = GateForm::SafeSigmoid>
__device__ __forceinline__ float gate_backward(float da, float z, float A, float w, bool real, float& dA_log, float& ddt) {
    if constexpr (F == GateForm::Given) return da;
    const float dz = da * log_decay_slope<F>(z, w);
    if constexpr (F == GateForm::SafeSigmoid) {
        if (real) {
            dA_log = fmaf(dz, z, dA_log);
            ddt = fmaf(dz, A, ddt);
        }
        return dz * A;
    } else {
        if (real) {
            dA_log = fmaf(da, log_decay<F>(z, w), dA_log);
            ddt += dz;
        }
        return dz;
    }
}

// §beta: the write strength of a token from the caller's value x (logits: sigmoid(x); probabilities: x itself;
// allow_neg_eigval: 2 sigmoid(x), in (0, 2)), and d beta / dx (b (1 - b) as s(x) s(-x): exact where b is near 1)
template <BetaForm F = BetaForm::Logit>
__device__ __forceinline__ float beta_of(float x) {
    if constexpr (F == BetaForm::Logit) return sigmoid(x);
    else if constexpr (F == BetaForm::Prob) return x;
    else return 2.f * sigmoid(x);
}
// The forward's kernels take beta's and the norm's forms as uniform runtime values (FwdArgs / DecodeArgs beta_form,
// norm_form: a select per token, no second instantiation); these pick the template of the value's form.
// §forms: what an instance reads of them. FORMS false is FlashKDA's form compiled in (beta as logits, q and k
// normalised inside, as many q and k heads as value heads): that instance reads no form, the code it had before the
// forms existed (kda_switch.h: dispatch_fwd_form). FORMS true reads beta's and the norm's forms and the head groups.
template <bool FORMS, class Args> __device__ __forceinline__ int beta_form_of(const Args& p) { return FORMS ? p.beta_form : 0; }
template <bool FORMS, class Args> __device__ __forceinline__ int norm_form_of(const Args& p) { return FORMS ? p.norm_form : 0; }
template <bool FORMS, class Args> __device__ __forceinline__ int group_shift_of(const Args& p) { return FORMS ? p.group_shift : 0; }
__device__ __forceinline__ float beta_value(int form, float x) {
    return form == static_cast<int>(BetaForm::Prob) ? beta_of<BetaForm::Prob>(x)
         : form == static_cast<int>(BetaForm::LogitNegEig) ? beta_of<BetaForm::LogitNegEig>(x) : beta_of<BetaForm::Logit>(x);
}
template <BetaForm F = BetaForm::Logit>
__device__ __forceinline__ float beta_slope(float x) {
    if constexpr (F == BetaForm::Logit) return sigmoid_slope(x);
    else if constexpr (F == BetaForm::Prob) return 1.f;
    else return 2.f * sigmoid_slope(x);
}

// §norm: r = 1 / sqrt(|x|^2 + eps) from a token's sum of squares over its channels (x_hat = r x; 1 where the
// caller normalised), and the gradient of
// x from that of x_hat: r (dx_hat - (x_hat . dx_hat) x_hat), given the token's dot = x_hat . dx_hat
template <NormForm F = NormForm::L2>
__device__ __forceinline__ float inv_norm(float sum_sq) {
    if constexpr (F == NormForm::L2) return rsqrtf(sum_sq + NORM_EPS);
    else return 1.f;                   // normalised by the caller
}
__device__ __forceinline__ float inv_norm_value(int form, float sum_sq) {
    return form == static_cast<int>(NormForm::Outside) ? inv_norm<NormForm::Outside>(sum_sq) : inv_norm<NormForm::L2>(sum_sq);
}
template <NormForm F = NormForm::L2>
__device__ __forceinline__ float norm_backward(float r, float dx_hat, float dot, float x_hat) {
    if constexpr (F == NormForm::L2) return r * (dx_hat - dot * x_hat);
    else return dx_hat;                // x_hat = x: the identity
}

}  // namespace kda
