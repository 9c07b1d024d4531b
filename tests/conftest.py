import os
import signal

import pytest

# W&B never talks to a server from the tests.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

# A suite started in the background (`nohup`, `&` in a non-interactive shell) inherits SIGINT
# ignored, and so would every run it starts: the Ctrl-C tests would then test nothing but fail.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def quick(tmp_path):
    """Overrides for a short, quiet run that writes under tmp_path."""
    from rlkit.testing import quick_overrides

    return quick_overrides(tmp_path)
