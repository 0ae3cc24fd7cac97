import sys

from ftune.cli.main import main

sys.exit(main())
