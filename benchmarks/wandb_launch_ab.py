"""A/B of rlkit's W&B launch-import skip (rlkit/trainer.py, docs/benchmarks.md "Start-up"): one
Pong update as the CLI runs it (collector paused during start-up), with the skip ("new") or with
W&B's own launch-input check ("old"). Time each from outside, alternating:

    for i in 1 2 3 4; do for v in old new; do
      /usr/bin/time -f "$v %e" python benchmarks/wandb_launch_ab.py $v $i > /dev/null; done; done
"""
import sys
from rlkit.startup import pause_collector
pause_collector()
import rlkit.trainer as t
if sys.argv[1] == "old":
    t._skip_unstaged_launch_inputs = lambda: None
from rlkit.cli import main
sys.exit(main(["run", "a2c-pong-local", "algo.total_steps=80", f"logging.run_name=ab-{sys.argv[1]}-{sys.argv[2]}", "logging.root=runs/wandb-launch-ab"]))
