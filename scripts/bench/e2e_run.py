#!/usr/bin/env python3
"""The driver of scripts/gpu-e2e.sh (issue #48): runs its parts in order under time budgets,
and after every run rewrites e2e.json and e2e.md (and logs.tar.gz) in the work folder and
copies them to $OUT, so a call cut off at its limit still brings back the parts done.
Last, e2e_check.py checks what was written (exit 1 on a problem). Standard library only
(torch runs in e2e_torch.py subprocesses).

Usage (scripts/gpu-e2e.sh sets it up; run that instead):
  e2e_run.py --fp8c BIN --work DIR [--dry-run] [--torch-python PY] [--parts a,b]
             [--budget SECONDS] [--out DIR]

Parts, in their default order (most needed first): env text 1.3b 125m profile ncu
attention 350m same-start. A size part exports the model (e2e_torch.py export) and trains every
contender of e2e_spec.CONTENDERS on it; 125m is the loss-parity run. Each part has its own
budget (PART_BUDGET, cut at --budget), each run a limit inside it; a run still going at
its limit is killed and recorded with the steps it logged.
"""

import argparse
import datetime
import hashlib
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import e2e_check  # noqa: E402
import e2e_report  # noqa: E402
import e2e_spec as spec  # noqa: E402

PARTS = ["env", "text", "1.3b", "125m", "profile", "ncu", "attention", "350m", "same-start"]
# Seconds per part on the GPU, each also cut at the call's --budget. The first five fill a
# 540 s call; later parts get what is left (or a second call: FP8C_E2E_PARTS=350m).
PART_BUDGET = {"env": 25, "text": 5, "1.3b": 290, "125m": 160, "profile": 40, "ncu": 90,
               "attention": 20, "350m": 150, "same-start": 60}
# Order of the contenders inside a size part (the goals' first).
ORDER = {
    "1.3b": ["torch-compile-bf16", "fp8c-fp8-delayed", "fp8c-bf16", "torch-eager-bf16",
             "fp8c-fp8-current", "torchao-fp8-tensorwise"],
    "125m": ["torch-eager-bf16", "fp8c-bf16", "fp8c-fp8-delayed", "torch-compile-bf16",
             "fp8c-fp8-current", "torchao-fp8-tensorwise"],
}
ORDER["350m"] = ORDER["1.3b"]
EXPORT_LIMIT = {"125m": 90, "350m": 120, "1.3b": 150}
RUN_LIMIT = 150  # seconds, at most, for one training run on the GPU


class Driver:
    def __init__(self, a):
        self.a = a
        self.dry = a.dry_run
        self.work = os.path.abspath(a.work)
        self.logs = os.path.join(self.work, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.t0 = time.time()
        self.deadline = self.t0 + a.budget
        self.doc = {
            "kind": "dry-run" if self.dry else "gpu",
            "started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": git_commit(),
            "budget_s": a.budget,
            "method": {"summary": method_summary(self.dry), "flops_per_token": "6 N + 12 L d T",
                       "peak_bf16_tflops": None if self.dry else spec.PEAK_BF16_TFLOPS,
                       "train": spec.TRAIN},
            "parity": spec.PARITY, "machine": {}, "sizes": {}, "parts": [],
        }
        self.plan = spec.DRY_PLAN if self.dry else spec.GPU_PLAN
        self.torch = a.torch_python if a.torch_python and torch_ok(a.torch_python) else None
        self.gpu = not self.dry and shutil.which("nvidia-smi") is not None
        self.env = dict(os.environ, PYTHONUNBUFFERED="1",
                        FP8C_KERNEL_CACHE=os.path.join(self.work, "kernel-cache"))
        self.failed = 0

    # ------------------------------------------------------------------ bookkeeping
    def left(self):
        return self.deadline - time.time()

    def publish(self):
        path = os.path.join(self.work, "e2e.json")
        with open(path + ".tmp", "w") as f:
            json.dump(self.doc, f, indent=1)
        os.replace(path + ".tmp", path)
        with open(os.path.join(self.work, "e2e.md"), "w") as f:
            f.write(e2e_report.markdown(self.doc))
        with tarfile.open(os.path.join(self.work, "logs.tar.gz"), "w:gz") as t:
            t.add(self.logs, arcname="logs")
        out = self.a.out or os.environ.get("OUT")
        if out:
            os.makedirs(out, exist_ok=True)
            for f in ("e2e.json", "e2e.md", "logs.tar.gz"):
                shutil.copy(os.path.join(self.work, f), out)

    def part(self, name, fn):
        budget = PART_BUDGET[name] if not self.dry else self.a.budget
        t = time.time()
        end = min(t + budget, self.deadline)
        entry = {"name": name, "status": "running", "seconds": 0}
        self.doc["parts"].append(entry)
        if end - t < 5:
            entry.update(status="skipped", reason=f"the call's budget is spent ({self.left():.0f} s left)")
        else:
            print(f"== {name} (budget {end - t:.0f} s)", flush=True)
            try:
                status = fn(end) or ("ok", None)
            except Exception as e:  # noqa: BLE001 - a part's failure is recorded, the rest run
                status = ("failed", f"{type(e).__name__}: {e}")
            entry["status"], reason = status
            if reason:
                entry["reason"] = reason
            if entry["status"] == "failed":
                self.failed += 1
        entry["seconds"] = round(time.time() - t, 1)
        print(f"   {entry['status']} {entry.get('reason', '')} ({entry['seconds']} s)", flush=True)
        self.publish()

    def run(self, name, cmd, limit, mem=False):
        """Runs cmd (its own process group) for at most `limit` s; output to logs/NAME.log.
        Returns (status, rc, wall seconds, peak device memory bytes or None, output)."""
        log = os.path.join(self.logs, f"{name}.log")
        sampler = MemSampler() if mem and self.gpu else None
        t = time.time()
        with open(log, "w") as f:
            f.write("$ " + " ".join(cmd) + "\n")
            f.flush()
            p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=self.env,
                                 cwd=ROOT, start_new_session=True)
            try:
                rc = p.wait(timeout=max(limit, 1))
                status = "ok" if rc == 0 else "failed"
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                rc = p.wait()
                status = "timeout"
        peak = sampler.stop() if sampler else None
        out = open(log, errors="replace").read()
        return status, rc, time.time() - t, peak, out

    # ------------------------------------------------------------------ parts
    def part_env(self, end):
        m = self.doc["machine"]
        m["python"] = sys.version.split()[0]
        m["fp8c"] = self.a.fp8c
        m["torch_python"] = self.torch
        if self.torch:
            m["torch"] = subprocess.run([self.torch, "-c", "import torch, transformers; print("
                                         "torch.__version__, transformers.__version__)"],
                                        capture_output=True, text=True).stdout.strip()
        if self.gpu:
            q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                "--format=csv,noheader"], capture_output=True, text=True)
            m["gpu"] = q.stdout.strip()
            m["nsys"] = shutil.which("nsys")
            m["ncu"] = shutil.which("ncu")
            if self.torch:
                path = os.path.join(self.logs, "ceilings.json")
                st, _, _, _, out = self.run("ceilings", [self.torch, os.path.join(HERE, "e2e_torch.py"),
                                                         "ceilings", "--out", path], end - time.time())
                if st == "ok":
                    self.doc["ceilings"] = json.load(open(path))
                else:
                    return ("failed", "the ceilings (torch matmul and copy) failed; see logs/ceilings.log")
        elif self.dry:
            m["gpu"] = "none (dry run: fp8c on --device cuda-emulated, PyTorch on the CPU)"
        else:
            m["gpu"] = None
            return ("failed", "no nvidia-smi here: not a GPU machine (on the CPU, use --dry-run)")
        return None

    def part_text(self, end):
        need = max(p["batch"] * p["seq"] * p["steps"] for p in self.plan.values()) + 4096
        self.text = os.path.join(self.work, "tokens.txt")
        data = token_text(need, self.dry)
        with open(self.text, "wb") as f:
            f.write(data)
        self.doc["text"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                            "source": "README.md" if self.dry else
                            "the repository's Markdown and Rust sources, in sorted order"}
        return None

    def part_size(self, size, end):
        plan = self.plan[size]
        s = self.doc["sizes"].setdefault(size, {"plan": plan, "runs": {}})
        model = self.export(size, s, end)
        if model is None:
            return ("skipped", s["export"].get("reason"))
        for name in ORDER[size]:
            side, settings = spec.CONTENDER[name]
            r = {"contender": name, "steps": plan["steps"], "status": "skipped"}
            s["runs"][name] = r
            if side == "torch" and not self.torch:
                r["reason"] = "no torch here"
                continue
            if side == "torch" and not model.get("torch_dir"):
                r["reason"] = "the committed export has no PyTorch weights"
                continue
            limit = min(end - time.time(), RUN_LIMIT if not self.dry else self.left())
            if limit < 10:
                r["reason"] = "the part's budget is spent"
                continue
            if side == "torch":
                r.update(self.torch_run(size, name, settings, model, plan, limit))
            else:
                r.update(self.fp8c_run(size, name, settings, model, plan, limit))
            self.rates(r, s.get("export", {}), plan)
            losses = r.get("losses") or []
            if r["status"] == "ok" and (len(losses) != plan["steps"] or
                                        not all(math.isfinite(v) for v in losses)):
                r["status"] = "failed"
                r["reason"] = f"{len(losses)} of {plan['steps']} steps logged, or a loss not finite"
            if r["status"] == "failed" or (r["status"] == "timeout" and self.dry):
                self.failed += 1
            self.publish()
        return None

    def export(self, size, s, end):
        """The size's model: exported here (torch present), or the committed tiny export."""
        d = os.path.join(self.work, "models", size)
        if self.torch:
            plan = self.plan[size]
            cmd = [self.torch, os.path.join(HERE, "e2e_torch.py"), "export", "--size", size,
                   "--seq", str(plan["seq"]), "--out", d] + (["--dry"] if self.dry else [])
            limit = min(end - time.time(), EXPORT_LIMIT[size] if not self.dry else self.left())
            st, rc, wall, _, out = self.run(f"{size}.export", cmd, limit)
            if st != "ok":
                s["export"] = {"status": st, "reason": f"export {st} (exit {rc}); see logs/{size}.export.log"}
                self.failed += 1
                return None
            s["export"] = json.load(open(os.path.join(d, "export.json")))
            s["export"]["wall_s"] = round(wall, 1)
            return {"onnx": os.path.join(d, "model.onnx"), "torch_dir": d}
        if self.dry and size == "1.3b":
            cfg = spec.DRY_SIZES[size]
            s["export"] = {"config": cfg, "params": spec.total_params(cfg),
                           "flops_per_token": spec.flops_per_token(cfg, self.plan[size]["seq"]),
                           "source": f"the committed {spec.COMMITTED_EXPORT} (no torch here)"}
            return {"onnx": os.path.join(ROOT, spec.COMMITTED_EXPORT)}
        s["export"] = {"status": "skipped", "reason": "no torch here to export it"}
        return None

    def fp8c_run(self, size, name, settings, model, plan, limit):
        csv = os.path.join(self.logs, f"{size}.{name}.csv")
        t = spec.TRAIN
        cmd = [self.a.fp8c, "train", model["onnx"], "--text", self.text,
               "--seq-len", str(plan["seq"]), "--batch", str(plan["batch"]),
               "--steps", str(plan["steps"]), "--lr", str(t["lr"]),
               "--weight-decay", str(t["weight_decay"]), "--clip-grad-norm", str(t["clip_grad_norm"]),
               "--device", "cuda-emulated" if self.dry else "cuda",
               "--precision", settings["precision"], "--log", csv, "--quiet"]
        if "recipe" in settings:
            cmd += ["--recipe", settings["recipe"]]
        if self.dry and settings["precision"] == "fp8":
            # The tiny stand-ins' GEMMs are all below the policy's size rules: without this the
            # dry run's FP8 runs would run no FP8 GEMM at all.
            cmd += ["--min-fp8-flops", "0"]
        st, rc, wall, peak, out = self.run(f"{size}.{name}", cmd, limit, mem=True)
        r = {"status": st, "wall_s": round(wall, 1), "peak_mem_bytes": peak, "command": cmd_text(cmd)}
        m = re.search(r"\(([0-9.]+) steps/s, ([0-9.]+) s to compile\)", out)
        if m:
            r["setup_s"] = float(m.group(2))
        r["policy"] = [ln.strip() for ln in out.splitlines() if re.match(r"\s+\d+ GEMMs? stays? ", ln)]
        if st != "ok":
            r["reason"] = (f"exit {rc}" if st == "failed" else f"killed at its {limit:.0f} s limit") + f"; {last_line(out)}"
        r.update(read_csv(csv))
        return r

    def torch_run(self, size, name, settings, model, plan, limit):
        csv = os.path.join(self.logs, f"{size}.{name}.csv")
        summary = os.path.join(self.logs, f"{size}.{name}.json")
        cmd = [self.torch, os.path.join(HERE, "e2e_torch.py"), "train", "--model-dir",
               model["torch_dir"], "--mode", settings["mode"], "--text", self.text,
               "--batch", str(plan["batch"]), "--seq", str(plan["seq"]),
               "--steps", str(plan["steps"]), "--log", csv, "--summary", summary,
               "--device", "cpu" if self.dry else "cuda"] + (["--fp8-all"] if self.dry else [])
        st, rc, wall, peak, out = self.run(f"{size}.{name}", cmd, limit, mem=True)
        r = {"status": st, "wall_s": round(wall, 1), "peak_mem_bytes": peak, "command": cmd_text(cmd)}
        if st != "ok":
            r["reason"] = (f"exit {rc}" if st == "failed" else f"killed at its {limit:.0f} s limit") + f"; {last_line(out)}"
            if settings["mode"] == "torchao" and "No module named 'torchao'" in out:
                r["status"], r["reason"] = "skipped", "torchao is not installed (carry its wheel: see scripts/gpu-e2e.sh)"
        if os.path.exists(summary):
            extra = json.load(open(summary))
            r["setup_s"] = extra.pop("setup_s", None)
            r["torch"] = extra
        r.update(read_csv(csv))
        return r

    def rates(self, r, export, plan):
        """tokens/s, model TFLOP/s, MFU and compile time from the run's per-step log."""
        el = r.get("elapsed") or []
        k, warm = len(el), plan["warm"]
        r["steps_done"] = k
        if k >= 2:
            w = min(warm, k - 1)
            step_s = (el[-1] - el[w - 1]) / (k - w)
            steps = [b - a for a, b in zip(el[w - 1:], el[w:])]
            r["step_s_mean"], r["step_s_median"] = step_s, statistics.median(steps)
            r["first_step_s"] = el[0]
            r["tokens_per_s"] = plan["batch"] * plan["seq"] / step_s
            r["compile_s"] = (r.get("setup_s") or 0.0) + max(el[w - 1] - w * step_s, 0.0)
            fpt = export.get("flops_per_token")
            if fpt:
                r["model_tflops"] = fpt * r["tokens_per_s"] / 1e12
                if not self.dry:
                    r["mfu"] = r["model_tflops"] / spec.PEAK_BF16_TFLOPS
        losses = r.get("losses") or []
        if losses:
            r["loss_tail"] = statistics.fmean(losses[-50:])

    def part_profile(self, end):
        size = os.environ.get("FP8C_E2E_PROFILE_SIZE", "125m" if self.torch or not self.dry else "1.3b")
        model = self.model_of(size)
        if model is None:
            return ("skipped", f"no {size} model (its part did not export one)")
        plan = self.plan[size]
        cmd = [self.a.fp8c, "train", model, "--text", self.text, "--seq-len", str(plan["seq"]),
               "--batch", str(plan["batch"]), "--steps", "3" if not self.dry else "2",
               "--device", "cuda-emulated" if self.dry else "cuda", "--precision", "fp8",
               "--profile", "--profile-nodes", "20", "--quiet"] + (["--min-fp8-flops", "0"] if self.dry else [])
        st, rc, wall, _, out = self.run("profile", cmd, end - time.time())
        p = {"status": st, "what": f"fp8c train --precision fp8 (delayed), {size}, "
                                   f"{cmd[cmd.index('--steps') + 1]} steps, --profile",
             "command": cmd_text(cmd), "size": size,
             "caveat": "Host wall time per step of the program; on CUDA an observed (profiled) run "
                       "downloads every step's outputs, so the shares describe that eager, "
                       "observed run: the per-kernel times are ncu's (part ncu) where it ran."}
        p.update(parse_profile(out))
        if st != "ok":
            p["reason"] = f"exit {rc}; {last_line(out)}"
        self.doc["profile"] = p
        return None if st == "ok" else ("failed", p["reason"])

    def part_attention(self, end):
        """The slot for issue #43's fused attention: fp8c's attention ops from the profile
        (when its CUDA program has them) next to PyTorch SDPA at the same shape."""
        p = self.doc.get("profile") or {}
        size = p.get("size", "125m")
        cfg = (spec.DRY_SIZES if self.dry else spec.SIZES)[size]
        plan = self.plan[size]
        a = {"shape": {"batch": plan["batch"], "heads": cfg["heads"], "kv_heads": cfg["kv_heads"],
                       "seq": plan["seq"], "head_dim": spec.head_dim(cfg)}}
        self.doc["attention"] = a
        ops = {o["op"]: o for o in p.get("ops", [])}
        fused = [o for o in ("attention", "attention_grad") if o in ops]
        if fused:
            ms = sum(ops[o]["ms_per_run"] for o in fused)
            a["fp8c_ms_per_step"] = {o: ops[o]["ms_per_run"] for o in fused}
            a["fp8c_text"] = (f"fused {' + '.join(fused)}: {ms:.3f} ms per step over {cfg['layers']} "
                              f"layers in the profiled run, {ms / cfg['layers']:.3f} ms per layer")
        elif p.get("ops"):
            a["fp8c_text"] = ("no fused attention op in fp8c's CUDA program (it ran attention "
                              "unfused: matmul, softmax and softmax_grad rows of the profile)")
        else:
            a["fp8c_text"] = "no profile recorded"
        if self.gpu and self.torch:
            path = os.path.join(self.logs, "sdpa.json")
            sh = a["shape"]
            st, _, _, _, out = self.run("sdpa", [self.torch, os.path.join(HERE, "e2e_torch.py"), "sdpa",
                                                 "--batch", str(sh["batch"]), "--heads", str(sh["heads"]),
                                                 "--kv-heads", str(sh["kv_heads"]), "--seq", str(sh["seq"]),
                                                 "--head-dim", str(sh["head_dim"]), "--out", path],
                                        end - time.time())
            if st == "ok":
                a["sdpa"] = json.load(open(path))
                a["sdpa_text"] = (f"forward {a['sdpa']['forward_ms']:.3f} ms, forward + backward "
                                  f"{a['sdpa']['forward_backward_ms']:.3f} ms per layer "
                                  f"({a['sdpa']['forward_backward_tflops']:.0f} TFLOP/s causal)")
            else:
                a["sdpa_text"] = f"failed: {last_line(out)}"
        else:
            a["sdpa_text"] = "not run (needs CUDA PyTorch)"
        return None

    def part_ncu(self, end):
        size = "125m"
        model = self.model_of(size)
        if self.dry or not self.gpu:
            return ("skipped", "needs the GPU")
        ncu = shutil.which("ncu")
        if ncu is None or model is None:
            return ("skipped", "no ncu on this machine" if ncu is None else "no 125m model")
        plan = self.plan[size]
        csvp = os.path.join(self.logs, "ncu.csv")
        cmd = [ncu, "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv",
               "--log-file", csvp, "--launch-count", os.environ.get("FP8C_E2E_NCU_KERNELS", "3000"),
               self.a.fp8c, "train", model, "--text", self.text, "--seq-len", str(plan["seq"]),
               "--batch", str(plan["batch"]), "--steps", "2", "--device", "cuda",
               "--precision", "fp8", "--quiet"]
        st, rc, wall, _, out = self.run("ncu", cmd, end - time.time())
        n = {"status": st, "command": cmd_text(cmd)}
        n.update(parse_ncu(csvp))
        self.doc["ncu"] = n
        return None if st == "ok" else (st, f"exit {rc}; {last_line(out)}")

    def part_same_start(self, end):
        """The check behind "same init, same token stream": 3 steps in f32 of the 125m model
        by fp8c (--device cpu in a dry run, cuda on the GPU) and by PyTorch eager f32 (TF32
        off) must give the same losses, within 1e-4 relative, step by step."""
        model = self.model_of("125m")
        if not self.torch or model is None:
            return ("skipped", "needs torch and the 125m export")
        plan = dict(self.plan["125m"], steps=3, warm=1)
        dev = "cpu" if self.dry else "cuda"
        fp = os.path.join(self.logs, "same-start.fp8c.csv")
        t = spec.TRAIN
        cmd = [self.a.fp8c, "train", model, "--text", self.text, "--seq-len", str(plan["seq"]),
               "--batch", str(plan["batch"]), "--steps", "3", "--lr", str(t["lr"]),
               "--weight-decay", str(t["weight_decay"]), "--clip-grad-norm", str(t["clip_grad_norm"]),
               "--device", dev, "--precision", "f32", "--log", fp, "--quiet"]
        st1, _, _, _, out1 = self.run("same-start.fp8c", cmd, (end - time.time()) / 2)
        tp = os.path.join(self.logs, "same-start.torch.csv")
        cmd = [self.torch, os.path.join(HERE, "e2e_torch.py"), "train", "--model-dir",
               os.path.dirname(model), "--mode", "eager-f32", "--text", self.text,
               "--batch", str(plan["batch"]), "--seq", str(plan["seq"]), "--steps", "3",
               "--log", tp, "--summary", os.path.join(self.logs, "same-start.torch.json"),
               "--device", dev]
        st2, _, _, _, out2 = self.run("same-start.torch", cmd, end - time.time())
        if st1 != "ok" or st2 != "ok":
            return ("failed", f"fp8c {st1}, torch {st2}: {last_line(out1 if st1 != 'ok' else out2)}")
        a, b = read_csv(fp)["losses"], read_csv(tp)["losses"]
        rel = [abs(x - y) / abs(y) for x, y in zip(a, b)]
        self.doc["same_start"] = {"fp8c_f32": a, "torch_f32": b, "rel": rel, "tolerance": 1e-4}
        if len(a) != 3 or len(b) != 3 or not max(rel) <= 1e-4:
            return ("failed", f"f32 losses differ: fp8c {a}, torch {b}")
        return ("ok", f"f32 losses agree within {max(rel):.1e} over 3 steps")

    def model_of(self, size):
        """The ONNX file of `size` that its part exported, or in a dry run without torch the
        committed export (the "1.3b" slot's); None if there is none."""
        d = os.path.join(self.work, "models", size, "model.onnx")
        if os.path.exists(d):
            return d
        return os.path.join(ROOT, spec.COMMITTED_EXPORT) if self.dry and not self.torch else None


# ---------------------------------------------------------------------- helpers

class MemSampler:
    """Peak device memory in use (nvidia-smi every 50 ms) above what was in use before."""

    def __init__(self):
        self.base = query_mem()
        self.peak = self.base
        self.p = subprocess.Popen(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                                   "-lms", "50"], stdout=subprocess.PIPE, text=True)
        self.t = threading.Thread(target=self.read, daemon=True)
        self.t.start()

    def read(self):
        for line in self.p.stdout:
            try:
                self.peak = max(self.peak, int(line.split()[0]))
            except (ValueError, IndexError):
                pass

    def stop(self):
        self.p.terminate()
        self.p.wait()
        self.t.join(timeout=2)
        return (self.peak - self.base) * (1 << 20) if self.base is not None else None


def query_mem():
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=20)
        return int(q.stdout.split()[0])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def read_csv(path):
    """losses and elapsed seconds from a `step,loss,...,elapsed_s` log (fp8c's or ours)."""
    if not os.path.exists(path):
        return {}
    lines = open(path).read().splitlines()
    if not lines:
        return {}
    head = lines[0].split(",")
    li, ei = head.index("loss"), head.index("elapsed_s")
    losses, elapsed = [], []
    for ln in lines[1:]:
        f = ln.split(",")
        if len(f) > max(li, ei):
            losses.append(float(f[li]))
            elapsed.append(float(f[ei]))
    return {"losses": losses, "elapsed": elapsed}


def parse_profile(out):
    """fp8c's `--profile` tables as JSON rows."""
    m = re.search(r"profile: (\d+) runs, per run ([0-9.]+) ms in all, ([0-9.]+) ms in steps", out)
    if not m:
        return {"ops": []}
    ops, nodes = [], []
    for ln in out[m.end():].splitlines():
        o = re.match(r"^  (\S+)\s+([0-9.]+)\s+([0-9.]+)%\s+(\d+)\s+(\d+) nodes?$", ln)
        n = re.match(r"^\s+([0-9.]+)\s+([0-9.]+)%\s+(\d+)\s+(\S+)\s+(\S+)$", ln)
        if o:
            ops.append({"op": o.group(1), "ms_per_run": float(o.group(2)),
                        "share": float(o.group(3)) / 100, "calls": int(o.group(4)),
                        "nodes": int(o.group(5))})
        elif n:
            nodes.append({"node": n.group(5), "op": n.group(4), "ms_per_run": float(n.group(1)),
                          "share": float(n.group(2)) / 100, "calls": int(n.group(3))})
    return {"runs": int(m.group(1)), "ms_per_run": float(m.group(2)),
            "ms_in_steps": float(m.group(3)), "ops": ops, "slowest_nodes": nodes}


def parse_ncu(path):
    """ncu's CSV (one row per kernel launch and metric): time per kernel name, top 30."""
    if not os.path.exists(path):
        return {"kernels": []}
    import csv
    rows = [r for r in csv.reader(open(path, errors="replace")) if r]
    head = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "Metric Value" in r), None)
    if head is None:
        return {"kernels": []}
    h = rows[head]
    ki, vi, ui = h.index("Kernel Name"), h.index("Metric Value"), h.index("Metric Unit")
    agg = {}
    for r in rows[head + 1:]:
        try:
            v = float(r[vi].replace(",", ""))
        except (ValueError, IndexError):
            continue
        scale = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0}.get(r[ui], 1e-6)
        t, c = agg.get(r[ki], (0.0, 0))
        agg[r[ki]] = (t + v * scale, c + 1)
    total = sum(t for t, _ in agg.values()) or 1.0
    top = sorted(agg.items(), key=lambda kv: -kv[1][0])[:30]
    return {"launches": sum(c for _, c in agg.values()), "total_ms": total,
            "kernels": [{"kernel": k[:120], "ms": t, "share": t / total, "launches": c}
                        for k, (t, c) in top]}


def token_text(need, dry):
    """The token stream: README.md (dry run), else the repository's Markdown and Rust
    sources in sorted order, repeated until `need` bytes."""
    if dry:
        files = [os.path.join(ROOT, "README.md")]
    else:
        files = []
        for top in ("crates", "passes", "src"):
            for d, _, fs in sorted(os.walk(os.path.join(ROOT, top))):
                files += [os.path.join(d, f) for f in sorted(fs) if f.endswith((".rs", ".md"))]
        files = [os.path.join(ROOT, f) for f in ("README.md", "ARCHITECTURE.md")] + sorted(files)
    data = b"".join(open(f, "rb").read() for f in files if os.path.exists(f))
    while len(data) < need:
        data += data
    return data[: max(need, min(len(data), 8 << 20))]


def torch_ok(py):
    try:
        return subprocess.run([py, "-c", "import torch, transformers, safetensors, onnxscript"],
                              capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def git_commit():
    """The commit of the fp8c binary (FP8C_E2E_COMMIT: gpu-e2e.sh --build records it beside
    the carried binary, since the GPU machine's copy of the tree has no git), else HEAD."""
    if os.environ.get("FP8C_E2E_COMMIT"):
        return os.environ["FP8C_E2E_COMMIT"]
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip() or os.environ.get("FP8C_E2E_COMMIT", "?")
    except (OSError, subprocess.TimeoutExpired):
        return os.environ.get("FP8C_E2E_COMMIT", "?")


def cmd_text(cmd):
    return " ".join(os.path.relpath(c, ROOT) if os.path.isabs(c) and c.startswith(ROOT) else c for c in cmd)


def last_line(out):
    lines = [ln for ln in out.splitlines() if ln.strip() and not ln.startswith("$ ")]
    return lines[-1][:300] if lines else "no output"


def method_summary(dry):
    return ("Every contender trains the same initial weights (one export: the ONNX file for fp8c, "
            "its safetensors twin for PyTorch) on the same byte windows in fp8c's order, AdamW "
            f"lr {spec.TRAIN['lr']}, weight decay {spec.TRAIN['weight_decay']} on rank-2 weights, "
            f"gradients clipped to norm {spec.TRAIN['clip_grad_norm']}; each step ends with the "
            "loss read back on the host. tokens/s = batch × seq / mean step time after the warm-up "
            "steps; model FLOPs per token 6 N + 12 L d T (N: GEMM weights; PaLM's formula); "
            + ("MFU is not computed in a dry run. " if dry else
               f"MFU against {spec.PEAK_BF16_TFLOPS} TFLOP/s dense BF16 for every contender; ")
            + "peak memory: the device's memory in use (nvidia-smi every 50 ms) above what it was "
              "before the run; compile s: time before the first step plus the warm-up steps' "
              "excess over a timed step.")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fp8c", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--torch-python", default=None)
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--budget", type=float, default=540)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    parts = [p for p in a.parts.replace(",", " ").split() if p]
    bad = [p for p in parts if p not in PARTS]
    if bad:
        ap.error(f"unknown part(s) {bad}; the parts are {' '.join(PARTS)}")
    for must in ("text", "env"):  # every run needs the token file; the table the machine
        if must not in parts:
            parts.insert(0, must)
    parts.sort(key=PARTS.index)
    d = Driver(a)
    for p in parts:
        fn = {"env": d.part_env, "text": d.part_text, "profile": d.part_profile,
              "attention": d.part_attention, "ncu": d.part_ncu,
              "same-start": d.part_same_start}.get(p)
        d.part(p, fn or (lambda end, p=p: d.part_size(p, end)))
    print(open(os.path.join(d.work, "e2e.md")).read())
    # One closing line in the form test runners end with: every run and every part that is
    # not a size (its runs are counted), by outcome.
    done = [r["status"] for s in d.doc["sizes"].values() for r in s.get("runs", {}).values()]
    done += [p["status"] for p in d.doc["parts"] if p["name"] not in spec.SIZES]
    ok = sum(st == "ok" for st in done)
    # On the GPU a run cut at its time limit keeps the steps it logged; in the dry run a
    # timeout is a failure.
    skipped = sum(st == "skipped" or (st == "timeout" and not d.dry) for st in done)
    # What was written must be whole: every finished run's fields, its table row, $OUT's copies.
    problems = e2e_check.check_dir(d.work, d.a.out or os.environ.get("OUT"))
    for x in problems:
        print(f"gpu-e2e: incomplete result: {x}")
    print(f"gpu-e2e: {ok} passed, {len(done) - ok - skipped} failed, {skipped} skipped"
          + (f"; {len(problems)} problem(s) in e2e.json/e2e.md" if problems else ""))
    return 1 if d.failed or problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
