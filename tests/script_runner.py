"""Runs a script as `python scripts/<name> ...` does, without importing TensorFlow each time.

Importing bert_tf and TensorFlow takes 6-9 CPU seconds on a 2-core machine, which for the
suite's script runs was about a third of its CPU time. `run_python_script` hands each run to a
`python tests/script_runner.py` server that imported them once; the server forks a child per
run, and the child takes the run's environment, working directory, argv, sys.path[0] and
standard streams, then executes the script as a new __main__, as `python script` does from
its first line. Exit status, stdout, stderr and signals come back as from a fresh process.
`start_python_script` is the same for a run the caller waits on, signals or kills while it
runs (the workers of a cluster), like `subprocess.Popen`. `PythonCommands` puts a `python` on
PATH for shell command lines (the docs' blocks): `python <file>.py ...` goes to a server the
same way, with the shell's own stdin, stdout and stderr passed over a Unix socket; anything
else (`python -c`, `python -m`, another environment) runs the real interpreter.

What a fork cannot repeat is the import itself, so servers are kept per environment: a run whose
environment differs in a variable other than RUNTIME_VARIABLES (for example
TF_ENABLE_ONEDNN_OPTS, read when TensorFlow is imported) goes to a server started with that
environment.
"""

import atexit
import json
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time

from envs import BEHAVIOUR_VARIABLES

# Read while a script runs, never at import, so the same server serves any values: bert_tf's
# behaviour variables and the test name pytest sets for each test.
RUNTIME_VARIABLES = frozenset(BEHAVIOUR_VARIABLES) | {"PYTEST_CURRENT_TEST"}

# What every script imports; a child then finds these modules loaded.
_PRELOAD = ("bert_tf", "tensorflow", "bert_tf.runs.driver", "bert_tf.runs.pretraining",
            "bert_tf.tasks.classification", "bert_tf.tasks.squad", "bert_tf.tasks.ner",
            "bert_tf.tasks.multiple_choice", "bert_tf.cli.flags", "bert_tf.errors")


# What a shell sets in its children's environment; not read by an import.
SHELL_VARIABLES = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})
# The socket of a PythonCommands server, in the environment of the command lines it serves.
SOCKET_VARIABLE = "BERT_TF_TEST_PYTHON_SOCKET"


def _import_env(env):
    """The part of `env` a server fixes when it imports TensorFlow."""
    return {k: v for k, v in env.items()
            if k not in RUNTIME_VARIABLES | SHELL_VARIABLES | {SOCKET_VARIABLE}}


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


def run_python_code(code, args, env, cwd=None, timeout=300):
    """Like `subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
    text=True, env=env, cwd=cwd, timeout=timeout)`, as `run_python_script` runs a file:
    sys.argv[0] is "-c" and sys.path[0] "" (the working directory)."""
    with tempfile.TemporaryDirectory(prefix="code_run") as tmp:
        path = os.path.join(tmp, "code.py")
        with open(path, "w") as f:
            f.write(code)
        return run_python_script(path, args, env, cwd, timeout, argv0="-c", path0="")


def run_python_script(script, args, env, cwd=None, timeout=300, input=None, argv0=None,
                      path0=None):
    """Like `subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
    env=env, cwd=cwd, timeout=timeout, input=input)`; `argv0` and `path0`, if given, are the
    script's sys.argv[0] and sys.path[0] (else the script's path and directory).

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
        request = _request(script, args, env, cwd, **streams)
        request.update({key: value for key, value in (("argv0", argv0), ("path0", path0))
                        if value is not None})
        pid = server.start(request)
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


def _exec_as_main(path):
    """Runs the file at `path` (absolute) as `python path` does: a new __main__ module whose
    __file__ is `path`, with sys.argv as the caller set it (runpy would set argv[0])."""
    import builtins
    import importlib.machinery
    import types

    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=path, __cached__=None, __package__=None, __spec__=None,
                         __loader__=importlib.machinery.SourceFileLoader("__main__", path),
                         __builtins__=builtins)
    sys.modules["__main__"] = main
    with open(path, "rb") as f:
        code = compile(f.read(), path, "exec")
    exec(code, main.__dict__)


def _run_child(request, added_env, fds=None):
    """In the forked child: becomes `python script args` and never returns.

    The standard streams are the files the request names, or `fds` (stdin, stdout, stderr)
    when the caller passed its own.
    """
    import traceback

    code = 1
    try:
        if fds is None:
            fds = []
            for name, flags in (("stdin", os.O_RDONLY),
                                ("stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                ("stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
                # stderr None: into stdout, as subprocess.STDOUT
                fds.append(os.dup(fds[1]) if request[name] is None
                           else os.open(request[name], flags, 0o644))
        for fd, passed in enumerate(fds):
            os.dup2(passed, fd)
            os.close(passed)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for name, value in added_env.items():  # what importing bert_tf set, as in a fresh run
            os.environ.setdefault(name, value)
        sys.argv = [request.get("argv0", request["script"]), *request["args"]]
        sys.path[0] = request.get("path0", os.path.dirname(request["script"]))
        try:
            _exec_as_main(request["script"])
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


def _preload():
    """Imports _PRELOAD; returns the variables importing them set."""
    import importlib

    before = dict(os.environ)
    for module in _PRELOAD:
        importlib.import_module(module)
    return {k: v for k, v in os.environ.items() if k not in before}


def _serve():
    # Replies go to a private copy of stdout; fd 1 and fd 0 are the children's to take.
    requests = os.fdopen(os.dup(0), "r")
    replies = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    added_env = _preload()
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


# ------------------------------------------------------- `python` on PATH for command lines


class PythonCommands:
    """A `python` (and `python3`) for shell command lines, served by one preloaded Python.

    `python <file>.py args` runs as `run_python_script` runs a script, with the command line's
    own stdin, stdout and stderr (pipes, redirections) and exit status, and signals sent to it
    reach the script; `python -c ...`, `python -m ...` and a run whose import-time environment
    differs from `env` start the real interpreter. Use as a context manager; `env` is `env`
    with the commands first on PATH.
    """

    def __init__(self, env):
        self._dir = tempfile.mkdtemp(prefix="pycmd")  # short: a socket path has ~100 bytes
        self._socket = os.path.join(self._dir, "socket")
        bin_dir = os.path.join(self._dir, "bin")
        os.mkdir(bin_dir)
        for name in ("python", "python3"):
            path = os.path.join(bin_dir, name)
            with open(path, "w") as f:
                f.write(f"#!/bin/sh\nexec '{sys.executable}' '{os.path.abspath(__file__)}' "
                        '--client "$@"\n')
            os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        self.env = dict(env, PATH=bin_dir + os.pathsep + env.get("PATH", ""),
                        **{SOCKET_VARIABLE: self._socket})
        self._server = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--socket", self._socket],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=_import_env(self.env),
            cwd=os.path.dirname(os.path.abspath(__file__)))

    def __enter__(self):
        deadline = time.monotonic() + 60
        while not os.path.exists(self._socket):  # bound before the server imports anything
            if self._server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the command server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self._server.stdin.close()  # the server stops, killing what still runs
        self._server.wait(timeout=60)
        shutil.rmtree(self._dir, ignore_errors=True)


def _receive_request(conn):
    """A client's request (JSON, one line) and the three descriptors sent with it."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    while not data.endswith(b"\n"):
        more = conn.recv(1 << 16)
        if not more:
            break
        data += more
    return json.loads(data), fds


def _serve_commands(path):
    """`script_runner.py --socket PATH`: PythonCommands' server, until its stdin closes."""
    own_env = _import_env(dict(os.environ))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)  # before the import: clients queue while it runs
    listener.listen(16)
    added_env = _preload()
    control = sys.stdin
    running = {}  # pid of a run -> connection of the client waiting for it
    while True:
        waiting = {conn: pid for pid, conn in running.items()}
        readable, _, _ = select.select([control, listener, *waiting], [], [], 0.05)
        if control in readable and not control.readline():
            break
        for conn in readable:
            if conn in waiting:  # the client ended (nothing else is sent): so does its run
                _signal(waiting[conn], signal.SIGKILL)
        if listener in readable:
            conn, _ = listener.accept()
            request, fds = _receive_request(conn)
            if _import_env(request["env"]) != own_env:
                for fd in fds:
                    os.close(fd)
                conn.sendall(b'{"fallback": true}\n')
                conn.close()
            else:
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    for other in (listener, conn, *running.values()):
                        other.close()
                    _run_child(request, added_env, fds)
                for fd in fds:
                    os.close(fd)
                conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
                running[pid] = conn
        while running:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if not pid:
                break
            conn = running.pop(pid)
            try:
                conn.sendall(json.dumps(
                    {"returncode": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
            except OSError:  # the client is gone
                pass
            conn.close()
    for pid in running:
        _signal(pid, signal.SIGKILL)


def _client(args):
    """`python args` for PythonCommands: a served run of a .py file, else the interpreter."""
    def real_python():
        os.execv(sys.executable, [sys.executable, *args])

    served = os.environ.get(SOCKET_VARIABLE)
    if not served or not args or not args[0].endswith(".py") or not os.path.isfile(args[0]):
        real_python()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(served)
    request = json.dumps(dict(script=os.path.abspath(args[0]), argv0=args[0], args=args[1:],
                              env=dict(os.environ), cwd=os.getcwd())).encode() + b"\n"
    sent = socket.send_fds(conn, [request], [0, 1, 2])
    if sent < len(request):
        conn.sendall(request[sent:])
    replies = conn.makefile("r")
    reply = json.loads(replies.readline())
    if reply.get("fallback"):
        conn.close()
        real_python()
    pid = reply["pid"]
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda sig, _, pid=pid: _signal(pid, sig))
    line = replies.readline()
    if not line:
        sys.exit("the script server died")
    code = json.loads(line)["returncode"]
    if code < 0:  # end as the run did: by its signal
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        _client(sys.argv[2:])
    elif sys.argv[1:2] == ["--socket"]:
        _serve_commands(sys.argv[2])
    else:
        _serve()
