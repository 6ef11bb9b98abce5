"""The code location loads, and loading it touches nothing outside the process."""

import dagster as dg

from typestrict_pipeline.definitions import build_defs, defs


def test_definitions_load() -> None:
    dg.Definitions.validate_loadable(defs)


def test_building_definitions_does_no_io(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    build_defs()
    assert list(tmp_path.iterdir()) == []


def test_core_does_not_import_dagster() -> None:
    import subprocess
    import sys

    code = (
        "import sys, pkgutil, importlib, typestrict_pipeline as p\n"
        "skip = ('typestrict_pipeline.definitions',)\n"
        "for m in pkgutil.walk_packages(p.__path__, 'typestrict_pipeline.'):\n"
        "    if m.name in skip or '.migrations' in m.name or m.name.endswith('__main__'):\n"
        "        continue\n"
        "    importlib.import_module(m.name)\n"
        "bad = sorted(k for k in sys.modules if k == 'dagster' or k.startswith('dagster.'))\n"
        "print(bad[:3]); sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
