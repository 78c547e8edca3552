"""One long sequence at few heads, whole against in segments (kda_nb.segments.kda_segmented on today's kernels):
the time of each and the segmented output's distance from the whole kernel's, to check segment_cost's model.

    python tools/segments_probe.py [--cases 65536x4,131072x8,65536x16] [--segs 1024,2048,4096,8192] [--out FILE]

Prints one line per (case, segment length) and writes the rows as JSON (default benchmarks/segments_probe.json)."""
import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kda_nb.api import kda                                          # noqa: E402
from kda_nb.layout import random_inputs, rel_rms                     # noqa: E402
from kda_nb.plan import sm_count                                    # noqa: E402
from kda_nb.segments import kda_segmented, segment_cost              # noqa: E402


def timed(fn, reps: int = 10) -> float:
    "Median milliseconds of `fn()` by CUDA events, after two warm-up calls."
    for _ in range(2): fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--cases', default='65536x4,131072x8,65536x16,32768x32', help='TxH, comma-separated')
    ap.add_argument('--segs', default='1024,2048,4096,8192', help='segment lengths (multiples of 16)')
    ap.add_argument('--out', default='benchmarks/segments_probe.json')
    a = ap.parse_args(argv)
    if not torch.cuda.is_available(): ap.error('needs a CUDA device')
    sms, rows = sm_count(torch.device('cuda')), []
    for case in a.cases.split(','):
        T, H = (int(x) for x in case.split('x'))
        inp = random_inputs(1, T, H, 128, device='cuda', seed=0)
        args = [inp[n] for n in ('q', 'k', 'v', 'g', 'beta', 'A_log', 'dt_bias')]
        s0 = inp['initial_state']
        with torch.inference_mode():
            whole = lambda: kda(*args, initial_state=s0)
            o_w, s_w = whole()
            ms_w = timed(whole)
            print(f"T = {T}, H = {H}: whole {ms_w:.3f} ms (model {segment_cost([T], H, sms).total_us / 1e3:.3f})", flush=True)
            rows.append(dict(T=T, H=H, seg_tokens=0, ms=ms_w, model_ms=segment_cost([T], H, sms).total_us / 1e3))
            for seg in (int(x) for x in a.segs.split(',')):
                if seg >= T: continue
                run = lambda: kda_segmented(*args, seg_tokens=seg, initial_state=s0)
                o, s = run()
                ms = timed(run)
                e_o, e_s = rel_rms(o, o_w), rel_rms(s, s_w)
                model = segment_cost([T], H, sms, seg).total_us / 1e3
                print(f"  segments of {seg}: {ms:.3f} ms (model {model:.3f}), out vs whole {e_o:.1e}, state {e_s:.1e}",
                      flush=True)
                rows.append(dict(T=T, H=H, seg_tokens=seg, ms=ms, model_ms=model, err_out=e_o, err_state=e_s))
    env = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, sms=sms)
    Path(a.out).write_text(json.dumps(dict(env=env, rows=rows), indent=1))
    print(f"wrote {a.out}")
    return 0


if __name__ == '__main__':
    sys.exit(main())
