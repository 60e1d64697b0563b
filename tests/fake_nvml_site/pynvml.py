"""``pynvml`` for a mig-run under test: tests/fake_pynvml.py set up from
``$FAKE_PYNVML_SETUP`` (put this folder and tests/ first on PYTHONPATH)."""

import fake_pynvml
from fake_pynvml import *  # noqa: F403

fake_pynvml.fake_from_env()
