"""Flags generated from options fields (`bert_tf.cli.option_flags`): kinds, overrides, paths,
and help that says what a flag does without measurements."""

import dataclasses
import os
import re

import pytest
from absl import flags

from bert_tf import options
from bert_tf.cli import option_flags


@dataclasses.dataclass(frozen=True)
class _Toy(options._FromFlags):
    name: str | None = options.flag_field(None, "A string.")
    count: int = options.flag_field(3, "An int.", lower_bound=1)
    rate: float = options.flag_field(0.5, "A float.")
    on: bool = options.flag_field(True, "A bool.")
    names: list[str] | None = options.flag_field(None, "A list.")
    mode: str = options.flag_field("a", "An enum.", choices=["a", "b"])
    where: str | None = options.flag_field(None, "A path.", kind="path")
    not_a_flag: int = 7


def _define_and_parse(argv, **kwargs):
    fv = flags.FlagValues()
    option_flags.define_fields(_Toy, flag_values=fv, **kwargs)
    fv(["toy", *argv])
    return fv


def test_each_kind_parses_as_its_absl_flag():
    fv = _define_and_parse(["--name=x", "--count=4", "--rate=2", "--noon", "--names=p,q",
                            "--mode=b", "--where=~/data"])
    assert (fv.name, fv.count, fv.rate, fv.on, fv.names, fv.mode) == ("x", 4, 2.0, False,
                                                                      ["p", "q"], "b")
    assert fv.where == os.path.expanduser("~/data")
    assert "not_a_flag" not in fv
    with pytest.raises(flags.IllegalFlagValueError):
        _define_and_parse(["--count=0"])
    with pytest.raises(flags.IllegalFlagValueError):
        _define_and_parse(["--mode=c"])


def test_defaults_are_the_fields_or_the_scripts_overrides():
    fv = _define_and_parse([])
    assert (fv.count, fv.mode) == (3, "a")
    fv = _define_and_parse([], names=["count"], defaults=_Toy(count=9))
    assert fv.count == 9 and "mode" not in fv


def test_a_field_without_flag_metadata_is_refused():
    with pytest.raises(ValueError, match="not_a_flag"):
        _define_and_parse([], names=["not_a_flag"])


def _flag_fields():
    for value in vars(options).values():
        if isinstance(value, type) and dataclasses.is_dataclass(value):
            for field in dataclasses.fields(value):
                if "help" in field.metadata:
                    yield value, field


def test_every_flag_field_has_a_kind_and_its_default_among_its_choices():
    for options_class, field in _flag_fields():
        kind = option_flags.kind_of(field)
        if kind == "enum":
            assert field.default is None or field.default in option_flags.choices_of(field), (
                options_class.__name__, field.name)


# Timings and speed-ups belong on the benchmarks page, not in help text.
_MEASUREMENT = re.compile(r"\d\s*s on|x faster|GFLOP|\d+(\.\d+)?\s*(ms|s)\b")


def test_no_flag_help_quotes_a_measurement():
    found = [(c.__name__, f.name) for c, f in _flag_fields()
             if _MEASUREMENT.search(f.metadata["help"])]
    assert not found
