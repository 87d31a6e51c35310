"""Record content never becomes a path outside the folders given (issue 38, item 9): a record whose
name fields hold path parts is skipped with a warning naming it, figure names made from record
text are slugified, and ``bench report`` / ``bench leaderboard`` remove only the figures they
wrote themselves, never a user's file in ``figures/``."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli import main
from bench.store import PACK_NAME, ResultsStore, config_hash, pack_bytes, read_pack, record_problem

#: every field of a record that could reach a file name, with path parts
EVIL = "../../../escape"
FIELDS = ("suite", "model", "method", "profile", "task", "kind", "shift", "config_hash", "fit_hash",
          "method_label")


def _good(root: Path) -> None:
    import test_leaderboard as lb

    for method in lb.CONFIGS:
        for seed in (0, 1):
            lb._write(root, method, seed)


def _evil_records(root: Path) -> list[Path]:
    """One record per field holding path parts, and one with all of them; written where a store
    would put them (their own file names are safe), as a hand-edited or copied results folder."""
    base = {"record_version": 1, "status": "ok", "suite": "cifar10c", "profile": "quick", "task": "classification",
            "method": "deterministic", "method_label": "deterministic", "method_config": {EVIL: 1},
            "config_hash": "e1", "fit_hash": "e1", "model": "resnet20", "seed": 7, "kind": "id", "shift": "clean",
            "severity": 0, "n": 100, "metrics": {"accuracy": 0.5, "nll": 1.0, "brier": 0.5, "ece": 0.1},
            "finished_at": "2026-01-01T00:10:00+00:00"}
    paths = []
    for i, field in enumerate(FIELDS + ("all",)):
        rec = dict(base)
        for f in (FIELDS if field == "all" else (field,)):
            rec[f] = EVIL
        path = root / "cifar10c" / "records" / "resnet20" / f"deterministic-evil{i}" / "seed7" / "id-clean-0.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(rec))
        paths.append(path)
    # a pack naming a record path outside the store
    (root / "cifar10c" / PACK_NAME).write_bytes(pack_bytes({"../../../outside.json": dict(base)}))
    return paths


def _listing(top: Path, skip: tuple[Path, ...]) -> dict[str, int]:
    """Every file and folder under ``top`` (but inside ``skip``) with its modification time."""
    return {str(p.relative_to(top)): p.stat().st_mtime_ns for p in sorted(top.rglob("*"))
            if not any(p == s or s in p.parents for s in skip)}


def test_records_with_path_parts_write_and_read_nothing_outside_the_folders_given(tmp_path, caplog):
    top = tmp_path / "top"
    results, lb_out, rep_out = top / "a" / "b" / "results", top / "a" / "b" / "lb", top / "a" / "b" / "rep"
    _good(results)
    evil = _evil_records(results)
    # what a traversing profile or suite would read or overwrite
    (top / "escape").mkdir(parents=True)
    (top / "escape" / "secret.png").write_bytes(b"\x89PNG secret")
    for d in (lb_out, rep_out / "cifar10c"):  # a user's own figure beside the generated ones
        (d / "figures").mkdir(parents=True)
        (d / "figures" / "my_plot.png").write_bytes(b"\x89PNG mine")
    before = _listing(top, (lb_out, rep_out))
    assert main(["leaderboard", "--results", str(results), "--out", str(lb_out), "--include-smoke"]) == 0
    assert main(["report", "--results", str(results), "--out", str(rep_out)]) == 0
    assert _listing(top, (lb_out, rep_out)) == before  # nothing written (or touched) outside
    for d in (lb_out, rep_out / "cifar10c"):
        assert (d / "figures" / "my_plot.png").read_bytes() == b"\x89PNG mine"
    assert {p.name for p in rep_out.iterdir()} == {"cifar10c"}
    for html in (lb_out / "leaderboard.html", rep_out / "cifar10c" / "index.html"):
        assert "secret" not in html.read_text()
    for d in (lb_out, rep_out / "cifar10c"):
        assert not [p for p in d.rglob("*") if "escape" in p.name]
    for path, field in zip(evil, FIELDS + ("all",)):  # each is skipped, by name, saying why
        # but for the label, free text that is slugified where it names a file: the record is used
        assert (f"skipping damaged record {path}" in caplog.text) == (field != "method_label"), field
    assert "holds a path part" in caplog.text and "is not a plain name" in caplog.text
    assert "outside the store" in caplog.text  # the pack


def test_each_name_field_with_path_parts_is_refused():
    rec = {"record_version": 1, "status": "ok", "suite": "s", "model": "m", "method": "x", "seed": 0, "kind": "id",
           "shift": "clean", "profile": "quick", "task": "classification", "config_hash": "ab", "fit_hash": "cd"}
    assert record_problem(rec) is None
    for field in FIELDS[:-1]:  # method_label is free text: slugified where it names a file
        for bad in (EVIL, "a/b", "a\\b", "..", "x\x00y"):
            assert record_problem({**rec, field: bad}), (field, bad)
    assert record_problem({**rec, "method_label": "pbn[lr=0.05]"}) is None


def test_packs_naming_paths_outside_the_store_are_refused(tmp_path):
    for bad in ("../x.json", "a/../../x.json", "/etc/x.json", "a\\..\\x.json", "C:/x.json"):
        pack = tmp_path / PACK_NAME
        pack.write_bytes(pack_bytes({bad: {}}))
        with pytest.raises(ValueError, match="outside the store"):
            read_pack(pack)
    pack.write_bytes(pack_bytes({"s/records/m/x-1/seed0/id-clean-0.json": {}, "a..b/c.json": {}}))
    assert len(read_pack(pack)) == 2


def test_figure_names_and_artifact_folders_from_record_text_stay_inside(tmp_path):
    from bench.reporting.build import _artifact_dir
    from bench.reporting.document import Document, Figure, Section
    from bench.reporting.write import write_report

    doc = Document("t", [Section("s", [Figure("../../escape", b"\x89PNG", "c")])])
    with pytest.raises(ValueError, match="not plain file names"):
        write_report(doc, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # refused before anything was written
    assert _artifact_dir(tmp_path, "quick") == tmp_path / "quick"
    for bad in ("..", "../x", "a/b", ".", ""):
        assert _artifact_dir(tmp_path, bad) is None


def test_a_report_removes_only_the_figures_it_wrote(tmp_path):
    from bench.reporting.document import Document, Figure, Section
    from bench.reporting.write import MANIFEST, write_report

    def doc(*names):
        return Document("t", [Section("s", [Figure(n, b"\x89PNG " + n.encode(), "c") for n in names])])

    out = tmp_path / "out"
    (out / "figures").mkdir(parents=True)
    (out / "figures" / "mine.png").write_bytes(b"user")
    (out / "figures" / "old-report.png").write_bytes(b"from before the manifest")
    write_report(doc("a", "b"), out)
    assert (out / "figures" / MANIFEST).read_text().split() == ["a.png", "b.png"]
    write_report(doc("b", "c"), out)
    names = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert names == ["b.png", "c.png", "mine.png", "old-report.png"]  # a.png was ours: gone; the rest stay
    (out / "figures" / MANIFEST).write_text("../../x.png\n/tmp/y.png\nc.png")  # a tampered manifest
    (tmp_path / "x.png").write_bytes(b"outside")
    write_report(doc("b"), out)
    assert (tmp_path / "x.png").exists()  # a name with path parts is never ours
    assert sorted(p.name for p in (out / "figures").glob("*.png")) == ["b.png", "mine.png", "old-report.png"]
