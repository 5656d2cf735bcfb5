"""User-facing errors and the entry-point wrapper every script uses.

Bad input (a missing file, an inconsistent config, a vocab without special
tokens, ...) raises `BertTfError` with one message that names the file or flag
and the fix. Scripts run their `main` through `run_main`, which prints that
message on one line and exits with status 2 instead of showing a traceback
(pass `--debug` to see the traceback anyway).
"""

import gc
import os
import sys


class BertTfError(ValueError):
    """An error in the user's input, with a message that says how to fix it."""


class Preempted(Exception):  # noqa: N818 (a stop, not an error)
    """Training stopped on SIGTERM / SIGINT after writing the checkpoint of `step`; scripts
    exit with 128 + `signal_number` (143 for SIGTERM, 130 for SIGINT)."""

    def __init__(self, step, signal_number):
        super().__init__(f"preempted at step {step}: checkpoint saved, run the same command to "
                         "resume")
        self.step = step
        self.signal_number = signal_number


def missing_extra(needs, extra, packages):
    """The `BertTfError` for an optional dependency that is not installed.

    Args:
      needs: what needs it, e.g. "Predictor.from_onnx needs onnxruntime".
      extra: the setup.py extra that installs it, e.g. "onnx".
      packages: the pip packages themselves, space separated.
    """
    # Quoted: zsh would glob the brackets.
    return BertTfError(f'{needs}: pip install "bert-tf[{extra}]" (or pip install {packages}).')


def short_tf_error(error):
    """The gist of a TensorFlow error for a one-line message: its first line without TF's
    internal node names ("{{function_node ...}}") and op suffixes (" [Op:...]")."""
    import re

    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", text)
    return re.sub(r"\s*\[Op:[^\]]*\].*$", "", text).strip() or type(error).__name__


def _log_through_absl_only():
    """Drops the handler TensorFlow gives its logger when it is imported before absl sets up
    logging: with it every `tensorflow` record would print twice ("INFO:tensorflow:..." and
    absl's format). Records then reach absl's handler on the root logger only."""
    import logging

    tf_logger = logging.getLogger("tensorflow")
    for handler in list(tf_logger.handlers):
        tf_logger.removeHandler(handler)
    tf_logger.propagate = True


def _placeholder(flag):
    """What to write after `--flag=` in a fix: DIR, FILE or VALUE, by the flag's name."""
    if flag.endswith("_dir"):
        return "DIR"
    if flag.endswith(("_file", "_checkpoint", "_path")):
        return "FILE"
    return "VALUE"


def flag_error_line(error):
    """The one line `error: --<flag>: <what is wrong>; <fix>` for an absl `flags.Error`
    (a required flag not given, an unknown flag, a value that does not parse)."""
    import re

    text = str(error)
    flag_name = getattr(error, "flagname", None)
    if flag_name is not None:  # flags.UnrecognizedFlagError
        suggestions = re.search(r"Did you mean: (.*?) ?\?", text)
        fix = (f"did you mean --{suggestions.group(1).split(',')[0].strip()}?" if suggestions
               else "check its spelling (--helpfull lists every flag).")
        return f"error: --{flag_name}: this script has no such flag; {fix}"
    required = re.findall(r"Flag --(\w+) must have a value other than None", text)
    if required:
        first, others = required[0], required[1:]
        line = f"error: --{first}: this flag is required; pass --{first}={_placeholder(first)}"
        if others:
            line += " (also required: " + ", ".join(f"--{name}" for name in others) + ")"
        return line + "."
    lines = text.splitlines() or [type(error).__name__]
    match = re.match(r"flag --([\w.-]+)=(.*?): (.*)$", lines[0])
    if match:
        name, value, reason = match.groups()
        return (f"error: --{name}: cannot use '{value}' ({reason}); pass a valid value "
                "(--helpfull describes every flag).")
    match = re.match(r"Missing value for flag --([\w.-]+)$", lines[0])
    if match:
        name = match.group(1)
        return f"error: --{name}: no value given; pass --{name}={_placeholder(name)}."
    return f"error: {lines[0]}; see --helpfull for the flags."


def _parse_flags(argv):
    """absl's flag parser for `app.run`, but a bad command line ends in one `error:` line and
    exit status 2 (absl prints `FATAL Flags parsing error` and exits 1)."""
    from absl import flags

    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        sys.stderr.write(flag_error_line(e) + "\n")
        sys.stderr.flush()
        sys.exit(2)


def run_main(main):
    """Runs an absl `main(argv)`, turning `BertTfError` and flag errors (a missing required
    flag, an unknown flag, a value that does not parse) into one clean line.

    Exit status 2 means bad input. `--debug` (or BERT_TF_DEBUG=1) re-raises so
    the full traceback is shown.
    """
    from absl import app

    debug = "--debug" in sys.argv or os.environ.get("BERT_TF_DEBUG") == "1"
    if "--debug" in sys.argv:
        sys.argv.remove("--debug")

    def wrapped(argv):
        _log_through_absl_only()
        try:
            status = main(argv)
            # The interpreter's last garbage collection at exit walks every object
            # TensorFlow's modules made (a second or so); frozen, they go with the process.
            gc.freeze()
            return status
        except BertTfError as e:
            if debug:
                raise
            sys.stderr.write(f"error: {e}\n")
            sys.stderr.flush()
            # os._exit skips TF's atexit handlers, which can print noise after our message.
            os._exit(2)
        except Preempted as e:
            sys.stderr.write(f"{e}\n")
            sys.stderr.flush()
            os._exit(128 + e.signal_number)

    app.run(wrapped, flags_parser=_parse_flags)
