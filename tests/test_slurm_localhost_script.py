"""scripts/slurm_localhost.sh stop ends the daemons it started (by their PID files), never a
process of the same name that it did not start (another user's slurmd on a shared machine)."""
import os
import shutil
import subprocess
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "slurm_localhost.sh"


def _daemon(tmp_path: Path, name: str) -> subprocess.Popen:
    """A long sleep whose process name (``/proc/PID/comm``) is ``name``."""
    exe = tmp_path / "bin" / name
    exe.parent.mkdir(exist_ok=True)
    if not exe.exists():
        shutil.copy(shutil.which("sleep"), exe)
    return subprocess.Popen([str(exe), "300"])


def _alive(p: subprocess.Popen) -> bool:
    return p.poll() is None


def test_stop_kills_the_pid_file_daemons_and_spares_others_of_the_same_name(tmp_path):
    run = tmp_path / "run"
    (run / "munge").mkdir(parents=True)
    ours = {name: _daemon(tmp_path, name) for name in ("slurmd", "slurmctld", "munged")}
    theirs = [_daemon(tmp_path, "slurmd"), _daemon(tmp_path, "munged")]
    stale = _daemon(tmp_path, "slurmctld")
    try:
        (run / "slurmd.pid").write_text(f"{ours['slurmd'].pid}\n")
        (run / "slurmctld.pid").write_text(f"{ours['slurmctld'].pid}\n")
        (run / "munge" / "munged.pid").write_text(f"{ours['munged'].pid}\n")
        res = subprocess.run(["bash", str(SCRIPT), "stop"], env={**os.environ, "SLURM_LOCALHOST_RUN_DIR": str(run)},
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        for p in ours.values():
            p.wait(timeout=10)
        assert all(_alive(p) for p in theirs) and _alive(stale)
        assert not any((run / f).exists() for f in ("slurmd.pid", "slurmctld.pid", "munge/munged.pid"))
        # a PID file whose process is now something else (a reused PID) is not killed either
        (run / "slurmd.pid").write_text(f"{stale.pid}\n")  # stale is named slurmctld, not slurmd
        subprocess.run(["bash", str(SCRIPT), "stop"], env={**os.environ, "SLURM_LOCALHOST_RUN_DIR": str(run)},
                       check=True, timeout=60)
        time.sleep(0.2)
        assert _alive(stale)
    finally:
        for p in [*ours.values(), *theirs, stale]:
            if _alive(p):
                p.kill()
                p.wait()
