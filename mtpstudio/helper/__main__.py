"""``python -m mtpstudio.helper`` runs the helper (the same code as ``mtpstudio-helper``)."""

import sys

from mtpstudio.helper.main import main

sys.exit(main())
