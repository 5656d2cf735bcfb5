"""Corrupt or truncated TFRecord files: found before training, named when TF hits one.

A TFRecord file is a chain of records, each `uint64 length | uint32 masked crc32c(length) |
data | uint32 masked crc32c(data)`. An interrupted copy cuts the chain inside a record; a disk
or transfer error flips bytes. Two checks cover both:

  `check_record_files(files, flag, skip_corrupt_records)`, before any graph is built, looks
  for the last record boundary in the last MiB of each file (`ends_with_whole_record`: a
  header whose length reaches exactly the end of the file and whose CRC matches; numpy, a
  few ms per file). Only a file where none is found is walked record by record
  (`scan_records`: 12 header bytes per record, the data skipped, the length's CRC checked),
  which says where the chain breaks and how many whole records come before. A truncated file
  (an interrupted copy) is always found this way.

  Damaged record data (its CRC) is only seen by TensorFlow's reader, lazily, inside
  `session.run` as a `DataLossError` ("corrupted record at 129") that names no file;
  `data_loss_message(error, files, flag)` finds the file (the one where a damaged record
  starts at that offset) and says what to do.

With `--skip_corrupt_records` every file is read once up front with TensorFlow's reader (a
full read; CRCs checked), and a file with a bad record is read only up to the last whole
record before it (its bad tail is skipped, with a warning naming the file and how many records
are skipped); a `DataLossError` met while training anyway (the file changed) ends that file's
records there (`tf.data`'s `ignore_errors`).
Files on remote file systems (gs://, ...) are not scanned up front (a seek per record would
be one request each); their errors are still named when TensorFlow meets them.
"""

import dataclasses
import os
import re
import struct

import numpy as np
from absl import logging

from bert_tf import fileio
from bert_tf.errors import BertTfError

_HEADER_BYTES = 12  # uint64 length + uint32 masked crc32c of the length.
_FOOTER_BYTES = 4  # uint32 masked crc32c of the data.


def _crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table


_CRC32C_TABLE = _crc32c_table()


def masked_crc32c(data):
    """The masked CRC-32C that TFRecord headers store (`data` is a few bytes: pure Python)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@dataclasses.dataclass(frozen=True)
class RecordScan:
    """Where a TFRecord file's chain of records ends.

    Attributes:
      path: the file.
      num_records: whole records before `bad_offset` (all of them when the file is whole).
      size: the file's size in bytes.
      bad_offset: byte offset of the first record that is cut off or has a damaged header;
        None when the chain ends exactly at the end of the file.
      problem: what is wrong at `bad_offset` ("" when whole).
    """

    path: str
    num_records: int
    size: int
    bad_offset: int | None = None
    problem: str = ""

    @property
    def whole(self):
        return self.bad_offset is None


def scan_records(path, stop_at=None):
    """Walks the record headers of the local TFRecord file `path` (see the module docstring).

    Args:
      path: the file.
      stop_at: stop at the first record that starts at or after this byte offset; the
        returned `size` is then that record's offset (None: walk to the end).

    Returns:
      A `RecordScan`.
    """
    size = fileio.file_size(path)
    offset = num_records = 0
    with fileio.open_binary(path) as f:
        while offset < size:
            if stop_at is not None and offset >= stop_at:
                return RecordScan(path, num_records, offset)
            header = f.read(_HEADER_BYTES)
            if len(header) < _HEADER_BYTES:
                return RecordScan(path, num_records, size, offset,
                                  f"the file ends inside the header of record {num_records}")
            length_bytes, length_crc = header[:8], struct.unpack("<I", header[8:])[0]
            if masked_crc32c(length_bytes) != length_crc:
                return RecordScan(path, num_records, size, offset,
                                  f"the header of record {num_records} is damaged")
            length = struct.unpack("<Q", length_bytes)[0]
            end = offset + _HEADER_BYTES + length + _FOOTER_BYTES
            if end > size:
                return RecordScan(path, num_records, size, offset,
                                  f"the file ends inside record {num_records} (it is "
                                  f"truncated: {size} of {end} bytes)")
            f.seek(length + _FOOTER_BYTES, os.SEEK_CUR)
            offset = end
            num_records += 1
    return RecordScan(path, num_records, size)


def ends_with_whole_record(path, window=1 << 20):
    """Whether the local file `path` ends exactly after a whole record (see the module
    docstring); None when no record boundary is found in the last `window` bytes but the file
    is longer (a record longer than `window`): then only `scan_records` can tell."""
    size = fileio.file_size(path)
    if size == 0:
        return True
    start = max(0, size - window)
    with fileio.open_binary(path) as f:
        f.seek(start)
        tail = f.read()
    span = len(tail) - _HEADER_BYTES - _FOOTER_BYTES + 1  # Offsets a last record can start at.
    if span > 0:
        data = np.frombuffer(tail, np.uint8).astype(np.uint64)
        lengths = np.zeros(span, np.uint64)
        for k in range(8):  # The little-endian uint64 length at every offset.
            lengths |= data[k:k + span] << np.uint64(8 * k)
        expected = np.arange(span - 1, -1, -1, dtype=np.uint64)  # Data bytes up to the end.
        for offset in np.nonzero(lengths == expected)[0][::-1]:
            offset = int(offset)
            crc = struct.unpack("<I", tail[offset + 8:offset + _HEADER_BYTES])[0]
            if masked_crc32c(tail[offset:offset + 8]) == crc:
                return True
    return False if start == 0 else None


def is_local(path):
    return "://" not in path


def corrupt_file_message(scan, flag=None):
    """The one line for a file whose chain breaks: file, byte offset, cause and the fix."""
    source = f"--{flag}: " if flag else ""
    return (f"{source}TFRecord file '{scan.path}' is corrupt at byte {scan.bad_offset} "
            f"({scan.problem}); re-create it or re-copy it, or pass --skip_corrupt_records to "
            f"use its first {scan.num_records} whole records and skip the rest.")


def check_record_files(input_files, flag="input_file", skip_corrupt_records=False):
    """Checks each local file of `input_files` before training.

    Without `skip_corrupt_records` the cheap check: the last record boundary
    (`ends_with_whole_record`), and a walk of the headers of a file that fails it, finding
    truncated files and damaged headers. With it, every file is read once with TensorFlow's
    reader (every CRC: a full read) so that a file with damaged data is cut before it too, and
    the warning can say how many records are skipped.

    Args:
      input_files: list of TFRecord paths.
      flag: the flag that named them, for the message.
      skip_corrupt_records: read a broken file up to its last whole record instead of failing.

    Returns:
      {path: number of whole records} for the files to read only partly (empty when every
      file is whole); pass it to `input_pipeline.record_input_fn` as `record_limits`.

    Raises:
      BertTfError: naming the first broken file, unless `skip_corrupt_records`.
    """
    limits = {}
    for path in input_files:
        if not is_local(path):
            continue
        try:
            if skip_corrupt_records:
                limit = _whole_records_to_read(path)
                if limit is not None:
                    limits[path] = limit
                continue
            if ends_with_whole_record(path):  # Cheap; only a file that fails it is walked.
                continue
            scan = scan_records(path)
        except OSError as e:
            raise BertTfError(f"--{flag}: cannot read '{path}' ({e.strerror or e}); check the "
                              "file and its permissions.") from None
        if not scan.whole:
            raise BertTfError(corrupt_file_message(scan, flag))
    return limits


def _whole_records_to_read(path):
    """--skip_corrupt_records: the whole records before the first bad one of `path` (None
    when it has none), with a warning naming the file and what is skipped."""
    offset = first_bad_offset(path)
    if offset is None:
        return None
    # TF names the start of a record or, for damaged data, of its data: records end before.
    before = scan_records(path, stop_at=max(offset - _HEADER_BYTES, 0))
    whole = before.num_records
    start = before.bad_offset if before.bad_offset is not None else before.size
    chain = scan_records(path)
    skipped = f"{chain.num_records - whole} records"  # Their headers still chain.
    if not chain.whole:  # Plus the cut-off or unreadable rest.
        cut = chain.size - chain.bad_offset
        skipped = f"{chain.num_records - whole + 1} record(s), the last {cut} bytes cut off"
    logging.warning("--skip_corrupt_records: '%s' is corrupt at byte %d; training on its first "
                    "%d records and skipping the rest from byte %d: %s.", path, offset,
                    whole, start, skipped)
    return whole


# ------------------------------------------------------------------- errors met while training

_OFFSET = re.compile(r"(?:corrupted|truncated) record at (\d+)")


def data_loss_offset(error):
    """The byte offset TensorFlow names in a DataLossError from a TFRecord reader, or None."""
    match = _OFFSET.search(str(error))
    return int(match.group(1)) if match else None


def record_is_bad_at(path, offset):
    """Whether a damaged record of the local file `path` is at byte `offset`: TF names the
    record's start for a damaged header or a cut record, and the start of its data for damaged
    data. Walks the headers up to there, then checks that record whole."""
    for start in (offset, offset - _HEADER_BYTES):
        if start < 0 or start >= fileio.file_size(path):
            continue
        scan = scan_records(path, stop_at=start)
        if scan.bad_offset is not None:
            if scan.bad_offset == start:
                return True
            continue
        if scan.size != start:  # The walk stepped over `start`: no record starts there.
            continue
        with fileio.open_binary(path) as f:
            f.seek(start)
            length = struct.unpack("<Q", f.read(_HEADER_BYTES)[:8])[0]
            data = f.read(length)
            footer = f.read(_FOOTER_BYTES)
        if len(footer) < _FOOTER_BYTES or masked_crc32c(data) != struct.unpack("<I", footer)[0]:
            return True
    return False


def first_bad_offset(path):
    """Reads the TFRecord file `path` with TensorFlow's reader (in C++, every CRC checked);
    returns the byte offset TF names for its first bad record (see `record_is_bad_at`), or
    None when all of it reads back."""
    import tensorflow as tf

    with tf.Graph().as_default():
        count = tf.data.TFRecordDataset(path, buffer_size=1 << 22).batch(4096).reduce(
            tf.constant(0, tf.int64), lambda n, batch: n + tf.size(batch, out_type=tf.int64))
        with tf.compat.v1.Session() as session:
            try:
                session.run(count)
            except tf.errors.DataLossError as e:
                offset = data_loss_offset(e)
                return -1 if offset is None else offset
    return None


def data_loss_message(error, input_files, flag=None):
    """The one line for a `DataLossError` that TF's reader raised while reading `input_files`.

    The error only says "corrupted record at N"; the file is the one among `input_files` where
    a damaged record starts at byte N (`record_is_bad_at`: checked only after the failure, so
    it costs nothing while training goes well).
    """
    offset = data_loss_offset(error)
    source = f"--{flag}: " if flag else ""
    fix = ("re-create it or re-copy it, or pass --skip_corrupt_records to skip the rest of a "
           "file from its first bad record" if flag else
           "delete it and run the same command again (cached features are rebuilt)")
    candidates = [path for path in input_files or ()
                  if offset is not None and is_local(path) and record_is_bad_at(path, offset)]
    where = f"at byte {offset}" if offset is not None else "somewhere"
    if len(candidates) == 1:
        named = f"TFRecord file '{candidates[0]}' is corrupt {where}"
    elif candidates:
        named = f"TFRecord files {candidates} are corrupt {where}"
    else:
        shown = list(input_files or ())[:3]
        more = "" if len(input_files or ()) <= 3 else f" (and {len(input_files) - 3} more)"
        named = f"one of the TFRecord files {shown}{more} is corrupt {where}"
    return f"{source}{named} (damaged record data); {fix}."


# ----------------------------------------------------------------------------- input datasets


def file_dataset(files, record_limits=None):
    """A dataset of (path, number of records to read; -1: all) for `files`, in order."""
    import tensorflow as tf

    limits = [(record_limits or {}).get(path, -1) for path in files]
    return tf.data.Dataset.from_tensor_slices((tf.constant(list(files), tf.string),
                                               tf.constant(limits, tf.int64)))


def file_reader(skip_corrupt_records=False):
    """The function (path, limit) -> dataset of that file's records: its first `limit`
    records and, with `skip_corrupt_records`, none after the first one TF cannot read."""
    import tensorflow as tf

    # Plain TF code: AutoGraph's conversion in `Dataset.interleave` / `flat_map` only costs.
    @tf.autograph.experimental.do_not_convert
    def read(path, limit):
        dataset = tf.data.TFRecordDataset(path).take(limit)
        # ignore_errors ends a TFRecord file's records at the first damaged one.
        return dataset.ignore_errors(log_warning=True) if skip_corrupt_records else dataset

    return read


def read_files(files, record_limits=None, skip_corrupt_records=False):
    """The records of `files` in order, like `tf.data.TFRecordDataset(files)`, each file cut
    after `record_limits[path]` records (see `check_record_files`) and, with
    `skip_corrupt_records`, at its first damaged record."""
    import tensorflow as tf

    if not record_limits and not skip_corrupt_records:
        return tf.data.TFRecordDataset(list(files))
    return file_dataset(files, record_limits).flat_map(file_reader(skip_corrupt_records))
