"""Ordered, memory-bounded processing of a stream of tasks in worker processes.

`OrderedProcessPool` is what create_pretraining_data, prepare_corpus and build_vocab use to
spread their CPU-bound work (tokenizing, cleaning, sentence splitting) over `--num_workers`
processes while the parent reads the input and writes the output in order: results come
back in task order, so the output does not depend on the number of workers.
"""

import collections
import itertools

from bert_tf.errors import BertTfError

# Results processed or in flight per worker: bounds the memory of the parent process.
RESULTS_IN_FLIGHT_PER_WORKER = 2

# One processor per worker process, built once by the pool initializer (or the error that
# building it raised, re-raised by each task so the caller sees the real cause rather than a
# BrokenProcessPool).
_worker_processor = None


def _init_worker(make_processor, init_arg):
    global _worker_processor
    try:
        _worker_processor = make_processor(init_arg)
    except Exception as e:  # re-raised by _process_in_worker
        _worker_processor = e


def _process_in_worker(task):
    if isinstance(_worker_processor, Exception):
        raise _worker_processor
    return _worker_processor.process(task)


class OrderedProcessPool:
    """Runs `make_processor(init_arg).process(task)` for each task; `results()` yields the
    results in task order.

    With `num_workers` > 1 the tasks run in that many processes ("spawn": the parent may load
    TensorFlow, which must not be forked), each building its processor once. Construction
    starts the workers and submits the first tasks, so they run while the caller does other
    work. At most `RESULTS_IN_FLIGHT_PER_WORKER` results per worker are queued and tasks are
    drawn from `tasks` (any iterable, e.g. a generator over a dump) only as results are
    taken, which bounds memory. With one worker everything runs in this process.

    Built on `concurrent.futures.ProcessPoolExecutor` rather than `multiprocessing.Pool`: a
    worker that dies (killed, out of memory, a main module that cannot be re-imported) breaks
    the executor with an error instead of hanging, and `close()` never kills a worker in the
    middle of sending a result (which can leave `Pool.terminate()` waiting forever).

    Args:
      tasks: iterable of picklable tasks.
      make_processor: picklable callable (e.g. a class) building the processor from
        `init_arg`.
      init_arg: picklable argument of `make_processor`.
      num_workers: worker processes; 1 runs in this process.
      num_tasks: the number of tasks when known (no more workers than tasks are started).
      what: names the job in the error raised when a worker dies, e.g. "prepare_corpus".
      hint: what to try then, e.g. "pass a smaller --chunk_size_mb or fewer --num_workers".
    """

    def __init__(self, tasks, make_processor, init_arg, num_workers, num_tasks=None,
                 what="bert_tf", hint="pass fewer --num_workers"):
        self._tasks = iter(tasks)
        self._make_processor = make_processor
        self._init_arg = init_arg
        self._what, self._hint = what, hint
        self._executor = None
        self._pending = collections.deque()
        pool_size = num_workers if num_tasks is None else min(num_workers, num_tasks)
        self._max_pending = max(pool_size, 1) * RESULTS_IN_FLIGHT_PER_WORKER
        # Even one task goes to a worker process when several CPUs are allowed: the parent
        # then does its own work (e.g. loading TensorFlow) while the task is processed.
        if num_workers > 1 and pool_size > 0:
            import concurrent.futures
            import multiprocessing

            self._executor = concurrent.futures.ProcessPoolExecutor(
                pool_size, mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker, initargs=(make_processor, init_arg))
            try:
                self._submit()
            except BaseException:  # e.g. the task generator found bad input
                self.close()
                raise

    def _submit(self):
        room = self._max_pending - len(self._pending)
        for task in itertools.islice(self._tasks, max(room, 0)):
            self._pending.append(self._executor.submit(_process_in_worker, task))

    def results(self):
        """Yields `process(task)` for each task, in task order."""
        if self._executor is None:
            processor = self._make_processor(self._init_arg)
            for task in self._tasks:
                yield processor.process(task)
            return
        from concurrent.futures.process import BrokenProcessPool

        while self._pending:
            try:
                result = self._pending.popleft().result()
            except BrokenProcessPool as e:
                raise BertTfError(
                    f"{self._what}: a worker process died before finishing its task ({e}). "
                    f"If it ran out of memory, {self._hint}; if you call {self._what} from "
                    "your own script, put that call under `if __name__ == \"__main__\":` "
                    "(workers re-import the main module).") from e
            self._submit()
            yield result

    def close(self):
        """Cancels the tasks not started and waits for the running ones (at most one each)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
            self._pending.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
