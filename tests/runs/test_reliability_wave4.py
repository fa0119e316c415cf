"""Reliability, wave 4: nothing written outside the output folders a user chose, no input reaching a traceback, no
finished run lost, and a damaged, edited, swapped or missing archive record named and never served (README,
"Reliability"). Each class is tried where a user meets it: the command line."""

import errno
import gzip
import json
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedlib import archive, store
from fedlib.__main__ import main as fedlib_main
from fedlib.config import load_config, run_dir, run_id
from fedlib.store import DamagedRunWarning
from tests.conftest import DATA, ROOT

CFG = DATA / "spiral_fedproto.yaml"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.fixture(autouse=True)
def keep_signal_handlers():
    """``python -m fedlib`` installs its SIGINT/SIGTERM handlers; the test process gets its own back."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, h in before.items():
        signal.signal(s, h)


@pytest.fixture
def no_data(monkeypatch):
    """Loading any data fails the test: a refused command stops before it."""
    import fedlib.runner

    monkeypatch.setattr(fedlib.runner, "load_dataset", lambda *a, **k: pytest.fail("data loaded"))


def one_line(capsys, *fields) -> str:
    cap = capsys.readouterr()
    text = (cap.out + cap.err).strip()
    assert len(text.splitlines()) == 1 and "Traceback" not in text, text
    assert all(f in text for f in fields), text
    return text


def files_below(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).rglob("*"))


# -- 1. a config's name becomes a file name only once checked ----------------------------------------------------

@pytest.mark.parametrize("name", [
    "x/../../../../../escape", "../escape", "..", "sub/dir", "back\\\\slash", '"tab\\there"', '"new\\nline"',
    '"nul\\0byte"', '"bell\\a"',
])
def test_partition_refuses_a_name_that_is_not_a_file_name(name, tmp_path, monkeypatch, capsys, no_data):
    work = tmp_path / "a" / "b" / "c" / "d" / "e" / "checkout"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    before = files_below(tmp_path)
    assert fedlib_main(["partition", str(CFG), f"name={name}"]) == 2
    text = one_line(capsys, "error: name: got")
    assert ("a file name" in text and "--out" in text) or "a name of printable characters" in text, text
    assert files_below(tmp_path) == before   # no escape.png anywhere, no figures/partition_.. folder


@pytest.mark.parametrize("out, fields", [
    ("{tmp}", ("--out", "this is a folder")),
    ("{tmp}/heatmap.nonsense", ("--out", "a file name ending in", ".png")),
    ("{tmp}/file/heatmap.png", ("--out", "is a file")),
    ("/proc/fedlib/heatmap.png", ("--out", "/proc")),
])
def test_partition_refuses_an_output_it_cannot_write_before_any_data(out, fields, tmp_path, capsys, no_data):
    (tmp_path / "file").write_text("")
    assert fedlib_main(["partition", str(CFG), "--out", out.format(tmp=tmp_path)]) == 2
    one_line(capsys, *fields)


def test_partition_writes_under_figures_for_a_plain_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert fedlib_main(["partition", str(CFG), "name=plain-name_1.x"]) == 0
    assert (tmp_path / "figures" / "partition_plain-name_1.x.png").is_file()
    assert [p.relative_to(tmp_path) for p in files_below(tmp_path)] == [
        Path("figures"), Path("figures/partition_plain-name_1.x.png")]


# -- 2. the rerun hint: one shell-quoted comment line, relative to the checkout ------------------------------------

HOSTILE = ["$(touch PWNED)", "`touch PWNED`", "a b'c\"d;touch PWNED", "new\nline: 1", "tab\tand\rreturn",
           "line\u2028separator", "next\x85line", "ctl\x01\x7f", "back\\slash$HOME"]


def _hint(text: str) -> str:
    first, rest = text.split("\n", 1)
    assert first.startswith("# run ") and first.endswith("` reruns it"), first
    assert "\n#" not in "\n" + rest and not rest.lstrip().startswith("#")   # no second comment line
    return first[first.index("`") + 1:first.rindex("` reruns it")]


def _shell_words(command: str, cwd: Path) -> list[str]:
    """What bash makes of ``command``'s words (printed, not run)."""
    out = subprocess.run(["bash", "-c", "printf '%s\\0' " + command.removeprefix("python -m fedlib run ")],
                         cwd=cwd, capture_output=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.decode().split("\0")[:-1]


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
@pytest.mark.parametrize("field", ["results_dir", "name"])
def test_the_rerun_hint_is_one_quoted_comment_line(field, value, tmp_path):
    from fedlib.runner import config_text, rerunnable_config
    from fedlib.validation import ConfigError

    if field == "name" and not value.isprintable():   # a name is printed on bars and lines: refused
        with pytest.raises(ConfigError, match=r"^name: got .*; allowed: a name of printable characters"):
            load_config(CFG, {"name": value})
        return
    cfg = load_config(CFG, {"results_dir": str(tmp_path / "r"), field: str(tmp_path / value) if field ==
                            "results_dir" else value})
    folder = run_dir(cfg, 1)
    text = config_text(cfg, 1, folder)
    command = _hint(text)
    assert yaml.safe_load(text) == yaml.safe_load(yaml.safe_dump(rerunnable_config(cfg, 1), sort_keys=False))
    assert load_config_text(text, tmp_path)["results_dir"] == cfg["results_dir"]
    assert _shell_words(command, tmp_path) == [str(folder / "config.yaml")]
    assert not list(tmp_path.rglob("PWNED"))


def load_config_text(text: str, where: Path) -> dict:
    path = where / "reread.yaml"
    path.write_text(text)
    return load_config(path)


def test_the_rerun_hint_is_relative_to_the_checkout(tmp_path):
    from fedlib.runner import config_text

    cfg = load_config(CFG, {"results_dir": str(ROOT / "results")})
    assert _hint(config_text(cfg, 1, run_dir(cfg, 1))) == f"python -m fedlib run results/{run_id(cfg, 1)}/config.yaml"
    outside = load_config(CFG, {"results_dir": str(tmp_path / "r")})
    assert _hint(config_text(outside, 1, run_dir(outside, 1))) == \
        f"python -m fedlib run {run_dir(outside, 1) / 'config.yaml'}"


@pytest.mark.slow
def test_a_run_whose_folder_holds_a_command_writes_a_hint_that_runs_nothing(tmp_path, capsys):
    results = tmp_path / "$(touch PWNED)\nseeds: [7]"
    assert fedlib_main(["run", str(CFG), "train.rounds=1", "--no-progress", f"results_dir={json.dumps(str(results))}",
                        'name="$(touch PWNED)"']) == 0
    capsys.readouterr()
    (config,) = results.glob("*/config.yaml")
    text = config.read_text()
    assert _shell_words(_hint(text), tmp_path) == [str(config)]
    assert yaml.safe_load(text)["seeds"] == [1] and not list(tmp_path.rglob("PWNED"))
    # the hint reruns that very run: a cache hit
    assert fedlib_main(["run", str(config), "--no-progress"]) == 0
    assert "(cached)" in capsys.readouterr().out and not list(tmp_path.rglob("PWNED"))


# -- 3. YAML alias bombs are refused before they are built ----------------------------------------------------------

def _bomb(levels: int = 9, width: int = 9, anchor: str = "a") -> str:
    node = f"&{anchor}0 [" + ", ".join(["1"] * width) + "]"
    for i in range(1, levels):
        node = f"&{anchor}{i} [" + ", ".join([node] + [f"*{anchor}{i - 1}"] * (width - 1)) + "]"
    return node


BOMBS = {
    "seeds": lambda text: text.replace("seeds: [1]", "seeds: " + _bomb()),
    "train.lr": lambda text: text.replace("lr: 0.05", "lr: " + _bomb()),
    "name": lambda text: text.replace("name: spiral_test", "name: " + _bomb()),
    "partition": lambda text: text.replace("alpha: 0.5}", "alpha: 0.5, extra: " + _bomb() + "}"),
    "recursive": lambda text: text.replace("seeds: [1]", "seeds: &r [1, *r]"),
}


@pytest.mark.slow
@pytest.mark.parametrize("where", list(BOMBS))
def test_a_config_file_with_an_alias_bomb_is_refused_in_one_line(where, tmp_path):
    path = tmp_path / f"bomb-{where}.yaml"
    path.write_text(BOMBS[where](CFG.read_text()))
    t0 = time.perf_counter()
    out = _fedlib(["run", str(path), "--no-progress", f"results_dir={tmp_path / 'r'}"], tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "refused" in lines[0], lines
    assert time.perf_counter() - t0 < 60 and not (tmp_path / "r").exists()


@pytest.mark.slow
def test_an_override_with_an_alias_bomb_is_refused_in_one_line(tmp_path):
    for override in ("name=" + _bomb(), "seeds=" + _bomb(), "train.lr=" + _bomb(), "train=&t {lr: *t}"):
        out = _fedlib(["run", str(CFG), override, "--no-progress", f"results_dir={tmp_path / 'r'}"], tmp_path)
        assert out.returncode == 2, out.stderr[-2000:]
        lines = (out.stdout + out.stderr).strip().splitlines()
        assert len(lines) == 1 and "override" in lines[0] and "refused" in lines[0], lines


def test_the_loader_refuses_a_bomb_in_well_under_a_second():
    from fedlib.config import load_yaml
    from fedlib.validation import ConfigError

    for levels, width in ((9, 9), (30, 2), (5, 30)):
        t0 = time.perf_counter()
        with pytest.raises(ConfigError, match=r"^bomb\.yaml: refused: its aliases expand to more than"):
            load_yaml("seeds: " + _bomb(levels, width), "bomb.yaml")
        assert time.perf_counter() - t0 < 0.5
    # a wide bomb (thousands of aliases of one anchor) is refused as its aliases are read: the syntax error at its
    # end is never reached
    wide = "a: &a [" + ", ".join(["1"] * 100) + "]\nb: [" + ", ".join(["*a"] * 5000) + "]\nc: [unclosed\n"
    with pytest.raises(ConfigError, match=r"^wide\.yaml: refused: its aliases expand to more than"):
        load_yaml(wide, "wide.yaml")
    # what configs do with anchors stays allowed
    assert load_yaml("t: &t {lr: 0.1, momentum: 0.5}\ntrain: *t\nseeds: &s [1, 2]\nother: *s", "ok.yaml")["train"] == \
        {"lr": 0.1, "momentum": 0.5}


def _fedlib(argv: list[str], cwd: Path, timeout: int = 120) -> subprocess.CompletedProcess:
    """``python -m fedlib ARGV`` in a process of its own, its memory capped (8 GB of address space: a bomb expanded
    fails there instead of taking the machine's memory) and its time limited."""
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))

    try:
        return subprocess.run([sys.executable, "-m", "fedlib", *argv], cwd=cwd, env=ENV, capture_output=True,
                              text=True, timeout=timeout, preexec_fn=cap)
    except subprocess.TimeoutExpired:
        pytest.fail(f"python -m fedlib {' '.join(argv)[:80]}... gave no answer within {timeout} s")


# -- 4. the archive's index: missing, extra, swapped, edited and damaged entries named ------------------------------

@pytest.fixture(scope="module")
def archived(tmp_path_factory):
    """Two seeds of a 3-round run, archived by ``archive.add`` (which writes the index)."""
    cfg = load_config(CFG, {"results_dir": str(tmp_path_factory.mktemp("results")), "train.rounds": 3})
    from fedlib.runner import run_one

    for s in (1, 2):
        run_one(cfg, s, progress=False)
    root = tmp_path_factory.mktemp("archive")
    assert [archive.add(cfg, s, root) for s in (1, 2)] == [True, True]
    return cfg, root


@pytest.fixture
def toy_tables(monkeypatch, archived):
    from fedlib.papers import catalog

    cfg, _ = archived
    monkeypatch.setattr(catalog, "archived_tables", lambda: [("toy table", {"m": cfg}, [1, 2])])


def _copy(root: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(root, tmp_path / "archive"))


def _check(root: Path, capsys) -> tuple[int, list[str]]:
    code = fedlib_main(["archive", "--check", "--root", str(root)])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err and not cap.err.strip(), cap.err
    return code, [ln for ln in cap.out.splitlines() if not ln.startswith("toy table:")]


@pytest.mark.slow
def test_add_writes_an_index_of_what_the_archive_holds(archived, toy_tables, tmp_path, capsys):
    cfg, root = archived
    index = json.loads((root / archive.INDEX).read_text())["entries"]
    assert sorted(index) == sorted(run_id(cfg, s) for s in (1, 2))
    assert all(index[e.name] == archive.entry_hash(e) for e in (archive.entry(cfg, s, root) for s in (1, 2)))
    assert _check(root, capsys) == (0, [])
    # the hint of an archived config names the archived file, relative to the checkout where it lies there
    assert _hint(archive.entry(cfg, 1, root).joinpath("config.yaml").read_text()) == \
        f"python -m fedlib run {archive.entry(cfg, 1, root) / 'config.yaml'}"


@pytest.mark.slow
def test_a_deleted_entry_is_named_missing(archived, toy_tables, tmp_path, capsys):
    cfg, root = archived
    dest = _copy(root, tmp_path)
    shutil.rmtree(archive.entry(cfg, 2, dest))
    code, lines = _check(dest, capsys)
    assert code == 1
    assert lines[0] == f"{archive.entry(cfg, 2, dest)}: missing (listed in INDEX.json; its folder is gone)"
    assert lines[-1].startswith("archive check: 1 entry failed")


@pytest.mark.slow
def test_swapped_configs_are_named_and_not_served(archived, toy_tables, tmp_path, capsys):
    cfg, root = archived
    dest = _copy(root, tmp_path)
    one, two = archive.entry(cfg, 1, dest) / "config.yaml", archive.entry(cfg, 2, dest) / "config.yaml"
    a, b = one.read_bytes(), two.read_bytes()
    one.write_bytes(b)
    two.write_bytes(a)
    code, lines = _check(dest, capsys)
    assert code == 1
    assert f"{one}: is the config of run {run_id(cfg, 2)}, not of run {run_id(cfg, 1)} (swapped or edited)" in lines
    assert f"{two}: is the config of run {run_id(cfg, 1)}, not of run {run_id(cfg, 2)} (swapped or edited)" in lines
    fresh = {**cfg, "results_dir": str(tmp_path / "fresh")}
    for s in (1, 2):
        with pytest.warns(DamagedRunWarning, match=r"config\.yaml: is the config of run"):
            assert archive.summary(fresh, s, dest) is None


@pytest.mark.slow
def test_an_entry_edited_consistently_is_named_and_not_served(archived, toy_tables, tmp_path, capsys):
    """A summary changed and its own hash made again passes every check of the entry alone: the index names it."""
    cfg, root = archived
    dest = _copy(root, tmp_path)
    path = archive.entry(cfg, 1, dest) / "summary.json"
    record = json.loads(path.read_text())
    record["finished_utc"] = "2099-01-01 00:00"
    path.write_text(json.dumps(store.with_hash(record), indent=1) + "\n")
    fresh = {**cfg, "results_dir": str(tmp_path / "fresh")}
    with pytest.warns(DamagedRunWarning, match=r"differ from their record in .*INDEX\.json"):
        assert archive.summary(fresh, 1, dest) is None
    assert archive.summary(fresh, 2, dest)["archived"] is True
    code, lines = _check(dest, capsys)
    assert code == 1 and lines[0].startswith(f"{archive.entry(cfg, 1, dest)}: its files differ from their record")


@pytest.mark.slow
@pytest.mark.parametrize("damage, named", [
    (lambda e: (e / archive.LOG_GZ).write_bytes((e / archive.LOG_GZ).read_bytes()[:30]), "rounds.jsonl.gz"),
    (lambda e: (e / "summary.json").write_text("{"), "summary.json"),
    (lambda e: (e / "config.yaml").unlink(), "config.yaml"),
    (lambda e: (e / "config.yaml").write_text("seeds: &a [*a]\n"), "config.yaml"),
])
def test_a_damaged_entry_is_named_in_one_line(archived, toy_tables, tmp_path, capsys, damage, named):
    cfg, root = archived
    dest = _copy(root, tmp_path)
    damage(archive.entry(cfg, 2, dest))
    code, lines = _check(dest, capsys)
    assert code == 1 and len(lines) == 2, lines
    assert lines[0].startswith(str(archive.entry(cfg, 2, dest) / named)), lines


@pytest.mark.slow
def test_an_extra_entry_and_a_missing_index_are_named(archived, toy_tables, tmp_path, capsys):
    cfg, root = archived
    dest = _copy(root, tmp_path)
    index = json.loads((dest / archive.INDEX).read_text())
    del index["entries"][run_id(cfg, 2)]
    (dest / archive.INDEX).write_text(json.dumps(index))
    code, lines = _check(dest, capsys)
    assert code == 1 and lines[0].startswith(f"{archive.entry(cfg, 2, dest)}: not in INDEX.json")
    (dest / "stray.txt").write_text("")
    (dest / archive.INDEX).unlink()
    code, lines = _check(dest, capsys)
    assert code == 1 and lines[0].startswith(f"{dest / archive.INDEX}: missing")
    assert f"{dest / 'stray.txt'}: extra (a file where the archive holds only entry folders)" in lines
    (dest / "stray.txt").unlink()
    # --index records what passes its checks; then everything passes
    assert fedlib_main(["archive", "--index", "--root", str(dest)]) == 0
    assert capsys.readouterr().out.strip() == f"archive index: 2 entries recorded in {dest / archive.INDEX}"
    assert _check(dest, capsys) == (0, [])
    (dest / archive.INDEX).write_text("{not json")
    code, lines = _check(dest, capsys)
    assert code == 1 and lines[0].startswith(f"{dest / archive.INDEX}: unreadable")


@pytest.mark.parametrize("kind", ["missing", "file"])
@pytest.mark.parametrize("flag", ["--check", "--index"])
def test_an_archive_root_that_is_not_a_folder_is_one_line_exit_2(kind, flag, tmp_path, capsys):
    root = tmp_path / "nowhere"
    if kind == "file":
        root.write_text("")
    assert fedlib_main(["archive", flag, "--root", str(root)]) == 2
    one_line(capsys, "--root", str(root))


def test_an_archive_root_under_a_file_is_one_line_exit_2(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert fedlib_main(["archive", "--root", str(tmp_path / "file" / "archive")]) == 2
    one_line(capsys, "--root", "is a file")


@pytest.mark.slow
def test_concurrent_adds_keep_every_entry_in_the_index(archived, tmp_path):
    """Four processes add the two runs again and again into one archive at once: the index ends whole."""
    cfg, _ = archived
    root = tmp_path / "archive"
    script = ("import sys, yaml\nfrom fedlib import archive\nfrom fedlib.config import validate\n"
              f"cfg = validate(yaml.safe_load({yaml.safe_dump(cfg)!r}))\n"
              "for i in range(6):\n    archive.add(cfg, 1 + (i + int(sys.argv[1])) % 2, sys.argv[2], replace=True)\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(k), str(root)], env=ENV, cwd=ROOT) for k in range(4)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0, 0, 0]
    index = archive.read_index(root)
    assert sorted(index) == sorted(run_id(cfg, s) for s in (1, 2))
    assert archive.check(root) == []


@pytest.mark.slow
def test_add_updates_the_index_without_rescanning_the_archive(archived, tmp_path, monkeypatch):
    cfg, root = archived
    dest = _copy(root, tmp_path)
    shutil.rmtree(archive.entry(cfg, 2, dest))
    index = archive.read_index(dest)
    del index[run_id(cfg, 2)]
    index.update({f"{i:012x}": "0" * 64 for i in range(5000)})   # a large archive's index (its folders absent)
    archive.write_index(dest, index)
    hashed = []
    real = archive.entry_hash
    monkeypatch.setattr(archive, "entry_hash", lambda folder: hashed.append(Path(folder).name) or real(folder))
    t0 = time.perf_counter()
    assert archive.add(cfg, 2, dest)
    assert time.perf_counter() - t0 < 2.0
    assert set(hashed) == {run_id(cfg, 2)}
    assert archive.read_index(dest)[run_id(cfg, 2)] == real(archive.entry(cfg, 2, dest))


# -- 5. a seed given twice ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("seeds", ["[1,1]", "[3, 1, 3]", "[0, 0]"])
def test_duplicate_seeds_are_refused_in_one_line(seeds, capsys, no_data):
    assert fedlib_main(["run", str(CFG), f"seeds={seeds}", "--no-progress"]) == 2
    one_line(capsys, "seeds", "distinct seeds", "more than once")


def test_a_study_refuses_duplicate_seeds(capsys, no_data, tmp_path):
    from fedlib.papers import fedmps, gfpl, protonorm
    from fedlib.validation import ConfigError

    for module in (fedmps, gfpl, protonorm):
        assert module.main(["--seeds", "1234", "1234"]) == 2
        one_line(capsys, "seeds", "distinct seeds")
    with pytest.raises(ConfigError, match="distinct seeds"):
        fedmps.load_plan("smoke", seeds=[5, 5])
    spec = yaml.safe_load(fedmps.Plan.params_file().read_text())
    spec["profiles"]["smoke"]["seeds"] = [1, 2, 1]
    path = tmp_path / "fedmps" / "experiments.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(ConfigError, match=r"profiles\.smoke\.seeds: got \[1, 2, 1\]; allowed: distinct seeds"):
        fedmps.Plan.load("smoke", path=path)


# -- 6. damaged dataset files ------------------------------------------------------------------------------------

def _idx(array: np.ndarray) -> bytes:
    return bytes([0, 0, 8, array.ndim]) + b"".join(struct.pack(">I", d) for d in array.shape) + \
        array.astype(np.uint8).tobytes()


def _fmnist(root: Path) -> Path:
    """A tiny Fashion-MNIST in IDX files (train images gzipped, the rest plain)."""
    folder = root / "fashion-mnist"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 40), ("t10k", 20)):
        (folder / f"{split}-images-idx3-ubyte.gz").write_bytes(gzip.compress(_idx(rng.integers(0, 256, (n, 28, 28)))))
        (folder / f"{split}-labels-idx1-ubyte").write_bytes(_idx(np.arange(n) % 10))
    return folder


def _cut(path: Path, keep: float) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])


def _regz(path: Path, change) -> None:
    path.write_bytes(gzip.compress(change(gzip.decompress(path.read_bytes()))))


DAMAGE = {   # (what is done, the file named)
    "truncated gz": (lambda f: _cut(f / "train-images-idx3-ubyte.gz", 0.5), "train-images-idx3-ubyte.gz"),
    "not gzip": (lambda f: (f / "train-images-idx3-ubyte.gz").write_bytes(b"plain bytes"),
                 "train-images-idx3-ubyte.gz"),
    "bad magic": (lambda f: (f / "train-labels-idx1-ubyte").write_bytes(
        b"\x08\x03" + (f / "train-labels-idx1-ubyte").read_bytes()[2:]), "train-labels-idx1-ubyte"),
    "half images": (lambda f: _regz(f / "train-images-idx3-ubyte.gz", lambda d: d[:16 + (len(d) - 16) // 2]),
                    "train-images-idx3-ubyte.gz"),
    "short labels": (lambda f: _cut(f / "t10k-labels-idx1-ubyte", 0.6), "t10k-labels-idx1-ubyte"),
    "labels for other images": (lambda f: (f / "train-labels-idx1-ubyte").write_bytes(_idx(np.arange(30) % 10)),
                                "train-labels-idx1-ubyte"),
    "a label past the classes": (lambda f: (f / "t10k-labels-idx1-ubyte").write_bytes(_idx(np.full(20, 200))),
                                 "t10k-labels-idx1-ubyte"),
    "images of another size": (lambda f: (f / "t10k-images-idx3-ubyte").write_bytes(_idx(np.zeros((20, 32, 32)))),
                               "t10k-images-idx3-ubyte"),   # a plain file is read before its .gz
    "header claims billions": (lambda f: (f / "train-labels-idx1-ubyte").write_bytes(
        bytes([0, 0, 8, 1]) + struct.pack(">I", 0xFFFFFFFF)), "train-labels-idx1-ubyte"),
    "labels with image dimensions": (lambda f: (f / "train-labels-idx1-ubyte").write_bytes(_idx(np.zeros((40, 2, 2)))),
                                     "train-labels-idx1-ubyte"),
    "empty file": (lambda f: (f / "train-labels-idx1-ubyte").write_bytes(b""), "train-labels-idx1-ubyte"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_dataset_file_is_named_in_one_line(case, tmp_path, capsys):
    folder = _fmnist(tmp_path / "data")
    damage, named = DAMAGE[case]
    damage(folder)
    code = fedlib_main(["run", str(CFG), "dataset=fmnist", f"data_root={tmp_path / 'data'}", "model=cnn_fmnist",
                        "partition={scheme: dirichlet, num_clients: 2, alpha: 0.5}", "train.rounds=1", "--no-progress",
                        f"results_dir={tmp_path / 'results'}"])
    text = one_line(capsys, str(folder / named), "get a good copy")
    assert code == 2, text
    assert not (tmp_path / "results").exists()


def test_the_idx_reader_reads_a_sound_copy(tmp_path):
    from fedlib.data.sources import load_fmnist

    _fmnist(tmp_path / "data")
    ds = load_fmnist(tmp_path / "data")
    assert tuple(ds.x_train.shape) == (40, 1, 28, 28) and ds.y_test.tolist() == list(range(10)) * 2


# -- 7. output folders that cannot be written; a full disk ----------------------------------------------------------

def _immutable(folder: Path):
    folder.mkdir(parents=True, exist_ok=True)
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode:
        pytest.skip("chattr +i is not available here (needs root and a file system that keeps the flag)")
    return folder


@pytest.fixture
def immutable(tmp_path):
    folder = tmp_path / "immutable"
    yield lambda: _immutable(folder)
    subprocess.run(["chattr", "-i", str(folder)], capture_output=True)


@pytest.mark.parametrize("where", ["/proc/fedlib-x", "/sys/fedlib-x", "/proc/self/fedlib-x", "{file}/results",
                                   "{immutable}/results", "{immutable}"])
def test_run_refuses_an_output_folder_it_cannot_write_in_one_line(where, tmp_path, immutable, capsys, no_data):
    (tmp_path / "file").write_text("")
    target = where.format(file=tmp_path / "file", immutable=immutable() if "{immutable}" in where else "")
    assert fedlib_main(["run", str(CFG), f"results_dir={target}", "--no-progress"]) == 2
    one_line(capsys, "results_dir", target)


@pytest.mark.parametrize("where", ["{file}/root", "{immutable}", "/proc/fedlib-x", "/sys/fedlib-x"])
def test_reproduce_refuses_a_root_it_cannot_write_in_one_line(where, tmp_path, immutable, capsys, monkeypatch):
    import fedlib.reproduce

    monkeypatch.setattr(fedlib.reproduce, "run_notebook", lambda *a, **k: pytest.fail("a notebook ran"))
    (tmp_path / "file").write_text("")
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    (notebooks / "toy.ipynb").write_text("{}")
    root = where.format(file=tmp_path / "file", immutable=immutable() if "{immutable}" in where else "")
    assert fedlib_main(["reproduce", "--profile", "smoke", "--root", root, "--notebooks", str(notebooks),
                        "--no-progress"]) == 2
    one_line(capsys, "--root")


@pytest.mark.slow
@pytest.mark.parametrize("failure", ["torch", "enospc"])
def test_a_full_disk_is_said_in_one_line_and_the_run_resumes(failure, tmp_path, monkeypatch, capsys):
    calls = {"n": 0}
    real_save, real_fsync = store.torch.save, store.os.fsync

    def torch_full(obj, path, *a, **k):   # what torch's stream writer raises when the disk fills up
        calls["n"] += 1
        if calls["n"] >= 2:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
        return real_save(obj, path, *a, **k)

    def fsync_full(fd):
        calls["n"] += 1
        if calls["n"] >= 6:   # round 2's checkpoint (config, partition, then log and checkpoint each round)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    if failure == "torch":
        monkeypatch.setattr(store.torch, "save", torch_full)
    else:
        monkeypatch.setattr(store.os, "fsync", fsync_full)
    argv = ["run", str(CFG), "train.rounds=3", "--no-progress", f"results_dir={tmp_path / 'results'}"]
    assert fedlib_main(argv) == 1
    text = one_line(capsys, "disk full", "the same command to resume")
    assert str(tmp_path / "results") in text
    assert not list((tmp_path / "results").rglob("*.tmp"))
    monkeypatch.undo()   # space freed
    assert fedlib_main(argv) == 0
    out = capsys.readouterr().out
    assert "spiral_test" in out
    cfg = load_config(CFG, {"train.rounds": 3, "results_dir": str(tmp_path / "results")})
    assert json.loads((run_dir(cfg, 1) / "summary.json").read_text())["rounds"] == 3


# -- 8. smaller ones ----------------------------------------------------------------------------------------------

def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_stale_temporary_files_of_dead_processes_go_when_a_run_folder_is_taken(tmp_path, capsys):
    cfg = load_config(CFG, {"train.rounds": 1, "results_dir": str(tmp_path / "results")})
    folder = run_dir(cfg, 1)
    folder.mkdir(parents=True)
    dead, alive = _dead_pid(), os.getppid()
    stale = [folder / f".checkpoint.pt.{dead}.tmp", folder / f".rounds.jsonl.{dead}.tmp"]
    live = folder / f".summary.json.{alive}.tmp"
    for p in stale + [live]:
        p.write_bytes(b"half written")
    assert fedlib_main(["run", str(CFG), "train.rounds=1", "--no-progress", f"results_dir={tmp_path / 'results'}"]) == 0
    assert not any(p.exists() for p in stale) and live.exists()
    assert (folder / "summary.json").is_file()


def test_a_damaged_run_warning_starts_on_its_own_line_under_a_progress_bar(tmp_path, capsys):
    from tqdm.auto import tqdm

    bar = tqdm(total=10, desc="runs: 3 to run", file=sys.stderr)
    bar.update(3)
    with warnings.catch_warnings():   # as Python shows a warning outside pytest's recording of them
        warnings.simplefilter("always")
        warnings.showwarning = store._show
        store.warn(tmp_path, "summary.json", "unreadable", "not served; checking the run from its checkpoint")
    bar.close()
    err = capsys.readouterr().err
    before, found, after = err.partition("warning: ")
    assert found and before.endswith(("\r", "\n")), repr(err)
    assert after.startswith(f"{tmp_path / 'summary.json'}: unreadable; not served") and "\n" in after


WARNED_GRID = """
import sys
from fedlib.config import load_config
from fedlib.runner import run_many, run_one, run_dir

cfg = load_config({cfg!r}, {{"results_dir": {results!r}, "train.rounds": 1}})
run_one(cfg, 1, progress=False)
(run_dir(cfg, 1) / "summary.json").write_text("{{")
run_many([(cfg, 1), (cfg, 2)], workers=0, progress=True)
"""


@pytest.mark.slow
def test_a_damaged_run_warning_in_a_grid_starts_on_its_own_line(tmp_path):
    """A grid trained in the process (a study command's small grid) draws its bar while a damaged run is found."""
    script = WARNED_GRID.format(cfg=str(CFG), results=str(tmp_path / "results"))
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=ENV, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    before, found, after = out.stderr.partition("warning: ")
    assert found and "runs: 2 to run" in before and before.endswith(("\r", "\n")), repr(out.stderr[:600])
    assert after.startswith(str(tmp_path / "results")) and "summary.json: unreadable" in after


GRID = """
import signal
import sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from fedlib import study
from fedlib.config import load_config
from fedlib.runner import run_many

def grid(argv=None):
    cfg = load_config({cfg!r}, {{"results_dir": {results!r}, "train.rounds": 400}})
    run_many([(cfg, s) for s in (1, 2, 3)], workers=1, progress=False)
    return 0

if __name__ == "__main__":
    sys.exit(study.command(grid)())
"""


@pytest.mark.slow
def test_ctrl_c_of_a_pool_prints_one_line_and_no_leaked_semaphore(tmp_path):
    from fedlib import study

    results = tmp_path / "results"
    script = tmp_path / "grid.py"
    script.write_text(GRID.format(cfg=str(CFG), results=str(results)))
    proc = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=ENV)
    deadline = time.time() + 240
    while time.time() < deadline and not any(
            len(p.read_text().splitlines()) >= 2 for p in results.glob("*/rounds.jsonl")):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == [study.INTERRUPTED], err


@pytest.mark.parametrize("override, meant", [
    ("algorithm.name=fedprotoo", "fedproto"), ("dataset.name=fmnst", "fmnist"),
    ("model.name=mlp_spiraal", "mlp_spiral"),
    ("executor=batch", "batched"), ("partition.scheme=dirichelt", "dirichlet"), ("device=cpuu", "cpu"),
])
def test_a_misspelt_name_gets_a_suggestion(override, meant, capsys, no_data):
    assert fedlib_main(["run", str(CFG), override, "--no-progress"]) == 2
    one_line(capsys, f"(did you mean {meant!r}?)", "allowed: one of")


def test_a_misspelt_choice_of_a_flag_gets_a_suggestion(capsys):
    with pytest.raises(SystemExit) as stop:
        fedlib_main(["reproduce", "--device", "cudaa"])
    assert stop.value.code == 2
    one_line(capsys, "--device")
    from fedlib.papers import fedmps

    with pytest.raises(SystemExit):
        fedmps.main(["--executor", "sequentail"])
    one_line(capsys, "invalid choice", "(did you mean 'sequential'?)")


def test_overrides_are_taken_after_flags_too(capsys, no_data):
    assert fedlib_main(["run", str(CFG), "--no-progress", "train.rounds=0"]) == 2
    one_line(capsys, "train.rounds: got 0")
    assert fedlib_main(["run", str(CFG), "train.lr=1", "--no-progress", "train.rounds=0", "seeds=[1,1]"]) == 2
    one_line(capsys, "train.rounds: got 0")
    with pytest.raises(SystemExit) as stop:
        fedlib_main(["run", str(CFG), "--no-progress", "--bogus", "train.rounds=2"])
    assert stop.value.code == 2
    one_line(capsys, "unrecognized arguments: --bogus")


def test_partition_takes_overrides_after_its_flag(tmp_path, capsys, no_data):
    assert fedlib_main(["partition", str(CFG), "--out", str(tmp_path / "p.png"), "train.rounds=0"]) == 2
    one_line(capsys, "train.rounds: got 0")


# -- the report and the planner: outputs checked before the render, every YAML file read through the guarded loader --

@pytest.mark.parametrize("out, fields", [
    ("/proc/fedlib/REPORT.md", ("--out", "/proc")),
    ("{tmp}/file/REPORT.md", ("--out", "is a file")),
])
def test_report_refuses_an_output_it_cannot_write_before_rendering(out, fields, tmp_path, capsys, monkeypatch):
    from fedlib import render

    monkeypatch.setattr(render, "render", lambda **k: pytest.fail("rendered before the output was checked"))
    (tmp_path / "file").write_text("")
    assert render.main(["--out", out.format(tmp=tmp_path)]) == 2
    one_line(capsys, *fields)


def test_report_writes_report_md_into_a_folder_given_as_out(tmp_path, capsys, monkeypatch):
    from fedlib import render

    monkeypatch.setattr(render, "render", lambda **k: ("# the report\n", []))
    (tmp_path / "there").mkdir()
    for out, written in ((tmp_path / "there", tmp_path / "there" / "REPORT.md"),
                         (f"{tmp_path}/new/", tmp_path / "new" / "REPORT.md"),
                         (tmp_path / "mine.md", tmp_path / "mine.md")):
        assert render.main(["--out", str(out)]) == 0
        assert written.read_text() == "# the report\n"
    assert not [p for p in files_below(tmp_path) if p.name.endswith(".tmp")]


@pytest.mark.parametrize("value", ["-3", "0", "nan", "inf", "abc"])
def test_the_planner_refuses_a_bad_plan_hours(value, capsys):
    from fedlib.render import evidence_main

    with pytest.raises(SystemExit) as exc:
        evidence_main(["--plan-hours", value])
    assert exc.value.code == 2
    one_line(capsys, "--plan-hours", "allowed: a number in (0, inf)")


def test_a_study_plan_with_an_alias_bomb_is_refused_in_one_line(tmp_path):
    from fedlib.papers.fedic import Plan
    from fedlib.validation import ConfigError

    plan = tmp_path / "experiments.yaml"
    plan.write_text(Plan.params_file().read_text() + "\nextra: " + _bomb() + "\n")
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=r"^[^/]+/experiments\.yaml: refused: its aliases expand to more than"):
        Plan.load("smoke", path=plan)
    assert time.perf_counter() - t0 < 1.0
    plan.write_text("profiles: [unclosed\n")
    with pytest.raises(ConfigError, match=r"experiments\.yaml:2:1"):
        Plan.load("smoke", path=plan)
