"""A MAP network trained again, or loaded from the cache, where cells of the results folder stand on
another fit of it (its checkpoint gone, the fit made elsewhere or at another thread count) is said at
once: the cells a run adds on it are not paired with the kept ones."""
import json

from bench.cli import main
from bench.provenance import cpu_model

RUN = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--threads", "1", "--set", "seeds=0"]


def _id_record(out, method):
    (rec,) = (out / "toy").glob(f"records/*/{method}-*/seed0/id-*.json")
    return rec


def test_a_retrained_map_network_that_is_another_fit_than_the_kept_cells_is_said(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(RUN + ["--out", str(out), "--methods", "deterministic"]) == 0
    rec = _id_record(out, "deterministic")
    sha = json.loads(rec.read_text())["diagnostics"]["map_training"]["network_sha"]
    (ckpt,) = (out / "toy").glob("checkpoints/map/*/*/seed0.pt")

    # the same fit again (one thread, this machine): nothing to say
    ckpt.unlink()
    capsys.readouterr()
    assert main(RUN + ["--out", str(out), "--methods", "pbn"]) == 0
    assert "another fit" not in capsys.readouterr().err
    assert json.loads(_id_record(out, "pbn").read_text())["diagnostics"]["map_training"][
        "network_sha"] == sha

    # the kept cell stood on another fit (as one made on another machine): said, with its digest
    r = json.loads(rec.read_text())
    r["diagnostics"]["map_training"]["network_sha"] = "0123456789abcdef"
    rec.write_text(json.dumps(r))
    ckpt.unlink()
    assert main(RUN + ["--out", str(out), "--methods", "deep_ensemble"]) == 0
    err = capsys.readouterr().err
    assert f"trained now ({sha}, 1 torch thread(s) on {cpu_model()}) is another fit" in err, err
    assert "0123456789abcdef (1 cell(s))" in err and str(ckpt) in err
    assert "not paired with those; they pair with the 1 cell(s) here that stand on this one." in err, err  # pbn's
    # a later run that loads the network from the cache says it too
    assert main(RUN + ["--out", str(out), "--methods", "pbn", "--set", "pbn.rho_lr=0.2"]) == 0
    err = capsys.readouterr().err
    assert f"loaded from {ckpt} ({sha}) is another fit" in err and "0123456789abcdef (1 cell(s))" in err, err
    events = [json.loads(line) for f in (out / "toy").glob("events/*.jsonl") for line in f.read_text().splitlines()]
    assert [(e["trained"], e["kept"], e["on_this_one"]) for e in events if e["event"] == "map_another_fit"] == [
        (True, {"0123456789abcdef": 1}, 1), (False, {"0123456789abcdef": 1}, 1)]
