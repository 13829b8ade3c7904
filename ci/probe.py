#!/usr/bin/env python3
"""A hardening probe of the camdelta tool (issue 38): hostile shapes on every command, hostile .npy inputs on every
operation, random command lines, and the output commit under failing renames and kills. Counts, over every input:
crashes (a signal, or an exit status the tool does not document), hangs (past the time limit), slow refusals (exit 2
or 3 after more than a second), partial writes (a failed run that changed --out, or left temporary files), and
sanitizer reports (with --asan, every run goes through that build too). Exits 1 when any count is not zero.

  python3 ci/probe.py BUILD [--asan BUILD_ASAN] [--runs N] [--seed S] [--work DIR]

BUILD holds camdelta, tests/cd_gen_inputs and tests/camdelta_faults (a normal build with the tests). Standard
library only (no NumPy)."""
import argparse
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

EXTREME = ["0", "-1", "+1", " 1", "1 ", "0x10", "1e3", "", "2147483648", "4294967295", "4294967296",
           "4611686018427387904", "9223372036854775808", "18446744073709551615", "18446744073709551616",
           "99999999999999999999999999", "1.5", "1,", ",1", "\x1b[31m"]
SMALL = ["1", "2", "3", "4", "8", "16", "24", "32"]
SANITIZER = ("AddressSanitizer", "UndefinedBehaviorSanitizer", "LeakSanitizer", "runtime error:", "ThreadSanitizer")
DOCUMENTED = {0, 1, 2, 3, 4, 5}


class Probe:
    def __init__(self, build, asan, work, seed):
        self.build, self.asan, self.work = build, asan, work
        self.cli = os.path.join(build, "camdelta")
        self.faults = os.path.join(build, "tests", "camdelta_faults")
        self.gen = os.path.join(build, "tests", "cd_gen_inputs")
        self.rng = random.Random(seed)
        self.totals = {"inputs": 0, "crashes": 0, "hangs": 0, "slow refusals": 0, "partial writes": 0,
                       "sanitizer reports": 0}
        self.examples = {}
        self.env = dict(os.environ)
        self.env.setdefault("CAMDELTA_CACHE_DIR", os.path.join(work, "cache"))
        self.env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                         "OMPI_MCA_plm": "isolated", "OMPI_MCA_btl": "self,vader", "OMPI_MCA_pml": "ob1",
                         "OMPI_MCA_mca_base_component_disable_dlclose": "1"})
        if asan:
            supp = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lsan.supp")
            self.env["LSAN_OPTIONS"] = f"suppressions={supp}:print_suppressions=0:fast_unwind_on_malloc=0"
            self.env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"

    def note(self, kind, what):
        self.totals[kind] += 1
        self.examples.setdefault(kind, []).append(what)

    def run(self, args, limit=10.0, hostile=False, binary=None, env=None, out=None):
        """One run on each build; returns the exit status of the first. hostile: a refusal (2 or 3) is expected, in a
        second."""
        code0 = None
        for exe in [binary or self.cli] + ([os.path.join(self.asan, "camdelta")] if self.asan and not binary else []):
            before = snapshot(out)
            self.totals["inputs"] += 1
            t0 = time.monotonic()
            try:
                p = subprocess.run([exe] + args, capture_output=True, timeout=limit, env=env or self.env,
                                   stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                self.note("hangs", " ".join(args))
                continue
            dt = time.monotonic() - t0
            err = p.stderr.decode("utf-8", "replace")
            code = p.returncode
            if code0 is None:
                code0 = code
            if code < 0 or code not in DOCUMENTED:
                self.note("crashes", f"{exe} {args} -> {code}: {err[-300:]}")
            if any(s in err for s in SANITIZER):
                self.note("sanitizer reports", f"{exe} {args}: {err[-600:]}")
            if hostile and code in (2, 3) and dt > 1.0 and exe == self.cli:
                self.note("slow refusals", f"{args}: {dt:.2f} s")
            if hostile and code not in (2, 3) and code >= 0 and exe == self.cli:
                self.note("crashes", f"{args}: exit {code}, expected a refusal: {err[-300:]}")
            if out is not None and code != 0 and snapshot(out) != before:
                self.note("partial writes", f"{args}: exit {code} changed {out}")
            if out is not None and leftovers(out):
                self.note("partial writes", f"{args}: temporary files left in {out}")
        return code0

    # ------------------------------------------------------------------------------------------ hostile shapes
    def shapes(self, n):
        forms = [["demo", "--shape"], ["bench", "--reps", "1", "--warmup", "0", "--shape"],
                 ["bench", "--packed", "--reps", "1", "--warmup", "0", "--shape"], ["tune", "--shape"],
                 ["demo", "--sequence-parallel", "--shape"],
                 ["bench", "--sequence-parallel", "--reps", "1", "--warmup", "0", "--shape"]]
        for _ in range(n):
            f = self.rng.choice(forms)
            fields = [self.rng.choice(SMALL) for _ in range(5)]
            for k in self.rng.sample(range(5), self.rng.randint(1, 3)):
                fields[k] = self.rng.choice(EXTREME)
            self.run(f + [",".join(fields)], hostile=True)
            g = [self.rng.choice(SMALL) for _ in range(4)]
            g[self.rng.randrange(4)] = self.rng.choice(EXTREME)
            self.run(["cache", "warm", "--shape", ",".join(g)], hostile=True)

    # ------------------------------------------------------------------------------------------ .npy inputs
    def npy_inputs(self, n):
        base = os.path.join(self.work, "inputs")
        sets = {"prep": ["prep", "1", "8", "2", "16"], "scan": ["scan-backward", "1", "2", "16", "3", "4"],
                "branch": ["branch", "1", "4", "2", "3", "2", "16"]}
        for name, gen in sets.items():
            d = os.path.join(base, name)
            os.makedirs(d, exist_ok=True)
            subprocess.run([self.gen, gen[0]] + gen[1:] + [d], check=True)
        ops = [("prep", "prep", []), ("prep", "prep-backward", []), ("scan", "scan", []),
               ("scan", "scan-backward", []), ("branch", "camera", ["--grid", "4,2,3", "--head-dim", "16"]),
               ("branch", "short-conv", ["--grid", "4,2,3"]), ("branch", "output-transform", []),
               ("branch", "branch", ["--grid", "4,2,3", "--chunk-size", "2"]),
               ("branch", "branch-backward", ["--grid", "4,2,3"]),
               ("scan", "scan", ["--sequence-parallel"]),
               ("branch", "branch", ["--grid", "4,2,3", "--sequence-parallel"])]
        for i in range(n):
            src, op, extra = self.rng.choice(ops)
            d = os.path.join(self.work, "npy", str(i % 4))
            shutil.rmtree(d, ignore_errors=True)
            shutil.copytree(os.path.join(base, src), d)
            victim = self.rng.choice(sorted(os.listdir(d)))
            mutate(os.path.join(d, victim), self.rng)
            out = os.path.join(d, "out")
            self.run(["run", op, "--quiet", "--in", d, "--out", out] + extra, out=out)

    # ------------------------------------------------------------------------------------------ command lines
    def command_lines(self, n):
        words = ["run", "demo", "bench", "tune", "cache", "info", "help", "warm", "list", "prep", "scan", "branch",
                 "camera", "short-conv", "output-transform", "branch-backward", "--shape", "--grid", "--patch",
                 "--head-dim", "--chunk-size", "--chunk-strategy", "--reps", "--warmup", "--in", "--out",
                 "--device", "--k-scale", "--norm-eps", "--algorithm", "--precision", "--seed", "--tokens-per-frame",
                 "--sequence-parallel", "--packed", "--reverse", "--final-state", "--all-grads", "--quiet", "--help",
                 "--json", "--only", "--save", "uniform", "first_frame", "chunkwise", "exact", "tf32", "-q", "="]
        values = EXTREME + SMALL + ["1,2,16,2,8", "4,2,3", "sana480", "nan", "inf", "-inf", "1e-300", "/", "."]
        for _ in range(n):
            argv = [self.rng.choice(["run", "demo", "bench", "tune", "cache", "help", "info"])]
            for _ in range(self.rng.randint(0, 6)):
                w = self.rng.choice(words)
                argv.append(w)
                if w.startswith("--") and self.rng.random() < 0.8:
                    argv.append(self.rng.choice(values))
            argv = [a for a in argv if a not in ("--save", "--json")]  # nothing written outside the work folder
            out = os.path.join(self.work, "cli-out")
            argv = [out if a == "--out" else a for a in argv]
            self.run(argv, limit=60.0)

    # ------------------------------------------------------------------------------------------ the commit
    def commit(self):
        d = os.path.join(self.work, "commit")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        subprocess.run([self.gen, "branch", "1", "4", "2", "3", "2", "16", d], check=True)
        out, keep = os.path.join(d, "out"), os.path.join(d, "keep")
        base = ["run", "branch-backward", "--quiet", "--in", d, "--grid", "4,2,3"]
        for o in (out, keep):
            subprocess.run([self.cli] + base + ["--out", o], check=True, env=self.env)
        names = sorted(os.listdir(keep))
        for fault in [f"{k}:{i}" for k in ("rename", "kill") for i in range(1, len(names) + 1)]:
            env = dict(self.env, CAMDELTA_FAULT=fault)
            self.totals["inputs"] += 1
            subprocess.run([self.faults] + base + ["--out", out, "--chunk-size", "2"], env=env,
                           capture_output=True, timeout=120)
            if fault.startswith("rename") and not same(out, keep, names):
                self.note("partial writes", f"{fault}: the previous set changed")
            if fault.startswith("rename") and leftovers(out):
                self.note("partial writes", f"{fault}: temporary files left")
            # the next set on the folder rolls a killed commit back; this one fails before its first rename
            env = dict(self.env, CAMDELTA_FAULT="rename:1")
            self.totals["inputs"] += 1
            subprocess.run([self.faults] + base + ["--out", out], env=env, capture_output=True, timeout=120)
            if not same(out, keep, names) or leftovers(out):
                self.note("partial writes", f"{fault}: not rolled back to the previous set")

    def report(self):
        width = max(len(k) for k in self.totals)
        for k, v in self.totals.items():
            print(f"{k:<{width}}  {v}")
        for k, ex in self.examples.items():
            print(f"\n{k} (first {min(len(ex), 5)} of {len(ex)}):")
            for e in ex[:5]:
                print("  " + e.replace("\n", " ")[:400])
        return 0 if all(v == 0 for k, v in self.totals.items() if k != "inputs") else 1


def snapshot(d):
    if not d or not os.path.isdir(d):
        return None
    return sorted((f, os.path.getsize(os.path.join(d, f)), os.stat(os.path.join(d, f)).st_mtime_ns)
                  for f in os.listdir(d))


def leftovers(d):
    if not os.path.isdir(d):
        return []
    return [f for f in os.listdir(d) if ".cdtmp." in f or ".cdold." in f or f.startswith(".camdelta-commit.")
            or ".npy.tmp." in f]


def same(a, b, names):
    for n in names:
        pa, pb = os.path.join(a, n), os.path.join(b, n)
        if not os.path.exists(pa) or open(pa, "rb").read() != open(pb, "rb").read():
            return False
    return True


def header(descr, shape):
    dims = "".join(f"{s}, " for s in shape) if len(shape) != 1 else f"{shape[0]},"
    h = ("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)).encode()
    h += b" " * ((64 - (10 + len(h) + 1) % 64) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h


def mutate(path, rng):
    """Replace an .npy with a hostile variant: a shape with an extreme or zero dimension (data of the original length),
    a wrong dtype, a truncated or extended file, a corrupt header, garbage, a FIFO, or a NaN / inf payload."""
    data = open(path, "rb").read()
    kind = rng.randrange(9)
    big = [0, 1 << 31, (1 << 32) - 1, 1 << 32, 1 << 62, (1 << 63) - 1, (1 << 64) - 1]
    if kind == 0:
        shape = [rng.choice([1, 2, 3, 4, 8, 16]) for _ in range(rng.randint(1, 4))]
        shape[rng.randrange(len(shape))] = rng.choice(big)
        data = header("<f4", shape) + data[128:]
    elif kind == 1:
        data = header(rng.choice(["<i4", ">f4", "<f2", "<f8", "|b1", "<c8", "O"]), [4]) + data[128:]
    elif kind == 2:
        data = data[: rng.randrange(len(data))]
    elif kind == 3:
        data = data + os.urandom(rng.randint(1, 64))
    elif kind == 4:
        i = rng.randrange(min(len(data), 128))
        data = data[:i] + bytes([rng.randrange(256)]) + data[i + 1:]
    elif kind == 5:
        data = os.urandom(rng.randint(0, 300))
    elif kind == 6:
        os.remove(path)
        os.mkfifo(path)
        return
    elif kind == 7 and len(data) > 128:
        n = (len(data) - 128) // 4
        vals = [float("nan"), float("inf"), float("-inf"), 3.4e38, -0.0]
        body = bytearray(data[128:])
        for _ in range(rng.randint(1, 4)):
            j = rng.randrange(n)
            body[4 * j:4 * j + 4] = struct.pack("<f", rng.choice(vals))
        data = data[:128] + bytes(body)
    else:
        data = data[:8] + struct.pack("<H", rng.randrange(65536)) + data[10:]
    open(path, "wb").write(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build")
    ap.add_argument("--asan", help="an AddressSanitizer + UBSan build (ci/test.sh --sanitize: build-asan)")
    ap.add_argument("--runs", type=int, default=200, help="inputs per part (shapes, .npy, command lines)")
    ap.add_argument("--seed", type=int, default=38)
    ap.add_argument("--work", help="a scratch folder (default: a new temporary one)")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="camdelta-probe-")
    os.makedirs(work, exist_ok=True)
    p = Probe(os.path.abspath(a.build), os.path.abspath(a.asan) if a.asan else None, work, a.seed)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    t0 = time.monotonic()
    for part in (p.shapes, p.npy_inputs, p.command_lines):
        part(a.runs)
    p.commit()
    rc = p.report()
    print(f"\nprobe: {time.monotonic() - t0:.0f} s, seed {a.seed}, work folder {work}")
    if not a.work and rc == 0:
        shutil.rmtree(work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
