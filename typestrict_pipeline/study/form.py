"""A study described as a form (the CLI's ``typestrict study run``, ``study_job``'s launchpad, the
API's and the console's "new study" form).

:class:`StudyForm` is what a person fills in: the workflow, workspace, search space (as the
CLI writes it: ``NAME=V1,V2`` grids, ``NAME=LOW:HIGH`` random ranges, ``STEP=PATH`` prompt
files), folds, limits, an optional USD budget and "Min unseen steps for a re-run".
:func:`study_config` turns it into a :class:`~typestrict_pipeline.study.service.StudyConfig`;
creating the study then refuses it with the product's messages (missing limits, a USD budget
that cannot be estimated, a study already in flight).

>>> form = StudyForm(workflow="wx", start="2012-01-01", end="2012-12-01", tune_steps=20,
...     eval_steps=20, holdout_steps=20, grid=["skill=0.5,0.6"], synthetic=True,
...     max_candidates=2, max_total_steps=1000, min_unseen_steps=10)
>>> cfg = study_config(form)
>>> cfg.workflow_version, cfg.min_unseen_steps, cfg.limits().budget_micro is None
('synthetic', 10, True)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from typestrict_pipeline.errors import InputError
from typestrict_pipeline.files import loads_or_text
from typestrict_pipeline.study.limits import usd_to_micro
from typestrict_pipeline.study.service import StudyConfig
from typestrict_pipeline.study.space import RandomParam, SearchSpace
from typestrict_pipeline.values import (
    MAX_PROMPT_CHARS,
    check_text,
    command_value,
    number,
    parameter_name,
    shown,
    spells_non_finite,
)

STUDY_NAME_MAX_CHARS = 200
"""The longest study name, by every door: ``study run --name``, the API's and the console's
``name`` (``StudyFormIn``) and the launchpad (the store's column holds 256)."""


@dataclass(frozen=True)
class SpaceWords:
    """How a door names the search space in a refusal of :func:`parse_space`: the CLI its flags
    (``--grid skill``), the API its body's fields (``field 'grid.1'``, the JSON path its other
    refusals show), the console its form's fields (``"Grid"``). The rules are one; the words are
    the door's. Each text is a template: ``{key}`` the body's key (``grid``, ``random``),
    ``{field}`` the door's name of it (:attr:`grid`, :attr:`random`), ``{i}`` an entry's position
    (from 0), ``{entry}`` that entry, ``{name}`` a parameter, ``{param}`` one parameter of an
    entry, ``{end}`` ``LOW`` or ``HIGH``, ``{text}`` an entry as it is written.

    >>> CLI_SPACE.param("grid", 1, "skill"), API_SPACE.param("grid", 1, "skill"), CONSOLE_SPACE.param("grid", 1, "skill")
    ('--grid skill', "skill in field 'grid.1'", 'skill in "Grid"')
    >>> API_SPACE.example("random", "threshold=0.3:0.7")
    '"random": ["threshold=0.3:0.7"]'
    """

    grid: str
    """The grid as a whole: ``--grid``, ``field 'grid'``, ``"Grid"``."""
    random: str
    """The random ranges as a whole."""
    entry: str
    """One entry (``NAME=V1,V2`` or ``NAME=LOW:HIGH``) of ``{field}``."""
    param_of: str
    """One parameter (``{name}``) of an entry."""
    bound: str
    """``{end}`` of a random range's ``{param}``."""
    write: str
    """How ``{text}`` is written as an entry of ``{field}`` (a refusal's example)."""
    prompt_files: str = "--prompt-file"
    """The ``STEP=PATH`` prompt files as a whole (the CLI's ``--prompt-file`` and the launchpad's
    ``new_study.prompt_files`` only: the API and the console take no file)."""

    def field(self, key: str) -> str:
        """The door's name of the space's ``key`` (``grid``, ``random``, ``prompt_files``)."""
        return {"grid": self.grid, "prompt_files": self.prompt_files}.get(key, self.random)

    def at(self, key: str, i: int) -> str:
        """The entry at position ``i`` of ``key``."""
        return self.entry.format(key=key, field=self.field(key), i=i)

    def param(self, key: str, i: int, name: str) -> str:
        """Parameter ``name`` given by the entry at position ``i`` of ``key``."""
        return self.param_of.format(key=key, field=self.field(key), entry=self.at(key, i), name=name)

    def end(self, i: int, name: str, end: str) -> str:
        """The ``LOW`` or ``HIGH`` end of the random range of ``name`` (entry ``i``)."""
        return self.bound.format(param=self.param("random", i, name), end=end)

    def example(self, key: str, text: str) -> str:
        """``text`` written as an entry of ``key`` at this door."""
        return self.write.format(key=key, field=self.field(key), text=text)


CLI_SPACE = SpaceWords(grid="--grid", random="--random", entry="{field}", param_of="{field} {name}",
                       bound="{param}'s {end}", write="{field} {text}")
"""``typestrict study run``'s words."""
API_SPACE = SpaceWords(grid="field 'grid'", random="field 'random'", entry="field '{key}.{i}'",
                       param_of="{name} in {entry}", bound="the {end} of {param}",
                       write='"{key}": ["{text}"]')
"""``POST /v1/studies`` and ``POST /v1/studies/estimate``: the body's fields (``StudyFormIn``)."""
CONSOLE_SPACE = SpaceWords(grid='"Grid"', random='"Random ranges"', entry="a line of {field}",
                           param_of="{name} in {field}", bound="the {end} of {param}",
                           write="{text} as a line of {field}")
"""The console's "new study" form: its fields' labels (one entry per line)."""
LAUNCHPAD_SPACE = SpaceWords(grid="new_study.grid", random="new_study.random", entry="{field}[{i}]",
                             param_of="{name} in {entry}", bound="the {end} of {param}",
                             write='"{text}" in {field}', prompt_files="new_study.prompt_files")
"""``study_job``'s launchpad (``StudyJobConfig.new_study``): its config's paths, ``prompt_files``
included (``new_study.prompt_files[0]``).

>>> LAUNCHPAD_SPACE.at("prompt_files", 0), CLI_SPACE.at("prompt_files", 0)
('new_study.prompt_files[0]', '--prompt-file')
"""


@dataclass(frozen=True)
class StudyForm:
    """The fields of the "new study" form (see the module docstring)."""

    workflow: str
    start: str
    end: str
    tune_steps: int
    eval_steps: int
    holdout_steps: int
    workspace: str = "demo"
    dataset: str = "seattle_weather"
    step: str = "1d"
    folds: int = 3
    horizon_steps: int = 1
    grid: list[str] = field(default_factory=list)
    random: list[str] = field(default_factory=list)
    random_draws: int = 0
    seed: int = 0
    prompt_files: list[str] = field(default_factory=list)
    max_candidates: int | None = None
    max_total_steps: int | None = None
    budget_usd: str | None = None
    min_unseen_steps: int | None = None
    name: str | None = None
    synthetic: bool = False
    max_in_flight: int = 8
    standin_latency: float = 0.02


def study_config(form: StudyForm, *, words: SpaceWords = CLI_SPACE) -> StudyConfig:
    """The study configuration a form describes (the engine on the workflow's active version,
    or the synthetic workflow with ``synthetic``); its search space refused in the door's
    ``words`` (:class:`SpaceWords`).

    Raises:
        InputError: an unreadable time, step, search space or USD amount, or an unknown workflow.
    """
    from typestrict_pipeline.backtest.engine import parse_step
    from typestrict_pipeline.backtest.service import parse_time

    # The texts a study stores, checked here for every door (CLI, API, launchpad): no control
    # character, and no longer than the store's columns (PostgreSQL refuses a longer one).
    check_text(form.workflow, "a workflow name", max_chars=128)
    check_text(form.workspace, "a workspace id", max_chars=128)
    check_text(form.dataset, "a dataset name", max_chars=128)
    if form.name is not None:  # the API's bound on the field (StudyFormIn.name): one rule
        check_text(form.name, "a study name", max_chars=STUDY_NAME_MAX_CHARS)
    space = parse_space(form.grid, form.random, form.random_draws, form.seed, form.prompt_files, words=words)
    space.check_size()  # counted from the sizes, before anything is built or stored
    backend: dict[str, Any]
    if form.synthetic:
        backend = {"backend": "synthetic", "cost_per_step": 10}
        version = "synthetic"
    else:
        from typestrict_pipeline.backtest.workflows import default_registry

        wf = default_registry().active(form.workflow)
        version = wf.version_id
        original = dict(wf.prompts)
        if space.prompts:  # the version's own prompt is always one of the alternatives
            space = SearchSpace.from_json({**space.to_json(), "prompts": {
                k: [original[k], *v] if k in original else v for k, v in space.prompts.items()}})
        backend = {"backend": "engine", "setup": "typestrict_pipeline.study.setups:registered_workflow",
                   "setup_args": {"workflow": form.workflow, "dataset": form.dataset,
                                  "latency_s": form.standin_latency},
                   "max_in_flight": form.max_in_flight}
    return StudyConfig(
        workspace=form.workspace, workflow=form.workflow, workflow_version=version, space=space,
        start=parse_time(form.start, "start"), end=parse_time(form.end, "end"),
        step=parse_step(form.step), n_folds=form.folds, tune_steps=form.tune_steps,
        eval_steps=form.eval_steps, holdout_steps=form.holdout_steps,
        horizon_steps=form.horizon_steps, max_candidates=form.max_candidates,
        max_total_steps=form.max_total_steps,
        budget_micro=None if form.budget_usd is None else usd_to_micro(form.budget_usd),
        backend=backend, name=form.name or default_name(form, space), min_unseen_steps=form.min_unseen_steps,
    )


def default_name(form: StudyForm, space: SearchSpace) -> str:
    """The name a study gets when the form gives none: what it searches, on which data.

    >>> form = StudyForm("seattle_rain", "2013-01-02", "2015-12-31", 90, 60, 120)
    >>> default_name(form, parse_space(["threshold=0.4,0.5,0.6"], None, 0, 0, None))
    'seattle_rain: threshold 0.4..0.6 (3 values) on seattle_weather, 2013-01-02 to 2015-12-31'
    """
    parts = []
    for name, grid_values in space.grid.items():
        shown = [str(v) for v in grid_values]
        parts.append(f"{name} {shown[0]}..{shown[-1]} ({len(shown)} values)" if len(shown) > 2
                     else f"{name} {', '.join(shown)}")
    for name, r in space.random.items():
        parts.append(f"{name} {r.low}..{r.high} (random)")
    if space.prompts:
        parts.append("prompts of " + ", ".join(space.prompts))
    what = "; ".join(parts) or "its defaults"
    data = "the synthetic workflow" if form.synthetic else form.dataset
    text = f"{form.workflow}: {what} on {data}, {form.start[:10]} to {form.end[:10]}"
    return text if len(text) <= 120 else text[:119] + "…"


def _value(text: str, what: str) -> Any:
    return loads_or_text(text, what=what)


def grid_value(text: str, what: str) -> Any:
    """A grid value (every door; ``what`` names it in the door's words, :class:`SpaceWords`):
    :func:`typestrict_pipeline.values.command_value`, the rule of every ``NAME=VALUE`` (JSON
    when it is JSON, else the text, which is stored; a number that is not finite refused in
    every spelling), with a study's words for what to do.

    >>> grid_value("0.5", "--grid skill"), grid_value("gpt-small", "--grid model")
    (0.5, 'gpt-small')
    >>> grid_value('"inf"', "--grid mode")
    'inf'
    >>> grid_value("-Inf", "--grid skill")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected --grid skill as a finite number, got '-Inf'. Write a finite number (a study cannot try nan or infinity); to pass the word itself as text, quote it as JSON: "inf".
    """
    return command_value(text, what, fix='write a finite number (a study cannot try nan or infinity); to pass '
                                         'the word itself as text, quote it as JSON: "inf"')


def _once(name: str, seen: Mapping[str, Any], key: str, values: str, words: SpaceWords) -> None:
    """Refuse a parameter given twice (the second would silently replace the first)."""
    if name in seen:
        fix = (f"give all of its values in one, e.g. {words.example(key, f'{name}=V1,V2')}" if key == "grid"
               else f"give its range once, e.g. {words.example(key, f'{name}=LOW:HIGH')}")
        raise InputError(f"each parameter once in {words.field(key)}",
                         f"{name} twice (the second {name}={shown(values, 60)})", fix)


MAX_PROMPT_FILE_CHARS = MAX_PROMPT_CHARS
"""The longest prompt a ``--prompt-file`` may hold, the one bound of a prompt
(:data:`typestrict_pipeline.values.MAX_PROMPT_CHARS`; its file is refused above 4 bytes a character)."""


def _prompt_file(step: str, path: str) -> str:
    """The text of ``--prompt-file STEP=PATH``, read by the rule of every data file
    (:func:`typestrict_pipeline.files.read_data_file`: never a FIFO or a device, which hung or
    read without end; bounded before it is read; no NUL), in UTF-8: a name the system refuses
    (too long) or bytes that are not UTF-8 were "unexpected error ... This is a bug".

    Raises:
        InputError: naming the file, what was expected and what to do.
    """
    from typestrict_pipeline.files import read_data_file

    data = read_data_file(path, what=f"a prompt file for step {step!r}", max_bytes=4 * MAX_PROMPT_FILE_CHARS)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"a UTF-8 encoded prompt file for step {step!r}", f"bytes that are not UTF-8 on line {line}",
                         "save the file as UTF-8", file=path) from None


def parse_space(grid: list[str] | None, random: list[str] | None, draws: int, seed: int,
                prompt_files: list[str] | None, *, words: SpaceWords = CLI_SPACE) -> SearchSpace:
    """A search space from ``NAME=V1,V2`` grid entries, ``NAME=LOW:HIGH`` random ranges and
    ``STEP=PATH`` prompt files (the CLI's ``--grid``, ``--random`` and ``--prompt-file``; the
    API's and the console's ``grid`` and ``random``), refused in the door's ``words``.

    >>> parse_space(["threshold=0.4,0.6"], ["k=1:5"], 2, 7, None).to_json()["grid"]
    {'threshold': [0.4, 0.6]}
    >>> parse_space(["threshold=0.4", "threshold=0.9"], None, 0, 0, None)
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected each parameter once in --grid, got threshold twice (the second threshold='0.9'). Give all of its values in one, e.g. --grid threshold=V1,V2.
    >>> parse_space(["skill=0.5,nan"], None, 0, 0, None, words=API_SPACE)
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected skill in field 'grid.0' as a finite number, got 'nan'. Write a finite number (a study cannot try nan or infinity); to pass the word itself as text, quote it as JSON: "inf".
    """
    g: dict[str, list[Any]] = {}
    for i, item in enumerate(grid or []):
        name, sep, values = item.partition("=")
        if not sep or not values:
            raise InputError(f"{words.at('grid', i)} as NAME=V1,V2,...", repr(item),
                             f"write e.g. {words.example('grid', 'threshold=0.4,0.5')}")
        name = parameter_name(name, words.at("grid", i))
        parsed = [grid_value(v.strip(), words.param("grid", i, name)) for v in values.split(",")]
        _once(name, g, "grid", values, words)
        g[name] = parsed
    r: dict[str, RandomParam] = {}
    for i, item in enumerate(random or []):
        name, sep, rng = item.partition("=")
        low, colon, high = rng.partition(":")
        if not sep or not colon:
            raise InputError(f"{words.at('random', i)} as NAME=LOW:HIGH", repr(item),
                             f"write e.g. {words.example('random', 'threshold=0.3:0.7')}")
        name = parameter_name(name, words.at("random", i))
        what = words.param("random", i, name)
        fix = f"write two finite numbers, e.g. {words.example('random', 'threshold=0.3:0.7')}"
        for end, text in (("LOW", low.strip()), ("HIGH", high.strip())):
            if spells_non_finite(text):  # every spelling, as the grid's (JSON's NaN included)
                raise InputError(f"{words.end(i, name, end)} as a finite number", shown(text), fix)
        lo, hi = _value(low.strip(), what), _value(high.strip(), what)
        _once(name, r, "random", rng, words)
        r[name] = RandomParam(number(lo, words.end(i, name, "LOW"), fix=fix),
                              number(hi, words.end(i, name, "HIGH"), fix=fix),
                              integer=type(lo) is int and type(hi) is int)
    prompts: dict[str, list[str]] = {}
    for i, item in enumerate(prompt_files or []):  # the CLI's and the launchpad's only (no API or console field)
        step, sep, path = item.partition("=")
        if not sep:
            raise InputError(f"{words.at('prompt_files', i)} as STEP=PATH", repr(item),
                             f"write e.g. {words.example('prompt_files', 'forecast=alt.txt')}")
        text = check_text(_prompt_file(step, path).strip(), f"the prompt file {path!r}",
                          max_chars=MAX_PROMPT_FILE_CHARS, lines=True, empty=True)
        prompts.setdefault(parameter_name(step, words.at("prompt_files", i)), []).append(text)
    return SearchSpace(grid=g, random=r, random_draws=draws, seed=seed, prompts=prompts)
