"""``python -m bench leaderboard``: method configurations ranked across runs, quality beside cost.

records.py  results directories -> one deduplicated, filtered frame
board.py    per (suite, model, profile): per-seed quality and cost, ranking, paired Δ vs MAP, provenance
stats.py    paired t-test ties, rounding to the seed noise
pareto.py   the cost-quality Pareto figure
output.py   HTML / markdown / CSV (and the published reference rows of published.json)
"""
from .board import Board, build_boards
from .output import write_leaderboard
from .records import load_runs, select_runs

__all__ = ["Board", "build_boards", "load_runs", "select_runs", "write_leaderboard"]
