"""tests/script_runner.py runs a script as `python script` would: the same exit status,
stdout, stderr, argv, working directory, environment, stdin and import path, for each way a
script can end; and so does the `python` its PythonCommands puts on a shell's PATH."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from envs import child_env
from script_runner import PythonCommands, run_python_script, start_python_script

_SCRIPT = textwrap.dedent("""\
    import json, os, sys
    print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "name": __name__,
                      "path0": sys.path[0], "file": __file__, "stdin": sys.stdin.read(),
                      "variable": os.environ.get("RUNNER_TEST"),
                      "config": os.environ.get("TF_CONFIG")}))
    print("to stderr", file=sys.stderr)
    how = sys.argv[1]
    if how == "exit3":
        sys.exit(3)
    if how == "message":
        sys.exit("stopped: a message")
    if how == "raise":
        raise ValueError("an uncaught error")
    if how == "signal":
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGTERM)
    if how == "os_exit":
        sys.stderr.write("error: one line\\n")
        sys.stderr.flush()
        os._exit(2)
    """)


@pytest.mark.parametrize("how", ["ok", "exit3", "message", "raise", "signal", "os_exit"])
def test_a_served_run_ends_like_a_fresh_python(tmp_path, how):
    script = tmp_path / "scripts" / "probe.py"
    script.parent.mkdir()
    script.write_text("import signal\n" + _SCRIPT)
    workdir = tmp_path / "work"
    workdir.mkdir()
    env = child_env(RUNNER_TEST="value", TF_CONFIG='{"task": {}}')
    args = [how, "--flag=1"]
    fresh = subprocess.run([sys.executable, str(script), *args], capture_output=True,
                           text=True, env=env, cwd=workdir, input="typed\n", timeout=60)
    served = run_python_script(str(script), args, env=env, cwd=workdir, input="typed\n")
    assert (served.returncode, served.stdout) == (fresh.returncode, fresh.stdout)
    # The traceback names the interpreter's frames in a fresh run and runpy's when served.
    assert served.stderr.splitlines()[-1] == fresh.stderr.splitlines()[-1]
    assert served.stderr.startswith("to stderr\n")
    expected = {"ok": 0, "exit3": 3, "message": 1, "raise": 1, "signal": -signal.SIGTERM,
                "os_exit": 2}
    assert served.returncode == expected[how]


def test_a_run_past_its_timeout_is_killed(tmp_path):
    script = tmp_path / "sleep.py"
    script.write_text("import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    with pytest.raises(subprocess.TimeoutExpired):
        run_python_script(str(script), [], env=child_env(), timeout=2)
    # The server is free again.
    script.write_text("print('next')\n")
    assert run_python_script(str(script), [], env=child_env(), timeout=60).stdout == "next\n"


def test_another_import_time_environment_gets_its_own_python(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text("import os, sys\nprint(os.environ.get('TF_ENABLE_ONEDNN_OPTS'), "
                      "'tensorflow' in sys.modules)\n")
    default = run_python_script(str(script), [], env=child_env())
    off = run_python_script(str(script), [], env=child_env(TF_ENABLE_ONEDNN_OPTS="0"))
    # Both servers imported bert_tf (which sets the default "1") and TensorFlow before the run.
    assert default.stdout.split() == ["1", "True"]
    assert off.stdout.split() == ["0", "True"]


def test_a_started_run_ends_like_a_popen(tmp_path):
    """start_python_script: stdout and stderr into one file, the exit status from wait()."""
    script = tmp_path / "probe.py"
    script.write_text("import signal\n" + _SCRIPT)
    env = child_env(TF_CONFIG='{"task": {"index": 1}}')
    for how in ("ok", "exit3", "os_exit"):
        with open(tmp_path / "fresh.log", "w") as log:
            fresh = subprocess.Popen([sys.executable, str(script), how], stdout=log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env, cwd=tmp_path)
        served = start_python_script(str(script), [how], env=env, cwd=tmp_path,
                                     output=str(tmp_path / "served.log"))
        assert served.wait(timeout=60) == fresh.wait(timeout=60) == served.returncode
        assert (tmp_path / "served.log").read_text() == (tmp_path / "fresh.log").read_text()


_WAITING = textwrap.dedent("""\
    import signal, sys, time
    if sys.argv[1] == "handler":  # as run_pretraining.py's preemption handler
        signal.signal(signal.SIGTERM, lambda *_: (print("stopping", flush=True), sys.exit(143)))
    print("started", flush=True)
    time.sleep(120)
    """)


@pytest.mark.parametrize("how,sig,status", [("default", signal.SIGTERM, -signal.SIGTERM),
                                            ("handler", signal.SIGTERM, 143),
                                            ("handler", signal.SIGKILL, -signal.SIGKILL)])
def test_a_started_run_is_signalled_like_a_popen(tmp_path, how, sig, status):
    script = tmp_path / "waiting.py"
    script.write_text(_WAITING)
    log = tmp_path / "run.log"
    process = start_python_script(str(script), [how], env=child_env(), output=str(log))
    deadline = time.time() + 60
    while "started" not in log.read_text() and time.time() < deadline:
        time.sleep(0.05)
    assert process.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(timeout=0.2)
    process.send_signal(sig)
    assert process.wait(timeout=60) == status
    assert process.poll() == status
    assert log.read_text() == "started\n" + ("stopping\n" if status == 143 else "")
    process.kill()  # after the end: nothing happens, as with Popen


def _shell(command, env, cwd):
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", command], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def commands():
    env = child_env(RUNNER_TEST="value", TF_CONFIG='{"task": {}}')
    with PythonCommands(env) as served:
        yield env, served.env


@pytest.mark.parametrize("how", ["ok", "exit3", "message", "raise", "signal", "os_exit"])
def test_a_command_line_python_ends_like_a_fresh_python(tmp_path, commands, how):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "probe.py").write_text("import signal\n" + _SCRIPT)
    # A pipe into stdin, stdout into the shell's pipe, stderr into a file; then the status.
    command = (f"printf 'typed\\n' | python scripts/probe.py {how} --flag=1 2> err.txt "
               "|| echo status $?")
    env, served_env = commands
    fresh_env = dict(env, PATH=os.path.dirname(sys.executable) + os.pathsep + env["PATH"])
    fresh = _shell(command, fresh_env, tmp_path)
    fresh_err = (tmp_path / "err.txt").read_text()
    served = _shell(command, served_env, tmp_path)
    served_err = (tmp_path / "err.txt").read_text()
    assert json.loads(served.stdout.splitlines()[0])["argv"] == ["scripts/probe.py", how,
                                                                 "--flag=1"]
    assert served.stdout == fresh.stdout and served.returncode == fresh.returncode == 0
    assert served_err.splitlines()[-1] == fresh_err.splitlines()[-1]
    expected = {"ok": None, "exit3": "3", "message": "1", "raise": "1", "signal": "143",
                "os_exit": "2"}[how]
    assert served.stdout.splitlines()[1:] == ([f"status {expected}"] if expected else [])


def test_a_command_line_python_is_served_only_a_script_in_its_environment(tmp_path, commands):
    (tmp_path / "probe.py").write_text("import sys\nprint('tensorflow' in sys.modules)\n")
    _, served_env = commands
    lines = ["python probe.py",  # served: the server imported TensorFlow
             "python -c 'import sys; print(\"tensorflow\" in sys.modules)'",
             "TF_ENABLE_ONEDNN_OPTS=0 python probe.py"]  # another import-time environment
    served = _shell("; ".join(lines), served_env, tmp_path)
    assert served.stdout.split() == ["True", "False", "False"], served.stderr


def test_a_command_line_python_passes_signals_to_its_script(tmp_path, commands):
    (tmp_path / "waiting.py").write_text(_WAITING)
    _, served_env = commands
    command = ("python waiting.py handler > run.log & pid=$!; "
               "until grep -q started run.log; do sleep 0.05; done; "
               "kill -TERM $pid; wait $pid || echo status $?")
    served = _shell(command, served_env, tmp_path)
    assert served.stdout == "status 143\n", served.stderr
    assert (tmp_path / "run.log").read_text() == "started\nstopping\n"
