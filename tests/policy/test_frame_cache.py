"""Frames stream from the frame cache: the same frames as the dataset holds, decoded once, re-read when the dataset
changes, never presented half-written."""

from __future__ import annotations

import shutil

import cv2
import h5py
import numpy as np
import pytest

from r2s2r.data.hdf5 import DemoReader
from r2s2r.policy.config import DatasetCfg, PolicyCfg
from r2s2r.policy import data
from r2s2r.policy.data import drop_frame_caches, frame_cache_file, load_dataset

POLICY = PolicyCfg(cameras=("right_wrist",), image_size=(24, 24))  # the fixture's 32² frames, resized


def reader_frames(path, size=(24, 24)) -> np.ndarray:
    """The oracle: every demo's right_wrist frames as the dataset reader gives them, resized as the policy sees
    them (OpenCV's area interpolation), concatenated."""
    with DemoReader(path) as reader:
        frames = [reader.load(n)["obs"]["right_wrist"] for n in reader.names]
    return np.concatenate([[cv2.resize(f, size[::-1], interpolation=cv2.INTER_AREA) for f in demo]
                           for demo in frames])


@pytest.fixture
def dataset(tmp_path, policy_datasets, monkeypatch):
    """A private copy of the real dataset and an empty frame cache."""
    monkeypatch.setenv("R2S2R_FRAME_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "real.hdf5"
    shutil.copy(policy_datasets["real"], path)
    return path


def cache_files(tmp_path) -> list:
    """The frame cache's files (its lock files aside), temporary ones included."""
    folder = tmp_path / "cache"
    return sorted(p.name for p in folder.iterdir() if p.name != data.LOCKS) if folder.exists() else []


def test_frames_are_the_readers_and_the_second_load_reads_none_from_the_dataset(dataset, tmp_path, monkeypatch):
    first = load_dataset(DatasetCfg(path=str(dataset)), POLICY)
    np.testing.assert_array_equal(first.images["right_wrist"], reader_frames(dataset))
    assert len(cache_files(tmp_path)) == 1
    asked = []
    load = DemoReader.load
    monkeypatch.setattr(DemoReader, "load", lambda self, name, only=None: asked.append(only) or load(self, name, only))
    second = load_dataset(DatasetCfg(path=str(dataset)), POLICY)
    assert asked and not any("obs/right_wrist" in (only or ("obs/right_wrist",)) for only in asked)
    np.testing.assert_array_equal(second.images["right_wrist"], first.images["right_wrist"])
    np.testing.assert_array_equal(second.actions, first.actions)
    # Another image size, or fewer demos, is another cache file.
    assert load_dataset(DatasetCfg(path=str(dataset), demos=1), POLICY).images["right_wrist"].shape[0] < len(first)
    assert load_dataset(DatasetCfg(path=str(dataset)), PolicyCfg(cameras=("right_wrist",), image_size=(16, 16))
                        ).images["right_wrist"].shape[1:] == (16, 16, 3)
    assert len(cache_files(tmp_path)) == 3


def test_a_changed_dataset_is_read_again(dataset):
    before = load_dataset(DatasetCfg(path=str(dataset)), POLICY).images["right_wrist"]
    with h5py.File(dataset, "a") as f:
        frames = f["data/demo_0/obs/right_wrist"]
        frames[...] = 255 - frames[...]
    after = load_dataset(DatasetCfg(path=str(dataset)), POLICY).images["right_wrist"]
    np.testing.assert_array_equal(after, reader_frames(dataset))
    assert not np.array_equal(after, before)


def test_an_interrupted_write_leaves_no_cache_file_and_a_damaged_one_is_written_again(dataset, tmp_path,
                                                                                      monkeypatch):
    resize, calls = data._resize, []

    def interrupted(frames, size):  # the second demo's frames never arrive
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return resize(frames, size)

    monkeypatch.setattr(data, "_resize", interrupted)
    with pytest.raises(KeyboardInterrupt):
        load_dataset(DatasetCfg(path=str(dataset)), POLICY)
    assert cache_files(tmp_path) == []
    monkeypatch.setattr(data, "_resize", resize)
    expected = reader_frames(dataset)
    np.testing.assert_array_equal(load_dataset(DatasetCfg(path=str(dataset)), POLICY).images["right_wrist"], expected)
    with DemoReader(dataset) as reader:
        file = frame_cache_file(dataset, reader.names, "right_wrist", (24, 24))
    file.write_bytes(file.read_bytes()[:-7])  # cut short, as by a full disk
    np.testing.assert_array_equal(load_dataset(DatasetCfg(path=str(dataset)), POLICY).images["right_wrist"], expected)


def test_a_cache_folder_without_room_is_named_before_and_while_writing(dataset, tmp_path, monkeypatch):
    """Too little room for the frames stops the load before anything is written; a disk that fills while writing
    (other jobs write there too) stops it with the same message and no partial file. Either names the dataset, the
    room needed, the folder and R2S2R_FRAME_CACHE; with room, the next load writes the frames."""
    import errno
    from collections import namedtuple

    from r2s2r.data.hdf5 import DatasetError

    need = reader_frames(dataset).nbytes
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(data.shutil, "disk_usage", lambda folder: usage(10 * need, 9 * need, need - 1))
    with pytest.raises(DatasetError) as info:
        load_dataset(DatasetCfg(path=str(dataset)), POLICY)
    message = str(info.value)
    assert message.startswith(f"{dataset}: the frames of cameras ['right_wrist'] at 24x24 need "), message
    assert f"{need / 1e9:.2f} GB in the frame cache {tmp_path / 'cache'}" in message and "R2S2R_FRAME_CACHE" in message
    assert cache_files(tmp_path) == []
    monkeypatch.undo()
    monkeypatch.setenv("R2S2R_FRAME_CACHE", str(tmp_path / "cache"))
    resize = data._resize

    def disk_fills(frames, size):  # the disk is full by the second demo
        if disk_fills.calls:
            raise OSError(errno.ENOSPC, "No space left on device")
        disk_fills.calls += 1
        return resize(frames, size)

    disk_fills.calls = 0
    monkeypatch.setattr(data, "_resize", disk_fills)
    with pytest.raises(DatasetError, match="R2S2R_FRAME_CACHE"):
        load_dataset(DatasetCfg(path=str(dataset)), POLICY)
    assert cache_files(tmp_path) == []
    monkeypatch.setattr(data, "_resize", resize)
    np.testing.assert_array_equal(load_dataset(DatasetCfg(path=str(dataset)), POLICY).images["right_wrist"],
                                  reader_frames(dataset))


def test_what_a_killed_writer_left_is_deleted_by_the_next_write_and_by_dropping(dataset, tmp_path):
    """A writer killed before its rename leaves its temporary file (`atomic_path`'s, named by its pid): the next
    load, which writes that cache file under the dataset's lock, deletes it, and so does dropping the dataset's
    caches; another dataset's is kept."""
    with DemoReader(dataset) as reader:
        file = frame_cache_file(dataset, reader.names, "right_wrist", (24, 24))
    file.parent.mkdir(parents=True)
    killed = file.with_name(f".{file.name}.999999.tmp")
    killed.write_bytes(b"half a frame")
    load_dataset(DatasetCfg(path=str(dataset)), POLICY)
    assert cache_files(tmp_path) == [file.name]
    killed.write_bytes(b"half a frame")
    other = file.with_name(".otherdataset_0_24x24.u8.999999.tmp")
    other.write_bytes(b"another dataset's")
    expected = file.stat().st_size + len(b"half a frame")
    assert drop_frame_caches(dataset) == expected
    assert cache_files(tmp_path) == [other.name]


def test_dropping_a_datasets_caches_keeps_the_others_and_the_next_load_writes_them_again(dataset, tmp_path):
    other = tmp_path / "other.hdf5"
    shutil.copy(dataset, other)
    load_dataset(DatasetCfg(path=str(dataset)), POLICY)
    load_dataset(DatasetCfg(path=str(dataset), demos=1), POLICY)
    load_dataset(DatasetCfg(path=str(other)), POLICY)
    kept = [name for name in cache_files(tmp_path) if (tmp_path / "cache" / name).stat().st_size]
    assert len(kept) == 3
    size = sum((tmp_path / "cache" / n).stat().st_size for n in cache_files(tmp_path))
    freed = drop_frame_caches(dataset)
    with DemoReader(other) as reader:
        assert cache_files(tmp_path) == [frame_cache_file(other, reader.names, "right_wrist", (24, 24)).name]
    assert freed == size - (tmp_path / "cache" / cache_files(tmp_path)[0]).stat().st_size > 0
    assert drop_frame_caches(dataset) == 0
    np.testing.assert_array_equal(load_dataset(DatasetCfg(path=str(dataset)), POLICY).images["right_wrist"],
                                  reader_frames(dataset))
    assert len(cache_files(tmp_path)) == 2


def test_loads_started_together_write_the_frames_once(dataset, monkeypatch):
    """Two loads of one dataset at once (two training seeds started side by side): one decodes and writes its
    frames while the other waits for them, and both read the dataset's frames."""
    import threading
    import time

    writes, write = [], data._write_frame_caches

    def slow_write(*args, **kwargs):
        writes.append(threading.get_ident())
        time.sleep(0.5)  # the other load asks while this one writes
        return write(*args, **kwargs)

    monkeypatch.setattr(data, "_write_frame_caches", slow_write)
    loaded = [None, None]

    def load(k):
        loaded[k] = load_dataset(DatasetCfg(path=str(dataset)), POLICY).images["right_wrist"]

    threads = [threading.Thread(target=load, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(writes) == 1
    expected = reader_frames(dataset)
    for frames in loaded:
        np.testing.assert_array_equal(frames, expected)
