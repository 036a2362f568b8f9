"""Output paths checked before the work: a path that cannot be written is refused up front, naming it."""

import os
import subprocess
import sys

import pytest
from conftest import ROOT

from r2s2r.files import OutputError, check_output_dir, check_output_file


@pytest.mark.parametrize("check", [check_output_file, check_output_dir])
def test_a_location_the_file_system_refuses_is_refused_even_for_root(check):
    # /proc accepts no new files; os.access says it is writable for root.
    with pytest.raises(OutputError, match=r"output = '/proc/r2s2r/out': folder '/proc' is not writable"):
        check("/proc/r2s2r/out")


def test_writable_locations_pass_and_nothing_is_left_behind(tmp_path):
    assert check_output_file(tmp_path / "a" / "b.hdf5") == tmp_path / "a" / "b.hdf5"
    assert check_output_dir(tmp_path) == tmp_path
    assert check_output_dir(tmp_path / "new") == tmp_path / "new"
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_folder_is_refused(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        if os.geteuid() == 0:  # root writes into a mode-555 folder; the check must agree with what really happens
            assert check_output_dir(folder) == folder
        else:
            with pytest.raises(OutputError, match="not writable"):
                check_output_dir(folder)
    finally:
        folder.chmod(0o755)


def test_a_script_refuses_an_uncreatable_output_before_any_work():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "collect_real.py"), "--num-demos", "1",
                             "--output", "/proc/r2s2r/real.hdf5"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "/proc" in result.stderr and "not writable" in result.stderr and "Traceback" not in result.stderr


def test_an_output_whose_folders_are_missing_is_written_whole_after_they_are_made(tmp_path):
    """check_output_file passes a path whose folders do not exist yet; writing makes them, and only the finished file
    is left there."""
    from r2s2r.files import write_text_atomic

    path = tmp_path / "not" / "yet" / "report.json"
    assert check_output_file(path) == path and not path.parent.exists()
    write_text_atomic(path, "{}\n")
    assert path.read_text() == "{}\n"
    assert [p.name for p in path.parent.iterdir()] == ["report.json"]


def test_only_a_killed_writers_temporary_file_is_unfinished(tmp_path):
    """A process killed inside `atomic_path` leaves its temporary file and no output; `unfinished_writes` finds it by
    the output's name pattern, and not another file's. A write that ends, or fails, leaves nothing to find."""
    from r2s2r.files import atomic_path, unfinished_writes

    killed = (f"import os\nfrom r2s2r.files import atomic_path\n"
              f"with atomic_path({str(tmp_path / 'frames_a.u8')!r}) as tmp:\n"
              f"    open(tmp, 'wb').write(b'half')\n    os._exit(9)\n")
    assert subprocess.run([sys.executable, "-c", killed], timeout=60).returncode == 9
    with atomic_path(tmp_path / "frames_b.u8") as tmp:
        tmp.write_bytes(b"whole")
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "frames_c.u8") as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError
    left = unfinished_writes(tmp_path, "frames_*.u8")
    assert len(left) == 1 and left[0].read_bytes() == b"half" and not (tmp_path / "frames_a.u8").exists()
    assert unfinished_writes(tmp_path, "frames_a.u8") == left and unfinished_writes(tmp_path, "frames_b.u8") == []
    assert (tmp_path / "frames_b.u8").read_bytes() == b"whole"
