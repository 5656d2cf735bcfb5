"""The atomic TFRecord writers of bert_tf.data.record_writing: whole or nothing, any gfile path."""

import os

import pytest
import tensorflow as tf

from bert_tf.data import record_writing


def _records(path):
    return [bytes(r) for r in tf.compat.v1.io.tf_record_iterator(path)]


def test_atomic_writer_renames_on_close(tmp_path):
    path = str(tmp_path / "out.tf_record")
    with record_writing.AtomicRecordWriter(path) as writer:
        writer.write(b"one")
        writer.write(b"two")
        assert os.listdir(tmp_path) == [f"out.tf_record.tmp-{os.getpid()}"]
    assert writer.num_written == 2
    assert os.listdir(tmp_path) == ["out.tf_record"]
    assert _records(path) == [b"one", b"two"]


def test_atomic_writer_keeps_the_earlier_file_on_error(tmp_path):
    path = str(tmp_path / "out.tf_record")
    with record_writing.AtomicRecordWriter(path) as writer:
        writer.write(b"old")
    with pytest.raises(RuntimeError):
        with record_writing.AtomicRecordWriter(path) as writer:
            writer.write(b"new")
            raise RuntimeError("interrupted")
    assert os.listdir(tmp_path) == ["out.tf_record"]
    assert _records(path) == [b"old"]
    writer.close()  # after abort: a no-op, nothing renamed
    assert _records(path) == [b"old"]


def test_atomic_writer_works_on_a_non_local_filesystem():
    path = "ram://bert_tf_test/out.tf_record"
    with record_writing.AtomicRecordWriter(path) as writer:
        writer.write(b"record")
    assert tf.io.gfile.listdir("ram://bert_tf_test") == ["out.tf_record"]
    assert _records(path) == [b"record"]
    tf.io.gfile.remove(path)


def test_round_robin_writer_shards_in_turn_and_aborts_all(tmp_path):
    paths = [str(tmp_path / f"shard-{i}") for i in range(2)]
    with record_writing.RoundRobinRecordWriter(paths) as writer:
        for record in (b"r0", b"r1", b"r2"):
            writer.write(record)
    assert [_records(p) for p in paths] == [[b"r0", b"r2"], [b"r1"]]
    writer = record_writing.RoundRobinRecordWriter([p + ".new" for p in paths])
    writer.write(b"x")
    writer.abort()
    assert sorted(os.listdir(tmp_path)) == ["shard-0", "shard-1"]
