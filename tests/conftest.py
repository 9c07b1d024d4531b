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


def pytest_collection_modifyitems(config, items):
    """The tests that train (marked slow: seconds to minutes each) come first, in their files'
    order, the short ones after, so no minutes-long test starts last (scripts/test's worksteal
    scheduling then hands the short ones to whichever worker runs out; docs/benchmarks.md, "Test
    suite"). Every worker sorts the same way, so their collections still agree."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def quick(tmp_path):
    """Overrides for a short, quiet run that writes under tmp_path."""
    from rlkit.testing import quick_overrides

    return quick_overrides(tmp_path)


class SmallFilesystem:
    """A real tmpfs of a few MiB at ``path``, mounted for one test: writes past its size fail
    with ENOSPC as on a full disk. ``resize`` frees room as a user would; unmounted at the end."""

    def __init__(self, path, size_kib: int):
        import subprocess

        self.path = path
        path.mkdir()
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(path)],
                                 capture_output=True, text=True)
        if mounted.returncode != 0:
            pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.strip()}")

    def resize(self, size_kib: int) -> None:
        import subprocess

        subprocess.run(["mount", "-o", f"remount,size={size_kib}k", str(self.path)], check=True)

    def free_kib(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize // 1024

    def unmount(self) -> None:
        import subprocess

        subprocess.run(["umount", "-l", str(self.path)], check=False)


@pytest.fixture
def small_fs(tmp_path):
    """A factory: ``small_fs(size_kib)`` mounts a tmpfs of that size under tmp_path."""
    mounts = []

    def make(size_kib: int, name: str = "disk") -> SmallFilesystem:
        mounts.append(SmallFilesystem(tmp_path / name, size_kib))
        return mounts[-1]

    yield make
    for fs in mounts:
        fs.unmount()
