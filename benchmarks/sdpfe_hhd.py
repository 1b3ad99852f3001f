"""Heavy hitters: privagg's fe-hh against the authors' C++ detector (SDPFE, HHD/hhd.cpp), same data, one run.

    SDPFE_DIR=PATH/TO/SDPFE .venv/bin/python benchmarks/sdpfe_hhd.py [--users N] [--seed S]
        [--privagg EXE] [--peer-only] [--warm-up] [--peer-timeout SECONDS] [--json [FILE]]

PATH/TO/SDPFE (or ``--sdpfe-dir``) is a checkout of https://github.com/hkustDB/SDPFE, the code of
Luo, Wang and Yi, "Frequency estimation in the shuffle model with almost a single message" (CCS 2022).
Without it the script says how to get it and exits with status 0. No network is used at run time.

What it does, all in one run on one machine:

1. Data (``generate``): n integers of [0, 2^48) (default n = 10^7, the authors' setting; see below for smaller n),
   deterministic from ``--seed``: 40 distinct uniform 48-bit values get 40% of the users, value i
   (i = 0..39) a share proportional to 1 / (i + 1) (floors, then the leftover users one each to the
   largest remainders), and the other 60% of the users hold independent uniform 48-bit values; the
   whole is shuffled. With phi = 0.005 and seed 1, at n = 10^6 as at 10^7: 18 items held by >= phi n
   users, 12 of them by >= 1.5 phi n, 19 in [phi n / 2, phi n), the other 3 head items below phi n / 2.
   Written twice: ``data.npy`` (uint64, for privagg) and ``data.txt`` for the peer: ``n B`` on the
   first line, then one value per line, read by ``loaddata`` in hhd.h (scanf ``%llu``: n, B, then n
   values). The peer takes the values as they are, 0-based: a
   value must lie in [0, 2^t) with t = ceil(log2 B) = 48, and its reported items are values of the
   same range.

2. The peer (``build_peer``): HHD/hhd.cpp and HHD/hhd.h are copied into a temporary folder, and only
   ``main()`` of the copy of hhd.cpp is patched, by exact string and regex replacements that must each
   match exactly once in main() (else the script stops with an error):

   * ``int main() {``  ->  ``int main(int argc, char **argv) {`` plus a usage check (4 arguments:
     DATA PHI EPSILON RESULT, else exit 2);
   * ``loaddata("../data/aol01,n=10000000,B=2^48.txt");``  ->  ``loaddata(argv[1]);``;
   * ``phi = 0.005;``  ->  ``phi = std::strtod(argv[2], nullptr);``;
   * ``epsilon = 1;``  ->  ``epsilon = std::strtod(argv[3], nullptr);``;
   * ``delta = 1.0 / n / n;`` is kept (checked to be there): delta = 1 / n^2 as the authors';
   * ``HeavyHitterDetection hhd(`` -> ``static HeavyHitterDetection hhd(``: the class never initialises
     its two timers (``user_time``, ``analyzer_time``) before adding to them, so with an automatic
     object the printed "local randomizer time cost" / "analyzer time cost" start from whatever was on
     the stack (with g++ 12 -O2 here it happened to be 0 either way); a static object is
     zero-initialised before its constructor runs. Nothing else changes;
   * ``freopen("../result/hhd.out", "w", stdout);``  ->  ``freopen(argv[4], "w", stdout);``.

   Then ``g++ -O2 -std=c++17 -o hhd hhd.cpp`` (the authors' README says ``g++ hhd.cpp -o hhd
   -std=c++11``, no optimisation flag). Everything else (class HeavyHitterDetection, hhd.h) is theirs,
   unchanged: one std::random_device-seeded mt19937 per user (not seedable), single-threaded.

3. Runs ``hhd DATA PHI EPSILON RESULT`` under GNU time (``sdpfe.measure``: wall clock, maximum resident
   set size, user + system CPU), inside coreutils ``timeout`` (``--peer-timeout``, default 1800 s; GNU
   time still sees hhd's peak RSS, which Linux passes up through the waiting ``timeout``), and reads its
   result file: "filter messages", "local randomizer time cost", "analyzer time cost" (both its own
   clock() CPU seconds), "recall rate", "precision rate", the real and the detected heavy-hitter lists;
   from its stderr, mu, b, the per-level user count ``fen``, pf, the threshold Delta and the candidates
   per level.

   The peer only finishes when n is large enough for its first level (s) to separate heavy prefixes
   from noise. Its threshold is Delta = ceil(pf phi n / (2 (t - s))), about 43 filtered messages for any
   n by the choice of pf, while the expected count of an empty prefix is about Delta 4 mu (t - s) / (phi n)
   (mu ~ 120-145): at phi = 0.005 that is ~2.5 Delta at n = 10^6, where every one of the 2^24 first-level
   prefixes passes, and the analyzer would then test 2^25 children each against all of the next level's
   ~2.7 x 10^5 messages (it never finishes; ``timeout`` stops it and the report says so). At n = 10^7
   (the authors' setting) it is ~0.24 Delta and the run takes minutes.

4. Runs ``privagg estimate fe-hh --input data.npy --item-type int --domain 2^48 --phi PHI --epsilon EPS
   --delta 1/n^2 --seed S --no-progress --json --output report.json`` under GNU time (``--privagg EXE``
   replaces the executable; NUMBA_CACHE_DIR points into the temporary folder, so the run is cold and
   pays numba's compilation unless ``--warm-up`` first runs it once untimed) and reads report.json.

5. Scores both reported sets against the exact counts (numpy unique) computed here: recall over the
   items held by >= phi n users, recall over those held by >= 1.5 phi n, precision (share of the
   reported items held by >= phi n users) and the share held by >= phi n / 2. Each tool's own claims
   are shown beside these.

``run(sdpfe_dir, users, seed, privagg=None)`` returns the figures as a dict; ``markdown(figures)``
renders them; ``--json`` prints the dict instead of the Markdown (``--json FILE``: Markdown printed,
dict written to FILE). With ``--peer-only`` privagg is not run. If either side fails (not found,
non-zero exit, timeout, missing report fields) the other's figures are still reported, with the error
and the output's tail, and the exit status is 1.
Needs only the standard library and numpy (and g++ and GNU time).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sdpfe  # noqa: E402  (benchmarks/sdpfe.py: measure(), the paths, the peer's address)
from benchfmt import cpu_model, load_average  # noqa: E402

ROOT = sdpfe.ROOT
DOMAIN = 2**48
PHI = 0.005
EPSILON = 1.0
USERS = 10**7  # the authors' setting; below about 5 x 10^6 their first level lets every prefix through
SEED = 1
HEAD_ITEMS = 40
HEAD_SHARE = 0.4
PEER_TIMEOUT = 1800.0   # seconds; the peer never finishes when its first level lets every prefix through
TARGET_RATIO = 50.0  # the peer's wall clock over privagg's, same run (issue 48)

MISSING = (f"The authors' code is needed: clone {sdpfe.SDPFE_URL} (git clone {sdpfe.SDPFE_URL}) and pass the "
           "folder with --sdpfe-dir PATH or the environment variable SDPFE_DIR.")

# The patch of main() in the copy of hhd.cpp: (what, kind, pattern, replacement). Every pattern must match
# exactly once inside main(); a None replacement only checks that the line is there.
MAIN_PATCH = [
    ("signature", "text", "int main() {",
     'int main(int argc, char **argv) {\n    if (argc != 5) {\n'
     '        std::cerr << "usage: hhd DATA PHI EPSILON RESULT" << std::endl;\n        return 2;\n    }'),
    ("data path", "regex", r'loaddata\("[^"\n]*"\);', "loaddata(argv[1]);"),
    ("phi", "regex", r"\bphi = [^;\n]+;", "phi = std::strtod(argv[2], nullptr);"),
    ("epsilon", "regex", r"\bepsilon = [^;\n]+;", "epsilon = std::strtod(argv[3], nullptr);"),
    ("delta (kept)", "text", "delta = 1.0 / n / n;", None),
    ("zero-initialised timers", "text", "HeavyHitterDetection hhd(", "static HeavyHitterDetection hhd("),
    ("result path", "text", 'freopen("../result/hhd.out", "w", stdout);', "freopen(argv[4], \"w\", stdout);"),
]
COMPILE = ["g++", "-O2", "-std=c++17"]


# ----------------------------------------------------------------------------------------------- data

def generate(users: int, seed: int = SEED) -> np.ndarray:
    """``users`` values of [0, 2^48): a 1/(i+1) head on 40 random values (40% of users), a uniform tail."""
    rng = np.random.default_rng(seed)
    head_values = np.unique(rng.integers(0, DOMAIN, HEAD_ITEMS, dtype=np.uint64))
    while head_values.size < HEAD_ITEMS:   # a collision among 40 draws of 2^48: practically never
        extra = rng.integers(0, DOMAIN, HEAD_ITEMS - head_values.size, dtype=np.uint64)
        head_values = np.unique(np.concatenate([head_values, extra]))
    head_values = rng.permutation(head_values)   # value i gets share 1/(i+1): not ordered by size
    head = round(HEAD_SHARE * users)
    weights = 1.0 / np.arange(1, HEAD_ITEMS + 1)
    exact = head * weights / weights.sum()
    counts = np.floor(exact).astype(np.int64)
    leftover = head - int(counts.sum())
    counts[np.argsort(-(exact - counts), kind="stable")[:leftover]] += 1
    tail = rng.integers(0, DOMAIN, users - head, dtype=np.uint64)
    items = np.concatenate([np.repeat(head_values, counts), tail])
    return rng.permutation(items)


def write_peer_data(path: Path, items: np.ndarray, chunk: int = 10**6) -> None:
    """hhd.h's ``loaddata`` format: ``n B``, then the values, whitespace separated (one per line here)."""
    with open(path, "w") as out:
        out.write(f"{items.size} {DOMAIN}\n")
        for start in range(0, items.size, chunk):
            out.write("\n".join(map(str, items[start:start + chunk].tolist())))
            out.write("\n")


class Truth:
    """Exact counts of the data, and the scores of a reported set against them."""

    def __init__(self, items: np.ndarray, phi: float) -> None:
        self.values, self.counts = np.unique(items, return_counts=True)
        self.n, self.phi = int(items.size), phi
        self.heavy = self.values[self.counts >= phi * self.n]
        self.strong = self.values[self.counts >= 1.5 * phi * self.n]

    def count(self, item: int) -> int:
        if not 0 <= item < 2**64:
            return 0
        i = int(np.searchsorted(self.values, np.uint64(item)))
        return int(self.counts[i]) if i < self.values.size and int(self.values[i]) == item else 0

    def summary(self) -> dict:
        c, pn = self.counts, self.phi * self.n
        return {"distinct": int(self.values.size), "phi_n": pn,
                "at_least_phi_n": int((c >= pn).sum()), "at_least_1.5_phi_n": int((c >= 1.5 * pn).sum()),
                "in_half_phi_n_to_phi_n": int(((c >= pn / 2) & (c < pn)).sum()),
                "in_half_to_1.5_phi_n": int(((c >= pn / 2) & (c < 1.5 * pn)).sum()),
                "top_counts": sorted(map(int, c[c >= pn / 4]), reverse=True)}

    def score(self, reported) -> dict:
        reported = sorted(set(int(r) for r in reported))
        held = [self.count(r) for r in reported]
        pn = self.phi * self.n
        heavy, strong = set(map(int, self.heavy)), set(map(int, self.strong))

        def share(hits: int, total: int):
            return hits / total if total else None

        return {"reported": len(reported),
                "recall": share(len(heavy.intersection(reported)), len(heavy)),
                "recall_strong": share(len(strong.intersection(reported)), len(strong)),
                "precision": share(sum(h >= pn for h in held), len(reported)),
                "precision_loose": share(sum(h >= pn / 2 for h in held), len(reported))}


# ----------------------------------------------------------------------------------------------- peer

def patch_main(source: str) -> tuple[str, list[tuple[str, str, str | None]]]:
    """hhd.cpp with ``MAIN_PATCH`` applied to main() only, and (what, the line found, its replacement) per entry.

    Raises if any expected line is not found exactly once in main().
    """
    if source.count("int main() {") != 1:
        raise RuntimeError("hhd.cpp: 'int main() {' not found exactly once; the peer's source has changed")
    start = source.find("int main() {")
    head, body = source[:start], source[start:]
    applied = []
    for what, kind, pattern, replacement in MAIN_PATCH:
        regex = re.escape(pattern) if kind == "text" else pattern
        found = re.findall(regex, body)
        if len(found) != 1:
            raise RuntimeError(f"hhd.cpp main(): expected exactly one match for the {what} line "
                               f"({pattern!r}), found {len(found)}; the peer's source has changed")
        applied.append((what, found[0], replacement))
        if replacement is not None:
            body = re.sub(regex, lambda _: replacement, body)
    return head + body, applied


def build_peer(source_dir: Path, folder: Path) -> tuple[Path, dict]:
    folder.mkdir(parents=True)
    for name in ("hhd.cpp", "hhd.h"):
        shutil.copyfile(source_dir / name, folder / name)
    cpp = folder / "hhd.cpp"
    patched, applied = patch_main(cpp.read_text())
    cpp.write_text(patched)
    exe = folder / "hhd"
    proc = subprocess.run([*COMPILE, "-o", str(exe), str(cpp)], cwd=folder, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling the patched hhd.cpp failed:\n{proc.stderr[-3000:]}")
    version = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    return exe, {"compiler": version, "command": " ".join([*COMPILE, "-o", "hhd", "hhd.cpp"]),
                 "warnings": proc.stderr.count("warning:"), "patch": applied}


def _arg(x: float) -> str:
    """A float as a command-line argument: 1 rather than 1.0, otherwise repr (exact)."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _items(text: str) -> list[int]:
    return [int(tok) for tok in re.split(r"[,\s]+", text) if tok]


def parse_peer_log(log: str) -> dict:
    """The parameters hhd prints on stderr (mu, b, fen, pf, Delta, its levels) and its candidates per level."""
    info = {}
    levels = re.search(r"filtering level (\d+) - (\d+)", log)
    if levels:
        info["levels"] = [int(levels.group(1)), int(levels.group(2))]
    params = re.search(r"^pf = (\S+)$.*?^(\S+) (\d+) (\d+)\n\S+ (\d+) \S+$", log, re.M | re.S)
    if params:   # "pf = ...", then after the primes "mu b fen", then "pf phi n / (t - s)  Delta  mu"
        pf, mu, b, fen = float(params.group(1)), float(params.group(2)), int(params.group(3)), int(params.group(4))
        info.update(pf=pf, mu=mu, b=b, fen=fen, Delta=int(params.group(5)))
        # Each user sends its real message and mu b / fen blank ones on average, each kept with probability pf.
        info["messages_per_user"] = (1 + mu * b / fen) * min(pf, 1.0)
    info["candidates_per_level"] = [int(c) for c in re.findall(r"^level \d+ has (\d+) candidates", log, re.M)]
    return info


def parse_peer_result(result: str) -> dict:
    """hhd's result file: 'key = value' lines, then the real and the detected heavy-hitter lists."""
    values = {}
    for line in result.splitlines():
        key, sep, value = line.partition(" = ")
        if sep:
            values[key.strip()] = float(value)
    real = re.search(r"real heavy hitter :\n(.*?)\n\n", result, re.S)
    detected = re.search(r"detected heavy hitter :\n(.*)", result, re.S)
    if real is None or detected is None or "filter messages" not in values:
        raise RuntimeError(f"unexpected hhd output:\n{result[:2000]}")
    return {"filter_messages": values["filter messages"],
            "randomizer_s": values["local randomizer time cost"],
            "analyzer_s": values["analyzer time cost"],
            "recall_claim": values["recall rate"] / 100, "precision_claim": values["precision rate"] / 100,
            "real": _items(real.group(1)), "detected": _items(detected.group(1))}


def run_peer(exe: Path, data: Path, phi: float, epsilon: float, tmp: Path, env: dict, timeout: float) -> dict:
    """The peer's figures; on failure or timeout ``error`` says why, with what its stderr showed so far."""
    result, log = tmp / "hhd.out", tmp / "peer.log"
    cmd = [str(exe), str(data), _arg(phi), _arg(epsilon), str(result)]
    guard = shutil.which("timeout")
    timed = [guard, f"{timeout:g}", *cmd] if guard and timeout > 0 else cmd
    try:
        measured = sdpfe.measure(timed, tmp, env, log)
    except RuntimeError as exc:
        text = log.read_text(errors="replace")
        info = {"command": cmd, **parse_peer_log(text)}
        if " exited with 124:" in str(exc) and timed is not cmd:
            stats = (log.with_suffix(".time")).read_text().split()[-4:]
            info.update(wall_s=float(stats[0]), peak_rss_kib=int(stats[1]), timed_out=True,
                        error=f"hhd did not finish within {timeout:g} s (stopped by timeout)")
        else:
            info["error"] = str(exc)
        return info
    return {"command": cmd, **measured, **parse_peer_log(log.read_text(errors="replace")),
            **parse_peer_result(result.read_text())}


# -------------------------------------------------------------------------------------------- privagg

def _resolve(privagg) -> Path | None:
    path = Path(privagg) if privagg else sdpfe.DEFAULT_PRIVAGG
    if path.exists():
        return path.absolute()   # the command runs in the temporary folder
    found = shutil.which(str(privagg)) if privagg else None
    return Path(found) if found else None


def run_privagg(privagg, data: Path, users: int, phi: float, epsilon: float, seed: int, tmp: Path, env: dict,
                warm_up: bool = False) -> dict:
    """privagg's figures, or ``{"error": ..., "command": ...}`` saying why there are none."""
    exe = _resolve(privagg)
    report_path = tmp / "report.json"
    delta = 1.0 / users**2
    cmd = [str(exe or privagg or sdpfe.DEFAULT_PRIVAGG), "estimate", "fe-hh", "--input", str(data),
           "--item-type", "int", "--domain", str(DOMAIN), "--phi", _arg(phi), "--epsilon", _arg(epsilon),
           "--delta", repr(delta), "--seed", str(seed), "--no-progress", "--json", "--output", str(report_path)]
    if exe is None:
        return {"command": cmd, "error": f"{cmd[0]} not found (make .venv/installed, or pass --privagg EXE)"}
    log = tmp / "privagg.log"
    try:
        if warm_up:
            _log("privagg warm-up run (untimed; fills the numba cache)")
            sdpfe.measure(cmd, tmp, env, log)
            report_path.unlink(missing_ok=True)
        _log("privagg run")
        measured = sdpfe.measure(cmd, tmp, env, log)
    except RuntimeError as exc:   # measure() puts the exit status and the output's tail in the message
        return {"command": cmd, "error": str(exc)}
    tail = log.read_text(errors="replace")[-2000:]
    try:
        report = json.loads(report_path.read_text())
        found = [int(h["item"]) for h in report["heavy_hitters"]]
        ev = report["evaluation"]
        return {"command": cmd, **measured,
                "randomizer_s": report["simulation"]["seconds"].get("clients"),
                "analyzer_s": report["simulation"]["seconds"].get("analyzer"),
                "stages_s": dict(report["simulation"]["seconds"]),
                "messages_per_user": report["messages"]["per_user"],
                "detected": found,
                "claims": {k: ev.get(k) for k in ("recall", "precision", "recall_strong", "precision_loose",
                                                  "heavy_items", "reported")},
                "heavy_hitters": report["heavy_hitters"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return {"command": cmd, **measured,
                "error": f"privagg exited 0 but its report is unusable ({type(exc).__name__}: {exc}); "
                         f"output tail:\n{tail}"}


# ------------------------------------------------------------------------------------------------ run

def _log(text: str) -> None:
    print(f"[sdpfe-hhd] {text}", file=sys.stderr, flush=True)


def _shown(command: list[str], tmp: Path) -> str:
    return " ".join(command).replace(str(tmp), "$TMP").replace(str(ROOT) + "/", "")


def run(sdpfe_dir, users: int = USERS, seed: int = SEED, privagg=None, *, peer_only: bool = False,
        warm_up: bool = False, peer_timeout: float = PEER_TIMEOUT, phi: float = PHI,
        epsilon: float = EPSILON) -> dict:
    """Generate, build, run both; the figures as a dict (``{"skipped": reason}`` without the peer or g++)."""
    source = Path(sdpfe_dir).expanduser() / "HHD" if sdpfe_dir else None
    if source is None or not (source / "hhd.cpp").is_file() or not (source / "hhd.h").is_file():
        return {"skipped": MISSING + (f" ({source}/hhd.cpp or hhd.h not found)" if source else "")}
    if shutil.which("g++") is None:
        return {"skipped": "g++ is not on the PATH (e.g. apt-get install build-essential)."}

    with tempfile.TemporaryDirectory(prefix="sdpfe-hhd-") as tmp:
        tmp = Path(tmp)
        _log(f"generating n = {users} values (seed {seed})")
        items = generate(users, seed)
        truth = Truth(items, phi)
        npy, txt = tmp / "data.npy", tmp / "data.txt"
        np.save(npy, items)
        write_peer_data(txt, items)
        _log("building the patched hhd.cpp")
        exe, build = build_peer(source, tmp / "build")
        env = dict(os.environ)
        env["NUMBA_CACHE_DIR"] = str(tmp / "numba-cache")   # keep the source tree clean

        _log("running the peer (hhd)")
        peer = run_peer(exe, txt, phi, epsilon, tmp, env, peer_timeout)
        peer["command"] = _shown(peer["command"], tmp)
        if "error" in peer:
            _log(f"peer failed: {peer['error'].splitlines()[0]}")
        else:
            peer["eval"] = truth.score(peer["detected"])
            _log(f"peer done: {peer['wall_s']:.1f} s wall")

        ours = None
        if not peer_only:
            ours = run_privagg(privagg, npy, users, phi, epsilon, seed, tmp, env, warm_up)
            ours["command"] = _shown(ours["command"], tmp)
            if "detected" in ours:
                ours["eval"] = truth.score(ours["detected"])

    figures = {
        "settings": {"users": users, "domain": DOMAIN, "phi": phi, "epsilon": epsilon, "delta": 1.0 / users**2,
                     "seed": seed, "head_items": HEAD_ITEMS, "head_share": HEAD_SHARE, "cpus": os.cpu_count(),
                     "privagg_warm_up": bool(warm_up), "peer_timeout_s": peer_timeout, "data": truth.summary(),
                     "cpu": cpu_model(), "load_average": load_average()},
        "build": build,
        "peer": peer,
        "privagg": ours,
    }
    if ours and "error" not in ours and "error" not in peer:
        figures["ratio_wall"] = peer["wall_s"] / ours["wall_s"]
        figures["ratio_peak_rss"] = peer["peak_rss_kib"] / ours["peak_rss_kib"]
    return figures


# ------------------------------------------------------------------------------------------- markdown

def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x, fmt: str = ".2f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def markdown(figures: dict) -> str:
    if "skipped" in figures:
        return figures["skipped"]
    s, d = figures["settings"], figures["settings"]["data"]
    peer, ours = figures["peer"], figures["privagg"]
    n = s["users"]
    lines = [
        "### Heavy hitters: privagg `fe-hh` against SDPFE's `HHD/hhd.cpp`",
        "",
        f"Whole processes on the same data, one run each, measured with GNU time (`/usr/bin/time`: wall clock, "
        f"maximum resident set size). n = {n}, B = 2^48, phi = {s['phi']:g}, epsilon = {s['epsilon']:g}, "
        f"delta = 1/n^2 = {s['delta']:g}; {s['cpus']} CPUs.",
        "",
        f"Data (seed {s['seed']}): {s['head_items']} random 48-bit values share {100 * s['head_share']:g}% of the "
        f"users in proportion 1/(i+1), the rest hold uniform random 48-bit values; {d['distinct']} distinct. "
        f"phi n = {d['phi_n']:g}: {d['at_least_phi_n']} items held by >= phi n users "
        f"({d['at_least_1.5_phi_n']} by >= 1.5 phi n), {d['in_half_phi_n_to_phi_n']} in [phi n/2, phi n).",
        "",
        "| tool | n | wall s | peak RSS MiB | randomizer s | analyzer s | messages per user | reported | "
        "recall (>= phi n) | recall (>= 1.5 phi n) | precision (>= phi n) | precision (>= phi n/2) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def row(name: str, f: dict) -> str:
        e = f["eval"]
        return (f"| {name} | {n} | {f['wall_s']:.2f} | {f['peak_rss_kib'] / 1024:.0f} | {_num(f['randomizer_s'])} | "
                f"{_num(f['analyzer_s'])} | {_num(f.get('messages_per_user'), '.3g')} | {e['reported']} | "
                f"{_pct(e['recall'])} | {_pct(e['recall_strong'])} | {_pct(e['precision'])} | "
                f"{_pct(e['precision_loose'])} |")

    peer_ok = "error" not in peer
    if peer_ok:
        lines.append(row("SDPFE hhd.cpp", peer))
    elif peer.get("timed_out"):
        lines.append(f"| SDPFE hhd.cpp | {n} | > {peer['wall_s']:.0f} (stopped) | {peer['peak_rss_kib'] / 1024:.0f} "
                     f"| - | - | {_num(peer.get('messages_per_user'), '.3g')} | - | - | - | - | - |")
    else:
        lines.append(f"| SDPFE hhd.cpp | {n} | failed | - | - | - | - | - | - | - | - | - |")
    ok = ours is not None and "error" not in ours
    if ok:
        lines.append(row("privagg fe-hh", ours))
    lines += ["", "Recall and precision above are computed by this script from the exact counts."]
    if ok and peer_ok:
        lines += ["", f"**SDPFE wall / privagg wall: {figures['ratio_wall']:.2f}x** (target {TARGET_RATIO:g}x: "
                      f"{'met' if figures['ratio_wall'] >= TARGET_RATIO else 'missed'}; {s.get('cpu')}, load average "
                      f"{s.get('load_average')} at the end); SDPFE peak RSS / privagg peak RSS: "
                      f"{figures['ratio_peak_rss']:.2f}x."]
    params = (f"mu = {_num(peer.get('mu'), '.4g')}, b = {peer.get('b')}, fen = {peer.get('fen')}, "
              f"pf = {_num(peer.get('pf'), '.4g')}, Delta = {peer.get('Delta')}, levels s - t = {peer.get('levels')}; "
              f"candidates per level: {peer.get('candidates_per_level')}")
    if peer_ok:
        lines += ["", f"* SDPFE's own claims: recall {_pct(peer['recall_claim'])}, precision "
                      f"{_pct(peer['precision_claim'])} ({len(peer['real'])} real heavy hitters, "
                      f"{len(peer['detected'])} detected). Its randomizer and analyzer seconds are its own clock() "
                      f"CPU time; its \"filter messages\" = {peer['filter_messages']:.4g} counts only the blank "
                      "messages a user sends (mu b / fen, each kept with probability pf); the messages per user "
                      f"above, (1 + mu b / fen) pf, add the real one ({params}). It reports both children of every "
                      "last-level prefix, so its detected items come in pairs 2k, 2k+1."]
    else:
        level = peer.get("levels", [None])[0]
        first = peer.get("candidates_per_level") or [None]
        why = (f" Its first level let {first[0]} of the 2^{level} prefixes through (threshold Delta = "
               f"{peer.get('Delta')} filtered messages), and it tests every child of every candidate against all "
               "of the next level's messages." if first[0] is not None and level is not None else "")
        lines += ["", f"* **SDPFE did not finish**: {peer['error'].splitlines()[0]}.{why} ({params}.)"]
        if not peer.get("timed_out"):
            lines += ["", "```", peer["error"].rstrip(), "```"]
    if ok:
        c = ours["claims"]
        stages = ", ".join(f"{k} {v:.3g}" for k, v in ours["stages_s"].items())
        lines.append(f"* privagg's own claims: recall {_pct(c['recall'])}, precision {_pct(c['precision'])}, "
                     f"recall (>= 1.5 phi n) {_pct(c['recall_strong'])}, precision (>= phi n/2) "
                     f"{_pct(c['precision_loose'])} ({c['heavy_items']} heavy items, {c['reported']} reported). "
                     f"Stage seconds (wall): {stages}. "
                     + ("A first untimed run filled the numba cache." if s["privagg_warm_up"] else
                        "Cold run: includes numba's compilation (empty cache)."))
    elif ours is None:
        lines.append("* privagg: not run (--peer-only).")
    else:
        lines += ["* **privagg failed**; command and output tail:", "", "```", ours["error"].rstrip(), "```"]
    b = figures["build"]
    lines += [
        "",
        f"The peer: `HHD/hhd.cpp` and `HHD/hhd.h` copied unchanged except `main()`, built with "
        f"`{b['command']}` ({b['compiler']}). The patch of `main()`:",
        "",
    ]
    for what, found, replacement in b["patch"]:
        shown = "kept, checked present" if replacement is None else f"`{' '.join(replacement.split())}`"
        lines.append(f"* {what}: `{found}` -> {shown}")
    lines += [
        "",
        f"* peer: `{peer['command']}`",
        f"* privagg: `{ours['command']}`" if ours else "* privagg: not run",
        "",
        f"Reproduce: `SDPFE_DIR=PATH/TO/SDPFE .venv/bin/python benchmarks/sdpfe_hhd.py --users {n}"
        + (f" --seed {s['seed']}" if s["seed"] != SEED else "") + "` "
        f"(SDPFE: `git clone {sdpfe.SDPFE_URL}`).",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdpfe-dir", default=os.environ.get("SDPFE_DIR"),
                        help="checkout of https://github.com/hkustDB/SDPFE (default: $SDPFE_DIR)")
    parser.add_argument("--users", type=int, default=USERS, help="n (default 10^7, the authors'; their code needs n of about 5 x 10^6 or more at phi 0.005)")
    parser.add_argument("--seed", type=int, default=SEED, help="data and privagg seed (default 1)")
    parser.add_argument("--privagg", default=str(sdpfe.DEFAULT_PRIVAGG), help="privagg executable")
    parser.add_argument("--peer-only", action="store_true", help="run the peer alone")
    parser.add_argument("--peer-timeout", type=float, default=PEER_TIMEOUT, metavar="SECONDS",
                        help="stop the peer after this long (default 1800; 0: no limit)")
    parser.add_argument("--warm-up", action="store_true", help="run privagg once untimed first (numba cache)")
    parser.add_argument("--json", nargs="?", const="-", metavar="FILE",
                        help="print the figures as JSON instead of Markdown, or with FILE write them there too")
    args = parser.parse_args(argv)
    if args.users < 100:
        parser.error("--users must be >= 100 (hhd.cpp divides by n / 100)")
    res = run(args.sdpfe_dir, args.users, args.seed, args.privagg, peer_only=args.peer_only, warm_up=args.warm_up,
              peer_timeout=args.peer_timeout)
    if "skipped" in res:
        print(res["skipped"])
        return 0
    if args.json == "-":
        print(json.dumps(res, indent=2))
    else:
        print(markdown(res))
        if args.json:
            Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    ours = res.get("privagg")
    return 1 if "error" in res["peer"] or (ours and "error" in ours) else 0


if __name__ == "__main__":
    sys.exit(main())
