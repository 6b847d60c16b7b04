"""``python -m compiler``: the same CLI as ``dnncard-compile``."""

import sys

from compiler.cli import main

sys.exit(main())
