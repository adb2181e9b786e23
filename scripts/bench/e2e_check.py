#!/usr/bin/env python3
"""Checks what scripts/gpu-e2e.sh wrote (issue #48): e2e.json has every field the table and
the goals are made of for every run and part that finished, e2e.md has a row for each, and
$OUT holds the same files. The driver (e2e_run.py) runs it last and fails when it finds a
problem, so a dry run that writes an incomplete result fails rather than exits 0.
Standard library only.

Usage:
  e2e_check.py DIR [--out OUT]     check DIR/e2e.json and DIR/e2e.md (and OUT's copies)
  e2e_check.py --self-test DIR     each of a list of faults planted in copies of DIR's
                                   results must be found, and the results themselves pass
                                   (scripts/test.sh runs it on the dry run's results)
"""

import copy
import json
import math
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import e2e_report  # noqa: E402
import e2e_spec as spec  # noqa: E402

STATUSES = {"ok", "skipped", "failed", "timeout"}
FILES = ("e2e.json", "e2e.md", "logs.tar.gz")
# A dry run's runs and parts may be skipped only for these reasons (anything else, e.g. a
# budget spent, means the dry run did not check what it is for).
DRY_SKIPS = {
    "no torch here", "the committed export has no PyTorch weights", "no torch here to export it",
    "needs torch and the 125m export", "needs the GPU",
    "torchao is not installed (carry its wheel: see scripts/gpu-e2e.sh)",
}
FP8C_CONTENDERS = [n for n, side, _ in spec.CONTENDERS if side == "fp8c"]
TORCH_CONTENDERS = ["torch-eager-bf16", "torch-compile-bf16"]


def finite(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def section(md, head):
    """The markdown from the heading that starts with `head` to the next heading."""
    if head not in md:
        return ""
    rest = md.split(head, 1)[1]
    return "\n" + re.split(r"\n##+ ", rest, maxsplit=1)[0]


def check_run(where, r, plan, export, gpu):
    p = []
    steps = plan.get("steps")
    losses, elapsed = r.get("losses"), r.get("elapsed")
    if not isinstance(losses, list) or len(losses) != steps or not all(map(finite, losses)):
        p.append(f"{where}: losses should be {steps} finite numbers, got {losses!r}")
    if not isinstance(elapsed, list) or len(elapsed) != steps or elapsed != sorted(elapsed):
        p.append(f"{where}: elapsed should be {steps} increasing seconds, got {elapsed!r}")
    if r.get("steps_done") != steps:
        p.append(f"{where}: steps_done {r.get('steps_done')!r}, planned {steps}")
    for k in ("tokens_per_s", "step_s_mean", "step_s_median", "wall_s"):
        if not (finite(r.get(k)) and r[k] > 0):
            p.append(f"{where}: {k} missing or not positive ({r.get(k)!r})")
    for k in ("compile_s", "first_step_s", "loss_tail"):
        if not finite(r.get(k)):
            p.append(f"{where}: {k} missing ({r.get(k)!r})")
    if not r.get("command"):
        p.append(f"{where}: no command recorded")
    if export.get("flops_per_token") and not finite(r.get("model_tflops")):
        p.append(f"{where}: model_tflops missing though the export has flops_per_token")
    if gpu:
        for k in ("mfu", "peak_mem_bytes"):
            if not finite(r.get(k)):
                p.append(f"{where}: {k} missing on the GPU ({r.get(k)!r})")
    if r.get("contender", "").startswith("torch") and not isinstance(r.get("torch"), dict):
        p.append(f"{where}: no PyTorch summary (e2e_torch.py --summary)")
    return p


def check_doc(doc, md):
    p = []
    for k in ("kind", "started", "commit", "method", "machine", "sizes", "parts", "text"):
        if k not in doc:
            p.append(f"e2e.json: no '{k}'")
    if p:
        return p
    dry = doc["kind"] == "dry-run"
    gpu = not dry and bool(doc["machine"].get("gpu"))
    torch = bool(doc["machine"].get("torch_python"))
    ok_runs = set()
    for size, s in doc["sizes"].items():
        plan, export = s.get("plan") or {}, s.get("export") or {}
        runs = s.get("runs") or {}
        if runs:
            for k in ("config", "params", "flops_per_token"):
                if k not in export:
                    p.append(f"sizes.{size}.export: no '{k}'")
            if f"### {size}: " not in md:
                p.append(f"e2e.md: no table for {size}")
        for name, r in runs.items():
            where = f"sizes.{size}.runs.{name}"
            st = r.get("status")
            if st not in STATUSES:
                p.append(f"{where}: status {st!r}")
            elif st == "ok":
                ok_runs.add(name)
                p += check_run(where, r, plan, export, gpu)
            elif dry and not (st == "skipped" and r.get("reason") in DRY_SKIPS):
                p.append(f"{where}: {st} in a dry run ({r.get('reason')})")
            elif st != "skipped" and not r.get("reason"):
                p.append(f"{where}: {st} with no reason")
            if f"\n| {name} | " not in section(md, f"### {size}: "):
                p.append(f"e2e.md: no row for {name} under {size}")
    names = [q.get("name") for q in doc["parts"]]
    if len(set(names)) != len(names):
        p.append(f"e2e.json: a part listed twice ({names})")
    for q in doc["parts"]:
        st = q.get("status")
        if st not in STATUSES:
            p.append(f"parts.{q.get('name')}: status {st!r}")
        elif dry and st != "ok" and not (st == "skipped" and q.get("reason") in DRY_SKIPS):
            p.append(f"parts.{q.get('name')}: {st} in a dry run ({q.get('reason')})")
        if f"\n| {q.get('name')} | {st}" not in md:
            p.append(f"e2e.md: no row for part {q.get('name')}")
        if q.get("name") == "profile" and st == "ok":
            ops = (doc.get("profile") or {}).get("ops") or []
            if not ops or not all(finite(o.get("ms_per_run")) and o.get("calls") for o in ops):
                p.append("profile: no op rows parsed from fp8c's --profile output")
        if q.get("name") == "same-start" and st == "ok":
            ss = doc.get("same_start") or {}
            if len(ss.get("rel") or []) != 3 or not all(finite(v) and v <= ss.get("tolerance", 0)
                                                        for v in ss["rel"]):
                p.append(f"same_start: not 3 losses within tolerance ({ss})")
    if dry:
        ran = set(names)
        want = list(FP8C_CONTENDERS) + (TORCH_CONTENDERS if torch else [])
        for name in want:
            if name not in ok_runs:
                p.append(f"dry run: {name} finished in no size")
        for part in ("profile",) + (("same-start",) if torch else ()):
            if part in ran and not any(q["name"] == part and q["status"] == "ok" for q in doc["parts"]):
                p.append(f"dry run: part {part} did not pass")
    return p


def check_dir(d, out=None):
    try:
        doc = json.load(open(os.path.join(d, "e2e.json")))
        md = open(os.path.join(d, "e2e.md")).read()
    except (OSError, ValueError) as e:
        return [f"{d}: {type(e).__name__}: {e}"]
    p = check_doc(doc, md)
    if md != e2e_report.markdown(doc):
        p.append("e2e.md is not the table of e2e.json")
    if out:
        for f in FILES:
            a, b = os.path.join(d, f), os.path.join(out, f)
            if not os.path.exists(b) or open(a, "rb").read() != open(b, "rb").read():
                p.append(f"$OUT ({out}) has no copy of {f}, or an old one")
    return p


def first_ok(doc):
    for size, s in doc["sizes"].items():
        for name, r in s.get("runs", {}).items():
            if r.get("status") == "ok":
                return size, name
    raise SystemExit("self-test: the results have no finished run to plant faults in")


def self_test(d):
    """Plants faults in copies of d's results; each must be found."""
    doc = json.load(open(os.path.join(d, "e2e.json")))
    md = open(os.path.join(d, "e2e.md")).read()
    base = check_doc(doc, md)
    if base:
        print("self-test: the results themselves fail:\n  " + "\n  ".join(base))
        return 1
    size, name = first_ok(doc)

    def run_of(x):
        return x["sizes"][size]["runs"][name]

    faults = {
        "a run's tokens/s missing": lambda x: run_of(x).pop("tokens_per_s"),
        "a run's losses one short": lambda x: run_of(x)["losses"].pop(),
        "a loss NaN": lambda x: run_of(x)["losses"].__setitem__(0, float("nan")),
        "a run's status unknown": lambda x: run_of(x).__setitem__("status", "done"),
        "a finished run marked skipped for no reason": lambda x: run_of(x).update(status="skipped", reason="?"),
        "a part left running": lambda x: x["parts"][-1].__setitem__("status", "running"),
        "the export's FLOPs per token missing": lambda x: x["sizes"][size]["export"].pop("flops_per_token"),
        "the profile's rows missing": lambda x: x.setdefault("profile", {}).__setitem__("ops", []),
        "the machine missing": lambda x: x.pop("machine"),
    }
    missed = []
    for what, plant in faults.items():
        bad = copy.deepcopy(doc)
        plant(bad)
        if not check_doc(bad, e2e_report.markdown(bad)):
            missed.append(what)
    row = next(ln for ln in md.splitlines() if ln.startswith(f"| {name} | "))
    if not check_doc(doc, md.replace(row + "\n", "")):
        missed.append("a run's row missing from e2e.md")
    for what in missed:
        print(f"self-test: not found: {what}")
    n = len(faults) + 1
    print(f"e2e_check self-test: {n - len(missed)} of {n} planted faults found")
    return 1 if missed else 0


def main(argv):
    if len(argv) == 2 and argv[0] == "--self-test":
        return self_test(argv[1])
    if len(argv) in (1, 3) and (len(argv) == 1 or argv[1] == "--out"):
        p = check_dir(argv[0], argv[2] if len(argv) == 3 else None)
        for x in p:
            print(f"e2e_check: {x}")
        print(f"e2e_check: {argv[0]}: " + (f"{len(p)} problem(s)" if p else "complete"))
        return 1 if p else 0
    print(__doc__.split("Usage:")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
