"""Runs a script as `python scripts/<name> ...` does, without importing TensorFlow each time.

Importing bert_tf and TensorFlow takes 6-9 CPU seconds on a 2-core machine, which for the
suite's script runs was about a third of its CPU time. `run_python_script` hands each run to a
`python tests/script_runner.py` server that imported them once; the server forks a child per
run, and the child takes the run's environment, working directory, argv, sys.path[0] and
standard streams, then executes the script as __main__ (runpy), as `python script` does from
its first line. Exit status, stdout, stderr and signals come back as from a fresh process.
`start_python_script` is the same for a run the caller waits on, signals or kills while it
runs (the workers of a cluster), like `subprocess.Popen`.

What a fork cannot repeat is the import itself, so servers are kept per environment: a run whose
environment differs in a variable other than RUNTIME_VARIABLES (for example
TF_ENABLE_ONEDNN_OPTS, read when TensorFlow is imported) goes to a server started with that
environment.
"""

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading

from envs import BEHAVIOUR_VARIABLES

# Read while a script runs, never at import, so the same server serves any values: bert_tf's
# behaviour variables and the test name pytest sets for each test.
RUNTIME_VARIABLES = frozenset(BEHAVIOUR_VARIABLES) | {"PYTEST_CURRENT_TEST"}

# What every script imports; a child then finds these modules loaded.
_PRELOAD = ("bert_tf", "tensorflow", "bert_tf.runs.finetuning", "bert_tf.runs.pretraining",
            "bert_tf.tasks.classification", "bert_tf.tasks.squad", "bert_tf.tasks.ner",
            "bert_tf.tasks.multiple_choice", "bert_tf.cli.flags", "bert_tf.errors")


def _import_env(env):
    """The part of `env` a server fixes when it imports TensorFlow."""
    return {k: v for k, v in env.items() if k not in RUNTIME_VARIABLES}


class _Server:
    """One preloaded Python: requests (JSON lines) on its stdin, replies on its stdout."""

    @staticmethod
    def key_of(env):
        """Servers started with equal environments are interchangeable."""
        return frozenset(env.items())

    def __init__(self, env):
        self.key = self.key_of(env)
        self.process = subprocess.Popen([sys.executable, os.path.abspath(__file__)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        env=env, cwd=os.path.dirname(os.path.abspath(__file__)),
                                        text=True)

    def start(self, request):
        """Sends one run; returns the pid of the child that runs it."""
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return json.loads(self._reply(None))["pid"]

    def finish(self, pid):
        """Waits for the run of child `pid`; returns its exit status (negative: the signal
        that ended it, as in subprocess)."""
        return json.loads(self._reply(pid))["returncode"]

    def _reply(self, pid):
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the script server (pid {self.process.pid}) died"
                               + (f" while running child {pid}" if pid else ""))
        return line

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=30)


_MAX_IDLE = 3
_idle = {}  # _Server.key -> [idle _Server]
_lock = threading.Lock()


@atexit.register
def _close_servers():
    for servers in _idle.values():
        for server in servers:
            server.close()


def _take_server(import_env):
    with _lock:
        servers = _idle.get(_Server.key_of(import_env))
        if servers:
            return servers.pop()
    return _Server(import_env)


def _give_back(server):
    with _lock:
        # Each server holds TensorFlow's memory (~0.5 GB); keep a few.
        keep = sum(map(len, _idle.values())) < _MAX_IDLE
        if keep:
            _idle.setdefault(server.key, []).append(server)
    if not keep:
        server.close()


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:  # it has ended
        pass


def run_python_script(script, args, env, cwd=None, timeout=300, input=None):
    """Like `subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
    env=env, cwd=cwd, timeout=timeout, input=input)`.

    Returns:
      subprocess.CompletedProcess (stdout and stderr as str).
    Raises:
      subprocess.TimeoutExpired after killing the run.
    """
    command = [sys.executable, script, *args]
    server = _take_server(_import_env(env))
    with tempfile.TemporaryDirectory(prefix="script_run") as tmp:
        streams = {name: os.path.join(tmp, name) for name in ("stdin", "stdout", "stderr")}
        with open(streams["stdin"], "w") as f:
            f.write(input or "")
        pid = server.start(_request(script, args, env, cwd, **streams))
        killed = threading.Event()
        timer = threading.Timer(timeout, lambda: (killed.set(), _signal(pid, signal.SIGKILL)))
        timer.start()
        try:
            returncode = server.finish(pid)
        finally:
            timer.cancel()
        _give_back(server)
        with open(streams["stdout"]) as out, open(streams["stderr"]) as err:
            stdout, stderr = out.read(), err.read()
    if killed.is_set():
        raise subprocess.TimeoutExpired(command, timeout, stdout, stderr)
    return subprocess.CompletedProcess(command, returncode, stdout, stderr)


def _request(script, args, env, cwd, stdin, stdout, stderr):
    return dict(script=os.path.abspath(script), args=list(args), env=dict(env),
                cwd=str(cwd or os.getcwd()), stdin=stdin, stdout=stdout, stderr=stderr)


class ScriptProcess:
    """A served run in progress, with the part of `subprocess.Popen` the tests use."""

    def __init__(self, server, pid, args):
        self.args = args
        self.pid = pid
        self.returncode = None
        self._ended = threading.Event()

        def finish():
            try:
                self.returncode = server.finish(pid)
                _give_back(server)  # before wait() returns: the caller's next run may take it
            finally:
                self._ended.set()

        threading.Thread(target=finish, daemon=True).start()

    def poll(self):
        return self.returncode if self._ended.is_set() else None

    def wait(self, timeout=None):
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        if self.returncode is None:
            raise RuntimeError(f"the script server lost its run of {self.args}")
        return self.returncode

    def send_signal(self, sig):
        if not self._ended.is_set():
            _signal(self.pid, sig)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)


def start_python_script(script, args, env, cwd=None, output=None):
    """Like `subprocess.Popen([sys.executable, script, *args], stdout=open(output, "w"),
    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=cwd)`: stdout and
    stderr both go to the file `output` (os.devnull if None).

    Returns:
      a ScriptProcess: pid, poll(), wait(timeout), send_signal(), terminate(), kill(),
      returncode.
    """
    server = _take_server(_import_env(env))
    output = os.path.abspath(output) if output else os.devnull
    open(output, "w").close()  # there when this returns, as Popen's caller opened it
    pid = server.start(_request(script, args, env, cwd, stdin=os.devnull, stdout=output,
                                stderr=None))
    return ScriptProcess(server, pid, [sys.executable, script, *args])


# ------------------------------------------------------------------------------- the server


def _run_child(request, added_env):
    """In the forked child: becomes `python script args` and never returns."""
    import runpy
    import traceback

    code = 1
    try:
        for fd, name, flags in ((0, "stdin", os.O_RDONLY),
                                (1, "stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, "stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            if request[name] is None:  # stderr into stdout, as subprocess.STDOUT
                os.dup2(1, fd)
                continue
            opened = os.open(request[name], flags, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for name, value in added_env.items():  # what importing bert_tf set, as in a fresh run
            os.environ.setdefault(name, value)
        sys.argv = [request["script"], *request["args"]]
        sys.path[0] = os.path.dirname(request["script"])
        try:
            runpy.run_path(request["script"], run_name="__main__")
            code = 0
        except SystemExit as e:
            if e.code is None:
                code = 0
            elif isinstance(e.code, int):
                code = e.code
            else:
                print(e.code, file=sys.stderr)
        except BaseException:  # what the interpreter prints for an uncaught exception
            traceback.print_exc()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _serve():
    # Replies go to a private copy of stdout; fd 1 and fd 0 are the children's to take.
    requests = os.fdopen(os.dup(0), "r")
    replies = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    before = dict(os.environ)
    import importlib

    for module in _PRELOAD:
        importlib.import_module(module)
    added_env = {k: v for k, v in os.environ.items() if k not in before}
    for line in requests:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            requests.close()
            replies.close()
            _run_child(request, added_env)
        replies.write(json.dumps({"pid": pid}) + "\n")
        replies.flush()
        _, status = os.waitpid(pid, 0)
        replies.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
        replies.flush()


if __name__ == "__main__":
    _serve()
