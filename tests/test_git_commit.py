"""The commit a record names is "+dirty" only where the code differs from it: the prose and the
kept records (which bench writes into, e.g. ``bench perf --save docs/records/perf/cpu.json``)
do not make a later run's code dirty."""
import subprocess

from bench import provenance


def _commit():
    provenance.git_commit.cache_clear()  # computed once per process in a run
    return provenance.git_commit()


def _git(repo, *args):
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def test_only_changed_code_marks_a_commit_dirty(tmp_path, monkeypatch, request):
    request.addfinalizer(provenance.git_commit.cache_clear)  # the other tests read this repository's commit
    repo = tmp_path / "repo"
    (repo / "bench").mkdir(parents=True)
    (repo / "docs" / "records" / "perf").mkdir(parents=True)
    (repo / "bench" / "x.py").write_text("A = 1\n")
    (repo / "docs" / "records" / "perf" / "cpu.json").write_text("{}\n")
    (repo / "README.md").write_text("# r\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c")
    monkeypatch.setattr(provenance, "REPO", repo)
    monkeypatch.delenv("BENCH_GIT_COMMIT", raising=False)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert _commit() == head

    # a first perf run saved its rows, the prose was edited: the code is still the commit's
    (repo / "docs" / "records" / "perf" / "cpu.json").write_text('{"rows": []}\n')
    (repo / "README.md").write_text("# r, edited\n")
    (repo / "scratch.txt").write_text("untracked\n")
    assert _commit() == head

    (repo / "bench" / "x.py").write_text("A = 2\n")
    assert _commit() == head + "+dirty"


def test_the_device_scripts_commit_uses_the_same_paths():
    """scripts/device_prepare.sh writes the commit a device's records name: the same rule."""
    import re

    script = (provenance.REPO / "scripts" / "device_prepare.sh").read_text()
    assert tuple(re.findall(r":\(exclude\)([^']+)'", script)) == provenance.NOT_CODE
