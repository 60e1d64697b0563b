"""``python -m slurm_mig``: the same as the ``slurm-mig`` command."""

import sys

from .cli import main

sys.exit(main())
