"""``python -m mtpstudio`` runs the command line."""

import sys

from mtpstudio.cli.main import main

sys.exit(main())
