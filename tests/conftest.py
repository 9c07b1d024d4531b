import os

import pytest

# W&B never talks to a server from the tests.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


@pytest.fixture
def quick(tmp_path):
    """Overrides for a short, quiet run that writes under tmp_path."""
    from rlkit.testing import quick_overrides

    return quick_overrides(tmp_path)
