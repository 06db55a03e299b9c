"""``python -m mtpstudio`` runs the command line."""

import sys

from mtpstudio.cli import main

sys.exit(main())
