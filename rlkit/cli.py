"""The ``rlkit`` command. Recipe fields are never flags: they are ``key=value`` overrides checked by
the schema. Heavy imports (torch, Lightning, wandb, ale-py) happen inside the commands that need them."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

from rlkit.infra.errors import RunFailed, UserError
from rlkit.infra.startup import pause_collector, shorten_openmp_spin


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse's default prints usage too)
        raise UserError(f"{self.prog}: {message}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="rlkit", description="Distributed actor-critic RL with pluggable communication.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser("run", help="train with a recipe")
    run.add_argument("recipe", help="YAML path or bundled recipe name (see `rlkit recipes`)")
    run.add_argument("overrides", nargs="*", help="key=value recipe overrides, e.g. algo.lr=0.001")
    res = sub.add_parser("resume", help="continue a run from its newest checkpoint")
    res.add_argument("run_dir", help="the run's folder, e.g. runs/<name>")
    res.add_argument("overrides", nargs="*", help="key=value changes, e.g. algo.total_steps=2000000")
    show = sub.add_parser("show", help="print the merged, validated recipe")
    show.add_argument("recipe")
    show.add_argument("overrides", nargs="*")
    sub.add_parser("plugins", help="installed communicators and environment families")
    sub.add_parser("recipes", help="bundled recipes")
    ev = sub.add_parser("evaluate", help="play episodes with a checkpoint and print raw scores")
    ev.add_argument("checkpoint")
    ev.add_argument("overrides", nargs="*", metavar="env.key=value",
                    help="play in a changed env, e.g. env.atari.repeat_action_probability=0")
    ev.add_argument("--episodes", type=int, default=10)
    ev.add_argument("--greedy", action="store_true", help="take the most likely action")
    ev.add_argument("--seed", type=int, default=12345)
    ev.add_argument("--gif", help="write the first episode as an animated GIF")
    plot = sub.add_parser("plot", help="learning curves of runs to a PNG")
    plot.add_argument("run_dirs", nargs="+")
    plot.add_argument("-o", "--output", default="curves.png")
    plot.add_argument("--metric", action="append", help="metrics to plot (default: episode/score)")
    plot.add_argument("--x", default="agent_steps", help="x axis: agent_steps, frames or step")
    sw = sub.add_parser("sweep", help="every recipe x seed, several at once; resumable")
    sw.add_argument("items", nargs="*", metavar="RECIPE|key=value",
                    help="recipes (names or YAML paths), and key=value overrides applied to every run")
    sw.add_argument("--seeds", help="seeds to run, e.g. 0-4 or 0,2,5 (default 0)")
    sw.add_argument("--name", help="the sweep's folder under --root and its W&B group (default: sweep-<time>)")
    sw.add_argument("--root", default="runs", help="folder that holds sweep folders")
    sw.add_argument("--cores", type=int, help="cores the runs may keep busy together (default: all)")
    sw.add_argument("--resume", metavar="SWEEP_DIR", help="continue a sweep: keep finished runs, resume the others")
    sw.add_argument("--status", metavar="SWEEP_DIR",
                    help="every run's state (done, running, pending, failed, stopped, waiting), job, agent steps, score")
    sw.add_argument("--cancel", metavar="SWEEP_DIR",
                    help="stop the sweep's runs (each writes its interrupted.ckpt) and its SLURM jobs")
    sw.add_argument("--executor", choices=("local", "slurm"),
                    help="where the runs go: local (this machine, the default) or slurm (job arrays via submitit)")
    slurm = sw.add_argument_group("--executor slurm")
    slurm.add_argument("--partition", help="SLURM partition (default: the cluster's)")
    slurm.add_argument("--time", type=int, dest="time_min", metavar="MINUTES",
                       help="each job's time limit in minutes (default 60); a job that reaches it is requeued "
                            "and resumes its run")
    slurm.add_argument("--account", help="SLURM account")
    slurm.add_argument("--qos", help="SLURM quality of service")
    slurm.add_argument("--mem-gb", type=float, help="memory per job in GB (default: the cluster's)")
    slurm.add_argument("--array-parallelism", type=int, help="jobs of one array running at once (default 256)")
    slurm.add_argument("--sbatch", action="append", metavar="NAME=VALUE",
                       help="an extra sbatch flag for every job, e.g. --sbatch constraint=avx2 (repeatable)")
    cmp = sub.add_parser("compare", help="runs across seeds: IQM tables with 95%% CIs, curves with CI bands")
    cmp.add_argument("paths", nargs="+", metavar="PATH", help="a sweep folder, or run folders")
    cmp.add_argument("--target", type=float, help="also report the agent steps each run took to reach this score")
    cmp.add_argument("-o", "--output", metavar="DIR",
                     help="where compare.md and curves.png go (default: the sweep folder given first, else .)")
    bench = sub.add_parser("bench", help="throughput benchmarks (see docs/benchmarks.md)")
    bench.add_argument("name", nargs="?", default="peers", choices=["peers", "core"],
                       help="peers (default): rlkit vs a reference loop, the raw env and SB3; core: where one "
                       "learner's time goes")
    bench.add_argument("--env", default="pong", choices=["pong", "cartpole", "minatar-breakout", "all"])
    bench.add_argument("--steps", type=int, default=40_000, help="peers: agent steps per contender and round")
    bench.add_argument("--rounds", type=int, default=3, help="peers: interleaved rounds")
    bench.add_argument("--bf16", action="store_true", help="peers: also rlkit and the reference loop under bf16 "
                       "autocast (trainer.precision=bf16-mixed)")
    bench.add_argument("--no-sb3", dest="sb3", action="store_false", help="peers: leave Stable-Baselines3 out")
    bench.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="peers: a recipe override for every contender (repeatable)")
    bench.add_argument("--updates", type=int, default=150, help="core: updates per measurement")
    bench.add_argument("--device", default="cpu", choices=["cpu", "cuda", "all"])
    bench.add_argument("--json", help="also write the results as JSON")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parse(argv)
        if argv is None and args.command in ("run", "resume", "evaluate"):  # this process is the run's own
            pause_collector()  # until training starts (rlkit/infra/startup.py)
            shorten_openmp_spin()  # before torch is loaded
        return _COMMANDS[args.command](args) or 0
    except UserError as exc:
        print(f"rlkit: error: {exc}", file=sys.stderr)
        return 2
    except RunFailed as exc:
        from rlkit.training.supervisor import supervised_learner

        # a supervised learner's failure is one of the supervisor's facts, which says how the run ends
        who = f"learner {os.environ.get('RANK', '?')} stopped" if supervised_learner() else "run failed"
        print(f"rlkit: {who}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        _say_once("rlkit: interrupted")
        return 130
    except SystemExit as exc:
        if type(exc).__name__ != "SIGTERMException":  # Lightning's graceful SIGTERM stop
            raise
        _say_once("rlkit: stopped by SIGTERM")
        return 1


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """``rlkit sweep`` and ``rlkit evaluate`` take their key=value items on both sides of their
    options (``sweep R --seeds 0-4 algo.lr=1e-3``); argparse leaves the later ones over."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    late = {"sweep": "items", "evaluate": "overrides"}.get(args.command)
    if extra and (late is None or any(x.startswith("-") for x in extra)):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:
        setattr(args, late, getattr(args, late) + extra)
    return args


def _say_once(line: str) -> None:
    """Print from the process the user started only; the learner processes it launched run this
    CLI too (they have a LOCAL_RANK > 0, or, under a supervisor, RLKIT_STORE)."""
    from rlkit.training.supervisor import supervised_learner

    if os.environ.get("LOCAL_RANK", "0") == "0" and not supervised_learner():
        print(line, file=sys.stderr)


def _run(args) -> int:
    from rlkit.training.run import train

    result = train(args.recipe, args.overrides)
    if result.is_global_zero:  # one summary per run, not per learner process
        print(result.summary(_env_id(result.run_dir)))
    return 0


def _resume(args) -> int:
    from rlkit.training.run import resume

    result = resume(args.run_dir, args.overrides)
    if result.is_global_zero:
        print(result.summary(_env_id(result.run_dir)))
    return 0


def _env_id(run_dir) -> str:
    import yaml

    return yaml.safe_load((run_dir / "recipe.yaml").read_text())["env"]["id"]


def _show(args) -> int:
    from rlkit.config.recipes import to_yaml
    from rlkit.hooks.manager import build_plugin_manager
    from rlkit.training.run import check_recipe

    cfg, options = check_recipe(args.recipe, args.overrides, build_plugin_manager())
    print(to_yaml(cfg, options), end="")  # with every option of the communicator, its help and default
    return 0


def _plugins(args) -> int:
    from rlkit.hooks.manager import build_plugin_manager

    manager = build_plugin_manager()
    rows = []
    for name, entries in sorted(manager.communicators().items()):
        for e in entries:
            rows.append((name, f"{e.plugin.distribution} {e.plugin.version}".strip(), e.spec.summary))
    _table(("communicator", "distribution", "summary"), rows)
    families = [(e.spec.name, " ".join(e.spec.prefixes), f"{e.plugin.distribution} {e.plugin.version}".strip(),
                 e.spec.summary) for e in manager.env_families()]
    if families:
        print()
        _table(("env family", "ids", "distribution", "summary"), families)
    return 0


def _recipes(args) -> int:
    import yaml

    from rlkit.config.recipes import bundled_recipes

    rows = []
    for path in bundled_recipes():
        data = yaml.safe_load(path.read_text()) or {}
        comm = (data.get("communication") or {}).get("name", "local")
        rows.append((path.stem, (data.get("env") or {}).get("id", "?"), comm, str(path)))
    _table(("recipe", "env", "communicator", "path"), rows)
    return 0


def _table(header: tuple, rows: list[tuple]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())


def _evaluate(args) -> int:
    from rlkit.commands.evaluate import evaluate

    if args.episodes < 1:
        raise UserError(f"--episodes: {args.episodes} is not allowed; must be >= 1")
    report = evaluate(args.checkpoint, args.episodes, greedy=args.greedy, seed=args.seed, gif=args.gif,
                      overrides=args.overrides)
    print(report.summary())
    return 0


def _plot(args) -> int:
    from rlkit.commands.plot import plot_runs

    out = plot_runs(args.run_dirs, args.output, args.metric or ["episode/score"], args.x)
    print(f"wrote {out}")
    return 0


def _sweep(args) -> int:
    from rlkit.commands.sweep import sweep

    if args.status or args.cancel:
        return _sweep_status(args)

    slurm = None
    given = (args.partition, args.time_min, args.account, args.qos, args.mem_gb, args.array_parallelism, args.sbatch)
    if any(v is not None for v in given):
        if args.executor != "slurm" and not args.resume:
            raise UserError("--partition/--time/--account/--qos/--mem-gb/--array-parallelism/--sbatch: not allowed "
                            "without --executor slurm")
        from rlkit.commands.slurm import SlurmOptions

        slurm = SlurmOptions.from_cli(*given)
    return sweep(args.items, args.seeds, args.name, args.root, args.resume, args.cores, executor=args.executor,
                 slurm=slurm)


def _sweep_status(args) -> int:
    from rlkit.commands.sweep import read_plan
    from rlkit.commands.sweep_status import (
        cancel_sweep,
        run_states,
        status_table,
        sweep_folders,
    )

    flag = "--status" if args.status else "--cancel"
    if args.status and args.cancel or args.items or args.resume or args.seeds or args.name:
        raise UserError(f"sweep {flag}: give only the sweep folder")
    sweep_dir = Path(args.status or args.cancel)
    if not (sweep_dir / "sweep.json").is_file():
        raise UserError(f"sweep {flag}: {sweep_dir} is not a sweep folder (no sweep.json)")
    runs = sweep_folders(read_plan(sweep_dir), sweep_dir)
    if args.status:
        print(status_table(sweep_dir, run_states(runs, sweep_dir)))
    else:
        for line in cancel_sweep(sweep_dir, runs):
            print(line)
    return 0


def _compare(args) -> int:
    from rlkit.commands.compare import compare

    text, table, png = compare(args.paths, args.target, args.output)
    print(text)
    print(f"wrote {table} and {png}")
    return 0


def _bench(args) -> int:
    if args.name == "core":
        from rlkit.bench.core import run_core_bench

        run_core_bench(args.env, args.updates, args.device, args.json)
        return 0
    from rlkit.bench.peers import run_peers_bench

    if args.device == "all":
        raise UserError("--device: peers runs on one device (cpu or cuda)")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UserError("--device cuda: no CUDA device is visible here")
    if args.steps < 1 or args.rounds < 1:
        raise UserError(f"--steps and --rounds must be >= 1, got {args.steps} and {args.rounds}")
    run_peers_bench(args.env, args.steps, args.rounds, args.device, args.bf16, args.sb3, args.overrides, args.json)
    return 0


_COMMANDS = {"run": _run, "show": _show, "plugins": _plugins, "recipes": _recipes,
             "evaluate": _evaluate, "resume": _resume, "plot": _plot, "bench": _bench, "sweep": _sweep,
             "compare": _compare}

if __name__ == "__main__":
    sys.exit(main())
