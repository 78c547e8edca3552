// kda_switch.h: where a runtime flag becomes a template parameter. A kernel variant (a k-split of the backward's
// passes, K2's number of stages, the chunks' states in bf16, ...) is a template flag of one kernel; its launcher
// names the values that are built and hands the flag to `dispatch`, which calls the body once with the value as a
// compile-time constant. A value outside the list is an error of the caller (cudaErrorInvalidValue), never a
// silent fallback. Adding a variant: one more value in the launcher's list.
//
//   return dispatch<1, 2>(a.ksplit, [&](auto ks) { constexpr int KS = decltype(ks)::value; ... });
//
// Plain C++17 with the CUDA runtime's headers, for the launchers' host code.
#pragma once
#include <type_traits>
#include <cuda_runtime.h>

#include "kda_args.h"

namespace kda {

// f(std::integral_constant<int, V>{}) for the one V of Vs that equals `value`; cudaErrorInvalidValue if none does
template <int... Vs, typename F>
cudaError_t dispatch(int value, F&& f) {
    cudaError_t err = cudaErrorInvalidValue;
    (void)((value == Vs ? (err = f(std::integral_constant<int, Vs>{}), true) : false) || ...);
    return err;
}

// a yes/no flag (any non-zero value is yes): f(std::true_type{}) or f(std::false_type{})
template <typename F>
cudaError_t dispatch_bool(bool value, F&& f) {
    return value ? f(std::true_type{}) : f(std::false_type{});
}

// the gate's form (GateForm, kda_activations.cuh) as a template parameter: every form the forward's kernels are built
// for, in one place. f(std::integral_constant<int, form>{})
template <typename F>
cudaError_t dispatch_gate(int gate_form, F&& f) {
    return dispatch<0, 1, 2>(gate_form, static_cast<F&&>(f));
}

// §forward forms: the instance of the forward's K1, fused kernel and K3 for a call's form. FlashKDA's form (gate, beta,
// norm = 0, 0, 0, one q and k head per value head) has its own instance with no run-time form at all (FORMS false,
// kda_chunk_prep.cuh: the machine code it had before the forms); every other form the gate's instance that reads
// beta's and the norm's forms and the head groups (FORMS true). f(std::integral_constant<int, gate>{},
// std::bool_constant<FORMS>{}); cudaErrorInvalidValue for a number no form has. A launcher keeps per-instance state
// at `fwd_instance(gate, FORMS)`, 0 to 3.
constexpr int FWD_INSTANCES = 4;
constexpr int fwd_instance(int gate, bool forms) { return forms ? gate : 3; }
template <typename F>
cudaError_t dispatch_fwd_form(int gate, int beta, int norm, int group_shift, F&& f) {
    if (beta < 0 || beta > 2 || norm < 0 || norm > 1 || group_shift < 0) return cudaErrorInvalidValue;
    if (gate == 0 && beta == 0 && norm == 0 && group_shift == 0) return f(std::integral_constant<int, 0>{}, std::false_type{});
    return dispatch_gate(gate, [&](auto gf) { return f(gf, std::true_type{}); });
}

// §input: the forward's form and the inputs' element type (kda_args.h: InputKind) together, the one switch of the
// forward's K1, fused kernel and K3: f(std::integral_constant<int, gate>{}, std::bool_constant<FORMS>{},
// std::integral_constant<int, input>{}). bf16 inputs: every instance of dispatch_fwd_form. fp16 inputs: the gate's
// instance with FORMS true only, FlashKDA's form included (it reads beta's and the norm's forms, 0 and 0, at run time:
// the same numbers, and three fewer instances to build). A launcher keeps per-instance state at
// `fwd_input_instance(gate, FORMS, input)`, 0 to FWD_INPUT_INSTANCES - 1 (the bf16 ones first, as fwd_instance).
constexpr int FWD_INPUT_INSTANCES = FWD_INSTANCES + 3;
constexpr int fwd_input_instance(int gate, bool forms, int input) {
    return input == INPUT_F16 ? FWD_INSTANCES + gate : fwd_instance(gate, forms);
}
template <typename F>
cudaError_t dispatch_fwd(int gate, int beta, int norm, int group_shift, int input, F&& f) {
    if (input == INPUT_BF16)
        return dispatch_fwd_form(gate, beta, norm, group_shift, [&](auto gf, auto forms) {
            return f(gf, forms, std::integral_constant<int, INPUT_BF16>{});
        });
    if (input != INPUT_F16 || beta < 0 || beta > 2 || norm < 0 || norm > 1 || group_shift < 0) return cudaErrorInvalidValue;
    return dispatch_gate(gate, [&](auto gf) { return f(gf, std::true_type{}, std::integral_constant<int, INPUT_F16>{}); });
}
// §dims: the head dims as a template flag. The forward's kernels take K, V <= 128 (multiples of 8) natively in their
// instances with DIMS true, which read FwdArgs::dim_k, dim_v (DecodeArgs's) at run time; the instances with DIMS false
// are the kernels built for K = V = 128, their machine code as it is without the feature. dims: (K, V) != (128, 128).
// DIMS true goes with the gate's instance with FORMS true (as fp16: FlashKDA's form reads its forms, 0, 0, at run time),
// for either input type: six more instances of K1 and of K3 (each of its STORES), and K2 twice its own (dispatch_bool
// on dims); the fused kernel has none (kda_fwd_fused.cu says why). f(std::integral_constant<int, gate>{}, std::bool_constant<FORMS>{},
// std::integral_constant<int, input>{}, std::bool_constant<DIMS>{}); per-instance state at
// `fwd_dims_instance(gate, FORMS, input, DIMS)`, 0 to FWD_DIMS_INSTANCES - 1 (fwd_input_instance's first).
constexpr int FWD_DIMS_INSTANCES = FWD_INPUT_INSTANCES + 6;
constexpr int fwd_dims_instance(int gate, bool forms, int input, bool dims) {
    return dims ? FWD_INPUT_INSTANCES + 3 * (input == INPUT_F16 ? 1 : 0) + gate : fwd_input_instance(gate, forms, input);
}
template <typename F>
cudaError_t dispatch_fwd_dims(int gate, int beta, int norm, int group_shift, int input, bool dims, F&& f) {
    if (!dims)
        return dispatch_fwd(gate, beta, norm, group_shift, input, [&](auto gf, auto forms, auto in) {
            return f(gf, forms, in, std::false_type{});
        });
    if (beta < 0 || beta > 2 || norm < 0 || norm > 1 || group_shift < 0) return cudaErrorInvalidValue;
    return dispatch<INPUT_BF16, INPUT_F16>(input, [&](auto in) {
        return dispatch_gate(gate, [&](auto gf) { return f(gf, std::true_type{}, in, std::true_type{}); });
    });
}
// whether a call's head dims need the instances with DIMS; a K or V outside [8, 128] or not a multiple of 8 is no
// shape of theirs (the binding refuses it first: kda_checks.h)
constexpr bool dims_valid(int k, int v) { return k >= 8 && k <= 128 && k % 8 == 0 && v >= 8 && v <= 128 && v % 8 == 0; }
constexpr bool native_dims(int k, int v) { return k != 128 || v != 128; }

// The inputs' element type alone (K2, whose instances have no form): f(std::integral_constant<int, input>{})
template <typename F>
cudaError_t dispatch_input(int input, F&& f) {
    return dispatch<INPUT_BF16, INPUT_F16>(input, static_cast<F&&>(f));
}

// §backward forms: the form of the backward's token-parallel kernels (kda_bwd_chunk.cu). The gate's form is a
// template parameter of one kernel family (its exact path for unbounded decays exists only where the form has no
// bound); beta's and the norm's forms are uniform run-time branches of the same kernels. FlashKDA's form (gate,
// beta, norm = 0, 0, 0) keeps kernels of its own with no run-time form at all (FORMS false), the machine code it had.
// f(std::integral_constant<int, gate>{}, std::bool_constant<FORMS>{}); cudaErrorInvalidValue for a number no form has.
template <typename F>
cudaError_t dispatch_bwd_form(int gate, int beta, int norm, F&& f) {
    if (beta < 0 || beta > 2 || norm < 0 || norm > 1) return cudaErrorInvalidValue;
    if (gate == 0 && beta == 0 && norm == 0) return f(std::integral_constant<int, 0>{}, std::false_type{});
    return dispatch<0, 1, 2>(gate, [&](auto gf) { return f(gf, std::true_type{}); });
}

// §backward input: the backward's form and the inputs' element type (kda_args.h: InputKind) together, the one switch of
// the backward's token-parallel kernels (kda_bwd_prepare, kda_bwd_adjoint): f(std::integral_constant<int, gate>{},
// std::bool_constant<FORMS>{}, std::integral_constant<int, input>{}). bf16 inputs: every instance of dispatch_bwd_form.
// fp16 inputs: the gate's instance with FORMS true only, FlashKDA's form included (it reads beta's and the norm's forms,
// 0 and 0, at run time: the same numbers, one instance fewer of each kernel to build), as dispatch_fwd does. The passes
// (kda_bwd_states.cu), which have no form, take the type alone (dispatch_input).
template <typename F>
cudaError_t dispatch_bwd(int gate, int beta, int norm, int input, F&& f) {
    if (input == INPUT_BF16)
        return dispatch_bwd_form(gate, beta, norm, [&](auto gf, auto forms) {
            return f(gf, forms, std::integral_constant<int, INPUT_BF16>{});
        });
    if (input != INPUT_F16 || beta < 0 || beta > 2 || norm < 0 || norm > 1) return cudaErrorInvalidValue;
    return dispatch<0, 1, 2>(gate, [&](auto gf) { return f(gf, std::true_type{}, std::integral_constant<int, INPUT_F16>{}); });
}

}  // namespace kda
