"""Signed-load benchmark: N minisign-signed project tools against the same N unsigned (issue 3 "Speed").

unsigned          N generated project packages, no lock, no signature: every tool ends ``pending``.
signed-cold       the same packages, each with ``tool.lock`` + ``tool.lock.minisig`` by a trusted key:
                  every tool ``active``. The in-process verification cache is cleared and the state
                  has no record of earlier verifications, so every signature (2 Ed25519 checks:
                  the lock and the trusted comment) is verified: the first load after a change.
signed-remembered a new process after ``tooldir scan`` (or a host's ``remember_load``): the
                  in-process cache is cleared, the state remembers the successful verifications.
signed-recording  signed-cold into a fresh state folder, as a real first load runs: the load also
                  records the versions and verifications it established (user state writes).
signed-rebuild    a fresh ``Loader`` in the same process (what the watcher's rebuilds see):
                  verification results are cached by content hash of key + signature + lock,
                  parsed locks and signatures by their bytes.

Each variant: ``Loader(make_config(project=..., user_dirs=[], policy=..., read_only=True)).load()``
(signed-recording without ``read_only``), warm page
cache (one untimed pass), median of several interleaved runs. Target: signed <= 1.2x unsigned.

Whole process (issue 14 item 4): ``python -m tooldir scan --json --project P --policy F`` with a
fresh state folder every round (a real first load: nothing remembered), signed against unsigned,
min/median/max of wall time and CPU (the process and its helper). Target: signed <= 1.3x unsigned.

On a machine whose cores are busy with other work, wall time follows CPU time: the Ed25519 work
alone (printed, measured in the same run, with libsodium as the helper verifies: about half of a
whole unsigned load's CPU; OpenSSL's, printed beside it, about as much as the whole load) sets a
floor of about 1 + that / unsigned CPU under the wall ratio, wherever the verification runs.

Helper crossover: in-process signed-cold loads with the signature helper process
(:mod:`tooldir.trust.verify_pool`) forced on and forced off, at a few small sizes: where the
helper starts to pay is ``MIN_PACKAGES``.

    python3 benchmarks/bench_signed.py [--quick] [--sizes 1000,10000] [--runs 5] [--json]
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.generate import generate
from benchmarks.sizes import parse_args
from benchmarks.sizes import workdir as workdir_for
from tooldir import signatures
from tooldir.model import Source, Status
from tooldir.policy import KeysPolicy, Policy, ProjectSourcePolicy, SourcesPolicy
from tooldir.read.discover import RootSpec, open_root, scan_package
from tooldir.snapshot.loader import Loader, make_config, remember_load
from tooldir.trust import keys, verify_pool, verify_worker
from tooldir.trust.lockfile import LOCK, MINISIG, render_lock


def sign_tree(root: Path, key: keys.MinisignSecretKey) -> None:
    """Write tool.lock and tool.lock.minisig for every package (what tooldir lock + sign do)."""
    spec = RootSpec(Source.PROJECT, str(root))
    fd, diags = open_root(spec)
    if fd is None:
        raise SystemExit(f"cannot open {root}: {diags}")
    try:
        for name in sorted(os.listdir(root)):
            scan = scan_package(fd, spec, name, Policy().limits)
            lock = render_lock(name, 1, None, scan.files)
            (root / name / LOCK).write_bytes(lock)
            (root / name / MINISIG).write_bytes(keys.minisign_sign(key, lock, f"tool:{name}\tversion:1"))
    finally:
        os.close(fd)


def prepare(n: int, workdir: Path) -> tuple[Path, Path, str]:
    """(unsigned project, signed project, trusted public key line); reused when already there."""
    unsigned, signed = workdir / f"unsigned-{n}", workdir / f"signed-{n}"
    pub_file = workdir / f"signed-{n}.pub"
    for project in (unsigned, signed):
        project.mkdir(parents=True, exist_ok=True)
        (project / ".tooldir").mkdir(exist_ok=True)
        os.chmod(project / ".tooldir", 0o755)  # noqa: S103 -- readable by all is fine; writable by others is refused
    if not (unsigned / ".tooldir" / "tools").exists():
        generate(unsigned / ".tooldir" / "tools", n, seed=0)
    if not pub_file.exists():
        generate(signed / ".tooldir" / "tools", n, seed=0)
        key, _secret, public = keys.generate_minisign_key()
        sign_tree(signed / ".tooldir" / "tools", key)
        pub_file.write_text(public)
    return unsigned, signed, pub_file.read_text().splitlines()[1]


def _load(project: Path, policy: Policy, state: Path, loader: Loader | None = None) -> tuple[int, int]:
    # read_only: a load records what it verified, which would turn the empty state into a
    # remembered one after the first pass; the recording itself is timed in ``signed-recording``.
    # A fresh Loader has a cold TrustCache; passing one reuses its in-process parse/verify results.
    config = make_config(project=project, user_dirs=[], policy=policy, state_dir=state, read_only=True)
    snap = (loader or Loader(config)).load()
    return (
        sum(1 for t in snap.tools if t.status is Status.ACTIVE),
        sum(1 for t in snap.tools if t.status is Status.PENDING),
    )


def bench(n: int, runs: int, workdir: Path) -> dict[str, Any]:
    unsigned, signed, public = prepare(n, workdir)
    # every risk level allowed, so every package reaches the signature check
    project = ProjectSourcePolicy(require=("approval", "signature", "pin"), max_risk="exec")
    policy = Policy(sources=SourcesPolicy(project=project), keys=KeysPolicy(minisign=(public,)))
    empty_state, remembered_state = workdir / f"state-empty-{n}", workdir / f"state-remembered-{n}"

    last: list[Loader] = []  # the loader of the last cold run: its TrustCache is warm

    def cold() -> tuple[int, int]:
        config = make_config(project=signed, user_dirs=[], policy=policy, state_dir=empty_state, read_only=True)
        last[:] = [Loader(config)]
        return _load(signed, policy, empty_state, last[0])

    fresh_states = iter(range(1 << 30))

    def recording() -> tuple[int, int]:
        state = workdir / f"state-fresh-{n}-{next(fresh_states)}"
        snap = Loader(make_config(project=signed, user_dirs=[], policy=policy, state_dir=state)).load()
        return (
            sum(1 for t in snap.tools if t.status is Status.ACTIVE),
            sum(1 for t in snap.tools if t.status is Status.PENDING),
        )

    def remembered() -> tuple[int, int]:
        return _load(signed, policy, remembered_state)

    variants: dict[str, Callable[[], tuple[int, int]]] = {
        "unsigned": lambda: _load(unsigned, policy, empty_state),
        "signed-recording": recording,
        "signed-cold": cold,  # leaves its loader's cache filled for signed-rebuild, which runs next
        "signed-rebuild": lambda: _load(signed, policy, empty_state, last[0] if last else None),
        "signed-remembered": remembered,
    }
    # untimed pass: warm the page cache; then record the verifications as `tooldir scan` would
    for fn in variants.values():
        fn()
    snap = Loader(make_config(project=signed, user_dirs=[], policy=policy, state_dir=remembered_state)).load()
    remember_load(remembered_state, snap.tools)
    samples: dict[str, list[float]] = {k: [] for k in variants}
    results: dict[str, tuple[int, int]] = {}
    for _ in range(runs):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            results[name] = fn()
            samples[name].append(time.perf_counter() - t0)
    expected = {"unsigned": (0, n)} | {k: (n, 0) for k in variants if k != "unsigned"}
    if results != expected:
        raise SystemExit(f"benchmark invalid: (active, pending) per variant {results}, expected {expected}")
    median = {k: statistics.median(v) for k, v in samples.items()}
    base = median["unsigned"]
    return {
        "n": n,
        "runs": runs,
        "seconds": median,
        "ratio": {k: v / base for k, v in median.items() if k != "unsigned"},
        "verify_us_per_tool": (median["signed-cold"] - base) / n * 1e6,
    }


def _policy_file(workdir: Path, n: int, public: str) -> Path:
    path = workdir / f"policy-{n}.toml"
    path.write_text(
        '[sources.project]\nrequire = ["approval", "signature", "pin"]\nmax_risk = "exec"\n\n'
        f'[keys]\nminisign = ["{public}"]\n'
    )
    return path


def _process(argv: list[str]) -> tuple[float, float]:
    """(wall s, CPU s of the process and the children it waited for)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/")
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"benchmark invalid: {argv} failed")
    return time.perf_counter() - t0, usage.ru_utime + usage.ru_stime


def bench_cli(n: int, runs: int, workdir: Path) -> dict[str, Any]:
    """Whole-process first loads: signed vs unsigned, a fresh state folder every round."""
    unsigned, signed, public = prepare(n, workdir)
    policy = _policy_file(workdir, n, public)
    empty = workdir / "no-user-tools"
    empty.mkdir(exist_ok=True)
    samples: dict[str, list[tuple[float, float]]] = {"unsigned": [], "signed": []}
    with tempfile.TemporaryDirectory(prefix="tooldir-bench-signed-state-") as tmp:
        fresh = iter(range(1 << 30))

        def argv(project: Path) -> list[str]:
            state = Path(tmp) / f"state-{next(fresh)}"
            return [
                sys.executable, "-m", "tooldir", "scan", "--json", "--project", str(project),
                "--user-dir", str(empty), "--policy", str(policy), "--state-dir", str(state),
            ]  # fmt: skip

        for project in (unsigned, signed):
            _process(argv(project))  # warm the page cache
        for _ in range(runs):
            samples["unsigned"].append(_process(argv(unsigned)))
            samples["signed"].append(_process(argv(signed)))

    def mmm(values: list[float]) -> dict[str, float]:
        return {"min": min(values), "median": statistics.median(values), "max": max(values)}

    wall = {k: mmm([w for w, _ in v]) for k, v in samples.items()}
    cpu = {k: mmm([c for _, c in v]) for k, v in samples.items()}
    floor = verification_floor(n, workdir)
    return {
        "ed25519_cpu_s": floor,
        "ed25519_openssl_cpu_s": openssl_floor(n, workdir),
        # the signed first load's extra CPU beyond the Ed25519 work: what this process adds
        "extra_cpu_beyond_ed25519_s": cpu["signed"]["median"] - cpu["unsigned"]["median"] - floor,
        "n": n,
        "runs": runs,
        "wall_s": wall,
        "cpu_s": cpu,
        "ratio": wall["signed"]["median"] / wall["unsigned"]["median"],
        "ratio_cpu": cpu["signed"]["median"] / cpu["unsigned"]["median"],
        "target": 1.3,
    }


def verification_floor(n: int, workdir: Path) -> float:
    """CPU seconds of the Ed25519 work of N minisign signatures alone (2 verifications each, in
    this process, with the library the verification helper uses: libsodium through PyNaCl):
    what any signed first load pays on top of an unsigned one, on some core."""
    return _floor(n, workdir, verify_worker._minisign_verifier())


def openssl_floor(n: int, workdir: Path) -> float:
    """The same with ``cryptography`` (OpenSSL), what in-process verification uses."""
    return _floor(n, workdir, verify_worker._openssl_verifier())


def _floor(n: int, workdir: Path, verify: Callable[[bytes, bytes, bytes, bytes, bytes], int]) -> float:
    _unsigned, signed, public = prepare(n, workdir)
    key = signatures.parse_minisign_public_key(public).public
    root = signed / ".tooldir" / "tools"
    jobs = []
    for name in sorted(os.listdir(root)):
        prehash = hashlib.blake2b((root / name / LOCK).read_bytes(), digest_size=64).digest()
        sig = signatures.parse_minisig((root / name / MINISIG).read_bytes())
        jobs.append((key, sig.signature, prehash, sig.global_signature, sig.trusted_comment))
    t0 = time.process_time()
    for job in jobs:
        if verify(*job) != 0:
            raise SystemExit("benchmark invalid: a signature does not verify")
    return time.process_time() - t0


def crossover(sizes: list[int], runs: int, workdir: Path) -> list[dict[str, Any]]:
    """In-process signed-cold loads with the verification helper forced on and off."""
    rows = []
    saved = verify_pool.MIN_PACKAGES
    try:
        for n in sizes:
            _unsigned, signed, public = prepare(n, workdir)
            project = ProjectSourcePolicy(require=("approval", "signature", "pin"), max_risk="exec")
            policy = Policy(sources=SourcesPolicy(project=project), keys=KeysPolicy(minisign=(public,)))
            state = workdir / f"state-crossover-{n}"
            times: dict[str, list[float]] = {"helper": [], "in-process": []}
            for _ in range(runs + 1):
                for mode, threshold in (("helper", 0), ("in-process", 1 << 40)):
                    verify_pool.MIN_PACKAGES = threshold
                    t0 = time.perf_counter()
                    _load(signed, policy, state)
                    times[mode].append(time.perf_counter() - t0)
            median = {k: statistics.median(v[1:]) for k, v in times.items()}  # the first round warms up
            rows.append({"n": n, "seconds": median, "ratio": median["helper"] / median["in-process"]})
    finally:
        verify_pool.MIN_PACKAGES = saved
    return rows


def main(argv: list[str] | None = None) -> int:
    args, sizes, runs = parse_args(__doc__, argv)
    with workdir_for(args, "tooldir-bench-signed-") as workdir:
        rows = [bench(n, runs, workdir) for n in sizes]
        cli = [bench_cli(n, runs, workdir) for n in sizes]
        cross = crossover([50, 100, 200, 400] if args.quick else [50, 100, 200, 400, 800], runs, workdir)
    if args.json:
        print(json.dumps({"benchmark": "signed", "results": rows, "cli": cli, "crossover": cross}, indent=2))
        return 0
    _print_cli(cli, cross)
    print(f"signed-load benchmark (median of {runs}, warm page cache; target signed <= 1.2x unsigned)")
    print(
        f"{'n':>7} {'unsigned s':>11} {'cold s':>8} {'ratio':>6} {'remembered s':>13} {'ratio':>6} {'rebuild s':>10} {'ratio':>6}"
        f" {'recording s':>12} {'ratio':>6}"
    )
    for r in rows:
        s, q = r["seconds"], r["ratio"]
        print(
            f"{r['n']:>7} {s['unsigned']:>11.3f} {s['signed-cold']:>8.3f} {q['signed-cold']:>5.2f}x"
            f" {s['signed-remembered']:>13.3f} {q['signed-remembered']:>5.2f}x"
            f" {s['signed-rebuild']:>10.3f} {q['signed-rebuild']:>5.2f}x"
            f" {s['signed-recording']:>12.3f} {q['signed-recording']:>5.2f}x"
        )
    return 0


def _print_cli(cli: list[dict[str, Any]], cross: list[dict[str, Any]]) -> None:
    print("whole process, first load (fresh state): tooldir scan --json, signed vs unsigned; target <= 1.3x")
    print(f"{'n':>7} {'variant':>9} {'wall min/med/max s':>22} {'cpu min/med/max s':>22}")
    for r in cli:
        for key in ("unsigned", "signed"):
            w, c = r["wall_s"][key], r["cpu_s"][key]
            print(
                f"{r['n']:>7} {key:>9} {w['min']:>6.3f}/{w['median']:>6.3f}/{w['max']:>6.3f}"
                f"   {c['min']:>6.3f}/{c['median']:>6.3f}/{c['max']:>6.3f}"
            )
        print(f"{'':>7} ratio {r['ratio']:.2f}x wall, {r['ratio_cpu']:.2f}x cpu (process + helper)")
        print(
            f"{'':>7} Ed25519 alone {r['ed25519_cpu_s']:.3f} s cpu (2 per package, one core, libsodium as the"
            f" helper; OpenSSL {r['ed25519_openssl_cpu_s']:.3f} s); signed extra cpu beyond it"
            f" {r['extra_cpu_beyond_ed25519_s']:.3f} s"
        )
    print(f"helper crossover (in-process signed-cold, median; MIN_PACKAGES = {verify_pool.MIN_PACKAGES})")
    for r in cross:
        s = r["seconds"]
        print(f"{r['n']:>7} helper {s['helper']:.4f} s  in-process {s['in-process']:.4f} s  ratio {r['ratio']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
