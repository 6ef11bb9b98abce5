"""The launchpad's "new study" config mirrors the core's StudyForm field for field.

Dagster's Config is a pydantic model and the core may not import Dagster, so the two classes are
kept as a deliberate mirror; this test is what stops them drifting apart.
"""

import dataclasses

from assets.studies import NewStudyConfig
from typestrict_pipeline.study.form import StudyForm

# Fields the CLI sets but the launchpad does not offer (the stand-in model's latency is a
# demo/CLI knob, not something to configure per run in the UI).
CLI_ONLY = {"standin_latency"}


def test_launchpad_offers_every_form_field_and_no_other() -> None:
    form_fields = {f.name for f in dataclasses.fields(StudyForm)} - CLI_ONLY
    assert set(NewStudyConfig.model_fields) == form_fields


def test_launchpad_defaults_match_the_form() -> None:
    for f in dataclasses.fields(StudyForm):
        if f.name in CLI_ONLY or f.name not in NewStudyConfig.model_fields:
            continue
        field = NewStudyConfig.model_fields[f.name]
        if f.default is not dataclasses.MISSING:
            assert field.default == f.default, f.name
        elif f.default_factory is not dataclasses.MISSING:
            # lists: the form defaults to [], the launchpad to None (turned into [] on creation)
            assert field.default in (None, f.default_factory()), f.name
        else:
            assert field.is_required(), f.name
