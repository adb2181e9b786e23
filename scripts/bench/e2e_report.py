#!/usr/bin/env python3
"""The markdown table of scripts/gpu-e2e.sh (issue #48) from its JSON: per size a row per
contender (tokens/s, ratio to PyTorch bf16 torch.compile, model TFLOP/s, MFU, peak GPU
memory, compile time, losses), the 125M loss-parity table, the issue's goals (met, or missed
by how much), fp8c's profile and the parts' status. Standard library only.

Usage: e2e_report.py E2E.json [OUT.md]     (the driver, e2e_run.py, calls `markdown` itself)
"""

import json
import sys

GIB = float(1 << 30)
BASELINE = "torch-compile-bf16"


def fmt(v, spec=".1f", none="–"):
    return none if v is None else format(v, spec)


def ratio(a, b):
    return a / b if a and b else None


def run_row(name, r, base):
    tps = r.get("tokens_per_s")
    rel = ratio(tps, base.get("tokens_per_s")) if base else None
    status = r.get("status", "?")
    if status != "ok" and r.get("reason"):
        status += f": {r['reason']}"
    mem = r.get("peak_mem_bytes")
    losses = r.get("losses") or []
    return "| " + " | ".join([
        name,
        f"{r.get('steps_done', 0)}/{r.get('steps', '?')}",
        fmt(tps, ",.0f"),
        fmt(rel, ".2f") + ("×" if rel else ""),
        fmt(r.get("model_tflops"), ".1f"),
        fmt(r.get("mfu") and 100 * r["mfu"], ".1f") + ("%" if r.get("mfu") else ""),
        fmt(mem and mem / GIB, ".1f"),
        fmt(r.get("compile_s"), ".1f"),
        fmt(losses[0] if losses else None, ".4f"),
        fmt(r.get("loss_tail"), ".4f"),
        status.replace("|", "/"),
    ]) + " |"


def size_table(name, s):
    plan, exp = s.get("plan", {}), s.get("export", {})
    lines = [f"### {name}: {fmt(exp.get('params'), ',d')} parameters, batch "
             f"{plan.get('batch')} × seq {plan.get('seq')}, {plan.get('steps')} steps "
             f"(first {plan.get('warm')} left out of the rates)", ""]
    if exp.get("config"):
        c = exp["config"]
        lines += [f"Config: hidden {c['hidden']}, layers {c['layers']}, heads {c['heads']} "
                  f"({c['kv_heads']} KV), FFN {c['ffn']}; {fmt(exp.get('flops_per_token'), ',d')} "
                  f"FLOPs per token; export {fmt(exp.get('export_s'))} s"
                  f"{'; ' + exp['source'] if exp.get('source') else ''}.", ""]
    lines += ["| contender | steps | tokens/s | vs torch.compile | model TFLOP/s | MFU | "
              "peak GiB | compile s | loss step 0 | loss (tail mean) | status |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    runs = s.get("runs", {})
    base = runs.get(BASELINE)
    for c, r in runs.items():
        lines.append(run_row(c, r, base if base and base.get("tokens_per_s") else None))
    notes = [(c, r["policy"]) for c, r in runs.items() if r.get("policy")]
    if notes:
        lines += ["", "fp8c's precision policy (GEMMs not in the run's precision, as fp8c printed it):"]
        lines += [f"- {c}: " + "; ".join(p) for c, p in notes]
    return lines


def parity_table(runs, names):
    picked = [(n, runs[n]) for n in names if n in runs and runs[n].get("losses")]
    if not picked:
        return []
    steps = max(len(r["losses"]) for _, r in picked)
    marks = sorted({0, steps // 4, steps // 2, 3 * steps // 4, steps - 1})
    head = "| run | " + " | ".join(f"step {m}" for m in marks) + " | tail mean | vs fp8c-bf16 |"
    lines = ["", "Loss parity (same init, same token stream, same order):", "", head,
             "|---|" + "---:|" * (len(marks) + 2)]
    ref = runs.get("fp8c-bf16", {}).get("loss_tail")
    for n, r in picked:
        ls = r["losses"]
        cells = [fmt(ls[m] if m < len(ls) else None, ".4f") for m in marks]
        gap = ratio(r.get("loss_tail"), ref)
        lines.append(f"| {n} | " + " | ".join(cells) + f" | {fmt(r.get('loss_tail'), '.4f')} | "
                     + (f"{(gap - 1) * 100:+.2f}%" if gap else "–") + " |")
    return lines


def goals(doc):
    big = doc.get("sizes", {}).get("1.3b", {}).get("runs", {})
    small = doc.get("sizes", {}).get("125m", {}).get("runs", {})
    base = big.get(BASELINE, {})
    out = []

    def speed(name, target, what):
        r = big.get(name, {})
        got = ratio(r.get("tokens_per_s"), base.get("tokens_per_s"))
        if got is None:
            return out.append((what, f"≥ {target}×", "not measured", "–"))
        verdict = "met" if got >= target else f"missed by {(1 - got / target) * 100:.0f}%"
        out.append((what, f"≥ {target}×", f"{got:.2f}×", verdict))

    speed("fp8c-fp8-delayed", 1.3, "1.3B: fp8c FP8 (delayed) tokens/s vs PyTorch bf16 torch.compile")
    speed("fp8c-fp8-current", 1.3, "1.3B: fp8c FP8 (current) tokens/s vs PyTorch bf16 torch.compile")
    speed("fp8c-bf16", 0.95, "1.3B: fp8c bf16 tokens/s vs PyTorch bf16 torch.compile")
    for name in ("fp8c-fp8-delayed", "fp8c-bf16"):
        m, b = big.get(name, {}).get("peak_mem_bytes"), base.get("peak_mem_bytes")
        what = f"1.3B: peak GPU memory, {name} vs torch.compile"
        if m and b:
            out.append((what, "≤ 1.00×", f"{m / b:.2f}× ({m / GIB:.1f} vs {b / GIB:.1f} GiB)",
                        "met" if m <= b else f"missed by {(m / b - 1) * 100:.0f}%"))
        else:
            out.append((what, "≤ 1.00×", "not measured", "–"))
    f8, bf = small.get("fp8c-fp8-delayed", {}), small.get("fp8c-bf16", {})
    what = "125M: fp8c FP8 loss (tail mean) vs fp8c bf16, 200 steps"
    if f8.get("loss_tail") and bf.get("loss_tail") and f8.get("steps_done") == f8.get("steps"):
        gap = abs(f8["loss_tail"] / bf["loss_tail"] - 1)
        out.append((what, "within 1%", f"{gap * 100:.2f}%",
                    "met" if gap <= 0.01 else f"missed by {(gap - 0.01) * 100:.2f} points"))
    else:
        out.append((what, "within 1%", "not measured (or cut short)", "–"))
    lines = ["", "## Goals (issue #48)", "", "| goal | target | measured | verdict |",
             "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in out]
    return lines


def profile_lines(p):
    if not p:
        return []
    lines = ["", f"## fp8c's profile ({p.get('what', '')})", ""]
    if p.get("status") != "ok":
        return lines + [f"Not recorded: {p.get('status')} {p.get('reason', '')}"]
    lines += [p.get("caveat", ""), "", "| op | ms/step | share | calls/step |", "|---|---:|---:|---:|"]
    for row in p.get("ops", [])[:20]:
        lines.append(f"| {row['op']} | {row['ms_per_run']:.3f} | {row['share'] * 100:.1f}% | "
                     f"{row['calls'] / max(p.get('runs', 1), 1):.0f} |")
    return lines


def attention_lines(a):
    if not a:
        return []
    lines = ["", "## Fused attention, forward + backward (issue #43's op) next to PyTorch SDPA", ""]
    lines.append(f"- PyTorch SDPA: {a.get('sdpa_text', 'not measured')}")
    lines.append(f"- fp8c: {a.get('fp8c_text', 'not measured')}")
    return lines


def markdown(doc):
    dry = doc.get("kind") == "dry-run"
    lines = ["# fp8c end-to-end training benchmark (scripts/gpu-e2e.sh)", ""]
    if dry:
        lines += ["**CPU DRY RUN: tiny models, fp8c on the emulated CUDA device, PyTorch on the "
                  "CPU. It checks that the script works; none of its figures is a measurement "
                  "of speed.**", ""]
    m = doc.get("machine", {})
    lines.append(f"Date {doc.get('started')}; commit {doc.get('commit')}; "
                 f"device {m.get('gpu', 'none')}; torch {m.get('torch', 'absent')}; "
                 f"text {doc.get('text', {}).get('bytes')} bytes "
                 f"(sha256 {str(doc.get('text', {}).get('sha256'))[:12]}).")
    c = doc.get("ceilings") or {}
    if c.get("bf16_matmul_8192_tflops"):
        lines.append(f"Measured ceilings: bf16 8192³ matmul {c['bf16_matmul_8192_tflops']:.0f} "
                     f"TFLOP/s, device copy {c['copy_gb_per_s']:.0f} GB/s.")
    lines += ["", doc.get("method", {}).get("summary", ""), ""]
    for name, s in doc.get("sizes", {}).items():
        lines += [""] + size_table(name, s)
        if name == "125m":
            lines += parity_table(s.get("runs", {}), doc.get("parity", []))
    ss = doc.get("same_start")
    if ss:
        lines += ["", "Same start (fp8c and PyTorch, f32, 125m, 3 steps): fp8c "
                  + ", ".join(f"{v:.6f}" for v in ss["fp8c_f32"]) + "; PyTorch "
                  + ", ".join(f"{v:.6f}" for v in ss["torch_f32"])
                  + f"; largest relative difference {max(ss['rel']):.1e} (tolerance {ss['tolerance']:g})."]
    if not dry:
        lines += goals(doc)
    lines += profile_lines(doc.get("profile"))
    lines += attention_lines(doc.get("attention"))
    lines += ["", "## Parts", "", "| part | status | seconds |", "|---|---|---:|"]
    for p in doc.get("parts", []):
        st = p["status"] + (f": {p['reason']}" if p.get("reason") else "")
        lines.append(f"| {p['name']} | {st.replace('|', '/')} | {p.get('seconds', 0):.0f} |")
    return "\n".join(lines) + "\n"


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    text = markdown(json.load(open(argv[0])))
    if len(argv) > 1:
        open(argv[1], "w").write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
