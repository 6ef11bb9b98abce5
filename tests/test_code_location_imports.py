"""Loading the code location leaves the heavy numeric libraries for later.

Every Dagster run process (a UI launch, a daemon-launched verdict) imports the code location
before its first step; SciPy, matplotlib and pandas were about 40% of that import time
(docs/benchmarks.md, "Run start-up"). They are imported on first use instead.
"""

import subprocess
import sys
from pathlib import Path


def test_loading_the_code_location_imports_no_scipy_matplotlib_or_pandas() -> None:
    probe = (
        "import sys, typestrict_pipeline.definitions as d; "
        "assert d.defs is not None; "
        "print(sorted(m for m in ('scipy.stats', 'scipy.special', 'scipy.integrate', 'pandas', "
        "'matplotlib', 'sklearn') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_lazily_imported_module_still_works_when_used() -> None:
    import math

    from typestrict_pipeline.study.stats import expected_max_normal, luck_quantile_normal

    # E[max of 2 standard normals] = 1/sqrt(pi) (scipy.integrate, scipy.special), and the median
    # of one standard normal is 0 (scipy.stats)
    assert math.isclose(expected_max_normal(2), 1 / math.sqrt(math.pi), rel_tol=1e-9)
    assert abs(luck_quantile_normal(1, 0.5)) < 1e-12


def test_the_api_key_commands_do_not_import_the_web_server(tmp_path: Path) -> None:
    # `typestrict api-key create|list|revoke` read and write the store only; they imported FastAPI,
    # the routers and uvicorn through the `typestrict_pipeline.api` package (0.5 s of a 1.25 s
    # command). `from typestrict_pipeline.api import create_app` still works, on first use.
    probe = (
        "import sys; from typestrict_pipeline.cli import main; "
        f"url = 'sqlite:///{tmp_path}/store.db'; "
        "codes = [main(['api-key', 'create', 'acme', '--store', url, '--new-store']), "
        "main(['api-key', 'list', 'acme', '--store', url])]; "
        "print(codes, sorted(m for m in ('fastapi', 'starlette', 'uvicorn', 'jinja2') if m in sys.modules), "
        "file=sys.stderr); "
        "from typestrict_pipeline.api import create_app; print(create_app.__module__, file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stderr.strip().splitlines()[-2:] == ["[0, 0] []", "typestrict_pipeline.api.app"], out.stderr
