"""The ASGI app of the service: Laneway's own app, with the example workflows registered.

`python -m app` (what `make run` runs) serves `build` through `laneway serve`, which checks
the bind address first; `uvicorn --factory app.main:create` serves the same app directly.
"""

import os
from dataclasses import replace

from starlette.applications import Starlette

from laneway import Settings
from laneway.api import create_app

EXAMPLES = "app.examples"


def build(settings: Settings) -> Starlette:
    """Laneway's app for `settings`; the examples are its workflows unless LANEWAY_WORKFLOWS
    names others."""
    return create_app(replace(settings, workflow_modules=settings.workflow_modules or (EXAMPLES,)))


def create() -> Starlette:
    """The app for this process's environment (`uvicorn --factory app.main:create`)."""
    return build(Settings.from_env(os.environ))
