import json

from r2s2r.datagen import make_generate_cfg
from r2s2r.datagen.runner import ChunkLog, Progress
from r2s2r.datagen.worker import ChunkResult

TASK = "R2S2R-PickSort-WorldGrounded-BehaviorUngrounded-v0"


def test_progress_reports_admitted_attempted_rejections_and_eta(tmp_path):
    cfg = make_generate_cfg(TASK, 4, 0)
    earlier = ChunkResult(0, 4, 1, {"admitted": 1, "dropped": 2, "timeout": 1})  # an earlier run's shard
    results = {0: earlier}
    log = tmp_path / "chunks.jsonl"
    log.write_text('{"chunk": 7, "adm')  # a line a crash cut short
    progress = Progress(cfg, results, enabled=False, log=ChunkLog(log))
    assert progress.status() == "of 4 attempted, 25% admission; rejected: dropped 2, timeout 1; ETA ?"
    results[1] = ChunkResult(1, 4, 2, {"admitted": 2, "wrong_bin": 2}, seconds=3.5, worker="host:12", node="n1")
    progress.chunk(results[1])
    status = progress.status()
    assert status.startswith("of 8 attempted, 38% admission; rejected: dropped 2, wrong_bin 2, timeout 1; ETA ")
    assert "?" not in status  # this run admitted two: the remaining one has an estimate
    progress.close()
    lines = log.read_text().splitlines()
    assert lines[0] == '{"chunk": 7, "adm'  # left as it was, on a line of its own
    record = json.loads(lines[1])
    assert {k: record[k] for k in ("chunk", "admitted", "attempted", "rejected", "seconds", "worker", "node")} == {
        "chunk": 1, "admitted": 2, "attempted": 4, "rejected": {"wrong_bin": 2}, "seconds": 3.5, "worker": "host:12",
        "node": "n1"}
    assert record["total"]["admitted"] == 3 and record["total"]["attempted"] == 8 and record["total"]["wanted"] == 4
    assert record["total"]["rejected"] == {"dropped": 2, "timeout": 1, "wrong_bin": 2}
    assert record["total"]["admission_rate"] == 0.375 and record["total"]["eta_s"] >= 0
