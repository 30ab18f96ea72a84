"""Kill training at random moments, then resume it: is anything lost, and is the result exact?

Each trial starts a tiny ``train reverse`` run whose epochs are a few updates long (so a
good share of its time is spent saving checkpoints), kills it with SIGKILL or SIGINT at a
random moment, checks that ``last/`` (when it exists) loads, resumes the run to the end with
``--resume``, and compares the resumed run's per-update losses with an uninterrupted run's.

    python benchmarks/bench_kill_resume.py --trials 30
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRAIN = ["train", "reverse", "--n-symbols", "6", "--max-len", "6", "--n-train", "256", "--n-val", "32",
         "--n-test", "32", "--batch-size", "64", "--d-model", "32", "--d-ff", "64", "--layers", "1",
         "--epochs", "12", "--log-every", "1000"]


def run(out, *extra):
    return subprocess.Popen([sys.executable, "-m", "numpytransformer", *TRAIN, "--out", str(out), *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def losses(out):
    return [s["loss"] for s in json.loads((Path(out) / "history.json").read_text())["steps"]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    env_note = f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}"
    rnd = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        ref = Path(tmp) / "reference"
        start = time.perf_counter()
        assert run(ref).wait() == 0
        full = time.perf_counter() - start
        want = losses(ref)
        counts = {"trials": 0, "killed": 0, "last_loadable": 0, "no_last_yet": 0, "leftover_tmp_after_kill": 0,
                  "leftover_tmp_after_resume": 0, "resumed_exactly": 0, "failures": []}
        for i in range(args.trials):
            out = Path(tmp) / f"t{i}"
            sig = signal.SIGKILL if i % 3 else signal.SIGINT
            p = run(out)
            time.sleep(rnd.uniform(0.2, 0.9) * full)
            p.send_signal(sig)
            p.wait()
            counts["trials"] += 1
            counts["killed"] += p.returncode != 0
            counts["leftover_tmp_after_kill"] += len(list(out.glob("**/.*.tmp")))
            if not (out / "last" / "checkpoint.json").exists():
                counts["no_last_yet"] += 1
                p = run(out)  # nothing was saved: start again
            else:
                check = subprocess.run([sys.executable, "-m", "numpytransformer", "eval", "--checkpoint",
                                        str(out / "last"), "--n", "20"], capture_output=True, text=True)
                counts["last_loadable"] += check.returncode == 0
                if check.returncode:
                    counts["failures"].append(f"trial {i}: last/ does not load: {check.stderr.strip()}")
                p = run(out, "--resume")
            err = p.communicate()[1]
            if p.returncode:
                counts["failures"].append(f"trial {i}: resume failed: {err.strip()[-300:]}")
                continue
            counts["leftover_tmp_after_resume"] += len(list(out.glob("**/.*.tmp")))
            if losses(out) == want:
                counts["resumed_exactly"] += 1
            else:
                counts["failures"].append(f"trial {i}: the resumed losses differ from the uninterrupted run's")
        print(json.dumps({"uninterrupted_run_s": round(full, 1), "env": env_note, **counts}, indent=1))
        return 1 if counts["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
