"""Where a run's learners go: the recipe's placement checked against the communicator's layout,
and the Lightning strategy built from both (only the core builds strategies)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from rlkit.hooks.layout import LearnerLayout, Topology
from rlkit.infra.errors import UserError


def resolve_backend(layout: LearnerLayout, recipe) -> str:
    if layout.backend != "auto":
        return layout.backend
    return "gloo" if recipe.trainer.accelerator == "cpu" else "nccl"


def check_placement(layout: LearnerLayout, recipe) -> None:
    """The one check of ``placement`` and ``trainer`` against the topology (a one-line UserError)."""
    t, p, name = recipe.trainer, recipe.placement, recipe.communication.name
    f = recipe.fault
    if f.kill_learner >= p.learners:
        raise UserError(f"fault.kill_learner: {f.kill_learner} is not allowed with placement.learners={p.learners}; "
                        f"give a learner's rank, 0 to {p.learners - 1}, or -1 for none")
    if not layout.multi:
        if p.learners != 1 or t.devices != 1 or t.num_nodes != 1:
            raise UserError(f"placement.learners / trainer.devices / trainer.num_nodes: {p.learners} / {t.devices} / "
                            f"{t.num_nodes} is not allowed with communicator {name}: it runs 1 learner on 1 device of "
                            "1 node (pick allreduce or gossip for more learners)")
        return
    if p.learners != t.devices * p.learners_per_device * t.num_nodes:
        raise UserError(f"placement.learners: {p.learners} is not allowed with trainer.devices={t.devices}, "
                        f"placement.learners_per_device={p.learners_per_device} and trainer.num_nodes={t.num_nodes}; "
                        f"{name} runs learners = devices x learners_per_device x num_nodes (on CPU, devices counts "
                        "learner processes)")
    if p.learners < layout.min_learners:
        raise UserError(f"placement.learners: {p.learners} is not allowed with communicator {name} (it needs >= "
                        f"{layout.min_learners} learners; use communicator local for one)")
    if layout.sync_every > 1 and recipe.algo.on_nonfinite == "skip":
        raise UserError(f"algo.on_nonfinite: skip is not allowed with communicator {name} (its learners meet every "
                        f"{layout.sync_every} updates; one that skips an update falls out of step); use stop")
    if p.learners_per_device > 1 and resolve_backend(layout, recipe) == "nccl":
        raise UserError(f"placement.learners_per_device: {p.learners_per_device} is not allowed with the nccl "
                        "backend (NCCL refuses two ranks on one GPU); use 1, or a gloo backend")


def build_strategy(layout: LearnerLayout, recipe) -> Any:
    """The Lightning strategy that lays the learners out (only the core calls this)."""
    from rlkit.training.strategies import (  # torch: imported late
        LearnerProcesses,
        single_device_strategy,
    )

    if not layout.multi:
        return single_device_strategy(recipe.trainer.accelerator)
    from rlkit.training.supervisor import supervised_learner

    extra = {}
    if supervised_learner():  # started by the supervisor as torchrun starts its workers
        from lightning.fabric.plugins.environments import TorchElasticEnvironment

        extra["cluster_environment"] = TorchElasticEnvironment()
    return LearnerProcesses(**extra, independent=layout.topology is Topology.INDEPENDENT,
                            own_optimizer_state=layout.own_optimizer_state and layout.topology is Topology.SYNCHRONOUS,
                            learners_per_device=recipe.placement.learners_per_device, sync_every=layout.sync_every,
                            process_group_backend=resolve_backend(layout, recipe),
                            timeout=timedelta(seconds=layout.timeout_s), child_grace_s=layout.child_grace_s)
