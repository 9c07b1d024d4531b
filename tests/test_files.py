"""Files a run writes survive a crash, a kill, a full disk and a damaged row: whole files are
replaced atomically, metrics logs only grow, and a resumed run keeps every row it had."""

import csv
import os

import pytest
import torch

from rlkit.infra.errors import StorageError
from rlkit.infra.files import AppendOnlyCSV, read_rows, write_atomic, write_atomic_with
from rlkit.training.trainer import AtomicCheckpointIO


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "result.json"
    write_atomic(path, "old")

    def half_then_fail(fh):
        fh.write(b"new, cut sh")
        raise OSError(28, "No space left on device")

    with pytest.raises(StorageError, match=f"cannot write {path}: No space left on device"):
        write_atomic_with(path, half_then_fail)
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


def test_a_checkpoint_that_does_not_fit_the_disk_is_not_left_under_its_name(small_fs):
    """Lightning's own writer copies a temporary file into place: on a full disk that copy stopped
    halfway leaves a cut-off update-N.ckpt (the audit found a 53 KB one)."""
    disk = small_fs(1024)
    folder = disk.path / "checkpoints"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"state_dict": {"w": torch.ones(150_000)}, "global_step": 10}, folder / "update-10.ckpt")
    assert disk.free_kib() < 500  # the next one (600 KB) cannot fit
    with pytest.raises(StorageError, match=f"cannot write {folder / 'update-20.ckpt'}: No space left on device"):
        io.save_checkpoint({"state_dict": {"w": torch.ones(150_000)}, "global_step": 20}, folder / "update-20.ckpt")
    assert sorted(p.name for p in folder.iterdir()) == ["update-10.ckpt"]
    assert torch.load(folder / "update-10.ckpt", weights_only=True)["global_step"] == 10


def test_rows_are_appended_and_a_new_column_rebuilds_the_file_beside_the_old(tmp_path):
    path = tmp_path / "metrics.csv"
    log = AppendOnlyCSV(path)
    log.write({"step": 1, "loss": 0.5})
    inode = path.stat().st_ino
    log.write({"step": 2, "loss": 0.25})
    assert path.stat().st_ino == inode  # appended, not replaced
    with open(path) as reader:  # opened before the header grows
        log.write({"step": 3, "loss": 0.125, "score_mean": 9.0})
        assert reader.read().splitlines()[0] == "loss,step"  # the old file is whole, not rewritten in place
    log.close()
    assert _rows(path) == [{"loss": "0.5", "score_mean": "", "step": "1"}, {"loss": "0.25", "score_mean": "", "step": "2"},
                           {"loss": "0.125", "score_mean": "9.0", "step": "3"}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.csv"]


def test_a_damaged_row_is_named_and_skipped_and_the_rest_kept(tmp_path, capsys):
    path = tmp_path / "metrics.csv"
    path.write_bytes(b"loss,step\r\n0.5,1\r\n0.\x00\x00\x00,2\r\n0.25,3\r\nabc,4\r\n0.125,5\r\n0.1,6\r\n0.0")
    log = AppendOnlyCSV(path, keep_up_to=5)
    err = capsys.readouterr().err
    assert f"{path} line 3: damaged row skipped" in err and f"{path} line 5: damaged row skipped" in err
    assert f"{path} line 8: damaged row skipped" in err  # the cut-off last line
    log.write({"step": 6, "loss": 0.01})
    log.close()
    assert [r["step"] for r in _rows(path)] == ["1", "3", "5", "6"]  # 6 redone after the resume point


def test_an_unreadable_header_keeps_nothing_and_says_so(tmp_path, capsys):
    path = tmp_path / "metrics.csv"
    path.write_bytes(b"\x00" * 64)
    header, rows, damaged = read_rows(path)
    assert (header, rows) == ([], [])
    assert "no readable header" in capsys.readouterr().err


def test_a_resume_with_nothing_to_drop_appends_to_the_same_file(tmp_path):
    path = tmp_path / "learner1.csv"
    log = AppendOnlyCSV(path, fields=["loss"])
    log.write({"step": 1, "loss": 1.0})
    log.close()
    inode = path.stat().st_ino
    log = AppendOnlyCSV(path, keep_up_to=1, fields=["loss"])
    log.write({"step": 2, "loss": 2.0})
    log.close()
    assert path.stat().st_ino == inode and [r["step"] for r in _rows(path)] == ["1", "2"]
    assert os.stat(path).st_size > 0
