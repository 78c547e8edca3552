"""The binding's refusals one call at a time, each named before it runs: the binding built by the host compiler
against stand-in launchers (kda_nb.kernels.binding_with_stub_launchers), as 04b's test_binding_takes_the_plan builds
it, and each of that test's plans it must refuse handed to `kda_forward` by keyword. A crash (seen on an H100 at
ea8c1f4, not on CPU machines) then names its call; Python's fault handler prints where.

    python -X faulthandler tools/binding_cases.py
"""
import faulthandler
import platform
import subprocess
import sys
import tempfile

import torch

import kda_nb.kernels as K


def main() -> int:
    faulthandler.enable()
    cxx = subprocess.run(['g++', '--version'], capture_output=True, text=True).stdout.splitlines()[:1]
    print(f"torch {torch.__version__}, CUDA visible: {torch.cuda.is_available()}, {' '.join(cxx)}, {platform.platform()}",
          flush=True)
    ext = K.binding_with_stub_launchers(tempfile.mkdtemp(), 'kda_binding_cases')
    q = torch.zeros(1, 64, 2, 128, dtype=torch.bfloat16)
    args = (q, q, q, q, torch.zeros(1, 64, 2, dtype=torch.bfloat16), 0.1, q.clone(), torch.zeros(2), torch.zeros(2, 128),
            -5.0, None, None, None, None)
    good = dict(path='chunked', steps=1, growth=1.0, k2_stages=4, k1_persistent=True, sms=132, keep=False,
                gate_form=0, beta_form=0, norm_form=0)
    cases = [dict(), dict(path='x'), dict(steps=9), dict(k2_stages=5), dict(sms=0), dict(growth=0.0),
             dict(path='fused', steps=2), dict(keep=True), dict(gate_form=3), dict(eager_loads=True),
             dict(path='decode', k3_rows=4), dict(path='decode', eager_loads=True, k3_rows=3)]
    print("positionally:", flush=True)
    calls = [('positional', lambda: ext.kda_forward(*args, *good.values()))]
    calls += [(f"by keyword, the plan with {bad}", lambda bad=bad: ext.kda_forward(*args, **(good | bad))) for bad in cases]
    for name, call in calls:
        print(f"  {name} ...", end=' ', flush=True)
        try:
            call()
            print("returned", flush=True)
        except RuntimeError as e:
            print(f"refused: {str(e).splitlines()[0][:100]}", flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
