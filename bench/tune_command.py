"""``python -m bench tune``: the tuning protocol's command. The protocol itself (spaces, the choice on the
validation split, edge probes, notes) is :mod:`bench.tuning` and :mod:`bench.selection`; this runs its
sweeps as ``bench run`` does (a runner handed in by :mod:`bench.cli`), chooses, probes and stores."""
from __future__ import annotations

from pathlib import Path

from bench.errors import BenchError


def unkept_map_networks(suite, plan, method: str, model: str, seeds, out) -> list[int]:
    """The seeds of the MAP networks a fit of ``method`` at ``plan`` (one configuration) on ``seeds`` would
    train anew under the results ``out``: absent from the suite's checkpoint cache under the grid's key (and
    an older key's); [] for a method that does not start from its seed's MAP network."""
    from bench.harness import map_network_key
    from bench.store import ResultsStore, config_hash
    from methods import METHODS

    cls, cfg = METHODS.get(method), plan.methods[method][0]
    if cls.starts_from(cfg) != "map":
        return []
    key = map_network_key(suite, plan, model)
    root = ResultsStore(out).checkpoint_dir(suite.name) / "map" / str(model)  # MapCache's layout
    dirs = [root / config_hash(k) for k in (key, {**key, "data": plan.data})]
    needed = sorted({s for seed in seeds for s in cls.map_seeds(cfg, int(seed))})
    return [s for s in needed if not any((d / f"seed{s}.pt").is_file() for d in dirs)]


def cmd_tune(args, run) -> int:
    """``bench tune`` on ``args`` (its namespace), each sweep run by ``run(argv)`` (``bench run``'s arguments;
    :func:`bench.cli.cmd_tune` gives ``bench run`` itself)."""
    from bench import tuning
    from bench.selection import select
    from bench.suites import SUITES

    if args.spaces:
        print(tuning.spaces_markdown(SUITES.get(args.suite)()))
        return 0
    if args.markdown:
        SUITES.get(args.suite)  # an unknown suite: exit 2 naming the valid ones
        path = tuning.tuning_path(args.out, args.suite, args.profile)
        if not path.is_file():
            raise BenchError(f"no stored tuning at {path}; run python -m bench tune --suite {args.suite} "
                             f"--profile {args.profile} first")
        doc = tuning.read_tuning(path)
        if args.candidates:
            entry = (doc.get("methods") or {}).get(args.candidates)
            if entry is None:
                raise BenchError(f"no stored choice for {args.candidates!r} in {path}; tuned there: "
                                 f"{', '.join(doc.get('methods') or {}) or 'none'}")
            from bench.selection import selection_markdown

            def stored(c):  # JSON keeps the seeds of per_seed as strings
                cands = [{**r, "per_seed": {int(k): v for k, v in r["per_seed"].items()}} for r in c["candidates"]]
                return {**c, "candidates": cands, "method": args.candidates,
                        "tuned": tuning.tuned_options(entry["space"])}

            print(selection_markdown([stored(c) for c in entry["choices"]]))
            return 0
        print(tuning.tuning_markdown(doc))
        return 0
    if args.candidates:
        raise BenchError("--candidates goes with --markdown (it prints a stored tuning)")
    suite = SUITES.get(args.suite)()
    if args.profile not in suite.profiles:
        raise BenchError(f"suite {args.suite} has no profile {args.profile!r}; valid: {', '.join(suite.profiles)}")
    methods = args.methods or [m for m in suite.default_methods if tuning.space_of(m, suite)]
    unknown = [m for m in methods if not tuning.space_of(m, suite)]
    if unknown:
        with_space = dict.fromkeys([*tuning.SPACES, *(getattr(suite, "tuning_spaces", None) or {})])
        raise BenchError(f"no tuning space for {', '.join(unknown)}; methods with one: {', '.join(with_space)} "
                         f"(tuned inside their fit: {', '.join(tuning.TUNED_INSIDE)})")
    spaces = {m: tuning.space_of(m, suite) for m in methods}
    clash = [s for s in args.sets for m in methods for o in tuning.tuned_options(spaces[m])
             if s.split("=")[0] == f"{m}.{o}"]
    if clash:
        raise BenchError(f"--set {', '.join(clash)}: the protocol sweeps these options itself")
    tuning.check_spaces()
    tuning.check_spaces(spaces)
    entries, failed = {}, {}
    from bench.config import parse_sets, resolve_plan
    from methods import METHODS

    for m in methods:  # one choice per method: a method with options of its own on some model is tuned per model
        plan = resolve_plan(suite, args.profile, [m], parse_sets(args.sets), method_registry=METHODS)
        if len(plan.models) > 1 and any(m in per_method for per_method in plan.model_configs.values()):
            raise BenchError(f"bench tune: profile {args.profile!r} gives {m} options of its own on some of its models "
                             f"({', '.join(plan.models)}): tune one model at a time (--set models=NAME)")

    def sweep(m, sets, only_sets=None, out=None):
        argv = ["run", "--suite", args.suite, "--profile", args.profile, "--methods", m, "--out", str(out or args.out),
                "--device", args.device, "--no-report"]
        argv += ["--plan"] if args.plan else []
        argv += ["--data-root", args.data_root] if args.data_root else []
        argv += ["--threads", str(args.threads)] if args.threads else []
        argv += ["--quiet"] if args.quiet else []
        argv += ["--only-sets", only_sets] if only_sets else []
        argv += ["--redo-predating"] if getattr(args, "redo_predating", False) else []
        argv += [a for f in getattr(args, "plugins", []) for a in ("--plugin", f)]
        for s in sets:
            argv += ["--set", s]
        run(argv)  # a failing cell is recorded, the sweep goes on

    first = ",".join(tuning.VALIDATION_FIRST_KINDS) if args.validation_first else None

    def probe_edges(m, choices, only):
        """Fit (unless --select-only) and weigh the edge probes of ``m``'s ``choices`` (bench.tuning.edge_probes)
        among the records ``only`` admits (the choice's restrictions)."""
        from bench.store import load_records
        from bench.validity import attach_validity

        frames, tuned = {}, tuning.tuned_options(spaces[m])

        def frame(where):
            if where not in frames:
                df = load_records(where, args.suite)
                frames[where] = attach_validity(df) if len(df) else df
            return frames[where]

        home = Path(args.out)
        for c in choices:
            if not c.get("chosen_among_valid", True):
                continue  # no choice among valid fits: nothing to defend
            probes = tuning.edge_probes(spaces[m], c["chosen"])
            rest = [f"models={c['model']}", *(s for s in args.sets if not s.startswith("models="))]
            sets = [[*tuning.probe_sets(m, c["chosen"], p), *rest] for p in [None, *probes]]
            plans = [resolve_plan(suite, args.profile, [m], parse_sets(s), method_registry=METHODS) for s in sets]
            cfgs = [p.methods[m][0] for p in plans]
            # a method built on the MAP network is weighed on the networks its choice stood on; where they are
            # not kept, a probe the tune's records already weigh on them (fitted there before) is weighed
            # there; the others train networks of their own in a store beside (tuning.refit_root), with the
            # choice fitted again there on the same networks: each pair is weighed there, seed by seed
            unkept = unkept_map_networks(suite, plans[0], m, c["model"], c["seeds"], args.out) if probes else []
            scored = tuning.score_edge_probes(frame(home), m, tuned, c, probes, cfgs, **only) if unkept else None
            away = [i for i, p in enumerate(scored) if "not_scored" in p] if unkept else []
            if not args.select_only:
                if away:
                    for s in [sets[0], *(sets[i + 1] for i in away)]:
                        sweep(m, s, ",".join(tuning.VALIDATION_FIRST_KINDS), out=tuning.refit_root(args.out))
                elif not unkept:
                    for s in sets[1:]:
                        sweep(m, s, ",".join(tuning.VALIDATION_FIRST_KINDS))
                    frames.pop(home, None)  # the probes' records are new there
            if scored is None:
                scored = tuning.score_edge_probes(frame(home), m, tuned, c, probes, cfgs, **only)
            if away:
                seeds = ", ".join(map(str, unkept))
                refit = (f"the tune's MAP networks of seed(s) {seeds} are not kept: the probes and the choice "
                         f"fitted again on networks trained in <results>-edge-probes")
                why = (f"not fitted: the tune's MAP networks of seed(s) {seeds} are not kept and nothing was fitted "
                       f"in <results>-edge-probes (bench tune --probe-edges without --select-only fits the probes "
                       f"there, beside the choice fitted again)")
                beside = tuning.score_edge_probes(frame(tuning.refit_root(args.out)), m, tuned, c,
                                                  [probes[i] for i in away], [cfgs[0], *(cfgs[i + 1] for i in away)],
                                                  missing=why, refit=refit, **only)
                for i, p in zip(away, beside):
                    scored[i] = p
            c["edge_probes"] = scored

    if args.plan:
        if args.select_only:
            raise BenchError("--plan goes without --select-only (which fits nothing)")
        for m in methods:
            runs = tuning.sweep_runs(m, spaces[m])
            for sets in runs:
                sweep(m, [*sets, *args.sets], first)
            if len(runs) > 1:
                print(f"\n{m}'s {len(runs)} sweeps run one after the other: a MAP network named under several "
                      f"of them is trained once, by the first.")
            print(f"\nThen {m}'s choice on the validation split" + (
                ", the chosen configuration's other sets evaluated" if first else "") + (
                ", and one fit past each end of its space the choice sits at (--probe-edges)" if args.probe_edges
                else "") + ".\n")
        return 0
    for m in methods:
        runs = tuning.sweep_runs(m, spaces[m])
        if not args.select_only:
            for sets in runs:
                sweep(m, [*sets, *args.sets], first)
        # the candidates are the configurations of this sweep, at this profile: records of an earlier
        # space or of other fixed options (an earlier sweep in the same results) are not
        swept, plan = [], None
        for sets in runs:
            plan = resolve_plan(suite, args.profile, [m], parse_sets([*sets, *args.sets]), method_registry=METHODS)
            swept += [c for c in plan.methods.get(m, []) if c not in swept]
        # options of m held away from the profile's make another objective (e.g. the class-weighted
        # ELBO): its choice is stored under its own key, beside the profile objective's
        others = [s for s in args.sets if not s.startswith(f"{m}.")]
        profile_cfg = resolve_plan(suite, args.profile, [m], parse_sets(others), method_registry=METHODS).methods[m][0]
        fixed = tuning.fixed_options(m, args.sets, profile_cfg)
        key = tuning.entry_key(m, fixed)
        stored = tuning.stored_sets(args.out, args.suite, args.profile, key) if args.select_only else None
        if stored is not None and sorted(stored) != sorted(args.sets):
            # choosing again under other options would rewrite the entry with another budget, split or
            # candidates than its sweep had: nothing is written
            raise BenchError(f"bench tune --select-only: the stored choice of {key} was swept with "
                             f"{' '.join(f'--set {s}' for s in stored) or 'no --set'}; pass the same to choose "
                             f"again from its records (given: {' '.join(f'--set {s}' for s in args.sets) or 'none'})")
        try:
            from bench.plugins import identity_fields
            from bench.validation_split import val_split_of

            # which records a candidate's may be: this profile, the method's source, the validation split
            only = dict(profile=args.profile, later=getattr(METHODS.get(m), "LATER_OPTIONS", {}),
                        plugin_sha=identity_fields(METHODS.get(m)).get("plugin_source_sha256"),
                        val_split=val_split_of(plan.data))
            choices = select(args.out, args.suite, m, tuning.tuned_options(spaces[m]), configs=swept,
                             objective=key if fixed else "", **only)
        except BenchError as exc:
            failed[key] = str(exc)
            continue
        if args.validation_first and not args.select_only:
            # the candidates were scored on the validation and clean test sets only (the choice and the
            # verdicts read nothing else); the chosen one's other sets now, from its fitted checkpoint
            for c in choices:
                chosen = [f"{m}.{o}={tuning._values([v])}" for o, v in c["chosen"].items()]
                sweep(m, [f"models={c['model']}", *chosen, *(s for s in args.sets if not s.startswith("models="))])
        if args.probe_edges:
            probe_edges(m, choices, only)
        else:  # choosing again without probing keeps what the stored probes of the same choice found
            tuning.carry_edge_probes(choices, tuning.stored_entry(args.out, args.suite, args.profile, key))
        # the training budget the choice was made at: a choice made at another budget is not this one's
        # and the data it was fitted and validated on (the validation split: data.val_sequences)
        entries[key] = {**tuning.summarize(m, choices, spaces[m]), "train": plan.train.to_dict(), "method": m,
                        "data": suite.fit_data(plan.data), **({"fixed": fixed} if fixed else {}),
                        **({"evaluated": tuning.VALIDATION_FIRST} if args.validation_first else {})}
    path = tuning.write_tuning(args.out, args.suite, args.profile, entries, failed, args.sets)
    print(tuning.tuning_markdown(tuning.read_tuning(path)))
    print(f"tuning: {path}")
    return 0 if not failed else 1
